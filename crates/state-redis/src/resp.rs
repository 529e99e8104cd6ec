//! RESP2, the Redis wire protocol, sans-IO: commands are encoded into a buffer and
//! replies parsed out of one, so the client's I/O loop is a thin shell around it.

/// One reply. Bulk strings are ranges into the parse buffer, so reading a value
/// copies it once, into the caller's result arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(std::ops::Range<usize>),
    /// `-ERR ...`.
    Error(std::ops::Range<usize>),
    /// `:42`.
    Int(i64),
    /// `$3\r\nabc` (None for `$-1`).
    Bulk(Option<std::ops::Range<usize>>),
    /// `*2 ...` (None for `*-1`).
    Array(Option<Vec<Reply>>),
}

/// A reply that is not valid RESP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid RESP reply: {0}")]
pub struct ProtocolError(pub &'static str);

/// Appends `*N\r\n$len\r\narg\r\n...` for a command.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_int(out, args.len() as i64);
    for a in args {
        out.push(b'$');
        push_int(out, a.len() as i64);
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends the header of a command of `argc` arguments; follow it with exactly
/// `argc` calls of [`encode_arg`].
pub fn encode_header(out: &mut Vec<u8>, argc: usize) {
    out.push(b'*');
    push_int(out, argc as i64);
}

/// Appends one argument of a command started with [`encode_header`].
pub fn encode_arg(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'$');
    push_int(out, a.len() as i64);
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// Appends a decimal integer followed by CRLF.
fn push_int(out: &mut Vec<u8>, v: i64) {
    let mut b = [0u8; 24];
    let s = fmt_i64(v, &mut b);
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

/// Formats an integer without allocating.
pub fn fmt_i64(v: i64, buf: &mut [u8; 24]) -> &[u8] {
    let mut i = buf.len();
    let neg = v < 0;
    let mut u = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

fn line(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn int(b: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ProtocolError("bad integer"))
}

/// Parses one reply starting at `at`. `Ok(None)` if the buffer does not yet hold it
/// all; otherwise the reply and the offset just after it.
pub fn parse(buf: &[u8], at: usize) -> Result<Option<(Reply, usize)>, ProtocolError> {
    parse_depth(buf, at, 0)
}

fn parse_depth(buf: &[u8], at: usize, depth: u32) -> Result<Option<(Reply, usize)>, ProtocolError> {
    if depth > 8 {
        return Err(ProtocolError("nesting too deep"));
    }
    let Some(&t) = buf.get(at) else {
        return Ok(None);
    };
    let Some(eol) = line(buf, at + 1) else {
        return Ok(None);
    };
    let body = at + 1..eol;
    let next = eol + 2;
    Ok(Some(match t {
        b'+' => (Reply::Simple(body), next),
        b'-' => (Reply::Error(body), next),
        b':' => (Reply::Int(int(&buf[body])?), next),
        b'$' => {
            let n = int(&buf[body])?;
            if n < 0 {
                (Reply::Bulk(None), next)
            } else {
                let n = n as usize;
                if n > 512 * 1024 * 1024 {
                    return Err(ProtocolError("bulk string too long"));
                }
                if buf.len() < next + n + 2 {
                    return Ok(None);
                }
                if &buf[next + n..next + n + 2] != b"\r\n" {
                    return Err(ProtocolError("bulk string not terminated"));
                }
                (Reply::Bulk(Some(next..next + n)), next + n + 2)
            }
        }
        b'*' => {
            let n = int(&buf[body])?;
            if n < 0 {
                (Reply::Array(None), next)
            } else {
                if n > 1 << 20 {
                    return Err(ProtocolError("array too long"));
                }
                let mut items = Vec::with_capacity(n as usize);
                let mut pos = next;
                for _ in 0..n {
                    match parse_depth(buf, pos, depth + 1)? {
                        Some((r, p)) => {
                            items.push(r);
                            pos = p;
                        }
                        None => return Ok(None),
                    }
                }
                (Reply::Array(Some(items)), pos)
            }
        }
        _ => return Err(ProtocolError("unknown reply type")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands() {
        let mut b = Vec::new();
        encode(&mut b, &[b"SET", b"k", b"\x00v"]);
        assert_eq!(b, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n\x00v\r\n");
        let mut n = [0u8; 24];
        assert_eq!(fmt_i64(-120, &mut n), b"-120");
        assert_eq!(fmt_i64(i64::MIN, &mut n), b"-9223372036854775808");
    }

    #[test]
    fn parses_every_type_and_partial_input() {
        let b = b"+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$1\r\nx\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((r, next)) = parse(b, at).unwrap() {
            got.push(r);
            at = next;
        }
        assert_eq!(at, b.len());
        assert_eq!(got[2], Reply::Int(42));
        assert_eq!(got[3], Reply::Bulk(Some(23..26)));
        assert_eq!(got[4], Reply::Bulk(None));
        assert!(matches!(&got[5], Reply::Array(Some(v)) if v.len() == 2));
        for cut in 0..b.len() {
            // A cut anywhere either parses whole replies before it or asks for more.
            let mut at = 0;
            while let Ok(Some((_, next))) = parse(&b[..cut], at) {
                at = next;
            }
            assert!(at <= cut);
        }
        assert!(parse(b"?x\r\n", 0).is_err());
        assert!(parse(b"$3\r\nabcd\r\n", 0).is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(data: Vec<u8>) {
            let _ = parse(&data, 0);
        }
    }
}
