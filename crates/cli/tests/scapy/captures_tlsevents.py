"""Scapy-built captures of the TLS app-layer event tests (`tls-event-*`;
see captures.py), records written byte by byte (captures_tlsdns.py's
helpers) so that each can be malformed exactly as the event names.

Expectations are what Suricata 7.0.10 does with its stock suricata.yaml
(IDS mode): a direction's records are parsed when the other side
acknowledges them; an event stays raised on the flow's single transaction,
so a rule on it fires on the first packet of each direction inspected
after that (the second one often the flow's end), once per direction. A
parse error stops the flow's parsing.
"""

from captures_app import exchange
from captures_tlsdns import (
    CCS,
    SERVER_HELLO_DONE,
    client_hello_msg,
    ext_groups,
    ext_sni,
    handshake,
    record,
    server_hello_msg,
    u16,
)

CH = record(client_hello_msg([ext_sni(b"events.example"), ext_groups(29)]), version=0x0301)
SH = record(server_hello_msg([]) + SERVER_HELLO_DONE, version=0x0303)


# Application data each way after the event, so that both directions have
# a packet inspected after it (Sluice does not inspect the flow again at its
# end, where Suricata raises the second direction's alert otherwise).
APP = record(b"Q" * 20, ct=23, version=0x0303)
TAIL = ((False, APP), (True, APP))


def hb(t, plen, payload, pad, version=0x0302):
    """A heartbeat record in clear: type, payload length, payload, padding."""
    return record(bytes([t]) + u16(plen) + payload + pad, ct=24, version=version)


def tls_event_heartbeat():
    return (
        # Heartbleed (CVE-2014-0160): a request claiming 16384 bytes of
        # payload in a 3-byte record, and the leaking answer.
        exchange(443, 47001, (True, CH), (False, SH), (True, hb(1, 0x4000, b"", b"")), (False, hb(2, 0x4000, b"L" * 100, b"")), *TAIL)
        # A well-formed request and response (near miss: no event).
        + exchange(443, 47002, (True, CH), (False, SH), (True, hb(1, 16, b"P" * 16, b"\0" * 16)), (False, hb(2, 16, b"P" * 16, b"\0" * 16)), *TAIL)
        # Padding under 16 bytes.
        + exchange(443, 47003, (True, CH), (False, SH), (True, hb(1, 16, b"P" * 16, b"\0" * 8)), *TAIL)
        # A type other than request or response.
        + exchange(443, 47004, (True, CH), (False, SH), (True, hb(3, 16, b"P" * 16, b"\0" * 16)), *TAIL)
        # Two requests in flight from the client.
        + exchange(443, 47005, (True, CH), (False, SH), (True, hb(1, 16, b"P" * 16, b"\0" * 16) * 2), *TAIL)
    )


def tls_event_heartbeat_encrypted():
    enc = lambda n, fill: record(fill * n, ct=24, version=0x0303)  # noqa: E731
    return (
        # After ChangeCipherSpec: an encrypted 40-byte request answered by a
        # 2000-byte record (a leak).
        exchange(443, 47011, (True, CH), (False, SH + CCS), (True, CCS + enc(40, b"E")), (False, enc(2000, b"F")), *TAIL)
        # Answered by a record as long (near miss).
        + exchange(443, 47012, (True, CH), (False, SH + CCS), (True, CCS + enc(40, b"E")), (False, enc(40, b"F")), *TAIL)
    )


def tls_event_record():
    app = lambda v: record(b"Y" * 10, ct=23, version=v)  # noqa: E731
    return (
        # A record of type 25.
        exchange(443, 47021, (True, CH), (False, SH), (True, record(b"X" * 10, ct=25, version=0x0303)), (False, app(0x0303)), *TAIL)
        # A handshake record of 2 bytes.
        + exchange(443, 47022, (True, CH), (False, record(b"\x02\x00", version=0x0303)), (True, app(0x0303)), *TAIL)
        # A handshake message of type 99, then a ServerHello.
        + exchange(443, 47023, (True, record(handshake(99, b"Z" * 8))), (False, SH), *TAIL)
        # A handshake record ending 2 bytes into a message header.
        + exchange(443, 47024, (True, CH), (False, record(handshake(14, b"") + b"\x0e\x00", version=0x0303)), (True, app(0x0303)), *TAIL)
        # An empty record.
        + exchange(443, 47025, (True, CH), (False, SH), (True, record(b"", ct=23, version=0x0303)), *TAIL)
        # Near misses: record versions 3.5 and 2.0 (7.0.10 checks none).
        + exchange(443, 47026, (True, CH), (False, SH), (True, app(0x0305)), (False, app(0x0200)), *TAIL)
    )


def tls_event_client_hello():
    from captures_tlsdns import ext, u24

    def ch(exts, **kw):
        return record(client_hello_msg(exts, **kw), version=0x0301)

    def raw_sni(name_type, name, claimed=None):
        n = len(name) if claimed is None else claimed
        entry = bytes([name_type]) + u16(n) + name
        return ext(0, u16(len(entry)) + entry)

    def cut_body(body):
        """A ClientHello message whose fields run past it."""
        return record(bytes([1]) + u24(len(body)) + body, version=0x0301)

    flows = [
        ch([ext_sni(b"a.example"), ext_sni(b"b.example"), ext_groups(29)]),  # two server_name extensions
        ch([raw_sni(1, b"a.example")]),  # an entry type other than host_name
        ch([raw_sni(0, b"")]),  # an empty host name
        ch([raw_sni(0, b"h" * 300)]),  # a host name over 255 bytes
        ch([raw_sni(0, b"a.example", claimed=40)]),  # a name longer than its extension
        ch([ext_sni(b"a.example")], ciphers=(0x1301, 0xC02F), sid=b"S" * 8),  # near miss
        cut_body(u16(0x0303) + b"\x22" * 32 + bytes([40]) + b"S" * 8),  # session id past the message
        cut_body(u16(0x0303) + b"\x22" * 32 + b"\x00" + u16(3) + b"\x13\x01\xc0" + b"\x01\x00"),  # odd cipher list
        ch([ext_sni(b"a.example"), ext(10, u16(40) + u16(29))]),  # an extension's list past it
        ch([ext_sni(b"ok.example"), ext_groups(29, 23)]),  # near miss
    ]
    out = []
    for i, hello in enumerate(flows):
        out += exchange(443, 47101 + i, (True, hello), (False, SH), *TAIL)
    return out


CAPTURES = {
    "tls-event-client-hello": tls_event_client_hello,
    "tls-event-heartbeat": tls_event_heartbeat,
    "tls-event-heartbeat-encrypted": tls_event_heartbeat_encrypted,
    "tls-event-record": tls_event_record,
}
