//! Every supported link type, in captures built here: records read as the Ethernet
//! frames the synthetic-header rules give, and written back byte for byte; pcapng
//! files mixing interfaces of several link types; and what tshark makes of the
//! files the writer produces.

use std::process::Command;

use sluice_pcap::{LinkType, PcapError, PcapReader, PcapWriter};
use sluice_wire::build::{self, Transport};
use sluice_wire::udp::UdpRepr;
use sluice_wire::IpAddr;

const V6A: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6B: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn udp_v6(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 200];
    let t = Transport::Udp(UdpRepr {
        src_port: sport,
        dst_port: dport,
    });
    let n = build::write_frame(&mut buf, IpAddr::V6(V6A), IpAddr::V6(V6B), t, payload).unwrap();
    buf.truncate(n);
    buf
}

/// IP packets (without Ethernet): TCP and UDP over IPv4 and IPv6; the payload
/// lengths make NFLOG need padding.
fn ip_packets() -> Vec<Vec<u8>> {
    let frames = [
        build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80, 1, 0, 0x02, b""),
        build::udp_v4([10, 0, 0, 1], [10, 0, 0, 53], 5000, 6000, b"query"),
        build::tcp_v6(V6A, V6B, 40001, 9999, 9, 0, 0x18, b"hello!"),
        udp_v6(1234, 4321, b"abc"),
    ];
    frames.iter().map(|f| f[14..].to_vec()).collect()
}

fn is_v4(ip: &[u8]) -> bool {
    ip[0] >> 4 == 4
}

/// The record of `ip` in link type `lt` (index `i` varies the header fields), and
/// the Ethernet frame the reader must make of it.
fn record(lt: LinkType, i: usize, ip: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let et: u16 = if is_v4(ip) { 0x0800 } else { 0x86dd };
    let mut dst = [0xce, 0, 0, 0, 0, 0];
    let mut src = [0u8; 6];
    let mut rec = vec![];
    let mac = [0x00, 0x11, 0x22, 0x33, 0x44, i as u8];
    match lt {
        LinkType::Ethernet => unreachable!(),
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => {}
        LinkType::Null => {
            // Host order (little-endian here); the BSDs' three AF_INET6 values.
            let af: u32 = if is_v4(ip) { 2 } else { [24, 28, 30][i % 3] };
            rec.extend_from_slice(&af.to_le_bytes());
            dst[2..6].copy_from_slice(&rec);
        }
        LinkType::Loop => {
            let af: u32 = if is_v4(ip) { 2 } else { 24 };
            rec.extend_from_slice(&af.to_be_bytes());
            dst[2..6].copy_from_slice(&rec);
        }
        LinkType::LinuxSll => {
            let pkttype: u16 = if i.is_multiple_of(2) { 0 } else { 4 }; // host, outgoing
            rec.extend_from_slice(&pkttype.to_be_bytes());
            rec.extend_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
            rec.extend_from_slice(&6u16.to_be_bytes());
            rec.extend_from_slice(&mac);
            rec.extend_from_slice(&[0, 0]);
            rec.extend_from_slice(&et.to_be_bytes());
            dst = [0xce, (pkttype as u8) << 4 | 6, 0, 1, 0, 0];
            src = mac;
        }
        LinkType::LinuxSll2 => {
            let pkttype: u8 = if i.is_multiple_of(2) { 0 } else { 4 };
            rec.extend_from_slice(&et.to_be_bytes());
            rec.extend_from_slice(&[0, 0]);
            rec.extend_from_slice(&(300 + i as u32).to_be_bytes());
            rec.extend_from_slice(&1u16.to_be_bytes());
            rec.extend_from_slice(&[pkttype, 6]);
            rec.extend_from_slice(&mac);
            rec.extend_from_slice(&[0, 0]);
            let ifx = (300 + i as u16).to_be_bytes();
            dst = [0xce, pkttype << 4 | 6, 0, 1, ifx[0], ifx[1]];
            src = mac;
        }
        LinkType::Nflog => {
            let family = if is_v4(ip) { 2 } else { 10 };
            rec.extend_from_slice(&[family, 0, 0, 7]); // resource id 7, big-endian
            dst[2..6].copy_from_slice(&rec);
            let tlv_len = 4 + ip.len();
            rec.extend_from_slice(&(tlv_len as u16).to_le_bytes());
            rec.extend_from_slice(&9u16.to_le_bytes());
            rec.extend_from_slice(ip);
            rec.resize(4 + tlv_len.div_ceil(4) * 4, 0);
            let mut eth = dst.to_vec();
            eth.extend_from_slice(&src);
            eth.extend_from_slice(&et.to_be_bytes());
            eth.extend_from_slice(ip);
            return (rec, eth);
        }
    }
    rec.extend_from_slice(ip);
    let mut eth = dst.to_vec();
    eth.extend_from_slice(&src);
    eth.extend_from_slice(&et.to_be_bytes());
    eth.extend_from_slice(ip);
    (rec, eth)
}

fn packets_for(lt: LinkType) -> Vec<Vec<u8>> {
    ip_packets()
        .into_iter()
        .filter(|ip| match lt {
            LinkType::Ipv4 => is_v4(ip),
            LinkType::Ipv6 => !is_v4(ip),
            _ => true,
        })
        .collect()
}

/// A microsecond pcap of `records`, little- or big-endian.
fn pcap(lt: u32, records: &[Vec<u8>], big: bool) -> Vec<u8> {
    let u32b = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut f = u32b(0xa1b2c3d4).to_vec();
    f.extend_from_slice(&u16b(2));
    f.extend_from_slice(&u16b(4));
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&u32b(65535));
    f.extend_from_slice(&u32b(lt));
    for (i, r) in records.iter().enumerate() {
        f.extend_from_slice(&u32b(100 + i as u32));
        f.extend_from_slice(&u32b(5));
        f.extend_from_slice(&u32b(r.len() as u32));
        f.extend_from_slice(&u32b(r.len() as u32));
        f.extend_from_slice(r);
    }
    f
}

fn block(t: u32, body: &[u8]) -> Vec<u8> {
    let len = 12 + body.len().div_ceil(4) * 4;
    let mut b = t.to_le_bytes().to_vec();
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b.extend_from_slice(body);
    b.resize(len - 4, 0);
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b
}

/// A pcapng file with one interface per link type in `ifaces` and
/// `(interface, bytes)` packets.
fn pcapng(ifaces: &[u32], packets: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut shb = 0x1a2b3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    let mut f = block(0x0a0d0d0a, &shb);
    for &lt in ifaces {
        let mut idb = (lt as u16).to_le_bytes().to_vec();
        idb.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        f.extend(block(1, &idb));
    }
    for (i, (iface, data)) in packets.iter().enumerate() {
        let mut epb = iface.to_le_bytes().to_vec();
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&(1_000_000 * i as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(data);
        f.extend(block(6, &epb));
    }
    f
}

struct Read {
    linktype: LinkType,
    frames: Vec<Vec<u8>>,
    headers: Vec<Vec<u8>>,
    record_types: Vec<LinkType>,
    skipped: u64,
}

fn read_all(bytes: &[u8]) -> Result<Read, PcapError> {
    let mut r = PcapReader::new(bytes)?;
    let mut out = Read {
        linktype: r.linktype(),
        frames: vec![],
        headers: vec![],
        record_types: vec![],
        skipped: 0,
    };
    let mut buf = vec![];
    while let Some(rec) = r.next_into(&mut buf)? {
        out.frames.push(buf.clone());
        out.headers.push(r.link_header().to_vec());
        out.record_types.push(rec.linktype);
    }
    out.skipped = r.skipped();
    Ok(out)
}

/// The record bytes of a pcap file (either byte order).
fn records_of(file: &[u8]) -> Vec<Vec<u8>> {
    let big = file[0] == 0xa1;
    let u32b = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    };
    let mut out = vec![];
    let mut off = 24;
    while off < file.len() {
        let incl = u32b(&file[off + 8..]) as usize;
        out.push(file[off + 16..off + 16 + incl].to_vec());
        off += 16 + incl;
    }
    out
}

fn linktype_of(file: &[u8]) -> u32 {
    u32::from_le_bytes(file[20..24].try_into().unwrap())
}

fn write_all(lt: LinkType, read: &Read, with_headers: bool) -> Vec<u8> {
    let mut w = PcapWriter::with_linktype(Vec::new(), lt).unwrap();
    for (i, (f, h)) in read.frames.iter().zip(&read.headers).enumerate() {
        if with_headers {
            w.write_with_header(i as u64, f, h).unwrap();
        } else {
            w.write(i as u64, f).unwrap();
        }
    }
    w.finish().unwrap()
}

const CONVERTED: [LinkType; 8] = [
    LinkType::Null,
    LinkType::Raw,
    LinkType::Loop,
    LinkType::LinuxSll,
    LinkType::Ipv4,
    LinkType::Ipv6,
    LinkType::Nflog,
    LinkType::LinuxSll2,
];

#[test]
fn every_link_type_reads_as_ethernet_and_writes_back_byte_for_byte() {
    for lt in CONVERTED {
        let (records, frames): (Vec<_>, Vec<_>) = packets_for(lt)
            .iter()
            .enumerate()
            .map(|(i, ip)| record(lt, i, ip))
            .unzip();
        assert!(!records.is_empty());
        for (name, file) in [
            ("pcap", pcap(lt.number(), &records, false)),
            (
                "pcapng",
                pcapng(
                    &[lt.number()],
                    &records.iter().map(|r| (0, r.clone())).collect::<Vec<_>>(),
                ),
            ),
        ] {
            let read = read_all(&file).unwrap_or_else(|e| panic!("{lt} {name}: {e}"));
            assert_eq!(read.linktype, lt, "{name}");
            assert_eq!(read.frames, frames, "{lt} {name}: Ethernet frames");
            assert!(read.record_types.iter().all(|&t| t == lt));
            assert_eq!(read.skipped, 0);

            let out = write_all(lt, &read, true);
            assert_eq!(linktype_of(&out), lt.number());
            assert_eq!(records_of(&out), records, "{lt} {name}: with headers");
            if lt != LinkType::Nflog {
                // Everything but NFLOG's other TLVs rides in the synthetic header.
                let out = write_all(lt, &read, false);
                assert_eq!(records_of(&out), records, "{lt} {name}: from frames");
            }
        }
    }
}

#[test]
fn big_endian_files_keep_their_null_header_and_nflog_tlvs() {
    let ips = ip_packets();
    // NULL in a big-endian file: the address family in big-endian order.
    let null: Vec<Vec<u8>> = ips
        .iter()
        .map(|ip| {
            let af: u32 = if is_v4(ip) { 2 } else { 30 };
            let mut r = af.to_be_bytes().to_vec();
            r.extend_from_slice(ip);
            r
        })
        .collect();
    let read = read_all(&pcap(0, &null, true)).unwrap();
    assert_eq!(read.frames.len(), 4);
    assert_eq!(&read.frames[2][12..14], &[0x86, 0xdd]);
    assert_eq!(records_of(&write_all(LinkType::Null, &read, false)), null);

    // NFLOG with a packet-header TLV and a prefix before the payload, big-endian.
    let mut rec = vec![2, 0, 0, 1];
    rec.extend_from_slice(&[0, 8, 0, 1, 0x08, 0x00, 1, 0]); // NFULA_PACKET_HDR
    rec.extend_from_slice(&[0, 7, 0, 10, b'f', b'w', 0, 0]); // NFULA_PREFIX "fw"
    rec.extend_from_slice(&((4 + ips[1].len()) as u16).to_be_bytes());
    rec.extend_from_slice(&9u16.to_be_bytes());
    rec.extend_from_slice(&ips[1]);
    rec.resize(rec.len().div_ceil(4) * 4, 0);
    let no_payload = vec![2, 0, 0, 1, 0, 8, 0, 1, 0x08, 0x00, 1, 0];
    let read = read_all(&pcap(239, &[no_payload, rec.clone()], true)).unwrap();
    assert_eq!(read.skipped, 1, "the message without a payload is skipped");
    assert_eq!(read.frames.len(), 1);
    assert_eq!(&read.frames[0][14..], &ips[1][..]);
    assert_eq!(read.headers[0], rec[..24], "up to the payload TLV's header");
    assert_eq!(
        records_of(&write_all(LinkType::Nflog, &read, true)),
        vec![rec]
    );
    // Without the header: the 4-byte header and one payload TLV, little-endian.
    let plain = records_of(&write_all(LinkType::Nflog, &read, false));
    let mut want = vec![2, 0, 0, 1];
    want.extend_from_slice(&((4 + ips[1].len()) as u16).to_le_bytes());
    want.extend_from_slice(&9u16.to_le_bytes());
    want.extend_from_slice(&ips[1]);
    want.resize(want.len().div_ceil(4) * 4, 0);
    assert_eq!(plain, vec![want]);
}

#[test]
fn pcapng_mixes_interfaces_of_different_link_types() {
    let ips = ip_packets();
    let (sll, sll_eth) = record(LinkType::LinuxSll, 1, &ips[0]);
    let (null, null_eth) = record(LinkType::Null, 0, &ips[2]);
    let eth = build::udp_v4([10, 1, 1, 1], [10, 1, 1, 2], 1, 2, b"x");
    let file = pcapng(
        &[113, 101, 1, 0],
        &[
            (0, sll.clone()),
            (1, ips[3].clone()),
            (2, eth.clone()),
            (3, null.clone()),
            (1, vec![0x55, 1, 2, 3]), // not IP: skipped
        ],
    );
    let read = read_all(&file).unwrap();
    assert_eq!(read.linktype, LinkType::LinuxSll, "the first interface's");
    let (_, raw_eth) = record(LinkType::Raw, 0, &ips[3]);
    assert_eq!(read.frames, vec![sll_eth, raw_eth, eth.clone(), null_eth]);
    assert_eq!(
        read.record_types,
        vec![
            LinkType::LinuxSll,
            LinkType::Raw,
            LinkType::Ethernet,
            LinkType::Null
        ]
    );
    assert_eq!(read.headers[2], Vec::<u8>::new());
    assert_eq!(read.skipped, 1);

    // All written as SLL: the SLL record is as it was, the others get defaults.
    let out = records_of(&write_all(LinkType::LinuxSll, &read, false));
    assert_eq!(out[0], sll);
    // From a plain Ethernet frame: host, ARPHRD_ETHER, the source MAC.
    assert_eq!(&out[2][..6], &[0, 0, 0, 1, 0, 6]);
    assert_eq!(&out[2][6..12], &eth[6..12]);
    assert_eq!(&out[2][14..16], &[0x08, 0x00]);
    assert_eq!(&out[2][16..], &eth[14..]);
}

#[test]
fn unknown_link_types_and_unwritable_frames_are_named() {
    let e = read_all(&pcap(105, &[], false)).err().unwrap().to_string();
    assert!(e.contains("105") && e.contains("IEEE802_11"), "{e}");
    let e = read_all(&pcap(4000, &[], false)).err().unwrap().to_string();
    assert!(e.contains("4000") && e.contains("unknown"), "{e}");
    let e = read_all(&pcapng(&[127, 1], &[])).err().unwrap().to_string();
    assert!(e.contains("127") && e.contains("RADIOTAP"), "{e}");
    // A later interface of an unknown type fails when a packet refers to it.
    let e = read_all(&pcapng(&[1, 192], &[(1, vec![0; 20])]))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("192") && e.contains("PPI"), "{e}");

    let v6 = build::tcp_v6(V6A, V6B, 1, 2, 0, 0, 0x02, b"");
    let mut w = PcapWriter::with_linktype(Vec::new(), LinkType::Ipv4).unwrap();
    let e = w.write(0, &v6).unwrap_err().to_string();
    assert!(
        e.contains("IPV4 (228)") && e.contains("not an IPv4 frame"),
        "{e}"
    );
    let mut w = PcapWriter::with_linktype(Vec::new(), LinkType::Raw).unwrap();
    assert!(matches!(
        w.write(0, &[1, 2, 3]),
        Err(PcapError::Unrepresentable { .. })
    ));
    let mut arp = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, b"");
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert!(w.write(0, &arp).is_err());
    // SLL carries any EtherType.
    let mut w = PcapWriter::with_linktype(Vec::new(), LinkType::LinuxSll).unwrap();
    w.write(0, &arp).unwrap();
    let out = w.finish().unwrap();
    assert_eq!(&records_of(&out)[0][14..16], &[0x08, 0x06]);
}

#[test]
fn short_records_are_skipped_and_counted() {
    let read = read_all(&pcap(113, &[vec![0; 10], vec![]], false)).unwrap();
    assert_eq!((read.frames.len(), read.skipped), (0, 2));
    let read = read_all(&pcap(0, &[vec![7, 0, 0, 0, 0x45]], false)).unwrap();
    assert_eq!(read.skipped, 1, "AF 7 is not IP");
}

/// What Wireshark's dissectors (an independent implementation) make of the
/// files the writer produces, one per link type.
#[test]
fn tshark_decodes_every_written_link_type() {
    let dir = tempfile::tempdir().unwrap();
    for lt in LinkType::ALL {
        let frames: Vec<Vec<u8>> = packets_for(lt)
            .iter()
            .enumerate()
            .map(|(i, ip)| {
                if lt == LinkType::Ethernet {
                    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
                    let et: [u8; 2] = if is_v4(ip) { [8, 0] } else { [0x86, 0xdd] };
                    f.extend_from_slice(&et);
                    f.extend_from_slice(ip);
                    f
                } else {
                    record(lt, i, ip).1
                }
            })
            .collect();
        let path = dir.path().join(format!("{}.pcap", lt.name()));
        let mut w = PcapWriter::with_linktype(std::fs::File::create(&path).unwrap(), lt).unwrap();
        for (i, f) in frames.iter().enumerate() {
            w.write(i as u64 * 1000, f).unwrap();
        }
        w.finish().unwrap();
        let out = Command::new("tshark")
            .args(["-n", "-r"])
            .arg(&path)
            .args([
                "-T",
                "fields",
                "-e",
                "frame.protocols",
                "-e",
                "_ws.malformed",
            ])
            .output()
            .expect("tshark runs (scripts/common.sh installs it)");
        assert!(out.status.success(), "{lt}: {:?}", out);
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), frames.len(), "{lt}: {text}");
        for (line, f) in lines.iter().zip(&frames) {
            let l4 = if f[12] == 0x08 { "ip:" } else { "ipv6:" };
            assert!(line.contains(l4), "{lt}: {line}");
            assert!(
                line.contains(":tcp") || line.contains(":udp"),
                "{lt}: {line}"
            );
            assert!(!line.contains("malformed"), "{lt}: {line}");
        }
    }
}

proptest::proptest! {
    /// Any bytes, as a record of any link type, are read or skipped, and whatever
    /// is read is written back (or refused) without a panic.
    #[test]
    fn any_record_of_any_link_type_is_handled(lt in 0usize..9, data: Vec<u8>, frame: Vec<u8>) {
        let lt = LinkType::ALL[lt];
        let file = pcap(lt.number(), std::slice::from_ref(&data), false);
        let mut r = PcapReader::new(&file[..]).unwrap();
        let mut buf = vec![];
        let mut w = PcapWriter::with_linktype(Vec::new(), lt).unwrap();
        if r.next_into(&mut buf).unwrap().is_some() {
            proptest::prop_assert!(lt == LinkType::Ethernet || buf.len() >= 14);
            let _ = w.write_with_header(0, &buf, r.link_header());
        } else {
            proptest::prop_assert_eq!(r.skipped(), 1);
        }
        let _ = w.write(0, &frame);
        let _ = w.write_with_header(0, &frame, &data);
    }
}
