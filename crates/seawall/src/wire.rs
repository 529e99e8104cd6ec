//! What Seawall adds to the fabric, byte for byte.
//!
//! * **The sequence option.** Every datagram a rate-controlled port sends to
//!   another host carries a Geneve option (RFC 8926 §3.5) of Sluice's class,
//!   type [`OPTION_SEQ`], with the sending port and a sequence number counted
//!   per (port, destination host). The type's high bit is clear: a receiver
//!   that does not know it (a kernel `geneve` device, an older agent) ignores
//!   it. Data: port (u16), reserved (u16, zero), sequence (u32), big-endian.
//! * **Feedback.** The receiving host answers, once per period, with a Geneve
//!   control message (the O bit set, RFC 8926 §3.4; VNI 0; protocol
//!   [`FEEDBACK_PROTOCOL`], the IEEE local experimental EtherType) whose payload
//!   is a version byte, a reserved byte, an entry count (u16) and that many
//!   16-byte [`Report`]s: port (u16), reserved (u16), packets received (u32),
//!   packets lost (u32), next expected sequence (u32). Counts are cumulative
//!   and wrap, so a lost feedback message loses nothing but time.

/// Geneve option type of the sequence option (class `0xff53`, Sluice's).
pub const OPTION_SEQ: u8 = 0x02;
/// Bytes of the sequence option's data.
pub const OPTION_SEQ_DATA_LEN: usize = 8;
/// Bytes of the whole sequence option (4-byte option header plus data).
pub const OPTION_SEQ_LEN: usize = 4 + OPTION_SEQ_DATA_LEN;
/// Geneve protocol type of feedback messages (IEEE 802 local experimental).
pub const FEEDBACK_PROTOCOL: u16 = 0x88b5;
/// Version of the feedback payload.
pub const FEEDBACK_VERSION: u8 = 1;
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

/// The sequence option's data for `port`'s packet number `seq`.
pub fn seq_option_data(port: u16, seq: u32) -> [u8; OPTION_SEQ_DATA_LEN] {
    let mut d = [0u8; OPTION_SEQ_DATA_LEN];
    d[..2].copy_from_slice(&port.to_be_bytes());
    d[4..].copy_from_slice(&seq.to_be_bytes());
    d
}

/// Reads the sequence option's data: (port, sequence); `None` if it is not 8 bytes.
pub fn parse_seq_option(data: &[u8]) -> Option<(u16, u32)> {
    if data.len() != OPTION_SEQ_DATA_LEN {
        return None;
    }
    Some((
        u16::from_be_bytes([data[0], data[1]]),
        u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
    ))
}

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
/// the rest are ignored) to `out`; returns its length.
pub fn encode_feedback(reports: &[Report], out: &mut Vec<u8>) -> usize {
    let reports = &reports[..reports.len().min(MAX_REPORTS)];
    let start = out.len();
    // Geneve: version 0, no options, O bit, protocol, VNI 0.
    out.extend_from_slice(&[0, 0x80]);
    out.extend_from_slice(&FEEDBACK_PROTOCOL.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&[FEEDBACK_VERSION, 0]);
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
    Ok(Reports { body })
}

/// The reports of a checked feedback message.
#[derive(Debug, Clone)]
pub struct Reports<'a> {
    body: &'a [u8],
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
            })
            .collect();
        let mut buf = vec![9, 9];
        let n = encode_feedback(&reports, &mut buf);
        assert_eq!(n, FEEDBACK_HEADER_LEN + MAX_REPORTS * REPORT_LEN);
        let got: Vec<Report> = decode_feedback(&buf[2..]).unwrap().collect();
        assert_eq!(got, reports[..MAX_REPORTS]);
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

    #[test]
    fn seq_option_round_trips() {
        let d = seq_option_data(0xbeef, 0x0102_0304);
        assert_eq!(parse_seq_option(&d), Some((0xbeef, 0x0102_0304)));
        assert_eq!(parse_seq_option(&d[..7]), None);
    }
}
