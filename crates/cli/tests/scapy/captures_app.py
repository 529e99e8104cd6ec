"""Scapy-built captures of the application-protocol tests (`app-*`; see captures.py).

Each builder follows an example of Suricata's documentation (docs.suricata.io,
"Suricata Rules" chapter) for the keyword or protocol behaviour its test
names; the expected alerts in the test's test.yaml are Suricata's.
"""

import datetime
import gzip
import hashlib
import os
import struct

from scapy.all import DNS, DNSQR, DNSRR, IP, UDP, load_layer

load_layer("tls")
from scapy.layers.tls.extensions import (  # noqa: E402
    ServerName,
    TLS_Ext_RenegotiationInfo,
    TLS_Ext_ServerName,
    TLS_Ext_SupportedGroups,
    TLS_Ext_SupportedPointFormat,
    TLS_Ext_Unknown,
)
from scapy.layers.tls.handshake import (  # noqa: E402
    TLSCertificate,
    TLSClientHello,
    TLSServerHello,
)
from scapy.layers.tls.record import TLS  # noqa: E402

from conn import CLIENT, SERVER, Conn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- helpers


def exchange(dport, sport, *msgs):
    """A connection to `dport` from `sport`: each of `msgs` is (to_server, bytes)."""
    c = Conn(dport, sport=sport)
    for to_server, data in msgs:
        c.send(to_server, data)
    return c.pkts


def http_get(path, host, extra=b""):
    return b"GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (path, host, extra)


def ok(body=b"", extra=b""):
    return b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (extra, len(body), body)


def client_hello(sni, ciphers=(0x1301, 0xC02F), ext_more=(), record_version=0x0301):
    """A TLS 1.2 ClientHello record (legacy_version 0x0303), built by Scapy."""
    ext = []
    if sni is not None:
        ext.append(TLS_Ext_ServerName(servernames=[ServerName(servername=sni)]))
    ext += list(ext_more)
    hello = TLSClientHello(
        version=0x0303,
        gmt_unix_time=0,
        random_bytes=b"\x22" * 28,
        sid=b"",
        ciphers=list(ciphers),
        comp=[0],
        ext=ext,
    )
    return bytes(TLS(version=record_version, msg=[hello]))


def server_hello(cipher=0xC02F, ext=None, certs=()):
    """A ServerHello (TLS 1.2), then a Certificate message of `certs` (DER) if
    any, in one handshake record."""
    if ext is None:
        ext = [TLS_Ext_RenegotiationInfo(), TLS_Ext_SupportedPointFormat(ecpl=[0])]
    msgs = [
        TLSServerHello(
            version=0x0303,
            gmt_unix_time=0,
            random_bytes=b"\x33" * 28,
            sid=b"",
            cipher=cipher,
            comp=[0],
            ext=ext,
        )
    ]
    if certs:
        msgs.append(TLSCertificate(certs=[(len(d), d) for d in certs]))
    return bytes(TLS(version=0x0303, msg=msgs))


def hello_fields(record):
    """Parses a handshake record holding a Client- or ServerHello, on its own
    (not with Scapy): (type, version, ciphers, extensions as (type, data))."""
    assert record[0] == 22
    body = record[5:]
    mtype, mlen = body[0], int.from_bytes(body[1:4], "big")
    h = body[4 : 4 + mlen]
    version = int.from_bytes(h[0:2], "big")
    i = 2 + 32
    sid_len = h[i]
    i += 1 + sid_len
    if mtype == 1:
        n = int.from_bytes(h[i : i + 2], "big")
        ciphers = [int.from_bytes(h[i + 2 + k : i + 4 + k], "big") for k in range(0, n, 2)]
        i += 2 + n
        i += 1 + h[i]  # compression methods
    else:
        ciphers = [int.from_bytes(h[i : i + 2], "big")]
        i += 2 + 1  # cipher, compression method
    exts = []
    end = i + 2 + int.from_bytes(h[i : i + 2], "big")
    i += 2
    while i < end:
        t, n = int.from_bytes(h[i : i + 2], "big"), int.from_bytes(h[i + 2 : i + 4], "big")
        exts.append((t, h[i + 4 : i + 4 + n]))
        i += 4 + n
    assert i == end == len(h), "hello not parsed whole"
    return mtype, version, ciphers, exts


def grease(v):
    # RFC 8701: 0x0a0a, 0x1a1a, ..., 0xfafa.
    return (v & 0x0F0F) == 0x0A0A and (v >> 8) == (v & 0xFF)


def ja3_string(record):
    """JA3 (github.com/salesforce/ja3): SSLVersion,Ciphers,Extensions,
    EllipticCurves,EllipticCurvePointFormats, decimal, '-'-joined, GREASE
    values left out."""
    mtype, version, ciphers, exts = hello_fields(record)
    assert mtype == 1
    curves, formats = [], []
    for t, d in exts:
        if t == 10:
            n = int.from_bytes(d[0:2], "big")
            curves = [int.from_bytes(d[2 + k : 4 + k], "big") for k in range(0, n, 2)]
        elif t == 11:
            formats = list(d[1 : 1 + d[0]])
    j = lambda vs: "-".join(str(v) for v in vs if not grease(v))  # noqa: E731
    return ",".join(
        [str(version), j(ciphers), j(t for t, _ in exts), j(curves), j(formats)]
    )


def ja3s_string(record):
    """JA3S: SSLVersion,Cipher,Extensions of a ServerHello."""
    mtype, version, ciphers, exts = hello_fields(record)
    assert mtype == 2
    return "%d,%d,%s" % (version, ciphers[0], "-".join(str(t) for t, _ in exts))


def md5(s):
    return hashlib.md5(s.encode()).hexdigest()


def rules_of(test):
    with open(os.path.join(HERE, test, "test.rules")) as f:
        return f.read()


def certificate(sans=()):
    """A DER X.509 certificate with fixed names and serial, made with the
    `cryptography` module (Ed25519 keys from fixed bytes: signatures are
    deterministic, so the capture is the same on every run); `sans`, its
    subject alternative names (DNS names, or IP addresses as ipaddress
    objects)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import NameOID

    key = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    ca = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))

    def name(o, cn):
        return x509.Name(
            [
                x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, o),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )

    cert = (
        x509.CertificateBuilder()
        .subject_name(name("Sluice Test", "evil-cert.example"))
        .issuer_name(name("Sluice Test CA", "Sluice Test Root"))
        .public_key(key.public_key())
        .serial_number(0x5C19B7B1323B1CA1)
        .not_valid_before(datetime.datetime(2024, 1, 1))
        .not_valid_after(datetime.datetime(2034, 1, 1))
    )
    if sans:
        names = [x509.IPAddress(n) if not isinstance(n, str) else x509.DNSName(n) for n in sans]
        cert = cert.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = cert.sign(ca, None)
    return cert.public_bytes(serialization.Encoding.DER)


def dns_tcp(msg):
    """A DNS message over TCP: its two-byte length first (RFC 1035 4.2.2)."""
    raw = bytes(msg)
    return struct.pack("!H", len(raw)) + raw


# ---------------------------------------------------------------- HTTP


def http_nonstd_port():
    # differences-from-snort.html "Automatic Protocol Detection" (port agnostic);
    # http-keywords.html http.uri example.
    req = http_get(b"/evil.php?cmd=id", b"www.example.com", b"User-Agent: curl/8.0\r\n")
    return exchange(8081, 41001, (True, req), (False, ok(b"hi")))


def http_not_http_port80():
    # differences-from-snort.html: http buffers only when the traffic is
    # detected as HTTP; these bytes on port 80 start with no HTTP method.
    junk = b"XYZW /evil.php?cmd=id JUNK/1.1\r\n\r\n"
    return exchange(80, 41002, (True, junk), (False, b"ZZZZ 42\r\n"))


def http_header():
    # http-keywords.html http.header "HTTP Header Example 1/2/3" (sids 70-72).
    req = (
        b"GET /index.html HTTP/1.1\r\nUser-Agent: Mozilla/5.0\r\n"
        b"Host: suricata.io\r\nAccept: */*\r\n\r\n"
    )
    return exchange(80, 41003, (True, req), (False, ok(b"ok")))


def http_header_names():
    # http-keywords.html http.header_names examples (sids 110, 112, 113, 114, 115).
    req = b"GET / HTTP/1.1\r\nHost: suricata.io\r\nConnection: Keep-Alive\r\n\r\n"
    resp = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nServer: nginx/0.8.54\r\n"
        b"Content-Length: 2\r\n\r\nok"
    )
    return exchange(80, 41006, (True, req), (False, resp))


def http_request_line_protocol():
    # http-keywords.html http.request_line example (sid 60) and http.protocol
    # example (flow:to_server; http.protocol; content:"HTTP/1.0").
    a = exchange(
        80,
        41007,
        (True, b"GET /index.html HTTP/1.1\r\nUser-Agent: Mozilla/5.0\r\nHost: suricata.io\r\n\r\n"),
        (False, ok(b"ok")),
    )
    b = exchange(
        80,
        41008,
        (True, b"GET / HTTP/1.0\r\n\r\n"),
        (False, b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    )
    return a + b


def http_uri_normalisation():
    # http-keywords.html http.uri / http.uri.raw examples (//index.html, sids 3
    # and 4) and the %20 example of the older http.uri section.
    a = exchange(80, 41009, (True, http_get(b"//index.html", b"suricata.io")), (False, ok()))
    b = exchange(80, 41010, (True, http_get(b"/my%20file.php", b"suricata.io")), (False, ok()))
    return a + b


def http_request_headers():
    # http-keywords.html examples of http.accept (91), accept_enc (92),
    # accept_lang (93), connection (94), content_type (95), content_len (97, 99),
    # referer (200), host (123) and host.raw (124).
    body = b"a=" + b"x" * 98
    req = (
        b"POST /suricata.php HTTP/1.1\r\n"
        b"Content-Type: multipart/form-data; boundary=---------------123\r\n"
        b"Host: SuRiCaTa.Io:8445\r\nContent-Length: 100\r\nConnection: Keep-Alive\r\n"
        b"Accept: */*\r\nAccept-Encoding: gzip, deflate\r\nAccept-Language: en-US\r\n"
        b"Referer: http://suricata.io\r\nUser-Agent: Mozilla/5.0\r\n\r\n" + body
    )
    return exchange(8445, 41011, (True, req), (False, ok()))


def http_response_headers():
    # http-keywords.html response examples: http.server (121), content_type
    # (96), content_len (98), response_line (119), stat_msg (118), location (122).
    body = b"Server response body"
    resp = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nServer: nginx/0.8.54\r\n"
        b"Connection: Close\r\nLocation: suricata.io\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    return exchange(80, 41012, (True, http_get(b"/", b"suricata.io")), (False, resp))


def http_start():
    # http-keywords.html http.start: "the request/response line plus the
    # request/response headers", "normalized headers ... terminated by an
    # extra \r\n" (its request example: GET / with Host and Connection).
    req = b"GET / HTTP/1.1\r\nHost: suricata.io\r\nConnection: Keep-Alive\r\n\r\n"
    return exchange(80, 41013, (True, req), (False, ok()))


def http_request_body_split():
    # http-keywords.html http.request_body example (sid 115), the body cut
    # across two segments.
    body = b"Suricata request body"
    head = (
        b"POST /suricata.php HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Host: suricata.io\r\nContent-Length: %d\r\nConnection: Keep-Alive\r\n\r\n" % len(body)
    )
    return exchange(80, 41016, (True, head + body[:12]), (True, body[12:]), (False, ok()))


def http_response_body():
    # http-keywords.html http.response_body example (sid 120), the body cut
    # across two segments.
    body = b"Server response body"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nServer: nginx/0.8.54\r\nContent-Length: %d\r\n\r\n" % len(body)
    return exchange(
        80, 41017, (True, http_get(b"/", b"suricata.io")), (False, head + body[:9]), (False, body[9:])
    )


def http_snort_modifiers():
    # http-keywords.html: 'content modifiers look back in the rule, e.g.
    # content:"index.php"; http_uri;' and the legacy-modifier table;
    # uricontent example.
    body = b"password=hunter2"
    req = (
        b"POST /login.php?user=admin HTTP/1.1\r\nHost: victim.example\r\n"
        b"User-Agent: EvilBot/1.0\r\nCookie: session=deadbeef\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    resp = b"HTTP/1.1 403 Forbidden\r\nSet-Cookie: track=1\r\nContent-Length: 9\r\n\r\nforbidden"
    return exchange(80, 41018, (True, req), (False, resp))


def http_chunked_split():
    # http-keywords.html file.data example (sid 128): the body of a chunked
    # response, the signature cut across chunks and segments.
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
    c1 = b"8\r\n<html>MA\r\n"
    c2 = b"9\r\nLWARE-BOD\r\n"
    c3 = b"7\r\nY</html\r\n0\r\n\r\n"
    return exchange(
        80,
        41019,
        (True, http_get(b"/", b"suricata.io")),
        (False, head + c1),
        (False, c2),
        (False, c3),
    )


def http_pipelined():
    # http-keywords.html http.uri example; HTTP keywords inspect each
    # transaction: two pipelined requests in one segment raise one alert each.
    reqs = http_get(b"/evil1", b"suricata.io") + http_get(b"/evil2", b"suricata.io")
    resps = ok(b"one") + ok(b"two")
    return exchange(80, 41021, (True, reqs), (False, resps))


def http_eve_meta():
    # http-keywords.html http.uri / http.stat_code examples; EVE alert with its
    # http object (output-json-alert: hostname, url, http_user_agent,
    # http_method, protocol, status).
    req = http_get(b"/download.php?id=7", b"Files.Example.COM", b"User-Agent: curl/8.0\r\n")
    resp = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    return exchange(80, 41022, (True, req), (False, resp))


# ---------------------------------------------------------------- TLS


def tls_sni_port():
    # tls-keywords.html tls.sni examples (content; nocase; isdataat:!1,relative
    # and the pcre form), on a port that is not 443.
    a = exchange(4433, 41030, (True, client_hello(b"evil-tls.example")))
    b = exchange(4433, 41031, (True, client_hello(b"evil-tls.example.net")))
    return a + b


def tls_cert():
    # tls-keywords.html tls.cert_subject / tls.cert_issuer examples
    # (isdataat:!1,relative; nocase) and tls.cert_serial example
    # (5C:19:B7:B1:32:3B:1C:A1).
    return exchange(
        4434,
        41032,
        (True, client_hello(b"evil-cert.example")),
        (False, server_hello(certs=[certificate()])),
    )


def tls_version():
    # tls-keywords.html tls.version example (tls.version:1.2): the
    # ClientHello's version on the client's side (its record says 1.0), the
    # ServerHello's on the server's.
    return exchange(
        4436,
        41034,
        (True, client_hello(b"version.example", record_version=0x0301)),
        (False, server_hello()),
    )


def ja3_hello():
    return client_hello(
        b"ja3.example",
        ciphers=(0x0A0A, 0x1301, 0xC02B, 0xC02F),
        ext_more=(
            TLS_Ext_SupportedGroups(groups=[0x3A3A, 29, 23]),
            TLS_Ext_SupportedPointFormat(ecpl=[0]),
            TLS_Ext_Unknown(type=0x2A2A, val=b""),
        ),
    )


JA3_STRING = "771,4865-49195-49199,0-10-11,29-23,0"
JA3S_STRING = "771,49199,65281-11"


def tls_ja3():
    # ja-keywords.html ja3.hash and ja3.string examples; the hash computed
    # here from the hello built (GREASE cipher, curve and extension left out).
    hello = ja3_hello()
    s = ja3_string(hello)
    assert s == JA3_STRING, s
    rules = rules_of("app-tls-ja3")
    assert md5(s) in rules and s in rules, "test.rules lacks %s / %s" % (s, md5(s))
    with_grease = s.replace("4865-", "2570-4865-")
    assert md5(with_grease) in rules
    a = exchange(4437, 41035, (True, hello))
    b = exchange(4437, 41036, (True, client_hello(b"ja3.example")))
    return a + b


def tls_ja3s():
    # ja-keywords.html ja3s.hash / ja3s.string examples; the hash computed here
    # from the ServerHello built.
    sh = server_hello()
    s = ja3s_string(sh)
    assert s == JA3S_STRING, s
    rules = rules_of("app-tls-ja3s")
    assert md5(s) in rules and s in rules, "test.rules lacks %s / %s" % (s, md5(s))
    other = server_hello(cipher=0xC030)
    assert md5(ja3s_string(other)) in rules
    a = exchange(4438, 41037, (True, client_hello(b"ja3s.example")), (False, sh))
    b = exchange(4438, 41038, (True, client_hello(b"ja3s.example")), (False, other))
    return a + b


# ---------------------------------------------------------------- DNS


def dns_tcp_split():
    # dns-keywords.html dns.query example (content:"google"; nocase) over TCP,
    # the query cut inside its name; the response with the same question
    # ("dns.query will only match on DNS request messages").
    q = dns_tcp(DNS(id=0x1111, rd=1, qd=DNSQR(qname="www.google.com", qtype="A")))
    r = dns_tcp(
        DNS(
            id=0x1111,
            qr=1,
            rd=1,
            ra=1,
            qd=DNSQR(qname="www.google.com", qtype="A"),
            an=DNSRR(rrname="www.google.com", type="A", ttl=60, rdata="192.0.2.7"),
        )
    )
    return exchange(53, 41040, (True, q[:20]), (True, q[20:]), (False, r))


def dns_eve():
    # dns-keywords.html dns.query example; Suricata 8's EVE DNS object (v3)
    # in the alert.
    q = lambda name, sport, i: (  # noqa: E731
        IP(src=CLIENT, dst=SERVER)
        / UDP(sport=sport, dport=53)
        / DNS(id=i, rd=1, qd=DNSQR(qname=name, qtype="A"))
    )
    return [q("eve.bad.example", 41041, 0x1234), q("eve.good.example", 41042, 0x1235)]


# ---------------------------------------------------------------- SMTP, FTP, SSH


def smtp_detect():
    # differences-from-snort.html "Automatic Protocol Detection" (smtp; port
    # agnostic): an SMTP session on 2525 fires the smtp rule; the same bytes
    # in an HTTP request body on 2525 (an http flow) do not.
    a = exchange(
        2525,
        41050,
        (False, b"220 mail.example.org ESMTP\r\n"),
        (True, b"EHLO client.example\r\n"),
        (False, b"250 mail.example.org\r\n"),
        (True, b"MAIL FROM:<evil@bad.example>\r\n"),
        (False, b"250 OK\r\n"),
    )
    body = b"EHLO client.example\r\nMAIL FROM:<evil@bad.example>\r\n"
    req = b"POST /mail HTTP/1.1\r\nHost: a.example\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    b = exchange(2525, 41051, (True, req), (False, ok()))
    return a + b


def ftp_detect():
    # differences-from-snort.html "Automatic Protocol Detection" (ftp): an FTP
    # session on 2121; the same command on an SMTP session does not fire the
    # ftp rule.
    a = exchange(
        2121,
        41052,
        (False, b"220 (vsFTPd 3.0.3)\r\n"),
        (True, b"USER anonymous\r\n"),
        (False, b"331 Please specify the password.\r\n"),
        (True, b"PASS guest\r\n"),
        (False, b"230 Login successful.\r\n"),
        (True, b"RETR /etc/passwd\r\n"),
    )
    b = exchange(
        2121,
        41053,
        (False, b"220 mail.example.org ESMTP\r\n"),
        (True, b"HELO client.example\r\n"),
        (False, b"250 mail.example.org\r\n"),
        (True, b"RETR /etc/passwd\r\n"),
    )
    return a + b


def ftp_line_too_long():
    # Suricata's ftp-events.rules: command and reply lines of 4,096 bytes or
    # more with their line end (LF or CRLF), in one segment or many, once
    # per line; a line that never ends; two long commands. Near misses:
    # 4,095 bytes with the line end.
    def line(verb, n, end=b"\r\n"):
        return verb + b"a" * (n - len(verb)) + end

    def cut(b, to_server=True, size=1000):
        return [(to_server, b[i : i + size]) for i in range(0, len(b), size)]

    banner = (False, b"220 (vsFTPd 3.0.3)\r\n")
    ok = (False, b"331 Please specify the password.\r\n")
    cases = [
        [banner, *cut(line(b"USER ", 4094)), ok],
        [banner, *cut(line(b"USER ", 4093)), ok],
        [banner, *cut(line(b"USER ", 4095, b"\n")), ok],
        [banner, *cut(line(b"USER ", 4094, b"\n")), ok],
        [banner, (True, line(b"USER ", 4095)), ok],
        [banner, *cut(line(b"USER ", 20000)), ok],
        [banner, *cut(line(b"USER ", 5000)), ok, *cut(line(b"PASS ", 5000)), (False, b"230 Login successful.\r\n")],
        [banner, (True, b"USER anonymous\r\n"), *cut(line(b"331 ", 4094), False), (True, b"PASS x\r\n")],
        [banner, (True, b"USER anonymous\r\n"), *cut(line(b"331 ", 4093), False), (True, b"PASS x\r\n")],
        [banner, *cut(line(b"USER ", 6000, b""))],
    ]
    return [p for i, c in enumerate(cases) for p in exchange(21, 41300 + i, *c)]


def ssh_detect():
    # differences-from-snort.html "Automatic Protocol Detection" (ssh): the
    # identification strings on 2222; the same string in an HTTP request on
    # 2222 does not fire the ssh rule.
    a = exchange(
        2222,
        41054,
        (False, b"SSH-2.0-OpenSSH_8.9p1\r\n"),
        (True, b"SSH-2.0-libssh_0.9.6\r\n"),
    )
    req = http_get(b"/", b"a.example", b"User-Agent: SSH-2.0-libssh_0.9.6\r\n")
    b = exchange(2222, 41055, (True, req), (False, ok()))
    return a + b


def http_header_cookie():
    # http-keywords.html http.cookie note: Suricata "will not match cookie
    # content put in the http.header sticky buffer"; http.cookie example
    # request (Cookie: PHPSESSION=123).
    req = (
        b"GET /index.html HTTP/1.1\r\nUser-Agent: Mozilla/5.0\r\n"
        b"Cookie: PHPSESSION=123\r\nHost: suricata.io\r\n\r\n"
    )
    resp = ok(b"ok", extra=b"Set-Cookie: track=1\r\n")
    return exchange(80, 41004, (True, req), (False, resp))


def http_header_end():
    # http-keywords.html http.header "Example 1" request; the buffer's end
    # matched with a negated relative isdataat (as the http.user_agent notes
    # advise); Suricata's buffer has no extra CRLF after the last header
    # (src/detect-http-header.c, the "#if 0" around the final \r\n).
    req = b"GET /index.html HTTP/1.1\r\nUser-Agent: Mozilla/5.0\r\nHost: suricata.io\r\n\r\n"
    return exchange(80, 41005, (True, req), (False, ok(b"ok")))


def http_start_normalised():
    # http-keywords.html http.start note: http.start "contains the normalized
    # headers"; http.header normalisation example (trailing whitespace removed).
    req = b"GET / HTTP/1.1\r\nHost:suricata.io\r\nConnection: Keep-Alive   \r\n\r\n"
    return exchange(80, 41014, (True, req), (False, ok()))


def http_dup_header():
    # http-keywords.html "Normalization / Duplicate Header Names" example (sid 103).
    req = (
        b"GET / HTTP/1.1\r\nHost: suricata.io\r\nUser-Agent: Mozilla/5.0\r\n"
        b"User-agent: Chrome/121.0.0\r\n\r\n"
    )
    return exchange(80, 41015, (True, req), (False, ok()))


def tls_eve_no_ja3():
    # ja-keywords.html: JA3 support "will be enabled if a loaded rule requires
    # it" (suricata.yaml: ja3-fingerprints auto); with only a tls.sni rule
    # loaded no JA3 is computed, so the alert's tls object has none.
    return exchange(4439, 41039, (True, client_hello(b"noja3.example")))



def http_compressed_bodies():
    # http-keywords.html file.data note: "If an HTTP body is using gzip or
    # deflate, file.data will match on the decompressed data" (and the
    # http.response_body note); Python's gzip and zlib compress, Sluice
    # inflates.
    import random
    import zlib

    rnd = random.Random(7)
    words = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf"]
    page = b"<html><body>" + b" ".join(rnd.choice(words) for _ in range(3000))
    page += b" MALWARE-IN-PAGE </body></html>"
    z = gzip.compress(page, mtime=0)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n"
    resp = head + b"Content-Length: %d\r\n\r\n" % len(z) + z
    q = len(resp) // 3
    a = Conn(80, sport=41030).send(True, http_get(b"/", b"a.example"))
    for piece in (resp[:q], resp[q : 2 * q], resp[2 * q :]):
        a.send(False, piece)
    # deflate (zlib), chunked.
    d = zlib.compress(page)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (d[i : i + 700] for i in range(0, len(d), 700)))
    chunked += b"0\r\n\r\n"
    resp = b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    b = Conn(80, sport=41031).send(True, http_get(b"/d", b"a.example"))
    for i in range(0, len(resp), 1000):
        b.send(False, resp[i : i + 1000])
    return a.pkts + b.pkts


def dns_header_keywords():
    # dns-keywords.html: dns.opcode (4, NOTIFY; `!0`), dns.rcode (3,
    # NXDOMAIN; `!0`) and dns.rrtype (16, TXT).
    u = lambda sport, dns: IP(src=CLIENT, dst=SERVER) / UDP(sport=sport, dport=53) / dns  # noqa: E731
    back = lambda sport, dns: IP(src=SERVER, dst=CLIENT) / UDP(sport=53, dport=sport) / dns  # noqa: E731
    return [
        u(53101, DNS(id=1, opcode=4, qd=DNSQR(qname="zone.example", qtype="SOA"))),
        u(53102, DNS(id=2, rd=1, qd=DNSQR(qname="txt.example", qtype="TXT"))),
        u(53103, DNS(id=3, rd=1, qd=DNSQR(qname="nx.example", qtype="A"))),
        back(53103, DNS(id=3, qr=1, rd=1, ra=1, rcode=3, qd=DNSQR(qname="nx.example", qtype="A"))),
        u(53104, DNS(id=4, rd=1, qd=DNSQR(qname="ok.example", qtype="A"))),
        back(53104, DNS(id=4, qr=1, rd=1, ra=1, rcode=0, qd=DNSQR(qname="ok.example", qtype="A"),
                        an=DNSRR(rrname="ok.example", type="A", rdata="10.9.9.9"))),
    ]


def ssh_buffers():
    # ssh-keywords.html: ssh.proto (`content:"2.0"`) and ssh.software
    # (`content:"openssh"; nocase;`), each peer's identification string.
    a = Conn(2222, sport=41040)
    a.send(False, b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n").send(True, b"SSH-2.0-PuTTY_Release_0.78\r\n")
    b = Conn(2222, sport=41041)
    b.send(False, b"SSH-1.99-dropbear_2022.83\r\n").send(True, b"SSH-2.0-libssh_0.10.4\r\n")
    return a.pkts + b.pkts


def tls_random():
    # tls-keywords.html tls.random, tls.random_time, tls.random_bytes: the
    # hello's random (the client's: time 0, then 28 bytes of 0x22; the
    # server's: time 0, then 28 bytes of 0x33).
    return exchange(4437, 41050, (True, client_hello(b"random.example")), (False, server_hello()))


def tls_alpn():
    # tls-keywords.html tls.alpn (`tls.alpn; content:"http/1.1";`): each
    # protocol of the hello's ALPN extension, one at a time.
    from scapy.layers.tls.extensions import ProtocolName, TLS_Ext_ALPN

    alpn = lambda *ps: TLS_Ext_ALPN(protocols=[ProtocolName(protocol=p) for p in ps])  # noqa: E731
    a = exchange(4438, 41060, (True, client_hello(b"alpn.example", ext_more=[alpn(b"h2", b"http/1.1")])))
    b = exchange(4438, 41061, (True, client_hello(b"alpn2.example", ext_more=[alpn(b"h2")])))
    return a + b


def dns_query_name():
    # dns-keywords.html dns.query.name (Suricata 8): the questions' names of
    # requests and responses, where dns.query looks at requests only.
    q = DNS(id=9, rd=1, qd=DNSQR(qname="www.qn.example", qtype="A"))
    r = DNS(id=9, qr=1, rd=1, ra=1, qd=DNSQR(qname="www.qn.example", qtype="A"),
            an=DNSRR(rrname="www.qn.example", type="A", rdata="10.9.9.8"))
    return [
        IP(src=CLIENT, dst=SERVER) / UDP(sport=53201, dport=53) / q,
        IP(src=SERVER, dst=CLIENT) / UDP(sport=53, dport=53201) / r,
    ]


# The SHA-1 of `certificate(SANS)`, as Suricata prints a fingerprint
# (checked against the certificate made, so a change of its encoding shows
# here rather than as a silent miss).
SANS = ("evil-cert.example", "*.evil.example")


def tls_cert_fingerprint_san():
    # tls-keywords.html tls.cert_fingerprint (`content:"4a:a3:66:76..."`)
    # and tls.subjectaltname (`content:"evil.example"`), one name at a time.
    import ipaddress

    der = certificate(SANS + (ipaddress.ip_address("10.9.9.9"),))
    fp = ":".join("%02x" % b for b in hashlib.sha1(der).digest())
    want = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "app-tls-fingerprint-san", "test.rules")).read()
    assert fp in want, "the certificate's fingerprint is " + fp
    return exchange(
        4439,
        41070,
        (True, client_hello(b"evil-cert.example")),
        (False, server_hello(certs=[der])),
    )


def tls_cert_chain_len():
    # tls-keywords.html tls.cert_chain_len (`tls.cert_chain_len:>2;` and an
    # exact count): the server's Certificate message of two certificates.
    return exchange(
        4440,
        41080,
        (True, client_hello(b"chain.example")),
        (False, server_hello(certs=[certificate(), certificate(SANS)])),
    )

CAPTURES = {
    "app-http-nonstd-port": http_nonstd_port,
    "app-http-not-http-port80": http_not_http_port80,
    "app-http-header": http_header,
    "app-http-header-names": http_header_names,
    "app-http-request-line-protocol": http_request_line_protocol,
    "app-http-uri-normalisation": http_uri_normalisation,
    "app-http-request-headers": http_request_headers,
    "app-http-response-headers": http_response_headers,
    "app-http-start": http_start,
    "app-http-request-body-split": http_request_body_split,
    "app-http-response-body": http_response_body,
    "app-http-snort-modifiers": http_snort_modifiers,
    "app-http-chunked-split": http_chunked_split,
    "app-http-pipelined": http_pipelined,
    "app-http-eve-meta": http_eve_meta,
    "app-tls-sni-port": tls_sni_port,
    "app-tls-cert": tls_cert,
    "app-tls-version": tls_version,
    "app-tls-ja3": tls_ja3,
    "app-tls-ja3s": tls_ja3s,
    "app-dns-tcp-split": dns_tcp_split,
    "app-dns-eve": dns_eve,
    "app-smtp-detect": smtp_detect,
    "app-ftp-detect": ftp_detect,
    "app-ftp-event-line-too-long": ftp_line_too_long,
    "app-ssh-detect": ssh_detect,
    "app-http-header-cookie": http_header_cookie,
    "app-http-header-end": http_header_end,
    "app-http-start-normalised": http_start_normalised,
    "app-http-dup-header": http_dup_header,
    "app-tls-eve-no-ja3": tls_eve_no_ja3,
    "app-http-compressed-bodies": http_compressed_bodies,
    "app-dns-header-keywords": dns_header_keywords,
    "app-ssh-buffers": ssh_buffers,
    "app-tls-random": tls_random,
    "app-tls-alpn": tls_alpn,
    "app-dns-query-name": dns_query_name,
    "app-tls-fingerprint-san": tls_cert_fingerprint_san,
    "app-tls-cert-chain-len": tls_cert_chain_len,
}
