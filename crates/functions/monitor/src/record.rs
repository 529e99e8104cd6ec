//! The stored flow record and its per-batch bookkeeping. Public only within the
//! crate's private module, so the skeleton's trait can name them.

use sluice_nf::{Event, FlowRecord};
use sluice_state::{Codec, DecodeError, Reader, Writer};
use sluice_wire::flow::Side;
use sluice_wire::{FlowKey, IpAddr};

/// The flow's canonical key is its client-to-server direction.
pub const F_CLIENT_FWD: u8 = 1;
/// A FIN was seen to the server.
pub const F_FIN_TS: u8 = 2;
/// A FIN was seen to the client.
pub const F_FIN_TC: u8 = 4;
/// The record was exported (a tombstone until deleted).
pub const F_EXPORTED: u8 = 8;
/// The connection closed (RST, or FIN both ways); exported when the linger ends.
pub const F_CLOSED: u8 = 16;
/// Layout version of [`Rec`].
pub const VERSION: u8 = 1;

/// A flow record as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rec {
    /// `F_*` flags.
    pub flags: u8,
    /// Packets to server, to client.
    pub pkts: [u64; 2],
    /// Bytes to server, to client.
    pub bytes: [u64; 2],
    /// First packet time.
    pub start: u64,
    /// Last packet time.
    pub end: u64,
}

impl Codec for Rec {
    #[inline]
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(VERSION)
            .u8(self.flags)
            .u64(self.pkts[0])
            .u64(self.pkts[1])
            .u64(self.bytes[0])
            .u64(self.bytes[1])
            .u64(self.start)
            .u64(self.end);
    }
    #[inline]
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != VERSION {
            return Err(DecodeError("unknown monitor record version"));
        }
        Ok(Rec {
            flags: r.u8()?,
            pkts: [r.u64()?, r.u64()?],
            bytes: [r.u64()?, r.u64()?],
            start: r.u64()?,
            end: r.u64()?,
        })
    }
}

impl Rec {
    /// The record as an EVE flow event of the flow `canon`.
    pub fn export(&self, canon: &FlowKey, reason: &'static str) -> Event {
        let flow = if self.flags & F_CLIENT_FWD != 0 {
            *canon
        } else {
            canon.reverse()
        };
        Event::Flow(FlowRecord {
            flow,
            flow_id: canon.flow_id(),
            pkts_toserver: self.pkts[0],
            pkts_toclient: self.pkts[1],
            bytes_toserver: self.bytes[0],
            bytes_toclient: self.bytes[1],
            start_ns: self.start,
            end_ns: self.end,
            reason,
            state: if reason == "tcp_close" {
                "closed"
            } else if self.pkts[1] > 0 {
                "established"
            } else {
                "new"
            },
        })
    }
}

/// A flow record's bookkeeping for one batch.
pub struct Flow {
    /// The flow's canonical key.
    pub canon: FlowKey,
    /// Time of the packet that started a new flow in this batch.
    pub created_at: Option<u64>,
}

/// A canonical flow key packed into whole words: the id of a flow's record
/// within a batch. A [`FlowKey`] built by `canonical()` is written field by
/// field (17-byte addresses), and every later copy of it, into the records'
/// index and out of its probe, read those bytes back in wider pieces than they
/// were written and stalled on them; words are written and read whole, and
/// hash and compare in six steps without a byte-slice hash or `memcmp`.
///
/// Aligned to 16 bytes, so its 48 bytes are copied in the same three 16-byte
/// pieces everywhere: at 40, one copy's overlapping tail piece stalled the next.
/// The sixth word, the zone, filled what was alignment padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(align(16))]
pub struct FlowId([u64; 6]);

impl std::hash::Hash for FlowId {
    // Word by word: an array's derived hash is a length and a byte slice.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        for w in self.0 {
            h.write_u64(w);
        }
    }
}

impl FlowId {
    /// The id of the canonical orientation of `k` (one to one: the address
    /// families are part of the last word). Built from `k` itself, not from a
    /// fresh canonical copy of it, whose bytes would still be in flight.
    #[inline]
    pub fn canonical(k: &FlowKey) -> FlowId {
        let (mut s, s6) = words(&k.src);
        let (mut d, d6) = words(&k.dst);
        let (mut sp, mut dp, mut sf, mut df) = (k.src_port, k.dst_port, s6, d6);
        if k.side() == Side::Reverse {
            std::mem::swap(&mut s, &mut d);
            std::mem::swap(&mut sp, &mut dp);
            std::mem::swap(&mut sf, &mut df);
        }
        FlowId([
            s[0],
            s[1],
            d[0],
            d[1],
            (sp as u64)
                | (dp as u64) << 16
                | (k.proto as u64) << 32
                | (sf as u64) << 40
                | (df as u64) << 41,
            k.zone as u64,
        ])
    }
}

/// An address as two words, and whether it is IPv6.
#[inline]
fn words(a: &IpAddr) -> ([u64; 2], bool) {
    match a {
        IpAddr::V4(b) => ([0, u32::from_be_bytes(*b) as u64], false),
        IpAddr::V6(b) => {
            let hi = u64::from_be_bytes(b[..8].try_into().unwrap_or_default());
            let lo = u64::from_be_bytes(b[8..].try_into().unwrap_or_default());
            ([hi, lo], true)
        }
    }
}
