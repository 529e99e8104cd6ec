//! Timing of the instance's store round trips.
//!
//! [`TimedStore`] sits between the chain and whatever store the instance
//! opened, and records how long each call that waits for the store's replies
//! took in a [`LatencyHistogram`] the heartbeats carry to the agent. Timing
//! at this seam measures every backend alike (a Redis pipeline, a cluster's
//! fan-out over its shards, the in-process store) with one clock read before
//! and one after each round trip, never one per operation or packet.

use std::time::Instant;

use sluice_proto::LatencyHistogram;
use sluice_state::{Key, Namespace, Ops, StateStore, StoreCounters, StoreError};

/// A store whose round trips are timed (see the module documentation).
pub struct TimedStore<S> {
    inner: S,
    clock: fn() -> Instant,
    /// When the call begun with [`StateStore::start`] was sent.
    started: Option<Instant>,
    /// The round trips so far: `execute` and `take_expired` calls that carried
    /// work, and `start`..`finish` pairs. A started call's time runs until its
    /// replies were taken, so it includes the work the caller overlapped with
    /// it: it is how long the batch that needed them could not leave without
    /// them, at most.
    pub round_trips: LatencyHistogram,
}

impl<S> TimedStore<S> {
    /// Times `inner`'s round trips on the monotonic clock.
    pub fn new(inner: S) -> TimedStore<S> {
        TimedStore::with_clock(inner, Instant::now)
    }

    /// Times `inner`'s round trips on `clock` (tests give a simulated one).
    pub fn with_clock(inner: S, clock: fn() -> Instant) -> TimedStore<S> {
        TimedStore {
            inner,
            clock,
            started: None,
            round_trips: LatencyHistogram::default(),
        }
    }

    fn observe_since(&mut self, t0: Instant) {
        let ns = (self.clock)().saturating_duration_since(t0).as_nanos();
        self.round_trips
            .observe(u64::try_from(ns).unwrap_or(u64::MAX), 1);
    }
}

impl<S: StateStore> StateStore for TimedStore<S> {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return self.inner.execute(ops);
        }
        let t0 = (self.clock)();
        let r = self.inner.execute(ops);
        self.observe_since(t0);
        r
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        let t0 = (self.clock)();
        let r = self.inner.take_expired(ns, now_ns, max, out);
        self.observe_since(t0);
        r
    }

    fn counters(&self) -> StoreCounters {
        self.inner.counters()
    }
    fn orders_across_keys(&self) -> bool {
        self.inner.orders_across_keys()
    }

    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        // Nothing waits for these replies: no round trip anyone sees.
        self.inner.execute_unacked(ops)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.inner.sync()
    }

    fn take_unacked_failures(&mut self) -> u64 {
        self.inner.take_unacked_failures()
    }

    fn start(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if !ops.is_empty() {
            self.started = Some((self.clock)());
        }
        self.inner.start(ops)
    }

    fn finish(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        let r = self.inner.finish(ops);
        if let Some(t0) = self.started.take() {
            self.observe_since(t0);
        }
        r
    }

    fn poll_unacked(&mut self) -> Result<(u64, u64), StoreError> {
        self.inner.poll_unacked()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_state::LocalStore;
    use std::cell::Cell;
    use std::sync::OnceLock;
    use std::time::Duration;

    thread_local! {
        static READS: Cell<u32> = const { Cell::new(0) };
    }

    /// A clock that advances 30 µs at every read: every round trip takes
    /// 30 µs (the 25-50 µs bucket), whatever the machine does.
    fn stepping() -> Instant {
        static BASE: OnceLock<Instant> = OnceLock::new();
        let n = READS.with(|r| {
            r.set(r.get() + 1);
            r.get()
        });
        *BASE.get_or_init(Instant::now) + Duration::from_micros(30) * n
    }

    fn some_ops() -> Ops {
        let mut ops = Ops::new();
        ops.get(Key::new(Namespace(1), 0, &[1, 2, 3]));
        ops
    }

    #[test]
    fn every_waiting_round_trip_is_one_observation_of_its_time() {
        let mut s = TimedStore::with_clock(LocalStore::new(), stepping);
        let mut ops = some_ops();
        s.execute(&mut ops).unwrap();
        s.execute(&mut Ops::new()).unwrap();
        assert_eq!(s.round_trips.count(), 1, "an empty call is no round trip");
        let mut out = Vec::new();
        s.take_expired(Namespace(1), 0, 8, &mut out).unwrap();
        // Sent now, replies taken later: one round trip, not two.
        s.start(&mut ops).unwrap();
        s.finish(&mut ops).unwrap();
        // Nothing started: nothing to time.
        s.finish(&mut ops).unwrap();
        s.execute_unacked(&mut ops).unwrap();
        assert_eq!(s.round_trips.count(), 3);
        assert_eq!(
            s.round_trips.counts[2], 3,
            "each 30 µs: {:?}",
            s.round_trips
        );
        assert_eq!(s.round_trips.sum_ns, 90_000);
        assert_eq!(s.counters(), s.inner.counters());
    }
}
