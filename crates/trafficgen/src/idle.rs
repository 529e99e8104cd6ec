//! Traces with long idle gaps, for tests of idle timeouts: many TCP and UDP
//! flows interleaved, each pausing now and then for about one of the timeouts
//! under test (some pauses just below a timeout, some exactly on it, some just
//! above, some far above), TCP with handshakes, data both ways, FIN teardowns
//! or none, and 5-tuples reused by a later connection.
//!
//! Whatever processes such a trace must give the same result however its
//! packets are batched: a timer that runs between two batches must not decide
//! differently from a packet that finds the state idle.

use sluice_wire::build::{write_frame, Transport};
use sluice_wire::udp::UdpRepr;
use sluice_wire::IpAddr;

use crate::{Endpoints, Rng, TcpConversation, Trace};

/// What [`idle_trace`] generates.
#[derive(Debug, Clone)]
pub struct IdleSpec {
    /// Seed of every random choice.
    pub seed: u64,
    /// Number of conversations (a reused 5-tuple counts once per conversation).
    pub flows: usize,
    /// The idle timeouts under test, in nanoseconds: long pauses are drawn
    /// around these.
    pub timeouts_ns: Vec<u64>,
    /// Fraction (0..=1) of packets followed by a long pause rather than a
    /// short one.
    pub pause_share: f64,
    /// Fraction (0..=1) of UDP conversations.
    pub udp_share: f64,
    /// Time of the earliest packet.
    pub start_ns: u64,
    /// Fraction (0..=1) of conversations that reuse the 5-tuple of an
    /// earlier one (starting after it).
    pub reuse_share: f64,
    /// Largest data payload, in bytes (at least 1).
    pub payload_max: usize,
    /// Payloads that may be embedded in data packets (e.g. IPS signatures); one
    /// data packet in eight carries one of them.
    pub needles: Vec<Vec<u8>>,
}

impl Default for IdleSpec {
    fn default() -> Self {
        IdleSpec {
            seed: 1,
            flows: 40,
            timeouts_ns: vec![5_000_000_000],
            pause_share: 0.15,
            udp_share: 0.35,
            start_ns: 1_000_000_000_000,
            reuse_share: 0.2,
            payload_max: 900,
            needles: Vec::new(),
        }
    }
}

/// Uniform in `0..n` for any `n` ([`Rng::below`] takes at most 32 bits).
fn below(rng: &mut Rng, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// The pause after a packet: mostly short, sometimes about a timeout (just
/// below, on it, just above, or well past it).
fn pause(spec: &IdleSpec, rng: &mut Rng) -> u64 {
    if spec.timeouts_ns.is_empty() || rng.unit() >= spec.pause_share {
        return 10_000 + rng.below(20_000_000);
    }
    let t = spec.timeouts_ns[rng.below(spec.timeouts_ns.len() as u64) as usize];
    match rng.below(6) {
        0 => t.saturating_sub(1 + rng.below(1_000_000)),
        1 => t.saturating_sub(1),
        2 => t,
        3 => t + 1,
        4 => t + 1 + rng.below(1_000_000),
        _ => t + t / 2 + below(rng, t),
    }
}

/// A data payload of `len` bytes, sometimes one of the spec's needles.
fn payload(spec: &IdleSpec, rng: &mut Rng, out: &mut Vec<u8>) {
    out.clear();
    if !spec.needles.is_empty() && rng.below(8) == 0 {
        let n = &spec.needles[rng.below(spec.needles.len() as u64) as usize];
        out.extend_from_slice(b"..");
        out.extend_from_slice(n);
        out.extend_from_slice(b"..");
        return;
    }
    let len = 1 + rng.below(spec.payload_max.max(1) as u64) as usize;
    let c = b'a' + rng.below(26) as u8;
    out.resize(len, c);
}

/// The frames of one TCP conversation, in order.
fn tcp_frames(spec: &IdleSpec, rng: &mut Rng, ep: Endpoints, out: &mut Vec<Vec<u8>>) {
    let mut buf = vec![0u8; 2048];
    let mut pay = Vec::new();
    let mut conv = TcpConversation::new(ep, rng.next_u64() as u32, rng.next_u64() as u32);
    conv.handshake(&mut buf, &mut |b| out.push(b.to_vec()));
    for _ in 0..1 + rng.below(10) {
        payload(spec, rng, &mut pay);
        let from_client = rng.below(3) != 0;
        conv.data(&mut buf, from_client, &pay, &mut |b| out.push(b.to_vec()));
    }
    // Most conversations end with FINs both ways; some are abandoned.
    if rng.below(4) != 0 {
        conv.teardown(&mut buf, &mut |b| out.push(b.to_vec()));
        if rng.below(4) == 0 {
            // A late duplicate of the final ACK.
            let again = out[out.len() - 1].clone();
            out.push(again);
        }
    }
}

/// The frames of one UDP exchange, in order.
fn udp_frames(spec: &IdleSpec, rng: &mut Rng, ep: Endpoints, out: &mut Vec<Vec<u8>>) {
    let mut buf = vec![0u8; 2048];
    let mut pay = Vec::new();
    for k in 0..1 + rng.below(12) {
        payload(spec, rng, &mut pay);
        let from_client = k == 0 || rng.below(2) == 0;
        let (s, d, sp, dp) = if from_client {
            (ep.client, ep.server, ep.client_port, ep.server_port)
        } else {
            (ep.server, ep.client, ep.server_port, ep.client_port)
        };
        let u = UdpRepr {
            src_port: sp,
            dst_port: dp,
        };
        let n = write_frame(&mut buf, s, d, Transport::Udp(u), &pay).expect("frame fits");
        out.push(buf[..n].to_vec());
    }
}

/// Generates the trace `spec` describes, in time order (ties keep the order
/// conversations were generated in). Deterministic in the spec.
///
/// Clients are 10.77.x.y, servers 192.0.2.1-4 (TCP port 80, UDP port 53).
pub fn idle_trace(spec: &IdleSpec) -> Trace {
    let mut rng = Rng::new(spec.seed);
    let longest = spec
        .timeouts_ns
        .iter()
        .copied()
        .max()
        .unwrap_or(1_000_000_000);
    let span = 3 * longest;
    // (time, conversation, index in it, frame)
    let mut stamped: Vec<(u64, usize, usize, Vec<u8>)> = Vec::new();
    // Per 5-tuple: (endpoints, udp?, time of its last packet).
    let mut tuples: Vec<(Endpoints, bool, u64)> = Vec::new();
    let mut frames = Vec::new();
    for f in 0..spec.flows {
        let reuse = !tuples.is_empty() && rng.unit() < spec.reuse_share;
        let (ep, udp, mut ts) = if reuse {
            let k = rng.below(tuples.len() as u64) as usize;
            let (ep, udp, last) = tuples[k];
            (ep, udp, last + pause(spec, &mut rng))
        } else {
            let c = f as u32;
            let udp = rng.unit() < spec.udp_share;
            let ep = Endpoints {
                client: IpAddr::V4([10, 77, (c >> 8) as u8, c as u8]),
                server: IpAddr::V4([192, 0, 2, 1 + rng.below(4) as u8]),
                client_port: 20_000 + (c % 40_000) as u16,
                server_port: if udp { 53 } else { 80 },
            };
            (ep, udp, spec.start_ns + below(&mut rng, span))
        };
        frames.clear();
        if udp {
            udp_frames(spec, &mut rng, ep, &mut frames);
        } else {
            tcp_frames(spec, &mut rng, ep, &mut frames);
        }
        for (i, fr) in frames.drain(..).enumerate() {
            if i > 0 {
                ts += pause(spec, &mut rng);
            }
            stamped.push((ts, f, i, fr));
        }
        match tuples.iter_mut().find(|t| t.0 == ep) {
            Some(t) => t.2 = t.2.max(ts),
            None => tuples.push((ep, udp, ts)),
        }
    }
    stamped.sort_by_key(|s| (s.0, s.1, s.2));
    let mut trace = Trace::new();
    for (ts, _, _, fr) in &stamped {
        trace.push(*ts, fr);
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_sorted_and_paused_around_the_timeouts() {
        let spec = IdleSpec {
            flows: 60,
            timeouts_ns: vec![2_000_000_000, 5_000_000_000],
            ..IdleSpec::default()
        };
        let a = idle_trace(&spec);
        let b = idle_trace(&spec);
        assert_eq!(a.len(), b.len());
        assert!(a.iter().zip(b.iter()).all(|(x, y)| x == y));
        assert!(a.len() > 300, "{}", a.len());
        let ts: Vec<u64> = a.iter().map(|(t, _)| t).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
        let other = idle_trace(&IdleSpec { seed: 2, ..spec });
        assert!(other.iter().zip(a.iter()).any(|(x, y)| x != y));
    }

    #[test]
    fn pauses_hit_both_sides_of_each_timeout() {
        let spec = IdleSpec {
            timeouts_ns: vec![3_000_000_000],
            pause_share: 1.0,
            ..IdleSpec::default()
        };
        let mut rng = Rng::new(9);
        let p: Vec<u64> = (0..600).map(|_| pause(&spec, &mut rng)).collect();
        let t = 3_000_000_000;
        assert!(p.contains(&(t - 1)) && p.contains(&t) && p.contains(&(t + 1)));
        assert!(p.iter().any(|&x| x < t - 1) && p.iter().any(|&x| x > t + 1_000_000));
    }
}
