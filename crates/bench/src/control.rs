//! `sluice bench control`: the control plane's compile and install times for the
//! Stratos Figure 4 tenant (Stratos Table 1: 14 ms to compile, 54 ms to install).

use std::time::Instant;

use sluice_controller::{compile, Placement};
use sluice_switch::{Fib, HostId, PortId};
use sluice_tenant::TenantSpec;

/// The Figure 4 example spec, as shipped in `examples/tenant/figure4.yaml`.
pub const FIGURE4: &str = include_str!("../../../examples/tenant/figure4.yaml");

/// One control-plane timing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ControlTiming {
    /// What was timed.
    pub name: String,
    /// Median over the runs, milliseconds.
    pub median_ms: f64,
    /// Slowest run, milliseconds.
    pub max_ms: f64,
    /// Our goal, milliseconds.
    pub goal_ms: f64,
    /// Stratos Table 1's time, milliseconds.
    pub stratos_ms: f64,
    /// FIB entries involved.
    pub entries: usize,
}

/// The placement used: three hosts, two firewall instances, as in the tests.
pub fn placement() -> Placement {
    let (h1, h2, h3) = (HostId(1), HostId(2), HostId(3));
    let mut p = Placement {
        gateway: (h1, PortId(1)),
        vni: 42,
        ..Placement::default()
    };
    for (vm, h, port) in [
        ("web-a1", h2, 20),
        ("web-b1", h2, 21),
        ("web-a2", h3, 20),
        ("web-b2", h3, 21),
    ] {
        p.vms.insert(vm.into(), (h, PortId(port)));
    }
    for (mb, list) in [
        ("fw", vec![(h1, 10u16), (h2, 10)]),
        ("ips", vec![(h1, 11)]),
        ("mon", vec![(h1, 12)]),
        ("lb-a", vec![(h2, 11)]),
        ("lb-b", vec![(h3, 12)]),
    ] {
        p.instances.insert(
            mb.into(),
            list.into_iter()
                .map(|(h, port)| (h, PortId(port)))
                .collect(),
        );
    }
    p
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[v.len() - 1])
}

/// Times parsing + validating + compiling the spec, and installing every host's FIB.
pub fn run(runs: usize) -> Result<Vec<ControlTiming>, String> {
    let registry = sluice_builtin::registry();
    let place = placement();
    let mut compile_ms = Vec::new();
    let mut install_ms = Vec::new();
    let mut entries = 0;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let spec = TenantSpec::parse(FIGURE4, "figure4.yaml", Some(&registry))
            .map_err(|e| e.to_string())?;
        let c = compile(&spec, &place).map_err(|e| e.to_string())?;
        compile_ms.push(t.elapsed().as_secs_f64() * 1e3);
        entries = c.entries();
        let mut fibs: Vec<Fib> = c.hosts.keys().map(|_| Fib::new()).collect();
        let t = Instant::now();
        for (f, (_, hf)) in fibs.iter_mut().zip(c.hosts) {
            f.replace(hf.entries, hf.groups, 1)
                .map_err(|e| e.to_string())?;
        }
        install_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (cm, cx) = stats(compile_ms);
    let (im, ix) = stats(install_ms);
    Ok(vec![
        ControlTiming {
            name: "compile_figure4".into(),
            median_ms: cm,
            max_ms: cx,
            goal_ms: 5.0,
            stratos_ms: 14.0,
            entries,
        },
        ControlTiming {
            name: "install_figure4_in_process".into(),
            median_ms: im,
            max_ms: ix,
            goal_ms: 20.0,
            stratos_ms: 54.0,
            entries,
        },
    ])
}
