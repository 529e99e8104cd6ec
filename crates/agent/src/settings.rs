//! `sluiced run`'s settings: flags, the configuration file
//! (`--config /etc/sluice/agent.toml`), and the checks made before the agent
//! starts on a real host.
//!
//! Every flag has a key of the same name (snake_case) in the file; a flag given
//! on the command line wins over the file, the file over the default.
//! [`resolve`] does that merge and is pure; [`prepare`] then looks at the
//! machine: the underlay interface's address and MTU ([`check_mtu`]), the
//! controller token file.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::dataplane::SEAL_OVERHEAD;
use crate::AgentOptions;

/// Where the shipped default file is installed.
pub const DEFAULT_PATH: &str = "/etc/sluice/agent.toml";

/// Default API listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:0";
/// Default name prefix of instance namespaces and interfaces.
pub const DEFAULT_PREFIX: &str = "sl";
/// Default run directory.
pub const DEFAULT_RUN_DIR: &str = "/var/lib/sluice-agent";
/// Default NF instance suspicion delay, milliseconds.
pub const DEFAULT_SUSPECT_MS: u64 = 150;
/// Default MTU of the VMs' interfaces.
pub const DEFAULT_VM_MTU: u32 = 1500;
/// Default number of NF instance slots a host declares to the controller.
/// Each instance is a process with its own namespace, links and state-store
/// connections, and busy instances want a core each: 64 is a large
/// server's cores (no more than a few instances per core, so the
/// controller spreads load before a host is oversubscribed) and far below
/// the 16383 port ids a host's VMs and instances share.
pub const DEFAULT_INSTANCE_SLOTS: u32 = 64;

/// `sluiced run`'s flags. None has a default here: a flag not given leaves the
/// file's value (or the default, [`resolve`]).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// TOML file with any of the settings below (same names, snake_case);
    /// flags given here win over it (shipped: packaging/etc/agent.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Only check the settings (file and flags; not the interfaces or the
    /// token file): print them and exit, 0 if they are complete and valid.
    #[arg(long)]
    pub check_config: bool,
    /// Host id (unique in the fabric). Required.
    #[arg(long)]
    pub host_id: Option<u32>,
    /// Host name. Required.
    #[arg(long)]
    pub name: Option<String>,
    /// Network namespace to open the data-plane sockets in (`ip netns`
    /// name). Unset: the agent's own, as on a real host.
    #[arg(long)]
    pub netns: Option<String>,
    /// Tunnel endpoint address of the host [default: underlay_interface's
    /// IPv4 address].
    #[arg(long)]
    pub underlay: Option<Ipv4Addr>,
    /// The interface facing the fabric (e.g. eth1): its address is the
    /// underlay address unless `underlay` is given, and its MTU must carry
    /// the VMs' frames in Geneve.
    #[arg(long)]
    pub underlay_interface: Option<String>,
    /// Controller base URL, e.g. https://10.0.0.1:7420; of replicated
    /// controllers, every one's URL, comma-separated (the agent heartbeats
    /// to the one that listens: the leader). Required.
    #[arg(long)]
    pub controller: Option<String>,
    /// CA certificate (PEM) the controller's certificate must chain to (the
    /// controller's own CA is its `DB.ca.pem`) [default: the web's roots].
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// File holding this host's API token (role `host:ID`; `sluice token
    /// create h1 --role host:1`). A file, never a flag: command lines are
    /// visible to every local user.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// API listen address (port 0: any; the address is printed) [default:
    /// 127.0.0.1:0].
    #[arg(long)]
    pub listen: Option<String>,
    /// Name prefix of instance namespaces and interfaces (at most 9 bytes)
    /// [default: sl].
    #[arg(long)]
    pub prefix: Option<String>,
    /// Directory for the saved configuration, chain files and instance logs
    /// [default: /var/lib/sluice-agent].
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Geneve UDP port [default: 6081].
    #[arg(long)]
    pub geneve_port: Option<u16>,
    /// An NF instance without a heartbeat for at least this many milliseconds
    /// is suspected and its traffic moved to the surviving instances; the
    /// timeout adapts to how regularly its heartbeats arrive, up to 250 ms
    /// (an exited instance is acted on at once) [default: 150].
    #[arg(long)]
    pub suspect_ms: Option<u64>,
    /// Largest MTU of the VMs' interfaces; the underlay's MTU must carry it
    /// in Geneve [default: 1500].
    #[arg(long)]
    pub vm_mtu: Option<u32>,
    /// NF instance slots this host offers: the controller places at most
    /// this many instances here (an instance takes its middlebox's
    /// `resources.slots`, 1 by default); 0: none [default: 64].
    #[arg(long)]
    pub instance_slots: Option<u32>,
    /// The rack (or any locality / failure domain) this host is in, declared
    /// to the controller: rack-aware placement puts a middlebox's instances
    /// in the racks of its chains' VMs [default: none].
    #[arg(long)]
    pub rack: Option<String>,
    /// The capacity of this host's rack uplink, Mbit/s, declared to the
    /// controller: network-aware distribution weighs the rack's uplink by it
    /// unless the controller's `rack_uplink` declares the rack; 0: not
    /// declared [default: 0].
    #[arg(long)]
    pub rack_uplink_mbit: Option<u64>,
    /// Forwarding threads of the data plane (`sluice-dataplane-K`), 1 to 64:
    /// flows are sharded over them by their direction-invariant hash, so
    /// both directions of a flow stay on one thread. 0: as many as the cores
    /// the agent may run on. With Seawall on, one [default: 0].
    #[arg(long)]
    pub dataplane_threads: Option<u32>,
    /// Whether the controller seals the fabric (its `fabric_auth`): the MTU
    /// check then counts the sealing's bytes [default: true].
    #[arg(long)]
    pub fabric_auth: Option<bool>,
    /// Rate-control this host's VMs and NF instances with Seawall
    /// (docs/ISOLATION.md). `--seawall` alone means true [default: false].
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub seawall: Option<bool>,
    /// Seawall: how often rates change (receivers report), milliseconds
    /// [default: 5].
    #[arg(long)]
    pub seawall_period_ms: Option<f64>,
    /// Seawall: additive increase per period, Mbit/s [default: 10].
    #[arg(long)]
    pub seawall_increase_mbps: Option<f64>,
    /// Seawall: multiplicative decrease on loss (0 < d < 1) [default: 0.2].
    #[arg(long)]
    pub seawall_decrease: Option<f64>,
    /// Seawall: highest rate (and a new sender's), Mbit/s [default: 100000].
    #[arg(long)]
    pub seawall_max_mbps: Option<f64>,
    /// Seawall: depth of a sender's token bucket, milliseconds at its rate
    /// [default: 2].
    #[arg(long)]
    pub seawall_burst_ms: Option<f64>,
    /// Seawall: queueing delay on the way to this host that counts as
    /// congestion, milliseconds (0: only loss does) [default: 1].
    #[arg(long)]
    pub seawall_queue_delay_ms: Option<f64>,
    /// SIEM sink: a Redis/Valkey server to add every EVE line of this host's
    /// NF instances to, one stream per tenant:
    /// `redis://[USER@]HOST:PORT[?password_file=F]` (no password in the URL)
    /// [default: none].
    #[arg(long)]
    pub siem_redis: Option<String>,
    /// SIEM sink: stream key prefix; tenant T's lines go to `PREFIX:T`
    /// [default: sluice:eve].
    #[arg(long)]
    pub siem_redis_stream: Option<String>,
    /// SIEM sink: each stream is trimmed to about this many entries
    /// (`XADD MAXLEN ~`) [default: 100000].
    #[arg(long)]
    pub siem_redis_maxlen: Option<u64>,
    /// SIEM sink: a syslog receiver to send every EVE line to as an RFC 5424
    /// message: `udp://HOST:PORT` or `tcp://HOST:PORT` [default: none].
    #[arg(long)]
    pub siem_syslog: Option<String>,
    /// SIEM sink: EVE lines each sink holds while it is down; beyond, the
    /// oldest are dropped and counted lost [default: 10000].
    #[arg(long)]
    pub siem_queue: Option<usize>,
}

/// The configuration file: the flags' settings, each optional. A key that is
/// not one of them is an error (a misspelt key must not be ignored).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    /// See [`RunArgs::host_id`].
    pub host_id: Option<u32>,
    /// See [`RunArgs::name`].
    pub name: Option<String>,
    /// See [`RunArgs::netns`].
    pub netns: Option<String>,
    /// See [`RunArgs::underlay`].
    pub underlay: Option<Ipv4Addr>,
    /// See [`RunArgs::underlay_interface`].
    pub underlay_interface: Option<String>,
    /// See [`RunArgs::controller`].
    pub controller: Option<String>,
    /// See [`RunArgs::token_file`].
    pub token_file: Option<PathBuf>,
    /// See [`RunArgs::ca_file`].
    pub ca_file: Option<PathBuf>,
    /// See [`RunArgs::listen`].
    pub listen: Option<String>,
    /// See [`RunArgs::prefix`].
    pub prefix: Option<String>,
    /// See [`RunArgs::run_dir`].
    pub run_dir: Option<PathBuf>,
    /// See [`RunArgs::geneve_port`].
    pub geneve_port: Option<u16>,
    /// See [`RunArgs::suspect_ms`].
    pub suspect_ms: Option<u64>,
    /// See [`RunArgs::vm_mtu`].
    pub vm_mtu: Option<u32>,
    /// See [`RunArgs::instance_slots`].
    pub instance_slots: Option<u32>,
    /// See [`RunArgs::rack`].
    pub rack: Option<String>,
    /// See [`RunArgs::rack_uplink_mbit`].
    pub rack_uplink_mbit: Option<u64>,
    /// See [`RunArgs::dataplane_threads`].
    pub dataplane_threads: Option<u32>,
    /// See [`RunArgs::fabric_auth`].
    pub fabric_auth: Option<bool>,
    /// See [`RunArgs::seawall`].
    pub seawall: Option<bool>,
    /// See [`RunArgs::seawall_period_ms`].
    pub seawall_period_ms: Option<f64>,
    /// See [`RunArgs::seawall_increase_mbps`].
    pub seawall_increase_mbps: Option<f64>,
    /// See [`RunArgs::seawall_decrease`].
    pub seawall_decrease: Option<f64>,
    /// See [`RunArgs::seawall_max_mbps`].
    pub seawall_max_mbps: Option<f64>,
    /// See [`RunArgs::seawall_burst_ms`].
    pub seawall_burst_ms: Option<f64>,
    /// See [`RunArgs::seawall_queue_delay_ms`].
    pub seawall_queue_delay_ms: Option<f64>,
    /// See [`RunArgs::siem_redis`].
    pub siem_redis: Option<String>,
    /// See [`RunArgs::siem_redis_stream`].
    pub siem_redis_stream: Option<String>,
    /// See [`RunArgs::siem_redis_maxlen`].
    pub siem_redis_maxlen: Option<u64>,
    /// See [`RunArgs::siem_syslog`].
    pub siem_syslog: Option<String>,
    /// See [`RunArgs::siem_queue`].
    pub siem_queue: Option<usize>,
}

/// Why the settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file could not be read.
    #[error("{path}: {err}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        err: std::io::Error,
    },
    /// The file is not valid TOML, or has an unknown key or a value of the
    /// wrong type (the message names it).
    #[error("{path}: {msg}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said (line, column, key).
        msg: String,
    },
    /// A required setting is in neither the flags nor the file.
    #[error("{field} is not set: give --{flag} on the command line, or `{field} = ...` in {file}")]
    Missing {
        /// The setting's name in the file.
        field: &'static str,
        /// The flag.
        flag: String,
        /// The file, or how to give one.
        file: String,
    },
    /// A value is out of range or inconsistent with another.
    #[error("{0}")]
    Invalid(String),
    /// The underlay cannot carry the VMs' frames.
    #[error(transparent)]
    Mtu(#[from] MtuError),
}

/// The agent's settings once flags, file and defaults are merged.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// Host id.
    pub host_id: u32,
    /// Host name.
    pub name: String,
    /// Data-plane namespace (`None`: the agent's own).
    pub netns: Option<String>,
    /// Tunnel endpoint address, if given.
    pub underlay: Option<Ipv4Addr>,
    /// The interface facing the fabric, if named.
    pub underlay_interface: Option<String>,
    /// Controller base URL.
    pub controller: String,
    /// Controller token file.
    pub token_file: Option<PathBuf>,
    /// The CA the controller's certificate must chain to.
    pub ca_file: Option<PathBuf>,
    /// API listen address.
    pub listen: String,
    /// Instance name prefix.
    pub prefix: String,
    /// Run directory.
    pub run_dir: PathBuf,
    /// Geneve UDP port.
    pub geneve_port: u16,
    /// NF instance suspicion delay.
    pub suspect_ms: u64,
    /// Largest VM MTU.
    pub vm_mtu: u32,
    /// NF instance slots declared to the controller.
    pub instance_slots: u32,
    /// Rack declared to the controller (`None`: no locality).
    pub rack: Option<String>,
    /// Rack uplink capacity declared to the controller, Mbit/s (`None`:
    /// not declared).
    pub rack_uplink_mbit: Option<u64>,
    /// Forwarding threads (`None`: [`default_dataplane_threads`]).
    pub dataplane_threads: Option<u32>,
    /// Whether the fabric is sealed.
    pub fabric_auth: bool,
    /// Seawall's configuration (`None`: off).
    pub seawall: Option<sluice_seawall::Config>,
    /// The SIEM sinks (none configured: no forwarding).
    pub siem: crate::siem::SiemConfig,
}

/// Parses a configuration file's text; `path` names it in errors.
pub fn parse_file(path: &str, text: &str) -> Result<AgentFile, SettingsError> {
    toml::from_str(text).map_err(|e| SettingsError::Parse {
        path: path.to_string(),
        msg: e.to_string().trim_end().to_string(),
    })
}

/// Reads and parses the file `--config` names (none: an empty file).
pub fn load(args: &RunArgs) -> Result<AgentFile, SettingsError> {
    let Some(p) = &args.config else {
        return Ok(AgentFile::default());
    };
    let path = p.display().to_string();
    let text = std::fs::read_to_string(p).map_err(|err| SettingsError::Read {
        path: path.clone(),
        err,
    })?;
    parse_file(&path, &text)
}

/// Merges `args` over `file` over the defaults. `file_name` names the file
/// in errors (`None`: no `--config` was given).
pub fn resolve(
    args: &RunArgs,
    file: &AgentFile,
    file_name: Option<&Path>,
) -> Result<AgentSettings, SettingsError> {
    let where_ = file_name
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the file given with --config".to_string());
    let missing = |field: &'static str| SettingsError::Missing {
        field,
        flag: field.replace('_', "-"),
        file: where_.clone(),
    };
    fn pick<T: Clone>(flag: &Option<T>, file: &Option<T>) -> Option<T> {
        flag.clone().or_else(|| file.clone())
    }
    let host_id = pick(&args.host_id, &file.host_id).ok_or_else(|| missing("host_id"))?;
    let name = pick(&args.name, &file.name).ok_or_else(|| missing("name"))?;
    let controller =
        pick(&args.controller, &file.controller).ok_or_else(|| missing("controller"))?;
    let ca_file = pick(&args.ca_file, &file.ca_file);
    let schemes: std::collections::BTreeSet<&str> = controller
        .split(',')
        .map(|u| u.trim().split("://").next().unwrap_or(""))
        .collect();
    if schemes.len() > 1 {
        return Err(SettingsError::Invalid(format!(
            "controller {controller}: every controller URL must use the same scheme (https://)"
        )));
    }
    if let Some(ca) = ca_file
        .as_ref()
        .filter(|_| controller.starts_with("http://"))
    {
        return Err(SettingsError::Invalid(format!(
            "ca_file {} is set but controller {controller} is plain http://: use https:// \
             (the controller serves TLS unless its tls = \"off\")",
            ca.display()
        )));
    }
    let underlay = pick(&args.underlay, &file.underlay);
    let underlay_interface = pick(&args.underlay_interface, &file.underlay_interface);
    if underlay.is_none() && underlay_interface.is_none() {
        return Err(SettingsError::Missing {
            field: "underlay_interface",
            flag: "underlay-interface (or --underlay)".into(),
            file: format!("{where_} (or `underlay = ...`)"),
        });
    }
    let vm_mtu = pick(&args.vm_mtu, &file.vm_mtu).unwrap_or(DEFAULT_VM_MTU);
    // 68: IPv4's smallest MTU (RFC 791).
    if !(68..=65_535).contains(&vm_mtu) {
        return Err(SettingsError::Invalid(format!(
            "vm_mtu {vm_mtu}: must be between 68 and 65535"
        )));
    }
    let seawall = pick(&args.seawall, &file.seawall).unwrap_or(false);
    let d = sluice_seawall::Config::default();
    let ms = |flag: &Option<f64>, file: &Option<f64>, default_ns: u64| {
        pick(flag, file).map_or(default_ns, |v| (v * 1e6) as u64)
    };
    let mbps = |flag: &Option<f64>, file: &Option<f64>, default_bps: u64| {
        pick(flag, file).map_or(default_bps, |v| (v * 1e6) as u64)
    };
    let seawall = seawall.then(|| sluice_seawall::Config {
        period_ns: ms(
            &args.seawall_period_ms,
            &file.seawall_period_ms,
            d.period_ns,
        ),
        increase_bps: mbps(
            &args.seawall_increase_mbps,
            &file.seawall_increase_mbps,
            d.increase_bps,
        ),
        decrease: pick(&args.seawall_decrease, &file.seawall_decrease).unwrap_or(d.decrease),
        max_rate_bps: mbps(
            &args.seawall_max_mbps,
            &file.seawall_max_mbps,
            d.max_rate_bps,
        ),
        burst_ns: ms(&args.seawall_burst_ms, &file.seawall_burst_ms, d.burst_ns),
        queue_delay_ns: ms(
            &args.seawall_queue_delay_ms,
            &file.seawall_queue_delay_ms,
            d.queue_delay_ns,
        ),
        ..d
    });
    // 0, as not set: the cores.
    let dataplane_threads =
        pick(&args.dataplane_threads, &file.dataplane_threads).filter(|&n| n != 0);
    if let Some(n) = dataplane_threads {
        if n as usize > crate::dataplane::MAX_SHARDS {
            return Err(SettingsError::Invalid(format!(
                "dataplane_threads {n}: must be between 1 and {} (0: the cores)",
                crate::dataplane::MAX_SHARDS
            )));
        }
    }
    let siem = siem(args, file)?;
    Ok(AgentSettings {
        host_id,
        name,
        netns: pick(&args.netns, &file.netns).filter(|n| !n.is_empty()),
        underlay,
        underlay_interface,
        controller,
        token_file: pick(&args.token_file, &file.token_file),
        ca_file,
        listen: pick(&args.listen, &file.listen).unwrap_or_else(|| DEFAULT_LISTEN.into()),
        prefix: pick(&args.prefix, &file.prefix).unwrap_or_else(|| DEFAULT_PREFIX.into()),
        run_dir: pick(&args.run_dir, &file.run_dir).unwrap_or_else(|| DEFAULT_RUN_DIR.into()),
        geneve_port: pick(&args.geneve_port, &file.geneve_port)
            .unwrap_or(sluice_proto::GENEVE_PORT),
        suspect_ms: pick(&args.suspect_ms, &file.suspect_ms)
            .unwrap_or(DEFAULT_SUSPECT_MS)
            .max(1),
        vm_mtu,
        instance_slots: pick(&args.instance_slots, &file.instance_slots)
            .unwrap_or(DEFAULT_INSTANCE_SLOTS),
        // An empty name is no rack, as an empty `netns` is none.
        rack: pick(&args.rack, &file.rack).filter(|r| !r.trim().is_empty()),
        rack_uplink_mbit: pick(&args.rack_uplink_mbit, &file.rack_uplink_mbit).filter(|m| *m > 0),
        dataplane_threads,
        fabric_auth: pick(&args.fabric_auth, &file.fabric_auth).unwrap_or(true),
        seawall,
        siem,
    })
}

/// The SIEM sinks' settings, checked (not the password file: [`prepare`]).
fn siem(args: &RunArgs, file: &AgentFile) -> Result<crate::siem::SiemConfig, SettingsError> {
    use crate::siem::{RedisSink, SiemConfig, SyslogSink};
    fn pick<T: Clone>(flag: &Option<T>, file: &Option<T>) -> Option<T> {
        flag.clone().or_else(|| file.clone())
    }
    let set = |v: Option<String>| v.filter(|u| !u.trim().is_empty());
    let redis = set(pick(&args.siem_redis, &file.siem_redis));
    if let Some(u) = &redis {
        let shown = sluice_state_redis::redact_url(u);
        if !u.starts_with("redis://") {
            return Err(SettingsError::Invalid(format!(
                "siem_redis `{shown}`: expected redis://[USER@]HOST:PORT[?password_file=F]"
            )));
        }
        if shown != *u {
            return Err(SettingsError::Invalid(format!(
                "siem_redis `{shown}`: a password in the URL is refused (it would show in \
                 process lists and logs); give ?password_file=F"
            )));
        }
    }
    let stream = pick(&args.siem_redis_stream, &file.siem_redis_stream)
        .unwrap_or_else(|| crate::siem::DEFAULT_STREAM.into());
    if stream.is_empty() || !stream.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SettingsError::Invalid(format!(
            "siem_redis_stream `{stream}`: must be printable, without spaces, and not empty"
        )));
    }
    let maxlen = pick(&args.siem_redis_maxlen, &file.siem_redis_maxlen)
        .unwrap_or(crate::siem::DEFAULT_MAXLEN);
    let queue = pick(&args.siem_queue, &file.siem_queue).unwrap_or(crate::siem::DEFAULT_QUEUE);
    if maxlen == 0 || queue == 0 {
        return Err(SettingsError::Invalid(
            "siem_redis_maxlen and siem_queue must be at least 1".into(),
        ));
    }
    let syslog = set(pick(&args.siem_syslog, &file.siem_syslog))
        .map(|u| SyslogSink::parse(&u))
        .transpose()
        .map_err(SettingsError::Invalid)?;
    Ok(SiemConfig {
        redis: redis.map(|url| RedisSink {
            url,
            stream,
            maxlen,
        }),
        syslog,
        queue,
    })
}

/// Bytes a VM frame of `vm_mtu` takes on the underlay's IP MTU: its inner
/// Ethernet header, Geneve with the options this agent sends (chain/hop;
/// Seawall's sequence option with `seawall`; the sealing option and tag with
/// `sealed`), the outer UDP and IPv4 headers.
pub fn underlay_mtu_needed(vm_mtu: u32, seawall: bool, sealed: bool) -> u32 {
    vm_mtu
        + overhead(seawall, sealed)
            .iter()
            .map(|(_, n)| n)
            .sum::<u32>()
}

/// The parts of the encapsulation, named, in bytes.
fn overhead(seawall: bool, sealed: bool) -> Vec<(&'static str, u32)> {
    let mut v = vec![
        ("inner Ethernet", 14),
        ("Geneve", 8),
        ("chain/hop option with the chain clock", 12),
    ];
    if seawall {
        v.push(("Seawall sequence option", 16));
    }
    if sealed {
        v.push(("sealing", SEAL_OVERHEAD as u32));
    }
    v.extend([("UDP", 8), ("IPv4", 20)]);
    v
}

/// The underlay cannot carry the VMs' largest frames in Geneve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "underlay interface {iface} has MTU {underlay_mtu}, but VM frames of MTU {vm_mtu} need {needed} \
     on the underlay ({breakdown}): raise {iface}'s MTU to at least {needed}, or lower vm_mtu to at most {vm_max} \
     (and the VMs' interfaces with it)"
)]
pub struct MtuError {
    /// The underlay interface.
    pub iface: String,
    /// Its MTU.
    pub underlay_mtu: u32,
    /// The VMs' MTU.
    pub vm_mtu: u32,
    /// What the underlay's MTU must be.
    pub needed: u32,
    /// The largest VM MTU this underlay carries.
    pub vm_max: i64,
    /// The sum, spelt out.
    pub breakdown: String,
}

/// Whether an underlay interface of MTU `underlay_mtu` carries VM frames of
/// `vm_mtu` in Geneve (see [`underlay_mtu_needed`]).
pub fn check_mtu(
    iface: &str,
    underlay_mtu: u32,
    vm_mtu: u32,
    seawall: bool,
    sealed: bool,
) -> Result<(), MtuError> {
    let needed = underlay_mtu_needed(vm_mtu, seawall, sealed);
    if underlay_mtu >= needed {
        return Ok(());
    }
    let parts = overhead(seawall, sealed);
    let mut breakdown = format!("{vm_mtu}");
    for (what, n) in &parts {
        breakdown.push_str(&format!(" + {what} {n}"));
    }
    Err(MtuError {
        iface: iface.to_string(),
        underlay_mtu,
        vm_mtu,
        needed,
        vm_max: i64::from(underlay_mtu) - i64::from(needed - vm_mtu),
        breakdown,
    })
}

/// What [`prepare`] found of the underlay on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underlay {
    /// The tunnel endpoint address.
    pub addr: Ipv4Addr,
    /// The interface holding it and its MTU (`None`: no interface here has
    /// the address given, so its MTU is unknown).
    pub iface: Option<(String, u32)>,
}

/// Finds the underlay in the data-plane namespace: the named interface's
/// MTU and (unless given) address, or the interface holding the given
/// address.
pub fn find_underlay(s: &AgentSettings) -> Result<Underlay, SettingsError> {
    let where_ = s.netns.as_deref().unwrap_or("the agent's own");
    let rtnl = sluice_netns::Rtnl::open(s.netns.as_deref()).map_err(|e| {
        SettingsError::Invalid(format!("cannot read interfaces (namespace {where_}): {e}"))
    })?;
    if let Some(name) = &s.underlay_interface {
        let link = rtnl.link(name).map_err(|e| {
            SettingsError::Invalid(format!(
                "underlay_interface {name}: no such interface in namespace {where_}: {e}"
            ))
        })?;
        let addr = match s.underlay {
            Some(a) => a,
            None => rtnl
                .addrs(name)
                .ok()
                .and_then(|a| a.first().map(|(a, _)| *a))
                .ok_or_else(|| {
                    SettingsError::Invalid(format!(
                        "underlay_interface {name} has no IPv4 address: give it one, or set underlay"
                    ))
                })?,
        };
        return Ok(Underlay {
            addr,
            iface: Some((name.clone(), link.mtu)),
        });
    }
    let Some(addr) = s.underlay else {
        return Err(SettingsError::Invalid(
            "neither underlay nor underlay_interface is set".into(),
        ));
    };
    let links = rtnl.links().unwrap_or_default();
    let iface = links.into_iter().find(|l| {
        rtnl.addrs(&l.name)
            .map(|a| a.iter().any(|(x, _)| *x == addr))
            .unwrap_or(false)
    });
    Ok(Underlay {
        addr,
        iface: iface.map(|l| (l.name, l.mtu)),
    })
}

/// The token in `path`: its first line, trimmed.
pub fn read_token(path: &Path) -> Result<String, SettingsError> {
    let text = std::fs::read_to_string(path).map_err(|err| SettingsError::Read {
        path: format!("token_file {}", path.display()),
        err,
    })?;
    let t = text.lines().next().unwrap_or("").trim();
    if t.is_empty() {
        return Err(SettingsError::Invalid(format!(
            "token_file {}: the file is empty",
            path.display()
        )));
    }
    Ok(t.to_string())
}

/// A TLS client configuration trusting only the CA certificates in `path`.
pub fn tls_trusting(path: &Path) -> Result<Arc<rustls::ClientConfig>, SettingsError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let bad = |msg: String| SettingsError::Invalid(format!("ca_file {}: {msg}", path.display()));
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
        roots
            .add(c.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Checks `s` against this machine (underlay interface, MTU, token file) and
/// makes the agent's options; `api_token` is the agent API's secret.
pub fn prepare(s: &AgentSettings, api_token: String) -> Result<AgentOptions, SettingsError> {
    let u = find_underlay(s)?;
    match &u.iface {
        Some((iface, mtu)) => check_mtu(iface, *mtu, s.vm_mtu, s.seawall.is_some(), s.fabric_auth)?,
        None => tracing::warn!(
            underlay = %u.addr,
            "no interface here has the underlay address: its MTU is not checked (set underlay_interface)"
        ),
    }
    let token = s.token_file.as_deref().map(read_token).transpose()?;
    let controller_tls = s.ca_file.as_deref().map(tls_trusting).transpose()?;
    if let Some(r) = &s.siem.redis {
        // The password file is read now, so a wrong one stops the start.
        sluice_state_redis::acl::Admin::open(&r.url)
            .map_err(|e| SettingsError::Invalid(format!("siem_redis: {e}")))?;
    }
    Ok(AgentOptions {
        host: s.host_id,
        name: s.name.clone(),
        netns: s.netns.clone(),
        underlay: u.addr,
        controller: Some(s.controller.clone()),
        controller_token: token,
        controller_tls,
        api_token: Some(api_token),
        listen: s.listen.clone(),
        prefix: s.prefix.clone(),
        run_dir: Some(s.run_dir.clone()),
        udp: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, s.geneve_port),
        instance_exe: None,
        suspect_after: Some(Duration::from_millis(s.suspect_ms)),
        seawall: s.seawall,
        vm_mtu: Some(s.vm_mtu),
        capacity: Some(sluice_proto::HostCapacity {
            instance_slots: Some(s.instance_slots),
            rack: s.rack.clone(),
            rack_uplink_mbit: s.rack_uplink_mbit,
            ..sluice_proto::HostCapacity::default()
        }),
        // Its certificate comes over the controller's TLS, so an agent of an
        // https:// controller serves TLS, and one of a plain one cannot.
        api_tls: s.controller.starts_with("https://"),
        siem: s.siem.any().then(|| s.siem.clone()),
        dataplane_threads: s
            .dataplane_threads
            .map_or_else(default_dataplane_threads, |n| n as usize),
    })
}

/// Forwarding threads when `dataplane_threads` is not set: the cores this
/// process may run on (its CPU affinity and cgroup quota, as
/// `available_parallelism` reads them), at most
/// [`crate::dataplane::MAX_SHARDS`].
pub fn default_dataplane_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, crate::dataplane::MAX_SHARDS)
}

#[cfg(test)]
mod tests;
