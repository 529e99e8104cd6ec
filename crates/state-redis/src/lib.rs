//! The Redis/Valkey backend of the state API.
//!
//! One [`sluice_state::StateStore::execute`] is one pipelined round trip: every
//! operation of the batch is encoded into one buffer, written with one `write`, and
//! the replies read back into one reused buffer (StatelessNF §4.4.3's batching and
//! pre-allocated buffers). Operations that must be atomic on shared state —
//! compare-and-set, allocation pools, taking expired timers — run as server-side
//! Lua scripts, loaded once per connection and invoked by SHA1.
//!
//! Key layout (all binary-safe): a state key `k` is stored as
//! `{XXXXXXXX}k`, where `XXXXXXXX` is the hex FNV-1a of `k`: the braces make it a
//! Redis Cluster hash tag, so a pool's auxiliary keys (`{tag}k:f`, `{tag}k:s`) and the
//! key itself always share a slot, while different flows spread over the cluster.
//! Timers of namespace `n` are the sorted set `{tNNNNNNNN}:timers`, scored by deadline
//! in microseconds (exact in a double until the year 2255).
//!
//! Errors never panic: a lost connection, a timeout or an unexpected reply is a
//! [`StoreError`]; the connection is dropped (its pipeline state is unknown) and the
//! next batch reconnects.

mod cluster;
mod node;
pub mod resp;
mod scripts;
pub mod server;

pub use cluster::{slot_of, ClusterStore};
use node::Node;

use std::time::Duration;

use sluice_state::{Key, Namespace, Op, Ops, StateStore, StoreCounters, StoreError};

/// How long a store polls for a reply before it sleeps, by default: longer than
/// a loopback round trip takes on the machines measured (docs/BENCHMARKS.md).
pub const DEFAULT_POLL: Duration = Duration::from_micros(50);

/// Connection settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port`.
    pub addr: String,
    /// Connect, read and write timeout.
    pub timeout: Duration,
    /// How long to poll the connection for a reply that is needed before
    /// sleeping until it arrives (`?poll_us=N` in the URL; 0: sleep at once).
    /// A reply that arrives while the caller polls costs no wake-up on either
    /// side, which on a virtual machine is most of a loopback round trip; the
    /// price is the CPU spent polling, by a caller that has nothing else to do.
    pub poll: Duration,
}

impl Config {
    /// Parses `redis://HOST:PORT[?poll_us=N]` (the scheme is optional).
    pub fn from_url(url: &str) -> Result<Config, StoreError> {
        let (base, poll) = split_options(url)?;
        let addr = base
            .strip_prefix("redis://")
            .unwrap_or(base)
            .trim_end_matches('/');
        if addr.is_empty() || !addr.contains(':') {
            return Err(StoreError::Refused(format!(
                "`{url}`: expected redis://HOST:PORT[?poll_us=N]"
            )));
        }
        Ok(Config {
            addr: addr.to_string(),
            timeout: Duration::from_millis(1000),
            poll,
        })
    }
}

/// Splits a store URL into its base and the poll duration of its `?poll_us=N`
/// option ([`DEFAULT_POLL`] without it).
pub(crate) fn split_options(url: &str) -> Result<(&str, Duration), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url, DEFAULT_POLL));
    };
    let mut poll = DEFAULT_POLL;
    for opt in query.split('&').filter(|o| !o.is_empty()) {
        match opt.split_once('=') {
            Some(("poll_us", v)) => {
                let us = v.parse::<u64>().ok().filter(|&us| us <= 1_000_000);
                let us = us.ok_or_else(|| {
                    StoreError::Refused(format!(
                        "`{url}`: poll_us must be a number of microseconds up to 1000000, not `{v}`"
                    ))
                })?;
                poll = Duration::from_micros(us);
            }
            _ => {
                return Err(StoreError::Refused(format!(
                    "`{url}`: unknown option `{opt}` (known: poll_us=N)"
                )))
            }
        }
    }
    Ok((base, poll))
}

/// Appends the stored form of a state key (see the crate documentation).
pub fn redis_key(out: &mut Vec<u8>, k: &Key) {
    let mut h: u32 = 0x811c_9dc5;
    for &b in k.as_bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    out.push(b'{');
    push_hex(out, h);
    out.push(b'}');
    out.extend_from_slice(k.as_bytes());
}

fn push_hex(out: &mut Vec<u8>, v: u32) {
    for i in (0..8).rev() {
        out.push(b"0123456789abcdef"[((v >> (i * 4)) & 0xf) as usize]);
    }
}

/// The sorted set holding the timers of a namespace.
pub fn timer_set(out: &mut Vec<u8>, ns: Namespace) {
    out.extend_from_slice(b"{t");
    push_hex(out, ns.0);
    out.extend_from_slice(b"}:timers");
}

/// The stored key an operation is routed by (its hash tag decides the cluster slot).
pub fn routing_key(out: &mut Vec<u8>, op: &Op) {
    match op {
        Op::ArmTimer { key, .. } | Op::CancelTimer { key } => timer_set(out, key.namespace()),
        other => redis_key(out, other.key()),
    }
}

/// A single Redis/Valkey server.
pub struct RedisStore {
    node: Node,
    counters: StoreCounters,
    /// Operations of the started call (`start`), 0 if none.
    started: usize,
}

impl RedisStore {
    /// Connects (and loads the scripts). Fails if the server cannot be reached.
    pub fn connect(cfg: Config) -> Result<RedisStore, StoreError> {
        let mut node = Node::new(cfg.addr.clone(), cfg.timeout, cfg.poll);
        node.ensure_conn()?;
        Ok(RedisStore {
            node,
            counters: StoreCounters::default(),
            started: 0,
        })
    }

    /// Connects to `redis://HOST:PORT[?poll_us=N]`.
    pub fn open(url: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect(Config::from_url(url)?)
    }
}

impl RedisStore {
    /// Encodes every operation of `ops` into the node's pipeline buffer and
    /// counts them (one round trip).
    fn encode_all(&mut self, ops: &Ops) -> Result<(), StoreError> {
        self.node.ensure_conn()?;
        self.node.wbuf.clear();
        for i in 0..ops.len() {
            let op = ops.ops()[i];
            self.node.encode_op(ops, &op);
            count(&mut self.counters, &op);
        }
        self.counters.round_trips += 1;
        Ok(())
    }

    /// Applies the replies of `ops`, returning the first error after applying
    /// the rest.
    fn apply_all(&mut self, ops: &mut Ops, replies: &[resp::Reply]) -> Result<(), StoreError> {
        let mut first_err = None;
        for (i, r) in replies.iter().enumerate() {
            if let Err(e) = self.node.apply_reply(ops, i, r) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Counts an operation by kind.
pub(crate) fn count(c: &mut StoreCounters, op: &Op) {
    match op {
        Op::Get { .. } => c.reads += 1,
        Op::Put { .. } | Op::Delete { .. } => c.writes += 1,
        Op::ArmTimer { .. } | Op::CancelTimer { .. } => c.timers += 1,
        _ => c.atomics += 1,
    }
}

impl StateStore for RedisStore {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.node.check_no_started()?;
        self.encode_all(ops)?;
        self.node.send()?;
        let replies = self.node.receive(ops.len())?;
        self.apply_all(ops, &replies)
    }

    /// One `write` of the pipeline; [`StateStore::finish`] reads the replies.
    /// Counted as a round trip.
    fn start(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        self.node.check_no_started()?;
        self.started = ops.len();
        if ops.is_empty() {
            return Ok(());
        }
        self.encode_all(ops)?;
        self.node.start(ops.len())
    }

    fn finish(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if std::mem::take(&mut self.started) == 0 {
            return Ok(());
        }
        let replies = self.node.finish()?;
        if replies.len() != ops.len() {
            return Err(StoreError::Protocol(format!(
                "finish: {} replies for {} operations (not the started buffer?)",
                replies.len(),
                ops.len()
            )));
        }
        self.apply_all(ops, &replies)
    }

    fn poll_unacked(&mut self) -> Result<(u64, u64), StoreError> {
        self.node.drain_ready()?;
        let sent = self.node.sent_total;
        Ok((sent, sent - self.node.outstanding() as u64))
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        self.counters.round_trips += 1;
        let before = out.len();
        self.node.take_expired(ns, now_ns, max, out)?;
        self.counters.timers += (out.len() - before) as u64;
        Ok(())
    }

    /// One `write` of the pipeline; the replies are read (and failures counted)
    /// by the next call that waits, or without waiting when already there.
    /// Counts the operations but no round trip.
    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.node.ensure_conn()?;
        self.node.wbuf.clear();
        // Runs of puts become one MSET, runs of deletes one DEL (the cache's
        // deferred writes are exactly that): less work for the server.
        let (mut i, mut commands) = (0, 0);
        while i < ops.len() {
            let op = ops.ops()[i];
            count(&mut self.counters, &op);
            let kind = std::mem::discriminant(&op);
            let mut j = i + 1;
            if matches!(op, Op::Put { .. } | Op::Delete { .. }) {
                while j < ops.len() && std::mem::discriminant(&ops.ops()[j]) == kind {
                    count(&mut self.counters, &ops.ops()[j]);
                    j += 1;
                }
            }
            if j - i > 1 {
                self.node.encode_multi(ops, i, j);
            } else {
                self.node.encode_op(ops, &op);
            }
            commands += 1;
            i = j;
        }
        self.node.send_unacked(commands)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.node.sync()
    }

    /// Counts failed commands: a failed `MSET` of several deferred writes counts
    /// once (callers only need to know that something may be missing).
    fn take_unacked_failures(&mut self) -> u64 {
        std::mem::take(&mut self.node.unacked_failures)
    }

    fn counters(&self) -> StoreCounters {
        self.counters
    }

    fn describe(&self) -> String {
        format!("redis://{}", self.node.addr)
    }
}

pub(crate) fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Get { .. } => "GET",
        Op::Put { .. } => "SET",
        Op::Delete { .. } => "DEL",
        Op::CompareAndSet { .. } => "compare_and_set",
        Op::Incr { .. } => "INCRBY",
        Op::PoolInit { .. } => "pool_init",
        Op::PoolAlloc { .. } => "pool_alloc",
        Op::PoolTake { .. } => "pool_take",
        Op::PoolFree { .. } => "pool_free",
        Op::ArmTimer { .. } => "ZADD",
        Op::CancelTimer { .. } => "ZREM",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_carry_the_poll_budget_and_refuse_what_they_do_not_know() {
        let c = Config::from_url("redis://127.0.0.1:6379").unwrap();
        assert_eq!((c.addr.as_str(), c.poll), ("127.0.0.1:6379", DEFAULT_POLL));
        let c = Config::from_url("redis://127.0.0.1:6379/?poll_us=0").unwrap();
        assert_eq!(
            (c.addr.as_str(), c.poll),
            ("127.0.0.1:6379", Duration::ZERO)
        );
        let c = Config::from_url("10.0.0.1:7000?poll_us=200").unwrap();
        assert_eq!(c.poll, Duration::from_micros(200));
        for (bad, says) in [
            ("redis://h:1?poll_us=soon", "not `soon`"),
            ("redis://h:1?poll_us=5000000", "up to 1000000"),
            ("redis://h:1?timeout=3", "unknown option `timeout=3`"),
            ("redis://nohost", "expected redis://HOST:PORT"),
        ] {
            let e = Config::from_url(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
        let e = ClusterStore::open("redis-cluster://h:1?poll=1")
            .err()
            .unwrap();
        assert!(e.to_string().contains("unknown option `poll=1`"), "{e}");
    }
}
