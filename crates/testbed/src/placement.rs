//! Issue 27's placement experiment (Stratos §7.2 on the namespace testbed):
//! does placing and splitting by the network serve more when the network
//! between racks is the bottleneck?
//!
//! Four hosts in two racks whose uplinks to the spine are limited with `tc`
//! ([`Lab::limit_rack_uplinks`]); the clients `c1`, `c2` in one rack, the web
//! servers `w1` in the clients' rack and `w2`, `w3` in the other; a chain of
//! three middleboxes of two instances each between them
//! (`examples/experiments/placement.yaml`). Two arms, each on a lab of its
//! own, alternating: **today** (`least-loaded` placement, `uniform`
//! distribution) and **aware** (`rack-aware` placement, `network-aware`
//! distribution with the uplinks declared). `least-loaded` packs (best fit)
//! from the lowest host id whatever the racks, so where the clients are
//! decides whether it is lucky: two layouts, **near** (the clients in r1,
//! hosts 1 and 2, where it packs) and **far** (the clients in r2). In each, the
//! clients download the 1 MiB blob from every server in closed loops (the
//! served throughput: bytes of the downloads completed in the window) while
//! each client also fetches the small index page in a loop (the request
//! latency), first with the uplinks limited, then without, each on a lab of
//! its own: the aware arm's controller is told what the uplinks carry (the
//! limit, or a 10 Gbit/s uplink when there is none), as an operator would.
//! The bytes that crossed the uplinks come from the rack links' counters.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::chaos::median;
use crate::isolation::{finish_by, spawn_in};
use crate::lab::{other, Lab, LabError, LabOptions, Topology};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementOptions {
    /// Each rack uplink's rate when limited, Mbit/s each way.
    pub uplink_mbit: u32,
    /// What the aware arm's controller is told a rack uplink carries when
    /// it is not limited, Mbit/s: a 10 Gbit/s uplink, above anything this
    /// testbed pushes through a veth pair.
    pub free_uplink_mbit: u32,
    /// The aware arm's `uplink_target` (None: the controller's default).
    pub uplink_target: Option<f64>,
    /// The aware arm's `distribution_classes`: a split per rack of servers.
    pub classes: bool,
    /// The uplinks' queues, KiB.
    pub queue_kb: u32,
    /// Seconds of load before the window (the aware arm's controller solves
    /// its split from measured traffic every 5 s).
    pub warmup: u32,
    /// Seconds measured.
    pub seconds: u32,
    /// Rounds (each runs both arms, today first).
    pub rounds: u32,
    /// Download loops per (client, server) pair.
    pub loops: usize,
    /// Where the VMs are, each layout in turn.
    pub layouts: Vec<Layout>,
    /// Every agent's forwarding threads, in both arms (a host that runs
    /// a whole chain can use more than one core).
    pub dataplane_threads: u32,
}

impl Default for PlacementOptions {
    fn default() -> PlacementOptions {
        PlacementOptions {
            uplink_mbit: 50,
            free_uplink_mbit: 10_000,
            uplink_target: None,
            classes: true,
            queue_kb: 256,
            warmup: 20,
            seconds: 15,
            rounds: 1,
            loops: 2,
            layouts: vec![Layout::Near, Layout::Far],
            dataplane_threads: 2,
        }
    }
}

/// Where the VMs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Layout {
    /// Clients in r1 (hosts 1-2), where `least-loaded` packs the instances.
    Near,
    /// Clients in r2 (hosts 3-4).
    Far,
}

impl Layout {
    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Near => "near",
            Layout::Far => "far",
        }
    }

    /// Parses `near,far`.
    pub fn parse_list(s: &str) -> Result<Vec<Layout>, LabError> {
        let mut out = Vec::new();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            out.push(match p {
                "near" => Layout::Near,
                "far" => Layout::Far,
                x => return Err(other(format!("unknown layout `{x}` (near, far)"))),
            });
        }
        if out.is_empty() {
            return Err(other("name at least one layout (near, far)"));
        }
        Ok(out)
    }
}

/// One arm: the controller's placement and distribution settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Arm {
    /// `least-loaded` placement, `uniform` distribution.
    Today,
    /// `rack-aware` placement, `network-aware` distribution.
    Aware,
}

impl Arm {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Today => "today",
            Arm::Aware => "aware",
        }
    }
}

/// Where each VM of the experiment's spec runs.
pub fn vm_hosts(layout: Layout) -> BTreeMap<String, u32> {
    let hosts = match layout {
        Layout::Near => [("c1", 1), ("c2", 2), ("w1", 2), ("w2", 3), ("w3", 4)],
        Layout::Far => [("c1", 4), ("c2", 3), ("w1", 3), ("w2", 2), ("w3", 1)],
    };
    hosts.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The lab's topology for `arm`: two racks, the VMs pinned, the arm's
/// controller settings (the aware arm's declare the uplinks as `limited` or
/// not).
pub fn topology(arm: Arm, layout: Layout, limited: bool, o: &PlacementOptions) -> Topology {
    let mut controller = BTreeMap::new();
    match arm {
        Arm::Today => {
            controller.insert("placement".into(), "least-loaded".into());
            controller.insert("distribution".into(), "uniform".into());
        }
        Arm::Aware => {
            controller.insert("placement".into(), "rack-aware".into());
            controller.insert("distribution".into(), "network-aware".into());
            let m = if limited {
                o.uplink_mbit
            } else {
                o.free_uplink_mbit
            };
            controller.insert("rack_uplink".into(), format!("r1={m},r2={m}"));
            if let Some(t) = o.uplink_target {
                controller.insert("uplink_target".into(), t.to_string());
            }
            controller.insert("distribution_classes".into(), o.classes.to_string());
        }
    }
    Topology {
        racks: 2,
        vm_hosts: vm_hosts(layout),
        controller,
    }
}

/// Where an instance ran and what share of its middlebox it took.
#[derive(Debug, Clone, Serialize)]
pub struct Placed {
    /// `tenant/middlebox/k`.
    pub name: String,
    /// Host id.
    pub host: u32,
    /// Its rack.
    pub rack: Option<String>,
    /// Its share of the middlebox's hash space.
    pub share: Option<f64>,
}

/// One measured window.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// The layout.
    pub layout: Layout,
    /// The arm.
    pub arm: Arm,
    /// Round (from 1).
    pub round: u32,
    /// Whether the uplinks were limited.
    pub limited: bool,
    /// Bytes of the downloads completed in the window, Mbit/s.
    pub served_mbps: f64,
    /// Downloads completed in the window.
    pub downloads: usize,
    /// Bytes that crossed the rack uplinks in the window, per byte served.
    pub crossing_per_byte: f64,
    /// Bytes that crossed the uplinks, MB.
    pub crossing_mb: f64,
    /// Small requests completed in the window.
    pub requests: usize,
    /// Their median time, ms.
    pub p50_ms: f64,
    /// Their 99th percentile, ms.
    pub p99_ms: f64,
    /// Requests that failed (curl's exit status).
    pub failed: usize,
}

/// Everything measured.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementReport {
    /// The options.
    pub options: PlacementOptions,
    /// Every window, in the order run.
    pub windows: Vec<Window>,
    /// Each layout and arm's placement as the controller reported it (its
    /// last lab), by `layout/arm`.
    pub placements: BTreeMap<String, Vec<Placed>>,
}

impl PlacementReport {
    /// Median served throughput of `arm` in `layout`, uplinks limited or not.
    pub fn median_served(&self, layout: Layout, arm: Arm, limited: bool) -> Option<f64> {
        median(
            self.windows
                .iter()
                .filter(|w| w.layout == layout && w.arm == arm && w.limited == limited)
                .map(|w| w.served_mbps)
                .collect(),
        )
    }

    /// aware / today, medians, in `layout`, limited or not.
    pub fn ratio(&self, layout: Layout, limited: bool) -> Option<f64> {
        let t = self.median_served(layout, Arm::Today, limited)?;
        let a = self.median_served(layout, Arm::Aware, limited)?;
        (t > 0.0).then(|| a / t)
    }
}

/// The `q` quantile of sorted `xs` (nearest rank).
fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let i = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1;
    xs[i]
}

fn unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A closed loop of `curl`s in VM `vm` for `secs` seconds: one line per
/// request, `SIZE TIME_TOTAL EXIT UNIX_S`.
fn curl_loop(lab: &Lab, vm: &str, url: &str, secs: u32) -> Result<Child, LabError> {
    let script = format!(
        "end=$(( $(date +%s) + {secs} )); \
         while [ $(date +%s) -lt $end ]; do \
           r=$(curl -s -o /dev/null --max-time 10 -w '%{{size_download}} %{{time_total}}' {url}); \
           echo \"$r $? $(date +%s.%N)\"; \
         done"
    );
    spawn_in(lab, vm, &["sh", "-c", &script])
}

/// Parses a [`curl_loop`]'s lines: (bytes, seconds, ok, finished at).
fn parse_loop(out: &str) -> Vec<(u64, f64, bool, f64)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 4 {
                return None;
            }
            Some((
                f[0].parse().ok()?,
                f[1].parse().ok()?,
                f[2] == "0",
                f[3].parse().ok()?,
            ))
        })
        .collect()
}

fn addr(lab: &Lab, vm: &str) -> Result<String, LabError> {
    lab.state()
        .vm(vm)
        .and_then(|v| v.addrs.first().cloned())
        .ok_or_else(|| other(format!("the spec has no VM `{vm}`")))
}

/// One window on a running lab.
pub fn window(
    lab: &Lab,
    layout: Layout,
    arm: Arm,
    round: u32,
    limited: bool,
    o: &PlacementOptions,
) -> Result<Window, LabError> {
    lab.limit_rack_uplinks(limited.then_some(o.uplink_mbit), o.queue_kb)?;
    let total = o.warmup + o.seconds;
    let mut loops = Vec::new();
    for c in ["c1", "c2"] {
        for w in ["w1", "w2", "w3"] {
            let url = format!("http://{}/blob", addr(lab, w)?);
            for _ in 0..o.loops.max(1) {
                loops.push((false, curl_loop(lab, c, &url, total)?));
            }
        }
        // Small requests, to each server in turn.
        let urls: Vec<String> = ["w1", "w2", "w3"]
            .iter()
            .map(|w| addr(lab, w).map(|a| format!("http://{a}/index.html")))
            .collect::<Result<_, _>>()?;
        for u in urls {
            loops.push((true, curl_loop(lab, c, &u, total)?));
        }
    }
    std::thread::sleep(Duration::from_secs(u64::from(o.warmup)));
    let from = unix_s();
    let before = lab.rack_uplink_bytes()?;
    std::thread::sleep(Duration::from_secs(u64::from(o.seconds)));
    let after = lab.rack_uplink_bytes()?;
    let to = unix_s();
    let by = Instant::now() + Duration::from_secs(20);
    let mut bytes = 0u64;
    let mut downloads = 0usize;
    let mut times = Vec::new();
    let mut failed = 0usize;
    for (small, c) in loops {
        let out = finish_by(c, by, "curl loop")?;
        for (size, secs, ok, at) in parse_loop(&out) {
            if at < from || at > to {
                continue;
            }
            if small {
                if ok {
                    times.push(secs * 1e3);
                } else {
                    failed += 1;
                }
            } else if ok {
                bytes += size;
                downloads += 1;
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let crossed: u64 = before
        .iter()
        .zip(&after)
        .map(|(b, a)| a.1.saturating_sub(b.1))
        .sum();
    let secs = (to - from).max(1e-3);
    Ok(Window {
        layout,
        arm,
        round,
        limited,
        served_mbps: bytes as f64 * 8.0 / 1e6 / secs,
        downloads,
        crossing_per_byte: if bytes > 0 {
            crossed as f64 / bytes as f64
        } else {
            0.0
        },
        crossing_mb: crossed as f64 / 1e6,
        requests: times.len(),
        p50_ms: quantile(&times, 0.5),
        p99_ms: quantile(&times, 0.99),
        failed,
    })
}

/// The controller's placement of the lab's instances.
pub fn placement(lab: &Lab) -> Result<Vec<Placed>, LabError> {
    let url = format!("{}/v1/placement", lab.state().controller);
    let v: serde_json::Value = lab
        .state()
        .http()
        .get(&url)
        .set("Authorization", &lab.state().bearer())
        .call()
        .map_err(|e| other(format!("GET {url}: {e}")))?
        .into_json()
        .map_err(|e| other(format!("GET {url}: {e}")))?;
    let list = v
        .as_array()
        .or_else(|| v.get("placement").and_then(|p| p.as_array()))
        .cloned()
        .unwrap_or_default();
    Ok(list
        .iter()
        .map(|p| Placed {
            name: p["name"].as_str().unwrap_or_default().to_string(),
            host: p["host"].as_u64().unwrap_or_default() as u32,
            rack: p["rack"].as_str().map(str::to_string),
            share: p["share"].as_f64(),
        })
        .collect())
}

/// Runs every round: a lab per arm, round and uplink setting (limited, then
/// unlimited). `base` gives everything but the topology (spec, binaries,
/// directory).
pub fn run(
    base: &LabOptions,
    o: &PlacementOptions,
    progress: impl Fn(&str),
) -> Result<PlacementReport, LabError> {
    let mut windows = Vec::new();
    let mut placements = BTreeMap::new();
    for round in 1..=o.rounds.max(1) {
        for (layout, arm) in o
            .layouts
            .iter()
            .flat_map(|l| [(*l, Arm::Today), (*l, Arm::Aware)])
        {
            for limited in [true, false] {
                let uplinks = if limited {
                    format!("at {} Mbit/s", o.uplink_mbit)
                } else {
                    "unlimited".to_string()
                };
                let key = format!(
                    "{}/{}/{}",
                    layout.name(),
                    arm.name(),
                    if limited { "limited" } else { "free" }
                );
                progress(&format!("round {round}: testbed for {key} ..."));
                let opts = LabOptions {
                    hosts: 4,
                    web: true,
                    topology: topology(arm, layout, limited, o),
                    dataplane_threads: o.dataplane_threads,
                    ..base.clone()
                };
                let lab = Lab::up(&opts)?;
                progress(&format!(
                    "round {round}, {key}, uplinks {uplinks}: {} s of load",
                    o.warmup + o.seconds
                ));
                windows.push(window(&lab, layout, arm, round, limited, o)?);
                // The final shares, after the load.
                placements.insert(key, placement(&lab)?);
                drop(lab);
            }
        }
    }
    Ok(PlacementReport {
        options: o.clone(),
        windows,
        placements,
    })
}

/// Prints a report.
pub fn print(r: &PlacementReport) {
    println!(
        "{:<6} {:<6} {:>5} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9} {:>6}",
        "layout",
        "arm",
        "round",
        "uplinks",
        "served",
        "downloads",
        "crossing",
        "requests",
        "p50",
        "p99",
        "failed"
    );
    for w in &r.windows {
        println!(
            "{:<6} {:<6} {:>5} {:>9} {:>6.1} Mb/s {:>9} {:>6.2} B/B {:>9} {:>6.1} ms {:>6.1} ms {:>6}",
            w.layout.name(),
            w.arm.name(),
            w.round,
            if w.limited {
                format!("{} Mb/s", r.options.uplink_mbit)
            } else {
                "free".to_string()
            },
            w.served_mbps,
            w.downloads,
            w.crossing_per_byte,
            w.requests,
            w.p50_ms,
            w.p99_ms,
            w.failed
        );
    }
    for (key, ps) in &r.placements {
        let line: Vec<String> = ps
            .iter()
            .map(|p| {
                let mb = p.name.split('/').nth(1).unwrap_or(p.name.as_str());
                format!(
                    "{mb}@h{}({}{})",
                    p.host,
                    p.rack.as_deref().unwrap_or("-"),
                    p.share
                        .map_or(String::new(), |s| format!(" {:.0}%", s * 100.0))
                )
            })
            .collect();
        println!("placement {key}: {}", line.join(" "));
    }
    for layout in &r.options.layouts {
        for limited in [true, false] {
            if let Some(x) = r.ratio(*layout, limited) {
                println!(
                    "served, aware / today (medians), {} layout, uplinks {}: {x:.2}",
                    layout.name(),
                    if limited { "limited" } else { "free" },
                );
            }
        }
    }
}

/// The spec the experiment uses.
pub fn default_spec() -> &'static Path {
    Path::new("examples/experiments/placement.yaml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_lines_parse_and_junk_is_skipped() {
        let out = "1048576 0.120 0 1700000000.5\n0 10.001 28 1700000001.0\ngarbage\n";
        let v = parse_loop(out);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], (1_048_576, 0.12, true, 1_700_000_000.5));
        assert!(!v[1].2);
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.5), 50.0);
        assert_eq!(quantile(&xs, 0.99), 99.0);
        assert_eq!(quantile(&[], 0.99), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn the_arms_differ_only_in_their_controller_settings() {
        let o = PlacementOptions::default();
        let (t, a) = (
            topology(Arm::Today, Layout::Near, true, &o),
            topology(Arm::Aware, Layout::Near, true, &o),
        );
        assert_eq!(t.racks, 2);
        assert_eq!(t.vm_hosts, a.vm_hosts);
        assert_eq!(t.controller["distribution"], "uniform");
        assert_eq!(a.controller["distribution"], "network-aware");
        assert_eq!(a.controller["rack_uplink"], "r1=50,r2=50");
        // Free uplinks are declared as what they are.
        let free = topology(Arm::Aware, Layout::Near, false, &o);
        assert_eq!(free.controller["rack_uplink"], "r1=10000,r2=10000");
        assert!(!topology(Arm::Today, Layout::Near, false, &o)
            .controller
            .contains_key("rack_uplink"));
        assert!(!free.controller.contains_key("uplink_target"));
        let half = PlacementOptions {
            uplink_target: Some(0.5),
            ..o.clone()
        };
        assert_eq!(
            topology(Arm::Aware, Layout::Far, true, &half).controller["uplink_target"],
            "0.5"
        );
        // Classes by default; off when asked.
        assert_eq!(a.controller["distribution_classes"], "true");
        let one = PlacementOptions {
            classes: false,
            ..o.clone()
        };
        assert_eq!(
            topology(Arm::Aware, Layout::Near, true, &one).controller["distribution_classes"],
            "false"
        );
        // Clients in one rack (r1 near, r2 far), servers in both, w1 with
        // the clients.
        for (layout, rack) in [(Layout::Near, 1), (Layout::Far, 2)] {
            let racks: BTreeMap<String, u32> = vm_hosts(layout)
                .into_iter()
                .map(|(vm, h)| (vm, t.rack_of(h, 4).unwrap()))
                .collect();
            assert_eq!((racks["c1"], racks["c2"], racks["w1"]), (rack, rack, rack));
            assert_eq!((racks["w2"], racks["w3"]), (3 - rack, 3 - rack));
        }
        assert_eq!(Layout::parse_list("near, far").unwrap().len(), 2);
        assert!(Layout::parse_list("middle").is_err());
        assert!(Layout::parse_list("").is_err());
        assert_eq!(t.rack_of(3, 4), Some(2));
        assert_eq!(Topology::default().rack_of(3, 4), None);
    }
}
