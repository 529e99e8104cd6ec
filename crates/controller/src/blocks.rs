//! Blocks on request (Seawall §3: "a recipient of unwanted traffic can ask the
//! sender's rate controller to block future traffic to the recipient"): a
//! tenant asks that traffic from a source (one of its VMs, or any prefix,
//! external addresses included) to one of its VMs be dropped.
//!
//! A block compiles into one high-priority [`Action::Block`] entry matching
//! the source prefix and the VM's address in the tenant's VNI, on **every**
//! host of the tenant. The entry names no port and no chain position, so the
//! same entry stops the packet wherever a lookup meets it: at the sending
//! host, where the frame leaves its VM port (before any chain steering: it
//! outranks the chains' entries, so the packet never enters the fabric), at
//! a middlebox's host between hops, and at the receiving host before delivery
//! to the VM, for a sending host that ignores the block (a subverted agent).
//!
//! Pure: resolving a request against the tenant's spec and the entries a
//! tenant's blocks compile into; the reconciler stores them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_chain::Prefix;
use sluice_switch::{Action, Entry, Match};
use sluice_tenant::{Element, TenantSpec};
use sluice_wire::IpAddr;

use crate::error::ApiError;

/// Priority of block entries: above every entry the chain compiler makes
/// (its highest is 2000), so a block is checked before any chain steering.
pub const PRIO_BLOCK: u16 = 60_000;

/// Block entries' FIB ids are this plus the block's id: a range the chain
/// compiler (which counts from 1 per tenant) never reaches, and stable, so a
/// block's entry keeps its id (and its counters) across recompilations.
pub const BLOCK_ENTRY_BASE: u64 = 1 << 40;

/// Most blocks one tenant may hold: each is an entry every lookup of the
/// tenant's packets on every one of its hosts may have to check.
pub const MAX_BLOCKS_PER_TENANT: usize = 256;

/// `POST /v1/tenants/{name}/blocks`: what to block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockRequest {
    /// The VM of the tenant to protect (a VM of one of its services).
    pub vm: String,
    /// The source: another VM of the tenant, or a prefix (`203.0.113.0/24`;
    /// a bare address is its host prefix).
    pub from: String,
    /// Why, for whoever reads the list later.
    #[serde(default)]
    pub comment: Option<String>,
}

/// A stored block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// Id, unique across tenants and never reused.
    pub id: u64,
    /// The tenant.
    pub tenant: String,
    /// The protected VM.
    pub vm: String,
    /// The source as asked for (a VM name or a prefix).
    pub from: String,
    /// The source as a prefix, resolved when the block was made (host bits
    /// cleared). A source named by VM follows that VM's address in the spec;
    /// if the VM leaves the spec, this prefix stays blocked.
    pub prefix: String,
    /// The requester's comment.
    #[serde(default)]
    pub comment: Option<String>,
    /// When it was made, Unix milliseconds.
    pub created_at_ms: u64,
    /// The name of the token that asked for it.
    pub created_by: String,
}

/// A block as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// The block.
    #[serde(flatten)]
    pub block: Block,
    /// The prefix blocked now (the source VM's current address, or
    /// `prefix`).
    pub blocking: String,
    /// The protected VM's address now; absent while the tenant's spec lists
    /// no such VM (the block is kept, and enforced again once it does).
    #[serde(default)]
    pub vm_addr: Option<String>,
    /// Hosts whose configuration changed, with their new versions (a change's
    /// answer only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pushed: BTreeMap<u32, u64>,
}

/// The address of the tenant's VM `name`, if one of its services lists it.
pub fn vm_addr(spec: &TenantSpec, name: &str) -> Option<IpAddr> {
    spec.elements.values().find_map(|e| match e {
        Element::Service { vms } => vms.iter().find(|v| v.name == name).map(|v| v.addr),
        _ => None,
    })
}

/// The host prefix of `a`.
fn host_prefix(a: IpAddr) -> Prefix {
    Prefix::new(a, if a.is_v4() { 32 } else { 128 }).expect("a host prefix fits")
}

/// `p` with its host bits cleared (`10.0.0.7/24` is `10.0.0.0/24`).
pub fn canonical(p: Prefix) -> Prefix {
    let mut b = p.network();
    let bytes: &mut [u8] = match &mut b {
        IpAddr::V4(x) => x,
        IpAddr::V6(x) => x,
    };
    for (i, byte) in bytes.iter_mut().enumerate() {
        let keep = (usize::from(p.len())).saturating_sub(i * 8).min(8);
        *byte &= if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
    }
    Prefix::new(b, p.len()).expect("same length")
}

/// The source `from` names in `spec`: a VM's host prefix, else a prefix.
fn source(spec: &TenantSpec, from: &str) -> Result<Prefix, String> {
    if let Some(a) = vm_addr(spec, from) {
        return Ok(host_prefix(a));
    }
    Prefix::parse(from).map(canonical).map_err(|_| {
        format!("from: `{from}` is neither a VM of the tenant nor an IP address or prefix")
    })
}

/// Checks a request against the tenant's spec: the protected VM's address and
/// the source prefix, or a 404 (no such VM) or 400 (a bad source).
pub fn resolve(
    tenant: &str,
    spec: &TenantSpec,
    req: &BlockRequest,
) -> Result<(IpAddr, Prefix), ApiError> {
    let addr = vm_addr(spec, &req.vm).ok_or_else(|| {
        ApiError::not_found(format!("vm: tenant `{tenant}` has no VM `{}`", req.vm))
    })?;
    if req.from == req.vm {
        return Err(ApiError::bad(format!(
            "from: `{}` is the VM to protect; a VM cannot block itself",
            req.from
        )));
    }
    let src = source(spec, &req.from).map_err(ApiError::bad)?;
    if src.network().is_v4() != addr.is_v4() {
        return Err(ApiError::bad(format!(
            "from: {src} and VM `{}` ({addr}) are of different address families",
            req.vm
        )));
    }
    Ok((addr, src))
}

/// `b` as the API shows it, against the tenant's current spec.
pub fn info(spec: Option<&TenantSpec>, b: &Block) -> BlockInfo {
    let blocking = spec
        .and_then(|s| vm_addr(s, &b.from))
        .map_or_else(|| b.prefix.clone(), |a| host_prefix(a).to_string());
    BlockInfo {
        vm_addr: spec.and_then(|s| vm_addr(s, &b.vm)).map(|a| a.to_string()),
        block: b.clone(),
        blocking,
        pushed: BTreeMap::new(),
    }
}

/// The FIB entries `blocks` (one tenant's) compile into, for every host of
/// the tenant (the same on each). A block whose VM the spec no longer lists
/// compiles into nothing.
pub fn entries<'a>(
    spec: &TenantSpec,
    vni: u32,
    blocks: impl IntoIterator<Item = &'a Block>,
) -> Vec<Entry> {
    let mut out = Vec::new();
    for b in blocks {
        let Some(dst) = vm_addr(spec, &b.vm) else {
            continue;
        };
        let src = match vm_addr(spec, &b.from) {
            Some(a) => host_prefix(a),
            None => match Prefix::parse(&b.prefix) {
                Ok(p) => p,
                // Stored prefixes were parsed when made; one that no longer
                // parses cannot be enforced and must not stop the tenant.
                Err(_) => continue,
            },
        };
        out.push(Entry {
            id: BLOCK_ENTRY_BASE + b.id,
            priority: PRIO_BLOCK,
            m: Match {
                vni: Some(vni),
                src: Some(src),
                dst: Some(host_prefix(dst)),
                ..Match::default()
            },
            actions: vec![Action::Block],
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TenantSpec {
        TenantSpec::parse(
            "tenant: acme\nelements:\n  a: { type: service, vms: { a1: 10.0.0.1, a2: 10.0.0.3 } }\n  \
             b: { type: service, vms: { b1: 10.0.0.2 } }\n\
             chains:\n  - { name: ab, path: [a, b] }\n",
            "t.yaml",
            None,
        )
        .unwrap()
    }

    fn req(vm: &str, from: &str) -> BlockRequest {
        BlockRequest {
            vm: vm.into(),
            from: from.into(),
            comment: None,
        }
    }

    #[test]
    fn sources_resolve_to_vms_or_canonical_prefixes() {
        let s = spec();
        let (dst, src) = resolve("acme", &s, &req("b1", "a1")).unwrap();
        assert_eq!(
            (dst.to_string().as_str(), src.to_string().as_str()),
            ("10.0.0.2", "10.0.0.1/32")
        );
        let (_, src) = resolve("acme", &s, &req("b1", "203.0.113.77/24")).unwrap();
        assert_eq!(src.to_string(), "203.0.113.0/24");
        let (_, src) = resolve("acme", &s, &req("b1", "198.51.100.9")).unwrap();
        assert_eq!(src.to_string(), "198.51.100.9/32");
        let (_, src) = resolve("acme", &s, &req("b1", "0.0.0.0/0")).unwrap();
        assert_eq!(src.to_string(), "0.0.0.0/0");
        assert_eq!(
            canonical(Prefix::parse("10.1.2.3/13").unwrap()).to_string(),
            "10.0.0.0/13"
        );
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let s = spec();
        let e = resolve("acme", &s, &req("zz", "a1")).unwrap_err();
        assert_eq!(e.status, 404);
        assert!(e.msg.contains("no VM `zz`"), "{}", e.msg);
        for (from, want) in [
            ("nobody", "neither a VM"),
            ("10.0.0.0/33", "neither a VM"),
            ("b1", "cannot block itself"),
            ("2001:db8::/32", "different address families"),
        ] {
            let e = resolve("acme", &s, &req("b1", from)).unwrap_err();
            assert_eq!(e.status, 400, "{from}");
            assert!(e.msg.contains(want), "{from}: {}", e.msg);
        }
        let body = r#"{"vm":"b1","from":"a1","colour":"red"}"#;
        assert!(serde_json::from_str::<BlockRequest>(body).is_err());
    }

    #[test]
    fn blocks_compile_to_block_entries_that_follow_the_spec() {
        let s = spec();
        let b = |id, vm: &str, from: &str, prefix: &str| Block {
            id,
            tenant: "acme".into(),
            vm: vm.into(),
            from: from.into(),
            prefix: prefix.into(),
            comment: None,
            created_at_ms: 0,
            created_by: "t".into(),
        };
        let blocks = [
            b(1, "b1", "a1", "10.0.0.99/32"),
            b(2, "b1", "203.0.113.0/24", "203.0.113.0/24"),
            b(3, "gone", "a1", "10.0.0.1/32"),
            b(4, "a1", "gone", "10.0.0.50/32"),
        ];
        let e = entries(&s, 9, &blocks);
        let got: Vec<(u64, String, String)> = e
            .iter()
            .map(|e| {
                assert_eq!((e.priority, e.m.vni), (PRIO_BLOCK, Some(9)));
                assert_eq!(e.actions, vec![Action::Block]);
                assert!(
                    e.m.in_port.is_none() && e.m.from_fabric.is_none() && e.m.chain_hop.is_none()
                );
                (
                    e.id - BLOCK_ENTRY_BASE,
                    e.m.src.unwrap().to_string(),
                    e.m.dst.unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                // A source VM's current address, not the one stored.
                (1, "10.0.0.1/32".into(), "10.0.0.2/32".into()),
                (2, "203.0.113.0/24".into(), "10.0.0.2/32".into()),
                // A source VM gone from the spec: its last prefix stays blocked.
                (4, "10.0.0.50/32".into(), "10.0.0.1/32".into()),
            ]
        );
        let i = info(Some(&s), &blocks[2]);
        assert_eq!((i.vm_addr, i.blocking.as_str()), (None, "10.0.0.1/32"));
    }
}
