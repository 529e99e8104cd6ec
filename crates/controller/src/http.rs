//! The thin HTTP edge (tiny_http, a small pool of threads): reads a request,
//! has [`crate::resources`] parse it into an action, runs it through the
//! [`crate::executor`] under the reconciler's lock, performs the effects, and
//! writes the answer. The only part that knows about sockets and status lines.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_proto::AgentStatus;

use crate::answer::answer;
use crate::audit::AuditEntry;
use crate::error::ApiError;
use crate::resources::auth::{self, Principal};
use crate::resources::{self, hosts, json, page, Action, Reply, Request};
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
    let if_match = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("If-Match"))
        .map(|h| h.value.as_str().to_string());
    // Whom the client certificate names, as the terminator tells it (only
    // it knows the tag's secret).
    let peer = shared.peer_tag.as_ref().and_then(|t| {
        let values = req
            .headers()
            .iter()
            .filter(|h| h.field.equiv(sluice_tls::peer::HEADER))
            .map(|h| h.value.as_str());
        sluice_tls::hosts::PeerCert::parse(&t.peer(values)?)
    });
    let path = url.split('?').next().unwrap_or("").to_string();
    // The dashboard's files need no token: they hold no data, and the page
    // asks for a token before it calls the API.
    if crate::ui::is_ui(&path) {
        respond(req, crate::ui::answer(&method, &path));
        return;
    }
    let mut body = String::new();
    let read = req.as_reader().take(MAX_BODY + 1).read_to_string(&mut body);
    let handled = match read {
        Err(e) => Err(ApiError::bad(format!(
            "body: cannot read it as UTF-8 text: {e}"
        ))),
        Ok(n) if n as u64 > MAX_BODY => Err(ApiError::too_large(format!(
            "body: larger than {MAX_BODY} bytes"
        ))),
        Ok(_) => handle(
            shared,
            &Request {
                method: &method,
                url: &url,
                content_type: ctype.as_deref(),
                body: &body,
                if_match: if_match.as_deref(),
            },
            authorization.as_deref(),
            peer,
        ),
    };
    match handled {
        Ok(Handled::Follow(q, only)) => follow(shared, req, q, only, &path),
        Ok(Handled::Reply(reply, link)) => respond(req, answer(Ok(reply), &path, link)),
        Err(e) => respond(req, answer(Err(e), &path, None)),
    }
}

/// What a request gets: a reply (and a list's `Link` header), or an event
/// stream of these EVE events (for this tenant only, if set).
enum Handled {
    Reply(Reply, Option<String>),
    Follow(resources::eve::EveRequest, Option<String>),
}

/// Most event streams open at once: each holds a thread and polls every
/// agent once a second.
const MAX_STREAMS: usize = 32;
/// How often a stream asks the agents for new events.
const STREAM_POLL: Duration = Duration::from_secs(1);
/// A stream with nothing to send sends a comment this often, so that a
/// client that went away is noticed (the write fails) and proxies keep it.
const STREAM_KEEPALIVE: Duration = Duration::from_secs(15);

/// Answers `GET /v1/alerts?follow=true` (or flows) with a
/// `text/event-stream` on a thread of its own, so that it does not hold one
/// of the few request workers: the events `q` selects, then every newer one
/// as the agents report it ([`resources::eve::sse_frame`]), until the client
/// goes away or the controller stops.
fn follow(
    shared: &Arc<Shared>,
    req: tiny_http::Request,
    mut q: resources::eve::EveRequest,
    only: Option<String>,
    path: &str,
) {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let n = shared.streams.fetch_add(1, Ordering::SeqCst);
    if n >= MAX_STREAMS {
        shared.streams.fetch_sub(1, Ordering::SeqCst);
        let e = ApiError::new(
            503,
            format!(
                "{MAX_STREAMS} event streams are open already: try again later, or poll {path} without follow"
            ),
        );
        respond(req, answer(Err(e), path, None));
        return;
    }
    let sh = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("sluice-sse".into())
        .spawn(move || {
            let mut w = req.into_writer();
            let mut out = String::from(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                 Connection: close\r\n\r\nretry: 1000\n\n",
            );
            // The head at once: the agents may take a while to answer.
            let mut quiet = Instant::now();
            let mut alive = w.write_all(out.as_bytes()).and_then(|()| w.flush()).is_ok();
            out.clear();
            let mut cursor = resources::eve::StreamCursor::default();
            while alive && !sh.stopping() {
                let mut events = eve_events(&sh, &q);
                if let Some(t) = &only {
                    events
                        .retain(|v| v.get("tenant").and_then(serde_json::Value::as_str) == Some(t));
                }
                let events = cursor.unsent(events);
                if let Some(ts) = cursor.since() {
                    q.since = Some(ts.to_string());
                }
                // After the backlog, every new event, however many.
                q.limit = 100_000;
                for e in &events {
                    resources::eve::sse_frame(&mut out, e);
                }
                if out.is_empty() && quiet.elapsed() >= STREAM_KEEPALIVE {
                    out.push_str(": keepalive\n\n");
                }
                if !out.is_empty() {
                    alive = w.write_all(out.as_bytes()).and_then(|()| w.flush()).is_ok();
                    out.clear();
                    quiet = Instant::now();
                }
                let next = Instant::now() + STREAM_POLL;
                while Instant::now() < next && !sh.stopping() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            sh.streams.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        shared.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

fn respond(req: tiny_http::Request, a: crate::answer::Answer) {
    let mut resp = tiny_http::Response::from_string(a.body).with_status_code(a.status);
    for (name, value) in &a.headers {
        if let Some(h) = header(name, value) {
            resp = resp.with_header(h);
        }
    }
    // The client may have gone; nothing to do about it.
    let _ = req.respond(resp);
}

/// How a request was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    /// An open route: not at all.
    Open,
    /// A host's client certificate.
    Certificate,
    /// A bearer token.
    Token,
    /// A bootstrap token spent less than [`SPENT_GRACE_MS`] ago: good only
    /// for its host's certificate request for the same key again (an answer
    /// lost in transit).
    ///
    /// [`SPENT_GRACE_MS`]: crate::store::tokens::SPENT_GRACE_MS
    Spent,
}

/// Who sent the request: host N if its client certificate names host N (a
/// bearer token alongside is not looked at), else its token's principal;
/// `None` for an open route; a 401 if it needs a token and has no known one.
fn principal(
    shared: &Shared,
    req: &Request<'_>,
    authorization: Option<&str>,
    peer: Option<sluice_tls::hosts::PeerCert>,
) -> Result<(Option<Principal>, Credential), ApiError> {
    let path = req.url.split('?').next().unwrap_or("");
    if auth::is_open(req.method, path) {
        return Ok((None, Credential::Open));
    }
    if let Some(sluice_tls::hosts::PeerCert {
        peer: sluice_tls::hosts::Peer::Host(h),
        issued_secs,
    }) = peer
    {
        // A revoked host's certificate is worth nothing, and neither is the
        // token it might send alongside (its tokens were deleted).
        if lock(&shared.tokens).certificate_revoked(h, issued_secs) {
            return Err(auth::unauthenticated(format!(
                "this client certificate of host {h} was revoked; the host re-joins with a new \
                 bootstrap token (`sluice token create NAME --role host:{h}`), and an operator \
                 releases it (`sluice release {h}`)"
            )));
        }
        let p = Principal {
            name: format!("host-{h} certificate"),
            role: auth::Role::Host(h),
        };
        return Ok((Some(p), Credential::Certificate));
    }
    match auth::authenticate(authorization, |t| lock(&shared.tokens).lookup(t)) {
        Ok(p) => Ok((Some(p), Credential::Token)),
        Err(e) => {
            let secret = authorization
                .and_then(|h| h.trim().split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim());
            let spent = secret.and_then(|t| {
                lock(&shared.tokens)
                    .spent(t, unix_ms_now())
                    .map(|sp| (sp.name.clone(), sp.host))
            });
            match spent {
                Some((name, host)) => Ok((
                    Some(Principal {
                        name,
                        role: auth::Role::Host(host),
                    }),
                    Credential::Spent,
                )),
                None => Err(e),
            }
        }
    }
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The 401 of a spent bootstrap token used for anything but its own
/// certificate request again.
fn spent_refusal(name: &str) -> ApiError {
    auth::unauthenticated(format!(
        "bootstrap token `{name}` was spent on its host's first certificate; it only gets \
         the same key's certificate again (an answer lost in transit). The agent \
         authenticates with that certificate now, or re-joins with a new token"
    ))
}

/// The reply to a request, and a list's `Link` header (its next page); or
/// the event stream it asks for.
fn handle(
    shared: &Arc<Shared>,
    req: &Request<'_>,
    authorization: Option<&str>,
    peer: Option<sluice_tls::hosts::PeerCert>,
) -> Result<Handled, ApiError> {
    // Authenticate before parsing, so an anonymous caller learns nothing from
    // the request's validation.
    let (who, credential) = principal(shared, req, authorization, peer)?;
    // A spent bootstrap token may send one thing: its host's heartbeat with a
    // certificate request (checked against the key below).
    if credential == Credential::Spent && (req.method, req.url) != ("POST", "/v1/hosts") {
        return Err(spent_refusal(who.as_ref().map_or("", |p| p.name.as_str())));
    }
    let mut action = resources::parse_as(req, who.as_ref())?;
    let (path, query) = req.url.split_once('?').unwrap_or((req.url, ""));
    let pager = match resources::route(req.method, path) {
        Ok((tpl, _)) => page::pager(req.method, tpl, path, query)?,
        Err(_) => None,
    };
    let mut only = None;
    if let Some(p) = &who {
        if let Err(e) = auth::authorize(p, &action) {
            refused(shared, p, &action, &e);
            return Err(e);
        }
        only = auth::listing_filter(p, &action);
        if let Some(t) = &only {
            // Narrow the query itself, so a tenant's `limit` counts its own
            // entries; the listing is still filtered below.
            match &mut action {
                Action::Audit(q) => q.tenant = Some(t.clone()),
                Action::Eve(q) => q.tenant = Some(t.clone()),
                _ => {}
            }
        }
    }
    if let Action::Eve(q) = &action {
        if q.follow {
            return Ok(Handled::Follow(q.clone(), only));
        }
    }
    let actor = who.as_ref().map_or("anonymous", |p| p.name.as_str());
    // An agent's API token, recorded once its heartbeat is accepted; its
    // certificate request, answered then (and kept out of the desired state).
    let mut csr = None;
    let agent_token = match &mut action {
        Action::Host(hosts::HostAction::Heartbeat(hb)) => {
            let r = &mut hb.hb.registration;
            if shared.require_agent_tls && !r.api.starts_with("https://") {
                return Err(ApiError::bad(format!(
                    "api: `{}` is plain HTTP, and this controller requires agents to serve \
                     their API over TLS (an agent whose controller URL is https:// does; \
                     or set require_agent_tls = false)",
                    r.api
                )));
            }
            let name = who.as_ref().map_or("", |p| p.name.as_str());
            if credential == Credential::Spent && r.api_csr.is_none() {
                return Err(spent_refusal(name));
            }
            // Signed first: a request that cannot be signed registers nothing.
            if let Some(c) = r.api_csr.take() {
                let key = sluice_tls::hosts::HostCa::request_key(&c)
                    .map_err(|e| ApiError::bad(format!("api_csr: {e}")))?;
                if credential == Credential::Spent {
                    // The same key again (its holder signed the request): the
                    // first answer was lost. Any other key needs a new token.
                    let secret = authorization
                        .and_then(|h| h.trim().split_once(' '))
                        .map(|(_, t)| t.trim())
                        .unwrap_or("");
                    let same = lock(&shared.tokens)
                        .spent(secret, unix_ms_now())
                        .is_some_and(|sp| sp.key == key && sp.host == r.host);
                    if !same {
                        return Err(spent_refusal(name));
                    }
                }
                csr = Some(sign_api_cert(shared, r.host, &r.api, &c)?);
                // Spent before the certificate leaves, under the token
                // store's lock: of two requests with one token, one wins.
                match (&who, credential) {
                    (Some(p), Credential::Token) => spend_bootstrap(shared, p, r.host, &key)?,
                    (Some(p), Credential::Spent) => {
                        tracing::info!(host = r.host, token = %p.name, "bootstrap token's certificate answered again");
                        audit_join(
                            shared,
                            &p.name,
                            r.host,
                            "answered again for the same key",
                            200,
                        );
                    }
                    _ => {}
                }
            }
            // An agent without a configuration (restarted without a saved
            // one) gets the whole configuration next, not a delta.
            if r.config_version == 0 {
                shared.acked.forget(r.host);
            }
            Some((r.host, r.api_token.clone()))
        }
        _ => None,
    };
    // A revocation takes the host's credentials first (they live with the
    // tokens), so no request of the host's gets in while it is contained.
    let revoked_tokens = match &action {
        Action::Host(hosts::HostAction::Revoke(h)) => Some(revoke_credentials(shared, *h)?),
        _ => None,
    };
    if let Action::Host(hosts::HostAction::RotateFabric(fresh)) = &mut action {
        let mut secret = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .map_err(|_| ApiError::new(500, "the system's random source failed"))?;
        fresh.0 = Some(secret);
    }
    let mut reply = run(shared, action, agent_token, actor)?;
    if let (Some(names), Reply::Json(_, serde_json::Value::Object(m))) =
        (revoked_tokens, &mut reply)
    {
        m.insert("tokens_deleted".into(), names.into());
    }
    if let (Some((chain, not_after_ms)), Reply::Json(_, serde_json::Value::Object(m))) =
        (csr, &mut reply)
    {
        m.insert("api_cert".into(), chain.into());
        m.insert("api_cert_not_after_ms".into(), not_after_ms.into());
    }
    let reply = match only {
        Some(t) => auth::filter_listing(&t, reply),
        None => reply,
    };
    // Paged after the filtering, so that a tenant's pages count its own items.
    let (reply, link) = match pager {
        Some(p) => p.apply(reply),
        None => (reply, None),
    };
    Ok(Handled::Reply(reply, link))
}

/// A host's token is a bootstrap token: once it gets its host a certificate,
/// the host authenticates with that (renewals included) and the token is
/// deleted, so a copy of it is worth nothing; a request whose token was spent
/// meanwhile gets the 401 of an unknown token. An operator's token is not a
/// bootstrap token. An operator mints another for a host that lost its key
/// (`sluice token create NAME --role host:ID`).
fn spend_bootstrap(
    shared: &Shared,
    who: &Principal,
    host: u32,
    key: &[u8],
) -> Result<(), ApiError> {
    if who.role != auth::Role::Host(host) {
        return Ok(());
    }
    let spent = lock(&shared.tokens).spend(&who.name, host, key, unix_ms_now());
    let (status, outcome) = match &spent {
        Ok(_) => (200, "spent".to_string()),
        Err(e) => (401, format!("not spent: {e}")),
    };
    tracing::info!(host, token = %who.name, %outcome, "host joins with its bootstrap token");
    audit_join(shared, &who.name, host, &outcome, status);
    spent.map(|_| ()).map_err(|_| {
        auth::unauthenticated("unknown token: it was never issued or has been deleted")
    })
}

/// Records a host's join with bootstrap token `token` in the audit log.
fn audit_join(shared: &Shared, token: &str, host: u32, outcome: &str, status: u16) {
    lock(&shared.reconciler).record(
        AuditEntry {
            seq: 0,
            at_ms: 0,
            actor: token.to_string(),
            tenant: None,
            action: format!("join host {host} (bootstrap token `{token}` {outcome})"),
            status,
            changes: Vec::new(),
        },
        Instant::now(),
    );
}

/// Revokes host `h`'s credentials now: its certificates issued so far are
/// refused, its tokens deleted. Returns the deleted tokens' names.
fn revoke_credentials(shared: &Shared, h: u32) -> Result<Vec<String>, ApiError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let names = lock(&shared.tokens)
        .revoke_host(h, now)
        .map_err(|e| ApiError::internal(format!("revoking host {h}'s credentials: {e}")))?;
    tracing::warn!(host = h, tokens = ?names, "host credentials revoked");
    Ok(names)
}

/// Answers a heartbeat's certificate request: the agent's API certificate
/// chain from the hosts' CA, for the host's name and its API's address, and
/// its end (Unix milliseconds).
fn sign_api_cert(
    shared: &Shared,
    host: u32,
    api: &str,
    csr: &str,
) -> Result<(String, u64), ApiError> {
    let ca = shared.hosts_ca.as_ref().ok_or_else(|| {
        ApiError::bad(
            "api_csr: this controller does not speak TLS, so it signs no agent certificate",
        )
    })?;
    let addr = api_host(api).and_then(|h| h.parse().ok());
    let (chain, not_after) = ca
        .sign(host, csr, addr, std::time::SystemTime::now())
        .map_err(|e| ApiError::bad(format!("api_csr: {e}")))?;
    let not_after_ms = not_after
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Ok((chain, not_after_ms))
}

/// The host part of an `https://HOST:PORT/...` URL (an IPv6 address without
/// its brackets).
fn api_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next();
    }
    Some(authority.rsplit_once(':').map_or(authority, |(h, _)| h))
}

/// Records a change refused by authorization in the audit log (a change the
/// executor refuses is recorded there).
fn refused(shared: &Shared, who: &Principal, action: &Action, e: &ApiError) {
    if let Some((tenant, what)) = crate::executor::describe(action) {
        lock(&shared.reconciler).record(
            AuditEntry {
                seq: 0,
                at_ms: 0,
                actor: who.name.clone(),
                tenant,
                action: what,
                status: e.status,
                changes: vec![e.msg.clone()],
            },
            Instant::now(),
        );
    }
}

fn run(
    shared: &Arc<Shared>,
    action: Action,
    agent_token: Option<(u32, Option<String>)>,
    actor: &str,
) -> Result<Reply, ApiError> {
    let action = match action {
        Action::Host(hosts::HostAction::Instances) => return instances(shared),
        Action::Eve(q) => return eve(shared, &q),
        Action::Token(t) => {
            return resources::tokens::execute(&mut lock(&shared.tokens), t, unix_ms())
        }
        a => a,
    };
    let (reply, effects) = {
        let mut r = lock(&shared.reconciler);
        let reply = crate::executor::execute_as(&mut r, action, actor, Instant::now());
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

/// `GET /v1/alerts`, `/v1/flows`: every agent's EVE events of the kind asked,
/// asked in parallel outside the lock, merged. An agent that does not answer
/// is left out (its events come back with it).
fn eve(shared: &Shared, q: &resources::eve::EveRequest) -> Result<Reply, ApiError> {
    json(200, &eve_events(shared, q))
}

/// The events of [`eve`].
fn eve_events(shared: &Shared, q: &resources::eve::EveRequest) -> Vec<serde_json::Value> {
    // Every registered host: one whose instances were removed still has their
    // logs. Each agent's EVE logs need its own API token.
    let apis: Vec<(u32, String, Option<String>)> = {
        let tokens = lock(&shared.agent_tokens).clone();
        lock(&shared.reconciler)
            .desired()
            .hosts
            .iter()
            .map(|(id, h)| (*id, h.api.clone(), tokens.get(id).cloned()))
            .collect()
    };
    let ask = |query: &str| -> Vec<Vec<serde_json::Value>> {
        std::thread::scope(|s| {
            let hs: Vec<_> = apis
                .iter()
                .map(|(host, api, token)| {
                    let url = format!("{api}/v1/eve?{query}");
                    s.spawn(move || {
                        let Ok(agent) = crate::agent_client::agent(
                            shared,
                            *host,
                            api,
                            Duration::from_millis(300),
                            Duration::from_secs(5),
                        ) else {
                            return Vec::new();
                        };
                        let mut req = agent.get(&url);
                        if let Some(t) = token {
                            req = req.set("Authorization", &format!("Bearer {t}"));
                        }
                        req.call()
                            .ok()
                            .and_then(|r| r.into_json::<Vec<serde_json::Value>>().ok())
                            .unwrap_or_default()
                    })
                })
                .collect();
            hs.into_iter().filter_map(|h| h.join().ok()).collect()
        })
    };
    let mut events = resources::eve::merge(ask(&q.agent_query()), q.limit());
    if let Some(alerts) = q.alerts_query() {
        let alerts: Vec<serde_json::Value> = ask(&alerts).into_iter().flatten().collect();
        resources::eve::mark_alerted(&mut events, &alerts);
    }
    events
}

/// `GET /v1/instances`: the placement, with what each agent says of its
/// instances, asked in parallel outside the lock with short timeouts.
fn instances(shared: &Shared) -> Result<Reply, ApiError> {
    let (list, apis) = hosts::instance_listing(&lock(&shared.reconciler));
    let statuses: BTreeMap<u32, AgentStatus> = std::thread::scope(|s| {
        let hs: Vec<_> = apis
            .iter()
            .map(|(h, api)| {
                s.spawn(move || {
                    crate::agent_client::agent(
                        shared,
                        *h,
                        api,
                        Duration::from_millis(300),
                        Duration::from_millis(800),
                    )
                    .ok()?
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
