//! The single-pass parse of a frame that the data plane does once per packet.
//!
//! [`PacketMeta`] records where each layer starts and the fields functions consult,
//! so that every function of a chain reads the same parse instead of re-parsing
//! (CoMb §3.2's module reuse). Functions that rewrite headers keep it in step through
//! [`crate::rewrite`].

use crate::encap::{Inner, MAX_TUNNEL_DEPTH};
pub use crate::encap::{MplsPayload, ParseOptions, Tunnel, TunnelKind};
use crate::ethernet::ethertype;
use crate::flow::{FlowKey, IpAddr};
use crate::icmp;
use crate::ip_proto;
use crate::ipv4::Ipv4Packet;
use crate::ipv6::Ipv6Packet;
use crate::{be16, be32, Error};

/// What kind of transport a packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum L4 {
    /// Not an IP packet (ARP, LLDP, STP, PPP control, an MPLS payload that is
    /// not IP, ...): each function applies its documented non-IP policy.
    #[default]
    NonIp,
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// ICMP or ICMPv6.
    Icmp,
    /// IP with another transport, or a non-first fragment (no transport header).
    OtherIp,
}

/// Fragmentation status of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fragment {
    /// A whole datagram.
    #[default]
    None,
    /// The first fragment: it carries the transport header.
    First,
    /// A later fragment: no transport header, ports unknown (zero in the flow key).
    Later,
}

/// Why a frame was refused. Each variant is a counter in the data plane's stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// A header runs past the end of the frame.
    Truncated,
    /// An IP header is malformed (version, lengths, checksum).
    BadIpHeader,
    /// A transport header is malformed (data offset, length, options).
    BadTransport,
    /// An ICMP error's embedded packet cannot be read.
    BadIcmpEmbedded,
    /// Well-formed but unsupported (e.g. an 802.3 frame or a long IPv6 header chain).
    Unsupported,
    /// A TCP, UDP or ICMP checksum does not verify (only with [`Checksums::All`]).
    BadL4Checksum,
}

/// Which checksums a parse verifies: a chain's `verify_checksums`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checksums {
    /// The IPv4 header checksum only (the default): transport checksums are left
    /// to the endpoints, as NIC-offloaded middleboxes do.
    #[default]
    Ipv4,
    /// The IPv4 header and every unfragmented TCP, UDP and ICMP checksum.
    All,
    /// None: for captures taken on a sending host whose NIC fills checksums in
    /// (they hold 0 or garbage there).
    None,
}

impl ParseError {
    /// Every variant, for building counter tables.
    pub const ALL: [ParseError; 6] = [
        ParseError::Truncated,
        ParseError::BadIpHeader,
        ParseError::BadTransport,
        ParseError::BadIcmpEmbedded,
        ParseError::Unsupported,
        ParseError::BadL4Checksum,
    ];

    /// A stable snake_case name for metrics and summaries.
    pub fn name(self) -> &'static str {
        match self {
            ParseError::Truncated => "truncated",
            ParseError::BadIpHeader => "bad_ip_header",
            ParseError::BadTransport => "bad_transport",
            ParseError::BadIcmpEmbedded => "bad_icmp_embedded",
            ParseError::Unsupported => "unsupported",
            ParseError::BadL4Checksum => "bad_l4_checksum",
        }
    }
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for ParseError {}

/// The embedded packet of an ICMP error (the packet that caused it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpEmbedded {
    /// Offset of the embedded IP header in the frame.
    pub l3_offset: u16,
    /// Offset of the embedded transport header in the frame.
    pub l4_offset: u16,
    /// How many bytes of the embedded transport are present.
    pub l4_len: u16,
    /// The embedded packet's flow key, as it travelled (so usually the reverse of
    /// the error's own direction).
    pub flow: FlowKey,
}

/// Offsets and fields of one parsed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketMeta {
    /// Offset of the IP header.
    pub l3_offset: u16,
    /// Offset of the transport header (equals `payload_offset` if none).
    pub l4_offset: u16,
    /// Offset of the transport payload.
    pub payload_offset: u16,
    /// Transport payload length (excludes Ethernet padding).
    pub payload_len: u16,
    /// End of the IP datagram within the frame.
    pub l3_end: u16,
    /// EtherType of the innermost network layer (0x0800, 0x86dd, or what could
    /// not be classified; 0 for an 802.3/LLC frame).
    pub ethertype: u16,
    /// The outermost VLAN tag's control information (PCP, DEI, VID), if tagged.
    pub vlan_tci: Option<u16>,
    /// The second tag's (the customer tag of an 802.1ad/QinQ stack).
    pub vlan_inner_tci: Option<u16>,
    /// The tunnel the packet was decapsulated from, if any (all other fields
    /// describe the innermost packet).
    pub tunnel: Tunnel,
    /// Transport kind.
    pub l4: L4,
    /// Fragmentation status.
    pub fragment: Fragment,
    /// The directional 5-tuple.
    pub flow: FlowKey,
    /// TCP flags (0 if not TCP).
    pub tcp_flags: u8,
    /// TCP sequence number.
    pub tcp_seq: u32,
    /// TCP acknowledgment number.
    pub tcp_ack: u32,
    /// TCP window.
    pub tcp_window: u16,
    /// ICMP type and code (0 if not ICMP).
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
    /// For ICMP errors, the embedded packet.
    pub icmp_embedded: Option<IcmpEmbedded>,
    /// IP TTL or hop limit.
    pub ttl: u8,
    /// TCP flags as the frame arrived: a normaliser that rewrites the
    /// frame (clearing URG, [`crate::rewrite::clear_urgent`]) changes
    /// `tcp_flags`, never this, so rules read what the sender sent.
    pub tcp_flags_rx: u8,
    /// TTL or hop limit as the frame arrived (a normaliser may raise
    /// `ttl`, [`crate::rewrite::raise_ttl`]).
    pub ttl_rx: u8,
    /// The IPv4 options present as the frame arrived
    /// ([`crate::ipv4::option_bit`]; a normaliser may overwrite them,
    /// [`crate::rewrite::clear_ip_options`]).
    pub ip_opts_rx: u16,
}

impl Default for PacketMeta {
    fn default() -> Self {
        PacketMeta {
            l3_offset: 0,
            l4_offset: 0,
            payload_offset: 0,
            payload_len: 0,
            l3_end: 0,
            ethertype: 0,
            vlan_tci: None,
            vlan_inner_tci: None,
            tunnel: Tunnel {
                kind: TunnelKind::None,
                vni: 0,
                outer_l3: 0,
                depth: 0,
            },
            l4: L4::NonIp,
            fragment: Fragment::None,
            flow: FlowKey::UNSPECIFIED,
            tcp_flags: 0,
            tcp_seq: 0,
            tcp_ack: 0,
            tcp_window: 0,
            icmp_type: 0,
            icmp_code: 0,
            icmp_embedded: None,
            ttl: 0,
            tcp_flags_rx: 0,
            ttl_rx: 0,
            ip_opts_rx: 0,
        }
    }
}

impl PacketMeta {
    /// True if the packet is IPv4 or IPv6.
    #[inline]
    pub fn is_ip(&self) -> bool {
        self.l4 != L4::NonIp
    }

    /// True for IPv6.
    #[inline]
    pub fn is_v6(&self) -> bool {
        !self.flow.src.is_v4()
    }

    /// True if TCP with all of `flags` set.
    #[inline]
    pub fn tcp_has(&self, flags: u8) -> bool {
        self.l4 == L4::Tcp && self.tcp_flags & flags == flags
    }

    /// The transport payload within `frame`.
    #[inline]
    pub fn payload<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        let s = self.payload_offset as usize;
        &frame[s..s + self.payload_len as usize]
    }

    /// The VLAN id of the outermost tag, if tagged.
    #[inline]
    pub fn vlan_id(&self) -> Option<u16> {
        self.vlan_tci.map(|t| t & 0x0fff)
    }

    /// True if the packet was decapsulated from a tunnel.
    #[inline]
    pub fn is_tunnelled(&self) -> bool {
        self.tunnel.kind != TunnelKind::None
    }

    /// The flow of a decapsulated packet's outermost IP header (its tunnel's
    /// endpoints, protocol and, for UDP tunnels, ports); `None` outside a tunnel.
    /// Parsed again from `frame` on demand, so packets outside tunnels pay nothing.
    pub fn outer_flow(&self, frame: &[u8]) -> Option<FlowKey> {
        if !self.is_tunnelled() {
            return None;
        }
        let mut o = PacketMeta::default();
        parse_ip::<false>(frame, self.tunnel.outer_l3 as usize, &mut o, false).ok()?;
        Some(o.flow)
    }

    /// Length of the TCP segment in sequence space (payload plus SYN and FIN).
    #[inline]
    pub fn tcp_seg_len(&self) -> u32 {
        self.payload_len as u32
            + (self.tcp_flags & crate::tcp::flags::SYN != 0) as u32
            + (self.tcp_flags & crate::tcp::flags::FIN != 0) as u32
    }
}

impl From<Error> for ParseError {
    fn from(e: Error) -> Self {
        match e {
            Error::Truncated => ParseError::Truncated,
            Error::Malformed(_) => ParseError::BadIpHeader,
            Error::Unsupported(_) => ParseError::Unsupported,
        }
    }
}

/// Parses an Ethernet frame into `meta`, through VLAN stacks, PPPoE and MPLS but
/// not into tunnels (the switch reads its own Geneve underlay with it).
///
/// Only the IPv4 header checksum is verified: transport checksums are left to the
/// endpoints, as NIC-offloaded middleboxes do, because verifying them would cost
/// more than the rest of the parse for full-size packets.
pub fn parse_frame(frame: &[u8]) -> Result<PacketMeta, ParseError> {
    let mut m = PacketMeta::default();
    parse_into(frame, &mut m)?;
    Ok(m)
}

/// [`parse_frame`] into an existing `PacketMeta` (the data plane parses into each
/// packet's own metadata, saving a copy per packet). On error `m` holds no meaning.
pub fn parse_into(frame: &[u8], m: &mut PacketMeta) -> Result<(), ParseError> {
    parse_into_with(frame, m, Checksums::Ipv4)
}

/// [`parse_into`] verifying the checksums `checks` names.
#[inline]
pub fn parse_into_with(
    frame: &[u8],
    m: &mut PacketMeta,
    checks: Checksums,
) -> Result<(), ParseError> {
    parse_into_opts(
        frame,
        m,
        &ParseOptions {
            checksums: checks,
            decapsulate: false,
            mpls: MplsPayload::Auto,
        },
    )
}

/// The parse a chain does: [`parse_into`] with the chain's options, decapsulating
/// tunnels when `opts.decapsulate` is set so that functions see the innermost
/// packet (and [`PacketMeta::tunnel`] where it came from).
#[inline]
pub fn parse_into_opts(
    frame: &[u8],
    m: &mut PacketMeta,
    opts: &ParseOptions,
) -> Result<(), ParseError> {
    // The check is a constant inside the parse, so the default path is the code
    // it was before the setting existed.
    if opts.checksums == Checksums::None {
        parse_frame_into::<false>(frame, m, opts)?;
    } else {
        parse_frame_into::<true>(frame, m, opts)?;
    }
    if opts.checksums == Checksums::All && !transport_checksum_ok(frame, m) {
        return Err(ParseError::BadL4Checksum);
    }
    Ok(())
}

/// True if the packet's TCP, UDP or ICMP checksum verifies, or it has none to
/// verify here (a fragment, a UDP datagram over IPv4 without a checksum, another
/// protocol, a non-IP frame). `m` is `frame`'s parse.
pub fn transport_checksum_ok(frame: &[u8], m: &PacketMeta) -> bool {
    if !m.is_ip() || m.fragment != Fragment::None {
        return true;
    }
    let mut l4 = &frame[m.l4_offset as usize..m.l3_end as usize];
    let (src, dst) = (&m.flow.src, &m.flow.dst);
    let acc = match m.l4 {
        L4::Tcp => crate::checksum::pseudo_header(src, dst, ip_proto::TCP, l4.len() as u32),
        L4::Udp => {
            l4 = &l4[..(be16(l4, 4) as usize).min(l4.len())];
            if be16(l4, 6) == 0 && src.is_v4() {
                return true;
            }
            crate::checksum::pseudo_header(src, dst, ip_proto::UDP, l4.len() as u32)
        }
        L4::Icmp if src.is_v4() => 0,
        L4::Icmp => crate::checksum::pseudo_header(src, dst, ip_proto::ICMPV6, l4.len() as u32),
        _ => return true,
    };
    crate::checksum::fold(crate::checksum::sum(acc, l4)) == 0
}

fn parse_frame_into<const VERIFY_IP: bool>(
    frame: &[u8],
    m: &mut PacketMeta,
    opts: &ParseOptions,
) -> Result<(), ParseError> {
    if frame.len() > u16::MAX as usize {
        return Err(ParseError::Unsupported);
    }
    *m = PacketMeta::default();
    // The common frame (untagged IPv4 or IPv6) skips the walk through stacks.
    let (et, off) = match frame.get(12..14) {
        Some(&[0x08, 0x00]) | Some(&[0x86, 0xdd]) => (be16(frame, 12), 14),
        Some(_) => crate::encap::link_layer(frame, 0, m, opts.mpls, true)?,
        None => return Err(ParseError::Truncated),
    };
    network_layer::<VERIFY_IP>(frame, et, off, m)?;
    if opts.decapsulate && crate::encap::may_be_tunnel(m) {
        decapsulate::<VERIFY_IP>(frame, m, opts)?;
    }
    if m.vlan_tci.is_some() || m.tunnel.kind != TunnelKind::None {
        let z = crate::encap::zone(m);
        m.flow.zone = z;
        if let Some(e) = m.icmp_embedded.as_mut() {
            e.flow.zone = z;
        }
    }
    Ok(())
}

/// The network layer of EtherType `et` at `off`: IP is parsed, anything else is
/// non-IP with its bytes as payload.
#[inline]
fn network_layer<const VERIFY_IP: bool>(
    frame: &[u8],
    et: u16,
    off: usize,
    m: &mut PacketMeta,
) -> Result<(), ParseError> {
    m.ethertype = et;
    m.l3_offset = off as u16;
    match et {
        ethertype::IPV4 | ethertype::IPV6 => parse_ip::<VERIFY_IP>(frame, off, m, false),
        _ => {
            m.l4 = L4::NonIp;
            m.l4_offset = off as u16;
            m.payload_offset = off as u16;
            m.l3_end = frame.len() as u16;
            Ok(())
        }
    }
}

/// Replaces the outer packet `m` describes by the one its tunnel carries, as
/// long as it is a tunnel and the depth allows; an inner packet that does not
/// parse is an error like any other (the receiving tunnel endpoint would drop it
/// too).
#[cold]
fn decapsulate<const VERIFY_IP: bool>(
    frame: &[u8],
    m: &mut PacketMeta,
    opts: &ParseOptions,
) -> Result<(), ParseError> {
    let outer_l3 = m.l3_offset;
    for depth in 1..=MAX_TUNNEL_DEPTH + 1 {
        let Some((kind, vni, inner)) = crate::encap::tunnel_payload(frame, m) else {
            return Ok(());
        };
        if depth > MAX_TUNNEL_DEPTH {
            return Err(ParseError::Unsupported);
        }
        // The inner packet ends where the outer one does (not at the frame's
        // Ethernet padding).
        let within = &frame[..m.l3_end as usize];
        let (vlan, vlan_inner) = (m.vlan_tci, m.vlan_inner_tci);
        *m = PacketMeta {
            vlan_tci: vlan,
            vlan_inner_tci: vlan_inner,
            tunnel: Tunnel {
                kind,
                vni,
                outer_l3,
                depth,
            },
            ..PacketMeta::default()
        };
        let (et, off) = match inner {
            Inner::Ip(off) => {
                let v = within.get(off).ok_or(ParseError::Truncated)? >> 4;
                let et = if v == 6 {
                    ethertype::IPV6
                } else {
                    ethertype::IPV4
                };
                (et, off)
            }
            Inner::Ethernet(off) => crate::encap::link_layer(within, off, m, opts.mpls, false)?,
        };
        network_layer::<VERIFY_IP>(within, et, off, m)?;
        if !m.is_ip() {
            return Ok(());
        }
    }
    Ok(())
}

/// Parses an IP packet starting at `off` in `frame` (also used for ICMP's embedded
/// packet, where `embedded` relaxes length checks: the quoted packet is truncated).
fn parse_ip<const VERIFY_IP: bool>(
    frame: &[u8],
    off: usize,
    m: &mut PacketMeta,
    embedded: bool,
) -> Result<(), ParseError> {
    let b = &frame[off..];
    let version = b.first().ok_or(ParseError::Truncated)? >> 4;
    let (proto, l4_off, l3_end, src, dst, frag) = match version {
        4 => {
            if embedded {
                if b.len() < 20 {
                    return Err(ParseError::Truncated);
                }
                let hl = ((b[0] & 0x0f) as usize) * 4;
                if hl < 20 || b.len() < hl {
                    return Err(ParseError::BadIpHeader);
                }
                let p = Ipv4Packet::new_unchecked(b);
                let frag = frag_of(p.more_frags(), p.frag_offset());
                (
                    p.protocol(),
                    off + hl,
                    frame.len(),
                    IpAddr::V4(p.src_addr()),
                    IpAddr::V4(p.dst_addr()),
                    frag,
                )
            } else {
                let p = Ipv4Packet::new_checked(b).map_err(|e| match e {
                    Error::Truncated => ParseError::Truncated,
                    _ => ParseError::BadIpHeader,
                })?;
                if VERIFY_IP && !p.verify_checksum() {
                    return Err(ParseError::BadIpHeader);
                }
                m.ttl = p.ttl();
                m.ttl_rx = m.ttl;
                if p.header_len() > crate::ipv4::MIN_HEADER_LEN {
                    m.ip_opts_rx = crate::ipv4::options_present(
                        &b[crate::ipv4::MIN_HEADER_LEN..p.header_len()],
                    );
                }
                let frag = frag_of(p.more_frags(), p.frag_offset());
                (
                    p.protocol(),
                    off + p.header_len(),
                    off + p.total_len(),
                    IpAddr::V4(p.src_addr()),
                    IpAddr::V4(p.dst_addr()),
                    frag,
                )
            }
        }
        6 => {
            let (p, end) = if embedded {
                if b.len() < crate::ipv6::HEADER_LEN {
                    return Err(ParseError::Truncated);
                }
                // The quoted packet's payload length describes the original, not the quote.
                let avail = (b.len() - crate::ipv6::HEADER_LEN).min(be16(b, 4) as usize);
                (
                    Ipv6Packet::new_checked(&b[..crate::ipv6::HEADER_LEN + avail]),
                    frame.len(),
                )
            } else {
                let p = Ipv6Packet::new_checked(b);
                let end = p
                    .as_ref()
                    .map(|p| off + crate::ipv6::HEADER_LEN + p.payload_len())
                    .unwrap_or(0);
                (p, end)
            };
            let p = p.map_err(|e| match e {
                Error::Truncated => ParseError::Truncated,
                _ => ParseError::BadIpHeader,
            })?;
            if !embedded {
                m.ttl = p.hop_limit();
                m.ttl_rx = m.ttl;
            }
            let ul = p.upper_layer().map_err(ParseError::from)?;
            let frag = match ul.fragment {
                None => Fragment::None,
                Some((0, _)) => Fragment::First,
                Some(_) => Fragment::Later,
            };
            let frag = if ul.fragment == Some((0, false)) {
                Fragment::None
            } else {
                frag
            };
            (
                ul.protocol,
                off + ul.offset,
                end,
                IpAddr::V6(p.src_addr()),
                IpAddr::V6(p.dst_addr()),
                frag,
            )
        }
        _ => return Err(ParseError::BadIpHeader),
    };

    if embedded {
        let mut sp = 0;
        let mut dp = 0;
        let avail = frame.len().saturating_sub(l4_off);
        if frag != Fragment::Later {
            match proto {
                ip_proto::TCP | ip_proto::UDP if avail >= 4 => {
                    sp = be16(frame, l4_off);
                    dp = be16(frame, l4_off + 2);
                }
                ip_proto::TCP | ip_proto::UDP => return Err(ParseError::BadIcmpEmbedded),
                ip_proto::ICMP | ip_proto::ICMPV6
                    if avail >= 8 && icmp::is_echo(frame[l4_off], proto == ip_proto::ICMPV6) =>
                {
                    sp = be16(frame, l4_off + 4);
                    dp = sp;
                }
                _ => {}
            }
        }
        m.icmp_embedded = Some(IcmpEmbedded {
            l3_offset: off as u16,
            l4_offset: l4_off as u16,
            l4_len: avail as u16,
            flow: FlowKey {
                zone: 0,
                src,
                dst,
                src_port: sp,
                dst_port: dp,
                proto,
            },
        });
        return Ok(());
    }

    m.l3_end = l3_end as u16;
    m.fragment = frag;
    m.flow = FlowKey {
        zone: 0,
        src,
        dst,
        src_port: 0,
        dst_port: 0,
        proto,
    };
    m.l4_offset = l4_off as u16;
    if l4_off > l3_end {
        return Err(ParseError::Truncated);
    }
    let l4 = &frame[l4_off..l3_end];
    if frag == Fragment::Later {
        m.l4 = L4::OtherIp;
        m.payload_offset = l4_off as u16;
        m.payload_len = l4.len() as u16;
        return Ok(());
    }
    match proto {
        ip_proto::TCP => {
            if l4.len() < 20 {
                return Err(ParseError::Truncated);
            }
            let hl = ((l4[12] >> 4) as usize) * 4;
            if hl < 20 {
                return Err(ParseError::BadTransport);
            }
            if l4.len() < hl {
                return Err(ParseError::Truncated);
            }
            m.l4 = L4::Tcp;
            m.flow.src_port = be16(l4, 0);
            m.flow.dst_port = be16(l4, 2);
            m.tcp_seq = be32(l4, 4);
            m.tcp_ack = be32(l4, 8);
            m.tcp_flags = l4[13];
            m.tcp_flags_rx = m.tcp_flags;
            m.tcp_window = be16(l4, 14);
            m.payload_offset = (l4_off + hl) as u16;
            m.payload_len = (l4.len() - hl) as u16;
        }
        ip_proto::UDP => {
            if l4.len() < 8 {
                return Err(ParseError::Truncated);
            }
            let ulen = be16(l4, 4) as usize;
            if ulen < 8 || (frag == Fragment::None && ulen > l4.len()) {
                return Err(ParseError::BadTransport);
            }
            m.l4 = L4::Udp;
            m.flow.src_port = be16(l4, 0);
            m.flow.dst_port = be16(l4, 2);
            m.payload_offset = (l4_off + 8) as u16;
            m.payload_len = (ulen.min(l4.len()) - 8) as u16;
        }
        ip_proto::ICMP | ip_proto::ICMPV6 => {
            if l4.len() < icmp::HEADER_LEN {
                return Err(ParseError::Truncated);
            }
            let v6 = proto == ip_proto::ICMPV6;
            if v6 == src.is_v4() {
                return Err(ParseError::BadTransport);
            }
            m.l4 = L4::Icmp;
            m.icmp_type = l4[0];
            m.icmp_code = l4[1];
            m.payload_offset = (l4_off + icmp::HEADER_LEN) as u16;
            m.payload_len = (l4.len() - icmp::HEADER_LEN) as u16;
            if icmp::is_echo(m.icmp_type, v6) {
                m.flow.src_port = be16(l4, 4);
                m.flow.dst_port = m.flow.src_port;
            } else if icmp::is_error(m.icmp_type, v6) {
                let inner = l4_off + icmp::HEADER_LEN;
                let mut tmp = PacketMeta::default();
                parse_ip::<VERIFY_IP>(&frame[..l3_end], inner, &mut tmp, true)
                    .map_err(|_| ParseError::BadIcmpEmbedded)?;
                m.icmp_embedded = tmp.icmp_embedded;
            }
        }
        _ => {
            m.l4 = L4::OtherIp;
            m.payload_offset = l4_off as u16;
            m.payload_len = l4.len() as u16;
        }
    }
    Ok(())
}

fn frag_of(more: bool, offset: u16) -> Fragment {
    match (more, offset) {
        (false, 0) => Fragment::None,
        (true, 0) => Fragment::First,
        _ => Fragment::Later,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;

    #[test]
    fn tcp_over_vlan() {
        let mut f = build::tcp_v4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1234,
            80,
            1000,
            0,
            0x02,
            b"hello",
        );
        // Insert an 802.1Q tag after the MACs.
        f.splice(12..12, [0x81, 0x00, 0x00, 0x2a]);
        let m = parse_frame(&f).unwrap();
        assert_eq!(m.vlan_tci, Some(42));
        assert_eq!(m.l4, L4::Tcp);
        assert_eq!(m.flow.dst_port, 80);
        assert_eq!(m.tcp_seq, 1000);
        assert_eq!(m.payload(&f), b"hello");
        assert_eq!(m.tcp_seg_len(), 6);
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut f = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 53, 5353, b"x");
        f.resize(60, 0);
        let m = parse_frame(&f).unwrap();
        assert_eq!(m.payload(&f), b"x");
    }

    #[test]
    fn icmp_error_exposes_embedded_flow() {
        let orig = build::udp_v4([10, 0, 0, 1], [192, 0, 2, 9], 4000, 53, b"query");
        let err = build::icmp_v4_error([192, 0, 2, 254], [10, 0, 0, 1], 3, 3, &orig[14..]);
        let m = parse_frame(&err).unwrap();
        assert_eq!(m.l4, L4::Icmp);
        let e = m.icmp_embedded.unwrap();
        assert_eq!(e.flow.src_port, 4000);
        assert_eq!(e.flow.dst, IpAddr::V4([192, 0, 2, 9]));
    }

    #[test]
    fn checksum_verification_follows_the_setting() {
        let parse = |f: &[u8], c| parse_into_with(f, &mut PacketMeta::default(), c);
        let tcp = build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 7, 0, 0x18, b"hello");
        let udp = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 53, 53, b"query");
        let icmp = build::icmp_v4_echo([10, 0, 0, 1], [10, 0, 0, 2], true, 9, 1);
        let all = [Checksums::Ipv4, Checksums::All, Checksums::None];
        for c in all {
            for f in [&tcp, &udp, &icmp] {
                assert_eq!(parse(f, c), Ok(()), "{c:?}");
            }
        }
        let mut bad = icmp.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert_eq!(parse(&bad, Checksums::All), Err(ParseError::BadL4Checksum));
        // An IPv4 header checksum left at 0 by a sender's offload: refused unless
        // nothing is verified.
        let mut zero = tcp.clone();
        zero[14 + 10] = 0;
        zero[14 + 11] = 0;
        assert_eq!(parse(&zero, Checksums::Ipv4), Err(ParseError::BadIpHeader));
        assert_eq!(parse(&zero, Checksums::All), Err(ParseError::BadIpHeader));
        assert_eq!(parse(&zero, Checksums::None), Ok(()));
        // A TCP checksum that does not verify: only `All` looks.
        let mut bad = tcp.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff; // payload changed without fixing the checksum
        assert_eq!(parse(&bad, Checksums::Ipv4), Ok(()));
        assert_eq!(parse(&bad, Checksums::All), Err(ParseError::BadL4Checksum));
        assert_eq!(parse(&bad, Checksums::None), Ok(()));
        let mut bad = udp.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert_eq!(parse(&bad, Checksums::All), Err(ParseError::BadL4Checksum));
        // UDP over IPv4 without a checksum (0) has nothing to verify.
        bad[14 + 20 + 6] = 0;
        bad[14 + 20 + 7] = 0;
        assert_eq!(parse(&bad, Checksums::All), Ok(()));
        assert_eq!(ParseError::BadL4Checksum.name(), "bad_l4_checksum");
    }

    #[test]
    fn malformed_frames_are_classified() {
        let f = build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 0, 0, 0x10, b"");
        assert_eq!(parse_frame(&f[..30]), Err(ParseError::Truncated));
        let mut bad = f.clone();
        bad[14 + 8] ^= 1; // TTL changed without fixing the checksum
        assert_eq!(parse_frame(&bad), Err(ParseError::BadIpHeader));
        let mut bad = f.clone();
        bad[14 + 20 + 12] = 0x10; // data offset 4 bytes
        assert_eq!(parse_frame(&bad), Err(ParseError::BadTransport));
        assert_eq!(parse_frame(&[0u8; 5]), Err(ParseError::Truncated));
    }

    #[test]
    fn ipv6_and_fragments() {
        let f = build::tcp_v6([0x20; 16], [0x21; 16], 5, 6, 1, 0, 0x02, b"");
        let m = parse_frame(&f).unwrap();
        assert_eq!(m.l4, L4::Tcp);
        assert!(m.is_v6());
        let mut frag = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, &[0u8; 16]);
        frag[14 + 6] = 0x00;
        frag[14 + 7] = 0x02; // offset 16 bytes, no MF
        crate::ipv4::Ipv4Packet::new_unchecked(&mut frag[14..]).fill_checksum();
        let m = parse_frame(&frag).unwrap();
        assert_eq!(m.fragment, Fragment::Later);
        assert_eq!(m.l4, L4::OtherIp);
        assert_eq!(m.flow.src_port, 0);
    }
}
#[cfg(test)]
mod size_probe {
    #[test]
    fn sizes() {
        eprintln!(
            "PacketMeta {} FlowKey {} Tunnel {} IcmpEmbedded {}",
            std::mem::size_of::<super::PacketMeta>(),
            std::mem::size_of::<crate::FlowKey>(),
            std::mem::size_of::<super::Tunnel>(),
            std::mem::size_of::<super::IcmpEmbedded>()
        );
    }
}
