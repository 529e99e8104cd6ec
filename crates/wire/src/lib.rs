//! The packet wire layer of Sluice.
//!
//! Every header comes in two shapes, after smoltcp's wire layer:
//!
//! * a **view** (`Ipv4Packet<T>`, `TcpSegment<T>`, ...) wrapping a byte buffer
//!   `T: AsRef<[u8]>` (and `AsMut<[u8]>` for setters). A view never copies; its
//!   `new_checked` constructor validates lengths once so the accessors can index
//!   without further checks;
//! * a plain **`Repr`** struct holding the header's meaning, with `parse` (from a
//!   view) and `emit` (into a view). Property tests hold `parse(emit(repr)) == repr`.
//!
//! On top of those, [`parse::PacketMeta`] is the single-pass parse of a whole frame
//! that the data plane performs once per packet and shares with every function of a
//! chain, and [`rewrite`] changes addresses and ports with incremental checksum
//! updates (RFC 1624).

pub mod build;
pub mod checksum;
pub mod encap;
pub mod ethernet;
pub mod flow;
pub mod geneve;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod parse;
pub mod prefix;
pub mod rewrite;
pub mod tcp;
pub mod udp;
pub mod wrap;

pub use flow::{FlowKey, IpAddr};
pub use parse::{PacketMeta, ParseError};
pub use prefix::Prefix;

use core::fmt;

/// Why a buffer could not be viewed or parsed as a given header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer ends before the header (or the length it declares) does.
    Truncated,
    /// A field holds a value the header does not allow; the string names it.
    Malformed(&'static str),
    /// The header is well-formed but uses a feature this layer does not handle.
    Unsupported(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => write!(f, "buffer truncated"),
            Error::Malformed(what) => write!(f, "malformed {what}"),
            Error::Unsupported(what) => write!(f, "unsupported {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result alias for the wire layer.
pub type Result<T> = core::result::Result<T, Error>;

/// IP protocol numbers the data plane distinguishes.
pub mod ip_proto {
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv4 inside IP.
    pub const IPIP: u8 = 4;
    /// IPv6 inside IP.
    pub const IPV6_IN_IP: u8 = 41;
    /// GRE.
    pub const GRE: u8 = 47;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
    /// Authentication header (skippable in IPv6 chains).
    pub const AH: u8 = 51;
    /// No next header.
    pub const NONE: u8 = 59;
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
