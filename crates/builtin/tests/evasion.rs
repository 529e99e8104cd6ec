//! Replays of classic TCP evasions (Ptacek & Newsham, 1998; fragroute's
//! `tcp_chaff` and overlap options; TCP Fast Open) through a chain with the
//! IPS, as a deployed instance runs it. Each attack hides `EVIL` from the IPS
//! while making the receiving host read it; each must end with the IPS
//! seeing what the host reads: an alert and a drop, or bytes that no longer
//! say `EVIL`. (IP fragments of UDP datagrams too: nothing joins them.)

use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Sharing};
use sluice_nf::Event;
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::verify_all_checksums;
use sluice_wire::tcp::flags::{ACK, PSH, SYN, URG};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [10, 0, 0, 2];
const ISN_C: u32 = 1000;
const ISN_S: u32 = 9000;

const SPEC: &str = r#"
name: evasion
functions:
  - type: ips
    rules:
      - 'drop tcp any any -> any 80 (msg:"evil"; flow:established,to_server; content:"EVIL"; sid:1;)'
"#;

fn handshake() -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, 80, ISN_C, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, ISN_S, ISN_C + 1, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, ISN_C + 1, ISN_S + 1, ACK, &[]),
    ]
}

/// Client data at stream offset `off`.
fn c(off: u32, p: &[u8]) -> Vec<u8> {
    tcp_v4(C, S, 40000, 80, ISN_C + 1 + off, ISN_S + 1, ACK | PSH, p)
}

/// What left the chain: per frame, None if dropped, else its payload (and
/// whether its checksums verify); the frames themselves; the sids alerted.
struct Out {
    left: Vec<Option<(Vec<u8>, bool)>>,
    frames: Vec<Option<Vec<u8>>>,
    sids: Vec<u32>,
}

/// Runs `frames` one batch each (as they would arrive on a wire) through a
/// fresh chain built from `spec`.
fn replay(spec: &str, frames: &[Vec<u8>]) -> Out {
    let spec = ChainSpec::from_str(spec, Path::new("evasion.yaml")).unwrap();
    let reg = sluice_builtin::registry();
    let mut chain = Chain::from_spec(&spec, Path::new("."), &reg, Sharing::Shared).unwrap();
    let mut store = LocalStore::new();
    let mut pool = PacketPool::new(8);
    let mut out = Out {
        left: Vec::new(),
        frames: Vec::new(),
        sids: Vec::new(),
    };
    for (k, f) in frames.iter().enumerate() {
        let mut b = Batch::with_capacity(1);
        b.push_frame(&mut pool, f, 1_000_000_000 + k as u64 * 1000, 0);
        chain.process(&mut b, &mut store);
        for p in &b.pkts {
            out.frames
                .push((p.verdict == Verdict::Forward).then(|| p.data().to_vec()));
            out.left.push(match p.verdict {
                Verdict::Forward => {
                    let m = parse_frame(p.data()).unwrap();
                    Some((m.payload(p.data()).to_vec(), verify_all_checksums(p.data())))
                }
                Verdict::Drop(_) => None,
            });
        }
        b.recycle(&mut pool);
        for e in chain.take_events() {
            if let Event::Alert(a) = e {
                out.sids.push(a.sid);
            }
        }
    }
    out
}

/// True if any forwarded frame's payload says `EVIL`.
fn evil_left(o: &Out) -> bool {
    o.left
        .iter()
        .flatten()
        .any(|(p, _)| p.windows(4).any(|w| w == b"EVIL"))
}

#[test]
fn bad_checksum_chaff_does_not_stand_for_the_real_segment() {
    // fragroute `tcp_chaff cksum`: a decoy with a wrong checksum first (the
    // host discards it), then the real bytes at the same sequence numbers.
    let mut f = handshake();
    let mut decoy = c(0, b"GET /fine");
    let n = decoy.len();
    decoy[n - 1] ^= 0x55; // payload changed, checksum not: the host drops it
    f.push(decoy);
    f.push(c(0, b"GET /EVIL"));
    let o = replay(SPEC, &f);
    assert!(
        o.left[3].is_none(),
        "the decoy is dropped as its host would"
    );
    assert!(
        o.left[4].is_none(),
        "the real segment is inspected and dropped"
    );
    assert_eq!(o.sids, vec![1]);
    assert!(!evil_left(&o));
}

#[test]
fn data_without_ack_chaff_does_not_stand_for_the_real_segment() {
    // A decoy without the ACK flag: every receiver discards it.
    let mut f = handshake();
    f.push(tcp_v4(C, S, 40000, 80, ISN_C + 1, 0, PSH, b"GET /fine"));
    f.push(c(0, b"GET /EVIL"));
    let o = replay(SPEC, &f);
    assert_eq!(o.sids, vec![1]);
    assert!(!evil_left(&o));
}

/// Client data at stream offset `off` with the TCP timestamp `tsval`.
fn c_ts(off: u32, tsval: u32, p: &[u8]) -> Vec<u8> {
    let mut t = sluice_wire::build::tcp_repr(40000, 80, ISN_C + 1 + off, ISN_S + 1, ACK | PSH);
    t.options.timestamps = Some((tsval, 1));
    let mut buf = vec![0u8; 14 + 20 + 60 + p.len()];
    let n = sluice_wire::build::write_frame(
        &mut buf,
        sluice_wire::IpAddr::V4(C),
        sluice_wire::IpAddr::V4(S),
        sluice_wire::build::Transport::Tcp(t),
        p,
    )
    .unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn a_stale_timestamp_chaff_does_not_stand_for_the_real_segment() {
    // fragroute `tcp_chaff paws`: after a segment timestamped 5000, a decoy
    // at the next sequence numbers timestamped 4000 (PAWS: Linux discards
    // it), then the real bytes timestamped 5001.
    let mut f = handshake();
    f.push(c_ts(0, 5000, b"GET /"));
    f.push(c_ts(5, 4000, b"fine"));
    f.push(c_ts(5, 5001, b"EVIL"));
    let o = replay(SPEC, &f);
    assert!(
        o.left[4].is_none(),
        "the decoy is dropped as its host would"
    );
    assert!(
        o.left[5].is_none(),
        "the real segment is inspected and dropped"
    );
    assert_eq!(o.sids, vec![1]);
    assert!(!evil_left(&o));
}

#[test]
fn a_low_ttl_chaff_reaches_the_host_as_the_ips_read_it() {
    // fragroute `tcp_chaff ttl`: a decoy with a TTL that runs out on a
    // router before the host, then the real bytes at the same sequence
    // numbers. The decoy leaves with a TTL of 8, so the host reads it too,
    // and the real segment is a retransmission the host discards.
    let mut f = handshake();
    let mut decoy = c(0, b"GET /fine");
    let ip = 14;
    let old = [decoy[ip + 8], decoy[ip + 9]];
    decoy[ip + 8] = 1;
    let sum = u16::from_be_bytes([decoy[ip + 10], decoy[ip + 11]]);
    let sum = sluice_wire::checksum::update_bytes(sum, &old, &decoy[ip + 8..ip + 10]);
    decoy[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    f.push(decoy);
    f.push(c(0, b"GET /EVIL"));
    let o = replay(SPEC, &f);
    let left = o.frames[3].as_ref().expect("the decoy is forwarded");
    assert_eq!(left[ip + 8], 8, "with a TTL that reaches the host");
    assert!(verify_all_checksums(left), "its IPv4 checksum patched");
    assert_eq!(o.left[3].as_ref().unwrap().0, b"GET /fine");
    // What the host reads at these sequence numbers is what was inspected.
    assert!(o.sids.is_empty(), "{:?}", o.sids);
    // The negative control: with the normaliser off the decoy leaves with
    // its TTL of 1 (and would expire before the host).
    let off = format!("{SPEC}reassembly:\n  min_ttl: 0\n");
    let o = replay(&off, &f);
    assert_eq!(o.frames[3].as_ref().unwrap()[ip + 8], 1);
}

#[test]
fn a_source_routed_chaff_reaches_the_host_as_the_ips_read_it() {
    // A decoy with a loose source route option, which Linux drops
    // (`accept_source_route` is off by default), then the real bytes. The
    // decoy leaves with its options NOPs, so the host takes it as the IPS
    // did, and the real segment is a retransmission the host discards.
    let mut f = handshake();
    let plain = c(0, b"GET /fine");
    let mut decoy = plain[..34].to_vec();
    decoy.extend([131, 7, 4, 10, 0, 0, 9, 0]);
    decoy.extend(&plain[34..]);
    decoy[14] = 0x47;
    let total = (decoy.len() - 14) as u16;
    decoy[16..18].copy_from_slice(&total.to_be_bytes());
    decoy[24..26].copy_from_slice(&[0, 0]);
    let sum = sluice_wire::checksum::fold(sluice_wire::checksum::sum(0, &decoy[14..42]));
    decoy[24..26].copy_from_slice(&sum.to_be_bytes());
    assert!(verify_all_checksums(&decoy));
    f.push(decoy);
    f.push(c(0, b"GET /EVIL"));
    let o = replay(SPEC, &f);
    let left = o.frames[3].as_ref().expect("the decoy is forwarded");
    assert_eq!(&left[34..42], &[1; 8], "its options are NOPs");
    assert!(verify_all_checksums(left));
    assert!(o.sids.is_empty(), "{:?}", o.sids);
    // The control: with the normaliser off the option leaves as it came.
    let off = format!("{SPEC}reassembly:\n  clear_ip_options: false\n");
    let o = replay(&off, &f);
    assert_eq!(o.frames[3].as_ref().unwrap()[34], 131);
}

#[test]
fn an_in_order_segment_over_buffered_bytes_carries_the_inspected_ones() {
    // Out of order "GOOD" at 4..8, then "abcdEVIL" at 0..8: the IPS delivers
    // the first copy (abcdGOOD), while Linux keeps the in-order copy and
    // drops the queued one it covers. The in-order packet must leave saying
    // what was inspected.
    let mut f = handshake();
    f.push(c(4, b"GOOD"));
    f.push(c(0, b"abcdEVIL"));
    let o = replay(SPEC, &f);
    assert!(o.sids.is_empty());
    assert_eq!(o.left[4], Some((b"abcdGOOD".to_vec(), true)));
    assert!(!evil_left(&o));
}

#[test]
fn an_out_of_order_segment_over_buffered_bytes_is_dropped() {
    // Two out-of-order copies of 4..8 that disagree, then the gap filled:
    // a host keeping the later copy would read EVIL.
    let mut f = handshake();
    f.push(c(4, b"GOOD"));
    f.push(c(4, b"EVIL"));
    f.push(c(0, b"abcd"));
    let o = replay(SPEC, &f);
    assert!(o.left[4].is_none());
    assert!(o.sids.is_empty());
    assert!(!evil_left(&o));
}

#[test]
fn fast_open_data_is_inspected_and_refused_data_is_scanned_again() {
    // The exploit in a Fast Open SYN reaches the server's application with
    // the connection.
    let syn = tcp_v4(C, S, 40000, 80, ISN_C, 0, SYN, b"GET /EVIL");
    let o = replay(SPEC, &[syn]);
    assert_eq!((o.sids.clone(), o.left[0].is_none()), (vec![1], true));

    // Harmless data in the SYN, refused by the server (it acknowledges only
    // the SYN), then different bytes resent at the same sequence numbers.
    let f = vec![
        tcp_v4(C, S, 40000, 80, ISN_C, 0, SYN, b"GET /fine"),
        tcp_v4(S, C, 80, 40000, ISN_S, ISN_C + 1, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, ISN_C + 1, ISN_S + 1, ACK, &[]),
        c(0, b"GET /EVIL"),
    ];
    let o = replay(SPEC, &f);
    assert_eq!(o.sids, vec![1]);
    assert!(o.left[3].is_none());
}

#[test]
fn checksums_none_is_the_operators_choice_for_captures() {
    // With `verify_checksums: none` (captures from offloading hosts) the decoy
    // counts again: the setting is documented as unfit for deployment.
    let spec = format!("{SPEC}settings:\n  verify_checksums: none\n");
    let mut f = handshake();
    let mut decoy = c(0, b"GET /fine");
    let n = decoy.len();
    decoy[n - 1] ^= 0x55;
    f.push(decoy);
    f.push(c(0, b"GET /EVIL"));
    let o = replay(&spec, &f);
    assert!(o.sids.is_empty());
    assert!(o.left[3].is_some() && o.left[4].is_some());
}

#[test]
fn urgent_data_is_read_inline_as_inspected() {
    // "EVXIL" with the urgent pointer after the X: Linux (no SO_OOBINLINE)
    // takes the X out of the stream and the application reads "EVIL". The
    // segment must leave without URG, so the host reads what was inspected.
    let mut f = handshake();
    let mut urg = tcp_v4(
        C,
        S,
        40000,
        80,
        ISN_C + 1,
        ISN_S + 1,
        ACK | PSH | URG,
        b"EVXIL",
    );
    let m = parse_frame(&urg).unwrap();
    let o = m.l4_offset as usize;
    urg[o + 18..o + 20].copy_from_slice(&3u16.to_be_bytes());
    assert!(sluice_wire::rewrite::fill_l4_checksum(&mut urg));
    f.push(urg);
    let out = replay(SPEC, &f);
    let left = out.frames[3].clone().expect("forwarded");
    let m = parse_frame(&left).unwrap();
    assert_eq!(m.tcp_flags & URG, 0);
    assert_eq!(&left[o + 18..o + 20], &[0, 0]);
    assert!(verify_all_checksums(&left));
    assert_eq!(m.payload(&left), b"EVXIL");
}

/// An IPv6 frame without extension headers split into two fragments (a
/// Fragment header each) at `at` bytes of its payload (a multiple of 8).
fn ipv6_fragments(f: &[u8], at: usize) -> [Vec<u8>; 2] {
    let (hdr, payload) = (&f[..54], &f[54..]);
    let next = hdr[20];
    let part = |data: &[u8], off: usize, more: bool| {
        let mut v = hdr.to_vec();
        v[20] = 44;
        v[18..20].copy_from_slice(&((8 + data.len()) as u16).to_be_bytes());
        let off_m = ((off / 8) as u16) << 3 | u16::from(more);
        v.extend([next, 0]);
        v.extend(off_m.to_be_bytes());
        v.extend(0x0bad_cafeu32.to_be_bytes());
        v.extend_from_slice(data);
        v
    };
    [
        part(&payload[..at], 0, true),
        part(&payload[at..], at, false),
    ]
}

#[test]
fn a_signature_split_over_ip_fragments_does_not_pass() {
    // fragroute's `ip_frag 24`: "GET " in the first fragment (behind the TCP
    // header), "/EVIL" in the second; each alone says nothing, the host's IP
    // layer joins them. Both are dropped, IPv4 and IPv6.
    let request = c(0, b"GET /EVIL HTTP/1.0\r\n\r\n");
    let mut f = handshake();
    f.extend(sluice_wire::build::ipv4_fragments(&request, 24, 0x1234));
    let o = replay(SPEC, &f);
    assert_eq!((o.left[3].as_ref(), o.left[4].as_ref()), (None, None));
    assert!(!evil_left(&o));
    let (c6, s6) = (
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    );
    let tcp6 = |seq, ack, flags, p: &[u8]| {
        sluice_wire::build::tcp_v6(c6, s6, 40000, 80, seq, ack, flags, p)
    };
    let request6 = tcp6(
        ISN_C + 1,
        ISN_S + 1,
        ACK | PSH,
        b"GET /EVIL HTTP/1.0\r\n\r\n",
    );
    let mut f6 = vec![
        tcp6(ISN_C, 0, SYN, &[]),
        sluice_wire::build::tcp_v6(s6, c6, 80, 40000, ISN_S, ISN_C + 1, SYN | ACK, &[]),
        tcp6(ISN_C + 1, ISN_S + 1, ACK, &[]),
    ];
    let frags = ipv6_fragments(&request6, 24);
    let m = parse_frame(&frags[1]).unwrap();
    assert_eq!(m.fragment, sluice_wire::parse::Fragment::Later);
    f6.extend(frags);
    let o = replay(SPEC, &f6);
    assert!(
        o.left[..3].iter().all(Option::is_some),
        "the handshake passes"
    );
    assert_eq!((o.left[3].as_ref(), o.left[4].as_ref()), (None, None));
    // The control: fragments inspected one by one let the signature through,
    // and nothing alerts.
    let inspect = format!("{SPEC}reassembly:\n  tcp_fragments: inspect\n");
    let o = replay(&inspect, &f);
    assert!(evil_left(&o) && o.sids.is_empty(), "{:?}", o.sids);
}

#[test]
fn a_signature_split_over_udp_fragments_does_not_pass() {
    // A datagram to port 53 whose payload says EVIL across the fragment
    // boundary at 16 bytes of the IP payload (the UDP header and "abcdefEV"
    // in the first fragment, "ILxyz" in the second).
    let spec = r#"
name: evasion
functions:
  - type: ips
    rules:
      - 'drop udp any any -> any 53 (msg:"evil"; content:"EVIL"; sid:2;)'
"#;
    let payload = b"abcdefEVILxyz";
    let v4 = sluice_wire::build::udp_v4(C, S, 40000, 53, payload);
    let (c6, s6) = (
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    );
    let v6 = sluice_wire::build::udp_v6(c6, s6, 40000, 53, payload);
    // Whole, the rule drops the datagram (and passes a benign one).
    // (Another flow: the drop blocks the first.)
    let benign = sluice_wire::build::udp_v4(C, S, 40001, 53, b"abcdefGOODxyz");
    let o = replay(spec, &[v4.clone(), benign]);
    assert_eq!(o.sids, vec![2]);
    assert!(o.left[0].is_none() && o.left[1].is_some());
    for frags in [
        sluice_wire::build::ipv4_fragments(&v4, 16, 0x1234),
        ipv6_fragments(&v6, 16),
    ] {
        let m = parse_frame(&frags[0]).unwrap();
        assert_ne!(m.fragment, sluice_wire::parse::Fragment::None);
        // By default both fragments are dropped: the host never joins them.
        let o = replay(spec, &frags);
        assert_eq!((o.left[0].as_ref(), o.left[1].as_ref()), (None, None));
        // The control: inspected one by one, the signature passes unseen.
        let inspect = format!("{spec}reassembly:\n  udp_fragments: inspect\n");
        let o = replay(&inspect, &frags);
        assert!(evil_left_split(&o) && o.sids.is_empty(), "{:?}", o.sids);
        // Reassembled: the datagram is matched whole, and the fragment
        // completing it is dropped, in either order, so no receiver ever
        // completes it; sent again, it is dropped again (the datagram is
        // blocked), as is every later fragment of it.
        let reassemble = format!("{spec}reassembly:\n  udp_fragments: reassemble\n");
        let again = [
            frags[0].clone(),
            frags[1].clone(),
            frags[1].clone(),
            frags[0].clone(),
        ];
        let o = replay(&reassemble, &again);
        assert_eq!(o.sids, vec![2]);
        assert!(o.left[0].is_some(), "the first fragment passes");
        assert!(o.left[1..].iter().all(Option::is_none), "{:?}", o.left);
        let reversed = [frags[1].clone(), frags[0].clone()];
        let o = replay(&reassemble, &reversed);
        assert_eq!(o.sids, vec![2]);
        assert!(o.left[0].is_some() && o.left[1].is_none());
    }
    // A benign datagram in fragments passes whole, and its fragments leave
    // as they came.
    let good = sluice_wire::build::udp_v4(C, S, 40002, 53, b"abcdefGOODxyz");
    let frags = sluice_wire::build::ipv4_fragments(&good, 16, 0x4321);
    let reassemble = format!("{spec}reassembly:\n  udp_fragments: reassemble\n");
    let o = replay(&reassemble, &frags);
    assert!(o.sids.is_empty());
    for (sent, left) in frags.iter().zip(&o.frames) {
        assert_eq!(Some(sent), left.as_ref());
    }
}

#[test]
fn many_datagrams_completing_in_one_batch_are_all_matched() {
    // 150 datagrams in two fragments each, in one batch: one says EVIL
    // across its cut, and only its completing fragment is dropped.
    let spec = r#"
name: evasion
functions:
  - type: ips
    rules:
      - 'drop udp any any -> any 53 (msg:"evil"; content:"EVIL"; sid:2;)'
reassembly:
  udp_fragments: reassemble
"#;
    let mut frames = Vec::new();
    for k in 0..150u16 {
        let word: &[u8] = if k == 77 { b"EVIL" } else { b"GOOD" };
        let payload = [b"abcdef".as_slice(), word, b"xyz"].concat();
        let d = sluice_wire::build::udp_v4(C, S, 40000 + k, 53, &payload);
        frames.extend(sluice_wire::build::ipv4_fragments(&d, 16, k));
    }
    let spec = ChainSpec::from_str(spec, Path::new("evasion.yaml")).unwrap();
    let reg = sluice_builtin::registry();
    let mut chain = Chain::from_spec(&spec, Path::new("."), &reg, Sharing::Shared).unwrap();
    let mut store = LocalStore::new();
    let mut pool = PacketPool::new(512);
    let mut b = Batch::with_capacity(frames.len());
    for f in &frames {
        assert!(b.push_frame(&mut pool, f, 1_000_000_000, 0));
    }
    chain.process(&mut b, &mut store);
    let dropped: Vec<usize> = (0..b.pkts.len())
        .filter(|&i| b.pkts[i].verdict != Verdict::Forward)
        .collect();
    assert_eq!(dropped, vec![2 * 77 + 1]);
    let sids: Vec<u32> = chain
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Alert(a) => Some(a.sid),
            _ => None,
        })
        .collect();
    assert_eq!(sids, vec![2]);
    b.recycle(&mut pool);
}

/// True if the forwarded payloads, joined, say `EVIL`.
fn evil_left_split(o: &Out) -> bool {
    let all: Vec<u8> = o
        .left
        .iter()
        .flatten()
        .flat_map(|(p, _)| p.clone())
        .collect();
    o.left.iter().all(Option::is_some) && all.windows(4).any(|w| w == b"EVIL")
}
