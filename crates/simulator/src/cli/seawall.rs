//! Seawall's reproduction: the share figures and UDP-flood / many-flow experiments.

use super::*;

pub(super) fn secs_to_ns(s: f64, what: &str) -> Result<u64, SimError> {
    if !(s.is_finite() && (0.0..1e6).contains(&s)) {
        return Err(SimError::Config(format!(
            "{what}: {s} is not a number of seconds"
        )));
    }
    Ok((s * 1e9).round() as u64)
}

/// What `sluice-sim seawall` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SeawallPlan {
    /// Seeds the order of arrivals within a step.
    pub seed: u64,
    /// Bottleneck rates, bits per second.
    pub capacities_bps: Vec<u64>,
    /// Simulated time per run, ns.
    pub duration_ns: u64,
    /// Warm-up per run, ns.
    pub warmup_ns: u64,
    /// Seawall's parameters.
    pub seawall: sluice_seawall::Config,
    /// Bottleneck queue, bytes (None: [`LinkConfig::new`](crate::seawall::LinkConfig::new)'s).
    pub queue_bytes: Option<u64>,
}

/// Flows of Fig. 1's selfish VM.
pub(super) const SEAWALL_FIG1_K: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// Flows in each of Fig. 2's three VMs of the large tenant.
pub(super) const SEAWALL_FIG2_FLOWS: [usize; 4] = [1, 2, 4, 8];
/// UDP floods of §3.1, as multiples of the link rate.
pub(super) const SEAWALL_UDP_TIMES: [u64; 2] = [2, 10];
/// Receiving hosts of the one VM of the many-destinations case.
pub(super) const SEAWALL_MANY_HOSTS: usize = 4;
/// VMs of the all-pairs tenant, each reaching as many hosts.
pub(super) const SEAWALL_ALL_PAIRS: usize = 3;

/// Runs the Seawall reproduction: Fig. 1 (one flow against k), §3.1 (TCP against a UDP
/// flood), Fig. 2 (VM-level shares of a 1-VM and a 3-VM tenant), work conservation and
/// the time a newcomer takes to get its share, each without and with Seawall; and VMs
/// sending to several hosts through the bottleneck (§3's rate per (senderVM, link)),
/// without Seawall and with a contender per destination or per link.
pub fn seawall_report(plan: &SeawallPlan) -> Result<NfaasReport, SimError> {
    use crate::seawall::{
        all_pairs_scenario, fig1_scenario, fig2_scenario, many_destinations_scenario,
        simulate_with_paths, udp_only_controlled_scenario, udp_scenario, LinkConfig, Outcome,
        Paths, Scenario, Vm,
    };
    if plan.capacities_bps.is_empty() || plan.capacities_bps.contains(&0) {
        return Err(SimError::Config(
            "--capacities: rates above zero, Mb/s".into(),
        ));
    }
    if plan.warmup_ns >= plan.duration_ns {
        return Err(SimError::Config(
            "--warmup must be shorter than --duration".into(),
        ));
    }
    // Both modes of every scenario (3 work-conservation and 2 convergence cases among
    // them), plus the UDP floods with the controller on the UDP source only, plus three
    // modes of the 2 destination cases.
    let runs_per_link = 2
        * (SEAWALL_FIG1_K.len() + SEAWALL_FIG2_FLOWS.len() + SEAWALL_UDP_TIMES.len() + 3 + 2)
        + SEAWALL_UDP_TIMES.len()
        + 3 * 2;
    let bar = ProgressBar::new((runs_per_link * plan.capacities_bps.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut per_vm = String::from(
        "experiment,capacity_mbps,param,mode,vm,tenant,tcp_flows,throughput_mbps,share,ideal_share,policed_bytes,dropped_bytes,final_rate_mbps,decreases\n",
    );
    // Runs `sc` once per mode ("without" Seawall, "with" it, or with it and the paths
    // naming the bottleneck, "per-link"), logging every VM.
    let mut run = |link: &LinkConfig, exp: &str, param: &str, sc: &Scenario, modes: &[&str]| {
        let mut out = Vec::new();
        for &mode in modes {
            let (sw, paths) = match mode {
                "without" => (None, Paths::PerDestination),
                "per-link" => (Some(&plan.seawall), Paths::PerLink),
                _ => (Some(&plan.seawall), Paths::PerDestination),
            };
            bar.set_message(format!(
                "{} Mb/s {exp} {param} {mode}",
                link.capacity_bps / 1_000_000
            ));
            let o = simulate_with_paths(link, sc, sw, paths)?;
            for (i, v) in o.vms.iter().enumerate() {
                let _ = writeln!(
                    per_vm,
                    "{exp},{},{param},{mode},{i},{},{},{:.3},{:.4},{:.4},{},{},{},{}",
                    link.capacity_bps / 1_000_000,
                    sc.tenants[v.tenant],
                    v.tcp_flows,
                    v.throughput_bps / 1e6,
                    v.share,
                    v.ideal_share,
                    v.policed_bytes,
                    v.dropped_bytes,
                    v.final_rate_bps
                        .map(|r| format!("{:.3}", r as f64 / 1e6))
                        .unwrap_or_default(),
                    v.decreases
                );
            }
            out.push(o);
            bar.inc(1);
        }
        Ok::<Vec<Outcome>, SimError>(out)
    };
    const BOTH: [&str; 2] = ["without", "with"];
    const PATHS: [&str; 3] = ["without", "per-destination", "per-link"];
    let two = |mut v: Vec<Outcome>| {
        let with = v.pop();
        match (v.pop(), with) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(SimError::Config("seawall: a run is missing".into())),
        }
    };

    let mut files = Vec::new();
    let mut fig1 = String::from("capacity_mbps,k,a_share_without,a_share_with,a_share_flow_fair,a_share_vm_fair,jain_without,jain_with,utilisation_without,utilisation_with\n");
    let mut fig2 = String::from("capacity_mbps,flows_per_b_vm,a_share_without,a_share_with,a_share_flow_fair,a_share_vm_fair,jain_without,jain_with,utilisation_without,utilisation_with\n");
    let mut udp = String::from("capacity_mbps,udp_times_link,tcp_share_without,tcp_share_with,tcp_share_udp_only_controlled,tcp_share_vm_fair,utilisation_without,utilisation_with,utilisation_udp_only_controlled,udp_loss_at_sender_pct_with\n");
    let mut work =
        String::from("capacity_mbps,case,mode,utilisation,vm0_mbps,vm1_mbps,vm1_ideal_mbps\n");
    let mut conv = String::from(
        "capacity_mbps,case,mode,join_s,seconds_to_80pct_of_fair_share,newcomer_share_second_half\n",
    );
    let mut series_csv = String::from("capacity_mbps,case,mode,vm,time_s,throughput_mbps\n");
    let mut dest = String::from("capacity_mbps,a_vms,hosts_per_a_vm,b_share_without,b_share_per_destination,b_share_per_link,b_share_pair_fair,b_share_vm_fair,jain_without,jain_per_destination,jain_per_link,utilisation_without,utilisation_per_destination,utilisation_per_link\n");
    let mut links = String::new();
    let mut s1 = String::new();
    let mut s2 = String::new();
    let mut s3 = String::new();
    let mut s4 = String::new();
    let mut s5 = String::new();
    let mut s6 = String::new();
    let _ = writeln!(s1, "Fig. 1: tenant A (1 VM, 1 TCP flow) vs tenant B (1 VM, k flows), A's share of the link's bytes");
    let _ = writeln!(
        s1,
        "{:>6} {:>3} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "Mb/s",
        "k",
        "without",
        "1/(k+1)",
        "with",
        "VM-fair",
        "Jain w/o",
        "Jain with",
        "util w/o",
        "util with"
    );
    let _ = writeln!(
        s2,
        "§3.1: 1 TCP flow vs 1 UDP source at x times the link rate, TCP's share (\"UDP only\": Seawall on the UDP VM's host alone, as the paper ran it)"
    );
    let _ = writeln!(
        s2,
        "{:>6} {:>3} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>11}",
        "Mb/s",
        "x",
        "without",
        "with",
        "UDP only",
        "VM-fair",
        "util w/o",
        "util with",
        "util UDPo",
        "UDP at src"
    );
    let _ = writeln!(
        s3,
        "Fig. 2: tenant A (1 VM, 1 flow) vs tenant B (3 VMs, n flows each), A's share"
    );
    let _ = writeln!(
        s3,
        "{:>6} {:>3} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "Mb/s", "n", "without", "1/(3n+1)", "with", "VM-fair", "Jain with", "util w/o", "util with"
    );
    let _ = writeln!(
        s4,
        "Work conservation: utilisation (and what the second VM got, Mb/s)"
    );
    let _ = writeln!(
        s4,
        "{:>6} {:<28} {:>9} {:>9} {:>10} {:>10}",
        "Mb/s", "case", "util w/o", "util with", "VM 2 with", "VM 2 fair"
    );
    let _ = writeln!(
        s5,
        "Convergence: seconds until the newcomer averages 80% of its fair share (0.5) over 200 ms; its share of the delivered bytes over the second half of the run"
    );
    let _ = writeln!(
        s5,
        "{:>6} {:<24} {:>9} {:>9} {:>11} {:>11}",
        "Mb/s", "case", "without", "with", "share w/o", "share with"
    );
    let _ = writeln!(
        s6,
        "Destinations (§3, a rate per (senderVM, link)): tenant B (1 VM, 1 flow to host 0) vs tenant A, whose VMs send 1 flow to each of several hosts behind the bottleneck; B's share without Seawall, with a contender per (VM, destination host) (\"per dest\", the default paths) and per (VM, link) (\"per link\": every path names the bottleneck as shared link 0)"
    );
    let _ = writeln!(
        s6,
        "{:>6} {:<16} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "Mb/s",
        "A",
        "without",
        "pair-fair",
        "per dest",
        "per link",
        "VM-fair",
        "Jain w/o",
        "Jain dest",
        "Jain link",
        "util dest",
        "util link"
    );

    for &cap in &plan.capacities_bps {
        let mbps = cap / 1_000_000;
        let mut link = LinkConfig {
            duration_ns: plan.duration_ns,
            warmup_ns: plan.warmup_ns,
            ..LinkConfig::new(cap, plan.seed)
        };
        if let Some(q) = plan.queue_bytes {
            link.queue_bytes = q;
        }
        let _ = writeln!(
            links,
            "{mbps} Mb/s: drop-tail queue {} KB, base round trip {} us, feedback delay {} us, step {} us",
            link.queue_bytes / 1024,
            link.base_rtt_ns / 1000,
            link.feedback_delay_ns / 1000,
            link.step_ns / 1000
        );
        let (mut v1, mut v2) = (vec![Vec::new(); 4], vec![Vec::new(); 4]);
        for k in SEAWALL_FIG1_K {
            let (a, b) = two(run(
                &link,
                "fig1",
                &k.to_string(),
                &fig1_scenario(k),
                &BOTH,
            )?)?;
            let flow_fair = 1.0 / (k as f64 + 1.0);
            let vm_fair = b.vms[0].ideal_share;
            let _ = writeln!(
                fig1,
                "{mbps},{k},{:.4},{:.4},{flow_fair:.4},{vm_fair:.4},{:.4},{:.4},{:.4},{:.4}",
                a.vms[0].share, b.vms[0].share, a.jain, b.jain, a.utilisation, b.utilisation
            );
            let _ = writeln!(
                s1,
                "{mbps:>6} {k:>3} {:>8.3} {flow_fair:>8.3} {:>8.3} {vm_fair:>8.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                a.vms[0].share, b.vms[0].share, a.jain, b.jain, a.utilisation, b.utilisation
            );
            for (col, x) in v1
                .iter_mut()
                .zip([a.vms[0].share, b.vms[0].share, flow_fair, vm_fair])
            {
                col.push(x);
            }
        }
        for x in SEAWALL_UDP_TIMES {
            let (a, b) = two(run(
                &link,
                "udp",
                &x.to_string(),
                &udp_scenario(&link, x),
                &BOTH,
            )?)?;
            let sc = udp_only_controlled_scenario(&link, x);
            let p = run(&link, "udp-paper", &x.to_string(), &sc, &["with"])?
                .pop()
                .ok_or_else(|| SimError::Config("seawall: a run is missing".into()))?;
            let u = &b.vms[1];
            let policed =
                u.policed_bytes as f64 / (u.policed_bytes + u.dropped_bytes).max(1) as f64 * 100.0;
            let _ = writeln!(
                udp,
                "{mbps},{x},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{policed:.1}",
                a.vms[0].share,
                b.vms[0].share,
                p.vms[0].share,
                b.vms[0].ideal_share,
                a.utilisation,
                b.utilisation,
                p.utilisation
            );
            let _ = writeln!(
                s2,
                "{mbps:>6} {x:>3} {:>8.3} {:>8.3} {:>9.3} {:>8.3} {:>9.3} {:>9.3} {:>9.3} {policed:>10.1}%",
                a.vms[0].share,
                b.vms[0].share,
                p.vms[0].share,
                b.vms[0].ideal_share,
                a.utilisation,
                b.utilisation,
                p.utilisation
            );
        }
        for n in SEAWALL_FIG2_FLOWS {
            let (a, b) = two(run(
                &link,
                "fig2",
                &n.to_string(),
                &fig2_scenario(n),
                &BOTH,
            )?)?;
            let flow_fair = 1.0 / (3.0 * n as f64 + 1.0);
            let vm_fair = b.tenants[0].ideal_share;
            let _ = writeln!(
                fig2,
                "{mbps},{n},{:.4},{:.4},{flow_fair:.4},{vm_fair:.4},{:.4},{:.4},{:.4},{:.4}",
                a.tenants[0].share,
                b.tenants[0].share,
                a.jain,
                b.jain,
                a.utilisation,
                b.utilisation
            );
            let _ = writeln!(
                s3,
                "{mbps:>6} {n:>3} {:>8.3} {flow_fair:>9.3} {:>8.3} {vm_fair:>8.3} {:>9.3} {:>9.3} {:>9.3}",
                a.tenants[0].share, b.tenants[0].share, b.jain, a.utilisation, b.utilisation
            );
            for (col, x) in
                v2.iter_mut()
                    .zip([a.tenants[0].share, b.tenants[0].share, flow_fair, vm_fair])
            {
                col.push(x);
            }
        }
        let one = |vms: Vec<Vm>| Scenario {
            tenants: vec!["A".into(), "B".into()],
            vms,
        };
        for (case, sc) in [
            ("1 VM with 1 TCP flow", one(vec![Vm::tcp(0, 1)])),
            ("1 VM with UDP at 0.9x", one(vec![Vm::udp(0, cap / 10 * 9)])),
            (
                "UDP at 0.2x + 1 TCP VM",
                one(vec![Vm::udp(0, cap / 5), Vm::tcp(1, 1)]),
            ),
        ] {
            let (a, b) = two(run(&link, "work", case, &sc, &BOTH)?)?;
            for (mode, o) in [("without", &a), ("with", &b)] {
                let mb = |i: usize| o.vms.get(i).map(|v| v.throughput_bps / 1e6);
                let _ = writeln!(
                    work,
                    "{mbps},{case},{mode},{:.4},{:.3},{},{}",
                    o.utilisation,
                    mb(0).unwrap_or(0.0),
                    mb(1).map(|x| format!("{x:.3}")).unwrap_or_default(),
                    o.vms
                        .get(1)
                        .map(|v| format!("{:.3}", v.ideal_bps / 1e6))
                        .unwrap_or_default()
                );
            }
            let second = |o: &Outcome, f: &dyn Fn(&crate::seawall::VmResult) -> f64| {
                o.vms
                    .get(1)
                    .map(|v| format!("{:.1}", f(v)))
                    .unwrap_or_else(|| "-".into())
            };
            let _ = writeln!(
                s4,
                "{mbps:>6} {case:<28} {:>9.3} {:>9.3} {:>10} {:>10}",
                a.utilisation,
                b.utilisation,
                second(&b, &|v| v.throughput_bps / 1e6),
                second(&b, &|v| v.ideal_bps / 1e6)
            );
        }
        let join = plan.warmup_ns + (plan.duration_ns - plan.warmup_ns) / 4;
        let mut lines = Vec::new();
        for (case, first) in [("1 flow joins 1 flow", 1), ("1 flow joins 8 flows", 8)] {
            let sc = one(vec![Vm::tcp(0, first), Vm::tcp(1, 1).starting_at(join)]);
            let (a, b) = two(run(&link, "convergence", case, &sc, &BOTH)?)?;
            let mut t = Vec::new();
            let mut shares = Vec::new();
            for (mode, o) in [("without", &a), ("with", &b)] {
                let secs = o
                    .time_to_reach(1, join, cap as f64 / 2.0, 0.8, 4)
                    .map(|ns| ns as f64 / 1e9);
                let shown = secs
                    .map(|x| format!("{x:.2}"))
                    .unwrap_or_else(|| "never".into());
                let from = o.series[1].len() / 2;
                let sum = |v: &[f64]| v[from..].iter().sum::<f64>();
                let late = sum(&o.series[1]) / (sum(&o.series[0]) + sum(&o.series[1])).max(1.0);
                let _ = writeln!(
                    conv,
                    "{mbps},{case},{mode},{:.2},{shown},{late:.4}",
                    join as f64 / 1e9
                );
                t.push(shown);
                shares.push(late);
                for (vm, s) in o.series.iter().enumerate() {
                    for (i, x) in s.iter().enumerate() {
                        let _ = writeln!(
                            series_csv,
                            "{mbps},{case},{mode},{vm},{:.3},{:.3}",
                            (i as u64 * o.bin_ns) as f64 / 1e9,
                            x / 1e6
                        );
                    }
                    if first > 1 {
                        lines.push(Series {
                            label: format!(
                                "{} {mode}",
                                if vm == 0 { "8-flow VM" } else { "newcomer" }
                            ),
                            points: s
                                .iter()
                                .enumerate()
                                .map(|(i, x)| ((i as u64 * o.bin_ns) as f64 / 1e9, x / cap as f64))
                                .collect(),
                        });
                    }
                }
            }
            let _ = writeln!(
                s5,
                "{mbps:>6} {case:<24} {:>9} {:>9} {:>11.3} {:>11.3}",
                t[0], t[1], shares[0], shares[1]
            );
        }
        let mut v3 = vec![Vec::new(); 5];
        let mut cases = Vec::new();
        for (vms, hosts, sc) in [
            (
                1,
                SEAWALL_MANY_HOSTS,
                many_destinations_scenario(SEAWALL_MANY_HOSTS),
            ),
            (
                SEAWALL_ALL_PAIRS,
                SEAWALL_ALL_PAIRS,
                all_pairs_scenario(SEAWALL_ALL_PAIRS),
            ),
        ] {
            let param = format!("{vms}x{hosts}");
            let o = run(&link, "destinations", &param, &sc, &PATHS)?;
            let [a, d, l] = &o[..] else {
                return Err(SimError::Config("seawall: a run is missing".into()));
            };
            let b = |o: &Outcome| o.tenants[1].share;
            // Every (VM, host) pair a contender, as TCP makes every flow one.
            let pair_fair = 1.0 / ((vms * hosts) as f64 + 1.0);
            let vm_fair = l.tenants[1].ideal_share;
            let _ = writeln!(
                dest,
                "{mbps},{vms},{hosts},{:.4},{:.4},{:.4},{pair_fair:.4},{vm_fair:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
                b(a), b(d), b(l), a.jain, d.jain, l.jain, a.utilisation, d.utilisation, l.utilisation
            );
            let case = format!(
                "{vms} VM{} x {hosts} hosts",
                if vms == 1 { "" } else { "s" }
            );
            let _ = writeln!(
                s6,
                "{mbps:>6} {case:<16} {:>8.3} {pair_fair:>9.3} {:>8.3} {:>8.3} {vm_fair:>8.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                b(a), b(d), b(l), a.jain, d.jain, l.jain, d.utilisation, l.utilisation
            );
            for (col, x) in v3.iter_mut().zip([b(a), b(d), b(l), pair_fair, vm_fair]) {
                col.push(x);
            }
            cases.push(case);
        }
        files.push((
            format!("destinations_{mbps}mbps.svg"),
            bar_chart(
                &Labels {
                    title: format!("A tenant's VMs reach several hosts, {mbps} Mb/s"),
                    x: "tenant A's VMs x hosts each reaches".into(),
                    y: "share of the 1-VM, 1-host tenant".into(),
                },
                &cases,
                &[
                    "without Seawall".to_string(),
                    "Seawall, per destination".to_string(),
                    "Seawall, per link".to_string(),
                    "(VM, host)-pair fair".to_string(),
                    "VM-level fair".to_string(),
                ],
                &v3,
            ),
        ));
        let names = vec![
            "without Seawall".to_string(),
            "with Seawall".to_string(),
            "flow-level fair".to_string(),
            "VM-level fair".to_string(),
        ];
        let cats = |v: &[usize]| v.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        files.push((
            format!("fig1_{mbps}mbps.svg"),
            bar_chart(
                &Labels {
                    title: format!("Fig. 1 at {mbps} Mb/s: 1 flow vs a VM with k"),
                    x: "k (flows of the other VM)".into(),
                    y: "share of the 1-flow VM".into(),
                },
                &cats(&SEAWALL_FIG1_K),
                &names,
                &v1,
            ),
        ));
        files.push((
            format!("fig2_{mbps}mbps.svg"),
            bar_chart(
                &Labels {
                    title: format!("Fig. 2 at {mbps} Mb/s: 1-VM tenant vs 3-VM tenant"),
                    x: "flows per VM of the 3-VM tenant".into(),
                    y: "share of the 1-VM tenant".into(),
                },
                &cats(&SEAWALL_FIG2_FLOWS),
                &names,
                &v2,
            ),
        ));
        files.push((
            format!("convergence_{mbps}mbps.svg"),
            line_chart(
                &Labels {
                    title: format!("A 1-flow VM joins an 8-flow VM, {mbps} Mb/s"),
                    x: "time (s)".into(),
                    y: "share of the link (50 ms bins)".into(),
                },
                &lines,
            ),
        ));
    }
    bar.finish_and_clear();
    files.push(("fig1_flows.csv".into(), fig1));
    files.push(("fig2_vms.csv".into(), fig2));
    files.push(("udp_flood.csv".into(), udp));
    files.push(("work_conservation.csv".into(), work));
    files.push(("convergence.csv".into(), conv));
    files.push(("convergence_series.csv".into(), series_csv));
    files.push(("destinations.csv".into(), dest));
    files.push(("per_vm.csv".into(), per_vm));
    let sw = &plan.seawall;
    let summary = format!(
        "Seawall: period {} ms, +{} Mb/s per period, x{} on loss; {} s runs, {} s warm-up, seed {}\n{links}\n{s1}\n{s2}\n{s3}\n{s4}\n{s5}\n{s6}",
        sw.period_ns as f64 / 1e6,
        sw.increase_bps as f64 / 1e6,
        1.0 - sw.decrease,
        plan.duration_ns as f64 / 1e9,
        plan.warmup_ns as f64 / 1e9,
        plan.seed
    );
    Ok(NfaasReport { files, summary })
}
