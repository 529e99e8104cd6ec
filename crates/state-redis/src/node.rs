//! One connection to one server: the function library, the pipeline buffers,
//! encoding operations and applying their replies. Shared by the standalone and
//! cluster stores.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use sluice_state::{Key, Namespace, Op, OpResult, Ops, StoreError};

use crate::conn::{Conn, TlsSettings};
use crate::resp::{self, Reply};
use crate::{op_name, prefixed_key, prefixed_timer_set, scripts, Auth};

pub(crate) struct Node {
    pub(crate) addr: String,
    /// Sent with `AUTH` on every connect, before anything else.
    pub(crate) auth: Option<Auth>,
    /// Prepended to every stored key (see `Config::prefix`).
    pub(crate) prefix: String,
    /// TLS (`rediss://`), if on.
    pub(crate) tls: Option<TlsSettings>,
    timeout: Duration,
    /// See `Config::poll`.
    poll: Duration,
    stream: Option<Conn>,
    pub(crate) wbuf: Vec<u8>,
    pub(crate) rbuf: Vec<u8>,
    key_buf: Vec<u8>,
    key_buf2: Vec<u8>,
    key_buf3: Vec<u8>,
    /// Bytes of `rbuf` already parsed (replies of unacknowledged writes read ahead).
    rpos: usize,
    /// Commands sent without waiting whose replies are not read yet: they come
    /// first on the connection, before the replies of anything sent later.
    pub(crate) unacked: usize,
    /// Unacknowledged commands that failed (error reply, or connection lost before
    /// their reply was read).
    pub(crate) unacked_failures: u64,
    /// Replies expected for the started call (`start`), if any. Its replies come
    /// after those of the `unacked` commands sent before it.
    fetch: Option<usize>,
    /// Unacknowledged commands sent after the started call: their replies come
    /// after its replies.
    unacked_after: usize,
    /// Commands ever sent without waiting (`send_unacked`, `start`).
    pub(crate) sent_total: u64,
    /// Whether a connection may load the function library itself (see
    /// [`Node::loads_library`]); the admin's does not (it runs none, and
    /// loads it on purpose: `acl::Admin::load_library`).
    pub(crate) load_library: bool,
    /// Why the last connection's load of the library was refused, if it was
    /// refused as any write may be (too few replicas, out of memory, a failed
    /// save) and the connection kept: for the error of a call that then
    /// finds the library missing.
    load_refused: Option<String>,
}

/// What a server without `FUNCTION` lacks, for its errors.
pub(crate) const NEEDS_FUNCTIONS: &str =
    "the state backend needs Redis >= 7.0 or Valkey (its atomic operations are functions)";

/// Unacknowledged replies beyond which a send waits for them (never reached in
/// practice: replies are read without waiting at every send, see
/// [`Node::drain_ready`]).
const MAX_UNACKED: usize = 1 << 16;

fn io_err(e: std::io::Error, timeout: Duration) -> StoreError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            StoreError::Timeout(timeout.as_millis() as u64)
        }
        _ => StoreError::Unavailable(e.to_string()),
    }
}

impl Node {
    pub(crate) fn new(addr: String, timeout: Duration, poll: Duration) -> Node {
        Node {
            addr,
            auth: None,
            prefix: String::new(),
            tls: None,
            timeout,
            poll,
            stream: None,
            wbuf: Vec::with_capacity(64 * 1024),
            rbuf: Vec::with_capacity(64 * 1024),
            key_buf: Vec::with_capacity(256),
            key_buf2: Vec::with_capacity(256),
            key_buf3: Vec::with_capacity(256),
            rpos: 0,
            unacked: 0,
            unacked_failures: 0,
            fetch: None,
            unacked_after: 0,
            sent_total: 0,
            load_library: true,
            load_refused: None,
        }
    }

    /// Whether connecting loads the function library (`FUNCTION LOAD`, kept
    /// if the server has it): yes without a user or as an operator's own
    /// user, which have the permission as they had `SCRIPT LOAD`; no as a
    /// tenant's user, which may not load code (docs/SECURITY.md) and relies
    /// on the store admin (the controller) having loaded it.
    fn loads_library(&self) -> bool {
        self.load_library
            && !self
                .auth
                .as_ref()
                .is_some_and(|a| a.user.starts_with(crate::acl::TENANT_USER_PREFIX))
    }

    /// The error for a reply saying the library is missing (`Function not
    /// found`, or `FCALL` unknown to an old server), if `r` is one. A
    /// connection that loads the library is dropped, so the next attempt
    /// reconnects and loads it; a tenant's keeps its connection and works
    /// again once the admin has loaded it.
    fn library_missing(&mut self, what: &str, r: &Reply) -> Option<StoreError> {
        let text = self.error_text(r)?;
        if text.starts_with(b"ERR unknown command")
            && text.to_ascii_lowercase().windows(5).any(|w| w == b"fcall")
        {
            return Some(StoreError::Refused(format!(
                "{what}: {}: {}: {NEEDS_FUNCTIONS}",
                self.addr,
                String::from_utf8_lossy(text)
            )));
        }
        if !text.starts_with(b"ERR Function not found") {
            return None;
        }
        let name = scripts::LIBRARY_NAME;
        let addr = self.addr.clone();
        Some(if self.loads_library() {
            self.drop_conn();
            let why = match &self.load_refused {
                Some(e) => format!("its load was refused: {e}"),
                None => "flushed?".into(),
            };
            StoreError::Refused(format!(
                "{what}: the store ({addr}) has no function library {name} ({why}): \
                 it is loaded again on the next attempt"
            ))
        } else {
            StoreError::Refused(format!(
                "{what}: the store ({addr}) has no function library {name}: the controller \
                 loads it; is the controller's store sync running?"
            ))
        })
    }

    /// Whether a connection is open (made by an earlier call).
    pub(crate) fn connected(&self) -> bool {
        self.stream.is_some()
    }

    /// Drops the connection (its pipeline state is unknown); commands sent
    /// without waiting whose replies were not read count as failed.
    pub(crate) fn drop_conn(&mut self) {
        self.stream = None;
        self.unacked_failures += (self.unacked + self.unacked_after) as u64;
        self.unacked = 0;
        self.unacked_after = 0;
        self.fetch = None;
    }

    /// Refuses a call that waits while a started call is not finished (its
    /// replies would be read as the new call's).
    pub(crate) fn check_no_started(&self) -> Result<(), StoreError> {
        match self.fetch {
            Some(_) => Err(StoreError::Protocol(
                "a started call must be finished before another waits".into(),
            )),
            None => Ok(()),
        }
    }

    /// Commands sent without waiting whose replies are not read yet.
    pub(crate) fn outstanding(&self) -> usize {
        self.unacked + self.unacked_after + self.fetch.unwrap_or(0)
    }

    /// Writes the pipeline in `wbuf` (`n` commands) as the started call: its
    /// replies are read by [`Node::finish`].
    pub(crate) fn start(&mut self, n: usize) -> Result<(), StoreError> {
        if self.fetch.is_some() {
            return Err(StoreError::Protocol(
                "a call was started while another was not finished".into(),
            ));
        }
        self.send()?;
        self.fetch = Some(n);
        self.sent_total += n as u64;
        Ok(())
    }

    /// Reads the replies of the started call (after those of earlier
    /// unacknowledged commands).
    pub(crate) fn finish(&mut self) -> Result<Vec<Reply>, StoreError> {
        let Some(n) = self.fetch.take() else {
            return Err(StoreError::Protocol("no started call to finish".into()));
        };
        let replies = self.receive(n)?;
        self.unacked = self.unacked_after;
        self.unacked_after = 0;
        Ok(replies)
    }

    /// Writes the pipeline in `wbuf` (`n` commands) without waiting for the
    /// replies; they are read by a later [`Node::receive`] or
    /// [`Node::drain_ready`].
    pub(crate) fn send_unacked(&mut self, n: usize) -> Result<(), StoreError> {
        if self.outstanding() >= MAX_UNACKED && self.fetch.is_none() {
            self.receive(0)?;
        }
        self.send()?;
        self.sent_total += n as u64;
        if self.fetch.is_some() {
            self.unacked_after += n;
        } else {
            self.unacked += n;
        }
        self.drain_ready()
    }

    /// Reads the replies of unacknowledged commands that have already arrived,
    /// without waiting for more.
    pub(crate) fn drain_ready(&mut self) -> Result<(), StoreError> {
        if self.unacked == 0 {
            return Ok(());
        }
        let t = self.timeout;
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        let mut chunk = [0u8; 16 * 1024];
        let read = loop {
            match stream.read_ready(&mut chunk) {
                Ok(0) => {
                    break Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "connection closed by the server",
                    ))
                }
                Ok(got) => {
                    if self.rpos == self.rbuf.len() {
                        self.rbuf.clear();
                        self.rpos = 0;
                    }
                    self.rbuf.extend_from_slice(&chunk[..got]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = read {
            self.drop_conn();
            return Err(io_err(e, t));
        }
        while self.unacked > 0 {
            match resp::parse(&self.rbuf, self.rpos) {
                Ok(Some((r, next))) => {
                    if matches!(r, Reply::Error(_)) {
                        self.unacked_failures += 1;
                    }
                    self.unacked -= 1;
                    self.rpos = next;
                }
                Ok(None) => break,
                Err(e) => {
                    self.drop_conn();
                    return Err(StoreError::Protocol(e.to_string()));
                }
            }
        }
        Ok(())
    }

    /// Waits for the replies of every unacknowledged command.
    pub(crate) fn sync(&mut self) -> Result<(), StoreError> {
        // Its replies come first: waiting here would swallow them.
        self.check_no_started()?;
        if self.unacked == 0 {
            return Ok(());
        }
        self.receive(0).map(|_| ())
    }

    /// Connects (authenticating, and loading the function library where
    /// [`Node::loads_library`]), unless connected.
    pub(crate) fn ensure_conn(&mut self) -> Result<(), StoreError> {
        if self.stream.is_some() {
            return Ok(());
        }
        let t = self.timeout;
        let unavailable = |e: String| StoreError::Unavailable(format!("{}: {e}", self.addr));
        let addr = self
            .addr
            .to_socket_addrs()
            .map_err(|e| unavailable(e.to_string()))?
            .next()
            .ok_or_else(|| unavailable("no address".into()))?;
        let stream =
            TcpStream::connect_timeout(&addr, t).map_err(|e| unavailable(e.to_string()))?;
        stream.set_nodelay(true).map_err(|e| io_err(e, t))?;
        stream.set_read_timeout(Some(t)).map_err(|e| io_err(e, t))?;
        stream
            .set_write_timeout(Some(t))
            .map_err(|e| io_err(e, t))?;
        let conn = Conn::establish(stream, &self.addr, self.tls.as_ref())?;
        self.stream = Some(conn);
        self.rbuf.clear();
        self.rpos = 0;
        self.wbuf.clear();
        // AUTH goes first in the same pipeline: its reply decides whether the
        // rest (refused without it) is worth reading as the library's load.
        if let Some(a) = &self.auth {
            resp::encode(
                &mut self.wbuf,
                &[b"AUTH", a.user.as_bytes(), a.password.expose().as_bytes()],
            );
        }
        let load = self.loads_library();
        if load {
            // Without REPLACE: a server that has it keeps it (and answers at
            // once, compiling nothing).
            resp::encode(
                &mut self.wbuf,
                &[b"FUNCTION", b"LOAD", scripts::LIBRARY.as_bytes()],
            );
        }
        let sent = self.send();
        // A cleared buffer cannot be sent again by mistake with the password in it.
        self.wbuf.clear();
        sent?;
        let authed = usize::from(self.auth.is_some());
        let replies = self.receive(authed + usize::from(load))?;
        if let (Some(a), Some(Reply::Error(range))) = (&self.auth, replies.first()) {
            let e = StoreError::Refused(format!(
                "{}: authentication as store user `{}` failed: {}",
                self.addr,
                a.user,
                String::from_utf8_lossy(&self.rbuf[range.clone()])
            ));
            self.drop_conn();
            return Err(e);
        }
        if let Some(r) = replies.get(authed) {
            self.load_refused = None;
            if let Err(e) = self.loaded(r) {
                let text = self.error_text(r).unwrap_or_default();
                // Writes refused for now (too few replicas, out of memory, a
                // failed save): the server may well have the library already;
                // if not, the call that needs it says why. Anything else (an
                // old server, no permission) is the connection's failure.
                let for_now = [&b"NOREPLICAS"[..], b"OOM", b"MISCONF"]
                    .iter()
                    .any(|p| text.starts_with(p));
                if !for_now {
                    self.drop_conn();
                    return Err(e);
                }
                self.load_refused = Some(String::from_utf8_lossy(text).into_owned());
            }
        }
        Ok(())
    }

    /// Checks the reply of a `FUNCTION LOAD` of the library: loaded, or
    /// already there, or refused by a replica (which gets it from its
    /// primary) are all fine.
    pub(crate) fn loaded(&self, r: &Reply) -> Result<(), StoreError> {
        let what = format!("FUNCTION LOAD {}", scripts::LIBRARY_NAME);
        match r {
            Reply::Bulk(Some(_)) | Reply::Simple(_) => Ok(()),
            Reply::Error(range) => {
                let text = &self.rbuf[range.clone()];
                let has = |s: &[u8]| text.windows(s.len()).any(|w| w == s);
                if text.starts_with(b"READONLY") || has(b"already exists") {
                    return Ok(());
                }
                let e = self.unexpected(&format!("{}: {what}", self.addr), r);
                if has(b"unknown command") {
                    return Err(StoreError::Refused(format!("{e}: {NEEDS_FUNCTIONS}")));
                }
                Err(e)
            }
            other => Err(self.unexpected(&what, other)),
        }
    }

    pub(crate) fn unexpected(&self, what: &str, r: &Reply) -> StoreError {
        match r {
            Reply::Error(range) => {
                let text = &self.rbuf[range.clone()];
                // Say whose permissions fell short: the fix is in that user's ACL.
                let user = match &self.auth {
                    Some(a) if text.starts_with(b"NOPERM") => format!(" (store user `{}`)", a.user),
                    _ => String::new(),
                };
                StoreError::Refused(format!("{what}: {}{user}", String::from_utf8_lossy(text)))
            }
            other => StoreError::Protocol(format!("{what}: unexpected reply {other:?}")),
        }
    }

    /// The text of an error reply.
    pub(crate) fn error_text(&self, r: &Reply) -> Option<&[u8]> {
        match r {
            Reply::Error(range) => Some(&self.rbuf[range.clone()]),
            _ => None,
        }
    }

    /// Writes the pipeline. On failure the connection is dropped (its state is unknown).
    pub(crate) fn send(&mut self) -> Result<(), StoreError> {
        let t = self.timeout;
        let Some(stream) = self.stream.as_mut() else {
            return Err(StoreError::Unavailable(format!(
                "{}: not connected",
                self.addr
            )));
        };
        if let Err(e) = stream.write_all(&self.wbuf) {
            self.drop_conn();
            return Err(io_err(e, t));
        }
        Ok(())
    }

    /// Reads `n` replies into `rbuf`, after the replies of every unacknowledged
    /// command sent before (which come first on the connection). On failure the
    /// connection is dropped.
    pub(crate) fn receive(&mut self, n: usize) -> Result<Vec<Reply>, StoreError> {
        // The started call's replies come first; they are `finish`'s to read.
        self.check_no_started()?;
        let t = self.timeout;
        let result = (|| {
            let stream = self
                .stream
                .as_mut()
                .ok_or_else(|| StoreError::Unavailable("not connected".into()))?;
            // Keep what was read ahead but not parsed yet.
            if self.rpos >= self.rbuf.len() {
                self.rbuf.clear();
            } else {
                self.rbuf.drain(..self.rpos);
            }
            self.rpos = 0;
            let mut replies = Vec::with_capacity(n);
            let mut at = 0;
            let mut chunk = [0u8; 16 * 1024];
            while replies.len() < n || self.unacked > 0 {
                match resp::parse(&self.rbuf, at)
                    .map_err(|e| StoreError::Protocol(e.to_string()))?
                {
                    Some((r, next)) if self.unacked > 0 => {
                        if matches!(r, Reply::Error(_)) {
                            self.unacked_failures += 1;
                        }
                        self.unacked -= 1;
                        at = next;
                    }
                    Some((r, next)) => {
                        replies.push(r);
                        at = next;
                    }
                    None => {
                        let got = match stream.poll_ready(&mut chunk, self.poll) {
                            Ok(0) => stream.read(&mut chunk).map_err(|e| io_err(e, t))?,
                            Ok(got) => got,
                            Err(e) => return Err(io_err(e, t)),
                        };
                        if got == 0 {
                            return Err(StoreError::Unavailable(
                                "connection closed by the server".into(),
                            ));
                        }
                        self.rbuf.extend_from_slice(&chunk[..got]);
                    }
                }
            }
            self.rpos = at;
            Ok(replies)
        })();
        if result.is_err() {
            self.drop_conn();
        }
        result
    }

    /// Appends one command for the consecutive puts (`MSET`) or deletes (`DEL`)
    /// `ops[from..to]` (all of one kind): one command for the server to parse and
    /// one reply instead of one per key. Keys apply left to right, as separate
    /// commands would.
    pub(crate) fn encode_multi(&mut self, ops: &Ops, from: usize, to: usize) {
        let puts = matches!(ops.ops()[from], Op::Put { .. });
        let argc = 1 + (to - from) * if puts { 2 } else { 1 };
        resp::encode_header(&mut self.wbuf, argc);
        resp::encode_arg(&mut self.wbuf, if puts { b"MSET" } else { b"DEL" });
        for op in &ops.ops()[from..to] {
            self.key_buf.clear();
            match *op {
                Op::Put { key, val } => {
                    prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                    resp::encode_arg(&mut self.wbuf, &self.key_buf);
                    resp::encode_arg(&mut self.wbuf, ops.arg(val));
                }
                Op::Delete { key } => {
                    prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                    resp::encode_arg(&mut self.wbuf, &self.key_buf);
                }
                _ => {}
            }
        }
    }

    /// Appends `ASKING` (for a cluster ASK redirection) to the pipeline.
    pub(crate) fn encode_asking(&mut self) {
        resp::encode(&mut self.wbuf, &[b"ASKING"]);
    }

    /// Appends the command for `op` to the pipeline.
    pub(crate) fn encode_op(&mut self, ops: &Ops, op: &Op) {
        let mut num = [0u8; 24];
        self.key_buf.clear();
        match *op {
            Op::Get { key } => {
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                resp::encode(&mut self.wbuf, &[b"GET", &self.key_buf]);
            }
            Op::Put { key, val } => {
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                resp::encode(&mut self.wbuf, &[b"SET", &self.key_buf, ops.arg(val)]);
            }
            Op::Append { key, val } => {
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                resp::encode(&mut self.wbuf, &[b"APPEND", &self.key_buf, ops.arg(val)]);
            }
            Op::Delete { key } => {
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                resp::encode(&mut self.wbuf, &[b"DEL", &self.key_buf]);
            }
            Op::Incr { key, delta } => {
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                resp::encode(
                    &mut self.wbuf,
                    &[b"INCRBY", &self.key_buf, resp::fmt_i64(delta, &mut num)],
                );
            }
            Op::CompareAndSet { key, expected, new } => {
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &key);
                let e = expected.map(|s| ops.arg(s)).unwrap_or(b"");
                let nv = new.map(|s| ops.arg(s)).unwrap_or(b"");
                let ef: &[u8] = if expected.is_some() { b"1" } else { b"0" };
                let nf: &[u8] = if new.is_some() { b"1" } else { b"0" };
                resp::encode(
                    &mut self.wbuf,
                    &[
                        b"FCALL",
                        scripts::CAS.as_bytes(),
                        b"1",
                        &self.key_buf,
                        ef,
                        e,
                        nf,
                        nv,
                    ],
                );
            }
            Op::PoolInit { pool, size } => {
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &pool);
                resp::encode(
                    &mut self.wbuf,
                    &[
                        b"FCALL",
                        scripts::POOL_INIT.as_bytes(),
                        b"1",
                        &self.key_buf,
                        resp::fmt_i64(size as i64, &mut num),
                    ],
                );
            }
            Op::PoolAlloc { pool } | Op::PoolFree { pool, .. } | Op::PoolTake { pool, .. } => {
                // The pool's meta hash, freed list and freed set share one hash tag.
                prefixed_key(&mut self.key_buf, self.prefix.as_bytes(), &pool);
                self.key_buf2.clear();
                self.key_buf2.extend_from_slice(&self.key_buf);
                self.key_buf2.extend_from_slice(b":f");
                self.key_buf3.clear();
                self.key_buf3.extend_from_slice(&self.key_buf);
                self.key_buf3.extend_from_slice(b":s");
                let f = match op {
                    Op::PoolAlloc { .. } => scripts::POOL_ALLOC,
                    Op::PoolFree { .. } => scripts::POOL_FREE,
                    _ => scripts::POOL_TAKE,
                }
                .as_bytes();
                let (meta, freed, set) =
                    (&self.key_buf[..], &self.key_buf2[..], &self.key_buf3[..]);
                // The item to free, or how many to take; allocation has no argument.
                let arg = match *op {
                    Op::PoolFree { item, .. } => Some(item as i64),
                    Op::PoolTake { n, .. } => Some(n as i64),
                    _ => None,
                };
                match arg {
                    Some(a) => resp::encode(
                        &mut self.wbuf,
                        &[
                            b"FCALL",
                            f,
                            b"3",
                            meta,
                            freed,
                            set,
                            resp::fmt_i64(a, &mut num),
                        ],
                    ),
                    None => resp::encode(&mut self.wbuf, &[b"FCALL", f, b"3", meta, freed, set]),
                }
            }
            Op::ArmTimer { key, deadline_ns } => {
                prefixed_timer_set(&mut self.key_buf, self.prefix.as_bytes(), key.namespace());
                let us = (deadline_ns / 1000) as i64;
                resp::encode(
                    &mut self.wbuf,
                    &[
                        b"ZADD",
                        &self.key_buf,
                        resp::fmt_i64(us, &mut num),
                        key.as_bytes(),
                    ],
                );
            }
            Op::CancelTimer { key } => {
                prefixed_timer_set(&mut self.key_buf, self.prefix.as_bytes(), key.namespace());
                resp::encode(&mut self.wbuf, &[b"ZREM", &self.key_buf, key.as_bytes()]);
            }
        }
    }

    /// Stores the result of operation `i` from its reply. An error reply is returned
    /// as an error (a missing library's names it, see [`Node::library_missing`]).
    pub(crate) fn apply_reply(
        &mut self,
        ops: &mut Ops,
        i: usize,
        r: &Reply,
    ) -> Result<(), StoreError> {
        let op = ops.ops()[i];
        let res = match (op, r) {
            (Op::Get { .. }, Reply::Bulk(Some(range))) => {
                ops.set_value(i, Some(&self.rbuf[range.clone()]));
                return Ok(());
            }
            (Op::Get { .. }, Reply::Bulk(None)) => OpResult::Value(None),
            (Op::Put { .. }, Reply::Simple(_)) => OpResult::Done,
            (
                Op::Delete { .. }
                | Op::Append { .. }
                | Op::CancelTimer { .. }
                | Op::ArmTimer { .. }
                | Op::PoolFree { .. },
                Reply::Int(_),
            ) => OpResult::Done,
            (Op::Incr { .. }, Reply::Int(v)) => OpResult::Counter(*v),
            (Op::CompareAndSet { .. } | Op::PoolInit { .. }, Reply::Int(v)) => {
                OpResult::Swapped(*v == 1)
            }
            (Op::PoolAlloc { .. }, Reply::Int(v)) => {
                OpResult::Allocated((*v >= 0).then_some(*v as u64))
            }
            (Op::PoolTake { .. }, Reply::Array(Some(items))) => {
                let items = items.iter().filter_map(|r| match r {
                    Reply::Int(v) if *v >= 0 => Some(*v as u64),
                    _ => None,
                });
                ops.set_taken(i, items);
                return Ok(());
            }
            // No pool.
            (Op::PoolTake { .. }, Reply::Int(_)) => {
                ops.set_taken(i, std::iter::empty());
                return Ok(());
            }
            (_, other) => {
                return Err(self
                    .library_missing(op_name(&op), other)
                    .unwrap_or_else(|| self.unexpected(op_name(&op), other)));
            }
        };
        ops.set_result(i, res);
        Ok(())
    }

    /// Takes expired timers of `ns` in one atomic function call.
    pub(crate) fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        self.check_no_started()?;
        self.ensure_conn()?;
        self.key_buf.clear();
        prefixed_timer_set(&mut self.key_buf, self.prefix.as_bytes(), ns);
        self.wbuf.clear();
        let mut a = [0u8; 24];
        let mut b = [0u8; 24];
        let now_us = resp::fmt_i64((now_ns / 1000) as i64, &mut a);
        let max = resp::fmt_i64(max.min(scripts::MAX_EXPIRED) as i64, &mut b);
        resp::encode(
            &mut self.wbuf,
            &[
                b"FCALL",
                scripts::TAKE_EXPIRED.as_bytes(),
                b"1",
                &self.key_buf,
                now_us,
                max,
            ],
        );
        self.send()?;
        let replies = self.receive(1)?;
        match &replies[0] {
            Reply::Array(Some(items)) => {
                for it in items {
                    match it {
                        Reply::Bulk(Some(r)) => {
                            let k = Key::from_bytes(&self.rbuf[r.clone()]).ok_or_else(|| {
                                StoreError::Protocol("timer member is not a key".into())
                            })?;
                            out.push(k);
                        }
                        other => return Err(self.unexpected("take_expired", other)),
                    }
                }
                Ok(())
            }
            other => Err(self
                .library_missing("take_expired", other)
                .unwrap_or_else(|| self.unexpected("take_expired", other))),
        }
    }
}
