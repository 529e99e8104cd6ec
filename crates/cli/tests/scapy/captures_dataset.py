"""Scapy-built captures of the `dataset`/`datarep` tests (`ds-*`; see captures.py).

Each follows Suricata's documentation of datasets (docs.suricata.io, "Datasets"):
sets loaded from files next to the rules (`load`), sets rules add to (`set`)
and remove from (`unset`), the `ip.src`/`ip.dst` buffers, transforms before
a lookup, and reputations (`datarep`). The expected alerts in each test's
test.yaml are what Suricata 7.0.10 raised on the same capture.
"""

from scapy.all import DNS, DNSQR, IP, UDP

from conn import CLIENT, SERVER, Conn


def get(path, host=b"a.example", ua=b"scapy"):
    return b"GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n\r\n" % (path, host, ua)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def http_conns(reqs, first_sport=41000):
    """One connection per request (to port 80), each answered."""
    pkts = []
    for i, req in enumerate(reqs):
        pkts += Conn(80, sport=first_sport + i).send(True, req).send(False, OK).pkts
    return pkts


def ds_load_ip():
    # Two HTTP connections: ip.dst is SERVER on both; the ipv4 list holds
    # SERVER, the `ip` list holds CLIENT and an IPv6 address.
    return http_conns([get(b"/one"), get(b"/two")])


def ds_ua_seen():
    # `set`: a user agent matches the first time it is seen only.
    uas = [b"alpha-agent", b"beta-agent", b"alpha-agent", b"gamma-agent", b"beta-agent"]
    return http_conns([get(b"/", ua=u) for u in uas], first_sport=41100)


def ds_load_string():
    # A host list in base64; isset and isnotset on http.host, and a DNS
    # query name in the same list.
    reqs = [get(b"/", host=h) for h in (b"bad.example", b"good.example", b"worse.example")]
    pkts = http_conns(reqs, first_sport=41200)
    for i, name in enumerate(("bad.example", "fine.example")):
        pkts.append(
            IP(src=CLIENT, dst=SERVER)
            / UDP(sport=53100 + i, dport=53)
            / DNS(id=100 + i, rd=1, qd=DNSQR(qname=name, qtype="A"))
        )
    return pkts


def ds_md5_uri():
    # to_md5 then a lookup in an md5 set loaded in hex.
    return http_conns([get(b"/evil.php"), get(b"/index.html")], first_sport=41300)


def ds_unset():
    # A loaded user agent is removed by its first match; later ones are
    # not in the set.
    uas = [b"old-agent", b"old-agent", b"new-agent"]
    return http_conns([get(b"/", ua=u) for u in uas], first_sport=41400)


def ds_datarep():
    # Reputations compared with >, < and ==.
    hosts = [b"rep-high.example", b"rep-low.example", b"rep-mid.example", b"unlisted.example"]
    return http_conns([get(b"/", host=h) for h in hosts], first_sport=41500)


def ds_shared_set():
    # One set filled by DNS queries and tested by HTTP hosts.
    pkts = [
        IP(src=CLIENT, dst=SERVER)
        / UDP(sport=53200, dport=53)
        / DNS(id=7, rd=1, qd=DNSQR(qname="seen.example", qtype="A"))
    ]
    pkts += http_conns([get(b"/", host=h) for h in (b"seen.example", b"other.example")],
                       first_sport=41600)
    return pkts


CAPTURES = {
    "ds-load-ip": ds_load_ip,
    "ds-ua-seen": ds_ua_seen,
    "ds-load-string": ds_load_string,
    "ds-md5-uri": ds_md5_uri,
    "ds-unset": ds_unset,
    "ds-datarep": ds_datarep,
    "ds-shared-set": ds_shared_set,
}
