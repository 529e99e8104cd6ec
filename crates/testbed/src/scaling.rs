//! Stratos's scaling experiment (§7.1.2, Table 2 and Fig. 11) on a running lab.
//!
//! An open-loop HTTP client in the tenant's gateway VM requests a file from a web
//! server through a chain of capacity-limited middleboxes (an IPS and a second
//! box in the role of Stratos's redundancy eliminator), at a request rate that
//! ramps up, holds, and then drops. Every second the mean response time (failed
//! requests counted at the timeout) is reported to the controller as the chain's
//! application metric; the chain's scaler (`greedy`, `none` or `all`) decides.
//!
//! The client keeps a fixed number of connections busy at most (as a web tier
//! with a bounded worker pool does); requests beyond them wait in its queue and
//! are shed once they have waited longer than the timeout. The metric is the
//! response time from sending the request to its last byte: it grows with the
//! middleboxes' queues when they are the bottleneck and falls back when they
//! are not, so it both triggers scaling and judges each trial (Stratos).
//! Each sample records the offered and served request rates, the response time,
//! and the instance counts, so the table of maximum throughput, requests/s per
//! instance and time to scale can be drawn for each strategy.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::lab::{other, Lab, LabError, LabState};
use crate::svg;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// The chain whose scaler runs.
    pub chain: String,
    /// Request rate at the start, requests/s.
    pub rate_start: f64,
    /// Request rate at the peak.
    pub rate_peak: f64,
    /// Time to ramp from start to peak.
    pub ramp: Duration,
    /// Time at the peak (the scaler scales up here).
    pub hold: Duration,
    /// Request rate after the peak (Stratos: half), and how long it lasts (the
    /// scaler scales down here).
    pub rate_after: f64,
    /// See `rate_after`.
    pub after: Duration,
    /// Size of the requested file, bytes (Stratos: 100 KB).
    pub object: usize,
    /// A request not answered within this counts as failed.
    pub timeout: Duration,
    /// Concurrent client connections at most (requests beyond wait, and are
    /// shed after `timeout`).
    pub workers: usize,
    /// The server VM.
    pub server: String,
    /// Scaler tuning (milliseconds and fractions, as the controller's API takes).
    pub window_ms: u64,
    /// See `window_ms`.
    pub sustain_ms: u64,
    /// See `window_ms`.
    pub cooldown_ms: u64,
    /// Most instances the chain may have in total.
    pub budget: u32,
    /// Response time at which the scaler stops adding instances, ms.
    pub target_ms: f64,
    /// Relative improvement a trial must bring to be kept.
    pub improve: f64,
    /// Relative worsening, sustained, that triggers scaling.
    pub trigger: f64,
    /// Fraction of a trial window ignored (the previous trial's queue drains).
    pub settle: f64,
    /// `reported` (the client POSTs its mean response time every second) or an
    /// agent metric (`handshake_ms`: the agents time TCP handshakes through the
    /// chain, and the client reports nothing).
    pub metric: String,
}

impl Default for ScalingOptions {
    fn default() -> Self {
        ScalingOptions {
            chain: "web".into(),
            rate_start: 20.0,
            rate_peak: 100.0,
            ramp: Duration::from_secs(30),
            hold: Duration::from_secs(100),
            rate_after: 50.0,
            after: Duration::from_secs(60),
            object: 100 * 1000,
            timeout: Duration::from_secs(5),
            workers: 24,
            server: "srv1".into(),
            window_ms: 5000,
            sustain_ms: 3000,
            cooldown_ms: 10_000,
            budget: 10,
            target_ms: 100.0,
            improve: 0.2,
            settle: 0.5,
            metric: "reported".into(),
            trigger: 0.5,
        }
    }
}

impl ScalingOptions {
    /// The offered request rate `t` after the start.
    pub fn rate(&self, t: Duration) -> f64 {
        if t < self.ramp {
            let f = t.as_secs_f64() / self.ramp.as_secs_f64().max(1e-9);
            self.rate_start + (self.rate_peak - self.rate_start) * f
        } else if t < self.ramp + self.hold {
            self.rate_peak
        } else if t < self.total() {
            self.rate_after
        } else {
            0.0
        }
    }

    /// Length of the run.
    pub fn total(&self) -> Duration {
        self.ramp + self.hold + self.after
    }

    /// The times requests are sent, from the start: the integral of the rate
    /// reaching each whole number.
    pub fn schedule(&self) -> Vec<Duration> {
        let mut out = Vec::new();
        let dt = 0.001;
        let (mut acc, mut t) = (0.0, 0.0);
        let end = self.total().as_secs_f64();
        while t < end {
            acc += self.rate(Duration::from_secs_f64(t)) * dt;
            while acc >= 1.0 {
                out.push(Duration::from_secs_f64(t));
                acc -= 1.0;
            }
            t += dt;
        }
        out
    }
}

/// One second of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since the start (end of this second).
    pub t_s: f64,
    /// Requests sent in it.
    pub offered: u32,
    /// Requests completed in it with the whole file.
    pub served: u32,
    /// Requests that failed or timed out in it.
    pub failed: u32,
    /// Mean response time (request sent to last byte) of the requests finished
    /// in it, failures counted at the timeout, ms: the metric the scaler sees.
    pub mean_ms: f64,
    /// Of `failed`, requests shed unsent after waiting `timeout` in the client.
    pub shed: u32,
    /// Instances per middlebox of the chain at its end.
    pub counts: BTreeMap<String, u32>,
}

/// One strategy's run.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingRun {
    /// `greedy`, `none` or `all`.
    pub strategy: String,
    /// Per second.
    pub seconds: Vec<Second>,
    /// The scaler's and the controller's events during the run (kind and reason).
    pub events: Vec<String>,
    /// Highest served requests/s over 5 s.
    pub max_throughput: f64,
    /// Served requests/s over the last 10 s of the peak.
    pub peak_end_throughput: f64,
    /// Instances of the chain at the end of the peak.
    pub peak_end_instances: u32,
    /// `peak_end_throughput / peak_end_instances`.
    pub per_instance: f64,
    /// From the first instance-count change to the last one during the peak, s.
    pub scale_time_s: f64,
    /// Instances at the end of the run (after the drop).
    pub end_instances: u32,
    /// Served requests/s over the last 10 s of the run.
    pub end_throughput: f64,
}

/// One request: connect, GET, read to the end. Ok if the whole body came.
fn fetch(addr: SocketAddr, path: &str, want: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let req = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", addr.ip());
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 16384];
    let mut got = 0usize;
    let mut body_at: Option<usize> = None;
    let mut head = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                if body_at.is_none() {
                    head.extend_from_slice(&buf[..n]);
                    if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        body_at = Some(i + 4);
                        if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200")
                        {
                            return false;
                        }
                    }
                }
            }
            Err(_) => return false,
        }
    }
    body_at.is_some_and(|b| got - b >= want)
}

/// A finished request: when it was due, sent (None: shed unsent), finished,
/// and whether the whole file came.
type Done = (Duration, Option<Duration>, Duration, bool);

/// Runs the open-loop client inside the gateway VM's namespace on a thread of
/// its own; results arrive on the returned channel.
fn start_client(
    lab: &Lab,
    o: &ScalingOptions,
    t0: Instant,
) -> Result<mpsc::Receiver<Done>, LabError> {
    let st = lab.state();
    let gw = st
        .vm("gateway")
        .ok_or_else(|| other("the lab has no gateway VM"))?
        .netns
        .clone();
    let srv = st
        .vm(&o.server)
        .ok_or_else(|| other(format!("no VM `{}` in the lab", o.server)))?;
    let addr: SocketAddr = format!("{}:80", srv.addrs[0]).parse().map_err(other)?;
    let (tx, rx) = mpsc::channel::<Done>();
    let schedule = o.schedule();
    let (workers, timeout, want) = (o.workers, o.timeout, o.object);
    std::thread::spawn(move || {
        let _ = crate::run_in(&gw, move || {
            // Threads started here inherit the namespace.
            let (ttx, trx) = mpsc::channel::<Duration>();
            let trx = Arc::new(Mutex::new(trx));
            let mut pool = Vec::new();
            for _ in 0..workers {
                let (trx, tx) = (Arc::clone(&trx), tx.clone());
                pool.push(std::thread::spawn(move || loop {
                    let due = match trx.lock() {
                        Ok(r) => match r.recv() {
                            Ok(d) => d,
                            Err(_) => return,
                        },
                        Err(_) => return,
                    };
                    let sent = t0.elapsed();
                    let done = if sent.saturating_sub(due) > timeout {
                        (due, None, sent, false)
                    } else {
                        let ok = fetch(addr, "/object", want, timeout);
                        (due, Some(sent), t0.elapsed(), ok)
                    };
                    if tx.send(done).is_err() {
                        return;
                    }
                }));
            }
            for due in schedule {
                let now = t0.elapsed();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if ttx.send(due).is_err() {
                    break;
                }
            }
            drop(ttx);
            for w in pool {
                let _ = w.join();
            }
        });
    });
    Ok(rx)
}

fn api<T: serde::de::DeserializeOwned>(
    st: &LabState,
    method: &str,
    url: &str,
    body: Option<serde_json::Value>,
) -> Result<T, LabError> {
    let r = st
        .http()
        .request(method, url)
        .timeout(Duration::from_secs(5))
        .set("Authorization", &st.bearer());
    let r = match body {
        Some(b) => r.send_json(b),
        None => r.call(),
    };
    match r {
        Ok(resp) => resp.into_json().map_err(other),
        Err(ureq::Error::Status(code, resp)) => Err(other(format!(
            "{method} {url}: {code} {}",
            resp.into_string().unwrap_or_default()
        ))),
        Err(e) => Err(other(format!("{method} {url}: {e}"))),
    }
}

/// Runs one strategy in `lab` (brought up with web servers and a spec shaped
/// like `examples/experiments/scaling.yaml`, every middlebox at one instance).
pub fn scaling(lab: &Lab, o: &ScalingOptions, strategy: &str) -> Result<ScalingRun, LabError> {
    let st = lab.state();
    let srv = st
        .vm(&o.server)
        .ok_or_else(|| other(format!("no VM `{}` in the lab", o.server)))?;
    let root = st.dir.join(format!("www-{}", srv.name));
    std::fs::write(root.join("object"), crate::experiments::payload(o.object)).map_err(other)?;
    let base = format!(
        "{}/v1/tenants/{}/chains/{}",
        st.controller, st.tenant, o.chain
    );
    let reported = o.metric == "reported";
    let mut cfg = serde_json::json!({
        "strategy": strategy,
        "metric": o.metric,
        "improve": o.improve,
        "trigger": o.trigger,
        "target": o.target_ms,
        "sustain_ms": o.sustain_ms,
        "window_ms": o.window_ms,
        "settle": o.settle,
        "cooldown_ms": o.cooldown_ms,
        "budget": o.budget,
    });
    if reported {
        cfg["direction"] = "lower".into();
    }
    let _: serde_json::Value = api(st, "PUT", &format!("{base}/scaling"), Some(cfg))?;
    let events_url = format!("{}/v1/events", st.controller);
    let first_event = api::<Vec<serde_json::Value>>(st, "GET", &events_url, None)?
        .iter()
        .filter_map(|e| e["id"].as_u64())
        .max()
        .unwrap_or(0);

    let t0 = Instant::now();
    let t0_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let rx = start_client(lab, o, t0)?;
    let mut seconds: Vec<Second> = Vec::new();
    let schedule = o.schedule();
    let mut next = Duration::from_secs(1);
    let mut pending: Vec<Done> = Vec::new();
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let end = o.total() + o.timeout + Duration::from_secs(1);
    while t0.elapsed() < end {
        let now = t0.elapsed();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            while let Ok(d) = rx.try_recv() {
                pending.push(d);
            }
            continue;
        }
        let from = next - Duration::from_secs(1);
        let (mut served, mut failed, mut shed, mut sum_ms, mut n) = (0u32, 0u32, 0u32, 0.0, 0u32);
        pending.retain(|&(_due, sent, done, ok)| {
            if done >= next {
                return true;
            }
            match sent {
                None => {
                    shed += 1;
                    failed += 1;
                    return false;
                }
                Some(_) if !ok => {
                    failed += 1;
                    sum_ms += o.timeout.as_secs_f64() * 1e3;
                }
                Some(at) => {
                    served += 1;
                    sum_ms += done.saturating_sub(at).as_secs_f64() * 1e3;
                }
            }
            n += 1;
            false
        });
        let offered = schedule.iter().filter(|&&d| d >= from && d < next).count() as u32;
        let mean_ms = if n > 0 { sum_ms / n as f64 } else { 0.0 };
        let ack = if !reported {
            // The agents measure; the client only watches the counts.
            api::<serde_json::Value>(st, "GET", &format!("{base}/scaling"), None).ok()
        } else if n > 0 {
            // The application's own report, as Stratos's tenants give it.
            api::<serde_json::Value>(
                st,
                "POST",
                &format!("{base}/metrics"),
                Some(serde_json::json!({ "value": mean_ms, "at_ms": next.as_millis() as u64 })),
            )
            .ok()
        } else {
            None
        };
        if let Some(c) = ack.as_ref().and_then(|a| a["counts"].as_object()) {
            counts = c
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0) as u32))
                .collect();
        }
        seconds.push(Second {
            t_s: next.as_secs_f64(),
            offered,
            served,
            failed,
            mean_ms,
            shed,
            counts: counts.clone(),
        });
        next += Duration::from_secs(1);
    }
    let events: Vec<String> = api::<Vec<serde_json::Value>>(st, "GET", &events_url, None)?
        .iter()
        .filter(|e| e["id"].as_u64().is_some_and(|i| i > first_event))
        .filter(|e| e["chain"].as_str().is_none_or(|c| c == o.chain))
        .map(|e| {
            format!(
                "{:>6.1} s  {:<8} {}",
                (e["at_ms"].as_u64().unwrap_or(0) as f64 - t0_unix_ms as f64) / 1e3,
                e["kind"].as_str().unwrap_or("?"),
                e["reason"].as_str().unwrap_or("")
            )
        })
        .collect();
    // Disarm the scaler so nothing changes while the lab goes down.
    let _ = st
        .http()
        .delete(&format!("{base}/scaling"))
        .set("Authorization", &st.bearer())
        .call();
    Ok(summarise(strategy, o, seconds, events))
}

/// The table's numbers from a run's seconds.
pub fn summarise(
    strategy: &str,
    o: &ScalingOptions,
    seconds: Vec<Second>,
    events: Vec<String>,
) -> ScalingRun {
    let total = |s: &Second| s.counts.values().sum::<u32>();
    let avg = |w: &[Second]| w.iter().map(|s| s.served as f64).sum::<f64>() / w.len().max(1) as f64;
    let max_throughput = seconds.windows(5).map(avg).fold(0.0, f64::max);
    let peak_end = (o.ramp + o.hold).as_secs() as usize;
    let at = |i: usize| seconds.get(i.min(seconds.len().saturating_sub(1)));
    let lo = peak_end.saturating_sub(10).min(seconds.len());
    let hi = peak_end.min(seconds.len());
    let peak_end_throughput = avg(&seconds[lo..hi]);
    let peak_end_instances = at(peak_end.saturating_sub(1)).map(total).unwrap_or(0);
    let changes: Vec<f64> = seconds
        .windows(2)
        .filter(|w| w[0].counts != w[1].counts && !w[0].counts.is_empty())
        .map(|w| w[1].t_s)
        .filter(|&t| t <= peak_end as f64)
        .collect();
    let scale_time_s = match (changes.first(), changes.last()) {
        (Some(a), Some(b)) => b - a + 1.0,
        _ => 0.0,
    };
    let n = seconds.len();
    let end_throughput = avg(&seconds[n.saturating_sub(10)..]);
    let end_instances = seconds.last().map(total).unwrap_or(0);
    ScalingRun {
        strategy: strategy.into(),
        max_throughput,
        peak_end_throughput,
        peak_end_instances,
        per_instance: if peak_end_instances > 0 {
            peak_end_throughput / peak_end_instances as f64
        } else {
            0.0
        },
        scale_time_s,
        end_instances,
        end_throughput,
        seconds,
        events,
    }
}

/// Prints the runs: Stratos Table 2's columns, then each run's timeline.
pub fn print_scaling(runs: &[ScalingRun]) {
    println!(
        "{:<8} {:>14} {:>16} {:>12} {:>11} {:>14} {:>10}",
        "strategy",
        "max req/s (5s)",
        "peak-end req/s",
        "instances",
        "req/s/inst",
        "time to scale",
        "after drop"
    );
    for r in runs {
        println!(
            "{:<8} {:>14.1} {:>16.1} {:>12} {:>11.1} {:>12.0} s {:>4.1}/{:<3}",
            r.strategy,
            r.max_throughput,
            r.peak_end_throughput,
            r.peak_end_instances,
            r.per_instance,
            r.scale_time_s,
            r.end_throughput,
            r.end_instances
        );
    }
    for r in runs {
        println!(
            "\n{}: t s, offered, served, failed, mean ms, instances",
            r.strategy
        );
        for s in r.seconds.iter().step_by(5) {
            let c: Vec<String> = s.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!(
                "{:>6.0} {:>5} {:>5} {:>5} {:>8.0}  {}",
                s.t_s,
                s.offered,
                s.served,
                s.failed,
                s.mean_ms,
                c.join(" ")
            );
        }
        for e in &r.events {
            println!("  {e}");
        }
    }
}

/// The runs' seconds as CSV: `strategy,t_s,offered,served,failed,mean_ms,instances`.
pub fn csv(runs: &[ScalingRun]) -> String {
    let mut s = String::from("strategy,t_s,offered,served,failed,mean_ms,instances\n");
    for r in runs {
        for x in &r.seconds {
            s.push_str(&format!(
                "{},{:.0},{},{},{},{:.1},{}\n",
                r.strategy,
                x.t_s,
                x.offered,
                x.served,
                x.failed,
                x.mean_ms,
                x.counts.values().sum::<u32>()
            ));
        }
    }
    s
}

/// The runs as an SVG: served requests/s over time (offered dashed) above, the
/// chain's instances over time below, one colour per strategy (Stratos Fig. 11).
pub fn svg(runs: &[ScalingRun]) -> String {
    let (w, ph, l) = (720.0, 220.0, 60.0);
    let h = 2.0 * ph + 60.0;
    let t_max = runs
        .iter()
        .flat_map(|r| r.seconds.iter().map(|s| s.t_s))
        .fold(1.0f64, f64::max);
    let r_max = runs
        .iter()
        .flat_map(|r| r.seconds.iter().map(|s| s.served.max(s.offered) as f64))
        .fold(1.0f64, f64::max)
        * 1.1;
    let i_max = runs
        .iter()
        .flat_map(|r| {
            r.seconds
                .iter()
                .map(|s| s.counts.values().sum::<u32>() as f64)
        })
        .fold(1.0f64, f64::max)
        + 1.0;
    let x = |t: f64| l + (w - l - 20.0) * t / t_max;
    // Panel `k` (0 top, 1 bottom): its value `v` of `max` to a y coordinate.
    let y = |k: f64, v: f64, max: f64| 20.0 + k * (ph + 30.0) + ph - ph * v / max;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (k, label, max) in [(0.0, "served req/s", r_max), (1.0, "instances", i_max)] {
        let (top, bottom) = (y(k, max, max), y(k, 0.0, max));
        s.push_str(&format!(
            "<line x1=\"{l}\" y1=\"{top:.1}\" x2=\"{l}\" y2=\"{bottom:.1}\" stroke=\"black\"/>\n\
             <line x1=\"{l}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{label}</text>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>\n",
            w - 20.0,
            l + 6.0,
            top + 12.0,
            l - 4.0,
            top + 4.0,
            max,
            l - 4.0,
            bottom + 4.0,
        ));
    }
    s.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time (s)</text>\n",
        (w + l) / 2.0,
        h - 6.0
    ));
    if let Some(r) = runs.first() {
        s.push_str(&svg::dashed(
            r.seconds
                .iter()
                .map(|p| (x(p.t_s), y(0.0, p.offered as f64, r_max))),
        ));
    }
    let mut legend = vec![("offered".to_string(), "black")];
    for (i, r) in runs.iter().enumerate() {
        let c = svg::COLOURS[i % svg::COLOURS.len()];
        for (k, max, v) in [
            (
                0.0,
                r_max,
                &(|p: &Second| p.served as f64) as &dyn Fn(&Second) -> f64,
            ),
            (1.0, i_max, &|p: &Second| {
                p.counts.values().sum::<u32>() as f64
            }),
        ] {
            s.push_str(&svg::polyline(
                r.seconds.iter().map(|p| (x(p.t_s), y(k, v(p), max))),
                c,
            ));
        }
        legend.push((r.strategy.clone(), c));
    }
    s.push_str(&svg::legend(&legend, w - 140.0));
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_follows_the_rate() {
        let o = ScalingOptions {
            rate_start: 10.0,
            rate_peak: 30.0,
            ramp: Duration::from_secs(10),
            hold: Duration::from_secs(10),
            rate_after: 15.0,
            after: Duration::from_secs(10),
            ..ScalingOptions::default()
        };
        let s = o.schedule();
        let between = |a: u64, b: u64| {
            s.iter()
                .filter(|d| **d >= Duration::from_secs(a) && **d < Duration::from_secs(b))
                .count() as i64
        };
        // Ramp: the mean of 10 and 30 over 10 s; peak 30/s; after 15/s.
        assert!((between(0, 10) - 200).abs() <= 1, "{}", between(0, 10));
        assert!((between(10, 20) - 300).abs() <= 1);
        assert!((between(20, 30) - 150).abs() <= 1);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(o.rate(Duration::from_secs(31)), 0.0);
    }

    #[test]
    fn the_summary_reads_throughput_instances_and_time_to_scale() {
        let o = ScalingOptions {
            ramp: Duration::from_secs(2),
            hold: Duration::from_secs(10),
            after: Duration::from_secs(10),
            ..ScalingOptions::default()
        };
        let sec = |t: u64, served: u32, ips: u32| Second {
            t_s: t as f64,
            offered: 50,
            served,
            failed: 0,
            mean_ms: 10.0,
            shed: 0,
            counts: [("ips".to_string(), ips), ("re".to_string(), 1)].into(),
        };
        let seconds: Vec<Second> = (1..=22)
            .map(|t| match t {
                1..=3 => sec(t, 20, 1),
                4..=6 => sec(t, 35, 2),
                7..=12 => sec(t, 50, 3),
                _ => sec(t, 25, 2),
            })
            .collect();
        let r = summarise("greedy", &o, seconds, vec![]);
        assert_eq!(r.max_throughput, 50.0);
        assert_eq!(r.peak_end_instances, 4, "3 ips + 1 re at 12 s");
        assert_eq!(r.per_instance, r.peak_end_throughput / 4.0);
        // Counts changed at 4 s and at 7 s.
        assert_eq!(r.scale_time_s, 4.0);
        assert_eq!((r.end_instances, r.end_throughput), (3, 25.0));
        let runs = [r];
        assert!(csv(&runs).lines().count() == 23);
        let svg = svg(&runs);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("<polyline").count(),
            3,
            "offered, served, instances"
        );
    }
}
