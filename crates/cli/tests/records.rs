//! `sluice run`'s flow records against tshark's conversation statistics
//! (`tshark -q -z conv,tcp -z conv,udp`, an independent count of the same
//! frames), with and without `--pipeline` (issue 19, items 2 and 3).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::process::Command;

use sluice_pcap::PcapWriter;
use sluice_trafficgen::{idle_trace, IdleSpec};

const SEC: u64 = 1_000_000_000;

/// (proto, lower endpoint, higher endpoint) -> packets and bytes from the
/// lower endpoint to the higher one, and back.
type Convs = BTreeMap<(String, String, String), [u64; 4]>;

mod common;
use common::sluice;

/// Adds a conversation seen from `a` to `b` (`ab`: a to b, `ba`: b to a).
fn add(convs: &mut Convs, proto: &str, a: String, b: String, ab: [u64; 2], ba: [u64; 2]) {
    let (key, v) = if a <= b {
        ((proto.to_string(), a, b), [ab[0], ab[1], ba[0], ba[1]])
    } else {
        ((proto.to_string(), b, a), [ba[0], ba[1], ab[0], ab[1]])
    };
    let e = convs.entry(key).or_insert([0; 4]);
    for (x, y) in e.iter_mut().zip(v) {
        *x += y;
    }
}

/// tshark's TCP and UDP conversation tables: per row `A <-> B`, then
/// frames and bytes `<-` (B to A), then `->` (A to B).
fn tshark_convs(pcap: &Path) -> Convs {
    let out = Command::new("tshark")
        .args(["-n", "-q", "-z", "conv,tcp", "-z", "conv,udp", "-r"])
        .arg(pcap)
        .output()
        .expect("tshark runs (scripts/common.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut convs = Convs::new();
    let mut proto = "";
    for line in text.lines() {
        if line.starts_with("TCP Conversations") {
            proto = "TCP";
        } else if line.starts_with("UDP Conversations") {
            proto = "UDP";
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 8 || w[1] != "<->" {
            continue;
        }
        // A <-> B  frames bytes-number "bytes"  frames bytes-number "bytes" ...
        assert_eq!(
            (w[5], w[8]),
            ("bytes", "bytes"),
            "byte counts in exact units: {line}"
        );
        let n = |s: &str| s.replace(',', "").parse::<u64>().unwrap();
        let ba = [n(w[3]), n(w[4])];
        let ab = [n(w[6]), n(w[7])];
        add(&mut convs, proto, w[0].into(), w[2].into(), ab, ba);
    }
    convs
}

/// The monitor's flow records in an EVE file, summed per conversation.
fn eve_convs(eve: &Path) -> Convs {
    let mut convs = Convs::new();
    for line in std::fs::read_to_string(eve).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["event_type"] != "flow" {
            continue;
        }
        let end = |ip: &str, port: &str| format!("{}:{}", v[ip].as_str().unwrap(), v[port]);
        let f = &v["flow"];
        let g = |k: &str| f[k].as_u64().unwrap();
        add(
            &mut convs,
            v["proto"].as_str().unwrap(),
            end("src_ip", "src_port"),
            end("dest_ip", "dest_port"),
            [g("pkts_toserver"), g("bytes_toserver")],
            [g("pkts_toclient"), g("bytes_toclient")],
        );
    }
    convs
}

#[test]
fn flow_records_match_tsharks_conversations_with_and_without_pipelining() {
    let d = tempfile::tempdir().unwrap();
    // A monitor whose idle timeout and close linger outlast the capture, so
    // every frame of a conversation lands in one record, as in tshark's table.
    let chain = d.path().join("monitor.yaml");
    std::fs::write(
        &chain,
        "name: m\nfunctions:\n  - type: monitor\n    idle_timeout_secs: 100000\n    \
         close_linger_ms: 100000000\nsettings:\n  batch_size: 32\n  timer_interval_ms: 3600000\n",
    )
    .unwrap();
    for seed in [3, 4] {
        let trace = idle_trace(&IdleSpec {
            seed,
            flows: 80,
            timeouts_ns: vec![SEC / 2, 2 * SEC],
            reuse_share: 0.0,
            payload_max: 300,
            ..IdleSpec::default()
        });
        let pcap = d.path().join(format!("idle-{seed}.pcap"));
        let mut w = PcapWriter::new(File::create(&pcap).unwrap()).unwrap();
        for (ts, f) in trace.iter() {
            w.write(ts, f).unwrap();
        }
        w.finish().unwrap();
        let want = tshark_convs(&pcap);
        assert_eq!(want.len(), 80, "every conversation in tshark's tables");
        for pipeline in [None, Some("64"), Some("256")] {
            let eve = d.path().join("eve.json");
            let mut args = vec![
                "run",
                "--chain",
                chain.to_str().unwrap(),
                "--pcap",
                pcap.to_str().unwrap(),
                "--eve",
                eve.to_str().unwrap(),
            ];
            if let Some(p) = pipeline {
                args.extend(["--pipeline", p]);
            }
            let (code, _, err) = sluice(&args);
            assert_eq!(code, 0, "{err}");
            let got = eve_convs(&eve);
            assert_eq!(got, want, "seed {seed}, pipeline {pipeline:?}");
        }
    }
}
