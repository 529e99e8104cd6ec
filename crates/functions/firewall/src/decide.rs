//! The firewall's decisions on the shared batch skeleton ([`sluice_nf::batch`]).

use rustc_hash::FxBuildHasher;
use sluice_nf::batch::{BatchNf, Pass, Read, Record};
use sluice_nf::{Ctx, Emitted, Packet};
use sluice_state::{Key, Ops};
use sluice_wire::flow::Side;
use sluice_wire::icmp;
use sluice_wire::parse::{Fragment, PacketMeta, L4};
use sluice_wire::tcp::flags::{ACK, RST, SYN};

use crate::conntrack::{self, Conn, State};
use crate::rules::{Action, Layer, Scope};
use crate::{build_rst, Firewall, TABLE_CONN};

/// What gathering found about a packet.
#[derive(Clone, Copy)]
pub enum Plan {
    /// Passes without state (an allowed fragment or stateless ICMP).
    Skip,
    /// A packet of the flow of record `slot`.
    Flow {
        /// The flow's record.
        slot: u32,
        /// The packet travels in the canonical direction.
        forward: bool,
    },
    /// An ICMP error about the flow of record `slot`.
    Related {
        /// The flow's record.
        slot: u32,
    },
}

/// A conntrack record's bookkeeping for one batch.
pub struct Track {
    /// The flow's direction-invariant hash if a packet of the flow itself (not an
    /// ICMP error about it, which the data plane may steer elsewhere) uses the
    /// record: only then may a flow cache hold it.
    pub hash: Option<u32>,
    /// The state changed: re-arm the timer.
    pub rearm: bool,
    /// The write changes the connection (new, state or flags): it goes to the store
    /// before the batch leaves. Otherwise it only refreshes `last_seen` and may be
    /// deferred.
    pub through: bool,
}

/// The record under `key`, read owned when a packet of its own flow uses it.
fn record(pass: &mut Pass<Firewall>, key: Key, hash: Option<u32>) -> u32 {
    let how = hash.map_or(Read::Store, Read::Owned);
    let r = pass.record(key, || {
        let x = Track {
            hash,
            rearm: false,
            through: false,
        };
        (key, how, x)
    });
    let x = &mut pass.recs[r].x;
    x.hash = x.hash.or(hash);
    r
}

impl BatchNf for Firewall {
    type Id = Key;
    type Value = Conn;
    type Extra = Track;
    type Old = ();
    type Plan = Plan;
    type Hasher = FxBuildHasher;
    /// The write round trip also settles a flow cache, as it always did.
    const ALWAYS_WRITE: bool = true;

    fn pass(&mut self) -> &mut Pass<Self> {
        &mut self.pass
    }

    #[inline]
    fn plan(&mut self, p: &Packet, pass: &mut Pass<Self>) -> Result<Plan, &'static str> {
        self.c.packets += 1;
        if p.meta.is_tunnelled() {
            let scope = self.scope(&p.meta);
            self.c.tunnelled += 1;
            let allowed = p
                .meta
                .outer_flow(p.data())
                .is_some_and(|o| self.outer.allowed(&self.rules, &o, &scope));
            if !allowed {
                self.c.outer_denies += 1;
                return Err("outer_deny");
            }
        }
        self.classify(&p.meta, pass)
    }

    #[inline]
    fn unclassified(&mut self, _p: &Packet) -> Result<(), &'static str> {
        self.c.packets += 1;
        if self.allow_non_ip {
            self.c.non_ip_passed += 1;
            Ok(())
        } else {
            self.c.non_ip_denied += 1;
            Err("non_ip")
        }
    }

    #[inline]
    fn decide(
        &mut self,
        i: usize,
        p: &mut Packet,
        plan: Plan,
        pass: &mut Pass<Self>,
        ctx: &mut Ctx<'_>,
    ) {
        let now = p.ts_ns;
        match plan {
            Plan::Skip => {}
            Plan::Related { slot } => {
                if pass.recs[slot].cur.is_some_and(|c| self.alive(&c, now)) {
                    self.c.related += 1;
                } else {
                    self.c.no_state += 1;
                    p.drop_by(ctx.stage, "no_state");
                }
            }
            Plan::Flow { slot, forward } => {
                // By reference: a copy of the metadata per packet shows.
                let Err(reason) = self.decide_flow(&p.meta, now, &mut pass.recs[slot], forward)
                else {
                    return;
                };
                let m = p.meta;
                p.drop_by(ctx.stage, reason);
                if reason == "no_state"
                    && self.reject_with_rst
                    && m.l4 == L4::Tcp
                    && m.tcp_flags & RST == 0
                {
                    if let Some(frame) = build_rst(p.data(), &m) {
                        self.c.rsts_sent += 1;
                        ctx.emit.push(Emitted {
                            frame,
                            in_reply_to: i,
                        });
                    }
                }
            }
        }
    }

    fn write(&self, s: &Record<Conn, Track>, ops: &mut Ops) {
        let Some(c) = s.cur else { return };
        match s.x.hash {
            Some(h) if s.x.through => ops.put_value_owned(s.key, &c, h),
            // A `last_seen` refresh: losing it can only make the idle timer
            // fire early, and its handler re-reads and re-arms.
            Some(h) => ops.put_value_deferred(s.key, &c, h),
            None => ops.put_value(s.key, &c),
        };
        if s.x.rearm {
            ops.arm_timer(s.key, self.deadline(&c));
        }
    }
}

impl Firewall {
    /// What the rules see of `m` besides its 5-tuple.
    #[inline]
    fn scope(&self, m: &PacketMeta) -> Scope {
        Scope {
            layer: if m.is_tunnelled() {
                Layer::Inner
            } else {
                Layer::Plain
            },
            vlan: m.vlan_id(),
            vni: m.is_tunnelled().then_some(m.tunnel.vni),
        }
    }

    #[inline]
    fn classify(&mut self, m: &PacketMeta, pass: &mut Pass<Self>) -> Result<Plan, &'static str> {
        if m.fragment == Fragment::Later {
            if self.allow_fragments {
                self.c.fragments_passed += 1;
                return Ok(Plan::Skip);
            }
            self.c.fragments += 1;
            return Err("fragment");
        }
        if m.l4 == L4::Icmp {
            let v6 = m.is_v6();
            if let Some(e) = m.icmp_embedded.filter(|_| icmp::is_error(m.icmp_type, v6)) {
                let key = Key::flow(self.ns, TABLE_CONN, &e.flow.canonical().0, &[]);
                return Ok(Plan::Related {
                    slot: record(pass, key, None),
                });
            }
            if !icmp::is_echo(m.icmp_type, v6) {
                // Neither a conversation nor about one (e.g. neighbour discovery):
                // the rules decide every such packet.
                self.c.stateless_icmp += 1;
                return match self.rules.decide_in(&m.flow, &self.scope(m)).0 {
                    Action::Allow => Ok(Plan::Skip),
                    Action::Deny => {
                        self.c.rule_denies += 1;
                        Err("rule_deny")
                    }
                };
            }
        }
        let (canon, side) = m.flow.canonical();
        let key = Key::flow(self.ns, TABLE_CONN, &canon, &[]);
        Ok(Plan::Flow {
            slot: record(pass, key, Some(canon.directional_hash())),
            forward: side == Side::Forward,
        })
    }

    fn initial_state(m: &PacketMeta) -> State {
        match m.l4 {
            L4::Tcp => State::SynSent,
            L4::Udp => State::Udp,
            L4::Icmp => State::IcmpEcho,
            _ => State::Other,
        }
    }

    /// The verdict of a packet of a flow: `Ok` to pass, `Err(reason)` to drop.
    fn decide_flow(
        &mut self,
        m: &PacketMeta,
        now: u64,
        s: &mut Record<Conn, Track>,
        forward: bool,
    ) -> Result<(), &'static str> {
        let cur = s.cur.filter(|c| self.alive(c, now));
        let tcp = m.l4 == L4::Tcp;
        let pure_syn = tcp && m.tcp_flags & (SYN | ACK | RST) == SYN;
        match cur {
            // A fresh SYN on a closed connection's 4-tuple starts a new connection.
            Some(c) if !(pure_syn && matches!(c.state, State::TimeWait | State::Closed)) => {
                let from_init = forward ^ (c.flags & conntrack::INIT_REVERSE != 0);
                let mut n = c;
                if tcp {
                    (n.state, n.flags) = c.tcp_step(m.tcp_flags, from_init);
                }
                let changed = n.state != c.state || n.flags != c.flags;
                if changed || now.saturating_sub(c.last_seen_ns) >= self.refresh_ns {
                    n.last_seen_ns = now.max(c.last_seen_ns);
                    s.cur = Some(n);
                    s.dirty = true;
                    s.x.rearm |= n.state != c.state;
                    s.x.through |= changed;
                }
                Ok(())
            }
            _ => {
                let eligible = match m.l4 {
                    L4::Tcp => pure_syn,
                    L4::Icmp => {
                        matches!(m.icmp_type, icmp::v4::ECHO_REQUEST | icmp::v6::ECHO_REQUEST)
                    }
                    _ => true,
                };
                if !eligible {
                    self.c.no_state += 1;
                    return Err("no_state");
                }
                match self.rules.decide_in(&m.flow, &self.scope(m)).0 {
                    Action::Deny => {
                        self.c.rule_denies += 1;
                        Err("rule_deny")
                    }
                    Action::Allow => {
                        self.c.new_flows += 1;
                        s.cur = Some(Conn {
                            state: Self::initial_state(m),
                            flags: if forward { 0 } else { conntrack::INIT_REVERSE },
                            last_seen_ns: now,
                        });
                        s.dirty = true;
                        s.x.rearm = true;
                        s.x.through = true;
                        Ok(())
                    }
                }
            }
        }
    }
}
