//! The prefilter of the rules of an application protocol whose keywords
//! inspect a message's buffers (HTTP, TLS), as Suricata's multi-pattern
//! matcher (MPM) does it: each rule has one fast pattern, and each buffer
//! kind one multi-pattern matcher over the fast patterns on that kind.
//!
//! A rule's fast pattern is its content marked `fast_pattern` (only the
//! bytes `fast_pattern:offset,length` names), else its longest positive
//! content on one of its buffers, else its longest positive content before
//! any buffer (searched in the packet's bytes); a rule without a positive
//! content is a candidate for every message. Each buffer of a message is
//! scanned once, by its kind's matcher only (it restarts at each buffer,
//! so no match spans two), and a rule is a candidate only when its fast
//! pattern was found in a buffer of its kind. A match holds every positive
//! content of its buffers, so a rule whose fast pattern is absent from its
//! buffer cannot match.
//!
//! One matcher serves both cases: it folds ASCII case, and a hit of a
//! case-sensitive pattern is confirmed by comparing the bytes (as
//! Suricata's MPM does), so a buffer is searched once, not twice. The
//! matcher is a hash filter over the patterns' first bytes ([`Mpm`]), not
//! an automaton: the buffers are whole in memory.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::engine::CompileError;
use crate::hashmpm::HashMpm;
use crate::inspect;
use crate::rules::{Content, Item, Proto, Rule};
use crate::transform::{Scratch, Transforms};

/// Whether a rule's keywords `items` on one buffer match `buf`, inspected
/// after the list's transforms `xf` (`s`: scratch space). `buf` is the
/// buffer from position `base` on (a body's window; absolute positions and
/// `bsize` count from the buffer's start; a transformed window's from its
/// own).
pub(crate) fn list_matches(
    r: &Rule,
    items: &[Item],
    xf: &Transforms,
    buf: &[u8],
    base: u64,
    s: &mut Scratch,
) -> bool {
    let base = if xf.is_empty() { base } else { 0 };
    inspect::inspect_items(r, items, xf.apply(buf, s), base)
}

/// A rule's keyword list on one buffer as a prefilter sees it: its group,
/// its keywords, and whether the buffer gets a `.` before it. A list whose
/// transforms change more than that offers no fast pattern (its keywords
/// are left out), since the buffers searched are not transformed.
pub(crate) fn prefilter_list<'r>(
    group: usize,
    items: &'r [Item],
    xf: &Transforms,
) -> (usize, &'r [Item], bool) {
    if xf.prefilterable() {
        (group, items, xf.is_dotprefix())
    } else {
        (group, &[], false)
    }
}

/// One multi-pattern matcher over whole buffers: which of its patterns
/// occur in a buffer ([`HashMpm`]: a buffer is held whole in memory, so
/// no automaton state continues from one to the next).
pub(crate) struct Mpm {
    set: HashMpm,
    /// Per pattern: its rules, as a range of `rules`.
    pats: Vec<(u32, u32)>,
    rules: Vec<u32>,
}

/// The scratch space of a scan, reused across packets: which patterns were
/// found already (a pattern's rules are pushed once per scan), and the
/// buffer ASCII case folded.
#[derive(Default)]
pub struct MpmScratch {
    seen: Vec<u64>,
    marked: Vec<u32>,
    folded: Vec<u8>,
    at: Vec<u32>,
    /// The payload patterns' finds of a [`Joint`] search.
    pub(crate) joint: Vec<u32>,
}

impl MpmScratch {
    fn reset(&mut self, npats: usize) {
        for &p in &self.marked {
            self.seen[p as usize / 64] = 0;
        }
        self.marked.clear();
        let words = npats.div_ceil(64);
        if self.seen.len() < words {
            self.seen.resize(words, 0);
        }
    }
}

/// Fast patterns being collected for one [`Mpm`]: (bytes, case-sensitive)
/// and their rules, deduplicated.
#[derive(Default)]
pub(crate) struct MpmSet {
    pats: Vec<(Vec<u8>, bool)>,
    rules: Vec<Vec<u32>>,
    index: FxHashMap<(Vec<u8>, bool), usize>,
}

impl MpmSet {
    /// Registers `rule` under `bytes` (`nocase`: ASCII case-insensitive).
    pub(crate) fn add(&mut self, bytes: &[u8], nocase: bool, rule: u32) {
        let key = if nocase {
            (bytes.to_ascii_lowercase(), false)
        } else {
            (bytes.to_vec(), true)
        };
        let i = *self.index.entry(key.clone()).or_insert_with(|| {
            self.pats.push(key);
            self.rules.push(Vec::new());
            self.pats.len() - 1
        });
        self.rules[i].push(rule);
    }

    /// Number of rules registered.
    fn count(&self) -> usize {
        self.rules.iter().map(Vec::len).sum()
    }

    pub(crate) fn build(self) -> Result<Option<Mpm>, CompileError> {
        if self.pats.is_empty() {
            return Ok(None);
        }
        let set = HashMpm::new(self.pats.iter().map(|(b, cs)| (&b[..], *cs)));
        let mut rules = Vec::new();
        let mut pats = Vec::with_capacity(self.pats.len());
        for rs in self.rules {
            let a = rules.len() as u32;
            rules.extend(rs);
            pats.push((a, rules.len() as u32));
        }
        Ok(Some(Mpm { set, pats, rules }))
    }
}

/// One hashed pass over a body packet's body buffer for two sets of fast
/// patterns at once: the body buffer's (the patterns before `split`) and
/// the packet bytes' (from `split` on), whose finds count only where they
/// lie in the packet's bytes, at the buffer's end ([`Joint::scan`]). The
/// two searches covered the same bytes, each with its own first stage.
pub(crate) struct Joint {
    mpm: Mpm,
    split: u32,
}

impl Joint {
    /// The patterns of the joint search (bytes, case-sensitive), for
    /// measuring it against another engine.
    #[cfg(all(test, sluice_vectorscan))]
    pub(crate) fn patterns(&self) -> Vec<(Vec<u8>, bool)> {
        self.mpm.set.patterns()
    }

    /// The joint matcher of `buffer`'s patterns, then `payload`'s (`None`
    /// if both are empty). A pattern in both keeps an id in each.
    pub(crate) fn build(buffer: MpmSet, payload: MpmSet) -> Result<Option<Joint>, CompileError> {
        let split = buffer.pats.len() as u32;
        let mut all = buffer;
        all.rules.extend(payload.rules);
        all.pats.extend(payload.pats);
        // `index` is not read by `build`: the ids stay in push order.
        all.index.clear();
        Ok(all.build()?.map(|mpm| Joint { mpm, split }))
    }

    /// Pushes to `body` the rules of the buffer's patterns found in `buf`
    /// and to `payload` those of the packet bytes' patterns found from
    /// `payload_from` (where the packet's bytes start in `buf`, which they
    /// end) on; each pattern's once.
    pub(crate) fn scan(
        &self,
        buf: &[u8],
        payload_from: usize,
        scratch: &mut MpmScratch,
        (body, payload): (&mut Vec<u32>, &mut Vec<u32>),
    ) {
        let m = &self.mpm;
        scratch.reset(m.pats.len());
        let mut folded = std::mem::take(&mut scratch.folded);
        HashMpm::fold(buf, &mut folded);
        let MpmScratch {
            seen, marked, at, ..
        } = scratch;
        let split = self.split;
        m.set.each(buf, &folded, 0, at, |pid, at| {
            let pay = pid >= split;
            // Before the packet's bytes a payload pattern is not looked
            // for (not marked seen: it may occur again in them).
            if pay && at < payload_from {
                return;
            }
            let (w, bit) = (pid as usize / 64, 1u64 << (pid % 64));
            if seen[w] & bit != 0 || !m.set.is_at(pid, buf, &folded, at) {
                return;
            }
            seen[w] |= bit;
            marked.push(pid);
            let (a, z) = m.pats[pid as usize];
            let out = if pay { &mut *payload } else { &mut *body };
            out.extend_from_slice(&m.rules[a as usize..z as usize]);
        });
        scratch.folded = folded;
    }
}

impl Mpm {
    /// Pushes to `out` the rules of every pattern found in `buf`, each
    /// pattern's once.
    pub(crate) fn scan(&self, buf: &[u8], scratch: &mut MpmScratch, out: &mut Vec<u32>) {
        scratch.reset(self.pats.len());
        let mut folded = std::mem::take(&mut scratch.folded);
        HashMpm::fold(buf, &mut folded);
        let MpmScratch {
            seen, marked, at, ..
        } = scratch;
        self.set.each(buf, &folded, 0, at, |pid, at| {
            // Found once is enough: later occurrences are not verified.
            let (w, bit) = (pid as usize / 64, 1u64 << (pid % 64));
            if seen[w] & bit != 0 || !self.set.is_at(pid, buf, &folded, at) {
                return;
            }
            seen[w] |= bit;
            marked.push(pid);
            let (a, z) = self.pats[pid as usize];
            out.extend_from_slice(&self.rules[a as usize..z as usize]);
        });
        scratch.folded = folded;
    }

    /// The longest pattern's length.
    fn max_len(&self) -> usize {
        self.set.max_len()
    }
}

/// The bytes of content `c` a prefilter searches for it: those
/// `fast_pattern:offset,length` names, and without the leading `.` of a
/// `dotprefix` buffer's content (that `.` is not in the buffer searched; the
/// rest is). `None` if nothing is left.
fn pattern(c: &Content, dotprefix: bool) -> Option<&[u8]> {
    let mut b = &c.bytes[..];
    if let Some((o, l)) = c.fast_chop {
        b = b.get(o as usize..o as usize + l as usize).unwrap_or(b);
    }
    if dotprefix {
        // A content matching at the start of `.` + buffer starts with that
        // `.`; one matching later lies in the buffer whole.
        if let Some(rest) = b.strip_prefix(b".") {
            b = rest;
        }
    }
    (!b.is_empty()).then_some(b)
}

/// Where a rule's fast pattern is searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// In the buffers of this prefilter group ([`BufferRules::new`]).
    Group(usize),
    /// In the packet's bytes (a content before any buffer).
    Payload,
}

/// The fast pattern of rule `r` whose buffer lists are `lists` (group,
/// items, dotprefix): where it is searched, its bytes and whether it is
/// `nocase`. `None` for a rule without a positive content.
pub fn fast_pattern<'r>(
    r: &'r Rule,
    lists: &[(usize, &'r [Item], bool)],
) -> Option<(Where, &'r [u8], bool)> {
    let on = |items: &'r [Item], w: Where, dotprefix: bool| {
        items.iter().filter_map(move |i| match i {
            Item::Content(k) => {
                let c = &r.contents[*k as usize];
                let p = pattern(c, dotprefix).filter(|_| !c.negated)?;
                Some((w, p, c))
            }
            _ => None,
        })
    };
    let bufs = || {
        lists
            .iter()
            .flat_map(move |&(g, items, dot)| on(items, Where::Group(g), dot))
    };
    let all = || bufs().chain(on(&r.items, Where::Payload, false));
    // Suricata's choice: the content marked `fast_pattern`, else the
    // longest, preferring a buffer's (a narrower place to search) to the
    // packet's bytes. The first of equals, so the choice is stable.
    let pick = |it: &mut dyn Iterator<Item = (Where, &'r [u8], &'r Content)>| {
        it.fold(
            None,
            |best: Option<(Where, &'r [u8], &'r Content)>, x| match best {
                Some(b) if b.1.len() >= x.1.len() => Some(b),
                _ => Some(x),
            },
        )
    };
    let chosen = all()
        .find(|x| x.2.fast_pattern)
        .or_else(|| pick(&mut bufs()))
        .or_else(|| pick(&mut on(&r.items, Where::Payload, false)))?;
    let bytes = &chosen.1[..chosen.1.len().min(MAX_FAST)];
    Some((chosen.0, bytes, chosen.2.nocase))
}

/// The longest fast pattern searched: a longer content is searched by its
/// first bytes. A candidate is inspected whole, so only how often a rule is
/// a candidate could change, and 32 bytes seldom occur where the rest does
/// not. A body's packet searches its body buffer from the longest pattern's
/// length before its new bytes (`http::prefilter`); ET Open's body patterns
/// reach 540 bytes, which made that search read a third more than the
/// packet's bytes.
pub const MAX_FAST: usize = 32;

/// The matchers of a set of rules: per prefilter group (a buffer kind, or
/// kinds holding the same bytes), then over the packet's bytes.
#[derive(Default)]
struct Layer {
    groups: Vec<Option<Arc<Mpm>>>,
    payload: Option<Arc<Mpm>>,
}

/// The compiled prefilter of one protocol's buffer rules.
#[derive(Default)]
pub struct BufferRules {
    /// Over every rule's fast pattern.
    full: Layer,
    /// Over the fast patterns of the rules inspected again on a message's
    /// later packets ([`BufferRules::new`]'s `later`); a matcher with
    /// all of a group's rules is shared with `full`.
    later: Layer,
    /// Rules without a positive content.
    always: Vec<u32>,
    /// Every rule of the protocol, in order (the candidates when the
    /// prefilter is off).
    all: Vec<u32>,
}

impl BufferRules {
    /// Compiles the prefilter of the rules of `proto` among `rules` (indexed
    /// as in `rules`), with `ngroups` prefilter groups; `lists` gives a
    /// rule's keyword lists, one per buffer, each with its group and whether
    /// it is inspected with a `dotprefix`. `later` tells the rules inspected
    /// again on a message's later packets (HTTP body rules), which get
    /// matchers of their own.
    pub fn new(
        rules: &[Rule],
        proto: Proto,
        ngroups: usize,
        lists: impl for<'r> Fn(&'r Rule) -> Vec<(usize, &'r [Item], bool)>,
        later: impl Fn(&Rule) -> bool,
    ) -> Result<BufferRules, CompileError> {
        // [full, later] sets per group, then for the payload.
        let mut sets: Vec<[MpmSet; 2]> = (0..=ngroups).map(|_| Default::default()).collect();
        let mut p = BufferRules::default();
        for (ri, r) in rules.iter().enumerate() {
            // Rules of the TLS handshake state are evaluated on every
            // packet instead ([`crate::tls::legacy`]).
            // So are the chunk-size event rules, where the framing ends
            // ([`Rule::http_body_events`]).
            if r.proto != proto || r.tls_flow || r.http_body_events != 0 {
                continue;
            }
            let ri = ri as u32;
            p.all.push(ri);
            let (set, bytes, nocase) = match fast_pattern(r, &lists(r)) {
                Some((Where::Group(g), bytes, nocase)) => (&mut sets[g], bytes, nocase),
                Some((Where::Payload, bytes, nocase)) => (&mut sets[ngroups], bytes, nocase),
                None => {
                    p.always.push(ri);
                    continue;
                }
            };
            set[0].add(bytes, nocase, ri);
            if later(r) {
                set[1].add(bytes, nocase, ri);
            }
        }
        let mut built = Vec::with_capacity(ngroups + 1);
        for [full, later] in sets {
            let same = full.count() == later.count();
            let full = full.build()?.map(Arc::new);
            let later = if same {
                full.clone()
            } else {
                later.build()?.map(Arc::new)
            };
            built.push((full, later));
        }
        let (payload, later_payload) = built.pop().unwrap_or_default();
        let (full, later): (Vec<_>, Vec<_>) = built.into_iter().unzip();
        p.full = Layer {
            groups: full,
            payload,
        };
        p.later = Layer {
            groups: later,
            payload: later_payload,
        };
        Ok(p)
    }

    /// Number of rules checked on every message (no content to prefilter on).
    pub fn unfiltered(&self) -> usize {
        self.always.len()
    }

    /// True if the protocol has no rule (it is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    fn layer(&self, later: bool) -> &Layer {
        if later {
            &self.later
        } else {
            &self.full
        }
    }

    /// Pushes to `out` the rules registered under a fast pattern found in
    /// the packet's bytes `data` (`later`: only those inspected again on a
    /// message's later packets).
    pub fn scan_payload(
        &self,
        data: &[u8],
        later: bool,
        scratch: &mut MpmScratch,
        out: &mut Vec<u32>,
    ) {
        if let Some(m) = &self.layer(later).payload {
            m.scan(data, scratch, out);
        }
    }

    /// Pushes to `out` the rules of group `group` whose fast pattern is in
    /// `buf`, a buffer of that group (`later`: as for
    /// [`BufferRules::scan_payload`]).
    pub fn scan_buffer(
        &self,
        group: usize,
        buf: &[u8],
        later: bool,
        scratch: &mut MpmScratch,
        out: &mut Vec<u32>,
    ) {
        if let Some(Some(m)) = self.layer(later).groups.get(group) {
            m.scan(buf, scratch, out);
        }
    }

    /// The rules without a content to prefilter on.
    pub fn always(&self) -> &[u32] {
        &self.always
    }

    /// Every rule of the protocol, in order.
    pub fn all(&self) -> &[u32] {
        &self.all
    }

    /// The longest fast pattern of group `group`: a match ending in bytes
    /// appended to one of its buffers starts at most this many bytes minus
    /// one before them.
    pub fn max_len(&self, group: usize) -> usize {
        match self.full.groups.get(group) {
            Some(Some(m)) => m.max_len(),
            _ => 0,
        }
    }
}
