//! IPv6 headers. Extension headers are walked and skipped to reach the transport;
//! a fragment header is recognised so fragments are not mistaken for transports.

use crate::{be16, be32, ip_proto, put16, put32, Error, Result};

/// Fixed header length.
pub const HEADER_LEN: usize = 40;
/// How many extension headers are walked before the packet is refused, so a
/// crafted chain cannot make the parser loop long.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

/// Where the transport starts after the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// Transport protocol number.
    pub protocol: u8,
    /// Offset of the transport header from the start of the IPv6 header.
    pub offset: usize,
    /// Set if a fragment header was found: (offset in bytes, more fragments).
    pub fragment: Option<(u16, bool)>,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buf`, checking version and payload length against it.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Error::Malformed("ipv6 version"));
        }
        let pl = be16(b, 4) as usize;
        if b.len() < HEADER_LEN + pl {
            return Err(Error::Truncated);
        }
        Ok(Ipv6Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        ((be16(self.b(), 0) >> 4) & 0xff) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), 0) & 0x000f_ffff
    }
    /// Payload length field (extension headers included).
    pub fn payload_len(&self) -> usize {
        be16(self.b(), 4) as usize
    }
    /// Next header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    /// Source address.
    pub fn src_addr(&self) -> [u8; 16] {
        self.b()[8..24].try_into().unwrap()
    }
    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 16] {
        self.b()[24..40].try_into().unwrap()
    }
    /// Everything after the fixed header, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..HEADER_LEN + self.payload_len()]
    }

    /// Walks hop-by-hop, routing, destination-options, AH and fragment headers.
    pub fn upper_layer(&self) -> Result<UpperLayer> {
        let end = HEADER_LEN + self.payload_len();
        let b = &self.b()[..end];
        let mut nh = self.next_header();
        let mut off = HEADER_LEN;
        let mut fragment = None;
        for _ in 0..MAX_EXTENSION_HEADERS {
            match nh {
                ip_proto::HOPOPT | ip_proto::ROUTING | ip_proto::DSTOPTS => {
                    if off + 8 > end {
                        return Err(Error::Truncated);
                    }
                    let len = (b[off + 1] as usize + 1) * 8;
                    nh = b[off];
                    off += len;
                }
                ip_proto::AH => {
                    if off + 8 > end {
                        return Err(Error::Truncated);
                    }
                    let len = (b[off + 1] as usize + 2) * 4;
                    nh = b[off];
                    off += len;
                }
                ip_proto::FRAGMENT => {
                    if off + 8 > end {
                        return Err(Error::Truncated);
                    }
                    let fo = be16(b, off + 2);
                    fragment = Some((fo & 0xfff8, fo & 1 != 0));
                    nh = b[off];
                    off += 8;
                }
                _ => {
                    if off > end {
                        return Err(Error::Truncated);
                    }
                    return Ok(UpperLayer {
                        protocol: nh,
                        offset: off,
                        fragment,
                    });
                }
            }
        }
        Err(Error::Unsupported("ipv6 extension header chain too long"))
    }
}

/// Where an IPv6 packet's Fragment header is and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader {
    /// Offset (from the IPv6 header's start) of the next-header field that
    /// names the Fragment header: 6 (the fixed header's) or an extension
    /// header's first byte.
    pub nh_at: usize,
    /// Offset of the Fragment header.
    pub at: usize,
    /// The header after it.
    pub next_header: u8,
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More fragments follow.
    pub more: bool,
    /// Identification.
    pub id: u32,
}

/// Finds the Fragment header of the IPv6 packet `b` (header and payload)
/// among the extension headers before the transport header, walking at most
/// [`MAX_EXTENSION_HEADERS`] of them; `None` if there is none or the chain
/// is cut short.
pub fn fragment_header(b: &[u8]) -> Option<FragmentHeader> {
    let mut nh = *b.get(6)?;
    let mut nh_at = 6;
    let mut at = HEADER_LEN;
    for _ in 0..MAX_EXTENSION_HEADERS {
        let len = match nh {
            ip_proto::HOPOPT | ip_proto::ROUTING | ip_proto::DSTOPTS => {
                (*b.get(at + 1)? as usize + 1) * 8
            }
            ip_proto::AH => (*b.get(at + 1)? as usize + 2) * 4,
            ip_proto::FRAGMENT => {
                let h = b.get(at..at + 8)?;
                let fo = be16(h, 2);
                return Some(FragmentHeader {
                    nh_at,
                    at,
                    next_header: h[0],
                    offset: fo & 0xfff8,
                    more: fo & 1 != 0,
                    id: be32(h, 4),
                });
            }
            _ => return None,
        };
        nh_at = at;
        nh = *b.get(at)?;
        at += len;
    }
    None
}

/// The meaning of an IPv6 header. Extension headers are not represented: `parse`
/// skips them and `emit` writes none, so `next_header` is the transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Transport protocol.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Transport length (payload after the extension headers).
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Reads a checked view, skipping extension headers.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self> {
        let ul = p.upper_layer()?;
        Ok(Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: ul.protocol,
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            payload_len: HEADER_LEN + p.payload_len() - ul.offset,
        })
    }

    /// Header length written by `emit`.
    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the fixed header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.payload_len > u16::MAX as usize {
            return Err(Error::Malformed("ipv6 payload length"));
        }
        put32(
            buf,
            0,
            6 << 28 | (self.traffic_class as u32) << 20 | (self.flow_label & 0x000f_ffff),
        );
        put16(buf, 4, self.payload_len as u16);
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src);
        buf[24..40].copy_from_slice(&self.dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(src: [u8; 16], dst: [u8; 16], nh in prop::sample::select(vec![6u8, 17, 58, 132]),
                      hl: u8, tc: u8, fl in 0u32..0x10_0000, pl in 0usize..300) {
            let r = Ipv6Repr { src, dst, next_header: nh, hop_limit: hl, traffic_class: tc, flow_label: fl, payload_len: pl };
            let mut buf = vec![0u8; HEADER_LEN + pl];
            r.emit(&mut buf).unwrap();
            let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&p).unwrap(), r);
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            if let Ok(p) = Ipv6Packet::new_checked(&data[..]) {
                let _ = Ipv6Repr::parse(&p);
            }
        }
    }

    #[test]
    fn skips_extension_headers_and_sees_fragments() {
        let mut buf = vec![0u8; HEADER_LEN + 8 + 8 + 8];
        let r = Ipv6Repr {
            src: [1; 16],
            dst: [2; 16],
            next_header: ip_proto::HOPOPT,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            payload_len: 24,
        };
        r.emit(&mut buf).unwrap();
        // hop-by-hop (8 bytes) -> fragment (8 bytes, offset 16, MF) -> UDP
        buf[40] = ip_proto::FRAGMENT;
        buf[41] = 0;
        buf[48] = ip_proto::UDP;
        buf[50..52].copy_from_slice(&(16u16 | 1).to_be_bytes());
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        let ul = p.upper_layer().unwrap();
        assert_eq!(
            ul,
            UpperLayer {
                protocol: ip_proto::UDP,
                offset: 56,
                fragment: Some((16, true))
            }
        );
        // A chain longer than the bound is refused rather than walked forever.
        let mut long = vec![0u8; HEADER_LEN + 8 * 10];
        r.emit(&mut long).unwrap();
        long[4..6].copy_from_slice(&80u16.to_be_bytes());
        let p = Ipv6Packet::new_checked(&long[..]).unwrap();
        assert!(p.upper_layer().is_err());
    }
}
