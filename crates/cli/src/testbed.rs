//! `sluice testbed up | down | demo`: a whole deployment on this machine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Subcommand;
use sluice_testbed::lab::{Lab, LabOptions, LabState, StoreKind};
use sluice_testbed::scenario;

use crate::error::CliError;
use crate::output::OutputError;

/// Where `up`, `down` and `demo` keep the lab's files unless told otherwise.
pub const DEFAULT_DIR: &str = "/tmp/sluice-testbed";

/// The testbed command to run.
#[derive(Subcommand)]
pub enum TestbedCmd {
    /// Bring a testbed up with a tenant applied, and leave it running.
    Up {
        /// Tenant spec to apply (its services become VMs, its external subnets a gateway).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Hosts.
        #[arg(long, default_value_t = 3)]
        hosts: u32,
        /// Working directory (logs, the controller's database, testbed.json).
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// Do not start nginx in the service VMs.
        #[arg(long)]
        no_web: bool,
        /// Run the agents with Seawall's rate control (VM-level fair sharing
        /// of congested paths; docs/ISOLATION.md).
        #[arg(long)]
        seawall: bool,
        /// Do not add the context `testbed` (this controller, its operator
        /// token's file) to the CLI's config file ($SLUICE_CONFIG, else
        /// ~/.config/sluice/config) nor make it current.
        #[arg(long)]
        no_context: bool,
        /// The state store: `cluster` (three primaries with a replica each:
        /// a killed primary is replaced by its replica; docs/STATE.md,
        /// "Replication"), as deployed, or `single` (one redis-server).
        #[arg(long, default_value = "cluster", value_parser = ["single", "cluster"])]
        store: String,
        /// Controllers: 3 (or more) on a three-member etcd cluster with one
        /// leading, as deployed (needs Debian's etcd-server;
        /// docs/RELIABILITY.md, "Replicated controllers"), or 1 on a SQLite
        /// file.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
        controllers: u32,
    },
    /// Stop and remove the testbed recorded in DIR.
    Down {
        /// Working directory given to `up`.
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Up, real HTTP traffic through the Figure 4 chains with a check of each
    /// behaviour, a report, and down.
    Demo {
        /// Tenant spec (the checks expect examples/tenant/figure4.yaml's shape).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Hosts.
        #[arg(long, default_value_t = 3)]
        hosts: u32,
        /// Working directory.
        #[arg(long, default_value = DEFAULT_DIR)]
        dir: PathBuf,
        /// The firewall's `state:` (shared, cached or local); `spec` to keep
        /// the spec's own. The default, cached, shows the ownership leases and
        /// the flow cache at work (docs/STATE.md).
        #[arg(long, default_value = "cached")]
        fw_state: String,
        /// The state store: `cluster` (as deployed: a replica per primary)
        /// or `single`.
        #[arg(long, default_value = "cluster", value_parser = ["single", "cluster"])]
        store: String,
        /// Controllers: 3 on etcd (as deployed: one leads) or 1 on SQLite.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
        controllers: u32,
    },
}

/// Runs one testbed command.
pub fn run(what: TestbedCmd) -> Result<(), CliError> {
    match what {
        TestbedCmd::Up {
            spec,
            hosts,
            dir,
            no_web,
            seawall,
            no_context,
            store,
            controllers,
        } => up(
            &spec,
            &dir,
            UpOptions {
                hosts,
                web: !no_web,
                seawall,
                context: !no_context,
                store: store.parse()?,
                controllers,
            },
        ),
        TestbedCmd::Down { dir } => down(&dir),
        TestbedCmd::Demo {
            spec,
            hosts,
            dir,
            fw_state,
            store,
            controllers,
        } => demo(
            &spec,
            hosts,
            &dir,
            (fw_state != "spec").then_some(fw_state.as_str()),
            (store.parse()?, controllers),
        ),
    }
}

pub(crate) fn options(
    spec: &Path,
    hosts: u32,
    dir: &Path,
    web: bool,
) -> Result<LabOptions, CliError> {
    options_with(spec, hosts, dir, web, false)
}

/// Lab options with the agents' Seawall rate control on or off.
pub fn options_with(
    spec: &Path,
    hosts: u32,
    dir: &Path,
    web: bool,
    seawall: bool,
) -> Result<LabOptions, CliError> {
    let sluice = std::env::current_exe().map_err(CliError::OwnBinary)?;
    // The agent binary is built next to this one (cargo build -p sluice-agent).
    let sluiced = sluice.with_file_name("sluiced");
    Ok(LabOptions {
        spec: spec.to_path_buf(),
        hosts,
        dir: dir.to_path_buf(),
        sluice,
        sluiced,
        web,
        seawall,
        fabric_auth: true,
        store: StoreKind::Single,
        subverted: Vec::new(),
        controllers: 1,
        topology: Default::default(),
        // Several agents share the machine: one forwarding thread each.
        dataplane_threads: 1,
    })
}

pub(crate) fn print_state(s: &LabState) -> Result<(), OutputError> {
    outln!("tenant {} on {} hosts", s.tenant, s.hosts.len())?;
    if s.replicas.is_empty() {
        outln!("  controller  {}", s.controller)?;
    } else {
        outln!(
            "  controllers {} (on etcd: {} members; {} leads, the others wait to take over)",
            s.controllers,
            s.etcd.len(),
            s.controller
        )?;
    }
    outln!(
        "  operator token in {} (CLI context `testbed`: {})",
        s.token_file.display(),
        s.config.display()
    )?;
    let kind = match s.store_kind {
        StoreKind::Single => "one server".to_string(),
        StoreKind::Cluster => format!(
            "a cluster of {} nodes, each primary with a replica",
            s.store_nodes.len()
        ),
    };
    outln!("  state store {} ({kind})", s.store)?;
    for h in &s.hosts {
        outln!(
            "  host {}: netns {}, underlay {}, agent {}",
            h.id,
            h.netns,
            h.underlay,
            h.api
        )?;
    }
    for v in &s.vms {
        outln!(
            "  vm {:<8} on host {}: netns {}, {}",
            v.name,
            v.host,
            v.netns,
            v.addrs.join(", ")
        )?;
    }
    Ok(())
}

/// Refuses a directory that already holds a running testbed, and removes the lab
/// in `dir` if this process is interrupted (SIGINT/SIGTERM/SIGHUP): a long demo
/// or experiment stopped half way leaves nothing behind.
pub(crate) fn guard(dir: &Path) -> Result<(), CliError> {
    if dir.join("testbed.json").exists() {
        return Err(CliError::AlreadyUp(dir.to_path_buf()));
    }
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(CliError::Signals)?;
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            eprintln!("signal {sig}: removing the testbed in {}", dir.display());
            let _ = Lab::down_dir(&dir);
            std::process::exit(128 + sig);
        }
    });
    Ok(())
}

/// The CLI context `testbed up` adds and `testbed down` removes.
pub const CONTEXT: &str = "testbed";

/// Refuses a testbed directory the nginx workers of the service VMs could not
/// read: they run as another user (`www-data`, `nobody`), so the directory and
/// every parent must let others traverse them (`o+x`), or every HTTP request
/// is answered 403 (`mktemp -d` makes a 0700 directory). Parts of the path
/// that do not exist yet are created 0755 by the lab, and are not checked.
pub fn check_readable_by_others(dir: &Path) -> Result<(), CliError> {
    use std::os::unix::fs::PermissionsExt;
    let abs = std::path::absolute(dir).map_err(CliError::io(dir))?;
    let mut parts: Vec<&Path> = abs.ancestors().collect();
    parts.reverse();
    for p in parts {
        let meta = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(CliError::io(p)(e)),
        };
        let mode = meta.permissions().mode() & 0o7777;
        if !meta.is_dir() {
            return Err(CliError::io(p)(std::io::Error::from(
                std::io::ErrorKind::NotADirectory,
            )));
        }
        if mode & 0o001 == 0 {
            return Err(CliError::NotReadableByOthers {
                path: p.to_path_buf(),
                mode,
                problem: if p == abs {
                    "other users cannot enter it"
                } else {
                    "other users cannot enter this parent of the testbed's directory"
                },
            });
        }
    }
    Ok(())
}

/// `sluice testbed up`.
/// `sluice testbed up`'s choices.
#[derive(Debug, Clone, Copy)]
pub struct UpOptions {
    /// Hosts.
    pub hosts: u32,
    /// nginx in the service VMs.
    pub web: bool,
    /// Seawall's rate control in the agents.
    pub seawall: bool,
    /// Add and select the CLI context `testbed`.
    pub context: bool,
    /// The state store.
    pub store: StoreKind,
    /// Controllers (more than 1: on etcd).
    pub controllers: u32,
}

/// `sluice testbed up`.
pub fn up(spec: &Path, dir: &Path, o: UpOptions) -> Result<(), CliError> {
    let UpOptions {
        hosts,
        web,
        seawall,
        context,
        store,
        controllers,
    } = o;
    if dir.join("testbed.json").exists() {
        return Err(CliError::AlreadyUp(dir.to_path_buf()));
    }
    if web {
        check_readable_by_others(dir)?;
    }
    let t = Instant::now();
    let mut opts = options_with(spec, hosts, dir, web, seawall)?;
    opts.store = store;
    opts.controllers = controllers;
    let lab = Lab::up(&opts)?;
    let state = lab.keep();
    let took = t.elapsed();
    // The context first: printing may stop early (a closed stdout).
    let added = if context {
        let ctx = crate::config::Context {
            name: CONTEXT.into(),
            controller: Some(state.controller_urls().to_string()),
            token: None,
            token_file: Some(state.token_file.clone()),
            ca_file: Some(state.ca_file.clone()).filter(|p| !p.as_os_str().is_empty()),
        };
        // The lab is up: a config file that cannot be written only costs the
        // convenience, the export below still works.
        match crate::config::upsert_context(ctx, true) {
            Ok(path) => Some(path),
            Err(e) => {
                eprintln!("warning: context `{CONTEXT}` not added: {e}");
                None
            }
        }
    } else {
        None
    };
    print_state(&state)?;
    outln!(
        "up in {:.1} s; files in {}",
        took.as_secs_f64(),
        state.dir.display()
    )?;
    match added {
        Some(path) => outln!(
            "try:  sluice status   (context `{CONTEXT}` of {} is now current)",
            path.display()
        )?,
        None => outln!(
            "try:  export SLUICE_CONFIG={}; sluice status",
            state.config.display()
        )?,
    }
    outln!(
        "      ip netns exec {} curl --interface 198.51.100.10 http://10.10.1.100/",
        state.vm("gateway").map(|v| v.netns.as_str()).unwrap_or("?")
    )?;
    outln!("stop: sluice testbed down --dir {}", state.dir.display())?;
    Ok(())
}

/// `sluice testbed down`: also removes the context `up` added (the one with
/// this lab's token file: another lab's context of the same name stays).
pub fn down(dir: &Path) -> Result<(), CliError> {
    let s = Lab::down_dir(dir)?;
    let ours = |c: &crate::config::Context| c.token_file.as_deref() == Some(s.token_file.as_path());
    let removed = crate::config::remove_context(CONTEXT, ours);
    outln!(
        "removed {} namespaces and stopped {} processes",
        s.namespaces.len(),
        s.pids.len()
    )?;
    match removed {
        Ok(Some(path)) => outln!("removed context `{CONTEXT}` from {}", path.display())?,
        Ok(None) => {}
        Err(e) => eprintln!("warning: context `{CONTEXT}` not removed: {e}"),
    }
    Ok(())
}

/// `sluice testbed demo`: up, real traffic, report, down.
pub fn demo(
    spec: &Path,
    hosts: u32,
    dir: &Path,
    fw_state: Option<&str>,
    (store, controllers): (StoreKind, u32),
) -> Result<(), CliError> {
    guard(dir)?;
    check_readable_by_others(dir)?;
    // The firewall's state mode, if asked (the demo shows `cached`: leases and
    // the flow cache), written as a variant of the spec next to the lab.
    let variant;
    let spec = match fw_state {
        Some(state) => {
            let text = std::fs::read_to_string(spec).map_err(CliError::io(spec))?;
            let v = sluice_testbed::elasticity::variant_spec(&text, "fw", state, "hash", None)
                .map_err(CliError::variant(spec))?;
            // Refuse a bad `--fw-state` before anything is created.
            sluice_tenant::TenantSpec::parse(&v, &spec.display().to_string(), None)
                .map_err(|e| CliError::flag("fw-state", format!("{state}: {e}")))?;
            std::fs::create_dir_all(dir).map_err(CliError::io(dir))?;
            variant = dir.join("tenant.yaml");
            std::fs::write(&variant, v).map_err(CliError::io(&variant))?;
            variant.as_path()
        }
        None => spec,
    };
    let t = Instant::now();
    let mut opts = options(spec, hosts, dir, true)?;
    opts.store = store;
    opts.controllers = controllers;
    let lab = Lab::up(&opts)?;
    print_state(lab.state())?;
    outln!("up in {:.1} s\n", t.elapsed().as_secs_f64())?;
    let report = scenario::figure4(&lab)?;
    for c in &report.checks {
        outln!(
            "[{}] {}\n       {}",
            if c.ok { " ok " } else { "FAIL" },
            c.name,
            c.detail
        )?;
    }
    outln!()?;
    let status = lab
        .state()
        .http()
        .get(&format!("{}/v1/instances", lab.state().controller))
        .set("Authorization", &lab.state().bearer())
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .unwrap_or_default();
    if !status.is_empty() {
        outln!("NF instances (controller's view): {status}")?;
    }
    let ok = report.ok();
    drop(lab);
    outln!("testbed removed")?;
    if ok {
        outln!("all {} checks passed", report.checks.len())?;
        Ok(())
    } else {
        Err(CliError::ChecksFailed {
            failed: report.checks.iter().filter(|c| !c.ok).count(),
            total: report.checks.len(),
            dir: dir.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn directories_others_cannot_enter_are_refused_naming_the_directory_and_the_fix() {
        // 0700, as `mktemp -d` makes it.
        let t = tempfile::tempdir().unwrap();
        chmod(t.path(), 0o700);
        let e = check_readable_by_others(t.path()).unwrap_err().to_string();
        assert!(e.contains(&t.path().display().to_string()), "{e}");
        assert!(e.contains("mode 0700") && e.contains("chmod o+rx"), "{e}");
        // A directory not made yet, under it: the parent is named.
        let sub = t.path().join("lab");
        let e = check_readable_by_others(&sub).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: mode 0700", t.path().display())),
            "{e}"
        );
        assert!(e.contains("parent"), "{e}");
        chmod(t.path(), 0o755);
        check_readable_by_others(t.path()).unwrap();
        check_readable_by_others(&sub).unwrap();
        // Traversal is enough: nginx opens files by name.
        chmod(t.path(), 0o711);
        check_readable_by_others(&sub).unwrap();
        std::fs::create_dir(&sub).unwrap();
        for (mode, ok) in [(0o700, false), (0o750, false), (0o701, true), (0o755, true)] {
            chmod(&sub, mode);
            let r = check_readable_by_others(&sub);
            assert_eq!(r.is_ok(), ok, "{mode:o}: {r:?}");
            if let Err(e) = r {
                assert!(e.to_string().contains(&format!("mode {mode:04o}")), "{e}");
            }
        }
        // A relative path is checked from the working directory up.
        check_readable_by_others(Path::new(".")).unwrap();
        chmod(t.path(), 0o755);
    }
}
