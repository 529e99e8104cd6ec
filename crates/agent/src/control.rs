//! The agent as a whole: configuration handling, heartbeat to the controller,
//! status and metrics, tying together the data-plane thread, the API server and
//! the instance supervisor.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use sluice_proto::{
    AgentConfig, AgentStatus, ConfigDelta, DeltaError, HostHeartbeat, HostRegistration,
    InstanceHealth, IsolationStatus, LatencyHistogram, PortStatus, LATENCY_BOUNDS_SECONDS,
};

use crate::dataplane::{ConfigError, Dataplane, DropReason};
use crate::instances::{InstanceEnv, Supervisor};
use crate::io::{DataplaneThread, IoOptions};

/// How long after the controller last answered the agent may still grant leases
/// to its instances while it heartbeats every [`HEARTBEAT_EVERY`] (longer
/// when told a longer interval: [`sluice_proto::lease_grace`]). The controller
/// waits this long (plus a lease's validity) for an agent that does not
/// acknowledge a revocation before it changes a leased split without it.
pub const LEASE_CONTROLLER_GRACE: Duration = sluice_proto::LEASE_CONTROLLER_GRACE;

/// How often the agent heartbeats to the controller (with its instances'
/// health) until the controller tells it an interval (the answer's
/// `heartbeat_ms`: longer in a large fleet, [`sluice_proto::heartbeat_interval`]),
/// and how often it looks, between heartbeats, for news that cannot wait for
/// the next one.
pub const HEARTBEAT_EVERY: Duration = sluice_proto::HEARTBEAT_MIN;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A bad option.
    #[error("{0}")]
    Usage(String),
    /// The data-plane sockets could not be opened.
    #[error("data plane (namespace {netns}): {err}")]
    Dataplane {
        /// Namespace.
        netns: String,
        /// Error.
        err: std::io::Error,
    },
    /// The API server could not listen.
    #[error("cannot listen on {addr}: {err}")]
    Listen {
        /// Address.
        addr: String,
        /// Error.
        #[source]
        err: std::io::Error,
    },
}

/// What the agent needs to know to start.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Host id.
    pub host: u32,
    /// Host name.
    pub name: String,
    /// Host network namespace (data-plane sockets; `None`: the caller's).
    pub netns: Option<String>,
    /// Tunnel endpoint address.
    pub underlay: Ipv4Addr,
    /// Controller base URL (`None`: no heartbeat).
    pub controller: Option<String>,
    /// The API token (role `host:ID`) the heartbeats carry.
    pub controller_token: Option<String>,
    /// TLS to an `https://` controller (the CA it trusts); `None`: the web's
    /// roots.
    pub controller_tls: Option<Arc<rustls::ClientConfig>>,
    /// The secret this agent's own API requires to change its configuration
    /// (`PUT /v1/config`), sent to the controller with every heartbeat; `None`:
    /// an open API (tests). `sluiced run` always draws one.
    pub api_token: Option<String>,
    /// API listen address (`127.0.0.1:0` picks a port).
    pub listen: String,
    /// Name prefix of instance namespaces and interfaces.
    pub prefix: String,
    /// Where the last configuration, chain files and instance logs go (`None`:
    /// nothing persisted, no instances can run).
    pub run_dir: Option<PathBuf>,
    /// The Geneve socket (normally `0.0.0.0:6081`).
    pub udp: SocketAddrV4,
    /// Executable for instances (`None`: the current one).
    pub instance_exe: Option<PathBuf>,
    /// An NF instance without a heartbeat this long is suspected and its traffic
    /// moved to the surviving instances of its groups (`None`: 30 ms).
    pub suspect_after: Option<Duration>,
    /// Seawall's rate control of this host's senders (`None`: off; feedback to
    /// other hosts' rate-controlled senders is sent either way).
    pub seawall: Option<sluice_seawall::Config>,
    /// The VM MTU the underlay was checked for: VM ports with a larger MTU
    /// are reported when they open (`None`: not checked).
    pub vm_mtu: Option<u32>,
    /// What this host offers NF instances, declared to the controller with
    /// every heartbeat (`None`: no limit).
    pub capacity: Option<sluice_proto::HostCapacity>,
    /// Serve the API over TLS with a certificate the controller's hosts' CA
    /// signs (asked for with the heartbeats; needs an `https://` controller).
    pub api_tls: bool,
    /// Forward the instances' EVE lines to a SIEM (needs `run_dir`; `None`:
    /// no sink).
    pub siem: Option<crate::siem::SiemConfig>,
    /// Forwarding threads of the data plane (`sluice-dataplane-K`), 1 to
    /// [`crate::dataplane::MAX_SHARDS`] (0 counts as 1). With Seawall on the
    /// data plane runs one: its budgets are not split between threads.
    pub dataplane_threads: usize,
}

/// Why a configuration delta was refused ([`AgentState::apply_delta`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaRefusal {
    /// It is based on another version than the one running (HTTP 409).
    Conflict(DeltaError),
    /// It cannot be applied, or its result cannot be installed (HTTP 400).
    Bad(String),
}

impl std::fmt::Display for DeltaRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeltaRefusal::Conflict(e) => e.fmt(f),
            DeltaRefusal::Bad(e) => f.write_str(e),
        }
    }
}

/// State the API handlers and the heartbeat share.
#[derive(Debug)]
pub struct AgentState {
    host: u32,
    name: String,
    underlay: Ipv4Addr,
    api: Mutex<String>,
    dp: Mutex<DataplaneThread>,
    /// Serialises configuration changes; holds the running configuration.
    config: Mutex<Option<AgentConfig>>,
    supervisor: Mutex<Option<Supervisor>>,
    run_dir: Option<PathBuf>,
    last_heard: Mutex<Option<Instant>>,
    controller_up: AtomicBool,
    /// See [`AgentOptions::api_token`].
    api_token: Option<String>,
    /// See [`AgentOptions::capacity`].
    capacity: Option<sluice_proto::HostCapacity>,
    /// The API's certificate, with TLS.
    api_cert: Option<ApiCert>,
    /// The SIEM forwarder's counters, if it runs.
    siem: Option<Arc<crate::siem::SiemStats>>,
}

/// An agent's certificate: what its TLS server presents and its calls to the
/// controller present as a client certificate, the key of the request in
/// flight, when the current certificate should be renewed, and the hosts' CA
/// the controller's client certificate must chain to.
#[derive(Debug, Default)]
struct ApiCert {
    slot: Arc<sluice_tls::hosts::CertSlot>,
    /// The hosts' CA, learnt with the first certificate.
    trust: Arc<sluice_tls::hosts::ClientTrust>,
    /// The key whose request the heartbeats carry until a certificate comes.
    pending: Mutex<Option<sluice_tls::hosts::AgentKey>>,
    /// When the current certificate was received, and its end.
    current: Mutex<Option<(SystemTime, SystemTime)>>,
    /// Where the key and certificate are kept across restarts (the run
    /// directory), so a restart needs no new bootstrap token.
    dir: Option<PathBuf>,
    /// The controller refused the certificate (its hosts' CA changed): the
    /// heartbeats present none and carry the bootstrap token again until a
    /// new certificate comes.
    withheld: Arc<AtomicBool>,
}

/// The client certificate the heartbeats present: the slot's, unless
/// withheld.
#[derive(Debug)]
struct Presenting {
    slot: Arc<sluice_tls::hosts::CertSlot>,
    withheld: Arc<AtomicBool>,
}

impl rustls::client::ResolvesClientCert for Presenting {
    fn resolve(
        &self,
        hints: &[&[u8]],
        schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        if self.withheld.load(Ordering::Acquire) {
            return None;
        }
        rustls::client::ResolvesClientCert::resolve(&*self.slot, hints, schemes)
    }

    fn has_certs(&self) -> bool {
        !self.withheld.load(Ordering::Acquire) && self.slot.is_set()
    }
}

/// Whether a failed call's error is the controller refusing the client
/// certificate in the handshake (a CA of the same name but another key
/// fails the signature: `DecryptError`).
fn certificate_refused(e: &ureq::Error) -> bool {
    let ureq::Error::Transport(t) = e else {
        return false;
    };
    let text = t.to_string();
    [
        "UnknownCA",
        "BadCertificate",
        "CertificateUnknown",
        "CertificateExpired",
        "CertificateRevoked",
        "DecryptError",
    ]
    .iter()
    .any(|a| text.contains(&format!("received fatal alert: {a}")))
}

/// The agent's private key and certificate chain in its run directory.
const KEY_FILE: &str = "api-key.pem";
const CERT_FILE: &str = "api-cert.pem";

impl ApiCert {
    /// The certificate saved in `dir`, if it is host `host`'s and still valid
    /// at `now` (else none: the heartbeats ask for one with the bootstrap
    /// token).
    fn load(host: u32, dir: Option<PathBuf>, now: SystemTime) -> ApiCert {
        let c = ApiCert {
            dir,
            ..ApiCert::default()
        };
        let Some(d) = &c.dir else {
            return c;
        };
        let (Ok(key), Ok(chain)) = (
            std::fs::read_to_string(d.join(KEY_FILE)),
            std::fs::read_to_string(d.join(CERT_FILE)),
        ) else {
            return c;
        };
        let saved = sluice_tls::hosts::AgentKey::from_pem(host, &key)
            .and_then(|k| k.certified(&chain))
            .map_err(|e| e.to_string())
            .and_then(|ck| match sluice_tls::hosts::peer_of(&ck.cert[0]) {
                Some((sluice_tls::hosts::Peer::Host(h), end)) if h == host && end > now => {
                    Ok((ck, end))
                }
                Some((p, end)) if end > now => Err(format!("it names {p:?}, not host {host}")),
                Some(_) => Err("it has expired".into()),
                None => Err("it names no host".into()),
            });
        match saved {
            Ok((ck, end)) => {
                if let Err(e) = c.trust.set_roots(ck.cert[1..].iter().cloned()) {
                    tracing::warn!(dir = %d.display(), error = %e, "ignoring the saved certificate: its CA is unusable");
                    return c;
                }
                c.slot.set(ck);
                let got = end.checked_sub(sluice_tls::hosts::LIFETIME).unwrap_or(now);
                if let Ok(mut cur) = c.current.lock() {
                    *cur = Some((got, end));
                }
                tracing::info!(dir = %d.display(), "using the saved certificate");
            }
            Err(e) => {
                tracing::warn!(dir = %d.display(), error = %e, "ignoring the saved certificate")
            }
        }
        c
    }

    /// The certificate request to send now: while there is no certificate,
    /// or once renewal is due (a new key each time).
    fn request(&self, host: u32, now: SystemTime) -> Option<String> {
        let due = match *self.current.lock().ok()? {
            None => true,
            Some((got, end)) => sluice_tls::hosts::renewal_due(got, end, now),
        };
        if !due {
            return None;
        }
        let mut pending = self.pending.lock().ok()?;
        if pending.is_none() {
            match sluice_tls::hosts::AgentKey::generate(host) {
                Ok(k) => *pending = Some(k),
                Err(e) => {
                    tracing::error!(error = %e, "cannot make the API's key");
                    return None;
                }
            }
        }
        pending.as_ref().map(|k| k.csr().to_string())
    }

    /// Installs the certificate chain the controller answered with.
    fn install(&self, chain: &str, not_after: SystemTime, now: SystemTime) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        let Some(key) = pending.as_ref() else {
            return;
        };
        let ck = match key.certified(chain) {
            Ok(ck) => ck,
            Err(e) => {
                return tracing::error!(error = %e, "the controller's API certificate is unusable")
            }
        };
        // The CA the chain ends with is the one the controller's client
        // certificate must chain to (the chain came over the controller's
        // verified TLS).
        if let Err(e) = self.trust.set_roots(ck.cert[1..].iter().cloned()) {
            return tracing::error!(error = %e, "the controller's API certificate has no usable CA");
        }
        if let Some(d) = &self.dir {
            // The key first: a certificate without its key would be useless.
            let saved = write_private(&d.join(KEY_FILE), key.key_pem().as_bytes())
                .and_then(|()| write_private(&d.join(CERT_FILE), chain.as_bytes()));
            if let Err(e) = saved {
                tracing::error!(
                    dir = %d.display(),
                    error = %e,
                    "cannot save the certificate (a restart will need a new bootstrap token)"
                );
            }
        }
        self.withheld.store(false, Ordering::Release);
        self.slot.set(ck);
        *pending = None;
        if let Ok(mut c) = self.current.lock() {
            *c = Some((now, not_after));
        }
    }

    /// Stops presenting the certificate to the controller, and asks for a
    /// new one (with the bootstrap token).
    fn withhold(&self) {
        self.withheld.store(true, Ordering::Release);
        if let Ok(mut c) = self.current.lock() {
            *c = None;
        }
    }

    /// Whether the heartbeats present a certificate.
    fn presented(&self) -> bool {
        self.slot.is_set() && !self.withheld.load(Ordering::Acquire)
    }
}

impl AgentState {
    /// Where this host's NF instances write their EVE logs (`None`: no run
    /// directory, so no instances).
    pub fn eve_dir(&self) -> Option<PathBuf> {
        self.run_dir.as_ref().map(|d| d.join(crate::eve::EVE_DIR))
    }

    /// Validates `cfg`, hands it to the data plane and the instance supervisor,
    /// and persists it; on error nothing changes.
    pub fn apply(&self, cfg: AgentConfig) -> Result<u64, ConfigError> {
        self.apply_inner(cfg, true)
    }

    /// Applies `delta` to the running configuration and installs the result
    /// exactly as [`AgentState::apply`] installs a whole one (`PATCH
    /// /v1/config`). Refused, with nothing changed, if the delta is not based
    /// on the version running ([`DeltaRefusal::Conflict`]: the controller then
    /// sends the whole configuration) or cannot be applied or installed.
    pub fn apply_delta(&self, delta: &ConfigDelta) -> Result<u64, DeltaRefusal> {
        let mut cur = self.config.lock().unwrap_or_else(|p| p.into_inner());
        let next = match cur.as_ref() {
            None => Err(DeltaError::Base {
                running: 0,
                base: delta.base_version,
            }),
            Some(c) => c.apply_delta(delta),
        };
        let next = match next {
            Ok(n) => n,
            Err(e @ DeltaError::Base { .. }) => return Err(DeltaRefusal::Conflict(e)),
            Err(e) => return Err(DeltaRefusal::Bad(e.to_string())),
        };
        self.install(&mut cur, next, true)
            .map_err(|e| DeltaRefusal::Bad(e.to_string()))
    }

    fn apply_inner(&self, cfg: AgentConfig, persist: bool) -> Result<u64, ConfigError> {
        let mut cur = self.config.lock().unwrap_or_else(|p| p.into_inner());
        self.install(&mut cur, cfg, persist)
    }

    /// Installs `cfg` in place of `cur` (the running configuration, locked).
    fn install(
        &self,
        cur: &mut Option<AgentConfig>,
        cfg: AgentConfig,
        persist: bool,
    ) -> Result<u64, ConfigError> {
        let v = cfg.version;
        if let Ok(d) = self.dp.lock() {
            // One data plane per forwarding thread, each built from the
            // configuration (checked whole by the first).
            let dps = (0..d.threads())
                .map(|_| Dataplane::new(self.host, &cfg))
                .collect::<Result<Vec<_>, _>>()?;
            // Answer once packets are forwarded by the new configuration, so a
            // caller may send traffic right away.
            if !d.install(dps, Duration::from_secs(2)) {
                tracing::warn!(
                    version = v,
                    "the data plane is slow to take the configuration over"
                );
            }
        }
        if let Ok(s) = self.supervisor.lock() {
            if let Some(s) = s.as_ref() {
                s.apply(cfg.instances.clone());
            } else if !cfg.instances.is_empty() {
                tracing::warn!(
                    version = v,
                    instances = cfg.instances.len(),
                    "the configuration lists NF instances but this agent runs none (no run directory)"
                );
            }
        }
        if persist {
            if let Some(dir) = &self.run_dir {
                let path = dir.join("config.json");
                let tmp = dir.join("config.json.tmp");
                let r = serde_json::to_vec_pretty(&cfg)
                    .map_err(std::io::Error::other)
                    .and_then(|b| write_private(&tmp, &b))
                    .and_then(|()| std::fs::rename(&tmp, &path));
                if let Err(e) = r {
                    tracing::error!(path = %path.display(), error = %e, "cannot save the configuration");
                }
            }
        }
        *cur = Some(cfg);
        Ok(v)
    }

    /// Version of the running configuration (0: none).
    pub fn version(&self) -> u64 {
        self.dp.lock().map(|d| d.version()).unwrap_or(0)
    }

    /// The running configuration.
    pub fn config(&self) -> Option<AgentConfig> {
        self.config.lock().ok().and_then(|c| c.clone())
    }

    /// The agent's status.
    pub fn status(&self) -> AgentStatus {
        let p = self.dp.lock().map(|d| d.published()).unwrap_or_default();
        let ports = self
            .port_names()
            .into_iter()
            .map(|(id, name)| PortStatus {
                id,
                name,
                counters: p.stats.ports.get(&id).cloned().unwrap_or_default(),
            })
            .collect();
        AgentStatus {
            host: self.host,
            config_version: self.version(),
            controller_silent_ms: self
                .last_heard
                .lock()
                .ok()
                .and_then(|t| *t)
                .map(|t| t.elapsed().as_millis() as u64),
            ports,
            fabric: p.stats.fabric.clone(),
            instances: self.instances(),
            health: self.health_of(&p),
            failover_events: p.failover_events.clone(),
            pinned_flows: p.pinned_flows.clone(),
            chains: p.chains.clone(),
            seawall: p.seawall,
            isolation: isolation(&p, &self.port_names()),
            seawall_feedback_sent: p.stats.seawall_feedback_sent,
            seawall_feedback_received: p.stats.seawall_feedback_received,
            accusations: p.accusations.clone(),
            backend_checks: p.backend_checks.clone(),
        }
    }

    /// Instance health: the data plane's view (heartbeats, suspicion, an exit
    /// not yet followed by its new process's heartbeat) with the
    /// supervisor's (the process runs); an exited process counts as suspected
    /// and not alive until its successor is heard, so the controller sees a
    /// death however quickly the instance is restarted.
    fn health_of(&self, p: &crate::io::Published) -> Vec<InstanceHealth> {
        let procs = self.instances();
        p.health
            .iter()
            .map(|h| {
                let mut h = h.clone();
                let proc_ = procs.iter().find(|i| i.port == h.port);
                h.alive = h.alive && proc_.is_some_and(|i| i.alive);
                if proc_.is_some_and(|i| !i.alive) {
                    h.suspected = true;
                }
                h
            })
            .collect()
    }

    /// The instances' health as last published by the data plane.
    pub fn health(&self) -> Vec<InstanceHealth> {
        let p = self.dp.lock().map(|d| d.published()).unwrap_or_default();
        self.health_of(&p)
    }

    /// The running configuration's ports (the data plane publishes counters a
    /// moment after it takes a configuration over; names come from the source).
    fn port_names(&self) -> Vec<(u16, String)> {
        let Some(cfg) = self.config() else {
            return Vec::new();
        };
        cfg.ports
            .iter()
            .map(|p| {
                let name = match &p.kind {
                    sluice_proto::PortKind::Vm { name, .. } => name.clone(),
                    sluice_proto::PortKind::Instance { name } => name.clone(),
                };
                (p.id, name)
            })
            .collect()
    }

    fn instances(&self) -> Vec<sluice_proto::InstanceStatus> {
        self.supervisor
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(Supervisor::status))
            .unwrap_or_default()
    }

    fn name_labels(&self) -> NameLabels {
        self.config
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(NameLabels::from_config))
            .unwrap_or_default()
    }

    /// Counters in Prometheus text format.
    pub fn metrics(&self) -> String {
        use std::fmt::Write;
        let p = self.dp.lock().map(|d| d.published()).unwrap_or_default();
        let host = self.host.to_string();
        let names = self.port_names();
        let labels = self.name_labels();
        let mut o = String::new();
        let family = |o: &mut String, name: &str, ty: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {ty}");
        };
        family(
            &mut o,
            "sluice_agent_config_version",
            "gauge",
            "Version of the running configuration.",
        );
        let _ = writeln!(
            o,
            "sluice_agent_config_version{{host=\"{host}\"}} {}",
            self.version()
        );
        family(
            &mut o,
            "sluice_agent_controller_up",
            "gauge",
            "1 if the last heartbeat reached the controller.",
        );
        let _ = writeln!(
            o,
            "sluice_agent_controller_up{{host=\"{host}\"}} {}",
            u8::from(self.controller_up.load(Ordering::Relaxed))
        );
        let fields: [(&str, &str, CounterField); 5] = [
            ("rx_packets_total", "Packets received.", |c| c.rx_packets),
            ("rx_bytes_total", "Bytes received.", |c| c.rx_bytes),
            ("tx_packets_total", "Packets sent.", |c| c.tx_packets),
            ("tx_bytes_total", "Bytes sent.", |c| c.tx_bytes),
            ("drops_total", "Packets dropped.", |c| c.drops),
        ];
        for (f, help, get) in fields {
            let name = format!("sluice_port_{f}");
            family(&mut o, &name, "counter", help);
            for (id, pname) in &names {
                let c = p.stats.ports.get(id).cloned().unwrap_or_default();
                let _ = writeln!(
                    o,
                    "{name}{{host=\"{host}\",port=\"{id}\",name=\"{}\"}} {}",
                    escape(pname),
                    get(&c)
                );
            }
            let name = format!("sluice_fabric_{f}");
            family(&mut o, &name, "counter", help);
            let _ = writeln!(o, "{name}{{host=\"{host}\"}} {}", get(&p.stats.fabric));
        }
        // Per peer: what the controller adds up per rack into measured
        // uplink loads, here for whoever wants one host's share of it.
        type PeerGet = fn(&crate::dataplane::PeerCounters) -> u64;
        let per_peer: [(&str, &str, PeerGet); 2] = [
            (
                "bytes",
                "UDP payload bytes this host sent through the fabric to each peer host.",
                |c| c.tx_bytes,
            ),
            (
                "packets",
                "Datagrams this host sent through the fabric to each peer host.",
                |c| c.tx_packets,
            ),
        ];
        for (what, help, get) in per_peer {
            let name = format!("sluice_fabric_peer_tx_{what}_total");
            family(&mut o, &name, "counter", help);
            for (peer, c) in &p.stats.peers {
                let _ = writeln!(o, "{name}{{host=\"{host}\",peer=\"{peer}\"}} {}", get(c));
            }
        }
        // The active checks of load-balancer backends on this host's VMs:
        // cumulative since the agent started, so a rate over them is the
        // check rate, and the controller's view (`sluice_controller_backend_state`)
        // can be told apart from what the agent saw.
        family(
            &mut o,
            "sluice_agent_health_checks_total",
            "counter",
            "Active health checks of load-balancer backends on this host's VMs, by result.",
        );
        for c in &p.backend_checks {
            for (result, n) in [("ok", c.ok), ("failed", c.failed)] {
                let _ = writeln!(
                    o,
                    "sluice_agent_health_checks_total{{host=\"{host}\",tenant=\"{}\",middlebox=\"{}\",backend=\"{}\",result=\"{result}\"}} {n}",
                    escape(&c.tenant),
                    escape(&c.middlebox),
                    escape(&c.backend)
                );
            }
        }
        family(
            &mut o,
            "sluice_agent_drops_total",
            "counter",
            "Packets dropped, by reason.",
        );
        for r in DropReason::ALL {
            let _ = writeln!(
                o,
                "sluice_agent_drops_total{{host=\"{host}\",reason=\"{}\"}} {}",
                r.name(),
                p.stats.drops_of(r)
            );
        }
        let iso = isolation(&p, &names);
        type IsoField = fn(&IsolationStatus) -> u64;
        let iso_fields: [(&str, &str, &str, IsoField); 6] = [
            (
                "sluice_seawall_rate_bytes_per_second",
                "gauge",
                "Seawall rate of a sending port to a destination host.",
                |s| s.rate_bps / 8,
            ),
            (
                "sluice_seawall_admitted_bytes_total",
                "counter",
                "Bytes a rate-controlled port sent to a destination host.",
                |s| s.admitted_bytes,
            ),
            (
                "sluice_seawall_policed_packets_total",
                "counter",
                "Packets dropped for being over their sender's Seawall rate.",
                |s| s.policed_packets,
            ),
            (
                "sluice_seawall_policed_bytes_total",
                "counter",
                "Bytes dropped for being over their sender's Seawall rate.",
                |s| s.policed_bytes,
            ),
            (
                "sluice_seawall_reported_lost_total",
                "counter",
                "Packets the destination host reported lost on the way.",
                |s| s.reported_lost,
            ),
            (
                "sluice_seawall_decreases_total",
                "counter",
                "Seawall rate decreases (loss reports).",
                |s| s.decreases,
            ),
        ];
        for (name, ty, help, get) in iso_fields {
            family(&mut o, name, ty, help);
            for s in &iso {
                let _ = writeln!(
                    o,
                    "{name}{{host=\"{host}\",port=\"{}\",name=\"{}\",dest_host=\"{}\"}} {}",
                    s.port,
                    escape(&s.name),
                    s.dest_host,
                    get(s)
                );
            }
        }
        family(
            &mut o,
            "sluice_seawall_feedback_messages_total",
            "counter",
            "Seawall feedback messages, by direction.",
        );
        let _ = writeln!(
            o,
            "sluice_seawall_feedback_messages_total{{host=\"{host}\",direction=\"sent\"}} {}\nsluice_seawall_feedback_messages_total{{host=\"{host}\",direction=\"received\"}} {}",
            p.stats.seawall_feedback_sent, p.stats.seawall_feedback_received
        );
        family(
            &mut o,
            "sluice_seawall_accusations_total",
            "counter",
            "Hosts this host accused of ignoring its Seawall feedback.",
        );
        let _ = writeln!(
            o,
            "sluice_seawall_accusations_total{{host=\"{host}\"}} {}",
            p.stats.seawall_accused
        );
        family(
            &mut o,
            "sluice_seawall_accused",
            "gauge",
            "1 while this host accuses the peer `accused` (its packets to this host are dropped).",
        );
        for a in &p.accusations {
            let _ = writeln!(
                o,
                "sluice_seawall_accused{{host=\"{host}\",accused=\"{}\"}} 1",
                a.host
            );
        }
        family(
            &mut o,
            "sluice_agent_arp_replies_total",
            "counter",
            "ARP requests answered.",
        );
        let _ = writeln!(
            o,
            "sluice_agent_arp_replies_total{{host=\"{host}\"}} {}",
            p.stats.arp_replies
        );
        // Data-plane I/O: batch sizes achieved (frames / batches), system calls,
        // UDP super-datagrams, ring copies, per socket.
        type IoField = fn(&sluice_netio::SocketStats) -> u64;
        let io: [(&str, &str, IoField); 11] = [
            (
                "rx_batches_total",
                "Receive calls that returned frames.",
                |s| s.rx_batches,
            ),
            ("rx_frames_total", "Frames those calls returned.", |s| {
                s.rx_frames
            }),
            ("tx_calls_total", "Send system calls.", |s| s.tx_calls),
            (
                "tx_msgs_total",
                "Messages those calls sent or refused.",
                |s| s.tx_msgs,
            ),
            ("tx_gso_total", "UDP super-datagrams sent.", |s| s.tx_gso),
            (
                "tx_gso_segs_total",
                "Datagrams carried by super-datagrams.",
                |s| s.tx_gso_segs,
            ),
            ("rx_gro_total", "Coalesced UDP datagrams received.", |s| {
                s.rx_gro
            }),
            (
                "rx_ring_copies_total",
                "Frames too long for a ring slot.",
                |s| s.rx_ring_copies,
            ),
            ("rx_truncated_total", "Frames truncated and dropped.", |s| {
                s.rx_truncated
            }),
            ("tx_errors_total", "Messages the kernel refused.", |s| {
                s.tx_errors
            }),
            (
                "rx_kernel_drops_total",
                "Frames the kernel dropped: ring or receive queue full.",
                |s| s.rx_kernel_drops,
            ),
        ];
        for (f, help, get) in io {
            let name = format!("sluice_io_{f}");
            family(&mut o, &name, "counter", help);
            for (sock, st) in &p.io {
                let _ = writeln!(o, "{name}{{host=\"{host}\",socket=\"{sock}\"}} {}", get(st));
            }
        }
        family(
            &mut o,
            "sluice_io_loop_polls_total",
            "counter",
            "poll(2) calls of the data-plane loop: `sleep` may block, `spin` does not.",
        );
        let _ = writeln!(
            o,
            "sluice_io_loop_polls_total{{host=\"{host}\",kind=\"sleep\"}} {}",
            p.io_loop.sleeps
        );
        let _ = writeln!(
            o,
            "sluice_io_loop_polls_total{{host=\"{host}\",kind=\"spin\"}} {}",
            p.io_loop.spins
        );
        family(
            &mut o,
            "sluice_dataplane_threads",
            "gauge",
            "Forwarding threads of the data plane (dataplane_threads).",
        );
        let _ = writeln!(
            o,
            "sluice_dataplane_threads{{host=\"{host}\"}} {}",
            p.threads.len()
        );
        type ThreadCounter = fn(&crate::io::ThreadStats) -> u64;
        let per_thread: [(&str, &str, ThreadCounter); 5] = [
            (
                "sluice_dataplane_thread_read_total",
                "Frames and datagrams a forwarding thread read from its sockets.",
                |t| t.read,
            ),
            (
                "sluice_dataplane_thread_forwarded_total",
                "Frames and datagrams a forwarding thread's shard forwarded (read there or handed over).",
                |t| t.forwarded,
            ),
            (
                "sluice_dataplane_thread_handed_out_total",
                "Frames a forwarding thread read for another thread's shard and handed over.",
                |t| t.handed_out,
            ),
            (
                "sluice_dataplane_thread_handed_in_total",
                "Frames other forwarding threads handed to this one.",
                |t| t.handed_in,
            ),
            (
                "sluice_dataplane_thread_handoff_drops_total",
                "Frames a forwarding thread could not hand over (every batch to that thread in flight).",
                |t| t.handoff_drops,
            ),
        ];
        for (name, help, get) in per_thread {
            family(&mut o, name, "counter", help);
            for t in &p.threads {
                let _ = writeln!(
                    o,
                    "{name}{{host=\"{host}\",thread=\"{}\"}} {}",
                    t.thread,
                    get(t)
                );
            }
        }
        for (name, help, v) in [
            (
                "sluice_io_gro_super_frames_total",
                "TCP super-frames delivered to VMs (runs of segments merged).",
                p.io_loop.gro_super_frames,
            ),
            (
                "sluice_io_gro_merged_total",
                "Segments merged into super-frames beyond the first of each.",
                p.io_loop.gro_merged,
            ),
            (
                "sluice_io_gro_bad_csum_total",
                "Segments not merged because their TCP checksum was wrong.",
                p.io_loop.gro_bad_csum,
            ),
        ] {
            family(&mut o, name, "counter", help);
            let _ = writeln!(o, "{name}{{host=\"{host}\"}} {v}");
        }
        family(
            &mut o,
            "sluice_port_up",
            "gauge",
            "1 if the VM port's interface is open.",
        );
        for (id, pname) in &names {
            let up = p.names.contains_key(id) && !p.port_errors.contains_key(id);
            let _ = writeln!(
                o,
                "sluice_port_up{{host=\"{host}\",port=\"{id}\",name=\"{}\"}} {}",
                escape(pname),
                u8::from(up)
            );
        }
        if let Some(st) = &self.siem {
            family(
                &mut o,
                "sluice_siem_events_total",
                "counter",
                "EVE lines the SIEM sink handled: sent, or lost (its queue full while it was down, or refused).",
            );
            for k in &st.sinks {
                for (outcome, v) in [("sent", &k.sent), ("lost", &k.lost)] {
                    let _ = writeln!(
                        o,
                        "sluice_siem_events_total{{host=\"{host}\",sink=\"{}\",outcome=\"{outcome}\"}} {}",
                        k.name,
                        v.load(Ordering::Relaxed)
                    );
                }
            }
            family(
                &mut o,
                "sluice_siem_queued_events",
                "gauge",
                "EVE lines waiting for the SIEM sink.",
            );
            for k in &st.sinks {
                let _ = writeln!(
                    o,
                    "sluice_siem_queued_events{{host=\"{host}\",sink=\"{}\"}} {}",
                    k.name,
                    k.queued.load(Ordering::Relaxed)
                );
            }
            family(
                &mut o,
                "sluice_siem_up",
                "gauge",
                "1 if the last send to the SIEM sink succeeded.",
            );
            for k in &st.sinks {
                let _ = writeln!(
                    o,
                    "sluice_siem_up{{host=\"{host}\",sink=\"{}\"}} {}",
                    k.name,
                    u8::from(k.up.load(Ordering::Relaxed))
                );
            }
            family(
                &mut o,
                "sluice_siem_invalid_lines_total",
                "counter",
                "Lines of the EVE files that were not JSON objects (not forwarded).",
            );
            let _ = writeln!(
                o,
                "sluice_siem_invalid_lines_total{{host=\"{host}\"}} {}",
                st.invalid.load(Ordering::Relaxed)
            );
        }
        family(
            &mut o,
            "sluice_instance_up",
            "gauge",
            "1 if the NF instance process runs.",
        );
        for i in self.instances() {
            let _ = writeln!(
                o,
                "sluice_instance_up{{host=\"{host}\",port=\"{}\",name=\"{}\"{}}} {}",
                i.port,
                escape(&i.name),
                labels.instance(&i.name),
                u8::from(i.alive)
            );
        }
        let health = self.health_of(&p);
        let gauges: [(&str, &str, &str, HealthField); 11] = [
            (
                "sluice_instance_suspected",
                "gauge",
                "1 while the instance is suspected and its traffic moved away.",
                |h| u64::from(h.suspected),
            ),
            (
                "sluice_instance_rx_packets_total",
                "counter",
                "Datagrams the instance received (its own count).",
                |h| h.rx_packets,
            ),
            (
                "sluice_instance_tx_packets_total",
                "counter",
                "Frames the instance sent back.",
                |h| h.tx_packets,
            ),
            (
                "sluice_instance_drops_total",
                "counter",
                "Frames the instance dropped.",
                |h| h.drops,
            ),
            (
                "sluice_instance_queue_drops_total",
                "counter",
                "Frames the instance dropped on a full queue.",
                |h| h.queue_drops,
            ),
            (
                "sluice_instance_lease_epoch",
                "gauge",
                "Epoch of the ownership lease the instance holds (0: none).",
                |h| h.lease_epoch,
            ),
            (
                "sluice_instance_cache_hits_total",
                "counter",
                "Reads of owned records the instance's flow cache answered.",
                |h| h.cache_hits,
            ),
            (
                "sluice_instance_store_replica_waits_total",
                "counter",
                "Store batches of the instance whose writes waited for a replica.",
                |h| h.replica[0],
            ),
            (
                "sluice_instance_store_replica_rewaits_total",
                "counter",
                "Of those, batches a replica acknowledged only on the second, longer wait (a lagging replica).",
                |h| h.replica[1],
            ),
            (
                "sluice_instance_store_replica_shortfalls_total",
                "counter",
                "Of those, batches no replica acknowledged in either wait: writes a store primary's death could lose.",
                |h| h.replica[2],
            ),
            (
                "sluice_instance_heartbeat_seen",
                "gauge",
                "1 once the instance has sent a heartbeat.",
                |h| u64::from(h.last_heartbeat_age_ms.is_some()),
            ),
        ];
        for (name, ty, help, get) in gauges {
            family(&mut o, name, ty, help);
            for h in &health {
                let _ = writeln!(
                    o,
                    "{name}{{host=\"{host}\",port=\"{}\",name=\"{}\"{}}} {}",
                    h.port,
                    escape(&h.name),
                    labels.instance(&h.name),
                    get(h)
                );
            }
        }
        // Base units (seconds), and no sample rather than a sentinel for an
        // instance never heard from (`sluice_instance_heartbeat_seen` says so).
        family(
            &mut o,
            "sluice_instance_heartbeat_age_seconds",
            "gauge",
            "Time since the instance's last heartbeat.",
        );
        for h in &health {
            if let Some(ms) = h.last_heartbeat_age_ms {
                let _ = writeln!(
                    o,
                    "sluice_instance_heartbeat_age_seconds{{host=\"{host}\",port=\"{}\",name=\"{}\"{}}} {:.3}",
                    h.port,
                    escape(&h.name),
                    labels.instance(&h.name),
                    ms as f64 / 1e3
                );
            }
        }
        family(
            &mut o,
            "sluice_instance_cpu_seconds_total",
            "counter",
            "CPU time the instance used.",
        );
        for h in &health {
            let _ = writeln!(
                o,
                "sluice_instance_cpu_seconds_total{{host=\"{host}\",port=\"{}\",name=\"{}\"{}}} {:.3}",
                h.port,
                escape(&h.name),
                    labels.instance(&h.name),
                h.cpu_ms as f64 / 1e3
            );
        }
        // Histograms the instances measure and send in their heartbeats
        // (totals since the instance started, so a lost heartbeat loses
        // nothing); an instance never heard from has none.
        let histograms: [(&str, &str, HistogramField); 2] = [
            (
                "sluice_instance_store_round_trip_seconds",
                "Time the instance's calls to the state store took that waited for replies, one observation per round trip.",
                |h| &h.store_round_trips,
            ),
            (
                "sluice_instance_added_latency_seconds",
                "Time the instance held the packets it sent, from the receipt of their batch to its transmission, one observation per packet.",
                |h| &h.added_latency,
            ),
        ];
        for (name, help, get) in histograms {
            family(&mut o, name, "histogram", help);
            for h in health.iter().filter(|h| h.last_heartbeat_age_ms.is_some()) {
                let labels = format!(
                    "host=\"{host}\",port=\"{}\",name=\"{}\"{}",
                    h.port,
                    escape(&h.name),
                    labels.instance(&h.name)
                );
                render_latency(&mut o, name, get(h), &labels);
            }
        }
        family(
            &mut o,
            "sluice_agent_failovers_total",
            "counter",
            "Local speculative failovers (instances suspected).",
        );
        let _ = writeln!(
            o,
            "sluice_agent_failovers_total{{host=\"{host}\"}} {}",
            p.stats.failovers
        );
        family(
            &mut o,
            "sluice_agent_stalls_total",
            "counter",
            "Health checks that found the agent had not run for over 50 ms (instances' silence over it not held against them).",
        );
        let _ = writeln!(
            o,
            "sluice_agent_stalls_total{{host=\"{host}\"}} {}",
            p.stats.agent_stalls
        );
        family(
            &mut o,
            "sluice_agent_health_confirms_total",
            "counter",
            "Reads of the Geneve socket's queue before acting on an instance's silence (heartbeats wait there behind data).",
        );
        let _ = writeln!(
            o,
            "sluice_agent_health_confirms_total{{host=\"{host}\"}} {}",
            p.stats.health_confirms
        );
        family(
            &mut o,
            "sluice_agent_health_backlogs_total",
            "counter",
            "Confirmations that left datagrams queued (suspicion then waited for the 250 ms ceiling).",
        );
        let _ = writeln!(
            o,
            "sluice_agent_health_backlogs_total{{host=\"{host}\"}} {}",
            p.stats.health_backlogs
        );
        family(
            &mut o,
            "sluice_agent_health_cleared_total",
            "counter",
            "Confirmations after which no instance was suspected: failovers the queue read avoided.",
        );
        let _ = writeln!(
            o,
            "sluice_agent_health_cleared_total{{host=\"{host}\"}} {}",
            p.stats.health_cleared
        );
        family(
            &mut o,
            "sluice_agent_leases_total",
            "counter",
            "Ownership leases (grants and renewals) sent to local NF instances.",
        );
        let _ = writeln!(
            o,
            "sluice_agent_leases_total{{host=\"{host}\"}} {}",
            p.stats.leases
        );
        family(
            &mut o,
            "sluice_agent_lease_revocations_total",
            "counter",
            "Lease revocations sent to local NF instances.",
        );
        let _ = writeln!(
            o,
            "sluice_agent_lease_revocations_total{{host=\"{host}\"}} {}",
            p.stats.lease_revocations
        );
        family(
            &mut o,
            "sluice_agent_last_failover_seconds",
            "gauge",
            "Time from the last failover's missed deadline to its rewritten groups in force.",
        );
        if let Some(e) = p.failover_events.last() {
            let _ = writeln!(
                o,
                "sluice_agent_last_failover_seconds{{host=\"{host}\",port=\"{}\",name=\"{}\"}} {:.6}",
                e.port,
                escape(&e.instance),
                e.applied_at_us.saturating_sub(e.suspected_at_us) as f64 / 1e6
            );
        }
        family(
            &mut o,
            "sluice_group_pinned_flows",
            "gauge",
            "Live flows pinned to a target of a pinned group.",
        );
        for f in &p.pinned_flows {
            let target = match f.target {
                sluice_switch::Output::Port(q) => format!("port:{}", q.0),
                sluice_switch::Output::Host(h) => format!("host:{}", h.0),
            };
            let _ = writeln!(
                o,
                "sluice_group_pinned_flows{{host=\"{host}\",vni=\"{}\",group=\"{}\",target=\"{target}\",draining=\"{}\"}} {}",
                f.vni, f.group, f.draining, f.flows
            );
        }
        type Field = fn(&sluice_proto::ChainMeasure) -> u64;
        let chain_families: [(&str, &str, Field); 5] = [
            (
                "sluice_chain_entered_bytes_total",
                "Bytes that entered a chain from a VM on this host.",
                |c| c.bytes,
            ),
            (
                "sluice_chain_syns_total",
                "TCP connections opened into a chain from a VM on this host.",
                |c| c.syns,
            ),
            (
                "sluice_chain_handshakes_total",
                "TCP handshakes through a chain completed (SYN-ACK delivered to the client).",
                |c| c.handshakes,
            ),
            (
                "sluice_chain_handshake_seconds_total",
                "Sum of handshake times through a chain (divide by handshakes for the mean).",
                |c| c.handshake_ns,
            ),
            (
                "sluice_chain_unanswered_syns_total",
                "SYNs into a chain never answered within 10 s.",
                |c| c.unanswered,
            ),
        ];
        for (name, help, field) in chain_families {
            family(&mut o, name, "counter", help);
            for c in &p.chains {
                let v = field(c);
                let chain = labels.chain(c.vni, c.chain);
                let _ = if name == "sluice_chain_handshake_seconds_total" {
                    writeln!(
                        o,
                        "{name}{{host=\"{host}\",vni=\"{}\",{chain}}} {:.9}",
                        c.vni,
                        v as f64 / 1e9
                    )
                } else {
                    writeln!(o, "{name}{{host=\"{host}\",vni=\"{}\",{chain}}} {v}", c.vni)
                };
            }
        }
        let name = "sluice_chain_added_latency_seconds";
        family(
            &mut o,
            name,
            "histogram",
            "Time packets delivered at the end of a chain on this host spent in Sluice's hosts since entering it (agents, NF instances, shaping queues; the fabric's wires excluded), one observation per packet.",
        );
        for c in p.chains.iter().filter(|c| c.latency.count() > 0) {
            let labels = format!(
                "host=\"{host}\",vni=\"{}\",{}",
                c.vni,
                labels.chain(c.vni, c.chain)
            );
            render_latency(&mut o, name, &c.latency, &labels);
        }
        sluice_metrics::process(&mut o);
        o
    }

    /// Whether an `Authorization` header value may change the configuration.
    pub fn may_configure(&self, authorization: Option<&str>) -> bool {
        match &self.api_token {
            None => true,
            Some(t) => authorization
                .and_then(|h| h.trim().split_once(' '))
                .is_some_and(|(scheme, v)| {
                    scheme.eq_ignore_ascii_case("bearer") && v.trim() == t.as_str()
                }),
        }
    }

    /// Base URL of the API.
    pub fn api_url(&self) -> String {
        self.api.lock().map(|a| a.clone()).unwrap_or_default()
    }

    fn registration(&self) -> HostHeartbeat {
        let p = self.dp.lock().map(|d| d.published()).unwrap_or_default();
        HostHeartbeat {
            registration: HostRegistration {
                host: self.host,
                name: self.name.clone(),
                underlay: self.underlay,
                api: self.api_url(),
                config_version: self.version(),
                api_token: self.api_token.clone(),
                capacity: self.capacity.clone(),
                api_csr: self
                    .api_cert
                    .as_ref()
                    .and_then(|c| c.request(self.host, SystemTime::now())),
            },
            instances: self.health_of(&p),
            peers: p
                .stats
                .peers
                .iter()
                .map(|(host, c)| sluice_proto::PeerTraffic {
                    host: *host,
                    packets: c.tx_packets,
                    bytes: c.tx_bytes,
                })
                .collect(),
            chains: p.chains,
            accusations: p.accusations,
            backend_checks: p.backend_checks,
        }
    }

    /// [`news`] of the heartbeat the agent would send now (without its
    /// certificate request, which [`AgentState::registration`] may draw).
    fn news(&self) -> u64 {
        let p = self.dp.lock().map(|d| d.published()).unwrap_or_default();
        let hb = HostHeartbeat {
            registration: HostRegistration {
                host: self.host,
                name: String::new(),
                underlay: self.underlay,
                api: String::new(),
                config_version: self.version(),
                api_token: None,
                capacity: None,
                api_csr: None,
            },
            instances: self.health_of(&p),
            chains: Vec::new(),
            accusations: p.accusations,
            backend_checks: p.backend_checks,
            peers: Vec::new(),
        };
        news(&hb)
    }

    /// Records that the controller was heard from (a heartbeat answered or a
    /// configuration pushed).
    pub fn heard(&self) {
        if let Ok(mut t) = self.last_heard.lock() {
            *t = Some(Instant::now());
        }
    }
}

/// Names for the metrics' labels, from the running configuration (which
/// the controller fills with tenants', chains' and instances' names).
#[derive(Debug, Default)]
struct NameLabels {
    /// (vni, chain id) -> (tenant, chain name, reverse).
    chains: HashMap<(u32, u16), (String, String, bool)>,
    /// vni -> tenant.
    tenants: HashMap<u32, String>,
    /// instance name -> (tenant, middlebox).
    instances: HashMap<String, (String, String)>,
}

impl NameLabels {
    fn from_config(cfg: &AgentConfig) -> NameLabels {
        let mut l = NameLabels::default();
        for t in &cfg.tenants {
            l.tenants.insert(t.vni, t.tenant.clone());
            for c in &t.chains {
                l.chains
                    .insert((t.vni, c.id), (t.tenant.clone(), c.name.clone(), c.reverse));
            }
        }
        for i in &cfg.instances {
            l.instances
                .insert(i.name.clone(), (i.tenant.clone(), i.middlebox.clone()));
        }
        l
    }

    /// `tenant="T",chain="NAME",direction="forward|reverse"`; a chain the
    /// configuration does not name keeps its id (and no direction).
    fn chain(&self, vni: u32, id: u16) -> String {
        match self.chains.get(&(vni, id)) {
            Some((t, n, rev)) => format!(
                "tenant=\"{}\",chain=\"{}\",direction=\"{}\"",
                escape(t),
                escape(n),
                if *rev { "reverse" } else { "forward" }
            ),
            None => format!(
                "tenant=\"{}\",chain=\"{id}\",direction=\"\"",
                escape(self.tenants.get(&vni).map_or("", String::as_str))
            ),
        }
    }

    /// `,tenant="T",middlebox="M",instance="NAME"` for an instance.
    fn instance(&self, name: &str) -> String {
        let (t, m) = self
            .instances
            .get(name)
            .map_or(("", ""), |(t, m)| (t.as_str(), m.as_str()));
        format!(
            ",tenant=\"{}\",middlebox=\"{}\",instance=\"{}\"",
            escape(t),
            escape(m),
            escape(name)
        )
    }
}

/// Reads one field of a counter set.
type CounterField = fn(&sluice_proto::Counters) -> u64;
/// Reads one field of an instance's health.
type HealthField = fn(&InstanceHealth) -> u64;
/// Reads one of an instance's histograms.
type HistogramField = fn(&InstanceHealth) -> &LatencyHistogram;

/// Writes the series of histogram `name` with `labels` (a family already
/// declared) for `h`, in seconds; nothing for a histogram that cannot be
/// rendered.
fn render_latency(o: &mut String, name: &str, h: &LatencyHistogram, labels: &str) {
    if let Some(hist) = sluice_metrics::Histogram::from_counts(
        &LATENCY_BOUNDS_SECONDS,
        &h.counts,
        h.sum_ns as f64 / 1e9,
    ) {
        hist.render(o, name, labels);
    }
}

/// Escapes a Prometheus label value.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    core: Arc<AgentState>,
    stop: Arc<AtomicBool>,
    api: Option<crate::http::ApiServer>,
    heartbeat: Option<JoinHandle<()>>,
    siem: Option<crate::siem::Forwarder>,
    /// `agent{host, name}`: the context of every event of this agent.
    span: tracing::Span,
}

impl Agent {
    /// Starts the data plane (with the saved configuration, if any), the API
    /// server, the instance supervisor and the heartbeat.
    pub fn start(opts: &AgentOptions) -> Result<Agent, AgentError> {
        // Every event of this agent, on each of its threads, names its host.
        let span = tracing::info_span!("agent", host = opts.host, name = %opts.name);
        let entered = span.enter();
        if !crate::instances::valid_prefix(&opts.prefix) {
            return Err(AgentError::Usage(format!(
                "--prefix {:?}: 1 to 9 letters, digits, '-' or '_' (interface names are at most 15 bytes)",
                opts.prefix
            )));
        }
        if let Some(dir) = &opts.run_dir {
            std::fs::create_dir_all(dir)
                .map_err(|e| AgentError::Usage(format!("--run-dir {}: {e}", dir.display())))?;
        }
        if let Some(c) = &opts.seawall {
            c.validate()
                .map_err(|e| AgentError::Usage(format!("--seawall: {e}")))?;
        }
        let mut io = IoOptions {
            netns: opts.netns.clone(),
            udp: opts.udp,
            seawall: opts.seawall,
            vm_mtu: opts.vm_mtu,
            ..IoOptions::default()
        };
        if let Some(d) = opts.suspect_after {
            io.suspect_after = d;
        }
        let mut threads = opts
            .dataplane_threads
            .clamp(1, crate::dataplane::MAX_SHARDS);
        if threads > 1 && opts.seawall.is_some() {
            tracing::warn!(
                dataplane_threads = threads,
                "Seawall keeps one budget per sender: the data plane runs on one thread"
            );
            threads = 1;
        }
        let initial = (0..threads).map(|_| Dataplane::empty(opts.host)).collect();
        let dp = DataplaneThread::spawn(&io, initial).map_err(|err| AgentError::Dataplane {
            netns: opts.netns.clone().unwrap_or_else(|| "(current)".into()),
            err,
        })?;
        let supervisor = match &opts.run_dir {
            Some(dir) => {
                let exe = match &opts.instance_exe {
                    Some(e) => e.clone(),
                    None => std::env::current_exe().map_err(|e| {
                        AgentError::Usage(format!("cannot find the sluiced executable: {e}"))
                    })?,
                };
                let exits = dp.exit_notifier();
                Some(Supervisor::start_with(
                    InstanceEnv {
                        host_netns: opts.netns.clone(),
                        prefix: opts.prefix.clone(),
                        run_dir: dir.clone(),
                        exe,
                    },
                    Box::new(move |port| exits.exited(port)),
                ))
            }
            None => None,
        };
        let siem = match (&opts.siem, &opts.run_dir) {
            (Some(cfg), Some(dir)) if cfg.any() => Some(
                crate::siem::Forwarder::start(
                    &dir.join(crate::eve::EVE_DIR),
                    &opts.name,
                    cfg,
                    Some(&dir.join(crate::siem::saved::FILE)),
                )
                .map_err(AgentError::Usage)?,
            ),
            (Some(cfg), None) if cfg.any() => {
                return Err(AgentError::Usage(
                    "a SIEM sink needs a run directory (its EVE logs)".into(),
                ))
            }
            _ => None,
        };
        let core = Arc::new(AgentState {
            host: opts.host,
            name: opts.name.clone(),
            underlay: opts.underlay,
            api: Mutex::new(String::new()),
            dp: Mutex::new(dp),
            config: Mutex::new(None),
            supervisor: Mutex::new(supervisor),
            run_dir: opts.run_dir.clone(),
            last_heard: Mutex::new(None),
            controller_up: AtomicBool::new(false),
            api_token: opts.api_token.clone(),
            capacity: opts.capacity.clone(),
            api_cert: opts
                .api_tls
                .then(|| ApiCert::load(opts.host, opts.run_dir.clone(), SystemTime::now())),
            siem: siem.as_ref().map(|f| f.stats().clone()),
        });
        if let Some(dir) = &opts.run_dir {
            load_saved(&core, &dir.join("config.json"));
        }
        let api = match &core.api_cert {
            Some(c) => crate::http::ApiServer::start_tls(
                &opts.listen,
                core.clone(),
                c.slot.clone(),
                c.trust.clone(),
            ),
            None => crate::http::ApiServer::start(&opts.listen, core.clone()),
        }
        .map_err(|err| AgentError::Listen {
            addr: opts.listen.clone(),
            err,
        })?;
        let scheme = if core.api_cert.is_some() {
            "https"
        } else {
            "http"
        };
        if let Ok(mut a) = core.api.lock() {
            *a = format!("{scheme}://{}", api.addr());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let heartbeat = opts.controller.clone().and_then(|url| {
            let (core, stop) = (core.clone(), stop.clone());
            let token = opts.controller_token.clone();
            let tls = opts.controller_tls.clone();
            std::thread::Builder::new()
                .name("sluice-heartbeat".into())
                .spawn(sluice_logging::in_current_span(move || {
                    heartbeat(&core, tls, &url, token.as_deref(), &stop)
                }))
                .ok()
        });
        drop(entered);
        Ok(Agent {
            core,
            stop,
            api: Some(api),
            heartbeat,
            siem,
            span,
        })
    }

    /// The shared core (configuration, status, metrics).
    pub fn core(&self) -> &Arc<AgentState> {
        &self.core
    }

    /// Base URL of the API, e.g. `http://127.0.0.1:40123`.
    pub fn api_url(&self) -> String {
        self.core.api_url()
    }

    /// Stops everything: heartbeat, API, instances (processes and namespaces),
    /// data plane.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
        if let Some(mut a) = self.api.take() {
            a.stop();
        }
        if let Some(mut f) = self.siem.take() {
            f.stop();
        }
        if let Ok(mut s) = self.core.supervisor.lock() {
            if let Some(mut s) = s.take() {
                s.stop();
            }
        }
        if let Ok(mut d) = self.core.dp.lock() {
            d.stop();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Writes `path` readable by its owner only: a configuration carries store
/// passwords.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // `mode` applies only to a file it creates.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

fn load_saved(core: &AgentState, path: &std::path::Path) {
    let Ok(text) = std::fs::read(path) else {
        return;
    };
    match serde_json::from_slice::<AgentConfig>(&text) {
        Ok(cfg) => match core.apply_inner(cfg, false) {
            Ok(v) => {
                tracing::info!(version = v, path = %path.display(), "running the saved configuration")
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring the saved configuration")
            }
        },
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring the saved configuration")
        }
    }
}

/// A client of the controller presenting `slot`'s certificate (if any) as
/// its client certificate; with no session or connection of an older one.
fn controller_client(
    tls: Option<&Arc<rustls::ClientConfig>>,
    cert: Option<&ApiCert>,
) -> ureq::Agent {
    let mut agent = ureq::AgentBuilder::new().timeout(Duration::from_millis(500));
    if let Some(tls) = tls {
        let mut c = (**tls).clone();
        if let Some(a) = cert {
            c.client_auth_cert_resolver = Arc::new(Presenting {
                slot: a.slot.clone(),
                withheld: a.withheld.clone(),
            });
        }
        // A resumed session keeps the identity it was made with.
        c.resumption = rustls::client::Resumption::in_memory_sessions(8);
        agent = agent.tls_config(Arc::new(c));
    }
    agent.build()
}

fn heartbeat(
    core: &AgentState,
    tls: Option<Arc<rustls::ClientConfig>>,
    controller: &str,
    token: Option<&str>,
    stop: &AtomicBool,
) {
    // Replicated controllers: only the leader listens; the agent heartbeats
    // to the one that answered last and moves on while one refuses the
    // connection.
    let urls: Vec<String> = controller
        .split(',')
        .map(|c| format!("{}/v1/hosts", c.trim().trim_end_matches('/')))
        .collect();
    let mut current = 0usize;
    let bearer = token.map(|t| format!("Bearer {t}"));
    let cert = core.api_cert.as_ref();
    // Which certificate the client was made with, and whether it was
    // withheld then.
    let generation = || cert.map_or((0, false), |c| (c.slot.generation(), c.presented()));
    let mut agent = controller_client(tls.as_ref(), cert);
    let mut made_with = generation();
    // None: nothing logged yet.
    let mut last_ok: Option<bool> = None;
    // The interval the controller told last (none yet: the shortest).
    let mut every = HEARTBEAT_EVERY;
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        let running = core.version();
        if generation() != made_with {
            agent = controller_client(tls.as_ref(), cert);
            made_with = generation();
        }
        // The bootstrap token only until the host has its certificate: the
        // controller spent it when it issued that.
        let joined = cert.is_some_and(ApiCert::presented);
        let registration = core.registration();
        let sent = news(&registration);
        let mut answer = None;
        for i in 0..urls.len() {
            let idx = (current + i) % urls.len();
            let mut req = agent.post(&urls[idx]);
            if let (Some(b), false) = (&bearer, joined) {
                req = req.set("Authorization", b);
            }
            let r = req
                .send_json(&registration)
                .map(|resp| resp.into_json::<serde_json::Value>().ok());
            let refused = matches!(&r, Err(ureq::Error::Transport(t))
                if t.kind() == ureq::ErrorKind::ConnectionFailed);
            answer = Some(r);
            if !refused {
                current = idx;
                break;
            }
        }
        // `urls` is never empty (splitting yields at least one part).
        let Some(r) = answer else { break };
        let ok = r.is_ok();
        if ok {
            core.heard();
        }
        if let (Err(e), Some(c), Some(_), true) = (&r, cert, &bearer, joined) {
            if certificate_refused(e) {
                tracing::warn!(
                    error = %e,
                    "the controller refuses this host's certificate: joining again with the bootstrap token"
                );
                c.withhold();
            }
        }
        let desired = match &r {
            Ok(Some(v)) => v.get("desired_version").and_then(|d| d.as_u64()),
            _ => None,
        };
        // An answer tells the interval (one without it comes from a controller
        // that expects the shortest); no answer keeps the last one, so a fleet
        // whose controller is down does not hammer it faster.
        if let Ok(Some(v)) = &r {
            every =
                sluice_proto::heartbeat_interval(v.get("heartbeat_ms").and_then(|m| m.as_u64()));
        }
        if let (Ok(Some(v)), Some(cert)) = (&r, &core.api_cert) {
            let chain = v.get("api_cert").and_then(|c| c.as_str());
            let end = v.get("api_cert_not_after_ms").and_then(|e| e.as_u64());
            if let (Some(chain), Some(end)) = (chain, end) {
                let end = SystemTime::UNIX_EPOCH + Duration::from_millis(end);
                cert.install(chain, end, SystemTime::now());
            }
        }
        // Leases may be granted a while longer only while the controller
        // answers and this agent runs the configuration it wants: one that
        // missed a revocation, or lost the controller, lets them lapse
        // (docs/STATE.md, "Leases in the running system").
        if desired == Some(running) {
            if let Ok(dp) = core.dp.lock() {
                // Longer than the interval just told (by two of them), so
                // leases do not lapse between answered heartbeats.
                dp.allow_leases_until(
                    crate::io::wall_ns() + sluice_proto::lease_grace(every).as_nanos() as u64,
                );
            }
        }
        core.controller_up.store(ok, Ordering::Relaxed);
        if last_ok != Some(ok) {
            match r {
                Ok(_) => tracing::info!(%controller, "registered with the controller"),
                Err(e) => tracing::warn!(
                    %controller,
                    error = %heartbeat_error(e),
                    version = core.version(),
                    "controller unreachable: forwarding with the configuration it pushed last"
                ),
            }
            last_ok = Some(ok);
        }
        // Sleep out the interval, but heartbeat at once (no sooner than
        // HEARTBEAT_EVERY after the last) when there is news the controller
        // acts on: a configuration applied (it waits for that to count the
        // host in sync, or a lease revocation done) or an instance's health
        // changed; so a long interval slows only the detection of a dead
        // agent.
        let mut wait = every.saturating_sub(started.elapsed());
        while !wait.is_zero() && !stop.load(Ordering::Acquire) {
            let nap = wait.min(HEARTBEAT_EVERY);
            std::thread::sleep(nap);
            wait -= nap;
            if !wait.is_zero() && core.news() != sent {
                break;
            }
        }
    }
}

/// What in a heartbeat the controller must hear of at once, reduced to a
/// number: the version the agent runs, its instances' liveness, the hosts it
/// accuses and the outcomes of its backend checks (not counters, which change
/// all the time and can wait for the next heartbeat).
fn news(hb: &HostHeartbeat) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hb.registration.config_version.hash(&mut h);
    for i in &hb.instances {
        (&i.name, i.port, i.alive, i.suspected).hash(&mut h);
    }
    for a in &hb.accusations {
        a.host.hash(&mut h);
    }
    for c in &hb.backend_checks {
        let last = c.last.map(|o| match o {
            sluice_proto::CheckOutcome::Ok => (0u8, 0u16),
            sluice_proto::CheckOutcome::Refused => (1, 0),
            sluice_proto::CheckOutcome::Timeout => (2, 0),
            sluice_proto::CheckOutcome::Status(s) => (3, s),
        });
        (&c.tenant, &c.middlebox, &c.backend, &c.target, last).hash(&mut h);
    }
    h.finish()
}

/// Runs an agent until `stop` is set (the binary sets it on SIGINT/SIGTERM);
/// prints `listening on http://ADDR` as the first line of stdout.
pub fn run(opts: &AgentOptions, stop: &AtomicBool) -> Result<(), AgentError> {
    let agent = Agent::start(opts)?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {}", agent.api_url());
        let _ = out.flush();
    }
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let span = agent.span.clone();
    let _entered = span.enter();
    tracing::info!("stopping");
    agent.shutdown();
    Ok(())
}

/// A failed heartbeat's cause: the controller's own message for an answer
/// (plain HTTP to its TLS port names the fix), a hint for an untrusted
/// certificate.
fn heartbeat_error(e: ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, resp) => {
            let text = resp.into_string().unwrap_or_default();
            let detail = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["detail"].as_str().map(String::from))
                .unwrap_or(text);
            format!("HTTP {code}: {detail}")
        }
        e => {
            let text = e.to_string();
            if text.contains("UnknownIssuer") || text.contains("invalid peer certificate") {
                format!("{text}: set ca_file to the controller's CA (its DB.ca.pem)")
            } else {
                text
            }
        }
    }
}

/// Seawall's controllers as the status reports them, with port names.
fn isolation(p: &crate::io::Published, names: &[(u16, String)]) -> Vec<IsolationStatus> {
    p.isolation
        .iter()
        .map(|(e, rate, st)| IsolationStatus {
            port: e.port,
            name: names
                .iter()
                .find(|(id, _)| *id == e.port)
                .map(|(_, n)| n.clone())
                .unwrap_or_default(),
            dest_host: e.host,
            rate_bps: *rate,
            admitted_packets: st.admitted_packets,
            admitted_bytes: st.admitted_bytes,
            policed_packets: st.policed_packets,
            policed_bytes: st.policed_bytes,
            reported_received: st.reported_received,
            reported_lost: st.reported_lost,
            feedbacks: st.feedbacks,
            decreases: st.decreases,
            queued_packets: st.queued_packets,
            queue_bytes_now: st.queue_bytes_now,
            weight: st.weight,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat() -> HostHeartbeat {
        HostHeartbeat {
            registration: HostRegistration {
                host: 1,
                name: "h1".into(),
                underlay: Ipv4Addr::new(10, 0, 0, 1),
                api: "http://127.0.0.1:1".into(),
                config_version: 3,
                api_token: None,
                capacity: None,
                api_csr: None,
            },
            instances: vec![InstanceHealth {
                name: "t/fw/0".into(),
                port: 4,
                alive: true,
                rx_packets: 10,
                last_heartbeat_age_ms: Some(5),
                ..InstanceHealth::default()
            }],
            chains: Vec::new(),
            accusations: Vec::new(),
            backend_checks: Vec::new(),
            peers: Vec::new(),
        }
    }

    #[test]
    fn counters_are_no_news_but_a_version_or_an_instance_failing_is() {
        let hb = beat();
        let mut counted = beat();
        counted.instances[0].rx_packets = 99;
        counted.instances[0].last_heartbeat_age_ms = Some(9);
        assert_eq!(news(&counted), news(&hb), "counters wait for the next beat");
        let mut applied = beat();
        applied.registration.config_version = 4;
        assert_ne!(news(&applied), news(&hb));
        let mut suspected = beat();
        suspected.instances[0].suspected = true;
        assert_ne!(news(&suspected), news(&hb));
        let mut gone = beat();
        gone.instances.clear();
        assert_ne!(news(&gone), news(&hb));
        let mut failing = beat();
        failing.backend_checks.push(sluice_proto::BackendCheck {
            tenant: "t".into(),
            middlebox: "lb".into(),
            backend: "10.0.0.1:80".into(),
            target: "10.0.0.1:80".into(),
            ok: 0,
            failed: 1,
            last: Some(sluice_proto::CheckOutcome::Timeout),
        });
        assert_ne!(news(&failing), news(&hb));
        let mut more = failing.clone();
        more.backend_checks[0].failed = 2;
        assert_eq!(news(&more), news(&failing));
    }
}
