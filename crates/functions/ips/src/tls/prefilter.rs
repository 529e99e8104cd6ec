//! Which TLS rules a hello may match, found with Aho-Corasick as for HTTP
//! rules: each TLS rule is registered under its longest positive content on
//! a TLS buffer, searched in every buffer the hello has (the automata restart
//! at each buffer), else under its longest content before any buffer,
//! searched in the segment's payload; a rule without either is a candidate
//! for every hello. A match holds all of a buffer's positive contents, so a
//! rule whose registered content is absent cannot match.

use super::Buffers;
use crate::dns::prefilter::{longest, Set};
use crate::engine::{CompileError, Matcher, Target};
use crate::rules::{Proto, Rule};

/// The compiled prefilter of the TLS rules.
#[derive(Default)]
pub struct TlsRules {
    /// Case-sensitive, then `nocase` contents.
    bufs: [Option<Matcher>; 2],
    /// Over the segment's payload, for rules whose only contents come
    /// before any buffer, likewise.
    payload: [Option<Matcher>; 2],
    /// Rules without a positive content.
    always: Vec<u32>,
    /// Number of TLS rules.
    count: usize,
}

impl TlsRules {
    /// Compiles the prefilter of the TLS rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<TlsRules, CompileError> {
        let mut sets: [Set; 2] = Default::default();
        let mut payload: [Set; 2] = Default::default();
        let mut t = TlsRules::default();
        for (ri, r) in rules.iter().enumerate() {
            if r.proto != Proto::Tls {
                continue;
            }
            t.count += 1;
            let best = r
                .tls
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
                        t.always.push(ri as u32);
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
        t.bufs = [cs.build(false)?, ci.build(true)?];
        let [pcs, pci] = payload;
        t.payload = [pcs.build(false)?, pci.build(true)?];
        Ok(t)
    }

    /// True if there is no TLS rule (TLS is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Pushes to `out` the rules the hello whose buffers are `b`, parsed
    /// from `payload`, may match. `hits` is scratch space (left empty).
    /// `out` may hold a rule more than once.
    pub fn candidates(
        &self,
        b: &Buffers,
        payload: &[u8],
        hits: &mut Vec<(u64, Target)>,
        out: &mut Vec<u32>,
    ) {
        hits.clear();
        for m in self.payload.iter().flatten() {
            let mut s = m.start();
            m.scan(&mut s, payload, 0, hits);
        }
        for m in self.bufs.iter().flatten() {
            for buf in b.all(payload) {
                let mut s = m.start();
                m.scan(&mut s, buf, 0, hits);
            }
        }
        out.extend(hits.iter().map(|h| h.1.rule));
        out.extend_from_slice(&self.always);
        hits.clear();
    }
}
