use super::*;
use sluice_nf::{Ctx, NfError};
use sluice_packet::PacketPool;
use sluice_state::{LocalStore, Ops, Ownership};
use sluice_wire::build;

/// Drops UDP to port 9 and counts the packets it saw, with one store read per batch.
struct DropDiscard {
    ns: Namespace,
    seen: u64,
    ops: Ops,
}

impl NetworkFunction for DropDiscard {
    fn kind(&self) -> &'static str {
        "drop_discard"
    }
    fn namespace(&self) -> Namespace {
        self.ns
    }
    fn process(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        self.ops.clear();
        self.ops.get(sluice_state::Key::new(self.ns, 0, b"x"));
        store.execute(&mut self.ops)?;
        for p in batch.pkts.iter_mut().filter(|p| p.is_live()) {
            self.seen += 1;
            if p.meta.flow.dst_port == 9 {
                p.drop_by(ctx.stage, "discard_port");
            }
        }
        Ok(())
    }
    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        out.push(("seen", self.seen));
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("drop_discard", |_, ns, _| {
        Ok(Box::new(DropDiscard {
            ns,
            seen: 0,
            ops: Ops::new(),
        }))
    });
    r
}

#[test]
fn verdicts_stats_and_malformed_frames() {
    let spec = ChainSpec::from_str(
        "name: t\nfunctions:\n  - type: drop_discard\n  - type: drop_discard\n    name: second\n",
        Path::new("t.yaml"),
    )
    .unwrap();
    let mut chain = Chain::from_spec(&spec, Path::new("."), &registry(), Sharing::Shared).unwrap();
    let mut pool = PacketPool::new(64);
    let mut batch = Batch::with_capacity(8);
    let frames = [
        build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 9, b"x"),
        build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 53, b"x"),
        vec![0u8; 10],
        {
            let mut f = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 53, b"x");
            f[14 + 8] ^= 0xff; // corrupt IPv4 header checksum
            f
        },
    ];
    for f in &frames {
        assert!(batch.push_frame(&mut pool, f, 1, 0));
    }
    let mut store = LocalStore::new();
    chain.process(&mut batch, &mut store);
    let v: Vec<_> = batch.pkts.iter().map(|p| p.verdict).collect();
    assert!(matches!(v[0], Verdict::Drop(r) if r.stage == 0 && r.reason == "discard_port"));
    assert_eq!(v[1], Verdict::Forward);
    assert!(matches!(v[2], Verdict::Drop(r) if r.stage == PARSE_STAGE && r.reason == "truncated"));
    assert!(
        matches!(v[3], Verdict::Drop(r) if r.stage == PARSE_STAGE && r.reason == "bad_ip_header")
    );
    let s = chain.stats();
    assert_eq!(
        (s.packets, s.forwarded, s.dropped, s.malformed_total()),
        (4, 1, 1, 2)
    );
    assert_eq!((s.stages[0].packets_in, s.stages[0].packets_out), (2, 1));
    assert_eq!((s.stages[1].packets_in, s.stages[1].packets_out), (1, 1));
    assert_eq!(s.stages[0].counters, vec![("seen", 2)]);
    // One store round trip per function per batch, however many packets.
    assert_eq!(store.counters().round_trips, 2);
}

/// `verify_checksums` decides what the chain refuses before its functions run,
/// shared or unshared: a header checksum zeroed by a sender's offload, a TCP
/// payload changed without fixing its checksum.
#[test]
fn verify_checksums_setting_decides_what_is_malformed() {
    let zeroed = {
        let mut f = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 53, b"x");
        f[14 + 10] = 0;
        f[14 + 11] = 0;
        f
    };
    let bad_tcp = {
        let mut f = build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 80, 1, 0, 0x18, b"GET /");
        let last = f.len() - 1;
        f[last] ^= 0xff;
        f
    };
    let run = |setting: &str, sharing: Sharing| {
        let text = format!(
            "name: t\nfunctions:\n  - type: drop_discard\nsettings:\n  verify_checksums: {setting}\n"
        );
        let spec = ChainSpec::from_str(&text, Path::new("t.yaml")).unwrap();
        let mut chain = Chain::from_spec(&spec, Path::new("."), &registry(), sharing).unwrap();
        let mut pool = PacketPool::new(8);
        let mut batch = Batch::with_capacity(4);
        for f in [&zeroed, &bad_tcp] {
            assert!(batch.push_frame(&mut pool, f, 1, 0));
        }
        chain.process(&mut batch, &mut LocalStore::new());
        batch
            .pkts
            .iter()
            .map(|p| match p.verdict {
                Verdict::Drop(r) => r.reason,
                _ => "forward",
            })
            .collect::<Vec<_>>()
    };
    for sharing in [Sharing::Shared, Sharing::Unshared] {
        assert_eq!(run("ipv4", sharing), ["bad_ip_header", "forward"]);
        assert_eq!(run("all", sharing), ["bad_ip_header", "bad_l4_checksum"]);
        assert_eq!(run("none", sharing), ["forward", "forward"]);
    }
    let e = ChainSpec::from_str(
        "name: t\nfunctions:\n  - type: drop_discard\nsettings:\n  verify_checksums: some\n",
        Path::new("t.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("verify_checksums") && e.contains("ipv4"), "{e}");
}

#[test]
fn workers_default_to_one_and_out_of_range_counts_are_refused() {
    let p = Path::new("w.yaml");
    let with = |w: &str| {
        ChainSpec::from_str(
            &format!("name: t\nfunctions:\n  - type: pass\nsettings:\n  workers: {w}\n"),
            p,
        )
    };
    assert_eq!(with("4").unwrap().settings.workers, 4);
    let plain = ChainSpec::from_str("name: t\nfunctions:\n  - type: pass\n", p).unwrap();
    assert_eq!(plain.settings.workers, 1);
    for bad in ["0", "65"] {
        let e = with(bad).unwrap_err().to_string();
        assert!(e.contains("settings.workers") && e.contains(bad), "{e}");
    }
}

#[test]
fn spec_errors_name_the_problem() {
    let p = Path::new("c.yaml");
    let e = ChainSpec::from_str("name: a\nfunctions: []\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least one function"), "{e}");
    let e = ChainSpec::from_str("name: a\nfunctions:\n  - name: x\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("functions[0]: missing `type`"), "{e}");
    let e = ChainSpec::from_str("name: a\nfunctions:\n  - type: x\n  - type: x\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("used twice"), "{e}");
    let e = ChainSpec::from_str("name: a\nfunctoins: []\n", p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("c.yaml") && e.contains("unknown field `functoins`"),
        "{e}"
    );
    let e = ChainSpec::from_str("name: [\n", p).unwrap_err().to_string();
    assert!(e.contains("line"), "{e}");
    let spec = ChainSpec::from_str("name: a\nfunctions:\n  - type: nope\n", p).unwrap();
    let e = Chain::from_spec(&spec, Path::new("."), &registry(), Sharing::Shared)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("unknown function type `nope`") && e.contains("drop_discard"),
        "{e}"
    );
}

#[test]
fn namespaces_are_stable_and_distinct() {
    assert_eq!(namespace_of("a", "fw"), namespace_of("a", "fw"));
    assert_ne!(namespace_of("a", "fw"), namespace_of("b", "fw"));
    assert_ne!(namespace_of("a", "fw"), namespace_of("a", "ips"));
}

#[test]
fn capacity_budget_drops_what_exceeds_it() {
    let spec = ChainSpec::from_str(
        "name: t\nfunctions:\n  - type: drop_discard\nsettings:\n  capacity: { pps: 10000, burst_ms: 1 }\n",
        Path::new("t.yaml"),
    )
    .unwrap();
    let mut chain = Chain::from_spec(&spec, Path::new("."), &registry(), Sharing::Shared).unwrap();
    let mut pool = PacketPool::new(64);
    let mut store = LocalStore::new();
    let f = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 53, b"x");
    // 20,000 packets evenly over one second of trace time: twice the budget.
    let mut ts = 1_000_000_000u64;
    for _ in 0..(20_000 / 16) {
        let mut batch = Batch::with_capacity(16);
        for _ in 0..16 {
            ts += 50_000;
            batch.push_frame(&mut pool, &f, ts, 0);
        }
        chain.process(&mut batch, &mut store);
        batch.recycle(&mut pool);
    }
    let s = chain.stats();
    assert!(
        (9_900..=10_100).contains(&s.forwarded),
        "about 10k admitted: {}",
        s.forwarded
    );
    assert_eq!(s.forwarded + s.over_capacity, 20_000);
    let e = ChainSpec::from_str(
        "name: t\nfunctions: [{type: x}]\nsettings: {capacity: {}}\n",
        Path::new("t.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("settings.capacity: give pps, mbps or both"),
        "{e}"
    );
}

/// Counts packets in one flow-owned record: a cached read and a deferred write per
/// batch.
struct OwnedCount {
    ns: Namespace,
    ops: Ops,
}

impl NetworkFunction for OwnedCount {
    fn kind(&self) -> &'static str {
        "owned_count"
    }
    fn namespace(&self) -> Namespace {
        self.ns
    }
    fn process(
        &mut self,
        batch: &mut Batch,
        _ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        let key = sluice_state::Key::new(self.ns, 0, b"n");
        self.ops.clear();
        let g = self.ops.get_owned(key, 7);
        store.execute(&mut self.ops)?;
        let n = self.ops.decode::<u64>(g)?.unwrap_or(0) + batch.len() as u64;
        self.ops.clear();
        self.ops.put_value_deferred(key, &n, 7);
        store.execute(&mut self.ops)?;
        Ok(())
    }
}

fn owned_chain() -> Chain {
    let f: Box<dyn NetworkFunction> = Box::new(OwnedCount {
        ns: Namespace(42),
        ops: Ops::new(),
    });
    Chain::new("owned", vec![f], None, Sharing::Shared, 1_000_000)
}

fn feed(chain: &mut Chain, store: &mut dyn StateStore, ts: u64) {
    let mut pool = PacketPool::new(4);
    let mut batch = Batch::with_capacity(4);
    let f = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 53, b"x");
    batch.push_frame(&mut pool, &f, ts, 0);
    chain.process(&mut batch, store);
}

fn stored(store: &mut LocalStore) -> Option<u64> {
    let mut ops = Ops::new();
    let g = ops.get(sluice_state::Key::new(Namespace(42), 0, b"n"));
    store.execute(&mut ops).unwrap();
    ops.decode::<u64>(g).unwrap()
}

#[test]
fn a_lease_caches_and_revocation_flushes() {
    let mut store = LocalStore::new();
    let mut chain = owned_chain();
    chain
        .set_ownership(Some(Ownership::all(1, u64::MAX)), &mut store)
        .unwrap();
    for ts in 1..=10 {
        feed(&mut chain, &mut store, ts);
    }
    // One miss, then nothing reached the store: the counter is deferred.
    assert_eq!(store.counters().round_trips, 1);
    assert_eq!(stored(&mut store), None);
    assert_eq!(chain.cache_stats().unwrap().hits, 9);
    chain.set_ownership(None, &mut store).unwrap();
    assert_eq!(
        stored(&mut store),
        Some(10),
        "revocation sends deferred writes"
    );
    assert!(chain.cache_stats().is_none());
    // Without a lease every batch goes to the store again.
    let before = store.counters().round_trips;
    feed(&mut chain, &mut store, 11);
    assert_eq!(store.counters().round_trips, before + 2);
    assert_eq!(stored(&mut store), Some(11));
}

#[test]
fn deferred_writes_are_bounded_in_age_and_an_expired_lease_ends_caching() {
    let mut store = LocalStore::new();
    let mut chain = owned_chain();
    chain
        .set_ownership(Some(Ownership::all(1, 10_000_000)), &mut store)
        .unwrap();
    feed(&mut chain, &mut store, 1);
    feed(&mut chain, &mut store, 2);
    assert_eq!(stored(&mut store), None);
    // 1 ms later (the default bound) a tick sends them.
    chain.tick(1_000_001, &mut store);
    assert_eq!(stored(&mut store), Some(2));
    feed(&mut chain, &mut store, 1_000_002);
    // The lease runs out: caching stops by itself, the unsent write is lost (as in
    // a crash), and the chain is back to "own nothing".
    feed(&mut chain, &mut store, 10_000_000);
    assert!(chain.ownership().is_none());
    assert_eq!(chain.cache_stats(), None);
    assert_eq!(
        stored(&mut store),
        Some(3),
        "the deferred third count was lost; the fourth packet counted on the stored two"
    );
}

/// Records the time of every timer run, and the oldest packet of every batch.
struct Clocked {
    ns: Namespace,
    log: std::sync::Arc<std::sync::Mutex<Vec<(char, u64)>>>,
}

impl NetworkFunction for Clocked {
    fn kind(&self) -> &'static str {
        "clocked"
    }
    fn namespace(&self) -> Namespace {
        self.ns
    }
    fn process(
        &mut self,
        batch: &mut Batch,
        _ctx: &mut Ctx<'_>,
        _store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        let oldest = batch.pkts.iter().map(|p| p.ts_ns).min().unwrap_or(0);
        self.log.lock().unwrap().push(('p', oldest));
        Ok(())
    }
    fn on_timers(&mut self, ctx: &mut Ctx<'_>, _store: &mut dyn StateStore) -> Result<(), NfError> {
        self.log.lock().unwrap().push(('t', ctx.now_ns));
        Ok(())
    }
}

#[test]
fn timers_never_run_past_the_oldest_packet_of_the_batch_they_precede() {
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let f = Clocked {
        ns: Namespace(3),
        log: log.clone(),
    };
    let mut chain = Chain::new("t", vec![Box::new(f)], None, Sharing::Shared, 1);
    let mut pool = PacketPool::new(64);
    let mut store = LocalStore::new();
    let frame = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 5, 53, b"x");
    const SEC: u64 = 1_000_000_000;
    // Batches spanning many timer intervals and long pauses.
    for batch_ts in [
        vec![SEC, 2 * SEC, 30 * SEC],
        vec![31 * SEC, 90 * SEC],
        vec![90 * SEC, 91 * SEC],
        vec![200 * SEC],
    ] {
        let mut batch = Batch::with_capacity(8);
        for ts in &batch_ts {
            assert!(batch.push_frame(&mut pool, &frame, *ts, 0));
        }
        chain.process(&mut batch, &mut store);
        batch.recycle(&mut pool);
    }
    let log = log.lock().unwrap().clone();
    let timers: Vec<u64> = log.iter().filter(|e| e.0 == 't').map(|e| e.1).collect();
    // Due timers run before each batch, at its oldest packet's time.
    assert_eq!(timers, vec![SEC, 31 * SEC, 90 * SEC, 200 * SEC]);
    for w in log.windows(2) {
        if let [('t', t), ('p', oldest)] = w {
            assert!(t <= oldest, "timers at {t} before a packet of {oldest}");
        }
    }
    // The chain's clock is still its newest packet.
    chain.tick(0, &mut store);
    assert_eq!(chain.now_ns, 200 * SEC);
}
