//! Who is at the other end of a TLS connection, told to the HTTP server
//! behind the [`crate::terminator`].
//!
//! tiny_http serves the plaintext on a private Unix socket and knows nothing
//! of the TLS connection it came in, so the terminator writes the verified
//! client certificate's identity into every request of that connection: a
//! [`HEADER`] line carrying a secret only this process knows ([`PeerTag`])
//! and the name. A client cannot forge it (it does not know the secret), so
//! the server need not strip what clients send; connections without a client
//! certificate are relayed untouched.
//!
//! [`Tagger`] is the sans-IO part: it follows the HTTP/1.1 framing of the
//! plaintext (request heads, `Content-Length` bodies) and adds the line to
//! each head. A chunked body ends the tagging: that request is tagged and
//! marked `Connection: close`, so the server answers it and reads no more
//! (Sluice's own clients send `Content-Length` bodies only).

/// The header the terminator adds.
pub const HEADER: &str = "Sluice-Peer";

/// Longest request head accepted on a tagged connection (tiny_http's own
/// limit is of the same order).
pub const MAX_HEAD: usize = 16 * 1024;

/// The per-process secret that makes [`HEADER`] unforgeable.
pub struct PeerTag {
    secret: String,
}

impl std::fmt::Debug for PeerTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTag").finish_non_exhaustive()
    }
}

impl PeerTag {
    /// A new random secret (128 bits).
    pub fn new() -> std::io::Result<PeerTag> {
        let mut r = [0u8; 16];
        getrandom::getrandom(&mut r).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(PeerTag {
            secret: r.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }

    /// The header line (with its CRLF) naming `peer`.
    pub fn line(&self, peer: &str) -> Vec<u8> {
        format!("{HEADER}: {} {peer}\r\n", self.secret).into_bytes()
    }

    /// The peer named by the first of `values` (the values of every
    /// [`HEADER`] of a request) that carries this secret.
    pub fn peer<'a>(&self, values: impl IntoIterator<Item = &'a str>) -> Option<String> {
        values.into_iter().find_map(|v| {
            let (secret, name) = v.trim().split_once(' ')?;
            same(secret.as_bytes(), self.secret.as_bytes()).then(|| name.trim().to_string())
        })
    }
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a tagged connection's plaintext was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// A request head longer than [`MAX_HEAD`].
    #[error("request head longer than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// A `Content-Length` that is not a number, or two that differ.
    #[error("bad Content-Length: {0}")]
    ContentLength(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a request head.
    Head,
    /// Relaying this many more body bytes.
    Body(u64),
    /// Relaying everything as it is (after a chunked request).
    Through,
}

/// Adds a header line to every request head of one connection's plaintext.
#[derive(Debug)]
pub struct Tagger {
    line: Vec<u8>,
    state: State,
    head: Vec<u8>,
}

impl Tagger {
    /// Tags with `line` ([`PeerTag::line`]).
    pub fn new(line: Vec<u8>) -> Tagger {
        Tagger {
            line,
            state: State::Head,
            head: Vec::new(),
        }
    }

    /// Appends to `out` what to relay for the plaintext `input`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), TagError> {
        while !input.is_empty() {
            match self.state {
                State::Through => {
                    out.extend_from_slice(input);
                    return Ok(());
                }
                State::Body(left) => {
                    let n = (left.min(input.len() as u64)) as usize;
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if left == n as u64 {
                        State::Head
                    } else {
                        State::Body(left - n as u64)
                    };
                }
                State::Head => {
                    // Only the bytes not yet searched, plus three for an end
                    // split across reads.
                    let from = self.head.len().saturating_sub(3);
                    let had = self.head.len();
                    self.head.extend_from_slice(input);
                    match find(&self.head[from..], b"\r\n\r\n") {
                        None => {
                            if self.head.len() > MAX_HEAD {
                                return Err(TagError::HeadTooLarge);
                            }
                            return Ok(());
                        }
                        Some(i) => {
                            let end = from + i + 4;
                            if end > MAX_HEAD {
                                return Err(TagError::HeadTooLarge);
                            }
                            let head = std::mem::take(&mut self.head);
                            input = &input[end - had..];
                            self.state = self.emit(&head[..end], out)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes `head` (ending with its blank line) with the tag after the
    /// request line; returns what follows it.
    fn emit(&self, head: &[u8], out: &mut Vec<u8>) -> Result<State, TagError> {
        let first = find(head, b"\r\n").unwrap_or(head.len() - 4);
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let fields = head.get(first + 2..head.len() - 4).unwrap_or_default();
        for line in fields.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let name = String::from_utf8_lossy(&line[..colon]);
            let value = String::from_utf8_lossy(&line[colon + 1..]);
            let value = value.trim();
            if name.trim().eq_ignore_ascii_case("content-length") {
                let n: u64 = value
                    .parse()
                    .map_err(|_| TagError::ContentLength(value.to_string()))?;
                if length.is_some_and(|l| l != n) {
                    return Err(TagError::ContentLength(format!(
                        "{} and {n}",
                        length.unwrap_or(0)
                    )));
                }
                length = Some(n);
            } else if name.trim().eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            }
        }
        out.extend_from_slice(&head[..first + 2]);
        out.extend_from_slice(&self.line);
        if chunked {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(&head[first + 2..]);
        Ok(match (chunked, length) {
            (true, _) => State::Through,
            (false, Some(n)) if n > 0 => State::Body(n),
            _ => State::Head,
        })
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &[u8] = b"Sluice-Peer: s host-1.agents.sluice\r\n";

    fn tag_in_pieces(input: &[u8], piece: usize) -> Result<Vec<u8>, TagError> {
        let mut t = Tagger::new(TAG.to_vec());
        let mut out = Vec::new();
        for c in input.chunks(piece) {
            t.feed(c, &mut out)?;
        }
        Ok(out)
    }

    #[test]
    fn every_request_of_a_keep_alive_connection_is_tagged_whatever_the_reads() {
        let input = b"POST /v1/hosts HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n\
GET / HTTP/1.1\r\n\r\n!!GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        let want = b"POST /v1/hosts HTTP/1.1\r\nSluice-Peer: s host-1.agents.sluice\r\nHost: x\r\nContent-Length: 20\r\n\r\n\
GET / HTTP/1.1\r\n\r\n!!GET /metrics HTTP/1.1\r\nSluice-Peer: s host-1.agents.sluice\r\nHost: x\r\n\r\n";
        // The body looks like a request: it must be relayed, not tagged.
        for piece in [1, 2, 3, 5, 7, 64, 4096] {
            let out = tag_in_pieces(input, piece).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(want),
                "in pieces of {piece}"
            );
        }
    }

    #[test]
    fn a_chunked_request_is_the_connections_last() {
        let input = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nGET /\r\n0\r\n\r\nGET /y HTTP/1.1\r\n\r\n";
        let out = String::from_utf8(tag_in_pieces(input, 4).unwrap()).unwrap();
        assert!(out.starts_with(
            "POST /x HTTP/1.1\r\nSluice-Peer: s host-1.agents.sluice\r\nConnection: close\r\n"
        ));
        // Nothing after it is tagged (the server reads no further request).
        assert_eq!(out.matches("Sluice-Peer").count(), 1, "{out}");
        assert!(out.ends_with("GET /y HTTP/1.1\r\n\r\n"));
    }

    #[test]
    fn bad_heads_are_refused() {
        // Blank lines only: relayed (the server answers them), no panic.
        assert!(tag_in_pieces(b"\r\n\r\n", 1).is_ok());
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(
            tag_in_pieces(big.as_bytes(), 1000),
            Err(TagError::HeadTooLarge)
        );
        let unterminated = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(
            tag_in_pieces(&unterminated, 100),
            Err(TagError::HeadTooLarge)
        );
        for cl in ["x", "-1", "1, 2"] {
            let h = format!("POST / HTTP/1.1\r\nContent-Length: {cl}\r\n\r\n");
            assert!(
                matches!(
                    tag_in_pieces(h.as_bytes(), 9),
                    Err(TagError::ContentLength(_))
                ),
                "{cl}"
            );
        }
        let two = b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\n";
        assert!(matches!(
            tag_in_pieces(two, 9),
            Err(TagError::ContentLength(_))
        ));
    }

    #[test]
    fn only_the_secret_makes_a_peer() {
        let tag = PeerTag::new().unwrap();
        let line = String::from_utf8(tag.line("controller.agents.sluice")).unwrap();
        let value = line
            .strip_prefix("Sluice-Peer: ")
            .unwrap()
            .trim_end()
            .to_string();
        assert_eq!(
            tag.peer(["forged host-2.agents.sluice", value.as_str()]),
            Some("controller.agents.sluice".into())
        );
        assert_eq!(tag.peer(["forged host-2.agents.sluice"]), None);
        assert_eq!(tag.peer([""]), None);
        // Another process's secret is no better than a guess.
        let other = PeerTag::new().unwrap();
        assert_eq!(other.peer([value.as_str()]), None);
    }
}
