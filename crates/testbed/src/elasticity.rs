//! StatelessNF's elasticity experiment (Fig. 4.8) on a running lab.
//!
//! Long HTTP downloads cross a middlebox that starts with one instance. Groups of
//! downloads start one step apart (the send rate ramps up), all run for a while,
//! then end one step apart (it ramps down). At the peak the middlebox is scaled
//! out to two instances through the controller's API, and scaled back in half way
//! down. Every sample records the goodput the clients actually receive (the growth
//! of the downloaded files) next to the ideal (the sum of the running downloads'
//! rates), so the cost of a changed split shows as a dip below the ideal.
//!
//! What a changed split does depends on the middlebox's `state` and `affinity`:
//! with state in the store (`shared`, `hash`) the moved flows carry on at the
//! other instance; with state inside the instances and a plain hash split
//! (`local`, `hash`: StatelessNF's baseline) the moved flows reach an instance
//! that never saw them; with pinned flows (`local`, `pinned`: the drain mode) no
//! flow moves, so a new instance relieves only new flows.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::experiments::payload;
use crate::lab::{other, Lab, LabError, LabState};
use crate::svg;

/// What to run.
#[derive(Debug, Clone)]
pub struct ElasticityOptions {
    /// Groups of downloads started one step apart (the ramp up), and ended one
    /// step apart (the ramp down).
    pub steps: usize,
    /// Downloads per group.
    pub flows_per_step: usize,
    /// Time between groups.
    pub step: Duration,
    /// Steps at the peak, after the last group started and before the first ends.
    pub hold_steps: usize,
    /// Rate of each download, KiB/s (the server's `limit_rate`).
    pub rate_kib: u64,
    /// The middlebox scaled out and in.
    pub middlebox: String,
    /// Client address (in the gateway VM).
    pub client: String,
    /// Server VM name (serves the file).
    pub server: String,
    /// Time between goodput samples.
    pub sample: Duration,
    /// Scale out half a step after this group started (None: the last, the
    /// peak). Earlier, new flows still start after the scale-out, which is what
    /// a pinned group can give the new instance.
    pub scale_out_after: Option<usize>,
}

impl Default for ElasticityOptions {
    fn default() -> Self {
        ElasticityOptions {
            steps: 5,
            flows_per_step: 4,
            step: Duration::from_secs(2),
            hold_steps: 2,
            rate_kib: 1024,
            middlebox: "fw".into(),
            client: "198.51.100.10".into(),
            server: "srv1".into(),
            sample: Duration::from_millis(500),
            scale_out_after: None,
        }
    }
}

impl ElasticityOptions {
    /// How long every download lasts at its rate.
    pub fn duration(&self) -> Duration {
        self.step * (self.steps + self.hold_steps) as u32
    }

    /// Bytes of each download.
    pub fn size(&self) -> usize {
        (self.rate_kib as f64 * 1024.0 * self.duration().as_secs_f64()) as usize
    }

    /// When group `g` starts, from the start of the run.
    fn start_of(&self, g: usize) -> Duration {
        self.step * g as u32
    }

    /// When the middlebox is scaled out: half a step after the last group
    /// started (or the group `scale_out_after` names).
    pub fn scale_out_at(&self) -> Duration {
        let last = self.steps.saturating_sub(1);
        self.start_of(self.scale_out_after.unwrap_or(last).min(last)) + self.step / 2
    }

    /// When it is scaled back in: half way down the ramp (about half the groups
    /// still running).
    pub fn scale_in_at(&self) -> Duration {
        (self.duration() + self.step * (self.steps / 2) as u32).saturating_sub(self.step / 2)
    }

    /// The ideal goodput at `t` after the start, Mbit/s: every running download
    /// at its rate.
    pub fn ideal_mbps(&self, t: Duration) -> f64 {
        let running = (0..self.steps)
            .filter(|&g| {
                let s = self.start_of(g);
                t >= s && t < s + self.duration()
            })
            .count()
            * self.flows_per_step;
        running as f64 * self.rate_kib as f64 * 1024.0 * 8.0 / 1e6
    }
}

/// One goodput sample.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the first download started.
    pub t_s: f64,
    /// What the running downloads would receive at their rates, Mbit/s.
    pub ideal_mbps: f64,
    /// What the clients received since the previous sample, Mbit/s.
    pub goodput_mbps: f64,
}

/// One variant's run.
#[derive(Debug, Clone, Serialize)]
pub struct ElasticityRun {
    /// `state`/`affinity` of the middlebox, e.g. `shared/hash`.
    pub label: String,
    /// Goodput over time.
    pub samples: Vec<Sample>,
    /// Downloads that finished with every byte identical.
    pub identical: usize,
    /// Downloads that failed, timed out or came back different.
    pub failed: usize,
    /// curl's verdicts of a few failed ones.
    pub failures: Vec<String>,
    /// When the scale-out and scale-in requests were sent, seconds from the start.
    pub scale_out_at_s: f64,
    /// See `scale_out_at_s`.
    pub scale_in_at_s: f64,
    /// From the scale-out request to the first packet the new instance received,
    /// ms (None: it received none).
    pub scale_out_to_first_packet_ms: Option<f64>,
    /// From the scale-out request to the controller's answer (the new
    /// configuration pushed), ms.
    pub scale_out_api_ms: f64,
    /// Of the packets the middlebox's two instances received between the
    /// scale-out and the scale-in, the new instance's share.
    #[serde(default)]
    pub new_instance_share: Option<f64>,
    /// Frames the middlebox's instances dropped during the run.
    pub middlebox_drops: u64,
    /// Packets the middlebox's instances received during the run.
    #[serde(default)]
    pub middlebox_packets: u64,
    /// Commands the state store processed during the run per packet the
    /// middlebox received (the middlebox is the store's only user in the
    /// experiment): what its flow cache saves shows here.
    #[serde(default)]
    pub store_commands_per_packet: Option<f64>,
    /// Bytes received over the ideal bytes while the ideal was above zero.
    pub goodput_ratio: f64,
    /// From the start to the last download's end, seconds.
    pub total_s: f64,
}

/// Records the drop and receive counters of the instances of
/// `tenant/middlebox/*` (the highest seen per instance, so an instance removed
/// by a scale-in keeps its count).
fn note_counts(
    http: &ureq::Agent,
    apis: &[String],
    prefix: &str,
    seen: &mut BTreeMap<String, (u64, u64)>,
) {
    for h in health(http, apis) {
        if let Some(n) = h["name"].as_str().filter(|n| n.starts_with(prefix)) {
            let d = h["drops"].as_u64().unwrap_or(0);
            let rx = h["rx_packets"].as_u64().unwrap_or(0);
            let e = seen.entry(n.to_string()).or_default();
            *e = (e.0.max(d), e.1.max(rx));
        }
    }
}

/// Commands the lab's Redis has processed so far (None if it cannot tell),
/// asked as the store's admin (the lab's store requires authentication).
fn store_commands(store_url: &str) -> Option<u64> {
    sluice_state_redis::acl::Admin::open(store_url)
        .ok()?
        .info_field("stats", "total_commands_processed")
        .ok()
}

/// Every agent's instance health records (`apis`: the agents' API URLs).
fn health(http: &ureq::Agent, apis: &[String]) -> Vec<serde_json::Value> {
    crate::experiments::agent_statuses(http, apis)
        .into_iter()
        .flat_map(|v| v["health"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn scale(st: &LabState, tenant: &str, middlebox: &str, n: u32) -> Result<(), LabError> {
    st.http()
        .put(&format!(
            "{}/v1/tenants/{tenant}/middleboxes/{middlebox}",
            st.controller
        ))
        .set("Authorization", &st.bearer())
        .send_json(serde_json::json!({ "instances": n }))
        .map_err(|e| other(format!("scale {middlebox} to {n}: {e}")))?;
    Ok(())
}

/// Polls the agents until instance `name` has received a packet, for at most
/// `within`. Returns when it did, or None.
/// Packets each instance of `prefix*` received so far, by name.
fn instance_rx(http: &ureq::Agent, apis: &[String], prefix: &str) -> BTreeMap<String, u64> {
    health(http, apis)
        .iter()
        .filter_map(|h| {
            let name = h["name"].as_str()?;
            name.starts_with(prefix)
                .then(|| (name.to_string(), h["rx_packets"].as_u64().unwrap_or(0)))
        })
        .collect()
}

/// The new instance's share of the packets received between two snapshots.
fn share_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    new: &str,
) -> Option<f64> {
    let delta = |n: &str| {
        after
            .get(n)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(n).copied().unwrap_or(0))
    };
    let total: u64 = after.keys().map(|n| delta(n)).sum();
    (total > 0).then(|| delta(new) as f64 / total as f64)
}

fn wait_first_packet(
    http: &ureq::Agent,
    apis: &[String],
    name: &str,
    within: Duration,
) -> Option<Instant> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let got = health(http, apis)
            .iter()
            .any(|h| h["name"].as_str() == Some(name) && h["rx_packets"].as_u64().unwrap_or(0) > 0);
        if got {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

fn spawn_download(
    lab: &Lab,
    o: &ElasticityOptions,
    file: &Path,
    url: &str,
) -> Result<Child, LabError> {
    let gw = lab
        .state()
        .vm("gateway")
        .ok_or_else(|| other("the lab has no gateway VM"))?;
    let max = o.duration() + Duration::from_secs(30) + o.step * o.steps as u32;
    Command::new("ip")
        .args(["netns", "exec", &gw.netns, "curl", "-s", "-o"])
        .arg(file)
        .args(["--max-time", &max.as_secs().to_string()])
        .args(["--interface", &o.client])
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| other(format!("curl: {e}")))
}

fn downloaded(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// Runs the experiment once in `lab` (brought up with web servers and a spec
/// shaped like `examples/experiments/elasticity.yaml`), the middlebox starting at
/// one instance. `label` names the variant in the report.
pub fn elasticity(
    lab: &Lab,
    o: &ElasticityOptions,
    label: &str,
) -> Result<ElasticityRun, LabError> {
    let st = lab.state();
    let srv = st
        .vm(&o.server)
        .ok_or_else(|| other(format!("no VM `{}` in the lab", o.server)))?;
    // Paced by the server (nginx `limit_rate`), so the network carries the
    // rate smoothly instead of in receive-buffer bursts.
    let url = format!(
        "http://{}/paced/ramp?rate={}",
        srv.addrs[0],
        o.rate_kib * 1024
    );
    let want = payload(o.size());
    let root: PathBuf = st.dir.join(format!("www-{}", o.server));
    fs::write(root.join("ramp"), &want).map_err(other)?;
    let out = st.dir.join("ramp-downloads");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).map_err(other)?;
    let prefix = format!("{}/{}/", st.tenant, o.middlebox);
    let new_instance = format!("{prefix}1");
    let mut drops0 = BTreeMap::new();
    let apis: Vec<String> = st.hosts.iter().map(|h| h.api.clone()).collect();
    let agents = st.http();
    note_counts(&agents, &apis, &prefix, &mut drops0);
    let mut drops = drops0.clone();
    let commands0 = store_commands(&st.store);

    let t0 = Instant::now();
    let mut kids: Vec<Child> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut samples = Vec::new();
    let (mut last_t, mut last_bytes) = (Duration::ZERO, 0u64);
    let (mut scaled_out, mut scaled_in) = (false, false);
    let (mut out_at, mut in_at) = (0.0, 0.0);
    let mut next_group = 0;
    let mut next_sample = o.sample;
    let mut scale_in: Option<std::thread::JoinHandle<Result<(), LabError>>> = None;
    type ScaleOut = Result<(f64, Option<f64>), LabError>;
    let mut scale_out: Option<std::thread::JoinHandle<ScaleOut>> = None;
    let mut rx_at_out = BTreeMap::new();
    let mut new_share = None;
    loop {
        let t = t0.elapsed();
        while next_group < o.steps && t >= o.start_of(next_group) {
            for k in 0..o.flows_per_step {
                let f = out.join(format!("g{next_group}-{k}"));
                kids.push(spawn_download(lab, o, &f, &url)?);
                files.push(f);
            }
            next_group += 1;
        }
        if !scaled_out && t >= o.scale_out_at() {
            scaled_out = true;
            out_at = t.as_secs_f64();
            rx_at_out = instance_rx(&agents, &apis, &prefix);
            // In the background, so sampling goes on: the request, then polling
            // the agents until the new instance has seen a packet (a pinned group
            // may send it none until new flows start).
            let (c, tn, mb) = (st.clone(), st.tenant.clone(), o.middlebox.clone());
            let (apis, name, agents) = (apis.clone(), new_instance.clone(), agents.clone());
            scale_out = Some(std::thread::spawn(move || {
                let d = Instant::now();
                scale(&c, &tn, &mb, 2)?;
                let api_ms = d.elapsed().as_secs_f64() * 1e3;
                let first = wait_first_packet(&agents, &apis, &name, Duration::from_secs(5))
                    .map(|at| at.duration_since(d).as_secs_f64() * 1e3);
                Ok((api_ms, first))
            }));
        }
        if !scaled_in && t >= o.scale_in_at() {
            scaled_in = true;
            in_at = t.as_secs_f64();
            new_share = share_between(
                &rx_at_out,
                &instance_rx(&agents, &apis, &prefix),
                &new_instance,
            );
            // In the background: a drain (pinned local state) answers only once
            // the instance's flows have ended, and sampling must go on meanwhile.
            let (c, tn, mb) = (st.clone(), st.tenant.clone(), o.middlebox.clone());
            scale_in = Some(std::thread::spawn(move || scale(&c, &tn, &mb, 1)));
        }
        let t = t0.elapsed();
        if t >= next_sample {
            let bytes = downloaded(&files);
            let dt = (t - last_t).as_secs_f64();
            samples.push(Sample {
                t_s: t.as_secs_f64(),
                ideal_mbps: o.ideal_mbps(t),
                goodput_mbps: (bytes - last_bytes.min(bytes)) as f64 * 8.0 / 1e6 / dt,
            });
            (last_t, last_bytes) = (t, bytes);
            note_counts(&agents, &apis, &prefix, &mut drops);
            next_sample = t + o.sample;
        }
        let all_started = next_group >= o.steps;
        if all_started && scaled_in && kids.iter_mut().all(|k| matches!(k.try_wait(), Ok(Some(_))))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let total_s = t0.elapsed().as_secs_f64();
    let (api_ms, first_packet_ms) = match scale_out {
        Some(h) => h
            .join()
            .map_err(|_| other("the scale-out request panicked"))??,
        None => (0.0, None),
    };
    if let Some(h) = scale_in {
        h.join()
            .map_err(|_| other("the scale-in request panicked"))??;
    }
    let mut identical = 0;
    let mut failures = Vec::new();
    for (i, mut k) in kids.into_iter().enumerate() {
        let st = k.wait().map_err(other)?;
        let got = fs::read(&files[i]).unwrap_or_default();
        if st.success() && got == want {
            identical += 1;
        } else if failures.len() < 5 {
            failures.push(format!(
                "{}: curl exit {:?}, {} of {} bytes",
                files[i].file_name().and_then(|n| n.to_str()).unwrap_or("?"),
                st.code(),
                got.len(),
                want.len()
            ));
        }
    }
    let _ = fs::remove_dir_all(&out);
    // After the last download, so every instance reported its packets.
    std::thread::sleep(Duration::from_millis(100));
    note_counts(&agents, &apis, &prefix, &mut drops);
    let since = |now: &BTreeMap<String, (u64, u64)>,
                 then: &BTreeMap<String, (u64, u64)>,
                 f: fn(&(u64, u64)) -> u64| {
        now.iter()
            .map(|(n, c)| f(c).saturating_sub(then.get(n).map_or(0, f)))
            .sum::<u64>()
    };
    let middlebox_packets = since(&drops, &drops0, |c| c.1);
    let store_commands_per_packet = match (commands0, store_commands(&st.store)) {
        (Some(a), Some(b)) if middlebox_packets > 0 => {
            Some(b.saturating_sub(a) as f64 / middlebox_packets as f64)
        }
        _ => None,
    };
    let ideal_bytes: f64 = o.size() as f64 * files.len() as f64;
    let got_bytes = last_bytes.max(downloaded(&files)) as f64;
    Ok(ElasticityRun {
        label: label.into(),
        samples,
        identical,
        failed: files.len() - identical,
        failures,
        scale_out_at_s: out_at,
        scale_in_at_s: in_at,
        scale_out_to_first_packet_ms: first_packet_ms,
        scale_out_api_ms: api_ms,
        new_instance_share: new_share,
        middlebox_drops: since(&drops, &drops0, |c| c.0),
        middlebox_packets,
        store_commands_per_packet,
        goodput_ratio: if ideal_bytes > 0.0 {
            got_bytes / ideal_bytes
        } else {
            0.0
        },
        total_s,
    })
}

/// Prints runs as text: a summary line each, then the goodput series side by
/// side.
pub fn print_elasticity(runs: &[ElasticityRun]) {
    println!(
        "{:<14} {:>9} {:>6} {:>9} {:>8} {:>14} {:>9} {:>10} {:>13}",
        "variant",
        "identical",
        "failed",
        "mb drops",
        "goodput",
        "out->1st pkt",
        "new inst",
        "total s",
        "store cmd/pkt"
    );
    for r in runs {
        println!(
            "{:<14} {:>9} {:>6} {:>9} {:>7.1}% {:>11} ms {:>9} {:>10.1} {:>13}",
            r.label,
            r.identical,
            r.failed,
            r.middlebox_drops,
            r.goodput_ratio * 100.0,
            r.scale_out_to_first_packet_ms
                .map(|m| format!("{m:.0}"))
                .unwrap_or_else(|| "-".into()),
            r.new_instance_share
                .map(|s| format!("{:.0}%", s * 100.0))
                .unwrap_or_else(|| "-".into()),
            r.total_s,
            r.store_commands_per_packet
                .map(|c| format!("{c:.3}"))
                .unwrap_or_else(|| "-".into())
        );
        for f in &r.failures {
            println!("               {f}");
        }
    }
    if let Some(r) = runs.first() {
        println!(
            "scale out at {:.1} s, scale in at {:.1} s; goodput, Mbit/s:",
            r.scale_out_at_s, r.scale_in_at_s
        );
    }
    print!("{:>6} {:>7}", "t s", "ideal");
    for r in runs {
        print!(" {:>14}", r.label);
    }
    println!();
    let n = runs.iter().map(|r| r.samples.len()).max().unwrap_or(0);
    for i in 0..n {
        let Some(s0) = runs.iter().find_map(|r| r.samples.get(i)) else {
            continue;
        };
        print!("{:>6.1} {:>7.1}", s0.t_s, s0.ideal_mbps);
        for r in runs {
            match r.samples.get(i) {
                Some(s) => print!(" {:>14.1}", s.goodput_mbps),
                None => print!(" {:>14}", ""),
            }
        }
        println!();
    }
}

/// The goodput series as CSV: `variant,t_s,ideal_mbps,goodput_mbps`.
pub fn csv(runs: &[ElasticityRun]) -> String {
    let mut s = String::from("variant,t_s,ideal_mbps,goodput_mbps\n");
    for r in runs {
        for x in &r.samples {
            s.push_str(&format!(
                "{},{:.3},{:.2},{:.2}\n",
                r.label, x.t_s, x.ideal_mbps, x.goodput_mbps
            ));
        }
    }
    s
}

/// The goodput series as an SVG line chart (ideal dashed), with the scale-out and
/// scale-in moments marked.
pub fn svg(runs: &[ElasticityRun]) -> String {
    let (w, h, l, b) = (720.0, 360.0, 60.0, 40.0);
    let t_max = runs
        .iter()
        .flat_map(|r| r.samples.iter().map(|s| s.t_s))
        .fold(1.0f64, f64::max);
    let y_max = runs
        .iter()
        .flat_map(|r| r.samples.iter().map(|s| s.goodput_mbps.max(s.ideal_mbps)))
        .fold(1.0f64, f64::max)
        * 1.1;
    let x = |t: f64| l + (w - l - 20.0) * t / t_max;
    let y = |v: f64| h - b - (h - b - 20.0) * v / y_max;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{l}\" y1=\"20\" x2=\"{l}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (s)</text>\n\
         <text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">goodput (Mbit/s)</text>\n",
        h - b,
        w - 20.0,
        h - b,
        h - b,
        (w + l) / 2.0,
        h - 6.0,
        h / 2.0,
        h / 2.0
    );
    for i in 0..=4 {
        let v = y_max / 1.1 * i as f64 / 4.0;
        s.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n",
            l - 4.0,
            y(v) + 4.0
        ));
    }
    if let Some(r) = runs.first() {
        for (t, what) in [
            (r.scale_out_at_s, "scale out"),
            (r.scale_in_at_s, "scale in"),
        ] {
            s.push_str(&format!(
                "<line x1=\"{:.1}\" y1=\"20\" x2=\"{:.1}\" y2=\"{}\" stroke=\"grey\" stroke-dasharray=\"2,3\"/>\n\
                 <text x=\"{:.1}\" y=\"16\" text-anchor=\"middle\" fill=\"grey\">{what}</text>\n",
                x(t),
                x(t),
                h - b,
                x(t)
            ));
        }
        s.push_str(&svg::dashed(
            r.samples.iter().map(|p| (x(p.t_s), y(p.ideal_mbps))),
        ));
    }
    let mut legend = vec![("ideal".to_string(), "black")];
    for (i, r) in runs.iter().enumerate() {
        let c = svg::COLOURS[i % svg::COLOURS.len()];
        s.push_str(&svg::polyline(
            r.samples.iter().map(|p| (x(p.t_s), y(p.goodput_mbps))),
            c,
        ));
        legend.push((r.label.clone(), c));
    }
    s.push_str(&svg::legend(&legend, w - 170.0));
    s.push_str("</svg>\n");
    s
}

/// Writes `elasticity.csv`, `elasticity.svg` and `elasticity.json` into `dir`.
pub fn write_outputs(runs: &[ElasticityRun], dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join("elasticity.csv"), csv(runs))?;
    fs::write(dir.join("elasticity.svg"), svg(runs))?;
    fs::write(
        dir.join("elasticity.json"),
        serde_json::to_string_pretty(runs).map_err(std::io::Error::other)?,
    )?;
    Ok(())
}

/// The base spec with the middlebox's `state` and `affinity` set (and its
/// per-instance `capacity`, if given): one variant of the experiment.
pub fn variant_spec(
    base: &str,
    middlebox: &str,
    state: &str,
    affinity: &str,
    capacity_mbps: Option<f64>,
) -> Result<String, VariantError> {
    let mut doc: yaml_serde::Value = yaml_serde::from_str(base).map_err(VariantError::NotYaml)?;
    let mb = doc
        .get_mut("elements")
        .and_then(|e| e.get_mut(middlebox))
        .and_then(|m| m.as_mapping_mut())
        .ok_or_else(|| VariantError::NoElement(middlebox.to_string()))?;
    mb.insert("state".into(), state.into());
    mb.insert("affinity".into(), affinity.into());
    if let Some(c) = capacity_mbps {
        let mut m = yaml_serde::Mapping::new();
        m.insert("mbps".into(), c.into());
        mb.insert("capacity".into(), m.into());
    }
    yaml_serde::to_string(&doc).map_err(VariantError::Write)
}

/// Why [`variant_spec`] could not write a variant.
#[derive(Debug, thiserror::Error)]
pub enum VariantError {
    /// The base spec does not parse as YAML.
    #[error("the base spec is not YAML: {0}")]
    NotYaml(#[source] yaml_serde::Error),
    /// The base spec has no element of the middlebox's name.
    #[error("the base spec has no element `{0}`")]
    NoElement(String),
    /// The edited document could not be written back as YAML.
    #[error("cannot write the variant as YAML: {0}")]
    Write(#[source] yaml_serde::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_set_state_affinity_and_capacity_and_validate() {
        let base = include_str!("../../../examples/experiments/elasticity.yaml");
        let v = variant_spec(base, "fw", "local", "hash", Some(80.0)).unwrap();
        let spec = sluice_tenant::TenantSpec::parse(&v, "variant", None).unwrap();
        match &spec.elements["fw"] {
            sluice_tenant::Element::Middlebox {
                state,
                affinity,
                capacity,
                instances,
                ..
            } => {
                assert_eq!(*state, sluice_tenant::StateMode::Local);
                assert_eq!(*affinity, sluice_tenant::Affinity::Hash);
                assert_eq!(capacity.and_then(|c| c.mbps), Some(80.0));
                assert_eq!(*instances, 1, "the experiment starts at one instance");
            }
            e => panic!("fw is {e:?}"),
        }
        let e = variant_spec(base, "nosuch", "local", "hash", None).unwrap_err();
        assert!(
            matches!(&e, VariantError::NoElement(m) if m == "nosuch"),
            "{e}"
        );
    }

    #[test]
    fn the_schedule_ramps_up_holds_and_ramps_down() {
        let o = ElasticityOptions::default();
        // 5 groups of 4 at 1 MiB/s, 2 s apart, each lasting (5 + 2) * 2 s.
        assert_eq!(o.duration(), Duration::from_secs(14));
        assert_eq!(o.size(), 14 * 1024 * 1024);
        let per_flow = 1024.0 * 1024.0 * 8.0 / 1e6;
        let at = |s: f64| (o.ideal_mbps(Duration::from_secs_f64(s)) / per_flow).round();
        assert_eq!(at(0.5), 4.0);
        assert_eq!(at(8.5), 20.0, "peak: every group runs");
        assert_eq!(at(13.9), 20.0);
        assert_eq!(at(14.5), 16.0, "the first group ended");
        assert_eq!(at(21.9), 4.0);
        assert_eq!(at(22.1), 0.0);
        // Out at the peak, in with about half the groups still running.
        assert_eq!(o.scale_out_at(), Duration::from_secs(9));
        let early = ElasticityOptions {
            scale_out_after: Some(2),
            ..ElasticityOptions::default()
        };
        assert_eq!(early.scale_out_at(), Duration::from_secs(5));
        let before = BTreeMap::from([("fw/0".to_string(), 100)]);
        let after = BTreeMap::from([("fw/0".to_string(), 130), ("fw/1".to_string(), 90)]);
        assert_eq!(share_between(&before, &after, "fw/1"), Some(0.75));
        assert_eq!(share_between(&after, &after, "fw/1"), None);
        assert_eq!(o.scale_in_at(), Duration::from_secs(17));
        assert_eq!(at(17.0), 12.0);
    }

    #[test]
    fn outputs_are_well_formed() {
        let run = |label: &str| ElasticityRun {
            label: label.into(),
            samples: vec![
                Sample {
                    t_s: 0.25,
                    ideal_mbps: 8.0,
                    goodput_mbps: 7.5,
                },
                Sample {
                    t_s: 0.5,
                    ideal_mbps: 8.0,
                    goodput_mbps: 0.0,
                },
            ],
            identical: 1,
            failed: 0,
            failures: vec![],
            scale_out_at_s: 0.3,
            scale_in_at_s: 0.4,
            scale_out_to_first_packet_ms: Some(12.0),
            scale_out_api_ms: 3.0,
            new_instance_share: Some(0.5),
            middlebox_drops: 0,
            middlebox_packets: 100,
            store_commands_per_packet: Some(0.25),
            goodput_ratio: 0.9,
            total_s: 0.6,
        };
        let runs = [run("shared/hash"), run("local/<hash>")];
        let c = csv(&runs);
        assert_eq!(c.lines().count(), 5);
        assert!(c.contains("shared/hash,0.250,8.00,7.50"));
        let s = svg(&runs);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 3, "ideal + two runs");
        assert!(s.contains("local/&lt;hash&gt;"), "labels are escaped");
    }
}
