//! Driving a chain in pipelined mode (docs/STATE.md, "Pipelining").
//!
//! Without pipelining, a batch that opens a connection waits for two round trips
//! to the store before its packets leave: the read that finds nothing, and the
//! write-through of the new record. With a store on another machine (or a busy
//! one) that wait, not the work, bounds throughput. [`Pipeline`] keeps the chain
//! busy instead:
//!
//! 1. Batches are gathered into windows. When window `n + 1` is full, the
//!    records its packets will read are requested ([`Chain::prefetch`]) without
//!    waiting, then window `n`, whose records arrived meanwhile, is processed:
//!    its reads hit the cache.
//! 2. Writes nobody needs an answer to (new records, timers) are held by the
//!    cache and sent once per window, in the same write as the next window's
//!    prefetch, without waiting.
//! 3. A processed window is *held* until the store has answered those writes
//!    ([`Chain::settled`]), which the prefetch after that reads anyway: a change
//!    that matters is durable before its packets leave, exactly as without
//!    pipelining, but no batch waits for its own round trip.
//!
//! Batches leave in the order they came in. The price is latency: a batch waits
//! for its window to fill and for about two windows of work after that. An idle
//! caller calls [`Pipeline::flush`], which processes what is gathered and waits
//! for the store.
//!
//! If a write sent without waiting fails, the batches held on it are released
//! with every packet still live dropped (fail closed, reason `store_lost`),
//! never sent: what reached the store is unknown.

use std::collections::VecDeque;

use sluice_packet::Batch;
use sluice_state::StateStore;

use crate::{Chain, HELD_STAGE};

/// Batches in flight through a pipelined chain. `T` is whatever the caller keeps
/// with each batch (an arrival time, a port): it comes back with the batch.
pub struct Pipeline<T> {
    window: usize,
    /// The window being gathered.
    next: Vec<Batch>,
    next_tags: Vec<T>,
    /// The window whose records are being fetched.
    ready: Vec<Batch>,
    ready_tags: Vec<T>,
    /// Processed batches whose held operations go out with the next prefetch.
    unsent: Vec<(Batch, T)>,
    /// Processed batches and the settlement each waits for.
    held: VecDeque<(Batch, T, u64)>,
    /// Batches free to leave.
    out: VecDeque<(Batch, T)>,
    /// Batches dropped because their held writes failed.
    lost: u64,
    /// Windows left to process without reading ahead, and the current length
    /// of such a run.
    skip: usize,
    backoff: usize,
}

/// At most this many windows in a row are not read ahead after one that found
/// nothing to read.
const MAX_SKIP: usize = 8;

impl<T> Pipeline<T> {
    /// A pipeline that prefetches and sends held writes once per `window`
    /// batches (at least 1). Turns the chain's pipelined mode on.
    pub fn new(chain: &mut Chain, store: &mut dyn StateStore, window: usize) -> Pipeline<T> {
        chain.set_pipelined(true, store);
        let window = window.max(1);
        Pipeline {
            window,
            next: Vec::with_capacity(window),
            next_tags: Vec::with_capacity(window),
            ready: Vec::with_capacity(window),
            ready_tags: Vec::with_capacity(window),
            unsent: Vec::with_capacity(window),
            held: VecDeque::new(),
            out: VecDeque::new(),
            lost: 0,
            skip: 0,
            backoff: 0,
        }
    }

    /// Batches per window.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Batches accepted but not yet free to leave.
    pub fn in_flight(&self) -> usize {
        self.next.len() + self.ready.len() + self.unsent.len() + self.held.len()
    }

    /// Batches whose packets were dropped because held writes failed.
    pub fn lost_batches(&self) -> u64 {
        self.lost
    }

    /// Accepts a batch. Processing happens a window later; collect finished
    /// batches with [`Pipeline::pop`].
    pub fn push(&mut self, chain: &mut Chain, store: &mut dyn StateStore, batch: Batch, tag: T) {
        self.next.push(batch);
        self.next_tags.push(tag);
        if self.next.len() >= self.window {
            self.step(chain, store);
            // Once per window, not per batch: each look is a system call.
            self.release(chain, store);
        }
    }

    /// The oldest batch that may leave, with its tag.
    pub fn pop(&mut self) -> Option<(Batch, T)> {
        self.out.pop_front()
    }

    /// Processes everything accepted so far and waits until the store has
    /// settled it, deferred writes included, so every batch can be popped
    /// (call at the end, and before giving up a lease).
    pub fn flush(&mut self, chain: &mut Chain, store: &mut dyn StateStore) {
        self.finish(chain, store, true);
    }

    /// Like [`Pipeline::flush`], but deferred writes that are not due stay
    /// deferred: for input that went idle, where each pause would otherwise
    /// write (and wait for) the refreshes of every established flow.
    pub fn drain(&mut self, chain: &mut Chain, store: &mut dyn StateStore) {
        self.finish(chain, store, false);
    }

    fn finish(&mut self, chain: &mut Chain, store: &mut dyn StateStore, deferred_too: bool) {
        self.step(chain, store);
        self.step(chain, store);
        // Sends what the last window held and waits for it.
        let r = if deferred_too {
            chain.wait_settled(store)
        } else {
            chain.wait_sent(store)
        };
        match r {
            Ok(_) => {
                self.release_to(u64::MAX);
                for (b, t) in self.unsent.drain(..) {
                    self.out.push_back((b, t));
                }
            }
            Err(_) => {
                for (b, t) in self.unsent.drain(..) {
                    self.held.push_back((b, t, u64::MAX));
                }
                self.fail_held();
            }
        }
    }

    /// Prefetches the gathered window (sending, in the same write, what the
    /// previous window's processing held) and processes the window whose
    /// records were prefetched last time.
    fn step(&mut self, chain: &mut Chain, store: &mut dyn StateStore) {
        // Finishes the previous prefetch (its results fill the cache), then
        // starts this one with the held operations ahead of its reads.
        let read_ahead = self.skip == 0;
        let before = chain.cache_stats().map_or(0, |c| c.prefetched);
        let r = chain.prefetch(&mut self.next, store, read_ahead);
        if read_ahead {
            // Nothing to read ahead (long flows, all cached): listing the reads
            // costs a third of the processing, so skip the next windows, twice as
            // many each time, up to `MAX_SKIP`; their misses read through.
            let found = chain.cache_stats().map_or(0, |c| c.prefetched) > before;
            self.backoff = if found {
                0
            } else {
                (self.backoff * 2).clamp(1, MAX_SKIP)
            };
            self.skip = self.backoff;
        } else {
            self.skip -= 1;
        }
        match r {
            Ok(mark) => {
                for (b, t) in self.unsent.drain(..) {
                    self.held.push_back((b, t, mark));
                }
            }
            Err(_) => {
                for (b, t) in self.unsent.drain(..) {
                    self.held.push_back((b, t, u64::MAX));
                }
                self.fail_held();
            }
        }
        for b in self.ready.iter_mut() {
            chain.process_prefetched(b, store);
        }
        self.unsent
            .extend(self.ready.drain(..).zip(self.ready_tags.drain(..)));
        std::mem::swap(&mut self.ready, &mut self.next);
        std::mem::swap(&mut self.ready_tags, &mut self.next_tags);
    }

    /// Frees every held batch the store has settled.
    fn release(&mut self, chain: &mut Chain, store: &mut dyn StateStore) {
        if self.held.is_empty() {
            return;
        }
        match chain.settled(store) {
            Ok(s) => self.release_to(s),
            Err(_) => self.fail_held(),
        }
    }

    fn release_to(&mut self, settled: u64) {
        while self.held.front().is_some_and(|h| h.2 <= settled) {
            let (b, t, _) = self.held.pop_front().expect("checked");
            self.out.push_back((b, t));
        }
    }

    /// Held writes failed: no held batch may be sent.
    fn fail_held(&mut self) {
        for (mut b, t, _) in self.held.drain(..) {
            for p in b.pkts.iter_mut() {
                p.drop_by(HELD_STAGE, "store_lost");
            }
            self.lost += 1;
            self.out.push_back((b, t));
        }
    }
}
