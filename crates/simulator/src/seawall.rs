//! Seawall (Shieh et al., HotCloud 2010) on one drop-tail bottleneck, packet by packet.
//!
//! VMs of several tenants send through one link towards the receiving hosts behind it
//! (one unless a VM sends to several: [`Vm::to_hosts`]). Inside a VM
//! run TCP-like flows (a congestion window per flow: slow start, then +1 segment per
//! round trip, halved on loss at most once per round trip) and constant-rate UDP sources
//! that ignore loss. Without Seawall their packets go straight into the bottleneck's
//! drop-tail queue. With Seawall every packet first passes its VM's rate controller
//! ([`sluice_seawall::Sender::offer`], the VM being the port and the receiving host the
//! destination: sent, held in the controller's queue until `release`, or dropped), each
//! receiving host counts arrivals, gaps and queueing delay with its own
//! [`sluice_seawall::Receiver`], and its feedback travels back to the sending host,
//! tagged with the reporting host, through the real wire encoding after a configurable
//! delay. So what is measured is the crate the agent runs, not a re-implementation of
//! it. How the senders describe their paths ([`Paths`]) decides whether a VM reaching
//! several hosts is one contender on the bottleneck or one per destination.
//!
//! Time advances in fixed steps. Within a step the packets of all sources reach the
//! queue in a seeded random order: a fixed order would hand every slot freed in the queue
//! to the same source and bias drop-tail against the others. Everything is deterministic
//! for a seed.
//!
//! What the model leaves out: TCP here learns of every loss one round trip after it
//! (as with SACK; no timeouts, no retransmission bytes: throughput is what the link
//! delivered), senders have no access-link limit (a UDP source offers its rate into its
//! VM's controller as it is), every VM sits behind its own sending host, and there is
//! one bottleneck: the links into the receiving hosts behind it never congest.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sluice_seawall::{wire, Entity, Link, Offer, Receiver, Sender};

use crate::maxmin::{max_min_rates, Flow};
use crate::SimError;

/// A traffic source inside a VM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// A backlogged TCP-like flow.
    Tcp,
    /// A UDP source sending at a constant rate whatever is lost, bits per second.
    Udp {
        /// Offered rate, bits per second.
        rate_bps: u64,
    },
}

/// One VM: its tenant, its sources and when it starts sending.
#[derive(Debug, Clone, PartialEq)]
pub struct Vm {
    /// Index into [`Scenario::tenants`].
    pub tenant: usize,
    /// What it runs.
    pub sources: Vec<Source>,
    /// When its sources start, ns since the start of the run.
    pub start_ns: u64,
    /// Whether its host runs Seawall when the run does (§3.1 of the paper controls only
    /// the UDP source).
    pub controlled: bool,
    /// Receiving hosts it sends to, 0 to `destinations - 1`; its sources take them in
    /// turn (source i goes to host i mod `destinations`).
    pub destinations: usize,
}

impl Vm {
    /// A VM of `tenant` with `flows` TCP flows, sending from the start.
    pub fn tcp(tenant: usize, flows: usize) -> Vm {
        Vm {
            tenant,
            sources: vec![Source::Tcp; flows],
            start_ns: 0,
            controlled: true,
            destinations: 1,
        }
    }

    /// A VM of `tenant` with one UDP source at `rate_bps`, sending from the start.
    pub fn udp(tenant: usize, rate_bps: u64) -> Vm {
        Vm {
            tenant,
            sources: vec![Source::Udp { rate_bps }],
            start_ns: 0,
            controlled: true,
            destinations: 1,
        }
    }

    /// The same VM, starting at `start_ns`.
    pub fn starting_at(self, start_ns: u64) -> Vm {
        Vm { start_ns, ..self }
    }

    /// The same VM, its sources spread over receiving hosts 0 to `hosts - 1` (a VM with
    /// fewer sources than hosts reaches only the first ones).
    pub fn to_hosts(self, hosts: usize) -> Vm {
        Vm {
            destinations: hosts,
            ..self
        }
    }

    /// The same VM, its host without Seawall.
    pub fn uncontrolled(self) -> Vm {
        Vm {
            controlled: false,
            ..self
        }
    }

    /// The receiving host of its source number `i`.
    fn destination(&self, i: usize) -> u32 {
        (i % self.destinations.max(1)) as u32
    }

    /// Number of TCP flows.
    pub fn tcp_flows(&self) -> usize {
        self.sources.iter().filter(|s| **s == Source::Tcp).count()
    }

    /// What the VM would send on an idle link of infinite capacity, bits per second.
    fn demand_bps(&self) -> f64 {
        if self.tcp_flows() > 0 {
            return f64::INFINITY;
        }
        self.sources
            .iter()
            .map(|s| match s {
                Source::Udp { rate_bps } => *rate_bps as f64,
                Source::Tcp => 0.0,
            })
            .sum()
    }
}

/// Tenants and their VMs.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Tenant names.
    pub tenants: Vec<String>,
    /// The VMs, each behind its own sending host.
    pub vms: Vec<Vm>,
}

/// The bottleneck link and the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Link rate, bits per second.
    pub capacity_bps: u64,
    /// Drop-tail queue, bytes.
    pub queue_bytes: u64,
    /// Round trip without queueing, ns.
    pub base_rtt_ns: u64,
    /// Time step, ns.
    pub step_ns: u64,
    /// Length of the run, ns.
    pub duration_ns: u64,
    /// Time before measurements start, ns.
    pub warmup_ns: u64,
    /// Seeds the order in which packets of one step reach the queue.
    pub seed: u64,
    /// Packet size, bytes.
    pub packet_bytes: u32,
    /// Time feedback takes from the receiving host to the sender, ns.
    pub feedback_delay_ns: u64,
    /// Width of the throughput time series' bins, ns.
    pub bin_ns: u64,
}

impl LinkConfig {
    /// A link of `capacity_bps` with datacenter-like defaults scaled to its rate: a round
    /// trip of 1 ms at 100 Mb/s (shorter at higher rates, never under 200 us), a queue of
    /// two round trips' worth of bytes (at least 64 KB), a step of about one packet time,
    /// feedback delayed by half the base round trip, 10 s runs with 2 s of warm-up.
    pub fn new(capacity_bps: u64, seed: u64) -> LinkConfig {
        let base_rtt_ns = (100_000_000_000_000 / capacity_bps.max(1)).clamp(200_000, 1_000_000);
        let packet_bytes = 1500u32;
        let bdp = capacity_bps as u128 * base_rtt_ns as u128 / 8_000_000_000;
        let packet_ns = packet_bytes as u64 * 8_000_000_000 / capacity_bps.max(1);
        LinkConfig {
            capacity_bps,
            queue_bytes: (2 * bdp as u64).max(64 * 1024),
            base_rtt_ns,
            step_ns: packet_ns.clamp(1_000, base_rtt_ns / 4),
            duration_ns: 10_000_000_000,
            warmup_ns: 2_000_000_000,
            seed,
            packet_bytes,
            feedback_delay_ns: base_rtt_ns / 2,
            bin_ns: 50_000_000,
        }
    }

    fn validate(&self) -> Result<(), SimError> {
        let bad = |m: &str| Err(SimError::Config(m.to_string()));
        if self.capacity_bps == 0 || self.step_ns == 0 || self.bin_ns == 0 {
            return bad("seawall link: capacity, step and bin must be above zero");
        }
        if self.packet_bytes == 0 || self.queue_bytes < self.packet_bytes as u64 {
            return bad("seawall link: the queue must hold at least one packet");
        }
        if self.warmup_ns >= self.duration_ns {
            return bad("seawall link: the warm-up must end before the run does");
        }
        if self.step_ns > self.base_rtt_ns.max(1) {
            return bad("seawall link: the step must not exceed the base round trip");
        }
        Ok(())
    }
}

/// What one VM got over the measured part of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct VmResult {
    /// Its tenant.
    pub tenant: usize,
    /// TCP flows it ran.
    pub tcp_flows: usize,
    /// Delivered throughput, bits per second.
    pub throughput_bps: f64,
    /// Its part of what the link delivered.
    pub share: f64,
    /// Its VM-level max-min fair rate, bits per second (0 for a VM that started after
    /// the warm-up: it is not part of the comparison).
    pub ideal_bps: f64,
    /// `ideal_bps` as a part of the link.
    pub ideal_share: f64,
    /// Bytes its rate controller dropped (whole run).
    pub policed_bytes: u64,
    /// Bytes the bottleneck dropped (whole run).
    pub dropped_bytes: u64,
    /// Seawall's rate for it at the end, bits per second: the sum of the rates towards
    /// its destinations, but no more than its rate on the bottleneck with
    /// [`Paths::PerLink`] (None without Seawall or for an uncontrolled VM).
    pub final_rate_bps: Option<u64>,
    /// Multiplicative decreases its controllers made, over all links (0 without
    /// Seawall).
    pub decreases: u64,
}

/// What one tenant got.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantResult {
    /// Its name.
    pub name: String,
    /// Delivered throughput, bits per second.
    pub throughput_bps: f64,
    /// Its part of what the link delivered.
    pub share: f64,
    /// The sum of its VMs' max-min fair shares.
    pub ideal_share: f64,
}

/// The outcome of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Per VM, in scenario order.
    pub vms: Vec<VmResult>,
    /// Per tenant, in scenario order.
    pub tenants: Vec<TenantResult>,
    /// Jain's index over the VMs present during the whole measurement, of throughput
    /// divided by max-min fair rate (1: every VM got exactly its fair share).
    pub jain: f64,
    /// Delivered throughput over the link's capacity, measured part of the run.
    pub utilisation: f64,
    /// Width of the bins of `series`, ns.
    pub bin_ns: u64,
    /// Delivered throughput of each VM in each bin from time 0, bits per second.
    pub series: Vec<Vec<f64>>,
    /// Seawall's rate for each VM at the end of each bin, bits per second, as in
    /// [`VmResult::final_rate_bps`] (empty without Seawall; zeros for an uncontrolled
    /// VM and before a VM's first packet).
    pub rate_series: Vec<Vec<f64>>,
}

impl Outcome {
    /// When VM `vm` first delivered at least `fraction` of `target_bps` on average over
    /// `window` consecutive bins, counted from `from_ns` to the end of that window (None:
    /// never).
    pub fn time_to_reach(
        &self,
        vm: usize,
        from_ns: u64,
        target_bps: f64,
        fraction: f64,
        window: usize,
    ) -> Option<u64> {
        let s = self.series.get(vm)?;
        let window = window.max(1);
        let first = from_ns.div_ceil(self.bin_ns) as usize;
        (first..s.len().saturating_sub(window - 1)).find_map(|b| {
            let mean = s[b..b + window].iter().sum::<f64>() / window as f64;
            (mean >= fraction * target_bps)
                .then(|| ((b + window) as u64 * self.bin_ns).saturating_sub(from_ns))
        })
    }
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
pub fn jain_index(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || q == 0.0 {
        return 1.0;
    }
    s * s / (x.len() as f64 * q)
}

/// The VM-level max-min fair rate of each VM present from the start of the measurement
/// (every VM weighs the same, whatever its flows; a UDP-only VM wants its offered rate,
/// a VM with TCP wants everything).
pub fn ideal_rates(link: &LinkConfig, scenario: &Scenario) -> Vec<f64> {
    let present: Vec<bool> = scenario
        .vms
        .iter()
        .map(|v| v.start_ns <= link.warmup_ns && !v.sources.is_empty())
        .collect();
    let flows: Vec<Flow> = scenario
        .vms
        .iter()
        .zip(&present)
        .map(|(v, &p)| Flow {
            resources: vec![0],
            demand: if p { v.demand_bps() } else { 0.0 },
            weight: 1.0,
        })
        .collect();
    max_min_rates(&[link.capacity_bps as f64], &flows)
}

/// A packet in the bottleneck's queue.
#[derive(Debug, Clone, Copy)]
struct Packet {
    source: u32,
    len: u32,
    seq: u32,
    /// When it left its sender (after any wait in its controller's queue).
    sent_ns: u64,
}

#[derive(Debug, Clone)]
struct SourceState {
    vm: usize,
    /// Its receiving host.
    dest: u32,
    /// Offered rate for UDP; None for TCP.
    udp_bps: Option<u64>,
    /// UDP: bits offered but not yet sent as a whole packet.
    carry_bits: u128,
    /// TCP congestion window and slow-start threshold, packets.
    cwnd: f64,
    ssthresh: f64,
    inflight: u32,
    /// Losses of packets sent before this time belong to the round trip already
    /// answered with a cut.
    recover_ns: u64,
}

/// Segments a TCP flow may send before it has heard anything (RFC 6928).
const INITIAL_WINDOW: f64 = 10.0;

/// How the sending hosts describe their paths to the receiving hosts
/// ([`Sender::set_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Paths {
    /// No path is set, so a path is the link into its destination alone: every (VM,
    /// receiving host) pair is a contender of its own on the bottleneck, and a VM that
    /// reaches N hosts through it gets N shares.
    #[default]
    PerDestination,
    /// The path to receiving host h is `[Link::shared(0), Link::into_host(h)]`, the
    /// bottleneck being shared link 0: a VM is one contender on it however many hosts
    /// it reaches (the paper's rate per (senderVM, link)).
    PerLink,
}

/// The bottleneck, as [`Paths::PerLink`] names it.
fn bottleneck() -> Link {
    Link::shared(0)
}

/// Runs `scenario` over `link`; with `seawall`, through Seawall's controllers with that
/// configuration and the senders' paths left at their default
/// ([`Paths::PerDestination`]).
pub fn simulate(
    link: &LinkConfig,
    scenario: &Scenario,
    seawall: Option<&sluice_seawall::Config>,
) -> Result<Outcome, SimError> {
    simulate_with_paths(link, scenario, seawall, Paths::PerDestination)
}

/// [`simulate`], the senders told their paths as `paths` says (no effect without
/// Seawall).
pub fn simulate_with_paths(
    link: &LinkConfig,
    scenario: &Scenario,
    seawall: Option<&sluice_seawall::Config>,
    paths: Paths,
) -> Result<Outcome, SimError> {
    link.validate()?;
    if let Some(c) = seawall {
        c.validate()
            .map_err(|e| SimError::Config(format!("seawall: {e}")))?;
    }
    if scenario.vms.len() >= u16::MAX as usize {
        return Err(SimError::Config("seawall: too many VMs".into()));
    }
    if let Some(v) = scenario
        .vms
        .iter()
        .find(|v| v.tenant >= scenario.tenants.len())
    {
        return Err(SimError::Config(format!(
            "seawall: VM of unknown tenant {}",
            v.tenant
        )));
    }
    if scenario
        .vms
        .iter()
        .any(|v| v.destinations == 0 || v.destinations > u16::MAX as usize)
    {
        return Err(SimError::Config(
            "seawall: a VM sends to 1 to 65535 receiving hosts".into(),
        ));
    }
    let nvm = scenario.vms.len();
    // Receiving hosts are 0 to `hosts - 1`; VM i sits behind sending host `hosts + i` as
    // port i (with one receiving host: hosts 1, 2, ...).
    let hosts = scenario
        .vms
        .iter()
        .map(|v| v.destinations)
        .max()
        .unwrap_or(1);
    let sending_host = |vm: usize| (hosts + vm) as u32;
    // Entity (VM i, receiving host h) is number `first_entity[i] + h`.
    let first_entity: Vec<usize> = scenario
        .vms
        .iter()
        .scan(0, |n, v| {
            let first = *n;
            *n += v.destinations;
            Some(first)
        })
        .collect();
    let entities = scenario.vms.iter().map(|v| v.destinations).sum::<usize>();
    let mut sources: Vec<SourceState> = Vec::new();
    for (i, v) in scenario.vms.iter().enumerate() {
        for (j, s) in v.sources.iter().enumerate() {
            sources.push(SourceState {
                vm: i,
                dest: v.destination(j),
                udp_bps: match s {
                    Source::Tcp => None,
                    Source::Udp { rate_bps } => Some(*rate_bps),
                },
                carry_bits: 0,
                cwnd: INITIAL_WINDOW,
                ssthresh: f64::INFINITY,
                inflight: 0,
                recover_ns: 0,
            });
        }
    }
    let mut senders: Vec<Option<Sender>> = scenario
        .vms
        .iter()
        .map(|v| seawall.filter(|_| v.controlled).map(|c| Sender::new(*c)))
        .collect();
    if paths == Paths::PerLink {
        for tx in senders.iter_mut().flatten() {
            for h in 0..hosts as u32 {
                tx.set_path(h, &[bottleneck(), Link::into_host(h)]);
            }
        }
    }
    // Every receiving host runs its own receiver; all of them sit behind the
    // bottleneck, so all see its queueing delay and its drops.
    let mut receivers: Vec<Receiver> = match seawall {
        Some(c) => (0..hosts)
            .map(|_| Receiver::new(c.period_ns, c.queue_delay_ns))
            .collect(),
        None => Vec::new(),
    };
    // What the controllers queue and hand back: only the length matters here.
    let frame = vec![0u8; link.packet_bytes as usize];
    let mut rng = ChaCha8Rng::seed_from_u64(link.seed);
    let len = link.packet_bytes;
    let mut queue: VecDeque<Packet> = VecDeque::new();
    let mut queued_bytes: u64 = 0;
    let mut link_bits: u128 = 0;
    // ACKs leave in departure order and all take the base round trip, so they stay sorted.
    let mut acks: VecDeque<(u64, u32)> = VecDeque::new();
    // Loss is noticed a round trip (with the queueing delay of the moment) after the
    // drop; that delay varies, so these need a heap.
    let mut losses: BinaryHeap<Reverse<(u64, u64, u32, u64)>> = BinaryHeap::new();
    let mut loss_counter: u64 = 0;
    // (due, sending host it goes to, receiving host that reported, message).
    let mut feedback: VecDeque<(u64, u32, u32, Vec<u8>)> = VecDeque::new();
    let mut buf = Vec::new();
    let mut arrivals: Vec<u32> = Vec::new();
    let mut admitted: Vec<(u32, u32)> = Vec::new();
    // Per entity: sequence numbers are per (port, destination host).
    let mut first_seq: Vec<Option<u32>> = vec![None; entities];
    let bins = link.duration_ns.div_ceil(link.bin_ns) as usize;
    let mut series_bytes = vec![vec![0u64; bins]; nvm];
    let mut measured = vec![0u64; nvm];
    let mut policed = vec![0u64; nvm];
    let mut dropped = vec![0u64; nvm];
    let mut rate_series = vec![vec![0.0; if seawall.is_some() { bins } else { 0 }]; nvm];

    let steps = link.duration_ns / link.step_ns;
    for i in 0..steps {
        let now = i * link.step_ns;
        while feedback.front().is_some_and(|f| f.0 <= now) {
            let Some((_, host, from, msg)) = feedback.pop_front() else {
                break;
            };
            let reports = wire::decode_feedback(&msg)
                .map_err(|e| SimError::Config(format!("seawall feedback: {e}")))?;
            let vm = (host as usize).checked_sub(hosts);
            if let Some(tx) = vm
                .and_then(|vm| senders.get_mut(vm))
                .and_then(Option::as_mut)
            {
                tx.on_feedback(from, reports, now);
            }
        }
        while acks.front().is_some_and(|a| a.0 <= now) {
            let Some((_, s)) = acks.pop_front() else {
                break;
            };
            let f = &mut sources[s as usize];
            f.inflight = f.inflight.saturating_sub(1);
            f.cwnd += if f.cwnd < f.ssthresh {
                1.0
            } else {
                1.0 / f.cwnd
            };
        }
        while losses.peek().is_some_and(|l| l.0 .0 <= now) {
            let Some(Reverse((_, _, s, sent))) = losses.pop() else {
                break;
            };
            let f = &mut sources[s as usize];
            f.inflight = f.inflight.saturating_sub(1);
            if sent >= f.recover_ns {
                f.ssthresh = (f.cwnd / 2.0).max(1.0);
                f.cwnd = f.ssthresh;
                f.recover_ns = now;
            }
        }

        arrivals.clear();
        for (s, f) in sources.iter_mut().enumerate() {
            if scenario.vms[f.vm].start_ns > now {
                continue;
            }
            match f.udp_bps {
                Some(rate) => {
                    f.carry_bits += rate as u128 * link.step_ns as u128;
                    let per = len as u128 * 8 * 1_000_000_000;
                    while f.carry_bits >= per {
                        f.carry_bits -= per;
                        arrivals.push(s as u32);
                    }
                }
                None => {
                    while (f.inflight as f64) < f.cwnd.floor() {
                        f.inflight += 1;
                        arrivals.push(s as u32);
                    }
                }
            }
        }
        // Within a VM, which flow's packet meets an empty bucket is a matter of luck.
        arrivals.shuffle(&mut rng);
        // A loss is noticed when the packets behind the lost one are acknowledged.
        let notice = now + link.base_rtt_ns + queue_delay_ns(queued_bytes, link.capacity_bps);
        let mut lose = |s: u32, losses: &mut BinaryHeap<_>| {
            if sources[s as usize].udp_bps.is_none() {
                loss_counter += 1;
                losses.push(Reverse((notice, loss_counter, s, now)));
            }
        };
        admitted.clear();
        first_seq.fill(None);
        // Packets that waited in their controller's queue leave first (they
        // are older), as the agent's loop hands them back.
        for (vm, tx) in senders.iter_mut().enumerate() {
            if let Some(tx) = tx {
                tx.check_silence(now);
                let first = first_entity[vm];
                tx.release(now, |e, seq, tag, _| {
                    first_seq[first + e.host as usize].get_or_insert(seq);
                    admitted.push((tag as u32, seq));
                });
            }
        }
        for &s in &arrivals {
            let (vm, dest) = (sources[s as usize].vm, sources[s as usize].dest);
            match senders[vm].as_mut() {
                Some(tx) => match tx.offer(vm as u16, dest, u128::from(s), &frame, now) {
                    Offer::Send(seq) => {
                        first_seq[first_entity[vm] + dest as usize].get_or_insert(seq);
                        admitted.push((s, seq));
                    }
                    Offer::Queued => {}
                    Offer::Dropped => {
                        policed[vm] += len as u64;
                        lose(s, &mut losses);
                    }
                },
                None => admitted.push((s, 0)),
            }
        }
        // What left the senders reaches the queue in random order. Drawing the order
        // before admission would be wrong: a flooding VM has many tickets in that draw,
        // so its few admitted packets would nearly always come first and take every
        // free slot.
        admitted.shuffle(&mut rng);
        // The shuffle must not reorder an entity's own packets (the receiver would count
        // a gap and then a late packet): its sequence numbers go out again in the new
        // order (they were consecutive from the first one admitted).
        for a in admitted.iter_mut() {
            let f = &sources[a.0 as usize];
            if let Some(next) = first_seq[first_entity[f.vm] + f.dest as usize].as_mut() {
                a.1 = *next;
                *next = next.wrapping_add(1);
            }
        }
        for &(s, seq) in &admitted {
            let vm = sources[s as usize].vm;
            if queued_bytes + len as u64 > link.queue_bytes {
                dropped[vm] += len as u64;
                lose(s, &mut losses);
            } else {
                queued_bytes += len as u64;
                queue.push_back(Packet {
                    source: s,
                    len,
                    seq,
                    sent_ns: now,
                });
            }
        }

        link_bits += link.capacity_bps as u128 * link.step_ns as u128;
        let per_byte = 8 * 1_000_000_000u128;
        while let Some(p) = queue.front().copied() {
            if link_bits < p.len as u128 * per_byte {
                break;
            }
            link_bits -= p.len as u128 * per_byte;
            queue.pop_front();
            queued_bytes -= p.len as u64;
            let f = &sources[p.source as usize];
            let vm = f.vm;
            if f.udp_bps.is_none() {
                acks.push_back((now + link.base_rtt_ns, p.source));
            }
            // Only controlled hosts put the sequence option on their packets.
            if let (Some(rx), Some(_)) = (receivers.get_mut(f.dest as usize), &senders[vm]) {
                let sent_us = (p.sent_ns / 1000) as u32;
                rx.on_packet(sending_host(vm), vm as u16, p.seq, Some(sent_us), now);
            }
            if now >= link.warmup_ns {
                measured[vm] += p.len as u64;
            }
            series_bytes[vm][(now / link.bin_ns) as usize] += p.len as u64;
        }
        if queue.is_empty() {
            // An idle link cannot bank its spare time for later bursts.
            link_bits = 0;
        }

        for (vm, tx) in senders.iter().enumerate() {
            if let Some(tx) = tx {
                let r = allowance_bps(tx, vm, scenario.vms[vm].destinations);
                rate_series[vm][(now / link.bin_ns) as usize] = r.unwrap_or(0) as f64;
            }
        }
        // All feedback of a step is due at once, so the queue stays sorted.
        let due = now + link.feedback_delay_ns;
        for (from, rx) in receivers.iter_mut().enumerate() {
            rx.feedback(now, &mut buf, |host, m| {
                feedback.push_back((due, host, from as u32, m.to_vec()));
            });
        }
    }

    let window_s = ((steps * link.step_ns).saturating_sub(link.warmup_ns) as f64 / 1e9).max(1e-9);
    let total: u64 = measured.iter().sum();
    let ideal = ideal_rates(link, scenario);
    let cap = link.capacity_bps as f64;
    let controllers: Vec<Option<(u64, u64)>> = (0..nvm)
        .map(|vm| {
            senders[vm].as_ref().and_then(|tx| {
                let rate = allowance_bps(tx, vm, scenario.vms[vm].destinations)?;
                let cuts = tx
                    .links()
                    .iter()
                    .filter(|l| l.0 == vm as u16)
                    .map(|l| l.3)
                    .sum();
                Some((rate, cuts))
            })
        })
        .collect();
    let vms: Vec<VmResult> = scenario
        .vms
        .iter()
        .enumerate()
        .map(|(i, v)| VmResult {
            tenant: v.tenant,
            tcp_flows: v.tcp_flows(),
            throughput_bps: measured[i] as f64 * 8.0 / window_s,
            share: measured[i] as f64 / total.max(1) as f64,
            ideal_bps: ideal[i],
            ideal_share: ideal[i] / cap,
            policed_bytes: policed[i],
            dropped_bytes: dropped[i],
            final_rate_bps: controllers[i].map(|e| e.0),
            decreases: controllers[i].map_or(0, |e| e.1),
        })
        .collect();
    let tenants = scenario
        .tenants
        .iter()
        .enumerate()
        .map(|(t, name)| {
            let mine = || vms.iter().filter(move |v| v.tenant == t);
            TenantResult {
                name: name.clone(),
                throughput_bps: mine().map(|v| v.throughput_bps).sum(),
                share: mine().map(|v| v.share).sum(),
                ideal_share: mine().map(|v| v.ideal_share).sum(),
            }
        })
        .collect();
    let normalised: Vec<f64> = vms
        .iter()
        .filter(|v| v.ideal_bps > 0.0)
        .map(|v| v.throughput_bps / v.ideal_bps)
        .collect();
    let series = series_bytes
        .iter()
        .map(|s| {
            s.iter()
                .map(|&b| b as f64 * 8.0 * 1e9 / link.bin_ns as f64)
                .collect()
        })
        .collect();
    Ok(Outcome {
        jain: jain_index(&normalised),
        utilisation: total as f64 * 8.0 / window_s / cap,
        vms,
        tenants,
        bin_ns: link.bin_ns,
        series,
        rate_series,
    })
}

/// What VM `vm` may send through the bottleneck now: the sum of its rates towards its
/// `destinations` hosts, but no more than its rate on the bottleneck when that has a
/// controller of its own ([`Paths::PerLink`]). None: it has sent nothing yet.
fn allowance_bps(tx: &Sender, vm: usize, destinations: usize) -> Option<u64> {
    let port = vm as u16;
    let sum = (0..destinations as u32)
        .filter_map(|host| tx.rate_bps(Entity { port, host }))
        .reduce(u64::saturating_add)?;
    Some(match tx.link_rate_bps(port, bottleneck()) {
        Some(shared) => sum.min(shared),
        None => sum,
    })
}

fn queue_delay_ns(bytes: u64, capacity_bps: u64) -> u64 {
    (bytes as u128 * 8_000_000_000 / capacity_bps.max(1) as u128) as u64
}

/// Fig. 1: tenant A's VM runs one TCP flow, tenant B's VM runs `k`.
pub fn fig1_scenario(k: usize) -> Scenario {
    Scenario {
        tenants: vec!["A".into(), "B".into()],
        vms: vec![Vm::tcp(0, 1), Vm::tcp(1, k)],
    }
}

/// §3.1: one TCP flow against a UDP source offering `times` the link's rate.
pub fn udp_scenario(link: &LinkConfig, times: u64) -> Scenario {
    Scenario {
        tenants: vec!["tcp".into(), "udp".into()],
        vms: vec![Vm::tcp(0, 1), Vm::udp(1, times * link.capacity_bps)],
    }
}

/// §3.1 as the paper ran it: the rate controller on the UDP source only.
pub fn udp_only_controlled_scenario(link: &LinkConfig, times: u64) -> Scenario {
    Scenario {
        tenants: vec!["tcp".into(), "udp".into()],
        vms: vec![
            Vm::tcp(0, 1).uncontrolled(),
            Vm::udp(1, times * link.capacity_bps),
        ],
    }
}

/// Fig. 2: tenant A has one VM with one flow, tenant B three VMs with `flows` each.
pub fn fig2_scenario(flows: usize) -> Scenario {
    Scenario {
        tenants: vec!["A".into(), "B".into()],
        vms: vec![
            Vm::tcp(0, 1),
            Vm::tcp(1, flows),
            Vm::tcp(1, flows),
            Vm::tcp(1, flows),
        ],
    }
}

/// One VM reaching many hosts: tenant A's VM runs one TCP flow to each of `hosts`
/// receiving hosts, tenant B's VM one flow to host 0, all through the one bottleneck.
/// VM-level fairness gives each 1/2; a contender per (VM, destination) gives B
/// 1/(`hosts` + 1).
pub fn many_destinations_scenario(hosts: usize) -> Scenario {
    Scenario {
        tenants: vec!["A".into(), "B".into()],
        vms: vec![Vm::tcp(0, hosts).to_hosts(hosts), Vm::tcp(1, 1)],
    }
}

/// The paper's all-pairs case (§3: "a tenant with N VMs can grab up to an N^2
/// proportion"): tenant A's `n` VMs each run one TCP flow to each of `n` receiving
/// hosts (n² pairs), tenant B's VM one flow to host 0. VM-level fairness gives B
/// 1/(`n` + 1); a contender per (VM, destination) 1/(n² + 1).
pub fn all_pairs_scenario(n: usize) -> Scenario {
    let mut vms = vec![Vm::tcp(0, n).to_hosts(n); n];
    vms.push(Vm::tcp(1, 1));
    Scenario {
        tenants: vec!["A".into(), "B".into()],
        vms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBPS: u64 = 1_000_000;
    const GBPS: u64 = 1_000_000_000;
    const SEC: u64 = 1_000_000_000;

    /// A short run (a few hundred thousand packets at 1 Gb/s), 1 s of it warm-up.
    fn link(capacity_bps: u64, seconds: u64) -> LinkConfig {
        LinkConfig {
            duration_ns: seconds * SEC,
            warmup_ns: SEC,
            ..LinkConfig::new(capacity_bps, 1)
        }
    }

    fn both(l: &LinkConfig, s: &Scenario) -> (Outcome, Outcome) {
        (
            simulate(l, s, None).unwrap(),
            simulate(l, s, Some(&sw())).unwrap(),
        )
    }

    fn sw() -> sluice_seawall::Config {
        sluice_seawall::Config::default()
    }

    #[test]
    fn jain_index_bounds() {
        assert!((jain_index(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!((jain_index(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
    }

    // Margins: every run is deterministic for its seed, so the bounds below only have
    // to leave room for changes to the model or the controller, not for noise. The
    // measured values (seed 1) are in the comments.

    #[test]
    fn one_flow_against_sixteen_gets_half_only_with_seawall() {
        let l = link(GBPS, 4);
        let (plain, fair) = both(&l, &fig1_scenario(16));
        // Measured 0.05 and 0.50; Jain 1.00, utilisation 0.88.
        let (a0, a1) = (plain.vms[0].share, fair.vms[0].share);
        assert!(a0 < 0.15, "without Seawall: {a0}");
        assert!(a1 > 0.4, "with Seawall: {a1}");
        assert!(fair.jain > 0.9, "Jain {}", fair.jain);
        assert!(plain.jain < 0.7, "Jain {}", plain.jain);
        assert!(fair.utilisation > 0.8, "utilisation {}", fair.utilisation);
        assert!(
            plain.utilisation > 0.95,
            "utilisation {}",
            plain.utilisation
        );
        assert!((fair.vms[0].ideal_share - 0.5).abs() < 1e-9);
        // The many-flow VM loses its excess at its own sender, not at the bottleneck.
        assert!(fair.vms[1].policed_bytes > fair.vms[1].dropped_bytes);
        assert_eq!(plain.vms[1].policed_bytes, 0);
    }

    #[test]
    fn at_100_mbps_too_one_flow_gets_half_against_sixteen() {
        // Measured 0.09 without, 0.49 with (docs/REPRODUCTION.md). (An earlier
        // controller, cutting from the sending rate and raising only a well-used
        // allowance, got 0.30 here.)
        let l = link(100 * MBPS, 5);
        let (plain, fair) = both(&l, &fig1_scenario(16));
        assert!(plain.vms[0].share < 0.12, "without: {}", plain.vms[0].share);
        assert!(fair.vms[0].share > 0.4, "with: {}", fair.vms[0].share);
        assert!(fair.utilisation > 0.85, "utilisation {}", fair.utilisation);
    }

    #[test]
    fn tcp_survives_a_udp_flood_only_with_seawall() {
        let l = link(GBPS, 4);
        let (plain, fair) = both(&l, &udp_scenario(&l, 10));
        // Measured 0.002 and 0.50.
        assert!(plain.vms[0].share < 0.1, "without: {}", plain.vms[0].share);
        assert!(fair.vms[0].share > 0.4, "with: {}", fair.vms[0].share);
        assert!(fair.utilisation > 0.8, "utilisation {}", fair.utilisation);
        // The flood loses its own packets at its own sender.
        assert!(fair.vms[1].policed_bytes > 10 * fair.vms[1].dropped_bytes);
        // As the paper ran it, the controller on the UDP source only: measured 0.78 (the
        // controlled flood backs off on the queue the uncontrolled TCP flow keeps).
        let paper = simulate(&l, &udp_only_controlled_scenario(&l, 10), Some(&sw())).unwrap();
        assert!(
            paper.vms[0].share > 0.25,
            "UDP only: {}",
            paper.vms[0].share
        );
        assert_eq!(paper.vms[0].final_rate_bps, None);
        assert_eq!(paper.vms[0].policed_bytes, 0);
    }

    #[test]
    fn shares_follow_vms_not_flows() {
        let l = link(GBPS, 4);
        let (plain, fair) = both(&l, &fig2_scenario(4));
        // Flow-level: A gets about 1/13; VM-level: 1/4. Measured 0.08 and 0.25.
        assert!(plain.tenants[0].share < 0.12, "{}", plain.tenants[0].share);
        let a = fair.tenants[0].share;
        assert!((0.2..0.3).contains(&a), "with Seawall A got {a}");
        assert!((fair.tenants[1].ideal_share - 0.75).abs() < 1e-9);
        assert!(fair.jain > 0.9, "Jain {}", fair.jain);
        assert!(fair.utilisation > 0.8, "utilisation {}", fair.utilisation);
    }

    #[test]
    fn a_lone_vm_keeps_the_link_and_unused_share_goes_to_others() {
        // Measured 0.91 and 0.92: the controller cuts on a standing queue of 1 ms and
        // climbs back at +10 Mb/s per 5 ms.
        for (cap, least) in [(100 * MBPS, 0.85), (GBPS, 0.85)] {
            let l = link(cap, 4);
            let s = Scenario {
                tenants: vec!["A".into()],
                vms: vec![Vm::tcp(0, 1)],
            };
            let fair = simulate(&l, &s, Some(&sw())).unwrap();
            assert!(fair.utilisation > least, "utilisation {}", fair.utilisation);
        }
        // A VM that wants less than its share leaves the rest to the other.
        let l = link(100 * MBPS, 4);
        let s = Scenario {
            tenants: vec!["A".into(), "B".into()],
            vms: vec![Vm::udp(0, 20 * MBPS), Vm::tcp(1, 1)],
        };
        let fair = simulate(&l, &s, Some(&sw())).unwrap();
        let udp = fair.vms[0].throughput_bps;
        assert!(udp > 19e6 && udp < 20.5e6, "UDP at 20 Mb/s got {udp}");
        assert!((fair.vms[1].ideal_bps - 80e6).abs() < 1.0);
        let tcp = fair.vms[1].throughput_bps;
        assert!(tcp > 0.85 * 80e6, "TCP got {tcp}");
    }

    #[test]
    fn a_late_vm_gets_its_share_within_a_second() {
        let l = link(GBPS, 4);
        let join = 2 * SEC;
        let s = Scenario {
            tenants: vec!["A".into(), "B".into()],
            vms: vec![Vm::tcp(0, 8), Vm::tcp(1, 1).starting_at(join)],
        };
        let (plain, fair) = both(&l, &s);
        // Measured 0.25 s.
        let t = fair
            .time_to_reach(1, join, 500e6, 0.8, 4)
            .expect("never reached");
        assert!(t < SEC, "took {t} ns");
        assert_eq!(plain.time_to_reach(1, join, 500e6, 0.8, 4), None);
        // Nothing before it started, and it is left out of the fair shares.
        assert!(fair.series[1][..(join / l.bin_ns) as usize]
            .iter()
            .all(|&x| x == 0.0));
        assert_eq!(fair.vms[1].ideal_bps, 0.0);
        assert!(!fair.rate_series[1].is_empty() && plain.rate_series[1].is_empty());
    }

    /// `s` without Seawall, with a contender per (VM, destination) and with one per
    /// (VM, link).
    fn three(l: &LinkConfig, s: &Scenario) -> [Outcome; 3] {
        [
            simulate(l, s, None).unwrap(),
            simulate_with_paths(l, s, Some(&sw()), Paths::PerDestination).unwrap(),
            simulate_with_paths(l, s, Some(&sw()), Paths::PerLink).unwrap(),
        ]
    }

    /// B's share (tenant 1) without Seawall and per destination stays below
    /// the given bounds, per link falls in `per_link`, with a fair and busy link.
    fn assert_b_shares(
        [plain, per_dest, per_link]: &[Outcome; 3],
        plain_below: f64,
        per_dest_below: f64,
        per_link_in: std::ops::Range<f64>,
    ) {
        let b = |o: &Outcome| o.tenants[1].share;
        assert!(b(plain) < plain_below, "without Seawall B got {}", b(plain));
        assert!(
            b(per_dest) < per_dest_below,
            "per destination B got {}",
            b(per_dest)
        );
        assert!(
            per_link_in.contains(&b(per_link)),
            "per link B got {}",
            b(per_link)
        );
        assert!(per_link.jain > 0.9, "Jain per link {}", per_link.jain);
        assert!(
            per_link.utilisation > 0.8,
            "utilisation {}",
            per_link.utilisation
        );
    }

    #[test]
    fn a_vm_reaching_many_hosts_gets_one_share_per_link_not_per_destination() {
        let l = link(100 * MBPS, 4);
        let s = many_destinations_scenario(4);
        let outcomes = three(&l, &s);
        // B is one VM against one VM: half the link, whatever A's destinations.
        assert!((outcomes[2].tenants[1].ideal_share - 0.5).abs() < 1e-9);
        // A's four flows, or four (VM, host) contenders, against B's one: 1/5.
        // Measured 0.200, 0.192 and 0.452 (Jain 0.99). Not quite 0.5 per link: B
        // shares host 0 with A, whose receiver flags every report congested when any
        // of its senders lost; A's report of such a period, without losses of its
        // own, is cleared on A's bottleneck controller by its clean paths to hosts
        // 1-3, B's is not (with A's flows moved to hosts 1-4 instead, a 10 s run at
        // 1 Gb/s gave B 0.476). At 1 Gb/s over this short run: 0.419.
        assert_b_shares(&outcomes, 0.3, 0.35, 0.4..0.6);
    }

    #[test]
    fn all_pairs_get_a_tenant_vm_shares_only_per_link() {
        let l = link(GBPS, 4);
        let s = all_pairs_scenario(3);
        let outcomes = three(&l, &s);
        // VM-level: B 1/4; nine pairs against one: B 1/10. Measured 0.099, 0.101 and
        // 0.236 (Jain 1.00; 0.219 at 100 Mb/s).
        assert!((outcomes[2].tenants[1].ideal_share - 0.25).abs() < 1e-9);
        assert_b_shares(&outcomes, 0.17, 0.17, 0.2..0.3);
    }

    #[test]
    fn feedback_reaches_the_sender_from_every_receiving_host() {
        // A floods two hosts: were the reports of host 1 lost or credited to host 0,
        // its flood to host 1 would never be cut and would take the link from B.
        let l = link(100 * MBPS, 4);
        let flood = Source::Udp {
            rate_bps: 5 * l.capacity_bps,
        };
        let s = Scenario {
            tenants: vec!["A".into(), "B".into()],
            vms: vec![
                Vm {
                    sources: vec![flood, flood],
                    ..Vm::tcp(0, 0)
                }
                .to_hosts(2),
                Vm::tcp(1, 1),
            ],
        };
        let [plain, per_dest, per_link] = three(&l, &s);
        assert!(plain.vms[1].share < 0.1, "without: {}", plain.vms[1].share);
        // Two (VM, host) contenders against one: B 1/3; one per link: 1/2. Measured
        // 0.002, 0.310 and 0.490.
        let b = per_dest.vms[1].share;
        assert!(b > 0.25, "per destination B got {b}");
        assert!(per_dest.vms[0].policed_bytes > 10 * per_dest.vms[0].dropped_bytes);
        let b = per_link.vms[1].share;
        assert!(b > 0.4, "per link B got {b}");
        // One destination is the single-host model, exactly.
        let one = fig1_scenario(2);
        let mut explicit = one.clone();
        explicit.vms[1] = explicit.vms[1].clone().to_hosts(1);
        assert_eq!(
            simulate(&l, &one, Some(&sw())).unwrap(),
            simulate(&l, &explicit, Some(&sw())).unwrap()
        );
    }

    #[test]
    fn time_to_reach_averages_over_the_window() {
        let o = Outcome {
            vms: vec![],
            tenants: vec![],
            jain: 1.0,
            utilisation: 1.0,
            bin_ns: 10,
            series: vec![vec![0.0, 0.0, 10.0, 0.0, 10.0, 10.0]],
            rate_series: vec![],
        };
        // From 0: bins 4-5 are the first pair at 10 on average; their window ends at 60.
        assert_eq!(o.time_to_reach(0, 0, 10.0, 1.0, 2), Some(60));
        assert_eq!(o.time_to_reach(0, 20, 10.0, 0.5, 2), Some(20));
        assert_eq!(o.time_to_reach(0, 0, 100.0, 1.0, 1), None);
        assert_eq!(o.time_to_reach(1, 0, 1.0, 1.0, 1), None);
    }

    #[test]
    fn runs_are_deterministic_per_seed() {
        let l = link(100 * MBPS, 2);
        let s = fig1_scenario(4);
        let a = simulate(&l, &s, Some(&sw())).unwrap();
        let b = simulate(&l, &s, Some(&sw())).unwrap();
        assert_eq!(a, b);
        let c = simulate(&LinkConfig { seed: 2, ..l }, &s, Some(&sw())).unwrap();
        assert_ne!(a.series, c.series);
    }

    #[test]
    fn bad_parameters_are_config_errors() {
        let s = fig1_scenario(1);
        let l = link(100 * MBPS, 2);
        for bad in [
            LinkConfig {
                warmup_ns: l.duration_ns,
                ..l
            },
            LinkConfig {
                queue_bytes: 100,
                ..l
            },
            LinkConfig {
                capacity_bps: 0,
                ..l
            },
            LinkConfig {
                step_ns: 10 * l.base_rtt_ns,
                ..l
            },
        ] {
            assert!(matches!(simulate(&bad, &s, None), Err(SimError::Config(_))));
        }
        let bad_sw = sluice_seawall::Config {
            decrease: 2.0,
            ..sw()
        };
        assert!(matches!(
            simulate(&l, &s, Some(&bad_sw)),
            Err(SimError::Config(_))
        ));
        let orphan = Scenario {
            tenants: vec![],
            vms: vec![Vm::tcp(0, 1)],
        };
        assert!(matches!(
            simulate(&l, &orphan, None),
            Err(SimError::Config(_))
        ));
        let nowhere = Scenario {
            tenants: vec!["A".into()],
            vms: vec![Vm::tcp(0, 1).to_hosts(0)],
        };
        assert!(matches!(
            simulate(&l, &nowhere, None),
            Err(SimError::Config(_))
        ));
    }
}
