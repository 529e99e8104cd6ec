//! The JSON bodies of the controller's REST API (shared by the server and
//! [`crate::client`]). `docs/openapi.yaml` describes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_proto::TenantFib;

/// The error answers of earlier releases: `{"error": "..."}`. Every error
/// answer still has this member (equal to [`Problem::detail`]) for one
/// release; deprecated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What is wrong.
    pub error: String,
}

/// Every error answer (`application/problem+json`, RFC 9457); extension
/// members (a 409's `recent_changes`, a refused change's `plan`) are left in
/// `extensions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// The problem type, `https://sluice.dev/problems/<slug>` or
    /// `about:blank`.
    #[serde(default, rename = "type")]
    pub problem_type: Option<String>,
    /// The problem type in words.
    #[serde(default)]
    pub title: Option<String>,
    /// The HTTP status.
    #[serde(default)]
    pub status: Option<u16>,
    /// What is wrong, naming the field or object at fault.
    #[serde(default)]
    pub detail: Option<String>,
    /// The request's path.
    #[serde(default)]
    pub instance: Option<String>,
    /// The same as `detail` (deprecated; what older controllers send alone).
    #[serde(default)]
    pub error: Option<String>,
    /// Extension members.
    #[serde(flatten)]
    pub extensions: BTreeMap<String, serde_json::Value>,
}

impl Problem {
    /// What the problem says is wrong: its `detail`, else its `error` (an
    /// older controller), else its `title`.
    pub fn message(&self) -> Option<&str> {
        self.detail
            .as_deref()
            .or(self.error.as_deref())
            .or(self.title.as_deref())
    }
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
    /// `alive`, `dead`, `unknown` (agent unreachable or not reporting it yet), or
    /// in answers that do not ask the agents: `placed`, `down` (out of its
    /// groups: reported dead or suspected). Whatever the agents say:
    /// `draining` (no new flows; removed once drained after a scale-in,
    /// stopped after an operator's drain) and `stopped` (an operator drained
    /// it: placed, no process, until undrained).
    pub state: String,
    /// The process runs (`null`: unknown).
    #[serde(default)]
    pub alive: Option<bool>,
    /// Its process id, if the agent reports one.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Under an operator's drain: when its delay ends (Unix ms; in the past
    /// for a stopped instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_until_ms: Option<u64>,
}

/// Where an NF instance runs and why it was put there (`GET /v1/placement`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementInfo {
    /// `tenant/middlebox/k`.
    pub name: String,
    /// Tenant.
    pub tenant: String,
    /// Middlebox (element name).
    pub middlebox: String,
    /// Host id.
    pub host: u32,
    /// Host name.
    pub host_name: String,
    /// The host's rack (`null`: it declared none).
    pub rack: Option<String>,
    /// The policy that chose the host (`null`: placed before reasons were
    /// kept).
    pub policy: Option<String>,
    /// Why the host was chosen, in words.
    pub reason: String,
    /// The part of its middlebox's flow-hash space it takes new flows for (0
    /// when out of its group; `null`: the tenant does not compile now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// Under network-aware distribution with classes of flows, its part of
    /// each class's split by class (the rack of the servers the flows are
    /// for; empty without classes).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub class_shares: std::collections::BTreeMap<String, f64>,
}

/// One rack's uplink, measured and predicted (`GET /v1/fabric/uplinks`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackUplink {
    /// Rack.
    pub rack: String,
    /// Declared capacity, bytes per second (`null`: none declared).
    pub capacity_bytes_per_s: Option<f64>,
    /// Measured bytes per second out of the rack over the last second: what
    /// the agents sent through the fabric to hosts in other racks, at wire
    /// size.
    pub up_bytes_per_s: f64,
    /// Measured bytes per second into the rack.
    pub down_bytes_per_s: f64,
    /// Measured bytes out of the rack since the controller started.
    pub up_bytes_total: u64,
    /// Measured bytes into the rack since then.
    pub down_bytes_total: u64,
    /// What network-aware distribution predicts its installed splits put on
    /// the uplink out of the rack, bytes per second, summed over tenants
    /// (the chains' traffic without the fabric's headers; `null` without a
    /// prediction).
    pub predicted_up_bytes_per_s: Option<f64>,
    /// The same into the rack.
    pub predicted_down_bytes_per_s: Option<f64>,
    /// The busier direction, measured, over the declared capacity.
    pub utilisation: Option<f64>,
    /// The busier direction, predicted, over the declared capacity.
    pub predicted_utilisation: Option<f64>,
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
    /// Only a dry run: nothing was changed (the other fields are empty).
    #[serde(default)]
    pub dry_run: bool,
    /// What the change does (or would do) to the tenant's spec, instances and
    /// FIB entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::change::ChangePlan>,
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
    /// The spec's `metadata.labels` (none for a spec in the flat format).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
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
    /// Heard from within the last second (or, in a fleet large enough that its
    /// agents heartbeat less often, within six of their intervals).
    pub alive: bool,
    /// Version of the configuration the controller wants it to run.
    pub desired_version: u64,
    /// Version its last heartbeat reported (`null`: none yet).
    pub reported_version: Option<u64>,
    /// `reported_version == desired_version`.
    pub in_sync: bool,
    /// Why the last push failed, if it did.
    pub push_error: Option<String>,
    /// Instance slots its NF instances take (`resources.slots` each).
    #[serde(default)]
    pub slots_used: u32,
    /// Instance slots it declared (`null`: no limit).
    #[serde(default)]
    pub slots_total: Option<u32>,
    /// Rack (locality domain) it declared (`null`: none).
    #[serde(default)]
    pub rack: Option<String>,
    /// Drained by an operator (`sluice drain host`): takes no new instance.
    #[serde(default)]
    pub drained: bool,
}

/// What `PUT /v1/hosts/{id}/drain` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDrainInfo {
    /// The drained host.
    pub host: u32,
    /// Instances placed on other hosts (`tenant/middlebox/k`, new host).
    pub moved: Vec<(String, u32)>,
    /// Instances left on it: `state: local` middleboxes, whose connections
    /// moving would lose (scale the middlebox in, or drain with `force`).
    pub kept: Vec<String>,
    /// With `force` only: tenants some of whose instances found no room
    /// elsewhere, and why (those instances run nowhere).
    pub unplaced: Vec<String>,
}

/// The answer to a registration or heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAck {
    /// Host id.
    pub host: u32,
    /// Version the controller wants it to run (a push follows if it differs).
    pub desired_version: u64,
    /// The agent's API certificate chain (PEM: its certificate, then the
    /// hosts' CA), when the heartbeat carried a certificate request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_cert: Option<String>,
    /// When that certificate expires (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_cert_not_after_ms: Option<u64>,
    /// How often the agent should heartbeat, milliseconds: 50 in a fleet of up
    /// to 40 hosts, more in a larger one so that the fleet's heartbeats stay
    /// within the controller's budget ([`crate::liveness`]). Absent (a
    /// controller from before the field): 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_ms: Option<u64>,
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
    /// Only a dry run: nothing was deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// What the deletion does (or would do), for a tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::change::ChangePlan>,
}

/// `PUT /v1/tenants/{name}/middleboxes/{mb}`: a middlebox's new instance count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleRequest {
    /// Instances wanted (1..=1024).
    pub instances: u64,
    /// For local-state middleboxes: how long a removed instance may drain before
    /// it is removed with flows still pinned to it (default 30000).
    #[serde(default)]
    pub drain_timeout_ms: Option<u64>,
}

/// A middlebox's instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MiddleboxInfo {
    /// Tenant.
    pub tenant: String,
    /// Middlebox.
    pub middlebox: String,
    /// Its function (`hyperapp` for a consolidated group).
    #[serde(default)]
    pub function: String,
    /// A consolidated group's members as `name:function`, in pipeline order
    /// (empty for any other middlebox).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// Instances wanted now (the scaled count, else the spec's).
    pub instances: u32,
    /// The spec's `instances`.
    pub spec_instances: u32,
    /// The count was set by scaling (not the spec).
    pub scaled: bool,
    /// `shared`, `cached` or `local` (where its instances keep flow state).
    pub state: String,
    /// `hash` or `pinned` (how flows choose among its instances).
    #[serde(default)]
    pub affinity: String,
    /// Packets per pipelined window of its instances (0: not pipelined).
    #[serde(default)]
    pub pipeline: usize,
    /// Worker threads per instance.
    #[serde(default = "one")]
    pub workers: usize,
    /// Its placed instances (draining ones included).
    pub placed: Vec<InstanceInfo>,
    /// Instances draining (no new flows; removed once their pinned flows end).
    pub draining: Vec<String>,
    /// Instances out of the groups because reported dead or suspected.
    pub down: Vec<String>,
    /// Hosts whose configuration changed, and their new version.
    #[serde(default)]
    pub pushed: BTreeMap<u32, u64>,
}

/// `POST /v1/tenants/{name}/chains/{chain}/metrics`: one application metric
/// sample (requests/s, latency).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSample {
    /// The value.
    pub value: f64,
    /// When it was taken, in milliseconds on the reporter's clock (any epoch, never
    /// going back); absent: now on the controller's monotonic clock. A chain's
    /// reporter should use one or the other consistently.
    #[serde(default)]
    pub at_ms: Option<u64>,
}

/// What a metric sample or a scaling request led to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingAck {
    /// Tenant.
    pub tenant: String,
    /// Chain.
    pub chain: String,
    /// Decisions carried out now (`add fw`, `remove ips`).
    pub decisions: Vec<String>,
    /// Instances per middlebox of the chain afterwards.
    pub counts: BTreeMap<String, u32>,
    /// A trial or pass is under way.
    pub scaling: bool,
    /// False if no scaler is configured for the chain (the sample was dropped).
    pub enabled: bool,
}

fn d_strategy() -> String {
    "greedy".into()
}
fn d_improve() -> f64 {
    0.10
}
fn d_trigger() -> f64 {
    0.25
}
fn d_sustain() -> u64 {
    5000
}
fn d_window() -> u64 {
    10_000
}
fn d_settle() -> f64 {
    0.3
}
fn d_cooldown() -> u64 {
    30_000
}
fn d_budget() -> u32 {
    16
}
fn d_metric() -> String {
    "reported".into()
}
fn d_metric_interval() -> u64 {
    1000
}

/// `PUT /v1/tenants/{name}/chains/{chain}/scaling`: the scaler of a chain
/// (Stratos §4.1.1; see `sluice_scaling::Config`). Every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingConfig {
    /// `greedy`, `none` or `all`.
    #[serde(default = "d_strategy")]
    pub strategy: String,
    /// `higher` (throughput: higher is better) or `lower` (latency). Default:
    /// `higher` for a reported metric, the agent metric's own otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// What the scaler follows: `reported` (samples the application POSTs to
    /// `.../metrics`), or one the agents measure at the chain's VMs:
    /// `handshake_ms` (mean TCP handshake time through the chain, lower is
    /// better), `connections` (handshakes completed per second) or `mbps`
    /// (traffic entering the chain, both directions).
    #[serde(default = "d_metric")]
    pub metric: String,
    /// How often an agent metric is sampled, ms.
    #[serde(default = "d_metric_interval")]
    pub metric_interval_ms: u64,
    /// Relative change a trial must bring to be kept (0.1 = 10%).
    #[serde(default = "d_improve")]
    pub improve: f64,
    /// Relative change from the settled level that triggers scaling.
    #[serde(default = "d_trigger")]
    pub trigger: f64,
    /// How long a change must last to trigger, ms.
    #[serde(default = "d_sustain")]
    pub sustain_ms: u64,
    /// How long a trial is observed, ms.
    #[serde(default = "d_window")]
    pub window_ms: u64,
    /// Fraction of a window ignored while a new instance warms up.
    #[serde(default = "d_settle")]
    pub settle: f64,
    /// Pause after scaling, ms.
    #[serde(default = "d_cooldown")]
    pub cooldown_ms: u64,
    /// Most instances the chain's middleboxes may have in total.
    #[serde(default = "d_budget")]
    pub budget: u32,
    /// Metric value at which performance is suitable.
    #[serde(default)]
    pub target: Option<f64>,
}

impl Default for ScalingConfig {
    fn default() -> Self {
        ScalingConfig {
            strategy: d_strategy(),
            direction: None,
            metric: d_metric(),
            metric_interval_ms: d_metric_interval(),
            improve: d_improve(),
            trigger: d_trigger(),
            sustain_ms: d_sustain(),
            window_ms: d_window(),
            settle: d_settle(),
            cooldown_ms: d_cooldown(),
            budget: d_budget(),
            target: None,
        }
    }
}

impl ScalingConfig {
    /// The scaler's configuration, or what is wrong with this one.
    pub fn to_config(&self) -> Result<sluice_scaling::Config, String> {
        use sluice_scaling::{Direction, Strategy};
        let strategy = match self.strategy.as_str() {
            "greedy" => Strategy::Greedy,
            "none" => Strategy::None,
            "all" => Strategy::All,
            s => return Err(format!("strategy: `{s}` is not greedy, none or all")),
        };
        let agent = crate::measure::AgentMetric::parse(&self.metric)?;
        let implied = agent.is_none_or(|m| m.higher_is_better());
        let direction = match self.direction.as_deref() {
            None => implied,
            Some("higher") => true,
            Some("lower") => false,
            Some(s) => return Err(format!("direction: `{s}` is not higher or lower")),
        };
        if agent.is_some() && direction != implied {
            return Err(format!(
                "direction: `{}` contradicts metric `{}` ({} is better); leave direction out",
                self.direction.as_deref().unwrap_or_default(),
                self.metric,
                if implied { "higher" } else { "lower" }
            ));
        }
        if agent.is_some() && !(100..=60_000).contains(&self.metric_interval_ms) {
            return Err(format!(
                "metric_interval_ms: {} is outside 100..=60000",
                self.metric_interval_ms
            ));
        }
        let direction = if direction {
            Direction::HigherIsBetter
        } else {
            Direction::LowerIsBetter
        };
        let ms = 1_000_000u64;
        Ok(sluice_scaling::Config {
            strategy,
            direction,
            improve: self.improve,
            trigger: self.trigger,
            sustain_ns: self.sustain_ms.saturating_mul(ms),
            window_ns: self.window_ms.saturating_mul(ms),
            settle: self.settle,
            cooldown_ns: self.cooldown_ms.saturating_mul(ms),
            budget: self.budget,
            target: self.target,
        })
    }
}

/// A chain's scaler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingInfo {
    /// Tenant.
    pub tenant: String,
    /// Chain.
    pub chain: String,
    /// Its configuration.
    pub config: ScalingConfig,
    /// The chain's middleboxes, in order.
    pub middleboxes: Vec<String>,
    /// Instances per middlebox.
    pub counts: BTreeMap<String, u32>,
    /// A trial or pass is under way.
    pub scaling: bool,
    /// The agents' latest sample of the chain (agent metrics only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<MeasuredSample>,
}

/// The agents' latest sample of a chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredSample {
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// The metric's value (None: the interval said nothing about it).
    pub value: Option<f64>,
    /// The interval and its differences.
    pub sample: crate::measure::Measured,
}

/// `POST /v1/tenants/{name}/chains/{chain}/scaling/request`: start a pass now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingRequest {
    /// Scale up (true) or down.
    pub up: bool,
    /// Why (logged with the events).
    #[serde(default)]
    pub reason: String,
}

/// One logged event: a failover, a rejoin, a scaling step, a drain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventInfo {
    /// Increasing id (`GET /v1/events?since=ID` lists later ones).
    pub id: u64,
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// `failover`, `rejoin`, `scale` (a count changed), `scaler` (a step of a
    /// chain's scaler), `drain` (a drain started or ended), `catch-up` (a new
    /// instance of a pinned middlebox gets most new flows, or stopped getting
    /// them), `block` (a block on request made or removed), `backend` (a
    /// load-balancer backend changed state: down, draining, removed, up) or
    /// `error`.
    pub kind: String,
    /// Tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Chain (scaler events).
    #[serde(default)]
    pub chain: Option<String>,
    /// Middlebox.
    #[serde(default)]
    pub middlebox: Option<String>,
    /// Instance (`tenant/middlebox/k`).
    #[serde(default)]
    pub instance: Option<String>,
    /// Host concerned.
    #[serde(default)]
    pub host: Option<u32>,
    /// What happened and why.
    pub reason: String,
    /// Failover and rejoin: when the first report showing the change arrived
    /// (Unix ms).
    #[serde(default)]
    pub first_report_ms: Option<u64>,
    /// Failover and rejoin: when the last affected host's new configuration was
    /// sent (Unix ms; null while not yet sent or if no host changed).
    #[serde(default)]
    pub push_sent_ms: Option<u64>,
    /// Instances per middlebox afterwards (scaling events).
    #[serde(default)]
    pub counts: Option<BTreeMap<String, u32>>,
}

/// `POST /v1/tokens`: a token to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRequest {
    /// Its name (letters, digits, `.`, `_`, `-`; at most 64).
    pub name: String,
    /// `operator`, `read-only`, `tenant:NAME` or `host:ID`.
    pub role: String,
}

/// A token as listed: never its secret or hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Name.
    pub name: String,
    /// Role.
    pub role: String,
    /// When it was created, Unix milliseconds.
    pub created_ms: u64,
}

/// The answer to `POST /v1/tokens`: the secret, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCreated {
    /// Name.
    pub name: String,
    /// Role.
    pub role: String,
    /// When it was created, Unix milliseconds.
    pub created_ms: u64,
    /// The secret to send as `Authorization: Bearer SECRET`.
    pub token: String,
}

/// `GET /v1/status`: the controller's view of what it depends on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    /// The state store: its nodes, whether they answer, their roles, data lost.
    pub store: crate::store_health::StoreStatus,
    /// Replicated controllers: the one answering, which leads (None: a
    /// single controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderInfo>,
    /// Replicated controllers: every one running, leading or waiting, as
    /// their records in etcd say (empty: a single controller).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controllers: Vec<ControllerMember>,
}

/// One of replicated controllers (`GET /v1/status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerMember {
    /// Its name.
    pub name: String,
    /// Where clients reach it when it leads.
    pub url: String,
    /// When its process started, Unix milliseconds.
    pub since_ms: u64,
    /// Whether it leads (the others wait to take over).
    pub leading: bool,
}

fn one() -> usize {
    1
}

/// The leading one of replicated controllers (`GET /v1/status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderInfo {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Since when it leads, Unix milliseconds.
    pub since_ms: u64,
    /// The etcd revision its term began at (each term's is higher).
    pub term: i64,
    /// Its lease, seconds: a dead leader is replaced this long after its
    /// last renewal.
    pub lease_s: u64,
}

/// A load-balancer backend's health (`GET /v1/backends`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// Tenant.
    pub tenant: String,
    /// The `lb` middlebox.
    pub middlebox: String,
    /// The backend's address as the middlebox's configuration names it.
    pub backend: String,
    /// `up` (takes new connections), `down` (its host is down or its health
    /// checks failed: no new connections, its connections keep it), `draining` (drained: no new
    /// connections until the delay passes) or `removed` (drained past the
    /// delay: its remaining connections are dropped).
    pub state: String,
    /// Since when it has been in `state`, Unix milliseconds.
    pub since_ms: u64,
    /// What its health checks say (true without checks).
    pub healthy: bool,
    /// Its host is down (silent, as for its NF instances).
    pub host_down: bool,
    /// The tenant's VM at its address, if registered.
    #[serde(default)]
    pub vm: Option<String>,
    /// That VM's host.
    #[serde(default)]
    pub host: Option<u32>,
    /// A drain's end (the deregistration delay), Unix milliseconds.
    #[serde(default)]
    pub drain_until_ms: Option<u64>,
    /// The last active health check of it its host's agent reported, e.g.
    /// `tcp 10.10.1.11:80: RST (ok 12, failed 3)` (none: not checked, or
    /// nothing reported yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check: Option<String>,
}

/// `PUT /v1/tenants/{name}/middleboxes/{middlebox}/instances/{id}/drain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceDrainRequest {
    /// The longest the instance drains, in milliseconds: then it is stopped
    /// even if flows are still pinned to it. Default 30000, at most a day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Drain it even if it is the last instance of its middlebox taking new
    /// flows (its groups then keep every instance: the traffic has nowhere
    /// better to go).
    #[serde(default)]
    pub force: bool,
}

/// An NF instance as an operator's drain leaves it
/// (`PUT`/`DELETE .../instances/{id}/drain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceDrainInfo {
    /// `tenant/middlebox/k`.
    pub name: String,
    /// Tenant.
    pub tenant: String,
    /// Middlebox.
    pub middlebox: String,
    /// Its host.
    pub host: u32,
    /// `draining` (no new flows; its pinned flows continue; an operator's
    /// drain, or a scale-in's when `drain_until_ms` is absent), `stopped`
    /// (drained: placed, no process) or `serving`.
    pub state: String,
    /// Where its middlebox keeps flow state: `shared`, `cached` (any
    /// instance can take a flow over: it stops once every host runs the
    /// split without it) or `local` (it stops once no flow is pinned to it).
    pub state_mode: String,
    /// When the drain's delay ends, Unix ms (none: not drained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_until_ms: Option<u64>,
    /// Whether the request changed anything (an undrain of an instance not
    /// drained, or a drain of a stopped one, does not).
    pub changed: bool,
}

/// `PUT /v1/tenants/{name}/middleboxes/{middlebox}/backends/{addr}/drain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// The deregistration delay in milliseconds: after it the backend is
    /// removed (its remaining connections dropped). Default 30000.
    #[serde(default)]
    pub delay_ms: Option<u64>,
}
