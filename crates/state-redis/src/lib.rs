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

pub mod resp;
mod scripts;
pub mod server;

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use resp::Reply;
use sluice_state::{Key, Namespace, Op, OpResult, Ops, StateStore, StoreCounters, StoreError};

/// Connection settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port`.
    pub addr: String,
    /// Connect, read and write timeout.
    pub timeout: Duration,
}

impl Config {
    /// Parses `redis://HOST:PORT` (the scheme is optional).
    pub fn from_url(url: &str) -> Result<Config, StoreError> {
        let addr = url
            .strip_prefix("redis://")
            .unwrap_or(url)
            .trim_end_matches('/');
        if addr.is_empty() || !addr.contains(':') {
            return Err(StoreError::Refused(format!(
                "`{url}`: expected redis://HOST:PORT"
            )));
        }
        Ok(Config {
            addr: addr.to_string(),
            timeout: Duration::from_millis(1000),
        })
    }
}

struct Conn {
    stream: TcpStream,
    shas: Vec<Vec<u8>>,
}

/// A state store in one Redis or Valkey server.
pub struct RedisStore {
    cfg: Config,
    conn: Option<Conn>,
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    key_buf: Vec<u8>,
    key_buf2: Vec<u8>,
    key_buf3: Vec<u8>,
    counters: StoreCounters,
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

fn io_err(e: std::io::Error, timeout: Duration) -> StoreError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            StoreError::Timeout(timeout.as_millis() as u64)
        }
        _ => StoreError::Unavailable(e.to_string()),
    }
}

impl RedisStore {
    /// Connects (and loads the scripts). Fails if the server cannot be reached.
    pub fn connect(cfg: Config) -> Result<RedisStore, StoreError> {
        let mut s = RedisStore {
            cfg,
            conn: None,
            wbuf: Vec::with_capacity(64 * 1024),
            rbuf: Vec::with_capacity(64 * 1024),
            key_buf: Vec::with_capacity(256),
            key_buf2: Vec::with_capacity(256),
            key_buf3: Vec::with_capacity(256),
            counters: StoreCounters::default(),
        };
        s.ensure_conn()?;
        Ok(s)
    }

    /// Connects to `redis://HOST:PORT`.
    pub fn open(url: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect(Config::from_url(url)?)
    }

    fn ensure_conn(&mut self) -> Result<(), StoreError> {
        if self.conn.is_some() {
            return Ok(());
        }
        let t = self.cfg.timeout;
        let addr = self
            .cfg
            .addr
            .to_socket_addrs()
            .map_err(|e| StoreError::Unavailable(format!("{}: {e}", self.cfg.addr)))?
            .next()
            .ok_or_else(|| StoreError::Unavailable(format!("{}: no address", self.cfg.addr)))?;
        let stream = TcpStream::connect_timeout(&addr, t)
            .map_err(|e| StoreError::Unavailable(format!("{}: {e}", self.cfg.addr)))?;
        stream.set_nodelay(true).map_err(|e| io_err(e, t))?;
        stream.set_read_timeout(Some(t)).map_err(|e| io_err(e, t))?;
        stream
            .set_write_timeout(Some(t))
            .map_err(|e| io_err(e, t))?;
        self.conn = Some(Conn {
            stream,
            shas: Vec::new(),
        });
        // Load every script; their SHA1s come back in order.
        self.wbuf.clear();
        for s in scripts::ALL {
            resp::encode(&mut self.wbuf, &[b"SCRIPT", b"LOAD", s.as_bytes()]);
        }
        let n = scripts::ALL.len();
        let replies = self.round_trip(n)?;
        let mut shas = Vec::with_capacity(n);
        for r in replies {
            match r {
                Reply::Bulk(Some(range)) => shas.push(self.rbuf[range].to_vec()),
                other => {
                    self.conn = None;
                    return Err(self.unexpected("SCRIPT LOAD", &other));
                }
            }
        }
        if let Some(c) = self.conn.as_mut() {
            c.shas = shas;
        }
        Ok(())
    }

    fn unexpected(&self, what: &str, r: &Reply) -> StoreError {
        match r {
            Reply::Error(range) => StoreError::Refused(format!(
                "{what}: {}",
                String::from_utf8_lossy(&self.rbuf[range.clone()])
            )),
            other => StoreError::Protocol(format!("{what}: unexpected reply {other:?}")),
        }
    }

    /// Writes `wbuf` and reads `n` replies into `rbuf`. On any failure the
    /// connection is dropped: the pipeline's state is unknown.
    fn round_trip(&mut self, n: usize) -> Result<Vec<Reply>, StoreError> {
        let t = self.cfg.timeout;
        let result = (|| {
            let conn = self
                .conn
                .as_mut()
                .ok_or_else(|| StoreError::Unavailable("not connected".into()))?;
            conn.stream
                .write_all(&self.wbuf)
                .map_err(|e| io_err(e, t))?;
            self.rbuf.clear();
            let mut replies = Vec::with_capacity(n);
            let mut at = 0;
            let mut chunk = [0u8; 64 * 1024];
            while replies.len() < n {
                match resp::parse(&self.rbuf, at)
                    .map_err(|e| StoreError::Protocol(e.to_string()))?
                {
                    Some((r, next)) => {
                        replies.push(r);
                        at = next;
                    }
                    None => {
                        let got = conn.stream.read(&mut chunk).map_err(|e| io_err(e, t))?;
                        if got == 0 {
                            return Err(StoreError::Unavailable(
                                "connection closed by the server".into(),
                            ));
                        }
                        self.rbuf.extend_from_slice(&chunk[..got]);
                    }
                }
            }
            Ok(replies)
        })();
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn sha(&self, i: usize) -> &[u8] {
        self.conn.as_ref().map_or(&[][..], |c| &c.shas[i][..])
    }

    fn encode_op(&mut self, ops: &Ops, op: &Op) {
        let mut num = [0u8; 24];
        let mut num2 = [0u8; 24];
        self.key_buf.clear();
        let w = &mut self.wbuf;
        match *op {
            Op::Get { key } => {
                redis_key(&mut self.key_buf, &key);
                resp::encode(w, &[b"GET", &self.key_buf]);
            }
            Op::Put { key, val } => {
                redis_key(&mut self.key_buf, &key);
                resp::encode(w, &[b"SET", &self.key_buf, ops.arg(val)]);
            }
            Op::Delete { key } => {
                redis_key(&mut self.key_buf, &key);
                resp::encode(w, &[b"DEL", &self.key_buf]);
            }
            Op::Incr { key, delta } => {
                redis_key(&mut self.key_buf, &key);
                resp::encode(
                    w,
                    &[b"INCRBY", &self.key_buf, resp::fmt_i64(delta, &mut num)],
                );
            }
            Op::CompareAndSet { key, expected, new } => {
                redis_key(&mut self.key_buf, &key);
                let sha = self.conn.as_ref().map_or(&[][..], |c| &c.shas[0][..]);
                let e = expected.map(|s| ops.arg(s)).unwrap_or(b"");
                let nv = new.map(|s| ops.arg(s)).unwrap_or(b"");
                let ef: &[u8] = if expected.is_some() { b"1" } else { b"0" };
                let nf: &[u8] = if new.is_some() { b"1" } else { b"0" };
                resp::encode(w, &[b"EVALSHA", sha, b"1", &self.key_buf, ef, e, nf, nv]);
            }
            Op::PoolInit { pool, size } => {
                redis_key(&mut self.key_buf, &pool);
                let sha = self.conn.as_ref().map_or(&[][..], |c| &c.shas[1][..]);
                resp::encode(
                    w,
                    &[
                        b"EVALSHA",
                        sha,
                        b"1",
                        &self.key_buf,
                        resp::fmt_i64(size as i64, &mut num),
                    ],
                );
            }
            Op::PoolAlloc { pool } | Op::PoolFree { pool, .. } => {
                // The pool's meta hash, freed list and freed set share one hash tag.
                redis_key(&mut self.key_buf, &pool);
                self.key_buf2.clear();
                self.key_buf2.extend_from_slice(&self.key_buf);
                self.key_buf2.extend_from_slice(b":f");
                self.key_buf3.clear();
                self.key_buf3.extend_from_slice(&self.key_buf);
                self.key_buf3.extend_from_slice(b":s");
                let (meta, freed, set) =
                    (&self.key_buf[..], &self.key_buf2[..], &self.key_buf3[..]);
                let which = if matches!(op, Op::PoolAlloc { .. }) {
                    2
                } else {
                    3
                };
                let sha = self.conn.as_ref().map_or(&[][..], |c| &c.shas[which][..]);
                match *op {
                    Op::PoolFree { item, .. } => resp::encode(
                        w,
                        &[
                            b"EVALSHA",
                            sha,
                            b"3",
                            meta,
                            freed,
                            set,
                            resp::fmt_i64(item as i64, &mut num2),
                        ],
                    ),
                    _ => resp::encode(w, &[b"EVALSHA", sha, b"3", meta, freed, set]),
                }
            }
            Op::ArmTimer { key, deadline_ns } => {
                timer_set(&mut self.key_buf, key.namespace());
                let us = (deadline_ns / 1000) as i64;
                resp::encode(
                    w,
                    &[
                        b"ZADD",
                        &self.key_buf,
                        resp::fmt_i64(us, &mut num),
                        key.as_bytes(),
                    ],
                );
            }
            Op::CancelTimer { key } => {
                timer_set(&mut self.key_buf, key.namespace());
                resp::encode(w, &[b"ZREM", &self.key_buf, key.as_bytes()]);
            }
        }
    }
}

impl StateStore for RedisStore {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.ensure_conn()?;
        self.wbuf.clear();
        for i in 0..ops.len() {
            let op = ops.ops()[i];
            self.encode_op(ops, &op);
            match op {
                Op::Get { .. } => self.counters.reads += 1,
                Op::Put { .. } | Op::Delete { .. } => self.counters.writes += 1,
                Op::ArmTimer { .. } | Op::CancelTimer { .. } => self.counters.timers += 1,
                _ => self.counters.atomics += 1,
            }
        }
        self.counters.round_trips += 1;
        let replies = self.round_trip(ops.len())?;
        let mut first_err = None;
        for (i, r) in replies.iter().enumerate() {
            let op = ops.ops()[i];
            let res = match (op, r) {
                (Op::Get { .. }, Reply::Bulk(Some(range))) => {
                    ops.set_value(i, Some(&self.rbuf[range.clone()]));
                    continue;
                }
                (Op::Get { .. }, Reply::Bulk(None)) => OpResult::Value(None),
                (Op::Put { .. }, Reply::Simple(_)) => OpResult::Done,
                (
                    Op::Delete { .. } | Op::CancelTimer { .. } | Op::ArmTimer { .. },
                    Reply::Int(_),
                ) => OpResult::Done,
                (Op::PoolFree { .. }, Reply::Int(_)) => OpResult::Done,
                (Op::Incr { .. }, Reply::Int(v)) => OpResult::Counter(*v),
                (Op::CompareAndSet { .. } | Op::PoolInit { .. }, Reply::Int(v)) => {
                    OpResult::Swapped(*v == 1)
                }
                (Op::PoolAlloc { .. }, Reply::Int(v)) => {
                    OpResult::Allocated((*v >= 0).then_some(*v as u64))
                }
                (_, other) => {
                    if first_err.is_none() {
                        let e = self.unexpected(op_name(&op), other);
                        if matches!(other, Reply::Error(r) if self.rbuf[r.clone()].starts_with(b"NOSCRIPT"))
                        {
                            // The server lost its scripts (restart, SCRIPT FLUSH): reload
                            // them on the next batch by reconnecting.
                            self.conn = None;
                        }
                        first_err = Some(e);
                    }
                    continue;
                }
            };
            ops.set_result(i, res);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        self.ensure_conn()?;
        self.key_buf.clear();
        timer_set(&mut self.key_buf, ns);
        self.wbuf.clear();
        let mut a = [0u8; 24];
        let mut b = [0u8; 24];
        let sha = self.sha(4).to_vec();
        resp::encode(
            &mut self.wbuf,
            &[
                b"EVALSHA",
                &sha,
                b"1",
                &self.key_buf,
                resp::fmt_i64((now_ns / 1000) as i64, &mut a),
                resp::fmt_i64(max.min(1000) as i64, &mut b),
            ],
        );
        self.counters.round_trips += 1;
        let replies = self.round_trip(1)?;
        match &replies[0] {
            Reply::Array(Some(items)) => {
                for it in items {
                    match it {
                        Reply::Bulk(Some(r)) => {
                            let k = Key::from_bytes(&self.rbuf[r.clone()]).ok_or_else(|| {
                                StoreError::Protocol("timer member is not a key".into())
                            })?;
                            self.counters.timers += 1;
                            out.push(k);
                        }
                        other => return Err(self.unexpected("take_expired", other)),
                    }
                }
                Ok(())
            }
            other => {
                let e = self.unexpected("take_expired", other);
                if matches!(other, Reply::Error(r) if self.rbuf[r.clone()].starts_with(b"NOSCRIPT"))
                {
                    self.conn = None;
                }
                Err(e)
            }
        }
    }

    fn counters(&self) -> StoreCounters {
        self.counters
    }

    fn describe(&self) -> String {
        format!("redis://{}", self.cfg.addr)
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Get { .. } => "GET",
        Op::Put { .. } => "SET",
        Op::Delete { .. } => "DEL",
        Op::CompareAndSet { .. } => "compare_and_set",
        Op::Incr { .. } => "INCRBY",
        Op::PoolInit { .. } => "pool_init",
        Op::PoolAlloc { .. } => "pool_alloc",
        Op::PoolFree { .. } => "pool_free",
        Op::ArmTimer { .. } => "ZADD",
        Op::CancelTimer { .. } => "ZREM",
    }
}
