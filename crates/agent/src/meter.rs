//! What the agent measures of a chain's application, sans-IO: the metric
//! Stratos's scaler can follow when the tenant's application reports nothing
//! (issue 5: "agents also measure").
//!
//! The agent sees every packet enter a chain at a VM's port and every packet it
//! delivers to a VM, so for each chain it counts packets and bytes entering, new
//! TCP connections (SYNs entering), and times each connection's handshake: from
//! the client's SYN entering the chain to the SYN-ACK delivered back to that
//! client, through every middlebox queue on the way and back and the server's
//! accept. That time grows when a middlebox of the chain is the bottleneck (its
//! queue holds the SYN), which is what the scaler needs; completed handshakes per
//! second are the connection rate the chain sustains. Counters are cumulative;
//! the controller takes differences between reports.

use std::collections::HashMap;

use sluice_proto::ChainMeasure;
use sluice_wire::parse::L4;
use sluice_wire::{FlowKey, PacketMeta};

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const RST: u8 = 0x04;

/// Most handshakes timed at once (SYNs beyond it are counted, not timed).
pub const PENDING_CAPACITY: usize = 65_536;
/// A SYN unanswered for this long is forgotten (counted as unanswered).
pub const PENDING_TIMEOUT_NS: u64 = 10_000_000_000;

/// Per-chain application measurements of one agent.
#[derive(Debug, Clone, Default)]
pub struct ChainMeter {
    /// `(vni, chain id)` -> counters; few chains per host, so a short list.
    chains: Vec<ChainMeasure>,
    /// The index `entered` found last (consecutive packets share a chain).
    last: usize,
    /// `(vni, client-to-server flow)` -> (index into `chains`, SYN time).
    pending: HashMap<(u32, FlowKey), (u32, u64)>,
}

impl ChainMeter {
    /// An empty meter.
    pub fn new() -> ChainMeter {
        ChainMeter::default()
    }

    fn index(&mut self, vni: u32, chain: u16) -> usize {
        if let Some(c) = self.chains.get(self.last) {
            if c.vni == vni && c.chain == chain {
                return self.last;
            }
        }
        let i = match self
            .chains
            .iter()
            .position(|c| c.vni == vni && c.chain == chain)
        {
            Some(i) => i,
            None => {
                self.chains.push(ChainMeasure {
                    vni,
                    chain,
                    ..ChainMeasure::default()
                });
                self.chains.len() - 1
            }
        };
        self.last = i;
        i
    }

    /// A packet of `len` bytes (parsed into `meta`) entered chain `chain` of
    /// tenant `vni` from a VM at `now_ns`.
    pub fn entered(&mut self, vni: u32, chain: u16, meta: &PacketMeta, len: usize, now_ns: u64) {
        let i = self.index(vni, chain);
        let c = &mut self.chains[i];
        c.packets += 1;
        c.bytes += len as u64;
        if meta.l4 == L4::Tcp && meta.tcp_flags & (SYN | ACK | RST) == SYN {
            c.syns += 1;
            if self.pending.len() < PENDING_CAPACITY {
                // A retransmitted SYN keeps the first one's time: the wait is
                // what the client saw.
                self.pending
                    .entry((vni, meta.flow))
                    .or_insert((i as u32, now_ns));
            }
        }
    }

    /// True while some handshake waits for its SYN-ACK (the delivery path
    /// checks nothing else otherwise).
    #[inline]
    pub fn waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// A packet (parsed into `meta`) is delivered to a VM of tenant `vni` at
    /// `now_ns`: if it is the SYN-ACK of a timed handshake, the handshake is done.
    pub fn delivered(&mut self, vni: u32, meta: &PacketMeta, now_ns: u64) {
        if meta.l4 != L4::Tcp || meta.tcp_flags & (SYN | ACK | RST) != SYN | ACK {
            return;
        }
        if let Some((i, t)) = self.pending.remove(&(vni, meta.flow.reverse())) {
            let c = &mut self.chains[i as usize];
            c.handshakes += 1;
            c.handshake_ns += now_ns.saturating_sub(t);
        }
    }

    /// A packet of chain `chain` of tenant `vni` reached its end here after
    /// `ns` nanoseconds in Sluice's hosts (its chain clock). A clock that went
    /// backwards (above 2^31 ns: a host's clock was set back while the packet
    /// was in it) is no measurement.
    #[inline]
    pub fn chain_latency(&mut self, vni: u32, chain: u16, ns: u32) {
        if ns >= 1 << 31 {
            return;
        }
        let i = self.index(vni, chain);
        self.chains[i].latency.observe(u64::from(ns), 1);
    }

    /// Forgets handshakes unanswered for [`PENDING_TIMEOUT_NS`].
    pub fn expire(&mut self, now_ns: u64) {
        let chains = &mut self.chains;
        self.pending.retain(|_, (i, t)| {
            let keep = now_ns.saturating_sub(*t) < PENDING_TIMEOUT_NS;
            if !keep {
                chains[*i as usize].unanswered += 1;
            }
            keep
        });
    }

    /// The cumulative counters of every chain seen.
    pub fn report(&self) -> Vec<ChainMeasure> {
        self.chains.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::build;
    use sluice_wire::parse::parse_frame;

    fn ip(a: &str) -> [u8; 4] {
        a.parse::<std::net::Ipv4Addr>().unwrap().octets()
    }

    fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: u8) -> PacketMeta {
        let f = build::tcp_v4(ip(src), ip(dst), sport, dport, 1, 0, flags, b"");
        parse_frame(&f).unwrap()
    }

    #[test]
    fn times_handshakes_from_syn_to_syn_ack_per_chain() {
        let mut m = ChainMeter::new();
        let syn = tcp("10.0.0.1", 4000, "10.0.1.1", 80, SYN);
        let syn_ack = tcp("10.0.1.1", 80, "10.0.0.1", 4000, SYN | ACK);
        let ack = tcp("10.0.0.1", 4000, "10.0.1.1", 80, ACK);
        m.entered(7, 2, &syn, 60, 1_000);
        // A retransmitted SYN keeps the first time.
        m.entered(7, 2, &syn, 60, 5_000);
        assert!(m.waiting());
        // Another tenant's SYN-ACK for the same addresses is not it.
        m.delivered(8, &syn_ack, 6_000);
        assert!(m.waiting());
        m.delivered(7, &syn_ack, 11_000);
        assert!(!m.waiting());
        m.entered(7, 2, &ack, 54, 12_000);
        // A SYN-ACK nobody waits for changes nothing.
        m.delivered(7, &syn_ack, 13_000);
        m.entered(7, 4, &tcp("10.0.0.2", 1, "10.0.1.1", 80, SYN), 60, 20_000);
        let r = m.report();
        assert_eq!(r.len(), 2);
        let c = &r[0];
        assert_eq!((c.vni, c.chain), (7, 2));
        assert_eq!((c.packets, c.bytes, c.syns), (3, 174, 2));
        assert_eq!((c.handshakes, c.handshake_ns), (1, 10_000));
        assert_eq!((r[1].chain, r[1].syns, r[1].handshakes), (4, 1, 0));
        // The unanswered SYN is forgotten after the timeout.
        m.expire(20_000 + PENDING_TIMEOUT_NS);
        assert!(!m.waiting());
        assert_eq!(m.report()[1].unanswered, 1);
    }

    #[test]
    fn non_tcp_and_other_flags_are_counted_not_timed() {
        let mut m = ChainMeter::new();
        let udp = build::udp_v4(ip("10.0.0.1"), ip("10.0.1.1"), 53, 53, b"x");
        let udp = parse_frame(&udp).unwrap();
        m.entered(1, 0, &udp, 43, 1);
        m.entered(1, 0, &tcp("10.0.0.1", 1, "10.0.1.1", 80, SYN | ACK), 60, 2);
        m.entered(1, 0, &tcp("10.0.0.1", 2, "10.0.1.1", 80, SYN | RST), 60, 3);
        assert!(!m.waiting());
        assert_eq!(m.report()[0].packets, 3);
        assert_eq!(m.report()[0].syns, 0);
    }
}
