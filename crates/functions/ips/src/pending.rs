//! Pending units: the bytes of an HTTP head, a TLS handshake unit or a DNS
//! message that a TCP segment ended inside, kept in the store until the
//! direction's next in-order stream bytes complete it.
//!
//! The application-layer parsers inspect whole units. A unit split across
//! segments (a browser's ~1.8 KB ClientHello, a certificate chain, an HTTP
//! request cut by an attacker) would otherwise never be inspected. Its bytes
//! live, like every other byte of per-flow state, in the store: one blob per
//! flow and direction in table [`TABLE_PEND`], key = canonical flow and the
//! direction byte (0: to server). The flow record says a blob exists, its
//! length and the stream position it ends at ([`Pend`]), so the blob is read
//! only for flows that have one and only in batches bringing that direction
//! new stream bytes: one extra round trip for the whole batch
//! (`Ips::read_pending`), none when no flow of the batch has one.
//!
//! A blob is deleted when its unit completes, when a gap
//! ([`sluice_nf::StreamChunk::gap`]) or a stream position that does not
//! continue it shows bytes were lost (`ips_pending_discarded`), when its
//! record expires, and by its own timer (armed at every write, like the
//! record's). A unit over its protocol's bound ([`crate::http::MAX_HEAD`],
//! [`MAX_TLS_UNIT`], [`MAX_DNS_UNIT`]) stops that protocol's parsing of the
//! direction, counted (`ips_pending_overflow`): the blob never grows past the
//! bound.
//!
//! The same blob holds, while an HTTP message's body is being received, that
//! body so far (up to `http_body_limit`), the message's head and the body
//! rules already fired on it ([`HTTP_BODY`], [`crate::http::body`]): body
//! rules inspect the body accumulated, as Suricata's do.

use sluice_state::{DecodeError, Key, Namespace, Reader, Writer};
use sluice_wire::FlowKey;

use crate::Ips;

/// Table of pending-unit blobs.
pub const TABLE_PEND: u8 = 3;

/// The largest TLS unit kept (a handshake message, with a ServerHello the
/// Certificate message after it): 64 KiB. A TLS record holds at most 16 KiB,
/// and a Certificate message is parsed only whole in its record, so a bigger
/// unit would not be parsed anyway; the bound leaves room for the record
/// headers and a ServerHello before the Certificate.
pub const MAX_TLS_UNIT: usize = 64 * 1024;
/// The largest DNS-over-TCP unit: the 2-byte length prefix and a message of
/// at most 65,535 bytes (RFC 1035 §4.2.2).
pub const MAX_DNS_UNIT: usize = 2 + 65535;

/// No pending unit.
pub const NONE: u8 = 0;
/// An HTTP message head ([`crate::http`]).
pub const HTTP: u8 = 1;
/// A TLS handshake unit ([`crate::tls::unit`]).
pub const TLS: u8 = 2;
/// A DNS-over-TCP message with its length prefix ([`crate::dns::unit`]);
/// with length 0, no bytes are pending but a DNS message ended at `end`, so
/// the next one may start there.
pub const DNS: u8 = 3;
/// The body of the HTTP message being received, with its head and the body
/// rules that fired on it ([`crate::http::body`]); records of version 5 on.
pub const HTTP_BODY: u8 = 4;
/// The SMTP client's reader and the attachment being received, with the
/// rules that fired on it ([`crate::smtp`]); records of version 9 on.
pub const SMTP: u8 = 5;
/// No bytes: on an FTP flow, `end` is the stream position where the
/// direction's current line started ([`crate::ftp`]); records of version
/// 14 on.
pub const FTP: u8 = 6;

/// A direction's pending unit as the flow record describes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pend {
    /// [`NONE`], [`HTTP`], [`TLS`], [`DNS`], [`HTTP_BODY`], [`SMTP`] or
    /// [`FTP`].
    pub kind: u8,
    /// Bytes in the blob.
    pub len: u32,
    /// Stream position just after the blob's last byte, modulo 2^32: the
    /// next stream bytes continue the unit only if they start here.
    pub end: u32,
}

impl Pend {
    /// Bytes [`encode`](Pend::encode) writes: 1, or 9 with a unit.
    pub fn encoded_len(&self) -> usize {
        if self.kind == NONE {
            1
        } else {
            9
        }
    }

    /// Appends the description to a record.
    pub fn encode(&self, w: &mut Writer<'_>) {
        w.u8(self.kind);
        if self.kind != NONE {
            w.u32(self.len).u32(self.end);
        }
    }

    /// Reads what [`encode`](Pend::encode) wrote in a record of `version`
    /// (which tells the kinds it knows: [`HTTP_BODY`] from 5, [`SMTP`]
    /// from 9, [`FTP`] from 14).
    pub fn decode(r: &mut Reader<'_>, version: u8) -> Result<Pend, DecodeError> {
        let kind = r.u8()?;
        if kind > FTP
            || (kind == HTTP_BODY && version < 5)
            || (kind == SMTP && version < 9)
            || (kind == FTP && version < 14)
        {
            return Err(DecodeError("unknown ips pending unit kind"));
        }
        if kind == NONE {
            return Ok(Pend::default());
        }
        let len = r.u32()?;
        let max = match kind {
            HTTP => crate::http::MAX_HEAD as usize,
            TLS => MAX_TLS_UNIT,
            DNS => MAX_DNS_UNIT,
            SMTP => crate::smtp::MAX_BLOB,
            FTP => 0,
            _ => crate::http::body::MAX_BLOB,
        };
        if len as usize > max {
            return Err(DecodeError("ips pending unit over its bound"));
        }
        Ok(Pend {
            kind,
            len,
            end: r.u32()?,
        })
    }

    /// True if a blob holds bytes for this unit.
    pub fn has_blob(&self) -> bool {
        self.kind != NONE && self.len > 0
    }
}

/// How far bytes at a unit's start make up a unit ([`crate::tls::unit`],
/// [`crate::dns::unit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Not the start of a unit this protocol inspects.
    Not,
    /// The start of one, which needs more bytes.
    Need,
    /// A whole unit of this many bytes.
    Whole(usize),
    /// A unit larger than the protocol's bound.
    Over,
}

/// The key of the pending blob of direction `d` (0: to server) of the flow
/// whose canonical key is `canon`.
pub fn key(ns: Namespace, canon: &FlowKey, d: usize) -> Key {
    Key::flow(ns, TABLE_PEND, canon, &[d as u8])
}

/// No slot ([`PendBatch::of`]).
const NO_SLOT: u32 = u32::MAX;

/// The batch's pending bytes in memory: per record and direction a slot
/// holding the blob as read (or as the batch's packets left it). Buffers
/// are reused across batches.
#[derive(Default)]
pub(crate) struct PendBatch {
    /// Per record of the batch: the slot of each direction, or [`NO_SLOT`].
    of: Vec<[u32; 2]>,
    bufs: Vec<Vec<u8>>,
    /// Per slot: how many of its first bytes are known to be the blob the
    /// store holds (read this batch and not changed since), so the write
    /// step can append the rest instead of writing the blob whole.
    stored: Vec<u32>,
    used: usize,
    /// The record of the packet being decided.
    pub cur: u32,
}

impl PendBatch {
    /// Forgets every slot for a batch of `records` records.
    pub fn reset(&mut self, records: usize) {
        self.of.clear();
        self.of.resize(records, [NO_SLOT; 2]);
        self.used = 0;
        self.cur = NO_SLOT;
    }

    /// A cleared slot for direction `d` of record `rec`, made if it has none.
    pub fn slot(&mut self, rec: u32, d: usize) -> &mut Vec<u8> {
        let s = &mut self.of[rec as usize][d];
        if *s == NO_SLOT {
            if self.used == self.bufs.len() {
                self.bufs.push(Vec::new());
                self.stored.push(0);
            }
            *s = self.used as u32;
            self.used += 1;
        }
        self.stored[*s as usize] = 0;
        let b = &mut self.bufs[*s as usize];
        b.clear();
        b
    }

    /// Says the first `n` bytes of direction `d` of record `rec`'s slot are
    /// the blob the store holds (just read).
    pub fn set_stored(&mut self, rec: u32, d: usize, n: usize) {
        if let Some(&s) = self.of.get(rec as usize).and_then(|s| s.get(d)) {
            if s != NO_SLOT {
                self.stored[s as usize] = n as u32;
            }
        }
    }

    /// How many of the first bytes of direction `d` of record `rec` are the
    /// blob the store holds ([`PendBatch::set_stored`]), 0 if unknown.
    pub fn stored(&self, rec: u32, d: usize) -> usize {
        match self.of.get(rec as usize).and_then(|s| s.get(d)) {
            Some(&s) if s != NO_SLOT => self.stored[s as usize] as usize,
            _ => 0,
        }
    }

    /// The bytes of direction `d` of the current record, if it has a slot.
    pub fn get(&self, d: usize) -> Option<&Vec<u8>> {
        let s = *self.of.get(self.cur as usize)?.get(d)?;
        (s != NO_SLOT).then(|| &self.bufs[s as usize])
    }

    /// Takes the bytes of direction `d` of record `rec` out of its slot
    /// (None without one), leaving the slot empty.
    pub fn take_of(&mut self, rec: u32, d: usize) -> Option<Vec<u8>> {
        let s = *self.of.get(rec as usize)?.get(d)?;
        (s != NO_SLOT).then(|| std::mem::take(&mut self.bufs[s as usize]))
    }

    /// The bytes of direction `d` of record `rec`, if it has a slot.
    pub fn of(&self, rec: u32, d: usize) -> Option<&[u8]> {
        let s = *self.of.get(rec as usize)?.get(d)?;
        (s != NO_SLOT).then(|| &self.bufs[s as usize][..])
    }

    /// Takes the buffer of direction `d` of the current record out (empty if
    /// it has no slot); give it back with [`PendBatch::put`].
    pub fn take(&mut self, d: usize) -> Vec<u8> {
        match self.of.get(self.cur as usize).map(|s| s[d]) {
            Some(s) if s != NO_SLOT => std::mem::take(&mut self.bufs[s as usize]),
            _ => Vec::new(),
        }
    }

    /// Empties direction `d`'s bytes of the current record, keeping the
    /// buffer.
    pub fn clear(&mut self, d: usize) {
        if let Some(s) = self.of.get(self.cur as usize).map(|s| s[d]) {
            if s != NO_SLOT {
                self.bufs[s as usize].clear();
                self.stored[s as usize] = 0;
            }
        }
    }

    /// True if direction `d` of record `rec` has a slot.
    pub fn has(&self, rec: u32, d: usize) -> bool {
        self.of.get(rec as usize).is_some_and(|s| s[d] != NO_SLOT)
    }

    /// Gives back a buffer taken by [`PendBatch::take`] as direction `d`'s
    /// bytes of the current record (kept only if it holds bytes or the
    /// record had a slot, so an empty take allocates nothing), with nothing
    /// known of what the store holds.
    pub fn put(&mut self, d: usize, buf: Vec<u8>) {
        self.put_kept(d, buf, 0);
    }

    /// [`PendBatch::put`] of a buffer whose first `kept` bytes are those
    /// [`PendBatch::take`] gave (what was known to be stored stays known up
    /// to there).
    pub fn put_kept(&mut self, d: usize, buf: Vec<u8>, kept: usize) {
        let cur = self.cur;
        let Some(s) = self.of.get(cur as usize).map(|s| s[d]) else {
            return;
        };
        if s != NO_SLOT {
            self.bufs[s as usize] = buf;
            let st = &mut self.stored[s as usize];
            *st = (*st).min(kept as u32);
        } else if !buf.is_empty() {
            let b = self.slot(cur, d);
            *b = buf;
        }
    }
}

impl Ips {
    /// Bytes pending for direction `d` of the current record, if the record
    /// says a unit of `kind` is pending, its bytes were read and they end at
    /// stream position `base` (where the new bytes start).
    pub(crate) fn pend_ok(
        &self,
        st: &crate::engine::FlowState,
        d: usize,
        kind: u8,
        base: u64,
    ) -> bool {
        let p = st.pend[d];
        p.kind == kind
            && p.end == base as u32
            && (p.len == 0 || self.pend.get(d).is_some_and(|b| b.len() == p.len as usize))
    }

    /// Forgets direction `d`'s pending unit: counted as discarded if it held
    /// bytes and `count`.
    pub(crate) fn pend_drop(&mut self, st: &mut crate::engine::FlowState, d: usize, count: bool) {
        if st.pend[d].kind == NONE {
            return;
        }
        // A blob the store did not return was counted lost already.
        let held = self
            .pend
            .get(d)
            .is_some_and(|b| b.len() == st.pend[d].len as usize);
        if count && st.pend[d].len > 0 && held {
            self.counters.pending_discarded += 1;
        }
        st.pend[d] = Pend::default();
        self.pend.clear(d);
    }

    /// Keeps `held` as direction `d`'s pending unit of `kind`, ending just
    /// before stream position `end`: the record describes it and the blob
    /// goes to the store with the batch's writes. `kept`: how many of
    /// `held`'s first bytes are those the pending buffer gave (taken from
    /// [`PendBatch::take`] and not changed), so that a blob which only grew
    /// is sent as its new bytes.
    pub(crate) fn pend_save(
        &mut self,
        st: &mut crate::engine::FlowState,
        d: usize,
        kind: u8,
        (held, kept): (Vec<u8>, usize),
        end: u64,
    ) {
        st.pend[d] = Pend {
            kind,
            len: held.len() as u32,
            end: end as u32,
        };
        self.counters.pending_saved += 1;
        self.pend.put_kept(d, held, kept);
    }
}

/// Bytes of blobs an instance keeps in memory at most ([`BlobCache`]).
pub const CACHED_BYTES: usize = 32 << 20;
/// Blobs an instance keeps in memory at most.
pub const CACHED_BLOBS: usize = 4096;

/// The blobs this instance wrote last, by flow and direction, so that the
/// flow's next batch on it need not read back what it wrote: a body's
/// packets would each read the whole body so far out of the store (with a
/// local store an eighth of the IPS's time on the bench's HTTP mix, over
/// the network the body each time). A kept blob is used only if the flow's
/// record, as this batch read it, still describes it: the same unit
/// ([`Pend`]: kind, length, end) and the same `last_seen`, which any
/// instance writing the record since would have moved (a blob changes only
/// with its record). Anything else, or a miss, reads the store as before;
/// the store stays the truth, so another instance continues the flow.
#[derive(Default)]
pub(crate) struct BlobCache {
    map: rustc_hash::FxHashMap<(FlowKey, u8), Kept>,
    bytes: usize,
}

struct Kept {
    pend: Pend,
    last_seen: u64,
    bytes: Vec<u8>,
}

impl BlobCache {
    /// The blob of direction `d` of flow `canon` if this instance wrote it
    /// under exactly `pend` and `last_seen`; taken out either way.
    pub fn take(
        &mut self,
        canon: &FlowKey,
        d: usize,
        pend: Pend,
        last_seen: u64,
    ) -> Option<Vec<u8>> {
        if self.map.is_empty() {
            return None;
        }
        let k = self.map.remove(&(*canon, d as u8))?;
        self.bytes -= k.bytes.capacity();
        (k.pend == pend && k.last_seen == last_seen && k.bytes.len() == pend.len as usize)
            .then_some(k.bytes)
    }

    /// Keeps `bytes`, the blob just written for direction `d` of flow
    /// `canon` under `pend` and `last_seen` (arbitrary blobs go past the
    /// bounds; one bigger than all of them is not kept).
    pub fn keep(
        &mut self,
        canon: &FlowKey,
        d: usize,
        (pend, last_seen): (Pend, u64),
        bytes: Vec<u8>,
    ) {
        let size = bytes.capacity();
        if size > CACHED_BYTES {
            return;
        }
        if let Some(old) = self.map.remove(&(*canon, d as u8)) {
            self.bytes -= old.bytes.capacity();
        }
        while self.bytes + size > CACHED_BYTES || self.map.len() >= CACHED_BLOBS {
            let Some(k) = self.map.keys().next().copied() else {
                break;
            };
            if let Some(old) = self.map.remove(&k) {
                self.bytes -= old.bytes.capacity();
            }
        }
        self.bytes += size;
        self.map.insert(
            (*canon, d as u8),
            Kept {
                pend,
                last_seen,
                bytes,
            },
        );
    }

    /// Forgets every blob (a batch whose writes failed).
    pub fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }

    /// Blobs kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(port: u16) -> FlowKey {
        let (k, _) = sluice_wire::parse::parse_frame(&sluice_wire::build::tcp_v4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            port,
            80,
            1,
            0,
            0,
            b"",
        ))
        .unwrap()
        .flow
        .canonical();
        k
    }

    #[test]
    fn a_kept_blob_is_given_back_only_under_the_same_record() {
        let mut c = BlobCache::default();
        let f = flow(40000);
        let pend = Pend {
            kind: HTTP_BODY,
            len: 3,
            end: 100,
        };
        c.keep(&f, 0, (pend, 7), b"abc".to_vec());
        // Another direction, another time, another unit: not it (and the
        // asking takes it out).
        assert_eq!(c.take(&f, 1, pend, 7), None);
        assert_eq!(c.take(&f, 0, pend, 8), None);
        assert_eq!(c.len(), 0);
        c.keep(&f, 0, (pend, 7), b"abc".to_vec());
        let moved = Pend { end: 101, ..pend };
        assert_eq!(c.take(&f, 0, moved, 7), None);
        c.keep(&f, 0, (pend, 7), b"abc".to_vec());
        assert_eq!(c.take(&f, 0, pend, 7), Some(b"abc".to_vec()));
        assert_eq!(c.take(&f, 0, pend, 7), None);
    }

    #[test]
    fn the_cache_stays_within_its_bounds() {
        let mut c = BlobCache::default();
        let pend = Pend {
            kind: HTTP_BODY,
            len: 1 << 20,
            end: 0,
        };
        for p in 0..100u16 {
            c.keep(&flow(30000 + p), 0, (pend, 1), vec![0; 1 << 20]);
            assert!(c.bytes <= CACHED_BYTES);
        }
        assert_eq!(c.len(), CACHED_BYTES >> 20);
        for p in 0..(CACHED_BLOBS as u16 + 10) {
            c.keep(&flow(p), 1, (Pend { len: 1, ..pend }, 1), vec![1]);
            assert!(c.len() <= CACHED_BLOBS);
        }
        c.keep(&flow(1), 0, (pend, 1), vec![0; CACHED_BYTES + 1]);
        assert!(c.bytes <= CACHED_BYTES);
        c.clear();
        assert_eq!((c.len(), c.bytes), (0, 0));
    }
}
