//! The stored connection record and its byte layout.

use sluice_state::{Codec, DecodeError, Reader, Writer};

/// Hard cap on buffered segments per direction; [`crate::Config::max_segments`] is
/// clamped to it so records have a fixed in-memory size (no allocation per packet).
pub const MAX_SEGMENTS_CAP: usize = 64;

/// Direction index of client-to-server bytes.
pub const C2S: usize = 0;
/// Direction index of server-to-client bytes.
pub const S2C: usize = 1;

pub(crate) const F_CLIENT_FWD: u8 = 1;
pub(crate) const F_SYNACK: u8 = 2;
pub(crate) const F_ESTABLISHED: u8 = 4;
pub(crate) const F_MIDSTREAM: u8 = 8;
pub(crate) const F_FIN_C: u8 = 16;
pub(crate) const F_FIN_S: u8 = 32;
pub(crate) const F_RST: u8 = 64;
/// The connection uses TCP Fast Open as Suricata sees it: the client's SYN,
/// or the SYN-ACK that synchronised the server, carried the option. Kept
/// only for stream events ([`crate::events`]), when a consumer asks for them.
pub(crate) const F_TFO: u8 = 128;

/// The `synced` byte's bit saying the handshake went otherwise than
/// Suricata follows it (a SYN from the server, or the client's SYN resent
/// with another sequence number, restarted the record before the handshake
/// completed): no stream event is decided for the record
/// ([`crate::events`]).
pub(crate) const S_ODD: u8 = 64;

/// The `synced` byte's bit saying direction `d` resynchronised and the next
/// bytes it delivers follow a gap (bits 0 and 1 say which directions are
/// synchronised).
pub(crate) const fn gap_bit(d: usize) -> u8 {
    4 << d
}

/// The `synced` byte's bit saying direction `d`'s `ts_recent` is known.
pub(crate) const fn ts_bit(d: usize) -> u8 {
    16 << d
}

/// Version 2 added `ts_recent`; version 1 records (written before) decode
/// with it unknown.
const VERSION: u8 = 2;

/// One buffered out-of-order segment: its blob lives under `(flow, dir, seq)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seg {
    pub seq: u32,
    pub len: u16,
}

/// Per-direction reassembly state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dir {
    /// Next expected sequence number.
    pub next: u32,
    /// Bytes delivered so far (the stream offset of `next`).
    pub delivered: u64,
    /// The sender's latest TCP timestamp (TSval) on an accepted data segment
    /// at the stream's left edge, as the receiver keeps it for PAWS (RFC 7323
    /// §5); valid when the `synced` byte's [`ts_bit`] is set.
    pub ts_recent: u32,
    /// Buffered segments, sorted by sequence (relative to `next`), non-overlapping,
    /// all strictly after `next`.
    pub n: u8,
    pub segs: [Seg; MAX_SEGMENTS_CAP],
}

impl Default for Dir {
    fn default() -> Self {
        Dir {
            next: 0,
            delivered: 0,
            ts_recent: 0,
            n: 0,
            segs: [Seg::default(); MAX_SEGMENTS_CAP],
        }
    }
}

impl Dir {
    pub fn segs(&self) -> &[Seg] {
        &self.segs[..self.n as usize]
    }

    pub fn buffered_bytes(&self) -> usize {
        self.segs().iter().map(|s| s.len as usize).sum()
    }

    /// How far, relative to `next`, buffered segments continue the stream
    /// without a gap: 0 unless a resynchronisation left buffered segments at or
    /// before `next` (normally they are released as soon as they are). A packet
    /// starting within that reach is in order: those segments go first.
    pub fn lead(&self) -> i64 {
        let mut cur = 0;
        for s in self.segs() {
            let r = self.rel(s.seq);
            if r > cur {
                break;
            }
            cur = cur.max(r + s.len as i64);
        }
        cur
    }

    /// Offset of `seq` relative to `next` (negative: already delivered).
    #[inline]
    pub fn rel(&self, seq: u32) -> i64 {
        seq.wrapping_sub(self.next) as i32 as i64
    }

    pub fn remove_first(&mut self) -> Seg {
        let s = self.segs[0];
        let n = self.n as usize;
        self.segs.copy_within(1..n, 0);
        self.n -= 1;
        s
    }

    /// Inserts keeping the order; the caller checked capacity.
    pub fn insert(&mut self, seg: Seg) {
        let r = self.rel(seg.seq);
        let n = self.n as usize;
        let pos = self.segs[..n]
            .iter()
            .position(|s| self.rel(s.seq) > r)
            .unwrap_or(n);
        self.segs.copy_within(pos..n, pos + 1);
        self.segs[pos] = seg;
        self.n += 1;
    }
}

/// A connection record (see the crate docs for the layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Conn {
    pub flags: u8,
    /// Bit `d` set: direction `d`'s next sequence number is known.
    pub synced: u8,
    pub last_seen: u64,
    pub dirs: [Dir; 2],
}

impl Conn {
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
    pub fn synced(&self, d: usize) -> bool {
        self.synced & (1 << d) != 0
    }
    pub fn closed(&self) -> bool {
        self.has(F_RST) || (self.has(F_FIN_C) && self.has(F_FIN_S))
    }
}

impl Codec for Conn {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(VERSION)
            .u8(self.flags)
            .u8(self.synced)
            .u64(self.last_seen);
        for d in &self.dirs {
            w.u32(d.next).u64(d.delivered).u32(d.ts_recent).u8(d.n);
            for s in d.segs() {
                w.u32(s.seq).u16(s.len);
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let version = r.u8()?;
        if version != VERSION && version != 1 {
            return Err(DecodeError("unknown reassembly record version"));
        }
        let mut c = Conn {
            flags: r.u8()?,
            synced: r.u8()?,
            last_seen: r.u64()?,
            ..Conn::default()
        };
        for d in &mut c.dirs {
            d.next = r.u32()?;
            d.delivered = r.u64()?;
            if version >= 2 {
                d.ts_recent = r.u32()?;
            }
            let n = r.u8()?;
            if n as usize > MAX_SEGMENTS_CAP {
                return Err(DecodeError("too many buffered segments"));
            }
            for i in 0..n as usize {
                d.segs[i] = Seg {
                    seq: r.u32()?,
                    len: r.u16()?,
                };
            }
            d.n = n;
        }
        Ok(c)
    }
}

/// Encoded size of a record with `segs` buffered segments in total.
pub const fn record_size(segs: usize) -> usize {
    11 + 2 * 17 + 6 * segs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_size() {
        let mut c = Conn {
            flags: F_CLIENT_FWD | F_ESTABLISHED,
            synced: 3,
            last_seen: 77,
            ..Conn::default()
        };
        c.dirs[0].next = 1000;
        c.dirs[0].insert(Seg { seq: 1300, len: 10 });
        c.dirs[0].insert(Seg { seq: 1100, len: 5 });
        let mut buf = Vec::new();
        c.encode(&mut Writer::new(&mut buf));
        assert_eq!(buf.len(), record_size(2));
        let d = Conn::decode(&mut Reader::new(&buf)).unwrap();
        assert_eq!(d, c);
        assert_eq!(d.dirs[0].segs()[0].seq, 1100, "kept sorted");
        assert!(Conn::decode(&mut Reader::new(&buf[..buf.len() - 1])).is_err());
        buf[0] = 9;
        assert!(Conn::decode(&mut Reader::new(&buf)).is_err());
    }

    #[test]
    fn a_version_1_record_decodes_with_no_timestamp_known() {
        let mut c = Conn {
            flags: F_CLIENT_FWD | F_ESTABLISHED,
            synced: 3 | ts_bit(C2S),
            last_seen: 5,
            ..Conn::default()
        };
        c.dirs[0].next = 10;
        c.dirs[0].ts_recent = 99;
        c.dirs[1].insert(Seg { seq: 300, len: 4 });
        // Version 1's layout: no ts_recent per direction.
        let mut v1 = vec![1u8, c.flags, 3];
        v1.extend(5u64.to_le_bytes());
        for d in &c.dirs {
            v1.extend(d.next.to_le_bytes());
            v1.extend(d.delivered.to_le_bytes());
            v1.push(d.n);
            for s in d.segs() {
                v1.extend(s.seq.to_le_bytes());
                v1.extend(s.len.to_le_bytes());
            }
        }
        let got = Conn::decode(&mut Reader::new(&v1)).unwrap();
        assert_eq!(got.synced & ts_bit(C2S), 0);
        assert_eq!(got.dirs[0].ts_recent, 0);
        assert_eq!(got.dirs[1].segs(), c.dirs[1].segs());
        assert_eq!(got.dirs[0].next, 10);
    }
}
