//! `sluice bench fleet`, tiny: every simulated agent ends running the version
//! the controller wants for it, and an agent of a host with a tenant's VM was
//! given that tenant's chain (its FIB and the firewall instance's chain).

use std::time::Duration;

use sluice_bench::fleet::{run, Options};

#[test]
fn every_simulated_agent_runs_its_latest_configuration_with_its_tenants_chains() {
    let opts = Options {
        hosts: 5,
        tenants: 4,
        sync_timeout: Duration::from_secs(30),
        rate_window: Duration::from_secs(2),
        ..Options::default()
    };
    let out = run(&opts, &mut |_| {}).unwrap();
    let r = &out.report;
    assert_eq!(r.refused, 0, "agents refused pushes: {:?}", r.last_refusal);
    assert!(r.sync_ms.is_some(), "behind: {:?}", r.unsynced);
    assert!(r.unsynced.is_empty());
    assert_eq!(out.desired.len(), 5);
    for (h, v) in &out.desired {
        let got = out.received.get(h).map(|c| c.version);
        assert_eq!(got, Some(*v), "host {h}");
    }
    assert_eq!(out.vm_hosts.len(), 4);
    for (tenant, hosts) in &out.vm_hosts {
        for h in hosts {
            let cfg = &out.received[h];
            let fib = cfg
                .tenants
                .iter()
                .find(|t| &t.tenant == tenant)
                .unwrap_or_else(|| panic!("host {h} has no FIB of {tenant}"));
            assert!(!fib.entries.is_empty(), "{tenant} on host {h}: no entries");
            // Every host a tenant's FIB sends to is a peer the agent knows.
            assert!(
                cfg.peers.iter().any(|p| p.host == *h),
                "host {h} is not its own peer"
            );
        }
        // Its firewall runs somewhere, with the chain named after it.
        let fw = out
            .received
            .values()
            .flat_map(|c| &c.instances)
            .find(|i| &i.tenant == tenant && i.middlebox == "fw")
            .unwrap_or_else(|| panic!("no firewall instance of {tenant}"));
        assert!(
            fw.chain_yaml.contains(&format!("{tenant}.fw")),
            "{}",
            fw.chain_yaml
        );
    }
    assert!(r.apply.n == 4 && r.registration.n == 5);
    assert!(r.pushes_per_tenant > 0.0 && r.bytes_per_tenant > 0.0);
    // Deltas after first contact, applied by the agents with the real
    // agent's `apply_delta`, none stale, and every agent ends with what the
    // controller holds for it.
    assert!(r.delta_pushes_per_tenant > 0.0, "{r:?}");
    assert!(
        (r.full_pushes_per_tenant + r.delta_pushes_per_tenant - r.pushes_per_tenant).abs() < 1e-9
    );
    assert_eq!(r.stale_deltas, 0);
    assert!(r.differing.is_empty(), "{:?}", r.differing);
    // A small fleet is told the shortest interval, and its agents keep it
    // (each every 50 ms, up to one scan late: 14-20 a second).
    assert_eq!(r.heartbeat_interval_ms, 50.0);
    let per_host = r.controller_heartbeats_per_s / 5.0;
    assert!(
        (12.0..=21.0).contains(&per_host),
        "{} heartbeats/s from 5 hosts",
        r.controller_heartbeats_per_s
    );
}
