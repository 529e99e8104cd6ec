"""Scapy-built captures of the HTTP body inspection tests (`app-http-body-*`;
see captures.py).

Each builder follows an example or setting of Suricata's documentation
(docs.suricata.io: rules/http-keywords.html for http.request_body,
http.response_body and file.data, rules/payload-keywords.html for bsize,
endswith, isdataat and pcre, rules/transforms.html for to_md5, and the
libhtp section of suricata.yaml: request-body-limit / response-body-limit
100kb, request-body-minimal-inspect-size 32kb, response-body-minimal-
inspect-size 40kb, response-body-inspect-window 16kb, randomized by +-10%
as randomize-inspection-sizes defaults to yes); the expected alerts in
each test's test.yaml are Suricata 7.0's. Bodies are cut over several TCP
segments; every connection is closed with a FIN both ways. Where a rule
names a body's length (`bsize`) or digest, the builder checks it against
test.rules, so the capture and the rules cannot drift apart.
"""

import gzip
import hashlib
import os
import random

from scapy.all import IP, TCP

from conn import CLIENT, SERVER, Conn

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- helpers


def close(c, server_first=False):
    """Closes connection `c`: a FIN from one side (the client's, or the
    server's when `server_first`), the other side's FIN-ACK, the last ACK."""
    cli = lambda flags, seq, ack: (  # noqa: E731
        IP(src=CLIENT, dst=SERVER) / TCP(sport=c.sport, dport=c.dport, flags=flags, seq=seq, ack=ack)
    )
    srv = lambda flags, seq, ack: (  # noqa: E731
        IP(src=SERVER, dst=CLIENT) / TCP(sport=c.dport, dport=c.sport, flags=flags, seq=seq, ack=ack)
    )
    if server_first:
        c.pkts += [
            srv("FA", c.sseq, c.cseq),
            cli("FA", c.cseq, c.sseq + 1),
            srv("A", c.sseq + 1, c.cseq + 1),
        ]
    else:
        c.pkts += [
            cli("FA", c.cseq, c.sseq),
            srv("FA", c.sseq, c.cseq + 1),
            cli("A", c.cseq + 1, c.sseq + 1),
        ]
    return c.pkts


def segments(c, to_server, data, cuts):
    """Sends `data` on `c` cut at the offsets `cuts`, one segment each."""
    at = 0
    for cut in list(cuts) + [len(data)]:
        c.send(to_server, data[at:cut])
        at = cut
    return c


def every(c, to_server, data, size):
    """Sends `data` on `c` in segments of `size` bytes."""
    return segments(c, to_server, data, range(size, len(data), size))


def need_md5(test, *data):
    """Checks that the MD5 of each of `data` is a content of the test's
    rules, as Suricata's to_md5 gives it (the raw digest)."""
    rules = rules_of(test)
    for d in data:
        hexc = "|" + " ".join("%02X" % b for b in hashlib.md5(d).digest()) + "|"
        assert hexc in rules, "%s/test.rules lacks %s" % (test, hexc)


def rules_of(test):
    with open(os.path.join(HERE, test, "test.rules")) as f:
        return f.read()


def need_bsize(test, *sizes):
    """Checks that each size is a `bsize:N;` of the test's rules."""
    rules = rules_of(test)
    for n in sizes:
        assert "bsize:%d;" % n in rules, "%s/test.rules lacks bsize:%d;" % (test, n)


def get(path, host, version=b"1.1", extra=b""):
    return b"GET %s HTTP/%s\r\nHost: %s\r\n%s\r\n" % (path, version, host, extra)


def post(path, host, body, extra=b""):
    return (
        b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"%sContent-Length: %d\r\n\r\n%s" % (path, host, extra, len(body), body)
    )


def ok(body, status=b"200 OK", extra=b""):
    return b"HTTP/1.1 %s\r\nContent-Type: text/html\r\n%sContent-Length: %d\r\n\r\n%s" % (
        status,
        extra,
        len(body),
        body,
    )


def chunked(*pieces):
    """The chunked encoding of `pieces`, one chunk each (no last chunk)."""
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


# ---------------------------------------------------------------- tests


REQ_BODY = [b"cmd=run&payload=EVIL-RE", b"QUEST-BODY&mode=fast&tail=", b"end-of-request-XYZ"]


def request_split():
    # http-keywords.html http.request_body example (sid 115: `flow:
    # established,to_server; http.request_body; content:"Suricata request
    # body";`), with a Content-Length body cut over three segments (the
    # head with its first part): payload-keywords.html bsize, endswith,
    # isdataat (`isdataat:!1,relative`), negated content and pcre ("$"),
    # which Suricata evaluates on the whole body; http.method / http.uri
    # with the body in one rule.
    body = b"".join(REQ_BODY)
    need_bsize("app-http-body-request-split", len(body), len(REQ_BODY[0]))
    head = post(b"/upload.php?dir=tmp", b"upload.example", body)[: -len(body)]
    c = Conn(80, sport=43001)
    c.send(True, head + REQ_BODY[0]).send(True, REQ_BODY[1]).send(True, REQ_BODY[2])
    c.send(False, ok(b"stored"))
    return close(c)


RESP_CHUNKS = [b"<html>", b"DROPPER-P", b"AYLOAD-", b"SIGNATURE</html>"]
REQ_CHUNKS = [b"a=1&exec=", b"rm%20-rf%20", b"/var/www"]


def chunked_split():
    # http-keywords.html file.data example (sid 128) and http.response_body:
    # the dechunked body of a chunked response whose chunk boundaries fall
    # inside the signature, a chunk's data cut across segments and the last
    # (0) chunk in a packet of its own; the same for a chunked request body
    # (http.request_body). bsize / endswith / negated content / pcre "$"
    # see the whole dechunked body once the last chunk came.
    body = b"".join(RESP_CHUNKS)
    req_body = b"".join(REQ_CHUNKS)
    partial = len(body) - len(b"TURE</html>")
    need_bsize("app-http-body-chunked", len(body), partial, len(req_body), len(REQ_CHUNKS[0]))
    c = Conn(80, sport=43011)
    c.send(True, get(b"/index.html", b"chunks.example"))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
    wire = chunked(*RESP_CHUNKS)
    # Cut inside the last chunk's data: "...SIGNA" | "TURE</html>\r\n".
    cut1 = len(chunked(*RESP_CHUNKS[:2]))
    cut2 = wire.index(b"SIGNA") + len(b"SIGNA")
    c.send(False, head + wire[:cut1]).send(False, wire[cut1:cut2]).send(False, wire[cut2:])
    c.send(False, b"0\r\n\r\n")
    # A chunked POST on the same connection.
    rhead = (
        b"POST /run HTTP/1.1\r\nHost: chunks.example\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    c.send(True, rhead + chunked(REQ_CHUNKS[0]))
    c.send(True, chunked(*REQ_CHUNKS[1:]))
    c.send(True, b"0\r\n\r\n")
    c.send(False, ok(b"done"))
    return close(c)


CLOSE_BODY = [b"stream-start;", b"LEAKED-", b"SECRET;stream-end"]


def close_delimited():
    # http-keywords.html http.response_body / file.data examples on an
    # HTTP/1.0 response with neither Content-Length nor chunking: its body
    # ends when the server closes the connection (RFC 9112 6.3), so
    # Suricata inspects it whole at the close (the FIN's end of stream).
    # bsize / endswith / negated content / isdataat:! / pcre "$" must see
    # the whole body, not the first segments.
    # transforms.html to_md5: the digest of the whole body, not of its
    # first segment.
    body = b"".join(CLOSE_BODY)
    need_bsize("app-http-body-close-delimited", len(body), len(CLOSE_BODY[0]))
    need_md5("app-http-body-close-delimited", body, CLOSE_BODY[0])
    c = Conn(80, sport=43021)
    c.send(True, get(b"/stream", b"close.example", b"1.0"))
    head = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    c.send(False, head + CLOSE_BODY[0]).send(False, CLOSE_BODY[1]).send(False, CLOSE_BODY[2])
    return close(c, server_first=True)


TRUNC_RESP = [b"part-one;", b"TRUNCATED;BODY-END"]
TRUNC_REQ = [b"abc;", b"REQ-TRUNC"]


def truncated():
    # http-keywords.html file.data / http.request_body examples on bodies
    # cut short: a Content-Length of 100 of which only the first bytes come
    # before the connection closes (the server's FIN for the response, the
    # client's for the request). Suricata inspects the body it has at the
    # end of the stream (the FIN's end of stream, as when the body is
    # whole), so bsize / endswith / negated content / pcre "$" see those
    # bytes.
    body, req_body = b"".join(TRUNC_RESP), b"".join(TRUNC_REQ)
    need_bsize("app-http-body-truncated", len(body), len(req_body), 100)
    c = Conn(80, sport=43071).send(True, get(b"/partial", b"trunc.example"))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n"
    c.send(False, head + TRUNC_RESP[0]).send(False, TRUNC_RESP[1])
    close(c, server_first=True)
    d = Conn(80, sport=43072)
    req = post(b"/upload", b"trunc.example", b"x" * 100)[:-100]
    d.send(True, req + TRUNC_REQ[0]).send(True, TRUNC_REQ[1])
    close(d)
    return c.pkts + d.pkts


KA_REQS = [b"id=1&cmd=PING-ALPHA", b"id=2&cmd=EXEC-BRAVO"]
KA_RESPS = [b"result=ALPHA-OK", b"result=BRAVO-DENIED"]


def keepalive():
    # http-keywords.html http.request_body (sid 115) and http.response_body
    # (sid 120) examples on a keep-alive connection: two POSTs one after the
    # other, each body cut over two segments, each answered with a body;
    # body buffers and head buffers are per transaction (one alert per
    # transaction and rule), bodies of two transactions are not joined.
    need_bsize("app-http-body-keepalive", len(KA_REQS[0]), len(KA_REQS[0]) * 2)
    assert len(KA_REQS[0]) == len(KA_REQS[1])
    c = Conn(80, sport=43031)
    for i, (path, status) in enumerate([(b"/api/one", b"200 OK"), (b"/api/two", b"403 Forbidden")]):
        req = post(path, b"api.example", KA_REQS[i], b"Connection: keep-alive\r\n")
        segments(c, True, req, [len(req) - 10])
        resp = ok(KA_RESPS[i], status)
        segments(c, False, resp, [len(resp) - 6])
    return close(c)


def gzip_page():
    rnd = random.Random(11)
    words = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf"]
    page = b"<html><body>" + b" ".join(rnd.choice(words) for _ in range(1500))
    page += b" GZIP-HIDDEN-MARKER "
    page += b" ".join(rnd.choice(words) for _ in range(500)) + b"</body></html>"
    return page


def gzip_split():
    # http-keywords.html file.data note ("If an HTTP body is using gzip or
    # deflate, file.data will match on the decompressed data") and
    # suricata.yaml's libhtp response-body-decompress-layer-limit: a gzip
    # response with Content-Length cut over four segments; bsize is the
    # inflated length, the compressed bytes are not the body.
    page = gzip_page()
    z = gzip.compress(page, mtime=0)
    need_bsize("app-http-body-gzip-split", len(page), len(z))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n"
    resp = head + b"Content-Length: %d\r\n\r\n" % len(z) + z
    hl = len(resp) - len(z)
    q = len(z) // 4
    c = Conn(80, sport=43041)
    c.send(True, get(b"/page.html", b"gzip.example", extra=b"Accept-Encoding: gzip\r\n"))
    segments(c, False, resp, [hl + q, hl + 2 * q, hl + 3 * q])
    return close(c)


def filler(n, seed):
    """`n` bytes of printable filler without the tests' markers."""
    rnd = random.Random(seed)
    return bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(n))


LARGE = 60000
HUGE = 120 * 1024
REQ_LARGE = 40000


def large():
    # suricata.yaml libhtp: response-body-minimal-inspect-size 40kb,
    # response-body-inspect-window 16kb, response-body-limit 100kb,
    # request-body-minimal-inspect-size 32kb, request-body-limit 100kb.
    # A 60000-byte response body, its signature near the end (past the
    # first 40 KiB); a 120 KiB response body, a signature before the
    # 100 KiB limit and one past it (Suricata keeps no body past the
    # limit); a 40000-byte request body, its signature near the end.
    # Suricata inspects a body first once it holds the minimal inspect
    # size (randomized by +-10%, randomize-inspection-sizes: yes), then
    # only a window before each packet's new bytes: the markers are placed
    # so that the outcome holds for any size in that range.
    need_bsize("app-http-body-large", LARGE, REQ_LARGE)
    body = bytearray(filler(LARGE, 1))
    body[:9] = b"HEAD-MARK"
    body[LARGE - 1000 : LARGE - 1000 + 12] = b"NEAR-END-SIG"
    body[-9:] = b"TAIL-MARK"
    a = Conn(80, sport=43051).send(True, get(b"/big.bin", b"large.example"))
    every(a, False, ok(bytes(body)), 1460)
    close(a)

    huge = bytearray(filler(HUGE, 2))
    huge[90 * 1024 : 90 * 1024 + 16] = b"BEFORE-LIMIT-SIG"
    huge[110 * 1024 : 110 * 1024 + 14] = b"PAST-LIMIT-SIG"
    b = Conn(80, sport=43052).send(True, get(b"/huge.bin", b"large.example"))
    every(b, False, ok(bytes(huge)), 1460)
    close(b)

    req = bytearray(filler(REQ_LARGE, 3))
    req[:8] = b"REQ-HEAD"
    req[REQ_LARGE - 500 : REQ_LARGE - 500 + 12] = b"REQ-NEAR-END"
    d = Conn(80, sport=43053)
    every(d, True, post(b"/bigpost", b"large.example", bytes(req)), 1460)
    d.send(False, ok(b"ok"))
    close(d)
    return a.pkts + b.pkts + d.pkts


MIX_BODY = [b"name=report.pdf&data=", b"MIXED-SIG", b"&data2=MIXED-SIG&end"]


def head_and_body():
    # http-keywords.html: rules naming a head buffer (http.uri, http.host,
    # http.method, http.stat_code, http.content_type) and a body buffer
    # (http.request_body, file.data) match within one transaction; flow:
    # to_server / to_client pick the direction; a signature found twice in
    # a body, in different segments, raises one alert (one per transaction
    # and rule).
    c = Conn(80, sport=43061)
    body = b"".join(MIX_BODY)
    req = post(b"/submit.cgi?x=1", b"mix.example", body)
    hl = len(req) - len(body)
    segments(c, True, req, [hl + len(MIX_BODY[0]) + 4, hl + len(MIX_BODY[0]) + len(MIX_BODY[1]) + 9])
    resp = ok(b"<p>saved: MIXED-SIG</p><p>again MIXED-SIG</p>", b"201 Created", b"Server: mixd\r\n")
    segments(c, False, resp, [len(resp) - 30, len(resp) - 12])
    # A second transaction: a GET without body, a 404 with one.
    c.send(True, get(b"/missing", b"mix.example"))
    nf = b"not here: MIXED-SIG"
    nf_head = b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
    c.send(False, nf_head % len(nf) + nf)
    return close(c)


CAPTURES = {
    "app-http-body-request-split": request_split,
    "app-http-body-chunked": chunked_split,
    "app-http-body-close-delimited": close_delimited,
    "app-http-body-truncated": truncated,
    "app-http-body-keepalive": keepalive,
    "app-http-body-gzip-split": gzip_split,
    "app-http-body-large": large,
    "app-http-body-head-mix": head_and_body,
}
