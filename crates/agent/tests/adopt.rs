//! A restarted agent adopts its running instances (needs root). `sluiced
//! supervise` runs an agent whose saved configuration has one NF instance;
//! the agent is SIGKILLed, the supervisor starts it again, and the new agent
//! takes back the same instance process (same pid, namespace kept) instead of
//! starting another, with no failover. That process, no longer the agent's
//! child, is then killed: the agent notices (pidfd), fails it over and starts
//! a new one, and the supervisor (a child subreaper) reaps the dead one.
//! SIGTERM to the supervisor stops everything: no process or namespace left.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_agent::testing::is_root;
use sluice_netns::Netns;
use sluice_proto::{AgentConfig, AgentStatus, InstanceConfig, PortConfig, PortKind};

const PORT: u16 = 5;

const CHAIN: &str = r#"
name: t.fw
functions:
  - type: firewall
    name: fw
    rules: |
      allow tcp from 10.0.0.1 to 10.0.0.2 port 5000
      default deny
"#;

/// The saved configuration: one firewall instance on port [`PORT`].
fn config() -> AgentConfig {
    let name = "t/fw/0".to_string();
    AgentConfig {
        version: 1,
        host: 1,
        ports: vec![PortConfig {
            id: PORT,
            vni: 7,
            kind: PortKind::Instance { name: name.clone() },
        }],
        instances: vec![InstanceConfig {
            name,
            tenant: "t".into(),
            middlebox: "fw".into(),
            port: PORT,
            vni: 7,
            chain_yaml: CHAIN.into(),
            state: "local".into(),
            state_password: None,
            backends: Vec::new(),
        }],
        ..AgentConfig::default()
    }
}

/// The supervisor and what it made, all removed on drop (even on failure).
struct Host {
    sup: Option<Child>,
    prefix: String,
    api: String,
    log: std::path::PathBuf,
    _ns: Netns,
    _dir: tempfile::TempDir,
}

impl Host {
    fn status(&self) -> Option<AgentStatus> {
        ureq::get(&format!("{}/v1/status", self.api))
            .timeout(Duration::from_millis(500))
            .call()
            .ok()?
            .into_json()
            .ok()
    }

    /// Waits until `f` of the status holds (and returns what it gives).
    fn until<T>(&self, what: &str, mut f: impl FnMut(&AgentStatus) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(t) = self.status().as_ref().and_then(&mut f) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within 20 s; log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The supervisor's agent child (`sluiced run ...`).
    fn agent_pid(&self) -> Option<u32> {
        let sup = self.sup.as_ref()?.id();
        procs().into_iter().find_map(|(pid, ppid, args)| {
            (ppid == sup && args.get(1).map(String::as_str) == Some("run")).then_some(pid)
        })
    }

    /// The instance processes in this host's namespaces.
    fn instances(&self) -> Vec<u32> {
        let ns = format!("{}i{PORT}", self.prefix);
        procs()
            .into_iter()
            .filter(|(_, _, a)| a.iter().any(|x| x == "instance") && a.contains(&ns))
            .map(|(pid, _, _)| pid)
            .collect()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut s) = self.sup.take() {
            signal(s.id(), libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while s.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = s.kill();
            let _ = s.wait();
        }
        for pid in self.instances() {
            signal(pid, libc::SIGKILL);
        }
        let _ = sluice_netns::delete(&format!("{}i{PORT}", self.prefix));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process this test started or found by its
    // command line.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Every process: (pid, parent pid, arguments).
fn procs() -> Vec<(u32, u32, Vec<String>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let (Ok(stat), Ok(cmd)) = (
            std::fs::read_to_string(e.path().join("stat")),
            std::fs::read(e.path().join("cmdline")),
        ) else {
            continue;
        };
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        else {
            continue;
        };
        let args = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        out.push((pid, ppid, args));
    }
    out
}

fn start() -> Option<Host> {
    if !is_root() {
        eprintln!("skipped: needs root");
        return None;
    }
    let ns = Netns::new("ad").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("ad{}", std::process::id() % 100_000);
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_vec(&config()).unwrap(),
    )
    .unwrap();
    let api = {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let log = dir.path().join("supervise.log");
    let out = std::fs::File::create(&log).unwrap();
    let sup = Command::new(env!("CARGO_BIN_EXE_sluiced"))
        .arg("supervise")
        .args(["--host-id", "1", "--name", "ad1", "--netns", ns.name()])
        .args(["--underlay", "10.255.0.1"])
        // Never answers: the saved configuration is all the agent runs.
        .args(["--controller", "http://127.0.0.1:9"])
        .args(["--listen", &format!("127.0.0.1:{api}")])
        .args(["--prefix", &prefix])
        .arg("--run-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Some(Host {
        sup: Some(sup),
        prefix,
        api: format!("http://127.0.0.1:{api}"),
        log,
        _ns: ns,
        _dir: dir,
    })
}

/// The instance's pid once it runs and its heartbeats reach the agent.
fn serving(s: &AgentStatus) -> Option<u32> {
    let heard = s
        .health
        .iter()
        .any(|h| h.port == PORT && h.last_heartbeat_age_ms.is_some() && !h.suspected);
    let i = s.instances.iter().find(|i| i.port == PORT)?;
    i.pid.filter(|_| heard && i.alive)
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, unreaped) does not count.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z'))
}

#[test]
fn a_restarted_agent_adopts_its_instance_and_watches_it_like_a_child() {
    let Some(mut host) = start() else {
        return;
    };
    let first = host.until("the instance serves", serving);
    let agent = host.agent_pid().expect("the supervisor runs an agent");
    assert_eq!(host.instances(), vec![first]);

    signal(agent, libc::SIGKILL);
    let again = host.until("the agent runs again and hears the instance", |s| {
        host.agent_pid()
            .filter(|p| *p != agent)
            .and_then(|_| serving(s))
    });
    assert_eq!(again, first, "the same process, adopted");
    assert_eq!(
        host.instances(),
        vec![first],
        "exactly one instance process"
    );
    let s = host.status().unwrap();
    assert!(
        s.failover_events.is_empty(),
        "adopted without a failover: {:?}",
        s.failover_events
    );
    assert!(Path::new(&format!("/run/netns/{}i{PORT}", host.prefix)).exists());

    // Not the agent's child: its exit is seen through the pidfd, failed over
    // and restarted as a child's would be, and the supervisor reaps it.
    signal(first, libc::SIGKILL);
    let next = host.until("a new instance after the adopted one died", |s| {
        serving(s).filter(|p| *p != first)
    });
    let s = host.status().unwrap();
    assert!(
        s.failover_events
            .iter()
            .any(|e| e.port == PORT && e.reason == "exited"),
        "{:?}",
        s.failover_events
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{first}")).exists() && !alive(first) {
        assert!(
            Instant::now() < deadline,
            "the dead instance {first} was never reaped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(host.instances(), vec![next]);

    // A deliberate stop stops the instances too.
    let mut sup = host.sup.take().unwrap();
    signal(sup.id(), libc::SIGTERM);
    let status = sup.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(host.instances().is_empty(), "no instance outlives a stop");
    assert!(!Path::new(&format!("/run/netns/{}i{PORT}", host.prefix)).exists());
}
