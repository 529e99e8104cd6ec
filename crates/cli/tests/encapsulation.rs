//! Nothing bypasses a chain: IP inside VLAN stacks, PPPoE, MPLS, PBB, VN-Tag and
//! every tunnel a datacenter carries, run with `sluice run` through a `default
//! deny` firewall, a firewall allowing one inner 5-tuple, the IPS and the
//! monitor. The captures are built here with the wire layer's builders.

use std::path::Path;
use std::process::Command;

use sluice_wire::tcp::flags::{ACK, FIN, PSH, SYN};
use sluice_wire::{build, wrap, IpAddr};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 0, 2, 7];
const O1: [u8; 4] = [198, 51, 100, 1];
const O2: [u8; 4] = [198, 51, 100, 2];

/// An encapsulation: its name and how a frame of each direction is wrapped.
type Wrap = (&'static str, fn(&[u8], bool) -> Vec<u8>);

fn outer(to_server: bool) -> (IpAddr, IpAddr) {
    if to_server {
        (O1.into(), O2.into())
    } else {
        (O2.into(), O1.into())
    }
}

fn encapsulations() -> Vec<Wrap> {
    vec![
        ("qinq", |f, _| wrap::qinq(f, 100, 200)),
        ("qinqinq", |f, _| {
            wrap::tags(f, &[(0x9100, 1), (0x88a8, 2), (0x8100, 3)])
        }),
        ("pppoe", |f, _| wrap::pppoe(f, 0x42)),
        ("pppoe-over-qinq", |f, _| {
            wrap::qinq(&wrap::pppoe(f, 0x42), 5, 6)
        }),
        ("mpls", |f, _| wrap::mpls(f, &[16, 17, 18])),
        ("mpls-pw", |f, _| wrap::mpls_pw(f, f, &[300])),
        ("pbb", |f, _| wrap::pbb(f, 0x1234)),
        ("vn-tag", |f, _| wrap::vn_tag(f)),
        ("ipip", |f, up| {
            let (s, d) = outer(up);
            wrap::ip_in_ip(s, d, f)
        }),
        ("gre", |f, up| {
            let (s, d) = outer(up);
            wrap::gre(s, d, Some(7 << 8), false, f)
        }),
        ("gre-teb", |f, up| {
            let (s, d) = outer(up);
            wrap::gre(s, d, None, true, f)
        }),
        ("erspan2", |f, up| {
            let (s, d) = outer(up);
            wrap::erspan(s, d, 2, 11, f)
        }),
        ("erspan3", |f, up| {
            let (s, d) = outer(up);
            wrap::erspan(s, d, 3, 12, f)
        }),
        ("vxlan", |f, up| {
            let (s, d) = outer(up);
            wrap::vxlan(s, d, 5000, f)
        }),
        ("vxlan-gpe", |f, up| {
            let (s, d) = outer(up);
            wrap::vxlan_gpe(s, d, 5000, f)
        }),
        ("geneve", |f, up| {
            let (s, d) = outer(up);
            wrap::geneve(s, d, 5000, f)
        }),
    ]
}

/// A web conversation from C:port to S:80 carrying `evil` in its request, and a
/// lone SYN to S:22, each frame wrapped by `w`.
fn capture(w: fn(&[u8], bool) -> Vec<u8>, port: u16) -> Vec<(u64, Vec<u8>)> {
    let c2s = |seq, ack, fl, d: &[u8]| w(&build::tcp_v4(C, S, port, 80, seq, ack, fl, d), true);
    let s2c = |seq, ack, fl, d: &[u8]| w(&build::tcp_v4(S, C, 80, port, seq, ack, fl, d), false);
    let req = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Probe: evil-payload\r\n\r\n";
    let rsp = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let frames = vec![
        c2s(100, 0, SYN, b""),
        s2c(500, 101, SYN | ACK, b""),
        c2s(101, 501, ACK, b""),
        c2s(101, 501, ACK | PSH, req),
        s2c(501, 101 + req.len() as u32, ACK | PSH, rsp),
        c2s(
            101 + req.len() as u32,
            501 + rsp.len() as u32,
            ACK | FIN,
            b"",
        ),
        s2c(
            501 + rsp.len() as u32,
            102 + req.len() as u32,
            ACK | FIN,
            b"",
        ),
        c2s(102 + req.len() as u32, 502 + rsp.len() as u32, ACK, b""),
        w(&build::tcp_v4(C, S, port + 1, 22, 1, 0, SYN, b""), true),
    ];
    frames
        .into_iter()
        .enumerate()
        .map(|(i, f)| (1_700_000_000_000_000_000 + i as u64 * 1_000_000, f))
        .collect()
}

fn write_pcap(path: &Path, frames: &[(u64, Vec<u8>)]) {
    let f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = sluice_pcap::PcapWriter::new(f).unwrap();
    for (ts, fr) in frames {
        w.write(*ts, fr).unwrap();
    }
    w.finish().unwrap();
}

struct Run {
    stats: serde_json::Value,
    events: Vec<serde_json::Value>,
}

fn run(dir: &Path, chain: &str, pcap: &Path) -> Run {
    let chain_path = dir.join("chain.yaml");
    std::fs::write(&chain_path, chain).unwrap();
    let eve = dir.join("eve.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--chain"])
        .arg(&chain_path)
        .arg("--pcap")
        .arg(pcap)
        .arg("--eve")
        .arg(&eve)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let events = std::fs::read_to_string(&eve)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        stats: v["stats"].clone(),
        events,
    }
}

fn counter(stage: &serde_json::Value, name: &str) -> u64 {
    stage["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0] == name)
        .map(|c| c[1].as_u64().unwrap())
        .unwrap_or_else(|| panic!("no counter {name} in {stage}"))
}

const DENY_ALL: &str = "name: deny\nfunctions:\n  - type: firewall\n    rules: \"default deny\"\n";
const ALLOW_WEB: &str = "name: web\nfunctions:\n  - type: firewall\n    rules: |\n      allow outer any\n      allow tcp from 10.0.0.1 to 192.0.2.7 port 80\n      default deny\n";
const IPS: &str = "name: ips\nfunctions:\n  - type: ips\n    rules:\n      - 'alert tcp any any -> any 80 (msg:\"probe\"; flow:to_server,established; content:\"evil-payload\"; sid:7; rev:1;)'\n";
const MONITOR: &str = "name: mon\nfunctions:\n  - type: monitor\n";

#[test]
fn every_encapsulation_is_decided_inspected_and_counted() {
    let d = tempfile::tempdir().unwrap();
    for (name, w) in encapsulations() {
        let pcap = d.path().join(format!("{name}.pcap"));
        write_pcap(&pcap, &capture(w, 40000));

        let r = run(d.path(), DENY_ALL, &pcap);
        assert_eq!(
            r.stats["forwarded"], 0,
            "{name}: default deny forwards nothing"
        );
        assert_eq!(r.stats["dropped"], 9, "{name}");

        let r = run(d.path(), ALLOW_WEB, &pcap);
        assert_eq!(
            r.stats["forwarded"], 8,
            "{name}: the web conversation passes"
        );
        let fw = &r.stats["stages"][0];
        assert_eq!(
            counter(fw, "rule_denies"),
            1,
            "{name}: the SSH SYN is denied"
        );
        assert_eq!(counter(fw, "new_flows"), 1, "{name}");

        let r = run(d.path(), IPS, &pcap);
        let alerts: Vec<_> = r
            .events
            .iter()
            .filter(|e| e["event_type"] == "alert")
            .collect();
        assert_eq!(alerts.len(), 1, "{name}: the probe inside is seen");
        assert_eq!(alerts[0]["alert"]["signature_id"], 7);
        assert_eq!(alerts[0]["src_ip"], "10.0.0.1", "{name}: the inner flow");

        let r = run(d.path(), MONITOR, &pcap);
        let flows: Vec<_> = r
            .events
            .iter()
            .filter(|e| e["event_type"] == "flow")
            .collect();
        assert_eq!(flows.len(), 2, "{name}: {flows:?}");
        let web = flows
            .iter()
            .find(|f| f["dest_port"] == 80)
            .unwrap_or_else(|| panic!("{name}: no web flow in {flows:?}"));
        assert_eq!(web["src_ip"], "10.0.0.1");
        assert_eq!(web["flow"]["pkts_toserver"], 5, "{name}");
        assert_eq!(web["flow"]["pkts_toclient"], 3, "{name}");
    }
}

#[test]
fn identical_conversations_in_two_vnis_are_two_flows() {
    let d = tempfile::tempdir().unwrap();
    let vni = |v: u32| {
        move |f: &[u8], up: bool| {
            let (s, d) = outer(up);
            wrap::vxlan(s, d, v, f)
        }
    };
    let mut frames = Vec::new();
    // Closures that capture cannot be `fn`s: wrap each direction by hand.
    for v in [100u32, 200] {
        let w = vni(v);
        for (ts, f) in capture(|f, _| f.to_vec(), 40000) {
            let up = f[26..30] == C;
            frames.push((ts + v as u64, w(&f, up)));
        }
    }
    frames.sort_by_key(|f| f.0);
    let pcap = d.path().join("two.pcap");
    write_pcap(&pcap, &frames);
    let r = run(d.path(), MONITOR, &pcap);
    let web: Vec<_> = r
        .events
        .iter()
        .filter(|e| e["event_type"] == "flow" && e["dest_port"] == 80)
        .collect();
    assert_eq!(web.len(), 2, "{web:?}");
    assert!(web.iter().all(|f| f["flow"]["pkts_toserver"] == 5));
    assert_ne!(web[0]["flow_id"], web[1]["flow_id"]);
    // Through the firewall: both conversations pass on their own state.
    let r = run(d.path(), ALLOW_WEB, &pcap);
    assert_eq!(r.stats["forwarded"], 16);
    // With `decapsulate: false` the tunnel is the UDP it looks like: the web
    // rule does not apply to it, the IPS does not read inside.
    let closed = format!("{ALLOW_WEB}settings:\n  decapsulate: false\n");
    assert_eq!(run(d.path(), &closed, &pcap).stats["forwarded"], 0);
    let ips = format!("{IPS}settings:\n  decapsulate: false\n");
    assert_eq!(run(d.path(), &ips, &pcap).events.len(), 0);
    assert_eq!(run(d.path(), IPS, &pcap).events.len(), 2);
}

#[test]
fn frames_that_are_not_ip_meet_each_function_policy() {
    let d = tempfile::tempdir().unwrap();
    let mut arp = build::udp_v4(C, S, 1, 2, b"");
    arp[12] = 0x08;
    arp[13] = 0x06;
    let frames = vec![(1_000, wrap::stp_bpdu()), (2_000, arp)];
    let pcap = d.path().join("l2.pcap");
    write_pcap(&pcap, &frames);
    let r = run(d.path(), DENY_ALL, &pcap);
    assert_eq!(r.stats["forwarded"], 0);
    assert_eq!(r.stats["non_ip"], 2);
    assert_eq!(counter(&r.stats["stages"][0], "non_ip_denied"), 2);
    let allow =
        "name: a\nfunctions:\n  - type: firewall\n    rules: \"default deny\"\n    non_ip: allow\n";
    assert_eq!(run(d.path(), allow, &pcap).stats["forwarded"], 2);
    let r = run(d.path(), MONITOR, &pcap);
    assert_eq!(r.stats["forwarded"], 2);
    assert_eq!(counter(&r.stats["stages"][0], "monitor_non_ip_frames"), 2);
}

/// The shared TCP reassembly runs after the firewall: what the firewall denies
/// never takes reassembly memory.
#[test]
fn reassembly_never_sees_what_the_firewall_denies() {
    let d = tempfile::tempdir().unwrap();
    let mut frames = capture(|f, _| f.to_vec(), 40000);
    // Mid-stream data to port 22: no state, denied.
    for i in 0..3u32 {
        let f = build::tcp_v4(C, S, 50000, 22, 1000 + 100 * i, 1, ACK | PSH, &[b'x'; 100]);
        frames.push((frames.last().unwrap().0 + 1_000, f));
    }
    let pcap = d.path().join("mixed.pcap");
    write_pcap(&pcap, &frames);
    let chain = format!(
        "{}  - type: ips\n    rules:\n      - 'alert tcp any any -> any 22 (msg:\"x\"; content:\"xxxx\"; sid:9;)'\n",
        ALLOW_WEB
    );
    let r = run(d.path(), &chain, &pcap);
    assert_eq!(r.stats["forwarded"], 8);
    let re = r.stats["reassembly_counters"].as_array().unwrap();
    let packets = re
        .iter()
        .find(|c| c[0] == "reassembly_packets")
        .map(|c| c[1].as_u64().unwrap());
    assert_eq!(packets, Some(8), "{re:?}");
    assert!(r.events.is_empty(), "denied bytes were never inspected");
}
