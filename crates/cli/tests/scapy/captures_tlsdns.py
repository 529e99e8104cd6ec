"""Scapy-built captures of real-world TLS and DNS edge cases (`tlsedge-*`,
`dnsedge-*`; see captures.py).

What real clients, servers and evasion attempts put on the wire: hellos cut
by TCP or by TLS records, server names in odd forms, TLS 1.3 and SSLv2-style
hellos, resumed sessions, bogus handshakes; DNS names with odd bytes,
compression pointers (a loop among them), several questions or messages,
EDNS, long and empty names, updates. The handshakes and DNS messages are
written byte by byte here (the certificates by `cryptography`), so that
each oddity is exactly what the test names; the expected alerts in each
test.yaml are what Suricata 7.0.10 gives on the capture.
"""

import datetime
import struct

from scapy.all import IP, UDP, Raw

from captures_app import exchange, ja3_string, ja3s_string, md5, rules_of
from conn import CLIENT, SERVER

# ---------------------------------------------------------------- TLS bytes


def u8(n):
    return struct.pack("!B", n)


def u16(n):
    return struct.pack("!H", n)


def u24(n):
    return struct.pack("!I", n)[1:]


def ext(t, data):
    return u16(t) + u16(len(data)) + data


def ext_sni(*names):
    lst = b"".join(b"\x00" + u16(len(n)) + n for n in names)
    return ext(0, u16(len(lst)) + lst)


def ext_groups(*gs):
    return ext(10, u16(2 * len(gs)) + b"".join(u16(g) for g in gs))


def ext_formats(*fs):
    return ext(11, u8(len(fs)) + bytes(fs))


def ext_versions_ch(*vs):
    return ext(43, u8(2 * len(vs)) + b"".join(u16(v) for v in vs))


def ext_key_share_ch(group=29):
    ks = u16(group) + u16(32) + b"\x44" * 32
    return ext(51, u16(len(ks)) + ks)


def handshake(t, body):
    return u8(t) + u24(len(body)) + body


def record(data, ct=22, version=0x0301):
    return u8(ct) + u16(version) + u16(len(data)) + data


def client_hello_msg(exts, ciphers=(0x1301, 0xC02F), sid=b"", version=0x0303):
    body = u16(version) + b"\x22" * 32 + u8(len(sid)) + sid
    body += u16(2 * len(ciphers)) + b"".join(u16(c) for c in ciphers)
    body += b"\x01\x00"
    e = b"".join(exts)
    body += u16(len(e)) + e
    return handshake(1, body)


def server_hello_msg(exts, cipher=0xC02F, sid=b"", version=0x0303, random=b"\x33" * 32):
    body = u16(version) + random + u8(len(sid)) + sid + u16(cipher) + b"\x00"
    e = b"".join(exts)
    body += u16(len(e)) + e
    return handshake(2, body)


def certificate_msg(ders):
    lst = b"".join(u24(len(d)) + d for d in ders)
    return handshake(11, u24(len(lst)) + lst)


SERVER_HELLO_DONE = handshake(14, b"")
CCS = record(b"\x01", ct=20, version=0x0303)


def chain():
    """Two DER certificates, deterministic (Ed25519 keys from fixed bytes): a
    leaf for leaf.tlsedge.example issued by TLSEdge Intermediate CA, then
    that intermediate, issued by TLSEdge Root."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import NameOID

    k_leaf = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(2, 34)))
    k_int = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(3, 35)))
    k_root = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(4, 36)))

    def name(cn):
        return x509.Name(
            [
                x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "TLSEdge"),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )

    def make(subject, issuer, key, signer, serial):
        c = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(datetime.datetime(2024, 1, 1))
            .not_valid_after(datetime.datetime(2034, 1, 1))
            .sign(signer, None)
        )
        return c.public_bytes(serialization.Encoding.DER)

    leaf = make("leaf.tlsedge.example", "TLSEdge Intermediate CA", k_leaf, k_int, 0x1001)
    inter = make("TLSEdge Intermediate CA", "TLSEdge Root", k_int, k_root, 0x1002)
    return [leaf, inter]


def plain_hello(sni):
    return record(client_hello_msg([ext_sni(sni), ext_groups(29, 23), ext_formats(0)]))


# ---------------------------------------------------------------- TLS tests


def tlsedge_hello_tcp_split():
    # A ClientHello cut by TCP in three: inside the record header, then
    # inside the server name. The hello as a whole: SNI and JA3.
    rec = plain_hello(b"split-sni.tlsedge.example")
    cut = rec.index(b"tlsedge")
    return exchange(443, 42001, (True, rec[:3]), (True, rec[3:cut]), (True, rec[cut:]))


def tlsedge_hello_record_frag():
    # One ClientHello over two TLS records (RFC 8446 5.1: a handshake message
    # may span records), the cut inside the server name: both records in one
    # segment (42011), then each record in a segment of its own (42012).
    msg = client_hello_msg([ext_sni(b"frag-sni.tlsedge.example"), ext_groups(29, 23), ext_formats(0)])
    cut = msg.index(b"tlsedge")
    r1, r2 = record(msg[:cut]), record(msg[cut:])
    a = exchange(443, 42011, (True, r1 + r2))
    b = exchange(443, 42012, (True, r1), (True, r2))
    return a + b


def tlsedge_sni_case_dot():
    # A server name in mixed case with a trailing dot: as sent, not folded
    # nor stripped.
    return exchange(443, 42021, (True, plain_hello(b"EVIL.TlsEdge.COM.")))


def tlsedge_no_sni():
    # A ClientHello without server_name (as to an IP address): tls.sni has no
    # buffer, so even a negated content does not match; JA3 is there.
    rec = record(client_hello_msg([ext_groups(29, 23), ext_formats(0)]))
    return exchange(443, 42031, (True, rec))


def tlsedge_sni_multi():
    # A server_name extension listing two host names.
    rec = record(
        client_hello_msg([ext_sni(b"first.tlsedge.example", b"second.tlsedge.example"), ext_groups(29)])
    )
    return exchange(443, 42041, (True, rec))


TLS13_CH_JA3 = "771,4865-4866-4867,0-10-43-51-13,29-23,"
TLS13_SH_JA3S = "771,4865,43-51"


def tlsedge_tls13():
    # A TLS 1.3 handshake: the ClientHello's legacy_version 1.2, with GREASE
    # in ciphers, supported_versions and a GREASE extension; the
    # ServerHello's supported_versions selects 1.3. Then the server's
    # ChangeCipherSpec and encrypted records (application_data).
    sigalgs = ext(13, u16(4) + u16(0x0403) + u16(0x0804))
    ch = record(
        client_hello_msg(
            [
                ext(0x5A5A, b""),
                ext_sni(b"tls13.tlsedge.example"),
                ext_groups(0x6A6A, 29, 23),
                ext_versions_ch(0x7A7A, 0x0304, 0x0303),
                ext_key_share_ch(),
                sigalgs,
            ],
            ciphers=(0x8A8A, 0x1301, 0x1302, 0x1303),
            sid=b"\x55" * 32,
        )
    )
    assert ja3_string(ch) == TLS13_CH_JA3, ja3_string(ch)
    ks = u16(29) + u16(32) + b"\x66" * 32
    sh = record(
        server_hello_msg([ext(43, u16(0x0304)), ext(51, ks)], cipher=0x1301, sid=b"\x55" * 32),
        version=0x0303,
    )
    assert ja3s_string(sh) == TLS13_SH_JA3S, ja3s_string(sh)
    rules = rules_of("tlsedge-tls13")
    assert md5(TLS13_CH_JA3) in rules and md5(TLS13_SH_JA3S) in rules
    enc = record(b"\x99" * 120, ct=23, version=0x0303)
    return exchange(443, 42051, (True, ch), (False, sh + CCS + enc), (True, CCS + record(b"\x98" * 53, ct=23, version=0x0303)))


def tlsedge_sslv2_hello():
    # An SSLv2-compatible ClientHello (RFC 5246 appendix E.2: a 2-byte
    # header with its top bit set, message type 1, version 3.1, 3-byte
    # cipher specs), as old clients and scanners send.
    specs = b"\x00\x00\x2f" + b"\x00\x00\x35" + b"\x01\x00\x80"
    challenge = b"\x77" * 16
    body = b"\x01" + u16(0x0301) + u16(len(specs)) + u16(0) + u16(len(challenge)) + specs + challenge
    hello = u16(0x8000 | len(body)) + body
    return exchange(443, 42061, (True, hello))


def tlsedge_resumption():
    # An abbreviated handshake (session resumption, RFC 5246 7.3): the
    # ServerHello repeats the client's session id and is followed by
    # ChangeCipherSpec and an encrypted Finished (a handshake record of
    # ciphertext), no Certificate.
    sid = bytes(range(0x10, 0x30))
    ch = record(client_hello_msg([ext_sni(b"resume.tlsedge.example"), ext(35, b"\xab" * 48)], sid=sid))
    sh = record(server_hello_msg([ext(35, b""), ext(0xFF01, b"\x00")], sid=sid), version=0x0303)
    fin = record(b"\x16\x00\x00\x0c" + b"\xcd" * 36, version=0x0303)
    return exchange(443, 42071, (True, ch), (False, sh + CCS + fin), (True, CCS + record(b"\xce" * 40, version=0x0303)))


def tlsedge_cert_chain2():
    # The server's flight in one record: ServerHello, a Certificate of two
    # (leaf, intermediate) and ServerHelloDone. tls.certs sees each
    # certificate; the subject and issuer are the leaf's.
    flight = server_hello_msg([ext(0xFF01, b"\x00")]) + certificate_msg(chain()) + SERVER_HELLO_DONE
    return exchange(
        443,
        42081,
        (True, plain_hello(b"leaf.tlsedge.example")),
        (False, record(flight, version=0x0303)),
    )


def tlsedge_cert_separate_records():
    # The server's flight as one record per message (what OpenSSL sends),
    # all in one segment; then a second connection with the Certificate
    # record cut over two segments.
    ders = chain()
    flight = (
        record(server_hello_msg([ext(0xFF01, b"\x00")]), version=0x0303)
        + record(certificate_msg(ders), version=0x0303)
        + record(SERVER_HELLO_DONE, version=0x0303)
    )
    a = exchange(8443, 42091, (True, plain_hello(b"leaf.tlsedge.example")), (False, flight))
    cut = flight.index(b"TLSEdge") + 3
    b = exchange(8443, 42092, (True, plain_hello(b"leaf.tlsedge.example")), (False, flight[:cut]), (False, flight[cut:]))
    return a + b


def tlsedge_bogus_443():
    # Bytes on 443 that start like a handshake record (0x16 0x03 0x01) but
    # are not TLS: a ClientHello whose length runs past its record, then
    # text. Then a real hello on another connection.
    bogus = b"\x16\x03\x01\x00\x30\x01\xff\xff\xff" + b"BOGUS-TLS-MARKER" + b"\x00" * 27 + b"GET / HTTP/1.0\r\n\r\n"
    a = exchange(443, 42101, (True, bogus), (False, b"HTTP/1.0 400 Bad Request\r\n\r\n"))
    b = exchange(443, 42102, (True, plain_hello(b"after-bogus.tlsedge.example")))
    return a + b


def tlsedge_two_hellos_one_segment():
    # The client's ClientHello and, in the same segment, a second handshake
    # record (a second ClientHello with another name): Suricata keeps the
    # first server name (a second SNI is a "multiple SNI extensions" event).
    first = plain_hello(b"one.tlsedge.example")
    second = plain_hello(b"two.tlsedge.example")
    return exchange(443, 42111, (True, first + second))


HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


def tlsedge_hello_retry():
    # A TLS 1.3 HelloRetryRequest (RFC 8446 4.1.4: a ServerHello with the
    # special random), then the client's second ClientHello on the same
    # connection: with the same name (42121), then with another (42122).
    def ch(name):
        return record(
            client_hello_msg(
                [ext_sni(name), ext_groups(29, 23), ext_versions_ch(0x0304), ext_key_share_ch()],
                ciphers=(0x1301,),
                sid=b"\x55" * 32,
            )
        )

    hrr = record(
        server_hello_msg([ext(43, u16(0x0304)), ext(51, u16(23))], cipher=0x1301, sid=b"\x55" * 32, random=HRR_RANDOM),
        version=0x0303,
    )
    a = exchange(443, 42121, (True, ch(b"hrr.tlsedge.example")), (False, hrr), (True, ch(b"hrr.tlsedge.example")))
    b = exchange(443, 42122, (True, ch(b"hrr-one.tlsedge.example")), (False, hrr), (True, ch(b"hrr-two.tlsedge.example")))
    return a + b


# ---------------------------------------------------------------- DNS bytes


def qname(name):
    """Wire form of a dotted name (bytes or str), labels as given."""
    if isinstance(name, str):
        name = name.encode()
    if name in (b"", b"."):
        return b"\x00"
    return b"".join(u8(len(l)) + l for l in name.rstrip(b".").split(b".")) + b"\x00"


def labels(*ls):
    return b"".join(u8(len(l)) + l for l in ls) + b"\x00"


def dns_msg(id_, flags, qd=(), an=(), ns=(), ar=(), counts=None):
    """A DNS message from raw question and record bytes."""
    c = counts or (len(qd), len(an), len(ns), len(ar))
    return struct.pack("!6H", id_, flags, *c) + b"".join(qd) + b"".join(an) + b"".join(ns) + b"".join(ar)


def question(name_wire, qtype=1, qclass=1):
    return name_wire + struct.pack("!HH", qtype, qclass)


def rr(name_wire, rtype, rdata, ttl=60, rclass=1):
    return name_wire + struct.pack("!HHIH", rtype, rclass, ttl, len(rdata)) + rdata


QUERY = 0x0100  # RD


def udp_q(sport, payload, dport=53):
    return IP(src=CLIENT, dst=SERVER) / UDP(sport=sport, dport=dport) / Raw(payload)


def udp_r(sport, payload, dport=53):
    return IP(src=SERVER, dst=CLIENT) / UDP(sport=dport, dport=sport) / Raw(payload)


def dns_tcp(raw):
    return u16(len(raw)) + raw


# ---------------------------------------------------------------- DNS tests


def dnsedge_multi_question():
    # One query with two questions (QDCOUNT 2): dns.query is each name.
    q = dns_msg(
        0x2001,
        QUERY,
        qd=[question(qname("a.first-q.example")), question(qname("b.second-q.example"), qtype=28)],
    )
    return [udp_q(43001, q)]


def dnsedge_case():
    # A name in mixed case (0x20 randomisation, as resolvers send): kept as
    # sent.
    q = dns_msg(0x2002, QUERY, qd=[question(qname("WwW.EviL-Case.ExAmple"))])
    return [udp_q(43011, q)]


def dnsedge_binary_label():
    # Labels with a NUL, a 0xff, a space and a dot inside (RFC 2181 11: any
    # byte is allowed in a label): the name is label bytes joined by dots.
    name = labels(b"x\x00y", b"a.b", b"sp ace\xff", b"bin-label", b"example")
    q = dns_msg(0x2003, QUERY, qd=[question(name)])
    return [udp_q(43021, q)]


def dnsedge_query_pointer():
    # A query whose second question's name ends with a compression pointer
    # to the first's suffix (mail + -> ptr-test.example); the response
    # compresses its answers' owner names the same way.
    first = qname("www.ptr-test.example")
    second = b"\x04mail\xc0\x10"  # 12 + 4 ("\x03www"): "ptr-test.example"
    q = dns_msg(0x2004, QUERY, qd=[question(first), question(second)])
    an = [rr(b"\xc0\x0c", 1, bytes([10, 0, 0, 1])), rr(b"\xc0\x26", 1, bytes([10, 0, 0, 2]))]
    # second question starts at 12 + len(first) + 4 = 12 + 22 + 4 = 38 (0x26)
    r = dns_msg(0x2004, 0x8180, qd=[question(first), question(second)], an=an)
    assert q[0x10:0x19] == b"\x08ptr-test", q[0x10:0x19]
    return [udp_q(43031, q), udp_r(43031, r)]


def dnsedge_pointer_loop():
    # Malformed: a question name whose pointer leads back to its own start,
    # then one whose two pointers point at each other. Then a sound query.
    # Suricata 7 does not reject them: after 255 labels it keeps the name
    # truncated ("loop.loop...", and an empty name for the second), and the
    # message parses.
    loop1 = dns_msg(0x2005, QUERY, qd=[question(b"\x04loop\xc0\x0c")])  # -> itself
    loop2 = dns_msg(0x2006, QUERY, qd=[question(b"\xc0\x0e\xc0\x0c")])  # 12 -> 14 -> 12
    good = dns_msg(0x2007, QUERY, qd=[question(qname("after-loop.example"))])
    return [udp_q(43041, loop1), udp_q(43042, loop2), udp_q(43043, good)]


def dnsedge_forward_pointer():
    # A name that is a pointer forward, into the additional record's owner
    # name (RFC 1035 4.1.4 speaks of "a prior occurance", but Suricata, as
    # most parsers, follows any offset in the message).
    # header 12, question: pointer (2) + type/class (4) = 18; the record's
    # name at 18.
    qd = question(b"\xc0\x12")
    ar = rr(qname("fwd-ptr.example"), 16, b"\x02hi")
    q = dns_msg(0x2008, QUERY, qd=[qd], ar=[ar])
    return [udp_q(43051, q)]


def dnsedge_trailing_bytes():
    # A query followed by bytes its counts do not cover (padding some
    # stacks and evasion tools add): Suricata ignores them. Then a query
    # whose question is cut short (QDCOUNT 2, one question present): not
    # parsed.
    pad = dns_msg(0x2009, QUERY, qd=[question(qname("padded.example"))]) + b"\x00" * 8
    cut = dns_msg(0x200A, QUERY, qd=[question(qname("cut-short.example"))], counts=(2, 0, 0, 0))
    return [udp_q(43061, pad), udp_q(43062, cut)]


def dnsedge_tcp_two_msgs():
    # DNS over TCP: two queries, each with its length prefix, in one
    # segment (pipelined, RFC 7766 6.2.1.1), then a third alone.
    q1 = dns_msg(0x2101, QUERY, qd=[question(qname("first.pipe.example"))])
    q2 = dns_msg(0x2102, QUERY, qd=[question(qname("second.pipe.example"))])
    q3 = dns_msg(0x2103, QUERY, qd=[question(qname("third.pipe.example"))])
    return exchange(53, 43071, (True, dns_tcp(q1) + dns_tcp(q2)), (True, dns_tcp(q3)))


def dnsedge_response_only():
    # A response whose query the sensor never saw, server to server (53 to
    # 53). (To an ephemeral port, Suricata's default detection-ports, dp 53
    # only, leave such a flow undetected: a matter of configuration.)
    r = dns_msg(
        0x2201,
        0x8180,
        qd=[question(qname("orphan.example"))],
        an=[rr(b"\xc0\x0c", 1, bytes([10, 0, 0, 3]))],
    )
    return [udp_r(53, r)]


def dnsedge_edns():
    # A query with an EDNS(0) OPT record (RFC 6891): DO bit, a client subnet
    # option, and the AD flag (what dig sends); then the same with a
    # COOKIE option.
    ecs = u16(8) + u16(7) + u16(1) + b"\x18\x00" + b"\x0a\x01\x00"
    opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0x00008000, len(ecs)) + ecs
    q = dns_msg(0x2301, 0x0120, qd=[question(qname("edns.example"))], ar=[opt])
    cookie = u16(10) + u16(8) + b"\x01\x02\x03\x04\x05\x06\x07\x08"
    opt2 = b"\x00" + struct.pack("!HHIH", 41, 4096, 0, len(cookie)) + cookie
    q2 = dns_msg(0x2302, 0x0120, qd=[question(qname("cookie.example"), qtype=28)], ar=[opt2])
    return [udp_q(43091, q), udp_q(43092, q2)]


def dnsedge_long_name():
    # The longest name (253 characters: labels of 63, 63, 63, 57, 3 bytes), and
    # a label of 63 bytes at the start of another name.
    l1, l2, l3, l4 = b"a" * 62 + b"1", b"b" * 62 + b"2", b"c" * 62 + b"3", b"d" * 57 + b".xyz"
    name = b".".join([l1, l2, l3, l4])
    assert len(name) == 253 and len(qname(name)) == 255
    q = dns_msg(0x2401, QUERY, qd=[question(qname(name))])
    q2 = dns_msg(0x2402, QUERY, qd=[question(qname(b"e" * 63 + b".long-label.example"))])
    return [udp_q(43101, q), udp_q(43102, q2)]


def dnsedge_root_name():
    # `dig . NS`: a question for the root, an empty name.
    q = dns_msg(0x2501, QUERY, qd=[question(b"\x00", qtype=2)])
    q2 = dns_msg(0x2502, QUERY, qd=[question(qname("not-root.example"), qtype=2)])
    return [udp_q(43111, q), udp_q(43112, q2)]


def dnsedge_root_then_name():
    # A query whose first question is the root and whose second is a name,
    # then one with the name first: Suricata 7's dns.query stops at the
    # first empty name, the names after it are not inspected.
    q = dns_msg(0x2503, QUERY, qd=[question(b"\x00", qtype=2), question(qname("after-root.example"))])
    q2 = dns_msg(0x2504, QUERY, qd=[question(qname("before-root.example")), question(b"\x00", qtype=2)])
    return [udp_q(43113, q), udp_q(43114, q2)]


def dnsedge_dotprefix_endswith():
    # dns-keywords / transforms.html dotprefix example: `dotprefix;
    # content:".example.com"; endswith;` matches example.com and its
    # subdomains, not a name that merely ends the same way.
    names = ["www.suffix-example.com", "suffix-example.com", "badsuffix-example.com", "suffix-example.com.evil.net"]
    return [udp_q(43121 + i, dns_msg(0x2601 + i, QUERY, qd=[question(qname(n))])) for i, n in enumerate(names)]


def dnsedge_update():
    # A dynamic update (RFC 2136, opcode 5): zone section of one SOA
    # "question", no prerequisites, an update section adding an A record.
    zone = question(qname("update-zone.example"), qtype=6)
    add = rr(qname("host.update-zone.example"), 1, bytes([10, 0, 0, 9]), ttl=300)
    u = dns_msg(0x2701, 5 << 11, qd=[zone], ns=[add])
    q = dns_msg(0x2702, QUERY, qd=[question(qname("plain.update-zone.example"))])
    return [udp_q(43131, u), udp_q(43132, q)]


def dnsedge_odd_flags():
    # Queries with header fields real resolvers never set: the reserved Z
    # bit, a non-zero response code in a query, and 17 questions. Suricata
    # parses each.
    z = dns_msg(0x2801, QUERY | 0x0040, qd=[question(qname("zbit.odd-flags.example"))])
    rc = dns_msg(0x2802, QUERY | 0x0005, qd=[question(qname("rcode.odd-flags.example"))])
    many = dns_msg(
        0x2803,
        QUERY,
        qd=[question(qname("q%d.many.odd-flags.example" % i)) for i in range(17)],
    )
    return [udp_q(43141, z), udp_q(43142, rc), udp_q(43143, many)]


CAPTURES = {
    "tlsedge-hello-tcp-split": tlsedge_hello_tcp_split,
    "tlsedge-hello-record-frag": tlsedge_hello_record_frag,
    "tlsedge-sni-case-dot": tlsedge_sni_case_dot,
    "tlsedge-no-sni": tlsedge_no_sni,
    "tlsedge-sni-multi": tlsedge_sni_multi,
    "tlsedge-tls13": tlsedge_tls13,
    "tlsedge-sslv2-hello": tlsedge_sslv2_hello,
    "tlsedge-resumption": tlsedge_resumption,
    "tlsedge-cert-chain2": tlsedge_cert_chain2,
    "tlsedge-cert-separate-records": tlsedge_cert_separate_records,
    "tlsedge-bogus-443": tlsedge_bogus_443,
    "tlsedge-two-hellos-one-segment": tlsedge_two_hellos_one_segment,
    "tlsedge-hello-retry": tlsedge_hello_retry,
    "dnsedge-multi-question": dnsedge_multi_question,
    "dnsedge-case": dnsedge_case,
    "dnsedge-binary-label": dnsedge_binary_label,
    "dnsedge-query-pointer": dnsedge_query_pointer,
    "dnsedge-pointer-loop": dnsedge_pointer_loop,
    "dnsedge-forward-pointer": dnsedge_forward_pointer,
    "dnsedge-trailing-bytes": dnsedge_trailing_bytes,
    "dnsedge-tcp-two-msgs": dnsedge_tcp_two_msgs,
    "dnsedge-response-only": dnsedge_response_only,
    "dnsedge-edns": dnsedge_edns,
    "dnsedge-long-name": dnsedge_long_name,
    "dnsedge-root-name": dnsedge_root_name,
    "dnsedge-root-then-name": dnsedge_root_then_name,
    "dnsedge-dotprefix-endswith": dnsedge_dotprefix_endswith,
    "dnsedge-update": dnsedge_update,
    "dnsedge-odd-flags": dnsedge_odd_flags,
}
