//! Compiled signatures: two Aho-Corasick DFAs and rule evaluation on hits.

use aho_corasick::automaton::Automaton;
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind, StartKind};
use rustc_hash::{FxHashMap, FxHashSet};
use sluice_state::{Codec, DecodeError, Reader, Writer};
use sluice_wire::FlowKey;

use crate::dns::prefilter::DnsRules;
use crate::http::prefilter::HttpRules;
use crate::http::HttpDir;
use crate::packetidx::PacketRules;
use crate::pending::Pend;
use crate::rules::{Flowbit, PacketInfo, Proto, Rule, StreamMode};
use crate::tls::prefilter::TlsRules;

/// Fired rules a record of versions 1-4 may list per direction (they are
/// read and forgotten: a rule now fires once per packet, not once per flow).
const LEGACY_MAX_FIRED: usize = 16;
/// Partially matched multi-content rules tracked per flow direction; beyond this the
/// oldest progress is forgotten.
pub const MAX_PROGRESS: usize = 8;
/// Flowbits set at once per flow; a `set` beyond this is not recorded.
pub const MAX_FLOWBITS: usize = 16;
/// No trigger content ([`Engine::trigger`]).
pub const NO_TRIGGER: u8 = u8::MAX;

/// Why the signatures could not be compiled into automata.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The Aho-Corasick DFA could not be built (typically too many states).
    #[error(transparent)]
    Automaton(#[from] aho_corasick::BuildError),
    /// The built DFA has no unanchored start state.
    #[error(transparent)]
    Start(#[from] aho_corasick::MatchError),
}

/// Which content of which rule a pattern stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// Rule index.
    pub rule: u32,
    /// Content index within the rule.
    pub content: u8,
}

/// One DFA with its pattern targets and the set of its valid state ids.
pub struct Matcher {
    dfa: DFA,
    start: u32,
    targets: Vec<Vec<Target>>,
    valid: FxHashSet<u32>,
}

impl Matcher {
    /// Compiles `patterns` (each standing for its `targets`), ASCII
    /// case-insensitively if `nocase`.
    pub(crate) fn build(
        patterns: &[Vec<u8>],
        targets: Vec<Vec<Target>>,
        nocase: bool,
    ) -> Result<Self, CompileError> {
        let dfa = DFA::builder()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(nocase)
            .start_kind(StartKind::Unanchored)
            .prefilter(false)
            .build(patterns)?;
        let start = dfa.start_state(Anchored::No)?;
        // Stored states come back from a shared store: remember every reachable one
        // so a corrupt value can never index outside the transition table.
        let mut valid = FxHashSet::default();
        let mut todo = vec![start];
        valid.insert(start.as_u32());
        while let Some(s) = todo.pop() {
            for b in 0..=255u8 {
                let n = dfa.next_state(Anchored::No, s, b);
                if valid.insert(n.as_u32()) {
                    todo.push(n);
                }
            }
        }
        Ok(Matcher {
            dfa,
            start: start.as_u32(),
            targets,
            valid,
        })
    }

    /// Walks `bytes` from `state`, pushing `(end position, target)` for every
    /// pattern ending at a byte; `base` is the stream position of `bytes[0]`.
    #[inline]
    pub fn scan(&self, state: &mut u32, bytes: &[u8], base: u64, hits: &mut Vec<(u64, Target)>) {
        let d = &self.dfa;
        let mut s = aho_corasick::automaton::StateID::new(*state as usize)
            .unwrap_or(aho_corasick::automaton::StateID::ZERO);
        let mut rest = bytes;
        // The hot loop only walks; match handling is out of line so the walk
        // compiles as tightly as the raw scan.
        while let Some((&b, tail)) = rest.split_first() {
            s = d.next_state(Anchored::No, s, b);
            rest = tail;
            if d.is_special(s) && d.is_match(s) {
                self.record(s, base + (bytes.len() - rest.len()) as u64, hits);
            }
        }
        *state = s.as_u32();
    }

    #[cold]
    #[inline(never)]
    fn record(&self, s: aho_corasick::automaton::StateID, end: u64, hits: &mut Vec<(u64, Target)>) {
        let d = &self.dfa;
        for k in 0..d.match_len(s) {
            let pid = d.match_pattern(s, k);
            for t in &self.targets[pid.as_usize()] {
                hits.push((end, *t));
            }
        }
    }

    /// Walks several independent streams at once. A DFA walk is bound by the
    /// latency of each transition's load, which depends on the previous one; walking
    /// [`LANES`] streams in lockstep overlaps those loads, so a batch's flows are
    /// scanned several times faster than one after another. Same results as [`scan`]
    /// on each stream.
    ///
    /// `units[u]` is a range of `jobs` that continue one stream (one flow direction)
    /// and are walked in order from `starts[u]` (or from the start state for a job
    /// with `reset`). Each job's state before and after is written to `out[job]`;
    /// hits are pushed as `(job, part, end, target)`.
    ///
    /// [`scan`]: Matcher::scan
    pub fn scan_units(
        &self,
        units: &[(usize, usize)],
        starts: &[u32],
        jobs: &[Job<'_>],
        out: &mut [(u32, u32)],
        hits: &mut Vec<(u32, u8, u64, Target)>,
    ) {
        let d = &self.dfa;
        let sid = |v: u32| {
            aho_corasick::automaton::StateID::new(v as usize)
                .unwrap_or(aho_corasick::automaton::StateID::ZERO)
        };
        let start = sid(self.start);
        let mut lanes: [Lane; LANES] = [Lane::IDLE; LANES];
        let mut next_unit = 0;
        // Gives an idle lane the next unit; returns false if none is left.
        let assign = |l: &mut Lane, next_unit: &mut usize, out: &mut [(u32, u32)]| -> bool {
            while *next_unit < units.len() {
                let (lo, hi) = units[*next_unit];
                let u = *next_unit;
                *next_unit += 1;
                if lo == hi {
                    continue;
                }
                *l = Lane {
                    job: lo,
                    end: hi,
                    part: 0,
                    pos: 0,
                    state: starts[u],
                    active: true,
                };
                if jobs[lo].reset {
                    l.state = start.as_u32();
                }
                out[lo].0 = l.state;
                return true;
            }
            l.active = false;
            false
        };
        // Moves a lane past exhausted parts and jobs; false once its unit is done.
        let settle = |l: &mut Lane, out: &mut [(u32, u32)]| -> bool {
            loop {
                if l.pos < jobs[l.job].parts[l.part].len() {
                    return true;
                }
                if l.part == 0 {
                    l.part = 1;
                    l.pos = 0;
                    continue;
                }
                out[l.job].1 = l.state;
                l.job += 1;
                if l.job == l.end {
                    l.active = false;
                    return false;
                }
                l.part = 0;
                l.pos = 0;
                if jobs[l.job].reset {
                    l.state = start.as_u32();
                }
                out[l.job].0 = l.state;
            }
        };
        for l in lanes.iter_mut() {
            while assign(l, &mut next_unit, out) && !settle(l, out) {}
        }
        loop {
            let active = lanes.iter().filter(|l| l.active).count();
            if active == 0 {
                break;
            }
            if active == LANES {
                let n = lanes
                    .iter()
                    .map(|l| jobs[l.job].parts[l.part].len() - l.pos)
                    .min()
                    .unwrap_or(0);
                let sl: [&[u8]; LANES] = core::array::from_fn(|k| {
                    &jobs[lanes[k].job].parts[lanes[k].part][lanes[k].pos..][..n]
                });
                let mut st: [aho_corasick::automaton::StateID; LANES] =
                    core::array::from_fn(|k| sid(lanes[k].state));
                #[allow(clippy::needless_range_loop)] // i indexes every lane's slice at once
                for i in 0..n {
                    for k in 0..LANES {
                        st[k] = d.next_state(Anchored::No, st[k], sl[k][i]);
                    }
                    for k in 0..LANES {
                        if d.is_special(st[k]) && d.is_match(st[k]) {
                            let l = &lanes[k];
                            let j = &jobs[l.job];
                            let off = if l.part == 1 { j.parts[0].len() } else { 0 };
                            let end = j.base + (off + l.pos + i + 1) as u64;
                            self.record_job(st[k], l.job as u32, l.part as u8, end, hits);
                        }
                    }
                }
                for k in 0..LANES {
                    lanes[k].state = st[k].as_u32();
                    lanes[k].pos += n;
                }
            } else {
                // Too few streams left to interleave: finish each lane's current part.
                for l in lanes.iter_mut().filter(|l| l.active) {
                    let j = &jobs[l.job];
                    let bytes = &j.parts[l.part][l.pos..];
                    let off = if l.part == 1 { j.parts[0].len() } else { 0 };
                    let mut s = sid(l.state);
                    for (i, &b) in bytes.iter().enumerate() {
                        s = d.next_state(Anchored::No, s, b);
                        if d.is_special(s) && d.is_match(s) {
                            let end = j.base + (off + l.pos + i + 1) as u64;
                            self.record_job(s, l.job as u32, l.part as u8, end, hits);
                        }
                    }
                    l.state = s.as_u32();
                    l.pos += bytes.len();
                }
            }
            for l in lanes.iter_mut() {
                while l.active && !settle(l, out) && assign(l, &mut next_unit, out) {}
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn record_job(
        &self,
        s: aho_corasick::automaton::StateID,
        job: u32,
        part: u8,
        end: u64,
        hits: &mut Vec<(u32, u8, u64, Target)>,
    ) {
        let d = &self.dfa;
        for k in 0..d.match_len(s) {
            let pid = d.match_pattern(s, k);
            for t in &self.targets[pid.as_usize()] {
                hits.push((job, part, end, *t));
            }
        }
    }

    /// The start state.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Walks `bytes` without evaluating anything; returns the number of match
    /// states met (so the walk cannot be optimised away). The raw DFA limit.
    pub fn raw_scan(&self, bytes: &[u8]) -> usize {
        let d = &self.dfa;
        let mut s = aho_corasick::automaton::StateID::new(self.start as usize)
            .unwrap_or(aho_corasick::automaton::StateID::ZERO);
        let mut n = 0;
        for &b in bytes {
            s = d.next_state(Anchored::No, s, b);
            if d.is_special(s) {
                n += d.is_match(s) as usize;
            }
        }
        n
    }

    /// True if `s` is a state of this DFA.
    pub fn is_valid(&self, s: u32) -> bool {
        self.valid.contains(&s)
    }

    /// Number of DFA states.
    pub fn states(&self) -> usize {
        self.valid.len()
    }
}

/// Streams walked in lockstep by [`Matcher::scan_units`].
pub const LANES: usize = 4;

/// A packet's new stream bytes (its own part, then bytes released from the
/// out-of-order buffer), at stream position `base`.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// The two parts, walked in order.
    pub parts: [&'a [u8]; 2],
    /// Stream position of the first byte.
    pub base: u64,
    /// The walk restarts from the start state here (a new connection).
    pub reset: bool,
}

#[derive(Clone, Copy)]
struct Lane {
    job: usize,
    end: usize,
    part: usize,
    pos: usize,
    state: u32,
    active: bool,
}

impl Lane {
    const IDLE: Lane = Lane {
        job: 0,
        end: 0,
        part: 0,
        pos: 0,
        state: 0,
        active: false,
    };
}

/// Unique patterns, their targets, and pattern bytes -> index.
type PatternSet = (Vec<Vec<u8>>, Vec<Vec<Target>>, FxHashMap<Vec<u8>, usize>);

/// All compiled rules.
pub struct Engine {
    /// The rules, indexed by [`Target::rule`].
    pub rules: Vec<Rule>,
    /// Case-sensitive contents.
    pub cs: Option<Matcher>,
    /// `nocase` contents.
    pub ci: Option<Matcher>,
    /// Rules without contents, evaluated on every packet, per packet class
    /// ([`packet_class`]): TCP, UDP, ICMP, other IP; indexed by address.
    packet_rules: [PacketRules; 4],
    /// Buffer rules without a content to prefilter on (only `pcre`, negated
    /// contents, ...): inspected on every payload, per packet class. For TCP
    /// without the packetwise ones ([`Engine::always_packetwise`]).
    always: [Vec<u32>; 4],
    /// Packetwise rules ([`Rule::packetwise`]) without a content to
    /// prefilter on: inspected over every TCP segment's payload.
    always_pkt: Vec<u32>,
    /// Per rule: [`Rule::packetwise`]. Over TCP their hits never feed the
    /// streaming match; a hit of their trigger inside a segment's own payload
    /// makes them candidates for an inspection of that payload.
    pub packetwise: Vec<bool>,
    /// True if a rule is packetwise.
    pub any_packetwise: bool,
    /// Per rule: the content whose hit makes the rule a candidate for a buffer
    /// inspection ([`NO_TRIGGER`]: none). A match inside one buffer contains
    /// every positive content, so one of them is enough: the last one.
    pub trigger: Vec<u8>,
    /// Per rule: its `flowbits`, names as ids.
    flowbits: Vec<Vec<(FbOp, Vec<u16>)>>,
    /// The DNS rules' prefilter (they are not in the automata above).
    pub dns: DnsRules,
    /// The HTTP rules' prefilter (likewise).
    pub http: HttpRules,
    /// The TLS rules' prefilter (likewise).
    pub tls: TlsRules,
    /// Flowbit names, by id.
    pub flowbit_names: Vec<String>,
}

/// A `flowbits` operation on ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FbOp {
    Set,
    Unset,
    Toggle,
    IsSet,
    IsNotSet,
}

/// The index of a packet's class in [`Engine::packet_rules`].
#[inline]
fn packet_class(ip_proto: u8) -> usize {
    match ip_proto {
        6 => 0,
        17 => 1,
        1 | 58 => 2,
        _ => 3,
    }
}

impl Engine {
    /// Compiles `rules`.
    pub fn new(rules: Vec<Rule>) -> Result<Engine, CompileError> {
        let mut sets: [PatternSet; 2] = Default::default();
        let mut packet_rules: [Vec<u32>; 4] = Default::default();
        let mut always: [Vec<u32>; 4] = Default::default();
        let mut always_pkt = Vec::new();
        let packetwise: Vec<bool> = rules.iter().map(Rule::packetwise).collect();
        let mut trigger = Vec::with_capacity(rules.len());
        let mut names: FxHashMap<String, u16> = FxHashMap::default();
        let mut flowbit_names = Vec::new();
        let mut flowbits = Vec::with_capacity(rules.len());
        for (ri, r) in rules.iter().enumerate() {
            let classes: &[usize] = match r.proto {
                Proto::Tcp => &[0],
                Proto::Udp => &[1],
                Proto::Icmp => &[2],
                Proto::Ip => &[0, 1, 2, 3],
                // Inspected on DNS messages, HTTP messages and TLS hellos
                // only ([`DnsRules`], [`HttpRules`], [`TlsRules`]).
                Proto::Dns | Proto::Http | Proto::Tls => &[],
            };
            let last_positive = r.contents.iter().rposition(|c| !c.negated);
            let multi_relative = r.contents.len() > 1 && r.contents.iter().any(|c| c.is_relative());
            let pw = packetwise[ri];
            trigger.push(match last_positive {
                Some(k) if !r.app_layer() && (r.buffer || multi_relative || pw) => k as u8,
                _ => NO_TRIGGER,
            });
            if r.items.is_empty() {
                for &c in classes {
                    packet_rules[c].push(ri as u32);
                }
            } else if (r.buffer || pw) && last_positive.is_none() {
                for &c in classes {
                    if pw && c == 0 {
                        always_pkt.push(ri as u32);
                    } else {
                        always[c].push(ri as u32);
                    }
                }
            }
            let mut ops = Vec::new();
            for f in &r.flowbits {
                let (op, list) = match f {
                    Flowbit::Set(l) => (FbOp::Set, l),
                    Flowbit::Unset(l) => (FbOp::Unset, l),
                    Flowbit::Toggle(l) => (FbOp::Toggle, l),
                    Flowbit::IsSet(l) => (FbOp::IsSet, l),
                    Flowbit::IsNotSet(l) => (FbOp::IsNotSet, l),
                };
                let ids = list
                    .iter()
                    .map(|n| {
                        *names.entry(n.clone()).or_insert_with(|| {
                            flowbit_names.push(n.clone());
                            (flowbit_names.len() - 1) as u16
                        })
                    })
                    .collect();
                ops.push((op, ids));
            }
            flowbits.push(ops);
            for (ci, c) in r.contents.iter().enumerate() {
                if c.negated || r.app_layer() {
                    continue;
                }
                let (pats, tg, idx) = &mut sets[c.nocase as usize];
                let key = if c.nocase {
                    c.bytes.to_ascii_lowercase()
                } else {
                    c.bytes.clone()
                };
                let i = *idx.entry(key.clone()).or_insert_with(|| {
                    pats.push(key);
                    tg.push(Vec::new());
                    pats.len() - 1
                });
                tg[i].push(Target {
                    rule: ri as u32,
                    content: ci as u8,
                });
            }
        }
        let [(cp, ct, _), (ip, it, _)] = sets;
        let cs = if cp.is_empty() {
            None
        } else {
            Some(Matcher::build(&cp, ct, false)?)
        };
        let ci = if ip.is_empty() {
            None
        } else {
            Some(Matcher::build(&ip, it, true)?)
        };
        let dns = DnsRules::new(&rules)?;
        let http = HttpRules::new(&rules)?;
        let tls = TlsRules::new(&rules)?;
        let any_packetwise = packetwise.iter().any(|&pw| pw);
        let packet_rules = packet_rules.map(|ids| PacketRules::new(&rules, &ids));
        Ok(Engine {
            always_pkt,
            packetwise,
            any_packetwise,
            dns,
            http,
            tls,
            rules,
            cs,
            ci,
            packet_rules,
            always,
            trigger,
            flowbits,
            flowbit_names,
        })
    }

    /// Initial per-direction state.
    pub fn initial(&self) -> DirState {
        DirState {
            cs: self.cs.as_ref().map_or(0, |m| m.start),
            ci: self.ci.as_ref().map_or(0, |m| m.start),
            ..DirState::default()
        }
    }

    /// `ds` after bytes of its stream were skipped unseen (the reassembler
    /// resynchronised): the automata restart and partial matches are forgotten,
    /// since neither may continue over the gap.
    pub fn after_gap(&self, ds: &mut DirState) {
        let i = self.initial();
        ds.cs = i.cs;
        ds.ci = i.ci;
        ds.nprog = 0;
    }

    /// Scans `bytes` (at stream position `base`) from `ds`'s automaton states.
    #[inline]
    pub fn scan(&self, ds: &mut DirState, bytes: &[u8], base: u64, hits: &mut Vec<(u64, Target)>) {
        if let Some(m) = &self.cs {
            m.scan(&mut ds.cs, bytes, base, hits);
        }
        if let Some(m) = &self.ci {
            m.scan(&mut ds.ci, bytes, base, hits);
        }
    }

    /// Pushes to `out` (cleared first) the rules without contents the packet
    /// described by `hdr` may match, in rule order: those its addresses can
    /// match ([`PacketRules`]).
    #[inline]
    pub fn packet_rules(&self, hdr: &Header, out: &mut Vec<u32>) {
        let p = &self.packet_rules[packet_class(hdr.flow.proto)];
        if p.is_empty() {
            out.clear();
        } else {
            p.candidates(&hdr.flow.src, &hdr.flow.dst, out);
        }
    }

    /// The buffer rules inspected on every payload of packets of `ip_proto`.
    #[inline]
    pub fn always_rules(&self, ip_proto: u8) -> &[u32] {
        &self.always[packet_class(ip_proto)]
    }

    /// The packetwise rules inspected over every TCP segment's payload.
    #[inline]
    pub fn always_packetwise(&self) -> &[u32] {
        &self.always_pkt
    }

    /// True if the header of rule `rule` matches.
    #[inline]
    pub fn header_matches(&self, rule: u32, hdr: &Header) -> bool {
        header_matches(&self.rules[rule as usize], hdr)
    }

    /// True if the flow's bits satisfy rule `rule`'s `flowbits` conditions.
    #[inline]
    pub fn flowbits_ok(&self, rule: u32, bits: &FlowBits) -> bool {
        self.flowbits[rule as usize]
            .iter()
            .all(|(op, ids)| match op {
                FbOp::IsSet => ids.iter().any(|&i| bits.is_set(i)),
                FbOp::IsNotSet => ids.iter().any(|&i| !bits.is_set(i)),
                _ => true,
            })
    }

    /// Applies rule `rule`'s `flowbits` operations (it matched).
    #[inline]
    pub fn flowbits_apply(&self, rule: u32, bits: &mut FlowBits) {
        for (op, ids) in &self.flowbits[rule as usize] {
            for &i in ids {
                match op {
                    FbOp::Set => bits.set(i),
                    FbOp::Unset => bits.unset(i),
                    FbOp::Toggle if bits.is_set(i) => bits.unset(i),
                    FbOp::Toggle => bits.set(i),
                    _ => {}
                }
            }
        }
    }

    /// True if rule `rule` (one of [`Engine::packet_rules`]) matches the packet
    /// described by `hdr`.
    #[inline]
    pub fn packet_matches(&self, rule: u32, hdr: &Header) -> bool {
        header_matches(&self.rules[rule as usize], hdr)
    }

    /// True if both stored automaton states are valid.
    pub fn valid(&self, ds: &DirState) -> bool {
        self.cs.as_ref().is_none_or(|m| m.is_valid(ds.cs))
            && self.ci.as_ref().is_none_or(|m| m.is_valid(ds.ci))
    }

    /// Evaluates one content hit ending at `end`; returns true if rule `t.rule` now
    /// matches completely. The caller skips the hits of rules that already
    /// fired on this packet.
    pub fn on_hit(&self, t: Target, end: u64, ds: &mut DirState, hdr: &Header) -> bool {
        let r = &self.rules[t.rule as usize];
        if r.buffer || self.packetwise[t.rule as usize] || !header_matches(r, hdr) {
            return false;
        }
        let c = &r.contents[t.content as usize];
        let len = c.bytes.len() as u64;
        let Some(start) = end.checked_sub(len) else {
            return false;
        };
        if let Some(o) = c.offset {
            if start < o as u64 {
                return false;
            }
        }
        if let Some(d) = c.depth {
            if end > c.offset.unwrap_or(0) as u64 + d as u64 {
                return false;
            }
        }
        let n = r.contents.len();
        if n == 1 {
            return true;
        }
        let k = t.content as usize;
        let pi = ds.progress().iter().position(|p| p.rule == t.rule);
        if k == 0 {
            match pi {
                None => ds.push_progress(Progress {
                    rule: t.rule,
                    next: 1,
                    last_end: end,
                }),
                // Re-anchoring on a later occurrence helps a following `within`
                // window and never helps a pure `distance`, so only then.
                Some(i) if ds.prog[i].next == 1 && r.contents[1].within.is_some() => {
                    ds.prog[i].last_end = end;
                }
                _ => {}
            }
            return false;
        }
        let Some(i) = pi else { return false };
        let p = ds.prog[i];
        if p.next as usize != k {
            return false;
        }
        if c.is_relative() {
            let lo = p.last_end as i64 + c.distance.unwrap_or(0) as i64;
            if (start as i64) < lo {
                return false;
            }
            if let Some(w) = c.within {
                if end as i64 > lo + w as i64 {
                    return false;
                }
            }
        }
        if k + 1 == n {
            ds.remove_progress(i);
            return true;
        }
        ds.prog[i].next += 1;
        ds.prog[i].last_end = end;
        false
    }
}

/// What a rule header is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    /// The packet's flow key as it travelled.
    pub flow: FlowKey,
    /// True for TCP stream bytes.
    pub tcp: bool,
    /// Bytes travel client to server.
    pub to_server: bool,
    /// The TCP handshake completed.
    pub established: bool,
    /// A TCP packet of a reassembled stream.
    pub stream: bool,
    /// What the per-packet keywords read.
    pub pkt: PacketInfo,
    /// The packet carries a DNS message ([`crate::dns::detect`]).
    pub dns: bool,
    /// The bytes are an HTTP message's ([`crate::http`]).
    pub http: bool,
    /// The segment starts with a TLS hello ([`crate::tls::detect`]).
    pub tls: bool,
}

fn header_matches(r: &Rule, h: &Header) -> bool {
    let proto_ok = match r.proto {
        Proto::Tcp => h.tcp,
        Proto::Udp => h.flow.proto == 17,
        Proto::Icmp => matches!(h.flow.proto, 1 | 58),
        Proto::Ip => true,
        Proto::Dns => h.dns,
        Proto::Http => h.http,
        Proto::Tls => h.tls,
    };
    if !proto_ok {
        return false;
    }
    if r.to_server.is_some_and(|ts| ts != h.to_server) {
        return false;
    }
    if r.established && !h.established {
        return false;
    }
    if r.not_established && (!h.tcp || h.established) {
        return false;
    }
    if r.stream == StreamMode::Only && !h.stream {
        return false;
    }
    if !r.checks.matches(h.flow.proto, &h.pkt) {
        return false;
    }
    let f = &h.flow;
    let fwd = r.src.matches(&f.src)
        && r.sport.matches(f.src_port)
        && r.dst.matches(&f.dst)
        && r.dport.matches(f.dst_port);
    fwd || (r.bidir
        && r.src.matches(&f.dst)
        && r.sport.matches(f.dst_port)
        && r.dst.matches(&f.src)
        && r.dport.matches(f.src_port))
}

/// Partial match of a multi-content rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Rule index.
    pub rule: u32,
    /// Index of the next content needed.
    pub next: u8,
    /// Stream position just after the last satisfied content.
    pub last_end: u64,
}

/// Per-direction IPS state of a flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirState {
    /// Case-sensitive DFA state.
    pub cs: u32,
    /// Case-insensitive DFA state.
    pub ci: u32,
    nprog: u8,
    prog: [Progress; MAX_PROGRESS],
}

impl DirState {
    fn progress(&self) -> &[Progress] {
        &self.prog[..self.nprog as usize]
    }
    fn push_progress(&mut self, p: Progress) {
        if (self.nprog as usize) == MAX_PROGRESS {
            // Forget the partial match that started longest ago.
            let oldest = (0..MAX_PROGRESS)
                .min_by_key(|&i| self.prog[i].last_end)
                .unwrap_or(0);
            self.remove_progress(oldest);
        }
        self.prog[self.nprog as usize] = p;
        self.nprog += 1;
    }
    fn remove_progress(&mut self, i: usize) {
        let n = self.nprog as usize;
        self.prog.copy_within(i + 1..n, i);
        self.nprog -= 1;
    }
}

/// Flow flags.
pub const BLOCKED: u8 = 1;
/// The flow matched a `pass` rule.
pub const PASSED: u8 = 2;

/// The flowbits set on a flow (ids from [`Engine::flowbit_names`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowBits {
    n: u8,
    ids: [u16; MAX_FLOWBITS],
}

impl FlowBits {
    /// True if bit `id` is set.
    #[inline]
    pub fn is_set(&self, id: u16) -> bool {
        self.ids[..self.n as usize].contains(&id)
    }
    /// Sets bit `id` (not recorded when [`MAX_FLOWBITS`] are set).
    pub fn set(&mut self, id: u16) {
        if !self.is_set(id) && (self.n as usize) < MAX_FLOWBITS {
            self.ids[self.n as usize] = id;
            self.n += 1;
        }
    }
    /// Clears bit `id`.
    pub fn unset(&mut self, id: u16) {
        let n = self.n as usize;
        if let Some(i) = self.ids[..n].iter().position(|&x| x == id) {
            self.ids.copy_within(i + 1..n, i);
            self.n -= 1;
        }
    }
    /// Number of bits set.
    pub fn len(&self) -> usize {
        self.n as usize
    }
    /// True if no bit is set.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// The stored per-flow IPS record (both directions; index 0 = to server).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowState {
    /// [`BLOCKED`], [`PASSED`].
    pub flags: u8,
    /// Last time the record was refreshed.
    pub last_seen: u64,
    /// The flow's flowbits (both directions share them).
    pub bits: FlowBits,
    /// Per direction.
    pub dirs: [DirState; 2],
    /// Per direction, the HTTP framing ([`crate::http`]).
    pub http: [HttpDir; 2],
    /// Per direction, the unit pending in a blob ([`crate::pending`]).
    pub pend: [Pend; 2],
}

/// Version 2 added the flowbits, version 3 the HTTP framing, version 4 the
/// pending units, version 5 the pending HTTP body
/// ([`crate::pending::HTTP_BODY`]);
/// older records still decode (without them).
const VERSION: u8 = 5;

impl Codec for FlowState {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(VERSION).u8(self.flags).u64(self.last_seen);
        w.u8(self.bits.n);
        for b in &self.bits.ids[..self.bits.n as usize] {
            w.u16(*b);
        }
        for d in &self.dirs {
            // No fired rules any more (the count stays in the layout).
            w.u32(d.cs).u32(d.ci).u8(0);
            w.u8(d.nprog);
            for p in d.progress() {
                w.u32(p.rule).u8(p.next).u64(p.last_end);
            }
        }
        for h in &self.http {
            h.encode(w);
        }
        for p in &self.pend {
            p.encode(w);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let version = r.u8()?;
        if !(1..=VERSION).contains(&version) {
            return Err(DecodeError("unknown ips record version"));
        }
        let mut s = FlowState {
            flags: r.u8()?,
            last_seen: r.u64()?,
            ..FlowState::default()
        };
        if version >= 2 {
            let n = r.u8()?;
            if n as usize > MAX_FLOWBITS {
                return Err(DecodeError("too many flowbits"));
            }
            for i in 0..n as usize {
                s.bits.ids[i] = r.u16()?;
            }
            s.bits.n = n;
        }
        for d in &mut s.dirs {
            d.cs = r.u32()?;
            d.ci = r.u32()?;
            let nf = r.u8()?;
            if nf as usize > LEGACY_MAX_FIRED {
                return Err(DecodeError("too many fired rules"));
            }
            for _ in 0..nf {
                r.u32()?;
            }
            let np = r.u8()?;
            if np as usize > MAX_PROGRESS {
                return Err(DecodeError("too many partial matches"));
            }
            for i in 0..np as usize {
                d.prog[i] = Progress {
                    rule: r.u32()?,
                    next: r.u8()?,
                    last_end: r.u64()?,
                };
            }
            d.nprog = np;
        }
        if version >= 3 {
            for h in &mut s.http {
                *h = HttpDir::decode(r)?;
            }
        }
        if version >= 4 {
            for p in &mut s.pend {
                *p = Pend::decode(r, version >= 5)?;
            }
        }
        Ok(s)
    }
}

/// Encoded size of a record with `partial` partial matches in total over both
/// directions, no flowbit set (each adds 2 bytes), no
/// HTTP message being framed (each direction that is adds 15 bytes,
/// [`HttpDir::encoded_len`]) and no pending unit (each direction with one
/// adds 8 bytes, [`Pend::encoded_len`]).
pub const fn record_size(partial: usize) -> usize {
    11 + 2 * 10 + 2 + 2 + 13 * partial
}
