//! The rule language and its matcher.
//!
//! One rule per line, `#` starts a comment:
//!
//! ```text
//! allow tcp from 10.0.0.0/8 to 192.0.2.0/24 port 80,443
//! deny udp from any to any port 1000-2000
//! allow icmp
//! allow any from 2001:db8::/32
//! default deny
//! ```
//!
//! `ACTION [outer|inner] PROTO [from ADDRS] [to ADDRS] [sport PORTS]
//! [port|dport PORTS] [vlan IDS] [vni IDS]`, where ACTION is `allow` (or `accept`)
//! or `deny` (or `drop`); PROTO is `tcp`, `udp`, `icmp`, `icmpv6`, `gre` or `any`;
//! ADDRS is `any` or a comma-separated list of addresses and CIDR prefixes of
//! either family; PORTS and IDS are comma-separated lists of numbers and inclusive
//! ranges `lo-hi`. Clauses may come in any order, each at most once. A rule with
//! port clauses matches only TCP and UDP packets. The first matching rule
//! decides; `default allow|deny` sets the policy when none matches (deny if
//! absent).
//!
//! Layers. A tunnelled packet (VXLAN, Geneve, GRE, IP-in-IP, ...) is decided
//! twice: its innermost packet, statefully, as any packet, and its outer headers,
//! on every packet, in either direction; both must be allowed. An unqualified
//! rule applies to every layer; `outer` rules only to outer headers, `inner`
//! rules only to the inside of a tunnel. So `allow outer udp port 4789` with
//! `allow tcp to 10.0.0.5 port 80` and `default deny` admits VXLAN carrying web
//! traffic to 10.0.0.5 and nothing else, and no inner packet can smuggle itself
//! past the outer rules or the reverse.
//!
//! `vlan` matches the outermost 802.1Q/802.1ad tag's VLAN id (an untagged packet
//! never matches), `vni` the tunnel's network identifier (VXLAN or Geneve VNI,
//! GRE key's VSID, ERSPAN session; a packet outside a tunnel never matches).

use sluice_wire::{FlowKey, IpAddr};

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Let the connection through (and track it).
    Allow,
    /// Drop it.
    Deny,
}

/// A rule-file problem at a given line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct RuleError {
    /// The file name (or `<inline>`).
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub msg: RuleSyntax,
}

/// What is wrong with a rule line. The messages are what operators read when a
/// rule file is rejected, so each names the offending token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleSyntax {
    /// A second `default` line.
    #[error("duplicate default policy (first on line {first})")]
    DuplicateDefault {
        /// The line of the first `default`.
        first: usize,
    },
    /// `default` followed by something other than an action.
    #[error("unknown default policy \"{0}\"")]
    UnknownDefault(String),
    /// `default` alone.
    #[error("\"default\" needs allow or deny")]
    DefaultNeedsAction,
    /// Text after `default allow|deny`.
    #[error("unexpected \"{0}\" after default policy")]
    AfterDefault(String),
    /// The first word is not an action.
    #[error("unknown action \"{0}\"")]
    UnknownAction(String),
    /// An action with nothing after it.
    #[error("missing protocol after action")]
    MissingProtocol,
    /// The protocol is not one the language names.
    #[error("unknown protocol \"{0}\"")]
    UnknownProtocol(String),
    /// A word where a clause keyword (`from`, `to`, `sport`, `port`) belongs.
    #[error("unexpected \"{0}\"")]
    Unexpected(String),
    /// A clause given twice.
    #[error("duplicate \"{0}\" clause")]
    DuplicateClause(String),
    /// A clause keyword at the end of the line.
    #[error("missing value after \"{0}\"")]
    MissingValue(String),
    /// Port clauses on a protocol without ports.
    #[error("ports given for protocol \"{0}\"")]
    PortsForProtocol(String),
    /// `a,,b` in an address list.
    #[error("empty item in address list \"{0}\"")]
    EmptyAddressItem(String),
    /// A prefix length that is not a number.
    #[error("invalid prefix length in \"{0}\"")]
    BadPrefix(String),
    /// A prefix length longer than the address family allows.
    #[error("prefix length {len} out of range in \"{item}\"")]
    PrefixOutOfRange {
        /// The prefix length.
        len: u32,
        /// The list item it came with.
        item: String,
    },
    /// Not an IP address.
    #[error("invalid address \"{0}\"")]
    BadAddress(String),
    /// `a,,b` in a port list.
    #[error("empty item in port list \"{0}\"")]
    EmptyPortItem(String),
    /// Not a port number.
    #[error("invalid port \"{0}\"")]
    BadPort(String),
    /// `hi-lo`.
    #[error("port range \"{0}\" is reversed")]
    ReversedRange(String),
    /// `hi-lo` in a VLAN or VNI list.
    #[error("range \"{0}\" is reversed")]
    ReversedIdRange(String),
    /// Not a VLAN id (0-4095).
    #[error("invalid VLAN id \"{0}\" (0-4095)")]
    BadVlan(String),
    /// Not a tunnel network identifier (0-16777215).
    #[error("invalid VNI \"{0}\" (0-16777215)")]
    BadVni(String),
}

#[derive(Debug, Clone, Default)]
struct Prefixes {
    any: bool,
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl Prefixes {
    #[inline]
    fn matches(&self, a: &IpAddr) -> bool {
        if self.any {
            return true;
        }
        match a {
            IpAddr::V4(b) => {
                let x = u32::from_be_bytes(*b);
                self.v4.iter().any(|&(net, mask)| x & mask == net)
            }
            IpAddr::V6(b) => {
                let x = u128::from_be_bytes(*b);
                self.v6.iter().any(|&(net, mask)| x & mask == net)
            }
        }
    }
}

/// Which layers of a packet a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layers {
    /// Every layer.
    Any,
    /// Only a tunnel's outer headers.
    Outer,
    /// Only the inside of a tunnel.
    Inner,
}

/// The layer of a packet being decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layer {
    /// A packet outside any tunnel.
    #[default]
    Plain,
    /// The innermost packet of a tunnel.
    Inner,
    /// A tunnel's outer headers.
    Outer,
}

/// What a rule can see of a packet besides its 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scope {
    /// The layer being decided.
    pub layer: Layer,
    /// The outermost tag's VLAN id.
    pub vlan: Option<u16>,
    /// The tunnel's network identifier.
    pub vni: Option<u32>,
}

#[derive(Debug, Clone)]
struct Rule {
    action: Action,
    layers: Layers,
    vlans: Vec<(u32, u32)>,
    vnis: Vec<(u32, u32)>,
    /// IP protocol number, 0 for any.
    proto: u8,
    src: Prefixes,
    dst: Prefixes,
    sports: Vec<(u16, u16)>,
    dports: Vec<(u16, u16)>,
    line: u32,
}

#[inline]
fn ports_match(ranges: &[(u16, u16)], p: u16) -> bool {
    ranges.is_empty() || ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi)
}

#[inline]
fn ids_match(ranges: &[(u32, u32)], id: Option<u32>) -> bool {
    ranges.is_empty() || id.is_some_and(|v| ranges.iter().any(|&(lo, hi)| lo <= v && v <= hi))
}

impl Rule {
    #[inline]
    fn matches(&self, f: &FlowKey, scope: &Scope) -> bool {
        if self.proto != 0 && self.proto != f.proto {
            return false;
        }
        match (self.layers, scope.layer) {
            (Layers::Any, _) | (Layers::Outer, Layer::Outer) | (Layers::Inner, Layer::Inner) => {}
            _ => return false,
        }
        if !ids_match(&self.vlans, scope.vlan.map(u32::from)) || !ids_match(&self.vnis, scope.vni) {
            return false;
        }
        if !(self.sports.is_empty() && self.dports.is_empty()) {
            if !matches!(f.proto, 6 | 17) {
                return false;
            }
            if !ports_match(&self.sports, f.src_port) || !ports_match(&self.dports, f.dst_port) {
                return false;
            }
        }
        self.src.matches(&f.src) && self.dst.matches(&f.dst)
    }
}

/// Candidate rules per (protocol class, destination-port interval), so a new flow
/// tests only the rules that could match its protocol and port, still in rule order.
#[derive(Debug, Clone, Default)]
struct Index {
    /// Interval starts (ascending, first is 0): interval `k` is
    /// `bounds[k]..bounds[k+1]`.
    bounds: Vec<u32>,
    /// Per class (TCP, UDP): CSR offsets into `entries`, one more than intervals.
    offsets: [Vec<u32>; 2],
    /// Rules of other protocols (no port clause can match them).
    other: Vec<u32>,
    entries: Vec<u32>,
}

/// Above this many index entries the matcher falls back to the linear scan.
const MAX_INDEX_ENTRIES: usize = 4 << 20;

impl Index {
    fn build(rules: &[Rule]) -> Option<Index> {
        let mut bounds = vec![0u32];
        for r in rules {
            for &(lo, hi) in &r.dports {
                bounds.push(lo as u32);
                bounds.push(hi as u32 + 1);
            }
        }
        bounds.sort_unstable();
        bounds.dedup();
        bounds.retain(|&b| b <= u16::MAX as u32);
        let mut ix = Index {
            bounds,
            ..Default::default()
        };
        for (c, proto) in [(0usize, 6u8), (1, 17)] {
            ix.offsets[c].push(ix.entries.len() as u32);
            for k in 0..ix.bounds.len() {
                let lo = ix.bounds[k] as u16;
                for (i, r) in rules.iter().enumerate() {
                    let proto_ok = r.proto == 0 || r.proto == proto;
                    // Intervals never straddle a range edge: testing the start suffices.
                    if proto_ok && ports_match(&r.dports, lo) {
                        ix.entries.push(i as u32);
                    }
                }
                if ix.entries.len() > MAX_INDEX_ENTRIES {
                    return None;
                }
                ix.offsets[c].push(ix.entries.len() as u32);
            }
        }
        ix.other = rules
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.sports.is_empty() && r.dports.is_empty() && !matches!(r.proto, 6 | 17)
            })
            .map(|(i, _)| i as u32)
            .collect();
        Some(ix)
    }

    #[inline]
    fn candidates(&self, f: &FlowKey) -> &[u32] {
        let c = match f.proto {
            6 => 0,
            17 => 1,
            _ => return &self.other,
        };
        let k = self.bounds.partition_point(|&b| b <= f.dst_port as u32) - 1;
        let o = &self.offsets[c];
        &self.entries[o[k] as usize..o[k + 1] as usize]
    }
}

/// A compiled rule set.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
    default: Action,
    index: Option<Index>,
}

impl RuleSet {
    /// Parses rule text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<RuleSet, RuleError> {
        let mut rs = RuleSet {
            rules: Vec::new(),
            default: Action::Deny,
            index: None,
        };
        let mut default_line = None;
        for (i, raw) in text.lines().enumerate() {
            let err = |msg: RuleSyntax| RuleError {
                file: file.to_string(),
                line: i + 1,
                msg,
            };
            let line = raw.split('#').next().unwrap_or("");
            let toks = tokens(line);
            if toks.is_empty() {
                continue;
            }
            if toks[0] == "default" {
                if default_line.is_some() {
                    return Err(err(RuleSyntax::DuplicateDefault {
                        first: default_line.unwrap_or(0),
                    }));
                }
                rs.default = match toks.get(1).map(String::as_str) {
                    Some(a) => {
                        parse_action(a).ok_or_else(|| err(RuleSyntax::UnknownDefault(a.into())))?
                    }
                    None => return Err(err(RuleSyntax::DefaultNeedsAction)),
                };
                if let Some(extra) = toks.get(2) {
                    return Err(err(RuleSyntax::AfterDefault(extra.clone())));
                }
                default_line = Some(i + 1);
                continue;
            }
            let rule = parse_rule(&toks, i + 1).map_err(err)?;
            rs.rules.push(rule);
        }
        rs.index = Index::build(&rs.rules);
        Ok(rs)
    }

    /// Number of rules (without the default policy).
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True if there are no rules (only the default policy).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The default policy.
    pub fn default_action(&self) -> Action {
        self.default
    }

    /// Decides a new flow: the action and the line of the rule that matched
    /// (`None` when the default policy applied).
    ///
    /// Only the first packet of a connection gets here. The index narrows the
    /// rules to those of the flow's protocol and destination-port interval; they are
    /// tested in order with early exit, so the first match still wins.
    #[inline]
    pub fn decide(&self, f: &FlowKey) -> (Action, Option<u32>) {
        self.decide_in(f, &Scope::default())
    }

    /// [`RuleSet::decide`] for a packet of `scope` (its layer, VLAN and tunnel).
    #[inline]
    pub fn decide_in(&self, f: &FlowKey, scope: &Scope) -> (Action, Option<u32>) {
        match &self.index {
            Some(ix) => {
                for &i in ix.candidates(f) {
                    let r = &self.rules[i as usize];
                    if r.matches(f, scope) {
                        return (r.action, Some(r.line));
                    }
                }
                (self.default, None)
            }
            None => self.decide_linear_in(f, scope),
        }
    }

    /// [`RuleSet::decide`] by a plain scan of every rule (the reference the index
    /// is tested against, and the fallback for pathological rule sets).
    pub fn decide_linear(&self, f: &FlowKey) -> (Action, Option<u32>) {
        self.decide_linear_in(f, &Scope::default())
    }

    /// [`RuleSet::decide_linear`] for a packet of `scope`.
    pub fn decide_linear_in(&self, f: &FlowKey, scope: &Scope) -> (Action, Option<u32>) {
        for r in &self.rules {
            if r.matches(f, scope) {
                return (r.action, Some(r.line));
            }
        }
        (self.default, None)
    }

    /// True if a tunnel's outer headers `outer` are allowed, in either direction
    /// (the outer flow of a tunnel is not tracked, so its replies are matched by
    /// the same rules).
    pub fn outer_allowed(&self, outer: &FlowKey, scope: &Scope) -> bool {
        let scope = Scope {
            layer: Layer::Outer,
            ..*scope
        };
        self.decide_in(outer, &scope).0 == Action::Allow
            || self.decide_in(&outer.reverse(), &scope).0 == Action::Allow
    }
}

/// Splits on whitespace and glues comma-separated lists written with spaces
/// (`80, 443`) back into one token.
fn tokens(line: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in line.split_whitespace() {
        match out.last_mut() {
            Some(last) if last.ends_with(',') || t.starts_with(',') => last.push_str(t),
            _ => out.push(t.to_string()),
        }
    }
    out
}

fn parse_action(s: &str) -> Option<Action> {
    match s {
        "allow" | "accept" => Some(Action::Allow),
        "deny" | "drop" => Some(Action::Deny),
        _ => None,
    }
}

fn parse_rule(toks: &[String], line: usize) -> Result<Rule, RuleSyntax> {
    let action =
        parse_action(&toks[0]).ok_or_else(|| RuleSyntax::UnknownAction(toks[0].clone()))?;
    let (layers, toks) = match toks.get(1).map(String::as_str) {
        Some("outer") => (Layers::Outer, &toks[1..]),
        Some("inner") => (Layers::Inner, &toks[1..]),
        _ => (Layers::Any, toks),
    };
    let proto_tok = toks.get(1).ok_or(RuleSyntax::MissingProtocol)?;
    let proto = match proto_tok.as_str() {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" => 58,
        "gre" => 47,
        "any" | "all" | "ip" => 0,
        p => return Err(RuleSyntax::UnknownProtocol(p.into())),
    };
    let mut rule = Rule {
        action,
        layers,
        vlans: Vec::new(),
        vnis: Vec::new(),
        proto,
        src: Prefixes {
            any: true,
            ..Default::default()
        },
        dst: Prefixes {
            any: true,
            ..Default::default()
        },
        sports: Vec::new(),
        dports: Vec::new(),
        line: line as u32,
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut i = 2;
    while i < toks.len() {
        let kw = toks[i].as_str();
        let canon = match kw {
            "from" | "to" | "sport" | "vlan" | "vni" => kw,
            "port" | "dport" => "dport",
            _ => return Err(RuleSyntax::Unexpected(kw.into())),
        };
        if seen.contains(&canon) {
            return Err(RuleSyntax::DuplicateClause(kw.into()));
        }
        seen.push(canon);
        let arg = toks
            .get(i + 1)
            .ok_or_else(|| RuleSyntax::MissingValue(kw.into()))?;
        match canon {
            "from" => rule.src = parse_addrs(arg)?,
            "to" => rule.dst = parse_addrs(arg)?,
            "sport" => rule.sports = parse_ports(arg)?,
            "vlan" => rule.vlans = parse_ids(arg, 4095, RuleSyntax::BadVlan)?,
            "vni" => rule.vnis = parse_ids(arg, 0x00ff_ffff, RuleSyntax::BadVni)?,
            _ => rule.dports = parse_ports(arg)?,
        }
        i += 2;
    }
    if (!rule.sports.is_empty() || !rule.dports.is_empty()) && !matches!(proto, 0 | 6 | 17) {
        return Err(RuleSyntax::PortsForProtocol(proto_tok.clone()));
    }
    Ok(rule)
}

fn parse_addrs(s: &str) -> Result<Prefixes, RuleSyntax> {
    if s == "any" {
        return Ok(Prefixes {
            any: true,
            ..Default::default()
        });
    }
    let mut p = Prefixes::default();
    for item in s.split(',') {
        if item.is_empty() {
            return Err(RuleSyntax::EmptyAddressItem(s.into()));
        }
        let (a, len) = match item.split_once('/') {
            Some((a, l)) => (
                a,
                Some(
                    l.parse::<u32>()
                        .map_err(|_| RuleSyntax::BadPrefix(item.into()))?,
                ),
            ),
            None => (item, None),
        };
        let addr: std::net::IpAddr = a.parse().map_err(|_| RuleSyntax::BadAddress(item.into()))?;
        match addr {
            std::net::IpAddr::V4(v) => {
                let len = len.unwrap_or(32);
                if len > 32 {
                    return Err(RuleSyntax::PrefixOutOfRange {
                        len,
                        item: item.into(),
                    });
                }
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                p.v4.push((u32::from(v) & mask, mask));
            }
            std::net::IpAddr::V6(v) => {
                let len = len.unwrap_or(128);
                if len > 128 {
                    return Err(RuleSyntax::PrefixOutOfRange {
                        len,
                        item: item.into(),
                    });
                }
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - len)
                };
                p.v6.push((u128::from(v) & mask, mask));
            }
        }
    }
    Ok(p)
}

/// A list of identifiers up to `max` (VLAN ids, VNIs) and ranges of them.
fn parse_ids(
    s: &str,
    max: u32,
    bad: fn(String) -> RuleSyntax,
) -> Result<Vec<(u32, u32)>, RuleSyntax> {
    let id = |t: &str| -> Result<u32, RuleSyntax> {
        t.parse::<u32>()
            .ok()
            .filter(|&v| v <= max)
            .ok_or_else(|| bad(t.into()))
    };
    let mut out = Vec::new();
    for item in s.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (id(a)?, id(b)?),
            None => (id(item)?, id(item)?),
        };
        if lo > hi {
            return Err(RuleSyntax::ReversedIdRange(item.into()));
        }
        out.push((lo, hi));
    }
    Ok(out)
}

fn parse_ports(s: &str) -> Result<Vec<(u16, u16)>, RuleSyntax> {
    if s == "any" {
        return Ok(Vec::new());
    }
    let port = |t: &str| -> Result<u16, RuleSyntax> {
        t.parse::<u16>().map_err(|_| RuleSyntax::BadPort(t.into()))
    };
    let mut out = Vec::new();
    for item in s.split(',') {
        if item.is_empty() {
            return Err(RuleSyntax::EmptyPortItem(s.into()));
        }
        let r = match item.split_once('-') {
            Some((a, b)) => {
                let (lo, hi) = (port(a)?, port(b)?);
                if lo > hi {
                    return Err(RuleSyntax::ReversedRange(item.into()));
                }
                (lo, hi)
            }
            None => {
                let p = port(item)?;
                (p, p)
            }
        };
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fk(src: &str, dst: &str, sp: u16, dp: u16, proto: u8) -> FlowKey {
        FlowKey {
            zone: 0,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            src_port: sp,
            dst_port: dp,
            proto,
        }
    }

    #[test]
    fn first_match_wins_and_default_applies() {
        let rs = RuleSet::parse(
            "# web\nallow tcp from 10.0.0.0/8 to 192.0.2.0/24 port 80, 443\n\
             deny udp from any to any port 1000-2000\nallow udp sport 53\n\
             allow any from 2001:db8::/32\ndefault deny\n",
            "t.fw",
        )
        .unwrap();
        assert_eq!(rs.len(), 4);
        let d = |f| rs.decide(&f);
        assert_eq!(
            d(fk("10.1.2.3", "192.0.2.7", 5000, 443, 6)),
            (Action::Allow, Some(2))
        );
        assert_eq!(d(fk("10.1.2.3", "192.0.2.7", 5000, 22, 6)).0, Action::Deny);
        assert_eq!(d(fk("11.1.2.3", "192.0.2.7", 5000, 80, 6)).0, Action::Deny);
        assert_eq!(
            d(fk("1.1.1.1", "2.2.2.2", 53, 1500, 17)),
            (Action::Deny, Some(3))
        );
        assert_eq!(
            d(fk("1.1.1.1", "2.2.2.2", 53, 999, 17)),
            (Action::Allow, Some(4))
        );
        assert_eq!(
            d(fk("2001:db8::1", "2001:db9::1", 0, 0, 58)),
            (Action::Allow, Some(5))
        );
        assert_eq!(
            d(fk("2001:db9::1", "2001:db8::1", 0, 0, 58)),
            (Action::Deny, None)
        );
    }

    #[test]
    fn errors_name_file_line_and_problem() {
        use RuleSyntax as S;
        let s = |x: &str| x.to_string();
        let cases = [
            (
                "allow tcp\n\n# c\nallow tcpp from any",
                4,
                S::UnknownProtocol(s("tcpp")),
                "rules.fw:4: unknown protocol \"tcpp\"",
            ),
            (
                "permit tcp",
                1,
                S::UnknownAction(s("permit")),
                "rules.fw:1: unknown action \"permit\"",
            ),
            (
                "allow",
                1,
                S::MissingProtocol,
                "rules.fw:1: missing protocol after action",
            ),
            (
                "allow tcp from 300.1.1.1",
                1,
                S::BadAddress(s("300.1.1.1")),
                "rules.fw:1: invalid address \"300.1.1.1\"",
            ),
            (
                "allow tcp from 10.0.0.0/33",
                1,
                S::PrefixOutOfRange {
                    len: 33,
                    item: s("10.0.0.0/33"),
                },
                "rules.fw:1: prefix length 33 out of range in \"10.0.0.0/33\"",
            ),
            (
                "allow tcp to ::/129",
                1,
                S::PrefixOutOfRange {
                    len: 129,
                    item: s("::/129"),
                },
                "rules.fw:1: prefix length 129 out of range in \"::/129\"",
            ),
            (
                "allow tcp from 10.0.0.0/x",
                1,
                S::BadPrefix(s("10.0.0.0/x")),
                "rules.fw:1: invalid prefix length in \"10.0.0.0/x\"",
            ),
            (
                "allow tcp from 10.0.0.1,,10.0.0.2",
                1,
                S::EmptyAddressItem(s("10.0.0.1,,10.0.0.2")),
                "rules.fw:1: empty item in address list \"10.0.0.1,,10.0.0.2\"",
            ),
            (
                "allow udp port 2000-1000",
                1,
                S::ReversedRange(s("2000-1000")),
                "rules.fw:1: port range \"2000-1000\" is reversed",
            ),
            (
                "allow udp port 70000",
                1,
                S::BadPort(s("70000")),
                "rules.fw:1: invalid port \"70000\"",
            ),
            (
                "allow udp sport 53,,54",
                1,
                S::EmptyPortItem(s("53,,54")),
                "rules.fw:1: empty item in port list \"53,,54\"",
            ),
            (
                "allow icmp port 1",
                1,
                S::PortsForProtocol(s("icmp")),
                "rules.fw:1: ports given for protocol \"icmp\"",
            ),
            (
                "allow tcp from",
                1,
                S::MissingValue(s("from")),
                "rules.fw:1: missing value after \"from\"",
            ),
            (
                "allow tcp from any from any",
                1,
                S::DuplicateClause(s("from")),
                "rules.fw:1: duplicate \"from\" clause",
            ),
            (
                "allow tcp bogus",
                1,
                S::Unexpected(s("bogus")),
                "rules.fw:1: unexpected \"bogus\"",
            ),
            (
                "default deny\ndefault allow",
                2,
                S::DuplicateDefault { first: 1 },
                "rules.fw:2: duplicate default policy (first on line 1)",
            ),
            (
                "default",
                1,
                S::DefaultNeedsAction,
                "rules.fw:1: \"default\" needs allow or deny",
            ),
            (
                "default maybe",
                1,
                S::UnknownDefault(s("maybe")),
                "rules.fw:1: unknown default policy \"maybe\"",
            ),
            (
                "default deny now",
                1,
                S::AfterDefault(s("now")),
                "rules.fw:1: unexpected \"now\" after default policy",
            ),
        ];
        for (text, line, kind, display) in cases {
            let e = RuleSet::parse(text, "rules.fw").unwrap_err();
            assert_eq!(
                e,
                RuleError {
                    file: s("rules.fw"),
                    line,
                    msg: kind,
                },
                "{text}"
            );
            // The text operators see stays as it was.
            assert_eq!(e.to_string(), display);
        }
    }

    proptest::proptest! {
        #[test]
        fn index_agrees_with_linear_scan(
            rules in proptest::collection::vec((0u8..4, 0u8..3, 0u16..40, 0u16..40, proptest::bool::ANY), 0..30),
            flows in proptest::collection::vec((0u8..4, 0u8..3, 0u16..45, 0u16..45), 1..50),
        ) {
            let protos = ["tcp", "udp", "icmp", "any"];
            let mut text = String::new();
            for (p, src, a, b, allow) in &rules {
                let (lo, hi) = (a.min(b), a.max(b));
                let act = if *allow { "allow" } else { "deny" };
                let proto = protos[*p as usize];
                let ports = if proto == "icmp" { String::new() } else if lo == hi { format!(" port {lo}") } else { format!(" port {lo}-{hi},{}", hi + 2) };
                text.push_str(&format!("{act} {proto} from 10.{src}.0.0/16{ports}\n"));
            }
            let rs = RuleSet::parse(&text, "p").unwrap();
            proptest::prop_assert!(rs.index.is_some());
            for (p, src, sp, dp) in flows {
                let f = fk(&format!("10.{src}.1.1"), "1.1.1.1", sp, dp, [6, 17, 1, 47][p as usize]);
                proptest::prop_assert_eq!(rs.decide(&f), rs.decide_linear(&f));
            }
        }
    }

    #[test]
    fn default_is_deny_unless_set() {
        let f = fk("1.1.1.1", "2.2.2.2", 1, 2, 6);
        assert_eq!(RuleSet::parse("", "x").unwrap().decide(&f).0, Action::Deny);
        assert_eq!(
            RuleSet::parse("default allow", "x").unwrap().decide(&f).0,
            Action::Allow
        );
    }
}
