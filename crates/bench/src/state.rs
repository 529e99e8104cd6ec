//! `sluice bench state`: what keeping state in a remote store costs (StatelessNF
//! §4.6.2, Fig. 4.4 and the latency of Fig. 4.6), and how many store operations
//! each packet needs (Table 4.1).
//!
//! Every workload runs twice in the same process on the same trace: once with the
//! state in a [`LocalStore`], once in a Redis store (a private `redis-server` on
//! loopback started here, or the store `--state` names). Time is wall clock, not
//! on-CPU time as in `bench nf`: waiting for the store is off-CPU and is exactly the
//! cost being measured. The trace is replayed at the rate a calibration run with
//! local state reaches (its timestamps, the chains' clock, spaced by that run's
//! time per packet), so time bounds such as "deferred writes flushed within
//! 1 ms" act per packet as they would at that rate.
//!
//! The generated traffic's servers are the addresses the LB serves as VIPs; for
//! the LB, the replies are rewritten to come from the backend each connection was
//! sent to ([`replies_from_backends`]), as they would in front of real servers,
//! so it handles both directions of every connection.
//!
//! A third run per workload puts the flow cache in front of the remote store
//! (docs/STATE.md, "Consistency model"): the instance holds an ownership lease on
//! every flow, as a single instance behind a hash-range split would, so flow-owned
//! records are read from the cache and refreshes/counters are deferred.
//!
//! Each run uses a chain name of its own, so its functions get fresh namespaces and
//! never find state an earlier run left in a shared store (state written into an
//! existing store is left there, under those one-off namespaces).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_chain::{Chain, ChainSpec, Pipeline, Sharing};
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_state::{LocalStore, Ownership, StateStore, StoreCounters};
use sluice_state_redis::server::RedisServer;
use sluice_trafficgen::{generate, Trace, TrafficSpec};
use sluice_wire::parse::parse_frame;
use sluice_wire::tcp::flags::{FIN, RST, SYN};

use crate::nf::{self, ChainText};

/// Remote/local throughput a long-flow workload should reach, at every frame size.
pub const TARGET_RATIO_LONG: f64 = 0.9;
/// Remote/local throughput a short-flow workload should reach at 64 bytes.
pub const TARGET_RATIO_SHORT_64: f64 = 0.5;
/// Added p50 latency (µs) of established-flow batches the remote store may cost.
pub const TARGET_ADDED_P50_US: f64 = 5.0;
/// Added p95 latency (µs) of established-flow batches the remote store may cost.
pub const TARGET_ADDED_P95_US: f64 = 50.0;

/// Options of `sluice bench state`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Fewer frame sizes and packets, for a fast run.
    pub quick: bool,
    /// `redis://HOST:PORT` or `redis-cluster://HOST:PORT,...` of an existing store;
    /// `None` starts a private `redis-server` on loopback.
    pub state: Option<String>,
    /// Only measurements whose name (e.g. `firewall_long_64`) contains this.
    pub filter: Option<String>,
    /// Rounds per workload, each running every backend once in turn; the
    /// fastest run of each is kept.
    pub reps: usize,
    /// Packets per window of the pipelined runs (rounded to whole batches, at
    /// least one); 0 skips them.
    pub window: usize,
}

/// Packets per window of the pipelined runs by default: 16 batches of 32.
pub const DEFAULT_WINDOW: usize = 512;

/// Batches per pipeline window of `window_packets` packets for batches of
/// `batch_size` (at least one batch).
pub fn window_batches(window_packets: usize, batch_size: usize) -> usize {
    (window_packets / batch_size.max(1)).max(1)
}

impl Default for Options {
    fn default() -> Self {
        Options {
            quick: false,
            state: None,
            filter: None,
            reps: 3,
            window: DEFAULT_WINDOW,
        }
    }
}

/// Long flows (StatelessNF's best case) or short flows (its worst case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowsKind {
    /// Few flows of 10,000 packets.
    Long,
    /// Many flows of 100 packets.
    Short,
}

impl FlowsKind {
    fn name(self) -> &'static str {
        match self {
            FlowsKind::Long => "long",
            FlowsKind::Short => "short",
        }
    }
}

/// A trace plus which of its batches carry only packets of established flows.
pub struct Workload {
    /// Long or short flows.
    pub kind: FlowsKind,
    /// Frame size of data packets.
    pub frame_size: usize,
    /// The packets.
    pub trace: Trace,
    /// Per batch of `batch_size`: true if no packet opens or closes a connection
    /// (SYN, FIN, RST), every packet's flow was seen in an earlier batch, and
    /// none was closing already (past its first FIN or RST: the teardown's last
    /// ACK completes a close, a state change, not an established packet).
    pub established: Vec<bool>,
    /// Batch size `established` was computed for.
    pub batch_size: usize,
    /// Mean number of distinct flows per batch: functions read each flow once per
    /// batch, so this bounds their reads per packet.
    pub flows_per_batch: f64,
}

impl Workload {
    /// Generates `packets` packets (rounded to whole flows) of `kind` traffic.
    pub fn new(kind: FlowsKind, frame_size: usize, packets: usize, batch_size: usize) -> Self {
        let spec = match kind {
            FlowsKind::Long => TrafficSpec::long_flows((packets / 10_000).max(1), frame_size),
            FlowsKind::Short => TrafficSpec::short_flows((packets / 100).max(1), frame_size),
        };
        Workload::from_trace(kind, frame_size, generate(&spec), batch_size)
    }

    /// Wraps an existing trace, classifying its batches.
    pub fn from_trace(kind: FlowsKind, frame_size: usize, trace: Trace, batch_size: usize) -> Self {
        let batch_size = batch_size.max(1);
        let mut seen = HashSet::new();
        // Flows past their first FIN or RST: closing, no longer established.
        let mut closing = HashSet::new();
        let mut this_batch = Vec::with_capacity(batch_size);
        let mut established = Vec::with_capacity(trace.len() / batch_size + 1);
        let mut distinct = 0usize;
        let mut i = 0;
        while i < trace.len() {
            let end = (i + batch_size).min(trace.len());
            let mut all = true;
            this_batch.clear();
            for j in i..end {
                let Ok(m) = parse_frame(trace.get(j).1) else {
                    all = false;
                    continue;
                };
                let flow = m.flow.canonical().0;
                if m.tcp_flags & (SYN | FIN | RST) != 0
                    || !seen.contains(&flow)
                    || closing.contains(&flow)
                {
                    all = false;
                }
                if m.tcp_flags & (FIN | RST) != 0 {
                    closing.insert(flow);
                }
                this_batch.push(flow);
            }
            seen.extend(this_batch.iter().copied());
            this_batch.sort_unstable();
            this_batch.dedup();
            distinct += this_batch.len();
            established.push(all);
            i = end;
        }
        let flows_per_batch = distinct as f64 / established.len().max(1) as f64;
        Workload {
            kind,
            frame_size,
            trace,
            established,
            batch_size,
            flows_per_batch,
        }
    }
}

/// What one run of a trace through a chain observed.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    /// Packets run.
    pub packets: u64,
    /// Wall-clock seconds spent copying frames in and processing them.
    pub secs: f64,
    /// Per batch: (nanoseconds of `chain.process`, packets, established).
    pub batches: Vec<(u64, u32, bool)>,
    /// Store operations the run issued.
    pub counters: StoreCounters,
    /// Packets forwarded.
    pub forwarded: u64,
    /// Packets dropped by a function.
    pub dropped: u64,
    /// Batches a function failed on because of a store error.
    pub store_errors: u64,
    /// FNV-1a of every packet's verdict and output bytes, in order (0 unless asked).
    pub digest: u64,
}

impl RunOutcome {
    /// Million packets per second.
    pub fn mpps(&self) -> f64 {
        if self.secs > 0.0 {
            self.packets as f64 / self.secs / 1e6
        } else {
            0.0
        }
    }

    /// Per-packet latency percentile `q` (0..=1) in µs: each packet is charged the
    /// time of the `process` call of its batch. `only_established` keeps only
    /// batches of established flows. `None` if no batch qualifies.
    pub fn percentile_us(&self, q: f64, only_established: bool) -> Option<f64> {
        let mut v: Vec<(u64, u32)> = self
            .batches
            .iter()
            .filter(|b| !only_established || b.2)
            .map(|b| (b.0, b.1))
            .collect();
        percentile_us(&mut v, q)
    }
}

/// Percentile `q` of a distribution given as (value ns, weight) pairs, in µs.
pub fn percentile_us(v: &mut [(u64, u32)], q: f64) -> Option<f64> {
    let total: u64 = v.iter().map(|b| b.1 as u64).sum();
    if total == 0 {
        return None;
    }
    v.sort_unstable_by_key(|b| b.0);
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut acc = 0u64;
    for &(ns, w) in v.iter() {
        acc += w as u64;
        if acc >= rank {
            return Some(ns as f64 / 1e3);
        }
    }
    v.last().map(|b| b.0 as f64 / 1e3)
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Runs `w` once through a fresh chain built from `spec` (renamed `name`, so its
/// namespaces are its own) with state in `store`. `digest` hashes every packet's
/// verdict and bytes after processing (outside the timed part).
pub fn run_once(
    spec: &ChainSpec,
    dir: &Path,
    name: &str,
    w: &Workload,
    store: &mut dyn StateStore,
    digest: bool,
) -> Result<RunOutcome, String> {
    run_once_with(spec, dir, name, w, store, digest, false)
}

/// [`run_once`], optionally with the flow cache: `cached` grants the chain an
/// ownership lease on every flow before the first packet.
pub fn run_once_with(
    spec: &ChainSpec,
    dir: &Path,
    name: &str,
    w: &Workload,
    store: &mut dyn StateStore,
    digest: bool,
    cached: bool,
) -> Result<RunOutcome, String> {
    let mode = RunMode::cached_if(cached);
    run_once_mode(spec, dir, name, w, store, digest, mode)
}

/// How a run drives the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// Every batch straight through `chain.process`, no cache.
    Plain,
    /// The same with an ownership lease on every flow (the flow cache).
    Cached,
    /// The flow cache and a [`Pipeline`] of windows of this many batches: the
    /// next window's records are read while the current one is processed, and
    /// batches wait for the store's acknowledgements, not for their own round
    /// trips (docs/STATE.md, "Pipelining"). Latency is then measured from a
    /// batch's arrival to its release.
    Pipelined(usize),
    /// [`RunMode::Pipelined`] with one batch arriving every `gap_ns`, the
    /// input idle in between: an instance below its capacity. Each idle gap
    /// drains the pipeline ([`Pipeline::drain`], as `sluice instance` does
    /// when its input goes idle), so a batch waits for its own store writes,
    /// not for a window to fill. Latency from arrival to release.
    Paced {
        /// Batches per window.
        window: usize,
        /// Time between batch arrivals.
        gap_ns: u64,
    },
}

impl RunMode {
    /// [`RunMode::Cached`] if `cached`, else [`RunMode::Plain`].
    pub fn cached_if(cached: bool) -> RunMode {
        if cached {
            RunMode::Cached
        } else {
            RunMode::Plain
        }
    }
}

/// One run of `w` through a fresh chain named `name` in `mode`.
pub fn run_once_mode(
    spec: &ChainSpec,
    dir: &Path,
    name: &str,
    w: &Workload,
    store: &mut dyn StateStore,
    digest: bool,
    mode: RunMode,
) -> Result<RunOutcome, String> {
    let mut spec = spec.clone();
    spec.name = name.to_string();
    spec.settings.batch_size = w.batch_size;
    let registry = sluice_builtin::registry();
    let mut chain =
        Chain::from_spec(&spec, dir, &registry, Sharing::Shared).map_err(|e| e.to_string())?;
    if mode != RunMode::Plain {
        chain
            .set_ownership(Some(Ownership::all(1, u64::MAX)), store)
            .map_err(|e| e.to_string())?;
    }
    let mut out = RunOutcome {
        packets: w.trace.len() as u64,
        batches: Vec::with_capacity(w.established.len()),
        digest: 0xcbf2_9ce4_8422_2325,
        ..Default::default()
    };
    let before = store.counters();
    let busy_ns = match mode {
        RunMode::Pipelined(window) => {
            run_pipelined(&mut chain, w, store, digest, window, None, &mut out)
        }
        RunMode::Paced { window, gap_ns } => {
            run_pipelined(&mut chain, w, store, digest, window, Some(gap_ns), &mut out)
        }
        _ => run_batches(&mut chain, w, store, digest, &mut out),
    };
    // Deferred writes reach the store before the run counts as done (untimed, as
    // the end of a trace is not a steady state).
    if mode != RunMode::Plain {
        chain
            .set_ownership(None, store)
            .map_err(|e| format!("flushing the cache: {e}"))?;
    }
    out.secs = busy_ns as f64 / 1e9;
    out.counters = store.counters().since(&before);
    std::hint::black_box(chain.take_events());
    let st = chain.stats();
    out.forwarded = st.forwarded;
    out.dropped = st.dropped;
    out.store_errors = st.store_errors;
    if st.forwarded + st.dropped + st.malformed_total() != out.packets {
        return Err(format!(
            "chain lost packets: {} in, stats {st:?}",
            out.packets
        ));
    }
    if let Some(e) = st.last_error {
        return Err(format!("store error during the run: {e}"));
    }
    Ok(out)
}

fn digest_batch(h: &mut u64, batch: &Batch) {
    for p in &batch.pkts {
        match p.verdict {
            Verdict::Forward => fnv(h, b"F"),
            Verdict::Drop(r) => fnv(h, r.reason.as_bytes()),
        }
        fnv(h, p.data());
    }
}

/// Batch by batch; returns the busy nanoseconds.
fn run_batches(
    chain: &mut Chain,
    w: &Workload,
    store: &mut dyn StateStore,
    digest: bool,
    out: &mut RunOutcome,
) -> u64 {
    let batch_size = w.batch_size;
    let mut pool = PacketPool::new(batch_size * 2);
    let mut batch = Batch::with_capacity(batch_size);
    let mut busy_ns = 0u64;
    let (mut i, mut b) = (0, 0);
    while i < w.trace.len() {
        let end = (i + batch_size).min(w.trace.len());
        let t0 = Instant::now();
        for j in i..end {
            let (ts, f) = w.trace.get(j);
            batch.push_frame(&mut pool, f, ts, 0);
        }
        let t1 = Instant::now();
        chain.process(&mut batch, store);
        let t2 = Instant::now();
        busy_ns += (t2 - t0).as_nanos() as u64;
        out.batches.push((
            (t2 - t1).as_nanos() as u64,
            (end - i) as u32,
            w.established.get(b).copied().unwrap_or(false),
        ));
        if digest {
            digest_batch(&mut out.digest, &batch);
        }
        batch.recycle(&mut pool);
        i = end;
        b += 1;
    }
    busy_ns
}

/// Through a [`Pipeline`]; returns the busy nanoseconds (everything but the
/// digest), and charges each batch the time from its arrival to its release.
fn run_pipelined(
    chain: &mut Chain,
    w: &Workload,
    store: &mut dyn StateStore,
    digest: bool,
    window: usize,
    pace_ns: Option<u64>,
    out: &mut RunOutcome,
) -> u64 {
    let batch_size = w.batch_size;
    let start = Instant::now();
    let mut pool = PacketPool::new(batch_size * (6 * window + 4));
    let mut free: Vec<Batch> = Vec::new();
    let mut pipe: Pipeline<(Instant, usize, u32)> = Pipeline::new(chain, store, window);
    let mut busy_ns = 0u64;
    let take = |pipe: &mut Pipeline<(Instant, usize, u32)>,
                out: &mut RunOutcome,
                pool: &mut PacketPool,
                free: &mut Vec<Batch>,
                now: Instant| {
        while let Some((mut batch, (t0, b, n))) = pipe.pop() {
            out.batches.push((
                (now - t0).as_nanos() as u64,
                n,
                w.established.get(b).copied().unwrap_or(false),
            ));
            if digest {
                digest_batch(&mut out.digest, &batch);
            }
            batch.recycle(pool);
            free.push(batch);
        }
    };
    let (mut i, mut b) = (0, 0);
    while i < w.trace.len() {
        let end = (i + batch_size).min(w.trace.len());
        if let Some(gap) = pace_ns {
            let arrival = start + Duration::from_nanos(gap.saturating_mul(b as u64));
            if Instant::now() < arrival {
                // The input is idle until the next batch: finish what is in
                // flight, as an instance does.
                let t0 = Instant::now();
                pipe.drain(chain, store);
                let t1 = Instant::now();
                busy_ns += (t1 - t0).as_nanos() as u64;
                take(&mut pipe, out, &mut pool, &mut free, t1);
            }
            while Instant::now() < arrival {
                std::hint::spin_loop();
            }
        }
        let t0 = Instant::now();
        let mut batch = free
            .pop()
            .unwrap_or_else(|| Batch::with_capacity(batch_size));
        for j in i..end {
            let (ts, f) = w.trace.get(j);
            if !batch.push_frame(&mut pool, f, ts, 0) {
                // Every buffer is in flight (the store is slow to acknowledge):
                // wait for it, as a receive ring would fill up.
                pipe.flush(chain, store);
                take(&mut pipe, out, &mut pool, &mut free, Instant::now());
                batch.push_frame(&mut pool, f, ts, 0);
            }
        }
        pipe.push(chain, store, batch, (t0, b, (end - i) as u32));
        let t1 = Instant::now();
        busy_ns += (t1 - t0).as_nanos() as u64;
        take(&mut pipe, out, &mut pool, &mut free, t1);
        i = end;
        b += 1;
    }
    let t0 = Instant::now();
    pipe.flush(chain, store);
    let t1 = Instant::now();
    busy_ns += (t1 - t0).as_nanos() as u64;
    take(&mut pipe, out, &mut pool, &mut free, t1);
    // Released in order, so the per-batch list lines up with `established`.
    busy_ns
}

/// Opens a remote store by URL (`redis://`, `redis-cluster://`, or their
/// TLS variants `rediss://`, `rediss-cluster://`).
pub fn open_remote(url: &str) -> Result<Box<dyn StateStore>, String> {
    if !sluice_state_redis::is_store_url(url) {
        return Err(format!(
            "--state {url}: expected redis://HOST:PORT or redis-cluster://HOST:PORT,... \
             (rediss:// for TLS)"
        ));
    }
    sluice_state_redis::open_store(url)
        .map_err(|e| format!("{}: {e}", sluice_state_redis::redact_url(url)))
}

/// Store operations per packet.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct OpsPerPacket {
    /// Reads (get).
    pub reads: f64,
    /// Writes (put, delete).
    pub writes: f64,
    /// Atomic operations (compare-and-set, counters, pools).
    pub atomics: f64,
    /// Timer operations.
    pub timers: f64,
    /// Round trips (`execute` and `take_expired` calls with work).
    pub round_trips: f64,
}

impl OpsPerPacket {
    /// `c` divided by `packets`.
    pub fn new(c: &StoreCounters, packets: u64) -> Self {
        let n = packets.max(1) as f64;
        OpsPerPacket {
            reads: c.reads as f64 / n,
            writes: c.writes as f64 / n,
            atomics: c.atomics as f64 / n,
            timers: c.timers as f64 / n,
            round_trips: c.round_trips as f64 / n,
        }
    }
}

/// One local-vs-remote comparison, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct StateMeasurement {
    /// `{function}_{flows}_{frame_size}`.
    pub name: String,
    /// The function measured.
    pub function: String,
    /// Frame size of data packets.
    pub frame_size: usize,
    /// Long or short flows.
    pub flows: FlowsKind,
    /// Packets per run.
    pub packets: u64,
    /// Packets per batch, the same for the local, remote and cached runs.
    pub batch_size: usize,
    /// Throughput with a [`LocalStore`].
    pub mpps_local: f64,
    /// Throughput with the remote store.
    pub mpps_remote: f64,
    /// `mpps_remote / mpps_local`.
    pub ratio: f64,
    /// The target for `ratio`, if there is one for this workload.
    pub target_ratio: Option<f64>,
    /// Added per-packet latency (remote minus local), 50th percentile, µs.
    pub p50_us: f64,
    /// Added latency, 95th percentile, µs.
    pub p95_us: f64,
    /// Added latency, 99th percentile, µs.
    pub p99_us: f64,
    /// Added latency of established-flow batches only: p50, µs.
    pub established_p50_us: Option<f64>,
    /// Added latency of established-flow batches only: p95, µs.
    pub established_p95_us: Option<f64>,
    /// Added latency of established-flow batches only: p99, µs.
    pub established_p99_us: Option<f64>,
    /// Fraction of packets in established-flow batches.
    pub established_share: f64,
    /// Mean distinct flows per batch (functions read each flow once per batch).
    pub flows_per_batch: f64,
    /// Local per-packet latency p50/p95/p99, µs (what the differences start from).
    pub local_us: [f64; 3],
    /// Remote per-packet latency p50/p95/p99, µs.
    pub remote_us: [f64; 3],
    /// Store operations per packet (remote run; the local run's are in `ops_local`).
    pub ops_per_packet: OpsPerPacket,
    /// Store operations per packet of the local run.
    pub ops_local: OpsPerPacket,
    /// StatelessNF Table 4.1's access pattern for this function.
    pub paper: String,
    /// The remote store.
    pub store: String,
    /// The same workload on the remote store with the flow cache in front.
    pub cached: Option<CachedMeasurement>,
    /// The same again, pipelined ([`RunMode::Pipelined`]); its latencies run
    /// from a batch's arrival to its release.
    pub pipelined: Option<CachedMeasurement>,
    /// Batches per window of the pipelined run (0 if none ran).
    pub window: usize,
    /// The plain remote run again as a tenant's ACL user (`AUTH` on connect,
    /// every key under the tenant's prefix, the restricted command set), in the
    /// same rounds as the others: what store isolation costs.
    pub authed: Option<CachedMeasurement>,
    /// `authed.mpps / mpps_remote`.
    pub authed_vs_plain: Option<f64>,
    /// The plain remote run again as the tenant's ACL user over TLS
    /// (`rediss://`, the private server's TLS port), in the same rounds.
    pub secure: Option<CachedMeasurement>,
    /// `secure.mpps / mpps_remote`.
    pub secure_vs_plain: Option<f64>,
    /// The cached run again as the tenant's ACL user over TLS: what the
    /// deployed configuration (flow cache, TLS, authentication) costs against
    /// the cached run without them (the issue's goal: at most 5%).
    pub secure_cached: Option<CachedMeasurement>,
    /// `secure_cached.mpps / cached.mpps`.
    pub secure_cached_vs_cached: Option<f64>,
    /// The pipelined run again as the tenant's ACL user over TLS: the flow
    /// cache with its reads ahead and writes unacknowledged ([`RunMode::Pipelined`],
    /// a middlebox's `pipeline:`), which hides the round trips TLS lengthens.
    pub secure_pipelined: Option<CachedMeasurement>,
    /// `secure_pipelined.mpps / pipelined.mpps`.
    pub secure_pipelined_vs_pipelined: Option<f64>,
    /// The pipelined run again, one batch arriving every [`PACED_SLOWDOWN`]
    /// batch times of the cached run ([`RunMode::Paced`]): latency below
    /// capacity. Its throughput counts busy time only.
    pub paced: Option<CachedMeasurement>,
}

/// The remote run with the flow cache (ownership of every flow), against the same
/// local run.
#[derive(Debug, Clone, Serialize)]
pub struct CachedMeasurement {
    /// Throughput, remote store behind the cache.
    pub mpps: f64,
    /// `mpps / mpps_local`.
    pub ratio: f64,
    /// Added latency (cached remote minus local), p50/p95/p99, µs.
    pub added_us: [f64; 3],
    /// Added latency of established-flow batches, p50/p95/p99, µs.
    pub established_added_us: Option<[f64; 3]>,
    /// Store operations per packet that reached the store.
    pub ops_per_packet: OpsPerPacket,
}

/// The benchmarked functions: (name, chain, StatelessNF Table 4.1's access pattern).
pub fn functions() -> Vec<(&'static str, ChainText, &'static str)> {
    vec![
        (
            "firewall",
            nf::firewall_chain(1000),
            "1 read/pkt; 5 r/w at conn start/end",
        ),
        (
            "nat",
            // Ports allocated 64 at a time: a new mapping needs no pool round trip.
            nf::nat_chain_reserving(64),
            "1 read/pkt; pool + mapping r/w at conn start/end",
        ),
        (
            "lb",
            nf::lb_chain(),
            "1 read/pkt; pool + server r/w at conn start/end",
        ),
        (
            "ips",
            nf::ips_chain(100),
            "1 read + 1 write/pkt (+ reassembly 1 r/w/pkt)",
        ),
        ("monitor", nf::monitor_chain(), "not in Table 4.1"),
    ]
}

/// Opens the remote store for a run of the mode with the given suffix.
type OpenStore<'a> = dyn FnMut(&str) -> Result<Box<dyn StateStore>, String> + 'a;

/// The fastest run of each mode over `reps` rounds of `w`, one run of every
/// mode per round, in turn: load that comes and goes on a shared machine then
/// touches every mode alike, rather than whichever ran during it. Each remote
/// run gets a store from `open(suffix)` (a local one a [`LocalStore`]); a mode whose
/// run fails is left out (with its error) and the others go on.
fn best_of_rounds(
    spec: &ChainSpec,
    dir: &Path,
    tag: &str,
    w: &Workload,
    reps: usize,
    open: &mut OpenStore,
    modes: &[(&str, bool, RunMode)],
) -> Vec<Result<RunOutcome, String>> {
    let mut best: Vec<Result<RunOutcome, String>> =
        modes.iter().map(|_| Err("no run".to_string())).collect();
    for r in 0..reps.max(1) {
        for (&(suffix, remote, mode), best) in modes.iter().zip(best.iter_mut()) {
            // Every mode ran in round 0: an error now is that run's; stop there.
            if r > 0 && best.is_err() {
                continue;
            }
            let name = format!("bench-{}-{tag}-{suffix}-{r}", std::process::id());
            let store: Result<Box<dyn StateStore>, String> = if remote {
                open(suffix)
            } else {
                Ok(Box::new(LocalStore::new()))
            };
            let o =
                store.and_then(|mut st| run_once_mode(spec, dir, &name, w, &mut *st, false, mode));
            match o {
                Ok(o) if best.as_ref().is_ok_and(|b| b.secs <= o.secs) => {}
                Ok(o) => *best = Ok(o),
                Err(e) => *best = Err(e),
            }
        }
    }
    best
}

/// Compares a local and a remote run of the same workload.
pub fn compare(
    function: &str,
    w: &Workload,
    local: &RunOutcome,
    remote: &RunOutcome,
    paper: &str,
    store: &str,
) -> StateMeasurement {
    let pct = |o: &RunOutcome, q: f64, est: bool| o.percentile_us(q, est);
    let added = |q: f64, est: bool| match (pct(remote, q, est), pct(local, q, est)) {
        (Some(r), Some(l)) => Some(r - l),
        _ => None,
    };
    let est_pkts: u64 = local
        .batches
        .iter()
        .filter(|b| b.2)
        .map(|b| b.1 as u64)
        .sum();
    let trio = |o: &RunOutcome| [0.5, 0.95, 0.99].map(|q| pct(o, q, false).unwrap_or(0.0));
    let target_ratio = match (w.kind, w.frame_size) {
        (FlowsKind::Long, _) => Some(TARGET_RATIO_LONG),
        (FlowsKind::Short, 64) => Some(TARGET_RATIO_SHORT_64),
        _ => None,
    };
    let mpps_local = local.mpps();
    let mpps_remote = remote.mpps();
    StateMeasurement {
        name: measurement_name(function, w),
        function: function.to_string(),
        frame_size: w.frame_size,
        flows: w.kind,
        packets: local.packets,
        batch_size: w.batch_size,
        mpps_local,
        mpps_remote,
        ratio: if mpps_local > 0.0 {
            mpps_remote / mpps_local
        } else {
            0.0
        },
        target_ratio,
        p50_us: added(0.5, false).unwrap_or(0.0),
        p95_us: added(0.95, false).unwrap_or(0.0),
        p99_us: added(0.99, false).unwrap_or(0.0),
        established_p50_us: added(0.5, true),
        established_p95_us: added(0.95, true),
        established_p99_us: added(0.99, true),
        established_share: est_pkts as f64 / local.packets.max(1) as f64,
        flows_per_batch: w.flows_per_batch,
        local_us: trio(local),
        remote_us: trio(remote),
        ops_per_packet: OpsPerPacket::new(&remote.counters, remote.packets),
        ops_local: OpsPerPacket::new(&local.counters, local.packets),
        paper: paper.to_string(),
        store: store.to_string(),
        cached: None,
        pipelined: None,
        paced: None,
        window: 0,
        authed: None,
        authed_vs_plain: None,
        secure: None,
        secure_vs_plain: None,
        secure_cached: None,
        secure_cached_vs_cached: None,
        secure_pipelined: None,
        secure_pipelined_vs_pipelined: None,
    }
}

/// The cached remote run's numbers against the local run (see [`CachedMeasurement`]).
pub fn compare_cached(local: &RunOutcome, cached: &RunOutcome) -> CachedMeasurement {
    let added =
        |q: f64, est: bool| match (cached.percentile_us(q, est), local.percentile_us(q, est)) {
            (Some(r), Some(l)) => Some(r - l),
            _ => None,
        };
    let est = match (added(0.5, true), added(0.95, true), added(0.99, true)) {
        (Some(a), Some(b), Some(c)) => Some([a, b, c]),
        _ => None,
    };
    let l = local.mpps();
    CachedMeasurement {
        mpps: cached.mpps(),
        ratio: if l > 0.0 { cached.mpps() / l } else { 0.0 },
        added_us: [0.5, 0.95, 0.99].map(|q| added(q, false).unwrap_or(0.0)),
        established_added_us: est,
        ops_per_packet: OpsPerPacket::new(&cached.counters, cached.packets),
    }
}

/// Batch sizes of the extra short-flow runs at the smallest frame size: an NF
/// instance under load finds a full receive queue, so it can take a larger batch
/// whenever one is waiting, and one round trip then serves more packets. Every
/// backend (local, remote, cached) runs at the same size in those rows.
pub const LARGE_BATCHES: [usize; 2] = [256, 1024];

/// Paced runs offer one batch per this many batch times of the cached run: a
/// quarter of what the function sustains with the flow cache, not pipelined.
pub const PACED_SLOWDOWN: u64 = 4;

/// `{function}_{flows}_{frame_size}`, with `_b{batch}` unless the chain's default
/// batch size was used.
fn measurement_name(function: &str, w: &Workload) -> String {
    let base = format!("{function}_{}_{}", w.kind.name(), w.frame_size);
    if LARGE_BATCHES.contains(&w.batch_size) {
        format!("{base}_b{}", w.batch_size)
    } else {
        base
    }
}

/// Frame sizes measured.
pub fn frame_sizes(quick: bool) -> &'static [usize] {
    if quick {
        &[64, 512, 1500]
    } else {
        &[64, 128, 256, 512, 1500]
    }
}

/// Packets per trace: sized so a remote run takes about a second at 64 bytes, and
/// capped in bytes so full-size traces stay small in memory.
pub fn packets_for(quick: bool, frame_size: usize) -> usize {
    let (target, cap_bytes) = if quick {
        (100_000, 48 << 20)
    } else {
        (300_000, 128 << 20)
    };
    target.min(cap_bytes / frame_size.max(64)).max(10_000)
}

/// Every measurement of `sluice bench state`.
pub fn run(
    opts: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<StateMeasurement>, String> {
    let wanted = |n: &str| opts.filter.as_deref().is_none_or(|f| n.contains(f));
    let dir: PathBuf =
        std::env::temp_dir().join(format!("sluice-bench-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Kept alive (and killed on drop) for the whole run. A private server
    // also serves TLS, for the secure runs.
    let (_server, url, tls) = match opts.state.as_deref() {
        Some(u) => (None, u.to_string(), None),
        None => {
            let (s, tls) = private_with_tls(&dir)?;
            let u = s.url();
            (Some(s), u, Some(tls))
        }
    };
    // Fail early, before generating traffic, if the store is unreachable.
    let describe = open_remote(&url)?.describe();
    let authed = match tenant_url(&url, &dir) {
        Ok(u) => Some(u),
        Err(e) => {
            progress(&format!("auth+prefix runs skipped: {e}"));
            None
        }
    };
    let secure = match (&authed, &tls) {
        (Some(a), Some(t)) => Some(over_tls(a, t)?),
        _ => {
            progress("TLS runs skipped: they need the private server (no --state)");
            None
        }
    };
    let urls = Urls {
        plain: &url,
        authed: authed.as_deref(),
        secure: secure.as_deref(),
    };
    let result = run_in(opts, &wanted, &urls, &describe, &dir, progress);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The tenant whose store user the auth+prefix runs connect as.
pub const BENCH_TENANT: &str = "bench";

/// Creates [`BENCH_TENANT`]'s ACL user on the store at `url` (which must allow
/// `ACL SETUSER` and `FUNCTION LOAD`: a private server's default user, or an
/// admin URL) with a fresh password kept in a file under `dir`, loads the
/// backend's function library (which the tenant's user may not), and returns
/// its URL.
pub fn tenant_url(url: &str, dir: &Path) -> Result<String, String> {
    use sluice_state_redis::acl::{tenant_prefix, tenant_user, Admin};
    let mut admin = Admin::open(url).map_err(|e| e.to_string())?;
    let mut raw = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut raw))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    let pw: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    admin
        .set_tenant_user(BENCH_TENANT, &sluice_state_redis::Secret::new(pw.as_str()))
        .map_err(|e| e.to_string())?;
    admin.load_library().map_err(|e| e.to_string())?;
    let file = dir.join("store-tenant.pw");
    std::fs::write(&file, &pw).map_err(|e| format!("{}: {e}", file.display()))?;
    let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
    let hosts = rest.split('?').next().unwrap_or(rest);
    let hosts = hosts
        .rsplit_once('@')
        .map_or(hosts, |(_, h)| h)
        .trim_end_matches('/');
    Ok(format!(
        "{scheme}://{}@{hosts}?prefix={}&password_file={}",
        tenant_user(BENCH_TENANT),
        tenant_prefix(BENCH_TENANT),
        file.display()
    ))
}

/// The TLS port of a private server and the CA its certificate is from.
pub struct PrivateTls {
    /// Its TLS port on 127.0.0.1.
    pub port: u16,
    /// The CA file clients trust.
    pub ca: PathBuf,
}

/// A private redis-server on loopback that serves TLS too, with a CA and
/// certificate made in `dir`.
pub fn private_with_tls(dir: &Path) -> Result<(RedisServer, PrivateTls), String> {
    let files = sluice_state_redis::server::TlsFiles::create(dir, &["127.0.0.1"])?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port: {e}"))?
        .port();
    let args: Vec<String> = files
        .server_settings(port)
        .into_iter()
        // The plain port stays, for the plain runs.
        .filter(|(k, _)| *k != "port")
        .flat_map(|(k, v)| [format!("--{k}"), v])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = RedisServer::start(&args)?;
    Ok((s, PrivateTls { port, ca: files.ca }))
}

/// `tenant_url` (of a private server's plain port) at its TLS port instead.
fn over_tls(tenant_url: &str, tls: &PrivateTls) -> Result<String, String> {
    let rest = tenant_url
        .strip_prefix("redis://")
        .ok_or("the TLS runs need a redis:// store")?;
    let (user, rest) = rest.split_once('@').ok_or("no user")?;
    let (_, query) = rest.split_once('?').ok_or("no options")?;
    Ok(format!(
        "rediss://{user}@127.0.0.1:{}?{query}&ca_file={}",
        tls.port,
        tls.ca.display()
    ))
}

/// The store as the plain runs, the auth+prefix runs and the TLS runs reach it.
struct Urls<'a> {
    plain: &'a str,
    authed: Option<&'a str>,
    secure: Option<&'a str>,
}

impl Urls<'_> {
    /// The store a run of mode `suffix` connects to (`a`: the tenant user;
    /// `s`, `t`, `u`: the tenant user over TLS).
    fn open(&self, suffix: &str) -> Result<Box<dyn StateStore>, String> {
        match (suffix, self.authed, self.secure) {
            ("a", Some(u), _) => open_remote(u),
            ("s" | "t" | "u", _, Some(u)) => open_remote(u),
            _ => open_remote(self.plain),
        }
    }
}

fn run_in(
    opts: &Options,
    wanted: &dyn Fn(&str) -> bool,
    urls: &Urls,
    describe: &str,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<StateMeasurement>, String> {
    let mut specs = Vec::new();
    for (name, text, paper) in functions() {
        // Each function writes its files under its own directory: names may clash.
        let d = dir.join(name);
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        specs.push((name, nf::load_spec(&d, &text)?, d, paper));
    }
    let mut out = Vec::new();
    let default_batch = specs[0].1.settings.batch_size;
    let smallest = frame_sizes(opts.quick)[0];
    let mut runs: Vec<(FlowsKind, usize, usize)> = Vec::new();
    for kind in [FlowsKind::Long, FlowsKind::Short] {
        for &size in frame_sizes(opts.quick) {
            runs.push((kind, size, default_batch));
        }
    }
    // Short flows at 64 B again with large batches (see LARGE_BATCHES).
    for b in LARGE_BATCHES {
        runs.push((FlowsKind::Short, smallest, b));
    }
    {
        for &(kind, size, batch_size) in &runs {
            let suffix = if LARGE_BATCHES.contains(&batch_size) {
                format!("_b{batch_size}")
            } else {
                String::new()
            };
            let names: Vec<String> = specs
                .iter()
                .map(|s| format!("{}_{}_{size}{suffix}", s.0, kind.name()))
                .collect();
            if !names.iter().any(|n| wanted(n)) {
                continue;
            }
            let mut w = Workload::new(kind, size, packets_for(opts.quick, size), batch_size);
            for ((function, spec, d, paper), name) in specs.iter().zip(&names) {
                if !wanted(name) {
                    continue;
                }
                progress(name);
                let mut lb_w;
                let w = if *function == "lb" {
                    let trace = replies_from_backends(spec, d, &w.trace)?;
                    lb_w = Workload::from_trace(kind, size, trace, batch_size);
                    &mut lb_w
                } else {
                    &mut w
                };
                calibrate(spec, d, &format!("{name}-cal"), w);
                let mut modes = vec![
                    ("l", false, RunMode::Plain),
                    ("r", true, RunMode::Plain),
                    ("c", true, RunMode::Cached),
                ];
                if urls.authed.is_some() {
                    modes.push(("a", true, RunMode::Plain));
                }
                if urls.secure.is_some() {
                    modes.push(("s", true, RunMode::Plain));
                    modes.push(("t", true, RunMode::Cached));
                }
                if opts.window > 0 {
                    let window = window_batches(opts.window, batch_size);
                    modes.push(("p", true, RunMode::Pipelined(window)));
                    if urls.secure.is_some() {
                        modes.push(("u", true, RunMode::Pipelined(window)));
                    }
                }
                let mut runs = best_of_rounds(
                    spec,
                    d,
                    name,
                    w,
                    opts.reps,
                    &mut |suffix| urls.open(suffix),
                    &modes,
                )
                .into_iter();
                let (local, remote, cached) = (
                    runs.next().expect("local"),
                    runs.next().expect("remote"),
                    runs.next().expect("cached"),
                );
                let authed = urls.authed.and_then(|_| runs.next());
                let (secure, secure_cached) = match urls.secure {
                    Some(_) => (runs.next(), runs.next()),
                    None => (None, None),
                };
                let pipelined = runs.next();
                let secure_pipelined = runs.next();
                // Below capacity: a quarter of what the cached path sustains
                // without pipelining, so no batch queues behind another's
                // round trips.
                let paced = match &cached {
                    Ok(c) if opts.window > 0 && c.packets > 0 => {
                        let ns_per_packet = c.secs * 1e9 / c.packets as f64;
                        let gap_ns = (ns_per_packet * batch_size as f64) as u64 * PACED_SLOWDOWN;
                        let window = window_batches(opts.window, batch_size);
                        let mode = [("q", true, RunMode::Paced { window, gap_ns })];
                        let open = &mut |suffix: &str| urls.open(suffix);
                        best_of_rounds(spec, d, name, w, opts.reps, open, &mode).pop()
                    }
                    _ => None,
                };
                match (local, remote) {
                    (Ok(l), Ok(r)) => {
                        let mut m = compare(function, w, &l, &r, paper, describe);
                        match cached {
                            Ok(c) => m.cached = Some(compare_cached(&l, &c)),
                            Err(e) => progress(&format!("{name}: cached run skipped: {e}")),
                        }
                        match pipelined {
                            Some(Ok(p)) => {
                                m.pipelined = Some(compare_cached(&l, &p));
                                m.window = window_batches(opts.window, batch_size);
                            }
                            Some(Err(e)) => {
                                progress(&format!("{name}: pipelined run skipped: {e}"))
                            }
                            None => {}
                        }
                        match authed {
                            Some(Ok(a)) => {
                                let c = compare_cached(&l, &a);
                                m.authed_vs_plain =
                                    (m.mpps_remote > 0.0).then(|| c.mpps / m.mpps_remote);
                                m.authed = Some(c);
                            }
                            Some(Err(e)) => {
                                progress(&format!("{name}: auth+prefix run skipped: {e}"))
                            }
                            None => {}
                        }
                        match secure {
                            Some(Ok(a)) => {
                                let c = compare_cached(&l, &a);
                                m.secure_vs_plain =
                                    (m.mpps_remote > 0.0).then(|| c.mpps / m.mpps_remote);
                                m.secure = Some(c);
                            }
                            Some(Err(e)) => progress(&format!("{name}: TLS run skipped: {e}")),
                            None => {}
                        }
                        match secure_cached {
                            Some(Ok(a)) => {
                                let c = compare_cached(&l, &a);
                                m.secure_cached_vs_cached = m
                                    .cached
                                    .as_ref()
                                    .filter(|x| x.mpps > 0.0)
                                    .map(|x| c.mpps / x.mpps);
                                m.secure_cached = Some(c);
                            }
                            Some(Err(e)) => {
                                progress(&format!("{name}: TLS cached run skipped: {e}"))
                            }
                            None => {}
                        }
                        match secure_pipelined {
                            Some(Ok(a)) => {
                                let c = compare_cached(&l, &a);
                                m.secure_pipelined_vs_pipelined = m
                                    .pipelined
                                    .as_ref()
                                    .filter(|x| x.mpps > 0.0)
                                    .map(|x| c.mpps / x.mpps);
                                m.secure_pipelined = Some(c);
                            }
                            Some(Err(e)) => {
                                progress(&format!("{name}: TLS pipelined run skipped: {e}"))
                            }
                            None => {}
                        }
                        match paced {
                            Some(Ok(p)) => m.paced = Some(compare_cached(&l, &p)),
                            Some(Err(e)) => progress(&format!("{name}: paced run skipped: {e}")),
                            None => {}
                        }
                        out.push(m);
                    }
                    (Err(e), _) | (_, Err(e)) => progress(&format!("{name}: skipped: {e}")),
                }
            }
        }
    }
    Ok(out)
}

/// The store at `url`, or (`None`) a private redis-server on loopback, returned
/// with it: keep it alive for the run (it is killed on drop).
pub fn store_or_private(url: Option<&str>) -> Result<(Option<RedisServer>, String), String> {
    match url {
        Some(u) => Ok((None, u.to_string())),
        None => {
            let s = RedisServer::start(&[])?;
            let u = s.url();
            Ok((Some(s), u))
        }
    }
}

/// The trace as a load balancer in front of servers would see it: replies come
/// from the backend each connection was given, not from the VIP the client
/// addressed (the generated traffic's servers are the LB's VIPs, so without this
/// the LB would pass every reply through untouched and only ever see clients).
/// One run of `spec` with local state over the trace decides the backends; each
/// reply then gets that backend's address and port as its source. Frames of
/// connections the run did not rewrite stay as they are.
pub fn replies_from_backends(spec: &ChainSpec, dir: &Path, trace: &Trace) -> Result<Trace, String> {
    use sluice_wire::flow::FlowKey;
    use sluice_wire::parse::{parse_into, PacketMeta};
    use sluice_wire::rewrite::{set_endpoint, Endpoint};
    let mut spec = spec.clone();
    spec.name = "lb-backends".into();
    let registry = sluice_builtin::registry();
    let mut chain =
        Chain::from_spec(&spec, dir, &registry, Sharing::Shared).map_err(|e| e.to_string())?;
    let mut store = LocalStore::new();
    // Client flow (as sent) -> the backend's (address, port) it was sent to.
    let mut backend: std::collections::HashMap<FlowKey, (sluice_wire::IpAddr, u16)> =
        std::collections::HashMap::new();
    let batch_size = spec.settings.batch_size.max(1);
    let mut pool = PacketPool::new(batch_size * 2);
    let mut batch = Batch::with_capacity(batch_size);
    let mut flows = Vec::with_capacity(batch_size);
    let mut i = 0;
    while i < trace.len() {
        let end = (i + batch_size).min(trace.len());
        flows.clear();
        for j in i..end {
            let (ts, f) = trace.get(j);
            flows.push(parse_frame(f).ok().map(|m| m.flow));
            batch.push_frame(&mut pool, f, ts, 0);
        }
        chain.process(&mut batch, &mut store);
        for (p, before) in batch.pkts.iter().zip(&flows) {
            let (Some(before), Ok(after)) = (before, parse_frame(p.data())) else {
                continue;
            };
            let after = after.flow;
            if p.verdict == Verdict::Forward
                && (after.dst, after.dst_port) != (before.dst, before.dst_port)
            {
                backend.insert(*before, (after.dst, after.dst_port));
            }
        }
        batch.recycle(&mut pool);
        i = end;
    }
    let mut out = Trace::new();
    let mut meta = PacketMeta::default();
    let mut frame = Vec::new();
    for (ts, f) in trace.iter() {
        frame.clear();
        frame.extend_from_slice(f);
        if parse_into(&frame, &mut meta).is_ok() {
            if let Some(&(addr, port)) = backend.get(&meta.flow.reverse()) {
                set_endpoint(&mut frame, &mut meta, Endpoint::Src, addr, port)
                    .map_err(|e| format!("rewriting a reply: {e}"))?;
            }
        }
        out.push(ts, &frame);
    }
    Ok(out)
}

/// Replays `w` at the rate one local run of `spec` achieves: its timestamps
/// spaced by that run's time per packet. The generated trace is 1 µs apart,
/// several times slower than the runs go, so every time bound (deferred writes
/// flushed within 1 ms, timer ticks) would act several times more often per
/// packet than at the rate measured. Every run of the workload then sees the
/// same timestamps, so they still issue the same operations.
fn calibrate(spec: &ChainSpec, dir: &Path, name: &str, w: &mut Workload) {
    let mut store = LocalStore::new();
    if let Ok(r) = run_once(spec, dir, name, w, &mut store, false) {
        if r.packets > 0 && r.secs > 0.0 {
            let gap = (r.secs * 1e9 / r.packets as f64).round().max(1.0) as u64;
            w.trace.restamp(gap);
        }
    }
}

mod report;

pub use report::*;
