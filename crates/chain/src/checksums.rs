//! TCP checksums of the streams a chain reassembles.
//!
//! A middlebox that leaves transport checksums to the endpoints is open to
//! the oldest IPS evasion (Ptacek & Newsham, 1998; fragroute's `tcp_chaff
//! cksum`): a segment with a wrong checksum is accepted by the reassembler,
//! which then keeps its bytes (first wins) and trims the real segment sent
//! after it as a duplicate, while the receiving host discards the bad one
//! and reads the real one. So a chain that reassembles streams verifies the
//! TCP checksum of every packet before reassembly sees it, unless its
//! `verify_checksums` says `none`; a packet that fails is dropped as
//! malformed (`bad_l4_checksum`), as its receiver would drop it.
//!
//! `auto` is for captures, where the capturing host's NIC often filled the
//! checksums in after the capture (Suricata's `checksum-checks: auto`): the
//! first [`AUTO_SAMPLE`] TCP packets are checked without dropping any; if
//! fewer than one in [`AUTO_BAD_SHARE`] failed, checks are enforced from then
//! on, otherwise they stop. An adversary who can send that many bad packets
//! first switches the checks off, which is why deployed chains use `ipv4`.

use sluice_packet::Batch;
use sluice_wire::parse::{transport_checksum_ok, Fragment, ParseError, L4};

use crate::spec::VerifyChecksums;

/// TCP packets `auto` checks before deciding.
pub const AUTO_SAMPLE: u64 = 1000;
/// `auto` enforces checks if fewer than one in this many sampled packets failed.
pub const AUTO_BAD_SHARE: u64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Checks are the parse's business (`all`) or nobody's (`none`).
    Off,
    /// `auto`, still sampling.
    Sampling,
    /// Every packet is checked and a failure dropped.
    Enforce,
    /// `auto` found most checksums wrong: not checked any more.
    Offloaded,
}

/// The checks of one chain (sans-IO: a function of the packets it is given).
#[derive(Debug, Clone)]
pub(crate) struct StreamChecksums {
    phase: Phase,
    checked: u64,
    bad: u64,
}

impl StreamChecksums {
    /// The checks a chain with `setting` runs before reassembly.
    pub fn new(setting: VerifyChecksums) -> Self {
        let phase = match setting {
            VerifyChecksums::Ipv4 => Phase::Enforce,
            VerifyChecksums::Auto => Phase::Sampling,
            // `all` verified every transport checksum in the parse already.
            VerifyChecksums::All | VerifyChecksums::None => Phase::Off,
        };
        StreamChecksums {
            phase,
            checked: 0,
            bad: 0,
        }
    }

    /// Checks the live, unfragmented TCP packets of `batch`, dropping those
    /// that fail (with stage `stage`) while checks are enforced.
    pub fn apply(&mut self, batch: &mut Batch, stage: u8) {
        if matches!(self.phase, Phase::Off | Phase::Offloaded) {
            return;
        }
        for p in batch.pkts.iter_mut() {
            if !p.is_live() || p.meta.l4 != L4::Tcp || p.meta.fragment != Fragment::None {
                continue;
            }
            let ok = transport_checksum_ok(p.data(), &p.meta);
            self.checked += 1;
            if !ok {
                self.bad += 1;
            }
            match self.phase {
                Phase::Enforce if !ok => p.drop_by(stage, ParseError::BadL4Checksum.name()),
                Phase::Sampling if self.checked >= AUTO_SAMPLE => {
                    self.phase = if self.bad * AUTO_BAD_SHARE < self.checked {
                        Phase::Enforce
                    } else {
                        Phase::Offloaded
                    };
                    if self.phase == Phase::Offloaded {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Counters: packets checked, how many failed, and whether `auto` found
    /// the checksums offloaded (1) and stopped checking.
    pub fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        if self.checked > 0 {
            out.push(("stream_checksums_checked", self.checked));
            out.push(("stream_checksums_bad", self.bad));
            out.push((
                "stream_checksums_offloaded",
                (self.phase == Phase::Offloaded) as u64,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_packet::{PacketPool, Verdict};
    use sluice_wire::build::tcp_v4;
    use sluice_wire::parse::parse_frame;

    fn frame(good: bool) -> Vec<u8> {
        let mut f = tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 80, 1, 1, 0x18, b"data");
        if !good {
            let n = f.len();
            f[n - 1] ^= 0xff;
        }
        f
    }

    /// Runs `goods` (true: a valid checksum) as batches of 32; returns which
    /// packets were dropped.
    fn run(c: &mut StreamChecksums, goods: &[bool]) -> Vec<bool> {
        let mut pool = PacketPool::new(64);
        let mut out = Vec::new();
        for chunk in goods.chunks(32) {
            let mut b = Batch::with_capacity(chunk.len());
            for &g in chunk {
                b.push_frame(&mut pool, &frame(g), 1, 0);
            }
            for p in &mut b.pkts {
                p.meta = parse_frame(p.data()).unwrap();
            }
            c.apply(&mut b, 9);
            out.extend(b.pkts.iter().map(|p| p.verdict != Verdict::Forward));
            b.recycle(&mut pool);
        }
        out
    }

    #[test]
    fn ipv4_drops_every_bad_tcp_checksum() {
        let mut c = StreamChecksums::new(VerifyChecksums::Ipv4);
        assert_eq!(run(&mut c, &[true, false, true]), vec![false, true, false]);
    }

    #[test]
    fn none_and_all_leave_it_to_the_parse() {
        for s in [VerifyChecksums::None, VerifyChecksums::All] {
            let mut c = StreamChecksums::new(s);
            assert_eq!(run(&mut c, &[false, false]), vec![false, false]);
        }
    }

    #[test]
    fn auto_enforces_after_a_clean_sample_and_stops_after_a_dirty_one() {
        // A clean capture: 1 bad in 1000 sampled, not dropped while sampling;
        // the next bad one is.
        let mut goods = vec![true; AUTO_SAMPLE as usize];
        goods[10] = false;
        goods.extend([false, true]);
        let mut c = StreamChecksums::new(VerifyChecksums::Auto);
        let d = run(&mut c, &goods);
        assert!(!d[10], "not dropped while sampling");
        assert_eq!(&d[AUTO_SAMPLE as usize..], &[true, false]);

        // An offloaded capture: every packet of one direction is bad.
        let goods: Vec<bool> = (0..AUTO_SAMPLE + 10).map(|i| i % 2 == 0).collect();
        let mut c = StreamChecksums::new(VerifyChecksums::Auto);
        assert!(run(&mut c, &goods).iter().all(|d| !d));
        let mut v = Vec::new();
        c.counters(&mut v);
        assert!(v.contains(&("stream_checksums_offloaded", 1)), "{v:?}");
    }
}
