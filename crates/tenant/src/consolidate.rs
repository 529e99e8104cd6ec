//! Consolidation (CoMb §3, "hyperapps"): middleboxes a tenant asks to run
//! together, in one instance process per host, so they parse every packet
//! and reassemble every TCP stream once between them.
//!
//! ```yaml
//! consolidate:
//!   - name: edge
//!     members: [fw, ips, mon]
//!     instances: 2          # default: the most any member asks for
//! ```
//!
//! A group becomes one middlebox element named after it, whose function is
//! [`HYPERAPP`]: its configuration lists the members' functions in order
//! (`functions:`) and the sources of the chains crossing it
//! (`forward_sources:`), and every chain path crosses the group where it
//! crossed the members. Placement, the switch, scaling, failover and flow
//! distribution then treat the group as the one middlebox it is at run time;
//! inside an instance, [`sluice_chain`] runs the members as one pipeline
//! (forward packets in the members' order, replies in reverse, as separate
//! middleboxes would see them).
//!
//! The rules, each refused with the field at fault:
//! * a group has a unique name that no element has, and two or more members,
//!   each a middlebox of no other group;
//! * every chain that crosses one member crosses all of them, one after
//!   another, in the group's order (a hyperapp is one pipeline), and no chain
//!   mirrors to a member (a copy would cross every member);
//! * the members agree on `state`, `pipeline`, `workers`, `anti_affinity`
//!   and `placement` (they share instances); the group is pinned if any
//!   member is (an IPS with shared state is by default: its stream records
//!   must not have two writers, `Affinity::default_for_function`); the group's
//!   `instances` default to the most any member asks for, its `resources` are
//!   the members' summed, and its `capacity` is the group's own (a member's
//!   would budget the others too, so members may not give one);
//! * no member is a load balancer (its backends' health checks and overrides
//!   address one middlebox);
//! * a reply of a bidirectional chain crossing the group must not come from a
//!   source of a chain crossing it: an instance tells forward packets from
//!   replies by their source, and such a packet would be both.

use std::collections::{BTreeMap, BTreeSet};

use yaml_serde::{Mapping, Value};

use crate::{check_keys, parse_capacity, parse_resources, str_list, Ctx, Element, SpecError};
use crate::{Affinity, Resources, TenantSpec};

/// The function of a consolidated group's middlebox element: its
/// configuration's `functions` are the members' (`name`, `type` and their
/// configuration), run as one pipeline.
pub const HYPERAPP: &str = "hyperapp";

/// A consolidated group as the tenant asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its name (the middlebox element it becomes).
    pub name: String,
    /// Its members, in pipeline order.
    pub members: Vec<String>,
}

/// One function of a middlebox element: its name, function type and
/// configuration. A plain middlebox has one, named after itself; a
/// [`HYPERAPP`] has its members'.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberFunction {
    /// The member's element name.
    pub name: String,
    /// Its function type (`firewall`, `ips`, ...).
    pub function: String,
    /// Its configuration.
    pub config: Value,
}

/// The functions a middlebox element runs, in order (see [`MemberFunction`]).
pub fn functions_of(name: &str, function: &str, config: &Value) -> Vec<MemberFunction> {
    if function != HYPERAPP {
        return vec![MemberFunction {
            name: name.to_string(),
            function: function.to_string(),
            config: config.clone(),
        }];
    }
    let list = config.get("functions").and_then(Value::as_sequence);
    list.into_iter()
        .flatten()
        .filter_map(|f| {
            let m = f.as_mapping()?;
            let name = m.get("name")?.as_str()?.to_string();
            let function = m.get("type")?.as_str()?.to_string();
            let config: Mapping = m
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), Some("name" | "type")))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let config = if config.is_empty() {
                Value::Null
            } else {
                Value::Mapping(config)
            };
            Some(MemberFunction {
                name,
                function,
                config,
            })
        })
        .collect()
}

/// The `forward_sources` of a [`HYPERAPP`]'s configuration (empty for any
/// other function).
pub fn forward_sources(function: &str, config: &Value) -> Vec<String> {
    if function != HYPERAPP {
        return Vec::new();
    }
    config
        .get("forward_sources")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

/// Parses `consolidate:` and rewrites `spec` so each group is one middlebox
/// crossed where its members were. Returns the groups.
pub(crate) fn apply(
    c: &Ctx<'_>,
    v: &Value,
    spec: &mut TenantSpec,
) -> Result<Vec<Group>, SpecError> {
    let list = v
        .as_sequence()
        .ok_or_else(|| c.err("consolidate", "expected a list of groups"))?;
    let mut groups = Vec::new();
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut rewrites = Vec::new();
    for (i, g) in list.iter().enumerate() {
        let p = format!("consolidate[{i}]");
        let m = g
            .as_mapping()
            .ok_or_else(|| c.err(&p, "expected a mapping with a name and members"))?;
        check_keys(
            c,
            &p,
            m,
            &["name", "members", "instances", "resources", "capacity"],
        )?;
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| c.err(format!("{p}.name"), "missing"))?
            .to_string();
        if spec.elements.contains_key(&name) {
            return Err(c.err(
                format!("{p}.name"),
                format!("`{name}` is already an element's name"),
            ));
        }
        if groups.iter().any(|g: &Group| g.name == name) {
            return Err(c.err(
                format!("{p}.name"),
                format!("group `{name}` is defined twice"),
            ));
        }
        let members = str_list(c, &format!("{p}.members"), m.get("members"))?;
        if members.len() < 2 {
            return Err(c.err(
                format!("{p}.members"),
                "a group consolidates two or more middleboxes",
            ));
        }
        for (j, n) in members.iter().enumerate() {
            let at = format!("{p}.members[{j}]");
            match spec.elements.get(n) {
                None => return Err(c.err(at, format!("unknown element `{n}`"))),
                Some(Element::Middlebox { function, .. }) if function == "lb" => {
                    return Err(c.err(
                        at,
                        format!("`{n}` is a load balancer: its backends' health checks and overrides address one middlebox, so it cannot be consolidated"),
                    ))
                }
                Some(Element::Middlebox { capacity: Some(_), .. }) => {
                    return Err(c.err(
                        at,
                        format!("`{n}` declares a capacity, which would budget the whole group: give it as {p}.capacity"),
                    ))
                }
                Some(Element::Middlebox { .. }) => {}
                Some(e) => {
                    return Err(c.err(at, format!("`{n}` is a {}, not a middlebox", e.kind())))
                }
            }
            if let Some(k) = taken.insert(n.clone(), i) {
                return Err(c.err(
                    at,
                    if k == i {
                        format!("`{n}` is listed twice")
                    } else {
                        format!("`{n}` is already a member of consolidate[{k}]")
                    },
                ));
            }
        }
        let element = group_element(c, &p, m, &members, spec)?;
        check_chains(c, &p, &name, &members, spec)?;
        rewrites.push((name.clone(), members.clone(), element));
        groups.push(Group { name, members });
    }
    for (name, members, mut element) in rewrites {
        let sources = sources_of(c, &name, &members, spec)?;
        if let Element::Middlebox {
            config: Value::Mapping(m),
            ..
        } = &mut element
        {
            m.insert(
                "forward_sources".into(),
                Value::Sequence(sources.into_iter().map(Value::String).collect()),
            );
        }
        for chain in &mut spec.chains {
            if let Some(k) = chain.path.iter().position(|n| n == &members[0]) {
                chain.path.splice(k..k + members.len(), [name.clone()]);
            }
        }
        for n in &members {
            spec.elements.remove(n);
        }
        spec.elements.insert(name, element);
    }
    Ok(groups)
}

/// The group's middlebox element, its settings checked against the members'.
fn group_element(
    c: &Ctx<'_>,
    p: &str,
    m: &Mapping,
    members: &[String],
    spec: &TenantSpec,
) -> Result<Element, SpecError> {
    let mb = |n: &String| match spec.elements.get(n) {
        Some(e @ Element::Middlebox { .. }) => e.clone(),
        _ => unreachable!("members were checked to be middleboxes"),
    };
    let Element::Middlebox {
        state,
        mut affinity,
        anti_affinity,
        placement,
        pipeline,
        workers,
        reassembly,
        ..
    } = mb(&members[0])
    else {
        unreachable!()
    };
    let mut instances = 0;
    let mut resources = Resources {
        slots: 0,
        cores: 0,
        memory_mib: 0,
    };
    let mut functions = Vec::new();
    for (j, n) in members.iter().enumerate() {
        let Element::Middlebox {
            function,
            config,
            instances: k,
            state: s,
            affinity: a,
            anti_affinity: aa,
            placement: pl,
            pipeline: pi,
            workers: w,
            resources: r,
            reassembly: rs,
            ..
        } = mb(n)
        else {
            unreachable!()
        };
        let differs = [
            ("state", s != state),
            ("anti_affinity", aa != anti_affinity),
            ("placement", pl != placement),
            ("pipeline", pi != pipeline),
            ("workers", w != workers),
            ("reassembly", rs != reassembly),
        ];
        if let Some((key, _)) = differs.iter().find(|(_, d)| *d) {
            return Err(c.err(
                format!("{p}.members[{j}]"),
                format!(
                    "`{n}`'s {key} differs from `{}`'s: the members of a group share their instances, so they must agree on it",
                    members[0]
                ),
            ));
        }
        if a == Affinity::Pinned {
            affinity = Affinity::Pinned;
        }
        instances = instances.max(k);
        resources.slots += r.slots;
        resources.cores += r.cores;
        resources.memory_mib += r.memory_mib;
        let mut f = Mapping::new();
        f.insert("name".into(), n.as_str().into());
        f.insert("type".into(), function.as_str().into());
        if let Value::Mapping(cm) = config {
            for (k, v) in cm {
                if !matches!(k.as_str(), Some("name" | "type")) {
                    f.insert(k, v);
                }
            }
        }
        functions.push(Value::Mapping(f));
    }
    if let Some(v) = m.get("instances") {
        instances = v
            .as_u64()
            .filter(|&n| (1..=1024).contains(&n))
            .ok_or_else(|| c.err(format!("{p}.instances"), "expected a count from 1 to 1024"))?
            as u32;
    }
    if let Some(v) = m.get("resources") {
        resources = parse_resources(v).map_err(|e| c.err(format!("{p}.resources"), e))?;
    }
    let capacity = match m.get("capacity") {
        None => None,
        Some(v) => Some(parse_capacity(v).map_err(|e| c.err(format!("{p}.capacity"), e))?),
    };
    let mut config = Mapping::new();
    config.insert("functions".into(), Value::Sequence(functions));
    Ok(Element::Middlebox {
        function: HYPERAPP.to_string(),
        config: Value::Mapping(config),
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

/// Every chain crossing a member crosses all of them in order, and none
/// mirrors to one.
fn check_chains(
    c: &Ctx<'_>,
    p: &str,
    name: &str,
    members: &[String],
    spec: &TenantSpec,
) -> Result<(), SpecError> {
    let set: BTreeSet<&String> = members.iter().collect();
    for (ci, chain) in spec.chains.iter().enumerate() {
        if let Some(j) = chain.mirror.iter().position(|n| set.contains(n)) {
            return Err(c.err(
                format!("chains[{ci}].mirror[{j}]"),
                format!(
                    "`{}` is consolidated in `{name}` ({p}): a copy would cross every member",
                    chain.mirror[j]
                ),
            ));
        }
        let Some(first) = chain.path.iter().position(|n| set.contains(n)) else {
            continue;
        };
        let run = &chain.path[first..(first + members.len()).min(chain.path.len())];
        if run != members {
            return Err(c.err(
                format!("chains[{ci}].path"),
                format!(
                    "chain `{}` crosses `{}` of group `{name}` ({p}), so it must cross all of {} one after another, in that order: a consolidated group runs as one pipeline",
                    chain.name,
                    chain.path[first],
                    members.join(", ")
                ),
            ));
        }
        if let Some(k) = chain.path[first + members.len()..]
            .iter()
            .position(|n| set.contains(n))
        {
            return Err(c.err(
                format!("chains[{ci}].path[{}]", first + members.len() + k),
                format!("chain `{}` crosses group `{name}` twice", chain.name),
            ));
        }
    }
    Ok(())
}

/// The sources of the chains crossing a group (its instances' forward
/// direction), refused when a reply of one of them would come from one.
fn sources_of(
    c: &Ctx<'_>,
    name: &str,
    members: &[String],
    spec: &TenantSpec,
) -> Result<Vec<String>, SpecError> {
    let crossing: Vec<(usize, &crate::Chain)> = spec
        .chains
        .iter()
        .enumerate()
        .filter(|(_, ch)| ch.path.iter().any(|n| n == &members[0]))
        .collect();
    for &(ci, a) in &crossing {
        if !a.bidirectional {
            continue;
        }
        let dst = a.path.last().expect("a chain has two ends");
        if let Some((_, b)) = crossing
            .iter()
            .find(|(_, b)| spec.endpoints_overlap(dst, &b.path[0]))
        {
            return Err(c.err(
                format!("chains[{ci}]"),
                format!(
                    "the replies of chain `{}` come from `{dst}`, which is also where chain `{}` starts, and both cross group `{name}`: its instances could not tell replies from requests; make `{}` one-way or consolidate the chains' middleboxes apart",
                    a.name, b.name, a.name
                ),
            ));
        }
    }
    let mut out = BTreeSet::new();
    for (_, ch) in crossing {
        match spec.elements.get(&ch.path[0]) {
            Some(Element::External { subnets }) => {
                out.extend(subnets.iter().map(|p| p.to_string()));
            }
            Some(Element::Service { vms }) => {
                out.extend(vms.iter().map(|v| {
                    let len = if v.addr.is_v4() { 32 } else { 128 };
                    format!("{}/{len}", v.addr)
                }));
            }
            _ => {}
        }
    }
    Ok(out.into_iter().collect())
}
