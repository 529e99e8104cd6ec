//! What Seawall adds to the fabric, byte for byte.
//!
//! * **The sequence option.** Every datagram a rate-controlled port sends to
//!   another host carries a Geneve option (RFC 8926 §3.5) of Sluice's class,
//!   type [`OPTION_SEQ`], with the sending port, a sequence number counted
//!   per (port, destination host) and the time it was sent. The type's high
//!   bit is clear: a receiver that does not know it (a kernel `geneve` device,
//!   an older agent) ignores it. Data: port (u16), reserved (u16, zero),
//!   sequence (u32), send time (u32, microseconds of the sender's clock,
//!   wrapping), big-endian. The tunnel code writes and reads it
//!   (`sluice_switch::tunnel::fabric_header`).
//! * **Feedback.** The receiving host answers, once per period, with a Geneve
//!   control message (the O bit set, RFC 8926 §3.4; VNI 0; protocol
//!   [`FEEDBACK_PROTOCOL`], the IEEE local experimental EtherType) whose payload
//!   is a version byte, a flags byte, an entry count (u16) and that many
//!   16-byte [`Report`]s: port (u16), reserved (u16), packets received (u32),
//!   packets lost (u32), next expected sequence (u32). Counts are cumulative
//!   and wrap, so a lost feedback message loses nothing but time. Flag
//!   [`FLAG_CONGESTED`]: packets of *some* sender to this host were lost in the
//!   period, so the path into it is congested for every sender that uses it
//!   (Seawall's per-link signal: each VM's share of a link follows the link's
//!   congestion, not only its own packets' luck in a drop-tail queue).

/// Geneve option type of the sequence option (class `0xff53`, Sluice's).
pub const OPTION_SEQ: u8 = 0x02;
/// Bytes of the sequence option's data.
pub const OPTION_SEQ_DATA_LEN: usize = 12;
/// Geneve protocol type of feedback messages (IEEE 802 local experimental).
pub const FEEDBACK_PROTOCOL: u16 = 0x88b5;
/// Version of the feedback payload.
pub const FEEDBACK_VERSION: u8 = 1;
/// Feedback flag: some sender's packets to the reporting host were lost in the
/// period.
pub const FLAG_CONGESTED: u8 = 0x01;
/// Bytes of one report in a feedback message.
pub const REPORT_LEN: usize = 16;
/// Reports per feedback message (keeps a message under 4.2 KB, inside any
/// fabric MTU the agents use with room to spare... and under a jumbo frame).
pub const MAX_REPORTS: usize = 256;
/// Geneve header (8) plus the feedback payload's own header (4).
pub const FEEDBACK_HEADER_LEN: usize = 12;

/// What a receiving host reports about one sending port's packets to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The sending port (on the host the report goes to).
    pub port: u16,
    /// Packets received so far (wrapping).
    pub received: u32,
    /// Packets found missing so far (wrapping).
    pub lost: u32,
    /// The next sequence number expected.
    pub next_seq: u32,
    /// The message said the path into the reporting host was congested in the
    /// period ([`FLAG_CONGESTED`]).
    pub congested: bool,
}

/// Why a feedback message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedbackError {
    /// Shorter than its headers or than its count of reports says.
    Truncated,
    /// Not a Geneve control message of the feedback protocol.
    NotFeedback,
    /// A payload version this agent does not know.
    Version(u8),
}

impl std::fmt::Display for FeedbackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FeedbackError::Truncated => write!(f, "feedback message shorter than it says"),
            FeedbackError::NotFeedback => write!(f, "not a Seawall feedback message"),
            FeedbackError::Version(v) => write!(f, "feedback version {v} is not known"),
        }
    }
}

impl std::error::Error for FeedbackError {}

/// True if `datagram` (a UDP payload) is a Geneve control message of the
/// feedback protocol: what the receive path checks before treating a datagram
/// as a tunnelled frame.
pub fn is_feedback(datagram: &[u8]) -> bool {
    datagram.len() >= 8
        && datagram[0] >> 6 == 0
        && datagram[1] & 0x80 != 0
        && u16::from_be_bytes([datagram[2], datagram[3]]) == FEEDBACK_PROTOCOL
}

/// Appends one feedback message carrying `reports` (at most [`MAX_REPORTS`];
/// the rest are ignored) to `out`; returns its length. The message is flagged
/// congested if any report is.
pub fn encode_feedback(reports: &[Report], out: &mut Vec<u8>) -> usize {
    let reports = &reports[..reports.len().min(MAX_REPORTS)];
    let start = out.len();
    // Geneve: version 0, no options, O bit, protocol, VNI 0.
    out.extend_from_slice(&[0, 0x80]);
    out.extend_from_slice(&FEEDBACK_PROTOCOL.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    let congested = reports.iter().any(|r| r.congested);
    out.extend_from_slice(&[FEEDBACK_VERSION, u8::from(congested) * FLAG_CONGESTED]);
    out.extend_from_slice(&(reports.len() as u16).to_be_bytes());
    for r in reports {
        out.extend_from_slice(&r.port.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&r.received.to_be_bytes());
        out.extend_from_slice(&r.lost.to_be_bytes());
        out.extend_from_slice(&r.next_seq.to_be_bytes());
    }
    out.len() - start
}

/// The reports of a feedback message, checked whole before any is returned.
pub fn decode_feedback(datagram: &[u8]) -> Result<Reports<'_>, FeedbackError> {
    if !is_feedback(datagram) {
        return Err(FeedbackError::NotFeedback);
    }
    // Skip any Geneve options the sender put in (none today).
    let header = 8 + 4 * (datagram[0] & 0x3f) as usize;
    let p = datagram.get(header..).ok_or(FeedbackError::Truncated)?;
    if p.len() < 4 {
        return Err(FeedbackError::Truncated);
    }
    if p[0] != FEEDBACK_VERSION {
        return Err(FeedbackError::Version(p[0]));
    }
    let n = u16::from_be_bytes([p[2], p[3]]) as usize;
    let body = p[4..]
        .get(..n * REPORT_LEN)
        .ok_or(FeedbackError::Truncated)?;
    Ok(Reports {
        body,
        congested: p[1] & FLAG_CONGESTED != 0,
    })
}

/// The reports of a checked feedback message.
#[derive(Debug, Clone)]
pub struct Reports<'a> {
    body: &'a [u8],
    congested: bool,
}

impl Reports<'_> {
    /// Whether the message says the path was congested.
    pub fn congested(&self) -> bool {
        self.congested
    }
}

impl Iterator for Reports<'_> {
    type Item = Report;

    fn next(&mut self) -> Option<Report> {
        let (r, rest) = self.body.split_at_checked(REPORT_LEN)?;
        self.body = rest;
        let u32_at = |i: usize| u32::from_be_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
        Some(Report {
            port: u16::from_be_bytes([r[0], r[1]]),
            received: u32_at(4),
            lost: u32_at(8),
            next_seq: u32_at(12),
            congested: self.congested,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_round_trips() {
        let reports: Vec<Report> = (0..300u32)
            .map(|i| Report {
                port: i as u16,
                received: i * 7,
                lost: i,
                next_seq: u32::MAX - i,
                congested: i == 3,
            })
            .collect();
        let mut buf = vec![9, 9];
        let n = encode_feedback(&reports, &mut buf);
        assert_eq!(n, FEEDBACK_HEADER_LEN + MAX_REPORTS * REPORT_LEN);
        let got: Vec<Report> = decode_feedback(&buf[2..]).unwrap().collect();
        // One flag for the message: every report carries it.
        assert!(got.iter().all(|r| r.congested));
        let plain: Vec<Report> = reports[..MAX_REPORTS]
            .iter()
            .map(|r| Report {
                congested: true,
                ..*r
            })
            .collect();
        assert_eq!(got, plain);
    }

    #[test]
    fn bad_feedback_is_refused_whole() {
        let mut buf = Vec::new();
        encode_feedback(
            &[Report {
                port: 1,
                received: 2,
                lost: 3,
                next_seq: 4,
                congested: false,
            }],
            &mut buf,
        );
        for cut in 0..buf.len() {
            assert!(decode_feedback(&buf[..cut]).is_err(), "cut at {cut}");
        }
        let mut v = buf.clone();
        v[8] = 2;
        assert_eq!(decode_feedback(&v).unwrap_err(), FeedbackError::Version(2));
        let mut tunnelled = buf.clone();
        tunnelled[1] = 0; // no O bit: a tunnelled frame, not feedback
        assert_eq!(
            decode_feedback(&tunnelled).unwrap_err(),
            FeedbackError::NotFeedback
        );
    }
}
