use crate::codec::{Codec, DecodeError, Reader, Writer};
use crate::key::{Key, Namespace};

/// A range of one of the [`Ops`] arenas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    off: u32,
    len: u32,
}

impl Span {
    fn of<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        &arena[self.off as usize..(self.off + self.len) as usize]
    }
}

/// One state operation. Values live in the [`Ops`] argument arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read a value.
    Get {
        /// Key to read.
        key: Key,
    },
    /// Write a value, replacing any previous one.
    Put {
        /// Key to write.
        key: Key,
        /// The value in the argument arena.
        val: Span,
    },
    /// Append bytes to a value (an absent value counts as empty): Redis's
    /// `APPEND`. For a value that grows by its end (the IPS's pending HTTP
    /// body), so a packet sends its new bytes rather than the whole value.
    Append {
        /// Key to extend.
        key: Key,
        /// The bytes to add, in the argument arena.
        val: Span,
    },
    /// Remove a value (absent is fine).
    Delete {
        /// Key to remove.
        key: Key,
    },
    /// Replace the value only if it currently equals `expected` (`None`: absent).
    /// `new` of `None` deletes.
    CompareAndSet {
        /// Key to update.
        key: Key,
        /// Expected current value.
        expected: Option<Span>,
        /// New value.
        new: Option<Span>,
    },
    /// Add `delta` to a signed 64-bit counter (absent counts as zero).
    Incr {
        /// Counter key.
        key: Key,
        /// Amount to add (may be negative).
        delta: i64,
    },
    /// Create an allocation pool holding items `0..size`, unless it exists already.
    PoolInit {
        /// Pool key.
        pool: Key,
        /// Number of items.
        size: u64,
    },
    /// Take one free item of a pool, least recently freed first (so an item, such as
    /// a NAT port, is reused as late as possible).
    PoolAlloc {
        /// Pool key.
        pool: Key,
    },
    /// Take up to `n` free items of a pool in one operation, in the order `n`
    /// [`Op::PoolAlloc`]s would (never-used items first, then the least recently
    /// freed): for an instance reserving items ahead (the NAT's `port_reserve`),
    /// one step on the server instead of `n`. Fewer come back when the pool runs
    /// out; none when it does not exist.
    PoolTake {
        /// Pool key.
        pool: Key,
        /// How many items to take.
        n: u32,
    },
    /// Return an item to a pool.
    PoolFree {
        /// Pool key.
        pool: Key,
        /// The item.
        item: u64,
    },
    /// Arm (or re-arm) the timer named by `key` to fire at `deadline_ns`.
    ArmTimer {
        /// Timer key; its namespace decides who takes it.
        key: Key,
        /// Absolute deadline.
        deadline_ns: u64,
    },
    /// Disarm the timer named by `key` (absent is fine).
    CancelTimer {
        /// Timer key.
        key: Key,
    },
}

impl Op {
    /// The key the operation is about (pool key for pool operations).
    pub fn key(&self) -> &Key {
        match self {
            Op::Get { key }
            | Op::Put { key, .. }
            | Op::Append { key, .. }
            | Op::Delete { key }
            | Op::CompareAndSet { key, .. }
            | Op::Incr { key, .. }
            | Op::ArmTimer { key, .. }
            | Op::CancelTimer { key } => key,
            Op::PoolInit { pool, .. }
            | Op::PoolAlloc { pool }
            | Op::PoolTake { pool, .. }
            | Op::PoolFree { pool, .. } => pool,
        }
    }
}

/// How a local cache in front of the store may treat an operation (see
/// `docs/STATE.md`, "Consistency model"). Backends ignore hints: to a store every
/// hinted operation is the plain operation it wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hint {
    /// Always goes to the store (shared objects, keys reached through another
    /// flow's tuple, anything not declared below).
    #[default]
    Store,
    /// A record of the packet's own flow that only the flow's owner touches: while
    /// this instance holds a lease on `flow_hash`, reads may be served from the
    /// cache and writes update it (writes still go to the store before the batch's
    /// packets leave).
    Owned {
        /// The flow's direction-invariant hash (`FlowKey::symmetric_hash`).
        flow_hash: u32,
    },
    /// Like [`Hint::Owned`], for a write whose loss breaks nothing (a `last_seen`
    /// refresh, a per-flow packet counter): the cache may hold it back for a bounded
    /// time and send it with a later round trip.
    Deferred {
        /// The flow's direction-invariant hash.
        flow_hash: u32,
    },
    /// A read of a record that another instance may *create* while it is absent
    /// (a NAT reverse mapping, an LB connection seen from the reply direction) but
    /// that, once present, only changes through the owner of `flow_hash` (or is
    /// deleted once idle past its timeout): a cache may serve a present value, never
    /// "known absent".
    Present {
        /// The hash of the flow whose owner reads the record.
        flow_hash: u32,
    },
    /// A write of a flow-owned record that must reach the store before the batch's
    /// packets leave, but whose acknowledgement need not be waited for (the IPS's
    /// scan state, the reassembler's stream position): a cache updates its entry and
    /// sends the write on the store's ordered connection
    /// ([`crate::StateStore::execute_unacked`]) at the latest at the end of the
    /// batch (`FlowCache::flush_due`, which the chain calls before the batch's
    /// packets leave), together with every other such write of the batch, reading
    /// the reply later. Lost only if the write never reaches the store
    /// (docs/STATE.md, "What a crash can lose").
    Unacked {
        /// The flow's direction-invariant hash.
        flow_hash: u32,
    },
    /// A store-bound operation whose result the function never reads (a load
    /// counter it only adjusts): in pipelined mode a cache may send it without
    /// waiting, held with the batch's writes (docs/STATE.md, "Pipelining").
    NoReply,
}

/// The result of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpResult {
    /// Not executed yet.
    #[default]
    Pending,
    /// A get's value (in the result arena), or `None` if absent.
    Value(Option<Span>),
    /// A put, delete, pool free or timer operation completed.
    Done,
    /// Whether a compare-and-set (or pool init) took effect.
    Swapped(bool),
    /// A counter's value after the increment.
    Counter(i64),
    /// The allocated pool item, or `None` if the pool is exhausted.
    Allocated(Option<u64>),
}

/// Handle to an operation queued in an [`Ops`] buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpId(u32);

impl OpId {
    /// The operation's position in its batch.
    pub fn index(&self) -> usize {
        self.0 as usize
    }

    /// The handle of the operation at position `i` of its batch.
    pub(crate) fn at(i: usize) -> OpId {
        OpId(i as u32)
    }
}

/// A reusable buffer of operations and their results.
///
/// Functions queue operations, the store executes them in one go, and the function
/// reads results by [`OpId`]. Clearing keeps the capacity, so a function reusing one
/// `Ops` per batch allocates only while warming up.
#[derive(Debug, Default)]
pub struct Ops {
    ops: Vec<Op>,
    hints: Vec<Hint>,
    args: Vec<u8>,
    results: Vec<OpResult>,
    out: Vec<u8>,
    /// Direct-mapped set of listings seen since the last clear (see
    /// [`Ops::first_listing`]); empty until first used.
    listed: Vec<u64>,
    /// The gets whose value goes to a buffer of its own ([`Ops::get_moved`]):
    /// (operation, buffer), in operation order.
    moved: Vec<(u32, u32)>,
    /// Those buffers, reused across batches (the first `moved.len()` in use).
    bufs: Vec<Vec<u8>>,
}

/// Set in a result's offset when the value is in buffer `off & !MOVED` of
/// [`Ops::get_moved`] rather than in the result arena (which never reaches
/// 2 GiB: a batch's values are bounded far below).
const MOVED: u32 = 1 << 31;

/// Slots of [`Ops::first_listing`]'s set: a window of a few hundred packets
/// holds a few hundred flows.
const LISTED_SLOTS: usize = 1024;

impl Ops {
    /// An empty buffer.
    pub fn new() -> Self {
        Ops::default()
    }

    /// Removes every operation and result, keeping capacity.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.hints.clear();
        self.args.clear();
        self.results.clear();
        self.out.clear();
        self.moved.clear();
        if !self.listed.is_empty() {
            self.forget_listings();
        }
    }

    /// Only prefetch buffers list (once per window): kept out of the way of
    /// the per-batch `clear` of every other buffer.
    #[cold]
    #[inline(never)]
    fn forget_listings(&mut self) {
        self.listed.fill(0);
    }

    /// Number of queued operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The queued operations (for backends).
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The bytes of an argument span (for backends).
    pub fn arg(&self, s: Span) -> &[u8] {
        s.of(&self.args)
    }

    /// The cache hint of operation `i` ([`Hint::Store`] if none was given).
    pub fn hint(&self, i: usize) -> Hint {
        self.hints.get(i).copied().unwrap_or_default()
    }

    fn push(&mut self, op: Op) -> OpId {
        self.push_hinted(op, Hint::Store)
    }

    /// For a prefetch listing (`NetworkFunction::prefetch`): false if a read of
    /// the record of flow `flow_hash` in `(ns, table)` was probably listed
    /// already since the buffer was cleared, so the caller can skip building
    /// its key. A window lists each short flow's record once per packet; this
    /// lists it about once. The set forgets (a slot holds one listing), so a
    /// record may be listed twice; it never claims a listing that was not made
    /// unless two flows share the same 32-bit hash, in table and namespace,
    /// and then the read is made when the record is needed.
    pub fn first_listing(&mut self, flow_hash: u32, ns: Namespace, table: u8) -> bool {
        if self.listed.is_empty() {
            self.listed.resize(LISTED_SLOTS, 0);
        }
        let tag = (flow_hash as u64) << 32 | (ns.0 as u64 & 0x7f_ffff) << 8 | table as u64;
        let tag = tag | 1 << 31; // never the empty slot's 0
        let slot = (flow_hash ^ ns.0.rotate_left(16) ^ (table as u32) << 8) as usize % LISTED_SLOTS;
        let seen = self.listed[slot] == tag;
        self.listed[slot] = tag;
        !seen
    }

    fn push_hinted(&mut self, op: Op, hint: Hint) -> OpId {
        self.ops.push(op);
        self.hints.push(hint);
        self.results.push(OpResult::Pending);
        OpId((self.ops.len() - 1) as u32)
    }

    fn stash(&mut self, v: &[u8]) -> Span {
        let off = self.args.len() as u32;
        self.args.extend_from_slice(v);
        Span {
            off,
            len: v.len() as u32,
        }
    }

    fn stash_codec<V: Codec>(&mut self, v: &V) -> Span {
        let off = self.args.len();
        v.encode(&mut Writer::new(&mut self.args));
        Span {
            off: off as u32,
            len: (self.args.len() - off) as u32,
        }
    }

    /// Queues a read.
    pub fn get(&mut self, key: Key) -> OpId {
        self.push(Op::Get { key })
    }

    /// Queues a read whose value the caller will take whole
    /// ([`Ops::take_value`]): the backend writes it into a buffer of its
    /// own instead of the shared result arena, so taking it moves the
    /// buffer rather than copying the bytes again (a large value the caller
    /// keeps and changes, the IPS's pending body).
    pub fn get_moved(&mut self, key: Key) -> OpId {
        let id = self.push(Op::Get { key });
        let b = self.moved.len() as u32;
        if self.bufs.len() <= b as usize {
            self.bufs.push(Vec::new());
        }
        self.moved.push((id.0, b));
        id
    }

    /// Queues a write of raw bytes.
    pub fn put(&mut self, key: Key, val: &[u8]) -> OpId {
        let val = self.stash(val);
        self.push(Op::Put { key, val })
    }

    /// Queues a write of a typed value, encoded straight into the arena.
    pub fn put_value<V: Codec>(&mut self, key: Key, v: &V) -> OpId {
        let val = self.stash_codec(v);
        self.push(Op::Put { key, val })
    }

    /// Queues a read of a record owned by the flow hashing to `flow_hash` (see
    /// [`Hint::Owned`]): a cache may answer it without a round trip.
    pub fn get_owned(&mut self, key: Key, flow_hash: u32) -> OpId {
        self.push_hinted(Op::Get { key }, Hint::Owned { flow_hash })
    }

    /// Queues a write-through of a typed value of a flow-owned record ([`Hint::Owned`]).
    pub fn put_value_owned<V: Codec>(&mut self, key: Key, v: &V, flow_hash: u32) -> OpId {
        let val = self.stash_codec(v);
        self.push_hinted(Op::Put { key, val }, Hint::Owned { flow_hash })
    }

    /// Queues a write of a flow-owned record that may be deferred ([`Hint::Deferred`]):
    /// only for writes a crash may lose without breaking anything.
    pub fn put_value_deferred<V: Codec>(&mut self, key: Key, v: &V, flow_hash: u32) -> OpId {
        let val = self.stash_codec(v);
        self.push_hinted(Op::Put { key, val }, Hint::Deferred { flow_hash })
    }

    /// Queues a read of a record that may be cached only while present
    /// ([`Hint::Present`]).
    pub fn get_present(&mut self, key: Key, flow_hash: u32) -> OpId {
        self.push_hinted(Op::Get { key }, Hint::Present { flow_hash })
    }

    /// Queues a write of a flow-owned record sent before the batch leaves without
    /// waiting for its acknowledgement ([`Hint::Unacked`]).
    pub fn put_value_unacked<V: Codec>(&mut self, key: Key, v: &V, flow_hash: u32) -> OpId {
        let val = self.stash_codec(v);
        self.push_hinted(Op::Put { key, val }, Hint::Unacked { flow_hash })
    }

    /// Queues a compare-and-set of a flow-owned record ([`Hint::Owned`]): it always
    /// goes to the store (before the batch leaves); a cache holding the key sends its
    /// deferred value first and then keeps `new` if the swap took effect, forgets the
    /// key if not.
    pub fn compare_and_set_owned<V: Codec>(
        &mut self,
        key: Key,
        expected: Option<&V>,
        new: Option<&V>,
        flow_hash: u32,
    ) -> OpId {
        let expected = expected.map(|v| self.stash_codec(v));
        let new = new.map(|v| self.stash_codec(v));
        self.push_hinted(
            Op::CompareAndSet { key, expected, new },
            Hint::Owned { flow_hash },
        )
    }

    /// Queues a write of raw bytes with an explicit hint.
    pub fn put_hinted(&mut self, key: Key, val: &[u8], hint: Hint) -> OpId {
        let val = self.stash(val);
        self.push_hinted(Op::Put { key, val }, hint)
    }

    /// Queues a delete of a flow-owned record ([`Hint::Owned`]).
    pub fn delete_owned(&mut self, key: Key, flow_hash: u32) -> OpId {
        self.push_hinted(Op::Delete { key }, Hint::Owned { flow_hash })
    }

    /// Turns every queued operation's hint into [`Hint::Store`] (for a function
    /// whose packets were not steered by the flows its hints name).
    pub fn strip_hints(&mut self) {
        self.hints.iter_mut().for_each(|h| *h = Hint::Store);
    }

    /// Copies operation `i` of `src` (arguments and hint) to the end of this buffer
    /// (used by caches to forward part of a batch to the store).
    pub fn push_copy(&mut self, src: &Ops, i: usize) -> OpId {
        let hint = src.hint(i);
        let op = match src.ops[i] {
            Op::Put { key, val } => Op::Put {
                key,
                val: self.stash(src.arg(val)),
            },
            Op::Append { key, val } => Op::Append {
                key,
                val: self.stash(src.arg(val)),
            },
            Op::CompareAndSet { key, expected, new } => Op::CompareAndSet {
                key,
                expected: expected.map(|s| self.stash(src.arg(s))),
                new: new.map(|s| self.stash(src.arg(s))),
            },
            other => other,
        };
        self.push_hinted(op, hint)
    }

    /// Queues appending raw bytes to a value ([`Op::Append`]). The caller
    /// must know what the value holds before (the store does not say): the
    /// IPS appends only to a blob it read whole in this batch, and checks
    /// the length it reads back against its record's.
    pub fn append(&mut self, key: Key, val: &[u8]) -> OpId {
        let val = self.stash(val);
        self.push(Op::Append { key, val })
    }

    /// Queues a delete.
    pub fn delete(&mut self, key: Key) -> OpId {
        self.push(Op::Delete { key })
    }

    /// Queues a compare-and-set of typed values.
    pub fn compare_and_set<V: Codec>(
        &mut self,
        key: Key,
        expected: Option<&V>,
        new: Option<&V>,
    ) -> OpId {
        let expected = expected.map(|v| self.stash_codec(v));
        let new = new.map(|v| self.stash_codec(v));
        self.push(Op::CompareAndSet { key, expected, new })
    }

    /// Queues a compare-and-set of raw bytes.
    pub fn compare_and_set_raw(
        &mut self,
        key: Key,
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> OpId {
        let expected = expected.map(|v| self.stash(v));
        let new = new.map(|v| self.stash(v));
        self.push(Op::CompareAndSet { key, expected, new })
    }

    /// Queues a counter increment.
    pub fn incr(&mut self, key: Key, delta: i64) -> OpId {
        self.push(Op::Incr { key, delta })
    }

    /// Queues a counter increment whose new value the caller will not read
    /// ([`Hint::NoReply`]); its result is [`OpResult::Done`] when a cache
    /// answered for the store.
    pub fn incr_no_reply(&mut self, key: Key, delta: i64) -> OpId {
        self.push_hinted(Op::Incr { key, delta }, Hint::NoReply)
    }

    /// Queues creation of a pool of `size` items (no effect if it exists).
    pub fn pool_init(&mut self, pool: Key, size: u64) -> OpId {
        self.push(Op::PoolInit { pool, size })
    }

    /// Queues allocation of a pool item.
    pub fn pool_alloc(&mut self, pool: Key) -> OpId {
        self.push(Op::PoolAlloc { pool })
    }

    /// Queues taking up to `n` pool items at once (read them with
    /// [`Ops::taken`]).
    pub fn pool_take(&mut self, pool: Key, n: u32) -> OpId {
        self.push(Op::PoolTake { pool, n })
    }

    /// Queues the return of a pool item.
    pub fn pool_free(&mut self, pool: Key, item: u64) -> OpId {
        self.push(Op::PoolFree { pool, item })
    }

    /// Queues arming a timer.
    pub fn arm_timer(&mut self, key: Key, deadline_ns: u64) -> OpId {
        self.push(Op::ArmTimer { key, deadline_ns })
    }

    /// Queues cancelling a timer.
    pub fn cancel_timer(&mut self, key: Key) -> OpId {
        self.push(Op::CancelTimer { key })
    }

    /// The result of an operation.
    pub fn result(&self, id: OpId) -> OpResult {
        self.results[id.index()]
    }

    /// A get's raw value (`None` if absent or not a get, or taken by
    /// [`Ops::take_value`]).
    pub fn value(&self, id: OpId) -> Option<&[u8]> {
        match self.results[id.index()] {
            OpResult::Value(Some(s)) if s.off & MOVED != 0 => {
                Some(&self.bufs[(s.off & !MOVED) as usize][..])
            }
            OpResult::Value(Some(s)) => Some(s.of(&self.out)),
            _ => None,
        }
    }

    /// Puts a get's value into `into` (its bytes replaced) and returns
    /// true, or returns false (leaving `into` alone) if it was absent. A
    /// [`Ops::get_moved`] value moves: `into`'s old buffer takes its place
    /// for reuse, and the get reads as absent afterwards. Others are copied.
    pub fn take_value(&mut self, id: OpId, into: &mut Vec<u8>) -> bool {
        match self.results[id.index()] {
            OpResult::Value(Some(s)) if s.off & MOVED != 0 => {
                std::mem::swap(into, &mut self.bufs[(s.off & !MOVED) as usize]);
                self.results[id.index()] = OpResult::Value(None);
                true
            }
            OpResult::Value(Some(s)) => {
                into.clear();
                into.extend_from_slice(s.of(&self.out));
                true
            }
            _ => false,
        }
    }

    /// The buffer of operation `i` if it is a [`Ops::get_moved`].
    #[inline]
    fn moved_buf(&self, i: usize) -> Option<u32> {
        if self.moved.is_empty() {
            return None;
        }
        let k = self.moved.binary_search_by_key(&(i as u32), |m| m.0).ok()?;
        Some(self.moved[k].1)
    }

    /// A get's value decoded as `V`; `Ok(None)` if absent.
    pub fn decode<V: Codec>(&self, id: OpId) -> Result<Option<V>, DecodeError> {
        match self.value(id) {
            None => Ok(None),
            Some(b) => {
                let mut r = Reader::new(b);
                let v = V::decode(&mut r)?;
                r.finish()?;
                Ok(Some(v))
            }
        }
    }

    /// A counter's new value (0 if not a counter result).
    pub fn counter(&self, id: OpId) -> i64 {
        match self.results[id.index()] {
            OpResult::Counter(v) => v,
            _ => 0,
        }
    }

    /// Whether a compare-and-set or pool init took effect.
    pub fn swapped(&self, id: OpId) -> bool {
        matches!(self.results[id.index()], OpResult::Swapped(true))
    }

    /// An allocated pool item.
    pub fn allocated(&self, id: OpId) -> Option<u64> {
        match self.results[id.index()] {
            OpResult::Allocated(v) => v,
            _ => None,
        }
    }

    /// The items a [`Op::PoolTake`] took, in the order they were taken (none if
    /// it did not run or took nothing).
    pub fn taken(&self, id: OpId) -> impl Iterator<Item = u64> + '_ {
        self.value(id)
            .unwrap_or(&[])
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
    }

    // ---- for backends ----

    /// Records the items a [`Op::PoolTake`] took (backends).
    pub fn set_taken(&mut self, i: usize, items: impl IntoIterator<Item = u64>) {
        self.set_value_with(i, |out| {
            for it in items {
                out.extend_from_slice(&it.to_le_bytes());
            }
            true
        });
    }

    /// Records a non-value result (backends).
    pub fn set_result(&mut self, i: usize, r: OpResult) {
        self.results[i] = r;
    }

    /// Records a get's value, copying it into the result arena (or the get's own
    /// buffer, [`Ops::get_moved`]) (backends).
    pub fn set_value(&mut self, i: usize, v: Option<&[u8]>) {
        self.set_value_with(i, |out| v.inspect(|b| out.extend_from_slice(b)).is_some());
    }

    /// Lets a backend write a get's value straight into the result arena (or the
    /// get's own buffer, [`Ops::get_moved`]) via `fill`, which appends the bytes and
    /// returns whether a value existed (avoids a copy when decoding from a network
    /// buffer).
    pub fn set_value_with(&mut self, i: usize, fill: impl FnOnce(&mut Vec<u8>) -> bool) {
        if let Some(b) = self.moved_buf(i) {
            let buf = &mut self.bufs[b as usize];
            buf.clear();
            let present = fill(buf);
            self.results[i] = if present {
                OpResult::Value(Some(Span {
                    off: MOVED | b,
                    len: buf.len() as u32,
                }))
            } else {
                buf.clear();
                OpResult::Value(None)
            };
            return;
        }
        let off = self.out.len();
        let present = fill(&mut self.out);
        self.results[i] = if present {
            OpResult::Value(Some(Span {
                off: off as u32,
                len: (self.out.len() - off) as u32,
            }))
        } else {
            self.out.truncate(off);
            OpResult::Value(None)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A moved get's value is in its own buffer, whichever way the backend
    /// records it; taking it swaps buffers (no copy) and leaves it absent;
    /// plain gets around it keep their values; buffers are reused after a
    /// clear.
    #[test]
    fn a_moved_get_is_taken_without_a_copy() {
        let k = |b: &[u8]| Key::new(Namespace(1), 1, b);
        let mut ops = Ops::new();
        let a = ops.get(k(b"a"));
        let m = ops.get_moved(k(b"m"));
        let n = ops.get_moved(k(b"n"));
        let z = ops.get_moved(k(b"z"));
        ops.set_value(a.index(), Some(b"plain"));
        ops.set_value(m.index(), Some(&[7u8; 1000]));
        ops.set_value_with(n.index(), |out| {
            out.extend_from_slice(b"filled");
            true
        });
        ops.set_value(z.index(), None);
        assert_eq!(ops.value(a), Some(&b"plain"[..]));
        assert_eq!(ops.value(m), Some(&[7u8; 1000][..]));
        assert_eq!(ops.value(n), Some(&b"filled"[..]));
        assert_eq!(ops.value(z), None);
        let mut into = Vec::with_capacity(5);
        let old = into.as_ptr();
        assert!(ops.take_value(m, &mut into));
        assert_eq!(into, [7u8; 1000]);
        assert_eq!(ops.value(m), None, "taken");
        let mut other = b"junk".to_vec();
        assert!(!ops.take_value(z, &mut other));
        assert_eq!(other, b"junk", "an absent value leaves the buffer alone");
        assert!(ops.take_value(a, &mut other), "a plain get is copied");
        assert_eq!(other, b"plain");
        assert_eq!(ops.value(a), Some(&b"plain"[..]));
        // The buffer given in is reused for the next batch's moved get.
        ops.clear();
        let m2 = ops.get_moved(k(b"m"));
        ops.set_value(m2.index(), Some(b"again"));
        assert_eq!(ops.value(m2), Some(&b"again"[..]));
        let mut back = Vec::new();
        assert!(ops.take_value(m2, &mut back));
        assert_eq!(back.as_ptr(), old);
    }

    #[test]
    fn a_listing_is_first_once_per_flow_table_and_namespace_until_cleared() {
        let mut ops = Ops::new();
        let (a, b) = (Namespace(1), Namespace(2));
        assert!(ops.first_listing(7, a, 1));
        assert!(!ops.first_listing(7, a, 1), "listed already");
        assert!(ops.first_listing(7, a, 2), "another table");
        assert!(ops.first_listing(7, b, 1), "another namespace");
        assert!(ops.first_listing(8, a, 1), "another flow");
        assert!(ops.first_listing(0, a, 0), "hash 0 is not the empty slot");
        assert!(!ops.first_listing(0, a, 0));
        ops.clear();
        assert!(ops.first_listing(7, a, 1), "cleared");
        // Many flows: each is first exactly once while none is evicted, and a
        // repeat is never reported first more often than it was evicted.
        ops.clear();
        let firsts = (0..200u32)
            .chain(0..200)
            .filter(|&h| ops.first_listing(h.wrapping_mul(0x9e37_79b9), a, 1))
            .count();
        assert!((200..=260).contains(&firsts), "{firsts}");
    }
}
