//! The controller of Sluice. A request travels: `http` (the thin HTTP edge)
//! → [`resources`] (one module per resource, parsing it into an
//! [`resources::Action`]) → [`executor`] (carries the action out) →
//! [`reconcile::Reconciler`] (the sans-IO core: desired and observed state,
//! every decision, taking `now` as an argument) → [`store`] (the desired state,
//! durable) and `pusher` (each changed host's configuration to its agent).
//! [`service`] runs these on threads: the only place that reads the clock.
//!
//! * [`desired`]: the desired state (tenants, hosts, VMs, NF instances) and the
//!   pure functions deciding placement, port ids and every host's
//!   [`sluice_proto::AgentConfig`];
//! * [`compile`](mod@compile): the chain compiler, a pure function from a
//!   validated tenant spec and a placement to the FIB of every host (Stratos
//!   §3.2, §6);
//! * [`distribution`]: how a middlebox's flows are split among its instances
//!   (`uniform`, or `network-aware`: rack by rack, shares from the aligned LP);
//! * [`blocks`]: blocks on request, compiled into drop entries on every host
//!   of their tenant;
//! * [`lease`]: the ownership-lease gate of `state: cached` middleboxes;
//! * [`leader`]: replicated controllers, one leading (election on etcd);
//! * [`measure`]: the agents' chain measurements summed into scaler metrics;
//! * [`model`]: the JSON bodies of the REST API (`docs/openapi.yaml`);
//! * [`change`]: what a change does before it is made (dry runs, `force`,
//!   409s); [`audit`]: the log of every change requested;
//! * [`store_acl`]: one state store user per tenant, confined to its keys;
//! * [`store_health`]: the state store's nodes watched (reachable, role, lost
//!   data), sans-IO; [`store_probe`] asks them;
//! * [`answer`]: a reply or error as status, headers and body (errors as RFC
//!   9457 problem details);
//! * [`traffic`]: per-chain packet and drop rates over time (the dashboard's
//!   `GET /v1/traffic`), sampled from the agents' counters; `ui`: the
//!   dashboard's page, script and style, compiled in (`/ui/`);
//! * [`client`]: a blocking client of that API (the CLI and the testbed use it).

mod agent_client;
pub mod answer;
pub mod audit;
pub mod blocks;
pub mod change;
pub mod client;
pub mod compile;
pub mod consolidation;
pub mod desired;
pub mod distribution;
pub mod error;
pub mod executor;
pub mod fabric;
mod http;
pub mod leader;
pub mod lease;
pub mod liveness;
pub mod measure;
pub mod metrics;
pub mod model;
pub mod placement;
mod pusher;
pub mod reconcile;
pub mod resources;
pub mod service;
pub mod store;
pub mod store_acl;
pub mod store_health;
pub mod store_probe;
pub mod tls;
pub mod traffic;
mod ui;
pub mod uplinks;

pub use compile::{compile, CompileError, Compiled, HostFib, Placement};
pub use resources::{OPENAPI_YAML, ROUTES};
pub use service::{serve, ControllerError, ServerHandle, ServerOptions};
