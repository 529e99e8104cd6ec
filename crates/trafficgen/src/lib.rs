//! Synthetic traffic for tests, benchmarks and the sample trace.
//!
//! Traffic is a set of flows, each a realistic TCP conversation (three-way
//! handshake, data, FIN teardown) or a UDP exchange, interleaved so that a chosen
//! number of flows are active at once. Everything is derived from a seed: the same
//! [`TrafficSpec`] always yields the same bytes. Frames are built into one flat
//! arena ([`Trace`]) so a benchmark replays them without touching the allocator.

pub mod idle;

pub use idle::{idle_trace, IdleSpec};
use serde::{Deserialize, Serialize};
use sluice_wire::build::{tcp_repr, write_frame, Transport};
use sluice_wire::tcp::flags::{ACK, FIN, PSH, SYN};
use sluice_wire::udp::UdpRepr;
use sluice_wire::IpAddr;

/// Bytes of Ethernet + IPv4 + TCP headers (no options) in generated frames.
pub const TCP_V4_OVERHEAD: usize = 14 + 20 + 20;
/// Bytes of Ethernet + IPv4 + UDP headers.
pub const UDP_V4_OVERHEAD: usize = 14 + 20 + 8;
/// Smallest frame generated (Ethernet minimum without FCS).
pub const MIN_FRAME: usize = 60;
/// Largest frame generated: jumbo frames and offloaded (GSO) segments up to the
/// 64 KiB that an IP packet's length allows.
pub const MAX_FRAME: usize = u16::MAX as usize;

/// Transport of generated flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP conversations with handshake and teardown.
    Tcp,
    /// UDP request/response exchanges.
    Udp,
}

/// What traffic to generate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrafficSpec {
    /// Number of flows.
    pub flows: usize,
    /// Packets per flow, both directions, handshake and teardown included (TCP
    /// needs at least 7: 3 handshake, 1 data, 3 teardown).
    pub packets_per_flow: usize,
    /// Frame size in bytes of data packets (control packets are minimum size).
    pub frame_size: usize,
    /// Flows active at once; packets of active flows interleave.
    pub concurrency: usize,
    /// Transport.
    pub proto: Proto,
    /// Fraction (0..=1) of data packets sent by the server (downloads) rather than the client.
    pub server_share: f64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Client addresses are drawn from 10.(seed-based).x.y; servers from 192.0.2.0/24.
    pub servers: u8,
    /// Destination port of every flow.
    pub server_port: u16,
    /// Nanoseconds between consecutive packets.
    pub gap_ns: u64,
    /// Time of the first packet.
    pub start_ns: u64,
}

impl Default for TrafficSpec {
    fn default() -> Self {
        TrafficSpec {
            flows: 100,
            packets_per_flow: 20,
            frame_size: 64,
            concurrency: 16,
            proto: Proto::Tcp,
            server_share: 0.5,
            seed: 1,
            servers: 4,
            server_port: 80,
            gap_ns: 1_000,
            start_ns: 1_700_000_000_000_000_000,
        }
    }
}

impl TrafficSpec {
    /// StatelessNF §4.6.2.2's best case: few long flows (scaled: `flows` of 10,000 packets).
    pub fn long_flows(flows: usize, frame_size: usize) -> Self {
        TrafficSpec {
            flows,
            packets_per_flow: 10_000,
            frame_size,
            concurrency: flows,
            ..Default::default()
        }
    }

    /// StatelessNF §4.6.2.2's worst case: many short flows of 100 packets.
    pub fn short_flows(flows: usize, frame_size: usize) -> Self {
        TrafficSpec {
            flows,
            packets_per_flow: 100,
            frame_size,
            concurrency: 64,
            ..Default::default()
        }
    }
}

/// A generated trace: frames in one arena, in send order.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    data: Vec<u8>,
    index: Vec<(u32, u16, u64)>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Trace::default()
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True if there are no frames.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Frame `i` and its timestamp.
    pub fn get(&self, i: usize) -> (u64, &[u8]) {
        let (off, len, ts) = self.index[i];
        (ts, &self.data[off as usize..off as usize + len as usize])
    }

    /// Iterates (timestamp, frame).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Spaces the timestamps `gap_ns` apart from the first one on, keeping the
    /// frames and their order (a replay at another rate).
    pub fn restamp(&mut self, gap_ns: u64) {
        let Some(&(_, _, first)) = self.index.first() else {
            return;
        };
        for (i, e) in self.index.iter_mut().enumerate() {
            e.2 = first + i as u64 * gap_ns;
        }
    }

    /// Appends a frame.
    pub fn push(&mut self, ts_ns: u64, frame: &[u8]) {
        self.index
            .push((self.data.len() as u32, frame.len() as u16, ts_ns));
        self.data.extend_from_slice(frame);
    }

    /// Total frame bytes.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Appends every frame of `other` with timestamps shifted to follow this trace.
    pub fn extend(&mut self, other: &Trace) {
        for (ts, f) in other.iter() {
            self.push(ts, f);
        }
    }
}

/// A small, fast, seedable generator (xorshift64*); quality is ample for traffic shapes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is remapped).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One endpoint pair of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Client address.
    pub client: IpAddr,
    /// Server address.
    pub server: IpAddr,
    /// Client port.
    pub client_port: u16,
    /// Server port.
    pub server_port: u16,
}

/// Builds the packets of one TCP conversation, payload bytes from `payload_of`.
///
/// `payload_of(from_client, stream_offset, len, out)` fills `out` with the payload
/// bytes at that offset of that direction's stream, so callers can embed content.
pub struct TcpConversation {
    ep: Endpoints,
    cseq: u32,
    sseq: u32,
    coff: u64,
    soff: u64,
}

impl TcpConversation {
    /// A conversation with the given initial sequence numbers.
    pub fn new(ep: Endpoints, client_isn: u32, server_isn: u32) -> Self {
        TcpConversation {
            ep,
            cseq: client_isn,
            sseq: server_isn,
            coff: 0,
            soff: 0,
        }
    }

    fn frame(&self, buf: &mut [u8], from_client: bool, flags: u8, payload: &[u8]) -> usize {
        let (src, dst, sp, dp, seq, ack) = if from_client {
            (
                self.ep.client,
                self.ep.server,
                self.ep.client_port,
                self.ep.server_port,
                self.cseq,
                self.sseq,
            )
        } else {
            (
                self.ep.server,
                self.ep.client,
                self.ep.server_port,
                self.ep.client_port,
                self.sseq,
                self.cseq,
            )
        };
        let t = tcp_repr(sp, dp, seq, if flags & ACK != 0 { ack } else { 0 }, flags);
        write_frame(buf, src, dst, Transport::Tcp(t), payload).expect("generated frame fits")
    }

    /// The three handshake frames.
    pub fn handshake(&mut self, buf: &mut [u8], out: &mut dyn FnMut(&[u8])) {
        let n = self.frame(buf, true, SYN, &[]);
        out(&buf[..n]);
        self.cseq = self.cseq.wrapping_add(1);
        let n = self.frame(buf, false, SYN | ACK, &[]);
        out(&buf[..n]);
        self.sseq = self.sseq.wrapping_add(1);
        let n = self.frame(buf, true, ACK, &[]);
        out(&buf[..n]);
    }

    /// One data segment carrying `payload`.
    pub fn data(
        &mut self,
        buf: &mut [u8],
        from_client: bool,
        payload: &[u8],
        out: &mut dyn FnMut(&[u8]),
    ) {
        let n = self.frame(buf, from_client, ACK | PSH, payload);
        out(&buf[..n]);
        if from_client {
            self.cseq = self.cseq.wrapping_add(payload.len() as u32);
            self.coff += payload.len() as u64;
        } else {
            self.sseq = self.sseq.wrapping_add(payload.len() as u32);
            self.soff += payload.len() as u64;
        }
    }

    /// The teardown: FIN from the client, FIN-ACK from the server, final ACK.
    pub fn teardown(&mut self, buf: &mut [u8], out: &mut dyn FnMut(&[u8])) {
        let n = self.frame(buf, true, FIN | ACK, &[]);
        out(&buf[..n]);
        self.cseq = self.cseq.wrapping_add(1);
        let n = self.frame(buf, false, FIN | ACK, &[]);
        out(&buf[..n]);
        self.sseq = self.sseq.wrapping_add(1);
        let n = self.frame(buf, true, ACK, &[]);
        out(&buf[..n]);
    }

    /// Bytes sent so far (client, server).
    pub fn offsets(&self) -> (u64, u64) {
        (self.coff, self.soff)
    }
}

/// The endpoints of flow `i` of a spec: distinct client address/port per flow.
pub fn endpoints(spec: &TrafficSpec, i: usize) -> Endpoints {
    let c = i as u32;
    Endpoints {
        client: IpAddr::V4([10, (c >> 16) as u8, (c >> 8) as u8, c as u8 | 1]),
        server: IpAddr::V4([192, 0, 2, 1 + (i % spec.servers.max(1) as usize) as u8]),
        client_port: 1024 + (c % 60_000) as u16,
        server_port: spec.server_port,
    }
}

enum FlowGen {
    Tcp {
        conv: TcpConversation,
        left: usize,
        phase: u8,
    },
    Udp {
        ep: Endpoints,
        left: usize,
    },
}

/// Generates the trace a spec describes.
pub fn generate(spec: &TrafficSpec) -> Trace {
    let mut trace = Trace::new();
    let mut rng = Rng::new(spec.seed);
    let mut buf = vec![0u8; MAX_FRAME];
    let mut pay = vec![0u8; MAX_FRAME];
    let mut ts = spec.start_ns;
    let mut next_flow = 0usize;
    let mut active: Vec<FlowGen> = Vec::with_capacity(spec.concurrency);
    let tcp_min = 7;
    let overhead = if spec.proto == Proto::Tcp {
        TCP_V4_OVERHEAD
    } else {
        UDP_V4_OVERHEAD
    };
    let payload_len = spec
        .frame_size
        .clamp(MIN_FRAME, MAX_FRAME)
        .saturating_sub(overhead);
    for (i, b) in pay.iter_mut().enumerate() {
        // Printable, varied, and free of the sample signatures.
        *b = b"abcdefghijklmnopqrstuvwxyz0123456789 ,.-"[(i * 7 + i / 13) % 40];
    }
    loop {
        while active.len() < spec.concurrency.max(1) && next_flow < spec.flows {
            let ep = endpoints(spec, next_flow);
            active.push(match spec.proto {
                Proto::Tcp => FlowGen::Tcp {
                    conv: TcpConversation::new(ep, rng.next_u64() as u32, rng.next_u64() as u32),
                    left: spec.packets_per_flow.max(tcp_min) - 6,
                    phase: 0,
                },
                Proto::Udp => FlowGen::Udp {
                    ep,
                    left: spec.packets_per_flow.max(1),
                },
            });
            next_flow += 1;
        }
        if active.is_empty() {
            break;
        }
        let k = rng.below(active.len() as u64) as usize;
        let mut done = false;
        let mut emit = |f: &[u8]| {
            trace.push(ts, f);
            ts += spec.gap_ns;
        };
        match &mut active[k] {
            FlowGen::Tcp { conv, left, phase } => match *phase {
                0 => {
                    conv.handshake(&mut buf, &mut emit);
                    *phase = 1;
                }
                1 => {
                    let from_client = rng.unit() >= spec.server_share;
                    conv.data(&mut buf, from_client, &pay[..payload_len], &mut emit);
                    *left -= 1;
                    if *left == 0 {
                        *phase = 2;
                    }
                }
                _ => {
                    conv.teardown(&mut buf, &mut emit);
                    done = true;
                }
            },
            FlowGen::Udp { ep, left } => {
                let from_client = *left % 2 == 1 || rng.unit() >= spec.server_share;
                let (s, d, sp, dp) = if from_client {
                    (ep.client, ep.server, ep.client_port, ep.server_port)
                } else {
                    (ep.server, ep.client, ep.server_port, ep.client_port)
                };
                let u = UdpRepr {
                    src_port: sp,
                    dst_port: dp,
                };
                let n = write_frame(&mut buf, s, d, Transport::Udp(u), &pay[..payload_len])
                    .expect("fits");
                emit(&buf[..n]);
                *left -= 1;
                done = *left == 0;
            }
        }
        if done {
            active.swap_remove(k);
        }
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::parse::{parse_frame, L4};

    #[test]
    fn restamping_keeps_frames_and_spaces_timestamps() {
        let mut t = Trace::new();
        t.push(500, b"aa");
        t.push(1500, b"bbb");
        t.push(2500, b"c");
        t.restamp(70);
        let got: Vec<(u64, Vec<u8>)> = t.iter().map(|(ts, f)| (ts, f.to_vec())).collect();
        assert_eq!(
            got,
            vec![
                (500, b"aa".to_vec()),
                (570, b"bbb".to_vec()),
                (640, b"c".to_vec())
            ]
        );
        Trace::new().restamp(5);
    }

    #[test]
    fn counts_sizes_and_determinism() {
        let spec = TrafficSpec {
            flows: 10,
            packets_per_flow: 20,
            frame_size: 128,
            ..Default::default()
        };
        let t = generate(&spec);
        assert_eq!(t.len(), 200);
        let data: Vec<_> = t.iter().filter(|(_, f)| f.len() > MIN_FRAME).collect();
        assert_eq!(data.len(), 10 * 14);
        assert!(data.iter().all(|(_, f)| f.len() == 128));
        let again = generate(&spec);
        assert!(t.iter().zip(again.iter()).all(|(a, b)| a == b));
        for (_, f) in t.iter() {
            let m = parse_frame(f).unwrap();
            assert_eq!(m.l4, L4::Tcp);
            assert!(sluice_wire::rewrite::verify_all_checksums(f));
        }
    }

    #[test]
    fn every_tcp_flow_is_a_valid_conversation() {
        let spec = TrafficSpec {
            flows: 3,
            packets_per_flow: 9,
            concurrency: 3,
            ..Default::default()
        };
        let t = generate(&spec);
        // Per flow: SYN first, then SYN-ACK, and sequence numbers advance by payload.
        let mut seen = std::collections::HashMap::new();
        for (_, f) in t.iter() {
            let m = parse_frame(f).unwrap();
            let (c, _) = m.flow.canonical();
            let e = seen.entry(c).or_insert_with(Vec::new);
            e.push(m.tcp_flags);
        }
        assert_eq!(seen.len(), 3);
        for flags in seen.values() {
            assert_eq!(flags.len(), 9);
            assert_eq!(flags[0], SYN);
            assert_eq!(flags[1], SYN | ACK);
            assert_eq!(flags[flags.len() - 3], FIN | ACK);
        }
    }

    #[test]
    fn udp_flows() {
        let spec = TrafficSpec {
            flows: 4,
            packets_per_flow: 5,
            proto: Proto::Udp,
            ..Default::default()
        };
        let t = generate(&spec);
        assert_eq!(t.len(), 20);
        assert!(t.iter().all(|(_, f)| parse_frame(f).unwrap().l4 == L4::Udp));
    }
}
