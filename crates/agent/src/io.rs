//! The data-plane thread: sockets in the host namespace, the receive / forward /
//! send loop around the sans-IO [`Dataplane`], configuration handoff and counter
//! publication.
//!
//! A new configuration arrives as a ready-built [`Dataplane`] in a one-slot
//! mailbox; the loop checks an atomic flag once per iteration and swaps it in, so
//! packets never wait on a lock. Counters are copied out for the control thread
//! at most every [`PUBLISH_EVERY`].

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_netio::{Msg, PacketSocket, Poller, RxBatch, UdpBatchSocket, DEFAULT_BUF_SIZE};

use crate::dataplane::{Dataplane, Dest, Out, PortTarget, Stats, TxPlan};

/// How often counters are published to the control side.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(50);
/// How often a VM port whose interface could not be opened is retried.
const REOPEN_EVERY: Duration = Duration::from_millis(250);
/// Longest poll: bounds how late a new configuration or a stop is noticed.
const POLL: Duration = Duration::from_millis(10);
/// Batches read from one socket before the others get a turn.
const BURST: usize = 8;

/// What the data plane last published.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// Version of the configuration it runs.
    pub version: u64,
    /// Counters.
    pub stats: Stats,
    /// Port names, by id.
    pub names: BTreeMap<u16, String>,
    /// VM ports whose interface is not open, and why.
    pub port_errors: BTreeMap<u16, String>,
    /// NF instances' health (heartbeats, load, suspicion).
    pub health: Vec<sluice_proto::InstanceHealth>,
    /// Local failovers, oldest first.
    pub failover_events: Vec<sluice_proto::FailoverEvent>,
    /// Pinned flows per target of pinned groups.
    pub pinned_flows: Vec<sluice_proto::PinnedFlows>,
}

/// State shared between the data-plane thread and its owner.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    has_pending: AtomicBool,
    pending: Mutex<Option<Dataplane>>,
    version: AtomicU64,
    /// Configurations handed over / taken over by the loop.
    given: AtomicU64,
    taken: AtomicU64,
    published: Mutex<Published>,
    has_exited: AtomicBool,
    exited: Mutex<Vec<u16>>,
    /// An eventfd the loop polls with its sockets, so a new configuration or an
    /// exited instance is handled at once instead of at the next poll timeout.
    wake: Waker,
}

/// Token of the waker among the poller's ports (port ids stop at 16383).
const WAKE_TOKEN: u16 = u16::MAX;

/// A non-blocking eventfd (or nothing, if the kernel refuses one: then the loop
/// notices changes at its poll timeout, as before).
#[derive(Debug)]
struct Waker(Option<std::os::fd::OwnedFd>);

impl Default for Waker {
    fn default() -> Self {
        // SAFETY: eventfd returns a new descriptor we own, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Waker(None);
        }
        // SAFETY: fd is a fresh, valid descriptor owned by nobody else.
        Waker(Some(unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        }))
    }
}

impl Waker {
    fn wake(&self) {
        if let Some(fd) = &self.0 {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
            unsafe {
                libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8);
            }
        }
    }

    fn drain(&self) {
        if let Some(fd) = &self.0 {
            let mut n: u64 = 0;
            // SAFETY: reading 8 bytes into a valid u64 from our eventfd.
            unsafe {
                libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8);
            }
        }
    }

    fn raw(&self) -> Option<std::os::fd::RawFd> {
        self.0.as_ref().map(|f| f.as_raw_fd())
    }
}

/// Tells the data plane that an NF instance's process exited (what the
/// supervisor calls), so it is suspected without waiting for the heartbeat
/// timeout.
#[derive(Debug, Clone)]
pub struct ExitNotifier(Arc<Shared>);

impl ExitNotifier {
    /// The process of the instance on `port` exited.
    pub fn exited(&self, port: u16) {
        if let Ok(mut l) = self.0.exited.lock() {
            l.push(port);
        }
        self.0.has_exited.store(true, Ordering::Release);
        self.0.wake.wake();
    }
}

/// Options of the data-plane thread.
#[derive(Debug, Clone)]
pub struct IoOptions {
    /// Network namespace the sockets live in (`None`: the caller's).
    pub netns: Option<String>,
    /// Address of the Geneve socket (normally `0.0.0.0:6081`).
    pub udp: SocketAddrV4,
    /// Frames per receive batch.
    pub batch: usize,
    /// An NF instance silent this long is suspected and its traffic moved.
    pub suspect_after: Duration,
}

impl Default for IoOptions {
    fn default() -> IoOptions {
        IoOptions {
            netns: None,
            udp: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, sluice_proto::GENEVE_PORT),
            batch: 64,
            suspect_after: Duration::from_nanos(crate::dataplane::DEFAULT_SUSPECT_NS),
        }
    }
}

/// The running data-plane thread.
#[derive(Debug)]
pub struct DataplaneThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    udp_addr: SocketAddrV4,
}

impl DataplaneThread {
    /// Opens the Geneve socket in `opts.netns` and starts forwarding with
    /// `initial`. Fails if the namespace or the socket cannot be opened.
    pub fn spawn(opts: &IoOptions, initial: Dataplane) -> io::Result<DataplaneThread> {
        let shared = Arc::new(Shared::default());
        shared.version.store(initial.version(), Ordering::Release);
        let (tx, rx) = std::sync::mpsc::channel::<io::Result<SocketAddrV4>>();
        let sh = shared.clone();
        let opts2 = opts.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-dataplane".into())
            .spawn(move || {
                let r = sluice_netio::in_netns_opt(opts2.netns.as_deref(), || {
                    let udp = match UdpBatchSocket::bind(opts2.udp) {
                        Ok(u) => u,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = tx.send(Ok(udp.local_addr()));
                    let mut initial = initial;
                    initial.set_suspect_after(opts2.suspect_after.as_nanos() as u64);
                    Loop::new(&sh, udp, initial, opts2.batch).run();
                });
                if let Err(e) = r {
                    let _ = tx.send(Err(e));
                }
            })?;
        let udp_addr = match rx.recv() {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(io::Error::other("data-plane thread ended early"));
            }
        };
        Ok(DataplaneThread {
            shared,
            thread: Some(thread),
            udp_addr,
        })
    }

    /// A handle the instance supervisor reports process exits through.
    pub fn exit_notifier(&self) -> ExitNotifier {
        ExitNotifier(self.shared.clone())
    }

    /// Where the Geneve socket is bound.
    pub fn udp_addr(&self) -> SocketAddrV4 {
        self.udp_addr
    }

    /// Hands a new configuration to the thread (replacing one not yet taken)
    /// and waits up to `wait` for the thread to run it (its VM port sockets
    /// open); returns whether it did in time.
    pub fn install(&self, dp: Dataplane, wait: Duration) -> bool {
        let v = dp.version();
        let gen = {
            let Ok(mut slot) = self.shared.pending.lock() else {
                return false;
            };
            *slot = Some(dp);
            // Under the slot's lock, so generations and contents stay in step.
            self.shared.given.fetch_add(1, Ordering::AcqRel) + 1
        };
        self.shared.version.store(v, Ordering::Release);
        self.shared.has_pending.store(true, Ordering::Release);
        self.shared.wake.wake();
        let until = Instant::now() + wait;
        while self.shared.taken.load(Ordering::Acquire) < gen {
            if Instant::now() >= until || self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// Version of the last configuration handed over.
    pub fn version(&self) -> u64 {
        self.shared.version.load(Ordering::Acquire)
    }

    /// The counters last published.
    pub fn published(&self) -> Published {
        self.shared
            .published
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// Stops the thread and waits for it.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DataplaneThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A VM port's socket.
struct PortSock {
    iface: String,
    sock: PacketSocket,
}

struct Loop<'a> {
    shared: &'a Shared,
    udp: UdpBatchSocket,
    dp: Dataplane,
    rx: RxBatch,
    plan: TxPlan,
    socks: BTreeMap<u16, PortSock>,
    /// VM ports without an open socket: (iface, error, last attempt).
    closed: BTreeMap<u16, (String, String, Instant)>,
    poller: Poller,
    /// Poller token -> port (None: the UDP socket).
    tokens: Vec<Option<u16>>,
    scratch: Vec<Out>,
    last_publish: Instant,
}

impl<'a> Loop<'a> {
    fn new(shared: &'a Shared, udp: UdpBatchSocket, dp: Dataplane, batch: usize) -> Loop<'a> {
        let mut l = Loop {
            shared,
            udp,
            dp,
            rx: RxBatch::new(batch, DEFAULT_BUF_SIZE),
            plan: TxPlan::new(),
            socks: BTreeMap::new(),
            closed: BTreeMap::new(),
            poller: Poller::new(),
            tokens: Vec::new(),
            scratch: Vec::new(),
            last_publish: Instant::now(),
        };
        l.reconcile_ports();
        l.publish();
        l
    }

    fn run(&mut self) {
        while !self.shared.stop.load(Ordering::Acquire) {
            if self.shared.has_pending.swap(false, Ordering::AcqRel) {
                let next = self.shared.pending.lock().ok().and_then(|mut s| {
                    s.take()
                        .map(|d| (d, self.shared.given.load(Ordering::Acquire)))
                });
                if let Some((mut next, gen)) = next {
                    next.inherit_stats(&self.dp);
                    self.dp = next;
                    self.reconcile_ports();
                    self.publish();
                    self.shared.taken.store(gen, Ordering::Release);
                }
            }
            self.retry_closed();
            // Wake up for the next heartbeat deadline, so a silent instance is
            // suspected on time.
            let now = wall_ns();
            let wait = self.dp.next_deadline().map_or(POLL, |d| {
                Duration::from_nanos(d.saturating_sub(now) + 100_000).min(POLL)
            });
            if let Err(e) = self.poller.wait(wait) {
                eprintln!("sluiced: poll: {e}");
                std::thread::sleep(POLL);
            }
            for t in 0..self.tokens.len() {
                if self.poller.is_ready(t) {
                    match self.tokens[t] {
                        None => self.drain_udp(),
                        Some(WAKE_TOKEN) => self.shared.wake.drain(),
                        Some(p) => self.drain_port(p),
                    }
                }
            }
            let mut changed = self.dp.check_health(wall_ns(), wall_ns);
            if self.shared.has_exited.swap(false, Ordering::AcqRel) {
                let ports = self
                    .shared
                    .exited
                    .lock()
                    .map(|mut l| std::mem::take(&mut *l))
                    .unwrap_or_default();
                for p in ports {
                    changed |= self.dp.instance_exited(p, wall_ns(), wall_ns);
                }
            }
            if changed {
                self.publish();
            }
            if self.last_publish.elapsed() >= PUBLISH_EVERY {
                self.publish();
            }
        }
        self.publish();
    }

    fn publish(&mut self) {
        self.last_publish = Instant::now();
        if let Ok(mut p) = self.shared.published.lock() {
            p.version = self.dp.version();
            p.stats.clone_from(self.dp.stats());
            p.names = self
                .dp
                .ports()
                .iter()
                .map(|(id, port)| (*id, port.name.clone()))
                .collect();
            p.port_errors = self
                .closed
                .iter()
                .map(|(id, (_, e, _))| (*id, e.clone()))
                .collect();
            self.dp.set_now(wall_ns());
            p.health = self.dp.health_report();
            p.failover_events = self.dp.failover_events().to_vec();
            p.pinned_flows = self.dp.pinned_flows();
        }
    }

    /// Opens sockets for the configuration's VM ports and closes the others.
    fn reconcile_ports(&mut self) {
        let want: BTreeMap<u16, String> = self
            .dp
            .ports()
            .iter()
            .filter_map(|(id, p)| match &p.target {
                PortTarget::Vm { iface, .. } => Some((*id, iface.clone())),
                PortTarget::Instance { .. } => None,
            })
            .collect();
        self.socks
            .retain(|id, s| want.get(id).is_some_and(|i| *i == s.iface));
        self.closed
            .retain(|id, (iface, _, _)| want.get(id).is_some_and(|i| i == iface));
        for (id, iface) in want {
            if !self.socks.contains_key(&id) && !self.closed.contains_key(&id) {
                self.open(id, iface);
            }
        }
        self.rebuild_poller();
    }

    fn open(&mut self, id: u16, iface: String) {
        match PacketSocket::open(&iface) {
            Ok(sock) => {
                if self.closed.remove(&id).is_some() {
                    eprintln!("sluiced: port {id}: interface {iface} opened");
                }
                self.socks.insert(id, PortSock { iface, sock });
            }
            Err(e) => {
                let msg = e.to_string();
                let known = self.closed.get(&id).is_some_and(|c| c.1 == msg);
                if !known {
                    eprintln!("sluiced: port {id}: cannot open {iface} (will retry): {msg}");
                }
                self.closed.insert(id, (iface, msg, Instant::now()));
            }
        }
    }

    fn retry_closed(&mut self) {
        let due: Vec<(u16, String)> = self
            .closed
            .iter()
            .filter(|(_, (_, _, at))| at.elapsed() >= REOPEN_EVERY)
            .map(|(id, (iface, _, _))| (*id, iface.clone()))
            .collect();
        if due.is_empty() {
            return;
        }
        for (id, iface) in due {
            self.open(id, iface);
        }
        self.rebuild_poller();
    }

    fn rebuild_poller(&mut self) {
        self.poller.clear();
        self.tokens.clear();
        self.poller.add(self.udp.as_raw_fd());
        self.tokens.push(None);
        if let Some(fd) = self.shared.wake.raw() {
            self.poller.add(fd);
            self.tokens.push(Some(WAKE_TOKEN));
        }
        for (id, s) in &self.socks {
            self.poller.add(s.sock.as_raw_fd());
            self.tokens.push(Some(*id));
        }
    }

    fn drain_udp(&mut self) {
        for _ in 0..BURST {
            match self.udp.recv_batch(&mut self.rx) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => {
                    eprintln!("sluiced: Geneve socket receive: {e}");
                    return;
                }
            }
            self.plan.clear();
            self.dp.set_now(wall_ns());
            self.dp.process_udp_batch(&self.rx, &mut self.plan);
            self.send_plan();
        }
    }

    fn drain_port(&mut self, port: u16) {
        for _ in 0..BURST {
            let Some(s) = self.socks.get_mut(&port) else {
                return;
            };
            match s.sock.recv_batch(&mut self.rx) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => {
                    // The interface went away (VM deleted): reopen later.
                    let iface = s.iface.clone();
                    eprintln!("sluiced: port {port}: receive on {iface}: {e}");
                    self.socks.remove(&port);
                    self.closed
                        .insert(port, (iface, e.to_string(), Instant::now()));
                    self.rebuild_poller();
                    return;
                }
            }
            self.plan.clear();
            self.dp.set_now(wall_ns());
            self.dp.process_vm_batch(port, &self.rx, &mut self.plan);
            self.send_plan();
        }
    }

    /// Sends the plan: the UDP messages with one call, each VM port's with one.
    fn send_plan(&mut self) {
        if self.plan.outs.is_empty() {
            return;
        }
        // UDP first.
        self.scratch.clear();
        self.scratch.extend(
            self.plan
                .outs
                .iter()
                .filter(|o| matches!(o.dest, Dest::Udp(_))),
        );
        if !self.scratch.is_empty() {
            let msgs = messages(&self.plan, &self.rx, &self.scratch);
            let sent = send_all(&msgs, |m| self.udp.send_batch(m));
            self.dp.account_sent(&self.scratch, sent);
        }
        // Then per VM port, in port order.
        let mut next_port = None;
        loop {
            let port = self
                .plan
                .outs
                .iter()
                .filter_map(|o| match o.dest {
                    Dest::Vm(p) if next_port.is_none_or(|n| p > n) => Some(p),
                    _ => None,
                })
                .min();
            let Some(port) = port else {
                break;
            };
            next_port = Some(port);
            self.scratch.clear();
            self.scratch
                .extend(self.plan.outs.iter().filter(|o| o.dest == Dest::Vm(port)));
            let sent = match self.socks.get_mut(&port) {
                Some(s) => {
                    let msgs = messages(&self.plan, &self.rx, &self.scratch);
                    send_all(&msgs, |m| s.sock.send_batch(m))
                }
                None => 0,
            };
            self.dp.account_sent(&self.scratch, sent);
        }
    }
}

/// Unix time in nanoseconds (the data plane's clock: failover timestamps are
/// compared with other processes').
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The plan's messages `outs` as netio messages (one allocation per batch).
fn messages<'a>(plan: &'a TxPlan, rx: &'a RxBatch, outs: &[Out]) -> Vec<Msg<'a>> {
    outs.iter()
        .map(|o| Msg {
            head: plan.head(o),
            body: plan.body(rx, o),
            dst: match o.dest {
                Dest::Udp(a) => Some(a),
                Dest::Vm(_) => None,
            },
        })
        .collect()
}

/// Sends `msgs`, waiting briefly for room when the queue is full; returns how
/// many were consumed (the rest are dropped).
fn send_all(msgs: &[Msg<'_>], mut send: impl FnMut(&[Msg<'_>]) -> io::Result<usize>) -> usize {
    let mut done = 0;
    for attempt in 0..4 {
        match send(&msgs[done..]) {
            Ok(n) => done += n,
            Err(_) => return done,
        }
        if done >= msgs.len() {
            break;
        }
        // A full queue drains quickly; give it a moment rather than dropping.
        std::thread::sleep(Duration::from_micros(50 << attempt));
    }
    done
}
