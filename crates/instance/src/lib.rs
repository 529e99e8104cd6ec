//! One NF instance: the data plane of a middlebox instance process.
//!
//! The instance's agent sends it tenant frames Geneve-encapsulated over UDP (the
//! kernel adds and strips the outer headers). The instance decapsulates each
//! datagram, runs its chain (loaded from a chain YAML file, functions from
//! `sluice_builtin`) on whole batches with its state in the configured store, and
//! sends every forwarded frame back to the agent behind the Geneve header it came
//! with (the same bytes; a header longer than [`GENEVE_HEADER_MAX`], i.e. with
//! options besides chain/hop, is regenerated from its VNI and chain/hop option), so
//! the agent knows where the packet is in its tenant chain.
//!
//! [`DataPath`] is the sans-IO part (datagrams in, messages out); [`run`] wraps it in a
//! UDP socket opened inside the instance's network namespace, a poll loop and a
//! real clock for the chain's timers.
//!
//! Every [`HEARTBEAT_EVERY`] the instance also sends the agent a heartbeat
//! ([`sluice_proto::InstanceHeartbeat`]: a small datagram starting with
//! `SLHB`, which no Geneve packet does) from the same socket to the same agent
//! address, carrying its counters, CPU time and two latency histograms: its
//! store round trips ([`timed`]) and the time its batches spend in it. The agent suspects an instance
//! whose heartbeats stop and moves its traffic to the surviving instances; when
//! they resume (the process was only paused), the instance rejoins. A thread
//! of its own sends them ([`beat`]), so a data path waiting on a slow store
//! is not taken for a dead one, while a hung one still is.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_chain::{Chain, ChainSpec, ChainStats, Pipeline, Sharing, HELD_STAGE};
use sluice_netio::{in_netns_opt, Msg, Poller, RxBatch, UdpBatchSocket, DEFAULT_BUF_SIZE};
use sluice_nf::Event;
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_proto::{InstanceHeartbeat, LatencyHistogram};
use sluice_state::{LocalStore, StateStore};
use sluice_switch::tunnel::{geneve_header, parse_geneve_payload, TunnelError, GENEVE_HEADER_MAX};

/// How an instance runs.
#[derive(Debug, Clone)]
pub struct InstanceOptions {
    /// Instance name (for logs and statistics).
    pub name: String,
    /// Network namespace to open the data socket in (`None`: the current one).
    pub netns: Option<String>,
    /// Address the data socket binds to (the instance side of its link, port 6081).
    pub listen: SocketAddrV4,
    /// Where forwarded frames go (the agent's side of the link, port 6081).
    pub agent: SocketAddrV4,
    /// Chain specification (YAML).
    pub chain: PathBuf,
    /// State backend: `local`, `redis://HOST:PORT` or
    /// `redis-cluster://HOST:PORT[,HOST:PORT...]`.
    pub state: String,
    /// EVE log the functions' alerts and flow records are appended to
    /// (`None`: they are counted and discarded).
    pub eve: Option<PathBuf>,
    /// The JSON file of the load balancer's backends that are not up
    /// ([`sluice_proto::BackendOverride`]s, written by the agent): read at
    /// start and again at every timer tick after it changed.
    pub backends: Option<PathBuf>,
}

/// Why an instance could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The chain could not be loaded.
    #[error("chain {path}: {err}")]
    Chain {
        /// The chain file.
        path: PathBuf,
        /// What was wrong.
        err: sluice_chain::ChainError,
    },
    /// The state backend is not one this build knows.
    #[error("state backend {0:?}: unknown (available: local, redis://HOST:PORT, redis-cluster://HOST:PORT,...)")]
    UnknownState(String),
    /// The state backend could not be opened.
    #[error("state backend {spec}: {err}")]
    StateOpen {
        /// The backend as given.
        spec: String,
        /// Why it failed.
        err: sluice_state::StoreError,
    },
    /// The chain asks for workers it cannot have.
    #[error("chain {path}: settings.workers: {msg}")]
    Workers {
        /// The chain file.
        path: PathBuf,
        /// What was wrong.
        msg: String,
    },
    /// The data socket failed.
    #[error("{what}: {err}")]
    Socket {
        /// What was attempted.
        what: String,
        /// The OS error.
        err: io::Error,
    },
}

/// Opens the state backend `spec` names: `local`, `redis://HOST:PORT` or
/// `redis-cluster://HOST:PORT,...` (the same choice as `sluice run --state`).
/// A URL naming a user (`redis://USER@HOST:PORT?prefix=P`) takes its password
/// from `SLUICE_STORE_PASSWORD` or `?password_file=PATH`.
pub fn open_store(spec: &str) -> Result<Box<dyn StateStore>, InstanceError> {
    let open_err = |err| InstanceError::StateOpen {
        // A password the URL should not hold must not be repeated either.
        spec: sluice_state_redis::redact_url(spec),
        err,
    };
    match spec {
        "local" => Ok(Box::new(LocalStore::new())),
        url if sluice_state_redis::is_store_url(url) => {
            sluice_state_redis::open_store(url).map_err(open_err)
        }
        other => Err(InstanceError::UnknownState(other.to_string())),
    }
}

/// What an instance did so far.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct InstanceStats {
    /// Instance name.
    pub name: String,
    /// Datagrams received.
    pub rx: u64,
    /// Frames sent back to the agent.
    pub tx: u64,
    /// Datagrams whose Geneve header was refused (counted in `drops` by reason too).
    pub malformed: u64,
    /// Frames dropped outside the chain, by reason: `geneve_bad_header`,
    /// `geneve_not_ethernet`, `geneve_critical_option`, `oversize`,
    /// `pool_exhausted`, `tx_queue_full`, `tx_refused`, `emitted_not_sent`,
    /// `store_lost` (pipelined: the store write a batch waited for failed).
    pub drops: BTreeMap<&'static str, u64>,
    /// Receive errors of the socket (the loop carries on).
    pub rx_errors: u64,
    /// The chain's own statistics (forwarded, dropped by function and reason, ...),
    /// refreshed at every timer tick and when the instance stops.
    pub chain: ChainStats,
    /// Ownership leases from the agent ([`sluice_proto::InstanceLease`]).
    pub lease: LeaseStats,
    /// Pipelined mode (`settings.pipeline` of the chain): batches waited for
    /// because too many were in flight, and idle-input flushes.
    pub pipeline: PipelineStats,
    /// Events (alerts, flow records) written to the EVE log.
    pub events_written: u64,
    /// Events lost: the EVE log could not be written, or more waited than
    /// [`MAX_PENDING_EVENTS`].
    pub events_lost: u64,
    /// How long its store round trips took ([`timed::TimedStore`]).
    pub store_round_trips: LatencyHistogram,
    /// How long the packets it sent spent in it: from the receipt of their
    /// batch to the batch's transmission, one clock read per batch and one
    /// observation per packet sent.
    pub added_latency: LatencyHistogram,
}

/// What pipelined mode did (all zero when it is off).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PipelineStats {
    /// Packets per window (0: pipelining off).
    pub window_packets: usize,
    /// Times input went idle with batches in flight, which were then processed
    /// and released once the store had settled them.
    pub idle_flushes: u64,
    /// Times the pipeline was full (the store slower than the input) and the
    /// instance waited for it instead of taking more input.
    pub full_waits: u64,
    /// Flushes before a lease change (a pipelined instance changes its lease
    /// only with nothing in flight).
    pub lease_flushes: u64,
}

/// What the instance did with the leases its agent sent.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LeaseStats {
    /// The epoch held now (0: none; state goes straight to the store).
    pub epoch: u64,
    /// Hash ranges held now.
    pub ranges: usize,
    /// Leases installed (first grant or a new epoch or split).
    pub granted: u64,
    /// Renewals of the lease held.
    pub renewed: u64,
    /// Revocations by the agent.
    pub revoked: u64,
    /// Leases that ran out without renewal (the agent stopped answering, or the
    /// instance was paused).
    pub expired: u64,
    /// Lease datagrams refused: malformed, or answering a heartbeat this process
    /// no longer remembers sending (too old to be trusted).
    pub refused: u64,
    /// Reads of owned records answered by the flow cache (over every lease
    /// held; refreshed at every timer tick).
    pub cache_hits: u64,
    /// Reads of owned records that went to the store.
    pub cache_misses: u64,
    /// Store round trips the cache saved.
    pub saved_round_trips: u64,
    /// Deferred writes lost (a store error, or a lease that ran out first).
    pub deferred_lost: u64,
}

impl LeaseStats {
    fn add_cache(&mut self, c: &sluice_state::CacheStats) {
        self.cache_hits += c.hits;
        self.cache_misses += c.misses;
        self.saved_round_trips += c.saved_round_trips;
        self.deferred_lost += c.deferred_lost;
    }
}

impl InstanceStats {
    /// Adds another worker's statistics: counts summed, the lease as held by
    /// every worker (epoch 0 unless all hold the same).
    pub fn add(&mut self, o: &InstanceStats) {
        self.rx += o.rx;
        self.tx += o.tx;
        self.malformed += o.malformed;
        for (r, n) in &o.drops {
            *self.drops.entry(r).or_insert(0) += n;
        }
        self.rx_errors += o.rx_errors;
        self.chain.add(&o.chain);
        let (l, ol) = (&mut self.lease, &o.lease);
        if l.epoch != ol.epoch {
            l.epoch = 0;
            l.ranges = 0;
        }
        l.granted += ol.granted;
        l.renewed += ol.renewed;
        l.revoked += ol.revoked;
        l.expired += ol.expired;
        l.refused += ol.refused;
        l.cache_hits += ol.cache_hits;
        l.cache_misses += ol.cache_misses;
        l.saved_round_trips += ol.saved_round_trips;
        l.deferred_lost += ol.deferred_lost;
        let (p, op) = (&mut self.pipeline, &o.pipeline);
        p.idle_flushes += op.idle_flushes;
        p.full_waits += op.full_waits;
        p.lease_flushes += op.lease_flushes;
        self.events_written += o.events_written;
        self.events_lost += o.events_lost;
        self.store_round_trips.add(&o.store_round_trips);
        self.added_latency.add(&o.added_latency);
    }

    fn drop(&mut self, reason: &'static str, n: u64) {
        if n > 0 {
            *self.drops.entry(reason).or_insert(0) += n;
        }
    }
}

/// Where [`run_with_stats`] publishes its statistics for other threads.
#[derive(Debug, Default)]
pub struct StatsHandle(Mutex<InstanceStats>);

impl StatsHandle {
    /// The statistics last published (at every timer tick and at the end).
    pub fn snapshot(&self) -> InstanceStats {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn publish(&self, s: &InstanceStats) {
        if let Ok(mut g) = self.0.lock() {
            g.clone_from(s);
        }
    }
}

/// The sans-IO data path: datagrams in ([`DataPath::push_datagram`]), one chain pass
/// ([`DataPath::process`]), messages out ([`DataPath::forwarded`]), then
/// [`DataPath::finish_batch`].
pub struct DataPath {
    chain: Chain,
    store: TimedStore<Box<dyn StateStore>>,
    pool: PacketPool,
    /// The batch being filled, and the Geneve header of each of its packets.
    batch: Batch,
    headers: Headers,
    batch_size: usize,
    /// Pipelined mode: batches in flight through the chain.
    pipe: Option<Pipeline<Tag>>,
    /// Most batches in flight before the instance waits for the store.
    max_in_flight: usize,
    /// Processed batches free to leave, oldest first.
    out: VecDeque<(Batch, Tag)>,
    /// Emptied batches and header arrays, reused (no allocation per batch).
    spare: Vec<(Batch, Tag)>,
    /// When the batch being filled was received (set by
    /// [`DataPath::received`]; without it, when it was processed).
    received: Option<Instant>,
    events: Vec<Event>,
    agent: SocketAddrV4,
    timer_interval: Duration,
    capacity: Option<sluice_chain::Capacity>,
    /// When recent heartbeats were sent (by the beat thread, [`beat`]): a
    /// lease's validity counts from there.
    hb_log: HeartbeatLog,
    /// The monotonic end of the lease held, checked before every batch: the
    /// chain's wall clock could be stepped back.
    lease_until: Option<Instant>,
    /// Worker threads the instance runs (the chain's `settings.workers`).
    workers: usize,
    /// Counters.
    pub stats: InstanceStats,
}

/// The Geneve header of each packet of a batch (bytes, length); a packet's
/// `port` is its index here.
type Headers = Vec<([u8; GENEVE_HEADER_MAX], usize)>;

/// What travels with a batch through the chain (and the pipeline): its
/// packets' Geneve headers and when it was received.
struct Tag {
    headers: Headers,
    received: Instant,
}

/// A pipeline waits for the store once this many windows are in flight (it
/// holds about three in steady state).
const WINDOWS_IN_FLIGHT: usize = 5;

impl std::fmt::Debug for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPath")
            .field("chain", &self.chain.name())
            .field("batch", &self.batch.len())
            .finish()
    }
}

/// A pool of `packets` packets where every one may carry a jumbo frame: the
/// large buffers are only made once such frames arrive (64 KiB each, so at most
/// `packets` times that), and a burst beyond them is a counted drop
/// (`large_pool_exhausted`), never a stall.
fn jumbo_ready_pool(packets: usize) -> PacketPool {
    PacketPool::with_large(packets, packets)
}

impl DataPath {
    /// Builds the chain of `chain_file` and opens the store named `state`.
    pub fn new(
        name: &str,
        chain_file: &Path,
        state: &str,
        agent: SocketAddrV4,
    ) -> Result<DataPath, InstanceError> {
        let chain_err = |err| InstanceError::Chain {
            path: chain_file.to_path_buf(),
            err,
        };
        let mut spec = ChainSpec::from_file(chain_file).map_err(chain_err)?;
        // A live instance spends its capacity in real time, as a small VM would
        // (see `Pacer`); the chain's own budget is over trace time and would
        // drop instead of queueing.
        let capacity = spec.settings.capacity.take();
        let base = chain_file.parent().unwrap_or(Path::new("."));
        let chain = Chain::from_spec(&spec, base, &sluice_builtin::registry(), Sharing::Shared)
            .map_err(chain_err)?;
        for w in chain.config_warnings() {
            tracing::warn!(chain = %chain_file.display(), "{w}");
        }
        let workers = spec.settings.workers;
        if workers > 1 && state == "local" {
            // Each worker's local store is its own: a reply that hashes to
            // another worker than its connection would find no state there.
            if let Some(f) = spec
                .functions
                .iter()
                .find(|f| matches!(f.kind.as_str(), "nat" | "lb"))
            {
                return Err(InstanceError::Workers {
                    path: chain_file.to_path_buf(),
                    msg: format!(
                        "{workers} workers with state local, but function {:?} ({}) rewrites \
                         headers, so its replies reach another worker; use one worker or a shared store",
                        f.name, f.kind
                    ),
                });
            }
        }
        let store = open_store(state)?;
        let mut core = DataPath::with_chain(name, chain, store, spec.settings.batch_size, agent);
        core.workers = workers;
        core.timer_interval = Duration::from_millis(spec.settings.timer_interval_ms.max(1));
        core.capacity = capacity;
        core.set_pipeline(spec.settings.pipeline);
        Ok(core)
    }

    /// A core around an already built chain and store.
    pub fn with_chain(
        name: &str,
        chain: Chain,
        store: Box<dyn StateStore>,
        batch_size: usize,
        agent: SocketAddrV4,
    ) -> DataPath {
        // A packet's index travels in its u16 `port`; the netio batch caps at 1024.
        let batch_size = batch_size.clamp(1, 1024);
        DataPath {
            chain,
            store: TimedStore::new(store),
            pool: jumbo_ready_pool(batch_size),
            batch: Batch::with_capacity(batch_size),
            headers: vec![([0; GENEVE_HEADER_MAX], 0); batch_size],
            batch_size,
            pipe: None,
            max_in_flight: 0,
            out: VecDeque::new(),
            spare: Vec::new(),
            received: None,
            events: Vec::new(),
            agent,
            timer_interval: Duration::from_millis(100),
            capacity: None,
            hb_log: HeartbeatLog::default(),
            lease_until: None,
            workers: 1,
            stats: InstanceStats {
                name: name.to_string(),
                ..Default::default()
            },
        }
    }

    /// Turns pipelined mode on with windows of about `packets` packets (0: off;
    /// docs/STATE.md, "Pipelining"): under a lease, a window's store reads are
    /// in flight while the previous window is processed, and a batch leaves
    /// once the store has settled the writes it made, without the batch waiting
    /// for its own round trip. Only worth it with a backlog; an instance whose
    /// input goes idle calls [`DataPath::idle`], which processes and releases what
    /// is in flight. Call before any traffic.
    pub fn set_pipeline(&mut self, packets: usize) {
        if packets == 0 || self.pipe.is_some() {
            return;
        }
        let window = packets.div_ceil(self.batch_size).max(1);
        self.pipe = Some(Pipeline::new(&mut self.chain, &mut self.store, window));
        self.max_in_flight = WINDOWS_IN_FLIGHT * window;
        // Every batch in flight, the one being filled and the ones being sent.
        self.pool = jumbo_ready_pool(self.batch_size * (self.max_in_flight + 2));
        self.stats.pipeline.window_packets = window * self.batch_size;
    }

    /// The processing budget of the instance (the chain's `settings.capacity`).
    pub fn capacity(&self) -> Option<sluice_chain::Capacity> {
        self.capacity
    }

    /// Worker threads the instance runs (the chain's `settings.workers`).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Packets per batch (from the chain's settings).
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// How often the chain's timers run (from the chain's settings).
    pub fn timer_interval(&self) -> Duration {
        self.timer_interval
    }

    /// True when the batch has room for no more packets.
    pub fn batch_full(&self) -> bool {
        self.batch.len() >= self.batch_size
    }

    /// Says that the datagrams pushed next were received at `at` (the loop
    /// reads the clock once per receive batch): the added latency of their
    /// packets counts from there. The first call per batch holds.
    pub fn received(&mut self, at: Instant) {
        self.received.get_or_insert(at);
    }

    /// Decapsulates one datagram and queues its inner frame for the next
    /// [`DataPath::process`]; refused datagrams are counted, never fatal.
    pub fn push_datagram(&mut self, datagram: &[u8], now_ns: u64) {
        self.stats.rx += 1;
        let (vni, chain_hop, off) = match parse_geneve_payload(datagram) {
            Ok(g) => g,
            Err(e) => {
                self.stats.malformed += 1;
                let reason = match e {
                    TunnelError::Protocol(_) => "geneve_not_ethernet",
                    TunnelError::UnknownCritical(..) => "geneve_critical_option",
                    _ => "geneve_bad_header",
                };
                self.stats.drop(reason, 1);
                return;
            }
        };
        let inner = &datagram[off..];
        let idx = self.batch.len();
        if idx >= self.batch_size {
            self.stats.drop("pool_exhausted", 1);
            return;
        }
        // Jumbo frames take a buffer of the pool's bounded large class; its
        // exhaustion is a counted drop like any other.
        if let Err(e) = self
            .batch
            .try_push_frame(&mut self.pool, inner, now_ns, idx as u16)
        {
            self.stats.drop(e.reason(), 1);
            return;
        }
        self.headers[idx] = if off <= GENEVE_HEADER_MAX {
            let mut h = [0u8; GENEVE_HEADER_MAX];
            h[..off].copy_from_slice(&datagram[..off]);
            (h, off)
        } else {
            // Longer headers carry options we do not know (non-critical, or the
            // parse would have refused them): keep only what the agent needs.
            geneve_header(vni, chain_hop)
        };
    }

    /// Runs the chain over the queued packets (pipelined: hands them to the
    /// pipeline); what may leave is then in [`DataPath::forwarded`].
    pub fn process(&mut self) {
        if self.batch.is_empty() {
            // What was received held no packet (leases, refused datagrams).
            self.received = None;
            return;
        }
        // Before any batch is processed under the lease: the pipeline processes
        // a window within `push`.
        let now = Instant::now();
        self.check_lease(now);
        let (fresh, fresh_headers) = match self.spare.pop() {
            Some((b, t)) => (b, t.headers),
            None => (
                Batch::with_capacity(self.batch_size),
                vec![([0; GENEVE_HEADER_MAX], 0); self.batch_size],
            ),
        };
        let mut batch = std::mem::replace(&mut self.batch, fresh);
        let tag = Tag {
            headers: std::mem::replace(&mut self.headers, fresh_headers),
            received: self.received.take().unwrap_or(now),
        };
        match self.pipe.as_mut() {
            Some(p) => {
                if p.in_flight() >= self.max_in_flight {
                    // The store is slower than the input: wait for it rather
                    // than run out of buffers.
                    self.stats.pipeline.full_waits += 1;
                    p.drain(&mut self.chain, &mut self.store);
                }
                p.push(&mut self.chain, &mut self.store, batch, tag);
                self.collect_released();
            }
            None => {
                self.chain.process(&mut batch, &mut self.store);
                self.out.push_back((batch, tag));
            }
        }
        self.drain_side_outputs();
    }

    /// Input went idle: a pipelined instance processes every batch in flight
    /// and releases it once the store has settled it (one round trip at
    /// most). Nothing to do otherwise.
    pub fn idle(&mut self) {
        let Some(p) = self.pipe.as_mut() else {
            return;
        };
        if p.in_flight() == 0 {
            return;
        }
        self.stats.pipeline.idle_flushes += 1;
        if let Some(p) = self.pipe.as_mut() {
            p.drain(&mut self.chain, &mut self.store);
            self.collect_released();
            self.drain_side_outputs();
        }
    }

    /// Batches accepted but not yet free to leave (pipelined mode).
    pub fn in_flight(&self) -> usize {
        self.pipe.as_ref().map_or(0, |p| p.in_flight())
    }

    fn flush_pipeline(&mut self) {
        if let Some(p) = self.pipe.as_mut() {
            p.flush(&mut self.chain, &mut self.store);
            self.collect_released();
            self.drain_side_outputs();
        }
    }

    /// Moves the batches the pipeline released to the output queue; a batch
    /// released because its held writes failed has every packet dropped.
    fn collect_released(&mut self) {
        let Some(p) = self.pipe.as_mut() else {
            return;
        };
        while let Some((b, h)) = p.pop() {
            self.out.push_back((b, h));
        }
    }

    /// True while processed batches wait to be sent ([`DataPath::forwarded`], then
    /// [`DataPath::finish_batch`]).
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// The messages to send for the oldest processed batch: each forwarded
    /// frame behind its Geneve header, to the agent.
    pub fn forwarded(&self) -> impl Iterator<Item = Msg<'_>> + '_ {
        self.out.front().into_iter().flat_map(move |(batch, tag)| {
            batch.live().map(move |p| {
                let (h, n) = &tag.headers[p.port as usize];
                Msg {
                    head: &h[..*n],
                    body: p.data(),
                    dst: Some(self.agent),
                }
            })
        })
    }

    /// Ends the oldest processed batch: counts what was sent and what had to
    /// be dropped, records the latency its sent packets had, and returns the
    /// buffers.
    pub fn finish_batch(&mut self, sent: usize, refused: u64) {
        self.finish_batch_at(sent, refused, Instant::now());
    }

    /// [`DataPath::finish_batch`], the batch having been sent at `now`.
    pub fn finish_batch_at(&mut self, sent: usize, refused: u64, now: Instant) {
        let Some((mut batch, tag)) = self.out.pop_front() else {
            return;
        };
        let delivered = (sent as u64).saturating_sub(refused);
        if delivered > 0 {
            let ns = now.saturating_duration_since(tag.received).as_nanos();
            self.stats
                .added_latency
                .observe(u64::try_from(ns).unwrap_or(u64::MAX), delivered);
        }
        let live = batch.live().count();
        self.stats.tx += (sent as u64).saturating_sub(refused);
        self.stats.drop("tx_refused", refused);
        self.stats
            .drop("tx_queue_full", live.saturating_sub(sent) as u64);
        let lost = batch
            .pkts
            .iter()
            .filter(|p| matches!(p.verdict, Verdict::Drop(r) if r.stage == HELD_STAGE))
            .count();
        self.stats.drop("store_lost", lost as u64);
        batch.recycle(&mut self.pool);
        self.spare.push((batch, tag));
    }

    /// Advances the chain's clock and runs due timers.
    pub fn tick(&mut self, now_ns: u64) {
        self.check_lease(Instant::now());
        self.chain.tick(now_ns, &mut self.store);
        self.drain_side_outputs();
        self.stats.chain = self.chain.stats();
    }

    /// Statistics now, the flow cache's counters and the store's round
    /// trips included.
    pub fn stats_now(&self) -> InstanceStats {
        let mut s = self.stats.clone();
        s.store_round_trips = self.store.round_trips;
        if let Some(c) = self.chain.cache_stats() {
            s.lease.add_cache(&c);
        }
        s
    }

    /// Applies the backend states the agent wrote (the whole list: a backend
    /// not in it is up) to the chain's functions, between batches: no flow is
    /// lost. Entries with an address that does not parse are skipped, each
    /// named in `errors`. Returns how many backends matched.
    pub fn set_backends(
        &mut self,
        list: &[sluice_proto::BackendOverride],
        errors: &mut Vec<String>,
    ) -> usize {
        let states: Vec<sluice_nf::BackendAdmin> = list
            .iter()
            .filter_map(|b| match backend_admin(b) {
                Ok(a) => Some(a),
                Err(e) => {
                    errors.push(e);
                    None
                }
            })
            .collect();
        // Batches in flight were decided under the old states; none waits.
        self.flush_pipeline();
        self.chain.set_backend_states(&states)
    }

    /// Handles a lease datagram from the agent (see
    /// [`sluice_proto::InstanceLease`]) received at `now`: installs, renews or
    /// revokes the chain's ownership lease. Anything malformed, or answering a
    /// heartbeat this process does not remember sending, is counted and ignored.
    pub fn on_lease(&mut self, datagram: &[u8], now: Instant) {
        let Some(l) = sluice_proto::InstanceLease::decode(datagram) else {
            self.stats.lease.refused += 1;
            return;
        };
        if l.epoch == 0 || l.ranges.is_empty() {
            if self.stats.lease.epoch != 0 {
                self.stats.lease.revoked += 1;
                self.settle_before_lease_change();
                self.revoke();
            }
            return;
        }
        let Some((sent_wall, sent_mono)) = self.hb_log.when(l.hb_seq) else {
            self.stats.lease.refused += 1;
            return;
        };
        let valid = Duration::from_micros(l.valid_us as u64);
        let until = sent_mono + valid;
        if until <= now {
            // Already over (the answer sat in the queue): as if never sent.
            return;
        }
        let until_ns = sent_wall + valid.as_nanos() as u64;
        let now_ns = wall_ns().max(sent_wall);
        if self
            .chain
            .renew_ownership(l.epoch, &l.ranges, until_ns, now_ns)
        {
            self.stats.lease.renewed += 1;
        } else {
            self.settle_before_lease_change();
            let own = sluice_state::Ownership {
                epoch: l.epoch,
                ranges: l.ranges.clone(),
                valid_until_ns: until_ns,
            };
            // Errors are counted by the chain; the new lease is in place anyway.
            let _ = self.chain.set_ownership(Some(own), &mut self.store);
            self.stats.lease.granted += 1;
        }
        self.stats.lease.epoch = l.epoch;
        self.stats.lease.ranges = l.ranges.len();
        self.lease_until = Some(until);
    }

    /// A pipelined instance changes its lease only with nothing in flight: the
    /// batches it accepted under the old lease are processed under it, and
    /// leave, before another instance may own their flows.
    fn settle_before_lease_change(&mut self) {
        if self.in_flight() > 0 {
            self.stats.pipeline.lease_flushes += 1;
            self.flush_pipeline();
        }
    }

    /// Gives the lease up if its monotonic end has passed. Not waiting for the
    /// pipeline: no batch may be processed under an expired lease, so what is in
    /// flight is processed without one (the revocation first makes everything
    /// sent under it durable).
    fn check_lease(&mut self, now: Instant) {
        if self.lease_until.is_some_and(|t| t <= now) {
            self.stats.lease.expired += 1;
            self.revoke();
        }
    }

    fn revoke(&mut self) {
        if let Some(c) = self.chain.cache_stats() {
            self.stats.lease.add_cache(&c);
        }
        // Errors are counted by the chain; the cache is gone either way.
        let _ = self.chain.set_ownership(None, &mut self.store);
        self.lease_until = None;
        self.stats.lease.epoch = 0;
        self.stats.lease.ranges = 0;
    }

    /// The heartbeat to send now (`seq`-th of this process, `cpu_us` of CPU time,
    /// `kernel_drops` datagrams the kernel dropped on the socket's full queue).
    pub fn heartbeat(&self, seq: u32, cpu_us: u64, kernel_drops: u64) -> InstanceHeartbeat {
        let s = &self.stats;
        let queue = ["tx_queue_full", "pool_exhausted"]
            .iter()
            .map(|r| s.drops.get(r).copied().unwrap_or(0))
            .sum::<u64>()
            + kernel_drops;
        let replica = self.store.counters();
        InstanceHeartbeat {
            seq,
            rx_packets: s.rx,
            tx_packets: s.tx,
            drops: s.drops.values().sum::<u64>() + s.chain.dropped,
            queue_drops: queue,
            cpu_us,
            pid: std::process::id() as u64,
            lease_epoch: s.lease.epoch,
            cache_hits: s.lease.cache_hits + self.chain.cache_stats().map_or(0, |c| c.hits),
            store_round_trips: self.store.round_trips,
            added_latency: s.added_latency,
            replica_waits: replica.replica_waits,
            replica_rewaits: replica.replica_rewaits,
            replica_shortfalls: replica.replica_shortfalls,
        }
    }

    /// Records that heartbeat `seq` was sent at `wall_ns` (the chain's clock) and
    /// `at` (monotonic): a lease answering it runs from then.
    pub fn heartbeat_sent(&mut self, seq: u32, wall_ns: u64, at: Instant) {
        self.hb_log.sent(seq, wall_ns, at);
    }

    /// The log of sent heartbeats, for the thread that sends them.
    pub fn heartbeat_log(&self) -> HeartbeatLog {
        self.hb_log.clone()
    }

    /// Ends processing: what is in flight, last timers and flushes of every
    /// function.
    pub fn flush(&mut self) {
        self.flush_pipeline();
        if self.lease_until.is_some() {
            self.revoke();
        }
        self.chain.flush(&mut self.store);
        self.drain_side_outputs();
        self.stats.chain = self.chain.stats();
    }

    /// Frames functions emit (RSTs, ICMP errors) are not sent yet: where they go
    /// depends on the tenant chain's reverse path, which the agent knows and the
    /// instance does not. Events (alerts, flow records) wait in
    /// [`DataPath::events`] for the loop to write them; past
    /// [`MAX_PENDING_EVENTS`] the oldest are dropped (counted as
    /// `events_lost`).
    fn drain_side_outputs(&mut self) {
        let emitted = self.chain.take_emitted();
        self.stats.drop("emitted_not_sent", emitted.len() as u64);
        self.chain.drain_events_into(&mut self.events);
        if self.events.len() > MAX_PENDING_EVENTS {
            let over = self.events.len() - MAX_PENDING_EVENTS;
            self.events.drain(..over);
            self.stats.events_lost += over as u64;
        }
    }

    /// The events (alerts, flow records) processed batches produced and no one
    /// took yet; the caller writes them and clears the vector.
    pub fn events(&mut self) -> &mut Vec<Event> {
        &mut self.events
    }
}

/// A backend entry as the load balancer takes it: `IP` (any port) or
/// `IP:PORT` (`[v6]:PORT`).
fn backend_admin(b: &sluice_proto::BackendOverride) -> Result<sluice_nf::BackendAdmin, String> {
    use sluice_proto::BackendHealthState as H;
    let state = match b.state {
        H::Up => sluice_nf::BackendState::Up,
        H::Down => sluice_nf::BackendState::Down,
        H::Draining => sluice_nf::BackendState::Draining,
        H::Removed => sluice_nf::BackendState::Removed,
    };
    let (addr, port) = if let Ok(a) = b.addr.parse::<std::net::IpAddr>() {
        (a, None)
    } else {
        let sa = b
            .addr
            .parse::<std::net::SocketAddr>()
            .map_err(|_| format!("backend address {:?} is neither IP nor IP:PORT", b.addr))?;
        (sa.ip(), Some(sa.port()))
    };
    Ok(sluice_nf::BackendAdmin {
        addr: addr.into(),
        port,
        state,
    })
}

/// Watches the backends file ([`InstanceOptions::backends`]): a change of its
/// size, modification time or inode (the agent replaces it by a rename) is
/// read and applied. One `stat` per timer tick, never per packet.
#[derive(Debug)]
struct BackendsWatch {
    path: PathBuf,
    seen: Option<(u64, u64, std::time::SystemTime)>,
}

impl BackendsWatch {
    fn check(&mut self, core: &mut DataPath) {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = std::fs::metadata(&self.path) else {
            return;
        };
        let id = (m.ino(), m.len(), m.modified().unwrap_or(UNIX_EPOCH));
        if self.seen == Some(id) {
            return;
        }
        self.seen = Some(id);
        let list: Vec<sluice_proto::BackendOverride> = match std::fs::read(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot read the backend states: keeping the ones in force");
                return;
            }
        };
        let mut errors = Vec::new();
        let matched = core.set_backends(&list, &mut errors);
        for e in errors {
            tracing::warn!(path = %self.path.display(), "{e}");
        }
        tracing::info!(entries = list.len(), matched, "backend states applied");
    }
}

fn wall_ns() -> u64 {
    // Wall-clock time, so instances sharing a store agree on timer deadlines.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs an instance until `stop` is set, then flushes its chain and returns.
/// Statistics are printed to stderr as one JSON line every few seconds (when they
/// changed) and when stopping.
pub fn run(opts: &InstanceOptions, stop: &AtomicBool) -> Result<(), InstanceError> {
    run_with_stats(opts, stop, &StatsHandle::default())
}

/// The span an instance process logs in: its tenant, middlebox and name
/// (`tenant/middlebox/k`; a name of another shape is kept whole).
pub fn span(name: &str) -> tracing::Span {
    let mut parts = name.split('/');
    let (tenant, middlebox) = match (parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(m), Some(_)) => (t, m),
        _ => ("", ""),
    };
    tracing::info_span!("instance", tenant, middlebox, instance = name)
}

/// Events an instance holds for its EVE log between writes, at most.
pub const MAX_PENDING_EVENTS: usize = 65_536;

/// How often the instance tells its agent it is alive.
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(10);

/// CPU time (user + system) this process used, in microseconds.
pub fn cpu_time_us() -> u64 {
    // SAFETY: getrusage fills the struct we pass; zeroed is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// Datagrams the kernel dropped on socket `fd` (receive queue full), from
/// `SO_MEMINFO`; 0 if the kernel does not say.
pub fn kernel_drops(fd: std::os::fd::RawFd) -> u64 {
    const VARS: usize = 9;
    let mut mem = [0u32; VARS];
    let mut len = std::mem::size_of_val(&mem) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `mem`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            mem.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let i = libc::SK_MEMINFO_DROPS as usize;
    if r != 0 || (len as usize) < (i + 1) * 4 {
        return 0;
    }
    mem[i] as u64
}

/// A processing budget spent in real time: the instance reads no more input
/// while it is over budget, so excess traffic waits in its socket's receive
/// queue (and the kernel drops what overflows it, counted as queue drops), as
/// on a small VM whose CPU is the limit. A token bucket in bytes and/or packets
/// that may go into debt by one batch.
#[derive(Debug, Clone)]
pub struct Pacer {
    bytes_per_s: Option<f64>,
    pkts_per_s: Option<f64>,
    burst_s: f64,
    bytes: f64,
    pkts: f64,
    last: Instant,
}

impl Pacer {
    /// A full bucket for `c` at `now`.
    pub fn new(c: &sluice_chain::Capacity, now: Instant) -> Pacer {
        let burst_s = c.burst_ms / 1e3;
        let bytes_per_s = c.mbps.map(|m| m * 1e6 / 8.0);
        let pkts_per_s = c.pps;
        Pacer {
            bytes: bytes_per_s.map_or(0.0, |r| r * burst_s),
            pkts: pkts_per_s.map_or(0.0, |r| r * burst_s),
            bytes_per_s,
            pkts_per_s,
            burst_s,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        if let Some(r) = self.bytes_per_s {
            self.bytes = (self.bytes + r * dt).min(r * self.burst_s);
        }
        if let Some(r) = self.pkts_per_s {
            self.pkts = (self.pkts + r * dt).min(r * self.burst_s);
        }
    }

    /// How long to wait at `now` before reading more input (zero: read now).
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        let need = |tokens: f64, rate: Option<f64>| match rate {
            Some(r) if tokens < 0.0 => -tokens / r,
            _ => 0.0,
        };
        Duration::from_secs_f64(
            need(self.bytes, self.bytes_per_s).max(need(self.pkts, self.pkts_per_s)),
        )
    }

    /// Charges a processed batch of `pkts` packets and `bytes` bytes.
    pub fn charge(&mut self, pkts: usize, bytes: usize) {
        self.bytes -= bytes as f64;
        self.pkts -= pkts as f64;
    }
}

/// How often statistics are printed while running.
const PRINT_EVERY: Duration = Duration::from_secs(10);
/// Longest wait in poll, so `stop` is noticed promptly.
const POLL_MAX: Duration = Duration::from_millis(10);
/// Attempts to send a batch while the socket queue is full before dropping the rest.
const SEND_TRIES: usize = 4;

/// [`run`], publishing statistics to `stats` at every timer tick and at the end.
pub fn run_with_stats(
    opts: &InstanceOptions,
    stop: &AtomicBool,
    stats: &StatsHandle,
) -> Result<(), InstanceError> {
    let mut core = DataPath::new(&opts.name, &opts.chain, &opts.state, opts.agent)?;
    if core.workers() > 1 {
        return workers::run_sharded(opts, stop, stats, core);
    }
    let timer_interval = core.timer_interval();
    let mut sock = bind_data_socket(opts)?;
    let mut rx = RxBatch::new(core.batch_size(), DEFAULT_BUF_SIZE);
    let mut poller = Poller::new();
    let readable = poller.add(sock.as_raw_fd());
    let mut wpoll = Poller::new();
    wpoll.add_writable(sock.as_raw_fd());
    let mut next_tick = Instant::now();
    let mut next_print = Instant::now() + PRINT_EVERY;
    let mut printed = (u64::MAX, u64::MAX);
    let mut last_rx_error: Option<String> = None;
    let mut next_heartbeat = Instant::now();
    let mut pacer = core.capacity().map(|c| Pacer::new(&c, Instant::now()));
    let mut eve = opts.eve.as_deref().map(|p| EveLog::new(p, &opts.name));
    let mut backends = opts
        .backends
        .clone()
        .map(|path| BackendsWatch { path, seen: None });
    if let Some(w) = backends.as_mut() {
        w.check(&mut core);
    }

    // The beat thread sends the heartbeats ([`beat`]): from a duplicate of
    // the data socket, so that they come from the address the agent knows and
    // the leases answering them arrive where the data path reads.
    let beat_sock = dup_udp(&sock).map_err(|err| InstanceError::Socket {
        what: format!("instance {}: duplicating the data socket", opts.name),
        err,
    })?;
    let published = Mutex::new(beat::Published {
        hb: core.heartbeat(0, 0, 0),
        at: Instant::now(),
    });
    let done = AtomicBool::new(false);
    let log = core.heartbeat_log();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            beat_thread(
                &beat_sock,
                opts.agent,
                std::slice::from_ref(&published),
                &log,
                &done,
            )
        });
        let r = (|| {
            while !stop.load(Ordering::Relaxed) {
                if Instant::now() >= next_heartbeat {
                    // What the beat thread sends, and proof that this loop runs.
                    let hb = core.heartbeat(0, 0, 0);
                    *published.lock().unwrap_or_else(|e| e.into_inner()) = beat::Published {
                        hb,
                        at: Instant::now(),
                    };
                    next_heartbeat = Instant::now() + HEARTBEAT_EVERY;
                }
                let wait = next_tick
                    .min(next_heartbeat)
                    .saturating_duration_since(Instant::now())
                    .min(POLL_MAX);
                let over = pacer
                    .as_mut()
                    .map_or(Duration::ZERO, |p| p.wait(Instant::now()));
                if !over.is_zero() {
                    // Over budget: input waits in the socket queue; timers and
                    // heartbeats still run.
                    std::thread::sleep(over.min(wait));
                } else if let Err(e) = poller.wait(wait) {
                    return Err(InstanceError::Socket {
                        what: format!("instance {}: poll", opts.name),
                        err: e,
                    });
                }
                if over.is_zero() && poller.is_ready(readable) {
                    // Drain what is waiting, a batch at a time, before looking at timers.
                    loop {
                        let n = match sock.recv_batch(&mut rx) {
                            Ok(n) => n,
                            Err(e) => {
                                core.stats.rx_errors += 1;
                                let msg = e.to_string();
                                if last_rx_error.as_deref() != Some(&msg) {
                                    tracing::warn!(error = %msg, "receive failed");
                                    last_rx_error = Some(msg);
                                }
                                0
                            }
                        };
                        if n == 0 {
                            break;
                        }
                        core.received(Instant::now());
                        let now = wall_ns();
                        let mut bytes = 0;
                        for (d, _src) in rx.iter() {
                            bytes += d.len();
                            if sluice_proto::InstanceLease::is_lease(d) {
                                core.on_lease(d, Instant::now());
                            } else {
                                core.push_datagram(d, now);
                            }
                        }
                        core.process();
                        send_all(&mut core, &mut sock, &mut wpoll);
                        // Under sustained load, still tick, heartbeat and notice `stop` on time.
                        let now = Instant::now();
                        let paced = pacer.as_mut().is_some_and(|p| {
                            p.charge(n, bytes);
                            !p.wait(now).is_zero()
                        });
                        if n < rx.capacity() {
                            // Input is idle: nothing waits for a window to fill.
                            core.idle();
                            send_all(&mut core, &mut sock, &mut wpoll);
                            break;
                        }
                        if paced
                            || stop.load(Ordering::Relaxed)
                            || now >= next_tick
                            || now >= next_heartbeat
                        {
                            break;
                        }
                    }
                } else {
                    // Paced, or woken by a timer: nothing must stay in flight while
                    // input waits.
                    core.idle();
                    send_all(&mut core, &mut sock, &mut wpoll);
                }
                let now = Instant::now();
                if now >= next_tick {
                    if let Some(w) = backends.as_mut() {
                        w.check(&mut core);
                    }
                    core.tick(wall_ns());
                    stats.publish(&core.stats_now());
                    next_tick = now + timer_interval;
                }
                write_events(&mut core, eve.as_mut());
                if now >= next_print {
                    let key = (core.stats.rx, core.stats.tx);
                    if key != printed {
                        print_stats(&core.stats_now());
                        printed = key;
                    }
                    next_print = now + PRINT_EVERY;
                }
            }
            Ok(())
        })();
        done.store(true, Ordering::Relaxed);
        r
    })?;
    core.flush();
    write_events(&mut core, eve.as_mut());
    stats.publish(&core.stats_now());
    print_stats(&core.stats_now());
    Ok(())
}

/// Opens the instance's data socket in its namespace.
fn bind_data_socket(opts: &InstanceOptions) -> Result<UdpBatchSocket, InstanceError> {
    let listen = opts.listen;
    in_netns_opt(opts.netns.as_deref(), || UdpBatchSocket::bind(listen))
        .and_then(|r| r)
        .map_err(|err| InstanceError::Socket {
            what: format!(
                "instance {}: data socket {listen} in netns {}",
                opts.name,
                opts.netns.as_deref().unwrap_or("(current)")
            ),
            err,
        })
}

/// Hands the events the data path collected to the EVE log (or discards them
/// without one), counting what the log could not write.
fn write_events(core: &mut DataPath, eve: Option<&mut EveLog>) {
    let events = std::mem::take(core.events());
    if let Some(log) = eve {
        // Differences: workers share one log, each counting what it wrote.
        let (lost, written) = (log.lost, log.written);
        log.write(&events);
        core.stats.events_lost += log.lost - lost;
        core.stats.events_written += log.written - written;
    }
    // The vector goes back, keeping its capacity.
    let v = core.events();
    *v = events;
    v.clear();
}

/// The beat thread: a heartbeat every [`HEARTBEAT_EVERY`] while the data
/// path publishes ([`beat::Beat`]; every worker's, combined by
/// [`beat::Published::combine`]), until `done`. A full socket queue just
/// skips one (the next follows shortly).
fn beat_thread(
    sock: &std::net::UdpSocket,
    agent: SocketAddrV4,
    published: &[Mutex<beat::Published>],
    log: &HeartbeatLog,
    done: &AtomicBool,
) {
    let mut b = beat::Beat::new(Instant::now(), HEARTBEAT_EVERY, beat::HUNG_AFTER);
    let mut parts = Vec::with_capacity(published.len());
    while !done.load(Ordering::Relaxed) {
        parts.clear();
        parts.extend(
            published
                .iter()
                .map(|p| *p.lock().unwrap_or_else(|e| e.into_inner())),
        );
        let Some(p) = beat::Published::combine(&parts) else {
            return;
        };
        if let Some(hb) = b.poll(
            Instant::now(),
            &p,
            cpu_time_us(),
            kernel_drops(sock.as_raw_fd()),
        ) {
            // Before sending: a lease could come back before a later record.
            log.sent(hb.seq, wall_ns(), Instant::now());
            let _ = sock.send_to(&hb.encode(), agent);
        }
        std::thread::sleep(b.next_at().saturating_duration_since(Instant::now()));
    }
}

/// A second handle on the data socket (same address, same queue).
fn dup_udp(sock: &UdpBatchSocket) -> io::Result<std::net::UdpSocket> {
    use std::os::fd::{BorrowedFd, OwnedFd};
    // SAFETY: the fd is open for as long as `sock` lives, which outlives
    // this call; try_clone_to_owned dups it.
    let fd: OwnedFd = unsafe { BorrowedFd::borrow_raw(sock.as_raw_fd()) }.try_clone_to_owned()?;
    Ok(std::net::UdpSocket::from(fd))
}

/// Messages handed to the socket at once (a stack array: no allocation per batch).
const SEND_CHUNK: usize = 64;

/// Sends every processed batch that may leave.
fn send_all(core: &mut DataPath, sock: &mut UdpBatchSocket, wpoll: &mut Poller) {
    while core.has_output() {
        send_forwarded(core, sock, wpoll);
    }
}

/// Sends the oldest processed batch back to the agent; if the socket stays full after a
/// few short waits, the rest is dropped (and counted) rather than stalling input.
fn send_forwarded(core: &mut DataPath, sock: &mut UdpBatchSocket, wpoll: &mut Poller) {
    let refused_before = sock.stats().tx_errors;
    let sent = {
        let mut chunk = [Msg::frame(&[]); SEND_CHUNK];
        let mut msgs = core.forwarded();
        let mut sent = 0;
        let mut tries = 0;
        'chunks: loop {
            let mut k = 0;
            for m in msgs.by_ref().take(SEND_CHUNK) {
                chunk[k] = m;
                k += 1;
            }
            if k == 0 {
                break;
            }
            let mut off = 0;
            while off < k {
                match sock.send_batch(&chunk[off..k]) {
                    Ok(n) if n > 0 => off += n,
                    Ok(_) if tries < SEND_TRIES => {
                        tries += 1;
                        let _ = wpoll.wait(Duration::from_millis(1));
                    }
                    // Full for too long, or the socket failed: drop the rest.
                    _ => {
                        sent += off;
                        break 'chunks;
                    }
                }
            }
            sent += k;
        }
        sent
    };
    let refused = sock.stats().tx_errors - refused_before;
    core.finish_batch(sent, refused);
}

/// The statistics are the instance's output, one JSON line on stdout (which
/// the agent puts in the instance's log file with its stderr), not a log
/// event: tools read them as they are.
fn print_stats(s: &InstanceStats) {
    use std::io::Write;
    match serde_json::to_string(s) {
        Ok(line) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        }
        Err(e) => tracing::error!(error = %e, "cannot write the statistics"),
    }
}

#[cfg(test)]
mod tests;

pub mod beat;
mod eve;
pub mod timed;
pub mod workers;
pub use beat::{HeartbeatLog, HB_REMEMBERED};
pub use eve::{EveLog, DEFAULT_KEEP, DEFAULT_MAX_BYTES};
use timed::TimedStore;
