"""Scapy-built captures of the HTTP/1.x edge-case tests (`httpedge-*`; see
captures.py).

Real-world and evasive HTTP/1.x that libhtp (Suricata 7's HTTP parser, IDS
personality, Suricata's default libhtp settings) normalises or frames in a
particular way: URI path normalisation (%-decoding, %u, `\\`, `//`, dot
segments; the query left apart), absolute-URI requests, folded, odd and
repeated header fields, bodies framed by Content-Length and chunked
together, chunk extensions and trailers, interim 100 responses, responses
without a body (HEAD, 204, 304), HTTP/1.0 keep-alive, other methods and odd
start lines. The expected alerts in each test's test.yaml are Suricata
7.0.10's. Every connection has its handshake and is closed with a FIN both
ways.
"""

from scapy.all import IP, TCP

from conn import CLIENT, SERVER, Conn

# ---------------------------------------------------------------- helpers


def close(c):
    """Closes connection `c`: the client's FIN, the server's FIN-ACK, the
    last ACK."""
    c.pkts += [
        IP(src=CLIENT, dst=SERVER) / TCP(sport=c.sport, dport=c.dport, flags="FA", seq=c.cseq, ack=c.sseq),
        IP(src=SERVER, dst=CLIENT) / TCP(sport=c.dport, dport=c.sport, flags="FA", seq=c.sseq, ack=c.cseq + 1),
        IP(src=CLIENT, dst=SERVER) / TCP(sport=c.sport, dport=c.dport, flags="A", seq=c.cseq + 1, ack=c.sseq + 1),
    ]
    return c.pkts


def exchange(sport, *msgs, dport=80):
    """A closed connection to `dport` from `sport`: each of `msgs` is
    (to_server, bytes), one segment each."""
    c = Conn(dport, sport=sport)
    for to_server, data in msgs:
        c.send(to_server, data)
    return close(c)


def get(target, host=b"www.example.com", extra=b"", method=b"GET", proto=b"HTTP/1.1"):
    return b"%s %s %s\r\nHost: %s\r\n%s\r\n" % (method, target, proto, host, extra)


def ok(body=b"", extra=b""):
    return b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (extra, len(body), body)


# ---------------------------------------------------------------- URI


def uri_dot_segments():
    # Path traversal: `.` and `..` segments, `//` runs and backslashes are
    # removed from http.uri (libhtp: path separators compressed, backslashes
    # converted), not from http.uri.raw.
    a = exchange(42001, (True, get(b"/static/img/../../etc/./passwd")), (False, ok(b"a")))
    b = exchange(42002, (True, get(b"/scripts\\..\\..\\winnt\\system32\\cmd.exe?/c+dir")), (False, ok(b"b")))
    c = exchange(42003, (True, get(b"/a//b///c/../../../../../../boot.ini")), (False, ok(b"c")))
    return a + b + c


def uri_percent():
    # %-encoding in the path: decoded in http.uri (%2f too: path separators
    # are decoded before the path is normalised), kept in http.uri.raw; an
    # invalid escape (%zz, a lone % at the end) stays as sent.
    a = exchange(42011, (True, get(b"/%61dmin/%2e%2e%2fsecret%2Fkey.txt")), (False, ok(b"a")))
    b = exchange(42012, (True, get(b"/bad%zzescape/x%4")), (False, ok(b"b")))
    c = exchange(42013, (True, get(b"/null%00byte.php.jpg")), (False, ok(b"c")))
    return a + b + c


def uri_u_encoding():
    # IIS-style %u encoding (the IDS personality decodes it in the path;
    # a code point over 0xff is replaced by its best-fit byte or `?`).
    a = exchange(42021, (True, get(b"/%u0063md.exe")), (False, ok(b"a")))
    b = exchange(42022, (True, get(b"/dir%u2215file")), (False, ok(b"b")))
    return a + b


def uri_query():
    # The query is not normalised as the path is: its `..`, `//` and `+`
    # stay.
    a = exchange(42031, (True, get(b"/search.php?q=a+b&path=..//..//etc&x=%41%42")), (False, ok(b"a")))
    b = exchange(42032, (True, get(b"/q//x/../y.php?u=/a/../b")), (False, ok(b"b")))
    return a + b


def uri_absolute():
    # An absolute-form target (as sent to proxies): http.uri is its path and
    # query, http.uri.raw the whole target; the host of the URI (lowercased,
    # without its port) wins over the Host header in http.host and in
    # http.host.raw. A target without a path has no http.uri at all.
    a = exchange(42041, (True, get(b"http://Proxy.Example.NET:8080/a/../admin.php?x=1", b"other.example")), (False, ok(b"a")))
    b = exchange(42042, (True, get(b"http://no-path.example", b"no-path.example")), (False, ok(b"b")))
    return a + b


# ---------------------------------------------------------------- headers


def header_folded():
    # An obs-fold continuation line (RFC 7230 3.2.4) continues the
    # previous field's value: libhtp appends the line (its leading
    # whitespace included, without the CRLF) to the value.
    req = (
        b"GET /fold HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: Mozilla/5.0\r\n"
        b"  (EvilBot; folded)\r\nX-Custom: one\r\n\ttwo\r\nAccept: */*\r\n\r\n"
    )
    return exchange(42051, (True, req), (False, ok(b"a")))


def header_name_odd():
    # Header names in odd case and with whitespace before the colon (the
    # name is trimmed, keeps its case, and still names User-Agent and Host);
    # an empty value; a value with surrounding whitespace (trimmed).
    req = (
        b"GET /odd HTTP/1.1\r\nhOST: www.example.com\r\nuSER-aGENT : sqlmap/1.7\r\n"
        b"X-Empty:\r\nAccept:   text/html   \r\n\r\n"
    )
    return exchange(42061, (True, req), (False, ok(b"a")))


def header_dup():
    # Repeated header fields are joined with ", " in http.header and in
    # http.cookie; names keep their first spelling.
    req = (
        b"GET /dup HTTP/1.1\r\nHost: www.example.com\r\nCookie: a=1\r\nX-Forwarded-For: 10.0.0.1\r\n"
        b"cookie: b=2\r\nx-forwarded-for: 127.0.0.1\r\nAccept: */*\r\n\r\n"
    )
    return exchange(42071, (True, req), (False, ok(b"a")))


def header_long():
    # A long (12000-byte) header value: the head spans nine segments.
    ua = b"Mozilla/5.0 " + b"A" * 12000 + b" LONG-UA-END"
    req = get(b"/long", extra=b"User-Agent: " + ua + b"\r\nAccept: */*\r\n")
    c = Conn(80, sport=42081)
    for i in range(0, len(req), 1400):
        c.send(True, req[i : i + 1400])
    c.send(False, ok(b"a"))
    return close(c)


def host_forms():
    # http.host: the Host header without its port; Suricata 7 keeps its case
    # (only a host taken from an absolute URI is lowercased, see
    # uri_absolute). http.host.raw: as sent. A request without Host has no
    # http.host.
    a = exchange(42091, (True, get(b"/h1", b"WWW.Evil-Host.COM:8080")), (False, ok(b"a")))
    b = exchange(42092, (True, b"GET /nohost HTTP/1.1\r\nUser-Agent: x\r\n\r\n"), (False, ok(b"b")))
    return a + b


# ---------------------------------------------------------------- framing


def cl_and_chunked():
    # Request smuggling shape: Content-Length and Transfer-Encoding: chunked
    # together; chunked wins, so the next request starts after the last
    # chunk, not after Content-Length bytes.
    body = b"5\r\nhello\r\n0\r\n\r\n"
    req1 = (
        b"POST /upload HTTP/1.1\r\nHost: www.example.com\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + body
    )
    req2 = get(b"/second-request")
    return exchange(42101, (True, req1 + req2), (False, ok(b"one") + ok(b"two")))


def chunk_ext_trailer():
    # Chunk extensions are skipped; a trailer after the last chunk ends the
    # message; the body is the chunks' data. The trailer's fields join the
    # response's headers (http.header: the response is one segment, parsed
    # whole before inspection).
    resp = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
        b"7;name=value\r\nCHUNK-A\r\n7 ; ext\r\nCHUNK-B\r\n0;last\r\nX-Checksum: abc\r\n\r\n"
    )
    return exchange(42111, (True, get(b"/first")), (False, resp), (True, get(b"/after-trailer")), (False, ok(b"z")))


def expect_continue():
    # Expect: 100-continue: the server's interim 100 response, then the
    # body, then the final response. The interim response is inspected too
    # (http.stat_code 100, its response line), in the same transaction.
    body = b"data=CONTINUED-BODY"
    head = (
        b"POST /form HTTP/1.1\r\nHost: www.example.com\r\nContent-Length: %d\r\n"
        b"Expect: 100-continue\r\n\r\n" % len(body)
    )
    return exchange(
        42121,
        (True, head),
        (False, b"HTTP/1.1 100 Continue\r\n\r\n"),
        (True, body),
        (False, ok(b"FINAL-RESPONSE-BODY")),
    )


def head_no_body():
    # A response to HEAD carries Content-Length but no body; the next
    # response on the connection follows at once.
    return exchange(
        42131,
        (True, get(b"/page", method=b"HEAD")),
        (False, b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 50\r\n\r\n"),
        (True, get(b"/next")),
        (False, ok(b"NEXT-BODY")),
    )


def no_body_status():
    # 204 and 304 responses have no body, whatever their headers say.
    return exchange(
        42141,
        (True, get(b"/a")),
        (False, b"HTTP/1.1 204 No Content\r\nServer: s1\r\n\r\n"),
        (True, get(b"/b")),
        (False, b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"),
        (True, get(b"/c")),
        (False, ok(b"THIRD-BODY")),
    )


def http10_keepalive():
    # HTTP/1.0 with Connection: keep-alive: two requests on a connection.
    req = b"GET /one HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    req2 = b"GET /two HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    resp = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\none"
    resp2 = b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\ntwo"
    return exchange(42151, (True, req), (False, resp), (True, req2), (False, resp2))


def other_methods():
    # PUT with a body, OPTIONS *, DELETE.
    body = b"<?php system($_GET['c']); ?>"
    put = b"PUT /uploads/shell.php HTTP/1.1\r\nHost: www.example.com\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    return exchange(
        42161,
        (True, put),
        (False, b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"),
        (True, get(b"*", method=b"OPTIONS")),
        (False, b"HTTP/1.1 200 OK\r\nAllow: GET, PUT\r\nContent-Length: 0\r\n\r\n"),
        (True, get(b"/uploads/old.txt", method=b"DELETE")),
        (False, b"HTTP/1.1 204 No Content\r\n\r\n"),
    )


def connect_method():
    # CONNECT: the target is an authority (host:port): http.uri.raw, no
    # http.uri. Refused (407), then accepted (200 without Content-Length: no
    # body, the tunnel starts after the head) and carrying a plain HTTP
    # exchange, parsed as HTTP.
    req = b"CONNECT secure.example.com:443 HTTP/1.1\r\nHost: secure.example.com:443\r\n\r\n"
    a = exchange(42171, (True, req), (False, b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"))
    b = exchange(
        42172,
        (True, b"CONNECT tunnel.example:80 HTTP/1.1\r\nHost: tunnel.example:80\r\n\r\n"),
        (False, b"HTTP/1.1 200 Connection established\r\n\r\n"),
        (True, get(b"/inside-tunnel", b"tunnel.example")),
        (False, ok(b"TUNNEL-BODY")),
    )
    return a + b


def method_lowercase():
    # A lower-case method: not a standard token, still an HTTP request
    # (Suricata's detection of HTTP by its methods ignores case); the method
    # is kept as sent.
    return exchange(42211, (True, b"get /lower-method HTTP/1.1\r\nHost: low.example\r\n\r\n"), (False, ok(b"LOWER-BODY")))


def http09():
    # An HTTP/0.9 request (no protocol, no headers: no http.protocol) and
    # its response (no status line: the body up to the close).
    return exchange(42221, (True, b"GET /http09-page\r\n"), (False, b"<html>NINE-BODY</html>"))


def dup_content_length():
    # Two Content-Length fields that disagree: the first one frames the
    # body and is http.content_len; they are not merged (http.header has the
    # first alone). Then one with whitespace around its value.
    return exchange(
        42231,
        (True, get(b"/dcl")),
        (False, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 9\r\n\r\nfive!"),
        (True, get(b"/after-dcl")),
        (False, ok(b"AFTER-DCL")),
        (True, get(b"/cl-ws")),
        (False, b"HTTP/1.1 200 OK\r\nContent-Length:  5 \r\n\r\nfive?"),
        (True, get(b"/after-cl-ws")),
        (False, ok(b"AFTER-WS")),
    )


def status_line_odd():
    # Status lines without a reason phrase (bsize:0 on http.stat_msg does
    # not match), with extra spaces (http.stat_msg starts after the spaces
    # following the code and keeps the trailing one; http.response_line is
    # as sent), with an unusual code.
    return exchange(
        42181,
        (True, get(b"/s1")),
        (False, b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok"),
        (True, get(b"/s2")),
        (False, b"HTTP/1.1 404  Not  Found \r\nContent-Length: 2\r\n\r\nnf"),
        (True, get(b"/s3")),
        (False, b"HTTP/1.1 599 Weird Status\r\nContent-Length: 2\r\n\r\nws"),
    )


def request_line_odd():
    # Request lines with extra spaces and a tab between the parts: the
    # method, target and protocol are the same as with single spaces;
    # http.request_line is as sent.
    a = exchange(42191, (True, b"GET  /two-spaces  HTTP/1.1\r\nHost: a.example\r\n\r\n"), (False, ok(b"a")))
    b = exchange(42192, (True, b"GET\t/tab-sep\tHTTP/1.1\r\nHost: b.example\r\n\r\n"), (False, ok(b"b")))
    return a + b


CAPTURES = {
    "httpedge-uri-dot-segments": uri_dot_segments,
    "httpedge-uri-percent": uri_percent,
    "httpedge-uri-u-encoding": uri_u_encoding,
    "httpedge-uri-query": uri_query,
    "httpedge-uri-absolute": uri_absolute,
    "httpedge-header-folded": header_folded,
    "httpedge-header-name-odd": header_name_odd,
    "httpedge-header-dup": header_dup,
    "httpedge-header-long": header_long,
    "httpedge-host-forms": host_forms,
    "httpedge-cl-and-chunked": cl_and_chunked,
    "httpedge-chunk-ext-trailer": chunk_ext_trailer,
    "httpedge-expect-continue": expect_continue,
    "httpedge-head-no-body": head_no_body,
    "httpedge-no-body-status": no_body_status,
    "httpedge-http10-keepalive": http10_keepalive,
    "httpedge-other-methods": other_methods,
    "httpedge-connect": connect_method,
    "httpedge-status-line-odd": status_line_odd,
    "httpedge-request-line-odd": request_line_odd,
    "httpedge-method-lowercase": method_lowercase,
    "httpedge-http09": http09,
    "httpedge-dup-content-length": dup_content_length,
}
