//! Benchmarks of the data plane, run with one command and reported as ratios to a
//! baseline measured in the same run (`sluice bench nf`), and the cost of remote
//! state against local state (`sluice bench state`, see [`state`]).
//!
//! Traffic is generated in memory ([`sluice_trafficgen`]) and replayed batch by
//! batch: each frame is copied into a pooled buffer (what a NIC's receive does),
//! parsed, run through the chain, and the buffer recycled. One core, one thread.
//! Each measurement is the best of `reps` runs, each on a fresh chain and store, so
//! state from one run never shortens the next. Time is the benchmark thread's
//! on-CPU time (Linux schedstat), so a busy machine slows a run down less than it
//! would in wall-clock time; on an idle machine the two agree.

pub mod consolidation;
pub mod control;
pub mod dataplane;
pub mod fleet;
pub mod instance;
pub mod nf;
pub mod replication;
pub mod seal;
pub mod shards;
pub mod state;

use serde::Serialize;

/// One benchmark result, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// What was measured.
    pub name: String,
    /// Million packets per second.
    pub mpps: f64,
    /// Gigabits per second of frame bytes.
    pub gbps: f64,
    /// Nanoseconds per packet.
    pub ns_per_packet: f64,
    /// Throughput (packets/s) relative to this measurement's baseline, measured in the same run.
    pub ratio_to_baseline: f64,
    /// The baseline's name.
    pub baseline: String,
    /// Frame size of the traffic.
    pub frame_size: usize,
    /// Packets per run.
    pub packets: u64,
    /// Anything the reader needs (targets, what the baseline is).
    pub note: String,
    /// For memory measurements: MiB of state held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<f64>,
}

/// The cores this process may run on and the machine's one-minute load
/// average, as a benchmark states them before measuring: a scaling result
/// means little without either.
pub fn machine_line() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "{cores} core(s) available; load average {}",
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "unknown".into())
    )
}

/// Formats results as a table for people.
pub fn table(ms: &[Measurement]) -> String {
    let mut s = format!(
        "{:<34} {:>6} {:>9} {:>8} {:>9} {:>8}  {}\n",
        "measurement", "frame", "Mpps", "Gbit/s", "ns/pkt", "ratio", "baseline / note"
    );
    for m in ms {
        s.push_str(&format!(
            "{:<34} {:>6} {:>9.2} {:>8.2} {:>9.1} {:>8.3}  {}{}{}\n",
            m.name,
            m.frame_size,
            m.mpps,
            m.gbps,
            m.ns_per_packet,
            m.ratio_to_baseline,
            m.baseline,
            if m.note.is_empty() { "" } else { "; " },
            m.note
        ));
        if let Some(mib) = m.memory_mib {
            s.push_str(&format!("{:<34} {:>6} {:>9.1} MiB of state\n", "", "", mib));
        }
    }
    s
}
