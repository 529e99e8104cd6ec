use super::*;
use crate::LocalStore;

const NS: Namespace = Namespace(7);

fn k(i: u8) -> Key {
    Key::new(NS, 1, &[i])
}

fn cache_all() -> (FlowCache, LocalStore) {
    let mut c = FlowCache::new(CacheConfig::default());
    let mut s = LocalStore::new();
    c.set_ownership(Some(Ownership::all(1, u64::MAX)), &mut s, 0)
        .unwrap();
    (c, s)
}

fn get(c: &mut FlowCache, s: &mut LocalStore, now: u64, key: Key) -> Option<Vec<u8>> {
    let mut ops = Ops::new();
    let id = ops.get_owned(key, 5);
    c.bind(s, now).execute(&mut ops).unwrap();
    ops.value(id).map(|v| v.to_vec())
}

#[test]
fn split_matches_group_boundaries() {
    let r = hash_range_split(&[1, 1]);
    assert_eq!(
        r,
        vec![Some((0, 0x7fff_ffff)), Some((0x8000_0000, u32::MAX))]
    );
    let r = hash_range_split(&[1, 0, 3]);
    assert_eq!(r[1], None);
    assert_eq!(r[0].unwrap().0, 0);
    assert_eq!(r[2].unwrap().1, u32::MAX);
    assert_eq!(r[0].unwrap().1 + 1, r[2].unwrap().0);
}

#[test]
fn hits_need_no_round_trip_and_writes_go_through() {
    let (mut c, mut s) = cache_all();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"v1", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 10).execute(&mut ops).unwrap();
    assert_eq!(s.counters().writes, 1, "owned writes are written through");
    let rt = s.counters().round_trips;
    assert_eq!(get(&mut c, &mut s, 11, k(1)), Some(b"v1".to_vec()));
    assert_eq!(s.counters().round_trips, rt, "a hit makes no round trip");
    // A miss reads through and fills, absent included.
    assert_eq!(get(&mut c, &mut s, 12, k(2)), None);
    assert_eq!(get(&mut c, &mut s, 13, k(2)), None);
    assert_eq!(s.counters().round_trips, rt + 1);
    assert_eq!(c.stats().hits, 2);
}

#[test]
fn deferred_writes_ride_along_once_due_and_flush_when_due() {
    let (mut c, mut s) = cache_all();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 100).execute(&mut ops).unwrap();
    assert_eq!(s.counters().round_trips, 0);
    assert_eq!(get(&mut c, &mut s, 101, k(1)), Some(b"a".to_vec()));
    assert_eq!(c.pending(), 1);
    // Not due yet.
    c.flush_due(&mut s, 200).unwrap();
    assert_eq!(s.counters().writes, 0);
    // A round trip before it is due leaves it (each write costs the store).
    get(&mut c, &mut s, 300, k(9));
    assert_eq!(s.counters().writes, 0);
    assert_eq!(c.pending(), 1);
    // Once due, the next round trip carries it along.
    get(&mut c, &mut s, 100 + 1_000_000, k(8));
    assert_eq!(s.counters().writes, 1);
    assert_eq!(c.pending(), 0);
    let mut plain = Ops::new();
    let id = plain.get(k(1));
    s.execute(&mut plain).unwrap();
    assert_eq!(plain.value(id), Some(&b"a"[..]));
    // Due by age.
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"b", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 400).execute(&mut ops).unwrap();
    c.flush_due(&mut s, 400 + 1_000_000).unwrap();
    assert_eq!(s.counters().writes, 2);
}

#[test]
fn due_deferred_writes_are_sent_without_a_round_trip() {
    let (mut c, mut s) = cache_all();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Deferred { flow_hash: 5 });
    ops.put_hinted(k(2), b"b", Hint::Deferred { flow_hash: 6 });
    c.bind(&mut s, 100).execute(&mut ops).unwrap();
    c.flush_due(&mut s, 100 + 1_000_000).unwrap();
    assert_eq!(s.counters().writes, 2, "both reached the store");
    assert_eq!(s.counters().round_trips, 0, "and nobody waited for them");
    assert_eq!(c.stats().background_flushes, 1);
    assert_eq!(c.pending(), 0);
    // Still served from the cache afterwards.
    assert_eq!(
        get(&mut c, &mut s, 100 + 1_000_001, k(1)),
        Some(b"a".to_vec())
    );
    assert_eq!(s.counters().round_trips, 0);
}

#[test]
fn failed_background_flush_is_sent_again() {
    let mut c = FlowCache::new(CacheConfig::default());
    // Every write sent without waiting fails (the connection lost before
    // their replies were read).
    let mut s = Lagging {
        fail_all: true,
        ..Default::default()
    };
    c.set_ownership(Some(Ownership::all(1, u64::MAX)), &mut s, 0)
        .unwrap();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"v1", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 1).execute(&mut ops).unwrap();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"v2", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 2).execute(&mut ops).unwrap();
    c.flush_due(&mut s, 2 + 1_000_000).unwrap();
    // Lost on the way: the packets that made it have left, so the cache keeps
    // the value and queues it again.
    assert_eq!(c.stats().resent, 1);
    assert_eq!(c.pending(), 1);
    let mut ops = Ops::new();
    ops.get_owned(k(2), 5);
    c.bind(&mut s, 3 + 1_000_000).execute(&mut ops).unwrap();
    // That round trip carried it along.
    assert_eq!(c.pending(), 0);
    let mut plain = Ops::new();
    let id = plain.get(k(1));
    s.inner.execute(&mut plain).unwrap();
    assert_eq!(plain.value(id), Some(&b"v2"[..]));
}

#[test]
fn store_bound_write_evicts_and_blocks_refill() {
    let (mut c, mut s) = cache_all();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 1).execute(&mut ops).unwrap();
    // A timer handler deletes it through the store, unhinted.
    let mut ops = Ops::new();
    let g = ops.get(k(1));
    ops.delete(k(1));
    c.bind(&mut s, 2).execute(&mut ops).unwrap();
    assert_eq!(ops.value(g), Some(&b"a"[..]), "deferred value sent first");
    assert_eq!(get(&mut c, &mut s, 3, k(1)), None);
    // Another instance writes it; the blocked key is read through, not filled.
    let mut ops = Ops::new();
    ops.put(k(1), b"z");
    s.execute(&mut ops).unwrap();
    assert_eq!(get(&mut c, &mut s, 4, k(1)), Some(b"z".to_vec()));
    assert_eq!(c.stats().hits, 0);
}

#[test]
fn idle_entries_and_foreign_hashes_read_through() {
    let mut c = FlowCache::new(CacheConfig {
        idle_ns: 100,
        ..CacheConfig::default()
    });
    let mut s = LocalStore::new();
    let own = Ownership {
        epoch: 1,
        ranges: vec![(0, 9)],
        valid_until_ns: u64::MAX,
    };
    c.set_ownership(Some(own), &mut s, 0).unwrap();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Owned { flow_hash: 5 });
    ops.put_hinted(k(2), b"b", Hint::Owned { flow_hash: 50 });
    c.bind(&mut s, 1).execute(&mut ops).unwrap();
    assert_eq!(c.len(), 1, "hash 50 is not owned");
    let rt = s.counters().round_trips;
    get(&mut c, &mut s, 50, k(1));
    assert_eq!(s.counters().round_trips, rt);
    get(&mut c, &mut s, 500, k(1));
    assert_eq!(s.counters().round_trips, rt + 1, "idle entry not served");
}

#[test]
fn present_reads_never_cache_absence() {
    let (mut c, mut s) = cache_all();
    let read = |c: &mut FlowCache, s: &mut LocalStore, now: u64| {
        let mut ops = Ops::new();
        let id = ops.get_present(k(1), 5);
        c.bind(s, now).execute(&mut ops).unwrap();
        ops.value(id).map(|v| v.to_vec())
    };
    assert_eq!(read(&mut c, &mut s, 1), None);
    // Another instance creates the record: the next read must see it.
    let mut ops = Ops::new();
    ops.put(k(1), b"m");
    s.execute(&mut ops).unwrap();
    let rt = s.counters().round_trips;
    assert_eq!(read(&mut c, &mut s, 2), Some(b"m".to_vec()));
    assert_eq!(s.counters().round_trips, rt + 1, "absence was not cached");
    // Present values are served.
    assert_eq!(read(&mut c, &mut s, 3), Some(b"m".to_vec()));
    assert_eq!(s.counters().round_trips, rt + 1);
    // The owner's deferred refresh is served too, and reaches the store first
    // when a present-only read misses.
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"n", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 4).execute(&mut ops).unwrap();
    assert_eq!(read(&mut c, &mut s, 5), Some(b"n".to_vec()));
}

#[test]
fn owned_compare_and_set_goes_through_and_keeps_the_new_value() {
    let (mut c, mut s) = cache_all();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 1).execute(&mut ops).unwrap();
    // A deferred refresh, then a compare-and-set against it.
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"b", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 2).execute(&mut ops).unwrap();
    let mut ops = Ops::new();
    let cas = ops.compare_and_set_owned::<Raw>(k(1), Some(&Raw(b"b")), Some(&Raw(b"c")), 5);
    c.bind(&mut s, 3).execute(&mut ops).unwrap();
    assert!(
        ops.swapped(cas),
        "the deferred value reached the store first"
    );
    let rt = s.counters().round_trips;
    assert_eq!(get(&mut c, &mut s, 4, k(1)), Some(b"c".to_vec()));
    assert_eq!(s.counters().round_trips, rt, "kept in the cache");
    // A failed swap forgets the key.
    let mut plain = Ops::new();
    plain.put(k(1), b"z");
    s.execute(&mut plain).unwrap();
    let mut ops = Ops::new();
    let cas = ops.compare_and_set_owned::<Raw>(k(1), Some(&Raw(b"c")), Some(&Raw(b"d")), 5);
    c.bind(&mut s, 5).execute(&mut ops).unwrap();
    assert!(!ops.swapped(cas));
    assert_eq!(get(&mut c, &mut s, 6, k(1)), Some(b"z".to_vec()));
}

#[test]
fn unacked_writes_reach_the_store_without_a_round_trip() {
    let (mut c, mut s) = cache_all();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Unacked { flow_hash: 5 });
    ops.put_hinted(k(2), b"x", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 1).execute(&mut ops).unwrap();
    assert_eq!(s.counters().writes, 0, "held until the end of the batch");
    c.flush_due(&mut s, 1).unwrap();
    assert_eq!(s.counters().round_trips, 0);
    assert_eq!(
        s.counters().writes,
        2,
        "sent at once, with the deferred one"
    );
    assert_eq!(c.stats().unacked, 1);
    assert_eq!(c.pending(), 0);
    assert_eq!(get(&mut c, &mut s, 2, k(1)), Some(b"a".to_vec()));
    assert_eq!(s.counters().round_trips, 0);
    // A failed unacknowledged write is queued again.
    let mut c = FlowCache::new(CacheConfig::default());
    // Every write sent without waiting fails (the connection lost before
    // their replies were read).
    let mut s = Lagging {
        fail_all: true,
        ..Default::default()
    };
    c.set_ownership(Some(Ownership::all(1, u64::MAX)), &mut s, 0)
        .unwrap();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Unacked { flow_hash: 5 });
    c.bind(&mut s, 1).execute(&mut ops).unwrap();
    c.flush_due(&mut s, 1).unwrap();
    assert_eq!(
        c.stats().resent,
        1,
        "a failed unacknowledged write is sent again"
    );
    assert_eq!(c.pending(), 1);
    c.flush(&mut s, 2).unwrap();
    assert_eq!(c.pending(), 0);
    assert_eq!(s.inner.counters().writes, 1, "the value reached the store");
}

/// Raw bytes as a codec value (for compare-and-set tests).
struct Raw(&'static [u8]);

impl crate::Codec for Raw {
    fn encode(&self, w: &mut crate::Writer<'_>) {
        w.bytes(self.0);
    }
    fn decode(_: &mut crate::Reader<'_>) -> Result<Self, crate::DecodeError> {
        unreachable!()
    }
}

#[test]
fn lease_change_flushes_and_expiry_drops() {
    let (mut c, mut s) = cache_all();
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"a", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 1).execute(&mut ops).unwrap();
    c.set_ownership(None, &mut s, 2).unwrap();
    assert_eq!(s.counters().writes, 1, "revocation flushes first");
    assert!(c.is_empty());
    c.set_ownership(Some(Ownership::all(2, 100)), &mut s, 3)
        .unwrap();
    // Near the lease's end nothing is deferred.
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"b", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 50).execute(&mut ops).unwrap();
    assert_eq!(s.counters().writes, 2);
    get(&mut c, &mut s, 60, k(1));
    // Expired: not served, cache emptied.
    let rt = s.counters().round_trips;
    get(&mut c, &mut s, 100, k(1));
    assert_eq!(s.counters().round_trips, rt + 1);
    assert!(c.ownership().is_none());
}

/// A store with an ordered connection whose replies lag: writes sent without
/// waiting and started calls are applied only when something reads past
/// them (`finish`, a waiting call, `sync`), as on a real connection. Sends
/// without waiting can be made to fail (the next one, or all).
#[derive(Default)]
struct Lagging {
    inner: LocalStore,
    queue: Vec<Ops>,
    sent: u64,
    settled: u64,
    fail_next: bool,
    fail_all: bool,
    failed: u64,
    started: Option<usize>,
}

impl Lagging {
    fn drain(&mut self, upto: usize) {
        for mut q in self.queue.drain(..upto) {
            let _ = self.inner.execute(&mut q);
            self.settled += q.len() as u64;
        }
    }
    fn value(&mut self, key: Key) -> Option<Vec<u8>> {
        let mut ops = Ops::new();
        let id = ops.get(key);
        self.inner.execute(&mut ops).unwrap();
        ops.value(id).map(|v| v.to_vec())
    }
}

impl StateStore for Lagging {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        assert!(
            self.started.is_none(),
            "a call waited while one was started"
        );
        let n = self.queue.len();
        self.drain(n);
        self.inner.execute(ops)
    }
    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        self.sent += ops.len() as u64;
        if std::mem::take(&mut self.fail_next) || self.fail_all {
            self.failed += 1;
            self.settled += ops.len() as u64;
            return Ok(());
        }
        let mut q = Ops::new();
        for i in 0..ops.len() {
            q.push_copy(ops, i);
        }
        self.queue.push(q);
        Ok(())
    }
    fn start(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        assert!(self.started.is_none(), "one started call at a time");
        self.sent += ops.len() as u64;
        self.started = Some(self.queue.len());
        let mut q = Ops::new();
        for i in 0..ops.len() {
            q.push_copy(ops, i);
        }
        self.queue.push(q);
        Ok(())
    }
    fn finish(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        let Some(at) = self.started.take() else {
            return Ok(());
        };
        self.drain(at);
        let mut q = self.queue.remove(0);
        self.inner.execute(&mut q)?;
        self.settled += q.len() as u64;
        for i in 0..ops.len() {
            match q.result(OpId::at(i)) {
                OpResult::Value(Some(_)) => ops.set_value(i, q.value(OpId::at(i))),
                r => ops.set_result(i, r),
            }
        }
        Ok(())
    }
    fn poll_unacked(&mut self) -> Result<(u64, u64), StoreError> {
        Ok((self.sent, self.settled))
    }
    fn sync(&mut self) -> Result<(), StoreError> {
        assert!(self.started.is_none(), "sync while a call was started");
        let n = self.queue.len();
        self.drain(n);
        Ok(())
    }
    fn take_unacked_failures(&mut self) -> u64 {
        std::mem::take(&mut self.failed)
    }
    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        assert!(
            self.started.is_none(),
            "a call waited while one was started"
        );
        let n = self.queue.len();
        self.drain(n);
        self.inner.take_expired(ns, now_ns, max, out)
    }
    fn counters(&self) -> StoreCounters {
        self.inner.counters()
    }
    fn describe(&self) -> String {
        "lagging".into()
    }
}

fn pipelined() -> (FlowCache, Lagging) {
    let mut c = FlowCache::new(CacheConfig::default());
    let mut s = Lagging::default();
    c.set_ownership(Some(Ownership::all(1, u64::MAX)), &mut s, 0)
        .unwrap();
    c.set_pipelined(true, &mut s, 0).unwrap();
    (c, s)
}

#[test]
fn pipelined_writes_are_held_until_the_next_prefetch_and_settle_after_it() {
    let (mut c, mut s) = pipelined();
    // A new record and its timer: nothing needs an answer, nothing waits.
    let mut ops = Ops::new();
    ops.put_hinted(k(1), b"new", Hint::Owned { flow_hash: 5 });
    ops.arm_timer(k(1), 99);
    c.bind(&mut s, 10).execute(&mut ops).unwrap();
    assert_eq!(s.sent, 0, "held, not sent");
    assert_eq!(c.stats().held, 2);
    // The cache serves it meanwhile.
    let mut ops = Ops::new();
    let id = ops.get_owned(k(1), 5);
    c.bind(&mut s, 11).execute(&mut ops).unwrap();
    assert_eq!(ops.value(id), Some(&b"new"[..]));
    // The next prefetch carries it, ahead of its reads.
    let mut want = Ops::new();
    want.get_owned(k(2), 6);
    let mark = c.prefetch(&mut s, &want, 12).unwrap();
    assert_eq!(mark, 3, "two held operations and one read");
    assert!(c.settled(&mut s).unwrap() < mark, "not answered yet");
    assert_eq!(s.value(k(1)), None, "still on the wire");
    // Reading the prefetched key takes the prefetch's answer: known absent.
    let mut ops = Ops::new();
    let id = ops.get_owned(k(2), 6);
    c.bind(&mut s, 13).execute(&mut ops).unwrap();
    assert_eq!(ops.value(id), None);
    assert_eq!(c.stats().prefetch_fills, 1);
    assert!(
        c.settled(&mut s).unwrap() >= mark,
        "answered with the reads"
    );
    assert_eq!(s.value(k(1)), Some(b"new".to_vec()));
    let mut fired = Vec::new();
    s.inner.take_expired(NS, 100, 10, &mut fired).unwrap();
    assert_eq!(fired, vec![k(1)], "the held timer was armed");
}

#[test]
fn a_prefetched_result_never_overwrites_a_newer_write() {
    let (mut c, mut s) = pipelined();
    let mut want = Ops::new();
    want.get_owned(k(3), 5);
    want.get_owned(k(4), 5);
    // k(4) exists in the store with an old value.
    let mut seed = Ops::new();
    seed.put(k(4), b"old");
    s.inner.execute(&mut seed).unwrap();
    c.prefetch(&mut s, &want, 10).unwrap();
    // The owner writes both keys while the prefetch is in flight.
    let mut ops = Ops::new();
    ops.put_hinted(k(3), b"mine", Hint::Owned { flow_hash: 5 });
    ops.put_hinted(k(4), b"mine", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 11).execute(&mut ops).unwrap();
    c.wait_settled(&mut s, 12).unwrap();
    for key in [k(3), k(4)] {
        assert_eq!(get_from(&mut c, &mut s, 13, key), Some(b"mine".to_vec()));
        assert_eq!(s.value(key), Some(b"mine".to_vec()));
    }
    assert_eq!(c.stats().prefetch_fills, 0);
}

fn get_from(c: &mut FlowCache, s: &mut Lagging, now: u64, key: Key) -> Option<Vec<u8>> {
    let mut ops = Ops::new();
    let id = ops.get_owned(key, 5);
    c.bind(s, now).execute(&mut ops).unwrap();
    ops.value(id).map(|v| v.to_vec())
}

#[test]
fn an_answer_needed_sends_what_is_held_first() {
    let (mut c, mut s) = pipelined();
    let mut ops = Ops::new();
    ops.put_hinted(k(5), b"1", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 10).execute(&mut ops).unwrap();
    // A store-bound read of the same key must see the held write.
    let mut ops = Ops::new();
    let id = ops.get(k(5));
    c.bind(&mut s, 11).execute(&mut ops).unwrap();
    assert_eq!(ops.value(id), Some(&b"1"[..]));
    // Timers are taken only after held re-arms reached the store.
    let mut ops = Ops::new();
    ops.arm_timer(k(6), 5);
    c.bind(&mut s, 12).execute(&mut ops).unwrap();
    let mut out = Vec::new();
    c.bind(&mut s, 13)
        .take_expired(NS, 100, 10, &mut out)
        .unwrap();
    assert_eq!(out, vec![k(6)]);
}

#[test]
fn a_failed_held_send_is_reported_and_empties_the_cache() {
    let (mut c, mut s) = pipelined();
    let mut ops = Ops::new();
    ops.put_hinted(k(7), b"1", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 10).execute(&mut ops).unwrap();
    // Sent without waiting through the barrier of a store-bound call, and lost.
    s.fail_next = true;
    let mut ops = Ops::new();
    ops.get(k(8));
    c.bind(&mut s, 11).execute(&mut ops).unwrap();
    assert!(
        c.settled(&mut s).is_err(),
        "the batches held on it must not leave"
    );
    assert!(c.settled(&mut s).is_ok(), "reported once");
    assert!(c.is_empty(), "what reached the store is unknown");
    assert_eq!(s.value(k(7)), None);
}

#[test]
fn an_expired_lease_drops_held_writes_and_fails_their_batches() {
    let mut c = FlowCache::new(CacheConfig::default());
    let mut s = Lagging::default();
    c.set_ownership(Some(Ownership::all(1, 100)), &mut s, 0)
        .unwrap();
    c.set_pipelined(true, &mut s, 0).unwrap();
    let mut ops = Ops::new();
    ops.put_hinted(k(9), b"1", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 10).execute(&mut ops).unwrap();
    // The lease ends before they were sent: another instance may own the
    // range now, so they must never be written.
    c.prefetch(&mut s, &Ops::new(), 200).unwrap();
    assert!(c.settled(&mut s).is_err());
    c.wait_settled(&mut s, 201).unwrap();
    assert_eq!(s.value(k(9)), None);
}

#[test]
fn pipelined_owned_claims_and_unread_counters_need_no_round_trip() {
    let (mut c, mut s) = pipelined();
    // Known absent (the prefetch said so): the claim is decided here.
    let mut want = Ops::new();
    want.get_owned(k(10), 5);
    c.prefetch(&mut s, &want, 10).unwrap();
    let mut ops = Ops::new();
    let g = ops.get_owned(k(10), 5);
    c.bind(&mut s, 11).execute(&mut ops).unwrap();
    assert_eq!(ops.value(g), None);
    let sent = s.sent;
    let mut ops = Ops::new();
    let cas = ops.compare_and_set_owned(k(10), None, Some(&Raw(b"c")), 5);
    ops.incr_no_reply(k(11), 1);
    ops.arm_timer(k(10), 50);
    c.bind(&mut s, 12).execute(&mut ops).unwrap();
    assert!(ops.swapped(cas));
    assert_eq!(s.sent, sent, "nothing sent: held");
    assert_eq!(c.stats().local_swaps, 1);
    c.wait_settled(&mut s, 13).unwrap();
    let mut check = Ops::new();
    let n = check.incr(k(11), 0);
    s.inner.execute(&mut check).unwrap();
    assert_eq!(check.counter(n), 1, "the load change reached the store");
    assert!(
        s.value(k(10)).is_some(),
        "the claimed record reached the store"
    );
    // A claim the cache cannot vouch for (expected value differs from the
    // entry) goes to the store and waits.
    let mut ops = Ops::new();
    let cas = ops.compare_and_set_owned(k(10), None, Some(&Raw(b"d")), 5);
    c.bind(&mut s, 14).execute(&mut ops).unwrap();
    assert!(!ops.swapped(cas), "the store holds a record already");
    assert_eq!(c.stats().local_swaps, 1);
    // A counter whose value is read always waits.
    let mut ops = Ops::new();
    let n = ops.incr(k(11), 0);
    c.bind(&mut s, 15).execute(&mut ops).unwrap();
    assert_eq!(ops.counter(n), 1);
}

#[test]
fn a_blocked_key_is_prefetched_for_one_read_only() {
    let (mut c, mut s) = pipelined();
    // A store-bound write to a cached key blocks it: it is never cached again
    // until the owner writes it with a hint.
    let mut ops = Ops::new();
    ops.put_hinted(k(12), b"open", Hint::Owned { flow_hash: 5 });
    ops.put(k(12), b"closed");
    c.bind(&mut s, 10).execute(&mut ops).unwrap();
    c.wait_settled(&mut s, 11).unwrap();
    let mut want = Ops::new();
    want.get_owned(k(12), 5);
    c.prefetch(&mut s, &want, 12).unwrap();
    let reads = |c: &mut FlowCache, s: &mut Lagging, now| {
        let mut ops = Ops::new();
        let g = ops.get_owned(k(12), 5);
        c.bind(s, now).execute(&mut ops).unwrap();
        ops.value(g).map(|v| v.to_vec())
    };
    // The prefetch's answer serves the first read (the call finishes the
    // prefetch) without a read of its own...
    let misses = c.stats().misses;
    assert_eq!(reads(&mut c, &mut s, 13), Some(b"closed".to_vec()));
    assert_eq!(c.stats().oneshot_hits, 1);
    assert_eq!(c.stats().misses, misses);
    // ...and only that one: the next read goes to the store.
    assert_eq!(reads(&mut c, &mut s, 14), Some(b"closed".to_vec()));
    assert_eq!(c.stats().misses, misses + 1);
    // As a pipeline runs: the next window's prefetch starts (finishing this
    // one) before this window's reads; the answer is kept for them.
    c.prefetch(&mut s, &want, 15).unwrap();
    c.prefetch(&mut s, &Ops::new(), 15).unwrap();
    assert_eq!(reads(&mut c, &mut s, 15), Some(b"closed".to_vec()));
    assert_eq!(c.stats().oneshot_hits, 2);
    // A write after the prefetch makes its answer worthless.
    c.prefetch(&mut s, &want, 15).unwrap();
    let mut ops = Ops::new();
    ops.put(k(12), b"exported");
    c.bind(&mut s, 16).execute(&mut ops).unwrap();
    assert_eq!(reads(&mut c, &mut s, 17), Some(b"exported".to_vec()));
    assert_eq!(c.stats().oneshot_hits, 2);
}

#[test]
fn due_deferred_writes_never_overtake_held_ones() {
    // A new record is written through (held, pipelined), then counted with
    // deferred writes that fall due before the next prefetch: the store must
    // end with the newest value, not the held older one sent after it.
    let (mut c, mut s) = pipelined();
    let mut ops = Ops::new();
    ops.put_hinted(k(8), b"created", Hint::Owned { flow_hash: 5 });
    c.bind(&mut s, 10).execute(&mut ops).unwrap();
    let mut ops = Ops::new();
    ops.put_hinted(k(8), b"counted", Hint::Deferred { flow_hash: 5 });
    c.bind(&mut s, 11).execute(&mut ops).unwrap();
    let late = 11 + c.config().max_defer_ns;
    c.flush_due(&mut s, late).unwrap();
    let mark = c.prefetch(&mut s, &Ops::new(), late).unwrap();
    c.wait_settled(&mut s, late).unwrap();
    assert!(c.settled(&mut s).unwrap() >= mark);
    assert_eq!(s.value(k(8)), Some(b"counted".to_vec()));
    // Read back through the store once the entry went idle.
    let idle = late + c.config().idle_ns;
    assert_eq!(
        get_from(&mut c, &mut s, idle, k(8)),
        Some(b"counted".to_vec())
    );
}
