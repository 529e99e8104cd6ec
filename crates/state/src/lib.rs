//! The state-access API of Sluice's network functions.
//!
//! Every function reads and writes its dynamic (per-flow and shared) state only
//! through a [`StateStore`], so that the same function code runs with state in the
//! process ([`LocalStore`]) or in a remote store shared by all instances (the Redis
//! backend), which is what lets any packet go to any instance (StatelessNF §4.1).
//!
//! The API is shaped for a remote store from day one:
//!
//! * **Batched.** A function gathers the operations of a whole packet batch into one
//!   [`Ops`] buffer and calls [`StateStore::execute`] once: for a remote backend that
//!   is one pipelined round trip (StatelessNF §4.4.3's batching). Operations apply in
//!   order, each atomically; a batch as a whole is not a transaction.
//! * **Typed over bytes.** Keys are small fixed-capacity byte strings ([`Key`])
//!   built from a namespace, a table and the flow; values are bytes written and read
//!   through [`Codec`]s straight into and out of the [`Ops`] arenas, which are reused
//!   across batches, so no operation allocates in steady state.
//! * **Atomic shared state.** Compare-and-set, counters and allocation pools (NAT
//!   ports) execute on the store's side, never as racy read-modify-write.
//! * **Timers in the store.** A timer is armed on a key with a deadline; expired
//!   timers are *taken* (removed and returned in one atomic step) so each fires on
//!   exactly one instance, even if the instance that armed it has died (§4.3.1).

mod cache;
mod codec;
mod key;
mod local;
mod ops;
pub mod testing;

pub use cache::{hash_range_split, CacheConfig, CacheStats, CachedStore, FlowCache, Ownership};
pub use codec::{Codec, DecodeError, Reader, Writer};
pub use key::{Key, Namespace, KEY_CAP};
pub use local::{LocalStore, SharedLocalStore};
pub use ops::{Hint, Op, OpId, OpResult, Ops, Span};

/// Why a store operation failed. Functions treat every error as "state unknown" and
/// fail closed for that batch (drop what needs state), never panic.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The store could not be reached (connection refused or lost).
    #[error("state store unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer in time.
    #[error("state store timed out after {0} ms")]
    Timeout(u64),
    /// The store answered something this client does not understand.
    #[error("state store protocol error: {0}")]
    Protocol(String),
    /// An operation was refused (wrong type, out-of-range argument...).
    #[error("state store refused operation: {0}")]
    Refused(String),
}

/// Counters every backend keeps, for "store operations per packet" measurements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Calls to [`StateStore::execute`] or [`StateStore::take_expired`] that carried work
    /// (for a remote store, round trips).
    pub round_trips: u64,
    /// Read operations (get).
    pub reads: u64,
    /// Write operations (put, delete).
    pub writes: u64,
    /// Atomic operations (compare-and-set, counters, pools).
    pub atomics: u64,
    /// Timer operations (arm, cancel, take).
    pub timers: u64,
    /// Batches whose writes waited for replicas (replicated stores).
    pub replica_waits: u64,
    /// Of those, batches that fewer replicas acknowledged than asked for
    /// within the wait and the second, longer wait: their writes could be
    /// lost to a failover.
    pub replica_shortfalls: u64,
    /// Of those, batches whose first wait fell short but whose second,
    /// longer wait was acknowledged in full: a lagging, not a lost, replica.
    pub replica_rewaits: u64,
}

impl StoreCounters {
    /// Sum of reads, writes, atomics and timer operations.
    pub fn total_ops(&self) -> u64 {
        self.reads + self.writes + self.atomics + self.timers
    }

    /// Field-wise difference `self - earlier`.
    pub fn since(&self, earlier: &StoreCounters) -> StoreCounters {
        StoreCounters {
            round_trips: self.round_trips - earlier.round_trips,
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            atomics: self.atomics - earlier.atomics,
            timers: self.timers - earlier.timers,
            replica_waits: self.replica_waits - earlier.replica_waits,
            replica_shortfalls: self.replica_shortfalls - earlier.replica_shortfalls,
            replica_rewaits: self.replica_rewaits - earlier.replica_rewaits,
        }
    }
}

/// A store of function state. See the crate documentation for the model.
pub trait StateStore {
    /// Executes every operation in `ops`, in order, filling their results.
    ///
    /// Operations on one key are applied in their order. Whether operations on
    /// different keys are too, so that another instance never sees a later
    /// one applied before an earlier one, is
    /// [`StateStore::orders_across_keys`].
    ///
    /// On error, no result may be relied on; operations before the failure may or
    /// may not have been applied (as with a lost connection to a remote store).
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError>;

    /// Whether one [`StateStore::execute`] applies its operations in order
    /// across keys: true for one server (one pipeline) or an in-process store.
    /// A cluster applies each node's share of a batch in order, but its nodes
    /// independently, so a reader may find a later write before an earlier one
    /// to another node; a caller whose record names other keys (written
    /// first) then writes those in a call of their own. Default: false, the
    /// safe answer for a wrapper that does not say.
    fn orders_across_keys(&self) -> bool {
        false
    }

    /// Atomically removes up to `max` timers of namespace `ns` whose deadline is at or
    /// before `now_ns`, appending their keys to `out`. A timer is returned to exactly
    /// one caller across every instance sharing the store.
    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError>;

    /// Operation counters since the store was created.
    fn counters(&self) -> StoreCounters;

    /// Sends `ops` without waiting for their replies: for writes whose loss breaks
    /// nothing (the flow cache's deferred writes). A remote backend writes them on
    /// its connection and reads their replies with the next call that waits anyway
    /// (replies come back in order), so a later operation on the same key is
    /// applied after them. Results in `ops` are not filled. Backends that cannot
    /// send without waiting execute them (the default).
    ///
    /// A write sent this way that later fails (an error reply, or the connection
    /// lost before its reply was read) is counted by
    /// [`StateStore::take_unacked_failures`]; an `Err` here means the send itself
    /// failed.
    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        self.execute(ops)
    }

    /// Waits until every write sent with [`StateStore::execute_unacked`] has been
    /// acknowledged (a barrier before giving up a lease). Default: nothing is ever
    /// outstanding.
    fn sync(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Returns, and resets, how many writes sent with
    /// [`StateStore::execute_unacked`] are known to have failed or may not have
    /// been applied. Default: none ever fail.
    fn take_unacked_failures(&mut self) -> u64 {
        0
    }

    /// Sends `ops` without waiting for their replies; [`StateStore::finish`] waits
    /// for them and fills the results. This lets a caller overlap a round trip
    /// with other work (the flow cache's prefetch for the next batches of a
    /// pipeline, docs/STATE.md "Pipelining"). At most one call is started at a
    /// time, and it must be finished before any other call that waits
    /// (`execute`, `take_expired`, `sync`); [`StateStore::execute_unacked`] may
    /// be called in between. Default: executes at once (`finish` then has
    /// nothing left to do), which is what a local store wants.
    fn start(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        self.execute(ops)
    }

    /// Waits for the replies of the call begun with [`StateStore::start`] and
    /// fills `ops` (the same buffer). Default: nothing to do.
    fn finish(&mut self, _ops: &mut Ops) -> Result<(), StoreError> {
        Ok(())
    }

    /// Reads whatever replies to [`StateStore::execute_unacked`] writes have
    /// already arrived, without waiting, and returns `(sent, settled)`: commands
    /// sent without waiting so far (by `execute_unacked` and
    /// [`StateStore::start`]), and how many of them are settled (answered, or
    /// counted by [`StateStore::take_unacked_failures`], or failed in a
    /// `finish`). The guarantee callers build on: every command that was counted
    /// in `sent` when it was `s` is settled once `settled >= s`. Default:
    /// `(0, 0)`, for stores that never leave anything unanswered.
    fn poll_unacked(&mut self) -> Result<(u64, u64), StoreError> {
        Ok((0, 0))
    }

    /// A short description for logs and summaries (e.g. `local`, `redis://127.0.0.1:6379`).
    fn describe(&self) -> String;
}

impl<S: StateStore + ?Sized> StateStore for Box<S> {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        (**self).execute(ops)
    }
    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        (**self).take_expired(ns, now_ns, max, out)
    }
    fn counters(&self) -> StoreCounters {
        (**self).counters()
    }
    fn orders_across_keys(&self) -> bool {
        (**self).orders_across_keys()
    }
    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        (**self).execute_unacked(ops)
    }
    fn sync(&mut self) -> Result<(), StoreError> {
        (**self).sync()
    }
    fn take_unacked_failures(&mut self) -> u64 {
        (**self).take_unacked_failures()
    }
    fn start(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        (**self).start(ops)
    }
    fn finish(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        (**self).finish(ops)
    }
    fn poll_unacked(&mut self) -> Result<(u64, u64), StoreError> {
        (**self).poll_unacked()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
