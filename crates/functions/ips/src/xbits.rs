//! `xbits`: named bits per host (`track ip_src`, `track ip_dst`) or per pair
//! of hosts (`track ip_pair`, whichever way the packet travels), set with an
//! expiry, that rules on other flows test — Suricata's xbits (detect-xbits.c,
//! host and ippair tables).
//!
//! The bits are state like any other: one record per (bit, host or pair) in
//! table [`TABLE_XBITS`], `[version u8][expires u64]` (9 bytes; the packet
//! time the bit lapses), with a timer at that time that deletes it; an
//! expired record still read counts as unset. A bit's name enters the key as
//! its 64-bit FNV-1a hash (a pair of IPv6 addresses and the name would not
//! fit a key). As with `threshold` ([`crate::threshold`]) the records are
//! touched only in batches where a rule using `xbits` matched: while the
//! batch is decided each such match is logged (rule, addresses, packet
//! time, its alert); after the batch's verdicts one round trip reads the
//! records the log names, the log is replayed in packet order — a match
//! whose `isset`/`isnotset` fails has its alert withheld, one whose
//! conditions hold applies its `set`/`unset`/`toggle` — and one more round
//! trip writes the changed records. So a condition never changes a verdict:
//! rules with an xbits condition are `alert` rules without flowbits changes
//! (others are refused at load). Expiry uses packet time only. Two
//! instances changing one bit at the same instant race (last write wins),
//! like Suricata's threads ("the order of sets and checks can be slightly
//! unpredictable").

use sluice_state::{Codec, DecodeError, Key, Namespace, Reader, StateStore, StoreError, Writer};
use sluice_wire::FlowKey;

use crate::records::Records;
use crate::rules::{Rule, XbitOp, XbitTrack};

/// Table of xbits.
pub const TABLE_XBITS: u8 = 4;

const VERSION: u8 = 1;

/// One bit's record: when it lapses (packet time, ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bit {
    /// The packet time from which the bit is no longer set.
    pub expires_ns: u64,
}

impl Codec for Bit {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(VERSION).u64(self.expires_ns);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != VERSION {
            return Err(DecodeError("unknown ips xbits record version"));
        }
        Ok(Bit {
            expires_ns: r.u64()?,
        })
    }
}

/// One xbits keyword of a rule, compiled.
#[derive(Debug, Clone, Copy)]
struct Op {
    op: XbitOp,
    track: XbitTrack,
    name: u64,
    expire_ns: u64,
}

/// A logged match of a rule using xbits.
#[derive(Debug, Clone, Copy)]
struct Use {
    rule: u32,
    flow: FlowKey,
    ts_ns: u64,
    /// The index of its alert in the batch's events, if it raised one.
    event: Option<usize>,
}

/// The rules' xbits and the buffers one batch's replay reuses.
#[derive(Default)]
pub(crate) struct Xbits {
    /// Per rule: its operations, in rule order (empty: no xbits).
    ops: Vec<Box<[Op]>>,
    log: Vec<Use>,
    /// The batch's bits as replayed.
    recs: Records<Bit>,
    /// Per logged use, the key of each of its operations.
    use_keys: Vec<u32>,
}

/// 64-bit FNV-1a.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Xbits {
    /// The xbits of `rules`.
    pub fn new(rules: &[Rule]) -> Xbits {
        Xbits {
            ops: rules
                .iter()
                .map(|r| {
                    r.xbits
                        .iter()
                        .map(|x| Op {
                            op: x.op,
                            track: x.track,
                            name: fnv(&x.name),
                            expire_ns: x.expire_secs as u64 * 1_000_000_000,
                        })
                        .collect()
                })
                .collect(),
            ..Xbits::default()
        }
    }

    /// True if rule `rule` uses xbits.
    #[inline]
    pub fn uses(&self, rule: u32) -> bool {
        self.ops.get(rule as usize).is_some_and(|o| !o.is_empty())
    }

    /// Logs a match of rule `rule` (which [`Xbits::uses`] xbits) on a packet
    /// of `flow` (as it travelled) at `ts_ns`, whose alert, if any, is
    /// `event` in the batch's events.
    pub fn log(&mut self, rule: u32, flow: FlowKey, ts_ns: u64, event: Option<usize>) {
        self.log.push(Use {
            rule,
            flow,
            ts_ns,
            event,
        });
    }

    /// Forgets the log (a batch starts).
    pub fn clear(&mut self) {
        self.log.clear();
    }

    fn key(ns: Namespace, op: &Op, flow: &FlowKey) -> Key {
        let mut payload = [0u8; 41];
        // Host bits are the host's whichever side names it (set with
        // `ip_dst`, tested with `ip_src`: Suricata's host table).
        payload[0] = if op.track == XbitTrack::IpPair { 2 } else { 1 };
        payload[1..9].copy_from_slice(&op.name.to_le_bytes());
        let (s, d) = (flow.src.as_bytes(), flow.dst.as_bytes());
        let parts: [&[u8]; 2] = match op.track {
            XbitTrack::IpSrc => [s, &[]],
            XbitTrack::IpDst => [d, &[]],
            // One record for both ways.
            XbitTrack::IpPair if s <= d => [s, d],
            XbitTrack::IpPair => [d, s],
        };
        let mut n = 9;
        for p in parts {
            payload[n..n + p.len()].copy_from_slice(p);
            n += p.len();
        }
        Key::new(ns, TABLE_XBITS, &payload[..n])
    }

    /// Replays the batch's logged matches in order against the stored bits:
    /// adds to `withhold` the indices (in the batch's events) of the alerts
    /// of matches whose xbits conditions fail, applies the others'
    /// operations and writes the bits they changed.
    pub fn apply(
        &mut self,
        ns: Namespace,
        withhold: &mut Vec<usize>,
        store: &mut dyn StateStore,
    ) -> Result<(), StoreError> {
        if self.log.is_empty() {
            return Ok(());
        }
        self.recs.clear();
        self.use_keys.clear();
        for u in &self.log {
            for op in self.ops[u.rule as usize].iter() {
                let k = self.recs.slot(Self::key(ns, op, &u.flow));
                self.use_keys.push(k);
            }
        }
        // A damaged record counts as an unset bit.
        self.recs.read(store)?;
        let mut at = 0;
        for u in &self.log {
            let ops = &self.ops[u.rule as usize];
            let ks = &self.use_keys[at..at + ops.len()];
            at += ops.len();
            let set = |b: Option<&Bit>| b.is_some_and(|b| u.ts_ns < b.expires_ns);
            let holds = ops.iter().zip(ks).all(|(op, &k)| match op.op {
                XbitOp::IsSet => set(self.recs.get(k)),
                XbitOp::IsNotSet => !set(self.recs.get(k)),
                _ => true,
            });
            if !holds {
                if let Some(e) = u.event {
                    withhold.push(e);
                }
                continue;
            }
            for (op, &k) in ops.iter().zip(ks) {
                let now_set = set(self.recs.get(k));
                let new = match op.op {
                    XbitOp::Set => Some(true),
                    XbitOp::Unset => Some(false),
                    XbitOp::Toggle => Some(!now_set),
                    _ => None,
                };
                match new {
                    Some(true) => self.recs.set(
                        k,
                        Some(Bit {
                            expires_ns: u.ts_ns.saturating_add(op.expire_ns),
                        }),
                    ),
                    Some(false) if self.recs.get(k).is_some() => self.recs.set(k, None),
                    _ => {}
                }
            }
        }
        self.recs.write(store, |ops, _, key, bit, changed| {
            if !changed {
                return;
            }
            match bit {
                Some(b) => {
                    ops.put_value(key, b);
                    // The bit lapses then: re-arming replaces an earlier timer.
                    ops.arm_timer(key, b.expires_ns);
                }
                None => {
                    ops.delete(key);
                }
            }
        })?;
        self.log.clear();
        Ok(())
    }
}
