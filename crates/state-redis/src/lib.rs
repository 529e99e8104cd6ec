//! The Redis/Valkey backend of the state API.
//!
//! One [`sluice_state::StateStore::execute`] is one pipelined round trip: every
//! operation of the batch is encoded into one buffer, written with one `write`, and
//! the replies read back into one reused buffer (StatelessNF §4.4.3's batching and
//! pre-allocated buffers). Operations that must be atomic on shared state —
//! compare-and-set, allocation pools, taking expired timers — run as the functions
//! of one server-side Lua library ([`scripts`], Redis ≥ 7.0 or Valkey), called
//! with `FCALL` by name. The store admin loads it ([`acl::Admin::load_library`]);
//! a connection without a user loads it itself when it connects.
//!
//! Key layout (all binary-safe): a state key `k` is stored as
//! `{XXXXXXXX}k`, where `XXXXXXXX` is the hex FNV-1a of `k`: the braces make it a
//! Redis Cluster hash tag, so a pool's auxiliary keys (`{tag}k:f`, `{tag}k:s`) and the
//! key itself always share a slot, while different flows spread over the cluster.
//! Timers of namespace `n` are the sorted set `{tNNNNNNNN}:timers`, scored by deadline
//! in microseconds (exact in a double until the year 2255).
//!
//! With `?prefix=P` every stored key and timer set starts with `P` (before the
//! hash tag, so cluster slots do not change), which is what a per-tenant ACL user's
//! key pattern `~P*` confines (see [`acl`]). With `redis://USER@HOST:PORT` every
//! connection authenticates as `USER` first.
//!
//! Errors never panic: a lost connection, a timeout or an unexpected reply is a
//! [`StoreError`]; the connection is dropped (its pipeline state is unknown) and the
//! next batch reconnects.

pub mod acl;
mod cluster;
mod conn;
mod node;
pub mod resp;
pub mod scripts;
pub mod server;

pub use cluster::{slot_of, ClusterStore};
pub use conn::TlsSettings;
use node::Node;

use std::time::Duration;

use sluice_state::{Key, Namespace, Op, Ops, StateStore, StoreCounters, StoreError};

/// How long a store polls for a reply before it sleeps, by default: longer than
/// a loopback round trip takes on the machines measured (docs/BENCHMARKS.md).
pub const DEFAULT_POLL: Duration = Duration::from_micros(50);

/// A password: never printed (its `Debug` says `<redacted>`), never part of a
/// URL, a command line or an error message.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a password.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The password itself, for the one place that sends it (`AUTH`).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The environment variable holding the store password of a URL that names a
/// user and no `password_file`.
pub const PASSWORD_ENV: &str = "SLUICE_STORE_PASSWORD";

/// Credentials sent with `AUTH` on every (re)connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    /// ACL user name.
    pub user: String,
    /// Its password.
    pub password: Secret,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port`.
    pub addr: String,
    /// Connect, read and write timeout.
    pub timeout: Duration,
    /// How long to poll the connection for a reply that is needed before
    /// sleeping until it arrives (`?poll_us=N` in the URL; 0: sleep at once).
    /// A reply that arrives while the caller polls costs no wake-up on either
    /// side, which on a virtual machine is most of a loopback round trip; the
    /// price is the CPU spent polling, by a caller that has nothing else to do.
    pub poll: Duration,
    /// ACL user and password (`redis://USER@HOST:PORT`), if any.
    pub auth: Option<Auth>,
    /// Prepended to every stored key and timer set (`?prefix=P`), so an ACL key
    /// pattern `~P*` can confine a user to them; empty: the plain layout.
    pub prefix: String,
    /// TLS (`rediss://`), if on.
    pub tls: Option<TlsSettings>,
}

impl Config {
    /// Parses `redis://[USER@]HOST:PORT[?poll_us=N][&prefix=P][&password_file=PATH]`
    /// (the scheme is optional), or `rediss://` for TLS with its options
    /// `ca_file`, `cert_file`/`key_file` and `server_name` (see
    /// [`TlsSettings`]). With a user, the password comes from `password_file`
    /// or else from [`PASSWORD_ENV`]; a password in the URL is refused.
    pub fn from_url(url: &str) -> Result<Config, StoreError> {
        let u = parse_url(url, "redis://")?;
        if u.hosts.is_empty() || !u.hosts.contains(':') || u.hosts.contains(',') {
            return Err(StoreError::Refused(format!(
                "`{}`: expected redis://HOST:PORT or redis://USER@HOST:PORT[?poll_us=N]",
                redact_url(url)
            )));
        }
        if u.wait.is_some() || u.wait_ms.is_some() || u.rewait_ms.is_some() {
            // Waiting for a replica buys nothing without a failover that
            // promotes it, and the single-server client follows none.
            return Err(StoreError::Refused(format!(
                "`{}`: wait, wait_ms and rewait_ms need a replicated store: redis-cluster://HOST:PORT,...",
                redact_url(url)
            )));
        }
        Ok(Config {
            addr: u.hosts.to_string(),
            timeout: Duration::from_millis(1000),
            poll: u.poll,
            auth: u.auth,
            prefix: u.prefix,
            tls: u.tls,
        })
    }

    /// This configuration as a URL without secrets (`password_file` left out).
    pub fn describe(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss://"
        } else {
            "redis://"
        };
        describe(scheme, &self.addr, self.auth.as_ref(), &self.prefix)
    }
}

/// Whether `url` names a Redis Cluster (`redis-cluster://`, or
/// `rediss-cluster://` over TLS).
pub fn is_cluster_url(url: &str) -> bool {
    url.starts_with("redis-cluster://") || url.starts_with("rediss-cluster://")
}

/// Whether `url` names a Redis/Valkey store, standalone or clustered, with or
/// without TLS.
pub fn is_store_url(url: &str) -> bool {
    is_cluster_url(url) || url.starts_with("redis://") || url.starts_with("rediss://")
}

/// Opens the store `url` names, standalone or clustered (see
/// [`Config::from_url`] and [`ClusterStore::open`]).
pub fn open_store(url: &str) -> Result<Box<dyn StateStore>, StoreError> {
    if is_cluster_url(url) {
        Ok(Box::new(ClusterStore::open(url)?))
    } else {
        Ok(Box::new(RedisStore::open(url)?))
    }
}

/// A store URL without its secrets (see [`Config::describe`]).
pub(crate) fn describe(scheme: &str, hosts: &str, auth: Option<&Auth>, prefix: &str) -> String {
    let user = auth.map(|a| format!("{}@", a.user)).unwrap_or_default();
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("?prefix={prefix}")
    };
    format!("{scheme}{user}{hosts}{prefix}")
}

/// `url` with any password between `USER:` and `@` replaced, for messages.
pub fn redact_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let Some(at) = url[start..end].rfind('@').map(|i| start + i) else {
        return url.to_string();
    };
    match url[start..at].find(':') {
        Some(colon) => format!("{}:<redacted>{}", &url[..start + colon], &url[at..]),
        None => url.to_string(),
    }
}

/// A parsed store URL: scheme stripped, options read, password resolved.
pub(crate) struct UrlParts<'a> {
    /// `HOST:PORT[,HOST:PORT...]`.
    pub(crate) hosts: &'a str,
    pub(crate) poll: Duration,
    pub(crate) auth: Option<Auth>,
    pub(crate) prefix: String,
    /// `?wait=N`: replicas a write must reach before its batch is answered.
    pub(crate) wait: Option<u8>,
    /// `?wait_ms=T`: how long a batch waits for them.
    pub(crate) wait_ms: Option<u64>,
    /// `?rewait_ms=T`: how long a batch waits again after `wait_ms` ran out.
    pub(crate) rewait_ms: Option<u64>,
    /// TLS settings: the scheme was `rediss` (`rediss://`, `rediss-cluster://`).
    pub(crate) tls: Option<TlsSettings>,
}

/// Whether `p` may prefix stored keys: no braces (Redis Cluster hashes the first
/// `{...}`, which must stay the key's own tag), no glob characters (the ACL
/// pattern is `P*`), nothing that ends or splits a URL option.
pub fn valid_prefix(p: &str) -> bool {
    p.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'%'))
}

/// The most replicas `?wait=N` may ask for.
pub const MAX_WAIT_REPLICAS: u8 = 5;

/// The longest `?wait_ms=` / `?rewait_ms=`, in milliseconds: below the
/// connection's 1 s read timeout.
pub const MAX_WAIT_MS: u64 = 900;

/// Parses a store URL: `SCHEME[USER@]HOSTS[/][?OPTIONS]`.
pub(crate) fn parse_url<'a>(url: &'a str, scheme: &str) -> Result<UrlParts<'a>, StoreError> {
    let shown = || redact_url(url);
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    // `rediss` is the TLS variant of each scheme, as redis-cli and the client
    // libraries spell it.
    let tls_scheme = scheme.replacen("redis", "rediss", 1);
    let (base, tls) = match base.strip_prefix(tls_scheme.as_str()) {
        Some(rest) => (rest, true),
        None => (base.strip_prefix(scheme).unwrap_or(base), false),
    };
    if base.contains("://") {
        return Err(StoreError::Refused(format!(
            "`{}`: expected a {scheme} or {tls_scheme} URL",
            shown()
        )));
    }
    let base = base.trim_end_matches('/');
    let (user, hosts) = match base.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, base),
    };
    if user.is_some_and(|u| u.contains(':')) {
        return Err(StoreError::Refused(format!(
            "`{}`: a password in the URL is refused (it would show in process lists and logs); \
             set {PASSWORD_ENV} or ?password_file=PATH",
            shown()
        )));
    }
    if user.is_some_and(|u| u.is_empty() || !u.bytes().all(|b| b.is_ascii_graphic())) {
        return Err(StoreError::Refused(format!(
            "`{}`: the user name must be printable and without spaces",
            shown()
        )));
    }
    let (mut poll, mut prefix, mut file) = (DEFAULT_POLL, String::new(), None);
    let (mut wait, mut wait_ms, mut rewait_ms) = (None, None, None);
    let mut tls_opts = TlsOptions::default();
    for opt in query.split('&').filter(|o| !o.is_empty()) {
        match opt.split_once('=') {
            Some((k @ ("ca_file" | "cert_file" | "key_file" | "server_name"), v)) => {
                if !tls {
                    return Err(StoreError::Refused(format!(
                        "`{}`: {k} is a TLS option: use {tls_scheme}",
                        shown()
                    )));
                }
                if v.is_empty() {
                    return Err(StoreError::Refused(format!("`{}`: {k} is empty", shown())));
                }
                let slot = match k {
                    "ca_file" => &mut tls_opts.ca_file,
                    "cert_file" => &mut tls_opts.cert_file,
                    "key_file" => &mut tls_opts.key_file,
                    _ => &mut tls_opts.server_name,
                };
                *slot = Some(v);
            }
            Some(("poll_us", v)) => {
                let us = v.parse::<u64>().ok().filter(|&us| us <= 1_000_000);
                let us = us.ok_or_else(|| {
                    StoreError::Refused(format!(
                        "`{}`: poll_us must be a number of microseconds up to 1000000, not `{v}`",
                        shown()
                    ))
                })?;
                poll = Duration::from_micros(us);
            }
            Some(("prefix", v)) => {
                if v.is_empty() || !valid_prefix(v) {
                    return Err(StoreError::Refused(format!(
                        "`{}`: prefix `{v}` may only hold letters, digits and `._-:%`",
                        shown()
                    )));
                }
                prefix = v.to_string();
            }
            Some(("password_file", v)) if !v.is_empty() => file = Some(v),
            Some(("wait", v)) => {
                let n = v.parse::<u8>().ok().filter(|&n| n <= MAX_WAIT_REPLICAS);
                wait = Some(n.ok_or_else(|| {
                    StoreError::Refused(format!(
                        "`{}`: wait must be a number of replicas from 0 to {MAX_WAIT_REPLICAS}, not `{v}`",
                        shown()
                    ))
                })?);
            }
            Some((k @ ("wait_ms" | "rewait_ms"), v)) => {
                // rewait_ms=0 is allowed: no second wait. Either stays under
                // the connection's 1 s read timeout, which a longer `WAIT`
                // would trip, failing the batch and dropping the connection.
                let min = u64::from(k == "wait_ms");
                let ms = v
                    .parse::<u64>()
                    .ok()
                    .filter(|&ms| (min..=MAX_WAIT_MS).contains(&ms));
                let ms = ms.ok_or_else(|| {
                    StoreError::Refused(format!(
                        "`{}`: {k} must be a number of milliseconds from {min} to {MAX_WAIT_MS}, not `{v}`",
                        shown()
                    ))
                })?;
                match k {
                    "wait_ms" => wait_ms = Some(ms),
                    _ => rewait_ms = Some(ms),
                }
            }
            _ => {
                return Err(StoreError::Refused(format!(
                    "`{}`: unknown option `{opt}` (known: poll_us=N, prefix=P, password_file=PATH, \
                     wait=N, wait_ms=T, rewait_ms=T, and with TLS ca_file=PATH, cert_file=PATH, key_file=PATH, \
                     server_name=NAME)",
                    shown()
                )))
            }
        }
    }
    let auth = match user {
        None if file.is_some() => {
            return Err(StoreError::Refused(format!(
                "`{}`: password_file without a user (redis://USER@HOST:PORT)",
                shown()
            )))
        }
        None => None,
        Some(user) => Some(Auth {
            user: user.to_string(),
            password: read_password(user, file)?,
        }),
    };
    let tls = match tls {
        true => Some(
            tls_opts
                .settings()
                .map_err(|e| StoreError::Refused(format!("`{}`: {e}", shown())))?,
        ),
        false => None,
    };
    Ok(UrlParts {
        hosts,
        poll,
        auth,
        prefix,
        wait,
        wait_ms,
        rewait_ms,
        tls,
    })
}

/// The TLS settings of `options` (`ca_file=PATH&server_name=N...`, as in a
/// `rediss://` URL's query).
pub fn tls_settings(options: &str) -> Result<TlsSettings, String> {
    let url = format!("rediss://127.0.0.1:1?{options}");
    parse_url(&url, "redis://")
        .map_err(|e| e.to_string())?
        .tls
        .ok_or_else(|| "no TLS settings".to_string())
}

/// The roots a `rediss://` URL trusts without `ca_file`: Debian's bundle of
/// public CAs (package `ca-certificates`), for a managed store with a public
/// certificate.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The TLS options of a `rediss://` URL as given.
#[derive(Default)]
struct TlsOptions<'a> {
    ca_file: Option<&'a str>,
    cert_file: Option<&'a str>,
    key_file: Option<&'a str>,
    server_name: Option<&'a str>,
}

impl TlsOptions<'_> {
    /// Reads the files and builds the client configuration: the roots of
    /// `ca_file` (the system's, [`SYSTEM_ROOTS`], without one), and the client
    /// certificate if both `cert_file` and `key_file` are given.
    fn settings(&self) -> Result<TlsSettings, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let certs = |path: &str, what: &str| -> Result<Vec<CertificateDer<'static>>, String> {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{what} {path}: {e}"))?;
            if certs.is_empty() {
                return Err(format!("{what} {path}: no PEM certificate in it"));
            }
            Ok(certs)
        };
        let ca = self.ca_file.unwrap_or(SYSTEM_ROOTS);
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(ca, "ca_file")? {
            roots
                .add(c)
                .map_err(|e| format!("ca_file {ca}: a certificate is not usable as a root: {e}"))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match (self.cert_file, self.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = certs(cert, "cert_file")?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("key_file {key}: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("cert_file {cert} with key_file: {e}"))?
            }
            _ => return Err("cert_file and key_file go together".into()),
        };
        let server_name = match self.server_name {
            None => None,
            Some(n) => Some(
                ServerName::try_from(n.to_string())
                    .map_err(|e| format!("server_name `{n}`: {e}"))?,
            ),
        };
        Ok(TlsSettings {
            config: std::sync::Arc::new(config),
            server_name,
        })
    }
}

/// The password of `user`: the first line of `file`, or else [`PASSWORD_ENV`].
fn read_password(user: &str, file: Option<&str>) -> Result<Secret, StoreError> {
    let pw = match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| {
                StoreError::Refused(format!(
                    "store user `{user}`: cannot read password file {path}: {e}"
                ))
            })?
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
        None => std::env::var(PASSWORD_ENV).unwrap_or_default(),
    };
    if pw.is_empty() {
        return Err(StoreError::Refused(format!(
            "store user `{user}` has no password: set {PASSWORD_ENV} or ?password_file=PATH"
        )));
    }
    Ok(Secret(pw))
}

/// Appends the stored form of a state key (see the crate documentation).
pub fn redis_key(out: &mut Vec<u8>, k: &Key) {
    let mut h: u32 = 0x811c_9dc5;
    for &b in k.as_bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    out.push(b'{');
    push_hex(out, h);
    out.push(b'}');
    out.extend_from_slice(k.as_bytes());
}

fn push_hex(out: &mut Vec<u8>, v: u32) {
    for i in (0..8).rev() {
        out.push(b"0123456789abcdef"[((v >> (i * 4)) & 0xf) as usize]);
    }
}

/// Appends the stored form of a state key under `prefix` (see [`Config::prefix`]).
pub fn prefixed_key(out: &mut Vec<u8>, prefix: &[u8], k: &Key) {
    out.extend_from_slice(prefix);
    redis_key(out, k);
}

/// Appends the timer set of `ns` under `prefix` (see [`Config::prefix`]).
pub fn prefixed_timer_set(out: &mut Vec<u8>, prefix: &[u8], ns: Namespace) {
    out.extend_from_slice(prefix);
    timer_set(out, ns);
}

/// The sorted set holding the timers of a namespace.
pub fn timer_set(out: &mut Vec<u8>, ns: Namespace) {
    out.extend_from_slice(b"{t");
    push_hex(out, ns.0);
    out.extend_from_slice(b"}:timers");
}

/// The stored key an operation is routed by (its hash tag decides the cluster slot).
pub fn routing_key(out: &mut Vec<u8>, op: &Op) {
    match op {
        Op::ArmTimer { key, .. } | Op::CancelTimer { key } => timer_set(out, key.namespace()),
        other => redis_key(out, other.key()),
    }
}

/// A single Redis/Valkey server.
pub struct RedisStore {
    node: Node,
    counters: StoreCounters,
    /// Operations of the started call (`start`), 0 if none.
    started: usize,
}

impl RedisStore {
    /// Connects (authenticating, and loading the function library unless it
    /// connects as a tenant's user). Fails if the server cannot be reached.
    pub fn connect(cfg: Config) -> Result<RedisStore, StoreError> {
        let mut node = Node::new(cfg.addr.clone(), cfg.timeout, cfg.poll);
        node.auth = cfg.auth.clone();
        node.prefix = cfg.prefix.clone();
        node.tls = cfg.tls.clone();
        node.ensure_conn()?;
        Ok(RedisStore {
            node,
            counters: StoreCounters::default(),
            started: 0,
        })
    }

    /// Connects to a URL [`Config::from_url`] accepts.
    pub fn open(url: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect(Config::from_url(url)?)
    }
}

impl RedisStore {
    /// Encodes every operation of `ops` into the node's pipeline buffer and
    /// counts them (one round trip).
    fn encode_all(&mut self, ops: &Ops) -> Result<(), StoreError> {
        self.node.ensure_conn()?;
        self.node.wbuf.clear();
        for i in 0..ops.len() {
            let op = ops.ops()[i];
            self.node.encode_op(ops, &op);
            count(&mut self.counters, &op);
        }
        self.counters.round_trips += 1;
        Ok(())
    }

    /// Applies the replies of `ops`, returning the first error after applying
    /// the rest.
    fn apply_all(&mut self, ops: &mut Ops, replies: &[resp::Reply]) -> Result<(), StoreError> {
        let mut first_err = None;
        for (i, r) in replies.iter().enumerate() {
            if let Err(e) = self.node.apply_reply(ops, i, r) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Counts an operation by kind.
pub(crate) fn count(c: &mut StoreCounters, op: &Op) {
    match op {
        Op::Get { .. } => c.reads += 1,
        Op::Put { .. } | Op::Append { .. } | Op::Delete { .. } => c.writes += 1,
        Op::ArmTimer { .. } | Op::CancelTimer { .. } => c.timers += 1,
        _ => c.atomics += 1,
    }
}

impl StateStore for RedisStore {
    fn execute(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.node.check_no_started()?;
        self.encode_all(ops)?;
        self.node.send()?;
        let replies = self.node.receive(ops.len())?;
        self.apply_all(ops, &replies)
    }

    /// One `write` of the pipeline; [`StateStore::finish`] reads the replies.
    /// Counted as a round trip.
    fn start(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        self.node.check_no_started()?;
        self.started = ops.len();
        if ops.is_empty() {
            return Ok(());
        }
        self.encode_all(ops)?;
        self.node.start(ops.len())
    }

    fn finish(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if std::mem::take(&mut self.started) == 0 {
            return Ok(());
        }
        let replies = self.node.finish()?;
        if replies.len() != ops.len() {
            return Err(StoreError::Protocol(format!(
                "finish: {} replies for {} operations (not the started buffer?)",
                replies.len(),
                ops.len()
            )));
        }
        self.apply_all(ops, &replies)
    }

    fn poll_unacked(&mut self) -> Result<(u64, u64), StoreError> {
        self.node.drain_ready()?;
        let sent = self.node.sent_total;
        Ok((sent, sent - self.node.outstanding() as u64))
    }

    fn take_expired(
        &mut self,
        ns: Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        self.counters.round_trips += 1;
        let before = out.len();
        self.node.take_expired(ns, now_ns, max, out)?;
        self.counters.timers += (out.len() - before) as u64;
        Ok(())
    }

    /// One `write` of the pipeline; the replies are read (and failures counted)
    /// by the next call that waits, or without waiting when already there.
    /// Counts the operations but no round trip.
    fn execute_unacked(&mut self, ops: &mut Ops) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.node.ensure_conn()?;
        self.node.wbuf.clear();
        // Runs of puts become one MSET, runs of deletes one DEL (the cache's
        // deferred writes are exactly that): less work for the server.
        let (mut i, mut commands) = (0, 0);
        while i < ops.len() {
            let op = ops.ops()[i];
            count(&mut self.counters, &op);
            let kind = std::mem::discriminant(&op);
            let mut j = i + 1;
            if matches!(op, Op::Put { .. } | Op::Delete { .. }) {
                while j < ops.len() && std::mem::discriminant(&ops.ops()[j]) == kind {
                    count(&mut self.counters, &ops.ops()[j]);
                    j += 1;
                }
            }
            if j - i > 1 {
                self.node.encode_multi(ops, i, j);
            } else {
                self.node.encode_op(ops, &op);
            }
            commands += 1;
            i = j;
        }
        self.node.send_unacked(commands)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.node.sync()
    }

    /// Counts failed commands: a failed `MSET` of several deferred writes counts
    /// once (callers only need to know that something may be missing).
    fn take_unacked_failures(&mut self) -> u64 {
        std::mem::take(&mut self.node.unacked_failures)
    }

    fn counters(&self) -> StoreCounters {
        self.counters
    }
    // One connection, one pipeline: the server applies it in order.
    fn orders_across_keys(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        describe(
            if self.node.tls.is_some() {
                "rediss://"
            } else {
                "redis://"
            },
            &self.node.addr,
            self.node.auth.as_ref(),
            &self.node.prefix,
        )
    }
}

pub(crate) fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Get { .. } => "GET",
        Op::Put { .. } => "SET",
        Op::Append { .. } => "APPEND",
        Op::Delete { .. } => "DEL",
        Op::CompareAndSet { .. } => "compare_and_set",
        Op::Incr { .. } => "INCRBY",
        Op::PoolInit { .. } => "pool_init",
        Op::PoolAlloc { .. } => "pool_alloc",
        Op::PoolTake { .. } => "pool_take",
        Op::PoolFree { .. } => "pool_free",
        Op::ArmTimer { .. } => "ZADD",
        Op::CancelTimer { .. } => "ZREM",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_options_are_checked_and_only_for_a_cluster() {
        let u = parse_url(
            "redis-cluster://h:1,h:2?wait=2&wait_ms=20",
            "redis-cluster://",
        )
        .unwrap();
        assert_eq!((u.wait, u.wait_ms, u.rewait_ms), (Some(2), Some(20), None));
        let u = parse_url("redis-cluster://h:1?rewait_ms=0", "redis-cluster://").unwrap();
        assert_eq!(u.rewait_ms, Some(0), "0 turns the second wait off");
        for (bad, says) in [
            ("redis-cluster://h:1?wait=9", "from 0 to 5, not `9`"),
            ("redis-cluster://h:1?wait=one", "not `one`"),
            (
                "redis-cluster://h:1?wait_ms=0",
                "wait_ms must be a number of milliseconds from 1 to 900, not `0`",
            ),
            ("redis-cluster://h:1?wait_ms=20000", "not `20000`"),
            // Past the connection's read timeout a WAIT would fail the batch.
            ("redis-cluster://h:1?wait_ms=1000", "not `1000`"),
            (
                "redis-cluster://h:1?rewait_ms=901",
                "rewait_ms must be a number of milliseconds from 0 to 900, not `901`",
            ),
        ] {
            let e = crate::ClusterStore::open(bad).err().expect(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        for bad in ["redis://h:1?wait=1", "redis://h:1?rewait_ms=5"] {
            let e = Config::from_url(bad).unwrap_err().to_string();
            assert!(e.contains("need a replicated store"), "{bad}: {e}");
        }
    }

    #[test]
    fn urls_carry_the_poll_budget_and_refuse_what_they_do_not_know() {
        let c = Config::from_url("redis://127.0.0.1:6379").unwrap();
        assert_eq!((c.addr.as_str(), c.poll), ("127.0.0.1:6379", DEFAULT_POLL));
        let c = Config::from_url("redis://127.0.0.1:6379/?poll_us=0").unwrap();
        assert_eq!(
            (c.addr.as_str(), c.poll),
            ("127.0.0.1:6379", Duration::ZERO)
        );
        let c = Config::from_url("10.0.0.1:7000?poll_us=200").unwrap();
        assert_eq!(c.poll, Duration::from_micros(200));
        for (bad, says) in [
            ("redis://h:1?poll_us=soon", "not `soon`"),
            ("redis://h:1?poll_us=5000000", "up to 1000000"),
            ("redis://h:1?timeout=3", "unknown option `timeout=3`"),
            ("redis://nohost", "expected redis://HOST:PORT"),
        ] {
            let e = Config::from_url(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
        let e = ClusterStore::open("redis-cluster://h:1?poll=1")
            .err()
            .unwrap();
        assert!(e.to_string().contains("unknown option `poll=1`"), "{e}");
    }

    #[test]
    fn urls_carry_the_user_and_prefix_and_never_the_password() {
        let dir = std::env::temp_dir().join(format!("sluice-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "hunter2-secret\n").unwrap();
        let url = format!(
            "redis://sluice-t-a@127.0.0.1:6379?prefix=t.a.&password_file={}",
            file.display()
        );
        let c = Config::from_url(&url).unwrap();
        let auth = c.auth.as_ref().unwrap();
        assert_eq!(
            (
                auth.user.as_str(),
                auth.password.expose(),
                c.prefix.as_str()
            ),
            ("sluice-t-a", "hunter2-secret", "t.a.")
        );
        assert_eq!(
            c.describe(),
            "redis://sluice-t-a@127.0.0.1:6379?prefix=t.a."
        );
        assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
        assert!(format!("{c:?}").contains("<redacted>"), "{c:?}");

        // A password in the URL is refused, and the refusal does not repeat it.
        let e = Config::from_url("redis://u:hunter2@h:1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("password in the URL") && !e.contains("hunter2"),
            "{e}"
        );
        let e = ClusterStore::open("redis-cluster://u:hunter2@h:1,h:2?x=1")
            .err()
            .unwrap()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
        assert_eq!(
            redact_url("redis://u:pw@h:1?prefix=a"),
            "redis://u:<redacted>@h:1?prefix=a"
        );
        assert_eq!(
            redact_url("redis://h:1?password_file=/a@b"),
            "redis://h:1?password_file=/a@b"
        );

        for (bad, says) in [
            ("redis://h:1?prefix=a{b}", "prefix `a{b}`"),
            ("redis://h:1?prefix=a*", "prefix `a*`"),
            ("redis://h:1?password_file=/x", "without a user"),
            (
                "redis://u@h:1?password_file=/nonexistent/pw",
                "cannot read password file",
            ),
        ] {
            let e = Config::from_url(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        std::fs::write(&file, "\n").unwrap();
        let e = Config::from_url(&format!("redis://u@h:1?password_file={}", file.display()));
        let e = e.unwrap_err().to_string();
        assert!(e.contains("store user `u` has no password"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_prefix_changes_no_cluster_slot() {
        let k = Key::new(Namespace(7), 1, b"flow");
        let (mut plain, mut prefixed) = (Vec::new(), Vec::new());
        redis_key(&mut plain, &k);
        prefixed_key(&mut prefixed, b"t.acme.", &k);
        assert!(prefixed.starts_with(b"t.acme.{"));
        assert_eq!(slot_of(&plain), slot_of(&prefixed));
        let (mut plain, mut prefixed) = (Vec::new(), Vec::new());
        timer_set(&mut plain, Namespace(7));
        prefixed_timer_set(&mut prefixed, b"t.acme.", Namespace(7));
        assert_eq!(slot_of(&plain), slot_of(&prefixed));
    }
}
