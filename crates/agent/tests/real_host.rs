//! Real-host mode (needs root): each host is a network namespace, but its agent
//! runs *inside* it (`ip netns exec H sluiced run --config FILE`), with no
//! `netns` setting, as it would on a machine of its own: the configuration
//! file names the underlay interface (its address becomes the tunnel
//! endpoint, its MTU is checked), the VMs' interfaces are named in their
//! registrations, and the controller is reached over the underlay. A TCP
//! transfer between VMs on the two hosts goes through a chain (an NF
//! instance the agent starts next to itself) and crosses the sealed fabric.
//! An underlay whose MTU cannot carry the VMs' frames is refused with the
//! numbers.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_agent::testing::{attach_vm, is_root, two_hosts, underlay, VmHandle};
use sluice_controller::client::Client;
use sluice_controller::tls::TlsOptions;
use sluice_controller::{serve, ServerOptions};
use sluice_netns::Netns;
use sluice_proto::VmRegistration;

const SPEC: &str = "tenant: rh
elements:
  front: { type: service, vms: { rh-front1: 10.20.0.1 } }
  back: { type: service, vms: { rh-back1: 10.20.0.2 } }
  mon: { type: middlebox, function: monitor }
chains:
  - { name: fb, path: [front, mon, back] }
";

/// A daemon started in a namespace; stopped (SIGTERM, then SIGKILL) when
/// dropped, so a failing test leaves no process behind.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ip netns exec NS sluiced run --config FILE`: nothing else on the command
/// line, as a service unit would run it.
fn command(ns: &Netns, config: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.name()])
        .arg(env!("CARGO_BIN_EXE_sluiced"))
        .arg("run")
        .arg("--config")
        .arg(config);
    c
}

fn start(ns: &Netns, config: &Path, log: PathBuf) -> Daemon {
    let f = std::fs::File::create(&log).unwrap();
    let child = command(ns, config)
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .expect("ip netns exec starts");
    Daemon { child, log }
}

/// Host `h`'s agent.toml: what an operator writes on a real host.
fn agent_toml(h: u32, controller: &str, ca: &Path, token_file: &Path, run_dir: &Path) -> String {
    format!(
        "host_id = {h}
name = \"host{h}\"
controller = \"{controller}\"
ca_file = \"{}\"
token_file = \"{}\"
underlay_interface = \"fab0\"
listen = \"{}:0\"
prefix = \"r{}h{h}\"
run_dir = \"{}\"
",
        ca.display(),
        token_file.display(),
        underlay(h),
        std::process::id() % 100_000,
        run_dir.display()
    )
}

fn register(ns: &Netns, c: &Client, vm: &VmHandle, host: u32) {
    let reg = VmRegistration {
        tenant: "rh".into(),
        name: vm.name.clone(),
        host,
        iface: vm.iface.clone(),
        mac: vm.mac.clone(),
        addr: vm.addr.into(),
        gateway: false,
    };
    ns.run(|| c.register_vm(&reg)).unwrap().unwrap();
}

fn wait_for(what: &str, within: Duration, logs: &[&Daemon], mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        if Instant::now() > deadline {
            let logs: Vec<String> = logs.iter().map(|d| d.log()).collect();
            panic!(
                "{what}: not within {within:?}; agent logs:\n{}",
                logs.join("\n---\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn echo_server(vm: &VmHandle, port: u16) {
    let addr = SocketAddr::from((vm.addr, port));
    let listener = vm.ns.run(move || TcpListener::bind(addr)).unwrap().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    });
}

#[test]
fn agents_inside_their_hosts_carry_a_chain_over_the_named_underlay() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (h1, h2) = two_hosts().unwrap();
    // The smallest underlay MTU that carries 1500-byte VM frames sealed:
    // 1500 + 14 + 8 + 12 + 32 + 8 + 20.
    for ns in [&h1, &h2] {
        ns.rtnl().unwrap().set_mtu("fab0", 1594).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    // The controller is on host 1, reached over the underlay.
    let admin_file = dir.path().join("admin.token");
    let opts = ServerOptions {
        listen: SocketAddr::from((underlay(1), 0)),
        db: dir.path().join("controller.db"),
        state_url: "local".into(),
        admin_token_file: Some(admin_file.clone()),
        fabric_auth: true,
        // As deployed: TLS with the controller's own CA, whose certificate
        // names the underlay address it listens on.
        tls: Some(TlsOptions::default()),
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: true,
        etcd: None,
    };
    let ctl = h1.run(move || serve(opts)).unwrap().unwrap();
    let admin = std::fs::read_to_string(&admin_file).unwrap();
    let ca = ctl.ca_file().unwrap().to_path_buf();
    assert!(ctl.url().starts_with("https://"), "{}", ctl.url());
    let client = Client::new(&ctl.url())
        .with_token(Some(admin.trim()))
        .with_ca_file(&ca)
        .unwrap();

    let front = attach_vm(h1.name(), "rh-front1", Ipv4Addr::new(10, 20, 0, 1)).unwrap();
    let back = attach_vm(h2.name(), "rh-back1", Ipv4Addr::new(10, 20, 0, 2)).unwrap();
    // A host-side interface above vm_mtu is forwarded for, and reported.
    h1.rtnl().unwrap().set_mtu(&front.iface, 9000).unwrap();

    let mut agents = Vec::new();
    for (h, ns) in [(1, &h1), (2, &h2)] {
        let created = h1
            .run(|| client.create_token(&format!("host-{h}"), &format!("host:{h}")))
            .unwrap()
            .unwrap();
        let token_file = dir.path().join(format!("h{h}.token"));
        std::fs::write(&token_file, format!("{}\n", created.token)).unwrap();
        let conf = dir.path().join(format!("agent-h{h}.toml"));
        let run_dir = dir.path().join(format!("h{h}"));
        std::fs::write(&conf, agent_toml(h, &ctl.url(), &ca, &token_file, &run_dir)).unwrap();
        agents.push(start(ns, &conf, dir.path().join(format!("agent-h{h}.log"))));
    }
    let logs: Vec<&Daemon> = agents.iter().collect();
    register(&h1, &client, &front, 1);
    register(&h1, &client, &back, 2);

    wait_for(
        "both agents registered",
        Duration::from_secs(20),
        &logs,
        || {
            h1.run(|| client.hosts())
                .unwrap()
                .is_ok_and(|v| v.len() == 2)
        },
    );
    // Each announced its underlay interface's address.
    let hosts = h1.run(|| client.hosts()).unwrap().unwrap();
    for h in &hosts {
        assert_eq!(h.underlay, underlay(h.id).to_string(), "{h:?}");
    }
    h1.run(|| client.apply(None, SPEC)).unwrap().unwrap();
    wait_for(
        "hosts in sync and the monitor alive",
        Duration::from_secs(30),
        &logs,
        || {
            let synced = h1
                .run(|| client.hosts())
                .unwrap()
                .is_ok_and(|v| v.iter().all(|h| h.in_sync));
            let alive = h1
                .run(|| client.instances())
                .unwrap()
                .is_ok_and(|v| !v.is_empty() && v.iter().all(|i| i.alive == Some(true)));
            synced && alive
        },
    );

    echo_server(&back, 5000);
    let to = SocketAddr::from((back.addr, 5000));
    let mut s = front
        .ns
        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(10)))
        .unwrap()
        .unwrap_or_else(|e| panic!("connect through the chain: {e}\n{}", agents[0].log()));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Full-sized segments: each crosses the 1594-byte underlay whole.
    let msg: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    s.write_all(&msg).unwrap();
    let mut back_msg = vec![0u8; msg.len()];
    s.read_exact(&mut back_msg).unwrap();
    assert!(back_msg == msg, "the echo differs");

    // Both agents saw the transfer on the fabric (counters are published
    // periodically: read until they show it, or five seconds).
    let hosts = h1.run(|| client.hosts()).unwrap().unwrap();
    // The agents' APIs speak TLS with certificates from the hosts' CA, each
    // for its own host only.
    let hosts_ca = std::fs::read_to_string(dir.path().join("controller.hosts-ca.pem")).unwrap();
    let agent_client = |host: u32| {
        ureq::AgentBuilder::new()
            .tls_config(sluice_tls::hosts::client_config(&hosts_ca, host).unwrap())
            .build()
    };
    for h in &hosts {
        assert!(h.api.starts_with("https://"), "{h:?}");
        let url = format!("{}/v1/status", h.api);
        let ns = if h.id == 1 { &h1 } else { &h2 };
        let other = agent_client(3 - h.id);
        let e = ns
            .run(|| {
                other
                    .get(&url)
                    .call()
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .unwrap()
            .unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        let plain = url.replacen("https://", "http://", 1);
        let answer = ns
            .run(|| match ureq::get(&plain).call() {
                Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
                other => (0, format!("{other:?}")),
            })
            .unwrap();
        assert!(
            answer.0 == 400 && answer.1.contains("speaks TLS"),
            "{answer:?}"
        );
        let client = agent_client(h.id);
        let deadline = Instant::now() + Duration::from_secs(5);
        let fabric = loop {
            let st: sluice_proto::AgentStatus = ns
                .run(|| client.get(&url).call().unwrap().into_json().unwrap())
                .unwrap();
            let f = st.fabric;
            if (f.tx_packets > 50 && f.rx_packets > 50) || Instant::now() > deadline {
                break f;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            fabric.tx_packets > 50 && fabric.rx_packets > 50,
            "host {}: {fabric:?}",
            h.id
        );
    }
    let log = agents[0].log();
    assert!(
        log.lines().any(|l| {
            l.contains("the VM port's MTU is above vm_mtu")
                && l.contains(&format!("iface={} mtu=9000 vm_mtu=1500", front.iface))
                // Logged by the data-plane thread, in the agent's span.
                && l.contains(" WARN agent{host=1 name=host1}: ")
        }),
        "{log}"
    );
    drop(agents);
    ctl.shutdown();
}

#[test]
fn an_underlay_too_small_for_the_vm_mtu_is_refused_with_the_numbers() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (h1, _h2) = two_hosts().unwrap();
    h1.rtnl().unwrap().set_mtu("fab0", 1500).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("agent.toml");
    std::fs::write(
        &conf,
        "host_id = 1\nname = \"host1\"\ncontroller = \"http://127.0.0.1:9\"\n\
         underlay_interface = \"fab0\"\nvm_mtu = 1500\n",
    )
    .unwrap();
    let out = command(&h1, &conf).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started: {err}");
    for part in ["fab0", "MTU 1500", "need 1594", "at most 1406"] {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
    // Without sealing, 1562 bytes are needed: still too many.
    std::fs::write(
        &conf,
        "host_id = 1\nname = \"host1\"\ncontroller = \"http://127.0.0.1:9\"\n\
         underlay_interface = \"fab0\"\nfabric_auth = false\n",
    )
    .unwrap();
    let out = command(&h1, &conf).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("need 1562"), "{err}");
}
