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
//! to every worker; anything else to worker 0, which counts it as malformed.
//!
//! Datagrams are copied into [`Inbox`]es, one being filled per worker, handed
//! over whole and given back empty: no allocation and no lock per packet. The
//! lease rule that makes per-worker flow caches safe is in docs/ARCHITECTURE.md
//! ("Forwarding on several cores").

use sluice_wire::parse::{parse_into, PacketMeta};

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
/// direction-invariant hash. Frames that do not parse, and frames that are not
/// IP (no flow), go to worker 0, whose chain counts them.
pub fn frame_worker(frame: &[u8], workers: usize, meta: &mut PacketMeta) -> usize {
    if workers <= 1
        || parse_into(frame, meta).is_err()
        || !matches!(meta.ethertype, 0x0800 | 0x86dd)
    {
        return 0;
    }
    sluice_wire::flow::worker_of(meta.flow.symmetric_hash(), workers)
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
