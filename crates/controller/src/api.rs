//! The JSON bodies of the controller's REST API (shared by the server and
//! [`crate::client`]). `docs/openapi.yaml` describes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_proto::TenantFib;

/// Every error answer: `{"error": "..."}`, naming the field or object at fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What is wrong.
    pub error: String,
}

/// An NF instance: where it was placed and, in `GET /v1/instances`, what its
/// agent reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// `tenant/middlebox/k`.
    pub name: String,
    /// Tenant.
    pub tenant: String,
    /// Middlebox (element name).
    pub middlebox: String,
    /// Host id.
    pub host: u32,
    /// Port id on the host.
    pub port: u16,
    /// `alive`, `dead`, `unknown` (agent unreachable or not reporting it yet) or
    /// `placed` (in answers that do not ask the agents).
    pub state: String,
    /// The process runs (`null`: unknown).
    #[serde(default)]
    pub alive: Option<bool>,
    /// Its process id, if the agent reports one.
    #[serde(default)]
    pub pid: Option<u32>,
}

/// What applying a tenant did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplySummary {
    /// Tenant.
    pub tenant: String,
    /// Its VNI.
    pub vni: u32,
    /// Spec generation (increases with each different spec applied).
    pub generation: u64,
    /// False when the same spec was already applied (nothing changed).
    pub changed: bool,
    /// Chain names, in spec order.
    pub chains: Vec<String>,
    /// Its NF instances.
    pub instances: Vec<InstanceInfo>,
    /// FIB entries per host id.
    pub entries: BTreeMap<u32, usize>,
    /// Hosts whose configuration changed, and their new version.
    pub pushed: BTreeMap<u32, u64>,
}

/// A tenant in `GET /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantSummary {
    /// Tenant.
    pub tenant: String,
    /// VNI.
    pub vni: u32,
    /// Spec generation.
    pub generation: u64,
    /// Number of chains.
    pub chains: usize,
    /// Number of NF instances.
    pub instances: usize,
    /// FIB entries over every host.
    pub entries: usize,
}

/// `GET /v1/tenants/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantDetail {
    /// Tenant.
    pub tenant: String,
    /// VNI.
    pub vni: u32,
    /// Spec generation.
    pub generation: u64,
    /// The spec as applied.
    pub spec: String,
    /// Chain names.
    pub chains: Vec<String>,
    /// NF instances (as placed).
    pub instances: Vec<InstanceInfo>,
    /// FIB entries per host id.
    pub entries: BTreeMap<u32, usize>,
    /// Registered VMs of the tenant.
    pub vms: Vec<String>,
}

/// A host in `GET /v1/hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host id.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Tunnel endpoint.
    pub underlay: String,
    /// Agent API base URL.
    pub api: String,
    /// Milliseconds since its last heartbeat (`null`: none since the controller
    /// started).
    pub last_heartbeat_ms: Option<u64>,
    /// Heard from within the last second.
    pub alive: bool,
    /// Version of the configuration the controller wants it to run.
    pub desired_version: u64,
    /// Version its last heartbeat reported (`null`: none yet).
    pub reported_version: Option<u64>,
    /// `reported_version == desired_version`.
    pub in_sync: bool,
    /// Why the last push failed, if it did.
    pub push_error: Option<String>,
}

/// The answer to a registration or heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAck {
    /// Host id.
    pub host: u32,
    /// Version the controller wants it to run (a push follows if it differs).
    pub desired_version: u64,
}

/// A VM in `GET /v1/vms` and the answer to its registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmInfo {
    /// Tenant.
    pub tenant: String,
    /// VM name.
    pub name: String,
    /// Host id.
    pub host: u32,
    /// Port id it was given on the host.
    pub port: u16,
    /// Host-side interface.
    pub iface: String,
    /// MAC.
    pub mac: String,
    /// Address.
    pub addr: String,
    /// The tenant's gateway.
    pub gateway: bool,
    /// Its tenant is applied (so the port is configured on the host).
    pub applied: bool,
}

/// A chain in `GET /v1/chains`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainInfo {
    /// Tenant.
    pub tenant: String,
    /// Chain name.
    pub chain: String,
    /// Chain id in the tunnel option (forward direction).
    pub id: u16,
    /// Chain id of the replies, for a bidirectional chain.
    pub reverse_id: Option<u16>,
    /// Element names, source first.
    pub path: Vec<String>,
    /// Replies cross the middleboxes in reverse.
    pub bidirectional: bool,
    /// Off-path middleboxes receiving a copy.
    pub mirror: Vec<String>,
}

/// `GET /v1/hosts/{id}/fib`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFibInfo {
    /// Host id.
    pub host: u32,
    /// Configuration version holding these entries.
    pub version: u64,
    /// Per tenant entries and groups.
    pub tenants: Vec<TenantFib>,
}

/// The answer to a deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// What was deleted (`tenant acme`, `vm acme/web-a1`).
    pub deleted: String,
    /// Hosts whose configuration changed, and their new version.
    pub pushed: BTreeMap<u32, u64>,
}
