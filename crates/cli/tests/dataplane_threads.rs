//! Issue 25 item 4 on a namespace testbed: every agent forwards on two
//! threads (`dataplane_threads = 2`), flows sharded by their
//! direction-invariant hash, frames read by the other thread handed over.
//! Many TCP connections from the gateway through the Figure 4 chain
//! (firewall, then the web-a load balancer, both stateful) to the web-a
//! backends all work both ways, concurrent 1 MiB downloads arrive intact, and
//! the agents' per-thread counters show both threads forwarding. Needs root,
//! nginx and curl (scripts/common.sh installs them).

use std::time::{Duration, Instant};

mod common;

use sluice_testbed::lab::{Lab, LabOptions, StoreKind};

/// Each agent's metrics text, by host.
fn agent_metrics(lab: &Lab) -> Vec<(u32, String)> {
    let st = lab.state();
    let http = st.http();
    st.hosts
        .iter()
        .map(|h| {
            let text = http
                .get(&format!("{}/metrics", h.api))
                .call()
                .unwrap_or_else(|e| panic!("metrics of host {}: {e}", h.id))
                .into_string()
                .unwrap();
            (h.id, text)
        })
        .collect()
}

/// The value of `family{host="H",thread="T"}` in `m` (0 if absent).
fn per_thread(m: &str, family: &str, host: u32, thread: usize) -> u64 {
    let key = format!("{family}{{host=\"{host}\",thread=\"{thread}\"}} ");
    m.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn connections_through_a_stateful_chain_work_with_two_forwarding_threads() {
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::up(&LabOptions {
        store: StoreKind::Single,
        dataplane_threads: 2,
        ..common::lab_options(common::figure4_spec(), dir.path())
    })
    .unwrap_or_else(|e| panic!("testbed did not come up: {e}"));
    let st = lab.state().clone();
    let gw_host = st.vm("gateway").unwrap().host;

    // Every agent runs two forwarding threads.
    for (h, m) in agent_metrics(&lab) {
        assert!(
            m.contains(&format!("sluice_dataplane_threads{{host=\"{h}\"}} 2")),
            "host {h} does not run 2 forwarding threads: {}",
            m.lines()
                .filter(|l| l.starts_with("sluice_dataplane_thread"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // Many short connections through firewall and load balancer: each a
    // new flow (a new source port), so they spread over both threads.
    let served = common::web_a_servers(&lab, 60);
    let failed = served.iter().filter(|s| *s == "FAILED").count();
    assert_eq!(failed, 0, "every connection gets its page: {served:?}");
    assert!(
        served.iter().any(|s| s == "web-a1") && served.iter().any(|s| s == "web-a2"),
        "the load balancer spreads them: {served:?}"
    );

    // Concurrent bulk transfers, both directions busy at once.
    let gw_ns = st.vm("gateway").unwrap().netns.clone();
    let files: Vec<std::path::PathBuf> = (0..12)
        .map(|i| dir.path().join(format!("blob-{i}")))
        .collect();
    let kids: Vec<std::process::Child> = files
        .iter()
        .map(|f| {
            std::process::Command::new("ip")
                .args(["netns", "exec", &gw_ns, "curl", "-sf", "--max-time", "60"])
                .args(["--interface", "198.51.100.10", "-o"])
                .arg(f)
                .arg("http://10.10.1.100/blob")
                .spawn()
                .unwrap()
        })
        .collect();
    let blob = sluice_testbed::lab::blob();
    for (mut k, f) in kids.into_iter().zip(&files) {
        let status = k.wait().unwrap();
        let got = std::fs::read(f).unwrap_or_default();
        assert!(
            status.success() && got == blob,
            "{}: curl {status}, {} of {} bytes",
            f.display(),
            got.len(),
            blob.len()
        );
    }

    // The counters are published every 50 ms; both threads of the
    // gateway's agent (every packet of every connection crosses it, both
    // ways) forwarded, and frames were handed between them.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let all = agent_metrics(&lab);
        let m = &all.iter().find(|(h, _)| *h == gw_host).unwrap().1;
        let fwd: Vec<u64> = (0..2)
            .map(|t| per_thread(m, "sluice_dataplane_thread_forwarded_total", gw_host, t))
            .collect();
        let handed: u64 = (0..2)
            .map(|t| per_thread(m, "sluice_dataplane_thread_handed_out_total", gw_host, t))
            .sum();
        // 60 connections and 12 MiB crossed it: each thread has its share.
        let ok = fwd.iter().all(|&f| f >= 200) && handed > 0;
        if ok {
            // Printed, never asserted (the split depends on the hash).
            eprintln!("gateway host {gw_host}: forwarded per thread {fwd:?}, handed over {handed}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "both threads of host {gw_host} should have forwarded (forwarded {fwd:?}, handed over {handed}): {}",
            m.lines()
                .filter(|l| l.starts_with("sluice_dataplane_thread"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
