use core::hash::{Hash, Hasher};
use sluice_wire::flow::{FlowKey, FLOW_KEY_MAX_ENCODED};

/// Longest key in bytes: namespace, table, an IPv6 flow key and a 32-bit suffix fit.
pub const KEY_CAP: usize = 48;

/// Identifies whose state a key belongs to: one configured function of one chain of
/// one tenant. Instances of the same function share a namespace (that is the point);
/// different functions never collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(pub u32);

/// A state key: `[namespace u32][table u8][payload]`, at most [`KEY_CAP`] bytes,
/// held inline so building one never allocates.
#[derive(Clone, Copy)]
pub struct Key {
    len: u8,
    bytes: [u8; KEY_CAP],
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
        Key {
            len: (5 + n) as u8,
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
        let at = k.len as usize;
        let m = suffix.len().min(KEY_CAP - at);
        debug_assert_eq!(m, suffix.len(), "key suffix too long");
        k.bytes[at..at + m].copy_from_slice(&suffix[..m]);
        k.len += m as u8;
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
        Some(Key {
            len: b.len() as u8,
            bytes,
        })
    }

    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
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
        &self.bytes[5..self.len as usize]
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
        self.as_bytes() == o.as_bytes()
    }
}
impl Eq for Key {}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write(self.as_bytes());
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
