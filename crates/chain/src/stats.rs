use serde::Serialize;

/// Per-function statistics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageStats {
    /// Function type.
    pub kind: &'static str,
    /// Live packets handed to the function.
    pub packets_in: u64,
    /// Packets it forwarded.
    pub packets_out: u64,
    /// Packets it dropped, by reason.
    pub dropped: Vec<(&'static str, u64)>,
    /// Batches it could not decide (state errors): their packets were dropped.
    pub errors: u64,
    /// The function's own counters.
    pub counters: Vec<(&'static str, u64)>,
}

impl StageStats {
    pub(crate) fn new(kind: &'static str) -> Self {
        StageStats {
            kind,
            ..Default::default()
        }
    }

    pub(crate) fn count_drop(&mut self, reason: &'static str) {
        bump(&mut self.dropped, reason);
    }

    /// Total packets dropped by this function.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().map(|(_, n)| n).sum()
    }
}

fn bump(v: &mut Vec<(&'static str, u64)>, reason: &'static str) {
    match v.iter_mut().find(|(r, _)| *r == reason) {
        Some((_, n)) => *n += 1,
        None => v.push((reason, 1)),
    }
}

/// Statistics of a whole chain.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChainStats {
    /// Frames received.
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Frames forwarded at the end of the chain.
    pub forwarded: u64,
    /// Frames dropped by functions.
    pub dropped: u64,
    /// Malformed frames, by parse error (counted and dropped).
    pub malformed: Vec<(&'static str, u64)>,
    /// Frames dropped because the instance was over its capacity budget.
    pub over_capacity: u64,
    /// Frames reassembly refused, by reason.
    pub reassembly_dropped: Vec<(&'static str, u64)>,
    /// Non-IP frames (forwarded untouched).
    pub non_ip: u64,
    /// Extra frames functions emitted (e.g. RSTs).
    pub emitted: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// Flow records exported.
    pub flow_records: u64,
    /// Batches a state-store error failed closed.
    pub store_errors: u64,
    /// The last store error, for the summary.
    pub last_error: Option<String>,
    /// Per-function statistics, in chain order.
    pub stages: Vec<StageStats>,
    /// The shared reassembler's counters.
    pub reassembly_counters: Vec<(&'static str, u64)>,
    #[serde(skip)]
    pub(crate) counted_events: usize,
    #[serde(skip)]
    pub(crate) emitted_before: u64,
}

impl ChainStats {
    pub(crate) fn count_malformed(&mut self, reason: &'static str) {
        bump(&mut self.malformed, reason);
    }

    pub(crate) fn count_reassembly_drop(&mut self, reason: &'static str) {
        bump(&mut self.reassembly_dropped, reason);
    }

    /// Total malformed frames.
    pub fn malformed_total(&self) -> u64 {
        self.malformed.iter().map(|(_, n)| n).sum()
    }
}
