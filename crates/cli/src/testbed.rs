//! `sluice testbed up | down | demo`: a whole deployment on this machine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice_testbed::lab::{Lab, LabOptions, LabState};
use sluice_testbed::scenario;

/// Where `up`, `down` and `demo` keep the lab's files unless told otherwise.
pub const DEFAULT_DIR: &str = "/tmp/sluice-testbed";

fn options(spec: &Path, hosts: u32, dir: &Path, web: bool) -> Result<LabOptions, String> {
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

/// `sluice testbed up`.
pub fn up(spec: &Path, hosts: u32, dir: &Path, web: bool) -> Result<(), String> {
    if dir.join("testbed.json").exists() {
        return Err(format!(
            "a testbed is already up in {} (run `sluice testbed down --dir {}` first)",
            dir.display(),
            dir.display()
        ));
    }
    let t = Instant::now();
    let lab = Lab::up(&options(spec, hosts, dir, web)?).map_err(|e| e.to_string())?;
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
pub fn demo(spec: &Path, hosts: u32, dir: &Path) -> Result<(), String> {
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
pub fn failover(
    spec: &Path,
    dir: &Path,
    o: &sluice_testbed::experiments::FailoverOptions,
    json: bool,
) -> Result<(), String> {
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
