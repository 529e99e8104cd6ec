//! A consistency-preserving local cache in front of a (remote) [`StateStore`].
//!
//! The model (docs/STATE.md, "Consistency model"), in short:
//!
//! * An instance caches a flow's records only while it holds an [`Ownership`] lease
//!   on the flow's direction-invariant hash. The data plane steers every packet of
//!   an owned range to the lease holder, so the holder is the only instance that
//!   writes the range's per-flow records (timer handlers aside, see below).
//! * Only operations a function marked with a [`Hint`] other than [`Hint::Store`]
//!   are cached; everything else goes to the store, and a store-bound write to a
//!   cached key evicts it and blocks refilling it until the owner writes it again.
//! * Reads of owned keys are answered from the cache when present; a miss reads
//!   through and fills. [`Hint::Owned`] writes go to the store in the same round
//!   trip as before (so they are durable before the batch's packets leave) and
//!   update the cache. [`Hint::Deferred`] writes update the cache; once the
//!   oldest is older than [`CacheConfig::max_defer_ns`] or more than
//!   [`CacheConfig::max_pending`] are pending they ride along with the next round
//!   trip, or are sent without waiting for the store's reply
//!   ([`StateStore::execute_unacked`], by [`FlowCache::flush_due`] after a batch);
//!   giving up the lease sends them and waits for every acknowledgement. [`Hint::Unacked`] writes are held the same
//!   way but always sent by the `flush_due` at the end of the batch (before its
//!   packets leave), without waiting for the reply.
//! * An `execute` whose operations were all answered or absorbed by the cache makes
//!   no round trip at all.
//! * Entries unused for [`CacheConfig::idle_ns`] are not served: a bound far below
//!   every function's idle timeout, so a record a timer handler on another
//!   instance deleted (which it only does once the record is idle past its timeout)
//!   is never resurrected from a stale entry.

use rustc_hash::FxHashMap;

use crate::key::{Key, Namespace};
use crate::ops::{Hint, Op, OpId, OpResult, Ops};
use crate::{StateStore, StoreCounters, StoreError};

mod ownership;

pub use ownership::{hash_range_split, Ownership};

/// Cache bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// An entry unused for this long is not served (read through instead). Must be
    /// well below the shortest idle timeout of any cached record, minus the
    /// functions' refresh granularity (firewall: 10 s closed timeout, 1 s refresh).
    /// Default 1 s.
    pub idle_ns: u64,
    /// A deferred write is sent at most this long after it was made (if the chain
    /// is called at all). Default 1 ms.
    pub max_defer_ns: u64,
    /// At most this many deferred writes wait; more forces a flush. Default 1024.
    pub max_pending: usize,
    /// Memory cap in entries; reaching it drops clean entries. Default 1 M.
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            idle_ns: 1_000_000_000,
            max_defer_ns: 1_000_000,
            max_pending: 1024,
            max_entries: 1 << 20,
        }
    }
}

/// What the cache did, for measurements and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Owned reads answered from the cache.
    pub hits: u64,
    /// Owned reads that went to the store.
    pub misses: u64,
    /// Owned writes sent to the store in the batch's own round trip.
    pub write_through: u64,
    /// Deferred writes absorbed by the cache.
    pub deferred: u64,
    /// Deferred writes later sent to the store.
    pub deferred_flushed: u64,
    /// Deferred writes dropped (store error, or lease expired before a flush).
    pub deferred_lost: u64,
    /// Flushes of due deferred writes sent without waiting for the store's reply
    /// ([`StateStore::execute_unacked`]): they cost no round trip.
    pub background_flushes: u64,
    /// Writes sent before the batch left without waiting for their
    /// acknowledgement ([`Hint::Unacked`]).
    pub unacked: u64,
    /// Values sent without waiting queued again after a send failed.
    pub resent: u64,
    /// `execute` calls answered without a round trip.
    pub saved_round_trips: u64,
    /// Entries dropped (idle, memory cap, lost ownership, store-bound writes).
    pub evictions: u64,
    /// Reads started ahead by [`FlowCache::prefetch`].
    pub prefetched: u64,
    /// Prefetched results that filled an entry (the rest were overtaken by the
    /// owner's own writes, or the cache was emptied meanwhile).
    pub prefetch_fills: u64,
    /// Operations held in pipelined mode (sent with the next prefetch).
    pub held: u64,
    /// Prefetches that carried held operations or deferred writes.
    pub held_sends: u64,
    /// Owned compare-and-sets decided by the cache in pipelined mode (the
    /// owner's fresh entry held the expected value) and sent as plain writes.
    pub local_swaps: u64,
    /// Reads of blocked keys answered once by a prefetch.
    pub oneshot_hits: u64,
}

#[derive(Debug)]
struct Entry {
    /// `None`: known absent.
    val: Option<Vec<u8>>,
    flow_hash: u32,
    used_ns: u64,
    /// Holds a deferred write not yet in the store.
    dirty: bool,
    /// A store-bound write touched the key: do not fill it from reads until the
    /// owner writes it again.
    blocked: bool,
    /// Sent without waiting and not known to be acknowledged yet (listed in
    /// `FlowCache::unconfirmed`).
    unconfirmed: bool,
}

/// The cache of one instance (one chain). Bind it to a store per call with
/// [`FlowCache::bind`].
#[derive(Debug)]
pub struct FlowCache {
    cfg: CacheConfig,
    own: Option<Ownership>,
    map: FxHashMap<Key, Entry>,
    pending: usize,
    /// Keys that became dirty since the last flush (some may be clean again), so a
    /// flush never walks the whole map.
    dirty_keys: Vec<Key>,
    oldest_pending_ns: u64,
    /// Deferred writes in the batch being sent (lost if the send fails).
    in_flight: u64,
    stats: CacheStats,
    fwd: Ops,
    fwd_map: Vec<(u32, u32)>,
    fills: FxHashMap<Key, u32>,
    /// Owned compare-and-sets of the batch being sent: (key, op index, flow hash).
    cas_posts: Vec<(Key, u32, u32)>,
    /// Some pending write is [`Hint::Unacked`]: the next [`FlowCache::flush_due`]
    /// sends them all, whatever their age.
    urgent: bool,
    /// Keys whose values were sent without waiting since the last point at which
    /// every earlier send was known acknowledged: re-sent if a send fails.
    unconfirmed: Vec<Key>,
    /// Pipelined mode: operations whose results nobody needs are held for
    /// the next [`FlowCache::prefetch`] instead of waiting for a round trip.
    pipelined: bool,
    /// Held operations, in order.
    held: Ops,
    /// A send without waiting failed while in pipelined mode: the batches held
    /// on it must not leave (reported once by [`FlowCache::settled`]).
    held_failed: bool,
    /// The started prefetch (see [`FlowCache::prefetch`]), its keys still
    /// eligible to fill, and the eviction count and lease epoch when it started.
    pf: Ops,
    pf_keys: rustc_hash::FxHashSet<Key>,
    pf_started: bool,
    /// The started prefetch carries held operations or deferred writes.
    pf_writes: bool,
    /// `gen` when the prefetch started.
    pf_gen: u64,
    pf_epoch: u64,
    /// Bumped whenever entries leave the map other than as a blocked marker (a
    /// prefetched answer must not refill a key emptied meanwhile).
    gen: u64,
    /// Prefetched answers for keys a store-bound write blocked: never cached,
    /// served once to the next read of the window (as a read-through made at
    /// prefetch time would be), dropped by any write to the key.
    oneshot: FxHashMap<Key, Option<Vec<u8>>>,
}

impl FlowCache {
    /// An empty cache owning nothing.
    pub fn new(cfg: CacheConfig) -> FlowCache {
        FlowCache {
            cfg,
            own: None,
            map: FxHashMap::default(),
            pending: 0,
            dirty_keys: Vec::new(),
            oldest_pending_ns: 0,
            in_flight: 0,
            stats: CacheStats::default(),
            fwd: Ops::new(),
            fwd_map: Vec::new(),
            fills: FxHashMap::default(),
            cas_posts: Vec::new(),
            urgent: false,
            unconfirmed: Vec::new(),
            pipelined: false,
            held: Ops::new(),
            held_failed: false,
            pf: Ops::new(),
            pf_keys: rustc_hash::FxHashSet::default(),
            pf_started: false,
            pf_writes: false,
            pf_gen: 0,
            gen: 0,
            oneshot: FxHashMap::default(),
            pf_epoch: 0,
        }
    }

    /// Turns pipelined mode on or off (docs/STATE.md, "Pipelining"). In it, an
    /// `execute` whose store-bound operations need no result (writes, deletes,
    /// timers) makes no round trip: they are held, in order, and sent by
    /// the next [`FlowCache::prefetch`]; the caller holds the batches that made
    /// them until [`FlowCache::settled`] reaches the value that call returned, so a
    /// change that matters is still durable before its packets leave. Writes
    /// marked [`Hint::Unacked`] also wait for that instead of going out
    /// after every batch. Turning it off sends what is held and waits.
    pub fn set_pipelined(
        &mut self,
        on: bool,
        store: &mut dyn StateStore,
        now_ns: u64,
    ) -> Result<(), StoreError> {
        let r = if !on && self.pipelined {
            self.flush(store, now_ns)
        } else {
            Ok(())
        };
        self.pipelined = on;
        r
    }

    /// True in pipelined mode.
    pub fn pipelined(&self) -> bool {
        self.pipelined
    }

    /// Starts reading, without waiting, the owned records among `ops`'s reads
    /// that the cache holds nothing for, so that they are cached (present or
    /// known absent) when the batches that read them are processed: a pipelining
    /// caller calls this for the next batches before processing the current
    /// ones, and the round trip overlaps that work. A prefetch still in flight is
    /// finished first (one at a time). Results fill the cache only for keys
    /// nothing else touched meanwhile (the owner's own writes are newer), and
    /// only if the lease and the cache survived; reads marked
    /// [`Hint::Present`] never cache "absent".
    ///
    /// In pipelined mode the same write to the store carries, ahead of the
    /// reads, everything held and every pending deferred write: one system call
    /// per window for both. Returns the store's `sent` count after it (see
    /// [`StateStore::poll_unacked`]): batches processed before this call are
    /// durable once [`FlowCache::settled`] reaches it. Without a lease nothing
    /// is read.
    pub fn prefetch(
        &mut self,
        store: &mut dyn StateStore,
        ops: &Ops,
        now_ns: u64,
    ) -> Result<u64, StoreError> {
        self.finish_prefetch(store, now_ns)?;
        self.check_lease(now_ns);
        self.pf.clear();
        self.pf_keys.clear();
        self.pf_writes = false;
        if self.pipelined {
            // Held operations first, then deferred values (appended last, as in
            // `execute_owned`: every held write of a dirty key came before it).
            self.fwd.clear();
            for i in 0..self.held.len() {
                self.fwd.push_copy(&self.held, i);
            }
            self.held.clear();
            // Writes that must leave with their batches always; deferred ones
            // only once due (each costs the store work, not just bytes).
            if self.urgent || self.due(now_ns) {
                self.append_dirty();
            }
            for i in 0..self.fwd.len() {
                let k = *self.fwd.ops()[i].key();
                if let Some(e) = self.map.get_mut(&k).filter(|e| !e.unconfirmed) {
                    e.unconfirmed = true;
                    self.unconfirmed.push(k);
                }
                self.pf.push_copy(&self.fwd, i);
            }
            self.in_flight = 0;
            self.pf_writes = !self.pf.is_empty();
        }
        if let Some(own) = self.own.as_ref() {
            for i in 0..ops.len() {
                let Op::Get { key } = ops.ops()[i] else {
                    continue;
                };
                let (Hint::Owned { flow_hash } | Hint::Present { flow_hash }) = ops.hint(i) else {
                    continue;
                };
                if !own.covers(flow_hash) || self.map.get(&key).is_some_and(|e| !e.blocked) {
                    continue;
                }
                if self.pf_keys.insert(key) {
                    self.pf.push_copy(ops, i);
                    self.stats.prefetched += 1;
                }
            }
            self.pf_epoch = own.epoch;
        }
        if !self.pf.is_empty() {
            if self.pf_writes {
                self.stats.held_sends += 1;
            }
            self.pf_gen = self.gen;
            if let Err(e) = store.start(&mut self.pf) {
                self.held_failed |= self.pf_writes;
                self.fail_send();
                return Err(e);
            }
            self.pf_started = true;
        }
        Ok(store.poll_unacked()?.0)
    }

    /// Waits for the started prefetch, if any, and fills the cache from it.
    fn finish_prefetch(
        &mut self,
        store: &mut dyn StateStore,
        now_ns: u64,
    ) -> Result<(), StoreError> {
        if !self.pf_started {
            return Ok(());
        }
        self.check_lease(now_ns);
        let epoch = self.own.as_ref().map(|o| o.epoch);
        self.finish_prefetch_under(store, now_ns, epoch)
    }

    /// [`FlowCache::finish_prefetch`] under the lease of epoch `epoch` (`None`:
    /// no lease, nothing fills), for callers that took the lease out of `self`.
    fn finish_prefetch_under(
        &mut self,
        store: &mut dyn StateStore,
        now_ns: u64,
        epoch: Option<u64>,
    ) -> Result<(), StoreError> {
        if !std::mem::take(&mut self.pf_started) {
            return Ok(());
        }
        // The previous prefetch's one-time answers were for the window processed
        // since; this one's are for the next.
        self.oneshot.clear();
        let mut pf = std::mem::take(&mut self.pf);
        let r = store.finish(&mut pf);
        if r.is_ok() {
            let intact = self.gen == self.pf_gen && epoch == Some(self.pf_epoch);
            for i in 0..pf.len().min(if intact { usize::MAX } else { 0 }) {
                let Op::Get { key } = pf.ops()[i] else {
                    continue;
                };
                let (present_only, flow_hash) = match pf.hint(i) {
                    Hint::Present { flow_hash } => (true, flow_hash),
                    Hint::Owned { flow_hash } => (false, flow_hash),
                    _ => continue,
                };
                let v = pf.value(OpId::at(i));
                if (present_only && v.is_none()) || !self.pf_keys.contains(&key) {
                    continue;
                }
                match self.map.get(&key) {
                    Some(e) if e.blocked => {
                        self.oneshot.insert(key, v.map(|v| v.to_vec()));
                        continue;
                    }
                    Some(_) => continue,
                    None => {}
                }
                let v = v.map(|v| v.to_vec());
                self.make_room(now_ns);
                self.map.insert(
                    key,
                    Entry {
                        val: v,
                        flow_hash,
                        used_ns: now_ns,
                        dirty: false,
                        blocked: false,
                        unconfirmed: false,
                    },
                );
                self.stats.prefetch_fills += 1;
            }
        } else {
            self.held_failed |= self.pf_writes;
            self.fail_send();
        }
        self.pf = pf;
        self.pf_keys.clear();
        r
    }

    /// Reads the acknowledgements that have arrived, without waiting, and returns
    /// how far sends are settled (compare with [`FlowCache::prefetch`]'s
    /// values). An error means a send without waiting failed since the last
    /// call: what reached the store is unknown, so the cache was emptied, and
    /// batches still held must not leave (drop them).
    pub fn settled(&mut self, store: &mut dyn StateStore) -> Result<u64, StoreError> {
        let r = store.poll_unacked();
        self.check_unacked(store);
        if std::mem::take(&mut self.held_failed) {
            self.drop_all();
            return Err(StoreError::Unavailable(
                "a write sent without waiting failed; held batches must not leave".into(),
            ));
        }
        r.map(|(_, settled)| settled)
    }

    /// Finishes the prefetch, sends what is held and waits until every send is
    /// settled; returns [`FlowCache::settled`]'s value.
    pub fn wait_settled(
        &mut self,
        store: &mut dyn StateStore,
        now_ns: u64,
    ) -> Result<u64, StoreError> {
        let r = self.before_wait(store, now_ns);
        let r = r.and_then(|()| {
            if self.pending > 0 {
                self.fwd.clear();
                self.append_dirty();
                store.execute_unacked(&mut self.fwd)?;
            }
            store.sync()
        });
        match r {
            Ok(()) => self.settled(store),
            Err(e) => {
                self.held_failed = false;
                self.drop_all();
                Err(e)
            }
        }
    }

    /// Like [`FlowCache::wait_settled`], but deferred writes that are not due
    /// stay deferred: finishes the prefetch, sends what is held and waits for
    /// every send so far (a pipelined instance whose input went idle: its
    /// batches need their held writes settled, not the refreshes of every
    /// established flow, which would then be written and waited for at every
    /// pause of the input).
    pub fn wait_sent(
        &mut self,
        store: &mut dyn StateStore,
        now_ns: u64,
    ) -> Result<u64, StoreError> {
        match self.before_wait(store, now_ns).and_then(|()| store.sync()) {
            Ok(()) => self.settled(store),
            Err(e) => {
                self.held_failed = false;
                self.drop_all();
                Err(e)
            }
        }
    }

    /// Returns, and resets, whether held operations failed or were dropped
    /// since [`FlowCache::settled`] last reported it.
    pub fn take_held_failed(&mut self) -> bool {
        std::mem::take(&mut self.held_failed)
    }

    /// Finishes the prefetch in flight and sends what is held, so that the
    /// store's connection has nothing started (before dropping the cache).
    pub fn quiesce(&mut self, store: &mut dyn StateStore, now_ns: u64) -> Result<(), StoreError> {
        self.before_wait(store, now_ns)
    }

    /// Before a call that waits: the prefetch's replies come first on the
    /// connection, and held operations must reach the store before anything
    /// sent after them.
    fn before_wait(&mut self, store: &mut dyn StateStore, now_ns: u64) -> Result<(), StoreError> {
        self.check_lease(now_ns);
        let epoch = self.own.as_ref().map(|o| o.epoch);
        self.before_wait_under(store, now_ns, epoch)
    }

    /// [`FlowCache::before_wait`] under the lease of epoch `epoch`.
    fn before_wait_under(
        &mut self,
        store: &mut dyn StateStore,
        now_ns: u64,
        epoch: Option<u64>,
    ) -> Result<(), StoreError> {
        self.finish_prefetch_under(store, now_ns, epoch)?;
        if !self.held.is_empty() {
            let mut held = std::mem::take(&mut self.held);
            let r = store.execute_unacked(&mut held);
            held.clear();
            self.held = held;
            if let Err(e) = r {
                self.held_failed = true;
                self.drop_all();
                return Err(e);
            }
        }
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// The current lease.
    pub fn ownership(&self) -> Option<&Ownership> {
        self.own.as_ref()
    }

    /// Counters so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Entries held (including blocked markers).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Deferred writes not yet in the store.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Replaces the lease. Deferred writes are sent first (a lease is never given up
    /// with writes outstanding); entries of ranges no longer owned are dropped. If
    /// the old lease had already expired at `now_ns`, its deferred writes are
    /// dropped instead (another instance may own the range by now) and so is every
    /// entry. On a store error the cache is emptied and the error returned; the new
    /// lease is installed either way.
    pub fn set_ownership(
        &mut self,
        own: Option<Ownership>,
        store: &mut dyn StateStore,
        now_ns: u64,
    ) -> Result<(), StoreError> {
        self.check_lease(now_ns);
        let r = self.flush(store, now_ns);
        match &own {
            Some(o) if r.is_ok() && o.valid_at(now_ns) => {
                let before = self.map.len();
                self.map
                    .retain(|_, e| (o.covers(e.flow_hash) && !e.blocked) || e.dirty);
                self.stats.evictions += (before - self.map.len()) as u64;
                self.oneshot.clear();
                self.gen += 1;
            }
            _ => self.drop_all(),
        }
        self.own = own;
        r
    }

    /// Extends the current lease to `valid_until_ns` if it is still valid at
    /// `now_ns` and has `epoch` and exactly `ranges` (a renewal: nothing to
    /// flush, nothing to drop). Returns false, changing nothing but noticing an
    /// expiry, otherwise; the caller then installs the lease with
    /// [`FlowCache::set_ownership`].
    pub fn renew(
        &mut self,
        epoch: u64,
        ranges: &[(u32, u32)],
        valid_until_ns: u64,
        now_ns: u64,
    ) -> bool {
        self.check_lease(now_ns);
        match self.own.as_mut() {
            Some(o) if o.epoch == epoch && o.ranges == ranges && valid_until_ns > now_ns => {
                o.valid_until_ns = valid_until_ns;
                true
            }
            _ => false,
        }
    }

    /// Sends every deferred write now and waits until the store acknowledged them
    /// and every deferred write sent earlier without waiting (so they are durable
    /// when this returns, as giving up a lease requires).
    pub fn flush(&mut self, store: &mut dyn StateStore, now_ns: u64) -> Result<(), StoreError> {
        self.check_lease(now_ns);
        if let Err(e) = self.before_wait(store, now_ns) {
            self.drop_all();
            return Err(e);
        }
        if self.pending > 0 {
            self.fwd.clear();
            self.append_dirty();
            self.send(store, None)?;
        }
        let r = store.sync();
        if self.check_unacked(store) && r.is_ok() {
            self.confirm();
        }
        if r.is_err() {
            self.drop_all();
        }
        r
    }

    /// Sends the deferred writes if the oldest is due or too many wait, without
    /// waiting for the store's reply ([`StateStore::execute_unacked`]): their
    /// acknowledgements are read by the next round trip the instance makes anyway.
    pub fn flush_due(&mut self, store: &mut dyn StateStore, now_ns: u64) -> Result<(), StoreError> {
        self.check_lease(now_ns);
        if !self.due(now_ns) {
            self.check_unacked(store);
            return Ok(());
        }
        self.fwd.clear();
        self.append_dirty();
        if self.pipelined && !self.held.is_empty() {
            // Held operations (a new record's write-through among them) go out
            // with the next prefetch: values sent now would reach the store
            // before them and be overwritten by older ones. They queue behind.
            for i in 0..self.fwd.len() {
                self.held.push_copy(&self.fwd, i);
            }
            self.in_flight = 0;
            self.check_unacked(store);
            return Ok(());
        }
        // Tracked until known acknowledged: a failed send is sent again.
        for i in 0..self.fwd.len() {
            let k = *self.fwd.ops()[i].key();
            if let Some(e) = self.map.get_mut(&k).filter(|e| !e.unconfirmed) {
                e.unconfirmed = true;
                self.unconfirmed.push(k);
            }
        }
        self.stats.background_flushes += 1;
        let r = store.execute_unacked(&mut self.fwd);
        self.in_flight = 0;
        if r.is_err() {
            // The packets of the batch leave anyway: keep the values, send again.
            self.requeue();
        }
        self.check_unacked(store);
        r
    }

    /// Writes sent without waiting that the store reports failed (or may not have
    /// applied): the store may be behind the cache on any of them. Their packets
    /// have left, so the cache's values are what happened: every value sent since
    /// the last acknowledged point is queued again and sent at the end of the
    /// batch (the lease guarantees nobody else wrote those keys). Returns whether
    /// everything sent so far is known acknowledged.
    fn check_unacked(&mut self, store: &mut dyn StateStore) -> bool {
        let failed = store.take_unacked_failures();
        if failed > 0 {
            // Held batches may depend on what failed: they must not leave.
            self.held_failed |= self.pipelined;
            self.requeue();
            return false;
        }
        true
    }

    /// Queues every unconfirmed value again (see [`FlowCache::check_unacked`]).
    fn requeue(&mut self) {
        for k in std::mem::take(&mut self.unconfirmed) {
            let Some(e) = self.map.get_mut(&k) else {
                continue;
            };
            e.unconfirmed = false;
            if e.blocked || e.dirty {
                continue;
            }
            e.dirty = true;
            if self.pending == 0 {
                self.oldest_pending_ns = e.used_ns;
            }
            self.pending += 1;
            self.dirty_keys.push(k);
            self.stats.resent += 1;
        }
        self.urgent |= self.pending > 0;
    }

    /// Every send so far is acknowledged.
    fn confirm(&mut self) {
        for k in self.unconfirmed.drain(..) {
            if let Some(e) = self.map.get_mut(&k) {
                e.unconfirmed = false;
            }
        }
    }

    /// A send failed: what reached the store is unknown, so forget everything,
    /// including the deferred writes in it.
    fn fail_send(&mut self) {
        self.stats.deferred_flushed -= self.in_flight;
        self.stats.deferred_lost += self.in_flight;
        self.in_flight = 0;
        self.drop_all();
        self.fills.clear();
    }

    /// This cache in front of `store` at time `now_ns`, as a [`StateStore`].
    pub fn bind<'a>(&'a mut self, store: &'a mut dyn StateStore, now_ns: u64) -> CachedStore<'a> {
        CachedStore {
            cache: self,
            inner: store,
            now_ns,
        }
    }

    fn due(&self, now_ns: u64) -> bool {
        self.pending > 0
            && ((self.urgent && !self.pipelined)
                || self.pending >= self.cfg.max_pending
                || now_ns.saturating_sub(self.oldest_pending_ns) >= self.cfg.max_defer_ns)
    }

    /// Ends an expired lease: its deferred writes are lost, every entry dropped.
    fn check_lease(&mut self, now_ns: u64) {
        if self.own.as_ref().is_some_and(|o| !o.valid_at(now_ns)) {
            self.own = None;
            // Another instance may own the range by now: what is held must not
            // be written late, so its batches must not leave either.
            if !self.held.is_empty() {
                self.held.clear();
                self.held_failed = true;
            }
            self.drop_all();
        }
    }

    fn drop_all(&mut self) {
        self.urgent = false;
        self.unconfirmed.clear();
        self.stats.deferred_lost += self.pending as u64;
        self.stats.evictions += self.map.len() as u64;
        self.map.clear();
        self.oneshot.clear();
        self.gen += 1;
        self.pending = 0;
        self.dirty_keys.clear();
    }

    /// Queues a put of every dirty entry into `fwd`, marking them clean (they are
    /// restored as lost if the send fails, by emptying the cache).
    fn append_dirty(&mut self) {
        self.urgent = false;
        if self.pending == 0 {
            self.dirty_keys.clear();
            return;
        }
        for k in self.dirty_keys.drain(..) {
            let Some(e) = self.map.get_mut(&k).filter(|e| e.dirty) else {
                continue;
            };
            e.dirty = false;
            match &e.val {
                Some(v) => self.fwd.put(k, v),
                None => self.fwd.delete(k),
            };
            self.stats.deferred_flushed += 1;
            self.in_flight += 1;
        }
        self.pending = 0;
    }

    /// Executes `fwd` on the store and copies results back into `ops` (if any).
    fn send(
        &mut self,
        store: &mut dyn StateStore,
        ops: Option<&mut Ops>,
    ) -> Result<(), StoreError> {
        if let Err(e) = store.execute(&mut self.fwd) {
            // What reached the store is unknown: forget everything, including the
            // deferred writes (the loss a crash would cause, and no more).
            self.fail_send();
            return Err(e);
        }
        self.in_flight = 0;
        if let Some(ops) = ops {
            for &(j, i) in &self.fwd_map {
                let (j, i) = (j as usize, i as usize);
                match self.fwd.result(OpId::at(j)) {
                    OpResult::Value(Some(_)) => ops.set_value(i, self.fwd.value(OpId::at(j))),
                    r => ops.set_result(i, r),
                }
            }
        }
        Ok(())
    }

    /// An entry may be served if fresh and not blocked.
    fn fresh(&self, e: &Entry, now_ns: u64) -> bool {
        !e.blocked && now_ns.saturating_sub(e.used_ns) < self.cfg.idle_ns
    }

    fn write(&mut self, key: Key, val: Option<&[u8]>, flow_hash: u32, now_ns: u64, dirty: bool) {
        // One lookup unless the map is full (a refresh is the common case).
        if self.map.len() >= self.cfg.max_entries && !self.map.contains_key(&key) {
            self.make_room(now_ns);
        }
        let e = self.map.entry(key).or_insert(Entry {
            val: None,
            flow_hash,
            used_ns: now_ns,
            dirty: false,
            blocked: false,
            unconfirmed: false,
        });
        match (val, &mut e.val) {
            (Some(v), Some(buf)) => {
                buf.clear();
                buf.extend_from_slice(v);
            }
            (Some(v), slot) => *slot = Some(v.to_vec()),
            (None, slot) => *slot = None,
        }
        e.flow_hash = flow_hash;
        e.used_ns = now_ns;
        e.blocked = false;
        if dirty && !e.dirty {
            if self.pending == 0 {
                self.oldest_pending_ns = now_ns;
            }
            self.pending += 1;
            self.dirty_keys.push(key);
        }
        if !dirty && e.dirty {
            self.pending -= 1;
        }
        e.dirty = dirty;
    }

    fn make_room(&mut self, now_ns: u64) {
        if self.map.len() < self.cfg.max_entries {
            return;
        }
        let before = self.map.len();
        let idle = self.cfg.idle_ns;
        self.map
            .retain(|_, e| e.dirty || now_ns.saturating_sub(e.used_ns) < idle / 2);
        if self.map.len() >= self.cfg.max_entries * 9 / 10 {
            self.map.retain(|_, e| e.dirty);
        }
        self.stats.evictions += (before - self.map.len()) as u64;
        self.gen += 1;
    }

    /// A store-bound operation on `key`: its deferred value (if any) goes first so
    /// the store sees writes in order; a write also evicts and blocks the key.
    fn store_bound(&mut self, key: &Key, is_write: bool, now_ns: u64) {
        let had_fill = is_write && self.fills.remove(key).is_some();
        match self.map.get_mut(key) {
            Some(e) => {
                if e.dirty {
                    e.dirty = false;
                    self.pending -= 1;
                    match &e.val {
                        Some(v) => self.fwd.put(*key, v),
                        None => self.fwd.delete(*key),
                    };
                    self.stats.deferred_flushed += 1;
                    self.in_flight += 1;
                }
                if is_write {
                    e.blocked = true;
                    e.val = None;
                    e.used_ns = now_ns;
                    self.stats.evictions += 1;
                }
            }
            None if had_fill => {
                self.map.insert(
                    *key,
                    Entry {
                        val: None,
                        flow_hash: 0,
                        used_ns: now_ns,
                        dirty: false,
                        blocked: true,
                        unconfirmed: false,
                    },
                );
            }
            None => {}
        }
    }

    /// `execute` under the lease `own` (taken out of `self` for the call).
    fn execute_owned(
        &mut self,
        own: &Ownership,
        store: &mut dyn StateStore,
        ops: &mut Ops,
        now: u64,
    ) -> Result<(), StoreError> {
        let c = self;
        let defer_ok = now.saturating_add(c.cfg.max_defer_ns) < own.valid_until_ns;
        c.fwd.clear();
        c.fwd_map.clear();
        c.fills.clear();
        c.cas_posts.clear();
        if c.pf_started
            && ops
                .ops()
                .iter()
                .any(|op| matches!(op, Op::Get { key } if c.pf_keys.contains(key)))
        {
            // What this call reads is on its way: take it rather than read twice.
            c.finish_prefetch_under(store, now, Some(own.epoch))?;
        }
        for i in 0..ops.len() {
            let op = ops.ops()[i];
            if !matches!(op, Op::Get { .. }) {
                // Whatever this does to the key is newer than the prefetch's result.
                if c.pf_started {
                    c.pf_keys.remove(op.key());
                }
                if !c.oneshot.is_empty() {
                    c.oneshot.remove(op.key());
                }
            }
            let owned = match ops.hint(i) {
                Hint::Owned { flow_hash } if own.covers(flow_hash) => {
                    Some((flow_hash, Mode::Through))
                }
                Hint::Deferred { flow_hash } if own.covers(flow_hash) => Some((
                    flow_hash,
                    if defer_ok { Mode::Defer } else { Mode::Through },
                )),
                Hint::Unacked { flow_hash } if own.covers(flow_hash) => Some((
                    flow_hash,
                    if defer_ok {
                        Mode::Unacked
                    } else {
                        Mode::Through
                    },
                )),
                Hint::Present { flow_hash } if own.covers(flow_hash) => {
                    Some((flow_hash, Mode::Present))
                }
                _ => None,
            };
            match (op, owned) {
                (Op::Get { key }, Some((_, mode))) => {
                    let present_only = mode == Mode::Present;
                    let idle_ns = c.cfg.idle_ns;
                    // One lookup for a hit (most reads of an owned flow).
                    let (hit, stale) = match c.map.get_mut(&key) {
                        Some(e) if !e.blocked && now.saturating_sub(e.used_ns) < idle_ns => {
                            let hit = !present_only || e.val.is_some();
                            if hit {
                                e.used_ns = now;
                                ops.set_value(i, e.val.as_deref());
                            }
                            (hit, false)
                        }
                        Some(e) => (false, !e.blocked),
                        None => (false, false),
                    };
                    if stale {
                        // Idle too long: read through (after its own deferred
                        // value, if it still has one).
                        c.store_bound(&key, false, now);
                        c.map.remove(&key);
                        c.gen += 1;
                        c.stats.evictions += 1;
                    }
                    if hit {
                        c.stats.hits += 1;
                    } else if let Some(v) = c
                        .oneshot
                        .remove(&key)
                        .filter(|v| !present_only || v.is_some())
                    {
                        ops.set_value(i, v.as_deref());
                        c.stats.oneshot_hits += 1;
                    } else {
                        c.stats.misses += 1;
                        // A deferred value of the key goes first (a present-only
                        // read may miss on an entry the owner holds).
                        c.store_bound(&key, false, now);
                        let j = c.fwd.push_copy(ops, i);
                        c.fwd_map.push((j.index() as u32, i as u32));
                        c.fills.insert(key, i as u32);
                    }
                }
                (Op::Put { key, val }, Some((flow_hash, mode))) => {
                    if !c.fills.is_empty() {
                        c.fills.remove(&key);
                    }
                    let held = matches!(mode, Mode::Defer | Mode::Unacked);
                    c.write(key, Some(ops.arg(val)), flow_hash, now, held);
                    if mode == Mode::Unacked {
                        // Held like a deferred write, but sent at the latest by
                        // `flush_due` at the end of this batch, before it leaves:
                        // one send for every function of the chain.
                        c.stats.unacked += 1;
                        c.urgent = true;
                        ops.set_result(i, OpResult::Done);
                    } else if held {
                        c.stats.deferred += 1;
                        ops.set_result(i, OpResult::Done);
                    } else {
                        c.stats.write_through += 1;
                        let j = c.fwd.push_copy(ops, i);
                        c.fwd_map.push((j.index() as u32, i as u32));
                    }
                }
                (Op::Delete { key }, Some((flow_hash, _))) => {
                    c.fills.remove(&key);
                    c.write(key, None, flow_hash, now, false);
                    c.stats.write_through += 1;
                    let j = c.fwd.push_copy(ops, i);
                    c.fwd_map.push((j.index() as u32, i as u32));
                }
                (Op::CompareAndSet { key, expected, new }, Some((flow_hash, _)))
                    if c.pipelined
                        && c.map.get(&key).is_some_and(|e| {
                            c.fresh(e, now)
                                && e.flow_hash == flow_hash
                                && e.val.as_deref() == expected.map(|s| ops.arg(s))
                        }) =>
                {
                    // The owner's fresh entry is what the store holds (only the
                    // owner writes it; a timer handler deletes it only once idle far
                    // longer than `idle_ns`), so the swap takes: decided here and
                    // sent as a plain write, which needs no answer.
                    let v = new.map(|s| ops.arg(s).to_vec());
                    c.write(key, v.as_deref(), flow_hash, now, false);
                    match v {
                        Some(v) => c.fwd.put(key, &v),
                        None => c.fwd.delete(key),
                    };
                    ops.set_result(i, OpResult::Swapped(true));
                    c.stats.local_swaps += 1;
                }
                (Op::CompareAndSet { key, .. }, Some((flow_hash, _))) => {
                    // Always to the store, after the key's deferred value.
                    c.fills.remove(&key);
                    c.store_bound(&key, false, now);
                    c.stats.write_through += 1;
                    let j = c.fwd.push_copy(ops, i);
                    c.fwd_map.push((j.index() as u32, i as u32));
                    c.cas_posts.push((key, i as u32, flow_hash));
                }
                (op, _) => {
                    match op {
                        // Timers name a record's key but never change its value.
                        Op::ArmTimer { .. } | Op::CancelTimer { .. } => {}
                        Op::Get { key } => c.store_bound(&key, false, now),
                        op => c.store_bound(op.key(), true, now),
                    }
                    let j = c.fwd.push_copy(ops, i);
                    c.fwd_map.push((j.index() as u32, i as u32));
                }
            }
        }
        if c.fwd.is_empty() {
            // Due deferred writes go out without waiting, after the batch
            // (`flush_due`), never as a round trip of their own.
            c.stats.saved_round_trips += 1;
            return Ok(());
        }
        if c.pipelined
            && c.fills.is_empty()
            && c.cas_posts.is_empty()
            && (0..c.fwd.len()).all(|j| match c.fwd.ops()[j] {
                Op::Put { .. }
                | Op::Append { .. }
                | Op::Delete { .. }
                | Op::ArmTimer { .. }
                | Op::CancelTimer { .. }
                | Op::PoolFree { .. } => true,
                Op::Incr { .. } => c.fwd.hint(j) == Hint::NoReply,
                _ => false,
            })
        {
            // Nothing here needs an answer: held, in order, for the next prefetch; the
            // caller holds the batch until they are settled.
            for j in 0..c.fwd.len() {
                c.held.push_copy(&c.fwd, j);
            }
            c.stats.held += c.fwd.len() as u64;
            for &(_, i) in &c.fwd_map {
                ops.set_result(i as usize, OpResult::Done);
            }
            c.stats.saved_round_trips += 1;
            return Ok(());
        }
        c.before_wait_under(store, now, Some(own.epoch))?;
        // Deferred writes ride along once due (or when writes that must leave
        // with the batch wait anyway): sending every dirty entry with every round
        // trip costs the store one write per active flow per round trip. Appended
        // last: every earlier operation in this batch on a dirty key already sent
        // that key's value before itself.
        if c.urgent || c.due(now) {
            c.append_dirty();
        }
        c.send(store, Some(ops))?;
        if c.check_unacked(store) {
            // The round trip read every earlier reply on the connection.
            c.confirm();
        }
        let posts = std::mem::take(&mut c.cas_posts);
        for &(key, i, flow_hash) in &posts {
            let i = i as usize;
            if ops.swapped(OpId::at(i)) {
                let Op::CompareAndSet { new, .. } = ops.ops()[i] else {
                    continue;
                };
                let v = new.map(|s| ops.arg(s).to_vec());
                c.write(key, v.as_deref(), flow_hash, now, false);
            } else if c.map.get(&key).is_some_and(|e| !e.dirty) {
                // The store holds something else: read it through next time.
                c.map.remove(&key);
                c.stats.evictions += 1;
                c.gen += 1;
            }
        }
        c.cas_posts = posts;
        c.cas_posts.clear();
        let fills = std::mem::take(&mut c.fills);
        for (key, i) in &fills {
            let i = *i as usize;
            let (Hint::Owned { flow_hash }
            | Hint::Deferred { flow_hash }
            | Hint::Unacked { flow_hash }
            | Hint::Present { flow_hash }) = ops.hint(i)
            else {
                continue;
            };
            if c.map.get(key).is_some_and(|e| e.blocked || e.dirty) {
                continue;
            }
            let v = ops.value(OpId::at(i)).map(|v| v.to_vec());
            if v.is_none() && matches!(ops.hint(i), Hint::Present { .. }) {
                // Never "known absent": another instance may create it.
                continue;
            }
            if !c.map.contains_key(key) {
                c.make_room(now);
            }
            c.map.insert(
                *key,
                Entry {
                    val: v,
                    flow_hash,
                    used_ns: now,
                    dirty: false,
                    blocked: false,
                    unconfirmed: false,
                },
            );
        }
        c.fills = fills;
        c.fills.clear();
        Ok(())
    }
}

/// How the cache treats an owned operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// To the store, acknowledged before `execute` returns.
    Through,
    /// Held back (a deferred write).
    Defer,
    /// Sent before `execute` returns, acknowledgement read later.
    Unacked,
    /// A read served only from a present value.
    Present,
}

/// A [`FlowCache`] bound to a store for one call; see the module documentation.
pub struct CachedStore<'a> {
    cache: &'a mut FlowCache,
    inner: &'a mut dyn StateStore,
    now_ns: u64,
}

impl CachedStore<'_> {
    /// Sends deferred writes if they are due, without waiting for the store (call
    /// at the end of every batch: `execute` never makes a round trip just for
    /// them).
    pub fn flush_due(&mut self) -> Result<(), StoreError> {
        self.cache.flush_due(self.inner, self.now_ns)
    }
}

impl StateStore for CachedStore<'_> {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        let now = self.now_ns;
        let c = &mut *self.cache;
        c.check_lease(now);
        let Some(own) = c.own.take() else {
            // Nothing owned: nothing cached, nothing pending (but a prefetch or
            // held operations from before the lease ended may be).
            c.before_wait(self.inner, now)?;
            return self.inner.execute(ops);
        };
        let r = c.execute_owned(&own, self.inner, ops, now);
        c.own = Some(own);
        r
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        self.cache.check_lease(self.now_ns);
        // Held re-arms and refreshes reach the store before timers are taken, so
        // no handler sees a record older than the packets that already passed.
        self.cache.before_wait(self.inner, self.now_ns)?;
        self.inner.take_expired(ns, now_ns, max, out)
    }

    fn counters(&self) -> StoreCounters {
        self.inner.counters()
    }
    fn orders_across_keys(&self) -> bool {
        self.inner.orders_across_keys()
    }

    fn describe(&self) -> String {
        format!("cached({})", self.inner.describe())
    }
}

#[cfg(test)]
mod tests;
