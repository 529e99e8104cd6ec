"""Scapy-built captures of the legacy TLS keyword tests (`app-tls-legacy-*`;
see captures.py).

Each follows Suricata's documentation of the keyword (rules/tls-keywords.html:
`tls.subject`, `tls.issuerdn`, `tls.fingerprint`, `tls_cert_notbefore`,
`tls_cert_notafter`, `tls_cert_expired`, `tls_cert_valid`, `ssl_version`,
`ssl_state`, `tls.store`) on whole handshakes written byte by byte
(captures_tlsdns.py's helpers), with near misses and negations.

Expectations are what Suricata 7.0.10 does with its stock suricata.yaml
(IDS mode): a direction's records are parsed when the other side
acknowledges them, and `ssl_state`/`ssl_version` are inspected on every
packet after that, against the state the last parse left (`ssl_state`:
the last ClientHello, ServerHello or key exchange message of the records
parsed then), at most once per direction. So the client's messages are seen
on the server's packets and the other way round; a negated `ssl_version`
never matches in 7.0.10. Packet times are November 2023 (captures.py).
"""

import datetime

from captures_app import certificate, exchange
from captures_tlsdns import (
    CCS,
    SERVER_HELLO_DONE,
    client_hello_msg,
    certificate_msg,
    ext,
    ext_formats,
    ext_groups,
    ext_key_share_ch,
    ext_sni,
    ext_versions_ch,
    handshake,
    record,
    server_hello_msg,
    u16,
)
from conn import Conn

# The ECDHE key exchanges (contents do not matter to the parsers).
SKX = handshake(12, b"\x03\x00\x1d\x20" + b"\x45" * 32 + b"\x08\x07\x00\x40" + b"\x46" * 64)
CKX = handshake(16, b"\x20" + b"\x47" * 32)
FINISHED = record(b"\x48" * 40, version=0x0303)


def app_data(n, fill):
    return record(bytes([fill]) * n, ct=23, version=0x0303)


def dated_cert(cn, not_before, not_after):
    """A DER certificate for `cn` (Ed25519 keys from fixed bytes, so the same
    on every run) valid from `not_before` to `not_after` (datetimes)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import NameOID

    key = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(5, 37)))
    ca = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(6, 38)))

    def name(o, c):
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o), x509.NameAttribute(NameOID.COMMON_NAME, c)])

    c = (
        x509.CertificateBuilder()
        .subject_name(name("Legacy Test", cn))
        .issuer_name(name("Legacy CA", "Legacy Root"))
        .public_key(key.public_key())
        .serial_number(0x1E6AC1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(ca, None)
    )
    return c.public_bytes(serialization.Encoding.DER)


def full12(sport, cert, skx=True, sni=b"legacy.example", version=0x0303, dport=443):
    """A whole TLS handshake and a record of data each way: the client's
    hello; the server's flight in one record (hello, certificate, key
    exchange unless `skx` is false, done); the client's key exchange,
    ChangeCipherSpec and Finished; the server's ChangeCipherSpec and
    Finished. Hellos and records of `version`."""
    ch = record(client_hello_msg([ext_sni(sni), ext_groups(29, 23), ext_formats(0)], version=version), version=0x0301)
    msgs = server_hello_msg([ext(0xFF01, b"\x00")], version=version) + certificate_msg([cert])
    if skx:
        msgs += SKX
    flight = record(msgs + SERVER_HELLO_DONE, version=version)
    return exchange(
        dport,
        sport,
        (True, ch),
        (False, flight),
        (True, record(CKX, version=version) + CCS + FINISHED),
        (False, CCS + FINISHED),
        (True, app_data(50, 0x49)),
        (False, app_data(50, 0x4A)),
    )


def tls13(sport):
    # A TLS 1.3 handshake (supported_versions both ways), no certificate in
    # clear.
    ch = record(
        client_hello_msg(
            [ext_sni(b"tls13.legacy.example"), ext_groups(29), ext_versions_ch(0x0304, 0x0303), ext_key_share_ch()],
            ciphers=(0x1301,),
            sid=b"\x55" * 32,
        )
    )
    ks = u16(29) + u16(32) + b"\x66" * 32
    sh = record(server_hello_msg([ext(43, u16(0x0304)), ext(51, ks)], cipher=0x1301, sid=b"\x55" * 32), version=0x0303)
    return exchange(443, sport, (True, ch), (False, sh + CCS + app_data(90, 0x99)), (True, CCS + app_data(53, 0x98)))


def sslv2_hello(sport):
    # An SSLv2-format ClientHello (version 3.1 inside), answered by a TLS 1.0
    # ServerHello: Suricata keeps the version inside the hello (TLS 1.0) as
    # the client's, not SSLv2.
    specs = b"\x00\x00\x2f" + b"\x00\x00\x35"
    challenge = b"\x77" * 16
    body = b"\x01" + u16(0x0301) + u16(len(specs)) + u16(0) + u16(len(challenge)) + specs + challenge
    hello = u16(0x8000 | len(body)) + body
    sh = record(server_hello_msg([], version=0x0301) + SERVER_HELLO_DONE, version=0x0301)
    return exchange(443, sport, (True, hello), (False, sh), (True, app_data(20, 0x11)))


def hello_then_acks(sport):
    # Only a ClientHello; the server acknowledges it and the client sends
    # two more bare ACKs: its side sees the state of its own hello then.
    c = Conn(443, sport=sport)
    c.send(True, record(client_hello_msg([ext_sni(b"acks.legacy.example"), ext_groups(29)])))
    for _ in range(2):
        ack = c.pkts[2].copy()
        ack["TCP"].seq, ack["TCP"].ack = c.cseq, c.sseq
        c.pkts.append(ack)
    return c.pkts


def app_tls_legacy_ssl_state():
    # tls-keywords.html ssl_state: an ECDHE handshake (its server flight
    # ends with a key exchange, which hides its hello), an RSA one (no
    # key exchange from the server: the hello shows), a bare hello with
    # client ACKs after it.
    a = full12(46001, certificate())
    b = full12(46002, certificate(), skx=False)
    c = hello_then_acks(46003)
    return a + b + c


def app_tls_legacy_ssl_version():
    # tls-keywords.html ssl_version: TLS 1.2 both ways, TLS 1.0 both ways,
    # TLS 1.3 (supported_versions), an SSLv2-format hello of TLS 1.0.
    return full12(46011, certificate()) + full12(46012, certificate(), version=0x0301) + tls13(46013) + sslv2_hello(46014)


def app_tls_legacy_cert():
    # tls-keywords.html tls.subject, tls.issuerdn, tls.fingerprint: the
    # server certificate of captures_app.certificate() (subject
    # "C=US, O=Sluice Test, CN=evil-cert.example", issuer
    # "C=US, O=Sluice Test CA, CN=Sluice Test Root"); then a TLS 1.3
    # handshake, whose certificate is encrypted: no certificate condition
    # matches it, negated or not.
    return full12(46021, certificate()) + tls13(46022)


def app_tls_legacy_validity():
    # tls-keywords.html tls_cert_notbefore/notafter/expired/valid: a
    # certificate valid from 2024-01-01 to 2034-01-01 (not yet valid at the
    # packets' time, which tls_cert_valid does not look at), and one that
    # expired on 2020-06-30 12:00.
    live = certificate()
    old = dated_cert("old.legacy.example", datetime.datetime(2019, 6, 1), datetime.datetime(2020, 6, 30, 12, 0))
    return full12(46031, live) + full12(46032, old, sni=b"old.legacy.example")


def app_tls_legacy_store():
    # tls-keywords.html tls.store: storing the certificate changes no match.
    return full12(46041, certificate())


CAPTURES = {
    "app-tls-legacy-ssl-state": app_tls_legacy_ssl_state,
    "app-tls-legacy-ssl-version": app_tls_legacy_ssl_version,
    "app-tls-legacy-cert": app_tls_legacy_cert,
    "app-tls-legacy-validity": app_tls_legacy_validity,
    "app-tls-legacy-store": app_tls_legacy_store,
}
