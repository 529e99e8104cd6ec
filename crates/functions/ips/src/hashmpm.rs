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
//!
//! Many patterns can share a key: ET Open's `file.data` fast patterns hold
//! hundreds starting `class=\"`, each verified at every `class` of an HTML
//! body when one key listed them all (a third of a candidate per byte of
//! HTML, each a comparison). A key listing more than [`CROWD`] patterns of
//! at least eight bytes files those under their next four folded bytes too
//! ([`KeyTable::sub`]), so a position is verified only against the
//! patterns whose first eight bytes it holds.

use rustc_hash::FxHashMap;

/// The patterns of one length class by key (their first bytes folded, as a
/// little-endian `u32` padded with zeros): a bit set over the keys' hashes,
/// and per key the patterns to verify.
struct KeyTable {
    /// `32 - log2(bits)`: a hash's top bits index the bit set.
    shift: u32,
    bits: Vec<u64>,
    /// Key -> range of `ids`, and whether the key is crowded (its
    /// patterns of eight bytes or more are in `sub`, not in the range).
    by_key: FxHashMap<u32, (u32, u32, bool)>,
    /// A crowded key and the next four folded bytes (key | next << 32) ->
    /// range of `ids`.
    sub: FxHashMap<u64, (u32, u32)>,
    ids: Vec<u32>,
}

/// A key listing more patterns than this has its patterns of at least
/// eight bytes filed by their next four bytes too ([`KeyTable::sub`]): one
/// more hash lookup where the key occurs instead of verifying them all.
const CROWD: usize = 4;

/// A pattern's place in a [`KeyTable`]: its key, its next four folded
/// bytes if it has them, its id.
type Keyed = (u32, Option<u32>, u32);

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
    fn new(mut keyed: Vec<Keyed>) -> KeyTable {
        keyed.sort_unstable();
        let mut by_key = FxHashMap::default();
        let mut sub = FxHashMap::default();
        let mut ids = Vec::with_capacity(keyed.len());
        let mut k = 0;
        while k < keyed.len() {
            let key = keyed[k].0;
            let z = k + keyed[k..].iter().take_while(|e| e.0 == key).count();
            let group = &keyed[k..z];
            let crowded = group.len() > CROWD && group.iter().any(|e| e.1.is_some());
            let a = ids.len() as u32;
            // Sorted: the patterns without next bytes (`None`) first.
            let short = if crowded {
                group.iter().take_while(|e| e.1.is_none()).count()
            } else {
                group.len()
            };
            ids.extend(group[..short].iter().map(|e| e.2));
            by_key.insert(key, (a, ids.len() as u32, crowded));
            let mut s = short;
            while s < group.len() {
                let next = group[s].1;
                let a = ids.len() as u32;
                while s < group.len() && group[s].1 == next {
                    ids.push(group[s].2);
                    s += 1;
                }
                let next = next.unwrap_or_default();
                sub.insert(key as u64 | (next as u64) << 32, (a, ids.len() as u32));
            }
            k = z;
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
            sub,
            ids,
        }
    }
}

/// A pattern: its bytes (folded unless case-sensitive).
struct Pat {
    bytes: Box<[u8]>,
    cs: bool,
}

/// The first stage of a search, tested at every position, in two bit sets
/// of 8 and 16 KiB (the L1 cache): the first two bytes (folded, indexed
/// directly) of each two- or three-byte pattern, and every pair starting
/// with the byte of a one-byte pattern; the hash of the first four of each
/// longer one. (A third set for the one-byte patterns was one more load,
/// shift and or per byte of the search's tightest loop.) A set has its own
/// of all its patterns; [`HashMpm::first_stage`] makes one of some of them,
/// so a search for only those passes fewer positions.
pub(crate) struct FirstStage {
    pair: Box<[u64; 1024]>,
    quad: Box<[u64; QUAD_WORDS]>,
    /// The search of a stage of some of a set's patterns where the set's
    /// long ones are Vectorscan's ([`Search::Split`]): set once compiled
    /// ([`HashMpm::first_stage`]); unset, the set's.
    #[cfg(sluice_vectorscan)]
    vs: std::sync::Arc<std::sync::OnceLock<ViewVs>>,
}

/// How a [`FirstStage`] of a set whose patterns of four bytes or more are
/// Vectorscan's ([`Search::Split`]) searches.
#[cfg(sluice_vectorscan)]
enum ViewVs {
    /// As the set does: its long patterns with its database, the short
    /// ones hashed with the stage. Until the stage's own database is
    /// compiled, or if it was refused.
    All,
    /// Not at all: the stage holds no pattern.
    Empty,
    /// With a database of only the patterns the stage holds, short ones
    /// too. ET Open's stream patterns a port-80 response can match are 193
    /// of 2,203: a search of all the long ones spent most of its time on
    /// the others, and the hashed pass over every position for the short
    /// ones was a seventh of the IPS's time (docs/FUNCTIONS.md, "Vectorscan").
    Own(crate::vectorscan::Literals),
}
impl FirstStage {
    fn empty() -> FirstStage {
        FirstStage {
            pair: Box::new([0; 1024]),
            quad: Box::new([0; QUAD_WORDS]),
            #[cfg(sluice_vectorscan)]
            vs: Default::default(),
        }
    }

    /// True if the stage searches with a Vectorscan database of its own
    /// (compiled, and holding some patterns).
    pub(crate) fn has_own_search(&self) -> bool {
        #[cfg(sluice_vectorscan)]
        return matches!(self.vs.get(), Some(ViewVs::Own(_)));
        #[cfg(not(sluice_vectorscan))]
        false
    }

    /// Waits until the stage's own Vectorscan database is compiled (or
    /// refused), if it is being compiled: what a search with it finds no
    /// longer changes.
    pub(crate) fn wait_compiled(&self) {
        #[cfg(sluice_vectorscan)]
        while self.vs.get().is_none() && std::sync::Arc::strong_count(&self.vs) > 1 {
            std::thread::sleep(std::time::Duration::from_millis(1));
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
            // Pairs are indexed little-endian: the first byte is the low
            // one, so its 256 pairs are one bit in each of 256 words.
            for second in 0..256 {
                let p = k[0] as usize | second << 8;
                self.pair[p / 64] |= 1 << (p % 64);
            }
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
    /// The same patterns compiled by Vectorscan, which then does the
    /// search ([`HashMpm::each_in`]); `None` where it is not built in,
    /// turned off (`SLUICE_IPS_MPM=hashed`) or refused the patterns.
    #[cfg(sluice_vectorscan)]
    vs: Option<crate::vectorscan::Literals>,
    /// Whether `vs` holds only the patterns of four bytes or more
    /// ([`Search::Split`]).
    #[cfg(sluice_vectorscan)]
    vs_long: bool,
}

/// How a [`HashMpm`] searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Search {
    /// Every pattern by hashing (what the others are without Vectorscan).
    #[cfg_attr(not(sluice_vectorscan), allow(dead_code))]
    Hashed,
    /// Every pattern by Vectorscan, where it is built in (else hashed).
    Vectorscan,
    /// The patterns of four bytes or more by Vectorscan, the shorter ones by
    /// hashing with the caller's first stage ([`HashMpm::each_in`]): a set
    /// whose short patterns are mostly of rules a flow cannot match, which
    /// the first stage leaves out and Vectorscan would report wherever
    /// they occur (every `|00|` of a binary body).
    Split,
}

/// Whether sets are searched by Vectorscan where it is built in: unless the
/// environment says `SLUICE_IPS_MPM=hashed` (read once per process; for
/// measuring one engine against the other in one build).
#[cfg(sluice_vectorscan)]
fn vectorscan_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SLUICE_IPS_MPM").map_or(true, |v| v != "hashed"))
}

/// The engine [`HashMpm`] sets search with in this process: `"vectorscan"`
/// or `"hashed"` (reported by `sluice ips check` and the benchmarks).
pub fn engine_name() -> &'static str {
    #[cfg(sluice_vectorscan)]
    if vectorscan_on() {
        return "vectorscan";
    }
    "hashed"
}

impl HashMpm {
    /// The set of `pats` (bytes, case-sensitive), numbered in order. A
    /// pattern that is not case-sensitive matches in any ASCII case. Empty
    /// patterns are never found.
    pub(crate) fn new<'a>(pats: impl IntoIterator<Item = (&'a [u8], bool)>) -> HashMpm {
        Self::with_engine(pats, Search::Vectorscan)
    }

    /// [`HashMpm::new`], searching as `search` says where Vectorscan is
    /// built in, turned on and takes the patterns (by hashing otherwise).
    pub(crate) fn with_engine<'a>(
        pats: impl IntoIterator<Item = (&'a [u8], bool)>,
        search: Search,
    ) -> HashMpm {
        let mut keyed: [Vec<Keyed>; 4] = Default::default();
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
                let next = bytes.get(4..8).map(|b| {
                    let f = |i: usize| b[i].to_ascii_lowercase();
                    u32::from_le_bytes([f(0), f(1), f(2), f(3)])
                });
                keyed[n - 1].push((u32::from_le_bytes(k), next, pid as u32));
                first.add(&k[..n]);
            }
            out.push(Pat { bytes, cs });
        }
        #[cfg(sluice_vectorscan)]
        let min = if search == Search::Split { 4 } else { 1 };
        #[cfg(sluice_vectorscan)]
        let vs = (search != Search::Hashed && vectorscan_on())
            .then(|| {
                crate::vectorscan::Literals::new(
                    out.iter()
                        .enumerate()
                        .filter(|(_, p)| p.bytes.len() >= min)
                        .map(|(i, p)| (i as u32, &p.bytes[..], p.cs)),
                )
                .ok()
            })
            .flatten();
        #[cfg(not(sluice_vectorscan))]
        let _ = search;
        HashMpm {
            pats: out,
            first,
            classes: keyed.map(|k| (!k.is_empty()).then(|| KeyTable::new(k))),
            max_len,
            #[cfg(sluice_vectorscan)]
            vs_long: search == Search::Split,
            #[cfg(sluice_vectorscan)]
            vs,
        }
    }

    /// A first stage of only the patterns `keep` accepts: a search with it
    /// ([`HashMpm::each_in`]) finds theirs and may leave out the others.
    pub(crate) fn first_stage(&self, mut keep: impl FnMut(u32) -> bool) -> FirstStage {
        let mut f = FirstStage::empty();
        let mut kept = Vec::new();
        for (pid, p) in self.pats.iter().enumerate() {
            if keep(pid as u32) && !p.bytes.is_empty() {
                f.add(&p.bytes);
                kept.push(pid as u32);
            }
        }
        #[cfg(sluice_vectorscan)]
        if self.vs.is_some() && self.vs_long {
            if kept.is_empty() {
                let _ = f.vs.set(ViewVs::Empty);
            } else {
                // Compiling takes 20-300 ms for ET Open's views: done on a
                // thread of its own, the data path searching with the set's
                // database meanwhile (which finds these patterns too) instead
                // of waiting. Suricata compiles its groups' matchers before
                // it starts; views are made when a class is first seen.
                let pats: Vec<(u32, Box<[u8]>, bool)> = kept
                    .iter()
                    .map(|&pid| {
                        let p = &self.pats[pid as usize];
                        (pid, p.bytes.clone(), p.cs)
                    })
                    .collect();
                let cell = std::sync::Arc::clone(&f.vs);
                let compile = move || {
                    let own = crate::vectorscan::Literals::new(
                        pats.iter().map(|(pid, b, cs)| (*pid, &b[..], *cs)),
                    );
                    // Refused (it is not: the set's own took these
                    // patterns): the set's database finds them too.
                    let _ = cell.set(own.map_or(ViewVs::All, ViewVs::Own));
                };
                // Without a thread the stage keeps the set's database.
                let _ = std::thread::Builder::new()
                    .name("sluice-ips-view".into())
                    .spawn(compile);
            }
        }
        #[cfg(not(sluice_vectorscan))]
        let _ = kept;
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
        // Vectorscan's finds are occurrences, so candidates too. It searches
        // with `first`'s own database once compiled, else the set's (whose
        // finds of other patterns are verified and dropped by the caller as
        // the hashed search's are).
        #[cfg(sluice_vectorscan)]
        if let Some(all) = &self.vs {
            let vs = match first.vs.get() {
                None | Some(ViewVs::All) => Some(all),
                Some(ViewVs::Empty) => None,
                Some(ViewVs::Own(own)) => Some(own),
            };
            // A stage's own database holds its short patterns too.
            let own = matches!(first.vs.get(), Some(ViewVs::Own(_) | ViewVs::Empty));
            if vs.is_none_or(|vs| vs.scan(&buf[from..], |pid, s| cand(pid, from + s))) {
                if self.vs_long && !own {
                    self.hashed_short(first, buf, folded, from, at, &mut cand);
                }
                return;
            }
        }
        self.hashed(first, buf, folded, from, at, &mut cand);
    }

    /// The hashed search of [`HashMpm::each_in`].
    #[inline]
    fn hashed(
        &self,
        first: &FirstStage,
        buf: &[u8],
        folded: &[u8],
        from: usize,
        at: &mut Vec<u32>,
        cand: &mut impl FnMut(u32, usize),
    ) {
        let n = buf.len();
        // Callers fold with [`HashMpm::fold`]; buffers are far below 4 GiB.
        debug_assert!(folded.len() >= n + 3);
        // First the positions where some pattern's first bytes may be, in a
        // tight loop over two small tables; then, at those
        // positions, each length class's hashed key and the patterns to
        // verify. A key read past the end (the padding) is refused by the
        // verification.
        //
        // Every position is written and the count advanced only on a pass,
        // with no branch: whether a position passes is close to random on
        // binary bytes, and a mispredicted branch per few positions cost
        // more than the tables' loads.
        //
        // The loop works on plain slices (not through `at`'s `Vec`, which
        // made the compiler reload its pointer and length on every
        // position) and reads each window in one load.
        at.clear();
        at.resize(n - from, 0);
        let mut k = 0;
        let (pair, quad) = (&*first.pair, &*first.quad);
        let out = &mut at[..];
        let src = &folded[from..n + 3];
        for i in 0..n - from {
            // A slice of four as an array: one load (four byte loads and
            // shifts otherwise); the fallback is never taken.
            let w = u32::from_le_bytes(src[i..i + 4].try_into().unwrap_or([0; 4]));
            let (p, q) = ((w & 0xffff) as usize, key_hash(w, QUAD_SHIFT));
            let hit = (pair[p / 64] >> (p % 64)) | (quad[(q / 64) % QUAD_WORDS] >> (q % 64));
            // `k <= i < n - from`: in bounds.
            out[k] = (from + i) as u32;
            k += (hit & 1) as usize;
        }
        at.truncate(k);
        self.second_stage(4, buf.len(), folded, at, cand);
    }

    /// The second stage of [`HashMpm::hashed`]: at each position of `at`,
    /// the length classes below `classes` (4: all; 3: the patterns shorter
    /// than four bytes) by their hashed keys, and the patterns to verify.
    #[inline]
    fn second_stage(
        &self,
        classes: usize,
        n: usize,
        folded: &[u8],
        at: &[u32],
        cand: &mut impl FnMut(u32, usize),
    ) {
        for &i in at.iter() {
            let i = i as usize;
            let w = &folded[i..i + 4];
            let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            for (c, tc) in self.classes[..classes].iter().enumerate() {
                let Some(tc) = tc else { continue };
                let k = w & MASKS[c];
                let h = key_hash(k, tc.shift);
                if (tc.bits[h / 64] >> (h % 64)) & 1 == 0 {
                    continue;
                }
                let Some(&(a, z, crowded)) = tc.by_key.get(&k) else {
                    continue;
                };
                for &pid in &tc.ids[a as usize..z as usize] {
                    cand(pid, i);
                }
                // A crowded key's longer patterns, by the next four bytes
                // (none fits when they are past the buffer's end).
                if crowded && i + 8 <= n {
                    let w = &folded[i + 4..i + 8];
                    let next = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    if let Some(&(a, z)) = tc.sub.get(&(k as u64 | (next as u64) << 32)) {
                        for &pid in &tc.ids[a as usize..z as usize] {
                            cand(pid, i);
                        }
                    }
                }
            }
        }
    }

    /// [`HashMpm::hashed`] of the patterns shorter than four bytes: the
    /// first stage's table of pairs only, and the classes of one to three
    /// bytes.
    #[cfg(sluice_vectorscan)]
    fn hashed_short(
        &self,
        first: &FirstStage,
        buf: &[u8],
        folded: &[u8],
        from: usize,
        at: &mut Vec<u32>,
        cand: &mut impl FnMut(u32, usize),
    ) {
        let n = buf.len();
        if self.classes[..3].iter().all(Option::is_none) {
            return;
        }
        debug_assert!(folded.len() >= n + 3);
        at.clear();
        at.resize(n - from, 0);
        let mut k = 0;
        let pair = &*first.pair;
        let out = &mut at[..];
        let src = &folded[from..n + 1];
        for i in 0..n - from {
            let p = u16::from_le_bytes([src[i], src[i + 1]]) as usize;
            out[k] = (from + i) as u32;
            k += ((pair[p / 64] >> (p % 64)) & 1) as usize;
        }
        at.truncate(k);
        self.second_stage(3, n, folded, at, cand);
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

    /// The patterns (bytes, case-sensitive), in order.
    #[cfg(all(test, sluice_vectorscan))]
    pub(crate) fn patterns(&self) -> Vec<(Vec<u8>, bool)> {
        self.pats.iter().map(|p| (p.bytes.to_vec(), p.cs)).collect()
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
    /// bytes, ones longer than the buffer, non-ASCII bytes (never folded);
    /// and keys shared by more than [`CROWD`] patterns, whose longer ones
    /// are filed by their next bytes too (fails if one of those is left
    /// out, e.g. a crowded key's patterns of exactly eight bytes, or ones
    /// ending at the buffer's end).
    #[test]
    fn finds_every_occurrence() {
        let mut rng = crate::testrng::Lcg::new(11);
        let mut rnd = |n: u64| rng.below(n);
        // A small alphabet, so patterns overlap and occur often.
        const ABC: &[u8] = b"aAbBzZ\x00\xc1\xe1@[`{";
        let (mut folded, mut at) = (Vec::new(), Vec::new());
        let mut crowded = 0;
        for round in 0..120 {
            let npats = 1 + rnd(if round % 4 == 0 { 300 } else { 30 }) as usize;
            // From round 40 on, patterns up to 12 bytes and many sharing
            // their first four (in either case), so keys crowd.
            let (long, prefix) = (round >= 40, [b'a', b'B', b'\x00', b'z']);
            let pats: Vec<(Vec<u8>, bool)> = (0..npats)
                .map(|_| {
                    let len = 1 + rnd(if long { 12 } else { 7 }) as usize;
                    let mut b: Vec<u8> = (0..len)
                        .map(|_| ABC[rnd(ABC.len() as u64) as usize])
                        .collect();
                    if long && len >= 4 && rnd(3) != 0 {
                        for (d, s) in b.iter_mut().zip(prefix) {
                            *d = if rnd(2) == 0 {
                                s
                            } else {
                                s.to_ascii_uppercase()
                            };
                        }
                    }
                    (b, rnd(2) == 0)
                })
                .collect();
            // Every engine (Vectorscan's two where it is built in), and a
            // first stage of some patterns: each finds at least those.
            let search = [Search::Hashed, Search::Vectorscan, Search::Split][round % 3];
            let m = HashMpm::with_engine(pats.iter().map(|(b, cs)| (&b[..], *cs)), search);
            let some: Vec<bool> = (0..pats.len()).map(|_| rnd(3) != 0).collect();
            let first = m.first_stage(|pid| some[pid as usize]);
            first.wait_compiled();
            // A stage of a split set has a database of its own patterns,
            // short ones too (none when it holds none), which finds only
            // theirs.
            #[cfg(sluice_vectorscan)]
            let own = if m.vs.is_some() && search == Search::Split {
                let any = (0..pats.len()).any(|i| some[i]);
                match first.vs.get() {
                    Some(ViewVs::Own(_)) => assert!(any),
                    Some(ViewVs::Empty) => assert!(!any),
                    _ => panic!("a split set's stage has no database of its own"),
                }
                true
            } else {
                false
            };
            #[cfg(not(sluice_vectorscan))]
            let own = false;
            // Vectorscan took the patterns where it is on (a compile error
            // would leave the hashed search doing its part unseen).
            #[cfg(sluice_vectorscan)]
            assert_eq!(
                m.vs.is_some(),
                search != Search::Hashed
                    && vectorscan_on()
                    && (search != Search::Split || pats.iter().any(|p| p.0.len() >= 4)),
                "{search:?}"
            );
            crowded += m.classes[3].as_ref().map_or(0, |t| t.sub.len());
            assert_eq!(m.max_len(), pats.iter().map(|p| p.0.len()).max().unwrap());
            for _ in 0..50 {
                let len = rnd(40) as usize;
                let mut buf: Vec<u8> = (0..len)
                    .map(|_| ABC[rnd(ABC.len() as u64) as usize])
                    .collect();
                // Long patterns seldom occur by chance: put some in, in
                // either case, at the end too.
                for _ in 0..rnd(4) {
                    let (p, _) = &pats[rnd(pats.len() as u64) as usize];
                    let at = rnd(buf.len() as u64 + 1) as usize;
                    let end = (at + p.len()).min(buf.len());
                    let flip = rnd(2) == 0;
                    let p = p
                        .iter()
                        .map(|&c| if flip { c.to_ascii_uppercase() } else { c });
                    buf.splice(at..end, p);
                }
                HashMpm::fold(&buf, &mut folded);
                let from = rnd(5) as usize;
                let mut got = Vec::new();
                m.each(&buf, &folded, from, &mut at, |p, s| {
                    if m.is_at(p, &buf, &folded, s) {
                        got.push((s, p));
                    }
                });
                got.sort_unstable();
                let mut got_some = Vec::new();
                m.each_in(&first, &buf, &folded, from, &mut at, |p, s| {
                    if m.is_at(p, &buf, &folded, s) {
                        got_some.push((s, p));
                    }
                });
                got_some.sort_unstable();
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
                assert_eq!(got, want, "{search:?}: buffer {buf:?}");
                // Found once each, and every find of a pattern the first
                // stage holds.
                assert!(got_some.windows(2).all(|w| w[0] != w[1]), "{search:?}");
                let kept: Vec<_> = got_some.iter().filter(|(_, p)| some[*p as usize]).collect();
                let want_kept: Vec<_> = want.iter().filter(|(_, p)| some[*p as usize]).collect();
                assert_eq!(kept, want_kept, "{search:?}, some patterns: buffer {buf:?}");
                if own {
                    let others = got_some.iter().filter(|(_, p)| !some[*p as usize]);
                    assert_eq!(others.count(), 0, "{search:?}: a pattern not kept");
                }
            }
        }
        assert!(crowded > 100, "keys crowded in {crowded} places only");
    }

    /// The search against Vectorscan (feature `vectorscan`, Debian's
    /// `libvectorscan-dev`) on ET Open's patterns for a response's body
    /// packets (the set `HttpRules` searches them for; ET Open from
    /// `../shared/data/et-open/`, not in the repository), over HTTP
    /// response bodies like `sluice bench nf`'s HTTP mix (two thirds HTML,
    /// a third JPEG-like random bytes) in 1,400-byte pieces, a packet's
    /// body bytes: both must find the same occurrences (fails on any
    /// difference), and the rate of each is printed. A measurement, so
    /// ignored:
    /// `cargo test --release -p sluice-ips --features vectorscan --lib against_vectorscan -- --ignored --nocapture`.
    #[cfg(sluice_vectorscan)]
    #[test]
    #[ignore]
    fn against_vectorscan() {
        use crate::rules;
        use std::time::Instant;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../../shared/data/et-open");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            println!("ET Open rules absent at {}: not measured", dir.display());
            return;
        };
        let vars = rules::suricata_default_vars();
        let mut all = Vec::new();
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths
            .iter()
            .filter(|p| p.extension().is_some_and(|x| x == "rules"))
        {
            let text = std::fs::read_to_string(p).unwrap();
            all.extend(rules::parse_rules(&text, "et", &vars).0);
        }
        let http = crate::http::prefilter::HttpRules::new(&all).unwrap();
        let pats = http.body_patterns(false);
        assert!(pats.len() > 100, "only {} body patterns", pats.len());
        // Bodies as the bench's HTTP mix makes them.
        const WORDS: [&str; 12] = [
            "the", "news", "market", "weather", "video", "today", "city", "world", "music",
            "travel", "photo", "guide",
        ];
        let mut rng = crate::testrng::Lcg::new(7);
        let mut corpus = Vec::new();
        while corpus.len() < 16 << 20 {
            let len = 2_000 + rng.below(58_000) as usize;
            let start = corpus.len();
            if rng.below(3) != 0 {
                corpus.extend_from_slice(b"<!DOCTYPE html><html><head><title>");
                while corpus.len() - start < len {
                    let w = WORDS[rng.below(WORDS.len() as u64) as usize];
                    match rng.below(12) {
                        0 => corpus.extend_from_slice(b"</p>\n<p class=\"text\">"),
                        1 => corpus.extend_from_slice(
                            format!("<a href=\"/{w}/{}\">", rng.below(1000)).as_bytes(),
                        ),
                        2 => corpus.extend_from_slice(b"</a> "),
                        _ => {
                            corpus.extend_from_slice(w.as_bytes());
                            corpus.push(b' ');
                        }
                    }
                }
            } else {
                corpus.extend_from_slice(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00");
                while corpus.len() - start < len {
                    corpus.extend_from_slice(&rng.below(u64::MAX).to_le_bytes());
                }
            }
            corpus.truncate(start + len);
        }
        let m = HashMpm::with_engine(pats.iter().map(|(b, cs)| (&b[..], *cs)), Search::Hashed);
        let hs = crate::vectorscan::Literals::new(
            pats.iter()
                .enumerate()
                .map(|(i, (b, cs))| (i as u32, &b[..], *cs)),
        )
        .unwrap();
        let (mut folded, mut at) = (Vec::new(), Vec::new());
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let mut best = [f64::MAX; 2];
        for round in 0..5 {
            let t = Instant::now();
            let mut n = 0u64;
            for piece in corpus.chunks(1400) {
                HashMpm::fold(piece, &mut folded);
                m.each(piece, &folded, 0, &mut at, |p, s| {
                    if m.is_at(p, piece, &folded, s) {
                        n += 1;
                        if round == 0 {
                            ours.push((piece.as_ptr() as usize + s, p));
                        }
                    }
                });
            }
            best[0] = best[0].min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let mut k = 0u64;
            for piece in corpus.chunks(1400) {
                hs.scan(piece, |p, s| {
                    k += 1;
                    if round == 0 {
                        theirs.push((piece.as_ptr() as usize + s, p));
                    }
                });
            }
            best[1] = best[1].min(t.elapsed().as_secs_f64());
            assert_eq!(n, k, "occurrences found");
        }
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs, "the same occurrences");
        let mb = corpus.len() as f64 / 1e6;
        println!(
            "{} patterns, {mb:.1} MB in 1,400-byte pieces, {} occurrences: hashed search {:.0} MB/s, Vectorscan {:.0} MB/s, hashed / Vectorscan time {:.2}",
            pats.len(),
            ours.len(),
            mb / best[0],
            mb / best[1],
            best[0] / best[1]
        );
    }
}
