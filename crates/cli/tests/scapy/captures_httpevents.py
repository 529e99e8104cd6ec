"""Scapy-built captures of the HTTP decoder event tests (`app-http-event-*`;
see captures.py).

Each connection carries one malformed (or nearly malformed) request or
response, so that each rule of Suricata's http-events.rules counts the
transactions raising its event: libhtp (Suricata 7.0.10's HTTP parser,
IDS personality) decides them from the start line and the header lines.
A request whose start line libhtp accepts and Sluice's detection would
not (leading whitespace, odd delimiters) follows a plain request on a
keep-alive connection. The expected alerts in each test's test.yaml are
Suricata 7.0.10's. Every connection has its handshake and is closed with
a FIN both ways.
"""

from captures_httpedge import close, exchange
from conn import Conn

GET = b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def req(line, fields=b"Host: www.example.com\r\n", body=b""):
    return line + b"\r\n" + fields + b"\r\n" + body


def resp(line, fields=b"Content-Length: 2\r\n", body=b"ok"):
    return line + b"\r\n" + fields + b"\r\n" + body


def after_get(sport, request):
    """A plain GET and its answer, then `request` and its answer."""
    return exchange(sport, (True, GET), (False, OK), (True, request), (False, OK))


def alone(sport, request, response=OK):
    return exchange(sport, (True, request), (False, response))


def answer(sport, response):
    """A plain GET answered by `response`."""
    return exchange(sport, (True, GET), (False, response))


def request_line():
    # Leading whitespace (IIS accepts it), a tab or a vertical tab between
    # method and target, a tab inside the target (ending it when no space
    # follows); near misses: two spaces as the delimiter, a tab after the
    # protocol.
    return (
        after_get(45001, req(b"  GET /lead HTTP/1.1"))
        + after_get(45002, req(b"\tGET /lead-tab HTTP/1.1"))
        + after_get(45003, req(b"GET\t/method-tab HTTP/1.1"))
        + after_get(45004, req(b"GET \x0b/method-vt HTTP/1.1"))
        + after_get(45005, req(b"GET /uri\ttab HTTP/1.1"))
        + after_get(45006, req(b"GET /uri-tab-end\tHTTP/1.1"))
        + after_get(45007, req(b"GET  /two-spaces HTTP/1.1"))
        + after_get(45008, req(b"GET /fine HTTP/1.1"))
    )


def request_fields():
    # Header lines without a colon (one with a NUL before it), with an
    # empty name, a space before the colon, a name that is not a token, a
    # first header line folded; a missing Host under HTTP/1.1 (a line
    # `Host` without a colon is no Host). Near misses: a valid folded
    # value, `Host` in any case, a missing Host under HTTP/1.0 and
    # HTTP/2.0 (not HTTP/1.1 to libhtp).
    h = b"Host: www.example.com\r\n"
    return (
        alone(45101, req(b"GET /colon HTTP/1.1", h + b"X-Foo\r\n"))
        + alone(45102, req(b"GET /colon-nul HTTP/1.1", h + b"X-F\x00oo: bar\r\n"))
        + alone(45103, req(b"GET /empty-name HTTP/1.1", h + b": bar\r\n"))
        + alone(45104, req(b"GET /lws HTTP/1.1", h + b"X-Foo : bar\r\n"))
        + alone(45105, req(b"GET /token HTTP/1.1", h + b"X(Foo): bar\r\n"))
        + alone(45106, req(b"GET /fold-first HTTP/1.1", b" X-Foo: bar\r\n" + h))
        + alone(45107, req(b"GET /no-host HTTP/1.1", b"Accept: */*\r\n"))
        + alone(45108, req(b"GET /host-no-colon HTTP/1.1", b"Host\r\n"))
        + alone(45109, req(b"GET /fold-ok HTTP/1.1", h + b"X-Foo: bar,\r\n baz\r\n"))
        + alone(45110, req(b"GET /host-case HTTP/1.1", b"hOsT: www.example.com\r\n"))
        + alone(45111, req(b"GET /no-host-10 HTTP/1.0", b"Accept: */*\r\n"))
        + after_get(45112, req(b"GET /no-host-20 HTTP/2.0", b"Accept: */*\r\n"))
    )


def request_framing():
    # Content-Length repeated with another length, one without digits, an
    # Authorization scheme libhtp does not know, chunked under HTTP/2.0
    # (not HTTP/1.1 to libhtp; after a GET, as Sluice detects HTTP by an
    # HTTP/1.x request line). Near misses: a repeated equal length
    # (`2` and `2x` parse alike), junk after the digits, Basic and Bearer.
    h = b"Host: www.example.com\r\n"
    return (
        alone(45201, req(b"POST /dup HTTP/1.1", h + b"Content-Length: 2\r\nContent-Length: 3\r\n", b"ab"))
        + alone(45202, req(b"POST /no-digits HTTP/1.1", h + b"Content-Length: abc\r\n"))
        + alone(45203, req(b"GET /negotiate HTTP/1.1", h + b"Authorization: Negotiate YIIGhgYGKwYBBQUCoIIGejCC\r\n"))
        + after_get(45204, req(b"POST /chunked-20 HTTP/2.0", h + b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n"))
        + alone(45205, req(b"POST /dup-same HTTP/1.1", h + b"Content-Length: 2\r\ncontent-length: 2x\r\n", b"ab"))
        + alone(45206, req(b"POST /junk-after HTTP/1.1", h + b"Content-Length: 2;\r\n", b"ab"))
        + alone(45207, req(b"GET /basic HTTP/1.1", h + b"Authorization: Basic dXNlcjpwYXNz\r\n"))
        + alone(45208, req(b"GET /bearer HTTP/1.1", h + b"Authorization: Bearer abc.def\r\n"))
        + alone(45209, req(b"POST /chunked-11 HTTP/1.1", h + b"Transfer-Encoding: chunked\r\n", b"2\r\nab\r\n0\r\n\r\n"))
    )


def response_line():
    # Protocols libhtp does not know (HTTP/2.0, lowercase, a leading zero)
    # and status codes out of 100-999 or not digits alone. Near misses:
    # HTTP/1.0, a status with a leading zero, a tab as the delimiter, no
    # reason phrase.
    return (
        answer(45301, resp(b"HTTP/2.0 200 OK"))
        + answer(45302, resp(b"http/1.1 200 OK"))
        + answer(45303, resp(b"HTTP/01.1 200 OK"))
        + answer(45304, resp(b"HTTP/1.1 099 Low"))
        + answer(45305, resp(b"HTTP/1.1 20x OK"))
        + answer(45306, resp(b"HTTP/1.1 1000 High"))
        + answer(45307, resp(b"HTTP/1.0 200 OK"))
        + answer(45308, resp(b"HTTP/1.1 0200 OK"))
        + answer(45309, resp(b"HTTP/1.1\t200\tOK"))
        + answer(45310, resp(b"HTTP/1.1 200"))
    )


def response_fields():
    # A header line without a colon, a space or a control byte before the
    # colon, a name that is not a token, a first header line folded; a
    # missing colon before an invalid name (libhtp reports only the
    # first). Near misses: a valid folded value, a NUL in a value.
    cl = b"Content-Length: 2\r\n"
    return (
        answer(45401, resp(b"HTTP/1.1 200 OK", b"X-Foo\r\n" + cl))
        + answer(45402, resp(b"HTTP/1.1 200 OK", b"X-Foo : bar\r\n" + cl))
        + answer(45403, resp(b"HTTP/1.1 200 OK", b"X-Foo\x01: bar\r\n" + cl))
        + answer(45404, resp(b"HTTP/1.1 200 OK", b"X[Foo]: bar\r\n" + cl))
        + answer(45405, resp(b"HTTP/1.1 200 OK", b" X-Foo: bar\r\n" + cl))
        + answer(45406, resp(b"HTTP/1.1 200 OK", b"X-Foo\r\nX(Foo): bar\r\n" + cl))
        + answer(45407, resp(b"HTTP/1.1 200 OK", b"X-Foo: bar,\r\n\tbaz\r\n" + cl))
        + answer(45408, resp(b"HTTP/1.1 200 OK", b"X-Foo: a\x00b\r\n" + cl))
    )


def response_framing():
    # Content-Length repeated with another length or without digits;
    # Transfer-Encoding with chunked among other codings, chunked under
    # HTTP/1.0. Near misses: chunked in capitals, a repeated equal length,
    # an invalid Content-Length beside chunked (the chunks frame the body).
    return (
        answer(45501, resp(b"HTTP/1.1 200 OK", b"Content-Length: 2\r\nContent-Length: 3\r\n"))
        + answer(45502, resp(b"HTTP/1.1 200 OK", b"Content-Length: none\r\n", b""))
        + answer(45503, resp(b"HTTP/1.1 200 OK", b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"))
        + answer(45504, resp(b"HTTP/1.0 200 OK", b"Transfer-Encoding: chunked\r\n", b"2\r\nok\r\n0\r\n\r\n"))
        + answer(45505, resp(b"HTTP/1.1 200 OK", b"Transfer-Encoding: CHUNKED\r\n", b"2\r\nok\r\n0\r\n\r\n"))
        + answer(45506, resp(b"HTTP/1.1 200 OK", b"Content-Length: 2\r\nContent-Length: 2\r\n"))
        + answer(45507, resp(b"HTTP/1.1 200 OK", b"Transfer-Encoding: chunked\r\nContent-Length: none\r\n", b"0\r\n\r\n"))
    )


def request_host():
    # The request target's authority against the Host field (libhtp's host
    # checks): another host, a host with a trailing dot (libhtp normalises
    # the target's, not the field's), other ports, credentials before
    # another host, a CONNECT to another host; invalid ports and names in
    # the target (also on a CONNECT and an HTTP/0.9 line) and in the field
    # (an IPv6 literal without its `]`, empty, port 0, two Host fields
    # joined). Near misses: the same host in other case or with a trailing
    # dot in the target, a port on one side only, an underscore, IPv6
    # literals, spaces around the field's parts, a target without `//`.
    def r(target, host=b"a.example", line=b" HTTP/1.1", method=b"GET "):
        return method + target + line + b"\r\n" + (b"Host: " + host + b"\r\n" if host else b"") + b"\r\n"
    cases = [
        r(b"http://b.example/x"),
        r(b"http://a.example/x", b"a.example."),
        r(b"http://a.example:81/x", b"a.example:82"),
        r(b"http://u@b.example/x"),
        r(b"a.example:443", b"b.example:443", method=b"CONNECT "),
        r(b"http://1.2.3.5/", b"1.2.3.4"),
        r(b"http://a.example:abc/x"),
        r(b"http://a.example:0/x"),
        r(b"http://a.example:/x"),
        r(b"http://a..example/x"),
        r(b"a.example:abc", method=b"CONNECT "),
        r(b"http://a.example:99999/", None, line=b""),
        r(b"/", b"[::1"),
        r(b"/", b"a b.example"),
        r(b"/", b"a.example:0"),
        r(b"/", b"a!b.example"),
        r(b"/", b"a.example\r\nHost: b.example"),
        r(b"http://A.EXAMPLE./x"),
        r(b"http://a.example:81/x"),
        r(b"http://a.example/x", b"a.example:81"),
        r(b"http://a_b.example/x", b"a_b.example"),
        r(b"http://[::1]/x", b"[::1]:80"),
        r(b"/", b" a.example :80 "),
        r(b"http:b.example/x"),
        r(b"a.example:443", b"a.example:443", method=b"CONNECT "),
    ]
    return [p for i, c in enumerate(cases) for p in alone(45601 + i, c)]


def chunk_len():
    # Chunk-size lines libhtp calls invalid (`zz`, `;x`, ` zz`, an empty
    # line, 2^31 and more, `-5`, a bad second chunk) in requests, and in
    # responses (`zz`, 2^31; an empty line is skipped there). Near misses:
    # leading whitespace before digits, junk after them (`5zz`, `0x5`), an
    # extension, 2^31 - 1, plain chunks.
    post = b"POST /u HTTP/1.1\r\nHost: www.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    end = b"hello\r\n0\r\n\r\n"
    requests = [
        b"zz\r\n" + end,
        b";x\r\n" + end,
        b" zz\r\n" + end,
        b"\r\n5\r\n" + end,
        b"80000000\r\nhello",
        b"ffffffff\r\nhello",
        b"100000000\r\nhello",
        b"-5\r\n" + end,
        b"5\r\nhello\r\nzz\r\nabc\r\n0\r\n\r\n",
        b" 5\r\n" + end,
        b"5zz\r\n" + end,
        b"7fffffff\r\nhello",
        b"5;ext=1\r\n" + end,
        b"0x5\r\n" + end,
        b"\t5\r\n" + end,
        b"5 \r\n" + end,
        b"5\r\n" + end,
    ]
    responses = [b"zz\r\n" + end, b"80000000\r\nhello", b" 5\r\n" + end, b"\r\n5\r\n" + end, b"5\r\n" + end]
    out = [p for i, b in enumerate(requests) for p in alone(45701 + i, post + b)]
    out += [p for i, b in enumerate(responses) for p in answer(45751 + i, chunked + b)]
    return out


def gzip_failed():
    # Response bodies libhtp fails to inflate (the event), and near misses,
    # each with a page holding a marker that a file_data rule looks for:
    # the body is inspected inflated (on libhtp's second try when the first
    # fails: raw deflate under gzip, a zlib stream or a gzip member under
    # deflate) or, when both tries fail, passed through as sent.
    import gzip
    import struct
    import zlib

    text = b"hello world, " * 40 + b"SECRET-MARKER"
    g = gzip.compress(text, mtime=0)
    raw = zlib.compress(text)[2:-4]
    bad_crc = g[:-8] + struct.pack("<I", zlib.crc32(text) ^ 1) + g[-4:]
    bad_len = g[:-4] + struct.pack("<I", len(text) + 1)
    corrupt = g[:10] + b"\xff" * 20 + g[30:]

    def with_hcrc(right):
        # FHCRC: the low 16 bits of the header's CRC-32, right or not.
        h = bytearray(g[:10])
        h[3] |= 2
        c = (zlib.crc32(bytes(h)) & 0xFFFF) ^ (0 if right else 1)
        return bytes(h) + struct.pack("<H", c) + g[10:]

    reserved = g[:3] + bytes([g[3] | 0x20]) + g[4:]

    def coded(body, ce=b"gzip", frame=None):
        if frame == "chunked":
            return b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
                ce,
                len(body),
                body,
            )
        if frame == "close":
            return b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nConnection: close\r\n\r\n%s" % (ce, body)
        return b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s" % (ce, len(body), body)

    failing = [
        coded(text),
        coded(bad_crc),
        coded(bad_len),
        coded(corrupt),
        coded(raw),
        coded(zlib.compress(text), b"deflate"),
        coded(g, b"deflate"),
        coded(text, b"X-GZIP"),
        coded(text, b"gzip, br"),
        coded(text, b"gzip", "chunked"),
        coded(text, b"gzip", "close"),
        coded(b"ab"),
        # Two layers, inflated in the order listed: one gzip member (the
        # second layer fails, the page passes through it), plain text.
        coded(g, b"gzip, gzip"),
        coded(text, b"gzip, gzip"),
        # A wrong header CRC, a reserved flag: zlib refuses the header,
        # libhtp inflates past it all the same.
        coded(with_hcrc(False)),
        coded(reserved),
    ]
    fine = [
        coded(g),
        coded(zlib.compress(text)),
        coded(raw, b"deflate"),
        coded(g[:-8]),
        coded(g + b"trailing garbage"),
        coded(g, b"br, gzip"),
        coded(text, b"br"),
        coded(g[:10]),
        coded(b""),
        coded(gzip.compress(g, mtime=0), b"gzip, gzip"),
        coded(with_hcrc(True)),
    ]
    out = [p for i, r in enumerate(failing) for p in answer(45801 + i, r)]
    out += [p for i, r in enumerate(fine) for p in answer(45851 + i, r)]
    # A request body sent gzipped: inflated for http.request_body too.
    post = b"POST /up HTTP/1.1\r\nHost: www.example.com\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
    out += alone(45870, post % (len(g), g))
    return out


def content_encoding():
    # Content-Encoding lists as libhtp reads them: more than two tokens
    # (too_many_encoding_layers; the first two layers are inflated), tokens
    # other than the exact names (abnormal_ce_header; case counts inside a
    # list), lists read askew after leading separators, repeated fields
    # joined. Near misses: whole values in any case, two known layers, a
    # comma alone before the token, a request's lists (requests read whole
    # values only). Each page holds a marker a file_data rule looks for,
    # found where libhtp inflates the body far enough.
    import gzip
    import zlib

    text = b"hello world, " * 20 + b"SECRET-MARKER"
    g = gzip.compress(text, mtime=0)
    gg = gzip.compress(g, mtime=0)

    def coded(ces, body):
        fields = b"".join(b"Content-Encoding: %s\r\n" % c for c in ces)
        return b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (fields, len(body), body)

    cases = [
        ([b"gzip, gzip, gzip"], gg),
        ([b"gzip gzip gzip"], gg),
        ([b"gzip", b"gzip", b"gzip"], gg),
        ([b"br, identity, gzip"], g),
        ([b"inflate, inflate, gzip"], g),
        ([b"gzip, br, gzip"], gg),
        ([b"gzip , gzip"], gg),
        ([b"GZIP, gzip"], gg),
        ([b"gzip;q=1"], g),
        ([b"identity"], text),
        ([b"br"], text),
        ([b"deflatex"], zlib.compress(text)[2:-4]),
        ([b"gzip,\tgzip"], gg),
        ([b", gzip"], g),
        ([b"", b"gzip"], g),
        ([b"gzip", b"br"], g),
        # Near misses.
        ([b"GZIP"], g),
        ([b"x-gzip, x-deflate"], g),
        ([b"gzip", b"gzip"], gg),
        ([b"gzip ,gzip"], gg),
        ([b",gzip"], g),
        ([b"inflate, gzip"], g),
        ([b"gz\x00ip"], g),
        ([b"gzip", b""], g),
    ]
    out = [p for i, (ces, body) in enumerate(cases) for p in answer(45901 + i, coded(ces, body))]
    post = b"POST /up HTTP/1.1\r\nHost: www.example.com\r\nContent-Encoding: %s\r\nContent-Length: 2\r\n\r\nhi"
    for i, ce in enumerate([b"a, b, c", b"gzip, br", b"GZIP, gzip"]):
        out += alone(45951 + i, post % ce)
    return out


# Content-Range values measured against Suricata 7.0.10 (crate ips,
# src/http/range.rs): each is a 206 response's to GET /file.bin, with a
# two-byte body.
RANGES = [
    b"bytes abc", b"bytes 0-1/2", b"bytes 0-1/10", b"bytes 5-1/10", b"bytes */10",
    b"bytes 0-1/*", b"0-1/10", b"bytes=0-1/10", b"bytes  0-1/10", b"bytes 0-1/10 junk",
    b"bytes 0-99999999999999999999/10", b"bytes 1-1/10", b"bytes 0-10/10", b"bytes 0-9/10",
    b"bytes 3-9/10", b"bytes 0-20/10", b"xyz 0-1/10", b"bytes -1-2/10", b"bytes 0-0/10",
    b"bytes 1-0/10", b"bytes 0-1/0", b"", b"bytes", b"bytes 0-1/1", b"bytes 01-02/10",
    b"bytes\t0-1/10", b"BYTES 0-1/10", b"bytes +1-2/10", b"bytes 0-1/-5", b"bytes 5-1/*",
    b"bytes 5-1/0", b"bytes 2-1/10", b"bytes 0-20/*", b"bytes 0-0/1", b"bytes 0-5/5",
    b"bytes 1-5/3", b"bytes */0", b"bytes */abc", b"bytes *-1/10", b"bytes 0-1/10x",
    b"bytes 0-1", b"bytes 0 -1/10", b"bytes 1-1/1", b"bytes 10-20/15",
    b"bytes 0-9223372036854775807/10", b"bytes 0-9223372036854775808/10",
    b"bytes 0-1/9223372036854775807", b"bytes 0-0/0", b"bytes 0-1/ 10", b"bytes */",
    b"bytes */10 x", b"bytes 1-2/3, bytes x",
]


def range_values():
    # http.range_invalid: each measured Content-Range value, then the
    # value's other homes: repeated fields joined (bad first, good first),
    # a folded value, a lowercase name, a name with a space before its
    # colon, other statuses (200 and 404 raise it too), a chunked, a
    # gzipped and a close-delimited body, a keep-alive connection (only
    # its bad response with a body raises it), `GET *` and an absolute
    # target without a path. Near misses: no body (HEAD, Content-Length:
    # 0), a request's Content-Range. One segment per message.
    get = b"GET /file.bin HTTP/1.1\r\nHost: www.example.com\r\n\r\n"
    bad = b"Content-Range: bytes abc\r\n"

    def part(fields, body=b"ok", status=b"206 Partial Content"):
        return b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n\r\n%s" % (status, fields, len(body), body)

    def cr(*vs):
        return b"".join(b"Content-Range: %s\r\n" % v for v in vs)

    out = []
    for i, v in enumerate(RANGES):
        out += exchange(46001 + i, (True, get), (False, part(cr(v))))
    import gzip

    z = gzip.compress(b"hello", mtime=0)
    msgs = [
        part(cr(b"bytes abc", b"bytes 0-1/10")),
        part(cr(b"bytes 0-1/10", b"bytes abc")),
        part(b"Content-Range: bytes\r\n 0-1/10\r\n"),
        part(b"content-range: bytes abc\r\n"),
        part(b"Content-Range : bytes abc\r\n"),
        part(bad, status=b"200 OK"),
        part(bad, status=b"404 Not Found"),
        b"HTTP/1.1 206 Partial Content\r\n" + bad + b"Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 206 Partial Content\r\n" + bad + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(z), z),
        part(bad, b""),
        part(cr(b"bytes 5-1/10"), b""),
    ]
    for i, m in enumerate(msgs):
        out += exchange(46101 + i, (True, get), (False, m))
    out += close(Conn(80, sport=46120).send(True, get).send(False, b"HTTP/1.0 206 Partial Content\r\n" + bad + b"\r\nbody"))
    keep = [(True, get), (False, part(b"")), (True, get), (False, part(bad)), (True, get), (False, part(b""))]
    keep += [(True, get), (False, part(bad, b"")), (True, get), (False, part(b""))]
    out += exchange(46121, *keep)
    out += exchange(46122, (True, b"HEAD /file.bin HTTP/1.1\r\nHost: a\r\n\r\n"), (False, part(bad, b"").replace(b"Length: 0", b"Length: 4")))
    put = b"PUT /up HTTP/1.1\r\nHost: a\r\n" + bad + b"Content-Length: 2\r\n\r\nhi"
    out += exchange(46123, (True, put), (False, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    out += exchange(46124, (True, b"GET * HTTP/1.1\r\nHost: a\r\n\r\n"), (False, part(bad)))
    out += exchange(46125, (True, b"GET http://a.example HTTP/1.1\r\nHost: a\r\n\r\n"), (False, part(bad)))
    return out


def range_invalid_ips():
    # As range_values, inline, with the messages split: a head alone then
    # the body in two segments (raised on the body's first), the head with
    # the body's first byte, a 100 Continue before the response.
    get = b"GET /file.bin HTTP/1.1\r\nHost: www.example.com\r\n\r\n"
    head = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes abc\r\nContent-Length: 4\r\n\r\n"
    out = range_values()
    out += close(Conn(80, sport=46201).send(True, get).send(False, head).send(False, b"ab").send(False, b"cd"))
    out += close(Conn(80, sport=46202).send(True, get).send(False, head + b"a").send(False, b"bcd"))
    cont = Conn(80, sport=46203).send(True, get).send(False, b"HTTP/1.1 100 Continue\r\n\r\n")
    out += close(cont.send(False, head + b"abcd"))
    return out


def continue_again():
    # 100_continue_already_seen: a second `100 Continue` to one request
    # (once per transaction: a third raises nothing more), in separate
    # segments or one, after a `100` with Content-Length: 0, a lowercase
    # reason, an `HTTP/1.0 100`, on a keep-alive connection's second
    # request. Near misses: one `100` per request, two `102`s, a `1000`,
    # no `100`. The final response's page holds a marker the file_data
    # rule finds in each (parsing goes on after the event).
    get = b"GET /f HTTP/1.1\r\nHost: a\r\n\r\n"
    c100 = b"HTTP/1.1 100 Continue\r\n\r\n"
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nSECRET-MARKER"
    cases = [
        [(True, get), (False, c100), (False, c100), (False, ok)],
        [(True, get), (False, c100), (False, c100), (False, c100), (False, ok)],
        [(True, get), (False, c100 + c100 + ok)],
        [(True, get), (False, b"HTTP/1.1 100 Continue\r\nContent-Length: 0\r\n\r\n"), (False, c100), (False, ok)],
        [(True, get), (False, c100), (False, b"HTTP/1.1 100 continue\r\n\r\n"), (False, ok)],
        [(True, get), (False, c100), (False, b"HTTP/1.0 100 Continue\r\n\r\n"), (False, ok)],
        [(True, get), (False, ok), (True, get), (False, c100), (False, c100), (False, ok)],
        # Near misses.
        [(True, get), (False, c100), (False, ok), (True, get), (False, c100), (False, ok)],
        [(True, get), (False, c100), (False, b"HTTP/1.1 1000 Continue\r\n\r\n"), (False, ok)],
        [(True, get), (False, ok)],
    ]
    return [p for i, c in enumerate(cases) for p in exchange(47001 + i, *c)]


def unmatched():
    # unable_to_match_response_to_request: responses with no request left
    # to answer on a connection whose client spoke HTTP: a second response
    # to one request (in its own segment or with the first), two extra
    # responses (each raises it), two `102`s (libhtp's only interim status
    # is `100`: the second `102` and the final response are extra).
    # Near misses: pipelined requests answered in order, a `100 Continue`
    # before the response, a keep-alive connection, a server refusing a
    # request whose head has not ended yet (the transaction begins at the
    # request's first byte).
    get = b"GET /f HTTP/1.1\r\nHost: a\r\n\r\n"
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    p102 = b"HTTP/1.1 102 Processing\r\n\r\n"
    bad = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    cases = [
        [(True, get), (False, ok), (False, ok)],
        [(True, get), (False, ok + ok)],
        [(True, get), (False, ok), (False, ok), (False, ok)],
        [(True, get), (False, p102), (False, p102), (False, ok)],
        # Near misses.
        [(True, get + get), (False, ok), (False, ok)],
        [(True, get), (True, get), (False, ok + ok)],
        [(True, get), (False, b"HTTP/1.1 100 Continue\r\n\r\n"), (False, ok)],
        [(True, get), (False, ok), (True, get), (False, ok)],
        [(True, b"GET /f HTTP/1.1\r\nHost: a\r\nX-Long: aaaa"), (False, bad)],
    ]
    return [p for i, c in enumerate(cases) for p in exchange(47101 + i, *c)]


CAPTURES = {
    "app-http-event-request-line": request_line,
    "app-http-event-request-fields": request_fields,
    "app-http-event-request-framing": request_framing,
    "app-http-event-response-line": response_line,
    "app-http-event-response-fields": response_fields,
    "app-http-event-response-framing": response_framing,
    "app-http-event-request-host": request_host,
    "app-http-event-chunk-len": chunk_len,
    "app-http-event-gzip-failed-ips": gzip_failed,
    "app-http-event-content-encoding": content_encoding,
    "app-http-event-range-invalid": range_values,
    "app-http-event-range-invalid-ips": range_invalid_ips,
    "app-http-event-100-continue-ips": continue_again,
    "app-http-event-unmatched-response-ips": unmatched,
}
