//! Compiled signatures: two Aho-Corasick DFAs and rule evaluation on hits.

use aho_corasick::automaton::Automaton;
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind, StartKind};
use rustc_hash::{FxHashMap, FxHashSet};
use sluice_state::{Codec, DecodeError, Reader, Writer};
use sluice_wire::FlowKey;

use crate::dns::prefilter::DnsRules;
use crate::flowint::FlowInts;
use crate::hashmpm::{FirstStage, HashMpm, Search};
use crate::http::prefilter::HttpRules;
use crate::http::HttpDir;
use crate::packetidx::PacketRules;
use crate::pending::Pend;
use crate::rules::{Flowbit, PacketInfo, Proto, Rule};
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

/// One DFA with its pattern targets and the set of its valid state ids,
/// and the same patterns searched by hashing ([`Matcher::scan_with`]).
pub struct Matcher {
    dfa: DFA,
    start: u32,
    targets: Vec<Vec<Target>>,
    /// Per pattern: its targets as runs of one flow group each
    /// ([`Matcher::with_groups`]): (group, start, end) in its `targets`.
    runs: Vec<Vec<(u32, u32, u32)>>,
    /// Every reachable state, with its depth: the length of the string it
    /// stands for (the longest suffix of the bytes walked that begins a
    /// pattern).
    depth: FxHashMap<u32, u32>,
    /// The patterns by hashing; `None` if one is empty.
    hash: Option<HashMpm>,
    /// Every [`TAIL`]-byte substring of a pattern that does not begin it
    /// (folded if `nocase`).
    inner: FxHashSet<u128>,
    nocase: bool,
}

/// The bytes at a walk's end from which [`Matcher::scan_with`] finds the
/// DFA state there.
const TAIL: usize = 16;
/// Walks shorter than this are walked byte by byte.
const HYBRID_MIN: usize = 64;
/// DFAs of more bytes than this are not walked byte by byte
/// ([`Matcher::scan_with`]); smaller ones stay in the caches.
const HASH_ABOVE: usize = 1 << 20;

/// A [`TAIL`]-byte window as a number.
fn window(w: &[u8]) -> u128 {
    let mut a = [0u8; TAIL];
    a.copy_from_slice(&w[..TAIL]);
    u128::from_le_bytes(a)
}

/// Scratch space of [`Matcher::scan_with`], reused across packets.
#[derive(Default)]
pub struct ScanScratch {
    folded: Vec<u8>,
    joined: Vec<u8>,
    at: Vec<u32>,
}

fn sid(v: u32) -> aho_corasick::automaton::StateID {
    aho_corasick::automaton::StateID::new(v as usize)
        .unwrap_or(aho_corasick::automaton::StateID::ZERO)
}

impl Matcher {
    /// Compiles `patterns` (each standing for its `targets`), ASCII
    /// case-insensitively if `nocase`.
    pub(crate) fn build(
        patterns: &[Vec<u8>],
        targets: Vec<Vec<Target>>,
        nocase: bool,
    ) -> Result<Self, CompileError> {
        Self::build_hashing_above(patterns, targets, nocase, HASH_ABOVE)
    }

    /// [`Matcher::build`], hashing when the DFA has more than
    /// `hash_above` bytes.
    fn build_hashing_above(
        patterns: &[Vec<u8>],
        targets: Vec<Vec<Target>>,
        nocase: bool,
        hash_above: usize,
    ) -> Result<Self, CompileError> {
        let dfa = DFA::builder()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(nocase)
            .start_kind(StartKind::Unanchored)
            .prefilter(false)
            .build(patterns)?;
        let start = dfa.start_state(Anchored::No)?;
        // Stored states come back from a shared store: remember every reachable one
        // so a corrupt value can never index outside the transition table. A
        // breadth-first walk from the start reaches each state first by its
        // own string (any other path to it reads a longer string ending in
        // that one), so its distance is its depth.
        let mut depth = FxHashMap::default();
        let mut todo = std::collections::VecDeque::from([start]);
        depth.insert(start.as_u32(), 0);
        while let Some(s) = todo.pop_front() {
            let ds = depth[&s.as_u32()];
            for b in 0..=255u8 {
                let n = dfa.next_state(Anchored::No, s, b);
                if let std::collections::hash_map::Entry::Vacant(e) = depth.entry(n.as_u32()) {
                    e.insert(ds + 1);
                    todo.push_back(n);
                }
            }
        }
        let fold = |p: &[u8]| {
            if nocase {
                p.to_ascii_lowercase()
            } else {
                p.to_vec()
            }
        };
        // A DFA that fits the caches is walked faster than bytes are hashed
        // (and walked in lockstep over a batch's flows); a larger one is
        // hashed.
        let big = dfa.memory_usage() > hash_above;
        let hash = (big && !patterns.iter().any(Vec::is_empty))
            .then(|| HashMpm::new(patterns.iter().map(|p| (&p[..], !nocase))));
        let mut inner = FxHashSet::default();
        for p in patterns {
            let p = fold(p);
            for w in p.windows(TAIL).skip(1) {
                inner.insert(window(w));
            }
        }
        let runs = targets
            .iter()
            .map(|t| vec![(0, 0, t.len() as u32)])
            .collect();
        Ok(Matcher {
            dfa,
            start: start.as_u32(),
            targets,
            runs,
            depth,
            hash,
            inner,
            nocase,
        })
    }

    /// Files each pattern's targets by their rule's flow group
    /// (`group_of[rule]`, [`crate::header::Headers::group_matches`]), so a
    /// scan can skip at once the targets of groups its stream cannot match
    /// ([`Matcher::scan_units`]'s `keep`). Without it every target is in
    /// group 0.
    pub(crate) fn with_groups(mut self, group_of: impl Fn(u32) -> u32) -> Self {
        for (ts, runs) in self.targets.iter_mut().zip(&mut self.runs) {
            ts.sort_by_key(|t| (group_of(t.rule), *t));
            runs.clear();
            let mut lo = 0;
            while lo < ts.len() {
                let g = group_of(ts[lo].rule);
                let mut hi = lo + 1;
                while hi < ts.len() && group_of(ts[hi].rule) == g {
                    hi += 1;
                }
                runs.push((g, lo as u32, hi as u32));
                lo = hi;
            }
        }
        self
    }

    /// Calls `hit(end, target)` for each target of pattern `pid` in a
    /// group `keep` accepts.
    #[inline]
    fn emit(
        &self,
        pid: usize,
        end: u64,
        keep: &mut impl FnMut(u32) -> bool,
        hit: &mut impl FnMut(u64, Target),
    ) {
        let ts = &self.targets[pid];
        for &(g, lo, hi) in &self.runs[pid] {
            if keep(g) {
                for t in &ts[lo as usize..hi as usize] {
                    hit(end, *t);
                }
            }
        }
    }

    /// Walks `bytes` from `state`, pushing `(end position, target)` for every
    /// pattern ending at a byte; `base` is the stream position of `bytes[0]`.
    #[inline]
    pub fn scan(&self, state: &mut u32, bytes: &[u8], base: u64, hits: &mut Vec<(u64, Target)>) {
        self.walk(state, bytes, base, &mut |_| true, |end, t| {
            hits.push((end, t))
        });
    }

    /// [`Matcher::scan`], calling `hit(end, target)` for each hit of a group
    /// `keep` accepts.
    #[inline]
    fn walk(
        &self,
        state: &mut u32,
        bytes: &[u8],
        base: u64,
        keep: &mut impl FnMut(u32) -> bool,
        mut hit: impl FnMut(u64, Target),
    ) {
        let d = &self.dfa;
        let mut s = sid(*state);
        let mut rest = bytes;
        // The hot loop only walks; match handling is out of line so the walk
        // compiles as tightly as the raw scan.
        while let Some((&b, tail)) = rest.split_first() {
            s = d.next_state(Anchored::No, s, b);
            rest = tail;
            if d.is_special(s) && d.is_match(s) {
                self.record(s, base + (bytes.len() - rest.len()) as u64, keep, &mut hit);
            }
        }
        *state = s.as_u32();
    }

    /// The same hits and final state as [`Matcher::scan`], the hits in
    /// another order, without walking most of the bytes. The DFA state
    /// stands for the longest suffix of the stream that begins a pattern,
    /// so:
    ///
    /// 1. the DFA walks from `state` only until its state's string lies
    ///    within `bytes` (a depth no greater than the bytes walked): no
    ///    pattern ending later began before `bytes`;
    /// 2. the hits ending after that are the patterns' occurrences inside
    ///    `bytes`, found by hashing ([`HashMpm`], a bit set in the caches
    ///    instead of a DFA of megabytes);
    /// 3. the state at the end is the DFA's from its start over the last
    ///    [`TAIL`] bytes, when those bytes are no pattern's substring but at
    ///    its start (then no longer suffix of the stream begins a pattern).
    ///
    /// Short walks and ends looking like a pattern's inside are walked
    /// whole. Only the targets of groups `keep` accepts are hit
    /// ([`Matcher::with_groups`]).
    pub fn scan_with(
        &self,
        state: &mut u32,
        bytes: &[u8],
        base: u64,
        scratch: &mut ScanScratch,
        keep: &mut impl FnMut(u32) -> bool,
        mut hit: impl FnMut(u64, Target),
    ) {
        if let Some(h) = self.scan_prefix(state, bytes, base, keep, &mut hit) {
            let Some(hm) = self.hash.as_ref() else {
                return;
            };
            HashMpm::fold(bytes, &mut scratch.folded);
            let folded = &scratch.folded;
            let from = h.saturating_sub(hm.max_len());
            hm.each(bytes, folded, from, &mut scratch.at, |pid, at| {
                self.hashed_hit(
                    hm,
                    (pid, pid),
                    (bytes, folded, at),
                    (h, base),
                    keep,
                    &mut hit,
                );
            });
            self.finish_hashed(state, bytes);
        }
    }

    /// Steps 1 and 2 of [`Matcher::scan_with`] up to the hashing: walks
    /// `bytes` whole (short ones, ends looking like a pattern's inside, a
    /// state whose string never lies within them) and returns `None`, or
    /// walks until the state's string lies within `bytes` and returns the
    /// bytes walked, `h`: the hits ending after `h` are the hashed search's
    /// (with [`Matcher::hashed_hit`]), then the state is
    /// [`Matcher::finish_hashed`]'s.
    fn scan_prefix(
        &self,
        state: &mut u32,
        bytes: &[u8],
        base: u64,
        keep: &mut impl FnMut(u32) -> bool,
        hit: &mut impl FnMut(u64, Target),
    ) -> Option<usize> {
        let n = bytes.len();
        if self.hash.is_none() || n < HYBRID_MIN {
            self.walk(state, bytes, base, keep, hit);
            return None;
        }
        let tail = &bytes[n - TAIL..];
        let w = if self.nocase {
            let mut f = [0u8; TAIL];
            for (d, s) in f.iter_mut().zip(tail) {
                *d = s.to_ascii_lowercase();
            }
            window(&f)
        } else {
            window(tail)
        };
        if self.inner.contains(&w) {
            self.walk(state, bytes, base, keep, hit);
            return None;
        }
        let d = &self.dfa;
        let mut s = sid(*state);
        let mut h = 0;
        while h < n && self.depth.get(&s.as_u32()).is_none_or(|&k| k as usize > h) {
            s = d.next_state(Anchored::No, s, bytes[h]);
            h += 1;
            if d.is_special(s) && d.is_match(s) {
                self.record(s, base + h as u64, keep, hit);
            }
        }
        if h == n {
            *state = s.as_u32();
            return None;
        }
        Some(h)
    }

    /// A candidate of the hashed search: pattern `pid` of the set `hm`
    /// (this matcher's own pattern `own`) may start at `at` in `bytes`
    /// (`folded`: [`HashMpm::fold`] of them). Hits it if it does, ends
    /// after `h` (the bytes the DFA walked) and has targets in a group
    /// `keep` accepts.
    #[inline]
    fn hashed_hit(
        &self,
        hm: &HashMpm,
        (pid, own): (u32, u32),
        (bytes, folded, at): (&[u8], &[u8], usize),
        (h, base): (usize, u64),
        keep: &mut impl FnMut(u32) -> bool,
        hit: &mut impl FnMut(u64, Target),
    ) {
        let end = at + hm.pattern_len(pid);
        // A pattern whose every target is in a group refused is not even
        // verified (ET's one-byte contents of SMB rules on web traffic).
        if end > h
            && self.runs[own as usize].iter().any(|r| keep(r.0))
            && hm.is_at(pid, bytes, folded, at)
        {
            self.emit(own as usize, base + end as u64, keep, hit);
        }
    }

    /// Step 3 of [`Matcher::scan_with`]: the state after `bytes` (hashed),
    /// the DFA's from its start over their last [`TAIL`] bytes.
    fn finish_hashed(&self, state: &mut u32, bytes: &[u8]) {
        let d = &self.dfa;
        let mut s = sid(self.start);
        for &b in &bytes[bytes.len() - TAIL..] {
            s = d.next_state(Anchored::No, s, b);
        }
        *state = s.as_u32();
    }

    /// [`Matcher::scan_with`] over `parts` (contiguous in the stream, joined
    /// in `scratch` when both have bytes), each hit with the part it ends
    /// in.
    fn scan_parts(
        &self,
        state: &mut u32,
        parts: [&[u8]; 2],
        base: u64,
        scratch: &mut ScanScratch,
        keep: &mut impl FnMut(u32) -> bool,
        mut hit: impl FnMut(u8, u64, Target),
    ) {
        let [a, b] = parts;
        let own_end = base + a.len() as u64;
        let mut joined = std::mem::take(&mut scratch.joined);
        let bytes = if b.is_empty() {
            a
        } else if a.is_empty() {
            b
        } else {
            joined.clear();
            joined.extend_from_slice(a);
            joined.extend_from_slice(b);
            &joined[..]
        };
        self.scan_with(state, bytes, base, scratch, keep, |end, t| {
            hit((end > own_end) as u8, end, t)
        });
        scratch.joined = joined;
    }

    #[cold]
    #[inline(never)]
    fn record(
        &self,
        s: aho_corasick::automaton::StateID,
        end: u64,
        keep: &mut impl FnMut(u32) -> bool,
        hit: &mut impl FnMut(u64, Target),
    ) {
        let d = &self.dfa;
        for k in 0..d.match_len(s) {
            let pid = d.match_pattern(s, k);
            self.emit(pid.as_usize(), end, keep, hit);
        }
    }

    /// Scans a batch's streams ([`Matcher::scan_with`] on each job).
    ///
    /// `units[u]` is a range of `jobs` that continue one stream (one flow direction)
    /// and are walked in order from `starts[u]` (or from the start state for a job
    /// with `reset`). Each job's state before and after is written to `out[job]`;
    /// hits are pushed as `(job, part, end, target)`, those of the targets
    /// of groups `keep(job, group)` accepts ([`Matcher::with_groups`]).
    pub fn scan_units(
        &self,
        units: &[(usize, usize)],
        starts: &[u32],
        jobs: &[Job<'_>],
        out: &mut [(u32, u32)],
        (hits, scratch): (&mut Vec<(u32, u8, u64, Target)>, &mut ScanScratch),
        keep: &mut impl FnMut(u32, u32) -> bool,
    ) {
        if self.hash.is_none() {
            return self.scan_units_lanes(units, starts, jobs, out, hits, keep);
        }
        for (u, &(lo, hi)) in units.iter().enumerate() {
            let mut s = starts[u];
            for (j, job) in jobs.iter().enumerate().take(hi).skip(lo) {
                if job.reset {
                    s = self.start;
                }
                out[j].0 = s;
                let mut keep_j = |g| keep(j as u32, g);
                self.scan_parts(
                    &mut s,
                    job.parts,
                    job.base,
                    scratch,
                    &mut keep_j,
                    |part, end, t| hits.push((j as u32, part, end, t)),
                );
                out[j].1 = s;
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
    fn scan_units_lanes(
        &self,
        units: &[(usize, usize)],
        starts: &[u32],
        jobs: &[Job<'_>],
        out: &mut [(u32, u32)],
        hits: &mut Vec<(u32, u8, u64, Target)>,
        keep: &mut impl FnMut(u32, u32) -> bool,
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
                            self.record_job(st[k], (l.job as u32, l.part as u8, end), hits, keep);
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
                            self.record_job(s, (l.job as u32, l.part as u8, end), hits, keep);
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
        (job, part, end): (u32, u8, u64),
        hits: &mut Vec<(u32, u8, u64, Target)>,
        keep: &mut impl FnMut(u32, u32) -> bool,
    ) {
        let d = &self.dfa;
        for k in 0..d.match_len(s) {
            let pid = d.match_pattern(s, k);
            self.emit(pid.as_usize(), end, &mut |g| keep(job, g), &mut |e, t| {
                hits.push((job, part, e, t))
            });
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
        self.depth.contains_key(&s)
    }

    /// Number of DFA states.
    pub fn states(&self) -> usize {
        self.depth.len()
    }
}

/// The two stream matchers (case-sensitive, `nocase`) hashed together
/// ([`scan_units_pair`]).
pub struct Pair {
    /// Both matchers' patterns: the case-sensitive one's, then the other's.
    both: HashMpm,
    /// Patterns of the case-sensitive matcher.
    ncs: u32,
}

impl Pair {
    /// The pair of `cs` and `ci` (their patterns `cp` and `ip`) if both are
    /// searched by hashing: then one pass over a packet's bytes finds the
    /// candidates of both, instead of one pass each.
    pub(crate) fn new(cs: &Matcher, ci: &Matcher, cp: &[Vec<u8>], ip: &[Vec<u8>]) -> Option<Pair> {
        (cs.hash.is_some() && ci.hash.is_some() && !cs.nocase && ci.nocase).then(|| Pair {
            // Short patterns hashed with the job's view: docs/FUNCTIONS.md,
            // "Vectorscan".
            both: HashMpm::with_engine(
                cp.iter()
                    .map(|p| (&p[..], true))
                    .chain(ip.iter().map(|p| (&p[..], false))),
                Search::Split,
            ),
            ncs: cp.len() as u32,
        })
    }
}

/// [`Matcher::scan_units`] of both `ms` (case-sensitive, `nocase`) over the
/// same jobs, each from its own `starts` into its own `outs`: the same hits
/// and states, with one hashed pass over a job's bytes for both where both
/// hash it ([`Matcher::scan_prefix`]), not one each.
#[allow(clippy::too_many_arguments)] // both matchers' inputs and outputs
pub(crate) fn scan_units_pair(
    ms: [&Matcher; 2],
    pair: &Pair,
    units: &[(usize, usize)],
    starts: [&[u32]; 2],
    jobs: &[Job<'_>],
    outs: [&mut [(u32, u32)]; 2],
    (hits, scratch): (&mut Vec<(u32, u8, u64, Target)>, &mut ScanScratch),
    keep: &mut impl FnMut(u32, u32) -> bool,
    (view_of, stages): (&[u32], &[FirstStage]),
) {
    let [cs, ci] = ms;
    let [out_cs, out_ci] = outs;
    let both = &pair.both;
    let mut joined = std::mem::take(&mut scratch.joined);
    for (u, &(lo, hi)) in units.iter().enumerate() {
        let mut s = [starts[0][u], starts[1][u]];
        for (j, job) in jobs.iter().enumerate().take(hi).skip(lo) {
            if job.reset {
                s = [cs.start, ci.start];
            }
            out_cs[j].0 = s[0];
            out_ci[j].0 = s[1];
            let [a, b] = job.parts;
            let bytes = if b.is_empty() {
                a
            } else if a.is_empty() {
                b
            } else {
                joined.clear();
                joined.extend_from_slice(a);
                joined.extend_from_slice(b);
                &joined[..]
            };
            let (base, own_end) = (job.base, job.base + a.len() as u64);
            let keep = &mut |g| keep(j as u32, g);
            let hit = &mut |end: u64, t| hits.push((j as u32, (end > own_end) as u8, end, t));
            let hc = cs.scan_prefix(&mut s[0], bytes, base, keep, hit);
            let hi = ci.scan_prefix(&mut s[1], bytes, base, keep, hit);
            if hc.is_none() && hi.is_none() {
                out_cs[j].1 = s[0];
                out_ci[j].1 = s[1];
                continue;
            }
            HashMpm::fold(bytes, &mut scratch.folded);
            let folded = &scratch.folded[..];
            // A matcher walked whole takes no hashed hit (its `h` past
            // every end).
            let (h0, h1) = (hc.unwrap_or(usize::MAX), hi.unwrap_or(usize::MAX));
            let from = h0.min(h1).saturating_sub(both.max_len());
            // The job's view, if it has one: the first stage of only the
            // patterns with a target in a group its flow direction matches
            // ([`crate::views`]), the others' hits being dropped anyway.
            let first = view_of
                .get(j)
                .and_then(|&v| stages.get(v as usize))
                .unwrap_or(both.first());
            both.each_in(first, bytes, folded, from, &mut scratch.at, |pid, at| {
                let (m, own, h) = if pid < pair.ncs {
                    (cs, pid, h0)
                } else {
                    (ci, pid - pair.ncs, h1)
                };
                m.hashed_hit(both, (pid, own), (bytes, folded, at), (h, base), keep, hit);
            });
            match (hc.is_some(), hi.is_some()) {
                (true, true) => finish_both([cs, ci], &mut s, bytes),
                (true, false) => cs.finish_hashed(&mut s[0], bytes),
                (false, true) => ci.finish_hashed(&mut s[1], bytes),
                (false, false) => {}
            }
            out_cs[j].1 = s[0];
            out_ci[j].1 = s[1];
        }
    }
    scratch.joined = joined;
}

/// [`Matcher::finish_hashed`] of both matchers over the same `bytes`, the
/// two walks interleaved: each step of a walk over a DFA of megabytes
/// waits on a cache miss, and two independent walks wait on theirs at the
/// same time.
fn finish_both(ms: [&Matcher; 2], states: &mut [u32; 2], bytes: &[u8]) {
    let [a, b] = ms;
    let (mut sa, mut sb) = (sid(a.start), sid(b.start));
    for &x in &bytes[bytes.len() - TAIL..] {
        sa = a.dfa.next_state(Anchored::No, sa, x);
        sb = b.dfa.next_state(Anchored::No, sb, x);
    }
    *states = [sa.as_u32(), sb.as_u32()];
}

/// Streams walked in lockstep by [`Matcher::scan_units`] (a DFA walked byte by byte).
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
    /// Both hashed together, when both hash ([`scan_units_pair`]).
    pair: Option<Pair>,
    /// The classes of flow directions the flow groups of the stream
    /// patterns' rules tell apart ([`crate::views`]).
    classes: crate::header::FlowClasses,
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
    /// Buffer and packetwise rules with a fast pattern in the automata, per
    /// packet class: the candidates when the prefilter is off
    /// ([`Engine::fast_rules`]).
    fast: [Vec<u32>; 4],
    /// Per rule: [`Rule::packetwise`]. Over TCP their hits never feed the
    /// streaming match; a hit of their trigger inside a segment's own payload
    /// makes them candidates for an inspection of that payload.
    pub packetwise: Vec<bool>,
    /// True if a rule is packetwise or dual: segments' own payloads are
    /// inspected.
    pub any_packetwise: bool,
    /// True if a rule has a packet-header buffer ([`crate::pkthdr`]): the
    /// headers a reassembler rewrote are read as they arrived.
    pub any_hdr: bool,
    /// True if a rule has `decode-event` ([`crate::decode_events`]): the
    /// packets' decoder events are decided for it, and the frames the
    /// chain's parse refused are inspected too ([`crate::Ips`]).
    pub any_decode: bool,
    /// The rules with `decode-event` and an `ip` (or `pkthdr`) header: the
    /// candidates on a frame whose IP header did not decode, which has no
    /// addresses or ports to look them up by.
    pub decode_ip_rules: Vec<u32>,
    /// True if a rule has a `stream-event` condition: the reassembler
    /// decides stream events for this IPS's packets.
    pub any_stream_event: bool,
    /// True if a rule has an `app-layer-event:applayer_*` condition: the
    /// protocol detection runs and decides each packet's events
    /// ([`crate::alproto::on_bytes`]).
    pub any_applayer_event: bool,
    /// True if an `ip` rule has `flow:established` or `not_established`:
    /// flows of every protocol but TCP then track traffic both ways, as
    /// UDP's always do ([`SEEN_REV`]).
    pub ip_established: bool,
    /// Per rule: [`Rule::dual`]. Matched on the stream like any stream rule,
    /// and a hit of its [`Engine::dual_trigger`] inside a segment's own
    /// payload also makes it a candidate for an inspection of that payload.
    pub dual: Vec<bool>,
    /// Per rule: the content of a dual rule whose hit makes it a candidate
    /// for a segment's inspection (its last positive one), or [`NO_TRIGGER`].
    pub dual_trigger: Vec<u8>,
    /// The dual rules over TCP (candidates when the prefilter is off).
    pub dual_rules: Vec<u32>,
    /// Per rule: the content whose hit makes the rule a candidate for a buffer
    /// inspection ([`NO_TRIGGER`]: none). A match inside one buffer contains
    /// every positive content, so one of them is enough: for a buffer or
    /// packetwise rule its fast pattern, the only one of its contents in
    /// the automata; for a streaming multi-content rule the last one.
    pub trigger: Vec<u8>,
    /// Per rule: its `flowbits`, names as ids.
    flowbits: Vec<Vec<(FbOp, Vec<u16>)>>,
    /// The DNS rules' prefilter (they are not in the automata above).
    pub dns: DnsRules,
    /// The HTTP rules' prefilter (likewise).
    pub http: HttpRules,
    /// The TLS rules' prefilter (likewise).
    pub tls: TlsRules,
    /// The rules of the flow's TLS handshake state ([`Rule::tls_flow`]),
    /// evaluated on every TCP packet of a flow with that state.
    pub tls_flow: Vec<u32>,
    /// The rules of HTTP body events ([`Rule::http_body_events`]): fired
    /// where a direction's framing ends on a chunk-size line libhtp
    /// refuses, or where a body's inflating fails.
    pub http_body_ev: Vec<u32>,
    /// True if a rule asks for a ClientHello event (SNI, lengths): hellos
    /// are then read for them ([`crate::tls::events::client_hello_events`]).
    pub tls_hello_events: bool,
    /// The `smtp` rules on `file_data`, inspected on attachments
    /// ([`crate::smtp`]); few, so each is inspected on every one.
    pub smtp_files: Vec<u32>,
    /// The `ssh` rules on `ssh.proto` or `ssh.software`, inspected on each
    /// identification string.
    pub ssh_ids: Vec<u32>,
    /// The `ssh` rules on banner events ([`Rule::ssh_events`]), evaluated
    /// on every packet of an SSH flow that raised one ([`crate::ssh`]).
    pub ssh_ev: Vec<u32>,
    /// The `ftp` rules on line events ([`Rule::ftp_events`]), fired where
    /// a line reaches the FTP parser's bound ([`crate::ftp`]).
    pub ftp_ev: Vec<u32>,
    /// Flowbit names, by id.
    pub flowbit_names: Vec<String>,
    /// The rules' `flowint` keywords ([`crate::flowint`]).
    pub flowints: crate::flowint::Flowints,
    /// The rules' headers, compiled ([`crate::header`]).
    headers: crate::header::Headers,
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
        let mut fast_rules: [Vec<u32>; 4] = Default::default();
        let packetwise: Vec<bool> = rules.iter().map(Rule::packetwise).collect();
        let dual: Vec<bool> = rules.iter().map(Rule::dual).collect();
        let mut dual_trigger = Vec::with_capacity(rules.len());
        let mut dual_rules = Vec::new();
        let mut trigger = Vec::with_capacity(rules.len());
        let mut names: FxHashMap<String, u16> = FxHashMap::default();
        let mut flowbit_names = Vec::new();
        let mut flowbits = Vec::with_capacity(rules.len());
        let flowints = crate::flowint::Flowints::new(&rules);
        for (ri, r) in rules.iter().enumerate() {
            let classes: &[usize] = match r.proto {
                // Inspected on SMTP attachments only ([`crate::smtp`]), or
                // on SSH identification strings.
                _ if r.smtp_file.is_some()
                    || !r.ssh.is_empty()
                    || r.ssh_events != 0
                    || r.ftp_events != 0 =>
                {
                    &[]
                }
                // `smtp`, `ftp`, `smb`: stream rules like `tcp` ones, their
                // header also asking for the flow's detected protocol.
                Proto::Tcp | Proto::Smtp | Proto::Ftp | Proto::Smb | Proto::Ssh => &[0],
                Proto::Udp => &[1],
                Proto::Icmp => &[2],
                Proto::Ip => &[0, 1, 2, 3],
                // Inspected on DNS messages, HTTP messages and TLS hellos
                // only ([`DnsRules`], [`HttpRules`], [`TlsRules`]).
                Proto::Dns | Proto::Http | Proto::Tls => &[],
            };
            // Contents on `base64_data` are in decoded bytes, never in the
            // stream: they cannot trigger a rule.
            let last_positive = r
                .contents
                .iter()
                .rposition(|c| !c.negated && c.in_payload());
            let multi_relative = r.contents.len() > 1 && r.contents.iter().any(|c| c.is_relative());
            let pw = packetwise[ri];
            // A buffer or packetwise rule is never matched by the streaming
            // automata ([`Engine::on_hit`]): a hit only makes it a candidate
            // for an inspection of the packet's bytes, where a match holds
            // every positive content. One content is enough, and only its
            // fast pattern is in the automata: the fewer the patterns, the
            // smaller the DFAs every stream byte walks.
            let fp_only = !r.app_layer() && (r.buffer || pw);
            let fast = if fp_only {
                stream_fast_pattern(r)
            } else {
                None
            };
            if fast.is_some() {
                for &c in classes {
                    fast_rules[c].push(ri as u32);
                }
            }
            // A buffer rule has its fast pattern alone in the automata.
            dual_trigger.push(match (fast, last_positive) {
                _ if !dual[ri] => NO_TRIGGER,
                (Some(f), _) => f as u8,
                (None, Some(k)) => k as u8,
                (None, None) => NO_TRIGGER,
            });
            if dual[ri] && last_positive.is_some() && classes.contains(&0) {
                dual_rules.push(ri as u32);
            }
            trigger.push(match (fast, last_positive) {
                (Some(f), _) => f as u8,
                (None, Some(k)) if !r.app_layer() && (r.buffer || multi_relative || pw) => k as u8,
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
                if c.negated || !c.in_payload() || r.app_layer() || (fp_only && fast != Some(ci)) {
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
        let headers = crate::header::Headers::new(&rules);
        let group_of = |r: u32| headers.group_of(r);
        let cs = if cp.is_empty() {
            None
        } else {
            Some(Matcher::build(&cp, ct, false)?.with_groups(group_of))
        };
        let ci = if ip.is_empty() {
            None
        } else {
            Some(Matcher::build(&ip, it, true)?.with_groups(group_of))
        };
        let pair = match (&cs, &ci) {
            (Some(c), Some(i)) => Pair::new(c, i, &cp, &ip),
            _ => None,
        };
        let mut used: Vec<u32> = [&cs, &ci]
            .into_iter()
            .flatten()
            .flat_map(|m| m.runs.iter().flatten().map(|r| r.0))
            .collect();
        used.sort_unstable();
        used.dedup();
        let classes = headers.flow_classes(used);
        let dns = DnsRules::new(&rules)?;
        let http = HttpRules::new(&rules)?;
        let tls = TlsRules::new(&rules)?;
        let tls_flow = (0..rules.len() as u32)
            .filter(|&r| rules[r as usize].tls_flow)
            .collect();
        let hello = crate::tls::events::HELLO_EVENTS;
        let tls_hello_events = rules.iter().any(|r| r.tls_events & hello != 0);
        let http_body_ev = (0..rules.len() as u32)
            .filter(|&r| rules[r as usize].http_body_events != 0)
            .collect();
        let smtp_files = (0..rules.len() as u32)
            .filter(|&r| rules[r as usize].smtp_file.is_some())
            .collect();
        let ssh_ids = (0..rules.len() as u32)
            .filter(|&r| !rules[r as usize].ssh.is_empty())
            .collect();
        let ftp_ev = (0..rules.len() as u32)
            .filter(|&r| rules[r as usize].ftp_events != 0)
            .collect();
        let ssh_ev = (0..rules.len() as u32)
            .filter(|&r| rules[r as usize].ssh_events != 0)
            .collect();
        let any_packetwise = packetwise.iter().any(|&pw| pw) || !dual_rules.is_empty();
        let any_hdr = rules.iter().any(|r| !r.hdr.is_empty());
        let any_decode = rules.iter().any(|r| !r.decode_event.is_empty());
        let decode_ip_rules = (0..rules.len() as u32)
            .filter(|&r| {
                let r = &rules[r as usize];
                !r.decode_event.is_empty() && r.proto == crate::rules::Proto::Ip
            })
            .collect();
        let any_stream_event = rules.iter().any(|r| r.checks.stream_events != 0);
        let any_applayer_event = rules.iter().any(|r| r.checks.applayer_events != 0);
        let ip_established = rules
            .iter()
            .any(|r| r.proto == crate::rules::Proto::Ip && (r.established || r.not_established));
        let packet_rules = packet_rules.map(|ids| PacketRules::new(&rules, &ids));
        Ok(Engine {
            headers,
            classes,
            always_pkt,
            fast: fast_rules,
            packetwise,
            any_packetwise,
            any_hdr,
            any_decode,
            decode_ip_rules,
            any_stream_event,
            any_applayer_event,
            ip_established,
            dual,
            dual_trigger,
            dual_rules,
            dns,
            http,
            tls,
            tls_flow,
            http_body_ev,
            tls_hello_events,
            smtp_files,
            ssh_ids,
            ssh_ev,
            ftp_ev,
            rules,
            cs,
            ci,
            pair,
            packet_rules,
            always,
            trigger,
            flowbits,
            flowbit_names,
            flowints,
        })
    }

    /// [`Matcher::scan_units`] of both stream matchers over `jobs`
    /// (`starts` and `outs` per matcher: case-sensitive, `nocase`), in one
    /// hashed pass per job when both hash ([`scan_units_pair`]).
    #[allow(clippy::too_many_arguments)] // both matchers' inputs and outputs
    pub(crate) fn scan_units(
        &self,
        units: &[(usize, usize)],
        starts: [&[u32]; 2],
        jobs: &[Job<'_>],
        outs: [&mut [(u32, u32)]; 2],
        (hits, scratch): (&mut Vec<(u32, u8, u64, Target)>, &mut ScanScratch),
        keep: &mut impl FnMut(u32, u32) -> bool,
        views: (&[u32], &[FirstStage]),
    ) {
        let [out_cs, out_ci] = outs;
        if let (Some(cs), Some(ci), Some(p)) = (&self.cs, &self.ci, &self.pair) {
            let outs = [out_cs, out_ci];
            return scan_units_pair(
                [cs, ci],
                p,
                units,
                starts,
                jobs,
                outs,
                (hits, scratch),
                keep,
                views,
            );
        }
        if let Some(m) = &self.cs {
            m.scan_units(
                units,
                starts[0],
                jobs,
                out_cs,
                (&mut *hits, &mut *scratch),
                keep,
            );
        }
        if let Some(m) = &self.ci {
            m.scan_units(units, starts[1], jobs, out_ci, (hits, scratch), keep);
        }
    }

    /// The class of flow direction `flow`, `to_server` for the stream
    /// pre-scan's views ([`crate::views`]); None if the stream patterns are
    /// not searched in one hashed pass (no view is used).
    pub(crate) fn view_key(
        &self,
        flow: &FlowKey,
        to_server: bool,
    ) -> Option<crate::header::ClassKey> {
        self.pair.as_ref()?;
        Some(self.classes.key(flow, to_server))
    }

    /// Sets in `set` (a bit per flow group, cleared first) the groups that
    /// accept flow direction `flow`, `to_server` as a stream's.
    pub(crate) fn accepted_groups(&self, flow: &FlowKey, to_server: bool, set: &mut Vec<u64>) {
        let n = self.headers.groups();
        set.clear();
        set.resize(n.div_ceil(64), 0);
        for g in 0..n {
            if self.headers.group_matches(g as u32, flow, true, to_server) {
                set[g / 64] |= 1 << (g % 64);
            }
        }
    }

    /// The first stage of the stream patterns with a target in a group of
    /// `set` ([`Engine::accepted_groups`]); None without a hashed pair.
    pub(crate) fn view_stage(&self, set: &[u64]) -> Option<FirstStage> {
        let (p, cs, ci) = (self.pair.as_ref()?, self.cs.as_ref()?, self.ci.as_ref()?);
        let has = |g: u32| {
            set.get(g as usize / 64)
                .is_some_and(|w| w >> (g % 64) & 1 != 0)
        };
        Some(p.both.first_stage(|pid| {
            let (m, own) = if pid < p.ncs {
                (cs, pid)
            } else {
                (ci, pid - p.ncs)
            };
            m.runs[own as usize].iter().any(|r| has(r.0))
        }))
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

    /// Scans `bytes` (at stream position `base`) from `ds`'s automaton states
    /// ([`Matcher::scan_with`]).
    #[inline]
    pub fn scan(
        &self,
        ds: &mut DirState,
        bytes: &[u8],
        base: u64,
        (hits, scratch): (&mut Vec<(u64, Target)>, &mut ScanScratch),
    ) {
        let all = &mut |_| true;
        if let Some(m) = &self.cs {
            m.scan_with(&mut ds.cs, bytes, base, scratch, all, |e, t| {
                hits.push((e, t))
            });
        }
        if let Some(m) = &self.ci {
            m.scan_with(&mut ds.ci, bytes, base, scratch, all, |e, t| {
                hits.push((e, t))
            });
        }
    }

    /// True if HTTP is parsed at all: a rule inspects HTTP messages or
    /// asks for a body event ([`Engine::http_body_ev`]).
    #[inline]
    pub fn parses_http(&self) -> bool {
        !self.http.is_empty() || !self.http_body_ev.is_empty()
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

    /// The buffer and packetwise rules of packets of `ip_proto` found
    /// through their fast pattern in the automata, in order: what the
    /// prefilter narrows to the rules whose fast pattern is in the bytes.
    #[inline]
    pub fn fast_rules(&self, ip_proto: u8) -> &[u32] {
        &self.fast[packet_class(ip_proto)]
    }

    /// The packetwise rules inspected over every TCP segment's payload.
    #[inline]
    pub fn always_packetwise(&self) -> &[u32] {
        &self.always_pkt
    }

    /// True if rule group `group`'s rules may match stream bytes of flow
    /// `flow` as it travelled ([`crate::header::Headers::group_matches`]);
    /// the groups are those [`Matcher::scan_units`]'s `keep` is asked about.
    #[inline]
    pub fn group_matches(&self, group: u32, flow: &FlowKey, to_server: bool) -> bool {
        self.headers.group_matches(group, flow, true, to_server)
    }

    /// True if the header of rule `rule` matches.
    #[inline]
    pub fn header_matches(&self, rule: u32, hdr: &Header) -> bool {
        self.headers.matches(&self.rules, rule, hdr)
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
        self.headers.matches(&self.rules, rule, hdr)
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
        if r.buffer || self.packetwise[t.rule as usize] || !self.header_matches(t.rule, hdr) {
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

/// The content of a buffer or packetwise rule its hits in the stream
/// automata stand for: the positive content marked `fast_pattern`, else the
/// longest positive one (the first of equals), as Suricata picks its fast
/// pattern. The whole content, not a `fast_pattern:offset,length` chop, so
/// a hit's end and length are the content's. `None` without a positive
/// content.
fn stream_fast_pattern(r: &Rule) -> Option<usize> {
    let positive = || {
        r.contents
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.negated && c.in_payload())
    };
    positive()
        .find(|(_, c)| c.fast_pattern)
        .or_else(|| {
            positive().fold(
                None,
                |best: Option<(usize, &crate::rules::Content)>, x| match best {
                    Some(b) if b.1.bytes.len() >= x.1.bytes.len() => Some(b),
                    _ => Some(x),
                },
            )
        })
        .map(|(i, _)| i)
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
    /// The flow's detected stream protocol ([`crate::applayer`]).
    pub app: u8,
    /// What `app-layer-protocol` reads ([`crate::alproto`]).
    pub alp: crate::alproto::Flow,
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
/// A datagram flow (UDP) had a packet from the lower of its two endpoints
/// (address, then port: [`sluice_wire::FlowKey::canonical`]'s forward side).
pub const SEEN_FWD: u8 = 4;
/// A datagram flow had a packet from the higher endpoint. With both seen the
/// flow is established, as Suricata's UDP flows are once traffic went both
/// ways (the first reply is established itself): `flow:established` and
/// `not_established` of `udp` and `dns` rules read it.
pub const SEEN_REV: u8 = 8;
/// A response raised `http.too_many_encoding_layers`, owed to the
/// `to_server` rules on it at the client's next packet ([`OWED_CE`]).
pub const OWED_TOO_MANY: u8 = 16;
/// A response raised `http.abnormal_ce_header`, likewise owed.
pub const OWED_ABNORMAL: u8 = 32;
/// The Content-Encoding events a response raised for `to_server` rules
/// (Suricata's own `http-events.rules` lines are `to_server`; replayed as
/// an IDS, Suricata fires them on the client's acknowledgement of the
/// response): kept in the flow's flags until the client's next packet
/// fires the rules ([`crate::rules::Rule::http_body_events`]).
pub const OWED_CE: u8 = OWED_TOO_MANY | OWED_ABNORMAL;
/// The response being received has a `Content-Range` that raises
/// `http.range_invalid` on its body's first bytes ([`crate::http::range`]):
/// set at its head, spent by its body's first bytes or its end.
pub const RANGE_BAD: u8 = 64;
/// A response raised `http.range_invalid`, owed to the `to_server` rules
/// on it at the client's next packet, as [`OWED_CE`].
pub const OWED_RANGE: u8 = 128;
/// Every event owed to `to_server` rules at the client's next packet.
pub const OWED: u8 = OWED_CE | OWED_RANGE;

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
    /// The flow's stream protocol as detected by content
    /// ([`crate::applayer`]: undecided, smtp, ftp, smb, other).
    pub app: u8,
    /// On an SSH flow, the banner events raised and which directions'
    /// packets saw them ([`crate::ssh`]; 4 bits, kept in `app`'s byte).
    pub ssh_ev: u8,
    /// On another flow, the current response transaction's `100 Continue`
    /// state (bit 0: a `100` answered the request; bit 1: its
    /// `http.100_continue_already_seen` was raised), kept in the same half
    /// of `app`'s byte as `ssh_ev`.
    pub http_cont: u8,
    /// The flow's `flowint` variables (both directions share them).
    pub ints: FlowInts,
    /// Per direction, the protocol detected for `app-layer-protocol` and
    /// its detection flag's countdown ([`crate::alproto`]).
    pub alp: [u8; 2],
    /// The TLS handshake state `ssl_state` and `ssl_version` read
    /// ([`crate::tls::legacy::TlsFlow`]; kept only when a loaded rule
    /// needs it).
    pub tls: crate::tls::legacy::TlsFlow,
}

/// Version 2 added the flowbits, version 3 the HTTP framing, version 4 the
/// pending units, version 5 the pending HTTP body
/// ([`crate::pending::HTTP_BODY`]), version 6 the detected stream protocol
/// ([`crate::applayer`]), version 7 the flowint variables
/// ([`crate::flowint`]), version 8 the detected protocol SSH
/// ([`crate::applayer::SSH`], refused in older records), version 9 the
/// pending SMTP reader ([`crate::pending::SMTP`]), version 10 each
/// direction's protocol for `app-layer-protocol` ([`crate::alproto`]);
/// older records still decode (without them: a flow recorded before stays
/// unknown to `app-layer-protocol`, its first bytes being past), version 11
/// the TLS handshake state ([`crate::tls::legacy::TlsFlow`]), written last
/// and only for a flow that has one (a record without it reads as none),
/// version 12 the TLS events' state in it ([`crate::tls::events`]),
/// version 13 the SSH banner events ([`crate::ssh`]) in the upper half of
/// the detected protocol's byte, version 14 an FTP line's start as a
/// pending unit without bytes ([`crate::pending::FTP`]), version 15 an
/// HTTP flow's `100 Continue` state in the upper half of the detected
/// protocol's byte ([`FlowState::http_cont`]).
const VERSION: u8 = 15;

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
        let high = if self.app == crate::applayer::SSH {
            self.ssh_ev
        } else {
            self.http_cont
        };
        w.u8(self.app | (high << 4));
        self.ints.encode(w);
        w.u8(self.alp[0]).u8(self.alp[1]);
        if !self.tls.is_empty() {
            self.tls.encode(w);
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
                *p = Pend::decode(r, version)?;
            }
        }
        if version >= 6 {
            s.app = r.u8()?;
            if version >= 13 {
                let high = s.app >> 4;
                s.app &= 0x0f;
                if s.app == crate::applayer::SSH {
                    s.ssh_ev = high;
                } else if version >= 15 {
                    s.http_cont = high;
                } else if high != 0 {
                    return Err(DecodeError("ssh events on a flow not detected as ssh"));
                }
            }
            if !crate::applayer::valid(s.app) || (s.app == crate::applayer::SSH && version < 8) {
                return Err(DecodeError("unknown ips stream protocol"));
            }
        }
        if version >= 7 {
            s.ints = FlowInts::decode(r)?;
        }
        if version >= 10 {
            for (d, a) in s.alp.iter_mut().enumerate() {
                *a = r.u8()?;
                if !crate::alproto::valid(*a, d) {
                    return Err(DecodeError("unknown ips app-layer-protocol state"));
                }
            }
        }
        if version >= 11 {
            let rest = r.rest();
            if !rest.is_empty() {
                let mut t = Reader::new(rest);
                s.tls = crate::tls::legacy::TlsFlow::decode(&mut t, version >= 12)?;
                t.finish()?;
            }
        }
        Ok(s)
    }
}

/// Encoded size of a record with `partial` partial matches in total over both
/// directions, no flowbit set (each adds 2 bytes), no flowint variable
/// (each adds 6, [`FlowInts::encoded_len`]), no
/// HTTP message being framed (each direction that is adds 15 bytes,
/// [`HttpDir::encoded_len`]) and no pending unit (each direction with one
/// adds 8 bytes, [`Pend::encoded_len`]).
pub const fn record_size(partial: usize) -> usize {
    11 + 2 * 10 + 2 + 2 + 1 + 1 + 2 + 13 * partial
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Matcher::scan_with`] gives the hits and final states of the plain
    /// walk, packet after packet of a stream: patterns straddling packets,
    /// packets ending inside a pattern (a deep state), long patterns (their
    /// insides at a packet's end make it walk whole), both cases.
    #[test]
    fn hashed_scan_is_the_walk() {
        let mut rng = crate::testrng::Lcg::new(5);
        let mut rnd = |n: u64| rng.below(n);
        const ABC: &[u8] = b"abAB\x00\xff-";
        let mut scratch = ScanScratch::default();
        let (mut hashed, mut whole) = (0, 0);
        for round in 0..60 {
            let nocase = round % 2 == 0;
            let npats = 1 + rnd(if round % 3 == 0 { 200 } else { 20 }) as usize;
            let mut patterns: Vec<Vec<u8>> = Vec::new();
            for _ in 0..npats {
                let len = if rnd(4) == 0 {
                    17 + rnd(40)
                } else {
                    1 + rnd(8)
                } as usize;
                let p: Vec<u8> = (0..len)
                    .map(|_| ABC[rnd(ABC.len() as u64) as usize])
                    .collect();
                let p = if nocase { p.to_ascii_lowercase() } else { p };
                if !patterns.contains(&p) {
                    patterns.push(p);
                }
            }
            let targets = (0..patterns.len())
                .map(|i| {
                    vec![Target {
                        rule: i as u32,
                        content: 0,
                    }]
                })
                .collect();
            let m = Matcher::build_hashing_above(&patterns, targets, nocase, 0).unwrap();
            assert!(m.hash.is_some());
            for _ in 0..20 {
                let (mut a, mut b) = (m.start(), m.start());
                let mut base = 0u64;
                for _ in 0..6 {
                    // Random bytes, with patterns and pieces of them.
                    let mut pkt = Vec::new();
                    let len = rnd(400) as usize;
                    while pkt.len() < len {
                        if rnd(3) == 0 {
                            let p = &patterns[rnd(patterns.len() as u64) as usize];
                            let from = rnd(p.len() as u64) as usize;
                            let to = from + rnd((p.len() - from) as u64 + 1) as usize;
                            pkt.extend_from_slice(&p[from..to]);
                        } else {
                            pkt.push(ABC[rnd(ABC.len() as u64) as usize]);
                        }
                    }
                    if nocase && rnd(2) == 0 {
                        pkt.make_ascii_uppercase();
                    }
                    let (mut want, mut got) = (Vec::new(), Vec::new());
                    let mut c = b;
                    m.scan(&mut a, &pkt, base, &mut want);
                    m.scan_with(&mut b, &pkt, base, &mut scratch, &mut |_| true, |e, t| {
                        got.push((e, t))
                    });
                    want.sort_unstable();
                    got.sort_unstable();
                    assert_eq!(got, want, "round {round}, packet {pkt:?}");
                    assert_eq!(a, b, "round {round}: final state");
                    // The same bytes in two parts (own and released bytes).
                    let cut = rnd(pkt.len() as u64 + 1) as usize;
                    let mut parts = Vec::new();
                    let own_end = base + cut as u64;
                    m.scan_parts(
                        &mut c,
                        [&pkt[..cut], &pkt[cut..]],
                        base,
                        &mut scratch,
                        &mut |_| true,
                        |p, e, t| {
                            assert_eq!(p == 1, e > own_end);
                            parts.push((e, t));
                        },
                    );
                    parts.sort_unstable();
                    assert_eq!(parts, want);
                    assert_eq!(c, a);
                    base += pkt.len() as u64;
                    if pkt.len() >= HYBRID_MIN {
                        hashed += 1;
                    } else {
                        whole += 1;
                    }
                }
            }
        }
        assert!(
            hashed > 1000 && whole > 100,
            "{hashed} hashed, {whole} walked"
        );
    }

    /// [`scan_units_pair`] (one hashed pass for both matchers) gives the
    /// hits and states of each matcher's own [`Matcher::scan_units`]: units
    /// of several jobs, jobs in two parts, restarts, short jobs (walked
    /// whole), deep start states, long patterns (ends walked whole for one
    /// matcher and hashed for the other), targets in groups some jobs refuse;
    /// with views (first stages of only the patterns of the groups a job
    /// keeps) or without.
    #[test]
    fn pair_scan_is_each_scan() {
        use crate::views::NO_VIEW;
        let mut rng = crate::testrng::Lcg::new(9);
        let mut rnd = |n: u64| rng.below(n);
        const ABC: &[u8] = b"abAB\x00\xff-";
        let mut scratch = ScanScratch::default();
        let mut long_jobs = 0;
        for round in 0..40 {
            let mut sets: [Vec<Vec<u8>>; 2] = Default::default();
            for (k, set) in sets.iter_mut().enumerate() {
                for _ in 0..1 + rnd(if round % 3 == 0 { 150 } else { 15 }) {
                    let len = if rnd(5) == 0 {
                        17 + rnd(30)
                    } else {
                        1 + rnd(6)
                    } as usize;
                    let p: Vec<u8> = (0..len)
                        .map(|_| ABC[rnd(ABC.len() as u64) as usize])
                        .collect();
                    let p = if k == 1 { p.to_ascii_lowercase() } else { p };
                    if !set.contains(&p) {
                        set.push(p);
                    }
                }
            }
            let targets = |k: u32, n: usize| -> Vec<Vec<Target>> {
                (0..n)
                    .map(|i| {
                        vec![
                            Target {
                                rule: k * 1000 + i as u32,
                                content: 0,
                            },
                            Target {
                                rule: k * 1000 + 500 + i as u32,
                                content: 1,
                            },
                        ]
                    })
                    .collect()
            };
            let m = |k: usize| {
                Matcher::build_hashing_above(&sets[k], targets(k as u32, sets[k].len()), k == 1, 0)
                    .unwrap()
                    .with_groups(|r| r % 3)
            };
            let (cs, ci) = (m(0), m(1));
            let pair = Pair::new(&cs, &ci, &sets[0], &sets[1]).unwrap();
            // Units of 1-4 jobs; the bytes carry patterns and their pieces.
            let mut pkts: Vec<(Vec<u8>, usize, bool)> = Vec::new();
            let mut units = Vec::new();
            for _ in 0..1 + rnd(4) {
                let lo = pkts.len();
                for _ in 0..1 + rnd(4) {
                    let mut pkt = Vec::new();
                    let len = rnd(300) as usize;
                    while pkt.len() < len {
                        if rnd(3) == 0 {
                            let set = &sets[rnd(2) as usize];
                            let p = &set[rnd(set.len() as u64) as usize];
                            let from = rnd(p.len() as u64) as usize;
                            pkt.extend_from_slice(&p[from..]);
                        } else {
                            pkt.push(ABC[rnd(ABC.len() as u64) as usize]);
                        }
                    }
                    if rnd(3) == 0 {
                        pkt.make_ascii_uppercase();
                    }
                    long_jobs += (pkt.len() >= HYBRID_MIN) as usize;
                    let cut = rnd(pkt.len() as u64 + 1) as usize;
                    pkts.push((pkt, cut, rnd(6) == 0));
                }
                units.push((lo, pkts.len()));
            }
            let mut base = 0;
            let jobs: Vec<Job<'_>> = pkts
                .iter()
                .map(|(p, cut, reset)| {
                    base += p.len() as u64;
                    Job {
                        parts: [&p[..*cut], &p[*cut..]],
                        base: base - p.len() as u64,
                        reset: *reset,
                    }
                })
                .collect();
            // Start states deep in patterns: after a pattern's beginning.
            let mut starts: [Vec<u32>; 2] = Default::default();
            for (k, (mm, st)) in [&cs, &ci].into_iter().zip(&mut starts).enumerate() {
                for _ in 0..units.len() {
                    let p = &sets[k][rnd(sets[k].len() as u64) as usize];
                    let mut s = mm.start();
                    mm.scan(&mut s, &p[..p.len() / 2], 0, &mut Vec::new());
                    st.push(s);
                }
            }
            let keep = &mut |job: u32, g: u32| !(job + g).is_multiple_of(4);
            let n = jobs.len();
            let (mut want, mut got) = (Vec::new(), Vec::new());
            let (mut w_cs, mut w_ci) = (vec![(0, 0); n], vec![(0, 0); n]);
            cs.scan_units(
                &units,
                &starts[0],
                &jobs,
                &mut w_cs,
                (&mut want, &mut scratch),
                keep,
            );
            ci.scan_units(
                &units,
                &starts[1],
                &jobs,
                &mut w_ci,
                (&mut want, &mut scratch),
                keep,
            );
            // Views: per job, the first stage of only the patterns with a
            // target in a group the job keeps (one per residue of the job
            // number, as `keep` depends on it), or none.
            let stages: Vec<FirstStage> = (0..4u32)
                .map(|res| {
                    pair.both.first_stage(|pid| {
                        let (m, own) = if pid < pair.ncs {
                            (&cs, pid)
                        } else {
                            (&ci, pid - pair.ncs)
                        };
                        m.runs[own as usize]
                            .iter()
                            .any(|r| !(res + r.0).is_multiple_of(4))
                    })
                })
                .collect();
            // Their own Vectorscan databases compiled, where it is on.
            for s in &stages {
                s.wait_compiled();
                assert_eq!(
                    s.has_own_search(),
                    cfg!(sluice_vectorscan) && crate::search_engine() == "vectorscan",
                    "round {round}"
                );
            }
            let view_of: Vec<u32> = (0..n as u32)
                .map(|j| if j % 5 == 4 { NO_VIEW } else { j % 4 })
                .collect();
            want.sort_unstable();
            for views in [(&[][..], &[][..]), (&view_of[..], &stages[..])] {
                let (mut g_cs, mut g_ci) = (vec![(0, 0); n], vec![(0, 0); n]);
                got.clear();
                scan_units_pair(
                    [&cs, &ci],
                    &pair,
                    &units,
                    [&starts[0], &starts[1]],
                    &jobs,
                    [&mut g_cs, &mut g_ci],
                    (&mut got, &mut scratch),
                    keep,
                    views,
                );
                got.sort_unstable();
                assert_eq!(got, want, "round {round}: hits");
                assert_eq!((&g_cs, &g_ci), (&w_cs, &w_ci), "round {round}: states");
            }
            assert!(want.iter().any(|h| h.3.rule >= 1000) || round % 3 != 0);
        }
        assert!(long_jobs > 100, "{long_jobs} jobs long enough to hash");
    }
}
