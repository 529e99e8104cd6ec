//! `sluice bench dataplane`: the distributed switch against a direct link
//! (Stratos §7.1.1), and the control plane's apply-to-installed time, on this
//! machine's veth links.
//!
//! In the same run: iperf3 throughput and TCP round-trip latency between two
//! namespaces joined by one veth pair (the baseline), and between two VMs of a
//! testbed on different hosts whose traffic is in no chain (VM -> agent -> Geneve
//! over the fabric -> agent -> VM, no middlebox). The throughput runs alternate
//! between the two paths ([`ROUNDS`] each, medians reported), so load from
//! elsewhere on a shared machine hits both alike. Both pairs of VMs are
//! configured alike: MTU 1500, transmit checksum and segmentation offloads off
//! (senders emit complete MTU-sized frames), and receive coalescing on: GRO on
//! the baseline's interfaces, the agents' super-frames on the switch path (see
//! [`offloads`]). `SLUICE_VM_GRO=off` in the environment turns receive
//! coalescing off on both paths (the agents read it too). Then it re-applies the
//! Figure 4 tenant with alternating content and times how long until every agent
//! runs the new configuration (Stratos Table 1's "install": 54 ms).
//!
//! A third path in the same rounds is a reference, not Sluice: the kernel's own
//! tunnel between two hosts built the same way (VM -> host bridge -> VXLAN ->
//! fabric bridge -> VXLAN -> host bridge -> VM; this kernel has no Geneve
//! device, VXLAN is the same UDP encapsulation with a fixed 8-byte header),
//! what a switch that forwards in the kernel, frame by frame, reaches on these
//! links. It is skipped, saying why, where the kernel cannot build it. A
//! fourth is Open vSwitch (Stratos's switch) with its userspace datapath and
//! Geneve, skipped where OVS is not installed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_testbed::lab::{Lab, LabOptions};
use sluice_testbed::{run_in, veth, vm, Netns, NetnsExt};

/// A setup error as the benchmark reports it (namespace and tool errors alike).
fn describe(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Alternating iperf3 runs per path.
pub const ROUNDS: usize = 3;

/// One path's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    /// `direct`, `switch` (sealed), `switch-plain`, `kernel-vxlan` or `ovs-geneve`.
    pub path: String,
    /// iperf3 TCP goodput, Gbit/s (median of the runs).
    pub gbps: f64,
    /// Every run's goodput, in order.
    pub gbps_runs: Vec<f64>,
    /// TCP round trip of 64-byte messages, median, microseconds.
    pub rtt_p50_us: f64,
    /// 99th percentile, microseconds.
    pub rtt_p99_us: f64,
}

/// The whole benchmark's results.
#[derive(Debug, Clone, Serialize)]
pub struct DataplaneReport {
    /// Baseline and switch.
    pub paths: Vec<PathResult>,
    /// switch / direct throughput (goal ≥ 0.8).
    pub throughput_ratio: f64,
    /// kernel-vxlan / direct throughput, when the reference path could be built.
    pub kernel_ratio: Option<f64>,
    /// Why the kernel reference path is missing, if it is.
    pub kernel_skipped: Option<String>,
    /// ovs-geneve / direct throughput, when Open vSwitch is installed.
    pub ovs_ratio: Option<f64>,
    /// Why the Open vSwitch reference path is missing, if it is.
    pub ovs_skipped: Option<String>,
    /// Added median round trip, microseconds.
    pub added_rtt_p50_us: f64,
    /// Apply -> every agent runs the new config, median over the runs, ms.
    pub install_p50_ms: f64,
    /// Slowest run, ms.
    pub install_max_ms: f64,
    /// Hosts the configuration went to.
    pub hosts: usize,
    /// How the VM links of both paths were configured.
    pub offloads: String,
    /// What the two agents' batched I/O achieved during the switch runs.
    pub io: IoReport,
    /// The agents ran Seawall's rate control.
    pub seawall: bool,
    /// What sealing the fabric costs the agents' forwarding cores, plain and
    /// sealed measured in this run ([`crate::seal`]).
    pub seal: Vec<crate::seal::SealCost>,
    /// Switch path sealed / plain throughput (`switch` / `switch-plain`).
    pub sealed_ratio: f64,
}

/// Batch sizes and coalescing the agents achieved on the switch path (from
/// their `/metrics`; deltas over the throughput runs).
#[derive(Debug, Clone, Default, Serialize)]
pub struct IoReport {
    /// Frames per receive call on the sending VM's port (ring reads).
    pub port_frames_per_batch: f64,
    /// Datagrams per receive call on the receiving agent's Geneve socket
    /// (super-datagrams split back count as many).
    pub udp_frames_per_batch: f64,
    /// Datagrams per UDP super-datagram sent over the fabric.
    pub segs_per_super_datagram: f64,
    /// TCP segments per frame delivered to the receiving VM.
    pub segs_per_vm_frame: f64,
    /// `poll(2)` sleeps per second, both agents.
    pub sleeps_per_s: f64,
}

/// Whether receive coalescing is on (`SLUICE_VM_GRO`, default on): the agents
/// read the same variable.
fn coalescing() -> bool {
    std::env::var("SLUICE_VM_GRO").map_or(true, |v| v != "off" && v != "0")
}

/// What the report says about the links of both paths.
pub fn offloads(coalesce: bool) -> String {
    if coalesce {
        "all paths: MTU 1500; VM transmit offloads off (tx checksum, TSO, GSO: complete \
         1500-byte frames on the wire); receive coalescing on: GRO on the direct pair's \
         and the reference paths' receiving VMs, agent super-frames (software GRO, TSO \
         on the agent's side of the VM link) on the switch path"
            .into()
    } else {
        "all paths: MTU 1500; every offload off (tx/rx checksum, TSO, GSO, GRO); agents \
         deliver frame by frame (SLUICE_VM_GRO=off)"
            .into()
    }
}

fn iperf(server_ns: &str, client_ns: &str, addr: &str, seconds: u32) -> Result<f64, String> {
    iperf_streams(server_ns, client_ns, addr, seconds, 1)
}

/// iperf3 throughput with `streams` parallel TCP connections (`-P`), Gbit/s.
fn iperf_streams(
    server_ns: &str,
    client_ns: &str,
    addr: &str,
    seconds: u32,
    streams: usize,
) -> Result<f64, String> {
    let mut server = Command::new("ip")
        .args(["netns", "exec", server_ns, "iperf3", "-s", "-1", "-B", addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run iperf3 (Debian package iperf3): {e}"))?;
    let mut out = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let o = Command::new("ip")
            .args(["netns", "exec", client_ns, "iperf3", "-J", "-c", addr, "-t"])
            .arg(seconds.to_string())
            .arg("-P")
            .arg(streams.max(1).to_string())
            .output()
            .map_err(|e| e.to_string())?;
        if o.status.success() {
            out = Some(o);
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    let o = out.ok_or_else(|| format!("iperf3 client in {client_ns} could not reach {addr}"))?;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).map_err(|e| e.to_string())?;
    v.pointer("/end/sum_received/bits_per_second")
        .and_then(|b| b.as_f64())
        .map(|b| b / 1e9)
        .ok_or_else(|| "iperf3 printed no receiver throughput".to_string())
}

/// Median and p99 of `n` 64-byte TCP request/response round trips.
fn rtt(server_ns: &str, client_ns: &str, addr: &str, n: usize) -> Result<(f64, f64), String> {
    let sa: SocketAddr = format!("{addr}:7777").parse().map_err(|e| format!("{e}"))?;
    let listener = run_in(server_ns, move || TcpListener::bind(sa))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("bind {sa}: {e}"))?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 64];
        loop {
            if s.read_exact(&mut b).is_err() {
                return Ok(());
            }
            s.write_all(&b)?;
        }
    });
    let stream = run_in(client_ns, move || {
        TcpStream::connect_timeout(&sa, Duration::from_secs(5))
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("connect {sa}: {e}"))?;
    let mut s = stream;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut b = [7u8; 64];
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 100 {
        let t = Instant::now();
        s.write_all(&b).map_err(|e| e.to_string())?;
        s.read_exact(&mut b).map_err(|e| e.to_string())?;
        if i >= 100 {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    drop(s);
    let _ = echo.join();
    samples.sort_by(|a, b| a.total_cmp(b));
    Ok((samples[n / 2], samples[n * 99 / 100]))
}

/// Runs the benchmark; `sluice` is the binary the testbed runs its daemons with.
pub fn run(
    sluice: &Path,
    spec: &Path,
    seconds: u32,
    installs: usize,
    seawall: bool,
) -> Result<DataplaneReport, String> {
    let coalesce = coalescing();
    // First, on an idle machine: the forwarding cores, plain and sealed.
    let seal = crate::seal::run(Duration::from_millis(500))?;
    // Baseline: one veth pair, configured like the testbed's VM links.
    let a = Netns::new("da").map_err(|e| e.to_string())?;
    let b = Netns::new("db").map_err(|e| e.to_string())?;
    veth(&a, "eth0", &b, "eth0").map_err(|e| e.to_string())?;
    for (ns, addr) in [(&a, "10.30.0.1/24"), (&b, "10.30.0.2/24")] {
        vm::sysctl(ns.name(), "net.ipv6.conf.all.disable_ipv6", "1");
        ns.addr("eth0", addr).map_err(|e| e.to_string())?;
        vm::offloads_off(ns.name(), "eth0").map_err(|e| e.to_string())?;
        if coalesce {
            // The counterpart of the agents' super-frames: the receiving
            // interface coalesces runs of segments before the TCP stack.
            ns.exec(&["ethtool", "-K", "eth0", "gro", "on"])
                .map_err(|e| e.to_string())?;
        }
    }

    let kernel = KernelTunnel::build(coalesce);
    let kernel_skipped = kernel.as_ref().err().cloned();
    let ovs = OvsTunnel::build(coalesce);
    let ovs_skipped = ovs.as_ref().err().cloned();

    // Through the switch: Figure 4's web-a1 (host 2) to web-b1 (host 1) is in no
    // chain, so it crosses two agents and the fabric and no middlebox.
    let dir = std::env::temp_dir().join(format!("sluice-bench-dp-{}", std::process::id()));
    let mut lab = Lab::up(&LabOptions {
        spec: spec.to_path_buf(),
        hosts: 3,
        dir: dir.clone(),
        sluice: sluice.to_path_buf(),
        sluiced: sluice.with_file_name("sluiced"),
        web: false,
        seawall,
        fabric_auth: true,
        store: Default::default(),
        subverted: Vec::new(),
        controllers: 1,
        topology: Default::default(),
        dataplane_threads: 1,
    })
    .map_err(|e| e.to_string())?;
    let st = lab.state().clone();
    let (c, s) = (
        st.vm("web-a1").ok_or("spec has no VM web-a1")?,
        st.vm("web-b1").ok_or("spec has no VM web-b1")?,
    );
    if c.host == s.host {
        return Err("web-a1 and web-b1 landed on one host; the benchmark needs two".into());
    }
    let api = |h: u32| {
        st.hosts
            .iter()
            .find(|x| x.id == h)
            .map(|x| x.api.clone())
            .unwrap_or_default()
    };
    let (c_api, s_api) = (api(c.host), api(s.host));
    // Trusts the lab's controller and the hosts' CA (the agents' APIs).
    let http = st.http();
    // Alternate, so whatever else runs on the machine weighs on both paths.
    let (mut direct_runs, mut switch_runs) = (Vec::new(), Vec::new());
    let (mut kernel_runs, mut ovs_runs) = (Vec::new(), Vec::new());
    let mut switch_time = Duration::ZERO;
    // What the agents' counters moved during the switch runs alone (the other
    // paths' runs in between move their idle counters, such as poll sleeps).
    let (mut moved_c, mut moved_s) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        direct_runs.push(iperf(b.name(), a.name(), "10.30.0.2", seconds)?);
        let m0 = (metrics(&http, &c_api), metrics(&http, &s_api));
        let t = Instant::now();
        switch_runs.push(iperf(&s.netns, &c.netns, &s.addrs[0], seconds)?);
        switch_time += t.elapsed();
        add_moved(&mut moved_c, &m0.0, &metrics(&http, &c_api));
        add_moved(&mut moved_s, &m0.1, &metrics(&http, &s_api));
        if let Ok(k) = &kernel {
            kernel_runs.push(iperf(
                k.server.name(),
                k.client.name(),
                KernelTunnel::SERVER,
                seconds,
            )?);
        }
        if let Ok(o) = &ovs {
            ovs_runs.push(iperf(
                o.server.name(),
                o.client.name(),
                OvsTunnel::SERVER,
                seconds,
            )?);
        }
    }
    let io = io_report(&[], &moved_c, &[], &moved_s, switch_time);
    let (d50, d99) = rtt(b.name(), a.name(), "10.30.0.2", 5000)?;
    let (s50, s99) = rtt(&s.netns, &c.netns, &s.addrs[0], 5000)?;
    let kernel_path = match &kernel {
        Ok(k) => {
            let (k50, k99) = rtt(k.server.name(), k.client.name(), KernelTunnel::SERVER, 5000)?;
            Some(PathResult {
                path: "kernel-vxlan".into(),
                gbps: median(&kernel_runs),
                gbps_runs: kernel_runs,
                rtt_p50_us: k50,
                rtt_p99_us: k99,
            })
        }
        Err(_) => None,
    };
    let ovs_path = match &ovs {
        Ok(o) => {
            let (o50, o99) = rtt(o.server.name(), o.client.name(), OvsTunnel::SERVER, 5000)?;
            Some(PathResult {
                path: "ovs-geneve".into(),
                gbps: median(&ovs_runs),
                gbps_runs: ovs_runs,
                rtt_p50_us: o50,
                rtt_p99_us: o99,
            })
        }
        Err(_) => None,
    };
    drop((a, b, kernel, ovs));
    let direct_gbps = median(&direct_runs);
    let switch_gbps = median(&switch_runs);

    // The same switch path with the fabric plain (the controller restarted
    // with `--fabric-auth off`), for what sealing costs end to end.
    lab.set_fabric_auth(false, Duration::from_secs(20))
        .map_err(|e| e.to_string())?;
    let mut plain_runs = Vec::new();
    for _ in 0..ROUNDS {
        plain_runs.push(iperf(&s.netns, &c.netns, &s.addrs[0], seconds)?);
    }
    let (p50, p99) = rtt(&s.netns, &c.netns, &s.addrs[0], 5000)?;
    let plain_gbps = median(&plain_runs);
    let plain_path = PathResult {
        path: "switch-plain".into(),
        gbps: plain_gbps,
        gbps_runs: plain_runs,
        rtt_p50_us: p50,
        rtt_p99_us: p99,
    };

    // Apply -> installed on every agent.
    let text = std::fs::read_to_string(spec).map_err(|e| e.to_string())?;
    // A change of FIB entries only (the select's port range), so what is timed is
    // compile + push + install on every agent, not NF instance restarts.
    let variant = text.replace("dport: 80 }", "dport: 80-81 }");
    if variant == text {
        return Err("the spec has no `dport: 80 }` select to vary".into());
    }
    let mut times = Vec::new();
    for i in 0..installs {
        let body = if i % 2 == 0 { &variant } else { &text };
        let before = agent_versions(
            &http,
            &st.hosts.iter().map(|h| h.api.clone()).collect::<Vec<_>>(),
        );
        let t = Instant::now();
        http.put(&format!("{}/v1/tenants/{}", st.controller, st.tenant))
            .set("Authorization", &st.bearer())
            .set("Content-Type", "application/yaml")
            .send_string(body)
            .map_err(|e| format!("apply: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = agent_versions(
                &http,
                &st.hosts.iter().map(|h| h.api.clone()).collect::<Vec<_>>(),
            );
            // Only hosts whose share changed get a new version; wait for those.
            if now.iter().zip(&before).any(|(n, b)| n != b) && changed_all(&st, &now) {
                break;
            }
            if Instant::now() > deadline {
                return Err("agents did not install the new configuration within 10 s".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
        lab.wait_in_sync(Duration::from_secs(20))
            .map_err(|e| e.to_string())?;
    }
    drop(lab);
    let _ = std::fs::remove_dir_all(&dir);
    times.sort_by(|a, b| a.total_cmp(b));
    let kernel_ratio = kernel_path.as_ref().map(|k| k.gbps / direct_gbps);
    let ovs_ratio = ovs_path.as_ref().map(|o| o.gbps / direct_gbps);
    let mut paths = vec![
        PathResult {
            path: "direct".into(),
            gbps: direct_gbps,
            gbps_runs: direct_runs,
            rtt_p50_us: d50,
            rtt_p99_us: d99,
        },
        PathResult {
            path: "switch".into(),
            gbps: switch_gbps,
            gbps_runs: switch_runs,
            rtt_p50_us: s50,
            rtt_p99_us: s99,
        },
    ];
    paths.push(plain_path);
    paths.extend(kernel_path);
    paths.extend(ovs_path);
    Ok(DataplaneReport {
        paths,
        throughput_ratio: switch_gbps / direct_gbps,
        kernel_ratio,
        kernel_skipped,
        ovs_ratio,
        ovs_skipped,
        added_rtt_p50_us: s50 - d50,
        install_p50_ms: times.get(times.len() / 2).copied().unwrap_or(f64::NAN),
        install_max_ms: times.last().copied().unwrap_or(f64::NAN),
        hosts: st.hosts.len(),
        offloads: offloads(coalesce),
        io,
        seawall,
        seal,
        sealed_ratio: switch_gbps / plain_gbps,
    })
}

/// Adds to `moved` how far each counter went from `before` to `after`.
fn add_moved(moved: &mut Vec<(String, f64)>, before: &[(String, f64)], after: &[(String, f64)]) {
    for (name, v) in after {
        let d = v - before
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0.0, |(_, x)| *x);
        match moved.iter_mut().find(|(k, _)| k == name) {
            Some((_, m)) => *m += d,
            None => moved.push((name.clone(), d)),
        }
    }
}

/// A reference path: two VMs (`client` 10.3x.0.1, `server` 10.3x.0.2) on two
/// hosts whose fabric ports (`fab0`, MTU 9000) meet on a bridge, each VM's
/// link (`vm0` on its host) configured as on the other paths. What joins a
/// host's `vm0` to its `fab0` is the caller's (`setup`), and so is whatever it
/// must keep running (`G`), dropped before the namespaces. Dropping it deletes
/// every namespace, and with them every link.
struct RefPath<G> {
    _guards: Vec<G>,
    client: Netns,
    server: Netns,
    _rest: Vec<Netns>,
}

impl<G> RefPath<G> {
    /// `setup(host, n)` for host n = 1 (the client's) and 2, after the links
    /// exist; `subnet` is the VMs' /24, e.g. "10.31.0".
    fn new(
        tag: char,
        subnet: &str,
        coalesce: bool,
        mut setup: impl FnMut(&Netns, usize) -> Result<G, String>,
    ) -> Result<RefPath<G>, String> {
        let ns = |what: &str| Netns::new(&format!("{tag}{what}")).map_err(describe);
        let (client, server, fabric) = (ns("c")?, ns("s")?, ns("f")?);
        let hosts = [ns("h")?, ns("h")?];
        vm::no_bridge_netfilter(fabric.name());
        sluice_testbed::bridge(&fabric, "br0", &[]).map_err(describe)?;
        fabric
            .ip(&["link", "set", "br0", "mtu", "9000"])
            .map_err(describe)?;
        let mut guards = Vec::new();
        for (i, (h, v)) in hosts.iter().zip([&client, &server]).enumerate() {
            let n = i + 1;
            vm::no_bridge_netfilter(h.name());
            vm::sysctl(h.name(), "net.ipv6.conf.all.disable_ipv6", "1");
            vm::sysctl(v.name(), "net.ipv6.conf.all.disable_ipv6", "1");
            let port = format!("f{n}");
            veth(&fabric, &port, h, "fab0").map_err(describe)?;
            fabric
                .ip(&["link", "set", &port, "mtu", "9000"])
                .map_err(describe)?;
            fabric
                .ip(&["link", "set", &port, "master", "br0"])
                .map_err(describe)?;
            h.ip(&["link", "set", "fab0", "mtu", "9000"])
                .map_err(describe)?;
            h.ip(&["link", "set", "fab0", "up"]).map_err(describe)?;
            veth(v, "eth0", h, "vm0").map_err(describe)?;
            v.addr("eth0", &format!("{subnet}.{n}/24"))
                .map_err(describe)?;
            vm::offloads_off(v.name(), "eth0").map_err(describe)?;
            if coalesce {
                v.exec(&["ethtool", "-K", "eth0", "gro", "on"])
                    .map_err(describe)?;
            }
            guards.push(setup(h, n)?);
        }
        let mut rest = vec![fabric];
        rest.extend(hosts);
        Ok(RefPath {
            _guards: guards,
            client,
            server,
            _rest: rest,
        })
    }
}

/// The kernel's own tunnel: each host bridges its VM's link to a VXLAN device
/// towards the other host (this kernel has no Geneve device; VXLAN is the same
/// UDP encapsulation with a fixed 8-byte header).
struct KernelTunnel;

impl KernelTunnel {
    const SERVER: &'static str = "10.31.0.2";

    fn build(coalesce: bool) -> Result<RefPath<()>, String> {
        RefPath::new('k', "10.31.0", coalesce, |h, n| {
            h.addr("fab0", &format!("10.254.0.{n}/24"))
                .map_err(describe)?;
            h.ip(&[
                "link",
                "add",
                "vx0",
                "type",
                "vxlan",
                "id",
                "7",
                "dstport",
                "4789",
                "local",
                &format!("10.254.0.{n}"),
                "remote",
                &format!("10.254.0.{}", 3 - n),
                "dev",
                "fab0",
            ])
            .map_err(|err| format!("the kernel cannot make a VXLAN device: {err}"))?;
            sluice_testbed::bridge(h, "br1", &["vx0", "vm0"]).map_err(describe)?;
            h.ip(&["link", "set", "vx0", "up"]).map_err(describe)
        })
    }
}

/// Open vSwitch, the switch Stratos was built on, with its userspace datapath
/// (this kernel has neither Geneve nor OVS's kernel module): on each host a
/// private OVS with a Geneve tunnel to the other, the VM's port on a
/// MAC-learning bridge.
struct OvsTunnel;

impl OvsTunnel {
    const SERVER: &'static str = "10.32.0.2";

    fn build(coalesce: bool) -> Result<RefPath<sluice_testbed::ovs::Ovs>, String> {
        if !sluice_testbed::ovs::available() {
            return Err("Open vSwitch is not installed (Debian package openvswitch-switch)".into());
        }
        RefPath::new('o', "10.32.0", coalesce, |h, n| {
            vm::offloads_off(h.name(), "vm0").map_err(describe)?;
            let ovs = sluice_testbed::ovs::Ovs::start(h.name()).map_err(describe)?;
            ovs.geneve_endpoint(
                h,
                "fab0",
                &format!("10.253.0.{n}/24"),
                "vm0",
                &format!("10.253.0.{}", 3 - n),
                9,
            )
            .map_err(describe)?;
            Ok(ovs)
        })
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// An agent's `/metrics` as (name with labels, value) pairs (empty if it
/// cannot be read).
fn metrics(http: &ureq::Agent, api: &str) -> Vec<(String, f64)> {
    http.get(&format!("{api}/metrics"))
        .timeout(Duration::from_secs(2))
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .map(|t| {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (k, v) = l.rsplit_once(' ')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Sum of the series of `name` whose labels contain `label`, change from
/// `before` to `after`.
fn delta(before: &[(String, f64)], after: &[(String, f64)], name: &str, label: &str) -> f64 {
    let total = |m: &[(String, f64)]| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with(&format!("{name}{{")) && k.contains(label))
            .map(|(_, v)| v)
            .sum()
    };
    total(after) - total(before)
}

/// What the client-side agent (`c`: reads the sending VM's port, sends
/// super-datagrams) and the server-side agent (`s`: reads them, delivers to the
/// receiving VM) achieved.
fn io_report(
    c0: &[(String, f64)],
    c1: &[(String, f64)],
    s0: &[(String, f64)],
    s1: &[(String, f64)],
    t: Duration,
) -> IoReport {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let d = |b: &[(String, f64)], a: &[(String, f64)], n: &str, l: &str| delta(b, a, n, l);
    let port = "socket=\"port:";
    let geneve = "socket=\"geneve\"";
    IoReport {
        port_frames_per_batch: ratio(
            d(c0, c1, "sluice_io_rx_frames_total", port),
            d(c0, c1, "sluice_io_rx_batches_total", port),
        ),
        udp_frames_per_batch: ratio(
            d(s0, s1, "sluice_io_rx_frames_total", geneve),
            d(s0, s1, "sluice_io_rx_batches_total", geneve),
        ),
        segs_per_super_datagram: ratio(
            d(c0, c1, "sluice_io_tx_gso_segs_total", geneve),
            d(c0, c1, "sluice_io_tx_gso_total", geneve),
        ),
        // Frames sent to VM ports, and the segments merged into them.
        segs_per_vm_frame: ratio(
            d(s0, s1, "sluice_io_tx_msgs_total", port)
                + d(s0, s1, "sluice_io_gro_merged_total", ""),
            d(s0, s1, "sluice_io_tx_msgs_total", port),
        ),
        sleeps_per_s: ratio(
            d(c0, c1, "sluice_io_loop_polls_total", "kind=\"sleep\"")
                + d(s0, s1, "sluice_io_loop_polls_total", "kind=\"sleep\""),
            t.as_secs_f64(),
        ),
    }
}

fn agent_versions(http: &ureq::Agent, apis: &[String]) -> Vec<u64> {
    apis.iter()
        .map(|a| {
            http.get(&format!("{a}/v1/status"))
                .timeout(Duration::from_secs(2))
                .call()
                .ok()
                .and_then(|r| r.into_json::<serde_json::Value>().ok())
                .and_then(|v| v.get("config_version").and_then(|x| x.as_u64()))
                .unwrap_or(0)
        })
        .collect()
}

/// Every agent runs the version the controller wants for its host.
fn changed_all(st: &sluice_testbed::lab::LabState, now: &[u64]) -> bool {
    let Some(v) = st
        .http()
        .get(&format!("{}/v1/hosts", st.controller))
        .set("Authorization", &st.bearer())
        .timeout(Duration::from_secs(2))
        .call()
        .ok()
        .and_then(|r| r.into_json::<serde_json::Value>().ok())
    else {
        return false;
    };
    let hosts = v
        .as_array()
        .or_else(|| v.get("hosts").and_then(|h| h.as_array()))
        .cloned()
        .unwrap_or_default();
    let mut want: Vec<(u64, u64)> = hosts
        .iter()
        .map(|h| {
            (
                h.get("id")
                    .or_else(|| h.get("host"))
                    .and_then(|x| x.as_u64())
                    .unwrap_or(0),
                h.get("desired_version")
                    .or_else(|| h.get("config_version"))
                    .and_then(|x| x.as_u64())
                    .unwrap_or(u64::MAX),
            )
        })
        .collect();
    want.sort_unstable();
    want.len() == now.len() && want.iter().zip(now).all(|((_, w), n)| w == n)
}

/// Prints the report as a table with the goals and Stratos's numbers.
pub fn print(r: &DataplaneReport) {
    crate::seal::print(&r.seal);
    println!(
        "switch: fabric sealed (the default); switch-plain: the controller restarted with \
         --fabric-auth off"
    );
    if r.seawall {
        println!("agents run Seawall's rate control (sluiced run --seawall)");
    }
    println!("path           Gbit/s   RTT p50 us   RTT p99 us");
    for p in &r.paths {
        println!(
            "{:<13} {:>7.2} {:>12.1} {:>12.1}",
            p.path, p.gbps, p.rtt_p50_us, p.rtt_p99_us
        );
    }
    for p in &r.paths {
        let runs: Vec<String> = p.gbps_runs.iter().map(|g| format!("{g:.2}")).collect();
        println!("{} runs (Gbit/s): {}", p.path, runs.join(" "));
    }
    println!(
        "switch/direct throughput {:.2} (goal >= 0.8); added RTT p50 {:.1} us",
        r.throughput_ratio, r.added_rtt_p50_us
    );
    println!(
        "sealed/plain switch throughput {:.2} (fabric authentication's cost end to end)",
        r.sealed_ratio
    );
    match (r.kernel_ratio, &r.kernel_skipped) {
        (Some(k), _) => println!(
            "reference: the kernel's own tunnel (VXLAN, bridges, frame by frame) / direct {k:.2}"
        ),
        (None, Some(why)) => println!("reference kernel tunnel: skipped: {why}"),
        (None, None) => {}
    }
    match (r.ovs_ratio, &r.ovs_skipped) {
        (Some(o), _) => println!(
            "reference: Open vSwitch's userspace datapath (Geneve, no kernel module) / direct {o:.2}"
        ),
        (None, Some(why)) => println!("reference Open vSwitch: skipped: {why}"),
        (None, None) => {}
    }
    println!("links: {}", r.offloads);
    let io = &r.io;
    println!(
        "agents' I/O during the switch runs: {:.1} frames per VM-port read, {:.1} datagrams per \
         Geneve read, {:.1} datagrams per UDP super-datagram, {:.1} segments per frame into the \
         VM, {:.0} poll sleeps/s",
        io.port_frames_per_batch,
        io.udp_frames_per_batch,
        io.segs_per_super_datagram,
        io.segs_per_vm_frame,
        io.sleeps_per_s
    );
    println!(
        "apply -> installed on all {} agents: median {:.1} ms, max {:.1} ms (goal 20 ms; Stratos Table 1: 54 ms)",
        r.hosts, r.install_p50_ms, r.install_max_ms
    );
}

/// One row of `sluice bench dataplane --dataplane-threads`: the switch path
/// with every agent on `threads` forwarding threads.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadsRow {
    /// Forwarding threads of every agent.
    pub threads: usize,
    /// Parallel TCP connections of each iperf3 run (`-P`).
    pub streams: usize,
    /// iperf3 goodput web-a1 -> web-b1, Gbit/s (median of the runs).
    pub gbps: f64,
    /// Every run's goodput, in order.
    pub gbps_runs: Vec<f64>,
    /// `gbps` against the first thread count's.
    pub ratio: f64,
    /// On-CPU seconds per wall second of each forwarding thread of the
    /// sending and the receiving host's agents during the runs.
    pub cpu_send: Vec<f64>,
    /// The same, the receiving host.
    pub cpu_recv: Vec<f64>,
    /// The 1-minute load average when the row started.
    pub load: String,
}

/// On-CPU nanoseconds of each forwarding thread of process `pid`
/// (`sluice-dataplane-K`, which the kernel shortens to 15 bytes), in
/// thread-id order.
fn dataplane_cpu_ns(pid: u32) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut tids: Vec<u64> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids.into_iter()
        .filter(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                .is_ok_and(|c| c.starts_with("sluice-dataplan"))
        })
        .filter_map(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/schedstat"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The switch path (web-a1 on one host to web-b1 on another, sealed
/// fabric, no middlebox) with every agent on each thread count of
/// `threads` in turn: a lab per count, [`ROUNDS`] iperf3 runs of `streams`
/// connections each; ratios against the first count. `progress` hears what
/// runs.
pub fn threads_run(
    sluice: &Path,
    spec: &Path,
    seconds: u32,
    threads: &[usize],
    streams: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<ThreadsRow>, String> {
    if threads.is_empty() || threads.iter().any(|&t| t == 0 || t > 64) {
        return Err("every thread count must be 1 to 64".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    progress(&format!(
        "{cores} core(s) available; load average {}",
        crate::load_average()
    ));
    let mut rows: Vec<ThreadsRow> = Vec::new();
    for &t in threads {
        let load = crate::load_average();
        progress(&format!(
            "{t} forwarding thread(s), {streams} stream(s); load average {load}"
        ));
        let dir = std::env::temp_dir().join(format!("sluice-bench-dpt-{}-{t}", std::process::id()));
        let lab = Lab::up(&LabOptions {
            spec: spec.to_path_buf(),
            hosts: 3,
            dir: dir.clone(),
            sluice: sluice.to_path_buf(),
            sluiced: sluice.with_file_name("sluiced"),
            web: false,
            seawall: false,
            fabric_auth: true,
            store: Default::default(),
            subverted: Vec::new(),
            controllers: 1,
            topology: Default::default(),
            dataplane_threads: t as u32,
        })
        .map_err(|e| e.to_string())?;
        let st = lab.state().clone();
        let (c, s) = (
            st.vm("web-a1").ok_or("spec has no VM web-a1")?,
            st.vm("web-b1").ok_or("spec has no VM web-b1")?,
        );
        if c.host == s.host {
            return Err("web-a1 and web-b1 landed on one host; the benchmark needs two".into());
        }
        let pids = (
            lab.agent_pid(c.host)
                .ok_or("no agent on the sending host")?,
            lab.agent_pid(s.host)
                .ok_or("no agent on the receiving host")?,
        );
        let cpu0 = (dataplane_cpu_ns(pids.0), dataplane_cpu_ns(pids.1));
        let t0 = Instant::now();
        let mut runs = Vec::new();
        for _ in 0..ROUNDS {
            runs.push(iperf_streams(
                &s.netns,
                &c.netns,
                &s.addrs[0],
                seconds,
                streams,
            )?);
        }
        let wall = t0.elapsed().as_secs_f64();
        // Threads the forwarding threads start (entering the namespace)
        // inherit their name and wait: only those that ran count.
        let share = |before: &[u64], after: Vec<u64>| -> Vec<f64> {
            after
                .iter()
                .zip(before.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.saturating_sub(*b))
                .filter(|&ns| ns > 0)
                .map(|ns| ns as f64 / 1e9 / wall)
                .collect()
        };
        let cpu_send = share(&cpu0.0, dataplane_cpu_ns(pids.0));
        let cpu_recv = share(&cpu0.1, dataplane_cpu_ns(pids.1));
        drop(lab);
        let _ = std::fs::remove_dir_all(&dir);
        let gbps = median(&runs);
        let ratio = rows.first().map_or(1.0, |b| gbps / b.gbps);
        rows.push(ThreadsRow {
            threads: t,
            streams,
            gbps,
            gbps_runs: runs,
            ratio,
            cpu_send,
            cpu_recv,
            load,
        });
    }
    Ok(rows)
}

/// Prints [`threads_run`]'s rows.
pub fn print_threads(rows: &[ThreadsRow]) {
    println!(
        "switch path web-a1 -> web-b1 (sealed fabric), iperf3 -P N, median of {ROUNDS} runs; \
         ratios against the first thread count; CPU: on-CPU s per s of each forwarding thread"
    );
    println!("threads streams  Gbit/s  ratio  load   CPU send agent      CPU recv agent      runs");
    for r in rows {
        let cpu = |v: &[f64]| {
            v.iter()
                .map(|c| format!("{c:.2}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        println!(
            "{:>7} {:>7} {:>7.2} {:>6.2} {:>5} {:<19} {:<19} {:?}",
            r.threads,
            r.streams,
            r.gbps,
            r.ratio,
            r.load,
            cpu(&r.cpu_send),
            cpu(&r.cpu_recv),
            r.gbps_runs
                .iter()
                .map(|g| (g * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        );
    }
}
