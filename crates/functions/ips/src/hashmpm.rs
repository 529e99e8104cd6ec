//! Multi-pattern search over bytes held whole in memory, by hashing: every
//! position of the buffer is tested against a bit set of the patterns'
//! first bytes (ASCII case folded), and only the positions whose bit is set
//! are verified. An Aho-Corasick DFA over ET Open's thousands of patterns is
//! megabytes of transitions, and its walk missed the caches on most bytes;
//! the bit sets are a few to a hundred kilobytes, read at one place per byte.
//!
//! Patterns are classed by length: 1, 2, 3, and 4 or more bytes, keyed by
//! their first `min(len, 4)` folded bytes. A case-sensitive pattern is
//! found by its folded key and confirmed on the buffer's own bytes.

use rustc_hash::FxHashMap;

/// The patterns of one length class by key (their first bytes folded, as a
/// little-endian `u32` padded with zeros): a bit set over the keys' hashes,
/// and per key the patterns to verify.
struct KeyTable {
    /// `32 - log2(bits)`: a hash's top bits index the bit set.
    shift: u32,
    bits: Vec<u64>,
    /// Key -> range of `ids`.
    by_key: FxHashMap<u32, (u32, u32)>,
    ids: Vec<u32>,
}

/// Words of [`HashMpm`]'s `quad` bit set (2^17 bits).
const QUAD_WORDS: usize = 1 << 11;
/// [`key_hash`]'s shift for `quad`.
const QUAD_SHIFT: u32 = 32 - 17;

/// Keeps the first `n` (1-4) bytes of a little-endian window.
const MASKS: [u32; 4] = [0xff, 0xffff, 0xff_ffff, 0xffff_ffff];

#[inline(always)]
fn key_hash(k: u32, shift: u32) -> usize {
    (k.wrapping_mul(0x9e37_79b1) >> shift) as usize
}

impl KeyTable {
    fn new(mut keyed: Vec<(u32, u32)>) -> KeyTable {
        keyed.sort_unstable();
        let mut by_key = FxHashMap::default();
        let mut ids = Vec::with_capacity(keyed.len());
        let mut k = 0;
        while k < keyed.len() {
            let key = keyed[k].0;
            let a = ids.len() as u32;
            while k < keyed.len() && keyed[k].0 == key {
                ids.push(keyed[k].1);
                k += 1;
            }
            by_key.insert(key, (a, ids.len() as u32));
        }
        // About 1/32 of the bits set, so few positions are verified in vain;
        // at least 2^9 bits, at most 2^20 (128 KiB).
        let log = (by_key.len().max(1) * 32)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(9, 20);
        let shift = 32 - log;
        let mut bits = vec![0u64; (1usize << log) / 64];
        for &key in by_key.keys() {
            let h = key_hash(key, shift);
            bits[h / 64] |= 1 << (h % 64);
        }
        KeyTable {
            shift,
            bits,
            by_key,
            ids,
        }
    }
}

/// A pattern: its bytes (folded unless case-sensitive).
struct Pat {
    bytes: Box<[u8]>,
    cs: bool,
}

/// The first stage of a search, tested at every position, in bit sets of
/// at most 16 KiB (the L1 cache): the first byte (folded) of each one-byte
/// pattern, the first two of each two- or three-byte one (both indexed
/// directly), the hash of the first four of each longer one. A set has its
/// own of all its patterns; [`HashMpm::first_stage`] makes one of some of
/// them, so a search for only those passes fewer positions.
pub(crate) struct FirstStage {
    single: [u64; 4],
    pair: Box<[u64; 1024]>,
    quad: Box<[u64; QUAD_WORDS]>,
}

impl FirstStage {
    fn empty() -> FirstStage {
        FirstStage {
            single: [0; 4],
            pair: Box::new([0; 1024]),
            quad: Box::new([0; QUAD_WORDS]),
        }
    }

    /// Lets positions where a pattern of (folded) first bytes `bytes` may
    /// start pass.
    fn add(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(4);
        if n == 0 {
            return;
        }
        let mut k = [0u8; 4];
        for (d, s) in k.iter_mut().zip(&bytes[..n]) {
            *d = s.to_ascii_lowercase();
        }
        if n == 1 {
            self.single[k[0] as usize / 64] |= 1 << (k[0] % 64);
        } else if n < 4 {
            let p = u16::from_le_bytes([k[0], k[1]]) as usize;
            self.pair[p / 64] |= 1 << (p % 64);
        } else {
            let q = key_hash(u32::from_le_bytes(k), QUAD_SHIFT);
            self.quad[q / 64] |= 1 << (q % 64);
        }
    }
}

/// A set of patterns searched by hashing ([`HashMpm::each`]).
pub(crate) struct HashMpm {
    pats: Vec<Pat>,
    /// The first stage of all the patterns.
    first: FirstStage,
    /// Per length class (1, 2, 3, 4+), if it has patterns.
    classes: [Option<KeyTable>; 4],
    max_len: usize,
}

impl HashMpm {
    /// The set of `pats` (bytes, case-sensitive), numbered in order. A
    /// pattern that is not case-sensitive matches in any ASCII case. Empty
    /// patterns are never found.
    pub(crate) fn new<'a>(pats: impl IntoIterator<Item = (&'a [u8], bool)>) -> HashMpm {
        let mut keyed: [Vec<(u32, u32)>; 4] = Default::default();
        let mut out = Vec::new();
        let mut max_len = 0;
        let mut first = FirstStage::empty();
        for (pid, (bytes, cs)) in pats.into_iter().enumerate() {
            let bytes: Box<[u8]> = if cs {
                bytes.into()
            } else {
                bytes.to_ascii_lowercase().into()
            };
            if !bytes.is_empty() {
                max_len = max_len.max(bytes.len());
                let n = bytes.len().min(4);
                let mut k = [0u8; 4];
                for (d, s) in k.iter_mut().zip(&bytes[..n]) {
                    *d = s.to_ascii_lowercase();
                }
                keyed[n - 1].push((u32::from_le_bytes(k), pid as u32));
                first.add(&k[..n]);
            }
            out.push(Pat { bytes, cs });
        }
        HashMpm {
            pats: out,
            first,
            classes: keyed.map(|k| (!k.is_empty()).then(|| KeyTable::new(k))),
            max_len,
        }
    }

    /// A first stage of only the patterns `keep` accepts: a search with it
    /// ([`HashMpm::each_in`]) finds theirs and may leave out the others.
    pub(crate) fn first_stage(&self, mut keep: impl FnMut(u32) -> bool) -> FirstStage {
        let mut f = FirstStage::empty();
        for (pid, p) in self.pats.iter().enumerate() {
            if keep(pid as u32) {
                f.add(&p.bytes);
            }
        }
        f
    }

    /// The first stage of all the patterns.
    pub(crate) fn first(&self) -> &FirstStage {
        &self.first
    }

    /// The longest pattern's length.
    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    /// Writes `buf` ASCII case folded to `folded` (cleared first), with 3
    /// bytes of padding so a 4-byte window can be read at every position.
    pub(crate) fn fold(buf: &[u8], folded: &mut Vec<u8>) {
        folded.clear();
        folded.extend(buf.iter().map(u8::to_ascii_lowercase));
        folded.extend_from_slice(&[0; 3]);
    }

    /// Calls `cand(pattern, start)` for every position of `buf` (`folded`:
    /// [`HashMpm::fold`] of it) from `from` on where a pattern may start
    /// (its first bytes match, folded); [`HashMpm::is_at`] tells whether it
    /// does. The caller verifies, so it can skip a pattern found already.
    /// `at`: scratch space.
    #[inline]
    pub(crate) fn each(
        &self,
        buf: &[u8],
        folded: &[u8],
        from: usize,
        at: &mut Vec<u32>,
        cand: impl FnMut(u32, usize),
    ) {
        self.each_in(&self.first, buf, folded, from, at, cand)
    }

    /// [`HashMpm::each`] with first stage `first` (made by
    /// [`HashMpm::first_stage`] of this set): every candidate of a pattern
    /// `first` holds, perhaps some others.
    #[inline]
    pub(crate) fn each_in(
        &self,
        first: &FirstStage,
        buf: &[u8],
        folded: &[u8],
        from: usize,
        at: &mut Vec<u32>,
        mut cand: impl FnMut(u32, usize),
    ) {
        let n = buf.len();
        if from >= n {
            return;
        }
        // Callers fold with [`HashMpm::fold`]; buffers are far below 4 GiB.
        debug_assert!(folded.len() >= n + 3);
        // First the positions where some pattern's first bytes may be, in a
        // tight loop over three small tables; then, at those
        // positions, each length class's hashed key and the patterns to
        // verify. A key read past the end (the padding) is refused by the
        // verification.
        //
        // Every position is written and the count advanced only on a pass,
        // with no branch: whether a position passes is close to random on
        // binary bytes, and a mispredicted branch per few positions cost
        // more than the tables' loads.
        at.clear();
        at.resize(n - from, 0);
        let mut k = 0;
        let (single, pair, quad) = (&first.single, &*first.pair, &*first.quad);
        for (i, w) in folded[from..n + 3].windows(4).enumerate() {
            let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let (b, p, q) = (
                (w & 0xff) as usize,
                (w & 0xffff) as usize,
                key_hash(w, QUAD_SHIFT),
            );
            let hit = (single[b / 64] >> (b % 64))
                | (pair[p / 64] >> (p % 64))
                | (quad[(q / 64) % QUAD_WORDS] >> (q % 64));
            // `k <= i < n - from`: in bounds.
            at[k] = (from + i) as u32;
            k += (hit & 1) as usize;
        }
        at.truncate(k);
        for &i in at.iter() {
            let i = i as usize;
            let w = &folded[i..i + 4];
            let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            for (c, tc) in self.classes.iter().enumerate() {
                let Some(tc) = tc else { continue };
                let k = w & MASKS[c];
                let h = key_hash(k, tc.shift);
                if (tc.bits[h / 64] >> (h % 64)) & 1 == 0 {
                    continue;
                }
                if let Some(&(a, z)) = tc.by_key.get(&k) {
                    for &pid in &tc.ids[a as usize..z as usize] {
                        cand(pid, i);
                    }
                }
            }
        }
    }

    /// True if pattern `pid`, a candidate [`HashMpm::each`] gave at `at`
    /// in `buf` (`folded`: as there), occurs there. The candidate's first
    /// `min(len, 4)` bytes (folded) are its key's, so a pattern that is not
    /// case-sensitive is compared only past them (none of ET's many one- to
    /// four-byte `nocase` contents is compared at all).
    #[inline]
    pub(crate) fn is_at(&self, pid: u32, buf: &[u8], folded: &[u8], at: usize) -> bool {
        let p = &self.pats[pid as usize];
        let n = p.bytes.len();
        if at + n > buf.len() {
            return false;
        }
        if p.cs {
            buf[at..at + n] == p.bytes[..]
        } else {
            n <= 4 || folded[at + 4..at + n] == p.bytes[4..]
        }
    }

    /// The length of pattern `pid`.
    #[inline]
    pub(crate) fn pattern_len(&self, pid: u32) -> usize {
        self.pats[pid as usize].bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every occurrence of every pattern is found, once, at its start (a
    /// case-sensitive one with its own case, another in any ASCII case),
    /// whatever the lengths: short patterns, ones sharing their first
    /// bytes, ones longer than the buffer, non-ASCII bytes (never folded).
    #[test]
    fn finds_every_occurrence() {
        let mut rng = crate::testrng::Lcg::new(11);
        let mut rnd = |n: u64| rng.below(n);
        // A small alphabet, so patterns overlap and occur often.
        const ABC: &[u8] = b"aAbBzZ\x00\xc1\xe1@[`{";
        let (mut folded, mut at) = (Vec::new(), Vec::new());
        for round in 0..40 {
            let npats = 1 + rnd(if round % 4 == 0 { 300 } else { 30 }) as usize;
            let pats: Vec<(Vec<u8>, bool)> = (0..npats)
                .map(|_| {
                    let len = 1 + rnd(7) as usize;
                    let b = (0..len)
                        .map(|_| ABC[rnd(ABC.len() as u64) as usize])
                        .collect();
                    (b, rnd(2) == 0)
                })
                .collect();
            let m = HashMpm::new(pats.iter().map(|(b, cs)| (&b[..], *cs)));
            assert_eq!(m.max_len(), pats.iter().map(|p| p.0.len()).max().unwrap());
            for _ in 0..50 {
                let len = rnd(40) as usize;
                let buf: Vec<u8> = (0..len)
                    .map(|_| ABC[rnd(ABC.len() as u64) as usize])
                    .collect();
                HashMpm::fold(&buf, &mut folded);
                let from = rnd(5) as usize;
                let mut got = Vec::new();
                m.each(&buf, &folded, from, &mut at, |p, s| {
                    if m.is_at(p, &buf, &folded, s) {
                        got.push((s, p));
                    }
                });
                got.sort_unstable();
                let mut want = Vec::new();
                for (pid, (p, cs)) in pats.iter().enumerate() {
                    for (s, w) in buf.windows(p.len()).enumerate() {
                        let hit = if *cs {
                            w == &p[..]
                        } else {
                            w.eq_ignore_ascii_case(p)
                        };
                        if hit && s >= from {
                            want.push((s, pid as u32));
                        }
                    }
                }
                want.sort_unstable();
                assert_eq!(got, want, "buffer {buf:?}");
            }
        }
    }
}
