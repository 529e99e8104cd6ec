//! The thin HTTP edge (tiny_http, a small pool of threads): reads a request,
//! has [`crate::resources`] parse it into an action, runs it through the
//! [`crate::executor`] under the reconciler's lock, performs the effects, and
//! writes the answer. The only part that knows about sockets and status lines.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_proto::AgentStatus;

use crate::error::ApiError;
use crate::resources::auth::{self, Principal};
use crate::resources::{self, hosts, json, Action, Reply, Request};
use crate::service::{lock, unix_ms, Shared};

/// Largest request body accepted.
const MAX_BODY: u64 = 1 << 20;

/// Serves requests until the server stops.
pub(crate) fn worker(server: &tiny_http::Server, shared: &Arc<Shared>) {
    while !shared.stopping() {
        let req = match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            // A failed accept (out of file descriptors, ...) must not end the
            // worker: back off and carry on.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        serve_one(shared, req);
    }
}

fn header(name: &str, value: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn serve_one(shared: &Arc<Shared>, mut req: tiny_http::Request) {
    let method = req.method().as_str().to_ascii_uppercase();
    let url = req.url().to_string();
    let ctype = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Content-Type"))
        .map(|h| h.value.as_str().to_ascii_lowercase());
    let authorization = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_string());
    let mut body = String::new();
    let read = req.as_reader().take(MAX_BODY + 1).read_to_string(&mut body);
    let reply = match read {
        Err(e) => Err(ApiError::bad(format!(
            "body: cannot read it as UTF-8 text: {e}"
        ))),
        Ok(n) if n as u64 > MAX_BODY => {
            Err(ApiError::bad(format!("body: larger than {MAX_BODY} bytes")))
        }
        Ok(_) => handle(
            shared,
            &Request {
                method: &method,
                url: &url,
                content_type: ctype.as_deref(),
                body: &body,
            },
            authorization.as_deref(),
        ),
    };
    let status = reply.as_ref().err().map(|e| e.status);
    let (code, ctype, text) = match reply {
        Ok(Reply::Json(code, v)) => (code, "application/json", v.to_string()),
        Ok(Reply::Text(ctype, t)) => (200, ctype, t),
        Err(e) => (
            e.status,
            "application/json",
            serde_json::json!({ "error": e.msg }).to_string(),
        ),
    };
    let mut resp = tiny_http::Response::from_string(text).with_status_code(code);
    if let Some(h) = header("Content-Type", ctype) {
        resp = resp.with_header(h);
    }
    if status == Some(401) {
        if let Some(h) = header("WWW-Authenticate", "Bearer realm=\"sluice\"") {
            resp = resp.with_header(h);
        }
    }
    // The client may have gone; nothing to do about it.
    let _ = req.respond(resp);
}

/// Who sent the request: its token's principal, or `None` for an open route;
/// a 401 if it needs a token and has no known one.
fn principal(
    shared: &Shared,
    req: &Request<'_>,
    authorization: Option<&str>,
) -> Result<Option<Principal>, ApiError> {
    let path = req.url.split('?').next().unwrap_or("");
    if auth::is_open(req.method, path) {
        return Ok(None);
    }
    auth::authenticate(authorization, |t| lock(&shared.tokens).lookup(t)).map(Some)
}

fn handle(
    shared: &Arc<Shared>,
    req: &Request<'_>,
    authorization: Option<&str>,
) -> Result<Reply, ApiError> {
    // Authenticate before parsing, so an anonymous caller learns nothing from
    // the request's validation.
    let who = principal(shared, req, authorization)?;
    let action = resources::parse_as(req, who.as_ref())?;
    let mut only = None;
    if let Some(p) = &who {
        auth::authorize(p, &action)?;
        only = auth::listing_filter(p, &action);
    }
    // An agent's API token, recorded once its heartbeat is accepted.
    let agent_token = match &action {
        Action::Host(hosts::HostAction::Heartbeat(hb)) => {
            let r = &hb.hb.registration;
            Some((r.host, r.api_token.clone()))
        }
        _ => None,
    };
    let reply = run(shared, action, agent_token)?;
    Ok(match only {
        Some(t) => auth::filter_listing(&t, reply),
        None => reply,
    })
}

fn run(
    shared: &Arc<Shared>,
    action: Action,
    agent_token: Option<(u32, Option<String>)>,
) -> Result<Reply, ApiError> {
    let action = match action {
        Action::Host(hosts::HostAction::Instances) => return instances(shared),
        Action::Token(t) => {
            return resources::tokens::execute(&mut lock(&shared.tokens), t, unix_ms())
        }
        a => a,
    };
    let (reply, effects) = {
        let mut r = lock(&shared.reconciler);
        let reply = crate::executor::execute(&mut r, action, Instant::now());
        // Before the effects: the push a registration triggers needs it.
        if let (Ok(_), Some((h, t))) = (&reply, agent_token) {
            let mut tokens = lock(&shared.agent_tokens);
            match t {
                Some(t) => tokens.insert(h, t),
                None => tokens.remove(&h),
            };
        }
        (reply, r.take_effects())
    };
    shared.perform(effects);
    reply
}

/// `GET /v1/instances`: the placement, with what each agent says of its
/// instances, asked in parallel outside the lock with short timeouts.
fn instances(shared: &Shared) -> Result<Reply, ApiError> {
    let (list, apis) = hosts::instance_listing(&lock(&shared.reconciler));
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_millis(300))
        .timeout(Duration::from_millis(800))
        .build();
    let statuses: BTreeMap<u32, AgentStatus> = std::thread::scope(|s| {
        let hs: Vec<_> = apis
            .iter()
            .map(|(h, api)| {
                let agent = agent.clone();
                s.spawn(move || {
                    agent
                        .get(&format!("{api}/v1/status"))
                        .call()
                        .ok()
                        .and_then(|r| r.into_json::<AgentStatus>().ok())
                        .map(|st| (*h, st))
                })
            })
            .collect();
        hs.into_iter()
            .filter_map(|h| h.join().ok().flatten())
            .collect()
    });
    json(200, &hosts::with_status(list, &statuses))
}
