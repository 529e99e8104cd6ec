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

    /// Adds the counts of `o`, the statistics of another copy of the same
    /// chain (an instance's other worker): stages are matched by position,
    /// counters by name; the last error is `o`'s if it has one.
    pub fn add(&mut self, o: &ChainStats) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.forwarded += o.forwarded;
        self.dropped += o.dropped;
        add_named(&mut self.malformed, &o.malformed);
        self.over_capacity += o.over_capacity;
        add_named(&mut self.reassembly_dropped, &o.reassembly_dropped);
        self.non_ip += o.non_ip;
        self.emitted += o.emitted;
        self.alerts += o.alerts;
        self.flow_records += o.flow_records;
        self.store_errors += o.store_errors;
        if o.last_error.is_some() {
            self.last_error.clone_from(&o.last_error);
        }
        for (i, st) in o.stages.iter().enumerate() {
            if i == self.stages.len() {
                self.stages.push(StageStats::new(st.kind));
            }
            let mine = &mut self.stages[i];
            mine.packets_in += st.packets_in;
            mine.packets_out += st.packets_out;
            add_named(&mut mine.dropped, &st.dropped);
            mine.errors += st.errors;
            add_named(&mut mine.counters, &st.counters);
        }
        add_named(&mut self.reassembly_counters, &o.reassembly_counters);
    }
}

/// Adds each named count of `o` to the one of the same name in `v`.
fn add_named(v: &mut Vec<(&'static str, u64)>, o: &[(&'static str, u64)]) {
    for &(name, n) in o {
        match v.iter_mut().find(|(r, _)| *r == name) {
            Some((_, m)) => *m += n,
            None => v.push((name, n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_two_workers_stats_sums_them_by_stage_and_name() {
        let mut a = ChainStats {
            packets: 3,
            forwarded: 2,
            dropped: 1,
            malformed: vec![("truncated", 1)],
            stages: vec![StageStats {
                kind: "firewall",
                packets_in: 3,
                packets_out: 2,
                dropped: vec![("denied", 1)],
                errors: 0,
                counters: vec![("new", 2)],
            }],
            ..Default::default()
        };
        let b = ChainStats {
            packets: 5,
            forwarded: 5,
            malformed: vec![("bad_ipv4_checksum", 2), ("truncated", 1)],
            last_error: Some("store gone".into()),
            stages: vec![StageStats {
                kind: "firewall",
                packets_in: 5,
                packets_out: 5,
                dropped: vec![],
                errors: 1,
                counters: vec![("new", 1), ("established", 4)],
            }],
            ..Default::default()
        };
        a.add(&b);
        assert_eq!((a.packets, a.forwarded, a.dropped), (8, 7, 1));
        assert_eq!(
            a.malformed,
            [("truncated", 2), ("bad_ipv4_checksum", 2)].to_vec()
        );
        assert_eq!(a.last_error.as_deref(), Some("store gone"));
        let st = &a.stages[0];
        assert_eq!((st.packets_in, st.packets_out, st.errors), (8, 7, 1));
        assert_eq!(st.dropped, [("denied", 1)].to_vec());
        assert_eq!(st.counters, [("new", 3), ("established", 4)].to_vec());
        // Into empty statistics, a copy.
        let mut e = ChainStats::default();
        e.add(&b);
        assert_eq!(e.stages.len(), 1);
        assert_eq!(e.stages[0].counters, b.stages[0].counters);
    }
}
