//! What the pusher sent, for `/metrics`: pushes and bytes by kind (whole
//! configurations, deltas), and deltas refused.

use super::Reconciler;
use crate::metrics::PushKind;

impl Reconciler {
    /// The pusher sent a body of `bytes` bytes of kind `kind`, which the
    /// agent accepted or not.
    pub fn push_sent(&mut self, kind: PushKind, bytes: u64, accepted: bool) {
        let c = &mut self.counters;
        c.push_bytes[kind as usize] += bytes;
        if accepted {
            c.pushes_by_kind[kind as usize] += 1;
        }
    }

    /// `host`'s agent refused a delta (it runs another version than the
    /// delta's base, or has no `PATCH /v1/config`): the pusher sends the
    /// whole configuration at once.
    pub fn delta_refused(&mut self, host: u32, why: &str) {
        self.counters.deltas_refused += 1;
        tracing::debug!(host, why, "delta refused: sending the whole configuration");
    }
}
