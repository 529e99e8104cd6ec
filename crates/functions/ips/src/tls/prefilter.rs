//! Which TLS rules a hello may match ([`BufferRules`] over the hello's
//! buffers; the segment's payload for contents before any buffer).

use super::Buffers;
use crate::bufrules::BufferRules;
use crate::engine::{CompileError, Target};
use crate::rules::{Proto, Rule};

/// The compiled prefilter of the TLS rules.
#[derive(Default)]
pub struct TlsRules(BufferRules);

impl TlsRules {
    /// Compiles the prefilter of the TLS rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<TlsRules, CompileError> {
        BufferRules::new(rules, Proto::Tls, |r| {
            r.tls
                .iter()
                .map(|l| (l.items.as_slice(), l.dotprefix))
                .collect()
        })
        .map(TlsRules)
    }

    /// True if there is no TLS rule (TLS is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
        self.0.candidates(b.all(payload), payload, hits, out);
    }
}
