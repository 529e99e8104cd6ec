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

use std::collections::BTreeMap;
use std::fs::File;
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

struct Running {
    cfg: InstanceConfig,
    child: Option<Child>,
    /// When the process last exited (for restart backoff).
    exited_at: Option<Instant>,
    restarts: u32,
}

/// Creates the namespace and link of an instance (removing leftovers first).
fn setup_net(env: &InstanceEnv, cfg: &InstanceConfig) -> Result<(), InstanceError> {
    let (agent, inst) = instance_link(cfg.port).ok_or_else(|| InstanceError::NoLink {
        name: cfg.name.clone(),
        port: cfg.port,
    })?;
    let ns = env.netns(cfg.port);
    let veth = env.iface(cfg.port);
    kill_stale(env, cfg.port);
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
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|err| InstanceError::Spawn {
            name: cfg.name.clone(),
            exe: env.exe.display().to_string(),
            err,
        })?;
    // Lets a restarted agent find the process if this one dies without cleaning up.
    let _ = std::fs::write(pid_file(env, cfg.port), child.id().to_string());
    Ok(child)
}

fn pid_file(env: &InstanceEnv, port: u16) -> PathBuf {
    env.run_dir.join(format!("{}.pid", env.netns(port)))
}

/// Kills an instance process a previous agent left behind (its pid file names
/// a live process whose command line is an instance in this namespace).
fn kill_stale(env: &InstanceEnv, port: u16) {
    let path = pid_file(env, port);
    let Some(pid) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok())
    else {
        return;
    };
    let ns = env.netns(port);
    let ours = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
        args.contains(&&b"instance"[..]) && args.contains(&ns.as_bytes())
    });
    if ours && pid > 1 {
        eprintln!("sluiced: killing instance process {pid} left over in {ns}");
        // SAFETY: kill(2) on a pid whose command line we just checked.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    let _ = std::fs::remove_file(&path);
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
const RESTART_AFTER: Duration = Duration::from_secs(1);
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
            .spawn(move || supervise(&env, &rx, &st, &on_exit))
            .ok();
        if thread.is_none() {
            eprintln!("sluiced: cannot start the instance supervisor thread");
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
    loop {
        match rx.recv_timeout(WATCH_EVERY) {
            Ok(mut list) => {
                // Only the newest list matters.
                while let Ok(newer) = rx.try_recv() {
                    list = newer;
                }
                reconcile(env, &mut running, list);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        watch(env, &mut running, on_exit);
        publish(&mut running, status);
    }
    for (port, mut r) in std::mem::take(&mut running) {
        if let Some(c) = r.child.as_mut() {
            stop_child(c, GRACE);
        }
        teardown_net(env, port);
        let _ = std::fs::remove_file(pid_file(env, port));
    }
    publish(&mut running, status);
}

fn reconcile(env: &InstanceEnv, running: &mut BTreeMap<u16, Running>, list: Vec<InstanceConfig>) {
    let want: BTreeMap<u16, InstanceConfig> = list.into_iter().map(|c| (c.port, c)).collect();
    let gone: Vec<u16> = running
        .iter()
        .filter(|(p, r)| want.get(p) != Some(&r.cfg))
        .map(|(p, _)| *p)
        .collect();
    for port in gone {
        if let Some(mut r) = running.remove(&port) {
            eprintln!("sluiced: stopping instance {} (port {port})", r.cfg.name);
            if let Some(c) = r.child.as_mut() {
                stop_child(c, GRACE);
            }
            teardown_net(env, port);
            let _ = std::fs::remove_file(pid_file(env, port));
        }
    }
    for (port, cfg) in want {
        if running.contains_key(&port) {
            continue;
        }
        let child = start(env, &cfg);
        running.insert(
            port,
            Running {
                exited_at: child.is_none().then(Instant::now),
                child,
                cfg,
                restarts: 0,
            },
        );
    }
}

fn start(env: &InstanceEnv, cfg: &InstanceConfig) -> Option<Child> {
    let r = setup_net(env, cfg).and_then(|()| spawn(env, cfg));
    match r {
        Ok(c) => {
            eprintln!(
                "sluiced: started instance {} (port {}, pid {})",
                cfg.name,
                cfg.port,
                c.id()
            );
            Some(c)
        }
        Err(e) => {
            eprintln!("sluiced: {e}");
            None
        }
    }
}

/// Notices exits and restarts instances after a pause.
fn watch(env: &InstanceEnv, running: &mut BTreeMap<u16, Running>, on_exit: &OnExit) {
    for r in running.values_mut() {
        if let Some(c) = r.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                eprintln!(
                    "sluiced: instance {} exited ({st}); see its log in {}",
                    r.cfg.name,
                    env.run_dir.display()
                );
                r.child = None;
                r.exited_at = Some(Instant::now());
                on_exit(r.cfg.port);
            }
        } else if r.exited_at.is_none_or(|t| t.elapsed() >= RESTART_AFTER) {
            r.restarts += 1;
            r.child = start(env, &r.cfg);
            if r.child.is_none() {
                r.exited_at = Some(Instant::now());
            }
        }
    }
}

fn publish(running: &mut BTreeMap<u16, Running>, status: &Mutex<Vec<InstanceStatus>>) {
    let list = running
        .values()
        .map(|r| InstanceStatus {
            name: r.cfg.name.clone(),
            port: r.cfg.port,
            pid: r.child.as_ref().map(Child::id),
            alive: r.child.is_some(),
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
}
