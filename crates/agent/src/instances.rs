//! NF instances: one process each, in its own network namespace joined to the
//! host namespace by a veth pair carrying the instance link's /30.
//!
//! For instance port `P` with prefix `X`: namespace `XiP`, host-side interface
//! `XpP` (agent address of `instance_link(P)`), `eth0` inside (instance
//! address), the chain written to `{run_dir}/XiP.yaml`, the process
//! `{exe} instance --name N --netns XiP --listen INST:6081 --agent AGENT:6081
//! --chain FILE --state URL` with its output in `{run_dir}/{name}.log`.
//!
//! The [`Supervisor`] thread applies each new instance list (starting new ones,
//! stopping removed or changed ones), restarts instances that exit, and removes
//! everything when stopped.
//!
//! Instances outlive a crashed agent: next to each process the agent keeps a
//! [`Record`] (`{run_dir}/XiP.pid`: pid, start time, namespace, configuration
//! fingerprint), and a restarted agent that is asked to run the same instance
//! adopts the process it finds there instead of starting another
//! ([`decide`]): no gap of an instance start, no failover. An adopted process
//! is not the agent's child; it is watched through a pidfd (readable once it
//! has exited, zombie or not) and signalled through it, so a recycled pid is
//! never signalled.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_netns::{NetnsError, Rtnl};
use sluice_proto::{
    instance_link, InstanceConfig, InstanceStatus, GENEVE_PORT, INSTANCE_LINK_PREFIX,
};

/// Why an instance could not be started.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The port has no instance link.
    #[error("instance {name}: port {port} has no instance link")]
    NoLink {
        /// Instance name.
        name: String,
        /// Port.
        port: u16,
    },
    /// A namespace or link command failed.
    #[error("instance {name}: {err}")]
    Net {
        /// Instance name.
        name: String,
        /// The failure.
        err: NetnsError,
    },
    /// Writing the chain file or opening the log failed.
    #[error("instance {name}: {what}: {err}")]
    File {
        /// Instance name.
        name: String,
        /// What was attempted.
        what: String,
        /// The error.
        err: std::io::Error,
    },
    /// The process could not be spawned.
    #[error("instance {name}: cannot start {exe}: {err}")]
    Spawn {
        /// Instance name.
        name: String,
        /// Executable.
        exe: String,
        /// The error.
        err: std::io::Error,
    },
}

/// Where and how instances are made.
#[derive(Debug, Clone)]
pub struct InstanceEnv {
    /// The host namespace (host side of the veth pairs goes there; `None`: the
    /// agent's own, as on a real host).
    pub host_netns: Option<String>,
    /// Name prefix of namespaces and interfaces (at most 9 bytes).
    pub prefix: String,
    /// Chain files and logs.
    pub run_dir: PathBuf,
    /// The `sluiced` executable (`instance` subcommand).
    pub exe: PathBuf,
}

impl InstanceEnv {
    /// The instance namespace of port `port`.
    pub fn netns(&self, port: u16) -> String {
        format!("{}i{port}", self.prefix)
    }

    /// The host-side interface of port `port`.
    pub fn iface(&self, port: u16) -> String {
        format!("{}p{port}", self.prefix)
    }
}

/// `name` made safe as a file name (`acme/fw/0` -> `acme_fw_0`).
pub fn sanitise(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// An instance process: a child of this agent, or one a previous agent
/// started and this one adopted.
enum Proc {
    Child(Child),
    Adopted { pid: u32, fd: Pidfd },
}

impl Proc {
    fn id(&self) -> u32 {
        match self {
            Proc::Child(c) => c.id(),
            Proc::Adopted { pid, .. } => *pid,
        }
    }

    /// How the process ended, if it has.
    fn exited(&mut self) -> Option<String> {
        match self {
            Proc::Child(c) => match c.try_wait() {
                Ok(Some(st)) => Some(st.to_string()),
                _ => None,
            },
            Proc::Adopted { fd, .. } => fd.exited().then(|| "adopted process ended".into()),
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    fn stop(&mut self, grace: Duration) {
        match self {
            Proc::Child(c) => stop_child(c, grace),
            Proc::Adopted { fd, .. } => stop_pidfd(fd, grace),
        }
    }
}

struct Running {
    cfg: InstanceConfig,
    proc: Option<Proc>,
    /// When the process was last started (adopted: when it was found), to
    /// tell a death after a healthy run from a crash loop.
    started_at: Instant,
    /// When to start it again, once it has exited (or could not start).
    restart_at: Option<Instant>,
    /// The restart policy the agent's own supervisor follows.
    restarts: crate::supervise::Restarts,
}

/// Creates the namespace and link of an instance (removing leftovers first).
fn setup_net(env: &InstanceEnv, cfg: &InstanceConfig) -> Result<(), InstanceError> {
    let (agent, inst) = instance_link(cfg.port).ok_or_else(|| InstanceError::NoLink {
        name: cfg.name.clone(),
        port: cfg.port,
    })?;
    let ns = env.netns(cfg.port);
    let veth = env.iface(cfg.port);
    // Whatever is left on the port (our own exited process, or a previous
    // agent's that was not adopted) goes first.
    settle_leftover(env, cfg.port, None);
    teardown_net(env, cfg.port);
    let net = |err| InstanceError::Net {
        name: cfg.name.clone(),
        err,
    };
    sluice_netns::create(&ns).map_err(net)?;
    let r = (|| {
        let host = Rtnl::open(env.host_netns.as_deref())?;
        host.add_veth(&veth, "eth0", Some(&ns))?;
        let _ = sluice_netns::sysctl(Some(&ns), "net.ipv6.conf.all.disable_ipv6", "1");
        let _ = sluice_netns::sysctl(
            env.host_netns.as_deref(),
            &format!("net.ipv6.conf.{veth}.disable_ipv6"),
            "1",
        );
        host.add_addr(&veth, agent, INSTANCE_LINK_PREFIX)?;
        host.set_up(&veth, true)?;
        let inner = Rtnl::open(Some(&ns))?;
        inner.add_addr("eth0", inst, INSTANCE_LINK_PREFIX)?;
        inner.set_up("eth0", true)?;
        inner.set_up("lo", true)
    })();
    if let Err(e) = r {
        teardown_net(env, cfg.port);
        return Err(net(e));
    }
    Ok(())
}

/// Removes an instance's namespace and link (missing ones are fine).
fn teardown_net(env: &InstanceEnv, port: u16) {
    if let Ok(host) = Rtnl::open(env.host_netns.as_deref()) {
        let _ = host.del_link(&env.iface(port));
    }
    let _ = sluice_netns::delete(&env.netns(port));
}

/// The file an instance on `port` reads its load balancer's backend states
/// from (`sluiced instance --backends`).
pub fn backends_file(env: &InstanceEnv, port: u16) -> PathBuf {
    env.run_dir
        .join(format!("{}.backends.json", env.netns(port)))
}

/// Writes `cfg.backends` where its instance reads them, replacing the file in
/// one rename so the instance never reads half of it. A failure is logged:
/// the instance keeps the states it had.
fn write_backends(env: &InstanceEnv, cfg: &InstanceConfig) {
    let path = backends_file(env, cfg.port);
    let tmp = path.with_extension("json.tmp");
    let r = serde_json::to_vec(&cfg.backends)
        .map_err(std::io::Error::other)
        .and_then(|b| {
            std::fs::create_dir_all(&env.run_dir)?;
            std::fs::write(&tmp, b)?;
            std::fs::rename(&tmp, &path)
        });
    match r {
        Ok(()) if !cfg.backends.is_empty() => tracing::info!(
            instance = %cfg.name,
            backends = ?cfg.backends.iter().map(|b| format!("{} {}", b.addr, b.state.as_str())).collect::<Vec<_>>(),
            "backend states for the instance"
        ),
        Ok(()) => {}
        Err(e) => tracing::error!(
            instance = %cfg.name,
            path = %path.display(),
            error = %e,
            "cannot write the instance's backend states: it keeps the ones it has"
        ),
    }
}

fn spawn(env: &InstanceEnv, cfg: &InstanceConfig) -> Result<Child, InstanceError> {
    let (agent, inst) = instance_link(cfg.port).ok_or_else(|| InstanceError::NoLink {
        name: cfg.name.clone(),
        port: cfg.port,
    })?;
    let ns = env.netns(cfg.port);
    let file = |what: String, err| InstanceError::File {
        name: cfg.name.clone(),
        what,
        err,
    };
    std::fs::create_dir_all(&env.run_dir)
        .map_err(|e| file(format!("create {}", env.run_dir.display()), e))?;
    let chain = env.run_dir.join(format!("{ns}.yaml"));
    std::fs::write(&chain, &cfg.chain_yaml)
        .map_err(|e| file(format!("write {}", chain.display()), e))?;
    let log_path = env.run_dir.join(format!("{}.log", sanitise(&cfg.name)));
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| file(format!("open {}", log_path.display()), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| file(format!("open {}", log_path.display()), e))?;
    let mut cmd = Command::new(&env.exe);
    // The store password goes in the environment, which only the process's
    // owner can read, never on its command line, which every process can.
    match &cfg.state_password {
        Some(pw) => cmd.env(sluice_proto::STORE_PASSWORD_ENV, pw.expose()),
        None => cmd.env_remove(sluice_proto::STORE_PASSWORD_ENV),
    };
    let child = cmd
        .arg("instance")
        .args(["--name", &cfg.name, "--netns", &ns])
        .args(["--listen", &format!("{inst}:{GENEVE_PORT}")])
        .args(["--agent", &format!("{agent}:{GENEVE_PORT}")])
        .arg("--chain")
        .arg(&chain)
        .args(["--state", &cfg.state])
        .arg("--eve")
        .arg(crate::eve::eve_path(&env.run_dir, &cfg.tenant, &cfg.name))
        .arg("--backends")
        .arg(backends_file(env, cfg.port))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|err| InstanceError::Spawn {
            name: cfg.name.clone(),
            exe: env.exe.display().to_string(),
            err,
        })?;
    // Lets a restarted agent find, and adopt, the process if this one dies.
    let pid = child.id() as i32;
    let rec = Record {
        name: cfg.name.clone(),
        pid,
        // Read while the process cannot be reaped (it is our child): even if
        // it has exited already, its zombie still has its start time.
        start_time: proc_start_time(pid).unwrap_or(0),
        netns: ns,
        fingerprint: fingerprint(cfg),
    };
    if let Err(e) = write_record(&pid_file(env, cfg.port), &rec) {
        tracing::warn!(
            tenant = %cfg.tenant,
            middlebox = %cfg.middlebox,
            instance = %cfg.name,
            error = %e,
            "cannot record the instance's process: a restarted agent will start it again"
        );
    }
    Ok(child)
}

fn pid_file(env: &InstanceEnv, port: u16) -> PathBuf {
    env.run_dir.join(format!("{}.pid", env.netns(port)))
}

/// What the agent that started an instance process recorded about it, so that
/// a later agent can tell whether the process it finds is still that one and
/// runs what it is asked to run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// Instance name (for messages).
    pub name: String,
    /// Process id.
    pub pid: i32,
    /// The process's start time, clock ticks after boot (`/proc/PID/stat`
    /// field 22): with the pid, an identity no later process shares.
    pub start_time: u64,
    /// The namespace it runs in.
    pub netns: String,
    /// [`fingerprint`] of the configuration it was started with.
    pub fingerprint: String,
}

/// What the machine says now about a recorded process and its network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Start time of the live (not zombie) process with the recorded pid, if
    /// there is one.
    pub start_time: Option<u64>,
    /// The namespace and both ends of the veth pair exist.
    pub net_intact: bool,
}

/// What to do with a process a previous agent left on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// It is the wanted instance, running: keep it, its namespace and link.
    Adopt,
    /// The port is wanted, but not as it runs: stop the process (only if
    /// `signal`: it is still the recorded one), tear down, start afresh.
    Replace {
        /// The recorded process is alive (else it is gone, or its pid now
        /// belongs to a stranger, who must not be signalled).
        signal: bool,
    },
    /// Nobody wants the port: stop the process (if `signal`) and tear down.
    Stop {
        /// As in [`Leftover::Replace`].
        signal: bool,
    },
}

/// Decides about the leftover `rec` found for namespace `netns`, given `facts`
/// and the fingerprint of the configuration wanted on its port (None: the
/// port is not wanted). Only the very process recorded (same pid and start
/// time) is ever adopted or signalled.
pub fn decide(rec: &Record, facts: &Facts, netns: &str, wanted: Option<&str>) -> Leftover {
    let alive = facts.start_time == Some(rec.start_time);
    match wanted {
        None => Leftover::Stop { signal: alive },
        Some(fp) if alive && fp == rec.fingerprint && rec.netns == netns && facts.net_intact => {
            Leftover::Adopt
        }
        Some(_) => Leftover::Replace { signal: alive },
    }
}

/// A stable fingerprint of what an instance process was started with: what
/// reaches the process (name, tenant, port, chain, state URL, a hash of the
/// store password, never the password) and this program's version, so that
/// an upgraded agent does not adopt instances of the old one.
pub fn fingerprint(cfg: &InstanceConfig) -> String {
    let mut d = ring::digest::Context::new(&ring::digest::SHA256);
    let password = cfg
        .state_password
        .as_ref()
        .map(|p| ring::digest::digest(&ring::digest::SHA256, p.expose().as_bytes()));
    let fields: [&[u8]; 8] = [
        b"sluice-instance-1",
        env!("CARGO_PKG_VERSION").as_bytes(),
        cfg.name.as_bytes(),
        cfg.tenant.as_bytes(),
        &cfg.port.to_be_bytes(),
        cfg.chain_yaml.as_bytes(),
        cfg.state.as_bytes(),
        password.as_ref().map_or(&b""[..], |h| h.as_ref()),
    ];
    // Length-prefixed, so no two different field lists hash the same bytes.
    for f in fields {
        d.update(&(f.len() as u64).to_be_bytes());
        d.update(f);
    }
    d.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The state and start time (field 22) in the text of `/proc/PID/stat`. The
/// command name (field 2) may hold spaces and parentheses: fields are counted
/// after its last `)`.
pub fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?.chars().next()?;
    // Fields 4..=21 lie between the state (3) and the start time (22).
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The start time of process `pid` if it is alive (not a zombie).
fn proc_start_time(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    match parse_stat(&text)? {
        ('Z' | 'X', _) => None,
        (_, t) => Some(t),
    }
}

/// Writes `rec` to `path` whole or not at all (a temporary file renamed over
/// it), so a dying agent never leaves half a record.
fn write_record(path: &Path, rec: &Record) -> std::io::Result<()> {
    let tmp = path.with_extension("pid.tmp");
    let text = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// The facts about `rec`'s process and its network on `port`. (The process
/// itself stays in the agent's namespace; only its data socket was made in
/// the instance's, so the namespace is checked by its links.)
fn observe(env: &InstanceEnv, rec: &Record, port: u16) -> Facts {
    let start_time = proc_start_time(rec.pid);
    let net_intact = start_time.is_some()
        && sluice_netns::exists(&rec.netns)
        && Rtnl::open(env.host_netns.as_deref()).is_ok_and(|h| h.link(&env.iface(port)).is_ok())
        && Rtnl::open(Some(&rec.netns)).is_ok_and(|i| i.link("eth0").is_ok());
    Facts {
        start_time,
        net_intact,
    }
}

/// Deals with whatever a previous agent (or this one's exited process) left
/// on `port`, given the configuration wanted there: returns the process if it
/// is adopted; otherwise stops it if it is still the recorded one, removes
/// its namespace and link and its record, and returns None.
fn settle_leftover(env: &InstanceEnv, port: u16, want: Option<&InstanceConfig>) -> Option<Proc> {
    let path = pid_file(env, port);
    let text = std::fs::read_to_string(&path).ok()?;
    let Ok(rec) = serde_json::from_str::<Record>(&text) else {
        // Agents before records wrote the bare pid: its process goes if its
        // command line is still an instance in this namespace. Anything else
        // cannot prove which process it meant, so none is signalled.
        match text.trim().parse::<i32>() {
            Ok(pid) if pid > 1 && legacy_instance(pid, &env.netns(port)) => {
                tracing::warn!(
                    pid,
                    "killing an instance process left over by an older agent"
                );
                // SAFETY: kill(2) on a pid whose command line we just checked.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            _ => tracing::warn!(path = %path.display(), "ignoring an unreadable instance record"),
        }
        teardown_net(env, port);
        let _ = std::fs::remove_file(&path);
        return None;
    };
    let ns = env.netns(port);
    let facts = observe(env, &rec, port);
    let wanted = want.map(fingerprint);
    match decide(&rec, &facts, &ns, wanted.as_deref()) {
        Leftover::Adopt => match Pidfd::open_identified(rec.pid, rec.start_time) {
            Ok(Some(fd)) => {
                tracing::info!(
                    instance = %rec.name,
                    port,
                    pid = rec.pid,
                    netns = %ns,
                    "adopting an instance left running"
                );
                return Some(Proc::Adopted {
                    pid: rec.pid as u32,
                    fd,
                });
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                instance = %rec.name,
                pid = rec.pid,
                netns = %ns,
                error = %e,
                "cannot watch an instance left running: starting it again"
            ),
        },
        Leftover::Replace { signal } | Leftover::Stop { signal } => {
            if signal {
                tracing::info!(
                    instance = %rec.name,
                    pid = rec.pid,
                    netns = %ns,
                    "stopping an instance process left over"
                );
            }
        }
    }
    // Not adopted: if the recorded process still runs, it goes.
    if let Ok(Some(fd)) = Pidfd::open_identified(rec.pid, rec.start_time) {
        stop_pidfd(&fd, GRACE);
    }
    teardown_net(env, port);
    let _ = std::fs::remove_file(&path);
    None
}

/// True if process `pid`'s command line is an instance in namespace `ns`.
fn legacy_instance(pid: i32, ns: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
        args.contains(&&b"instance"[..]) && args.contains(&ns.as_bytes())
    })
}

/// A process file descriptor (`pidfd_open(2)`, Linux 5.3): refers to one
/// process for good, whether or not it is our child, so it can be watched
/// for exit (readable once the process has ended) and signalled without the
/// risk of a recycled pid.
struct Pidfd(OwnedFd);

impl Pidfd {
    /// A pidfd for the process with `pid` and `start_time`, or None if that
    /// process is gone (the pid is free or another process's).
    fn open_identified(pid: i32, start_time: u64) -> std::io::Result<Option<Pidfd>> {
        if pid <= 1 {
            return Ok(None);
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ESRCH) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: a new descriptor we own.
        let fd = Pidfd(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        // Checked after opening: if the start time still matches, the pidfd
        // refers to the recorded process, not to a later one with its pid.
        Ok((proc_start_time(pid) == Some(start_time)).then_some(fd))
    }

    /// True once the process has ended (even if nobody reaped it yet).
    fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents != 0
    }

    /// Sends `sig` to the process (a no-op once it has ended).
    fn signal(&self, sig: i32) {
        // SAFETY: pidfd_send_signal(fd, sig, NULL, 0) signals exactly the
        // process the descriptor refers to.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}

/// Stops a process that is not our child: SIGTERM, then SIGKILL after
/// `grace`. Its parent (init, or `sluiced supervise` as subreaper) reaps it.
fn stop_pidfd(fd: &Pidfd, grace: Duration) {
    fd.signal(libc::SIGTERM);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if fd.exited() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    fd.signal(libc::SIGKILL);
    let until = Instant::now() + GRACE;
    while !fd.exited() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops a process: SIGTERM, then SIGKILL after `grace`.
pub fn stop_child(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: plain kill(2) on our own child's pid, not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

const GRACE: Duration = Duration::from_secs(2);
/// How often the supervisor looks for exited instances. An exit is the surest
/// sign of failure, and the data plane acts on it at once
/// (`Dataplane::instance_exited`): this bounds how long a killed instance's
/// flows wait, which heartbeat silence no longer does (its timeout adapts to
/// load and may reach 250 ms). One `waitpid` per instance per tick.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// What the supervisor calls when an instance's process exits (its port).
pub type OnExit = Box<dyn Fn(u16) + Send>;

/// The instance supervisor thread.
#[derive(Debug)]
pub struct Supervisor {
    tx: Option<Sender<Vec<InstanceConfig>>>,
    status: Arc<Mutex<Vec<InstanceStatus>>>,
    thread: Option<JoinHandle<()>>,
}

impl Supervisor {
    /// Starts the supervisor (no instances yet).
    pub fn start(env: InstanceEnv) -> Supervisor {
        Supervisor::start_with(env, Box::new(|_| {}))
    }

    /// Starts the supervisor, calling `on_exit(port)` whenever an instance's
    /// process exits.
    pub fn start_with(env: InstanceEnv, on_exit: OnExit) -> Supervisor {
        let (tx, rx) = std::sync::mpsc::channel();
        let status = Arc::new(Mutex::new(Vec::new()));
        let st = status.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-instances".into())
            .spawn(sluice_logging::in_current_span(move || {
                supervise(&env, &rx, &st, &on_exit)
            }))
            .ok();
        if thread.is_none() {
            tracing::error!("cannot start the instance supervisor thread");
        }
        Supervisor {
            tx: Some(tx),
            status,
            thread,
        }
    }

    /// Asks for exactly these instances.
    pub fn apply(&self, list: Vec<InstanceConfig>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(list);
        }
    }

    /// The instances and their processes.
    pub fn status(&self) -> Vec<InstanceStatus> {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops every instance, removes their namespaces and waits.
    pub fn stop(&mut self) {
        // Closing the channel tells the thread to clean up and end.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
    }
}

fn supervise(
    env: &InstanceEnv,
    rx: &Receiver<Vec<InstanceConfig>>,
    status: &Mutex<Vec<InstanceStatus>>,
    on_exit: &OnExit,
) {
    let mut running: BTreeMap<u16, Running> = BTreeMap::new();
    let mut first = true;
    loop {
        match rx.recv_timeout(WATCH_EVERY) {
            Ok(mut list) => {
                // Only the newest list matters.
                while let Ok(newer) = rx.try_recv() {
                    list = newer;
                }
                reconcile(env, &mut running, list, std::mem::take(&mut first));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        watch(env, &mut running, on_exit);
        publish(&mut running, status);
    }
    for (port, mut r) in std::mem::take(&mut running) {
        if let Some(p) = r.proc.as_mut() {
            p.stop(GRACE);
        }
        teardown_net(env, port);
        let _ = std::fs::remove_file(pid_file(env, port));
        let _ = std::fs::remove_file(backends_file(env, port));
    }
    publish(&mut running, status);
}

/// The ports of the instance records in the run directory.
fn recorded_ports(env: &InstanceEnv) -> Vec<u16> {
    let Ok(dir) = std::fs::read_dir(&env.run_dir) else {
        return Vec::new();
    };
    let head = format!("{}i", env.prefix);
    dir.filter_map(|e| {
        let name = e.ok()?.file_name().into_string().ok()?;
        name.strip_prefix(&head)?.strip_suffix(".pid")?.parse().ok()
    })
    .collect()
}

/// Runs exactly `list`. On the `first` list of this agent's life, processes
/// a previous agent left are adopted where they run what is wanted, and
/// stopped where nothing is wanted on their port.
fn reconcile(
    env: &InstanceEnv,
    running: &mut BTreeMap<u16, Running>,
    list: Vec<InstanceConfig>,
    first: bool,
) {
    let want: BTreeMap<u16, InstanceConfig> = list.into_iter().map(|c| (c.port, c)).collect();
    let gone: Vec<u16> = running
        .iter()
        .filter(|(p, r)| !want.get(p).is_some_and(|w| w.same_process(&r.cfg)))
        .map(|(p, _)| *p)
        .collect();
    for port in gone {
        if let Some(mut r) = running.remove(&port) {
            tracing::info!(
                tenant = %r.cfg.tenant,
                middlebox = %r.cfg.middlebox,
                instance = %r.cfg.name,
                port,
                "stopping the instance"
            );
            if let Some(p) = r.proc.as_mut() {
                p.stop(GRACE);
            }
            teardown_net(env, port);
            let _ = std::fs::remove_file(pid_file(env, port));
            let _ = std::fs::remove_file(backends_file(env, port));
        }
    }
    if first {
        for port in recorded_ports(env) {
            if !want.contains_key(&port) {
                settle_leftover(env, port, None);
            }
        }
    }
    for (port, cfg) in want {
        if let Some(r) = running.get_mut(&port) {
            // Backend health reaches the running process through its file.
            if r.cfg.backends != cfg.backends {
                write_backends(env, &cfg);
                r.cfg = cfg;
            }
            continue;
        }
        write_backends(env, &cfg);
        let adopted = if first {
            settle_leftover(env, port, Some(&cfg))
        } else {
            None
        };
        let proc = adopted.or_else(|| start(env, &cfg).map(Proc::Child));
        let now = Instant::now();
        let mut restarts = crate::supervise::Restarts::default();
        let restart_at = proc.is_none().then(|| now + restarts.died(Duration::ZERO));
        running.insert(
            port,
            Running {
                started_at: now,
                restart_at,
                proc,
                cfg,
                restarts,
            },
        );
    }
}

fn start(env: &InstanceEnv, cfg: &InstanceConfig) -> Option<Child> {
    let r = setup_net(env, cfg).and_then(|()| spawn(env, cfg));
    match r {
        Ok(c) => {
            tracing::info!(
                tenant = %cfg.tenant,
                middlebox = %cfg.middlebox,
                instance = %cfg.name,
                port = cfg.port,
                pid = c.id(),
                "started the instance"
            );
            Some(c)
        }
        Err(e) => {
            tracing::error!(
                tenant = %cfg.tenant,
                middlebox = %cfg.middlebox,
                instance = %cfg.name,
                port = cfg.port,
                error = %e,
                "cannot start the instance"
            );
            None
        }
    }
}

/// Notices exits (of children and of adopted processes alike) and restarts
/// instances: at once after a healthy run, since a middlebox with one
/// instance forwards nothing until it is back (issue 22's window), then
/// after the agent supervisor's growing delays while it keeps dying young.
fn watch(env: &InstanceEnv, running: &mut BTreeMap<u16, Running>, on_exit: &OnExit) {
    for r in running.values_mut() {
        let now = Instant::now();
        if let Some(p) = r.proc.as_mut() {
            if let Some(how) = p.exited() {
                let wait = r.restarts.died(now.duration_since(r.started_at));
                tracing::warn!(
                    tenant = %r.cfg.tenant,
                    middlebox = %r.cfg.middlebox,
                    instance = %r.cfg.name,
                    pid = p.id(),
                    exit = %how,
                    restart_in_ms = wait.as_millis() as u64,
                    log = %log_path(&env.run_dir, &r.cfg.name).display(),
                    "the instance exited"
                );
                r.proc = None;
                r.restart_at = Some(now + wait);
                on_exit(r.cfg.port);
            }
        } else if r.restart_at.is_none_or(|t| now >= t) {
            r.started_at = now;
            r.proc = start(env, &r.cfg).map(Proc::Child);
            r.restart_at = r
                .proc
                .is_none()
                .then(|| now + r.restarts.died(Duration::ZERO));
        }
    }
}

fn publish(running: &mut BTreeMap<u16, Running>, status: &Mutex<Vec<InstanceStatus>>) {
    let list = running
        .values()
        .map(|r| InstanceStatus {
            name: r.cfg.name.clone(),
            port: r.cfg.port,
            pid: r.proc.as_ref().map(Proc::id),
            alive: r.proc.is_some(),
        })
        .collect();
    if let Ok(mut s) = status.lock() {
        *s = list;
    }
}

/// True if `prefix` leaves room for `i`/`p` and a 5-digit port in a 15-byte
/// interface name.
pub fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= 9
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The log file of instance `name` in `run_dir`.
pub fn log_path(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join(format!("{}.log", sanitise(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_files_are_safe() {
        let env = InstanceEnv {
            host_netns: Some("h".into()),
            prefix: "sl4711h1".into(),
            run_dir: "/tmp".into(),
            exe: "/bin/false".into(),
        };
        assert_eq!(env.netns(16383), "sl4711h1i16383");
        assert!(env.iface(16383).len() <= 15);
        assert_eq!(sanitise("acme/fw/0"), "acme_fw_0");
        assert_eq!(sanitise("../x"), ".._x");
        assert!(valid_prefix("sl4711h1"));
        assert!(!valid_prefix("sl4711h1xx") && !valid_prefix("") && !valid_prefix("a/b"));
    }

    fn cfg() -> InstanceConfig {
        InstanceConfig {
            name: "acme/fw/0".into(),
            tenant: "acme".into(),
            middlebox: "fw".into(),
            port: 7,
            vni: 100,
            chain_yaml: "chain: []\n".into(),
            state: "redis://acme@10.0.0.1:6379".into(),
            state_password: Some(sluice_proto::StorePassword::new("hunter2")),
            backends: Vec::new(),
        }
    }

    fn record(c: &InstanceConfig) -> Record {
        Record {
            name: c.name.clone(),
            pid: 4242,
            start_time: 123_456,
            netns: "sl1h1i7".into(),
            fingerprint: fingerprint(c),
        }
    }

    const LIVE: Facts = Facts {
        start_time: Some(123_456),
        net_intact: true,
    };

    #[test]
    fn the_wanted_instance_still_running_is_adopted() {
        let c = cfg();
        let fp = fingerprint(&c);
        assert_eq!(
            decide(&record(&c), &LIVE, "sl1h1i7", Some(&fp)),
            Leftover::Adopt
        );
    }

    #[test]
    fn a_different_configuration_is_replaced() {
        let c = cfg();
        let rec = record(&c);
        let changed = [
            InstanceConfig {
                chain_yaml: "chain: [x]\n".into(),
                ..cfg()
            },
            InstanceConfig {
                state: "redis://acme@10.0.0.2:6379".into(),
                ..cfg()
            },
            InstanceConfig {
                state_password: Some(sluice_proto::StorePassword::new("hunter3")),
                ..cfg()
            },
            InstanceConfig {
                name: "acme/fw/1".into(),
                ..cfg()
            },
        ];
        for other in changed {
            let fp = fingerprint(&other);
            assert_ne!(fp, rec.fingerprint, "{other:?}");
            assert_eq!(
                decide(&rec, &LIVE, "sl1h1i7", Some(&fp)),
                Leftover::Replace { signal: true },
                "{other:?}"
            );
        }
        // Another namespace than the one the port has now: replaced too.
        let fp = fingerprint(&c);
        assert_eq!(
            decide(&rec, &LIVE, "sl2h1i7", Some(&fp)),
            Leftover::Replace { signal: true }
        );
    }

    #[test]
    fn a_recycled_pid_is_never_adopted_nor_signalled() {
        let c = cfg();
        let fp = fingerprint(&c);
        let rec = record(&c);
        for start_time in [Some(999_999), None] {
            let facts = Facts {
                start_time,
                net_intact: true,
            };
            assert_eq!(
                decide(&rec, &facts, "sl1h1i7", Some(&fp)),
                Leftover::Replace { signal: false },
                "{facts:?}"
            );
            assert_eq!(
                decide(&rec, &facts, "sl1h1i7", None),
                Leftover::Stop { signal: false },
                "{facts:?}"
            );
        }
    }

    #[test]
    fn a_missing_namespace_or_link_means_a_fresh_start() {
        let c = cfg();
        let fp = fingerprint(&c);
        let facts = Facts {
            net_intact: false,
            ..LIVE
        };
        assert_eq!(
            decide(&record(&c), &facts, "sl1h1i7", Some(&fp)),
            Leftover::Replace { signal: true }
        );
    }

    #[test]
    fn an_unwanted_instance_is_stopped() {
        let c = cfg();
        assert_eq!(
            decide(&record(&c), &LIVE, "sl1h1i7", None),
            Leftover::Stop { signal: true }
        );
    }

    #[test]
    fn the_fingerprint_is_stable_and_keeps_no_password() {
        let c = cfg();
        assert_eq!(fingerprint(&c), fingerprint(&c.clone()));
        assert_eq!(fingerprint(&c).len(), 64);
        // What the process does not see does not matter.
        let same = InstanceConfig {
            vni: 200,
            middlebox: "other".into(),
            ..cfg()
        };
        assert_eq!(fingerprint(&same), fingerprint(&c));
        let rec = serde_json::to_string(&record(&c)).unwrap();
        assert!(!rec.contains("hunter2"), "{rec}");
        assert_eq!(serde_json::from_str::<Record>(&rec).unwrap(), record(&c));
    }

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line =
            "4242 (sluiced) S 1 4242 4242 0 -1 4194560 523 0 0 0 1 2 0 0 20 0 3 0 123456 9 10 11";
        assert_eq!(parse_stat(line), Some(('S', 123_456)));
        let odd = "4242 (a) b (c) Z 1 4242 4242 0 -1 4194560 523 0 0 0 1 2 0 0 20 0 3 0 77 9";
        assert_eq!(parse_stat(odd), Some(('Z', 77)));
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
        assert_eq!(parse_stat("garbage"), None);
        // This very process, alive.
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat(&me).is_some_and(|(s, t)| s != 'Z' && t > 0));
    }

    #[test]
    fn records_are_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sl1h1i7.pid");
        let c = cfg();
        write_record(&path, &record(&c)).unwrap();
        let again = Record {
            pid: 5,
            ..record(&c)
        };
        write_record(&path, &again).unwrap();
        let back: Record = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, again);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }

    #[test]
    fn a_pidfd_sees_a_process_end_and_refuses_a_wrong_start_time() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let t = proc_start_time(pid).unwrap();
        assert!(Pidfd::open_identified(pid, t + 1).unwrap().is_none());
        let fd = Pidfd::open_identified(pid, t).unwrap().unwrap();
        assert!(!fd.exited());
        stop_pidfd(&fd, Duration::from_secs(2));
        assert!(fd.exited(), "SIGTERM ends sleep");
        // Exited but not reaped (a zombie): no longer taken for alive.
        assert_eq!(proc_start_time(pid), None);
        child.wait().unwrap();
    }
}
