//! Compressed HTTP bodies: a response whose `Content-Encoding` is `gzip`
//! (`x-gzip`) or `deflate` has its body inflated before body rules inspect
//! it, as Suricata's HTTP parser (libhtp) does by default, so a signature
//! in a compressed page is found. Without it, any web server's compression
//! hides a page from every `file_data` rule.
//!
//! The inflater's state (a 32 KiB window and the decoder's tables) cannot be
//! written to the store, so the store keeps what rebuilds it: the body's
//! compressed bytes so far (up to [`Z_KEPT`]), with the inflated body the
//! rules inspect ([`super::body`]). An instance keeps the inflaters of the
//! bodies it is receiving in memory ([`Inflaters`], a cache: a miss
//! inflates the kept bytes again), so a packet normally inflates only its
//! own bytes, and any instance can continue any body. A body whose
//! compressed bytes went past [`Z_KEPT`] and whose inflater the instance
//! does not hold is inspected no further (`ips_http_inflate_lost`).
//!
//! A body inflating to more than [`MAX_INFLATED`] bytes (Suricata's
//! `compression-bomb-limit` default) is inflated no further
//! (`ips_http_inflate_capped`); a corrupt stream stops inflating where it
//! breaks (`ips_http_inflate_errors`), what came before still inspected.

use miniz_oxide::inflate::stream::{inflate, InflateState};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
use rustc_hash::FxHashMap;
use sluice_wire::FlowKey;

/// Compressed bytes of a body kept in the store to rebuild its inflater.
pub const Z_KEPT: usize = 100 * 1024;
/// Inflated bytes per body at most (Suricata's `compression-bomb-limit`).
pub const MAX_INFLATED: u64 = 1024 * 1024;
/// Inflaters an instance keeps (each about 43 KiB).
pub const CACHED: usize = 256;

/// A body's content coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Coding {
    /// Not compressed (or a coding not inflated here).
    #[default]
    Identity,
    /// `gzip` / `x-gzip` (RFC 1952).
    Gzip,
    /// `deflate`: zlib (RFC 1950), or raw deflate as some servers send.
    Deflate,
}

impl Coding {
    /// The coding a head's `Content-Encoding` field names (`head`: the
    /// message's start line and header lines). Only one coding is inflated:
    /// a list (`gzip, br`) or another coding leaves the body as sent.
    pub fn of_head(head: &[u8]) -> Coding {
        let mut coding = Coding::Identity;
        for line in head.split(|&b| b == b'\n').skip(1) {
            let Some(c) = memchr::memchr(b':', line) else {
                continue;
            };
            if !line[..c]
                .trim_ascii()
                .eq_ignore_ascii_case(b"content-encoding")
            {
                continue;
            }
            let v = line[c + 1..].trim_ascii();
            coding = if v.eq_ignore_ascii_case(b"gzip") || v.eq_ignore_ascii_case(b"x-gzip") {
                Coding::Gzip
            } else if v.eq_ignore_ascii_case(b"deflate") {
                Coding::Deflate
            } else {
                // Repeated or unknown: not inflated.
                return Coding::Identity;
            };
        }
        coding
    }

    /// The byte a blob stores.
    pub fn code(self) -> u8 {
        match self {
            Coding::Identity => 0,
            Coding::Gzip => 1,
            Coding::Deflate => 2,
        }
    }

    /// The coding a blob's byte names.
    pub fn from_code(c: u8) -> Option<Coding> {
        Some(match c {
            0 => Coding::Identity,
            1 => Coding::Gzip,
            2 => Coding::Deflate,
            _ => return None,
        })
    }
}

/// Why inflating stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The stream is corrupt.
    Corrupt,
    /// The body inflated to [`MAX_INFLATED`].
    Capped,
}

/// One body's inflater: where it is in the compressed bytes.
#[derive(Clone)]
pub struct Inflater {
    coding: Coding,
    state: Box<InflateState>,
    /// Compressed bytes taken so far (the gzip header included).
    taken: u64,
    /// The gzip header's length once read.
    header: Option<usize>,
    /// Header bytes seen so far while the header is incomplete.
    head_buf: Vec<u8>,
    /// Inflated bytes so far.
    made: u64,
    /// The stream ended (its trailer may follow).
    ended: bool,
}

/// The length of a gzip header at the start of `b` (RFC 1952 §2.3), `Ok(None)`
/// while incomplete.
fn gzip_header(b: &[u8]) -> Result<Option<usize>, Stop> {
    if b.len() < 10 {
        return if b.iter().zip([0x1f, 0x8b, 8]).any(|(x, y)| *x != y) {
            Err(Stop::Corrupt)
        } else {
            Ok(None)
        };
    }
    if b[..3] != [0x1f, 0x8b, 8] {
        return Err(Stop::Corrupt);
    }
    let flags = b[3];
    let mut at = 10;
    if flags & 4 != 0 {
        // FEXTRA: a two-byte length, then that many bytes.
        let Some(x) = b.get(at..at + 2) else {
            return Ok(None);
        };
        at += 2 + u16::from_le_bytes([x[0], x[1]]) as usize;
    }
    for bit in [8u8, 16] {
        // FNAME, FCOMMENT: zero-terminated.
        if flags & bit != 0 {
            match b.get(at..).and_then(|r| memchr::memchr(0, r)) {
                Some(z) => at += z + 1,
                None => return Ok(None),
            }
        }
    }
    if flags & 2 != 0 {
        at += 2; // FHCRC
    }
    Ok((b.len() >= at).then_some(at))
}

impl Inflater {
    /// An inflater at the start of a body of `coding` (not identity).
    pub fn new(coding: Coding) -> Inflater {
        Inflater {
            coding,
            state: InflateState::new_boxed(DataFormat::Raw),
            taken: 0,
            header: None,
            head_buf: Vec::new(),
            made: 0,
            ended: false,
        }
    }

    /// Compressed bytes taken so far.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Inflates the next compressed bytes `z`, appending what they make to
    /// `out` (up to [`MAX_INFLATED`] for the body in all).
    pub fn feed(&mut self, z: &[u8], out: &mut Vec<u8>) -> Result<(), Stop> {
        self.taken += z.len() as u64;
        if self.header.is_some() {
            return if self.ended {
                Ok(())
            } else {
                self.inflate(z, out)
            };
        }
        // The wrapper's first bytes, kept until whole: a gzip header to
        // skip, or for `deflate` whether a zlib header is there.
        self.head_buf.extend_from_slice(z);
        let buf = &self.head_buf;
        let len = match self.coding {
            Coding::Gzip => gzip_header(buf)?,
            _ if buf.len() < 2 => None,
            _ => Some(0),
        };
        let Some(len) = len else {
            return Ok(());
        };
        // A zlib header: CM 8 and the check bits (RFC 1950 §2.2); else
        // raw deflate, which some servers send as `deflate`.
        let zlib = buf[0] & 0x0f == 8 && (u16::from(buf[0]) << 8 | u16::from(buf[1])) % 31 == 0;
        if self.coding == Coding::Deflate && zlib {
            self.state.reset(DataFormat::Zlib);
        }
        self.header = Some(len);
        let rest = std::mem::take(&mut self.head_buf);
        self.inflate(&rest[len..], out)
    }

    fn inflate(&mut self, mut z: &[u8], out: &mut Vec<u8>) -> Result<(), Stop> {
        let mut chunk = [0u8; 16 * 1024];
        while !self.ended {
            if self.made >= MAX_INFLATED {
                return Err(Stop::Capped);
            }
            let r = inflate(&mut self.state, z, &mut chunk, MZFlush::None);
            let room = (MAX_INFLATED - self.made).min(r.bytes_written as u64) as usize;
            out.extend_from_slice(&chunk[..room]);
            self.made += room as u64;
            z = &z[r.bytes_consumed..];
            match r.status {
                Ok(MZStatus::StreamEnd) => self.ended = true,
                Ok(_) => {}
                // No progress possible: all input taken, all output given.
                Err(MZError::Buf) => return Ok(()),
                Err(_) => return Err(Stop::Corrupt),
            }
            if z.is_empty() && r.bytes_written < chunk.len() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// An instance's inflaters of the bodies it is receiving, by flow and
/// direction: a cache (a miss rebuilds one from the bytes the store keeps).
#[derive(Default)]
pub struct Inflaters {
    map: FxHashMap<(FlowKey, u8), Inflater>,
}

impl Inflaters {
    /// The inflater of direction `d` of flow `canon` if it has taken exactly
    /// `taken` compressed bytes (it is where the body is), else none.
    pub fn take(&mut self, canon: &FlowKey, d: usize, taken: u64) -> Option<Inflater> {
        let i = self.map.remove(&(*canon, d as u8))?;
        (i.taken == taken).then_some(i)
    }

    /// Keeps `i` for direction `d` of flow `canon` (an arbitrary one goes
    /// when [`CACHED`] are kept).
    pub fn put(&mut self, canon: &FlowKey, d: usize, i: Inflater) {
        if self.map.len() >= CACHED {
            if let Some(k) = self.map.keys().next().copied() {
                self.map.remove(&k);
            }
        }
        self.map.insert((*canon, d as u8), i);
    }

    /// Forgets direction `d` of flow `canon`'s inflater.
    pub fn forget(&mut self, canon: &FlowKey, d: usize) {
        // Called at every HTTP message's head: most instances hold no
        // inflater, and then the key is not even hashed.
        if self.map.is_empty() {
            return;
        }
        self.map.remove(&(*canon, d as u8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use miniz_oxide::deflate::{compress_to_vec, compress_to_vec_zlib};

    fn gzip(data: &[u8], name: bool) -> Vec<u8> {
        let mut v = vec![0x1f, 0x8b, 8, if name { 8 } else { 0 }, 0, 0, 0, 0, 0, 3];
        if name {
            v.extend_from_slice(b"page.html\0");
        }
        v.extend(compress_to_vec(data, 6));
        // CRC32 and size: not checked here.
        v.extend_from_slice(&[0; 8]);
        v
    }

    fn page() -> Vec<u8> {
        let mut p = b"<html><body>".to_vec();
        for i in 0..2000 {
            p.extend_from_slice(format!("<p>line {i} of a page</p>").as_bytes());
        }
        p.extend_from_slice(b"MALWARE-BODY</body></html>");
        p
    }

    fn inflate_cut(coding: Coding, z: &[u8], cut: usize) -> (Vec<u8>, Result<(), Stop>) {
        let mut i = Inflater::new(coding);
        let mut out = Vec::new();
        let mut r = Ok(());
        for piece in z.chunks(cut.max(1)) {
            r = r.and(i.feed(piece, &mut out));
        }
        assert_eq!(i.taken(), z.len() as u64);
        (out, r)
    }

    #[test]
    fn every_wrapper_inflates_whatever_the_cuts() {
        let p = page();
        for (coding, z) in [
            (Coding::Gzip, gzip(&p, false)),
            (Coding::Gzip, gzip(&p, true)),
            (Coding::Deflate, compress_to_vec_zlib(&p, 6)),
            (Coding::Deflate, compress_to_vec(&p, 6)),
        ] {
            for cut in [1, 3, 11, 500, z.len()] {
                let (out, r) = inflate_cut(coding, &z, cut);
                assert_eq!(r, Ok(()), "{coding:?} cut {cut}");
                assert_eq!(out, p, "{coding:?} cut {cut}");
            }
        }
    }

    #[test]
    fn a_clone_continues_where_its_original_was() {
        let p = page();
        let z = gzip(&p, true);
        let mut a = Inflater::new(Coding::Gzip);
        let mut out = Vec::new();
        a.feed(&z[..700], &mut out).unwrap();
        let mut b = a.clone();
        b.feed(&z[700..], &mut out).unwrap();
        assert_eq!(out, p);
    }

    #[test]
    fn corrupt_streams_and_bombs_stop() {
        let (out, r) = inflate_cut(Coding::Gzip, b"not gzip at all", 4);
        assert_eq!((out.len(), r), (0, Err(Stop::Corrupt)));
        let p = page();
        // A block of the reserved type 3 after a complete one: the first
        // block inflates, then the stream stops.
        let mut z = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
        // A stored block (not final): 5 bytes "hello".
        z.extend_from_slice(&[0, 5, 0, 0xfa, 0xff]);
        z.extend_from_slice(b"hello");
        z.extend_from_slice(&[0x07, 0xff, 0xff]);
        let (out, r) = inflate_cut(Coding::Gzip, &z, 3);
        assert_eq!(r, Err(Stop::Corrupt));
        assert_eq!(out, b"hello");
        assert!(!p.is_empty());
        // 64 MiB of zeros in ~64 KiB: inflated up to the cap only.
        let bomb = gzip(&vec![0u8; 64 << 20], false);
        let (out, r) = inflate_cut(Coding::Gzip, &bomb, 4096);
        assert_eq!(r, Err(Stop::Capped));
        assert_eq!(out.len() as u64, MAX_INFLATED);
    }

    #[test]
    fn codings_from_heads() {
        let h =
            |e: &str| Coding::of_head(format!("HTTP/1.1 200 OK\r\n{e}\r\nX: y\r\n\r\n").as_bytes());
        assert_eq!(h("Content-Encoding: gzip"), Coding::Gzip);
        assert_eq!(h("content-encoding:X-GZIP"), Coding::Gzip);
        assert_eq!(h("Content-Encoding: deflate"), Coding::Deflate);
        assert_eq!(h("Content-Encoding: br"), Coding::Identity);
        assert_eq!(h("Content-Encoding: gzip, br"), Coding::Identity);
        assert_eq!(
            h("Content-Encoding: gzip\r\nContent-Encoding: br"),
            Coding::Identity
        );
        assert_eq!(h("Content-Type: text/html"), Coding::Identity);
        for c in [Coding::Identity, Coding::Gzip, Coding::Deflate] {
            assert_eq!(Coding::from_code(c.code()), Some(c));
        }
        assert_eq!(Coding::from_code(3), None);
    }
}
