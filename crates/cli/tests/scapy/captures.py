#!/usr/bin/python3
"""Writes the captures of the Scapy-built verification tests.

usage: captures.py ROOT

For each test directory under ROOT (its rules and expected alerts are in
test.rules and test.yaml, suricata-verify's format), writes ROOT/NAME/input.pcap,
built with Scapy, not with Sluice's own packet builder: a packet both our
builder and our parser got wrong the same way would pass a test built with
our builder. Each capture follows an example of Suricata's documentation for
the keyword or stream behaviour its test names.
"""

import os
import sys

from scapy.all import DNS, DNSQR, ICMP, IP, TCP, UDP, Ether, Raw, load_layer, wrpcap

load_layer("tls")
from scapy.layers.tls.extensions import ServerName, TLS_Ext_ServerName  # noqa: E402
from scapy.layers.tls.handshake import TLSClientHello  # noqa: E402
from scapy.layers.tls.record import TLS  # noqa: E402

from conn import CLIENT, SERVER, Conn  # noqa: E402


def stream_split_content():
    # A content split over two segments is found in the reassembled stream.
    return Conn(4444).send(True, b"xx EVIL-SI").send(True, b"GNATURE yy").pkts


def http_uri_host():
    req = b"GET /admin/login.php?u=1 HTTP/1.1\r\nHost: evil.example\r\nUser-Agent: scapy\r\n\r\n"
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    return Conn(80).send(True, req).send(False, resp).pkts


def http_file_data_split():
    body = b"<html>...MALWARE-BODY...</html>"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body)
    c = Conn(80).send(True, b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")
    return c.send(False, head + body[:13]).send(False, body[13:]).pkts


def dns_query_udp():
    q = lambda name, sport: (  # noqa: E731
        IP(src=CLIENT, dst=SERVER)
        / UDP(sport=sport, dport=53)
        / DNS(id=sport, rd=1, qd=DNSQR(qname=name, qtype="A"))
    )
    return [q("www.bad.example.com", 53001), q("www.good.example.org", 53002)]


def tls_sni():
    hello = TLS(
        msg=[
            TLSClientHello(
                ciphers=[0x1301, 0xC02F],
                ext=[TLS_Ext_ServerName(servernames=[ServerName(servername=b"evil-tls.example")])],
            )
        ]
    )
    return Conn(443).send(True, bytes(hello)).pkts


def icmp_itype():
    return [IP(src=CLIENT, dst=SERVER) / ICMP(type=8, id=7, seq=1) / Raw(b"ping")]


def flowbits():
    c = Conn(80).send(True, b"LOGIN user\r\n").send(False, b"WELCOME user\r\n")
    # A second connection only answers: no flowbit set there.
    d = Conn(80, sport=40002).send(True, b"HELLO\r\n").send(False, b"WELCOME user\r\n")
    return c.pkts + d.pkts


def dsize_no_content():
    return [
        IP(src=CLIENT, dst=SERVER) / UDP(sport=5000, dport=9999) / Raw(b"A" * 100),
        IP(src=CLIENT, dst=SERVER) / UDP(sport=5000, dport=9999) / Raw(b"A" * 10),
    ]


def threshold_limit():
    return [
        IP(src=CLIENT, dst=SERVER) / UDP(sport=5001, dport=9999) / Raw(b"PING %d" % i)
        for i in range(5)
    ]


def tcp_flags_no_content():
    # A SYN to port 22 (the server's SYN-ACK comes from 22, not to it).
    return Conn(22).pkts


def detection_filter():
    return [
        IP(src=CLIENT, dst=SERVER) / UDP(sport=5002, dport=9999) / Raw(b"KNOCK %d" % i)
        for i in range(5)
    ]


def gap_then_content():
    # Ten bytes of the client's stream never arrive; the signature after
    # them is inspected all the same, and the FIN ends the stream.
    c = Conn(4444).send(True, b"hello ")
    c.cseq += 10
    c.send(True, b"EVIL-SIGNATURE")
    fin = IP(src=CLIENT, dst=SERVER) / TCP(
        sport=c.sport, dport=c.dport, flags="FA", seq=c.cseq, ack=c.sseq
    )
    return c.pkts + [fin]


def midstream_pickup():
    # No handshake in the capture: the connection was picked up mid-way.
    c = Conn(4444)
    return c.send(True, b"xx EVIL-SIGNATURE yy").pkts[3:]


def content_modifiers():
    return Conn(8080).send(True, b"GET /x/admin/panel HTTP/1.0\r\n\r\n").pkts


def pcre_relative():
    return Conn(4444).send(True, b"login user=bob42 ok\r\n").pkts


def byte_test():
    # Two-byte big-endian lengths at offset 0: 4000, then 16.
    return [
        IP(src=CLIENT, dst=SERVER) / UDP(sport=5003, dport=9999) / Raw(b"\x0f\xa0rest"),
        IP(src=CLIENT, dst=SERVER) / UDP(sport=5003, dport=9999) / Raw(b"\x00\x10rest"),
    ]


def http_method_ua_cookie():
    req = (
        b"POST /login HTTP/1.1\r\nHost: a.example\r\nUser-Agent: sqlmap/1.7\r\n"
        b"Cookie: session=abc; admin=1\r\nContent-Length: 0\r\n\r\n"
    )
    return Conn(80).send(True, req).send(False, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").pkts


def smtp_file_data():
    # Suricata's file.data on SMTP (rules/file-keywords: "file.data"; the
    # SMTP parser's MIME decoding): each attachment decoded, here built by
    # Python's own email package, never by Sluice.
    from email.mime.application import MIMEApplication
    from email.mime.multipart import MIMEMultipart
    from email.mime.text import MIMEText

    cpio = b"070707000000000000100644000000000000000001000000"
    cpio += b"../../../../../opt/zimbra/jetty/webapps/zimbra/public/x.jsp\0" + b"A" * 200
    msg = MIMEMultipart()
    msg["From"], msg["To"], msg["Subject"] = "a@x.example", "b@y.example", "invoice"
    # The text part names the signature: not an attachment, no file.
    msg.attach(MIMEText("please see MALWARE-IN-ATTACHMENT and /webapps/zimbra/public"))
    a = MIMEApplication(cpio, name="a.cpio")
    a.add_header("Content-Disposition", "attachment", filename="a.cpio")
    msg.attach(a)
    q = MIMEText("quoted " * 20 + "MALWARE-IN-ATTACHMENT =E9t=E9", _charset="latin-1")
    del q["Content-Transfer-Encoding"]
    q["Content-Transfer-Encoding"] = "quoted-printable"
    q.set_payload(("quoted " * 20 + "MALWARE-IN-=\r\nATTACHMENT =E9t=E9"))
    q.add_header("Content-Disposition", "attachment", filename="note.txt")
    msg.attach(q)
    data = msg.as_bytes().replace(b"\n", b"\r\n")
    data = b"\r\n".join(b"." + l if l.startswith(b".") else l for l in data.split(b"\r\n"))
    c = Conn(2525)
    c.send(False, b"220 mx.example ESMTP\r\n")
    for cmd, reply in [
        (b"EHLO client.example\r\n", b"250 mx.example\r\n"),
        (b"MAIL FROM:<a@x.example>\r\n", b"250 ok\r\n"),
        (b"RCPT TO:<b@y.example>\r\n", b"250 ok\r\n"),
        (b"DATA\r\n", b"354 go ahead\r\n"),
    ]:
        c.send(True, cmd).send(False, reply)
    body = data + b"\r\n.\r\n"
    for i in range(0, len(body), 90):
        c.send(True, body[i : i + 90])
    c.send(False, b"250 queued\r\n").send(True, b"QUIT\r\n")
    return c.pkts


def isdataat_negated():
    # AUTH followed by 4 bytes, then (another connection) by 40.
    a = Conn(4444).send(True, b"AUTH abc\n").pkts
    b = Conn(4444, sport=40003).send(True, b"AUTH " + b"x" * 39 + b"\n").pkts
    return a + b


CAPTURES = {
    "stream-split-content": stream_split_content,
    "http-uri-host": http_uri_host,
    "http-file-data-split": http_file_data_split,
    "dns-query-udp": dns_query_udp,
    "tls-sni": tls_sni,
    "icmp-itype": icmp_itype,
    "flowbits": flowbits,
    "dsize-no-content": dsize_no_content,
    "threshold-limit": threshold_limit,
    "tcp-flags-no-content": tcp_flags_no_content,
    "detection-filter": detection_filter,
    "gap-then-content": gap_then_content,
    "midstream-pickup": midstream_pickup,
    "content-modifiers": content_modifiers,
    "pcre-relative": pcre_relative,
    "byte-test": byte_test,
    "http-method-ua-cookie": http_method_ua_cookie,
    "isdataat-negated": isdataat_negated,
    "smtp-file-data": smtp_file_data,
}


def main():
    root = sys.argv[1]
    # The tests of stream behaviours and payload keywords, and those of
    # application protocols, live in modules of their own.
    from captures_alevents import CAPTURES as ALEVENTS
    from captures_alp import CAPTURES as ALP
    from captures_app import CAPTURES as APP
    from captures_applayer import CAPTURES as APPLAYER
    from captures_bytemath import CAPTURES as BYTEMATH
    from captures_dataset import CAPTURES as DATASET
    from captures_decode import CAPTURES as DECODE
    from captures_hdr import CAPTURES as HDR
    from captures_defrag import CAPTURES as DEFRAG
    from captures_httpbody import CAPTURES as HTTPBODY
    from captures_hostbits import CAPTURES as HOSTBITS
    from captures_httpedge import CAPTURES as HTTPEDGE
    from captures_httpevents import CAPTURES as HTTPEVENTS
    from captures_l2l3 import CAPTURES as L2L3
    from captures_kw import CAPTURES as KW
    from captures_stream import CAPTURES as STREAM
    from captures_streamevents import CAPTURES as STREAMEVENTS
    from captures_threshold import CAPTURES as THRESHOLD
    from captures_tlsdns import CAPTURES as TLSDNS
    from captures_tlslegacy import CAPTURES as TLSLEGACY
    from captures_tlsevents import CAPTURES as TLSEVENTS
    from captures_xform import CAPTURES as XFORM

    every = dict(CAPTURES)
    for more in (
        STREAM, APP, XFORM, BYTEMATH, HTTPBODY, THRESHOLD, DATASET, KW, HTTPEDGE, TLSDNS, L2L3, DEFRAG, ALP, HOSTBITS, TLSLEGACY, TLSEVENTS, HDR,
        HTTPEVENTS, DECODE, STREAMEVENTS, APPLAYER, ALEVENTS,
    ):
        assert not set(more) & set(every), set(more) & set(every)
        every.update(more)
    for name, build in every.items():
        # Ethernet frames (what the data plane sees); a builder marked
        # raw_l2 returns whole frames (VLAN tags, tunnels) as they are.
        built = build()
        raw = getattr(build, "raw_l2", False)
        pkts = [p if raw else Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p for p in built]
        # A builder marked keeps_time set each packet's time (seconds from the start).
        keep = getattr(build, "keeps_time", False)
        for i, p in enumerate(pkts):
            p.time = 1_700_000_000 + (built[i].time if keep else i / 1000)
        os.makedirs(os.path.join(root, name), exist_ok=True)
        wrpcap(os.path.join(root, name, "input.pcap"), pkts)


if __name__ == "__main__":
    main()
