//! The running controller: the [`Reconciler`] behind one lock, driven by the
//! HTTP edge's requests ([`crate::http`]), a ticker thread (time-driven checks
//! every 20 ms) and the pusher ([`crate::pusher`]), which carry out the effects
//! it asks for. The only place the controller reads the clock.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::pusher::{self, PushQueue};
use crate::reconcile::{Effects, Reconciler, StartError};
use crate::store::{SqliteStore, StoreError};

/// How often the ticker runs the reconciler's time-driven checks.
const TICK: Duration = Duration::from_millis(20);
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
    #[error("cannot draw a fabric secret from the system's random number generator")]
    Random,
    /// The fabric keys could not be put in the hosts' configurations.
    #[error("cannot turn fabric authentication on or off: {0}")]
    FabricAuth(String),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
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
    pub state_url: String,
    /// Seal every Geneve datagram between hosts (AES-256-GCM, keys per host
    /// pair derived from a fabric secret kept in the database).
    pub fabric_auth: bool,
}

/// A running controller; [`ServerHandle::shutdown`] (or dropping it) stops it.
pub struct ServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
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
    pub(crate) queue: Mutex<PushQueue>,
    pub(crate) push_cv: Condvar,
    /// Push and poll threads, joined at shutdown.
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    stop: AtomicBool,
}

impl Shared {
    /// Whether the server is stopping.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Starts the controller: loads the database, binds, and serves in background
/// threads.
pub fn serve(opts: ServerOptions) -> Result<ServerHandle, ControllerError> {
    let store = SqliteStore::open(&opts.db)?;
    let mut reconciler =
        Reconciler::start(Box::new(store), &opts.state_url, Instant::now(), unix_ms())?;
    let mut fresh = [0u8; 32];
    if opts.fabric_auth {
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh)
            .map_err(|_| ControllerError::Random)?;
    }
    reconciler
        .set_fabric_auth(opts.fabric_auth, fresh, Instant::now())
        .map_err(|e| ControllerError::FabricAuth(e.to_string()))?;
    let server = tiny_http::Server::http(opts.listen).map_err(|e| ControllerError::Listen {
        addr: opts.listen,
        msg: e.to_string(),
    })?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| ControllerError::Listen {
            addr: opts.listen,
            msg: "not an IP listener".into(),
        })?;
    let server = Arc::new(server);
    let shared = Arc::new(Shared {
        reconciler: Mutex::new(reconciler),
        queue: Mutex::new(PushQueue::default()),
        push_cv: Condvar::new(),
        threads: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });
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
    let sh = shared.clone();
    threads.push(spawn("ctl-ticker".into(), Box::new(move || ticker(&sh)))?);
    let sh = shared.clone();
    threads.push(spawn(
        "ctl-pusher".into(),
        Box::new(move || pusher::dispatcher(&sh)),
    )?);
    Ok(ServerHandle {
        addr,
        shared,
        threads,
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
