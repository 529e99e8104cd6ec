//! Ordered maps that a copy of the desired state shares with the original
//! (issue 25): every request works on a copy of the state, and at 10,000
//! tenants copying the VMs', instances' and placement reasons' ordered maps
//! entry by entry (their keys are owned strings) was most of a request's
//! time. A [`PMap`] is an ordered map in chunks of at most `2 * CHUNK`
//! entries, each chunk shared (`Arc`) between copies: a copy costs one
//! reference count, and a change copies the one chunk it touches (and the
//! list of chunks, one pointer each), not the map.
//!
//! [`Placed`] adds what placement and derivation ask of VMs and instances:
//! which tenants have one on a host, kept as entries are inserted and
//! removed, so a change's cost follows its hosts, not the fleet.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Bound, Deref, RangeBounds};
use std::sync::Arc;

/// A chunk splits in two above twice this many entries.
const CHUNK: usize = 64;

/// An ordered map whose copies share their chunks (see the module's doc).
/// Reads as a `BTreeMap`; every change goes through a method, which copies
/// only what it changes.
pub struct PMap<K, V> {
    /// Chunks in key order, none empty, every key of one before every key
    /// of the next.
    chunks: Arc<Vec<Arc<BTreeMap<K, V>>>>,
    len: usize,
}

impl<K, V> Clone for PMap<K, V> {
    fn clone(&self) -> Self {
        PMap {
            chunks: Arc::clone(&self.chunks),
            len: self.len,
        }
    }
}

impl<K, V> Default for PMap<K, V> {
    fn default() -> Self {
        PMap {
            chunks: Arc::new(Vec::new()),
            len: 0,
        }
    }
}

impl<K: Ord + Clone, V: Clone> PMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `other` is this very map (a copy of it that neither has
    /// changed since), not merely an equal one: one pointer comparison.
    /// Holding a copy makes any later change to either copy its chunks, so
    /// a held copy tells whether the map changed since.
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.chunks, &other.chunks)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk that holds `key` if any does: the last whose first key is
    /// not after it (the first chunk for a key before every key).
    fn chunk_of<Q: Ord + ?Sized>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
    {
        let after = self
            .chunks
            .partition_point(|c| c.keys().next().is_some_and(|first| first.borrow() <= key));
        after.saturating_sub(1)
    }

    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.chunks.get(self.chunk_of(key))?.get(key)
    }

    /// The stored key and value of `key`.
    pub fn get_key_value<Q: Ord + ?Sized>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
    {
        self.chunks.get(self.chunk_of(key))?.get_key_value(key)
    }

    /// Whether `key` has a value.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.get(key).is_some()
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + Clone {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + Clone {
        self.iter().map(|(k, _)| k)
    }

    /// Every value, in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + Clone {
        self.iter().map(|(_, v)| v)
    }

    /// The entries in `range`, in key order (the chunks before it are
    /// skipped by a binary search, those after it are not visited).
    pub fn range<R: RangeBounds<K>>(&self, range: R) -> impl Iterator<Item = (&K, &V)> {
        let start = match range.start_bound() {
            Bound::Included(k) | Bound::Excluded(k) => self.chunk_of(k),
            Bound::Unbounded => 0,
        };
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        let end = bounds.1.clone();
        self.chunks[start.min(self.chunks.len())..]
            .iter()
            .take_while(move |c| {
                let first = c.keys().next();
                match (&end, first) {
                    (Bound::Included(e), Some(f)) => f <= e,
                    (Bound::Excluded(e), Some(f)) => f < e,
                    _ => true,
                }
            })
            .flat_map(move |c| c.range(bounds.clone()))
    }

    /// Sets `key`'s value; returns the one it replaces.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let chunks = Arc::make_mut(&mut self.chunks);
        if chunks.is_empty() {
            chunks.push(Arc::new(BTreeMap::from([(key, value)])));
            self.len = 1;
            return None;
        }
        let at = {
            let after = chunks.partition_point(|c| c.keys().next().is_some_and(|f| *f <= key));
            after.saturating_sub(1)
        };
        let chunk = Arc::make_mut(&mut chunks[at]);
        let old = chunk.insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        if chunk.len() > 2 * CHUNK {
            let mid = chunk.keys().nth(CHUNK).cloned();
            if let Some(mid) = mid {
                let right = chunk.split_off(&mid);
                chunks.insert(at + 1, Arc::new(right));
            }
        }
        old
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let at = self.chunk_of(key);
        if !self.chunks.get(at)?.contains_key(key) {
            return None;
        }
        let chunks = Arc::make_mut(&mut self.chunks);
        let chunk = Arc::make_mut(&mut chunks[at]);
        let old = chunk.remove(key);
        let left = chunk.len();
        if left == 0 {
            chunks.remove(at);
        } else if at + 1 < chunks.len() && left + chunks[at + 1].len() <= CHUNK {
            // Small neighbours merge, so removals do not leave the map in
            // many near-empty chunks.
            let next = chunks.remove(at + 1);
            let mut next = Arc::try_unwrap(next).unwrap_or_else(|a| (*a).clone());
            Arc::make_mut(&mut chunks[at]).append(&mut next);
        }
        self.len -= 1;
        old
    }

    /// Keeps the entries `keep` says to (called once per entry, in key
    /// order). Copies only the chunks that lose an entry.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let gone: Vec<K> = self
            .iter()
            .filter(|(k, v)| !keep(k, v))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.remove(&k);
        }
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// `key`'s value, to change in place (copies its chunk if shared).
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let at = self.chunk_of(key);
        if !self.chunks.get(at)?.contains_key(key) {
            return None;
        }
        let chunks = Arc::make_mut(&mut self.chunks);
        Arc::make_mut(&mut chunks[at]).get_mut(key)
    }

    /// Debug builds and tests: the chunks are ordered, none empty or
    /// oversized, and `len` counts them.
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn check(&self) {
        let mut n = 0;
        let mut last: Option<&K> = None;
        for c in self.chunks.iter() {
            assert!(!c.is_empty() && c.len() <= 2 * CHUNK, "chunk sizes");
            for k in c.keys() {
                assert!(last.is_none_or(|l| l < k), "chunk order");
                last = Some(k);
                n += 1;
            }
        }
        assert_eq!(n, self.len, "map length");
    }
}

impl<K: Ord + Clone + Borrow<Q>, V: Clone, Q: Ord + ?Sized> std::ops::Index<&Q> for PMap<K, V> {
    type Output = V;
    /// Panics if `key` has no value, as `BTreeMap`'s indexing does.
    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

impl<K: Ord + Clone, V: Clone> Extend<(K, V)> for PMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for PMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = PMap::new();
        m.extend(iter);
        m
    }
}

impl<K: Ord + Clone, V: Clone, const N: usize> From<[(K, V); N]> for PMap<K, V> {
    fn from(a: [(K, V); N]) -> Self {
        a.into_iter().collect()
    }
}

impl<K: Ord + Clone + PartialEq, V: Clone + PartialEq> PartialEq for PMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && (Arc::ptr_eq(&self.chunks, &other.chunks) || self.iter().eq(other.iter()))
    }
}

impl<K: Ord + Clone + Eq, V: Clone + Eq> Eq for PMap<K, V> {}

impl<K: Ord + Clone + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for PMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a, K: Ord + Clone, V: Clone> IntoIterator for &'a PMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Box<dyn DoubleEndedIterator<Item = (&'a K, &'a V)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// A key whose first part is a tenant's name.
pub trait TenantKeyed {
    /// The tenant.
    fn tenant(&self) -> &str;
    /// The smallest key of `tenant`'s entries (where its range starts).
    fn start(tenant: &str) -> Self;
}

impl TenantKeyed for (String, String) {
    fn tenant(&self) -> &str {
        &self.0
    }
    fn start(tenant: &str) -> Self {
        (tenant.to_string(), String::new())
    }
}

impl TenantKeyed for (String, String, u32) {
    fn tenant(&self) -> &str {
        &self.0
    }
    fn start(tenant: &str) -> Self {
        (tenant.to_string(), String::new(), 0)
    }
}

/// A value placed on one host.
pub trait OnHost {
    /// The host.
    fn host(&self) -> u32;
}

impl OnHost for super::Vm {
    fn host(&self) -> u32 {
        self.reg.host
    }
}

impl OnHost for super::Instance {
    fn host(&self) -> u32 {
        self.host
    }
}

/// A [`PMap`] of VMs or NF instances with, per host, the tenants that have
/// one there (and how many), kept with every insertion and removal. Reads
/// as the map (`Deref`); equality and `Debug` are the map's.
#[derive(Clone)]
pub struct Placed<K, V> {
    map: PMap<K, V>,
    /// `(host, tenant)`: how many of the tenant's entries are on the host.
    by_host: PMap<(u32, String), u32>,
}

impl<K, V> Default for Placed<K, V> {
    fn default() -> Self {
        Placed {
            map: PMap::default(),
            by_host: PMap::default(),
        }
    }
}

impl<K, V> Deref for Placed<K, V> {
    type Target = PMap<K, V>;
    fn deref(&self) -> &PMap<K, V> {
        &self.map
    }
}

impl<K: Ord + Clone + TenantKeyed, V: Clone + OnHost> Placed<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    fn count(&mut self, host: u32, tenant: &str, up: bool) {
        let key = (host, tenant.to_string());
        let n = self.by_host.get(&key).copied().unwrap_or(0);
        if up {
            self.by_host.insert(key, n + 1);
        } else if n <= 1 {
            self.by_host.remove(&key);
        } else {
            self.by_host.insert(key, n - 1);
        }
    }

    /// Sets `key`'s value (on its host); returns the one it replaces.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let host = value.host();
        let tenant = key.tenant().to_string();
        let old = self.map.insert(key, value);
        if let Some(o) = &old {
            self.count(o.host(), &tenant, false);
        }
        self.count(host, &tenant, true);
        old
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let old = self.map.remove(key)?;
        self.count(old.host(), key.tenant(), false);
        Some(old)
    }

    /// Keeps the entries `keep` says to (called once per entry, in key order).
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let gone: Vec<K> = self
            .map
            .iter()
            .filter(|(k, v)| !keep(k, v))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.remove(&k);
        }
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// The tenants with an entry on `host`, each once, in name order.
    pub fn tenants_on(&self, host: u32) -> impl Iterator<Item = &str> {
        self.by_host
            .range((host, String::new())..)
            .take_while(move |((h, _), _)| *h == host)
            .map(|((_, t), _)| t.as_str())
    }

    /// Per host with an entry, how many it has, in host order (one pass
    /// over the index: one item per host and tenant there).
    pub fn per_host(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut it = self.by_host.iter().peekable();
        std::iter::from_fn(move || {
            let ((h, _), n) = it.next()?;
            let mut total = *n;
            while let Some(((h2, _), n2)) = it.peek() {
                if h2 != h {
                    break;
                }
                total += **n2;
                it.next();
            }
            Some((*h, total))
        })
    }

    /// The entries on `host`: those of the tenants there ([`Placed::tenants_on`]),
    /// not a scan of every entry.
    pub fn on_host(&self, host: u32) -> impl Iterator<Item = (&K, &V)> {
        self.tenants_on(host)
            .flat_map(move |t| self.of_tenant(t).filter(move |(_, v)| v.host() == host))
    }

    /// `tenant`'s entries, in key order (a range, not a scan).
    pub fn of_tenant<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = (&'a K, &'a V)> {
        self.map
            .range(K::start(tenant)..)
            .take_while(move |(k, _)| k.tenant() == tenant)
    }

    /// Debug builds and tests: the per-host index is the one the entries
    /// give, recomputed from scratch.
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn check(&self) {
        self.map.check();
        self.by_host.check();
        let mut want: BTreeMap<(u32, String), u32> = BTreeMap::new();
        for (k, v) in self.map.iter() {
            *want.entry((v.host(), k.tenant().to_string())).or_default() += 1;
        }
        let got: BTreeMap<(u32, String), u32> =
            self.by_host.iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(got, want, "the hosts' tenants index");
    }
}

impl<K: Ord + Clone + TenantKeyed, V: Clone + OnHost> FromIterator<(K, V)> for Placed<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Placed::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

impl<K: Ord + Clone + PartialEq, V: Clone + PartialEq> PartialEq for Placed<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: Ord + Clone + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for Placed<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.map.fmt(f)
    }
}

impl<'a, K: Ord + Clone, V: Clone> IntoIterator for &'a Placed<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Box<dyn DoubleEndedIterator<Item = (&'a K, &'a V)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.map.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift): the same sequence every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn a_shared_map_reads_as_a_btreemap_through_inserts_removals_and_retains() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut m: PMap<u32, u32> = PMap::new();
        let mut want: BTreeMap<u32, u32> = BTreeMap::new();
        let mut copies: Vec<(PMap<u32, u32>, BTreeMap<u32, u32>)> = Vec::new();
        for step in 0..20_000u32 {
            let k = rng.next(3_000) as u32;
            match rng.next(10) {
                0..=5 => assert_eq!(m.insert(k, step), want.insert(k, step)),
                6..=8 => assert_eq!(m.remove(&k), want.remove(&k)),
                _ => {
                    let cut = rng.next(3_000) as u32;
                    let mut seen = 0;
                    m.retain(|k, _| {
                        seen += 1;
                        *k % 7 != 0 || *k < cut
                    });
                    assert_eq!(seen, want.len(), "retain asks once per entry");
                    want.retain(|k, _| *k % 7 != 0 || *k < cut);
                }
            }
            if step % 1_000 == 0 {
                // A copy keeps what it saw while the original changes.
                copies.push((m.clone(), want.clone()));
            }
            if step % 97 == 0 {
                m.check();
                assert_eq!(m.len(), want.len());
                assert!(m.iter().eq(want.iter()));
                let (a, b) = (rng.next(3_000) as u32, rng.next(3_000) as u32);
                let (a, b) = (a.min(b), a.max(b));
                assert!(m.range(a..b).eq(want.range(a..b)), "range {a}..{b}");
                assert!(m.range(a..=b).eq(want.range(a..=b)), "range {a}..={b}");
                assert!(m.range(a..).eq(want.range(a..)), "range {a}..");
                assert_eq!(m.get(&a), want.get(&a));
                assert_eq!(m.contains_key(&b), want.contains_key(&b));
            }
        }
        for (copy, was) in &copies {
            copy.check();
            assert!(
                copy.iter().eq(was.iter()),
                "a copy changed with the original"
            );
        }
        // Emptied, it is empty (no empty chunk left behind).
        let keys: Vec<u32> = m.keys().copied().collect();
        for k in keys {
            m.remove(&k);
        }
        m.check();
        assert!(m.is_empty() && m.iter().next().is_none());
    }

    #[test]
    fn a_change_to_a_copy_copies_one_chunk_not_the_map() {
        let m: PMap<u32, u32> = (0..10_000).map(|k| (k, k)).collect();
        let mut c = m.clone();
        c.insert(5_000, 0);
        // Every chunk but the changed one is still shared with the original.
        let shared = m
            .chunks
            .iter()
            .zip(c.chunks.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, m.chunks.len() - 1);
        assert_eq!((m[&5_000], c[&5_000]), (5_000, 0));
        // A held copy tells whether the map changed since.
        let mut d = c.clone();
        assert!(d.same(&c) && !c.same(&m));
        d.insert(1, 1);
        assert!(!d.same(&c));
        let held = d.clone();
        d.remove(&1);
        assert!(!d.same(&held) && held[&1] == 1);
    }

    fn vm(tenant: &str, name: &str, host: u32) -> ((String, String), super::super::Vm) {
        (
            (tenant.to_string(), name.to_string()),
            super::super::Vm {
                reg: sluice_proto::VmRegistration {
                    tenant: tenant.into(),
                    name: name.into(),
                    host,
                    iface: format!("v-{name}"),
                    mac: "02:00:00:00:00:01".into(),
                    addr: "10.0.0.1".parse().unwrap(),
                    gateway: false,
                },
                port: 1,
            },
        )
    }

    #[test]
    fn the_hosts_index_follows_inserts_moves_and_removals() {
        let mut p: Placed<(String, String), super::super::Vm> = Placed::new();
        let (k, v) = vm("a", "x", 1);
        p.insert(k, v);
        let (k, v) = vm("a", "y", 1);
        p.insert(k, v);
        let (k, v) = vm("b", "x", 2);
        p.insert(k, v);
        p.check();
        assert_eq!(p.tenants_on(1).collect::<Vec<_>>(), ["a"]);
        assert_eq!(p.per_host().collect::<Vec<_>>(), [(1, 2), (2, 1)]);
        // A VM moving to another host moves in the index.
        let (k, v) = vm("a", "y", 2);
        p.insert(k, v);
        p.check();
        assert_eq!(p.tenants_on(2).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            p.on_host(2).map(|(k, _)| k.1.as_str()).collect::<Vec<_>>(),
            ["y", "x"]
        );
        p.remove(&("a".to_string(), "x".to_string()));
        p.check();
        assert_eq!(p.tenants_on(1).count(), 0);
        p.retain(|k, _| k.0 != "b");
        p.check();
        assert_eq!(p.per_host().collect::<Vec<_>>(), [(2, 1)]);
        assert_eq!(p.of_tenant("a").count(), 1);
    }
}
