//! The stored flow record and its per-batch bookkeeping. Public only within the
//! crate's private module, so the skeleton's trait can name them.

use sluice_nf::{Event, FlowRecord};
use sluice_state::{Codec, DecodeError, Reader, Writer};
use sluice_wire::FlowKey;

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
            flow_id: canon.symmetric_hash() as u64,
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
