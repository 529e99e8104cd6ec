"""Scapy-built captures of the packet-header sticky buffers (`kw-hdr-*`; see
captures.py): `tcp.hdr`, `ipv4.hdr`, `ipv6.hdr`, `udp.hdr`, `icmpv4.hdr`,
`icmpv6.hdr`, and `icmpv6.mtu` (Suricata's rules/header-keywords.html).

Each buffer is the header's bytes in the packet: a TCP header with its
options (data offset x 4), an IPv4 header with its options (IHL x 4), the
IPv6 header with the extension headers before the upper layer (before the
Fragment header on a fragment), UDP's 8 bytes, ICMPv6's 8, ICMPv4's 8 (20
for a timestamp). The captures hold SYNs with options, packets with no
payload, IP options, IPv6 extension headers, IP fragments (no transport
header is decoded in a fragment; the reassembled datagram has its own
headers), ICMP messages of several types, and TCP segments whose headers
an inline normaliser rewrites (URG, a low TTL, IP options): the buffers
hold the headers as they arrived. Near misses (count 0) look for payload
bytes in a header, for bytes past a header's end, and for a header of the
other IP family. (Rules Suricata refuses, such as `tcp.hdr` on a `udp`
rule or a buffer without a keyword after it, would make a test skipped by
`sluice ips verify`: crates/functions/ips/tests/pkthdr.rs checks them.)

Expectations are what Suricata 7.0.10 does with its stock suricata.yaml.
Every builder here returns whole Ethernet frames (`raw_l2`) where IPv6 or
fragments are involved: captures.py's main() writes them as they are.
"""

from scapy.all import (
    ICMP,
    IP,
    TCP,
    UDP,
    Ether,
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    ICMPv6PacketTooBig,
    IPOption_NOP,
    IPOption_RR,
    IPOption_Timestamp,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    PadN,
    Raw,
)

from conn import CLIENT, CLIENT6, MAC_C, MAC_S, SERVER, SERVER6, Conn



def raw_l2(build):
    """Marks a builder whose packets are whole Ethernet frames."""
    build.raw_l2 = True
    return build


def eth(p):
    return Ether(src=MAC_C, dst=MAC_S) / p


def frags4(d, cut):
    """IPv4 datagram `d` in two fragments cut at byte `cut` of its payload."""
    d = IP(bytes(d))
    hdr, body = d.copy(), bytes(d.payload)
    hdr.remove_payload()
    out = []
    for a, b, mf in ((0, cut, "MF"), (cut, len(body), 0)):
        f = hdr.copy()
        f.flags = mf
        f.frag = a // 8
        f.len = f.chksum = None
        out.append(f / Raw(body[a:b]))
    return out


@raw_l2
def tcp_hdr():
    # A connection whose SYN carries MSS, SACK-permitted, a timestamp and
    # a window scale (a 40-byte header), the SYN-ACK MSS alone (24 bytes),
    # then 20-byte headers; a segment whose bytes look like TCP options;
    # a content split over two segments (the rule with tcp.hdr inspects
    # packets, not the stream); lone segments with URG and an urgent
    # pointer, a low TTL and IP options, which the normaliser rewrites.
    c = Conn(5561, sport=43301)
    syn_opts = [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (11111, 0)), ("NOP", None), ("WScale", 7)]
    c.pkts[0][TCP].options = syn_opts
    c.pkts[1][TCP].options = [("MSS", 1400)]
    c.send(True, b"GET / HTTP/1.0\r\n\x02\x04\x05\xb4\r\n")
    c.send(True, b"xx HDR-SPL").send(True, b"IT-MARK yy")
    c.send(True, b"whole HDR-SPLIT-MARK here")
    c.send(False, b"reply")
    pkts = [eth(p) for p in c.pkts]

    def lone(flags, seq, ack=0, ip=None, **tcp):
        return eth(IP(src=CLIENT, dst=SERVER, **(ip or {})) / TCP(sport=43302, dport=5562, flags=flags, seq=seq, ack=ack, **tcp))

    pkts += [
        lone("S", 7000),
        lone("UPA", 7001, 7101, urgptr=42) / Raw(b"urgent!"),
        lone("PA", 7008, 7101, ip={"ttl": 3}) / Raw(b"low ttl"),
        lone("PA", 7015, 7101, ip={"options": [IPOption_RR(routers=["10.3.0.9"])]}) / Raw(b"ip opts"),
    ]
    return pkts


@raw_l2
def ipv4_hdr():
    # UDP datagrams: plain, with a timestamp option (a 28-byte header), with
    # record route, a low TTL; an ICMP echo; a TCP SYN; a datagram in two
    # fragments (the first with MF, the second with an offset, then the
    # reassembled datagram with neither), another with DF set on both (the
    # reassembled one has no flags); an IPv6 datagram (no ipv4.hdr).
    u = lambda sport, data, **ip: IP(src=CLIENT, dst=SERVER, **ip) / UDP(sport=sport, dport=9999) / Raw(data)  # noqa: E731
    whole = u(43311, b"A" * 24 + b"FRAG-CUT-MARK" + b"B" * 24, id=777)
    # Fragments with DF set too: the reassembled datagram has no flags.
    df = frags4(u(43318, b"G" * 40, id=778), 24)
    for f in df:
        f.flags = f.flags | 2
    pkts = [
        u(43312, b"plain", id=101),
        u(43313, b"tsopt", id=102, options=[IPOption_Timestamp(flg=0, timestamp=1, length=8, pointer=9)]),
        u(43314, b"rropt", id=103, options=[IPOption_NOP(), IPOption_RR(routers=["10.3.0.1"])]),
        u(43315, b"ttl7", id=104, ttl=7),
        IP(src=CLIENT, dst=SERVER, id=105) / ICMP(type=8, id=9, seq=1) / Raw(b"ping"),
        IP(src=CLIENT, dst=SERVER, id=106) / TCP(sport=43316, dport=5563, flags="S", seq=1),
    ] + frags4(whole, 24) + df
    pkts = [eth(p) for p in pkts]
    pkts.append(eth(IPv6(src=CLIENT6, dst=SERVER6) / UDP(sport=43317, dport=9999) / Raw(b"six")))
    return pkts


@raw_l2
def ipv6_hdr():
    # IPv6: plain UDP (40 bytes), Hop-by-Hop then UDP (48), Destination
    # Options then a TCP SYN (48), an ICMPv6 echo, a UDP datagram in two
    # fragments behind Hop-by-Hop (the fragments' buffer ends before the
    # Fragment header; the reassembled datagram's Hop-by-Hop names UDP), and
    # an IPv4 datagram (no ipv6.hdr).
    ip6 = lambda **kw: IPv6(src=CLIENT6, dst=SERVER6, **kw)  # noqa: E731
    body = UDP(sport=43321, dport=9999) / Raw(b"C" * 32 + b"V6-FRAG-MARK" + b"D" * 20)
    # Checksum over the whole datagram: built without the extension
    # headers (they do not enter the pseudo-header).
    body = UDP(bytes(ip6(nh=17) / body)[40:])
    raw = bytes(body)
    hbh = IPv6ExtHdrHopByHop(options=[PadN(otype=1, optdata=b"\x00\x00\x00\x00")])
    f1 = ip6(hlim=64) / hbh / IPv6ExtHdrFragment(nh=17, offset=0, m=1, id=0x5151) / Raw(raw[:40])
    f2 = ip6(hlim=64) / hbh / IPv6ExtHdrFragment(nh=17, offset=5, m=0, id=0x5151) / Raw(raw[40:])
    pkts = [
        ip6() / UDP(sport=43322, dport=9999) / Raw(b"plain six"),
        ip6() / hbh / UDP(sport=43323, dport=9999) / Raw(b"hop by hop"),
        ip6() / IPv6ExtHdrDestOpt(options=[PadN(otype=1, optdata=b"\x00\x00\x00\x00")]) / TCP(sport=43324, dport=5564, flags="S", seq=1),
        ip6(hlim=9) / ICMPv6EchoRequest(id=3, seq=4, data=b"echo six"),
        f1,
        f2,
    ]
    pkts = [eth(p) for p in pkts]
    pkts.append(eth(IP(src=CLIENT, dst=SERVER) / UDP(sport=43325, dport=9999) / Raw(b"four")))
    return pkts


@raw_l2
def udp_hdr():
    # UDP datagrams to 9999 and 9998 (with a fixed checksum, so a
    # transform's output is known), a fragmented datagram (no udp.hdr on
    # its fragments), a TCP SYN and an ICMP echo.
    u = lambda sport, dport, data: IP(src=CLIENT, dst=SERVER) / UDP(sport=sport, dport=dport, chksum=0) / Raw(data)  # noqa: E731
    whole = IP(src=CLIENT, dst=SERVER, id=888) / UDP(sport=43331, dport=9999) / Raw(b"E" * 40 + b"UDP-FRAG" + b"F" * 16)
    pkts = [
        u(43332, 9999, b"hello udp"),
        u(43333, 9998, b"hello other port"),
        u(43334, 9999, b""),
        IP(src=CLIENT, dst=SERVER) / TCP(sport=43335, dport=9999, flags="S", seq=1),
        IP(src=CLIENT, dst=SERVER) / ICMP(type=8, id=5, seq=5) / Raw(b"ping"),
    ] + frags4(whole, 32)
    return [eth(p) for p in pkts]


@raw_l2
def icmp_hdr():
    # ICMPv4: an echo request (8-byte header), a timestamp request (20), a
    # port unreachable quoting a UDP datagram, a fragmented echo (its
    # fragments have no ICMP header; the reassembled one has). ICMPv6: an
    # echo request, Packet Too Big with MTUs 1280 and 1492 (code 0), one of
    # code 1 (no MTU for icmpv6.mtu), a port unreachable.
    v4 = lambda: IP(src=CLIENT, dst=SERVER)  # noqa: E731
    v6 = lambda: IPv6(src=CLIENT6, dst=SERVER6)  # noqa: E731
    quoted = IP(src=SERVER, dst=CLIENT) / UDP(sport=53, dport=43341) / Raw(b"q" * 8)
    quoted6 = IPv6(src=SERVER6, dst=CLIENT6) / UDP(sport=53, dport=43342) / Raw(b"q" * 8)
    big = v4() / ICMP(type=8, id=77, seq=1) / Raw(b"P" * 40 + b"ICMP-FRAG" + b"Q" * 20)
    big.id = 999
    pkts = [
        v4() / ICMP(type=8, id=11, seq=1) / Raw(b"echo four"),
        v4() / ICMP(type=13, id=12, seq=1) / Raw(b"\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03"),
        v4() / ICMP(type=3, code=3) / quoted,
    ] + frags4(big, 32)
    pkts = [eth(p) for p in pkts]
    pkts += [
        eth(v6() / ICMPv6EchoRequest(id=21, seq=1, data=b"echo six")),
        eth(v6() / ICMPv6PacketTooBig(code=0, mtu=1280) / quoted6),
        eth(v6() / ICMPv6PacketTooBig(code=0, mtu=1492) / quoted6),
        eth(v6() / ICMPv6PacketTooBig(code=1, mtu=1400) / quoted6),
        eth(v6() / ICMPv6DestUnreach(code=4) / quoted6),
    ]
    return pkts


CAPTURES = {
    "kw-hdr-tcp": tcp_hdr,
    "kw-hdr-ipv4": ipv4_hdr,
    "kw-hdr-ipv6": ipv6_hdr,
    "kw-hdr-udp": udp_hdr,
    "kw-hdr-icmp": icmp_hdr,
}
