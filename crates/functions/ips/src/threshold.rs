//! `threshold` and `detection_filter`: which alerts of a rule are raised, counted
//! per tracked key (source, destination, the address pair, the flow, or the rule) over time windows, as
//! Suricata counts them (detect-engine-threshold.c).
//!
//! The counters are state like any other: one record per (rule, tracked key) in
//! table [`TABLE_THRESHOLD`], `[version u8][window start u64][count u32]`
//! (13 bytes), with a timer at the window's end that deletes it. They are touched
//! only in batches that raised an alert of a thresholded rule: after the batch's
//! decisions, one round trip reads the records those alerts need, alerts are kept
//! or withheld in packet order, and one more writes the records back. The
//! records are shared by every flow (and every instance) with the same key, so
//! they carry no cache hint: two instances counting the same key in the same
//! instant can lose one increment (no compare-and-set), like other shared
//! counters updated without atomics.

use rustc_hash::FxHashMap;
use sluice_nf::Event;
use sluice_state::{Codec, DecodeError, Key, Namespace, Reader, StateStore, StoreError, Writer};

use crate::records::Records;
use crate::rules::{Rule, Threshold, ThresholdKind, Track};

/// Table of threshold windows.
pub const TABLE_THRESHOLD: u8 = 2;

/// One tracked key's current window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// When the window started (the packet time of its first match).
    pub start_ns: u64,
    /// Matches counted in it (reset by `type threshold` at each alert).
    pub count: u32,
}

const VERSION: u8 = 1;

impl Codec for Window {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(VERSION).u64(self.start_ns).u32(self.count);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != VERSION {
            return Err(DecodeError("unknown ips threshold record version"));
        }
        Ok(Window {
            start_ns: r.u64()?,
            count: r.u32()?,
        })
    }
}

impl Window {
    /// Counts a match at `ts_ns`; returns whether its alert is raised.
    pub fn count_match(w: &mut Option<Window>, t: &Threshold, ts_ns: u64) -> bool {
        let len = t.seconds as u64 * 1_000_000_000;
        match w {
            // A match `seconds` after the window's start is still in it
            // (Suricata compares with `<=`).
            Some(x) if ts_ns.saturating_sub(x.start_ns) <= len => x.count += 1,
            _ => {
                *w = Some(Window {
                    start_ns: ts_ns,
                    count: 1,
                })
            }
        }
        let Some(x) = w else { return false };
        match t.kind {
            ThresholdKind::Limit => x.count <= t.count,
            ThresholdKind::Threshold => {
                if x.count >= t.count {
                    x.count = 0;
                    true
                } else {
                    false
                }
            }
            ThresholdKind::Both => x.count == t.count,
            ThresholdKind::DetectionFilter => x.count > t.count,
        }
    }
}

/// The thresholded rules and the buffers one batch's accounting reuses.
#[derive(Default)]
pub(crate) struct Thresholds {
    by_sid: FxHashMap<u32, Threshold>,
    /// The batch's windows as counted.
    recs: Records<Window>,
    /// Per slot of `recs`: its rule's `seconds`.
    secs: Vec<u64>,
    /// Per candidate alert: (event index, slot).
    cand: Vec<(usize, u32)>,
    keep: Vec<bool>,
}

impl Thresholds {
    /// The thresholds of `rules`.
    pub fn new(rules: &[Rule]) -> Thresholds {
        Thresholds {
            by_sid: rules
                .iter()
                .filter_map(|r| r.threshold.map(|t| (r.sid, t)))
                .collect(),
            ..Thresholds::default()
        }
    }

    /// Keeps or withholds the alerts in `events[start..]` of thresholded rules;
    /// returns how many were withheld.
    pub fn apply(
        &mut self,
        ns: Namespace,
        events: &mut Vec<Event>,
        start: usize,
        store: &mut dyn StateStore,
    ) -> Result<usize, StoreError> {
        if self.by_sid.is_empty() {
            return Ok(0);
        }
        self.cand.clear();
        self.recs.clear();
        self.secs.clear();
        for (i, e) in events.iter().enumerate().skip(start) {
            let Event::Alert(a) = e else { continue };
            let Some(t) = self.by_sid.get(&a.sid) else {
                continue;
            };
            let mut payload = [0u8; 48];
            payload[..4].copy_from_slice(&a.sid.to_le_bytes());
            let (src, dst) = (a.flow.src.as_bytes(), a.flow.dst.as_bytes());
            let (lo, hi) = if src <= dst { (src, dst) } else { (dst, src) };
            // The flow either way: its canonical key.
            let mut c = a.flow.canonical().0;
            // An ICMP flow is its two addresses (Suricata's flow key has no
            // echo identifier).
            if matches!(c.proto, 1 | 58) {
                (c.src_port, c.dst_port) = (0, 0);
                if c.src.as_bytes() > c.dst.as_bytes() {
                    std::mem::swap(&mut c.src, &mut c.dst);
                }
            }
            let (cs, cd) = (c.src.as_bytes(), c.dst.as_bytes());
            let mut rest = [0u8; 9];
            rest[..2].copy_from_slice(&c.src_port.to_le_bytes());
            rest[2..4].copy_from_slice(&c.dst_port.to_le_bytes());
            rest[4] = c.proto;
            rest[5..].copy_from_slice(&c.zone.to_le_bytes());
            let mut n = 5;
            let parts: &[&[u8]] = match t.track {
                Track::BySrc => &[src],
                Track::ByDst => &[dst],
                Track::ByRule => &[],
                Track::ByBoth => &[lo, hi],
                Track::ByFlow => &[cs, cd, &rest],
            };
            payload[4] = t.track as u8;
            for p in parts {
                payload[n..n + p.len()].copy_from_slice(p);
                n += p.len();
            }
            let key = Key::new(ns, TABLE_THRESHOLD, &payload[..n]);
            let k = self.recs.slot(key);
            if k as usize == self.secs.len() {
                self.secs.push(t.seconds as u64);
            }
            self.cand.push((i, k));
        }
        if self.cand.is_empty() {
            return Ok(0);
        }
        // A damaged record counts as no record: a new window starts.
        self.recs.read(store)?;
        self.keep.clear();
        self.keep.resize(events.len() - start, true);
        let mut withheld = 0;
        for &(i, k) in &self.cand {
            let Event::Alert(a) = &events[i] else {
                continue;
            };
            let Some(t) = self.by_sid.get(&a.sid) else {
                continue;
            };
            if !Window::count_match(self.recs.get_mut(k), t, a.ts_ns) {
                self.keep[i - start] = false;
                withheld += 1;
            }
        }
        let secs = &self.secs;
        self.recs.write(store, |ops, slot, key, w, _| {
            if let Some(w) = w {
                ops.put_value(key, w);
                // Just after the window's end (a match at its end is in
                // it); re-arming replaces an earlier window's timer.
                let end = secs[slot as usize] * 1_000_000_000 + 1;
                ops.arm_timer(key, w.start_ns.saturating_add(end));
            }
        })?;
        if withheld > 0 {
            let mut j = 0;
            let keep = &self.keep;
            events.retain(|_| {
                j += 1;
                j <= start || keep[j - 1 - start]
            });
        }
        Ok(withheld)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: ThresholdKind, count: u32) -> Threshold {
        Threshold {
            kind,
            track: Track::BySrc,
            count,
            seconds: 10,
        }
    }

    #[test]
    fn a_match_at_the_window_s_end_is_in_it() {
        let s = 1_000_000_000u64;
        // limit 1: the match exactly 10 s after the first is withheld (one
        // window, as Suricata's `<=`), one just after starts a new window.
        let lim = t(ThresholdKind::Limit, 1);
        let mut w = None;
        assert!(Window::count_match(&mut w, &lim, s));
        assert!(!Window::count_match(&mut w, &lim, 11 * s));
        assert!(Window::count_match(&mut w, &lim, 11 * s + 1));
        // detection_filter 1: the second match, at the end, is the first
        // past the count.
        let df = t(ThresholdKind::DetectionFilter, 1);
        let mut w = None;
        assert!(!Window::count_match(&mut w, &df, 0));
        assert!(Window::count_match(&mut w, &df, 10 * s));
    }
}
