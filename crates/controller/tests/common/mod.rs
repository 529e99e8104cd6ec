//! What the controller's integration tests share: a real server on loopback
//! (local state, plain HTTP: TLS has its own tests) and registrations of hosts
//! and VMs whose agents are not there (pushes fail quietly).
#![allow(dead_code)] // Each test binary uses its own part.

use std::net::Ipv4Addr;
use std::path::Path;

use sluice_controller::client::Client;
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::{HostCapacity, HostRegistration, VmRegistration};

/// Starts a controller with its database in `dir`; returns it and the
/// operator token `admin`'s secret.
pub fn start(dir: &Path) -> (ServerHandle, String) {
    start_with_state(dir, "local")
}

/// [`start`] with the state store at `state_url`.
pub fn start_with_state(dir: &Path, state_url: &str) -> (ServerHandle, String) {
    let token_file = dir.join("admin.token");
    let server = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: dir.join("c.db"),
        state_url: state_url.into(),
        admin_token_file: Some(token_file.clone()),
        fabric_auth: false,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    let admin = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    (server, admin)
}

/// Registers host `id` (underlay 10.255.0.ID) offering `capacity`; nothing
/// listens at its API address.
pub fn register_host(c: &Client, id: u32, capacity: Option<HostCapacity>) {
    c.register_host(&HostRegistration {
        host: id,
        name: format!("h{id}"),
        underlay: Ipv4Addr::new(10, 255, 0, id as u8),
        api: "http://127.0.0.1:9".into(),
        config_version: 0,
        api_token: None,
        capacity,
        api_csr: None,
    })
    .unwrap();
}

/// Registers `tenant`'s VM `name` on `host` with address `addr`.
pub fn register_vm(c: &Client, tenant: &str, name: &str, host: u32, addr: &str) {
    c.register_vm(&VmRegistration {
        tenant: tenant.into(),
        name: name.into(),
        host,
        iface: format!("v-{tenant}-{name}"),
        mac: "02:00:00:00:00:07".into(),
        addr: addr.parse().unwrap(),
        gateway: false,
    })
    .unwrap();
}

/// Sends `method path` with `body` (JSON if it starts with `{`, else YAML)
/// under bearer `token`; returns the status and the body.
pub fn call(
    base: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let mut req = ureq::request(method, &format!("{base}{path}"));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let ctype = if body.starts_with('{') {
        "application/json"
    } else {
        "application/yaml"
    };
    let r = if body.is_empty() {
        req.call()
    } else {
        req.set("Content-Type", ctype).send_string(body)
    };
    match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}
