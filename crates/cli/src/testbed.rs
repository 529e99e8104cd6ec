//! `sluice testbed up | down | demo`: a whole deployment on this machine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice_testbed::lab::{Lab, LabOptions, LabState};
use sluice_testbed::scenario;

/// Where `up`, `down` and `demo` keep the lab's files unless told otherwise.
pub const DEFAULT_DIR: &str = "/tmp/sluice-testbed";

fn options(spec: &Path, hosts: u32, dir: &Path, web: bool) -> Result<LabOptions, String> {
    options_with(spec, hosts, dir, web, false)
}

/// Lab options with the agents' Seawall rate control on or off.
pub fn options_with(
    spec: &Path,
    hosts: u32,
    dir: &Path,
    web: bool,
    seawall: bool,
) -> Result<LabOptions, String> {
    let sluice = std::env::current_exe().map_err(|e| format!("cannot find own binary: {e}"))?;
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
    })
}

fn print_state(s: &LabState) {
    println!("tenant {} on {} hosts", s.tenant, s.hosts.len());
    println!("  controller  {}", s.controller);
    println!("  state store {}", s.store);
    for h in &s.hosts {
        println!(
            "  host {}: netns {}, underlay {}, agent {}",
            h.id, h.netns, h.underlay, h.api
        );
    }
    for v in &s.vms {
        println!(
            "  vm {:<8} on host {}: netns {}, {}",
            v.name,
            v.host,
            v.netns,
            v.addrs.join(", ")
        );
    }
}

/// Refuses a directory that already holds a running testbed, and removes the lab
/// in `dir` if this process is interrupted (SIGINT/SIGTERM/SIGHUP): a long demo
/// or experiment stopped half way leaves nothing behind.
fn guard(dir: &Path) -> Result<(), String> {
    if dir.join("testbed.json").exists() {
        return Err(format!(
            "a testbed is already up in {} (run `sluice testbed down --dir {}` first)",
            dir.display(),
            dir.display()
        ));
    }
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| format!("cannot install signal handlers: {e}"))?;
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

/// `sluice testbed up`.
pub fn up(spec: &Path, hosts: u32, dir: &Path, web: bool, seawall: bool) -> Result<(), String> {
    if dir.join("testbed.json").exists() {
        return Err(format!(
            "a testbed is already up in {} (run `sluice testbed down --dir {}` first)",
            dir.display(),
            dir.display()
        ));
    }
    let t = Instant::now();
    let lab = Lab::up(&options_with(spec, hosts, dir, web, seawall)?).map_err(|e| e.to_string())?;
    let state = lab.keep();
    print_state(&state);
    println!(
        "up in {:.1} s; files in {}",
        t.elapsed().as_secs_f64(),
        state.dir.display()
    );
    println!(
        "try:  export SLUICE_CONTROLLER={}; sluice status",
        state.controller
    );
    println!(
        "      ip netns exec {} curl --interface 198.51.100.10 http://10.10.1.100/",
        state.vm("gateway").map(|v| v.netns.as_str()).unwrap_or("?")
    );
    println!("stop: sluice testbed down --dir {}", state.dir.display());
    Ok(())
}

/// `sluice testbed down`.
pub fn down(dir: &Path) -> Result<(), String> {
    let s = Lab::down_dir(dir).map_err(|e| e.to_string())?;
    println!(
        "removed {} namespaces and stopped {} processes",
        s.namespaces.len(),
        s.pids.len()
    );
    Ok(())
}

/// `sluice testbed demo`: up, real traffic, report, down.
pub fn demo(spec: &Path, hosts: u32, dir: &Path, fw_state: Option<&str>) -> Result<(), String> {
    guard(dir)?;
    // The firewall's state mode, if asked (the demo shows `cached`: leases and
    // the flow cache), written as a variant of the spec next to the lab.
    let variant;
    let spec = match fw_state {
        Some(state) => {
            let text =
                std::fs::read_to_string(spec).map_err(|e| format!("{}: {e}", spec.display()))?;
            let v = sluice_testbed::elasticity::variant_spec(&text, "fw", state, "hash", None)
                .map_err(|e| format!("{}: {e}", spec.display()))?;
            // Refuse a bad `--fw-state` before anything is created.
            sluice_tenant::TenantSpec::parse(&v, &spec.display().to_string(), None)
                .map_err(|e| format!("--fw-state {state}: {e}"))?;
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            variant = dir.join("tenant.yaml");
            std::fs::write(&variant, v).map_err(|e| format!("{}: {e}", variant.display()))?;
            variant.as_path()
        }
        None => spec,
    };
    let t = Instant::now();
    let lab = Lab::up(&options(spec, hosts, dir, true)?).map_err(|e| e.to_string())?;
    print_state(lab.state());
    println!("up in {:.1} s\n", t.elapsed().as_secs_f64());
    let report = scenario::figure4(&lab).map_err(|e| e.to_string())?;
    for c in &report.checks {
        println!(
            "[{}] {}\n       {}",
            if c.ok { " ok " } else { "FAIL" },
            c.name,
            c.detail
        );
    }
    println!();
    let status = ureq::get(&format!("{}/v1/instances", lab.state().controller))
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .unwrap_or_default();
    if !status.is_empty() {
        println!("NF instances (controller's view): {status}");
    }
    let ok = report.ok();
    drop(lab);
    println!("testbed removed");
    if ok {
        println!("all {} checks passed", report.checks.len());
        Ok(())
    } else {
        Err(format!(
            "{} of {} checks failed (logs were in {})",
            report.checks.iter().filter(|c| !c.ok).count(),
            report.checks.len(),
            PathBuf::from(dir).display()
        ))
    }
}

/// `sluice experiment failover`.
/// `sluice experiment isolation`: the contests on a lab per setting.
pub fn isolation(
    spec: &Path,
    dir: &Path,
    settings: &str,
    o: sluice_testbed::isolation::IsolationOptions,
    json: bool,
) -> Result<(), String> {
    use sluice_testbed::isolation as iso;
    let mut on = Vec::new();
    for s in settings.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match s {
            "off" => on.push(false),
            "on" => on.push(true),
            x => return Err(format!("--seawall: `{x}` is neither `off` nor `on`")),
        }
    }
    if on.is_empty() {
        return Err("--seawall: name at least one of off, on".into());
    }
    if !(1..=sluice_tenant::MAX_WEIGHT).contains(&o.victim_weight) {
        return Err(format!(
            "--victim-weight: {} is not from 1 to {}",
            o.victim_weight,
            sluice_tenant::MAX_WEIGHT
        ));
    }
    guard(dir)?;
    // A weighted victim gets a service of its own, in a copy of the spec.
    let weighted;
    let spec = if o.victim_weight == 1 {
        spec
    } else {
        let text = std::fs::read_to_string(spec)
            .map_err(|e| format!("cannot read {}: {e}", spec.display()))?;
        let text = iso::weighted_spec(&text, o.victim_weight).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        weighted = dir.join("isolation-spec.yaml");
        std::fs::write(&weighted, text).map_err(|e| format!("{}: {e}", weighted.display()))?;
        weighted.as_path()
    };
    let mut contests = Vec::new();
    for sw in on {
        if !json {
            eprintln!("testbed with Seawall {} ...", if sw { "on" } else { "off" });
        }
        let lab = Lab::up(&options_with(spec, 3, dir, false, sw)?).map_err(|e| e.to_string())?;
        contests.extend(iso::contests(&lab, &o).map_err(|e| e.to_string())?);
        drop(lab);
    }
    let r = iso::IsolationReport {
        options: o,
        contests,
    };
    if json {
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
    } else {
        iso::print(&r);
    }
    Ok(())
}

pub fn failover(
    spec: &Path,
    dir: &Path,
    o: &sluice_testbed::experiments::FailoverOptions,
    json: bool,
) -> Result<(), String> {
    guard(dir)?;
    let lab = Lab::up(&options(spec, 3, dir, true)?).map_err(|e| e.to_string())?;
    if !json {
        print_state(lab.state());
        println!(
            "{} downloads of {} KiB at {}/s each; killing {}/{}/0 after {:?}",
            o.downloads,
            o.size / 1024,
            o.rate,
            lab.state().tenant,
            o.middlebox,
            o.kill_after
        );
    }
    let r = sluice_testbed::experiments::failover(&lab, o).map_err(|e| e.to_string())?;
    drop(lab);
    if json {
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
    } else {
        sluice_testbed::experiments::print_failover(&r);
    }
    Ok(())
}

/// `sluice experiment elasticity`: one lab per variant, brought up from the base
/// spec with the middlebox's state and affinity set, run, and torn down.
pub fn elasticity(
    spec: &Path,
    variants: &str,
    capacity_mbps: Option<f64>,
    dir: &Path,
    out: &Path,
    o: &sluice_testbed::elasticity::ElasticityOptions,
    json: bool,
) -> Result<(), String> {
    use sluice_testbed::elasticity as el;
    let base = std::fs::read_to_string(spec)
        .map_err(|e| format!("cannot read {}: {e}", spec.display()))?;
    let mut parsed = Vec::new();
    for v in variants.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let (state, affinity) = v
            .split_once('/')
            .filter(|(s, a)| {
                ["shared", "cached", "local"].contains(s) && ["hash", "pinned"].contains(a)
            })
            .ok_or_else(|| {
                format!(
                    "--variants: `{v}` is not state/affinity (shared|cached|local / hash|pinned)"
                )
            })?;
        let text = el::variant_spec(&base, &o.middlebox, state, affinity, capacity_mbps)
            .map_err(|e| format!("{}: {e}", spec.display()))?;
        parsed.push((v.to_string(), text));
    }
    if parsed.is_empty() {
        return Err("--variants: no variant given".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Once: each variant's lab lives in `dir` in turn, and an interruption removes
    // whichever is up.
    guard(dir)?;
    if !json {
        println!(
            "{} groups of {} downloads at {} KiB/s, {:?} apart, each {:?}; {} out at {:?}, in at {:?}{}",
            o.steps,
            o.flows_per_step,
            o.rate_kib,
            o.step,
            o.duration(),
            o.middlebox,
            o.scale_out_at(),
            o.scale_in_at(),
            capacity_mbps
                .map(|c| format!("; {c} Mbit/s per instance"))
                .unwrap_or_default()
        );
    }
    let mut runs = Vec::new();
    for (label, text) in parsed {
        let file = dir.join(format!("elasticity-{}.yaml", label.replace('/', "-")));
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
        let lab = Lab::up(&options(&file, 3, dir, true)?).map_err(|e| e.to_string())?;
        if !json {
            println!("{label}: lab up, running");
        }
        let r = sluice_testbed::elasticity::elasticity(&lab, o, &label).map_err(|e| e.to_string());
        drop(lab);
        runs.push(r?);
    }
    el::write_outputs(&runs, out).map_err(|e| format!("{}: {e}", out.display()))?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&runs).map_err(|e| e.to_string())?
        );
    } else {
        el::print_elasticity(&runs);
        println!("wrote {}/elasticity.{{csv,svg,json}}", out.display());
    }
    Ok(())
}

/// `sluice experiment scaling`: one lab per strategy.
pub fn scaling(
    spec: &Path,
    strategies: &str,
    phases: &str,
    dir: &Path,
    out: &Path,
    mut o: sluice_testbed::scaling::ScalingOptions,
    json: bool,
) -> Result<(), String> {
    use sluice_testbed::scaling as sc;
    let secs: Vec<u64> = phases
        .split(',')
        .map(|p| p.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("--phases: `{phases}` is not three whole seconds, e.g. 30,100,60"))?;
    let [ramp, hold, after] = secs[..] else {
        return Err(format!(
            "--phases: `{phases}` is not three whole seconds, e.g. 30,100,60"
        ));
    };
    o.ramp = std::time::Duration::from_secs(ramp);
    o.hold = std::time::Duration::from_secs(hold);
    o.after = std::time::Duration::from_secs(after);
    let list: Vec<&str> = strategies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|s| !["greedy", "none", "all"].contains(s)) {
        return Err(format!("--strategies: `{bad}` is not greedy, none or all"));
    }
    if list.is_empty() {
        return Err("--strategies: none given".into());
    }
    if !["reported", "handshake_ms"].contains(&o.metric.as_str()) {
        return Err(format!(
            "--metric: `{}` is not reported or handshake_ms",
            o.metric
        ));
    }
    if !(0.0..1.0).contains(&o.settle) {
        return Err(format!("--settle: {} is not in [0, 1)", o.settle));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    guard(dir)?;
    if !json {
        println!(
            "{} -> {} req/s over {ramp} s, {hold} s at the peak, then {} req/s for {after} s; {} B objects",
            o.rate_start, o.rate_peak, o.rate_after, o.object
        );
    }
    let mut runs = Vec::new();
    for s in list {
        let lab = Lab::up(&options(spec, 3, dir, true)?).map_err(|e| e.to_string())?;
        if !json {
            println!("{s}: lab up, running");
        }
        let r = sc::scaling(&lab, &o, s).map_err(|e| e.to_string());
        drop(lab);
        runs.push(r?);
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    std::fs::write(out.join("scaling.csv"), sc::csv(&runs))
        .and_then(|_| std::fs::write(out.join("scaling.svg"), sc::svg(&runs)))
        .and_then(|_| {
            std::fs::write(
                out.join("scaling.json"),
                serde_json::to_string_pretty(&runs).unwrap_or_default(),
            )
        })
        .map_err(|e| format!("{}: {e}", out.display()))?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&runs).map_err(|e| e.to_string())?
        );
    } else {
        sc::print_scaling(&runs);
        println!("wrote {}/scaling.{{csv,svg,json}}", out.display());
    }
    Ok(())
}
