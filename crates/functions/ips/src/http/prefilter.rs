//! Which HTTP rules a message may match ([`BufferRules`] over the message's
//! buffers; the packet's stream bytes for contents before any buffer).

use super::{Buf, Buffers};
use crate::bufrules::BufferRules;
use crate::engine::{CompileError, Target};
use crate::rules::{Proto, Rule};

/// The compiled prefilter of the HTTP rules.
#[derive(Default)]
pub struct HttpRules(BufferRules);

impl HttpRules {
    /// Compiles the prefilter of the HTTP rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<HttpRules, CompileError> {
        BufferRules::new(rules, Proto::Http, |r| {
            r.http
                .iter()
                .map(|l| (l.items.as_slice(), l.dotprefix))
                .collect()
        })
        .map(HttpRules)
    }

    /// Number of HTTP rules checked on every message (no buffer content to
    /// prefilter on).
    pub fn unfiltered(&self) -> usize {
        self.0.unfiltered()
    }

    /// True if there is no HTTP rule (HTTP is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
        // The direction's body buffer is `file.data`'s bytes: searched once.
        let file = b.spans[Buf::FileData as usize];
        let bufs = b
            .spans
            .iter()
            .enumerate()
            .filter(move |&(i, s)| {
                i == Buf::FileData as usize
                    || !(i == Buf::RequestBody as usize || i == Buf::ResponseBody as usize)
                    || *s != file
            })
            .filter_map(|(_, s)| *s)
            .map(|(lo, hi)| &b.bytes[lo as usize..hi as usize]);
        self.0.candidates(bufs, data, hits, out);
    }

    /// [`HttpRules::candidates`] for a body searched before up to
    /// `searched` bytes: its body buffer is searched only from where a
    /// content ending in the bytes after `searched` may start, and the rules
    /// found in it are also pushed to `found`; the caller adds those found
    /// in the bytes before.
    pub fn candidates_after(
        &self,
        b: &Buffers,
        data: &[u8],
        searched: usize,
        (hits, out, found): (&mut Vec<(u64, Target)>, &mut Vec<u32>, &mut Vec<u32>),
    ) {
        let file = b.spans[Buf::FileData as usize];
        self.0.scan_payload(data, hits, out);
        for (i, s) in b.spans.iter().enumerate() {
            let Some((lo, hi)) = *s else { continue };
            let body =
                matches!(i, x if x == Buf::RequestBody as usize || x == Buf::ResponseBody as usize);
            if body && *s == file {
                continue;
            }
            let (lo, hi) = (lo as usize, hi as usize);
            if i == Buf::FileData as usize {
                let from = searched.saturating_sub(self.0.max_len().saturating_sub(1));
                let at = out.len();
                self.0
                    .scan_buffer(&b.bytes[(lo + from).min(hi)..hi], hits, out);
                found.extend_from_slice(&out[at..]);
            } else {
                self.0.scan_buffer(&b.bytes[lo..hi], hits, out);
            }
        }
        out.extend_from_slice(self.0.always());
    }
}
