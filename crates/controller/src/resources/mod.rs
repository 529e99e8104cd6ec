//! The REST API's resources, Firecracker-style: each module parses the requests
//! on its paths into an [`Action`] (checking everything that can be checked
//! without the state) and shapes the replies of its reads; [`crate::executor`]
//! carries actions out on the [`crate::reconcile::Reconciler`]. Nothing here does
//! I/O: the HTTP edge (`crate::http`) hands over a [`Request`].

use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

pub mod audit;
pub mod auth;
pub mod backends;
pub mod blocks;
pub mod eve;
pub mod events;
pub mod hosts;
pub mod instances;
pub mod page;
pub mod scaling;
pub mod tenants;
pub mod tokens;
pub mod traffic;

/// Every route the server implements: (method, path template).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/v1/openapi.yaml"),
    ("GET", "/metrics"),
    ("GET", "/v1/status"),
    ("GET", "/v1/tenants"),
    ("POST", "/v1/tenants"),
    ("GET", "/v1/tenants/{name}"),
    ("PUT", "/v1/tenants/{name}"),
    ("DELETE", "/v1/tenants/{name}"),
    ("GET", "/v1/hosts"),
    ("POST", "/v1/hosts"),
    ("GET", "/v1/hosts/{id}/fib"),
    ("GET", "/v1/hosts/{id}/config"),
    ("DELETE", "/v1/hosts/{id}/containment"),
    ("POST", "/v1/hosts/{id}/revoke"),
    ("PUT", "/v1/hosts/{id}/drain"),
    ("DELETE", "/v1/hosts/{id}/drain"),
    ("GET", "/v1/containment"),
    ("GET", "/v1/fabric"),
    ("GET", "/v1/fabric/uplinks"),
    ("POST", "/v1/fabric/rotate"),
    ("GET", "/v1/vms"),
    ("PUT", "/v1/vms/{tenant}/{name}"),
    ("DELETE", "/v1/vms/{tenant}/{name}"),
    ("GET", "/v1/instances"),
    ("GET", "/v1/placement"),
    ("GET", "/v1/chains"),
    ("GET", "/v1/tenants/{name}/middleboxes/{middlebox}"),
    ("PUT", "/v1/tenants/{name}/middleboxes/{middlebox}"),
    (
        "PUT",
        "/v1/tenants/{name}/middleboxes/{middlebox}/backends/{addr}/drain",
    ),
    (
        "DELETE",
        "/v1/tenants/{name}/middleboxes/{middlebox}/backends/{addr}/drain",
    ),
    ("GET", "/v1/backends"),
    (
        "PUT",
        "/v1/tenants/{name}/middleboxes/{middlebox}/instances/{id}/drain",
    ),
    (
        "DELETE",
        "/v1/tenants/{name}/middleboxes/{middlebox}/instances/{id}/drain",
    ),
    ("POST", "/v1/tenants/{name}/chains/{chain}/metrics"),
    ("GET", "/v1/tenants/{name}/chains/{chain}/scaling"),
    ("PUT", "/v1/tenants/{name}/chains/{chain}/scaling"),
    ("DELETE", "/v1/tenants/{name}/chains/{chain}/scaling"),
    ("POST", "/v1/tenants/{name}/chains/{chain}/scaling/request"),
    ("GET", "/v1/tenants/{name}/blocks"),
    ("POST", "/v1/tenants/{name}/blocks"),
    ("DELETE", "/v1/tenants/{name}/blocks/{id}"),
    ("GET", "/v1/events"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/alerts"),
    ("GET", "/v1/flows"),
    ("GET", "/v1/traffic"),
    ("GET", "/v1/tokens"),
    ("POST", "/v1/tokens"),
    ("DELETE", "/v1/tokens/{name}"),
];

/// The OpenAPI document of this API.
pub const OPENAPI_YAML: &str = include_str!("../../../../docs/openapi.yaml");

/// A request as the HTTP edge received it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Upper-case method.
    pub method: &'a str,
    /// Path and query.
    pub url: &'a str,
    /// Lower-cased `Content-Type`, if sent.
    pub content_type: Option<&'a str>,
    /// The body, as text.
    pub body: &'a str,
    /// The `If-Match` header, if sent: the tenant generation a change was made
    /// against.
    pub if_match: Option<&'a str>,
}

/// What a request asks for.
#[derive(Debug, Clone)]
pub enum Action {
    /// `GET /healthz`.
    Health,
    /// `GET /v1/openapi.yaml`.
    OpenApi,
    /// `GET /metrics` (Prometheus text format).
    Metrics,
    /// `GET /v1/status`: the controller's view of its dependencies (the
    /// state store).
    Status,
    /// A tenant request.
    Tenant(tenants::TenantAction),
    /// A host, VM or instance request.
    Host(hosts::HostAction),
    /// A middlebox-scaling, scaler or metric request.
    Scaling(scaling::ScalingAction),
    /// A block-on-request request.
    Block(blocks::BlockAction),
    /// A load-balancer backend request (health, drains).
    Backend(backends::BackendAction),
    /// An operator's drain of one NF instance, or its end.
    Instance(instances::InstanceAction),
    /// `GET /v1/events`.
    Events(events::EventsQuery),
    /// `GET /v1/audit`.
    Audit(crate::audit::AuditQuery),
    /// `GET /v1/alerts`, `GET /v1/flows`: answered by the HTTP edge, which asks
    /// the agents.
    Eve(eve::EveRequest),
    /// A token request (served by the HTTP edge on the token store).
    Token(tokens::TokenAction),
    /// `GET /v1/traffic`: every chain's graph and rates (the dashboard's).
    Traffic(traffic::TrafficQuery),
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A JSON body with a status.
    Json(u16, Value),
    /// A text body of the given content type (status 200).
    Text(&'static str, String),
}

/// `v` as a JSON reply with status `code`.
pub fn json<T: Serialize>(code: u16, v: &T) -> Result<Reply, ApiError> {
    serde_json::to_value(v)
        .map(|v| Reply::Json(code, v))
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// Parses a JSON body, naming the body in the error.
pub(crate) fn body<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, ApiError> {
    serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))
}

/// Parses a request into its action.
pub fn parse(req: &Request<'_>) -> Result<Action, ApiError> {
    parse_as(req, None)
}

/// Parses a request into its action, first checking that `who` (if given) may
/// use its route at all ([`auth::authorize_route`]): a 403 before the body is
/// looked at.
pub fn parse_as(req: &Request<'_>, who: Option<&auth::Principal>) -> Result<Action, ApiError> {
    let (path, query) = match req.url.split_once('?') {
        Some((p, q)) => (p, q),
        None => (req.url, ""),
    };
    let (tpl, p) = route(req.method, path)?;
    if let Some(w) = who {
        auth::authorize_route(w, req.method, tpl, path)?;
    }
    // A list's paging is the edge's ([`page::pager`]); its resource sees the
    // rest of the query.
    let rest;
    let query = if page::is_list(req.method, tpl) {
        rest = page::split(query)?.1;
        rest.as_str()
    } else {
        query
    };
    let p = Params(p);
    match (req.method, tpl) {
        ("GET", "/healthz") => Ok(Action::Health),
        ("GET", "/v1/openapi.yaml") => Ok(Action::OpenApi),
        ("GET", "/metrics") => Ok(Action::Metrics),
        ("GET", "/v1/status") => Ok(Action::Status),
        ("GET", "/v1/events") => events::parse(query).map(Action::Events),
        ("GET", "/v1/audit") => audit::parse(query).map(Action::Audit),
        ("GET", "/v1/alerts") => eve::parse("alert", query).map(Action::Eve),
        ("GET", "/v1/flows") => eve::parse("flow", query).map(Action::Eve),
        ("GET", "/v1/traffic") => traffic::parse(query).map(Action::Traffic),
        ("GET", "/v1/placement") => hosts::parse_placement(query).map(Action::Host),
        ("GET", "/v1/containment") => Ok(Action::Host(hosts::HostAction::Containment)),
        (_, t) if t.starts_with("/v1/tokens") => {
            tokens::parse(req.method, tpl, &p, req.body).map(Action::Token)
        }
        (_, t) if t.starts_with("/v1/tenants/{name}/blocks") => {
            blocks::parse(req.method, tpl, &p, req.body).map(Action::Block)
        }
        (_, t) if t == "/v1/backends" || t.contains("/backends/{addr}") => {
            backends::parse(req.method, tpl, &p, req.body).map(Action::Backend)
        }
        (_, t) if t.contains("/instances/{id}/drain") => {
            instances::parse(req.method, tpl, &p, req.body).map(Action::Instance)
        }
        (_, t)
            if t.starts_with("/v1/tenants/{name}/middleboxes") || t.contains("/chains/{chain}") =>
        {
            scaling::parse(req.method, tpl, &p, req.body).map(Action::Scaling)
        }
        (_, t) if t.starts_with("/v1/tenants") || t == "/v1/chains" => {
            let cond = tenants::conditions(req.method, query, req.if_match)?;
            tenants::parse(req.method, tpl, &p, req.content_type, req.body, cond)
                .map(Action::Tenant)
        }
        (_, t)
            if t.starts_with("/v1/hosts")
                || t.starts_with("/v1/vms")
                || t.starts_with("/v1/fabric")
                || t == "/v1/instances" =>
        {
            hosts::parse(req.method, tpl, &p, req.body).map(Action::Host)
        }
        _ => Err(unknown(path)),
    }
}

/// The 404 of a path no route serves.
pub(crate) fn unknown(path: &str) -> ApiError {
    ApiError::not_found(format!("no such endpoint: {path}"))
}

/// The decoded parameters of a matched route, in template order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params(pub Vec<String>);

impl Params {
    /// The `i`th parameter (routes always have as many as their template).
    pub fn get(&self, i: usize) -> String {
        self.0.get(i).cloned().unwrap_or_default()
    }
}

/// `s` with every byte but the unreserved ones (RFC 3986) percent-encoded, for a
/// query string.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Matches `path` against the route templates: the template and its parameters,
/// or whether the path exists under another method.
pub fn route(method: &str, path: &str) -> Result<(&'static str, Vec<String>), ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut allow: Vec<&'static str> = Vec::new();
    for &(m, tpl) in ROUTES {
        let t: Vec<&str> = tpl.trim_matches('/').split('/').collect();
        if t.len() != segs.len() {
            continue;
        }
        let mut params = Vec::new();
        let ok = t.iter().zip(&segs).all(|(a, b)| {
            if a.starts_with('{') {
                params.push(percent_decode(b));
                !b.is_empty()
            } else {
                a == b
            }
        });
        if !ok {
            continue;
        }
        if m == method {
            return Ok((tpl, params));
        }
        if !allow.contains(&m) {
            allow.push(m);
        }
    }
    if allow.is_empty() {
        Err(unknown(path))
    } else {
        Err(ApiError::method_not_allowed(
            format!(
                "{method} is not allowed on {path} (allowed: {})",
                allow.join(", ")
            ),
            allow,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_templates_and_methods() {
        assert_eq!(
            route("GET", "/v1/hosts/3/fib"),
            Ok(("/v1/hosts/{id}/fib", vec!["3".to_string()]))
        );
        assert_eq!(
            route("PUT", "/v1/vms/acme/web%2Da1"),
            Ok((
                "/v1/vms/{tenant}/{name}",
                vec!["acme".to_string(), "web-a1".to_string()]
            ))
        );
        let e = route("PATCH", "/v1/tenants/x").unwrap_err();
        assert_eq!(e.status, 405);
        assert_eq!(e.allow, ["GET", "PUT", "DELETE"]);
        assert_eq!(route("GET", "/v1/nothing").unwrap_err().status, 404);
        assert_eq!(route("GET", "/v1/tenants/").unwrap().0, "/v1/tenants");
    }

    fn req<'a>(method: &'a str, url: &'a str, body: &'a str) -> Request<'a> {
        Request {
            method,
            url,
            content_type: None,
            body,
            if_match: None,
        }
    }

    #[test]
    fn every_route_parses_into_its_resource() {
        let cases = [
            ("GET", "/healthz", ""),
            ("GET", "/v1/status", ""),
            ("GET", "/v1/tenants", ""),
            ("GET", "/v1/chains", ""),
            ("DELETE", "/v1/tenants/acme", ""),
            ("GET", "/v1/hosts/2/config", ""),
            ("GET", "/v1/instances", ""),
            ("DELETE", "/v1/vms/acme/web", ""),
            ("GET", "/v1/tenants/acme/middleboxes/fw", ""),
            (
                "PUT",
                "/v1/tenants/acme/middleboxes/fw",
                "{\"instances\": 2}",
            ),
            ("GET", "/v1/tenants/acme/chains/c/scaling", ""),
            ("DELETE", "/v1/tenants/acme/chains/c/scaling", ""),
            ("GET", "/v1/events?since=3&kind=drain", ""),
            ("GET", "/v1/tenants/acme/blocks", ""),
            ("DELETE", "/v1/tenants/acme/blocks/3", ""),
        ];
        for (m, u, b) in cases {
            let a = parse(&req(m, u, b)).unwrap_or_else(|e| panic!("{m} {u}: {e}"));
            let ok = match (u, &a) {
                ("/healthz", Action::Health) | ("/v1/status", Action::Status) => true,
                (u, Action::Block(b)) => u.contains("/blocks") && b.tenant == "acme",
                (u, Action::Tenant(_)) => {
                    (u.starts_with("/v1/tenants") && !u.contains("/blocks")) || u == "/v1/chains"
                }
                (u, Action::Host(_)) => {
                    u.contains("/hosts") || u.contains("/vms") || u.contains("/instances")
                }
                (u, Action::Scaling(_)) => u.contains("/middleboxes/") || u.contains("/chains/c/"),
                (u, Action::Events(q)) => {
                    u.starts_with("/v1/events")
                        && q.since == 3
                        && q.kind.as_deref() == Some("drain")
                }
                _ => false,
            };
            assert!(ok, "{m} {u} parsed into {a:?}");
        }
    }

    #[test]
    fn bad_bodies_and_queries_are_refused_before_the_state_is_touched() {
        let bad = [
            (
                "PUT",
                "/v1/tenants/acme/middleboxes/fw",
                "{\"instances\": \"two\"}",
            ),
            (
                "POST",
                "/v1/tenants/acme/chains/c/metrics",
                "{\"value\": 1e999}",
            ),
            ("POST", "/v1/hosts", "{}"),
            ("PUT", "/v1/vms/acme/web", "not json"),
            ("GET", "/v1/events?since=x", ""),
            ("GET", "/v1/hosts/abc/fib", ""),
        ];
        for (m, u, b) in bad {
            let e = parse(&req(m, u, b)).expect_err(u);
            assert_eq!(e.status, 400, "{m} {u}: {e}");
        }
    }
}
