"""A Geneve tunnel endpoint built on Scapy's Geneve layer (an implementation that
owes nothing to Sluice's), run by `interop.rs` in a host namespace with no agent.

It plays the far host of the fabric for one VM address (ECHO_VM): UDP datagrams
that arrive for it over Geneve are answered with "echo:" + their payload, sent
back over Geneve. Before answering anything it sends, unprompted, one datagram
to the agent's VM carrying an unknown critical option (RFC 8926 section 3.5: the
receiver must drop it) and then one carrying an unknown non-critical option
(which must be skipped). Everything it decoded is printed as one JSON object per
line; it exits after ECHOES answers or after TIMEOUT seconds.

Usage: geneve_peer.py LOCAL_UNDERLAY AGENT_UNDERLAY VNI ECHO_VM AGENT_VM ECHOES TIMEOUT
"""

import json
import socket
import sys
import time

from scapy.contrib.geneve import GENEVE, GeneveOptions
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

GENEVE_PORT = 6081
TEB = 0x6558
ROUTER_MAC = "02:53:4c:00:00:01"
PEER_MAC = "02:99:00:00:00:02"


def main():
    local, agent, vni, echo_vm, agent_vm, echoes, timeout = sys.argv[1:8]
    vni, echoes, timeout = int(vni), int(echoes), float(timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((local, GENEVE_PORT))
    sock.settimeout(0.5)

    def send(inner, options):
        g = GENEVE(vni=vni, proto=TEB, options=options) / inner
        sock.sendto(bytes(g), (agent, GENEVE_PORT))

    def to_vm(payload):
        return (
            Ether(src=PEER_MAC, dst=ROUTER_MAC)
            / IP(src=echo_vm, dst=agent_vm)
            / UDP(sport=4000, dport=9000)
            / payload
        )

    # Class 0x0101 (Open vSwitch): an option the agent has no reason to know.
    critical = GeneveOptions(classid=0x0101, type=0x85, data=b"\x00\x00\x00\x01")
    plain = GeneveOptions(classid=0x0101, type=0x05, data=b"\x00\x00\x00\x01")
    send(to_vm(b"must-be-dropped"), [critical])
    send(to_vm(b"hello-from-scapy"), [plain])
    print(json.dumps({"sent": "unprompted"}), flush=True)

    answered = 0
    deadline = time.monotonic() + timeout
    while answered < echoes and time.monotonic() < deadline:
        try:
            data, (src, sport) = sock.recvfrom(65535)
        except socket.timeout:
            continue
        g = GENEVE(data)
        seen = {
            "from": src,
            "version": g.version,
            "vni": g.vni,
            "proto": g.proto,
            "critical": g.critical,
            "options": [[o.classid, o.type, len(o.data)] for o in g.options],
        }
        inner = g.payload
        if isinstance(inner, Ether) and inner.haslayer(UDP):
            ip, udp = inner[IP], inner[UDP]
            seen.update(
                {
                    "inner_src": ip.src,
                    "inner_dst": ip.dst,
                    "dport": udp.dport,
                    "payload": bytes(udp.payload).decode("latin-1"),
                }
            )
            if ip.dst == echo_vm and udp.dport == 7:
                reply = (
                    Ether(src=inner.dst, dst=inner.src)
                    / IP(src=ip.dst, dst=ip.src)
                    / UDP(sport=7, dport=udp.sport)
                    / (b"echo:" + bytes(udp.payload))
                )
                send(reply, [])
                answered += 1
        else:
            seen["inner"] = inner.summary()
        print(json.dumps(seen), flush=True)
    print(json.dumps({"answered": answered}), flush=True)


if __name__ == "__main__":
    main()
