//! Several workers in one instance (issue 25 item 4): which worker a received
//! datagram belongs to, and the batches a receiving thread hands them.
//!
//! The agent sends all of an instance's traffic from one address and port to
//! one address and port, so the kernel cannot spread it over sockets
//! (`SO_REUSEPORT` hashes the outer 4-tuple, which is the same for every
//! datagram). The instance therefore reads its socket on one thread and
//! dispatches: every Geneve datagram goes to the worker of its inner flow's
//! direction-invariant hash ([`sluice_wire::flow::worker_of`] over
//! [`sluice_wire::FlowKey::symmetric_hash`], the hash the switch selected the
//! instance by), so both directions of a flow meet on one worker; a lease goes
//! to every worker; anything else (not Geneve, not IP) to worker 0, whose
//! chain counts it.
//!
//! Datagrams are copied into [`Inbox`]es, one being filled per worker, handed
//! over whole and given back empty: no allocation and no lock per packet. The
//! loop around them (the receiving thread, the workers, one beat thread for
//! all) is `run_sharded`. The lease rule that makes per-worker flow caches safe
//! is in docs/STATE.md ("Leases in the running system") and
//! docs/ARCHITECTURE.md ("Forwarding on several cores").

use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use sluice_netio::{Poller, RxBatch, UdpBatchSocket, DEFAULT_BUF_SIZE};
use sluice_wire::parse::{parse_into, PacketMeta};

use crate::{
    beat, beat_thread, bind_data_socket, dup_udp, print_stats, send_all, wall_ns, write_events,
    BackendsWatch, DataPath, EveLog, HeartbeatLog, InstanceError, InstanceOptions, InstanceStats,
    Pacer, StatsHandle, HEARTBEAT_EVERY, POLL_MAX, PRINT_EVERY,
};

/// Where a received datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Every worker: an ownership lease from the agent, which every worker
    /// holds for the instance's whole ranges.
    All,
    /// One worker.
    Worker(usize),
}

/// Routes `datagram` among `workers` workers; `meta` is scratch space reused
/// from one call to the next.
pub fn route(datagram: &[u8], workers: usize, meta: &mut PacketMeta) -> Route {
    if sluice_proto::InstanceLease::is_lease(datagram) {
        return Route::All;
    }
    if workers <= 1 {
        return Route::Worker(0);
    }
    let Ok((_, _, off)) = sluice_switch::tunnel::parse_geneve_payload(datagram) else {
        return Route::Worker(0);
    };
    Route::Worker(frame_worker(&datagram[off..], workers, meta))
}

/// The worker of `workers` an Ethernet frame belongs to: that of its flow's
/// direction-invariant hash (for an ICMP error, the flow it quotes). Frames that do not parse, and frames that are not
/// IP (no flow), go to worker 0, whose chain counts them.
pub fn frame_worker(frame: &[u8], workers: usize, meta: &mut PacketMeta) -> usize {
    if workers <= 1
        || parse_into(frame, meta).is_err()
        || !matches!(meta.ethertype, 0x0800 | 0x86dd)
    {
        return 0;
    }
    // An ICMP error goes where the flow it is about goes: a local-state
    // firewall finds that flow's state there.
    let flow = meta.icmp_embedded.map_or(meta.flow, |e| e.flow);
    sluice_wire::flow::worker_of(flow.symmetric_hash(), workers)
}

/// Datagrams for one worker, copied back to back into one buffer.
#[derive(Debug, Default)]
pub struct Inbox {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Inbox {
    /// An inbox for up to `datagrams` datagrams of `bytes` bytes in all.
    pub fn with_capacity(datagrams: usize, bytes: usize) -> Inbox {
        Inbox {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(datagrams),
        }
    }

    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// True when `len` more bytes or one more datagram would exceed what it
    /// was made for (it would then allocate).
    pub fn would_overflow(&self, len: usize) -> bool {
        self.ends.len() == self.ends.capacity() || self.bytes.len() + len > self.bytes.capacity()
    }

    /// Appends a copy of `datagram`.
    pub fn push(&mut self, datagram: &[u8]) {
        self.bytes.extend_from_slice(datagram);
        self.ends.push(self.bytes.len());
    }

    /// The datagrams, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let d = &self.bytes[start..end];
            start = end;
            d
        })
    }

    /// Empties it, keeping its buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// The receiving thread's side: fills one [`Inbox`] per worker and hands out
/// the full ones.
#[derive(Debug)]
pub struct Dispatcher {
    filling: Vec<Inbox>,
    /// Empty inboxes given back by the workers, reused.
    spare: Vec<Inbox>,
    datagrams: usize,
    bytes: usize,
    meta: PacketMeta,
}

impl Dispatcher {
    /// A dispatcher to `workers` workers (at least 1) whose inboxes hold up to
    /// `datagrams` datagrams (a worker's batch) of at most `max_datagram` bytes.
    pub fn new(workers: usize, datagrams: usize, max_datagram: usize) -> Dispatcher {
        let datagrams = datagrams.max(1);
        let bytes = datagrams * max_datagram.max(1);
        Dispatcher {
            filling: (0..workers.max(1))
                .map(|_| Inbox::with_capacity(datagrams, bytes))
                .collect(),
            spare: Vec::new(),
            datagrams,
            bytes,
            meta: PacketMeta::default(),
        }
    }

    /// Workers dispatched to.
    pub fn workers(&self) -> usize {
        self.filling.len()
    }

    /// Copies `datagram` into the inbox of its worker (of every worker, for
    /// a lease); an inbox that is full first goes to `full` with its worker.
    pub fn dispatch(&mut self, datagram: &[u8], full: &mut dyn FnMut(usize, Inbox)) {
        match route(datagram, self.filling.len(), &mut self.meta) {
            Route::Worker(w) => self.put(w, datagram, full),
            Route::All => {
                for w in 0..self.filling.len() {
                    self.put(w, datagram, full);
                }
            }
        }
    }

    fn put(&mut self, w: usize, datagram: &[u8], full: &mut dyn FnMut(usize, Inbox)) {
        if self.filling[w].would_overflow(datagram.len()) && !self.filling[w].is_empty() {
            let fresh = self.fresh();
            full(w, std::mem::replace(&mut self.filling[w], fresh));
        }
        self.filling[w].push(datagram);
    }

    fn fresh(&mut self) -> Inbox {
        self.spare
            .pop()
            .unwrap_or_else(|| Inbox::with_capacity(self.datagrams, self.bytes))
    }

    /// Hands out every inbox holding anything (the end of a receive batch:
    /// nothing waits for more input).
    pub fn flush(&mut self, full: &mut dyn FnMut(usize, Inbox)) {
        for w in 0..self.filling.len() {
            if !self.filling[w].is_empty() {
                let fresh = self.fresh();
                full(w, std::mem::replace(&mut self.filling[w], fresh));
            }
        }
    }

    /// Takes back an inbox a worker is done with.
    pub fn give_back(&mut self, mut inbox: Inbox) {
        inbox.clear();
        self.spare.push(inbox);
    }
}

/// Inboxes queued for a worker before the receiving thread waits for it
/// (then the socket's queue fills, and the kernel drops what overflows it, as
/// for a single-threaded instance).
const INBOXES_QUEUED: usize = 4;

/// [`crate::run_with_stats`] for a chain with `settings.workers` above 1
/// (`first`, worker 0's data path as the caller built it, says how many and
/// its batch size; data paths stay on the thread that built them, so every
/// worker builds its own): this thread reads the socket and dispatches
/// ([`Dispatcher`]); each worker runs its own [`DataPath`], with its own store
/// connection and flow cache, sends from its own handle on the socket, ticks
/// its own timers and applies every lease. One beat thread sends the
/// instance's heartbeats, combined from every worker's
/// ([`crate::beat::Published::combine`]); leases answering them are checked
/// against the one log all workers share.
pub(crate) fn run_sharded(
    opts: &InstanceOptions,
    stop: &AtomicBool,
    stats: &StatsHandle,
    first: DataPath,
) -> Result<(), InstanceError> {
    let n = first.workers();
    let batch = first.batch_size();
    drop(first);
    let log = HeartbeatLog::default();
    let mut sock = bind_data_socket(opts)?;
    let sock_err = |what: &str, err| InstanceError::Socket {
        what: format!("instance {}: {what}", opts.name),
        err,
    };
    let tx_socks = (0..n)
        .map(|_| sock.try_clone())
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| sock_err("duplicating the data socket", e))?;
    let beat_sock = dup_udp(&sock).map_err(|e| sock_err("duplicating the data socket", e))?;
    let now = Instant::now();
    let published: Vec<Mutex<beat::Published>> = (0..n)
        .map(|_| {
            Mutex::new(beat::Published {
                hb: Default::default(),
                at: now,
            })
        })
        .collect();
    let slots: Vec<Mutex<InstanceStats>> = (0..n).map(|_| Mutex::default()).collect();
    let eve = Mutex::new(opts.eve.as_deref().map(|p| EveLog::new(p, &opts.name)));
    let done = AtomicBool::new(false);
    let (back_tx, back_rx) = mpsc::channel::<Inbox>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), InstanceError>>();
    let mut to_workers = Vec::with_capacity(n);
    let mut inboxes = Vec::with_capacity(n);
    for _ in 0..n {
        let (t, r) = mpsc::sync_channel::<Inbox>(INBOXES_QUEUED);
        to_workers.push(t);
        inboxes.push(r);
    }
    let span = tracing::Span::current();
    let mut rx_errors = 0u64;
    let r = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(n);
        for (w, (tx, inbox)) in tx_socks.into_iter().zip(inboxes).enumerate() {
            let worker = Worker {
                sock: tx,
                inbox,
                back: back_tx.clone(),
                published: &published[w],
                slot: &slots[w],
                eve: &eve,
                backends: opts.backends.clone(),
                workers: n,
            };
            let (span, log, ready) = (span.clone(), log.clone(), ready_tx.clone());
            let h = std::thread::Builder::new()
                .name(format!("sluice-nf-{w}"))
                .spawn_scoped(scope, move || {
                    let _g = span.enter();
                    match DataPath::new(&opts.name, &opts.chain, &opts.state, opts.agent) {
                        Ok(mut core) => {
                            core.hb_log = log;
                            worker.publish(&core, Instant::now());
                            let _ = ready.send(Ok(()));
                            worker.run(core);
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                        }
                    }
                })
                .map_err(|e| sock_err("starting a worker thread", e));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    break;
                }
            }
        }
        drop((back_tx, ready_tx));
        // Every worker built its data path (or one could not) before any input.
        let mut r = Ok(());
        for _ in 0..n {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    r = Err(e);
                    break;
                }
                Err(_) => {
                    r = Err(sock_err(
                        "starting its workers",
                        io::Error::other("a worker thread ended"),
                    ));
                    break;
                }
            }
        }
        if r.is_ok() {
            scope.spawn(|| beat_thread(&beat_sock, opts.agent, &published, &log, &done));
            let mut disp = Dispatcher::new(n, batch, DEFAULT_BUF_SIZE);
            r = dispatch_loop(
                opts,
                stop,
                &mut sock,
                &mut disp,
                &to_workers,
                &back_rx,
                &mut rx_errors,
                &mut || {
                    let s = merged(&slots);
                    stats.publish(&s);
                    s
                },
            );
        }
        // Workers drain what they were handed, flush and end.
        to_workers.clear();
        let mut panicked = false;
        for h in handles {
            panicked |= h.join().is_err();
        }
        done.store(true, Ordering::Relaxed);
        if panicked && r.is_ok() {
            r = Err(sock_err(
                "a worker",
                io::Error::other("a worker thread panicked"),
            ));
        }
        r
    });
    let mut s = merged(&slots);
    s.rx_errors += rx_errors;
    stats.publish(&s);
    print_stats(&s);
    r
}

/// Every worker's statistics summed.
fn merged(slots: &[Mutex<InstanceStats>]) -> InstanceStats {
    let mut out: Option<InstanceStats> = None;
    for s in slots {
        let s = s.lock().unwrap_or_else(|e| e.into_inner());
        match out.as_mut() {
            None => out = Some(s.clone()),
            Some(o) => o.add(&s),
        }
    }
    out.unwrap_or_default()
}

/// The receiving thread: reads the socket a batch at a time and hands each
/// worker its datagrams, until `stop` or a worker is gone. `publish` merges
/// and publishes the workers' statistics (every timer interval).
#[allow(clippy::too_many_arguments)]
fn dispatch_loop(
    opts: &InstanceOptions,
    stop: &AtomicBool,
    sock: &mut UdpBatchSocket,
    disp: &mut Dispatcher,
    to_workers: &[mpsc::SyncSender<Inbox>],
    back: &mpsc::Receiver<Inbox>,
    rx_errors: &mut u64,
    publish: &mut dyn FnMut() -> InstanceStats,
) -> Result<(), InstanceError> {
    let mut rx = RxBatch::new(disp.datagrams, DEFAULT_BUF_SIZE);
    let mut poller = Poller::new();
    let readable = poller.add(sock.as_raw_fd());
    let mut handed: Vec<(usize, Inbox)> = Vec::with_capacity(disp.workers() * 2);
    let mut last_rx_error: Option<String> = None;
    let mut next_publish = Instant::now();
    let mut next_print = Instant::now() + PRINT_EVERY;
    let mut printed = (u64::MAX, u64::MAX);
    while !stop.load(Ordering::Relaxed) {
        poller.wait(POLL_MAX).map_err(|err| InstanceError::Socket {
            what: format!("instance {}: poll", opts.name),
            err,
        })?;
        if poller.is_ready(readable) {
            loop {
                let got = match sock.recv_batch(&mut rx) {
                    Ok(k) => k,
                    Err(e) => {
                        *rx_errors += 1;
                        let msg = e.to_string();
                        if last_rx_error.as_deref() != Some(&msg) {
                            tracing::warn!(error = %msg, "receive failed");
                            last_rx_error = Some(msg);
                        }
                        0
                    }
                };
                if got == 0 {
                    break;
                }
                for (d, _src) in rx.iter() {
                    disp.dispatch(d, &mut |w, i| handed.push((w, i)));
                }
                disp.flush(&mut |w, i| handed.push((w, i)));
                for (w, i) in handed.drain(..) {
                    if to_workers[w].send(i).is_err() {
                        return Err(InstanceError::Socket {
                            what: format!("instance {}: worker {w}", opts.name),
                            err: io::Error::other("the worker ended"),
                        });
                    }
                }
                while let Ok(i) = back.try_recv() {
                    disp.give_back(i);
                }
                if got < rx.capacity() || stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        }
        let now = Instant::now();
        if now >= next_publish {
            let s = publish();
            next_publish = now + Duration::from_millis(100);
            if now >= next_print {
                if (s.rx, s.tx) != printed {
                    print_stats(&s);
                    printed = (s.rx, s.tx);
                }
                next_print = now + PRINT_EVERY;
            }
        }
    }
    Ok(())
}

/// One worker thread and what it shares.
struct Worker<'a> {
    sock: UdpBatchSocket,
    inbox: mpsc::Receiver<Inbox>,
    back: mpsc::Sender<Inbox>,
    published: &'a Mutex<beat::Published>,
    slot: &'a Mutex<InstanceStats>,
    eve: &'a Mutex<Option<EveLog>>,
    backends: Option<PathBuf>,
    workers: usize,
}

impl Worker<'_> {
    /// What the beat thread sends for this worker, and proof that it runs.
    fn publish(&self, core: &DataPath, now: Instant) {
        *self.published.lock().unwrap_or_else(|e| e.into_inner()) = beat::Published {
            hb: core.heartbeat(0, 0, 0),
            at: now,
        };
    }

    /// Processes inboxes until the receiving thread hangs up, then what is in
    /// flight, last timers and flushes.
    fn run(mut self, mut core: DataPath) {
        let core = &mut core;
        let timer_interval = core.timer_interval();
        let mut wpoll = Poller::new();
        wpoll.add_writable(self.sock.as_raw_fd());
        let mut backends = self
            .backends
            .take()
            .map(|path| BackendsWatch { path, seen: None });
        if let Some(w) = backends.as_mut() {
            w.check(core);
        }
        // The instance's budget, shared evenly: its flows are.
        let mut pacer = core.capacity().map(|c| {
            let share = |r: Option<f64>| r.map(|r| r / self.workers as f64);
            let c = sluice_chain::Capacity {
                pps: share(c.pps),
                mbps: share(c.mbps),
                burst_ms: c.burst_ms,
            };
            Pacer::new(&c, Instant::now())
        });
        let mut next_tick = Instant::now();
        let mut next_heartbeat = Instant::now();
        let mut pending: Option<Inbox> = None;
        loop {
            let now = Instant::now();
            if now >= next_heartbeat {
                self.publish(core, now);
                next_heartbeat = now + HEARTBEAT_EVERY;
            }
            let wait = next_tick
                .min(next_heartbeat)
                .saturating_duration_since(now)
                .min(POLL_MAX);
            let over = pacer.as_mut().map_or(Duration::ZERO, |p| p.wait(now));
            if !over.is_zero() {
                // Over budget: input waits in this worker's queue, then the socket's.
                core.idle();
                send_all(core, &mut self.sock, &mut wpoll);
                std::thread::sleep(over.min(wait));
            } else {
                let got = match pending.take() {
                    Some(i) => Ok(i),
                    None => self.inbox.recv_timeout(wait),
                };
                match got {
                    Ok(inbox) => {
                        core.received(Instant::now());
                        let now_ns = wall_ns();
                        let (mut pkts, mut bytes) = (0, 0);
                        for d in inbox.iter() {
                            if sluice_proto::InstanceLease::is_lease(d) {
                                core.on_lease(d, Instant::now());
                            } else {
                                pkts += 1;
                                bytes += d.len();
                                core.push_datagram(d, now_ns);
                            }
                        }
                        // The receiving thread may be gone already.
                        let _ = self.back.send(inbox);
                        core.process();
                        send_all(core, &mut self.sock, &mut wpoll);
                        if let Some(p) = pacer.as_mut() {
                            p.charge(pkts, bytes);
                        }
                        match self.inbox.try_recv() {
                            Ok(next) => pending = Some(next),
                            Err(mpsc::TryRecvError::Empty) => {
                                // Input is idle: nothing waits for a window to fill.
                                core.idle();
                                send_all(core, &mut self.sock, &mut wpoll);
                            }
                            Err(mpsc::TryRecvError::Disconnected) => break,
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        core.idle();
                        send_all(core, &mut self.sock, &mut wpoll);
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            let now = Instant::now();
            if now >= next_tick {
                if let Some(w) = backends.as_mut() {
                    w.check(core);
                }
                core.tick(wall_ns());
                *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = core.stats_now();
                next_tick = now + timer_interval;
            }
            self.write_events(core);
        }
        core.flush();
        send_all(core, &mut self.sock, &mut wpoll);
        self.write_events(core);
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = core.stats_now();
    }

    /// Writes the worker's events to the instance's one EVE log: one lock
    /// per loop iteration that has any.
    fn write_events(&self, core: &mut DataPath) {
        if core.events().is_empty() {
            return;
        }
        let mut eve = self.eve.lock().unwrap_or_else(|e| e.into_inner());
        write_events(core, eve.as_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_switch::tunnel::geneve_header;
    use sluice_wire::build;

    fn encap(frame: &[u8]) -> Vec<u8> {
        let (h, n) = geneve_header(7, Some((1, 1)));
        let mut d = h[..n].to_vec();
        d.extend_from_slice(frame);
        d
    }

    fn tcp(client: u8, port: u16, reply: bool) -> Vec<u8> {
        let (c, s) = ([10, 1, 0, client], [10, 2, 0, 7]);
        let f = if reply {
            build::tcp_v4(s, c, 80, port, 1, 1, 0x10, b"x")
        } else {
            build::tcp_v4(c, s, port, 80, 1, 1, 0x10, b"x")
        };
        encap(&f)
    }

    #[test]
    fn both_directions_of_a_flow_go_to_the_worker_its_hash_names() {
        let mut meta = PacketMeta::default();
        let mut per = [0usize; 3];
        for i in 0..300u16 {
            let there = route(&tcp(i as u8, 1000 + i, false), 3, &mut meta);
            let back = route(&tcp(i as u8, 1000 + i, true), 3, &mut meta);
            assert_eq!(there, back, "flow {i}");
            let Route::Worker(w) = there else {
                panic!("a data frame went to every worker");
            };
            // The worker `sluice bench nf --threads` shards the same flow to.
            let d = tcp(i as u8, 1000 + i, false);
            let (_, _, off) = sluice_switch::tunnel::parse_geneve_payload(&d).unwrap();
            let inner = sluice_wire::parse::parse_frame(&d[off..])
                .unwrap()
                .flow
                .symmetric_hash();
            assert_eq!(w, sluice_wire::flow::worker_of(inner, 3));
            per[w] += 1;
        }
        assert!(per.iter().all(|&n| n > 50), "{per:?}");
        // A router's ICMP error about a flow goes to that flow's worker.
        for i in 0..30u16 {
            let d = tcp(i as u8, 1000 + i, false);
            let (_, _, off) = sluice_switch::tunnel::parse_geneve_payload(&d).unwrap();
            let quoted = &d[off + 14..off + 14 + 28];
            let err = build::icmp_v4_error([10, 9, 9, 9], [10, 1, 0, i as u8], 3, 4, quoted);
            assert_eq!(
                route(&encap(&err), 3, &mut meta),
                route(&d, 3, &mut meta),
                "flow {i}"
            );
        }
    }

    #[test]
    fn leases_go_to_every_worker_and_garbage_to_the_first() {
        let mut meta = PacketMeta::default();
        let lease = sluice_proto::InstanceLease {
            hb_seq: 1,
            epoch: 9,
            valid_us: 20_000,
            ranges: vec![(0, u32::MAX)],
        }
        .encode();
        assert_eq!(route(&lease, 4, &mut meta), Route::All);
        assert_eq!(route(b"not geneve", 4, &mut meta), Route::Worker(0));
        // Geneve around a frame that is not IP.
        let arp = encap(&[0xffu8; 60]);
        assert_eq!(route(&arp, 4, &mut meta), Route::Worker(0));
        assert_eq!(
            route(&tcp(1, 1, false), 1, &mut meta),
            Route::Worker(0),
            "one worker takes everything"
        );

        let mut d = Dispatcher::new(2, 8, 2048);
        let mut got: Vec<(usize, Inbox)> = Vec::new();
        d.dispatch(&lease, &mut |w, i| got.push((w, i)));
        d.flush(&mut |w, i| got.push((w, i)));
        let ws: Vec<usize> = got.iter().map(|(w, _)| *w).collect();
        assert_eq!(ws, [0, 1]);
        for (_, i) in &got {
            assert_eq!(i.iter().collect::<Vec<_>>(), [&lease[..]]);
        }
    }

    #[test]
    fn full_inboxes_are_handed_over_in_order_and_reused() {
        let mut d = Dispatcher::new(2, 4, 2048);
        let mut got: Vec<(usize, Inbox)> = Vec::new();
        let frames: Vec<Vec<u8>> = (0..40u16).map(|i| tcp(i as u8, 2000 + i, false)).collect();
        for f in &frames {
            d.dispatch(f, &mut |w, i| got.push((w, i)));
        }
        d.flush(&mut |w, i| got.push((w, i)));
        assert!(got.iter().all(|(_, i)| i.len() <= 4 && !i.is_empty()));
        // Every datagram arrives once, at its worker, in the order received.
        let mut meta = PacketMeta::default();
        for w in 0..2 {
            let want: Vec<&[u8]> = frames
                .iter()
                .filter(|f| route(f, 2, &mut meta) == Route::Worker(w))
                .map(|f| &f[..])
                .collect();
            let have: Vec<&[u8]> = got
                .iter()
                .filter(|(x, _)| *x == w)
                .flat_map(|(_, i)| i.iter())
                .collect();
            assert_eq!(have, want, "worker {w}");
        }
        // Given back, the inboxes are used again instead of new ones.
        let handed = got.len();
        for (_, i) in got.drain(..) {
            d.give_back(i);
        }
        for f in &frames {
            d.dispatch(f, &mut |w, i| got.push((w, i)));
        }
        d.flush(&mut |w, i| got.push((w, i)));
        assert_eq!(got.len(), handed);
        assert!(d.spare.is_empty(), "{} inboxes made anew", d.spare.len());
    }
}
