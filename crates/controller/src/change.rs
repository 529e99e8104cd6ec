//! What a change to a tenant does, computed before it is made: the spec's
//! changes in words (for 409s and the audit log), the instances and FIB entries
//! it adds and removes per host (for `--dry-run` and `sluice diff`), and whether
//! it removes everything the tenant runs (which needs `force`). Pure functions
//! of the state before and after.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sluice_proto::AgentConfig;
use sluice_tenant::TenantSpec;

use crate::desired::{instance_name, Desired};

/// A change request's preconditions and options (`If-Match`, `?dry_run`,
/// `?force`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conditions {
    /// The tenant's generation the request was made against (`If-Match`; 0:
    /// the tenant must not exist). `None`: whatever it is.
    pub if_generation: Option<u64>,
    /// Only say what the change would do.
    pub dry_run: bool,
    /// Allow a spec that removes every chain or NF instance of the tenant.
    pub force: bool,
}

/// The changes a request would make (or made) to one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangePlan {
    /// Tenant.
    pub tenant: String,
    /// Its generation before (0: not applied).
    pub generation_before: u64,
    /// Its generation after (0: deleted).
    pub generation_after: u64,
    /// The spec's changes, one line each (`+ chain web`, `~ middlebox fw`, ...).
    pub spec: Vec<String>,
    /// NF instances placed by the change (`tenant/middlebox/k@host`).
    pub instances_added: Vec<String>,
    /// NF instances removed by the change.
    pub instances_removed: Vec<String>,
    /// Per host, the tenant's FIB entries the change adds and removes.
    pub fib: BTreeMap<u32, FibChange>,
}

/// One host's FIB changes for a tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibChange {
    /// Entries added (as JSON, without the controller's entry ids, which are
    /// renumbered on every compile).
    pub added: Vec<serde_json::Value>,
    /// Entries removed.
    pub removed: Vec<serde_json::Value>,
}

impl ChangePlan {
    /// True when nothing changes.
    pub fn is_empty(&self) -> bool {
        self.spec.is_empty()
            && self.instances_added.is_empty()
            && self.instances_removed.is_empty()
            && self.fib.is_empty()
    }
}

/// The spec's changes from `old` to `new` in words, one line per chain or
/// element: `+` added, `-` removed, `~` changed. `old`/`new` `None`: the tenant
/// is created/deleted.
pub fn spec_changes(old: Option<&TenantSpec>, new: Option<&TenantSpec>) -> Vec<String> {
    let mut out = Vec::new();
    let empty = BTreeMap::new();
    let (oe, ne) = (
        old.map_or(&empty, |s| &s.elements),
        new.map_or(&empty, |s| &s.elements),
    );
    for (name, e) in ne {
        match oe.get(name) {
            None => out.push(format!("+ {} {name}", e.kind())),
            Some(o) if o != e => out.push(format!("~ {} {name}", e.kind())),
            Some(_) => {}
        }
    }
    for (name, e) in oe {
        if !ne.contains_key(name) {
            out.push(format!("- {} {name}", e.kind()));
        }
    }
    let chains = |s: Option<&TenantSpec>| -> BTreeMap<String, String> {
        s.map(|s| {
            s.chains
                .iter()
                .map(|c| (c.name.clone(), format!("{c:?}")))
                .collect()
        })
        .unwrap_or_default()
    };
    let (oc, nc) = (chains(old), chains(new));
    for (name, c) in &nc {
        match oc.get(name) {
            None => out.push(format!("+ chain {name}")),
            Some(o) if o != c => out.push(format!("~ chain {name}")),
            Some(_) => {}
        }
    }
    for name in oc.keys().filter(|n| !nc.contains_key(*n)) {
        out.push(format!("- chain {name}"));
    }
    out
}

/// Why applying `new` over `old` needs `force`: it removes every chain, or every
/// NF instance, the tenant has. `None` when it does not (or there was nothing).
pub fn needs_force(old: &Desired, new: &Desired, tenant: &str) -> Option<String> {
    let before = old.tenants.get(tenant)?;
    let chains_after = new.tenants.get(tenant).map_or(0, |t| t.spec.chains.len());
    if !before.spec.chains.is_empty() && chains_after == 0 {
        return Some(format!(
            "the spec removes every chain of tenant `{tenant}` ({} now)",
            before.spec.chains.len()
        ));
    }
    let count = |d: &Desired| d.tenant_instances(tenant).count();
    let (was, will) = (count(old), count(new));
    if was > 0 && will == 0 {
        return Some(format!(
            "the spec removes every NF instance of tenant `{tenant}` ({was} now)"
        ));
    }
    None
}

/// What going from (`old`, `old_cfgs`) to (`new`, `new_cfgs`) does to `tenant`.
/// `partial`: `new_cfgs` holds only the hosts the change can alter (every
/// host of the tenant, before and after), so only those are compared, not
/// every host of the fleet.
pub fn plan(
    tenant: &str,
    old: &Desired,
    old_cfgs: &BTreeMap<u32, AgentConfig>,
    new: &Desired,
    new_cfgs: &BTreeMap<u32, AgentConfig>,
    partial: bool,
) -> ChangePlan {
    let ot = old.tenants.get(tenant);
    let nt = new.tenants.get(tenant);
    let instances = |d: &Desired| -> BTreeSet<String> {
        d.tenant_instances(tenant)
            .map(|((t, mb, k), i)| format!("{}@{}", instance_name(t, mb, *k), i.host))
            .collect()
    };
    let (oi, ni) = (instances(old), instances(new));
    let mut fib = BTreeMap::new();
    let hosts: BTreeSet<u32> = if partial {
        new_cfgs.keys().copied().collect()
    } else {
        old_cfgs.keys().chain(new_cfgs.keys()).copied().collect()
    };
    for h in hosts {
        let (a, b) = (
            entries(old_cfgs.get(&h), tenant),
            entries(new_cfgs.get(&h), tenant),
        );
        let added: Vec<_> = b.iter().filter(|e| !a.contains(e)).cloned().collect();
        let removed: Vec<_> = a.iter().filter(|e| !b.contains(e)).cloned().collect();
        if !added.is_empty() || !removed.is_empty() {
            fib.insert(h, FibChange { added, removed });
        }
    }
    ChangePlan {
        tenant: tenant.to_string(),
        generation_before: ot.map_or(0, |t| t.generation),
        generation_after: nt.map_or(0, |t| t.generation),
        spec: spec_changes(ot.map(|t| &t.spec), nt.map(|t| &t.spec)),
        instances_added: ni.difference(&oi).cloned().collect(),
        instances_removed: oi.difference(&ni).cloned().collect(),
        fib,
    }
}

/// A host's FIB entries of `tenant`, as JSON without their ids.
fn entries(cfg: Option<&AgentConfig>, tenant: &str) -> Vec<serde_json::Value> {
    let Some(t) = cfg.and_then(|c| c.tenants.iter().find(|t| t.tenant == tenant)) else {
        return Vec::new();
    };
    t.entries
        .iter()
        .filter_map(|e| {
            let mut v = serde_json::to_value(e).ok()?;
            if let Some(m) = v.as_object_mut() {
                m.remove("id");
            }
            Some(v)
        })
        .collect()
}
