"""The TCP connection and addresses every Scapy-built capture uses."""

from scapy.all import IP, TCP, Raw

CLIENT, SERVER = "10.1.0.5", "10.2.0.7"
# IPv6 unique local addresses (RFC 4193), the private range of IPv6.
CLIENT6, SERVER6 = "fd00:1::5", "fd00:2::7"
# Locally administered MAC addresses, for captures that write their own
# Ethernet headers.
MAC_C, MAC_S = "02:00:00:00:00:01", "02:00:00:00:00:02"


class Conn:
    """A TCP connection from CLIENT:sport to SERVER:dport, handshake first."""

    def __init__(self, dport, sport=40001):
        self.sport, self.dport = sport, dport
        self.cseq, self.sseq = 1000, 50000
        self.pkts = [
            IP(src=CLIENT, dst=SERVER) / TCP(sport=sport, dport=dport, flags="S", seq=self.cseq),
            IP(src=SERVER, dst=CLIENT)
            / TCP(sport=dport, dport=sport, flags="SA", seq=self.sseq, ack=self.cseq + 1),
            IP(src=CLIENT, dst=SERVER)
            / TCP(sport=sport, dport=dport, flags="A", seq=self.cseq + 1, ack=self.sseq + 1),
        ]
        self.cseq += 1
        self.sseq += 1

    def send(self, to_server, data):
        """One segment of `data`, then the other side's ACK of it."""
        if to_server:
            ip, tcp = IP(src=CLIENT, dst=SERVER), TCP(sport=self.sport, dport=self.dport)
            tcp.seq, tcp.ack = self.cseq, self.sseq
            self.cseq += len(data)
            back = IP(src=SERVER, dst=CLIENT) / TCP(
                sport=self.dport, dport=self.sport, flags="A", seq=self.sseq, ack=self.cseq
            )
        else:
            ip, tcp = IP(src=SERVER, dst=CLIENT), TCP(sport=self.dport, dport=self.sport)
            tcp.seq, tcp.ack = self.sseq, self.cseq
            self.sseq += len(data)
            back = IP(src=CLIENT, dst=SERVER) / TCP(
                sport=self.sport, dport=self.dport, flags="A", seq=self.cseq, ack=self.sseq
            )
        tcp.flags = "PA"
        self.pkts += [ip / tcp / Raw(data), back]
        return self
