//! Sluice's host agent (`sluiced run`).
//!
//! One agent runs per host. It registers with the controller and heartbeats
//! ([`control`]), accepts the host's whole configuration over HTTP ([`api`]),
//! starts and stops the NF instances the configuration lists ([`instances`]), and
//! forwards packets between VM ports (raw Ethernet on AF_PACKET sockets), NF
//! instances and peer hosts (Geneve over one UDP socket) on a data-plane thread
//! ([`io`]) that runs the sans-IO core ([`dataplane`]).
//!
//! The data plane keeps forwarding with the last configuration it accepted while
//! the controller is unreachable; a configuration that cannot be installed is
//! refused whole and the old one stays.

pub mod api;
pub mod control;
pub mod dataplane;
pub mod instances;
pub mod io;
pub mod testing;

pub use control::{run, Agent, AgentCore, AgentError, AgentOptions};
pub use dataplane::{ConfigError, Dataplane, ROUTER_MAC};
pub use io::{DataplaneThread, IoOptions};
