//! The data-plane threads: sockets in the host namespace, the receive / forward /
//! send loop around the sans-IO [`Dataplane`], configuration handoff and counter
//! publication.
//!
//! One or more forwarding threads (`sluice-dataplane-K`, the agent's
//! `dataplane_threads`), each owning one shard of the data plane
//! ([`crate::dataplane::Sharding`]): its own `Dataplane`, its own Geneve
//! socket (several threads share the port with `SO_REUSEPORT`, so the kernel
//! spreads senders over them), the receive sockets of the VM ports it reads
//! ([`reads_port`]) and send-only sockets to the others. What a thread reads
//! that belongs to another shard it hands over in batches ([`crate::handoff`]),
//! so both directions of a flow, from a VM or from the fabric, are forwarded
//! by one thread. Thread 0 (the control shard) runs instance health, leases
//! and backend checks, and publishes its health view for the others to adopt.
//!
//! A new configuration arrives as ready-built [`Dataplane`]s, one per thread,
//! each in a one-slot mailbox; a loop checks an atomic flag once per iteration
//! and swaps its own in, so packets never wait on a lock. Counters are copied
//! out for the control thread at most every [`PUBLISH_EVERY`], per thread, and
//! summed by the reader ([`Published::merge`]).

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_netio::{
    Msg, PacketOptions, PacketSocket, Poller, RxBatch, SocketStats, UdpBatchSocket,
    DEFAULT_BUF_SIZE, GRO_BUF_SIZE,
};

use crate::dataplane::{
    Dataplane, Dest, Frames, HealthView, Out, PortTarget, Sharding, Stats, TxPlan, CONTROL_SHARD,
    MAX_SHARDS,
};
use crate::gro::Coalescer;
use crate::handoff::{flush_all, link, split, Inbound, Origin, Outbound, Subset};

/// How often counters are published to the control side.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(50);
/// How often a VM port whose interface could not be opened is retried.
const REOPEN_EVERY: Duration = Duration::from_millis(250);
/// Longest poll: bounds how late a new configuration or a stop is noticed.
const POLL: Duration = Duration::from_millis(10);
/// Batches read from one socket before the others get a turn.
const BURST: usize = 8;
/// Batches read from the Geneve socket before an instance's silence is acted
/// on (a few milliseconds of work; see `Loop::read_before_suspecting`).
const CONFIRM_BURSTS: usize = 64;
/// How long the loop keeps polling without sleeping after it moved packets.
/// Traffic comes in bursts: the next batch is usually microseconds away, and
/// catching it awake saves a sleep and a wakeup (expensive in a VM: an IPI).
/// Measured on the 2-core test VM with `SLUICE_BUSY_POLL_US` (0, 10, 30, 60,
/// 200): 30 µs gave the most throughput; longer spins take CPU the endpoints
/// need.
pub const BUSY_POLL: Duration = Duration::from_micros(30);
/// Frames one loop iteration must move for the loop to busy-poll afterwards.
const SPIN_AFTER: usize = 8;

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
    /// What the agent measured of its chains.
    pub chains: Vec<sluice_proto::ChainMeasure>,
    /// Socket counters (batch sizes achieved, super-datagrams, ring copies):
    /// `geneve` and `port:<id>`; forwarding thread K > 0's own sockets with
    /// `/K` appended.
    pub io: Vec<(String, SocketStats)>,
    /// The loop's own counters (summed over the forwarding threads).
    pub io_loop: LoopStats,
    /// Each forwarding thread's counters, by thread.
    pub threads: Vec<ThreadStats>,
    /// Whether Seawall rate-controls this host's senders.
    pub seawall: bool,
    /// Seawall's controllers: (entity, rate in bits/s, counters).
    pub isolation: Vec<(sluice_seawall::Entity, u64, sluice_seawall::EntityStats)>,
    /// Hosts this host accuses of ignoring its Seawall feedback.
    pub accusations: Vec<sluice_proto::Accusation>,
    /// What the health checks of backends on this host's VMs found.
    pub backend_checks: Vec<sluice_proto::BackendCheck>,
}

impl Published {
    /// What several forwarding threads published, as one: the first (the
    /// control shard, which alone keeps instance health, leases, backend
    /// checks and Seawall) for what is per host; counters, socket counters,
    /// chain measures and pinned flows summed or joined over all.
    pub fn merge(mut parts: Vec<Published>) -> Published {
        if parts.is_empty() {
            return Published::default();
        }
        let mut all = parts.remove(0);
        for p in parts {
            all.stats.add(&p.stats);
            all.io.extend(p.io);
            all.io_loop.add(&p.io_loop);
            all.threads.extend(p.threads);
            for (id, e) in p.port_errors {
                all.port_errors.entry(id).or_insert(e);
            }
            for c in p.chains {
                match all
                    .chains
                    .iter_mut()
                    .find(|a| a.vni == c.vni && a.chain == c.chain)
                {
                    Some(a) => {
                        a.packets += c.packets;
                        a.bytes += c.bytes;
                        a.syns += c.syns;
                        a.handshakes += c.handshakes;
                        a.handshake_ns += c.handshake_ns;
                        a.unanswered += c.unanswered;
                        a.latency.add(&c.latency);
                    }
                    None => all.chains.push(c),
                }
            }
            for f in p.pinned_flows {
                match all
                    .pinned_flows
                    .iter_mut()
                    .find(|a| a.vni == f.vni && a.group == f.group && a.target == f.target)
                {
                    Some(a) => {
                        a.flows += f.flows;
                        a.draining |= f.draining;
                    }
                    None => all.pinned_flows.push(f),
                }
            }
        }
        all
    }
}

/// Counters of the data-plane loop itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// `poll(2)` calls that could block (the loop had nothing to do).
    pub sleeps: u64,
    /// `poll(2)` calls with a zero timeout while busy-polling.
    pub spins: u64,
    /// TCP super-frames delivered to VMs.
    pub gro_super_frames: u64,
    /// Segments merged into them (beyond the first of each).
    pub gro_merged: u64,
    /// Segments not merged because their TCP checksum was wrong.
    pub gro_bad_csum: u64,
}

impl LoopStats {
    /// Adds `o`'s counters to these.
    pub fn add(&mut self, o: &LoopStats) {
        let LoopStats {
            sleeps,
            spins,
            gro_super_frames,
            gro_merged,
            gro_bad_csum,
        } = *o;
        self.sleeps += sleeps;
        self.spins += spins;
        self.gro_super_frames += gro_super_frames;
        self.gro_merged += gro_merged;
        self.gro_bad_csum += gro_bad_csum;
    }
}

/// What one forwarding thread did (`sluice_dataplane_thread_*` in the
/// agent's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// The thread, `0..threads` (`sluice-dataplane-K`).
    pub thread: usize,
    /// Frames and datagrams read from its own sockets.
    pub read: u64,
    /// Frames and datagrams its shard forwarded (read here or handed over).
    pub forwarded: u64,
    /// Frames it read that belonged to another thread's shard and were
    /// handed over.
    pub handed_out: u64,
    /// Frames other threads handed to it.
    pub handed_in: u64,
    /// Frames it could not hand over: every parcel of the link was in
    /// flight.
    pub handoff_drops: u64,
}

/// What one forwarding thread shares with the owner and the other threads.
#[derive(Debug, Default)]
struct ThreadShared {
    has_pending: AtomicBool,
    pending: Mutex<Option<Dataplane>>,
    /// Configurations handed over / taken over by the thread.
    given: AtomicU64,
    taken: AtomicU64,
    published: Mutex<Published>,
    /// An eventfd the thread polls with its sockets, so a new configuration,
    /// an exited instance or a parcel from another thread is handled at once
    /// instead of at the next poll timeout.
    wake: Waker,
    /// The thread may block in `poll(2)`: whoever hands it a parcel wakes it.
    sleeping: AtomicBool,
    /// Parcels handed to the thread so far (it compares this with what it
    /// has seen before it sleeps).
    posted: AtomicU64,
}

/// State shared between the forwarding threads and their owner.
#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    version: AtomicU64,
    has_exited: AtomicBool,
    exited: Mutex<Vec<u16>>,
    /// Until when (Unix ns) local instances may be granted leases: extended
    /// while the controller answers.
    leases_until: AtomicU64,
    /// One per forwarding thread.
    threads: Vec<ThreadShared>,
    /// The control shard's view of instance health, for the others, and how
    /// many times it was replaced.
    health: Mutex<Option<HealthView>>,
    health_gen: AtomicU64,
}

impl Shared {
    fn new(threads: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            version: AtomicU64::new(0),
            has_exited: AtomicBool::new(false),
            exited: Mutex::new(Vec::new()),
            leases_until: AtomicU64::new(0),
            threads: (0..threads).map(|_| ThreadShared::default()).collect(),
            health: Mutex::new(None),
            health_gen: AtomicU64::new(0),
        }
    }

    /// Tells thread `t` it was handed parcels; wakes it if it may sleep.
    fn posted(&self, t: usize) {
        let th = &self.threads[t];
        // SeqCst with the thread's own `sleeping` store and `posted` load
        // (see `Loop::run`): either it sees this post before it sleeps, or
        // this sees it sleeping and wakes it.
        th.posted.fetch_add(1, Ordering::SeqCst);
        if th.sleeping.load(Ordering::SeqCst) {
            th.wake.wake();
        }
    }
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
        // Instance health is the control shard's.
        self.0.threads[CONTROL_SHARD].wake.wake();
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
    /// After a loop iteration that moved packets, keep polling without
    /// sleeping for this long (zero: always sleep in `poll(2)` when idle).
    /// Default [`BUSY_POLL`]; `SLUICE_BUSY_POLL_US` in the environment
    /// overrides it.
    pub busy_poll: Duration,
    /// Merge runs of TCP segments into super-frames on their way to VMs
    /// (software GRO; turns on TSO on the host side of VM links so they cross
    /// whole). `SLUICE_VM_GRO=off` in the environment turns it off.
    pub vm_gro: bool,
    /// Seawall's rate control of this host's senders (None: off; feedback to
    /// other hosts' senders is sent either way).
    pub seawall: Option<sluice_seawall::Config>,
    /// The VM MTU the underlay was checked for: a VM port whose interface has
    /// a larger one is reported when it opens (`None`: not checked).
    pub vm_mtu: Option<u32>,
}

impl Default for IoOptions {
    fn default() -> IoOptions {
        IoOptions {
            netns: None,
            udp: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, sluice_proto::GENEVE_PORT),
            batch: 64,
            suspect_after: Duration::from_nanos(crate::dataplane::DEFAULT_SUSPECT_NS),
            busy_poll: std::env::var("SLUICE_BUSY_POLL_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(BUSY_POLL, Duration::from_micros),
            vm_gro: std::env::var("SLUICE_VM_GRO").map_or(true, |v| v != "off" && v != "0"),
            seawall: None,
            vm_mtu: None,
        }
    }
}

/// The running forwarding threads (`sluice-dataplane-K`, one or more).
#[derive(Debug)]
pub struct DataplaneThread {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    udp_addr: SocketAddrV4,
}

/// What one forwarding thread starts with.
struct ThreadStart {
    index: usize,
    count: usize,
    dp: Dataplane,
    out: Vec<Option<Outbound>>,
    inb: Vec<Option<Inbound>>,
}

impl DataplaneThread {
    /// Starts one forwarding thread per data plane of `initial` (at least
    /// one, at most [`MAX_SHARDS`]; thread K runs shard K of them), each with
    /// its own Geneve socket in `opts.netns` (with several threads, sockets
    /// sharing the address: `SO_REUSEPORT`). Fails if the namespace or a
    /// socket cannot be opened.
    pub fn spawn(opts: &IoOptions, initial: Vec<Dataplane>) -> io::Result<DataplaneThread> {
        let count = initial.len();
        if count == 0 || count > MAX_SHARDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("data-plane threads: {count}, must be 1 to {MAX_SHARDS}"),
            ));
        }
        let shared = Arc::new(Shared::new(count));
        shared
            .version
            .store(initial[0].version(), Ordering::Release);
        // A link between every ordered pair of threads.
        let mut outs: Vec<Vec<Option<Outbound>>> = (0..count)
            .map(|_| (0..count).map(|_| None).collect())
            .collect();
        let mut ins: Vec<Vec<Option<Inbound>>> = (0..count)
            .map(|_| (0..count).map(|_| None).collect())
            .collect();
        if count > 1 {
            for (i, row) in outs.iter_mut().enumerate() {
                for (j, slot) in row.iter_mut().enumerate() {
                    if i != j {
                        let (o, inb) = link();
                        *slot = Some(o);
                        ins[j][i] = Some(inb);
                    }
                }
            }
        }
        let mut me = DataplaneThread {
            shared,
            threads: Vec::with_capacity(count),
            udp_addr: opts.udp,
        };
        let mut addr = opts.udp;
        for (index, ((dp, out), inb)) in initial.into_iter().zip(outs).zip(ins).enumerate() {
            let start = ThreadStart {
                index,
                count,
                dp,
                out,
                inb,
            };
            // Every thread binds where the first did (its port, if it
            // picked one).
            match me.spawn_one(opts, addr, start) {
                Ok(a) => {
                    if index == 0 {
                        addr = a;
                        me.udp_addr = a;
                    }
                }
                Err(e) => {
                    me.stop();
                    return Err(e);
                }
            }
        }
        Ok(me)
    }

    fn spawn_one(
        &mut self,
        opts: &IoOptions,
        addr: SocketAddrV4,
        start: ThreadStart,
    ) -> io::Result<SocketAddrV4> {
        let (tx, rx) = std::sync::mpsc::channel::<io::Result<SocketAddrV4>>();
        let sh = self.shared.clone();
        let opts2 = opts.clone();
        let shared_port = start.count > 1;
        let thread = std::thread::Builder::new()
            .name(format!("sluice-dataplane-{}", start.index))
            .spawn(sluice_logging::in_current_span(move || {
                let r = sluice_netio::in_netns_opt(opts2.netns.as_deref(), || {
                    let bound = if shared_port {
                        UdpBatchSocket::bind_shared(addr)
                    } else {
                        UdpBatchSocket::bind(addr)
                    };
                    let udp = match bound {
                        Ok(u) => u,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = tx.send(Ok(udp.local_addr()));
                    let ThreadStart {
                        index,
                        count,
                        mut dp,
                        out,
                        inb,
                    } = start;
                    dp.set_suspect_after(opts2.suspect_after.as_nanos() as u64);
                    dp.set_seawall(opts2.seawall);
                    if let Err(e) = dp.set_shard(index, count) {
                        tracing::error!(error = %e, "data-plane thread not started");
                        return;
                    }
                    Loop::new(&sh, udp, dp, &opts2, out, inb).run();
                });
                if let Err(e) = r {
                    let _ = tx.send(Err(e));
                }
            }))?;
        match rx.recv() {
            Ok(Ok(a)) => {
                self.threads.push(thread);
                Ok(a)
            }
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other("data-plane thread ended early"))
            }
        }
    }

    /// A handle the instance supervisor reports process exits through.
    pub fn exit_notifier(&self) -> ExitNotifier {
        ExitNotifier(self.shared.clone())
    }

    /// Where the Geneve socket is bound.
    pub fn udp_addr(&self) -> SocketAddrV4 {
        self.udp_addr
    }

    /// How many forwarding threads run: [`Self::install`] wants that many
    /// data planes.
    pub fn threads(&self) -> usize {
        self.shared.threads.len()
    }

    /// Lets the data plane grant leases to local instances until `until_ns`
    /// (Unix ns).
    pub fn allow_leases_until(&self, until_ns: u64) {
        self.shared.leases_until.store(until_ns, Ordering::Release);
    }

    /// Hands a new configuration to the threads, one data plane each, built
    /// from the same configuration (replacing one not yet taken), and waits
    /// up to `wait` for every thread to run it (its VM port sockets open);
    /// returns whether they did in time. Refused (false) unless there is one
    /// data plane per thread.
    pub fn install(&self, dps: Vec<Dataplane>, wait: Duration) -> bool {
        if dps.len() != self.threads() || dps.is_empty() {
            return false;
        }
        let v = dps[0].version();
        let mut gens = Vec::with_capacity(dps.len());
        for (t, dp) in self.shared.threads.iter().zip(dps) {
            let Ok(mut slot) = t.pending.lock() else {
                return false;
            };
            *slot = Some(dp);
            // Under the slot's lock, so generations and contents stay in step.
            gens.push(t.given.fetch_add(1, Ordering::AcqRel) + 1);
        }
        self.shared.version.store(v, Ordering::Release);
        for t in &self.shared.threads {
            t.has_pending.store(true, Ordering::Release);
            t.wake.wake();
        }
        let until = Instant::now() + wait;
        for (t, gen) in self.shared.threads.iter().zip(gens) {
            while t.taken.load(Ordering::Acquire) < gen {
                if Instant::now() >= until
                    || self.threads.is_empty()
                    || self.threads.iter().any(|t| t.is_finished())
                {
                    return false;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        true
    }

    /// Version of the last configuration handed over.
    pub fn version(&self) -> u64 {
        self.shared.version.load(Ordering::Acquire)
    }

    /// The counters last published, summed over the threads
    /// ([`Published::merge`]).
    pub fn published(&self) -> Published {
        Published::merge(
            self.shared
                .threads
                .iter()
                .map(|t| t.published.lock().map(|p| p.clone()).unwrap_or_default())
                .collect(),
        )
    }

    /// Stops the threads and waits for them.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for t in &self.shared.threads {
            t.wake.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for DataplaneThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether forwarding thread `me` of `count` reads VM port `id` (the others
/// only send to it). By id, so a port keeps its reader when others come and
/// go.
pub fn reads_port(id: u16, me: usize, count: usize) -> bool {
    id as usize % count.max(1) == me
}

/// A VM port's socket.
struct PortSock {
    iface: String,
    sock: PacketSocket,
    /// TCP super-frames may be sent (the socket has `PACKET_VNET_HDR` and the
    /// interface TSO, so they reach the VM whole).
    gso: bool,
    /// This thread reads the port (otherwise the socket only sends).
    reads: bool,
}

/// Datagrams read per receive call on the Geneve socket. Each buffer holds a
/// whole coalesced super-datagram (up to 64 KiB), so this is up to ~1,400 frames.
const UDP_BATCH: usize = 32;

struct Loop<'a> {
    shared: &'a Shared,
    udp: UdpBatchSocket,
    dp: Dataplane,
    /// Frames from VM ports (read in place from the sockets' rings).
    rx: RxBatch,
    /// Datagrams from the Geneve socket (big buffers: super-datagrams).
    rx_udp: RxBatch,
    plan: TxPlan,
    socks: BTreeMap<u16, PortSock>,
    /// VM ports without an open socket: (iface, error, last attempt).
    closed: BTreeMap<u16, (String, String, Instant)>,
    poller: Poller,
    /// Poller token -> port (None: the UDP socket).
    tokens: Vec<Option<u16>>,
    scratch: Vec<Out>,
    last_publish: Instant,
    stats: LoopStats,
    busy_poll: Duration,
    vm_gro: bool,
    /// Builds super-frames for VM ports.
    gro: Coalescer,
    clock: LoopClock,
    /// Seawall rate-controls this host's senders (the clock is read per batch).
    seawall: bool,
    /// See [`IoOptions::vm_mtu`].
    vm_mtu: Option<u32>,
    /// This thread (shard), of `count`.
    me: usize,
    count: usize,
    /// Which shard a received frame belongs to.
    steer: Sharding,
    /// Links to the other threads (`None` at `me`) and from them.
    out: Vec<Option<Outbound>>,
    inb: Vec<Option<Inbound>>,
    /// Indices of this shard's frames in the batch being split.
    mine: Vec<u32>,
    /// Parcels handed to this thread that it has seen (`ThreadShared::posted`).
    posted_seen: u64,
    /// Parcels were left waiting by the last drain (do not sleep).
    inbound_left: bool,
    /// The control shard's health view last adopted.
    health_seen: u64,
    /// This thread's counters.
    thread: ThreadStats,
}

impl<'a> Loop<'a> {
    fn new(
        shared: &'a Shared,
        mut udp: UdpBatchSocket,
        dp: Dataplane,
        opts: &IoOptions,
        out: Vec<Option<Outbound>>,
        inb: Vec<Option<Inbound>>,
    ) -> Loop<'a> {
        let role = dp.shard();
        let batch = opts.batch;
        // Super-datagrams both ways: a batch of equal-sized frames to one peer
        // crosses the sending stack, the fabric and the receiving stack once
        // instead of once per frame. Without kernel support, plain datagrams.
        let gso = udp.enable_gso();
        let gro = udp.enable_gro();
        let udp_buf = if gro { GRO_BUF_SIZE } else { DEFAULT_BUF_SIZE };
        let dp_seawall = dp.seawall_on();
        let mut l = Loop {
            shared,
            udp,
            dp,
            rx: RxBatch::new(batch, DEFAULT_BUF_SIZE),
            rx_udp: RxBatch::new(UDP_BATCH.min(batch.max(1)), udp_buf),
            plan: TxPlan::new(),
            socks: BTreeMap::new(),
            closed: BTreeMap::new(),
            poller: Poller::new(),
            tokens: Vec::new(),
            scratch: Vec::new(),
            last_publish: Instant::now(),
            stats: LoopStats::default(),
            busy_poll: opts.busy_poll,
            vm_gro: opts.vm_gro,
            gro: Coalescer::new(),
            clock: LoopClock::new(),
            seawall: dp_seawall,
            vm_mtu: opts.vm_mtu,
            me: role.index,
            count: role.count,
            steer: Sharding::new(role.count),
            out,
            inb,
            mine: Vec::with_capacity(batch.max(UDP_BATCH)),
            posted_seen: 0,
            inbound_left: false,
            health_seen: 0,
            thread: ThreadStats {
                thread: role.index,
                ..ThreadStats::default()
            },
        };
        if !(gso && gro) && role.index == 0 {
            tracing::warn!(
                gso,
                gro,
                "UDP segmentation offload unavailable: one datagram per frame"
            );
        }
        l.reconcile_ports();
        l.share_health();
        l.publish();
        l
    }

    /// This thread's shared state.
    fn mine_shared(&self) -> &'a ThreadShared {
        &self.shared.threads[self.me]
    }

    /// Control shard, several threads: hands the health view to the others.
    fn share_health(&mut self) {
        if self.count == 1 || self.me != CONTROL_SHARD {
            return;
        }
        if let Ok(mut h) = self.shared.health.lock() {
            *h = Some(self.dp.health_view());
        }
        self.shared.health_gen.fetch_add(1, Ordering::Release);
    }

    /// Other shards: takes the control shard's health view if it changed.
    fn adopt_health(&mut self) {
        if self.me == CONTROL_SHARD {
            return;
        }
        let gen = self.shared.health_gen.load(Ordering::Acquire);
        if gen == self.health_seen {
            return;
        }
        self.health_seen = gen;
        let view = self.shared.health.lock().ok().and_then(|h| h.clone());
        if let Some(v) = view {
            self.dp.adopt_health(&v);
        }
    }

    /// Forwards the parcels other threads handed to this one (up to
    /// [`BURST`] from each); returns how many frames they held.
    fn drain_inbound(&mut self) -> usize {
        if self.count == 1 {
            return 0;
        }
        // Before taking: a parcel posted from now on is seen as new.
        self.posted_seen = self.mine_shared().posted.load(Ordering::SeqCst);
        self.inbound_left = false;
        let mut moved = 0;
        for from in 0..self.inb.len() {
            for n in 0..=BURST {
                let Some(mut p) = self.inb[from].as_mut().and_then(|i| i.take()) else {
                    break;
                };
                if n == BURST {
                    // Others' turn; this parcel is forwarded first next time.
                    self.inbound_left = true;
                }
                self.plan.clear();
                self.fresh_now();
                match p.origin() {
                    Origin::Vm(port) => self.dp.process_vm_batch(port, &p, &mut self.plan),
                    Origin::Udp => self.dp.process_udp_batch(&mut p, &mut self.plan),
                }
                Self::send_plan(
                    &mut self.dp,
                    &self.plan,
                    &p,
                    &mut self.udp,
                    &mut self.socks,
                    &mut self.scratch,
                    &mut self.gro,
                );
                moved += p.len();
                if let Some(i) = self.inb[from].as_mut() {
                    i.give_back(p);
                }
            }
        }
        self.thread.handed_in += moved as u64;
        self.thread.forwarded += moved as u64;
        moved
    }

    /// Ships the parcels being filled and tells their threads.
    fn ship(&mut self, mut shipped: u64) {
        shipped |= flush_all(&mut self.out);
        while shipped != 0 {
            let t = shipped.trailing_zeros() as usize;
            shipped &= shipped - 1;
            if t < self.shared.threads.len() {
                self.shared.posted(t);
            }
        }
    }

    fn run(&mut self) {
        // Until when to poll without sleeping (after moving packets).
        let mut spin_until: Option<Instant> = None;
        let me = self.mine_shared();
        while !self.shared.stop.load(Ordering::Acquire) {
            if me.has_pending.swap(false, Ordering::AcqRel) {
                let next = me
                    .pending
                    .lock()
                    .ok()
                    .and_then(|mut s| s.take().map(|d| (d, me.given.load(Ordering::Acquire))));
                if let Some((mut next, gen)) = next {
                    next.inherit_stats(&self.dp);
                    self.dp = next;
                    // A new data plane of another shard starts from its old
                    // view; the control shard's is taken again.
                    self.health_seen = 0;
                    self.reconcile_ports();
                    self.share_health();
                    self.publish();
                    me.taken.store(gen, Ordering::Release);
                }
            }
            self.adopt_health();
            self.retry_closed();
            self.clock.tick();
            self.dp
                .allow_leases_until(self.shared.leases_until.load(Ordering::Acquire));
            // Wake up for the next heartbeat deadline, so a silent instance is
            // suspected on time.
            let now = self.clock.wall_ns;
            let wait = self.dp.next_deadline().map_or(POLL, |d| {
                Duration::from_nanos(d.saturating_sub(now) + 100_000).min(POLL)
            });
            // Packets held for their sender's rate leave on time, not 100 µs late.
            let wait = self.dp.seawall_release_at().map_or(wait, |d| {
                wait.min(Duration::from_nanos(d.saturating_sub(now)))
            });
            let spinning = spin_until.is_some_and(|t| self.clock.mono < t) || self.inbound_left;
            let wait = if spinning {
                self.stats.spins += 1;
                Duration::ZERO
            } else {
                self.stats.sleeps += 1;
                wait
            };
            // Several threads: say this one may sleep, then look whether it
            // was handed something meanwhile (see `Shared::posted`).
            let wait = if self.count > 1 && !wait.is_zero() {
                me.sleeping.store(true, Ordering::SeqCst);
                if me.posted.load(Ordering::SeqCst) != self.posted_seen {
                    Duration::ZERO
                } else {
                    wait
                }
            } else {
                wait
            };
            let polled = self.poller.wait(wait);
            if self.count > 1 {
                me.sleeping.store(false, Ordering::SeqCst);
            }
            if let Err(e) = polled {
                tracing::error!(error = %e, "data plane poll failed");
                std::thread::sleep(POLL);
            }
            if !spinning {
                // It may have slept.
                self.clock.tick();
            }
            let mut moved = 0;
            for t in 0..self.tokens.len() {
                if self.poller.is_ready(t) {
                    match self.tokens[t] {
                        None => moved += self.drain_udp(),
                        Some(WAKE_TOKEN) => me.wake.drain(),
                        Some(p) => moved += self.drain_port(p),
                    }
                }
            }
            moved += self.drain_inbound();
            // Spin only behind bulk traffic: a request/response exchange moves
            // a frame or two per wakeup, and spinning for it would take the CPU
            // its endpoints need (measured: the round trip got slower).
            if moved >= SPIN_AFTER && !self.busy_poll.is_zero() {
                spin_until = Some(self.clock.mono + self.busy_poll);
            }
            self.seawall_tick();
            let checked = self.probe_tick();
            if self.dp.suspicion_due(self.clock.wall_ns) {
                self.read_before_suspecting();
            }
            let mut changed = self.dp.check_health(self.clock.wall_ns, wall_ns);
            if self.me == CONTROL_SHARD && self.shared.has_exited.swap(false, Ordering::AcqRel) {
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
                self.share_health();
            }
            if changed || checked {
                self.publish();
            }
            if self.clock.mono.saturating_duration_since(self.last_publish) >= PUBLISH_EVERY {
                // Heartbeats change loads and deadlines without a suspicion:
                // the other shards see them at this pace.
                self.share_health();
                self.publish();
            }
        }
        self.publish();
    }

    fn publish(&mut self) {
        self.clock.rebase();
        self.last_publish = self.clock.mono;
        let suffix = if self.me == 0 {
            String::new()
        } else {
            format!("/{}", self.me)
        };
        self.thread.handed_out = self.out.iter().flatten().map(|o| o.handed()).sum();
        self.thread.handoff_drops = self.out.iter().flatten().map(|o| o.dropped()).sum();
        if let Ok(mut p) = self.shared.threads[self.me].published.lock() {
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
            self.dp.set_now(self.clock.wall_ns);
            p.health = self.dp.health_report();
            p.failover_events = self.dp.failover_events().to_vec();
            p.pinned_flows = self.dp.pinned_flows();
            p.chains = self.dp.chain_measures();
            p.io.clear();
            p.io.push((format!("geneve{suffix}"), self.udp.stats()));
            for (id, s) in self.socks.iter_mut() {
                // Reads (and resets) the kernel's drop counter: one system call
                // per port per publication, not per packet.
                let _ = s.sock.kernel_drops();
                p.io.push((format!("port:{id}{suffix}"), s.sock.stats()));
            }
            p.io_loop = self.stats;
            p.threads.clear();
            p.threads.push(self.thread);
            p.seawall = self.dp.seawall_on();
            p.isolation = self.dp.seawall_entities();
            p.accusations = self.dp.accusations();
            p.backend_checks = self.dp.backend_checks();
            p.io_loop.gro_super_frames = self.gro.super_frames;
            p.io_loop.gro_merged = self.gro.merged;
            p.io_loop.gro_bad_csum = self.gro.bad_csum;
        }
    }

    /// Sets the data plane's clock for the next batch. With Seawall on, the
    /// clock is read again: packets carry their send time and receivers
    /// measure queueing from it, so a time from before the iteration's other
    /// batches (a millisecond and more on a loaded host) would read as a
    /// queue on the path. One read per batch, not per packet.
    fn fresh_now(&mut self) {
        if self.seawall {
            self.clock.tick();
        }
        self.dp.set_now(self.clock.wall_ns);
    }

    /// Sends the Seawall feedback and the rate-limited packets that are due.
    fn seawall_tick(&mut self) {
        self.plan.clear();
        self.fresh_now();
        self.dp.seawall_tick(&mut self.plan);
        Self::send_plan(
            &mut self.dp,
            &self.plan,
            &self.rx_udp,
            &mut self.udp,
            &mut self.socks,
            &mut self.scratch,
            &mut self.gro,
        );
    }

    /// Runs the health checks of backends: sends the SYNs due, notices
    /// time-outs. Returns whether a check ended.
    fn probe_tick(&mut self) -> bool {
        self.plan.clear();
        self.dp.set_now(self.clock.wall_ns);
        let ended = self.dp.probe_tick(&mut self.plan);
        Self::send_plan(
            &mut self.dp,
            &self.plan,
            &self.rx,
            &mut self.udp,
            &mut self.socks,
            &mut self.scratch,
            &mut self.gro,
        );
        ended
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
        let (me, count) = (self.me, self.count);
        self.socks.retain(|id, s| {
            want.get(id).is_some_and(|i| *i == s.iface) && s.reads == reads_port(*id, me, count)
        });
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
        // Super-frames need TSO on our side of the link, or the kernel would cut
        // them up again before the VM.
        let gso = self.vm_gro
            && match sluice_netio::enable_tso(&iface) {
                Ok(on) => on,
                Err(e) => {
                    if !self.closed.contains_key(&id) {
                        tracing::warn!(port = id, %iface, error = %e, "no TSO: frames go one by one");
                    }
                    false
                }
            };
        // A receive ring (frames read in place, no system call per frame), no
        // qdisc on the way to the VM, and virtio-net headers for super-frames.
        // A port another thread reads gets a socket that only sends.
        let reads = reads_port(id, self.me, self.count);
        let opts = PacketOptions {
            vnet_hdr: gso,
            send_only: !reads,
            ..PacketOptions::fast()
        };
        match PacketSocket::open_with(&iface, &opts) {
            Ok(sock) => {
                if self.closed.remove(&id).is_some() {
                    tracing::info!(port = id, %iface, "VM port opened");
                }
                if let Some(e) = sock.ring_error() {
                    tracing::warn!(port = id, %iface, error = %e, "no receive ring: using recvmmsg");
                }
                if reads {
                    self.check_vm_mtu(id, &iface);
                }
                self.socks.insert(
                    id,
                    PortSock {
                        iface,
                        sock,
                        gso,
                        reads,
                    },
                );
            }
            Err(e) => {
                let msg = e.to_string();
                let known = self.closed.get(&id).is_some_and(|c| c.1 == msg);
                if !known {
                    tracing::warn!(port = id, %iface, error = %msg, "cannot open the VM port (will retry)");
                }
                self.closed.insert(id, (iface, msg, Instant::now()));
            }
        }
    }

    /// Reports a VM interface whose MTU is above what the underlay was
    /// checked for: its largest frames would not cross the fabric.
    fn check_vm_mtu(&self, id: u16, iface: &str) {
        let Some(max) = self.vm_mtu else {
            return;
        };
        // This thread is in the data plane's namespace, where the port is.
        let mtu = sluice_netns::Rtnl::open(None).and_then(|r| r.link(iface));
        if let Ok(link) = mtu {
            if link.mtu > max {
                tracing::warn!(
                    port = id,
                    %iface,
                    mtu = link.mtu,
                    vm_mtu = max,
                    "the VM port's MTU is above vm_mtu, which the underlay was checked for: \
                     frames longer than vm_mtu bytes will not cross the fabric (lower the VM's MTU, or raise vm_mtu and the underlay's)"
                );
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
        if let Some(fd) = self.shared.threads[self.me].wake.raw() {
            self.poller.add(fd);
            self.tokens.push(Some(WAKE_TOKEN));
        }
        for (id, s) in self.socks.iter().filter(|(_, s)| s.reads) {
            self.poller.add(s.sock.as_raw_fd());
            self.tokens.push(Some(*id));
        }
    }

    /// Reads and forwards up to `BURST` batches from the Geneve socket; returns
    /// how many datagrams it read.
    fn drain_udp(&mut self) -> usize {
        self.drain_udp_for(BURST).0
    }

    /// Before an instance's silence is acted on: reads what waits in the
    /// Geneve socket (where heartbeats queue behind the instances' data), up
    /// to [`CONFIRM_BURSTS`] batches, then tells the detector whether the
    /// queue was emptied ([`Dataplane::read_before_suspecting`]). Heartbeats
    /// found are stamped with the time just before the read, the time the
    /// check is made at.
    fn read_before_suspecting(&mut self) {
        self.clock.tick();
        let (_, emptied) = self.drain_udp_for(CONFIRM_BURSTS);
        // Heartbeats another thread read and handed over (its own socket is
        // not read from here).
        self.drain_inbound();
        self.dp.read_before_suspecting(!emptied);
    }

    /// Reads and forwards up to `bursts` batches from the Geneve socket;
    /// returns how many datagrams it read and whether it found the socket
    /// empty.
    fn drain_udp_for(&mut self, bursts: usize) -> (usize, bool) {
        let mut moved = 0;
        for _ in 0..bursts {
            match self.udp.recv_batch(&mut self.rx_udp) {
                Ok(0) => return (moved, true),
                Ok(n) => moved += n,
                Err(e) => {
                    tracing::error!(error = %e, "Geneve socket receive failed");
                    return (moved, false);
                }
            }
            self.plan.clear();
            self.fresh_now();
            self.thread.read += self.rx_udp.len() as u64;
            if self.count == 1 {
                self.thread.forwarded += self.rx_udp.len() as u64;
                self.dp.process_udp_batch(&mut self.rx_udp, &mut self.plan);
                Self::send_plan(
                    &mut self.dp,
                    &self.plan,
                    &self.rx_udp,
                    &mut self.udp,
                    &mut self.socks,
                    &mut self.scratch,
                    &mut self.gro,
                );
                continue;
            }
            let steer = &mut self.steer;
            let shipped = split(
                &self.rx_udp,
                Origin::Udp,
                self.me,
                |d| steer.of_datagram(d),
                &mut self.mine,
                &mut self.out,
            );
            self.thread.forwarded += self.mine.len() as u64;
            if self.mine.len() == self.rx_udp.len() {
                self.dp.process_udp_batch(&mut self.rx_udp, &mut self.plan);
                Self::send_plan(
                    &mut self.dp,
                    &self.plan,
                    &self.rx_udp,
                    &mut self.udp,
                    &mut self.socks,
                    &mut self.scratch,
                    &mut self.gro,
                );
            } else if !self.mine.is_empty() {
                let mut sub = Subset::new(&mut self.rx_udp, &self.mine);
                self.dp.process_udp_batch(&mut sub, &mut self.plan);
                Self::send_plan(
                    &mut self.dp,
                    &self.plan,
                    &sub,
                    &mut self.udp,
                    &mut self.socks,
                    &mut self.scratch,
                    &mut self.gro,
                );
            }
            self.ship(shipped);
        }
        (moved, false)
    }

    /// Reads and forwards up to `BURST` batches from VM port `port`; returns how
    /// many frames it read.
    fn drain_port(&mut self, port: u16) -> usize {
        let mut moved = 0;
        for _ in 0..BURST {
            let Some(s) = self.socks.get_mut(&port) else {
                return moved;
            };
            match s.sock.recv_batch(&mut self.rx) {
                Ok(0) => return moved,
                Ok(n) => moved += n,
                Err(e) => {
                    // The interface went away (VM deleted): reopen later.
                    let iface = s.iface.clone();
                    tracing::warn!(port, %iface, error = %e, "VM port receive failed: reopening later");
                    self.socks.remove(&port);
                    self.closed
                        .insert(port, (iface, e.to_string(), Instant::now()));
                    self.rebuild_poller();
                    return moved;
                }
            }
            self.plan.clear();
            self.fresh_now();
            self.thread.read += self.rx.len() as u64;
            if self.count == 1 {
                self.thread.forwarded += self.rx.len() as u64;
                self.dp.process_vm_batch(port, &self.rx, &mut self.plan);
                Self::send_plan(
                    &mut self.dp,
                    &self.plan,
                    &self.rx,
                    &mut self.udp,
                    &mut self.socks,
                    &mut self.scratch,
                    &mut self.gro,
                );
            } else {
                let steer = &mut self.steer;
                let shipped = split(
                    &self.rx,
                    Origin::Vm(port),
                    self.me,
                    |f| steer.of_vm_frame(f),
                    &mut self.mine,
                    &mut self.out,
                );
                self.thread.forwarded += self.mine.len() as u64;
                if self.mine.len() == self.rx.len() {
                    self.dp.process_vm_batch(port, &self.rx, &mut self.plan);
                    Self::send_plan(
                        &mut self.dp,
                        &self.plan,
                        &self.rx,
                        &mut self.udp,
                        &mut self.socks,
                        &mut self.scratch,
                        &mut self.gro,
                    );
                } else if !self.mine.is_empty() {
                    let sub = Subset::new(&mut self.rx, &self.mine);
                    self.dp.process_vm_batch(port, &sub, &mut self.plan);
                    Self::send_plan(
                        &mut self.dp,
                        &self.plan,
                        &sub,
                        &mut self.udp,
                        &mut self.socks,
                        &mut self.scratch,
                        &mut self.gro,
                    );
                }
                self.ship(shipped);
            }
            // Hand the ring slots back now: the kernel drops frames when the
            // ring is full, and the frames are sent (copied by the kernel).
            self.rx.clear();
        }
        moved
    }

    /// Sends the plan: the UDP messages with one call, each VM port's with one.
    /// (An associated function over the fields it needs, so the frames may be
    /// borrowed from either receive batch.)
    fn send_plan<F: Frames + ?Sized>(
        dp: &mut Dataplane,
        plan: &TxPlan,
        rx: &F,
        udp: &mut UdpBatchSocket,
        socks: &mut BTreeMap<u16, PortSock>,
        scratch: &mut Vec<Out>,
        gro: &mut Coalescer,
    ) {
        if plan.outs.is_empty() {
            return;
        }
        // UDP first.
        scratch.clear();
        scratch.extend(plan.outs.iter().filter(|o| matches!(o.dest, Dest::Udp(_))));
        if !scratch.is_empty() {
            let msgs = messages(plan, rx, scratch);
            let sent = send_all(&msgs, |m| udp.send_batch(m));
            dp.account_sent(scratch, sent);
        }
        // Then per VM port, in port order.
        let mut next_port = None;
        loop {
            let port = plan
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
            scratch.clear();
            scratch.extend(plan.outs.iter().filter(|o| o.dest == Dest::Vm(port)));
            let sent = match socks.get_mut(&port) {
                Some(s) if s.gso && scratch.len() > 1 => {
                    // Runs of one TCP flow leave as super-frames.
                    gro.build(plan, rx, scratch);
                    let slices: Vec<&[u8]> = gro
                        .parts()
                        .iter()
                        .map(|&p| gro.part(p, plan, rx, scratch))
                        .collect();
                    let frames = send_all(&gro.frames, |f| s.sock.send_frames(f, &slices));
                    crate::gro::outs_in(&gro.outs_per_frame, frames)
                }
                Some(s) => {
                    let msgs = messages(plan, rx, scratch);
                    send_all(&msgs, |m| s.sock.send_batch(m))
                }
                None => 0,
            };
            dp.account_sent(scratch, sent);
        }
    }
}

/// The loop's clock: one monotonic read per loop iteration, the Unix time
/// derived from it. Clock reads are not free in a VM (the busy-polling loop
/// spent a tenth of its time in `clock_gettime` reading it five times per
/// iteration); the derived Unix time is re-based on the real one at every
/// publication, so it never drifts more than [`PUBLISH_EVERY`]'s worth of
/// clock adjustment.
#[derive(Debug, Clone, Copy)]
struct LoopClock {
    mono: Instant,
    wall_ns: u64,
    base_mono: Instant,
    base_wall_ns: u64,
}

impl LoopClock {
    fn new() -> LoopClock {
        let mono = Instant::now();
        let wall_ns = wall_ns();
        LoopClock {
            mono,
            wall_ns,
            base_mono: mono,
            base_wall_ns: wall_ns,
        }
    }

    /// Reads the clock.
    fn tick(&mut self) {
        self.mono = Instant::now();
        self.wall_ns = self.base_wall_ns
            + self
                .mono
                .saturating_duration_since(self.base_mono)
                .as_nanos() as u64;
    }

    /// Re-reads the Unix time.
    fn rebase(&mut self) {
        *self = LoopClock::new();
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
fn messages<'a, F: Frames + ?Sized>(plan: &'a TxPlan, rx: &'a F, outs: &[Out]) -> Vec<Msg<'a>> {
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
fn send_all<M>(msgs: &[M], mut send: impl FnMut(&[M]) -> io::Result<usize>) -> usize {
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
