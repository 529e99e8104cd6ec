//! The agent's HTTP API on the management network:
//!
//! * `PUT /v1/config`: an [`AgentConfig`] (JSON); `200 {"version": N}` once it is
//!   handed to the data plane, `400 {"error": "..."}` (and the old configuration
//!   stays) if it cannot be installed;
//! * `PATCH /v1/config`: a [`sluice_proto::ConfigDelta`] (JSON), the changes
//!   since the version running: applied and installed exactly as a `PUT` of the
//!   resulting whole configuration is, `200 {"version": N}`; `409 {"error":
//!   "...", "running": R, "base": B}` if the delta is based on another version
//!   than the one running (the controller then sends the whole configuration),
//!   `400` if it cannot be applied or its result installed (nothing changes);
//! * `GET /v1/config`: the running configuration (`404` before the first);
//! * `GET /v1/eve?tenant=T&event_type=alert&since=TS&limit=N`: the EVE events
//!   this host's NF instances wrote ([`crate::eve`]), oldest first;
//!
//! these need `Authorization: Bearer TOKEN` with the token the agent drew at
//! start and registered with the controller (`401` otherwise), unless it runs
//! without one (tests);
//! * `GET /v1/status`: [`sluice_proto::AgentStatus`] (counters, instances and
//!   their health, failover events with timestamps, pinned flows per target);
//! * `GET /metrics`: Prometheus text.
//!
//! With an `https://` controller the API speaks TLS only
//! ([`ApiServer::start_tls`]), with a certificate the controller's hosts' CA
//! signs for this host; until the first arrives handshakes fail (the
//! controller retries its pushes). Then everything but the monitoring reads
//! (`GET /metrics` and `GET /v1/status`, which Prometheus and operators
//! scrape without a certificate) needs the controller's client certificate
//! of the hosts' CA (mutual TLS; `401` without one, `403` for another
//! certificate of that CA, such as a host's; one of another CA fails the
//! handshake), on top of the token above.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use sluice_proto::{AgentConfig, ConfigDelta, DeltaError};
use tiny_http::{Header, Method, Request, Response, Server};

use crate::control::{AgentState, DeltaRefusal};

/// Largest configuration accepted (bytes).
const MAX_BODY: u64 = 64 << 20;

/// The running API server.
pub struct ApiServer {
    server: Arc<Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
    /// With TLS: the terminator's thread, its stop flag and the private
    /// socket it relays to (removed after the threads stopped).
    tls: Option<(
        JoinHandle<()>,
        Arc<AtomicBool>,
        sluice_tls::terminator::Backend,
    )>,
}

/// The answer to plain HTTP on the API's TLS port, naming the fix.
const PLAIN_HTTP_ANSWER: &str = "{\"error\":\"this port speaks TLS: use https://, trusting the controller's hosts' CA (DB.hosts-ca.pem next to its database), for the name host-ID.agents.sluice or this address\"}";

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ApiServer {
    /// Listens on `listen` and serves `core` on a thread.
    pub fn start(listen: &str, core: Arc<AgentState>) -> std::io::Result<ApiServer> {
        let server = Server::http(listen).map_err(std::io::Error::other)?;
        let addr = server.server_addr().to_ip().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an IP listener")
        })?;
        let server = Arc::new(server);
        let s = server.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-api".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    handle(&core, req, None);
                }
            })?;
        Ok(ApiServer {
            server,
            addr,
            thread: Some(thread),
            tls: None,
        })
    }

    /// Listens on `listen` with TLS, presenting what `slot` holds, and serves
    /// `core` behind the terminator.
    /// Clients' certificates must chain to what `trust` holds.
    pub fn start_tls(
        listen: &str,
        core: Arc<AgentState>,
        slot: Arc<sluice_tls::hosts::CertSlot>,
        trust: Arc<sluice_tls::hosts::ClientTrust>,
    ) -> std::io::Result<ApiServer> {
        let config =
            sluice_tls::hosts::server_config(slot, trust).map_err(std::io::Error::other)?;
        let tag = Arc::new(sluice_tls::peer::PeerTag::new()?);
        let listener = std::net::TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let (backend, unix) = sluice_tls::terminator::Backend::bind("sluice-agent")?;
        let server = Arc::new(Server::from_listener(unix, None).map_err(std::io::Error::other)?);
        let (s, t) = (server.clone(), tag.clone());
        let thread = std::thread::Builder::new()
            .name("sluice-api".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    handle(&core, req, Some(&t));
                }
            })?;
        let stop = Arc::new(AtomicBool::new(false));
        let (st, path) = (stop.clone(), backend.path.clone());
        let acceptor = std::thread::Builder::new()
            .name("sluice-api-tls".into())
            .spawn(move || {
                sluice_tls::terminator::acceptor(
                    listener,
                    config,
                    path,
                    PLAIN_HTTP_ANSWER,
                    Some(tag),
                    st,
                )
            })?;
        Ok(ApiServer {
            server,
            addr,
            thread: Some(thread),
            tls: Some((acceptor, stop, backend)),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving.
    pub fn stop(&mut self) {
        let tls = self.tls.take();
        if let Some((acceptor, stop, _)) = &tls {
            stop.store(true, Ordering::Release);
            while !acceptor.is_finished() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The private socket's directory goes last, once nothing serves it.
        if let Some((acceptor, _, backend)) = tls {
            let _ = acceptor.join();
            drop(backend);
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn json_header() -> Header {
    Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
        .unwrap_or_else(|_| unreachable!("static header"))
}

fn reply_json(req: Request, code: u16, body: &serde_json::Value) {
    let r = Response::from_string(body.to_string())
        .with_status_code(code)
        .with_header(json_header());
    let _ = req.respond(r);
}

fn error(req: Request, code: u16, msg: &str) {
    reply_json(req, code, &serde_json::json!({ "error": msg }));
}

/// Whether a client without the controller's certificate may ask this: the
/// monitoring reads (Prometheus scrapes `/metrics` with the hosts' CA as its
/// only TLS setting; `/v1/status` is the same counters as JSON).
fn monitoring(method: &Method, path: &str) -> bool {
    *method == Method::Get && matches!(path, "/metrics" | "/v1/status")
}

/// With TLS (`tag`): whether the request comes from the controller's client
/// certificate, else the refusal.
fn from_controller(
    req: &Request,
    path: &str,
    tag: &sluice_tls::peer::PeerTag,
) -> Result<(), (u16, String)> {
    use sluice_tls::hosts::{Peer, PeerCert};
    let values = req
        .headers()
        .iter()
        .filter(|h| h.field.equiv(sluice_tls::peer::HEADER))
        .map(|h| h.value.as_str());
    match tag
        .peer(values)
        .as_deref()
        .and_then(PeerCert::parse)
        .map(|c| c.peer)
    {
        Some(Peer::Controller) => Ok(()),
        Some(p) => Err((
            403,
            format!("{path} is the controller's to use, and this client certificate names {}", p.name()),
        )),
        None => Err((
            401,
            format!("{path} needs the controller's client certificate (mutual TLS with the hosts' CA); without one only GET /metrics and /v1/status answer"),
        )),
    }
}

fn handle(core: &AgentState, mut req: Request, tag: Option<&sluice_tls::peer::PeerTag>) {
    let (path, query) = match req.url().split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (req.url().to_string(), String::new()),
    };
    if let Some(tag) = tag {
        if !monitoring(req.method(), &path) {
            if let Err((code, msg)) = from_controller(&req, &path, tag) {
                return error(req, code, &msg);
            }
        }
    }
    let authorization = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_string());
    // The configuration is the controller's to change (and holds every
    // tenant's FIB on this host), and the EVE logs are the tenants' alerts and
    // flows; status and metrics stay open for monitoring.
    if matches!(path.as_str(), "/v1/config" | "/v1/eve")
        && !core.may_configure(authorization.as_deref())
    {
        return error(
            req,
            401,
            &format!("{path} needs this agent's token (Authorization: Bearer TOKEN), which only its controller knows"),
        );
    }
    match (req.method(), path.as_str()) {
        (Method::Put, "/v1/config") => {
            let mut body = Vec::new();
            if let Err(e) = req.as_reader().take(MAX_BODY).read_to_end(&mut body) {
                return error(req, 400, &format!("reading the body: {e}"));
            }
            let cfg: AgentConfig = match serde_json::from_slice(&body) {
                Ok(c) => c,
                Err(e) => return error(req, 400, &format!("bad configuration JSON: {e}")),
            };
            core.heard();
            match core.apply(cfg) {
                Ok(v) => reply_json(req, 200, &serde_json::json!({ "version": v })),
                Err(e) => error(req, 400, &e.to_string()),
            }
        }
        (Method::Patch, "/v1/config") => {
            let mut body = Vec::new();
            if let Err(e) = req.as_reader().take(MAX_BODY).read_to_end(&mut body) {
                return error(req, 400, &format!("reading the body: {e}"));
            }
            let delta: ConfigDelta = match serde_json::from_slice(&body) {
                Ok(d) => d,
                Err(e) => return error(req, 400, &format!("bad configuration delta JSON: {e}")),
            };
            core.heard();
            match core.apply_delta(&delta) {
                Ok(v) => reply_json(req, 200, &serde_json::json!({ "version": v })),
                Err(DeltaRefusal::Conflict(e)) => {
                    let running = match &e {
                        DeltaError::Base { running, .. } => *running,
                        _ => core.version(),
                    };
                    reply_json(
                        req,
                        409,
                        &serde_json::json!({
                            "error": e.to_string(),
                            "running": running,
                            "base": delta.base_version,
                        }),
                    )
                }
                Err(e @ DeltaRefusal::Bad(_)) => error(req, 400, &e.to_string()),
            }
        }
        // Without store passwords: anyone who can reach the API may read it
        // (with TLS: only the controller).
        (Method::Get, "/v1/config") => match core.config() {
            Some(c) => match serde_json::to_value(c.redacted()) {
                Ok(v) => reply_json(req, 200, &v),
                Err(e) => error(req, 500, &e.to_string()),
            },
            None => error(req, 404, "no configuration yet"),
        },
        (Method::Get, "/v1/status") => match serde_json::to_value(core.status()) {
            Ok(v) => reply_json(req, 200, &v),
            Err(e) => error(req, 500, &e.to_string()),
        },
        (Method::Get, "/v1/eve") => {
            let q = match crate::eve::EveQuery::parse(&query) {
                Ok(q) => q,
                Err(e) => return error(req, 400, &e),
            };
            let Some(dir) = core.eve_dir() else {
                return reply_json(req, 200, &serde_json::json!([]));
            };
            match crate::eve::read(&dir, &q) {
                Ok(v) => reply_json(req, 200, &serde_json::Value::Array(v)),
                Err(e) => error(req, 500, &format!("reading {}: {e}", dir.display())),
            }
        }
        (Method::Get, "/metrics") => {
            let h = Header::from_bytes(&b"Content-Type"[..], &b"text/plain; version=0.0.4"[..])
                .unwrap_or_else(|_| unreachable!("static header"));
            let _ = req.respond(Response::from_string(core.metrics()).with_header(h));
        }
        (_, "/v1/config" | "/v1/status" | "/v1/eve" | "/metrics") => {
            error(req, 405, "method not allowed")
        }
        _ => error(req, 404, &format!("no such resource: {path}")),
    }
}
