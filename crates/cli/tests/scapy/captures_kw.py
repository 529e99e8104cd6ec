"""Scapy-built captures of the detection-keyword edge-case tests
(directories `kw-*` of this module; see captures.py).

Each test holds a few small packets or connections and rules of which some
must match and some must not (count: 0). The expected counts are those of
Suricata 7.0.10, run over the same captures. Flow-state keywords (flowbits,
flowint) use UDP flows, inspected datagram by datagram, so that no count
depends on how Suricata cuts a TCP stream into inspection chunks.
"""

from scapy.all import ICMP, IP, TCP, UDP, Raw
from scapy.all import IPOption_NOP, IPOption_RR, IPOption_Timestamp

from conn import CLIENT, SERVER, Conn


def udp(sport, data, dport=9999, **ip):
    """A datagram CLIENT:sport -> SERVER:dport."""
    return IP(src=CLIENT, dst=SERVER, **ip) / UDP(sport=sport, dport=dport) / Raw(data)


def udp_back(sport, data, dport=9999):
    """The server's answer on the flow of `udp(sport, ..., dport)`."""
    return IP(src=SERVER, dst=CLIENT) / UDP(sport=dport, dport=sport) / Raw(data)


def closed(c):
    """Closes Conn `c`: client FIN, server FIN-ACK, client ACK."""
    c.pkts += [
        IP(src=CLIENT, dst=SERVER) / TCP(sport=c.sport, dport=c.dport, flags="FA", seq=c.cseq, ack=c.sseq),
        IP(src=SERVER, dst=CLIENT) / TCP(sport=c.dport, dport=c.sport, flags="FA", seq=c.sseq, ack=c.cseq + 1),
        IP(src=CLIENT, dst=SERVER) / TCP(sport=c.sport, dport=c.dport, flags="A", seq=c.cseq + 1, ack=c.sseq + 1),
    ]
    return c.pkts


# ------------------------------------------------------------- flowbits


def flowbits_or():
    # flow-keywords.html flowbits: `isset,a|b` (either set), `isnotset`,
    # and `isnotset,a|b` (true when any one of them is not set).
    return [
        udp(43001, b"LOGIN a"),
        udp(43001, b"DATA x"),
        udp(43002, b"ADMIN b"),
        udp(43002, b"DATA x"),
        udp(43003, b"LOGIN a"),
        udp(43003, b"ADMIN b"),
        udp(43003, b"DATA x"),
        udp(43004, b"DATA x"),
    ]


def flowbits_toggle():
    # flowbits toggle (set when unset, unset when set) and unset, each
    # followed by a query datagram of its own.
    seq = [b"SETB", b"Q1", b"TOGL", b"Q2", b"TOGL", b"Q3", b"UNST", b"Q4", b"TOGL", b"Q5"]
    return [udp(43011, m) for m in seq]


def flowbits_direction():
    # A bit set by the server's datagram, tested in the client's next one
    # (bits belong to the flow, not to a direction); bits set and tested by
    # two rules on one datagram (set rules run before the rules reading
    # the bit, whatever their sids).
    return [
        udp(43021, b"HELLO"),
        udp_back(43021, b"BANNER v1"),
        udp(43021, b"CMD one"),
        # Another flow: the command before any banner.
        udp(43022, b"CMD one"),
        udp_back(43022, b"BANNER v1"),
        # Set and read in one datagram.
        udp(43023, b"BOTH here"),
    ]


# ---------------------------------------------------------------- flowint


def flowint_ops():
    # flow-keywords.html flowint: `+` and `-` on a variable, compared with
    # `>`, `==`, `<`, `!=`, `>=` a number or another variable; isset/notset.
    f = [udp(43031, m) for m in (b"INCR", b"INCR", b"INCR", b"TEST", b"DECR", b"LIMIT", b"FINAL")]
    # A second flow that never counts.
    return f + [udp(43032, b"TEST"), udp(43032, b"FINAL")]


# ------------------------------------------------------------------ pcre


def pcre_modifiers():
    # payload-keywords.html pcre: /x (extended), /R, negated pcre, /G
    # (ungreedy, as seen by a relative content after it), /E ($ only at
    # the very end), $ before a final newline, /B, and /m with ^ and $.
    return [
        udp(43041, b"key=abc123 val=Q\r\nline2 END\n"),
        udp(43042, b"a1b2b XYZ"),
    ]


def pcre_http_raw_host():
    # pcre /Z (http.host.raw): the Host header as sent, case kept.
    req = b"GET /index.html HTTP/1.1\r\nHost: WWW.Example.COM\r\nUser-Agent: curl/8.1\r\n\r\n"
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    c = Conn(80, sport=43052).send(True, req).send(False, resp)
    return closed(c)


def trailing_modifiers():
    # The modifier of flags and fragbits written after the bits (`SA+`,
    # `D+`), which Suricata's parsers accept: `flags:SA+` is `+SA`, while
    # `fragbits:D+` is D exactly (the trailing `+` is ignored).
    t = lambda sport, f: IP(src=CLIENT, dst=SERVER) / TCP(sport=sport, dport=5557, flags=f, seq=1)  # noqa: E731
    u = lambda sport, f: IP(src=CLIENT, dst=SERVER, flags=f) / UDP(sport=sport, dport=9999) / Raw(b"frag")  # noqa: E731
    return [
        t(43231, "SA"),
        t(43232, "SAP"),
        t(43233, "S"),
        u(43234, "DF"),
        u(43235, "DF"),
        u(43236, "evil+DF"),
    ]


def pcre_http_modifiers():
    # payload-keywords.html pcre, the HTTP modifiers: U (normalised uri),
    # I (raw uri), M (method), H/D (headers, raw), C (cookie), P (request
    # body), V (user agent), W (host, normalised), S (status code), Y
    # (status message), Q (response body). Z: kw-pcre-http-raw-host.
    body = b"user=admin&pw=x"
    req = (
        b"POST /a/../admin/login%%2ephp?x=1 HTTP/1.1\r\nHost: WWW.Example.COM\r\n"
        b"User-Agent: curl/8.1\r\nCookie: sess=deadbeef\r\nX-Trace: 777\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    rbody = b"access denied"
    resp = b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(rbody), rbody)
    c = Conn(80, sport=43051).send(True, req).send(False, resp)
    return closed(c)


# --------------------------------------------------------------- content


def content_negative_distance():
    # payload-keywords.html distance (negative), within with a negated
    # content, distance:0 after a match at the payload's end.
    return [udp(43061, b"xxABCDEFGHyy")]


def content_offset_depth_relative():
    # offset and depth together, then relative keywords after them.
    return [udp(43071, b"HDR1 HDR2 DATA=HDR3 END")]


def content_backtrack():
    # A relative content that only fits after a later occurrence of the
    # first one: Suricata goes back to the next occurrence and tries again.
    return [udp(43081, b"AAB_xx_AAB_yy_AAB_zz_END")]


def content_hex_nocase():
    # Hex bytes mixed with text, nocase on a pattern written in hex.
    return [udp(43091, b"\x00\x01Hello\xffWorld|pipe\x0d\x0a")]


# ------------------------------------------------- isdataat, byte_jump/extract


def isdataat_relative():
    # isdataat relative to a content, to a pcre, negated, with rawbytes,
    # and on an HTTP buffer (the uri's end). Absolute `isdataat:N` asks for
    # a byte at offset N; relative `isdataat:N,relative` for N bytes left
    # after the previous match (detect-isdataat.c: offset + N > length
    # fails), so "LEN:" followed by 6 bytes satisfies `isdataat:6,relative`.
    c = Conn(80, sport=43101).send(True, b"GET /xy HTTP/1.1\r\nHost: a.example\r\n\r\n")
    c.send(False, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    return [udp(43100, b"LEN:abcdef")] + closed(c)


def byte_jump_options():
    # payload-keywords.html byte_jump options. Each datagram starts with a
    # tag of four bytes; "HIT!" is where the jump must land.
    pk = []
    # from_beginning: reads 12 at offset 4, lands on 12 (not 4+2+12=18).
    p = b"JFB_\x00\x0c" + b"......" + b"HIT!" + b"..MISS"
    assert p.index(b"HIT!") == 12 and p.index(b"MISS") == 18
    pk.append(udp(43111, p))
    # post_offset 3: 4+1+4+3 = 12.
    p = b"JPO_\x04" + b"......." + b"HIT!"
    assert p.index(b"HIT!") == 12
    pk.append(udp(43112, p))
    # align: the value 5 rounded up to 8, 4+1+8 = 13 (unaligned: 10).
    p = b"JAL_\x05" + b"........" + b"HIT!"
    assert p.index(b"HIT!") == 13
    pk.append(udp(43113, p))
    # multiplier 2: 4+1+3*2 = 11.
    p = b"JMU_\x03" + b"......" + b"HIT!"
    assert p.index(b"HIT!") == 11
    pk.append(udp(43114, p))
    # little endian: 06 00 -> 6, 4+2+6 = 12 (big endian 1536 is past the end).
    p = b"JLE_\x06\x00" + b"......" + b"HIT!"
    assert p.index(b"HIT!") == 12
    pk.append(udp(43115, p))
    # string,dec: "08" -> 8, 4+2+8 = 14.
    p = b"JSD_08" + b"........" + b"HIT!"
    assert p.index(b"HIT!") == 14
    pk.append(udp(43116, p))
    # relative to content "K" (ends at 5): reads 1 byte at 5 -> 6+2 = 8.
    p = b"JRE_K\x02.." + b"HIT!"
    assert p.index(b"HIT!") == 8
    pk.append(udp(43117, p))
    # from_end with post_offset -8: lands 8 bytes before the end.
    p = b"JFE_\x00" + b"...." + b"HIT!TAIL"
    pk.append(udp(43118, p))
    # A jump landing exactly on the end of the payload: 4+1+3 = 8 = len.
    p = b"JEN_\x03abc"
    assert len(p) == 8
    pk.append(udp(43119, p))
    # A jump one past the end: 4+1+4 = 9 > len 8.
    pk.append(udp(43120, b"JPE_\x04abc"))
    return pk


def byte_extract_uses():
    # payload-keywords.html byte_extract: the extracted value as offset,
    # depth, distance and within of later contents.
    # offset: 8 read at 3; "TT" at 4 and 8, "TT.." only at 4.
    p1 = b"BXO\x08" + b"TT.." + b"TTX."
    # depth: 6; "QQ" ends at 6, "RR" at 10.
    p2 = b"BXD\x06" + b"QQ" + b"..RR"
    # distance: 4 after the byte read (which ends at 4): "RR" at 8.
    p3 = b"BXI\x04" + b"RR.." + b"RR"
    # within: 5 after the byte read: "WW" ends at 8, "VV" at 12.
    p4 = b"BXW\x05" + b"..WW" + b"..VV"
    # "06" as decimal, times 2: offset 12, where the second "MM" is.
    p5 = b"BXM06" + b"MM....." + b"MM"
    assert p1.index(b"TT", 5) == 8 and p3.index(b"RR", 5) == 8 and p5.index(b"MM", 6) == 12
    return [udp(43131, p1), udp(43132, p2), udp(43133, p3), udp(43134, p4), udp(43135, p5)]


# ------------------------------------------------------------- IP headers


def ttl_ip_proto():
    # header-keywords.html ttl (with < > <= >= <> and !), ip_proto (number,
    # name, negated, <, >), id. `alert ip` rules see every packet, ICMP, TCP
    # and ESP too.
    return [
        udp(43141, b"t1", ttl=1, id=4001),
        udp(43142, b"t5", ttl=5, id=4002),
        udp(43143, b"t64", ttl=64, id=4003),
        udp(43144, b"t200", ttl=200, id=4004),
        IP(src=CLIENT, dst=SERVER, ttl=64, id=4005) / ICMP(type=8, id=1, seq=1) / Raw(b"ping"),
        IP(src=CLIENT, dst=SERVER, ttl=64, id=4006) / TCP(sport=43145, dport=5551, flags="S", seq=1),
        # ESP (protocol 50): an SPI, a sequence number, then ciphertext.
        IP(src=CLIENT, dst=SERVER, ttl=64, id=4007, proto=50) / Raw(b"\x00\x00\x10\x01\x00\x00\x00\x01esp"),
    ]


def fragbits_modifiers():
    # header-keywords.html fragbits: M, D, R alone and with + (those and at
    # least one other: detect-fragbits.c), * (any of them) and ! (not all of
    # them). The datagrams with M set are fragments of datagrams that never
    # complete: Suricata inspects each fragment as a packet of its own.
    def frag(sport, flags, ident):
        return IP(src=CLIENT, dst=SERVER, flags=flags, id=ident) / UDP(sport=sport, dport=9999) / Raw(b"frag")

    return [
        frag(43151, "DF", 5001),
        frag(43152, "MF", 5002),
        frag(43153, "evil", 5003),
        frag(43154, "evil+DF", 5004),
        frag(43155, 0, 5005),
        frag(43156, "MF+DF", 5006),
    ]


def ipopts_kinds():
    # header-keywords.html ipopts: rr, ts, nop, eol, any; an option in a
    # datagram with two options. Scapy pads the record route option (7
    # bytes) with an end-of-list byte; the others need no padding. Suricata
    # 7.0.10 matches `ipopts:any` on none of these datagrams.
    return [
        udp(43161, b"rr", options=[IPOption_RR(routers=["10.3.0.1"])]),
        udp(43162, b"ts", options=[IPOption_Timestamp(flg=0, timestamp=1, length=8, pointer=9)]),
        udp(43163, b"nop+rr", options=[IPOption_NOP(), IPOption_RR(routers=["10.3.0.1"])]),
        udp(43164, b"none"),
    ]


# ------------------------------------------------------------ TCP headers


def tcp_flags_mask():
    # header-keywords.html flags (`S,12`, `+A`, `!R`, `!SA`, `*SR`), seq,
    # ack and window (with `!`). Lone segments, no connection. A rule whose
    # flags name S (but for `!`) and which has no content is only evaluated
    # on SYN segments (Suricata keeps such rules in a SYN-only list,
    # detect-engine-prefilter.c's non_pf_syn_store_array): `*SR` and `*SF`
    # miss the RST and the FIN, `*AR` does not.
    t = lambda sport, **kw: IP(src=CLIENT, dst=SERVER) / TCP(sport=sport, dport=5552, **kw)  # noqa: E731
    return [
        t(43171, flags="SEC", seq=100, window=1024),
        t(43172, flags="SA", seq=200, ack=101, window=65535),
        t(43173, flags="R", seq=300, window=0),
        t(43174, flags="FPA", seq=400, ack=500, window=512),
        t(43175, flags="S", seq=500, window=1024),
    ]


def tcp_mss_ranges():
    # tcp.mss with ranges, negated, and a SYN without the option.
    syn = lambda sport, opts: IP(src=CLIENT, dst=SERVER) / TCP(  # noqa: E731
        sport=sport, dport=5553, flags="S", seq=1, options=opts
    )
    return [
        syn(43181, [("MSS", 500)]),
        syn(43182, [("NOP", None), ("MSS", 1460), ("SAckOK", b"")]),
        syn(43183, []),
        syn(43184, [("MSS", 536)]),
    ]


def dsize_tcp():
    # dsize ranges on the segments of one connection (the handshake's
    # empty segments count too), and dsize with a content split over two
    # segments: dsize makes the rule inspect packets, not the stream.
    c = Conn(5554, sport=43191)
    for n in (5, 10, 15, 20, 25):
        c.send(True, b"D" * n)
    c.send(True, b"xx SPLIT").send(True, b"ME yy")
    return closed(c)


def tcp_depth_packet_and_stream():
    # A TCP content rule is a stream rule (inspected when Suricata inspects
    # the reassembled stream: here at the FIN); a content with depth or
    # offset, or a rule with stream_size, is inspected over each packet's
    # payload as well as over the stream (detect-parse.c, "pkt vs stream
    # vs depth/offset"), so it can alert twice; dsize or flags make a rule
    # inspect packets only.
    c = Conn(5556, sport=43221)
    c.send(True, b"SECOND-0123456789")
    c.send(True, b"THIRD-xyz")  # stream offsets 17..26
    return closed(c)


def stream_size():
    # header-keywords.html stream_size: the bytes a side sent, counted by
    # sequence numbers (its SYN included).
    c = Conn(5555, sport=43201)
    c.send(True, b"FIRST-0123")  # 10 bytes: client size 11 after it
    c.send(False, b"OK")  # server size 3
    c.send(True, b"SECOND-0123456789")  # 17 bytes: client size 28
    return closed(c)


# ------------------------------------------------------------------ ICMP


def icmp_ranges():
    # header-keywords.html itype (>, <>, <=, !), icode, icmp_id, icmp_seq.
    ip = lambda: IP(src=CLIENT, dst=SERVER)  # noqa: E731
    inner = IP(src=SERVER, dst=CLIENT) / UDP(sport=53, dport=43211)
    return [
        ip() / ICMP(type=8, id=7, seq=1) / Raw(b"ping"),
        IP(src=SERVER, dst=CLIENT) / ICMP(type=0, id=7, seq=2) / Raw(b"ping"),
        ip() / ICMP(type=3, code=1) / inner,
        ip() / ICMP(type=4, code=0) / inner,
        ip() / ICMP(type=11, code=0) / inner,
        ip() / ICMP(type=13, id=9, seq=3) / Raw(b"\x00" * 12),
    ]


def depth_each_segment():
    # A command protocol on a kept-alive connection: each command starts a
    # segment. A content with depth matches at the start of every segment
    # (Suricata inspects such a rule on each packet's payload too), not
    # only at the stream's start. Inline (the name has `ips`): Suricata's
    # IDS mode inspects the stream again at the end, a second alert.
    c = Conn(5557)
    c.send(True, b"HELO first\r\n").send(False, b"250 ok\r\n")
    c.send(True, b"HELO second\r\n").send(False, b"250 ok\r\n")
    return c.pkts


CAPTURES = {
    "kw-flowbits-or": flowbits_or,
    "kw-ips-depth-each-segment": depth_each_segment,
    "kw-flowbits-toggle": flowbits_toggle,
    "kw-flowbits-direction": flowbits_direction,
    "kw-flowint-ops": flowint_ops,
    "kw-pcre-modifiers": pcre_modifiers,
    "kw-pcre-http-modifiers": pcre_http_modifiers,
    "kw-pcre-http-raw-host": pcre_http_raw_host,
    "kw-trailing-modifiers": trailing_modifiers,
    "kw-content-negative-distance": content_negative_distance,
    "kw-content-offset-depth-relative": content_offset_depth_relative,
    "kw-content-backtrack": content_backtrack,
    "kw-content-hex-nocase": content_hex_nocase,
    "kw-isdataat-relative": isdataat_relative,
    "kw-byte-jump-options": byte_jump_options,
    "kw-byte-extract-uses": byte_extract_uses,
    "kw-ttl-ip-proto": ttl_ip_proto,
    "kw-fragbits-modifiers": fragbits_modifiers,
    "kw-ipopts-kinds": ipopts_kinds,
    "kw-tcp-flags-mask": tcp_flags_mask,
    "kw-tcp-mss-ranges": tcp_mss_ranges,
    "kw-dsize-tcp": dsize_tcp,
    "kw-stream-size": stream_size,
    "kw-tcp-depth-packet-and-stream": tcp_depth_packet_and_stream,
    "kw-icmp-ranges": icmp_ranges,
}
