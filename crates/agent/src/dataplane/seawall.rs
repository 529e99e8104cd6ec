//! Glue between the data plane and Seawall (crate `sluice_seawall`): the rate
//! controllers of this host's senders (admitting, queueing or dropping what a
//! port sends to another host, and releasing what waited), and the receiving
//! side that counts what other hosts' senders send here and reports back.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddrV4;

use sluice_seawall::audit::{AuditConfig, Auditor};
use sluice_seawall::{Arrival, Config, Offer, Receiver, Sender};
use sluice_switch::tunnel::{fabric_header, ChainClock, SeqOption};

use super::config::Port;
use super::forward::Hop;
use super::plan::{Dest, Out, TxPlan};
use super::seal::FabricSeal;
use super::stats::{CounterId, DropReason, Stats};
use super::Dataplane;

/// How often idle Seawall entities are looked for.
const SEAWALL_EXPIRE_EVERY_NS: u64 = 1_000_000_000;

/// What a packet waiting in a Seawall queue needs to get its tunnel header
/// when it leaves: VNI (24 bits), whether it has a chain/hop (bit 24), chain
/// (bits 25-40), hop (bits 41-48), whether it has a chain clock (bit 49), and
/// the clock in its local form (bits 64-95): the wait counts in what the
/// chain adds.
fn seawall_tag(vni: u32, chain_hop: Option<(u16, u8)>, clock: Option<ChainClock>) -> u128 {
    let (c, h) = chain_hop.unwrap_or((0, 0));
    u128::from(vni & 0x00ff_ffff)
        | (u128::from(chain_hop.is_some()) << 24)
        | (u128::from(c) << 25)
        | (u128::from(h) << 41)
        | (u128::from(clock.is_some()) << 49)
        | (u128::from(clock.unwrap_or(0)) << 64)
}

/// The inverse of [`seawall_tag`].
fn from_seawall_tag(t: u128) -> (u32, Option<(u16, u8)>, Option<ChainClock>) {
    let vni = (t & 0x00ff_ffff) as u32;
    let ch = (t >> 24) & 1 == 1;
    let clocked = (t >> 49) & 1 == 1;
    (
        vni,
        ch.then_some(((t >> 25) as u16, (t >> 41) as u8)),
        clocked.then_some((t >> 64) as u32),
    )
}

/// What Seawall decided for a packet to another host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Send it now, with this sequence option (None: its sender is not
    /// rate-controlled).
    Send(Option<SeqOption>),
    /// It waits in its sender's queue and leaves later, from
    /// [`Dataplane::seawall_tick`].
    Queued,
    /// Over the rate of its sender (this port) and dropped.
    Dropped(u16),
}

/// The data plane's Seawall state.
#[derive(Debug)]
pub(super) struct SeawallAdapter {
    /// Rate controllers of this host's ports (None: off).
    pub(super) sender: Option<Box<Sender>>,
    /// The receiving side: always on, so any rate-controlled sender gets
    /// feedback from this host.
    rx: Receiver,
    /// Whether other hosts obey that feedback (on with this host's own rate
    /// control: a fleet that runs Seawall expects every host to).
    audit: Option<Auditor>,
    /// When idle entities are next forgotten (data-plane clock).
    expire_at: u64,
    /// When silent entities are next looked for.
    silence_at: u64,
}

impl Default for SeawallAdapter {
    fn default() -> SeawallAdapter {
        let c = Config::default();
        SeawallAdapter {
            sender: None,
            rx: Receiver::new(c.period_ns, c.queue_delay_ns),
            audit: None,
            expire_at: 0,
            silence_at: 0,
        }
    }
}

impl SeawallAdapter {
    /// Takes over `old`'s rates and sequence numbers: a new configuration
    /// must not free a flooding VM or look like loss to the receivers.
    pub(super) fn inherit(&mut self, old: &SeawallAdapter) {
        self.sender.clone_from(&old.sender);
        self.rx.clone_from(&old.rx);
        self.audit.clone_from(&old.audit);
    }

    /// Forgets the accusations of every host an operator released since the
    /// previous configuration (its generation in `now` rose over `before`):
    /// the operator's word ends the sandbox at once, not after the auditor's
    /// own forgiveness.
    pub(super) fn pardon(&mut self, now: &BTreeMap<u32, u64>, before: &BTreeMap<u32, u64>) {
        let Some(a) = &mut self.audit else {
            return;
        };
        for (h, g) in now {
            if before.get(h).is_none_or(|b| b < g) {
                a.forget_host(*h);
            }
        }
    }

    /// Hands the ports' weights to the rate controllers.
    pub(super) fn apply_weights(&mut self, ports: &BTreeMap<u16, Port>) {
        if let Some(s) = &mut self.sender {
            s.set_weights(ports.values().map(|p| (p.id, p.weight)));
        }
    }

    /// When the next queued packet may leave (None: nothing waits).
    fn release_at(&self) -> Option<u64> {
        self.sender.as_ref().and_then(|s| s.next_release())
    }

    /// The earliest time Seawall needs the loop: feedback due, or a queued
    /// packet's release.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        [self.rx.next_deadline(), self.release_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Admits, queues or drops a packet that `hop` sends to `host`: only what
    /// entered through a port is rate-controlled (the fabric's own traffic
    /// passes through), and what is sent is numbered for the receiver's loss
    /// count.
    pub(super) fn admit(&mut self, hop: &Hop<'_>, host: u32, now_ns: u64) -> Admission {
        let (Some(sw), Some(port)) = (&mut self.sender, hop.in_port) else {
            return Admission::Send(None);
        };
        let tag = seawall_tag(hop.vni, hop.chain_hop, hop.clock);
        match sw.offer(port, host, tag, hop.inner(), now_ns) {
            Offer::Send(seq) => Admission::Send(Some(SeqOption {
                port,
                seq,
                sent_us: (now_ns / 1000) as u32,
            })),
            Offer::Queued => Admission::Queued,
            Offer::Dropped => Admission::Dropped(port),
        }
    }

    /// Counts a data packet of `len` bytes from peer `host` (numbered with
    /// `seq`, or not) for its sender's feedback and for the audit of that
    /// sender; false when `host` is accused and the packet must be dropped.
    pub(super) fn on_data(
        &mut self,
        host: u32,
        seq: Option<SeqOption>,
        len: usize,
        now_ns: u64,
    ) -> bool {
        let a = match seq {
            Some(o) => self
                .rx
                .on_packet(host, o.port, o.seq, Some(o.sent_us), now_ns),
            None => Arrival::default(),
        };
        match &mut self.audit {
            Some(au) => {
                au.on_data(host, len, a.lost, a.new_entity, now_ns);
                !au.is_accused(host)
            }
            None => true,
        }
    }

    /// The hosts this host accuses now, and how long ago each was accused.
    pub(super) fn accusations(&self, now_ns: u64) -> Vec<sluice_proto::Accusation> {
        self.audit
            .iter()
            .flat_map(|a| a.accusations())
            .map(|a| sluice_proto::Accusation {
                host: a.host,
                rate_bps: a.rate_bps,
                allowance_bps: a.allowance_bps,
                congested_periods: a.congested_periods,
                age_ms: now_ns.saturating_sub(a.since_ns) / 1_000_000,
            })
            .collect()
    }

    /// Applies a feedback message from peer `host` to this host's senders.
    pub(super) fn on_feedback(
        &mut self,
        host: u32,
        reports: sluice_seawall::wire::Reports<'_>,
        now_ns: u64,
    ) {
        if let Some(s) = &mut self.sender {
            s.on_feedback(host, reports, now_ns);
        }
    }

    /// Feedback due and packets released by `now`, into `plan`; forgets idle
    /// and looks for silent entities when their time comes.
    fn tick(
        &mut self,
        now: u64,
        peers: &HashMap<u32, SocketAddrV4>,
        seal: &mut FabricSeal,
        stats: &mut Stats,
        plan: &mut TxPlan,
    ) {
        if self.rx.next_deadline().is_some_and(|d| d <= now) {
            let mut buf = std::mem::take(&mut plan.scratch);
            let sent = self.rx.feedback(now, &mut buf, |host, msg| {
                let Some(addr) = peers.get(&host) else {
                    return;
                };
                if !seal.on() {
                    plan.push_own(Dest::Udp(*addr), CounterId::Peer(host), &[msg]);
                    stats.seawall_feedback_sent += 1;
                    return;
                }
                // Sealed like data: a host that forges a peer's underlay
                // address cannot slow that peer's senders down with false
                // congestion reports.
                let n = 8 + 4 * usize::from(msg[0] & 0x3f);
                match seal.seal(host, now, &msg[..n], &msg[n..], &mut plan.arena) {
                    Ok(head) => {
                        plan.outs.push(Out {
                            dest: Dest::Udp(*addr),
                            counter: CounterId::Peer(host),
                            head,
                            frame: 0,
                            body: (0, 0),
                        });
                        stats.seawall_feedback_sent += 1;
                    }
                    Err(_) => stats.drop(CounterId::Fabric, DropReason::UnknownKey),
                }
            });
            plan.scratch = buf;
            if let (Some(a), true) = (&mut self.audit, sent > 0) {
                stats.seawall_accused += a.end_period(now, self.rx.last_congested()) as u64;
            }
        }
        if let Some(s) = &mut self.sender {
            // Packets that waited for their sender's rate.
            s.release(now, |e, seq, tag, frame| {
                let Some(addr) = peers.get(&e.host) else {
                    stats.drop(CounterId::Port(e.port), DropReason::UnknownOutput);
                    return;
                };
                let (vni, chain_hop, clock) = from_seawall_tag(tag);
                let o = SeqOption {
                    port: e.port,
                    seq,
                    sent_us: (now / 1000) as u32,
                };
                let clock = clock.map(|c| c.wrapping_add(now as u32));
                let (g, n) = fabric_header(vni, chain_hop, clock, Some(o));
                if !seal.on() {
                    plan.push_own(Dest::Udp(*addr), CounterId::Peer(e.host), &[&g[..n], frame]);
                    return;
                }
                match seal.seal(e.host, now, &g[..n], frame, &mut plan.arena) {
                    Ok(head) => plan.outs.push(Out {
                        dest: Dest::Udp(*addr),
                        counter: CounterId::Peer(e.host),
                        head,
                        frame: 0,
                        body: (0, 0),
                    }),
                    Err(_) => stats.drop(CounterId::Port(e.port), DropReason::UnknownKey),
                }
            });
            // Silence is judged in periods: once per period is enough, and
            // keeps a walk over every entity off each loop iteration.
            if now >= self.silence_at {
                s.check_silence(now);
                self.silence_at = now + s.config().period_ns;
            }
            if now >= self.expire_at {
                s.expire(now);
            }
        }
        if now >= self.expire_at {
            let idle = self
                .sender
                .as_ref()
                .map_or(Config::default().idle_ns, |s| s.config().idle_ns);
            self.rx.expire(now, idle);
            if let Some(a) = &mut self.audit {
                a.tick(now);
            }
            self.expire_at = now + SEAWALL_EXPIRE_EVERY_NS;
        }
    }
}

impl Dataplane {
    /// Turns Seawall's rate control of this host's senders on (with `cfg`) or
    /// off. Feedback to other hosts' senders is sent either way.
    pub fn set_seawall(&mut self, cfg: Option<Config>) {
        if let Some(c) = &cfg {
            // This host's reports follow its own period too.
            self.seawall.rx = Receiver::new(c.period_ns, c.queue_delay_ns);
        }
        self.seawall.audit = match (&cfg, self.seawall.audit.take()) {
            (Some(_), Some(a)) => Some(a),
            (Some(c), None) => Some(Auditor::new(AuditConfig::for_senders(c))),
            (None, _) => None,
        };
        self.seawall.sender = cfg.map(|c| Box::new(Sender::new(c)));
        self.seawall.apply_weights(&self.topo.ports);
    }

    /// When the next packet waiting for its sender's rate may leave (None:
    /// nothing waits). Part of [`Dataplane::next_deadline`]; the I/O loop
    /// wakes for it without its usual slack, since the packet waits for it.
    pub fn seawall_release_at(&self) -> Option<u64> {
        self.seawall.release_at()
    }

    /// The hosts this host accuses of ignoring its feedback.
    pub fn accusations(&self) -> Vec<sluice_proto::Accusation> {
        self.seawall.accusations(self.now_ns)
    }

    /// Whether this host's senders are rate-controlled.
    pub fn seawall_on(&self) -> bool {
        self.seawall.sender.is_some()
    }

    /// Every rate-controlled (port, destination host) with its rate and counters.
    pub fn seawall_entities(
        &self,
    ) -> Vec<(sluice_seawall::Entity, u64, sluice_seawall::EntityStats)> {
        self.seawall
            .sender
            .as_ref()
            .map(|s| s.entities())
            .unwrap_or_default()
    }

    /// Sends the Seawall feedback that is due (one message per sending host
    /// with news) into `plan`, and forgets idle senders; the I/O loop calls it
    /// every iteration (it does nothing until [`Dataplane::next_deadline`]).
    pub fn seawall_tick(&mut self, plan: &mut TxPlan) {
        self.seawall.tick(
            self.now_ns,
            &self.topo.peers,
            &mut self.seal,
            &mut self.stats,
            plan,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_packet_keeps_its_tunnel_fields_and_chain_clock() {
        for (vni, ch, clock) in [
            (0x00ff_ffff, Some((0xffff, 0xff)), Some(u32::MAX)),
            (7, Some((4, 1)), Some(0)),
            (7, Some((4, 1)), None),
            (1, None, None),
        ] {
            assert_eq!(
                from_seawall_tag(seawall_tag(vni, ch, clock)),
                (vni, ch, clock)
            );
        }
    }
}
