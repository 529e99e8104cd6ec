//! Which HTTP rules a message may match ([`BufferRules`]: one matcher per
//! buffer kind, each buffer of the message scanned by its kind's; the
//! packet's stream bytes for fast patterns before any buffer).

use super::{Buf, Buffers, NBUF};
use crate::bufrules::{BufferRules, MpmScratch};
use crate::engine::CompileError;
use crate::rules::{Proto, Rule};

/// The prefilter group of buffer `b`: the body buffers hold the same bytes
/// (`file.data` and the direction's body), so they share one automaton.
fn group(b: Buf) -> usize {
    match b {
        Buf::RequestBody | Buf::ResponseBody | Buf::FileData => Buf::FileData as usize,
        _ => b as usize,
    }
}

/// True for the buffers searched as their group's buffer instead.
fn aliased(i: usize) -> bool {
    i == Buf::RequestBody as usize || i == Buf::ResponseBody as usize
}

/// The compiled prefilter of the HTTP rules.
#[derive(Default)]
pub struct HttpRules(BufferRules);

impl HttpRules {
    /// Compiles the prefilter of the HTTP rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<HttpRules, CompileError> {
        BufferRules::new(
            rules,
            Proto::Http,
            NBUF,
            |r| {
                r.http
                    .iter()
                    .map(|l| (group(l.buf), l.items.as_slice(), l.dotprefix))
                    .collect()
            },
            // Rules naming only head buffers are inspected with the head,
            // never on the body's later packets ([`super::eval`]).
            |r| super::eval::kind(r) != super::eval::HEAD,
        )
        .map(HttpRules)
    }

    /// Number of HTTP rules checked on every message (no content to
    /// prefilter on).
    pub fn unfiltered(&self) -> usize {
        self.0.unfiltered()
    }

    /// True if there is no HTTP rule (HTTP is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every HTTP rule, in order: the candidates without the prefilter.
    pub fn all(&self) -> &[u32] {
        self.0.all()
    }

    /// Pushes to `out` the rules the message whose buffers are `b` may
    /// match, in a packet whose stream bytes are `data`; with `cont` (a
    /// later packet of the message, whose head was inspected before) only
    /// the rules inspected on later packets, plus those without a fast
    /// pattern. `out` may hold a rule more than once.
    ///
    /// `head`: what the head's buffers gave on an earlier packet of the
    /// message ([`HeadFinds`]).
    pub fn candidates(
        &self,
        b: &Buffers,
        data: &[u8],
        (cont, head): (bool, HeadFinds<'_>),
        mpm: &mut MpmScratch,
        out: &mut Vec<u32>,
    ) {
        self.0.scan_payload(data, cont, mpm, out);
        self.scan_head(b, cont, head, mpm, out);
        let body = Buf::FileData as usize;
        if let Some((lo, hi)) = b.spans[body] {
            let buf = &b.bytes[lo as usize..hi as usize];
            self.0.scan_buffer(body, buf, cont, mpm, out);
        }
        out.extend_from_slice(self.0.always());
    }

    /// Pushes to `out` the rules found in the head's buffers of `b` (all
    /// but the body's), or those `head` remembers.
    fn scan_head(
        &self,
        b: &Buffers,
        cont: bool,
        head: HeadFinds<'_>,
        mpm: &mut MpmScratch,
        out: &mut Vec<u32>,
    ) {
        let record = match head {
            HeadFinds::Known(rules) => {
                out.extend_from_slice(rules);
                return;
            }
            HeadFinds::Scan(record) => record,
        };
        let at = out.len();
        for (i, s) in b.spans.iter().enumerate() {
            let Some((lo, hi)) = *s else { continue };
            if !aliased(i) && i != Buf::FileData as usize {
                let buf = &b.bytes[lo as usize..hi as usize];
                self.0.scan_buffer(i, buf, cont, mpm, out);
            }
        }
        if let Some(r) = record {
            r.extend_from_slice(&out[at..]);
        }
    }

    /// [`HttpRules::candidates`] (`cont` as there) for a body searched
    /// before up to `searched` bytes: its body buffer is searched only from where a
    /// fast pattern ending in the bytes after `searched` may start, and the
    /// rules found in it are also pushed to `found`; the caller adds those
    /// found in the bytes before.
    pub fn candidates_after(
        &self,
        b: &Buffers,
        data: &[u8],
        (searched, cont, head): (usize, bool, HeadFinds<'_>),
        (mpm, out, found): (&mut MpmScratch, &mut Vec<u32>, &mut Vec<u32>),
    ) {
        self.0.scan_payload(data, cont, mpm, out);
        self.scan_head(b, cont, head, mpm, out);
        let body = Buf::FileData as usize;
        if let Some((lo, hi)) = b.spans[body] {
            let (lo, hi) = (lo as usize, hi as usize);
            let from = searched.saturating_sub(self.0.max_len(body).saturating_sub(1));
            let at = out.len();
            let buf = &b.bytes[(lo + from).min(hi)..hi];
            self.0.scan_buffer(body, buf, cont, mpm, out);
            found.extend_from_slice(&out[at..]);
        }
        out.extend_from_slice(self.0.always());
    }
}

/// The rules a message's head buffers make candidates, which depend on the
/// head's bytes only: found once, at the head, and remembered for the
/// body's later packets ([`super::body::BodyAcc::head_found`]) instead of
/// building and searching the head's buffers again on each.
pub enum HeadFinds<'a> {
    /// Search the head's buffers (pushing what they give to the list too,
    /// if one is given).
    Scan(Option<&'a mut Vec<u32>>),
    /// The head's buffers give these (already filtered as the `cont`
    /// search would be).
    Known(&'a [u32]),
}
