//! The lease gate in time: revocations end once every agent confirmed them, and
//! groups every agent has run for a while get their ownership leases (see
//! [`crate::lease`]).

use std::collections::BTreeMap;
use std::time::Instant;

use super::Reconciler;

impl Reconciler {
    /// Ends lease revocations whose agents confirmed them and grants leases to
    /// groups every agent has run for a while: either way the desired state is
    /// committed again, so what was held back, or the new lease, goes out.
    pub(super) fn check_leases(&mut self, now: Instant) {
        let now_ms = self.unix_ms(now);
        let reported: BTreeMap<u32, u64> = self
            .live
            .iter()
            .filter_map(|(h, l)| l.reported.map(|v| (*h, v)))
            .collect();
        // Agents told a longer heartbeat interval grant on for longer without
        // an answer: a revocation waits for them accordingly.
        if self.gate.holding() {
            let longest = self.longest_interval();
            self.gate.set_longest_interval(longest);
        }
        let done = self.gate.barrier_done(now_ms, &reported);
        let granted = self.gate.observe(&self.configs, &reported, now_ms);
        if done || granted {
            if granted {
                tracing::info!(granted = ?self.gate.granted(), "leases granted");
            }
            let d = self.desired.clone();
            if let Err(e) = self.commit(d, now) {
                tracing::error!(error = %e.msg, "committing after a lease change failed");
            }
        }
    }
}
