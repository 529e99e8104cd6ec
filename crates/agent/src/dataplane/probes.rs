//! Active TCP health checks of load-balancer backends that are VMs on this
//! host (issue 22, item 4), sans-IO.
//!
//! The controller lists them in [`AgentConfig::health_checks`]. Every
//! `interval` the agent writes a SYN from [`PROBE_SOURCE`] (link-local, never
//! a tenant's address: no tenant rule or flow record sees a probe) into the
//! VM's port; the VM's answer comes back on the same port, where the packet
//! path hands frames to [`PROBE_SOURCE`] here before any FIB lookup
//! ([`Probes::on_reply`]). A SYN-ACK passes (and is answered with a RST, so
//! the VM keeps no half-open connection), a RST fails, no answer within
//! `timeout` fails. The results are only counted here; the controller turns
//! them into up or down with the service's rise and fall thresholds.
//!
//! Nothing here reads a clock or touches a socket: [`Probes::tick`] takes
//! `now` and writes the frames to send into the plan. One check per backend
//! is in flight at a time, and each probe has its own source port and
//! initial sequence number, so a late or stray answer matches nothing.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use sluice_proto::{AgentConfig, BackendCheck, CheckOutcome, HealthCheck, PROBE_SOURCE};
use sluice_wire::build::{tcp_repr, write_frame, Transport};
use sluice_wire::tcp::flags::{ACK, RST, SYN};
use sluice_wire::IpAddr;

use super::config::{Port, PortTarget};
use super::plan::{Dest, TxPlan};
use super::stats::CounterId;
use super::ROUTER_MAC;

/// Source ports of probes cycle through this range (the VM sees each probe
/// as a new connection attempt from [`PROBE_SOURCE`]).
const SPORT_FIRST: u16 = 40_000;
const SPORT_COUNT: u16 = 20_000;
/// A SYN or RST frame: Ethernet, IPv4 and TCP headers without options.
const PROBE_FRAME: usize = 14 + 20 + 20;

/// A check sent and not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InFlight {
    sport: u16,
    iss: u32,
    started_ns: u64,
}

/// One backend's checks.
#[derive(Debug, Clone)]
struct Target {
    check: HealthCheck,
    /// The VM's MAC (the probe's destination).
    mac: [u8; 6],
    /// When the next check starts (`None`: at the first tick).
    next_ns: Option<u64>,
    in_flight: Option<InFlight>,
    ok: u64,
    failed: u64,
    last: Option<CheckOutcome>,
}

impl Target {
    /// Whether `other` checks the same thing the same way (its counters
    /// carry over a new configuration).
    fn same(&self, other: &HealthCheck) -> bool {
        self.check == *other
    }

    fn finish(&mut self, outcome: CheckOutcome) {
        self.in_flight = None;
        self.last = Some(outcome);
        if outcome == CheckOutcome::Ok {
            self.ok += 1;
        } else {
            self.failed += 1;
        }
    }
}

/// The checks this host runs.
#[derive(Debug, Clone, Default)]
pub(super) struct Probes {
    targets: Vec<Target>,
    /// In-flight checks by (port, backend address, backend port, source
    /// port): a reply finds its check without a scan.
    by_tuple: BTreeMap<(u16, Ipv4Addr, u16, u16), usize>,
    next_sport: u16,
    /// Frames to [`PROBE_SOURCE`] that matched no check in flight (late or
    /// stray answers), dropped.
    pub(super) unmatched: u64,
}

impl Probes {
    /// The checks of `cfg` whose port is one of this host's VM ports (others
    /// cannot be sent and are left out).
    pub(super) fn new(cfg: &AgentConfig, ports: &BTreeMap<u16, Port>) -> Probes {
        let targets = cfg
            .health_checks
            .iter()
            .filter_map(|c| match ports.get(&c.port).map(|p| &p.target) {
                Some(PortTarget::Vm { mac, .. }) => Some(Target {
                    check: c.clone(),
                    mac: *mac,
                    next_ns: None,
                    in_flight: None,
                    ok: 0,
                    failed: 0,
                    last: None,
                }),
                _ => None,
            })
            .collect();
        Probes {
            targets,
            ..Probes::default()
        }
    }

    /// Takes over the counters, timing and checks in flight of `old`'s
    /// targets that are unchanged, so a new configuration neither resets
    /// what the controller has counted nor loses an answer on its way.
    pub(super) fn inherit(&mut self, old: &Probes) {
        for t in &mut self.targets {
            if let Some(o) = old.targets.iter().find(|o| o.same(&t.check)) {
                t.next_ns = o.next_ns;
                t.in_flight = o.in_flight;
                t.ok = o.ok;
                t.failed = o.failed;
                t.last = o.last;
            }
        }
        self.next_sport = old.next_sport;
        self.unmatched = old.unmatched;
        self.index();
    }

    fn index(&mut self) {
        self.by_tuple.clear();
        for (i, t) in self.targets.iter().enumerate() {
            if let Some(f) = t.in_flight {
                self.by_tuple
                    .insert((t.check.port, t.check.addr, t.check.tcp_port, f.sport), i);
            }
        }
    }

    /// Whether any check is configured.
    pub(super) fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// At `now`: fails the checks past their timeout and starts those due,
    /// writing their SYNs into `plan`. Returns whether a check ended.
    pub(super) fn tick(&mut self, now: u64, plan: &mut TxPlan) -> bool {
        let mut ended = false;
        for i in 0..self.targets.len() {
            let t = &mut self.targets[i];
            if let Some(f) = t.in_flight {
                if now.saturating_sub(f.started_ns) >= t.check.timeout_ms.saturating_mul(1_000_000)
                {
                    self.by_tuple
                        .remove(&(t.check.port, t.check.addr, t.check.tcp_port, f.sport));
                    t.finish(CheckOutcome::Timeout);
                    ended = true;
                }
            }
            if t.in_flight.is_some() || t.next_ns.is_some_and(|n| now < n) {
                continue;
            }
            let sport = SPORT_FIRST + self.next_sport % SPORT_COUNT;
            self.next_sport = self.next_sport.wrapping_add(1) % SPORT_COUNT;
            // Not a secret: it only has to differ from probe to probe, so an
            // answer to an earlier probe on a reused source port is told apart.
            let iss = (now as u32) ^ ((now >> 32) as u32).rotate_left(7) ^ u32::from(sport) << 16;
            t.in_flight = Some(InFlight {
                sport,
                iss,
                started_ns: now,
            });
            t.next_ns = Some(now.saturating_add(t.check.interval_ms.saturating_mul(1_000_000)));
            let c = &t.check;
            push_segment(plan, c.port, t.mac, c.addr, c.tcp_port, sport, iss, SYN);
            self.by_tuple.insert((c.port, c.addr, c.tcp_port, sport), i);
        }
        ended
    }

    /// A frame from VM port `port` addressed to [`PROBE_SOURCE`] (the caller
    /// checked that much): if it answers a check in flight, ends the check
    /// (a SYN-ACK is answered with a RST into `plan`). Returns whether it
    /// matched a check; unmatched frames are counted and dropped.
    pub(super) fn on_reply(&mut self, port: u16, frame: &[u8], plan: &mut TxPlan) -> bool {
        let Some(s) = Segment::parse(frame) else {
            self.unmatched += 1;
            return false;
        };
        let Some(i) = self.by_tuple.get(&(port, s.src, s.sport, s.dport)).copied() else {
            self.unmatched += 1;
            return false;
        };
        let t = &mut self.targets[i];
        let Some(f) = t.in_flight else {
            self.unmatched += 1;
            return false;
        };
        let acks_our_syn = s.flags & ACK != 0 && s.ack == f.iss.wrapping_add(1);
        let outcome = if s.flags & (SYN | ACK | RST) == SYN | ACK && acks_our_syn {
            push_segment(plan, port, t.mac, s.src, s.sport, s.dport, s.ack, RST);
            CheckOutcome::Ok
        } else if s.flags & RST != 0 && acks_our_syn {
            CheckOutcome::Refused
        } else {
            self.unmatched += 1;
            return false;
        };
        self.by_tuple.remove(&(port, s.src, s.sport, s.dport));
        t.finish(outcome);
        true
    }

    /// What the checks found so far (the heartbeat's `backend_checks`).
    pub(super) fn report(&self) -> Vec<BackendCheck> {
        self.targets
            .iter()
            .map(|t| BackendCheck {
                tenant: t.check.tenant.clone(),
                middlebox: t.check.middlebox.clone(),
                backend: t.check.backend.clone(),
                target: format!("{}:{}", t.check.addr, t.check.tcp_port),
                ok: t.ok,
                failed: t.failed,
                last: t.last,
            })
            .collect()
    }
}

/// Whether a frame from a VM is addressed to [`PROBE_SOURCE`]: one compare of
/// bytes already in cache, the only cost probes add to the packet path.
pub(super) fn to_probe_source(f: &[u8]) -> bool {
    f.len() >= 34 && f[12..14] == [0x08, 0x00] && f[30..34] == PROBE_SOURCE.octets()
}

/// Appends a SYN or RST from [`PROBE_SOURCE`] to the VM at `mac` on `port`.
#[allow(clippy::too_many_arguments)]
fn push_segment(
    plan: &mut TxPlan,
    port: u16,
    mac: [u8; 6],
    addr: Ipv4Addr,
    dport: u16,
    sport: u16,
    seq: u32,
    flags: u8,
) {
    let mut buf = [0u8; PROBE_FRAME];
    let t = Transport::Tcp(tcp_repr(sport, dport, seq, 0, flags));
    let src = IpAddr::V4(PROBE_SOURCE.octets());
    let Ok(n) = write_frame(&mut buf, src, IpAddr::V4(addr.octets()), t, &[]) else {
        return;
    };
    buf[..6].copy_from_slice(&mac);
    buf[6..12].copy_from_slice(&ROUTER_MAC);
    plan.push_own(Dest::Vm(port), CounterId::Port(port), &[&buf[..n]]);
}

/// The fields of a TCP segment over IPv4 that a check's answer is matched by.
#[derive(Debug, Clone, Copy)]
struct Segment {
    src: Ipv4Addr,
    sport: u16,
    dport: u16,
    ack: u32,
    flags: u8,
}

impl Segment {
    /// `None` for anything but an unfragmented IPv4 TCP segment.
    fn parse(f: &[u8]) -> Option<Segment> {
        let ip = f.get(14..)?;
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != sluice_wire::ip_proto::TCP {
            return None;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        // A fragment's offset or more-fragments flag: not a whole segment.
        if ihl < 20 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
            return None;
        }
        let tcp = ip.get(ihl..ihl + 20)?;
        Some(Segment {
            src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
            sport: u16::from_be_bytes([tcp[0], tcp[1]]),
            dport: u16::from_be_bytes([tcp[2], tcp[3]]),
            ack: u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]),
            flags: tcp[13],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::{PortConfig, PortKind};
    use sluice_wire::build::tcp_v4;

    const MS: u64 = 1_000_000;
    const VM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
    const BACKEND: [u8; 4] = [10, 10, 1, 11];

    fn probes() -> Probes {
        let cfg = AgentConfig {
            host: 1,
            ports: vec![PortConfig {
                id: 3,
                vni: 7,
                kind: PortKind::Vm {
                    name: "web-a1".into(),
                    iface: "p3".into(),
                    mac: "02:00:00:00:00:11".into(),
                    weight: 1,
                },
            }],
            health_checks: vec![check(3), check(9)],
            ..AgentConfig::default()
        };
        let mut ports = BTreeMap::new();
        ports.insert(
            3,
            Port {
                id: 3,
                vni: 7,
                name: "web-a1".into(),
                target: PortTarget::Vm {
                    iface: "p3".into(),
                    mac: VM_MAC,
                },
                weight: 1,
            },
        );
        Probes::new(&cfg, &ports)
    }

    fn check(port: u16) -> HealthCheck {
        HealthCheck {
            tenant: "acme".into(),
            middlebox: "lb-a".into(),
            backend: "10.10.1.11".into(),
            port,
            addr: Ipv4Addr::from(BACKEND),
            tcp_port: 80,
            interval_ms: 2000,
            timeout_ms: 1000,
        }
    }

    /// The SYNs in `plan`: (source port, ISS).
    fn syns(plan: &TxPlan) -> Vec<(u16, u32)> {
        plan.outs
            .iter()
            .map(|o| {
                assert_eq!(o.dest, Dest::Vm(3));
                let f = plan.head(o);
                assert_eq!(&f[..6], &VM_MAC);
                assert_eq!(&f[6..12], &ROUTER_MAC);
                assert!(
                    to_probe_source(&swap_ips(f)),
                    "the answer goes to the probe source"
                );
                assert!(
                    sluice_wire::rewrite::verify_all_checksums(f),
                    "checksums are right"
                );
                let s = Segment::parse(f).unwrap();
                assert_eq!(s.flags, SYN);
                (s.sport, u32::from_be_bytes([f[38], f[39], f[40], f[41]]))
            })
            .collect()
    }

    /// `f` with its IPv4 addresses swapped (what an answer's would be).
    fn swap_ips(f: &[u8]) -> Vec<u8> {
        let mut v = f.to_vec();
        v[26..30].copy_from_slice(&f[30..34]);
        v[30..34].copy_from_slice(&f[26..30]);
        v
    }

    fn answer(sport: u16, seq_acked: u32, flags: u8) -> Vec<u8> {
        tcp_v4(
            BACKEND,
            PROBE_SOURCE.octets(),
            80,
            sport,
            777,
            seq_acked,
            flags,
            &[],
        )
    }

    #[test]
    fn only_checks_on_this_hosts_vm_ports_run() {
        let p = probes();
        assert_eq!(p.report().len(), 1, "port 9 is not a VM port here");
        assert!(!p.is_empty());
        assert!(Probes::default().is_empty());
    }

    #[test]
    fn a_syn_ack_passes_and_is_answered_with_a_rst() {
        let mut p = probes();
        let mut plan = TxPlan::new();
        p.tick(0, &mut plan);
        let s = syns(&plan);
        assert_eq!(s.len(), 1);
        let (sport, iss) = s[0];
        plan.clear();
        assert!(p.on_reply(3, &answer(sport, iss.wrapping_add(1), SYN | ACK), &mut plan));
        assert_eq!(plan.outs.len(), 1, "a RST to the VM");
        let rst = plan.head(&plan.outs[0]);
        assert!(sluice_wire::rewrite::verify_all_checksums(rst));
        let r = Segment::parse(rst).unwrap();
        assert_eq!((r.flags, r.sport, r.dport), (RST, sport, 80));
        assert_eq!(
            u32::from_be_bytes([rst[38], rst[39], rst[40], rst[41]]),
            iss.wrapping_add(1),
            "the RST's sequence number is what the SYN-ACK acknowledged"
        );
        let r = &p.report()[0];
        assert_eq!((r.ok, r.failed, r.last), (1, 0, Some(CheckOutcome::Ok)));
        assert_eq!(r.target, "10.10.1.11:80");
    }

    #[test]
    fn a_rst_fails_and_silence_fails_at_the_timeout() {
        let mut p = probes();
        let mut plan = TxPlan::new();
        p.tick(0, &mut plan);
        let (sport, iss) = syns(&plan)[0];
        plan.clear();
        assert!(p.on_reply(3, &answer(sport, iss.wrapping_add(1), RST | ACK), &mut plan));
        assert!(plan.outs.is_empty(), "a RST is not answered");
        assert_eq!(p.report()[0].last, Some(CheckOutcome::Refused));
        assert!(
            !p.tick(1999 * MS, &mut plan),
            "the next check waits for the interval"
        );
        assert!(plan.outs.is_empty());
        p.tick(2000 * MS, &mut plan);
        assert_eq!(syns(&plan).len(), 1);
        plan.clear();
        assert!(!p.tick(2999 * MS, &mut plan), "not yet timed out");
        assert!(
            p.tick(3000 * MS, &mut plan),
            "unanswered for the timeout: failed"
        );
        assert!(
            plan.outs.is_empty(),
            "and the next starts at its interval, not at once"
        );
        let r = &p.report()[0];
        assert_eq!(
            (r.ok, r.failed, r.last),
            (0, 2, Some(CheckOutcome::Timeout))
        );
    }

    #[test]
    fn stray_and_late_answers_match_nothing() {
        let mut p = probes();
        let mut plan = TxPlan::new();
        p.tick(0, &mut plan);
        let (sport, iss) = syns(&plan)[0];
        plan.clear();
        // Wrong acknowledgement, wrong port, wrong VM port, not TCP, plain ACK.
        assert!(!p.on_reply(3, &answer(sport, iss.wrapping_add(2), SYN | ACK), &mut plan));
        assert!(!p.on_reply(
            3,
            &answer(sport.wrapping_add(1), iss.wrapping_add(1), SYN | ACK),
            &mut plan
        ));
        assert!(!p.on_reply(4, &answer(sport, iss.wrapping_add(1), SYN | ACK), &mut plan));
        assert!(!p.on_reply(3, &[0u8; 20], &mut plan));
        assert!(!p.on_reply(3, &answer(sport, iss.wrapping_add(1), ACK), &mut plan));
        assert_eq!(p.unmatched, 5);
        assert!(p.tick(1000 * MS, &mut plan), "timed out");
        // An answer to the timed-out probe comes too late.
        assert!(!p.on_reply(3, &answer(sport, iss.wrapping_add(1), SYN | ACK), &mut plan));
        assert!(plan.outs.is_empty());
        let r = &p.report()[0];
        assert_eq!((r.ok, r.failed), (0, 1));
    }

    #[test]
    fn a_new_configuration_keeps_the_counters_and_the_check_in_flight() {
        let mut p = probes();
        let mut plan = TxPlan::new();
        p.tick(0, &mut plan);
        let (sport, iss) = syns(&plan)[0];
        let mut q = probes();
        q.inherit(&p);
        plan.clear();
        assert!(q.on_reply(3, &answer(sport, iss.wrapping_add(1), SYN | ACK), &mut plan));
        assert_eq!(q.report()[0].ok, 1);
        // A changed check starts over.
        let mut cfg_changed = probes();
        cfg_changed.targets[0].check.timeout_ms = 500;
        let mut r = cfg_changed.clone();
        r.inherit(&q);
        assert_eq!(r.report()[0].ok, 0);
    }

    #[test]
    fn each_probe_has_its_own_source_port() {
        let mut p = probes();
        let mut plan = TxPlan::new();
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..5u64 {
            plan.clear();
            p.tick(k * 2000 * MS, &mut plan);
            for (sport, _) in syns(&plan) {
                assert!(seen.insert(sport));
            }
        }
        assert_eq!(seen.len(), 5);
    }
}
