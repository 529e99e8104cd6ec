//! `app-layer-event:ftp.request_command_too_long` and
//! `ftp.response_command_too_long` on `ftp` rules: a command or reply line
//! too long for Suricata 7.0.10's FTP parser, whose line buffer holds 4,096
//! bytes (`ftp.max-line-length`'s default).
//!
//! Measured on Scapy captures (IDS replay and `--simulate-ips`; the Scapy
//! test `app-ftp-event-line-too-long` keeps them): a line whose bytes with
//! its line end (LF or CRLF) number 4,096 or more raises the event of its
//! direction, once per line, whether it came in one segment or many; 4,095
//! do not (a 4,093-byte command with CRLF, a 4,094-byte one with LF). A
//! line that never ends raises it too once past the bound. Two long
//! commands raise it twice.
//!
//! Suricata keeps the event on the command's transaction and alerts when
//! the transaction is inspected after the server answered; Sluice fires on
//! the packet whose bytes take the line to the bound (the alert counts
//! agree). The state is the stream position where each direction's
//! current line started, kept in the flow record's pending-unit slot as a
//! unit of kind [`crate::pending::FTP`] without a blob (no store round
//! trip): a line's length is the stream position reached minus it.

use sluice_nf::{Event, Packet};

use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::pending::{Pend, FTP};
use crate::Ips;

/// [`crate::rules::Rule::ftp_events`]: `ftp.request_command_too_long`.
pub const REQUEST_TOO_LONG: u8 = 1;
/// `ftp.response_command_too_long`.
pub const RESPONSE_TOO_LONG: u8 = 2;

/// The bit of the event `name` (after `ftp.`).
pub fn event_bit(name: &str) -> Option<u8> {
    match name {
        "request_command_too_long" => Some(REQUEST_TOO_LONG),
        "response_command_too_long" => Some(RESPONSE_TOO_LONG),
        _ => None,
    }
}

/// Bytes of a line, its line end included, that make it too long.
pub const LINE_LIMIT: u64 = 4096;

/// Follows the lines of a direction through its next stream bytes `data`,
/// `before` bytes of the current line having come earlier. Returns how
/// many lines reached [`LINE_LIMIT`] in these bytes and the bytes of the
/// line still open after them.
pub fn long_lines(before: u64, data: &[u8]) -> (u32, u64) {
    let (mut n, mut open, mut rest) = (0, before, data);
    loop {
        let (line, ended) = match memchr::memchr(b'\n', rest) {
            Some(k) => (k as u64 + 1, true),
            None => (rest.len() as u64, false),
        };
        if open < LINE_LIMIT && open + line >= LINE_LIMIT {
            n += 1;
        }
        if !ended {
            return (n, open + line);
        }
        rest = &rest[line as usize..];
        open = 0;
    }
}

impl Ips {
    /// Direction `d`'s new stream bytes `data` at stream position `base` on
    /// an FTP flow: the rules on a line too long fire for each line these
    /// bytes take to the bound. Returns true if the packet must be dropped.
    pub(crate) fn ftp_stream(
        &mut self,
        st: &mut FlowState,
        (d, hdr): (usize, &Header),
        p: &Packet,
        events: &mut Vec<Event>,
        (data, base): (&[u8], u64),
    ) -> bool {
        if self.engine.ftp_ev.is_empty() || st.app != crate::applayer::FTP || data.is_empty() {
            return false;
        }
        // Without a line followed so far (the flow's first bytes, or after
        // a gap), the line starts with these bytes.
        let before = match st.pend[d] {
            Pend { kind: FTP, end, .. } => u64::from((base as u32).wrapping_sub(end)),
            _ => 0,
        };
        let (n, open) = long_lines(before, data);
        let end = base + data.len() as u64 - open;
        st.pend[d] = Pend {
            kind: FTP,
            len: 0,
            end: end as u32,
        };
        if n == 0 {
            return false;
        }
        self.counters.ftp_long_lines += u64::from(n);
        let bit = if d == 0 {
            REQUEST_TOO_LONG
        } else {
            RESPONSE_TOO_LONG
        };
        let mut drop = false;
        for _ in 0..n {
            for i in 0..self.engine.ftp_ev.len() {
                let rule = self.engine.ftp_ev[i];
                let mask = self.engine.rules[rule as usize].ftp_events;
                if mask & bit != mask || !self.engine.header_matches(rule, hdr) {
                    continue;
                }
                drop |= self.fire(rule, st, (d, p, Some("ftp")), events);
                if st.flags & (BLOCKED | PASSED) != 0 {
                    return drop;
                }
            }
        }
        drop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize, end: &[u8]) -> Vec<u8> {
        let mut l = b"USER ".to_vec();
        l.resize(n, b'a');
        l.extend_from_slice(end);
        l
    }

    #[test]
    fn lines_reaching_the_bound_as_measured() {
        // With its line end, 4,096 bytes or more (measured).
        assert_eq!(long_lines(0, &line(4094, b"\r\n")).0, 1);
        assert_eq!(long_lines(0, &line(4093, b"\r\n")).0, 0);
        assert_eq!(long_lines(0, &line(4095, b"\n")).0, 1);
        assert_eq!(long_lines(0, &line(4094, b"\n")).0, 0);
        assert_eq!(long_lines(0, &line(20_000, b"\r\n")), (1, 0));
        // Never ended: past the bound, once.
        assert_eq!(long_lines(0, &line(6000, b"")), (1, 6000));
        assert_eq!(long_lines(0, &line(4095, b"")), (0, 4095));
        // Two long lines, and short ones around them.
        let two = [
            line(10, b"\r\n"),
            line(5000, b"\r\n"),
            line(5000, b"\n"),
            line(7, b""),
        ]
        .concat();
        assert_eq!(long_lines(0, &two), (2, 7));
    }

    #[test]
    fn a_line_cut_anywhere_counts_once() {
        for total in [4093usize, 4094, 4095, 4096, 9000] {
            let l = line(total, b"\r\n");
            let want = u32::from(l.len() as u64 >= LINE_LIMIT);
            for cut in [1, 100, 1000, 4093, 4094, 4095, 4096, l.len() - 1] {
                let cut = cut.min(l.len() - 1);
                let (a, open) = long_lines(0, &l[..cut]);
                let (b, rest) = long_lines(open, &l[cut..]);
                assert_eq!((a + b, rest), (want, 0), "{total} cut at {cut}");
            }
            // One byte at a time.
            let (mut n, mut open) = (0, 0);
            for b in &l {
                let (k, o) = long_lines(open, std::slice::from_ref(b));
                n += k;
                open = o;
            }
            assert_eq!((n, open), (want, 0), "{total} bytewise");
        }
    }

    #[test]
    fn names() {
        assert_eq!(
            event_bit("request_command_too_long"),
            Some(REQUEST_TOO_LONG)
        );
        assert_eq!(
            event_bit("response_command_too_long"),
            Some(RESPONSE_TOO_LONG)
        );
        assert_eq!(event_bit("request_too_long"), None);
    }
}
