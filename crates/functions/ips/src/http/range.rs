//! `Content-Range` read as Suricata 7.0.10 reads a response's, for the
//! event `http.range_invalid`.
//!
//! Measured against Suricata 7.0.10 on Scapy captures (the Scapy test
//! `app-http-event-range-invalid` keeps them):
//! * The value (repeated fields joined with `, `) is read as spaces, a
//!   unit (anything up to the next space, never checked: `xyz 0-1/10` is
//!   fine), spaces, then either `*/SIZE` or `START-END/SIZE` where START,
//!   END and SIZE are decimal digits fitting an `i64` and SIZE may be `*`.
//!   Whatever follows is ignored (`bytes 0-1/10x` and
//!   `bytes 1-2/3, bytes x` are fine). A value not read so raises the
//!   event: `bytes abc`, `bytes=0-1/10`, `0-1/10`, `bytes\t0-1/10`,
//!   `bytes 0-1`, `bytes -1-2/10`, `bytes 0-1/ 10`, an empty value, a
//!   number past `i64::MAX`.
//! * A value read raises nothing when its end is 0 (`1-0/10`), its size
//!   is unknown or 0 (`5-1/*`, `0-20/0`) or it is `*/SIZE`; otherwise it
//!   raises the event when its start is past its end (`2-1/10`) or its end
//!   is not inside the size (`0-10/10`, `1-1/1`).
//! * Status and unit do not matter (a `200` or `404` response raises it
//!   too), a request's `Content-Range` is not read, and the event is
//!   raised on the response body's first bytes: a response without a
//!   body (`HEAD`, `Content-Length: 0`) raises nothing.

/// True if a response's `Content-Range` value `v` raises
/// `http.range_invalid` (once its body's first bytes come).
pub fn invalid(v: &[u8]) -> bool {
    match parse(v) {
        None => true,
        Some((start, end, size)) => {
            // The forms Suricata takes as "a range with only the total
            // length" or of an unknown size: no range to check.
            end > 0 && size > 0 && start >= 0 && (start > end || end > size - 1)
        }
    }
}

/// (start, end, size) of value `v`, -1 for a `*`; None when it does not
/// read.
fn parse(v: &[u8]) -> Option<(i64, i64, i64)> {
    let spaces = |s: &[u8]| s.iter().take_while(|&&c| c == b' ').count();
    let mut s = &v[spaces(v)..];
    s = &s[s.iter().take_while(|&&c| c != b' ').count()..];
    s = &s[spaces(s)..];
    if let Some(rest) = s.strip_prefix(b"*/") {
        let (size, _) = number(rest)?;
        return Some((-1, -1, size));
    }
    let (start, s) = number(s)?;
    let (end, s) = number(s.strip_prefix(b"-")?)?;
    let s = s.strip_prefix(b"/")?;
    let size = match s.first() {
        Some(b'*') => -1,
        _ => number(s)?.0,
    };
    Some((start, end, size))
}

/// The decimal number `s` starts with (one digit at least, fitting an
/// `i64`) and the bytes after it.
fn number(s: &[u8]) -> Option<(i64, &[u8])> {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let mut v: i64 = 0;
    for &c in &s[..n] {
        v = v.checked_mul(10)?.checked_add(i64::from(c - b'0'))?;
    }
    Some((v, &s[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value measured against Suricata 7.0.10 (a 206 response with
    /// a body, `app-layer-event:http.range_invalid`), with whether it
    /// raised the event.
    #[test]
    fn the_measured_values() {
        let raised: &[&[u8]] = &[
            b"bytes abc",
            b"bytes 5-1/10",
            b"0-1/10",
            b"bytes=0-1/10",
            b"bytes 0-99999999999999999999/10",
            b"bytes 0-10/10",
            b"bytes 0-20/10",
            b"bytes abc, bytes 0-1/10",
            b"bytes -1-2/10",
            b"",
            b"bytes",
            b"bytes 0-1/1",
            b"bytes\t0-1/10",
            b"bytes +1-2/10",
            b"bytes 0-1/-5",
            b"bytes 2-1/10",
            b"bytes 0-5/5",
            b"bytes 1-5/3",
            b"bytes */abc",
            b"bytes *-1/10",
            b"bytes 0-1",
            b"bytes 0 -1/10",
            b"bytes 1-1/1",
            b"bytes 10-20/15",
            b"bytes 20-30/15",
            b"bytes 0-9223372036854775807/10",
            b"bytes 0-9223372036854775808/10",
            b"bytes 3-2/2",
            b"bytes 0-1/-0",
            b"bytes  ",
            b"  bytes abc",
            b"a b c",
            b"bytes 0-1/ 10",
            b"bytes 0- 1/10",
            b"bytes *",
            b"bytes */",
        ];
        let fine: &[&[u8]] = &[
            b"bytes 0-1/2",
            b"bytes 0-1/10",
            b"bytes */10",
            b"bytes 0-1/*",
            b"bytes  0-1/10",
            b"bytes 0-1/10 junk",
            b"bytes 1-1/10",
            b"bytes 0-9/10",
            b"bytes 3-9/10",
            b"bytes 0-1/10, bytes abc",
            b"xyz 0-1/10",
            b"bytes 0-0/10",
            b"bytes 1-0/10",
            b"bytes 0-1/0",
            b"bytes 01-02/10",
            b"BYTES 0-1/10",
            b"bytes 5-1/*",
            b"bytes 5-1/0",
            b"bytes 1-0/*",
            b"bytes 0-20/*",
            b"bytes 0-20/0",
            b"bytes 5-0/10",
            b"bytes 0-0/1",
            b"bytes */0",
            b"bytes 0-1/10x",
            b"bytes 2-1/*",
            b"bytes 0-1/9223372036854775807",
            b"bytes 2-1/0",
            b"bytes 0-0/0",
            b"bytes 1-1/0",
            b"bytes 0-1/10/11",
            b"bytes */10 x",
            b"bytes 1-2/3, bytes x",
        ];
        for v in raised {
            assert!(invalid(v), "{:?} raises it", String::from_utf8_lossy(v));
        }
        for v in fine {
            assert!(
                !invalid(v),
                "{:?} raises nothing",
                String::from_utf8_lossy(v)
            );
        }
    }

    /// Any range written out reads back as its numbers, and raises the
    /// event exactly when the measured rule says.
    #[test]
    fn written_ranges_read_back() {
        let mut rng = crate::testrng::Lcg::new(7);
        for _ in 0..20_000 {
            let (start, end, size) = (
                rng.below(40) as i64,
                rng.below(40) as i64,
                rng.below(40) as i64,
            );
            let v = format!("bytes {start}-{end}/{size}");
            assert_eq!(parse(v.as_bytes()), Some((start, end, size)), "{v}");
            let bad = end > 0 && size > 0 && (start > end || end >= size);
            assert_eq!(invalid(v.as_bytes()), bad, "{v}");
        }
    }
}
