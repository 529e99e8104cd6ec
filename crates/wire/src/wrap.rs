//! Wrapping a built frame in the encapsulations [`crate::encap`] parses: link
//! stacks (tags, PPPoE, MPLS, PBB, VN-Tag) and tunnels (IP-in-IP, GRE, ERSPAN,
//! VXLAN, Geneve). For tests, fixtures and benchmarks; each takes an Ethernet
//! frame as [`crate::build`] makes them and returns a new one.

use crate::build::{write_frame, Transport};
use crate::encap::{ethertype as et, GENEVE_PORT, VXLAN_GPE_PORT, VXLAN_PORT};
use crate::ethernet::ethertype;
use crate::udp::UdpRepr;
use crate::{ip_proto, IpAddr};

/// `frame` with `tags` (TPID, TCI) inserted after the MACs, outermost first.
pub fn tags(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    for &(tpid, tci) in tags {
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&tci.to_be_bytes());
    }
    out.extend_from_slice(&frame[12..]);
    out
}

/// `frame` with an 802.1ad service tag `s` and 802.1Q customer tag `c`.
pub fn qinq(frame: &[u8], s: u16, c: u16) -> Vec<u8> {
    tags(frame, &[(et::QINQ, s), (et::VLAN, c)])
}

/// `frame`'s IP packet in a PPPoE session `session` (after any tags it has).
pub fn pppoe(frame: &[u8], session: u16) -> Vec<u8> {
    let at = l2_end(frame);
    let ip = &frame[at..];
    let ppp = if ethertype_of_at(frame, at) == ethertype::IPV6 {
        0x0057u16
    } else {
        0x0021
    };
    let mut out = frame[..at - 2].to_vec();
    out.extend_from_slice(&et::PPPOE_SESSION.to_be_bytes());
    out.extend_from_slice(&[0x11, 0x00]);
    out.extend_from_slice(&session.to_be_bytes());
    out.extend_from_slice(&((ip.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(&ppp.to_be_bytes());
    out.extend_from_slice(ip);
    out
}

/// `frame`'s IP packet under an MPLS label stack `labels` (outermost first).
pub fn mpls(frame: &[u8], labels: &[u32]) -> Vec<u8> {
    let at = l2_end(frame);
    let mut out = frame[..at - 2].to_vec();
    out.extend_from_slice(&et::MPLS.to_be_bytes());
    push_labels(&mut out, labels);
    out.extend_from_slice(&frame[at..]);
    out
}

/// An Ethernet pseudowire: `inner` (a whole frame) after a control word under
/// `labels`, in a frame with `outer`'s MACs.
pub fn mpls_pw(outer: &[u8], inner: &[u8], labels: &[u32]) -> Vec<u8> {
    let mut out = outer[..12].to_vec();
    out.extend_from_slice(&et::MPLS.to_be_bytes());
    push_labels(&mut out, labels);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(inner);
    out
}

fn push_labels(out: &mut Vec<u8>, labels: &[u32]) {
    for (i, &l) in labels.iter().enumerate() {
        let bos = (i + 1 == labels.len()) as u32;
        out.extend_from_slice(&(l << 12 | bos << 8 | 64).to_be_bytes());
    }
}

/// `frame` in an 802.1ah backbone frame with service id `isid`.
pub fn pbb(frame: &[u8], isid: u32) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    out.extend_from_slice(&et::PBB.to_be_bytes());
    out.extend_from_slice(&(isid & 0x00ff_ffff).to_be_bytes());
    out.extend_from_slice(frame);
    out
}

/// `frame` with a VN-Tag after its MACs.
pub fn vn_tag(frame: &[u8]) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    out.extend_from_slice(&et::VN_TAG.to_be_bytes());
    out.extend_from_slice(&[0x80, 0x01, 0x00, 0x02]);
    out.extend_from_slice(&frame[12..]);
    out
}

/// An 802.3/LLC spanning-tree BPDU.
pub fn stp_bpdu() -> Vec<u8> {
    let mut out = vec![0x01, 0x80, 0xc2, 0, 0, 0, 0x02, 0, 0, 0, 0, 0x09];
    let bpdu = [0u8; 35];
    out.extend_from_slice(&((3 + bpdu.len()) as u16).to_be_bytes());
    out.extend_from_slice(&[0x42, 0x42, 0x03]);
    out.extend_from_slice(&bpdu);
    out
}

/// An outer IPv4 (or IPv6) packet from `src` to `dst` of protocol `proto` whose
/// payload is `payload`.
fn outer_ip(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + 40 + payload.len()];
    let n = write_frame(&mut buf, src, dst, Transport::Raw(proto, payload), &[])
        .expect("fits its own buffer");
    buf.truncate(n);
    buf
}

/// An outer UDP datagram to port `dport` carrying `payload`.
fn outer_udp(src: IpAddr, dst: IpAddr, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + 40 + 8 + payload.len()];
    let udp = UdpRepr {
        src_port: 49152 + (payload.len() as u16 & 0x3fff),
        dst_port: dport,
    };
    let n =
        write_frame(&mut buf, src, dst, Transport::Udp(udp), payload).expect("fits its own buffer");
    buf.truncate(n);
    buf
}

/// `frame`'s IP packet inside IP from `src` to `dst` (protocol 4 or 41).
pub fn ip_in_ip(src: IpAddr, dst: IpAddr, frame: &[u8]) -> Vec<u8> {
    let ip = &frame[l2_end(frame)..];
    let proto = if ip[0] >> 4 == 6 {
        ip_proto::IPV6_IN_IP
    } else {
        ip_proto::IPIP
    };
    outer_ip(src, dst, proto, ip)
}

/// `frame` in GRE: its IP packet (`ethernet` false) or the whole frame
/// (transparent Ethernet bridging), with an optional key.
pub fn gre(src: IpAddr, dst: IpAddr, key: Option<u32>, ethernet: bool, frame: &[u8]) -> Vec<u8> {
    let (proto, body) = if ethernet {
        (et::TEB, frame)
    } else {
        (
            ethertype_of_at(frame, l2_end(frame)),
            &frame[l2_end(frame)..],
        )
    };
    let mut g = vec![if key.is_some() { 0x20 } else { 0 }, 0];
    g.extend_from_slice(&proto.to_be_bytes());
    if let Some(k) = key {
        g.extend_from_slice(&k.to_be_bytes());
    }
    g.extend_from_slice(body);
    outer_ip(src, dst, ip_proto::GRE, &g)
}

/// `frame` mirrored in ERSPAN type II (`version` 2) or III (`version` 3) over GRE
/// with session `session`.
pub fn erspan(src: IpAddr, dst: IpAddr, version: u8, session: u16, frame: &[u8]) -> Vec<u8> {
    let mut g = vec![0x10, 0];
    let proto = if version == 3 {
        et::ERSPAN_III
    } else {
        et::ERSPAN_II
    };
    g.extend_from_slice(&proto.to_be_bytes());
    g.extend_from_slice(&7u32.to_be_bytes()); // sequence number
    let ver = if version == 3 { 2u16 } else { 1 };
    g.extend_from_slice(&(ver << 12).to_be_bytes());
    g.extend_from_slice(&(session & 0x03ff).to_be_bytes());
    if version == 3 {
        g.extend_from_slice(&[0; 8]); // timestamp, SGT, flags (no subheader)
    } else {
        g.extend_from_slice(&[0; 4]); // index
    }
    g.extend_from_slice(frame);
    outer_ip(src, dst, ip_proto::GRE, &g)
}

/// `frame` in VXLAN with network identifier `vni`.
pub fn vxlan(src: IpAddr, dst: IpAddr, vni: u32, frame: &[u8]) -> Vec<u8> {
    let mut v = vec![0x08, 0, 0, 0];
    v.extend_from_slice(&(vni << 8).to_be_bytes());
    v.extend_from_slice(frame);
    outer_udp(src, dst, VXLAN_PORT, &v)
}

/// `frame`'s IP packet in VXLAN-GPE with network identifier `vni`.
pub fn vxlan_gpe(src: IpAddr, dst: IpAddr, vni: u32, frame: &[u8]) -> Vec<u8> {
    let ip = &frame[l2_end(frame)..];
    let next = if ip[0] >> 4 == 6 { 2 } else { 1 };
    let mut v = vec![0x0c, 0, 0, next];
    v.extend_from_slice(&(vni << 8).to_be_bytes());
    v.extend_from_slice(ip);
    outer_udp(src, dst, VXLAN_GPE_PORT, &v)
}

/// `frame` in Geneve with network identifier `vni` and one 8-byte option.
pub fn geneve(src: IpAddr, dst: IpAddr, vni: u32, frame: &[u8]) -> Vec<u8> {
    let mut v = vec![0x02, 0];
    v.extend_from_slice(&et::TEB.to_be_bytes());
    v.extend_from_slice(&(vni << 8).to_be_bytes());
    v.extend_from_slice(&[0x01, 0x02, 0x03, 0x01, 0, 0, 0, 9]);
    v.extend_from_slice(frame);
    outer_udp(src, dst, GENEVE_PORT, &v)
}

/// Where `frame`'s network layer starts, after any 802.1Q/802.1ad tags.
fn l2_end(frame: &[u8]) -> usize {
    let mut at = 14;
    while matches!(ethertype_of_at(frame, at), et::VLAN | et::QINQ) {
        at += 4;
    }
    at
}

/// The EtherType just before offset `at`.
fn ethertype_of_at(frame: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([frame[at - 2], frame[at - 1]])
}
