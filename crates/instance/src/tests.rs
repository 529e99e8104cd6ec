//! The sans-IO core: datagrams in, messages out.

use super::*;
use sluice_trafficgen::{Endpoints, TcpConversation};
use sluice_wire::IpAddr;

const CHAIN: &str = r#"
name: t1.fw
functions:
  - type: firewall
    name: fw
    rules: |
      allow tcp from 10.1.0.0/16 to 10.2.0.0/16 port 80
      default deny
settings:
  batch_size: 8
  timer_interval_ms: 100
"#;

const AGENT: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 254, 0, 1), 6081);

fn core() -> DataPath {
    core_on(Box::new(LocalStore::new()))
}

fn conversation(port: u16) -> Vec<Vec<u8>> {
    let ep = Endpoints {
        client: IpAddr::V4([10, 1, 0, 5]),
        server: IpAddr::V4([10, 2, 0, 7]),
        client_port: 40_000 + port,
        server_port: port,
    };
    let mut conv = TcpConversation::new(ep, 1000, 5000);
    let mut buf = vec![0u8; 2048];
    let mut out = Vec::new();
    conv.handshake(&mut buf, &mut |b| out.push(b.to_vec()));
    conv.data(&mut buf, true, b"GET / HTTP/1.1\r\n\r\n", &mut |b| {
        out.push(b.to_vec())
    });
    conv.data(&mut buf, false, b"HTTP/1.1 200 OK\r\n\r\n", &mut |b| {
        out.push(b.to_vec())
    });
    out
}

fn encap(vni: u32, ch: Option<(u16, u8)>, frame: &[u8]) -> Vec<u8> {
    let (h, n) = geneve_header(vni, ch);
    let mut d = h[..n].to_vec();
    d.extend_from_slice(frame);
    d
}

/// Pushes datagrams one batch at a time and returns what comes out.
fn run_through(core: &mut DataPath, datagrams: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for chunk in datagrams.chunks(core.batch_size()) {
        for d in chunk {
            core.push_datagram(d, 1_000_000);
        }
        core.process();
        let msgs: Vec<Msg> = core.forwarded().collect();
        for m in &msgs {
            assert_eq!(m.dst, Some(AGENT));
            out.push([m.head, m.body].concat());
        }
        let n = msgs.len();
        drop(msgs);
        core.finish_batch(n, 0);
    }
    out
}

#[test]
fn allowed_frames_come_back_with_their_header_denied_ones_do_not() {
    let mut c = core();
    let allowed: Vec<Vec<u8>> = conversation(80)
        .iter()
        .enumerate()
        .map(|(i, f)| encap(0x00_1234, if i % 2 == 0 { Some((7, 1)) } else { None }, f))
        .collect();
    let denied: Vec<Vec<u8>> = conversation(22)
        .iter()
        .map(|f| encap(0x00_1234, Some((7, 1)), f))
        .collect();
    let mut input = allowed.clone();
    input.extend(denied);
    let out = run_through(&mut c, &input);
    assert_eq!(out, allowed, "byte-identical, same Geneve header, in order");
    assert_eq!(c.stats.rx, input.len() as u64);
    assert_eq!(c.stats.tx, allowed.len() as u64);
    assert_eq!(c.stats.malformed, 0);
    c.flush();
    assert_eq!(c.stats.chain.forwarded, allowed.len() as u64);
    assert_eq!(c.stats.chain.dropped, (input.len() - allowed.len()) as u64);
}

#[test]
fn malformed_datagrams_are_counted_by_reason() {
    let mut c = core();
    let good = encap(9, Some((1, 0)), &conversation(80)[0]);
    let mut version = good.clone();
    version[0] |= 0x40;
    let mut not_eth = good.clone();
    not_eth[2..4].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut critical = good.clone();
    critical[8..10].copy_from_slice(&0x0101u16.to_be_bytes());
    critical[10] = 0x80;
    let oversize = encap(9, None, &vec![0u8; sluice_packet::MAX_LARGE_FRAME + 1]);
    let input = vec![
        vec![],
        good[..5].to_vec(),
        good[..12].to_vec(),
        version,
        not_eth,
        critical,
        oversize,
        good.clone(),
    ];
    let out = run_through(&mut c, &input);
    assert_eq!(out, vec![good]);
    assert_eq!(c.stats.malformed, 6);
    let d = &c.stats.drops;
    assert_eq!(d.get("geneve_bad_header"), Some(&4));
    assert_eq!(d.get("geneve_not_ethernet"), Some(&1));
    assert_eq!(d.get("geneve_critical_option"), Some(&1));
    assert_eq!(d.get("oversize"), Some(&1));
}

#[test]
fn headers_come_back_as_they_came_long_ones_trimmed() {
    let mut c = core();
    let f = &conversation(80)[0];
    // The OAM flag and reserved bits are echoed as received.
    let mut odd = encap(5, Some((2, 4)), f);
    odd[1] |= 0x80;
    odd[7] = 0x11;
    // An extra non-critical option makes the header 24 bytes: regenerated.
    let (h, n) = geneve_header(5, Some((2, 4)));
    let mut long = h[..n].to_vec();
    long[0] += 2;
    long.extend_from_slice(&[0x01, 0x02, 0x03, 0x01, 9, 9, 9, 9]);
    long.extend_from_slice(f);
    let out = run_through(&mut c, &[odd.clone(), long]);
    assert_eq!(out, vec![odd, encap(5, Some((2, 4)), f)]);
}

#[test]
fn send_shortfalls_are_counted() {
    let mut c = core();
    for f in conversation(80).iter().take(1) {
        c.push_datagram(&encap(1, None, f), 1);
    }
    c.process();
    assert_eq!(c.forwarded().count(), 1);
    c.finish_batch(0, 0);
    assert_eq!(c.stats.drops.get("tx_queue_full"), Some(&1));
    assert_eq!(c.stats.tx, 0);
}

#[test]
fn unknown_state_backends_are_refused() {
    assert!(matches!(
        open_store("memcached://x"),
        Err(InstanceError::UnknownState(_))
    ));
    assert!(open_store("local").is_ok());
}

#[test]
fn missing_chain_file_names_it() {
    let e = DataPath::new("t", Path::new("/nonexistent/chain.yaml"), "local", AGENT).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/chain.yaml"), "{e}");
}

#[test]
fn heartbeats_carry_the_counters() {
    let mut c = core();
    for f in conversation(80) {
        c.push_datagram(&encap(7, Some((1, 1)), &f), 1);
    }
    c.push_datagram(&[0u8; 3], 1);
    c.process();
    let live = c.forwarded().count();
    c.finish_batch(live.saturating_sub(1), 0);
    let hb = c.heartbeat(3, 1234, 2);
    assert_eq!(hb.seq, 3);
    assert_eq!(hb.rx_packets, c.stats.rx);
    assert_eq!(hb.tx_packets, c.stats.tx);
    assert_eq!(hb.queue_drops, 1 + 2, "a full send queue and the kernel's");
    assert!(hb.drops >= 2, "the malformed datagram and the unsent frame");
    assert_eq!(hb.cpu_us, 1234);
    assert_eq!(hb.pid, std::process::id() as u64);
    assert_eq!(InstanceHeartbeat::decode(&hb.encode()), Some(hb));
}

/// A batch's latency counts from its receipt to its transmission, once per
/// sent packet (not per batch, and not for packets that were not sent); the
/// store's round trips are in the heartbeat too.
#[test]
fn heartbeats_carry_the_added_latency_of_sent_packets_and_the_store_round_trips() {
    let mut c = core();
    let t0 = Instant::now();
    c.received(t0);
    // A later receive into the same batch does not move its start.
    c.received(t0 + Duration::from_millis(1));
    let frames = conversation(80);
    for f in &frames[..3] {
        c.push_datagram(&encap(7, Some((1, 1)), f), 1);
    }
    c.process();
    let live = c.forwarded().count();
    assert_eq!(live, 3, "the handshake passes");
    // Two sent, one of them refused by the socket: one packet delivered.
    c.finish_batch_at(2, 1, t0 + Duration::from_micros(300));
    let hb = c.heartbeat(0, 0, 0);
    let l = hb.added_latency;
    assert_eq!(l.count(), 1, "{l:?}");
    assert_eq!(l.sum_ns, 300_000);
    let i = sluice_proto::LATENCY_BOUNDS_NS
        .iter()
        .position(|b| *b == 500_000)
        .unwrap();
    assert_eq!(l.counts[i], 1, "300 µs is in the 250-500 µs bucket");
    assert!(
        hb.store_round_trips.count() >= 1,
        "the firewall read its connection state: {:?}",
        hb.store_round_trips
    );

    // A batch processed without a receipt time counts from its processing;
    // a batch none of whose packets left adds nothing.
    c.push_datagram(&encap(7, Some((1, 1)), &frames[3]), 1);
    c.process();
    c.finish_batch(0, 0);
    assert_eq!(c.heartbeat(0, 0, 0).added_latency, l);
    assert_eq!(c.stats_now().added_latency, l);
    assert_eq!(
        c.stats_now().store_round_trips.count(),
        c.heartbeat(0, 0, 0).store_round_trips.count()
    );
}

#[test]
fn cpu_time_and_socket_drops_are_readable() {
    let busy: u64 = (0..2_000_000u64).fold(0, |a, x| a.wrapping_add(x * x));
    assert!(busy > 0);
    assert!(cpu_time_us() > 0);
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    use std::os::fd::AsRawFd;
    assert_eq!(kernel_drops(s.as_raw_fd()), 0);
    assert_eq!(kernel_drops(-1), 0, "a bad descriptor reads as no drops");
}

#[test]
fn the_pacer_spends_its_budget_in_real_time() {
    use std::time::{Duration, Instant};
    // 8 Mbit/s = 1 MB/s with a 10 ms burst: 10 kB of tokens.
    let c = sluice_chain::Capacity {
        pps: None,
        mbps: Some(8.0),
        burst_ms: 10.0,
    };
    let t0 = Instant::now();
    let mut p = crate::Pacer::new(&c, t0);
    assert_eq!(p.wait(t0), Duration::ZERO);
    p.charge(10, 20_000);
    let w = p.wait(t0).as_secs_f64();
    assert!((w - 0.010).abs() < 1e-6, "10 kB of debt at 1 MB/s: {w}");
    assert_eq!(p.wait(t0 + Duration::from_millis(10)), Duration::ZERO);
    // Idle time fills the bucket only up to the burst.
    let later = t0 + Duration::from_secs(5);
    assert_eq!(p.wait(later), Duration::ZERO);
    p.charge(7, 10_000);
    assert_eq!(p.wait(later), Duration::ZERO);
    p.charge(1, 1_000);
    assert!(p.wait(later) > Duration::ZERO);
    // Packet budgets bind too.
    let c = sluice_chain::Capacity {
        pps: Some(1000.0),
        mbps: None,
        burst_ms: 10.0,
    };
    let mut p = crate::Pacer::new(&c, t0);
    p.charge(20, 0);
    let w = p.wait(t0).as_secs_f64();
    assert!((w - 0.010).abs() < 1e-6, "{w}");
}

fn lease(epoch: u64, hb_seq: u32, valid_us: u32, ranges: Vec<(u32, u32)>) -> Vec<u8> {
    sluice_proto::InstanceLease {
        epoch,
        hb_seq,
        valid_us,
        ranges,
    }
    .encode()
}

#[test]
fn a_lease_answering_a_heartbeat_puts_the_flow_cache_in_front_of_the_store() {
    let mut c = core();
    let now = Instant::now();
    c.heartbeat_sent(3, wall_ns(), now);
    c.on_lease(&lease(5, 3, 20_000, vec![(0, u32::MAX)]), now);
    let own = c.chain.ownership().expect("a lease is installed");
    assert_eq!((own.epoch, own.ranges.clone()), (5, vec![(0, u32::MAX)]));
    assert_eq!((c.stats.lease.epoch, c.stats.lease.granted), (5, 1));
    // The same traffic as without a lease comes out; established packets (one
    // batch each here) are answered by the cache.
    let input: Vec<Vec<u8>> = conversation(80)
        .iter()
        .map(|f| encap(7, Some((1, 0)), f))
        .collect();
    let mut out = Vec::new();
    for d in &input {
        out.extend(run_through(&mut c, std::slice::from_ref(d)));
    }
    assert_eq!(out, input);
    let s = c.stats_now().lease;
    assert!(s.cache_hits > 0, "{s:?}");
    // A renewal (same epoch and ranges) only moves the deadline.
    c.heartbeat_sent(4, wall_ns(), Instant::now());
    c.on_lease(&lease(5, 4, 20_000, vec![(0, u32::MAX)]), Instant::now());
    assert_eq!((c.stats.lease.granted, c.stats.lease.renewed), (1, 1));
    // A new split replaces it; a revocation removes it, keeping the counters.
    c.heartbeat_sent(5, wall_ns(), Instant::now());
    c.on_lease(&lease(6, 5, 20_000, vec![(0, 99)]), Instant::now());
    assert_eq!(c.chain.ownership().unwrap().ranges, vec![(0, 99)]);
    assert_eq!(c.stats.lease.granted, 2);
    c.on_lease(&lease(0, 5, 0, vec![]), Instant::now());
    assert!(c.chain.ownership().is_none());
    assert_eq!((c.stats.lease.epoch, c.stats.lease.revoked), (0, 1));
    assert!(c.stats_now().lease.cache_hits >= s.cache_hits);
}

#[test]
fn stale_unknown_and_malformed_leases_are_refused() {
    let mut c = core();
    let now = Instant::now();
    // Answers a heartbeat never sent.
    c.on_lease(&lease(5, 9, 20_000, vec![(0, 10)]), now);
    // Answers one sent long ago: its validity is over before it arrives (an
    // instance paused with the answer in its queue).
    let long_ago = now - Duration::from_millis(500);
    c.heartbeat_sent(1, wall_ns() - 500_000_000, long_ago);
    c.on_lease(&lease(5, 1, 20_000, vec![(0, 10)]), now);
    // Overwritten by a later heartbeat with the same slot.
    c.heartbeat_sent(2, wall_ns(), now);
    c.heartbeat_sent(2 + HB_REMEMBERED as u32, wall_ns(), now);
    c.on_lease(&lease(5, 2, 20_000, vec![(0, 10)]), now);
    c.on_lease(b"SLLS\x00", now);
    assert!(c.chain.ownership().is_none());
    assert_eq!(c.stats.lease.granted, 0);
    assert_eq!(c.stats.lease.refused, 3, "{:?}", c.stats.lease);
}

#[test]
fn a_lease_that_is_not_renewed_ends_before_the_next_batch() {
    let mut c = core();
    let now = Instant::now();
    c.heartbeat_sent(1, wall_ns(), now);
    c.on_lease(&lease(5, 1, 2_000, vec![(0, u32::MAX)]), now);
    assert!(c.chain.ownership().is_some());
    std::thread::sleep(Duration::from_millis(5));
    let input: Vec<Vec<u8>> = conversation(80)
        .iter()
        .map(|f| encap(7, Some((1, 0)), f))
        .collect();
    assert_eq!(run_through(&mut c, &input), input);
    assert!(c.chain.ownership().is_none(), "gone before the batch ran");
    assert_eq!((c.stats.lease.expired, c.stats.lease.epoch), (1, 0));
    assert_eq!(
        c.stats_now().lease.cache_hits,
        0,
        "nothing served from a lapsed lease"
    );
}

/// Conversations on ports 1000.. (allowed when 80, denied otherwise), each
/// datagram carrying its conversation's chain hop, interleaved so that batches
/// mix flows, as a loaded instance sees them.
fn interleaved(flows: u16) -> Vec<Vec<u8>> {
    let convs: Vec<Vec<Vec<u8>>> = (0..flows)
        .map(|i| {
            let port = if i % 4 == 3 { 22 } else { 80 };
            conversation(port)
                .into_iter()
                .map(|f| {
                    let mut f = f;
                    // A distinct client port per flow (the conversation's is
                    // 40000 + port): the source port of the client's packets,
                    // the destination port of the server's.
                    let at = if f[26..30] == [10, 1, 0, 5] { 34 } else { 36 };
                    f[at..at + 2].copy_from_slice(&(10_000 + i).to_be_bytes());
                    fix_tcp_checksum(&mut f);
                    encap(7, Some((i, 0)), &f)
                })
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    for k in 0..convs.iter().map(Vec::len).max().unwrap_or(0) {
        for c in &convs {
            if let Some(d) = c.get(k) {
                out.push(d.clone());
            }
        }
    }
    out
}

/// Recomputes the TCP checksum of an IPv4 frame without options.
fn fix_tcp_checksum(f: &mut [u8]) {
    let ip = 14;
    let tcp = ip + 20;
    let tcp_len = f.len() - tcp;
    f[tcp + 16..tcp + 18].copy_from_slice(&[0, 0]);
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&f[ip + 12..ip + 20]);
    add(&[0, 6]);
    add(&(tcp_len as u16).to_be_bytes());
    add(&f[tcp..]);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    f[tcp + 16..tcp + 18].copy_from_slice(&c.to_be_bytes());
}

/// Sends (appends to `out`) every processed batch that may leave.
fn send(core: &mut DataPath, out: &mut Vec<Vec<u8>>) {
    while core.has_output() {
        let msgs: Vec<Vec<u8>> = core
            .forwarded()
            .map(|m| [m.head, m.body].concat())
            .collect();
        core.finish_batch(msgs.len(), 0);
        out.extend(msgs);
    }
}

/// Pushes `input` a batch at a time, sending whatever may leave after each
/// batch, then goes idle; returns the frames in the order they left and the
/// most batches that were in flight at once.
fn run_pipelined(core: &mut DataPath, input: &[Vec<u8>]) -> (Vec<Vec<u8>>, usize) {
    let mut out = Vec::new();
    let mut most = 0;
    for chunk in input.chunks(core.batch_size()) {
        for d in chunk {
            core.push_datagram(d, wall_ns());
        }
        core.process();
        most = most.max(core.in_flight());
        send(core, &mut out);
    }
    core.idle();
    assert_eq!(core.in_flight(), 0, "idle leaves nothing in flight");
    send(core, &mut out);
    (out, most)
}

fn leased(mut c: DataPath) -> DataPath {
    let now = Instant::now();
    c.heartbeat_sent(1, wall_ns(), now);
    c.on_lease(&lease(5, 1, 60_000_000, vec![(0, u32::MAX)]), now);
    assert!(c.chain.ownership().is_some());
    c
}

fn core_on(store: Box<dyn StateStore>) -> DataPath {
    core_of(CHAIN, store)
}

fn core_of(text: &str, store: Box<dyn StateStore>) -> DataPath {
    let spec = ChainSpec::from_str(text, Path::new("t.yaml")).unwrap();
    let chain = Chain::from_spec(
        &spec,
        Path::new("."),
        &sluice_builtin::registry(),
        Sharing::Shared,
    )
    .unwrap();
    DataPath::with_chain("t", chain, store, spec.settings.batch_size, AGENT)
}

/// The frames a plain (not pipelined, no lease) core lets through, in order.
fn reference(input: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut c = core();
    run_through(&mut c, input)
}

#[test]
fn a_pipelined_core_lets_the_same_frames_through_in_order() {
    let input = interleaved(24);
    let want = reference(&input);
    assert!(want.len() < input.len() && !want.is_empty());
    let mut c = leased(core());
    c.set_pipeline(16); // two batches of 8 per window
    assert_eq!(c.stats.pipeline.window_packets, 16);
    let (got, most) = run_pipelined(&mut c, &input);
    assert_eq!(got, want, "byte-identical, same headers, same order");
    assert!(most >= 4, "batches were held across windows: {most}");
    assert_eq!(c.stats.tx, want.len() as u64);
    assert!(c.stats_now().lease.cache_hits > 0);
    assert_eq!(c.stats.drops.get("pool_exhausted"), None);
}

#[test]
fn settings_pipeline_turns_pipelining_on_and_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.yaml");
    std::fs::write(
        &path,
        CHAIN.replace("batch_size: 8", "batch_size: 8\n  pipeline: 20"),
    )
    .unwrap();
    let c = DataPath::new("t", &path, "local", AGENT).unwrap();
    // Rounded up to whole batches.
    assert_eq!(c.stats.pipeline.window_packets, 24);
    std::fs::write(
        &path,
        CHAIN.replace("batch_size: 8", "batch_size: 8\n  pipeline: 70000"),
    )
    .unwrap();
    let e = DataPath::new("t", &path, "local", AGENT)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("settings.pipeline") && e.contains("65536"),
        "{e}"
    );
}

/// A private redis-server and a store on it; `None` (saying so) where none is
/// installed.
fn redis() -> Option<(
    sluice_state_redis::server::RedisServer,
    sluice_state_redis::RedisStore,
)> {
    let Ok(srv) = sluice_state_redis::server::RedisServer::start(&[]) else {
        assert!(
            sluice_state_redis::server::server_binary().is_none(),
            "redis-server is installed but would not start"
        );
        eprintln!("skipped: no redis-server");
        return None;
    };
    let store = sluice_state_redis::RedisStore::open(&srv.url()).unwrap();
    Some((srv, store))
}

/// On Redis (replies really arrive later): a new lease, an expired one and the
/// end of the run each leave nothing in flight, and every frame comes out once,
/// in order, as without pipelining.
#[test]
fn a_pipelined_core_on_redis_settles_before_every_lease_change() {
    let Some((_srv, store)) = redis() else {
        return;
    };
    let input = interleaved(24);
    let want = reference(&input);
    let mut c = leased(core_on(Box::new(store)));
    c.set_pipeline(16);
    let half = input.len() / 2;
    let mut got = Vec::new();
    for chunk in input[..half].chunks(8) {
        for d in chunk {
            c.push_datagram(d, wall_ns());
        }
        c.process();
        send(&mut c, &mut got);
    }
    assert!(c.in_flight() > 0, "batches are in flight");
    // A new split: what was accepted under the old one is settled first.
    let now = Instant::now();
    c.heartbeat_sent(2, wall_ns(), now);
    c.on_lease(&lease(6, 2, 30_000, vec![(0, u32::MAX)]), now);
    assert_eq!(c.in_flight(), 0);
    assert_eq!(c.stats.pipeline.lease_flushes, 1);
    send(&mut c, &mut got);
    // The rest under a lease that runs out (30 ms) halfway.
    let rest = &input[half..];
    let (a, b) = rest.split_at(rest.len() / 2);
    for chunk in a.chunks(8) {
        for d in chunk {
            c.push_datagram(d, wall_ns());
        }
        c.process();
        send(&mut c, &mut got);
    }
    std::thread::sleep(Duration::from_millis(40));
    let (tail, _) = run_pipelined(&mut c, b);
    got.extend(tail);
    assert_eq!(c.stats.lease.expired, 1);
    assert!(c.chain.ownership().is_none());
    c.flush();
    send(&mut c, &mut got);
    assert_eq!(got, want);
    assert_eq!(c.stats.drops.get("store_lost"), None);
}

/// A pipelined instance at low load goes idle after every batch: what it waits
/// for then is the store's answer to its batches' writes, not the refreshes of
/// its established flows, which stay deferred (here: the monitor's counters,
/// a deferred write per flow per batch).
#[test]
fn an_idle_pipelined_core_leaves_deferred_writes_deferred() {
    let Some((_srv, store)) = redis() else {
        return;
    };
    let monitor = "name: t1.mon\nfunctions:\n  - type: monitor\nsettings:\n  batch_size: 8\n";
    let mut c = core_of(monitor, Box::new(store));
    // Deferred writes are due only after 10 s (within the lease's minute):
    // none is due in this test.
    c.chain.set_cache_config(sluice_state::CacheConfig {
        max_defer_ns: 10_000_000_000,
        ..Default::default()
    });
    // The run loop ticks first thing: the chain's clock is the wall clock.
    c.tick(wall_ns());
    let mut c = leased(c);
    c.set_pipeline(16);
    let input = interleaved(8);
    // The handshakes (three packets of each of 8 flows) open the flows.
    let (opened, _) = run_pipelined(&mut c, &input[..24]);
    assert_eq!(opened.len(), 24);
    let writes = c.store.counters().writes;

    // The data packets, one batch at a time, idle after each.
    let mut out = Vec::new();
    for chunk in input[24..].chunks(8) {
        out.extend(run_pipelined(&mut c, chunk).0);
    }
    assert_eq!(out, input[24..].to_vec());
    assert_eq!(
        c.store.counters().writes,
        writes,
        "refreshes were written at idle"
    );
    assert!(c.stats.pipeline.idle_flushes >= 3);
    // They reach the store at the end.
    c.flush();
    assert!(c.store.counters().writes > writes);
}

#[test]
fn jumbo_and_64k_class_frames_come_back_whole() {
    let mut c = core();
    let ep = Endpoints {
        client: IpAddr::V4([10, 1, 0, 5]),
        server: IpAddr::V4([10, 2, 0, 7]),
        client_port: 40_080,
        server_port: 80,
    };
    let mut conv = TcpConversation::new(ep, 1000, 5000);
    let mut buf = vec![0u8; 70_000];
    let mut frames = Vec::new();
    conv.handshake(&mut buf, &mut |b| frames.push(b.to_vec()));
    for (i, len) in [8946usize, 60 * 1024, 8946].into_iter().enumerate() {
        let payload: Vec<u8> = (0..len).map(|j| (i + j) as u8).collect();
        conv.data(&mut buf, i % 2 == 1, &payload, &mut |b| {
            frames.push(b.to_vec())
        });
    }
    assert_eq!(frames[3].len(), 9000);
    let input: Vec<Vec<u8>> = frames.iter().map(|f| encap(3, Some((1, 0)), f)).collect();
    let out = run_through(&mut c, &input);
    assert_eq!(
        out, input,
        "jumbo and 60 KiB frames come back byte-identical"
    );
    assert!(c.stats.drops.is_empty(), "{:?}", c.stats.drops);
}

const LB_CHAIN: &str = r#"
name: t1.lb
functions:
  - type: lb
    name: lb
    services:
      - vip: 10.2.0.100
        port: 80
        backends: [{ addr: "10.2.0.7" }, { addr: "10.2.0.8:8080" }]
settings:
  batch_size: 8
  timer_interval_ms: 100
"#;

/// SYNs `from..to` to the VIP through `c`: the backend address each went to.
fn lb_picks(c: &mut DataPath, from: u16, to: u16) -> Vec<IpAddr> {
    let syns: Vec<Vec<u8>> = (from..to)
        .map(|i| {
            let f = sluice_wire::build::tcp_v4(
                [10, 1, (i >> 8) as u8, i as u8],
                [10, 2, 0, 100],
                30_000 + i,
                80,
                1,
                0,
                sluice_wire::tcp::flags::SYN,
                b"",
            );
            encap(0x00_1234, Some((7, 1)), &f)
        })
        .collect();
    run_through(c, &syns)
        .iter()
        .map(|d| {
            let (_, _, off) = parse_geneve_payload(d).unwrap();
            sluice_wire::parse::parse_frame(&d[off..]).unwrap().flow.dst
        })
        .collect()
}

/// Backend states reach a running instance through its backends file: read
/// when it changes, applied between batches, a backend not listed is up.
#[test]
fn backend_states_from_the_agents_file_steer_new_connections() {
    let b7 = IpAddr::V4([10, 2, 0, 7]);
    let b8 = IpAddr::V4([10, 2, 0, 8]);
    let mut c = core_of(LB_CHAIN, Box::new(LocalStore::new()));
    let picks = lb_picks(&mut c, 0, 40);
    assert!(picks.contains(&b7) && picks.contains(&b8), "{picks:?}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.backends.json");
    let mut w = BackendsWatch {
        path: path.clone(),
        seen: None,
    };
    w.check(&mut c);
    // No file yet: nothing changes.
    assert_eq!(lb_picks(&mut c, 40, 80).len(), 40);
    std::fs::write(&path, r#"[{"addr": "10.2.0.8:8080", "state": "down"}]"#).unwrap();
    w.check(&mut c);
    let picks = lb_picks(&mut c, 100, 140);
    assert_eq!(picks.len(), 40);
    assert!(picks.iter().all(|a| *a == b7), "{picks:?}");
    // Replaced by a rename, as the agent does: the new list wins.
    let tmp = dir.path().join("tmp");
    std::fs::write(&tmp, r#"[{"addr": "10.2.0.7", "state": "draining"}]"#).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    w.check(&mut c);
    let picks = lb_picks(&mut c, 200, 240);
    assert!(picks.iter().all(|a| *a == b8), "{picks:?}");
    // A list that does not parse keeps the states in force.
    std::fs::write(&path, "not json").unwrap();
    w.check(&mut c);
    assert!(lb_picks(&mut c, 300, 340).iter().all(|a| *a == b8));
    // A bad entry is named, the good ones apply.
    let mut errors = Vec::new();
    let list = [
        sluice_proto::BackendOverride {
            addr: "nonsense".into(),
            state: sluice_proto::BackendHealthState::Down,
        },
        sluice_proto::BackendOverride {
            addr: "10.2.0.8".into(),
            state: sluice_proto::BackendHealthState::Down,
        },
    ];
    assert_eq!(c.set_backends(&list, &mut errors), 1);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].contains("\"nonsense\""), "{errors:?}");
    assert!(lb_picks(&mut c, 400, 440).iter().all(|a| *a == b7));
}

/// A local store that reports replica waits, as a replicated one would.
struct Replicated(LocalStore);

impl StateStore for Replicated {
    fn execute(&mut self, ops: &mut sluice_state::Ops) -> Result<(), sluice_state::StoreError> {
        self.0.execute(ops)
    }

    fn take_expired(
        &mut self,
        ns: sluice_state::Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<sluice_state::Key>,
    ) -> Result<(), sluice_state::StoreError> {
        self.0.take_expired(ns, now_ns, max, out)
    }

    fn counters(&self) -> sluice_state::StoreCounters {
        sluice_state::StoreCounters {
            replica_waits: 7,
            replica_rewaits: 2,
            replica_shortfalls: 1,
            ..self.0.counters()
        }
    }

    fn describe(&self) -> String {
        "replicated(local)".into()
    }
}

/// The store's replica counters reach the agent in the heartbeat (its
/// metrics export them), so a write a failover could lose is visible.
#[test]
fn heartbeats_carry_the_store_replica_counters() {
    let c = core_on(Box::new(Replicated(LocalStore::new())));
    let hb = c.heartbeat(0, 0, 0);
    assert_eq!(
        (hb.replica_waits, hb.replica_rewaits, hb.replica_shortfalls),
        (7, 2, 1)
    );
    let back = sluice_proto::InstanceHeartbeat::decode(&hb.encode()).unwrap();
    assert_eq!(back.replica_shortfalls, 1);
    assert_eq!(core().heartbeat(0, 0, 0).replica_waits, 0);
}
