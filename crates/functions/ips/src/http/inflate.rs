//! Compressed HTTP bodies: a response or a request whose
//! `Content-Encoding` is `gzip` (`x-gzip`) or `deflate` (or two such
//! layers) has its body inflated before body rules inspect it, as
//! Suricata's HTTP parser (libhtp) does by default, so a signature in a
//! compressed page or upload is found. Without it, any web server's
//! compression hides a page from every `file_data` rule.
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
//! breaks (`ips_http_inflate_errors`), what came before still inspected,
//! and what follows is inspected as sent, as libhtp passes it through.
//!
//! The wrapper is chosen as libhtp (through zlib) chooses it, measured
//! against Suricata 7.0.10: `gzip` takes a gzip member or a zlib stream
//! (zlib's automatic detection), else raw deflate on a second try;
//! `deflate` is raw deflate, else a gzip member or a zlib stream on a
//! second try. A first try that fails, a corrupt stream, and a gzip
//! trailer whose CRC-32 or size is wrong (or a zlib stream's Adler-32) are
//! what libhtp logs as a failed inflate, Suricata's
//! `http.gzip_decompression_failed` ([`Inflater::take_failed`]).

use miniz_oxide::inflate::stream::{inflate, InflateState};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
use rustc_hash::FxHashMap;
use sluice_wire::FlowKey;

/// Compressed bytes of a body kept in the store to rebuild its inflater.
pub const Z_KEPT: usize = 100 * 1024;
/// Inflated bytes per body at most (Suricata's `compression-bomb-limit`).
pub const MAX_INFLATED: u64 = 1024 * 1024;
/// The longest gzip header held while incomplete (its name, comment and
/// extra field have no bound of their own).
const MAX_GZIP_HEADER: usize = 64 * 1024;
/// Inflaters an instance keeps (each about 43 KiB, twice that for two
/// layers).
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
    /// Two layers, inflated in the order listed, as libhtp inflates them
    /// (`gzip, deflate`: the body is gunzipped, then inflated).
    Two(Layer, Layer),
}

/// One layer of a [`Coding::Two`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// `gzip`.
    Gzip,
    /// `deflate`.
    Deflate,
}

impl Layer {
    /// The coding of this layer alone.
    pub(crate) fn coding(self) -> Coding {
        match self {
            Layer::Gzip => Coding::Gzip,
            Layer::Deflate => Coding::Deflate,
        }
    }

    fn code(self) -> u8 {
        match self {
            Layer::Gzip => 0,
            Layer::Deflate => 1,
        }
    }
}

impl Coding {
    /// The coding a head's `Content-Encoding` fields name (`head`: the
    /// message's start line and header lines; `request`: whose), as libhtp
    /// reads them ([`super::ce`]): one or two layers of `gzip` and
    /// `deflate` are inflated, in the order listed; none, `lzma`, or a
    /// request's list leave the body as sent.
    pub fn of_head(head: &[u8], request: bool) -> Coding {
        super::events::content_encoding(head, request).map_or(Coding::Identity, |r| r.coding)
    }

    /// The byte a blob stores.
    pub fn code(self) -> u8 {
        match self {
            Coding::Identity => 0,
            Coding::Gzip => 1,
            Coding::Deflate => 2,
            Coding::Two(a, b) => 3 + 2 * a.code() + b.code(),
        }
    }

    /// The coding a blob's byte names.
    pub fn from_code(c: u8) -> Option<Coding> {
        Some(match c {
            0 => Coding::Identity,
            1 => Coding::Gzip,
            2 => Coding::Deflate,
            3..=6 => {
                let l = |k: u8| if k == 0 { Layer::Gzip } else { Layer::Deflate };
                Coding::Two(l((c - 3) / 2), l((c - 3) % 2))
            }
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

/// The wrapper a body's bytes are inflated as: what libhtp's decompressor
/// (zlib) settles on for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// A gzip member: header, deflate data, CRC-32 and size (RFC 1952).
    Gzip,
    /// A zlib stream: header, deflate data, Adler-32 (RFC 1950).
    Zlib,
    /// Deflate data alone (RFC 1951).
    Raw,
}

/// One body's inflater: where it is in the compressed bytes.
#[derive(Clone)]
pub struct Inflater {
    first: Stage,
    /// The second layer of a [`Coding::Two`], fed what the first makes.
    second: Option<Box<Stage>>,
    /// Compressed bytes taken so far (the gzip header included).
    taken: u64,
    /// The first layer's output, for the second.
    mid: Vec<u8>,
    /// The second layer broke: the first's output is passed through it,
    /// as libhtp passes a layer it cannot inflate.
    second_pass: bool,
}

/// One layer's inflater.
#[derive(Clone)]
struct Stage {
    coding: Coding,
    state: Box<InflateState>,
    /// The wrapper's header length once read (the stream's first bytes
    /// told the method).
    header: Option<usize>,
    method: Method,
    /// Header bytes seen so far while the header is incomplete.
    head_buf: Vec<u8>,
    /// Inflated bytes kept so far (at most [`MAX_INFLATED`]).
    made: u64,
    /// Inflated bytes so far, kept or not (a gzip trailer's size).
    size: u64,
    /// The deflate data ended (a gzip trailer may follow).
    ended: bool,
    /// CRC-32 of all the bytes inflated (a gzip member's trailer checks it).
    crc: crc32fast::Hasher,
    /// A gzip member's trailer bytes seen so far.
    trailer: [u8; 8],
    trailer_len: u8,
    /// libhtp would have logged a failed inflate since the last
    /// [`Inflater::take_failed`] ([`Inflater::feed`]).
    failed: bool,
}

/// The length of a gzip header at the start of `b` (RFC 1952 §2.3), and
/// whether zlib refuses it though libhtp inflates past it (reserved flags,
/// a wrong header CRC); `Ok(None)` while incomplete.
fn gzip_header(b: &[u8]) -> Result<Option<(usize, bool)>, Stop> {
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
    // Reserved flags ("unknown header flags set") and a wrong header CRC
    // fail zlib; libhtp's later try still inflates what follows the
    // header (measured), so they are marked, not refused.
    let mut bad = flags & 0xe0 != 0;
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
        // FHCRC: the low 16 bits of the CRC-32 of the header before it,
        // which zlib checks ("header crc mismatch").
        let Some(c) = b.get(at..at + 2) else {
            return Ok(None);
        };
        bad |= u16::from_le_bytes([c[0], c[1]]) != crc32fast::hash(&b[..at]) as u16;
        at += 2;
    }
    Ok((b.len() >= at).then_some((at, bad)))
}

/// A zlib header (RFC 1950 §2.2) at the start of `b` (two bytes at least)
/// that zlib accepts: method 8, a window of at most 32 KiB, the check
/// bits, no preset dictionary (zlib then asks for one, an error to libhtp).
fn zlib_header(b: &[u8]) -> bool {
    let (cmf, flg) = (b[0], b[1]);
    cmf & 0x0f == 8
        && cmf >> 4 <= 7
        && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0
        && flg & 0x20 == 0
}

impl Inflater {
    /// An inflater at the start of a body of `coding` (not identity).
    pub fn new(coding: Coding) -> Inflater {
        let (first, second) = match coding {
            Coding::Two(a, b) => (a.coding(), Some(Box::new(Stage::new(b.coding())))),
            c => (c, None),
        };
        Inflater {
            first: Stage::new(first),
            second,
            taken: 0,
            mid: Vec::new(),
            second_pass: false,
        }
    }

    /// Compressed bytes taken so far.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// True if libhtp's decompressor, given the bytes fed since the last
    /// call, would have logged a failed inflate, in either layer: Suricata's
    /// `http.gzip_decompression_failed`. Its first attempt is zlib's
    /// automatic gzip-or-zlib for `gzip`, raw deflate for `deflate`; when
    /// it fails at the start libhtp tries the other, as here (the body is
    /// inflated either way, the event raised). A later error is reported
    /// by [`Inflater::feed`] as [`Stop::Corrupt`], and raises it too.
    pub fn take_failed(&mut self) -> bool {
        let second = self
            .second
            .as_mut()
            .is_some_and(|s| std::mem::take(&mut s.failed));
        std::mem::take(&mut self.first.failed) | second
    }

    /// Inflates the next compressed bytes `z`, appending what they make to
    /// `out` (up to [`MAX_INFLATED`] for the body in all). The first
    /// layer breaking stops the body's inflating ([`Stop::Corrupt`]; the
    /// caller passes the rest through); the second breaking passes the
    /// first's output through from there (measured: Suricata 7.0.10 finds
    /// a page sent with one `gzip` under `gzip, gzip`).
    pub fn feed(&mut self, z: &[u8], out: &mut Vec<u8>) -> Result<(), Stop> {
        self.taken += z.len() as u64;
        let Some(second) = &mut self.second else {
            return self.first.feed(z, out);
        };
        self.mid.clear();
        let r = self.first.feed(z, &mut self.mid);
        if self.second_pass {
            out.extend_from_slice(&self.mid);
        } else if !self.mid.is_empty() {
            let at = out.len();
            match second.feed(&self.mid, out) {
                Err(Stop::Corrupt) => {
                    self.second_pass = true;
                    out.truncate(at);
                    out.extend_from_slice(&self.mid);
                }
                Err(Stop::Capped) => return Err(Stop::Capped),
                Ok(()) => {}
            }
        }
        r
    }
}

impl Stage {
    fn new(coding: Coding) -> Stage {
        Stage {
            coding,
            state: InflateState::new_boxed(DataFormat::Raw),
            header: None,
            method: Method::Raw,
            head_buf: Vec::new(),
            made: 0,
            size: 0,
            ended: false,
            crc: crc32fast::Hasher::new(),
            trailer: [0; 8],
            trailer_len: 0,
            failed: false,
        }
    }

    /// [`Inflater::feed`] for this layer.
    fn feed(&mut self, z: &[u8], out: &mut Vec<u8>) -> Result<(), Stop> {
        if self.header.is_some() {
            return self.inflate(z, out);
        }
        // The wrapper's first bytes, kept until whole: a gzip header to
        // skip, or whether a zlib header is there.
        self.head_buf.extend_from_slice(z);
        let buf = &self.head_buf;
        if buf.len() < 2 {
            return Ok(());
        }
        let gzip = buf[..2] == [0x1f, 0x8b];
        let zlib = !gzip && zlib_header(buf);
        // A stage is one layer: `deflate`, or else `gzip`.
        let (method, failed) = match (self.coding == Coding::Deflate, gzip, zlib) {
            // zlib's automatic detection takes both; anything else fails
            // and libhtp inflates it as raw deflate.
            (false, true, _) => (Method::Gzip, false),
            (false, _, true) => (Method::Zlib, false),
            (false, _, _) => (Method::Raw, true),
            // Raw deflate first: a gzip header is a block of the reserved
            // type 3 to it, and a zlib header a stored block whose length
            // check fails (but for one stream in 65,536, not told apart
            // here); libhtp then detects the wrapper.
            (true, true, _) => (Method::Gzip, true),
            (true, _, true) => (Method::Zlib, true),
            (true, _, _) => (Method::Raw, false),
        };
        let len = match method {
            Method::Gzip => match gzip_header(buf) {
                Ok(Some((len, bad))) => {
                    self.failed |= bad;
                    len
                }
                // A name or comment without its end, or an extra field,
                // past any real header's size: held no longer (the bytes
                // would grow with the body), inflated no further.
                Ok(None) if buf.len() > MAX_GZIP_HEADER => return Err(Stop::Capped),
                Ok(None) => return Ok(()),
                Err(stop) => {
                    self.failed = true;
                    return Err(stop);
                }
            },
            _ => 0,
        };
        self.failed |= failed;
        if method == Method::Zlib {
            self.state.reset(DataFormat::Zlib);
        }
        self.method = method;
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
            if self.method == Method::Gzip {
                self.crc.update(&chunk[..r.bytes_written]);
            }
            self.size += r.bytes_written as u64;
            self.made += room as u64;
            z = &z[r.bytes_consumed..];
            match r.status {
                Ok(MZStatus::StreamEnd) => self.ended = true,
                Ok(_) => {}
                // No progress possible: all input taken, all output given.
                Err(MZError::Buf) => return Ok(()),
                Err(_) => {
                    self.failed = true;
                    return Err(Stop::Corrupt);
                }
            }
            if z.is_empty() && r.bytes_written < chunk.len() {
                return Ok(());
            }
        }
        self.gzip_trailer(z)
    }

    /// Takes the bytes after a gzip member's deflate data: its CRC-32 and
    /// size (modulo 2^32) of the inflated bytes, checked once whole, as
    /// zlib checks them (a mismatch fails the inflate). What follows the
    /// trailer is ignored, as libhtp ignores it.
    fn gzip_trailer(&mut self, z: &[u8]) -> Result<(), Stop> {
        let at = usize::from(self.trailer_len);
        if self.method != Method::Gzip || at == 8 || z.is_empty() {
            return Ok(());
        }
        let n = (8 - at).min(z.len());
        self.trailer[at..at + n].copy_from_slice(&z[..n]);
        self.trailer_len += n as u8;
        if self.trailer_len < 8 {
            return Ok(());
        }
        let crc = u32::from_le_bytes([
            self.trailer[0],
            self.trailer[1],
            self.trailer[2],
            self.trailer[3],
        ]);
        let size = u32::from_le_bytes([
            self.trailer[4],
            self.trailer[5],
            self.trailer[6],
            self.trailer[7],
        ]);
        if crc != self.crc.clone().finalize() || size != self.size as u32 {
            self.failed = true;
            return Err(Stop::Corrupt);
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
        v.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
        v.extend_from_slice(&(data.len() as u32).to_le_bytes());
        v
    }

    /// `inflate_cut`, and whether libhtp would have logged a failure.
    fn inflate_cut_failed(
        coding: Coding,
        z: &[u8],
        cut: usize,
    ) -> (Vec<u8>, Result<(), Stop>, bool) {
        let mut i = Inflater::new(coding);
        let mut out = Vec::new();
        let mut r = Ok(());
        let mut failed = false;
        for piece in z.chunks(cut.max(1)) {
            if r.is_ok() {
                r = i.feed(piece, &mut out);
            }
            failed |= i.take_failed();
        }
        (out, r, failed)
    }

    #[test]
    fn what_libhtp_calls_a_failed_inflate() {
        // Each case measured against Suricata 7.0.10
        // (`http.gzip_decompression_failed`, docs/FUNCTIONS.md).
        let p = page();
        let g = gzip(&p, true);
        let zl = compress_to_vec_zlib(&p, 6);
        let raw = compress_to_vec(&p, 6);
        let n = g.len();
        let mut bad_crc = g.clone();
        bad_crc[n - 8] ^= 1;
        let mut bad_size = g.clone();
        bad_size[n - 4] ^= 1;
        let mut bad_adler = zl.clone();
        *bad_adler.last_mut().unwrap() ^= 1;
        // A header CRC (FHCRC), right and wrong; a reserved flag.
        let with_hcrc = |right: bool| {
            // `g`'s header and name ("page.html\0"), with FHCRC too.
            let mut h = g[..20].to_vec();
            h[3] |= 2;
            let c = crc32fast::hash(&h) as u16 ^ u16::from(!right);
            h.extend_from_slice(&c.to_le_bytes());
            h.extend_from_slice(&g[20..]);
            h
        };
        let (hcrc, bad_hcrc) = (with_hcrc(true), with_hcrc(false));
        let mut reserved = g.clone();
        reserved[3] |= 0x20;
        let mut trailing = g.clone();
        trailing.extend_from_slice(b"garbage after the member");
        type Case<'a> = (&'a str, Coding, &'a [u8], bool, Result<(), Stop>);
        let cases: [Case; 15] = [
            ("a header CRC", Coding::Gzip, &hcrc, false, Ok(())),
            // Both inflated all the same (measured).
            ("a wrong header CRC", Coding::Gzip, &bad_hcrc, true, Ok(())),
            ("a reserved flag", Coding::Gzip, &reserved, true, Ok(())),
            ("gzip", Coding::Gzip, &g, false, Ok(())),
            (
                "zlib under gzip (zlib detects it)",
                Coding::Gzip,
                &zl,
                false,
                Ok(()),
            ),
            (
                "raw under gzip (inflated on retry)",
                Coding::Gzip,
                &raw,
                true,
                Ok(()),
            ),
            ("raw deflate", Coding::Deflate, &raw, false, Ok(())),
            (
                "zlib under deflate (inflated on retry)",
                Coding::Deflate,
                &zl,
                true,
                Ok(()),
            ),
            (
                "gzip under deflate (inflated on retry)",
                Coding::Deflate,
                &g,
                true,
                Ok(()),
            ),
            (
                "a wrong CRC-32",
                Coding::Gzip,
                &bad_crc,
                true,
                Err(Stop::Corrupt),
            ),
            (
                "a wrong size",
                Coding::Gzip,
                &bad_size,
                true,
                Err(Stop::Corrupt),
            ),
            (
                "a wrong Adler-32",
                Coding::Gzip,
                &bad_adler,
                true,
                Err(Stop::Corrupt),
            ),
            (
                "bytes after the member",
                Coding::Gzip,
                &trailing,
                false,
                Ok(()),
            ),
            ("cut short", Coding::Gzip, &g[..n - 5], false, Ok(())),
            (
                "not compressed",
                Coding::Gzip,
                b"hello world, hello world",
                true,
                Err(Stop::Corrupt),
            ),
        ];
        for (what, coding, z, failed, result) in cases {
            for cut in [1, 2, 7, 100, z.len()] {
                let (out, r, f) = inflate_cut_failed(coding, z, cut);
                assert_eq!((f, r), (failed, result), "{what}, cut {cut}");
                if result.is_ok() && what != "cut short" {
                    assert_eq!(out, p, "{what}, cut {cut}");
                }
            }
        }
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
    fn two_layers_inflate_in_the_order_listed_whatever_the_cuts() {
        let p = page();
        let (g, d) = (Layer::Gzip, Layer::Deflate);
        let twice = gzip(&gzip(&p, false), true);
        let gz_raw = gzip(&compress_to_vec(&p, 6), false);
        let raw_gz = compress_to_vec(&gzip(&p, false), 6);
        let gz_zlib = gzip(&compress_to_vec_zlib(&p, 6), false);
        for (coding, z, failed) in [
            (Coding::Two(g, g), &twice, false),
            (Coding::Two(g, d), &gz_raw, false),
            (Coding::Two(d, g), &raw_gz, false),
            // A zlib stream under `deflate`: libhtp's second try.
            (Coding::Two(g, d), &gz_zlib, true),
        ] {
            for cut in [1, 3, 11, 500, z.len()] {
                let (out, r, f) = inflate_cut_failed(coding, z, cut);
                assert_eq!((r, f), (Ok(()), failed), "{coding:?} cut {cut}");
                assert_eq!(out, p, "{coding:?} cut {cut}");
            }
        }
        // One layer where two are named: the second's first try fails on
        // the page, and the page is not a stream to either: the page is
        // passed through it.
        for cut in [1, 100, 5000] {
            let (out, r, f) = inflate_cut_failed(Coding::Two(g, g), &gzip(&p, false), cut);
            assert_eq!((r, f), (Ok(()), true), "cut {cut}");
            assert!(out.ends_with(b"MALWARE-BODY</body></html>"), "cut {cut}");
        }
        // A double bomb stops at the cap of its first layer.
        let bomb = gzip(&gzip(&vec![0u8; 64 << 20], false), false);
        let (out, r, _) = inflate_cut_failed(Coding::Two(g, g), &bomb, 4096);
        assert_eq!(r, Err(Stop::Capped));
        assert!(out.len() as u64 <= MAX_INFLATED);
    }

    #[test]
    fn an_endless_gzip_header_is_held_no_longer_than_its_bound() {
        // FNAME set, and a name that never ends.
        let mut z = vec![0x1f, 0x8b, 8, 8, 0, 0, 0, 0, 0, 3];
        z.extend(std::iter::repeat_n(b'a', 3 * MAX_GZIP_HEADER));
        let mut i = Inflater::new(Coding::Gzip);
        let mut out = Vec::new();
        let mut r = Ok(());
        for piece in z.chunks(1400) {
            r = i.feed(piece, &mut out);
            if r.is_err() {
                break;
            }
        }
        assert_eq!(r, Err(Stop::Capped));
        assert!(i.first.head_buf.len() <= MAX_GZIP_HEADER + 1400);
        assert!(!i.take_failed(), "zlib would not fail: no event");
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
        let h = |e: &str| {
            Coding::of_head(
                format!("HTTP/1.1 200 OK\r\n{e}\r\nX: y\r\n\r\n").as_bytes(),
                false,
            )
        };
        let req = |e: &str| {
            Coding::of_head(
                format!("POST / HTTP/1.1\r\n{e}\r\nX: y\r\n\r\n").as_bytes(),
                true,
            )
        };
        assert_eq!(h("Content-Encoding: gzip"), Coding::Gzip);
        assert_eq!(h("content-encoding:X-GZIP"), Coding::Gzip);
        assert_eq!(h("Content-Encoding: deflate"), Coding::Deflate);
        assert_eq!(h("Content-Encoding: x-deflate"), Coding::Deflate);
        assert_eq!(h("Content-Encoding: br"), Coding::Identity);
        assert_eq!(h("Content-Encoding: identity, identity"), Coding::Identity);
        // Lists of one layer: libhtp skips the tokens it does not know
        // (measured: Suricata 7.0.10 inflates these).
        assert_eq!(h("Content-Encoding: gzip, br"), Coding::Gzip);
        assert_eq!(h("Content-Encoding: br, gzip"), Coding::Gzip);
        assert_eq!(h("Content-Encoding: identity, gzip"), Coding::Gzip);
        assert_eq!(h("Content-Encoding: gzip,"), Coding::Gzip);
        assert_eq!(h("Content-Encoding: GZIP"), Coding::Gzip);
        assert_eq!(
            h("Content-Encoding: gzip\r\nContent-Encoding: br"),
            Coding::Gzip
        );
        // Two layers, in the order listed; a third token ends the list.
        let (g, d) = (Layer::Gzip, Layer::Deflate);
        assert_eq!(h("Content-Encoding: gzip, gzip"), Coding::Two(g, g));
        assert_eq!(h("Content-Encoding: deflate, gzip"), Coding::Two(d, g));
        assert_eq!(h("Content-Encoding: x-gzip,deflate"), Coding::Two(g, d));
        assert_eq!(h("Content-Encoding: x-gzip,br,deflate"), Coding::Gzip);
        assert_eq!(
            h("Content-Encoding: gzip\r\nContent-Encoding: gzip"),
            Coding::Two(g, g)
        );
        assert_eq!(h("Content-Encoding: gzip, gzip, gzip"), Coding::Two(g, g));
        assert_eq!(h("Content-Encoding: br, identity, gzip"), Coding::Identity);
        assert_eq!(h("Content-Encoding: lzma"), Coding::Identity);
        assert_eq!(h("Content-Encoding: gzip, lzma"), Coding::Identity);
        // A folded value is joined to its field.
        assert_eq!(h("Content-Encoding: gzip,\r\n gzip"), Coding::Two(g, g));
        // Requests: a whole value only (measured).
        assert_eq!(req("Content-Encoding: gzip"), Coding::Gzip);
        assert_eq!(req("Content-Encoding: X-Gzip"), Coding::Gzip);
        assert_eq!(req("Content-Encoding: deflate"), Coding::Deflate);
        assert_eq!(req("Content-Encoding: gzip, gzip"), Coding::Identity);
        assert_eq!(req("Content-Encoding: gzip, br"), Coding::Identity);
        assert_eq!(
            req("Content-Encoding: gzip\r\nContent-Encoding: gzip"),
            Coding::Identity
        );
        for c in [
            Coding::Two(g, g),
            Coding::Two(g, d),
            Coding::Two(d, g),
            Coding::Two(d, d),
        ] {
            assert_eq!(Coding::from_code(c.code()), Some(c));
        }
        assert_eq!(Coding::from_code(7), None);
        assert_eq!(h("Content-Type: text/html"), Coding::Identity);
        for c in [Coding::Identity, Coding::Gzip, Coding::Deflate] {
            assert_eq!(Coding::from_code(c.code()), Some(c));
        }
    }
}
