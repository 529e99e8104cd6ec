//! TLS handshakes (RFC 5246 §7.4, RFC 8446 §4.1): a checked, zero-copy view
//! of a ClientHello or ServerHello at the start of a TCP segment, how the IPS
//! tells TLS by its content ([`detect`]), and the buffers its rules inspect
//! ([`Buffers`]): the server name (SNI), the JA3/JA3S fingerprints and the
//! server's certificates (TLS 1.2 and older send them in clear).
//!
//! A hello is recognised when the bytes (a segment's new stream bytes, or a
//! pending unit completed by them) start with a handshake record (content
//! type 22, version 3.x) whose first message is a whole ClientHello (type 1)
//! or ServerHello (type 2) inside that record (the rest of the record may
//! follow). Every length is checked against its container (the extensions
//! must fill their block exactly), so parsing never panics and reads nothing
//! outside the bytes. A hello split across TCP segments is kept as a pending
//! unit until whole ([`unit()`], [`crate::pending`]); one fragmented across
//! TLS records is read from the records' bodies joined ([`defragment`]).
//!
//! The server's Certificate message (type 11, [`certificates`]) is read when
//! it follows the ServerHello (in its record or the next one), or when the
//! bytes start with a handshake record whose first message is a Certificate.
//! A segment boundary inside it is bridged by the pending unit; record
//! boundaries inside a hello or a certificate chain that follows it are
//! bridged by joining the records ([`defragment`]).

pub(crate) mod eval;
pub mod events;
pub mod legacy;
pub mod prefilter;

use std::io::Write as _;
use std::ops::Range;

use md5::{Digest, Md5};

use crate::pending::{Unit, MAX_TLS_UNIT};

/// Byte ranges of the record and handshake headers.
pub mod field {
    use super::Range;
    /// Record content type (22: handshake).
    pub const CONTENT_TYPE: usize = 0;
    /// Record protocol version (3.x).
    pub const RECORD_VERSION: Range<usize> = 1..3;
    /// Record length.
    pub const RECORD_LEN: Range<usize> = 3..5;
    /// Handshake message type (1: ClientHello, 2: ServerHello).
    pub const HS_TYPE: usize = 5;
    /// Handshake message length (24 bits).
    pub const HS_LEN: Range<usize> = 6..9;
    /// The hello's `legacy_version`.
    pub const HELLO_VERSION: Range<usize> = 9..11;
    /// The hello's random.
    pub const RANDOM: Range<usize> = 11..43;
    /// The session id's length byte; the variable fields follow.
    pub const SESSION_ID_LEN: usize = 43;
}

/// Record content type of handshakes.
pub const HANDSHAKE: u8 = 22;
/// Extension `server_name` (RFC 6066).
pub const EXT_SERVER_NAME: u16 = 0;
/// Extension `application_layer_protocol_negotiation` (RFC 7301).
pub const EXT_ALPN: u16 = 16;
/// Extension `supported_groups` (RFC 8422, formerly `elliptic_curves`).
pub const EXT_SUPPORTED_GROUPS: u16 = 10;
/// Extension `ec_point_formats` (RFC 8422).
pub const EXT_EC_POINT_FORMATS: u16 = 11;
/// Handshake type of the Certificate message.
pub const CERTIFICATE: u8 = 11;
/// At most this many certificates of a chain are buffered (the server's and
/// its issuers'; the rest of a longer chain is not inspected), so that a
/// hostile message cannot make the buffers grow.
pub const MAX_CERTS: usize = 8;

/// Why bytes are not a TLS hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The bytes end inside a header, field or extension.
    #[error("tls hello truncated at byte {0}")]
    Truncated(usize),
    /// The record is not a handshake.
    #[error("tls record content type {0} is not a handshake")]
    ContentType(u8),
    /// A version whose major number is not 3.
    #[error("tls version {0:#06x} is not 3.x")]
    Version(u16),
    /// The record's first message is neither a ClientHello nor a ServerHello.
    #[error("tls handshake type {0} is not a hello")]
    HandshakeType(u8),
    /// The hello does not fit in its record.
    #[error("tls hello of {0} bytes in a record of {1}")]
    HelloLength(usize, usize),
    /// A length that overruns its container, at this byte.
    #[error("tls length at byte {0} overruns its container")]
    Length(usize),
    /// The cipher suites' length is odd, or a list of u16 is.
    #[error("tls list of 16-bit values with odd length at byte {0}")]
    OddList(usize),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Whether a hello is the client's or the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// ClientHello (handshake type 1).
    Client,
    /// ServerHello (handshake type 2).
    Server,
}

/// A checked hello: ranges into the payload it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Client or server.
    pub kind: Kind,
    /// The hello's `legacy_version` (what JA3 uses).
    pub version: u16,
    /// The client's cipher suites (u16 each), or the server's chosen one.
    pub ciphers: Range<usize>,
    /// The extensions block (type, length, data each), empty if absent.
    pub extensions: Range<usize>,
    /// The first host name of the `server_name` extension (ClientHello).
    pub sni: Option<Range<usize>>,
    /// `supported_groups`' list (u16 each), empty if absent.
    pub groups: Range<usize>,
    /// `ec_point_formats`' list (u8 each), empty if absent.
    pub formats: Range<usize>,
    /// Where the hello ends (the next message or record starts).
    pub end: usize,
    /// Where the hello's record ends (may be past the payload).
    pub record_end: usize,
}

/// `supported_versions` (RFC 8446 §4.2.1).
const EXT_SUPPORTED_VERSIONS: u16 = 43;

impl Hello {
    /// The version Suricata keeps for the hello's side (app-layer-ssl.c):
    /// the hello's `legacy_version`, except that a `supported_versions`
    /// extension (TLS 1.3, where `legacy_version` stays 0x0303) gives the
    /// version the server selected, or the client's first valid one
    /// (GREASE and unknown values skipped).
    pub fn negotiated_version(&self, payload: &[u8]) -> u16 {
        let mut at = self.extensions.start;
        let end = self.extensions.end;
        while at + 4 <= end {
            let t = be16(payload, at);
            let n = be16(payload, at + 2) as usize;
            if at + 4 + n > end {
                break;
            }
            if t == EXT_SUPPORTED_VERSIONS {
                if self.kind == Kind::Server {
                    if n == 2 {
                        return be16(payload, at + 4);
                    }
                } else if n >= 1 {
                    // A list: its length byte, then two bytes a version.
                    let list = (payload[at + 4] as usize).min(n - 1);
                    let mut v = at + 5;
                    while v + 2 <= at + 5 + list {
                        let ver = be16(payload, v);
                        // SSL 3.0 to TLS 1.3 and the TLS 1.3 drafts.
                        if (0x0300..=0x0304).contains(&ver) || ver & 0xff00 == 0x7f00 {
                            return ver;
                        }
                        v += 2;
                    }
                }
            }
            at += 4 + n;
        }
        self.version
    }
}

/// `tls.version:1.0|1.1|1.2|1.3|0xNNNN` (Suricata's detect-tls-version.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsVersion {
    /// The version's wire value (1.2: 0x0303).
    pub ver: u16,
    /// Written as a raw hex value: compared as is (otherwise a TLS 1.3
    /// draft version, 0x7fNN, counts as 1.3).
    pub raw: bool,
}

impl TlsVersion {
    /// Parses the keyword's value (optionally quoted).
    pub fn parse(v: &str) -> Option<TlsVersion> {
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .unwrap_or(v)
            .trim();
        let named = |ver| Some(TlsVersion { ver, raw: false });
        match v {
            "1.0" => named(0x0301),
            "1.1" => named(0x0302),
            "1.2" => named(0x0303),
            "1.3" => named(0x0304),
            _ => {
                let h = v.strip_prefix("0x")?;
                if h.len() != 4 {
                    return None;
                }
                Some(TlsVersion {
                    ver: u16::from_str_radix(h, 16).ok()?,
                    raw: true,
                })
            }
        }
    }

    /// True if `version`, the version kept for the packet's side, matches.
    #[inline]
    pub fn matches(&self, version: u16) -> bool {
        let v = if !self.raw && version >> 8 == 0x7f {
            0x0304
        } else {
            version
        };
        v == self.ver
    }
}

/// Reads a length-prefixed field of `width` bytes at `at` in `b[..end]`;
/// returns the field's range.
fn vec_at(b: &[u8], at: usize, width: usize, end: usize) -> Result<Range<usize>, TlsError> {
    if at + width > end {
        return Err(TlsError::Truncated(at));
    }
    let n = match width {
        1 => b[at] as usize,
        _ => be16(b, at) as usize,
    };
    let lo = at + width;
    if lo + n > end {
        return Err(TlsError::Length(at));
    }
    Ok(lo..lo + n)
}

/// The hello at the start of `payload`, checked.
pub fn detect(payload: &[u8]) -> Result<Hello, TlsError> {
    let b = payload;
    if b.len() < field::HS_LEN.end {
        return Err(TlsError::Truncated(b.len()));
    }
    if b[field::CONTENT_TYPE] != HANDSHAKE {
        return Err(TlsError::ContentType(b[field::CONTENT_TYPE]));
    }
    let rv = be16(b, field::RECORD_VERSION.start);
    if rv >> 8 != 3 {
        return Err(TlsError::Version(rv));
    }
    // The record may go on past the segment (a server's hello, certificate
    // and done coalesced in one record); the hello may not.
    let record_end = field::HS_TYPE + be16(b, field::RECORD_LEN.start) as usize;
    let kind = match b[field::HS_TYPE] {
        1 => Kind::Client,
        2 => Kind::Server,
        t => return Err(TlsError::HandshakeType(t)),
    };
    let r = field::HS_LEN;
    let hs_len = u32::from_be_bytes([0, b[r.start], b[r.start + 1], b[r.start + 2]]) as usize;
    let end = field::HS_LEN.end + hs_len;
    if end > record_end {
        return Err(TlsError::HelloLength(hs_len, record_end - field::HS_TYPE));
    }
    if end > b.len() {
        return Err(TlsError::Truncated(b.len()));
    }
    if end < field::SESSION_ID_LEN + 1 {
        return Err(TlsError::Truncated(end));
    }
    let version = be16(b, field::HELLO_VERSION.start);
    if version >> 8 != 3 {
        return Err(TlsError::Version(version));
    }
    let sid = vec_at(b, field::SESSION_ID_LEN, 1, end)?;
    let (ciphers, at) = match kind {
        Kind::Client => {
            let c = vec_at(b, sid.end, 2, end)?;
            if c.len() % 2 != 0 {
                return Err(TlsError::OddList(sid.end));
            }
            let comp = vec_at(b, c.end, 1, end)?;
            (c, comp.end)
        }
        Kind::Server => {
            // The chosen suite, then the compression method.
            if sid.end + 3 > end {
                return Err(TlsError::Truncated(sid.end));
            }
            (sid.end..sid.end + 2, sid.end + 3)
        }
    };
    let mut h = Hello {
        kind,
        version,
        ciphers,
        extensions: at..at,
        sni: None,
        groups: at..at,
        formats: at..at,
        end,
        record_end,
    };
    if at == end {
        // No extensions (SSL 3.0 style).
        return Ok(h);
    }
    let exts = vec_at(b, at, 2, end)?;
    if exts.end != end {
        return Err(TlsError::Length(at));
    }
    h.extensions = exts.clone();
    let mut i = exts.start;
    while i < exts.end {
        let ty = if i + 2 <= exts.end {
            be16(b, i)
        } else {
            return Err(TlsError::Truncated(i));
        };
        let data = vec_at(b, i + 2, 2, exts.end)?;
        match ty {
            EXT_SERVER_NAME if kind == Kind::Client && !data.is_empty() => {
                let list = vec_at(b, data.start, 2, data.end)?;
                // The first entry of type host_name (0), the only one defined.
                if list.len() >= 3 && b[list.start] == 0 {
                    h.sni = Some(vec_at(b, list.start + 1, 2, list.end)?);
                }
            }
            EXT_SUPPORTED_GROUPS if kind == Kind::Client => {
                let g = vec_at(b, data.start, 2, data.end)?;
                if g.len() % 2 != 0 {
                    return Err(TlsError::OddList(data.start));
                }
                h.groups = g;
            }
            EXT_EC_POINT_FORMATS if kind == Kind::Client => {
                h.formats = vec_at(b, data.start, 1, data.end)?;
            }
            _ => {}
        }
        i = data.end;
    }
    Ok(h)
}

fn be24(b: &[u8], at: usize) -> usize {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]]) as usize
}

/// How far `b`, a direction's stream bytes from a segment's start (or from
/// a pending unit's start), make up the TLS unit the IPS inspects: a handshake
/// record whose first message is a ClientHello, a ServerHello or a
/// Certificate, that message whole, and after a ServerHello the Certificate
/// message that follows it, in its record or at the start of the next one,
/// if the bytes go on past the hello. [`Unit::Need`] while the bytes are a
/// consistent prefix of such a unit; [`Unit::Over`] past
/// [`MAX_TLS_UNIT`]. Only the headers are checked: [`Buffers::fill`] parses
/// the unit.
pub fn unit(b: &[u8]) -> Unit {
    if !joinable(b) {
        return unit_in_record(b);
    }
    // Handshake messages over several records (RFC 8446 §5.1 lets a message
    // span records, and a server's flight often sends one record per
    // message): the unit over the records joined. Once per handshake, so
    // the copy is made here.
    let mut joined = Vec::new();
    let partial = join_records(b, &mut joined);
    match unit_in_record(&joined) {
        // The bound holds for the bytes held too (record headers included),
        // whatever the records carry.
        Unit::Need if b.len() > MAX_TLS_UNIT => Unit::Over,
        // More records are on their way (a header cut by the segment).
        Unit::Whole(_) if partial => Unit::Need,
        Unit::Whole(_) => Unit::Whole(b.len()),
        u => u,
    }
}

/// Whether `b` starts with a handshake record whose first message goes on
/// past it, or that another handshake record follows: the records are read
/// joined ([`defragment`]).
fn joinable(b: &[u8]) -> bool {
    if b.len() < field::HS_LEN.end || b[field::CONTENT_TYPE] != HANDSHAKE || b[1] != 3 {
        return false;
    }
    let record_end = field::HS_TYPE + be16(b, field::RECORD_LEN.start) as usize;
    let msg_end = field::HS_LEN.end + be24(b, field::HS_LEN.start);
    msg_end > record_end
        || (b.len() > record_end + 1 && b[record_end] == HANDSHAKE && b[record_end + 1] == 3)
}

/// Writes to `out` (cleared first) the consecutive handshake records `b`
/// starts with as one record: the first record's header, its length the sum
/// of the records' (as declared, so a record not yet whole keeps the unit
/// incomplete), then their bodies in order, at most [`MAX_TLS_UNIT`] bytes.
/// Joining stops at the first record of another type. Returns false, leaving
/// `out` empty, unless `b` starts with a message spanning records or with
/// several handshake records.
pub fn defragment(b: &[u8], out: &mut Vec<u8>) -> bool {
    if !joinable(b) {
        out.clear();
        return false;
    }
    join_records(b, out);
    true
}

/// [`defragment`]'s joining; returns whether `b` ends inside the header of
/// a further handshake record. `declared` counts the records' lengths as
/// their headers say.
fn join_records(b: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    out.extend_from_slice(&b[..5]);
    let mut declared = 0usize;
    let mut at = 0;
    while at + 5 <= b.len() && b[at] == HANDSHAKE && b[at + 1] == 3 {
        let len = be16(b, at + 3) as usize;
        let end = (at + 5 + len).min(b.len());
        if out.len() + (end - at - 5) > MAX_TLS_UNIT {
            break;
        }
        out.extend_from_slice(&b[at + 5..end]);
        declared += len;
        at += 5 + len;
    }
    // When the bytes end with the records (a further one may follow in the
    // next segment), the joined record is left open: its messages are bounded
    // by the bytes, not by the records seen so far.
    let partial = at < b.len()
        && b.len() - at < 5
        && b[at] == HANDSHAKE
        && b.get(at + 1).is_none_or(|&v| v == 3);
    let open = at >= b.len() || partial;
    let len = if open { 0xffff } else { declared.min(0xffff) } as u16;
    out[field::RECORD_LEN].copy_from_slice(&len.to_be_bytes());
    partial
}

/// [`unit`] for a first message inside its record.
fn unit_in_record(b: &[u8]) -> Unit {
    if b.first().is_some_and(|&t| t != HANDSHAKE) || b.get(1).is_some_and(|&v| v != 3) {
        return Unit::Not;
    }
    let hello_type = |t: u8| matches!(t, 1 | 2 | CERTIFICATE);
    if b.len() < field::HS_LEN.end {
        return match b.get(field::HS_TYPE) {
            Some(&t) if !hello_type(t) => Unit::Not,
            _ => Unit::Need,
        };
    }
    let record_end = field::HS_TYPE + be16(b, field::RECORD_LEN.start) as usize;
    let t = b[field::HS_TYPE];
    if !hello_type(t) {
        return Unit::Not;
    }
    let msg_end = field::HS_LEN.end + be24(b, field::HS_LEN.start);
    if msg_end > record_end {
        return Unit::Not;
    }
    if msg_end > MAX_TLS_UNIT {
        return Unit::Over;
    }
    if b.len() < msg_end {
        return Unit::Need;
    }
    if t != 2 {
        return Unit::Whole(msg_end);
    }
    // A ServerHello: the Certificate after it, if one follows.
    let (at, cert_record_end) = if msg_end < record_end {
        (msg_end, record_end)
    } else {
        let r = msg_end;
        if b.len() == r || b[r] != HANDSHAKE || b.get(r + 1).is_some_and(|&v| v != 3) {
            return Unit::Whole(msg_end);
        }
        if b.len() < r + 5 {
            return Unit::Need;
        }
        (r + 5, r + 5 + be16(b, r + 3) as usize)
    };
    match b.get(at) {
        Some(&CERTIFICATE) => {}
        Some(_) => return Unit::Whole(msg_end),
        None => return Unit::Need,
    }
    if b.len() < at + 4 {
        return Unit::Need;
    }
    let cert_end = at + 4 + be24(b, at + 1);
    if cert_end > cert_record_end {
        // Not parsed ([`certificates`]): the hello alone.
        return Unit::Whole(msg_end);
    }
    if cert_end > MAX_TLS_UNIT {
        return Unit::Over;
    }
    if b.len() < cert_end {
        return Unit::Need;
    }
    Unit::Whole(cert_end)
}

/// Reads the record header at `at`; returns where its body starts and ends
/// (the end may be past the payload).
fn record_at(b: &[u8], at: usize) -> Result<(usize, usize), TlsError> {
    if at + 5 > b.len() {
        return Err(TlsError::Truncated(b.len()));
    }
    if b[at] != HANDSHAKE {
        return Err(TlsError::ContentType(b[at]));
    }
    let v = be16(b, at + 1);
    if v >> 8 != 3 {
        return Err(TlsError::Version(v));
    }
    Ok((at + 5, at + 5 + be16(b, at + 3) as usize))
}

/// Reads a 24-bit length at `at` in `b[..end]`; returns the range it prefixes.
fn vec24_at(b: &[u8], at: usize, end: usize) -> Result<Range<usize>, TlsError> {
    if at + 3 > end {
        return Err(TlsError::Truncated(at));
    }
    let n = u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]]) as usize;
    if at + 3 + n > end {
        return Err(TlsError::Length(at));
    }
    Ok(at + 3..at + 3 + n)
}

/// Pushes to `out` (cleared first) the DER certificates, in order and at
/// most [`MAX_CERTS`], of the server's Certificate message in `payload`:
/// right after `hello` (a ServerHello, in its record or at the start of the
/// next), or, without a hello, as the first message of the record the
/// payload starts with. The message must be whole in its record and in the
/// payload, every length is checked, and on error `out` is left empty. A
/// ClientHello has no certificates (`Ok`, nothing pushed).
pub fn certificates(
    payload: &[u8],
    hello: Option<&Hello>,
    out: &mut Vec<Range<usize>>,
) -> Result<(), TlsError> {
    out.clear();
    let b = payload;
    let (at, record_end) = match hello {
        Some(h) if h.kind == Kind::Client => return Ok(()),
        Some(h) if h.end < h.record_end => (h.end, h.record_end),
        Some(h) => record_at(b, h.end)?,
        None => record_at(b, 0)?,
    };
    if at + 4 > b.len() {
        return Err(TlsError::Truncated(b.len()));
    }
    if b[at] != CERTIFICATE {
        return Err(TlsError::HandshakeType(b[at]));
    }
    let end = record_end.min(b.len());
    let msg = vec24_at(b, at + 1, end)?;
    let list = vec24_at(b, msg.start, msg.end)?;
    if list.end != msg.end {
        return Err(TlsError::Length(msg.start));
    }
    let mut i = list.start;
    while i < list.end {
        let der = match vec24_at(b, i, list.end) {
            Ok(r) => r,
            Err(e) => {
                out.clear();
                return Err(e);
            }
        };
        if out.len() < MAX_CERTS {
            out.push(der.clone());
        }
        i = der.end;
    }
    Ok(())
}

/// GREASE values (RFC 8701): `0x?a?a` with both bytes equal, left out of
/// JA3 as its definition says.
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

impl Hello {
    /// The protocol names of the hello's ALPN extension (RFC 7301 §3.1:
    /// `[list len u16]([len u8][name])*`), appended to `out` as ranges of
    /// `b`; a malformed list stops where it breaks.
    pub fn alpn(&self, b: &[u8], out: &mut Vec<Range<usize>>) {
        let r = self.extensions.clone();
        let mut i = r.start;
        while i + 4 <= r.end {
            let (ty, len) = (be16(b, i), be16(b, i + 2) as usize);
            let data = i + 4..(i + 4 + len).min(r.end);
            i += 4 + len;
            if ty != EXT_ALPN || data.len() < 2 {
                continue;
            }
            let end = (data.start + 2 + be16(b, data.start) as usize).min(data.end);
            let mut j = data.start + 2;
            while j < end {
                let n = b[j] as usize;
                if n == 0 || j + 1 + n > end {
                    break;
                }
                out.push(j + 1..j + 1 + n);
                j += 1 + n;
            }
        }
    }

    /// The extension types in order, GREASE included.
    pub fn extension_types<'a>(&self, b: &'a [u8]) -> impl Iterator<Item = u16> + 'a {
        let r = self.extensions.clone();
        let mut i = r.start;
        std::iter::from_fn(move || {
            if i + 4 > r.end {
                return None;
            }
            let ty = be16(b, i);
            i += 4 + be16(b, i + 2) as usize;
            Some(ty)
        })
    }

    /// Writes the JA3 string (ClientHello) or JA3S string (ServerHello) of
    /// this hello, parsed from `b`, to `out` (cleared first):
    /// `SSLVersion,Ciphers,Extensions,EllipticCurves,EllipticCurveFormats`
    /// for JA3, `SSLVersion,Cipher,Extensions` for JA3S, values in decimal
    /// joined by `-`, GREASE values left out.
    pub fn write_ja3(&self, b: &[u8], out: &mut Vec<u8>) {
        out.clear();
        let _ = write!(out, "{},", self.version);
        let u16s = |r: &Range<usize>| b[r.clone()].chunks_exact(2).map(|c| be16(c, 0));
        join(out, u16s(&self.ciphers));
        out.push(b',');
        join(out, self.extension_types(b));
        if self.kind == Kind::Client {
            out.push(b',');
            join(out, u16s(&self.groups));
            out.push(b',');
            join(out, b[self.formats.clone()].iter().map(|&f| f as u16));
        }
    }
}

/// Appends the non-GREASE values of `it`, decimal, joined by `-`.
fn join(out: &mut Vec<u8>, it: impl Iterator<Item = u16>) {
    let mut first = true;
    for v in it.filter(|&v| !is_grease(v)) {
        if !first {
            out.push(b'-');
        }
        first = false;
        let _ = write!(out, "{v}");
    }
}

/// The MD5 of `s` as 32 lowercase hex digits (a JA3 hash).
pub fn md5_hex(s: &[u8]) -> [u8; 32] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let d = Md5::digest(s);
    let mut out = [0u8; 32];
    for (i, x) in d.iter().enumerate() {
        out[2 * i] = HEX[(x >> 4) as usize];
        out[2 * i + 1] = HEX[(x & 15) as usize];
    }
    out
}

/// A buffer TLS rules inspect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buf {
    /// `tls.sni` (`tls_sni`): the ClientHello's server name.
    Sni,
    /// `ja3.hash` (`ja3_hash`): the ClientHello's JA3 MD5, lowercase hex.
    Ja3Hash,
    /// `ja3.string` (`ja3_string`): the ClientHello's JA3 string.
    Ja3String,
    /// `ja3s.hash`: the ServerHello's JA3S MD5, lowercase hex.
    Ja3sHash,
    /// `ja3s.string`: the ServerHello's JA3S string.
    Ja3sString,
    /// `tls.certs`: each DER certificate of the server's chain in turn (a
    /// multi-buffer: the keywords match if they match one certificate).
    Certs,
    /// `tls.cert_subject`: the server certificate's subject, as Suricata
    /// prints it (`C=US, O=Example, CN=example.com`).
    CertSubject,
    /// `tls.cert_issuer`: its issuer, likewise.
    CertIssuer,
    /// `tls.cert_serial`: its serial number, uppercase hex bytes joined by
    /// `:` (`00:AB:01`).
    CertSerial,
    /// `tls.random`: the hello's 32-byte random (the client's on a
    /// ClientHello, the server's on a ServerHello).
    Random,
    /// `tls.random_time`: its first 4 bytes.
    RandomTime,
    /// `tls.random_bytes`: its last 28 bytes.
    RandomBytes,
    /// `tls.alpn`: each protocol the hello's ALPN extension names (a
    /// multi-buffer, as [`Buf::Certs`]).
    Alpn,
    /// `tls.cert_fingerprint`: the server certificate's SHA-1, lowercase hex
    /// bytes joined by `:`, as Suricata prints it.
    CertFingerprint,
    /// `tls.subjectaltname`: each DNS name and IP address of the server
    /// certificate's subject alternative names (a multi-buffer).
    SubjectAltName,
}

impl Buf {
    /// True for a buffer holding several values, matched one at a time
    /// (Suricata's multi-buffers): named twice, each instance may match
    /// another value.
    pub fn is_multi(self) -> bool {
        matches!(self, Buf::Certs | Buf::Alpn | Buf::SubjectAltName)
    }

    /// Every buffer, in order (`ALL[b as usize] == b`).
    pub const ALL: [Buf; 15] = [
        Buf::Sni,
        Buf::Ja3Hash,
        Buf::Ja3String,
        Buf::Ja3sHash,
        Buf::Ja3sString,
        Buf::Certs,
        Buf::CertSubject,
        Buf::CertIssuer,
        Buf::CertSerial,
        Buf::Random,
        Buf::RandomTime,
        Buf::RandomBytes,
        Buf::Alpn,
        Buf::CertFingerprint,
        Buf::SubjectAltName,
    ];
}

/// The sticky-buffer keywords of TLS and their buffers.
pub const STICKY: &[(&str, Buf)] = &[
    ("tls.sni", Buf::Sni),
    ("tls_sni", Buf::Sni),
    ("ja3.hash", Buf::Ja3Hash),
    ("ja3_hash", Buf::Ja3Hash),
    ("ja3.string", Buf::Ja3String),
    ("ja3_string", Buf::Ja3String),
    ("ja3s.hash", Buf::Ja3sHash),
    ("ja3s.string", Buf::Ja3sString),
    ("tls.certs", Buf::Certs),
    ("tls.cert_subject", Buf::CertSubject),
    ("tls_cert_subject", Buf::CertSubject),
    ("tls.cert_issuer", Buf::CertIssuer),
    ("tls_cert_issuer", Buf::CertIssuer),
    ("tls.cert_serial", Buf::CertSerial),
    ("tls_cert_serial", Buf::CertSerial),
    ("tls.random", Buf::Random),
    ("tls.random_time", Buf::RandomTime),
    ("tls.random_bytes", Buf::RandomBytes),
    ("tls.alpn", Buf::Alpn),
    ("tls.cert_fingerprint", Buf::CertFingerprint),
    ("tls_cert_fingerprint", Buf::CertFingerprint),
    ("tls.subjectaltname", Buf::SubjectAltName),
];

/// One segment's buffers (a hello's, a certificate chain's), reused from
/// packet to packet (the vectors' capacity stays).
#[derive(Debug, Default)]
pub struct Buffers {
    /// Client or server hello, if the segment has one.
    kind: Option<Kind>,
    /// The DER certificates, within the payload.
    certs: Vec<Range<usize>>,
    /// The hello's ALPN protocol names, within the payload.
    alpn: Vec<Range<usize>>,
    /// Whether the first certificate parsed (the three strings are set).
    parsed: bool,
    /// Its subject, issuer and serial.
    subject: Vec<u8>,
    issuer: Vec<u8>,
    serial: Vec<u8>,
    /// Its SHA-1 fingerprint as Suricata prints it.
    fingerprint: Vec<u8>,
    /// Its validity (notBefore, notAfter), seconds since the epoch.
    validity: (i64, i64),
    /// Its subject alternative names (DNS names, IP addresses), each a
    /// range of `sans`.
    sans: Vec<u8>,
    san_at: Vec<Range<usize>>,
    /// The server name, within the payload.
    sni: Option<Range<usize>>,
    /// The hello's version as Suricata's `tls.version` reads it
    /// ([`Hello::negotiated_version`]).
    version: u16,
    /// The JA3 or JA3S string.
    string: Vec<u8>,
    /// Its MD5, hex.
    hash: [u8; 32],
}

impl Buffers {
    /// Fills the buffers from `h`, parsed from `payload`.
    pub fn build(&mut self, h: &Hello, payload: &[u8]) {
        self.kind = Some(h.kind);
        self.version = h.negotiated_version(payload);
        self.sni = h.sni.clone();
        h.write_ja3(payload, &mut self.string);
        self.hash = md5_hex(&self.string);
        self.alpn.clear();
        h.alpn(payload, &mut self.alpn);
        self.certs.clear();
        self.parsed = false;
    }

    /// Fills the buffers from `payload`: its hello, if it starts with one,
    /// and the server's certificates ([`certificates`]); false if it has
    /// neither (the buffers are then empty).
    pub fn fill(&mut self, payload: &[u8]) -> bool {
        let hello = detect(payload);
        match &hello {
            Ok(h) => self.build(h, payload),
            Err(_) => {
                self.kind = None;
                self.sni = None;
                self.alpn.clear();
                self.certs.clear();
                self.parsed = false;
            }
        }
        let _ = certificates(payload, hello.as_ref().ok(), &mut self.certs);
        self.parse_first(payload);
        self.kind.is_some() || !self.certs.is_empty()
    }

    /// Sets the subject, issuer and serial from the first certificate, if it
    /// parses. x509-parser borrows the DER but allocates its name's
    /// attribute lists, and the `Display` of a name builds a `String`.
    fn parse_first(&mut self, payload: &[u8]) {
        use x509_parser::prelude::{FromDer, X509Certificate};
        self.parsed = false;
        let Some(r) = self.certs.first() else {
            return;
        };
        let Ok((_, cert)) = X509Certificate::from_der(&payload[r.clone()]) else {
            return;
        };
        let tbs = &cert.tbs_certificate;
        self.validity = (
            tbs.validity.not_before.timestamp(),
            tbs.validity.not_after.timestamp(),
        );
        self.subject.clear();
        let _ = write!(self.subject, "{}", tbs.subject);
        self.issuer.clear();
        let _ = write!(self.issuer, "{}", tbs.issuer);
        self.serial.clear();
        for (i, x) in tbs.raw_serial().iter().enumerate() {
            if i > 0 {
                self.serial.push(b':');
            }
            let _ = write!(self.serial, "{x:02X}");
        }
        use sha1::Digest;
        self.fingerprint.clear();
        for (i, x) in sha1::Sha1::digest(&payload[r.clone()]).iter().enumerate() {
            if i > 0 {
                self.fingerprint.push(b':');
            }
            let _ = write!(self.fingerprint, "{x:02x}");
        }
        self.sans.clear();
        self.san_at.clear();
        if let Ok(Some(ext)) = cert.subject_alternative_name() {
            use x509_parser::extensions::GeneralName;
            for name in &ext.value.general_names {
                let a = self.sans.len();
                match name {
                    GeneralName::DNSName(d) => self.sans.extend_from_slice(d.as_bytes()),
                    GeneralName::IPAddress(ip) => match ip.len() {
                        4 => {
                            let _ = write!(self.sans, "{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]);
                        }
                        16 => {
                            let mut b = [0u8; 16];
                            b.copy_from_slice(ip);
                            let _ = write!(self.sans, "{}", std::net::Ipv6Addr::from(b));
                        }
                        _ => continue,
                    },
                    _ => continue,
                }
                self.san_at.push(a..self.sans.len());
            }
        }
        self.parsed = true;
    }

    /// Each buffer `b` of the segment parsed from `payload`: one at most,
    /// several for the [`Buf::Certs`] multi-buffer.
    pub fn each<'a>(&'a self, b: Buf, payload: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (ranges, of): (&[Range<usize>], &[u8]) = match b {
            Buf::Certs => (&self.certs[..], payload),
            Buf::Alpn if self.kind.is_some() => (&self.alpn[..], payload),
            Buf::SubjectAltName if self.parsed => (&self.san_at[..], &self.sans[..]),
            _ => (&[], payload),
        };
        self.get(b, payload)
            .into_iter()
            .chain(ranges.iter().map(move |r| &of[r.clone()]))
    }

    /// What the legacy certificate keywords read of the first certificate
    /// ([`legacy::CertCond`]), if it parsed.
    pub fn cert_view(&self) -> Option<legacy::CertView<'_>> {
        self.parsed.then_some(legacy::CertView {
            subject: &self.subject,
            issuer: &self.issuer,
            not_before: self.validity.0,
            not_after: self.validity.1,
        })
    }

    /// The certificates of the segment's Certificate message (0 without
    /// one).
    pub fn cert_count(&self) -> usize {
        self.certs.len()
    }

    /// The hello's version ([`Hello::negotiated_version`]) and whether it
    /// is the client's, if the unit has a hello.
    pub fn version(&self) -> Option<(Kind, u16)> {
        self.kind.map(|k| (k, self.version))
    }

    /// Every buffer the hello has.
    pub fn all<'a>(&'a self, payload: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        Buf::ALL
            .into_iter()
            .flat_map(move |b| self.each(b, payload))
    }

    /// Buffer `b` of the hello parsed from `payload`, if the hello has it.
    /// `None` for [`Buf::Certs`] (see [`Buffers::each`]).
    pub fn get<'a>(&'a self, b: Buf, payload: &'a [u8]) -> Option<&'a [u8]> {
        match b {
            Buf::Certs | Buf::Alpn | Buf::SubjectAltName => return None,
            Buf::CertFingerprint if self.parsed => return Some(&self.fingerprint),
            Buf::CertFingerprint => return None,
            Buf::CertSubject if self.parsed => return Some(&self.subject),
            Buf::CertIssuer if self.parsed => return Some(&self.issuer),
            Buf::CertSerial if self.parsed => return Some(&self.serial),
            Buf::CertSubject | Buf::CertIssuer | Buf::CertSerial => return None,
            _ => {}
        }
        match (b, self.kind?) {
            // A hello starts the payload ([`detect`]).
            (Buf::Random, _) => payload.get(field::RANDOM),
            (Buf::RandomTime, _) => payload.get(field::RANDOM.start..field::RANDOM.start + 4),
            (Buf::RandomBytes, _) => payload.get(field::RANDOM.start + 4..field::RANDOM.end),
            (Buf::Sni, Kind::Client) => self.sni.clone().map(|r| &payload[r]),
            (Buf::Ja3Hash, Kind::Client) | (Buf::Ja3sHash, Kind::Server) => Some(&self.hash),
            (Buf::Ja3String, Kind::Client) | (Buf::Ja3sString, Kind::Server) => Some(&self.string),
            _ => None,
        }
    }
}
