"""Scapy-built captures of protocol detection's events (`applayer-event-*`;
see captures.py), for Suricata 7.0.10's app-layer-events.rules.

Suricata raises these on the packet whose stream bytes decide a direction's
protocol (app-layer.c): the two directions detect different protocols
(`applayer_mismatch_protocol_both_directions`); TLS, whose parser wants the
client's bytes first, is detected on a flow the server spoke first in
(`applayer_wrong_direction_first_data`; HTTP no longer asks this in 7.0.10,
so a flow opening with a response stays silent); one direction is detected
and the other's detection finishes without a match
(`applayer_detect_protocol_only_one_direction`, which a plain SMTP session
raises too, its server banner matching no pattern); and more than 100,000
bytes one way without a match while the other side sends nothing
(`applayer_proto_detection_skipped`). Each event is raised once a flow.

Several flows share a capture; the counts in test.yaml add up per rule.
Every exchange ends with an acknowledgement, so each event has a packet to
land on in Suricata's IDS mode too.
"""

from captures_app import client_hello, exchange, http_get, ok, server_hello

SSH_SERVER = b"SSH-2.0-OpenSSH_9.6p1 Debian\r\n"
SSH_CLIENT = b"SSH-2.0-PuTTY_Release_0.80\r\n"
JUNK = b"\xee" * 600
APPDATA = b"\x17\x03\x03\x00\x02hi"


def applayer_event_mismatch():
    # A client speaking HTTP to an SSH server, TLS to an HTTP server, SSH to
    # an HTTP server: one mismatch each. A plain HTTP exchange and a TLS one
    # are the near misses.
    return (
        exchange(8080, 43101, (True, http_get(b"/", b"a.example")), (False, SSH_SERVER),
                 (True, http_get(b"/b", b"a.example")), (False, b"\x00" * 40))
        + exchange(8443, 43102, (True, client_hello(b"x.example")), (False, ok(b"hi")),
                   (True, APPDATA), (False, ok(b"ho")))
        + exchange(2222, 43103, (True, SSH_CLIENT), (False, ok(b"hi")), (True, SSH_CLIENT), (False, ok(b"ho")))
        + exchange(8080, 43104, (True, http_get(b"/", b"a.example")), (False, ok(b"hi")),
                   (True, http_get(b"/c", b"a.example")), (False, ok(b"ho")))
        + exchange(8443, 43105, (True, client_hello(b"x.example")), (False, server_hello()),
                   (True, APPDATA), (False, APPDATA))
    )


def applayer_event_wrong_direction():
    # A TLS server hello before the client's: the event. An HTTP response
    # before its request, and an SSH server's banner first (SSH accepts
    # either side first), stay silent.
    return (
        exchange(8443, 43111, (False, server_hello()), (True, client_hello(b"x.example")),
                 (False, APPDATA), (True, APPDATA))
        + exchange(8080, 43112, (False, ok(b"hi")), (True, http_get(b"/", b"a.example")),
                   (False, ok(b"ho")), (True, http_get(b"/c", b"a.example")))
        + exchange(2222, 43113, (False, SSH_SERVER), (True, SSH_CLIENT), (False, b"\x00" * 40), (True, b"\x00" * 40))
    )


def applayer_event_one_direction():
    # HTTP answered by bytes of no protocol; the same bytes sent before the
    # request; a client's bytes of no protocol answered by HTTP; a plain SMTP
    # session: one event each. An FTP session (both sides detected) and a
    # flow of junk both ways (neither detected) stay silent.
    return (
        exchange(8080, 43121, (True, http_get(b"/", b"a.example")), (False, JUNK),
                 (True, http_get(b"/b", b"a.example")), (False, JUNK))
        + exchange(8080, 43122, (False, JUNK), (True, http_get(b"/", b"a.example")),
                   (False, JUNK), (True, http_get(b"/b", b"a.example")))
        + exchange(8080, 43123, (True, JUNK), (False, ok(b"hi")), (True, JUNK), (False, ok(b"ho")))
        + exchange(25, 43124, (False, b"220 mail.example ESMTP\r\n"), (True, b"EHLO x.example\r\n"),
                   (False, b"250 mail.example\r\n"), (True, b"QUIT\r\n"), (False, b"221 bye\r\n"))
        + exchange(21, 43125, (False, b"220 (vsFTPd 3.0.3)\r\n"), (True, b"USER anonymous\r\n"),
                   (False, b"331 Please specify the password.\r\n"), (True, b"QUIT\r\n"), (False, b"221 Goodbye.\r\n"))
        + exchange(8080, 43126, (True, JUNK), (False, JUNK), (True, JUNK), (False, JUNK))
    )


def applayer_event_skipped():
    # 112,000 bytes of no protocol from the client, then from the server,
    # the other side silent: detection is skipped once each (later bytes of
    # the other side raise nothing more). 50,000 bytes stay under the cutoff.
    big = [(True, b"\xab" * 1400) for _ in range(80)]
    return (
        exchange(8080, 43131, *big, (False, b"x" * 100), (True, b"y" * 10))
        + exchange(8080, 43132, *[(False, b"\xab" * 1400) for _ in range(80)])
        + exchange(8080, 43133, *[(True, b"\xab" * 1000) for _ in range(50)])
    )


CAPTURES = {
    "applayer-event-mismatch": applayer_event_mismatch,
    "applayer-event-wrong-direction": applayer_event_wrong_direction,
    "applayer-event-one-direction": applayer_event_one_direction,
    "applayer-event-skipped": applayer_event_skipped,
}
