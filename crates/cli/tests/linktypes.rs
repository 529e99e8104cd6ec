//! `sluice run` on captures that are not Ethernet (Linux cooked SLL and SLL2,
//! raw IP, IPv4, IPv6, BSD null and loopback, NFLOG): a firewall denying everything drops every packet, one allowing the
//! flows by their 5-tuples forwards them, and `--out` is written in the input's
//! link type, record for record as the input, decoded by tshark as the input is.

use std::path::Path;
use std::process::Command;

use sluice_wire::build::{self, Transport};
use sluice_wire::udp::UdpRepr;
use sluice_wire::IpAddr;

const V6C: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6S: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

mod common;
use common::sluice;

fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 200];
    let t = Transport::Udp(UdpRepr {
        src_port: sport,
        dst_port: dport,
    });
    let n = build::write_frame(&mut buf, src, dst, t, payload).unwrap();
    buf.truncate(n);
    buf
}

/// IP packets (no link header): a TCP handshake with data each way over IPv4 and
/// over IPv6, and a UDP exchange over each.
fn ip_packets() -> Vec<Vec<u8>> {
    let (c4, s4) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let (syn, ack, psh) = (0x02, 0x10, 0x18);
    let frames = vec![
        build::tcp_v4(c4, s4, 40000, 8000, 100, 0, syn, b""),
        build::tcp_v4(s4, c4, 8000, 40000, 500, 101, syn | ack, b""),
        build::tcp_v4(c4, s4, 40000, 8000, 101, 501, ack, b""),
        build::tcp_v4(c4, s4, 40000, 8000, 101, 501, psh, b"hello"),
        build::tcp_v4(s4, c4, 8000, 40000, 501, 106, psh, b"world!"),
        build::udp_v4(c4, s4, 5000, 6000, b"ping"),
        build::udp_v4(s4, c4, 6000, 5000, b"pong"),
        build::tcp_v6(V6C, V6S, 40001, 8001, 7, 0, syn, b""),
        build::tcp_v6(V6S, V6C, 8001, 40001, 70, 8, syn | ack, b""),
        build::tcp_v6(V6C, V6S, 40001, 8001, 8, 71, ack, b""),
        build::tcp_v6(V6C, V6S, 40001, 8001, 8, 71, psh, b"six"),
        udp(IpAddr::V6(V6C), IpAddr::V6(V6S), 5001, 6001, b"ping6"),
        udp(IpAddr::V6(V6S), IpAddr::V6(V6C), 6001, 5001, b"pong6"),
    ];
    frames.into_iter().map(|f| f[14..].to_vec()).collect()
}

/// `ip` with the link-layer header of `linktype` (113, 101 or 0).
fn record(linktype: u32, i: usize, ip: &[u8]) -> Vec<u8> {
    let v4 = ip[0] >> 4 == 4;
    let mut r = vec![];
    match linktype {
        113 => {
            // Received (host) or sent (outgoing) on an Ethernet interface.
            let pkttype: u16 = if i.is_multiple_of(2) { 0 } else { 4 };
            r.extend_from_slice(&pkttype.to_be_bytes());
            r.extend_from_slice(&1u16.to_be_bytes());
            r.extend_from_slice(&6u16.to_be_bytes());
            r.extend_from_slice(&[0x00, 0x16, 0x3e, 0, 0, i as u8, 0, 0]);
            r.extend_from_slice(if v4 { &[0x08, 0x00] } else { &[0x86, 0xdd] });
        }
        0 => {
            let af: u32 = if v4 { 2 } else { 30 };
            r.extend_from_slice(&af.to_le_bytes());
        }
        108 => {
            let af: u32 = if v4 { 2 } else { 24 };
            r.extend_from_slice(&af.to_be_bytes());
        }
        276 => {
            r.extend_from_slice(if v4 { &[0x08, 0x00] } else { &[0x86, 0xdd] });
            r.extend_from_slice(&[0, 0]);
            r.extend_from_slice(&(2 + i as u32).to_be_bytes());
            r.extend_from_slice(&1u16.to_be_bytes());
            r.extend_from_slice(&[if i.is_multiple_of(2) { 0 } else { 4 }, 6]);
            r.extend_from_slice(&[0x00, 0x16, 0x3e, 0, 0, i as u8, 0, 0]);
        }
        239 => {
            r.extend_from_slice(&[if v4 { 2 } else { 10 }, 0, 0, 1]);
            let tlv = 4 + ip.len();
            r.extend_from_slice(&(tlv as u16).to_le_bytes());
            r.extend_from_slice(&9u16.to_le_bytes());
            r.extend_from_slice(ip);
            r.resize(4 + tlv.div_ceil(4) * 4, 0);
            return r;
        }
        _ => {}
    }
    r.extend_from_slice(ip);
    r
}

fn pcap(linktype: u32, records: &[Vec<u8>]) -> Vec<u8> {
    let mut f = 0xa1b2c3d4u32.to_le_bytes().to_vec();
    f.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&linktype.to_le_bytes());
    for (i, r) in records.iter().enumerate() {
        for v in [1_700_000_000 + i as u32, 0, r.len() as u32, r.len() as u32] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(r);
    }
    f
}

/// The record bytes of a little-endian pcap.
fn records_of(file: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut off = 24;
    while off < file.len() {
        let incl = u32::from_le_bytes(file[off + 8..off + 12].try_into().unwrap()) as usize;
        out.push(file[off + 16..off + 16 + incl].to_vec());
        off += 16 + incl;
    }
    out
}

fn protocols(path: &Path) -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args(["-T", "fields", "-e", "frame.protocols"])
        .output()
        .expect("tshark runs (scripts/common.sh installs it)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn chain(dir: &Path, name: &str, rules: &str) -> String {
    let p = dir.join(format!("{name}.yaml"));
    let yaml = format!(
        "name: {name}\nfunctions:\n  - type: firewall\n    rules: |\n{}\n",
        rules
            .lines()
            .map(|l| format!("      {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    std::fs::write(&p, yaml).unwrap();
    p.to_string_lossy().into_owned()
}

fn run(chain: &str, input: &Path, out: &Path) -> serde_json::Value {
    let (code, stdout, err) = sluice(&[
        "run",
        "--chain",
        chain,
        "--pcap",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn runs_on_cooked_raw_and_loopback_captures_and_writes_their_link_type() {
    let d = tempfile::tempdir().unwrap();
    let deny = chain(d.path(), "deny", "default deny");
    let allow = chain(
        d.path(),
        "allow",
        "allow tcp from 10.0.0.1 to 10.0.0.2 sport 40000 port 8000\n\
         allow udp from 10.0.0.1 to 10.0.0.2 sport 5000 port 6000\n\
         allow tcp from 2001:db8::1 to 2001:db8::2 sport 40001 port 8001\n\
         allow udp from 2001:db8::1 to 2001:db8::2 sport 5001 port 6001\n\
         default deny",
    );
    let all = ip_packets();
    for (linktype, name, first) in [
        (113, "sll", "sll"),
        (276, "sll2", "sll"),
        (101, "raw", "raw"),
        (228, "ipv4", "ip:"),
        (229, "ipv6", "ipv6:"),
        (0, "null", "null"),
        (108, "loop", "null"),
        (239, "nflog", "nflog"),
    ] {
        // Link types 228 and 229 carry one address family each.
        let ips: Vec<Vec<u8>> = all
            .iter()
            .filter(|ip| match linktype {
                228 => ip[0] >> 4 == 4,
                229 => ip[0] >> 4 == 6,
                _ => true,
            })
            .cloned()
            .collect();
        let records: Vec<Vec<u8>> = ips
            .iter()
            .enumerate()
            .map(|(i, ip)| record(linktype, i, ip))
            .collect();
        let input = d.path().join(format!("{name}.pcap"));
        std::fs::write(&input, pcap(linktype, &records)).unwrap();
        let want = protocols(&input);
        assert_eq!(want.len(), ips.len());
        assert!(
            want.iter()
                .all(|p| p.starts_with(first) && (p.contains(":tcp") || p.contains(":udp"))),
            "{name}: {want:?}"
        );

        let out = d.path().join(format!("{name}-denied.pcap"));
        let v = run(&deny, &input, &out);
        assert_eq!(v["frames_read"], ips.len(), "{name}");
        assert_eq!(v["stats"]["forwarded"], 0, "{name}");
        assert_eq!(v["stats"]["non_ip"], 0, "{name}: every frame parses as IP");
        let written = std::fs::read(&out).unwrap();
        assert_eq!(written.len(), 24, "{name}: only the file header");
        assert_eq!(
            u32::from_le_bytes(written[20..24].try_into().unwrap()),
            linktype
        );

        let out = d.path().join(format!("{name}-allowed.pcap"));
        let v = run(&allow, &input, &out);
        assert_eq!(v["stats"]["forwarded"], ips.len(), "{name}: {v}");
        let written = std::fs::read(&out).unwrap();
        assert_eq!(
            u32::from_le_bytes(written[20..24].try_into().unwrap()),
            linktype
        );
        assert_eq!(
            records_of(&written),
            records,
            "{name}: records as they came"
        );
        assert_eq!(protocols(&out), want, "{name}");

        // The IPS reads the streams, the monitor counts the flows.
        let eve = d.path().join(format!("{name}.json"));
        let ips_chain = d.path().join("ips.yaml");
        std::fs::write(
            &ips_chain,
            "name: ips\nfunctions:\n  - type: ips\n    rules:\n      - 'alert tcp any any -> any 8000 (msg:\"hello\"; content:\"hello\"; sid:1;)'\n      - 'alert tcp any any -> any 8001 (msg:\"six\"; content:\"six\"; sid:2;)'\n      - 'alert udp any any -> any any (msg:\"pong\"; content:\"pong\"; sid:3;)'\n  - type: monitor\n",
        )
        .unwrap();
        let (code, _, err) = sluice(&[
            "run",
            "--chain",
            ips_chain.to_str().unwrap(),
            "--pcap",
            input.to_str().unwrap(),
            "--eve",
            eve.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let events: Vec<serde_json::Value> = std::fs::read_to_string(&eve)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut sids: Vec<u64> = events
            .iter()
            .filter(|e| e["event_type"] == "alert")
            .map(|e| e["alert"]["signature_id"].as_u64().unwrap())
            .collect();
        sids.sort();
        let (want_sids, want_flows): (&[u64], usize) = match linktype {
            228 => (&[1, 3], 2),
            229 => (&[2, 3], 2),
            _ => (&[1, 2, 3, 3], 4),
        };
        assert_eq!(sids, want_sids, "{name}: {events:?}");
        let flows: Vec<_> = events
            .iter()
            .filter(|e| e["event_type"] == "flow")
            .collect();
        assert_eq!(
            flows.len(),
            want_flows,
            "{name}: a TCP and a UDP conversation per family"
        );
        let pkts: u64 = flows
            .iter()
            .map(|f| {
                f["flow"]["pkts_toserver"].as_u64().unwrap()
                    + f["flow"]["pkts_toclient"].as_u64().unwrap()
            })
            .sum();
        assert_eq!(pkts, ips.len() as u64, "{name}: every packet counted once");
    }
}

#[test]
fn unsupported_link_types_are_named() {
    let d = tempfile::tempdir().unwrap();
    let chain = chain(d.path(), "deny", "default deny");
    let input = d.path().join("wifi.pcap");
    std::fs::write(&input, pcap(105, &[])).unwrap();
    let out = d.path().join("out.pcap");
    let (code, _, err) = sluice(&[
        "run",
        "--chain",
        &chain,
        "--pcap",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("wifi.pcap") && err.contains("link type 105 (IEEE802_11)"),
        "{err}"
    );
    assert!(
        !out.exists(),
        "no output is created for an input that cannot be read"
    );
}
