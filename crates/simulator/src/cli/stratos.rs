//! Stratos's reproduction (§7.2): the five placement/distribution scenarios
//! (and the two of the running controller's rack-by-rack split), their
//! summary and files.

use super::*;

/// The five placement/distribution combinations of §7.2, in table order, then
/// the running controller's aligned split under both instance placements.
pub fn stratos_scenario_list() -> Vec<Scenario> {
    use DistributionScheme as D;
    use InitialPlacement as I;
    use InstancePlacement as P;
    vec![
        Scenario {
            initial: I::Rand,
            instance: P::Rand,
            distribution: D::Uniform,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Rand,
            distribution: D::Uniform,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Aware,
            distribution: D::Uniform,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Rand,
            distribution: D::Aware,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Aware,
            distribution: D::Aware,
        },
        // What the running controller's `network-aware` distribution installs
        // (one split per stage, rack by rack), next to the per-hop LP.
        Scenario {
            initial: I::Pack,
            instance: P::Rand,
            distribution: D::Aligned,
        },
        Scenario {
            initial: I::Pack,
            instance: P::Aware,
            distribution: D::Aligned,
        },
    ]
}

pub(super) fn stratos_scenarios(cfg: &StratosConfig) -> Result<Vec<ScenarioOutcome>, SimError> {
    let list = stratos_scenario_list();
    let bar = ProgressBar::new(list.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut out = Vec::new();
    for s in list {
        bar.set_message(s.label());
        out.push(run_scenario(cfg, s)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

pub(super) fn find<'a>(o: &'a [ScenarioOutcome], label: &str) -> Option<&'a ScenarioOutcome> {
    o.iter().find(|x| x.scenario.label() == label)
}

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Human summary of the Stratos scenarios.
pub fn stratos_summary(outcomes: &[ScenarioOutcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<20} {:>7} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
        "scenario",
        ">=99%",
        ">=95%",
        "min srv%",
        "mean VMs",
        "med xrk%",
        "links>0%",
        "med util",
        "slots%"
    );
    for o in outcomes {
        let share = |p: f64| {
            o.tenants.iter().filter(|t| t.served_pct() >= p).count() as f64
                / o.tenants.len().max(1) as f64
        };
        let min = o
            .tenants
            .iter()
            .map(|t| t.served_pct())
            .fold(f64::INFINITY, f64::min);
        let inst = o.tenants.iter().map(|t| t.instances as f64).sum::<f64>()
            / o.tenants.len().max(1) as f64;
        let xr = median(
            o.tenants
                .iter()
                .map(|t| 100.0 * t.inter_rack_fraction)
                .collect(),
        );
        let used = o.link_utilization.iter().filter(|&&u| u > 1e-9).count() as f64
            / o.link_utilization.len() as f64;
        let mu = median(o.link_utilization.iter().map(|u| 100.0 * u).collect());
        let _ = writeln!(
            s,
            "{:<20} {:>7.0} {:>7.0} {:>8.1} {:>8.2} {:>9.1} {:>9.0} {:>9.1} {:>7.0}",
            o.scenario.label(),
            100.0 * share(99.0),
            100.0 * share(95.0),
            min,
            inst,
            xr,
            100.0 * used,
            mu,
            100.0 * o.slots_used as f64 / o.slots_total as f64
        );
    }
    s
}

/// CSV and SVG files for Stratos Fig. 13-16 and Table 3.
pub fn stratos_files(outcomes: &[ScenarioOutcome]) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let cdf =
        |labels: &[&str], f: &dyn Fn(&ScenarioOutcome) -> Vec<f64>| -> (String, Vec<Series>) {
            let mut csv = String::from("scenario,index,value\n");
            let mut series = Vec::new();
            for l in labels {
                if let Some(o) = find(outcomes, l) {
                    let vals = f(o);
                    for (i, v) in vals.iter().enumerate() {
                        let _ = writeln!(csv, "{l},{i},{v:.4}");
                    }
                    series.push(Series {
                        label: l.to_string(),
                        points: cdf_points(&vals),
                    });
                }
            }
            (csv, series)
        };
    let served = |o: &ScenarioOutcome| o.tenants.iter().map(|t| t.served_pct()).collect::<Vec<_>>();
    let placement = [
        "rand/rand uniform",
        "pack/rand uniform",
        "pack/aware uniform",
    ];
    let dist = [
        "pack/rand uniform",
        "pack/rand aware",
        "pack/aware uniform",
        "pack/aware aware",
        "pack/aware aligned",
    ];

    let (csv, series) = cdf(&placement, &served);
    files.push(("fig13_demand_served_cdf.csv".into(), csv));
    files.push((
        "fig13_demand_served_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 13: tenant demand served".into(),
                x: "% of demand served".into(),
                y: "CDF of tenants".into(),
            },
            &series,
        ),
    ));

    let mut csv =
        String::from("scenario,tenant,instances,served_pct,served_after_own_scaling_pct\n");
    let mut series = Vec::new();
    for l in placement {
        if let Some(o) = find(outcomes, l) {
            for (i, t) in o.tenants.iter().enumerate() {
                let _ = writeln!(
                    csv,
                    "{l},{i},{},{:.4},{:.4}",
                    t.instances,
                    t.served_pct(),
                    100.0 * t.served_after_scaling_mbps / t.demand_mbps
                );
            }
            series.push(Series {
                label: l.into(),
                points: o
                    .tenants
                    .iter()
                    .map(|t| (t.instances as f64, t.served_pct()))
                    .collect(),
            });
        }
    }
    files.push(("fig14_served_vs_instances.csv".into(), csv));
    files.push((
        "fig14_served_vs_instances.svg".into(),
        scatter_chart(
            &Labels {
                title: "Fig. 14: demand served vs instances".into(),
                x: "instances (VMs)".into(),
                y: "% of demand served".into(),
            },
            &series,
        ),
    ));

    let (csv, series) = cdf(&dist, &served);
    files.push(("fig15a_demand_served_cdf.csv".into(), csv));
    files.push((
        "fig15a_demand_served_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 15a: demand served by distribution".into(),
                x: "% of demand served".into(),
                y: "CDF of tenants".into(),
            },
            &series,
        ),
    ));
    let inter = |o: &ScenarioOutcome| {
        o.tenants
            .iter()
            .map(|t| 100.0 * t.inter_rack_fraction)
            .collect::<Vec<_>>()
    };
    let (csv, series) = cdf(&dist, &inter);
    files.push(("fig15b_inter_rack_cdf.csv".into(), csv));
    files.push((
        "fig15b_inter_rack_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 15b: traffic crossing inter-rack links".into(),
                x: "% of tenant traffic".into(),
                y: "CDF of tenants".into(),
            },
            &series,
        ),
    ));
    let all: Vec<String> = outcomes.iter().map(|o| o.scenario.label()).collect();
    let all_refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let util = |o: &ScenarioOutcome| {
        o.link_utilization
            .iter()
            .map(|u| 100.0 * u)
            .collect::<Vec<_>>()
    };
    let (csv, series) = cdf(&all_refs, &util);
    files.push(("fig16_link_utilization_cdf.csv".into(), csv));
    files.push((
        "fig16_link_utilization_cdf.svg".into(),
        line_chart(
            &Labels {
                title: "Fig. 16: network link utilisation".into(),
                x: "% of link bandwidth used".into(),
                y: "CDF of links".into(),
            },
            &series,
        ),
    ));

    let mut csv =
        String::from("placement,distribution,slots_used,slots_total,utilization_pct,paper_pct\n");
    let paper = |l: &str| match l {
        "rand/rand uniform" => "87",
        "pack/rand uniform" => "90",
        "pack/aware uniform" => "97",
        "pack/rand aware" => "78",
        "pack/aware aware" => "77",
        _ => "",
    };
    for o in outcomes {
        let l = o.scenario.label();
        let (p, d) = l.split_once(' ').unwrap_or((&l, ""));
        let _ = writeln!(
            csv,
            "{p},{d},{},{},{:.1},{}",
            o.slots_used,
            o.slots_total,
            100.0 * o.slots_used as f64 / o.slots_total as f64,
            paper(&l)
        );
    }
    files.push(("table3_slot_utilization.csv".into(), csv));
    files
}

pub(super) fn write_stratos(dir: &Path, outcomes: &[ScenarioOutcome]) -> Result<(), SimError> {
    write_files(dir, &stratos_files(outcomes))
}
