//! Criterion micro-benchmarks of the per-packet building blocks:
//! `cargo bench -p sluice-bench --bench micro`.
#![allow(missing_docs)] // criterion_group! generates undocumented items.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use sluice_state::{Key, LocalStore, Namespace, Ops, StateStore};
use sluice_wire::{build, checksum, parse::parse_frame, rewrite};

fn wire(c: &mut Criterion) {
    let small = build::tcp_v4(
        [10, 0, 0, 1],
        [192, 0, 2, 1],
        1234,
        80,
        1,
        2,
        0x18,
        &[7u8; 10],
    );
    let big = build::tcp_v4(
        [10, 0, 0, 1],
        [192, 0, 2, 1],
        1234,
        80,
        1,
        2,
        0x18,
        &[7u8; 1460],
    );
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse_frame_64B", |b| {
        b.iter(|| parse_frame(black_box(&small)).unwrap())
    });
    g.bench_function("parse_frame_1514B", |b| {
        b.iter(|| parse_frame(black_box(&big)).unwrap())
    });
    let m = parse_frame(&small).unwrap();
    g.bench_function("symmetric_hash", |b| {
        b.iter(|| black_box(&m.flow).symmetric_hash())
    });
    g.bench_function("rewrite_src_incremental", |b| {
        let mut f = small.clone();
        let mut mm = m;
        let mut port = 0u16;
        b.iter(|| {
            port = port.wrapping_add(1);
            rewrite::set_endpoint(
                &mut f,
                &mut mm,
                rewrite::Endpoint::Src,
                sluice_wire::IpAddr::V4([203, 0, 113, 1]),
                port,
            )
            .unwrap()
        })
    });
    g.throughput(Throughput::Bytes(1460));
    g.bench_function("checksum_full_1460B", |b| {
        b.iter(|| checksum::checksum(black_box(&big[54..])))
    });
    g.finish();
}

fn state(c: &mut Criterion) {
    let mut g = c.benchmark_group("state_local");
    let ns = Namespace(1);
    let mut store = LocalStore::new();
    let mut ops = Ops::new();
    for i in 0..100_000u32 {
        ops.put(Key::new(ns, 0, &i.to_be_bytes()), &[1u8; 16]);
    }
    store.execute(&mut ops).unwrap();
    g.throughput(Throughput::Elements(32));
    g.bench_function("multi_get_32", |b| {
        let mut i = 0u32;
        b.iter(|| {
            ops.clear();
            for _ in 0..32 {
                i = (i + 7919) % 100_000;
                ops.get(Key::new(ns, 0, &i.to_be_bytes()));
            }
            store.execute(&mut ops).unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, wire, state);
criterion_main!(benches);
