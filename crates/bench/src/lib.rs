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
pub mod suricata;

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

/// User plus system CPU seconds in a `/proc/PID/stat` line: every thread the
/// process ran, exited ones included (unlike the per-thread schedstat).
pub fn stat_cpu_s(stat: &str) -> Option<f64> {
    // The command (field 2) may hold spaces and parentheses: fields resume
    // after its last `)`, at the state (field 3); utime and stime are fields
    // 14 and 15, in `USER_HZ` ticks, which the kernel's ABI fixes at 100
    // (`sysconf(_SC_CLK_TCK)`) whatever `HZ` it runs at.
    let mut f = stat[stat.rfind(')')? + 1..].split_ascii_whitespace();
    let utime: f64 = f.nth(11)?.parse().ok()?;
    let stime: f64 = f.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// CPU seconds process `pid` (a number, or `self`) has spent so far; 0 if
/// it is gone.
pub fn process_cpu_s(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_cpu_s(&s))
        .unwrap_or(0.0)
}

/// The one-minute load average, for reports of runs a busy machine skews.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_past_a_command_with_spaces() {
        let line =
            "4242 (sluice (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 123 0 0";
        assert_eq!(stat_cpu_s(line), Some(3.25));
        assert_eq!(stat_cpu_s("4242 (cut"), None);
        assert_eq!(process_cpu_s("no-such-process"), 0.0);
    }
}
