//! HTTP decoder events a rule can ask for with `app-layer-event:http.NAME`,
//! raised as Suricata's HTTP parser (libhtp) raises them. Each is decided
//! from the message's start line and header lines as sent
//! ([`super::Buf::StartRaw`], which no keyword names), so the keyword is an
//! item of that buffer's list and needs no state of its own.
//!
//! Only the events ET Open's rules use are known; a rule naming another is
//! skipped with the event's name as the reason, rather than never matching.

/// An HTTP decoder event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `http.invalid_transfer_encoding_value_in_request`: a request with a
    /// `Transfer-Encoding` field whose value has no `chunked` token, or with
    /// `chunked` under a protocol before HTTP/1.1 (libhtp's
    /// `HTP_REQUEST_INVALID_T_E`). Request smuggling (CVE-2023-46747's AJP
    /// smuggling, CVE-2023-41265's tunnelling) sends such values so that a
    /// front end and a back end frame the body differently.
    InvalidTeInRequest,
}

impl Event {
    /// The event `app-layer-event` names (`http.` and the event), if known.
    pub fn parse(name: &str) -> Option<Event> {
        match name.strip_prefix("http.")? {
            "invalid_transfer_encoding_value_in_request" => Some(Event::InvalidTeInRequest),
            _ => None,
        }
    }

    /// True if the message whose start line and header lines (as sent) are
    /// `start` raises the event.
    pub fn raised(&self, start: &[u8]) -> bool {
        match self {
            Event::InvalidTeInRequest => invalid_te_in_request(start),
        }
    }
}

/// libhtp's `htp_is_space`.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

/// The lines of `b`, without their `\r\n` or `\n`.
fn lines(b: &[u8]) -> impl Iterator<Item = &[u8]> {
    b.split(|&c| c == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// True if `start` is a request's whose `Transfer-Encoding` (its fields
/// joined with `, ` as libhtp joins repeated fields) has no `chunked` token,
/// or has one under a protocol before HTTP/1.1.
fn invalid_te_in_request(start: &[u8]) -> bool {
    let mut ls = lines(start);
    let Some(line) = ls.next() else {
        return false;
    };
    // A response starts with its protocol; a request ends with it.
    if line.starts_with(b"HTTP/") {
        return false;
    }
    let proto = line
        .rsplit(|&c| c == b' ' || c == b'\t')
        .find(|t| !t.is_empty())
        .unwrap_or(b"");
    let mut te: Vec<u8> = Vec::new();
    let mut seen = false;
    let mut in_te = false;
    for l in ls {
        if l.is_empty() {
            break;
        }
        if matches!(l[0], b' ' | b'\t') {
            // A folded line continues the field before it.
            if in_te {
                te.push(b' ');
                te.extend_from_slice(l.trim_ascii());
            }
            continue;
        }
        let Some(colon) = l.iter().position(|&c| c == b':') else {
            in_te = false;
            continue;
        };
        in_te = l[..colon]
            .trim_ascii()
            .eq_ignore_ascii_case(b"transfer-encoding");
        if in_te {
            if seen {
                te.extend_from_slice(b", ");
            }
            seen = true;
            te.extend_from_slice(l[colon + 1..].trim_ascii());
        }
    }
    if !seen {
        return false;
    }
    !has_token(&te, b"chunked") || protocol_before_1_1(proto)
}

/// libhtp's `htp_header_has_token`: `value` (lowercase) is one of the
/// comma-separated tokens of `h`, compared without case, spaces before and
/// after a token allowed.
fn has_token(h: &[u8], value: &[u8]) -> bool {
    // 0: in a token's first bytes; 1: skipping the rest of a token; 2: the
    // token matched, only spaces may follow before a comma.
    let (mut state, mut at) = (0, 0);
    for &c in h {
        match state {
            0 => {
                if at == 0 && is_space(c) {
                    continue;
                }
                if c.to_ascii_lowercase() == value[at] {
                    at += 1;
                    if at == value.len() {
                        state = 2;
                    }
                } else {
                    state = 1;
                }
            }
            1 => {
                if c == b',' {
                    state = 0;
                    at = 0;
                }
            }
            _ => {
                if c == b',' {
                    return true;
                }
                if !is_space(c) {
                    state = 1;
                }
            }
        }
    }
    state == 2
}

/// True unless `proto` names HTTP/1.1 or later (`HTTP/0.9`, `HTTP/1.0`, a
/// missing or malformed protocol: libhtp's numbers below `HTP_PROTOCOL_1_1`).
fn protocol_before_1_1(proto: &[u8]) -> bool {
    let Some(v) = proto.strip_prefix(b"HTTP/") else {
        return true;
    };
    let mut parts = v.splitn(2, |&c| c == b'.');
    let num = |p: Option<&[u8]>| -> Option<u32> {
        let p = p?;
        if p.is_empty() || !p.iter().all(u8::is_ascii_digit) || p.len() > 3 {
            return None;
        }
        std::str::from_utf8(p).ok()?.parse().ok()
    };
    match (num(parts.next()), num(parts.next())) {
        (Some(major), Some(minor)) => (major, minor) < (1, 1),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(proto: &str, fields: &str) -> Vec<u8> {
        format!("POST /a {proto}\r\nHost: x\r\n{fields}\r\n").into_bytes()
    }

    #[test]
    fn the_transfer_encoding_value_decides() {
        let ev = Event::parse("http.invalid_transfer_encoding_value_in_request").unwrap();
        let raised = |proto: &str, fields: &str| ev.raised(&req(proto, fields));
        // Valid: chunked among the tokens, on HTTP/1.1 or later.
        for f in [
            "Transfer-Encoding: chunked\r\n",
            "transfer-encoding:   CHUNKED  \r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked , gzip\r\n",
            "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
            "Content-Length: 4\r\n",
            "",
        ] {
            assert!(!raised("HTTP/1.1", f), "{f:?}");
        }
        assert!(!raised("HTTP/2.0", "Transfer-Encoding: chunked\r\n"));
        // Invalid: no chunked token (smuggling's favourites), or chunked
        // before HTTP/1.1.
        for f in [
            "Transfer-Encoding: xchunked\r\n",
            "Transfer-Encoding: chunkedx\r\n",
            "Transfer-Encoding: chunked-false\r\n",
            "Transfer-Encoding: identity\r\n",
            "Transfer-Encoding: \r\n",
            "Transfer-Encoding: \"chunked\"\r\n",
            "Transfer-Encoding : chunk\r\n",
        ] {
            assert!(raised("HTTP/1.1", f), "{f:?}");
        }
        assert!(raised("HTTP/1.0", "Transfer-Encoding: chunked\r\n"));
        assert!(raised("HTTP/0.9", "Transfer-Encoding: chunked\r\n"));
        assert!(raised("HTTP/1.x", "Transfer-Encoding: chunked\r\n"));
        // A folded value continues the field.
        assert!(!raised(
            "HTTP/1.1",
            "Transfer-Encoding: gzip,\r\n chunked\r\n"
        ));
        // Responses never raise the request's event.
        let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n";
        assert!(!ev.raised(resp));
        assert!(!ev.raised(b""));
        assert_eq!(Event::parse("http.no_such_event"), None);
        assert_eq!(
            Event::parse("invalid_transfer_encoding_value_in_request"),
            None
        );
    }
}
