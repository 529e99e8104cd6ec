//! What the `sluice` command's integration tests share.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use sluice_controller::client::Client;
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::{HostRegistration, VmRegistration};

/// Tenant `t`: a monitor with two instances between services `a` (VM a1) and
/// `b` (VM b1), as [`register_two_hosts`] registers them.
#[allow(dead_code)] // Not every test binary uses it.
pub const SPEC: &str = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  mon: { type: middlebox, function: monitor, instances: 2 }
chains:
  - { name: ab, path: [a, mon, b] }
";

/// A controller on loopback (in memory, no sealed fabric), its URL and the
/// operator token its first start wrote into `dir`.
#[allow(dead_code)] // Not every test binary uses it.
pub fn controller(dir: &Path) -> (ServerHandle, String, String) {
    let token_file = dir.join("admin.token");
    let h = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().expect("address"),
        db: ":memory:".into(),
        state_url: "local".into(),
        admin_token_file: Some(token_file.clone()),
        fabric_auth: false,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .expect("controller");
    let url = h.url();
    let token = std::fs::read_to_string(&token_file)
        .expect("admin token")
        .trim()
        .to_string();
    (h, url, token)
}

/// VM `name` of tenant `t` on `host`.
#[allow(dead_code)] // Not every test binary uses it.
pub fn vm(name: &str, host: u32, addr: &str) -> VmRegistration {
    VmRegistration {
        tenant: "t".into(),
        name: name.into(),
        host,
        iface: format!("veth-{name}"),
        mac: "02:00:00:00:00:01".into(),
        addr: addr.parse().expect("address"),
        gateway: false,
    }
}

/// Hosts 1 and 2 (alive: they just registered; no agent behind them; 64
/// instance slots each) and
/// [`SPEC`]'s VMs, a1 on host 1 and b1 on host 2.
#[allow(dead_code)] // Not every test binary uses it.
pub fn register_two_hosts(c: &Client) {
    for host in 1..=2u32 {
        c.register_host(&HostRegistration {
            host,
            name: format!("h{host}"),
            underlay: Ipv4Addr::new(10, 255, 0, host as u8),
            // Nothing listens there: pushes fail, which changes nothing here.
            api: "http://127.0.0.1:9".into(),
            config_version: 0,
            api_token: None,
            capacity: Some(sluice_proto::HostCapacity {
                instance_slots: Some(64),
                ..sluice_proto::HostCapacity::default()
            }),
            api_csr: None,
        })
        .expect("register host");
    }
    c.register_vm(&vm("a1", 1, "10.0.0.1"))
        .expect("register a1");
    c.register_vm(&vm("b1", 2, "10.0.0.2"))
        .expect("register b1");
}

/// Runs the `sluice` binary with `args`: its exit code, stdout and stderr. A
/// controller named in the environment is never used by accident.
#[allow(dead_code)] // Not every test binary uses it.
pub fn sluice(args: &[&str]) -> (i32, String, String) {
    sluice_env(args, &[])
}

/// [`sluice`] with environment variables set (the caller's `SLUICE_*` are
/// never inherited).
#[allow(dead_code)] // Not every test binary uses it.
pub fn sluice_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("SLUICE_CONTROLLER")
        .env_remove("SLUICE_TOKEN")
        .env_remove("SLUICE_CA_FILE")
        .env_remove("SLUICE_CONFIG")
        .envs(env.iter().copied())
        .output()
        .expect("run sluice");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The testbed the end-to-end tests bring up: `spec` on three hosts with web
/// servers in the VMs, the sealed fabric and a single store, this build's
/// `sluice` and `sluiced`; tests change what they need with struct update.
#[allow(dead_code)] // Not every test binary uses it.
pub fn lab_options(spec: std::path::PathBuf, dir: &Path) -> sluice_testbed::lab::LabOptions {
    // `cargo test --workspace` builds every binary of the workspace, the
    // agent's included, into the same directory.
    let sluice = std::path::PathBuf::from(env!("CARGO_BIN_EXE_sluice"));
    sluice_testbed::lab::LabOptions {
        spec,
        hosts: 3,
        dir: dir.to_path_buf(),
        sluiced: sluice.with_file_name("sluiced"),
        sluice,
        web: true,
        seawall: false,
        fabric_auth: true,
        store: Default::default(),
        subverted: Vec::new(),
        controllers: 1,
        topology: Default::default(),
        dataplane_threads: 1,
    }
}

/// The Figure 4 tenant's example spec.
#[allow(dead_code)] // Not every test binary uses it.
pub fn figure4_spec() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
}

/// Who served each of `n` new connections from the Figure 4 lab's gateway to
/// the web-a VIP (10.10.1.100): the body of `index.html`, the serving VM's
/// name, or "FAILED" for a connection that failed within 2 s.
#[allow(dead_code)] // Not every test binary uses it.
pub fn web_a_servers(lab: &sluice_testbed::lab::Lab, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let (ok, out, _) = lab
                .vm_exec(
                    "gateway",
                    &[
                        "curl",
                        "-sf",
                        "--max-time",
                        "2",
                        "--interface",
                        "198.51.100.10",
                        "http://10.10.1.100/index.html",
                    ],
                )
                .unwrap();
            if ok {
                out.trim().to_string()
            } else {
                "FAILED".to_string()
            }
        })
        .collect()
}

/// `GET path` on the lab's controller as its operator, as JSON.
#[allow(dead_code)] // Not every test binary uses it.
pub fn controller_get(lab: &sluice_testbed::lab::Lab, path: &str) -> serde_json::Value {
    let st = lab.state();
    let text = st
        .http()
        .get(&format!("{}{path}", st.controller))
        .set("Authorization", &st.bearer())
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .into_string()
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Sum of the samples on one agent's `/metrics` whose line starts with
/// `family` and contains `with`.
#[allow(dead_code)] // Not every test binary uses it.
pub fn agent_sum(
    lab: &sluice_testbed::lab::Lab,
    host: &sluice_testbed::lab::HostInfo,
    family: &str,
    with: &str,
) -> u64 {
    let text = lab
        .state()
        .http()
        .get(&format!("{}/metrics", host.api))
        .call()
        .unwrap_or_else(|e| panic!("GET {}/metrics: {e}", host.api))
        .into_string()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(family) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
