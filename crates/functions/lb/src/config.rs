//! The load balancer's configuration and its validation into an [`Lb`].

use rustc_hash::FxHashMap;
use serde::Deserialize;
use sluice_nf::batch::{Pass, Records};
use sluice_nf::BackendState;
use sluice_state::{Key, Namespace, Ops};
use sluice_wire::{ip_proto, IpAddr};

use crate::{maglev, Counters, Lb, TABLE_LOAD};

/// Transport of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    /// TCP (default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

/// How new connections pick a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Maglev consistent hashing of the client flow (default).
    #[default]
    Maglev,
    /// Fewest open connections relative to weight.
    LeastConnections,
}

/// One backend.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `addr` or `addr:port` (`[v6]:port`); the port defaults to the service's.
    pub addr: String,
    /// Relative weight. Default 1; 0 takes no new connections.
    #[serde(default = "one")]
    pub weight: u32,
    /// Start draining: no new connections, existing ones continue. Default false.
    #[serde(default)]
    pub drain: bool,
}

fn one() -> u32 {
    1
}

/// One virtual service.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Virtual IP.
    pub vip: String,
    /// Virtual port.
    pub port: u16,
    /// Transport. Default tcp.
    #[serde(default)]
    pub proto: Proto,
    /// Backend choice. Default maglev.
    #[serde(default)]
    pub algorithm: Algorithm,
    /// Maglev table size, a prime. Default 65537.
    #[serde(default = "table_size")]
    pub table_size: usize,
    /// The backends.
    pub backends: Vec<BackendConfig>,
    /// Active checks of the backends (none: only the passive signal and
    /// drains apply). Run by each backend's host agent, not by the LB
    /// instances (docs/RELIABILITY.md).
    #[serde(default)]
    pub health_check: Option<HealthCheckConfig>,
}

/// How a health check talks to a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CheckProto {
    /// A TCP handshake: SYN-ACK passes, RST or silence fails (default).
    #[default]
    Tcp,
    /// An HTTP/1.0 `GET path` after the handshake: a 2xx or 3xx status
    /// line passes; another status, a RST or silence fails.
    Http,
}

/// A service's active health check (`health_check:`; haproxy's model).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// How. Default tcp.
    #[serde(default)]
    pub proto: CheckProto,
    /// Port checked. Default: each backend's own port.
    #[serde(default)]
    pub port: Option<u16>,
    /// The path an `http` check gets. Default `/`; only with `proto: http`.
    #[serde(default)]
    pub path: Option<String>,
    /// Time between the starts of two checks, ms. Default 2000.
    #[serde(default = "interval_ms")]
    pub interval_ms: u64,
    /// A check not answered within this long fails, ms. Default 1000.
    #[serde(default = "timeout_ms")]
    pub timeout_ms: u64,
    /// Consecutive passes that bring a down backend up. Default 2.
    #[serde(default = "rise")]
    pub rise: u32,
    /// Consecutive failures that take an up backend down. Default 3.
    #[serde(default = "fall")]
    pub fall: u32,
}

fn interval_ms() -> u64 {
    2000
}
fn timeout_ms() -> u64 {
    1000
}
fn rise() -> u32 {
    2
}
fn fall() -> u32 {
    3
}

/// Shortest check interval: one probe per backend every 100 ms at most.
pub const MIN_CHECK_INTERVAL_MS: u64 = 100;
/// Longest check interval or timeout (an hour).
pub const MAX_CHECK_INTERVAL_MS: u64 = 3_600_000;
/// Largest `rise` or `fall`.
pub const MAX_CHECK_THRESHOLD: u32 = 100;
/// Longest `path` of an `http` check (the request must fit one segment).
pub const MAX_CHECK_PATH: usize = 256;

impl HealthCheckConfig {
    /// Checks the values; the error names the field at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.port == Some(0) {
            return Err("health_check.port must be 1 to 65535".into());
        }
        if let Some(p) = &self.path {
            if self.proto != CheckProto::Http {
                return Err("health_check.path needs proto: http".into());
            }
            if !p.starts_with('/')
                || p.len() > MAX_CHECK_PATH
                || !p.bytes().all(|b| b.is_ascii_graphic())
            {
                return Err(format!(
                    "health_check.path {p:?} must start with / and be at most {MAX_CHECK_PATH} \
                     printable ASCII characters without spaces"
                ));
            }
        }
        if !(MIN_CHECK_INTERVAL_MS..=MAX_CHECK_INTERVAL_MS).contains(&self.interval_ms) {
            return Err(format!(
                "health_check.interval_ms {} must be {MIN_CHECK_INTERVAL_MS} to \
                 {MAX_CHECK_INTERVAL_MS}",
                self.interval_ms
            ));
        }
        if self.timeout_ms == 0 || self.timeout_ms > self.interval_ms {
            return Err(format!(
                "health_check.timeout_ms {} must be 1 to interval_ms ({}): one check at a time",
                self.timeout_ms, self.interval_ms
            ));
        }
        for (name, v) in [("rise", self.rise), ("fall", self.fall)] {
            if !(1..=MAX_CHECK_THRESHOLD).contains(&v) {
                return Err(format!(
                    "health_check.{name} {v} must be 1 to {MAX_CHECK_THRESHOLD}"
                ));
            }
        }
        Ok(())
    }

    /// The path an `http` check gets (`None` for `tcp`).
    pub fn http_path(&self) -> Option<&str> {
        match self.proto {
            CheckProto::Tcp => None,
            CheckProto::Http => Some(self.path.as_deref().unwrap_or("/")),
        }
    }

    /// The state machine's parameters.
    pub fn params(&self) -> crate::health::CheckParams {
        crate::health::CheckParams {
            interval_ns: self.interval_ms.saturating_mul(1_000_000),
            timeout_ns: self.timeout_ms.saturating_mul(1_000_000),
            rise: self.rise,
            fall: self.fall,
        }
    }
}

fn table_size() -> usize {
    maglev::DEFAULT_TABLE_SIZE
}

/// Connection timeouts, in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// TCP idle timeout. Default 3600.
    pub tcp: u64,
    /// After FINs both ways or a RST, before the assignment is removed (lets the
    /// last ACKs through). Default 10.
    pub tcp_closing: u64,
    /// UDP idle timeout. Default 30.
    pub udp: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp: 3600,
            tcp_closing: 10,
            udp: 30,
        }
    }
}

/// Load-balancer configuration (YAML under `type: lb`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The virtual services.
    pub services: Vec<ServiceConfig>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// `last_seen` is rewritten at most once per this many milliseconds per
    /// connection. Default 1000.
    pub refresh_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            services: Vec::new(),
            timeouts: Timeouts::default(),
            refresh_ms: 1000,
        }
    }
}

/// A configuration the load balancer cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lb config: {0}")]
pub struct ConfigError(pub String);

/// A backend as configured.
pub(crate) struct Backend {
    pub(crate) addr: IpAddr,
    pub(crate) port: u16,
    pub(crate) weight: u32,
    pub(crate) drain: bool,
    /// Health and operator drain, at run time ([`Lb::set_backend_states`]).
    pub(crate) admin: BackendState,
    pub(crate) load_key: Key,
}

impl Backend {
    /// Whether it may take new connections.
    pub(crate) fn eligible(&self) -> bool {
        !self.drain && self.weight > 0 && self.admin.takes_new()
    }
}

/// A service as configured, with its Maglev table.
pub(crate) struct Service {
    pub(crate) vip: IpAddr,
    pub(crate) port: u16,
    pub(crate) proto: u8,
    pub(crate) algorithm: Algorithm,
    pub(crate) table_size: usize,
    pub(crate) names: Vec<String>,
    pub(crate) backends: Vec<Backend>,
    pub(crate) table: Vec<u16>,
}

impl Service {
    /// Rebuilds the Maglev table after a weight or drain change.
    pub(crate) fn rebuild(&mut self) {
        if self.algorithm == Algorithm::Maglev {
            let w: Vec<u32> = self.backends.iter().map(|b| b.weight).collect();
            let el: Vec<bool> = self.backends.iter().map(Backend::eligible).collect();
            self.table = maglev::build_table(&self.names, &w, &el, self.table_size);
        }
    }
}

fn parse_backend(s: &str, default_port: u16) -> Result<(IpAddr, u16), ConfigError> {
    if let Ok(a) = s.parse::<std::net::IpAddr>() {
        return Ok((a.into(), default_port));
    }
    s.parse::<std::net::SocketAddr>()
        .map(|sa| (sa.ip().into(), sa.port()))
        .map_err(|_| ConfigError(format!("invalid backend address \"{s}\"")))
}

/// Builds a load balancer. `_base_dir` is unused (no files) but kept for a
/// uniform constructor.
pub fn build(
    config: &Config,
    ns: Namespace,
    _base_dir: &std::path::Path,
) -> Result<Lb, ConfigError> {
    if config.services.is_empty() {
        return Err(ConfigError("at least one service is required".into()));
    }
    let mut services = Vec::new();
    let mut vips = FxHashMap::default();
    let mut backs = FxHashMap::default();
    for (si, sc) in config.services.iter().enumerate() {
        let vip: IpAddr = sc
            .vip
            .parse::<std::net::IpAddr>()
            .map_err(|_| ConfigError(format!("invalid vip \"{}\"", sc.vip)))?
            .into();
        let proto = match sc.proto {
            Proto::Tcp => ip_proto::TCP,
            Proto::Udp => ip_proto::UDP,
        };
        let what = format!("{}:{}/{:?}", sc.vip, sc.port, sc.proto).to_lowercase();
        if vips.insert((vip, sc.port, proto), si as u16).is_some() {
            return Err(ConfigError(format!("service {what} defined twice")));
        }
        if sc.backends.is_empty() || sc.backends.len() >= u16::MAX as usize {
            return Err(ConfigError(format!(
                "service {what} needs 1 to 65534 backends"
            )));
        }
        if sc.algorithm == Algorithm::Maglev
            && (sc.table_size > maglev::MAX_TABLE_SIZE
                || !maglev::is_prime(sc.table_size)
                || sc.table_size < sc.backends.len())
        {
            return Err(ConfigError(format!(
                "service {what}: table_size {} must be a prime at least the number of backends \
                 and at most {}",
                sc.table_size,
                maglev::MAX_TABLE_SIZE
            )));
        }
        if let Some(hc) = &sc.health_check {
            hc.validate()
                .map_err(|e| ConfigError(format!("service {what}: {e}")))?;
        }
        let mut svc = Service {
            vip,
            port: sc.port,
            proto,
            algorithm: sc.algorithm,
            table_size: sc.table_size,
            names: Vec::new(),
            backends: Vec::new(),
            table: Vec::new(),
        };
        for (bi, bc) in sc.backends.iter().enumerate() {
            let (addr, port) = parse_backend(&bc.addr, sc.port)?;
            if addr.is_v4() != vip.is_v4() {
                return Err(ConfigError(format!(
                    "backend \"{}\" of service {what}: address family differs from the vip",
                    bc.addr
                )));
            }
            if backs
                .insert((addr, port, proto), (si as u16, bi as u16))
                .is_some()
            {
                return Err(ConfigError(format!(
                    "backend \"{}\" appears twice (its replies would be ambiguous)",
                    bc.addr
                )));
            }
            let mut kb = [0u8; 4];
            kb[..2].copy_from_slice(&(si as u16).to_be_bytes());
            kb[2..].copy_from_slice(&(bi as u16).to_be_bytes());
            svc.names.push(format!("{addr}:{port}"));
            svc.backends.push(Backend {
                addr,
                port,
                weight: bc.weight,
                drain: bc.drain,
                admin: BackendState::Up,
                load_key: Key::new(ns, TABLE_LOAD, &kb),
            });
        }
        svc.rebuild();
        services.push(svc);
    }
    let s = |x: u64| x.saturating_mul(1_000_000_000);
    Ok(Lb {
        ns,
        services,
        vips,
        backs,
        t_tcp: s(config.timeouts.tcp),
        t_closing: s(config.timeouts.tcp_closing),
        t_udp: s(config.timeouts.udp),
        refresh_ns: config.refresh_ms.saturating_mul(1_000_000),
        pass: Pass::default(),
        ops2: Ops::new(),
        rets: Records::default(),
        pending: Vec::new(),
        fold_replies: Vec::new(),
        need_loads: false,
        loads: Vec::new(),
        keys: Vec::new(),
        gets: Vec::new(),
        ids: Vec::new(),
        others: Vec::new(),
        c: Counters::default(),
    })
}
