//! HTTP/1.x: detection by content, a message framer whose whole state fits a
//! few bytes of the flow record, and a checked, non-allocating parser of a
//! message head into the buffers rules inspect (Suricata's sticky buffers).
//!
//! # Framing (per direction, in the store record)
//!
//! [`HttpDir`] follows a direction's stream byte by byte through the heads
//! (request or status line and header lines, up to the blank line) and skips
//! bodies by their length: `Content-Length`, `Transfer-Encoding: chunked`
//! (chunk sizes, extensions and trailers parsed), or, for a response with
//! neither, until the connection closes; the first of repeated
//! `Content-Length` fields counts. Responses to `HEAD` and with status 1xx,
//! 204 or 304 have no body; a 2xx to `CONNECT` has none and starts a tunnel,
//! parsed each way only if it starts an HTTP message. As in libhtp, an
//! HTTP/0.9 request (no protocol) is its request line alone, and a response
//! not starting with `HTTP` is a body up to the close. So pipelined requests
//! and keep-alive connections stay in step, and an IPS instance continuing
//! the flow from the store knows where the next message starts. Bounds: a head longer than
//! [`MAX_HEAD`] bytes or with more than [`MAX_LINES`] lines, a malformed chunk
//! size, or a gap in the stream end the parsing of that direction
//! ([`Phase::Off`]): nothing panics, nothing allocates.
//!
//! # Detection
//!
//! A client direction whose first bytes are `METHOD target HTTP/1.x`
//! (`METHOD` a token of letters in either case, the parts separated by runs
//! of spaces or tabs), or a known method and a target alone (HTTP/0.9), is
//! HTTP, on any port, and so is its server direction then. A stream first
//! seen mid-way is not parsed.
//!
//! # Buffers
//!
//! [`Head::parse`] splits a complete head into the request line (method,
//! target, protocol) or status line (protocol, code, reason) and up to
//! [`MAX_HEADERS`] header fields; [`Buffers::build`] writes every buffer of
//! [`Buf`] a message has into one scratch vector (reused across packets).

use std::ops::Range;

pub mod body;
pub mod ce;
pub(crate) mod eval;
pub mod events;
pub(crate) mod host;
pub mod inflate;
pub mod prefilter;
pub mod range;

/// A head (start line and header lines) longer than this ends parsing of the
/// direction (libhtp's default `request-body-limit` is larger; heads are not).
pub const MAX_HEAD: u32 = 32 * 1024;
/// Lines of a head beyond this end parsing of the direction.
pub const MAX_LINES: u16 = 256;
/// Header fields the buffers hold; later ones are framed but not inspected.
pub const MAX_HEADERS: usize = 64;

/// Where a direction's framing is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// No byte of the direction seen yet: its first bytes decide.
    #[default]
    Start = 0,
    /// Not HTTP, or parsing ended (bounds, gap, malformed framing).
    Off = 1,
    /// In a message head (or before one: the next message starts here).
    Head = 2,
    /// In a body of `remaining` bytes.
    Body = 3,
    /// In a chunk-size line.
    ChunkSize = 4,
    /// In chunk data, `remaining` bytes left.
    ChunkData = 5,
    /// After chunk data, up to its line end.
    ChunkEnd = 6,
    /// In the trailer after the last chunk.
    Trailer = 7,
    /// A response body that ends with the connection.
    ToClose = 8,
}

impl Phase {
    fn from_u8(v: u8) -> Option<Phase> {
        Some(match v {
            0 => Phase::Start,
            1 => Phase::Off,
            2 => Phase::Head,
            3 => Phase::Body,
            4 => Phase::ChunkSize,
            5 => Phase::ChunkData,
            6 => Phase::ChunkEnd,
            7 => Phase::Trailer,
            8 => Phase::ToClose,
            _ => return None,
        })
    }
}

/// Flag: some bytes of the current head were consumed (by an earlier packet,
/// if set when a packet starts).
pub const STARTED: u8 = 1;
/// Flag: the head's start line is still being read.
pub const FIRST_LINE: u8 = 2;
/// Flag: the head has a `Content-Length`.
pub const HAS_LEN: u8 = 4;
/// Flag: the head has `Transfer-Encoding: chunked`.
pub const CHUNKED: u8 = 8;
/// Flag: the message has no body (a response to HEAD, 1xx, 204, 304).
pub const NO_BODY: u8 = 16;
/// Flag (server direction): the next response answers a `HEAD` request.
pub const AFTER_HEAD: u8 = 32;
/// Flag: inside a chunk-size line's extension (ignored up to the line end).
pub const CHUNK_EXT: u8 = 64;
/// Flag (server direction): the next response answers a `CONNECT` request.
/// Client direction: a `CONNECT` tunnel began, so the next bytes are HTTP
/// only if they start a request (Suricata detects the tunnel's protocol
/// anew).
pub const AFTER_CONNECT: u8 = 128;
/// Flags (server direction, both): a 2xx answered a `CONNECT`, so the next
/// bytes are HTTP only if they start a response.
pub const TUNNEL: u8 = AFTER_HEAD | AFTER_CONNECT;

const CL: &[u8] = b"content-length:";
const TE: &[u8] = b"transfer-encoding:";
const CHUNKED_TOKEN: &[u8] = b"chunked";
/// Name-match progress meaning "this name cannot match".
const FAIL: u8 = u8::MAX;

/// True if either direction's framing found HTTP (and has not given up).
pub fn detected(dirs: &[HttpDir; 2]) -> bool {
    dirs.iter().any(|h| h.phase as u8 >= Phase::Head as u8)
}

/// One direction's HTTP framing state, kept in the flow's store record
/// ([`crate::engine::FlowState`]): 1 byte while undecided or off, 16 bytes
/// otherwise ([`HttpDir::encoded_len`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpDir {
    /// Where the framing is.
    pub phase: Phase,
    /// [`STARTED`], [`FIRST_LINE`], ...
    pub flags: u8,
    /// Progress matching `Content-Length:` in the current header line.
    m_cl: u8,
    /// Progress matching `Transfer-Encoding:`, then `chunked` in its value.
    m_te: u8,
    /// 0: in a header name; 1: in a Content-Length value; 2: in a
    /// Transfer-Encoding value; 3: in another header's value.
    val: u8,
    /// Bytes of the current line (saturating; only 0 matters).
    line: u8,
    /// Lines of the current head.
    lines: u16,
    /// Bytes of the current head.
    head_len: u32,
    /// Body or chunk bytes left, or the Content-Length being read.
    pub remaining: u64,
}

/// A piece of a message found in one packet's bytes ([`HttpDir::advance`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Piece {
    /// The message's whole head, when it lies in these bytes.
    pub head: Option<Range<usize>>,
    /// Body bytes of the message in these bytes (chunk data, without the
    /// chunk framing), as ranges.
    pub body: Vec<Range<usize>>,
    /// The message ends in these bytes.
    pub done: bool,
    /// A head that began in earlier bytes ends in these, at this position
    /// (`head` is then `None`): its first bytes are the direction's pending
    /// unit ([`crate::pending`]).
    pub head_cont: Option<usize>,
    /// After [`HttpDir::advance`]: the bytes end inside a head that began at
    /// this position of these bytes.
    pub open: Option<usize>,
    /// After [`HttpDir::advance`]: the bytes end inside a head that began in
    /// earlier bytes (all of these bytes belong to it).
    pub open_cont: bool,
    /// After [`HttpDir::advance`]: a head went over [`MAX_HEAD`] or
    /// [`MAX_LINES`] and parsing of the direction ended.
    pub overflow: bool,
    /// After [`HttpDir::advance`]: a chunk-size line libhtp calls invalid
    /// ended parsing of the direction (`http.invalid_request_chunk_len`,
    /// `http.invalid_response_chunk_len`; [`chunk_line_invalid`]).
    pub chunk_invalid: bool,
}

impl Piece {
    fn is_empty(&self) -> bool {
        self.head.is_none() && self.head_cont.is_none() && self.body.is_empty()
    }
}

/// True if `b` may be a method byte (a token of letters, either case, as
/// Suricata's detection of HTTP by its methods ignores case).
fn method_byte(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'-' || b == b'_'
}

/// True for the whitespace libhtp splits a start line on (C's `isspace`
/// less the line ends, which end the line).
fn line_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x0b | 0x0c)
}

/// The methods Suricata's protocol detection knows (app-layer-htp.c,
/// matched ignoring case): a request line without a protocol (HTTP/0.9)
/// is HTTP only with one of them.
const METHODS: &[&[u8]] = &[
    b"GET",
    b"PUT",
    b"POST",
    b"HEAD",
    b"TRACE",
    b"OPTIONS",
    b"CONNECT",
    b"DELETE",
    b"PATCH",
    b"PROPFIND",
    b"PROPPATCH",
    b"MKCOL",
    b"COPY",
    b"MOVE",
    b"LOCK",
    b"UNLOCK",
    b"CHECKOUT",
    b"UNCHECKOUT",
    b"CHECKIN",
    b"UPDATE",
    b"LABEL",
    b"REPORT",
    b"MKWORKSPACE",
    b"MKACTIVITY",
    b"MERGE",
    b"INVALID",
    b"VERSION-CONTROL",
    b"BASELINE-CONTROL",
];

/// True if `data` (a client direction's first bytes) starts an HTTP
/// request: `METHOD`, spaces or tabs, the target, spaces or tabs and
/// `HTTP/1.x` (`METHOD` a token of letters, either case), or a known
/// method and a target alone (an HTTP/0.9 request); or a prefix of one
/// when the line is not complete yet.
pub fn looks_like_request(data: &[u8]) -> bool {
    let m = data.iter().take_while(|&&b| method_byte(b)).count();
    if m == 0 || m > 20 {
        return false;
    }
    match data.get(m) {
        Some(&b) if line_space(b) => {}
        // The first segment ends inside the method.
        None => return true,
        Some(_) => return false,
    }
    match memchr::memchr(b'\n', data) {
        Some(nl) => {
            let line = data[..nl].strip_suffix(b"\r").unwrap_or(&data[..nl]);
            let mut words = line.split(|&b| line_space(b)).filter(|w| !w.is_empty());
            let (Some(_), Some(_)) = (words.next(), words.next()) else {
                return false;
            };
            match (words.next(), words.next_back()) {
                (None, _) => {
                    let method = &data[..m];
                    METHODS.iter().any(|k| k.eq_ignore_ascii_case(method))
                }
                (Some(p), None) | (Some(_), Some(p)) => p == b"HTTP/1.1" || p == b"HTTP/1.0",
            }
        }
        None => {
            let rest = &data[m + 1..];
            !rest.strip_suffix(b"\r").unwrap_or(rest).contains(&b'\r')
        }
    }
}

/// True if `data`, a response's first bytes, may start a status line: libhtp
/// reads a response whose first line does not start with `HTTP` (any case,
/// after whitespace) as a body without a head (an HTTP/0.9 response). Too
/// few bytes to tell count as a status line.
fn starts_status_line(data: &[u8]) -> bool {
    let at = data.iter().take_while(|&&b| line_space(b)).count();
    let rest = &data[at..];
    let n = rest.len().min(4);
    rest[..n].eq_ignore_ascii_case(&b"HTTP"[..n])
}

/// The status code of a status line's first bytes `line`: the word after
/// the protocol (None while not all in `line`).
fn status_code(line: &[u8]) -> Option<&[u8]> {
    let a = status_at(line);
    line.get(a..a + 3)
}

/// Where a status line's code starts: after leading whitespace, the
/// protocol and the whitespace after it.
fn status_at(line: &[u8]) -> usize {
    let skip = |i: usize, space: bool| {
        i + line[i..]
            .iter()
            .take_while(|&&b| line_space(b) == space)
            .count()
    };
    skip(skip(skip(0, true), false), true)
}

/// True if the response head `head` (its start line first, after any empty
/// lines) has the status 100: an interim `100 Continue`, whatever its
/// reason phrase, protocol or fields (measured: Suricata 7.0.10 counts a
/// `100` with `Content-Length: 0` and an `HTTP/1.0 100` as one).
pub(crate) fn status_is_100(head: &[u8]) -> bool {
    let start = head
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let line = &head[start..];
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let at = status_at(line);
    line.get(at..at + 3) == Some(b"100")
        && line
            .get(at + 3)
            .is_none_or(|&b| line_space(b) || b == b'\r')
}

/// True if `data` (a server direction's first bytes) starts an HTTP/1.x
/// response.
pub fn looks_like_response(data: &[u8]) -> bool {
    let p = b"HTTP/1.";
    let n = data.len().min(p.len());
    n > 0 && data[..n] == p[..n]
}

impl HttpDir {
    /// Bytes [`encode`](HttpDir::encode) writes.
    pub fn encoded_len(&self) -> usize {
        match self.phase {
            Phase::Start | Phase::Off => 1,
            _ => 16,
        }
    }

    /// Appends the state to a record.
    pub fn encode(&self, w: &mut sluice_state::Writer<'_>) {
        w.u8(self.phase as u8);
        if self.encoded_len() > 1 {
            w.u8(self.flags).u8(self.m_cl).u8(self.m_te).u8(self.val);
            w.u8(self.line).u16(self.lines).u32(self.head_len);
            // Over 2^32 bytes left is saturated: the body is skipped to the
            // connection's end in practice.
            w.u32(self.remaining.min(u32::MAX as u64) as u32);
        }
    }

    /// Reads what [`encode`](HttpDir::encode) wrote.
    pub fn decode(r: &mut sluice_state::Reader<'_>) -> Result<Self, sluice_state::DecodeError> {
        let phase =
            Phase::from_u8(r.u8()?).ok_or(sluice_state::DecodeError("unknown http phase"))?;
        let mut h = HttpDir {
            phase,
            ..HttpDir::default()
        };
        if h.encoded_len() > 1 {
            h.flags = r.u8()?;
            h.m_cl = r.u8()?;
            h.m_te = r.u8()?;
            h.val = r.u8()?;
            h.line = r.u8()?;
            h.lines = r.u16()?;
            h.head_len = r.u32()?;
            h.remaining = r.u32()? as u64;
        }
        Ok(h)
    }

    /// The state at the start of a message head.
    fn next_message(&mut self) {
        let keep = self.flags & TUNNEL;
        *self = HttpDir {
            phase: Phase::Head,
            flags: keep,
            ..HttpDir::default()
        };
    }

    /// Stops parsing the direction.
    pub fn off(&mut self) {
        *self = HttpDir {
            phase: Phase::Off,
            ..HttpDir::default()
        };
    }

    /// True while a message's body (or its chunk framing or trailer) is
    /// being framed.
    pub fn in_body(&self) -> bool {
        matches!(
            self.phase,
            Phase::Body
                | Phase::ChunkSize
                | Phase::ChunkData
                | Phase::ChunkEnd
                | Phase::Trailer
                | Phase::ToClose
        )
    }

    /// True while the direction is parsed as HTTP.
    pub fn active(&self) -> bool {
        !matches!(self.phase, Phase::Start | Phase::Off)
    }

    /// The direction's stream ended (its FIN, or a reset): a message whose
    /// body was being received ends here, truncated or read to the close,
    /// and `each` sees its last piece (no bytes, `done`), as libhtp
    /// completes a transaction at the stream's end.
    pub fn finish(&mut self, piece: &mut Piece, mut each: impl FnMut(&Piece, &HttpDir)) {
        if self.in_body() {
            piece.head = None;
            piece.head_cont = None;
            piece.body.clear();
            self.end_message(piece, &mut each);
        }
    }

    /// Follows `data` (the direction's next stream bytes) and calls `each`
    /// with every piece of a message they hold, in order: a message whose
    /// head lies wholly in `data` comes with its head's range, and the body
    /// bytes in `data` of each message come as ranges. `to_server` tells
    /// requests from responses; `peer` is the other direction's state (a
    /// request to `HEAD` marks it).
    pub fn advance(
        &mut self,
        data: &[u8],
        to_server: bool,
        peer: &mut HttpDir,
        piece: &mut Piece,
        mut each: impl FnMut(&Piece, &HttpDir),
    ) {
        let mut pos = 0;
        piece.head = None;
        piece.body.clear();
        piece.done = false;
        piece.head_cont = None;
        piece.open = None;
        piece.open_cont = false;
        piece.overflow = false;
        piece.chunk_invalid = false;
        if self.phase == Phase::Start {
            // A response need not have a status line (HTTP/0.9): once the
            // request side is HTTP, what the server sends is read as libhtp
            // reads it (see `starts_status_line`).
            let ok = if to_server {
                looks_like_request(data)
            } else {
                peer.active()
            };
            if ok {
                self.next_message();
            } else if !data.is_empty() {
                self.off();
            }
        }
        let mut head_start = None;
        while pos < data.len() {
            match self.phase {
                Phase::Start | Phase::Off => break,
                Phase::Head => {
                    if self.flags & STARTED == 0 {
                        // Blank lines between messages are skipped (clients
                        // send a CRLF after a POST body).
                        let skip = data[pos..]
                            .iter()
                            .take_while(|&&b| b == b'\r' || b == b'\n')
                            .count();
                        pos += skip;
                        if pos == data.len() {
                            break;
                        }
                        let rest = &data[pos..];
                        if self.flags & TUNNEL != 0 {
                            // The first bytes in a CONNECT tunnel: HTTP only if
                            // they start a message.
                            let tunnel = if to_server {
                                self.flags & AFTER_CONNECT != 0
                            } else {
                                self.flags & TUNNEL == TUNNEL
                            };
                            if tunnel {
                                let http = if to_server {
                                    looks_like_request(rest)
                                } else {
                                    looks_like_response(rest)
                                };
                                if !http {
                                    self.off();
                                    break;
                                }
                                self.flags &= !if to_server { AFTER_CONNECT } else { TUNNEL };
                            }
                        }
                        if !to_server && !starts_status_line(rest) {
                            // No status line: the bytes up to the close are
                            // the body (libhtp's HTTP/0.9 response).
                            self.flags &= !TUNNEL;
                            self.phase = Phase::ToClose;
                            continue;
                        }
                        head_start = Some(pos);
                        self.flags |= STARTED | FIRST_LINE;
                        self.start_line(rest, to_server, peer);
                    }
                    match self.head_bytes(&data[pos..], to_server) {
                        Ok(Some(n)) => {
                            pos += n;
                            piece.head = head_start.take().map(|s| s..pos);
                            if piece.head.is_none() {
                                piece.head_cont = Some(pos);
                            }
                            self.after_head(to_server);
                            if self.phase == Phase::Head {
                                piece.done = true;
                                each(piece, self);
                                piece.head = None;
                                piece.head_cont = None;
                                piece.done = false;
                            }
                        }
                        Ok(None) => pos = data.len(),
                        Err(()) => {
                            piece.overflow = true;
                            self.off();
                            break;
                        }
                    }
                }
                Phase::Body | Phase::ChunkData => {
                    let n = (data.len() - pos).min(self.remaining.min(usize::MAX as u64) as usize);
                    if n > 0 {
                        piece.body.push(pos..pos + n);
                    }
                    pos += n;
                    self.remaining -= n as u64;
                    if self.remaining == 0 {
                        if self.phase == Phase::Body {
                            self.end_message(piece, &mut each);
                        } else {
                            self.phase = Phase::ChunkEnd;
                        }
                    }
                }
                Phase::ChunkSize => match self.chunk_size(&data[pos..], to_server) {
                    Ok(Some(n)) => {
                        pos += n;
                        self.phase = if self.remaining == 0 {
                            self.line = 0;
                            Phase::Trailer
                        } else {
                            Phase::ChunkData
                        };
                    }
                    Ok(None) => pos = data.len(),
                    Err(invalid) => {
                        piece.chunk_invalid = invalid;
                        self.off();
                        break;
                    }
                },
                Phase::ChunkEnd => match memchr::memchr(b'\n', &data[pos..]) {
                    Some(i) => {
                        pos += i + 1;
                        self.phase = Phase::ChunkSize;
                        self.flags &= !CHUNK_EXT;
                        self.remaining = 0;
                        self.line = 0;
                    }
                    None => pos = data.len(),
                },
                Phase::Trailer => {
                    let mut end = false;
                    while pos < data.len() {
                        let b = data[pos];
                        pos += 1;
                        if b == b'\n' {
                            if self.line == 0 {
                                end = true;
                                break;
                            }
                            self.line = 0;
                        } else if b != b'\r' {
                            self.line = self.line.saturating_add(1);
                        }
                    }
                    if end {
                        self.end_message(piece, &mut each);
                    }
                }
                Phase::ToClose => {
                    piece.body.push(pos..data.len());
                    pos = data.len();
                }
            }
        }
        if !piece.is_empty() {
            each(piece, self);
        }
        piece.head = None;
        piece.head_cont = None;
        piece.body.clear();
        if self.phase == Phase::Head && self.flags & STARTED != 0 {
            match head_start {
                Some(s) => piece.open = Some(s),
                None => piece.open_cont = true,
            }
        }
    }

    fn end_message(&mut self, piece: &mut Piece, each: &mut impl FnMut(&Piece, &HttpDir)) {
        self.next_message();
        piece.done = true;
        each(piece, self);
        piece.head = None;
        piece.head_cont = None;
        piece.body.clear();
        piece.done = false;
    }

    /// At a head's first byte: what the start line says about the body (when
    /// the line is in these bytes).
    fn start_line(&mut self, rest: &[u8], to_server: bool, peer: &mut HttpDir) {
        if to_server {
            // libhtp knows the methods by their exact spelling.
            let is =
                |m: &[u8]| rest.starts_with(m) && rest.get(m.len()).is_some_and(|&b| line_space(b));
            peer.flags &= !TUNNEL;
            if is(b"HEAD") {
                peer.flags |= AFTER_HEAD;
            } else if is(b"CONNECT") {
                peer.flags |= AFTER_CONNECT;
            }
        } else {
            let after = self.flags & TUNNEL;
            if after == AFTER_HEAD {
                self.flags |= NO_BODY;
            }
            // "HTTP/1.x NNN": 1xx, 204 and 304 have no body.
            if let Some(code) = status_code(rest) {
                if code[0] == b'1' || code == b"204" || code == b"304" {
                    self.flags |= NO_BODY;
                }
                // A 100 Continue precedes the real response to a HEAD or a
                // CONNECT.
                if code[0] != b'1' {
                    self.flags &= !TUNNEL;
                    if after == AFTER_CONNECT && code[0] == b'2' {
                        // The tunnel follows this head: no body, and the
                        // next bytes each way are another protocol's unless
                        // they start an HTTP message.
                        self.flags |= NO_BODY | TUNNEL;
                        peer.flags |= AFTER_CONNECT;
                    }
                }
            }
        }
    }

    /// Consumes head bytes; returns how many up to and including the blank
    /// line when the head ends in `data`, None if it does not, an error
    /// past the bounds.
    fn head_bytes(&mut self, data: &[u8], to_server: bool) -> Result<Option<usize>, ()> {
        for (i, &b) in data.iter().enumerate() {
            self.head_len += 1;
            if self.head_len > MAX_HEAD {
                return Err(());
            }
            if b == b'\n' {
                if self.line == 0 && self.flags & FIRST_LINE == 0 {
                    return Ok(Some(i + 1));
                }
                // A request line of a method and a target alone (the words
                // counted in `m_cl`) is an HTTP/0.9 request: no headers
                // follow.
                if self.flags & FIRST_LINE != 0 && to_server && (1..=2).contains(&self.m_cl) {
                    return Ok(Some(i + 1));
                }
                self.lines += 1;
                if self.lines > MAX_LINES {
                    return Err(());
                }
                if self.val == 1 {
                    self.flags |= HAS_LEN;
                }
                self.flags &= !FIRST_LINE;
                self.line = 0;
                self.m_cl = 0;
                self.m_te = 0;
                self.val = 0;
                continue;
            }
            if b == b'\r' {
                continue;
            }
            self.line = self.line.saturating_add(1);
            if self.flags & FIRST_LINE != 0 {
                // The start line's words: `m_cl` counts them, `m_te` is 1
                // inside one.
                if line_space(b) {
                    self.m_te = 0;
                } else if self.m_te == 0 {
                    self.m_te = 1;
                    self.m_cl = self.m_cl.saturating_add(1).min(3);
                }
                continue;
            }
            let l = b.to_ascii_lowercase();
            match self.val {
                0 => {
                    let step = |m: &mut u8, name: &[u8]| -> bool {
                        if *m == FAIL {
                            return false;
                        }
                        // libhtp trims spaces and tabs before the colon
                        // off a name.
                        if name.get(*m as usize) == Some(&b':') && line_space(b) && *m > 0 {
                            return false;
                        }
                        if name.get(*m as usize) == Some(&l) {
                            *m += 1;
                            return *m as usize == name.len();
                        }
                        *m = FAIL;
                        false
                    };
                    if step(&mut self.m_cl, CL) {
                        // The first Content-Length frames the body (libhtp
                        // keeps the first of repeated ones).
                        if self.flags & HAS_LEN != 0 {
                            self.val = 3;
                        } else {
                            self.val = 1;
                            self.remaining = 0;
                        }
                    } else if step(&mut self.m_te, TE) {
                        self.val = 2;
                        self.m_te = 0;
                    } else if b == b':' {
                        self.val = 3;
                    }
                }
                1 if b.is_ascii_digit() => {
                    self.remaining = self
                        .remaining
                        .saturating_mul(10)
                        .saturating_add((b - b'0') as u64);
                }
                2 => {
                    if self.m_te as usize >= CHUNKED_TOKEN.len() {
                        continue;
                    }
                    if CHUNKED_TOKEN[self.m_te as usize] == l {
                        self.m_te += 1;
                        if self.m_te as usize == CHUNKED_TOKEN.len() {
                            self.flags |= CHUNKED;
                        }
                    } else {
                        self.m_te = (l == CHUNKED_TOKEN[0]) as u8;
                    }
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// The body that follows a complete head (RFC 9112 §6.3).
    fn after_head(&mut self, to_server: bool) {
        let f = self.flags;
        let len = self.remaining;
        if !to_server && f & NO_BODY != 0 {
            self.next_message();
        } else if f & CHUNKED != 0 {
            self.phase = Phase::ChunkSize;
            self.remaining = 0;
            self.line = 0;
            self.flags &= !CHUNK_EXT;
        } else if f & HAS_LEN != 0 && len > 0 {
            self.phase = Phase::Body;
        } else if to_server || f & HAS_LEN != 0 {
            self.next_message();
        } else {
            self.phase = Phase::ToClose;
        }
    }

    /// Consumes a chunk-size line's bytes into `remaining`; returns how many
    /// when the line ends in `data`. A line that is not a chunk size ends
    /// the framing: Err, saying whether libhtp calls it invalid too
    /// ([`chunk_line_invalid`]; `request`: the line is a request's).
    fn chunk_size(&mut self, data: &[u8], request: bool) -> Result<Option<usize>, bool> {
        for (i, &b) in data.iter().enumerate() {
            if b == b'\n' {
                // A line without a digit is not a chunk size.
                if self.line == 0 {
                    return Err(request);
                }
                self.line = 0;
                return Ok(Some(i + 1));
            }
            if self.flags & CHUNK_EXT != 0 || b == b'\r' {
                continue;
            }
            match (b as char).to_digit(16) {
                Some(d) => {
                    self.remaining = self.remaining * 16 + d as u64;
                    self.line = self.line.saturating_add(1);
                    // libhtp refuses chunks over 2^31 - 1 bytes (and the
                    // product above cannot overflow below that).
                    if self.remaining > MAX_CHUNK {
                        return Err(true);
                    }
                }
                None if b == b';' || b == b' ' || b == b'\t' => {
                    if self.line == 0 {
                        return Err(chunk_line_invalid(&data[i..], request));
                    }
                    self.flags |= CHUNK_EXT;
                }
                // Junk after the digits is ignored by libhtp.
                None => return Err(self.line == 0),
            }
        }
        Ok(None)
    }
}

/// The largest chunk libhtp frames (`htp_parse_chunked_length`).
const MAX_CHUNK: u64 = 0x7fff_ffff;

/// Whether libhtp 0.5.50 (`htp_parse_chunked_length`) calls a chunk-size
/// line starting with `rest` (from its first byte this parser refuses,
/// a space, tab or `;`, with no digit before it) invalid: it skips leading
/// whitespace, then wants a hex digit (junk after the digits is ignored);
/// a line of whitespace alone is invalid in a request and skipped in a
/// response. Measured against Suricata 7.0.10. A line whose verdict lies
/// past `rest` is not called invalid.
pub(crate) fn chunk_line_invalid(rest: &[u8], request: bool) -> bool {
    match rest
        .iter()
        .find(|&&c| !matches!(c, b' ' | b'\t' | b'\r' | 0x0b | 0x0c))
    {
        Some(b'\n') => request,
        Some(c) => !c.is_ascii_hexdigit(),
        None => false,
    }
}

/// A parsed message head: ranges into the head's bytes.
#[derive(Debug, Clone)]
pub struct Head {
    /// The start line, without its line end.
    pub line: Range<usize>,
    /// Request: the method; response: the protocol.
    pub first: Range<usize>,
    /// Request: the target; response: the status code.
    pub second: Range<usize>,
    /// Request: the protocol; response: the reason phrase.
    pub third: Range<usize>,
    /// Header lines' block, from the line after the start line to the end
    /// of the head (the blank line included).
    pub block: Range<usize>,
    /// Header fields (name, value without surrounding whitespace); at most
    /// [`MAX_HEADERS`] are kept.
    pub fields: [(Range<usize>, Range<usize>); MAX_HEADERS],
    /// Fields kept.
    pub nfields: usize,
}

/// True for the bytes a field value is trimmed of: spaces and tabs, and
/// the line ends of folded lines.
fn value_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

impl Head {
    /// Parses `h`, a complete head (what [`HttpDir::advance`] reported), as
    /// libhtp does. The start line is split on runs of spaces and tabs:
    /// a request's target ends at the first space after it (at the first
    /// tab only if no space follows), its protocol is the rest of the line
    /// (none for HTTP/0.9); a response's reason is the rest of the line
    /// after the code, spaces at its end kept. A line starting with a space
    /// or tab continues the previous field's value (obs-fold: the value's
    /// range then spans line ends, see [`push_unfolded`]); a field name is
    /// trimmed of spaces and tabs before its colon; other lines without a
    /// `:` are not fields. Never fails: every range lies within `h`.
    pub fn parse(&mut self, h: &[u8], request: bool) {
        let nl = memchr::memchr(b'\n', h).unwrap_or(h.len());
        // libhtp takes only the line end off the start line.
        let mut end = nl;
        while end > 0 && h[end - 1] == b'\r' {
            end -= 1;
        }
        self.line = 0..end;
        let skip = |mut i: usize, space: bool| {
            while i < end && line_space(h[i]) == space {
                i += 1;
            }
            i
        };
        let a = skip(0, true);
        let b = skip(a, false);
        self.first = a..b;
        let c = skip(b, true);
        let d = if request {
            match memchr::memchr(b' ', &h[c..end]) {
                Some(i) => c + i,
                None => skip(c, false),
            }
        } else {
            skip(c, false)
        };
        self.second = c..d;
        self.third = skip(d, true)..end;
        self.block = (nl + 1).min(h.len())..h.len();
        self.nfields = 0;
        // Whether the last line was a kept field (a folded line continues
        // it).
        let mut open = false;
        let mut at = self.block.start;
        while at < h.len() {
            let end = memchr::memchr(b'\n', &h[at..]).map_or(h.len(), |i| at + i);
            let mut ln = at..end;
            while ln.end > ln.start && h[ln.end - 1] == b'\r' {
                ln.end -= 1;
            }
            at = end + 1;
            if ln.is_empty() {
                open = false;
                continue;
            }
            if line_space(h[ln.start]) {
                if open {
                    let (_, v) = &mut self.fields[self.nfields - 1];
                    let mut s = ln.clone();
                    while s.end > s.start && value_space(h[s.end - 1]) {
                        s.end -= 1;
                    }
                    if !s.is_empty() {
                        if v.start == v.end {
                            // The value starts on this line.
                            while value_space(h[s.start]) {
                                s.start += 1;
                            }
                            *v = s;
                        } else {
                            v.end = s.end;
                        }
                    }
                }
                continue;
            }
            open = false;
            if self.nfields == MAX_HEADERS {
                continue;
            }
            let Some(c) = memchr::memchr(b':', &h[ln.clone()]) else {
                continue;
            };
            let mut name = ln.start..ln.start + c;
            while name.end > name.start && line_space(h[name.end - 1]) {
                name.end -= 1;
            }
            let mut value = ln.start + c + 1..ln.end;
            while value.start < value.end && value_space(h[value.start]) {
                value.start += 1;
            }
            while value.end > value.start && value_space(h[value.end - 1]) {
                value.end -= 1;
            }
            if value.is_empty() {
                value = ln.end..ln.end;
            }
            self.fields[self.nfields] = (name, value);
            self.nfields += 1;
            open = true;
        }
    }

    /// The value of the first field named `name` (ASCII case-insensitive),
    /// as in the head: a folded value spans its line ends
    /// ([`push_unfolded`]).
    pub fn field<'h>(&self, h: &'h [u8], name: &[u8]) -> Option<&'h [u8]> {
        self.fields[..self.nfields]
            .iter()
            .find(|(n, _)| h[n.clone()].eq_ignore_ascii_case(name))
            .map(|(_, v)| &h[v.clone()])
    }
}

/// The buffers of a message that rules inspect (Suricata's names in
/// [`STICKY`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Buf {
    /// `http.method`.
    Method,
    /// `http.uri`: the normalised target ([`normalise_uri`]).
    Uri,
    /// `http.uri.raw`: the target as sent.
    UriRaw,
    /// `http.protocol`.
    Protocol,
    /// `http.host`: the Host field without its port, lowercased.
    Host,
    /// `http.host.raw`: the Host field as sent.
    HostRaw,
    /// `http.user_agent`.
    UserAgent,
    /// `http.header`: `Name: value\r\n` per field (repeated names merged,
    /// [`Buffers::build`]), without `Cookie` (requests) or `Set-Cookie`
    /// (responses) and without a final `\r\n`, as Suricata builds it.
    Header,
    /// `http.header.raw`: the header lines as sent.
    HeaderRaw,
    /// `http.header_names`: `\r\n`, each name and `\r\n`, then `\r\n`.
    HeaderNames,
    /// `http.cookie`: Cookie (requests) or Set-Cookie (responses).
    Cookie,
    /// `http.request_line`.
    RequestLine,
    /// `http.stat_code`.
    StatCode,
    /// `http.stat_msg`.
    StatMsg,
    /// `http.response_line`.
    ResponseLine,
    /// `http.content_type`.
    ContentType,
    /// `http.content_len`.
    ContentLen,
    /// `http.server`.
    Server,
    /// `http.referer`.
    Referer,
    /// `http.location`.
    Location,
    /// `http.accept`.
    Accept,
    /// `http.accept_enc`.
    AcceptEnc,
    /// `http.accept_lang`.
    AcceptLang,
    /// `http.connection`.
    Connection,
    /// `http.start`: the start line, `\r\n`, each field as `Name:
    /// value\r\n` (repeated names merged), then `\r\n` (Suricata's
    /// normalised form).
    Start,
    /// A request's start line and header lines as sent: no keyword names
    /// it; the `app-layer-event` checks of requests read it ([`events`]).
    StartRaw,
    /// A response's start line and header lines as sent: no keyword names
    /// it; the `app-layer-event` checks of responses read it ([`events`]).
    StartRawResponse,
    /// `http.request_body`: the request body so far ([`body`]).
    RequestBody,
    /// `http.response_body`: the response body so far ([`body`]).
    ResponseBody,
    /// `file.data`: the body so far, either direction ([`body`]).
    FileData,
}

/// Number of [`Buf`]s.
pub const NBUF: usize = Buf::FileData as usize + 1;

/// The sticky-buffer keywords (current and legacy names) and their buffer.
pub const STICKY: &[(&str, Buf)] = &[
    ("http.method", Buf::Method),
    ("http.uri", Buf::Uri),
    ("http.uri.raw", Buf::UriRaw),
    ("http.protocol", Buf::Protocol),
    ("http_protocol", Buf::Protocol),
    ("http.host", Buf::Host),
    ("http.host.raw", Buf::HostRaw),
    ("http.user_agent", Buf::UserAgent),
    ("http.header", Buf::Header),
    ("http.header.raw", Buf::HeaderRaw),
    ("http.header_names", Buf::HeaderNames),
    ("http_header_names", Buf::HeaderNames),
    ("http.cookie", Buf::Cookie),
    ("http.request_line", Buf::RequestLine),
    ("http_request_line", Buf::RequestLine),
    ("http.stat_code", Buf::StatCode),
    ("http.stat_msg", Buf::StatMsg),
    ("http.response_line", Buf::ResponseLine),
    ("http_response_line", Buf::ResponseLine),
    ("http.content_type", Buf::ContentType),
    ("http_content_type", Buf::ContentType),
    ("http.content_len", Buf::ContentLen),
    ("http_content_len", Buf::ContentLen),
    ("http.server", Buf::Server),
    ("http_server", Buf::Server),
    ("http.referer", Buf::Referer),
    ("http_referer", Buf::Referer),
    ("http.location", Buf::Location),
    ("http_location", Buf::Location),
    ("http.accept", Buf::Accept),
    ("http_accept", Buf::Accept),
    ("http.accept_enc", Buf::AcceptEnc),
    ("http_accept_enc", Buf::AcceptEnc),
    ("http.accept_lang", Buf::AcceptLang),
    ("http_accept_lang", Buf::AcceptLang),
    ("http.connection", Buf::Connection),
    ("http_connection", Buf::Connection),
    ("http.start", Buf::Start),
    ("http_start", Buf::Start),
    ("http.request_body", Buf::RequestBody),
    ("http.response_body", Buf::ResponseBody),
    ("file_data", Buf::FileData),
    ("file.data", Buf::FileData),
];

/// The Snort-style content modifiers (they move the preceding content to
/// their buffer) and their buffer.
pub const MODIFIERS: &[(&str, Buf)] = &[
    ("http_method", Buf::Method),
    ("http_uri", Buf::Uri),
    ("http_raw_uri", Buf::UriRaw),
    ("http_host", Buf::Host),
    ("http_raw_host", Buf::HostRaw),
    ("http_user_agent", Buf::UserAgent),
    ("http_header", Buf::Header),
    ("http_raw_header", Buf::HeaderRaw),
    ("http_cookie", Buf::Cookie),
    ("http_stat_code", Buf::StatCode),
    ("http_stat_msg", Buf::StatMsg),
    ("http_client_body", Buf::RequestBody),
    ("http_server_body", Buf::ResponseBody),
];

/// The buffer `pcre` flag `f` selects.
pub fn pcre_flag(f: char) -> Option<Buf> {
    Some(match f {
        'U' => Buf::Uri,
        'I' => Buf::UriRaw,
        'P' => Buf::RequestBody,
        'Q' => Buf::ResponseBody,
        'H' => Buf::Header,
        'D' => Buf::HeaderRaw,
        'M' => Buf::Method,
        'C' => Buf::Cookie,
        'S' => Buf::StatCode,
        'Y' => Buf::StatMsg,
        'V' => Buf::UserAgent,
        'W' => Buf::Host,
        _ => return None,
    })
}

fn hexval(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Appends `target` normalised as libhtp does with Suricata's defaults: an
/// absolute target (`http://host/path`) keeps its path and query; `%XX` is
/// decoded (an invalid escape stays as it is; `+` stays); in the path, `\`
/// becomes `/`, runs of `/` become one, and `.` and `..` segments are
/// removed (RFC 3986 §5.2.4).
pub fn normalise_uri(target: &[u8], out: &mut Vec<u8>) {
    let t = match split_absolute(target) {
        Some((_, b"")) => b"/",
        Some((_, rest)) => rest,
        None => target,
    };
    let q = memchr::memchr(b'?', t).unwrap_or(t.len());
    let start = out.len();
    let mut i = 0;
    // The decoded path, with separators normalised.
    while i < q {
        let mut b = t[i];
        i += 1;
        if b == b'%' && i + 4 < q && (t[i] == b'u' || t[i] == b'U') {
            // IIS's %uXXXX, which libhtp's IDS personality decodes in the
            // path (a decoded `/` is a separator as any other).
            let mut cp = Some(0u16);
            for &x in &t[i + 1..i + 5] {
                cp = cp.zip(hexval(x)).map(|(c, d)| c << 4 | d as u16);
            }
            if let Some(cp) = cp {
                b = best_fit(cp);
                i += 5;
            }
        } else if b == b'%' && i + 1 < q {
            if let (Some(h), Some(l)) = (hexval(t[i]), hexval(t[i + 1])) {
                b = h << 4 | l;
                i += 2;
            }
        }
        if b == b'\\' {
            b = b'/';
        }
        if b == b'/' && out.len() > start && out[out.len() - 1] == b'/' {
            continue;
        }
        out.push(b);
    }
    remove_dots(out, start);
    // The query, decoded.
    let mut i = q;
    while i < t.len() {
        let mut b = t[i];
        i += 1;
        if b == b'%' {
            if let (Some(h), Some(l)) = (
                t.get(i).copied().and_then(hexval),
                t.get(i + 1).copied().and_then(hexval),
            ) {
                b = h << 4 | l;
                i += 2;
            }
        }
        out.push(b);
    }
}

/// An absolute target (`scheme://authority/path`): its authority and the
/// rest (path and query, empty if it has none).
fn split_absolute(t: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = t.windows(3).position(|w| w == b"://")?;
    if i == 0 || !t[..i].iter().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let after = &t[i + 3..];
    let j = after
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(after.len());
    Some((&after[..j], &after[j..]))
}

/// The host of an authority (`user@host:port`): without the user part and
/// the port (an IPv6 literal keeps its brackets).
fn uri_host(auth: &[u8]) -> &[u8] {
    let a = match memchr::memrchr(b'@', auth) {
        Some(i) => &auth[i + 1..],
        None => auth,
    };
    match a.iter().rposition(|&b| b == b':') {
        Some(i) if !a[i..].contains(&b']') => &a[..i],
        _ => a,
    }
}

/// The byte a `%uXXXX` code point decodes to: itself up to 0xff, else the
/// Windows-1252 "best fit" of it (the characters Windows converts to a
/// look-alike, after Microsoft's published bestfit1252 table), else `?`.
fn best_fit(cp: u16) -> u8 {
    match cp {
        0..=0xff => cp as u8,
        // Latin Extended-A: the letter without its accent.
        0x100..=0x17f => LATIN_EXT_A[cp as usize - 0x100],
        // Fullwidth ASCII.
        0xff01..=0xff5e => (cp - 0xfee0) as u8,
        _ => match BEST_FIT.binary_search_by_key(&cp, |&(c, _)| c) {
            Ok(i) => BEST_FIT[i].1,
            Err(_) => b'?',
        },
    }
}

/// [`best_fit`] of U+0100 to U+017F.
const LATIN_EXT_A: &[u8; 0x80] = b"AaAaAaCcCcCcCcDd\
    \xd0dEeEeEeEeEeGgGg\
    GgGgHhHhIiIiIiIi\
    Ii??JjKk?LlLlLl?\
    ?LlNnNnNn???OoOo\
    Oo\x8c\x9cRrRrRrSsSsSs\
    \x8a\x9aTtTtTtUuUuUuUu\
    UuUuWwYy\x9fZzZz\x8e\x9e?";

/// [`best_fit`] of other code points over 0xff (sorted): Windows-1252's
/// own characters in 0x80-0x9f, and the look-alikes of ASCII that matter
/// to a path (slashes, dots, quotes, dashes, brackets, digits).
const BEST_FIT: &[(u16, u8)] = &[
    (0x0192, 0x83),
    (0x02c6, 0x88),
    (0x02dc, 0x98),
    (0x2010, b'-'),
    (0x2011, b'-'),
    (0x2013, 0x96),
    (0x2014, 0x97),
    (0x2017, b'='),
    (0x2018, 0x91),
    (0x2019, 0x92),
    (0x201a, 0x82),
    (0x201c, 0x93),
    (0x201d, 0x94),
    (0x201e, 0x84),
    (0x2020, 0x86),
    (0x2021, 0x87),
    (0x2022, 0x95),
    (0x2024, b'.'),
    (0x2026, 0x85),
    (0x2030, 0x89),
    (0x2032, b'\''),
    (0x2035, b'`'),
    (0x2039, 0x8b),
    (0x203a, 0x9b),
    (0x2044, b'/'),
    (0x2074, b'4'),
    (0x207f, b'n'),
    (0x2080, b'0'),
    (0x2081, b'1'),
    (0x2082, b'2'),
    (0x2083, b'3'),
    (0x2084, b'4'),
    (0x2085, b'5'),
    (0x2086, b'6'),
    (0x2087, b'7'),
    (0x2088, b'8'),
    (0x2089, b'9'),
    (0x20ac, 0x80),
    (0x2122, 0x99),
    (0x2190, b'<'),
    (0x2191, b'^'),
    (0x2192, b'>'),
    (0x2193, b'v'),
    (0x2194, b'-'),
    (0x2195, b'|'),
    (0x2212, b'-'),
    (0x2215, b'/'),
    (0x2216, b'\\'),
    (0x2217, b'*'),
    (0x2223, b'|'),
    (0x2236, b':'),
    (0x223c, b'~'),
    (0x2329, b'<'),
    (0x232a, b'>'),
    (0x3000, b' '),
    (0x3008, b'<'),
    (0x3009, b'>'),
    (0x301a, b'['),
    (0x301b, b']'),
];

/// Removes `.` and `..` segments from the path in `out[start..]` in place.
fn remove_dots(out: &mut Vec<u8>, start: usize) {
    let path = &out[start..];
    if !path.windows(2).any(|w| w == b"/." || w == b"./") && path != b"." && path != b".." {
        return;
    }
    let mut w = start;
    let mut r = start;
    let end = out.len();
    while r < end {
        // One segment: from r up to the next '/' (exclusive).
        let seg_end = out[r..end]
            .iter()
            .skip(1)
            .position(|&b| b == b'/')
            .map_or(end, |p| r + 1 + p);
        let seg = &out[r..seg_end];
        let body = seg.strip_prefix(b"/").unwrap_or(seg);
        let slash = seg.first() == Some(&b'/');
        if body == b"." {
            // "/." keeps a trailing "/" when last.
            if seg_end == end && slash {
                out[w] = b'/';
                w += 1;
            }
        } else if body == b".." {
            // Drop the previous segment.
            while w > start && out[w - 1] != b'/' {
                w -= 1;
            }
            if w > start {
                w -= 1;
            }
            if seg_end == end && slash {
                out[w] = b'/';
                w += 1;
            }
        } else {
            out.copy_within(r..seg_end, w);
            w += seg_end - r;
        }
        r = seg_end;
    }
    out.truncate(w);
}

/// True for the index of a body buffer (those [`Buffers::lend_body`] can
/// hold elsewhere).
fn is_body(i: usize) -> bool {
    i == Buf::FileData as usize || i == Buf::RequestBody as usize || i == Buf::ResponseBody as usize
}

/// A message's buffers, written into one scratch vector.
#[derive(Debug, Clone, Default)]
pub struct Buffers {
    /// The bytes of every buffer.
    pub bytes: Vec<u8>,
    /// Where each [`Buf`] is in `bytes`, if the message has it.
    pub spans: [Option<(u32, u32)>; NBUF],
    /// The parsed head (reused).
    pub head: Box<Head>,
    /// The body buffers' bytes when lent rather than copied
    /// ([`Buffers::lend_body`]); their spans are then into this.
    lent: Option<Vec<u8>>,
    /// A head in the lent bytes whose buffers are built when first needed
    /// ([`Buffers::defer_head`]): where, and whether it is a request's.
    deferred: Option<(Range<usize>, bool)>,
}

impl Default for Head {
    fn default() -> Self {
        Head {
            line: 0..0,
            first: 0..0,
            second: 0..0,
            third: 0..0,
            block: 0..0,
            fields: std::array::from_fn(|_| (0..0, 0..0)),
            nfields: 0,
        }
    }
}

impl Buffers {
    /// The bytes of buffer `b`, if the message has it.
    #[inline]
    pub fn get(&self, b: Buf) -> Option<&[u8]> {
        self.span_bytes(b as usize)
    }

    /// [`Buffers::get`] by the buffer's index.
    #[inline]
    pub fn span_bytes(&self, i: usize) -> Option<&[u8]> {
        let (a, z) = self.spans[i]?;
        let from = match &self.lent {
            Some(l) if is_body(i) => l,
            _ => &self.bytes,
        };
        Some(&from[a as usize..z as usize])
    }

    /// Makes `raw[body]` the message's body buffer (after
    /// [`Buffers::build_joined`] of its head, without a body), holding
    /// `raw` until [`Buffers::take_lent`].
    pub fn lend_body(&mut self, raw: Vec<u8>, body: Range<usize>, request: bool) {
        let span = Some((body.start as u32, body.end as u32));
        self.spans[Buf::FileData as usize] = span;
        let which = if request {
            Buf::RequestBody
        } else {
            Buf::ResponseBody
        };
        self.spans[which as usize] = span;
        self.lent = Some(raw);
    }

    /// Leaves the head's buffers unbuilt until [`Buffers::head_ready`]: the
    /// head is `head` in the bytes [`Buffers::lend_body`] took.
    pub fn defer_head(&mut self, head: Range<usize>, request: bool) {
        self.deferred = Some((head, request));
    }

    /// Builds the head's buffers if [`Buffers::defer_head`] deferred them.
    pub fn head_ready(&mut self) {
        let Some((head, request)) = self.deferred.take() else {
            return;
        };
        let Some(raw) = self.lent.take() else {
            return;
        };
        if let Some(h) = raw.get(head) {
            self.build_head(h, request);
        }
        self.lent = Some(raw);
    }

    /// Gives back the bytes [`Buffers::lend_body`] took, if it did; the
    /// body buffers are then absent.
    pub fn take_lent(&mut self) -> Option<Vec<u8>> {
        self.deferred = None;
        let raw = self.lent.take()?;
        for b in [Buf::FileData, Buf::RequestBody, Buf::ResponseBody] {
            self.spans[b as usize] = None;
        }
        Some(raw)
    }

    fn put(&mut self, b: Buf, bytes: &[u8]) {
        let a = self.bytes.len() as u32;
        self.bytes.extend_from_slice(bytes);
        self.spans[b as usize] = Some((a, self.bytes.len() as u32));
    }

    fn begin(&mut self) -> u32 {
        self.bytes.len() as u32
    }

    fn end(&mut self, b: Buf, a: u32) {
        self.spans[b as usize] = Some((a, self.bytes.len() as u32));
    }

    /// Builds the buffers of a message: `head` its complete head (if in the
    /// packet), `body` the ranges of `data` that are its body bytes.
    pub fn build(
        &mut self,
        head: Option<&[u8]>,
        data: &[u8],
        body: &[Range<usize>],
        request: bool,
    ) {
        self.bytes.clear();
        self.spans = [None; NBUF];
        if let Some(h) = head {
            self.build_head(h, request);
        }
        if !body.is_empty() {
            let a = self.begin();
            for r in body {
                self.bytes.extend_from_slice(&data[r.clone()]);
            }
            self.end_body(a, request);
        }
    }

    /// Builds the buffers of a message from `head` (if known) and a body
    /// buffer made of `body`'s parts joined (absent if `body` is None).
    pub fn build_joined(&mut self, head: Option<&[u8]>, body: Option<[&[u8]; 2]>, request: bool) {
        debug_assert!(self.lent.is_none(), "lent bytes not taken back");
        self.deferred = None;
        self.bytes.clear();
        self.spans = [None; NBUF];
        if let Some(h) = head {
            self.build_head(h, request);
        }
        if let Some(parts) = body {
            let a = self.begin();
            for p in parts {
                self.bytes.extend_from_slice(p);
            }
            self.end_body(a, request);
        }
    }

    /// Ends the body buffer begun at `a`: `file.data` and the direction's
    /// body buffer.
    fn end_body(&mut self, a: u32, request: bool) {
        self.end(Buf::FileData, a);
        let span = self.spans[Buf::FileData as usize];
        let which = if request {
            Buf::RequestBody
        } else {
            Buf::ResponseBody
        };
        self.spans[which as usize] = span;
    }

    fn build_head(&mut self, h: &[u8], request: bool) {
        let mut head = std::mem::take(&mut self.head);
        head.parse(h, request);
        let hd = &*head;
        // Each side's own buffer, so that an event of one is never decided
        // on the other's head.
        let raw = if request {
            Buf::StartRaw
        } else {
            Buf::StartRawResponse
        };
        self.put(raw, h);
        let target = &h[hd.second.clone()];
        // An absolute target's authority, when it names a host.
        let mut authority = None;
        if request {
            self.put(Buf::RequestLine, &h[hd.line.clone()]);
            let method = &h[hd.first.clone()];
            self.put(Buf::Method, method);
            if !target.is_empty() {
                self.put(Buf::UriRaw, target);
            }
            let absolute = split_absolute(target);
            authority = absolute.map(|(a, _)| a).filter(|a| !uri_host(a).is_empty());
            // A CONNECT's target is an authority, and an absolute target
            // without a path has no path either: libhtp has no normalised
            // URI for them.
            let no_path = matches!(absolute, Some((_, b"")));
            if !target.is_empty() && method != b"CONNECT" && !no_path {
                let a = self.begin();
                normalise_uri(target, &mut self.bytes);
                self.end(Buf::Uri, a);
            }
            if !hd.third.is_empty() {
                self.put(Buf::Protocol, &h[hd.third.clone()]);
            }
        } else {
            self.put(Buf::ResponseLine, &h[hd.line.clone()]);
            // libhtp has no value for a part a status line lacks (a reason
            // phrase, typically).
            for (r, b) in [
                (&hd.first, Buf::Protocol),
                (&hd.second, Buf::StatCode),
                (&hd.third, Buf::StatMsg),
            ] {
                if !r.is_empty() {
                    self.put(b, &h[r.clone()]);
                }
            }
        }
        self.put(Buf::HeaderRaw, &h[hd.block.clone()]);
        let fields = &hd.fields[..hd.nfields];
        // Fields repeating an earlier one's name (libhtp merges them into
        // the first, values joined by `, `); most heads have none.
        let dups = fields.iter().enumerate().any(|(i, (n, _))| {
            fields[..i]
                .iter()
                .any(|(m, _)| h[m.clone()].eq_ignore_ascii_case(&h[n.clone()]))
        });
        let a = self.begin();
        for i in 0..fields.len() {
            let name = &h[fields[i].0.clone()];
            let skip: &[u8] = if request { b"cookie" } else { b"set-cookie" };
            if name.eq_ignore_ascii_case(skip) || (dups && repeats(h, fields, i)) {
                continue;
            }
            self.bytes.extend_from_slice(name);
            self.bytes.extend_from_slice(b": ");
            push_value(&mut self.bytes, h, fields, i, dups);
            self.bytes.extend_from_slice(b"\r\n");
        }
        self.end(Buf::Header, a);
        let a = self.begin();
        self.bytes.extend_from_slice(&h[hd.line.clone()]);
        self.bytes.extend_from_slice(b"\r\n");
        for i in 0..fields.len() {
            if dups && repeats(h, fields, i) {
                continue;
            }
            self.bytes.extend_from_slice(&h[fields[i].0.clone()]);
            self.bytes.extend_from_slice(b": ");
            push_value(&mut self.bytes, h, fields, i, dups);
            self.bytes.extend_from_slice(b"\r\n");
        }
        self.bytes.extend_from_slice(b"\r\n");
        self.end(Buf::Start, a);
        let a = self.begin();
        self.bytes.extend_from_slice(b"\r\n");
        for (i, (n, _)) in fields.iter().enumerate() {
            if dups && repeats(h, fields, i) {
                continue;
            }
            self.bytes.extend_from_slice(&h[n.clone()]);
            self.bytes.extend_from_slice(b"\r\n");
        }
        self.bytes.extend_from_slice(b"\r\n");
        self.end(Buf::HeaderNames, a);
        let named: &[(&[u8], Buf)] = if request {
            &[
                (b"user-agent", Buf::UserAgent),
                (b"cookie", Buf::Cookie),
                (b"referer", Buf::Referer),
                (b"accept", Buf::Accept),
                (b"accept-encoding", Buf::AcceptEnc),
                (b"accept-language", Buf::AcceptLang),
                (b"content-type", Buf::ContentType),
                (b"content-length", Buf::ContentLen),
                (b"connection", Buf::Connection),
            ]
        } else {
            &[
                (b"set-cookie", Buf::Cookie),
                (b"server", Buf::Server),
                (b"location", Buf::Location),
                (b"content-type", Buf::ContentType),
                (b"content-length", Buf::ContentLen),
                (b"connection", Buf::Connection),
            ]
        };
        for (name, b) in named {
            let Some(i) = fields
                .iter()
                .position(|(n, _)| h[n.clone()].eq_ignore_ascii_case(name))
            else {
                continue;
            };
            let a = self.begin();
            push_value(&mut self.bytes, h, fields, i, dups);
            self.end(*b, a);
        }
        if let Some(auth) = authority {
            // An absolute target's host wins over the Host field (libhtp's
            // hostname): lowercased, without its port, in both buffers.
            let host = uri_host(auth);
            let host = host.strip_suffix(b".").unwrap_or(host);
            let a = self.begin();
            self.bytes
                .extend(host.iter().map(|b| b.to_ascii_lowercase()));
            self.end(Buf::Host, a);
            let span = self.spans[Buf::Host as usize];
            self.spans[Buf::HostRaw as usize] = span;
        } else if let Some(v) = hd.field(h, b"host").filter(|_| request) {
            let a = self.begin();
            push_unfolded(&mut self.bytes, v);
            self.end(Buf::HostRaw, a);
            let z = self.bytes.len();
            // Without the port (an IPv6 literal keeps its brackets).
            let raw = &self.bytes[a as usize..z];
            let mut n = match raw.iter().rposition(|&b| b == b':') {
                Some(i) if !raw[i..].contains(&b']') => i,
                _ => raw.len(),
            };
            if n > 0 && raw[n - 1] == b'.' {
                n -= 1;
            }
            let b = self.begin();
            self.bytes.extend_from_within(a as usize..a as usize + n);
            self.bytes[b as usize..].make_ascii_lowercase();
            self.end(Buf::Host, b);
        }
        self.head = head;
    }
}

/// Appends `v`, a field value as in the head, without the line ends of
/// its folded lines (libhtp joins a folded line to the value, its leading
/// whitespace kept).
pub fn push_unfolded(out: &mut Vec<u8>, v: &[u8]) {
    if memchr::memchr(b'\n', v).is_none() {
        out.extend_from_slice(v);
        return;
    }
    for line in v.split(|&b| b == b'\n') {
        let mut n = line.len();
        while n > 0 && line[n - 1] == b'\r' {
            n -= 1;
        }
        out.extend_from_slice(&line[..n]);
    }
}

/// True if field `i` of `fields` (ranges of `h`) repeats an earlier
/// field's name.
fn repeats(h: &[u8], fields: &[(Range<usize>, Range<usize>)], i: usize) -> bool {
    let n = &h[fields[i].0.clone()];
    fields[..i]
        .iter()
        .any(|(m, _)| h[m.clone()].eq_ignore_ascii_case(n))
}

/// Appends field `i`'s value, and when `dups`, the values of the later
/// fields of the same name after `, ` (libhtp's merged value; not for
/// Content-Length).
fn push_value(
    out: &mut Vec<u8>,
    h: &[u8],
    fields: &[(Range<usize>, Range<usize>)],
    i: usize,
    dups: bool,
) {
    push_unfolded(out, &h[fields[i].1.clone()]);
    let n = &h[fields[i].0.clone()];
    // libhtp keeps the first of repeated Content-Length fields alone.
    if !dups || n.eq_ignore_ascii_case(b"content-length") {
        return;
    }
    for (m, v) in &fields[i + 1..] {
        if h[m.clone()].eq_ignore_ascii_case(n) {
            out.extend_from_slice(b", ");
            push_unfolded(out, &h[v.clone()]);
        }
    }
}

#[cfg(test)]
// Pieces' body ranges are vectors of ranges, one range often.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    /// A `100` status wherever the start line has it, and nothing that
    /// only begins with `100`.
    #[test]
    fn status_100_is_read_from_the_start_line() {
        for h in [
            &b"HTTP/1.1 100 Continue\r\n\r\n"[..],
            b"\r\nHTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.0 100 continue\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 100\r\n\r\n",
            b"HTTP/1.1 100",
        ] {
            assert!(status_is_100(h), "{:?}", String::from_utf8_lossy(h));
        }
        for h in [
            &b"HTTP/1.1 1000 Continue\r\n\r\n"[..],
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-Status: 100\r\n\r\n",
            b"HTTP/1.1 10",
            b"",
        ] {
            assert!(!status_is_100(h), "{:?}", String::from_utf8_lossy(h));
        }
    }

    fn norm(s: &str) -> String {
        let mut v = Vec::new();
        normalise_uri(s.as_bytes(), &mut v);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// Suricata's normalised header buffers (detect-http-header.c,
    /// detect-http-start.c over libhtp's parsed fields): `http.header`
    /// without the cookie field and without a final CRLF, `http.start`
    /// rebuilt as `Name: value`, repeated names merged into the first with
    /// `, `; the raw buffers keep the bytes as sent.
    #[test]
    fn normalised_header_buffers() {
        let head = b"GET / HTTP/1.1\r\nHost:suricata.io\r\nUser-Agent: Mozilla/5.0\r\n\
            Cookie: s=1\r\nConnection: Keep-Alive   \r\nuser-agent: Chrome/121.0.0\r\n\r\n";
        let mut b = Buffers::default();
        b.build_joined(Some(head), None, true);
        let get = |x| String::from_utf8_lossy(b.get(x).unwrap()).into_owned();
        assert_eq!(
            get(Buf::Header),
            "Host: suricata.io\r\nUser-Agent: Mozilla/5.0, Chrome/121.0.0\r\nConnection: Keep-Alive\r\n"
        );
        assert_eq!(
            get(Buf::Start),
            "GET / HTTP/1.1\r\nHost: suricata.io\r\nUser-Agent: Mozilla/5.0, Chrome/121.0.0\r\n\
             Cookie: s=1\r\nConnection: Keep-Alive\r\n\r\n"
        );
        assert_eq!(get(Buf::UserAgent), "Mozilla/5.0, Chrome/121.0.0");
        assert_eq!(
            get(Buf::HeaderNames),
            "\r\nHost\r\nUser-Agent\r\nCookie\r\nConnection\r\n\r\n"
        );
        assert_eq!(get(Buf::Cookie), "s=1");
        assert_eq!(b.get(Buf::StartRaw).unwrap(), &head[..]);
        assert!(get(Buf::HeaderRaw).contains("Host:suricata.io\r\n"));
        // A response leaves out Set-Cookie, and keeps a request's Cookie.
        let head = b"HTTP/1.1 200 OK\r\nSet-Cookie: t=1\r\nCookie: c\r\nServer: x\r\n\r\n";
        let mut b = Buffers::default();
        b.build_joined(Some(head), None, false);
        assert_eq!(b.get(Buf::Header).unwrap(), b"Cookie: c\r\nServer: x\r\n");
        assert_eq!(b.get(Buf::Cookie).unwrap(), b"t=1");
    }

    /// What [`HttpDir::advance`] reports for `data`: each piece's head,
    /// body ranges and end.
    type Seen = Vec<(Option<Range<usize>>, Vec<Range<usize>>, bool)>;

    fn frame(me: &mut HttpDir, peer: &mut HttpDir, data: &[u8], to_server: bool) -> Seen {
        let mut piece = Piece::default();
        let mut seen = Vec::new();
        me.advance(data, to_server, peer, &mut piece, |p, _| {
            seen.push((p.head.clone(), p.body.clone(), p.done));
        });
        seen
    }

    fn buffers(head: &[u8], request: bool) -> Buffers {
        let mut b = Buffers::default();
        b.build_joined(Some(head), None, request);
        b
    }

    fn text(b: &Buffers, x: Buf) -> Option<String> {
        b.get(x).map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// libhtp splits a request line on runs of spaces and tabs and keeps
    /// the method as sent; Suricata detects HTTP by its methods in any
    /// case, followed by a space or a tab.
    #[test]
    fn odd_request_lines() {
        assert!(looks_like_request(b"GET  /x  HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(looks_like_request(b"GET\t/x\tHTTP/1.1\r\n"));
        assert!(looks_like_request(b"get /x HTTP/1.1\r\n"));
        assert!(looks_like_request(b"GET /x\r\n"));
        assert!(looks_like_request(b"get\t"));
        // Without a protocol only a method Suricata knows.
        assert!(!looks_like_request(b"HELO mail.example\r\n"));
        assert!(!looks_like_request(b"GET /x FTP/1.0\r\n"));
        assert!(!looks_like_request(b"GET\r\n"));
        let b = buffers(b"GET  /two-spaces  HTTP/1.1\r\nHost: a\r\n\r\n", true);
        assert_eq!(text(&b, Buf::Method).unwrap(), "GET");
        assert_eq!(text(&b, Buf::UriRaw).unwrap(), "/two-spaces");
        assert_eq!(text(&b, Buf::Uri).unwrap(), "/two-spaces");
        assert_eq!(text(&b, Buf::Protocol).unwrap(), "HTTP/1.1");
        assert_eq!(
            text(&b, Buf::RequestLine).unwrap(),
            "GET  /two-spaces  HTTP/1.1"
        );
        let b = buffers(b"get\t/tab-sep\tHTTP/1.1\r\n\r\n", true);
        assert_eq!(text(&b, Buf::Method).unwrap(), "get");
        assert_eq!(text(&b, Buf::Uri).unwrap(), "/tab-sep");
        assert_eq!(text(&b, Buf::Protocol).unwrap(), "HTTP/1.1");
        // The target ends at a space; a tab splits it only without one.
        let b = buffers(b"GET /a\tb HTTP/1.1\r\n\r\n", true);
        assert_eq!(text(&b, Buf::UriRaw).unwrap(), "/a\tb");
        // A lower-case request is framed as any other.
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        let req = b"get /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nabGET /b HTTP/1.1\r\n\r\n";
        let seen = frame(&mut c, &mut s, req, true);
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].1, vec![38..40]);
        assert_eq!(seen[1].0, Some(40..req.len()));
    }

    /// Chunk-size lines that end the framing, and whether libhtp calls
    /// them invalid (`http.invalid_*_chunk_len`), as Suricata 7.0.10 did on
    /// the Scapy test `app-http-event-chunk-len`.
    #[test]
    fn chunk_lines_libhtp_calls_invalid() {
        let verdict = |line: &[u8], request: bool| {
            let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
            let mut piece = Piece::default();
            let mut msg = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            if !request {
                msg = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                let mut p = Piece::default();
                s.advance(b"GET / HTTP/1.1\r\n\r\n", true, &mut c, &mut p, |_, _| {});
            }
            msg.extend_from_slice(line);
            let (me, peer) = if request {
                (&mut c, &mut s)
            } else {
                (&mut s, &mut c)
            };
            me.advance(&msg, request, peer, &mut piece, |_, _| {});
            (me.phase == Phase::Off, piece.chunk_invalid)
        };
        for bad in [
            &b"zz\r\n"[..],
            b";x\r\n",
            b" zz\r\n",
            b"\r\n5\r\n",
            b"80000000\r\n",
            b"-5\r\n",
        ] {
            assert_eq!(verdict(bad, true), (true, true), "{bad:?}");
        }
        // Leading whitespace and junk after the digits are libhtp's to
        // skip: the framing ends here all the same, without the event.
        for quiet in [&b" 5\r\n"[..], b"\t5\r\n", b"5zz\r\n", b"0x5\r\n"] {
            assert_eq!(verdict(quiet, true), (true, false), "{quiet:?}");
        }
        for fine in [
            &b"5\r\nhello\r\n"[..],
            b"5;ext=1\r\n",
            b"5 \r\n",
            b"7fffffff\r\n",
        ] {
            assert_eq!(verdict(fine, true), (false, false), "{fine:?}");
        }
        // A response's empty line is skipped by libhtp.
        assert_eq!(verdict(b"zz\r\n", false), (true, true));
        assert_eq!(verdict(b"\r\n5\r\n", false), (true, false));
        // The verdict of a line cut after its whitespace is not known.
        assert!(!chunk_line_invalid(b" \t", true));
        assert!(chunk_line_invalid(b" \r\n", true));
        assert!(!chunk_line_invalid(b" \r\n", false));
    }

    /// An HTTP/0.9 request is its request line alone (no protocol, no
    /// headers); a response without a status line is a body up to the
    /// close.
    #[test]
    fn http09() {
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        let req = b"GET /page\r\n";
        assert_eq!(
            frame(&mut c, &mut s, req, true),
            vec![(Some(0..req.len()), vec![], true)]
        );
        assert_eq!(c.phase, Phase::Head);
        let b = buffers(req, true);
        assert_eq!(text(&b, Buf::Uri).unwrap(), "/page");
        assert_eq!(text(&b, Buf::RequestLine).unwrap(), "GET /page");
        assert!(b.get(Buf::Protocol).is_none());
        let resp = b"<html>NINE</html>";
        assert_eq!(
            frame(&mut s, &mut c, resp, false),
            vec![(None, vec![0..resp.len()], false)]
        );
        assert_eq!(s.phase, Phase::ToClose);
        // A status line in any case is one.
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        frame(&mut c, &mut s, b"GET / HTTP/1.1\r\n\r\n", true);
        let seen = frame(&mut s, &mut c, b"http/1.1 204 x\r\n\r\n", false);
        assert_eq!(seen.len(), 1);
        assert!(seen[0].0.is_some());
    }

    /// An obs-fold line continues the previous field's value: libhtp
    /// appends it with its leading whitespace, without the line end.
    #[test]
    fn folded_fields() {
        let head = b"GET /f HTTP/1.1\r\nUser-Agent: Mozilla/5.0\r\n  (EvilBot; x: y)\r\n\
            X-Custom: one\r\n\ttwo\r\nX-Late:\r\n late\r\nAccept: */*\r\n\r\n";
        let b = buffers(head, true);
        assert_eq!(
            text(&b, Buf::UserAgent).unwrap(),
            "Mozilla/5.0  (EvilBot; x: y)"
        );
        assert_eq!(
            text(&b, Buf::Header).unwrap(),
            "User-Agent: Mozilla/5.0  (EvilBot; x: y)\r\nX-Custom: one\ttwo\r\n\
             X-Late: late\r\nAccept: */*\r\n"
        );
        // A continuation line is no field, even with a colon.
        assert_eq!(
            text(&b, Buf::HeaderNames).unwrap(),
            "\r\nUser-Agent\r\nX-Custom\r\nX-Late\r\nAccept\r\n\r\n"
        );
        assert!(text(&b, Buf::HeaderRaw)
            .unwrap()
            .contains("Mozilla/5.0\r\n  (EvilBot"));
    }

    /// A name is trimmed of the spaces before its colon and keeps its case;
    /// it still names User-Agent, Host, Content-Length (framing too).
    #[test]
    fn field_names_trimmed() {
        let head = b"GET /o HTTP/1.1\r\nhOST: www.example.com\r\nuSER-aGENT : sqlmap\r\n\
            X-Empty:\r\nAccept:   text/html   \r\n\r\n";
        let b = buffers(head, true);
        assert_eq!(text(&b, Buf::UserAgent).unwrap(), "sqlmap");
        assert_eq!(text(&b, Buf::Host).unwrap(), "www.example.com");
        assert_eq!(text(&b, Buf::Accept).unwrap(), "text/html");
        assert_eq!(
            text(&b, Buf::Header).unwrap(),
            "hOST: www.example.com\r\nuSER-aGENT: sqlmap\r\nX-Empty: \r\nAccept: text/html\r\n"
        );
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        let req = b"POST / HTTP/1.1\r\nContent-Length\t : 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n";
        let seen = frame(&mut c, &mut s, req, true);
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].1, vec![40..43]);
    }

    /// Of repeated Content-Length fields the first frames the body and is
    /// the field's value (libhtp does not merge them).
    #[test]
    fn first_content_length() {
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        frame(&mut c, &mut s, b"GET / HTTP/1.1\r\n\r\n", true);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 9\r\n\r\n";
        let mut resp = head.to_vec();
        resp.extend_from_slice(b"five!HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        let seen = frame(&mut s, &mut c, &resp, false);
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].1, vec![head.len()..head.len() + 5]);
        let b = buffers(head, false);
        assert_eq!(text(&b, Buf::ContentLen).unwrap(), "5");
        assert_eq!(text(&b, Buf::Header).unwrap(), "Content-Length: 5\r\n");
        // Other repeated fields are still merged.
        let b = buffers(b"HTTP/1.1 200 OK\r\nVia: a\r\nVia: b\r\n\r\n", false);
        assert_eq!(text(&b, Buf::Header).unwrap(), "Via: a, b\r\n");
    }

    /// libhtp's status line: the reason is what follows the code after all
    /// whitespace, its end kept; a line without one has no reason at all.
    #[test]
    fn odd_status_lines() {
        let b = buffers(b"HTTP/1.1 404  Not  Found \r\n\r\n", false);
        assert_eq!(
            text(&b, Buf::ResponseLine).unwrap(),
            "HTTP/1.1 404  Not  Found "
        );
        assert_eq!(text(&b, Buf::StatCode).unwrap(), "404");
        assert_eq!(text(&b, Buf::StatMsg).unwrap(), "Not  Found ");
        let b = buffers(b"HTTP/1.1 200\r\n\r\n", false);
        assert_eq!(text(&b, Buf::StatCode).unwrap(), "200");
        assert!(b.get(Buf::StatMsg).is_none());
        // The code is found past extra spaces: a 204 has no body.
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        frame(&mut c, &mut s, b"GET / HTTP/1.1\r\n\r\n", true);
        let resp = b"HTTP/1.1  204 x\r\nContent-Length: 3\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
        let seen = frame(&mut s, &mut c, resp, false);
        assert_eq!(seen.len(), 2);
        assert!(seen[0].1.is_empty() && seen[1].0.is_some());
    }

    /// A CONNECT has no normalised URI; a 2xx to it has no body and starts
    /// a tunnel, HTTP each way only if it starts an HTTP message.
    #[test]
    fn connect_tunnel() {
        let b = buffers(
            b"CONNECT h.example:443 HTTP/1.1\r\nHost: h.example:443\r\n\r\n",
            true,
        );
        assert_eq!(text(&b, Buf::UriRaw).unwrap(), "h.example:443");
        assert!(b.get(Buf::Uri).is_none());
        assert_eq!(text(&b, Buf::Host).unwrap(), "h.example");
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        frame(&mut c, &mut s, b"CONNECT t:80 HTTP/1.1\r\n\r\n", true);
        let resp = b"HTTP/1.1 200 Connection established\r\n\r\n";
        assert_eq!(
            frame(&mut s, &mut c, resp, false),
            vec![(Some(0..resp.len()), vec![], true)]
        );
        let seen = frame(&mut c, &mut s, b"GET /in HTTP/1.1\r\n\r\n", true);
        assert_eq!(seen.len(), 1);
        let seen = frame(
            &mut s,
            &mut c,
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz",
            false,
        );
        assert_eq!(seen[0].1, vec![38..39]);
        // A TLS tunnel is not HTTP either way.
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        frame(&mut c, &mut s, b"CONNECT t:443 HTTP/1.1\r\n\r\n", true);
        frame(&mut s, &mut c, resp, false);
        assert!(frame(&mut c, &mut s, b"\x16\x03\x01\x00\x05hello", true).is_empty());
        assert_eq!(c.phase, Phase::Off);
        assert!(frame(&mut s, &mut c, b"\x16\x03\x03\x00\x05hello", false).is_empty());
        assert_eq!(s.phase, Phase::Off);
        // A refused CONNECT's response has its body; no tunnel follows.
        let (mut c, mut s) = (HttpDir::default(), HttpDir::default());
        frame(&mut c, &mut s, b"CONNECT t:443 HTTP/1.1\r\n\r\n", true);
        let resp = b"HTTP/1.1 407 No\r\nContent-Length: 2\r\n\r\nno";
        let seen = frame(&mut s, &mut c, resp, false);
        assert_eq!(seen[0].1, vec![resp.len() - 2..resp.len()]);
        assert_eq!(s.flags & TUNNEL, 0);
    }

    /// An absolute target's host (lowercased, without its port) is
    /// http.host and http.host.raw; without a path there is no http.uri.
    #[test]
    fn absolute_target() {
        let b = buffers(
            b"GET http://u@Proxy.Example.NET:8080/a/../x.php?q=1 HTTP/1.1\r\nHost: other\r\n\r\n",
            true,
        );
        assert_eq!(text(&b, Buf::Uri).unwrap(), "/x.php?q=1");
        assert_eq!(text(&b, Buf::Host).unwrap(), "proxy.example.net");
        assert_eq!(text(&b, Buf::HostRaw).unwrap(), "proxy.example.net");
        let b = buffers(
            b"GET http://no-path.example HTTP/1.1\r\nHost: h\r\n\r\n",
            true,
        );
        assert!(b.get(Buf::Uri).is_none());
        assert_eq!(text(&b, Buf::UriRaw).unwrap(), "http://no-path.example");
        assert_eq!(text(&b, Buf::Host).unwrap(), "no-path.example");
        // A folded Host field is unfolded.
        let b = buffers(b"GET / HTTP/1.1\r\nHost: a.\r\n b:80\r\n\r\n", true);
        assert_eq!(text(&b, Buf::HostRaw).unwrap(), "a. b:80");
        assert_eq!(text(&b, Buf::Host).unwrap(), "a. b");
    }

    /// IIS's %uXXXX in the path: a code point up to 0xff is that byte,
    /// another its Windows-1252 best fit or `?`; a decoded `/` separates
    /// segments.
    #[test]
    fn u_encoding() {
        assert_eq!(norm("/%u0063md.exe"), "/cmd.exe");
        assert_eq!(norm("/dir%u2215file"), "/dir/file");
        assert_eq!(norm("/a%U2044..%u2215b"), "/b");
        assert_eq!(norm("/%uFF43%uff4d%uFF44"), "/cmd");
        assert_eq!(norm("/%u0107%u4e2d"), "/c?");
        assert_eq!(norm("/%u00zz/%u12"), "/%u00zz/%u12");
        // Not in the query.
        assert_eq!(norm("/q?%u0041"), "/q?%u0041");
        assert_eq!(best_fit(0x2216), b'\\');
        assert!(BEST_FIT.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn uri_normalisation() {
        assert_eq!(norm("/a%20b?x=%41"), "/a b?x=A");
        assert_eq!(norm("/a//b\\c"), "/a/b/c");
        assert_eq!(norm("/a/./b/../c"), "/a/c");
        assert_eq!(norm("/a/b/.."), "/a/");
        assert_eq!(norm("/../../x"), "/x");
        assert_eq!(norm("http://Example.com/p?q"), "/p?q");
        assert_eq!(norm("/bad%zz%4"), "/bad%zz%4");
        assert_eq!(norm("/a+b"), "/a+b");
    }
}
