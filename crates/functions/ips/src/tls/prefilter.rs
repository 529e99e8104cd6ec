//! Which TLS rules a hello may match ([`BufferRules`]: one matcher per
//! buffer kind, each of the hello's buffers scanned by its kind's; the
//! segment's payload for fast patterns before any buffer).

use super::{Buf, Buffers};
use crate::bufrules::{BufferRules, MpmScratch};
use crate::engine::CompileError;
use crate::rules::{Proto, Rule};

/// The compiled prefilter of the TLS rules.
#[derive(Default)]
pub struct TlsRules(BufferRules);

impl TlsRules {
    /// Compiles the prefilter of the TLS rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<TlsRules, CompileError> {
        BufferRules::new(
            rules,
            Proto::Tls,
            Buf::ALL.len(),
            |r| {
                r.tls
                    .iter()
                    .map(|l| crate::bufrules::prefilter_list(l.buf as usize, &l.items, &l.xf))
                    .collect()
            },
            |_| false,
        )
        .map(TlsRules)
    }

    /// True if there is no TLS rule (TLS is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every TLS rule, in order: the candidates without the prefilter.
    pub fn all(&self) -> &[u32] {
        self.0.all()
    }

    /// Pushes to `out` the rules the hello whose buffers are `b`, parsed
    /// from `payload`, may match. `out` may hold a rule more than once.
    pub fn candidates(
        &self,
        b: &Buffers,
        payload: &[u8],
        mpm: &mut MpmScratch,
        out: &mut Vec<u32>,
    ) {
        self.0.scan_payload(payload, false, mpm, out);
        for k in Buf::ALL {
            for buf in b.each(k, payload) {
                self.0.scan_buffer(k as usize, buf, false, mpm, out);
            }
        }
        out.extend_from_slice(self.0.always());
    }
}
