//! Header rewriting with incremental checksum updates (RFC 1624).
//!
//! NAT and load balancing change addresses and ports of packets already parsed;
//! recomputing checksums over a whole 1500-byte packet would cost more than the rest
//! of the function, so every change patches the affected checksums in place and keeps
//! the [`PacketMeta`] in step.

use crate::checksum::update_bytes;
use crate::parse::{Fragment, PacketMeta, L4};
use crate::{be16, icmp, ip_proto, put16, Error, IpAddr, Result};

/// Which end of a flow to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The source address and port.
    Src,
    /// The destination address and port.
    Dst,
}

/// Offset of the transport checksum relative to the transport header, if the
/// transport has one that covers the IP pseudo-header or ports.
fn l4_checksum_offset(proto: u8) -> Option<usize> {
    match proto {
        ip_proto::TCP => Some(16),
        ip_proto::UDP => Some(6),
        ip_proto::ICMP | ip_proto::ICMPV6 => Some(2),
        _ => None,
    }
}

/// Replaces `frame[at..at+new.len()]` with `new`, patching each checksum at the
/// given offsets. A UDP checksum of zero (none, over IPv4) is left untouched.
fn patch(frame: &mut [u8], at: usize, new: &[u8], cksums: &[(usize, bool)]) {
    let old_end = at + new.len();
    let mut old = [0u8; 16];
    old[..new.len()].copy_from_slice(&frame[at..old_end]);
    for &(c, udp) in cksums {
        let cur = be16(frame, c);
        if udp && cur == 0 {
            continue;
        }
        let mut v = update_bytes(cur, &old[..new.len()], new);
        if udp && v == 0 {
            v = 0xffff;
        }
        put16(frame, c, v);
    }
    frame[at..old_end].copy_from_slice(new);
}

/// Sets the source or destination address and port of a parsed IP packet.
///
/// For an ICMP echo the "port" is the identifier (both ports of its flow key are the
/// identifier, so `port` replaces it whichever endpoint is named). Non-first fragments
/// have no transport header; only their address changes.
pub fn set_endpoint(
    frame: &mut [u8],
    meta: &mut PacketMeta,
    which: Endpoint,
    addr: IpAddr,
    port: u16,
) -> Result<()> {
    if !meta.is_ip() {
        return Err(Error::Unsupported("rewrite of a non-IP frame"));
    }
    if addr.is_v4() != meta.flow.src.is_v4() {
        return Err(Error::Malformed("address family differs from packet"));
    }
    let l3 = meta.l3_offset as usize;
    let l4 = meta.l4_offset as usize;
    let v4 = addr.is_v4();
    let has_l4 = meta.fragment != Fragment::Later && meta.l4 != L4::OtherIp;
    let proto = meta.flow.proto;
    let l4c = if has_l4 {
        l4_checksum_offset(proto).map(|o| l4 + o)
    } else {
        None
    };
    let udp = proto == ip_proto::UDP;

    // Address: IPv4 header checksum and the transport's pseudo-header (not ICMPv4's).
    let addr_at = match (v4, which) {
        (true, Endpoint::Src) => l3 + 12,
        (true, Endpoint::Dst) => l3 + 16,
        (false, Endpoint::Src) => l3 + 8,
        (false, Endpoint::Dst) => l3 + 24,
    };
    let mut sums = [(0usize, false); 2];
    let mut n = 0;
    if v4 {
        sums[n] = (l3 + 10, false);
        n += 1;
    }
    if let Some(c) = l4c {
        if proto != ip_proto::ICMP {
            sums[n] = (c, udp);
            n += 1;
        }
    }
    patch(frame, addr_at, addr.as_bytes(), &sums[..n]);

    // Port (or echo identifier): only the transport checksum covers it.
    if let Some(c) = l4c {
        match meta.l4 {
            L4::Tcp | L4::Udp => {
                let at = if which == Endpoint::Src { l4 } else { l4 + 2 };
                patch(frame, at, &port.to_be_bytes(), &[(c, udp)]);
            }
            L4::Icmp if icmp::is_echo(meta.icmp_type, !v4) => {
                patch(frame, l4 + 4, &port.to_be_bytes(), &[(c, false)]);
                meta.flow.src_port = port;
                meta.flow.dst_port = port;
            }
            _ => {}
        }
    }
    match which {
        Endpoint::Src => {
            meta.flow.src = addr;
            if matches!(meta.l4, L4::Tcp | L4::Udp) {
                meta.flow.src_port = port;
            }
        }
        Endpoint::Dst => {
            meta.flow.dst = addr;
            if matches!(meta.l4, L4::Tcp | L4::Udp) {
                meta.flow.dst_port = port;
            }
        }
    }
    Ok(())
}

/// Rewrites an endpoint of the packet quoted inside an ICMP error, patching the quoted
/// IP header checksum, the quoted transport checksum when it is present in the quote,
/// and the outer ICMP checksum that covers all of them.
pub fn set_embedded_endpoint(
    frame: &mut [u8],
    meta: &mut PacketMeta,
    which: Endpoint,
    addr: IpAddr,
    port: u16,
) -> Result<()> {
    let e = meta
        .icmp_embedded
        .ok_or(Error::Unsupported("not an ICMP error"))?;
    if addr.is_v4() != e.flow.src.is_v4() {
        return Err(Error::Malformed(
            "address family differs from quoted packet",
        ));
    }
    let outer = meta.l4_offset as usize + 2;
    let l3 = e.l3_offset as usize;
    let l4 = e.l4_offset as usize;
    let v4 = addr.is_v4();
    let addr_at = match (v4, which) {
        (true, Endpoint::Src) => l3 + 12,
        (true, Endpoint::Dst) => l3 + 16,
        (false, Endpoint::Src) => l3 + 8,
        (false, Endpoint::Dst) => l3 + 24,
    };
    let proto = e.flow.proto;
    let udp = proto == ip_proto::UDP;
    // The quoted transport checksum is patched only when the quote includes it.
    let inner_c = l4_checksum_offset(proto)
        .filter(|&o| o + 2 <= e.l4_len as usize && proto != ip_proto::ICMP)
        .map(|o| l4 + o);

    // Order matters: each patch of an inner checksum is itself a change the outer
    // ICMP checksum must absorb, so inner checksums are patched through `patch` with
    // the outer checksum listed alongside.
    let mut sums: [(usize, bool); 3] = [(outer, false); 3];
    let mut n = 1;
    if v4 {
        sums[n] = (l3 + 10, false);
        n += 1;
    }
    if let Some(c) = inner_c {
        sums[n] = (c, udp);
        n += 1;
    }
    patch_nested(frame, addr_at, addr.as_bytes(), outer, &sums[1..n]);

    if e.l4_len >= 4 && matches!(proto, ip_proto::TCP | ip_proto::UDP) {
        let at = if which == Endpoint::Src { l4 } else { l4 + 2 };
        let inner: &[(usize, bool)] = match inner_c {
            Some(c) => &[(c, udp)],
            None => &[],
        };
        patch_nested(frame, at, &port.to_be_bytes(), outer, inner);
    }
    let emb = meta.icmp_embedded.as_mut().unwrap();
    match which {
        Endpoint::Src => {
            emb.flow.src = addr;
            emb.flow.src_port = port;
        }
        Endpoint::Dst => {
            emb.flow.dst = addr;
            emb.flow.dst_port = port;
        }
    }
    Ok(())
}

/// Like `patch` for bytes inside an ICMP quote: patches the inner checksums, then
/// folds every changed word (data and inner checksums) into the outer checksum.
fn patch_nested(frame: &mut [u8], at: usize, new: &[u8], outer: usize, inner: &[(usize, bool)]) {
    let mut old_sums = [[0u8; 2]; 2];
    for (i, &(c, _)) in inner.iter().enumerate() {
        old_sums[i] = [frame[c], frame[c + 1]];
    }
    let mut old_data = [0u8; 16];
    old_data[..new.len()].copy_from_slice(&frame[at..at + new.len()]);
    patch(frame, at, new, inner);
    let mut o = update_bytes(be16(frame, outer), &old_data[..new.len()], new);
    for (i, &(c, _)) in inner.iter().enumerate() {
        let cur = [frame[c], frame[c + 1]];
        o = update_bytes(o, &old_sums[i], &cur);
    }
    put16(frame, outer, o);
}

/// Full verification of every checksum in a parsed frame, computed from scratch.
/// Tests use it as the independent check of incremental updates.
pub fn verify_all_checksums(frame: &[u8]) -> bool {
    let Ok(m) = crate::parse::parse_frame(frame) else {
        return false;
    };
    if !m.is_ip() {
        return true;
    }
    let l4 = &frame[m.l4_offset as usize..m.l3_end as usize];
    let (s, d) = (m.flow.src, m.flow.dst);
    let l4_ok = match m.l4 {
        L4::Tcp => crate::tcp::TcpSegment::new_checked(l4).is_ok_and(|t| t.verify_checksum(&s, &d)),
        L4::Udp => {
            crate::udp::UdpDatagram::new_checked(l4).is_ok_and(|u| u.verify_checksum(&s, &d))
        }
        L4::Icmp => {
            crate::icmp::IcmpMessage::new_checked(l4).is_ok_and(|i| i.verify_checksum(&s, &d))
        }
        _ => true,
    };
    let inner_ok = match m.icmp_embedded {
        Some(e) if e.flow.src.is_v4() => {
            let ip = &frame[e.l3_offset as usize..e.l4_offset as usize];
            crate::checksum::checksum(ip) == 0
        }
        _ => true,
    };
    l4_ok && inner_ok
}

/// Clears a TCP segment's URG flag and urgent pointer, patching its checksum
/// (RFC 1624), and keeps `m` in step. Returns false, changing nothing, if the
/// packet is not an unfragmented TCP segment with URG set.
///
/// Why: stacks take the urgent byte out of the stream by default (Linux
/// without `SO_OOBINLINE`), so "EVXIL" with the pointer after the X reaches
/// the application as "EVIL" while an IPS reads "EVXIL". Without URG every
/// receiver reads the bytes inline, as inspected (Snort's `urp` normaliser).
pub fn clear_urgent(frame: &mut [u8], m: &mut PacketMeta) -> bool {
    use crate::tcp::flags::URG;
    if m.l4 != L4::Tcp || m.tcp_flags & URG == 0 || m.fragment != Fragment::None {
        return false;
    }
    let o = m.l4_offset as usize;
    let Some(seg) = frame.get_mut(o..o + crate::tcp::MIN_HEADER_LEN) else {
        return false;
    };
    let old = [seg[12], seg[13], seg[18], seg[19]];
    seg[13] &= !URG;
    seg[18] = 0;
    seg[19] = 0;
    let mut c = be16(seg, 16);
    c = update_bytes(c, &old[..2], &seg[12..14]);
    c = update_bytes(c, &old[2..], &seg[18..20]);
    put16(seg, 16, c);
    m.tcp_flags &= !URG;
    true
}

/// Raises an IP packet's TTL (IPv4, patching the header checksum, RFC 1624)
/// or hop limit (IPv6) to `min` if it is lower, and keeps `m` in step.
/// Returns whether it changed anything.
///
/// Why: a segment whose TTL runs out between an inline IPS and the host is
/// read by the IPS and never by the host (Ptacek & Newsham's TTL evasion);
/// with its TTL raised it reaches the host, which then reads what was
/// inspected (Snort's `ip4: ttl` normaliser).
pub fn raise_ttl(frame: &mut [u8], m: &mut PacketMeta, min: u8) -> bool {
    if m.ttl >= min {
        return false;
    }
    let o = m.l3_offset as usize;
    let Some(&first) = frame.get(o) else {
        return false;
    };
    match first >> 4 {
        4 => {
            let Some(h) = frame.get_mut(o..o + 12) else {
                return false;
            };
            let old = [h[8], h[9]];
            h[8] = min;
            let c = update_bytes(be16(h, 10), &old, &h[8..10]);
            put16(h, 10, c);
        }
        6 => {
            let Some(h) = frame.get_mut(o + 7) else {
                return false;
            };
            *h = min;
        }
        _ => return false,
    }
    m.ttl = min;
    true
}

/// Overwrites an IPv4 header's options with NOPs, patching the header
/// checksum (RFC 1624). Returns whether it changed anything (false for IPv6,
/// a header without options, or options that are all NOPs already).
///
/// Why: a host may drop a packet for its options (Linux drops source-routed
/// packets unless `accept_source_route` is set) where an IPS takes its bytes,
/// so a decoy with a source route would stand for the real segment. With its
/// options NOPs every host accepts the packet the IPS read (Snort's `ip4:
/// opts` normaliser).
pub fn clear_ip_options(frame: &mut [u8], m: &PacketMeta) -> bool {
    let o = m.l3_offset as usize;
    let Some(&vihl) = frame.get(o) else {
        return false;
    };
    let ihl = (vihl & 0x0f) as usize * 4;
    if vihl >> 4 != 4 || ihl <= 20 {
        return false;
    }
    let Some(h) = frame.get_mut(o..o + ihl) else {
        return false;
    };
    if h[20..].iter().all(|&b| b == 1) {
        return false;
    }
    let n = ihl - 20;
    let mut old = [0u8; 40];
    old[..n].copy_from_slice(&h[20..]);
    h[20..].fill(1);
    let c = update_bytes(be16(h, 10), &old[..n], &h[20..]);
    put16(h, 10, c);
    true
}

/// Recomputes the TCP or UDP checksum of `frame` in place, from scratch (so
/// it does not matter what the field held: a partial sum left for the NIC, or
/// the sum before the payload was rewritten). Returns false (and leaves the
/// frame alone) if it is not an unfragmented IPv4/IPv6 TCP or UDP packet that
/// can be parsed.
pub fn fill_l4_checksum(frame: &mut [u8]) -> bool {
    use crate::checksum::{fold, pseudo_header, sum};
    let Ok(m) = crate::parse::parse_frame(frame) else {
        return false;
    };
    if m.fragment != Fragment::None {
        return false;
    }
    let (proto, field) = match m.l4 {
        L4::Tcp => (ip_proto::TCP, 16),
        L4::Udp => (ip_proto::UDP, 6),
        _ => return false,
    };
    let (start, end) = (m.l4_offset as usize, m.l3_end as usize);
    if end > frame.len() || start + field + 2 > end {
        return false;
    }
    let seg = &mut frame[start..end];
    put16(seg, field, 0);
    let acc = pseudo_header(&m.flow.src, &m.flow.dst, proto, seg.len() as u32);
    let mut c = fold(sum(acc, seg));
    if proto == ip_proto::UDP && c == 0 {
        // RFC 768: a computed zero is sent as all ones; zero means "no checksum".
        c = 0xffff;
    }
    put16(seg, field, c);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::parse::parse_frame;
    use proptest::prelude::*;

    fn rewrite_and_check(mut f: Vec<u8>, which: Endpoint, addr: IpAddr, port: u16) {
        assert!(verify_all_checksums(&f));
        let mut m = parse_frame(&f).unwrap();
        set_endpoint(&mut f, &mut m, which, addr, port).unwrap();
        assert!(verify_all_checksums(&f), "checksums after rewrite");
        let again = parse_frame(&f).unwrap();
        assert_eq!(again.flow, m.flow, "meta kept in step with the bytes");
    }

    proptest! {
        #[test]
        fn tcp_udp_rewrites_keep_checksums(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, na: [u8; 4], np: u16,
                                           payload in proptest::collection::vec(any::<u8>(), 0..100), dst_side: bool) {
            let which = if dst_side { Endpoint::Dst } else { Endpoint::Src };
            rewrite_and_check(build::tcp_v4(src, dst, sp, dp, 1, 2, 0x18, &payload), which, IpAddr::V4(na), np);
            rewrite_and_check(build::udp_v4(src, dst, sp, dp, &payload), which, IpAddr::V4(na), np);
        }

        #[test]
        fn v6_rewrites_keep_checksums(src: [u8; 16], dst: [u8; 16], na: [u8; 16], np: u16) {
            rewrite_and_check(build::tcp_v6(src, dst, 1, 2, 3, 4, 0x10, b"abc"), Endpoint::Src, IpAddr::V6(na), np);
        }
    }

    #[test]
    fn icmp_echo_identifier_is_the_port() {
        let f = build::icmp_v4_echo([10, 0, 0, 1], [8, 8, 8, 8], true, 77, 1);
        rewrite_and_check(f.clone(), Endpoint::Src, IpAddr::V4([203, 0, 113, 5]), 4000);
        let mut f = f;
        let mut m = parse_frame(&f).unwrap();
        set_endpoint(
            &mut f,
            &mut m,
            Endpoint::Src,
            IpAddr::V4([203, 0, 113, 5]),
            4000,
        )
        .unwrap();
        assert_eq!((m.flow.src_port, m.flow.dst_port), (4000, 4000));
    }

    #[test]
    fn icmp_error_quote_rewrite_keeps_all_checksums() {
        // Inside host 10.0.0.1:4000 was translated to 203.0.113.5:6000; a router replies
        // to the public address quoting the translated packet. NAT must restore both the
        // outer destination and the quoted source.
        let quoted = build::udp_v4([203, 0, 113, 5], [192, 0, 2, 9], 6000, 53, b"query-bytes");
        let mut f = build::icmp_v4_error([192, 0, 2, 254], [203, 0, 113, 5], 3, 3, &quoted[14..]);
        let mut m = parse_frame(&f).unwrap();
        set_endpoint(&mut f, &mut m, Endpoint::Dst, IpAddr::V4([10, 0, 0, 1]), 0).unwrap();
        set_embedded_endpoint(
            &mut f,
            &mut m,
            Endpoint::Src,
            IpAddr::V4([10, 0, 0, 1]),
            4000,
        )
        .unwrap();
        assert!(verify_all_checksums(&f));
        let again = parse_frame(&f).unwrap();
        let e = again.icmp_embedded.unwrap();
        assert_eq!(e.flow.src, IpAddr::V4([10, 0, 0, 1]));
        assert_eq!(e.flow.src_port, 4000);
        // The quoted UDP datagram is whole here, so its own checksum must verify too.
        let l4 = &f[e.l4_offset as usize..];
        let u = crate::udp::UdpDatagram::new_checked(l4).unwrap();
        assert!(u.verify_checksum(&e.flow.src, &e.flow.dst));
    }

    #[test]
    fn family_mismatch_is_an_error_not_a_panic() {
        let mut f = build::udp_v4([1; 4], [2; 4], 1, 2, b"");
        let mut m = parse_frame(&f).unwrap();
        assert!(set_endpoint(&mut f, &mut m, Endpoint::Src, IpAddr::V6([0; 16]), 1).is_err());
    }

    #[test]
    fn raising_the_ttl_keeps_the_checksum_and_leaves_higher_ttls_alone() {
        use crate::tcp::flags::ACK;
        let v4 = build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 80, 5, 6, ACK, b"x");
        let v6 = build::tcp_v6([0xfd; 16], [0xfe; 16], 1, 80, 5, 6, ACK, b"x");
        for (mut f, at) in [(v4, 14 + 8), (v6, 14 + 7)] {
            f[at] = 2;
            if at == 22 {
                // The IPv4 header checksum as if the sender had sent TTL 2.
                f[24] = 0;
                f[25] = 0;
                let c = crate::checksum::fold(crate::checksum::sum(0, &f[14..34]));
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
            let mut m = parse_frame(&f).unwrap();
            assert_eq!(m.ttl, 2);
            assert!(raise_ttl(&mut f, &mut m, 8));
            assert_eq!((f[at], m.ttl, m.ttl_rx), (8, 8, 2));
            assert!(verify_all_checksums(&f));
            assert_eq!(parse_frame(&f).unwrap().ttl, 8);
            assert!(!raise_ttl(&mut f, &mut m, 8), "8 is not below 8");
            assert!(!raise_ttl(&mut f, &mut m, 0), "0: off");
        }
    }

    #[test]
    fn clearing_ip_options_keeps_the_checksum() {
        use crate::tcp::flags::ACK;
        let plain = build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 80, 5, 6, ACK, b"x");
        // The same packet with an 8-byte loose source route option.
        let mut f = plain[..34].to_vec();
        f.extend([131, 7, 4, 10, 0, 0, 9, 0]);
        f.extend(&plain[34..]);
        f[14] = 0x47;
        let total = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[24] = 0;
        f[25] = 0;
        let c = crate::checksum::fold(crate::checksum::sum(0, &f[14..42]));
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let m = parse_frame(&f).unwrap();
        assert!(verify_all_checksums(&f), "the test frame is valid");
        assert!(clear_ip_options(&mut f, &m));
        assert_eq!(&f[34..42], &[1; 8]);
        assert!(verify_all_checksums(&f));
        assert!(!clear_ip_options(&mut f, &m), "all NOPs already");
        let mut p = plain.clone();
        assert!(!clear_ip_options(&mut p, &parse_frame(&plain).unwrap()));
        assert_eq!(p, plain);
    }

    #[test]
    fn clearing_urgent_keeps_the_checksum() {
        use crate::tcp::flags::{ACK, URG};
        let mut f = build::tcp_v4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1,
            80,
            5,
            6,
            ACK | URG,
            b"EVXIL",
        );
        let mut m = parse_frame(&f).unwrap();
        let o = m.l4_offset as usize;
        f[o + 18..o + 20].copy_from_slice(&3u16.to_be_bytes());
        assert!(fill_l4_checksum(&mut f));
        assert!(clear_urgent(&mut f, &mut m));
        assert!(verify_all_checksums(&f));
        let again = parse_frame(&f).unwrap();
        assert_eq!(again.tcp_flags, ACK);
        assert_eq!(m.tcp_flags, ACK);
        // What arrived stays known (rules read it).
        assert_eq!(m.tcp_flags_rx, ACK | URG);
        assert_eq!(&f[o + 18..o + 20], &[0, 0]);
        assert!(!clear_urgent(&mut f, &mut m), "nothing left to clear");
    }
}
