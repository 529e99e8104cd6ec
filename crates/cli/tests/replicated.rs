//! Three `sluice controller` processes on one etcd cluster (issue 22, item
//! 2): one leads and serves, the others wait without listening; the leader's
//! death (SIGKILL), a paused leader (SIGSTOP past its lease) and an etcd
//! member's death lose nothing that was stored, and only the election
//! interrupts the API.

mod common;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_controller::client::Client;
use sluice_etcd::server::{etcd_binary, EtcdCluster};

struct Controller {
    port: u16,
    child: Child,
}

impl Drop for Controller {
    fn drop(&mut self) {
        // SAFETY: signalling our own child (it may be stopped).
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGCONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(100),
    )
    .is_ok()
}

/// Starts controller `i` with its settings in a file, as deployed.
fn start(
    dir: &Path,
    i: usize,
    etcd: &EtcdCluster,
    api: &sluice_tls::pki::PrivatePki,
) -> Controller {
    let port = free_port();
    let tls = etcd.client_tls();
    let conf = dir.join(format!("c{i}.toml"));
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\n\
         db = \"{db}\"\n\
         admin_token_file = \"{token}\"\n\
         tls_cert = \"{cert}\"\n\
         tls_key = \"{key}\"\n\
         etcd = \"{endpoints}\"\n\
         etcd_ca_file = \"{eca}\"\n\
         etcd_cert_file = \"{ecert}\"\n\
         etcd_key_file = \"{ekey}\"\n\
         name = \"c{i}\"\n\
         leader_lease_secs = 3\n",
        db = dir.join(format!("c{i}.db")).display(),
        token = dir.join("admin.token").display(),
        cert = api.cert.display(),
        key = api.key.display(),
        endpoints = etcd.endpoints().join(","),
        eca = tls.ca.display(),
        ecert = tls.cert.display(),
        ekey = tls.key.display(),
    );
    std::fs::write(&conf, text).unwrap();
    let log = std::fs::File::create(dir.join(format!("c{i}.log"))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("controller")
        .arg("--config")
        .arg(&conf)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Controller { port, child }
}

/// The index of the controller that listens, waiting up to `within`.
fn leader(cs: &[Controller], within: Duration, skip: Option<usize>) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let up: Vec<usize> = (0..cs.len())
            .filter(|&i| Some(i) != skip && listening(cs[i].port))
            .collect();
        if let [one] = up[..] {
            return one;
        }
        assert!(up.len() < 2, "two controllers listen at once: {up:?}");
        assert!(
            Instant::now() < deadline,
            "no controller leads after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn client(c: &Controller, api: &sluice_tls::pki::PrivatePki, token: &str) -> Client {
    Client::new(&format!("https://127.0.0.1:{}", c.port))
        .with_token(Some(token))
        .with_ca_file(&api.ca)
        .unwrap()
}

fn logs(dir: &Path) -> String {
    (0..3)
        .map(|i| {
            let p: PathBuf = dir.join(format!("c{i}.log"));
            format!(
                "--- c{i}\n{}",
                std::fs::read_to_string(p).unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_killed_or_paused_leader_is_replaced_and_nothing_stored_is_lost() {
    if etcd_binary().is_none() {
        eprintln!("skipped: etcd is not installed (apt-get install etcd-server)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = EtcdCluster::start(3).unwrap();
    let api = sluice_tls::pki::PrivatePki::create(
        dir.path(),
        "api",
        "Sluice controller",
        &["127.0.0.1", "localhost"],
    )
    .unwrap();
    let mut cs: Vec<Controller> = (0..3).map(|i| start(dir.path(), i, &etcd, &api)).collect();
    let first = leader(&cs, Duration::from_secs(30), None);
    let token = std::fs::read_to_string(dir.path().join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let c = client(&cs[first], &api, &token);
    let alice = c.create_token("alice", "read-only").unwrap().token;
    common_host(&c, 1);
    common_host(&c, 2);
    c.register_vm(&common::vm("a1", 1, "10.0.0.1")).unwrap();
    c.register_vm(&common::vm("b1", 2, "10.0.0.2")).unwrap();
    c.apply(None, common::SPEC).unwrap();
    let placed = c.instances().unwrap();
    assert_eq!(placed.len(), 2);
    let term = c
        .status()
        .unwrap()
        .leader
        .expect("a replicated controller names its leader");
    assert_eq!(term.name, format!("c{first}"));
    // The standbys do not listen, but the leader lists them from their
    // records in etcd.
    let members = |c: &Client, want: usize| {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            got = c.status().unwrap().controllers;
            if got.len() == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        got
    };
    let all = members(&c, 3);
    let names: Vec<&str> = all.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["c0", "c1", "c2"], "{all:?}");
    let leading: Vec<&str> = all
        .iter()
        .filter(|m| m.leading)
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(leading, [format!("c{first}")], "{all:?}");
    let hosts_ca = std::fs::read(dir.path().join(format!("c{first}.hosts-ca.pem"))).unwrap();

    // 1. The leader is killed: another takes over within the lease and the
    // election, with every token, host and audit entry.
    let killed_at = Instant::now();
    cs[first].child.kill().unwrap();
    cs[first].child.wait().unwrap();
    let second = leader(&cs, Duration::from_secs(20), Some(first));
    let took = killed_at.elapsed();
    eprintln!("leader SIGKILLed: c{second} serves {took:?} later (lease 3 s)");
    assert_ne!(second, first);
    let c = client(&cs[second], &api, &token);
    // The new leader says so: status, metrics, and an event.
    let now = c.status().unwrap().leader.unwrap();
    assert_eq!(now.name, format!("c{second}"));
    assert!(now.term > term.term, "{now:?} after {term:?}");
    // The killed one drops off the list when its record's lease runs out.
    let left = members(&c, 2);
    assert!(
        left.len() == 2 && left.iter().all(|m| m.name != format!("c{first}")),
        "{left:?}"
    );
    let metrics = c.get_raw("/metrics").unwrap();
    assert!(
        metrics.contains(&format!("sluice_controller_leader{{name=\"c{second}\"}} 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_controller_standbys 1")
            && metrics.contains(&format!(
                "sluice_controller_member{{name=\"c{second}\",role=\"leader\"}} 1"
            )),
        "{metrics}"
    );
    assert!(
        c.events(0)
            .unwrap()
            .iter()
            .any(|e| e.kind == "leading" && e.reason.contains(&format!("controller c{second}"))),
        "no `leading` event"
    );
    let names: Vec<String> = c.tokens().unwrap().into_iter().map(|t| t.name).collect();
    assert!(
        names.contains(&"alice".to_string()),
        "{names:?}\n{}",
        logs(dir.path())
    );
    let as_alice = client(&cs[second], &api, &alice);
    assert_eq!(
        as_alice.hosts().unwrap().len(),
        2,
        "alice's token and the hosts survive"
    );
    let again = c.instances().unwrap();
    assert_eq!(
        again.iter().map(|i| (&i.name, i.host)).collect::<Vec<_>>(),
        placed.iter().map(|i| (&i.name, i.host)).collect::<Vec<_>>(),
        "the instances stay where they were placed"
    );
    assert_eq!(c.tenant("t").unwrap().generation, 1);
    let audit = c.audit(0, None, 100).unwrap();
    assert!(
        audit.iter().any(|e| e.action == "apply tenant t"),
        "the audit log moved with the state: {audit:?}"
    );
    // Agents' certificates keep verifying: every leader signs with one CA.
    assert_eq!(
        std::fs::read(dir.path().join(format!("c{second}.hosts-ca.pem"))).unwrap(),
        hosts_ca
    );
    common_host(&c, 3);

    // 2. An etcd member dies: the API goes on. A connection the client had
    // open may be reset as the controller's etcd client fails over (seen
    // under load); the next request is served.
    etcd.kill(0);
    use sluice_controller::client::ClientError;
    let mut tries = 0;
    loop {
        match c.create_token("bob", "read-only") {
            Ok(_) => break,
            Err(ClientError::Transport(_)) if tries < 2 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(500));
            }
            // The reset came after the first try was stored.
            Err(ClientError::Api { status: 409, .. }) if tries > 0 => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(c.hosts().unwrap().len(), 3);

    // 3. The leader is paused past its lease: another leads; the paused one,
    // resumed, finds its term over and stops serving (it campaigns again as
    // a new process) — never two answering at once.
    let paused = second;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(cs[paused].child.id() as i32, libc::SIGSTOP) };
    let third = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up: Vec<usize> = (0..3)
                .filter(|&i| i != paused && i != first && listening(cs[i].port))
                .collect();
            if let [one] = up[..] {
                break one;
            }
            assert!(
                Instant::now() < deadline,
                "no controller took over from the paused one"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let c3 = client(&cs[third], &api, &token);
    c3.create_token("carol", "read-only").unwrap();
    unsafe { libc::kill(cs[paused].child.id() as i32, libc::SIGCONT) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while listening(cs[paused].port) {
        assert!(
            Instant::now() < deadline,
            "the resumed old leader still serves\n{}",
            logs(dir.path())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        cs[paused].child.try_wait().unwrap().is_none(),
        "the old leader campaigns again (same process, executed anew)"
    );
    let names: Vec<String> = c3.tokens().unwrap().into_iter().map(|t| t.name).collect();
    for n in ["admin", "alice", "bob", "carol"] {
        assert!(names.contains(&n.to_string()), "{n} missing: {names:?}");
    }
    assert_eq!(c3.hosts().unwrap().len(), 3);
    assert_eq!(c3.audit(0, None, 100).unwrap().len(), audit.len());
    // The restarted one waits as a candidate, not listening.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!listening(cs[paused].port));
    drop(cs);
}

/// Registers host `id` (no agent behind it).
fn common_host(c: &Client, id: u32) {
    c.register_host(&sluice_proto::HostRegistration {
        host: id,
        name: format!("h{id}"),
        underlay: std::net::Ipv4Addr::new(10, 255, 0, id as u8),
        // Nothing listens there: pushes fail, which changes nothing here.
        api: "https://127.0.0.1:9".into(),
        config_version: 0,
        api_token: None,
        capacity: None,
        api_csr: None,
    })
    .expect("register host");
}
