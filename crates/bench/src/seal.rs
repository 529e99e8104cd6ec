//! The cost of sealing the fabric (`sluice bench dataplane`, first part): the
//! agents' forwarding cores, in process, moving batches of frames from a VM on
//! host 1 across the fabric to a VM on host 2, plain Geneve and sealed
//! (AES-256-GCM) in the same run, at 64 and 1,500 bytes; and plain again with
//! the frames in a chain, whose chain/hop option carries the chain clock that
//! host 2 observes at delivery (what measuring every chain's added latency
//! costs).
//!
//! Each round is what the two agents do for one batch: host 1's
//! `process_vm_batch` (lookup, Geneve header, and sealing when on), the
//! datagrams copied into host 2's receive buffers (as the kernel would), and
//! host 2's `process_udp_batch` (checks, opening in place when on, lookup,
//! delivery). No sockets: what is measured is the CPU the data plane spends,
//! which is what sealing adds to; the two cores of a real pair of hosts run
//! the halves in parallel, so the figures are per packet through both.
//! Plain and sealed alternate, so load from elsewhere weighs on both.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_agent::dataplane::{Dataplane, TxPlan, ROUTER_MAC};
use sluice_controller::fabric::FabricSecret;
use sluice_proto::{AgentConfig, Peer, PortConfig, PortKind, TenantFib, GENEVE_PORT};
use sluice_switch::{Action, Entry, HostId, Match, Output, PortId, Prefix};

/// Frames per batch (the agent's default VM-port batch).
const BATCH: usize = 64;
/// Frame sizes measured (Ethernet, without FCS).
pub const SIZES: [usize; 2] = [64, 1500];
/// Alternating rounds per size.
const ROUNDS: usize = 3;

/// One frame size's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SealCost {
    /// Ethernet frame bytes.
    pub frame_bytes: usize,
    /// Plain Geneve: million packets per second through both agents' cores.
    pub plain_mpps: f64,
    /// Sealed: the same.
    pub sealed_mpps: f64,
    /// sealed / plain.
    pub ratio: f64,
    /// What sealing and opening add per packet, nanoseconds.
    pub added_ns: f64,
    /// Plain, in a chain (chain/hop option with the clock, its latency
    /// observed at delivery): million packets per second.
    pub chained_mpps: f64,
    /// chained / plain.
    pub chained_ratio: f64,
}

/// What the frames cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Plain Geneve, in no chain.
    Plain,
    /// Sealed, in no chain.
    Sealed,
    /// Plain Geneve, in a chain: the chain clock rides along.
    Chained,
}

fn route(id: u64, dst: &str, out: Output) -> Entry {
    Entry {
        id,
        priority: 10,
        m: Match {
            dst: Prefix::parse(dst).ok(),
            ..Match::default()
        },
        actions: vec![Action::Output(out)],
    }
}

pub(crate) fn underlay(h: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 255, 0, h as u8)
}

/// Host `h`'s configuration: its VM on port 1; 10.0.0.2 is host 2's VM;
/// with `chained`, host 1 marks the frames (chain 2, hop 1).
pub(crate) fn config(h: u32, fabric: Option<&FabricSecret>, chained: bool) -> AgentConfig {
    let out = if h == 1 {
        Output::Host(HostId(2))
    } else {
        Output::Port(PortId(1))
    };
    let mut entry = route(1, "10.0.0.2/32", out);
    if chained && h == 1 {
        entry
            .actions
            .insert(0, Action::SetChainHop { chain: 2, hop: 1 });
    }
    AgentConfig {
        version: 1,
        host: h,
        peers: [1, 2]
            .iter()
            .map(|&p| Peer {
                host: p,
                underlay: underlay(p),
            })
            .collect(),
        ports: vec![PortConfig {
            id: 1,
            vni: 7,
            kind: PortKind::Vm {
                name: format!("vm{h}"),
                iface: format!("p{h}"),
                mac: format!("02:00:00:00:00:0{h}"),
                weight: 1,
            },
        }],
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries: vec![entry],
            groups: vec![],
            senders: None,
            sources: None,
            chains: Vec::new(),
        }],
        fabric_auth: fabric.map(|f| f.keys_for(h, [1, 2])),
        ..AgentConfig::default()
    }
}

/// A UDP frame of `len` bytes from host 1's VM to host 2's.
fn frame(len: usize) -> Vec<u8> {
    let payload = vec![0xab; len.saturating_sub(14 + 20 + 8)];
    let mut f = sluice_wire::build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, &payload);
    f[..6].copy_from_slice(&ROUTER_MAC);
    f
}

/// Moves batches of `len`-byte frames host 1 -> host 2 for about `time`;
/// returns packets per second, or an error naming what went wrong.
fn measure(len: usize, mode: Mode, time: Duration) -> Result<f64, String> {
    let secret = FabricSecret::new([0x42; 32]);
    let fabric = (mode == Mode::Sealed).then_some(&secret);
    let chained = mode == Mode::Chained;
    let mut h1 = Dataplane::new(1, &config(1, fabric, chained)).map_err(|e| e.to_string())?;
    let mut h2 = Dataplane::new(2, &config(2, fabric, chained)).map_err(|e| e.to_string())?;
    h1.set_now(1);
    let vm: Vec<(Vec<u8>, Option<SocketAddrV4>)> = (0..BATCH).map(|_| (frame(len), None)).collect();
    let from1 = Some(SocketAddrV4::new(underlay(1), GENEVE_PORT));
    let mut rx: Vec<(Vec<u8>, Option<SocketAddrV4>)> = (0..BATCH)
        .map(|_| (Vec::with_capacity(len + 128), from1))
        .collect();
    let (mut p1, mut p2) = (TxPlan::new(), TxPlan::new());
    let mut packets = 0u64;
    let start = Instant::now();
    while start.elapsed() < time {
        for _ in 0..64 {
            p1.clear();
            h1.process_vm_batch(1, &vm, &mut p1);
            if p1.outs.len() != BATCH {
                return Err(format!("host 1 sent {} of {BATCH}", p1.outs.len()));
            }
            for (o, slot) in p1.outs.iter().zip(rx.iter_mut()) {
                slot.0.clear();
                slot.0.extend_from_slice(p1.head(o));
                slot.0.extend_from_slice(p1.body(&vm, o));
            }
            p2.clear();
            h2.process_udp_batch(&mut rx, &mut p2);
            if p2.outs.len() != BATCH {
                return Err(format!("host 2 delivered {} of {BATCH}", p2.outs.len()));
            }
            if packets == 0 {
                // The delivered frame is what host 1's VM sent.
                let got = p2.message(&rx, &p2.outs[0]);
                if got[12..] != vm[0].0[12..] {
                    return Err("host 2 delivered another frame than host 1's VM sent".into());
                }
            }
            packets += BATCH as u64;
        }
    }
    if chained {
        let observed: u64 = h2.chain_measures().iter().map(|c| c.latency.count()).sum();
        if observed != packets {
            return Err(format!(
                "host 2 observed the chain latency of {observed} of {packets} packets"
            ));
        }
    }
    Ok(packets as f64 / start.elapsed().as_secs_f64())
}

/// Plain and sealed at each of [`SIZES`], `time` per measurement.
pub fn run(time: Duration) -> Result<Vec<SealCost>, String> {
    let mut out = Vec::new();
    for len in SIZES {
        let (mut plain, mut sealed, mut chained) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            plain.push(measure(len, Mode::Plain, time)?);
            sealed.push(measure(len, Mode::Sealed, time)?);
            chained.push(measure(len, Mode::Chained, time)?);
        }
        let (p, s) = (median(&mut plain), median(&mut sealed));
        let c = median(&mut chained);
        out.push(SealCost {
            frame_bytes: len,
            plain_mpps: p / 1e6,
            sealed_mpps: s / 1e6,
            ratio: s / p,
            added_ns: 1e9 / s - 1e9 / p,
            chained_mpps: c / 1e6,
            chained_ratio: c / p,
        });
    }
    Ok(out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Prints the figures.
pub fn print(r: &[SealCost]) {
    println!(
        "fabric sealing (AES-256-GCM), and the chain clock (plain, in a chain), forwarding cores of both agents, in process:"
    );
    println!(
        "frame B   plain Mpps   sealed Mpps   sealed/plain   added ns/pkt   chained Mpps   chained/plain"
    );
    for c in r {
        println!(
            "{:>7} {:>12.2} {:>13.2} {:>14.2} {:>14.0} {:>14.2} {:>15.2}",
            c.frame_bytes,
            c.plain_mpps,
            c.sealed_mpps,
            c.ratio,
            c.added_ns,
            c.chained_mpps,
            c.chained_ratio
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_configurations_move_every_frame() {
        for len in SIZES {
            for mode in [Mode::Plain, Mode::Sealed, Mode::Chained] {
                assert!(measure(len, mode, Duration::from_millis(1)).unwrap() > 0.0);
            }
        }
    }
}
