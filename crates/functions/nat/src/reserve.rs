//! Pool items taken ahead (`Config::port_reserve`): blocks handed out item by
//! item, recorded in the store so a timer frees what a dead instance left unused.

use sluice_nf::NfError;
use sluice_state::{Key, Ops, StateStore};

use crate::{Nat, RESERVE_TTL_NS, TABLE_RESV, TABLE_RESV_USED};

/// Pool items taken ahead in one [`Ops::pool_take`] (see `Config::port_reserve`).
pub(crate) struct Block {
    /// The block's record (`TABLE_RESV`, keyed by its first item).
    pub(crate) key: Key,
    /// The block's items, in the order they are handed out.
    pub(crate) items: Vec<u32>,
    /// Items handed out, in order.
    pub(crate) used: usize,
    /// `used` as last written to the store.
    pub(crate) marked: usize,
    /// When the block was taken.
    pub(crate) at: u64,
}

impl Nat {
    /// Frees the unused items of the blocks whose timers were taken (their
    /// owner died, or kept them past half their life, after which it never
    /// uses them) and removes those keys from `self.keys`. A block's record
    /// still present means its owner did not retire it; the items past its
    /// used count were never handed out (the count is written before the
    /// mappings that hold the items).
    pub(crate) fn free_unused_reservations(
        &mut self,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        if !self.keys.iter().any(|k| k.table() == TABLE_RESV) {
            return Ok(());
        }
        self.pass.ops.clear();
        self.ids.clear();
        for k in self.keys.iter().filter(|k| k.table() == TABLE_RESV) {
            self.ids.push(Some(self.pass.ops.get(*k)));
            self.ids.push(Some(self.pass.ops.get(used_key(k))));
        }
        store.execute(&mut self.pass.ops)?;
        self.ops2.clear();
        let resv = self.keys.iter().filter(|k| k.table() == TABLE_RESV);
        for (k, g) in resv.zip(self.ids.chunks_exact(2)) {
            let (Some(block), Some(used)) = (g[0], g[1]) else {
                continue;
            };
            let Some(items) = self.pass.ops.value(block) else {
                continue;
            };
            let used = self
                .pass
                .ops
                .value(used)
                .and_then(|v| v.try_into().ok())
                .map_or(0, |v| u32::from_be_bytes(v) as usize);
            for item in items.chunks_exact(4).skip(used) {
                let item = u32::from_be_bytes(item.try_into().expect("chunks of 4"));
                self.ops2.pool_free(self.pool_key, item as u64);
                self.c.reservations_expired += 1;
            }
            self.ops2.delete(*k);
            self.ops2.delete(used_key(k));
        }
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
        }
        self.keys.retain(|k| k.table() != TABLE_RESV);
        Ok(())
    }

    /// Returns a block's unused items to the pool and forgets it.
    pub(crate) fn retire(ops: &mut Ops, pool_key: Key, b: &Block) {
        for &item in &b.items[b.used..] {
            ops.pool_free(pool_key, item as u64);
        }
        ops.delete(b.key);
        ops.delete(used_key(&b.key));
        ops.cancel_timer(b.key);
    }

    /// The next reserved item young enough to be surely ours (its block's
    /// timer frees what is unused after `RESERVE_TTL_NS`), retiring blocks used
    /// up or too old on the way.
    pub(crate) fn take_reserved(&mut self, now: u64, ops: &mut Ops) -> Option<u32> {
        while let Some(b) = self.reserve.front_mut() {
            if b.used < b.items.len() && now < b.at.saturating_add(RESERVE_TTL_NS / 2) {
                let item = b.items[b.used];
                b.used += 1;
                return Some(item);
            }
            let b = self.reserve.pop_front().expect("front exists");
            Self::retire(ops, self.pool_key, &b);
        }
        None
    }

    /// Writes the used count of every block that handed out items since it was
    /// last written: before the mappings that hold them, so a timer never
    /// frees an item a mapping holds.
    pub(crate) fn mark_used(&mut self, ops: &mut Ops) {
        for b in self.reserve.iter_mut().filter(|b| b.used != b.marked) {
            ops.put(used_key(&b.key), &(b.used as u32).to_be_bytes());
            b.marked = b.used;
        }
    }
}

/// The used-count record of the block recorded under `block`.
pub(crate) fn used_key(block: &Key) -> Key {
    Key::new(block.namespace(), TABLE_RESV_USED, block.payload())
}
