//! Issue 20: classic TCP evasions (Ptacek & Newsham, 1998; fragroute's
//! chaff, overlap and fragment options) replayed on the namespace testbed,
//! through a deployed IPS instance, against a real Linux receiver. The
//! in-process replays (`crates/builtin/tests/evasion.rs`) check what leaves
//! the chain; here the judge is what an application in the server VM reads
//! from its kernel's socket: whatever the attacker sends, it never reads
//! `EVIL`. A control connection of each technique without the signature
//! shows the technique itself gets through, so a chain that passed nothing
//! would fail. Needs root.
//!
//! The client crafts its segments on a packet socket in its VM; its own
//! kernel, which knows nothing of these connections, would answer the
//! server with resets, so the VM's address is taken off its interface
//! first (the agent still delivers to the VM by its MAC).

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use sluice_netio::{Msg, PacketSocket, RxBatch};
use sluice_testbed::lab::Lab;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN, URG};

const CLIENT: [u8; 4] = [10, 30, 1, 1];
const SERVER: [u8; 4] = [10, 30, 2, 1];
const PORT: u16 = 7000;
const UDP_PORT: u16 = 7001;
const ISN: u32 = 77_000;

const SPEC: &str = r#"tenant: evade
elements:
  c: { type: service, vms: { c1: 10.30.1.1 } }
  s: { type: service, vms: { s1: 10.30.2.1 } }
  tcp7000: { type: select, proto: tcp, dport: 7000 }
  udp7001: { type: select, proto: udp, dport: 7001 }
  ips:
    type: middlebox
    function: ips
    config:
      rules:
        - 'drop tcp any any -> any 7000 (msg:"evil"; flow:established,to_server; content:"EVIL"; sid:4242; rev:1;)'
        - 'drop udp any any -> any 7001 (msg:"evil datagram"; content:"EVIL"; sid:4343; rev:1;)'
    reassembly: { udp_fragments: reassemble }
chains:
  - { name: in, path: [c, tcp7000, ips, s] }
  - { name: udp, path: [c, udp7001, ips, s] }
"#;

/// What the server VM's application read, per client port.
type Received = Arc<Mutex<BTreeMap<u16, Vec<u8>>>>;

/// A listener in the server VM that keeps every connection's bytes.
struct Server {
    got: Received,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(netns: &str) -> Server {
        let listener = sluice_testbed::run_in(netns, || {
            TcpListener::bind(SocketAddr::from((SERVER, PORT)))
        })
        .unwrap()
        .expect("listen in the server VM");
        listener.set_nonblocking(true).unwrap();
        let got: Received = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (got.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut conns = Vec::new();
            let mut buf = [0u8; 4096];
            while !s.load(Ordering::Relaxed) {
                if let Ok((c, peer)) = listener.accept() {
                    c.set_nonblocking(true).unwrap();
                    g.lock().unwrap().entry(peer.port()).or_default();
                    conns.push((c, peer.port()));
                }
                for (c, port) in &mut conns {
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        g.lock()
                            .unwrap()
                            .entry(*port)
                            .or_default()
                            .extend_from_slice(&buf[..n]);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Server {
            got,
            stop,
            thread: Some(thread),
        }
    }

    fn read_by(&self, port: u16) -> Vec<u8> {
        self.got
            .lock()
            .unwrap()
            .get(&port)
            .cloned()
            .unwrap_or_default()
    }

    /// What `port`'s connection read once it stopped growing (or `want`
    /// arrived).
    fn settled(&self, port: u16, want: &[u8]) -> Vec<u8> {
        let end = Instant::now() + Duration::from_secs(3);
        let mut last = self.read_by(port);
        let mut quiet_since = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = self.read_by(port);
            if now == want {
                return now;
            }
            if now != last {
                last = now;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() > Duration::from_millis(700) || Instant::now() > end {
                return last;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The attacker: a packet socket on the client VM's interface.
struct Client {
    sock: PacketSocket,
    mac: [u8; 6],
}

impl Client {
    fn open(lab: &Lab) -> Client {
        let vm = lab.state().vm("c1").expect("c1").clone();
        // Its kernel would answer the server's segments for connections it
        // never opened with resets: it no longer has the VM's address, so it
        // ignores them (the agent delivers to the VM by its MAC).
        let addr = format!("{}/32", std::net::Ipv4Addr::from(CLIENT));
        let (ok, _, err) = lab
            .vm_exec("c1", &["ip", "addr", "del", &addr, "dev", "eth0"])
            .unwrap();
        assert!(ok, "{err}");
        let (ok, mac, err) = lab
            .vm_exec("c1", &["cat", "/sys/class/net/eth0/address"])
            .unwrap();
        assert!(ok, "{err}");
        let mac = parse_mac(mac.trim());
        let sock = sluice_testbed::run_in(&vm.netns, || PacketSocket::open("eth0"))
            .unwrap()
            .expect("a packet socket in the client VM");
        Client { sock, mac }
    }

    fn send(&mut self, mut frame: Vec<u8>) {
        frame[..6].copy_from_slice(&parse_mac(sluice_testbed::vm::ROUTER_MAC));
        frame[6..12].copy_from_slice(&self.mac);
        let n = self.sock.send_batch(&[Msg::frame(&frame)]).unwrap();
        assert_eq!(n, 1, "sent");
        // One frame at a time on the wire, in this order.
        std::thread::sleep(Duration::from_millis(20));
    }

    /// Opens a connection from `sport`: the server's initial sequence number.
    fn connect(&mut self, sport: u16) -> u32 {
        let mut rx = RxBatch::new(64, 2048);
        for _attempt in 0..5 {
            self.send(tcp_v4(CLIENT, SERVER, sport, PORT, ISN, 0, SYN, &[]));
            let end = Instant::now() + Duration::from_secs(1);
            while Instant::now() < end {
                self.sock.recv_batch(&mut rx).unwrap();
                for (f, _) in rx.iter() {
                    if let Some(isn) = syn_ack(f, sport) {
                        self.send(tcp_v4(
                            CLIENT,
                            SERVER,
                            sport,
                            PORT,
                            ISN + 1,
                            isn.wrapping_add(1),
                            ACK,
                            &[],
                        ));
                        return isn;
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("no SYN-ACK from the server to port {sport}");
    }
}

fn parse_mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (i, p) in s.split(':').enumerate() {
        m[i] = u8::from_str_radix(p, 16).unwrap();
    }
    m
}

/// The server's sequence number if `f` is its SYN-ACK to `sport`.
fn syn_ack(f: &[u8], sport: u16) -> Option<u32> {
    if f.len() < 54 || f[12..14] != [0x08, 0x00] || f[23] != 6 || f[26..30] != SERVER {
        return None;
    }
    let t = 14 + usize::from(f[14] & 0x0f) * 4;
    let tcp = f.get(t..t + 20)?;
    let (src, dst) = (
        u16::from_be_bytes([tcp[0], tcp[1]]),
        u16::from_be_bytes([tcp[2], tcp[3]]),
    );
    (src == PORT && dst == sport && tcp[13] & (SYN | ACK) == SYN | ACK)
        .then(|| u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]))
}

/// Client data at stream offset `off` of connection `sport`.
fn data(sport: u16, isn_s: u32, off: u32, flags: u8, p: &[u8]) -> Vec<u8> {
    tcp_v4(
        CLIENT,
        SERVER,
        sport,
        PORT,
        ISN + 1 + off,
        isn_s.wrapping_add(1),
        ACK | flags,
        p,
    )
}

/// `f` with its TCP checksum broken.
fn bad_checksum(mut f: Vec<u8>) -> Vec<u8> {
    let t = 14 + usize::from(f[14] & 0x0f) * 4;
    f[t + 16] ^= 0x5a;
    f
}

/// A segment at `off` whose urgent pointer marks the byte before `ptr`.
fn urgent(sport: u16, isn_s: u32, off: u32, p: &[u8], ptr: u16) -> Vec<u8> {
    let mut f = data(sport, isn_s, off, PSH | URG, p);
    let t = 14 + usize::from(f[14] & 0x0f) * 4;
    f[t + 18..t + 20].copy_from_slice(&ptr.to_be_bytes());
    assert!(sluice_wire::rewrite::fill_l4_checksum(&mut f));
    f
}

/// The frames of one attack on connection `sport`, saying `word` where the
/// signature would be.
type Attack = fn(u16, u32, &[u8; 4]) -> Vec<Vec<u8>>;

/// The signature one byte per segment.
fn tiny_segments(sport: u16, isn: u32, word: &[u8; 4]) -> Vec<Vec<u8>> {
    let mut f = vec![data(sport, isn, 0, PSH, b"hello ")];
    for (i, b) in word.iter().enumerate() {
        f.push(data(sport, isn, 6 + i as u32, PSH, &[*b]));
    }
    f.push(data(sport, isn, 10, PSH, b" world\n"));
    f
}

/// A bad-checksum copy saying something else goes first (fragroute's
/// `tcp_chaff cksum`): the host drops it and reads the real one.
fn checksum_chaff(sport: u16, isn: u32, word: &[u8; 4]) -> Vec<Vec<u8>> {
    let mut real = b"hello ".to_vec();
    real.extend_from_slice(word);
    real.extend_from_slice(b" world\n");
    vec![
        bad_checksum(data(sport, isn, 0, PSH, b"hello EVXL world\n")),
        data(sport, isn, 0, PSH, &real),
    ]
}

/// Two out-of-order segments at the same offset saying different things
/// before the hole fills (Linux keeps the later one that covers the
/// earlier), then the later one again once the hole is filled.
fn overlap_out_of_order(sport: u16, isn: u32, word: &[u8; 4]) -> Vec<Vec<u8>> {
    let mut later = word.to_vec();
    later.extend_from_slice(b" world\n");
    vec![
        data(sport, isn, 6, PSH, b"EVXL"),
        data(sport, isn, 6, PSH, &later),
        data(sport, isn, 0, PSH, b"hello "),
        data(sport, isn, 6, PSH, &later),
    ]
}

/// `EV` + an urgent `X` + the rest: Linux takes the urgent byte out of the
/// stream (no `SO_OOBINLINE`), so the application reads the word joined.
fn urgent_byte(sport: u16, isn: u32, word: &[u8; 4]) -> Vec<Vec<u8>> {
    let mut p = b"hello ".to_vec();
    p.extend_from_slice(&word[..2]);
    p.push(b'X');
    p.extend_from_slice(&word[2..]);
    p.extend_from_slice(b" world\n");
    // The urgent pointer points past the X (BSD semantics, as Linux reads it).
    vec![urgent(sport, isn, 0, &p, 9)]
}

/// The word split between two IP fragments (fragroute's `ip_frag`): the
/// IP payload is the 20-byte TCP header, then "hello you EV" reaches 32,
/// a fragment boundary. The IPS drops TCP fragments (its documented
/// `reassembly.tcp_fragments: drop`), so no control gets through either.
fn ip_fragments(sport: u16, isn: u32, word: &[u8; 4]) -> Vec<Vec<u8>> {
    let mut p = b"hello you ".to_vec();
    p.extend_from_slice(word);
    p.extend_from_slice(b" world\n");
    let [a, b] = sluice_wire::build::ipv4_fragments(&data(sport, isn, 0, PSH, &p), 32, 0x4321);
    vec![a, b]
}

#[test]
fn evasions_replayed_through_a_deployed_ips_never_deliver_the_signature() {
    if !sluice_agent::testing::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("evade.yaml");
    std::fs::write(&spec, SPEC).unwrap();
    let mut opts = common::lab_options(spec, dir.path());
    opts.hosts = 2;
    opts.web = false;
    let lab = Lab::up(&opts).unwrap_or_else(|e| panic!("testbed did not come up: {e}"));
    let s1 = lab.state().vm("s1").expect("s1").clone();
    let server = Server::start(&s1.netns);
    let mut client = Client::open(&lab);

    // (name, frames, whether the control gets through)
    let attacks: [(&str, Attack, bool); 5] = [
        ("one byte per segment", tiny_segments, true),
        ("bad-checksum chaff", checksum_chaff, true),
        ("out-of-order overlap", overlap_out_of_order, true),
        ("urgent byte", urgent_byte, true),
        ("IP fragments", ip_fragments, false),
    ];
    let mut sport = 41_000;
    let mut report = Vec::new();
    for (name, attack, passes) in attacks {
        // The control: the same technique without the signature reaches the
        // application.
        sport += 1;
        let isn = client.connect(sport);
        for f in attack(sport, isn, b"EVOL") {
            client.send(f);
        }
        let control = server.settled(sport, b"hello EVOL world\n");
        // The attack.
        sport += 1;
        let isn = client.connect(sport);
        for f in attack(sport, isn, b"EVIL") {
            client.send(f);
        }
        let attacked = server.settled(sport, b"hello EVIL world\n");
        report.push(format!(
            "{name}: control read {:?}, attack read {:?}",
            String::from_utf8_lossy(&control),
            String::from_utf8_lossy(&attacked)
        ));
        assert_eq!(
            control.starts_with(b"hello "),
            passes,
            "{name}: the control: {report:#?}"
        );
        assert!(
            !attacked.windows(4).any(|w| w == b"EVIL"),
            "{name}: the server read the signature: {report:#?}"
        );
    }
    // UDP datagrams in IP fragments, to a port the chain selects: every
    // fragment crosses the IPS (a later one carries no port), which joins
    // them in the store and matches the datagram whole. The server's kernel
    // reassembles the benign one; the signature split over the cut never
    // reaches its socket, in order, reversed, or with the dropped fragment
    // sent again.
    let udp = sluice_testbed::run_in(&s1.netns, || {
        std::net::UdpSocket::bind(SocketAddr::from((SERVER, UDP_PORT)))
    })
    .unwrap()
    .expect("a UDP socket in the server VM");
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let datagram = |sport: u16, word: &[u8; 4], id: u16| {
        let mut p = b"hello ".to_vec();
        p.extend_from_slice(word);
        p.extend_from_slice(b" world\n");
        let d = sluice_wire::build::udp_v4(CLIENT, SERVER, sport, UDP_PORT, &p);
        // The cut after "hello EV" (the UDP header and 8 bytes).
        sluice_wire::build::ipv4_fragments(&d, 16, id)
    };
    let received = |udp: &std::net::UdpSocket, within: Duration| {
        let end = Instant::now() + within;
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while Instant::now() < end {
            if let Ok((n, _)) = udp.recv_from(&mut buf) {
                got.push(buf[..n].to_vec());
            }
        }
        got
    };
    let [a, b] = datagram(42_001, b"EVOL", 0x7001);
    client.send(a);
    client.send(b);
    let control = received(&udp, Duration::from_secs(3));
    assert_eq!(
        control,
        vec![b"hello EVOL world\n".to_vec()],
        "the benign datagram, reassembled by the server's kernel: {report:#?}"
    );
    let [a, b] = datagram(42_002, b"EVIL", 0x7002);
    client.send(a);
    client.send(b.clone());
    client.send(b);
    let [a, b] = datagram(42_003, b"EVIL", 0x7003);
    client.send(b);
    client.send(a);
    let attacked = received(&udp, Duration::from_secs(2));
    assert!(
        attacked.iter().all(|d| !d.windows(4).any(|w| w == b"EVIL")),
        "the server read the signature from fragments: {attacked:?}"
    );
    report.push(format!(
        "UDP fragments: control read {control:?}, attack read {attacked:?}"
    ));

    // The IPS saw the signature where the host would have read it, and said so.
    let deadline = Instant::now() + Duration::from_secs(10);
    let alerts = loop {
        let a: Vec<serde_json::Value> = common::controller_get(&lab, "/v1/alerts?tenant=evade")
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a["alert"]["signature_id"] == 4242)
            .collect();
        if !a.is_empty() || Instant::now() > deadline {
            break a;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!alerts.is_empty(), "no alert: {report:#?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let udp_alerts = loop {
        let n = common::controller_get(&lab, "/v1/alerts?tenant=evade")
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a["alert"]["signature_id"] == 4343)
            .count();
        if n >= 2 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        udp_alerts, 2,
        "one alert per reassembled datagram: {report:#?}"
    );
    drop(server);
    println!("{}", report.join("\n"));
}
