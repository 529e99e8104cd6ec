//! The SIEM sinks' positions in the EVE files, kept across agent restarts.
//!
//! Every sink has its own position in each file: the start of the oldest
//! line it still holds (queued, not yet sent), or, holding none of that
//! file, how far the files were read. The forwarder saves them in the run
//! directory about once a second ([`SAVE_EVERY`], written to a temporary
//! file and renamed over the old one, so a crash leaves the old or the new
//! whole) and when it stops. A restarted agent reads on from them: lines
//! written while it was down are sent, and of those sent before it stopped
//! only the ones after the last save are sent again (delivery stays at
//! least once).
//!
//! Files are known by inode, as in [`super::tail`]; since a deleted file's
//! inode may be given to a new one, the saved entry also holds a
//! fingerprint of the file's first bytes, and an inode whose start differs
//! is a new file, read from its start. A file that appeared while the
//! agent was down (a rotation's new file) is read from its start too. The
//! planning here is pure; [`load`] and [`store`] are the I/O.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use super::tail::Listed;

/// The file in the agent's run directory that holds the positions.
pub const FILE: &str = "siem-positions.json";

/// How often the positions are saved (when they changed).
pub const SAVE_EVERY: Duration = Duration::from_secs(1);

/// Bytes of a file's start its fingerprint covers (fewer while it is shorter).
pub const PREFIX: usize = 64;

/// The saved positions.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    /// One per file the forwarder followed.
    pub files: Vec<SavedFile>,
}

/// One file's saved positions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedFile {
    /// Its tenant (directory).
    pub tenant: String,
    /// Its name when saved (for people reading the file; it may have been
    /// rotated since).
    pub name: String,
    /// Its inode.
    pub ino: u64,
    /// Its start: how many bytes, and their FNV-1a hash.
    pub prefix: Fingerprint,
    /// Each sink's position (by sink name: `redis`, `syslog-udp`, ...).
    pub sinks: BTreeMap<String, u64>,
}

/// A file's first bytes, in short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fingerprint {
    /// How many bytes (at most [`PREFIX`]).
    pub len: u64,
    /// Their 64-bit FNV-1a hash (stable across builds, unlike std's hasher).
    pub fnv: u64,
}

impl Fingerprint {
    /// The fingerprint of `start`, a file's first bytes.
    pub fn of(start: &[u8]) -> Fingerprint {
        let fnv = start.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        Fingerprint {
            len: start.len() as u64,
            fnv,
        }
    }
}

/// Where to start after a restart.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resume {
    /// The reader's start in each listed file (by inode).
    pub read_from: HashMap<u64, u64>,
    /// For each sink, in the order asked, the position before which its lines
    /// were already handled (not sent again).
    pub skip: Vec<HashMap<u64, u64>>,
}

/// Where to resume each of `listed` (the files now) for `sinks`, from
/// `saved`. `same_start(file, fp)` says whether listed file `file` still
/// starts with the saved fingerprint (the caller reads it).
///
/// A file saved with a matching start resumes at each sink's position (a
/// sink not saved, newly configured, starts at the file's end: no history
/// is replayed to it); the reader starts at the least of them. Any other
/// file is read from its start: it appeared while the agent was down.
pub fn plan(
    saved: &Saved,
    listed: &[Listed],
    sinks: &[&str],
    mut same_start: impl FnMut(usize, &Fingerprint) -> bool,
) -> Resume {
    let by_ino: HashMap<u64, &SavedFile> = saved.files.iter().map(|f| (f.ino, f)).collect();
    let mut r = Resume {
        read_from: HashMap::new(),
        skip: vec![HashMap::new(); sinks.len()],
    };
    for (i, f) in listed.iter().enumerate() {
        // A file shorter than a saved position was truncated, not appended
        // to: not the file saved.
        let known = by_ino.get(&f.ino).filter(|s| {
            s.tenant == f.tenant
                && s.prefix.len <= f.size
                && s.sinks.values().all(|p| *p <= f.size)
                && same_start(i, &s.prefix)
        });
        let Some(s) = known else {
            r.read_from.insert(f.ino, 0);
            continue;
        };
        let mut from = f.size;
        for (k, name) in sinks.iter().enumerate() {
            let at = s.sinks.get(*name).copied().unwrap_or(f.size);
            r.skip[k].insert(f.ino, at);
            from = from.min(at);
        }
        r.read_from.insert(f.ino, from);
    }
    r
}

/// Each sink's position in file `ino`: the start of the oldest line of it
/// the sink still holds (`queued`: (inode, start) of its queue, oldest
/// first), else `read` (how far the reader got) or the position it resumed
/// at (`skip`), whichever is further.
pub fn position(
    ino: u64,
    read: u64,
    queued: impl IntoIterator<Item = (u64, u64)>,
    skip: &HashMap<u64, u64>,
) -> u64 {
    queued
        .into_iter()
        .find(|(i, _)| *i == ino)
        .map(|(_, start)| start)
        .unwrap_or_else(|| read.max(skip.get(&ino).copied().unwrap_or(0)))
}

/// Reads the saved positions at `path`: None if there are none (the first
/// start); an error naming the file if it cannot be read or parsed.
pub fn load(path: &Path) -> Result<Option<Saved>, String> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| format!("{}: not the SIEM sinks' positions: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Saves `saved` at `path`: written to `path.tmp`, flushed to disk and
/// renamed over `path`, so that a crash leaves either file whole.
pub fn store(path: &Path, saved: &Saved) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(saved).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(ino: u64, size: u64) -> Listed {
        Listed {
            tenant: "acme".into(),
            ino,
            size,
        }
    }

    fn saved(ino: u64, sinks: &[(&str, u64)]) -> SavedFile {
        SavedFile {
            tenant: "acme".into(),
            name: "acme_ips_0.eve.json".into(),
            ino,
            prefix: Fingerprint::of(b"{\"a\":1}\n"),
            sinks: sinks.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
        }
    }

    #[test]
    fn known_files_resume_at_each_sink_s_position_and_new_ones_from_their_start() {
        let s = Saved {
            files: vec![saved(1, &[("redis", 300), ("syslog-tcp", 500)])],
        };
        // Inode 1 grew to 900 while the agent was down (or was rotated to
        // `.1`: the inode is the same); inode 2 is new.
        let r = plan(
            &s,
            &[listed(1, 900), listed(2, 40)],
            &["redis", "syslog-tcp"],
            |_, _| true,
        );
        assert_eq!(r.read_from, HashMap::from([(1, 300), (2, 0)]));
        assert_eq!(r.skip[0], HashMap::from([(1, 300)]));
        assert_eq!(r.skip[1], HashMap::from([(1, 500)]));
    }

    #[test]
    fn a_reused_inode_a_shrunk_file_and_a_new_sink_are_not_taken_for_the_saved_file() {
        let s = Saved {
            files: vec![saved(1, &[("redis", 300)]), saved(2, &[("redis", 50)])],
        };
        // Inode 1's start differs: another file. Inode 2 lost its start
        // (shorter than the fingerprint): another file too.
        let r = plan(&s, &[listed(1, 900), listed(2, 4)], &["redis"], |i, _| {
            i != 0
        });
        assert_eq!(r.read_from, HashMap::from([(1, 0), (2, 0)]));
        assert!(r.skip[0].is_empty());
        // Shorter than a saved position: truncated, read from its start.
        let r = plan(&s, &[listed(1, 299)], &["redis"], |_, _| true);
        assert_eq!(r.read_from, HashMap::from([(1, 0)]));
        // A sink configured since the save starts at the end: no replay.
        let r = plan(&s, &[listed(2, 200)], &["redis", "syslog-udp"], |_, _| true);
        assert_eq!(r.read_from, HashMap::from([(2, 50)]));
        assert_eq!(r.skip[1], HashMap::from([(2, 200)]));
        // Another tenant's file with the same inode number is not it.
        let other = Listed {
            tenant: "other".into(),
            ..listed(2, 200)
        };
        assert_eq!(
            plan(&s, &[other], &["redis"], |_, _| true).read_from,
            HashMap::from([(2, 0)])
        );
    }

    #[test]
    fn a_sink_s_position_is_its_oldest_queued_line_else_how_far_it_is_handled() {
        let skip = HashMap::from([(7, 800)]);
        assert_eq!(position(1, 500, [(2, 10), (1, 120), (1, 200)], &skip), 120);
        assert_eq!(position(1, 500, [(2, 10)], &skip), 500);
        // Resumed ahead of the reader (another sink was behind): not back.
        assert_eq!(position(7, 600, [], &skip), 800);
        assert_eq!(position(7, 900, [], &skip), 900);
    }

    #[test]
    fn saved_positions_survive_a_store_and_load_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("siem-positions.json");
        assert_eq!(load(&path).unwrap(), None);
        let s = Saved {
            files: vec![saved(1, &[("redis", 300)])],
        };
        store(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), Some(s));
        assert!(!path.with_extension("tmp").exists());
        std::fs::write(&path, b"{not json").unwrap();
        let e = load(&path).unwrap_err();
        assert!(e.contains("siem-positions.json"), "{e}");
        assert_ne!(Fingerprint::of(b"ab"), Fingerprint::of(b"ba"));
    }
}
