//! `sluice bench nf`: single-core throughput of each function and of a chain;
//! with `--threads`, how forwarding scales over workers ([`scaling`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice_chain::{Chain, ChainSpec, Sharing};
use sluice_packet::{Batch, PacketPool};
use sluice_state::LocalStore;
use sluice_trafficgen::{generate, Proto, Trace, TrafficSpec};

use crate::Measurement;

/// Options of `sluice bench nf`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Packets per run of the small-packet traffic.
    pub packets: usize,
    /// Frame size of the small-packet traffic (64 by default).
    pub frame_size: usize,
    /// Packets per flow, handshake and teardown included (1000 by default;
    /// StatelessNF's long-flow mix is 10,000, its short-flow mix 100).
    pub flow_length: usize,
    /// Flows active at once (256 by default).
    pub concurrency: usize,
    /// Runs per measurement (best kept).
    pub reps: usize,
    /// Only run measurements whose name contains this.
    pub filter: Option<String>,
    /// Rule files (Suricata syntax, e.g. Emerging Threats Open) for the
    /// `ips_rulefiles_http` row: the IPS with them loaded on the HTTP mix
    /// ([`http_trace`]), against the IPS with the generated rules on the same
    /// traffic. Empty: the row is not run.
    pub ips_rules: Vec<PathBuf>,
    /// A Suricata ([`crate::suricata::Suricata::locate`]) to run over the
    /// same HTTP mix with the same rule files: the `suricata_rulefiles_http`
    /// row, whose ratio is against `ips_rulefiles_http`. None: not run.
    pub suricata: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            packets: 1_000_000,
            frame_size: 64,
            flow_length: 1000,
            concurrency: 256,
            reps: 3,
            filter: None,
            ips_rules: Vec::new(),
            suricata: None,
        }
    }
}

/// A chain file's text plus extra files it refers to.
#[derive(Clone)]
pub struct ChainText {
    /// The chain YAML.
    pub yaml: String,
    /// (file name, contents) written next to it.
    pub files: Vec<(String, String)>,
}

/// `trace` with every frame rewrapped by `w`, timestamps kept.
fn wrapped(trace: &Trace, w: impl Fn(&[u8]) -> Vec<u8>) -> Trace {
    let mut t = Trace::new();
    for (ts, f) in trace.iter() {
        t.push(ts, &w(f));
    }
    t
}

/// This thread's on-CPU time in nanoseconds (Linux schedstat), so that results on
/// a shared machine count only the time the benchmark actually ran; 0 elsewhere.
pub fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Writes a chain's extra files into `dir` and parses its YAML (as if it were
/// `dir/bench.yaml`, so relative file names resolve against `dir`).
pub fn load_spec(dir: &Path, chain: &ChainText) -> Result<ChainSpec, String> {
    for (name, text) in &chain.files {
        std::fs::write(dir.join(name), text).map_err(|e| e.to_string())?;
    }
    ChainSpec::from_str(&chain.yaml, &dir.join("bench.yaml")).map_err(|e| e.to_string())
}

/// Runs `trace` through a fresh chain `reps` times; returns the best seconds of
/// on-CPU time (wall time where CPU time is unavailable).
pub fn time_chain(
    dir: &Path,
    chain: &ChainText,
    sharing: Sharing,
    trace: &Trace,
    reps: usize,
) -> Result<f64, String> {
    time_chain_stats(dir, chain, sharing, trace, reps).map(|(secs, _)| secs)
}

/// [`time_chain`], and the chain's counters after its last run.
pub fn time_chain_stats(
    dir: &Path,
    chain: &ChainText,
    sharing: Sharing,
    trace: &Trace,
    reps: usize,
) -> Result<(f64, sluice_chain::ChainStats), String> {
    let spec = load_spec(dir, chain)?;
    let registry = sluice_builtin::registry();
    let batch_size = spec.settings.batch_size;
    let mut best = f64::INFINITY;
    let mut last = sluice_chain::ChainStats::default();
    for _ in 0..reps.max(1) {
        let mut chain =
            Chain::from_spec(&spec, dir, &registry, sharing).map_err(|e| e.to_string())?;
        let run = replay(&mut chain, trace, batch_size);
        let st = run.stats;
        if st.forwarded + st.dropped + st.malformed_total() != trace.len() as u64 {
            return Err(format!(
                "chain lost packets: {} in, stats {:?}",
                trace.len(),
                st
            ));
        }
        best = best.min(run.cpu);
        last = st;
    }
    Ok((best, last))
}

fn measurement(name: &str, trace: &Trace, secs: f64, frame_size: usize) -> Measurement {
    let pps = trace.len() as f64 / secs;
    Measurement {
        name: name.into(),
        mpps: pps / 1e6,
        gbps: trace.bytes() as f64 * 8.0 / secs / 1e9,
        ns_per_packet: secs * 1e9 / trace.len() as f64,
        ratio_to_baseline: 1.0,
        baseline: String::new(),
        frame_size,
        packets: trace.len() as u64,
        note: String::new(),
        memory_mib: None,
    }
}

/// Resident memory of this process in bytes (Linux), 0 elsewhere.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Opens `flows` TCP connections (one SYN each) through a firewall with local state
/// and reports the state's memory: the larger of the store's own accounting and
/// the growth of the process's resident memory.
pub fn firewall_memory(dir: &Path, flows: u32) -> Result<Measurement, String> {
    use sluice_wire::build;
    std::fs::write(
        dir.join("mem.rules"),
        "allow tcp from 10.0.0.0/8 to any\ndefault deny\n",
    )
    .map_err(|e| e.to_string())?;
    let spec = ChainSpec::from_str(
        &single("firewall", "    rules_file: mem.rules\n"),
        &dir.join("m.yaml"),
    )
    .map_err(|e| e.to_string())?;
    let mut chain = Chain::from_spec(&spec, dir, &sluice_builtin::registry(), Sharing::Shared)
        .map_err(|e| e.to_string())?;
    let mut store = LocalStore::new();
    let mut pool = PacketPool::new(64);
    let mut batch = Batch::with_capacity(32);
    let rss0 = rss_bytes();
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut bytes = 0u64;
    let mut i = 0u32;
    while i < flows {
        for _ in 0..32.min(flows - i) {
            let f = build::tcp_v4(
                [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
                [192, 0, 2, 1],
                1024 + (i % 50_000) as u16,
                80,
                i,
                0,
                sluice_wire::tcp::flags::SYN,
                b"",
            );
            bytes += f.len() as u64;
            batch.push_frame(&mut pool, &f, 1_000_000_000, 0);
            i += 1;
        }
        chain.process(&mut batch, &mut store);
        batch.recycle(&mut pool);
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    let secs = if cpu > 0.0 { cpu.min(wall) } else { wall };
    if store.len() != flows as usize {
        return Err(format!(
            "expected {flows} tracked flows, store holds {}",
            store.len()
        ));
    }
    let grew = rss_bytes().saturating_sub(rss0);
    let held = (store.approx_memory() as u64).max(grew);
    Ok(Measurement {
        name: format!("firewall_{}k_flows_memory", flows / 1000),
        mpps: flows as f64 / secs / 1e6,
        gbps: bytes as f64 * 8.0 / secs / 1e9,
        ns_per_packet: secs * 1e9 / flows as f64,
        ratio_to_baseline: 1.0,
        baseline: String::new(),
        frame_size: 64,
        packets: flows as u64,
        note: format!(
            "new connections only; store {:.0} MiB, RSS growth {:.0} MiB; target <= 256 MiB for 1M",
            store.approx_memory() as f64 / 1048576.0,
            grew as f64 / 1048576.0
        ),
        memory_mib: Some(held as f64 / 1048576.0),
    })
}

/// A one-function chain of `kind` (`extra`: its indented config lines), batches of 32.
pub fn single(kind: &str, extra: &str) -> String {
    format!("name: bench\nfunctions:\n  - type: {kind}\n{extra}settings:\n  batch_size: 32\n  timer_interval_ms: 100\n")
}

/// The forward-only chain (parsing, no function): the baseline of `bench nf`.
pub fn pass_chain() -> ChainText {
    ChainText {
        yaml: single("pass", ""),
        files: vec![],
    }
}

/// A firewall with `rules` rules ([`firewall_rules`]) admitting the generated traffic.
pub fn firewall_chain(rules: usize) -> ChainText {
    ChainText {
        yaml: single("firewall", "    rules_file: fw.rules\n"),
        files: vec![("fw.rules".into(), firewall_rules(rules))],
    }
}

/// A NAT translating the generated clients (10.0.0.0/8) to a /28 pool.
pub fn nat_chain() -> ChainText {
    ChainText {
        yaml: single(
            "nat",
            "    inside: [10.0.0.0/8]\n    pool: [203.0.113.0/28]\n",
        ),
        files: vec![],
    }
}

/// [`nat_chain`] allocating `reserve` public ports ahead (`port_reserve`), as a
/// NAT sharing its pool with other instances through a remote store would.
pub fn nat_chain_reserving(reserve: u32) -> ChainText {
    ChainText {
        yaml: single(
            "nat",
            &format!(
                "    inside: [10.0.0.0/8]\n    pool: [203.0.113.0/28]\n    port_reserve: {reserve}\n"
            ),
        ),
        files: vec![],
    }
}

/// A Maglev load balancer with a service on each generated server address (port 80).
pub fn lb_chain() -> ChainText {
    ChainText {
        yaml: single(
            "lb",
            "    services:\n      - vip: 192.0.2.1\n        port: 80\n        backends: [{addr: 198.51.100.1, weight: 1}, {addr: 198.51.100.2, weight: 1}]\n      - vip: 192.0.2.2\n        port: 80\n        backends: [{addr: 198.51.100.3, weight: 1}]\n      - vip: 192.0.2.3\n        port: 80\n        backends: [{addr: 198.51.100.4, weight: 1}]\n      - vip: 192.0.2.4\n        port: 80\n        backends: [{addr: 198.51.100.5, weight: 1}]\n",
        ),
        files: vec![],
    }
}

/// The flow monitor with its defaults.
pub fn monitor_chain() -> ChainText {
    ChainText {
        yaml: single("monitor", ""),
        files: vec![],
    }
}

/// An IPS with `rules` content rules ([`ips_rules`]) that never match the traffic.
pub fn ips_chain(rules: usize) -> ChainText {
    ChainText {
        yaml: single("ips", "    rule_files: [ips.rules]\n"),
        files: vec![("ips.rules".into(), ips_rules(rules))],
    }
}

/// `n` UDP datagrams of `len` payload bytes (uppercase letters, so the
/// IPS's automaton works on them) over 256 flows: whole, and each cut into
/// IPv4 fragments of at most 1,480 bytes of IP payload (MTU 1500).
pub fn udp_datagram_traces(n: usize, len: usize) -> (Trace, Trace) {
    let mut rng = sluice_trafficgen::Rng::new(7);
    let payload: Vec<u8> = (0..len).map(|_| b'A' + rng.below(26) as u8).collect();
    let (mut whole, mut frags) = (Trace::new(), Trace::new());
    for k in 0..n {
        let ts = k as u64 * 1_000;
        let src = [10, 1, (k / 256 % 256) as u8, (k % 256) as u8];
        let f = sluice_wire::build::udp_v4(
            src,
            [198, 51, 100, 9],
            20_000 + (k % 256) as u16,
            9999,
            &payload,
        );
        whole.push(ts, &f);
        let (hdr, data) = (&f[..34], &f[34..]);
        let mut at = 0;
        while at < data.len() {
            let end = (at + 1_480).min(data.len());
            let mut v = hdr.to_vec();
            v.extend_from_slice(&data[at..end]);
            v[16..18].copy_from_slice(&((20 + end - at) as u16).to_be_bytes());
            v[18..20].copy_from_slice(&(k as u16).to_be_bytes());
            let fo = (at / 8) as u16 | if end < data.len() { 0x2000 } else { 0 };
            v[20..22].copy_from_slice(&fo.to_be_bytes());
            v[24..26].fill(0);
            let sum = sluice_wire::checksum::checksum(&v[14..34]);
            v[24..26].copy_from_slice(&sum.to_be_bytes());
            frags.push(ts, &v);
            at = end;
        }
    }
    (whole, frags)
}

/// `firewall` rules: `n - 2` narrow rules that never match the traffic, then the
/// rules that admit it, so every new flow walks the whole list.
pub fn firewall_rules(n: usize) -> String {
    let mut s = String::from("# generated by sluice bench\n");
    for i in 0..n.saturating_sub(2) {
        s.push_str(&format!(
            "deny tcp from 172.{}.{}.0/24 to 198.51.{}.0/24 port {}\n",
            16 + (i / 256) % 16,
            i % 256,
            i % 256,
            1 + i % 60000
        ));
    }
    s.push_str("allow tcp from 10.0.0.0/8 to 192.0.2.0/24 port 80\n");
    s.push_str("allow udp from 10.0.0.0/8 to 192.0.2.0/24\n");
    s.push_str("default deny\n");
    s
}

/// `n` IPS content rules with distinct random-looking contents absent from the traffic.
pub fn ips_rules(n: usize) -> String {
    let mut rng = sluice_trafficgen::Rng::new(42);
    let mut s = String::from("# generated by sluice bench\n");
    for i in 0..n {
        let len = 8 + rng.below(9) as usize;
        let content: String = (0..len)
            .map(|_| (b'A' + rng.below(26) as u8) as char)
            .collect();
        s.push_str(&format!(
            "alert tcp any any -> any any (msg:\"bench {i}\"; content:\"{content}\"; sid:{}; rev:1;)\n",
            2_000_000 + i
        ));
    }
    s
}

/// An IPS loading `files` with Suricata's default `vars` (so `$HOME_NET` holds
/// the generated clients, 10.0.0.0/8, and the servers are external).
pub fn ips_files_chain(files: &[PathBuf]) -> ChainText {
    let quote = |v: &str| serde_json::to_string(v).expect("a string serialises");
    let mut extra = String::from("    rule_files: [");
    for (i, f) in files.iter().enumerate() {
        if i > 0 {
            extra.push_str(", ");
        }
        extra.push_str(&quote(&f.display().to_string()));
    }
    extra.push_str("]\n    vars:\n");
    for (k, v) in sluice_ips::rules::suricata_default_vars() {
        extra.push_str(&format!("      {k}: {}\n", quote(&v)));
    }
    ChainText {
        yaml: single("ips", &extra),
        files: vec![],
    }
}

/// Web browsing over HTTP/1.1: `flows` keep-alive connections to port 80,
/// `concurrency` at once with their packets interleaved, each with
/// `requests` GETs (a browser's headers, varied paths, hosts and cookies)
/// answered by a response (nginx-style head, `Content-Length`) whose body is
/// HTML-like text (two in three) or random bytes (an image), 2-60 KB in
/// 1,460-byte segments. Handshake and teardown included.
pub fn http_trace(flows: usize, requests: usize, concurrency: usize, seed: u64) -> Trace {
    use sluice_trafficgen::{endpoints, Rng, TcpConversation, MAX_FRAME};
    const WORDS: [&str; 24] = [
        "the", "news", "market", "weather", "sports", "video", "today", "city", "world", "report",
        "music", "travel", "health", "science", "update", "local", "photo", "review", "guide",
        "best", "new", "how", "and", "of",
    ];
    let spec = TrafficSpec::default();
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; MAX_FRAME];
    let mut trace = Trace::new();
    let mut ts = spec.start_ns;
    let mut pending: Vec<std::collections::VecDeque<Vec<u8>>> = Vec::new();
    let mut next = 0usize;
    loop {
        while pending.len() < concurrency.max(1) && next < flows {
            let mut q = std::collections::VecDeque::new();
            let mut out = |f: &[u8]| q.push_back(f.to_vec());
            let ep = endpoints(&spec, next);
            let mut conv = TcpConversation::new(ep, rng.next_u64() as u32, rng.next_u64() as u32);
            conv.handshake(&mut buf, &mut out);
            for r in 0..requests {
                let word = |rng: &mut Rng| WORDS[rng.below(WORDS.len() as u64) as usize];
                let path = format!(
                    "/{}/{}-{}.html",
                    word(&mut rng),
                    word(&mut rng),
                    rng.below(100_000)
                );
                let req = format!(
                    "GET {path} HTTP/1.1\r\nHost: www.{}{}.example.com\r\nUser-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate\r\nReferer: http://www.{}.example.com/\r\nCookie: session={:016x}; seen={r}\r\nConnection: keep-alive\r\n\r\n",
                    word(&mut rng),
                    next % 50,
                    word(&mut rng),
                    rng.next_u64()
                );
                conv.data(&mut buf, true, req.as_bytes(), &mut out);
                let len = 2_000 + rng.below(58_000) as usize;
                let html = rng.below(3) != 0;
                let mut body = Vec::with_capacity(len + 64);
                if html {
                    body.extend_from_slice(b"<!DOCTYPE html><html><head><title>");
                    while body.len() < len {
                        let w = word(&mut rng);
                        match rng.below(12) {
                            0 => body.extend_from_slice(b"</p>\n<p class=\"text\">"),
                            1 => body.extend_from_slice(
                                format!("<a href=\"/{w}/{}\">", rng.below(1000)).as_bytes(),
                            ),
                            2 => body.extend_from_slice(b"</a> "),
                            _ => {
                                body.extend_from_slice(w.as_bytes());
                                body.push(b' ');
                            }
                        }
                    }
                    body.truncate(len);
                } else {
                    body.extend_from_slice(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00");
                    while body.len() < len {
                        body.extend_from_slice(&rng.next_u64().to_le_bytes());
                    }
                    body.truncate(len);
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0\r\nDate: Tue, 28 Nov 2026 12:00:00 GMT\r\nContent-Type: {}\r\nContent-Length: {len}\r\nConnection: keep-alive\r\nCache-Control: max-age=600\r\n\r\n",
                    if html { "text/html; charset=utf-8" } else { "image/jpeg" }
                );
                let mut resp = head.into_bytes();
                resp.extend_from_slice(&body);
                for seg in resp.chunks(1460) {
                    conv.data(&mut buf, false, seg, &mut out);
                }
            }
            conv.teardown(&mut buf, &mut out);
            pending.push(q);
            next += 1;
        }
        if pending.is_empty() {
            break;
        }
        let k = rng.below(pending.len() as u64) as usize;
        match pending[k].pop_front() {
            Some(f) => {
                trace.push(ts, &f);
                ts += spec.gap_ns;
            }
            None => {
                pending.swap_remove(k);
            }
        }
    }
    trace
}

/// Every measurement of `sluice bench nf`.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&str)) -> Vec<Measurement> {
    let dir: PathBuf = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut out = Vec::new();
    let wanted = |n: &str| opts.filter.as_deref().is_none_or(|f| n.contains(f));

    // 64-byte traffic: 1,000-packet TCP flows, 256 concurrent.
    let small = generate(&TrafficSpec {
        flows: (opts.packets / opts.flow_length.max(7)).max(1),
        packets_per_flow: opts.flow_length.max(7),
        frame_size: opts.frame_size.clamp(60, 1514),
        concurrency: opts.concurrency.max(1),
        ..Default::default()
    });
    let small_size = opts.frame_size.clamp(60, 1514);
    // Full-size traffic for the IPS: 1460-byte payloads (generated only if needed).
    let need_big = ["1514", "raw_dfa", "ips_", "chain_"]
        .iter()
        .any(|n| wanted(n))
        || opts
            .filter
            .as_deref()
            .is_some_and(|f| "1514".contains(f) || f.contains("1514"));
    let big = if !need_big {
        Trace::new()
    } else {
        generate(&TrafficSpec {
            flows: (opts.packets / 10_000).max(8),
            packets_per_flow: 1000,
            frame_size: 1514,
            concurrency: 64,
            server_share: 0.5,
            ..Default::default()
        })
    };

    let mut bench = |name: &str,
                     chain: ChainText,
                     sharing: Sharing,
                     trace: &Trace,
                     frame: usize|
     -> Option<Measurement> {
        if !wanted(name) {
            return None;
        }
        progress(name);
        match time_chain(&dir, &chain, sharing, trace, opts.reps) {
            Ok(secs) => Some(measurement(name, trace, secs, frame)),
            Err(e) => {
                progress(&format!("{name}: skipped: {e}"));
                None
            }
        }
    };

    let fwd = bench(
        "forward_only",
        pass_chain(),
        Sharing::Shared,
        &small,
        small_size,
    );
    let rel = |m: Option<Measurement>,
               base: &Option<Measurement>,
               note: &str,
               out: &mut Vec<Measurement>| {
        if let Some(mut m) = m {
            if let Some(b) = base {
                m.ratio_to_baseline = m.mpps / b.mpps;
                m.baseline = b.name.clone();
            }
            m.note = note.into();
            out.push(m);
        }
    };
    rel(fwd.clone(), &None, "target >= 20 Mpps", &mut out);
    let fw = firewall_chain(1000);
    rel(
        bench(
            "firewall_1000_rules",
            fw,
            Sharing::Shared,
            &small,
            small_size,
        ),
        &fwd,
        "target >= 5 Mpps",
        &mut out,
    );
    let nat = nat_chain();
    rel(
        bench("nat", nat, Sharing::Shared, &small, small_size),
        &fwd,
        "target >= 5 Mpps",
        &mut out,
    );
    let lb = lb_chain();
    rel(
        bench("lb_maglev", lb, Sharing::Shared, &small, small_size),
        &fwd,
        "target >= 8 Mpps",
        &mut out,
    );
    let mon = monitor_chain();
    rel(
        bench("monitor", mon, Sharing::Shared, &small, small_size),
        &fwd,
        "",
        &mut out,
    );

    // The same traffic under encapsulations (issue 19): what reading through a
    // QinQ stack and opening a VXLAN tunnel costs the firewall, against the plain
    // firewall on the same flows.
    let encap_rows = [
        "firewall_1000_rules_plain",
        "firewall_1000_rules_qinq",
        "firewall_1000_rules_vxlan",
    ];
    if encap_rows.iter().any(|n| wanted(n)) {
        // The baseline runs whenever one of its rows does.
        let fw_plain = time_chain(
            &dir,
            &firewall_chain(1000),
            Sharing::Shared,
            &small,
            opts.reps,
        )
        .ok()
        .map(|secs| measurement(encap_rows[0], &small, secs, small_size));
        rel(
            fw_plain.clone(),
            &None,
            "baseline for the encapsulated rows",
            &mut out,
        );
        let qinq = wrapped(&small, |f| sluice_wire::wrap::qinq(f, 100, 200));
        rel(
            bench(
                "firewall_1000_rules_qinq",
                firewall_chain(1000),
                Sharing::Shared,
                &qinq,
                small_size + 8,
            ),
            &fw_plain,
            "two tags read through",
            &mut out,
        );
        let (o1, o2) = (
            sluice_wire::IpAddr::V4([198, 51, 100, 1]),
            sluice_wire::IpAddr::V4([198, 51, 100, 2]),
        );
        let vxlan = wrapped(&small, |f| sluice_wire::wrap::vxlan(o1, o2, 5000, f));
        let mut fw_vx = firewall_chain(1000);
        fw_vx.files[0].1 = format!("allow outer udp port 4789\n{}", fw_vx.files[0].1);
        rel(
            bench(
                "firewall_1000_rules_vxlan",
                fw_vx,
                Sharing::Shared,
                &vxlan,
                small_size + 50,
            ),
            &fw_plain,
            "inner flow decided, outer headers checked per packet",
            &mut out,
        );
    }

    // The IPS, on full-size packets, against the forward-only pipeline on the same bytes.
    let fwd_big = bench(
        "forward_only_1514",
        pass_chain(),
        Sharing::Shared,
        &big,
        1514,
    );
    rel(
        fwd_big.clone(),
        &None,
        "baseline for the full-size measurements",
        &mut out,
    );
    for n in [100usize, 1000] {
        let name = format!("raw_dfa_scan_{n}_rules_1514");
        let raw = if wanted(&name) {
            raw_dfa(&dir, &ips_rules(n), &big, opts.reps)
                .map(|secs| measurement(&name, &big, secs, 1514))
        } else {
            None
        };
        rel(
            raw.clone(),
            &fwd_big,
            "the DFA alone over every payload: the IPS's limit",
            &mut out,
        );
        let ips = ips_chain(n);
        let checked = bench(
            &format!("ips_{n}_rules_1514"),
            ips.clone(),
            Sharing::Shared,
            &big,
            1514,
        );
        rel(
            checked.clone(),
            &raw,
            "whole pipeline (copy, parse, reassembly, IPS); target >= 0.8",
            &mut out,
        );
        if n == 100 {
            // What verifying TCP checksums before reassembly (the evasion
            // defence, on by default) costs: the same chain without it.
            let mut unchecked = ips;
            unchecked.yaml = unchecked
                .yaml
                .replace("settings:\n", "settings:\n  verify_checksums: none\n");
            let m = bench(
                "ips_100_rules_1514_unchecked",
                unchecked,
                Sharing::Shared,
                &big,
                1514,
            );
            if let (Some(c), Some(u)) = (&checked, &m) {
                let mut c = c.clone();
                c.name = "ips_100_rules_1514_checked".into();
                c.ratio_to_baseline = c.mpps / u.mpps;
                c.baseline = u.name.clone();
                c.note = "TCP checksums verified before reassembly, vs without".into();
                rel(m, &None, "verify_checksums: none", &mut out);
                out.push(c);
            }
        }
    }

    // Jumbo frames (MTU 9000): every packet takes a buffer of the pool's large class.
    if wanted("forward_only_9014") || wanted("ips_100_rules_9014") {
        let jumbo = generate(&TrafficSpec {
            flows: (opts.packets / 100_000).max(4),
            packets_per_flow: 1000,
            frame_size: 9014,
            concurrency: 64,
            server_share: 0.5,
            ..Default::default()
        });
        let fwd_jumbo = bench(
            "forward_only_9014",
            pass_chain(),
            Sharing::Shared,
            &jumbo,
            9014,
        );
        rel(
            fwd_jumbo.clone(),
            &None,
            "jumbo frames in the pool's large class; baseline for ips_100_rules_9014",
            &mut out,
        );
        rel(
            bench(
                "ips_100_rules_9014",
                ips_chain(100),
                Sharing::Shared,
                &jumbo,
                9014,
            ),
            &fwd_jumbo,
            "whole pipeline on 8,960-byte payloads",
            &mut out,
        );
    }

    // UDP datagrams of 4,400 bytes: sent whole (jumbo frames), and in three
    // IPv4 fragments (MTU 1500) matched one by one (`inspect`) or joined in
    // the store first (`reassemble`). The ratios are per datagram (the
    // same datagrams in each trace): time whole / time in fragments.
    let frag_rows = [
        "ips_100_rules_udp_whole",
        "ips_100_rules_udp_fragments_inspect",
        "ips_100_rules_udp_fragments_reassemble",
    ];
    if frag_rows.iter().any(|n| wanted(n)) {
        let (whole, frags) = udp_datagram_traces((opts.packets / 3).clamp(64, 200_000), 4_400);
        let udp_ips = |policy: &str| ChainText {
            yaml: format!(
                "{}reassembly:\n  udp_fragments: {policy}\n",
                single("ips", "    rule_files: [ips.rules]\n")
            ),
            files: vec![(
                "ips.rules".into(),
                ips_rules(100).replace("alert tcp", "alert udp"),
            )],
        };
        let per_datagram = |m: Option<Measurement>,
                            base: &Option<Measurement>,
                            note: &str,
                            out: &mut Vec<Measurement>| {
            if let Some(mut m) = m {
                if let Some(b) = base {
                    m.ratio_to_baseline =
                        (b.ns_per_packet * b.packets as f64) / (m.ns_per_packet * m.packets as f64);
                    m.baseline = b.name.clone();
                }
                m.note = note.into();
                out.push(m);
            }
        };
        let whole_m = bench(
            frag_rows[0],
            udp_ips("drop"),
            Sharing::Shared,
            &whole,
            4_442,
        );
        per_datagram(
            whole_m.clone(),
            &None,
            "4,400-byte UDP datagrams whole; baseline of the fragment rows (per datagram)",
            &mut out,
        );
        per_datagram(
            bench(
                frag_rows[1],
                udp_ips("inspect"),
                Sharing::Shared,
                &frags,
                1_514,
            ),
            &whole_m,
            "the same datagrams in 3 fragments, each matched alone",
            &mut out,
        );
        per_datagram(
            bench(
                frag_rows[2],
                udp_ips("reassemble"),
                Sharing::Shared,
                &frags,
                1_514,
            ),
            &whole_m,
            "the same datagrams in 3 fragments, joined in the store, then matched whole",
            &mut out,
        );
    }

    // FW -> IPS -> LB with shared parsing and reassembly, against each parsing and
    // reassembling on its own.
    let chain3 = |files: Vec<(String, String)>| {
        ChainText {
        yaml: "name: bench\nfunctions:\n  - type: firewall\n    rules_file: fw.rules\n  - type: ips\n    rule_files: [ips.rules]\n  - type: lb\n    services:\n      - vip: 192.0.2.1\n        port: 80\n        backends: [{addr: 198.51.100.1, weight: 1}, {addr: 198.51.100.2, weight: 1}]\n".into(),
        files,
    }
    };
    let files = vec![
        ("fw.rules".into(), firewall_rules(100)),
        ("ips.rules".into(), ips_rules(100)),
    ];
    for (trace, frame, base) in [(&small, small_size, &fwd), (&big, 1514, &fwd_big)] {
        let shared = bench(
            &format!("chain_fw_ips_lb_shared_{frame}"),
            chain3(files.clone()),
            Sharing::Shared,
            trace,
            frame,
        );
        let unshared = bench(
            &format!("chain_fw_ips_lb_unshared_{frame}"),
            chain3(files.clone()),
            Sharing::Unshared,
            trace,
            frame,
        );
        rel(
            unshared.clone(),
            base,
            "each function parses and reassembles on its own",
            &mut out,
        );
        rel(shared, &unshared, "target >= 1.3x unshared", &mut out);
    }

    // The IPS with the given rule files (e.g. all of ET Open) on web traffic,
    // against the IPS with the generated rules on the same traffic.
    let http_rows = [
        "forward_only_http",
        "ips_100_rules_http",
        "ips_rulefiles_http",
    ];
    if !opts.ips_rules.is_empty() && http_rows.iter().any(|n| wanted(n)) {
        let http = http_trace((opts.packets / 3_000).max(16), 10, 64, 7);
        let avg = http.bytes() / http.len().max(1);
        let fwd_http = bench(
            "forward_only_http",
            pass_chain(),
            Sharing::Shared,
            &http,
            avg,
        );
        rel(
            fwd_http.clone(),
            &None,
            "HTTP/1.1 browsing mix; baseline for the http rows",
            &mut out,
        );
        let small_ips = bench(
            "ips_100_rules_http",
            ips_chain(100),
            Sharing::Shared,
            &http,
            avg,
        );
        rel(
            small_ips.clone(),
            &fwd_http,
            "the generated content rules",
            &mut out,
        );
        let files = ips_files_chain(&opts.ips_rules);
        let cfg = sluice_ips::Config {
            rule_files: opts.ips_rules.clone(),
            rules: vec![],
            vars: sluice_ips::rules::suricata_default_vars(),
            idle_timeout_secs: 300,
            sync_progress: false,
            classification_file: None,
            http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
            data_dir: None,
            dataset_dirs: vec![],
        };
        let loaded = sluice_ips::build(&cfg, sluice_state::Namespace(1), &dir)
            .map(|i| i.rule_count())
            .ok();
        let note = format!(
            "{} rules loaded from {} files; search {}; vs ips_100_rules_http; goal >= 1 Gbit/s",
            loaded.unwrap_or(0),
            opts.ips_rules.len(),
            sluice_ips::search_engine()
        );
        match &opts.suricata {
            None => rel(
                bench("ips_rulefiles_http", files, Sharing::Shared, &http, avg),
                &small_ips,
                &note,
                &mut out,
            ),
            // Against Suricata, the alerts are compared too: the same count
            // says both did the same work.
            Some(path) if wanted("ips_rulefiles_http") => {
                progress("ips_rulefiles_http");
                let sluice = match time_chain_stats(&dir, &files, Sharing::Shared, &http, opts.reps)
                {
                    Ok((secs, st)) => Some((
                        measurement("ips_rulefiles_http", &http, secs, avg),
                        st.alerts,
                    )),
                    Err(e) => {
                        progress(&format!("ips_rulefiles_http: skipped: {e}"));
                        None
                    }
                };
                let m = sluice.as_ref().map(|s| s.0.clone());
                rel(m.clone(), &small_ips, &note, &mut out);
                for (name, inline) in [
                    ("suricata_rulefiles_http", false),
                    ("suricata_ips_rulefiles_http", true),
                ] {
                    progress(name);
                    match suricata_row(
                        name,
                        inline,
                        path,
                        &opts.ips_rules,
                        &http,
                        avg,
                        &dir,
                        opts.reps,
                    ) {
                        Ok((row, alerts)) => {
                            let note = format!(
                                "{}; {alerts} alerts (Sluice {}); vs ips_rulefiles_http",
                                row.note,
                                sluice.as_ref().map_or(0, |s| s.1)
                            );
                            rel(Some(row), &m, &note, &mut out);
                        }
                        Err(e) => progress(&format!("{name}: skipped: {e}")),
                    }
                }
            }
            Some(_) => {}
        }
    }

    if wanted("firewall_1000k_flows_memory") {
        progress("firewall_1000k_flows_memory");
        match firewall_memory(&dir, 1_000_000) {
            Ok(m) => out.push(m),
            Err(e) => progress(&format!("firewall memory: skipped: {e}")),
        }
    }

    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// A row named `name`: Suricata at `path` over `http` written to a pcap,
/// with the rule files `rules`, as an IDS or `inline` (`--simulate-ips`),
/// best of `reps` runs ([`crate::suricata`]); and its alert count.
#[allow(clippy::too_many_arguments)]
fn suricata_row(
    name: &str,
    inline: bool,
    path: &Path,
    rules: &[PathBuf],
    http: &Trace,
    avg: usize,
    dir: &Path,
    reps: usize,
) -> Result<(Measurement, u64), String> {
    use crate::suricata;
    let s = suricata::Suricata::locate(path)?;
    let version = s.version()?;
    // Written once for both rows; the bench's directory goes at its end.
    let pcap = dir.join("http-mix.pcap");
    if !pcap.exists() {
        suricata::write_pcap(http, &pcap)?;
    }
    let joined = suricata::join_rules(rules, dir)?;
    let mut best: Option<suricata::Run> = None;
    for k in 0..reps.max(1) {
        let run = suricata::run(&s, &joined, &pcap, &dir.join(format!("{name}-{k}")), inline)?;
        if run.packets != http.len() as u64 {
            return Err(format!(
                "Suricata decoded {} packets of {}",
                run.packets,
                http.len()
            ));
        }
        if best.is_none_or(|b| run.worker_cpu_secs < b.worker_cpu_secs) {
            best = Some(run);
        }
    }
    let best = best.expect("at least one run");
    let mut m = measurement(name, http, best.worker_cpu_secs, avg);
    m.note = format!(
        "{version}, --runmode single{}, its packet thread's CPU time (runs took {:.0} s with rule loading); {} HTTP transactions",
        if inline { " --simulate-ips" } else { "" },
        best.wall_secs,
        best.http_tx
    );
    Ok((m, best.alerts))
}

/// Seconds (best of `reps`, on-CPU) for the IPS's DFAs alone to walk every
/// payload of `trace`, one payload at a time as the IPS does.
fn raw_dfa(dir: &Path, rules: &str, trace: &Trace, reps: usize) -> Option<f64> {
    let path = dir.join("raw.rules");
    std::fs::write(&path, rules).ok()?;
    let cfg = sluice_ips::Config {
        rule_files: vec![path],
        rules: vec![],
        vars: Default::default(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: None,
        http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
        data_dir: None,
        dataset_dirs: vec![],
    };
    let ips = sluice_ips::build(&cfg, sluice_state::Namespace(1), dir).ok()?;
    let payloads: Vec<&[u8]> = trace
        .iter()
        .filter_map(|(_, f)| {
            let m = sluice_wire::parse::parse_frame(f).ok()?;
            Some(m.payload(f)).filter(|p| !p.is_empty())
        })
        .collect();
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        let cpu0 = thread_cpu_ns();
        let mut hits = 0usize;
        for p in &payloads {
            hits += ips.raw_scan_bytes(p);
        }
        std::hint::black_box(hits);
        let wall = start.elapsed().as_secs_f64();
        let cpu = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
        best = best.min(if cpu > 0.0 { cpu.min(wall) } else { wall });
    }
    Some(best)
}

/// Traffic for quick checks in tests: `n` 64-byte packets.
pub fn small_trace(n: usize) -> Trace {
    generate(&TrafficSpec {
        flows: (n / 100).max(1),
        packets_per_flow: 100,
        frame_size: 64,
        concurrency: 16,
        proto: Proto::Tcp,
        ..Default::default()
    })
}

/// `trace` split among `workers` workers by the direction-invariant flow hash
/// ([`sluice_instance::workers::frame_worker`]), order kept within each share:
/// what an instance's dispatcher hands each of its workers, and what each
/// forwarding thread of a fanned-out socket would get. Splitting happens
/// before the clock starts: the rows measure the workers, and
/// `instance_dispatch` the dispatcher.
pub fn shard_trace(trace: &Trace, workers: usize) -> Vec<Trace> {
    let workers = workers.max(1);
    let mut out: Vec<Trace> = (0..workers).map(|_| Trace::new()).collect();
    let mut meta = sluice_wire::PacketMeta::default();
    for (ts, f) in trace.iter() {
        out[sluice_instance::workers::frame_worker(f, workers, &mut meta)].push(ts, f);
    }
    out
}

/// One run of a chain on several workers ([`time_chain_sharded`]).
#[derive(Debug, Clone)]
pub struct ShardedRun {
    /// Seconds until the last worker finished, counting each worker's on-CPU
    /// time (its wall time where that is unavailable): the run's length had
    /// every worker had a core of its own.
    pub cpu_secs: f64,
    /// Wall-clock seconds from the common start until the last worker finished.
    pub wall_secs: f64,
    /// Packets each worker handled.
    pub per_worker: Vec<u64>,
    /// Each worker's chain statistics.
    pub stats: Vec<sluice_chain::ChainStats>,
}

/// What one worker measured.
struct WorkerRun {
    cpu: f64,
    start: Instant,
    end: Instant,
    stats: sluice_chain::ChainStats,
}

/// Runs each share of `shards` on a thread of its own, each with its own chain,
/// store, pool and batch (nothing shared, no lock), all started together;
/// `reps` times, keeping the run with the least [`ShardedRun::cpu_secs`].
pub fn time_chain_sharded(
    dir: &Path,
    chain: &ChainText,
    sharing: Sharing,
    shards: &[Trace],
    reps: usize,
) -> Result<ShardedRun, String> {
    let spec = load_spec(dir, chain)?;
    let batch_size = spec.settings.batch_size;
    let mut best: Option<ShardedRun> = None;
    for _ in 0..reps.max(1) {
        let start = std::sync::Barrier::new(shards.len());
        let runs: Vec<Result<WorkerRun, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = shards
                .iter()
                .enumerate()
                .map(|(w, trace)| {
                    let (spec, start) = (&spec, &start);
                    std::thread::Builder::new()
                        .name(format!("bench-worker-{w}"))
                        .spawn_scoped(scope, move || {
                            let built =
                                Chain::from_spec(spec, dir, &sluice_builtin::registry(), sharing);
                            // Every worker reaches the barrier, even one whose chain failed.
                            start.wait();
                            let mut chain = built.map_err(|e| e.to_string())?;
                            Ok(replay(&mut chain, trace, batch_size))
                        })
                        .map_err(|e| format!("cannot start a worker thread: {e}"))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h?.join()
                        .unwrap_or_else(|_| Err("a worker thread panicked".to_string()))
                })
                .collect()
        });
        let runs = runs.into_iter().collect::<Result<Vec<_>, String>>()?;
        for (r, trace) in runs.iter().zip(shards) {
            let st = &r.stats;
            if st.forwarded + st.dropped + st.malformed_total() != trace.len() as u64 {
                return Err(format!(
                    "a worker lost packets: {} in, stats {:?}",
                    trace.len(),
                    st
                ));
            }
        }
        let first = runs.iter().map(|r| r.start).min();
        let last = runs.iter().map(|r| r.end).max();
        let run = ShardedRun {
            cpu_secs: runs.iter().map(|r| r.cpu).fold(0.0, f64::max),
            wall_secs: match (first, last) {
                (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
                _ => 0.0,
            },
            per_worker: shards.iter().map(|t| t.len() as u64).collect(),
            stats: runs.into_iter().map(|r| r.stats).collect(),
        };
        if best.as_ref().is_none_or(|b| run.cpu_secs < b.cpu_secs) {
            best = Some(run);
        }
    }
    best.ok_or_else(|| "no run".to_string())
}

/// One worker's loop: its share of the traffic, a batch at a time, through its
/// own chain and store.
fn replay(chain: &mut Chain, trace: &Trace, batch_size: usize) -> WorkerRun {
    let mut store = LocalStore::new();
    let mut pool = PacketPool::new(batch_size * 2);
    let mut batch = Batch::with_capacity(batch_size);
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut i = 0;
    while i < trace.len() {
        let end = (i + batch_size).min(trace.len());
        for j in i..end {
            let (ts, f) = trace.get(j);
            batch.push_frame(&mut pool, f, ts, 0);
        }
        chain.process(&mut batch, &mut store);
        batch.recycle(&mut pool);
        i = end;
    }
    let end = Instant::now();
    let wall = end.duration_since(start).as_secs_f64();
    let cpu = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    let ev = chain.take_events();
    std::hint::black_box(&ev);
    WorkerRun {
        cpu: if cpu > 0.0 { cpu.min(wall) } else { wall },
        start,
        end,
        stats: chain.stats(),
    }
}

/// `sluice bench nf --threads 1,2`: each function and the FW -> IPS -> LB chain
/// forwarding on every worker count of `threads`, flows sharded by the
/// direction-invariant hash ([`shard_trace`]), each row's ratio against the
/// first count measured in the same run.
pub fn scaling(
    opts: &Options,
    threads: &[usize],
    progress: &mut dyn FnMut(&str),
) -> Vec<Measurement> {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sluice-bench-cores-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let wanted = |n: &str| opts.filter.as_deref().is_none_or(|f| n.contains(f));
    // More workers than cores measure time-slicing, not scaling: say how
    // many there are.
    progress(&crate::machine_line());
    let small_size = opts.frame_size.clamp(60, 1514);
    let small = generate(&TrafficSpec {
        flows: (opts.packets / opts.flow_length.max(7)).max(1),
        packets_per_flow: opts.flow_length.max(7),
        frame_size: small_size,
        concurrency: opts.concurrency.max(1),
        ..Default::default()
    });
    // Full-size traffic for the IPS: many flows, so that shares stay even.
    let big = if wanted("ips_100_rules_1514") {
        generate(&TrafficSpec {
            flows: (opts.packets / 2000).max(64),
            packets_per_flow: 200,
            frame_size: 1514,
            concurrency: 64,
            server_share: 0.5,
            ..Default::default()
        })
    } else {
        Trace::new()
    };
    let chain3 = ChainText {
        yaml: "name: bench\nfunctions:\n  - type: firewall\n    rules_file: fw.rules\n  - type: ips\n    rule_files: [ips.rules]\n  - type: lb\n    services:\n      - vip: 192.0.2.1\n        port: 80\n        backends: [{addr: 198.51.100.1, weight: 1}, {addr: 198.51.100.2, weight: 1}]\n".into(),
        files: vec![
            ("fw.rules".into(), firewall_rules(100)),
            ("ips.rules".into(), ips_rules(100)),
        ],
    };
    let rows: Vec<(&str, ChainText, &Trace, usize)> = vec![
        ("forward_only", pass_chain(), &small, small_size),
        (
            "firewall_1000_rules",
            firewall_chain(1000),
            &small,
            small_size,
        ),
        ("nat", nat_chain(), &small, small_size),
        ("lb_maglev", lb_chain(), &small, small_size),
        ("monitor", monitor_chain(), &small, small_size),
        ("ips_100_rules_1514", ips_chain(100), &big, 1514),
        ("chain_fw_ips_lb_shared_64", chain3, &small, small_size),
    ];
    let mut out = Vec::new();
    for (name, chain, trace, frame) in rows {
        if !wanted(name) {
            continue;
        }
        // The first count's row and its wall-clock rate.
        let mut base: Option<(Measurement, f64)> = None;
        for &t in threads {
            let row = format!("{name}_t{t}");
            progress(&row);
            let shards = shard_trace(trace, t);
            let run = match time_chain_sharded(&dir, &chain, Sharing::Shared, &shards, opts.reps) {
                Ok(r) => r,
                Err(e) => {
                    progress(&format!("{row}: skipped: {e}"));
                    continue;
                }
            };
            let mut m = measurement(&row, trace, run.cpu_secs, frame);
            let wall_mpps = trace.len() as f64 / run.wall_secs.max(1e-9) / 1e6;
            let shares: Vec<String> = run
                .per_worker
                .iter()
                .map(|&n| format!("{:.1}", n as f64 * 100.0 / trace.len().max(1) as f64))
                .collect();
            m.note = format!("shares {}%; wall {wall_mpps:.2} Mpps", shares.join("/"));
            match &base {
                Some((b, b_wall)) => {
                    m.ratio_to_baseline = m.mpps / b.mpps;
                    m.baseline = b.name.clone();
                    m.note
                        .push_str(&format!(" ({:.2}x in wall time)", wall_mpps / b_wall));
                }
                None => base = Some((m.clone(), wall_mpps)),
            }
            out.push(m);
        }
    }
    // What an instance's receiving thread spends handing datagrams to its
    // workers: the ceiling of a dispatching instance, whatever its workers do.
    if wanted("instance_dispatch") {
        let (h, n) = sluice_switch::tunnel::geneve_header(7, Some((1, 1)));
        let datagrams = wrapped(&small, |f| [&h[..n], f].concat());
        let base = out
            .iter()
            .find(|m| m.name == format!("forward_only_t{}", threads[0]))
            .cloned();
        for &t in threads {
            let row = format!("instance_dispatch_t{t}");
            progress(&row);
            let secs = time_dispatch(&datagrams, t, opts.reps);
            let mut m = measurement(&row, &datagrams, secs, small_size + n);
            m.note = format!("one thread's Geneve parse, flow hash and copy to {t} worker(s)");
            if let Some(b) = &base {
                m.ratio_to_baseline = m.mpps / b.mpps;
                m.baseline = b.name.clone();
            }
            out.push(m);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Best on-CPU seconds of `reps` runs of an instance's dispatcher
/// ([`sluice_instance::workers::Dispatcher`]) over `datagrams` to `workers`
/// workers, each inbox given back at once.
fn time_dispatch(datagrams: &Trace, workers: usize, reps: usize) -> f64 {
    use sluice_instance::workers::Dispatcher;
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let mut d = Dispatcher::new(workers, 32, 2048);
        let mut handed = Vec::with_capacity(workers * 2);
        let start = Instant::now();
        let cpu0 = thread_cpu_ns();
        let mut count = 0usize;
        for (_, dg) in datagrams.iter() {
            d.dispatch(dg, &mut |_, inbox| handed.push(inbox));
            for inbox in handed.drain(..) {
                count += inbox.len();
                d.give_back(inbox);
            }
        }
        d.flush(&mut |_, inbox| handed.push(inbox));
        for inbox in handed.drain(..) {
            count += inbox.len();
            d.give_back(inbox);
        }
        std::hint::black_box(count);
        let wall = start.elapsed().as_secs_f64();
        let cpu = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
        best = best.min(if cpu > 0.0 { cpu.min(wall) } else { wall });
    }
    best
}
