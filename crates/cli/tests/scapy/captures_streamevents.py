"""Scapy-built captures of the `stream-event` tests (directories
`stream-event-*`; see captures.py).

Each builds the TCP anomaly one of Suricata's stream events names
(src/stream-tcp.c, the event it sets and the state it sets it in), with a
near miss beside it that raises no event. The expected counts are
Suricata's; every one was also checked by running Suricata 7.0.10 over the
same capture. A test whose name says `ips` runs Suricata inline, as
Sluice always is (two events are raised only inline).
"""

from scapy.all import IP, TCP, Raw

from conn import CLIENT, SERVER

ISN_C, ISN_S = 1000, 50000


def c2s(sport, flags, seq, ack=0, data=b"", dport=4444, **kw):
    """A client segment."""
    tcp = TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, **kw)
    return IP(src=CLIENT, dst=SERVER) / tcp / (Raw(data) if data else b"")


def s2c(sport, flags, seq, ack=0, data=b"", dport=4444, **kw):
    """A server segment."""
    tcp = TCP(sport=dport, dport=sport, flags=flags, seq=seq, ack=ack, **kw)
    return IP(src=SERVER, dst=CLIENT) / tcp / (Raw(data) if data else b"")


def handshake(sport):
    return [
        c2s(sport, "S", ISN_C),
        s2c(sport, "SA", ISN_S, ISN_C + 1),
        c2s(sport, "A", ISN_C + 1, ISN_S + 1),
    ]


def data_and_close(sport, data=b"hello\n", cseq=ISN_C + 1, sseq=ISN_S + 1):
    """Client data, its ACK, and both FINs."""
    end = cseq + len(data)
    return [
        c2s(sport, "PA", cseq, sseq, data),
        s2c(sport, "A", sseq, end),
        c2s(sport, "FA", end, sseq),
        s2c(sport, "FA", sseq, end + 1),
        c2s(sport, "A", end + 1, sseq + 1),
    ]


def synack_wrong_ack():
    # stream-tcp.c, SYN_SENT: a SYN-ACK not acknowledging the SYN raises
    # 3whs_synack_with_wrong_ack and is ignored; the real one that follows
    # completes the handshake (the stream then holds the client's bytes).
    p = 42001
    return [
        c2s(p, "S", ISN_C),
        s2c(p, "SA", 7777, ISN_C + 9),
        s2c(p, "SA", ISN_S, ISN_C + 1),
        c2s(p, "A", ISN_C + 1, ISN_S + 1),
    ] + data_and_close(p, b"xx EVIL-AFTER-HANDSHAKE yy\n")


def synack_wrong_direction():
    # SYN_SENT: a SYN-ACK from the client raises
    # 3whs_synack_in_wrong_direction.
    p = 42002
    return [
        c2s(p, "S", ISN_C),
        c2s(p, "SA", ISN_C, ISN_S + 1),
        s2c(p, "SA", ISN_S, ISN_C + 1),
        c2s(p, "A", ISN_C + 1, ISN_S + 1),
    ] + data_and_close(p)


def syn_recv():
    # SYN_RECV (SYN-ACK seen, handshake not complete): a SYN-ACK from the
    # client, the server's SYN-ACK resent acknowledging something else (the
    # same one again raises nothing, nor one with another ISN: Suricata 7
    # queues it and no longer raises 3whs_synack_resend_with_diff_seq),
    # the client's SYN resent (same ISN:
    # nothing; another one: an event), and on a second connection a SYN
    # from the server.
    p, q = 42003, 42004
    return [
        c2s(p, "S", ISN_C),
        s2c(p, "SA", ISN_S, ISN_C + 1),
        c2s(p, "SA", ISN_C, ISN_S + 1),
        s2c(p, "SA", ISN_S, ISN_C + 5),
        s2c(p, "SA", ISN_S, ISN_C + 1),
        s2c(p, "SA", ISN_S + 2000, ISN_C + 1),
        c2s(p, "S", ISN_C),
        c2s(p, "S", ISN_C + 300),
        c2s(q, "S", ISN_C),
        s2c(q, "SA", ISN_S, ISN_C + 1),
        s2c(q, "S", ISN_S + 1000),
    ]


def right_seq_wrong_ack():
    # SYN_RECV: the client's segment has the right sequence number but does
    # not acknowledge the SYN-ACK (3whs_right_seq_wrong_ack_evasion: Linux
    # and Solaris do not reset); its right ACK follows (42005). Neither
    # right, or a sequence number before the right one:
    # 3whs_wrong_seq_wrong_ack (42014). Beyond the right one, within the
    # SYN-ACK's window, acknowledging it: segments were lost, no event
    # (42015).
    p, q, r = 42005, 42014, 42015
    return [
        c2s(p, "S", ISN_C),
        s2c(p, "SA", ISN_S, ISN_C + 1),
        c2s(p, "PA", ISN_C + 1, ISN_S + 77, b"xx"),
        c2s(p, "A", ISN_C + 1, ISN_S + 1),
    ] + data_and_close(p) + [
        c2s(q, "S", ISN_C),
        s2c(q, "SA", ISN_S, ISN_C + 1),
        c2s(q, "PA", ISN_C + 50, ISN_S + 77, b"xx"),
        c2s(q, "A", ISN_C - 5, ISN_S + 1),
        c2s(q, "A", ISN_C + 1, ISN_S + 1),
    ] + data_and_close(q) + [
        c2s(r, "S", ISN_C),
        s2c(r, "SA", ISN_S, ISN_C + 1),
        c2s(r, "PA", ISN_C + 11, ISN_S + 1, b"after a loss\n"),
    ]


def est_syn():
    # ESTABLISHED: the client's SYN resent (its ISN, then another), a SYN
    # from the server, a SYN-ACK from the client; then the server's SYN-ACK
    # resent, which raises none of these.
    p = 42006
    pk = handshake(p) + [
        c2s(p, "PA", ISN_C + 1, ISN_S + 1, b"hello\n"),
        s2c(p, "A", ISN_S + 1, ISN_C + 7),
        c2s(p, "S", ISN_C),
        c2s(p, "S", ISN_C + 4000),
        s2c(p, "S", ISN_S + 4000),
        c2s(p, "SA", ISN_C + 7, ISN_S + 1),
        s2c(p, "SA", ISN_S, ISN_C + 1),
    ]
    return pk + data_and_close(p, b"more\n", cseq=ISN_C + 7)


def tfo_data_ignored():
    # SYN_SENT with TCP Fast Open (RFC 7413): the SYN carries the option and
    # data; a SYN-ACK acknowledging only the SYN raises
    # 3whs_synack_tfo_data_ignored (42007), one acknowledging the data too
    # raises nothing (42008).
    opts = [("MSS", 1460), ("TFO", b"\x11\x22\x33\x44\x55\x66\x77\x88")]
    data = b"GET / HTTP/1.0\r\n\r\n"
    out = []
    for p, ack in ((42007, ISN_C + 1), (42008, ISN_C + 1 + len(data))):
        out += [
            c2s(p, "S", ISN_C, options=opts, data=data),
            s2c(p, "SA", ISN_S, ack),
            c2s(p, "A", ack, ISN_S + 1),
        ]
        out += data_and_close(p, b"x\n", cseq=ack)
    return out


def broken_ack():
    # A segment without the ACK flag whose acknowledgement number is not
    # zero: pkt_broken_ack, decided from the segment alone (a SYN here and
    # a RST that ends the connection; the handshake's SYN has none).
    p = 42009
    pk = [c2s(p, "S", ISN_C, 0)] + handshake(p)[1:] + [
        c2s(p, "PA", ISN_C + 1, ISN_S + 1, b"hello\n"),
        s2c(p, "A", ISN_S + 1, ISN_C + 7),
        c2s(p, "R", ISN_C + 7, ISN_S + 1),
    ]
    q = 42010
    return pk + [c2s(q, "S", ISN_C, 12345)]


def ips_ack_wrong_dir():
    # SYN_RECV, inline only (Suricata's IPS mode): an ACK from the server
    # before the client's raises 3whs_ack_in_wrong_dir (42011); data from
    # the server right after its SYN-ACK, acknowledging the SYN alone,
    # 3whs_ack_data_inject (42012). The client's ACK then completes each
    # handshake.
    out = []
    for p, pkt in (
        (42011, lambda p: s2c(p, "A", ISN_S + 1, ISN_C + 1)),
        (42012, lambda p: s2c(p, "PA", ISN_S + 1, ISN_C + 1, b"injected\n")),
    ):
        out += [c2s(p, "S", ISN_C), s2c(p, "SA", ISN_S, ISN_C + 1), pkt(p)]
        out += [c2s(p, "A", ISN_C + 1, ISN_S + 1)] + data_and_close(p)
    return out


def never():
    # Events Suricata raises only in its worker threads' bookkeeping
    # (wrong_thread), under its urgent policy oob (not its default) or with
    # stream.async-oneside (off by default): none over a connection with
    # urgent data and a client that sends an ACK before the SYN-ACK.
    p = 42013
    return [
        c2s(p, "S", ISN_C),
        c2s(p, "A", ISN_C + 5, ISN_S + 1),
        s2c(p, "SA", ISN_S, ISN_C + 1),
        c2s(p, "A", ISN_C + 1, ISN_S + 1),
        c2s(p, "PAU", ISN_C + 1, ISN_S + 1, b"urgent\n", urgptr=3),
        s2c(p, "A", ISN_S + 1, ISN_C + 8),
    ] + data_and_close(p, cseq=ISN_C + 8)


def no_session():
    # TCP_NONE, no session: a RST (42016), a FIN (42017) and a FIN with
    # data (42018, no mid-stream pickup) of connections never seen raise
    # rst_but_no_session and fin_but_no_session; a RST ending a connection
    # (42019) and a lone ACK with data (42020) raise neither.
    return [
        c2s(42016, "R", ISN_C + 9),
        c2s(42017, "FA", ISN_C + 9, ISN_S + 1),
        c2s(42018, "FPA", ISN_C + 9, ISN_S + 1, b"bye\n"),
    ] + handshake(42019) + [
        c2s(42019, "PA", ISN_C + 1, ISN_S + 1, b"hello\n"),
        s2c(42019, "RA", ISN_S + 1, ISN_C + 7),
        c2s(42020, "PA", ISN_C + 9, ISN_S + 1, b"hello\n"),
    ]


CAPTURES = {
    "stream-event-synack-wrong-ack": synack_wrong_ack,
    "stream-event-synack-wrong-direction": synack_wrong_direction,
    "stream-event-syn-recv": syn_recv,
    "stream-event-right-seq-wrong-ack": right_seq_wrong_ack,
    "stream-event-est-syn": est_syn,
    "stream-event-tfo-data-ignored": tfo_data_ignored,
    "stream-event-broken-ack": broken_ack,
    "stream-event-ips-ack-wrong-dir": ips_ack_wrong_dir,
    "stream-event-never": never,
    "stream-event-no-session": no_session,
}


def ips_bundled():
    # Every capture above, one after the other (each on its own ports),
    # under Suricata's own stream-events.rules lines for these events.
    out = []
    for name, build in CAPTURES.items():
        if name != "stream-event-ips-bundled":
            out += build()
    return out


CAPTURES["stream-event-ips-bundled"] = ips_bundled
