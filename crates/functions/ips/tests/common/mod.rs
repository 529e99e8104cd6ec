//! The harness the keyword tests share: an IPS built from rule text, and a
//! batch of frames run through a reassembler and the IPS over a store.

use std::path::Path;

use sluice_ips::{build, Config, Ips};
use sluice_nf::{Alert, AlertAction, Ctx, Event, NetworkFunction, Streams};
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_reassembly::Reassembler;
use sluice_state::{LocalStore, Namespace};
use sluice_wire::parse::parse_frame;

/// An IPS of `rules` with `vars`; loading must raise no warning.
#[allow(dead_code)] // Not used by every test crate.
pub fn ips_with(rules: &[&str], vars: &[(&str, &str)]) -> Ips {
    let cfg = Config {
        rule_files: vec![],
        rules: rules.iter().map(|s| s.to_string()).collect(),
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: None,
        http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
        data_dir: None,
        dataset_dirs: vec![],
    };
    let i = build(&cfg, Namespace(2), Path::new(".")).unwrap();
    assert!(i.warnings().is_empty(), "{:?}", i.warnings());
    i
}

/// Runs `frames` as one batch (through the reassembler) over `st`, the
/// packets 1 µs apart from `t0`; returns the alerts as (sid, action) and
/// which packets were dropped.
pub fn run_in(
    ips: &mut Ips,
    st: &mut LocalStore,
    frames: &[Vec<u8>],
    t0: u64,
) -> (Vec<(u32, AlertAction)>, Vec<bool>) {
    let (alerts, dropped) = alerts_in(ips, st, frames, t0);
    (
        alerts.into_iter().map(|a| (a.sid, a.action)).collect(),
        dropped,
    )
}

/// [`run_in`] returning the alerts whole.
pub fn alerts_in(
    ips: &mut Ips,
    st: &mut LocalStore,
    frames: &[Vec<u8>],
    t0: u64,
) -> (Vec<Alert>, Vec<bool>) {
    let mut r = Reassembler::new(Namespace(1), Default::default());
    // A buffer for every frame: a frame the pool refused would be left out
    // of the batch silently.
    let mut pool = PacketPool::new(frames.len().max(64));
    // As a chain does: stream events only for an IPS that reads them.
    let mut streams = Streams {
        want_events: ips.wants_stream_events(),
        ..Streams::default()
    };
    let mut b = Batch::with_capacity(frames.len());
    for (k, f) in frames.iter().enumerate() {
        assert!(
            b.push_frame(&mut pool, f, t0 + k as u64 * 1000, 0),
            "frame {k} refused"
        );
    }
    for p in &mut b.pkts {
        p.meta = parse_frame(p.data()).unwrap();
    }
    r.process(&mut b, st, &mut streams, 1).unwrap();
    let mut events = Vec::new();
    let mut emit = Vec::new();
    let mut ctx = Ctx {
        now_ns: t0 + frames.len() as u64 * 1000,
        stage: 2,
        streams: &streams,
        events: &mut events,
        emit: &mut emit,
    };
    ips.process(&mut b, &mut ctx, st).unwrap();
    let dropped = b
        .pkts
        .iter()
        .map(|p| p.verdict != Verdict::Forward)
        .collect();
    let alerts = events
        .into_iter()
        .filter_map(|e| match e {
            Event::Alert(a) => Some(a),
            Event::Flow(_) => None,
        })
        .collect();
    (alerts, dropped)
}

/// Runs each frame as its own batch over one store (what a split unit
/// leaves pending goes through the store between segments); returns the
/// alerts' sids in order, which packets were dropped, and the counters.
#[allow(dead_code)] // Used by the protocol tests, not by every test crate.
pub fn run_each(mut ips: Ips, frames: &[Vec<u8>]) -> (Vec<u32>, Vec<bool>, sluice_ips::Counters) {
    let mut st = LocalStore::new();
    let (mut out, mut dropped) = (Vec::new(), Vec::new());
    for (k, f) in frames.iter().enumerate() {
        let (a, d) = run_in(
            &mut ips,
            &mut st,
            std::slice::from_ref(f),
            1_000_000_000 + k as u64 * 1_000_000,
        );
        out.extend(a.into_iter().map(|a| a.0));
        dropped.extend(d);
    }
    (out, dropped, *ips.stats())
}

/// `data` cut at `cuts` (sorted; cuts outside it or repeated are skipped).
#[allow(dead_code)] // Used by the protocol tests, not by every test crate.
pub fn pieces(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&data.len())) {
        if c > at && c <= data.len() {
            out.push(data[at..c].to_vec());
            at = c;
        }
    }
    out
}
