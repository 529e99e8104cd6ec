//! Chains: CoMb's hyperapp, an ordered list of configured functions run to
//! completion on one core over a batch.
//!
//! The chain parses every packet once ([`sluice_wire::parse::parse_frame`]) and, if
//! any function consumes TCP streams, reassembles them once; every function then
//! reads the same parse and the same stream bytes (CoMb §3.2's module reuse). For
//! comparison, [`Sharing::Unshared`] makes each function parse and reassemble on its
//! own, as separate middleboxes would.

mod checksums;
mod pipeline;
mod spec;
mod stats;

use std::path::Path;

pub use pipeline::Pipeline;
pub use spec::{
    Capacity, ChainError, ChainSpec, FunctionSpec, MplsSetting, Prefix, Registry, Settings,
    VerifyChecksums, MAX_PIPELINE, MAX_WORKERS,
};
pub use stats::{ChainStats, StageStats};

use sluice_nf::{Ctx, Emitted, Event, NetworkFunction, Streams};
use sluice_packet::{Batch, Verdict};
use sluice_state::{
    CacheConfig, CacheStats, FlowCache, Namespace, Ownership, StateStore, StoreError,
};
use sluice_wire::parse::{parse_into_opts, ParseOptions};

/// Drop-reason stage index used for packets the parser refuses.
pub const PARSE_STAGE: u8 = u8::MAX;
/// Drop-reason stage index used for packets reassembly refuses.
pub const REASSEMBLY_STAGE: u8 = u8::MAX - 1;
/// Drop-reason stage index used for packets over the instance's capacity budget.
pub const CAPACITY_STAGE: u8 = u8::MAX - 2;
/// The drop stage of packets a [`Pipeline`] held on store writes that failed.
pub const HELD_STAGE: u8 = u8::MAX - 3;

/// A token bucket over trace time (deterministic: no clock).
#[derive(Debug, Clone)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl Bucket {
    fn new(rate_per_s: f64, burst_ms: f64) -> Bucket {
        let burst = (rate_per_s * burst_ms / 1000.0).max(1.0);
        Bucket {
            rate: rate_per_s,
            burst,
            tokens: burst,
            last_ns: 0,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        if now_ns > self.last_ns {
            let dt = (now_ns - self.last_ns) as f64 / 1e9;
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
            self.last_ns = now_ns;
        }
    }
}

/// The instance's processing budget (packets and/or bits per second).
#[derive(Debug, Clone)]
struct Limiter {
    pps: Option<Bucket>,
    bps: Option<Bucket>,
}

impl Limiter {
    fn admit(&mut self, now_ns: u64, bytes: usize) -> bool {
        let bits = (bytes * 8) as f64;
        if let Some(b) = self.pps.as_mut() {
            b.refill(now_ns);
        }
        if let Some(b) = self.bps.as_mut() {
            b.refill(now_ns);
        }
        let ok = self.pps.as_ref().is_none_or(|b| b.tokens >= 1.0)
            && self.bps.as_ref().is_none_or(|b| b.tokens >= bits);
        if ok {
            if let Some(b) = self.pps.as_mut() {
                b.tokens -= 1.0;
            }
            if let Some(b) = self.bps.as_mut() {
                b.tokens -= bits;
            }
        }
        ok
    }
}

/// The stream-reassembly stage the chain runs before functions that want streams.
/// Implemented by `sluice_reassembly::Reassembler`; a trait so the chain can be
/// tested and benchmarked with other stages.
pub trait StreamStage: Send {
    /// Fills `streams` (reset to the batch size by the chain) for the live TCP packets
    /// of `batch`; may drop packets with `stage` as the drop stage.
    fn process(
        &mut self,
        batch: &mut Batch,
        store: &mut dyn StateStore,
        streams: &mut Streams,
        stage: u8,
    ) -> Result<(), StoreError>;

    /// Expires idle connections.
    fn on_timers(&mut self, now_ns: u64, store: &mut dyn StateStore) -> Result<(), StoreError>;

    /// Called once every function decided the batch `process` saw last, so
    /// the stage can act on the verdicts (the defragmenter blocks a
    /// datagram whose completing fragment was dropped). Default: nothing.
    fn finish(
        &mut self,
        _batch: &mut Batch,
        _store: &mut dyn StateStore,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Appends the owned reads `process` would make for `batch` (see
    /// `NetworkFunction::prefetch`). Default: none.
    fn prefetch(&self, _batch: &Batch, _ops: &mut sluice_state::Ops) {}

    /// Stage counters (name, value).
    fn counters(&self, _out: &mut Vec<(&'static str, u64)>) {}
}

/// Makes a stream stage for a namespace (one shared, or one per function unshared).
pub type StreamStageFactory = Box<dyn Fn(Namespace) -> Box<dyn StreamStage> + Send>;

/// Whether functions share parsing and reassembly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Parse and reassemble once per packet for the whole chain (the default).
    Shared,
    /// Every function re-parses and runs its own reassembly, as standalone
    /// middleboxes do (the baseline CoMb's reuse is measured against).
    Unshared,
}

struct Stage {
    f: Box<dyn NetworkFunction>,
    stats: StageStats,
    own_streams: Option<(Box<dyn StreamStage>, Streams)>,
    /// The function sees the tuples the switch steered by, so its flow-cache hints
    /// hold (see [`Unhinted`]).
    hints: bool,
}

/// Kinds of functions that rewrite the flow tuple.
const REWRITERS: [&str; 2] = ["nat", "lb"];

/// The store as a function behind a header-rewriting function sees it: hints are
/// dropped, so nothing it does is cached. Such a function sees rewritten tuples
/// in one direction and the originals in the other, so its per-flow records are
/// written by the owners of two different hashes (docs/STATE.md, "The flow
/// cache"). Without a lease this changes nothing.
struct Unhinted<'a>(&'a mut dyn StateStore);

impl StateStore for Unhinted<'_> {
    fn execute(&mut self, ops: &mut sluice_state::Ops) -> Result<(), StoreError> {
        ops.strip_hints();
        self.0.execute(ops)
    }
    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<sluice_state::Key>,
    ) -> Result<(), StoreError> {
        self.0.take_expired(ns, now_ns, max, out)
    }
    fn counters(&self) -> sluice_state::StoreCounters {
        self.0.counters()
    }
    fn orders_across_keys(&self) -> bool {
        self.0.orders_across_keys()
    }
    fn execute_unacked(&mut self, ops: &mut sluice_state::Ops) -> Result<(), StoreError> {
        ops.strip_hints();
        self.0.execute_unacked(ops)
    }
    fn sync(&mut self) -> Result<(), StoreError> {
        self.0.sync()
    }
    fn take_unacked_failures(&mut self) -> u64 {
        self.0.take_unacked_failures()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

/// A runnable chain. See the crate documentation.
pub struct Chain {
    name: String,
    stages: Vec<Stage>,
    sharing: Sharing,
    reassembly: Option<Box<dyn StreamStage>>,
    streams: Streams,
    events: Vec<Event>,
    emitted: Vec<Emitted>,
    stats: ChainStats,
    now_ns: u64,
    next_timers_ns: u64,
    timer_interval_ns: u64,
    /// How the parse reads frames (`settings.verify_checksums`, `decapsulate`,
    /// `mpls`).
    parse: ParseOptions,
    /// The TCP checksums verified before reassembly (`checksums.rs`).
    stream_checksums: checksums::StreamChecksums,
    live_before: Vec<bool>,
    /// Sources whose packets cross the functions in order (empty: all do).
    forward_sources: Vec<Prefix>,
    /// The instance's processing budget, if any.
    limiter: Option<Limiter>,
    /// Reused for the runs of one direction when the chain is bidirectional.
    run: Batch,
    done: Vec<sluice_packet::Packet>,
    /// The flow cache, present while the instance holds an ownership lease.
    cache: Option<FlowCache>,
    cache_config: CacheConfig,
    /// Pipelined mode (see [`Chain::set_pipelined`]).
    pipelined: bool,
    /// Held operations were lost with a cache that was dropped: batches held on
    /// them must not leave (reported once by [`Chain::settled`]).
    held_lost: bool,
    /// Reused for the prefetch reads of a window of batches.
    prefetch_ops: sluice_state::Ops,
}

/// FNV-1a, for stable namespace ids derived from names.
pub fn namespace_of(chain: &str, function: &str) -> Namespace {
    let mut h: u32 = 0x811c_9dc5;
    for b in chain.bytes().chain([b'/']).chain(function.bytes()) {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    Namespace(h)
}

impl Chain {
    /// Builds a chain from a spec file, using `registry` to construct functions.
    pub fn load(path: &Path, registry: &Registry, sharing: Sharing) -> Result<Chain, ChainError> {
        let spec = ChainSpec::from_file(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Chain::from_spec(&spec, base, registry, sharing)
    }

    /// Builds a chain from a parsed spec; relative paths resolve against `base_dir`.
    pub fn from_spec(
        spec: &ChainSpec,
        base_dir: &Path,
        registry: &Registry,
        sharing: Sharing,
    ) -> Result<Chain, ChainError> {
        let mut fns = Vec::new();
        for (i, fs) in spec.functions.iter().enumerate() {
            let ns = namespace_of(&spec.name, &fs.name);
            let f = registry
                .build(fs, ns, base_dir)
                .map_err(|msg| ChainError::Function {
                    index: i,
                    name: fs.name.clone(),
                    kind: fs.kind.clone(),
                    msg,
                })?;
            fns.push(f);
        }
        let stream_factory = registry
            .stream_stage(&spec.reassembly, base_dir)
            .map_err(ChainError::Reassembly)?;
        let mut chain = Chain::new(
            &spec.name,
            fns,
            stream_factory,
            sharing,
            spec.settings.timer_interval_ms,
        );
        chain.forward_sources = spec
            .settings
            .forward_sources
            .iter()
            .map(|p| Prefix::parse(p).map_err(ChainError::Reassembly))
            .collect::<Result<_, _>>()?;
        chain.parse = spec.settings.parse_options();
        chain.stream_checksums = checksums::StreamChecksums::new(spec.settings.checksums());
        chain.limiter = spec.settings.capacity.map(|c| Limiter {
            pps: c.pps.map(|r| Bucket::new(r, c.burst_ms)),
            bps: c.mbps.map(|r| Bucket::new(r * 1e6, c.burst_ms)),
        });
        Ok(chain)
    }

    /// Builds a chain from functions already constructed.
    pub fn new(
        name: &str,
        functions: Vec<Box<dyn NetworkFunction>>,
        stream_factory: Option<StreamStageFactory>,
        sharing: Sharing,
        timer_interval_ms: u64,
    ) -> Chain {
        let any_streams = functions.iter().any(|f| f.wants_streams());
        let any_events = functions.iter().any(|f| f.wants_stream_events());
        // A function's hints hold only if it sees the tuples the switch steered
        // by: in a chain with one header-rewriting function, that function itself
        // (it comes first for the packets it rewrites, in either direction); in a
        // chain with none, every function.
        let rewriters = functions
            .iter()
            .filter(|f| REWRITERS.contains(&f.kind()))
            .count();
        let reassembly = match (&stream_factory, sharing, any_streams) {
            (Some(mk), Sharing::Shared, true) => Some(mk(namespace_of(name, "::reassembly"))),
            _ => None,
        };
        let stages = functions
            .into_iter()
            .map(|f| {
                // Unshared, every function is a standalone middlebox that captures,
                // parses and reconstructs sessions itself (CoMb §3.2), whether or not
                // it reads the stream: that is the duplication reuse removes.
                let own_streams = match (&stream_factory, sharing) {
                    (Some(mk), Sharing::Unshared) => {
                        let ns = Namespace(f.namespace().0 ^ 0x5eed_0001);
                        let s = Streams {
                            want_events: f.wants_stream_events(),
                            ..Streams::default()
                        };
                        Some((mk(ns), s))
                    }
                    _ => None,
                };
                let hints = rewriters == 0 || (rewriters == 1 && REWRITERS.contains(&f.kind()));
                Stage {
                    stats: StageStats::new(f.kind()),
                    f,
                    own_streams,
                    hints,
                }
            })
            .collect();
        Chain {
            name: name.to_string(),
            stages,
            sharing,
            reassembly,
            streams: Streams {
                want_events: any_events,
                ..Streams::default()
            },
            events: Vec::new(),
            emitted: Vec::new(),
            stats: ChainStats::default(),
            now_ns: 0,
            next_timers_ns: 0,
            timer_interval_ns: timer_interval_ms.max(1) * 1_000_000,
            parse: ParseOptions::default(),
            stream_checksums: checksums::StreamChecksums::new(Default::default()),
            live_before: Vec::new(),
            forward_sources: Vec::new(),
            limiter: None,
            run: Batch::default(),
            done: Vec::new(),
            cache: None,
            cache_config: CacheConfig::default(),
            pipelined: false,
            held_lost: false,
            prefetch_ops: sluice_state::Ops::new(),
        }
    }

    /// Configuration warnings of every function, prefixed with the function's
    /// position and type (e.g. IPS rules skipped with their file and line).
    pub fn config_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, st) in self.stages.iter().enumerate() {
            let mut w = Vec::new();
            st.f.config_warnings(&mut w);
            out.extend(
                w.into_iter()
                    .map(|m| format!("functions[{i}] ({}): {m}", st.f.kind())),
            );
        }
        out
    }

    /// The chain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// True if the chain has no functions (it then only parses and forwards).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Grants (`Some`) or revokes (`None`) this instance's ownership lease on flow
    /// hash ranges (see docs/STATE.md, "Consistency model"). While a lease is valid,
    /// records functions mark as flow-owned are cached in front of `store`; without
    /// one (the default) every operation goes to the store, as it always did.
    ///
    /// Deferred writes are sent to `store` before any range is given up, and cached
    /// records of ranges no longer owned are dropped. A store error is counted, and
    /// returned; the new lease is installed either way.
    pub fn set_ownership(
        &mut self,
        own: Option<Ownership>,
        store: &mut dyn StateStore,
    ) -> Result<(), StoreError> {
        let now = self.now_ns;
        let r = match (own.is_some(), self.cache.as_mut()) {
            (true, Some(c)) => c.set_ownership(own, store, now),
            (true, None) => {
                let mut c = FlowCache::new(self.cache_config);
                let r = c
                    .set_pipelined(self.pipelined, store, now)
                    .and(c.set_ownership(own, store, now));
                self.cache = Some(c);
                r
            }
            (false, Some(c)) => {
                let r = c.set_ownership(None, store, now);
                self.held_lost |= c.take_held_failed();
                self.cache = None;
                r
            }
            (false, None) => Ok(()),
        };
        if let Err(e) = &r {
            self.stats.store_errors += 1;
            self.stats.last_error = Some(format!("cache: {e}"));
        }
        r
    }

    /// Renews the current lease (same epoch and ranges) until `valid_until_ns`
    /// without flushing anything; false if there is none, it differs, or it has
    /// expired (then call [`Chain::set_ownership`]). `now_ns` also advances the
    /// chain's clock.
    pub fn renew_ownership(
        &mut self,
        epoch: u64,
        ranges: &[(u32, u32)],
        valid_until_ns: u64,
        now_ns: u64,
    ) -> bool {
        self.now_ns = self.now_ns.max(now_ns);
        let now = self.now_ns;
        self.cache
            .as_mut()
            .is_some_and(|c| c.renew(epoch, ranges, valid_until_ns, now))
    }

    /// The current ownership lease, if any (an expired one still shows until the
    /// next batch or tick notices).
    pub fn ownership(&self) -> Option<&Ownership> {
        self.cache.as_ref().and_then(|c| c.ownership())
    }

    /// Sets the cache's bounds; takes effect at the next [`Chain::set_ownership`]
    /// that creates a cache (after a revocation, or the first grant).
    pub fn set_cache_config(&mut self, cfg: CacheConfig) {
        self.cache_config = cfg;
    }

    /// Counters of the flow cache, if the instance has one (holds a lease).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(|c| c.stats())
    }

    /// Runs `f` with `store`, behind the flow cache if there is one, then sends the
    /// cache's deferred writes if they are due (or all of them if `flush_all`).
    fn with_store(
        &mut self,
        store: &mut dyn StateStore,
        now: u64,
        flush_all: bool,
        f: impl FnOnce(&mut Chain, &mut dyn StateStore),
    ) {
        let Some(mut c) = self.cache.take() else {
            f(self, store);
            return;
        };
        let mut r = if flush_all {
            c.flush(store, now)
        } else {
            Ok(())
        };
        {
            let mut cs = c.bind(store, now);
            f(self, &mut cs);
        }
        let r2 = if flush_all {
            c.flush(store, now)
        } else {
            c.flush_due(store, now)
        };
        r = r.and(r2);
        if let Err(e) = r {
            self.stats.store_errors += 1;
            self.stats.last_error = Some(format!("cache: {e}"));
        }
        if c.ownership().is_some() {
            self.cache = Some(c);
        } else {
            // The lease expired: back to "own nothing", exactly today's behaviour
            // (after finishing what is in flight on the store's connection).
            // Pipelined, batches processed under the lease may still wait for
            // writes sent without waiting; with no cache, `settled` would free
            // them at once, so everything sent is made durable first.
            let r = c.quiesce(store, now).and_then(|()| {
                if !self.pipelined {
                    return Ok(());
                }
                store.sync()?;
                match store.take_unacked_failures() {
                    0 => Ok(()),
                    n => Err(StoreError::Unavailable(format!(
                        "{n} writes sent without waiting failed"
                    ))),
                }
            });
            if let Err(e) = r {
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("cache: {e}"));
                self.held_lost |= self.pipelined;
            }
            self.held_lost |= c.take_held_failed();
            self.cache = None;
        }
    }

    /// Turns pipelined mode on or off (docs/STATE.md, "Pipelining"): for a chain
    /// with a flow cache, store operations whose results no function needs
    /// (the write-through of a new connection's record, timers) no longer make
    /// the batch wait for a round trip; they are sent by the next
    /// [`Chain::prefetch`] (which also reads the next batches' records while
    /// the current ones are processed), and the caller must hold every batch
    /// processed before that call until [`Chain::settled`] reaches the value it
    /// returned.
    /// [`Pipeline`] does all of this. Without a lease nothing changes.
    pub fn set_pipelined(&mut self, on: bool, store: &mut dyn StateStore) {
        self.pipelined = on;
        let now = self.now_ns;
        if let Some(c) = self.cache.as_mut() {
            if let Err(e) = c.set_pipelined(on, store, now) {
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("cache: {e}"));
            }
        }
    }

    /// Starts reading the records that `batches` will need (the functions'
    /// [`NetworkFunction::prefetch`] reads) without waiting, in the same write
    /// as the operations pipelined mode held; the cache takes the results when
    /// they are next needed. Returns the mark that batches processed before
    /// this call wait for (see [`Chain::settled`]). Parses the packets and
    /// marks malformed ones dropped, so process them with
    /// [`Chain::process_prefetched`]. Without a flow cache it reads nothing and
    /// returns 0.
    ///
    /// With `read_ahead` false only the held operations are sent (and the
    /// packets parsed): for traffic whose records are all cached already,
    /// listing them costs more than it saves.
    pub fn prefetch(
        &mut self,
        batches: &mut [Batch],
        store: &mut dyn StateStore,
        read_ahead: bool,
    ) -> Result<u64, StoreError> {
        for batch in batches.iter_mut() {
            for p in batch.pkts.iter_mut().filter(|p| p.is_live()) {
                let (frame, meta) = p.data_and_meta_mut();
                if let Err(e) = parse_into_opts(frame, meta, &self.parse) {
                    p.meta = Default::default();
                    p.drop_by(PARSE_STAGE, e.name());
                }
            }
        }
        let Some(cache) = self.cache.as_mut() else {
            return Ok(0);
        };
        let ops = &mut self.prefetch_ops;
        ops.clear();
        for batch in batches.iter().filter(|_| read_ahead) {
            if let Some(r) = self.reassembly.as_ref() {
                r.prefetch(batch, ops);
            }
            if self.sharing == Sharing::Shared {
                for st in self.stages.iter().filter(|st| st.hints) {
                    st.f.prefetch(batch, ops);
                }
            }
        }
        // The chain's clock, not the batches': they are processed later, and an
        // entry filled now must not look younger than it is then.
        let now = self.now_ns;
        cache.prefetch(store, ops, now).inspect_err(|e| {
            self.stats.store_errors += 1;
            self.stats.last_error = Some(format!("cache: {e}"));
        })
    }

    /// How far sends without waiting are settled (see [`Chain::prefetch`]),
    /// reading what has arrived without waiting. An error means held operations
    /// may be lost: every batch still held must be dropped, not sent.
    pub fn settled(&mut self, store: &mut dyn StateStore) -> Result<u64, StoreError> {
        if std::mem::take(&mut self.held_lost) {
            return Err(StoreError::Unavailable(
                "held operations were lost with the flow cache".into(),
            ));
        }
        match self.cache.as_mut() {
            Some(c) => c.settled(store).inspect_err(|e| {
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("cache: {e}"));
            }),
            None => Ok(u64::MAX),
        }
    }

    /// Like [`Chain::settled`], but first sends what is held and waits until
    /// everything is settled (idle input, end of a trace).
    pub fn wait_settled(&mut self, store: &mut dyn StateStore) -> Result<u64, StoreError> {
        let now = self.now_ns;
        if let Some(c) = self.cache.as_mut() {
            if let Err(e) = c.wait_settled(store, now) {
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("cache: {e}"));
                self.held_lost = true;
            }
        }
        self.settled(store)
    }

    /// Like [`Chain::wait_settled`], but deferred writes that are not due stay
    /// deferred ([`sluice_state::FlowCache::wait_sent`]): what an idle
    /// pipeline waits for.
    pub fn wait_sent(&mut self, store: &mut dyn StateStore) -> Result<u64, StoreError> {
        let now = self.now_ns;
        if let Some(c) = self.cache.as_mut() {
            if let Err(e) = c.wait_sent(store, now) {
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("cache: {e}"));
                self.held_lost = true;
            }
        }
        self.settled(store)
    }

    /// Processes one batch: sets every packet's verdict, rewrites packets, and
    /// collects events and emitted frames (drain them with [`Chain::take_events`] and
    /// [`Chain::take_emitted`]).
    pub fn process(&mut self, batch: &mut Batch, store: &mut dyn StateStore) {
        let newest = self.newest(batch);
        self.with_store(store, newest, false, |ch, st| {
            ch.process_inner(batch, st, false)
        });
    }

    /// The chain's time after `batch`: its newest packet, never going back.
    fn newest(&self, batch: &Batch) -> u64 {
        batch
            .pkts
            .iter()
            .map(|p| p.ts_ns)
            .max()
            .unwrap_or(0)
            .max(self.now_ns)
    }

    /// [`Chain::process`] for a batch [`Chain::prefetch`] already parsed (its
    /// malformed frames already marked dropped): the parse is not repeated.
    pub fn process_prefetched(&mut self, batch: &mut Batch, store: &mut dyn StateStore) {
        let newest = self.newest(batch);
        self.with_store(store, newest, false, |ch, st| {
            ch.process_inner(batch, st, true)
        });
    }

    fn process_inner(&mut self, batch: &mut Batch, store: &mut dyn StateStore, parsed: bool) {
        let n = batch.len();
        self.stats.packets += n as u64;
        let mut newest = self.now_ns;
        let mut oldest = u64::MAX;
        for p in batch.pkts.iter_mut() {
            self.stats.bytes += p.len() as u64;
            newest = newest.max(p.ts_ns);
            oldest = oldest.min(p.ts_ns);
            if !p.is_live() {
                continue;
            }
            if let Some(l) = self.limiter.as_mut() {
                if !l.admit(p.ts_ns, p.len()) {
                    p.drop_by(CAPACITY_STAGE, "over_capacity");
                    continue;
                }
            }
            if parsed {
                if !p.meta.is_ip() {
                    self.stats.non_ip += 1;
                }
                continue;
            }
            let (frame, meta) = p.data_and_meta_mut();
            match parse_into_opts(frame, meta, &self.parse) {
                Ok(()) => {
                    if !meta.is_ip() {
                        self.stats.non_ip += 1;
                    }
                }
                Err(e) => {
                    p.meta = Default::default();
                    p.drop_by(PARSE_STAGE, e.name());
                }
            }
        }
        // Timers run no later than the batch's oldest packet: they must not
        // expire state a packet of this batch still finds live. Functions judge
        // staleness against each packet's own time, so what a timer removes at
        // `oldest` every later packet would have found expired anyway, and the
        // outcome does not depend on how packets are batched.
        if oldest != u64::MAX && oldest >= self.next_timers_ns {
            self.run_timers(oldest, store);
            self.next_timers_ns = oldest + self.timer_interval_ns;
        }
        self.now_ns = newest;

        if self.forward_sources.is_empty() {
            self.pipeline(batch, store, false);
        } else {
            // Runs of one direction, in arrival order: reordering packets across
            // directions inside a batch would break causality (an ACK processed before
            // the SYN-ACK it answers), so each run is processed before the next.
            // The three vectors trade places every batch, so none is reallocated.
            let mut all = std::mem::take(&mut batch.pkts);
            let mut run = std::mem::take(&mut self.run);
            let mut done = std::mem::take(&mut self.done);
            let mut it = all.drain(..).peekable();
            while let Some(first) = it.next() {
                let reverse = self.is_reverse(&first);
                run.pkts.push(first);
                while let Some(p) = it.next_if(|p| self.is_reverse(p) == reverse) {
                    run.pkts.push(p);
                }
                self.pipeline(&mut run, store, reverse);
                done.append(&mut run.pkts);
            }
            drop(it);
            batch.pkts = done;
            self.done = all;
            self.run = run;
        }

        for p in &batch.pkts {
            match p.verdict {
                Verdict::Forward => self.stats.forwarded += 1,
                Verdict::Drop(r) if r.stage == PARSE_STAGE => self.stats.count_malformed(r.reason),
                Verdict::Drop(r) if r.stage == CAPACITY_STAGE => self.stats.over_capacity += 1,
                Verdict::Drop(r) if r.stage == REASSEMBLY_STAGE => {
                    self.stats.count_reassembly_drop(r.reason)
                }
                Verdict::Drop(_) => self.stats.dropped += 1,
            }
        }
        self.tally_events_since();
    }

    /// True if the packet crosses the chain in reverse (return traffic).
    fn is_reverse(&self, p: &sluice_packet::Packet) -> bool {
        p.meta.is_ip()
            && !self
                .forward_sources
                .iter()
                .any(|f| f.contains(&p.meta.flow.src))
    }

    /// Reassembly (if shared) and every function, in order or in reverse.
    fn pipeline(&mut self, batch: &mut Batch, store: &mut dyn StateStore, reverse: bool) {
        let n = batch.len();
        self.streams.reset(n);
        // Reassembly runs just before the first function that reads streams, so
        // what an earlier function drops (a firewall's deny) never takes its
        // memory, and it sees the tuples that function sees.
        let mut reassembled = self.reassembly.is_none();

        let count = self.stages.len();
        for k in 0..count {
            let i = if reverse { count - 1 - k } else { k };
            if !reassembled && self.stages[i].f.wants_streams() {
                reassembled = true;
                if let Some(r) = self.reassembly.as_mut() {
                    self.stream_checksums.apply(batch, PARSE_STAGE);
                    let mut plain;
                    let store: &mut dyn StateStore = if self.stages[i].hints {
                        &mut *store
                    } else {
                        plain = Unhinted(&mut *store);
                        &mut plain
                    };
                    if let Err(e) = r.process(batch, store, &mut self.streams, REASSEMBLY_STAGE) {
                        self.stats.store_errors += 1;
                        self.stats.last_error = Some(e.to_string());
                        fail_closed(batch, REASSEMBLY_STAGE);
                    }
                }
            }
            let st = &mut self.stages[i];
            let stage = i as u8;
            let mut plain;
            let store: &mut dyn StateStore = if st.hints {
                &mut *store
            } else {
                plain = Unhinted(&mut *store);
                &mut plain
            };
            self.live_before.clear();
            self.live_before
                .extend(batch.pkts.iter().map(|p| p.is_live()));
            let live_in = self.live_before.iter().filter(|&&l| l).count() as u64;
            st.stats.packets_in += live_in;
            // A function that inspects malformed frames (an IPS with
            // decoder-event rules) sees a batch of nothing else too.
            if live_in == 0 && (n == 0 || !st.f.sees_malformed()) {
                continue;
            }
            if self.sharing == Sharing::Unshared {
                let opts = self.parse;
                for p in batch.pkts.iter_mut().filter(|p| p.is_live()) {
                    let (frame, meta) = p.data_and_meta_mut();
                    if let Err(e) = parse_into_opts(frame, meta, &opts) {
                        p.meta = Default::default();
                        p.drop_by(stage, e.name());
                    }
                }
            }
            let streams = match st.own_streams.as_mut() {
                Some((r, s)) => {
                    s.reset(n);
                    self.stream_checksums.apply(batch, PARSE_STAGE);
                    if let Err(e) = r.process(batch, store, s, stage) {
                        self.stats.store_errors += 1;
                        self.stats.last_error = Some(e.to_string());
                        fail_closed(batch, stage);
                    }
                    &*s
                }
                None => &self.streams,
            };
            let mut ctx = Ctx {
                now_ns: self.now_ns,
                stage,
                streams,
                events: &mut self.events,
                emit: &mut self.emitted,
            };
            if let Err(e) = st.f.process(batch, &mut ctx, store) {
                st.stats.errors += 1;
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("{}: {e}", st.f.kind()));
                fail_closed(batch, stage);
            }
            for (p, &was) in batch.pkts.iter().zip(&self.live_before) {
                if !was {
                    continue;
                }
                match p.verdict {
                    Verdict::Forward => st.stats.packets_out += 1,
                    Verdict::Drop(r) => st.stats.count_drop(r.reason),
                }
            }
        }
        // The stream stages see the batch's verdicts.
        let stages = self.reassembly.iter_mut().filter(|_| reassembled).chain(
            self.stages
                .iter_mut()
                .filter_map(|st| st.own_streams.as_mut().map(|(r, _)| r)),
        );
        for r in stages {
            if let Err(e) = r.finish(batch, store) {
                self.stats.store_errors += 1;
                self.stats.last_error = Some(e.to_string());
            }
        }
    }

    fn tally_events_since(&mut self) {
        // Events are counted when produced; `counted_events` marks how far we got.
        for e in &self.events[self.stats.counted_events..] {
            match e {
                Event::Alert(_) => self.stats.alerts += 1,
                Event::Flow(_) => self.stats.flow_records += 1,
            }
        }
        self.stats.counted_events = self.events.len();
        self.stats.emitted = self.stats.emitted_before + self.emitted.len() as u64;
    }

    /// Runs every function's (and reassembly's) due timers at time `now`.
    fn run_timers(&mut self, now: u64, store: &mut dyn StateStore) {
        if let Some(r) = self.reassembly.as_mut() {
            if let Err(e) = r.on_timers(now, store) {
                self.stats.store_errors += 1;
                self.stats.last_error = Some(e.to_string());
            }
        }
        let empty = Streams::default();
        for (i, st) in self.stages.iter_mut().enumerate() {
            if let Some((r, _)) = st.own_streams.as_mut() {
                let _ = r.on_timers(now, store);
            }
            let mut ctx = Ctx {
                now_ns: now,
                stage: i as u8,
                streams: &empty,
                events: &mut self.events,
                emit: &mut self.emitted,
            };
            if let Err(e) = st.f.on_timers(&mut ctx, store) {
                st.stats.errors += 1;
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("{}: {e}", st.f.kind()));
            }
        }
    }

    /// Replaces the backend states of every function that has backends (a
    /// load balancer's; [`NetworkFunction::set_backend_states`]), between
    /// batches. Returns how many backends the entries matched in all.
    pub fn set_backend_states(&mut self, states: &[sluice_nf::BackendAdmin]) -> usize {
        self.stages
            .iter_mut()
            .map(|st| st.f.set_backend_states(states))
            .sum()
    }

    /// Advances time to `now_ns` (if later) and runs due timers, without packets.
    pub fn tick(&mut self, now_ns: u64, store: &mut dyn StateStore) {
        let now = self.now_ns.max(now_ns);
        self.with_store(store, now, false, |ch, st| ch.tick_inner(now_ns, st));
    }

    fn tick_inner(&mut self, now_ns: u64, store: &mut dyn StateStore) {
        self.now_ns = self.now_ns.max(now_ns);
        if self.now_ns >= self.next_timers_ns {
            self.run_timers(self.now_ns, store);
            self.next_timers_ns = self.now_ns + self.timer_interval_ns;
            self.tally_events_since();
        }
    }

    /// Ends processing: runs timers one last time and lets each function flush (e.g.
    /// flow records of flows still open).
    pub fn flush(&mut self, store: &mut dyn StateStore) {
        let now = self.now_ns;
        self.with_store(store, now, true, |ch, st| ch.flush_inner(st));
    }

    fn flush_inner(&mut self, store: &mut dyn StateStore) {
        self.run_timers(self.now_ns, store);
        let empty = Streams::default();
        for (i, st) in self.stages.iter_mut().enumerate() {
            let mut ctx = Ctx {
                now_ns: self.now_ns,
                stage: i as u8,
                streams: &empty,
                events: &mut self.events,
                emit: &mut self.emitted,
            };
            if let Err(e) = st.f.flush(&mut ctx, store) {
                st.stats.errors += 1;
                self.stats.store_errors += 1;
                self.stats.last_error = Some(format!("{}: {e}", st.f.kind()));
            }
        }
        self.tally_events_since();
    }

    /// Takes the events produced so far.
    pub fn take_events(&mut self) -> Vec<Event> {
        self.stats.counted_events = 0;
        std::mem::take(&mut self.events)
    }

    /// Moves the events produced so far into `out` (keeps this chain's buffer).
    pub fn drain_events_into(&mut self, out: &mut Vec<Event>) {
        self.stats.counted_events = 0;
        out.append(&mut self.events);
    }

    /// Takes the frames functions asked to send.
    pub fn take_emitted(&mut self) -> Vec<Emitted> {
        self.stats.emitted_before += self.emitted.len() as u64;
        std::mem::take(&mut self.emitted)
    }

    /// Statistics so far, including each function's own counters.
    pub fn stats(&self) -> ChainStats {
        let mut s = self.stats.clone();
        s.stages = self
            .stages
            .iter()
            .map(|st| {
                let mut ss = st.stats.clone();
                st.f.counters(&mut ss.counters);
                ss
            })
            .collect();
        if let Some(r) = &self.reassembly {
            r.counters(&mut s.reassembly_counters);
        }
        self.stream_checksums.counters(&mut s.reassembly_counters);
        s
    }
}

fn fail_closed(batch: &mut Batch, stage: u8) {
    for p in batch
        .pkts
        .iter_mut()
        .filter(|p| p.is_live() && p.meta.is_ip())
    {
        p.drop_by(stage, "state_error");
    }
}

#[cfg(test)]
mod tests;
