//! DNS messages (RFC 1035 §4): a checked, zero-copy view of the wire format,
//! and how the IPS tells DNS traffic by its content ([`detect`]).
//!
//! Parsing never panics and is bounded whatever the bytes: a name is at most
//! [`MAX_NAME`] wire bytes and follows at most [`MAX_POINTERS`] compression
//! pointers; every resource record must lie inside the message. Nothing is
//! allocated: questions are kept as offsets in a fixed array, and names are
//! decoded into the caller's buffer.
//!
//! Two strictnesses ([`Strictness`]). Told by content alone (neither port
//! 53), a message must look like one a resolver sends: pointers point
//! back, the reserved bit is clear, a query has response code 0, at most
//! [`MAX_QUESTIONS`] questions, nothing after the last record — so that
//! other protocols' datagrams are not taken for DNS. On port 53 the bytes
//! are parsed as Suricata's DNS parser does, which an attacker would
//! otherwise use to hide a query from every DNS rule: the reserved bit and
//! a query's response code are ignored, bytes after the last record too,
//! up to [`KEPT_QUESTIONS`] questions are kept (the rest walked), any opcode
//! is taken, a pointer may point anywhere in the message but at itself (a
//! name ends at one after a first pointer), and a name whose pointers
//! loop or whose length runs past [`MAX_NAME`] is cut there.

pub(crate) mod eval;
pub mod events;
pub mod prefilter;

use std::ops::Range;

use crate::pending::Unit;

/// Byte ranges of the header's fields.
pub mod field {
    use super::Range;
    /// Transaction id.
    pub const ID: Range<usize> = 0..2;
    /// Flags: QR, opcode, AA, TC, RD, RA, Z, AD, CD, rcode.
    pub const FLAGS: Range<usize> = 2..4;
    /// Questions.
    pub const QDCOUNT: Range<usize> = 4..6;
    /// Answer records.
    pub const ANCOUNT: Range<usize> = 6..8;
    /// Authority records.
    pub const NSCOUNT: Range<usize> = 8..10;
    /// Additional records.
    pub const ARCOUNT: Range<usize> = 10..12;
    /// The header's length; the question section starts here.
    pub const HEADER_LEN: usize = 12;
}

/// Bits of the flags field.
pub mod flags {
    /// Set in responses.
    pub const QR: u16 = 0x8000;
    /// Reserved, zero in every message (RFC 1035; AD and CD are its neighbours).
    pub const Z: u16 = 0x0040;
}

/// Questions a message may have when told by content (real messages have
/// one); on port 53 the questions past it are walked and not kept.
pub const MAX_QUESTIONS: usize = 16;

/// Questions kept of a message on port 53 (Suricata keeps them all; the
/// rest are walked and not inspected).
pub const KEPT_QUESTIONS: usize = 64;

/// How strictly bytes are taken for a DNS message (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Told by content alone: only what resolvers send.
    Content,
    /// On port 53: as Suricata's parser.
    Port,
}
/// Compression pointers followed in one name.
pub const MAX_POINTERS: usize = 16;
/// A name's longest wire form (RFC 1035 §3.1), length bytes and root included.
pub const MAX_NAME: usize = 255;

/// Why bytes are not a DNS message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// The message ends inside a field, label or record.
    #[error("dns message truncated at byte {0}")]
    Truncated(usize),
    /// An opcode that is not assigned (3, 7 and above).
    #[error("dns opcode {0} is not assigned")]
    Opcode(u8),
    /// The reserved Z bit is set.
    #[error("dns reserved flag bit set")]
    ReservedBit,
    /// A query whose response code is not 0.
    #[error("dns query with response code {0}")]
    QueryRcode(u8),
    /// A query without a question.
    #[error("dns query without a question")]
    NoQuestion,
    /// More questions than [`MAX_QUESTIONS`].
    #[error("dns message with {0} questions")]
    TooManyQuestions(u16),
    /// A label type other than a length or a pointer (0x40, 0x80).
    #[error("dns label type {0:#04x} at byte {1}")]
    LabelType(u8, usize),
    /// A name longer than [`MAX_NAME`] wire bytes.
    #[error("dns name longer than 255 bytes at byte {0}")]
    NameTooLong(usize),
    /// A compression pointer to itself or forward.
    #[error("dns compression pointer at byte {0} does not point back")]
    ForwardPointer(usize),
    /// More than [`MAX_POINTERS`] pointers in one name.
    #[error("dns name follows more than 16 compression pointers at byte {0}")]
    TooManyPointers(usize),
    /// Bytes after the last record the counts announce.
    #[error("dns message has {0} bytes after its last record")]
    TrailingBytes(usize),
    /// Over TCP, the 2-byte length prefix does not give the segment's length.
    #[error("dns over tcp: length prefix {0} for {1} bytes")]
    TcpLength(u16, usize),
}

fn be16(b: &[u8], r: Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

/// A view of a DNS header over a buffer at least [`field::HEADER_LEN`] long.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps `buffer`, checking it holds a header.
    pub fn new_checked(buffer: T) -> Result<Self, DnsError> {
        let n = buffer.as_ref().len();
        if n < field::HEADER_LEN {
            return Err(DnsError::Truncated(n));
        }
        Ok(Header { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Transaction id.
    pub fn id(&self) -> u16 {
        be16(self.b(), field::ID)
    }
    /// The flags field.
    pub fn flags(&self) -> u16 {
        be16(self.b(), field::FLAGS)
    }
    /// True for a response.
    pub fn qr(&self) -> bool {
        self.flags() & flags::QR != 0
    }
    /// Opcode (0 query, 1 inverse query, 2 status, 4 notify, 5 update, 6 DSO).
    pub fn opcode(&self) -> u8 {
        ((self.flags() >> 11) & 0xf) as u8
    }
    /// Response code.
    pub fn rcode(&self) -> u8 {
        (self.flags() & 0xf) as u8
    }
    /// Number of questions.
    pub fn qdcount(&self) -> u16 {
        be16(self.b(), field::QDCOUNT)
    }
    /// Number of answer records.
    pub fn ancount(&self) -> u16 {
        be16(self.b(), field::ANCOUNT)
    }
    /// Number of authority records.
    pub fn nscount(&self) -> u16 {
        be16(self.b(), field::NSCOUNT)
    }
    /// Number of additional records.
    pub fn arcount(&self) -> u16 {
        be16(self.b(), field::ARCOUNT)
    }
}

/// One question: where its name starts, its type and class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Question {
    /// Offset of the name in the message.
    pub name_at: u32,
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
}

/// A message whose every section was checked against its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    buf: &'a [u8],
    nq: u8,
    questions: [Question; KEPT_QUESTIONS],
    /// Questions the header counts (more than kept on port 53).
    qd: u16,
    lenient: bool,
}

/// Walks the name at `start`; returns the offset just after it where it is
/// written (after its first pointer, if any). With `out`, appends the name in
/// dotted form without the root's trailing dot (as Suricata presents
/// `dns.query`): label bytes as they are, `.` between labels.
///
/// `lenient` (port 53): a pointer may point anywhere in the message but at
/// itself, and a name whose pointers loop past [`MAX_POINTERS`] or whose
/// length passes [`MAX_NAME`] ends there (what was read is its name).
fn walk_name(
    buf: &[u8],
    start: usize,
    mut out: Option<&mut Vec<u8>>,
    lenient: bool,
) -> Result<usize, DnsError> {
    let mut pos = start;
    let mut after = None;
    let mut pointers = 0;
    let mut wire = 1usize;
    let mut first = true;
    loop {
        let len = *buf.get(pos).ok_or(DnsError::Truncated(pos))?;
        match len & 0xc0 {
            0x00 if len == 0 => return Ok(after.unwrap_or(pos + 1)),
            0x00 => {
                let label = buf
                    .get(pos + 1..pos + 1 + len as usize)
                    .ok_or(DnsError::Truncated(buf.len()))?;
                wire += 1 + len as usize;
                if wire > MAX_NAME {
                    if lenient {
                        return Ok(after.unwrap_or(pos + 1 + len as usize));
                    }
                    return Err(DnsError::NameTooLong(pos));
                }
                if let Some(o) = out.as_deref_mut() {
                    if !first {
                        o.push(b'.');
                    }
                    o.extend_from_slice(label);
                }
                first = false;
                pos += 1 + len as usize;
            }
            0xc0 => {
                let lo = *buf.get(pos + 1).ok_or(DnsError::Truncated(pos + 1))?;
                let target = (((len & 0x3f) as usize) << 8) | lo as usize;
                // Suricata ends a name at a pointer to itself once a
                // first pointer was followed (its "infinite loop" event).
                if let Some(a) = after.filter(|_| target == pos && lenient) {
                    return Ok(a);
                }
                if target == pos || (target > pos && !lenient) {
                    return Err(DnsError::ForwardPointer(pos));
                }
                pointers += 1;
                if pointers > MAX_POINTERS {
                    if lenient {
                        return Ok(after.unwrap_or(pos + 2));
                    }
                    return Err(DnsError::TooManyPointers(pos));
                }
                after.get_or_insert(pos + 2);
                pos = target;
            }
            t => return Err(DnsError::LabelType(t, pos)),
        }
    }
}

impl<'a> Message<'a> {
    /// Checks `buf` as one whole DNS message: a header with an assigned opcode
    /// and the reserved bit clear, a query (QR=0) with response code 0 and at
    /// least one question, at most [`MAX_QUESTIONS`] questions, then every
    /// question and resource record its counts announce, ending exactly at the
    /// end of `buf`.
    pub fn parse(buf: &'a [u8]) -> Result<Message<'a>, DnsError> {
        Self::parse_as(buf, Strictness::Content)
    }

    /// [`Message::parse`] with `how` strictness (port 53: Suricata's).
    pub fn parse_as(buf: &'a [u8], how: Strictness) -> Result<Message<'a>, DnsError> {
        let lenient = how == Strictness::Port;
        let h = Header::new_checked(buf)?;
        let op = h.opcode();
        // Suricata takes any opcode (7 and above raise an event).
        if (op == 3 || op > 6) && !lenient {
            return Err(DnsError::Opcode(op));
        }
        if h.flags() & flags::Z != 0 && !lenient {
            return Err(DnsError::ReservedBit);
        }
        if !h.qr() {
            if h.rcode() != 0 && !lenient {
                return Err(DnsError::QueryRcode(h.rcode()));
            }
            if h.qdcount() == 0 {
                return Err(DnsError::NoQuestion);
            }
        }
        if h.qdcount() as usize > MAX_QUESTIONS && !lenient {
            return Err(DnsError::TooManyQuestions(h.qdcount()));
        }
        let mut m = Message {
            buf,
            nq: 0,
            questions: [Question::default(); KEPT_QUESTIONS],
            qd: h.qdcount(),
            lenient,
        };
        let mut pos = field::HEADER_LEN;
        for i in 0..h.qdcount() as usize {
            let end = walk_name(buf, pos, None, lenient)?;
            let f = buf
                .get(end..end + 4)
                .ok_or(DnsError::Truncated(buf.len()))?;
            if let Some(q) = m.questions.get_mut(i) {
                *q = Question {
                    name_at: pos as u32,
                    qtype: be16(f, 0..2),
                    qclass: be16(f, 2..4),
                };
            }
            pos = end + 4;
        }
        m.nq = (h.qdcount() as usize).min(KEPT_QUESTIONS) as u8;
        let records = h.ancount() as usize + h.nscount() as usize + h.arcount() as usize;
        for _ in 0..records {
            // A record is at least 11 bytes: the loop ends with the bytes,
            // whatever the counts claim.
            let end = walk_name(buf, pos, None, lenient)?;
            let f = buf
                .get(end..end + 10)
                .ok_or(DnsError::Truncated(buf.len()))?;
            let rdlen = be16(f, 8..10) as usize;
            pos = end + 10 + rdlen;
            if pos > buf.len() {
                return Err(DnsError::Truncated(buf.len()));
            }
        }
        if pos != buf.len() && !lenient {
            return Err(DnsError::TrailingBytes(buf.len() - pos));
        }
        Ok(m)
    }

    /// The header.
    pub fn header(&self) -> Header<&'a [u8]> {
        Header { buffer: self.buf }
    }

    /// True for a request (QR clear).
    pub fn is_request(&self) -> bool {
        !self.header().qr()
    }

    /// The questions.
    pub fn questions(&self) -> &[Question] {
        &self.questions[..self.nq as usize]
    }

    /// Calls `f(section, rrname, rdata_name)` for each resource record of
    /// the answer (section 1), authority (2) and additional (3) sections:
    /// the offsets of its owner name and, when its data is a name (CNAME,
    /// PTR, NS, MX's exchange, SOA's primary server), of that name.
    pub fn each_record(&self, mut f: impl FnMut(u8, u32, Option<u32>)) {
        let h = self.header();
        let mut pos = field::HEADER_LEN;
        // Every name was walked by `parse`: the walks below cannot fail.
        for _ in 0..self.qd {
            let Ok(end) = walk_name(self.buf, pos, None, self.lenient) else {
                return;
            };
            pos = end + 4;
        }
        let counts = [h.ancount(), h.nscount(), h.arcount()];
        for (i, n) in counts.into_iter().enumerate() {
            for _ in 0..n {
                let Ok(end) = walk_name(self.buf, pos, None, self.lenient) else {
                    return;
                };
                let Some(fx) = self.buf.get(end..end + 10) else {
                    return;
                };
                let rtype = be16(fx, 0..2);
                let rdlen = be16(fx, 8..10) as usize;
                let rdata = end + 10;
                let name = match rtype {
                    // CNAME, PTR, NS, SOA: the data starts with a name.
                    5 | 12 | 2 | 6 => Some(rdata),
                    // MX: a preference, then the exchange.
                    15 if rdlen > 2 => Some(rdata + 2),
                    _ => None,
                }
                .filter(|&at| {
                    walk_name(self.buf, at, None, self.lenient).is_ok_and(|e| e <= rdata + rdlen)
                });
                f(i as u8 + 1, pos as u32, name.map(|a| a as u32));
                pos = rdata + rdlen;
            }
        }
    }

    /// Appends the name at `at` (an offset [`Message::each_record`] gave) to
    /// `out` in dotted form.
    pub fn write_name_at(&self, at: u32, out: &mut Vec<u8>) {
        let _ = walk_name(self.buf, at as usize, Some(out), self.lenient);
    }

    /// Appends `q`'s name to `out` in dotted form without the trailing dot
    /// (the root is empty).
    pub fn write_name(&self, q: &Question, out: &mut Vec<u8>) {
        // Every question's name was walked by `parse`: this cannot fail.
        let _ = walk_name(self.buf, q.name_at as usize, Some(out), self.lenient);
    }
}

/// How far `b`, a direction's stream bytes from a segment's start (or from
/// a pending unit's start), make up a DNS-over-TCP message with its 2-byte
/// length prefix: [`Unit::Whole`] when `b` is exactly that long (as
/// [`detect`] wants it), [`Unit::Need`] while shorter and what there is of
/// the header is a query's or a response's (an assigned opcode, the
/// reserved bit clear, a query with response code 0 and 1 to
/// [`MAX_QUESTIONS`] questions), [`Unit::Not`] otherwise. [`Message::parse`]
/// checks the whole message.
pub fn unit(b: &[u8]) -> Unit {
    unit_as(b, Strictness::Content)
}

/// [`unit()`] with `how` strictness: on port 53 the header's checks are
/// Suricata's, and bytes going on past the message (a next message in the
/// same segment) make it [`Unit::Whole`] too.
pub fn unit_as(b: &[u8], how: Strictness) -> Unit {
    let lenient = how == Strictness::Port;
    if b.len() < 2 {
        return Unit::Need;
    }
    let n = 2 + u16::from_be_bytes([b[0], b[1]]) as usize;
    // A header, the root name and a question's type and class.
    if n < 2 + field::HEADER_LEN + 5 {
        return Unit::Not;
    }
    match b.len().cmp(&n) {
        std::cmp::Ordering::Equal => return Unit::Whole(n),
        std::cmp::Ordering::Greater if lenient => return Unit::Whole(n),
        std::cmp::Ordering::Greater => return Unit::Not,
        std::cmp::Ordering::Less => {}
    }
    let h = &b[2..];
    if h.len() >= field::FLAGS.end {
        let f = be16(h, field::FLAGS);
        let op = ((f >> 11) & 0xf) as u8;
        let query = f & flags::QR == 0;
        let odd = f & flags::Z != 0 || (query && f & 0xf != 0);
        // An unassigned opcode is not kept pending even on port 53 (whole,
        // Suricata's parser takes it): a stream's first bytes read as one
        // too easily.
        if op == 3 || op > 6 || (odd && !lenient) {
            return Unit::Not;
        }
        if h.len() >= field::QDCOUNT.end {
            let qd = be16(h, field::QDCOUNT) as usize;
            if (qd > MAX_QUESTIONS && !lenient) || (query && qd == 0) {
                return Unit::Not;
            }
        }
    }
    Unit::Need
}

/// Tells DNS by content, whatever the ports: a UDP payload (`tcp` false) is
/// DNS if it parses whole as a [`Message`]. Over TCP the bytes (a segment's,
/// or a pending unit completed by one: [`unit()`]) must be one whole message
/// after its 2-byte length prefix, the prefix giving exactly the rest of the
/// bytes. Not covered: several messages in one segment (not DNS here).
pub fn detect(payload: &[u8], tcp: bool) -> Result<Message<'_>, DnsError> {
    detect_as(payload, tcp, Strictness::Content)
}

/// [`detect`] with `how` strictness (port 53: Suricata's parser's).
pub fn detect_as(payload: &[u8], tcp: bool, how: Strictness) -> Result<Message<'_>, DnsError> {
    if tcp {
        let n = payload.len();
        if n < 2 {
            return Err(DnsError::Truncated(n));
        }
        let len = u16::from_be_bytes([payload[0], payload[1]]);
        if len as usize != n - 2 {
            return Err(DnsError::TcpLength(len, n - 2));
        }
        Message::parse_as(&payload[2..], how)
    } else {
        Message::parse_as(payload, how)
    }
}
