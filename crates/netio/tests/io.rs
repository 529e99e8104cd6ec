//! Batched I/O across veth pairs between namespaces (needs root).

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_netio::{in_netns, Msg, PacketSocket, Poller, RxBatch, UdpBatchSocket};
use sluice_testbed::{veth, Netns, NetnsExt};
use sluice_wire::build;
use sluice_wire::parse::{parse_frame, L4};
use sluice_wire::rewrite::verify_all_checksums;

/// Two namespaces joined by a veth pair `va` (in `a`, 10.77.0.1/24) and `vb` (in
/// `b`, 10.77.0.2/24). Dropping it deletes both.
struct Pair {
    a: Netns,
    b: Netns,
}

fn pair() -> Pair {
    let a = Netns::new("A").unwrap();
    let b = Netns::new("B").unwrap();
    veth(&a, "va", &b, "vb").unwrap();
    a.addr("va", "10.77.0.1/24").unwrap();
    b.addr("vb", "10.77.0.2/24").unwrap();
    Pair { a, b }
}

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// Test frames are UDP to this port, so ND/ARP chatter can be told apart.
const MARK_PORT: u16 = 47_001;

fn test_frame(i: u32, pad: usize) -> Vec<u8> {
    let mut payload = i.to_be_bytes().to_vec();
    payload.resize(4 + pad, (i % 251) as u8);
    build::udp_v4([10, 77, 0, 1], [10, 77, 0, 2], 40_000, MARK_PORT, &payload)
}

fn index_of(frame: &[u8]) -> Option<u32> {
    let m = parse_frame(frame).ok()?;
    if m.l4 != L4::Udp || m.flow.dst_port != MARK_PORT {
        return None;
    }
    let p = m.payload(frame);
    Some(u32::from_be_bytes(p.get(..4)?.try_into().ok()?))
}

/// Receives until `want` marked frames arrived or nothing came for `idle`.
fn collect(sock: &mut PacketSocket, want: usize, idle: Duration) -> Vec<Vec<u8>> {
    let mut batch = RxBatch::new(32, sluice_netio::DEFAULT_BUF_SIZE);
    let mut poller = Poller::new();
    let t = poller.add(sock.as_raw_fd());
    let mut got = Vec::new();
    let mut last = Instant::now();
    while got.len() < want && last.elapsed() < idle {
        poller.wait(Duration::from_millis(50)).unwrap();
        if !poller.is_ready(t) {
            continue;
        }
        let n = sock.recv_batch(&mut batch).unwrap();
        if n > 0 {
            last = Instant::now();
        }
        for (f, src) in batch.iter() {
            assert_eq!(src, None, "packet sockets have no UDP source");
            if index_of(f).is_some() {
                got.push(f.to_vec());
            }
        }
    }
    got
}

#[test]
fn frames_cross_a_veth_unchanged_and_are_not_read_back() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    let mut rx = in_netns(p.b.name(), || PacketSocket::open("vb"))
        .unwrap()
        .unwrap();
    let frames: Vec<Vec<u8>> = (0..100)
        .map(|i| test_frame(i, (i as usize * 37) % 1400))
        .collect();
    // Split each frame into head and body at varying points: the two iovecs must
    // be gathered into one frame.
    let msgs: Vec<Msg> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let cut = (i * 7) % 40;
            Msg {
                head: &f[..cut],
                body: &f[cut..],
                dst: None,
            }
        })
        .collect();
    let mut off = 0;
    while off < msgs.len() {
        off += tx
            .send_batch(&msgs[off..(off + 64).min(msgs.len())])
            .unwrap();
    }
    let got = collect(&mut rx, frames.len(), Duration::from_secs(5));
    assert_eq!(got, frames, "every frame arrives, unchanged and in order");
    // The sender's own socket must not see what it sent.
    let back = collect(&mut tx, 1, Duration::from_millis(300));
    assert!(back.is_empty(), "outgoing frames were read back");
    assert_eq!(tx.stats().tx_errors, 0);
}

#[test]
fn oversized_frames_are_skipped_not_fatal() {
    let p = pair();
    let mut tx = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    let mut rx = in_netns(p.b.name(), || PacketSocket::open("vb"))
        .unwrap()
        .unwrap();
    let big = test_frame(1, 4000); // over the 1500-byte MTU: EMSGSIZE
    let ok = test_frame(2, 10);
    let msgs = [Msg::frame(&big), Msg::frame(&ok)];
    assert_eq!(tx.send_batch(&msgs).unwrap(), 2);
    assert_eq!(tx.stats().tx_errors, 1);
    let got = collect(&mut rx, 1, Duration::from_secs(5));
    assert_eq!(got, vec![ok]);
    // A receive buffer smaller than the frame truncates it: skipped and counted.
    let mut small = RxBatch::new(4, 64);
    assert_eq!(
        tx.send_batch(&[Msg::frame(&test_frame(3, 200))]).unwrap(),
        1
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while rx.stats().rx_truncated == 0 && Instant::now() < deadline {
        rx.recv_batch(&mut small).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(rx.stats().rx_truncated >= 1);
}

fn read_counter(ns: &Netns, dev: &str, what: &str) -> u64 {
    let path = format!("/sys/class/net/{dev}/statistics/{what}");
    ns.exec(&["cat", &path]).unwrap().trim().parse().unwrap()
}

#[test]
fn a_hundred_thousand_frames_in_batches() {
    const TOTAL: u64 = 100_000;
    let p = pair();
    let mut tx = in_netns(p.a.name(), || PacketSocket::open("va"))
        .unwrap()
        .unwrap();
    let mut rx = in_netns(p.b.name(), || PacketSocket::open("vb"))
        .unwrap()
        .unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (r2, d2) = (received.clone(), done.clone());
    let receiver = std::thread::spawn(move || {
        let mut batch = RxBatch::new(64, 2048);
        let mut poller = Poller::new();
        let t = poller.add(rx.as_raw_fd());
        let mut batches = 0u64;
        let mut biggest = 0;
        loop {
            poller.wait(Duration::from_millis(20)).unwrap();
            let n = if poller.is_ready(t) {
                rx.recv_batch(&mut batch).unwrap()
            } else {
                0
            };
            if n == 0 {
                if d2.load(Ordering::Acquire) {
                    break;
                }
                continue;
            }
            batches += 1;
            biggest = biggest.max(n);
            let marked = batch.iter().filter(|(f, _)| index_of(f).is_some()).count();
            r2.fetch_add(marked as u64, Ordering::Release);
        }
        (batches, biggest, rx.kernel_drops().unwrap())
    });
    let frames: Vec<Vec<u8>> = (0..64).map(|i| test_frame(i, 60)).collect();
    let msgs: Vec<Msg> = frames.iter().map(|f| Msg::frame(f)).collect();
    let mut sent = 0u64;
    let mut poller = Poller::new();
    poller.add_writable(tx.as_raw_fd());
    let start = Instant::now();
    while sent < TOTAL && start.elapsed() < Duration::from_secs(120) {
        // Keep at most a few batches in flight so the receiver is not flooded; the
        // test is about batching working, not about overload.
        if sent - received.load(Ordering::Acquire) > 2048 {
            std::thread::yield_now();
            continue;
        }
        let k = (TOTAL - sent).min(64) as usize;
        let n = tx.send_batch(&msgs[..k]).unwrap();
        if n == 0 {
            poller.wait(Duration::from_millis(10)).unwrap();
        }
        sent += n as u64;
    }
    assert_eq!(sent, TOTAL, "sender stalled");
    // Wait for the tail (safety net only), then stop the receiver.
    let start = Instant::now();
    while received.load(Ordering::Acquire) < TOTAL && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    done.store(true, Ordering::Release);
    let (batches, biggest, socket_drops) = receiver.join().unwrap();
    let got = received.load(Ordering::Acquire);
    let veth_drops =
        read_counter(&p.a, "va", "tx_dropped") + read_counter(&p.b, "vb", "rx_dropped");
    eprintln!("received {got} in {batches} batches (largest {biggest}), drops: socket {socket_drops}, veth {veth_drops}");
    assert_eq!(tx.stats().tx_errors, 0);
    assert_eq!(
        got + socket_drops + veth_drops,
        TOTAL,
        "every frame arrived or the kernel counted its drop"
    );
    assert!(batches < got, "frames were read in batches");
}

#[test]
fn udp_batches_carry_addresses_both_ways() {
    let p = pair();
    let mut sock = in_netns(p.b.name(), || {
        UdpBatchSocket::bind(SocketAddrV4::new(B_IP, 6081))
    })
    .unwrap()
    .unwrap();
    assert_eq!(sock.local_addr(), SocketAddrV4::new(B_IP, 6081));
    let peer = in_netns(p.a.name(), || UdpSocket::bind((A_IP, 5555)))
        .unwrap()
        .unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for i in 0..10u8 {
        peer.send_to(&[i; 100], (B_IP, 6081)).unwrap();
    }
    let mut batch = RxBatch::new(32, 9216);
    let mut poller = Poller::new();
    let t = poller.add(sock.as_raw_fd());
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 10 && Instant::now() < deadline {
        poller.wait(Duration::from_millis(50)).unwrap();
        if poller.is_ready(t) {
            sock.recv_batch(&mut batch).unwrap();
            for (d, src) in batch.iter() {
                got.push((d.to_vec(), src));
            }
        }
    }
    assert_eq!(got.len(), 10);
    for (i, (d, src)) in got.iter().enumerate() {
        assert_eq!(d, &vec![i as u8; 100]);
        assert_eq!(*src, Some(SocketAddrV4::new(A_IP, 5555)));
    }
    // Replies: a header and a body become one datagram to each message's dst.
    let heads: Vec<[u8; 2]> = (0..10u8).map(|i| [0xee, i]).collect();
    let msgs: Vec<Msg> = got
        .iter()
        .zip(&heads)
        .map(|((d, src), h)| Msg {
            head: h,
            body: d,
            dst: *src,
        })
        .collect();
    let mut off = 0;
    while off < msgs.len() {
        off += sock.send_batch(&msgs[off..]).unwrap();
    }
    let mut buf = [0u8; 200];
    for i in 0..10u8 {
        let (n, from) = peer.recv_from(&mut buf).unwrap();
        assert_eq!(
            from,
            std::net::SocketAddr::V4(SocketAddrV4::new(B_IP, 6081))
        );
        assert_eq!(&buf[..2], &[0xee, i]);
        assert_eq!(&buf[2..n], &[i; 100]);
    }
    // No destination: refused, counted, skipped.
    assert_eq!(sock.send_batch(&[Msg::frame(b"x")]).unwrap(), 1);
    assert_eq!(sock.stats().tx_errors, 1);
}

#[test]
fn offloaded_tcp_checksums_are_completed() {
    let p = pair();
    // veth offloads checksums by default; make sure, since the test depends on it.
    p.a.exec(&["ethtool", "-K", "va", "tx", "on"]).unwrap();
    let mut rx = in_netns(p.b.name(), || PacketSocket::open("vb"))
        .unwrap()
        .unwrap();
    // Nothing listens on B: the connect attempt emits a SYN and gets a RST.
    let _ = in_netns(p.a.name(), || {
        TcpStream::connect_timeout(&(B_IP, 9).into(), Duration::from_secs(2))
    })
    .unwrap();
    let mut batch = RxBatch::new(32, 9216);
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
    assert!(
        verify_all_checksums(&syn),
        "the SYN's checksum was completed"
    );
    assert!(rx.stats().rx_csum_completed >= 1, "{:?}", rx.stats());
}
