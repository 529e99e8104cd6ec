//! `ssh.proto` and `ssh.software` on `ssh` rules: the parts of each
//! peer's identification string (`SSH-2.0-OpenSSH_9.6p1 Debian` gives `2.0`
//! and `OpenSSH_9.6p1`, RFC 4253 §4.2), inspected on the packet that
//! brings it, the first bytes of its direction on a flow detected as SSH
//! ([`crate::applayer`]). Suricata's `ssh_proto` and `ssh_software` are
//! the same buffers. A string cut across segments is not read (the RFC
//! bounds it at 255 bytes; peers send it in one), and no state is kept.
//!
//! `app-layer-event:ssh.invalid_banner` and `ssh.long_banner` are decided
//! from the same bytes as Suricata 7.0.10's SSH parser decides them
//! ([`banner_events`]). Suricata keeps them on the flow's one transaction,
//! so a rule on one alerts once in each direction: here on the packet that
//! brings the banner (or releases it, [`sluice_nf::StreamChunk::peer`]) and
//! on the other direction's next packet, the event and the directions that
//! saw it kept in the flow's record ([`crate::engine::FlowState::ssh_ev`],
//! 4 bits). An invalid banner stops Suricata's parsing of the flow: a later
//! banner raises nothing. `ssh.invalid_record` (the records after the
//! banners, tracked across segments) is not decided: its rules are skipped.

use sluice_nf::{Event, Packet};

use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::{inspect, Ips};

impl Ips {
    /// A direction's first stream bytes `data` on an SSH flow: the rules on
    /// its identification string's parts. Returns true if the packet must
    /// be dropped.
    ///
    /// `x` is the direction the packet travels (not `d` when it releases
    /// the other direction's bytes): its packets see the banner's events
    /// first.
    pub(crate) fn ssh_ident(
        &mut self,
        st: &mut FlowState,
        (d, x, hdr): (usize, usize, &Header),
        p: &Packet,
        events: &mut Vec<Event>,
        data: &[u8],
    ) -> bool {
        if st.app != crate::applayer::SSH {
            return false;
        }
        if !self.engine.ssh_ev.is_empty() && raised(st.ssh_ev) & INVALID_BANNER == 0 {
            if let Some(ev) = banner_events(data) {
                if ev != 0 {
                    self.counters.ssh_banner_events += 1;
                }
                let phdr = Header {
                    to_server: x == 0,
                    flow: p.meta.flow,
                    ..*hdr
                };
                if self.ssh_event_packet(st, (x, ev), &phdr, p, events) {
                    return true;
                }
                if st.flags & (BLOCKED | PASSED) != 0 {
                    return false;
                }
            }
        }
        if self.engine.ssh_ids.is_empty() {
            return false;
        }
        let Some((proto, software)) = crate::applayer::ssh_id(data) else {
            return false;
        };
        let mut drop = false;
        for i in 0..self.engine.ssh_ids.len() {
            let rule = self.engine.ssh_ids[i];
            if self.has_fired(rule) || !self.engine.header_matches(rule, hdr) {
                continue;
            }
            let r = &self.engine.rules[rule as usize];
            let ok = r.ssh.iter().all(|(sw, items)| {
                let buf = if *sw { software } else { proto };
                inspect::inspect_items(r, items, buf, 0)
            });
            if !ok {
                continue;
            }
            drop |= self.fire(rule, st, (d, p, Some("ssh")), events);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        drop
    }
}

/// [`crate::rules::Rule::ssh_events`]: `ssh.invalid_banner`.
pub const INVALID_BANNER: u8 = 1;
/// `ssh.long_banner`.
pub const LONG_BANNER: u8 = 2;

/// The bit of the event `name` (after `ssh.`) decided here.
pub fn event_bit(name: &str) -> Option<u8> {
    match name {
        "invalid_banner" => Some(INVALID_BANNER),
        "long_banner" => Some(LONG_BANNER),
        _ => None,
    }
}

/// Suricata's `SSH_MAX_BANNER_LEN`: a banner line this long or longer is
/// `long_banner`, and so are this many bytes without a line end.
const MAX_BANNER: usize = 256;

/// The banner events ([`INVALID_BANNER`], [`LONG_BANNER`]) of a direction's
/// first stream bytes `data`, as Suricata 7.0.10's SSH parser raises them
/// (rust/src/ssh/ssh.rs `parse_banner`; checked on captures): the line
/// ends at the first LF or CR (a CR last waits for the next byte), and must
/// be `SSH-`, a version of at least one byte, `-`; a valid line of 256
/// bytes or more is long. Without a line end, 256 bytes or more are long
/// if they start a valid banner, else invalid; fewer decide nothing yet
/// (`None`: Suricata waits for more, which is not followed here).
pub fn banner_events(data: &[u8]) -> Option<u8> {
    let end = data.iter().position(|&b| b == b'\n' || b == b'\r');
    match end {
        Some(i) if data[i] == b'\n' || i + 1 < data.len() => {
            let line = &data[..i];
            Some(if !banner_ok(line) {
                INVALID_BANNER
            } else if line.len() >= MAX_BANNER {
                LONG_BANNER
            } else {
                0
            })
        }
        _ if data.len() < MAX_BANNER => None,
        _ if banner_ok(data) => Some(LONG_BANNER),
        _ => Some(INVALID_BANNER),
    }
}

/// `SSH-`, then at least one byte before a `-` (nom's `is_not("-")` and
/// `char('-')`; the software version may be empty).
fn banner_ok(l: &[u8]) -> bool {
    l.strip_prefix(b"SSH-")
        .and_then(|r| memchr::memchr(b'-', r))
        .is_some_and(|i| i > 0)
}

/// The events raised on a flow, from its [`FlowState::ssh_ev`] bits
/// (event `k` seen by direction `x`: bit `2k + x`).
fn raised(ev: u8) -> u8 {
    (0..2).fold(0, |m, k| {
        if ev >> (2 * k) & 3 != 0 {
            m | 1 << k
        } else {
            m
        }
    })
}

/// The events a packet of direction `x` saw.
fn seen(ev: u8, x: usize) -> u8 {
    (0..2).fold(0, |m, k| m | (ev >> (2 * k + x) & 1) << k)
}

/// `ev` with the events `mask` marked seen by direction `x`.
fn mark(ev: u8, mask: u8, x: usize) -> u8 {
    (0..2).fold(ev, |e, k| {
        if mask >> k & 1 != 0 {
            e | 1 << (2 * k + x)
        } else {
            e
        }
    })
}

impl Ips {
    /// A packet of direction `x` on an SSH flow, `fresh` the events its
    /// bytes raise: the rules on the flow's events fire if it is the
    /// first packet of its direction to see them. Returns true if the
    /// packet must be dropped.
    pub(crate) fn ssh_event_packet(
        &mut self,
        st: &mut FlowState,
        (x, fresh): (usize, u8),
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        if self.engine.ssh_ev.is_empty() || st.app != crate::applayer::SSH {
            return false;
        }
        let all = raised(st.ssh_ev) | fresh;
        let saw = seen(st.ssh_ev, x);
        if all & !saw == 0 {
            return false;
        }
        st.ssh_ev = mark(st.ssh_ev, all, x);
        let mut drop = false;
        for i in 0..self.engine.ssh_ev.len() {
            let rule = self.engine.ssh_ev[i];
            let mask = self.engine.rules[rule as usize].ssh_events;
            if all & mask != mask
                || saw & mask == mask
                || self.has_fired(rule)
                || !self.engine.header_matches(rule, hdr)
            {
                continue;
            }
            drop |= self.fire(rule, st, (x, p, Some("ssh")), events);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        drop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banners_as_suricata_reads_them() {
        let long = |n: usize| [b"SSH-2.0-".as_slice(), &vec![b'C'; n]].concat();
        assert_eq!(banner_events(b"SSH-2.0-OpenSSH_9.2p1\r\n"), Some(0));
        assert_eq!(banner_events(b"SSH-2.0-OpenSSH_9.2p1 Debian\n"), Some(0));
        assert_eq!(banner_events(b"SSH-2.0-\r\n"), Some(0), "empty software");
        assert_eq!(banner_events(b"SSH-2.0\r\n"), Some(INVALID_BANNER));
        assert_eq!(banner_events(b"SSH-\r\n"), Some(INVALID_BANNER));
        assert_eq!(banner_events(b"SSH--x\r\n"), Some(INVALID_BANNER));
        // A lone CR ends the line.
        assert_eq!(banner_events(b"SSH-2.0-x\rmore\r\n"), Some(0));
        assert_eq!(banner_events(b"SSH-2.0\rx-y\r\n"), Some(INVALID_BANNER));
        // 254 and 256 bytes before the line end (measured: the first
        // raises nothing, the second long_banner).
        assert_eq!(
            banner_events(&[long(246), b"\r\n".to_vec()].concat()),
            Some(0)
        );
        assert_eq!(
            banner_events(&[long(248), b"\r\n".to_vec()].concat()),
            Some(LONG_BANNER)
        );
        // No line end: undecided under 256 bytes; a CR last waits.
        assert_eq!(banner_events(b"SSH-2.0-x"), None);
        assert_eq!(banner_events(b"SSH-2.0-x\r"), None);
        assert_eq!(banner_events(&long(300)), Some(LONG_BANNER));
        assert_eq!(
            banner_events(&[long(300), b"\r".to_vec()].concat()),
            Some(LONG_BANNER)
        );
        assert_eq!(
            banner_events(&[b"SSH-2.0".as_slice(), &[b'x'; 300]].concat()),
            Some(INVALID_BANNER)
        );
    }

    #[test]
    fn each_direction_sees_an_event_once() {
        let mut ev = 0;
        assert_eq!(raised(ev), 0);
        ev = mark(ev, LONG_BANNER, 1);
        assert_eq!(raised(ev), LONG_BANNER);
        assert_eq!(seen(ev, 1), LONG_BANNER);
        assert_eq!(seen(ev, 0), 0);
        ev = mark(ev, INVALID_BANNER | LONG_BANNER, 0);
        assert_eq!(raised(ev), INVALID_BANNER | LONG_BANNER);
        assert_eq!(seen(ev, 0), INVALID_BANNER | LONG_BANNER);
        assert_eq!(seen(ev, 1), LONG_BANNER);
        assert!(ev < 16, "fits the record's half byte");
    }
}
