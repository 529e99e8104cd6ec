"""Scapy-built captures of Suricata's decoder events (`decode-event-*`; see
captures.py): `decode-event:NAME`, as the rules of Suricata's bundled
decoder-events.rules use it (rules/decode-layer.html).

Each capture holds frames raising one layer's events and near misses
raising none: IPv4 options (unknown, bad lengths, a bad pointer, padding,
duplicates), IPv4 headers Suricata's decoder refuses (short, wrong
version, header or total length wrong, truncated, ICMPv6 inside), IPv6
extension headers (padding only, unknown options, routing type 0,
duplicates, fragment headers, data after "no next header", unknown next
headers), TCP and UDP headers and TCP options, ICMPv4 and ICMPv6 types,
codes and quoted packets, and link-layer anomalies (a short frame, a
fourth VLAN tag). Many of these frames are malformed: Sluice's parse
drops them before any function, and the IPS still inspects them for
their event (docs/FUNCTIONS.md). The rules name `decode-event` values as
Suricata's file does (`ipv4.opt_invalid`, without `decoder.`), and one
test loads events of link layers these frames do not have (PPP, GRE,
MPLS, ...): they load, and never match.

Expectations are what Suricata 7.0.10 does with its stock suricata.yaml
(`-k none`, as suricata-check.py runs every test). Every builder returns
whole Ethernet frames, bytes as written (Scapy fixes no length).
"""

import struct

from scapy.all import Ether, Raw

from conn import MAC_C, MAC_S

C4, S4 = bytes([10, 1, 0, 5]), bytes([10, 2, 0, 7])
C6 = bytes.fromhex("fd000001000000000000000000000005")
S6 = bytes.fromhex("fd000002000000000000000000000007")


def raw_l2(build):
    """Marks a builder whose packets are whole Ethernet frames."""
    build.raw_l2 = True
    return build


def csum(b):
    if len(b) % 2:
        b += b"\x00"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(et, payload, tags=()):
    """An Ethernet frame of EtherType `et`, behind 802.1Q tags of VLAN ids
    `tags` if any."""
    if not tags:
        return Ether(dst=MAC_S, src=MAC_C, type=et) / Raw(payload)
    body = b""
    for i, vid in enumerate(tags):
        body += struct.pack("!HH", vid, et if i == len(tags) - 1 else 0x8100)
    return Ether(dst=MAC_S, src=MAC_C, type=0x8100) / Raw(body + payload)


def ip4(proto, payload, opts=b"", total=None, ver=4, ihl=None, frag=0):
    """An IPv4 packet, bytes as given: its header checksum is right."""
    hl = 20 + len(opts)
    if ihl is None:
        ihl = hl // 4
    if total is None:
        total = hl + len(payload)
    h = struct.pack("!BBHHHBBH4s4s", ver << 4 | ihl, 0, total, 0x1234, frag, 64, proto, 0, C4, S4) + opts
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ip6(nh, payload, hlim=64, plen=None):
    if plen is None:
        plen = len(payload)
    return struct.pack("!IHBB16s16s", 0x60000000, plen, nh, hlim, C6, S6) + payload


def l4sum(src, dst, proto, seg, at):
    """`seg` with its checksum at byte `at` filled, over IPv4 or IPv6."""
    if len(src) == 4:
        ph = src + dst + struct.pack("!BBH", 0, proto, len(seg))
    else:
        ph = src + dst + struct.pack("!IxxxB", len(seg), proto)
    c = csum(ph + seg)
    return seg[:at] + struct.pack("!H", c) + seg[at + 2 :]


def tcp(opts=b"", flags=0x02, doff=None, dport=80, src=C4, dst=S4):
    if doff is None:
        doff = (20 + len(opts)) // 4
    t = struct.pack("!HHIIBBHHH", 40000, dport, 1000, 0, doff << 4, flags, 65535, 0, 0) + opts
    return l4sum(src, dst, 6, t, 16)


def udp(payload=b"data", length=None, dport=9999, src=C4, dst=S4):
    if length is None:
        length = 8 + len(payload)
    u = struct.pack("!HHHH", 40000, dport, length, 0) + payload
    return l4sum(src, dst, 17, u, 6)


def icmp4(t, code, rest=b"\x00\x00\x00\x00", body=b""):
    m = struct.pack("!BBH", t, code, 0) + rest + body
    return m[:2] + struct.pack("!H", csum(m)) + m[4:]


def icmp6(t, code, rest=b"\x00\x00\x00\x00", body=b""):
    m = struct.pack("!BBH", t, code, 0) + rest + body
    return l4sum(C6, S6, 58, m, 2)


def v4(proto, payload, **kw):
    return frame(0x0800, ip4(proto, payload, **kw))


def v6(nh, payload, **kw):
    return frame(0x86DD, ip6(nh, payload, **kw))


@raw_l2
def ipv4_options():
    # UDP datagrams whose IPv4 options are each wrong in one way, and two
    # near misses with well-formed options.
    u = udp()
    opts = [
        bytes([0x99, 4, 0, 0, 1, 1, 1, 0]),  # an unknown type: opt_invalid
        bytes([7, 12, 4, 0, 0, 0, 0, 0]),  # longer than the options: opt_invalid_len
        bytes([0x94, 5, 0, 0, 0, 1, 1, 0]),  # a router alert of 5 bytes: opt_invalid_len
        bytes([7, 7, 3, 0, 0, 0, 0, 0]),  # record route, pointer 3: opt_malformed
        bytes([68, 8, 9, 1, 0, 0, 0, 0]),  # timestamps with addresses, pointer 9: opt_malformed
        bytes([1, 1, 1, 0]),  # four bytes of options: opt_pad_required
        bytes([1, 1, 1, 1, 1, 1, 1, 0x94]),  # an option in the last byte: opt_eol_required
        bytes([0x94, 4, 0, 0, 0x94, 4, 0, 0]),  # two router alerts: opt_duplicate
        bytes([0x94, 4, 0, 0, 1, 1, 1, 0]),  # near miss: a router alert, padded
        bytes([7, 7, 4, 0, 0, 0, 0, 0]),  # near miss: an empty record route
        bytes([68, 8, 5, 0, 0, 0, 0, 0]),  # near miss: an empty timestamp option
    ]
    out = [v4(17, u, opts=o) for o in opts]
    # After an option of an impossible length nothing above IPv4 is
    # decoded: ICMPv6 inside raises no ipv4.icmpv6.
    out.append(v4(58, icmp6(128, 0), opts=bytes([7, 12, 4, 0, 0, 0, 0, 0])))
    return out


@raw_l2
def ipv4_malformed():
    # IPv4 headers Suricata's decoder refuses (so does Sluice's parse),
    # each raising its event, then a near miss with Ethernet padding.
    u = udp()
    good = ip4(17, u)
    return [
        frame(0x0800, good[:19]),  # pkt_too_small
        v4(17, u, ver=5),  # wrong_ip_version
        v4(17, u, ihl=4),  # hlen_too_small
        v4(17, u, total=19),  # iplen_smaller_than_hlen
        v4(17, u, total=len(good) + 1),  # trunc_pkt
        v4(58, icmp6(128, 0, b"\x00\x01\x00\x01")),  # icmpv6
        # A fragment ending past 65,535 bytes: frag_pkt_too_large.
        v4(17, b"\x00" * 100, frag=0x1FF8),
        # Near misses: padding after the datagram; a fragment ending inside.
        frame(0x0800, good + b"\x00" * 6),
        v4(17, b"\x00" * 96, frag=0x1FF0),
    ]


@raw_l2
def ipv6_exthdrs():
    u6 = udp(src=C6, dst=S6)
    ra = bytes([5, 2, 0, 0, 0, 0])  # router alert, then two Pad1
    padn = bytes([1, 4, 0, 0, 0, 0])
    unk = bytes([0x3E, 2, 0, 0, 0, 0])
    zero = bytes([1, 0, 5, 2, 0, 0])

    def opt(nh, body):
        return bytes([nh, 0]) + body

    return [
        v6(0, opt(17, padn) + u6),  # hopopts_only_padding
        v6(0, opt(17, unk) + u6),  # hopopts_unknown_opt
        v6(60, opt(17, padn) + u6),  # dstopts_only_padding
        v6(60, opt(17, unk) + u6),  # dstopts_unknown_opt
        v6(0, opt(17, zero) + u6),  # zero_len_padn
        v6(0, opt(0, ra) + opt(17, ra) + u6),  # exthdr_dupl_hh
        v6(60, opt(60, ra) + opt(60, ra) + opt(17, ra) + u6),  # exthdr_dupl_dh
        v6(43, bytes([17, 0, 0, 0, 0, 0, 0, 0]) + u6),  # rh_type_0
        v6(43, bytes([43, 0, 2, 0, 0, 0, 0, 0, 17, 0, 2, 0, 0, 0, 0, 0]) + u6),  # exthdr_dupl_rh
        v6(44, bytes([17, 0, 0, 0, 0, 0, 0, 1]) + u6),  # exthdr_useless_fh
        v6(44, bytes([17, 9, 0, 0, 0, 0, 0, 1]) + u6),  # useless_fh + fh_non_zero_reserved_field
        v6(44, bytes([44, 0, 0, 0, 0, 0, 0, 1, 17, 0, 0, 0, 0, 0, 0, 2]) + u6),  # dupl_fh + useless_fh
        v6(51, bytes([17, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1]) + u6),  # exthdr_ah_res_not_null
        v6(60, opt(59, ra) + b"junk"),  # data_after_none_header
        v6(60, opt(253, ra) + b"\x00" * 8),  # unknown_next_header
        v6(253, b"\x00" * 8),  # unknown_next_header
        v6(1, icmp4(8, 0)),  # ipv6.icmpv4
        v6(0, opt(17, bytes([5, 1, 0, 1, 0, 0])) + u6),  # exthdr_invalid_optlen
        v6(43, bytes([17, 4, 2, 0, 0, 0, 0, 0]) + u6),  # trunc_exthdr
        # Near misses: a router alert; two destination options headers; a
        # routing header of type 2; a first fragment of 16 bytes; no next
        # header and nothing after it.
        v6(0, opt(17, ra) + u6),
        v6(60, opt(60, ra) + opt(17, ra) + u6),
        v6(43, bytes([17, 0, 2, 0, 0, 0, 0, 0]) + u6),
        v6(44, bytes([17, 0, 0, 1, 0, 0, 0, 3]) + b"\x00" * 16),
        v6(60, opt(59, ra)),
    ]


@raw_l2
def ipv6_malformed():
    u6 = udp(src=C6, dst=S6)
    good = ip6(17, u6)
    bad_ver = bytes([0x40]) + good[1:]
    return [
        frame(0x86DD, good[:39]),  # ipv6.pkt_too_small
        frame(0x86DD, bad_ver),  # ipv6.wrong_ip_version
        v6(17, u6, plen=len(u6) + 1),  # ipv6.trunc_pkt
        # A non-last fragment whose length is no multiple of 8.
        v6(44, bytes([17, 0, 0, 1, 0, 0, 0, 4]) + b"\x00" * 13),  # frag_invalid_length
        v6(41, b"\x60" * 20),  # ipv6_in_ipv6_too_small
        v6(41, b"\x45" * 40),  # ipv6_in_ipv6_wrong_version
        v6(4, b"\x45" * 10),  # ipv4_in_ipv6_too_small
        v6(4, b"\x65" * 20),  # ipv4_in_ipv6_wrong_version
        # Near misses: padding after the packet; a last fragment of 13 bytes.
        frame(0x86DD, good + b"\x00" * 6),
        v6(44, bytes([17, 0, 0, 8, 0, 0, 0, 5]) + b"\x00" * 13),
    ]


@raw_l2
def tcp_udp():
    mss = bytes([2, 4, 5, 0xB4])
    return [
        v4(6, tcp(bytes([2, 3, 5, 1]))),  # an MSS of 3 bytes: opt_invalid_len
        v4(6, tcp(bytes([2, 9, 5, 1]))),  # an option past the header: opt_invalid_len
        v4(6, tcp(mss + mss)),  # opt_duplicate
        v4(6, tcp(bytes([3, 3, 7, 3, 3, 7, 1, 0]))),  # two window scales: opt_duplicate
        v4(6, tcp(bytes([5, 6, 0, 0, 0, 0, 1, 0]))),  # a SACK of 6 bytes: opt_invalid_len
        v4(6, tcp()[:19]),  # tcp.pkt_too_small
        v4(6, tcp(doff=15)),  # tcp.hlen_too_small
        v4(6, tcp(doff=4)),  # tcp.invalid_optlen
        frame(0x86DD, ip6(6, tcp(bytes([4, 2, 4, 2]), src=C6, dst=S6))),  # opt_duplicate over IPv6
        v4(17, udp()[:7]),  # udp.hlen_too_small
        v4(17, udp(length=13)),  # udp.pkt_too_small (4 bytes of payload)
        v4(17, udp(length=7)),  # udp.len_invalid
        # Near misses: MSS and window scale; a UDP length under the IP payload.
        v4(6, tcp(mss + bytes([3, 3, 7, 0]))),
        v4(17, udp(length=10)),
    ]


@raw_l2
def icmp():
    quoted4 = ip4(17, udp())[:28]
    quoted6 = ip6(17, udp(src=C6, dst=S6))[:48]
    return [
        v4(1, icmp4(8, 0)[:4]),  # icmpv4.pkt_too_small
        v4(1, icmp4(6, 0)),  # unknown_type
        v4(1, icmp4(10, 0)),  # unknown_type (router solicitation)
        v4(1, icmp4(8, 1)),  # unknown_code
        v4(1, icmp4(3, 16)),  # unknown_code
        v4(1, icmp4(3, 1, body=b"\x45" * 10)),  # ipv4_trunc_pkt
        v4(1, icmp4(11, 0, body=ip6(17, b"")[:20])),  # ipv4_unknown_ver
        v4(1, icmp4(13, 0, b"\x00\x01\x00\x01")),  # a short timestamp: ipv4_trunc_pkt
        frame(0x86DD, ip6(58, icmp6(128, 0)[:4])),  # icmpv6.pkt_too_small
        frame(0x86DD, ip6(58, icmp6(50, 0))),  # unassigned_type
        frame(0x86DD, ip6(58, icmp6(100, 0))),  # experimentation_type
        frame(0x86DD, ip6(58, icmp6(127, 0))),  # icmpv6.unknown_type
        frame(0x86DD, ip6(58, icmp6(129, 1))),  # icmpv6.unknown_code
        frame(0x86DD, ip6(58, icmp6(130, 0), hlim=64)),  # mld_message_with_invalid_hl
        frame(0x86DD, ip6(58, icmp6(1, 0, body=b"\x60" * 30))),  # ipv6_trunc_pkt
        frame(0x86DD, ip6(58, icmp6(3, 0, body=b"\x45" * 40))),  # ipv6_unknown_version
        # Near misses: an echo; a port unreachable and a time exceeded
        # quoting a packet; an MLD query with hop limit 1; an ICMPv6 error
        # quoting a packet.
        v4(1, icmp4(8, 0, b"\x00\x01\x00\x01")),
        v4(1, icmp4(3, 3, body=quoted4)),
        v4(1, icmp4(11, 0, body=quoted4)),
        frame(0x86DD, ip6(58, icmp6(130, 0), hlim=1)),
        frame(0x86DD, ip6(58, icmp6(1, 4, body=quoted6))),
    ]


@raw_l2
def link():
    inner = ip4(17, udp())
    return [
        Ether(dst=MAC_S, src=MAC_C, type=0x0800),  # no IPv4 header: ipv4.pkt_too_small
        Raw(b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08"),  # ethernet.pkt_too_small
        frame(0x0800, inner, tags=(7, 8, 9, 10)),  # vlan.too_many_layers
        frame(0x0800, inner, tags=(7, 8, 9)),  # near miss: three tags
        Raw(b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x81\x00\x00\x07\x08"),  # vlan.header_too_small
    ]


@raw_l2
def unsupported():
    # Frames of every layer these rules do not name; the rules load.
    return ipv4_malformed() + tcp_udp()


CAPTURES = {
    "decode-event-ipv4-options": ipv4_options,
    "decode-event-ipv4-malformed": ipv4_malformed,
    "decode-event-ipv6-exthdrs": ipv6_exthdrs,
    "decode-event-ipv6-malformed": ipv6_malformed,
    "decode-event-tcp-udp": tcp_udp,
    "decode-event-icmp": icmp,
    "decode-event-link": link,
    "decode-event-other-links": unsupported,
}
