//! The per-batch packet path: a batch from a VM port or from the UDP socket,
//! each frame parsed, looked up in its tenant's FIB (or the previous packet's
//! lookup replayed), its group target selected, and its outputs appended to
//! the plan; drops are counted against the port (or the fabric) it came from.
//!
//! Forwarding borrows only what it needs from the [`Dataplane`] (a
//! [`Forwarder`]): the configuration's topology read-only, the lookup state,
//! group selection, the Seawall rate controllers, the chain meter and the
//! counters. Each frame travels as a [`Hop`].

use std::collections::HashMap;

use sluice_proto::InstanceHeartbeat;
use sluice_switch::tunnel::{
    clocked_header, fabric_header, parse_control_payload, parse_fabric_payload, ChainClock,
};
use sluice_switch::{Fib, LookupKey, Output, PortId};
use sluice_wire::parse::{parse_into, PacketMeta, L4};

use super::config::{Port, PortTarget, Sender, Source, Topology};
use super::plan::{Dest, Frames, Out, TxPlan};
use super::probes::{to_probe_source, Probes};
use super::seal::FabricSeal;
use super::seawall::{Admission, SeawallAdapter};
use super::selection::Selection;
use super::stats::{CounterId, DropReason, Stats};
use super::{Dataplane, ROUTER_MAC};
use crate::meter::ChainMeter;

const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ARP_LEN: usize = 42;

/// One received frame at one hop through this host's switch: what forwarding
/// needs to know of it besides its parsed headers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hop<'f> {
    /// The port it entered through (None: the fabric). Its drops count
    /// against that port, and what it sends to other hosts against that
    /// port's Seawall share (an instance's packets, too).
    pub(super) in_port: Option<u16>,
    /// The fabric peer it came from (None: a port).
    peer: Option<Sender>,
    /// Tenant.
    pub(super) vni: u32,
    /// Chain and hop: as received until the lookup, then as the lookup marked
    /// it for its outputs.
    pub(super) chain_hop: Option<(u16, u8)>,
    /// The received buffer (a VM's frame, or a Geneve datagram).
    buf: &'f [u8],
    /// Its index in the batch: outputs take their body from it.
    index: usize,
    /// Where the inner Ethernet frame starts in `buf`.
    inner_at: usize,
    /// The chain clock in its local form ([`ChainClock`]): the time spent in
    /// Sluice's hosts so far minus this host's clock at arrival (wrapping), so
    /// that adding the clock when the packet leaves gives the time so far.
    pub(super) clock: Option<ChainClock>,
    /// The chain it arrived in (before the lookup marked it): at the last
    /// hop, whose added latency its delivery measures.
    from_chain: Option<u16>,
}

impl<'f> Hop<'f> {
    /// Whose counters its drops count against.
    fn counter(&self) -> CounterId {
        match self.in_port {
            Some(p) => CounterId::Port(p),
            None => CounterId::Fabric,
        }
    }

    /// The inner Ethernet frame.
    pub(super) fn inner(&self) -> &'f [u8] {
        &self.buf[self.inner_at..]
    }

    /// The same frame, marked `chain_hop` for its outputs.
    fn marked(self, chain_hop: Option<(u16, u8)>) -> Hop<'f> {
        Hop {
            chain_hop,
            from_chain: self.chain_hop.map(|c| c.0),
            ..self
        }
    }

    /// The chain clock as it leaves this host at `now_ns`: the time spent in
    /// Sluice's hosts so far.
    pub(super) fn clock_at(&self, now_ns: u64) -> Option<ChainClock> {
        self.clock.map(|c| c.wrapping_add(now_ns as u32))
    }
}

/// The tenants' FIBs and what lookups keep from packet to packet.
#[derive(Debug)]
pub(super) struct Lookup {
    /// By VNI.
    fibs: HashMap<u32, Fib>,
    /// The headers of the packet being forwarded (reused).
    meta: PacketMeta,
    /// The previous packet's lookup, replayed for the next packet of the same
    /// flow in the same batch (bulk traffic comes in runs of one flow). Cleared
    /// at every batch, so health changes between batches are always seen.
    last: LastLookup,
}

impl Lookup {
    /// Lookups in `fibs`.
    pub(super) fn new(fibs: HashMap<u32, Fib>) -> Lookup {
        Lookup {
            fibs,
            meta: PacketMeta::default(),
            last: LastLookup::default(),
        }
    }
}

/// What a lookup depends on: the FIB's match fields and the group selection's
/// hash input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LookupInputs {
    in_port: Option<u16>,
    vni: u32,
    chain_hop: Option<(u16, u8)>,
    is_ip: bool,
    has_ports: bool,
    flow: sluice_wire::FlowKey,
}

/// What a lookup decided, to replay: copies, then the output or a drop.
#[derive(Debug, Default)]
struct LastLookup {
    key: Option<LookupInputs>,
    mirrors: Vec<(Output, Option<(u16, u8)>)>,
    chain_hop: Option<(u16, u8)>,
    verdict: Option<Result<Output, DropReason>>,
}

/// What forwarding a packet may touch, borrowed from the [`Dataplane`]'s parts
/// (instance health, leases and Seawall's receiving side are not among them).
struct Forwarder<'a> {
    lookup: &'a mut Lookup,
    topo: &'a Topology,
    groups: &'a mut Selection,
    seawall: &'a mut SeawallAdapter,
    seal: &'a mut FabricSeal,
    meter: &'a mut ChainMeter,
    probes: &'a mut Probes,
    stats: &'a mut Stats,
    now_ns: u64,
}

impl Dataplane {
    /// The parts forwarding works on.
    fn forwarder(&mut self) -> Forwarder<'_> {
        Forwarder {
            lookup: &mut self.lookup,
            topo: &self.topo,
            groups: &mut self.groups,
            seawall: &mut self.seawall,
            seal: &mut self.seal,
            meter: &mut self.meter,
            probes: &mut self.probes,
            stats: &mut self.stats,
            now_ns: self.now_ns,
        }
    }

    /// Processes frames received on VM port `port`, appending messages to `plan`.
    pub fn process_vm_batch<F: Frames + ?Sized>(
        &mut self,
        port: u16,
        frames: &F,
        plan: &mut TxPlan,
    ) {
        let Some(p) = self.topo.ports.get(&port) else {
            // A socket of a port that just left the config: nothing to match.
            for i in 0..frames.count() {
                let c = self.stats.counters(CounterId::Fabric);
                c.rx_packets += 1;
                c.rx_bytes += frames.frame(i).len() as u64;
                self.stats
                    .drop(CounterId::Fabric, DropReason::UnknownSource);
            }
            return;
        };
        let vni = p.vni;
        self.lookup.last.key = None;
        let mut fw = self.forwarder();
        let id = CounterId::Port(port);
        for i in 0..frames.count() {
            let f = frames.frame(i);
            let c = fw.stats.counters(id);
            c.rx_packets += 1;
            c.rx_bytes += f.len() as u64;
            if f.len() >= 14 && u16::from_be_bytes([f[12], f[13]]) == ETHERTYPE_ARP {
                arp(port, f, fw.stats, plan);
                continue;
            }
            // Answers to health checks never reach a FIB: the probe source
            // is no tenant's address.
            if to_probe_source(f) {
                if !fw.probes.on_reply(port, f, plan) {
                    fw.stats.drop(id, DropReason::NoMatch);
                }
                continue;
            }
            let hop = Hop {
                in_port: Some(port),
                peer: None,
                vni,
                chain_hop: None,
                buf: f,
                index: i,
                inner_at: 0,
                // It enters its chain here: nothing spent yet.
                clock: Some(0u32.wrapping_sub(fw.now_ns as u32)),
                from_chain: None,
            };
            if let Some((chain, _)) = fw.forward(hop, plan) {
                fw.meter
                    .entered(vni, chain, &fw.lookup.meta, f.len(), fw.now_ns);
            }
        }
    }

    /// Processes Geneve datagrams received by the UDP socket (from fabric peers
    /// and NF instances), appending messages to `plan`. With sealing on, peers'
    /// datagrams are opened in place in `frames` first.
    pub fn process_udp_batch<F: Frames + ?Sized>(&mut self, frames: &mut F, plan: &mut TxPlan) {
        self.lookup.last.key = None;
        for i in 0..frames.count() {
            let d = frames.frame(i);
            let sender = frames
                .src(i)
                .and_then(|a| self.topo.sources.get(a.ip()).copied());
            let source = sender.map(|s| s.source);
            let (id, in_port) = match source {
                Some(Source::Instance(p)) => (CounterId::Port(p), Some(p)),
                Some(Source::Peer(_)) => (CounterId::Fabric, None),
                None => (CounterId::Fabric, None),
            };
            if let Some(p) = in_port {
                if InstanceHeartbeat::is_heartbeat(d) {
                    match InstanceHeartbeat::decode(d) {
                        Some(hb) => {
                            self.heartbeat(p, hb);
                            if let Some(to) = frames.src(i) {
                                self.answer_lease(p, hb.seq, to, plan);
                            }
                        }
                        None => self.stats.drop(id, DropReason::Malformed),
                    }
                    continue;
                }
            }
            let c = self.stats.counters(id);
            c.rx_packets += 1;
            c.rx_bytes += d.len() as u64;
            if source.is_none() {
                self.stats.drop(id, DropReason::UnknownSource);
                continue;
            }
            if let Some(Source::Peer(host)) = source {
                if sluice_seawall::wire::is_feedback(d) {
                    self.feedback(host, id, frames.frame_mut(i));
                    continue;
                }
            }
            let Ok(g) = parse_fabric_payload(d) else {
                self.stats.drop(id, DropReason::Malformed);
                continue;
            };
            if let Some(p) = in_port {
                // An instance speaks for its own tenant only.
                if self.topo.ports.get(&p).map(|p| p.vni) != Some(g.vni) {
                    self.stats.drop(id, DropReason::WrongVni);
                    continue;
                }
            }
            if let Some(
                s @ Sender {
                    source: Source::Peer(_),
                    ..
                },
            ) = sender
            {
                // A peer speaks only for the tenants that have something on it.
                if !self.topo.peer_may_send(s, g.vni) {
                    self.stats.drop(id, DropReason::PeerVni);
                    continue;
                }
            }
            // With sealing on, a peer's frame is read only once it opened (its
            // header was authenticated with it); a sealed datagram from an
            // instance, or while sealing is off, cannot be read.
            let mut end = d.len();
            match (source, g.auth) {
                (Some(Source::Peer(host)), Some(a)) if self.seal.on() => {
                    match self.seal.open(host, a, frames.frame_mut(i), g.inner_at) {
                        Ok(n) => end = n,
                        Err(r) => {
                            self.stats.drop(id, r);
                            continue;
                        }
                    }
                }
                (Some(Source::Peer(_)), None) if self.seal.on() => {
                    self.stats.drop(id, DropReason::AuthFailed);
                    continue;
                }
                (_, Some(_)) => {
                    self.stats.drop(id, DropReason::UnknownKey);
                    continue;
                }
                _ => {}
            }
            let d = &frames.frame(i)[..end];
            if let Some(Source::Peer(host)) = source {
                if !self.seawall.on_data(host, g.seq, end, self.now_ns) {
                    self.stats.drop(id, DropReason::AccusedPeer);
                    continue;
                }
            }
            // An instance hands the local form back as it got it; a peer
            // sends the time spent so far.
            let clock = match in_port {
                Some(_) => g.clock,
                None => g.clock.map(|c| c.wrapping_sub(self.now_ns as u32)),
            };
            let hop = Hop {
                in_port,
                peer: sender.filter(|s| matches!(s.source, Source::Peer(_))),
                vni: g.vni,
                chain_hop: g.chain_hop,
                buf: d,
                index: i,
                inner_at: g.inner_at,
                clock,
                from_chain: None,
            };
            self.forwarder().forward(hop, plan);
        }
    }
}

impl Dataplane {
    /// Applies a Seawall feedback datagram from peer `host`. With the fabric
    /// sealed it is opened first, and a plain or forged one is dropped as
    /// data would be; a sealed one cannot be read while sealing is off.
    fn feedback(&mut self, host: u32, id: CounterId, buf: &mut [u8]) {
        let Ok(g) = parse_control_payload(buf) else {
            self.stats.drop(id, DropReason::Malformed);
            return;
        };
        let mut end = buf.len();
        match g.auth {
            Some(a) if self.seal.on() => match self.seal.open(host, a, buf, g.inner_at) {
                Ok(n) => end = n,
                Err(r) => {
                    self.stats.drop(id, r);
                    return;
                }
            },
            None if self.seal.on() => {
                self.stats.drop(id, DropReason::AuthFailed);
                return;
            }
            Some(_) => {
                self.stats.drop(id, DropReason::UnknownKey);
                return;
            }
            None => {}
        }
        match sluice_seawall::wire::decode_feedback(&buf[..end]) {
            Ok(reports) => {
                self.stats.seawall_feedback_received += 1;
                self.seawall.on_feedback(host, reports, self.now_ns);
            }
            Err(_) => self.stats.drop(id, DropReason::Malformed),
        }
    }
}

impl Forwarder<'_> {
    /// Looks the inner frame of `hop` up and emits its outputs; returns the
    /// chain and hop the packet was sent on with (None: not parsed, or in no
    /// chain).
    fn forward(&mut self, hop: Hop<'_>, plan: &mut TxPlan) -> Option<(u16, u8)> {
        let id = hop.counter();
        if parse_into(hop.inner(), &mut self.lookup.meta).is_err() {
            self.stats.drop(id, DropReason::Malformed);
            return None;
        }
        if let Some(s) = hop.peer {
            // A peer speaks only from its own VMs' addresses for a tenant it
            // runs no NF instance or gateway of (Seawall §4: no hiding behind
            // another host's identity).
            if let Some(src) = outer_source(hop.inner()) {
                if !self.topo.peer_may_source(s, hop.vni, src) {
                    self.stats.drop(id, DropReason::SpoofedSource);
                    return None;
                }
            }
        }
        let meta = &self.lookup.meta;
        let key = LookupInputs {
            in_port: hop.in_port,
            vni: hop.vni,
            chain_hop: hop.chain_hop,
            is_ip: meta.is_ip(),
            has_ports: matches!(meta.l4, L4::Tcp | L4::Udp),
            flow: meta.flow,
        };
        if self.lookup.last.key == Some(key) {
            // Same inputs as the packet before: same entry, same group choice.
            // (The FIB's own per-entry hit counters then count lookups, not
            // packets; the agent reports its own counters, not those.)
            let out = hop.marked(self.lookup.last.chain_hop);
            for k in 0..self.lookup.last.mirrors.len() {
                let (m, mark) = self.lookup.last.mirrors[k];
                match mark {
                    None => self.emit(&out, m, plan, false),
                    Some(mark) => self.emit(&hop.marked(Some(mark)), m, plan, false),
                };
            }
            if let Some(v) = self.lookup.last.verdict {
                self.conclude(&out, v, plan);
            }
            return out.chain_hop;
        }
        self.lookup.last.key = None;
        let Some(fib) = self.lookup.fibs.get_mut(&hop.vni) else {
            self.stats.drop(id, DropReason::NoMatch);
            return None;
        };
        let mut d = fib.lookup(&LookupKey {
            in_port: hop.in_port.map(PortId),
            vni: hop.vni,
            chain_hop: hop.chain_hop,
            meta: &self.lookup.meta,
        });
        // Pinned groups remember flows by time; their choices are not replayed.
        let mut replayable = true;
        let mut verdict = None;
        if !d.drop {
            // The agent selects from its own copy of the group: failover and
            // pinning apply.
            let gid = d.entry.and_then(|e| self.groups.group_of(hop.vni, e));
            if let Some(g) = gid {
                replayable = !self.groups.pinned(hop.vni, g);
                let from_fabric = hop.in_port.is_none();
                let flow = self.lookup.meta.flow;
                match self
                    .groups
                    .select(hop.vni, g, from_fabric, flow, self.now_ns)
                {
                    Some(o) => d.output = Some(o),
                    None => verdict = Some(Err(DropReason::NoLiveInstance)),
                }
            }
        }
        let verdict = verdict.unwrap_or(match (d.drop, d.output) {
            (true, _) if d.blocked => Err(DropReason::Blocked),
            (true, _) => Err(DropReason::FibDrop),
            (false, Some(o)) => Ok(o),
            (false, None) => Err(DropReason::NoMatch),
        });
        let out = hop.marked(d.chain_hop);
        for &(m, mark) in &d.mirrors {
            // A copy for another host carries its own mark: that host hands
            // it to the mirror, not to the chain's next middlebox.
            match mark {
                None => self.emit(&out, m, plan, false),
                Some(mark) => self.emit(&hop.marked(Some(mark)), m, plan, false),
            };
        }
        self.conclude(&out, verdict, plan);
        if replayable {
            self.lookup.last.mirrors.clone_from(&d.mirrors);
            self.lookup.last.chain_hop = d.chain_hop;
            self.lookup.last.verdict = Some(verdict);
            self.lookup.last.key = Some(key);
        }
        d.chain_hop
    }

    /// Emits the packet to its output, or counts its drop.
    fn conclude(&mut self, hop: &Hop<'_>, verdict: Result<Output, DropReason>, plan: &mut TxPlan) {
        let reason = match verdict {
            Ok(o) if self.emit(hop, o, plan, true) => return,
            Ok(_) => DropReason::UnknownOutput,
            Err(r) => r,
        };
        self.stats.drop(hop.counter(), reason);
    }

    /// Emits one copy of the inner frame of `hop` to `o` (`main`: its output,
    /// not a mirror's copy); false if `o` is unknown here.
    fn emit(&mut self, hop: &Hop<'_>, o: Output, plan: &mut TxPlan, main: bool) -> bool {
        let (buf, off) = (hop.buf, hop.inner_at);
        let end = buf.len() as u32;
        let (dest, counter, head, body_start) = match o {
            Output::Port(PortId(q)) => match self.topo.ports.get(&q) {
                Some(Port {
                    target: PortTarget::Vm { mac, .. },
                    ..
                }) => {
                    if self.meter.waiting() {
                        self.meter
                            .delivered(hop.vni, &self.lookup.meta, self.now_ns);
                    }
                    if let (true, Some(chain), Some(c)) =
                        (main, hop.from_chain, hop.clock_at(self.now_ns))
                    {
                        // The end of its chain: what the chain added.
                        self.meter.chain_latency(hop.vni, chain, c);
                    }
                    let mut h = [0u8; 12];
                    h[..6].copy_from_slice(mac);
                    h[6..].copy_from_slice(&ROUTER_MAC);
                    (
                        Dest::Vm(q),
                        CounterId::Port(q),
                        plan.push_head(&h),
                        off + 12,
                    )
                }
                Some(Port {
                    target: PortTarget::Instance { addr },
                    ..
                }) => {
                    let (h, n) = clocked_header(hop.vni, hop.chain_hop, hop.clock);
                    (
                        Dest::Udp(*addr),
                        CounterId::Port(q),
                        plan.push_head(&h[..n]),
                        off,
                    )
                }
                None => return false,
            },
            Output::Host(h) => {
                if h.0 == self.topo.host {
                    return false;
                }
                let Some(addr) = self.topo.peers.get(&h.0) else {
                    return false;
                };
                let addr = *addr;
                // A rate-controlled sender's packet: admitted or dropped here,
                // numbered for the receiver's loss count.
                let seq = match self.seawall.admit(hop, h.0, self.now_ns) {
                    Admission::Send(seq) => seq,
                    // It leaves later, from `seawall_tick`.
                    Admission::Queued => return true,
                    Admission::Dropped(port) => {
                        self.stats
                            .drop(CounterId::Port(port), DropReason::RateLimited);
                        return true;
                    }
                };
                let clock = hop.clock_at(self.now_ns);
                let (g, n) = fabric_header(hop.vni, hop.chain_hop, clock, seq);
                if self.seal.on() {
                    // The whole datagram is written to the arena, sealed.
                    let sealed =
                        self.seal
                            .seal(h.0, self.now_ns, &g[..n], hop.inner(), &mut plan.arena);
                    match sealed {
                        Ok(head) => plan.outs.push(Out {
                            dest: Dest::Udp(addr),
                            counter: CounterId::Peer(h.0),
                            head,
                            frame: hop.index as u32,
                            body: (0, 0),
                        }),
                        Err(_) => self.stats.drop(hop.counter(), DropReason::UnknownKey),
                    }
                    return true;
                }
                (
                    Dest::Udp(addr),
                    CounterId::Peer(h.0),
                    plan.push_head(&g[..n]),
                    off,
                )
            }
        };
        // A frame shorter than its MACs was refused by the parser already.
        let body_start = body_start.min(buf.len()) as u32;
        plan.outs.push(Out {
            dest,
            counter,
            head,
            frame: hop.index as u32,
            body: (body_start, end),
        });
        true
    }
}

/// Answers an ARP request from VM port `port` for any IPv4 target with the
/// router MAC.
fn arp(port: u16, f: &[u8], stats: &mut Stats, plan: &mut TxPlan) {
    let id = CounterId::Port(port);
    if f.len() < ARP_LEN {
        stats.drop(id, DropReason::Malformed);
        return;
    }
    let a = &f[14..];
    let htype = u16::from_be_bytes([a[0], a[1]]);
    let ptype = u16::from_be_bytes([a[2], a[3]]);
    let op = u16::from_be_bytes([a[6], a[7]]);
    if htype != 1 || ptype != ETHERTYPE_IPV4 || a[4] != 6 || a[5] != 4 {
        stats.drop(id, DropReason::Malformed);
        return;
    }
    let (sha, spa, tpa) = (&a[8..14], &a[14..18], &a[24..28]);
    // Replies, and probes or announcements for the sender's own address (what
    // duplicate address detection sends), get no answer.
    if op != 1 || spa == tpa || spa == [0, 0, 0, 0] {
        stats.drop(id, DropReason::NoMatch);
        return;
    }
    let mut r = [0u8; ARP_LEN];
    r[..6].copy_from_slice(sha);
    r[6..12].copy_from_slice(&ROUTER_MAC);
    r[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    r[14..22].copy_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 2]);
    r[22..28].copy_from_slice(&ROUTER_MAC);
    r[28..32].copy_from_slice(tpa);
    r[32..38].copy_from_slice(sha);
    r[38..42].copy_from_slice(spa);
    let head = plan.push_head(&r);
    plan.outs.push(Out {
        dest: Dest::Vm(port),
        counter: id,
        head,
        frame: 0,
        body: (0, 0),
    });
    stats.arp_replies += 1;
}

/// The source address of an Ethernet frame's network layer, behind any VLAN
/// tags (None: not IPv4 or IPv6, or too short).
fn outer_source(f: &[u8]) -> Option<std::net::IpAddr> {
    let mut at = 12;
    loop {
        let et = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
        at += 2;
        match et {
            0x8100 | 0x88a8 | 0x9100 => at += 2,
            0x0800 => {
                let b: [u8; 4] = f.get(at + 12..at + 16)?.try_into().ok()?;
                return Some(std::net::IpAddr::from(b));
            }
            0x86dd => {
                let b: [u8; 16] = f.get(at + 8..at + 24)?.try_into().ok()?;
                return Some(std::net::IpAddr::from(b));
            }
            _ => return None,
        }
    }
}
