//! The flow monitor network function.
//!
//! Counts packets and bytes (whole frames) per flow and direction, with the times
//! of the first and last packet, and exports them as [`Event::Flow`] records
//! (EVE `flow` events) when the flow ends:
//!
//! * TCP: on RST, or once a FIN was seen in both directions (`"tcp_close"`), after
//!   a short linger ([`Config::close_linger_ms`]) so the packets that still belong to
//!   the connection (the last ACK, a retransmitted FIN) are counted;
//! * idle for [`Config::idle_timeout_secs`] (`"timeout"`), through store timers;
//! * at [`NetworkFunction::flush`] for flows still open (`"shutdown"`).
//!
//! "To server" is the direction of the first packet seen (for TCP normally the SYN).
//!
//! # State and store access
//!
//! One record per flow (canonical key, table [`TABLE_FLOW`]), layout
//! `[version u8][flags u8][pkts_toserver u64][pkts_toclient u64][bytes_toserver u64]
//! [bytes_toclient u64][start u64][end u64]`: [`RECORD_SIZE`] = 50 bytes. Counters
//! that are exact and shared by every instance need a write whenever they change,
//! i.e. per packet; this function makes it one read and one write per flow per
//! *batch*, aggregating every packet of the flow in the batch (two round trips per
//! batch). The read-modify-write is not atomic across instances: two instances
//! counting packets of one flow at the same instant may lose one's update; flows
//! are expected to be steered by symmetric hash (as in StatelessNF).
//!
//! After a TCP close the record lingers: packets within the linger are counted,
//! and the record is exported when the linger ends (its timer, or the next packet
//! after it) or a new SYN reuses the 5-tuple. It then stays as an exported tombstone
//! until deleted: later packets are absorbed, not counted and not turned into a new
//! flow; a new client SYN on the same 5-tuple
//! starts a new flow. A record idle past the timeout is exported (`"timeout"`) by
//! whichever comes first, its timer or the next packet of the flow, so exports do
//! not depend on when timers run.
//!
//! # Flush and several instances
//!
//! The store cannot enumerate keys, so each instance keeps the set of flows it
//! created (in memory, the only per-instance state; entries leave it when this
//! instance exports the flow). `flush` exports those still open. With several
//! instances each flushes the flows it created; flows created by an instance that
//! died are exported by their idle timer instead, and entries of flows another
//! instance exported stay in the set until flush, where they are skipped.

mod record;

use std::path::Path;

use rustc_hash::{FxBuildHasher, FxHashSet};
use serde::Deserialize;
use sluice_nf::batch::{self, BatchNf, Pass, Read, Record};
use sluice_nf::{Batch, Ctx, Event, NetworkFunction, NfError, Packet, StateStore};
use sluice_state::{Key, Namespace, OpId, Ops};
use sluice_wire::flow::Side;
use sluice_wire::parse::L4;
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};
use sluice_wire::FlowKey;

use record::{Flow, FlowId, Rec, F_CLIENT_FWD, F_CLOSED, F_EXPORTED, F_FIN_TC, F_FIN_TS};

/// Table of flow records.
pub const TABLE_FLOW: u8 = 1;
/// Encoded size of a flow record.
pub const RECORD_SIZE: usize = 50;

fn default_timeout() -> u64 {
    120
}

/// Monitor settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Seconds without packets after which a flow is exported and forgotten (120).
    #[serde(default = "default_timeout")]
    pub idle_timeout_secs: u64,
    /// Milliseconds a closed TCP connection's record keeps counting before it is
    /// exported (2000), so the final ACK is not lost from the counts.
    #[serde(default = "default_linger")]
    pub close_linger_ms: u64,
}

fn default_linger() -> u64 {
    2000
}

impl Default for Config {
    fn default() -> Self {
        Config {
            idle_timeout_secs: default_timeout(),
            close_linger_ms: default_linger(),
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The idle timeout is zero.
    #[error("monitor: idle_timeout_secs must be at least 1")]
    ZeroTimeout,
}

/// Builds a monitor.
pub fn build(config: &Config, ns: Namespace, _base_dir: &Path) -> Result<Monitor, ConfigError> {
    if config.idle_timeout_secs == 0 {
        return Err(ConfigError::ZeroTimeout);
    }
    Ok(Monitor::new(ns, config.idle_timeout_secs).with_linger_ms(config.close_linger_ms))
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets counted.
    pub packets: u64,
    /// Flows started.
    pub flows: u64,
    /// Flow records exported.
    pub exported: u64,
    /// Packets after a TCP close, absorbed by the tombstone.
    pub after_close: u64,
    /// Records that could not be decoded (replaced by a new flow).
    pub corrupt_records: u64,
    /// Frames that are not IP (counted here, passed, in no flow record).
    pub non_ip_frames: u64,
    /// Their bytes.
    pub non_ip_bytes: u64,
}

/// The flow monitor.
pub struct Monitor {
    ns: Namespace,
    timeout_ns: u64,
    linger_ns: u64,
    counters: Counters,
    pass: Pass<Monitor>,
    /// Flows this instance created and has not exported (for flush).
    mine: FxHashSet<FlowKey>,
    keys: Vec<Key>,
}

impl Monitor {
    /// A monitor with its records in `ns`.
    pub fn new(ns: Namespace, idle_timeout_secs: u64) -> Monitor {
        Monitor {
            ns,
            timeout_ns: idle_timeout_secs.saturating_mul(1_000_000_000).max(1),
            linger_ns: default_linger() * 1_000_000,
            counters: Counters::default(),
            pass: Pass::default(),
            mine: FxHashSet::default(),
            keys: Vec::new(),
        }
    }

    /// Sets how long a closed TCP connection keeps counting before its export.
    pub fn with_linger_ms(mut self, ms: u64) -> Monitor {
        self.linger_ns = ms.saturating_mul(1_000_000);
        self
    }

    /// The counters.
    pub fn stats(&self) -> &Counters {
        &self.counters
    }

    /// Flows this instance created and has not exported.
    pub fn tracked(&self) -> usize {
        self.mine.len()
    }

    fn emit(&mut self, ev: Event, events: &mut Vec<Event>, canon: &FlowKey) {
        self.counters.exported += 1;
        self.mine.remove(canon);
        events.push(ev);
    }
}

/// What a timer handler does with the record it fired for.
enum Timer {
    /// Not due yet: fire again at this time.
    Rearm(u64),
    /// Exported at the end of its linger: keep it as a tombstone until this time.
    Tombstone(Rec, u64),
    /// Over: remove it.
    Delete,
}

impl BatchNf for Monitor {
    type Id = FlowId;
    type Value = Rec;
    type Extra = Flow;
    type Old = ();
    /// The packet's flow record.
    type Plan = u32;
    type Hasher = FxBuildHasher;

    fn pass(&mut self) -> &mut Pass<Self> {
        &mut self.pass
    }

    #[inline]
    fn unclassified(&mut self, p: &Packet) -> Result<(), &'static str> {
        self.counters.non_ip_frames += 1;
        self.counters.non_ip_bytes += p.len() as u64;
        Ok(())
    }

    #[inline]
    fn plan(&mut self, p: &Packet, pass: &mut Pass<Self>) -> Result<u32, &'static str> {
        Ok(pass.record(FlowId::canonical(&p.meta.flow), || {
            let (canon, _) = p.meta.flow.canonical();
            let key = Key::flow(self.ns, TABLE_FLOW, &canon, &[]);
            let how = Read::Owned(canon.directional_hash());
            (
                key,
                how,
                Flow {
                    canon,
                    created_at: None,
                },
            )
        }))
    }

    #[inline]
    fn decide(
        &mut self,
        _i: usize,
        p: &mut Packet,
        ri: u32,
        pass: &mut Pass<Self>,
        ctx: &mut Ctx<'_>,
    ) {
        let (ts, len, flags, side) = (
            p.ts_ns,
            p.len() as u64,
            p.meta.tcp_flags,
            p.meta.flow.side(),
        );
        let tcp = p.meta.l4 == L4::Tcp;
        let e = &mut pass.recs[ri];
        let new_syn = tcp && flags & (SYN | ACK) == SYN;
        // A closed connection is exported once its linger is over, or as soon as
        // a new connection reuses its 5-tuple.
        if let Some(r) = e.cur.as_mut() {
            if r.flags & (F_CLOSED | F_EXPORTED) == F_CLOSED
                && (new_syn || r.end.saturating_add(self.linger_ns) <= ts)
            {
                r.flags |= F_EXPORTED;
                e.dirty = true;
                let canon = e.x.canon;
                let ev = r.export(&canon, "tcp_close");
                self.emit(ev, ctx.events, &canon);
            }
        }
        // An idle record is over, whether or not its timer ran yet.
        if let Some(r) = e.cur {
            if r.end.saturating_add(self.timeout_ns) <= ts {
                e.cur = None;
                e.dirty = true;
                if r.flags & F_EXPORTED == 0 {
                    let canon = e.x.canon;
                    let ev = r.export(&canon, "timeout");
                    self.emit(ev, ctx.events, &canon);
                }
            }
        }
        let start_new = match &e.cur {
            None => true,
            Some(r) if r.flags & F_EXPORTED != 0 => {
                if !new_syn {
                    self.counters.after_close += 1;
                    return;
                }
                true
            }
            Some(_) => false,
        };
        if start_new {
            e.cur = Some(Rec {
                flags: if side == Side::Forward {
                    F_CLIENT_FWD
                } else {
                    0
                },
                start: ts,
                end: ts,
                ..Rec::default()
            });
            if e.x.created_at.is_none() {
                e.x.created_at = Some(ts);
            }
            self.counters.flows += 1;
            self.mine.insert(e.x.canon);
        }
        let Some(r) = e.cur.as_mut() else { return };
        let d = if (side == Side::Forward) == (r.flags & F_CLIENT_FWD != 0) {
            0
        } else {
            1
        };
        r.pkts[d] += 1;
        r.bytes[d] += len;
        r.start = r.start.min(ts);
        r.end = r.end.max(ts);
        e.dirty = true;
        self.counters.packets += 1;
        if tcp {
            if flags & FIN != 0 {
                r.flags |= if d == 0 { F_FIN_TS } else { F_FIN_TC };
            }
            let closed = flags & RST != 0 || r.flags & (F_FIN_TS | F_FIN_TC) == F_FIN_TS | F_FIN_TC;
            if closed {
                r.flags |= F_CLOSED;
            }
        }
    }

    fn write(&self, e: &Record<Rec, Flow>, ops: &mut Ops) {
        let hash = e.x.canon.directional_hash();
        match &e.cur {
            // Closed and exported records are what timer handlers on any instance
            // act on (linger export): they always go to the store, which also
            // keeps a flow cache from holding them.
            Some(r) if r.flags & (F_CLOSED | F_EXPORTED) != 0 => {
                ops.put_value(e.key, r);
            }
            // A new record is written through before its packets leave.
            Some(r) if e.x.created_at.is_some() => {
                ops.put_value_owned(e.key, r, hash);
            }
            // Counting packets of an open flow: a crash may lose the last
            // deferred counts, nothing else.
            Some(r) => {
                ops.put_value_deferred(e.key, r, hash);
            }
            None => {
                ops.delete(e.key);
            }
        }
        match &e.cur {
            Some(r) if r.flags & (F_CLOSED | F_EXPORTED) == F_CLOSED => {
                ops.arm_timer(e.key, r.end.saturating_add(self.linger_ns));
            }
            _ => {
                if let Some(t) = e.x.created_at {
                    ops.arm_timer(e.key, t.saturating_add(self.timeout_ns));
                }
            }
        }
    }
}

impl NetworkFunction for Monitor {
    fn kind(&self) -> &'static str {
        "monitor"
    }

    fn namespace(&self) -> Namespace {
        self.ns
    }

    /// Every IP packet's flow record.
    fn prefetch(&self, batch: &Batch, ops: &mut Ops) {
        for p in batch.pkts.iter().filter(|p| p.is_live() && p.meta.is_ip()) {
            let (canon, _) = p.meta.flow.canonical();
            let h = canon.directional_hash();
            if ops.first_listing(h, self.ns, TABLE_FLOW) {
                ops.get_owned(Key::flow(self.ns, TABLE_FLOW, &canon, &[]), h);
            }
        }
    }

    fn process(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        batch::split(self, |m, pass| {
            pass.gather(m, batch, ctx);
            if pass.recs.is_empty() {
                return Ok(());
            }
            m.counters.corrupt_records += pass.read(m, store, ctx.now_ns)?;
            pass.decide(m, batch, ctx);
            pass.write(m, store)
        })
    }

    fn on_timers(&mut self, ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        let now = ctx.now_ns;
        loop {
            self.keys.clear();
            store.take_expired(self.ns, now, 256, &mut self.keys)?;
            if self.keys.is_empty() {
                return Ok(());
            }
            let full = self.keys.len() == 256;
            self.pass.ops.clear();
            let ids: Vec<OpId> = self.keys.iter().map(|k| self.pass.ops.get(*k)).collect();
            store.execute(&mut self.pass.ops)?;
            let mut actions = Vec::with_capacity(ids.len());
            let keys = std::mem::take(&mut self.keys);
            for (k, id) in keys.iter().zip(&ids) {
                let action = match self.pass.ops.decode::<Rec>(*id) {
                    Ok(None) => None,
                    Ok(Some(r)) if r.flags & (F_CLOSED | F_EXPORTED) == F_CLOSED => {
                        let until = r.end.saturating_add(self.linger_ns);
                        if until > now {
                            Some(Timer::Rearm(until))
                        } else {
                            if let Some(canon) = k.flow_key() {
                                let ev = r.export(&canon, "tcp_close");
                                self.emit(ev, ctx.events, &canon);
                            }
                            // The exported record stays a tombstone until it is
                            // idle past the timeout, as when a packet exports it:
                            // later packets of the old connection are absorbed
                            // the same way whichever ran first.
                            let tomb = Rec {
                                flags: r.flags | F_EXPORTED,
                                ..r
                            };
                            Some(Timer::Tombstone(
                                tomb,
                                r.end.saturating_add(self.timeout_ns),
                            ))
                        }
                    }
                    Ok(Some(r)) if r.end.saturating_add(self.timeout_ns) > now => {
                        Some(Timer::Rearm(r.end.saturating_add(self.timeout_ns)))
                    }
                    Ok(Some(r)) => {
                        if r.flags & F_EXPORTED == 0 {
                            if let Some(canon) = k.flow_key() {
                                let ev = r.export(&canon, "timeout");
                                self.emit(ev, ctx.events, &canon);
                            }
                        }
                        Some(Timer::Delete)
                    }
                    Err(_) => {
                        self.counters.corrupt_records += 1;
                        Some(Timer::Delete)
                    }
                };
                actions.push(action);
            }
            self.keys = keys;
            self.pass.ops.clear();
            for (k, a) in self.keys.iter().zip(actions) {
                match a {
                    Some(Timer::Rearm(t)) => {
                        self.pass.ops.arm_timer(*k, t);
                    }
                    Some(Timer::Tombstone(r, t)) => {
                        self.pass.ops.put_value(*k, &r);
                        self.pass.ops.arm_timer(*k, t);
                    }
                    Some(Timer::Delete) => {
                        self.pass.ops.delete(*k);
                    }
                    None => {}
                }
            }
            if !self.pass.ops.is_empty() {
                store.execute(&mut self.pass.ops)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    fn flush(&mut self, ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        let mut flows: Vec<FlowKey> = self.mine.drain().collect();
        flows.sort();
        self.pass.ops.clear();
        let keys: Vec<Key> = flows
            .iter()
            .map(|c| Key::flow(self.ns, TABLE_FLOW, c, &[]))
            .collect();
        let ids: Vec<OpId> = keys.iter().map(|k| self.pass.ops.get(*k)).collect();
        store.execute(&mut self.pass.ops)?;
        let mut done = Vec::new();
        for ((canon, key), id) in flows.iter().zip(&keys).zip(&ids) {
            match self.pass.ops.decode::<Rec>(*id) {
                Ok(Some(r)) if r.flags & F_EXPORTED == 0 => {
                    let reason = if r.flags & F_CLOSED != 0 {
                        "tcp_close"
                    } else if r.end.saturating_add(self.timeout_ns) <= ctx.now_ns {
                        "timeout"
                    } else {
                        "shutdown"
                    };
                    self.counters.exported += 1;
                    ctx.events.push(r.export(canon, reason));
                    done.push(*key);
                }
                _ => {}
            }
        }
        self.pass.ops.clear();
        for k in done {
            self.pass.ops.delete(k);
            self.pass.ops.cancel_timer(k);
        }
        if !self.pass.ops.is_empty() {
            store.execute(&mut self.pass.ops)?;
        }
        Ok(())
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        let c = &self.counters;
        out.extend_from_slice(&[
            ("monitor_packets", c.packets),
            ("monitor_flows", c.flows),
            ("monitor_exported", c.exported),
            ("monitor_after_close", c.after_close),
            ("monitor_corrupt_records", c.corrupt_records),
            ("monitor_non_ip_frames", c.non_ip_frames),
            ("monitor_non_ip_bytes", c.non_ip_bytes),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_state::{Codec, Reader, Writer};

    #[test]
    fn flow_id_is_the_canonical_key() {
        use sluice_wire::IpAddr;
        let v4 = |a: u8| IpAddr::V4([10, 0, 0, a]);
        let v6 = |a: u8| IpAddr::V6([a; 16]);
        let k = |src, dst, sp, dp, proto| FlowKey {
            zone: 0,
            src,
            dst,
            src_port: sp,
            dst_port: dp,
            proto,
        };
        let keys = [
            k(v4(1), v4(2), 1000, 80, 6),
            k(v4(2), v4(1), 80, 1000, 6),
            k(v4(1), v4(2), 1000, 80, 17),
            k(v4(1), v4(1), 80, 1000, 6),
            k(v4(1), v4(1), 1000, 80, 6),
            k(v6(1), v6(2), 1000, 80, 6),
            k(v6(2), v6(1), 80, 1000, 6),
            k(v4(1), v6(1), 1000, 80, 6),
            k(IpAddr::V4([0; 4]), IpAddr::V6([0; 16]), 0, 0, 6),
            k(IpAddr::V6([0; 16]), IpAddr::V6([0; 16]), 0, 0, 6),
        ];
        for a in &keys {
            assert_eq!(FlowId::canonical(a), FlowId::canonical(&a.reverse()));
            for b in &keys {
                assert_eq!(
                    FlowId::canonical(a) == FlowId::canonical(b),
                    a.canonical().0 == b.canonical().0,
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn record_layout() {
        let r = Rec {
            flags: 9,
            pkts: [1, 2],
            bytes: [3, 4],
            start: 5,
            end: 6,
        };
        let mut b = Vec::new();
        r.encode(&mut Writer::new(&mut b));
        assert_eq!(b.len(), RECORD_SIZE);
        assert_eq!(Rec::decode(&mut Reader::new(&b)).unwrap(), r);
    }
}
