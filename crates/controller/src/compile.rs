//! Compiling a tenant's chains into FIB entries, per host.
//!
//! The switch is distributed: every host holds the entries for its own ports and
//! for packets arriving from the fabric addressed to it. The compiler follows
//! Stratos §3.2:
//!
//! * **Hop 0**, at every port where a chain's source traffic enters (the source
//!   service's VM ports, or the gateway port for an external source): match the
//!   source and destination addresses and the chain's selects, mark the packet with
//!   `(chain, 1)` and send it to the instance of the first middlebox its flow hash
//!   picks ([`Action::Select`] over the middlebox's [`Group`]); mirror a copy to
//!   off-path middleboxes.
//! * **Middlebox hops.** Packets go to an NF instance with their `(chain, hop)` and
//!   come back from it with the same mark (Sluice's instances keep it, as the
//!   tunnel option between agent and instance), so the agent knows the chain even
//!   for a middlebox shared by several chains and after a NAT or LB rewrote the
//!   headers: at the instance's port, `(chain, i)` moves on to `(chain, i+1)` and the
//!   next middlebox's group, or to the destination.
//! * **Fabric.** A group or destination on another host is reached through the
//!   tunnel ([`Output::Host`]); the receiving host matches the mark and, for a group,
//!   selects again with the same ranges and hash, which lands on its local instance.
//! * **Delivery** to a service goes to the VM owning the destination address
//!   (after an LB's rewrite, the backend); to an external destination, the gateway.
//! * **Bidirectional** chains get a reverse chain id (`2c + 1`) crossing the
//!   middleboxes in reverse order.
//! * **Traffic in no chain** is forwarded normally by lowest-priority entries: to
//!   the VM with the destination address, wherever it is, else to the gateway.
//! * **IP fragments** after the first carry no ports; the switch lets them meet a
//!   select's port conditions (`sluice_switch::Fib`), so every fragment of a
//!   datagram a chain selects by port crosses its middleboxes.

use std::collections::{BTreeMap, BTreeSet};

use sluice_chain::Prefix;
use sluice_switch::{Action, Entry, Group, GroupId, HostId, Match, Output, PortId};
use sluice_tenant::{Element, Select, TenantSpec};
use sluice_wire::IpAddr;

/// Group weights by instance (host, port).
pub type Weights = BTreeMap<(HostId, PortId), u32>;

/// Where the tenant's VMs and NF instances run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    /// VM name -> (host, port).
    pub vms: BTreeMap<String, (HostId, PortId)>,
    /// Middlebox name -> its instances' (host, port), in order.
    pub instances: BTreeMap<String, Vec<(HostId, PortId)>>,
    /// Where traffic to and from external subnets enters and leaves.
    pub gateway: (HostId, PortId),
    /// The tenant's VNI.
    pub vni: u32,
    /// Instances that keep their ports and entries but get no new flows: weight 0
    /// in their middlebox's group (failed, suspected, or draining). If every
    /// instance of a middlebox is listed, its group keeps them all (there is
    /// nowhere better to send its traffic).
    pub out_of_groups: BTreeSet<(HostId, PortId)>,
    /// Group weights of instances that get more than their share of new flows
    /// (catching up after a scale-out); others weigh
    /// [`crate::desired::BASE_WEIGHT`].
    pub weights: BTreeMap<(HostId, PortId), u32>,
    /// Splits of classes of a middlebox's flows (network-aware
    /// distribution, [`crate::distribution::classed`]): middlebox -> class
    /// (the rack of the servers the flows are for) -> each serving
    /// instance's weight in the class's group (instances missing weigh 0).
    /// A class gets a group of its own, selected by the server's address
    /// at the middlebox's hops, in both directions.
    pub classes: BTreeMap<String, BTreeMap<String, Weights>>,
    /// The class (rack) of each VM, by name, where classes are used.
    pub vm_class: BTreeMap<String, String>,
}

impl Placement {
    /// The weight of instance `hp` of a middlebox whose instances are
    /// `group` in the group of its flows' class `class` (`None`: the
    /// middlebox's own group, [`Placement::weight`]). If no instance of the
    /// class has weight, all take their own group's: a class's split never
    /// leaves its flows nowhere to go.
    pub fn class_weight(
        &self,
        mb: &str,
        class: Option<&str>,
        group: &[(HostId, PortId)],
        hp: (HostId, PortId),
    ) -> u32 {
        let Some(w) = class.and_then(|c| self.classes.get(mb)?.get(c)) else {
            return self.weight(group, hp);
        };
        if group.iter().all(|x| w.get(x).copied().unwrap_or(0) == 0) {
            return self.weight(group, hp);
        }
        if self.out_of_groups.contains(&hp) {
            return 0;
        }
        w.get(&hp).copied().unwrap_or(0)
    }

    /// The group weight of instance `hp` of a middlebox whose instances are
    /// `group`: 0 out of its group, unless every instance is (then all keep
    /// the base weight: there is nowhere better to send the traffic); else
    /// its own weight if it has one, the base weight otherwise.
    pub fn weight(&self, group: &[(HostId, PortId)], hp: (HostId, PortId)) -> u32 {
        if group.iter().all(|x| self.out_of_groups.contains(x)) {
            crate::desired::BASE_WEIGHT
        } else if self.out_of_groups.contains(&hp) {
            0
        } else {
            self.weights
                .get(&hp)
                .copied()
                .unwrap_or(crate::desired::BASE_WEIGHT)
        }
    }
}

/// What one host must install.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostFib {
    /// Entries (the host sorts them by priority on install).
    pub entries: Vec<Entry>,
    /// Instance groups referenced by the entries.
    pub groups: BTreeMap<GroupId, Group>,
}

/// The compiled switch: each host's share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compiled {
    /// Per host.
    pub hosts: BTreeMap<HostId, HostFib>,
    /// Middlebox name -> the id of its group (the same on every host).
    pub groups: BTreeMap<String, GroupId>,
    /// (middlebox, class) -> the id of the group of that class of its
    /// flows ([`Placement::classes`]; the same on every host).
    pub class_groups: BTreeMap<(String, String), GroupId>,
}

impl Compiled {
    /// Total entries over every host.
    pub fn entries(&self) -> usize {
        self.hosts.values().map(|h| h.entries.len()).sum()
    }
}

/// A spec and placement that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// A VM of a service has no placement.
    #[error("VM `{0}` is not placed on any host")]
    UnplacedVm(String),
    /// A middlebox has no instance placed.
    #[error("middlebox `{0}` has no instance placed")]
    NoInstances(String),
    /// More chains or hops than the tunnel option can carry.
    #[error(
        "chain `{0}` is too long or there are too many chains (at most 32767 chains of 254 hops)"
    )]
    TooLarge(String),
}

/// The fabric mark of the `k`-th mirror of a chain ([`sluice_switch::MIRROR_HOP`]
/// set; a chain mirrors to far fewer than 128 middleboxes).
fn mirror_hop(k: usize) -> u8 {
    sluice_switch::MIRROR_HOP | (k.min(0x7f) as u8)
}

const PRIO_CHAIN: u16 = 1000;
/// Below every hop entry, above the tenant's defaults: see the mirror entries.
const PRIO_MIRROR_BACK: u16 = 500;
const PRIO_HOP: u16 = 2000;
const PRIO_DEFAULT: u16 = 10;

struct Builder<'a> {
    spec: &'a TenantSpec,
    place: &'a Placement,
    out: Compiled,
    next_id: u64,
    group_of: BTreeMap<String, GroupId>,
    class_group_of: BTreeMap<(String, String), GroupId>,
}

/// The addresses an endpoint element stands for, as prefixes.
/// One direction of a chain, as [`Builder::direction`] compiles it.
#[derive(Clone, Copy)]
struct Direction<'a> {
    /// The tunnel's chain id.
    chain: u16,
    /// The source element.
    from: &'a str,
    /// The destination element.
    to: &'a str,
    /// The middleboxes, in the order this direction crosses them.
    mbs: &'a [String],
    /// What of the traffic the chain takes.
    sel: &'a Select,
    /// Middleboxes that get a copy.
    mirror: &'a [String],
    /// Addresses the source is also reached by.
    src_extra: &'a [Prefix],
    /// Addresses the destination is also reached by (a load balancer's virtual
    /// IPs, a NAT's public pool).
    dst_extra: &'a [Prefix],
    /// The middleboxes whose flows are split by class, and the servers'
    /// addresses with their classes.
    classed: &'a [String],
    servers: &'a [(Prefix, String)],
    /// The servers are the destination (the chain's direction), not the
    /// source (its replies).
    servers_at_dst: bool,
}

fn endpoint_prefixes(e: &Element) -> Vec<Prefix> {
    match e {
        Element::External { subnets } => subnets.clone(),
        Element::Service { vms } => vms
            .iter()
            .map(|v| {
                Prefix::new(v.addr, if v.addr.is_v4() { 32 } else { 128 }).expect("host prefix")
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl<'a> Builder<'a> {
    fn host(&mut self, h: HostId) -> &mut HostFib {
        self.out.hosts.entry(h).or_default()
    }

    fn add(&mut self, h: HostId, priority: u16, m: Match, actions: Vec<Action>) {
        self.next_id += 1;
        let id = self.next_id;
        self.host(h).entries.push(Entry {
            id,
            priority,
            m,
            actions,
        });
    }

    /// The group of a middlebox's instances, defined on every host that uses it.
    fn group(&mut self, mb: &str, on: HostId) -> Result<GroupId, CompileError> {
        self.class_group(mb, None, on)
    }

    /// The group of a middlebox's instances for the flows of class `class`
    /// (`None`: its own group), defined on every host that uses it.
    fn class_group(
        &mut self,
        mb: &str,
        class: Option<&str>,
        on: HostId,
    ) -> Result<GroupId, CompileError> {
        let inst = self
            .place
            .instances
            .get(mb)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| CompileError::NoInstances(mb.to_string()))?;
        let n = (self.group_of.len() + self.class_group_of.len()) as u32;
        let id = match class {
            None => *self
                .group_of
                .entry(mb.to_string())
                .or_insert(GroupId(n + 1)),
            Some(c) => *self
                .class_group_of
                .entry((mb.to_string(), c.to_string()))
                .or_insert(GroupId(n + 1)),
        };
        let targets: Vec<(Output, u32)> = inst
            .iter()
            .map(|&(h, p)| {
                (
                    if h == on {
                        Output::Port(p)
                    } else {
                        Output::Host(h)
                    },
                    self.place.class_weight(mb, class, inst, (h, p)),
                )
            })
            .collect();
        let g = Group::split(&targets).expect("instances have weight");
        self.host(on).groups.insert(id, g);
        Ok(id)
    }

    /// The class of the flows of `m` (hop 0's source and destination) at
    /// middlebox `mb`, if `mb` splits this direction's flows by class and
    /// has a split for the server's.
    fn class_of(&self, d: &Direction<'_>, mb: &str, m: &Match) -> Option<String> {
        if !d.classed.iter().any(|x| x == mb) {
            return None;
        }
        let addr = if d.servers_at_dst { m.dst } else { m.src }?;
        let (_, c) = d.servers.iter().find(|(p, _)| *p == addr)?;
        self.place
            .classes
            .get(mb)
            .is_some_and(|cs| cs.contains_key(c))
            .then(|| c.clone())
    }

    /// Entries selecting middlebox `mb`'s class groups on host `h`, one per
    /// server of a class it splits: `base` plus the server's address (the
    /// destination, or the source of replies), a notch above `base`'s own
    /// entry (which stays for flows to no server of a class, e.g. still
    /// addressed to a virtual IP), with `pre` before the select.
    fn class_selects(
        &mut self,
        d: &Direction<'_>,
        h: HostId,
        mb: &str,
        base: &Match,
        pre: &[Action],
    ) -> Result<(), CompileError> {
        if !d.classed.iter().any(|x| x == mb) {
            return Ok(());
        }
        for (prefix, class) in d.servers {
            if !self
                .place
                .classes
                .get(mb)
                .is_some_and(|cs| cs.contains_key(class))
            {
                continue;
            }
            let g = self.class_group(mb, Some(class), h)?;
            let mut m = base.clone();
            if d.servers_at_dst {
                m.dst = Some(*prefix);
            } else {
                m.src = Some(*prefix);
            }
            if self.host(h).entries.iter().any(|e| e.m == m) {
                continue;
            }
            let mut acts = pre.to_vec();
            acts.push(Action::Select(g));
            self.add(h, PRIO_HOP + 1, m, acts);
        }
        Ok(())
    }

    fn hosts_of(&self, mb: &str) -> Vec<(HostId, PortId)> {
        self.place.instances.get(mb).cloned().unwrap_or_default()
    }

    /// Entry points of an endpoint element: (host, port) where its traffic enters.
    fn ports_of(&self, name: &str) -> Result<Vec<(HostId, PortId)>, CompileError> {
        match &self.spec.elements[name] {
            Element::Service { vms } => vms
                .iter()
                .map(|v| {
                    self.place
                        .vms
                        .get(&v.name)
                        .copied()
                        .ok_or_else(|| CompileError::UnplacedVm(v.name.clone()))
                })
                .collect(),
            _ => Ok(vec![self.place.gateway]),
        }
    }

    /// Actions that deliver a packet to endpoint `dst` from host `on`: a service's
    /// VMs by destination address (one entry each), an external via the gateway.
    fn deliver(
        &mut self,
        on: HostId,
        base: &Match,
        dst: &str,
        priority: u16,
        pre: &[Action],
    ) -> Result<(), CompileError> {
        let targets: Vec<(Option<IpAddr>, (HostId, PortId))> = match &self.spec.elements[dst] {
            Element::Service { vms } => vms
                .iter()
                .map(|v| {
                    self.place
                        .vms
                        .get(&v.name)
                        .map(|&hp| (Some(v.addr), hp))
                        .ok_or_else(|| CompileError::UnplacedVm(v.name.clone()))
                })
                .collect::<Result<_, _>>()?,
            _ => vec![(None, self.place.gateway)],
        };
        for (addr, (h, p)) in targets {
            let mut m = base.clone();
            if let Some(a) = addr {
                m.dst =
                    Some(Prefix::new(a, if a.is_v4() { 32 } else { 128 }).expect("host prefix"));
            }
            let out = if h == on {
                Output::Port(p)
            } else {
                Output::Host(h)
            };
            let mut acts = pre.to_vec();
            acts.push(Action::Output(out));
            self.add(on, priority, m, acts);
        }
        Ok(())
    }

    /// Entries steering one direction of a chain.
    fn direction(&mut self, d: Direction<'_>) -> Result<(), CompileError> {
        let Direction {
            chain,
            from,
            to,
            mbs,
            sel,
            mirror,
            src_extra,
            dst_extra,
            ..
        } = d;
        let dir = d;
        let vni = self.place.vni;
        let mut src_p = endpoint_prefixes(&self.spec.elements[from]);
        src_p.extend_from_slice(src_extra);
        let mut dst_p = endpoint_prefixes(&self.spec.elements[to]);
        dst_p.extend_from_slice(dst_extra);
        // Hop 0: at every entry port of the source, one entry per (src, dst) prefix pair
        // (selects narrow further).
        for (h, port) in self.ports_of(from)? {
            for s in &src_p {
                for d in &dst_p {
                    let mut m = Match {
                        in_port: Some(port),
                        vni: Some(vni),
                        ..Match::default()
                    };
                    m.src = Some(narrow(s, &sel.src));
                    m.dst = Some(narrow(d, &sel.dst));
                    m.proto = sel.proto;
                    m.sport = sel.sport;
                    m.dport = sel.dport;
                    let mut acts = Vec::new();
                    for (k, mb) in mirror.iter().enumerate() {
                        if let Some(&(mh, mp)) = self.hosts_of(mb).first() {
                            acts.push(if mh == h {
                                Action::Mirror(Output::Port(mp))
                            } else {
                                Action::MirrorVia {
                                    host: mh,
                                    chain,
                                    hop: mirror_hop(k),
                                }
                            });
                        }
                    }
                    if let Some(first) = mbs.first() {
                        let class = self.class_of(&dir, first, &m);
                        let g = self.class_group(first, class.as_deref(), h)?;
                        acts.push(Action::SetChainHop { chain, hop: 1 });
                        acts.push(Action::Select(g));
                        self.add(h, PRIO_CHAIN, m, acts);
                    } else {
                        self.deliver(h, &m, to, PRIO_CHAIN, &acts)?;
                    }
                }
            }
        }
        // A mirror's copies from other hosts: handed to its instance (they
        // carry the mirror's own mark, never a hop of the chain's path).
        for (k, mb) in mirror.iter().enumerate() {
            if let Some(&(mh, mp)) = self.hosts_of(mb).first() {
                let m = Match {
                    from_fabric: Some(true),
                    vni: Some(vni),
                    chain_hop: Some((chain, mirror_hop(k))),
                    ..Match::default()
                };
                if !self.host(mh).entries.iter().any(|e| e.m == m) {
                    self.add(mh, PRIO_HOP, m, vec![Action::Output(Output::Port(mp))]);
                }
                // What the mirror's instance sends back is a copy: dropped
                // there, never forwarded (the tenant's catch-all entry would
                // hand it to the gateway, and a reply's copy, taken before
                // the LB, to the client under the backend's own address).
                // Its returns of traffic on a path it is in match that
                // path's hop entries first.
                let back = Match {
                    in_port: Some(mp),
                    vni: Some(vni),
                    ..Match::default()
                };
                if !self.host(mh).entries.iter().any(|e| e.m == back) {
                    self.add(mh, PRIO_MIRROR_BACK, back, vec![Action::Drop]);
                }
            }
        }
        // Middlebox hops: arriving from the fabric for hop i, and leaving instance i.
        for (i, mb) in mbs.iter().enumerate() {
            let hop = (i + 1) as u8;
            for (h, port) in self.hosts_of(mb) {
                // From the fabric to this host's instance of hop i.
                let m = Match {
                    from_fabric: Some(true),
                    vni: Some(vni),
                    chain_hop: Some((chain, hop)),
                    ..Match::default()
                };
                let g = self.group(mb, h)?;
                self.class_selects(&dir, h, mb, &m, &[])?;
                if !self.host(h).entries.iter().any(|e| e.m == m) {
                    self.add(h, PRIO_HOP, m, vec![Action::Select(g)]);
                }
                // Back from the instance: on to the next hop or the destination.
                let m = Match {
                    in_port: Some(port),
                    vni: Some(vni),
                    chain_hop: Some((chain, hop)),
                    ..Match::default()
                };
                match mbs.get(i + 1) {
                    Some(next) => {
                        let g = self.group(next, h)?;
                        let set = [Action::SetChainHop {
                            chain,
                            hop: hop + 1,
                        }];
                        self.class_selects(&dir, h, next, &m, &set)?;
                        self.add(
                            h,
                            PRIO_HOP,
                            m,
                            vec![
                                Action::SetChainHop {
                                    chain,
                                    hop: hop + 1,
                                },
                                Action::Select(g),
                            ],
                        );
                    }
                    None => {
                        let done = [Action::SetChainHop {
                            chain,
                            hop: hop + 1,
                        }];
                        self.deliver(h, &m, to, PRIO_HOP, &done)?;
                    }
                }
            }
        }
        // Delivery hop from the fabric: the last mark, to the destination's port.
        let last = (mbs.len() + 1) as u8;
        let dst_hosts: Vec<HostId> = self.ports_of(to)?.into_iter().map(|(h, _)| h).collect();
        for h in dst_hosts {
            let m = Match {
                from_fabric: Some(true),
                vni: Some(vni),
                chain_hop: Some((chain, last)),
                ..Match::default()
            };
            if !self
                .host(h)
                .entries
                .iter()
                .any(|e| e.m.chain_hop == Some((chain, last)) && e.m.from_fabric == Some(true))
            {
                self.deliver(h, &m, to, PRIO_HOP, &[])?;
            }
        }
        Ok(())
    }
}

/// Narrows an endpoint prefix by a select's prefixes (the more specific wins;
/// a select disjoint from the endpoint was refused by validation or matches nothing).
fn narrow(p: &Prefix, sel: &[Prefix]) -> Prefix {
    sel.iter()
        .find(|s| p.contains(&s.network()) && s.len() >= p.len())
        .copied()
        .unwrap_or(*p)
}

/// Addresses a chain's destination is also reached by (load balancers' virtual IPs)
/// and its source's replies are addressed to (NATs' public pools).
fn aliases(spec: &TenantSpec, mbs: &[String]) -> (Vec<Prefix>, Vec<Prefix>) {
    let (mut vips, mut pools) = (Vec::new(), Vec::new());
    for mb in mbs {
        let Some(Element::Middlebox {
            function, config, ..
        }) = spec.elements.get(mb)
        else {
            continue;
        };
        // A consolidated group's NAT rewrites as a NAT of its own would.
        for f in sluice_tenant::consolidate::functions_of(mb, function, config) {
            let (function, config) = (&f.function, &f.config);
            match function.as_str() {
                "lb" => {
                    for s in config
                        .get("services")
                        .and_then(|v| v.as_sequence())
                        .into_iter()
                        .flatten()
                    {
                        if let Some(p) = s
                            .get("vip")
                            .and_then(|v| v.as_str())
                            .and_then(|v| Prefix::parse(v).ok())
                        {
                            vips.push(p);
                        }
                    }
                }
                "nat" => {
                    for p in config
                        .get("pool")
                        .and_then(|v| v.as_sequence())
                        .into_iter()
                        .flatten()
                    {
                        if let Some(p) = p.as_str().and_then(|v| Prefix::parse(v).ok()) {
                            pools.push(p);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    (vips, pools)
}

/// The chain ids [`compile`] marks a tenant's packets with, and the chains
/// they stand for: chain `i` of the spec is `2i`, its replies' direction
/// (if bidirectional) `2i + 1`.
pub fn chain_names(spec: &TenantSpec) -> Vec<sluice_proto::ChainName> {
    let mut out = Vec::new();
    for (ci, c) in spec.chains.iter().enumerate() {
        out.push(sluice_proto::ChainName {
            id: (2 * ci) as u16,
            name: c.name.clone(),
            reverse: false,
        });
        if c.bidirectional {
            out.push(sluice_proto::ChainName {
                id: (2 * ci + 1) as u16,
                name: c.name.clone(),
                reverse: true,
            });
        }
    }
    out
}

/// Compiles a validated spec with a placement into every host's FIB.
pub fn compile(spec: &TenantSpec, place: &Placement) -> Result<Compiled, CompileError> {
    let mut b = Builder {
        spec,
        place,
        out: Compiled::default(),
        next_id: 0,
        group_of: BTreeMap::new(),
        class_group_of: BTreeMap::new(),
    };
    // Every host that runs anything gets a FIB, even if only default entries.
    let mut hosts: Vec<HostId> = place.vms.values().map(|v| v.0).collect();
    hosts.extend(place.instances.values().flatten().map(|v| v.0));
    hosts.push(place.gateway.0);
    hosts.sort();
    hosts.dedup();
    for &h in &hosts {
        b.host(h);
    }
    if spec.chains.len() > 16_383 {
        return Err(CompileError::TooLarge(spec.chains[0].name.clone()));
    }
    for (ci, c) in spec.chains.iter().enumerate() {
        let mbs: Vec<String> = c.middleboxes(spec).map(String::from).collect();
        if mbs.len() > 250 {
            return Err(CompileError::TooLarge(c.name.clone()));
        }
        let sel = spec.selector(c).unwrap_or_default();
        let (from, to) = (c.path[0].clone(), c.path[c.path.len() - 1].clone());
        let (vips, pools) = aliases(spec, &mbs);
        // Classes of flows by their server's rack, where the placement has
        // splits for them.
        let classed: Vec<String> = if place.classes.is_empty() {
            Vec::new()
        } else {
            crate::distribution::classed(spec, c, &place.vm_class)
        };
        let servers: Vec<(Prefix, String)> = match spec.elements.get(&to) {
            Some(Element::Service { vms }) if !classed.is_empty() => vms
                .iter()
                .filter_map(|v| {
                    let class = place.vm_class.get(&v.name)?;
                    let len = if v.addr.is_v4() { 32 } else { 128 };
                    Some((Prefix::new(v.addr, len)?, class.clone()))
                })
                .collect(),
            _ => Vec::new(),
        };
        b.direction(Direction {
            chain: (2 * ci) as u16,
            from: &from,
            to: &to,
            mbs: &mbs,
            sel: &sel,
            mirror: &c.mirror,
            src_extra: &[],
            dst_extra: &vips,
            classed: &classed,
            servers: &servers,
            servers_at_dst: true,
        })?;
        if c.bidirectional {
            let rev: Vec<String> = mbs.iter().rev().cloned().collect();
            let rsel = Select {
                src: sel.dst.clone(),
                dst: sel.src.clone(),
                sport: sel.dport,
                dport: sel.sport,
                proto: sel.proto,
            };
            b.direction(Direction {
                chain: (2 * ci + 1) as u16,
                from: &to,
                to: &from,
                mbs: &rev,
                sel: &rsel,
                mirror: &c.mirror,
                src_extra: &[],
                dst_extra: &pools,
                classed: &classed,
                servers: &servers,
                servers_at_dst: false,
            })?;
        }
    }
    // Traffic in no chain: to the VM with the destination address, else the gateway.
    let vms: Vec<(IpAddr, HostId, PortId)> = spec
        .elements
        .values()
        .filter_map(|e| match e {
            Element::Service { vms } => Some(vms),
            _ => None,
        })
        .flatten()
        .filter_map(|v| place.vms.get(&v.name).map(|&(h, p)| (v.addr, h, p)))
        .collect();
    for &h in &hosts {
        for &(addr, vh, vp) in &vms {
            let m = Match {
                vni: Some(place.vni),
                chain_hop: None,
                dst: Some(
                    Prefix::new(addr, if addr.is_v4() { 32 } else { 128 }).expect("host prefix"),
                ),
                ..Match::default()
            };
            let out = if vh == h {
                Output::Port(vp)
            } else {
                Output::Host(vh)
            };
            b.add(h, PRIO_DEFAULT, m, vec![Action::Output(out)]);
        }
        let gw = place.gateway;
        let out = if gw.0 == h {
            Output::Port(gw.1)
        } else {
            Output::Host(gw.0)
        };
        b.add(
            h,
            PRIO_DEFAULT - 1,
            Match {
                vni: Some(place.vni),
                ..Match::default()
            },
            vec![Action::Output(out)],
        );
    }
    b.out.groups = b.group_of;
    b.out.class_groups = b.class_group_of;
    Ok(b.out)
}
