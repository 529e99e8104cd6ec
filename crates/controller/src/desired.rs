//! The controller's desired state and the pure functions over it: NF instance
//! placement, port ids, each tenant's [`Placement`], and the merged
//! [`AgentConfig`] of every host.
//!
//! Nothing here does I/O: the server mutates a copy of [`Desired`], asks for the
//! configurations, and only if every step succeeded persists and swaps the copy in,
//! so a refused request changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use sluice_chain::Capacity;
use sluice_proto::{
    AgentConfig, GroupPolicy, HostCapacity, InstanceConfig, Peer, PortConfig, PortKind, TenantFib,
    VmRegistration,
};
use sluice_switch::{Action, HostId, Output, PortId};
use sluice_tenant::{Affinity, AntiAffinity, Element, Resources, StateMode, TenantSpec};
use yaml_serde::{Mapping, Value};

use crate::model::ScalingConfig;
use crate::placement::{Ask, Policy, Room, Shortfall};

use crate::compile::{compile, CompileError, Compiled, Placement};

/// Highest port id: instance ports need a link address from
/// [`sluice_proto::instance_link`], and VM ports share the same id space.
pub const MAX_PORT: u16 = 16383;

/// Highest VNI (Geneve carries 24 bits).
pub const MAX_VNI: u32 = 0x00ff_ffff;

/// An applied tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    /// Tenant name (the spec's `tenant`).
    pub name: String,
    /// The spec as applied.
    pub yaml: String,
    /// The spec, parsed and validated.
    pub spec: TenantSpec,
    /// Its VNI, fixed for the tenant's lifetime.
    pub vni: u32,
    /// Increases each time a different spec is applied.
    pub generation: u64,
}

/// A registered host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Host id (at least 1).
    pub id: u32,
    /// Human name.
    pub name: String,
    /// Tunnel endpoint.
    pub underlay: Ipv4Addr,
    /// Base URL of its agent's API.
    pub api: String,
    /// What it offers NF instances, as its agent declared (`None`: no limit).
    pub capacity: Option<HostCapacity>,
}

/// A registered VM and the switch port it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// The registration as received.
    pub reg: VmRegistration,
    /// Port id on `reg.host`.
    pub port: u16,
}

/// Where one NF instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    /// Host id.
    pub host: u32,
    /// Port id on that host.
    pub port: u16,
}

/// `(tenant, middlebox, index)` of an NF instance.
pub type InstanceKey = (String, String, u32);
/// A VM: `(tenant, name)`.
pub type VmKey = (String, String);

/// A middlebox's instance count as set by the scale API (or the scaler), and the
/// spec's count when it was set: re-applying a spec with another count for the
/// middlebox drops the override (the spec wins); a spec with the same count keeps
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scaled {
    /// Instances wanted.
    pub count: u32,
    /// The spec's `instances` when the count was set.
    pub spec_count: u32,
}

/// Everything the controller was asked for, and what it decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    /// Applied tenants by name, each shared by the copies of the state a
    /// change works on (at 10,000 tenants, copying every spec was a third
    /// of a VM registration's time): a tenant is replaced whole, never
    /// changed in place.
    pub tenants: PMap<String, Arc<Tenant>>,
    /// Registered hosts by id.
    pub hosts: PMap<u32, Host>,
    /// Registered VMs by `(tenant, name)`.
    pub vms: Placed<VmKey, Vm>,
    /// Placed NF instances.
    pub instances: Placed<InstanceKey, Instance>,
    /// The VNI the next new tenant gets (VNIs are never reused).
    pub next_vni: u32,
    /// Instance counts set by scaling, by `(tenant, middlebox)`.
    pub scaled: BTreeMap<(String, String), Scaled>,
    /// Instances being removed from local-state middleboxes: placed and running,
    /// but out of their groups (no new flows) until their pinned flows end.
    pub draining: BTreeSet<InstanceKey>,
    /// Instances reported dead or suspected (live state, never persisted): out of
    /// their groups, keeping port and placement, until reported alive again.
    pub down: BTreeSet<InstanceKey>,
    /// Scaler configurations by `(tenant, chain)`.
    pub scaling: BTreeMap<(String, String), ScalingConfig>,
    /// New instances of pinned middleboxes still catching up (live state, never
    /// persisted): they get most new flows ([`CATCH_UP_SHARE`]) until their share
    /// of pinned flows reaches the split's target (Stratos §4.2, "achieving flow
    /// distribution in practice"). Existing flows stay where they are pinned, so
    /// with the plain split a new instance would take a long time to fill.
    pub catching_up: BTreeSet<InstanceKey>,
    /// The fabric's secrets when datagrams between hosts are sealed (None:
    /// sealing off): every host's configuration then carries its links' keys.
    pub fabric: Option<crate::fabric::FabricSecret>,
    /// Why each placed instance is where it is (instances placed before
    /// reasons were kept have none).
    pub why: PMap<InstanceKey, Why>,
    /// The placement policy for new instances (a controller setting, never
    /// persisted).
    pub policy: Policy,
    /// Blocks on request by id (`crate::blocks`): compiled into every host of
    /// their tenant.
    pub blocks: BTreeMap<u64, crate::blocks::Block>,
    /// Hosts contained for misbehaving (reported by enough peers, Seawall
    /// §4): in no other host's peer list, given no instances.
    pub contained: BTreeSet<u32>,
    /// Hosts silent past the grace period: their instances were placed
    /// elsewhere and they take none until heard again (a liveness verdict,
    /// never persisted: a restarted controller finds them silent again).
    pub evacuated: BTreeSet<u32>,
    /// Hosts an operator drained for maintenance (`sluice drain host`): they
    /// take no new instance, and their instances whose state is in the store
    /// were placed elsewhere. Persisted until undrained.
    pub cordoned: BTreeSet<u32>,
    /// How many times an operator has released each host (cleared it of
    /// accusations): pushed to every agent, which then forgets its own
    /// accusations of that host.
    pub pardons: BTreeMap<u32, u64>,
    /// Compilations of earlier states, reused while a tenant's inputs are
    /// unchanged (shared by clones; never persisted or compared).
    pub compiled: CompileCache,
    /// The id the next block gets (ids are never reused).
    pub next_block: u64,
    /// The load balancers' backends that are not up, per `(tenant,
    /// middlebox)`: given to every instance of the middlebox
    /// ([`sluice_proto::InstanceConfig::backends`]). Live state, never
    /// persisted (`crate::reconcile`'s backend health decides it).
    pub backend_states: BTreeMap<(String, String), Vec<sluice_proto::BackendOverride>>,
    /// Operators' drains of load-balancer backends, by `(tenant, middlebox,
    /// backend)`: when the deregistration delay ends, Unix milliseconds (in
    /// the past: the backend is removed). Persisted, so a restarted
    /// controller keeps draining them.
    pub backend_drains: BTreeMap<(String, String, String), u64>,
    /// Operators' drains of NF instances (`sluice drain instance`): when each
    /// drain's delay ends, Unix milliseconds. An instance here and in
    /// [`Desired::draining`] drains (no new flows; its pinned flows
    /// continue); here and no longer draining it is *stopped*: it keeps its
    /// host and port, so undraining restarts it in place, but runs no process
    /// and takes no traffic. Persisted, so a restarted controller resumes the
    /// rest of a delay and keeps a stopped instance stopped.
    pub instance_drains: BTreeMap<InstanceKey, u64>,
    /// How middleboxes split their flows among their instances (a controller
    /// setting, never persisted).
    pub distribution: crate::distribution::Distribution,
    /// Under `network-aware` distribution, each middlebox's share of its
    /// flow-hash space per rack, parts per million, by `(tenant,
    /// middlebox)` (live state, never persisted: a restarted controller
    /// lays the split out rack by rack with even shares until it has
    /// measured the traffic again).
    pub shares: BTreeMap<(String, String), BTreeMap<String, u32>>,
    /// Under `network-aware` distribution, the split of each class of a
    /// middlebox's flows (those to the servers of one rack,
    /// [`crate::distribution::classed`]) per rack, parts per million, by
    /// `(tenant, middlebox, class)` (live state, as [`Desired::shares`]).
    /// A class without a split here has none: its flows take the
    /// middlebox's own.
    pub class_shares: BTreeMap<(String, String, String), BTreeMap<String, u32>>,
    /// Each consolidated group's share of its flow-hash space per host,
    /// parts per million, by `(tenant, middlebox)`, from CoMb's network-wide
    /// LP over the measured load ([`crate::consolidation`]; live state,
    /// never persisted: even shares until measured again). Under
    /// `network-aware` distribution only the split inside each rack is
    /// taken from here; the racks' parts are [`Desired::shares`].
    pub comb_shares: BTreeMap<(String, String), BTreeMap<u32, u32>>,
}

/// What [`Desired::drain_host`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostDrain {
    /// Instances placed again, and the host each runs on now.
    pub moved: Vec<(InstanceKey, u32)>,
    /// Instances left on the host: their middlebox keeps flow state inside
    /// them (`state: local`).
    pub kept: Vec<InstanceKey>,
    /// Tenants some of whose instances could not be placed again, and why
    /// (no room elsewhere): those instances are not running anywhere.
    pub failed: Vec<(String, PlaceError)>,
}

/// Why an instance was put on its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Why {
    /// The policy that chose the host.
    pub policy: Policy,
    /// The decision's reason, in words.
    pub reason: String,
}

/// Share of a pinned group's new flows its catching-up instances get together
/// (the rest go to the others, by the usual split): most, but not all, so the
/// new instance is not made the bottleneck while it fills.
pub const CATCH_UP_SHARE: f64 = 0.75;

/// Weight of an ordinary instance in its group (a catching-up one gets more).
pub const BASE_WEIGHT: u32 = 64;

/// Group weights of the instances of one middlebox: [`BASE_WEIGHT`] for ordinary
/// ones, enough for the `catching` ones to share [`CATCH_UP_SHARE`] of the hash
/// space between them when there are `ordinary` others.
pub fn catch_up_weight(ordinary: usize, catching: usize) -> u32 {
    if ordinary == 0 || catching == 0 {
        return BASE_WEIGHT;
    }
    let w = CATCH_UP_SHARE / (1.0 - CATCH_UP_SHARE) * (ordinary as f64) * f64::from(BASE_WEIGHT)
        / catching as f64;
    (w.round() as u32).max(BASE_WEIGHT)
}

/// A request the desired state cannot accommodate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// No host is registered to run NF instances on.
    #[error("no host is registered: cannot place the instances of middlebox `{middlebox}` of tenant `{tenant}`")]
    NoHosts {
        /// Tenant.
        tenant: String,
        /// Middlebox.
        middlebox: String,
    },
    /// The instances asked for fit on no combination of hosts (their
    /// capacity, anti-affinity, port ids).
    #[error("{0}")]
    NoRoom(Shortfall),
    /// A host has no port id left.
    #[error("host {host} has no free port id (1..={MAX_PORT} are all in use)")]
    PortsExhausted {
        /// Host id.
        host: u32,
    },
    /// Every VNI was handed out.
    #[error("no VNI left (1..={MAX_VNI} were all handed out)")]
    VnisExhausted,
    /// The tenant has external elements but no gateway VM.
    #[error("tenant `{0}` has external elements but no VM registered with `gateway: true` (register one with PUT /v1/vms/{0}/NAME)")]
    NoGateway(String),
    /// A second gateway for a tenant.
    #[error("gateway: tenant `{tenant}` already has gateway VM `{existing}`")]
    GatewayTaken {
        /// Tenant.
        tenant: String,
        /// The registered gateway.
        existing: String,
    },
    /// A VM registered on a host interface another VM has.
    #[error("iface: interface `{iface}` on host {host} is VM `{owner}`'s; give each VM its own interface")]
    InterfaceTaken {
        /// Host.
        host: u32,
        /// The interface.
        iface: String,
        /// The VM holding it (`tenant/name`).
        owner: String,
    },
    /// A VM registered with another address than its tenant's spec gives it.
    #[error("addr: VM `{vm}` of tenant `{tenant}` is registered with {registered}, but the spec gives it {spec}")]
    AddrMismatch {
        /// Tenant.
        tenant: String,
        /// VM name.
        vm: String,
        /// Address in the spec.
        spec: String,
        /// Address registered.
        registered: String,
    },
    /// A service VM of the spec is not registered.
    #[error("tenant `{tenant}`: VM `{vm}` is not registered (register it with PUT /v1/vms/{tenant}/{vm} before applying)")]
    UnregisteredVm {
        /// Tenant.
        tenant: String,
        /// VM name.
        vm: String,
    },
    /// No such tenant.
    #[error("tenant `{0}` is not applied")]
    UnknownTenant(String),
    /// No such middlebox.
    #[error("tenant `{tenant}` has no middlebox `{middlebox}`")]
    UnknownMiddlebox {
        /// Tenant.
        tenant: String,
        /// The name asked for.
        middlebox: String,
    },
    /// An instance count out of range.
    #[error("instances: expected a count from 1 to 1024, not {0}")]
    BadCount(u64),
    /// The chain compiler refused the tenant.
    #[error("tenant `{tenant}`: {source}")]
    Compile {
        /// Tenant.
        tenant: String,
        /// Why.
        source: CompileError,
    },
}

impl Desired {
    /// Debug builds: the first stored table in which `next` differs from
    /// this state outside the rows of `touched`'s tenants and hosts (what a
    /// save told `touched` does not compare), if any.
    #[cfg(debug_assertions)]
    pub(crate) fn differs_outside(
        &self,
        next: &Desired,
        touched: &crate::store::Touched,
    ) -> Option<&'static str> {
        fn outside<'a, K: PartialEq + 'a, V: PartialEq + 'a>(
            a: impl IntoIterator<Item = (&'a K, &'a V)>,
            b: impl IntoIterator<Item = (&'a K, &'a V)>,
            keep: impl Fn(&K) -> bool,
        ) -> bool {
            let a = a.into_iter().filter(|(k, _)| keep(k));
            let b = b.into_iter().filter(|(k, _)| keep(k));
            a.ne(b)
        }
        let t = |name: &String| !touched.tenants.contains(name);
        let checks = [
            ("tenants", outside(&self.tenants, &next.tenants, |k| t(k))),
            (
                "hosts",
                outside(&self.hosts, &next.hosts, |h| !touched.hosts.contains(h)),
            ),
            (
                "vms",
                outside(self.vms.iter(), next.vms.iter(), |k| t(&k.0)),
            ),
            (
                "instances",
                outside(self.instances.iter(), next.instances.iter(), |k| t(&k.0)),
            ),
            (
                "why",
                outside(self.why.iter(), next.why.iter(), |k| t(&k.0)),
            ),
            ("scaled", outside(&self.scaled, &next.scaled, |k| t(&k.0))),
            (
                "scaling",
                outside(&self.scaling, &next.scaling, |k| t(&k.0)),
            ),
            (
                "instance_drains",
                outside(&self.instance_drains, &next.instance_drains, |k| t(&k.0)),
            ),
            (
                "backend_drains",
                outside(&self.backend_drains, &next.backend_drains, |k| t(&k.0)),
            ),
            (
                "draining",
                self.draining.iter().filter(|k| t(&k.0)).collect::<Vec<_>>()
                    != next.draining.iter().filter(|k| t(&k.0)).collect::<Vec<_>>(),
            ),
        ];
        checks.into_iter().find(|(_, d)| *d).map(|(n, _)| n)
    }

    /// The VMs registered for `tenant` (applied or not), in key order.
    pub fn tenant_vms<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = (&'a VmKey, &'a Vm)> {
        self.vms.of_tenant(tenant)
    }

    /// The NF instances of `tenant`, in key order.
    pub fn tenant_instances<'a>(
        &'a self,
        tenant: &'a str,
    ) -> impl Iterator<Item = (&'a InstanceKey, &'a Instance)> {
        self.instances.of_tenant(tenant)
    }

    /// The instances of one middlebox of `tenant`, in key order (a range).
    fn middlebox_instances<'a>(
        &'a self,
        tenant: &'a str,
        middlebox: &'a str,
    ) -> impl Iterator<Item = (&'a InstanceKey, &'a Instance)> {
        self.instances
            .range((tenant.to_string(), middlebox.to_string(), 0)..)
            .take_while(move |(k, _)| k.0 == tenant && k.1 == middlebox)
    }

    /// Port ids in use on `host` (VMs of any tenant, applied or not, and instances).
    /// The host's own VMs and instances ([`Placed::on_host`]), not a scan
    /// of the fleet's.
    pub fn used_ports(&self, host: u32) -> BTreeSet<u16> {
        let vms = self.vms.on_host(host).map(|(_, v)| v.port);
        let inst = self.instances.on_host(host).map(|(_, i)| i.port);
        vms.chain(inst).collect()
    }

    /// The smallest port id not in use on `host`.
    pub fn free_port(&self, host: u32) -> Result<u16, PlaceError> {
        let used = self.used_ports(host);
        (1..=MAX_PORT)
            .find(|p| !used.contains(p))
            .ok_or(PlaceError::PortsExhausted { host })
    }

    /// Registers (or re-registers) a VM and returns its port id: a VM staying on
    /// its host keeps its port; one moving gets a new port on its new host.
    pub fn register_vm(&mut self, reg: VmRegistration) -> Result<u16, PlaceError> {
        if reg.gateway {
            if let Some((_, g)) = self
                .tenant_vms(&reg.tenant)
                .find(|(_, v)| v.reg.gateway && v.reg.name != reg.name)
            {
                return Err(PlaceError::GatewayTaken {
                    tenant: reg.tenant.clone(),
                    existing: g.reg.name.clone(),
                });
            }
        }
        // One interface is one VM: a second registration of it (another
        // tenant's, say) would take the first VM's traffic. Only the VMs on
        // its host can hold it.
        if let Some((_, o)) = self.vms.on_host(reg.host).find(|(_, v)| {
            v.reg.iface == reg.iface && (v.reg.tenant != reg.tenant || v.reg.name != reg.name)
        }) {
            return Err(PlaceError::InterfaceTaken {
                host: reg.host,
                iface: reg.iface.clone(),
                owner: format!("{}/{}", o.reg.tenant, o.reg.name),
            });
        }
        let key = (reg.tenant.clone(), reg.name.clone());
        let port = match self.vms.remove(&key) {
            Some(old) if old.reg.host == reg.host => old.port,
            _ => self.free_port(reg.host)?,
        };
        self.vms.insert(key, Vm { reg, port });
        Ok(port)
    }

    /// Applies a validated spec: records it (a new tenant gets the next VNI) and
    /// places its NF instances. Returns false if the same spec was already applied
    /// (nothing changed).
    pub fn apply_tenant(&mut self, yaml: &str, spec: TenantSpec) -> Result<bool, PlaceError> {
        let name = spec.tenant.clone();
        let (vni, generation) = match self.tenants.get(&name) {
            Some(t) if t.yaml == yaml && t.spec == spec => return Ok(false),
            Some(t) => (t.vni, t.generation + 1),
            None => {
                let vni = self.next_vni.max(1);
                if vni > MAX_VNI {
                    return Err(PlaceError::VnisExhausted);
                }
                self.next_vni = vni + 1;
                (vni, 1)
            }
        };
        // A scaled count survives a re-applied spec unless the spec's own count
        // for that middlebox changed (the tenant asked for something new).
        self.scaled.retain(|(t, mb), s| {
            t != &name
                || matches!(spec.elements.get(mb),
                    Some(Element::Middlebox { instances, .. }) if *instances == s.spec_count)
        });
        self.scaling
            .retain(|(t, c), _| t != &name || spec.chains.iter().any(|x| &x.name == c));
        self.tenants.insert(
            name.clone(),
            std::sync::Arc::new(Tenant {
                name: name.clone(),
                yaml: yaml.to_string(),
                spec,
                vni,
                generation,
            }),
        );
        self.place_instances(&name)?;
        Ok(true)
    }

    /// Removes a tenant and its NF instances (its VMs stay registered). Returns
    /// whether it existed.
    pub fn remove_tenant(&mut self, name: &str) -> bool {
        // The tenant's own entries (ranges), not a pass over every tenant's.
        let gone: Vec<InstanceKey> = self
            .tenant_instances(name)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.instances.remove(k);
        }
        let why: Vec<InstanceKey> = self
            .why
            .range((name.to_string(), String::new(), 0)..)
            .take_while(|(k, _)| k.0 == name)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &why {
            self.why.remove(k);
        }
        self.draining.retain(|k| k.0 != name);
        self.instance_drains.retain(|k, _| k.0 != name);
        self.down.retain(|k| k.0 != name);
        self.scaled.retain(|k, _| k.0 != name);
        self.scaling.retain(|k, _| k.0 != name);
        self.blocks.retain(|_, b| b.tenant != name);
        self.tenants.remove(name).is_some()
    }

    /// The instance count of a middlebox: the scaled count if one is set, else
    /// the spec's. None if the tenant or middlebox does not exist.
    pub fn count(&self, tenant: &str, middlebox: &str) -> Option<u32> {
        let t = self.tenants.get(tenant)?;
        match t.spec.elements.get(middlebox)? {
            Element::Middlebox { instances, .. } => Some(
                self.scaled
                    .get(&(tenant.to_string(), middlebox.to_string()))
                    .map_or(*instances, |s| s.count),
            ),
            _ => None,
        }
    }

    /// Whether the middlebox keeps its state inside its instances.
    pub fn local_state(&self, tenant: &str, middlebox: &str) -> bool {
        self.tenants.get(tenant).is_some_and(|t| {
            matches!(
                t.spec.elements.get(middlebox),
                Some(Element::Middlebox {
                    state: StateMode::Local,
                    ..
                })
            )
        })
    }

    /// Whether the middlebox is `state: cached` (its instances may hold
    /// ownership leases, see [`crate::lease`]).
    pub fn cached_state(&self, tenant: &str, middlebox: &str) -> bool {
        self.tenants.get(tenant).is_some_and(|t| {
            matches!(
                t.spec.elements.get(middlebox),
                Some(Element::Middlebox {
                    state: StateMode::Cached,
                    ..
                })
            )
        })
    }

    /// Whether the agents pin the middlebox's flows to their first instance
    /// (`affinity: pinned`), so a changed split moves only new flows.
    pub fn pinned(&self, tenant: &str, middlebox: &str) -> bool {
        self.tenants.get(tenant).is_some_and(|t| {
            matches!(
                t.spec.elements.get(middlebox),
                Some(Element::Middlebox {
                    affinity: Affinity::Pinned,
                    ..
                })
            )
        })
    }

    /// Whether a removed instance of the middlebox is drained first: its state is
    /// inside it and its flows are pinned, so they can finish there. (Unpinned
    /// local state is StatelessNF's naive baseline: its flows move at once.)
    fn drains(&self, tenant: &str, middlebox: &str) -> bool {
        self.local_state(tenant, middlebox) && self.pinned(tenant, middlebox)
    }

    /// Sets a middlebox's instance count and places (or removes, newest first)
    /// instances to match. Instances of local-state middleboxes are drained
    /// rather than removed (see [`Desired::draining`]).
    pub fn scale(&mut self, tenant: &str, middlebox: &str, count: u64) -> Result<(), PlaceError> {
        let t = self
            .tenants
            .get(tenant)
            .ok_or_else(|| PlaceError::UnknownTenant(tenant.to_string()))?;
        let spec_count = match t.spec.elements.get(middlebox) {
            Some(Element::Middlebox { instances, .. }) => *instances,
            _ => {
                return Err(PlaceError::UnknownMiddlebox {
                    tenant: tenant.to_string(),
                    middlebox: middlebox.to_string(),
                })
            }
        };
        if !(1..=1024).contains(&count) {
            return Err(PlaceError::BadCount(count));
        }
        self.scaled.insert(
            (tenant.to_string(), middlebox.to_string()),
            Scaled {
                count: count as u32,
                spec_count,
            },
        );
        self.place_instances(tenant)
    }

    /// Ends the catch-up of a new instance: its group goes back to the target
    /// split. Returns whether it was catching up.
    pub fn end_catch_up(&mut self, key: &InstanceKey) -> bool {
        self.catching_up.remove(key)
    }

    /// Ends the drain of an instance: it is removed (its port freed). Returns
    /// whether it was draining.
    pub fn finish_drain(&mut self, key: &InstanceKey) -> bool {
        if !self.draining.remove(key) {
            return false;
        }
        self.instances.remove(key);
        self.why.remove(key);
        self.down.remove(key);
        self.instance_drains.remove(key);
        true
    }

    /// Whether an operator's drain of the instance ended in its stop: it is
    /// placed but runs no process ([`Desired::instance_drains`]).
    pub fn stopped(&self, key: &InstanceKey) -> bool {
        self.instance_drains.contains_key(key) && !self.draining.contains(key)
    }

    /// Whether a stopped instance is left out of its tenant's placement
    /// altogether (no port, no group), as a removed one is: unless every
    /// instance of its middlebox is stopped (a forced drain of the last
    /// one), when its groups keep them all, weight 0, for want of better.
    fn unplaced_stop(&self, key: &InstanceKey) -> bool {
        self.stopped(key)
            && self
                .middlebox_instances(&key.0, &key.1)
                .any(|(j, _)| !self.stopped(j))
    }

    /// The instances of a middlebox that take new flows: neither draining
    /// nor stopped (down ones count: health comes and goes).
    pub fn serving(&self, tenant: &str, middlebox: &str) -> Vec<InstanceKey> {
        self.middlebox_instances(tenant, middlebox)
            .map(|(k, _)| k)
            .filter(|k| !self.draining.contains(*k) && !self.instance_drains.contains_key(*k))
            .cloned()
            .collect()
    }

    /// An operator drains an instance until `until_ms` (Unix ms): it leaves
    /// its groups for new flows at once (weight 0; a pinned middlebox's
    /// agents keep its pinned flows on it). The reconciler stops it when its
    /// flows are gone or the delay ran out ([`Desired::stop_drained`]).
    pub fn drain_instance(&mut self, key: &InstanceKey, until_ms: u64) {
        self.instance_drains.insert(key.clone(), until_ms);
        self.draining.insert(key.clone());
        self.catching_up.remove(key);
    }

    /// Ends the draining of an instance an operator drained: it stays
    /// placed, stopped, until undrained. Returns whether it was draining
    /// under an operator's drain.
    pub fn stop_drained(&mut self, key: &InstanceKey) -> bool {
        if !self.instance_drains.contains_key(key) || !self.draining.remove(key) {
            return false;
        }
        // It reports nothing once stopped: health from before means nothing.
        self.down.remove(key);
        true
    }

    /// Ends an operator's drain of an instance: it takes new flows again
    /// (restarted first if it was stopped; a pinned middlebox's instance
    /// catches up as a new one does, since other instances hold the pinned
    /// flows). Returns whether it was drained.
    pub fn undrain_instance(&mut self, key: &InstanceKey) -> bool {
        if self.instance_drains.remove(key).is_none() {
            return false;
        }
        self.draining.remove(key);
        if self.pinned(&key.0, &key.1) && self.serving(&key.0, &key.1).len() > 1 {
            self.catching_up.insert(key.clone());
        }
        true
    }

    /// Brings the tenant's NF instances in line with its spec and scaled counts:
    /// instances of middleboxes that are gone, or beyond a middlebox's count, are
    /// removed (newest first; local-state middleboxes' are drained first);
    /// missing ones are placed by [`crate::placement::place`] (capacity,
    /// anti-affinity, best fit), all of a middlebox's or none. Existing
    /// instances never move.
    pub fn place_instances(&mut self, tenant: &str) -> Result<(), PlaceError> {
        let Some(t) = self.tenants.get(tenant) else {
            return Ok(());
        };
        let want: BTreeMap<String, (u32, bool)> = t
            .spec
            .elements
            .iter()
            .filter_map(|(n, e)| match e {
                Element::Middlebox { .. } => Some((
                    n.clone(),
                    (self.count(tenant, n).unwrap_or(1), self.drains(tenant, n)),
                )),
                _ => None,
            })
            .collect();
        let mut drain = Vec::new();
        let mut undrain = Vec::new();
        let (operator, draining) = (&self.instance_drains, &self.draining);
        // The tenant's instances only (a range of the map, not every
        // tenant's): which stay, which go.
        let mut gone = Vec::new();
        for (k, _) in self.instances.of_tenant(tenant) {
            let keep = match want.get(&k.1) {
                None => false,
                // An operator's drain is ended by the operator only.
                Some(&(n, _)) if k.2 < n => {
                    if !operator.contains_key(k) {
                        undrain.push(k.clone());
                    }
                    true
                }
                // Stopped already: nothing left to drain.
                Some(_) if operator.contains_key(k) && !draining.contains(k) => false,
                Some(&(_, true)) => {
                    drain.push(k.clone());
                    true
                }
                Some(_) => false,
            };
            if !keep {
                gone.push(k.clone());
            }
        }
        for k in &gone {
            self.instances.remove(k);
            self.why.remove(k);
        }
        for k in undrain {
            self.draining.remove(&k);
        }
        self.draining.extend(drain);
        let instances = &self.instances;
        self.draining.retain(|k| instances.contains_key(k));
        self.instance_drains
            .retain(|k, _| instances.contains_key(k));
        self.down.retain(|k| instances.contains_key(k));
        let instances = &self.instances;
        self.catching_up.retain(|k| instances.contains_key(k));
        for (mb, (n, _)) in want {
            let pinned = self.pinned(tenant, &mb);
            let serving = self
                .middlebox_instances(tenant, &mb)
                .filter(|(k, _)| !self.draining.contains(*k))
                .count();
            let missing: Vec<InstanceKey> = (0..n)
                .map(|k| (tenant.to_string(), mb.clone(), k))
                .filter(|k| !self.instances.contains_key(k))
                .collect();
            if missing.is_empty() {
                continue;
            }
            if self.hosts.is_empty() {
                return Err(PlaceError::NoHosts {
                    tenant: tenant.to_string(),
                    middlebox: mb.clone(),
                });
            }
            let (demand, anti) = self.demand(tenant, &mb);
            let mut rooms = self.rooms(tenant, &mb);
            let endpoints = self.endpoints(tenant, &mb);
            let ask = Ask {
                tenant,
                middlebox: &mb,
                demand,
                anti,
                n: missing.len() as u32,
                policy: self.policy_for(tenant, &mb),
                endpoints: &endpoints,
            };
            let placed = crate::placement::decide(&mut rooms, &ask).map_err(PlaceError::NoRoom)?;
            for (key, p) in missing.into_iter().zip(placed) {
                if pinned && serving > 0 {
                    self.catching_up.insert(key.clone());
                }
                let port = self.free_port(p.host)?;
                self.instances
                    .insert(key.clone(), Instance { host: p.host, port });
                self.why.insert(
                    key,
                    Why {
                        policy: p.policy,
                        reason: p.reason,
                    },
                );
            }
        }
        Ok(())
    }

    /// The placement policy for new instances of a middlebox: its spec's
    /// `placement:`, else the controller's setting.
    pub fn policy_for(&self, tenant: &str, middlebox: &str) -> Policy {
        match self
            .tenants
            .get(tenant)
            .and_then(|t| t.spec.elements.get(middlebox))
        {
            Some(Element::Middlebox {
                placement: Some(p), ..
            }) => p.parse().unwrap_or(self.policy),
            _ => self.policy,
        }
    }

    /// What each instance of a middlebox takes of its host, and its
    /// anti-affinity (defaults for a middlebox that is not in an applied spec).
    pub fn demand(&self, tenant: &str, middlebox: &str) -> (Resources, AntiAffinity) {
        match self
            .tenants
            .get(tenant)
            .and_then(|t| t.spec.elements.get(middlebox))
        {
            Some(Element::Middlebox {
                resources,
                anti_affinity,
                ..
            }) => (*resources, *anti_affinity),
            _ => (Resources::default(), AntiAffinity::default()),
        }
    }

    /// The VM endpoints (sources and sinks: the VMs of the services at either
    /// end of a chain, the gateway's host for an external end) of the chains
    /// that cross or mirror to `tenant`'s `middlebox`, counted by host, once
    /// per chain end. Unregistered VMs count nowhere.
    pub fn endpoints(&self, tenant: &str, middlebox: &str) -> BTreeMap<u32, u32> {
        let mut out = BTreeMap::new();
        let Some(t) = self.tenants.get(tenant) else {
            return out;
        };
        let host_of = |vm: &str| self.vms.get(&(tenant.to_string(), vm.to_string()));
        let gateway = self
            .vms
            .iter()
            .find(|((tn, _), v)| tn == tenant && v.reg.gateway)
            .map(|(_, v)| v.reg.host);
        for c in &t.spec.chains {
            if !c.path.iter().chain(&c.mirror).any(|e| e == middlebox) {
                continue;
            }
            let ends = [c.path.first(), c.path.last()];
            for end in ends.into_iter().flatten() {
                match t.spec.elements.get(end) {
                    Some(Element::Service { vms }) => {
                        for v in vms {
                            if let Some(r) = host_of(&v.name) {
                                *out.entry(r.reg.host).or_insert(0) += 1;
                            }
                        }
                    }
                    Some(Element::External { .. }) => {
                        if let Some(h) = gateway {
                            *out.entry(h).or_insert(0) += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// The function (`type`) of a middlebox of an applied spec.
    fn function(&self, tenant: &str, middlebox: &str) -> Option<&str> {
        match self.tenants.get(tenant)?.spec.elements.get(middlebox)? {
            Element::Middlebox { function, .. } => Some(function),
            _ => None,
        }
    }

    /// Contains `host`: it leaves every peer list, takes no new instance,
    /// and its instances are placed again on other hosts (their flow state
    /// is in the store). Returns the tenants whose instances moved, and
    /// those that could not be placed again (no room elsewhere) with why.
    pub fn contain(&mut self, host: u32) -> (Vec<String>, Vec<(String, PlaceError)>) {
        self.contained.insert(host);
        self.move_off(host)
    }

    /// Evacuates `host`, silent past the grace period: like [`Self::contain`]
    /// for its instances (placed again elsewhere) and new ones (none until it
    /// is heard again), but it stays everyone's peer.
    pub fn evacuate(&mut self, host: u32) -> (Vec<String>, Vec<(String, PlaceError)>) {
        self.evacuated.insert(host);
        self.move_off(host)
    }

    /// Drains `host` for maintenance: it takes no new instance, and its
    /// instances are placed again on other hosts — all of them with `force`,
    /// else only those whose flow state is in the store (moving a
    /// `state: local` instance would lose its connections; those stay, named
    /// in [`HostDrain::kept`], until the middlebox is scaled in or the drain
    /// is forced).
    pub fn drain_host(&mut self, host: u32, force: bool) -> HostDrain {
        self.cordoned.insert(host);
        let mut kept = Vec::new();
        for (k, i) in &self.instances {
            if i.host == host && !force && self.local_state(&k.0, &k.1) {
                kept.push(k.clone());
            }
        }
        let before: BTreeMap<InstanceKey, Instance> = self
            .instances
            .iter()
            .filter(|(k, i)| i.host == host && !kept.contains(k))
            .map(|(k, i)| (k.clone(), *i))
            .collect();
        let (_, failed) = self.move_off_where(|k, i| i.host == host && !kept.contains(k));
        let moved = before
            .keys()
            .filter_map(|k| Some((k.clone(), self.instances.get(k)?.host)))
            .collect();
        HostDrain {
            moved,
            kept,
            failed,
        }
    }

    /// Ends an operator's drain of `host`: it may take new instances again
    /// (those moved away stay where they are). Returns whether it was drained.
    pub fn undrain_host(&mut self, host: u32) -> bool {
        self.cordoned.remove(&host)
    }

    /// Places `host`'s instances again on the hosts placement may use.
    fn move_off(&mut self, host: u32) -> (Vec<String>, Vec<(String, PlaceError)>) {
        self.move_off_where(|_, i| i.host == host)
    }

    /// Places the instances `which` selects again on the hosts placement
    /// may use.
    fn move_off_where(
        &mut self,
        which: impl Fn(&InstanceKey, &Instance) -> bool,
    ) -> (Vec<String>, Vec<(String, PlaceError)>) {
        let moved: BTreeSet<String> = self
            .instances
            .iter()
            .filter(|(k, i)| which(k, i))
            .map(|(k, _)| k.0.clone())
            .collect();
        // An operator's drain follows its instance to its new host.
        let operator: Vec<InstanceKey> = self
            .draining
            .iter()
            .filter(|k| self.instance_drains.contains_key(*k))
            .cloned()
            .collect();
        self.instances.retain(|k, i| !which(k, i));
        let instances = &self.instances;
        self.draining.retain(|k| instances.contains_key(k));
        self.down.retain(|k| instances.contains_key(k));
        self.catching_up.retain(|k| instances.contains_key(k));
        self.why.retain(|k, _| instances.contains_key(k));
        let mut failed = Vec::new();
        for t in &moved {
            if let Err(e) = self.place_instances(t) {
                failed.push((t.clone(), e));
            }
        }
        for k in operator {
            if self.instances.contains_key(&k) && self.instance_drains.contains_key(&k) {
                self.draining.insert(k.clone());
                self.catching_up.remove(&k);
            }
        }
        (moved.into_iter().collect(), failed)
    }

    /// Every registered host as placement sees it, for new instances of
    /// `tenant`'s `middlebox`: its capacity, what its instances (draining ones
    /// included: they still run) take, its free port ids.
    pub fn rooms(&self, tenant: &str, middlebox: &str) -> Vec<Room> {
        // Every host's ports in use, in one pass over VMs and instances
        // (asking [`Desired::used_ports`] per host made placing an instance
        // cost hosts x (VMs + instances): a fifth of an apply at 5,000 hosts).
        // Now a count per host from the hosts' indexes (ports are unique on
        // a host: [`Desired::free_port`]), not a pass over every VM.
        let mut used: BTreeMap<u32, u32> = BTreeMap::new();
        for (h, n) in self.vms.per_host().chain(self.instances.per_host()) {
            *used.entry(h).or_default() += n;
        }
        let mut rooms: BTreeMap<u32, Room> = self
            .hosts
            .values()
            .filter(|h| {
                !self.contained.contains(&h.id)
                    && !self.evacuated.contains(&h.id)
                    && !self.cordoned.contains(&h.id)
            })
            .map(|h| {
                let room = Room {
                    id: h.id,
                    name: h.name.clone(),
                    capacity: h.capacity.clone().unwrap_or_default(),
                    used: Resources {
                        slots: 0,
                        cores: 0,
                        memory_mib: 0,
                    },
                    instances: 0,
                    mine: 0,
                    free_ports: u32::from(MAX_PORT)
                        .saturating_sub(used.get(&h.id).copied().unwrap_or(0)),
                    rack: h.capacity.as_ref().and_then(|c| c.rack.clone()),
                    tenant_instances: 0,
                    same_function: 0,
                };
                (h.id, room)
            })
            .collect();
        let function = self.function(tenant, middlebox);
        // Instances come in key order, as tenants do: a middlebox's demand
        // and function are read once per middlebox, its tenant's spec found
        // by walking the tenants alongside (a lookup among 10,000 tenants per
        // instance was most of a placement's time).
        let mut last: Option<(&str, &str, Resources, bool)> = None;
        let mut specs = self.tenants.iter().peekable();
        for ((tn, mb, _), i) in self.instances.iter() {
            let Some(r) = rooms.get_mut(&i.host) else {
                continue;
            };
            let (d, same) = match last {
                Some((t, m, d, same)) if t == tn && m == mb => (d, same),
                _ => {
                    while specs.next_if(|(n, _)| n.as_str() < tn.as_str()).is_some() {}
                    let element = specs
                        .peek()
                        .filter(|(n, _)| *n == tn)
                        .and_then(|(_, t)| t.spec.elements.get(mb));
                    // As [`Desired::demand`] and [`Desired::function`] read it.
                    let (d, f) = match element {
                        Some(Element::Middlebox {
                            resources,
                            function,
                            ..
                        }) => (*resources, Some(function.as_str())),
                        _ => (Resources::default(), None),
                    };
                    debug_assert_eq!((d, f), (self.demand(tn, mb).0, self.function(tn, mb)));
                    let same = function.is_some() && f == function;
                    last = Some((tn, mb, d, same));
                    (d, same)
                }
            };
            r.used.slots = r.used.slots.saturating_add(d.slots);
            r.used.cores = r.used.cores.saturating_add(d.cores);
            r.used.memory_mib = r.used.memory_mib.saturating_add(d.memory_mib);
            r.instances += 1;
            if tn == tenant && mb == middlebox {
                r.mine += 1;
            }
            if tn == tenant {
                r.tenant_instances += 1;
            }
            if same {
                r.same_function += 1;
            }
        }
        rooms.into_values().collect()
    }

    /// The tenant's placement for the compiler. A tenant without external elements
    /// may lack a gateway: it then gets host 0 (never a real host), whose entries
    /// [`Desired::compile_tenant`] strips.
    pub fn placement(&self, tenant: &str) -> Result<Placement, PlaceError> {
        let t = &self.tenants[tenant];
        let mut p = Placement {
            vni: t.vni,
            gateway: (HostId(0), PortId(0)),
            ..Placement::default()
        };
        let mut gateway = None;
        // The tenant's own entries only (the maps are ordered by tenant
        // first): a scan of every VM and instance for each tenant made
        // compiling all tenants cost tenants x VMs.
        for ((_, name), vm) in self.tenant_vms(tenant) {
            p.vms
                .insert(name.clone(), (HostId(vm.reg.host), PortId(vm.port)));
            if vm.reg.gateway {
                gateway = Some((HostId(vm.reg.host), PortId(vm.port)));
            }
        }
        let mut externals = false;
        for e in t.spec.elements.values() {
            match e {
                Element::Service { vms } => {
                    for v in vms {
                        let Some(r) = self.vms.get(&(tenant.to_string(), v.name.clone())) else {
                            return Err(PlaceError::UnregisteredVm {
                                tenant: tenant.to_string(),
                                vm: v.name.clone(),
                            });
                        };
                        if r.reg.addr.to_string() != v.addr.to_string() {
                            return Err(PlaceError::AddrMismatch {
                                tenant: tenant.to_string(),
                                vm: v.name.clone(),
                                spec: v.addr.to_string(),
                                registered: r.reg.addr.to_string(),
                            });
                        }
                    }
                }
                Element::External { .. } => externals = true,
                _ => {}
            }
        }
        match gateway {
            Some(g) => p.gateway = g,
            None if externals => return Err(PlaceError::NoGateway(tenant.to_string())),
            None => {}
        }
        /// A middlebox's ordinary instances and catching-up ones.
        #[derive(Default)]
        struct Split {
            ordinary: usize,
            catching: Vec<(HostId, PortId)>,
        }
        let mut catch: BTreeMap<&str, Split> = BTreeMap::new();
        for (k, i) in self.tenant_instances(tenant) {
            if !self.unplaced_stop(k) {
                let hp = (HostId(i.host), PortId(i.port));
                p.instances.entry(k.1.clone()).or_default().push(hp);
                if self.down.contains(k)
                    || self.draining.contains(k)
                    || self.instance_drains.contains_key(k)
                {
                    p.out_of_groups.insert(hp);
                } else if self.catching_up.contains(k) {
                    catch.entry(&k.1).or_default().catching.push(hp);
                } else {
                    catch.entry(&k.1).or_default().ordinary += 1;
                }
            }
        }
        if self.distribution == crate::distribution::Distribution::NetworkAware {
            self.network_aware(tenant, &mut p);
        } else {
            self.consolidated(tenant, &mut p);
        }
        for split in catch.values() {
            let w = catch_up_weight(split.ordinary, split.catching.len());
            for hp in &split.catching {
                p.weights.insert(*hp, w);
            }
        }
        Ok(p)
    }

    /// The rack a host declared ([`crate::distribution::NO_RACK`] if none, or
    /// if it is not registered).
    pub fn rack_of(&self, host: u32) -> &str {
        self.hosts
            .get(&host)
            .and_then(|h| h.capacity.as_ref())
            .and_then(|c| c.rack.as_deref())
            .unwrap_or(crate::distribution::NO_RACK)
    }

    /// Lays each middlebox's group out rack by rack (racks in name order,
    /// instances in placement order within a rack) and weighs its instances
    /// by their rack's share ([`Desired::shares`]; even until one is set),
    /// a consolidated group's instances inside a rack by CoMb's split
    /// ([`Desired::comb_shares`]). Instances out of their groups keep
    /// weight 0 (`out_of_groups`).
    fn network_aware(&self, tenant: &str, p: &mut Placement) {
        for (mb, list) in p.instances.iter_mut() {
            // A stable sort: within a rack the placement order stays.
            list.sort_by(|a, b| self.rack_of(a.0 .0).cmp(self.rack_of(b.0 .0)));
            let key = (tenant.to_string(), mb.clone());
            let serving: Vec<(HostId, PortId)> = list
                .iter()
                .filter(|hp| !p.out_of_groups.contains(hp))
                .copied()
                .collect();
            if let Some(comb) = self.comb_shares.get(&key) {
                // A consolidated group: the racks' parts as solved (or even),
                // each rack's part split among its hosts as CoMb solved.
                let hosts: Vec<u32> = serving.iter().map(|hp| hp.0 .0).collect();
                let names: Vec<&str> = hosts.iter().map(|h| self.rack_of(*h)).collect();
                let racks = crate::consolidation::rack_fractions(&names, self.shares.get(&key));
                let rack_of = |h: u32| self.rack_of(h).to_string();
                let row = crate::consolidation::within_racks(comb, &hosts, &rack_of, &racks);
                if let Some(w) = crate::consolidation::weights(&hosts, &row, BASE_WEIGHT) {
                    for (hp, w) in serving.into_iter().zip(w) {
                        p.weights.insert(hp, w);
                    }
                    continue;
                }
            }
            let racks: Vec<String> = serving
                .iter()
                .map(|hp| self.rack_of(hp.0 .0).to_string())
                .collect();
            // Each class of its flows: a group of its own, weighed alike.
            for ((_, _, class), ppm) in self
                .class_shares
                .range((tenant.to_string(), mb.clone(), String::new())..)
                .take_while(|((t, m, _), _)| t == tenant && m == mb)
            {
                if let Some(w) = crate::distribution::weights(&racks, ppm, BASE_WEIGHT) {
                    p.classes
                        .entry(mb.clone())
                        .or_default()
                        .insert(class.clone(), serving.iter().copied().zip(w).collect());
                }
            }
            let Some(ppm) = self.shares.get(&key) else {
                continue;
            };
            if let Some(w) = crate::distribution::weights(&racks, ppm, BASE_WEIGHT) {
                for (hp, w) in serving.into_iter().zip(w) {
                    p.weights.insert(hp, w);
                }
            }
        }
        if !p.classes.is_empty() {
            for (vm, (h, _)) in &p.vms {
                p.vm_class.insert(vm.clone(), self.rack_of(h.0).to_string());
            }
        }
    }

    /// Weighs the instances of each consolidated group by its host's share
    /// ([`Desired::comb_shares`]; even until one is set, or when its hosts
    /// changed since). Instances out of their groups keep weight 0.
    fn consolidated(&self, tenant: &str, p: &mut Placement) {
        for (mb, list) in &p.instances {
            let Some(ppm) = self.comb_shares.get(&(tenant.to_string(), mb.clone())) else {
                continue;
            };
            let serving: Vec<(HostId, PortId)> = list
                .iter()
                .filter(|hp| !p.out_of_groups.contains(hp))
                .copied()
                .collect();
            let hosts: Vec<u32> = serving.iter().map(|hp| hp.0 .0).collect();
            if let Some(w) = crate::consolidation::weights(&hosts, ppm, BASE_WEIGHT) {
                for (hp, w) in serving.into_iter().zip(w) {
                    p.weights.insert(hp, w);
                }
            }
        }
    }

    /// Compiles one applied tenant.
    pub fn compile_tenant(&self, tenant: &str) -> Result<Compiled, PlaceError> {
        let t = &self.tenants[tenant];
        let p = self.placement(tenant)?;
        let mut c = compile(&t.spec, &p).map_err(|source| PlaceError::Compile {
            tenant: tenant.to_string(),
            source,
        })?;
        let blocks = crate::blocks::entries(
            &t.spec,
            t.vni,
            self.blocks.values().filter(|b| b.tenant == tenant),
        );
        if !blocks.is_empty() {
            // On every host of the tenant: its VMs' (the senders' and the
            // recipients'), its instances' and its gateway's.
            for hf in c.hosts.values_mut() {
                hf.entries.extend(blocks.iter().cloned());
            }
        }
        if p.gateway.0 == HostId(0) {
            // No gateway: traffic for no VM of the tenant has nowhere to go.
            c.hosts.remove(&HostId(0));
            for hf in c.hosts.values_mut() {
                hf.entries.retain(|e| {
                    !e.actions
                        .iter()
                        .any(|a| matches!(a, Action::Output(Output::Host(HostId(0)))))
                });
            }
        }
        Ok(c)
    }

    /// Compiles every applied tenant, reusing the compilation of a tenant
    /// whose spec, placement and blocks did not change.
    pub fn compile_all(&self) -> Result<BTreeMap<String, Arc<Compiled>>, PlaceError> {
        self.compile_some(None)
    }

    /// [`Desired::compile_all`], of the tenants in `only` if given.
    fn compile_some(
        &self,
        only: Option<&BTreeSet<&str>>,
    ) -> Result<BTreeMap<String, Arc<Compiled>>, PlaceError> {
        // The whole derivation forgets the compilations of tenants no longer
        // applied (a scoped one looks at its own tenants only: forgetting
        // across the cache per request cost a pass over every tenant).
        if only.is_none() {
            self.compiled.retain(|t| self.tenants.contains_key(t));
        }
        let tenants: Box<dyn Iterator<Item = (&String, &Arc<Tenant>)>> = match only {
            None => Box::new(self.tenants.iter()),
            Some(o) => Box::new(o.iter().filter_map(|n| self.tenants.get_key_value(*n))),
        };
        tenants
            .map(|(n, t)| {
                let key = CompileKey {
                    yaml: t.yaml.clone(),
                    vni: t.vni,
                    placement: self.placement(n)?,
                    blocks: self
                        .blocks
                        .values()
                        .filter(|b| b.tenant == *n)
                        .cloned()
                        .collect(),
                };
                let c = self.compiled.get_or(n, key, || self.compile_tenant(n))?;
                Ok((n.clone(), c))
            })
            .collect()
    }

    /// Every registered host's configuration (version 0: see [`versioned`]).
    /// Only applied tenants' VMs, instances and entries appear. A host's peers
    /// are itself and the hosts that share a tenant with it (a VM or an NF
    /// instance of the same tenant): the only hosts its FIBs send to or accept
    /// from, so registering a host or placing a tenant changes the
    /// configuration of the hosts involved only.
    pub fn configs(&self, state_url: &str) -> Result<BTreeMap<u32, AgentConfig>, PlaceError> {
        self.configs_of(state_url, None)
    }

    /// [`Desired::configs`] of the registered hosts in `only` (every host if
    /// `None`), each exactly as the whole fleet's derivation gives it: only
    /// the tenants with a VM or an NF instance on one of them are compiled
    /// (a host's FIBs, peers and ports come from those alone), so a change
    /// touching one tenant's hosts costs those hosts, not the fleet.
    pub fn configs_of(
        &self,
        state_url: &str,
        only: Option<&BTreeSet<u32>>,
    ) -> Result<BTreeMap<u32, AgentConfig>, PlaceError> {
        // With a scope, only the tenants with a VM or an instance on one of
        // its hosts can matter (to those hosts' ports, FIBs, sources and
        // peers): found with the hosts' index, their hosts, VMs and
        // instances read as ranges of the ordered maps, not a scan of every
        // tenant's (10,000 tenants: 65,000 entries).
        let relevant: Option<BTreeSet<&str>> = only.map(|o| self.tenants_on(o));
        let compiled = self.compile_some(relevant.as_ref())?;
        let hosts_of: BTreeMap<&str, BTreeSet<u32>> = match &relevant {
            Some(r) => r
                .iter()
                .map(|t| (*t, self.hosts_of_tenant(t)))
                .filter(|(_, hs)| !hs.is_empty())
                .collect(),
            None => self.tenant_hosts(),
        };
        let vms: Box<dyn Iterator<Item = (&VmKey, &Vm)>> = match &relevant {
            Some(r) => Box::new(r.iter().flat_map(|t| self.tenant_vms(t))),
            None => Box::new(self.vms.iter()),
        };
        let instances: Box<dyn Iterator<Item = (&InstanceKey, &Instance)>> = match &relevant {
            Some(r) => Box::new(r.iter().flat_map(|t| self.tenant_instances(t))),
            None => Box::new(self.instances.iter()),
        };
        // What each host holds, gathered once (not once per host).
        let mut vms_on: BTreeMap<u32, Vec<(&VmKey, &Vm)>> = BTreeMap::new();
        for (k, vm) in vms {
            if self.tenants.contains_key(&k.0) {
                vms_on.entry(vm.reg.host).or_default().push((k, vm));
            }
        }
        let mut instances_on: BTreeMap<u32, Vec<(&InstanceKey, &Instance)>> = BTreeMap::new();
        for (k, i) in instances {
            if self.tenants.contains_key(&k.0) {
                instances_on.entry(i.host).or_default().push((k, i));
            }
        }
        let mut fibs_on: BTreeMap<HostId, Vec<(&String, &Arc<Compiled>)>> = BTreeMap::new();
        for (tn, c) in &compiled {
            for h in c.hosts.keys() {
                fibs_on.entry(*h).or_default().push((tn, c));
            }
        }
        let sources_of = self.tenant_sources(&hosts_of);
        // The backends with active checks, per tenant: each is checked by
        // the agent of its VM's host.
        let of_interest: Box<dyn Iterator<Item = (&String, &Arc<Tenant>)>> = match &relevant {
            Some(r) => Box::new(r.iter().filter_map(|n| self.tenants.get_key_value(*n))),
            None => Box::new(self.tenants.iter()),
        };
        let checked: BTreeMap<&String, Vec<crate::reconcile::backends::Configured>> = of_interest
            .filter(|(_, t)| crate::reconcile::backends::has_health_checks(&t.spec))
            .map(|(n, t)| {
                let list: Vec<_> = crate::reconcile::backends::lb_backends(&t.spec)
                    .into_iter()
                    .filter(|c| c.check.is_some())
                    .collect();
                (n, list)
            })
            .filter(|(_, l)| !l.is_empty())
            .collect();
        let mut peers_of: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for hs in hosts_of.values() {
            for &h in hs {
                peers_of.entry(h).or_default().extend(hs.iter().copied());
            }
        }
        let mut out = BTreeMap::new();
        // The hosts asked for (in order), not a pass over the fleet's.
        let wanted: Box<dyn Iterator<Item = u32>> = match only {
            Some(o) => Box::new(o.iter().copied().filter(|h| self.hosts.contains_key(h))),
            None => Box::new(self.hosts.keys().copied()),
        };
        for h in wanted {
            let mut peer_ids = peers_of.remove(&h).unwrap_or_default();
            peer_ids.insert(h);
            // A contained host is nobody's peer (its datagrams are dropped as
            // from an unknown source, nothing is sent to it) and has none.
            if self.contained.contains(&h) {
                peer_ids.retain(|p| *p == h);
            } else {
                peer_ids.retain(|p| !self.contained.contains(p));
            }
            let peers: Vec<Peer> = peer_ids
                .iter()
                .filter_map(|p| self.hosts.get(p))
                .map(|p| Peer {
                    host: p.id,
                    underlay: p.underlay,
                })
                .collect();
            let mut cfg = AgentConfig {
                version: 0,
                host: h,
                pardons: self
                    .pardons
                    .iter()
                    .filter(|(p, _)| **p != h)
                    .map(|(&host, &generation)| sluice_proto::Pardon { host, generation })
                    .collect(),
                ..AgentConfig::default()
            };
            for ((tn, name), vm) in vms_on.get(&h).into_iter().flatten() {
                let t = &self.tenants[tn];
                // The weight of the service the VM belongs to (1 for a
                // gateway or a VM the spec no longer lists).
                let weight = t
                    .spec
                    .elements
                    .values()
                    .filter_map(|e| match e {
                        Element::Service { vms } => vms.iter().find(|v| v.name == *name),
                        _ => None,
                    })
                    .next()
                    .map_or(1, |v| v.weight);
                cfg.ports.push(PortConfig {
                    id: vm.port,
                    vni: t.vni,
                    kind: PortKind::Vm {
                        name: name.clone(),
                        iface: vm.reg.iface.clone(),
                        mac: vm.reg.mac.clone(),
                        weight,
                    },
                });
                // IPv4 only: probes are IPv4 segments (an IPv6 backend has
                // the passive signal and drains only).
                let std::net::IpAddr::V4(addr) = vm.reg.addr else {
                    continue;
                };
                if vm.reg.gateway {
                    continue;
                }
                for c in checked.get(tn).into_iter().flatten() {
                    let Some((hc, tcp_port)) = c.check.as_ref().filter(|_| c.ip == vm.reg.addr)
                    else {
                        continue;
                    };
                    cfg.health_checks.push(sluice_proto::HealthCheck {
                        tenant: tn.clone(),
                        middlebox: c.middlebox.clone(),
                        backend: c.addr.clone(),
                        port: vm.port,
                        addr,
                        tcp_port: *tcp_port,
                        http_path: hc.http_path().map(str::to_string),
                        interval_ms: hc.interval_ms,
                        timeout_ms: hc.timeout_ms,
                    });
                }
            }
            for (key @ (tn, mb, k), i) in instances_on.get(&h).into_iter().flatten() {
                // A stopped instance has no process (the agent stops it)
                // and, like a removed one, no port; it keeps its place in
                // `instances`, so undraining starts it there again.
                if self.unplaced_stop(key) {
                    continue;
                }
                let t = &self.tenants[tn];
                let name = instance_name(tn, mb, *k);
                cfg.ports.push(PortConfig {
                    id: i.port,
                    vni: t.vni,
                    kind: PortKind::Instance { name: name.clone() },
                });
                // The forced last one keeps its port (its groups name it).
                if self.stopped(key) {
                    continue;
                }
                let (chain_yaml, local) = match t.spec.elements.get(mb) {
                    Some(Element::Middlebox {
                        function,
                        config,
                        state,
                        capacity,
                        pipeline,
                        workers,
                        reassembly,
                        ..
                    }) => (
                        chain_yaml(
                            tn,
                            mb,
                            function,
                            config,
                            capacity.as_ref(),
                            (*pipeline, *workers),
                            reassembly,
                        ),
                        *state == StateMode::Local,
                    ),
                    _ => continue,
                };
                cfg.instances.push(InstanceConfig {
                    name,
                    tenant: tn.clone(),
                    middlebox: mb.clone(),
                    port: i.port,
                    vni: t.vni,
                    chain_yaml,
                    // The baseline keeps flow state inside the instance.
                    state: if local {
                        "local".to_string()
                    } else {
                        crate::store_acl::instance_url(state_url, tn)
                    },
                    // Added by the pusher (`store_acl::Passwords::fill`), so it
                    // is never stored.
                    state_password: None,
                    backends: self
                        .backend_states
                        .get(&(tn.clone(), mb.clone()))
                        .cloned()
                        .unwrap_or_default(),
                });
            }
            cfg.ports.sort_by_key(|p| p.id);
            cfg.fabric_auth = self
                .fabric
                .as_ref()
                .map(|f| f.keys_for(h, peers.iter().map(|p| p.host)));
            cfg.peers = peers;
            for (tn, c) in fibs_on.get(&HostId(h)).into_iter().flatten() {
                let Some(hf) = c.hosts.get(&HostId(h)) else {
                    continue;
                };
                cfg.group_policies
                    .extend(self.group_policies(tn, c, hf, HostId(h)));
                cfg.tenants.push(TenantFib {
                    tenant: (*tn).clone(),
                    vni: self.tenants[*tn].vni,
                    entries: hf.entries.clone(),
                    groups: hf.groups.iter().map(|(g, v)| (g.0, v.clone())).collect(),
                    senders: Some(
                        hosts_of
                            .get(tn.as_str())
                            .into_iter()
                            .flatten()
                            .copied()
                            .filter(|&o| o != h)
                            .collect(),
                    ),
                    sources: Some(
                        sources_of
                            .get(tn.as_str())
                            .into_iter()
                            .flatten()
                            .filter(|s| s.host != h)
                            .cloned()
                            .collect(),
                    ),
                    chains: crate::compile::chain_names(&self.tenants[*tn].spec),
                });
            }
            out.insert(h, cfg);
        }
        Ok(out)
    }
}

impl Desired {
    /// Per applied tenant, the hosts where it has a VM or an NF instance
    /// (draining and failed ones included: they still send): the only hosts
    /// whose agents may send its VNI through the fabric.
    /// The tenants of [`Desired::tenant_hosts`] with a host in `hosts`,
    /// from the hosts' index (what is on each host), not a pass over every
    /// tenant. Debug builds compare it with the whole computation.
    pub(crate) fn tenants_on(&self, hosts: &BTreeSet<u32>) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        for &h in hosts {
            // VMs registered ahead of their tenant's spec change nothing yet.
            out.extend(
                self.vms
                    .tenants_on(h)
                    .filter(|t| self.tenants.contains_key(*t)),
            );
            out.extend(self.instances.tenants_on(h));
        }
        #[cfg(debug_assertions)]
        {
            let want: BTreeSet<&str> = self
                .tenant_hosts()
                .into_iter()
                .filter(|(_, hs)| !hs.is_disjoint(hosts))
                .map(|(t, _)| t)
                .collect();
            assert_eq!(out, want, "tenants on hosts {hosts:?}: the index differs");
        }
        out
    }

    /// One tenant's hosts as [`Desired::tenant_hosts`] gives them (its VMs'
    /// if it is applied, and its instances'): ranges of the maps.
    fn hosts_of_tenant(&self, tenant: &str) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        if self.tenants.contains_key(tenant) {
            out.extend(self.tenant_vms(tenant).map(|(_, v)| v.reg.host));
        }
        out.extend(self.tenant_instances(tenant).map(|(_, i)| i.host));
        out
    }

    /// Debug builds and tests: the indexes kept with the VMs and instances
    /// (which tenants are on each host) are what a recomputation from
    /// scratch gives, and every placement reason is of a placed instance.
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn check_indexes(&self) {
        self.vms.check();
        self.instances.check();
        self.why.check();
        self.tenants.check();
        self.hosts.check();
        for k in self.why.keys() {
            assert!(
                self.instances.contains_key(k),
                "placement reason of {k:?}, which is not placed"
            );
        }
    }

    fn tenant_hosts(&self) -> BTreeMap<&str, BTreeSet<u32>> {
        let mut out: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        // VMs registered ahead of their tenant's spec change nothing yet.
        for ((tn, _), vm) in self
            .vms
            .iter()
            .filter(|(k, _)| self.tenants.contains_key(&k.0))
        {
            out.entry(tn.as_str()).or_default().insert(vm.reg.host);
        }
        for ((tn, _, _), i) in &self.instances {
            out.entry(tn.as_str()).or_default().insert(i.host);
        }
        out
    }

    /// Per applied tenant, the inner source addresses each of its hosts may
    /// send its packets from: its VMs' addresses there, for a host that runs
    /// none of the tenant's NF instances and not its gateway (those forward
    /// packets of other sources, and are left unrestricted).
    /// Only the tenants of `hosts_of` are looked at (their VMs and
    /// instances are ranges).
    fn tenant_sources<'a>(
        &'a self,
        hosts_of: &BTreeMap<&'a str, BTreeSet<u32>>,
    ) -> BTreeMap<&'a str, Vec<sluice_proto::PeerSources>> {
        let mut free: BTreeSet<(&str, u32)> = BTreeSet::new();
        let mut addrs: BTreeMap<(&str, u32), Vec<std::net::IpAddr>> = BTreeMap::new();
        for &tn in hosts_of.keys() {
            for (_, i) in self.tenant_instances(tn) {
                free.insert((tn, i.host));
            }
            for (_, vm) in self.tenant_vms(tn) {
                if vm.reg.gateway {
                    free.insert((tn, vm.reg.host));
                }
                addrs
                    .entry((tn, vm.reg.host))
                    .or_default()
                    .push(vm.reg.addr);
            }
        }
        hosts_of
            .iter()
            .map(|(tn, hs)| {
                let list = hs
                    .iter()
                    .filter(|h| !free.contains(&(*tn, **h)))
                    .map(|h| {
                        let mut a = addrs.get(&(*tn, *h)).cloned().unwrap_or_default();
                        a.sort_unstable();
                        a.dedup();
                        sluice_proto::PeerSources { host: *h, addrs: a }
                    })
                    .collect();
                (*tn, list)
            })
            .collect()
    }

    /// The policies of the groups of a tenant's pinned or local-state middleboxes
    /// on host `on`, with the targets (as seen from `on`) of their draining
    /// instances.
    fn group_policies(
        &self,
        tenant: &str,
        c: &Compiled,
        hf: &crate::compile::HostFib,
        on: HostId,
    ) -> Vec<GroupPolicy> {
        let vni = self.tenants[tenant].vni;
        let mut out = Vec::new();
        // A class's group (network-aware distribution) follows its
        // middlebox's policy, as its own group does.
        let groups = c
            .groups
            .iter()
            .chain(c.class_groups.iter().map(|((mb, _), g)| (mb, g)));
        for (mb, g) in groups {
            let (pinned, local) = (self.pinned(tenant, mb), self.local_state(tenant, mb));
            let cached = self.cached_state(tenant, mb);
            if !(pinned || local || cached) || !hf.groups.contains_key(g) {
                continue;
            }
            let target = |i: &Instance| {
                if HostId(i.host) == on {
                    Output::Port(PortId(i.port))
                } else {
                    Output::Host(HostId(i.host))
                }
            };
            let mine = || self.middlebox_instances(tenant, mb);
            let serving: Vec<Output> = mine()
                .filter(|(k, _)| {
                    !self.draining.contains(*k) && !self.instance_drains.contains_key(*k)
                })
                .map(|(_, i)| target(i))
                .collect();
            let mut draining: Vec<Output> = Vec::new();
            for (_, i) in mine().filter(|(k, _)| self.draining.contains(*k)) {
                let o = target(i);
                if !serving.contains(&o) && !draining.contains(&o) {
                    draining.push(o);
                }
            }
            out.push(GroupPolicy {
                vni,
                group: g.0,
                pinned,
                draining,
                local_state: local,
                cached,
                lease_epoch: 0,
            });
        }
        out
    }

    /// Finds an NF instance by name (`tenant/middlebox/k`).
    pub fn instance_by_name(&self, name: &str) -> Option<(&InstanceKey, &Instance)> {
        let mut parts = name.rsplitn(2, '/');
        let k: u32 = parts.next()?.parse().ok()?;
        let rest = parts.next()?;
        let (t, mb) = rest.split_once('/')?;
        self.instances
            .get_key_value(&(t.to_string(), mb.to_string(), k))
    }
}

/// `tenant/middlebox/k`, the name of an NF instance.
pub fn instance_name(tenant: &str, middlebox: &str, k: u32) -> String {
    format!("{tenant}/{middlebox}/{k}")
}

/// The chain an instance of a middlebox runs: one function named after the
/// middlebox (a consolidated group's: its members, named after them, with its
/// chains' sources as the forward direction), in a chain named `{tenant}.{middlebox}` so every instance of the
/// middlebox shares its state keys; with the middlebox's per-instance `capacity`,
/// its `pipeline` window (0: off), its `workers` (1: one thread) and its
/// `reassembly` section (`Null`: the defaults).
pub fn chain_yaml(
    tenant: &str,
    middlebox: &str,
    function: &str,
    config: &Value,
    capacity: Option<&Capacity>,
    (pipeline, workers): (usize, usize),
    reassembly: &Value,
) -> String {
    let functions = sluice_tenant::consolidate::functions_of(middlebox, function, config)
        .into_iter()
        .map(|m| {
            let mut f = Mapping::new();
            f.insert("type".into(), m.function.into());
            f.insert("name".into(), m.name.into());
            if let Value::Mapping(c) = m.config {
                for (k, v) in c {
                    if k.as_str().is_some_and(|k| k == "type" || k == "name") {
                        continue;
                    }
                    f.insert(k, v);
                }
            }
            Value::Mapping(f)
        })
        .collect();
    let mut settings = Mapping::new();
    settings.insert("batch_size".into(), 32u64.into());
    settings.insert("timer_interval_ms".into(), 100u64.into());
    // A consolidated group's pipeline runs replies through its members in
    // reverse, as separate middleboxes would see them.
    let sources = sluice_tenant::consolidate::forward_sources(function, config);
    if !sources.is_empty() {
        settings.insert(
            "forward_sources".into(),
            Value::Sequence(sources.into_iter().map(Value::String).collect()),
        );
    }
    if let Some(c) = capacity {
        let mut m = Mapping::new();
        if let Some(p) = c.pps {
            m.insert("pps".into(), p.into());
        }
        if let Some(b) = c.mbps {
            m.insert("mbps".into(), b.into());
        }
        m.insert("burst_ms".into(), c.burst_ms.into());
        settings.insert("capacity".into(), Value::Mapping(m));
    }
    if pipeline > 0 {
        settings.insert("pipeline".into(), (pipeline as u64).into());
    }
    if workers > 1 {
        settings.insert("workers".into(), (workers as u64).into());
    }
    let mut doc = Mapping::new();
    doc.insert("name".into(), format!("{tenant}.{middlebox}").into());
    doc.insert("functions".into(), Value::Sequence(functions));
    doc.insert("settings".into(), Value::Mapping(settings));
    if !matches!(reassembly, Value::Null) {
        doc.insert("reassembly".into(), reassembly.clone());
    }
    // A mapping of strings, numbers and YAML values always serialises.
    yaml_serde::to_string(&Value::Mapping(doc)).unwrap_or_default()
}

/// Gives each new configuration its version: unchanged (version aside) keeps the
/// old version, changed or new gets the old one plus one. Returns the hosts whose
/// version changed.
pub fn versioned(
    old: &BTreeMap<u32, AgentConfig>,
    new: &mut BTreeMap<u32, AgentConfig>,
) -> Vec<u32> {
    let mut changed = Vec::new();
    for (h, cfg) in new.iter_mut() {
        match old.get(h) {
            Some(o) => {
                cfg.version = o.version;
                if o != cfg {
                    cfg.version = o.version + 1;
                    changed.push(*h);
                }
            }
            None => {
                cfg.version = 1;
                changed.push(*h);
            }
        }
    }
    changed
}

mod compile_cache;
pub use compile_cache::CompileCache;
pub mod pmap;
use compile_cache::CompileKey;
pub use pmap::{PMap, Placed};

#[cfg(test)]
mod tests;
