//! The client side of an SMTP session, read as a mail server reads it, and
//! the MIME structure of each message it sends: which parts are attachments
//! and what their decoded bytes are. Sans-IO: [`Reader::feed`] takes the
//! client's stream bytes in any cut and writes the attachments' decoded
//! bytes to an [`Output`]; all of its state is [`Reader`], which
//! [`Reader::encode`] writes to a store record.
//!
//! # What is read
//!
//! * **Commands.** Lines (ending in LF, a CR before it dropped) until `DATA`
//!   or `BDAT n [LAST]` (case-insensitive). Everything else is skipped. The
//!   server's replies are not read: after `DATA` the client's bytes are read
//!   as a message whether or not the server said `354`. A server that
//!   refused it reads them as commands, so reading more than the server
//!   does never hides a message the server received.
//! * **Messages.** After `DATA`, lines up to one that is a lone `.`, with a
//!   leading dot removed (RFC 5321 §4.5.2). A bare LF ends a line as CRLF
//!   does: servers that accept bare LFs exist (the 2023 "SMTP smuggling"
//!   attacks used the difference), and a line is better read as ended than
//!   not. After `BDAT n`, exactly `n` bytes, no dot rules; the message ends
//!   with the `LAST` chunk.
//! * **MIME** (RFC 2045, 2046). Each entity's header fields (unfolded);
//!   `Content-Type` `multipart/*` with a `boundary` opens a level whose
//!   parts start at `--boundary` lines and end at `--boundary--`; a
//!   `message/rfc822` part's body is read as a message of its own (headers,
//!   then its body). A line matching the boundary of an outer level closes
//!   the inner ones, as RFC 2046 §5.1.2 says a mail reader should.
//! * **Attachments** are the entities whose `Content-Disposition` has a
//!   `filename` or whose `Content-Type` has a `name` parameter (also in
//!   RFC 2231's `filename*` form): the entities Suricata's MIME decoder
//!   makes files of, and the bytes its `file_data` inspects on an `smtp`
//!   rule. Their bodies are decoded per `Content-Transfer-Encoding`:
//!   `base64` (characters outside the alphabet skipped, as lenient readers
//!   do), `quoted-printable` (soft line breaks joined), anything else
//!   as-is, lines joined by CRLF; the line break before a boundary belongs
//!   to the boundary (RFC 2046 §5.1.1), not to the data.
//!
//! # Bounds
//!
//! A line is read whole up to [`MAX_LINE`] bytes (RFC 5321's limit on a text
//! line is 1,000): past that, an attachment's bytes are decoded as they
//! come, the rest of a command or header line is dropped, and the line can
//! be neither a boundary, the end of the message nor a command. A header
//! field keeps [`MAX_FIELD`] bytes. [`MAX_DEPTH`] multipart levels are
//! followed, each boundary's first [`MAX_BOUNDARY`] bytes compared (RFC
//! 2046 allows 70); a deeper level's parts read as the body of the part
//! that holds it (counted in [`Output::anomalies`]).

/// Longest line read whole.
pub const MAX_LINE: usize = 1000;
/// Longest header field kept (unfolded).
pub const MAX_FIELD: usize = 2048;
/// Multipart levels followed.
pub const MAX_DEPTH: usize = 16;
/// Boundary bytes kept and compared.
pub const MAX_BOUNDARY: usize = 128;
/// The most bytes [`Reader::encode`] writes.
pub const MAX_ENCODED: usize = 20
    + 3 * 2
    + 2 * MAX_LINE
    + MAX_FIELD
    + 1
    + MAX_DEPTH * (1 + MAX_BOUNDARY)
    + 1
    + MAX_BOUNDARY
    + 4;

/// Where the reader is in the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// Reading commands.
    #[default]
    Command,
    /// Reading a message after `DATA`.
    Data,
    /// Reading a `BDAT` chunk: this many bytes left, and whether it is the
    /// last chunk of the message.
    Bdat(u32, bool),
}

/// Where the MIME reader is in the current entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Part {
    /// Reading an entity's header fields.
    #[default]
    Headers,
    /// Reading an entity's body.
    Body,
    /// A multipart's preamble or epilogue: skipped up to a boundary.
    Skip,
}

/// How an entity's body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Enc {
    #[default]
    Plain,
    Base64,
    Qp,
}

/// What [`Reader::feed`] found: the decoded bytes of attachments, in order,
/// with where each attachment starts and ends.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Output {
    /// Decoded attachment bytes.
    pub bytes: Vec<u8>,
    /// Attachment boundaries, in order, at offsets of `bytes`.
    pub marks: Vec<(usize, Mark)>,
    /// Structures past the bounds (a too deep multipart, an overlong
    /// boundary).
    pub anomalies: u32,
}

/// An attachment starting or ending ([`Output::marks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// An attachment starts: the bytes after it are its own.
    Start,
    /// The attachment ends.
    End,
    /// The message ends (after its attachments' ends).
    Message,
}

impl Output {
    /// Forgets everything, keeping the buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.marks.clear();
        self.anomalies = 0;
    }
}

/// The reader's state between segments (see the module's documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reader {
    phase: Phase,
    /// A `BDAT` message is open (a chunk without `LAST` was read).
    bdat_open: bool,
    /// The command line being read.
    cmd: Vec<u8>,
    /// The command line went past [`MAX_LINE`]: it is no command.
    cmd_long: bool,
    part: Part,
    /// The message line being read (bytes before its LF so far).
    line: Vec<u8>,
    /// The current message line went past [`MAX_LINE`]: its start was
    /// handled, its rest is read as it comes.
    long: bool,
    /// The header field being read (unfolded).
    field: Vec<u8>,
    /// The open multipart levels' boundaries, outermost first.
    bounds: Vec<Vec<u8>>,
    /// The current entity's `boundary`, if it is a multipart.
    boundary: Option<Vec<u8>>,
    /// The current entity is `message/rfc822`.
    rfc822: bool,
    /// The current entity is an attachment.
    attach: bool,
    enc: Enc,
    /// An attachment is open (its bytes go to the output).
    file: bool,
    /// A line break is due before the attachment's next line (plain and
    /// quoted-printable bodies).
    crlf: bool,
    /// Base64 values of an incomplete quantum.
    b64: Vec<u8>,
}

fn starts_ci(s: &[u8], p: &[u8]) -> bool {
    s.len() >= p.len() && s[..p.len()].eq_ignore_ascii_case(p)
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// The value of parameter `name` (case-insensitive) in a header field's
/// value `v` (`type/sub; a=b; c="d"`), unquoted; also RFC 2231's forms:
/// `name*` (its charset and language dropped) and a continuation's first
/// piece (`name*0`, `name*0*`).
fn param<'v>(v: &'v [u8], name: &[u8]) -> Option<&'v [u8]> {
    // Skip the type (or disposition) before the first `;`.
    let mut rest = &v[memchr::memchr(b';', v)? + 1..];
    loop {
        let s = trim_start(rest);
        let e = memchr::memchr(b'=', s)?;
        let key = trim(&s[..e]);
        let after = trim_start(&s[e + 1..]);
        let (val, next) = if let Some(body) = after.strip_prefix(b"\"") {
            let mut j = 0;
            while j < body.len() && body[j] != b'"' {
                j += if body[j] == b'\\' { 2 } else { 1 };
            }
            let j = j.min(body.len());
            let tail = &body[(j + 1).min(body.len())..];
            (
                &body[..j],
                memchr::memchr(b';', tail).map(|x| &tail[x + 1..]),
            )
        } else {
            match memchr::memchr(b';', after) {
                Some(x) => (trim(&after[..x]), Some(&after[x + 1..])),
                None => (trim(after), None),
            }
        };
        let (base, star) = match memchr::memchr(b'*', key) {
            Some(x) => (&key[..x], &key[x..]),
            None => (key, &b""[..]),
        };
        if base.eq_ignore_ascii_case(name) {
            match star {
                b"" | b"*0" => return Some(val),
                b"*" | b"*0*" => {
                    // `charset'language'value`.
                    let mut parts = val.splitn(3, |&c| c == b'\'');
                    return Some(match (parts.next(), parts.next(), parts.next()) {
                        (Some(_), Some(_), Some(v)) => v,
                        _ => val,
                    });
                }
                // A later piece of a continuation: its first piece decides.
                _ => {}
            }
        }
        rest = next?;
    }
}

fn trim_start(s: &[u8]) -> &[u8] {
    s.trim_ascii_start()
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `BDAT n [LAST]`'s size and whether it is the last chunk.
fn bdat(line: &[u8]) -> Option<(u32, bool)> {
    let rest = line.get(4..)?;
    if !starts_ci(line, b"BDAT") || !rest.first().is_some_and(|c| *c == b' ' || *c == b'\t') {
        return None;
    }
    let mut words = rest
        .split(|c| c.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let n = std::str::from_utf8(words.next()?)
        .ok()?
        .parse::<u32>()
        .ok()?;
    let last = words
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case(b"LAST"));
    Some((n, last))
}

impl Reader {
    /// A reader at the start of a session.
    pub fn new() -> Reader {
        Reader::default()
    }

    /// True for a reader in the command phase at a line's start: what a
    /// reader of a session picked up anywhere assumes.
    pub fn is_idle(&self) -> bool {
        self.phase == Phase::Command && !self.bdat_open && self.cmd.is_empty() && !self.cmd_long
    }

    /// True while an attachment is open: bytes read now may be its own.
    pub fn in_file(&self) -> bool {
        self.file
    }

    /// Reads the client's next stream bytes.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Output) {
        while !data.is_empty() {
            match self.phase {
                Phase::Bdat(left, last) => {
                    let n = (left as usize).min(data.len());
                    self.chunk_bytes(&data[..n], out);
                    data = &data[n..];
                    self.phase = Phase::Bdat(left - n as u32, last);
                    self.chunk_end(out);
                }
                Phase::Data => {
                    let (bytes, ended) = match memchr::memchr(b'\n', data) {
                        Some(i) => (&data[..i], true),
                        None => (data, false),
                    };
                    data = &data[bytes.len() + usize::from(ended)..];
                    self.message_line(bytes, ended, true, out);
                }
                Phase::Command => {
                    let (bytes, ended) = match memchr::memchr(b'\n', data) {
                        Some(i) => (&data[..i], true),
                        None => (data, false),
                    };
                    data = &data[bytes.len() + usize::from(ended)..];
                    self.command(bytes, ended, out);
                }
            }
        }
    }

    /// A `BDAT` chunk's bytes: message lines without the dot rules.
    fn chunk_bytes(&mut self, mut data: &[u8], out: &mut Output) {
        while !data.is_empty() {
            let (bytes, ended) = match memchr::memchr(b'\n', data) {
                Some(i) => (&data[..i], true),
                None => (data, false),
            };
            data = &data[bytes.len() + usize::from(ended)..];
            self.message_line(bytes, ended, false, out);
        }
    }

    /// After a `BDAT` chunk's bytes: the message ends with its `LAST`
    /// chunk (a line without its LF ends there), and commands come after
    /// any other (a line cut by the chunk goes on in the next one).
    fn chunk_end(&mut self, out: &mut Output) {
        if let Phase::Bdat(0, last) = self.phase {
            if last {
                self.message_line(&[], true, false, out);
                self.end_message(out);
            } else {
                self.phase = Phase::Command;
            }
        }
    }

    /// Bytes of a command line (`ended`: its LF came).
    fn command(&mut self, bytes: &[u8], ended: bool, out: &mut Output) {
        if !self.cmd_long {
            if self.cmd.len() + bytes.len() > MAX_LINE {
                self.cmd_long = true;
                self.cmd.clear();
            } else {
                self.cmd.extend_from_slice(bytes);
            }
        }
        if !ended {
            return;
        }
        let long = std::mem::take(&mut self.cmd_long);
        let cmd = std::mem::take(&mut self.cmd);
        if !long {
            let l = trim(&cmd);
            if l.eq_ignore_ascii_case(b"DATA") && !self.bdat_open {
                self.start_message();
                self.phase = Phase::Data;
            } else if let Some((n, last)) = bdat(l) {
                if !self.bdat_open {
                    self.start_message();
                    self.bdat_open = true;
                }
                self.phase = Phase::Bdat(n, last);
                self.chunk_end(out);
            }
        }
        self.cmd = cmd;
        self.cmd.clear();
    }

    /// A new message: its top entity's headers come first.
    fn start_message(&mut self) {
        self.bounds.clear();
        self.line.clear();
        self.long = false;
        self.part = Part::Headers;
        self.reset_entity();
    }

    /// The message ended (its lone `.`, its last `BDAT` chunk).
    fn end_message(&mut self, out: &mut Output) {
        self.close_file(out);
        out.marks.push((out.bytes.len(), Mark::Message));
        self.start_message();
        self.phase = Phase::Command;
        self.bdat_open = false;
    }

    fn reset_entity(&mut self) {
        self.field.clear();
        self.boundary = None;
        self.rfc822 = false;
        self.attach = false;
        self.enc = Enc::Plain;
        self.file = false;
        self.crlf = false;
        self.b64.clear();
    }

    fn close_file(&mut self, out: &mut Output) {
        if self.file {
            out.marks.push((out.bytes.len(), Mark::End));
            self.file = false;
        }
    }

    /// Bytes of a message line (`ended`: its LF came; `dot`: the DATA
    /// phase's dot rules apply).
    fn message_line(&mut self, bytes: &[u8], ended: bool, dot: bool, out: &mut Output) {
        if self.long {
            self.body_piece(bytes, false, ended, out);
            if ended {
                self.long = false;
            }
            return;
        }
        if self.line.len() + bytes.len() > MAX_LINE {
            // Too long to be a boundary, a command or the end: its start is
            // handled now, the rest as it comes.
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(bytes);
            let start = usize::from(dot && line.first() == Some(&b'.'));
            let end = line.len() - usize::from(ended && line.last() == Some(&b'\r'));
            match self.part {
                Part::Headers => self.header_line(&line[start..end]),
                Part::Body => self.body_piece(&line[start..end.max(start)], true, ended, out),
                Part::Skip => {}
            }
            line.clear();
            self.line = line;
            self.long = !ended;
            return;
        }
        self.line.extend_from_slice(bytes);
        if !ended {
            return;
        }
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let mut l: &[u8] = &line;
        if dot {
            if l == b"." {
                self.end_message(out);
                line.clear();
                self.line = line;
                return;
            }
            if l.first() == Some(&b'.') {
                l = &l[1..];
            }
        }
        self.mime_line(l, out);
        line.clear();
        self.line = line;
    }

    /// A whole message line (its CR dropped, dot-unstuffed).
    fn mime_line(&mut self, l: &[u8], out: &mut Output) {
        if let Some(rest) = l.strip_prefix(b"--") {
            // Innermost first: an outer boundary closes the inner levels.
            for i in (0..self.bounds.len()).rev() {
                let b = &self.bounds[i];
                let Some(after) = rest.strip_prefix(&b[..]) else {
                    continue;
                };
                let after = trim(after);
                // A boundary kept cut ([`MAX_BOUNDARY`]) may be followed by
                // the rest of itself.
                let cut = b.len() == MAX_BOUNDARY;
                let close = after.ends_with(b"--") && (cut || after == b"--");
                if !(after.is_empty() || close || cut) {
                    continue;
                }
                self.close_file(out);
                self.bounds.truncate(i + 1);
                self.reset_entity();
                if close {
                    self.bounds.pop();
                    self.part = Part::Skip;
                } else {
                    self.part = Part::Headers;
                }
                return;
            }
        }
        match self.part {
            Part::Headers => {
                if l.is_empty() {
                    self.end_headers(out);
                } else {
                    self.header_line(l);
                }
            }
            Part::Body => self.body_piece(l, true, true, out),
            Part::Skip => {}
        }
    }

    /// A header line: a new field, or a folded one's continuation.
    fn header_line(&mut self, l: &[u8]) {
        if matches!(l.first(), Some(b' ' | b'\t')) {
            if !self.field.is_empty() {
                let room = MAX_FIELD.saturating_sub(self.field.len());
                self.field.extend_from_slice(&l[..l.len().min(room)]);
            }
            return;
        }
        self.finish_field();
        self.field.extend_from_slice(&l[..l.len().min(MAX_FIELD)]);
    }

    /// The field read so far says what it says about the entity.
    fn finish_field(&mut self) {
        let f = std::mem::take(&mut self.field);
        if let Some(c) = memchr::memchr(b':', &f) {
            let (name, value) = (trim(&f[..c]), trim(&f[c + 1..]));
            if name.eq_ignore_ascii_case(b"content-type") {
                let ty = trim(value.split(|&c| c == b';').next().unwrap_or(value));
                if starts_ci(ty, b"multipart/") {
                    if let Some(b) = param(value, b"boundary").filter(|b| !b.is_empty()) {
                        self.boundary = Some(b[..b.len().min(MAX_BOUNDARY)].to_vec());
                    }
                } else if ty.eq_ignore_ascii_case(b"message/rfc822") {
                    self.rfc822 = true;
                }
                if param(value, b"name").is_some() {
                    self.attach = true;
                }
            } else if name.eq_ignore_ascii_case(b"content-disposition") {
                if param(value, b"filename").is_some() {
                    self.attach = true;
                }
            } else if name.eq_ignore_ascii_case(b"content-transfer-encoding") {
                self.enc = if value.eq_ignore_ascii_case(b"base64") {
                    Enc::Base64
                } else if value.eq_ignore_ascii_case(b"quoted-printable") {
                    Enc::Qp
                } else {
                    Enc::Plain
                };
            }
        }
        self.field = f;
        self.field.clear();
    }

    /// The empty line after an entity's header fields.
    fn end_headers(&mut self, out: &mut Output) {
        self.finish_field();
        if let Some(b) = self.boundary.take() {
            if self.bounds.len() < MAX_DEPTH {
                self.bounds.push(b);
                self.part = Part::Skip;
                return;
            }
            out.anomalies += 1;
        }
        if self.rfc822 {
            // The body is a message: its own header fields come next.
            self.reset_entity();
            self.part = Part::Headers;
            return;
        }
        self.part = Part::Body;
        if self.attach {
            out.marks.push((out.bytes.len(), Mark::Start));
            self.file = true;
            self.crlf = false;
            self.b64.clear();
        }
    }

    /// A piece of a body line: `first` if it starts the line, `last` if it
    /// ends it (its CR, if any, still there for a long line's last piece).
    fn body_piece(&mut self, mut p: &[u8], first: bool, last: bool, out: &mut Output) {
        if !self.file || self.part != Part::Body {
            return;
        }
        if last && !first && p.last() == Some(&b'\r') {
            p = &p[..p.len() - 1];
        }
        match self.enc {
            Enc::Base64 => {
                for &c in p {
                    if c == b'=' {
                        // Padding ends the quantum.
                        let n = self.b64.len();
                        if n >= 2 {
                            let v = &self.b64;
                            out.bytes.push(v[0] << 2 | v[1] >> 4);
                            if n == 3 {
                                out.bytes.push(v[1] << 4 | v[2] >> 2);
                            }
                        }
                        self.b64.clear();
                        continue;
                    }
                    let Some(v) = crate::rules::payload::b64_value(c) else {
                        continue;
                    };
                    self.b64.push(v);
                    if self.b64.len() == 4 {
                        let v = &self.b64;
                        out.bytes.extend_from_slice(&[
                            v[0] << 2 | v[1] >> 4,
                            v[1] << 4 | v[2] >> 2,
                            v[2] << 6 | v[3],
                        ]);
                        self.b64.clear();
                    }
                }
            }
            Enc::Plain => {
                if first && std::mem::take(&mut self.crlf) {
                    out.bytes.extend_from_slice(b"\r\n");
                }
                out.bytes.extend_from_slice(p);
                if last {
                    self.crlf = true;
                }
            }
            Enc::Qp => {
                if first && std::mem::take(&mut self.crlf) {
                    out.bytes.extend_from_slice(b"\r\n");
                }
                // Trailing white space is not data (RFC 2045 §6.7 rule 3).
                if last {
                    p = p.trim_ascii_end();
                }
                let soft = last && p.last() == Some(&b'=');
                if soft {
                    p = &p[..p.len() - 1];
                }
                let mut i = 0;
                while i < p.len() {
                    let c = p[i];
                    if c == b'=' {
                        if let (Some(h), Some(l)) = (
                            p.get(i + 1).copied().and_then(hex),
                            p.get(i + 2).copied().and_then(hex),
                        ) {
                            out.bytes.push(h << 4 | l);
                            i += 3;
                            continue;
                        }
                    }
                    out.bytes.push(c);
                    i += 1;
                }
                if last && !soft {
                    self.crlf = true;
                }
            }
        }
    }

    /// Bytes [`Reader::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        let opt = |b: &Option<Vec<u8>>| 1 + b.as_ref().map_or(0, Vec::len);
        16 + 2
            + self.cmd.len()
            + 2
            + self.line.len()
            + 2
            + self.field.len()
            + 1
            + self.bounds.iter().map(|b| 1 + b.len()).sum::<usize>()
            + opt(&self.boundary)
            + 1
            + self.b64.len()
    }

    /// Writes the reader's state.
    pub fn encode(&self, w: &mut sluice_state::Writer<'_>) {
        let (phase, left, last) = match self.phase {
            Phase::Command => (0, 0, false),
            Phase::Data => (1, 0, false),
            Phase::Bdat(n, l) => (2, n, l),
        };
        let flags = u8::from(last)
            | u8::from(self.bdat_open) << 1
            | u8::from(self.cmd_long) << 2
            | u8::from(self.long) << 3
            | u8::from(self.rfc822) << 4
            | u8::from(self.attach) << 5
            | u8::from(self.file) << 6
            | u8::from(self.crlf) << 7;
        let part = match self.part {
            Part::Headers => 0,
            Part::Body => 1,
            Part::Skip => 2,
        };
        let enc = match self.enc {
            Enc::Plain => 0,
            Enc::Base64 => 1,
            Enc::Qp => 2,
        };
        w.u8(phase).u32(left).u8(flags).u8(part).u8(enc);
        w.u16(self.cmd.len() as u16).bytes(&self.cmd);
        w.u16(self.line.len() as u16).bytes(&self.line);
        w.u16(self.field.len() as u16).bytes(&self.field);
        w.u8(self.bounds.len() as u8);
        for b in &self.bounds {
            w.u8(b.len() as u8).bytes(b);
        }
        match &self.boundary {
            Some(b) => w.u8(b.len() as u8 + 1).bytes(b),
            None => w.u8(0),
        };
        w.u8(self.b64.len() as u8).bytes(&self.b64);
        // Room for later fields without a new layout.
        w.u32(0).u32(0);
    }

    /// Reads what [`Reader::encode`] wrote, checking every length against
    /// its bound.
    pub fn decode(r: &mut sluice_state::Reader<'_>) -> Result<Reader, sluice_state::DecodeError> {
        use sluice_state::DecodeError as E;
        let phase = r.u8()?;
        let left = r.u32()?;
        let flags = r.u8()?;
        let phase = match phase {
            0 => Phase::Command,
            1 => Phase::Data,
            2 => Phase::Bdat(left, flags & 1 != 0),
            _ => return Err(E("smtp reader: unknown phase")),
        };
        let part = match r.u8()? {
            0 => Part::Headers,
            1 => Part::Body,
            2 => Part::Skip,
            _ => return Err(E("smtp reader: unknown part")),
        };
        let enc = match r.u8()? {
            0 => Enc::Plain,
            1 => Enc::Base64,
            2 => Enc::Qp,
            _ => return Err(E("smtp reader: unknown encoding")),
        };
        let mut vec = |max: usize, wide: bool| -> Result<Vec<u8>, E> {
            let n = if wide {
                r.u16()? as usize
            } else {
                r.u8()? as usize
            };
            if n > max {
                return Err(E("smtp reader: a field over its bound"));
            }
            Ok(r.bytes(n)?.to_vec())
        };
        let cmd = vec(MAX_LINE, true)?;
        let line = vec(MAX_LINE, true)?;
        let field = vec(MAX_FIELD, true)?;
        let nb = r.u8()? as usize;
        if nb > MAX_DEPTH {
            return Err(E("smtp reader: too many boundaries"));
        }
        let mut bounds = Vec::with_capacity(nb);
        for _ in 0..nb {
            let n = r.u8()? as usize;
            if n == 0 || n > MAX_BOUNDARY {
                return Err(E("smtp reader: a boundary over its bound"));
            }
            bounds.push(r.bytes(n)?.to_vec());
        }
        let boundary = match r.u8()? as usize {
            0 => None,
            n if n - 1 <= MAX_BOUNDARY => Some(r.bytes(n - 1)?.to_vec()),
            _ => return Err(E("smtp reader: a boundary over its bound")),
        };
        let n64 = r.u8()? as usize;
        if n64 > 3 {
            return Err(E("smtp reader: a base64 quantum over its bound"));
        }
        let b64 = r.bytes(n64)?.to_vec();
        if b64.iter().any(|&v| v > 63) {
            return Err(E("smtp reader: a base64 value over 63"));
        }
        r.u32()?;
        r.u32()?;
        Ok(Reader {
            phase,
            bdat_open: flags & 2 != 0,
            cmd,
            cmd_long: flags & 4 != 0,
            part,
            line,
            long: flags & 8 != 0,
            field,
            bounds,
            boundary,
            rfc822: flags & 16 != 0,
            attach: flags & 32 != 0,
            enc,
            file: flags & 64 != 0,
            crlf: flags & 128 != 0,
            b64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data` in base64, in 76-character lines as mailers write it.
    fn b64(data: &[u8]) -> String {
        use base64::Engine;
        let s = base64::engine::general_purpose::STANDARD.encode(data);
        s.as_bytes()
            .chunks(76)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect::<Vec<_>>()
            .join("\r\n")
    }

    /// The attachments of a session, each whole.
    fn files(out: &Output) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        let mut open = None;
        for &(at, m) in &out.marks {
            match m {
                Mark::Start => open = Some(at),
                Mark::End => v.push(out.bytes[open.take().unwrap()..at].to_vec()),
                Mark::Message => assert!(open.is_none()),
            }
        }
        if let Some(a) = open {
            v.push(out.bytes[a..].to_vec());
        }
        v
    }

    fn read(session: &[u8]) -> Output {
        let mut r = Reader::new();
        let mut out = Output::default();
        r.feed(session, &mut out);
        out
    }

    /// The session cut into `cuts` pieces, the reader's state written and
    /// read back between them (as a record in the store between packets).
    fn read_cut(session: &[u8], cuts: &[usize]) -> Output {
        let mut r = Reader::new();
        let mut out = Output::default();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&session.len())) {
            r.feed(&session[at..c], &mut out);
            let mut buf = Vec::new();
            r.encode(&mut sluice_state::Writer::new(&mut buf));
            assert_eq!(buf.len(), r.encoded_len());
            let mut rd = sluice_state::Reader::new(&buf);
            r = Reader::decode(&mut rd).unwrap();
            rd.finish().unwrap();
            at = c;
        }
        out
    }

    const PAYLOAD: &[u8] =
        b"\x00\x01binary \xff\xfe payload with /webapps/zimbra/public in it\n and more";

    fn mixed() -> Vec<u8> {
        format!(
            "EHLO client.example\r\nMAIL FROM:<a@x.example>\r\nRCPT TO:<b@y.example>\r\nDATA\r\n\
             From: a@x.example\r\nSubject: hello\r\nMIME-Version: 1.0\r\n\
             Content-Type: multipart/mixed;\r\n\tboundary=\"==b1==\"\r\n\r\n\
             This is a preamble.\r\n--==b1==\r\nContent-Type: text/plain\r\n\r\n\
             not a file: /webapps/zimbra/public\r\n--==b1==\r\n\
             Content-Type: application/x-tar; name=\"a.tar\"\r\n\
             Content-Transfer-Encoding: base64\r\n\
             Content-Disposition: attachment; filename=\"a.tar\"\r\n\r\n{}\r\n--==b1==--\r\n\
             epilogue\r\n.\r\nQUIT\r\n",
            b64(PAYLOAD)
        )
        .into_bytes()
    }

    #[test]
    fn a_base64_attachment_is_decoded_and_the_text_part_is_no_file() {
        let out = read(&mixed());
        assert_eq!(files(&out), vec![PAYLOAD.to_vec()]);
        assert_eq!(out.anomalies, 0);
    }

    #[test]
    fn every_cut_reads_the_same() {
        let s = mixed();
        let whole = read(&s);
        for c in 0..=s.len() {
            assert_eq!(read_cut(&s, &[c]), whole, "cut at {c}");
        }
        let mut rng = crate::testrng::Lcg::new(7);
        for _ in 0..200 {
            let mut cuts: Vec<usize> = (0..rng.below(12) as usize)
                .map(|_| rng.below(s.len() as u64 + 1) as usize)
                .collect();
            cuts.sort_unstable();
            assert_eq!(read_cut(&s, &cuts), whole, "cuts {cuts:?}");
        }
    }

    #[test]
    fn quoted_printable_and_plain_attachments() {
        let s = b"DATA\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n--XX\r\n\
            Content-Disposition: attachment; filename=q.txt\r\n\
            Content-Transfer-Encoding: quoted-printable\r\n\r\n\
            caf=C3=A9 soft=\r\nbreak   \r\nline two\r\n--XX\r\n\
            Content-Disposition: attachment; filename=p.txt\r\n\r\n\
            first\r\n..dot-stuffed\r\nlast\r\n--XX--\r\n.\r\n";
        assert_eq!(
            files(&read(s)),
            vec![
                b"caf\xc3\xa9 softbreak\r\nline two".to_vec(),
                b"first\r\n.dot-stuffed\r\nlast".to_vec()
            ]
        );
    }

    #[test]
    fn the_lone_dot_ends_the_message_and_the_next_one_is_read_afresh() {
        let one = format!(
            "DATA\r\nContent-Type: application/octet-stream; name=x.bin\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n{}\r\n.\r\n",
            b64(b"first file")
        );
        let two = format!(
            "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\nSubject: x\r\n\
             Content-Disposition: attachment; filename*=UTF-8''%e2.bin\r\n\
             Content-Transfer-Encoding: BASE64\r\n\r\n{}\r\n.\r\n",
            b64(b"second file")
        );
        let out = read(format!("{one}{two}").as_bytes());
        assert_eq!(
            files(&out),
            vec![b"first file".to_vec(), b"second file".to_vec()]
        );
        // Without DATA nothing is a message.
        assert!(read(&two.as_bytes()[two.find("Subject").unwrap()..])
            .marks
            .is_empty());
    }

    #[test]
    fn bdat_chunks_with_commands_between() {
        let body = format!(
            "Content-Type: multipart/mixed; boundary=\"q\"\r\n\r\n--q\r\n\
             Content-Type: application/zip; name=\"z.zip\"\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n{}\r\n--q--\r\n",
            b64(PAYLOAD)
        );
        let (a, b) = body.split_at(body.len() / 2);
        let s = format!(
            "EHLO x\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nBDAT {}\r\n{a}NOOP\r\nBDAT {} LAST\r\n{b}QUIT\r\n",
            a.len(),
            b.len()
        );
        let out = read(s.as_bytes());
        assert_eq!(files(&out), vec![PAYLOAD.to_vec()]);
        // The chunks' bytes are not read as dot-stuffed lines, and a `.`
        // line inside a chunk does not end the message.
        let s2 = format!("BDAT 3\r\n.\r\nBDAT {} LAST\r\n{body}", body.len());
        assert_eq!(files(&read(s2.as_bytes())), vec![PAYLOAD.to_vec()]);
    }

    #[test]
    fn nested_multiparts_and_an_attached_message() {
        let s = format!(
            "DATA\r\nContent-Type: multipart/mixed; boundary=outer\r\n\r\n--outer\r\n\
             Content-Type: multipart/alternative; boundary=inner\r\n\r\n--inner\r\n\
             Content-Type: text/plain\r\n\r\nhi\r\n--inner\r\nContent-Type: text/html\r\n\r\n<p>hi</p>\r\n\
             --outer\r\nContent-Type: message/rfc822\r\n\r\nSubject: fwd\r\n\
             Content-Type: multipart/mixed; boundary=deep\r\n\r\n--deep\r\n\
             Content-Type: application/pdf; name=d.pdf\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n\
             --deep--\r\n--outer--\r\n.\r\n",
            b64(b"%PDF-1.7 deep")
        );
        // `--outer` closed `inner` without its closing line.
        assert_eq!(files(&read(s.as_bytes())), vec![b"%PDF-1.7 deep".to_vec()]);
    }

    #[test]
    fn a_bare_lf_ends_lines_and_long_lines_are_decoded_whole() {
        let big: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        let encoded: String = b64(&big).replace("\r\n", "");
        assert!(encoded.len() > MAX_LINE);
        let s = format!(
            "DATA\nContent-Type: application/octet-stream; name=b\nContent-Transfer-Encoding: base64\n\n{encoded}\n.\n"
        );
        let out = read(s.as_bytes());
        assert_eq!(files(&out), vec![big.clone()]);
        let s = s.into_bytes();
        for c in [5, 100, 1500, 2500, 3000] {
            let cuts = [c, c + 1, (c + 900).min(s.len())];
            assert_eq!(read_cut(&s, &cuts), out, "cut at {c}");
        }
    }

    #[test]
    fn too_deep_a_structure_is_counted_not_followed() {
        let mut s = String::from("DATA\r\n");
        for i in 0..MAX_DEPTH + 4 {
            s.push_str(&format!(
                "Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n"
            ));
        }
        s.push_str("Content-Disposition: attachment; filename=f\r\n\r\nx\r\n.\r\n");
        let out = read(s.as_bytes());
        assert_eq!(out.anomalies, 1);
    }

    #[test]
    fn parameters() {
        assert_eq!(
            param(b"multipart/mixed; boundary=\"a b\"", b"boundary"),
            Some(&b"a b"[..])
        );
        assert_eq!(
            param(b"multipart/mixed;BOUNDARY=x;y=z", b"boundary"),
            Some(&b"x"[..])
        );
        assert_eq!(
            param(b"attachment; filename*=UTF-8'en'a.pdf", b"filename"),
            Some(&b"a.pdf"[..])
        );
        assert_eq!(
            param(
                b"attachment; filename*0=\"a\"; filename*1=\"b\"",
                b"filename"
            ),
            Some(&b"a"[..])
        );
        assert_eq!(param(b"attachment; size=3", b"filename"), None);
        assert_eq!(param(b"text/plain", b"name"), None);
        assert_eq!(param(b"text/plain; filename=x", b"name"), None);
    }

    #[test]
    fn random_input_never_panics_and_state_round_trips() {
        let mut rng = crate::testrng::Lcg::new(11);
        let words: &[&[u8]] = &[
            b"DATA\r\n",
            b"BDAT 5\r\n",
            b"BDAT 0 LAST\r\n",
            b"\r\n",
            b".\r\n",
            b"--b\r\n",
            b"--b--\r\n",
            b"Content-Type: multipart/mixed; boundary=b\r\n",
            b"Content-Disposition: a; filename=x\r\n",
            b"Content-Transfer-Encoding: base64\r\n",
            b"Content-Transfer-Encoding: quoted-printable\r\n",
            b"QUJD=\r\n",
            b"=4",
            b"\n",
            b"\r",
            b" folded\r\n",
            b"Content-Type: message/rfc822\r\n",
        ];
        for _ in 0..2000 {
            let mut s = Vec::new();
            for _ in 0..rng.below(40) {
                if rng.below(4) == 0 {
                    s.extend((0..rng.below(1500)).map(|_| rng.below(256) as u8));
                } else {
                    s.extend_from_slice(words[rng.below(words.len() as u64) as usize]);
                }
            }
            let cut = rng.below(s.len() as u64 + 1) as usize;
            assert_eq!(read_cut(&s, &[cut]), read(&s));
            let bytes: Vec<u8> = (0..rng.below(300)).map(|_| rng.below(256) as u8).collect();
            let _ = Reader::decode(&mut sluice_state::Reader::new(&bytes));
        }
    }
}
