use super::*;
use sluice_wire::parse::parse_frame;

const SRC4: [u8; 4] = [10, 0, 0, 1];
const DST4: [u8; 4] = [10, 0, 0, 2];

fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An IPv4 packet with options `opts` (a multiple of 4 bytes) and a valid
/// header checksum.
fn ip4(proto: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    let hl = 20 + opts.len();
    let total = (hl + payload.len()) as u16;
    let mut h = vec![0x40 | (hl / 4) as u8, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&SRC4);
    h.extend_from_slice(&DST4);
    h.extend_from_slice(opts);
    let c = sluice_wire::checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn ip6(nh: u8, hlim: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[nh, hlim]);
    h.extend_from_slice(&[0xfd; 16]);
    h.extend_from_slice(&[0xfe; 16]);
    h.extend_from_slice(payload);
    h
}

fn v4(proto: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    eth(0x0800, &ip4(proto, opts, payload))
}

fn v6(nh: u8, payload: &[u8]) -> Vec<u8> {
    eth(0x86dd, &ip6(nh, 64, payload))
}

/// A TCP header with options `opts` (a multiple of 4 bytes).
fn tcp(opts: &[u8]) -> Vec<u8> {
    let mut t = vec![0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0];
    t.push((((20 + opts.len()) / 4) << 4) as u8);
    t.extend_from_slice(&[0x02, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t
}

fn udp(len: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0x30, 0x39, 0, 53];
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// The names of the events of `frame`, walked as a refused frame; for a
/// frame the parse accepts, the walk of the accepted packet must agree.
fn names(frame: &[u8]) -> Vec<&'static str> {
    let (ev, _) = malformed(frame);
    if let Ok(m) = parse_frame(frame) {
        assert_eq!(events_of(frame, &m), ev, "{frame:02x?}");
    }
    ev.iter().map(DecodeEvent::name).collect()
}

#[test]
fn every_name_is_known_once_and_parses_as_suricata_reads_it() {
    assert_eq!(ALL.len(), 127);
    for (i, &(e, n)) in ALL.iter().enumerate() {
        assert_eq!(e as usize, i);
        assert_eq!(DecodeEvent::parse(n), Some(e));
        assert_eq!(DecodeEvent::parse(&n.to_uppercase()), Some(e));
        assert_eq!(e.name(), n);
    }
    assert_eq!(
        DecodeEvent::parse(" ipv4.trunc_pkt "),
        Some(E::Ipv4TruncPkt)
    );
    // The value is prefixed with `decoder.`: spelling it out is an error.
    assert_eq!(DecodeEvent::parse("decoder.ipv4.trunc_pkt"), None);
    assert_eq!(DecodeEvent::parse("ipv4.nope"), None);
    assert_eq!(DecodeEvent::parse("stream.pkt_retransmission"), None);
    assert_eq!(DecodeEvent::parse("ipv4"), None);
    assert_eq!(DecodeEvent::parse(""), None);
    assert!(E::Ipv4OptInvalid.decided());
    assert!(!E::PppWrongType.decided());
}

#[test]
fn well_formed_frames_raise_nothing() {
    assert!(names(&v4(6, &[], &tcp(&[2, 4, 5, 0xb4, 1, 3, 3, 7]))).is_empty());
    assert!(names(&v4(17, &[], &udp(12, b"abcd"))).is_empty());
    assert!(names(&v4(1, &[], &[8, 0, 0, 0, 0, 1, 0, 1])).is_empty());
    assert!(names(&v6(6, &tcp(&[]))).is_empty());
    assert!(names(&v6(58, &[128, 0, 0, 0, 0, 1, 0, 1])).is_empty());
    // Options filling 8 bytes: a router alert, then padding.
    assert!(names(&v4(6, &[0x94, 4, 0, 0, 1, 1, 1, 0], &tcp(&[]))).is_empty());
}

#[test]
fn ethernet_and_vlan() {
    assert_eq!(names(&[0u8; 13]), ["ethernet.pkt_too_small"]);
    assert!(names(&[0u8; 14]).is_empty());
    let inner = ip4(17, &[], &udp(8, b""));
    let tagged = |n: usize| {
        let mut f = vec![0u8; 12];
        for _ in 0..n {
            f.extend_from_slice(&[0x81, 0x00, 0, 7]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&inner);
        f
    };
    assert!(names(&tagged(3)).is_empty());
    assert_eq!(names(&tagged(4)), ["vlan.too_many_layers"]);
    // A tag cut short.
    assert_eq!(
        names(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0, 0, 7, 8]),
        ["vlan.header_too_small"]
    );
}

#[test]
fn ipv4_headers_refused_by_the_parse() {
    assert_eq!(names(&eth(0x0800, &[0x45; 19])), ["ipv4.pkt_too_small"]);
    let mut p = ip4(17, &[], &udp(8, b""));
    p[0] = 0x55;
    assert_eq!(names(&eth(0x0800, &p)), ["ipv4.wrong_ip_version"]);
    p[0] = 0x44;
    assert_eq!(names(&eth(0x0800, &p)), ["ipv4.hlen_too_small"]);
    p[0] = 0x45;
    p[2..4].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(names(&eth(0x0800, &p)), ["ipv4.iplen_smaller_than_hlen"]);
    p[2..4].copy_from_slice(&29u16.to_be_bytes());
    assert_eq!(names(&eth(0x0800, &p)), ["ipv4.trunc_pkt"]);
    // Ethernet padding after the datagram is no truncation.
    p[2..4].copy_from_slice(&28u16.to_be_bytes());
    p.extend_from_slice(&[0; 6]);
    assert!(names(&eth(0x0800, &p)).is_empty());
}

#[test]
fn ipv4_options() {
    let udp8 = udp(8, b"");
    let ev = |opts: &[u8]| names(&v4(17, opts, &udp8));
    assert_eq!(ev(&[1, 1, 1, 0]), ["ipv4.opt_pad_required"]);
    assert_eq!(ev(&[0x99, 4, 0, 0, 1, 1, 1, 0]), ["ipv4.opt_invalid"]);
    // A length past the options, or under 2.
    assert_eq!(ev(&[7, 12, 4, 0, 0, 0, 0, 0]), ["ipv4.opt_invalid_len"]);
    assert_eq!(ev(&[7, 1, 4, 0, 0, 0, 0, 0]), ["ipv4.opt_invalid_len"]);
    // A security option must be 11 bytes, a router alert 4.
    assert_eq!(ev(&[0x82, 4, 0, 0, 1, 1, 1, 0]), ["ipv4.opt_invalid_len"]);
    assert_eq!(ev(&[0x94, 5, 0, 0, 0, 1, 1, 0]), ["ipv4.opt_invalid_len"]);
    // A record route whose pointer is not at an address.
    assert_eq!(ev(&[7, 7, 3, 0, 0, 0, 0, 0]), ["ipv4.opt_malformed"]);
    assert!(ev(&[7, 7, 4, 0, 0, 0, 0, 0]).is_empty());
    assert_eq!(ev(&[7, 7, 12, 0, 0, 0, 0, 0]), ["ipv4.opt_malformed"]);
    // A timestamp's pointer, by its flag's record size.
    assert!(ev(&[68, 8, 5, 0, 0, 0, 0, 0]).is_empty());
    assert_eq!(ev(&[68, 8, 4, 0, 0, 0, 0, 0]), ["ipv4.opt_malformed"]);
    assert_eq!(ev(&[68, 8, 9, 1, 0, 0, 0, 0]), ["ipv4.opt_malformed"]);
    assert!(ev(&[68, 12, 13, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0]).is_empty());
    // A multi-byte option in the last byte.
    assert_eq!(ev(&[1, 1, 1, 1, 1, 1, 1, 0x94]), ["ipv4.opt_eol_required"]);
    assert_eq!(ev(&[0x94, 4, 0, 0, 0x94, 4, 0, 0]), ["ipv4.opt_duplicate"]);
    // An invalid first copy is not remembered.
    assert_eq!(
        ev(&[0x94, 5, 0, 0, 0, 0x94, 4, 0, 0, 1, 1, 1, 1, 1, 1, 0]),
        ["ipv4.opt_invalid_len"]
    );
    // CIPSO: tags after the domain, each at least 4 bytes.
    assert!(ev(&[134, 10, 0, 0, 0, 1, 1, 4, 0, 0, 1, 1, 1, 1, 1, 0]).is_empty());
    assert_eq!(
        ev(&[134, 10, 0, 0, 0, 1, 3, 4, 0, 0, 1, 1, 1, 1, 1, 0]),
        ["ipv4.opt_malformed"]
    );
    // After a refused length nothing above IP is decoded: no ICMPv6 event.
    assert_eq!(
        names(&v4(
            58,
            &[7, 12, 4, 0, 0, 0, 0, 0],
            &[128, 0, 0, 0, 0, 0, 0, 0]
        )),
        ["ipv4.opt_invalid_len"]
    );
}

#[test]
fn ipv4_transport() {
    assert_eq!(
        names(&v4(58, &[], &[128, 0, 0, 0, 0, 0, 0, 0])),
        ["ipv4.icmpv6"]
    );
    // A fragment ending past 65,535 bytes.
    let mut p = ip4(17, &[], &[0; 100]);
    p[6..8].copy_from_slice(&0x1ff8u16.to_be_bytes());
    assert_eq!(names(&eth(0x0800, &p)), ["ipv4.frag_pkt_too_large"]);
    p[6..8].copy_from_slice(&0x1ff0u16.to_be_bytes());
    assert!(names(&eth(0x0800, &p)).is_empty());
}

#[test]
fn tcp_events() {
    assert_eq!(names(&v4(6, &[], &[0; 19])), ["tcp.pkt_too_small"]);
    let mut t = tcp(&[]);
    t[12] = 0xf0;
    assert_eq!(names(&v4(6, &[], &t)), ["tcp.hlen_too_small"]);
    t[12] = 0x40;
    assert_eq!(names(&v4(6, &[], &t)), ["tcp.invalid_optlen"]);
    let ev = |opts: &[u8]| names(&v4(6, &[], &tcp(opts)));
    assert_eq!(ev(&[2, 3, 5, 1]), ["tcp.opt_invalid_len"]);
    assert_eq!(ev(&[2, 9, 5, 1]), ["tcp.opt_invalid_len"]);
    assert_eq!(ev(&[2, 4, 5, 0xb4, 2, 4, 5, 0xb4]), ["tcp.opt_duplicate"]);
    assert!(ev(&[2, 4, 5, 0xb4, 3, 3, 7, 0]).is_empty());
    assert_eq!(ev(&[3, 3, 7, 3, 3, 7, 1, 0]), ["tcp.opt_duplicate"]);
    // SACK: 2 bytes or 10 + 8n.
    assert_eq!(ev(&[5, 6, 0, 0, 0, 0, 1, 0]), ["tcp.opt_invalid_len"]);
    // A TCP-MD5 signature is 18 bytes.
    assert_eq!(ev(&[19, 6, 0, 0, 0, 0, 1, 0]), ["tcp.opt_invalid_len"]);
    // The same over IPv6.
    assert_eq!(names(&v6(6, &tcp(&[4, 2, 4, 2]))), ["tcp.opt_duplicate"]);
}

#[test]
fn udp_events() {
    assert_eq!(names(&v4(17, &[], &[0; 7])), ["udp.hlen_too_small"]);
    assert_eq!(
        names(&v4(17, &[], &udp(13, b"abcd"))),
        ["udp.pkt_too_small"]
    );
    assert_eq!(names(&v4(17, &[], &udp(7, b"abcd"))), ["udp.len_invalid"]);
    // Shorter than the IP payload is allowed.
    assert!(names(&v4(17, &[], &udp(10, b"abcd"))).is_empty());
}

#[test]
fn icmpv4_events() {
    let ev = |m: &[u8]| names(&v4(1, &[], m));
    assert_eq!(ev(&[8, 0, 0, 0]), ["icmpv4.pkt_too_small"]);
    assert_eq!(ev(&[6, 0, 0, 0, 0, 0, 0, 0]), ["icmpv4.unknown_type"]);
    assert_eq!(ev(&[10, 0, 0, 0, 0, 0, 0, 0]), ["icmpv4.unknown_type"]);
    assert_eq!(ev(&[8, 1, 0, 0, 0, 0, 0, 0]), ["icmpv4.unknown_code"]);
    assert!(ev(&[3, 15, 0, 0, 0, 0, 0, 0]).is_empty());
    assert_eq!(ev(&[3, 16, 0, 0, 0, 0, 0, 0]), ["icmpv4.unknown_code"]);
    // An error quoting less than an IPv4 header, or another version.
    let mut m = vec![3, 1, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&[0x45; 10]);
    assert_eq!(ev(&m), ["icmpv4.ipv4_trunc_pkt"]);
    let mut m = vec![11, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&ip6(17, 1, &[])[..20]);
    assert_eq!(ev(&m), ["icmpv4.ipv4_unknown_ver"]);
    let mut m = vec![11, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&ip4(17, &[], &udp(8, b""))[..28]);
    assert!(ev(&m).is_empty());
    // A timestamp without its 12 bytes of times.
    assert_eq!(ev(&[13, 0, 0, 0, 0, 1, 0, 1]), ["icmpv4.ipv4_trunc_pkt"]);
    assert!(ev(&[13, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_empty());
}

#[test]
fn icmpv6_events() {
    let ev = |m: &[u8]| names(&v6(58, m));
    assert_eq!(ev(&[128, 0, 0, 0]), ["icmpv6.pkt_too_small"]);
    assert_eq!(ev(&[50, 0, 0, 0, 0, 0, 0, 0]), ["icmpv6.unassigned_type"]);
    assert_eq!(ev(&[170, 0, 0, 0, 0, 0, 0, 0]), ["icmpv6.unassigned_type"]);
    assert_eq!(
        ev(&[100, 0, 0, 0, 0, 0, 0, 0]),
        ["icmpv6.experimentation_type"]
    );
    assert_eq!(
        ev(&[201, 0, 0, 0, 0, 0, 0, 0]),
        ["icmpv6.experimentation_type"]
    );
    assert_eq!(ev(&[127, 0, 0, 0, 0, 0, 0, 0]), ["icmpv6.unknown_type"]);
    assert_eq!(ev(&[0, 0, 0, 0, 0, 0, 0, 0]), ["icmpv6.unknown_type"]);
    assert_eq!(ev(&[129, 1, 0, 0, 0, 0, 0, 0]), ["icmpv6.unknown_code"]);
    assert_eq!(ev(&[1, 7, 0, 0, 0, 0, 0, 0]), ["icmpv6.unknown_code"]);
    // MLD needs a hop limit of 1.
    let mld = [130, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(
        names(&eth(0x86dd, &ip6(58, 64, &mld))),
        ["icmpv6.mld_message_with_invalid_hl"]
    );
    assert!(names(&eth(0x86dd, &ip6(58, 1, &mld))).is_empty());
    let mut m = vec![1, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&[0x60; 30]);
    assert_eq!(ev(&m), ["icmpv6.ipv6_trunc_pkt"]);
    let mut m = vec![3, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&[0x45; 40]);
    assert_eq!(ev(&m), ["icmpv6.ipv6_unknown_version"]);
    let mut m = vec![3, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&ip6(17, 1, &udp(8, b"")));
    assert!(ev(&m).is_empty());
}

#[test]
fn ipv6_headers() {
    // Suricata 7.0.10 raises nothing on a short IPv6 header.
    assert!(names(&eth(0x86dd, &[0x60; 39])).is_empty());
    let mut p = ip6(59, 64, &[]);
    p[0] = 0x40;
    assert_eq!(names(&eth(0x86dd, &p)), ["ipv6.wrong_ip_version"]);
    let mut p = ip6(17, 64, &udp(8, b""));
    p[5] = 9;
    assert_eq!(names(&eth(0x86dd, &p)), ["ipv6.trunc_pkt"]);
    assert_eq!(names(&v6(1, &[8, 0, 0, 0, 0, 0, 0, 0])), ["ipv6.icmpv4"]);
    assert_eq!(names(&v6(253, &[0; 8])), ["ipv6.unknown_next_header"]);
    assert_eq!(names(&v6(41, &[0x60; 20])), ["ipv6.ipv6_in_ipv6_too_small"]);
    assert_eq!(
        names(&v6(41, &[0x45; 40])),
        ["ipv6.ipv6_in_ipv6_wrong_version"]
    );
    assert_eq!(names(&v6(4, &[0x45; 10])), ["ipv6.ipv4_in_ipv6_too_small"]);
    assert_eq!(
        names(&v6(4, &[0x65; 20])),
        ["ipv6.ipv4_in_ipv6_wrong_version"]
    );
}

#[test]
fn ipv6_extension_headers() {
    let udp8 = udp(8, b"");
    let with = |hdrs: &[&[u8]], last: &[u8]| {
        let mut b = Vec::new();
        for h in hdrs {
            b.extend_from_slice(h);
        }
        b.extend_from_slice(last);
        b
    };
    // Hop-by-hop options, next header UDP.
    let padn: &[u8] = &[17, 0, 1, 4, 0, 0, 0, 0];
    assert_eq!(
        names(&v6(0, &with(&[padn], &udp8))),
        ["ipv6.hopopts_only_padding"]
    );
    let ra: &[u8] = &[17, 0, 5, 2, 0, 0, 0, 0];
    assert!(names(&v6(0, &with(&[ra], &udp8))).is_empty());
    let unknown: &[u8] = &[17, 0, 0x3e, 2, 0, 0, 0, 0];
    assert_eq!(
        names(&v6(0, &with(&[unknown], &udp8))),
        ["ipv6.hopopts_unknown_opt"]
    );
    assert_eq!(
        names(&v6(60, &with(&[unknown], &udp8))),
        ["ipv6.dstopts_unknown_opt"]
    );
    assert_eq!(
        names(&v6(60, &with(&[padn], &udp8))),
        ["ipv6.dstopts_only_padding"]
    );
    let zero_padn: &[u8] = &[17, 0, 1, 0, 5, 2, 0, 0];
    assert_eq!(
        names(&v6(0, &with(&[zero_padn], &udp8))),
        ["ipv6.zero_len_padn"]
    );
    // A router alert too short for its value.
    let short_ra: &[u8] = &[17, 0, 5, 1, 0, 1, 1, 0];
    assert_eq!(
        names(&v6(0, &with(&[short_ra], &udp8))),
        ["ipv6.exthdr_invalid_optlen"]
    );
    // Two hop-by-hop headers; three destination options headers.
    let hop_ra: &[u8] = &[0, 0, 5, 2, 0, 0, 0, 0];
    assert_eq!(
        names(&v6(0, &with(&[hop_ra, ra], &udp8))),
        ["ipv6.exthdr_dupl_hh"]
    );
    let dst_ra: &[u8] = &[60, 0, 5, 2, 0, 0, 0, 0];
    assert!(names(&v6(60, &with(&[dst_ra, ra], &udp8))).is_empty());
    assert_eq!(
        names(&v6(60, &with(&[dst_ra, dst_ra, ra], &udp8))),
        ["ipv6.exthdr_dupl_dh"]
    );
    // Routing headers.
    let rh0: &[u8] = &[17, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(names(&v6(43, &with(&[rh0], &udp8))), ["ipv6.rh_type_0"]);
    let rh2: &[u8] = &[43, 0, 2, 0, 0, 0, 0, 0];
    let rh2_last: &[u8] = &[17, 0, 2, 0, 0, 0, 0, 0];
    assert!(names(&v6(43, &with(&[rh2_last], &udp8))).is_empty());
    assert_eq!(
        names(&v6(43, &with(&[rh2, rh2_last], &udp8))),
        ["ipv6.exthdr_dupl_rh"]
    );
    let rh_long: &[u8] = &[17, 4, 2, 0, 0, 0, 0, 0];
    assert_eq!(
        names(&v6(43, &with(&[rh_long], &udp8))),
        ["ipv6.trunc_exthdr"]
    );
    // Fragment headers.
    let useless: &[u8] = &[17, 0, 0, 0, 0, 0, 0, 1];
    assert_eq!(
        names(&v6(44, &with(&[useless], &udp8))),
        ["ipv6.exthdr_useless_fh"]
    );
    let reserved: &[u8] = &[17, 9, 0, 0, 0, 0, 0, 1];
    assert_eq!(
        names(&v6(44, &with(&[reserved], &udp8))),
        ["ipv6.exthdr_useless_fh", "ipv6.fh_non_zero_reserved_field"]
    );
    let useless_fh: &[u8] = &[44, 0, 0, 0, 0, 0, 0, 1];
    assert_eq!(
        names(&v6(44, &with(&[useless_fh, useless], &udp8))),
        ["ipv6.exthdr_dupl_fh", "ipv6.exthdr_useless_fh"]
    );
    let first: &[u8] = &[17, 0, 0, 1, 0, 0, 0, 1];
    assert!(names(&v6(44, &with(&[first], &[0; 16]))).is_empty());
    assert_eq!(
        names(&v6(44, &with(&[first], &[0; 13]))),
        ["ipv6.frag_invalid_length"]
    );
    let far: &[u8] = &[17, 0, 0xff, 0xf8, 0, 0, 0, 1];
    assert_eq!(
        names(&v6(44, &with(&[far], &[0; 16]))),
        ["ipv6.frag_pkt_too_large"]
    );
    // Authentication header: reserved bytes, a second one.
    let ah: &[u8] = &[17, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
    let ah_res: &[u8] = &[17, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1];
    let ah_ah: &[u8] = &[51, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
    assert!(names(&v6(51, &with(&[ah], &udp8))).is_empty());
    assert_eq!(
        names(&v6(51, &with(&[ah_res], &udp8))),
        ["ipv6.exthdr_ah_res_not_null"]
    );
    assert_eq!(
        names(&v6(51, &with(&[ah_ah, ah], &udp8))),
        ["ipv6.exthdr_dupl_ah"]
    );
    // No next header, with and without bytes after it.
    let to_none: &[u8] = &[59, 0, 5, 2, 0, 0, 0, 0];
    assert!(names(&v6(60, to_none)).is_empty());
    assert_eq!(
        names(&v6(60, &with(&[to_none], &[1, 2]))),
        ["ipv6.data_after_none_header"]
    );
    assert_eq!(names(&v6(59, &[1, 2])), ["ipv6.data_after_none_header"]);
    // An unknown header after one; ICMP after one; IPv6 after one.
    let to: fn(u8) -> [u8; 8] = |nh| [nh, 0, 5, 2, 0, 0, 0, 0];
    assert_eq!(
        names(&v6(60, &with(&[&to(253)], &[0; 8]))),
        ["ipv6.unknown_next_header"]
    );
    assert_eq!(
        names(&v6(60, &with(&[&to(1)], &[8, 0, 0, 0, 0, 0, 0, 0]))),
        ["ipv6.icmpv4"]
    );
    assert_eq!(
        names(&v6(60, &with(&[&to(41)], &[0; 40]))),
        ["ipv6.unknown_next_header"]
    );
    assert_eq!(
        names(&v6(60, &with(&[&to(17)], &[]))),
        ["ipv6.trunc_exthdr"]
    );
}

#[test]
fn malformed_frames_name_their_flow() {
    let mut t = tcp(&[]);
    t[12] = 0xf0;
    // A TCP header that did not decode: addresses and protocol, no ports.
    let (ev, flow) = malformed(&v4(6, &[], &t));
    assert!(ev.has(E::TcpHlenTooSmall));
    let flow = flow.unwrap();
    assert_eq!(flow.src, IpAddr::V4(SRC4));
    assert_eq!(flow.dst, IpAddr::V4(DST4));
    assert_eq!((flow.proto, flow.src_port, flow.dst_port), (6, 0, 0));
    let (ev, flow) = malformed(&v4(6, &[], &tcp(&[])));
    assert!(ev.is_empty());
    assert_eq!(flow.map(|f| (f.src_port, f.dst_port)), Some((40000, 80)));
    // No IP header: no flow.
    let (ev, flow) = malformed(&eth(0x0800, &[0x45; 19]));
    assert!(ev.has(E::Ipv4PktTooSmall));
    assert!(flow.is_none());
}

#[test]
fn no_panic_on_any_prefix_of_odd_frames() {
    let frames = [
        v4(
            6,
            &[0x94, 4, 0, 0, 134, 10, 0, 0, 0, 1, 1, 4, 0, 0, 1, 0],
            &tcp(&[5, 10, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
        ),
        v6(
            0,
            &[
                60, 0, 1, 4, 0, 0, 0, 0, 44, 0, 0, 5, 2, 0, 0, 0, 17, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3,
            ],
        ),
        v6(58, &[1, 0, 0, 0, 0, 0, 0, 0, 0x60, 0, 0, 0]),
        v4(1, &[], &[9, 0, 0, 0, 255, 255, 0, 0]),
    ];
    for f in &frames {
        for n in 0..=f.len() {
            let _ = malformed(&f[..n]);
            let mut g = f[..n].to_vec();
            // Each byte past the Ethernet header scrambled in turn.
            let mut i = 14;
            while i < g.len() {
                g[i] = g[i].wrapping_mul(37).wrapping_add(11);
                let _ = malformed(&g);
                i += 1;
            }
        }
    }
}

/// Frames of random bytes behind plausible link and IP headers (random
/// lengths, versions, header lengths, options and extension headers):
/// neither walk panics, whether the parse accepts the frame
/// ([`events_of`]) or refuses it ([`malformed`]).
#[test]
fn no_panic_on_random_frames() {
    let mut r = crate::testrng::Lcg::new(0x5eed_dec0);
    let mut parsed = 0;
    for _ in 0..40_000 {
        let n = 14 + r.below(120) as usize;
        let mut f: Vec<u8> = (0..n).map(|_| r.below(256) as u8).collect();
        // Mostly IPv4 and IPv6, sometimes behind VLAN tags, sometimes
        // anything; the version nibble mostly right.
        let et: u16 = match r.below(6) {
            0 | 1 => 0x0800,
            2 | 3 => 0x86dd,
            4 => 0x8100,
            _ => r.below(65536) as u16,
        };
        f[12..14].copy_from_slice(&et.to_be_bytes());
        if f.len() > 14 && r.below(4) != 0 {
            f[14] = match et {
                0x0800 => 0x40 | (f[14] & 0x0f),
                0x86dd => 0x60 | (f[14] & 0x0f),
                _ => f[14],
            };
        }
        if et == 0x8100 && f.len() > 18 {
            let inner: u16 = if r.below(2) == 0 { 0x0800 } else { 0x86dd };
            f[16..18].copy_from_slice(&inner.to_be_bytes());
        }
        let _ = malformed(&f);
        if let Ok(m) = parse_frame(&f) {
            parsed += 1;
            let _ = events_of(&f, &m);
        }
    }
    // Some of them parse, so both walks ran.
    assert!(parsed > 100, "{parsed}");
}
