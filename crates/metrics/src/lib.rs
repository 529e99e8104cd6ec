//! Prometheus text exposition (format 0.0.4) shared by Sluice's daemons: a
//! family's `HELP`/`TYPE` lines, label escaping, fixed-bucket histograms, and
//! the standard `process_*` metrics every Prometheus client library exports
//! (CPU time, resident and virtual memory, open and maximum file descriptors,
//! start time), read from `/proc`. The parsing is pure and tested on sample
//! text; [`process`] is the only I/O.
//!
//! Conventions kept by every endpoint (and checked by `promtool check
//! metrics` in the tests): base units (seconds, bytes) in the name, `_total`
//! on counters, no sentinel values (a sample is left out instead), names of
//! tenants, chains and instances as label values.

use std::fmt::Write;

/// Writes a family's `# HELP` and `# TYPE` lines.
pub fn family(o: &mut String, name: &str, ty: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {ty}");
}

/// Escapes a label value: backslash, double quote and newline, as the text
/// format requires.
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Bucket bounds, seconds, for latencies from a millisecond to ten seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram with fixed bucket bounds (cumulative on output).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative), the last for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// A histogram over `bounds` with the given per-bucket (not cumulative)
    /// `counts`, the last for `+Inf`, and `sum`: one measured elsewhere (an
    /// NF instance's, carried in its heartbeats). None if `counts` does not
    /// have one bucket per bound and one for `+Inf`.
    pub fn from_counts(bounds: &'static [f64], counts: &[u64], sum: f64) -> Option<Histogram> {
        (counts.len() == bounds.len() + 1).then(|| Histogram {
            bounds,
            counts: counts.to_vec(),
            sum,
        })
    }

    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Writes the `_bucket`, `_sum` and `_count` samples of `name` with the
    /// extra `labels` (`key="value"` pairs, already escaped, or empty).
    pub fn render(&self, o: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(o, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(
            o,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count()
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(o, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(o, "{name}_count{braces} {}", self.count());
    }
}

/// What `process_*` reports, parsed from `/proc`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on file descriptors (None: unlimited or unknown).
    pub max_fds: Option<u64>,
}

/// Parses `/proc/self/stat` (fields after the command name, which may hold
/// spaces and parentheses) with the kernel's clock ticks per second, page size
/// and boot time (`btime` of `/proc/stat`, Unix seconds). None if malformed.
pub fn parse_stat(stat: &str, ticks: f64, page: u64, btime: u64) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of proc(5), i.e. f[0]; utime 14 → f[11],
    // stime 15 → f[12], starttime 22 → f[19], vsize 23 → f[20], rss 24 → f[21].
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(ProcessStats {
        cpu_seconds: (num(11)? + num(12)?) as f64 / ticks,
        start_time_seconds: btime as f64 + num(19)? as f64 / ticks,
        virtual_bytes: num(20)?,
        resident_bytes: num(21)? * page,
        ..ProcessStats::default()
    })
}

/// `btime` (boot time, Unix seconds) from `/proc/stat`.
pub fn parse_btime(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft "Max open files" limit from `/proc/self/limits`.
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Reads this process's [`ProcessStats`] (None off Linux or if `/proc` is
/// unreadable).
pub fn read_process() -> Option<ProcessStats> {
    // SAFETY: sysconf has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    let btime = parse_btime(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut p = parse_stat(&stat, ticks as f64, page as u64, btime)?;
    p.open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    p.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| parse_max_fds(&l));
    Some(p)
}

/// Writes the `process_*` families for `p`.
pub fn render_process(o: &mut String, p: &ProcessStats) {
    family(
        o,
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
    );
    let _ = writeln!(o, "process_cpu_seconds_total {}", p.cpu_seconds);
    family(
        o,
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
    );
    let _ = writeln!(o, "process_resident_memory_bytes {}", p.resident_bytes);
    family(
        o,
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
    );
    let _ = writeln!(o, "process_virtual_memory_bytes {}", p.virtual_bytes);
    family(
        o,
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
    );
    let _ = writeln!(o, "process_start_time_seconds {}", p.start_time_seconds);
    family(
        o,
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
    );
    let _ = writeln!(o, "process_open_fds {}", p.open_fds);
    if let Some(m) = p.max_fds {
        family(
            o,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
        );
        let _ = writeln!(o, "process_max_fds {m}");
    }
}

/// Writes this process's `process_*` families (nothing if `/proc` cannot be
/// read).
pub fn process(o: &mut String) {
    if let Some(p) = read_process() {
        render_process(o, &p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (sluice (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 9 0 1000 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let p = parse_stat(stat, 100.0, 4096, 1_700_000_000).unwrap();
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.start_time_seconds, 1_700_000_010.0);
        assert_eq!(p.virtual_bytes, 104_857_600);
        assert_eq!(p.resident_bytes, 2560 * 4096);
        assert!(parse_stat("garbage", 100.0, 4096, 0).is_none());
        assert!(parse_stat("1 (x) S 1 2", 100.0, 4096, 0).is_none());
    }

    #[test]
    fn btime_and_fd_limit() {
        assert_eq!(
            parse_btime("cpu 1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_max_fds("Max open files unlimited unlimited files"),
            None
        );
    }

    #[test]
    fn histograms_are_cumulative_with_inf_sum_and_count() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0] {
            h.observe(v);
        }
        let mut o = String::new();
        h.render(&mut o, "x_seconds", "host=\"h1\"");
        assert_eq!(
            o,
            "x_seconds_bucket{host=\"h1\",le=\"0.1\"} 1\nx_seconds_bucket{host=\"h1\",le=\"1\"} 3\n\
             x_seconds_bucket{host=\"h1\",le=\"+Inf\"} 4\nx_seconds_sum{host=\"h1\"} 4.25\nx_seconds_count{host=\"h1\"} 4\n"
        );
    }

    #[test]
    fn histograms_from_counts_measured_elsewhere() {
        let h = Histogram::from_counts(&[0.1, 1.0], &[1, 2, 1], 4.25).unwrap();
        let mut direct = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0] {
            direct.observe(v);
        }
        assert_eq!(h, direct);
        assert_eq!(h.count(), 4);
        assert!(Histogram::from_counts(&[0.1, 1.0], &[1, 2], 0.0).is_none());
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn this_process_is_readable() {
        let p = read_process().expect("/proc");
        assert!(p.resident_bytes > 0 && p.open_fds > 0 && p.start_time_seconds > 1.0e9);
    }
}
