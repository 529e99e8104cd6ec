//! `sluice controller | apply | get | delete | status | scale | events | metric`:
//! running the controller and talking to it over its REST API.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use sluice_controller::client::{ChangeOptions, Client};
use sluice_controller::{serve, ServerOptions};

use crate::error::CliError;

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
    /// Context of the config file ($SLUICE_CONFIG, else ~/.config/sluice/config)
    /// [default: its `current_context`].
    #[arg(long, global = true)]
    context: Option<String>,
    /// Print the controller's JSON as is.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

impl ClientArgs {
    /// Whether to print the controller's JSON as is.
    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// A client of the resolved controller, sending the resolved token.
    pub(crate) fn client(&self) -> Result<Client, CliError> {
        let t = crate::config::resolve(
            self.controller.as_deref(),
            self.token.as_deref(),
            self.context.as_deref(),
        )?;
        Ok(Client::new(&t.url).with_token(t.token.as_deref()))
    }
}

pub use crate::controller_config::ControllerArgs;

/// `sluice apply`.
#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// The tenant spec (YAML).
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
    /// Chains of every tenant.
    Chains,
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

/// `sluice status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    client: ClientArgs,
}

/// Runs the controller until SIGINT or SIGTERM.
pub fn controller(args: &ControllerArgs) -> Result<(), CliError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let a = args.settings()?;
    // Registered before the server's threads exist, so no signal is missed.
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(CliError::Signals)?;
    let h = serve(ServerOptions {
        listen: a.listen,
        db: a.db.clone(),
        state_url: a.state.clone(),
        admin_token_file: a.admin_token_file.clone(),
        fabric_auth: a.fabric_auth,
    })
    .map_err(CliError::Serve)?;
    if let Some(p) = h.bootstrapped() {
        // The path only: the secret never goes to a log.
        eprintln!(
            "sluice controller: first start: created the operator token `admin`; its secret is in {} (mode 0600)",
            p.display()
        );
    }
    eprintln!(
        "sluice controller: listening on {} (database {}, state {}, fabric authentication {})",
        h.url(),
        a.db.display(),
        a.state,
        if a.fabric_auth { "on" } else { "off" }
    );
    let sig = signals.forever().next();
    eprintln!("sluice controller: signal {sig:?}, stopping");
    h.shutdown();
    Ok(())
}

fn pretty(raw: &str) -> String {
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| raw.to_string())
}

fn parse<T: serde::de::DeserializeOwned>(raw: &str) -> Result<T, CliError> {
    serde_json::from_str(raw).map_err(CliError::Answer)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// `sluice apply -f SPEC`.
pub fn apply(a: &ApplyArgs) -> Result<(), CliError> {
    let text = std::fs::read_to_string(&a.file).map_err(CliError::io(&a.file))?;
    let opts = ChangeOptions {
        if_generation: a.if_generation,
        dry_run: a.dry_run,
        force: a.force,
    };
    let raw = a
        .client
        .client()?
        .apply_with(None, &text, &opts)
        .map_err(|source| CliError::Apply {
            path: a.file.clone(),
            source,
        })?;
    if a.client.json {
        println!("{}", pretty(&raw));
        return Ok(());
    }
    let s: sluice_controller::model::ApplySummary = parse(&raw)?;
    if s.dry_run {
        if let Some(p) = &s.plan {
            crate::change::print_plan(p);
        }
        return Ok(());
    }
    if s.changed {
        println!(
            "tenant {} applied: vni {}, generation {}, {} chains, {} NF instances",
            s.tenant,
            s.vni,
            s.generation,
            s.chains.len(),
            s.instances.len()
        );
    } else {
        println!(
            "tenant {} unchanged (generation {}, the same spec is applied)",
            s.tenant, s.generation
        );
    }
    for (h, n) in &s.entries {
        let pushed = s
            .pushed
            .get(h)
            .map(|v| format!(", pushing version {v}"))
            .unwrap_or_default();
        println!("  host {h}: {n} FIB entries{pushed}");
    }
    for i in &s.instances {
        println!("  instance {:<20} host {} port {}", i.name, i.host, i.port);
    }
    Ok(())
}

/// `sluice get ...`.
pub fn get(a: &GetArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let path = match &a.what {
        GetWhat::Tenants => "/v1/tenants".to_string(),
        GetWhat::Tenant { name } => format!("/v1/tenants/{name}"),
        GetWhat::Hosts => "/v1/hosts".into(),
        GetWhat::Vms => "/v1/vms".into(),
        GetWhat::Instances => "/v1/instances".into(),
        GetWhat::Chains => "/v1/chains".into(),
        GetWhat::Fib { host } => format!("/v1/hosts/{host}/fib"),
        GetWhat::Config { host } => format!("/v1/hosts/{host}/config"),
    };
    let raw = c.get_raw(&path)?;
    if a.client.json || matches!(a.what, GetWhat::Config { .. }) {
        println!("{}", pretty(&raw));
        return Ok(());
    }
    use sluice_controller::model::*;
    match &a.what {
        GetWhat::Tenants => {
            let v: Vec<TenantSummary> = parse(&raw)?;
            println!(
                "{:<16} {:>6} {:>4} {:>7} {:>10} {:>8}",
                "TENANT", "VNI", "GEN", "CHAINS", "INSTANCES", "ENTRIES"
            );
            for t in v {
                println!(
                    "{:<16} {:>6} {:>4} {:>7} {:>10} {:>8}",
                    t.tenant, t.vni, t.generation, t.chains, t.instances, t.entries
                );
            }
        }
        GetWhat::Tenant { .. } => {
            let t: TenantDetail = parse(&raw)?;
            println!(
                "tenant {}: vni {}, generation {}",
                t.tenant, t.vni, t.generation
            );
            println!("chains: {}", t.chains.join(", "));
            println!("vms: {}", t.vms.join(", "));
            for (h, n) in &t.entries {
                println!("host {h}: {n} FIB entries");
            }
            for i in &t.instances {
                println!("instance {:<20} host {} port {}", i.name, i.host, i.port);
            }
            println!("--- spec\n{}", t.spec.trim_end());
        }
        GetWhat::Hosts => {
            let v: Vec<HostInfo> = parse(&raw)?;
            println!(
                "{:>4} {:<14} {:<15} {:<24} {:<5} {:>9} {:>8} {:>8}  ERROR",
                "ID", "NAME", "UNDERLAY", "API", "ALIVE", "HEARD_MS", "DESIRED", "REPORTED"
            );
            for h in v {
                println!(
                    "{:>4} {:<14} {:<15} {:<24} {:<5} {:>9} {:>8} {:>8}  {}",
                    h.id,
                    h.name,
                    h.underlay,
                    h.api,
                    if h.alive { "yes" } else { "no" },
                    opt(h.last_heartbeat_ms),
                    h.desired_version,
                    opt(h.reported_version),
                    h.push_error.unwrap_or_default()
                );
            }
        }
        GetWhat::Vms => {
            let v: Vec<VmInfo> = parse(&raw)?;
            println!(
                "{:<12} {:<12} {:>4} {:>5} {:<16} {:<18} {:<16} GATEWAY",
                "TENANT", "NAME", "HOST", "PORT", "IFACE", "MAC", "ADDR"
            );
            for x in v {
                println!(
                    "{:<12} {:<12} {:>4} {:>5} {:<16} {:<18} {:<16} {}",
                    x.tenant,
                    x.name,
                    x.host,
                    x.port,
                    x.iface,
                    x.mac,
                    x.addr,
                    if x.gateway { "yes" } else { "" }
                );
            }
        }
        GetWhat::Instances => {
            let v: Vec<InstanceInfo> = parse(&raw)?;
            println!(
                "{:<24} {:<12} {:<12} {:>4} {:>5} {:<8} PID",
                "NAME", "TENANT", "MIDDLEBOX", "HOST", "PORT", "STATE"
            );
            for i in v {
                println!(
                    "{:<24} {:<12} {:<12} {:>4} {:>5} {:<8} {}",
                    i.name,
                    i.tenant,
                    i.middlebox,
                    i.host,
                    i.port,
                    i.state,
                    opt(i.pid)
                );
            }
        }
        GetWhat::Chains => {
            let v: Vec<ChainInfo> = parse(&raw)?;
            println!(
                "{:<12} {:<16} {:>4} {:>4}  PATH",
                "TENANT", "CHAIN", "ID", "REV"
            );
            for ch in v {
                let mirror = if ch.mirror.is_empty() {
                    String::new()
                } else {
                    format!("  (mirror: {})", ch.mirror.join(", "))
                };
                println!(
                    "{:<12} {:<16} {:>4} {:>4}  {}{mirror}",
                    ch.tenant,
                    ch.chain,
                    ch.id,
                    opt(ch.reverse_id),
                    ch.path.join(" -> ")
                );
            }
        }
        GetWhat::Fib { .. } => {
            let f: HostFibInfo = parse(&raw)?;
            println!("host {} (config version {})", f.host, f.version);
            for t in &f.tenants {
                println!(
                    "tenant {} (vni {}): {} entries, {} groups",
                    t.tenant,
                    t.vni,
                    t.entries.len(),
                    t.groups.len()
                );
                let mut entries = t.entries.clone();
                entries.sort_by_key(|e| std::cmp::Reverse(e.priority));
                for e in &entries {
                    println!(
                        "  {:>5} prio {:>4}  {}  =>  {}",
                        e.id,
                        e.priority,
                        serde_json::to_string(&e.m).unwrap_or_default(),
                        serde_json::to_string(&e.actions).unwrap_or_default()
                    );
                }
                for (g, grp) in &t.groups {
                    println!(
                        "  group {g}: {}",
                        serde_json::to_string(&grp.ranges).unwrap_or_default()
                    );
                }
            }
        }
        GetWhat::Config { .. } => {}
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
    if a.client.json {
        println!("{}", pretty(&raw));
        return Ok(());
    }
    let d: sluice_controller::model::Deleted = parse(&raw)?;
    if d.dry_run {
        if let Some(p) = &d.plan {
            crate::change::print_plan(p);
        }
        return Ok(());
    }
    println!("deleted {}", d.deleted);
    for (h, v) in &d.pushed {
        println!("  host {h}: pushing version {v}");
    }
    Ok(())
}

/// `sluice status`: hosts alive and in sync, tenants, NF instances alive.
pub fn status(a: &StatusArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    // A tenant's token sees no hosts: its status is its tenants and instances.
    let (hosts, hosts_hidden) = match c.hosts() {
        Ok(h) => (h, false),
        Err(sluice_controller::client::ClientError::Api { status: 403, .. }) => (Vec::new(), true),
        Err(e) => return Err(e.into()),
    };
    let tenants = c.tenants()?;
    let instances = c.instances()?;
    if a.client.json {
        let v = serde_json::json!({
            "controller": c.base(),
            "hosts": hosts,
            "tenants": tenants,
            "instances": instances,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    let alive = hosts.iter().filter(|h| h.alive).count();
    let synced = hosts.iter().filter(|h| h.in_sync).count();
    println!("controller {}", c.base());
    if hosts_hidden {
        println!("hosts: not visible to this token");
    } else {
        println!(
            "hosts: {} registered, {alive} alive, {synced} in sync",
            hosts.len()
        );
    }
    for h in &hosts {
        println!(
            "  host {:<3} {:<14} {:<5} version {} (agent runs {}){}",
            h.id,
            h.name,
            if h.alive { "alive" } else { "DOWN" },
            h.desired_version,
            opt(h.reported_version),
            h.push_error
                .as_ref()
                .map(|e| format!("  push error: {e}"))
                .unwrap_or_default()
        );
    }
    println!("tenants: {}", tenants.len());
    for t in &tenants {
        println!(
            "  {:<16} vni {:<6} {} chains, {} instances, {} entries",
            t.tenant, t.vni, t.chains, t.instances, t.entries
        );
    }
    let running = instances.iter().filter(|i| i.alive == Some(true)).count();
    println!("NF instances: {} placed, {running} alive", instances.len());
    for i in instances.iter().filter(|i| i.alive != Some(true)) {
        println!(
            "  {:<24} host {} port {}: {}",
            i.name, i.host, i.port, i.state
        );
    }
    Ok(())
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
    if a.client.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&info).unwrap_or_default()
        );
        return Ok(());
    }
    println!(
        "{}/{}: {} instances (spec: {}, state {})",
        info.tenant, info.middlebox, info.instances, info.spec_instances, info.state
    );
    for i in &info.placed {
        let mark = if info.draining.contains(&i.name) {
            "  draining"
        } else if info.down.contains(&i.name) {
            "  down"
        } else {
            ""
        };
        println!("  {:<24} host {} port {}{mark}", i.name, i.host, i.port);
    }
    for (h, v) in &info.pushed {
        println!("  host {h}: pushing version {v}");
    }
    Ok(())
}

/// `sluice events`: failovers, rejoins, drains and scaling decisions.
pub fn events(a: &EventsArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let ev = c.events(a.since)?;
    if a.client.json {
        println!("{}", serde_json::to_string_pretty(&ev).unwrap_or_default());
        return Ok(());
    }
    for e in &ev {
        let secs = e.at_ms / 1000;
        let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
        let timing = match (e.first_report_ms, e.push_sent_ms) {
            (Some(f), Some(p)) => format!(" [pushed {} ms after the report]", p.saturating_sub(f)),
            _ => String::new(),
        };
        println!(
            "{:>6} {h:02}:{m:02}:{s:02}.{:03} {:<9} {}{timing}",
            e.id,
            e.at_ms % 1000,
            e.kind,
            e.reason
        );
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
    if a.client.json {
        println!("{}", serde_json::to_string_pretty(&ack).unwrap_or_default());
        return Ok(());
    }
    if !ack.enabled {
        println!(
            "no scaler is configured for {}/{}: sample dropped",
            ack.tenant, ack.chain
        );
        return Ok(());
    }
    println!(
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
    );
    Ok(())
}
