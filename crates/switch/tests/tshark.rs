//! Our fabric packets, written to a pcap, decode as Geneve in tshark (Wireshark's
//! dissector, an independent implementation of RFC 8926): VNI, protocol type, the
//! option, and the inner TCP segment.

use std::process::Command;

use sluice_packet::PacketPool;
use sluice_pcap::PcapWriter;
use sluice_switch::tunnel::{encap, Endpoint, OPTION_CLASS};
use sluice_wire::build;
use sluice_wire::ethernet::MacAddr;

#[test]
fn tshark_decodes_our_geneve() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fabric.pcap");
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let mut pool = PacketPool::new(2);
    let mut p = pool.alloc().unwrap();
    p.set_frame(&build::tcp_v4(
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        43210,
        80,
        7,
        0,
        0x02,
        b"",
    ))
    .unwrap();
    let a = Endpoint {
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        ip: [172, 31, 0, 1],
    };
    let b = Endpoint {
        mac: MacAddr([2, 0, 0, 0, 0, 2]),
        ip: [172, 31, 0, 2],
    };
    encap(&mut p, &a, &b, 0x1234, Some((5, 2)), 99).unwrap();
    w.write(1_000_000_000, p.data()).unwrap();
    w.finish().unwrap();

    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-e",
            "geneve.vni",
            "-e",
            "geneve.proto_type",
            "-e",
            "geneve.option.class",
            "-e",
            "tcp.dstport",
            "-e",
            "_ws.malformed",
        ])
        .output()
        .expect("tshark runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.trim_end_matches('\n').split('\t').collect();
    assert_eq!(fields.len(), 5, "{text:?}");
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(u64::MAX);
    assert_eq!(hex(fields[0]), 0x1234, "VNI");
    assert_eq!(hex(fields[1]), 0x6558, "transparent Ethernet bridging");
    assert_eq!(hex(fields[2]), OPTION_CLASS as u64, "our option class");
    assert_eq!(fields[3], "80", "the inner TCP segment is dissected");
    assert_eq!(fields[4], "", "no malformed-packet marker");
}
