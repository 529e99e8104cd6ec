"""Scapy-built captures of the application-layer event tests
(`dns-event-*`, `app-ssh-event-*`; see captures.py).

Each test loads the rules of Suricata's own dns-events.rules or
ssh-events.rules (ids as there) and carries messages that raise the events next to near misses that
must not. The expected alerts in each test's test.yaml are Suricata
7.0.10's.
"""

import struct

from captures_app import exchange
from captures_tlsdns import QUERY, dns_msg, dns_tcp, qname, question, rr, udp_q, udp_r

A_REC = rr(b"\xc0\x0c", 1, bytes([10, 0, 0, 9]))


def resp(id_, name, flags=0x8180):
    return dns_msg(id_, flags, qd=[question(qname(name))], an=[A_REC])


SSH_C = b"SSH-2.0-OpenSSH_9.6p1 Debian\r\n"
SSH_S = b"SSH-2.0-OpenSSH_9.2p1\r\n"


def ssh_pair(sport, server, client):
    """The server's banner, then the client's, each in one segment."""
    return exchange(22, sport, (False, server), (True, client))


def ssh_long_banners():
    # A client banner line of 308 bytes, a server's 308 bytes without a
    # line end, a server line of exactly 256 bytes (Suricata's
    # SSH_MAX_BANNER_LEN); near misses: 254 bytes, plain banners.
    return (
        ssh_pair(47002, SSH_S, b"SSH-2.0-" + b"A" * 300 + b"\r\n")
        + ssh_pair(47004, b"SSH-2.0-" + b"B" * 300, SSH_C)
        + ssh_pair(47008, b"SSH-2.0-" + b"C" * 248 + b"\r\n", SSH_C)
        + ssh_pair(47007, b"SSH-2.0-" + b"C" * 246 + b"\r\n", SSH_C)
        + ssh_pair(47003, SSH_S, SSH_C)
    )


def ssh_event_banner():
    # rust/src/ssh/ssh.rs parse_banner: a banner without `-` after its
    # version (`SSH-2.0`, `SSH-`) is invalid, and its parse error stops
    # the flow's parsing (the client's long banner after it raises
    # nothing); a lone CR ends the line (`SSH-2.0-x` is the banner, valid).
    return (
        ssh_pair(47001, b"SSH-2.0\r\n", SSH_C)
        + ssh_pair(47005, b"SSH-\r\n", SSH_C)
        + ssh_pair(47009, b"SSH-2.0\r\n", b"SSH-2.0-" + b"A" * 300 + b"\r\n")
        + ssh_pair(47006, b"SSH-2.0-x\rmore\r\n", SSH_C)
        + ssh_long_banners()
    )


def udp_pair(sport, q, r):
    """A query from `sport` to port 53 and its answer."""
    return [udp_q(sport, q), udp_r(sport, r)]


def dns_event_udp_flags():
    # Z flag (0x0040) set in a query, then in a response; opcode 7 and 15
    # (not assigned: Suricata's "invalid opcode" is >= 7) in queries.
    # Near misses: AD (0x0020) and CD (0x0010), its neighbours; opcode 6
    # (DSO), the last assigned one.
    z_q = dns_msg(0x3001, QUERY | 0x0040, qd=[question(qname("z-query.example"))])
    z_r = resp(0x3002, "z-resp.example", 0x8180 | 0x0040)
    ok_q = lambda i, n: dns_msg(i, QUERY, qd=[question(qname(n))])  # noqa: E731
    ad_q = dns_msg(0x3003, QUERY | 0x0030, qd=[question(qname("ad-cd.example"))])
    op7 = dns_msg(0x3004, QUERY | (7 << 11), qd=[question(qname("op7.example"))])
    op15 = dns_msg(0x3005, QUERY | (15 << 11), qd=[question(qname("op15.example"))])
    op6 = dns_msg(0x3006, QUERY | (6 << 11), qd=[question(qname("op6.example"))])
    return (
        udp_pair(46001, z_q, resp(0x3001, "z-query.example"))
        + udp_pair(46002, ok_q(0x3002, "z-resp.example"), z_r)
        + udp_pair(46003, ad_q, resp(0x3003, "ad-cd.example", 0x81b0))
        + udp_pair(46004, op7, resp(0x3004, "op7.example", 0x8180 | (7 << 11)))
        + [udp_q(46005, op15)]
        + udp_pair(46006, op6, resp(0x3006, "op6.example", 0x8180 | (6 << 11)))
    )


def dns_event_udp_names():
    # A pointer to itself after a first pointer (an "infinite loop" that
    # Suricata cuts), two pointers pointing at each other (256 labels: too
    # many labels, the name truncated), a name of 1088 characters without
    # pointers (longer than 1025: too long). Near misses: a name of 1007
    # characters, a sound compressed response.
    self_ptr = struct.pack("!6H", 0x3101, QUERY, 1, 0, 0, 0) + b"\xc0\x0e\xc0\x0e\x00\x01"
    two = dns_msg(0x3102, QUERY, qd=[question(b"\xc0\x0e\xc0\x0c")])
    longn = dns_msg(0x3103, QUERY, qd=[question(b"".join(b"\x3f" + bytes([97 + i]) * 63 for i in range(17)) + b"\x00")])
    fine = dns_msg(0x3104, QUERY, qd=[question(b"".join(b"\x3f" + bytes([97 + i]) * 63 for i in range(15)) + b"\x0a" + b"z" * 10 + b"\x00")])
    return (
        [udp_q(46101, self_ptr)]
        + [udp_q(46102, two)]
        + [udp_q(46103, longn)]
        + [udp_q(46104, fine)]
        + udp_pair(46105, dns_msg(0x3105, QUERY, qd=[question(qname("sound.example"))]), resp(0x3105, "sound.example"))
    )


def dns_event_udp_direction():
    # A query answered by a message with QR clear (not a response); a
    # query followed, from the client, by a message with QR set (not a
    # request); a query followed by a truncated query and a truncated
    # response (malformed data). Near miss: a plain exchange.
    q = lambda i, n: dns_msg(i, QUERY, qd=[question(qname(n))])  # noqa: E731
    notresp = dns_msg(0x3201, 0x0100, qd=[question(qname("nr.example"))], an=[A_REC])
    trunc_q = q(0x3203, "trunc.example")[:-3]
    trunc_r = resp(0x3203, "trunc.example")[:-2]
    return (
        udp_pair(46201, q(0x3201, "nr.example"), notresp)
        + [udp_q(46202, q(0x3202, "nq.example")), udp_q(46202, resp(0x3202, "nq.example"))]
        + [udp_q(46203, q(0x3203, "trunc.example")), udp_q(46203, trunc_q), udp_r(46203, trunc_r)]
        + udp_pair(46204, q(0x3204, "plain.example"), resp(0x3204, "plain.example"))
    )


def dns_event_tcp():
    # The same events over TCP: Z flag, opcode 7, a pointer to itself, a
    # response with QR clear; a sound exchange.
    z_q = dns_msg(0x3301, QUERY | 0x0040, qd=[question(qname("tz.example"))])
    op7 = dns_msg(0x3302, QUERY | (7 << 11), qd=[question(qname("top7.example"))])
    self_ptr = struct.pack("!6H", 0x3303, QUERY, 1, 0, 0, 0) + b"\xc0\x0e\xc0\x0e\x00\x01"
    q4 = dns_msg(0x3304, QUERY, qd=[question(qname("tnr.example"))])
    nr = dns_msg(0x3304, 0x0100, qd=[question(qname("tnr.example"))], an=[A_REC])
    q5 = dns_msg(0x3305, QUERY, qd=[question(qname("tok.example"))])
    return (
        exchange(53, 46301, (True, dns_tcp(z_q)), (False, dns_tcp(resp(0x3301, "tz.example"))))
        + exchange(53, 46302, (True, dns_tcp(op7)), (False, dns_tcp(resp(0x3302, "top7.example", 0x8180 | (7 << 11)))))
        + exchange(53, 46303, (True, dns_tcp(self_ptr)))
        + exchange(53, 46304, (True, dns_tcp(q4)), (False, dns_tcp(nr)))
        + exchange(53, 46305, (True, dns_tcp(q5)), (False, dns_tcp(resp(0x3305, "tok.example"))))
    )


def dns_event_tcp_pipelined():
    # Suricata 7.0.10 sets "malformed data", "not a request" and "not a
    # response" on the transaction before the message's, so that they are
    # seen only when that one comes in the same segment: a query then a
    # truncated query; a query then a response, to the server; a response
    # then a message with QR clear, to the client; a response then a
    # truncated response. Near misses: the same messages alone in their
    # segments.
    q = lambda i, n: dns_msg(i, QUERY, qd=[question(qname(n))])  # noqa: E731
    nr = lambda i, n: dns_msg(i, 0x0100, qd=[question(qname(n))], an=[A_REC])  # noqa: E731
    trunc = lambda m: m[:-3]  # noqa: E731
    return (
        exchange(53, 46401, (True, dns_tcp(q(0x3401, "a.example")) + dns_tcp(trunc(q(0x3402, "b.example")))))
        + exchange(53, 46402, (True, dns_tcp(q(0x3403, "c.example")) + dns_tcp(resp(0x3403, "c.example"))))
        + exchange(
            53,
            46403,
            (True, dns_tcp(q(0x3404, "d.example"))),
            (False, dns_tcp(resp(0x3404, "d.example")) + dns_tcp(nr(0x3405, "e.example"))),
        )
        + exchange(
            53,
            46404,
            (True, dns_tcp(q(0x3406, "f.example"))),
            (False, dns_tcp(resp(0x3406, "f.example")) + dns_tcp(trunc(resp(0x3407, "g.example")))),
        )
        + exchange(53, 46405, (True, dns_tcp(q(0x3408, "h.example"))), (True, dns_tcp(trunc(q(0x3409, "i.example")))))
        + exchange(
            53,
            46406,
            (True, dns_tcp(q(0x340A, "j.example"))),
            (False, dns_tcp(resp(0x340A, "j.example"))),
            (False, dns_tcp(nr(0x340B, "k.example"))),
        )
    )


CAPTURES = {
    "dns-event-tcp-pipelined": dns_event_tcp_pipelined,
    "dns-event-udp-flags": dns_event_udp_flags,
    "dns-event-udp-names": dns_event_udp_names,
    "dns-event-udp-direction": dns_event_udp_direction,
    "dns-event-tcp": dns_event_tcp,
    "app-ssh-event-banner": ssh_event_banner,
    "app-ssh-event-long-banner-ips": ssh_long_banners,
}
