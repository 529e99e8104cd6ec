//! The printed tables of `sluice bench state`.

use super::*;

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.1}"))
}

/// Formats results as tables for people: throughput and latency, then store
/// operations per packet next to StatelessNF Table 4.1.
pub fn table(ms: &[StateMeasurement]) -> String {
    let mut s = String::new();
    if let Some(m) = ms.first() {
        s.push_str(&format!(
            "local = in-process LocalStore; remote = {} (one pipelined round trip per execute); wall clock; trace timestamps spaced at the local run's time per packet\n\
             batches of {} packets, except rows named _bN: N packets per batch for local, remote and cached alike\n",
            m.store,
            ms.iter().map(|m| m.batch_size).min().unwrap_or(0)
        ));
    }
    s.push_str(&format!(
        "targets: remote/local >= {TARGET_RATIO_LONG} long flows (every size), >= {TARGET_RATIO_SHORT_64} short flows at 64 B; \
         added latency of established flows <= {TARGET_ADDED_P50_US} us p50, <= {TARGET_ADDED_P95_US} us p95\n\n"
    ));
    s.push_str(&format!(
        "{:<22} {:>5} {:>5} {:>8} {:>8} {:>6} {:>8}  {:>8} {:>8} {:>8}  {:>8} {:>8} {:>8} {:>5}\n",
        "measurement",
        "frame",
        "flows",
        "Mpps-loc",
        "Mpps-rem",
        "ratio",
        "target",
        "+p50 us",
        "+p95 us",
        "+p99 us",
        "est+p50",
        "est+p95",
        "est+p99",
        "est%"
    ));
    for m in ms {
        let target = m.target_ratio.map_or("-".to_string(), |t| {
            format!("{}{t}", if m.ratio >= t { "ok>=" } else { "NO>=" })
        });
        s.push_str(&format!(
            "{:<22} {:>5} {:>5} {:>8.3} {:>8.3} {:>6.3} {:>8}  {:>8.1} {:>8.1} {:>8.1}  {:>8} {:>8} {:>8} {:>5.0}\n",
            m.name,
            m.frame_size,
            m.flows_name(),
            m.mpps_local,
            m.mpps_remote,
            m.ratio,
            target,
            m.p50_us,
            m.p95_us,
            m.p99_us,
            opt(m.established_p50_us),
            opt(m.established_p95_us),
            opt(m.established_p99_us),
            m.established_share * 100.0
        ));
    }
    let est: Vec<&StateMeasurement> = ms
        .iter()
        .filter(|m| m.established_p50_us.is_some())
        .collect();
    if !est.is_empty() {
        let p50_ok = est
            .iter()
            .filter(|m| {
                m.established_p50_us
                    .is_some_and(|v| v <= TARGET_ADDED_P50_US)
            })
            .count();
        let p95_ok = est
            .iter()
            .filter(|m| {
                m.established_p95_us
                    .is_some_and(|v| v <= TARGET_ADDED_P95_US)
            })
            .count();
        s.push_str(&format!(
            "established-flow latency targets met: p50 {p50_ok}/{n}, p95 {p95_ok}/{n}\n",
            n = est.len()
        ));
    }
    let ratio_ok = ms
        .iter()
        .filter(|m| m.target_ratio.is_some_and(|t| m.ratio >= t))
        .count();
    let ratio_n = ms.iter().filter(|m| m.target_ratio.is_some()).count();
    s.push_str(&format!("throughput targets met: {ratio_ok}/{ratio_n}\n\n"));
    s.push_str(&cached_table(ms));
    s.push_str(&authed_table(ms));
    s.push_str(&secure_table(ms));

    s.push_str(
        "store operations per packet (remote run; smallest frame size of each workload).\n\
         Functions read a flow once per batch, so reads/pkt ~ (distinct flows per batch) / (batch size);\n\
         =local: the local run issued exactly the same operations; c:ops and c:rtrips: what still\n\
         reached the store per packet with the flow cache.\n",
    );
    s.push_str(&format!(
        "{:<9} {:>5} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9}  {:<6} {:>8} {:>8}  {}\n",
        "function",
        "flows",
        "reads",
        "writes",
        "atomics",
        "timers",
        "rtrips",
        "flows/bat",
        "=local",
        "c:ops",
        "c:rtrips",
        "StatelessNF Table 4.1"
    ));
    let mut done: Vec<(&str, FlowsKind)> = Vec::new();
    for m in ms {
        if done.contains(&(m.function.as_str(), m.flows)) {
            continue;
        }
        done.push((m.function.as_str(), m.flows));
        let o = &m.ops_per_packet;
        let (c_ops, c_rt) = m.cached.as_ref().map_or(("-".into(), "-".into()), |c| {
            let o = &c.ops_per_packet;
            (
                format!("{:.3}", o.reads + o.writes + o.atomics + o.timers),
                format!("{:.4}", o.round_trips),
            )
        });
        s.push_str(&format!(
            "{:<9} {:>5} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>9.1}  {:<6} {:>8} {:>8}  {}\n",
            m.function,
            m.flows_name(),
            o.reads,
            o.writes,
            o.atomics,
            o.timers,
            o.round_trips,
            m.flows_per_batch,
            if m.ops_per_packet == m.ops_local {
                "yes"
            } else {
                "NO"
            },
            c_ops,
            c_rt,
            m.paper
        ));
    }
    s
}

impl StateMeasurement {
    fn flows_name(&self) -> &'static str {
        self.flows.name()
    }
}

/// The auth+prefix runs against the plain remote runs of the same rounds.
fn authed_table(ms: &[StateMeasurement]) -> String {
    let rows: Vec<(&StateMeasurement, &CachedMeasurement, f64)> = ms
        .iter()
        .filter_map(|m| Some((m, m.authed.as_ref()?, m.authed_vs_plain?)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "remote as a tenant's ACL user (AUTH on connect, keys under its prefix, restricted \
         commands) against the plain remote run, same rounds\n",
    );
    s.push_str(&format!(
        "{:<22} {:>8} {:>8} {:>6}  {:>8} {:>8}\n",
        "measurement", "Mpps-r", "Mpps-a", "a/r", "+p50 r", "+p50 a"
    ));
    for (m, a, r) in &rows {
        s.push_str(&format!(
            "{:<22} {:>8.3} {:>8.3} {:>6.3}  {:>8.1} {:>8.1}\n",
            m.name, m.mpps_remote, a.mpps, r, m.p50_us, a.added_us[0]
        ));
    }
    let mut ratios: Vec<f64> = rows.iter().map(|r| r.2).collect();
    ratios.sort_by(f64::total_cmp);
    s.push_str(&format!(
        "auth+prefix / plain throughput: min {:.3}, median {:.3}, max {:.3}\n\n",
        ratios[0],
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1]
    ));
    s
}

/// The TLS runs (the tenant's ACL user over `rediss://`) against the plain
/// remote and cached runs of the same rounds.
fn secure_table(ms: &[StateMeasurement]) -> String {
    let rows: Vec<&StateMeasurement> = ms
        .iter()
        .filter(|m| m.secure_vs_plain.is_some() || m.secure_cached_vs_cached.is_some())
        .collect();
    let piped = rows.iter().any(|m| m.secure_pipelined.is_some());
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "TLS + authentication (the tenant's ACL user over rediss://) against plain TCP without \
         a user, same rounds; -c: with the flow cache, not pipelined (`pipeline: 0`); -p: with the flow cache, \
         pipelined (what `state: cached` runs by default)\n",
    );
    s.push_str(&format!(
        "{:<22} {:>8} {:>8} {:>6}  {:>8} {:>8} {:>6}",
        "measurement", "Mpps-r", "Mpps-s", "s/r", "Mpps-c", "Mpps-sc", "sc/c"
    ));
    if piped {
        s.push_str(&format!("  {:>8} {:>8} {:>6}", "Mpps-p", "Mpps-sp", "sp/p"));
    }
    s.push('\n');
    let f = |v: Option<f64>, w: usize, p: usize| match v {
        Some(v) => format!("{v:>w$.p$}"),
        None => format!("{:>w$}", "-"),
    };
    for m in &rows {
        s.push_str(&format!(
            "{:<22} {:>8.3} {} {}  {} {} {}",
            m.name,
            m.mpps_remote,
            f(m.secure.as_ref().map(|x| x.mpps), 8, 3),
            f(m.secure_vs_plain, 6, 3),
            f(m.cached.as_ref().map(|x| x.mpps), 8, 3),
            f(m.secure_cached.as_ref().map(|x| x.mpps), 8, 3),
            f(m.secure_cached_vs_cached, 6, 3),
        ));
        if piped {
            s.push_str(&format!(
                "  {} {} {}",
                f(m.pipelined.as_ref().map(|x| x.mpps), 8, 3),
                f(m.secure_pipelined.as_ref().map(|x| x.mpps), 8, 3),
                f(m.secure_pipelined_vs_pipelined, 6, 3),
            ));
        }
        s.push('\n');
    }
    for (label, mut v) in [
        (
            "TLS+auth / plain throughput",
            rows.iter()
                .filter_map(|m| m.secure_vs_plain)
                .collect::<Vec<_>>(),
        ),
        (
            "with the flow cache, not pipelined, TLS+auth / plain",
            rows.iter()
                .filter_map(|m| m.secure_cached_vs_cached)
                .collect::<Vec<_>>(),
        ),
        (
            "with the flow cache pipelined (the default), TLS+auth / plain",
            rows.iter()
                .filter_map(|m| m.secure_pipelined_vs_pipelined)
                .collect::<Vec<_>>(),
        ),
    ] {
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        s.push_str(&format!(
            "{label}: min {:.3}, median {:.3}, max {:.3}\n",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        ));
    }
    s.push('\n');
    s
}

/// The cached runs: throughput and added latency with the flow cache in front of
/// the remote store, and which targets they meet.
fn cached_table(ms: &[StateMeasurement]) -> String {
    let mut s = run_table(
        ms,
        |m| m.cached.as_ref(),
        "with the flow cache (lease on every flow; owned records cached, refreshes/counters deferred <= 1 ms)",
        "cached",
        "Mpps-c",
    );
    let window = ms
        .iter()
        .find(|m| m.window > 0)
        .map_or(0, |m| m.window * m.batch_size);
    s.push_str(&run_table(
        ms,
        |m| m.pipelined.as_ref(),
        &format!(
            "pipelined (the flow cache, windows of {window} packets in whole batches: the next \
             window's reads in flight while this one is processed, new records held until \
             acknowledged; latency = arrival to release)"
        ),
        "pipelined",
        "Mpps-p",
    ));
    s.push_str(&run_table(
        ms,
        |m| m.paced.as_ref(),
        &format!(
            "pipelined, paced (the same, one batch arriving every {PACED_SLOWDOWN} batch times \
             of the cached run: below capacity, the input idle in between drains the pipeline \
             as `sluice instance` does; Mpps-q counts busy time only, no throughput target; \
             latency = arrival to release)"
        ),
        "paced",
        "Mpps-q",
    ));
    s
}

fn run_table(
    ms: &[StateMeasurement],
    pick: impl Fn(&StateMeasurement) -> Option<&CachedMeasurement>,
    title: &str,
    tag: &str,
    mpps_col: &str,
) -> String {
    let rows: Vec<(&StateMeasurement, &CachedMeasurement)> =
        ms.iter().filter_map(|m| pick(m).map(|c| (m, c))).collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!("{title}\n");
    s.push_str(&format!(
        "{:<22} {:>8} {:>6} {:>8}  {:>8} {:>8} {:>8}  {:>8} {:>8} {:>8} {:>8}\n",
        "measurement",
        mpps_col,
        "ratio",
        "target",
        "+p50 us",
        "+p95 us",
        "+p99 us",
        "est+p50",
        "est+p95",
        "est+p99",
        "rtrip/pk"
    ));
    let (mut ratio_ok, mut ratio_n, mut p50_ok, mut p95_ok, mut est_n) = (0, 0, 0, 0, 0);
    for (m, c) in &rows {
        let target = m.target_ratio.filter(|_| tag != "paced");
        let target = target.map_or("-".to_string(), |t| {
            ratio_n += 1;
            if c.ratio >= t {
                ratio_ok += 1;
            }
            format!("{}{t}", if c.ratio >= t { "ok>=" } else { "NO>=" })
        });
        let e = c.established_added_us;
        if let Some([a, b, _]) = e {
            est_n += 1;
            p50_ok += usize::from(a <= TARGET_ADDED_P50_US);
            p95_ok += usize::from(b <= TARGET_ADDED_P95_US);
        }
        s.push_str(&format!(
            "{:<22} {:>8.3} {:>6.3} {:>8}  {:>8.1} {:>8.1} {:>8.1}  {:>8} {:>8} {:>8} {:>8.4}\n",
            m.name,
            c.mpps,
            c.ratio,
            target,
            c.added_us[0],
            c.added_us[1],
            c.added_us[2],
            opt(e.map(|x| x[0])),
            opt(e.map(|x| x[1])),
            opt(e.map(|x| x[2])),
            c.ops_per_packet.round_trips
        ));
    }
    s.push_str(&format!(
        "{tag}: established-flow latency targets met: p50 {p50_ok}/{est_n}, p95 {p95_ok}/{est_n}; \
         throughput targets met: {ratio_ok}/{ratio_n}\n\n"
    ));
    s
}
