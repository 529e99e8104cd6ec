//! The packet-header sticky buffers (`ipv4.hdr`, `ipv6.hdr`, `tcp.hdr`,
//! `udp.hdr`, `icmpv4.hdr`, `icmpv6.hdr`): each a slice of the packet's
//! bytes, as Suricata 7's detect-*hdr.c take them.
//!
//! * `ipv4.hdr`: the IPv4 header with its options (IHL × 4 bytes).
//! * `ipv6.hdr`: the fixed 40 bytes and the extension headers Suricata's
//!   decoder walked before the upper layer (decode-ipv6.c's
//!   `exthdrs_len`): on a fragment, those before its Fragment header.
//! * `tcp.hdr`: the TCP header with its options (data offset × 4 bytes).
//! * `udp.hdr`: the 8 bytes of the UDP header.
//! * `icmpv4.hdr`: 8 bytes; 20 for a timestamp (request or reply) long
//!   enough to hold one, and for a router advertisement its addresses too
//!   when they fit (decode-icmpv4.c's `hlen`).
//! * `icmpv6.hdr`: 8 bytes.
//!
//! A packet without the header (another protocol or family, an IP
//! fragment for the transport ones: Suricata decodes no transport header
//! in a fragment) has no buffer, and a rule with keywords on it does not
//! match the packet, negated contents or not.
//!
//! The headers are read as they arrived: where the reassembler rewrote a
//! TCP packet's headers (URG cleared, TTL raised, IP options cleared, a
//! checksum recomputed), it kept their original bytes
//! ([`sluice_nf::Streams::rx_header`]) and those are read instead.

use sluice_wire::parse::{Fragment, PacketMeta, L4};

/// Which header a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HdrBuf {
    /// `ipv4.hdr`.
    Ipv4,
    /// `ipv6.hdr`.
    Ipv6,
    /// `tcp.hdr`.
    Tcp,
    /// `udp.hdr`.
    Udp,
    /// `icmpv4.hdr`.
    Icmpv4,
    /// `icmpv6.hdr`.
    Icmpv6,
}

impl HdrBuf {
    /// The buffer a keyword names.
    pub fn from_keyword(name: &str) -> Option<HdrBuf> {
        Some(match name {
            "ipv4.hdr" => HdrBuf::Ipv4,
            "ipv6.hdr" => HdrBuf::Ipv6,
            "tcp.hdr" => HdrBuf::Tcp,
            "udp.hdr" => HdrBuf::Udp,
            "icmpv4.hdr" => HdrBuf::Icmpv4,
            "icmpv6.hdr" => HdrBuf::Icmpv6,
            _ => return None,
        })
    }

    /// The keyword naming the buffer.
    pub fn keyword(self) -> &'static str {
        match self {
            HdrBuf::Ipv4 => "ipv4.hdr",
            HdrBuf::Ipv6 => "ipv6.hdr",
            HdrBuf::Tcp => "tcp.hdr",
            HdrBuf::Udp => "udp.hdr",
            HdrBuf::Icmpv4 => "icmpv4.hdr",
            HdrBuf::Icmpv6 => "icmpv6.hdr",
        }
    }

    /// The buffer of the packet `frame` is, as `m` describes it; `rx`: its
    /// bytes from the IP header to the payload as they arrived, when they
    /// were rewritten since. `None` if the packet has no such header.
    pub fn of<'a>(self, frame: &'a [u8], m: &PacketMeta, rx: Option<&'a [u8]>) -> Option<&'a [u8]> {
        let l3 = m.l3_offset as usize;
        // From the IP header on: the kept copy ends at the payload, which
        // no header buffer passes (an ICMP message's longer header is
        // never rewritten, so never read from a copy).
        let ip = match rx {
            Some(b) => b,
            None => frame.get(l3..)?,
        };
        let l4 = (m.l4_offset as usize).checked_sub(l3)?;
        // Suricata decodes no transport header in an IP fragment.
        let whole = m.fragment == Fragment::None;
        match self {
            HdrBuf::Ipv4 => {
                if m.ethertype != 0x0800 || ip.first()? >> 4 != 4 {
                    return None;
                }
                let hl = (ip[0] & 0x0f) as usize * 4;
                (hl >= 20).then(|| ip.get(..hl)).flatten()
            }
            HdrBuf::Ipv6 => {
                if m.ethertype != 0x86dd || ip.first()? >> 4 != 6 || ip.len() < 40 {
                    return None;
                }
                ip.get(..40 + ipv6_ext_len(ip))
            }
            HdrBuf::Tcp => {
                if m.l4 != L4::Tcp || !whole {
                    return None;
                }
                let t = ip.get(l4..)?;
                let hl = (*t.get(12)? >> 4) as usize * 4;
                (hl >= 20).then(|| t.get(..hl)).flatten()
            }
            HdrBuf::Udp => {
                if m.l4 != L4::Udp || !whole {
                    return None;
                }
                ip.get(l4..l4 + 8)
            }
            HdrBuf::Icmpv4 => {
                if m.l4 != L4::Icmp || m.flow.proto != 1 || !whole {
                    return None;
                }
                let t = ip.get(l4..)?;
                // The ICMP message's length: the IP datagram's rest.
                let len = (m.l3_end as usize).checked_sub(m.l4_offset as usize)?;
                let hl = match *t.first()? {
                    // Timestamp and its reply: three 32-bit times.
                    13 | 14 if len >= 20 => 20,
                    // Router advertisement: the addresses' entries.
                    9 => {
                        let n = *t.get(4)? as usize * *t.get(5)? as usize * 4;
                        if len >= 8 + n {
                            8 + n
                        } else {
                            8
                        }
                    }
                    _ => 8,
                };
                t.get(..hl)
            }
            HdrBuf::Icmpv6 => {
                if m.l4 != L4::Icmp || m.flow.proto != 58 || !whole {
                    return None;
                }
                ip.get(l4..l4 + 8)
            }
        }
    }
}

/// The length of the extension headers `ipv6.hdr` holds after the fixed
/// header of `ip` (an IPv6 packet of at least 40 bytes), as Suricata's
/// decode-ipv6.c counts them: each extension header it steps over before
/// it stops at an upper layer, a fragment, an ESP header, a truncated or
/// unknown one. Bounded by the payload length.
fn ipv6_ext_len(ip: &[u8]) -> usize {
    const HOPOPTS: u8 = 0;
    const ROUTING: u8 = 43;
    const FRAGMENT: u8 = 44;
    const AH: u8 = 51;
    const DSTOPTS: u8 = 60;
    const MH: u8 = 135;
    const HIP: u8 = 139;
    const SHIM6: u8 = 140;
    let end = (40 + u16::from_be_bytes([ip[4], ip[5]]) as usize).min(ip.len());
    let mut nh = ip[6];
    let mut at = 40;
    let mut frag_seen = false;
    loop {
        let rest = end.saturating_sub(at);
        if rest < 2 {
            return at - 40;
        }
        let h = &ip[at..end];
        let len = match nh {
            HOPOPTS | DSTOPTS => (h[1] as usize + 1) * 8,
            ROUTING | MH | HIP | SHIM6 => 8 + h[1] as usize * 8,
            // Its length field counts 4-byte words after the first 12
            // bytes' (Suricata's reading).
            AH => 12 + (h[1] as usize).saturating_sub(1) * 4,
            FRAGMENT => {
                if rest < 8 {
                    return at - 40;
                }
                let off_mf = u16::from_be_bytes([h[2], h[3]]);
                // A second Fragment header is stepped over; a first one
                // ends the walk unless it fragments nothing (offset 0,
                // no more fragments).
                if !frag_seen && off_mf & 0xfff9 != 0 {
                    return at - 40;
                }
                frag_seen = true;
                8
            }
            _ => return at - 40,
        };
        if len > rest {
            return at - 40;
        }
        nh = h[0];
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(nh: u8, rest: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        p.extend_from_slice(&[nh, 64]);
        p.extend_from_slice(&[0; 32]);
        p.extend_from_slice(rest);
        p
    }

    #[test]
    fn ipv6_walks_extension_headers_up_to_the_upper_layer() {
        // Hop-by-Hop (8 bytes) then TCP.
        let mut hbh = vec![6, 0, 1, 4, 0, 0, 0, 0];
        hbh.extend_from_slice(&[0; 20]);
        assert_eq!(ipv6_ext_len(&v6(0, &hbh)), 8);
        // Straight TCP.
        assert_eq!(ipv6_ext_len(&v6(6, &[0; 20])), 0);
        // A fragment (offset 8, more) behind Destination Options: the
        // options only.
        let mut f = vec![44, 0, 1, 4, 0, 0, 0, 0];
        f.extend_from_slice(&[17, 0, 0, 9, 0, 0, 0, 1]);
        f.extend_from_slice(&[0; 8]);
        assert_eq!(ipv6_ext_len(&v6(60, &f)), 8);
        // A fragment header fragmenting nothing is stepped over.
        let mut u = vec![17, 0, 0, 0, 0, 0, 0, 1];
        u.extend_from_slice(&[0; 8]);
        assert_eq!(ipv6_ext_len(&v6(44, &u)), 8);
        // A truncated extension header stops the walk before it.
        assert_eq!(ipv6_ext_len(&v6(0, &[6, 3, 0, 0])), 0);
        // AH: 12 bytes plus (len - 1) words.
        let mut ah = vec![6, 4, 0, 0];
        ah.extend_from_slice(&[0; 20]);
        assert_eq!(ipv6_ext_len(&v6(51, &ah)), 24);
    }
}
