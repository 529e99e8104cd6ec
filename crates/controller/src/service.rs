//! The running controller: the [`Reconciler`] behind one lock, driven by the
//! HTTP edge's requests (`crate::http`), a ticker thread (time-driven checks
//! every 20 ms) and the pusher (`crate::pusher`), which carry out the effects
//! it asks for. The only place the controller reads the clock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::pusher::{self, PushQueue};
use crate::reconcile::{Effects, Reconciler, StartError};
use crate::resources::auth::Role;
use crate::store::tokens::{new_secret, TokenError};
use crate::store::{SqliteStore, StoreError, TokenStore};
use crate::store_acl::{Passwords, StoreAcl};
use crate::store_health::StoreHealth;
use crate::store_probe::{StoreProbe, PROBE_EVERY};
use std::collections::BTreeSet;

/// How often the ticker runs the reconciler's time-driven checks.
const TICK: Duration = Duration::from_millis(20);
/// How often the controller looks whether its certificate files changed.
const CERT_RELOAD_EVERY: Duration = Duration::from_secs(2);
/// How often the store's tenant users are checked against the tenants (talking
/// to the store only when they changed, or every [`crate::store_acl::RESYNC`]).
const STORE_USERS_EVERY: Duration = Duration::from_millis(100);
/// Request-serving threads.
const WORKERS: usize = 8;

/// The controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The database could not be opened or loaded.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {msg}")]
    Listen {
        /// Requested address.
        addr: SocketAddr,
        /// Why.
        msg: String,
    },
    /// The stored state no longer compiles.
    #[error("stored state: {0}")]
    Place(#[from] crate::desired::PlaceError),
    /// The system's random number generator failed (no fabric secret).
    #[error("cannot draw a secret (fabric secret, store marker) from the system's random number generator")]
    Random,
    /// The fabric keys could not be put in the hosts' configurations.
    #[error("cannot turn fabric authentication on or off: {0}")]
    FabricAuth(String),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    /// The first operator token could not be created or written.
    #[error("admin token {path}: {msg}")]
    AdminToken {
        /// The admin token file.
        path: PathBuf,
        /// Why.
        msg: String,
    },
    /// Options that do not go together.
    #[error("configuration: {0}")]
    Config(String),
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The state URL names a store admin whose credentials cannot be read.
    #[error("state store admin: {0}")]
    StoreAdmin(sluice_state::StoreError),
    /// etcd could not be used (replicated controllers).
    #[error("etcd: {0}")]
    Etcd(String),
    /// Asked to stop while waiting to lead.
    #[error("stopped before leading")]
    NotLeading,
}

impl From<StartError> for ControllerError {
    fn from(e: StartError) -> ControllerError {
        match e {
            StartError::Store(e) => ControllerError::Store(e),
            StartError::Place(e) => ControllerError::Place(e),
        }
    }
}

/// How to run the controller.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to listen on (port 0: any free port; see [`ServerHandle::addr`]).
    pub listen: SocketAddr,
    /// SQLite database file, or `:memory:`.
    pub db: PathBuf,
    /// State backend URL NF instances are given (`redis://127.0.0.1:6379`, `local`).
    /// With a user (`redis://admin@HOST:PORT?password_file=F`, or the password
    /// in `SLUICE_STORE_PASSWORD`) it is the store's admin account instead, and
    /// each tenant's instances get a user of their own ([`crate::store_acl`]).
    pub state_url: String,
    /// Where the first start (no token yet) writes the secret of the operator
    /// token `admin` (mode 0600); `None`: [`default_admin_token_file`].
    pub admin_token_file: Option<PathBuf>,
    /// Seal every Geneve datagram between hosts (AES-256-GCM, keys per host
    /// pair derived from a fabric secret kept in the database).
    pub fabric_auth: bool,
    /// Serve the API over TLS (`None`: plain HTTP, as tests do; `sluice
    /// controller` and the testbed turn it on).
    pub tls: Option<crate::tls::TlsOptions>,
    /// How new NF instances choose among the hosts with room.
    pub placement: crate::placement::Policy,
    /// How middleboxes split their flows among their instances.
    pub distribution: crate::distribution::Settings,
    /// Distinct hosts whose accusations contain a host (Seawall §4's `f`).
    pub containment_threshold: usize,
    /// Refuse agents whose API is plain HTTP (needs `tls`: an agent gets its
    /// API certificate from the hosts' CA with its registration). `sluice
    /// controller` turns it on with TLS; tests whose stand-in agents speak
    /// plain HTTP leave it off.
    pub require_agent_tls: bool,
    /// Replicated: the desired state, tokens and audit log in etcd, shared
    /// with other controllers, one of which leads (`crate::leader`). [`serve`]
    /// then returns only once this controller leads, and stops serving when
    /// it loses the lead ([`ServerHandle::lost_leadership`]). None: a single
    /// controller on its SQLite `db`.
    pub etcd: Option<crate::leader::EtcdOptions>,
}

/// Where the admin token goes unless told: next to the database
/// (`sluice-controller.db` → `sluice-controller.admin-token`), or
/// `sluice-controller.admin-token` in the working directory for `:memory:`.
pub fn default_admin_token_file(db: &Path) -> PathBuf {
    if db.as_os_str() == ":memory:" {
        PathBuf::from("sluice-controller.admin-token")
    } else {
        db.with_extension("admin-token")
    }
}

/// Writes `secret` to `path`, readable by its owner only.
fn write_secret(path: &Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // `mode` only applies to a new file: narrow an existing one too.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(format!("{secret}\n").as_bytes())?;
    f.sync_all()
}

/// At a first start (no token at all), creates the operator token `admin`,
/// its secret written to `path` before the token exists (so a failed write
/// cannot leave an operator token nobody knows).
fn bootstrap(tokens: &mut TokenStore, path: &Path) -> Result<bool, ControllerError> {
    if !tokens.is_empty() {
        return Ok(false);
    }
    let fail = |msg: String| ControllerError::AdminToken {
        path: path.to_path_buf(),
        msg,
    };
    let secret = new_secret().map_err(|e| fail(e.to_string()))?;
    write_secret(path, &secret).map_err(|e| fail(e.to_string()))?;
    tokens
        .create_with("admin", Role::Operator, &secret, unix_ms())
        .map_err(|e: TokenError| fail(e.to_string()))?;
    Ok(true)
}

/// A running controller; [`ServerHandle::shutdown`] (or dropping it) stops it.
pub struct ServerHandle {
    addr: SocketAddr,
    /// With TLS: the generated CA's file, if the controller made its own.
    tls: Option<Option<PathBuf>>,
    /// With TLS: the HTTP workers' private socket, removed after them (fields
    /// drop after `Drop::drop` joined the threads).
    _backend: Option<sluice_tls::terminator::Backend>,
    admin_token: Option<PathBuf>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// What a replicated controller's start in etcd gives [`serve`].
struct Replicated {
    /// The store's, tokens' and campaign's client.
    client: Arc<sluice_etcd::Client>,
    /// The lease renewals' client, with a short timeout.
    renewals: sluice_etcd::Client,
    term: crate::leader::Term,
    /// The thread keeping this controller's member record, and its stop.
    member: (Arc<AtomicBool>, JoinHandle<()>),
}

impl ServerHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `https://ADDR` with TLS, else `http://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA certificate clients should trust, when the controller serves TLS
    /// with a certificate it made itself.
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().and_then(|c| c.as_deref())
    }

    /// The file the admin token was written to, if this start created it (the
    /// database had no token).
    pub fn bootstrapped(&self) -> Option<&Path> {
        self.admin_token.as_deref()
    }

    /// Whether this (replicated) controller stopped because it lost the
    /// lead: it serves nothing more, and should campaign again.
    pub fn lost_leadership(&self) -> bool {
        self.shared.lost.load(Ordering::SeqCst)
    }

    /// Stops serving and pushing, and waits for its threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.push_cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let rest: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.shared.threads));
        for t in rest {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the controller's threads share.
pub(crate) struct Shared {
    pub(crate) reconciler: Mutex<Reconciler>,
    /// API tokens (a lock of their own: a lookup never waits for the reconciler).
    pub(crate) tokens: Mutex<TokenStore>,
    /// Each host's agent API token, from its last accepted heartbeat (kept in
    /// memory only: agents draw a new one at each start and heartbeat every
    /// 50 ms, so a restarted controller learns them again at once).
    pub(crate) agent_tokens: Mutex<BTreeMap<u32, String>>,
    /// What each host's agent last acknowledged: the base of delta pushes.
    pub(crate) acked: pusher::Acked,
    pub(crate) queue: Mutex<PushQueue>,
    pub(crate) push_cv: Condvar,
    /// Push and poll threads, joined at shutdown.
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    stop: AtomicBool,
    /// The store's tenant users, when the state URL names an admin.
    store_acl: Option<Mutex<StoreAcl>>,
    /// Tenants' store passwords, added to configurations as they are pushed.
    pub(crate) passwords: Option<Passwords>,
    /// The probes of the state store's nodes (a `redis` state URL).
    store_probe: Option<Mutex<StoreProbe>>,
    /// The hosts' CA (with TLS): signs agents' API certificates, and is the
    /// only CA trusted when calling an agent.
    pub(crate) hosts_ca: Option<sluice_tls::hosts::HostCa>,
    /// Refuse agents whose API is plain HTTP.
    pub(crate) require_agent_tls: bool,
    /// With TLS: what makes the terminator's peer header unforgeable.
    pub(crate) peer_tag: Option<Arc<sluice_tls::peer::PeerTag>>,
    /// The client certificate the controller presents to agents.
    pub(crate) controller_cert: sluice_tls::hosts::ControllerCert,
    /// Clients of the agents, reused between calls.
    pub(crate) agent_clients: crate::agent_client::Clients,
    /// Event streams open (`GET /v1/alerts?follow=true`), each on a thread
    /// of its own.
    pub(crate) streams: std::sync::atomic::AtomicUsize,
    /// Set (with `stop`) when a replicated controller lost the lead.
    lost: AtomicBool,
}

impl Shared {
    /// Whether the server is stopping.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Brings the store's tenant users in line with the applied tenants, if
    /// that is due (see [`StoreAcl::sync`]); a failure is logged and retried.
    pub(crate) fn sync_store_users(&self) {
        let Some(acl) = &self.store_acl else {
            return;
        };
        let tenants: BTreeSet<String> = lock(&self.reconciler)
            .desired()
            .tenants
            .keys()
            .cloned()
            .collect();
        let mut acl = lock(acl);
        let now = Instant::now();
        if acl.due(&tenants, now) {
            if let Err(e) = acl.sync(&tenants, now) {
                tracing::error!(error = %e, "cannot sync the state store's users");
            }
        }
    }

    /// Probes every state store node and hands the answers to the
    /// reconciler (outside its lock: a dead node may take the connection
    /// timeout to answer), then asks the replicas it names to take over from
    /// dead primaries and writes the markers it asks for. A node that came
    /// back gets the tenants' users at once (the users' thread syncs within
    /// its next tick).
    pub(crate) fn probe_store(&self) {
        let Some(probe) = &self.store_probe else {
            return;
        };
        let mut probe = lock(probe);
        let (probes, took) = probe.probe();
        let act = lock(&self.reconciler).store_probed(&probes, took, Instant::now());
        if act.returned {
            if let Some(acl) = &self.store_acl {
                lock(acl).node_returned();
            }
        }
        for t in act.takeovers {
            match probe.take_over(&t) {
                Ok(()) => tracing::warn!(
                    primary = %t.primary,
                    replica = %t.replica,
                    "a state store primary refuses connections: its replica was asked to take over"
                ),
                Err(e) => tracing::error!(
                    primary = %t.primary,
                    replica = %t.replica,
                    error = %e,
                    "cannot ask the replica of a dead state store primary to take over; the cluster will fail over by itself after its node timeout"
                ),
            }
        }
        for w in act.writes {
            match probe.write(&w) {
                Ok(()) => lock(&self.reconciler).store_marked(&w),
                Err(e) => {
                    tracing::warn!(node = %w.node, error = %e, "cannot write the state store marker")
                }
            }
        }
    }

    /// Carries out what the reconciler asked for: schedules pushes, starts polls.
    pub(crate) fn perform(self: &Arc<Self>, effects: Effects) {
        if effects.is_empty() || self.stopping() {
            return;
        }
        if !effects.pushes.is_empty() {
            let mut q = lock(&self.queue);
            for (h, at) in effects.pushes {
                q.schedule(h, at);
            }
            drop(q);
            self.push_cv.notify_all();
        }
        for (h, api) in effects.polls {
            pusher::poll(self, h, api);
        }
    }
}

/// Locks a mutex, carrying on if a panicking thread poisoned it (the state is
/// only ever swapped whole, so it is consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Now, Unix milliseconds.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Raises the process's open-files limit to its hard limit and returns the
/// limit in force: every agent keeps a keep-alive connection to the controller
/// (2 descriptors, 4 over TLS, and a thread), and tiny_http stops accepting
/// for good once it runs out (its accept thread panics), so the usual 1,024 of
/// a shell would end a controller at a few hundred agents (measured:
/// docs/BENCHMARKS.md, "Issue 25: liveness").
fn raise_open_files() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        if l.rlim_cur < l.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: l.rlim_max,
                rlim_max: l.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                l = raised;
            }
        }
    }
    l.rlim_cur
}

/// Binds the plain-HTTP listener with `TCP_NODELAY`, which the connections it
/// accepts inherit (Linux copies it). tiny_http writes an answer through a
/// 1 KiB buffer, so an answer longer than that leaves in several writes; with
/// Nagle's algorithm the last one waited for the client's delayed ACK (40 ms
/// on Linux): every tenant apply, whose answer carries its change plan, took
/// at least that long (docs/BENCHMARKS.md, "Issue 25: work proportional").
fn nodelay_listener(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind(addr)?;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads `on` (an int, its size given) on a socket
    // this function owns.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(listener)
}

/// Starts the controller: loads the database, binds, and serves in background
/// threads.
pub fn serve(opts: ServerOptions) -> Result<ServerHandle, ControllerError> {
    let store_acl =
        StoreAcl::from_state_url(&opts.state_url).map_err(ControllerError::StoreAdmin)?;
    let store_probe =
        StoreProbe::from_state_url(&opts.state_url).map_err(ControllerError::StoreAdmin)?;
    let replicated = match &opts.etcd {
        Some(e) => Some(lead(e, &opts)?),
        None => None,
    };
    let (store, mut tokens): (Box<dyn crate::store::Store>, TokenStore) = match &replicated {
        Some(r) => {
            let e = opts.etcd.as_ref().expect("replicated has etcd options");
            let guard = r.term.guard(&crate::leader::leader_key(&e.root));
            crate::leader::share_hosts_ca(&r.client, &e.root, &guard, &opts.db)
                .map_err(ControllerError::Etcd)?;
            (
                Box::new(crate::store::EtcdStore::new(
                    r.client.clone(),
                    &e.root,
                    Some(guard.clone()),
                )),
                TokenStore::open_etcd(r.client.clone(), &e.root, Some(guard))?,
            )
        }
        None => (
            Box::new(SqliteStore::open(&opts.db)?),
            TokenStore::open(&opts.db)?,
        ),
    };
    let token_file = opts
        .admin_token_file
        .clone()
        .unwrap_or_else(|| default_admin_token_file(&opts.db));
    let admin_token = bootstrap(&mut tokens, &token_file)?.then_some(token_file);
    let mut reconciler = Reconciler::start(store, &opts.state_url, Instant::now(), unix_ms())?;
    let mut fresh = [0u8; 32];
    if opts.fabric_auth {
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh)
            .map_err(|_| ControllerError::Random)?;
    }
    if let Some(p) = &store_probe {
        let mut epoch = [0u8; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut epoch)
            .map_err(|_| ControllerError::Random)?;
        let epoch: String = epoch.iter().map(|b| format!("{b:02x}")).collect();
        reconciler.set_store_health(StoreHealth::new(&p.nodes(), p.cluster(), epoch));
    }
    if let (Some(r), Some(e)) = (&replicated, &opts.etcd) {
        reconciler.set_leader(
            crate::model::LeaderInfo {
                name: e.name.clone(),
                url: e.advertise.clone(),
                since_ms: unix_ms(),
                term: r.term.revision,
                lease_s: e.lease_ttl.as_secs().max(1),
            },
            Instant::now(),
        );
    }
    reconciler.desired.policy = opts.placement;
    reconciler.desired.distribution = opts.distribution.policy;
    reconciler.set_uplinks(opts.distribution.uplinks.clone());
    reconciler.set_uplink_target(opts.distribution.target);
    reconciler.set_distribution_classes(opts.distribution.classes);
    reconciler.set_containment_threshold(opts.containment_threshold);
    reconciler
        .set_fabric_auth(opts.fabric_auth, fresh, Instant::now())
        .map_err(|e| ControllerError::FabricAuth(e.to_string()))?;
    let listen_err = |e: &dyn std::fmt::Display| ControllerError::Listen {
        addr: opts.listen,
        msg: e.to_string(),
    };
    let hosts_ca = match &opts.tls {
        Some(_) => Some(crate::tls::hosts_ca(&opts.db)?),
        None if opts.require_agent_tls => {
            return Err(ControllerError::Config(
                "require_agent_tls needs tls: agents get their API certificates over the controller's TLS".into(),
            ))
        }
        None => None,
    };
    let open_files = raise_open_files();
    tracing::info!(
        open_files,
        connections = sluice_tls::terminator::connection_cap(open_files),
        "open-files limit: every agent keeps a connection open (2-4 descriptors)"
    );
    // With TLS, the public socket is the terminator's and the HTTP workers
    // serve a private Unix socket behind it.
    let (server, addr, front) = match &opts.tls {
        None => {
            let listener = nodelay_listener(opts.listen).map_err(|e| listen_err(&e))?;
            let server =
                tiny_http::Server::from_listener(listener, None).map_err(|e| listen_err(&e))?;
            let addr = server
                .server_addr()
                .to_ip()
                .ok_or_else(|| listen_err(&"not an IP listener"))?;
            (server, addr, None)
        }
        Some(t) => {
            let hosts = hosts_ca
                .as_ref()
                .map(|c| c.pem().to_string())
                .unwrap_or_default();
            let prepared = crate::tls::prepare(&opts.db, opts.listen.ip(), t, &hosts)?;
            let listener = crate::tls::bind(opts.listen).map_err(|e| listen_err(&e))?;
            let addr = listener.local_addr().map_err(|e| listen_err(&e))?;
            let (back, back_listener) = sluice_tls::terminator::Backend::bind("sluice-controller")
                .map_err(|e| listen_err(&e))?;
            let server = tiny_http::Server::from_listener(back_listener, None)
                .map_err(|e| listen_err(&e))?;
            (server, addr, Some((listener, prepared, back)))
        }
    };
    let server = Arc::new(server);
    let peer_tag = match &front {
        Some(_) => Some(Arc::new(
            sluice_tls::peer::PeerTag::new().map_err(|e| listen_err(&e))?,
        )),
        None => None,
    };
    let shared = Arc::new(Shared {
        reconciler: Mutex::new(reconciler),
        tokens: Mutex::new(tokens),
        agent_tokens: Mutex::new(BTreeMap::new()),
        acked: Default::default(),
        queue: Mutex::new(PushQueue::default()),
        push_cv: Condvar::new(),
        threads: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        passwords: store_acl.as_ref().map(StoreAcl::passwords),
        store_acl: store_acl.map(Mutex::new),
        store_probe: store_probe.map(Mutex::new),
        peer_tag,
        hosts_ca,
        require_agent_tls: opts.require_agent_tls,
        controller_cert: Default::default(),
        agent_clients: Default::default(),
        streams: Default::default(),
        lost: AtomicBool::new(false),
    });
    // Before anything is pushed: instances must find their users there.
    shared.sync_store_users();
    let mut threads = Vec::new();
    let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(ControllerError::Thread)
    };
    for i in 0..WORKERS {
        let (s, sh) = (server.clone(), shared.clone());
        threads.push(spawn(
            format!("ctl-http-{i}"),
            Box::new(move || crate::http::worker(&s, &sh)),
        )?);
    }
    let (ca_file, backend) = match front {
        Some((listener, prepared, back)) => {
            let (sh, path, tag) = (shared.clone(), back.path.clone(), shared.peer_tag.clone());
            threads.push(spawn(
                "ctl-tls-accept".into(),
                Box::new(move || {
                    sluice_tls::terminator::acceptor(
                        listener,
                        prepared.config,
                        path,
                        crate::tls::PLAIN_HTTP_ANSWER,
                        tag,
                        sh,
                    )
                }),
            )?);
            let (sh, reload) = (shared.clone(), prepared.reload);
            threads.push(spawn(
                "ctl-tls-reload".into(),
                Box::new(move || {
                    let mut last = Instant::now();
                    while !sh.stopping() {
                        // Short sleeps: a stopping controller does not wait.
                        std::thread::sleep(Duration::from_millis(100));
                        if last.elapsed() < CERT_RELOAD_EVERY {
                            continue;
                        }
                        last = Instant::now();
                        match reload.check() {
                            Ok(true) => tracing::info!("controller certificate reloaded from its files"),
                            Ok(false) => {}
                            Err(e) => tracing::error!(
                                error = %e,
                                "the controller's new certificate files do not load; still serving the previous certificate"
                            ),
                        }
                    }
                }),
            )?);
            (Some(prepared.ca_file), Some(back))
        }
        None => (None, None),
    };
    let sh = shared.clone();
    threads.push(spawn("ctl-ticker".into(), Box::new(move || ticker(&sh)))?);
    // Each on a thread of its own: a slow or absent store must not delay the
    // ticker's health checks.
    let every = |name: &str, period: Duration, f: fn(&Shared)| {
        let sh = shared.clone();
        spawn(
            name.into(),
            Box::new(move || {
                while !sh.stopping() {
                    std::thread::sleep(period);
                    f(&sh);
                }
            }),
        )
    };
    if shared.store_acl.is_some() {
        threads.push(every(
            "ctl-store-users",
            STORE_USERS_EVERY,
            Shared::sync_store_users,
        )?);
    }
    if shared.store_probe.is_some() {
        // Once before serving, so `/healthz` knows from its first answer.
        shared.probe_store();
        threads.push(every("ctl-store-probe", PROBE_EVERY, Shared::probe_store)?);
    }
    let sh = shared.clone();
    threads.push(spawn(
        "ctl-pusher".into(),
        Box::new(move || pusher::dispatcher(&sh)),
    )?);
    if let Some(r) = replicated {
        // The members' list, read again every second for the status and
        // metrics; the member record goes when the server stops.
        let (sh, client) = (shared.clone(), r.client.clone());
        let root = opts
            .etcd
            .as_ref()
            .map(|e| e.root.clone())
            .unwrap_or_default();
        let me = opts
            .etcd
            .as_ref()
            .map(|e| e.name.clone())
            .unwrap_or_default();
        let (member_stop, member) = r.member;
        threads.push(spawn(
            "ctl-members".into(),
            Box::new(move || {
                let prefix = crate::leader::members_prefix(&root);
                while !sh.stopping() {
                    match client.get_prefix(&prefix) {
                        Ok(kvs) => lock(&sh.reconciler)
                            .set_controllers(crate::leader::members(&kvs, &me)),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot read the controllers' member records")
                        }
                    }
                    for _ in 0..10 {
                        if sh.stopping() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                member_stop.store(true, Ordering::SeqCst);
                let _ = member.join();
            }),
        )?);
        let sh = shared.clone();
        threads.push(spawn(
            "ctl-leader".into(),
            Box::new(move || {
                if crate::leader::keep(&r.renewals, r.term, &sh.stop) {
                    // Nothing more is served or pushed: another controller
                    // leads (or will, once the lease has run out in etcd).
                    sh.lost.store(true, Ordering::SeqCst);
                    sh.stop.store(true, Ordering::SeqCst);
                    sh.push_cv.notify_all();
                }
            }),
        )?);
    }
    Ok(ServerHandle {
        addr,
        tls: ca_file,
        _backend: backend,
        admin_token,
        shared,
        threads,
    })
}

/// Waits until this controller leads the replicated deployment `e` (see
/// `crate::leader`).
fn lead(
    e: &crate::leader::EtcdOptions,
    opts: &ServerOptions,
) -> Result<Replicated, ControllerError> {
    if opts.db.as_os_str() == ":memory:" {
        return Err(ControllerError::Config(
            "a replicated controller needs a `db` path (its local files: the hosts' CA, certificates)".into(),
        ));
    }
    if matches!(&opts.tls, Some(t) if t.cert.is_none()) {
        return Err(ControllerError::Config(
            "replicated controllers serve one certificate: give tls_cert and tls_key (names covering every controller's address), so clients trust every controller alike".into(),
        ));
    }
    let client = sluice_etcd::Client::new(&e.endpoints, e.tls.as_ref(), Duration::from_secs(5))
        .map_err(|err| ControllerError::Etcd(err.to_string()))?;
    // A member that hangs (no etcd leader) must not hold a renewal for
    // long: the renewals' client moves on to the next member after a sixth
    // of the lease (at most 2 s).
    let timeout = (e.lease_ttl / 6).clamp(Duration::from_millis(200), Duration::from_secs(2));
    let renewals = sluice_etcd::Client::new(&e.endpoints, e.tls.as_ref(), timeout)
        .map_err(|err| ControllerError::Etcd(err.to_string()))?;
    // Waiting or leading, this controller is on the members' list.
    let member_client =
        sluice_etcd::Client::new(&e.endpoints, e.tls.as_ref(), Duration::from_secs(2))
            .map_err(|err| ControllerError::Etcd(err.to_string()))?;
    let member_stop = Arc::new(AtomicBool::new(false));
    let member = crate::leader::announce(member_client, e, unix_ms(), member_stop.clone())
        .map_err(ControllerError::Thread)?;
    let won = crate::leader::campaign(&client, e, &e.stop);
    let term = match won {
        Ok(Some(term)) => term,
        other => {
            member_stop.store(true, Ordering::SeqCst);
            let _ = member.join();
            return Err(match other {
                Err(err) => ControllerError::Etcd(err.to_string()),
                _ => ControllerError::NotLeading,
            });
        }
    };
    tracing::info!(name = %e.name, url = %e.advertise, lease = term.lease, "leading");
    Ok(Replicated {
        client: Arc::new(client),
        renewals,
        term,
        member: (member_stop, member),
    })
}

/// Runs the reconciler's time-driven checks until the server stops.
fn ticker(shared: &Arc<Shared>) {
    while !shared.stopping() {
        std::thread::sleep(TICK);
        let effects = {
            let mut r = lock(&shared.reconciler);
            r.tick(Instant::now());
            r.take_effects()
        };
        shared.perform(effects);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    /// Whether `TCP_NODELAY` is set on `fd`.
    fn nodelay(fd: std::os::fd::RawFd) -> bool {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "getsockopt: {}", std::io::Error::last_os_error());
        v != 0
    }

    #[test]
    fn connections_the_plain_http_listener_accepts_send_without_nagle() {
        let l = super::nodelay_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let _client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        assert!(nodelay(accepted.as_raw_fd()));
        // What it is without: the default the listener changes.
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(plain.local_addr().unwrap()).unwrap();
        let (a, _) = plain.accept().unwrap();
        assert!(!nodelay(a.as_raw_fd()));
    }
}
