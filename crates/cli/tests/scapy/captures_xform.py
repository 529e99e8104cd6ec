"""Scapy-built captures of the transform tests (`xform-*`; see captures.py).

Each builder follows an example of Suricata's documentation of transforms
(docs.suricata.io, rules/transforms.html: its examples of strip_whitespace,
the compress_whitespace + to_sha256 chain, to_lowercase / to_uppercase,
to_md5 / to_sha1 / to_sha256, url_decode, xor, pcrexform, dotprefix,
header_lowercase and strip_pseudo_headers); the expected alerts in the
test's test.yaml are Suricata's. Where a rule needs a digest, the builder
checks it against test.rules (hashlib computes it here), so the capture and
the rules cannot drift apart.
"""

import hashlib
import os

from scapy.all import DNS, DNSQR, IP, TCP, UDP

from captures_app import (
    JA3_STRING,
    JA3S_STRING,
    SANS,
    certificate,
    client_hello,
    http_get,
    ja3_hello,
    ja3_string,
    ja3s_string,
    ok,
    server_hello,
)
from conn import CLIENT, SERVER, Conn

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- helpers


def closed(dport, sport, *msgs):
    """A connection to `dport` from `sport`, each of `msgs` (to_server,
    bytes) sent in turn, then closed: FIN from the client, FIN-ACK from the
    server, the client's last ACK."""
    c = Conn(dport, sport=sport)
    for to_server, data in msgs:
        c.send(to_server, data)
    c.pkts += [
        IP(src=CLIENT, dst=SERVER) / TCP(sport=sport, dport=dport, flags="FA", seq=c.cseq, ack=c.sseq),
        IP(src=SERVER, dst=CLIENT)
        / TCP(sport=dport, dport=sport, flags="FA", seq=c.sseq, ack=c.cseq + 1),
        IP(src=CLIENT, dst=SERVER)
        / TCP(sport=sport, dport=dport, flags="A", seq=c.cseq + 1, ack=c.sseq + 1),
    ]
    return c.pkts


def rules_of(test):
    with open(os.path.join(HERE, test, "test.rules")) as f:
        return f.read()


def hexc(digest):
    """A digest as a rule's content writes bytes: |54 A9 ...|."""
    return "|" + " ".join("%02X" % b for b in digest) + "|"


def need(test, *digests):
    """Checks that each digest is in the test's rules, as hex content."""
    rules = rules_of(test)
    for d in digests:
        assert hexc(d) in rules, "%s/test.rules lacks %s" % (test, hexc(d))


def isspace(b):
    return b in b" \t\n\x0b\x0c\r"


def no_double_space(digest):
    # Suricata refuses a content after compress_whitespace holding two
    # whitespace bytes in a row (its TransformValidate sees the digest too).
    return not any(isspace(a) and isspace(b) for a, b in zip(digest, digest[1:]))


def xor(data, key, start=0):
    """`data` XORed with `key` repeated, as if it began at offset `start` of
    the buffer (Suricata's xor starts the key at the buffer's first byte)."""
    return bytes(b ^ key[(start + i) % len(key)] for i, b in enumerate(data))


def post(path, host, body, ctype=b"application/x-www-form-urlencoded", extra=b""):
    return (
        b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\n%sContent-Length: %d\r\n\r\n%s"
        % (path, host, ctype, extra, len(body), body)
    )


def strip_pseudo(buf):
    """Suricata 7's strip_pseudo_headers (src/detect-transform-strip-pseudo-
    headers.c): a line is a pseudo-header when its first byte other than CR
    or LF is `:`; it is dropped from that `:` through its LF."""
    out, new_line, pseudo = bytearray(), True, False
    for b in buf:
        if new_line:
            if b == ord(":"):
                pseudo = True
            if b not in b"\r\n":
                new_line = False
        elif b == ord("\n"):
            new_line = True
            if not pseudo:
                out.append(b)
            pseudo = False
            continue
        if not pseudo:
            out.append(b)
    return bytes(out)


# ---------------------------------------------------------------- HTTP


STRIP_BODY = (
    b"<script>\r\n  window.navigate \t (\r\n   'http://evil.example/x' );\r\n</script>"
)


def strip_whitespace():
    # transforms.html strip_whitespace: `file_data; strip_whitespace;
    # content:"window.navigate(";` -- "will match ... even if there are one or
    # more spaces between the navigate and (". Also on a request body and a
    # User-Agent, with startswith / endswith / bsize / isdataat after it.
    a = closed(
        80,
        42001,
        (True, http_get(b"/page", b"strip.example", b"User-Agent: Evil Bot / 1.0\r\n")),
        (False, ok(STRIP_BODY, extra=b"Content-Type: text/html\r\n")),
    )
    body = b"cmd = whoami ;\tid"
    assert len(bytes(b for b in body if not isspace(b))) == 13
    b = closed(80, 42002, (True, post(b"/run", b"strip.example", body)), (False, ok(b"done")))
    return a + b


REQ_LINE_WS = b"GET  /index.html   HTTP/1.1"


def compress_whitespace():
    # transforms.html: the chain example `http_request_line;
    # compress_whitespace; to_sha256; content:"|...|"` (the digest of the
    # line with each run of spaces made one); compress_whitespace keeps a
    # run's first byte (src/detect-transform-compress-whitespace.c), so a run
    # starting with a tab leaves a tab.
    line = b"GET /index.html HTTP/1.1"
    d = hashlib.sha256(line).digest()
    assert no_double_space(d)
    need("xform-compress-whitespace", d)
    req = (
        REQ_LINE_WS
        + b"\r\nHost: ws.example\r\nUser-Agent: Mozilla/5.0  (X11;\t \tLinux x86_64)\r\n"
        b"Cookie: a=1;   b=2\r\n\r\n"
    )
    return closed(80, 42011, (True, req), (False, ok(b"ok")))


def case_change():
    # transforms.html to_lowercase (`http.uri; to_lowercase; content:"this
    # text has been converted to lowercase";`) and to_uppercase (`http.uri;
    # to_uppercase; content:"THIS TEXT HAS BEEN CONVERTED TO UPPERCASE";`),
    # one request each; also on the raw URI, the host (raw and lowercased),
    # the cookie, the User-Agent, the method and the headers.
    a = closed(
        80,
        42021,
        (
            True,
            b"GET /This%20Text%20Has%20Been%20Converted%20To%20Lowercase/Index.PHP?Id=7 HTTP/1.1\r\n"
            b"Host: WWW.Case.Example\r\nUser-Agent: Curl/8.1 MixedCase\r\nCookie: SessionID=AbC123\r\n\r\n",
        ),
        (False, ok(b"ok")),
    )
    b = closed(
        80,
        42022,
        (True, post(b"/this%20text%20has%20been%20converted%20to%20uppercase", b"other.example", b"")),
        (False, ok(b"ok")),
    )
    return a + b


HASH_LINE = b"GET /download.php?id=42 HTTP/1.1"
HASH_UA = b"HashAgent/2.0"
HASH_URI = b"/download.php?id=42"


def hashes():
    # transforms.html to_md5, to_sha1, to_sha256 examples (`http_request_line;
    # to_md5; content:"|54 A9 ...|";`): the raw digest of the buffer, here
    # computed by hashlib from the request built.
    need(
        "xform-hashes",
        hashlib.md5(HASH_LINE).digest(),
        hashlib.md5(HASH_LINE + b"\r\n").digest(),
        hashlib.sha1(HASH_LINE).digest(),
        hashlib.sha256(HASH_LINE).digest(),
        hashlib.md5(HASH_UA).digest(),
        hashlib.sha256(HASH_URI).digest(),
        hashlib.sha256(HASH_URI.upper()).digest(),
    )
    rules = rules_of("xform-hashes")
    assert hashlib.sha256(HASH_LINE).hexdigest()[:32] in rules  # as text, not bytes
    req = HASH_LINE + b"\r\nHost: hash.example\r\nUser-Agent: " + HASH_UA + b"\r\n\r\n"
    return closed(80, 42031, (True, req), (False, ok(b"ok")))


URL_RAW = b"/search?q=%3CScript%3E+alert(1)&u=%u0041&bad=%zz&pct=100%25&z=%41"
URL_DECODED = b"/search?q=<Script> alert(1)&u=%u0041&bad=%zz&pct=100%&z=A"


def url_decode():
    # transforms.html url_decode: "replacing '+' with space and '%HH' with
    # its value. This does not decode unicode '%uZZZZ' encoding"; on the raw
    # URI (the normalised one is decoded already), a form body and a cookie.
    assert len(URL_DECODED) == 57
    a = closed(
        80,
        42041,
        (True, http_get(URL_RAW, b"url.example", b"Cookie: pref=dark%3Bmode%3Dfull\r\n")),
        (False, ok(b"ok")),
    )
    b = closed(
        80,
        42042,
        (True, post(b"/login", b"url.example", b"user=admin&pass=p%40ss+w0rd%21")),
        (False, ok(b"ok")),
    )
    return a + b


XOR_KEY = bytes.fromhex("0d0ac8ff")


def xor_transform():
    # transforms.html xor: `http.uri; xor:"0d0ac8ff"; content:"password=";`
    # ("password= xored with 4-bytes key 0d0ac8ff"). The key starts at the
    # buffer's first byte, so the secret sits at offset 4 of the URI ("/xr?"
    # then it); a second request puts the same bytes at offset 5, where they
    # do not decode. Also a request body and a response body under other keys.
    enc = xor(b"password=hunter2", XOR_KEY, start=4)
    assert not any(c in b" \t\r\n\x00%#?/+&" for c in enc), enc
    resp = xor(b"MZ-payload-XOR", bytes.fromhex("1f2e"))
    a = closed(
        80,
        42051,
        (True, http_get(b"/xr?" + enc, b"xor.example")),
        (False, ok(resp, extra=b"Content-Type: application/octet-stream\r\n")),
    )
    b = closed(80, 42052, (True, http_get(b"/xyr?" + enc, b"xor.example")), (False, ok(b"ok")))
    body = xor(b"cmd=cat /etc/shadow", b"\xaa")
    c = closed(
        80,
        42053,
        (True, post(b"/up", b"xor.example", body, ctype=b"application/octet-stream")),
        (False, ok(b"ok")),
    )
    return a + b + c


def pcrexform():
    # transforms.html pcrexform: `http.request_line;
    # pcrexform:"[a-zA-Z]+\s+(.*)\s+HTTP"; content:"/dropper.php";` -- the
    # buffer becomes the first capture; with no match it is left as it was
    # (src/detect-transform-pcrexform.c).
    a = closed(
        80,
        42061,
        (True, http_get(b"/dropper.php", b"pcre.example", b"User-Agent: Mozilla/5.0 (bot; id=4242)\r\n")),
        (False, ok(b"ok")),
    )
    b = closed(80, 42062, (True, http_get(b"/index.php?f=dropper", b"pcre.example")), (False, ok(b"ok")))
    return a + b


def header_lowercase():
    # transforms.html header_lowercase: `http.header_names; header_lowercase;
    # content:"authorization:";` -- names lowercased up to the `:`, values
    # kept. HTTP/1's http.header_names has no `:` (its names are separated by
    # CRLF), so the example's content is written |0d 0a|authorization|0d 0a|.
    req = (
        b"GET /h HTTP/1.1\r\nHost: hdr.example\r\nX-Custom-Header: Some VALUE\r\n"
        b"Authorization: Basic dXNlcjpwYXNz\r\nUser-Agent: HdrTest/1.0\r\n\r\n"
    )
    resp = ok(b"ok", extra=b"X-Powered-By: PHP/8.2\r\n")
    return closed(80, 42071, (True, req), (False, resp))


PSEUDO_BODY = b":method: POST\r\n:path: /api\r\nreal: one\r\n\r\n:scheme: https\r\nlast: two\r\n"
# A line whose first byte is a CR, then `:`: Suricata's state machine still
# sees the start of a line there and drops from the `:` on.
PSEUDO_CR_BODY = b"x: 1\n\r:auth: q\nend\n"


def strip_pseudo_headers():
    # transforms.html strip_pseudo_headers: "strips every line beginning by
    # :"; its example `http.header_names; bsize:16;
    # content:"|0d 0a|User-Agent|0d 0a 0d 0a|"; nocase;` (a request with only
    # a User-Agent), and request bodies holding such lines (HTTP/1 headers
    # have none).
    assert strip_pseudo(PSEUDO_BODY) == b"real: one\r\n\r\nlast: two\r\n"
    assert strip_pseudo(PSEUDO_CR_BODY) == b"x: 1\n\rend\n"
    a = closed(80, 42081, (True, b"GET /ua HTTP/1.0\r\nuser-agent: ua/1\r\n\r\n"), (False, ok(b"ok")))
    text = lambda path, body: post(path, b"pseudo.example", body, ctype=b"text/plain")  # noqa: E731
    b = closed(80, 42082, (True, text(b"/p", PSEUDO_BODY)), (False, ok()))
    c = closed(80, 42083, (True, text(b"/q", PSEUDO_CR_BODY)), (False, ok()))
    return a + b + c


def more_buffers():
    # transforms.html's case, whitespace, dotprefix and digest transforms on
    # the other HTTP buffers of http-keywords.html (referer, accept*,
    # connection, content_type, protocol, start, header.raw; server,
    # location, stat_msg, response_line, stat_code, response_body, a
    # response's cookie).
    need("xform-more-buffers", hashlib.md5(b"302").digest(), hashlib.md5(b"200").digest())
    req = (
        b"GET /more HTTP/1.1\r\nHost: more.example\r\nReferer: HTTP://Ref.Example/Path\r\n"
        b"Accept: Text/HTML\r\nAccept-Encoding: GZIP, Deflate\r\nAccept-Language: EN-us\r\n"
        b"Connection: Keep-Alive\r\nContent-Type: Application/JSON\r\n\r\n"
    )
    body = b"Hello   World  BODY"
    resp = (
        b"HTTP/1.1 302 Found It\r\nServer: Apache / 2.4\r\nLocation: HTTP://Next.Example/\r\n"
        b"Set-Cookie: Track=ON\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    return closed(80, 42091, (True, req), (False, resp))


SPLIT_REQ_BODY = b"token=AAAA-1111&action=wipe-all-the-things"
SPLIT_RESP_BODY = b"<html><body>split response body, sha256 over both segments</body></html>"


def body_split():
    # transforms.html to_md5 / to_sha256 / strip_whitespace on bodies that
    # come in two segments: the transform sees the whole body (a body is
    # inspected once complete, http-keywords.html http.request_body /
    # file_data, suricata.yaml's *-body-minimal-inspect-size), so a digest
    # of its first segment alone is never seen.
    rb, sb = SPLIT_REQ_BODY, SPLIT_RESP_BODY
    need(
        "xform-body-split",
        hashlib.md5(rb).digest(),
        hashlib.md5(rb[:20]).digest(),
        hashlib.sha256(sb).digest(),
        hashlib.sha256(sb[:30]).digest(),
    )
    head = post(b"/wipe", b"split.example", rb)[: -len(rb)]
    resp = ok(sb, extra=b"Content-Type: text/html\r\n")[: -len(sb)]
    return closed(
        80,
        42111,
        (True, head + rb[:20]),
        (True, rb[20:]),
        (False, resp + sb[:30]),
        (False, sb[30:]),
    )


def buffer_twice():
    # transforms.html: a transform applies to "the data at a sticky buffer"
    # it follows; the same buffer named again without it is inspected as it
    # was (Suricata gives the transformed buffer an id of its own). On the
    # case, dotprefix and tls captures.
    return case_change() + dns_dotprefix() + tls_buffers()


# ---------------------------------------------------------------- DNS, TLS


DNS_NAMES = [
    "windows.update.microsoft.com",
    "maps.microsoft.com.au",
    "windows.update.fakemicrosoft.com",
    "maps.google.co.uk",
    "maps.google.co.nl",
    "microsoft.com",
    "WWW.Example.NET",
]


def dns_dotprefix():
    # transforms.html dotprefix: `dns.query; dotprefix;
    # content:".microsoft.com";` matches windows.update.microsoft.com and
    # maps.microsoft.com.au but not windows.update.fakemicrosoft.com; with
    # endswith, not maps.microsoft.com.au; `content:".co.uk"; endswith;`
    # matches maps.google.co.uk, not maps.google.co.nl. One query a flow.
    need("xform-dns-dotprefix", hashlib.md5(b"microsoft.com").digest())
    return [
        IP(src=CLIENT, dst=SERVER)
        / UDP(sport=53300 + i, dport=53)
        / DNS(id=0x3300 + i, rd=1, qd=DNSQR(qname=n, qtype="A"))
        for i, n in enumerate(DNS_NAMES)
    ]


def tls_buffers():
    # transforms.html dotprefix ("concise domain checks", endswith) and the
    # case and digest transforms, on tls.sni (tls-keywords.html), on
    # tls.cert_subject / cert_issuer / cert_serial, on tls.certs (a
    # certificate's SHA-1 is its fingerprint) and on ja3.string / ja3s.string
    # (whose MD5s are the JA3 / JA3S hashes, ja-keywords.html).
    hello = ja3_hello()
    assert ja3_string(hello) == JA3_STRING
    grease = JA3_STRING.replace("4865-", "2570-4865-")
    der = certificate()
    sh = server_hello(certs=[der])
    assert ja3s_string(sh) == JA3S_STRING
    need(
        "xform-tls",
        hashlib.sha256(b"cdn.evil-tls.example").digest(),
        hashlib.sha256(b"CDN.evil-tls.example").digest(),
        hashlib.md5(JA3_STRING.encode()).digest(),
        hashlib.md5(grease.encode()).digest(),
        hashlib.sha1(der).digest(),
        hashlib.sha1(certificate(SANS)).digest(),
        hashlib.md5(JA3S_STRING.encode()).digest(),
    )
    a = closed(4443, 42101, (True, client_hello(b"cdn.evil-tls.example")), (False, sh))
    b = closed(4443, 42102, (True, client_hello(b"notevil-tls.example")))
    c = closed(4443, 42103, (True, client_hello(b"Evil-TLS.example")))
    d = closed(4443, 42104, (True, hello))
    return a + b + c + d


CAPTURES = {
    "xform-strip-whitespace": strip_whitespace,
    "xform-compress-whitespace": compress_whitespace,
    "xform-case": case_change,
    "xform-hashes": hashes,
    "xform-url-decode": url_decode,
    "xform-xor": xor_transform,
    "xform-pcrexform": pcrexform,
    # startswith and endswith together (an exact match) after a transform,
    # on the pcrexform test's requests.
    "xform-startswith-endswith": pcrexform,
    "xform-header-lowercase": header_lowercase,
    "xform-strip-pseudo-headers": strip_pseudo_headers,
    "xform-dns-dotprefix": dns_dotprefix,
    "xform-tls": tls_buffers,
    "xform-more-buffers": more_buffers,
    "xform-buffer-twice": buffer_twice,
    "xform-buffer-retransformed": buffer_twice,
    # tls.cert_serial's and ja3.hash's contents are case-normalised by
    # Suricata on the buffer as it is, not on a transformed one.
    "xform-tls-untransformed-case": tls_buffers,
    "xform-body-split": body_split,
}
