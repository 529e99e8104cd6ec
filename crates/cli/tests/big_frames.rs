//! `sluice run` over jumbo frames (MTU 9000) and the 60 KiB TCP segments of a
//! capture taken with segmentation offload: nothing is dropped before the
//! chain, and the firewall, the IPS and the monitor see every byte.

use std::path::Path;

use sluice_wire::build;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, SYN};

const CLIENT: [u8; 4] = [10, 1, 0, 5];
const SERVER: [u8; 4] = [10, 2, 0, 7];
const CPORT: u16 = 40_000;
const SPORT: u16 = 80;
/// Payload of a 9000-byte frame (14 + 20 + 20 bytes of headers).
const JUMBO: usize = 9000 - 54;
/// Payload of an offloaded segment.
const GSO: usize = 60 * 1024;
/// Lies inside the first 60 KiB client segment.
const INSIDE: &[u8] = b"BIG-NEEDLE-INSIDE-A-SEGMENT";
/// Starts in the first 60 KiB client segment and ends in the second.
const SPANNING: &[u8] = b"BIG-NEEDLE-SPANNING-TWO-SEGMENTS";

mod common;
use common::sluice;

/// Filler that holds neither needle.
fn filler(len: usize, salt: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b"abcdefghijklmnopqrstuvwxyz"[(i + salt) % 26])
        .collect()
}

/// The frames of one connection so far and its next sequence numbers.
struct Conn {
    client_seq: u32,
    server_seq: u32,
    frames: Vec<Vec<u8>>,
}

impl Conn {
    fn seg(&mut self, to_server: bool, flags: u8, payload: &[u8]) {
        let (c, s) = (self.client_seq, self.server_seq);
        let f = if to_server {
            build::tcp_v4(CLIENT, SERVER, CPORT, SPORT, c, s, flags, payload)
        } else {
            build::tcp_v4(SERVER, CLIENT, SPORT, CPORT, s, c, flags, payload)
        };
        let adv = payload.len() as u32 + u32::from(flags & (SYN | FIN) != 0);
        if to_server {
            self.client_seq = c.wrapping_add(adv);
        } else {
            self.server_seq = s.wrapping_add(adv);
        }
        self.frames.push(f);
    }
}

/// One TCP connection: handshake, client segments of 9000-byte frames and of
/// 60 KiB (the needles placed in them), a server reply of both sizes, teardown.
fn conversation() -> Vec<Vec<u8>> {
    let mut k = Conn {
        client_seq: 1_000,
        server_seq: 50_000,
        frames: Vec::new(),
    };
    k.seg(true, SYN, b"");
    k.seg(false, SYN | ACK, b"");
    k.seg(true, ACK, b"");
    for i in 0..3 {
        k.seg(true, ACK | PSH, &filler(JUMBO, i));
    }
    let mut first = filler(GSO, 7);
    first[30_000..30_000 + INSIDE.len()].copy_from_slice(INSIDE);
    let split = 11;
    first[GSO - split..].copy_from_slice(&SPANNING[..split]);
    let mut second = filler(GSO, 3);
    second[..SPANNING.len() - split].copy_from_slice(&SPANNING[split..]);
    k.seg(true, ACK, &first);
    k.seg(true, ACK | PSH, &second);
    k.seg(false, ACK, &filler(GSO, 1));
    k.seg(false, ACK | PSH, &filler(JUMBO, 2));
    k.seg(true, FIN | ACK, b"");
    k.seg(false, FIN | ACK, b"");
    k.seg(true, ACK, b"");
    k.frames
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = sluice_pcap::PcapWriter::new(std::io::BufWriter::new(f)).unwrap();
    for (i, fr) in frames.iter().enumerate() {
        w.write(1_000_000_000 + i as u64 * 1_000_000, fr).unwrap();
    }
    w.finish().unwrap();
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = sluice_pcap::PcapReader::new(f).unwrap();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while r.next_into(&mut buf).unwrap().is_some() {
        out.push(buf.clone());
    }
    out
}

/// Runs `chain` (YAML) over the conversation; returns the summary, the
/// forwarded frames and the EVE events.
fn run(chain: &str) -> (serde_json::Value, Vec<Vec<u8>>, Vec<serde_json::Value>) {
    let d = tempfile::tempdir().unwrap();
    let chain_path = d.path().join("chain.yaml");
    std::fs::write(&chain_path, chain).unwrap();
    let pcap = d.path().join("in.pcap");
    write_pcap(&pcap, &conversation());
    let out = d.path().join("out.pcap");
    let eve = d.path().join("eve.json");
    let (code, stdout, err) = sluice(&[
        "run",
        "--chain",
        chain_path.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--eve",
        eve.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let events = std::fs::read_to_string(&eve)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (v, read_pcap(&out), events)
}

fn assert_nothing_dropped_before_the_chain(v: &serde_json::Value, frames: usize) {
    assert_eq!(v["frames_read"], frames as u64);
    assert_eq!(v["oversize"], 0);
    assert_eq!(v["large_pool_exhausted"], 0);
    assert_eq!(v["stats"]["packets"], frames as u64, "{v}");
}

#[test]
fn the_capture_has_jumbo_and_offloaded_frames() {
    let frames = conversation();
    assert_eq!(frames.iter().filter(|f| f.len() == 9000).count(), 4);
    assert_eq!(frames.iter().filter(|f| f.len() == GSO + 54).count(), 3);
}

#[test]
fn a_firewall_allowing_the_flow_forwards_every_big_frame_unchanged() {
    let (v, out, _) = run(
        "name: fw\nfunctions:\n  - type: firewall\n    rules: |\n      allow tcp from 10.1.0.0/16 to 10.2.0.0/16 port 80\n      default deny\n",
    );
    let input = conversation();
    assert_nothing_dropped_before_the_chain(&v, input.len());
    assert_eq!(v["stats"]["forwarded"], input.len() as u64, "{v}");
    assert!(
        out == input,
        "forwarded frames are byte-identical, in order"
    );
}

#[test]
fn the_ips_finds_content_inside_a_big_segment_and_across_two() {
    let chain = format!(
        "name: ips\nfunctions:\n  - type: ips\n    rules:\n      - 'alert tcp any any -> any 80 (msg:\"inside\"; flow:to_server,established; content:\"{}\"; sid:9000001; rev:1;)'\n      - 'alert tcp any any -> any 80 (msg:\"spanning\"; flow:to_server,established; content:\"{}\"; sid:9000002; rev:1;)'\n      - 'alert tcp any 80 -> any any (msg:\"absent\"; content:\"{}\"; sid:9000003; rev:1;)'\n",
        std::str::from_utf8(INSIDE).unwrap(),
        std::str::from_utf8(SPANNING).unwrap(),
        std::str::from_utf8(INSIDE).unwrap(),
    );
    let (v, out, events) = run(&chain);
    let input = conversation();
    assert_nothing_dropped_before_the_chain(&v, input.len());
    assert_eq!(out.len(), input.len(), "alerts do not drop");
    let mut sids: Vec<u64> = events
        .iter()
        .filter(|e| e["event_type"] == "alert")
        .map(|e| e["alert"]["signature_id"].as_u64().unwrap())
        .collect();
    sids.sort();
    assert_eq!(sids, vec![9000001, 9000002]);
    assert_eq!(v["stats"]["alerts"], 2);
}

#[test]
fn the_monitor_counts_every_byte_of_big_frames() {
    let (v, _, events) = run("name: mon\nfunctions:\n  - type: monitor\n");
    let input = conversation();
    assert_nothing_dropped_before_the_chain(&v, input.len());
    let flows: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event_type"] == "flow")
        .collect();
    assert_eq!(flows.len(), 1, "{events:?}");
    let f = &flows[0]["flow"];
    let to_server: u64 = input
        .iter()
        .filter(|fr| fr[26..30] == CLIENT)
        .map(|fr| fr.len() as u64)
        .sum();
    let all: u64 = input.iter().map(|fr| fr.len() as u64).sum();
    assert_eq!(f["bytes_toserver"].as_u64().unwrap(), to_server);
    assert_eq!(
        f["bytes_toserver"].as_u64().unwrap() + f["bytes_toclient"].as_u64().unwrap(),
        all
    );
    assert_eq!(
        f["pkts_toserver"].as_u64().unwrap() + f["pkts_toclient"].as_u64().unwrap(),
        input.len() as u64
    );
}
