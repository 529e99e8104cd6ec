"""Scapy-built captures of the thresholding tests (`kw-threshold-*`; see captures.py).

Each builder follows Suricata's documentation of the thresholding keywords
(docs.suricata.io, rules/thresholding.html): the example rule of each type
(`type threshold`: "ET POLICY Inbound Frequent Emails", sid 2002087;
`type limit`: "ET INFO Internet Explorer 6 in use", sid 2010706; `type
both`: "ET VOIP Multiple Unauthorized SIP Responses TCP", sid 2003194;
detection_filter: "WebResource.axd access without t (time) parameter", sid
2011807), carried over raw TCP payloads with smaller counts, and its table of
`track` options (by_src, by_dst, by_rule, by_both: the two addresses either
way, by_flow). The first comment of each builder says which. UDP datagrams
and ICMP echoes count the same way.

The expected alerts in each test.yaml are Suricata's, checked by running
Suricata 7.0.10 (--runmode=single, so that the matches of several flows are
counted in packet order) over the same capture. by_flow, and detection_filter
by_rule and by_both, are Suricata 8's (7.0 rejects them), so
kw-threshold-v8-tracks follows the documentation and the source instead.
Where the documentation says nothing they follow
src/detect-engine-threshold.c: a window starts at the first match and a
match at most `seconds` after it (SCTIME_CMP_LTE: exactly `seconds` is still
in) counts in it; `limit` alerts on the first `count` matches of a window;
`threshold` on the count-th, then counts from zero in the same window;
`both` on the count-th only; detection_filter on every match after the
count-th; a later match starts a new window, counting 1.

Three hosts: A and B (CLIENT and SERVER of conn.py) talk both ways, C is a
third. TCP payloads travel each in one segment of its own connection, closed
with a FIN both ways; the TCP rules have no depth or offset (with one,
Suricata 7 matches a segment twice, in the packet and in the stream, and
counts both). The window test's builder sets each packet's time itself
(`keeps_time`); the others leave it to captures.py (1 ms apart).
"""

from scapy.all import ICMP, IP, TCP, UDP, Raw

from conn import CLIENT, SERVER

A, B, C = CLIENT, SERVER, "10.3.0.9"


def keeps_time(build):
    """Marks a builder that sets each packet's `time` (seconds from the
    capture's start) itself: captures.py keeps it."""
    build.keeps_time = True
    return build


def udp(src, dst, data, sport=5000, dport=7000):
    return IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / Raw(data)


def echo(src, dst, data, ident=1, seq=1, reply=False):
    """An ICMP echo request (or its reply)."""
    return IP(src=src, dst=dst) / ICMP(type=0 if reply else 8, id=ident, seq=seq) / Raw(data)


def tcp(src, dst, sport, dport, *msgs):
    """A connection from src:sport to dst:dport: the handshake, each
    (to_server, data) of `msgs` in one segment the other side acknowledges,
    then a FIN both ways."""
    cseq, sseq = 1000, 50000

    def c2s(flags, data=b""):
        p = IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags=flags, seq=cseq, ack=sseq)
        return p / Raw(data) if data else p

    def s2c(flags, data=b""):
        p = IP(src=dst, dst=src) / TCP(sport=dport, dport=sport, flags=flags, seq=sseq, ack=cseq)
        return p / Raw(data) if data else p

    pkts = [IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags="S", seq=cseq)]
    cseq += 1
    pkts.append(s2c("SA"))
    sseq += 1
    pkts.append(c2s("A"))
    for to_server, data in msgs:
        if to_server:
            pkts.append(c2s("PA", data))
            cseq += len(data)
            pkts.append(s2c("A"))
        else:
            pkts.append(s2c("PA", data))
            sseq += len(data)
            pkts.append(c2s("A"))
    pkts.append(c2s("FA"))
    cseq += 1
    pkts.append(s2c("FA"))
    sseq += 1
    pkts.append(c2s("A"))
    return pkts


def limit():
    # thresholding.html, type "limit": `threshold: type limit, track by_src,
    # seconds 180, count 1;` on "MSIE 6.0" in the User-Agent (sid 2010706,
    # here a raw TCP content): one alert per source host. Then limit with
    # each track of the table, over UDP and ICMP echoes.
    ua = (
        b"GET / HTTP/1.1\r\nHost: a.example\r\n"
        b"User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)\r\n\r\n"
    )
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    pkts = []
    for i, src in enumerate([A, A, C, A, C]):
        pkts += tcp(src, B, 44000 + i, 80, (True, ua), (False, ok))
    # by_src, count 2: A 3, C 3, B 1 (the other way).
    for src, dst in [(A, B), (C, B), (A, B), (B, A), (C, B), (A, B), (C, B)]:
        pkts.append(udp(src, dst, b"LIM-SRC", dport=7001))
    # by_dst, count 1: to B 4 times, to C twice.
    for src, dst in [(A, B), (C, B), (A, C), (A, B), (A, C), (C, B)]:
        pkts.append(udp(src, dst, b"LIM-DST", dport=7002))
    # by_rule, count 3: 6 matches between all three.
    for src, dst in [(A, B), (C, B), (B, A), (A, C), (B, C), (C, A)]:
        pkts.append(udp(src, dst, b"LIM-RULE", dport=7003))
    # by_both, count 2: A and B 4 times (2 each way, A first), B and C 3
    # times (C first).
    for src, dst in [(A, B), (A, B), (B, A), (B, A), (C, B), (B, C), (B, C)]:
        pkts.append(udp(src, dst, b"LIM-BOTH", sport=7004, dport=7004))
    # ICMP echo by_dst, count 2: 3 requests A to B, 1 C to B, the replies.
    for seq, src in enumerate([A, C, A, A], 1):
        pkts += [echo(src, B, b"LIM-PING", seq=seq), echo(B, src, b"LIM-PING", seq=seq, reply=True)]
    return pkts


def threshold():
    # thresholding.html, type "threshold": `threshold: type threshold, track
    # by_src, count 10, seconds 60;` on "mail from|3a|" to port 25 (sid
    # 2002087, count 3 here): an alert at every 3rd email of a server, none
    # for one sending fewer. Then each track over UDP and ICMP echoes.
    mail = b"MAIL FROM:<spam@bulk.example>\r\n"
    pkts = []
    for i, src in enumerate([A, A, C, A, A, A, C, A, A]):
        pkts += tcp(src, B, 45000 + i, 25, (True, mail), (False, b"250 OK\r\n"))
    # by_dst, count 2: to B 5 times, to C once.
    for src, dst in [(A, B), (C, B), (A, C), (A, B), (C, B), (A, B)]:
        pkts.append(udp(src, dst, b"THR-DST", dport=7012))
    # by_rule, count 4: 9 matches between all three.
    for src, dst in [(A, B), (C, B), (B, A), (A, C), (B, C), (C, A), (A, B), (B, A), (C, B)]:
        pkts.append(udp(src, dst, b"THR-RULE", dport=7013))
    # by_both, count 3: A and B 6 times either way, B and C twice.
    for src, dst in [(A, B), (B, A), (B, A), (C, B), (A, B), (B, C), (B, A), (A, B)]:
        pkts.append(udp(src, dst, b"THR-BOTH", sport=7014, dport=7014))
    # count 1: every match.
    for src in [A, C, A]:
        pkts.append(udp(src, B, b"THR-ONE", dport=7016))
    # count 5 by_src: 4 matches from A, never reached.
    for _ in range(4):
        pkts.append(udp(A, B, b"THR-FIVE", dport=7017))
    # ICMP echo by_src, count 2: 5 requests A to B, 1 C to B, the replies.
    for seq, src in enumerate([A, A, C, A, A, A], 1):
        pkts += [echo(src, B, b"THR-PING", seq=seq), echo(B, src, b"THR-PING", seq=seq, reply=True)]
    return pkts


def both():
    # thresholding.html, type "both": `threshold: type both, track by_src,
    # count 5, seconds 360;` on "SIP/2.0 401 Unauthorized" from port 5060
    # (sid 2003194, without its depth:24): one alert, at the 5th response from the server, however
    # many follow; by_dst (count 3) counts each client. Then each track over
    # UDP and ICMP echoes.
    reg = b"REGISTER sip:b.example SIP/2.0\r\n\r\n"
    unauth = b"SIP/2.0 401 Unauthorized\r\n\r\n"
    pkts = []
    for i, src in enumerate([A, A, C, A, A, C, A, A]):
        pkts += tcp(src, B, 46000 + i, 5060, (True, reg), (False, unauth))
    # by_rule, count 2: 4 matches.
    for src, dst in [(A, B), (C, B), (B, A), (A, C)]:
        pkts.append(udp(src, dst, b"BOTH-RULE", dport=7023))
    # by_both, count 2: A and B 3 times either way, B and C twice.
    for src, dst in [(A, B), (B, A), (C, B), (A, B), (B, C)]:
        pkts.append(udp(src, dst, b"BOTH-BOTH", sport=7024, dport=7024))
    # by_src, count 4: 3 matches from A, never reached.
    for _ in range(3):
        pkts.append(udp(A, B, b"BOTH-FOUR", dport=7026))
    # ICMP echo by_src, count 1: 3 requests A to B, 1 C to B, the replies.
    for seq, src in enumerate([A, A, C, A], 1):
        pkts.append(echo(src, B, b"BOTH-PING", seq=seq))
        pkts.append(echo(B, src, b"BOTH-PING", seq=seq, reply=True))
    return pkts


@keeps_time
def window():
    # thresholding.html: "Specify seconds to control the number of alerts per
    # time period"; each type's window over packet time (UDP from A to B,
    # ICMP echoes), the matches spread past `seconds`. Times in seconds.
    timed = []
    for t in [0, 5, 11, 15, 21.5]:  # limit count 1 seconds 10
        timed.append((t, udp(A, B, b"WIN-LIMIT", dport=7031)))
    for t in [0.5, 10.5]:  # limit count 1 seconds 10: exactly 10 s apart
        timed.append((t, udp(A, B, b"WIN-EDGE", dport=7032)))
    for t in [0.7, 10.3]:  # limit count 1 seconds 10: 9.6 s apart
        timed.append((t, udp(A, B, b"WIN-FRAC", dport=7033)))
    for t in [1.25, 11.25]:  # threshold count 2 seconds 10: exactly 10 s apart
        timed.append((t, udp(A, B, b"WIN-EDGE-THR", dport=7039)))
    for t in [1.75, 11.75]:  # detection_filter count 1 seconds 10: the same
        timed.append((t, udp(A, B, b"WIN-EDGE-DF", dport=7040)))
    for t in [0, 4, 8, 11, 13]:  # threshold count 2 seconds 10
        timed.append((t, udp(A, B, b"WIN-THR", dport=7034)))
    for t in [0, 4, 8, 9]:  # threshold count 3 seconds 5
        timed.append((t, udp(A, B, b"WIN-THR3", dport=7035)))
    for t in [0, 3, 6, 12, 14, 15]:  # both count 2 seconds 10
        timed.append((t, udp(A, B, b"WIN-BOTH", dport=7036)))
    for t in [0, 1, 2, 3, 10.5, 11, 12]:  # detection_filter count 2 seconds 10
        timed.append((t, udp(A, B, b"WIN-DF", dport=7037)))
    for t, src in [(0, A), (5, C), (10.2, C)]:  # limit by_rule count 1 seconds 10
        timed.append((t, udp(src, B, b"WIN-RULE", dport=7038)))
    # ICMP echo, limit by_dst count 2 seconds 5, each answered.
    for seq, t in enumerate([0, 1, 2, 6, 7, 8], 1):
        timed.append((t + 0.0001, echo(A, B, b"WIN-PING", seq=seq)))
        timed.append((t + 0.0002, echo(B, A, b"WIN-PING", seq=seq, reply=True)))
    # Packets at the same time keep their order, 1 ms apart.
    timed.sort(key=lambda x: x[0])
    pkts, last = [], None
    for t, p in timed:
        t = max(t, last + 0.001) if last is not None else t
        p.time = round(t, 6)
        last = t
        pkts.append(p)
    return pkts


def detection_filter():
    # thresholding.html, detection_filter: `detection_filter:track
    # by_src,count 15,seconds 2;` on a GET of WebResource.axd without "&t="
    # (sid 2011807, count 3 here, "GET " without depth): an alert for every match after the 3rd
    # from a source; a request with "&t=" is no match and not counted. Then
    # each track over UDP and ICMP echoes.
    get = b"GET /WebResource.axd?d=abc HTTP/1.1\r\nHost: b.example\r\n\r\n"
    get_t = b"GET /WebResource.axd?d=abc&t=123 HTTP/1.1\r\nHost: b.example\r\n\r\n"
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    pkts = []
    reqs = [(A, get), (A, get), (C, get), (A, get_t), (A, get), (A, get), (C, get), (A, get)]
    for i, (src, req) in enumerate(reqs):
        pkts += tcp(src, B, 47000 + i, 80, (True, req), (False, ok))
    # by_dst, count 2: to B 4 times, to C twice.
    for src, dst in [(A, B), (A, C), (C, B), (A, B), (A, C), (C, B)]:
        pkts.append(udp(src, dst, b"DF-DST", dport=7042))
    # count 5 by_src: 5 matches from A, none after the 5th.
    for _ in range(5):
        pkts.append(udp(A, B, b"DF-FIVE", dport=7046))
    # ICMP echo by_src, count 1: 3 requests A to B, 1 C to B, the replies.
    for seq, src in enumerate([A, C, A, A], 1):
        pkts += [echo(src, B, b"DF-PING", seq=seq), echo(B, src, b"DF-PING", seq=seq, reply=True)]
    return pkts


def v8_tracks():
    # thresholding.html, track table: "by_flow | flow" (Suricata 8): a flow's
    # packets both ways count together, other flows between the same hosts
    # apart (UDP flows, ICMP echoes, TCP connections); and detection_filter's
    # syntax, `track <by_src|by_dst|by_rule|by_both|by_flow>` (Suricata 7
    # takes only by_src and by_dst there).
    pkts = []
    # limit count 1: flow 1 (A:5001 and B:7051, both ways) 4 matches, flow 2
    # (A:5002) twice, flow 3 (C:5001) once.
    for src, dst, sport, dport in [
        (A, B, 5001, 7051),
        (B, A, 7051, 5001),
        (A, B, 5002, 7051),
        (A, B, 5001, 7051),
        (C, B, 5001, 7051),
        (B, A, 7051, 5001),
        (A, B, 5002, 7051),
    ]:
        pkts.append(udp(src, dst, b"FLOW-LIM", sport=sport, dport=dport))
    # threshold count 2 over TCP: the request and the reply of one
    # connection make 2; a connection with only the request, none.
    pkts += tcp(A, B, 48001, 7052, (True, b"FLOW-THR req"), (False, b"FLOW-THR resp"))
    pkts += tcp(A, B, 48002, 7052, (True, b"FLOW-THR req"), (False, b"nothing"))
    # limit count 1 over ICMP echoes: Suricata's ICMP flow is the two
    # addresses and the echo's type and its counterpart (flow-hash.c), not
    # the id: A and B's echoes of id 1 and 2, requests and replies, are one
    # flow; C's another.
    for ident, src in [(1, A), (2, A), (1, C), (1, A)]:
        pkts.append(echo(src, B, b"FLOW-PING", ident=ident))
        pkts.append(echo(B, src, b"FLOW-PING", ident=ident, reply=True))
    # both count 2 over ICMP echoes: the 2nd match, a reply, alerts.
    for seq in (1, 2):
        pkts.append(echo(A, C, b"FLOW-BOTH", ident=9, seq=seq))
        pkts.append(echo(C, A, b"FLOW-BOTH", ident=9, seq=seq, reply=True))
    # detection_filter count 1: flow 1 3 matches, flow 2 one.
    for sport in [5011, 5011, 5012, 5011]:
        pkts.append(udp(A, B, b"FLOW-DF", sport=sport, dport=7054))
    # detection_filter by_rule, count 3: 5 matches between all three.
    for src, dst in [(A, B), (C, B), (B, A), (A, C), (B, C)]:
        pkts.append(udp(src, dst, b"DF-RULE", dport=7043))
    # detection_filter by_both, count 2: A and B 4 times either way, B and C
    # twice.
    for src, dst in [(A, B), (B, A), (C, B), (A, B), (B, C), (B, A)]:
        pkts.append(udp(src, dst, b"DF-BOTH", sport=7044, dport=7044))
    return pkts


CAPTURES = {
    "kw-threshold-limit": limit,
    "kw-threshold-threshold": threshold,
    "kw-threshold-both": both,
    "kw-threshold-window": window,
    "kw-threshold-detection-filter": detection_filter,
    "kw-threshold-v8-tracks": v8_tracks,
}
