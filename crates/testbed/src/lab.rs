//! The local testbed: a whole Sluice deployment on one machine.
//!
//! [`Lab::up`] builds, from a tenant spec:
//!
//! * a fabric namespace holding a bridge, and `hosts` host namespaces joined to it
//!   (underlay `10.255.0.H/24`, MTU 9000 so tunnelled 1500-byte frames fit);
//! * a namespace per service VM of the spec, attached to a host (round robin), and
//!   one gateway namespace per tenant holding an address in each external subnet
//!   (`.10` of the subnet), where the tenant's "Internet" clients live;
//! * a private `redis-server` (the NF state store), the controller and one agent per
//!   host, as processes on loopback (the management network);
//! * the VM registrations and the tenant spec, applied through the controller's API.
//!
//! Everything it creates is recorded in `DIR/testbed.json`, so [`Lab::down_dir`] (or
//! `sluice testbed down --dir DIR` from another process) removes it; a failure half
//! way through `up` tears down what was built. Names carry a per-run prefix, so
//! several labs (concurrent tests) never collide.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_proto::VmRegistration;
use sluice_tenant::{Element, TenantSpec};

use sluice_netns::Rtnl;

use crate::{vm, Netns, TestbedError};

mod replicated;
mod store;

pub use replicated::{EtcdMember, Replica};
pub use store::{StoreKind, StoreNode, CLUSTER_NODE_TIMEOUT_MS, CLUSTER_PRIMARIES};

/// What to bring up.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Tenant spec (YAML) to apply.
    pub spec: PathBuf,
    /// Number of hosts (at least 1).
    pub hosts: u32,
    /// Working directory: logs, databases, `testbed.json`.
    pub dir: PathBuf,
    /// The `sluice` binary (runs the controller).
    pub sluice: PathBuf,
    /// The `sluiced` binary (the host agent; it runs NF instances too).
    pub sluiced: PathBuf,
    /// Start nginx in every service VM, serving [`web_root`] files.
    pub web: bool,
    /// Run the agents with Seawall's rate control (`sluiced run --seawall`).
    pub seawall: bool,
    /// Seal the fabric between the hosts (the controller's `--fabric-auth`).
    pub fabric_auth: bool,
    /// The state store: one server, or a replicated cluster.
    pub store: StoreKind,
    /// Hosts whose agents run without Seawall's rate control even when
    /// `seawall` is on: stand-ins for subverted hosts that ignore congestion
    /// feedback (docs/ISOLATION.md, "Compromised hosts").
    pub subverted: Vec<u32>,
    /// Controllers: 1 runs one on a SQLite file; more run that many on a
    /// three-member etcd cluster, one leading (docs/RELIABILITY.md,
    /// "Replicated controllers").
    pub controllers: u32,
    /// Racks, uplinks and where VMs go (default: one flat fabric).
    pub topology: Topology,
    /// Forwarding threads of every agent (`dataplane_threads`; 0 counts as
    /// 1). The lab runs several agents on a small machine, so 1 unless a
    /// test or experiment asks for more.
    pub dataplane_threads: u32,
}

/// A lab's network beyond one flat fabric: racks of hosts whose uplinks to a
/// spine can be limited, VMs pinned to hosts, and the controller settings
/// that go with them (issue 27's placement experiment).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Topology {
    /// Racks (0 or 1: one flat fabric, no rack declared). With `n`, hosts
    /// are split into `n` consecutive blocks (`r1` holds the first), each
    /// block's hosts on a bridge of its own, every rack bridge joined to
    /// the spine bridge by an uplink ([`Lab::limit_rack_uplinks`]); each
    /// agent declares its rack.
    pub racks: u32,
    /// Hosts of VMs by name (the others go round robin as usual).
    pub vm_hosts: BTreeMap<String, u32>,
    /// More controller settings (`placement`, `distribution`,
    /// `rack_uplink`, ...), as in `controller.toml`.
    pub controller: BTreeMap<String, String>,
}

impl Topology {
    /// The rack of host `h` of `hosts` (None: flat).
    pub fn rack_of(&self, h: u32, hosts: u32) -> Option<u32> {
        (self.racks >= 2).then(|| 1 + (h - 1) * self.racks / hosts.max(1))
    }
}

/// A host of the lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host id (1-based).
    pub id: u32,
    /// Namespace.
    pub netns: String,
    /// Fabric address.
    pub underlay: Ipv4Addr,
    /// The agent's API.
    pub api: String,
    /// The pid of the agent's supervisor (`sluiced supervise`, which starts
    /// the agent again when it dies; 0 before it runs).
    #[serde(default)]
    pub supervisor: u32,
}

/// A VM of the lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmInfo {
    /// Tenant.
    pub tenant: String,
    /// VM name (as in the spec; `gateway` for the tenant's gateway).
    pub name: String,
    /// Namespace.
    pub netns: String,
    /// Host it is attached to.
    pub host: u32,
    /// Its addresses (the gateway has one per external subnet, and more).
    pub addrs: Vec<String>,
    /// Is the tenant's gateway.
    pub gateway: bool,
}

/// Everything a lab consists of; what `testbed.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabState {
    /// Name prefix of everything created.
    pub prefix: String,
    /// Working directory.
    pub dir: PathBuf,
    /// Namespaces to delete (the fabric, hosts, VMs).
    pub namespaces: Vec<String>,
    /// Processes to stop, in order (agents first, the store last).
    pub pids: Vec<u32>,
    /// The controller's URL.
    pub controller: String,
    /// The state store's URL: its admin user, with the password in a file
    /// (`redis://sluice-admin@127.0.0.1:PORT?password_file=DIR/store-admin.pw`;
    /// a cluster's is `redis-cluster://sluice-admin@H:P,H:P,...?password_file=...`,
    /// listing every node).
    pub store: String,
    /// Which store it is.
    #[serde(default)]
    pub store_kind: StoreKind,
    /// The store's processes (one for a single server).
    #[serde(default)]
    pub store_nodes: Vec<StoreNode>,
    /// The store's files (configurations, the admin password, a cluster's
    /// node directories), removed by `down`.
    #[serde(default)]
    pub store_files: Vec<PathBuf>,
    /// The fabric namespace and bridge (`tshark -i` there sees the tunnels).
    pub fabric: (String, String),
    /// Hosts.
    pub hosts: Vec<HostInfo>,
    /// VMs.
    pub vms: Vec<VmInfo>,
    /// The applied tenant's name.
    pub tenant: String,
    /// The controller's process id.
    #[serde(default)]
    pub controller_pid: u32,
    /// The `sluice` binary the controller runs from.
    #[serde(default)]
    pub sluice: PathBuf,
    /// The operator token's file (the controller's bootstrap `admin` token,
    /// mode 0600); the lab's own API calls send it.
    #[serde(default)]
    pub token_file: PathBuf,
    /// A `sluice` config file with a `testbed` context (this controller, that
    /// token): `export SLUICE_CONFIG=...` makes the CLI talk to the lab.
    #[serde(default)]
    pub config: PathBuf,
    /// The controller runs with `--fabric-auth off` (plain Geneve between the
    /// hosts; sealed is the default).
    #[serde(default)]
    pub fabric_auth_off: bool,
    /// The controller's own CA certificate (it serves its API over TLS with a
    /// certificate it signs at first start); agents and the CLI trust it.
    #[serde(default)]
    pub ca_file: PathBuf,
    /// Replicated controllers (empty: one controller).
    #[serde(default)]
    pub replicas: Vec<Replica>,
    /// The etcd members replicated controllers keep their state in.
    #[serde(default)]
    pub etcd: Vec<EtcdMember>,
    /// Every replicated controller's URL, comma-separated, as agents and the
    /// CLI are given them (empty: `controller` alone).
    #[serde(default)]
    pub controllers: String,
    /// Racks of the fabric (0: flat; see [`Topology::racks`]).
    #[serde(default)]
    pub racks: u32,
    /// More controller settings (see [`Topology::controller`]).
    #[serde(default)]
    pub controller_settings: BTreeMap<String, String>,
}

impl LabState {
    /// The operator token (empty if its file cannot be read: requests then
    /// fail with a 401 naming the problem).
    pub fn token(&self) -> String {
        fs::read_to_string(&self.token_file)
            .map(|t| t.trim().to_string())
            .unwrap_or_default()
    }

    /// The `Authorization` header value of the lab's API calls.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.token())
    }

    /// The hosts' CA: it signs the agents' API certificates (each for its
    /// host's name and its API's address), next to the controller's database.
    pub fn hosts_ca_file(&self) -> PathBuf {
        // Replicated controllers each keep a copy of the one CA, once they
        // led: any copy will do.
        (0..self.replicas.len())
            .map(|i| self.dir.join(format!("ctl{i}.hosts-ca.pem")))
            .find(|p| p.exists())
            .unwrap_or_else(|| self.ca_file.with_file_name("controller.hosts-ca.pem"))
    }

    /// What agents and the CLI are given: every controller's URL.
    pub fn controller_urls(&self) -> &str {
        if self.controllers.is_empty() {
            &self.controller
        } else {
            &self.controllers
        }
    }

    /// An HTTP client trusting the controller's CA and the hosts' CA (the
    /// agents' APIs, checked against their addresses); without a readable
    /// CA file, one trusting the web's roots (requests to the controller then
    /// fail naming the certificate).
    pub fn http(&self) -> ureq::Agent {
        let roots = fs::read(&self.ca_file).ok().map(|pem| {
            let mut roots = rustls::RootCertStore::empty();
            use rustls::pki_types::{pem::PemObject, CertificateDer};
            let hosts = fs::read(self.hosts_ca_file()).unwrap_or_default();
            for c in CertificateDer::pem_slice_iter(&pem)
                .chain(CertificateDer::pem_slice_iter(&hosts))
                .flatten()
            {
                let _ = roots.add(c);
            }
            roots
        });
        let config = roots.and_then(|roots| {
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .ok()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        });
        match config {
            Some(c) => ureq::AgentBuilder::new()
                .tls_config(std::sync::Arc::new(c))
                .build(),
            None => ureq::agent(),
        }
    }

    /// The VM called `name`.
    pub fn vm(&self, name: &str) -> Option<&VmInfo> {
        self.vms.iter().find(|v| v.name == name)
    }
}

/// A running lab; torn down on drop unless [`Lab::keep`] is called.
#[derive(Debug)]
pub struct Lab {
    state: LabState,
    armed: bool,
}

/// Why the lab could not come up.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Building namespaces or links failed.
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    /// Something else, described.
    #[error("{0}")]
    Other(String),
}

impl From<sluice_netns::NetnsError> for LabError {
    fn from(e: sluice_netns::NetnsError) -> LabError {
        LabError::Testbed(e.into())
    }
}

/// A [`LabError::Other`] from anything printable.
pub(crate) fn other(e: impl std::fmt::Display) -> LabError {
    LabError::Other(e.to_string())
}

/// Frames nginx serves in every web VM: `index.html` (the VM's name) and `blob`
/// (1 MiB, identical on every VM, so downloads can be compared by checksum).
pub fn web_root(dir: &Path, vm: &str) -> std::io::Result<PathBuf> {
    let root = dir.join(format!("www-{vm}"));
    fs::create_dir_all(&root)?;
    fs::write(root.join("index.html"), format!("{vm}\n"))?;
    fs::write(root.join("blob"), blob())?;
    Ok(root)
}

/// The 1 MiB test object every web VM serves (deterministic bytes).
pub fn blob() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The store's admin user in the lab (the controller connects as it).
pub const STORE_ADMIN: &str = "sluice-admin";

/// `n` random bytes, hex.
fn random_hex(n: usize) -> Result<String, LabError> {
    let mut b = vec![0u8; n];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| other(format!("/dev/urandom: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes `text` to a new file only its owner may read.
fn write_private(path: &Path, text: &str) -> Result<(), LabError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // A file left by an earlier lab in this directory is replaced, never reused
    // with whatever mode it had.
    let _ = fs::remove_file(path);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| other(format!("{}: {e}", path.display())))
}

fn free_port() -> Result<u16, LabError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(other)?;
    Ok(l.local_addr().map_err(other)?.port())
}

fn wait_tcp(port: u16, what: &str, child: &mut Child, log: &Path) -> Result<(), LabError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            let mut text = String::new();
            let _ = fs::File::open(log).and_then(|mut f| f.read_to_string(&mut text));
            return Err(LabError::Other(format!(
                "{what} exited ({st}) before listening; its log ({}):\n{}",
                log.display(),
                text.lines().rev().take(15).collect::<Vec<_>>().join("\n")
            )));
        }
        if Instant::now() > deadline {
            return Err(LabError::Other(format!(
                "{what} did not listen on 127.0.0.1:{port} within 20 s (log: {})",
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes a daemon's configuration file (owner only: it names the files
/// that hold secrets).
fn write_toml(path: &Path, t: &toml::Table) -> Result<(), LabError> {
    let text = toml::to_string(t).map_err(|e| other(format!("{}: {e}", path.display())))?;
    write_private(path, &text)
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> Result<Child, LabError> {
    let f = fs::File::create(log).map_err(|e| other(format!("{}: {e}", log.display())))?;
    let f2 = f.try_clone().map_err(other)?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2));
    // Own process group: a terminal's ^C to `sluice testbed up` does not reach the
    // daemons, and `down` can signal each daemon's whole group.
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    cmd.spawn()
        .map_err(|e| other(format!("cannot start {:?}: {e}", cmd.get_program())))
}

/// Writes `text` to `path`, readable by its owner only (a secret).
fn write_secret(path: &Path, text: &str) -> Result<(), LabError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let err = |e: std::io::Error| other(format!("{}: {e}", path.display()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

/// A minimal HTTP client call against the controller (JSON or YAML bodies),
/// with the lab's operator token.
pub(crate) fn http(
    st: &LabState,
    method: &str,
    url: &str,
    body: Option<(&str, &str)>,
) -> Result<String, LabError> {
    let req = st
        .http()
        .request(method, url)
        .timeout(Duration::from_secs(10))
        .set("Authorization", &st.bearer());
    let r = match body {
        Some((ctype, b)) => req.set("Content-Type", ctype).send_string(b),
        None => req.call(),
    };
    match r {
        Ok(resp) => resp.into_string().map_err(other),
        Err(ureq::Error::Status(code, resp)) => Err(LabError::Other(format!(
            "{method} {url}: HTTP {code}: {}",
            resp.into_string().unwrap_or_default()
        ))),
        Err(e) => Err(LabError::Other(format!("{method} {url}: {e}"))),
    }
}

impl Lab {
    /// Brings the lab up; on failure, removes whatever it had created.
    pub fn up(opts: &LabOptions) -> Result<Lab, LabError> {
        let text = fs::read_to_string(&opts.spec)
            .map_err(|e| other(format!("{}: {e}", opts.spec.display())))?;
        let spec =
            TenantSpec::parse(&text, &opts.spec.display().to_string(), None).map_err(other)?;
        if opts.hosts == 0 || opts.hosts > 99 {
            return Err(other("--hosts must be between 1 and 99"));
        }
        for (what, p) in [("sluice", &opts.sluice), ("sluiced", &opts.sluiced)] {
            if !p.is_file() {
                return Err(other(format!(
                    "{what} binary not found at {} (build it: cargo build -p sluice-cli -p sluice-agent)",
                    p.display()
                )));
            }
        }
        fs::create_dir_all(&opts.dir).map_err(|e| other(format!("{}: {e}", opts.dir.display())))?;
        let dir = fs::canonicalize(&opts.dir).map_err(other)?;
        // A new lab is a new deployment: a controller database left in the
        // directory by an earlier lab (its tenants, scaled counts, hosts) must not
        // carry over. (`restart_controller` reuses the database on purpose.)
        for f in [
            "controller.db",
            "controller.db-wal",
            "controller.db-shm",
            "controller.ca.pem",
            "controller.tls.pem",
            "controller.tls.key",
            "controller.hosts-ca.pem",
            "controller.hosts-ca.key",
        ] {
            match fs::remove_file(dir.join(f)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(other(format!("{}: {e}", dir.join(f).display())));
                }
                _ => {}
            }
        }
        // Nor may the hosts' run directories: an agent would load its saved
        // configuration from the earlier lab, and the gathered EVE logs would
        // show that lab's alerts as this one's. Nor the replicated
        // controllers' files (`ctlN.db`, `ctlN.hosts-ca.pem`, ...): a hosts'
        // CA left by an earlier lab is not the one this lab's agents'
        // certificates are signed with, and calls to the agents would fail.
        for e in fs::read_dir(&dir).map_err(other)?.flatten() {
            let path = e.path();
            let gone = match left_by_an_earlier_lab(&e.file_name().to_string_lossy(), path.is_dir())
            {
                Some(true) => fs::remove_dir_all(&path),
                Some(false) => fs::remove_file(&path),
                None => Ok(()),
            };
            gone.map_err(|err| other(format!("{}: {err}", path.display())))?;
        }
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Fixed width, and unlike `unique_name`'s "sl...": no lab's prefix is a prefix
        // of another's, so tearing down by prefix never touches a neighbour.
        // Short too: the agents append `h<id>` and must stay within 9 bytes.
        let prefix = format!("s{:04}{}", std::process::id() % 10_000, n % 10);
        let mut lab = Lab {
            state: LabState {
                prefix: prefix.clone(),
                dir: dir.clone(),
                tenant: spec.tenant.clone(),
                fabric_auth_off: !opts.fabric_auth,
                controller_settings: opts.topology.controller.clone(),
                ..LabState::default()
            },
            armed: true,
        };
        // Record as we go: a failure below drops `lab`, which tears down exactly
        // what was recorded.
        lab.build(opts, &spec, &text)?;
        lab.save()?;
        Ok(lab)
    }

    fn save(&self) -> Result<(), LabError> {
        let path = self.state.dir.join("testbed.json");
        let json = serde_json::to_string_pretty(&self.state).map_err(other)?;
        fs::write(&path, json).map_err(|e| other(format!("{}: {e}", path.display())))
    }

    fn netns(&mut self, name: &str) -> Result<String, LabError> {
        let ns = Netns::create(name)?.keep();
        self.state.namespaces.push(ns.clone());
        self.save()?;
        Ok(ns)
    }

    fn build(&mut self, opts: &LabOptions, spec: &TenantSpec, text: &str) -> Result<(), LabError> {
        let p = self.state.prefix.clone();
        let dir = self.state.dir.clone();

        // Fabric and hosts.
        let fab = self.netns(&format!("{p}fab"))?;
        // The fabric stands for the datacenter's switches.
        vm::no_bridge_netfilter(&fab);
        let rf = Rtnl::open(Some(&fab))?;
        rf.add_bridge("br0")?;
        rf.set_mtu("br0", 9000)?;
        rf.set_up("br0", true)?;
        self.state.fabric = (fab.clone(), "br0".into());
        // Racks: a bridge each, joined to the spine (`br0`) by an uplink.
        let racks = if opts.topology.racks >= 2 {
            opts.topology.racks.min(opts.hosts)
        } else {
            0
        };
        for r in 1..=racks {
            let (bridge, up, down) = rack_links(&p, r);
            rf.add_bridge(&bridge)?;
            rf.set_mtu(&bridge, 9000)?;
            rf.set_up(&bridge, true)?;
            rf.add_veth(&up, &down, None)?;
            for (dev, master) in [(&up, &bridge), (&down, &"br0".to_string())] {
                rf.set_mtu(dev, 9000)?;
                rf.set_master(dev, master)?;
                rf.set_up(dev, true)?;
            }
        }
        self.state.racks = racks;
        for h in 1..=opts.hosts {
            let ns = self.netns(&format!("{p}h{h}"))?;
            vm::sysctl(&ns, "net.ipv6.conf.all.disable_ipv6", "1");
            let outer = format!("{p}f{h}");
            // Both ends are created in their namespaces at once: a fixed name
            // like `fab0` must never exist in the root namespace, where
            // concurrent labs would collide on it.
            let underlay = Ipv4Addr::new(10, 255, 0, h as u8);
            (|| {
                rf.add_veth(&outer, "fab0", Some(&ns))?;
                rf.set_mtu(&outer, 9000)?;
                let bridge = match opts.topology.rack_of(h, opts.hosts).filter(|_| racks > 0) {
                    Some(r) => rack_links(&p, r).0,
                    None => "br0".to_string(),
                };
                rf.set_master(&outer, &bridge)?;
                rf.set_up(&outer, true)?;
                let rh = Rtnl::open(Some(&ns))?;
                rh.set_mtu("fab0", 9000)?;
                rh.add_addr("fab0", underlay, 24)?;
                rh.set_up("fab0", true)
            })()?;
            self.state.hosts.push(HostInfo {
                id: h,
                netns: ns,
                underlay,
                api: String::new(),
                supervisor: 0,
            });
        }

        // The state store.
        self.start_store(opts.store)?;

        // The controller(s).
        self.state.sluice = opts.sluice.clone();
        if opts.controllers > 1 {
            self.start_replicated(opts.controllers)?;
        } else {
            let ctl_port = free_port()?;
            self.start_controller(ctl_port)?;
        }
        self.write_cli_config()?;

        // Agents, each with a token of its own host's role.
        for i in 0..self.state.hosts.len() {
            let h = self.state.hosts[i].clone();
            let port = free_port()?;
            let run_dir = dir.join(format!("h{}", h.id));
            fs::create_dir_all(&run_dir).map_err(other)?;
            let log = dir.join(format!("agent-h{}.log", h.id));
            let token_file = dir.join(format!("h{}.token", h.id));
            let created = http(
                &self.state,
                "POST",
                &format!("{}/v1/tokens", self.state.controller),
                Some((
                    "application/json",
                    &serde_json::json!({
                        "name": format!("host-{}", h.id),
                        "role": format!("host:{}", h.id),
                    })
                    .to_string(),
                )),
            )?;
            let secret = serde_json::from_str::<serde_json::Value>(&created)
                .ok()
                .and_then(|v| v["token"].as_str().map(str::to_string))
                .ok_or_else(|| other(format!("POST /v1/tokens answered {created}")))?;
            write_secret(&token_file, &format!("{secret}\n"))?;
            // The agent reads what a real host's would: a configuration
            // file (packaging/etc/agent.toml), here with the host's namespace.
            let mut t = toml::Table::new();
            t.insert("host_id".into(), i64::from(h.id).into());
            t.insert("name".into(), h.netns.clone().into());
            t.insert("netns".into(), h.netns.clone().into());
            t.insert("underlay_interface".into(), "fab0".into());
            t.insert("underlay".into(), h.underlay.to_string().into());
            t.insert(
                "controller".into(),
                self.state.controller_urls().to_string().into(),
            );
            t.insert("token_file".into(), token_file.display().to_string().into());
            t.insert(
                "ca_file".into(),
                self.state.ca_file.display().to_string().into(),
            );
            t.insert("listen".into(), format!("127.0.0.1:{port}").into());
            t.insert("prefix".into(), format!("{p}h{}", h.id).into());
            t.insert("run_dir".into(), run_dir.display().to_string().into());
            t.insert("fabric_auth".into(), (!self.state.fabric_auth_off).into());
            if let Some(r) = opts
                .topology
                .rack_of(h.id, opts.hosts)
                .filter(|_| racks > 0)
            {
                t.insert("rack".into(), format!("r{r}").into());
            }
            let seawall = opts.seawall && !opts.subverted.contains(&h.id);
            t.insert("seawall".into(), seawall.into());
            t.insert(
                "dataplane_threads".into(),
                i64::from(opts.dataplane_threads.max(1)).into(),
            );
            let conf = dir.join(format!("agent-h{}.toml", h.id));
            write_toml(&conf, &t)?;
            // Supervised, as systemd supervises the agent on a real host: a
            // killed agent is started again and heals its host.
            let mut cmd = Command::new(&opts.sluiced);
            cmd.arg("supervise").arg("--config").arg(&conf);
            if seawall {
                // Tuning for experiments: extra agent flags from the environment.
                if let Ok(extra) = std::env::var("SLUICE_SEAWALL_ARGS") {
                    cmd.args(extra.split_whitespace());
                }
            }
            let mut child = spawn_logged(&mut cmd, &log)?;
            self.state.pids.insert(0, child.id());
            self.state.hosts[i].supervisor = child.id();
            // The lab's controller speaks TLS, so its agents' APIs do too.
            self.state.hosts[i].api = format!("https://127.0.0.1:{port}");
            self.save()?;
            wait_tcp(
                port,
                &format!("the agent of host {}", h.id),
                &mut child,
                &log,
            )?;
        }

        // VMs: the gateway on host 1, services round robin over the hosts.
        let nhosts = opts.hosts;
        let mut k = 0u32;
        let mut gw_addrs = Vec::new();
        let mut services = Vec::new();
        for (name, e) in &spec.elements {
            match e {
                Element::External { subnets } => {
                    for s in subnets {
                        if let sluice_wire::IpAddr::V4(a) = s.network() {
                            let o = a;
                            gw_addrs.push(format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3] + 10));
                            gw_addrs.push(format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3] + 66));
                        }
                    }
                }
                Element::Service { vms } => {
                    for v in vms {
                        services.push((name.clone(), v.name.clone(), v.addr.to_string()));
                    }
                }
                _ => {}
            }
        }
        let mut attach = |lab: &mut Lab,
                          name: &str,
                          host: u32,
                          addrs: Vec<String>,
                          gateway: bool|
         -> Result<(), LabError> {
            k += 1;
            let ns = lab.netns(&format!("{p}-{name}"))?;
            let host_ns = lab.state.hosts[(host - 1) as usize].netns.clone();
            let iface = format!("{p}v{k}");
            let mac = format!("02:00:00:00:{:02x}:{:02x}", k >> 8, k & 0xff);
            vm::attach(&host_ns, &iface, &ns, &addrs, &mac)?;
            let reg = VmRegistration {
                tenant: spec.tenant.clone(),
                name: name.to_string(),
                host,
                iface,
                mac,
                addr: addrs[0].parse().map_err(other)?,
                gateway,
            };
            http(
                &lab.state,
                "PUT",
                &format!("{}/v1/vms/{}/{}", lab.state.controller, spec.tenant, name),
                Some((
                    "application/json",
                    &serde_json::to_string(&reg).map_err(other)?,
                )),
            )?;
            lab.state.vms.push(VmInfo {
                tenant: spec.tenant.clone(),
                name: name.to_string(),
                netns: ns,
                host,
                addrs,
                gateway,
            });
            lab.save()
        };
        if !gw_addrs.is_empty() {
            attach(self, "gateway", 1, gw_addrs, true)?;
        }
        for (i, (_svc, name, addr)) in services.iter().enumerate() {
            // Host 2 first: the gateway is on host 1, so chains cross the fabric.
            let host = match opts.topology.vm_hosts.get(name) {
                Some(h) if (1..=nhosts).contains(h) => *h,
                Some(h) => {
                    return Err(other(format!(
                        "VM `{name}` is pinned to host {h}, but the lab has hosts 1-{nhosts}"
                    )))
                }
                None => 1 + ((i as u32 + 1) % nhosts),
            };
            attach(self, name, host, vec![addr.clone()], false)?;
        }

        // Wait until every agent registered, then apply.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let hosts = http(
                &self.state,
                "GET",
                &format!("{}/v1/hosts", self.state.controller),
                None,
            )?;
            let v: serde_json::Value = serde_json::from_str(&hosts).map_err(other)?;
            let n = v
                .as_array()
                .or_else(|| v.get("hosts").and_then(|h| h.as_array()))
                .map(|a| a.len())
                .unwrap_or(0);
            if n >= self.state.hosts.len() {
                break;
            }
            if Instant::now() > deadline {
                return Err(other(format!(
                    "only {n} of {} agents registered with the controller within 20 s (logs in {})",
                    self.state.hosts.len(),
                    dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        http(
            &self.state,
            "PUT",
            &format!("{}/v1/tenants/{}", self.state.controller, spec.tenant),
            Some(("application/yaml", text)),
        )?;
        self.wait_in_sync(Duration::from_secs(20))?;

        if opts.web {
            for v in self.state.vms.clone() {
                if v.gateway {
                    continue;
                }
                let root = web_root(&dir, &v.name).map_err(other)?;
                let pid = start_nginx(&dir, &v, &root)?;
                self.state.pids.insert(0, pid);
                self.save()?;
            }
        }
        Ok(())
    }

    /// A controller's settings file as deployed (packaging/etc/controller.toml):
    /// listening on loopback `port`, its database `db`, the lab's store, the
    /// admin token written to `token_file`, TLS on, the fabric sealed unless
    /// the lab turned it off.
    fn controller_settings(&self, port: u16, db: &Path, token_file: &Path) -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("listen".into(), format!("127.0.0.1:{port}").into());
        t.insert("db".into(), db.display().to_string().into());
        t.insert("state".into(), self.state.store.clone().into());
        t.insert(
            "admin_token_file".into(),
            token_file.display().to_string().into(),
        );
        t.insert("tls".into(), "on".into());
        let sealed = if self.state.fabric_auth_off {
            "off"
        } else {
            "on"
        };
        t.insert("fabric_auth".into(), sealed.into());
        // `true` and `false` are the file's booleans (flags like
        // `distribution_classes`); everything else a string, as given.
        for (k, v) in &self.state.controller_settings {
            let value = match v.as_str() {
                "true" => toml::Value::Boolean(true),
                "false" => toml::Value::Boolean(false),
                _ => v.clone().into(),
            };
            t.insert(k.clone(), value);
        }
        t
    }

    fn start_controller(&mut self, port: u16) -> Result<(), LabError> {
        let dir = self.state.dir.clone();
        let n = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .map(|e| e.file_name().to_string_lossy().starts_with("controller"))
                        .unwrap_or(false)
                })
                .count()
            })
            .unwrap_or(0);
        let log = dir.join(if n == 0 {
            "controller.log".to_string()
        } else {
            format!("controller-{n}.log")
        });
        let db = dir.join("controller.db");
        // Written at the first start (the database of a new lab has no
        // token), kept by restarts.
        let token_file = dir.join("admin.token");
        // TLS as deployed: the controller makes its CA next to the database.
        let t = self.controller_settings(port, &db, &token_file);
        let conf = dir.join("controller.toml");
        write_toml(&conf, &t)?;
        let mut child = spawn_logged(
            Command::new(&self.state.sluice)
                .arg("controller")
                .arg("--config")
                .arg(&conf),
            &log,
        )?;
        self.state.token_file = token_file;
        self.state.ca_file = dir.join("controller.ca.pem");
        let old = self.state.controller_pid;
        self.state.pids.retain(|&p| p != old);
        self.state.pids.insert(0, child.id());
        self.state.controller_pid = child.id();
        self.save()?;
        wait_tcp(port, "the controller", &mut child, &log)?;
        self.state.controller = format!("https://127.0.0.1:{port}");
        self.save()
    }

    /// Writes `sluice-config.yaml` with a `testbed` context: this controller,
    /// the operator token's file (named, not copied: the config holds no
    /// secret).
    fn write_cli_config(&mut self) -> Result<(), LabError> {
        let path = self.state.dir.join("sluice-config.yaml");
        let text = format!(
            "# `export SLUICE_CONFIG={}` points the sluice CLI at this testbed.\n\
             current_context: testbed\n\
             contexts:\n  \
             - name: testbed\n    \
               controller: {}\n    \
               token_file: {}\n    \
               ca_file: {}\n",
            path.display(),
            self.state.controller_urls(),
            self.state.token_file.display(),
            self.state.ca_file.display()
        );
        fs::write(&path, text).map_err(|e| other(format!("{}: {e}", path.display())))?;
        self.state.config = path;
        self.save()
    }

    /// Kills the controller (SIGKILL; replicated: the leader): the agents keep forwarding with what they
    /// have.
    pub fn kill_controller(&mut self) {
        if !self.state.replicas.is_empty() {
            // None leading within a second: no controller serves, and
            // there is nothing to kill.
            let _ = self.kill_leader();
            return;
        }
        let pid = self.state.controller_pid as i32;
        // SAFETY: signalling and reaping our own child process group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }

    /// Starts the controller again on the same port and database (replicated:
    /// the killed one, as a candidate, and waits for a leader).
    pub fn restart_controller(&mut self) -> Result<(), LabError> {
        if !self.state.replicas.is_empty() {
            // Replicated: the killed one starts again as a candidate; the
            // lab's URL follows whichever leads.
            for i in 0..self.state.replicas.len() {
                if self.state.replicas[i].pid == 0 {
                    self.start_replica(i)?;
                }
            }
            self.leader(Duration::from_secs(30))?;
            return Ok(());
        }
        let port: u16 = self
            .state
            .controller
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| other("no controller address recorded"))?;
        self.start_controller(port)
    }

    /// Restarts the controller with the fabric sealed or plain and waits until
    /// every agent runs the result.
    pub fn set_fabric_auth(&mut self, on: bool, within: Duration) -> Result<(), LabError> {
        self.state.fabric_auth_off = !on;
        self.kill_controller();
        self.restart_controller()?;
        self.wait_in_sync(within)
    }

    /// Waits until every agent runs its desired configuration and every NF
    /// instance is alive.
    pub fn wait_in_sync(&self, within: Duration) -> Result<(), LabError> {
        let deadline = Instant::now() + within;
        loop {
            let body = http(
                &self.state,
                "GET",
                &format!("{}/v1/hosts", self.state.controller),
                None,
            )?;
            let hosts: serde_json::Value = serde_json::from_str(&body).map_err(other)?;
            let synced = hosts
                .as_array()
                .or_else(|| hosts.get("hosts").and_then(|h| h.as_array()))
                .map(|a| {
                    a.iter().all(|h| {
                        let d = h.get("desired_version").or_else(|| h.get("config_version"));
                        let r = h.get("reported_version");
                        d.is_some() && r.is_some() && d == r
                    })
                })
                .unwrap_or(false);
            let inst = http(
                &self.state,
                "GET",
                &format!("{}/v1/instances", self.state.controller),
                None,
            )?;
            let iv: serde_json::Value = serde_json::from_str(&inst).map_err(other)?;
            let alive = iv
                .as_array()
                .or_else(|| iv.get("instances").and_then(|h| h.as_array()))
                .map(|a| {
                    a.iter()
                        .all(|i| i.get("alive").and_then(|x| x.as_bool()) == Some(true))
                })
                .unwrap_or(false);
            if synced && alive {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(other(format!(
                    "the agents did not converge within {within:?}:\nhosts: {body}\ninstances: {inst}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the lab consists of.
    pub fn state(&self) -> &LabState {
        &self.state
    }

    /// The pid of host `host`'s agent process (the supervisor's child), if
    /// it runs.
    pub fn agent_pid(&self, host: u32) -> Option<u32> {
        let sup = self.state.hosts.iter().find(|h| h.id == host)?.supervisor;
        children_of(sup).into_iter().find(|p| {
            // `sluiced run ...`: the agent, not some other child.
            fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(&b"run"[..]))
        })
    }

    /// Kills host `host`'s agent with SIGKILL (not its supervisor, which
    /// starts it again); returns the pid killed.
    pub fn kill_agent(&self, host: u32) -> Result<u32, LabError> {
        let pid = self
            .agent_pid(host)
            .ok_or_else(|| other(format!("host {host} has no running agent")))?;
        // SAFETY: kill(2) on the agent process found under our supervisor.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
        Ok(pid)
    }

    /// Cuts host `host` off the fabric at the switch (its bridge port goes
    /// down): what the datacenter's switches do to a host the controller
    /// contains ("Seawall uses existing switch security features", §4). The
    /// management network (loopback) is untouched.
    pub fn fence(&self, host: u32) -> Result<(), LabError> {
        let (fab, _) = &self.state.fabric;
        let dev = format!("{}f{host}", self.state.prefix);
        let out = Command::new("ip")
            .args(["-n", fab, "link", "set", &dev, "down"])
            .output()
            .map_err(|e| other(format!("cannot run ip (iproute2): {e}")))?;
        if !out.status.success() {
            return Err(other(format!(
                "fencing host {host} ({dev} in {fab}): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Limits the fabric link into host `host` (the bridge's port toward it) to
    /// `mbit` Mbit/s with a token-bucket queue of `queue_kb` KiB: a congested
    /// downlink, shared by everything sent to that host. `tc` from iproute2.
    pub fn limit_link_into(&self, host: u32, mbit: u32, queue_kb: u32) -> Result<(), LabError> {
        let (fab, _) = &self.state.fabric;
        let dev = format!("{}f{host}", self.state.prefix);
        let out = Command::new("tc")
            .args([
                "-n",
                fab,
                "qdisc",
                "replace",
                "dev",
                &dev,
                "root",
                "tbf",
                "rate",
                &format!("{mbit}mbit"),
                // A burst of 64 KiB lets a whole UDP super-datagram through
                // at once, as a switch port would.
                "burst",
                "64kb",
                "limit",
                &format!("{}kb", queue_kb.max(64)),
            ])
            .output()
            .map_err(|e| other(format!("cannot run tc (iproute2): {e}")))?;
        if !out.status.success() {
            return Err(other(format!(
                "tc on {dev} in {fab}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Limits every rack's uplink to `mbit` Mbit/s each way (a token bucket
    /// with a queue of `queue_kb` KiB on both ends of the link between the
    /// rack's bridge and the spine), or removes the limits with `None`.
    pub fn limit_rack_uplinks(&self, mbit: Option<u32>, queue_kb: u32) -> Result<(), LabError> {
        let (fab, _) = &self.state.fabric;
        for r in 1..=self.state.racks {
            let (_, up, down) = rack_links(&self.state.prefix, r);
            for dev in [&up, &down] {
                let mut args: Vec<String> = ["-n", fab, "qdisc"].map(String::from).to_vec();
                match mbit {
                    Some(m) => args.extend([
                        "replace".to_string(),
                        "dev".into(),
                        dev.clone(),
                        "root".into(),
                        "tbf".into(),
                        "rate".into(),
                        format!("{m}mbit"),
                        "burst".into(),
                        "64kb".into(),
                        "limit".into(),
                        format!("{}kb", queue_kb.max(64)),
                    ]),
                    None => args.extend(["del", "dev", dev.as_str(), "root"].map(String::from)),
                }
                let out = Command::new("tc")
                    .args(&args)
                    .output()
                    .map_err(|e| other(format!("cannot run tc (iproute2): {e}")))?;
                // Deleting a qdisc that is not there is not a failure.
                if !out.status.success() && mbit.is_some() {
                    return Err(other(format!(
                        "tc on {dev} in {fab}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Bytes that crossed each rack's uplink so far: (rack, up, down), up
    /// being what the rack sent to the spine.
    pub fn rack_uplink_bytes(&self) -> Result<Vec<(u32, u64, u64)>, LabError> {
        let (fab, _) = &self.state.fabric;
        let mut out = Vec::new();
        for r in 1..=self.state.racks {
            let (_, up, down) = rack_links(&self.state.prefix, r);
            // Transmitted by each end toward the other: the rack-side end
            // sends up, the spine-side end sends down.
            let tx = |dev: &str| -> Result<u64, LabError> {
                let o = Command::new("ip")
                    .args(["-n", fab, "-j", "-s", "link", "show", "dev", dev])
                    .output()
                    .map_err(|e| other(format!("cannot run ip: {e}")))?;
                let v: serde_json::Value = serde_json::from_slice(&o.stdout)
                    .map_err(|e| other(format!("ip -j -s link show {dev}: {e}")))?;
                v[0]["stats64"]["tx"]["bytes"]
                    .as_u64()
                    .ok_or_else(|| other(format!("no tx bytes for {dev} in {fab}")))
            };
            out.push((r, tx(&up)?, tx(&down)?));
        }
        Ok(out)
    }

    /// Runs `cmd` inside VM `vm`'s namespace and returns (success, stdout, stderr).
    pub fn vm_exec(&self, vm: &str, cmd: &[&str]) -> Result<(bool, String, String), LabError> {
        let v = self
            .state
            .vm(vm)
            .ok_or_else(|| other(format!("no VM called `{vm}` in this lab")))?;
        let out = Command::new("ip")
            .args(["netns", "exec", &v.netns])
            .args(cmd)
            .output()
            .map_err(|e| other(format!("run {cmd:?} in {vm}: {e}")))?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Leaves the lab running (for `sluice testbed up`); `down(dir)` removes it.
    pub fn keep(mut self) -> LabState {
        self.armed = false;
        self.state.clone()
    }

    /// Stops every process and removes every namespace of the lab in `dir`.
    pub fn down_dir(dir: &Path) -> Result<LabState, LabError> {
        let path = dir.join("testbed.json");
        let text = fs::read_to_string(&path)
            .map_err(|e| other(format!("{}: {e} (no testbed there?)", path.display())))?;
        let state: LabState =
            serde_json::from_str(&text).map_err(|e| other(format!("{}: {e}", path.display())))?;
        teardown(&state);
        let _ = fs::remove_file(&path);
        Ok(state)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.armed {
            teardown(&self.state);
            let _ = fs::remove_file(self.state.dir.join("testbed.json"));
        }
    }
}

fn start_nginx(dir: &Path, v: &VmInfo, root: &Path) -> Result<u32, LabError> {
    let base = dir.join(format!("nginx-{}", v.name));
    fs::create_dir_all(base.join("logs")).map_err(other)?;
    let conf = format!(
        "worker_processes 1;\n\
         pid {base}/nginx.pid;\n\
         error_log {base}/logs/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
           access_log {base}/logs/access.log;\n\
           client_body_temp_path {base}/body;\n\
           proxy_temp_path {base}/proxy;\n\
           fastcgi_temp_path {base}/fastcgi;\n\
           uwsgi_temp_path {base}/uwsgi;\n\
           scgi_temp_path {base}/scgi;\n\
           server {{\n\
             listen {addr}:80; root {root};\n\
             location /paced/ {{ alias {root}/; limit_rate $arg_rate; }}\n\
           }}\n\
         }}\n",
        base = base.display(),
        addr = v.addrs[0],
        root = root.display(),
    );
    let conf_path = base.join("nginx.conf");
    fs::write(&conf_path, conf).map_err(other)?;
    let log = base.join("stdout.log");
    let child = spawn_logged(
        Command::new("ip").args([
            "netns",
            "exec",
            &v.netns,
            "nginx",
            "-c",
            &conf_path.display().to_string(),
            "-g",
            "daemon off;",
        ]),
        &log,
    )?;
    let pid = child.id();
    // Listening check from inside the VM (nginx binds the VM's address).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ok = Command::new("ip")
            .args(["netns", "exec", &v.netns, "ss", "-Hltn", "sport = :80"])
            .output()
            .map(|o| !o.stdout.is_empty())
            .unwrap_or(false);
        if ok {
            return Ok(pid);
        }
        if Instant::now() > deadline {
            return Err(other(format!(
                "nginx did not start in {} (see {})",
                v.name,
                base.join("logs/error.log").display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGTERM to each process group, waits briefly, then SIGKILL, and deletes
/// namespaces (which removes their interfaces).
fn teardown(state: &LabState) {
    for &pid in &state.pids {
        // SAFETY: signalling a process group we created; harmless if it is gone.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for &pid in &state.pids {
        while Instant::now() < deadline && Path::new(&format!("/proc/{pid}")).exists() {
            // Reap if it is our child; otherwise just wait for it to go.
            // SAFETY: waitpid with WNOHANG on a pid; fails harmlessly if not a child.
            unsafe {
                libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG);
            }
            if is_zombie_or_gone(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
            libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG);
        }
    }
    store::remove_files(&state.store_files);
    // Namespaces made by the agents for NF instances carry the lab's prefix too.
    let mut all: Vec<String> = state.namespaces.clone();
    for name in sluice_netns::list() {
        if !state.prefix.is_empty() && name.starts_with(&state.prefix) && !all.contains(&name) {
            all.push(name);
        }
    }
    for ns in all.iter().rev() {
        let _ = sluice_netns::delete(ns);
    }
}

/// The live child processes of `pid` (from /proc, not only our own
/// children's).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // After the command name (which may hold spaces, hence the last ')'):
        // state, then the parent's pid.
        let mut rest = stat.rsplit_once(')').map_or("", |x| x.1).split_whitespace();
        let state = rest.next();
        if rest.next().and_then(|p| p.parse::<u32>().ok()) == Some(pid) && state != Some("Z") {
            out.push(child);
        }
    }
    out.sort_unstable();
    out
}

fn is_zombie_or_gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => true,
    }
}

/// Rack `r`'s bridge, and the two ends of its uplink (the rack's end, the
/// spine's end), all in the fabric namespace.
fn rack_links(prefix: &str, r: u32) -> (String, String, String) {
    (
        format!("rk{r}"),
        format!("{prefix}u{r}"),
        format!("{prefix}s{r}"),
    )
}

/// Whether an entry of a lab's directory is the run state of an earlier lab
/// that a new lab must not inherit: a host's run directory (`hN/`, `Some(true)`:
/// remove the directory) or a replicated controller's file (`ctlN.db`,
/// `ctlN.hosts-ca.pem`, ..., `Some(false)`: remove the file). `None` keeps it.
fn left_by_an_earlier_lab(name: &str, is_dir: bool) -> Option<bool> {
    let digits = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    if is_dir && name.strip_prefix('h').is_some_and(digits) {
        return Some(true);
    }
    let replica = name
        .strip_prefix("ctl")
        .and_then(|n| n.split_once('.'))
        .is_some_and(|(n, _)| digits(n));
    (!is_dir && replica).then_some(false)
}

#[cfg(test)]
mod left_tests {
    #[test]
    fn an_earlier_labs_hosts_and_replicas_are_not_inherited() {
        use super::left_by_an_earlier_lab as left;
        assert_eq!(left("h1", true), Some(true));
        assert_eq!(left("h12", true), Some(true));
        assert_eq!(left("h1.token", false), None, "rewritten by every lab");
        assert_eq!(left("ctl0.hosts-ca.pem", false), Some(false));
        assert_eq!(left("ctl2.db", false), Some(false));
        assert_eq!(left("ctlx.db", false), None);
        assert_eq!(left("ctl1", true), None);
        assert_eq!(left("hosts", true), None);
        assert_eq!(left("nginx-web-a1", true), None);
    }
}
