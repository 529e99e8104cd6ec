"""Scapy-built captures of the `app-layer-protocol` tests (`alp-*`; see captures.py).

Each follows Suricata's documentation of the keyword (rules/app-layer.html,
"app-layer-protocol"): a protocol detected on a port that is not its own,
non-HTTP traffic on port 80 (the documentation's `!http` example), TLS,
DNS over UDP, SSH and SMTP sessions, the `failed` verdict, and near misses
(another protocol, a direction not detected yet).

Expectations are what Suricata 7.0.10 does with its stock suricata.yaml
(IDS mode: a direction's bytes reach protocol detection when the other side
acknowledges them). A rule whose only condition is the keyword (with the
header and a `flow` direction) is evaluated only on the packet carrying its
direction's "protocol detection done" flag, so it alerts at most once per
direction; a rule with other conditions (`flow:established`, a content)
sees the verdicts on every packet after them. Every session here ends with a
packet of each direction after the last verdict, so each flag has a packet
to land on; the bytes that must stay undecided are fewer than Suricata's
pattern search depth (17 bytes to the server on most ports).
"""

from scapy.all import DNS, DNSQR, DNSRR, IP, UDP, Raw

from captures_app import client_hello, exchange, http_get, ok, server_hello
from conn import CLIENT, SERVER


def alp_http_nonstd_port():
    # app-layer.html: the keyword matches the detected protocol, not the
    # port; HTTP on 8081 in two requests (the second gives the server's
    # verdict a packet of its direction to be flagged on).
    req = http_get(b"/evil.php?cmd=id", b"www.example.com")
    again = http_get(b"/index.html", b"www.example.com")
    return exchange(8081, 43001, (True, req), (False, ok(b"hi")), (True, again), (False, ok(b"ho")))


def alp_not_http_port80():
    # app-layer.html's example: non-HTTP traffic over port 80 matched by
    # `!http`. Both directions carry far more than the pattern search
    # depth without a match, so detection fails for the flow. A second flow
    # to port 80 carries 11 bytes only: still unknown, which no negation
    # matches.
    junk = b"\x00\x01BINARY-BLOB\x02\x03" + b"\x7f" * 600
    a = exchange(
        80,
        43002,
        (True, junk),
        (False, b"\xee" * 600),
        (True, b"NOTHTTP-MARK more bytes\r\n"),
        (False, b"\xee" * 40),
    )
    b = exchange(80, 43003, (True, b"XYZW junk\r\n"))
    return a + b


def alp_tls():
    # TLS on 8443: each direction's hello decides it; application data
    # follows both ways.
    appdata = b"\x17\x03\x03\x00\x05hello"
    return exchange(
        8443,
        43004,
        (True, client_hello(b"alp.example")),
        (False, server_hello()),
        (True, appdata),
        (False, appdata),
    )


def alp_dns_udp():
    # DNS over UDP on port 53 (a query and its answer), then datagrams that
    # are no DNS on another port: their detection fails.
    q = DNS(id=0x5151, rd=1, qd=DNSQR(qname="alp.example", qtype="A"))
    r = DNS(
        id=0x5151,
        qr=1,
        rd=1,
        ra=1,
        qd=DNSQR(qname="alp.example", qtype="A"),
        an=DNSRR(rrname="alp.example", rdata="192.0.2.7"),
    )
    return [
        IP(src=CLIENT, dst=SERVER) / UDP(sport=43005, dport=53) / q,
        IP(src=SERVER, dst=CLIENT) / UDP(sport=53, dport=43005) / r,
        IP(src=CLIENT, dst=SERVER) / UDP(sport=43006, dport=5555) / Raw(b"not dns at all, just bytes"),
        IP(src=SERVER, dst=CLIENT) / UDP(sport=5555, dport=43006) / Raw(b"neither is this reply"),
    ]


def alp_ssh():
    # SSH on 2222: the server's identification string first, then the
    # client's, then a binary packet each way.
    pkt = b"\x00\x00\x00\x0c\x0a\x14" + b"\x00" * 10
    return exchange(
        2222,
        43007,
        (False, b"SSH-2.0-OpenSSH_8.9p1\r\n"),
        (True, b"SSH-2.0-libssh_0.9.6\r\n"),
        (True, pkt),
        (False, pkt),
    )


def alp_smtp():
    # SMTP on 2525: the client's EHLO decides the client side; the
    # server's banner matches no pattern, so its side fails once the
    # client's is known (Suricata's "detected in one direction only").
    return exchange(
        2525,
        43008,
        (False, b"220 mail.example.org ESMTP\r\n"),
        (True, b"EHLO client.example\r\n"),
        (False, b"250 mail.example.org\r\n"),
        (True, b"MAIL FROM:<alp@bad.example>\r\n"),
        (False, b"250 OK\r\n"),
    )


CAPTURES = {
    "alp-http-nonstd-port": alp_http_nonstd_port,
    "alp-not-http-port80": alp_not_http_port80,
    "alp-tls": alp_tls,
    "alp-dns-udp": alp_dns_udp,
    "alp-ssh": alp_ssh,
    "alp-smtp": alp_smtp,
}
