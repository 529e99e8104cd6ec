//! Rule headers compiled for the check every candidate rule gets on every
//! packet: each address expression (`$HOME_NET`, `!$HOME_NET`, lists with
//! negations) becomes the sorted, disjoint address ranges it matches per
//! family, each port expression the port ranges it matches, and the sets
//! are shared by the rules naming the same expression (ET Open's 24,000
//! rules use a few hundred). A check is then a bisection over a few ranges
//! instead of a walk of the expression tree, and reads a small record per
//! rule instead of the rule itself.

use rustc_hash::FxHashMap;
use sluice_wire::{FlowKey, IpAddr};

use crate::rules::{AddrExpr, PortExpr, Proto, Rule, StreamMode};

/// Inclusive ranges, sorted and disjoint.
type Ranges = Vec<(u128, u128)>;

/// `v` sorted, overlapping and adjacent ranges merged.
fn normalise(mut v: Ranges) -> Ranges {
    v.sort_unstable();
    let mut out: Ranges = Vec::with_capacity(v.len());
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The values of `0..=max` not in `v` (sorted, disjoint).
fn complement(v: &[(u128, u128)], max: u128) -> Ranges {
    let mut out = Vec::with_capacity(v.len() + 1);
    let mut next = Some(0u128);
    for &(lo, hi) in v {
        if let Some(n) = next {
            if lo > n {
                out.push((n, lo - 1));
            }
        }
        next = hi.checked_add(1).filter(|&x| x <= max);
    }
    if let Some(n) = next {
        out.push((n, max));
    }
    out
}

/// The values in both `a` and `b` (sorted, disjoint).
fn intersect(a: &[(u128, u128)], b: &[(u128, u128)]) -> Ranges {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo <= hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

const V4_MAX: u128 = u32::MAX as u128;

/// The addresses an expression matches: (IPv4, IPv6) ranges.
fn addr_ranges(e: &AddrExpr) -> (Ranges, Ranges) {
    match e {
        AddrExpr::Any => (vec![(0, V4_MAX)], vec![(0, u128::MAX)]),
        AddrExpr::Net(IpAddr::V4(b), p) => {
            let mask = u32::MAX.checked_shl(32 - (*p as u32).min(32)).unwrap_or(0);
            let lo = u32::from_be_bytes(*b) & mask;
            (vec![(lo as u128, (lo | !mask) as u128)], vec![])
        }
        AddrExpr::Net(IpAddr::V6(b), p) => {
            let mask = u128::MAX
                .checked_shl(128 - (*p as u32).min(128))
                .unwrap_or(0);
            let lo = u128::from_be_bytes(*b) & mask;
            (vec![], vec![(lo, lo | !mask)])
        }
        AddrExpr::Set(s) => (
            s.v4_ranges()
                .iter()
                .map(|&(a, b)| (a as u128, b as u128))
                .collect(),
            s.v6_ranges().to_vec(),
        ),
        AddrExpr::Not(inner) => {
            let (v4, v6) = addr_ranges(inner);
            (complement(&v4, V4_MAX), complement(&v6, u128::MAX))
        }
        // Some positive element matches (or there is none), and no negated
        // one: the positives' union less the negated ones'.
        AddrExpr::List(l) => {
            let (mut p4, mut p6, mut n4, mut n6) = (vec![], vec![], vec![], vec![]);
            let mut has_pos = false;
            for x in l {
                if let AddrExpr::Not(inner) = x {
                    let (a, b) = addr_ranges(inner);
                    n4.extend(a);
                    n6.extend(b);
                } else {
                    has_pos = true;
                    let (a, b) = addr_ranges(x);
                    p4.extend(a);
                    p6.extend(b);
                }
            }
            if !has_pos {
                (p4, p6) = (vec![(0, V4_MAX)], vec![(0, u128::MAX)]);
            }
            let keep4 = complement(&normalise(n4), V4_MAX);
            let keep6 = complement(&normalise(n6), u128::MAX);
            (
                intersect(&normalise(p4), &keep4),
                intersect(&normalise(p6), &keep6),
            )
        }
    }
}

/// The ports an expression matches.
fn port_ranges(e: &PortExpr) -> Ranges {
    const MAX: u128 = u16::MAX as u128;
    match e {
        PortExpr::Any => vec![(0, MAX)],
        PortExpr::Range(a, b) if a <= b => vec![(*a as u128, *b as u128)],
        PortExpr::Range(..) => vec![],
        PortExpr::Not(inner) => complement(&port_ranges(inner), MAX),
        PortExpr::List(l) => {
            let (mut pos, mut neg, mut has_pos) = (vec![], vec![], false);
            for x in l {
                if let PortExpr::Not(inner) = x {
                    neg.extend(port_ranges(inner));
                } else {
                    has_pos = true;
                    pos.extend(port_ranges(x));
                }
            }
            if !has_pos {
                pos = vec![(0, MAX)];
            }
            intersect(&normalise(pos), &complement(&normalise(neg), MAX))
        }
    }
}

/// The classes of flow directions that some flow groups cannot tell apart
/// ([`Headers::flow_classes`]): the boundaries of their port and address
/// sets. Between two boundaries every set holds every value or none, so
/// two flow directions of one class ([`FlowClasses::key`]) are accepted by
/// exactly the same of those groups ([`Headers::group_matches`] depends
/// only on the protocol, the direction, the ports and the addresses).
#[derive(Debug, Default, Clone)]
pub struct FlowClasses {
    ports: Vec<u32>,
    v4: Vec<u64>,
    v6: Vec<u128>,
}

/// The class of a flow direction ([`FlowClasses::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassKey {
    /// Protocol and direction.
    proto_dir: u16,
    ports: [u32; 2],
    addrs: [u32; 2],
}

impl FlowClasses {
    /// The class of flow `flow` as it travelled (`to_server`: client to
    /// server).
    #[inline]
    pub fn key(&self, flow: &FlowKey, to_server: bool) -> ClassKey {
        let port = |p: u16| self.ports.partition_point(|&b| b <= p as u32) as u32;
        let addr = |a: &IpAddr| match *a {
            IpAddr::V4(b) => {
                let x = u32::from_be_bytes(b) as u64;
                (self.v4.partition_point(|&v| v <= x) as u32) << 1
            }
            IpAddr::V6(b) => {
                let x = u128::from_be_bytes(b);
                ((self.v6.partition_point(|&v| v <= x) as u32) << 1) | 1
            }
        };
        ClassKey {
            proto_dir: (flow.proto as u16) << 1 | to_server as u16,
            ports: [port(flow.src_port), port(flow.dst_port)],
            addrs: [addr(&flow.src), addr(&flow.dst)],
        }
    }
}

fn in_ranges<T: Ord + Copy>(v: &[(T, T)], x: T) -> bool {
    let i = v.partition_point(|r| r.0 <= x);
    i > 0 && v[i - 1].1 >= x
}

/// A compiled address set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AddrSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl AddrSet {
    #[inline]
    fn contains(&self, a: &IpAddr) -> bool {
        match *a {
            IpAddr::V4(b) => in_ranges(&self.v4, u32::from_be_bytes(b)),
            IpAddr::V6(b) => in_ranges(&self.v6, u128::from_be_bytes(b)),
        }
    }
}

/// A set id that matches everything (`any`): no lookup.
const ANY: u32 = u32::MAX;

/// Flag bits of [`RuleHdr`].
const BIDIR: u8 = 1;
const ESTABLISHED: u8 = 2;
const NOT_ESTABLISHED: u8 = 4;
const STREAM_ONLY: u8 = 8;
const CHECKS: u8 = 16;
const TO_SERVER: u8 = 32;
const TO_CLIENT: u8 = 64;
/// The rule has `app-layer-protocol` ([`crate::alproto`]).
const ALP: u8 = 128;

/// One rule's header, compiled: 20 bytes, read from a dense array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct RuleHdr {
    proto: Proto,
    flags: u8,
    /// Source, destination address sets; source, destination port sets
    /// ([`ANY`]: everything).
    src: u32,
    dst: u32,
    sport: u32,
    dport: u32,
}

/// The flags of a [`RuleHdr`] a flow group keeps ([`Headers::group_matches`]):
/// those a stream's packets share.
const FLOW_FLAGS: u8 = BIDIR | TO_SERVER | TO_CLIENT;

/// The compiled headers of a rule set.
#[derive(Default)]
pub struct Headers {
    rules: Vec<RuleHdr>,
    addrs: Vec<AddrSet>,
    ports: Vec<Vec<(u16, u16)>>,
    /// Flow groups: the distinct headers less the flags that vary from
    /// packet to packet of one stream direction (`established`, the
    /// per-packet checks), so the part of a rule's header a flow direction
    /// decides ([`Headers::group_matches`]); ET Open's stream rules fall in
    /// a few hundred.
    groups: Vec<RuleHdr>,
    /// Per rule: its flow group.
    group_of: Vec<u32>,
}

impl Headers {
    /// Compiles the headers of `rules`, in order.
    pub fn new(rules: &[Rule]) -> Headers {
        let mut h = Headers::default();
        let mut addr_ids: FxHashMap<AddrSet, u32> = FxHashMap::default();
        let mut port_ids: FxHashMap<Vec<(u16, u16)>, u32> = FxHashMap::default();
        let mut addr = |e: &AddrExpr, h: &mut Headers| -> u32 {
            if matches!(e, AddrExpr::Any) {
                return ANY;
            }
            let (v4, v6) = addr_ranges(e);
            let set = AddrSet {
                v4: v4.into_iter().map(|(a, b)| (a as u32, b as u32)).collect(),
                v6,
            };
            *addr_ids.entry(set.clone()).or_insert_with(|| {
                h.addrs.push(set);
                (h.addrs.len() - 1) as u32
            })
        };
        let mut port = |e: &PortExpr, h: &mut Headers| -> u32 {
            let set: Vec<(u16, u16)> = port_ranges(e)
                .into_iter()
                .map(|(a, b)| (a as u16, b as u16))
                .collect();
            if set == [(0, u16::MAX)] {
                return ANY;
            }
            *port_ids.entry(set.clone()).or_insert_with(|| {
                h.ports.push(set);
                (h.ports.len() - 1) as u32
            })
        };
        let mut group_ids: FxHashMap<RuleHdr, u32> = FxHashMap::default();
        for r in rules {
            let mut flags = 0;
            for (on, bit) in [
                (r.bidir, BIDIR),
                (r.established, ESTABLISHED),
                (r.not_established, NOT_ESTABLISHED),
                (r.stream == StreamMode::Only, STREAM_ONLY),
                (!r.checks.is_empty(), CHECKS),
                (r.to_server == Some(true), TO_SERVER),
                (r.to_server == Some(false), TO_CLIENT),
                (!r.alp.is_empty(), ALP),
            ] {
                if on {
                    flags |= bit;
                }
            }
            let rh = RuleHdr {
                proto: r.proto,
                flags,
                src: addr(&r.src, &mut h),
                dst: addr(&r.dst, &mut h),
                sport: port(&r.sport, &mut h),
                dport: port(&r.dport, &mut h),
            };
            let g = RuleHdr {
                flags: flags & FLOW_FLAGS,
                ..rh
            };
            let gid = *group_ids.entry(g).or_insert_with(|| {
                h.groups.push(g);
                (h.groups.len() - 1) as u32
            });
            h.group_of.push(gid);
            h.rules.push(rh);
        }
        h
    }

    /// The flow group of rule `rule` ([`Headers::group_matches`]).
    #[inline]
    pub fn group_of(&self, rule: u32) -> u32 {
        self.group_of[rule as usize]
    }

    /// True if the part of a header that one stream direction's packets
    /// share (protocol, direction, addresses, ports) lets group `group`'s
    /// rules match a packet of flow `flow` as it travelled (`tcp`: stream
    /// bytes; `to_server`: client to server). Implied by
    /// [`Headers::matches`] for each rule of the group: a hit of a rule of
    /// a group that fails here can be dropped for the whole stream
    /// direction.
    #[inline]
    pub fn group_matches(&self, group: u32, flow: &FlowKey, tcp: bool, to_server: bool) -> bool {
        self.flow_ok(&self.groups[group as usize], flow, tcp, to_server)
    }

    /// The flow classes of `groups` ([`FlowClasses`]).
    pub fn flow_classes(&self, groups: impl IntoIterator<Item = u32>) -> FlowClasses {
        let mut c = FlowClasses::default();
        for g in groups {
            let h = &self.groups[g as usize];
            for p in [h.sport, h.dport] {
                if p != ANY {
                    for &(a, z) in &self.ports[p as usize] {
                        c.ports.extend([a as u32, z as u32 + 1]);
                    }
                }
            }
            for a in [h.src, h.dst] {
                if a != ANY {
                    let set = &self.addrs[a as usize];
                    for &(lo, hi) in &set.v4 {
                        c.v4.extend([lo as u64, hi as u64 + 1]);
                    }
                    for &(lo, hi) in &set.v6 {
                        c.v6.push(lo);
                        // The last address's end has no successor: the
                        // class past it is never needed.
                        c.v6.extend(hi.checked_add(1));
                    }
                }
            }
        }
        c.ports.sort_unstable();
        c.ports.dedup();
        c.v4.sort_unstable();
        c.v4.dedup();
        c.v6.sort_unstable();
        c.v6.dedup();
        c
    }

    /// Number of flow groups.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// The checks of [`Headers::matches`] on what a stream direction's
    /// packets share.
    #[inline]
    fn flow_ok(&self, c: &RuleHdr, k: &FlowKey, tcp: bool, to_server: bool) -> bool {
        let proto_ok = match c.proto {
            // A stream's detected protocol may change within a direction
            // (undecided first): the rule's header decides it per packet.
            Proto::Tcp | Proto::Smtp | Proto::Ftp | Proto::Smb | Proto::Ssh => tcp,
            Proto::Udp => k.proto == 17,
            Proto::Icmp => matches!(k.proto, 1 | 58),
            Proto::Ip => true,
            // Only their own parsers' buffers, never stream bytes.
            Proto::Dns | Proto::Http | Proto::Tls => return true,
        };
        if !proto_ok {
            return false;
        }
        let f = c.flags;
        if (f & TO_SERVER != 0 && !to_server) || (f & TO_CLIENT != 0 && to_server) {
            return false;
        }
        let fwd = self.port(c.dport, k.dst_port)
            && self.port(c.sport, k.src_port)
            && self.addr(c.dst, &k.dst)
            && self.addr(c.src, &k.src);
        fwd || (f & BIDIR != 0
            && self.port(c.dport, k.src_port)
            && self.port(c.sport, k.dst_port)
            && self.addr(c.dst, &k.src)
            && self.addr(c.src, &k.dst))
    }

    #[inline]
    fn addr(&self, id: u32, a: &IpAddr) -> bool {
        id == ANY || self.addrs[id as usize].contains(a)
    }

    #[inline]
    fn port(&self, id: u32, p: u16) -> bool {
        id == ANY || in_ranges(&self.ports[id as usize], p)
    }

    /// True if the header of rule `rule` (of `rules`, as compiled) matches
    /// the packet `h` describes.
    #[inline]
    pub fn matches(&self, rules: &[Rule], rule: u32, h: &crate::engine::Header) -> bool {
        let c = &self.rules[rule as usize];
        let proto_ok = match c.proto {
            Proto::Tcp => h.tcp,
            Proto::Udp => h.flow.proto == 17,
            Proto::Icmp => matches!(h.flow.proto, 1 | 58),
            Proto::Ip => true,
            Proto::Dns => h.dns,
            Proto::Http => h.http,
            Proto::Tls => h.tls,
            Proto::Smtp => h.tcp && h.app == crate::applayer::SMTP,
            Proto::Ftp => h.tcp && h.app == crate::applayer::FTP,
            Proto::Smb => h.tcp && h.app == crate::applayer::SMB,
            Proto::Ssh => h.tcp && h.app == crate::applayer::SSH,
        };
        if !proto_ok {
            return false;
        }
        let f = c.flags;
        if (f & TO_SERVER != 0 && !h.to_server) || (f & TO_CLIENT != 0 && h.to_server) {
            return false;
        }
        if f & ESTABLISHED != 0 && !h.established {
            return false;
        }
        if f & NOT_ESTABLISHED != 0 && h.established {
            return false;
        }
        if f & STREAM_ONLY != 0 && !h.stream {
            return false;
        }
        if f & CHECKS != 0 && !rules[rule as usize].checks.matches(h.flow.proto, &h.pkt) {
            return false;
        }
        if f & ALP != 0 && !rules[rule as usize].alp.matches(&h.alp, h.to_server) {
            return false;
        }
        let k = &h.flow;
        let fwd = self.port(c.dport, k.dst_port)
            && self.port(c.sport, k.src_port)
            && self.addr(c.dst, &k.dst)
            && self.addr(c.src, &k.src);
        fwd || (f & BIDIR != 0
            && self.port(c.dport, k.src_port)
            && self.port(c.sport, k.dst_port)
            && self.addr(c.dst, &k.src)
            && self.addr(c.src, &k.dst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{parse_addr, parse_port};

    /// A flow group's check is implied by each of its rules' header check
    /// ([`Headers::group_matches`]): whenever a rule's header matches a
    /// packet, its group accepts the packet's flow direction, so the hits
    /// the pre-scan drops by group are hits the evaluation would drop.
    /// Over random headers (protocols, addresses, ports, `<>`, `flow`
    /// options, `dsize`) and random packets; both answers occur.
    #[test]
    fn a_group_accepts_every_packet_its_rules_match() {
        let mut rng = crate::testrng::Lcg::new(7);
        let mut rnd = |n: u64| rng.below(n);
        let vars = Default::default();
        const PROTOS: &[&str] = &["tcp", "udp", "icmp", "ip"];
        const ADDRS: &[&str] = &["any", "10.0.0.0/8", "!10.0.0.0/8", "[1.2.3.4,10.1.0.0/16]"];
        const PORTS: &[&str] = &["any", "80", "!80", "[1024:,!8080]", "445"];
        const FLOWS: &[&str] = &[
            "",
            "flow:established,to_server; ",
            "flow:to_client; ",
            "flow:not_established; ",
            "flow:established,only_stream; ",
            "dsize:>10; ",
        ];
        let mut rules = Vec::new();
        for sid in 0..300 {
            let mut pick = |xs: &[&'static str]| xs[rnd(xs.len() as u64) as usize];
            let proto = pick(PROTOS);
            let line = format!(
                "alert {proto} {} {} {} {} {} (msg:\"h\"; {}sid:{};)",
                pick(ADDRS),
                pick(PORTS),
                pick(&["->", "<>"]),
                pick(ADDRS),
                pick(PORTS),
                if proto == "tcp" { pick(FLOWS) } else { "" },
                sid + 1
            );
            rules.push(crate::rules::parse_rule(&line, &vars).unwrap());
        }
        let h = Headers::new(&rules);
        assert!(h.groups.len() < rules.len(), "rules sharing a group");
        let addrs = [
            IpAddr::V4([10, 0, 0, 1]),
            IpAddr::V4([10, 1, 2, 3]),
            IpAddr::V4([1, 2, 3, 4]),
            IpAddr::V4([192, 168, 1, 2]),
        ];
        let ports = [80u16, 445, 1023, 1024, 8080, 20000];
        let (mut yes, mut no) = (0, 0);
        for _ in 0..3000 {
            let mut pick_a = || addrs[rnd(addrs.len() as u64) as usize];
            let (src, dst) = (pick_a(), pick_a());
            let flow = FlowKey {
                zone: 0,
                src,
                dst,
                src_port: ports[rnd(ports.len() as u64) as usize],
                dst_port: ports[rnd(ports.len() as u64) as usize],
                proto: [6u8, 17, 1][rnd(3) as usize],
            };
            let tcp = flow.proto == 6 && rnd(4) != 0;
            let hdr = crate::engine::Header {
                flow,
                tcp,
                to_server: rnd(2) == 0,
                established: rnd(2) == 0,
                stream: tcp && rnd(2) == 0,
                pkt: crate::rules::PacketInfo {
                    dsize: rnd(30) as u16,
                    ..Default::default()
                },
                dns: false,
                http: false,
                tls: false,
                app: rnd(5) as u8,
                alp: Default::default(),
            };
            for r in 0..rules.len() as u32 {
                let g = h.group_of(r);
                let group = h.group_matches(g, &hdr.flow, hdr.tcp, hdr.to_server);
                if h.matches(&rules, r, &hdr) {
                    assert!(group, "rule {r} matches but its group refuses: {hdr:?}");
                    yes += 1;
                } else if !group {
                    no += 1;
                }
            }
        }
        assert!(
            yes > 1000 && no > 1000,
            "{yes} matched, {no} refused by group"
        );
    }

    /// Two flow directions of one class ([`FlowClasses::key`]) are
    /// accepted by the same groups among those the classes were made of
    /// (all of them, or every other one): flows at and around every
    /// address and port boundary, IPv4 and IPv6, both directions. Fails if
    /// a boundary is left out (a class spanning a set's edge).
    #[test]
    fn flows_of_one_class_are_accepted_by_the_same_groups() {
        let mut rng = crate::testrng::Lcg::new(5);
        let mut rnd = |n: u64| rng.below(n);
        let vars = Default::default();
        const ADDRS: &[&str] = &[
            "any",
            "10.0.0.0/8",
            "!10.0.0.0/8",
            "[1.2.3.4,10.1.0.0/16]",
            "2001:db8::/32",
        ];
        const PORTS: &[&str] = &["any", "80", "!80", "[1024:,!8080]", "445", "[0:79]"];
        let mut rules = Vec::new();
        for sid in 0..200 {
            let mut pick = |xs: &[&'static str]| xs[rnd(xs.len() as u64) as usize];
            let line = format!(
                "alert {} {} {} {} {} {} (msg:\"h\"; {}sid:{};)",
                pick(&["tcp", "udp", "ip"]),
                pick(ADDRS),
                pick(PORTS),
                pick(&["->", "<>"]),
                pick(ADDRS),
                pick(PORTS),
                pick(&["", "flow:to_server; ", "flow:to_client; "]),
                sid + 1
            );
            rules.push(crate::rules::parse_rule(&line, &vars).unwrap());
        }
        let h = Headers::new(&rules);
        let v4 = |a: u32| IpAddr::V4(a.to_be_bytes());
        let mut addrs = vec![IpAddr::V6([0; 16]), IpAddr::V6([0xff; 16])];
        for a in [
            0x0a00_0000u32,
            0x0b00_0000,
            0x0a01_0000,
            0x0a02_0000,
            0x0102_0304,
            0x0102_0305,
        ] {
            addrs.extend([v4(a.wrapping_sub(1)), v4(a), v4(a + 1)]);
        }
        let db8 = u128::from_be_bytes([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        for a in [db8 - 1, db8, db8 + 1, db8 + (1 << 96), db8 + (1 << 96) - 1] {
            addrs.push(IpAddr::V6(a.to_be_bytes()));
        }
        let ports = [
            0u16, 1, 79, 80, 81, 444, 445, 446, 1023, 1024, 8079, 8080, 8081, 65535,
        ];
        for subset in [1u32, 2] {
            let groups: Vec<u32> = (0..h.groups() as u32).filter(|g| g % subset == 0).collect();
            let classes = h.flow_classes(groups.iter().copied());
            let mut seen: FxHashMap<ClassKey, Vec<bool>> = FxHashMap::default();
            let (mut same, mut accepted) = (0, 0);
            for _ in 0..20_000 {
                let mut pa = || addrs[rnd(addrs.len() as u64) as usize];
                let (src, dst) = (pa(), pa());
                let mut pp = || ports[rnd(ports.len() as u64) as usize];
                let flow = FlowKey {
                    zone: 0,
                    src,
                    dst,
                    src_port: pp(),
                    dst_port: pp(),
                    proto: 6,
                };
                let to_server = rnd(2) == 0;
                let answers: Vec<bool> = groups
                    .iter()
                    .map(|&g| h.group_matches(g, &flow, true, to_server))
                    .collect();
                accepted += answers.iter().filter(|&&a| a).count();
                match seen.entry(classes.key(&flow, to_server)) {
                    std::collections::hash_map::Entry::Occupied(e) => {
                        assert_eq!(e.get(), &answers, "{flow:?} {to_server}");
                        same += 1;
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(answers);
                    }
                }
            }
            assert!(
                seen.len() > 100 && same > 5000 && accepted > 10_000,
                "{} classes, {same} flows met a class again, {accepted} accepted",
                seen.len()
            );
        }
    }

    /// A compiled address or port set matches exactly what its expression
    /// matches: nested negations, lists of negations only, mixed families,
    /// long lists (a [`crate::rules::NetSet`]), at and around every range
    /// boundary.
    #[test]
    fn compiled_sets_match_as_the_expressions_do() {
        let mut rng = crate::testrng::Lcg::new(3);
        let mut rnd = |n: u64| rng.below(n);
        let vars = Default::default();
        let mut long = Vec::new();
        for i in 0..20 {
            long.push(format!("10.{i}.{}.0/24", i * 7 % 256));
        }
        let long = format!("[{}]", long.join(","));
        let addrs = [
            "any",
            "!any",
            "10.0.0.0/8",
            "!10.0.0.0/8",
            "[10.0.0.0/8,!10.1.0.0/16]",
            "[!10.1.0.0/16]",
            "[!10.1.0.0/16,!192.168.0.0/16]",
            "![10.0.0.0/8,!10.1.2.3]",
            "[1.2.3.4,::1]",
            "!::1",
            "[::/0,!::1]",
            "2001:db8::/32",
            "[192.168.0.0/16,10.0.0.0/8,172.16.0.0/12]",
            "![192.168.0.0/16,10.0.0.0/8,172.16.0.0/12]",
            "0.0.0.0/0",
            "255.255.255.255",
            "[0.0.0.0,255.255.255.255]",
            "![![1.2.3.0/24]]",
            &long,
            &format!("!{long}"),
            &format!("[{long},!10.3.21.7]"),
        ];
        let mut probes: Vec<IpAddr> = vec![
            IpAddr::V4([0, 0, 0, 0]),
            IpAddr::V4([255, 255, 255, 255]),
            IpAddr::V6([0; 16]),
            IpAddr::V6([0xff; 16]),
            IpAddr::V6([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            IpAddr::V6([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]),
            IpAddr::V6([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            IpAddr::V6([
                0x20, 1, 0xd, 0xb7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0xff,
            ]),
        ];
        // Around the IPv4 boundaries of the expressions.
        for base in [
            [10u8, 0, 0, 0],
            [10, 1, 0, 0],
            [10, 1, 2, 3],
            [192, 168, 0, 0],
            [172, 16, 0, 0],
            [1, 2, 3, 4],
            [1, 2, 3, 0],
            [10, 3, 21, 7],
        ] {
            let x = u32::from_be_bytes(base);
            for d in [0u32, 1, 255, 256, 65535, 65536] {
                for y in [x.wrapping_add(d), x.wrapping_sub(d), x.wrapping_sub(1)] {
                    probes.push(IpAddr::V4(y.to_be_bytes()));
                }
            }
            // The ends of each /8, /12, /16, /24 around it.
            for bits in [8u32, 12, 16, 24] {
                let m = u32::MAX << (32 - bits);
                probes.push(IpAddr::V4((x & m).to_be_bytes()));
                probes.push(IpAddr::V4((x | !m).to_be_bytes()));
            }
        }
        for _ in 0..2000 {
            probes.push(IpAddr::V4((rnd(1 << 32) as u32).to_be_bytes()));
        }
        for e in addrs {
            let x = parse_addr(e, &vars, 0).unwrap();
            let (v4, v6) = addr_ranges(&x);
            let set = AddrSet {
                v4: v4.into_iter().map(|(a, b)| (a as u32, b as u32)).collect(),
                v6,
            };
            for a in &probes {
                assert_eq!(set.contains(a), x.matches(a), "{e} on {a:?}");
            }
        }
        let ports = [
            "any",
            "80",
            "!80",
            "[80,443,8000:8080]",
            "[1024:,!8080]",
            "[!80,!443]",
            "![80,!81]",
            ":1023",
            "[0,65535]",
            "!any",
        ];
        for e in ports {
            let x = parse_port(e, &vars, 0).unwrap();
            let set: Vec<(u16, u16)> = port_ranges(&x)
                .into_iter()
                .map(|(a, b)| (a as u16, b as u16))
                .collect();
            for p in 0..=u16::MAX {
                assert_eq!(in_ranges(&set, p), x.matches(p), "{e} on {p}");
            }
        }
    }
}
