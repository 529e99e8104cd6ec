use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_nf::NetworkFunction;
use sluice_state::Namespace;
use yaml_serde::Value;

use crate::StreamStageFactory;

/// A chain file that could not be used. Messages name the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid YAML or does not have the chain's shape.
    #[error("{path}: {msg}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// yaml_serde's message, which includes line and column.
        msg: String,
    },
    /// The chain is well-formed YAML but not a valid chain.
    #[error("{path}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A function's configuration was refused by the function.
    #[error("functions[{index}] ({name}, type {kind}): {msg}")]
    Function {
        /// Position in the chain.
        index: usize,
        /// The function's name.
        name: String,
        /// The function's type.
        kind: String,
        /// The function's error (rule files name their file and line).
        msg: String,
    },
    /// The reassembly configuration was refused.
    #[error("reassembly: {0}")]
    Reassembly(String),
}

/// Chain-wide settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Packets per batch (default 32).
    pub batch_size: usize,
    /// How often, in trace time, expired timers are collected (default 100 ms).
    pub timer_interval_ms: u64,
    /// Makes the chain bidirectional: packets from these prefixes (CIDR) cross the
    /// functions in order, every other packet crosses them in reverse order, as return
    /// traffic does (so a firewall before a NAT sees replies after the NAT restored
    /// them). Empty (the default): every packet crosses the functions in order.
    pub forward_sources: Vec<String>,
    /// A processing budget for this instance, so experiments can create middlebox
    /// bottlenecks on purpose (as Stratos did with small EC2 instances). Packets over
    /// budget are dropped (`over_capacity`).
    pub capacity: Option<Capacity>,
    /// Pipelined mode for a running instance, in packets per window (0, the
    /// default: off; docs/STATE.md, "Pipelining"). Under an ownership lease, a
    /// window's store reads are in flight while the previous one is processed
    /// and no batch waits for its own round trip; the price is latency under
    /// load (a batch waits for its window). At most 65,536.
    pub pipeline: usize,
    /// Worker threads of a running instance (default 1, at most
    /// [`MAX_WORKERS`]): flows are sharded among them by the direction-invariant
    /// flow hash, each worker with its own chain, store connection and flow
    /// cache (docs/ARCHITECTURE.md, "Forwarding on several cores"). With
    /// `state: local` a chain with a NAT or LB cannot have more than one
    /// (their replies hash elsewhere).
    pub workers: usize,
    /// Which checksums the chain verifies before its functions see a packet:
    /// `ipv4` (the IPv4 header's, and the TCP checksum of every packet a chain
    /// that reassembles streams reassembles, since a bad one is an IPS evasion:
    /// see `checksums.rs`; other transport checksums are the endpoints'
    /// business, as NIC-offloaded middleboxes treat them), `all` (also every
    /// unfragmented TCP, UDP and ICMP checksum: `bad_l4_checksum`), `none`
    /// (captures taken on a sending host, whose NIC fills checksums in later,
    /// hold 0 or garbage there) or `auto` (`ipv4`, once a sample of TCP
    /// packets shows the checksums are real; for captures). A failed check
    /// drops the packet as malformed. Unset, the program running the chain
    /// decides: `ipv4` for deployed instances, `auto` for `sluice run`.
    pub verify_checksums: Option<VerifyChecksums>,
    /// Open tunnels (IP-in-IP, GRE and ERSPAN, VXLAN, VXLAN-GPE, Geneve) so that
    /// functions see the innermost packet, keyed by its tunnel's network
    /// identifier (default true; docs/FUNCTIONS.md, "Encapsulations"). Off, a
    /// tunnel is the UDP or GRE packet it looks like from outside: a firewall
    /// matches only its outer headers and the IPS never reads inside it.
    pub decapsulate: bool,
    /// What an MPLS label stack carries: `auto` (the default: IPv4 or IPv6 by the
    /// first nibble, an Ethernet pseudowire after a zero control word, anything
    /// else unclassified), `ip` or `ethernet` (a pseudowire without control word).
    pub mpls: MplsSetting,
}

/// A chain's `mpls` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MplsSetting {
    /// By the first nibble after the stack.
    #[default]
    Auto,
    /// Always IP.
    Ip,
    /// Always an Ethernet pseudowire without control word.
    Ethernet,
}

impl Settings {
    /// The `verify_checksums` setting in force (`ipv4` when unset).
    pub fn checksums(&self) -> VerifyChecksums {
        self.verify_checksums.unwrap_or_default()
    }

    /// The parse these settings ask for.
    pub fn parse_options(&self) -> sluice_wire::parse::ParseOptions {
        use sluice_wire::parse::MplsPayload;
        sluice_wire::parse::ParseOptions {
            checksums: self.checksums().into(),
            decapsulate: self.decapsulate,
            mpls: match self.mpls {
                MplsSetting::Auto => MplsPayload::Auto,
                MplsSetting::Ip => MplsPayload::Ip,
                MplsSetting::Ethernet => MplsPayload::Ethernet,
            },
        }
    }
}

/// A chain's `verify_checksums` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyChecksums {
    /// The IPv4 header checksum only.
    #[default]
    Ipv4,
    /// The IPv4 header and TCP, UDP and ICMP checksums.
    All,
    /// No checksum.
    None,
    /// `ipv4` once a sample shows the capture's TCP checksums are real,
    /// nothing if they are not (checksum offload on the capturing host).
    Auto,
}

impl From<VerifyChecksums> for sluice_wire::parse::Checksums {
    fn from(v: VerifyChecksums) -> Self {
        match v {
            VerifyChecksums::Ipv4 => sluice_wire::parse::Checksums::Ipv4,
            VerifyChecksums::All => sluice_wire::parse::Checksums::All,
            VerifyChecksums::None => sluice_wire::parse::Checksums::None,
            // The IPv4 header checksum is the host's own work even with
            // offload; the TCP checks are the chain's (`checksums.rs`).
            VerifyChecksums::Auto => sluice_wire::parse::Checksums::Ipv4,
        }
    }
}

/// Most worker threads an instance runs.
pub const MAX_WORKERS: usize = 64;

/// Largest pipelined window, in packets.
pub const MAX_PIPELINE: usize = 65_536;

/// A token-bucket budget in packets and/or bits per second of trace time.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Packets per second.
    #[serde(default)]
    pub pps: Option<f64>,
    /// Megabits per second (frame bytes).
    #[serde(default)]
    pub mbps: Option<f64>,
    /// Burst allowance in milliseconds of the rate (default 10).
    #[serde(default = "default_burst")]
    pub burst_ms: f64,
}

fn default_burst() -> f64 {
    10.0
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            batch_size: 32,
            timer_interval_ms: 100,
            forward_sources: Vec::new(),
            capacity: None,
            pipeline: 0,
            workers: 1,
            verify_checksums: None,
            decapsulate: true,
            mpls: MplsSetting::Auto,
        }
    }
}

pub use sluice_wire::Prefix;

/// One function of a chain as written in the spec: `type`, optional `name`, and the
/// function's own configuration keys.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// Unique name within the chain (defaults to the type; its state namespace
    /// derives from chain and function names).
    pub name: String,
    /// Function type (`firewall`, `nat`, `lb`, `ips`, `monitor`, `pass`).
    pub kind: String,
    /// The remaining keys, handed to the function.
    pub config: Value,
}

/// A parsed chain file.
///
/// ```yaml
/// name: edge
/// functions:
///   - type: firewall
///     rules: edge.fw
///   - type: ips
///     rules: edge.rules
/// settings: { batch_size: 32 }
/// reassembly: { max_segments: 16 }
/// ```
#[derive(Debug, Clone)]
pub struct ChainSpec {
    /// Chain name.
    pub name: String,
    /// Functions in order.
    pub functions: Vec<FunctionSpec>,
    /// Settings.
    pub settings: Settings,
    /// Configuration of the shared TCP reassembly (passed to its factory).
    pub reassembly: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChain {
    name: String,
    functions: Vec<Value>,
    #[serde(default)]
    settings: Settings,
    #[serde(default)]
    reassembly: Value,
}

impl ChainSpec {
    /// Reads and validates a chain file.
    pub fn from_file(path: &Path) -> Result<ChainSpec, ChainError> {
        let text = std::fs::read_to_string(path).map_err(|source| ChainError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ChainSpec::from_str(&text, path)
    }

    /// Parses chain YAML; `path` is only used in messages.
    pub fn from_str(text: &str, path: &Path) -> Result<ChainSpec, ChainError> {
        let raw: RawChain = yaml_serde::from_str(text).map_err(|e| ChainError::Syntax {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })?;
        let invalid = |msg: String| ChainError::Invalid {
            path: path.to_path_buf(),
            msg,
        };
        if raw.name.trim().is_empty() {
            return Err(invalid("name: must not be empty".into()));
        }
        if raw.functions.is_empty() {
            return Err(invalid(
                "functions: a chain needs at least one function".into(),
            ));
        }
        if let Some(c) = raw.settings.capacity {
            let bad = |v: Option<f64>| v.is_some_and(|x| !(x.is_finite() && x > 0.0));
            if c.pps.is_none() && c.mbps.is_none() {
                return Err(invalid("settings.capacity: give pps, mbps or both".into()));
            }
            if bad(c.pps) || bad(c.mbps) || !(c.burst_ms.is_finite() && c.burst_ms > 0.0) {
                return Err(invalid(
                    "settings.capacity: rates and burst_ms must be positive numbers".into(),
                ));
            }
        }
        for (i, p) in raw.settings.forward_sources.iter().enumerate() {
            Prefix::parse(p).map_err(|e| invalid(format!("settings.forward_sources[{i}]: {e}")))?;
        }
        if raw.settings.batch_size == 0 || raw.settings.batch_size > 1024 {
            return Err(invalid(format!(
                "settings.batch_size: {} is not in 1..=1024",
                raw.settings.batch_size
            )));
        }
        if raw.settings.pipeline > MAX_PIPELINE {
            return Err(invalid(format!(
                "settings.pipeline: {} packets per window is more than {MAX_PIPELINE}",
                raw.settings.pipeline
            )));
        }
        if raw.settings.workers == 0 || raw.settings.workers > MAX_WORKERS {
            return Err(invalid(format!(
                "settings.workers: {} is not in 1..={MAX_WORKERS}",
                raw.settings.workers
            )));
        }
        let mut functions = Vec::new();
        for (i, v) in raw.functions.into_iter().enumerate() {
            let Value::Mapping(mut m) = v else {
                return Err(invalid(format!(
                    "functions[{i}]: expected a mapping with a `type` key"
                )));
            };
            let kind = match m.remove("type") {
                Some(Value::String(s)) => s,
                Some(_) => return Err(invalid(format!("functions[{i}].type: must be a string"))),
                None => return Err(invalid(format!("functions[{i}]: missing `type`"))),
            };
            let name = match m.remove("name") {
                Some(Value::String(s)) => s,
                Some(_) => return Err(invalid(format!("functions[{i}].name: must be a string"))),
                None => kind.clone(),
            };
            if functions.iter().any(|f: &FunctionSpec| f.name == name) {
                return Err(invalid(format!(
                    "functions[{i}].name: `{name}` is used twice; give each function of a type a distinct `name`"
                )));
            }
            functions.push(FunctionSpec {
                name,
                kind,
                config: Value::Mapping(m),
            });
        }
        Ok(ChainSpec {
            name: raw.name,
            functions,
            settings: raw.settings,
            reassembly: raw.reassembly,
        })
    }
}

/// Builds a function from its spec configuration.
pub type FunctionFactory =
    fn(config: &Value, ns: Namespace, base_dir: &Path) -> Result<Box<dyn NetworkFunction>, String>;

/// Builds the stream stage factory from the chain's `reassembly` configuration.
pub type StreamFactoryBuilder =
    fn(config: &Value, base_dir: &Path) -> Result<StreamStageFactory, String>;

/// The function types a chain may use.
#[derive(Default, Clone)]
pub struct Registry {
    factories: BTreeMap<&'static str, FunctionFactory>,
    stream: Option<StreamFactoryBuilder>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Registers a function type.
    pub fn register(&mut self, kind: &'static str, f: FunctionFactory) -> &mut Self {
        self.factories.insert(kind, f);
        self
    }

    /// Registers the stream-reassembly stage.
    pub fn register_streams(&mut self, f: StreamFactoryBuilder) -> &mut Self {
        self.stream = Some(f);
        self
    }

    /// Registered type names.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.factories.keys().copied()
    }

    /// Builds a function from `fs` once and discards it: checks its configuration.
    pub fn validate(&self, fs: &FunctionSpec, base: &Path) -> Result<(), String> {
        self.build(fs, Namespace(0), base).map(drop)
    }

    pub(crate) fn build(
        &self,
        fs: &FunctionSpec,
        ns: Namespace,
        base: &Path,
    ) -> Result<Box<dyn NetworkFunction>, String> {
        let f = self.factories.get(fs.kind.as_str()).ok_or_else(|| {
            format!(
                "unknown function type `{}` (known: {})",
                fs.kind,
                self.kinds().collect::<Vec<_>>().join(", ")
            )
        })?;
        f(&fs.config, ns, base)
    }

    /// Builds the stream stage from a chain's `reassembly` configuration once
    /// and discards it: checks the configuration.
    pub fn validate_streams(&self, cfg: &Value) -> Result<(), String> {
        self.stream_stage(cfg, Path::new(".")).map(drop)
    }

    pub(crate) fn stream_stage(
        &self,
        cfg: &Value,
        base: &Path,
    ) -> Result<Option<StreamStageFactory>, String> {
        match self.stream {
            Some(b) => b(cfg, base).map(Some),
            None if matches!(cfg, Value::Null) => Ok(None),
            None => Err("no reassembly stage is available in this build".into()),
        }
    }
}
