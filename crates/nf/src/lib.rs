//! The interface every Sluice network function implements.
//!
//! A function is sans-IO: it is handed a [`Batch`] of parsed packets, a [`Ctx`]
//! with what the chain computed once for all its functions (the time, reassembled
//! stream bytes) and where to put events and extra packets, and a [`StateStore`]
//! through which it reads and writes all its dynamic state. It sets each packet's
//! verdict and may rewrite it. It never touches a socket or a clock.
//!
//! The expected shape of `process`, after StatelessNF §4.2: one pass over the batch
//! gathering the state keys it needs into an [`sluice_state::Ops`], one `execute`
//! (one round trip for a remote store), one pass deciding and queueing writes, one
//! `execute` for the writes. Two round trips per batch, whatever its size.
//! [`batch`] is that skeleton, shared by the functions.

pub mod batch;
pub mod event;
#[cfg(feature = "testing")]
pub mod testing;

pub use event::{Alert, AlertAction, Event, FlowRecord};
pub use sluice_packet::{Batch, DropReason, Packet, Verdict};
pub use sluice_reassembly::streams::{StreamChunk, Streams};
pub use sluice_state::{Namespace, StateStore, StoreError};

/// An error that stops a function from deciding a batch. The chain drops the
/// batch's undecided packets (fail closed) and counts the error; it never panics.
#[derive(Debug, thiserror::Error)]
pub enum NfError {
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored value could not be decoded.
    #[error(transparent)]
    Decode(#[from] sluice_state::DecodeError),
}

/// A frame a function wants sent in addition to the batch (e.g. a TCP RST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    /// The whole Ethernet frame.
    pub frame: Vec<u8>,
    /// Index of the batch packet it answers, so the data plane can send it back out
    /// of the port that packet came in on.
    pub in_reply_to: usize,
}

/// What the chain provides to a function for one batch.
pub struct Ctx<'a> {
    /// In `process`, the time of the batch (its newest packet's timestamp);
    /// decisions about state use each packet's own `ts_ns`, so they do not
    /// depend on how packets are batched. In `on_timers`, the time the timers
    /// run at: never later than the oldest packet of the batch that follows,
    /// so a timer removes only what that batch's packets would find expired.
    /// In nanoseconds.
    pub now_ns: u64,
    /// This function's position in its chain; used as [`DropReason::stage`].
    pub stage: u8,
    /// Reassembled stream bytes per packet, if the function asked for them.
    pub streams: &'a Streams,
    /// Where alerts and flow records go.
    pub events: &'a mut Vec<Event>,
    /// Extra frames to send.
    pub emit: &'a mut Vec<Emitted>,
}

/// A network function. See the crate documentation.
pub trait NetworkFunction: Send {
    /// The function's type, e.g. `"firewall"`.
    fn kind(&self) -> &'static str;

    /// The state namespace of this function (shared by all its instances).
    fn namespace(&self) -> Namespace;

    /// True if the function consumes reassembled TCP streams ([`Ctx::streams`]).
    fn wants_streams(&self) -> bool {
        false
    }

    /// True if the function also reads the frames the chain's parse
    /// refused (dropped at stage `u8::MAX` before any function runs),
    /// never changing their verdict: the chain then calls
    /// [`NetworkFunction::process`] on a batch even when none of its
    /// packets is live. Default: false (such frames are nobody's).
    fn sees_malformed(&self) -> bool {
        false
    }

    /// True if the function reads the stream events reassembly decides
    /// ([`Streams::events`]); they are decided only then.
    fn wants_stream_events(&self) -> bool {
        false
    }

    /// Decides the verdict of every live packet of `batch`.
    fn process(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError>;

    /// Appends to `ops` the reads [`NetworkFunction::process`] would make for
    /// `batch`'s packets of records its cache hints mark as the packet's own
    /// flow's (`get_owned`, `get_present`), computed from the packets' parsed
    /// metadata alone, so that a pipelining caller can fetch them while it
    /// processes earlier batches (docs/STATE.md, "Pipelining"). Only ever a
    /// hint: a read missing here is made by `process` as usual, and one that
    /// `process` does not make costs a wasted lookup. Default: none.
    fn prefetch(&self, _batch: &Batch, _ops: &mut sluice_state::Ops) {}

    /// Handles the function's timers that expired at `ctx.now_ns` (idle timeouts,
    /// port releases). Called periodically by the chain, not per batch.
    fn on_timers(
        &mut self,
        _ctx: &mut Ctx<'_>,
        _store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        Ok(())
    }

    /// Called once when processing ends (end of a trace, shutdown), e.g. to export
    /// records of flows still open.
    fn flush(&mut self, _ctx: &mut Ctx<'_>, _store: &mut dyn StateStore) -> Result<(), NfError> {
        Ok(())
    }

    /// Problems found in the configuration that did not stop the function from
    /// starting (e.g. IPS rules skipped for an unsupported keyword), each naming its
    /// file and line. Shown to the operator when the chain is loaded.
    fn config_warnings(&self, _out: &mut Vec<String>) {}

    /// Function-specific counters (name, value) for summaries and metrics, e.g.
    /// `("alerts", 3)`. Names are snake_case and stable.
    fn counters(&self, _out: &mut Vec<(&'static str, u64)>) {}

    /// Replaces the health and drain states of the function's backends (a
    /// load balancer's): every backend `states` does not name is
    /// [`BackendState::Up`]. Applied between batches, at run time, without
    /// losing any flow. Returns how many configured backends an entry
    /// matched. Default: the function has no backends (0).
    fn set_backend_states(&mut self, _states: &[BackendAdmin]) -> usize {
        0
    }
}

/// What a load balancer may do with one backend, as health checks and
/// operators decide (the GWLB/haproxy model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum BackendState {
    /// Takes new connections.
    #[default]
    Up,
    /// Failed its health checks (or its host is down): no new connections;
    /// its existing connections keep it (GWLB's default: a flow is never
    /// moved to another backend, and a backend that was only slow to answer
    /// a check keeps serving them).
    Down,
    /// Drained by an operator: no new connections, existing ones continue
    /// until the deregistration delay passes.
    Draining,
    /// Drained past its deregistration delay: out of consideration entirely;
    /// packets of its remaining connections are dropped.
    Removed,
}

impl BackendState {
    /// The state's name (`up`, `down`, `draining`, `removed`).
    pub fn as_str(self) -> &'static str {
        match self {
            BackendState::Up => "up",
            BackendState::Down => "down",
            BackendState::Draining => "draining",
            BackendState::Removed => "removed",
        }
    }

    /// Whether a backend in this state may take new connections.
    pub fn takes_new(self) -> bool {
        self == BackendState::Up
    }
}

impl std::fmt::Display for BackendState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of the backend(s) at `addr` ([`NetworkFunction::set_backend_states`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendAdmin {
    /// The backend's address.
    pub addr: sluice_wire::IpAddr,
    /// Its port; `None`: every backend at `addr`, whatever its port.
    pub port: Option<u16>,
    /// What the function may do with it.
    pub state: BackendState,
}
