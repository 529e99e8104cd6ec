//! Who may do what: the roles an API token carries, and [`authorize`], the pure
//! decision the HTTP edge asks before an [`Action`] runs, with
//! [`filter_reply`] narrowing a tenant's listings to its own objects.
//!
//! | role | may |
//! |---|---|
//! | `operator` | everything |
//! | `read-only` | every read except the token list |
//! | `tenant:NAME` | its tenant's spec, apply and delete, deleting its VMs, middleboxes (scaling, draining their backends and instances), scalers, metrics; listings of tenants, chains, VMs, instances, placement and events, filtered to it |
//! | `host:ID` | what the agent of host ID does: heartbeat (register) as exactly that id, read its own FIB and configuration |
//!
//! A `host:ID` token is a one-time bootstrap token (spent once it got its
//! host a certificate); afterwards host ID is known by its client
//! certificate, which the HTTP edge maps to the same role.
//!
//! Registering a VM is an operator's: it binds a host interface to a tenant's
//! port, and a tenant naming another tenant's VM interface would receive its
//! frames.
//!
//! `GET /healthz` and `GET /v1/openapi.yaml` need no token (see [`is_open`]).

use serde_json::Value;

use super::backends::BackendAction;
use super::blocks::BlockWhat;
use super::hosts::HostAction;
use super::instances::InstanceAction;
use super::scaling::ScalingWhat;
use super::tenants::TenantAction;
use super::tokens::TokenAction;
use super::{Action, Reply};
use crate::error::ApiError;

/// What a token may do.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Everything.
    Operator,
    /// Every read, no change.
    ReadOnly,
    /// Only this tenant's objects.
    Tenant(String),
    /// Only what the agent of this host does.
    Host(u32),
}

/// A role string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("role: `{0}` is not a role (operator, read-only, tenant:NAME or host:ID)")]
pub struct BadRole(pub String);

impl std::str::FromStr for Role {
    type Err = BadRole;

    fn from_str(s: &str) -> Result<Role, BadRole> {
        let bad = || BadRole(s.to_string());
        match s {
            "operator" => Ok(Role::Operator),
            "read-only" => Ok(Role::ReadOnly),
            _ => match s.split_once(':') {
                Some(("tenant", t)) if !t.is_empty() && !t.contains(['/', '?', '#']) => {
                    Ok(Role::Tenant(t.to_string()))
                }
                Some(("host", h)) => match h.parse::<u32>() {
                    Ok(id) if id > 0 && h == id.to_string() => Ok(Role::Host(id)),
                    _ => Err(bad()),
                },
                _ => Err(bad()),
            },
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Operator => f.write_str("operator"),
            Role::ReadOnly => f.write_str("read-only"),
            Role::Tenant(t) => write!(f, "tenant:{t}"),
            Role::Host(h) => write!(f, "host:{h}"),
        }
    }
}

/// Who sent a request: the name and role of its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

/// Whether a route needs no token: the liveness check and the API description
/// (public knowledge; it holds no state).
pub fn is_open(method: &str, path: &str) -> bool {
    method == "GET" && matches!(path.trim_end_matches('/'), "/healthz" | "/v1/openapi.yaml")
}

/// The 401 of a request without a usable token.
pub fn unauthenticated(msg: impl Into<String>) -> ApiError {
    ApiError::new(401, msg)
}

/// Who the `Authorization` header's bearer token names: `lookup` maps a
/// presented secret to its principal (by its hash).
pub fn authenticate(
    header: Option<&str>,
    lookup: impl FnOnce(&str) -> Option<Principal>,
) -> Result<Principal, ApiError> {
    let Some(h) = header.map(str::trim).filter(|h| !h.is_empty()) else {
        return Err(unauthenticated(
            "no token: send `Authorization: Bearer TOKEN` (sluice --token, $SLUICE_TOKEN or a context in ~/.config/sluice/config)",
        ));
    };
    let token = match h.split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
        _ => {
            return Err(unauthenticated(
                "Authorization: not a bearer token (send `Authorization: Bearer TOKEN`)",
            ))
        }
    };
    lookup(token)
        .ok_or_else(|| unauthenticated("unknown token: it was never issued or has been deleted"))
}

/// Whether `who` may use route (`method`, `tpl`) at all, for some target: asked
/// before the body is parsed, so a role that can never write learns nothing
/// from a write's validation (the 403 names `path`, the request's own).
/// [`authorize`] decides on the parsed action.
pub fn authorize_route(
    who: &Principal,
    method: &str,
    tpl: &str,
    path: &str,
) -> Result<(), ApiError> {
    let tokens = tpl.starts_with("/v1/tokens");
    let allowed = match &who.role {
        Role::Operator => true,
        Role::ReadOnly => method == "GET" && !tokens,
        Role::Tenant(_) => {
            let vm_put = method == "PUT" && tpl.starts_with("/v1/vms");
            // `/metrics` names every tenant: operators' and monitoring's only.
            !(tokens
                || vm_put
                || tpl.starts_with("/v1/hosts")
                || tpl.starts_with("/v1/fabric")
                || tpl == "/v1/containment"
                || tpl == "/v1/status"
                || tpl == "/metrics")
        }
        Role::Host(_) => matches!(
            (method, tpl),
            ("POST", "/v1/hosts")
                | ("GET", "/v1/hosts/{id}/fib")
                | ("GET", "/v1/hosts/{id}/config")
                | ("GET", "/healthz")
                | ("GET", "/v1/openapi.yaml")
        ),
    };
    if allowed {
        Ok(())
    } else {
        Err(ApiError::new(
            403,
            format!(
                "forbidden: token `{}` (role {}) may not {method} {path}",
                who.name, who.role
            ),
        ))
    }
}

/// How much of the API an action touches, as [`authorize`] sees it.
enum Scope<'a> {
    /// Anyone authenticated (health, the API description).
    Anyone,
    /// A read of everything (hosts, a listing a tenant cannot narrow).
    ReadAll,
    /// A read listing that a tenant sees filtered to its own objects.
    ReadListing,
    /// A read of one tenant's object.
    ReadTenant(&'a str),
    /// A change to one tenant's object.
    WriteTenant(&'a str),
    /// A read of one host's configuration.
    ReadHost(u32),
    /// A host's registration or heartbeat.
    Heartbeat(u32),
    /// A change only operators make (VMs of no tenant, tokens).
    Operator,
    /// A read only operators make (the token list).
    OperatorRead,
}

fn scope(a: &Action) -> Scope<'_> {
    match a {
        Action::Health | Action::OpenApi => Scope::Anyone,
        Action::Metrics | Action::Status => Scope::ReadAll,
        Action::Events(_) | Action::Audit(_) | Action::Eve(_) | Action::Traffic(_) => {
            Scope::ReadListing
        }
        Action::Tenant(t) => match t {
            TenantAction::List | TenantAction::Chains => Scope::ReadListing,
            TenantAction::Get(n) => Scope::ReadTenant(n),
            TenantAction::Delete(n, _) => Scope::WriteTenant(n),
            TenantAction::Apply { spec, .. } => Scope::WriteTenant(&spec.tenant),
        },
        Action::Host(h) => match h {
            HostAction::List
            | HostAction::Containment
            | HostAction::Fabric
            | HostAction::Uplinks => Scope::ReadAll,
            HostAction::Release(_)
            | HostAction::Revoke(_)
            | HostAction::RotateFabric(_)
            | HostAction::Drain { .. }
            | HostAction::Undrain(_) => Scope::Operator,
            HostAction::Heartbeat(hb) => Scope::Heartbeat(hb.hb.registration.host),
            HostAction::Fib(id) | HostAction::Config(id) => Scope::ReadHost(*id),
            HostAction::ListVms | HostAction::Instances | HostAction::Placement(_) => {
                Scope::ReadListing
            }
            HostAction::PutVm(_) => Scope::Operator,
            HostAction::DeleteVm { tenant, .. } => Scope::WriteTenant(tenant),
        },
        Action::Scaling(s) => match s.what {
            ScalingWhat::GetMiddlebox | ScalingWhat::GetScaler => Scope::ReadTenant(&s.tenant),
            _ => Scope::WriteTenant(&s.tenant),
        },
        Action::Block(b) => match b.what {
            BlockWhat::List => Scope::ReadTenant(&b.tenant),
            BlockWhat::Create(_) | BlockWhat::Delete(_) => Scope::WriteTenant(&b.tenant),
        },
        Action::Backend(b) => match b.tenant() {
            None => Scope::ReadListing,
            Some(t) => Scope::WriteTenant(t),
        },
        Action::Instance(i) => Scope::WriteTenant(i.tenant()),
        Action::Token(t) => match t {
            TokenAction::List => Scope::OperatorRead,
            TokenAction::Create { .. } | TokenAction::Delete(_) => Scope::Operator,
        },
    }
}

/// What an action does, for a 403's message.
pub fn describe(a: &Action) -> String {
    match a {
        Action::Health => "check health".into(),
        Action::OpenApi => "read the API description".into(),
        Action::Metrics => "read the metrics".into(),
        Action::Status => "read the controller's status".into(),
        Action::Events(_) => "list events".into(),
        Action::Audit(_) => "read the audit log".into(),
        Action::Eve(q) => format!("list {}s", q.event_type),
        Action::Traffic(_) => "read the chains' traffic".into(),
        Action::Tenant(t) => match t {
            TenantAction::List => "list tenants".into(),
            TenantAction::Chains => "list chains".into(),
            TenantAction::Get(n) => format!("read tenant `{n}`"),
            TenantAction::Delete(n, _) => format!("delete tenant `{n}`"),
            TenantAction::Apply { spec, .. } => format!("apply tenant `{}`", spec.tenant),
        },
        Action::Host(h) => match h {
            HostAction::List => "list hosts".into(),
            HostAction::Heartbeat(hb) => {
                format!("register host {}", hb.hb.registration.host)
            }
            HostAction::Fib(id) => format!("read host {id}'s FIB"),
            HostAction::Config(id) => format!("read host {id}'s configuration"),
            HostAction::ListVms => "list VMs".into(),
            HostAction::Instances => "list instances".into(),
            HostAction::Placement(_) => "read the placement".into(),
            HostAction::Containment => "read the containment of hosts".into(),
            HostAction::Release(h) => format!("release host {h}"),
            HostAction::Revoke(h) => format!("revoke host {h}"),
            HostAction::Drain { host, force } => {
                format!("drain host {host}{}", if *force { " (forced)" } else { "" })
            }
            HostAction::Undrain(h) => format!("undrain host {h}"),
            HostAction::Fabric => "read the fabric's keys".into(),
            HostAction::Uplinks => "read the rack uplinks' traffic".into(),
            HostAction::RotateFabric(_) => "rotate the fabric's keys".into(),
            HostAction::PutVm(r) => format!("register VM `{}/{}`", r.tenant, r.name),
            HostAction::DeleteVm { tenant, name } => format!("delete VM `{tenant}/{name}`"),
        },
        Action::Scaling(s) => {
            let (verb, what) = match &s.what {
                ScalingWhat::GetMiddlebox => ("read", "middlebox"),
                ScalingWhat::ScaleMiddlebox(_) => ("scale", "middlebox"),
                ScalingWhat::Metric(_) => ("report a metric of", "chain"),
                ScalingWhat::GetScaler => ("read the scaler of", "chain"),
                ScalingWhat::PutScaler(_) => ("configure the scaler of", "chain"),
                ScalingWhat::DeleteScaler => ("delete the scaler of", "chain"),
                ScalingWhat::Request(_) => ("request scaling of", "chain"),
            };
            format!("{verb} {what} `{}/{}`", s.tenant, s.object)
        }
        // Names the tenant only: the 403 of another tenant's token must not
        // tell it whether the VM exists.
        Action::Block(b) => match &b.what {
            BlockWhat::List => format!("list the blocks of tenant `{}`", b.tenant),
            BlockWhat::Create(_) => format!("block traffic to a VM of tenant `{}`", b.tenant),
            BlockWhat::Delete(_) => format!("remove a block of tenant `{}`", b.tenant),
        },
        Action::Backend(b) => match b {
            BackendAction::List => "list load-balancer backends".into(),
            BackendAction::Drain {
                tenant, middlebox, ..
            } => format!("drain a backend of load balancer `{tenant}/{middlebox}`"),
            BackendAction::Undrain {
                tenant, middlebox, ..
            } => format!("undrain a backend of load balancer `{tenant}/{middlebox}`"),
        },
        // Names the middlebox only: another tenant's token must not learn
        // whether the instance exists.
        Action::Instance(i) => match i {
            InstanceAction::Drain {
                tenant, middlebox, ..
            } => format!("drain an instance of middlebox `{tenant}/{middlebox}`"),
            InstanceAction::Undrain {
                tenant, middlebox, ..
            } => format!("undrain an instance of middlebox `{tenant}/{middlebox}`"),
        },
        Action::Token(t) => match t {
            TokenAction::List => "list tokens".into(),
            TokenAction::Create { name, .. } => format!("create token `{name}`"),
            TokenAction::Delete(n) => format!("delete token `{n}`"),
        },
    }
}

/// Whether `who` may carry out `a`: `Ok`, or a 403 naming the token, its role
/// and the action. Listings a tenant may read still need [`filter_reply`].
pub fn authorize(who: &Principal, a: &Action) -> Result<(), ApiError> {
    let s = scope(a);
    let allowed = match (&who.role, s) {
        (_, Scope::Anyone) => true,
        (Role::Operator, _) => true,
        (Role::ReadOnly, s) => matches!(
            s,
            Scope::ReadAll | Scope::ReadListing | Scope::ReadTenant(_) | Scope::ReadHost(_)
        ),
        (Role::Tenant(t), s) => match s {
            Scope::ReadListing => true,
            Scope::ReadTenant(x) | Scope::WriteTenant(x) => x == t,
            _ => false,
        },
        (Role::Host(h), s) => match s {
            Scope::Heartbeat(x) | Scope::ReadHost(x) => x == *h,
            _ => false,
        },
    };
    if allowed {
        Ok(())
    } else {
        Err(ApiError::new(
            403,
            format!(
                "forbidden: token `{}` (role {}) may not {}",
                who.name,
                who.role,
                describe(a)
            ),
        ))
    }
}

/// The tenant whose entries alone `who` may see in the reply to `a`: `Some`
/// for a tenant principal's listing, `None` when the reply goes out whole.
pub fn listing_filter(who: &Principal, a: &Action) -> Option<String> {
    match (&who.role, scope(a)) {
        (Role::Tenant(t), Scope::ReadListing) => Some(t.clone()),
        _ => None,
    }
}

/// `reply` with only the listing's entries whose `tenant` is `tenant` (events
/// of no tenant are in no tenant's listing).
pub fn filter_listing(tenant: &str, reply: Reply) -> Reply {
    match reply {
        Reply::Json(code, Value::Array(items)) => Reply::Json(
            code,
            Value::Array(
                items
                    .into_iter()
                    .filter(|v| v.get("tenant").and_then(Value::as_str) == Some(tenant))
                    .collect(),
            ),
        ),
        // A listing is always an array; anything else would be a bug, and
        // showing it to a tenant is the wrong way to fail.
        Reply::Json(code, _) => Reply::Json(code, Value::Array(Vec::new())),
        r => r,
    }
}

/// The reply `who` may see to `a` ([`listing_filter`], [`filter_listing`]).
pub fn filter_reply(who: &Principal, a: &Action, reply: Reply) -> Reply {
    match listing_filter(who, a) {
        Some(t) => filter_listing(&t, reply),
        None => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Request, ROUTES};
    use super::*;

    /// What a role may do on a route.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum May {
        /// Always.
        Yes,
        /// Never.
        No,
        /// On its own tenant or host, not on another.
        Own,
        /// Yes, and the reply is filtered to its own tenant.
        Filtered,
    }
    use May::*;

    /// Every route: what `operator`, `read-only`, `tenant:acme` and `host:1`
    /// may do. A route missing here fails the test below.
    const RULES: &[(&str, &str, [May; 4])] = &[
        ("GET", "/healthz", [Yes, Yes, Yes, Yes]),
        ("GET", "/v1/openapi.yaml", [Yes, Yes, Yes, Yes]),
        ("GET", "/metrics", [Yes, Yes, No, No]),
        ("GET", "/v1/status", [Yes, Yes, No, No]),
        ("GET", "/v1/tenants", [Yes, Yes, Filtered, No]),
        ("POST", "/v1/tenants", [Yes, No, Own, No]),
        ("GET", "/v1/tenants/{name}", [Yes, Yes, Own, No]),
        ("PUT", "/v1/tenants/{name}", [Yes, No, Own, No]),
        ("DELETE", "/v1/tenants/{name}", [Yes, No, Own, No]),
        ("GET", "/v1/hosts", [Yes, Yes, No, No]),
        ("POST", "/v1/hosts", [Yes, No, No, Own]),
        ("GET", "/v1/hosts/{id}/fib", [Yes, Yes, No, Own]),
        ("GET", "/v1/hosts/{id}/config", [Yes, Yes, No, Own]),
        ("DELETE", "/v1/hosts/{id}/containment", [Yes, No, No, No]),
        ("POST", "/v1/hosts/{id}/revoke", [Yes, No, No, No]),
        ("PUT", "/v1/hosts/{id}/drain", [Yes, No, No, No]),
        ("DELETE", "/v1/hosts/{id}/drain", [Yes, No, No, No]),
        ("GET", "/v1/containment", [Yes, Yes, No, No]),
        ("GET", "/v1/fabric", [Yes, Yes, No, No]),
        ("GET", "/v1/fabric/uplinks", [Yes, Yes, No, No]),
        ("POST", "/v1/fabric/rotate", [Yes, No, No, No]),
        ("GET", "/v1/vms", [Yes, Yes, Filtered, No]),
        ("PUT", "/v1/vms/{tenant}/{name}", [Yes, No, No, No]),
        ("DELETE", "/v1/vms/{tenant}/{name}", [Yes, No, Own, No]),
        ("GET", "/v1/instances", [Yes, Yes, Filtered, No]),
        ("GET", "/v1/placement", [Yes, Yes, Filtered, No]),
        ("GET", "/v1/chains", [Yes, Yes, Filtered, No]),
        (
            "GET",
            "/v1/tenants/{name}/middleboxes/{middlebox}",
            [Yes, Yes, Own, No],
        ),
        (
            "PUT",
            "/v1/tenants/{name}/middleboxes/{middlebox}",
            [Yes, No, Own, No],
        ),
        (
            "POST",
            "/v1/tenants/{name}/chains/{chain}/metrics",
            [Yes, No, Own, No],
        ),
        (
            "GET",
            "/v1/tenants/{name}/chains/{chain}/scaling",
            [Yes, Yes, Own, No],
        ),
        (
            "PUT",
            "/v1/tenants/{name}/chains/{chain}/scaling",
            [Yes, No, Own, No],
        ),
        (
            "DELETE",
            "/v1/tenants/{name}/chains/{chain}/scaling",
            [Yes, No, Own, No],
        ),
        (
            "POST",
            "/v1/tenants/{name}/chains/{chain}/scaling/request",
            [Yes, No, Own, No],
        ),
        (
            "PUT",
            "/v1/tenants/{name}/middleboxes/{middlebox}/backends/{addr}/drain",
            [Yes, No, Own, No],
        ),
        (
            "DELETE",
            "/v1/tenants/{name}/middleboxes/{middlebox}/backends/{addr}/drain",
            [Yes, No, Own, No],
        ),
        ("GET", "/v1/backends", [Yes, Yes, Filtered, No]),
        (
            "PUT",
            "/v1/tenants/{name}/middleboxes/{middlebox}/instances/{id}/drain",
            [Yes, No, Own, No],
        ),
        (
            "DELETE",
            "/v1/tenants/{name}/middleboxes/{middlebox}/instances/{id}/drain",
            [Yes, No, Own, No],
        ),
        ("GET", "/v1/tenants/{name}/blocks", [Yes, Yes, Own, No]),
        ("POST", "/v1/tenants/{name}/blocks", [Yes, No, Own, No]),
        (
            "DELETE",
            "/v1/tenants/{name}/blocks/{id}",
            [Yes, No, Own, No],
        ),
        ("GET", "/v1/events", [Yes, Yes, Filtered, No]),
        ("GET", "/v1/audit", [Yes, Yes, Filtered, No]),
        ("GET", "/v1/alerts", [Yes, Yes, Filtered, No]),
        ("GET", "/v1/flows", [Yes, Yes, Filtered, No]),
        ("GET", "/v1/traffic", [Yes, Yes, Filtered, No]),
        ("GET", "/v1/tokens", [Yes, No, No, No]),
        ("POST", "/v1/tokens", [Yes, No, No, No]),
        ("DELETE", "/v1/tokens/{name}", [Yes, No, No, No]),
    ];

    fn spec(tenant: &str) -> String {
        format!(
            "tenant: {tenant}\nelements:\n  a: {{ type: service, vms: {{ a1: 10.0.0.1 }} }}\n  \
             b: {{ type: service, vms: {{ b1: 10.0.0.2 }} }}\n  \
             fw: {{ type: middlebox, function: monitor }}\n\
             chains:\n  - {{ name: ab, path: [a, fw, b] }}\n"
        )
    }

    /// A request on route (`m`, `tpl`) aimed at `tenant` and `host`: its URL
    /// and a valid body.
    fn sample(m: &str, tpl: &str, tenant: &str, host: u32) -> (String, String) {
        let url = tpl
            .replace("{name}", tenant)
            .replace("{tenant}", tenant)
            .replace("{id}", &host.to_string())
            .replace("{middlebox}", "fw")
            .replace("{addr}", "10.0.0.2")
            .replace("{chain}", "ab");
        let body = match (m, tpl) {
            ("POST", "/v1/tenants") | ("PUT", "/v1/tenants/{name}") => spec(tenant),
            ("POST", "/v1/hosts") => format!(
                "{{\"host\":{host},\"name\":\"h{host}\",\"underlay\":\"10.255.0.{host}\",\
                 \"api\":\"http://127.0.0.1:7101\"}}"
            ),
            ("PUT", "/v1/vms/{tenant}/{name}") => format!(
                "{{\"tenant\":\"{tenant}\",\"name\":\"{tenant}\",\"host\":1,\"iface\":\"v1\",\
                 \"mac\":\"02:00:00:00:00:01\",\"addr\":\"10.0.0.1\"}}"
            ),
            ("PUT", "/v1/tenants/{name}/middleboxes/{middlebox}") => "{\"instances\":2}".into(),
            ("POST", "/v1/tenants/{name}/chains/{chain}/metrics") => "{\"value\":1.5}".into(),
            ("POST", "/v1/tenants/{name}/chains/{chain}/scaling/request") => "{\"up\":true}".into(),
            ("POST", "/v1/tenants/{name}/blocks") => "{\"vm\":\"b1\",\"from\":\"a1\"}".into(),
            ("POST", "/v1/tokens") => format!("{{\"name\":\"t\",\"role\":\"tenant:{tenant}\"}}"),
            _ => String::new(),
        };
        (url, body)
    }

    fn action(m: &str, tpl: &str, tenant: &str, host: u32) -> Action {
        let (url, body) = sample(m, tpl, tenant, host);
        let req = Request {
            method: m,
            url: &url,
            content_type: None,
            body: &body,
            if_match: None,
        };
        parse(&req).unwrap_or_else(|e| panic!("{m} {url}: {e}"))
    }

    fn principals() -> [Principal; 4] {
        let p = |name: &str, role| Principal {
            name: name.into(),
            role,
        };
        [
            p("root", Role::Operator),
            p("auditor", Role::ReadOnly),
            p("acme-ci", Role::Tenant("acme".into())),
            p("h1", Role::Host(1)),
        ]
    }

    #[test]
    fn every_route_has_a_rule_for_every_role_and_it_holds() {
        for &(m, tpl) in ROUTES {
            let rule = RULES
                .iter()
                .find(|r| r.0 == m && r.1 == tpl)
                .unwrap_or_else(|| panic!("{m} {tpl} has no authorization rule in RULES"));
            for (who, may) in principals().iter().zip(rule.2) {
                // The own target (tenant acme, host 1) and another (bravo, 2).
                let own = authorize(who, &action(m, tpl, "acme", 1));
                let other = authorize(who, &action(m, tpl, "bravo", 2));
                let (want_own, want_other) = match may {
                    Yes | Filtered => (true, true),
                    No => (false, false),
                    Own => (true, false),
                };
                for (got, want, target) in [(&own, want_own, "own"), (&other, want_other, "other")]
                {
                    assert_eq!(
                        got.is_ok(),
                        want,
                        "{m} {tpl} by {} on the {target} target: {got:?}",
                        who.role
                    );
                    if let Err(e) = got {
                        assert_eq!(e.status, 403);
                        assert!(e.msg.contains(&who.name) && e.msg.contains(&who.role.to_string()));
                    }
                }
                let route = authorize_route(who, m, tpl, tpl);
                assert_eq!(
                    route.is_ok(),
                    may != No,
                    "{m} {tpl} by {}: {route:?}",
                    who.role
                );
                let filtered = listing_filter(who, &action(m, tpl, "acme", 1)).is_some();
                assert_eq!(filtered, may == Filtered, "{m} {tpl} by {}", who.role);
            }
        }
        assert_eq!(
            RULES.len(),
            ROUTES.len(),
            "RULES names a route that does not exist"
        );
    }

    #[test]
    fn a_host_cannot_register_as_another_host() {
        let h1 = &principals()[3];
        let e = authorize(h1, &action("POST", "/v1/hosts", "acme", 2)).unwrap_err();
        assert_eq!(e.status, 403);
        assert!(e.msg.contains("register host 2"), "{}", e.msg);
    }

    #[test]
    fn a_tenant_cannot_apply_another_tenants_spec_under_its_own_url() {
        // POST carries no name in the URL: the spec's own tenant decides.
        let acme = &principals()[2];
        let e = authorize(acme, &action("POST", "/v1/tenants", "bravo", 1)).unwrap_err();
        assert!(e.msg.contains("apply tenant `bravo`"), "{}", e.msg);
    }

    #[test]
    fn listings_keep_only_the_tenants_own_entries() {
        let v = serde_json::json!([
            { "tenant": "acme", "name": "a" },
            { "tenant": "bravo", "name": "b" },
            { "tenant": null, "kind": "error" },
            { "name": "no tenant field" },
            { "tenant": "acme", "name": "c" },
        ]);
        let acme = &principals()[2];
        let a = action("GET", "/v1/vms", "acme", 1);
        let Reply::Json(200, Value::Array(kept)) =
            filter_reply(acme, &a, Reply::Json(200, v.clone()))
        else {
            panic!("not a listing")
        };
        let names: Vec<&str> = kept.iter().map(|x| x["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "c"]);
        // Nobody else's replies are touched.
        for who in &principals()[..2] {
            assert_eq!(
                filter_reply(who, &a, Reply::Json(200, v.clone())),
                Reply::Json(200, v.clone())
            );
        }
        // A listing that is not an array shows a tenant nothing.
        assert_eq!(
            filter_listing("acme", Reply::Json(200, serde_json::json!({"x": 1}))),
            Reply::Json(200, serde_json::json!([]))
        );
    }

    #[test]
    fn roles_round_trip_and_bad_ones_name_the_problem() {
        for r in ["operator", "read-only", "tenant:acme", "host:7"] {
            assert_eq!(r.parse::<Role>().unwrap().to_string(), r);
        }
        for r in [
            "",
            "admin",
            "tenant:",
            "host:0",
            "host:x",
            "host:07",
            "tenant:a/b",
        ] {
            let e = r.parse::<Role>().unwrap_err();
            assert!(e.to_string().contains(&format!("`{r}`")), "{e}");
        }
    }

    #[test]
    fn authentication_needs_a_known_bearer_token() {
        let lookup = |t: &str| {
            (t == "sluice_good").then(|| Principal {
                name: "n".into(),
                role: Role::ReadOnly,
            })
        };
        for h in [None, Some(""), Some("Basic abc"), Some("Bearer sluice_bad")] {
            let e = authenticate(h, lookup).unwrap_err();
            assert_eq!(e.status, 401, "{h:?}");
        }
        assert!(authenticate(None, lookup)
            .unwrap_err()
            .msg
            .contains("no token"));
        assert!(authenticate(Some("Bearer x"), lookup)
            .unwrap_err()
            .msg
            .contains("unknown token"));
        assert_eq!(
            authenticate(Some("bearer  sluice_good "), lookup)
                .unwrap()
                .name,
            "n"
        );
        assert!(is_open("GET", "/healthz") && is_open("GET", "/v1/openapi.yaml"));
        assert!(!is_open("POST", "/healthz") && !is_open("GET", "/v1/tenants"));
    }
}
