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
//! `timeout` fails. An HTTP check (`http_path`) goes one step further: the
//! SYN-ACK is acknowledged with an HTTP/1.0 `GET` in one segment, and the
//! first data segment of the answer decides (a 2xx or 3xx status line
//! passes; then a RST ends the connection). The results are only counted here; the controller turns
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
use sluice_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};
use sluice_wire::IpAddr;

use super::config::{Port, PortTarget};
use super::plan::{Dest, TxPlan};
use super::stats::CounterId;
use super::ROUTER_MAC;

/// Source ports of probes cycle through this range (the VM sees each probe
/// as a new connection attempt from [`PROBE_SOURCE`]).
const SPORT_FIRST: u16 = 40_000;
const SPORT_COUNT: u16 = 20_000;
/// Longest HTTP request a check sends (a path of up to 256 bytes, which the
/// LB's configuration enforces, fits); a check with a longer one is not run.
const MAX_REQUEST: usize = 512;
/// A probe frame: Ethernet, IPv4 and TCP headers without options, and a
/// request.
const PROBE_FRAME: usize = 14 + 20 + 20 + MAX_REQUEST;

/// Where a check in flight is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The SYN is sent.
    Handshake,
    /// The HTTP request is sent: the sequence numbers each side sends next.
    Request { ours: u32, theirs: u32 },
}

/// A check sent and not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InFlight {
    sport: u16,
    iss: u32,
    started_ns: u64,
    phase: Phase,
}

/// One backend's checks.
#[derive(Debug, Clone)]
struct Target {
    check: HealthCheck,
    /// The VM's MAC (the probe's destination).
    mac: [u8; 6],
    /// An HTTP check's request, built once.
    request: Option<Vec<u8>>,
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
                Some(PortTarget::Vm { mac, .. }) => {
                    let request = c.http_path.as_ref().map(|path| {
                        format!(
                            "GET {path} HTTP/1.0\r\nHost: {}\r\nUser-Agent: sluice-health-check\r\n\r\n",
                            c.addr
                        )
                        .into_bytes()
                    });
                    if request.as_ref().is_some_and(|r| r.len() > MAX_REQUEST) {
                        return None;
                    }
                    Some(Target {
                        check: c.clone(),
                        mac: *mac,
                        request,
                        next_ns: None,
                        in_flight: None,
                        ok: 0,
                        failed: 0,
                        last: None,
                    })
                }
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
                phase: Phase::Handshake,
            });
            t.next_ns = Some(now.saturating_add(t.check.interval_ms.saturating_mul(1_000_000)));
            let c = &t.check;
            let seg = Out {
                sport,
                dport: c.tcp_port,
                seq: iss,
                ack: 0,
                flags: SYN,
            };
            push_segment(plan, c.port, t.mac, c.addr, seg, &[]);
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
        let back = |seq: u32, ack: u32, flags: u8| Out {
            sport: s.dport,
            dport: s.sport,
            seq,
            ack,
            flags,
        };
        let outcome = match f.phase {
            Phase::Handshake => {
                let acks_our_syn = s.flags & ACK != 0 && s.ack == f.iss.wrapping_add(1);
                if s.flags & (SYN | ACK | RST) == SYN | ACK && acks_our_syn {
                    let theirs = s.seq.wrapping_add(1);
                    match &t.request {
                        None => {
                            push_segment(plan, port, t.mac, s.src, back(s.ack, 0, RST), &[]);
                            CheckOutcome::Ok
                        }
                        Some(req) => {
                            let seg = back(s.ack, theirs, PSH | ACK);
                            push_segment(plan, port, t.mac, s.src, seg, req);
                            let ours = s.ack.wrapping_add(req.len() as u32);
                            if let Some(f) = &mut t.in_flight {
                                f.phase = Phase::Request { ours, theirs };
                            }
                            return true;
                        }
                    }
                } else if s.flags & RST != 0 && acks_our_syn {
                    CheckOutcome::Refused
                } else {
                    self.unmatched += 1;
                    return false;
                }
            }
            Phase::Request { ours, theirs } => {
                if s.seq != theirs {
                    // A retransmission, or not in order: the timeout decides.
                    return true;
                }
                if s.flags & RST != 0 {
                    CheckOutcome::Refused
                } else if !s.payload.is_empty() || s.flags & FIN != 0 {
                    push_segment(plan, port, t.mac, s.src, back(ours, 0, RST), &[]);
                    match http_status(s.payload) {
                        Some(code) if (200..400).contains(&code) => CheckOutcome::Ok,
                        code => CheckOutcome::Status(code.unwrap_or(0)),
                    }
                } else {
                    // The acknowledgement of the request.
                    return true;
                }
            }
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
                target: match &t.check.http_path {
                    None => format!("tcp {}:{}", t.check.addr, t.check.tcp_port),
                    Some(p) => format!("http {}:{}{p}", t.check.addr, t.check.tcp_port),
                },
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

/// The TCP header fields of a segment a check sends.
#[derive(Debug, Clone, Copy)]
struct Out {
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
}

/// Appends a segment from [`PROBE_SOURCE`] to the VM at `mac` on `port`.
fn push_segment(plan: &mut TxPlan, port: u16, mac: [u8; 6], addr: Ipv4Addr, o: Out, data: &[u8]) {
    let mut buf = [0u8; PROBE_FRAME];
    let t = Transport::Tcp(tcp_repr(o.sport, o.dport, o.seq, o.ack, o.flags));
    let src = IpAddr::V4(PROBE_SOURCE.octets());
    let Ok(n) = write_frame(&mut buf, src, IpAddr::V4(addr.octets()), t, data) else {
        return;
    };
    buf[..6].copy_from_slice(&mac);
    buf[6..12].copy_from_slice(&ROUTER_MAC);
    plan.push_own(Dest::Vm(port), CounterId::Port(port), &[&buf[..n]]);
}

/// The status code of an HTTP/1.x status line at the start of `data`.
fn http_status(data: &[u8]) -> Option<u16> {
    let line = data.get(..12)?;
    if !line.starts_with(b"HTTP/1.") || line[8] != b' ' {
        return None;
    }
    let digits = &line[9..12];
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u16, |a, d| a * 10 + u16::from(d - b'0')),
    )
}

/// The fields of a TCP segment over IPv4 that a check's answer is matched by.
#[derive(Debug, Clone, Copy)]
struct Segment<'a> {
    src: Ipv4Addr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &'a [u8],
}

impl Segment<'_> {
    /// `None` for anything but an unfragmented IPv4 TCP segment.
    fn parse(f: &[u8]) -> Option<Segment<'_>> {
        let ip = f.get(14..)?;
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != sluice_wire::ip_proto::TCP {
            return None;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        // A fragment's offset or more-fragments flag: not a whole segment.
        if ihl < 20 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
            return None;
        }
        // The IP length, not the frame's: short frames carry padding.
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let ip = ip.get(..total)?;
        let tcp = ip.get(ihl..)?;
        let doff = usize::from(tcp.get(12)? >> 4) * 4;
        if doff < 20 {
            return None;
        }
        let h = tcp.get(..20)?;
        Some(Segment {
            src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
            sport: u16::from_be_bytes([h[0], h[1]]),
            dport: u16::from_be_bytes([h[2], h[3]]),
            seq: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
            ack: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            flags: h[13],
            payload: tcp.get(doff..)?,
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
        probes_with(None)
    }

    fn probes_with(http_path: Option<&str>) -> Probes {
        let mut checks = vec![check(3), check(9)];
        for c in &mut checks {
            c.http_path = http_path.map(str::to_string);
        }
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
            health_checks: checks,
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
            http_path: None,
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
        answer_data(sport, 777, seq_acked, flags, &[])
    }

    fn answer_data(sport: u16, seq: u32, seq_acked: u32, flags: u8, data: &[u8]) -> Vec<u8> {
        tcp_v4(
            BACKEND,
            PROBE_SOURCE.octets(),
            80,
            sport,
            seq,
            seq_acked,
            flags,
            data,
        )
    }

    /// Runs one HTTP check answered `response` at 10 ms; returns its outcome
    /// and the request the VM got.
    fn http_check(response: &[u8]) -> (Option<CheckOutcome>, Vec<u8>) {
        let mut p = probes_with(Some("/healthz"));
        let mut plan = TxPlan::new();
        p.tick(0, &mut plan);
        let (sport, iss) = syns(&plan)[0];
        plan.clear();
        assert!(p.on_reply(3, &answer(sport, iss.wrapping_add(1), SYN | ACK), &mut plan));
        assert_eq!(plan.outs.len(), 1, "the request");
        let req = plan.head(&plan.outs[0]).to_vec();
        assert!(sluice_wire::rewrite::verify_all_checksums(&req));
        let r = Segment::parse(&req).unwrap();
        assert_eq!(
            (r.flags, r.seq, r.ack),
            (PSH | ACK, iss.wrapping_add(1), 778)
        );
        let body = r.payload.to_vec();
        assert_eq!(p.report()[0].last, None, "not decided by the handshake");
        plan.clear();
        // The VM acknowledges the request first: nothing to do.
        let ours = iss.wrapping_add(1).wrapping_add(body.len() as u32);
        assert!(p.on_reply(3, &answer_data(sport, 778, ours, ACK, &[]), &mut plan));
        assert!(plan.outs.is_empty());
        assert!(p.on_reply(
            3,
            &answer_data(sport, 778, ours, PSH | ACK, response),
            &mut plan
        ));
        assert_eq!(plan.outs.len(), 1, "a RST ends it");
        let rst = Segment::parse(plan.head(&plan.outs[0])).unwrap();
        assert_eq!((rst.flags, rst.seq), (RST, ours));
        let r = &p.report()[0];
        assert_eq!(r.target, "http 10.10.1.11:80/healthz");
        (r.last, body)
    }

    #[test]
    fn an_http_check_gets_its_path_and_passes_on_2xx_and_3xx_only() {
        let (ok, req) = http_check(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(ok, Some(CheckOutcome::Ok));
        assert_eq!(
            String::from_utf8(req).unwrap(),
            "GET /healthz HTTP/1.0\r\nHost: 10.10.1.11\r\nUser-Agent: sluice-health-check\r\n\r\n"
        );
        assert_eq!(
            http_check(b"HTTP/1.0 302 Found\r\n\r\n").0,
            Some(CheckOutcome::Ok)
        );
        assert_eq!(
            http_check(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").0,
            Some(CheckOutcome::Status(503))
        );
        assert_eq!(
            http_check(b"SSH-2.0-OpenSSH\r\n").0,
            Some(CheckOutcome::Status(0))
        );
        assert_eq!(http_check(b"HTTP/1.1 2").0, Some(CheckOutcome::Status(0)));
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
        assert_eq!(r.target, "tcp 10.10.1.11:80");
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
