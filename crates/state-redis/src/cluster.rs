//! Redis Cluster: operations are routed to the primary owning their key's slot,
//! one pipeline per node, all nodes written before any is read, so a batch costs
//! one round trip however many nodes it touches. `MOVED` refreshes the slot map and
//! retries the moved operations; `ASK` retries them once on the importing node.

use std::time::Duration;

use sluice_state::{Key, Namespace, Ops, StateStore, StoreCounters, StoreError};

use crate::node::Node;
use crate::resp::Reply;
use crate::{count, routing_key, timer_set};

const SLOTS: usize = 16384;
const UNKNOWN: u16 = u16::MAX;
/// Redirections followed per batch before giving up (a cluster in flux).
const MAX_REDIRECTS: usize = 5;

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
}

/// An operation waiting to be sent: (op index, node index, send `ASKING` first).
type Pending = (usize, usize, bool);

enum Redirect {
    Moved(String),
    Ask(String),
}

impl ClusterStore {
    /// Connects to `redis-cluster://[USER@]HOST:PORT[,HOST:PORT...][?OPTIONS]`
    /// (user, password and options as in [`crate::Config::from_url`], for every
    /// node) and learns the slot map.
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
            timeout: Duration::from_millis(1000),
            poll: u.poll,
            nodes: Vec::new(),
            slots: vec![UNKNOWN; SLOTS],
            counters: StoreCounters::default(),
            key_buf: Vec::with_capacity(128),
            per_node: Vec::new(),
            sent_total: 0,
            settled_mark: 0,
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
                self.nodes.push(n);
                self.per_node.push(Vec::new());
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
                    for (start, end, owner) in map {
                        let o = self.node_index(&owner) as u16;
                        for s in start..=end.min(SLOTS as u16 - 1) {
                            self.slots[s as usize] = o;
                        }
                    }
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

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
        for &n in &busy {
            self.nodes[n].ensure_conn()?;
            self.nodes[n].wbuf.clear();
            for j in 0..self.per_node[n].len() {
                let i = self.per_node[n][j];
                if asking.contains(&i) {
                    self.nodes[n].encode_asking();
                }
                let op = ops.ops()[i];
                self.nodes[n].encode_op(ops, &op);
            }
        }
        for &n in &busy {
            self.nodes[n].send()?;
        }
        let mut redirected = Vec::new();
        let mut moved = false;
        let mut first_err = None;
        for &n in &busy {
            let count = self.per_node[n].len()
                + self.per_node[n]
                    .iter()
                    .filter(|i| asking.contains(i))
                    .count();
            let replies = self.nodes[n].receive(count)?;
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
        match first_err {
            Some(e) => Err(e),
            None => Ok((redirected, moved)),
        }
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
            let (redirected, moved) = self.round(ops, &pending).map_err(|e| self.fail(e))?;
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

    fn describe(&self) -> String {
        crate::describe(
            "redis-cluster://",
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
