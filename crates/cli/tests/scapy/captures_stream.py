"""Scapy-built captures of the stream-behaviour and payload-keyword tests
(directories `stream-*` and `kw-*`; see captures.py).

Each builder names, in its first comment, the example of Suricata's
documentation (docs.suricata.io, "Suricata Rules") it follows. The expected
counts are Suricata's; every one was also checked by running Suricata 7.0.10
over the same capture. Suricata inspects a TCP stream's bytes in chunks (when
enough acknowledged bytes wait, when an application parser asks, or when the
stream ends), one alert per rule and chunk, so the TCP captures here keep each
signature in a chunk of its own (a closed connection, or more bytes than a
chunk) wherever a count depends on it; UDP datagrams are inspected one by one.
"""

from scapy.all import DNS, DNSQR, ICMP, IP, TCP, UDP, IPv6, Raw

from conn import CLIENT, CLIENT6, SERVER, SERVER6, Conn



class Stream(Conn):
    """A Conn with the segments a stream test needs written out by hand."""

    def c2s(self, flags, seq, data=b"", **kw):
        """A client segment with sequence number `seq`."""
        tcp = TCP(sport=self.sport, dport=self.dport, flags=flags, seq=seq, ack=self.sseq, **kw)
        return IP(src=CLIENT, dst=SERVER) / tcp / (Raw(data) if data else b"")

    def s2c(self, flags, ack, data=b"", **kw):
        tcp = TCP(sport=self.dport, dport=self.sport, flags=flags, seq=self.sseq, ack=ack, **kw)
        return IP(src=SERVER, dst=CLIENT) / tcp / (Raw(data) if data else b"")

    def close(self):
        """Client FIN, server FIN-ACK, client ACK: the stream ends here."""
        self.pkts += [
            self.c2s("FA", self.cseq),
            self.s2c("FA", self.cseq + 1),
            IP(src=CLIENT, dst=SERVER)
            / TCP(sport=self.sport, dport=self.dport, flags="A", seq=self.cseq + 1, ack=self.sseq + 1),
        ]
        return self


class Conn6(Conn):
    """Conn over IPv6 between CLIENT6 and SERVER6."""

    def __init__(self, dport, sport):
        super().__init__(dport, sport)
        self.pkts = [self._v6(p) for p in self.pkts]

    @staticmethod
    def _v6(p):
        src, dst = (CLIENT6, SERVER6) if p[IP].src == CLIENT else (SERVER6, CLIENT6)
        return IPv6(src=src, dst=dst) / p[IP].payload

    def send(self, to_server, data):
        n = len(self.pkts)
        super().send(to_server, data)
        self.pkts[n:] = [self._v6(p) for p in self.pkts[n:]]
        return self


def udp(sport, data, dport=9999, **ip):
    return IP(src=CLIENT, dst=SERVER, **ip) / UDP(sport=sport, dport=dport) / Raw(data)


# ---------------------------------------------------------------- streams


def stream_out_of_order():
    # suricata.yaml, "Stream-engine" (stream.reassembly) with content: a
    # signature split over two segments is found in the reassembled stream
    # even when the later segment arrives first; the bytes in arrival order
    # are not what is inspected.
    c = Stream(4444, sport=41001)
    s = c.cseq
    first, second = b"xx EVIL-", b"SIGNATURE yy"
    c.pkts += [
        c.c2s("PA", s + len(first), second),
        c.s2c("A", s),  # duplicate ACK: the hole is still open
        c.c2s("PA", s, first),
        c.s2c("A", s + len(first) + len(second)),
    ]
    c.cseq = s + len(first) + len(second)
    return c.close().pkts


def stream_retransmit_first_wins():
    # suricata.yaml, "Host-os-policy" (overlap handling of the stream
    # engine) with content: a retransmission of bytes already received that
    # carries other bytes is not what the stream holds. It covers exactly the
    # same sequence range, so Suricata's default policy (bsd) and the others
    # keep the first copy, as Sluice's first-wins policy does.
    pkts = []
    # 41002: the copy comes after the server acknowledged the original.
    c = Stream(4444, sport=41002)
    s = c.cseq
    c.send(True, b"xx EVIL-ONE yy")
    c.pkts += [c.c2s("PA", s, b"xx GOOD-ONE yy"), c.s2c("A", c.cseq)]
    pkts += c.close().pkts
    # 41003: the copy comes before any acknowledgement.
    d = Stream(4444, sport=41003)
    s = d.cseq
    d.pkts += [d.c2s("PA", s, b"xx EVIL-ONE yy"), d.c2s("PA", s, b"xx GOOD-ONE yy")]
    d.cseq += 14
    d.pkts.append(d.s2c("A", d.cseq))
    return pkts + d.close().pkts


def stream_overlap_buffered_first_wins():
    # suricata.yaml, "Host-os-policy" with content: an out-of-order segment
    # is buffered, a second copy of the same range with other bytes arrives,
    # then the hole before them fills. Same range again (the policies differ
    # where a copy starts before the other), so Suricata's default policy
    # keeps the buffered copy, as Sluice's first-wins policy does.
    c = Stream(4444, sport=41004)
    s = c.cseq
    c.pkts += [
        c.c2s("PA", s + 4, b"xx EVIL-ONE yy"),
        c.s2c("A", s),
        c.c2s("PA", s + 4, b"xx GOOD-ONE yy"),
        c.s2c("A", s),
        c.c2s("PA", s, b"abc "),
        c.s2c("A", s + 18),
    ]
    c.cseq = s + 18
    return c.close().pkts


def stream_gap_then_rst():
    # suricata.yaml, "Stream-engine" with content: ten bytes of the client's
    # stream never arrive, the server acknowledges past them and the client
    # resets; the bytes after the gap are inspected all the same, and a
    # content spanning the gap is not found. (Suricata 7.0.10 inspects the
    # bytes after the gap twice here, at the RST and at the flow's end, and
    # raises two alerts: the check asks for more than none.)
    c = Stream(4444, sport=41005)
    c.send(True, b"hello ")
    c.cseq += 10
    c.send(True, b"EVIL-AFTER-GAP")
    c.pkts.append(c.c2s("RA", c.cseq))
    return c.pkts


def stream_tfo_syn_data():
    # Flow keywords, flow:established, with TCP Fast Open (RFC 7413): a SYN
    # carrying the Fast Open option and data, which the server's SYN-ACK
    # acknowledges; Suricata (7.0 and later) takes those bytes into the
    # stream of the connection, established, and not as a packet of a
    # connection not established.
    c = Stream(4444, sport=41006)
    isn, data = 1000, b"xx EVIL-TFO yy"
    opts = [("MSS", 1460), ("TFO", b"\x11\x22\x33\x44\x55\x66\x77\x88")]
    c.pkts = [
        IP(src=CLIENT, dst=SERVER)
        / TCP(sport=c.sport, dport=c.dport, flags="S", seq=isn, options=opts)
        / Raw(data),
        IP(src=SERVER, dst=CLIENT)
        / TCP(sport=c.dport, dport=c.sport, flags="SA", seq=50000, ack=isn + 1 + len(data)),
        IP(src=CLIENT, dst=SERVER)
        / TCP(sport=c.sport, dport=c.dport, flags="A", seq=isn + 1 + len(data), ack=50001),
    ]
    c.cseq, c.sseq = isn + 1 + len(data), 50001
    return c.send(True, b"more\n").close().pkts


def stream_synack_before_syn():
    # Flow keywords: "For TCP a connection will be established after a three
    # way handshake"; here the capture holds the server's SYN-ACK before the
    # client's SYN, so the handshake is not seen in order and the
    # connection never counts as established (no midstream pickup).
    c = Stream(4444, sport=41007)
    c.pkts = [c.pkts[1], c.pkts[0], c.pkts[2]]
    return c.send(True, b"xx EVIL-SYNACK yy").send(False, b"ok\n").close().pkts


def stream_urgent_inline():
    # suricata.yaml, stream.reassembly.urgent.policy, default `inline`: the
    # urgent byte stays in the stream, so a signature with the URG flag and
    # pointer in its middle is still found whole, and not without the byte.
    c = Stream(4444, sport=41008)
    data = b"xx EVIL-URGENT yy"
    # The urgent pointer points after the `U` (offset 8).
    c.pkts += [c.c2s("PAU", c.cseq, data, urgptr=9), c.s2c("A", c.cseq + len(data))]
    c.cseq += len(data)
    return c.close().pkts


def stream_alert_per_inspection():
    # suricata.yaml, stream.reassembly toserver-chunk-size (2560 bytes by
    # default), with content: a rule raises an alert per match, not per
    # flow, and Suricata matches the stream chunk by chunk, so the two
    # messages here are 5,840 bytes each, each holding the signature once:
    # two alerts. A segment holding the signature twice raises one.
    c = Stream(4444, sport=41009)
    for _ in range(2):
        for seg in range(4):
            data = bytearray(b"." * 1460)
            if seg == 0:
                data[100:108] = b"EVIL-ONE"
            c.send(True, bytes(data))
    d = Stream(4445, sport=41010).send(True, b"xx TWICE yy TWICE zz")
    return c.close().pkts + d.close().pkts


def stream_flow_established():
    # Flow keywords, flow: established / not_established with to_server and
    # to_client ("For TCP a connection will be established after a three way
    # handshake").
    c = Stream(4444, sport=41011)
    return c.send(True, b"MARK-C2S\n").send(False, b"hi\n").close().pkts


def stream_flow_direction():
    # Flow keywords, flow: to_client / to_server / from_client / from_server.
    c = Stream(4444, sport=41012)
    return c.send(True, b"MARK-C2S\n").send(False, b"MARK-S2C\n").close().pkts


def stream_only_no_stream():
    # Flow keywords, flow: only_stream ("packets that have been reassembled
    # by the stream engine") and no_stream ("Will not match packets that have
    # been reassembled"): a signature split over two segments is found only
    # in the stream; one whole in a segment by both.
    c = Stream(4444, sport=41013)
    c.send(True, b"xx EVIL-SI").send(True, b"GNATURE yy").send(True, b"a WHOLE-ONE b")
    return c.close().pkts


# ---------------------------------------------------------------- payload keywords


def kw_startswith():
    # Payload keywords, startswith: `content:"GET|20|"; startswith;`
    return [udp(42001, b"GET /index.html"), udp(42001, b"xGET /index.html")]


def kw_endswith():
    # Payload keywords, endswith: `content:".php"; endswith;`
    return [udp(42002, b"GET /a.php"), udp(42002, b"GET /a.php?x=1")]


def kw_bsize():
    # Payload keywords, bsize: the examples on `dns.query; content:"google.com";`
    # (bsize:10, bsize:<25, bsize:>8, bsize:8<>20).
    q = lambda name, sport: (  # noqa: E731
        IP(src=CLIENT, dst=SERVER)
        / UDP(sport=sport, dport=53)
        / DNS(id=sport, rd=1, qd=DNSQR(qname=name, qtype="A"))
    )
    return [
        q("google.com", 42003),  # 10 bytes
        q("www.google.com", 42004),  # 14
        q("mail.eu.west.google.com", 42005),  # 23
        q("images.cdn.eu-west.google.com", 42006),  # 29
    ]


def kw_isdataat():
    # Payload keywords, isdataat, "absolute vs relative values": the
    # payload `abcdefgh` and its table (isdataat:7 yes, isdataat:8 no,
    # content "c" then isdataat:5,relative yes and isdataat:6,relative no).
    return [udp(42007, b"abcdefgh")]


def kw_byte_jump():
    # Payload keywords, byte_jump, "Multiple Jumps":
    # `byte_jump:2,0; byte_jump:2,0,relative; content:"foobar"; distance:0; within:6;`
    # The first jump reads 2 at offset 0 and lands at 4, the second reads 3
    # there and lands at 9, where `foobar` is; in the second datagram it is
    # one byte further, outside `within:6`.
    return [
        udp(42008, b"\x00\x02ab\x00\x03xyzfoobar"),
        udp(42008, b"\x00\x02ab\x00\x03xyzXfoobar"),
    ]


def kw_byte_extract():
    # Payload keywords, byte_extract, "Example Using within":
    # `content:"|00 FF|"; byte_extract:1,0,len,relative; content:"|5c 00|";
    # distance:2; within:len;` and "Comparing Bytes" (byte_test against the
    # extracted cmp_ver).
    within_ok = b"\x00\xff\x04ab\x5c\x00rest"  # len 4: 5c 00 ends 2+4 after len
    within_short = b"\x00\xff\x01ab\x5c\x00rest"  # len 1: a 2-byte content cannot fit
    cmp_ok = b"\x00\xff\x00\xffFooBar"  # extracted 0x00ff == the 2 bytes at offset 0
    cmp_bad = b"\x00\xff\x00\xfeFooBar"
    pkts = []
    for sport, data in ((41020, within_ok), (41021, within_short), (41022, cmp_ok), (41023, cmp_bad)):
        pkts += Stream(4446, sport=sport).send(True, data).close().pkts
    return pkts


def kw_pcre_flags():
    # Payload keywords, pcre: the modifiers i (case insensitive), s (dot
    # matches newlines) and m (^ and $ at every line), each with the rule
    # without the modifier as near miss.
    return [
        udp(42009, b"hello EVIL-42 bye"),
        udp(42010, b"BEGIN\nEND"),
        udp(42011, b"LINE1\nLINE2\nLINE3"),
    ]


def kw_pcre_anchors():
    # Payload keywords, pcre: `A` ("A pattern has to match at the beginning
    # of a buffer"), ^ at the buffer start, and `R` ("Match relative to the
    # last pattern match"), where ^ anchors after the content.
    return [udp(42012, b"user=bob;role=admin"), udp(42013, b" user=bob;role=admin")]


def kw_negated_content():
    # Payload keywords, content, the "Outdated Firefox on Windows" example:
    # `content:"Firefox/3."; distance:0; content:!"Firefox/3.6.13"; distance:-10;`
    # (an `alert http` rule there: the same contents here on a datagram).
    ua = b"GET / HTTP/1.1\r\nUser-Agent: Mozilla/5.0 (Windows; U; Windows NT 6.1) Gecko Firefox/3.6.%s\r\n\r\n"
    return [udp(42014, ua % b"12"), udp(42015, ua % b"13")]


def kw_nocase():
    # Payload keywords, nocase: `content: "abc"; nocase;`
    return [udp(42016, b"xx ABC yy")]


def kw_rawbytes():
    # Payload keywords, rawbytes: "has no effect but is included to be
    # compatible with signatures that use it".
    return [udp(42017, b"xx RAWBYTES-MARK yy"), udp(42017, b"xx nothing yy")]


def kw_fast_pattern():
    # Prefiltering keywords, fast_pattern: `content:"User-Agent|3A|";
    # content:"Badness"; distance:0; fast_pattern;`, fast_pattern:only and
    # the 'chop' form `content:"aaaaaaaaabcd"; fast_pattern:8,4;` (the MPM
    # uses only the last four bytes, the rule still needs the whole content;
    # the documentation's own `aaaaaaaaabc` is one byte too short for 8,4).
    return [
        udp(42018, b"User-Agent: Badness 1.0"),
        udp(42018, b"User-Agent: Goodness"),
        udp(42018, b"Badness alone"),
        udp(42018, b"x aaaaaaaaabcd y"),
        udp(42018, b"x aaaabcd y"),
    ]


def kw_dsize():
    # Payload keywords, dsize: the examples dsize:10, <10, <=10, >8, >=10,
    # 8<>20 (exclusive) and !9, over payloads of 8, 9, 10 and 20 bytes.
    return [udp(42019, b"D" * n) for n in (8, 9, 10, 20)]


def kw_flowint():
    # Flow keywords, flowint: "Counting Usernames" (`content:"jonkman";
    # flowint: usernamecount, +, 1; noalert;`) and "More than Five Usernames!"
    # (`flowint: usernamecount, +, 1; flowint:usernamecount, >, 5;`), on a
    # UDP flow so each datagram is one inspection. Both rules add one per
    # datagram; the second fires once the count it sees is over five.
    # Seven datagrams of one flow: alerts on the sixth and seventh; five of
    # another flow, interleaved: none (the count is per flow).
    flow = [udp(42020, b"login jonkman %d" % i) for i in range(7)]
    other = [udp(42021, b"login jonkman %d" % i) for i in range(5)]
    return flow[:3] + other + flow[3:]


def kw_xbits():
    # Xbits keyword, "Creating a SSH blacklist": a client sending a bot's
    # SSH version gets `xbits:set, badssh, track ip_src, expire 3600`, and
    # its later connections to port 22 match `xbits:isset, badssh, track
    # ip_src`; a connection the server opens (another source) does not.
    a = Stream(22, sport=41030).send(True, b"SSH-2.0-libssh_0.9.6\r\n").close()
    b = Stream(22, sport=41031).send(True, b"SSH-2.0-OpenSSH_9.6\r\n").close()
    # The other host (SERVER) connecting to CLIENT:22.
    o = Stream(22, sport=41032).send(True, b"SSH-2.0-OpenSSH_9.6\r\n").close()
    swap = {CLIENT: SERVER, SERVER: CLIENT}
    for p in o.pkts:
        p[IP].src, p[IP].dst = swap[p[IP].src], swap[p[IP].dst]
    return a.pkts + b.pkts + o.pkts


def kw_itype_icode():
    # ICMP keywords: itype:>10, itype:min<>max, icode:>5 and the
    # "Time-To-Live Exceeded in Transit" rule (`icode:0; itype:11;`). The
    # error messages (types 3 and 11) quote the datagram they answer.
    ip = IP(src=SERVER, dst=CLIENT)
    quoted = IP(src=CLIENT, dst=SERVER, ttl=1) / UDP(sport=42030, dport=33434) / Raw(b"probe")
    return [
        ip / ICMP(type=8, code=0, id=1, seq=1) / Raw(b"ping"),
        ip / ICMP(type=3, code=1) / quoted,
        ip / ICMP(type=3, code=13) / quoted,
        ip / ICMP(type=11, code=0) / quoted,
        ip / ICMP(type=13, code=0, id=2, seq=1) / Raw(b"x" * 12),
    ]


def kw_alert_ip():
    # Rules format, protocol `ip` ("ip (ip stands for 'all' or 'any')"): one
    # content rule matches the payload of UDP, TCP and ICMP alike.
    c = Stream(4447, sport=41040).send(True, b"xx IP-ANY-MARK yy").close()
    return (
        [udp(42022, b"xx IP-ANY-MARK yy"), udp(42022, b"xx other yy")]
        + c.pkts
        + [IP(src=CLIENT, dst=SERVER) / ICMP(type=8, id=3, seq=1) / Raw(b"IP-ANY-MARK")]
    )


def kw_ipv6():
    # IP Addresses Match / rules format, source and destination: IPv6
    # addresses and networks in a rule's header, over IPv6 UDP and TCP.
    d = IPv6(src=CLIENT6, dst=SERVER6) / UDP(sport=42023, dport=9999) / Raw(b"xx V6-MARK yy")
    c = Conn6(4448, sport=41041).send(True, b"xx V6-MARK yy")
    tcp = lambda src, dst, sp, dp, f, seq, ack: IPv6(src=src, dst=dst) / TCP(  # noqa: E731
        sport=sp, dport=dp, flags=f, seq=seq, ack=ack
    )
    fin = [
        tcp(CLIENT6, SERVER6, c.sport, c.dport, "FA", c.cseq, c.sseq),
        tcp(SERVER6, CLIENT6, c.dport, c.sport, "FA", c.sseq, c.cseq + 1),
        tcp(CLIENT6, SERVER6, c.sport, c.dport, "A", c.cseq + 1, c.sseq + 1),
    ]
    return [d] + c.pkts + fin


def kw_ttl():
    # IP keywords, ttl: `ttl:10;`, and the forms of an integer keyword
    # (`<`, `>`, `min-max`).
    return [udp(42024, b"ttl probe", ttl=t) for t in (0, 5, 10, 64)]


def kw_flags():
    # TCP keywords, tcp.flags (`flags`): `tcp.flags:S,CE;` (SYN "regardless
    # of the values of the reserved bits"), the same mask after SYN+FIN, and
    # the modifiers + (these bits plus any others), * (any of these) and !
    # (not these). One packet per flow, none of them part of a connection.
    # (The documentation's `tcp.flags:FPU,CE;` is not used: Sluice clears
    # URG before inspection, see the report.)
    t = lambda i, f: IP(src=CLIENT, dst=SERVER) / TCP(  # noqa: E731
        sport=41050 + i, dport=4449, flags=f, seq=7
    )
    return [t(i, f) for i, f in enumerate(["SF", "SFCE", "SFA", "S", "SEC", "R", "A"])]


def kw_prefilter():
    # Prefiltering keywords, prefilter: `alert ip any any -> any any
    # (ttl:123; prefilter; content:"a"; sid:1;)`.
    return [udp(42028, b"a", ttl=123), udp(42028, b"a", ttl=64), udp(42028, b"b", ttl=123)]


def kw_meta_accepted():
    # Meta keywords (msg, rev, gid, classtype, reference, priority, metadata,
    # target) and tag: information that does not change whether a rule
    # matches.
    return [udp(42025, b"xx META-MARK yy"), udp(42025, b"xx other yy")]


def kw_ip_proto_sameip():
    # IP keywords, ip_proto (`ip_proto:17`, by number and name) and sameip
    # (the "GPL SCAN same SRC/DST" rule).
    return [
        udp(42026, b"proto"),
        IP(src=CLIENT, dst=SERVER) / ICMP(type=8, id=4, seq=1) / Raw(b"proto"),
        IP(src=CLIENT, dst=CLIENT) / UDP(sport=42027, dport=9999) / Raw(b"same"),
    ]



def kw_flags_urg():
    # TCP keywords, tcp.flags: the documentation's `tcp.flags:FPU,CE;`.
    t = lambda i, f: IP(src=CLIENT, dst=SERVER) / TCP(  # noqa: E731
        sport=41110 + i, dport=4449, flags=f, seq=7
    )
    return [t(0, "FPU"), t(1, "FPUCE"), t(2, "AU")]


def kw_meta_eve_fields():
    # Meta keywords, metadata and target: Suricata logs them in the alert.
    return [udp(42101, b"xx META-MARK yy")]


def stream_gap_acked_then_server_rst():
    # A gap, the server acknowledges past it (it received the bytes after
    # it), then the server resets.
    c = Stream(4444, sport=41103)
    c.send(True, b"hello ")
    c.cseq += 10
    c.send(True, b"EVIL-AFTER-GAP")
    c.pkts.append(c.s2c("RA", c.cseq))
    return c.pkts


def stream_gap_unacked_then_server_rst():
    # A gap, the bytes after it acknowledged by the server's RST itself.
    c = Stream(4444, sport=41104)
    c.send(True, b"hello ")
    c.cseq += 10
    c.pkts.append(c.c2s("PA", c.cseq, b"EVIL-AFTER-GAP"))
    c.cseq += 14
    c.pkts.append(c.s2c("RA", c.cseq))
    return c.pkts


def kw_ip_tcp_icmp_headers():
    # Header keywords (rules/header-keywords.html): id, tos (decimal and
    # `x` hex, negated), fragbits, ipopts, seq/ack/flags:0 (the docs' "GPL
    # SCAN NULL"), window with flags:S,12 (the docs' sid 2182), icmp_id and
    # icmp_seq (the docs' "Broadscan Smurf Scanner").
    from scapy.all import IPOption_LSRR, IPOption_RR  # noqa: F401

    ip = lambda **kw: IP(src=CLIENT, dst=SERVER, **kw)  # noqa: E731
    return [
        ip(id=1, tos=8) / UDP(sport=42201, dport=9999) / Raw(b"content: one"),
        ip(id=2, tos=0, flags="DF") / UDP(sport=42202, dport=9999) / Raw(b"two"),
        ip(id=3, options=[IPOption_LSRR(routers=["10.3.0.1"])]) / UDP(sport=42203, dport=9999) / Raw(b"three"),
        ip() / ICMP(type=8, id=0, seq=0) / Raw(b"abcd"),
        ip() / ICMP(type=8, id=5, seq=0) / Raw(b"abcd"),
        ip() / TCP(sport=42204, dport=4450, flags="", seq=0, ack=0),
        ip() / TCP(sport=42205, dport=4450, flags="S", seq=0, ack=0),
        ip() / TCP(sport=42206, dport=4451, flags="SE", seq=7, window=55808),
        ip() / TCP(sport=42207, dport=4451, flags="S", seq=7, window=1024),
    ]


def kw_family_protocols():
    # Rule protocols of one address family (rules/intro.html, "Protocol":
    # ipv4, ipv6, icmpv4, icmpv6).
    from scapy.layers.inet6 import ICMPv6EchoRequest

    v6 = lambda: IPv6(src="fd00:1::5", dst="fd00:2::7")  # noqa: E731
    return [
        IP(src=CLIENT, dst=SERVER) / UDP(sport=42301, dport=9999) / Raw(b"xx FAM-MARK yy"),
        v6() / UDP(sport=42302, dport=9999) / Raw(b"xx FAM-MARK yy"),
        IP(src=CLIENT, dst=SERVER) / ICMP(type=8, id=1, seq=1) / Raw(b"ping"),
        v6() / ICMPv6EchoRequest(id=1, seq=1, data=b"ping"),
    ]


def kw_tcp_mss():
    # header-keywords.html tcp.mss (`flow:stateless; flags:S,12; tcp.mss:<536;`).
    syn = lambda sport, opts: IP(src=CLIENT, dst=SERVER) / TCP(  # noqa: E731
        sport=sport, dport=4452, flags="S", seq=1, options=opts
    )
    return [
        syn(42401, [("MSS", 500)]),
        syn(42402, [("NOP", None), ("MSS", 1460), ("SAckOK", b"")]),
        syn(42403, []),
    ]

CAPTURES = {
    "stream-out-of-order": stream_out_of_order,
    "stream-retransmit-first-wins": stream_retransmit_first_wins,
    "stream-overlap-buffered-first-wins": stream_overlap_buffered_first_wins,
    "stream-gap-then-rst": stream_gap_then_rst,
    "stream-tfo-syn-data": stream_tfo_syn_data,
    "stream-synack-before-syn": stream_synack_before_syn,
    "stream-urgent-inline": stream_urgent_inline,
    "stream-alert-per-inspection": stream_alert_per_inspection,
    "stream-flow-established": stream_flow_established,
    "stream-flow-direction": stream_flow_direction,
    "stream-only-no-stream": stream_only_no_stream,
    "kw-startswith": kw_startswith,
    "kw-endswith": kw_endswith,
    "kw-bsize": kw_bsize,
    "kw-isdataat": kw_isdataat,
    "kw-byte-jump": kw_byte_jump,
    "kw-byte-extract": kw_byte_extract,
    "kw-pcre-flags": kw_pcre_flags,
    "kw-pcre-anchors": kw_pcre_anchors,
    "kw-negated-content": kw_negated_content,
    "kw-nocase": kw_nocase,
    "kw-rawbytes": kw_rawbytes,
    "kw-fast-pattern": kw_fast_pattern,
    "kw-dsize": kw_dsize,
    "kw-flowint": kw_flowint,
    "kw-xbits": kw_xbits,
    "kw-itype-icode": kw_itype_icode,
    "kw-alert-ip": kw_alert_ip,
    "kw-ipv6": kw_ipv6,
    "kw-ttl": kw_ttl,
    "kw-flags": kw_flags,
    "kw-prefilter": kw_prefilter,
    "kw-meta-accepted": kw_meta_accepted,
    "kw-ip-proto-sameip": kw_ip_proto_sameip,
    "kw-flags-urg": kw_flags_urg,
    "kw-meta-eve-fields": kw_meta_eve_fields,
    "stream-gap-acked-then-server-rst": stream_gap_acked_then_server_rst,
    "stream-gap-unacked-then-server-rst": stream_gap_unacked_then_server_rst,
    "kw-ip-tcp-icmp-headers": kw_ip_tcp_icmp_headers,
    "kw-family-protocols": kw_family_protocols,
    "kw-tcp-mss": kw_tcp_mss,
}
