//! Running a function over hand-built frames: the harness the functions' own tests
//! share. It panics on what a test would call a bug (a frame that does not parse,
//! a store error), so it is for tests only.

use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_state::StateStore;
use sluice_wire::parse::{parse_into_opts, PacketMeta, ParseError, ParseOptions};

/// The parse a chain does by default (tunnels opened).
fn parse_frame(f: &[u8]) -> Result<PacketMeta, ParseError> {
    let mut m = PacketMeta::default();
    parse_into_opts(f, &mut m, &ParseOptions::default()).map(|()| m)
}

use crate::{Ctx, Emitted, Event, NetworkFunction, NfError, Streams};

/// What one batch produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Each packet's verdict, in order.
    pub verdicts: Vec<Verdict>,
    /// Each packet's bytes after the function (rewrites included).
    pub frames: Vec<Vec<u8>>,
    /// Extra frames the function emitted.
    pub emitted: Vec<Emitted>,
    /// Events it raised.
    pub events: Vec<Event>,
}

/// Runs `frames` (bytes, timestamp) through `f` as one batch, at the time of the
/// newest frame. Also checks that every live packet's metadata still describes its
/// bytes (a rewriting function must keep them in step).
pub fn run_frames(
    f: &mut dyn NetworkFunction,
    store: &mut dyn StateStore,
    frames: &[(Vec<u8>, u64)],
) -> Outcome {
    let mut pool = PacketPool::new(frames.len().max(1));
    let mut b = Batch::with_capacity(frames.len());
    for (fr, ts) in frames {
        assert!(b.push_frame(&mut pool, fr, *ts, 0), "frame fits a buffer");
    }
    for p in &mut b.pkts {
        p.meta = parse_frame(p.data()).expect("test frames parse");
    }
    let streams = Streams::default();
    let (mut events, mut emitted) = (Vec::new(), Vec::new());
    let mut ctx = Ctx {
        now_ns: frames.iter().map(|f| f.1).max().unwrap_or(0),
        stage: 0,
        streams: &streams,
        events: &mut events,
        emit: &mut emitted,
    };
    f.process(&mut b, &mut ctx, store)
        .expect("the store answers");
    for p in &b.pkts {
        if p.is_live() && p.meta.is_ip() {
            assert_eq!(
                parse_frame(p.data()).expect("still parses").flow,
                p.meta.flow,
                "metadata in step with bytes"
            );
        }
    }
    Outcome {
        verdicts: b.pkts.iter().map(|p| p.verdict).collect(),
        frames: b.pkts.iter().map(|p| p.data().to_vec()).collect(),
        emitted,
        events,
    }
}

/// Runs `f`'s timers at `now` and returns the events they raised.
pub fn run_timers(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, now: u64) -> Vec<Event> {
    with_ctx(now, |ctx| f.on_timers(ctx, store))
}

/// Runs `call` with a context at `now` without streams; returns the events.
fn with_ctx(now: u64, call: impl FnOnce(&mut Ctx<'_>) -> Result<(), NfError>) -> Vec<Event> {
    let streams = Streams::default();
    let (mut events, mut emit) = (Vec::new(), Vec::new());
    let mut ctx = Ctx {
        now_ns: now,
        stage: 0,
        streams: &streams,
        events: &mut events,
        emit: &mut emit,
    };
    call(&mut ctx).expect("the store answers");
    events
}

/// Runs `f`'s end-of-processing flush at `now` and returns the events it raised.
pub fn flush(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, now: u64) -> Vec<Event> {
    with_ctx(now, |ctx| f.flush(ctx, store))
}

/// The value of one of `f`'s counters (panics if it has none of that name).
pub fn counter(f: &dyn NetworkFunction, name: &str) -> u64 {
    let mut v = Vec::new();
    f.counters(&mut v);
    v.into_iter()
        .find(|c| c.0 == name)
        .unwrap_or_else(|| panic!("no counter `{name}`"))
        .1
}

pub use sluice_state::testing::Interleave;
