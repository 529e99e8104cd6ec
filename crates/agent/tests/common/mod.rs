//! What the agent's netns fabric tests share: sockets in namespaces, delivery
//! until a message arrives, and the agent's drop counters.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use sluice_netns::Netns;

/// A UDP socket bound to `addr:port` inside `ns`, reads timing out.
pub fn listen(ns: &Netns, addr: Ipv4Addr, port: u16) -> UdpSocket {
    let s = ns
        .run(move || UdpSocket::bind(SocketAddrV4::new(addr, port)))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s
}

/// Sends `msg` from `from` to `to` until `at` reads it (ports may still be
/// opening when the first one leaves); false after ten seconds.
pub fn delivered(from: &UdpSocket, to: SocketAddr, msg: &[u8], at: &UdpSocket) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        from.send_to(msg, to).unwrap();
        // Earlier rounds' copies may still be queued: look for this message.
        while let Ok(n) = at.recv(&mut buf) {
            if &buf[..n] == msg {
                return true;
            }
        }
    }
    false
}

/// `sluice_agent_drops_total{reason}` of the agent at `url`.
pub fn drops(url: &str, reason: &str) -> u64 {
    let text = ureq::get(&format!("{url}/metrics"))
        .call()
        .expect("the agent answers /metrics")
        .into_string()
        .unwrap();
    let tail = format!("reason=\"{reason}\"}} ");
    text.lines()
        .filter(|l| l.starts_with("sluice_agent_drops_total{"))
        .find_map(|l| l.split_once(&tail).map(|(_, v)| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no {reason} drops in the metrics:\n{text}"))
}

/// The drops of `reason` once there are at least `want` of them, or the last
/// count read after five seconds (counters are published periodically).
pub fn drops_when(url: &str, reason: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = drops(url, reason);
        if n >= want || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Nothing is waiting on `s`.
pub fn nothing_on(s: &UdpSocket) -> bool {
    s.set_nonblocking(true).unwrap();
    let r = s.recv(&mut [0u8; 2048]);
    s.set_nonblocking(false).unwrap();
    matches!(r, Err(e) if e.kind() == ErrorKind::WouldBlock)
}
