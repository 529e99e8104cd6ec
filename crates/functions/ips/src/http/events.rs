//! HTTP decoder events a rule can ask for with `app-layer-event:http.NAME`,
//! raised as Suricata 7's HTTP parser (libhtp 0.5.50, Suricata's default
//! IDS personality) raises them. Each is decided from one message's start
//! line and header lines as sent: a request's ([`super::Buf::StartRaw`]) or
//! a response's ([`super::Buf::StartRawResponse`]), buffers no keyword
//! names, so the keyword is an item of that buffer's list and needs no
//! state of its own.
//!
//! Every event here was checked against Suricata 7.0.10 (positive and near
//! miss). Suricata keeps a transaction's events together, so a rule without
//! a direction alerts again when the transaction's other side is inspected,
//! and libhtp's once-per-transaction flags make a response's
//! `response_field_missing_colon` / `response_header_invalid` depend on the
//! request's; here each message decides its own events (docs/FUNCTIONS.md
//! lists the differences). A rule naming another event is skipped with the
//! event's name as the reason, rather than never matching.

use std::cell::RefCell;
use std::ops::Range;

/// An HTTP decoder event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `http.invalid_transfer_encoding_value_in_request`: a request with a
    /// `Transfer-Encoding` field whose value has no `chunked` token, or with
    /// `chunked` under a protocol other than `HTTP/1.1` (libhtp's
    /// `HTP_REQUEST_INVALID_T_E`). Request smuggling (CVE-2023-46747's AJP
    /// smuggling, CVE-2023-41265's tunnelling) sends such values so that a
    /// front end and a back end frame the body differently.
    InvalidTeInRequest,
    /// `http.request_field_missing_colon`: a request header field (folded
    /// lines joined) without a `:` before its end or a NUL byte.
    RequestFieldMissingColon,
    /// `http.request_header_invalid`: a request header field with an empty
    /// name, spaces or tabs before its colon, or a name that is not a token.
    RequestHeaderInvalid,
    /// `http.missing_host_header`: an `HTTP/1.1` request without `Host`.
    MissingHostHeader,
    /// `http.request_line_leading_whitespace`: whitespace before the method.
    RequestLineLeadingWhitespace,
    /// `http.method_delim_non_compliant`: the method and the target apart
    /// by whitespace other than spaces.
    MethodDelimNonCompliant,
    /// `http.uri_delim_non_compliant`: whitespace other than a space in the
    /// target, before its first space.
    UriDelimNonCompliant,
    /// `http.invalid_request_field_folding`: a request's first header line
    /// is folded (starts with a space, a tab or NUL).
    InvalidRequestFieldFolding,
    /// `http.duplicate_content_length_field_in_request`: a repeated
    /// `Content-Length` whose value parses to another length.
    DuplicateClInRequest,
    /// `http.invalid_content_length_field_in_request`: a request without
    /// `Transfer-Encoding` whose first `Content-Length` has no digits (or
    /// overflows).
    InvalidClInRequest,
    /// `http.request_auth_unrecognized`: an `Authorization` value not
    /// starting (without case) with `basic`, `digest` or `bearer`.
    RequestAuthUnrecognized,
    /// `http.response_field_missing_colon`: a response header field
    /// without a `:`.
    ResponseFieldMissingColon,
    /// `http.response_header_invalid`: a response header field with an
    /// empty name, control bytes or spaces before its colon, or a name that
    /// is not a token (and no missing colon before it).
    ResponseHeaderInvalid,
    /// `http.invalid_response_field_folding`: a response's first header
    /// line is folded.
    InvalidResponseFieldFolding,
    /// `http.duplicate_content_length_field_in_response`.
    DuplicateClInResponse,
    /// `http.invalid_content_length_field_in_response`: a response framed
    /// by its first `Content-Length` (no `chunked` in `Transfer-Encoding`)
    /// whose value has no digits.
    InvalidClInResponse,
    /// `http.response_invalid_protocol`: the status line's protocol is not
    /// exactly `HTTP/0.9`, `HTTP/1.0` or `HTTP/1.1`.
    ResponseInvalidProtocol,
    /// `http.response_invalid_status`: the status code is not digits
    /// between 100 and 999.
    ResponseInvalidStatus,
    /// `http.response_abnormal_transfer_encoding`: `Transfer-Encoding`
    /// contains `chunked` (any case) but is not exactly that word.
    ResponseAbnormalTe,
    /// `http.response_chunked_old_proto`: a chunked response under a
    /// protocol other than `HTTP/1.1`.
    ResponseChunkedOldProto,
    /// `http.request_uri_host_invalid`: the request target's authority has
    /// an invalid port or host name ([`super::host::target`]).
    RequestUriHostInvalid,
    /// `http.request_header_host_invalid`: the `Host` field (repeated ones
    /// joined) has an invalid port or host name — an IPv6 literal included,
    /// as libhtp's name check refuses brackets.
    RequestHeaderHostInvalid,
    /// `http.host_header_ambiguous`: the target's authority and the `Host`
    /// field name different hosts (without case), or both give ports and
    /// they differ. Requests smuggled past a front end that routes on one
    /// and a back end that serves the other use this.
    HostHeaderAmbiguous,
    /// `http.too_many_encoding_layers`: a response's `Content-Encoding`
    /// lists more than two tokens ([`super::ce`]; the first two are
    /// inflated).
    TooManyEncodingLayers,
    /// `http.abnormal_ce_header`: a response's `Content-Encoding` lists a
    /// token other than `gzip`, `x-gzip`, `deflate`, `x-deflate`, `lzma`
    /// and `inflate`, exactly ([`super::ce`]).
    AbnormalCeHeader,
}

/// The events by name (after `http.`).
const NAMES: &[(&str, Event)] = &[
    (
        "invalid_transfer_encoding_value_in_request",
        Event::InvalidTeInRequest,
    ),
    (
        "request_field_missing_colon",
        Event::RequestFieldMissingColon,
    ),
    ("request_header_invalid", Event::RequestHeaderInvalid),
    ("missing_host_header", Event::MissingHostHeader),
    (
        "request_line_leading_whitespace",
        Event::RequestLineLeadingWhitespace,
    ),
    ("method_delim_non_compliant", Event::MethodDelimNonCompliant),
    ("uri_delim_non_compliant", Event::UriDelimNonCompliant),
    (
        "invalid_request_field_folding",
        Event::InvalidRequestFieldFolding,
    ),
    (
        "duplicate_content_length_field_in_request",
        Event::DuplicateClInRequest,
    ),
    (
        "invalid_content_length_field_in_request",
        Event::InvalidClInRequest,
    ),
    ("request_auth_unrecognized", Event::RequestAuthUnrecognized),
    (
        "response_field_missing_colon",
        Event::ResponseFieldMissingColon,
    ),
    ("response_header_invalid", Event::ResponseHeaderInvalid),
    (
        "invalid_response_field_folding",
        Event::InvalidResponseFieldFolding,
    ),
    (
        "duplicate_content_length_field_in_response",
        Event::DuplicateClInResponse,
    ),
    (
        "invalid_content_length_field_in_response",
        Event::InvalidClInResponse,
    ),
    ("response_invalid_protocol", Event::ResponseInvalidProtocol),
    ("response_invalid_status", Event::ResponseInvalidStatus),
    (
        "response_abnormal_transfer_encoding",
        Event::ResponseAbnormalTe,
    ),
    ("response_chunked_old_proto", Event::ResponseChunkedOldProto),
    ("request_uri_host_invalid", Event::RequestUriHostInvalid),
    (
        "request_header_host_invalid",
        Event::RequestHeaderHostInvalid,
    ),
    ("host_header_ambiguous", Event::HostHeaderAmbiguous),
    ("too_many_encoding_layers", Event::TooManyEncodingLayers),
    ("abnormal_ce_header", Event::AbnormalCeHeader),
];

impl Event {
    /// The event `app-layer-event` names (`http.` and the event), if known.
    pub fn parse(name: &str) -> Option<Event> {
        let n = name.strip_prefix("http.")?;
        NAMES.iter().find(|(k, _)| *k == n).map(|&(_, e)| e)
    }

    /// True for an event of requests, false for one of responses: the
    /// buffer its item is on.
    pub fn request(&self) -> bool {
        !matches!(
            self,
            Event::ResponseFieldMissingColon
                | Event::ResponseHeaderInvalid
                | Event::InvalidResponseFieldFolding
                | Event::DuplicateClInResponse
                | Event::InvalidClInResponse
                | Event::ResponseInvalidProtocol
                | Event::ResponseInvalidStatus
                | Event::ResponseAbnormalTe
                | Event::ResponseChunkedOldProto
                | Event::TooManyEncodingLayers
                | Event::AbnormalCeHeader
        )
    }

    /// The event's bit in [`analyse`]'s set.
    fn bit(self) -> u32 {
        1 << self as u32
    }

    /// True if the message whose start line and header lines (as sent) are
    /// `start` raises the event (`start` is of the event's side,
    /// [`Event::request`]).
    pub fn raised(&self, start: &[u8]) -> bool {
        analyse(start, self.request()) & self.bit() != 0
    }
}

/// libhtp's `htp_is_space`.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

/// libhtp's `htp_is_lws`.
fn is_lws(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// libhtp's `htp_is_token`: a visible ASCII byte other than a separator.
fn is_token(c: u8) -> bool {
    (33..=126).contains(&c) && !b"()<>@,;:\\\"/[]?={}".contains(&c)
}

/// The lines of `b`, without their `\r\n` or `\n` (libhtp's `htp_chomp`).
fn lines(b: &[u8]) -> impl Iterator<Item = &[u8]> {
    b.split(|&c| c == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// libhtp's protocol numbers (`htp_parse_protocol`, exact spelling only).
const PROTO_INVALID: i32 = -2;
const PROTO_1_1: i32 = 101;

/// libhtp's `htp_parse_protocol`: only `HTTP/0.9`, `HTTP/1.0` and
/// `HTTP/1.1`, exactly, are known (Suricata 7.0.10: `HTTP/2.0`,
/// `http/1.1`, `HTTP/1.1 ` with a trailing space are all invalid).
fn protocol(p: &[u8]) -> i32 {
    match p {
        b"HTTP/0.9" => 9,
        b"HTTP/1.0" => 100,
        b"HTTP/1.1" => PROTO_1_1,
        _ => PROTO_INVALID,
    }
}

/// libhtp's `bstr_util_mem_to_pint` in base 10 from a digit: the number
/// the run of digits `v` starts with, -2 on overflow.
fn leading_number(v: &[u8]) -> (i64, usize) {
    let mut r: i64 = 0;
    let mut n = 0;
    for &c in v {
        if !c.is_ascii_digit() {
            break;
        }
        let d = i64::from(c - b'0');
        if n > 0 && (i64::MAX - d) / 10 < r {
            return (-2, n);
        }
        r = r * 10 + d;
        n += 1;
    }
    (r, n)
}

/// libhtp's `htp_parse_content_length`: the first run of digits, junk
/// before and after it ignored; -1003 if empty, -1001 without a digit, -2
/// on overflow (the codes matter: repeated fields compare them).
fn content_length(v: &[u8]) -> i64 {
    if v.is_empty() {
        return -1003;
    }
    match v.iter().position(u8::is_ascii_digit) {
        Some(i) => leading_number(&v[i..]).0,
        None => -1001,
    }
}

/// libhtp's `htp_parse_status`: digits alone (spaces around allowed),
/// between 100 and 999.
fn status_valid(s: &[u8]) -> bool {
    let s = trim_lws(s);
    let (n, used) = leading_number(s);
    used > 0 && used == s.len() && (100..=999).contains(&n)
}

/// `s` without spaces and tabs around it.
fn trim_lws(s: &[u8]) -> &[u8] {
    let a = s.iter().position(|&c| !is_lws(c)).unwrap_or(s.len());
    let z = s.iter().rposition(|&c| !is_lws(c)).map_or(a, |i| i + 1);
    &s[a..z]
}

/// libhtp's `bstr_index_of_c_nocasenorzero`: `needle` (lowercase) occurs in
/// `h`, compared without case, NUL bytes of `h` skipped.
fn contains_skipping_nul(h: &[u8], needle: &[u8]) -> bool {
    (0..h.len()).any(|i| {
        if h[i] == 0 {
            return false;
        }
        let mut k = i;
        let mut j = 0;
        while j < needle.len() && k < h.len() {
            if h[k] != 0 {
                if h[k].to_ascii_lowercase() != needle[j] {
                    return false;
                }
                j += 1;
            }
            k += 1;
        }
        j == needle.len()
    })
}

/// One header field of a head: its bytes (its lines joined without their
/// line ends, as libhtp joins folded lines), its name and its value, as
/// ranges of the scratch bytes.
#[derive(Debug, Clone, Default)]
struct Field {
    data: Range<usize>,
    name: Range<usize>,
    value: Range<usize>,
}

/// The bytes and fields of the head being analysed, reused so that no
/// inspection allocates.
#[derive(Default)]
struct Scratch {
    bytes: Vec<u8>,
    fields: Vec<Field>,
    merged: Vec<u8>,
}

impl Scratch {
    /// The fields named `n` (without case).
    fn named<'a>(&'a self, n: &'a [u8]) -> impl Iterator<Item = &'a Field> + 'a {
        self.fields
            .iter()
            .filter(move |f| self.bytes[f.name.clone()].eq_ignore_ascii_case(n))
    }

    /// The values of the fields named `n` into `out`, joined with `, ` as
    /// libhtp joins a repeated field's values into the first's; false if
    /// there is none.
    fn join(&self, n: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        let mut seen = false;
        for f in self.named(n) {
            if seen {
                out.extend_from_slice(b", ");
            }
            seen = true;
            out.extend_from_slice(&self.bytes[f.value.clone()]);
        }
        seen
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The `Content-Encoding` of the message whose start line and header
/// lines (as sent) are `start`, `request` saying whose it is, read as
/// libhtp reads it ([`super::ce`]); None without the field.
pub fn content_encoding(start: &[u8], request: bool) -> Option<super::ce::Read> {
    field(start, request, b"content-encoding", |v| {
        super::ce::read(v, request)
    })
}

/// True if the response whose start line and header lines are `start`
/// has a `Content-Range` that raises `http.range_invalid` once its body
/// begins ([`super::range`]).
pub fn content_range_invalid(start: &[u8]) -> bool {
    field(start, false, b"content-range", super::range::invalid).unwrap_or(false)
}

/// `read` of the value of head `start`'s field `name` (repeated fields
/// joined as libhtp joins them); None without the field.
fn field<R>(start: &[u8], request: bool, name: &[u8], read: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let run = |s: &mut Scratch| {
        let mut ls = lines(start).skip_while(|l| l.is_empty());
        ls.next()?;
        split_fields(ls, request, s);
        let mut merged = std::mem::take(&mut s.merged);
        let r = s.join(name, &mut merged).then(|| read(&merged));
        s.merged = merged;
        r
    };
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => run(&mut s),
        Err(_) => run(&mut Scratch::default()),
    })
}

/// The events (bits of [`Event::bit`]) the head `start` raises, `request`
/// saying whose it is.
fn analyse(start: &[u8], request: bool) -> u32 {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => analyse_in(start, request, &mut s),
        Err(_) => analyse_in(start, request, &mut Scratch::default()),
    })
}

fn analyse_in(start: &[u8], request: bool, s: &mut Scratch) -> u32 {
    let mut ev = 0u32;
    // libhtp ignores empty lines before a start line.
    let mut ls = lines(start).skip_while(|l| l.is_empty());
    let Some(line) = ls.next() else {
        return 0;
    };
    let mut target = None;
    let proto = if request {
        let (method, uri, proto) = request_line(line, &mut ev);
        target = uri.and_then(|u| super::host::target(u, method == b"CONNECT"));
        if target.is_some_and(|t| t.invalid) {
            ev |= Event::RequestUriHostInvalid.bit();
        }
        match proto {
            Some(p) => protocol(p),
            // HTTP/0.9: the request line alone.
            None => return ev,
        }
    } else {
        status_line(line, &mut ev)
    };
    ev |= split_fields(ls, request, s);
    let mut merged = std::mem::take(&mut s.merged);
    ev |= fields_events(s, &mut merged, request, proto, target);
    s.merged = merged;
    ev
}

/// Splits a head's header lines `ls` (after its start line) into the
/// fields of `s`, folded lines joined to the field before, and returns
/// the events of the fields one by one.
fn split_fields<'a>(ls: impl Iterator<Item = &'a [u8]>, request: bool, s: &mut Scratch) -> u32 {
    let mut ev = 0;
    s.bytes.clear();
    s.fields.clear();
    for (i, l) in ls.enumerate() {
        if l.is_empty() {
            break;
        }
        let folded = matches!(l[0], b' ' | b'\t' | 0);
        if folded && i == 0 {
            ev |= if request {
                Event::InvalidRequestFieldFolding
            } else {
                Event::InvalidResponseFieldFolding
            }
            .bit();
        }
        let mut l = l;
        if !folded || s.fields.is_empty() {
            let at = s.bytes.len();
            s.fields.push(Field {
                data: at..at,
                ..Field::default()
            });
            // A folded line with no field before it starts one, without
            // its folding bytes (so its name is not invalid too).
            let lead = l
                .iter()
                .take_while(|&&c| matches!(c, b' ' | b'\t' | 0))
                .count();
            l = &l[lead..];
        }
        s.bytes.extend_from_slice(l);
        if let Some(f) = s.fields.last_mut() {
            f.data.end = s.bytes.len();
        }
    }
    // libhtp's once-per-transaction flags.
    let (mut unparseable, mut invalid) = (false, false);
    for f in s.fields.iter_mut() {
        let d = &s.bytes[f.data.clone()];
        let base = f.data.start;
        let (name, value) = if request {
            request_field(d, &mut ev)
        } else {
            response_field(d, &mut ev, &mut unparseable, &mut invalid)
        };
        f.name = base + name.start..base + name.end;
        f.value = base + value.start..base + value.end;
    }
    ev
}

/// The events of a head's fields as a whole (after [`analyse_in`] split
/// them): Content-Length, Transfer-Encoding, Host, Authorization.
fn fields_events(
    s: &Scratch,
    merged: &mut Vec<u8>,
    request: bool,
    proto: i32,
    target: Option<super::host::HostPort<'_>>,
) -> u32 {
    let mut ev = 0;
    let named = |n: &'static [u8]| s.named(n);
    let value = |f: &Field| &s.bytes[f.value.clone()];
    let join = |n: &'static [u8], out: &mut Vec<u8>| s.join(n, out);
    // Repeated Content-Length fields are compared with the first rather
    // than joined: different lengths are ambiguous.
    let mut cls = named(b"content-length");
    let cl = cls.next().map(value);
    if let Some(first) = cl {
        let n = content_length(first);
        if cls.any(|f| content_length(value(f)) != n) {
            ev |= if request {
                Event::DuplicateClInRequest
            } else {
                Event::DuplicateClInResponse
            }
            .bit();
        }
    }
    let has_te = join(b"transfer-encoding", merged);
    if request {
        if has_te {
            if !has_token(merged, b"chunked") || proto < PROTO_1_1 {
                ev |= Event::InvalidTeInRequest.bit();
            }
        } else if cl.is_some_and(|v| content_length(v) < 0) {
            ev |= Event::InvalidClInRequest.bit();
        }
        if proto == PROTO_1_1 && named(b"host").next().is_none() {
            ev |= Event::MissingHostHeader.bit();
        }
        if join(b"host", merged) {
            ev |= host_events(merged, target);
        }
        if join(b"authorization", merged) {
            let known = [&b"basic"[..], b"digest", b"bearer"]
                .iter()
                .any(|m| merged.len() >= m.len() && merged[..m.len()].eq_ignore_ascii_case(m));
            if !known {
                ev |= Event::RequestAuthUnrecognized.bit();
            }
        }
    } else if has_te && contains_skipping_nul(merged, b"chunked") {
        // The body is chunked (libhtp's test), whatever Content-Length says.
        if !merged.eq_ignore_ascii_case(b"chunked") {
            ev |= Event::ResponseAbnormalTe.bit();
        }
        if proto < PROTO_1_1 {
            ev |= Event::ResponseChunkedOldProto.bit();
        }
    } else if cl.is_some_and(|v| content_length(v) < 0) {
        ev |= Event::InvalidClInResponse.bit();
    }
    if !request && join(b"content-encoding", merged) {
        let r = super::ce::read(merged, false);
        if r.too_many {
            ev |= Event::TooManyEncodingLayers.bit();
        }
        if r.abnormal {
            ev |= Event::AbnormalCeHeader.bit();
        }
    }
    ev
}

/// The events of a request's `Host` field `value` (repeated ones joined),
/// given the host and port of its target (libhtp's
/// `htp_tx_process_request_headers`): an invalid value, and a host or port
/// other than the target's.
fn host_events(value: &[u8], target: Option<super::host::HostPort<'_>>) -> u32 {
    let h = super::host::hostport(value);
    let mut ev = 0;
    if h.invalid || h.host.is_some_and(|n| !super::host::valid_hostname(n)) {
        ev |= Event::RequestHeaderHostInvalid.bit();
    }
    if let (Some(name), Some(t)) = (h.host, target) {
        let other_host = t.host.is_some_and(|u| !u.eq_ignore_ascii_case(name));
        let other_port = matches!((t.port, h.port), (Some(a), Some(b)) if a != b);
        if other_host || other_port {
            ev |= Event::HostHeaderAmbiguous.bit();
        }
    }
    ev
}

/// A request line's method, target and protocol (None for HTTP/0.9).
type RequestLine<'a> = (&'a [u8], Option<&'a [u8]>, Option<&'a [u8]>);

/// Parses a request line as libhtp's `htp_parse_request_line_generic`,
/// adding its events to `ev`: the method, the target (None if the line
/// has none) and the protocol part (None for an HTTP/0.9 request: no
/// header fields follow).
fn request_line<'a>(l: &'a [u8], ev: &mut u32) -> RequestLine<'a> {
    let len = l.len();
    let mut pos = l.iter().position(|&c| !is_space(c)).unwrap_or(len);
    if pos > 0 {
        *ev |= Event::RequestLineLeadingWhitespace.bit();
    }
    // The method.
    let mstart = pos;
    while pos < len && !is_space(l[pos]) {
        pos += 1;
    }
    let method = &l[mstart..pos];
    let mut bad = false;
    while pos < len && is_space(l[pos]) {
        bad |= l[pos] != b' ';
        pos += 1;
    }
    if bad {
        *ev |= Event::MethodDelimNonCompliant.bit();
    }
    if pos == len {
        return (method, None, None);
    }
    // The target ends at the first space; other whitespace before it is
    // non-compliant, and ends the target if no space follows.
    let start = pos;
    bad = false;
    while pos < len && l[pos] != b' ' {
        bad |= is_space(l[pos]);
        pos += 1;
    }
    if bad {
        *ev |= Event::UriDelimNonCompliant.bit();
        if pos == len {
            pos = start;
            while pos < len && !is_space(l[pos]) {
                pos += 1;
            }
        }
    }
    let uri = &l[start..pos];
    while pos < len && is_space(l[pos]) {
        pos += 1;
    }
    // The protocol is the rest of the line, trailing whitespace included.
    (method, Some(uri), (pos < len).then(|| &l[pos..]))
}

/// Parses a status line as libhtp's `htp_parse_response_line_generic` and
/// `htp_tx_state_response_line`, adding its events to `ev`; returns the
/// protocol's number.
fn status_line(l: &[u8], ev: &mut u32) -> i32 {
    let mut words = l.split(|&c| is_space(c)).filter(|w| !w.is_empty());
    let proto = words.next().map_or(PROTO_INVALID, protocol);
    if proto == PROTO_INVALID {
        *ev |= Event::ResponseInvalidProtocol.bit();
    }
    if !words.next().is_some_and(status_valid) {
        *ev |= Event::ResponseInvalidStatus.bit();
    }
    proto
}

/// Splits a request header field's bytes `d` as libhtp's
/// `htp_parse_request_header_generic`, adding its events to `ev`: the
/// name's and the value's ranges in `d`.
fn request_field(d: &[u8], ev: &mut u32) -> (Range<usize>, Range<usize>) {
    // The colon search stops at a NUL byte.
    let Some(colon) = d
        .iter()
        .position(|&c| c == b':' || c == 0)
        .filter(|&i| d[i] == b':')
    else {
        // A name-less field whose value is the whole line.
        *ev |= Event::RequestFieldMissingColon.bit();
        return (0..0, 0..d.len());
    };
    let mut end = colon;
    while end > 0 && is_lws(d[end - 1]) {
        end -= 1;
    }
    if colon == 0 || end < colon || !d[..end].iter().all(|&c| is_token(c)) {
        *ev |= Event::RequestHeaderInvalid.bit();
    }
    (0..end, value_range(d, colon + 1))
}

/// Splits a response header field's bytes `d` as libhtp's
/// `htp_parse_response_header_generic`, adding its events to `ev`;
/// `unparseable` and `invalid` are libhtp's once-per-transaction flags (a
/// missing colon sets both, so a later invalid name is not reported).
fn response_field(
    d: &[u8],
    ev: &mut u32,
    unparseable: &mut bool,
    invalid: &mut bool,
) -> (Range<usize>, Range<usize>) {
    let Some(colon) = d.iter().position(|&c| c == b':') else {
        if !*unparseable {
            *unparseable = true;
            *invalid = true;
            *ev |= Event::ResponseFieldMissingColon.bit();
        }
        return (0..0, value_range(d, 0));
    };
    // Control bytes and spaces before the colon are left out of the name.
    let mut end = colon;
    while end > 0 && d[end - 1] <= 0x20 {
        end -= 1;
    }
    if (colon == 0 || end < colon || !d[..end].iter().all(|&c| is_token(c))) && !*invalid {
        *invalid = true;
        *ev |= Event::ResponseHeaderInvalid.bit();
    }
    (0..end, value_range(d, colon + 1))
}

/// The value of a field from `from`: without spaces and tabs around it.
fn value_range(d: &[u8], from: usize) -> Range<usize> {
    let from = from.min(d.len());
    let a = from
        + d[from..]
            .iter()
            .position(|&c| !is_lws(c))
            .unwrap_or(d.len() - from);
    let z = d[a..]
        .iter()
        .rposition(|&c| !is_lws(c))
        .map_or(a, |i| a + i + 1);
    a..z
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str) -> Event {
        Event::parse(&format!("http.{name}")).unwrap()
    }

    /// True if a request with `line` and `fields` raises `name`.
    fn req(name: &str, line: &str, fields: &str) -> bool {
        let e = ev(name);
        assert!(e.request(), "{name}");
        e.raised(format!("{line}\r\n{fields}\r\n").as_bytes())
    }

    /// True if a response with `line` and `fields` raises `name`.
    fn resp(name: &str, line: &str, fields: &str) -> bool {
        let e = ev(name);
        assert!(!e.request(), "{name}");
        e.raised(format!("{line}\r\n{fields}\r\n").as_bytes())
    }

    const GET: &str = "GET / HTTP/1.1";
    const OK: &str = "HTTP/1.1 200 OK";

    #[test]
    fn content_encoding_events() {
        let tm = |f: &str| resp("too_many_encoding_layers", OK, f);
        let ab = |f: &str| resp("abnormal_ce_header", OK, f);
        assert!(tm("Content-Encoding: gzip, gzip, gzip"));
        assert!(!ab("Content-Encoding: gzip, gzip, gzip"));
        assert!(tm(
            "Content-Encoding: gzip\r\nContent-Encoding: gzip\r\ncontent-encoding: gzip"
        ));
        assert!(!tm("Content-Encoding: gzip, gzip"));
        assert!(ab("Content-Encoding: gzip, br"));
        assert!(ab("Content-Encoding: identity"));
        assert!(ab("Content-Encoding: GZIP, gzip"));
        assert!(!ab("Content-Encoding: GZIP"));
        assert!(!ab("Content-Encoding: x-gzip, x-deflate"));
        assert!(!ab("Content-Type: text/html"));
        // Joined: an empty first field leaves a list starting with `, `.
        assert!(ab("Content-Encoding: \r\nContent-Encoding: gzip"));
        assert!(!ab("Content-Encoding: gzip\r\nContent-Encoding: "));
        // Events of responses: a request's list raises nothing.
        assert!(
            analyse(
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Encoding: a, b, c\r\n\r\n",
                true
            ) & (Event::TooManyEncodingLayers.bit() | Event::AbnormalCeHeader.bit())
                == 0
        );
        let r = content_encoding(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\n\r\n", false);
        assert!(r.is_some_and(|r| r.abnormal && !r.too_many));
        assert_eq!(
            content_encoding(b"HTTP/1.1 200 OK\r\nX: y\r\n\r\n", false),
            None
        );
        assert_eq!(content_encoding(b"", false), None);
    }

    #[test]
    fn names() {
        for (n, e) in NAMES {
            assert_eq!(Event::parse(&format!("http.{n}")), Some(*e));
            assert!(e.bit() != 0);
        }
        assert_eq!(Event::parse("http.no_such_event"), None);
        assert_eq!(Event::parse("http.request_line_missing_protocol"), None);
        assert_eq!(
            Event::parse("invalid_transfer_encoding_value_in_request"),
            None
        );
    }

    #[test]
    fn the_transfer_encoding_value_decides() {
        let te = |proto: &str, fields: &str| {
            req(
                "invalid_transfer_encoding_value_in_request",
                &format!("POST /a {proto}"),
                &format!("Host: x\r\n{fields}"),
            )
        };
        // Valid: chunked among the tokens, on HTTP/1.1.
        for f in [
            "Transfer-Encoding: chunked\r\n",
            "transfer-encoding:   CHUNKED  \r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked , gzip\r\n",
            "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: gzip,\r\n chunked\r\n",
            "Content-Length: 4\r\n",
            "",
        ] {
            assert!(!te("HTTP/1.1", f), "{f:?}");
        }
        // Invalid: no chunked token (smuggling's favourites), or chunked
        // under another protocol than HTTP/1.1 exactly (Suricata 7.0.10:
        // HTTP/2.0 and a trailing space too).
        for f in [
            "Transfer-Encoding: xchunked\r\n",
            "Transfer-Encoding: chunkedx\r\n",
            "Transfer-Encoding: chunked-false\r\n",
            "Transfer-Encoding: identity\r\n",
            "Transfer-Encoding: \r\n",
            "Transfer-Encoding: \"chunked\"\r\n",
            "Transfer-Encoding : chunk\r\n",
        ] {
            assert!(te("HTTP/1.1", f), "{f:?}");
        }
        for p in ["HTTP/1.0", "HTTP/0.9", "HTTP/1.x", "HTTP/2.0", "HTTP/1.1 "] {
            assert!(te(p, "Transfer-Encoding: chunked\r\n"), "{p:?}");
        }
        assert!(!ev("invalid_transfer_encoding_value_in_request").raised(b""));
    }

    #[test]
    fn request_line_events() {
        let lw = |l: &str| req("request_line_leading_whitespace", l, "Host: x\r\n");
        assert!(lw("  GET / HTTP/1.1"));
        assert!(lw("\tGET / HTTP/1.1"));
        assert!(!lw(GET));
        let md = |l: &str| req("method_delim_non_compliant", l, "Host: x\r\n");
        assert!(md("GET\t/ HTTP/1.1"));
        assert!(md("GET \x0b/ HTTP/1.1"));
        assert!(!md("GET  / HTTP/1.1"));
        assert!(!md(GET));
        let ud = |l: &str| req("uri_delim_non_compliant", l, "Host: x\r\n");
        assert!(ud("GET /a\tb HTTP/1.1"));
        assert!(ud("GET /a\tHTTP/1.1"));
        assert!(ud("GET /a\x0bb HTTP/1.1"));
        assert!(!ud("GET /a HTTP/1.1\t"));
        assert!(!ud("GET /a  HTTP/1.1"));
        // A tab ending the target with no space after: the target ends
        // there and the protocol follows (so a Host is still required).
        assert!(req("missing_host_header", "GET /a\tHTTP/1.1", ""));
    }

    #[test]
    fn request_field_events() {
        let mc = |f: &str| {
            req(
                "request_field_missing_colon",
                GET,
                &format!("Host: x\r\n{f}"),
            )
        };
        assert!(mc("Foo\r\n"));
        assert!(mc("Fo\0o: v\r\n"));
        assert!(!mc("Foo: v\r\n"));
        assert!(!mc("Foo:\r\n"));
        // A folded line continues the field: its colon counts.
        assert!(!mc("Foo\r\n : bar\r\n"));
        let inv = |f: &str| req("request_header_invalid", GET, &format!("Host: x\r\n{f}"));
        for f in [
            ": v\r\n",
            "Foo : v\r\n",
            "Foo\t: v\r\n",
            "F(o: v\r\n",
            "F o: v\r\n",
            "Fo\x01: v\r\n",
            "Foo\r\n : bar\r\n",
        ] {
            assert!(inv(f), "{f:?}");
        }
        for f in [
            "Foo: v\r\n",
            "X-A_b.c~!#$%&'*+^`|: v\r\n",
            "Foo\r\n",
            "A: 1\r\n 2\r\n",
        ] {
            assert!(!inv(f), "{f:?}");
        }
        // The folded first line is a field of its own, its folding bytes
        // left out.
        assert!(!req("request_header_invalid", GET, " A: 1\r\nHost: x\r\n"));
        let fold = |f: &str| req("invalid_request_field_folding", GET, f);
        assert!(fold(" A: 1\r\nHost: x\r\n"));
        assert!(fold("\tA: 1\r\nHost: x\r\n"));
        assert!(fold("\0A: 1\r\nHost: x\r\n"));
        assert!(!fold("Host: x\r\nA: 1\r\n 2\r\n"));
    }

    #[test]
    fn host_and_protocol() {
        let mh = |l: &str, f: &str| req("missing_host_header", l, f);
        assert!(mh(GET, ""));
        assert!(mh("GET http://a.com/ HTTP/1.1", ""));
        assert!(mh(GET, "Host\r\n"));
        assert!(mh(GET, "X-Host: a\r\n"));
        assert!(!mh(GET, "hOST: x\r\n"));
        assert!(!mh(GET, "Host : x\r\n"));
        assert!(!mh(GET, "Host:\r\n"));
        // Only HTTP/1.1 exactly requires it.
        for p in [
            "HTTP/1.0",
            "HTTP/2.0",
            "HTTP/1.2",
            "http/1.1",
            "HTTP/01.1",
            "HTTP/1.1 ",
        ] {
            assert!(!mh(&format!("GET / {p}"), ""), "{p:?}");
        }
        // HTTP/0.9: the request line alone.
        assert!(!mh("GET /", ""));
    }

    #[test]
    fn content_length_and_auth() {
        let dup = |f: &str| {
            req(
                "duplicate_content_length_field_in_request",
                GET,
                &format!("Host: x\r\n{f}"),
            )
        };
        assert!(dup("Content-Length: 1\r\nContent-Length: 2\r\n"));
        assert!(dup("Content-Length: 1\r\ncontent-length: abc\r\n"));
        assert!(dup("Content-Length: abc\r\nContent-Length:\r\n"));
        assert!(!dup("Content-Length: 1\r\nContent-Length: 1\r\n"));
        assert!(!dup("Content-Length: 1\r\nContent-Length:  x1y\r\n"));
        assert!(!dup("Content-Length: abc\r\nContent-Length: xyz\r\n"));
        let inv = |f: &str| {
            req(
                "invalid_content_length_field_in_request",
                GET,
                &format!("Host: x\r\n{f}"),
            )
        };
        assert!(inv("Content-Length: abc\r\n"));
        assert!(inv("Content-Length:\r\n"));
        assert!(inv("Content-Length: 99999999999999999999\r\n"));
        for f in [
            "Content-Length: 1x\r\n",
            "Content-Length: x1\r\n",
            "Content-Length: -1\r\n",
            "Content-Length: \x001\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: abc\r\n",
            "Content-Length: 9223372036854775807\r\n",
        ] {
            assert!(!inv(f), "{f:?}");
        }
        let au = |f: &str| req("request_auth_unrecognized", GET, &format!("Host: x\r\n{f}"));
        assert!(au("Authorization: Negotiate abc\r\n"));
        assert!(au("Authorization: NTLM abc\r\n"));
        assert!(au("Authorization:\r\n"));
        assert!(au("Authorization: Foo y\r\nAuthorization: Basic YTpi\r\n"));
        for f in [
            "Authorization: Basic YTpi\r\n",
            "Authorization: basicfoo\r\n",
            "Authorization: Bearer x\r\n",
            "Authorization: digest x\r\n",
            "Authorization: Basic YTpi\r\nAuthorization: Foo y\r\n",
            "",
        ] {
            assert!(!au(f), "{f:?}");
        }
    }

    #[test]
    fn status_line_events() {
        let ip = |l: &str| resp("response_invalid_protocol", l, "Content-Length: 0\r\n");
        for p in ["HTTP/1.1", "HTTP/1.0", "HTTP/0.9"] {
            assert!(!ip(&format!("{p} 200 OK")), "{p}");
        }
        for p in [
            "HTTP/2.0",
            "HTTP/1.2",
            "http/1.1",
            "HTTP/01.1",
            "HTTP/1.10",
            "HTTP/2",
            "HTTP/1.01",
            "HTTPS/1.1",
        ] {
            assert!(ip(&format!("{p} 200 OK")), "{p}");
        }
        let is = |l: &str| resp("response_invalid_status", l, "Content-Length: 0\r\n");
        for s in ["200", "0200", "100", "999"] {
            assert!(!is(&format!("HTTP/1.1 {s} OK")), "{s}");
        }
        for s in ["099", "1000", "20x", "-200", "+200", "2 00"] {
            assert!(is(&format!("HTTP/1.1 {s} OK")), "{s}");
        }
        assert!(is("HTTP/1.1"));
        assert!(!is("HTTP/1.1 200"));
        assert!(!is("HTTP/1.1\t200\tOK"));
    }

    #[test]
    fn response_field_events() {
        let mc = |f: &str| {
            resp(
                "response_field_missing_colon",
                OK,
                &format!("{f}Content-Length: 0\r\n"),
            )
        };
        assert!(mc("Foo\r\n"));
        assert!(mc("F(o: v\r\nFoo\r\n"));
        assert!(!mc("Fo\0o: v\r\n"));
        assert!(!mc("Foo: v\r\n"));
        let inv = |f: &str| {
            resp(
                "response_header_invalid",
                OK,
                &format!("{f}Content-Length: 0\r\n"),
            )
        };
        for f in [
            ": v\r\n",
            "Foo : v\r\n",
            "Foo\x01: v\r\n",
            "F(o: v\r\n",
            "Fo\0o: v\r\n",
            "F(o: v\r\nFoo\r\n",
        ] {
            assert!(inv(f), "{f:?}");
        }
        // A missing colon first sets libhtp's "invalid" flag too.
        for f in ["Foo\r\nF(o: v\r\n", "Foo: a\0b\r\n", "Foo: v\r\n"] {
            assert!(!inv(f), "{f:?}");
        }
        assert!(!resp("response_header_invalid", OK, "\t A: 1\r\n"));
        let fold = |f: &str| resp("invalid_response_field_folding", OK, f);
        assert!(fold(" A: 1\r\nContent-Length: 0\r\n"));
        assert!(!fold("A: 1\r\n 2\r\nContent-Length: 0\r\n"));
    }

    #[test]
    fn response_framing_events() {
        let r = |n: &str, l: &str, f: &str| resp(n, l, f);
        let abn = "response_abnormal_transfer_encoding";
        assert!(r(abn, OK, "Transfer-Encoding: Chunked, gzip\r\n"));
        assert!(r(abn, OK, "Transfer-Encoding: xchunked\r\n"));
        assert!(r(abn, OK, "Transfer-Encoding: chun\0ked\r\n"));
        assert!(r(
            abn,
            OK,
            "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"
        ));
        assert!(!r(abn, OK, "Transfer-Encoding: CHUNKED\r\n"));
        assert!(!r(
            abn,
            OK,
            "Transfer-Encoding: gzip\r\nContent-Length: 0\r\n"
        ));
        let old = "response_chunked_old_proto";
        assert!(r(old, "HTTP/1.0 200 OK", "Transfer-Encoding: chunked\r\n"));
        assert!(r(old, "HTTP/2.0 200 OK", "Transfer-Encoding: chunked\r\n"));
        assert!(!r(old, OK, "Transfer-Encoding: chunked\r\n"));
        assert!(!r(old, "HTTP/1.0 200 OK", "Transfer-Encoding: gzip\r\n"));
        let inv = "invalid_content_length_field_in_response";
        assert!(r(inv, OK, "Content-Length: abc\r\n"));
        assert!(r(inv, OK, "Content-Length:\r\n"));
        assert!(r(inv, "HTTP/1.1 204 No Content", "Content-Length: abc\r\n"));
        assert!(r(
            inv,
            OK,
            "Transfer-Encoding: gzip\r\nContent-Length: abc\r\n"
        ));
        assert!(!r(
            inv,
            OK,
            "Transfer-Encoding: chunked\r\nContent-Length: abc\r\n"
        ));
        assert!(!r(inv, OK, "Content-Length: 5x\r\n"));
        let dup = "duplicate_content_length_field_in_response";
        assert!(r(dup, OK, "Content-Length: 0\r\nContent-Length: 1\r\n"));
        assert!(!r(dup, OK, "Content-Length: 0\r\ncontent-length:  0x\r\n"));
    }

    #[test]
    fn malformed_heads_do_not_panic() {
        for (n, e) in NAMES {
            for h in [
                &b""[..],
                b"\r\n",
                b"\n\n\n",
                b" ",
                b":",
                b"\0",
                b"HTTP/1.1",
                b"GET",
                b"GET \r\n:\r\n \r\n\0\r\n",
                b"\r\n\r\nGET / HTTP/1.1\r\n\tx\r\n",
            ] {
                let _ = (n, e.raised(h));
            }
        }
    }
}
