//! The packet socket's receive ring and UDP segmentation offload, across veth
//! pairs between private namespaces (needs root).

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sluice_netio::{
    in_netns, Msg, PacketOptions, PacketSocket, Poller, RxBatch, UdpBatchSocket, GRO_BUF_SIZE,
};
use sluice_testbed::{veth, Netns, NetnsExt};
use sluice_wire::build;
use sluice_wire::parse::{parse_frame, L4};
use sluice_wire::rewrite::verify_all_checksums;

/// Two namespaces joined by a veth pair `va` (in `a`, 10.78.0.1/24) and `vb` (in
/// `b`, 10.78.0.2/24). Dropping it deletes both.
struct Pair {
    a: Netns,
    b: Netns,
}

fn pair() -> Pair {
    let a = Netns::new("RA").unwrap();
    let b = Netns::new("RB").unwrap();
    veth(&a, "va", &b, "vb").unwrap();
    a.addr("va", "10.78.0.1/24").unwrap();
    b.addr("vb", "10.78.0.2/24").unwrap();
    Pair { a, b }
}

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// Test frames are UDP to this port, so other chatter can be told apart.
const MARK_PORT: u16 = 47_002;

fn test_frame(i: u32, pad: usize) -> Vec<u8> {
    let mut payload = i.to_be_bytes().to_vec();
    payload.extend((0..pad).map(|k| (i as usize * 7 + k) as u8));
    build::udp_v4([10, 78, 0, 1], [10, 78, 0, 2], 40_000, MARK_PORT, &payload)
}

fn index_of(frame: &[u8]) -> Option<u32> {
    let m = parse_frame(frame).ok()?;
    if m.l4 != L4::Udp || m.flow.dst_port != MARK_PORT {
        return None;
    }
    let p = m.payload(frame);
    Some(u32::from_be_bytes(p.get(..4)?.try_into().ok()?))
}

fn ring_socket(ns: &Netns, iface: &str) -> PacketSocket {
    let iface = iface.to_string();
    let s = in_netns(ns.name(), move || {
        PacketSocket::open_with(&iface, &PacketOptions::fast())
    })
    .unwrap()
    .unwrap();
    assert!(s.ring().is_some(), "no ring: {:?}", s.ring_error());
    s
}

fn send_all(tx: &mut PacketSocket, frames: &[Vec<u8>]) {
    let msgs: Vec<Msg> = frames.iter().map(|f| Msg::frame(f)).collect();
    let mut off = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while off < msgs.len() {
        assert!(Instant::now() < deadline, "sender stalled");
        let n = tx
            .send_batch(&msgs[off..(off + 64).min(msgs.len())])
            .unwrap();
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        off += n;
    }
}

/// Receives marked frames until `want` arrived or nothing came for `idle`.
fn collect(
    sock: &mut PacketSocket,
    batch: &mut RxBatch,
    want: usize,
    idle: Duration,
) -> Vec<Vec<u8>> {
    let mut poller = Poller::new();
    let t = poller.add(sock.as_raw_fd());
    let mut got = Vec::new();
    let mut last = Instant::now();
    while got.len() < want && last.elapsed() < idle {
        if !sock.ring_ready() {
            poller.wait(Duration::from_millis(20)).unwrap();
            if !poller.is_ready(t) {
                continue;
            }
        }
        if sock.recv_batch(batch).unwrap() > 0 {
            last = Instant::now();
        }
        got.extend(
            batch
                .iter()
                .filter(|(f, _)| index_of(f).is_some())
                .map(|(f, _)| f.to_vec()),
        );
    }
    batch.clear();
    got
}

#[test]
fn frames_arrive_intact_and_in_order_through_the_ring_as_it_wraps() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    let mut rx = ring_socket(&p.b, "vb");
    let slots = rx.ring().unwrap().frames;
    let mut batch = RxBatch::new(64, 2048);
    // Three times round the ring, in rounds of half a ring so nothing is
    // dropped; sizes vary from minimum to MTU.
    let total = 3 * slots + 17;
    let frames: Vec<Vec<u8>> = (0..total as u32)
        .map(|i| test_frame(i, (i as usize * 131) % 1450))
        .collect();
    let mut got = Vec::new();
    for chunk in frames.chunks(slots / 2) {
        send_all(&mut tx, chunk);
        got.extend(collect(
            &mut rx,
            &mut batch,
            chunk.len(),
            Duration::from_secs(5),
        ));
    }
    assert_eq!(got.len(), frames.len(), "every frame arrived");
    assert!(got == frames, "frames arrived unchanged and in order");
    assert_eq!(rx.kernel_drops().unwrap(), 0);
    let st = rx.stats();
    assert!(st.rx_batches < st.rx_frames, "read in batches: {st:?}");
}

#[test]
fn held_slots_are_not_overwritten_and_a_full_ring_drops_and_counts() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    let mut rx = ring_socket(&p.b, "vb");
    let slots = rx.ring().unwrap().frames;
    // Take the first frames and keep them while the ring overflows.
    let first: Vec<Vec<u8>> = (0..32).map(|i| test_frame(i, 1000)).collect();
    send_all(&mut tx, &first);
    let mut held = RxBatch::new(32, 64);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !rx.ring_ready() {
        assert!(Instant::now() < deadline, "first frames did not arrive");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(20));
    rx.recv_batch(&mut held).unwrap();
    assert!(held.iter().any(|(f, _)| index_of(f).is_some()));
    let snapshot: Vec<Vec<u8>> = held.iter().map(|(f, _)| f.to_vec()).collect();
    // Twice the ring: the free slots fill, the rest is dropped by the kernel.
    let flood: Vec<Vec<u8>> = (1000..1000 + 2 * slots as u32)
        .map(|i| test_frame(i, 1200))
        .collect();
    send_all(&mut tx, &flood);
    std::thread::sleep(Duration::from_millis(100));
    let again: Vec<Vec<u8>> = held.iter().map(|(f, _)| f.to_vec()).collect();
    assert!(again == snapshot, "held frames changed under us");
    assert!(
        rx.kernel_drops().unwrap() > 0,
        "the overflow was not counted"
    );
    // Releasing the held slots lets traffic through again.
    held.clear();
    let mut batch = RxBatch::new(64, 2048);
    let got = collect(&mut rx, &mut batch, usize::MAX, Duration::from_millis(300));
    assert!(!got.is_empty() && got.len() < 2 * slots);
    let later: Vec<Vec<u8>> = (5000..5010).map(|i| test_frame(i, 10)).collect();
    send_all(&mut tx, &later);
    assert_eq!(
        collect(&mut rx, &mut batch, 10, Duration::from_secs(5)),
        later
    );
}

#[test]
fn mtu_9000_frames_arrive_whole_in_ring_slots_sized_for_them() {
    let p = pair();
    p.a.exec(&["ip", "link", "set", "va", "mtu", "9000"])
        .unwrap();
    p.b.exec(&["ip", "link", "set", "vb", "mtu", "9000"])
        .unwrap();
    let mut tx = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    // Opened after the MTU grew: slots hold a whole jumbo frame, so none is
    // read from the socket's queue instead.
    let mut rx = ring_socket(&p.b, "vb");
    assert!(rx.ring().unwrap().frame_size >= 9014 + 64);
    // Full-size frames (9000 bytes of IP, 9014 of Ethernet) and small ones.
    let frames: Vec<Vec<u8>> = (0..300u32)
        .map(|i| test_frame(i, if i % 2 == 0 { 9014 - 42 - 4 } else { 60 }))
        .collect();
    assert_eq!(frames[0].len(), 9014);
    let mut batch = RxBatch::new(32, sluice_netio::DEFAULT_BUF_SIZE);
    let mut got = Vec::new();
    for chunk in frames.chunks(100) {
        send_all(&mut tx, chunk);
        got.extend(collect(
            &mut rx,
            &mut batch,
            chunk.len(),
            Duration::from_secs(5),
        ));
    }
    assert_eq!(got.len(), frames.len(), "every frame arrived");
    assert!(got == frames, "jumbo frames arrived intact, in order");
    let st = rx.stats();
    assert_eq!((st.rx_ring_copies, st.rx_truncated), (0, 0), "{st:?}");
}

#[test]
fn frames_longer_than_a_slot_come_from_the_queue_in_order() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    // Slots are sized for MTU 1500; raising the MTU afterwards makes jumbo
    // frames longer than a slot.
    let mut rx = ring_socket(&p.b, "vb");
    assert_eq!(rx.ring().unwrap().frame_size, 2048);
    p.a.exec(&["ip", "link", "set", "va", "mtu", "9000"])
        .unwrap();
    p.b.exec(&["ip", "link", "set", "vb", "mtu", "9000"])
        .unwrap();
    let frames: Vec<Vec<u8>> = (0..200u32)
        .map(|i| test_frame(i, if i % 3 == 0 { 5000 + i as usize } else { 100 }))
        .collect();
    let mut batch = RxBatch::new(16, sluice_netio::DEFAULT_BUF_SIZE);
    let mut got = Vec::new();
    for chunk in frames.chunks(50) {
        send_all(&mut tx, chunk);
        got.extend(collect(
            &mut rx,
            &mut batch,
            chunk.len(),
            Duration::from_secs(5),
        ));
    }
    assert_eq!(got.len(), frames.len());
    assert!(
        got == frames,
        "big and small frames arrived intact, in order"
    );
    assert!(rx.stats().rx_ring_copies >= 60, "{:?}", rx.stats());
    // Longer than the batch's buffers as well: counted and dropped, and what
    // follows still arrives.
    let mut small = RxBatch::new(16, 2048);
    send_all(&mut tx, &[test_frame(900, 4000), test_frame(901, 10)]);
    let got = collect(&mut rx, &mut small, 1, Duration::from_secs(5));
    assert_eq!(got, vec![test_frame(901, 10)]);
    assert!(rx.stats().rx_truncated >= 1);
}

#[test]
fn offloaded_checksums_are_completed_in_the_ring() {
    let p = pair();
    p.a.exec(&["ethtool", "-K", "va", "tx", "on"]).unwrap();
    let mut rx = ring_socket(&p.b, "vb");
    let _ = in_netns(p.a.name(), || {
        TcpStream::connect_timeout(&(B_IP, 9).into(), Duration::from_secs(2))
    })
    .unwrap();
    let mut batch = RxBatch::new(32, 64);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut syn = None;
    while syn.is_none() && Instant::now() < deadline {
        rx.recv_batch(&mut batch).unwrap();
        for (f, _) in batch.iter() {
            if let Ok(m) = parse_frame(f) {
                if m.l4 == L4::Tcp && m.flow.dst_port == 9 && m.tcp_has(0x02) {
                    syn = Some(f.to_vec());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let syn = syn.expect("the SYN was captured");
    assert!(verify_all_checksums(&syn));
    assert!(rx.stats().rx_csum_completed >= 1, "{:?}", rx.stats());
}

#[test]
fn qdisc_bypass_sends_arrive() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || {
        PacketSocket::open_with("va", &PacketOptions::fast())
    })
    .unwrap()
    .unwrap();
    let mut rx = ring_socket(&p.b, "vb");
    let frames: Vec<Vec<u8>> = (0..300u32).map(|i| test_frame(i, 64)).collect();
    send_all(&mut tx, &frames);
    let mut batch = RxBatch::new(64, 2048);
    assert_eq!(
        collect(&mut rx, &mut batch, 300, Duration::from_secs(5)),
        frames
    );
    let st = tx.stats();
    assert!(st.tx_calls < 300 && st.tx_msgs == 300, "{st:?}");
}

/// Receives datagrams on `sock` until `want` arrived or nothing came for a while.
fn udp_collect(
    sock: &mut UdpBatchSocket,
    batch: &mut RxBatch,
    want: usize,
) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
    let mut poller = Poller::new();
    let t = poller.add(sock.as_raw_fd());
    let mut got = Vec::new();
    let mut last = Instant::now();
    while got.len() < want && last.elapsed() < Duration::from_secs(3) {
        poller.wait(Duration::from_millis(20)).unwrap();
        if poller.is_ready(t) && sock.recv_batch(batch).unwrap() > 0 {
            last = Instant::now();
            got.extend(batch.iter().map(|(d, s)| (d.to_vec(), s)));
        }
    }
    got
}

fn datagram(i: u32, len: usize) -> Vec<u8> {
    let mut d = i.to_be_bytes().to_vec();
    d.extend((0..len - 4).map(|k| (i as usize + k) as u8));
    d
}

#[test]
fn udp_super_datagrams_are_split_back_in_order() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || {
        UdpBatchSocket::bind(SocketAddrV4::new(A_IP, 6081))
    })
    .unwrap()
    .unwrap();
    assert!(tx.enable_gso(), "kernel without UDP GSO");
    let mut rx = in_netns(p.b.name(), || {
        UdpBatchSocket::bind(SocketAddrV4::new(B_IP, 6081))
    })
    .unwrap()
    .unwrap();
    assert!(rx.enable_gro(), "kernel without UDP GRO");
    let dst = Some(rx.local_addr());
    // Runs of equal sizes with shorter tails, a change of size, a run longer
    // than one super-datagram may carry, and a head/body split per message.
    let mut sizes = vec![1400; 100];
    sizes.push(333);
    sizes.extend([64; 10]);
    // 1472 bytes: the largest segment that fits the 1500-byte MTU unfragmented.
    sizes.extend([1472; 3]);
    sizes.push(1473);
    let data: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| datagram(i as u32, n))
        .collect();
    let msgs: Vec<Msg> = data
        .iter()
        .map(|d| Msg {
            head: &d[..8],
            body: &d[8..],
            dst,
        })
        .collect();
    let mut off = 0;
    while off < msgs.len() {
        off += tx.send_batch(&msgs[off..]).unwrap();
    }
    let st = tx.stats();
    assert!(st.tx_gso >= 5 && st.tx_gso_segs >= 114, "{st:?}");
    assert!(st.tx_calls <= 2, "{st:?}");
    let mut batch = RxBatch::new(8, GRO_BUF_SIZE);
    let got = udp_collect(&mut rx, &mut batch, data.len());
    assert_eq!(got.len(), data.len());
    for (i, (d, src)) in got.iter().enumerate() {
        assert_eq!(d, &data[i], "datagram {i}");
        assert_eq!(*src, Some(tx.local_addr()));
    }
    assert!(rx.stats().rx_gro >= 3, "{:?}", rx.stats());

    // A receiver without GRO gets every datagram on its own (the kernel
    // segments), and so does one reading with std's socket.
    let plain = in_netns(p.b.name(), || UdpSocket::bind((B_IP, 7000)))
        .unwrap()
        .unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let to = Some(SocketAddrV4::new(B_IP, 7000));
    let msgs: Vec<Msg> = data[..50]
        .iter()
        .map(|d| Msg {
            head: &[],
            body: d,
            dst: to,
        })
        .collect();
    assert_eq!(tx.send_batch(&msgs).unwrap(), 50);
    let mut buf = [0u8; 2000];
    for (i, d) in data[..50].iter().enumerate() {
        let n = plain.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &d[..], "datagram {i}");
    }
}

#[test]
fn super_datagrams_fall_back_when_refused() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || {
        UdpBatchSocket::bind(SocketAddrV4::new(A_IP, 6081))
    })
    .unwrap()
    .unwrap();
    assert!(tx.enable_gso());
    let mut rx = in_netns(p.b.name(), || {
        UdpBatchSocket::bind(SocketAddrV4::new(B_IP, 6081))
    })
    .unwrap()
    .unwrap();
    // A segment size over the path MTU (1500) makes the kernel refuse the
    // super-datagram; its datagrams are then sent one by one (and, sent alone,
    // fragmented by IP), and the equal-sized run after them still goes out as
    // one super-datagram, which the receiver (no GRO) gets segmented.
    let big: Vec<Vec<u8>> = (0..3).map(|i| datagram(i, 1600)).collect();
    let small: Vec<Vec<u8>> = (3..23).map(|i| datagram(i, 500)).collect();
    let dst = Some(rx.local_addr());
    let msgs: Vec<Msg> = big
        .iter()
        .chain(&small)
        .map(|d| Msg {
            head: &[],
            body: d,
            dst,
        })
        .collect();
    let mut off = 0;
    while off < msgs.len() {
        off += tx.send_batch(&msgs[off..]).unwrap();
    }
    let mut batch = RxBatch::new(8, 9216);
    let got = udp_collect(&mut rx, &mut batch, msgs.len());
    let want: Vec<Vec<u8>> = big.iter().chain(&small).cloned().collect();
    assert_eq!(
        got.into_iter().map(|(d, _)| d).collect::<Vec<_>>(),
        want,
        "every datagram arrived, in order: {:?}",
        tx.stats()
    );
    let st = tx.stats();
    assert!(st.tx_gso >= 1 && st.tx_errors == 0, "{st:?}");
}

#[test]
fn tcp_super_frames_cross_a_tso_link_whole() {
    use sluice_netio::{enable_tso, TxFrame, VnetHdr};
    let p = pair();
    assert!(in_netns(p.a.name(), || enable_tso("va")).unwrap().unwrap());
    let opts = PacketOptions {
        vnet_hdr: true,
        ..PacketOptions::fast()
    };
    let mut tx = in_netns(p.a.name(), move || PacketSocket::open_with("va", &opts))
        .unwrap()
        .unwrap();
    // The receiver also speaks virtio-net headers: it must get plain frames.
    let mut rx = in_netns(p.b.name(), move || PacketSocket::open_with("vb", &opts))
        .unwrap()
        .unwrap();
    // Three 1000-byte segments' worth of payload behind one TCP header.
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let whole = build::tcp_v4(
        [10, 78, 0, 1],
        [10, 78, 0, 2],
        1,
        MARK_PORT,
        9,
        1,
        0x10,
        &payload,
    );
    let (head, body) = whole.split_at(54);
    let frames = [
        TxFrame {
            parts: 0..4,
            vnet: VnetHdr {
                flags: VnetHdr::NEEDS_CSUM,
                gso_type: VnetHdr::GSO_TCPV4,
                hdr_len: 54,
                gso_size: 1000,
                csum_start: 34,
                csum_offset: 16,
            },
        },
        // A plain frame after it, through the same call.
        TxFrame {
            parts: 4..5,
            vnet: VnetHdr::default(),
        },
    ];
    let plain = test_frame(7, 100);
    let slices: Vec<&[u8]> = vec![
        head,
        &body[..1000],
        &body[1000..2000],
        &body[2000..],
        &plain,
    ];
    assert_eq!(tx.send_frames(&frames, &slices).unwrap(), 2);
    let mut batch = RxBatch::new(8, GRO_BUF_SIZE);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got: Vec<Vec<u8>> = Vec::new();
    while got.len() < 2 && Instant::now() < deadline {
        rx.recv_batch(&mut batch).unwrap();
        for (f, _) in batch.iter() {
            if let Ok(m) = parse_frame(f) {
                if m.l4 != L4::Icmp && (m.flow.dst_port == MARK_PORT) {
                    got.push(f.to_vec());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got.len(), 2, "{:?}", rx.stats());
    // The super-frame arrived as one frame (the link did not cut it up), its
    // bytes as sent (the checksum is left partial on a local link).
    assert_eq!(got[0].len(), whole.len());
    assert_eq!(&got[0][54..], &payload[..]);
    assert_eq!(got[1], plain);
    // Without the header option, send_frames is refused.
    let mut plain_sock = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    assert!(plain_sock.send_frames(&frames, &slices).is_err());
}

#[test]
fn a_send_only_socket_sends_and_never_receives() {
    let p = pair();
    let send_only = PacketOptions {
        send_only: true,
        ..PacketOptions::fast()
    };
    let mut tx = in_netns(p.a.name(), move || {
        PacketSocket::open_with("va", &send_only)
    })
    .unwrap()
    .unwrap();
    assert!(tx.ring().is_none(), "a send-only socket needs no ring");
    let mut rx = ring_socket(&p.b, "vb");
    let frames: Vec<Vec<u8>> = (0..100u32).map(|i| test_frame(i, 64)).collect();
    send_all(&mut tx, &frames);
    let mut batch = RxBatch::new(64, 2048);
    assert_eq!(
        collect(&mut rx, &mut batch, 100, Duration::from_secs(5)),
        frames
    );
    // Frames coming in on va: a receiving socket there sees them, the
    // send-only one does not.
    let mut back = in_netns(p.b.name(), || {
        PacketSocket::open_with("vb", &PacketOptions::fast())
    })
    .unwrap()
    .unwrap();
    let mut reader = ring_socket(&p.a, "va");
    send_all(&mut back, &frames);
    assert_eq!(
        collect(&mut reader, &mut batch, 100, Duration::from_secs(5)).len(),
        100
    );
    assert_eq!(tx.recv_batch(&mut batch).unwrap(), 0);
    assert!(
        collect(&mut tx, &mut batch, 1, Duration::from_millis(200)).is_empty(),
        "the send-only socket received"
    );
}

#[test]
fn shared_udp_sockets_split_senders_and_keep_each_on_one_socket() {
    let p = pair();
    let (mut s1, mut s2) = in_netns(p.b.name(), || {
        let a = UdpBatchSocket::bind_shared(SocketAddrV4::new(B_IP, 0)).unwrap();
        let b = UdpBatchSocket::bind_shared(a.local_addr()).unwrap();
        (a, b)
    })
    .unwrap();
    let to = s1.local_addr();
    assert_eq!(s2.local_addr(), to);
    // 16 senders (source ports), 20 datagrams each.
    let senders: Vec<UdpSocket> = in_netns(p.a.name(), || {
        (0..16)
            .map(|_| UdpSocket::bind(SocketAddrV4::new(A_IP, 0)).unwrap())
            .collect()
    })
    .unwrap();
    for i in 0..20u32 {
        for s in &senders {
            s.send_to(&datagram(i, 64), to).unwrap();
        }
    }
    let mut batch = RxBatch::new(64, 2048);
    let got1 = udp_collect(&mut s1, &mut batch, 320);
    let got2 = udp_collect(&mut s2, &mut batch, 320);
    assert_eq!(got1.len() + got2.len(), 320);
    let src = |g: &[(Vec<u8>, Option<SocketAddrV4>)]| -> std::collections::BTreeSet<u16> {
        g.iter().filter_map(|(_, s)| s.map(|a| a.port())).collect()
    };
    let (a, b) = (src(&got1), src(&got2));
    assert!(a.is_disjoint(&b), "a sender reached both sockets");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "16 senders all hashed to one socket"
    );
}
