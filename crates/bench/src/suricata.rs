//! The baseline of `sluice bench nf --suricata`: the real Suricata reading
//! the same HTTP mix as the `ips_rulefiles_http` row, written to a pcap, with
//! the same rule files. The goal of issue 20 is stated against Suricata's
//! usual figure per core; a figure in Gbit/s moves with the machine (this
//! VM's own runs of one build spread over a third), a ratio against
//! Suricata measured in the same run does not.
//!
//! What is timed: the on-CPU time of Suricata's one packet thread (`W#01`
//! under `--runmode single`: pcap reading, decoding, stream reassembly,
//! application-layer parsing and detection), read from its
//! `/proc/PID/task/TID/schedstat` every few milliseconds while it runs.
//! Loading the rules (Suricata's main thread, tens of seconds for ET Open)
//! and the flow manager's threads are left out, as the Sluice row leaves out
//! building its engine: both sides count only the traffic's time. Alert
//! outputs are off (Sluice's bench keeps its alerts in memory too); the
//! alerts are counted from Suricata's `stats.log` (`detect.alert`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_trafficgen::Trace;

/// A Suricata to run: its executable and configuration file.
#[derive(Debug, Clone)]
pub struct Suricata {
    /// The executable (or a wrapper that `exec`s it, so the PID is
    /// Suricata's: `scripts/suricata-reference.sh` writes one).
    pub exe: PathBuf,
    /// `suricata.yaml`; `classification.config` and `reference.config` are
    /// taken from its directory.
    pub config: PathBuf,
}

impl Suricata {
    /// The Suricata at `path`: a directory made by
    /// `scripts/suricata-reference.sh` (its `suricata.sh` and
    /// `root/etc/suricata/suricata.yaml`), or an executable, configured by
    /// `/etc/suricata/suricata.yaml` as Debian's package installs it.
    pub fn locate(path: &Path) -> Result<Suricata, String> {
        let (exe, config) = if path.is_dir() {
            (
                path.join("suricata.sh"),
                path.join("root/etc/suricata/suricata.yaml"),
            )
        } else {
            (
                path.to_path_buf(),
                PathBuf::from("/etc/suricata/suricata.yaml"),
            )
        };
        for (what, p) in [("executable", &exe), ("configuration", &config)] {
            if !p.is_file() {
                return Err(format!(
                    "Suricata's {what} {} does not exist (give a directory made by \
                     scripts/suricata-reference.sh, or the suricata executable)",
                    p.display()
                ));
            }
        }
        Ok(Suricata { exe, config })
    }

    /// The first line of `suricata -V` ("This is Suricata version ...").
    pub fn version(&self) -> Result<String, String> {
        let out = Command::new(&self.exe)
            .arg("-V")
            .output()
            .map_err(|e| format!("running {} -V: {e}", self.exe.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find(|l| l.contains("Suricata"))
            .map(|l| l.trim().to_string())
            .ok_or_else(|| format!("{} -V printed no version", self.exe.display()))
    }
}

/// One run of Suricata over a pcap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    /// On-CPU seconds of the packet thread.
    pub worker_cpu_secs: f64,
    /// Seconds from start to exit, rule loading included.
    pub wall_secs: f64,
    /// `decoder.pkts`: packets Suricata decoded.
    pub packets: u64,
    /// `detect.alert`: alerts raised.
    pub alerts: u64,
    /// `app_layer.tx.http`: HTTP transactions parsed (that Suricata did
    /// read the mix as HTTP, not as bytes).
    pub http_tx: u64,
}

/// Writes `trace` as an Ethernet pcap at `path`.
pub fn write_pcap(trace: &Trace, path: &Path) -> Result<(), String> {
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = sluice_pcap::PcapWriter::new(std::io::BufWriter::new(f))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for (ts, frame) in trace.iter() {
        w.write(ts, frame)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    use std::io::Write;
    w.finish()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .flush()
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Concatenates `rules` into one file in `dir` (one `-S` file is what every
/// Suricata version accepts); returns its path.
pub fn join_rules(rules: &[PathBuf], dir: &Path) -> Result<PathBuf, String> {
    let mut text = Vec::new();
    for r in rules {
        let mut t = std::fs::read(r).map_err(|e| format!("{}: {e}", r.display()))?;
        if t.last().is_some_and(|&b| b != b'\n') {
            t.push(b'\n');
        }
        text.extend_from_slice(&t);
    }
    let path = dir.join("suricata-bench.rules");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Runs Suricata over `pcap` with the rule file `rules`, logs in `out`
/// (made if missing), and times its packet thread; `inline`: with
/// `--simulate-ips`, the stream inspected as an inline IPS inspects it (each
/// packet's bytes before it leaves, as Sluice's IPS does), not as an IDS
/// (in chunks, once acknowledged).
pub fn run(
    s: &Suricata,
    rules: &Path,
    pcap: &Path,
    out: &Path,
    inline: bool,
) -> Result<Run, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let etc = s.config.parent().unwrap_or(Path::new("."));
    let log = std::fs::File::create(out.join("stdout.log"))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let set = |k: &str, v: &Path| format!("{k}={}", v.display());
    let start = Instant::now();
    let mut child = Command::new(&s.exe)
        .arg("-c")
        .arg(&s.config)
        .args(["-k", "none", "--runmode", "single", "-r"])
        .arg(pcap)
        .arg("-l")
        .arg(out)
        .arg("-S")
        .arg(rules)
        .arg("--set")
        .arg(set(
            "classification-file",
            &etc.join("classification.config"),
        ))
        .arg("--set")
        .arg(set("reference-config-file", &etc.join("reference.config")))
        .args(["--set", "threshold-file=/dev/null"])
        // The alert outputs: Sluice's bench keeps its alerts in memory.
        .args(["--set", "outputs.0.fast.enabled=no"])
        .args(["--set", "outputs.1.eve-log.enabled=no"])
        .args(inline.then_some("--simulate-ips"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("running {}: {e}", s.exe.display()))?;
    let task = PathBuf::from(format!("/proc/{}/task", child.id()));
    let mut worker: Option<PathBuf> = None;
    let mut worker_ns = 0u64;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if worker.is_none() {
            worker = find_thread(&task, "W#01");
        }
        if let Some(w) = &worker {
            // The thread's last reading before it ends is kept: at most one
            // poll interval of its time is missed.
            if let Some(ns) = schedstat_ns(w) {
                worker_ns = worker_ns.max(ns);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall_secs = start.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!(
            "Suricata exited with {status}; its output is in {}",
            out.join("stdout.log").display()
        ));
    }
    if worker.is_none() {
        return Err(format!(
            "no packet thread W#01 was seen while Suricata ran ({})",
            out.join("stdout.log").display()
        ));
    }
    let stats = std::fs::read_to_string(out.join("stats.log"))
        .map_err(|e| format!("{}: {e}", out.join("stats.log").display()))?;
    Ok(Run {
        worker_cpu_secs: worker_ns as f64 / 1e9,
        wall_secs,
        packets: last_counter(&stats, "decoder.pkts").unwrap_or(0),
        alerts: last_counter(&stats, "detect.alert").unwrap_or(0),
        http_tx: last_counter(&stats, "app_layer.tx.http").unwrap_or(0),
    })
}

/// The task directory of the thread of `task` named `name`.
fn find_thread(task: &Path, name: &str) -> Option<PathBuf> {
    std::fs::read_dir(task).ok()?.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        (comm.trim_end() == name).then(|| t.path())
    })
}

/// A thread's on-CPU nanoseconds (the first field of its schedstat).
fn schedstat_ns(thread: &Path) -> Option<u64> {
    std::fs::read_to_string(thread.join("schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The last value of counter `name` in a `stats.log` (Suricata writes a
/// table every interval and at exit; counters that are zero are left out).
pub fn last_counter(stats: &str, name: &str) -> Option<u64> {
    stats
        .lines()
        .filter_map(|l| {
            let mut cols = l.split('|').map(str::trim);
            (cols.next()? == name).then_some(())?;
            cols.nth(1)?.parse().ok()
        })
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_the_last_table() {
        let log = "\
Counter                                       | TM Name                   | Value
------------------------------------------------------------------------------------
decoder.pkts                                  | Total                     | 10
detect.alert                                  | Total                     | 2
------------------------------------------------------------------------------------
decoder.pkts                                  | Total                     | 1000
decoder.bytes                                 | Total                     | 267800
";
        assert_eq!(last_counter(log, "decoder.pkts"), Some(1000));
        assert_eq!(last_counter(log, "detect.alert"), Some(2));
        assert_eq!(last_counter(log, "decoder"), None);
        assert_eq!(last_counter(log, "flow.total"), None);
    }

    #[test]
    fn a_missing_suricata_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = Suricata::locate(dir.path()).unwrap_err();
        assert!(e.contains("suricata.sh"), "{e}");
        let e = Suricata::locate(&dir.path().join("nope")).unwrap_err();
        assert!(e.contains("nope"), "{e}");
    }

    #[test]
    fn rule_files_are_joined_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.rules");
        let b = dir.path().join("b.rules");
        std::fs::write(&a, "alert tcp any any -> any any (sid:1;)").unwrap();
        std::fs::write(&b, "alert tcp any any -> any any (sid:2;)\n").unwrap();
        let j = join_rules(&[a, b], dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(j).unwrap(),
            "alert tcp any any -> any any (sid:1;)\nalert tcp any any -> any any (sid:2;)\n"
        );
    }
}
