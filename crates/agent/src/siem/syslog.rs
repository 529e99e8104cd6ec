//! RFC 5424 syslog messages for EVE events, and their framing on TCP
//! (RFC 6587 octet counting). Pure functions: the forwarder sends the bytes.
//!
//! Written here rather than taken from a crate: what is needed is one
//! formatter of ~50 lines; the `syslog` crate frames TCP messages with a
//! trailing newline (which a JSON message may not survive in every
//! receiver) rather than octet counting, and owns its sockets, where the
//! forwarder needs its own timeouts, reconnects and loss counting.

use std::fmt::Write;

/// `local0`: the facility of every message (SIEMs route on it).
pub const FACILITY: u8 = 16;

/// The APP-NAME field.
pub const APP_NAME: &str = "sluice";

/// What the message says of one EVE event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head<'a> {
    /// `event_type` (`alert`, `flow`, `anomaly`, ...), the MSGID.
    pub event_type: &'a str,
    /// An alert's `alert.severity` (1 is the most severe), if any.
    pub alert_severity: Option<u64>,
    /// The event's `timestamp` as EVE writes it.
    pub timestamp: Option<&'a str>,
}

/// The syslog severity of an event: alerts by their EVE severity (1
/// critical, 2 error, 3 warning, lower notice), anomalies warning, the
/// rest (flow records) informational.
pub fn severity(h: &Head<'_>) -> u8 {
    match (h.event_type, h.alert_severity) {
        ("alert", Some(1)) => 2,
        ("alert", Some(2)) => 3,
        ("alert", Some(3)) => 4,
        ("alert", _) => 5,
        ("anomaly", _) => 4,
        _ => 6,
    }
}

/// EVE's `2026-11-28T09:26:18.774022+0000` as RFC 5424's TIMESTAMP
/// (`...+00:00`, `Z` for UTC); `-` (no value) if it is not of that shape.
pub fn timestamp(eve: &str) -> String {
    let b = eve.as_bytes();
    let shaped = b.len() >= 24
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && eve.is_ascii()
        && matches!(b[b.len() - 5], b'+' | b'-')
        && b[b.len() - 4..].iter().all(u8::is_ascii_digit);
    if !shaped {
        return "-".into();
    }
    let (time, zone) = eve.split_at(eve.len() - 5);
    if &zone[1..] == "0000" {
        format!("{time}Z")
    } else {
        format!("{time}{}:{}", &zone[..3], &zone[3..])
    }
}

/// Replaces what RFC 5424's header fields may not hold (outside `!`..`~`)
/// with `_`, cut to `max` bytes; `-` if empty.
fn field(s: &str, max: usize) -> String {
    let f: String = s
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .take(max)
        .collect();
    if f.is_empty() {
        "-".into()
    } else {
        f
    }
}

/// Appends one RFC 5424 message to `out`: `<PRI>1 TIMESTAMP HOSTNAME sluice -
/// EVENT_TYPE - MSG`, MSG being the EVE line (JSON, no BOM: MSG-ANY).
pub fn format(out: &mut Vec<u8>, host: &str, h: &Head<'_>, msg: &str) {
    let mut s = String::with_capacity(64 + msg.len());
    let pri = u16::from(FACILITY) * 8 + u16::from(severity(h));
    let ts = h.timestamp.map_or_else(|| "-".to_string(), timestamp);
    let _ = write!(
        s,
        "<{pri}>1 {ts} {} {APP_NAME} - {} - {msg}",
        field(host, 255),
        field(h.event_type, 32)
    );
    out.extend_from_slice(s.as_bytes());
}

/// Appends `msg` framed for a TCP stream: `LEN SP MSG` (RFC 6587 §3.4.1).
pub fn frame_tcp(out: &mut Vec<u8>, msg: &[u8]) {
    out.extend_from_slice(msg.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_becomes_one_rfc5424_message_with_its_severity() {
        let line = r#"{"event_type":"alert","alert":{"severity":1}}"#;
        let h = Head {
            event_type: "alert",
            alert_severity: Some(1),
            timestamp: Some("2026-11-28T09:26:18.774022+0000"),
        };
        let mut out = Vec::new();
        format(&mut out, "compute 1", &h, line);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("<130>1 2026-11-28T09:26:18.774022Z compute_1 sluice - alert - {line}")
        );
        // local0 (16): alert 2 is err, a flow record informational.
        let sev = |t, s| {
            severity(&Head {
                event_type: t,
                alert_severity: s,
                timestamp: None,
            })
        };
        assert_eq!(
            [
                sev("alert", Some(2)),
                sev("alert", Some(3)),
                sev("alert", Some(4)),
                sev("alert", None),
                sev("anomaly", None),
                sev("flow", None)
            ],
            [3, 4, 5, 5, 4, 6]
        );
    }

    #[test]
    fn timestamps_are_rfc3339_or_absent() {
        assert_eq!(
            timestamp("2026-11-28T09:26:18.774022+0130"),
            "2026-11-28T09:26:18.774022+01:30"
        );
        assert_eq!(
            timestamp("2026-11-28T09:26:18.774022-0500"),
            "2026-11-28T09:26:18.774022-05:00"
        );
        for bad in [
            "",
            "yesterday",
            "2026-11-28T09:26:18+0000",
            "2026-11-28T09:26:18.774022+00:00x",
        ] {
            assert_eq!(timestamp(bad), "-", "{bad}");
        }
        let mut out = Vec::new();
        let h = Head {
            event_type: "",
            alert_severity: None,
            timestamp: None,
        };
        format(&mut out, "", &h, "{}");
        assert_eq!(out, b"<134>1 - - sluice - - - {}");
    }

    #[test]
    fn tcp_frames_count_octets() {
        let mut out = Vec::new();
        frame_tcp(&mut out, "<134>1 - h sluice - flow - {\"é\":1}".as_bytes());
        frame_tcp(&mut out, b"x");
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("35 <134>1"), "{text}");
        assert!(text.ends_with("1 x"));
    }
}
