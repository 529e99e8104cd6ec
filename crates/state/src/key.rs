use core::hash::{Hash, Hasher};
use sluice_wire::flow::{FlowKey, FLOW_KEY_MAX_ENCODED};

/// Longest key in bytes: namespace, table, a zoned IPv6 flow key and a 5-byte
/// suffix fit, exactly. Every byte of a `Key` is copied and compared per packet,
/// so its size is kept at what it was before zones (56 bytes with the tag): a
/// 64-byte key cost the functions 3-5% in `sluice bench nf`.
pub const KEY_CAP: usize = 52;

/// Identifies whose state a key belongs to: one configured function of one chain of
/// one tenant. Instances of the same function share a namespace (that is the point);
/// different functions never collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(pub u32);

/// A state key: `[namespace u32][table u8][payload]`, at most [`KEY_CAP`] bytes,
/// held inline so building one never allocates.
///
/// A key carries a hash of its bytes, computed once when it is built: keys are
/// looked up in several maps per packet (the flow cache's, a function's slots),
/// and hashing the bytes each time was a tenth of a cached instance's time.
/// Bytes past `len` are always zero, so equality compares whole arrays.
#[derive(Clone, Copy)]
pub struct Key {
    /// The length in the top byte, 24 bits of the hash below: one word, no
    /// padding.
    tag: u32,
    bytes: [u8; KEY_CAP],
}

/// A key's tag: its length and its hash.
#[inline]
fn tag(bytes: &[u8; KEY_CAP], len: u8) -> u32 {
    (len as u32) << 24 | key_hash(bytes, len) >> 8
}

/// A tag's hash bits spread over a word: the low bits (a table's index) stay
/// the hash's own, the top bits (hashbrown's control byte) mix all of them.
#[inline]
fn spread(tag: u32) -> u64 {
    let t = tag as u64;
    (t & 0x00ff_ffff) | (t.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !0x00ff_ffff)
}

/// The hash a key carries: FNV-1a-like over 8-byte words, folded to 32 bits.
#[inline]
fn key_hash(bytes: &[u8; KEY_CAP], len: u8) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ len as u64;
    let words = (len as usize).div_ceil(8);
    for w in bytes.chunks_exact(8).take(words) {
        let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(23);
    }
    if words * 8 > KEY_CAP / 8 * 8 {
        // The last, partial word of the longest keys (bytes past `len` are 0).
        let t = &bytes[KEY_CAP / 8 * 8..];
        let mut w = [0u8; 8];
        w[..t.len()].copy_from_slice(t);
        h = (h ^ u64::from_le_bytes(w))
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(23);
    }
    h = (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (h ^ (h >> 32)) as u32
}

impl Key {
    /// A key of `table` in `ns` with `payload` (truncated payloads are a bug: panics
    /// in debug builds, since every caller builds keys from fixed-size parts).
    #[inline]
    pub fn new(ns: Namespace, table: u8, payload: &[u8]) -> Key {
        debug_assert!(payload.len() <= KEY_CAP - 5, "key payload too long");
        let n = payload.len().min(KEY_CAP - 5);
        let mut bytes = [0u8; KEY_CAP];
        bytes[..4].copy_from_slice(&ns.0.to_be_bytes());
        bytes[4] = table;
        bytes[5..5 + n].copy_from_slice(&payload[..n]);
        let len = (5 + n) as u8;
        Key {
            tag: tag(&bytes, len),
            bytes,
        }
    }

    /// A per-flow key: the flow's stable encoding, optionally followed by `suffix`
    /// bytes (e.g. a direction or sequence number).
    #[inline]
    pub fn flow(ns: Namespace, table: u8, flow: &FlowKey, suffix: &[u8]) -> Key {
        let mut enc = [0u8; FLOW_KEY_MAX_ENCODED];
        let n = flow.encode(&mut enc);
        let mut k = Key::new(ns, table, &enc[..n]);
        let at = k.len();
        let m = suffix.len().min(KEY_CAP - at);
        debug_assert_eq!(m, suffix.len(), "key suffix too long");
        if m > 0 {
            k.bytes[at..at + m].copy_from_slice(&suffix[..m]);
            k.tag = tag(&k.bytes, (at + m) as u8);
        }
        k
    }

    /// Rebuilds a key from its bytes (as a backend returns them). `None` if too long
    /// or shorter than the namespace and table header.
    pub fn from_bytes(b: &[u8]) -> Option<Key> {
        if b.len() < 5 || b.len() > KEY_CAP {
            return None;
        }
        let mut bytes = [0u8; KEY_CAP];
        bytes[..b.len()].copy_from_slice(b);
        let len = b.len() as u8;
        Some(Key {
            tag: tag(&bytes, len),
            bytes,
        })
    }

    /// The 24-bit hash the key carries (computed once when it was built), spread
    /// over 64 bits for a hash table: maps keyed by whole keys use it instead of
    /// hashing the bytes again. Equal to [`Key::hash_bytes`] of its bytes.
    #[inline]
    pub fn table_hash(&self) -> u64 {
        spread(self.tag)
    }

    /// [`Key::table_hash`] of a key with these bytes (as a table stores them),
    /// for rehashing; `0` for bytes no key can have.
    pub fn hash_bytes(b: &[u8]) -> u64 {
        Key::from_bytes(b).map_or(0, |k| k.table_hash())
    }

    /// The key's length in bytes.
    #[inline]
    fn len(&self) -> usize {
        (self.tag >> 24) as usize
    }

    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len()]
    }

    /// The namespace.
    #[inline]
    pub fn namespace(&self) -> Namespace {
        Namespace(u32::from_be_bytes(self.bytes[..4].try_into().unwrap()))
    }

    /// The table byte.
    #[inline]
    pub fn table(&self) -> u8 {
        self.bytes[4]
    }

    /// The bytes after namespace and table.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.bytes[5..self.len()]
    }

    /// Decodes the payload's leading flow key, if the key was built by [`Key::flow`]
    /// with an empty suffix.
    pub fn flow_key(&self) -> Option<FlowKey> {
        FlowKey::decode(self.payload())
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, o: &Key) -> bool {
        self.tag == o.tag && self.bytes == o.bytes
    }
}
impl Eq for Key {}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u32(self.tag);
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Key) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Key {
    fn cmp(&self, o: &Key) -> core::cmp::Ordering {
        self.as_bytes().cmp(o.as_bytes())
    }
}

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Key(ns={}, table={}, ", self.namespace().0, self.table())?;
        match self.flow_key() {
            Some(fk) => write!(f, "{fk})"),
            None => write!(f, "{:02x?})", self.payload()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn h(k: &Key) -> u64 {
        let mut s = DefaultHasher::new();
        k.hash(&mut s);
        s.finish()
    }

    #[test]
    fn a_tables_hash_of_stored_bytes_is_the_keys_own() {
        for len in [0usize, 3, 19, 40, 47] {
            let payload: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
            let k = Key::new(Namespace(9), 2, &payload);
            assert_eq!(Key::hash_bytes(k.as_bytes()), k.table_hash(), "len {len}");
        }
        // The low bits (a table's index) differ between neighbouring keys.
        let a = Key::new(Namespace(1), 1, b"flow-a").table_hash();
        let b = Key::new(Namespace(1), 1, b"flow-b").table_hash();
        assert_ne!(a & 0xffff, b & 0xffff);
        assert_eq!(Key::hash_bytes(b"abc"), 0, "too short to be a key");
    }

    #[test]
    fn the_longest_keys_fit_and_every_byte_counts() {
        assert_eq!(std::mem::size_of::<Key>(), 56);
        let f = FlowKey {
            zone: 0x5000_1388,
            proto: 6,
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            src_port: 1234,
            dst_port: 80,
        };
        let a = Key::flow(Namespace(7), 2, &f, &[1, 0, 0, 0, 9]);
        assert_eq!(a.as_bytes().len(), KEY_CAP);
        assert_eq!(Key::from_bytes(a.as_bytes()), Some(a));
        let b = Key::flow(Namespace(7), 2, &f, &[1, 0, 0, 0, 8]);
        assert!(
            a != b && h(&a) != h(&b),
            "the last byte is hashed and compared"
        );
        assert_eq!(a.flow_key(), None);
        assert_eq!(Key::flow(Namespace(7), 2, &f, &[]).flow_key(), Some(f));
    }

    #[test]
    fn equal_bytes_mean_equal_keys_and_hashes_however_built() {
        let f = FlowKey {
            zone: 0,
            proto: 6,
            src: sluice_wire::IpAddr::V4([10, 0, 0, 1]),
            dst: sluice_wire::IpAddr::V4([10, 0, 0, 2]),
            src_port: 1234,
            dst_port: 80,
        };
        let a = Key::flow(Namespace(7), 2, &f, &[9, 9]);
        let back = Key::from_bytes(a.as_bytes()).unwrap();
        let by_payload = Key::new(Namespace(7), 2, a.payload());
        for k in [back, by_payload] {
            assert!(k == a && h(&k) == h(&a), "{k:?} vs {a:?}");
        }
        // Any byte, the length, the namespace or the table makes a difference.
        let mut bytes = a.as_bytes().to_vec();
        for i in 0..bytes.len() {
            bytes[i] ^= 1;
            assert!(Key::from_bytes(&bytes).unwrap() != a, "byte {i}");
            bytes[i] ^= 1;
        }
        assert!(Key::from_bytes(&bytes[..bytes.len() - 1]).unwrap() != a);
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            Key::from_bytes(&longer).unwrap() != a,
            "a trailing zero byte"
        );
        assert!(Key::flow(Namespace(8), 2, &f, &[9, 9]) != a);
        assert!(Key::flow(Namespace(7), 3, &f, &[9, 9]) != a);
        assert!(Key::flow(Namespace(7), 2, &f, &[]) != a);
        // Hashes spread: distinct keys of one table rarely share one.
        let hs: std::collections::HashSet<u32> = (0..10_000u32)
            .map(|i| Key::new(Namespace(1), 1, &i.to_be_bytes()).tag)
            .collect();
        assert!(hs.len() > 9_990, "{} distinct hashes of 10,000", hs.len());
    }
}
