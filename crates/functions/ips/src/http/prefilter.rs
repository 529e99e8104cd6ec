//! Which HTTP rules a message may match, found with Aho-Corasick as for DNS
//! rules: each HTTP rule is registered under its longest positive content on
//! an HTTP buffer, searched in every buffer the message has (the automata
//! restart at each buffer, so no match spans two), else under its longest
//! content before any buffer, searched in the packet's stream bytes; a rule
//! without either is a
//! candidate for every message. A match holds all of a buffer's positive
//! contents, so a rule whose registered content is absent cannot match.

use super::Buffers;
use crate::dns::prefilter::{longest, Set};
use crate::engine::{CompileError, Matcher, Target};
use crate::rules::{Proto, Rule};

/// The compiled prefilter of the HTTP rules.
#[derive(Default)]
pub struct HttpRules {
    /// Case-sensitive, then `nocase` contents.
    bufs: [Option<Matcher>; 2],
    /// Over the packet's stream bytes, for rules whose only contents come
    /// before any buffer, likewise.
    payload: [Option<Matcher>; 2],
    /// Rules without a positive content on an HTTP buffer.
    always: Vec<u32>,
    /// Number of HTTP rules.
    count: usize,
}

impl HttpRules {
    /// Compiles the prefilter of the HTTP rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<HttpRules, CompileError> {
        let mut sets: [Set; 2] = Default::default();
        let mut payload: [Set; 2] = Default::default();
        let mut h = HttpRules::default();
        for (ri, r) in rules.iter().enumerate() {
            if r.proto != Proto::Http {
                continue;
            }
            h.count += 1;
            let best = r
                .http
                .iter()
                // A `dotprefix` buffer's contents may start with the `.`
                // that is not in the buffer the prefilter searches.
                .filter(|l| !l.dotprefix)
                .filter_map(|l| longest(&l.items, &r.contents))
                .max_by_key(|(_, c)| c.bytes.len());
            let (set, (k, c)) = match best {
                Some(x) => (&mut sets, x),
                None => match longest(&r.items, &r.contents) {
                    Some(x) => (&mut payload, x),
                    None => {
                        h.always.push(ri as u32);
                        continue;
                    }
                },
            };
            set[c.nocase as usize].add(
                c,
                Target {
                    rule: ri as u32,
                    content: k,
                },
            );
        }
        let [cs, ci] = sets;
        h.bufs = [cs.build(false)?, ci.build(true)?];
        let [pcs, pci] = payload;
        h.payload = [pcs.build(false)?, pci.build(true)?];
        Ok(h)
    }

    /// Number of HTTP rules checked on every message (no buffer content to
    /// prefilter on).
    pub fn unfiltered(&self) -> usize {
        self.always.len()
    }

    /// True if there is no HTTP rule (HTTP is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Pushes to `out` the rules the message whose buffers are `b` may
    /// match, in a packet whose stream bytes are `data`. `hits` is scratch
    /// space (left empty). `out` may hold a rule more than once.
    pub fn candidates(
        &self,
        b: &Buffers,
        data: &[u8],
        hits: &mut Vec<(u64, Target)>,
        out: &mut Vec<u32>,
    ) {
        hits.clear();
        for m in self.payload.iter().flatten() {
            let mut s = m.start();
            m.scan(&mut s, data, 0, hits);
        }
        for m in self.bufs.iter().flatten() {
            for &(lo, hi) in b.spans.iter().flatten() {
                let mut s = m.start();
                m.scan(&mut s, &b.bytes[lo as usize..hi as usize], 0, hits);
            }
        }
        out.extend(hits.iter().map(|h| h.1.rule));
        out.extend_from_slice(&self.always);
        hits.clear();
    }
}
