//! The stored translation and the flows it links.

use sluice_state::{Codec, DecodeError, Reader, Writer};
use sluice_wire::{ip_proto, FlowKey, IpAddr};

/// Layout version of [`Mapping`].
pub const MAPPING_VERSION: u8 = 1;
/// Encoded size of [`Mapping`] in bytes.
pub const MAPPING_BYTES: usize = 20;

/// Mapping flag: the inside host sent FIN.
pub const FIN_OUT: u8 = 1;
/// Mapping flag: the outside host sent FIN.
pub const FIN_IN: u8 = 2;
/// Mapping flag: a RST was seen.
pub const RST_SEEN: u8 = 4;

/// One translation, stored identically under the forward and the reverse key.
///
/// Layout (20 bytes, little-endian): `[version=1][flags][item u32][inside addr 4]
/// [inside port u16][last_seen_ns u64]`. The public address and port follow from the
/// pool item (`address index = item / ports`, `port = first + item % ports`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// [`FIN_OUT`], [`FIN_IN`], [`RST_SEEN`].
    pub flags: u8,
    /// The pool item (public address and port).
    pub item: u32,
    /// The inside address.
    pub inside_addr: [u8; 4],
    /// The inside port (ICMP echo identifier).
    pub inside_port: u16,
    /// Time of the last packet that refreshed the mapping.
    pub last_seen_ns: u64,
}

impl Codec for Mapping {
    #[inline]
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(MAPPING_VERSION)
            .u8(self.flags)
            .u32(self.item)
            .bytes(&self.inside_addr)
            .u16(self.inside_port)
            .u64(self.last_seen_ns);
    }
    #[inline]
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != MAPPING_VERSION {
            return Err(DecodeError("nat mapping version"));
        }
        Ok(Mapping {
            flags: r.u8()?,
            item: r.u32()?,
            inside_addr: r.bytes(4)?.try_into().map_err(|_| DecodeError("addr"))?,
            inside_port: r.u16()?,
            last_seen_ns: r.u64()?,
        })
    }
}

/// The reply flow of an inside flow translated to `(pub_addr, pub_port)`.
pub(crate) fn rev_flow(fwd: &FlowKey, pub_addr: [u8; 4], pub_port: u16) -> FlowKey {
    let echo = matches!(fwd.proto, ip_proto::ICMP);
    FlowKey {
        zone: fwd.zone,
        src: fwd.dst,
        dst: IpAddr::V4(pub_addr),
        src_port: if echo { pub_port } else { fwd.dst_port },
        dst_port: pub_port,
        proto: fwd.proto,
    }
}

/// The inside flow of a reply flow whose mapping is `m`.
pub(crate) fn fwd_flow(rev: &FlowKey, m: &Mapping) -> FlowKey {
    let echo = matches!(rev.proto, ip_proto::ICMP);
    FlowKey {
        zone: rev.zone,
        src: IpAddr::V4(m.inside_addr),
        dst: rev.src,
        src_port: m.inside_port,
        dst_port: if echo { m.inside_port } else { rev.src_port },
        proto: rev.proto,
    }
}
