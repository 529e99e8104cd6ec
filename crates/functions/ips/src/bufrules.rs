//! The prefilter of the rules of an application protocol whose keywords
//! inspect a message's buffers (HTTP, TLS), found with Aho-Corasick as for
//! DNS rules: each rule is registered under its longest positive content on
//! one of its buffers, searched in every buffer the message has (the
//! automata restart at each buffer, so no match spans two), else under its
//! longest content before any buffer, searched in the packet's bytes; a rule
//! without either is a candidate for every message. A match holds all of a
//! buffer's positive contents, so a rule whose registered content is absent
//! cannot match.

use crate::dns::prefilter::{longest, Set};
use crate::engine::{CompileError, Matcher, Target};
use crate::inspect;
use crate::rules::{Item, Proto, Rule};

/// Whether a rule's keywords `items` on one buffer match `buf`, inspected
/// with a `.` before it when the list has `dotprefix` (`dot`: scratch space).
pub(crate) fn list_matches(
    r: &Rule,
    items: &[Item],
    dotprefix: bool,
    buf: &[u8],
    dot: &mut Vec<u8>,
) -> bool {
    let buf = if dotprefix {
        dot.clear();
        dot.push(b'.');
        dot.extend_from_slice(buf);
        &dot[..]
    } else {
        buf
    };
    inspect::inspect_items(r, items, buf, 0)
}

/// The compiled prefilter of one protocol's buffer rules.
#[derive(Default)]
pub struct BufferRules {
    /// Over the buffers: case-sensitive, then `nocase` contents.
    bufs: [Option<Matcher>; 2],
    /// Over the packet's bytes, for rules whose only contents come before
    /// any buffer, likewise.
    payload: [Option<Matcher>; 2],
    /// Rules without a positive content.
    always: Vec<u32>,
    /// Number of the protocol's rules.
    count: usize,
    /// The longest content searched in the buffers.
    max_len: usize,
}

impl BufferRules {
    /// Compiles the prefilter of the rules of `proto` among `rules` (indexed
    /// as in `rules`); `lists` gives a rule's keyword lists, one per buffer,
    /// each with whether it is inspected with a `dotprefix`.
    pub fn new(
        rules: &[Rule],
        proto: Proto,
        lists: impl for<'r> Fn(&'r Rule) -> Vec<(&'r [Item], bool)>,
    ) -> Result<BufferRules, CompileError> {
        let mut sets: [Set; 2] = Default::default();
        let mut payload: [Set; 2] = Default::default();
        let mut p = BufferRules::default();
        for (ri, r) in rules.iter().enumerate() {
            if r.proto != proto {
                continue;
            }
            p.count += 1;
            let best = lists(r)
                .into_iter()
                // A `dotprefix` buffer's contents may start with the `.`
                // that is not in the buffer the prefilter searches.
                .filter(|(_, dotprefix)| !dotprefix)
                .filter_map(|(items, _)| longest(items, &r.contents))
                .max_by_key(|(_, c)| c.bytes.len());
            let (set, (k, c)) = match best {
                Some(x) => {
                    p.max_len = p.max_len.max(x.1.bytes.len());
                    (&mut sets, x)
                }
                None => match longest(&r.items, &r.contents) {
                    Some(x) => (&mut payload, x),
                    None => {
                        p.always.push(ri as u32);
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
        p.bufs = [cs.build(false)?, ci.build(true)?];
        let [pcs, pci] = payload;
        p.payload = [pcs.build(false)?, pci.build(true)?];
        Ok(p)
    }

    /// Number of rules checked on every message (no content to prefilter on).
    pub fn unfiltered(&self) -> usize {
        self.always.len()
    }

    /// True if the protocol has no rule (it is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Pushes to `out` the rules a message whose buffers are `buffers` may
    /// match, in a packet whose bytes are `data`. `hits` is scratch space
    /// (left empty). `out` may hold a rule more than once.
    pub fn candidates<'b>(
        &self,
        buffers: impl Iterator<Item = &'b [u8]>,
        data: &[u8],
        hits: &mut Vec<(u64, Target)>,
        out: &mut Vec<u32>,
    ) {
        self.scan_payload(data, hits, out);
        for buf in buffers {
            self.scan_buffer(buf, hits, out);
        }
        out.extend_from_slice(&self.always);
    }

    /// Pushes to `out` the rules registered under a content found in the
    /// packet's bytes `data` (`hits`: scratch space).
    pub fn scan_payload(&self, data: &[u8], hits: &mut Vec<(u64, Target)>, out: &mut Vec<u32>) {
        hits.clear();
        for m in self.payload.iter().flatten() {
            let mut s = m.start();
            m.scan(&mut s, data, 0, hits);
        }
        out.extend(hits.iter().map(|h| h.1.rule));
        hits.clear();
    }

    /// Pushes to `out` the rules registered under a content found in the
    /// buffer `buf` (`hits`: scratch space).
    pub fn scan_buffer(&self, buf: &[u8], hits: &mut Vec<(u64, Target)>, out: &mut Vec<u32>) {
        hits.clear();
        for m in self.bufs.iter().flatten() {
            let mut s = m.start();
            m.scan(&mut s, buf, 0, hits);
        }
        out.extend(hits.iter().map(|h| h.1.rule));
        hits.clear();
    }

    /// The rules without a content to prefilter on.
    pub fn always(&self) -> &[u32] {
        &self.always
    }

    /// The longest content searched in the buffers: a match ending in bytes
    /// appended to a buffer starts at most this many bytes minus one before
    /// them.
    pub fn max_len(&self) -> usize {
        self.max_len
    }
}
