//! `sluice controller`'s settings: flags and the configuration file
//! (`--config /etc/sluice/controller.toml`). Every flag has a key of the same
//! name (snake_case) in the file; a flag given on the command line wins over
//! the file, the file over the default. A key the file may not have is an
//! error naming it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;
use sluice_controller::placement::Policy;
use sluice_controller::tls::TlsOptions;

use crate::error::CliError;

/// Default address of the REST API.
const DEFAULT_LISTEN: &str = "127.0.0.1:7420";
/// Default database.
const DEFAULT_DB: &str = "sluice-controller.db";
/// Default state store of NF instances.
const DEFAULT_STATE: &str = "local";

/// `sluice controller`. No flag has a default here: one not given leaves the
/// file's value, else the default shown.
#[derive(Args, Debug, Default)]
pub struct ControllerArgs {
    /// TOML file with any of the settings below (same names, snake_case);
    /// flags given here win over it (shipped: packaging/etc/controller.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Only check the settings (file and flags): print them and exit, 0 if
    /// the controller would start with them.
    #[arg(long)]
    pub(crate) check_config: bool,
    /// Address of the REST API [default: 127.0.0.1:7420].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// SQLite database holding the desired state (`:memory:`: none kept)
    /// [default: sluice-controller.db].
    #[arg(long)]
    db: Option<PathBuf>,
    /// State store NF instances use (`redis://HOST:PORT`, `local`) [default: local].
    #[arg(long)]
    state: Option<String>,
    /// Where the first start (no API token yet) writes the secret of the
    /// operator token `admin`, mode 0600 [default: next to the database,
    /// `DB.admin-token`].
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// Seal every Geneve datagram between hosts with AES-256-GCM under keys
    /// per host pair (`off`: plain Geneve; docs/SECURITY.md) [default: on].
    #[arg(long, value_parser = ["on", "off"])]
    fabric_auth: Option<String>,
    /// Serve the REST API over TLS (`off`: plain HTTP, tokens in clear on the
    /// network) [default: on].
    #[arg(long, value_parser = ["on", "off"])]
    tls: Option<String>,
    /// The server's certificate chain, PEM (with --tls-key; unset: the
    /// controller makes a private CA and a certificate next to the database,
    /// clients trust `DB.ca.pem`).
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, PEM.
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// More names or addresses for the generated certificate, comma-separated
    /// (it always names the listen address, 127.0.0.1 and localhost).
    #[arg(long)]
    tls_san: Option<String>,
    /// Refuse agents whose API is plain HTTP (`on` needs --tls on: each
    /// agent gets its API certificate from the controller's hosts' CA with
    /// its registration) [default: on with TLS].
    #[arg(long, value_parser = ["on", "off"])]
    agent_tls: Option<String>,
    /// How new NF instances choose among the hosts with room:
    /// `rack-aware` (where the chains' VMs are, by the racks hosts declare;
    /// with no rack declared the same as least-loaded), `least-loaded`,
    /// `tenant-centric`, `service-centric` [default: rack-aware].
    #[arg(long)]
    placement: Option<String>,
    /// How a middlebox's flows are split among its instances: `uniform`
    /// (equal hash ranges) or `network-aware` (ranges laid out rack by rack,
    /// shares solved from the measured traffic and the rack uplinks;
    /// docs/PLACEMENT.md) [default: uniform].
    #[arg(long)]
    distribution: Option<String>,
    /// Rack uplink capacities for `network-aware` distribution,
    /// `RACK=MBIT[,RACK=MBIT...]` [default: none, every uplink weighs alike].
    #[arg(long)]
    rack_uplink: Option<String>,
    /// The utilisation of a declared rack uplink below which
    /// `network-aware` distribution leaves the shares even: a fraction
    /// (`0.5`) or a percentage (`50%`); 0 minimises the worst uplink
    /// outright [default: 0].
    #[arg(long)]
    uplink_target: Option<String>,
    /// Under `network-aware` distribution, split the flows of a chain to
    /// servers in several racks by their server's rack, each class with its
    /// own split of each middlebox after the chain's last load balancer or
    /// NAT (docs/CONTROLLER.md) [default: true].
    #[arg(long)]
    distribution_classes: Option<bool>,
    /// Distinct hosts that must accuse a host of ignoring congestion
    /// feedback before it is contained (Seawall's `f`; docs/ISOLATION.md)
    /// [default: 2].
    #[arg(long)]
    containment_threshold: Option<usize>,
    /// Replicated controllers: every etcd member's client URL, comma-separated
    /// (`https://HOST:2379,...`). The desired state, tokens and audit log then
    /// live in etcd, and of the controllers given the same members one leads
    /// (docs/RELIABILITY.md) [default: none, a single controller on `db`].
    #[arg(long)]
    etcd: Option<String>,
    /// The CA etcd's members' certificates chain to (PEM).
    #[arg(long)]
    etcd_ca_file: Option<PathBuf>,
    /// The client certificate this controller presents to etcd (PEM).
    #[arg(long)]
    etcd_cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long)]
    etcd_key_file: Option<PathBuf>,
    /// Key prefix of this deployment's records in etcd [default: /sluice/].
    #[arg(long)]
    etcd_root: Option<String>,
    /// This controller's name among the replicated ones [default: HOSTNAME:PORT].
    #[arg(long)]
    name: Option<String>,
    /// The URL clients reach this controller at, written in the leader key
    /// [default: https://LISTEN, or http:// with --tls off].
    #[arg(long)]
    advertise: Option<String>,
    /// The leader's lease in seconds: a dead leader is replaced this long
    /// after its last renewal [default: 3].
    #[arg(long)]
    leader_lease_secs: Option<u64>,
}

/// The configuration file: the flags' settings, each optional.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerFile {
    listen: Option<SocketAddr>,
    db: Option<PathBuf>,
    state: Option<String>,
    admin_token_file: Option<PathBuf>,
    fabric_auth: Option<String>,
    tls: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_san: Option<String>,
    agent_tls: Option<String>,
    placement: Option<String>,
    distribution: Option<String>,
    rack_uplink: Option<String>,
    /// A number (`0.5`) or a string (`"50%"`).
    uplink_target: Option<toml::Value>,
    distribution_classes: Option<bool>,
    containment_threshold: Option<usize>,
    etcd: Option<String>,
    etcd_ca_file: Option<PathBuf>,
    etcd_cert_file: Option<PathBuf>,
    etcd_key_file: Option<PathBuf>,
    etcd_root: Option<String>,
    name: Option<String>,
    advertise: Option<String>,
    leader_lease_secs: Option<u64>,
}

/// A replicated controller's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdSettings {
    /// The members' client URLs.
    pub endpoints: Vec<String>,
    /// The client's mutual TLS files.
    pub tls: sluice_etcd::ClientTls,
    /// The key prefix (ends in `/`).
    pub root: String,
    /// This controller's name.
    pub name: String,
    /// Its URL for clients.
    pub advertise: String,
    /// The leader's lease.
    pub lease: std::time::Duration,
}

/// The controller's settings once flags, file and defaults are merged.
#[derive(Debug, PartialEq)]
pub struct ControllerSettings {
    /// Address of the REST API.
    pub listen: SocketAddr,
    /// The database.
    pub db: PathBuf,
    /// State store URL of NF instances.
    pub state: String,
    /// Where the first start writes the admin token (`None`: next to the database).
    pub admin_token_file: Option<PathBuf>,
    /// Whether the fabric is sealed.
    pub fabric_auth: bool,
    /// TLS on the API (`None`: off).
    pub tls: Option<TlsOptions>,
    /// Refuse agents whose API is plain HTTP.
    pub require_agent_tls: bool,
    /// The placement policy.
    pub placement: Policy,
    /// The distribution policy and rack uplinks.
    pub distribution: sluice_controller::distribution::Settings,
    /// Accusers that contain a host.
    pub containment_threshold: usize,
    /// Replicated on etcd (None: a single controller).
    pub etcd: Option<EtcdSettings>,
}

/// Parses a configuration file's text; `path` names it in errors.
fn parse_file(path: &Path, text: &str) -> Result<ControllerFile, CliError> {
    toml::from_str(text).map_err(|e| CliError::Config {
        path: path.to_path_buf(),
        msg: e.to_string().trim_end().to_string(),
    })
}

/// Merges `a` over `f` (read from `file`) over the defaults.
fn resolve(
    a: &ControllerArgs,
    f: &ControllerFile,
    file: Option<&Path>,
) -> Result<ControllerSettings, CliError> {
    let bad = |msg: String| CliError::Config {
        path: file.map(Path::to_path_buf).unwrap_or_default(),
        msg,
    };
    let on_off = |key: &str, v: Option<&str>| match v {
        None | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(bad(format!("{key} = {other:?}: must be \"on\" or \"off\""))),
    };
    let fabric_auth = on_off(
        "fabric_auth",
        a.fabric_auth.as_deref().or(f.fabric_auth.as_deref()),
    )?;
    // An empty path is unset (the shipped file shows them so).
    let path = |a: &Option<PathBuf>, f: &Option<PathBuf>| {
        a.clone()
            .or_else(|| f.clone())
            .filter(|p| !p.as_os_str().is_empty())
    };
    let tls = if on_off("tls", a.tls.as_deref().or(f.tls.as_deref()))? {
        let cert = match (path(&a.tls_cert, &f.tls_cert), path(&a.tls_key, &f.tls_key)) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(bad(
                    "tls_cert and tls_key: give both (an operator's certificate) or neither \
                     (the controller makes its own)"
                        .into(),
                ))
            }
        };
        let sans = a
            .tls_san
            .as_deref()
            .or(f.tls_san.as_deref())
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        Some(TlsOptions { cert, sans })
    } else {
        None
    };
    let require_agent_tls = match a.agent_tls.as_deref().or(f.agent_tls.as_deref()) {
        None => tls.is_some(),
        v => on_off("agent_tls", v)?,
    };
    if require_agent_tls && tls.is_none() {
        return Err(bad(
            "agent_tls = \"on\" needs tls = \"on\": agents get their API certificates over \
             the controller's TLS"
                .into(),
        ));
    }
    let placement = match a.placement.as_deref().or(f.placement.as_deref()) {
        None => Policy::default(),
        Some(p) => p
            .parse()
            .map_err(|e: sluice_controller::placement::UnknownPolicy| {
                bad(format!("placement: {e}"))
            })?,
    };
    let distribution = sluice_controller::distribution::Settings {
        policy: match a.distribution.as_deref().or(f.distribution.as_deref()) {
            None => Default::default(),
            Some(d) => {
                d.parse()
                    .map_err(|e: sluice_controller::distribution::UnknownDistribution| {
                        bad(format!("distribution: {e}"))
                    })?
            }
        },
        uplinks: match a.rack_uplink.as_deref().or(f.rack_uplink.as_deref()) {
            None => Default::default(),
            Some(u) => sluice_controller::distribution::parse_uplinks(u)
                .map_err(|e| bad(format!("rack_uplink: {e}")))?,
        },
        target: match (a.uplink_target.as_deref(), f.uplink_target.as_ref()) {
            (Some(t), _) => sluice_controller::distribution::parse_target(t)
                .map_err(|e| bad(format!("uplink_target: {e}")))?,
            (None, Some(t)) => {
                let text = match t {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Float(x) => x.to_string(),
                    toml::Value::Integer(x) => x.to_string(),
                    other => other.to_string(),
                };
                sluice_controller::distribution::parse_target(&text)
                    .map_err(|e| bad(format!("uplink_target: {e}")))?
            }
            (None, None) => sluice_controller::distribution::DEFAULT_TARGET,
        },
        classes: a
            .distribution_classes
            .or(f.distribution_classes)
            .unwrap_or(true),
    };
    let containment_threshold = match a.containment_threshold.or(f.containment_threshold) {
        None => sluice_controller::reconcile::DEFAULT_THRESHOLD,
        Some(0) => {
            return Err(bad(
                "containment_threshold: 0 would contain every host at once; give 1 or more".into(),
            ))
        }
        Some(n) => n,
    };
    let listen = a.listen.or(f.listen).unwrap_or_else(|| {
        DEFAULT_LISTEN
            .parse()
            .expect("the default listen address parses")
    });
    let etcd = match a.etcd.as_deref().or(f.etcd.as_deref()) {
        None | Some("") => None,
        Some(list) => {
            let endpoints: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(String::from)
                .collect();
            if let Some(e) = endpoints.iter().find(|e| !e.starts_with("https://")) {
                return Err(bad(format!(
                    "etcd: `{e}` is not https://: controllers reach etcd only over mutual TLS"
                )));
            }
            let need = |key: &str, v: Option<PathBuf>| {
                v.ok_or_else(|| {
                    bad(format!(
                        "{key}: needed with etcd (mutual TLS: etcd_ca_file, etcd_cert_file, etcd_key_file)"
                    ))
                })
            };
            let tls_files = sluice_etcd::ClientTls {
                ca: need("etcd_ca_file", path(&a.etcd_ca_file, &f.etcd_ca_file))?,
                cert: need("etcd_cert_file", path(&a.etcd_cert_file, &f.etcd_cert_file))?,
                key: need("etcd_key_file", path(&a.etcd_key_file, &f.etcd_key_file))?,
            };
            let mut root = a
                .etcd_root
                .clone()
                .or_else(|| f.etcd_root.clone())
                .unwrap_or_else(|| "/sluice/".into());
            if !root.starts_with('/') {
                return Err(bad(format!("etcd_root = {root:?}: must start with /")));
            }
            if !root.ends_with('/') {
                root.push('/');
            }
            let scheme = if tls.is_some() { "https" } else { "http" };
            let text = |a: &Option<String>, f: &Option<String>| {
                a.clone().or_else(|| f.clone()).filter(|v| !v.is_empty())
            };
            let advertise = match text(&a.advertise, &f.advertise) {
                Some(u) => u,
                None if listen.ip().is_unspecified() => {
                    return Err(bad(format!(
                        "advertise: needed with etcd when listening on {listen} (the URL clients reach this controller at)"
                    )))
                }
                None => format!("{scheme}://{listen}"),
            };
            let name = text(&a.name, &f.name).unwrap_or_else(|| {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|_| "controller".into());
                format!("{host}:{}", listen.port())
            });
            let lease = match a.leader_lease_secs.or(f.leader_lease_secs) {
                None => 3,
                Some(0) => return Err(bad("leader_lease_secs: give 1 or more".into())),
                Some(n) => n,
            };
            Some(EtcdSettings {
                endpoints,
                tls: tls_files,
                root,
                name,
                advertise,
                lease: std::time::Duration::from_secs(lease),
            })
        }
    };
    if etcd.is_some() && matches!(&tls, Some(t) if t.cert.is_none()) {
        return Err(bad(
            "tls_cert and tls_key: needed with etcd (every controller serves the same certificate, \
             its names covering every controller's address)"
                .into(),
        ));
    }
    Ok(ControllerSettings {
        listen,
        db: a
            .db
            .clone()
            .or_else(|| f.db.clone())
            .unwrap_or_else(|| DEFAULT_DB.into()),
        state: a
            .state
            .clone()
            .or_else(|| f.state.clone())
            .unwrap_or_else(|| DEFAULT_STATE.into()),
        admin_token_file: a
            .admin_token_file
            .clone()
            .or_else(|| f.admin_token_file.clone()),
        fabric_auth,
        tls,
        require_agent_tls,
        placement,
        distribution,
        containment_threshold,
        etcd,
    })
}

impl ControllerArgs {
    /// Reads `--config` (if given) and merges the flags over it.
    pub fn settings(&self) -> Result<ControllerSettings, CliError> {
        let file = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(CliError::io(p))?;
                parse_file(p, &text)?
            }
            None => ControllerFile::default(),
        };
        resolve(self, &file, self.config.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: ControllerArgs,
    }

    fn args(a: &[&str]) -> ControllerArgs {
        Cli::try_parse_from(std::iter::once("sluice").chain(a.iter().copied()))
            .expect("the flags parse")
            .a
    }

    fn file(text: &str) -> ControllerFile {
        parse_file(Path::new("/etc/sluice/controller.toml"), text).expect("the file parses")
    }

    #[test]
    fn a_flag_wins_over_the_file_which_wins_over_the_default() {
        let f = file(
            "listen = \"0.0.0.0:7000\"\ndb = \"/var/lib/sluice/c.db\"\nfabric_auth = \"off\"\n",
        );
        let s = resolve(&args(&["--db", "x.db"]), &f, None).unwrap();
        assert_eq!(s.listen, "0.0.0.0:7000".parse().unwrap());
        assert_eq!(s.db, PathBuf::from("x.db"));
        assert!(!s.fabric_auth);
        assert_eq!(s.state, "local");
        assert_eq!(s.admin_token_file, None);
        let s = resolve(&args(&["--fabric-auth", "on"]), &f, None).unwrap();
        assert!(s.fabric_auth);
    }

    #[test]
    fn tls_is_on_by_default_and_takes_an_operators_certificate_or_extra_names() {
        let s = resolve(&args(&[]), &ControllerFile::default(), None).unwrap();
        assert_eq!(s.tls, Some(TlsOptions::default()));
        let f = file("tls_cert = \"/etc/c.pem\"\ntls_key = \"/etc/c.key\"\ntls_san = \"a.example, 10.0.0.1\"\n");
        let s = resolve(&args(&[]), &f, None).unwrap();
        assert_eq!(
            s.tls,
            Some(TlsOptions {
                cert: Some(("/etc/c.pem".into(), "/etc/c.key".into())),
                sans: vec!["a.example".into(), "10.0.0.1".into()],
            })
        );
        let s = resolve(&args(&["--tls", "off"]), &f, None).unwrap();
        assert_eq!(s.tls, None);
        let e = resolve(
            &args(&["--tls-cert", "c.pem"]),
            &ControllerFile::default(),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("tls_key"), "{e}");
        let e = resolve(
            &args(&[]),
            &file("tls = \"yes\"\n"),
            Some(Path::new("c.toml")),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("c.toml") && e.contains("tls = \"yes\""), "{e}");
    }

    #[test]
    fn an_unknown_key_is_refused_naming_it_and_the_file() {
        let e = parse_file(Path::new("/etc/sluice/controller.toml"), "listn = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/etc/sluice/controller.toml") && e.contains("listn"),
            "{e}"
        );
    }

    #[test]
    fn agent_tls_follows_tls_and_cannot_be_on_without_it() {
        let none = ControllerFile::default();
        assert!(resolve(&args(&[]), &none, None).unwrap().require_agent_tls);
        let s = resolve(&args(&["--tls", "off"]), &none, None).unwrap();
        assert!(!s.require_agent_tls);
        let s = resolve(&args(&["--agent-tls", "off"]), &none, None).unwrap();
        assert!(!s.require_agent_tls && s.tls.is_some());
        let e = resolve(&args(&["--tls", "off", "--agent-tls", "on"]), &none, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("agent_tls") && e.contains("tls"), "{e}");
    }

    #[test]
    fn distribution_comes_from_the_file_or_the_flag_and_bad_values_are_named() {
        use sluice_controller::distribution::Distribution;
        let d = resolve(&args(&[]), &ControllerFile::default(), None).unwrap();
        assert_eq!(d.distribution.policy, Distribution::Uniform);
        assert!(d.distribution.uplinks.is_empty());
        let f = file("distribution = \"network-aware\"\nrack_uplink = \"r1=100\"\n");
        let s = resolve(&args(&[]), &f, None).unwrap();
        assert_eq!(s.distribution.policy, Distribution::NetworkAware);
        assert_eq!(s.distribution.uplinks["r1"], 12.5e6);
        let s = resolve(
            &args(&["--distribution", "uniform", "--rack-uplink", "r2=8"]),
            &f,
            None,
        )
        .unwrap();
        assert_eq!(
            s.distribution.policy,
            Distribution::Uniform,
            "the flag wins"
        );
        assert_eq!(s.distribution.uplinks.keys().collect::<Vec<_>>(), ["r2"]);
        let e = resolve(&args(&["--distribution", "random"]), &f, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("distribution") && e.contains("random"), "{e}");
        let e = resolve(&args(&["--rack-uplink", "r1"]), &f, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rack_uplink") && e.contains("RACK=MBIT"), "{e}");
        assert_eq!(d.distribution.target, 0.0, "no target by default");
        let f = file("uplink_target = 0.7\n");
        assert_eq!(
            resolve(&args(&[]), &f, None).unwrap().distribution.target,
            0.7
        );
        let g = file("uplink_target = \"30%\"\n");
        assert_eq!(
            resolve(&args(&[]), &g, None).unwrap().distribution.target,
            0.3
        );
        let s = resolve(&args(&["--uplink-target", "20%"]), &f, None).unwrap();
        assert_eq!(s.distribution.target, 0.2, "the flag wins");
        let e = resolve(&args(&[]), &file("uplink_target = 2.0\n"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("uplink_target") && e.contains("from 0 to 1"),
            "{e}"
        );
    }

    #[test]
    fn containment_threshold_defaults_to_two_and_zero_is_refused() {
        let d = resolve(&args(&[]), &ControllerFile::default(), None).unwrap();
        assert_eq!(d.containment_threshold, 2);
        let s = resolve(
            &args(&["--containment-threshold", "3"]),
            &ControllerFile::default(),
            None,
        )
        .unwrap();
        assert_eq!(s.containment_threshold, 3);
        let e = resolve(
            &args(&["--containment-threshold", "0"]),
            &ControllerFile::default(),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("containment_threshold"), "{e}");
    }

    #[test]
    fn placement_comes_from_the_file_or_the_flag_and_a_bad_one_is_named() {
        let d = resolve(&args(&[]), &ControllerFile::default(), None).unwrap();
        assert_eq!(d.placement, Policy::RackAware);
        let f = file("placement = \"least-loaded\"\n");
        let s = resolve(&args(&[]), &f, None).unwrap();
        assert_eq!(s.placement, Policy::LeastLoaded);
        let s = resolve(&args(&["--placement", "tenant-centric"]), &f, None).unwrap();
        assert_eq!(s.placement, Policy::TenantCentric, "the flag wins");
        let e = resolve(
            &args(&[]),
            &file("placement = \"random\"\n"),
            Some(Path::new("c.toml")),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("c.toml")
                && e.contains("placement")
                && e.contains("`random`")
                && e.contains("service-centric"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_fabric_auth_in_the_file_is_refused_naming_it() {
        let f = file("fabric_auth = \"yes\"\n");
        let e = resolve(&args(&[]), &f, Some(Path::new("c.toml")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml") && e.contains("fabric_auth"), "{e}");
    }

    #[test]
    fn replicated_settings_need_mutual_tls_and_one_certificate() {
        let base = "etcd = \"https://127.0.0.1:2379,https://127.0.0.1:2380\"\n\
                    etcd_ca_file = \"ca.pem\"\netcd_cert_file = \"c.pem\"\netcd_key_file = \"c.key\"\n\
                    tls_cert = \"api.pem\"\ntls_key = \"api.key\"\nlisten = \"127.0.0.1:7421\"\n";
        let s = resolve(&args(&[]), &file(base), None).unwrap();
        let e = s.etcd.unwrap();
        assert_eq!(e.endpoints.len(), 2);
        assert_eq!(e.root, "/sluice/");
        assert_eq!(e.advertise, "https://127.0.0.1:7421");
        assert!(e.name.ends_with(":7421"), "{}", e.name);
        assert_eq!(e.lease, std::time::Duration::from_secs(3));
        let refused = |text: &str, want: &str| {
            let e = resolve(&args(&[]), &file(text), Some(Path::new("c.toml")))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        };
        refused(
            &base.replace("https://127.0.0.1:2380", "http://127.0.0.1:2380"),
            "is not https://",
        );
        refused(
            &base.replace("etcd_key_file = \"c.key\"\n", ""),
            "etcd_key_file",
        );
        refused(
            &base.replace("tls_cert = \"api.pem\"\ntls_key = \"api.key\"\n", ""),
            "tls_cert and tls_key",
        );
        refused(&base.replace("127.0.0.1:7421", "0.0.0.0:7421"), "advertise");
        refused(
            &format!("{base}leader_lease_secs = 0\n"),
            "leader_lease_secs",
        );
        refused(&format!("{base}etcd_root = \"sluice\"\n"), "etcd_root");
    }

    #[test]
    fn the_shipped_file_parses_and_shows_every_setting_with_its_default() {
        let shipped = include_str!("../../../packaging/etc/controller.toml");
        assert_eq!(file(shipped), ControllerFile::default());
        let text: String = shipped
            .lines()
            .filter_map(|l| l.strip_prefix("# ").filter(|l| l.contains(" = ")))
            .map(|l| format!("{l}\n"))
            .collect();
        let full = file(&text);
        let cmd = <Cli as clap::CommandFactory>::command();
        for a in cmd.get_arguments() {
            let key = a.get_id().as_str();
            if !["config", "check_config", "help"].contains(&key) {
                assert!(
                    text.lines().any(|l| l.starts_with(&format!("{key} = "))),
                    "the shipped controller.toml lacks {key}"
                );
            }
        }
        // Its defaults are the defaults (the admin token file's default is
        // derived from the database, so the file shows it for the default db).
        let mut s = resolve(&args(&[]), &full, None).unwrap();
        assert_eq!(
            s.admin_token_file.take(),
            Some(sluice_controller::service::default_admin_token_file(
                Path::new(DEFAULT_DB)
            ))
        );
        assert_eq!(
            s,
            resolve(&args(&[]), &ControllerFile::default(), None).unwrap()
        );
    }
}
