//! The controller of Sluice.
//!
//! * [`compile`](mod@compile): the chain compiler, a pure function from a validated tenant spec
//!   and a placement to the FIB of every host (Stratos §3.2, §6);
//! * [`place`]: the desired state (tenants, hosts, VMs, NF instances) and the pure
//!   functions deciding placement, port ids and every host's
//!   [`sluice_proto::AgentConfig`];
//! * [`db`]: that state, durable in SQLite;
//! * [`server`]: the REST API ([`serve`]) and the pusher sending configurations to
//!   agents; `docs/openapi.yaml` describes the API;
//! * [`client`]: a blocking client of that API (the CLI and the testbed use it).

pub mod api;
pub mod client;
pub mod compile;
pub mod db;
pub mod lease;
pub mod measure;
pub mod place;
pub mod server;

pub use compile::{compile, CompileError, Compiled, HostFib, Placement};
pub use server::{serve, ControllerError, ServerHandle, ServerOptions};
