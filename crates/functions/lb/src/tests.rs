use super::*;
use proptest::prelude::*;
use sluice_nf::{testing, Verdict};
use sluice_state::{LocalStore, SharedLocalStore};
use sluice_wire::build;
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::verify_all_checksums;
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};
use std::collections::HashMap;

const VIP: [u8; 4] = [192, 0, 2, 10];
const SEC: u64 = 1_000_000_000;

fn backend(i: u8) -> [u8; 4] {
    [10, 0, 1, i]
}

fn cfg(algorithm: Algorithm, weights: &[u32]) -> Config {
    Config {
        services: vec![ServiceConfig {
            vip: "192.0.2.10".into(),
            port: 80,
            proto: Proto::Tcp,
            algorithm,
            table_size: maglev::DEFAULT_TABLE_SIZE,
            backends: weights
                .iter()
                .enumerate()
                .map(|(i, &w)| BackendConfig {
                    addr: format!("10.0.1.{i}:8080"),
                    weight: w,
                    drain: false,
                })
                .collect(),
            health_check: None,
        }],
        ..Default::default()
    }
}

fn lb(algorithm: Algorithm, weights: &[u32]) -> Lb {
    build(
        &cfg(algorithm, weights),
        Namespace(3),
        std::path::Path::new("."),
    )
    .unwrap()
}

struct Out {
    v: Vec<Verdict>,
    frames: Vec<Vec<u8>>,
}

impl Out {
    fn reason(&self, i: usize) -> Option<&'static str> {
        match self.v[i] {
            Verdict::Forward => None,
            Verdict::Drop(d) => Some(d.reason),
        }
    }
    fn flow(&self, i: usize) -> FlowKey {
        assert_eq!(self.v[i], Verdict::Forward, "packet {i} dropped");
        assert!(verify_all_checksums(&self.frames[i]));
        parse_frame(&self.frames[i]).unwrap().flow
    }
}

fn run(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, frames: &[(Vec<u8>, u64)]) -> Out {
    let o = testing::run_frames(f, store, frames);
    Out {
        v: o.verdicts,
        frames: o.frames,
    }
}

fn timers(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, now: u64) {
    testing::run_timers(f, store, now);
}

fn counter(f: &dyn NetworkFunction, name: &str) -> u64 {
    testing::counter(f, name)
}

fn load(l: &Lb, s: &mut dyn StateStore, b: usize) -> i64 {
    let mut ops = Ops::new();
    let id = ops.incr(l.load_key(0, b).unwrap(), 0);
    s.execute(&mut ops).unwrap();
    ops.counter(id)
}

fn client(i: u32) -> ([u8; 4], u16) {
    (
        [198, 51, (i >> 8) as u8, i as u8],
        1024 + (i % 60000) as u16,
    )
}

fn syn(i: u32, t: u64) -> (Vec<u8>, u64) {
    let (c, p) = client(i);
    (build::tcp_v4(c, VIP, p, 80, 1, 0, SYN, b""), t)
}

fn backend_of(o: &Out, i: usize) -> u8 {
    let f = o.flow(i);
    assert_eq!(f.dst_port, 8080);
    match f.dst {
        IpAddr::V4(b) => {
            assert_eq!(&b[..3], &[10, 0, 1]);
            b[3]
        }
        IpAddr::V6(_) => panic!("v6"),
    }
}

#[test]
fn connections_stick_to_one_backend_across_two_instances() {
    for alg in [Algorithm::Maglev, Algorithm::LeastConnections] {
        let shared = SharedLocalStore::new();
        let mut inst = [
            (lb(alg, &[1, 1, 1]), shared.handle()),
            (lb(alg, &[1, 1, 1]), shared.handle()),
        ];
        let mut chosen: HashMap<u32, u8> = HashMap::new();
        let mut turn = 0;
        for step in 0..4u64 {
            for chunk in (0..60u32).collect::<Vec<_>>().chunks(7) {
                let (l, s) = &mut inst[turn % 2];
                turn += 1;
                let mut frames = Vec::new();
                for &i in chunk {
                    let (c, p) = client(i);
                    let t = step * SEC;
                    frames.push(match step {
                        0 => syn(i, t),
                        _ => (build::tcp_v4(c, VIP, p, 80, 2, 2, ACK, b"data"), t),
                    });
                }
                let o = run(l, s, &frames);
                for (j, &i) in chunk.iter().enumerate() {
                    let b = backend_of(&o, j);
                    assert_eq!(
                        *chosen.entry(i).or_insert(b),
                        b,
                        "{alg:?}: connection {i} moved"
                    );
                }
                // The backends answer, through the other instance; replies leave from the VIP.
                let (l, s) = &mut inst[turn % 2];
                let replies: Vec<_> = chunk
                    .iter()
                    .map(|&i| {
                        let (c, p) = client(i);
                        (
                            build::tcp_v4(backend(chosen[&i]), c, 8080, p, 5, 2, ACK, b"resp"),
                            step * SEC,
                        )
                    })
                    .collect();
                let o = run(l, s, &replies);
                for (j, &i) in chunk.iter().enumerate() {
                    let (c, p) = client(i);
                    let f = o.flow(j);
                    assert_eq!(
                        (f.src, f.src_port, f.dst, f.dst_port),
                        (IpAddr::V4(VIP), 80, IpAddr::V4(c), p)
                    );
                }
            }
        }
        let used: std::collections::HashSet<_> = chosen.values().collect();
        assert_eq!(used.len(), 3, "{alg:?} spreads connections");
    }
}

#[test]
fn weights_are_respected_by_both_algorithms() {
    for alg in [Algorithm::Maglev, Algorithm::LeastConnections] {
        let mut l = lb(alg, &[3, 1]);
        let mut s = LocalStore::new();
        let mut count = [0u32; 2];
        let all: Vec<_> = (0..4000).map(|i| syn(i, 1)).collect();
        for chunk in all.chunks(32) {
            let o = run(&mut l, &mut s, chunk);
            for j in 0..chunk.len() {
                count[backend_of(&o, j) as usize] += 1;
            }
        }
        let share = count[0] as f64 / 4000.0;
        assert!((share - 0.75).abs() < 0.03, "{alg:?}: {count:?}");
        assert_eq!(load(&l, &mut s, 0) + load(&l, &mut s, 1), 4000);
        assert_eq!(
            load(&l, &mut s, 0),
            count[0] as i64,
            "loads count open connections"
        );
    }
}

#[test]
fn draining_stops_new_connections_only() {
    for alg in [Algorithm::Maglev, Algorithm::LeastConnections] {
        let mut l = lb(alg, &[1, 1, 1]);
        let mut s = LocalStore::new();
        let o = run(
            &mut l,
            &mut s,
            &(0..90).map(|i| syn(i, 1)).collect::<Vec<_>>(),
        );
        let on0: Vec<u32> = (0..90)
            .filter(|&i| backend_of(&o, i as usize) == 0)
            .collect();
        assert!(!on0.is_empty());
        assert_eq!(l.set_drain(IpAddr::V4(backend(0)), true), 1);
        let o = run(
            &mut l,
            &mut s,
            &(100..400).map(|i| syn(i, 2)).collect::<Vec<_>>(),
        );
        assert!(
            (0..300).all(|j| backend_of(&o, j) != 0),
            "{alg:?}: drained backend got a new connection"
        );
        let data: Vec<_> = on0
            .iter()
            .map(|&i| {
                let (c, p) = client(i);
                (build::tcp_v4(c, VIP, p, 80, 2, 2, ACK, b"more"), 3)
            })
            .collect();
        let o = run(&mut l, &mut s, &data);
        assert!(
            (0..on0.len()).all(|j| backend_of(&o, j) == 0),
            "existing connections continue"
        );
    }
    // Draining from the configuration, and all drained.
    let mut c = cfg(Algorithm::Maglev, &[1, 1]);
    c.services[0].backends[1].drain = true;
    let mut l = build(&c, Namespace(3), std::path::Path::new(".")).unwrap();
    let mut s = LocalStore::new();
    let o = run(
        &mut l,
        &mut s,
        &(0..50).map(|i| syn(i, 1)).collect::<Vec<_>>(),
    );
    assert!((0..50).all(|j| backend_of(&o, j) == 0));
    l.set_drain(IpAddr::V4(backend(0)), true);
    assert_eq!(
        run(&mut l, &mut s, &[syn(999, 2)]).reason(0),
        Some("no_backend")
    );
}

fn admin(b: u8, port: Option<u16>, state: BackendState) -> BackendAdmin {
    BackendAdmin {
        addr: IpAddr::V4(backend(b)),
        port,
        state,
    }
}

#[test]
fn down_and_draining_backends_get_no_new_connections_and_keep_their_flows() {
    for alg in [Algorithm::Maglev, Algorithm::LeastConnections] {
        for state in [BackendState::Down, BackendState::Draining] {
            let mut l = lb(alg, &[1, 1, 1]);
            let mut s = LocalStore::new();
            let o = run(
                &mut l,
                &mut s,
                &(0..90).map(|i| syn(i, 1)).collect::<Vec<_>>(),
            );
            let on1: Vec<u32> = (0..90)
                .filter(|&i| backend_of(&o, i as usize) == 1)
                .collect();
            assert!(!on1.is_empty());
            // Through the trait, as the instance applies it.
            let f: &mut dyn NetworkFunction = &mut l;
            assert_eq!(f.set_backend_states(&[admin(1, None, state)]), 1);
            assert_eq!(l.backend_state(0, 1), Some(state));
            let o = run(
                &mut l,
                &mut s,
                &(100..400).map(|i| syn(i, 2)).collect::<Vec<_>>(),
            );
            let picked: Vec<u8> = (0..300).map(|j| backend_of(&o, j)).collect();
            assert!(
                !picked.contains(&1),
                "{alg:?} {state}: backend 1 got a new connection"
            );
            assert!(picked.contains(&0) && picked.contains(&2));
            let data: Vec<_> = on1
                .iter()
                .map(|&i| {
                    let (c, p) = client(i);
                    (build::tcp_v4(c, VIP, p, 80, 2, 2, ACK, b"more"), 3)
                })
                .collect();
            let o = run(&mut l, &mut s, &data);
            assert!(
                (0..on1.len()).all(|j| backend_of(&o, j) == 1),
                "{alg:?} {state}: existing connections keep their backend"
            );
            // Back up: it takes new connections again (the list replaces the
            // previous one; an unnamed backend is up).
            assert_eq!(l.set_backend_states(&[]), 0);
            let o = run(
                &mut l,
                &mut s,
                &(500..800).map(|i| syn(i, 4)).collect::<Vec<_>>(),
            );
            assert!((0..300).any(|j| backend_of(&o, j) == 1), "{alg:?}: back up");
        }
    }
}

#[test]
fn a_removed_backend_loses_its_connections_and_ports_are_matched() {
    let mut l = lb(Algorithm::Maglev, &[1, 1]);
    let mut s = LocalStore::new();
    let o = run(
        &mut l,
        &mut s,
        &(0..40).map(|i| syn(i, 1)).collect::<Vec<_>>(),
    );
    let on0: Vec<u32> = (0..40)
        .filter(|&i| backend_of(&o, i as usize) == 0)
        .collect();
    assert!(!on0.is_empty());
    // Another port at the same address names no backend of this service.
    assert_eq!(
        l.set_backend_states(&[admin(0, Some(9999), BackendState::Removed)]),
        0
    );
    assert_eq!(l.backend_state(0, 0), Some(BackendState::Up));
    assert_eq!(
        l.set_backend_states(&[admin(0, Some(8080), BackendState::Removed)]),
        1
    );
    let (c, p) = client(on0[0]);
    let o = run(
        &mut l,
        &mut s,
        &[
            (build::tcp_v4(c, VIP, p, 80, 2, 2, ACK, b"more"), 2),
            (
                build::tcp_v4(backend(0), c, 8080, p, 2, 2, ACK, b"reply"),
                2,
            ),
        ],
    );
    assert_eq!(o.reason(0), Some("deregistered"));
    assert_eq!(o.reason(1), Some("deregistered"));
    assert_eq!(counter(&l, "deregistered"), 2);
    let o = run(
        &mut l,
        &mut s,
        &(100..200).map(|i| syn(i, 3)).collect::<Vec<_>>(),
    );
    assert!((0..100).all(|j| backend_of(&o, j) == 1));
    // Every backend out: new connections have nowhere to go.
    l.set_backend_states(&[
        admin(0, None, BackendState::Removed),
        admin(1, None, BackendState::Down),
    ]);
    assert_eq!(
        run(&mut l, &mut s, &[syn(999, 4)]).reason(0),
        Some("no_backend")
    );
}

#[test]
fn connection_end_and_idle_timeout_release_the_backend() {
    let mut l = lb(Algorithm::LeastConnections, &[1]);
    let mut s = LocalStore::new();
    let (c, p) = client(1);
    let b = backend(0);
    let o = run(&mut l, &mut s, &[syn(1, 0)]);
    assert_eq!(backend_of(&o, 0), 0);
    run(
        &mut l,
        &mut s,
        &[(build::tcp_v4(b, c, 8080, p, 9, 2, SYN | ACK, b""), 1)],
    );
    assert_eq!(load(&l, &mut s, 0), 1);
    run(
        &mut l,
        &mut s,
        &[
            (build::tcp_v4(c, VIP, p, 80, 2, 10, ACK | FIN, b""), SEC),
            (build::tcp_v4(b, c, 8080, p, 10, 3, ACK | FIN, b""), SEC),
        ],
    );
    // The last ACK still gets through during the closing timeout.
    assert!(run(
        &mut l,
        &mut s,
        &[(build::tcp_v4(c, VIP, p, 80, 3, 11, ACK, b""), 2 * SEC)]
    )
    .reason(0)
    .is_none());
    timers(&mut l, &mut s, 5 * SEC);
    assert_eq!(load(&l, &mut s, 0), 1, "not before the closing timeout");
    timers(&mut l, &mut s, 12 * SEC);
    assert_eq!(load(&l, &mut s, 0), 0);
    assert_eq!(s.len(), 0);
    assert_eq!(
        run(
            &mut l,
            &mut s,
            &[(build::tcp_v4(c, VIP, p, 80, 3, 11, ACK, b""), 13 * SEC)]
        )
        .reason(0),
        Some("no_state")
    );

    // A RST ends a connection too; an idle connection ends at the idle timeout.
    run(&mut l, &mut s, &[syn(2, 20 * SEC), syn(3, 20 * SEC)]);
    let (c2, p2) = client(2);
    run(
        &mut l,
        &mut s,
        &[(build::tcp_v4(b, c2, 8080, p2, 1, 0, RST, b""), 21 * SEC)],
    );
    timers(&mut l, &mut s, 40 * SEC);
    assert_eq!(load(&l, &mut s, 0), 1);
    timers(&mut l, &mut s, (20 + 3600) * SEC);
    assert_eq!(load(&l, &mut s, 0), 0);
    assert_eq!(counter(&l, "closed"), 3);
}

#[test]
fn replies_need_state_and_the_right_backend() {
    let mut l = lb(Algorithm::Maglev, &[1, 1]);
    let mut s = LocalStore::new();
    let (c, p) = client(7);
    let o = run(
        &mut l,
        &mut s,
        &[(build::tcp_v4(c, VIP, p, 80, 5, 5, ACK, b"x"), 0)],
    );
    assert_eq!(
        o.reason(0),
        Some("no_state"),
        "mid-stream packet without a connection"
    );
    let o = run(
        &mut l,
        &mut s,
        &[(build::tcp_v4(backend(0), c, 8080, p, 5, 5, ACK, b"x"), 0)],
    );
    assert_eq!(o.reason(0), Some("no_state"));
    let o = run(&mut l, &mut s, &[syn(7, 0)]);
    let b = backend_of(&o, 0);
    let wrong = backend(1 - b);
    let o = run(
        &mut l,
        &mut s,
        &[
            (build::tcp_v4(wrong, c, 8080, p, 5, 5, SYN | ACK, b""), 1),
            (
                build::tcp_v4(backend(b), c, 8080, p, 5, 5, SYN | ACK, b""),
                1,
            ),
        ],
    );
    assert_eq!(o.reason(0), Some("no_state"));
    assert_eq!(o.flow(1).src, IpAddr::V4(VIP));
    // Other traffic passes untouched.
    let other = build::udp_v4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"");
    assert_eq!(run(&mut l, &mut s, &[(other.clone(), 1)]).frames[0], other);
}

#[test]
fn established_packets_cost_one_batched_read() {
    let mut l = lb(Algorithm::Maglev, &[1, 1]);
    let mut s = LocalStore::new();
    run(
        &mut l,
        &mut s,
        &(0..32).map(|i| syn(i, 0)).collect::<Vec<_>>(),
    );
    let before = s.counters();
    let data: Vec<_> = (0..32)
        .map(|i| {
            let (c, p) = client(i);
            (build::tcp_v4(c, VIP, p, 80, 2, 2, ACK, b"x"), 1000)
        })
        .collect();
    run(&mut l, &mut s, &data);
    let d = s.counters().since(&before);
    assert_eq!((d.round_trips, d.reads, d.writes, d.atomics), (1, 32, 0, 0));
}

use sluice_nf::testing::Interleave;

#[test]
fn racing_instances_agree_on_one_backend() {
    let shared = SharedLocalStore::new();
    let result = std::rc::Rc::new(std::cell::RefCell::new(None));
    let r2 = result.clone();
    let mut other = lb(Algorithm::LeastConnections, &[1, 1]);
    let mut other_store = shared.handle();
    // Instance B saw another connection first, so least-connections differs per instance.
    run(&mut other, &mut other_store, &[syn(500, 0)]);
    let mut store = Interleave {
        inner: shared.handle(),
        calls: 0,
        at: 3,
        hook: Some(Box::new(move || {
            let o = run(&mut other, &mut other_store, &[syn(1, 1)]);
            *r2.borrow_mut() = Some(backend_of(&o, 0));
        })),
    };
    let mut a = lb(Algorithm::LeastConnections, &[1, 1]);
    let o = run(&mut a, &mut store, &[syn(1, 1)]);
    let theirs = result.borrow().unwrap();
    assert_eq!(backend_of(&o, 0), theirs);
    assert_eq!(counter(&a, "races_lost"), 1);
    let mut s = shared.handle();
    assert_eq!(
        load(&a, &mut s, 0) + load(&a, &mut s, 1),
        2,
        "one load per connection"
    );
}

#[test]
fn config_errors_are_clear() {
    let e = |t: fn(&mut Config)| {
        let mut c = cfg(Algorithm::Maglev, &[1, 1]);
        t(&mut c);
        build(&c, Namespace(3), std::path::Path::new("."))
            .err()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        e(|c| c.services[0].vip = "300.0.0.1".into()),
        "lb config: invalid vip \"300.0.0.1\""
    );
    assert_eq!(
        e(|c| c.services[0].backends[0].addr = "x".into()),
        "lb config: invalid backend address \"x\""
    );
    assert_eq!(e(|c| c.services[0].table_size = 65536), "lb config: service 192.0.2.10:80/tcp: table_size 65536 must be a prime at least the number of backends and at most 1048573");
    // A prime far too large is refused, not allocated (it took 8.6 GB and aborted).
    assert_eq!(e(|c| c.services[0].table_size = 4_294_967_291), "lb config: service 192.0.2.10:80/tcp: table_size 4294967291 must be a prime at least the number of backends and at most 1048573");
    assert!(maglev::is_prime(maglev::MAX_TABLE_SIZE));
    assert_eq!(
        e(|c| c.services[0].backends[1].addr = "10.0.1.0:8080".into()),
        "lb config: backend \"10.0.1.0:8080\" appears twice (its replies would be ambiguous)"
    );
    assert_eq!(e(|c| c.services[0].backends[1].addr = "[2001:db8::1]:80".into()), "lb config: backend \"[2001:db8::1]:80\" of service 192.0.2.10:80/tcp: address family differs from the vip");
    let c: Config = serde_json::from_str(r#"{"services": [{"vip": "192.0.2.1", "port": 53, "proto": "udp", "algorithm": "least_connections",
        "backends": [{"addr": "10.0.0.1"}, {"addr": "10.0.0.2:5353", "weight": 3, "drain": true}]}]}"#).unwrap();
    assert_eq!(c.services[0].backends[0].weight, 1);
    assert_eq!(c.services[0].table_size, 65537);
    assert!(build(&c, Namespace(3), std::path::Path::new(".")).is_ok());
    assert!(serde_json::from_str::<Config>(r#"{"services": [], "bogus": 1}"#).is_err());
}

#[test]
fn health_checks_default_to_haproxy_and_bad_values_name_their_field() {
    let c: Config = serde_json::from_str(
        r#"{"services": [{"vip": "192.0.2.1", "port": 80, "backends": [{"addr": "10.0.0.1"}],
        "health_check": {}}]}"#,
    )
    .unwrap();
    let hc = c.services[0].health_check.clone().unwrap();
    assert_eq!(hc.params(), crate::health::CheckParams::default());
    assert_eq!(
        (hc.proto, hc.port, hc.http_path()),
        (CheckProto::Tcp, None, None)
    );
    assert!(build(&c, Namespace(3), std::path::Path::new(".")).is_ok());
    let e = |t: fn(&mut HealthCheckConfig)| {
        let mut c = cfg(Algorithm::Maglev, &[1, 1]);
        let mut hc = HealthCheckConfig {
            proto: CheckProto::Tcp,
            path: None,
            port: Some(80),
            interval_ms: 2000,
            timeout_ms: 1000,
            rise: 2,
            fall: 3,
        };
        t(&mut hc);
        c.services[0].health_check = Some(hc);
        build(&c, Namespace(3), std::path::Path::new("."))
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(e(|_| {}), None);
    let pre = "lb config: service 192.0.2.10:80/tcp: health_check.";
    assert_eq!(
        e(|h| h.port = Some(0)),
        Some(format!("{pre}port must be 1 to 65535"))
    );
    assert_eq!(
        e(|h| h.interval_ms = 10),
        Some(format!("{pre}interval_ms 10 must be 100 to 3600000"))
    );
    assert_eq!(
        e(|h| h.timeout_ms = 3000),
        Some(format!(
            "{pre}timeout_ms 3000 must be 1 to interval_ms (2000): one check at a time"
        ))
    );
    assert_eq!(
        e(|h| h.timeout_ms = 0).map(|s| s.contains("timeout_ms 0")),
        Some(true)
    );
    assert_eq!(
        e(|h| h.rise = 0),
        Some(format!("{pre}rise 0 must be 1 to 100"))
    );
    assert_eq!(
        e(|h| h.fall = 1000),
        Some(format!("{pre}fall 1000 must be 1 to 100"))
    );
    assert_eq!(
        e(|h| h.path = Some("/x".into())),
        Some(format!("{pre}path needs proto: http"))
    );
    assert_eq!(
        e(|h| {
            h.proto = CheckProto::Http;
            h.path = Some("/a b".into());
        }),
        Some(format!(
            "{pre}path \"/a b\" must start with / and be at most 256 printable ASCII \
             characters without spaces"
        ))
    );
    let http: Config = serde_json::from_str(
        r#"{"services": [{"vip": "192.0.2.1", "port": 80, "backends": [{"addr": "10.0.0.1"}],
        "health_check": {"proto": "http"}}]}"#,
    )
    .unwrap();
    let hc = http.services[0].health_check.as_ref().unwrap();
    assert_eq!(hc.http_path(), Some("/"), "http checks get / by default");
    let bad = serde_json::from_str::<Config>(
        r#"{"services": [{"vip": "192.0.2.1", "port": 80, "backends": [{"addr": "10.0.0.1"}],
        "health_check": {"proto": "udp"}}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(bad.contains("unknown variant `udp`"), "{bad}");
}

#[test]
fn udp_services_and_ipv6() {
    let c: Config = serde_json::from_str(r#"{"services": [{"vip": "2001:db8::10", "port": 53, "proto": "udp",
        "backends": [{"addr": "2001:db8:1::1"}, {"addr": "[2001:db8:1::2]:5353"}]}], "timeouts": {"udp": 5}}"#).unwrap();
    let mut l = build(&c, Namespace(3), std::path::Path::new(".")).unwrap();
    let mut s = LocalStore::new();
    let cl: [u8; 16] = "2001:db8:9::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let vip: [u8; 16] = "2001:db8::10"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let q = |t| {
        let mut buf = vec![0u8; 200];
        let udp = build::Transport::Udp(sluice_wire::udp::UdpRepr {
            src_port: 999,
            dst_port: 53,
        });
        let n =
            build::write_frame(&mut buf, IpAddr::V6(cl), IpAddr::V6(vip), udp, b"query").unwrap();
        buf.truncate(n);
        (buf, t)
    };
    let o = run(&mut l, &mut s, &[q(0), q(1)]);
    let (a, b) = (o.flow(0), o.flow(1));
    assert_eq!(a, b);
    assert!(matches!(a.dst, IpAddr::V6(_)) && a.dst != IpAddr::V6(vip));
    timers(&mut l, &mut s, 10 * SEC);
    assert_eq!(counter(&l, "closed"), 1, "UDP idle timeout");
}

fn record(s: &mut LocalStore, key: Key) -> Option<Conn> {
    let mut ops = Ops::new();
    let id = ops.get(key);
    s.execute(&mut ops).unwrap();
    ops.decode::<Conn>(id).unwrap()
}

fn conn_key(i: u32) -> Key {
    let (c, p) = client(i);
    let f = FlowKey {
        zone: 0,
        src: IpAddr::V4(c),
        dst: IpAddr::V4(VIP),
        src_port: p,
        dst_port: 80,
        proto: ip_proto::TCP,
    };
    Key::flow(Namespace(3), TABLE_CONN, &f.canonical().0, &[])
}

fn ret_key(i: u32, b: u16) -> Key {
    let (c, p) = client(i);
    let f = FlowKey {
        zone: 0,
        src: IpAddr::V4(c),
        dst: IpAddr::V4(VIP),
        src_port: p,
        dst_port: 80,
        proto: ip_proto::TCP,
    };
    Key::flow(Namespace(3), TABLE_RET, &f.canonical().0, &b.to_be_bytes())
}

#[test]
fn each_direction_writes_only_its_own_record() {
    let mut l = lb(Algorithm::Maglev, &[1]);
    let mut s = LocalStore::new();
    let (c, p) = client(7);
    run(&mut l, &mut s, &[syn(7, 0)]);
    let reply = |t| (build::tcp_v4(backend(0), c, 8080, p, 9, 2, ACK, b"r"), t);
    assert!(run(&mut l, &mut s, &[reply(5 * SEC)]).reason(0).is_none());
    assert_eq!(record(&mut s, conn_key(7)).unwrap().last_seen_ns, 0);
    assert_eq!(record(&mut s, ret_key(7, 0)).unwrap().last_seen_ns, 5 * SEC);
    run(
        &mut l,
        &mut s,
        &[(build::tcp_v4(c, VIP, p, 80, 2, 10, ACK | FIN, b""), 6 * SEC)],
    );
    let cr = record(&mut s, conn_key(7)).unwrap();
    assert_eq!((cr.flags, cr.last_seen_ns), (FIN_CLIENT, 6 * SEC));
    assert_eq!(record(&mut s, ret_key(7, 0)).unwrap().flags, 0);
}

#[test]
fn replies_alone_keep_a_connection_alive() {
    // Only the backend talks for longer than the idle timeout: the client's record
    // is old, the reply record fresh; the timer keeps both, a late client packet
    // still goes to the same backend.
    let mut l = lb(Algorithm::LeastConnections, &[1]);
    let mut s = LocalStore::new();
    let (c, p) = client(8);
    run(&mut l, &mut s, &[syn(8, 0)]);
    let t_tcp = 3600;
    for k in 1..=4u64 {
        let t = k * t_tcp / 3 * SEC;
        let o = run(
            &mut l,
            &mut s,
            &[(build::tcp_v4(backend(0), c, 8080, p, 9, 2, ACK, b"r"), t)],
        );
        assert!(o.reason(0).is_none(), "reply at {t}");
        timers(&mut l, &mut s, t);
    }
    assert_eq!(counter(&l, "closed"), 0);
    assert_eq!(load(&l, &mut s, 0), 1);
    let late = 4 * t_tcp / 3 * SEC + SEC;
    let o = run(
        &mut l,
        &mut s,
        &[(build::tcp_v4(c, VIP, p, 80, 2, 10, ACK, b"x"), late)],
    );
    assert_eq!(backend_of(&o, 0), 0);
    // Refreshed by compare-and-set (its record was old).
    assert_eq!(record(&mut s, conn_key(8)).unwrap().last_seen_ns, late);
    // Both idle: both records go, and the load.
    timers(&mut l, &mut s, late + (t_tcp + 1) * SEC);
    assert_eq!(counter(&l, "closed"), 1);
    assert_eq!(load(&l, &mut s, 0), 0);
    assert!(record(&mut s, conn_key(8)).is_none());
    assert!(record(&mut s, ret_key(8, 0)).is_none());
}

/// A Maglev LB over two backends, a local store, and a flow cache holding a
/// lease on every flow in front of it.
fn leased_lb() -> (Lb, LocalStore, sluice_state::FlowCache) {
    use sluice_state::{CacheConfig, FlowCache, Ownership};
    let l = lb(Algorithm::Maglev, &[1, 1]);
    let mut s = LocalStore::new();
    let mut cache = FlowCache::new(CacheConfig::default());
    cache
        .set_ownership(Some(Ownership::all(1, u64::MAX)), &mut s, 0)
        .unwrap();
    (l, s, cache)
}

#[test]
fn established_packets_make_no_round_trip_under_a_lease() {
    let (mut l, mut s, mut cache) = leased_lb();
    let syns: Vec<_> = (0..8).map(|i| syn(i, 0)).collect();
    let o = run(&mut l, &mut cache.bind(&mut s, 0), &syns);
    let backends: Vec<u8> = (0..8).map(|i| backend_of(&o, i)).collect();
    let batch = |t: u64| -> Vec<(Vec<u8>, u64)> {
        (0..8u32)
            .flat_map(|i| {
                let (c, p) = client(i);
                [
                    (build::tcp_v4(c, VIP, p, 80, 2, 2, ACK, b"x"), t),
                    (
                        build::tcp_v4(backend(backends[i as usize]), c, 8080, p, 2, 3, ACK, b"y"),
                        t,
                    ),
                ]
            })
            .collect()
    };
    // The first replies create the reply records (written through).
    testing::run_frames(&mut l, &mut cache.bind(&mut s, 1000), &batch(1000));
    let before = s.counters();
    for k in 1..40u64 {
        let t = k * 100_000_000;
        let o = testing::run_frames(&mut l, &mut cache.bind(&mut s, t), &batch(t));
        assert!(o.verdicts.iter().all(|v| *v == Verdict::Forward));
        cache.flush_due(&mut s, t).unwrap();
    }
    let d = s.counters().since(&before);
    assert_eq!(d.round_trips, 0, "{d:?}");
    assert!(d.writes > 0);
}

#[test]
fn a_closing_connections_client_packets_read_the_reply_record_from_the_cache() {
    // After the client's FIN its packets need the reply direction's record (is
    // the connection closing both ways?). The owner of the replies' hash range
    // wrote that record, so under a lease covering both directions the read is
    // the cache's, not a round trip.
    let (mut l, mut s, mut cache) = leased_lb();
    let syns: Vec<_> = (0..8).map(|i| syn(i, 0)).collect();
    let o = run(&mut l, &mut cache.bind(&mut s, 0), &syns);
    let b: Vec<u8> = (0..8).map(|i| backend_of(&o, i)).collect();
    let client_pkts = |flags: u8, t: u64| -> Vec<(Vec<u8>, u64)> {
        (0..8u32)
            .map(|i| {
                let (c, p) = client(i);
                (build::tcp_v4(c, VIP, p, 80, 2, 3, flags, b""), t)
            })
            .collect()
    };
    let replies: Vec<_> = (0..8u32)
        .map(|i| {
            let (c, p) = client(i);
            (
                build::tcp_v4(backend(b[i as usize]), c, 8080, p, 2, 2, ACK, b"y"),
                1000,
            )
        })
        .collect();
    testing::run_frames(&mut l, &mut cache.bind(&mut s, 1000), &replies);
    testing::run_frames(
        &mut l,
        &mut cache.bind(&mut s, 2000),
        &client_pkts(FIN | ACK, 2000),
    );
    let before = s.counters();
    let o = run(
        &mut l,
        &mut cache.bind(&mut s, 3000),
        &client_pkts(ACK, 3000),
    );
    for (i, &bi) in b.iter().enumerate() {
        assert_eq!(backend_of(&o, i), bi, "connection {i} kept its backend");
    }
    let d = s.counters().since(&before);
    assert_eq!(d.round_trips, 0, "{d:?}");
}

#[test]
fn a_syn_ack_in_its_syns_batch_creates_the_reply_record_with_the_claim() {
    // The SYN-ACK waits for its connection's claim; its reply record is written
    // in that round trip, so the connection's next replies (established traffic)
    // make no round trip creating it.
    let b = {
        let mut l = lb(Algorithm::Maglev, &[1, 1]);
        backend_of(&run(&mut l, &mut LocalStore::new(), &[syn(4, 0)]), 0)
    };
    let (mut l, mut s, mut cache) = leased_lb();
    let (c, p) = client(4);
    let syn_ack = build::tcp_v4(backend(b), c, 8080, p, 9, 2, SYN | ACK, b"");
    let o = run(
        &mut l,
        &mut cache.bind(&mut s, 0),
        &[syn(4, 0), (syn_ack, 0)],
    );
    assert_eq!(o.reason(1), None);
    let r = record(&mut s, ret_key(4, b as u16)).expect("reply record created with the claim");
    assert_eq!((r.flags, r.backend), (0, b as u16));
    let before = s.counters();
    let data = build::tcp_v4(backend(b), c, 8080, p, 10, 2, ACK, b"data");
    let o = run(&mut l, &mut cache.bind(&mut s, 10), &[(data, 10)]);
    assert_eq!(o.reason(0), None);
    let d = s.counters().since(&before);
    assert_eq!(d.round_trips, 0, "{d:?}");
}

#[test]
fn an_unsolicited_reply_never_hides_a_connection_created_elsewhere() {
    use sluice_state::{CacheConfig, FlowCache, Ownership};
    let (c, p) = client(9);
    let b = {
        let mut l = lb(Algorithm::Maglev, &[1, 1]);
        backend_of(&run(&mut l, &mut LocalStore::new(), &[syn(9, 0)]), 0)
    };
    let reply = build::tcp_v4(backend(b), c, 8080, p, 9, 2, SYN | ACK, b"");
    let hc = parse_frame(&syn(9, 0).0).unwrap().flow.symmetric_hash();
    let hr = parse_frame(&reply).unwrap().flow.symmetric_hash();
    let shared = SharedLocalStore::new();
    let (mut sa, mut sb) = (shared.handle(), shared.handle());
    let (mut la, mut lb_) = (
        lb(Algorithm::Maglev, &[1, 1]),
        lb(Algorithm::Maglev, &[1, 1]),
    );
    let lease = |h: u32| Ownership {
        epoch: 1,
        ranges: vec![(h, h)],
        valid_until_ns: u64::MAX,
    };
    let mut ca = FlowCache::new(CacheConfig::default());
    let mut cb = FlowCache::new(CacheConfig::default());
    ca.set_ownership(Some(lease(hc)), &mut sa, 0).unwrap();
    cb.set_ownership(Some(lease(hr)), &mut sb, 0).unwrap();
    // The backend's packet arrives first: no connection yet.
    let o = testing::run_frames(&mut lb_, &mut cb.bind(&mut sb, 1), &[(reply.clone(), 1)]);
    assert_ne!(o.verdicts[0], Verdict::Forward);
    // The client's SYN creates it on A; the reply must pass on B.
    testing::run_frames(&mut la, &mut ca.bind(&mut sa, 2), &[syn(9, 2)]);
    let o = testing::run_frames(&mut lb_, &mut cb.bind(&mut sb, 3), &[(reply, 3)]);
    assert_eq!(o.verdicts[0], Verdict::Forward, "absence was not cached");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn odd_packets_never_panic(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..8),
                               flags in proptest::collection::vec(any::<u8>(), 8), ports in proptest::collection::vec(any::<u16>(), 8)) {
        let mut l = lb(Algorithm::LeastConnections, &[1, 2, 0]);
        let mut s = LocalStore::new();
        let mut pkts = Vec::new();
        for (i, fr) in frames.iter().enumerate() {
            let mut g = build::udp_v4(VIP, VIP, 1, 2, b"");
            g.truncate(14);
            g.extend_from_slice(fr);
            if parse_frame(&g).is_ok() {
                pkts.push((g, i as u64));
            }
            pkts.push((build::tcp_v4([1, 2, 3, 4], VIP, ports[i], 80, 1, 1, flags[i], b"x"), i as u64));
            pkts.push((build::tcp_v4(backend(1), [1, 2, 3, 4], 8080, ports[i], 1, 1, flags[i], b""), i as u64));
        }
        let o = run(&mut l, &mut s, &pkts);
        for (i, f) in o.frames.iter().enumerate() {
            if o.v[i] == Verdict::Forward && verify_all_checksums(&pkts[i].0) {
                prop_assert!(verify_all_checksums(f));
            }
        }
        timers(&mut l, &mut s, u64::MAX);
    }
}

#[test]
fn a_new_connection_starts_at_its_first_packets_time_not_the_batchs() {
    // TCP timeout 60 s. Connection A opens at 1 s, in a batch whose newest
    // packet (B's SYN) is at 60 s; A's ACK exactly 60 s after its SYN finds it
    // expired (no state), as when every packet is its own batch.
    let syn = |port| build::tcp_v4([10, 9, 0, 1], VIP, port, 80, 1, 0, SYN, b"");
    let first = [(syn(5000), SEC), (syn(5001), 60 * SEC)];
    let ack = |t| {
        (
            build::tcp_v4([10, 9, 0, 1], VIP, 5000, 80, 2, 1, ACK, b""),
            t,
        )
    };
    let mut out = Vec::new();
    for batched in [false, true] {
        for at in [61 * SEC - 1, 61 * SEC] {
            let mut c = cfg(Algorithm::Maglev, &[1, 1]);
            c.timeouts.tcp = 60;
            let mut l = build(&c, Namespace(3), std::path::Path::new(".")).unwrap();
            let mut s = LocalStore::new();
            if batched {
                run(&mut l, &mut s, &first);
            } else {
                run(&mut l, &mut s, &first[..1]);
                run(&mut l, &mut s, &first[1..]);
            }
            out.push(run(&mut l, &mut s, &[ack(at)]).reason(0));
        }
    }
    assert_eq!(out, vec![None, Some("no_state"), None, Some("no_state")]);
}

#[test]
fn later_client_packets_in_the_batch_that_opens_a_connection_as_one_by_one() {
    // A SYN, then the client's FIN|ACK in the same batch; the backend's FIN
    // later: the connection is closing (closing timeout 10 s), so a client
    // packet 11 s after that finds no state, whether or not the client's FIN
    // came in the SYN's batch.
    let client = [10, 9, 0, 1];
    let c = |flags, t| (build::tcp_v4(client, VIP, 5000, 80, 1, 0, flags, b""), t);
    let pkts = [c(SYN, SEC), c(ACK | FIN, SEC + 1)];
    // The backend Maglev picks, from a twin.
    let mut twin = lb(Algorithm::Maglev, &[1, 1]);
    let b = run(&mut twin, &mut LocalStore::new(), &pkts[..1]).flow(0);
    let IpAddr::V4(baddr) = b.dst else {
        panic!("v4 backend")
    };
    let fin = (
        build::tcp_v4(baddr, client, b.dst_port, 5000, 9, 2, ACK | FIN, b""),
        2 * SEC,
    );
    let mut out = Vec::new();
    for batched in [false, true] {
        let mut l = lb(Algorithm::Maglev, &[1, 1]);
        let mut s = LocalStore::new();
        if batched {
            run(&mut l, &mut s, &pkts);
        } else {
            run(&mut l, &mut s, &pkts[..1]);
            run(&mut l, &mut s, &pkts[1..]);
        }
        assert_eq!(
            run(&mut l, &mut s, std::slice::from_ref(&fin)).reason(0),
            None
        );
        out.push(run(&mut l, &mut s, &[c(ACK, 13 * SEC)]).reason(0));
    }
    assert_eq!(out, vec![Some("no_state"), Some("no_state")]);
}
