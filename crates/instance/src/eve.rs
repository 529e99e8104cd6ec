//! An instance's EVE log: the alerts, flow records and anomalies its functions
//! report, one EVE JSON line each, appended to a file its agent gave it
//! (`--eve PATH`, under the agent's per-tenant log directory) and rotated by
//! size: `PATH` is renamed `PATH.1` (and `PATH.1` `PATH.2`, ...) once it would
//! pass [`EveLog::max_bytes`], keeping [`EveLog::keep`] old files.
//!
//! Writing is the instance loop's I/O edge: [`crate::DataPath`] collects the
//! events of each batch, and the loop hands them here between batches. A file
//! that cannot be written loses those events (counted, reported once) and
//! never stops the data path.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sluice_nf::Event;

/// Default size at which the log rotates.
pub const DEFAULT_MAX_BYTES: u64 = 16 << 20;
/// Default number of rotated files kept.
pub const DEFAULT_KEEP: u32 = 4;

/// An EVE JSON lines file with size-based rotation.
pub struct EveLog {
    path: PathBuf,
    /// The sensor name written as each event's `host` (the instance name).
    host: String,
    file: Option<BufWriter<File>>,
    size: u64,
    /// Rotate once the file would pass this many bytes.
    pub max_bytes: u64,
    /// Rotated files kept (`PATH.1` .. `PATH.keep`).
    pub keep: u32,
    /// Events written.
    pub written: u64,
    /// Events lost to write errors.
    pub lost: u64,
    /// The last write error, reported once per distinct message.
    pub last_error: Option<String>,
    line: String,
}

impl EveLog {
    /// A log appending to `path` (created with its directory on first write),
    /// naming `host` as the sensor.
    pub fn new(path: &Path, host: &str) -> EveLog {
        EveLog {
            path: path.to_path_buf(),
            host: host.to_string(),
            file: None,
            size: 0,
            max_bytes: DEFAULT_MAX_BYTES,
            keep: DEFAULT_KEEP,
            written: 0,
            lost: 0,
            last_error: None,
            line: String::new(),
        }
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `events` and flushes; returns how many were written.
    pub fn write(&mut self, events: &[Event]) -> usize {
        if events.is_empty() {
            return 0;
        }
        match self.try_write(events) {
            Ok(n) => n,
            Err(e) => {
                // The stream's state is unknown: reopen on the next write.
                self.file = None;
                let msg = format!("EVE log {}: {e}", self.path.display());
                if self.last_error.as_deref() != Some(&msg) {
                    tracing::error!(
                        path = %self.path.display(),
                        error = %e,
                        "cannot write the EVE log: events are lost until it can be written"
                    );
                    self.last_error = Some(msg);
                }
                self.lost += events.len() as u64;
                0
            }
        }
    }

    fn try_write(&mut self, events: &[Event]) -> std::io::Result<usize> {
        for ev in events {
            let mut v = ev.to_eve();
            if let Value::Object(m) = &mut v {
                m.insert("host".into(), self.host.clone().into());
            }
            self.line.clear();
            self.line.push_str(&v.to_string());
            self.line.push('\n');
            let len = self.line.len() as u64;
            if self.size > 0 && self.size + len > self.max_bytes {
                self.rotate()?;
            }
            if self.file.is_none() {
                self.open()?;
            }
            if let Some(f) = self.file.as_mut() {
                f.write_all(self.line.as_bytes())?;
            }
            self.size += len;
            self.written += 1;
        }
        if let Some(f) = self.file.as_mut() {
            f.flush()?;
        }
        Ok(events.len())
    }

    fn open(&mut self) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = f.metadata()?.len();
        self.file = Some(BufWriter::new(f));
        Ok(())
    }

    /// `PATH.k` → `PATH.k+1` from the oldest kept down, `PATH` → `PATH.1`.
    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        let name = |k: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{k}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            for k in (1..self.keep).rev() {
                let from = name(k);
                if from.exists() {
                    std::fs::rename(&from, name(k + 1))?;
                }
            }
            std::fs::rename(&self.path, name(1))?;
        }
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_nf::{Event, FlowRecord};
    use sluice_wire::{FlowKey, IpAddr};

    fn flow(i: u64) -> Event {
        Event::Flow(FlowRecord {
            flow: FlowKey {
                zone: 0,
                src: IpAddr::V4([10, 0, 0, 1]),
                dst: IpAddr::V4([10, 0, 0, 2]),
                src_port: 1000 + i as u16,
                dst_port: 80,
                proto: 6,
            },
            flow_id: i,
            pkts_toserver: i,
            pkts_toclient: 0,
            bytes_toserver: 60 * i,
            bytes_toclient: 0,
            start_ns: 0,
            end_ns: 1_000_000_000,
            reason: "timeout",
            state: "new",
        })
    }

    fn lines(p: &Path) -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn events_are_appended_as_eve_lines_naming_the_instance() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acme").join("fw-0.eve.json");
        let mut log = EveLog::new(&path, "acme/fw/0");
        assert_eq!(log.write(&[flow(1), flow(2)]), 2);
        // A second log on the same file (a restarted instance) appends.
        let mut again = EveLog::new(&path, "acme/fw/0");
        again.write(&[flow(3)]);
        let got = lines(&path);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0]["event_type"], "flow");
        assert_eq!(got[0]["host"], "acme/fw/0");
        assert_eq!(got[2]["flow_id"], 3);
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_so_many_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("eve.json");
        let mut log = EveLog::new(&path, "i");
        let one = flow(1).to_eve_line().len() as u64 + 20;
        log.max_bytes = 3 * one;
        log.keep = 2;
        for i in 0..20 {
            log.write(&[flow(i)]);
        }
        assert_eq!(log.written, 20);
        let sizes: Vec<usize> = [
            path.clone(),
            dir.path().join("eve.json.1"),
            dir.path().join("eve.json.2"),
        ]
        .iter()
        .map(|p| lines(p).len())
        .collect();
        assert!(sizes.iter().all(|&n| (1..=3).contains(&n)), "{sizes:?}");
        assert!(!dir.path().join("eve.json.3").exists());
        // The newest events are in the current file, the older in .1.
        let cur = lines(&path);
        assert_eq!(cur.last().unwrap()["flow_id"], 19);
        let older = lines(&dir.path().join("eve.json.1"));
        assert!(older.last().unwrap()["flow_id"].as_u64() < cur[0]["flow_id"].as_u64());
    }

    #[test]
    fn an_unwritable_file_loses_events_counted_and_does_not_fail() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: every open fails.
        let path = dir.path().join("eve.json");
        std::fs::create_dir(&path).unwrap();
        let mut log = EveLog::new(&path, "i");
        assert_eq!(log.write(&[flow(1), flow(2)]), 0);
        assert_eq!(log.lost, 2);
        assert!(log.last_error.as_deref().unwrap().contains("eve.json"));
    }
}
