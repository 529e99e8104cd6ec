//! Traffic shared by the header-rewriting tests (`any_instance_rewrite.rs`,
//! `cached_rewrite.rs`): TCP, UDP and ping conversations between clients and
//! servers, built packet by packet so each side's frames follow what the other
//! side saw (addresses and ports as rewritten by NAT or LB).

#![allow(dead_code)]

use sluice_trafficgen::Rng;
use sluice_wire::build::{tcp_repr, write_frame, Transport};
use sluice_wire::icmp::IcmpRepr;
use sluice_wire::parse::parse_frame;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, SYN};
use sluice_wire::udp::UdpRepr;
use sluice_wire::IpAddr;

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Tcp,
    Udp,
    Ping,
}

/// One packet of a conversation, from the client (outbound) or the server.
#[derive(Clone)]
pub struct Step {
    pub flow: usize,
    pub outbound: bool,
    pub flags: u8,
    pub payload: Vec<u8>,
}

#[derive(Clone)]
pub struct Flow {
    pub kind: Kind,
    pub client: (IpAddr, u16),
    pub server: (IpAddr, u16),
    pub cseq: u32,
    pub sseq: u32,
}

pub fn conversations(servers: &[(IpAddr, u16)], n: usize) -> (Vec<Flow>, Vec<Step>) {
    let mut flows = Vec::new();
    let mut per: Vec<Vec<Step>> = Vec::new();
    for f in 0..n {
        let kind = match f % 5 {
            3 => Kind::Udp,
            4 => Kind::Ping,
            _ => Kind::Tcp,
        };
        let client = (
            IpAddr::V4([10, 4, (f / 200) as u8, (f % 200) as u8 + 1]),
            40_000 + f as u16,
        );
        let server = servers[f % servers.len()];
        flows.push(Flow {
            kind,
            client,
            server,
            cseq: 1000 * f as u32 + 1,
            sseq: 50_000 + 7 * f as u32,
        });
        let st = |outbound, flags, payload: &[u8]| Step {
            flow: f,
            outbound,
            flags,
            payload: payload.to_vec(),
        };
        let steps = match kind {
            Kind::Tcp => vec![
                st(true, SYN, b""),
                st(false, SYN | ACK, b""),
                st(true, ACK, b""),
                st(true, ACK | PSH, b"GET / HTTP/1.1\r\n\r\n"),
                st(false, ACK | PSH, &[b'r'; 700]),
                st(false, ACK | PSH, &[b's'; 300]),
                st(true, FIN | ACK, b""),
                st(false, FIN | ACK, b""),
                st(true, ACK, b""),
            ],
            Kind::Udp => vec![
                st(true, 0, b"query"),
                st(false, 0, b"answer"),
                st(true, 0, b"again"),
            ],
            Kind::Ping => vec![st(true, 1, b"ping"), st(false, 0, b"ping")],
        };
        per.push(steps);
    }
    // Interleave deterministically, keeping each conversation's order.
    let mut rng = Rng::new(11);
    let mut cur = vec![0usize; n];
    let mut out = Vec::new();
    loop {
        let open: Vec<usize> = (0..n).filter(|&i| cur[i] < per[i].len()).collect();
        if open.is_empty() {
            break;
        }
        let f = open[rng.below(open.len() as u64) as usize];
        out.push(per[f][cur[f]].clone());
        cur[f] += 1;
    }
    (flows, out)
}

/// Builds a step's frame. Server packets go to `seen`, the client as the server saw
/// it, from the server the client's packet actually reached.
pub fn frame(f: &mut Flow, s: &Step, seen: Option<Pair>) -> Vec<u8> {
    let (src, dst) = if s.outbound {
        (f.client, f.server)
    } else {
        let (c, srv) = seen.unwrap_or((f.client, f.server));
        (srv, c)
    };
    let mut buf = vec![0u8; 2048];
    let t = match f.kind {
        Kind::Tcp => {
            let (seq, ack) = if s.outbound {
                (f.cseq, f.sseq)
            } else {
                (f.sseq, f.cseq)
            };
            let t = tcp_repr(
                src.1,
                dst.1,
                seq,
                if s.flags & ACK != 0 { ack } else { 0 },
                s.flags,
            );
            let adv = s.payload.len() as u32 + (s.flags & (SYN | FIN) != 0) as u32;
            if s.outbound {
                f.cseq = f.cseq.wrapping_add(adv);
            } else {
                f.sseq = f.sseq.wrapping_add(adv);
            }
            Transport::Tcp(t)
        }
        Kind::Udp => Transport::Udp(UdpRepr {
            src_port: src.1,
            dst_port: dst.1,
        }),
        Kind::Ping => Transport::Icmp(IcmpRepr::echo(
            false,
            s.outbound,
            if s.outbound { src.1 } else { dst.1 },
            1,
        )),
    };
    let n = write_frame(&mut buf, src.0, dst.0, t, &s.payload).unwrap();
    buf.truncate(n);
    buf
}

pub fn endpoints(frame: &[u8]) -> Option<Pair> {
    let m = parse_frame(frame).ok()?;
    Some(((m.flow.src, m.flow.src_port), (m.flow.dst, m.flow.dst_port)))
}

/// (client, server) endpoints as one side saw them.
pub type Pair = ((IpAddr, u16), (IpAddr, u16));
