//! Sluice's host agent (`sluiced run`).
//!
//! One agent runs per host. It registers with the controller and heartbeats
//! ([`control`]), accepts the host's whole configuration over HTTP ([`http`]),
//! starts and stops the NF instances the configuration lists ([`instances`]), and
//! forwards packets between VM ports (raw Ethernet on AF_PACKET sockets), NF
//! instances and peer hosts (Geneve over UDP) on one or more forwarding threads
//! ([`io`], `dataplane_threads`; flows sharded by their direction-invariant
//! hash, frames handed between threads by [`handoff`]) that run the sans-IO
//! core ([`dataplane`]).
//!
//! The data plane keeps forwarding with the last configuration it accepted while
//! the controller is unreachable; a configuration that cannot be installed is
//! refused whole and the old one stays.
//!
//! **Instance health and local failover.** Every NF instance sends a heartbeat
//! datagram ([`sluice_proto::InstanceHeartbeat`], magic `SLHB`) every 10 ms from
//! its data socket to the agent's Geneve address, carrying its counters and CPU
//! time. The data-plane thread records them; an instance silent for longer than
//! its adaptive timeout is suspected in the loop iteration that passes its
//! deadline (the loop wakes up for it). The timeout is the mean of its last 128
//! heartbeat intervals plus 5.6 deviations (phi-accrual's normal approximation
//! at phi = 8), at least `--suspect-ms` (30 ms) and at most 250 ms: a loaded
//! machine's late heartbeats widen it instead of failing live instances over.
//! An instance whose process exits is suspected at once (the supervisor looks
//! every 10 ms). In the same call every group
//! targeting it is rewritten ([`groups::failover_group`]: each of its hash ranges
//! goes to the next live target in ring order). Its heartbeats resuming restore
//! the controller's groups (a paused instance rejoins with no restart). An
//! instance never heard from is still starting: new flows avoid it while another
//! instance can take them. Packets arriving from the fabric for a group always
//! go to a local instance (never back to the fabric), so a remote sender's
//! traffic for a suspected instance lands on a local survivor, or is dropped
//! (`no_live_instance`) if there is none. Health goes to the controller in the
//! 50 ms heartbeat ([`sluice_proto::HostHeartbeat`]), and with the failover
//! events (timestamps) and pinned-flow counts to `GET /v1/status` and `/metrics`.
//!
//! **Flow pinning.** A group the configuration marks pinned
//! ([`sluice_proto::GroupPolicy`]) remembers each flow's first choice (both
//! directions) in a bounded table ([`groups::PinTable`]), so a new split moves
//! only new flows and a draining target keeps its flows until they idle out.

pub mod control;
pub mod dataplane;
pub mod eve;
pub mod gro;
pub mod groups;
pub mod handoff;
pub mod http;
pub mod instances;
pub mod io;
pub mod meter;
pub mod settings;
pub mod siem;
pub mod supervise;
#[cfg(feature = "testing")]
pub mod testing;

pub use control::{run, Agent, AgentError, AgentOptions, AgentState, DeltaRefusal};
pub use dataplane::{ConfigError, Dataplane, ROUTER_MAC};
pub use io::{DataplaneThread, IoOptions};
