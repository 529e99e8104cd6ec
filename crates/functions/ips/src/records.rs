//! The store records a batch's replay reads and writes (`xbits`, datasets,
//! thresholds): the batch's distinct keys interned to slots, read in one
//! round trip, changed in memory while the log is replayed, and the changes
//! sent in one more. Buffers are reused across batches.

use rustc_hash::FxHashMap;
use sluice_state::{Codec, Key, OpId, Ops, StateStore, StoreError};

/// A batch's records of one kind `T`.
pub(crate) struct Records<T> {
    index: FxHashMap<Key, u32>,
    keys: Vec<Key>,
    /// Per slot: the record as replayed so far (none: absent or damaged).
    vals: Vec<Option<T>>,
    /// Per slot: [`Records::set`] changed it.
    changed: Vec<bool>,
    ids: Vec<OpId>,
    /// The operations of the write round trip ([`Records::ops`]).
    ops: Ops,
}

impl<T> Default for Records<T> {
    fn default() -> Self {
        Records {
            index: FxHashMap::default(),
            keys: Vec::new(),
            vals: Vec::new(),
            changed: Vec::new(),
            ids: Vec::new(),
            ops: Ops::default(),
        }
    }
}

impl<T: Codec> Records<T> {
    /// Forgets the batch's keys.
    pub fn clear(&mut self) {
        self.index.clear();
        self.keys.clear();
        self.vals.clear();
        self.changed.clear();
    }

    /// The slot of `key` (a new one the first time).
    pub fn slot(&mut self, key: Key) -> u32 {
        *self.index.entry(key).or_insert_with(|| {
            self.keys.push(key);
            self.vals.push(None);
            self.changed.push(false);
            self.keys.len() as u32 - 1
        })
    }

    /// Reads every slot's record in one round trip; a damaged record reads
    /// as none.
    pub fn read(&mut self, store: &mut dyn StateStore) -> Result<(), StoreError> {
        self.ops.clear();
        self.ids.clear();
        for k in &self.keys {
            self.ids.push(self.ops.get(*k));
        }
        store.execute(&mut self.ops)?;
        for (v, id) in self.vals.iter_mut().zip(&self.ids) {
            *v = self.ops.decode::<T>(*id).ok().flatten();
        }
        Ok(())
    }

    /// Slot `k`'s record.
    #[inline]
    pub fn get(&self, k: u32) -> Option<&T> {
        self.vals[k as usize].as_ref()
    }

    /// Slot `k`'s record, to change in place (not marked changed).
    #[inline]
    pub fn get_mut(&mut self, k: u32) -> &mut Option<T> {
        &mut self.vals[k as usize]
    }

    /// Sets slot `k`'s record and marks it changed.
    pub fn set(&mut self, k: u32, v: Option<T>) {
        self.vals[k as usize] = v;
        self.changed[k as usize] = true;
    }

    /// Sends the writes `fill` puts in the operations, given each slot
    /// (its number, key, record and whether [`Records::set`] changed it),
    /// if any, in one round trip.
    pub fn write(
        &mut self,
        store: &mut dyn StateStore,
        mut fill: impl FnMut(&mut Ops, u32, Key, Option<&T>, bool),
    ) -> Result<(), StoreError> {
        self.ops.clear();
        let slots = self.keys.iter().zip(&self.vals).zip(&self.changed);
        for (i, ((k, v), c)) in slots.enumerate() {
            fill(&mut self.ops, i as u32, *k, v.as_ref(), *c);
        }
        if !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
        }
        Ok(())
    }
}
