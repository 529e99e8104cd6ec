//! `sluice controller | apply | get | delete | status | scale | events | metric`:
//! running the controller and talking to it over its REST API.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use sluice_controller::client::{ChangeOptions, Client};
use sluice_controller::{serve, ServerOptions};

use crate::error::CliError;
use crate::output::{opt, structured, structured_raw, used_of, yes_no, Align, Format, Table};

/// Where the controller is, which token to send, and how to print answers.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// Controller URL [default: $SLUICE_CONTROLLER, else the context's, else
    /// http://127.0.0.1:7420].
    #[arg(long, global = true)]
    controller: Option<String>,
    /// API token [default: $SLUICE_TOKEN, else the context's]. Visible to
    /// other local users in the process list: prefer $SLUICE_TOKEN or a
    /// context's `token_file`.
    #[arg(long, global = true)]
    token: Option<String>,
    /// CA certificate (PEM) the controller's certificate must chain to, for an
    /// https:// controller (the controller writes its own CA to `DB.ca.pem`)
    /// [default: $SLUICE_CA_FILE, else the context's `ca_file`].
    #[arg(long, global = true, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Context of the config file ($SLUICE_CONFIG, else ~/.config/sluice/config)
    /// [default: its `current_context`].
    #[arg(long, global = true)]
    context: Option<String>,
    /// Output format: the table (default), `wide` (more columns), `json`
    /// (the controller's answer), `yaml` (the same data).
    #[arg(short = 'o', long, global = true, value_enum, value_name = "FORMAT")]
    output: Option<Format>,
    /// Same as `-o json` (kept for scripts).
    #[arg(long, global = true, hide = true, conflicts_with = "output")]
    json: bool,
}

impl ClientArgs {
    /// The output format `-o` (or `--json`) asks for.
    pub(crate) fn format(&self) -> Format {
        match (self.output, self.json) {
            (Some(f), _) => f,
            (None, true) => Format::Json,
            (None, false) => Format::Table,
        }
    }

    /// A client of the resolved controller, sending the resolved token.
    pub(crate) fn client(&self) -> Result<Client, CliError> {
        let t = crate::config::resolve(
            self.controller.as_deref(),
            self.token.as_deref(),
            self.ca_file.as_deref(),
            self.context.as_deref(),
        )?;
        let client = Client::new(&t.url).with_token(t.token.as_deref());
        match &t.ca_file {
            Some(ca) if t.url.starts_with("http://") => Err(CliError::flag(
                "ca-file",
                format!(
                    "{} is given but the controller URL {} is plain http://: use https://",
                    ca.display(),
                    t.url
                ),
            )),
            Some(ca) => client
                .with_ca_file(ca)
                .map_err(|e| CliError::flag("ca-file", e.to_string())),
            None => Ok(client),
        }
    }
}

pub use crate::controller_config::ControllerArgs;

/// `sluice apply`.
#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// The tenant spec (YAML; `-`: read it from stdin).
    #[arg(short = 'f', long = "file")]
    pub(crate) file: PathBuf,
    /// Only show what the spec would change (instances, FIB entries per host).
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Apply even a spec that removes every chain or NF instance of the tenant.
    #[arg(long)]
    pub(crate) force: bool,
    /// Refuse unless the tenant is still at this generation (the one you read;
    /// 0: it must not exist yet).
    #[arg(long, value_name = "N")]
    pub(crate) if_generation: Option<u64>,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

/// `sluice get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(subcommand)]
    what: GetWhat,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum GetWhat {
    /// Applied tenants.
    Tenants,
    /// One tenant: its spec and status.
    Tenant {
        /// Tenant name.
        name: String,
    },
    /// Registered hosts.
    Hosts,
    /// Registered VMs.
    Vms,
    /// NF instances and whether they run.
    Instances,
    /// Where each NF instance runs (host, rack) and why it was put there
    /// (the placement policy and its reason).
    Placement {
        /// Only this tenant's instances.
        tenant: Option<String>,
    },
    /// Chains of every tenant.
    Chains,
    /// Hosts accused by their peers of ignoring congestion feedback, and
    /// the contained ones.
    Containment,
    /// The keys sealing datagrams between hosts: the one hosts seal with,
    /// and a rotation's progress.
    Fabric,
    /// Every rack uplink's traffic: measured from the agents' per-peer
    /// counters, predicted by network-aware distribution, and both over the
    /// declared capacity.
    Uplinks,
    /// The backends of every load balancer the token sees and their health
    /// (up, down, draining, removed).
    Backends {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// A host's FIB entries.
    Fib {
        /// Host id.
        host: u32,
    },
    /// A host's whole configuration (JSON).
    Config {
        /// Host id.
        host: u32,
    },
    /// Blocks on request (`sluice block`), of every tenant the token sees.
    Blocks {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// `sluice delete`.
#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(subcommand)]
    what: DeleteWhat,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum DeleteWhat {
    /// A tenant (its NF instances and FIB entries).
    Tenant {
        /// Tenant name.
        name: String,
        /// Do not ask for confirmation (needed when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Only show what the deletion would remove.
        #[arg(long)]
        dry_run: bool,
        /// Refuse unless the tenant is still at this generation.
        #[arg(long, value_name = "N")]
        if_generation: Option<u64>,
    },
    /// A VM registration.
    Vm {
        /// Tenant.
        tenant: String,
        /// VM name.
        name: String,
    },
}

/// `sluice status` (its exit status is documented on the subcommand).
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    client: ClientArgs,
}

/// Runs the controller until SIGINT or SIGTERM.
pub fn controller(args: &ControllerArgs) -> Result<(), CliError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let a = args.settings()?;
    if args.check_config {
        crate::output::text(&format!("settings OK:\n{a:#?}\n"))?;
        return Ok(());
    }
    // From here on this process is a daemon: it logs (RUST_LOG,
    // SLUICE_LOG_FORMAT); a setting refused above is a usage error, printed
    // as the CLI prints errors.
    sluice_logging::init();
    // Registered before the server's threads exist, so no signal is missed.
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(CliError::Signals)?;
    // A candidate waiting to lead gives up on the same signals.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(CliError::Signals)?;
    }
    let etcd = a.etcd.as_ref().map(|e| {
        tracing::info!(
            name = %e.name,
            url = %e.advertise,
            etcd = %e.endpoints.join(","),
            "replicated: campaigning to lead (not listening until then)"
        );
        sluice_controller::leader::EtcdOptions {
            endpoints: e.endpoints.clone(),
            tls: Some(e.tls.clone()),
            root: e.root.clone(),
            name: e.name.clone(),
            advertise: e.advertise.clone(),
            lease_ttl: e.lease,
            stop: stop.clone(),
        }
    });
    let h = match serve(ServerOptions {
        listen: a.listen,
        db: a.db.clone(),
        state_url: a.state.clone(),
        admin_token_file: a.admin_token_file.clone(),
        fabric_auth: a.fabric_auth,
        tls: a.tls.clone(),
        placement: a.placement,
        distribution: a.distribution.clone(),
        containment_threshold: a.containment_threshold,
        require_agent_tls: a.require_agent_tls,
        etcd,
    }) {
        Ok(h) => h,
        Err(sluice_controller::ControllerError::NotLeading) => {
            tracing::info!("stopped before leading");
            return Ok(());
        }
        Err(e) => return Err(CliError::Serve(e)),
    };
    if let Some(p) = h.bootstrapped() {
        // The path only: the secret never goes to a log.
        tracing::info!(
            file = %p.display(),
            "first start: created the operator token `admin`; its secret is in the file (mode 0600)"
        );
    }
    if let Some(ca) = h.ca_file() {
        tracing::info!(
            ca_file = %ca.display(),
            "TLS with its own CA: clients trust the CA file (--ca-file, or ca_file in a context)"
        );
    }
    tracing::info!(
        url = %h.url(),
        db = %a.db.display(),
        state = %a.state,
        fabric_auth = a.fabric_auth,
        "listening on {}",
        h.url()
    );
    loop {
        if let Some(sig) = signals.pending().next() {
            tracing::info!(signal = sig, "stopping");
            h.shutdown();
            return Ok(());
        }
        if h.lost_leadership() {
            h.shutdown();
            // Everything this process knew belongs to a term that is over:
            // start again as a candidate, as a new process (the way
            // Kubernetes' controller-manager leaves on a lost lease, without
            // needing a supervisor to bring it back).
            use std::os::unix::process::CommandExt;
            let err = std::process::Command::new("/proc/self/exe")
                .args(std::env::args_os().skip(1))
                .exec();
            return Err(CliError::Io {
                path: "/proc/self/exe".into(),
                source: err,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn parse<T: serde::de::DeserializeOwned>(raw: &str) -> Result<T, CliError> {
    serde_json::from_str(raw).map_err(CliError::Answer)
}

/// Reads a spec named by `-f`: a file, or stdin for `-`. Its name for
/// messages (`<stdin>` for `-`) and its text.
pub(crate) fn read_spec(file: &std::path::Path) -> Result<(PathBuf, String), CliError> {
    if file.as_os_str() == "-" {
        let name = PathBuf::from("<stdin>");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(CliError::io(&name))?;
        return Ok((name, text));
    }
    let text = std::fs::read_to_string(file).map_err(CliError::io(file))?;
    Ok((file.to_path_buf(), text))
}

/// `sluice apply -f SPEC`.
pub fn apply(a: &ApplyArgs) -> Result<(), CliError> {
    let (name, text) = read_spec(&a.file)?;
    let opts = ChangeOptions {
        if_generation: a.if_generation,
        dry_run: a.dry_run,
        force: a.force,
    };
    let raw = a
        .client
        .client()?
        .apply_with(None, &text, &opts)
        .map_err(|source| CliError::Apply { path: name, source })?;
    if structured_raw(a.client.format(), &raw)? {
        return Ok(());
    }
    let s: sluice_controller::model::ApplySummary = parse(&raw)?;
    if s.dry_run {
        if let Some(p) = &s.plan {
            crate::change::print_plan(p)?;
        }
        return Ok(());
    }
    if s.changed {
        outln!(
            "tenant {} applied: vni {}, generation {}, {} chains, {} NF instances",
            s.tenant,
            s.vni,
            s.generation,
            s.chains.len(),
            s.instances.len()
        )?;
    } else {
        outln!(
            "tenant {} unchanged (generation {}, the same spec is applied)",
            s.tenant,
            s.generation
        )?;
    }
    for (h, n) in &s.entries {
        let pushed = s
            .pushed
            .get(h)
            .map(|v| format!(", pushing version {v}"))
            .unwrap_or_default();
        outln!("  host {h}: {n} FIB entries{pushed}")?;
    }
    for i in &s.instances {
        outln!("  instance {:<20} host {} port {}", i.name, i.host, i.port)?;
    }
    Ok(())
}

/// `sluice get ...`.
pub fn get(a: &GetArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let fmt = a.client.format();
    let path = match &a.what {
        GetWhat::Tenants => "/v1/tenants".to_string(),
        GetWhat::Tenant { name } => format!("/v1/tenants/{name}"),
        GetWhat::Hosts => "/v1/hosts".into(),
        GetWhat::Vms => "/v1/vms".into(),
        GetWhat::Instances => "/v1/instances".into(),
        GetWhat::Placement { tenant: None } => "/v1/placement".into(),
        GetWhat::Placement { tenant: Some(t) } => format!(
            "/v1/placement?tenant={}",
            sluice_controller::resources::percent_encode(t)
        ),
        GetWhat::Chains => "/v1/chains".into(),
        GetWhat::Fib { host } => format!("/v1/hosts/{host}/fib"),
        GetWhat::Config { host } => format!("/v1/hosts/{host}/config"),
        // Gathered from every tenant the token sees.
        GetWhat::Blocks { tenant } => return crate::block::get(&a.client, tenant.as_deref()),
        GetWhat::Containment => return crate::containment::get(&a.client),
        GetWhat::Fabric => return crate::fabric::get(&a.client),
        GetWhat::Uplinks => "/v1/fabric/uplinks".into(),
        GetWhat::Backends { tenant } => return crate::backends::get(&a.client, tenant.as_deref()),
    };
    let raw = c.get_raw(&path)?;
    // A host's configuration has no table: JSON unless YAML is asked for.
    let fmt = match (&a.what, fmt) {
        (GetWhat::Config { .. }, Format::Table | Format::Wide) => Format::Json,
        _ => fmt,
    };
    if structured_raw(fmt, &raw)? {
        return Ok(());
    }
    use sluice_controller::model::*;
    match &a.what {
        GetWhat::Tenants => {
            let v: Vec<TenantSummary> = parse(&raw)?;
            let mut t = Table::new(fmt)
                .col("TENANT", Align::Left)
                .col("VNI", Align::Right)
                .col("GEN", Align::Right)
                .col("CHAINS", Align::Right)
                .col("INSTANCES", Align::Right)
                .col("ENTRIES", Align::Right);
            for x in v {
                t.row(vec![
                    x.tenant,
                    x.vni.to_string(),
                    x.generation.to_string(),
                    x.chains.to_string(),
                    x.instances.to_string(),
                    x.entries.to_string(),
                ]);
            }
            t.print()?;
        }
        GetWhat::Tenant { .. } => {
            let t: TenantDetail = parse(&raw)?;
            outln!(
                "tenant {}: vni {}, generation {}",
                t.tenant,
                t.vni,
                t.generation
            )?;
            outln!("chains: {}", t.chains.join(", "))?;
            outln!("vms: {}", t.vms.join(", "))?;
            for (h, n) in &t.entries {
                outln!("host {h}: {n} FIB entries")?;
            }
            for i in &t.instances {
                outln!("instance {:<20} host {} port {}", i.name, i.host, i.port)?;
            }
            outln!("--- spec\n{}", t.spec.trim_end())?;
        }
        GetWhat::Hosts => {
            let v: Vec<HostInfo> = parse(&raw)?;
            let mut t = Table::new(fmt)
                .col("ID", Align::Right)
                .col("NAME", Align::Left)
                .col("UNDERLAY", Align::Left)
                .col("API", Align::Left)
                .col("ALIVE", Align::Left)
                .col("DRAINED", Align::Left)
                .col("HEARD_MS", Align::Right)
                .col("DESIRED", Align::Right)
                .col("REPORTED", Align::Right)
                .wide_col("IN_SYNC", Align::Left)
                .wide_col("SLOTS", Align::Right)
                .wide_col("RACK", Align::Left)
                .col("ERROR", Align::Left);
            for h in v {
                t.row(vec![
                    h.id.to_string(),
                    h.name,
                    h.underlay,
                    h.api,
                    yes_no(h.alive),
                    yes_no(h.drained),
                    opt(h.last_heartbeat_ms),
                    h.desired_version.to_string(),
                    opt(h.reported_version),
                    yes_no(h.in_sync),
                    used_of(h.slots_used, h.slots_total),
                    opt(h.rack),
                    h.push_error.unwrap_or_default(),
                ]);
            }
            t.print()?;
        }
        GetWhat::Vms => {
            let v: Vec<VmInfo> = parse(&raw)?;
            let mut t = Table::new(fmt)
                .col("TENANT", Align::Left)
                .col("NAME", Align::Left)
                .col("HOST", Align::Right)
                .col("PORT", Align::Right)
                .col("IFACE", Align::Left)
                .col("MAC", Align::Left)
                .col("ADDR", Align::Left)
                .col("GATEWAY", Align::Left)
                .wide_col("APPLIED", Align::Left);
            for x in v {
                t.row(vec![
                    x.tenant,
                    x.name,
                    x.host.to_string(),
                    x.port.to_string(),
                    x.iface,
                    x.mac,
                    x.addr,
                    if x.gateway { "yes" } else { "" }.into(),
                    yes_no(x.applied),
                ]);
            }
            t.print()?;
        }
        GetWhat::Instances => {
            let v: Vec<InstanceInfo> = parse(&raw)?;
            // Wide: where the host is too. A token that sees no hosts (a
            // tenant's) gets `-` there.
            let hosts = if fmt.wide() {
                c.hosts().unwrap_or_default()
            } else {
                Vec::new()
            };
            let mut t = Table::new(fmt)
                .col("NAME", Align::Left)
                .col("TENANT", Align::Left)
                .col("MIDDLEBOX", Align::Left)
                .col("HOST", Align::Right)
                .wide_col("HOST_NAME", Align::Left)
                .wide_col("UNDERLAY", Align::Left)
                .col("PORT", Align::Right)
                .col("STATE", Align::Left)
                .wide_col("ALIVE", Align::Left)
                .col("PID", Align::Left);
            for i in v {
                let h = hosts.iter().find(|h| h.id == i.host);
                t.row(vec![
                    i.name,
                    i.tenant,
                    i.middlebox,
                    i.host.to_string(),
                    opt(h.map(|h| &h.name)),
                    opt(h.map(|h| &h.underlay)),
                    i.port.to_string(),
                    shown_state(&i.state),
                    opt(i.alive.map(yes_no)),
                    opt(i.pid),
                ]);
            }
            t.print()?;
        }
        GetWhat::Placement { .. } => {
            let v: Vec<PlacementInfo> = parse(&raw)?;
            let mut t = Table::new(fmt)
                .col("NAME", Align::Left)
                .wide_col("TENANT", Align::Left)
                .wide_col("MIDDLEBOX", Align::Left)
                .col("HOST", Align::Right)
                .wide_col("HOST_NAME", Align::Left)
                .col("RACK", Align::Left)
                .col("POLICY", Align::Left)
                .col("SHARE", Align::Right)
                .wide_col("CLASS_SHARES", Align::Left)
                .col("REASON", Align::Left);
            for p in v {
                let classes = if p.class_shares.is_empty() {
                    "-".to_string()
                } else {
                    p.class_shares
                        .iter()
                        .map(|(c, s)| format!("{c}:{:.0}%", s * 100.0))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                t.row(vec![
                    p.name,
                    p.tenant,
                    p.middlebox,
                    p.host.to_string(),
                    p.host_name,
                    opt(p.rack),
                    opt(p.policy),
                    p.share
                        .map_or_else(|| "-".to_string(), |s| format!("{:.0}%", s * 100.0)),
                    classes,
                    p.reason,
                ]);
            }
            t.print()?;
        }
        GetWhat::Uplinks => {
            let v: Vec<RackUplink> = parse(&raw)?;
            let mbit = |b: f64| format!("{:.1}", b * 8.0 / 1e6);
            let pct = |u: Option<f64>| {
                u.map_or_else(|| "-".to_string(), |u| format!("{:.0}%", u * 100.0))
            };
            let mut t = Table::new(fmt)
                .col("RACK", Align::Left)
                .col("CAPACITY_MBIT", Align::Right)
                .col("UP_MBIT", Align::Right)
                .col("DOWN_MBIT", Align::Right)
                .col("PREDICTED_UP", Align::Right)
                .col("PREDICTED_DOWN", Align::Right)
                .col("UTIL", Align::Right)
                .col("PREDICTED_UTIL", Align::Right)
                .wide_col("UP_BYTES", Align::Right)
                .wide_col("DOWN_BYTES", Align::Right);
            for u in v {
                t.row(vec![
                    u.rack,
                    u.capacity_bytes_per_s.map_or_else(|| "-".to_string(), mbit),
                    mbit(u.up_bytes_per_s),
                    mbit(u.down_bytes_per_s),
                    u.predicted_up_bytes_per_s
                        .map_or_else(|| "-".to_string(), mbit),
                    u.predicted_down_bytes_per_s
                        .map_or_else(|| "-".to_string(), mbit),
                    pct(u.utilisation),
                    pct(u.predicted_utilisation),
                    u.up_bytes_total.to_string(),
                    u.down_bytes_total.to_string(),
                ]);
            }
            t.print()?;
        }
        GetWhat::Chains => {
            let v: Vec<ChainInfo> = parse(&raw)?;
            let mut t = Table::new(fmt)
                .col("TENANT", Align::Left)
                .col("CHAIN", Align::Left)
                .col("ID", Align::Right)
                .col("REV", Align::Right)
                .wide_col("BIDIRECTIONAL", Align::Left)
                .col("PATH", Align::Left);
            for ch in v {
                let mirror = if ch.mirror.is_empty() {
                    String::new()
                } else {
                    format!("  (mirror: {})", ch.mirror.join(", "))
                };
                t.row(vec![
                    ch.tenant,
                    ch.chain,
                    ch.id.to_string(),
                    opt(ch.reverse_id),
                    yes_no(ch.bidirectional),
                    format!("{}{mirror}", ch.path.join(" -> ")),
                ]);
            }
            t.print()?;
        }
        GetWhat::Fib { .. } => {
            let f: HostFibInfo = parse(&raw)?;
            outln!("host {} (config version {})", f.host, f.version)?;
            for t in &f.tenants {
                outln!(
                    "tenant {} (vni {}): {} entries, {} groups",
                    t.tenant,
                    t.vni,
                    t.entries.len(),
                    t.groups.len()
                )?;
                let mut entries = t.entries.clone();
                entries.sort_by_key(|e| std::cmp::Reverse(e.priority));
                for e in &entries {
                    outln!(
                        "  {:>5} prio {:>4}  {}  =>  {}",
                        e.id,
                        e.priority,
                        serde_json::to_string(&e.m).unwrap_or_default(),
                        serde_json::to_string(&e.actions).unwrap_or_default()
                    )?;
                }
                for (g, grp) in &t.groups {
                    outln!(
                        "  group {g}: {}",
                        serde_json::to_string(&grp.ranges).unwrap_or_default()
                    )?;
                }
            }
        }
        GetWhat::Config { .. }
        | GetWhat::Blocks { .. }
        | GetWhat::Containment
        | GetWhat::Fabric
        | GetWhat::Backends { .. } => {}
    }
    Ok(())
}

/// `sluice delete ...`.
pub fn delete(a: &DeleteArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let raw = match &a.what {
        DeleteWhat::Tenant {
            name,
            yes,
            dry_run,
            if_generation,
        } => {
            if !dry_run && !yes {
                crate::change::confirm(&format!("delete tenant {name}"), name)?;
            }
            let opts = ChangeOptions {
                if_generation: *if_generation,
                dry_run: *dry_run,
                force: false,
            };
            c.delete_tenant_with(name, &opts)
        }
        DeleteWhat::Vm { tenant, name } => c
            .delete_vm(tenant, name)
            .map(|d| serde_json::to_string(&d).unwrap_or_default()),
    }?;
    if structured_raw(a.client.format(), &raw)? {
        return Ok(());
    }
    let d: sluice_controller::model::Deleted = parse(&raw)?;
    if d.dry_run {
        if let Some(p) = &d.plan {
            crate::change::print_plan(p)?;
        }
        return Ok(());
    }
    outln!("deleted {}", d.deleted)?;
    for (h, v) in &d.pushed {
        outln!("  host {h}: pushing version {v}")?;
    }
    Ok(())
}

/// `sluice status`: hosts alive and in sync, tenants, NF instances alive;
/// [`CliError::Degraded`] (exit 3) once printed if a host is down or an NF
/// instance is not known to run.
pub fn status(a: &StatusArgs) -> Result<(), CliError> {
    let fmt = a.client.format();
    let c = a.client.client()?;
    // A tenant's token sees no hosts: its status is its tenants and instances.
    let (hosts, hosts_hidden) = match c.hosts() {
        Ok(h) => (h, false),
        Err(sluice_controller::client::ClientError::Api { status: 403, .. }) => (Vec::new(), true),
        Err(e) => return Err(e.into()),
    };
    let tenants = c.tenants()?;
    let instances = c.instances()?;
    // A tenant's token does not see the shared store; an older controller
    // has no `/v1/status`.
    let status = match c.status() {
        Ok(s) => Some(s),
        Err(sluice_controller::client::ClientError::Api {
            status: 403 | 404, ..
        }) => None,
        Err(e) => return Err(e.into()),
    };
    let (store, leader, controllers) = match status {
        Some(s) => (Some(s.store), s.leader, s.controllers),
        None => (None, None, Vec::new()),
    };
    // An older controller has no `/v1/backends`.
    let backends = match c.backends() {
        Ok(b) => b,
        Err(sluice_controller::client::ClientError::Api {
            status: 403 | 404, ..
        }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let v = serde_json::json!({
        "controller": c.base(),
        "leader": leader,
        "controllers": controllers,
        "store": store,
        "hosts": hosts,
        "tenants": tenants,
        "instances": instances,
        "backends": backends,
    });
    if !structured(fmt, &v)? {
        print_status(
            c.base(),
            (leader.as_ref(), &controllers),
            store.as_ref(),
            (&hosts, hosts_hidden),
            &tenants,
            &instances,
            fmt,
        )?;
        if !backends.is_empty() {
            crate::backends::print_status(&backends)?;
        }
    }
    let hosts_down = hosts.iter().filter(|h| !h.alive).count();
    // A stopped instance (an operator drained it) runs nowhere on purpose.
    let instances_down = instances
        .iter()
        .filter(|i| i.alive != Some(true) && i.state != "stopped")
        .count();
    let store_problem = store.as_ref().map(store_problem).unwrap_or_default();
    if hosts_down + instances_down > 0 || !store_problem.is_empty() {
        return Err(CliError::Degraded {
            hosts_down,
            hosts: hosts.len(),
            instances_down,
            instances: instances.len(),
            store: store_problem,
        });
    }
    Ok(())
}

/// Now, Unix milliseconds.
fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What `sluice status` adds to its degraded line for the state store:
/// nothing if every node answers. Lost data is history, not a state: it is
/// printed (and alerted on), not an exit code.
fn store_problem(s: &sluice_controller::store_health::StoreStatus) -> String {
    let down = s.nodes.iter().filter(|n| !n.up).count();
    let mut out = String::new();
    if !s.healthy || down > 0 {
        out.push_str(&format!(
            ", {down} of {} state store nodes down{}",
            s.nodes.len(),
            if s.healthy {
                ""
            } else {
                " (the store does not serve)"
            }
        ));
    }
    out
}

/// How long ago Unix time `ms` was, for a person.
fn ago(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "never".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    format!("{:.1} s ago", now.saturating_sub(ms) as f64 / 1000.0)
}

/// `sluice status`'s state store lines.
fn print_store(s: &sluice_controller::store_health::StoreStatus) -> Result<(), CliError> {
    if s.kind == "local" {
        outln!("store: local (in each NF instance's process)")?;
        return Ok(());
    }
    let up = s.nodes.iter().filter(|n| n.up).count();
    outln!(
        "store: {} {} node(s), {up} up, {}{}",
        s.kind,
        s.nodes.len(),
        if s.healthy { "serving" } else { "NOT SERVING" },
        if s.lost_data_total > 0 {
            format!(", lost its data {} time(s)", s.lost_data_total)
        } else {
            String::new()
        }
    )?;
    for n in &s.nodes {
        let role = n
            .role
            .map(|r| format!("{r:?}").to_lowercase())
            .unwrap_or_else(|| "-".into());
        outln!(
            "  node {:<21} {:<4} {:<7} last answer {}, lost data {} time(s){}",
            n.node,
            if n.up { "up" } else { "DOWN" },
            role,
            ago(n.last_ok_ms),
            n.lost_data_count,
            n.error
                .as_ref()
                .map(|e| format!("  error: {e}"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// `sluice status`'s text: wide adds each host's underlay and API, and lists
/// every NF instance (not only those not running) with its process id.
fn print_status(
    base: &str,
    (leader, controllers): (
        Option<&sluice_controller::model::LeaderInfo>,
        &[sluice_controller::model::ControllerMember],
    ),
    store: Option<&sluice_controller::store_health::StoreStatus>,
    (hosts, hosts_hidden): (&[sluice_controller::model::HostInfo], bool),
    tenants: &[sluice_controller::model::TenantSummary],
    instances: &[sluice_controller::model::InstanceInfo],
    fmt: Format,
) -> Result<(), CliError> {
    let alive = hosts.iter().filter(|h| h.alive).count();
    let synced = hosts.iter().filter(|h| h.in_sync).count();
    match leader {
        None => outln!("controller {base}")?,
        Some(l) => {
            let for_s = unix_ms_now().saturating_sub(l.since_ms) / 1000;
            outln!(
                "controller {base}: {} leads the replicated controllers, for {for_s} s (term {}, lease {} s)",
                l.name,
                l.term,
                l.lease_s
            )?
        }
    }
    if !controllers.is_empty() {
        let standbys = controllers.iter().filter(|m| !m.leading).count();
        let names: Vec<String> = controllers
            .iter()
            .map(|m| {
                let role = if m.leading { "leads" } else { "standby" };
                format!("{} ({role})", m.name)
            })
            .collect();
        outln!(
            "controllers: {} running, {standbys} standing by: {}",
            controllers.len(),
            names.join(", ")
        )?;
    }
    if let Some(s) = store {
        print_store(s)?;
    }
    if hosts_hidden {
        outln!("hosts: not visible to this token")?;
    } else {
        outln!(
            "hosts: {} registered, {alive} alive, {synced} in sync",
            hosts.len()
        )?;
    }
    for h in hosts {
        let wide = if fmt.wide() {
            format!(" {:<15} {:<24}", h.underlay, h.api)
        } else {
            String::new()
        };
        outln!(
            "  host {:<3} {:<14}{wide} {:<5} version {} (agent runs {}){}{}",
            h.id,
            h.name,
            if h.alive { "alive" } else { "DOWN" },
            h.desired_version,
            opt(h.reported_version),
            if h.drained {
                "  drained (no new instances)"
            } else {
                ""
            },
            h.push_error
                .as_ref()
                .map(|e| format!("  push error: {e}"))
                .unwrap_or_default()
        )?;
    }
    outln!("tenants: {}", tenants.len())?;
    for t in tenants {
        outln!(
            "  {:<16} vni {:<6} {} chains, {} instances, {} entries",
            t.tenant,
            t.vni,
            t.chains,
            t.instances,
            t.entries
        )?;
    }
    let running = instances.iter().filter(|i| i.alive == Some(true)).count();
    outln!("NF instances: {} placed, {running} alive", instances.len())?;
    for i in instances
        .iter()
        .filter(|i| fmt.wide() || i.alive != Some(true) || i.state == "draining")
    {
        let pid = if fmt.wide() {
            format!(" pid {}", opt(i.pid))
        } else {
            String::new()
        };
        outln!(
            "  {:<24} host {} port {}{pid}: {}",
            i.name,
            i.host,
            i.port,
            shown_state(&i.state)
        )?;
    }
    Ok(())
}

/// An instance's state as printed: drains in capitals (as `DRAINED` hosts
/// are), so they stand out among `alive` ones.
fn shown_state(state: &str) -> String {
    match state {
        "draining" | "stopped" => state.to_uppercase(),
        s => s.to_string(),
    }
}

/// `sluice scale TENANT MIDDLEBOX N`.
#[derive(Args, Debug)]
pub struct ScaleArgs {
    /// Tenant.
    tenant: String,
    /// Middlebox (element name in the tenant spec).
    middlebox: String,
    /// Instances wanted.
    instances: u64,
    /// For `state: local` middleboxes: longest drain of a removed instance, ms.
    #[arg(long)]
    drain_timeout_ms: Option<u64>,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice events`.
#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Only events after this id.
    #[arg(long, default_value_t = 0)]
    since: u64,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice metric TENANT CHAIN VALUE`.
#[derive(Args, Debug)]
pub struct MetricArgs {
    /// Tenant.
    tenant: String,
    /// Chain.
    chain: String,
    /// The application metric (requests/s, latency).
    value: f64,
    /// Sample time on the reporter's clock, ms (default: the controller's clock).
    #[arg(long)]
    at_ms: Option<u64>,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice scale`: sets a middlebox's instance count.
pub fn scale(a: &ScaleArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let info = c.scale(
        &a.tenant,
        &a.middlebox,
        &sluice_controller::model::ScaleRequest {
            instances: a.instances,
            drain_timeout_ms: a.drain_timeout_ms,
        },
    )?;
    if structured(a.client.format(), &info)? {
        return Ok(());
    }
    outln!(
        "{}/{}: {} instances (spec: {}, state {})",
        info.tenant,
        info.middlebox,
        info.instances,
        info.spec_instances,
        info.state
    )?;
    for i in &info.placed {
        let mark = if info.draining.contains(&i.name) {
            "  draining"
        } else if info.down.contains(&i.name) {
            "  down"
        } else {
            ""
        };
        outln!("  {:<24} host {} port {}{mark}", i.name, i.host, i.port)?;
    }
    for (h, v) in &info.pushed {
        outln!("  host {h}: pushing version {v}")?;
    }
    Ok(())
}

/// `sluice events`: failovers, rejoins, drains and scaling decisions.
pub fn events(a: &EventsArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let ev = c.events(a.since)?;
    let fmt = a.client.format();
    if structured(fmt, &ev)? {
        return Ok(());
    }
    for e in &ev {
        let secs = e.at_ms / 1000;
        let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
        let timing = match (e.first_report_ms, e.push_sent_ms) {
            (Some(f), Some(p)) => format!(" [pushed {} ms after the report]", p.saturating_sub(f)),
            _ => String::new(),
        };
        // Wide: what the event concerns, as `key=value` after the reason.
        let mut about = String::new();
        if fmt.wide() {
            for (k, v) in [
                ("tenant", e.tenant.clone()),
                ("chain", e.chain.clone()),
                ("middlebox", e.middlebox.clone()),
                ("instance", e.instance.clone()),
                ("host", e.host.map(|h| h.to_string())),
            ] {
                if let Some(v) = v {
                    about.push_str(&format!(" {k}={v}"));
                }
            }
        }
        outln!(
            "{:>6} {h:02}:{m:02}:{s:02}.{:03} {:<9} {}{timing}{about}",
            e.id,
            e.at_ms % 1000,
            e.kind,
            e.reason
        )?;
    }
    Ok(())
}

/// `sluice metric`: reports an application metric sample of a chain.
pub fn metric(a: &MetricArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let ack = c.metric(
        &a.tenant,
        &a.chain,
        &sluice_controller::model::MetricSample {
            value: a.value,
            at_ms: a.at_ms,
        },
    )?;
    if structured(a.client.format(), &ack)? {
        return Ok(());
    }
    if !ack.enabled {
        outln!(
            "no scaler is configured for {}/{}: sample dropped",
            ack.tenant,
            ack.chain
        )?;
        return Ok(());
    }
    outln!(
        "{}/{}: counts {:?}{}{}",
        ack.tenant,
        ack.chain,
        ack.counts,
        if ack.scaling { ", scaling" } else { "" },
        if ack.decisions.is_empty() {
            String::new()
        } else {
            format!(", now: {}", ack.decisions.join(", "))
        }
    )?;
    Ok(())
}
