//! IP defragmentation over the state API: the datagrams that IPv4 or IPv6
//! fragments carry, reassembled for inspection, with every fragment's bytes
//! in the store so that any instance can complete any datagram.
//!
//! # What a consumer gets
//!
//! Fragments are forwarded as they arrive (a receiver cannot use a datagram
//! before its last fragment either). The fragment that completes a datagram
//! comes with the whole datagram, as an Ethernet frame ([`Streams::datagrams`]),
//! which a consumer (the IPS) inspects in its place: dropping that fragment
//! keeps the datagram from every receiver, which is left waiting for it until
//! its own reassembly times out. A datagram whose completing fragment was
//! dropped, by any function, is remembered ([`Defragmenter::finish`]): every
//! later fragment of it is dropped (`reassembly_fragment_blocked`) until the
//! timeout, so resending the dropped fragment cannot complete it at the
//! receiver. The fragments themselves are listed ([`Streams::fragments`]) for
//! a consumer to match as IP packets only, as Suricata does: their transport
//! header and payload belong to the datagram.
//!
//! # Policy
//!
//! * **First wins, and the receiver is made to agree.** A fragment's bytes
//!   that lie over bytes already received for the datagram (an overlap, or an
//!   exact duplicate) are rewritten to the earlier copy before the fragment
//!   leaves (`reassembly_fragment_overlap_rewrites`). Stacks keep different
//!   copies (Ptacek & Newsham; Novak's target-based policies: BSD, Linux,
//!   first, last); after the rewrite every copy is the inspected one. Linux
//!   discards an overlapping datagram entirely (since 4.19; RFC 5722 for
//!   IPv6), which is safe too.
//! * **Malformed fragments are dropped** (`reassembly_fragment_malformed`):
//!   empty ones (an IPv4 fragment that is not the last counts its bytes
//!   up to a multiple of 8, as Linux does: it ignores the rest), IPv6
//!   fragments that are not the last and whose length is not a multiple
//!   of 8 (RFC 8200),
//!   a fragment ending past the largest datagram (65,535 bytes, the "ping
//!   of death"), a second last fragment ending elsewhere, bytes past the
//!   end a last fragment set. A datagram that hit one is blocked like a
//!   dropped one.
//! * **Bounded, fail closed.** A datagram holds at most
//!   [`Config::max_fragments`](crate::Config::max_fragments) fragments and
//!   255 stored pieces; a fragment beyond either is dropped and the datagram
//!   blocked (`reassembly_fragment_limit_drops`). Stored bytes missing when a
//!   datagram completes drop the completing fragment
//!   (`reassembly_fragment_lost`).
//! * **Timeout.** A datagram is forgotten
//!   [`Config::fragment_timeout_secs`](crate::Config::fragment_timeout_secs)
//!   (default 60) after its first fragment, as Linux's (30 s) and Windows'
//!   (60 s) reassembly do: a receiver must never still hold fragments of a
//!   datagram this has forgotten, or sending its last fragment late would
//!   complete there what was never inspected here.
//! * **Keys.** A datagram is its source, destination, protocol and
//!   identification (16 bits in IPv4, 32 in IPv6), and the chain's zone.
//!
//! # State
//!
//! * **Datagram record** (table [`TABLE_FRAG`], key = the datagram's flow key
//!   with the identification in the port fields): `[version=2 u8][flags u8]
//!   [first_seen u64][end u32][head_len u16][fragments u8][n u8]
//!   [n × (offset u16, len u16, nonce u32)]`, 18 bytes plus 8 per stored
//!   piece (version 1, without nonces, is still read). Flags: blocked, last
//!   fragment seen, first fragment seen. One timer per record, at
//!   `first_seen` plus the timeout.
//! * **Pieces** (table [`TABLE_FRAG_PIECE`], key = the record's plus the
//!   piece's big-endian offset and nonce): the bytes a fragment added that
//!   no earlier one covered, so pieces never overlap; the piece at offset 0
//!   starts with the first fragment's IP header (`head_len` bytes) as the
//!   whole datagram will carry it. The nonce, drawn by the writing instance
//!   for each round, keeps an instance that loses a race from overwriting
//!   the winner's piece at the same offset.
//!
//! A batch without fragments to reassemble costs nothing. One with costs one
//! round trip to read the records; one to read the pieces of completed (or
//! overlapped) datagrams, write the new pieces with their timers, and then
//! compare-and-set each changed record against what was read (pieces before
//! the record naming them, so another instance that reads the record finds
//! them: a store that does not apply a call in order across keys, a cluster,
//! gets the new pieces in a round trip of their own before this one, see
//! [`StateStore::orders_across_keys`]); and one to delete the pieces of datagrams that are over and arm
//! the new records' timers, for the records whose swap took effect (and to
//! delete the pieces of swaps that did not).
//! Fragments of one datagram may reach several instances at once (a later
//! fragment has no ports, so it hashes elsewhere than the first): when
//! another instance changed a datagram's record under a batch, the batch
//! decides that datagram's fragments again from what the store now holds,
//! two more round trips (`reassembly_fragment_race_retries`), up to three
//! times. Only a record still changing after that loses the batch's
//! fragments of it (`reassembly_fragment_races`): no fragment ever passes
//! without its bytes recorded.

use rustc_hash::FxHashMap;
use sluice_packet::Batch;
use sluice_state::{
    Codec, DecodeError, Key, Namespace, OpId, OpResult, Ops, Reader, StateStore, Writer,
};
use sluice_wire::FlowKey;

use crate::streams::{Datagram, Streams};

/// Table of datagram records.
pub const TABLE_FRAG: u8 = 3;
/// Table of stored fragment pieces.
pub const TABLE_FRAG_PIECE: u8 = 4;

const F_BLOCKED: u8 = 1;
const F_LAST: u8 = 2;
const F_HEAD: u8 = 4;
/// Most pieces one datagram record lists.
const MAX_PIECES: usize = 255;
/// Largest IP datagram (IPv4 total length, IPv6 payload length).
const MAX_DATAGRAM: usize = 65_535;
/// Rounds a batch may take to record a datagram whose record other
/// instances keep changing under it: one, and up to three retries. Two
/// instances racing on a datagram settle in one retry; a fourth loss in a
/// row is contention no fragment should wait out.
const MAX_ROUNDS: usize = 4;

/// One datagram's record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FragRecord {
    /// Blocked, last seen, head seen.
    pub flags: u8,
    /// Time of the datagram's first fragment (ns).
    pub first_seen: u64,
    /// End of the fragmentable part, once the last fragment was seen.
    pub end: u32,
    /// Length of the IP header stored in front of the piece at offset 0.
    pub head_len: u16,
    /// Fragments taken so far.
    pub fragments: u8,
    /// Stored pieces `(offset, len, nonce)`, disjoint. The nonce, drawn
    /// by the instance that wrote the piece, is part of its key: a piece is
    /// written before the record naming it is swapped in, so an instance
    /// that loses the swap must not have overwritten the winner's piece at
    /// the same offset.
    pub pieces: Vec<(u16, u16, u32)>,
}

impl FragRecord {
    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

impl Codec for FragRecord {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(2)
            .u8(self.flags)
            .u64(self.first_seen)
            .u32(self.end)
            .u16(self.head_len)
            .u8(self.fragments)
            .u8(self.pieces.len() as u8);
        for &(o, l, n) in &self.pieces {
            w.u16(o).u16(l).u32(n);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // Version 1 (before nonces) is read as nonce 0, whose pieces are
        // keyed by offset alone, so records of an instance upgraded in
        // place still join.
        let version = r.u8()?;
        if version != 1 && version != 2 {
            return Err(DecodeError("fragment record version"));
        }
        let flags = r.u8()?;
        let first_seen = r.u64()?;
        let end = r.u32()?;
        let head_len = r.u16()?;
        let fragments = r.u8()?;
        let n = r.u8()? as usize;
        let mut pieces = Vec::with_capacity(n);
        for _ in 0..n {
            let o = r.u16()?;
            let l = r.u16()?;
            let n = if version == 2 { r.u32()? } else { 0 };
            pieces.push((o, l, n));
        }
        Ok(FragRecord {
            flags,
            first_seen,
            end,
            head_len,
            fragments,
            pieces,
        })
    }
}

/// The datagram key of a fragment: its flow with the identification in the
/// port fields (the record key is the flow key's encoding).
fn datagram_flow(m: &FlowKey, id: u32) -> FlowKey {
    FlowKey {
        zone: m.zone,
        src: m.src,
        dst: m.dst,
        src_port: (id >> 16) as u16,
        dst_port: id as u16,
        proto: m.proto,
    }
}

/// The key of the piece at `off` written with `nonce` (0: a version-1
/// record's piece, keyed by its offset alone).
fn piece_key(ns: Namespace, flow: &FlowKey, off: u16, nonce: u32) -> Key {
    let o = off.to_be_bytes();
    if nonce == 0 {
        return Key::flow(ns, TABLE_FRAG_PIECE, flow, &o);
    }
    let n = nonce.to_be_bytes();
    Key::flow(
        ns,
        TABLE_FRAG_PIECE,
        flow,
        &[o[0], o[1], n[0], n[1], n[2], n[3]],
    )
}

/// Where one fragment's IP header and data are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FragInfo {
    id: u32,
    /// Offset of the data in the datagram's fragmentable part.
    off: u16,
    more: bool,
    /// The data's offset in the frame, and its length.
    data_at: u32,
    len: u16,
    /// For IPv6: where the next-header field pointing at the Fragment header
    /// is (from the IP header's start), and that header's next header.
    v6_nh: Option<(u16, u8)>,
}

/// Reads a fragment's identification, offset and data from `frame`, whose IP
/// header starts at `l3` and ends (payload included) at `l3_end`.
fn frag_info(frame: &[u8], l3: usize, l3_end: usize) -> Option<FragInfo> {
    let b = frame.get(l3..l3_end)?;
    match b.first()? >> 4 {
        4 => {
            let ihl = (b[0] & 0xf) as usize * 4;
            if ihl < 20 || b.len() < ihl {
                return None;
            }
            let fo = u16::from_be_bytes([b[6], b[7]]);
            Some(FragInfo {
                id: u16::from_be_bytes([b[4], b[5]]) as u32,
                off: (fo & 0x1fff) << 3,
                more: fo & 0x2000 != 0,
                data_at: (l3 + ihl) as u32,
                len: (b.len() - ihl) as u16,
                v6_nh: None,
            })
        }
        6 => {
            let h = sluice_wire::ipv6::fragment_header(b)?;
            Some(FragInfo {
                id: h.id,
                off: h.offset,
                more: h.more,
                data_at: (l3 + h.at + 8) as u32,
                len: (b.len() - h.at - 8) as u16,
                v6_nh: Some((h.nh_at as u16, h.next_header)),
            })
        }
        _ => None,
    }
}

/// What the defragmenter did, for summaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefragCounters {
    /// Fragments taken for reassembly.
    pub fragments: u64,
    /// Datagrams completed and handed to consumers.
    pub datagrams: u64,
    /// Fragments whose bytes over earlier ones were rewritten to them.
    pub overlap_rewrites: u64,
    /// Fragments dropped because their datagram is blocked.
    pub blocked_drops: u64,
    /// Malformed fragments dropped.
    pub malformed_drops: u64,
    /// Fragments dropped at the per-datagram limits.
    pub limit_drops: u64,
    /// Completing fragments dropped because stored bytes were missing.
    pub lost: u64,
    /// Records that could not be decoded (their fragments are dropped).
    pub corrupt_records: u64,
    /// Fragments dropped because another instance changed their datagram's
    /// record at the same time.
    pub races: u64,
    /// Datagrams blocked after their completing fragment was dropped.
    pub blocked_datagrams: u64,
    /// Records removed by their timer.
    pub expired: u64,
    /// Rounds decided again because another instance changed a record
    /// under the batch.
    pub race_retries: u64,
}

/// Where a piece's bytes are during a batch.
#[derive(Debug, Clone, Copy)]
enum Src {
    /// In the store, behind `head` bytes of IP header (the piece at offset
    /// 0); read by `op` once the datagram needs it.
    Stored { head: u16, op: Option<OpId> },
    /// In packet `pkt`'s frame from `at`.
    Batch { pkt: u32, at: u32 },
    /// Read from the store in an earlier round of the batch, kept in
    /// `kept[at..at + len]` (head included).
    Kept { head: u16, at: u32, len: u32 },
    /// In the store, but found missing when read.
    Missing,
}

/// A piece of a datagram during a batch: which entry, which of its
/// datagrams (`gen`: a completed, expired or blocked one is followed by a
/// new one under the same key), where its bytes are.
#[derive(Debug, Clone, Copy)]
struct Piece {
    entry: u32,
    gen: u32,
    off: u16,
    len: u16,
    nonce: u32,
    src: Src,
}

impl Piece {
    fn end(&self) -> usize {
        self.off as usize + self.len as usize
    }

    /// The IP header bytes in front of a stored piece's value.
    fn head(&self) -> u16 {
        match self.src {
            Src::Stored { head, .. } | Src::Kept { head, .. } => head,
            _ => 0,
        }
    }
}

struct Entry {
    flow: FlowKey,
    key: Key,
    read: OpId,
    /// The current datagram's record.
    rec: Option<FragRecord>,
    /// The record as read: what the compare-and-set expects.
    orig: Option<FragRecord>,
    /// The compare-and-set of the record, when it changed.
    cas: Option<OpId>,
    gen: u32,
    /// The current datagram's head, if it arrived in this batch: `(start,
    /// len)` in `heads`.
    batch_head: Option<(u32, u16)>,
    corrupt: bool,
    /// The record changed (written, or deleted when `rec` is `None`).
    dirty: bool,
    /// The current record is new in this batch (its timer is armed).
    created: bool,
    /// When this batch blocked the datagram (a retried round blocks it
    /// again).
    block_at: Option<u64>,
    /// The nonce of the pieces this round writes.
    nonce: u32,
}

/// A fragment's bytes at `at` in packet `pkt` that must become bytes
/// `[off, off + len)` of datagram (`entry`, `gen`).
#[derive(Debug, Clone, Copy)]
struct Rewrite {
    entry: u32,
    gen: u32,
    pkt: u32,
    at: u32,
    off: u16,
    len: u16,
}

/// A datagram completed by packet `pkt` in this batch.
#[derive(Debug, Clone, Copy)]
struct Done {
    entry: u32,
    gen: u32,
    pkt: u32,
    first_seen: u64,
    head_len: u16,
    /// The head, if it arrived in this batch (`heads`); else it is in front
    /// of the stored piece at offset 0.
    head_from_batch: Option<(u32, u16)>,
    end: u32,
}

/// The policy's knobs.
#[derive(Debug, Clone, Copy)]
pub struct DefragConfig {
    /// Fragments one datagram may have (1 to 255).
    pub max_fragments: usize,
    /// Nanoseconds after its first fragment a datagram is forgotten.
    pub timeout_ns: u64,
}

/// IP defragmentation for one namespace. See the module documentation.
pub struct Defragmenter {
    ns: Namespace,
    cfg: DefragConfig,
    counters: DefragCounters,
    ops: Ops,
    entries: Vec<Entry>,
    index: FxHashMap<Key, u32>,
    pieces: Vec<Piece>,
    /// Datagrams whose stored pieces must be read: `(entry, gen)`.
    need: Vec<(u32, u32)>,
    /// Stored pieces of datagrams that are over (completed, expired,
    /// blocked), with their entry.
    stale: Vec<(Key, u32)>,
    /// The batch's last round trip: pieces, deletes and timers of the
    /// records whose compare-and-set took effect. On a store that does not
    /// order across keys, also each round's new pieces, before its swaps.
    writes: Ops,
    rewrites: Vec<Rewrite>,
    done: Vec<Done>,
    /// Heads of first fragments seen in this batch, as the datagram carries them.
    heads: Vec<u8>,
    /// Datagrams completed in the last batch, for [`Defragmenter::finish`]:
    /// the completing fragment, the entry and its generation, the
    /// datagram's flow and first fragment's time.
    completed: Vec<(u32, u32, u32, FlowKey, u64)>,
    /// Fragments taken in the last batch and forwarded: packet, entry,
    /// generation.
    taken: Vec<(u32, u32, u32)>,
    /// The drop stage of the last batch.
    stage: u8,
    scratch: Vec<u8>,
    /// Stored pieces read in an earlier round of the batch.
    kept: Vec<u8>,
    /// Pieces a lost round wrote, deleted with the batch's last writes.
    orphans: Vec<Key>,
    /// Where nonces start (drawn once per defragmenter) and how many were
    /// drawn.
    nonce_seed: u32,
    nonces: u32,
}

impl Defragmenter {
    /// A defragmenter keeping its state in namespace `ns`.
    pub fn new(ns: Namespace, cfg: DefragConfig) -> Self {
        Defragmenter {
            ns,
            cfg: DefragConfig {
                max_fragments: cfg.max_fragments.clamp(1, 255),
                timeout_ns: cfg.timeout_ns.max(1),
            },
            counters: DefragCounters::default(),
            ops: Ops::new(),
            entries: Vec::new(),
            index: FxHashMap::default(),
            pieces: Vec::new(),
            need: Vec::new(),
            stale: Vec::new(),
            writes: Ops::new(),
            rewrites: Vec::new(),
            done: Vec::new(),
            heads: Vec::new(),
            completed: Vec::new(),
            taken: Vec::new(),
            stage: 0,
            scratch: Vec::new(),
            kept: Vec::new(),
            orphans: Vec::new(),
            // Random (std's per-process hash keys), not the clock: two
            // instances racing on a datagram must draw different nonces.
            nonce_seed: std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                ns,
            ) as u32,
            nonces: 0,
        }
    }

    /// What happened so far.
    pub fn counters(&self) -> &DefragCounters {
        &self.counters
    }

    /// Takes the fragments `take` names (indices into `batch`, in order; each
    /// a live IPv4 or IPv6 fragment), records their bytes, and hands every
    /// datagram one of them completes to `streams`. Drops fragments only as
    /// the policy says, with `stage` as the drop stage.
    pub fn process(
        &mut self,
        batch: &mut Batch,
        take: &[u32],
        store: &mut dyn StateStore,
        streams: &mut Streams,
        stage: u8,
    ) -> Result<(), crate::ReassemblyError> {
        self.ops.clear();
        self.entries.clear();
        self.index.clear();
        self.pieces.clear();
        self.need.clear();
        self.stale.clear();
        self.rewrites.clear();
        self.done.clear();
        self.heads.clear();
        self.completed.clear();
        self.taken.clear();
        self.kept.clear();
        self.orphans.clear();
        self.stage = stage;
        if take.is_empty() {
            return Ok(());
        }
        // Pass 1: one record read per datagram.
        let mut infos = Vec::with_capacity(take.len());
        for &i in take {
            let p = &batch.pkts[i as usize];
            let m = &p.meta;
            let info = frag_info(p.data(), m.l3_offset as usize, m.l3_end as usize);
            let e = info.map(|f| {
                let flow = datagram_flow(&m.flow, f.id);
                let key = Key::flow(self.ns, TABLE_FRAG, &flow, &[]);
                *self.index.entry(key).or_insert_with(|| {
                    let read = self.ops.get(key);
                    self.entries.push(Entry {
                        flow,
                        key,
                        read,
                        rec: None,
                        orig: None,
                        cas: None,
                        gen: 0,
                        batch_head: None,
                        corrupt: false,
                        dirty: false,
                        created: false,
                        block_at: None,
                        nonce: 0,
                    });
                    self.entries.len() as u32 - 1
                })
            });
            infos.push((i, info, e));
        }
        for &(i, info, e) in &infos {
            self.counters.fragments += 1;
            if info.is_none() || e.is_none() {
                self.counters.malformed_drops += 1;
                batch.pkts[i as usize].drop_by(stage, "reassembly_fragment_malformed");
            }
        }
        // The entries a round decides, and the fragments it steps (indices
        // into `infos`): at first all of them; on a retry, the datagrams
        // another instance changed under the last round, and their
        // fragments that round took.
        let mut active: Vec<u32> = (0..self.entries.len() as u32).collect();
        let mut work: Vec<usize> = (0..infos.len())
            .filter(|&k| infos[k].1.is_some() && infos[k].2.is_some())
            .collect();
        let mut lost = Vec::new();
        let ordered = store.orders_across_keys();
        for round in 1..=MAX_ROUNDS {
            if !self.ops.is_empty() {
                store.execute(&mut self.ops)?;
            }
            for &ei in &active {
                let nonce = self.next_nonce();
                let e = &mut self.entries[ei as usize];
                e.nonce = nonce;
                match self.ops.decode::<FragRecord>(e.read) {
                    Ok(Some(r)) => {
                        self.pieces
                            .extend(r.pieces.iter().map(|&(off, len, nonce)| Piece {
                                entry: ei,
                                gen: e.gen,
                                off,
                                len,
                                nonce,
                                src: Src::Stored {
                                    head: if off == 0 { r.head_len } else { 0 },
                                    op: None,
                                },
                            }));
                        e.orig = Some(r.clone());
                        e.rec = Some(r);
                    }
                    Ok(None) => {}
                    Err(_) => {
                        self.counters.corrupt_records += 1;
                        e.corrupt = true;
                    }
                }
            }
            self.ops.clear();

            // Pass 2: every fragment in order.
            for &k in &work {
                let (i, Some(f), Some(e)) = infos[k] else {
                    continue;
                };
                let gen = self.entries[e as usize].gen;
                match self.step(i, f, e, batch) {
                    Err(reason) => batch.pkts[i as usize].drop_by(stage, reason),
                    Ok(()) => self.taken.push((i, e, gen)),
                }
            }
            // A block the last round decided (its fragment is dropped, not
            // stepped again) holds in this one too.
            if round > 1 {
                for &ei in &active {
                    let e = &self.entries[ei as usize];
                    if let Some(t) = e.block_at {
                        if !e.rec.as_ref().is_some_and(|r| r.has(F_BLOCKED)) {
                            self.block(ei, t);
                        }
                    }
                }
            }

            // One round trip: the stored pieces datagrams need, then each
            // changed record's compare-and-set against what was read.
            // Another instance may have added pieces since (the fragments of
            // one datagram hash to other instances than its first).
            for q in &mut self.pieces {
                if let Src::Stored { op, .. } = &mut q.src {
                    if op.is_none() && self.need.contains(&(q.entry, q.gen)) {
                        let flow = &self.entries[q.entry as usize].flow;
                        *op = Some(self.ops.get(piece_key(self.ns, flow, q.off, q.nonce)));
                    }
                }
            }
            // The new pieces go before the swap that names them, so whoever
            // reads the record finds them. One pipeline runs in order; a
            // store that may apply keys out of order (a cluster: the pieces
            // and the record live on different nodes) gets the pieces a round
            // trip of their own first.
            if ordered {
                for &ei in &active {
                    self.write_pieces(ei, batch, false);
                }
            } else {
                self.writes.clear();
                for &ei in &active {
                    self.write_pieces(ei, batch, true);
                }
                if !self.writes.is_empty() {
                    store.execute(&mut self.writes)?;
                }
            }
            for &ei in &active {
                let e = &mut self.entries[ei as usize];
                if e.dirty && (e.rec.is_some() || e.orig.is_some()) {
                    e.cas = Some(
                        self.ops
                            .compare_and_set(e.key, e.orig.as_ref(), e.rec.as_ref()),
                    );
                }
            }
            if !self.ops.is_empty() {
                store.execute(&mut self.ops)?;
            }
            lost.clear();
            for &ei in &active {
                let swapped = self.entries[ei as usize]
                    .cas
                    .is_none_or(|op| matches!(self.ops.result(op), OpResult::Swapped(true)));
                if !swapped {
                    lost.push(ei);
                }
            }
            for &ei in &lost {
                let e = &self.entries[ei as usize];
                for q in self
                    .pieces
                    .iter()
                    .filter(|q| q.entry == ei && q.gen == e.gen)
                {
                    if let Src::Batch { .. } = q.src {
                        self.orphans
                            .push(piece_key(self.ns, &e.flow, q.off, q.nonce));
                    }
                }
            }
            if lost.is_empty() || round == MAX_ROUNDS {
                break;
            }
            // A datagram whose record changed under this round is decided
            // again from what the store now holds, with the fragments this
            // round took of it.
            self.counters.race_retries += 1;
            work.clear();
            for (k, &(i, _, e)) in infos.iter().enumerate() {
                if e.is_some_and(|e| lost.contains(&e))
                    && self.taken.iter().any(|t| t.0 == i && lost.contains(&t.1))
                {
                    work.push(k);
                }
            }
            self.forget(&lost);
            // What the winners read stays readable once `ops` is reused.
            for q in &mut self.pieces {
                if let Src::Stored { head, op: Some(op) } = q.src {
                    q.src = match self.ops.value(op) {
                        Some(v) => {
                            let at = self.kept.len() as u32;
                            self.kept.extend_from_slice(v);
                            Src::Kept {
                                head,
                                at,
                                len: v.len() as u32,
                            }
                        }
                        None => Src::Missing,
                    };
                }
            }
            self.ops.clear();
            for &ei in &lost {
                let e = &mut self.entries[ei as usize];
                e.read = self.ops.get(e.key);
                e.rec = None;
                e.orig = None;
                e.cas = None;
                e.gen += 1;
                e.batch_head = None;
                e.corrupt = false;
                e.dirty = false;
                e.created = false;
            }
            std::mem::swap(&mut active, &mut lost);
        }
        // Still changing under the last round: its fragments are dropped
        // (`reassembly_fragment_races`), never passed unrecorded.
        if !lost.is_empty() {
            for &(i, e, _) in &self.taken {
                if lost.contains(&e) {
                    self.counters.races += 1;
                    batch.pkts[i as usize].drop_by(stage, "reassembly_fragment_race");
                }
            }
            self.forget(&lost);
        }
        // What the records now say, only where they said it: the deletes
        // of pieces now over, the new records' timers; and the pieces lost
        // rounds wrote go.
        self.writes.clear();
        for k in &self.stale {
            if !lost.contains(&k.1) {
                self.writes.delete(k.0);
            }
        }
        for k in &self.orphans {
            self.writes.delete(*k);
        }
        for (ei, e) in self.entries.iter().enumerate() {
            let Some(r) = e.rec.as_ref().filter(|_| !lost.contains(&(ei as u32))) else {
                continue;
            };
            let deadline = r.first_seen.saturating_add(self.cfg.timeout_ns);
            if e.created {
                self.writes.arm_timer(e.key, deadline);
            }
        }
        if !self.writes.is_empty() {
            store.execute(&mut self.writes)?;
        }

        // Bytes over earlier ones become the earlier ones.
        let mut buf = std::mem::take(&mut self.scratch);
        for k in 0..self.rewrites.len() {
            let rw = self.rewrites[k];
            buf.clear();
            let ok = self.bytes(
                rw.entry,
                rw.gen,
                rw.off as usize,
                rw.len as usize,
                batch,
                &mut buf,
            );
            let p = &mut batch.pkts[rw.pkt as usize];
            if !p.is_live() {
                continue;
            }
            streams.overlapped.push(rw.pkt);
            if ok {
                let at = rw.at as usize;
                let frame = p.data_mut();
                if frame[at..at + buf.len()] != buf[..] {
                    frame[at..at + buf.len()].copy_from_slice(&buf);
                    self.counters.overlap_rewrites += 1;
                }
            } else {
                self.counters.lost += 1;
                p.drop_by(stage, "reassembly_fragment_lost");
            }
        }
        self.scratch = buf;
        streams.overlapped.sort_unstable();
        streams.overlapped.dedup();

        // Whole datagrams.
        for k in 0..self.done.len() {
            let d = self.done[k];
            let i = d.pkt as usize;
            if !batch.pkts[i].is_live() {
                continue;
            }
            let start = streams.arena.len();
            let mut arena = std::mem::take(&mut streams.arena);
            let ok = self.assemble(&d, batch, &mut arena);
            streams.arena = arena;
            if ok {
                streams.datagrams.push(Datagram {
                    pkt: d.pkt,
                    start: start as u32,
                    len: (streams.arena.len() - start) as u32,
                });
                self.counters.datagrams += 1;
                let flow = self.entries[d.entry as usize].flow;
                self.completed
                    .push((d.pkt, d.entry, d.gen, flow, d.first_seen));
            } else {
                streams.arena.truncate(start);
                self.counters.lost += 1;
                batch.pkts[i].drop_by(stage, "reassembly_fragment_lost");
            }
        }
        Ok(())
    }

    /// A stored piece's value as read (head included); None if it is in
    /// the batch, unread or missing.
    fn stored(&self, q: &Piece) -> Option<&[u8]> {
        match q.src {
            Src::Stored { op: Some(op), .. } => self.ops.value(op),
            Src::Kept { at, len, .. } => Some(&self.kept[at as usize..(at + len) as usize]),
            _ => None,
        }
    }

    /// A fresh nonce, never 0.
    fn next_nonce(&mut self) -> u32 {
        self.nonces = self.nonces.wrapping_add(1);
        match self
            .nonce_seed
            .wrapping_add(self.nonces.wrapping_mul(0x9e37_79b9))
        {
            0 => 1,
            n => n,
        }
    }

    /// Queues the puts and timers of the pieces entry `ei`'s current record
    /// gained in this batch, on `writes` if `apart`, else on `ops`.
    fn write_pieces(&mut self, ei: u32, batch: &Batch, apart: bool) {
        let ops = if apart {
            &mut self.writes
        } else {
            &mut self.ops
        };
        let e = &self.entries[ei as usize];
        let Some(r) = e.rec.as_ref() else {
            return;
        };
        let deadline = r.first_seen.saturating_add(self.cfg.timeout_ns);
        for q in self
            .pieces
            .iter()
            .filter(|q| q.entry == ei && q.gen == e.gen)
        {
            let Src::Batch { pkt, at } = q.src else {
                continue;
            };
            let frame = batch.pkts[pkt as usize].data();
            let data = &frame[at as usize..at as usize + q.len as usize];
            let key = piece_key(self.ns, &e.flow, q.off, q.nonce);
            match e.batch_head.filter(|_| q.off == 0) {
                Some((hs, hl)) => {
                    self.scratch.clear();
                    self.scratch
                        .extend_from_slice(&self.heads[hs as usize..][..hl as usize]);
                    self.scratch.extend_from_slice(data);
                    ops.put(key, &self.scratch);
                }
                None => {
                    ops.put(key, data);
                }
            }
            // Pieces expire on their own too: a record lost or damaged
            // never leaves its pieces behind.
            ops.arm_timer(key, deadline);
        }
    }

    /// Forgets what the batch decided of entries `lost` (their records'
    /// swaps did not take effect).
    fn forget(&mut self, lost: &[u32]) {
        self.pieces.retain(|q| !lost.contains(&q.entry));
        self.need.retain(|n| !lost.contains(&n.0));
        self.stale.retain(|s| !lost.contains(&s.1));
        self.rewrites.retain(|w| !lost.contains(&w.entry));
        self.done.retain(|d| !lost.contains(&d.entry));
        self.taken.retain(|t| !lost.contains(&t.1));
    }

    /// The pieces of datagram (`entry`, `gen`).
    fn of(&self, entry: u32, gen: u32) -> impl Iterator<Item = &Piece> {
        self.pieces
            .iter()
            .filter(move |q| q.entry == entry && q.gen == gen)
    }

    /// Decides one fragment; `Err` is its drop reason.
    fn step(&mut self, i: u32, f: FragInfo, ei: u32, batch: &Batch) -> Result<(), &'static str> {
        let p = &batch.pkts[i as usize];
        let now = p.ts_ns;
        if self.entries[ei as usize].corrupt {
            return Err("reassembly_state_corrupt");
        }
        // Past the timeout at this fragment's time: a new datagram.
        let timeout = self.cfg.timeout_ns;
        if self.entries[ei as usize]
            .rec
            .as_ref()
            .is_some_and(|r| r.first_seen.saturating_add(timeout) <= now)
        {
            self.over(ei);
            self.entries[ei as usize].dirty = true;
        }
        let e = &self.entries[ei as usize];
        if e.rec.as_ref().is_some_and(|r| r.has(F_BLOCKED)) {
            self.counters.blocked_drops += 1;
            return Err("reassembly_fragment_blocked");
        }
        let gen = e.gen;
        // A fragment that is not the last must carry a multiple of 8
        // bytes. Linux takes an IPv4 one's first multiple of 8 and ignores
        // the rest, as this does; IPv6 receivers discard it (RFC 8200).
        let mut f = f;
        if f.more && !f.len.is_multiple_of(8) && f.v6_nh.is_none() {
            f.len &= !7;
        }
        let (start, end) = (f.off as usize, f.off as usize + f.len as usize);
        let l3 = p.meta.l3_offset as usize;
        // The IP header the datagram will carry: IPv4's, or IPv6's fixed
        // header and the extension headers before the Fragment header.
        let head_len = match f.v6_nh {
            Some(_) => f.data_at as usize - 8 - l3,
            None => f.data_at as usize - l3,
        };
        // IPv4's total length counts its header; IPv6's payload length does
        // not count the fixed header.
        let fixed = if f.v6_nh.is_some() {
            sluice_wire::ipv6::HEADER_LEN
        } else {
            0
        };
        let held_end = self.of(ei, gen).map(Piece::end).max().unwrap_or(0);
        let rec = e.rec.as_ref();
        let last = rec.is_some_and(|r| r.has(F_LAST));
        let rec_end = rec.map_or(0, |r| r.end as usize);
        let malformed = f.len == 0
            || (f.more && !f.len.is_multiple_of(8))
            || head_len - fixed + end > MAX_DATAGRAM
            || (!f.more && last && rec_end != end)
            || (last && end > rec_end)
            || (!f.more && held_end > end);
        if malformed {
            self.counters.malformed_drops += 1;
            self.block(ei, now);
            return Err("reassembly_fragment_malformed");
        }
        if rec.map_or(0, |r| r.fragments as usize) >= self.cfg.max_fragments {
            self.counters.limit_drops += 1;
            self.block(ei, now);
            return Err("reassembly_fragment_limit");
        }
        // The parts of [start, end) no earlier piece covers become pieces;
        // the covered parts are rewritten to the earlier bytes.
        let mut covered: Vec<(usize, usize)> = self
            .of(ei, gen)
            .map(|q| (q.off as usize, q.end()))
            .filter(|&(a, b)| a < end && b > start)
            .collect();
        covered.sort_unstable();
        let mut new = Vec::new();
        let mut at = start;
        for &(a, b) in &covered {
            if a > at {
                new.push((at, a));
            }
            at = at.max(b);
        }
        if at < end {
            new.push((at, end));
        }
        let held = rec.map_or(0, |r| r.pieces.len());
        if held + new.len() > MAX_PIECES {
            self.counters.limit_drops += 1;
            self.block(ei, now);
            return Err("reassembly_fragment_limit");
        }
        for &(a, b) in &covered {
            let (x, y) = (a.max(start), b.min(end));
            self.rewrites.push(Rewrite {
                entry: ei,
                gen,
                pkt: i,
                at: f.data_at + (x - start) as u32,
                off: x as u16,
                len: (y - x) as u16,
            });
        }
        if !covered.is_empty() && !self.need.contains(&(ei, gen)) {
            self.need.push((ei, gen));
        }
        let e = &mut self.entries[ei as usize];
        e.dirty = true;
        if e.rec.is_none() {
            e.created = true;
        }
        let r = e.rec.get_or_insert_with(|| FragRecord {
            first_seen: now,
            ..FragRecord::default()
        });
        r.fragments += 1;
        let nonce = e.nonce;
        for &(a, b) in &new {
            self.pieces.push(Piece {
                entry: ei,
                gen,
                off: a as u16,
                len: (b - a) as u16,
                nonce,
                src: Src::Batch {
                    pkt: i,
                    at: f.data_at + (a - start) as u32,
                },
            });
            r.pieces.push((a as u16, (b - a) as u16, nonce));
        }
        if !f.more {
            r.flags |= F_LAST;
            r.end = end as u32;
        }
        if f.off == 0 && !r.has(F_HEAD) {
            r.flags |= F_HEAD;
            r.head_len = head_len as u16;
            let hs = self.heads.len();
            self.heads.extend_from_slice(&p.data()[l3..l3 + head_len]);
            let h = &mut self.heads[hs..];
            match f.v6_nh {
                // The Fragment header goes: what pointed at it names what
                // followed it.
                Some((nh_at, nh)) => h[nh_at as usize] = nh,
                // A whole datagram: no flags, offset 0, as Suricata's
                // reassembly writes it (`ip_off = 0`, DF cleared too); the
                // datagram is inspected, never forwarded.
                None => {
                    h[6] = 0;
                    h[7] = 0;
                }
            }
            e.batch_head = Some((hs as u32, head_len as u16));
        }
        let total: usize = r.pieces.iter().map(|&(_, l, _)| l as usize).sum();
        // Pieces are disjoint and end by `end`, so their lengths add up to
        // it exactly when they cover it.
        if r.has(F_LAST) && r.has(F_HEAD) && total == r.end as usize {
            self.done.push(Done {
                entry: ei,
                gen,
                pkt: i,
                first_seen: r.first_seen,
                head_len: r.head_len,
                head_from_batch: e.batch_head,
                end: r.end,
            });
            if !self.need.contains(&(ei, gen)) {
                self.need.push((ei, gen));
            }
            // The datagram leaves the store; a fragment with its
            // identification after it starts a new one, as at a receiver.
            self.over(ei);
        }
        Ok(())
    }

    /// Ends entry `ei`'s current datagram (completed or expired): its stored
    /// pieces go (after any read), and the next fragment starts a new one.
    fn over(&mut self, ei: u32) {
        let e = &self.entries[ei as usize];
        let gen = e.gen;
        for q in self.pieces.iter().filter(|q| q.entry == ei && q.gen == gen) {
            if !matches!(q.src, Src::Batch { .. }) {
                self.stale
                    .push((piece_key(self.ns, &e.flow, q.off, q.nonce), ei));
            }
        }
        let e = &mut self.entries[ei as usize];
        e.rec = None;
        e.created = false;
        e.batch_head = None;
        e.gen += 1;
    }

    /// Blocks entry `ei`'s datagram: its pieces go, a blocked record stays
    /// until the timeout.
    fn block(&mut self, ei: u32, now: u64) {
        let first_seen = self.entries[ei as usize]
            .rec
            .as_ref()
            .map_or(now, |r| r.first_seen);
        let created = self.entries[ei as usize].rec.is_none();
        self.over(ei);
        let e = &mut self.entries[ei as usize];
        e.block_at = Some(now);
        e.rec = Some(FragRecord {
            flags: F_BLOCKED,
            first_seen,
            ..FragRecord::default()
        });
        e.created = created;
        e.dirty = true;
    }

    /// Appends bytes `[off, off + len)` of datagram (`ei`, `gen`) to `out`;
    /// false if some are missing (a stored piece lost or damaged).
    fn bytes(
        &self,
        ei: u32,
        gen: u32,
        off: usize,
        len: usize,
        batch: &Batch,
        out: &mut Vec<u8>,
    ) -> bool {
        let end = off + len;
        let mut at = off;
        while at < end {
            let Some(q) = self
                .of(ei, gen)
                .find(|q| q.off as usize <= at && at < q.end())
            else {
                return false;
            };
            let skip = at - q.off as usize;
            let take = q.end().min(end) - at;
            match q.src {
                Src::Batch { pkt, at: fa } => {
                    let s = fa as usize + skip;
                    out.extend_from_slice(&batch.pkts[pkt as usize].data()[s..s + take]);
                }
                _ => {
                    let head = q.head() as usize;
                    let Some(v) = self.stored(q) else {
                        return false;
                    };
                    if v.len() != head + q.len as usize {
                        return false;
                    }
                    out.extend_from_slice(&v[head + skip..head + skip + take]);
                }
            }
            at += take;
        }
        true
    }

    /// Appends datagram `d` as an Ethernet frame to `out`; false if bytes
    /// are missing.
    fn assemble(&self, d: &Done, batch: &Batch, out: &mut Vec<u8>) -> bool {
        let p = &batch.pkts[d.pkt as usize];
        let at = out.len();
        let frame = p.data();
        // The completing fragment's addresses and its IP version's
        // EtherType: any tags or tunnel it came in stay with the fragments.
        match frame.get(..12).filter(|_| p.meta.l3_offset >= 14) {
            Some(mac) => out.extend_from_slice(mac),
            None => out.extend_from_slice(&[0; 12]),
        }
        let v6 = frame.get(p.meta.l3_offset as usize).map(|b| b >> 4) == Some(6);
        out.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        let hl = d.head_len as usize;
        match d.head_from_batch {
            Some((hs, l)) => out.extend_from_slice(&self.heads[hs as usize..][..l as usize]),
            None => {
                let stored = self
                    .of(d.entry, d.gen)
                    .find(|q| q.off == 0)
                    .and_then(|q| self.stored(q));
                match stored {
                    Some(v) if v.len() >= hl => out.extend_from_slice(&v[..hl]),
                    _ => return false,
                }
            }
        }
        if !self.bytes(d.entry, d.gen, 0, d.end as usize, batch, out) {
            return false;
        }
        let ip = at + 14;
        if v6 {
            let pl = (out.len() - ip - sluice_wire::ipv6::HEADER_LEN) as u16;
            out[ip + 4..ip + 6].copy_from_slice(&pl.to_be_bytes());
        } else {
            let total = (out.len() - ip) as u16;
            out[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
            out[ip + 10..ip + 12].fill(0);
            let c = sluice_wire::checksum::fold(sluice_wire::checksum::sum(0, &out[ip..ip + hl]));
            out[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        }
        true
    }

    /// After every function decided the batch: a datagram whose completing
    /// fragment was dropped is blocked until its timeout, so no receiver,
    /// still holding its other fragments, ever completes it; fragments with
    /// its identification later in the batch (a resent copy of the dropped
    /// one would complete it there) are dropped too.
    pub fn finish(
        &mut self,
        batch: &mut Batch,
        store: &mut dyn StateStore,
    ) -> Result<(), crate::ReassemblyError> {
        if self.completed.is_empty() {
            return Ok(());
        }
        self.ops.clear();
        for &(pkt, entry, gen, flow, first_seen) in &self.completed {
            if batch.pkts.get(pkt as usize).is_none_or(|p| p.is_live()) {
                continue;
            }
            for &(i, e, g) in &self.taken {
                if e == entry && g > gen {
                    if let Some(p) = batch.pkts.get_mut(i as usize).filter(|p| p.is_live()) {
                        self.counters.blocked_drops += 1;
                        p.drop_by(self.stage, "reassembly_fragment_blocked");
                    }
                }
            }
            let key = Key::flow(self.ns, TABLE_FRAG, &flow, &[]);
            let r = FragRecord {
                flags: F_BLOCKED,
                first_seen,
                ..FragRecord::default()
            };
            self.ops.put_value(key, &r);
            self.ops
                .arm_timer(key, first_seen.saturating_add(self.cfg.timeout_ns));
            self.counters.blocked_datagrams += 1;
        }
        self.completed.clear();
        self.taken.clear();
        if !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
        }
        Ok(())
    }

    /// Handles the timer of `key` that fired at `now_ns` if it is one of the
    /// defragmenter's (a record's or a piece's), given the key's stored
    /// value; queues what follows on `ops`. False if it is not.
    pub fn expire(&mut self, key: &Key, value: Option<&[u8]>, now_ns: u64, ops: &mut Ops) -> bool {
        match key.table() {
            TABLE_FRAG_PIECE => {
                ops.delete(*key);
                true
            }
            TABLE_FRAG => {
                let rec = value.and_then(|v| {
                    let mut r = Reader::new(v);
                    FragRecord::decode(&mut r).ok()
                });
                match rec {
                    Some(r) if r.first_seen.saturating_add(self.cfg.timeout_ns) > now_ns => {
                        ops.arm_timer(*key, r.first_seen + self.cfg.timeout_ns);
                    }
                    Some(r) => {
                        if let Some(flow) = key.flow_key() {
                            for &(off, _, nonce) in &r.pieces {
                                ops.delete(piece_key(self.ns, &flow, off, nonce));
                            }
                        }
                        ops.delete(*key);
                        self.counters.expired += 1;
                    }
                    None => {
                        ops.delete(*key);
                    }
                }
                true
            }
            _ => false,
        }
    }
}
