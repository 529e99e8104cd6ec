"""Scapy-built captures of IP defragmentation as real traffic and attackers
produce it: UDP datagrams in several IPv4 fragments in order, in reverse
order and with the first fragment last; fragmented DNS queries and
responses (a large TXT answer, the usual real-world case); IPv6 fragments
behind Hop-by-Hop and Destination Options headers and out of order; a
fragmented ICMP echo (`ping -s 3000`); duplicate and overlapping
fragments; interleaved datagrams (the same IP ID from two sources, two IDs
from one source); an incomplete datagram; a tiny first fragment; and the
`fragbits`/`fragoffset`/`dsize` keywords on fragments against the
reassembled datagram.

Each test's signature only matches the reassembled datagram (its content
spans a fragment cut, or it needs the L4 header of the first fragment with
bytes of a later one); near misses must not fire. Expectations are what
Suricata 7.0.10 does with its stock suricata.yaml: IPv4 fragments are
reassembled with the windows policy (`host-os-policy: windows: [0.0.0.0/0]`),
IPv6 ones with the default, bsd (no entry covers IPv6). Suricata inspects
each fragment too, as a packet of its protocol with ports 0 and no payload
(no L4 header is decoded), then the reassembled datagram once.

Every builder here returns whole Ethernet frames (`raw_l2`): captures.py's
main() writes them as they are.
"""

from scapy.all import (
    DNS,
    DNSQR,
    DNSRR,
    ICMP,
    IP,
    UDP,
    Ether,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    PadN,
    Raw,
)

from conn import CLIENT, CLIENT6, MAC_C, MAC_S, SERVER, SERVER6

# A second source next to CLIENT (for the same IP ID from two hosts).
CLIENT_B = "10.1.0.6"


def raw_l2(build):
    """Marks a builder whose packets are whole Ethernet frames."""
    build.raw_l2 = True
    return build


def eth(p):
    return Ether(src=MAC_C, dst=MAC_S) / p


def frags4(d, cuts, order=None):
    """The IPv4 datagram `d` (checksums computed over the whole datagram)
    cut into fragments at the byte offsets `cuts` of its IP payload
    (multiples of 8), sent in `order` (indices; default: in order)."""
    d = IP(bytes(d))
    hdr, body = d.copy(), bytes(d.payload)
    hdr.remove_payload()
    edges = [0] + list(cuts) + [len(body)]
    out = []
    for i in range(len(edges) - 1):
        a, b = edges[i], edges[i + 1]
        assert a % 8 == 0 and a < b, (a, b)
        f = hdr.copy()
        f.flags = "MF" if i < len(edges) - 2 else 0
        f.frag = a // 8
        f.len = f.chksum = None
        out.append(f / Raw(body[a:b]))
    return [eth(out[i]) for i in (order or range(len(out)))]


def frag4(src, ident, off, chunk, mf, dst=SERVER, proto=17):
    """One hand-made IPv4 fragment of `chunk` at byte offset `off`."""
    return eth(
        IP(src=src, dst=dst, id=ident, proto=proto, frag=off // 8, flags="MF" if mf else 0)
        / Raw(chunk)
    )


def frags6(l4, ident, cuts, order=None, ext=None, src=CLIENT6, dst=SERVER6):
    """The UDP datagram `l4` (its checksum computed for src/dst) as IPv6
    fragments cut at `cuts`, the unfragmentable extension headers `ext()`
    (a fresh chain per fragment) before each Fragment header."""
    body = bytes(IPv6(src=src, dst=dst) / l4)[40:]
    edges = [0] + list(cuts) + [len(body)]
    out = []
    for i in range(len(edges) - 1):
        a, b = edges[i], edges[i + 1]
        assert a % 8 == 0 and a < b, (a, b)
        h = IPv6(src=src, dst=dst)
        if ext is not None:
            h = h / ext()
        fh = IPv6ExtHdrFragment(nh=17, id=ident, offset=a // 8, m=int(i < len(edges) - 2))
        out.append(h / fh / Raw(body[a:b]))
    return [eth(out[i]) for i in (order or range(len(out)))]


def spans(payload, marker, cuts, hdr=8):
    """Asserts `marker` in `payload` (after an L4 header of `hdr` bytes)
    crosses one of the fragment cuts."""
    i = payload.index(marker) + hdr
    assert any(i < c < i + len(marker) for c in cuts), (marker, i, cuts)


# A UDP datagram in four fragments (cuts at 32, 64, 96 of the IP payload):
# SPAN-ONE crosses the first cut, SPAN-TWO the second, SPAN-THREE the third.
FOUR = (
    b"first-frag-head-"  # 8..24
    + b"...SPAN-ONE-MARK..."  # crosses 32
    + b"..........SPAN-TWO-MARK......."  # crosses 64
    + b"..........SPAN-THREE-MARK..."  # crosses 96
    + b"last-frag-tail-END"
)
FOUR_CUTS = (32, 64, 96)


def four(ident, order=None, sport=45001):
    for m in (b"SPAN-ONE-MARK", b"SPAN-TWO-MARK", b"SPAN-THREE-MARK"):
        spans(FOUR, m, FOUR_CUTS)
    d = IP(src=CLIENT, dst=SERVER, id=ident) / UDP(sport=sport, dport=9999) / Raw(FOUR)
    return frags4(d, FOUR_CUTS, order)


@raw_l2
def udp_in_order():
    # Four fragments in order, then an unfragmented datagram (a control).
    plain = IP(src=CLIENT, dst=SERVER) / UDP(sport=45002, dport=9999) / Raw(b"PLAIN-UDP-MARK")
    return four(0x1001) + [eth(plain)]


@raw_l2
def udp_reverse():
    # The same four fragments, last first (as Linux sent them for years).
    return four(0x1002, order=[3, 2, 1, 0])


@raw_l2
def udp_first_last():
    # The first fragment (UDP header) arrives last.
    return four(0x1003, order=[1, 2, 3, 0])


@raw_l2
def dns_query():
    # A DNS query whose question name is cut by the fragment boundary (an
    # evasion of the query-name signatures of unfragmented DNS).
    name = "frag-" + "q" * 20 + ".defrag-evil-query.example"
    q = IP(src=CLIENT, dst=SERVER, id=0x2001) / UDP(sport=45101, dport=53) / DNS(
        id=0x2001, rd=1, qd=DNSQR(qname=name, qtype="A")
    )
    raw = bytes(q[UDP].payload)
    spans(raw, b"defrag-evil-query", (48,))
    return frags4(q, (48,))


@raw_l2
def dns_response_txt():
    # A query, then its response with a large TXT answer (~2 KB) that the
    # server's stack fragments at a 1500-byte MTU (the normal real-world
    # case: EDNS0 answers bigger than the path MTU).
    name = "big-txt.defrag.example"
    q = IP(src=CLIENT, dst=SERVER, id=0x2101) / UDP(sport=45201, dport=53) / DNS(
        id=0x2101, rd=1, qd=DNSQR(qname=name, qtype="TXT")
    )
    strings = [b"txt-%02d-" % i + b"x" * 200 for i in range(9)] + [b"TXT-TAIL-MARKER"]
    r = IP(src=SERVER, dst=CLIENT, id=0x2102) / UDP(sport=53, dport=45201) / DNS(
        id=0x2101, qr=1, aa=1, rd=1, ra=1,
        qd=DNSQR(qname=name, qtype="TXT"),
        an=DNSRR(rrname=name, type="TXT", ttl=60, rdata=strings),
    )
    raw = bytes(r[UDP].payload)
    assert 1480 < len(raw) + 8 < 2960, len(raw)
    # The TXT string that crosses the cut at 1480.
    i = 1480 - 8
    assert raw[i - 4 : i + 4].startswith(b"xxxx"), raw[i - 4 : i + 4]
    assert raw.index(b"TXT-TAIL-MARKER") + 8 > 1480
    return [eth(q)] + frags4(r, (1480,))


def pad_opt():
    return [PadN(optdata=b"\x00" * 4)]


@raw_l2
def ipv6_hopbyhop():
    # IPv6 fragments each with a Hop-by-Hop Options header (unfragmentable
    # part) before the Fragment header.
    l4 = UDP(sport=45301, dport=9999) / Raw(b"v6-hbh-head.....V6-HBH-SPAN-MARK....v6-hbh-tail")
    spans(bytes(l4.payload), b"V6-HBH-SPAN-MARK", (32,))
    return frags6(l4, 0x3001, (32,), ext=lambda: IPv6ExtHdrHopByHop(options=pad_opt()))


@raw_l2
def ipv6_destopt():
    # IPv6 fragments each with a Destination Options header before the
    # Fragment header (RFC 8200: options for the first destination, part of
    # the unfragmentable part).
    l4 = UDP(sport=45302, dport=9999) / Raw(b"v6-dst-head.....V6-DST-SPAN-MARK....v6-dst-tail")
    spans(bytes(l4.payload), b"V6-DST-SPAN-MARK", (32,))
    return frags6(l4, 0x3002, (32,), ext=lambda: IPv6ExtHdrDestOpt(options=pad_opt()))


@raw_l2
def ipv6_udp_out_of_order():
    # Three IPv6 fragments: the middle one, the last, then the first.
    data = b"v6-ooo-head-----" + b"V6-OOO-SPAN-ONE." + b"..........V6-OOO-SPAN-TWO.....tail"
    l4 = UDP(sport=45303, dport=9999) / Raw(data)
    for m in (b"V6-OOO-SPAN-ONE", b"V6-OOO-SPAN-TWO"):
        spans(data, m, (32, 56))
    return frags6(l4, 0x3003, (32, 56), order=[1, 2, 0])


@raw_l2
def icmp_echo():
    # `ping -s 3000`: an ICMP echo request of 3008 bytes in three fragments
    # of a 1500-byte MTU (1480, 1480, 48 bytes); markers cross both cuts.
    data = bytearray(b"".join(b"%04d" % i for i in range(750)))  # 3000 bytes
    data[1472 - 8 : 1472 + 8] = b"PING-SPAN1-MARK!"  # ICMP data 1472 = IP payload 1480
    data[2952 - 8 : 2952 + 8] = b"PING-SPAN2-MARK!"
    p = IP(src=CLIENT, dst=SERVER, id=0x4001) / ICMP(type=8, id=0x77, seq=1) / Raw(bytes(data))
    reply = IP(src=SERVER, dst=CLIENT, id=0x4002) / ICMP(type=0, id=0x77, seq=1) / Raw(bytes(data))
    # The reply comes back fragmented too.
    return frags4(p, (1480, 2960)) + frags4(reply, (1480, 2960))


@raw_l2
def duplicate():
    # Exact duplicates (same offset, same bytes): the middle fragment
    # twice before the datagram is complete, and the last one again after.
    f = four(0x5001)
    return [f[0], f[1], f[1], f[2], f[3], f[3]]


def ovl_udp(ident, pieces):
    """A UDP datagram (checksum 0: none) of 48 bytes whose fragments are
    `pieces`: (offset, bytes, more-fragments) in sending order."""
    return [frag4(CLIENT, ident, off, chunk, mf) for off, chunk, mf in pieces]


def ovl_whole(sport):
    udp = bytes(UDP(sport=sport, dport=9999, len=8 + 40, chksum=0))
    # 8..15 HEAD, 16..23 the overlapped 8 bytes, 24..31 MID, 32..47 END.
    return udp + b"OVL-HEAD" + b"AAAAAAAA" + b"-OVL-MID" + b"-OVL-END-OVL-FIN"


# Suricata reassembles IPv4 with the windows policy (its stock
# host-os-policy): where a later fragment overlaps an earlier one, the
# earlier bytes are kept, unless the later fragment starts before the
# earlier one AND ends after it (then the earlier one is dropped).


@raw_l2
def overlap_before_original():
    # Out-of-order overlaps: the overlapping copy arrives before the
    # fragment it overlaps.
    # Datagram 1: the copy at 16 (BBBBBBBB + MID) arrives first, then the
    # first fragment 0..23 ending in AAAAAAAA: BBBBBBBB kept.
    w1 = ovl_whole(45401)
    d1 = ovl_udp(0x6001, [(16, b"BBBBBBBB" + w1[24:32], True), (0, w1[:24], True), (32, w1[32:], False)])
    # Datagram 2: the fragment at 16 (CCCCCCCC + MID) arrives first, then
    # one at 8 ending at the same byte with other bytes (HEAD + DDDDDDDD +
    # -NEW-MID), then the first 8 bytes and the end: CCCCCCCC kept (windows
    # drops the earlier fragment only if the later one ends after it).
    w2 = ovl_whole(45402)
    d2 = ovl_udp(
        0x6002,
        [
            (16, b"CCCCCCCC" + w2[24:32], True),
            (8, b"OVL-HEAD" + b"DDDDDDDD" + b"-NEW-MID", True),
            (0, w2[:8], True),
            (32, w2[32:], False),
        ],
    )
    # Datagram 3: a fragment 16..23 (AAAAAAAA) arrives first, then one at
    # 8 that starts before it and ends after it (HEAD + GGGGGGGG + MID):
    # Suricata's windows policy keeps GGGGGGGG, Sluice the first arrival
    # (the only copy an inline device can make every receiver keep:
    # docs/FUNCTIONS.md, known differences), so only its end is checked.
    w3 = ovl_whole(45403)
    d3 = ovl_udp(
        0x6003,
        [
            (16, w3[16:24], True),
            (8, b"OVL-HEAD" + b"GGGGGGGG" + b"-OVL-MID", True),
            (0, w3[:8], True),
            (32, w3[32:], False),
        ],
    )
    return d1 + d2 + d3


@raw_l2
def overlap_later_different():
    # Overlapping copies with different bytes arriving after the original.
    # Datagram 1: a fragment at 16 overlapping the first one's last 8 bytes
    # (BBBBBBBB against AAAAAAAA): AAAAAAAA kept.
    w1 = ovl_whole(45501)
    d1 = ovl_udp(0x6101, [(0, w1[:24], True), (16, b"BBBBBBBB" + w1[24:32], True), (32, w1[32:], False)])
    # Datagram 2: a second copy of the middle fragment (same offset and
    # length, EEEEEEEE instead of AAAAAAAA): AAAAAAAA kept.
    w2 = ovl_whole(45502)
    d2 = ovl_udp(
        0x6102,
        [(0, w2[:16], True), (16, w2[16:32], True), (16, b"EEEEEEEE" + w2[24:32], True), (32, w2[32:], False)],
    )
    # Datagram 3: a fragment starting before the original 16..31 and
    # ending inside it (8..23, FFFFFFFF over 16..23): AAAAAAAA kept.
    w3 = ovl_whole(45503)
    d3 = ovl_udp(
        0x6103,
        [(0, w3[:8], True), (16, w3[16:32], True), (8, b"OVL-HEAD" + b"FFFFFFFF", True), (32, w3[32:], False)],
    )
    return d1 + d2 + d3


def v6_ovl(ident, sport, kept, pieces):
    """An IPv6 UDP datagram of 48 bytes (its checksum valid for the bytes
    `kept`, 40 bytes of payload) sent as `pieces` (offset, bytes, more)."""
    udp = bytes(IPv6(src=CLIENT6, dst=SERVER6) / UDP(sport=sport, dport=9999) / Raw(kept))[40:48]
    out = []
    for off, chunk, mf in pieces:
        if off == 0:
            chunk = udp + chunk
        fh = IPv6ExtHdrFragment(nh=17, id=ident, offset=off // 8, m=int(mf))
        out.append(eth(IPv6(src=CLIENT6, dst=SERVER6) / fh / Raw(chunk)))
    return out


@raw_l2
def ipv6_overlap():
    # IPv6 overlaps (RFC 5722 says drop the datagram; Suricata 7 reassembles
    # it with its default policy, bsd: no host-os-policy entry covers IPv6).
    # Datagram 1: a later fragment at 16 overlapping the first's last 8
    # bytes with other bytes (BBBBBBBB against AAAAAAAA): AAAAAAAA kept.
    k1 = b"OVL-HEAD" + b"AAAAAAAA" + b"-OVL-MID" + b"-OVL-END-OVL-FIN"
    d1 = v6_ovl(
        0x6201, 45411, k1, [(0, k1[:16], True), (16, b"BBBBBBBB" + k1[16:24], True), (32, k1[24:], False)]
    )
    # Datagram 2: a fragment 16..31 (CCCCCCCC + MID) first, then one at 8
    # ending at the same byte (HEAD + DDDDDDDD + -NEW-MID): DDDDDDDD kept
    # (bsd drops the earlier fragment if the later one starts before it and
    # ends at or after its end; IPv4's windows policy keeps CCCCCCCC there).
    # Sluice keeps the first arrival (docs/FUNCTIONS.md, known
    # differences), so only its end is checked.
    k2 = b"OVL-HEAD" + b"DDDDDDDD" + b"-NEW-MID" + b"-OVL-END-OVL-FIN"
    d2 = v6_ovl(
        0x6202,
        45412,
        k2,
        [(16, b"CCCCCCCC" + b"-OVL-MID", True), (8, k2[:24], True), (0, b"", True), (32, k2[24:], False)],
    )
    return d1 + d2


def pair(src, ident, tag, sport=45601, dport=9999):
    """A UDP datagram whose payload halves carry `tag`, cut at 32."""
    data = b"first-half-" + tag + b"-FIRST-::" + b"second-half-" + tag + b"-SECOND"
    assert len(data) - len(b"second-half-" + tag + b"-SECOND") == 24
    d = IP(src=src, dst=SERVER, id=ident) / UDP(sport=sport, dport=dport) / Raw(data)
    return frags4(d, (32,))


@raw_l2
def same_id_two_sources():
    # The same IP ID (and ports, lengths) from two sources, interleaved:
    # the fragments must not be mixed.
    a = pair(CLIENT, 0x7001, b"AAAA")
    b = pair(CLIENT_B, 0x7001, b"BBBB")
    return [a[0], b[0], b[1], a[1]]


@raw_l2
def interleaved_ids():
    # Two datagrams from one source with different IDs, interleaved (the
    # second's fragments in reverse order).
    a = pair(CLIENT, 0x7101, b"CCCC")
    b = pair(CLIENT, 0x7102, b"DDDD")
    return [a[0], b[1], a[1], b[0]]


@raw_l2
def incomplete():
    # Four fragments of which the third never arrives; then a complete
    # datagram (another ID).
    f = four(0x8001)
    ok = IP(src=CLIENT, dst=SERVER, id=0x8002) / UDP(sport=45702, dport=9999) / Raw(
        b"complete-head...COMPLETE-SPAN-MARK...tail"
    )
    spans(bytes(ok[Raw]), b"COMPLETE-SPAN-MARK", (32,))
    return [f[0], f[1], f[3]] + frags4(ok, (32,))


@raw_l2
def tiny_first():
    # A first fragment of 8 bytes (just the UDP header: the ports), then the
    # rest of the datagram (the payload) in one fragment.
    d = IP(src=CLIENT, dst=SERVER, id=0x9001) / UDP(sport=45801, dport=9999) / Raw(
        b"TINY-FIRST-PAYLOAD after an 8-byte first fragment"
    )
    return frags4(d, (8,))


@raw_l2
def fragbits_fragoffset():
    # Three fragments of one UDP datagram (cuts at 32 and 64 of 88 bytes);
    # `ip` rules on the fragment bits and offset, `udp` rules on the
    # reassembled datagram.
    data = b"fb-first-frag-head.....FB-SPAN-MARK.....middle..............tail-of-the-datagram"
    spans(data, b"FB-SPAN-MARK", (32, 64))
    d = IP(src=CLIENT, dst=SERVER, id=0xA001) / UDP(sport=45901, dport=9999) / Raw(data)
    return frags4(d, (32, 64))


@raw_l2
def udp_first_fragment_content():
    # Content only in the first fragment, and dsize of the whole datagram:
    # fragments carry no decoded UDP header, only the reassembled datagram
    # is a UDP packet. A second datagram of another size for the near miss.
    data = b"ONLY-IN-FIRST-FRAG" + b"." * 14 + b"second-fragment-bytes-only-" + b"." * 21
    assert len(data) == 80
    d = IP(src=CLIENT, dst=SERVER, id=0xB001) / UDP(sport=46001, dport=9999) / Raw(data)
    return frags4(d, (32,))


@raw_l2
def frag_overlap_events():
    # Suricata's `frag_overlap` decoder events over the overlap captures
    # above: a duplicate before the datagram completes (not the one after
    # it: the datagram is gone), one overlapping fragment per datagram in
    # the three IPv4 and two IPv6 overlap datagrams. Near misses: datagrams
    # in order and in reverse order, IPv6 out of order.
    return (
        duplicate()
        + overlap_before_original()
        + overlap_later_different()
        + ipv6_overlap()
        + udp_in_order()
        + udp_reverse()
        + ipv6_udp_out_of_order()
    )


CAPTURES = {
    "defrag-udp-in-order": udp_in_order,
    "defrag-udp-reverse": udp_reverse,
    "defrag-udp-first-last": udp_first_last,
    "defrag-dns-query": dns_query,
    "defrag-dns-response-txt": dns_response_txt,
    "defrag-ipv6-hopbyhop": ipv6_hopbyhop,
    "defrag-ipv6-destopt": ipv6_destopt,
    "defrag-ipv6-out-of-order": ipv6_udp_out_of_order,
    "defrag-icmp-echo": icmp_echo,
    "defrag-duplicate": duplicate,
    "defrag-overlap-before-original": overlap_before_original,
    "defrag-overlap-later-different": overlap_later_different,
    "defrag-ipv6-overlap": ipv6_overlap,
    "defrag-same-id-two-sources": same_id_two_sources,
    "defrag-interleaved-ids": interleaved_ids,
    "defrag-incomplete": incomplete,
    "defrag-tiny-first": tiny_first,
    "defrag-fragbits-fragoffset": fragbits_fragoffset,
    "defrag-udp-first-fragment-content": udp_first_fragment_content,
    "decode-event-frag-overlap": frag_overlap_events,
}
