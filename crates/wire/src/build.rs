//! Building whole frames: for traffic generators, tests and packets a function
//! emits (a TCP RST, an ICMP error).
//!
//! The `write_*` functions fill a caller's buffer and return the frame length, so a
//! generator can build into pooled buffers without allocating; the `Vec`-returning
//! shorthands are for tests.

use crate::ethernet::{ethertype, EthernetRepr, MacAddr};
use crate::icmp::IcmpRepr;
use crate::ipv4::{Ipv4Options, Ipv4Repr};
use crate::ipv6::Ipv6Repr;
use crate::tcp::{TcpOptions, TcpRepr};
use crate::udp::UdpRepr;
use crate::{ip_proto, Error, IpAddr, Result};

/// Source MAC used by generated frames.
pub const SRC_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
/// Destination MAC used by generated frames.
pub const DST_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);

/// The transport part of a frame to build.
#[derive(Debug, Clone, Copy)]
pub enum Transport<'a> {
    /// TCP with the given header fields.
    Tcp(TcpRepr),
    /// UDP with the given ports.
    Udp(UdpRepr),
    /// ICMP/ICMPv6 with the given header.
    Icmp(IcmpRepr),
    /// Raw bytes under the given protocol number.
    Raw(u8, &'a [u8]),
}

/// Writes Ethernet + IP + transport + payload into `buf`; returns the frame length.
pub fn write_frame(
    buf: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    transport: Transport<'_>,
    payload: &[u8],
) -> Result<usize> {
    let (proto, l4_len) = match &transport {
        Transport::Tcp(t) => (ip_proto::TCP, t.header_len() + payload.len()),
        Transport::Udp(_) => (ip_proto::UDP, 8 + payload.len()),
        Transport::Icmp(_) => (
            if src.is_v4() {
                ip_proto::ICMP
            } else {
                ip_proto::ICMPV6
            },
            8 + payload.len(),
        ),
        Transport::Raw(p, h) => (*p, h.len() + payload.len()),
    };
    let eth = EthernetRepr {
        src: SRC_MAC,
        dst: DST_MAC,
        vlan_tci: None,
        ethertype: if src.is_v4() {
            ethertype::IPV4
        } else {
            ethertype::IPV6
        },
    };
    let l3 = eth.header_len();
    eth.emit(buf)?;
    let l4 = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = Ipv4Repr {
                src: s,
                dst: d,
                protocol: proto,
                ttl: 64,
                tos: 0,
                ident: 0,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
                options: Ipv4Options::NONE,
                payload_len: l4_len,
            };
            ip.emit(&mut buf[l3..])?;
            l3 + ip.header_len()
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = Ipv6Repr {
                src: s,
                dst: d,
                next_header: proto,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                payload_len: l4_len,
            };
            ip.emit(&mut buf[l3..])?;
            l3 + ip.header_len()
        }
        _ => return Err(Error::Malformed("mixed address families")),
    };
    let n = match transport {
        Transport::Tcp(t) => t.emit(&mut buf[l4..], payload, &src, &dst)?,
        Transport::Udp(u) => u.emit(&mut buf[l4..], payload, &src, &dst)?,
        Transport::Icmp(i) => i.emit(&mut buf[l4..], payload, &src, &dst)?,
        Transport::Raw(_, h) => {
            let total = h.len() + payload.len();
            if buf.len() < l4 + total {
                return Err(Error::Truncated);
            }
            buf[l4..l4 + h.len()].copy_from_slice(h);
            buf[l4 + h.len()..l4 + total].copy_from_slice(payload);
            total
        }
    };
    Ok(l4 + n)
}

fn to_vec(src: IpAddr, dst: IpAddr, t: Transport<'_>, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + 40 + 60 + payload.len()];
    let n = write_frame(&mut buf, src, dst, t, payload).expect("frame fits its own buffer");
    buf.truncate(n);
    buf
}

/// A TCP segment with no options.
pub fn tcp_repr(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> TcpRepr {
    TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq,
        ack,
        flags,
        window: 65535,
        urgent: 0,
        options: TcpOptions::default(),
    }
}

/// An IPv4 TCP frame.
#[allow(clippy::too_many_arguments)]
pub fn tcp_v4(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let t = Transport::Tcp(tcp_repr(sport, dport, seq, ack, flags));
    to_vec(IpAddr::V4(src), IpAddr::V4(dst), t, payload)
}

/// An IPv6 TCP frame.
#[allow(clippy::too_many_arguments)]
pub fn tcp_v6(
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let t = Transport::Tcp(tcp_repr(sport, dport, seq, ack, flags));
    to_vec(IpAddr::V6(src), IpAddr::V6(dst), t, payload)
}

/// An IPv4 UDP frame.
pub fn udp_v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let t = Transport::Udp(UdpRepr {
        src_port: sport,
        dst_port: dport,
    });
    to_vec(IpAddr::V4(src), IpAddr::V4(dst), t, payload)
}

/// An IPv6 UDP frame.
pub fn udp_v6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let t = Transport::Udp(UdpRepr {
        src_port: sport,
        dst_port: dport,
    });
    to_vec(IpAddr::V6(src), IpAddr::V6(dst), t, payload)
}

/// An ICMPv4 echo request or reply.
pub fn icmp_v4_echo(src: [u8; 4], dst: [u8; 4], request: bool, ident: u16, seq: u16) -> Vec<u8> {
    let t = Transport::Icmp(IcmpRepr::echo(false, request, ident, seq));
    to_vec(IpAddr::V4(src), IpAddr::V4(dst), t, b"ping")
}

/// An ICMPv4 error quoting `quoted` (an IP packet, truncated as routers do to
/// header + 8 transport bytes or more).
pub fn icmp_v4_error(src: [u8; 4], dst: [u8; 4], ty: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    let t = Transport::Icmp(IcmpRepr {
        msg_type: ty,
        code,
        rest: [0; 4],
    });
    to_vec(IpAddr::V4(src), IpAddr::V4(dst), t, quoted)
}

/// An Ethernet + IPv4 frame without IP options split into two fragments at
/// `at` bytes of its IP payload (a multiple of 8), with identification `id`,
/// as fragroute's `ip_frag` sends it (replays of evasions).
///
/// # Panics
///
/// If `frame` is shorter than its headers plus `at` bytes (test input).
pub fn ipv4_fragments(frame: &[u8], at: usize, id: u16) -> [Vec<u8>; 2] {
    let (hdr, payload) = (&frame[..34], &frame[34..]);
    let part = |data: &[u8], off: usize, more: bool| {
        let mut v = hdr.to_vec();
        v.extend_from_slice(data);
        v[16..18].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
        v[18..20].copy_from_slice(&id.to_be_bytes());
        let flags = (off / 8) as u16 | if more { 0x2000 } else { 0 };
        v[20..22].copy_from_slice(&flags.to_be_bytes());
        v[24..26].copy_from_slice(&[0, 0]);
        let sum = crate::checksum::checksum(&v[14..34]);
        v[24..26].copy_from_slice(&sum.to_be_bytes());
        v
    };
    [
        part(&payload[..at], 0, true),
        part(&payload[at..], at, false),
    ]
}
