//! Tenant specifications: what a tenant asks Sluice for (Stratos §3.1).
//!
//! A spec names **elements** and composes them into **chains**:
//!
//! * `external`: hosts outside the cloud, a set of subnets;
//! * `service`: a set of the tenant's VMs (name and address);
//! * `middlebox`: a network function (`function`, its `config`, `instances`,
//!   `state`: `shared` (default, in the state store) or `local` (inside each
//!   instance), `affinity`: how flows choose among its instances, an optional
//!   per-instance `capacity` budget, the `resources` each instance takes of its
//!   host, `anti_affinity` between its instances, and `pipeline` for cached
//!   state);
//! * `select`: header fields limiting the traffic of the rest of a chain.
//!
//! A chain is a path from an external or service element, through middleboxes and
//! selects, to an external or service element; it may be bidirectional (replies
//! cross the middleboxes in reverse) and may mirror its traffic to off-path
//! middleboxes. Middleboxes may be shared by several chains. Traffic in no chain is
//! forwarded normally. `consolidate:` groups middleboxes to run as one pipeline
//! per instance (CoMb's hyperapps, [`consolidate`]).
//!
//! [`TenantSpec::parse`] validates everything before anything is applied and names
//! the field at fault: unknown element types and keys, dangling references, cycles,
//! missing function configuration, and selects that make two chains claim the same
//! traffic. See `examples/tenant/figure4.yaml`.
//!
//! A spec document is `apiVersion: sluice.dev/v1`, `kind: Tenant`,
//! `metadata: {name, labels}`, `spec: {elements, chains, consolidate}`; the first
//! format (`tenant`, `elements`, `chains` at the top) is still accepted ([`format`]).

use std::collections::BTreeMap;
use std::path::Path;

use sluice_chain::{Prefix, Registry};
use sluice_wire::IpAddr;
use yaml_serde::{Mapping, Value};

pub mod consolidate;
pub mod format;

pub use format::{API_VERSION, KIND};

/// A spec that cannot be applied: `path` names the field (`chains[1].path[2]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {path}: {msg}")]
pub struct SpecError {
    /// The spec's file (or other origin).
    pub source_name: String,
    /// The field at fault.
    pub path: String,
    /// What is wrong.
    pub msg: String,
}

/// One VM of a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// The VM's name.
    pub name: String,
    /// Its address.
    pub addr: IpAddr,
    /// Its weight in Seawall's sharing of congested links (the service's
    /// `weight:`, 1 to [`MAX_WEIGHT`], default 1): a VM of weight 2 gets twice
    /// the share of a VM of weight 1 where both are limited.
    pub weight: u16,
}

/// Largest Seawall weight of a service's VMs.
pub const MAX_WEIGHT: u16 = 1000;

/// Packets per pipelined window of a `state: cached` middlebox that does not
/// set `pipeline:`. Pipelined is the default there because it is what keeps
/// the store's round trips (and TLS's added latency on each) off short flows'
/// throughput, while an idle instance drains its window at once, so below
/// capacity a batch waits only for its own writes, as without it
/// (docs/STATE.md, "Pipelining"; docs/BENCHMARKS.md, issue 21). `pipeline: 0`
/// turns it off for the lowest latency while saturated.
pub const DEFAULT_PIPELINE: usize = 512;

/// Header fields a select matches; `None` is any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Select {
    /// IP protocol number.
    pub proto: Option<u8>,
    /// Source prefixes (any of).
    pub src: Vec<Prefix>,
    /// Destination prefixes (any of).
    pub dst: Vec<Prefix>,
    /// Inclusive source port range.
    pub sport: Option<(u16, u16)>,
    /// Inclusive destination port range.
    pub dport: Option<(u16, u16)>,
}

impl Select {
    fn both(a: &Select, b: &Select) -> Option<Select> {
        let proto = match (a.proto, b.proto) {
            (Some(x), Some(y)) if x != y => return None,
            (x, y) => x.or(y),
        };
        let range =
            |x: Option<(u16, u16)>, y: Option<(u16, u16)>| -> Result<Option<(u16, u16)>, ()> {
                match (x, y) {
                    (Some(p), Some(q)) => {
                        let (lo, hi) = (p.0.max(q.0), p.1.min(q.1));
                        if lo > hi {
                            Err(())
                        } else {
                            Ok(Some((lo, hi)))
                        }
                    }
                    (p, q) => Ok(p.or(q)),
                }
            };
        let sport = range(a.sport, b.sport).ok()?;
        let dport = range(a.dport, b.dport).ok()?;
        let pfx = |x: &[Prefix], y: &[Prefix]| -> Option<Vec<Prefix>> {
            if x.is_empty() {
                return Some(y.to_vec());
            }
            if y.is_empty() {
                return Some(x.to_vec());
            }
            let v: Vec<Prefix> = x
                .iter()
                .filter(|p| y.iter().any(|q| overlap(p, q)))
                .copied()
                .collect();
            (!v.is_empty()).then_some(v)
        };
        Some(Select {
            proto,
            src: pfx(&a.src, &b.src)?,
            dst: pfx(&a.dst, &b.dst)?,
            sport,
            dport,
        })
    }
}

fn overlap(a: &Prefix, b: &Prefix) -> bool {
    a.overlaps(b)
}

/// What an element is.
#[derive(Debug, Clone, PartialEq)]
pub enum Element {
    /// Hosts outside the cloud.
    External {
        /// Their subnets.
        subnets: Vec<Prefix>,
    },
    /// Tenant VMs running one application.
    Service {
        /// The VMs.
        vms: Vec<Vm>,
    },
    /// A network function.
    Middlebox {
        /// Function type (a chain `type`, e.g. `firewall`).
        function: String,
        /// The function's configuration.
        config: Value,
        /// Instances to run (at least 1).
        instances: u32,
        /// Where its instances keep per-flow state (`state:`, default shared).
        state: StateMode,
        /// How flows choose among its instances when their number changes
        /// (`affinity:`; default `pinned` for local state and for an IPS with
        /// shared state, `hash` otherwise: [`Affinity::default_for_function`]).
        affinity: Affinity,
        /// A processing budget per instance (`capacity: {mbps, pps, burst_ms}`), so
        /// experiments can make a middlebox the bottleneck on purpose.
        capacity: Option<sluice_chain::Capacity>,
        /// What each instance takes of its host (`resources: {slots, cores,
        /// memory_mib}`; default one slot): the controller places instances
        /// only where the host's declared capacity has room.
        resources: Resources,
        /// Whether two instances may share a host (`anti_affinity:`, default
        /// `preferred`).
        anti_affinity: AntiAffinity,
        /// The placement policy for its new instances (`placement:`, one of
        /// [`PLACEMENT_POLICIES`]), overriding the controller's setting;
        /// `None`: the controller's.
        placement: Option<String>,
        /// Pipelined instances (`pipeline:`, packets per window; 0: off):
        /// under their leases, a window's store reads are in flight while the
        /// previous window is processed and no batch waits for its own round
        /// trip (docs/STATE.md, "Pipelining"). Needs `state: cached`, where
        /// it defaults to [`DEFAULT_PIPELINE`].
        pipeline: usize,
        /// Worker threads per instance (`workers:`, default 1, at most
        /// [`sluice_chain::MAX_WORKERS`]): flows sharded among them by the
        /// direction-invariant hash, each with its own store connection and
        /// flow cache (docs/ARCHITECTURE.md, "Forwarding on several cores").
        workers: usize,
        /// The instances' chain's `reassembly:` section (TCP streams and IP
        /// fragments, e.g. `udp_fragments: reassemble`; docs/FUNCTIONS.md),
        /// `Null` for the defaults. Boxed: most middleboxes leave it out.
        reassembly: Box<Value>,
    },
    /// A traffic subset.
    Select(Select),
}

impl Element {
    /// What kind of element it is, as the spec names it (`middlebox`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Element::External { .. } => "external",
            Element::Service { .. } => "service",
            Element::Middlebox { .. } => "middlebox",
            Element::Select(_) => "select",
        }
    }
}

/// Where a middlebox's instances keep their per-flow state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StateMode {
    /// In the shared state store (the controller's state backend): any instance
    /// can take over any flow, so failover and scale-in need no draining.
    #[default]
    Shared,
    /// In the shared store, and each instance caches the records of the flows
    /// it owns under an ownership lease its agent grants once the controller
    /// has seen every agent run the same split (docs/STATE.md, "Leases in the
    /// running system"): established flows rarely wait on the store, any
    /// instance can still take over any flow.
    Cached,
    /// Inside each instance, as a traditional NF does (the baseline): flows stay
    /// pinned to their instance and a removed instance is drained first.
    Local,
}

impl StateMode {
    /// `shared` or `local`.
    pub fn as_str(&self) -> &'static str {
        match self {
            StateMode::Shared => "shared",
            StateMode::Cached => "cached",
            StateMode::Local => "local",
        }
    }
}

/// How the flows of a scaled middlebox choose among its instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// A plain hash-range split over the direction-invariant flow hash: a changed
    /// split moves existing flows too. Right for shared state, where any instance
    /// can take any flow; with local state it is StatelessNF's naive baseline,
    /// which breaks the flows it moves.
    Hash,
    /// Each flow stays on the instance it first went to; a changed split moves only
    /// new flows, and a removed local-state instance is drained first.
    Pinned,
}

impl Affinity {
    /// `hash` or `pinned`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Affinity::Hash => "hash",
            Affinity::Pinned => "pinned",
        }
    }

    /// The default for a state mode: pinned for local state, hash for shared.
    pub fn default_for(state: StateMode) -> Affinity {
        match state {
            StateMode::Local => Affinity::Pinned,
            StateMode::Shared | StateMode::Cached => Affinity::Hash,
        }
    }

    /// The default for `function` with `state`: [`Affinity::default_for`],
    /// except that a function reassembling TCP streams ([`REASSEMBLES`])
    /// with shared state (not cached) is pinned. Its stream record changes
    /// with every segment and is read and written whole, so two live
    /// instances must never hold packets of one flow at once: with `hash`, a
    /// rejoining or added instance takes flows back while the other still
    /// has their packets queued, the two writes race, and the record falls
    /// behind or ahead of what the host received (measured: 1-2 of 100
    /// downloads stalled per `sluice experiment failover` of an IPS). Pinned
    /// flows move only when their instance fails. `state: cached` needs no
    /// pinning: its lease hands a range over only after the old owner
    /// flushed.
    pub fn default_for_function(state: StateMode, function: &str) -> Affinity {
        if state == StateMode::Shared && REASSEMBLES.contains(&function) {
            Affinity::Pinned
        } else {
            Affinity::default_for(state)
        }
    }
}

/// Functions whose instances reassemble TCP streams (the chain's
/// reassembler keeps a record per flow): pinned by default with shared state
/// ([`Affinity::default_for_function`]).
pub const REASSEMBLES: &[&str] = &["ips"];

/// What one instance of a middlebox takes of its host's declared capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// Instance slots (at least 1; default 1).
    pub slots: u32,
    /// CPU cores (default 0: not counted).
    pub cores: u32,
    /// Memory, MiB (default 0: not counted).
    pub memory_mib: u64,
}

impl Default for Resources {
    fn default() -> Resources {
        Resources {
            slots: 1,
            cores: 0,
            memory_mib: 0,
        }
    }
}

/// The placement policies a middlebox's `placement:` may name (the
/// controller's `placement` setting takes the same: docs/CONTROLLER.md,
/// "Policies").
pub const PLACEMENT_POLICIES: [&str; 4] = [
    "least-loaded",
    "rack-aware",
    "tenant-centric",
    "service-centric",
];

/// Whether the instances of one middlebox may share a host. (Not
/// [`Affinity`], which is about flows and instances.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AntiAffinity {
    /// Two instances share a host only when no other host has room: a host's
    /// failure then takes as few of them as placement allows.
    #[default]
    Preferred,
    /// Never two on one host: an apply or scale that would need it is refused.
    Required,
}

impl AntiAffinity {
    /// `preferred` or `required`.
    pub fn as_str(&self) -> &'static str {
        match self {
            AntiAffinity::Preferred => "preferred",
            AntiAffinity::Required => "required",
        }
    }
}

/// A middlebox's `resources`: `{slots, cores, memory_mib}`, each optional,
/// slots at least 1.
fn parse_resources(v: &Value) -> Result<Resources, String> {
    let Value::Mapping(m) = v else {
        return Err("expected {slots, cores, memory_mib}".into());
    };
    let mut r = Resources::default();
    for (k, v) in m {
        let n = v.as_u64();
        match k.as_str() {
            Some("slots") => {
                r.slots = n
                    .filter(|&n| (1..=u64::from(u32::MAX)).contains(&n))
                    .ok_or("slots: expected a whole number of at least 1")?
                    as u32;
            }
            Some("cores") => {
                r.cores = n
                    .filter(|&n| n <= u64::from(u32::MAX))
                    .ok_or("cores: expected a whole number")? as u32;
            }
            Some("memory_mib") => r.memory_mib = n.ok_or("memory_mib: expected a whole number")?,
            _ => {
                return Err(format!(
                    "unknown key {k:?} (expected one of: slots, cores, memory_mib)"
                ))
            }
        }
    }
    Ok(r)
}

/// A validated chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// Its name.
    pub name: String,
    /// Element names, source first, destination last.
    pub path: Vec<String>,
    /// Replies cross the middleboxes in reverse order.
    pub bidirectional: bool,
    /// Off-path middleboxes that receive a copy.
    pub mirror: Vec<String>,
}

impl Chain {
    /// The middleboxes of the path, in order.
    pub fn middleboxes<'a>(&'a self, spec: &'a TenantSpec) -> impl Iterator<Item = &'a str> + 'a {
        self.path
            .iter()
            .filter(move |n| matches!(spec.elements.get(*n), Some(Element::Middlebox { .. })))
            .map(|s| s.as_str())
    }
}

/// A validated tenant specification.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantSpec {
    /// Tenant name (`metadata.name`).
    pub tenant: String,
    /// `metadata.labels` (none in the flat format).
    pub labels: BTreeMap<String, String>,
    /// Elements by name.
    pub elements: BTreeMap<String, Element>,
    /// Chains, in spec order. A consolidated group's members are crossed as
    /// the group (see [`consolidate`]).
    pub chains: Vec<Chain>,
    /// Consolidated groups (`consolidate:`): each is one [`consolidate::HYPERAPP`]
    /// middlebox in `elements`, in place of its members.
    pub groups: Vec<consolidate::Group>,
}

/// Functions that cannot run without configuration.
const NEEDS_CONFIG: [&str; 5] = ["firewall", "nat", "lb", "ips", "ratelimit"];

struct Ctx<'a> {
    source: &'a str,
}

impl Ctx<'_> {
    fn err(&self, path: impl Into<String>, msg: impl Into<String>) -> SpecError {
        SpecError {
            source_name: self.source.to_string(),
            path: path.into(),
            msg: msg.into(),
        }
    }
}

/// A middlebox's `capacity`: `{mbps, pps, burst_ms}`, at least one rate, every
/// number positive.
fn parse_capacity(v: &Value) -> Result<sluice_chain::Capacity, String> {
    let c: sluice_chain::Capacity = yaml_serde::from_value(v.clone())
        .map_err(|e| format!("expected {{mbps, pps, burst_ms}}: {e}"))?;
    let bad = |x: Option<f64>| x.is_some_and(|x| !(x.is_finite() && x > 0.0));
    if c.pps.is_none() && c.mbps.is_none() {
        return Err("give mbps, pps or both".into());
    }
    if bad(c.pps) || bad(c.mbps) || !(c.burst_ms.is_finite() && c.burst_ms > 0.0) {
        return Err("rates and burst_ms must be positive numbers".into());
    }
    Ok(c)
}

fn check_keys(c: &Ctx<'_>, path: &str, m: &Mapping, allowed: &[&str]) -> Result<(), SpecError> {
    for k in m.keys() {
        let k = k
            .as_str()
            .ok_or_else(|| c.err(path, "keys must be strings"))?;
        if !allowed.contains(&k) {
            return Err(c.err(
                format!("{path}.{k}"),
                format!("unknown key (expected one of: {})", allowed.join(", ")),
            ));
        }
    }
    Ok(())
}

fn str_list(c: &Ctx<'_>, path: &str, v: Option<&Value>) -> Result<Vec<String>, SpecError> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::Sequence(s)) => s
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .map(String::from)
                    .ok_or_else(|| c.err(format!("{path}[{i}]"), "expected a string"))
            })
            .collect(),
        Some(_) => Err(c.err(path, "expected a list")),
    }
}

fn ports(c: &Ctx<'_>, path: &str, v: Option<&Value>) -> Result<Option<(u16, u16)>, SpecError> {
    let bad = || c.err(path, "expected a port or an inclusive range \"lo-hi\"");
    match v {
        None => Ok(None),
        Some(Value::Number(n)) => {
            let p = n.as_u64().filter(|&p| p <= 65535).ok_or_else(bad)? as u16;
            Ok(Some((p, p)))
        }
        Some(Value::String(s)) => {
            let (a, b) = s.split_once('-').unwrap_or((s, s));
            let lo: u16 = a.trim().parse().map_err(|_| bad())?;
            let hi: u16 = b.trim().parse().map_err(|_| bad())?;
            if lo > hi {
                return Err(bad());
            }
            Ok(Some((lo, hi)))
        }
        Some(_) => Err(bad()),
    }
}

fn prefixes(c: &Ctx<'_>, path: &str, v: Option<&Value>) -> Result<Vec<Prefix>, SpecError> {
    str_list(c, path, v)?
        .iter()
        .enumerate()
        .map(|(i, s)| Prefix::parse(s).map_err(|e| c.err(format!("{path}[{i}]"), e)))
        .collect()
}

fn parse_element(
    c: &Ctx<'_>,
    path: &str,
    v: &Value,
    registry: Option<&Registry>,
) -> Result<Element, SpecError> {
    let m = v
        .as_mapping()
        .ok_or_else(|| c.err(path, "expected a mapping with a `type`"))?;
    let ty = m
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| c.err(format!("{path}.type"), "missing"))?;
    match ty {
        "external" => {
            check_keys(c, path, m, &["type", "subnets"])?;
            let subnets = prefixes(c, &format!("{path}.subnets"), m.get("subnets"))?;
            if subnets.is_empty() {
                return Err(c.err(
                    format!("{path}.subnets"),
                    "an external element needs at least one subnet",
                ));
            }
            Ok(Element::External { subnets })
        }
        "service" => {
            check_keys(c, path, m, &["type", "vms", "weight"])?;
            let weight = match m.get("weight") {
                None => 1,
                Some(w) => w
                    .as_u64()
                    .filter(|w| (1..=MAX_WEIGHT as u64).contains(w))
                    .ok_or_else(|| {
                        c.err(
                            format!("{path}.weight"),
                            format!("expected a whole number from 1 to {MAX_WEIGHT}"),
                        )
                    })? as u16,
            };
            let vp = format!("{path}.vms");
            let list = m
                .get("vms")
                .and_then(Value::as_mapping)
                .ok_or_else(|| c.err(&vp, "expected a mapping of VM name to address"))?;
            let mut vms = Vec::new();
            for (k, a) in list {
                let name = k
                    .as_str()
                    .ok_or_else(|| c.err(&vp, "VM names must be strings"))?
                    .to_string();
                let addr = a
                    .as_str()
                    .and_then(|s| s.parse::<IpAddr>().ok())
                    .ok_or_else(|| c.err(format!("{vp}.{name}"), "expected an IP address"))?;
                vms.push(Vm { name, addr, weight });
            }
            if vms.is_empty() {
                return Err(c.err(vp, "a service needs at least one VM"));
            }
            Ok(Element::Service { vms })
        }
        "middlebox" => {
            check_keys(
                c,
                path,
                m,
                &[
                    "type",
                    "function",
                    "config",
                    "instances",
                    "state",
                    "affinity",
                    "capacity",
                    "resources",
                    "anti_affinity",
                    "placement",
                    "pipeline",
                    "workers",
                    "reassembly",
                ],
            )?;
            let function = m
                .get("function")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    c.err(
                        format!("{path}.function"),
                        "missing (e.g. firewall, ips, lb, nat, monitor)",
                    )
                })?
                .to_string();
            let config = m.get("config").cloned().unwrap_or(Value::Null);
            let reassembly = Box::new(m.get("reassembly").cloned().unwrap_or(Value::Null));
            if matches!(config, Value::Null) && NEEDS_CONFIG.contains(&function.as_str()) {
                return Err(c.err(
                    format!("{path}.config"),
                    format!("missing: a {function} needs its configuration"),
                ));
            }
            let instances = match m.get("instances") {
                None => 1,
                Some(v) => v
                    .as_u64()
                    .filter(|&n| (1..=1024).contains(&n))
                    .ok_or_else(|| {
                        c.err(
                            format!("{path}.instances"),
                            "expected a count from 1 to 1024",
                        )
                    })? as u32,
            };
            let state = match m.get("state") {
                None => StateMode::Shared,
                Some(v) => match v.as_str() {
                    Some("shared") => StateMode::Shared,
                    Some("cached") => StateMode::Cached,
                    Some("local") => StateMode::Local,
                    _ => {
                        return Err(c.err(
                            format!("{path}.state"),
                            "expected `shared` (state in the store), `cached` (in the store, cached by the instance owning each flow) or `local` (state inside each instance)",
                        ))
                    }
                },
            };
            let affinity = match m.get("affinity") {
                None => Affinity::default_for_function(state, &function),
                Some(v) => match v.as_str() {
                    Some("hash") => Affinity::Hash,
                    Some("pinned") => Affinity::Pinned,
                    _ => {
                        return Err(c.err(
                            format!("{path}.affinity"),
                            "expected `hash` (a changed split moves existing flows) or `pinned` (flows stay on their instance)",
                        ))
                    }
                },
            };
            if state == StateMode::Cached && affinity == Affinity::Pinned {
                return Err(c.err(
                    format!("{path}.affinity"),
                    "`state: cached` needs `affinity: hash`: an instance owns the flows of its hash ranges, which pinned flows outlive",
                ));
            }
            let capacity = match m.get("capacity") {
                None => None,
                Some(v) => {
                    Some(parse_capacity(v).map_err(|e| c.err(format!("{path}.capacity"), e))?)
                }
            };
            let resources = match m.get("resources") {
                None => Resources::default(),
                Some(v) => parse_resources(v).map_err(|e| c.err(format!("{path}.resources"), e))?,
            };
            let anti_affinity = match m.get("anti_affinity").map(Value::as_str) {
                None => AntiAffinity::default(),
                Some(Some("preferred")) => AntiAffinity::Preferred,
                Some(Some("required")) => AntiAffinity::Required,
                Some(_) => {
                    return Err(c.err(
                        format!("{path}.anti_affinity"),
                        "expected `preferred` (instances share a host only when no other has room) or `required` (never two on one host)",
                    ))
                }
            };
            let placement = match m.get("placement").map(Value::as_str) {
                None => None,
                Some(Some(p)) if PLACEMENT_POLICIES.contains(&p) => Some(p.to_string()),
                Some(_) => {
                    return Err(c.err(
                        format!("{path}.placement"),
                        format!("expected one of {}", PLACEMENT_POLICIES.join(", ")),
                    ))
                }
            };
            let pipeline = match m.get("pipeline") {
                None if state == StateMode::Cached => DEFAULT_PIPELINE,
                None => 0,
                Some(v) => v
                    .as_u64()
                    .filter(|&n| n as usize <= sluice_chain::MAX_PIPELINE)
                    .ok_or_else(|| {
                        c.err(
                            format!("{path}.pipeline"),
                            format!(
                                "expected packets per window, from 0 (off) to {}",
                                sluice_chain::MAX_PIPELINE
                            ),
                        )
                    })? as usize,
            };
            if pipeline > 0 && state != StateMode::Cached {
                return Err(c.err(
                    format!("{path}.pipeline"),
                    "needs `state: cached`: without an ownership lease every access goes to the store, and there is nothing to pipeline",
                ));
            }
            let workers = match m.get("workers") {
                None => 1,
                Some(v) => v
                    .as_u64()
                    .filter(|&n| (1..=sluice_chain::MAX_WORKERS as u64).contains(&n))
                    .ok_or_else(|| {
                        c.err(
                            format!("{path}.workers"),
                            format!(
                                "expected worker threads per instance, from 1 to {}",
                                sluice_chain::MAX_WORKERS
                            ),
                        )
                    })? as usize,
            };
            // A reply's flow hash is its rewritten connection's, not the
            // original's: with local state it would reach a worker that
            // never saw the connection (the instance refuses this too).
            if workers > 1
                && state == StateMode::Local
                && ["nat", "lb"].contains(&function.as_str())
            {
                return Err(c.err(
                    format!("{path}.workers"),
                    format!(
                        "several workers need the {function}'s state in the store (`state: shared` or `cached`): with `state: local` its replies would reach a worker that never saw their connection"
                    ),
                ));
            }
            if let Some(r) = registry {
                // Build it once, as an instance would, so a bad configuration is
                // refused now and not when an instance starts.
                let fs = sluice_chain::FunctionSpec {
                    name: path.to_string(),
                    kind: function.clone(),
                    config: config.clone(),
                };
                r.validate(&fs, Path::new("."))
                    .map_err(|e| c.err(format!("{path}.config"), e))?;
                r.validate_streams(&reassembly)
                    .map_err(|e| c.err(format!("{path}.reassembly"), e))?;
            }
            Ok(Element::Middlebox {
                function,
                config,
                instances,
                state,
                affinity,
                capacity,
                resources,
                anti_affinity,
                placement,
                pipeline,
                workers,
                reassembly,
            })
        }
        "select" => {
            check_keys(
                c,
                path,
                m,
                &["type", "proto", "src", "dst", "sport", "dport"],
            )?;
            let proto = match m.get("proto") {
                None => None,
                Some(Value::String(s)) => Some(match s.as_str() {
                    "tcp" => 6,
                    "udp" => 17,
                    "icmp" => 1,
                    other => {
                        return Err(c.err(
                            format!("{path}.proto"),
                            format!("unknown protocol `{other}` (tcp, udp, icmp or a number)"),
                        ))
                    }
                }),
                Some(Value::Number(n)) => Some(
                    n.as_u64()
                        .filter(|&p| p < 256)
                        .ok_or_else(|| c.err(format!("{path}.proto"), "expected 0-255"))?
                        as u8,
                ),
                Some(_) => {
                    return Err(c.err(
                        format!("{path}.proto"),
                        "expected a protocol name or number",
                    ))
                }
            };
            let s = Select {
                proto,
                src: prefixes(c, &format!("{path}.src"), m.get("src"))?,
                dst: prefixes(c, &format!("{path}.dst"), m.get("dst"))?,
                sport: ports(c, &format!("{path}.sport"), m.get("sport"))?,
                dport: ports(c, &format!("{path}.dport"), m.get("dport"))?,
            };
            if s == Select::default() {
                return Err(c.err(
                    path,
                    "a select needs at least one of proto, src, dst, sport, dport",
                ));
            }
            Ok(Element::Select(s))
        }
        other => Err(c.err(
            format!("{path}.type"),
            format!("unknown element type `{other}` (external, service, middlebox, select)"),
        )),
    }
}

impl TenantSpec {
    /// Parses and validates a spec. With a `registry`, every middlebox's
    /// configuration is checked by building the function once.
    pub fn parse(
        text: &str,
        source_name: &str,
        registry: Option<&Registry>,
    ) -> Result<TenantSpec, SpecError> {
        let c = Ctx {
            source: source_name,
        };
        let doc: Value =
            yaml_serde::from_str(text).map_err(|e| c.err("(document)", e.to_string()))?;
        let labels = format::labels(&doc, source_name)?;
        let root = format::convert(&doc, format::Format::Flat, source_name)?;
        let m = root
            .as_mapping()
            .ok_or_else(|| c.err("(document)", "expected a mapping"))?;
        check_keys(
            &c,
            "(document)",
            m,
            &["tenant", "elements", "chains", "consolidate"],
        )?;
        let tenant = m
            .get("tenant")
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| c.err("tenant", "missing"))?
            .to_string();
        let els = m
            .get("elements")
            .and_then(Value::as_mapping)
            .ok_or_else(|| c.err("elements", "expected a mapping of name to element"))?;
        let mut elements = BTreeMap::new();
        for (k, v) in els {
            let name = k
                .as_str()
                .ok_or_else(|| c.err("elements", "element names must be strings"))?;
            let e = parse_element(&c, &format!("elements.{name}"), v, registry)?;
            elements.insert(name.to_string(), e);
        }
        let list = m
            .get("chains")
            .and_then(Value::as_sequence)
            .ok_or_else(|| c.err("chains", "expected a list of chains"))?;
        let mut chains: Vec<Chain> = Vec::new();
        for (i, v) in list.iter().enumerate() {
            let p = format!("chains[{i}]");
            let cm = v
                .as_mapping()
                .ok_or_else(|| c.err(&p, "expected a mapping"))?;
            check_keys(&c, &p, cm, &["name", "path", "bidirectional", "mirror"])?;
            let name = cm
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| c.err(format!("{p}.name"), "missing"))?
                .to_string();
            if chains.iter().any(|x| x.name == name) {
                return Err(c.err(
                    format!("{p}.name"),
                    format!("chain `{name}` is defined twice"),
                ));
            }
            let path = str_list(&c, &format!("{p}.path"), cm.get("path"))?;
            if path.len() < 2 {
                return Err(c.err(
                    format!("{p}.path"),
                    "a chain needs a source and a destination",
                ));
            }
            for (j, n) in path.iter().enumerate() {
                let e = elements.get(n).ok_or_else(|| {
                    c.err(format!("{p}.path[{j}]"), format!("unknown element `{n}`"))
                })?;
                let end = j == 0 || j == path.len() - 1;
                let ok = match e {
                    Element::External { .. } | Element::Service { .. } => end,
                    Element::Middlebox { .. } | Element::Select(_) => !end,
                };
                if !ok {
                    let want = if end {
                        "an external or service element"
                    } else {
                        "a middlebox or select"
                    };
                    return Err(c.err(
                        format!("{p}.path[{j}]"),
                        format!("`{n}` is a {}; here the chain needs {want}", e.kind()),
                    ));
                }
                if matches!(
                    e,
                    Element::Middlebox { .. } | Element::External { .. } | Element::Service { .. }
                ) {
                    if let Some(k) = path[..j].iter().position(|x| x == n) {
                        return Err(c.err(
                            format!("{p}.path[{j}]"),
                            format!("cycle: `{n}` already appears at path[{k}]"),
                        ));
                    }
                }
            }
            let mirror = str_list(&c, &format!("{p}.mirror"), cm.get("mirror"))?;
            for (j, n) in mirror.iter().enumerate() {
                match elements.get(n) {
                    Some(Element::Middlebox { .. }) => {}
                    Some(e) => {
                        return Err(c.err(
                            format!("{p}.mirror[{j}]"),
                            format!("`{n}` is a {}, not a middlebox", e.kind()),
                        ))
                    }
                    None => {
                        return Err(
                            c.err(format!("{p}.mirror[{j}]"), format!("unknown element `{n}`"))
                        )
                    }
                }
            }
            let bidirectional = match cm.get("bidirectional") {
                None => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(c.err(format!("{p}.bidirectional"), "expected true or false"))
                }
            };
            chains.push(Chain {
                name,
                path,
                bidirectional,
                mirror,
            });
        }
        let mut spec = TenantSpec {
            tenant,
            labels,
            elements,
            chains,
            groups: Vec::new(),
        };
        spec.check_overlaps(&c)?;
        if let Some(v) = m.get("consolidate") {
            spec.groups = consolidate::apply(&c, v, &mut spec)?;
        }
        Ok(spec)
    }

    /// The traffic a chain claims: its selects combined (`None` if they exclude
    /// each other, so the chain matches nothing).
    pub fn selector(&self, chain: &Chain) -> Option<Select> {
        let mut acc = Select::default();
        for n in &chain.path {
            if let Some(Element::Select(s)) = self.elements.get(n) {
                acc = Select::both(&acc, s)?;
            }
        }
        Some(acc)
    }

    fn endpoints_overlap(&self, a: &str, b: &str) -> bool {
        if a == b {
            return true;
        }
        match (self.elements.get(a), self.elements.get(b)) {
            (Some(Element::External { subnets: x }), Some(Element::External { subnets: y })) => {
                x.iter().any(|p| y.iter().any(|q| overlap(p, q)))
            }
            (Some(Element::Service { vms: x }), Some(Element::Service { vms: y })) => {
                x.iter().any(|v| y.iter().any(|w| v.addr == w.addr))
            }
            _ => false,
        }
    }

    fn check_overlaps(&self, c: &Ctx<'_>) -> Result<(), SpecError> {
        for (i, a) in self.chains.iter().enumerate() {
            for (j, b) in self.chains.iter().enumerate().skip(i + 1) {
                let (a0, a1) = (&a.path[0], a.path.last().unwrap());
                let (b0, b1) = (&b.path[0], b.path.last().unwrap());
                let same_way = self.endpoints_overlap(a0, b0) && self.endpoints_overlap(a1, b1);
                let crossed = (a.bidirectional || b.bidirectional)
                    && self.endpoints_overlap(a0, b1)
                    && self.endpoints_overlap(a1, b0);
                if !(same_way || crossed) {
                    continue;
                }
                if let (Some(x), Some(y)) = (self.selector(a), self.selector(b)) {
                    if Select::both(&x, &y).is_some() {
                        return Err(c.err(
                            format!("chains[{j}]"),
                            format!(
                                "chain `{}` claims traffic that chain `{}` (chains[{i}]) also claims between the same endpoints; make their selects disjoint",
                                b.name, a.name
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
