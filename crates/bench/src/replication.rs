//! `sluice bench replication`: what a replicated state store costs the
//! functions, and what a primary's death loses with and without waiting for
//! replicas (docs/STATE.md, "Replication").
//!
//! Throughput: short flows of 64-byte frames (the workload with the most
//! writes per packet) through each function with its state in a 3-primary
//! Redis Cluster without replicas (the baseline, in the same run), in a
//! 3-primary cluster with a replica each and asynchronous replication
//! (`?wait=0`), and in the same cluster with every batch's writes waiting for
//! a replica (the default). Each configuration runs `reps` times in turn; the
//! fastest run is kept.
//!
//! Failover: the firewall runs the first half of a trace of concurrent
//! connections, the primary owning the most of its records is killed, a
//! replica takes over, and the second half runs. Established connections whose
//! packets the firewall then drops for want of state lost their record to the
//! failover; the same trace without a kill is the baseline for drops the
//! firewall would make anyway.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use sluice_chain::{Chain, ChainSpec, Sharing};
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_state::{Key, Namespace, Ops, StateStore};
use sluice_state_redis::server::RedisCluster;
use sluice_state_redis::ClusterStore;
use sluice_trafficgen::{generate, TrafficSpec};

use crate::nf;
use crate::state::{run_once, FlowsKind, Workload};

/// How long a silent primary takes to be replaced in these runs.
const NODE_TIMEOUT_MS: u64 = 1000;

/// One function's throughput under the three store configurations.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// The function.
    pub function: String,
    /// Packets per run.
    pub packets: u64,
    /// Packets per second, no replicas (baseline).
    pub base_pps: f64,
    /// Packets per second, replicas, asynchronous replication.
    pub async_pps: f64,
    /// Packets per second, replicas, writes wait for one.
    pub wait_pps: f64,
    /// `WAIT`s per 1,000 packets in the waiting run.
    pub waits_per_kpkt: f64,
}

/// What a primary's death cost one run of the failover trace.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverRow {
    /// Replicas each batch's writes waited for.
    pub wait: u8,
    /// Whether a primary was killed (false: the baseline run).
    pub killed: bool,
    /// Connections in the trace.
    pub connections: usize,
    /// Packets of the second half the firewall dropped, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Milliseconds from the kill until the store answered every slot again.
    pub recovery_ms: Option<f64>,
    /// The last store error the chain saw, if any.
    pub last_error: Option<String>,
}

fn cluster_url(c: &RedisCluster, query: &str) -> String {
    if query.is_empty() {
        c.url()
    } else {
        format!("{}?{query}", c.url())
    }
}

/// Measures [`CostRow`]s for the firewall, NAT, IPS and monitor (the LB needs
/// replies from its backends' addresses: `bench state` covers it).
pub fn cost(
    dir: &Path,
    quick: bool,
    reps: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<CostRow>, String> {
    progress("starting a 3-primary cluster and a 3+3 replicated one");
    let plain = RedisCluster::start(3)?;
    let replicated = RedisCluster::start_replicated(3, 1, NODE_TIMEOUT_MS)?;
    let urls = [
        cluster_url(&plain, ""),
        cluster_url(&replicated, "wait=0"),
        cluster_url(&replicated, ""),
    ];
    let packets = if quick { 20_000 } else { 100_000 };
    let mut out = Vec::new();
    for (name, text, _) in crate::state::functions() {
        if name == "lb" {
            continue;
        }
        let d = dir.join(name);
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        let spec = nf::load_spec(&d, &text)?;
        let w = Workload::new(FlowsKind::Short, 64, packets, spec.settings.batch_size);
        let mut best = [f64::MAX; 3];
        let mut waits = 0;
        for rep in 0..reps.max(1) {
            for (k, url) in urls.iter().enumerate() {
                progress(&format!("{name}: run {} of {}, store {k}", rep + 1, reps));
                let mut store = ClusterStore::open(url).map_err(|e| e.to_string())?;
                let run = format!("{name}_r{rep}_{k}");
                let o = run_once(&spec, &d, &run, &w, &mut store, false)?;
                best[k] = best[k].min(o.secs);
                if k == 2 {
                    waits = o.counters.replica_waits;
                }
            }
        }
        let n = w.trace.len() as f64;
        out.push(CostRow {
            function: name.to_string(),
            packets: w.trace.len() as u64,
            base_pps: n / best[0],
            async_pps: n / best[1],
            wait_pps: n / best[2],
            waits_per_kpkt: waits as f64 * 1000.0 / n,
        });
    }
    Ok(out)
}

/// Runs the failover trace with writes waiting for `wait` replicas, killing a
/// primary halfway if `kill`.
pub fn failover(dir: &Path, wait: u8, kill: bool) -> Result<FailoverRow, String> {
    let mut cluster = RedisCluster::start_replicated(3, 1, NODE_TIMEOUT_MS)?;
    let url = cluster_url(&cluster, &format!("wait={wait}"));
    let mut store = ClusterStore::open(&url).map_err(|e| e.to_string())?;
    let d = dir.join(format!("failover-{wait}-{kill}"));
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    let mut spec: ChainSpec = nf::load_spec(&d, &nf::firewall_chain(100))?;
    spec.name = format!("failover_{wait}_{kill}");
    // Many connections open at once, each long enough to span the kill.
    let connections = 2000;
    let trace = generate(&TrafficSpec {
        flows: connections,
        packets_per_flow: 20,
        concurrency: connections,
        ..TrafficSpec::default()
    });
    let registry = sluice_builtin::registry();
    let mut chain =
        Chain::from_spec(&spec, &d, &registry, Sharing::Shared).map_err(|e| e.to_string())?;
    let batch_size = spec.settings.batch_size;
    let mut pool = PacketPool::new(batch_size * 2);
    let mut batch = Batch::with_capacity(batch_size);
    let half = trace.len() / 2;
    let mut dropped = BTreeMap::new();
    let mut recovery_ms = None;
    let mut i = 0;
    while i < trace.len() {
        if i >= half && kill && recovery_ms.is_none() {
            let t0 = std::time::Instant::now();
            cluster.nodes[0].kill();
            cluster.await_failover(0)?;
            await_every_slot(&mut store)?;
            recovery_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
        }
        let end = (i + batch_size).min(trace.len());
        for j in i..end {
            let (ts, f) = trace.get(j);
            batch.push_frame(&mut pool, f, ts, 0);
        }
        chain.process(&mut batch, &mut store);
        if i >= half {
            for p in &batch.pkts {
                if let Verdict::Drop(r) = p.verdict {
                    *dropped.entry(r.reason.to_string()).or_insert(0) += 1;
                }
            }
        }
        batch.recycle(&mut pool);
        i = end;
    }
    Ok(FailoverRow {
        wait,
        killed: kill,
        connections,
        dropped,
        recovery_ms,
        last_error: chain.stats().last_error.map(|e| e.to_string()),
    })
}

/// Reads a key in every slot range until the whole batch succeeds: the
/// client relearns the slot map from the surviving nodes as it fails.
fn await_every_slot(store: &mut ClusterStore) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut ops = Ops::new();
    loop {
        ops.clear();
        for i in 0..64u32 {
            ops.get(Key::new(Namespace(0xfa11), 1, &i.to_be_bytes()));
        }
        match store.execute(&mut ops) {
            Ok(()) => return Ok(()),
            Err(e) if std::time::Instant::now() > deadline => {
                return Err(format!("the store did not recover within 30 s: {e}"))
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// The two tables, as text.
pub fn report(cost: &[CostRow], failovers: &[FailoverRow]) -> String {
    let mut s = String::from(
        "function   packets   no replicas (kpps)   async (kpps, ratio)   wait=1 (kpps, ratio)   WAITs/kpkt\n",
    );
    for r in cost {
        s += &format!(
            "{:<10} {:>7}   {:>18.1}   {:>10.1} x{:<6.2}   {:>11.1} x{:<6.2}   {:>10.1}\n",
            r.function,
            r.packets,
            r.base_pps / 1e3,
            r.async_pps / 1e3,
            r.async_pps / r.base_pps,
            r.wait_pps / 1e3,
            r.wait_pps / r.base_pps,
            r.waits_per_kpkt,
        );
    }
    s += "\nfailover (firewall, 3+3 cluster, node timeout 1 s)\nwait  killed  connections  recovery (ms)  second-half drops by reason\n";
    for f in failovers {
        let drops: Vec<String> = f.dropped.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s += &format!(
            "{:<5} {:<7} {:>11}  {:>13}  {}\n",
            f.wait,
            f.killed,
            f.connections,
            f.recovery_ms.map_or("-".into(), |m| format!("{m:.0}")),
            if drops.is_empty() {
                "none".into()
            } else {
                drops.join(" ")
            },
        );
        if let Some(e) = &f.last_error {
            s += &format!("      last store error: {e}\n");
        }
    }
    s
}
