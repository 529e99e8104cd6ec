//! Which bytes of the EVE files to read next: a cursor per file, followed
//! through the instances' rotations. Sans-IO: the forwarder lists the files
//! (name, inode, size) and gets back the ranges to read; it reports how far
//! it consumed (up to the last complete line).
//!
//! Files are followed by inode, not name: an instance rotates by renaming
//! (`X.eve.json` becomes `X.eve.json.1`), so the lines appended to a file
//! between the last read and its rotation are read from its new name. A file
//! whose inode is new is read from its start, except at the first listing
//! of a forwarder with no saved positions, where what is already there was
//! written before it started and is skipped; one that resumes from saved
//! positions ([`Cursors::resume`], [`super::saved`]) reads on from them.

use std::collections::HashMap;

/// One EVE file as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The tenant whose directory holds it.
    pub tenant: String,
    /// Its inode: the identity that survives rotation.
    pub ino: u64,
    /// Its size now.
    pub size: u64,
}

/// A range of one file to read: `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Index in the listing handed to [`Cursors::plan`].
    pub file: usize,
    /// First byte to read.
    pub from: u64,
    /// One past the last byte (at most `from + max_read`).
    pub to: u64,
}

/// The read position of every file seen.
#[derive(Debug, Default)]
pub struct Cursors {
    at: HashMap<u64, u64>,
    listed_once: bool,
}

impl Cursors {
    /// Cursors resuming at `at` (inode to offset, [`super::saved::plan`]):
    /// any file not in it is new and read from its start.
    pub fn resume(at: HashMap<u64, u64>) -> Cursors {
        Cursors {
            at,
            listed_once: true,
        }
    }

    /// How far file `ino` was read (None: not seen in the last listing).
    pub fn position(&self, ino: u64) -> Option<u64> {
        self.at.get(&ino).copied()
    }

    /// What to read of `files`, at most `max_read` bytes of each. Files no
    /// longer listed are forgotten; one that shrank (a new file given the
    /// inode of a deleted one) is read from its start.
    pub fn plan(&mut self, files: &[Listed], max_read: u64) -> Vec<Read> {
        let first = !self.listed_once;
        self.listed_once = true;
        self.at.retain(|ino, _| files.iter().any(|f| f.ino == *ino));
        let mut reads = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let at = self
                .at
                .entry(f.ino)
                .or_insert(if first { f.size } else { 0 });
            if *at > f.size {
                *at = 0;
            }
            if f.size > *at {
                reads.push(Read {
                    file: i,
                    from: *at,
                    to: f.size.min(*at + max_read),
                });
            }
        }
        reads
    }

    /// Records that `n` bytes from `from` of inode `ino` were consumed.
    pub fn consumed(&mut self, ino: u64, from: u64, n: u64) {
        if let Some(at) = self.at.get_mut(&ino) {
            if *at == from {
                *at += n;
            }
        }
    }
}

/// The length of `buf` up to and including its last newline: the complete
/// lines (a line being written is left for the next read).
pub fn complete(buf: &[u8]) -> usize {
    buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(ino: u64, size: u64) -> Listed {
        Listed {
            tenant: "acme".into(),
            ino,
            size,
        }
    }

    #[test]
    fn what_was_there_at_start_is_skipped_and_new_files_are_read_whole() {
        let mut c = Cursors::default();
        assert!(c.plan(&[f(1, 500)], 1 << 20).is_empty());
        // Appended after the start: read from where it was.
        assert_eq!(
            c.plan(&[f(1, 700), f(2, 40)], 1 << 20),
            [
                Read {
                    file: 0,
                    from: 500,
                    to: 700
                },
                Read {
                    file: 1,
                    from: 0,
                    to: 40
                }
            ]
        );
    }

    #[test]
    fn a_rotated_file_is_finished_under_its_new_name_and_partial_lines_wait() {
        let mut c = Cursors::default();
        c.plan(&[], 1 << 20);
        let r = c.plan(&[f(1, 100)], 1 << 20);
        assert_eq!((r[0].from, r[0].to), (0, 100));
        // Only 90 bytes were complete lines.
        c.consumed(1, 0, 90);
        // Then inode 1 grew to 150 and was renamed `.1`; inode 3 is the new file.
        let r = c.plan(&[f(3, 20), f(1, 150)], 1 << 20);
        assert_eq!(
            r,
            [
                Read {
                    file: 0,
                    from: 0,
                    to: 20
                },
                Read {
                    file: 1,
                    from: 90,
                    to: 150
                }
            ]
        );
        c.consumed(3, 0, 20);
        c.consumed(1, 90, 60);
        assert!(c.plan(&[f(3, 20), f(1, 150)], 1 << 20).is_empty());
        // A stale report (a read planned before) moves nothing.
        c.consumed(1, 90, 60);
        assert!(c.plan(&[f(3, 20), f(1, 150)], 1 << 20).is_empty());
    }

    #[test]
    fn reads_are_bounded_and_a_reused_inode_is_read_from_its_start() {
        let mut c = Cursors::default();
        c.plan(&[], 1 << 20);
        let r = c.plan(&[f(1, 5000)], 1000);
        assert_eq!((r[0].from, r[0].to), (0, 1000));
        c.consumed(1, 0, 1000);
        let r = c.plan(&[f(1, 5000)], 1000);
        assert_eq!((r[0].from, r[0].to), (1000, 2000));
        c.consumed(1, 1000, 1000);
        // Deleted, and its inode given to a new, shorter file in the same poll.
        let r = c.plan(&[f(1, 300)], 1000);
        assert_eq!((r[0].from, r[0].to), (0, 300));
        // Gone from the listing: forgotten, so it is new if it comes back.
        c.plan(&[], 1000);
        let r = c.plan(&[f(1, 300)], 1000);
        assert_eq!((r[0].from, r[0].to), (0, 300));
    }

    #[test]
    fn only_complete_lines_are_consumed() {
        assert_eq!(complete(b"{\"a\":1}\n{\"b\""), 8);
        assert_eq!(complete(b"{\"a\":1}\n"), 8);
        assert_eq!(complete(b"{\"a\""), 0);
        assert_eq!(complete(b""), 0);
    }
}
