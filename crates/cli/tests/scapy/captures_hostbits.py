"""Scapy-built capture of the `hostbits` test (`kw-hostbits`; see captures.py).

Suricata 7's hostbits (detect-hostbits.c): `hostbits:OP,NAME[,src|dst]`,
the source's bit without a direction, kept 300 s after a set, in the same
host table as xbits tracked by `ip_src`/`ip_dst`. UDP datagrams (one
inspection each) between three hosts, with their times set here.
"""

from scapy.all import IP, UDP, Raw

from conn import CLIENT, SERVER

A, S, B = CLIENT, SERVER, "10.3.0.9"


def keeps_time(build):
    """Marks a builder that sets each packet's `time` itself (captures.py)."""
    build.keeps_time = True
    return build


def udp(src, dst, data, t, sport=5000, dport=7000):
    p = IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / Raw(data)
    p.time = t
    return p


@keeps_time
def kw_hostbits():
    return [
        # Before any set: A's DATA is not flagged, its DATA2 is (isnotset).
        udp(A, S, b"DATA one", 0),
        udp(A, S, b"DATA2 one", 0.5),
        # A logs in: its bit is set (noalert).
        udp(A, S, b"LOGIN", 1, sport=5001),
        # A's other flows see it, under hostbits and under xbits ip_src.
        udp(A, B, b"DATA two", 2, sport=5002),
        udp(A, B, b"DATA2 two", 2.5, sport=5002),
        # B has no bit.
        udp(B, S, b"DATA three", 3, sport=5003),
        udp(B, S, b"DATA2 three", 3.5, sport=5003),
        # `dst`: replies to A carry it, replies to B do not.
        udp(S, A, b"REPLY", 4, sport=7000, dport=5001),
        udp(S, B, b"REPLY", 4.5, sport=7000, dport=5003),
        # Well within 300 s: still set.
        udp(A, S, b"DATA four", 200, sport=5004),
        # 300 s after the set it has lapsed.
        udp(A, S, b"DATA five", 400, sport=5005),
        # Set again, then unset by A's LOGOUT: gone.
        udp(A, S, b"LOGIN", 401, sport=5006),
        udp(A, S, b"LOGOUT", 402, sport=5006),
        udp(A, S, b"DATA six", 403, sport=5007),
    ]


CAPTURES = {
    "kw-hostbits": kw_hostbits,
}
