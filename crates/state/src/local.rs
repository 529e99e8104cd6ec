use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use crate::key::{Key, Namespace};
use crate::ops::{Op, OpResult, Ops};
use crate::{StateStore, StoreCounters, StoreError};

/// Keys and values up to this many bytes are stored inline in the table, without a
/// heap allocation: every IPv4 flow key and the firewall, NAT and LB records fit.
/// Both are held as [`Val`] (32 bytes) rather than the 49-byte [`Key`], which keeps a
/// million-flow firewall table within its memory budget.
const INLINE: usize = 30;

/// The hash a stored key's bytes had as a [`Key`], for rehashing: lookups use
/// the key's own ([`Key::table_hash`], computed when it was built) rather than
/// hashing its bytes again per operation.
fn hash_bytes(b: &[u8]) -> u64 {
    Key::hash_bytes(b)
}

/// A timer: its key and deadline, held once in a slab that the index and the
/// deadline order refer to by position.
struct TimerSlot {
    key: Val,
    deadline: u64,
}

#[derive(Clone)]
enum Val {
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    /// A `Vec` rather than a boxed slice: a value that grows by appends
    /// ([`Op::Append`]) grows in place, amortised, instead of being copied
    /// whole into a new allocation per append.
    Heap(Vec<u8>),
}

impl Val {
    fn new(b: &[u8]) -> Val {
        if b.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            Val::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Val::Heap(b.to_vec())
        }
    }
    fn get(&self) -> &[u8] {
        match self {
            Val::Inline { len, bytes } => &bytes[..*len as usize],
            Val::Heap(b) => b,
        }
    }
    fn set(&mut self, b: &[u8]) {
        match self {
            Val::Inline { len, bytes } if b.len() <= INLINE => {
                bytes[..b.len()].copy_from_slice(b);
                *len = b.len() as u8;
            }
            // Records are usually rewritten at the same size: reuse the
            // allocation (or the larger one a growing value has, unless
            // more than half of it would sit idle).
            Val::Heap(h) if h.capacity() >= b.len() && h.capacity() / 2 <= b.len() => {
                h.clear();
                h.extend_from_slice(b);
            }
            _ => *self = Val::new(b),
        }
    }
    fn append(&mut self, b: &[u8]) {
        match self {
            Val::Heap(h) => h.extend_from_slice(b),
            Val::Inline { len, bytes } if *len as usize + b.len() <= INLINE => {
                bytes[*len as usize..*len as usize + b.len()].copy_from_slice(b);
                *len += b.len() as u8;
            }
            Val::Inline { len, bytes } => {
                let mut h = Vec::with_capacity(*len as usize + b.len());
                h.extend_from_slice(&bytes[..*len as usize]);
                h.extend_from_slice(b);
                *self = Val::Heap(h);
            }
        }
    }
}

struct Pool {
    /// Items never handed out yet are `next..size`; freed items queue in `freed`.
    next: u64,
    size: u64,
    freed: VecDeque<u64>,
    /// Members of `freed`, so a double free is caught in O(1).
    freed_set: rustc_hash::FxHashSet<u64>,
}

impl Pool {
    /// Never-used items first, then the least recently freed.
    fn take_one(&mut self) -> Option<u64> {
        if self.next < self.size {
            self.next += 1;
            return Some(self.next - 1);
        }
        let it = self.freed.pop_front()?;
        self.freed_set.remove(&it);
        Some(it)
    }
}

/// The in-process backend: a hash table, counters, pools and a timer wheel in this
/// process's memory. This is the "traditional NF" baseline of StatelessNF's
/// evaluation, and the store of the offline runner.
#[derive(Default)]
pub struct LocalStore {
    kv: HashTable<(Val, Val)>,
    counters_kv: FxHashMap<Key, i64>,
    pools: FxHashMap<Key, Pool>,
    slab: Vec<TimerSlot>,
    free_slots: Vec<u32>,
    timer_index: HashTable<u32>,
    deadlines: BTreeSet<(u32, u64, u32)>,
    counters: StoreCounters,
}

impl LocalStore {
    /// An empty store.
    pub fn new() -> Self {
        LocalStore::default()
    }

    /// Number of stored values (not counters, pools or timers).
    pub fn len(&self) -> usize {
        self.kv.len()
    }

    /// True if no values are stored.
    pub fn is_empty(&self) -> bool {
        self.kv.is_empty()
    }

    /// Number of armed timers.
    pub fn armed_timers(&self) -> usize {
        self.timer_index.len()
    }

    /// Approximate bytes of memory held by stored values, their table and the
    /// timers (allocated capacity, not just what is in use).
    pub fn approx_memory(&self) -> usize {
        let heap = |v: &Val| match v {
            Val::Heap(b) => b.capacity(),
            Val::Inline { .. } => 0,
        };
        let kv_heap: usize = self.kv.iter().map(|(k, v)| heap(k) + heap(v)).sum();
        // hashbrown allocates a power of two of buckets (capacity is 7/8 of them),
        // each a slot plus one control byte.
        let buckets = |cap: usize| {
            if cap == 0 {
                0
            } else {
                (cap * 8 / 7).next_power_of_two()
            }
        };
        let kv = buckets(self.kv.capacity()) * (core::mem::size_of::<(Val, Val)>() + 1);
        let timers = self.slab.capacity() * core::mem::size_of::<TimerSlot>()
            + buckets(self.timer_index.capacity()) * 5
            // B-tree nodes hold 11 entries of 16 bytes and are about 2/3 full.
            + self.deadlines.len() * 24;
        kv + kv_heap + timers
    }

    fn kv_find(&self, key: &Key) -> Option<&Val> {
        let b = key.as_bytes();
        self.kv
            .find(key.table_hash(), |(k, _)| k.get() == b)
            .map(|(_, v)| v)
    }

    fn kv_set(&mut self, key: &Key, val: &[u8]) {
        let b = key.as_bytes();
        let h = key.table_hash();
        match self.kv.find_mut(h, |(k, _)| k.get() == b) {
            Some((_, v)) => v.set(val),
            None => {
                self.kv
                    .insert_unique(h, (Val::new(b), Val::new(val)), |(k, _)| {
                        hash_bytes(k.get())
                    });
            }
        }
    }

    fn kv_append(&mut self, key: &Key, val: &[u8]) {
        let b = key.as_bytes();
        let h = key.table_hash();
        match self.kv.find_mut(h, |(k, _)| k.get() == b) {
            Some((_, v)) => v.append(val),
            None => self.kv_set(key, val),
        }
    }

    fn kv_remove(&mut self, key: &Key) {
        let b = key.as_bytes();
        if let Ok(e) = self.kv.find_entry(key.table_hash(), |(k, _)| k.get() == b) {
            e.remove();
        }
    }

    fn timer_find(&self, key: &Key) -> Option<u32> {
        let b = key.as_bytes();
        let slab = &self.slab;
        self.timer_index
            .find(key.table_hash(), |&s| slab[s as usize].key.get() == b)
            .copied()
    }

    fn timer_arm(&mut self, key: &Key, deadline: u64) {
        let ns = key.namespace().0;
        if let Some(slot) = self.timer_find(key) {
            let old = self.slab[slot as usize].deadline;
            self.deadlines.remove(&(ns, old, slot));
            self.slab[slot as usize].deadline = deadline;
            self.deadlines.insert((ns, deadline, slot));
            return;
        }
        let t = TimerSlot {
            key: Val::new(key.as_bytes()),
            deadline,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slab[s as usize] = t;
                s
            }
            None => {
                self.slab.push(t);
                (self.slab.len() - 1) as u32
            }
        };
        let slab = &self.slab;
        self.timer_index
            .insert_unique(key.table_hash(), slot, |&s| {
                hash_bytes(slab[s as usize].key.get())
            });
        self.deadlines.insert((ns, deadline, slot));
    }

    /// Forgets the timer in `slot` (already removed from the deadline order).
    fn timer_release(&mut self, slot: u32) {
        let h = hash_bytes(self.slab[slot as usize].key.get());
        if let Ok(e) = self.timer_index.find_entry(h, |&s| s == slot) {
            e.remove();
        }
        self.slab[slot as usize].key = Val::new(&[]);
        self.free_slots.push(slot);
    }

    fn apply(&mut self, ops: &mut Ops) {
        for i in 0..ops.len() {
            let op = ops.ops()[i];
            match op {
                Op::Get { key } => {
                    self.counters.reads += 1;
                    // Split borrow: look up first, then copy into the result arena.
                    match self.kv_find(&key) {
                        Some(v) => {
                            let v = v.get();
                            ops.set_value_with(i, |out| {
                                out.extend_from_slice(v);
                                true
                            });
                        }
                        None => ops.set_value(i, None),
                    }
                }
                Op::Put { key, val } => {
                    self.counters.writes += 1;
                    self.kv_set(&key, ops.arg(val));
                    ops.set_result(i, OpResult::Done);
                }
                Op::Append { key, val } => {
                    self.counters.writes += 1;
                    self.kv_append(&key, ops.arg(val));
                    ops.set_result(i, OpResult::Done);
                }
                Op::Delete { key } => {
                    self.counters.writes += 1;
                    self.kv_remove(&key);
                    ops.set_result(i, OpResult::Done);
                }
                Op::CompareAndSet { key, expected, new } => {
                    self.counters.atomics += 1;
                    let cur = self.kv_find(&key).map(|v| v.get());
                    let exp = expected.map(|s| ops.arg(s));
                    let ok = cur == exp;
                    if ok {
                        match new {
                            Some(s) => self.kv_set(&key, ops.arg(s)),
                            None => self.kv_remove(&key),
                        }
                    }
                    ops.set_result(i, OpResult::Swapped(ok));
                }
                Op::Incr { key, delta } => {
                    self.counters.atomics += 1;
                    let c = self.counters_kv.entry(key).or_insert(0);
                    *c = c.wrapping_add(delta);
                    ops.set_result(i, OpResult::Counter(*c));
                }
                Op::PoolInit { pool, size } => {
                    self.counters.atomics += 1;
                    let created = !self.pools.contains_key(&pool);
                    if created {
                        self.pools.insert(
                            pool,
                            Pool {
                                next: 0,
                                size,
                                freed: VecDeque::new(),
                                freed_set: Default::default(),
                            },
                        );
                    }
                    ops.set_result(i, OpResult::Swapped(created));
                }
                Op::PoolAlloc { pool } => {
                    self.counters.atomics += 1;
                    let item = self.pools.get_mut(&pool).and_then(Pool::take_one);
                    ops.set_result(i, OpResult::Allocated(item));
                }
                Op::PoolTake { pool, n } => {
                    self.counters.atomics += 1;
                    let p = self.pools.get_mut(&pool);
                    let items = p
                        .into_iter()
                        .flat_map(|p| (0..n).map_while(move |_| p.take_one()));
                    ops.set_taken(i, items);
                }
                Op::PoolFree { pool, item } => {
                    self.counters.atomics += 1;
                    if let Some(p) = self.pools.get_mut(&pool) {
                        if item < p.next && p.freed_set.insert(item) {
                            p.freed.push_back(item);
                        }
                    }
                    ops.set_result(i, OpResult::Done);
                }
                Op::ArmTimer { key, deadline_ns } => {
                    self.counters.timers += 1;
                    self.timer_arm(&key, deadline_ns);
                    ops.set_result(i, OpResult::Done);
                }
                Op::CancelTimer { key } => {
                    self.counters.timers += 1;
                    if let Some(slot) = self.timer_find(&key) {
                        let d = self.slab[slot as usize].deadline;
                        self.deadlines.remove(&(key.namespace().0, d, slot));
                        self.timer_release(slot);
                    }
                    ops.set_result(i, OpResult::Done);
                }
            }
        }
    }
}

impl StateStore for LocalStore {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.counters.round_trips += 1;
        self.apply(ops);
        Ok(())
    }

    /// Applies `ops` at once but, like a remote store's send without waiting,
    /// counts no round trip: tests see what reached the store without one.
    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        self.apply(ops);
        Ok(())
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        self.counters.round_trips += 1;
        let mut taken = 0;
        while taken < max {
            let Some(&(n, d, slot)) = self.deadlines.range((ns.0, 0u64, 0u32)..).next() else {
                break;
            };
            if n != ns.0 || d > now_ns {
                break;
            }
            self.deadlines.remove(&(n, d, slot));
            if let Some(k) = Key::from_bytes(self.slab[slot as usize].key.get()) {
                out.push(k);
            }
            self.timer_release(slot);
            self.counters.timers += 1;
            taken += 1;
        }
        Ok(())
    }

    fn counters(&self) -> StoreCounters {
        self.counters
    }
    fn orders_across_keys(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        "local".into()
    }
}

/// A [`LocalStore`] shared by several function instances in one process, locked
/// once per batch (never per packet). Tests use it to show that instances sharing a
/// store behave as one, without a network store.
#[derive(Clone, Default)]
pub struct SharedLocalStore {
    inner: Arc<Mutex<LocalStore>>,
    counters: StoreCounters,
}

impl SharedLocalStore {
    /// A new, empty shared store.
    pub fn new() -> Self {
        SharedLocalStore::default()
    }

    /// A handle with its own counters onto the same store.
    pub fn handle(&self) -> Self {
        SharedLocalStore {
            inner: self.inner.clone(),
            counters: StoreCounters::default(),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, LocalStore>, StoreError> {
        self.inner
            .lock()
            .map_err(|_| StoreError::Unavailable("shared store lock poisoned".into()))
    }
}

impl StateStore for SharedLocalStore {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut s = self.lock()?;
        let before = s.counters;
        s.execute(ops)?;
        let d = s.counters.since(&before);
        drop(s);
        add(&mut self.counters, &d);
        Ok(())
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        let mut s = self.lock()?;
        let before = s.counters;
        s.take_expired(ns, now_ns, max, out)?;
        let d = s.counters.since(&before);
        drop(s);
        add(&mut self.counters, &d);
        Ok(())
    }

    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut s = self.lock()?;
        let before = s.counters;
        s.execute_unacked(ops)?;
        let d = s.counters.since(&before);
        drop(s);
        add(&mut self.counters, &d);
        Ok(())
    }

    fn counters(&self) -> StoreCounters {
        self.counters
    }
    fn orders_across_keys(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        "local-shared".into()
    }
}

fn add(a: &mut StoreCounters, d: &StoreCounters) {
    a.round_trips += d.round_trips;
    a.reads += d.reads;
    a.writes += d.writes;
    a.atomics += d.atomics;
    a.timers += d.timers;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(t: u8, p: &[u8]) -> Key {
        Key::new(Namespace(7), t, p)
    }

    #[test]
    fn get_put_delete_in_order() {
        let mut s = LocalStore::new();
        let mut ops = Ops::new();
        let g0 = ops.get(k(1, b"a"));
        ops.put(k(1, b"a"), b"v1");
        let g1 = ops.get(k(1, b"a"));
        ops.put(k(1, b"a"), &[9u8; 100]);
        let g2 = ops.get(k(1, b"a"));
        ops.delete(k(1, b"a"));
        let g3 = ops.get(k(1, b"a"));
        s.execute(&mut ops).unwrap();
        assert_eq!(ops.value(g0), None);
        assert_eq!(ops.value(g1), Some(&b"v1"[..]));
        assert_eq!(ops.value(g2), Some(&[9u8; 100][..]));
        assert_eq!(ops.value(g3), None);
        assert_eq!(s.counters().round_trips, 1);
        assert_eq!(s.counters().reads, 4);
    }

    #[test]
    fn append_extends_in_order_and_creates_absent_values() {
        let mut s = LocalStore::new();
        let mut ops = Ops::new();
        ops.append(k(1, b"a"), b"0123");
        let g0 = ops.get(k(1, b"a"));
        // Inline growth, then past the inline size onto the heap.
        ops.append(k(1, b"a"), &[b'x'; 20]);
        let g1 = ops.get(k(1, b"a"));
        ops.append(k(1, b"a"), &[b'y'; 100]);
        ops.append(k(1, b"a"), b"z");
        let g2 = ops.get(k(1, b"a"));
        // A put replaces what appends built; an append after a delete starts over.
        ops.put(k(1, b"a"), &[7u8; 90]);
        let g3 = ops.get(k(1, b"a"));
        ops.delete(k(1, b"a"));
        ops.append(k(1, b"a"), b"new");
        let g4 = ops.get(k(1, b"a"));
        s.execute(&mut ops).unwrap();
        assert_eq!(ops.value(g0), Some(&b"0123"[..]));
        let mut want = b"0123".to_vec();
        want.extend_from_slice(&[b'x'; 20]);
        assert_eq!(ops.value(g1), Some(&want[..]));
        want.extend_from_slice(&[b'y'; 100]);
        want.push(b'z');
        assert_eq!(ops.value(g2), Some(&want[..]));
        assert_eq!(ops.value(g3), Some(&[7u8; 90][..]));
        assert_eq!(ops.value(g4), Some(&b"new"[..]));
        assert_eq!(s.counters().writes, 7);
    }

    #[test]
    fn compare_and_set_and_counters() {
        let mut s = LocalStore::new();
        let mut ops = Ops::new();
        let a = ops.compare_and_set(k(2, b"x"), None, Some(&5u32));
        let b = ops.compare_and_set(k(2, b"x"), None, Some(&6u32));
        let c = ops.compare_and_set(k(2, b"x"), Some(&5u32), Some(&7u32));
        let g = ops.get(k(2, b"x"));
        let i1 = ops.incr(k(3, b"c"), 5);
        let i2 = ops.incr(k(3, b"c"), -2);
        s.execute(&mut ops).unwrap();
        assert!(ops.swapped(a) && !ops.swapped(b) && ops.swapped(c));
        assert_eq!(ops.decode::<u32>(g).unwrap(), Some(7));
        assert_eq!((ops.counter(i1), ops.counter(i2)), (5, 3));
    }

    #[test]
    fn pools_hand_out_each_item_once_and_reuse_least_recent() {
        let mut s = LocalStore::new();
        let mut ops = Ops::new();
        let p = k(4, b"pool");
        let init = ops.pool_init(p, 3);
        let again = ops.pool_init(p, 99);
        let a: Vec<_> = (0..4).map(|_| ops.pool_alloc(p)).collect();
        s.execute(&mut ops).unwrap();
        assert!(ops.swapped(init) && !ops.swapped(again));
        let got: Vec<_> = a.iter().map(|&id| ops.allocated(id)).collect();
        assert_eq!(got, vec![Some(0), Some(1), Some(2), None]);
        ops.clear();
        ops.pool_free(p, 2);
        ops.pool_free(p, 0);
        ops.pool_free(p, 0); // a double free is ignored
        let x = ops.pool_alloc(p);
        let y = ops.pool_alloc(p);
        let z = ops.pool_alloc(p);
        s.execute(&mut ops).unwrap();
        assert_eq!(
            (ops.allocated(x), ops.allocated(y), ops.allocated(z)),
            (Some(2), Some(0), None)
        );
    }

    #[test]
    fn timers_fire_once_in_deadline_order_per_namespace() {
        let mut s = LocalStore::new();
        let mut ops = Ops::new();
        ops.arm_timer(k(5, b"late"), 300);
        ops.arm_timer(k(5, b"early"), 100);
        ops.arm_timer(k(5, b"moved"), 50);
        ops.arm_timer(k(5, b"moved"), 500); // re-arm replaces
        ops.arm_timer(Key::new(Namespace(8), 5, b"other"), 10);
        ops.arm_timer(k(5, b"cancelled"), 10);
        ops.cancel_timer(k(5, b"cancelled"));
        s.execute(&mut ops).unwrap();
        let mut out = vec![];
        s.take_expired(Namespace(7), 200, 10, &mut out).unwrap();
        assert_eq!(out, vec![k(5, b"early")]);
        out.clear();
        s.take_expired(Namespace(7), 200, 10, &mut out).unwrap();
        assert!(out.is_empty(), "a fired timer never fires again");
        s.take_expired(Namespace(7), 1000, 1, &mut out).unwrap();
        assert_eq!(out, vec![k(5, b"late")], "max bounds the take");
        out.clear();
        s.take_expired(Namespace(7), 1000, 10, &mut out).unwrap();
        assert_eq!(out, vec![k(5, b"moved")]);
        assert_eq!(
            s.armed_timers(),
            1,
            "the other namespace's timer is untouched"
        );
    }

    #[test]
    fn shared_store_is_one_store() {
        let a = SharedLocalStore::new();
        let mut b = a.handle();
        let mut a = a;
        let mut ops = Ops::new();
        ops.put(k(1, b"f"), b"x");
        a.execute(&mut ops).unwrap();
        ops.clear();
        let g = ops.get(k(1, b"f"));
        b.execute(&mut ops).unwrap();
        assert_eq!(ops.value(g), Some(&b"x"[..]));
        assert_eq!(b.counters().reads, 1);
        assert_eq!(a.counters().reads, 0);
    }
}
