//! The encapsulations the parse looks through: link-layer stacks (802.1Q and
//! 802.1ad tags, PBB, VN-Tag, E-Tag, PPPoE sessions, MPLS label stacks) and the
//! tunnels a datacenter carries (IP-in-IP, GRE with ERSPAN, VXLAN, VXLAN-GPE,
//! Geneve).
//!
//! A firewall that reads only untagged Ethernet lets everything else past it as
//! "not IP"; these are what make the innermost IP packet the one every function
//! sees. Every loop here is bounded ([`MAX_L2_HEADERS`], [`MAX_MPLS_LABELS`],
//! [`MAX_TUNNEL_DEPTH`]) so a crafted frame costs a bounded parse, and a stack
//! deeper than the bound is refused as `unsupported` rather than passed as
//! something it is not.

use crate::parse::{Checksums, PacketMeta, ParseError};
use crate::{be16, be32};

/// EtherTypes of the encapsulations.
pub mod ethertype {
    /// 802.1Q customer tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag.
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ service tags.
    pub const QINQ_9100: u16 = 0x9100;
    /// Pre-standard QinQ service tags.
    pub const QINQ_9200: u16 = 0x9200;
    /// 802.1ah provider backbone bridging (I-tag).
    pub const PBB: u16 = 0x88e7;
    /// Cisco VN-Tag.
    pub const VN_TAG: u16 = 0x8926;
    /// 802.1BR E-tag.
    pub const E_TAG: u16 = 0x893f;
    /// PPPoE session stage.
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// MPLS unicast.
    pub const MPLS: u16 = 0x8847;
    /// MPLS multicast.
    pub const MPLS_MULTICAST: u16 = 0x8848;
    /// Transparent Ethernet bridging (an Ethernet frame inside GRE or Geneve).
    pub const TEB: u16 = 0x6558;
    /// ERSPAN type I and II (inside GRE).
    pub const ERSPAN_II: u16 = 0x88be;
    /// ERSPAN type III (inside GRE).
    pub const ERSPAN_III: u16 = 0x22eb;
}

/// Most link-layer headers (tags, I-tags, PPPoE) parsed before the network layer.
pub const MAX_L2_HEADERS: usize = 8;
/// Most MPLS labels in one stack.
pub const MAX_MPLS_LABELS: usize = 16;
/// Most tunnels decapsulated, one inside another.
pub const MAX_TUNNEL_DEPTH: u8 = 2;
/// VXLAN's IANA UDP port.
pub const VXLAN_PORT: u16 = 4789;
/// VXLAN-GPE's IANA UDP port.
pub const VXLAN_GPE_PORT: u16 = 4790;
/// Geneve's IANA UDP port.
pub const GENEVE_PORT: u16 = crate::geneve::UDP_PORT;

/// What an MPLS label stack carries: it has no protocol field, so the parse either
/// guesses from the first nibble after the stack or is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MplsPayload {
    /// 4: IPv4, 6: IPv6, 0: a pseudowire control word then an Ethernet frame;
    /// anything else is left unclassified (the non-IP policy applies).
    #[default]
    Auto,
    /// Always IP (a first nibble other than 4 or 6 is a bad IP header).
    Ip,
    /// Always an Ethernet pseudowire without a control word.
    Ethernet,
}

/// How a chain parses frames: its `verify_checksums`, `decapsulate` and `mpls`
/// settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// Which checksums are verified.
    pub checksums: Checksums,
    /// Decapsulate tunnels so that functions see the innermost packet (default
    /// true). Off, a tunnel is the UDP or GRE packet it looks like from outside.
    pub decapsulate: bool,
    /// What MPLS carries.
    pub mpls: MplsPayload,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            checksums: Checksums::Ipv4,
            decapsulate: true,
            mpls: MplsPayload::Auto,
        }
    }
}

/// The kind of tunnel a packet was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum TunnelKind {
    /// Not tunnelled.
    #[default]
    None = 0,
    /// IPv4 or IPv6 inside IPv4 or IPv6 (protocols 4 and 41).
    IpInIp = 2,
    /// GRE (protocol 47) carrying IP or Ethernet; the zone holds the key's VSID.
    Gre = 3,
    /// ERSPAN type I, II or III inside GRE (a mirror); the zone holds the session.
    Erspan = 4,
    /// VXLAN (UDP 4789).
    Vxlan = 5,
    /// VXLAN-GPE (UDP 4790).
    VxlanGpe = 6,
    /// Geneve (UDP 6081).
    Geneve = 7,
}

impl TunnelKind {
    /// A stable lowercase name for metrics, logs and rules.
    pub fn name(self) -> &'static str {
        match self {
            TunnelKind::None => "none",
            TunnelKind::IpInIp => "ipip",
            TunnelKind::Gre => "gre",
            TunnelKind::Erspan => "erspan",
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::VxlanGpe => "vxlan-gpe",
            TunnelKind::Geneve => "geneve",
        }
    }
}

/// Where a decapsulated packet came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tunnel {
    /// The innermost tunnel's kind (`None`: not tunnelled).
    pub kind: TunnelKind,
    /// Its virtual network identifier: VXLAN's or Geneve's VNI, GRE's VSID (the
    /// key's upper 24 bits), ERSPAN's session id; 0 for IP-in-IP or none.
    pub vni: u32,
    /// Offset of the outermost IP header in the frame.
    pub outer_l3: u16,
    /// How many tunnels were decapsulated.
    pub depth: u8,
}

/// The zone of a parsed packet: what keeps identical 5-tuples of different
/// virtual networks apart in every function's state.
///
/// Layout: the top four bits name what it comes from, the low 28 identify the
/// network exactly (no hashing, so no two networks can be made to collide):
/// - 0: untagged and not tunnelled;
/// - 1: VLAN tags, `outer VID << 12 | inner VID` (the first two tags of a stack);
/// - the [`TunnelKind`] number: the innermost tunnel's 24-bit identifier.
///
/// Tags inside a tunnel, and a third tag and beyond, do not enter the zone.
#[inline]
pub fn zone(m: &PacketMeta) -> u32 {
    if m.tunnel.kind != TunnelKind::None {
        return (m.tunnel.kind as u32) << 28 | (m.tunnel.vni & 0x00ff_ffff);
    }
    match (m.vlan_tci, m.vlan_inner_tci) {
        (None, _) => 0,
        (Some(o), i) => 1 << 28 | ((o & 0x0fff) as u32) << 12 | (i.unwrap_or(0) & 0x0fff) as u32,
    }
}

/// What a zone ([`zone`]) names, decoded for logs and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneOf {
    /// Untagged, not tunnelled.
    None,
    /// VLAN tags: the outermost id and the second (0 if there was none).
    Vlan(u16, u16),
    /// A tunnel and its identifier.
    Tunnel(TunnelKind, u32),
}

/// Decodes a zone.
pub fn zone_of(zone: u32) -> ZoneOf {
    let id = zone & 0x0fff_ffff;
    match zone >> 28 {
        0 => ZoneOf::None,
        1 => ZoneOf::Vlan((id >> 12) as u16, (id & 0x0fff) as u16),
        k => {
            let kind = [
                TunnelKind::IpInIp,
                TunnelKind::Gre,
                TunnelKind::Erspan,
                TunnelKind::Vxlan,
                TunnelKind::VxlanGpe,
                TunnelKind::Geneve,
            ]
            .into_iter()
            .find(|t| *t as u32 == k)
            .unwrap_or(TunnelKind::None);
            ZoneOf::Tunnel(kind, id)
        }
    }
}

#[inline]
fn need(frame: &[u8], end: usize) -> Result<(), ParseError> {
    if frame.len() < end {
        Err(ParseError::Truncated)
    } else {
        Ok(())
    }
}

/// The link layer of the Ethernet frame at `start`: walks its tags and shims and
/// returns the EtherType of what follows and its offset. A payload that cannot be
/// classified returns its EtherType (or 0 for an 802.3 length field) at the
/// offset where it starts: the non-IP policy applies to it. `record_tags` records
/// the first two VLAN tags in `m` (the outermost frame's only).
pub(crate) fn link_layer(
    frame: &[u8],
    start: usize,
    m: &mut PacketMeta,
    mpls: MplsPayload,
    record_tags: bool,
) -> Result<(u16, usize), ParseError> {
    need(frame, start + 14)?;
    let mut et = be16(frame, start + 12);
    let mut off = start + 14;
    let mut tags = 0;
    for _ in 0..MAX_L2_HEADERS {
        match et {
            ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_9100 | ethertype::QINQ_9200 => {
                need(frame, off + 4)?;
                if record_tags {
                    let tci = be16(frame, off);
                    match tags {
                        0 => m.vlan_tci = Some(tci),
                        1 => m.vlan_inner_tci = Some(tci),
                        _ => {}
                    }
                }
                tags += 1;
                et = be16(frame, off + 2);
                off += 4;
            }
            ethertype::VN_TAG => {
                need(frame, off + 6)?;
                et = be16(frame, off + 4);
                off += 6;
            }
            ethertype::E_TAG => {
                need(frame, off + 8)?;
                et = be16(frame, off + 6);
                off += 8;
            }
            ethertype::PBB => {
                // I-tag, then the customer's destination and source MACs.
                need(frame, off + 18)?;
                et = be16(frame, off + 16);
                off += 18;
            }
            ethertype::PPPOE_SESSION => {
                need(frame, off + 7)?;
                if frame[off] != 0x11 || frame[off + 1] != 0 {
                    // Not version 1, type 1, session data: nothing we can read.
                    return Ok((et, off));
                }
                let p = off + 6;
                // PPP may compress its protocol field to one (odd) byte.
                let (proto, len) = if frame[p] & 1 == 1 {
                    (frame[p] as u16, 1)
                } else {
                    need(frame, p + 2)?;
                    (be16(frame, p), 2)
                };
                return Ok(match proto {
                    0x0021 => (crate::ethernet::ethertype::IPV4, p + len),
                    0x0057 => (crate::ethernet::ethertype::IPV6, p + len),
                    // LCP, IPCP, ...: control traffic, not IP.
                    _ => (et, off),
                });
            }
            ethertype::MPLS | ethertype::MPLS_MULTICAST => {
                return mpls_payload(frame, off, m, mpls);
            }
            t if t < 0x0600 => {
                // An 802.3 length: LLC (STP, CDP, ...). Not IP, and said so.
                return Ok((0, off));
            }
            _ => return Ok((et, off)),
        }
    }
    Err(ParseError::Unsupported)
}

/// The payload of the MPLS label stack at `off`.
fn mpls_payload(
    frame: &[u8],
    mut off: usize,
    m: &mut PacketMeta,
    mpls: MplsPayload,
) -> Result<(u16, usize), ParseError> {
    use crate::ethernet::ethertype::{IPV4, IPV6};
    let mut bottom = false;
    for _ in 0..MAX_MPLS_LABELS {
        need(frame, off + 4)?;
        bottom = frame[off + 2] & 1 == 1;
        off += 4;
        if bottom {
            break;
        }
    }
    if !bottom {
        return Err(ParseError::Unsupported);
    }
    match mpls {
        MplsPayload::Ip => {
            need(frame, off + 1)?;
            // The IP parse reads the version itself; the EtherType only says "IP".
            Ok((if frame[off] >> 4 == 6 { IPV6 } else { IPV4 }, off))
        }
        MplsPayload::Ethernet => link_layer(frame, off, m, MplsPayload::Auto, false),
        MplsPayload::Auto => {
            need(frame, off + 1)?;
            match frame[off] >> 4 {
                4 => Ok((IPV4, off)),
                6 => Ok((IPV6, off)),
                // RFC 4385's control word, then the emulated Ethernet frame.
                0 if frame.len() >= off + 4 + 14 => {
                    link_layer(frame, off + 4, m, MplsPayload::Auto, false)
                }
                _ => Ok((ethertype::MPLS, off)),
            }
        }
    }
}

/// True if `m` could be a tunnel [`tunnel_payload`] opens: a cheap test on what
/// the parse already has, so that TCP and ordinary UDP (nearly every packet)
/// never pay for a look at their payload.
#[inline(always)]
pub(crate) fn may_be_tunnel(m: &PacketMeta) -> bool {
    use crate::parse::L4;
    match m.l4 {
        L4::Udp => matches!(m.flow.dst_port, VXLAN_PORT | VXLAN_GPE_PORT | GENEVE_PORT),
        L4::OtherIp => matches!(m.flow.proto, 4 | 41 | 47),
        _ => false,
    }
}

/// What a tunnel header says follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inner {
    /// An IP packet at this offset.
    Ip(usize),
    /// An Ethernet frame at this offset.
    Ethernet(usize),
}

/// The tunnel `m` (an outer packet just parsed) carries, if it is one this parse
/// decapsulates: its kind, identifier and payload. Headers that do not validate
/// (a VXLAN header without its I flag, GRE version 1, a Geneve version other than
/// 0, an unknown protocol inside) are not tunnels: the packet stays what it looks
/// like from outside.
pub(crate) fn tunnel_payload(frame: &[u8], m: &PacketMeta) -> Option<(TunnelKind, u32, Inner)> {
    use crate::ethernet::ethertype::{IPV4, IPV6};
    use crate::ip_proto;
    use crate::parse::{Fragment, L4};
    if m.fragment != Fragment::None {
        return None;
    }
    let l4 = m.l4_offset as usize;
    let end = m.l3_end as usize;
    match m.l4 {
        L4::OtherIp if matches!(m.flow.proto, 4 | 41) => {
            Some((TunnelKind::IpInIp, 0, Inner::Ip(l4)))
        }
        L4::OtherIp if m.flow.proto == ip_proto::GRE => gre(frame, l4, end),
        L4::Udp => {
            let p = m.payload_offset as usize;
            let b = &frame[p..p + m.payload_len as usize];
            match m.flow.dst_port {
                VXLAN_PORT if b.len() >= 8 + 14 && b[0] & 0x08 != 0 => {
                    Some((TunnelKind::Vxlan, be32(b, 4) >> 8, Inner::Ethernet(p + 8)))
                }
                VXLAN_GPE_PORT if b.len() >= 8 && b[0] & 0x04 != 0 => {
                    let vni = if b[0] & 0x08 != 0 { be32(b, 4) >> 8 } else { 0 };
                    let inner = match b[3] {
                        1 | 2 => Inner::Ip(p + 8),
                        3 => Inner::Ethernet(p + 8),
                        _ => return None,
                    };
                    Some((TunnelKind::VxlanGpe, vni, inner))
                }
                GENEVE_PORT if b.len() >= 8 && b[0] >> 6 == 0 => {
                    let hl = 8 + (b[0] & 0x3f) as usize * 4;
                    if b.len() < hl {
                        return None;
                    }
                    let vni = be32(b, 4) >> 8;
                    let inner = match be16(b, 2) {
                        ethertype::TEB => Inner::Ethernet(p + hl),
                        IPV4 | IPV6 => Inner::Ip(p + hl),
                        _ => return None,
                    };
                    Some((TunnelKind::Geneve, vni, inner))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The GRE packet at `off`, ending at `end`.
fn gre(frame: &[u8], off: usize, end: usize) -> Option<(TunnelKind, u32, Inner)> {
    use crate::ethernet::ethertype::{IPV4, IPV6};
    if end < off + 4 {
        return None;
    }
    let flags = frame[off];
    let version = frame[off + 1] & 0x07;
    // Routing present (RFC 1701) or version 1 (PPTP): not a tunnel we open.
    if version != 0 || flags & 0x40 != 0 {
        return None;
    }
    let proto = be16(frame, off + 2);
    let mut h = off + 4;
    if flags & 0x80 != 0 {
        h += 4;
    }
    let key = if flags & 0x20 != 0 {
        if end < h + 4 {
            return None;
        }
        let k = be32(frame, h);
        h += 4;
        k >> 8
    } else {
        0
    };
    let seq = flags & 0x10 != 0;
    if seq {
        h += 4;
    }
    if end < h {
        return None;
    }
    match proto {
        IPV4 | IPV6 => Some((TunnelKind::Gre, key, Inner::Ip(h))),
        ethertype::TEB => Some((TunnelKind::Gre, key, Inner::Ethernet(h))),
        // Type I has no sequence number and no header; type II has both.
        ethertype::ERSPAN_II if !seq => Some((TunnelKind::Erspan, 0, Inner::Ethernet(h))),
        ethertype::ERSPAN_II if end >= h + 8 => {
            let session = (be16(frame, h + 2) & 0x03ff) as u32;
            Some((TunnelKind::Erspan, session, Inner::Ethernet(h + 8)))
        }
        ethertype::ERSPAN_III if end >= h + 12 => {
            let session = (be16(frame, h + 2) & 0x03ff) as u32;
            // The O flag: an 8-byte platform-specific subheader follows.
            let sub = if frame[h + 11] & 0x01 != 0 { 8 } else { 0 };
            Some((TunnelKind::Erspan, session, Inner::Ethernet(h + 12 + sub)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::parse::{parse_frame, parse_into_opts, L4};
    use crate::wrap;
    use crate::IpAddr;

    fn opts() -> ParseOptions {
        ParseOptions::default()
    }

    fn parse(f: &[u8]) -> Result<PacketMeta, ParseError> {
        let mut m = PacketMeta::default();
        parse_into_opts(f, &mut m, &opts()).map(|_| m)
    }

    fn tcp() -> Vec<u8> {
        build::tcp_v4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1234,
            80,
            7,
            0,
            0x18,
            b"GET / HTTP/1.1\r\n",
        )
    }

    fn tcp6() -> Vec<u8> {
        build::tcp_v6([0x20; 16], [0x21; 16], 5, 443, 1, 0, 0x02, b"")
    }

    fn assert_inner_tcp(m: &PacketMeta, f: &[u8]) {
        assert_eq!(m.l4, L4::Tcp, "{m:?}");
        assert_eq!(m.flow.src, IpAddr::V4([10, 0, 0, 1]));
        assert_eq!(m.flow.dst_port, 80);
        assert_eq!(m.payload(f), b"GET / HTTP/1.1\r\n");
    }

    #[test]
    fn vlan_stacks_of_any_depth_up_to_the_bound() {
        let f = wrap::qinq(&tcp(), 100, 200);
        let m = parse_frame(&f).unwrap();
        assert_inner_tcp(&m, &f);
        assert_eq!(m.vlan_tci, Some(100));
        assert_eq!(m.vlan_inner_tci, Some(200));
        assert_eq!(m.flow.zone, 1 << 28 | 100 << 12 | 200);
        assert_eq!(zone_of(m.flow.zone), ZoneOf::Vlan(100, 200));
        let three = wrap::tags(
            &tcp(),
            &[
                (ethertype::QINQ_9100, 1),
                (ethertype::QINQ, 2),
                (ethertype::VLAN, 3),
            ],
        );
        let m = parse_frame(&three).unwrap();
        assert_inner_tcp(&m, &three);
        assert_eq!((m.vlan_tci, m.vlan_inner_tci), (Some(1), Some(2)));
        let deep: Vec<_> = (0..MAX_L2_HEADERS as u16 + 1)
            .map(|i| (ethertype::VLAN, i))
            .collect();
        assert_eq!(
            parse_frame(&wrap::tags(&tcp(), &deep)),
            Err(ParseError::Unsupported)
        );
        // A tag cut short is truncated, not misread.
        let f = wrap::qinq(&tcp(), 1, 2);
        assert_eq!(parse_frame(&f[..16]), Err(ParseError::Truncated));
    }

    #[test]
    fn the_same_five_tuple_in_two_vlans_is_two_flows() {
        let a = parse_frame(&wrap::tags(&tcp(), &[(ethertype::VLAN, 10)])).unwrap();
        let b = parse_frame(&wrap::tags(&tcp(), &[(ethertype::VLAN, 20)])).unwrap();
        let c = parse_frame(&tcp()).unwrap();
        assert_ne!(a.flow, b.flow);
        assert_ne!(a.flow, c.flow);
        assert_eq!(c.flow.zone, 0);
        // The priority bits are not the network.
        let d = parse_frame(&wrap::tags(&tcp(), &[(ethertype::VLAN, 0xe00a)])).unwrap();
        assert_eq!(a.flow, d.flow);
    }

    #[test]
    fn pppoe_sessions_carry_ip() {
        for (f, v6) in [(tcp(), false), (tcp6(), true)] {
            let p = wrap::pppoe(&f, 0x1234);
            let m = parse_frame(&p).unwrap();
            assert_eq!(m.l4, L4::Tcp);
            assert_eq!(m.is_v6(), v6);
            let q = wrap::qinq(&p, 5, 6);
            let m = parse_frame(&q).unwrap();
            assert_eq!(m.l4, L4::Tcp);
            assert_eq!(m.vlan_tci, Some(5));
        }
        // PPP control (LCP) is not IP.
        let mut lcp = wrap::pppoe(&tcp(), 1);
        lcp[20] = 0xc0;
        lcp[21] = 0x21;
        assert_eq!(parse_frame(&lcp).unwrap().l4, L4::NonIp);
    }

    #[test]
    fn mpls_stacks_by_first_nibble_or_setting() {
        let f = wrap::mpls(&tcp(), &[16, 17, 18]);
        assert_inner_tcp(&parse_frame(&f).unwrap(), &f);
        let f6 = wrap::mpls(&tcp6(), &[100]);
        assert!(parse_frame(&f6).unwrap().is_v6());
        let pw = wrap::mpls_pw(&tcp(), &wrap::tags(&tcp(), &[(ethertype::VLAN, 9)]), &[300]);
        let m = parse_frame(&pw).unwrap();
        assert_inner_tcp(&m, &pw);
        // Tags inside a pseudowire are the customer's, not a zone.
        assert_eq!(m.flow.zone, 0);
        let as_ethernet = ParseOptions {
            mpls: MplsPayload::Ethernet,
            ..opts()
        };
        let mut m = PacketMeta::default();
        // Read as an Ethernet pseudowire, the IPv4 packet is no IP frame.
        let r = parse_into_opts(&f, &mut m, &as_ethernet);
        assert!(r.is_err() || m.l4 != L4::Tcp);
        let as_ip = ParseOptions {
            mpls: MplsPayload::Ip,
            ..opts()
        };
        assert_eq!(
            parse_into_opts(&pw, &mut m, &as_ip),
            Err(ParseError::BadIpHeader)
        );
        // No bottom of stack within the bound.
        let labels: Vec<u32> = (0..MAX_MPLS_LABELS as u32 + 1).collect();
        let mut deep = wrap::mpls(&tcp(), &labels);
        deep[14 + 4 * MAX_MPLS_LABELS + 2] &= !1;
        assert_eq!(parse_frame(&deep), Err(ParseError::Unsupported));
        // A payload that is neither IP nor a control word: not classified.
        let mut odd = wrap::mpls(&tcp(), &[5]);
        odd[18] = 0x90;
        assert_eq!(parse_frame(&odd).unwrap().l4, L4::NonIp);
    }

    #[test]
    fn pbb_vn_tag_and_llc() {
        let f = wrap::pbb(&tcp(), 0x123456);
        assert_inner_tcp(&parse_frame(&f).unwrap(), &f);
        let f = wrap::vn_tag(&tcp());
        assert_inner_tcp(&parse_frame(&f).unwrap(), &f);
        let stp = parse_frame(&wrap::stp_bpdu()).unwrap();
        assert_eq!(stp.l4, L4::NonIp);
        assert_eq!(stp.ethertype, 0);
    }

    fn outer() -> (IpAddr, IpAddr) {
        (IpAddr::V4([192, 0, 2, 1]), IpAddr::V4([192, 0, 2, 2]))
    }

    #[test]
    fn every_tunnel_is_opened_with_its_identifier() {
        let (s, d) = outer();
        let t = tcp();
        let cases = [
            (wrap::ip_in_ip(s, d, &t), TunnelKind::IpInIp, 0),
            (wrap::gre(s, d, None, false, &t), TunnelKind::Gre, 0),
            (
                wrap::gre(s, d, Some(0x0abc_de01), true, &t),
                TunnelKind::Gre,
                0x0abcde,
            ),
            (wrap::erspan(s, d, 2, 77, &t), TunnelKind::Erspan, 77),
            (wrap::erspan(s, d, 3, 78, &t), TunnelKind::Erspan, 78),
            (wrap::vxlan(s, d, 5000, &t), TunnelKind::Vxlan, 5000),
            (wrap::vxlan_gpe(s, d, 5001, &t), TunnelKind::VxlanGpe, 5001),
            (wrap::geneve(s, d, 5002, &t), TunnelKind::Geneve, 5002),
        ];
        for (f, kind, vni) in cases {
            let m = parse(&f).unwrap();
            assert_inner_tcp(&m, &f);
            assert_eq!(m.tunnel.kind, kind);
            assert_eq!(m.tunnel.vni, vni, "{kind:?}");
            assert_eq!(m.tunnel.outer_l3, 14);
            assert_eq!(m.tunnel.depth, 1);
            assert_eq!(m.flow.zone, (kind as u32) << 28 | vni);
            assert_eq!(zone_of(m.flow.zone), ZoneOf::Tunnel(kind, vni));
            // Without decapsulation it is the outer packet.
            let o = parse_frame(&f).unwrap();
            assert_eq!(o.tunnel.kind, TunnelKind::None);
            assert_eq!(o.flow.dst, d);
        }
        let f = wrap::ip_in_ip(s, d, &tcp6());
        assert!(parse(&f).unwrap().is_v6());
        let s6: IpAddr = "2001:db8::1".parse().unwrap();
        let d6: IpAddr = "2001:db8::2".parse().unwrap();
        let f = wrap::vxlan(s6, d6, 9, &tcp());
        assert_inner_tcp(&parse(&f).unwrap(), &f);
    }

    #[test]
    fn identical_inner_flows_of_two_vnis_never_share_a_key() {
        let (s, d) = outer();
        let a = parse(&wrap::vxlan(s, d, 100, &tcp())).unwrap();
        let b = parse(&wrap::vxlan(s, d, 200, &tcp())).unwrap();
        let g = parse(&wrap::geneve(s, d, 100, &tcp())).unwrap();
        assert_ne!(a.flow, b.flow);
        assert_ne!(a.flow, g.flow);
        assert_eq!(a.flow.canonical().0.zone, a.flow.zone);
    }

    #[test]
    fn tunnels_nest_up_to_the_bound() {
        let (s, d) = outer();
        let two = wrap::vxlan(s, d, 7, &wrap::gre(s, d, None, false, &tcp()));
        let m = parse(&two).unwrap();
        assert_inner_tcp(&m, &two);
        assert_eq!(m.tunnel.depth, 2);
        assert_eq!(m.tunnel.kind, TunnelKind::Gre);
        let three = wrap::ip_in_ip(s, d, &two);
        assert_eq!(parse(&three), Err(ParseError::Unsupported));
    }

    #[test]
    fn what_is_not_a_tunnel_stays_what_it_looks_like() {
        let (s, d) = outer();
        // UDP to 4789 without VXLAN's I flag.
        let mut f = wrap::vxlan(s, d, 1, &tcp());
        f[14 + 20 + 8] = 0;
        let m = parse(&f).unwrap();
        assert_eq!((m.l4, m.tunnel.kind), (L4::Udp, TunnelKind::None));
        // GRE version 1 (PPTP).
        let mut f = wrap::gre(s, d, None, false, &tcp());
        f[14 + 20 + 1] = 1;
        assert_eq!(parse(&f).unwrap().tunnel.kind, TunnelKind::None);
        // A tunnel whose inner packet is damaged is dropped like any damaged packet.
        let mut f = wrap::vxlan(s, d, 1, &tcp());
        let n = f.len();
        f.truncate(n - 30);
        let fixed = fix_outer_lengths(f);
        assert!(parse(&fixed).is_err());
        // ARP inside VXLAN: decapsulated, and not IP.
        let mut arp = tcp();
        arp[12] = 0x08;
        arp[13] = 0x06;
        let m = parse(&wrap::vxlan(s, d, 3, &arp)).unwrap();
        assert_eq!(m.l4, L4::NonIp);
        assert_eq!(m.tunnel.kind, TunnelKind::Vxlan);
    }

    /// Rewrites the outer IPv4 and UDP lengths of a truncated frame.
    fn fix_outer_lengths(mut f: Vec<u8>) -> Vec<u8> {
        let ip_len = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[14 + 10] = 0;
        f[14 + 11] = 0;
        crate::ipv4::Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
        let udp_len = ip_len - 20;
        f[14 + 24..14 + 26].copy_from_slice(&udp_len.to_be_bytes());
        f[14 + 26] = 0;
        f[14 + 27] = 0;
        f
    }

    #[test]
    fn icmp_errors_in_a_zone_name_the_zone() {
        let orig = build::udp_v4([10, 0, 0, 1], [192, 0, 2, 9], 4000, 53, b"q");
        let err = build::icmp_v4_error([192, 0, 2, 254], [10, 0, 0, 1], 3, 3, &orig[14..]);
        let m = parse_frame(&wrap::tags(&err, &[(ethertype::VLAN, 33)])).unwrap();
        assert_eq!(m.icmp_embedded.unwrap().flow.zone, m.flow.zone);
        assert_ne!(m.flow.zone, 0);
    }

    #[test]
    fn bounded_on_arbitrary_bytes() {
        // Every prefix of every encapsulation parses or fails cleanly.
        let (s, d) = outer();
        let frames = [
            wrap::qinq(&wrap::pppoe(&tcp(), 1), 2, 3),
            wrap::mpls_pw(&tcp(), &tcp(), &[1, 2]),
            wrap::erspan(s, d, 3, 1, &wrap::vxlan(s, d, 1, &tcp())),
            wrap::geneve(s, d, 1, &wrap::pbb(&tcp(), 1)),
        ];
        for f in frames {
            for n in 0..=f.len() {
                let _ = parse(&f[..n]);
            }
        }
    }
}
