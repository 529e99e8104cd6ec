//! CoMb's consolidation in the running system (`sluice bench consolidation`,
//! issue 27): the Stratos Figure 4 tenant on a namespace testbed twice in one
//! run, once with its firewall and IPS as separate middleboxes and once with
//! them consolidated into one group (`consolidate:`, one pipeline per
//! instance), the same downloads through each; what the instances and the
//! agents spent on them, per gigabyte delivered, and the ratio of the
//! consolidated arm to the separate one.
//!
//! Consolidation saves in two places: inside the instance, the group parses
//! each packet once for both functions (CoMb's module reuse; `sluice bench
//! nf`'s shared against unshared chains measures it alone), and in the
//! switch, a packet crosses one instance instead of two, so one hop less of
//! agent forwarding and instance socket I/O per packet each way.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use sluice_testbed::lab::{Lab, LabOptions};

/// One arm.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `separate` or `consolidated`.
    pub arm: String,
    /// NF instance processes the tenant ran.
    pub instances: usize,
    /// Downloads that arrived whole, of those tried.
    pub downloads_ok: usize,
    /// Downloads tried.
    pub downloads: usize,
    /// Bytes delivered.
    pub bytes: u64,
    /// Wall-clock seconds of the downloads.
    pub seconds: f64,
    /// Delivered throughput, Mbit/s (downloads one after another).
    pub mbit_per_s: f64,
    /// CPU seconds the NF instance processes spent during the downloads.
    pub instance_cpu_s: f64,
    /// CPU seconds the agents spent during the downloads.
    pub agent_cpu_s: f64,
    /// CPU seconds of every NF instance process per GB delivered.
    pub instance_cpu_s_per_gb: f64,
    /// CPU seconds of every agent per GB delivered.
    pub agent_cpu_s_per_gb: f64,
    /// Their sum.
    pub total_cpu_s_per_gb: f64,
    /// `total_cpu_s_per_gb` against the first arm's.
    pub cpu_ratio: f64,
    /// `mbit_per_s` against the first arm's.
    pub throughput_ratio: f64,
    /// The load average when the arm started.
    pub load: String,
}

/// The path of the chain both arms change, as `figure4.yaml` writes it.
const WEST_B: &str = "path: [clients-west, http, fw, lb-b, web-b]";

/// The consolidated arm's spec: `fw` and `ips` in one group (west-to-b
/// crosses the IPS too, as every chain through a group crosses all of it).
/// The separate arm gets the same chains, so only the consolidation differs.
fn arms(text: &str) -> Result<(String, String), String> {
    if !text.contains(WEST_B) {
        return Err(format!(
            "the spec is not Stratos's Figure 4 (no `{WEST_B}`): the benchmark consolidates its fw and ips"
        ));
    }
    let separate = text.replace(WEST_B, "path: [clients-west, http, fw, ips, lb-b, web-b]");
    let consolidated =
        format!("{separate}consolidate:\n  - {{ name: edge, members: [fw, ips] }}\n");
    Ok((separate, consolidated))
}

/// Sum over the agents' `/metrics` of `sluice_instance_cpu_seconds_total`,
/// and how many instances it covers.
fn instance_cpu_s(lab: &Lab) -> Result<(f64, usize), String> {
    let st = lab.state();
    let mut total = 0.0;
    let mut n = 0;
    for h in &st.hosts {
        let text = st
            .http()
            .get(&format!("{}/metrics", h.api))
            .call()
            .map_err(|e| format!("GET {}/metrics: {e}", h.api))?
            .into_string()
            .map_err(|e| e.to_string())?;
        for l in text
            .lines()
            .filter(|l| l.starts_with("sluice_instance_cpu_seconds_total{"))
        {
            if let Some(v) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                total += v;
                n += 1;
            }
        }
    }
    Ok((total, n))
}

fn agents_cpu_s(lab: &Lab) -> f64 {
    lab.state()
        .hosts
        .iter()
        .filter_map(|h| lab.agent_pid(h.id))
        .map(|p| crate::process_cpu_s(&p.to_string()))
        .sum()
}

/// Runs both arms: a lab each, `downloads` downloads of the lab's 1 MiB
/// file from the east clients to web-a (through fw, ips, lb-a) one after
/// another. `progress` hears what runs.
pub fn run(
    sluice: &Path,
    spec: &Path,
    downloads: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Row>, String> {
    if downloads == 0 {
        return Err("--downloads must be at least 1".into());
    }
    let text = std::fs::read_to_string(spec).map_err(|e| format!("{}: {e}", spec.display()))?;
    let (separate, consolidated) = arms(&text)?;
    let mut rows: Vec<Row> = Vec::new();
    for (arm, text) in [("separate", separate), ("consolidated", consolidated)] {
        let load = crate::load_average();
        progress(&format!(
            "{arm}: {downloads} downloads; load average {load}"
        ));
        let dir =
            std::env::temp_dir().join(format!("sluice-bench-comb-{}-{arm}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let spec_path = dir.join("tenant.yaml");
        std::fs::write(&spec_path, &text).map_err(|e| e.to_string())?;
        let lab = Lab::up(&LabOptions {
            spec: spec_path,
            hosts: 3,
            dir: dir.clone(),
            sluice: sluice.to_path_buf(),
            sluiced: sluice.with_file_name("sluiced"),
            web: true,
            seawall: false,
            fabric_auth: true,
            store: Default::default(),
            subverted: Vec::new(),
            controllers: 1,
            topology: Default::default(),
            dataplane_threads: 1,
        })
        .map_err(|e| e.to_string())?;
        // One download first: connections, leases and caches warm up in
        // neither arm's measurement.
        let url = "http://10.10.1.100/blob";
        let fetch = |lab: &Lab| {
            sluice_testbed::scenario::curl(lab, "gateway", Some("198.51.100.10"), url, 20)
        };
        let size = fetch(&lab).map(|b| b.len()).unwrap_or(0);
        if size == 0 {
            return Err(format!("{arm}: the warm-up download failed"));
        }
        let (cpu_i0, _) = instance_cpu_s(&lab)?;
        let cpu_a0 = agents_cpu_s(&lab);
        let t0 = Instant::now();
        let mut ok = 0;
        let mut bytes = 0u64;
        for _ in 0..downloads {
            if let Some(b) = fetch(&lab) {
                if b.len() == size {
                    ok += 1;
                }
                bytes += b.len() as u64;
            }
        }
        let seconds = t0.elapsed().as_secs_f64();
        // Heartbeats carry the instances' CPU time every few ms; wait for one.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (cpu_i1, instances) = instance_cpu_s(&lab)?;
        let cpu_a1 = agents_cpu_s(&lab);
        drop(lab);
        let _ = std::fs::remove_dir_all(&dir);
        let gb = (bytes as f64 / 1e9).max(1e-12);
        let inst = (cpu_i1 - cpu_i0).max(0.0) / gb;
        let agent = (cpu_a1 - cpu_a0).max(0.0) / gb;
        let mbit = bytes as f64 * 8.0 / 1e6 / seconds.max(1e-9);
        let (cpu_ratio, throughput_ratio) = rows.first().map_or((1.0, 1.0), |b| {
            ((inst + agent) / b.total_cpu_s_per_gb, mbit / b.mbit_per_s)
        });
        rows.push(Row {
            arm: arm.to_string(),
            instances,
            downloads_ok: ok,
            downloads,
            bytes,
            seconds,
            mbit_per_s: mbit,
            instance_cpu_s: cpu_i1 - cpu_i0,
            agent_cpu_s: cpu_a1 - cpu_a0,
            instance_cpu_s_per_gb: inst,
            agent_cpu_s_per_gb: agent,
            total_cpu_s_per_gb: inst + agent,
            cpu_ratio,
            throughput_ratio,
            load,
        });
    }
    Ok(rows)
}

/// Prints [`run`]'s rows.
pub fn print(rows: &[Row]) {
    println!(
        "Figure 4, east clients -> web-a through fw, ips, lb-a: 1 MiB downloads one after another; \
         CPU per GB delivered; ratios against the separate arm"
    );
    println!(
        "arm           instances  ok/tried  Mbit/s  inst CPU s/GB  agent CPU s/GB  total s/GB  CPU ratio  tput ratio  load"
    );
    for r in rows {
        println!(
            "{:<13} {:>9}  {:>4}/{:<4} {:>7.1}  {:>13.2}  {:>14.2}  {:>10.2}  {:>9.2}  {:>10.2}  {}",
            r.arm,
            r.instances,
            r.downloads_ok,
            r.downloads,
            r.mbit_per_s,
            r.instance_cpu_s_per_gb,
            r.agent_cpu_s_per_gb,
            r.total_cpu_s_per_gb,
            r.cpu_ratio,
            r.throughput_ratio,
            r.load
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arms_differ_only_by_the_group() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/tenant/figure4.yaml"
        ))
        .unwrap();
        let (sep, con) = arms(&text).unwrap();
        assert!(con.starts_with(&sep));
        assert!(con.ends_with("members: [fw, ips] }\n"));
        let reg = sluice_builtin::registry();
        let s = sluice_tenant::TenantSpec::parse(&sep, "sep", Some(&reg)).unwrap();
        let c = sluice_tenant::TenantSpec::parse(&con, "con", Some(&reg)).unwrap();
        assert!(s.groups.is_empty() && c.groups.len() == 1);
        assert_eq!(s.chains.len(), c.chains.len());
        assert!(arms("tenant: x\n")
            .unwrap_err()
            .contains("not Stratos's Figure 4"));
    }
}
