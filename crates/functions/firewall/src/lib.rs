//! The stateful firewall (StatelessNF Algorithm 4, Table 4.1).
//!
//! Ordered allow/deny rules ([`rules`]) decide only *new* connections: the first
//! packet of a flow (a TCP SYN, any UDP datagram, an ICMP echo request). Allowed
//! connections get a conntrack record ([`conntrack::Conn`], 11 bytes) in the state
//! store under the flow's canonical (direction-invariant) key, so replies and later
//! packets pass on their state alone, whichever instance sees them.
//!
//! Per batch: one `execute` reads the records of every flow in the batch, a second
//! writes those whose state changed (or whose `last_seen` is older than the refresh
//! granularity) and arms their timers. Established packets therefore cost one read,
//! batched, and a write at most once per `refresh_ms` per flow.

pub mod conntrack;
mod decide;
pub mod rules;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_nf::batch::{self, Pass};
use sluice_nf::{Batch, Ctx, NetworkFunction, NfError};
use sluice_state::{Key, Namespace, OpId, Ops, StateStore};
use sluice_wire::build::{tcp_repr, write_frame, Transport};
use sluice_wire::icmp;
use sluice_wire::parse::{Fragment, PacketMeta, L4};
use sluice_wire::tcp::flags::{ACK, RST};
use sluice_wire::FlowKey;

pub use conntrack::{Conn, State, CONN_BYTES};
pub use rules::{Action, Layer, RuleError, RuleSet, Scope};

/// Table byte of conntrack records.
const TABLE_CONN: u8 = 1;
/// Timers taken per `take_expired` call.
const TIMER_BATCH: usize = 1024;

/// Per-state timeouts, in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Handshake in progress (SYN_SENT, SYN_RECEIVED). Default 30.
    pub tcp_syn: u64,
    /// ESTABLISHED. Default 3600.
    pub tcp_established: u64,
    /// Half-closed or both FINs sent (FIN_WAIT, LAST_ACK). Default 120.
    pub tcp_closing: u64,
    /// TIME_WAIT. Default 120.
    pub tcp_time_wait: u64,
    /// After a RST (CLOSED). Default 10.
    pub tcp_closed: u64,
    /// UDP idle timeout. Default 30.
    pub udp: u64,
    /// ICMP echo idle timeout. Default 30.
    pub icmp: u64,
    /// Other IP protocols' idle timeout. Default 60.
    pub other: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_syn: 30,
            tcp_established: 3600,
            tcp_closing: 120,
            tcp_time_wait: 120,
            tcp_closed: 10,
            udp: 30,
            icmp: 30,
            other: 60,
        }
    }
}

/// Firewall configuration (YAML under `type: firewall`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Rule file, relative to the configuration's directory. Exactly one of
    /// `rules_file` and `rules` must be given.
    pub rules_file: Option<PathBuf>,
    /// Inline rules in the same syntax (errors name the file `<inline>`).
    pub rules: Option<String>,
    /// Answer a TCP packet that has no state (and is not a SYN or RST) with a RST
    /// instead of dropping it silently. Default false.
    pub reject_with_rst: bool,
    /// Pass non-first IP fragments without any check (they carry no ports, so
    /// they can be neither matched against rules nor tracked). Default false: they
    /// are dropped with reason `fragment`.
    pub allow_fragments: bool,
    /// What happens to a frame the firewall cannot classify (not IP: ARP, LLDP,
    /// STP, PPP control, an unclassified MPLS payload, ...): `allow` or `deny`.
    /// Default: the rule set's `default` policy, so a `default deny` firewall
    /// denies what it cannot read (reason `non_ip`).
    pub non_ip: Option<NonIpPolicy>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// A record's `last_seen` is rewritten at most once per this many milliseconds
    /// per flow, so idle timeouts are accurate to within it. Default 1000.
    pub refresh_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rules_file: None,
            rules: None,
            reject_with_rst: false,
            allow_fragments: false,
            non_ip: None,
            timeouts: Timeouts::default(),
            refresh_ms: 1000,
        }
    }
}

/// The firewall's `non_ip` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonIpPolicy {
    /// Pass frames that are not IP.
    Allow,
    /// Drop them (reason `non_ip`).
    Deny,
}

/// A configuration the firewall cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A rule is malformed.
    #[error(transparent)]
    Rules(#[from] RuleError),
    /// The rule file cannot be read.
    #[error("{path}: cannot read rule file: {source}")]
    Io {
        /// The path as resolved.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Any other problem.
    #[error("firewall config: {0}")]
    Invalid(String),
}

/// Builds a firewall; `base_dir` resolves a relative `rules_file`.
pub fn build(config: &Config, ns: Namespace, base_dir: &Path) -> Result<Firewall, ConfigError> {
    let rules = match (&config.rules_file, &config.rules) {
        (Some(f), None) => {
            let path = base_dir.join(f);
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
                path: path.display().to_string(),
                source,
            })?;
            RuleSet::parse(&text, &f.display().to_string())?
        }
        (None, Some(text)) => RuleSet::parse(text, "<inline>")?,
        _ => {
            return Err(ConfigError::Invalid(
                "exactly one of `rules_file` and `rules` is required".into(),
            ))
        }
    };
    Ok(Firewall::new(rules, config, ns))
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    packets: u64,
    new_flows: u64,
    rule_denies: u64,
    no_state: u64,
    related: u64,
    fragments: u64,
    fragments_passed: u64,
    stateless_icmp: u64,
    expired: u64,
    rsts_sent: u64,
    decode_errors: u64,
    non_ip_passed: u64,
    non_ip_denied: u64,
    tunnelled: u64,
    outer_denies: u64,
}

/// Recent decisions on tunnels' outer headers, direct-mapped.
///
/// The rules are fixed for a firewall's life, so a decision is a pure function
/// of the outer 5-tuple, VLAN and VNI: caching it is exact, and it spares each
/// tunnelled packet two rule-set lookups (a tunnel's packets share a handful
/// of outer tuples). Sized once; nothing is allocated per packet.
struct OuterCache {
    slots: Vec<Option<OuterDecision>>,
}

/// An outer 5-tuple, its VLAN and VNI, and whether the rules allow it.
type OuterDecision = (FlowKey, Option<u16>, Option<u32>, bool);

impl OuterCache {
    const SLOTS: usize = 1024;

    fn new() -> OuterCache {
        OuterCache {
            slots: vec![None; Self::SLOTS],
        }
    }

    #[inline]
    fn allowed(&mut self, rules: &RuleSet, outer: &FlowKey, scope: &Scope) -> bool {
        let h = outer.directional_hash()
            ^ scope.vni.unwrap_or(0).rotate_left(16)
            ^ scope.vlan.map_or(0, u32::from);
        let slot = &mut self.slots[h as usize % Self::SLOTS];
        match slot {
            Some((k, vlan, vni, a)) if k == outer && *vlan == scope.vlan && *vni == scope.vni => *a,
            _ => {
                let a = rules.outer_allowed(outer, scope);
                *slot = Some((*outer, scope.vlan, scope.vni, a));
                a
            }
        }
    }
}

/// The firewall. See the crate documentation.
pub struct Firewall {
    ns: Namespace,
    rules: RuleSet,
    reject_with_rst: bool,
    allow_fragments: bool,
    /// Pass frames that are not IP.
    allow_non_ip: bool,
    /// Decisions on tunnels' outer headers.
    outer: OuterCache,
    /// Timeout per [`State`] discriminant, in ns.
    timeout_ns: [u64; 11],
    refresh_ns: u64,
    pass: Pass<Firewall>,
    ops2: Ops,
    keys: Vec<Key>,
    gets: Vec<OpId>,
    deletes: Vec<OpId>,
    c: Counters,
}

impl Firewall {
    /// A firewall with compiled `rules` and the rest of `config`.
    pub fn new(rules: RuleSet, config: &Config, ns: Namespace) -> Firewall {
        let t = &config.timeouts;
        let s = |x: u64| x.saturating_mul(1_000_000_000);
        let mut timeout_ns = [0u64; 11];
        for (st, v) in [
            (State::SynSent, t.tcp_syn),
            (State::SynReceived, t.tcp_syn),
            (State::Established, t.tcp_established),
            (State::FinWait, t.tcp_closing),
            (State::LastAck, t.tcp_closing),
            (State::TimeWait, t.tcp_time_wait),
            (State::Closed, t.tcp_closed),
            (State::Udp, t.udp),
            (State::IcmpEcho, t.icmp),
            (State::Other, t.other),
        ] {
            timeout_ns[st as usize] = s(v);
        }
        let allow_non_ip = match config.non_ip {
            Some(NonIpPolicy::Allow) => true,
            Some(NonIpPolicy::Deny) => false,
            None => rules.default_action() == Action::Allow,
        };
        Firewall {
            ns,
            rules,
            reject_with_rst: config.reject_with_rst,
            allow_fragments: config.allow_fragments,
            allow_non_ip,
            outer: OuterCache::new(),
            timeout_ns,
            refresh_ns: config.refresh_ms.saturating_mul(1_000_000),
            pass: Pass::default(),
            ops2: Ops::new(),
            keys: Vec::new(),
            gets: Vec::new(),
            deletes: Vec::new(),
            c: Counters::default(),
        }
    }

    /// The rule set.
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    #[inline]
    fn deadline(&self, c: &Conn) -> u64 {
        c.last_seen_ns
            .saturating_add(self.timeout_ns[c.state as usize])
    }

    /// A record is live until `last_seen + timeout`; past that it counts as absent
    /// even if its timer has not fired, so behaviour never depends on timer timing.
    #[inline]
    fn alive(&self, c: &Conn, now: u64) -> bool {
        now < self.deadline(c)
    }
}

/// Builds the RST answering a TCP segment (RFC 793 §3.4 reset generation): if the
/// segment has ACK, the RST's sequence number is that ACK; otherwise the RST has
/// sequence 0 and acknowledges the segment. Addresses, ports and MACs are swapped.
pub fn build_rst(frame: &[u8], m: &PacketMeta) -> Option<Vec<u8>> {
    if m.l4 != L4::Tcp || frame.len() < 12 || m.is_tunnelled() {
        return None;
    }
    // Only after plain Ethernet or one tag: a reset under PPPoE or MPLS would
    // need those headers rebuilt, and silence is the safe answer there.
    let tagged = m.vlan_tci.is_some();
    if m.l3_offset != if tagged { 18 } else { 14 } {
        return None;
    }
    let (seq, ack, flags) = if m.tcp_flags & ACK != 0 {
        (m.tcp_ack, 0, RST)
    } else {
        (0, m.tcp_seq.wrapping_add(m.tcp_seg_len()), RST | ACK)
    };
    let mut repr = tcp_repr(m.flow.dst_port, m.flow.src_port, seq, ack, flags);
    repr.window = 0;
    let mut buf = vec![0u8; 14 + 40 + 20];
    let n = write_frame(&mut buf, m.flow.dst, m.flow.src, Transport::Tcp(repr), &[]).ok()?;
    buf.truncate(n);
    buf[0..6].copy_from_slice(&frame[6..12]);
    buf[6..12].copy_from_slice(&frame[0..6]);
    if m.vlan_tci.is_some() && frame.len() >= 16 {
        buf.splice(12..12, frame[12..16].iter().copied());
    }
    Some(buf)
}

impl NetworkFunction for Firewall {
    fn kind(&self) -> &'static str {
        "firewall"
    }

    fn namespace(&self) -> Namespace {
        self.ns
    }

    /// The connection record of every packet that `classify` would look up by
    /// its own flow (not ICMP errors, which read another flow's record).
    fn prefetch(&self, batch: &Batch, ops: &mut Ops) {
        for p in batch.pkts.iter().filter(|p| p.is_live() && p.meta.is_ip()) {
            let m = &p.meta;
            if m.fragment == Fragment::Later
                || (m.l4 == L4::Icmp && !icmp::is_echo(m.icmp_type, m.is_v6()))
            {
                continue;
            }
            let (canon, _) = m.flow.canonical();
            let h = canon.directional_hash();
            if ops.first_listing(h, self.ns, TABLE_CONN) {
                ops.get_owned(Key::flow(self.ns, TABLE_CONN, &canon, &[]), h);
            }
        }
    }

    fn process(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        batch::split(self, |fw, pass| {
            pass.gather(fw, batch, ctx);
            if pass.recs.is_empty() {
                return Ok(());
            }
            fw.c.decode_errors += pass.read(fw, store, ctx.now_ns)?;
            pass.decide(fw, batch, ctx);
            pass.write(fw, store)
        })
    }

    fn on_timers(&mut self, ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        let now = ctx.now_ns;
        loop {
            self.keys.clear();
            store.take_expired(self.ns, now, TIMER_BATCH, &mut self.keys)?;
            if self.keys.is_empty() {
                return Ok(());
            }
            self.pass.ops.clear();
            self.gets.clear();
            for &k in &self.keys {
                self.gets.push(self.pass.ops.get(k));
            }
            store.execute(&mut self.pass.ops)?;
            self.ops2.clear();
            self.deletes.clear();
            for (&k, &get) in self.keys.iter().zip(&self.gets) {
                match self.pass.ops.decode::<Conn>(get) {
                    Ok(None) => {}
                    Ok(Some(c)) if self.alive(&c, now) => {
                        self.ops2.arm_timer(k, self.deadline(&c));
                    }
                    Ok(Some(_)) => {
                        // Only if unchanged: a packet may have just revived the flow.
                        let old = self.pass.ops.value(get).unwrap_or_default();
                        self.deletes
                            .push(self.ops2.compare_and_set_raw(k, Some(old), None));
                    }
                    Err(_) => {
                        self.c.decode_errors += 1;
                        self.ops2.delete(k);
                    }
                }
            }
            store.execute(&mut self.ops2)?;
            self.c.expired += self
                .deletes
                .iter()
                .filter(|&&d| self.ops2.swapped(d))
                .count() as u64;
            if self.keys.len() < TIMER_BATCH {
                return Ok(());
            }
        }
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        let c = &self.c;
        out.extend_from_slice(&[
            ("packets", c.packets),
            ("new_flows", c.new_flows),
            ("rule_denies", c.rule_denies),
            ("no_state", c.no_state),
            ("related", c.related),
            ("fragments_dropped", c.fragments),
            ("fragments_passed", c.fragments_passed),
            ("stateless_icmp", c.stateless_icmp),
            ("expired", c.expired),
            ("rsts_sent", c.rsts_sent),
            ("decode_errors", c.decode_errors),
            ("non_ip_passed", c.non_ip_passed),
            ("non_ip_denied", c.non_ip_denied),
            ("tunnelled", c.tunnelled),
            ("outer_denies", c.outer_denies),
        ]);
    }
}

#[cfg(test)]
mod tests;
