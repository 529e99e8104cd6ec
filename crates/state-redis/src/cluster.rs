//! Redis Cluster: operations are routed to the primary owning their key's slot,
//! one pipeline per node, all nodes written before any is read, so a batch costs
//! one round trip however many nodes it touches. `MOVED` refreshes the slot map and
//! retries the moved operations; `ASK` retries them once on the importing node.
//!
//! With replicas, a batch's writes on a primary are followed in the same
//! pipeline by `WAIT N T`: the batch is answered (and its packets released)
//! only once N replicas hold its writes, so a primary that dies afterwards
//! loses none of them when a replica takes over (docs/STATE.md, "Replication").

use std::time::{Duration, Instant};

use sluice_state::{Key, Namespace, Ops, StateStore, StoreCounters, StoreError};

use crate::node::Node;
use crate::resp::Reply;
use crate::{count, routing_key, timer_set};

const SLOTS: usize = 16384;
const UNKNOWN: u16 = u16::MAX;
/// Redirections followed per batch before giving up (a cluster in flux).
const MAX_REDIRECTS: usize = 5;
/// Replicas a write waits for unless the URL says (`?wait=N`).
const DEFAULT_WAIT: u8 = 1;
/// How long a batch waits for them unless the URL says (`?wait_ms=T`).
const DEFAULT_WAIT_MS: u64 = 50;
/// After `wait_ms` ran out, how long the same batch waits again unless the URL
/// says (`?rewait_ms=T`; 0: no second wait). A replica of a loaded machine
/// can lag past `wait_ms` while alive; giving up on it at once would leave
/// that primary's writes unwaited, and a kill then could lose them.
const DEFAULT_REWAIT_MS: u64 = 250;
/// After a primary answered both waits short, how long its writes go without
/// waiting: its replica is likely gone, and waiting on every batch until the
/// cluster notices would stall the data plane, not protect it. Doubled on
/// each further double shortfall up to [`MAX_SHORTFALL_BACKOFF`], so a dead
/// replica the slot map still lists costs ever fewer stalled batches; reset
/// by a `WAIT` answered in full.
const SHORTFALL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest [`SHORTFALL_BACKOFF`] grows to.
const MAX_SHORTFALL_BACKOFF: Duration = Duration::from_secs(8);

/// CRC16/XMODEM, Redis Cluster's key hash.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of a stored key, honouring `{hash tags}`.
pub fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// A state store spread over a Redis Cluster's primaries.
pub struct ClusterStore {
    seeds: Vec<String>,
    auth: Option<crate::Auth>,
    prefix: String,
    tls: Option<crate::TlsSettings>,
    timeout: Duration,
    poll: Duration,
    nodes: Vec<Node>,
    slots: Vec<u16>,
    counters: StoreCounters,
    key_buf: Vec<u8>,
    per_node: Vec<Vec<usize>>,
    /// Commands ever sent without waiting, over all nodes (nodes come and go).
    sent_total: u64,
    /// `sent_total` at the last poll that found nothing outstanding anywhere.
    settled_mark: u64,
    /// Replicas each write waits for (0: none).
    wait: u8,
    /// `WAIT`'s timeout, in milliseconds, as its argument.
    wait_ms: String,
    /// Per node (as `nodes`): its replicas in the last slot map.
    replicas: Vec<u8>,
    /// `WAIT`'s second timeout, in milliseconds, as its argument (`None`: no
    /// second wait).
    rewait_ms: Option<String>,
    /// Per node: until when its writes go without waiting (after a shortfall).
    unwaited_until: Vec<Option<Instant>>,
    /// Per node: the backoff its next double shortfall sets.
    backoff: Vec<Duration>,
    /// Per node in this round: the replicas its `WAIT` asked for (0: none sent).
    waiting: Vec<u8>,
}

/// An operation waiting to be sent: (op index, node index, send `ASKING` first).
type Pending = (usize, usize, bool);

enum Redirect {
    Moved(String),
    Ask(String),
}

impl ClusterStore {
    /// Connects to `redis-cluster://[USER@]HOST:PORT[,HOST:PORT...][?OPTIONS]`
    /// (`rediss-cluster://` for TLS; user, password and options as in
    /// [`crate::Config::from_url`], for every node) and learns the slot map.
    pub fn open(url: &str) -> Result<ClusterStore, StoreError> {
        let u = crate::parse_url(url, "redis-cluster://")?;
        let seeds: Vec<String> = u
            .hosts
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if seeds.is_empty() || seeds.iter().any(|s| !s.contains(':')) {
            return Err(StoreError::Refused(format!(
                "`{}`: expected redis-cluster://[USER@]HOST:PORT[,HOST:PORT...][?poll_us=N]",
                crate::redact_url(url)
            )));
        }
        let mut c = ClusterStore {
            seeds,
            auth: u.auth,
            prefix: u.prefix,
            tls: u.tls,
            timeout: Duration::from_millis(1000),
            poll: u.poll,
            nodes: Vec::new(),
            slots: vec![UNKNOWN; SLOTS],
            counters: StoreCounters::default(),
            key_buf: Vec::with_capacity(128),
            per_node: Vec::new(),
            sent_total: 0,
            settled_mark: 0,
            wait: u.wait.unwrap_or(DEFAULT_WAIT),
            wait_ms: u.wait_ms.unwrap_or(DEFAULT_WAIT_MS).to_string(),
            rewait_ms: Some(u.rewait_ms.unwrap_or(DEFAULT_REWAIT_MS))
                .filter(|&ms| ms > 0)
                .map(|ms| ms.to_string()),
            replicas: Vec::new(),
            unwaited_until: Vec::new(),
            backoff: Vec::new(),
            waiting: Vec::new(),
        };
        c.refresh()?;
        Ok(c)
    }

    fn node_index(&mut self, addr: &str) -> usize {
        match self.nodes.iter().position(|n| n.addr == addr) {
            Some(i) => i,
            None => {
                let mut n = Node::new(addr.to_string(), self.timeout, self.poll);
                n.auth = self.auth.clone();
                n.prefix = self.prefix.clone();
                n.tls = self.tls.clone();
                self.nodes.push(n);
                self.per_node.push(Vec::new());
                self.replicas.push(0);
                self.unwaited_until.push(None);
                self.backoff.push(SHORTFALL_BACKOFF);
                self.waiting.push(0);
                self.nodes.len() - 1
            }
        }
    }

    /// Reloads the slot map from the first node (known or seed) that answers.
    fn refresh(&mut self) -> Result<(), StoreError> {
        let mut candidates: Vec<String> = self.nodes.iter().map(|n| n.addr.clone()).collect();
        candidates.extend(self.seeds.iter().cloned());
        let mut last = StoreError::Unavailable("no cluster node answered".into());
        for addr in candidates {
            let i = self.node_index(&addr);
            match self.slots_from(i) {
                Ok(map) => {
                    self.slots.fill(UNKNOWN);
                    self.replicas.fill(0);
                    for (start, end, owner) in map {
                        let o = self.node_index(&owner) as u16;
                        for s in start..=end.min(SLOTS as u16 - 1) {
                            self.slots[s as usize] = o;
                        }
                    }
                    if self.wait > 0 {
                        self.learn_replicas();
                    }
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Asks each primary of the slot map how many replicas it streams to
    /// (`ROLE`): `CLUSTER SLOTS` is no guide, it leaves out a replica until
    /// gossip has carried its replication offset, seconds after it synced. A
    /// primary that does not answer counts none (its batches fail anyway).
    fn learn_replicas(&mut self) {
        let mut primaries: Vec<u16> = self.slots.clone();
        primaries.sort_unstable();
        primaries.dedup();
        for &p in primaries.iter().filter(|&&p| p != UNKNOWN) {
            let n = &mut self.nodes[p as usize];
            let count = (|| {
                n.ensure_conn()?;
                n.wbuf.clear();
                crate::resp::encode(&mut n.wbuf, &[b"ROLE"]);
                n.send()?;
                let replies = n.receive(1)?;
                Ok::<_, StoreError>(match &replies[0] {
                    Reply::Array(Some(f)) => match f.get(2) {
                        Some(Reply::Array(Some(r))) => r.len(),
                        _ => 0,
                    },
                    _ => 0,
                })
            })();
            self.replicas[p as usize] = u8::try_from(count.unwrap_or(0)).unwrap_or(u8::MAX);
        }
    }

    /// The slot ranges `i` reports: (first, last, primary).
    fn slots_from(&mut self, i: usize) -> Result<Vec<(u16, u16, String)>, StoreError> {
        let n = &mut self.nodes[i];
        n.ensure_conn()?;
        n.wbuf.clear();
        crate::resp::encode(&mut n.wbuf, &[b"CLUSTER", b"SLOTS"]);
        n.send()?;
        let replies = n.receive(1)?;
        let Reply::Array(Some(ranges)) = &replies[0] else {
            return Err(n.unexpected("CLUSTER SLOTS", &replies[0]));
        };
        let text = |r: &Reply| -> Option<String> {
            match r {
                Reply::Bulk(Some(x)) => {
                    Some(String::from_utf8_lossy(&n.rbuf[x.clone()]).into_owned())
                }
                _ => None,
            }
        };
        let mut out = Vec::new();
        for r in ranges {
            let Reply::Array(Some(f)) = r else { continue };
            let (Some(Reply::Int(a)), Some(Reply::Int(b)), Some(Reply::Array(Some(primary)))) =
                (f.first(), f.get(1), f.get(2))
            else {
                return Err(StoreError::Protocol(
                    "CLUSTER SLOTS: unexpected range entry".into(),
                ));
            };
            let (Some(host), Some(Reply::Int(port))) =
                (primary.first().and_then(text), primary.get(1))
            else {
                return Err(StoreError::Protocol(
                    "CLUSTER SLOTS: unexpected node entry".into(),
                ));
            };
            let host = if host.is_empty() {
                n.addr.rsplit_once(':').map_or(host, |(h, _)| h.to_string())
            } else {
                host
            };
            out.push((*a as u16, *b as u16, format!("{host}:{port}")));
        }
        if out.is_empty() {
            return Err(StoreError::Unavailable(format!(
                "{}: cluster has no slots assigned",
                n.addr
            )));
        }
        Ok(out)
    }

    /// Points every slot at the first node: the next batch meets `MOVED` replies and
    /// must recover (tests use this to exercise redirection).
    #[doc(hidden)]
    pub fn scramble_slots_for_test(&mut self) {
        self.slots.fill(0);
    }

    fn node_for_slot(&mut self, slot: u16) -> Result<usize, StoreError> {
        if self.slots[slot as usize] == UNKNOWN {
            self.refresh()?;
        }
        match self.slots[slot as usize] {
            UNKNOWN => Err(StoreError::Unavailable(format!(
                "no node serves slot {slot}"
            ))),
            i => Ok(i as usize),
        }
    }

    fn parse_redirect(text: &[u8]) -> Option<Redirect> {
        let t = std::str::from_utf8(text).ok()?;
        let mut parts = t.split_whitespace();
        let kind = parts.next()?;
        let _slot = parts.next()?;
        let addr = parts.next()?.to_string();
        match kind {
            "MOVED" => Some(Redirect::Moved(addr)),
            "ASK" => Some(Redirect::Ask(addr)),
            _ => None,
        }
    }

    /// Sends `pending` op indices (grouped per node, ASKING first where `asking`),
    /// applies replies, and returns the ops redirected elsewhere.
    fn round(
        &mut self,
        ops: &mut Ops,
        pending: &[Pending],
    ) -> Result<(Vec<Pending>, bool), StoreError> {
        for v in self.per_node.iter_mut() {
            v.clear();
        }
        for &(op, node, _) in pending {
            self.per_node[node].push(op);
        }
        let asking: Vec<usize> = pending.iter().filter(|p| p.2).map(|p| p.0).collect();
        let busy: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| !self.per_node[n].is_empty())
            .collect();
        let now = (self.wait > 0).then(Instant::now);
        for &n in &busy {
            self.nodes[n].ensure_conn()?;
            self.nodes[n].wbuf.clear();
            let mut writes = false;
            for j in 0..self.per_node[n].len() {
                let i = self.per_node[n][j];
                if asking.contains(&i) {
                    self.nodes[n].encode_asking();
                }
                let op = ops.ops()[i];
                writes |= !matches!(op, sluice_state::Op::Get { .. });
                self.nodes[n].encode_op(ops, &op);
            }
            self.waiting[n] = match now {
                Some(now) if writes && self.unwaited_until[n].is_none_or(|t| now >= t) => {
                    self.wait.min(self.replicas[n])
                }
                _ => 0,
            };
            if self.waiting[n] > 0 {
                let want = self.waiting[n].to_string();
                crate::resp::encode(
                    &mut self.nodes[n].wbuf,
                    &[b"WAIT", want.as_bytes(), self.wait_ms.as_bytes()],
                );
            }
        }
        for &n in &busy {
            self.nodes[n].send()?;
        }
        let mut redirected = Vec::new();
        let mut moved = false;
        let mut short_nodes = Vec::new();
        let mut first_err = None;
        for &n in &busy {
            let count = self.per_node[n].len()
                + self.per_node[n]
                    .iter()
                    .filter(|i| asking.contains(i))
                    .count()
                + usize::from(self.waiting[n] > 0);
            let replies = self.nodes[n].receive(count)?;
            if self.waiting[n] > 0 {
                self.counters.replica_waits += 1;
                let acked = match replies.last() {
                    Some(Reply::Int(k)) => *k,
                    _ => 0,
                };
                if acked < i64::from(self.waiting[n]) {
                    short_nodes.push(n);
                } else {
                    self.backoff[n] = SHORTFALL_BACKOFF;
                }
            }
            let mut it = replies.iter();
            for j in 0..self.per_node[n].len() {
                let i = self.per_node[n][j];
                if asking.contains(&i) {
                    it.next(); // +OK of ASKING
                }
                let Some(r) = it.next() else { break };
                if let Some(t) = self.nodes[n].error_text(r) {
                    match ClusterStore::parse_redirect(t) {
                        Some(Redirect::Moved(addr)) => {
                            moved = true;
                            let to = self.node_index(&addr);
                            redirected.push((i, to, false));
                            continue;
                        }
                        Some(Redirect::Ask(addr)) => {
                            let to = self.node_index(&addr);
                            redirected.push((i, to, true));
                            continue;
                        }
                        None => {}
                    }
                }
                if let Err(e) = self.nodes[n].apply_reply(ops, i, r) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if !short_nodes.is_empty() && self.rewait(&short_nodes)? {
            // Learn which replicas are still streamed to; one that is gone
            // is no longer waited for.
            let _ = self.refresh();
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok((redirected, moved)),
        }
    }

    /// Waits again, `rewait_ms`, on the primaries whose `WAIT` fell short
    /// (`short`), all at once; a primary still short is counted and its
    /// writes go unwaited for its backoff. True if any was still short.
    ///
    /// The batch is answered either way: its writes are on the primary, and
    /// failing it would drop packets over a replica. An I/O error here is the
    /// primary's own, and fails the batch closed as any other.
    fn rewait(&mut self, short: &[usize]) -> Result<bool, StoreError> {
        let mut still_short = Vec::new();
        match &self.rewait_ms {
            Some(ms) => {
                for &n in short {
                    let want = self.waiting[n].to_string();
                    self.nodes[n].wbuf.clear();
                    crate::resp::encode(
                        &mut self.nodes[n].wbuf,
                        &[b"WAIT", want.as_bytes(), ms.as_bytes()],
                    );
                    self.nodes[n].send()?;
                }
                for &n in short {
                    let acked = match self.nodes[n].receive(1)?.last() {
                        Some(Reply::Int(k)) => *k,
                        _ => 0,
                    };
                    if acked < i64::from(self.waiting[n]) {
                        still_short.push(n);
                    } else {
                        self.counters.replica_rewaits += 1;
                        self.backoff[n] = SHORTFALL_BACKOFF;
                    }
                }
            }
            None => still_short.extend_from_slice(short),
        }
        let now = Instant::now();
        for &n in &still_short {
            self.counters.replica_shortfalls += 1;
            self.unwaited_until[n] = Some(now + self.backoff[n]);
            self.backoff[n] = (self.backoff[n] * 2).min(MAX_SHORTFALL_BACKOFF);
        }
        Ok(!still_short.is_empty())
    }

    fn fail(&mut self, e: StoreError) -> StoreError {
        // A node that failed may have been replaced: relearn the map next time.
        if matches!(e, StoreError::Unavailable(_) | StoreError::Timeout(_)) {
            self.slots.fill(UNKNOWN);
        }
        e
    }
}

impl StateStore for ClusterStore {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut pending = Vec::with_capacity(ops.len());
        for i in 0..ops.len() {
            let op = ops.ops()[i];
            count(&mut self.counters, &op);
            self.key_buf.clear();
            routing_key(&mut self.key_buf, &op);
            let slot = crate::cluster::slot_of(&self.key_buf);
            let node = self.node_for_slot(slot).map_err(|e| self.fail(e))?;
            pending.push((i, node, false));
        }
        for _ in 0..=MAX_REDIRECTS {
            self.counters.round_trips += 1;
            let (redirected, moved) = match self.round(ops, &pending) {
                Ok(r) => r,
                Err(e) => {
                    // The other nodes of the round were sent commands whose
                    // replies nobody read: left on their connections, they
                    // would answer the next batch's. Their state is unknown.
                    let busy: Vec<usize> = pending.iter().map(|p| p.1).collect();
                    for n in busy {
                        self.nodes[n].drop_conn();
                    }
                    return Err(self.fail(e));
                }
            };
            if redirected.is_empty() {
                return Ok(());
            }
            if moved {
                self.refresh().map_err(|e| self.fail(e))?;
            }
            pending = redirected;
        }
        Err(StoreError::Unavailable(format!(
            "still redirected after {MAX_REDIRECTS} attempts"
        )))
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        self.key_buf.clear();
        timer_set(&mut self.key_buf, ns);
        let slot = slot_of(&self.key_buf);
        for _ in 0..=MAX_REDIRECTS {
            let n = self.node_for_slot(slot).map_err(|e| self.fail(e))?;
            self.counters.round_trips += 1;
            let before = out.len();
            match self.nodes[n].take_expired(ns, now_ns, max, out) {
                Ok(()) => {
                    self.counters.timers += (out.len() - before) as u64;
                    return Ok(());
                }
                Err(StoreError::Refused(m)) if m.contains("MOVED") || m.contains("ASK") => {
                    self.refresh().map_err(|e| self.fail(e))?;
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
        Err(StoreError::Unavailable(format!(
            "still redirected after {MAX_REDIRECTS} attempts"
        )))
    }

    /// One `write` per node touched, replies read later (see
    /// [`StateStore::execute_unacked`]). Redirections are not followed: a
    /// redirected write counts as failed, so the caller's cache reads through.
    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        for v in self.per_node.iter_mut() {
            v.clear();
        }
        for i in 0..ops.len() {
            let op = ops.ops()[i];
            count(&mut self.counters, &op);
            self.key_buf.clear();
            routing_key(&mut self.key_buf, &op);
            let slot = crate::cluster::slot_of(&self.key_buf);
            let node = self.node_for_slot(slot).map_err(|e| self.fail(e))?;
            self.per_node[node].push(i);
        }
        for n in 0..self.nodes.len() {
            if self.per_node[n].is_empty() {
                continue;
            }
            self.nodes[n].ensure_conn().map_err(|e| self.fail(e))?;
            self.nodes[n].wbuf.clear();
            for j in 0..self.per_node[n].len() {
                let op = ops.ops()[self.per_node[n][j]];
                self.nodes[n].encode_op(ops, &op);
            }
            let count = self.per_node[n].len();
            self.nodes[n]
                .send_unacked(count)
                .map_err(|e| self.fail(e))?;
            self.sent_total += count as u64;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        for n in 0..self.nodes.len() {
            self.nodes[n].sync().map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    /// Settled only up to the last poll at which no node had anything
    /// outstanding: the nodes' pipelines are independent, so a partial sum
    /// would not say which commands are settled.
    fn poll_unacked(&mut self) -> Result<(u64, u64), StoreError> {
        let mut outstanding = 0;
        for n in 0..self.nodes.len() {
            self.nodes[n].drain_ready().map_err(|e| self.fail(e))?;
            outstanding += self.nodes[n].outstanding();
        }
        if outstanding == 0 {
            self.settled_mark = self.sent_total;
        }
        Ok((self.sent_total, self.settled_mark))
    }

    fn take_unacked_failures(&mut self) -> u64 {
        self.nodes
            .iter_mut()
            .map(|n| std::mem::take(&mut n.unacked_failures))
            .sum()
    }

    fn counters(&self) -> StoreCounters {
        self.counters
    }
    // Each node's pipeline runs in order, but the nodes independently.
    fn orders_across_keys(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        crate::describe(
            if self.tls.is_some() {
                "rediss-cluster://"
            } else {
                "redis-cluster://"
            },
            &self.seeds.join(","),
            self.auth.as_ref(),
            &self.prefix,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(
            slot_of(b"{user1000}.following"),
            slot_of(b"{user1000}.followers")
        );
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"));
        assert_eq!(
            slot_of(b"{}x"),
            crc16(b"{}x") % 16384,
            "an empty tag hashes the whole key"
        );
    }
}
