//! `sluice run` over a capture taken on a host with checksum offload: its
//! outgoing TCP segments hold garbage checksums there. `auto` (what `run`
//! uses when the spec does not say) finds out and stops checking, so the IPS
//! still sees the stream; `ipv4` (the deployed default) drops every such
//! segment before reassembly, as a receiving host would.

use std::path::Path;

use sluice_wire::build;
use sluice_wire::parse::parse_frame;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;
use common::sluice;

const C: [u8; 4] = [10, 1, 0, 5];
const S: [u8; 4] = [10, 2, 0, 7];

/// A connection whose client segments (the capturing host's own) carry
/// wrong TCP checksums: the handshake, 1,200 requests, then the signature.
fn offloaded_capture() -> Vec<Vec<u8>> {
    let (mut cs, ss) = (1_000u32, 50_000u32);
    let mut frames = vec![
        build::tcp_v4(C, S, 40000, 80, cs, 0, SYN, b""),
        build::tcp_v4(S, C, 80, 40000, ss, cs + 1, SYN | ACK, b""),
    ];
    cs += 1;
    frames.push(build::tcp_v4(C, S, 40000, 80, cs, ss + 1, ACK, b""));
    let mut send = |frames: &mut Vec<Vec<u8>>, payload: &[u8]| {
        frames.push(build::tcp_v4(
            C,
            S,
            40000,
            80,
            cs,
            ss + 1,
            ACK | PSH,
            payload,
        ));
        cs += payload.len() as u32;
    };
    for _ in 0..1_200 {
        send(&mut frames, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    }
    send(&mut frames, b"GET /OFFLOADED-NEEDLE HTTP/1.1\r\n\r\n");
    for f in frames.iter_mut() {
        let m = parse_frame(f).unwrap();
        if m.flow.src == sluice_wire::IpAddr::V4(C) {
            let at = m.l4_offset as usize + 16;
            f[at] ^= 0x5a;
        }
    }
    frames
}

fn run(dir: &Path, settings: &str) -> (serde_json::Value, String) {
    let chain = dir.join("chain.yaml");
    std::fs::write(
        &chain,
        format!("name: ips\nfunctions:\n  - type: ips\n    rules:\n      - 'alert tcp any any -> any 80 (msg:\"needle\"; flow:to_server,established; content:\"OFFLOADED-NEEDLE\"; sid:1;)'\n{settings}"),
    )
    .unwrap();
    let pcap = dir.join("in.pcap");
    let f = std::fs::File::create(&pcap).unwrap();
    let mut w = sluice_pcap::PcapWriter::new(std::io::BufWriter::new(f)).unwrap();
    for (i, fr) in offloaded_capture().iter().enumerate() {
        w.write(1_000_000_000 + i as u64 * 1_000, fr).unwrap();
    }
    w.finish().unwrap();
    let args = [
        "run",
        "--chain",
        chain.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
    ];
    let (code, text, err) = sluice(&args);
    assert_eq!(code, 0, "{err}");
    let (code, json, err) = sluice(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0, "{err}");
    (serde_json::from_str(&json).unwrap(), text)
}

#[test]
fn auto_finds_offloaded_checksums_and_keeps_inspecting() {
    let d = tempfile::tempdir().unwrap();
    let (v, text) = run(d.path(), "");
    assert_eq!(v["stats"]["alerts"], 1, "{v}");
    assert!(
        text.contains("TCP checksums not verified"),
        "the summary says the checks are off: {text}"
    );
}

#[test]
fn ipv4_drops_what_a_receiving_host_would() {
    let d = tempfile::tempdir().unwrap();
    let (v, text) = run(d.path(), "settings:\n  verify_checksums: ipv4\n");
    assert_eq!(v["stats"]["alerts"], 0, "{v}");
    assert!(text.contains("bad_l4_checksum="), "{text}");
    assert!(!text.contains("TCP checksums not verified"), "{text}");
}
