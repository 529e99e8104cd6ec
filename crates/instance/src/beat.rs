//! Heartbeats from a thread of their own.
//!
//! The data path blocks on store round trips. When it sent its own
//! heartbeats, a slow store (a cluster's replica resynchronising, a primary
//! busy with a snapshot) delayed every instance's heartbeats at once, and
//! agents failed over live instances in bursts across hosts (`sluice
//! experiment chaos --soak 600`: 19 false failovers, instances of two hosts
//! within 20 ms of each other). Moving the instance's traffic elsewhere does
//! not help then: the other instances wait on the same store.
//!
//! So a beat thread sends them, every [`crate::HEARTBEAT_EVERY`], with the
//! counters the data path last published ([`Beat`]). It keeps beating while
//! the data path waits, but only while the data path makes progress at all:
//! a loop that has not published for [`HUNG_AFTER`] (a deadlock, a function
//! spinning) gets no heartbeats, so the agent still suspects it. A killed or
//! stopped process stops both threads; its agent acts on that as before.
//!
//! Leases answer heartbeats ([`sluice_proto::InstanceLease`]): the data path
//! needs when each was sent, so the log of sent heartbeats
//! ([`HeartbeatLog`]) is shared between the two threads.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_proto::InstanceHeartbeat;

/// Heartbeats remembered for the leases answering them: with 10 ms
/// heartbeats, the last 160 ms.
pub const HB_REMEMBERED: usize = 16;

/// A data path that has not published its counters for this long is taken
/// as hung and gets no heartbeats. Longer than a store hiccup (the false
/// failovers above came from waits of tens to hundreds of milliseconds),
/// short enough that a hung loop loses its traffic within seconds.
pub const HUNG_AFTER: Duration = Duration::from_secs(2);

/// When recent heartbeats were sent: (seq, wall-clock ns, monotonic). A
/// lease's validity counts from there. Shared by the data path (which reads
/// it when a lease arrives) and the beat thread (which writes it before each
/// send); one lock per heartbeat or lease, none per packet.
#[derive(Debug, Clone)]
pub struct HeartbeatLog(Arc<Mutex<[(u32, u64, Instant); HB_REMEMBERED]>>);

impl Default for HeartbeatLog {
    fn default() -> HeartbeatLog {
        HeartbeatLog(Arc::new(Mutex::new(
            [(u32::MAX, 0, Instant::now()); HB_REMEMBERED],
        )))
    }
}

impl HeartbeatLog {
    fn lock(&self) -> MutexGuard<'_, [(u32, u64, Instant); HB_REMEMBERED]> {
        // A panic elsewhere cannot leave the array half-written: entries are
        // Copy and written whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that heartbeat `seq` was sent at `wall_ns` and `at`.
    pub fn sent(&self, seq: u32, wall_ns: u64, at: Instant) {
        self.lock()[seq as usize % HB_REMEMBERED] = (seq, wall_ns, at);
    }

    /// When heartbeat `seq` was sent (wall-clock ns, monotonic), if it is one
    /// of the last [`HB_REMEMBERED`].
    pub fn when(&self, seq: u32) -> Option<(u64, Instant)> {
        self.lock()
            .iter()
            .find(|h| h.0 == seq)
            .map(|&(_, wall, mono)| (wall, mono))
    }
}

/// What the data path last published for the beat thread: the heartbeat's
/// counters and when it published them.
#[derive(Debug, Clone, Copy)]
pub struct Published {
    /// The counters (its `seq`, `cpu_us` are the beat thread's to fill).
    pub hb: InstanceHeartbeat,
    /// When the data path published them (monotonic).
    pub at: Instant,
}

impl Published {
    /// What several workers published, as one instance's: counters and
    /// histograms summed, the lease epoch held by every worker (0 unless all
    /// hold the same one), and the oldest publication time, so that one hung
    /// worker withholds the instance's heartbeats as a hung loop does.
    pub fn combine(parts: &[Published]) -> Option<Published> {
        let (first, rest) = parts.split_first()?;
        let mut out = *first;
        for p in rest {
            let (h, o) = (&mut out.hb, &p.hb);
            h.rx_packets += o.rx_packets;
            h.tx_packets += o.tx_packets;
            h.drops += o.drops;
            h.queue_drops += o.queue_drops;
            h.cache_hits += o.cache_hits;
            h.store_round_trips.add(&o.store_round_trips);
            h.added_latency.add(&o.added_latency);
            h.replica_waits += o.replica_waits;
            h.replica_rewaits += o.replica_rewaits;
            h.replica_shortfalls += o.replica_shortfalls;
            if h.lease_epoch != o.lease_epoch {
                h.lease_epoch = 0;
            }
            out.at = out.at.min(p.at);
        }
        Some(out)
    }
}

/// The sans-IO beat: given the time and what the data path published,
/// whether to send a heartbeat now and which.
#[derive(Debug)]
pub struct Beat {
    seq: u32,
    next: Instant,
    every: Duration,
    hung_after: Duration,
    /// Heartbeats withheld because the data path looked hung.
    pub withheld: u64,
}

impl Beat {
    /// A beat every `every`, starting at `now`, withheld when the data path
    /// has not published for `hung_after`.
    pub fn new(now: Instant, every: Duration, hung_after: Duration) -> Beat {
        Beat {
            seq: 0,
            next: now,
            every,
            hung_after,
            withheld: 0,
        }
    }

    /// When the next heartbeat is due.
    pub fn next_at(&self) -> Instant {
        self.next
    }

    /// The heartbeat to send at `now`, if one is due and the data path is not
    /// hung; `cpu_us` and `kernel_drops` are read by the caller (the process's
    /// CPU time, the socket's drops), added to what `p` says.
    pub fn poll(
        &mut self,
        now: Instant,
        p: &Published,
        cpu_us: u64,
        kernel_drops: u64,
    ) -> Option<InstanceHeartbeat> {
        if now < self.next {
            return None;
        }
        // Never a burst of catching-up beats after the thread itself stalled.
        self.next = now + self.every;
        if now.saturating_duration_since(p.at) > self.hung_after {
            self.withheld += 1;
            return None;
        }
        let mut hb = p.hb;
        hb.seq = self.seq;
        hb.cpu_us = cpu_us;
        hb.queue_drops += kernel_drops;
        self.seq = self.seq.wrapping_add(1);
        Some(hb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_beat_as_one_instance() {
        let t0 = Instant::now();
        let part = |rx: u64, epoch: u64, at: Instant| {
            let mut hb = published(at).hb;
            hb.rx_packets = rx;
            hb.tx_packets = rx - 1;
            hb.lease_epoch = epoch;
            hb.added_latency.observe(1_000, rx);
            Published { hb, at }
        };
        let later = t0 + Duration::from_millis(5);
        let c = Published::combine(&[part(10, 7, later), part(4, 7, t0)]).unwrap();
        assert_eq!((c.hb.rx_packets, c.hb.tx_packets), (14, 12));
        assert_eq!(c.hb.added_latency.count(), 14);
        assert_eq!(c.hb.lease_epoch, 7, "both workers hold epoch 7");
        assert_eq!(c.at, t0, "the oldest worker's publication counts");
        let c = Published::combine(&[part(10, 7, t0), part(4, 0, t0)]).unwrap();
        assert_eq!(c.hb.lease_epoch, 0, "one worker without the lease");
        assert!(Published::combine(&[]).is_none());
    }

    fn published(at: Instant) -> Published {
        Published {
            hb: InstanceHeartbeat {
                rx_packets: 7,
                queue_drops: 2,
                ..InstanceHeartbeat::default()
            },
            at,
        }
    }

    #[test]
    fn beats_every_interval_while_the_data_path_waits() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut b = Beat::new(t0, 10 * ms, 2000 * ms);
        // The data path published at t0 and then waits on the store for
        // 500 ms: heartbeats go on every 10 ms with what it published.
        let p = published(t0);
        let mut seqs = Vec::new();
        for i in 0..=500u32 {
            if let Some(hb) = b.poll(t0 + i * ms, &p, 1000 + u64::from(i), 3) {
                assert_eq!(hb.rx_packets, 7);
                assert_eq!(hb.queue_drops, 5, "published drops plus the socket's");
                assert_eq!(hb.cpu_us, 1000 + u64::from(i));
                seqs.push((i, hb.seq));
            }
        }
        assert_eq!(seqs.len(), 51);
        assert!(seqs
            .iter()
            .enumerate()
            .all(|(k, &(i, s))| s == k as u32 && i == 10 * k as u32));
        assert_eq!(b.withheld, 0);
    }

    #[test]
    fn a_hung_data_path_gets_no_heartbeats_until_it_publishes_again() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut b = Beat::new(t0, 10 * ms, 2000 * ms);
        let p = published(t0);
        assert!(b.poll(t0 + 2000 * ms, &p, 0, 0).is_some());
        assert!(b.poll(t0 + 2010 * ms, &p, 0, 0).is_none());
        assert!(b.poll(t0 + 2500 * ms, &p, 0, 0).is_none());
        assert_eq!(b.withheld, 2);
        // It publishes again: beats resume, with the next sequence number.
        let p = published(t0 + 2600 * ms);
        let hb = b.poll(t0 + 2600 * ms, &p, 0, 0).expect("beats resume");
        assert_eq!(hb.seq, 1);
    }

    #[test]
    fn a_stalled_beat_thread_does_not_send_a_burst() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut b = Beat::new(t0, 10 * ms, 2000 * ms);
        assert!(b.poll(t0, &published(t0), 0, 0).is_some());
        // The thread itself did not run for 300 ms: one beat, then the next
        // only an interval later.
        let t = t0 + 300 * ms;
        assert!(b.poll(t, &published(t), 0, 0).is_some());
        assert!(b.poll(t + 5 * ms, &published(t), 0, 0).is_none());
        assert!(b.poll(t + 10 * ms, &published(t), 0, 0).is_some());
    }

    #[test]
    fn the_log_answers_for_the_last_heartbeats_only() {
        let log = HeartbeatLog::default();
        let t0 = Instant::now();
        for seq in 0..40u32 {
            log.sent(
                seq,
                u64::from(seq) * 10,
                t0 + Duration::from_millis(seq.into()),
            );
        }
        assert_eq!(log.when(39).map(|w| w.0), Some(390));
        assert_eq!(log.when(24).map(|w| w.0), Some(240));
        assert_eq!(log.when(23), None, "older than the last 16");
        // Clones share the log: what the beat thread records, the data path reads.
        let other = log.clone();
        other.sent(41, 410, t0);
        assert_eq!(log.when(41).map(|w| w.0), Some(410));
    }
}
