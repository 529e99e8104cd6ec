//! What the flow cache itself costs the IPS at 64 bytes, apart from the
//! store behind it: `sluice bench state`'s `ips_long_64` workload run with
//! local state, then with the flow cache in front of a [`LocalStore`]
//! (`c`) or of a private Redis (`r`), alternated, the fastest of each kept.
//!
//! ```sh
//! cargo build --release -p sluice-bench --example cache_overhead
//! ./target/release/examples/cache_overhead r 5   # local vs cached over Redis, 5 rounds
//! ./target/release/examples/cache_overhead c 5   # local vs cached over a LocalStore
//! ```
//!
//! `sluice bench state` reports the same ratio among many others; this runs
//! only the one row, so it can be repeated or profiled (`perf record`) and
//! two builds alternated quickly (docs/BENCHMARKS.md, "the IPS's
//! remote-state ratio with the flow cache, re-measured").

use sluice_bench::nf;
use sluice_bench::state::{
    open_remote, run_once, run_once_mode, store_or_private, FlowsKind, RunMode, Workload,
};
use sluice_state::{LocalStore, StateStore};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let behind = args.next().unwrap_or_else(|| "r".to_string());
    if behind != "r" && behind != "c" {
        return Err(format!(
            "unknown store `{behind}`: use r (Redis) or c (a LocalStore)"
        ));
    }
    let rounds: usize = match args.next() {
        None => 5,
        Some(s) => s
            .parse()
            .map_err(|_| format!("rounds: `{s}` is not a number"))?,
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (_server, url) = store_or_private(None)?;
    let spec = nf::load_spec(dir.path(), &nf::ips_chain(100))?;
    let mut w = Workload::new(FlowsKind::Long, 64, 200_000, 32);
    // Timestamps spaced at the local run's rate, as `sluice bench state` does.
    let cal = run_once(&spec, dir.path(), "cal", &w, &mut LocalStore::new(), false)?;
    w.trace
        .restamp((cal.secs * 1e9 / cal.packets as f64).round().max(1.0) as u64);
    let (mut local, mut cached) = (f64::MAX, f64::MAX);
    for r in 0..rounds.max(1) {
        let name = format!("l{r}");
        let o = run_once_mode(
            &spec,
            dir.path(),
            &name,
            &w,
            &mut LocalStore::new(),
            false,
            RunMode::Plain,
        )?;
        local = local.min(o.secs);
        let mut store: Box<dyn StateStore> = if behind == "r" {
            open_remote(&url)?
        } else {
            Box::new(LocalStore::new())
        };
        let name = format!("c{r}");
        let o = run_once_mode(
            &spec,
            dir.path(),
            &name,
            &w,
            &mut *store,
            false,
            RunMode::Cached,
        )?;
        cached = cached.min(o.secs);
    }
    let n = w.trace.len() as f64;
    println!(
        "local {:.3} Mpps, cached over {} {:.3} Mpps, ratio {:.3}",
        n / local / 1e6,
        if behind == "r" {
            "Redis"
        } else {
            "a LocalStore"
        },
        n / cached / 1e6,
        local / cached
    );
    Ok(())
}
