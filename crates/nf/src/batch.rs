//! The batch skeleton every stateful function shares: gather the records the
//! batch needs, read them in one round trip, decide packet by packet over an
//! overlay of those records, write back what changed.
//!
//! A function implements [`BatchNf`] (which records a packet needs, how a read
//! value becomes the batch's view of it, the decision for one packet, the write
//! of one changed record) and keeps a [`Pass`] of reusable buffers. Its
//! `process` then strings the phases together inside [`split`]:
//!
//! ```text
//! gather -> read (round trip) -> decide -> write (round trip)
//! ```
//!
//! Functions with more round trips (the NAT's pool allocations, the LB's claims
//! of new connections) put theirs between the phases, on the same buffers.
//!
//! The overlay is [`Records`]: one [`Record`] per distinct record of the batch,
//! however many packets use it, holding the value as the batch's earlier packets
//! left it (`cur`), so a later packet sees an earlier one's changes and each
//! record is read and written once per batch, and, for functions that write by
//! compare-and-set, the value as read (`old`, see [`Kept`]). Nothing here
//! allocates once the buffers have grown to the batch size: they are cleared,
//! never dropped, between batches.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use sluice_packet::{Batch, Packet};
use sluice_state::{Codec, DecodeError, Key, OpId, Ops, StateStore};

use crate::{Ctx, NfError};

/// How a record is read, i.e. the cache hint of its read (see
/// [`sluice_state::Hint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Always from the store.
    Store,
    /// A record only the owner of this flow hash writes ([`Ops::get_owned`]).
    Owned(u32),
    /// A record that may be cached only while present ([`Ops::get_present`]).
    Present(u32),
}

impl Read {
    /// Queues the read of `key` on `ops` with this hint.
    #[inline]
    pub fn queue(self, ops: &mut Ops, key: Key) -> OpId {
        match self {
            Read::Store => ops.get(key),
            Read::Owned(h) => ops.get_owned(key, h),
            Read::Present(h) => ops.get_present(key, h),
        }
    }
}

/// What a record keeps of its value as read: nothing (`()`, for functions that
/// only ever overwrite), or the value itself (`Option<V>`, absent or undecodable
/// being `None`), the expectation of a compare-and-set. Keeping nothing keeps a
/// second copy of the value out of every record, which functions with large
/// values notice per packet.
pub trait Kept<V>: Copy {
    /// What is kept of the read `v`.
    fn keep(v: Option<V>) -> Self;
}

impl<V> Kept<V> for () {
    #[inline]
    fn keep(_: Option<V>) {}
}

impl<V: Copy> Kept<V> for Option<V> {
    #[inline]
    fn keep(v: Option<V>) -> Option<V> {
        v
    }
}

/// One record of the batch: what was read and what the batch made of it.
///
/// `repr(C)` keeps the key first, at the start of the record: building a record
/// writes the key in the same 16-byte pieces a copy of the record reads it
/// back, where the compiler's own layout put it at an odd offset and every
/// new record stalled the store-to-load forwarding of those copies.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Record<V, X, O = ()> {
    /// The store key.
    pub key: Key,
    /// Its read.
    pub get: OpId,
    /// What is kept of the value as read (see [`Kept`]).
    pub old: O,
    /// The value as the batch's packets so far left it.
    pub cur: Option<V>,
    /// `cur` must be written back.
    pub dirty: bool,
    /// The stored value could not be decoded.
    pub corrupt: bool,
    /// The function's own bookkeeping for the record.
    pub x: X,
}

impl<V: Copy, X, O: Kept<V>> Record<V, X, O> {
    /// Makes `v` both the value read and the current one (the default of
    /// [`BatchNf::load`]).
    #[inline]
    pub fn load(&mut self, v: Option<V>) {
        self.old = O::keep(v);
        self.cur = v;
    }
}

/// The records of one batch, each once, found by an id (the key, or the flow
/// it is built from when that is cheaper to hash). Indices are `u32` so that
/// per-packet plans stay small.
pub struct Records<K, V, X, S, O = ()> {
    list: Vec<Record<V, X, O>>,
    index: HashMap<K, u32, S>,
}

impl<K, V, X, S: Default, O> Default for Records<K, V, X, S, O> {
    fn default() -> Self {
        Records {
            list: Vec::new(),
            index: HashMap::default(),
        }
    }
}

impl<K: Hash + Eq, V: Codec + Copy, X, S: BuildHasher, O: Kept<V>> Records<K, V, X, S, O> {
    /// Forgets every record, keeping capacity.
    #[inline]
    pub fn clear(&mut self) {
        self.list.clear();
        self.index.clear();
    }

    /// The index of the record `id`. The first time, `make` gives its key, how
    /// to read it and its bookkeeping, and its read is queued on `ops`; later
    /// packets share that read (and its hint).
    #[inline]
    pub fn read(&mut self, id: K, ops: &mut Ops, make: impl FnOnce() -> (Key, Read, X)) -> u32 {
        let next = self.list.len() as u32;
        match self.index.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => *e.get(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(next);
                let (key, how, x) = make();
                let get = how.queue(ops, key);
                self.list.push(Record {
                    key,
                    get,
                    old: O::keep(None),
                    cur: None,
                    dirty: false,
                    corrupt: false,
                    x,
                });
                next
            }
        }
    }

    /// The index of record `id`, if the batch has it.
    #[inline]
    pub fn find(&self, id: &K) -> Option<u32> {
        self.index.get(id).copied()
    }

    /// Hands each record from index `from` on its decoded read in `ops` (which
    /// must hold the results of the buffer its read was queued on).
    #[inline]
    pub fn load_with(
        &mut self,
        ops: &Ops,
        from: usize,
        mut f: impl FnMut(&mut Record<V, X, O>, Result<Option<V>, DecodeError>),
    ) {
        for r in self.list.iter_mut().skip(from) {
            let v = ops.decode::<V>(r.get);
            f(r, v);
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True if the batch reads no record.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The records, in the order their reads were queued.
    pub fn iter(&self) -> std::slice::Iter<'_, Record<V, X, O>> {
        self.list.iter()
    }

    /// The records, mutably.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Record<V, X, O>> {
        self.list.iter_mut()
    }
}

impl<K, V, X, S, O> std::ops::Index<u32> for Records<K, V, X, S, O> {
    type Output = Record<V, X, O>;
    #[inline]
    fn index(&self, i: u32) -> &Record<V, X, O> {
        &self.list[i as usize]
    }
}

impl<K, V, X, S, O> std::ops::IndexMut<u32> for Records<K, V, X, S, O> {
    #[inline]
    fn index_mut(&mut self, i: u32) -> &mut Record<V, X, O> {
        &mut self.list[i as usize]
    }
}

/// The records of a [`BatchNf`]'s batch.
pub type RecordsOf<F> = Records<
    <F as BatchNf>::Id,
    <F as BatchNf>::Value,
    <F as BatchNf>::Extra,
    <F as BatchNf>::Hasher,
    <F as BatchNf>::Old,
>;

/// A record of a [`BatchNf`]'s batch.
pub type RecordOf<F> = Record<<F as BatchNf>::Value, <F as BatchNf>::Extra, <F as BatchNf>::Old>;

/// What a function tells the skeleton. See the module documentation.
pub trait BatchNf: Sized {
    /// What identifies a record within a batch (usually its [`Key`]).
    type Id: Hash + Eq;
    /// The stored value of a record.
    type Value: Codec + Copy;
    /// The function's per-record bookkeeping.
    type Extra;
    /// What a record keeps of its value as read: `()`, or `Option<Self::Value>`
    /// for a function that writes by compare-and-set (see [`Kept`]).
    type Old: Kept<Self::Value>;
    /// What gathering decided for one packet, replayed by [`BatchNf::decide`].
    type Plan: Copy;
    /// The hasher of the records' index.
    type Hasher: BuildHasher + Default;

    /// Whether the write round trip is made even when nothing is to be written.
    /// An empty `execute` costs no round trip, but a flow cache in front of the
    /// store settles on it (finishes a prefetch, sends held writes), so a
    /// function keeps the behaviour it was measured with.
    const ALWAYS_WRITE: bool = false;

    /// The function's buffers.
    fn pass(&mut self) -> &mut Pass<Self>;

    /// Operations queued before the batch's reads, in the same round trip
    /// (e.g. creating a pool on first use). Default: none.
    fn first_reads(&mut self, _ops: &mut Ops) {}

    /// The keys of a live IP packet: queues the reads it needs with
    /// [`Pass::record`] and returns its plan, or the reason to drop it.
    fn plan(&mut self, p: &Packet, pass: &mut Pass<Self>) -> Result<Self::Plan, &'static str>;

    /// The function's policy for a live frame it cannot classify (not IP, or IP
    /// inside something it does not read): `Ok` passes it, `Err(reason)` drops
    /// it. Default: pass, for functions that only act on what they understand;
    /// a firewall overrides it (docs/FUNCTIONS.md, "Frames a function cannot
    /// classify").
    #[inline]
    fn unclassified(&mut self, _p: &Packet) -> Result<(), &'static str> {
        Ok(())
    }

    /// Makes the decoded read of `rec` its starting point for the batch. Default:
    /// the value is both `old` and `cur`; an undecodable one is absent and marks
    /// the record corrupt (counted by [`Pass::read`]).
    #[inline]
    fn load(
        &mut self,
        rec: &mut RecordOf<Self>,
        read: Result<Option<Self::Value>, DecodeError>,
        _now_ns: u64,
    ) {
        match read {
            Ok(v) => rec.load(v),
            Err(_) => rec.corrupt = true,
        }
    }

    /// Decides packet `i` (with plan `plan`), updating the records it uses in
    /// `pass.recs`; operations it queues on `pass.ops` go with the writes.
    fn decide(
        &mut self,
        i: usize,
        p: &mut Packet,
        plan: Self::Plan,
        pass: &mut Pass<Self>,
        ctx: &mut Ctx<'_>,
    );

    /// Queues the write of a record the batch changed (`dirty`), or nothing.
    fn write(&self, rec: &RecordOf<Self>, ops: &mut Ops);
}

/// A function's reusable per-batch buffers.
pub struct Pass<F: BatchNf> {
    /// The operations of the current round trip.
    pub ops: Ops,
    /// The batch's records.
    pub recs: RecordsOf<F>,
    /// Per packet: its plan, `None` for packets the function does not decide.
    pub plans: Vec<Option<F::Plan>>,
}

impl<F: BatchNf> Default for Pass<F> {
    fn default() -> Self {
        Pass {
            ops: Ops::new(),
            recs: Records::default(),
            plans: Vec::new(),
        }
    }
}

/// Runs `body` with `nf` and its [`Pass`] as two borrows: the pass is moved out
/// for the call and back after it (a move of its buffers' handles, so nothing
/// allocates and capacity is kept).
#[inline]
pub fn split<F: BatchNf, R>(nf: &mut F, body: impl FnOnce(&mut F, &mut Pass<F>) -> R) -> R {
    let mut pass = std::mem::take(nf.pass());
    let r = body(nf, &mut pass);
    *nf.pass() = pass;
    r
}

impl<F: BatchNf> Pass<F> {
    /// The index of record `id` (see [`Records::read`]): its read is queued on
    /// [`Pass::ops`] the first time.
    #[inline]
    pub fn record(&mut self, id: F::Id, make: impl FnOnce() -> (Key, Read, F::Extra)) -> u32 {
        self.recs.read(id, &mut self.ops, make)
    }

    /// Gather: clears the buffers and plans every live IP packet, dropping
    /// those [`BatchNf::plan`] refuses.
    #[inline]
    pub fn gather(&mut self, nf: &mut F, batch: &mut Batch, ctx: &Ctx<'_>) {
        self.ops.clear();
        self.recs.clear();
        self.plans.clear();
        nf.first_reads(&mut self.ops);
        for p in batch.pkts.iter_mut() {
            let mut plan = None;
            if p.is_live() {
                if p.meta.is_ip() {
                    match nf.plan(p, self) {
                        Ok(pl) => plan = Some(pl),
                        Err(reason) => p.drop_by(ctx.stage, reason),
                    }
                } else if let Err(reason) = nf.unclassified(p) {
                    p.drop_by(ctx.stage, reason);
                }
            }
            self.plans.push(plan);
        }
    }

    /// Read: one round trip for what gather queued (none if nothing was), then
    /// [`BatchNf::load`] of every record. Returns how many records are
    /// corrupt. The results stay in [`Pass::ops`] until [`Pass::decide`].
    #[inline]
    pub fn read(
        &mut self,
        nf: &mut F,
        store: &mut dyn StateStore,
        now_ns: u64,
    ) -> Result<u64, NfError> {
        if !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
        }
        let mut corrupt = 0;
        self.recs.load_with(&self.ops, 0, |r, v| {
            nf.load(r, v, now_ns);
            corrupt += r.corrupt as u64;
        });
        Ok(corrupt)
    }

    /// Decide: clears [`Pass::ops`] for the decisions' operations and decides
    /// every planned packet, in order.
    #[inline]
    pub fn decide(&mut self, nf: &mut F, batch: &mut Batch, ctx: &mut Ctx<'_>) {
        self.ops.clear();
        for (i, p) in batch.pkts.iter_mut().enumerate() {
            if let Some(plan) = self.plans[i] {
                nf.decide(i, p, plan, self, ctx);
            }
        }
    }

    /// Queues the writes of every changed record after what is already queued.
    #[inline]
    pub fn queue_writes(&mut self, nf: &F) {
        for r in self.recs.iter().filter(|r| r.dirty) {
            nf.write(r, &mut self.ops);
        }
    }

    /// Write: [`Pass::queue_writes`], then one round trip for everything queued
    /// since [`Pass::decide`] (skipped when empty unless
    /// [`BatchNf::ALWAYS_WRITE`]).
    #[inline]
    pub fn write(&mut self, nf: &F, store: &mut dyn StateStore) -> Result<(), NfError> {
        self.queue_writes(nf);
        if F::ALWAYS_WRITE || !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
        }
        Ok(())
    }
}
