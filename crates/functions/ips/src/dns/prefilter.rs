//! Which DNS rules a message may match, found with Aho-Corasick as for the
//! other rules: each DNS rule is registered under one positive content, its
//! longest on the `dns.query` buffer (searched in the query names of
//! requests), else its longest on the payload (searched in the message's
//! payload); a rule without a positive content is a candidate for every DNS
//! message. A match holds all of a buffer's positive contents, so a rule
//! whose registered content is absent cannot match.

use crate::engine::{CompileError, Matcher, Target};
use crate::rules::{Content, Item, Proto, Rule};

/// The compiled prefilter of the DNS rules.
#[derive(Default)]
pub struct DnsRules {
    /// Over each query name of a request, with a `.` before it (what
    /// `dotprefix` inspects, and a superset of the bare name's substrings):
    /// case-sensitive, then `nocase` contents.
    names: [Option<Matcher>; 2],
    /// Over the message's payload, likewise.
    payload: [Option<Matcher>; 2],
    /// Rules without a positive content.
    always: Vec<u32>,
    /// Every DNS rule, in order (the candidates when the prefilter is off).
    all: Vec<u32>,
    /// A rule inspects responses' question names (`dns.query.name`): the
    /// names are then written for responses too.
    pub names_of_responses: bool,
    /// A rule inspects a response's record names (`dns.response.rrname`,
    /// ...): they are then written too.
    pub record_names: bool,
    /// A rule tests a DNS event (`app-layer-event:dns.NAME`): the events
    /// are then decided for each message ([`super::events`]).
    pub events: bool,
}

/// The longest positive content of `items`, with its index.
pub(crate) fn longest<'r>(items: &[Item], contents: &'r [Content]) -> Option<(u8, &'r Content)> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Content(k) => Some((*k, &contents[*k as usize])),
            _ => None,
        })
        .filter(|(_, c)| !c.negated)
        .max_by_key(|(_, c)| c.bytes.len())
}

/// Patterns (lowercased when `nocase`) and their targets, deduplicated.
#[derive(Default)]
pub(crate) struct Set {
    pats: Vec<Vec<u8>>,
    targets: Vec<Vec<Target>>,
    index: rustc_hash::FxHashMap<Vec<u8>, usize>,
}

impl Set {
    pub(crate) fn add(&mut self, c: &Content, t: Target) {
        let key = if c.nocase {
            c.bytes.to_ascii_lowercase()
        } else {
            c.bytes.clone()
        };
        let i = *self.index.entry(key.clone()).or_insert_with(|| {
            self.pats.push(key);
            self.targets.push(Vec::new());
            self.pats.len() - 1
        });
        self.targets[i].push(t);
    }

    pub(crate) fn build(self, nocase: bool) -> Result<Option<Matcher>, CompileError> {
        if self.pats.is_empty() {
            return Ok(None);
        }
        Ok(Some(Matcher::build(&self.pats, self.targets, nocase)?))
    }
}

impl DnsRules {
    /// Compiles the prefilter of the DNS rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<DnsRules, CompileError> {
        let mut names: [Set; 2] = Default::default();
        let mut payload: [Set; 2] = Default::default();
        let mut d = DnsRules::default();
        for (ri, r) in rules.iter().enumerate() {
            if r.proto != Proto::Dns {
                continue;
            }
            d.all.push(ri as u32);
            d.names_of_responses |= r.dns_query.iter().any(|q| q.responses);
            d.record_names |= r.dns_query.iter().any(|q| q.records.is_some());
            d.events |= r.dns_checks.events != 0;
            // The longest content of any instance: each must match some
            // name. The names searched are not transformed (a `.` before
            // them is already there).
            let on_name = r
                .dns_query
                .iter()
                .filter(|q| q.xf.prefilterable() && q.records.is_none())
                .filter_map(|q| longest(&q.items, &r.contents))
                .max_by_key(|(_, c)| c.bytes.len());
            let (sets, (k, c)) = match on_name {
                Some(x) => (&mut names, x),
                None => match longest(&r.items, &r.contents) {
                    Some(x) => (&mut payload, x),
                    None => {
                        d.always.push(ri as u32);
                        continue;
                    }
                },
            };
            sets[c.nocase as usize].add(
                c,
                Target {
                    rule: ri as u32,
                    content: k,
                },
            );
        }
        let [ncs, nci] = names;
        let [pcs, pci] = payload;
        d.names = [ncs.build(false)?, nci.build(true)?];
        d.payload = [pcs.build(false)?, pci.build(true)?];
        Ok(d)
    }

    /// True if there is no DNS rule (DNS is then not even detected).
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Every DNS rule, in order: the candidates without the prefilter.
    pub fn all(&self) -> &[u32] {
        &self.all
    }

    /// Pushes to `out` the rules a message may match: `names` holds the
    /// request's query names (each with a `.` before it) at `spans`,
    /// `payload` is the packet's payload. `hits` is scratch space (left
    /// empty). `out` may hold a rule more than once.
    pub fn candidates(
        &self,
        names: &[u8],
        spans: &[(u32, u32)],
        payload: &[u8],
        hits: &mut Vec<(u64, Target)>,
        out: &mut Vec<u32>,
    ) {
        hits.clear();
        for m in self.names.iter().flatten() {
            for &(a, b) in spans {
                let mut s = m.start();
                m.scan(&mut s, &names[a as usize..b as usize], 0, hits);
            }
        }
        for m in self.payload.iter().flatten() {
            let mut s = m.start();
            m.scan(&mut s, payload, 0, hits);
        }
        out.extend(hits.iter().map(|h| h.1.rule));
        out.extend_from_slice(&self.always);
        hits.clear();
    }
}
