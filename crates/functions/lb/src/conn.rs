//! The stored connection record.

use sluice_state::{Codec, DecodeError, Key, Reader, Writer};
use sluice_wire::FlowKey;

/// Layout version of [`Conn`].
pub const CONN_VERSION: u8 = 1;
/// Encoded size of [`Conn`] in bytes.
pub const CONN_BYTES: usize = 14;

/// Connection flag: the client sent FIN.
pub const FIN_CLIENT: u8 = 1;
/// Connection flag: the backend sent FIN.
pub const FIN_SERVER: u8 = 2;
/// Connection flag: a RST was seen.
pub const RST_SEEN: u8 = 4;

/// One balanced connection.
///
/// Layout (14 bytes, little-endian): `[version=1][flags][service u16][backend u16]
/// [last_seen_ns u64]`; service and backend are indices in configuration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// [`FIN_CLIENT`], [`FIN_SERVER`], [`RST_SEEN`].
    pub flags: u8,
    /// Service index.
    pub service: u16,
    /// Backend index within the service.
    pub backend: u16,
    /// Time of the last packet that refreshed the record.
    pub last_seen_ns: u64,
}

impl Conn {
    /// FINs both ways or a RST: the connection is closing.
    pub(crate) fn closing(&self) -> bool {
        self.flags & RST_SEEN != 0
            || self.flags & (FIN_CLIENT | FIN_SERVER) == FIN_CLIENT | FIN_SERVER
    }
}

impl Codec for Conn {
    #[inline]
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(CONN_VERSION)
            .u8(self.flags)
            .u16(self.service)
            .u16(self.backend)
            .u64(self.last_seen_ns);
    }
    #[inline]
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != CONN_VERSION {
            return Err(DecodeError("lb connection version"));
        }
        Ok(Conn {
            flags: r.u8()?,
            service: r.u16()?,
            backend: r.u16()?,
            last_seen_ns: r.u64()?,
        })
    }
}

/// The client flow and backend of a reply record's key.
pub(crate) fn ret_parts(k: &Key) -> Option<(FlowKey, u16)> {
    let p = k.payload();
    let n = p.len().checked_sub(2)?;
    Some((
        FlowKey::decode(&p[..n])?,
        u16::from_be_bytes([p[n], p[n + 1]]),
    ))
}
