//! Suricata's legacy TLS keywords (detect-tls.c, detect-tls-cert-validity.c,
//! detect-ssl-version.c, detect-ssl-state.c of 7.0.10): their values, how
//! they match, and the per-flow handshake state `ssl_state` and
//! `ssl_version` need.
//!
//! * `tls.subject` and `tls.issuerdn` ([`CertCond`]): a substring of the
//!   server certificate's subject or issuer (the strings `tls.cert_subject`
//!   and `tls.cert_issuer` hold), `!` negating; a flow without a parsed
//!   certificate matches neither form.
//! * `tls_cert_notbefore`, `tls_cert_notafter` ([`DateCmp`]) compare the
//!   certificate's validity with a date; `tls_cert_expired` and
//!   `tls_cert_valid` compare its notAfter with the packet's time.
//! * `ssl_version` ([`SslVersion`]) and `ssl_state` ([`SslState`]) look at
//!   the flow's TLS parser state, which Suricata (IDS mode) updates when the
//!   other side acknowledges a direction's bytes, and inspects on every
//!   packet, raising each rule at most once per direction (TLS has a single
//!   transaction). [`TlsFlow`] models that: a direction's records are walked
//!   as they arrive ([`Walk`]), their effect held as pending until the next
//!   packet of the other direction, and the states each direction's packets
//!   saw are remembered so that a rule fires only on the first packet of a
//!   direction it matches.

use super::events::{Event, Hb};
use sluice_state::{DecodeError, Reader, Writer};

/// `ssl_state` bits: a ClientHello was the last such message parsed.
pub const CLIENT_HELLO: u8 = 1;
/// A ServerHello.
pub const SERVER_HELLO: u8 = 2;
/// A ClientKeyExchange.
pub const CLIENT_KEYX: u8 = 4;
/// A ServerKeyExchange.
pub const SERVER_KEYX: u8 = 8;
/// `unknown`: Suricata's parser never sets it (only its negation matches).
pub const UNKNOWN: u8 = 16;
/// The four states a parse can leave.
const STATE_BITS: u8 = 0x0f;

/// `ssl_state:[!]state[|[!]state]...` (detect-ssl-state.c): matches when
/// `(flags & current) ^ mask` is not zero, `mask` holding the negated
/// states; so the states are OR-ed, a negated one true when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SslState {
    /// The states named.
    pub flags: u8,
    /// The states named with `!`.
    pub mask: u8,
}

impl SslState {
    /// Parses the keyword's value: names separated by `|` or `,` (spaces
    /// around the separators), each optionally prefixed by `!`.
    pub fn parse(v: &str) -> Option<SslState> {
        let mut s = SslState { flags: 0, mask: 0 };
        let mut first = true;
        for part in v.trim().split(['|', ',']) {
            // Suricata's first name has no leading space (the value is
            // trimmed); later ones may have spaces around the separator.
            let p = if first { part.trim_end() } else { part.trim() };
            first = false;
            let (neg, name) = match p.strip_prefix('!') {
                Some(n) => (true, n),
                None => (false, p),
            };
            let bit = match name {
                "client_hello" => CLIENT_HELLO,
                "server_hello" => SERVER_HELLO,
                "client_keyx" => CLIENT_KEYX,
                "server_keyx" => SERVER_KEYX,
                "unknown" => UNKNOWN,
                _ => return None,
            };
            s.flags |= bit;
            if neg {
                s.mask |= bit;
            }
        }
        Some(s)
    }

    /// True if the flow's current state bits `cur` match.
    #[inline]
    pub fn matches(&self, cur: u8) -> bool {
        (self.flags & cur) ^ self.mask != 0
    }
}

/// The versions `ssl_version` names, in Suricata's order (a bit each).
const VERSION_NAMES: [&str; 6] = ["sslv2", "sslv3", "tls1.0", "tls1.1", "tls1.2", "tls1.3"];

/// The class ([`VERSION_NAMES`] index) of a version as Suricata keeps it:
/// SSLv2 records, SSL 3.0 to TLS 1.2, and TLS 1.3 with its drafts (up to
/// draft 28, 0x7f1c); any other value matches no `ssl_version`.
pub fn version_class(v: u16) -> Option<u8> {
    match v {
        0x0002 => Some(0),
        0x0300..=0x0304 => Some((v - 0x0300) as u8 + 1),
        0x7f01..=0x7f1c => Some(5),
        _ => None,
    }
}

/// `ssl_version:[!]v[,[!]v]...` (detect-ssl-version.c of 7.0.10): matches
/// when the version Suricata keeps for the packet's side is one named. A
/// negated name inverts its own entry only, and forms may not be mixed, so
/// in 7.0.10 a negated value never matches (fixed in Suricata 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SslVersion {
    /// The classes named (bit per [`VERSION_NAMES`] index).
    pub set: u8,
    /// Those named with `!`.
    pub neg: u8,
}

impl SslVersion {
    /// Parses the keyword's value: names separated by commas or spaces,
    /// case-insensitive, none twice, all negated or none.
    pub fn parse(v: &str) -> Result<SslVersion, &'static str> {
        let mut s = SslVersion { set: 0, neg: 0 };
        let mut forms = 0u8;
        let words = v.split(|c: char| c == ',' || c.is_ascii_whitespace());
        for w in words.filter(|w| !w.is_empty()) {
            let (neg, name) = match w.strip_prefix('!') {
                Some(n) => (true, n),
                None => (false, w),
            };
            let i = VERSION_NAMES
                .iter()
                .position(|n| n.eq_ignore_ascii_case(name))
                .ok_or("unknown version")?;
            if s.set & 1 << i != 0 {
                return Err("version named twice");
            }
            s.set |= 1 << i;
            if neg {
                s.neg |= 1 << i;
            }
            forms |= 1 << neg as u8;
            if forms == 3 {
                return Err("negated and plain versions mixed");
            }
        }
        if s.set == 0 {
            return Err("no version");
        }
        Ok(s)
    }

    /// True if `ver`, the version kept for the packet's side, matches.
    #[inline]
    pub fn matches(&self, ver: u16) -> bool {
        version_class(ver).is_some_and(|i| (self.set ^ self.neg) >> i & 1 == 1)
    }
}

/// How `tls_cert_notbefore`/`tls_cert_notafter` compare (detect-tls-cert-validity.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateMode {
    /// The date itself.
    Eq,
    /// `<`: at or before (Suricata compares with `<=`).
    Le,
    /// `>`: at or after (`>=`).
    Ge,
    /// `a<>b`: from `a` to `b`, both included.
    Range,
}

/// A date comparison, dates in seconds since the epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateCmp {
    /// The comparison.
    pub mode: DateMode,
    /// The date (the range's start).
    pub a: i64,
    /// The range's end.
    pub b: i64,
}

impl DateCmp {
    /// Parses `[<|>]date` or `date<>date`. A date is all digits (seconds
    /// since the epoch) or `YYYY-MM[-DD[( |T)HH[:MM[:SS]]]]` (UTC), at most
    /// 19 characters as Suricata's buffers hold.
    pub fn parse(v: &str) -> Result<DateCmp, &'static str> {
        let v = v.trim();
        let (mode, rest) = match v.as_bytes().first() {
            Some(b'<') if !v.starts_with("<>") => (DateMode::Le, &v[1..]),
            Some(b'>') => (DateMode::Ge, &v[1..]),
            _ => (DateMode::Eq, v),
        };
        let (one, two) = match rest.find("<>") {
            Some(i) => (&rest[..i], Some(&rest[i + 2..])),
            None => (rest, None),
        };
        // Suricata's value pattern: spaces to ':' (ASCII 0x20-0x3a), 'T' and 'W'.
        let ok = |s: &str| {
            !s.trim().is_empty()
                && s.bytes()
                    .all(|c| (b' '..=b':').contains(&c) || c == b'T' || c == b'W')
        };
        let one = one.trim_start();
        if !ok(one) || one.len() > 19 {
            return Err("bad date");
        }
        let a = date_epoch(one.trim()).ok_or("bad date")?;
        let Some(two) = two else {
            return Ok(DateCmp { mode, a, b: 0 });
        };
        if mode != DateMode::Eq {
            return Err("a range with < or >");
        }
        let two = two.trim_start();
        if !ok(two) || two.len() > 19 {
            return Err("bad date");
        }
        let b = date_epoch(two.trim()).ok_or("bad date")?;
        if b <= a {
            return Err("a range's end before its start");
        }
        Ok(DateCmp {
            mode: DateMode::Range,
            a,
            b,
        })
    }

    /// True if the certificate's date `t` (0: none) matches.
    #[inline]
    pub fn matches(&self, t: i64) -> bool {
        t != 0
            && match self.mode {
                DateMode::Eq => t == self.a,
                DateMode::Le => t <= self.a,
                DateMode::Ge => t >= self.a,
                DateMode::Range => t >= self.a && t <= self.b,
            }
    }
}

/// Reads a decimal number of at most `max` digits at `s[*at..]` (spaces
/// before it skipped, as glibc's strptime does).
fn number(s: &[u8], at: &mut usize, max: usize) -> Option<i64> {
    while s.get(*at) == Some(&b' ') {
        *at += 1;
    }
    let start = *at;
    while *at < s.len() && *at - start < max && s[*at].is_ascii_digit() {
        *at += 1;
    }
    std::str::from_utf8(&s[start..*at]).ok()?.parse().ok()
}

/// Days from 1970-01-01 to a proleptic Gregorian date (month and day may
/// overflow, as `mktime` normalises them).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// A date of Suricata's formats as seconds since the epoch: all digits is
/// the number itself (saturating), else `%Y-%m`, `%Y-%m-%d`, then the
/// time after a space (any number, none included) or `T`: `%H`, `%H:%M`,
/// `%H:%M:%S`, as strptime reads them (fields range-checked, numbers up to
/// 4 digits for the year and 2 for the rest).
pub fn date_epoch(s: &str) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|c| c.is_ascii_digit()) {
        return Some(s.parse::<i64>().unwrap_or(i64::MAX));
    }
    let b = s.as_bytes();
    let mut at = 0;
    let lit = |at: &mut usize, c: u8| {
        if b.get(*at) == Some(&c) {
            *at += 1;
            true
        } else {
            false
        }
    };
    let y = number(b, &mut at, 4)?;
    if !lit(&mut at, b'-') {
        return None;
    }
    let m = number(b, &mut at, 2).filter(|m| (1..=12).contains(m))?;
    let mut fields = [1i64, 0, 0, 0];
    if at < b.len() {
        if !lit(&mut at, b'-') {
            return None;
        }
        fields[0] = number(b, &mut at, 2).filter(|d| (1..=31).contains(d))?;
        if at < b.len() {
            if !lit(&mut at, b'T') {
                while b.get(at).is_some_and(|c| c.is_ascii_whitespace()) {
                    at += 1;
                }
            }
            let limits = [23, 59, 61];
            for (i, lim) in limits.iter().enumerate() {
                if i > 0 {
                    if at == b.len() {
                        break;
                    }
                    if !lit(&mut at, b':') {
                        return None;
                    }
                }
                fields[i + 1] = number(b, &mut at, 2).filter(|v| (0..=*lim).contains(v))?;
            }
        }
    }
    if at != b.len() {
        return None;
    }
    let [d, h, mi, se] = fields;
    Some(days_from_civil(y, m, d) * 86400 + h * 3600 + mi * 60 + se)
}

/// A condition on the server certificate, evaluated with its buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertCond {
    /// `tls.subject`: `needle` a substring of the subject (not, if `neg`).
    Subject {
        /// The string looked for.
        needle: Box<[u8]>,
        /// `!`: the subject must not contain it.
        neg: bool,
    },
    /// `tls.issuerdn`: likewise on the issuer.
    Issuer {
        /// The string looked for.
        needle: Box<[u8]>,
        /// `!`: the issuer must not contain it.
        neg: bool,
    },
    /// `tls_cert_notbefore`.
    NotBefore(DateCmp),
    /// `tls_cert_notafter`.
    NotAfter(DateCmp),
    /// `tls_cert_expired`: the packet's time is past notAfter.
    Expired,
    /// `tls_cert_valid`: it is not (notBefore is not looked at, as in
    /// Suricata).
    Valid,
}

/// What [`CertCond`] reads of a parsed certificate.
#[derive(Debug, Clone, Copy)]
pub struct CertView<'a> {
    /// The subject, as `tls.cert_subject` holds it.
    pub subject: &'a [u8],
    /// The issuer.
    pub issuer: &'a [u8],
    /// notBefore and notAfter, seconds since the epoch.
    pub not_before: i64,
    /// notAfter.
    pub not_after: i64,
}

impl CertCond {
    /// Parses the value of `tls.subject`/`tls.issuerdn`: `[!]"text"`, the
    /// text of Suricata's characters (letters, digits, `[\]^_` and the
    /// backquote, spaces, `-.=,*@`), taken as written.
    pub fn parse_dn(issuer: bool, v: &str) -> Result<CertCond, &'static str> {
        let v = v.trim();
        let (neg, v) = match v.strip_prefix('!') {
            Some(r) => (true, r.trim_start()),
            None => (false, v),
        };
        let inner = v
            .strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .ok_or("the value must be double quoted")?;
        let ok = |c: u8| {
            (b'A'..=b'z').contains(&c)
                || c.is_ascii_digit()
                || c.is_ascii_whitespace()
                || matches!(c, b'-' | b'.' | b'=' | b',' | b'*' | b'@')
        };
        if inner.is_empty() || !inner.bytes().all(ok) {
            return Err("a character Suricata does not accept");
        }
        let needle = inner.as_bytes().into();
        Ok(if issuer {
            CertCond::Issuer { needle, neg }
        } else {
            CertCond::Subject { needle, neg }
        })
    }

    /// True if the certificate `c` matches at packet time `now` (seconds).
    pub fn matches(&self, c: &CertView<'_>, now: i64) -> bool {
        let has = |h: &[u8], n: &[u8]| h.windows(n.len()).any(|w| w == n);
        match self {
            CertCond::Subject { needle, neg } => has(c.subject, needle) != *neg,
            CertCond::Issuer { needle, neg } => has(c.issuer, needle) != *neg,
            CertCond::NotBefore(d) => d.matches(c.not_before),
            CertCond::NotAfter(d) => d.matches(c.not_after),
            CertCond::Expired => c.not_after != 0 && now > c.not_after,
            CertCond::Valid => c.not_after != 0 && now <= c.not_after,
        }
    }
}

// ------------------------------------------------------------ flow state

/// [`TlsFlow::cur`]: the flow's TLS state exists (Suricata parsed bytes of
/// it); before, no `ssl_state` or `ssl_version` matches, negated or not.
pub const EXISTS: u8 = 0x80;
/// [`TlsFlow::hs`]: a ClientHello was parsed (the client's record versions
/// no longer change its version).
const HS_CLIENT: u8 = 1;
/// A ServerHello was parsed.
const HS_SERVER: u8 = 2;
/// A ChangeCipherSpec was seen, either way: later handshake records are
/// encrypted and not parsed.
const HS_CCS: u8 = 4;
/// A parse error ([`super::events`]): Suricata parses neither direction
/// any more.
const HS_ERR: u8 = 8;

/// Where a direction's walk is.
const W_RECORD: u8 = 0;
/// Inside a TLS record's body.
const W_BODY: u8 = 1;
/// Not TLS, or lost: nothing more is read.
const W_DEAD: u8 = 2;
/// The walk state's bits.
const W_MODE: u8 = 0x03;
/// The record is a handshake parsed for its messages.
const W_PARSE: u8 = 0x04;
/// The record is a heartbeat: [`Walk::mtype`] counts its first 3 bytes
/// (held in [`Walk::msg_left`]) until they decide its event, which
/// `msg_left` then holds until the record ends.
const W_HB: u8 = 0x08;
/// [`Walk::mtype`] of a handshake message of a type Suricata does not know:
/// skipped to the end of its record.
const M_UNKNOWN: u8 = 0xfe;
/// Bits 4-6: the state set by the record's messages so far (0: none),
/// applied when the record completes.
const W_FLAGS_SHIFT: u8 = 4;

/// A direction's walk over its TLS records, across segments: which
/// handshake messages its records carry (Suricata's parser state of it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Walk {
    /// [`W_RECORD`], [`W_BODY`] or [`W_DEAD`], [`W_PARSE`], and the
    /// record's state (index into [`STATES`], plus one).
    mode: u8,
    /// Header bytes held (a record's 5, or 4 of a handshake message) when a
    /// segment ends inside one.
    part: [u8; 5],
    npart: u8,
    /// Body bytes left in the current record.
    rec_left: u16,
    /// Body bytes left in the current handshake message (24 bits), when
    /// inside one ([`Walk::in_msg`]).
    msg_left: u32,
    /// The current message's type, or 0xff outside one.
    mtype: u8,
}

/// The `ssl_state` bits, by index.
const STATES: [u8; 4] = [CLIENT_HELLO, SERVER_HELLO, CLIENT_KEYX, SERVER_KEYX];

/// What a direction's bytes did to Suricata's parser state: the state bits
/// its last parse leaves and the version, applied on the next packet of the
/// other direction (Suricata parses a direction's bytes when the other side
/// acknowledges them, IDS mode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Bytes were parsed ([`TlsFlow::apply`] has something to apply).
    pub has: bool,
    /// The state bits after them.
    pub flags: u8,
    /// The direction's version after them.
    pub ver: u16,
    /// The events they raise ([`Event::bit`]).
    pub events: u16,
}

/// A flow's TLS parser state as `ssl_state` and `ssl_version` see it
/// (Suricata's `SSLState` as far as they read it), in the flow's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsFlow {
    /// [`EXISTS`] and the current state bits (Suricata's `current_flags`).
    pub cur: u8,
    /// [`HS_CLIENT`], [`HS_SERVER`], [`HS_CCS`].
    hs: u8,
    /// Per direction (to server, to client), its version (0: unknown).
    pub ver: [u16; 2],
    /// Per direction: the state values (bit per `cur & 0x0f`) its packets
    /// saw, and those seen while its version was known.
    seen: [u16; 2],
    seen_ver: [u16; 2],
    /// Per direction, bytes not yet applied.
    pub pend: [Pending; 2],
    /// Per direction, the walk over its records.
    walk: [Walk; 2],
    /// The events raised so far (Suricata keeps them on the flow's single
    /// transaction), and per direction those its packets saw.
    pub events: u16,
    seen_ev: [u16; 2],
    /// The flow's heartbeat state.
    hb: Hb,
}

impl TlsFlow {
    /// True when the flow has no TLS state (not written to the store).
    pub fn is_empty(&self) -> bool {
        *self == TlsFlow::default()
    }

    /// Walks a direction's new stream bytes `data` (at stream offset
    /// `base`; `gap`: bytes before them were lost), recording their effect
    /// as pending. A direction whose stream does not start with a TLS
    /// record (or an SSLv2 one) is not walked.
    pub fn feed(&mut self, d: usize, data: &[u8], base: u64, gap: bool) {
        if data.is_empty() {
            return;
        }
        if gap || (base == 0 && !looks_tls(data)) {
            self.walk[d].mode = W_DEAD;
            return;
        }
        if base != 0 && self.walk[d] == Walk::default() && !self.pend[d].has && self.ver[d] == 0 {
            // Bytes of a stream whose start was not seen (picked up in the
            // middle): not walked.
            self.walk[d].mode = W_DEAD;
        }
        if self.walk[d].mode & W_MODE == W_DEAD || self.hs & HS_ERR != 0 {
            return;
        }
        if !self.pend[d].has {
            // A new parse: Suricata clears the state bits when it starts on
            // a record's first byte.
            let at_record = self.walk[d].mode & W_MODE == W_RECORD && self.walk[d].npart == 0;
            self.pend[d] = Pending {
                has: true,
                flags: if at_record { 0 } else { self.cur & STATE_BITS },
                ver: self.ver[d],
                events: 0,
            };
        }
        let mut w = self.walk[d];
        let mut p = self.pend[d];
        w.run(d, data, (&mut self.hs, &mut self.hb), &mut p);
        self.walk[d] = w;
        self.pend[d] = p;
    }

    /// Adds the events of the client's hello, parsed whole
    /// ([`super::events::client_hello_events`], which the walk does not
    /// do), to what its bytes raise; nothing once a parse error stopped
    /// the flow's parsing.
    pub fn hello_events(&mut self, events: u16) {
        if events != 0 && self.pend[0].has && self.hs & HS_ERR == 0 {
            self.pend[0].events |= events;
        }
    }

    /// Sets the version a direction's hello gives (the hello parsed whole by
    /// [`super::Hello::negotiated_version`], which the walk does not do).
    pub fn hello_version(&mut self, d: usize, ver: u16) {
        if self.pend[d].has {
            self.pend[d].ver = ver;
        }
    }

    /// A packet of direction `x`: the other direction's pending bytes are
    /// parsed now (the packet acknowledges them). Returns true if the flow
    /// has a TLS state, the rules then to be evaluated.
    pub fn apply(&mut self, x: usize) -> bool {
        let o = 1 - x;
        if self.pend[o].has {
            let p = self.pend[o];
            self.pend[o] = Pending::default();
            self.cur = EXISTS | (p.flags & STATE_BITS);
            self.events |= p.events;
            if p.ver != self.ver[o] {
                self.ver[o] = p.ver;
                self.seen_ver[o] = 0;
            }
        }
        self.cur & EXISTS != 0
    }

    /// True if a rule of conditions `state` and `version`, evaluated on an
    /// earlier packet of direction `x`, matched already (it would have
    /// fired then: Suricata raises it once per direction).
    pub fn matched_before(&self, x: usize, state: &[SslState], version: &[SslVersion]) -> bool {
        let (seen, ver) = if version.is_empty() {
            (self.seen[x], 0)
        } else {
            (self.seen_ver[x], self.ver[x])
        };
        (0..16u8)
            .filter(|v| seen >> v & 1 == 1)
            .any(|v| state.iter().all(|s| s.matches(v)) && version.iter().all(|s| s.matches(ver)))
    }

    /// True if a rule on the events `mask` (all of them) matches on this
    /// packet of direction `x`: they are raised, and were not all raised
    /// already when an earlier packet of `x` was inspected (it fired then).
    #[inline]
    pub fn events_match(&self, x: usize, mask: u16) -> bool {
        self.events & mask == mask && self.seen_ev[x] & mask != mask
    }

    /// Remembers that a packet of direction `x` saw the current state.
    pub fn saw(&mut self, x: usize) {
        self.seen_ev[x] = self.events;
        let v = 1u16 << (self.cur & STATE_BITS);
        self.seen[x] |= v;
        if version_class(self.ver[x]).is_some() {
            self.seen_ver[x] |= v;
        }
    }

    /// Writes the state (after [`TlsFlow::is_empty`] said there is one).
    pub fn encode(&self, w: &mut Writer<'_>) {
        w.u8(self.cur).u8(self.hs);
        for d in 0..2 {
            w.u16(self.ver[d]).u16(self.seen[d]).u16(self.seen_ver[d]);
            let p = self.pend[d];
            w.u8(p.has as u8 | p.flags << 1).u16(p.ver);
            let k = self.walk[d];
            w.u8(k.mode).u8(k.npart);
            w.bytes(&k.part[..k.npart as usize]);
            w.u16(k.rec_left).u32(k.msg_left).u8(k.mtype);
        }
        // Since flow record version 12.
        w.u16(self.events).u16(self.seen_ev[0]).u16(self.seen_ev[1]);
        w.u8(self.hb.flags).u16(self.hb.len);
        w.u16(self.pend[0].events).u16(self.pend[1].events);
    }

    /// Reads what [`TlsFlow::encode`] wrote; `events`: the record has the
    /// event state (flow record version 12 on).
    pub fn decode(r: &mut Reader<'_>, events: bool) -> Result<TlsFlow, DecodeError> {
        let mut s = TlsFlow {
            cur: r.u8()?,
            hs: r.u8()?,
            ..TlsFlow::default()
        };
        for d in 0..2 {
            s.ver[d] = r.u16()?;
            s.seen[d] = r.u16()?;
            s.seen_ver[d] = r.u16()?;
            let b = r.u8()?;
            s.pend[d] = Pending {
                has: b & 1 != 0,
                flags: b >> 1 & STATE_BITS,
                ver: r.u16()?,
                events: 0,
            };
            let mode = r.u8()?;
            let n = r.u8()?;
            if mode & W_MODE > W_DEAD || n > 5 {
                return Err(DecodeError("bad tls walk state"));
            }
            let mut k = Walk {
                mode,
                npart: n,
                ..Walk::default()
            };
            k.part[..n as usize].copy_from_slice(r.bytes(n as usize)?);
            k.rec_left = r.u16()?;
            k.msg_left = r.u32()?;
            k.mtype = r.u8()?;
            s.walk[d] = k;
        }
        if events {
            s.events = r.u16()?;
            s.seen_ev = [r.u16()?, r.u16()?];
            s.hb = Hb {
                flags: r.u8()?,
                len: r.u16()?,
            };
            s.pend[0].events = r.u16()?;
            s.pend[1].events = r.u16()?;
        }
        Ok(s)
    }
}

/// True if a direction's first bytes are a TLS record (a handshake record
/// of version 3.x) or an SSLv2 record (top bit of its length set).
fn looks_tls(b: &[u8]) -> bool {
    match b {
        [22, 3, ..] | [22] => true,
        [h, ..] => h & 0x80 != 0,
        [] => false,
    }
}

impl Walk {
    /// True when inside a handshake message's body.
    fn in_msg(&self) -> bool {
        self.mtype != 0xff && self.npart == 0 && self.mode & W_MODE == W_BODY
    }

    /// A parse error raising `events`: Suricata stops parsing the flow.
    fn fail(&mut self, events: u16, hs: &mut u8, p: &mut Pending) {
        p.events |= events;
        *hs |= HS_ERR;
        self.mode = W_DEAD;
    }

    /// Reads `b`, direction `d`'s next bytes.
    fn run(&mut self, d: usize, mut b: &[u8], (hs, hb): (&mut u8, &mut Hb), p: &mut Pending) {
        while !b.is_empty() {
            match self.mode & W_MODE {
                W_DEAD => return,
                W_RECORD => {
                    let first = if self.npart > 0 { self.part[0] } else { b[0] };
                    if first & 0xc0 != 0 && first != 22 {
                        // An SSLv2 record: a 2-byte length (top bit set) or a
                        // 3-byte one, then the message type.
                        let hlen = if first & 0x80 != 0 { 3 } else { 4 };
                        if !self.take(&mut b, hlen) {
                            return;
                        }
                        // A ClientHello's version follows its type: Suricata
                        // keeps it (read here with a 2-byte header only).
                        let t = self.part[hlen - 1];
                        let need = if t == 1 && hlen == 3 { 5 } else { hlen };
                        if !self.take(&mut b, need) {
                            return;
                        }
                        let h = std::mem::take(&mut self.part);
                        self.npart = 0;
                        let len = if hlen == 3 {
                            (h[0] as usize & 0x7f) << 8 | h[1] as usize
                        } else {
                            (h[0] as usize & 0x3f) << 8 | h[1] as usize
                        };
                        p.ver = if need == 5 {
                            u16::from_be_bytes([h[3], h[4]])
                        } else {
                            0x0002
                        };
                        match (t, d) {
                            (1, _) => p.flags = CLIENT_HELLO,
                            (4, _) => p.flags = SERVER_HELLO,
                            (2, _) => p.flags = 0,
                            (8, 0) => p.flags = CLIENT_KEYX,
                            _ => {}
                        }
                        // The type byte (and a hello's version) are part of
                        // the length; a 3-byte header's padding byte is not.
                        let body = len.saturating_sub(1 + need - hlen);
                        let skip = body.min(b.len());
                        b = &b[skip..];
                        if body > skip {
                            // Resumes in the next segment as a record body
                            // that is not parsed.
                            self.rec_left = (body - skip).min(u16::MAX as usize) as u16;
                            self.mode = W_BODY;
                            self.mtype = 0xff;
                        }
                        continue;
                    }
                    if !self.take(&mut b, 5) {
                        return;
                    }
                    let h = std::mem::take(&mut self.part);
                    self.npart = 0;
                    if !(20..=24).contains(&h[0]) {
                        // Suricata checks the type whatever the version.
                        self.fail(Event::InvalidRecordType.bit(), hs, p);
                        return;
                    }
                    if h[1] != 3 {
                        self.mode = W_DEAD;
                        return;
                    }
                    if *hs & if d == 0 { HS_CLIENT } else { HS_SERVER } == 0 {
                        // Suricata keeps a record's version until the hello.
                        p.ver = u16::from_be_bytes([h[1], h[2]]);
                    }
                    if h[0] == 20 {
                        *hs |= HS_CCS;
                    }
                    self.rec_left = u16::from_be_bytes([h[3], h[4]]);
                    // A handshake record is parsed unless a ChangeCipherSpec
                    // came before (TLS 1.3's compatibility one before the
                    // ServerHello excepted, as in Suricata).
                    let tls13_early = *hs & HS_CLIENT != 0
                        && *hs & HS_SERVER == 0
                        && version_class(p.ver).is_some_and(|c| c == 5);
                    let parse = h[0] == 22 && (*hs & HS_CCS == 0 || tls13_early);
                    if self.rec_left == 0 {
                        self.fail(Event::InvalidRecordLength.bit(), hs, p);
                        return;
                    }
                    if parse && self.rec_left < 4 {
                        // Too short for a handshake message's header.
                        self.fail(Event::InvalidSslRecord.bit(), hs, p);
                        return;
                    }
                    self.mode = W_BODY | if parse { W_PARSE } else { 0 };
                    if !parse {
                        self.mtype = 0xff;
                    }
                    if h[0] == 24 {
                        self.mode |= W_HB;
                        self.mtype = 0;
                        self.msg_left = 0;
                    }
                }
                _ => {
                    let n = (self.rec_left as usize).min(b.len());
                    let (body, rest) = b.split_at(n);
                    if self.mode & W_PARSE != 0 {
                        self.messages(body, hs, p);
                    } else if self.mode & W_HB != 0 && self.mtype < 3 {
                        for (i, &c) in body.iter().enumerate().take(3 - self.mtype as usize) {
                            self.msg_left = self.msg_left << 8 | c as u32;
                            self.mtype += 1;
                            if self.mtype == 3 {
                                // The record's length: these 3 bytes and
                                // those after them.
                                let len = 3 + (self.rec_left as usize - i - 1);
                                let [_, t, hi, lo] = self.msg_left.to_be_bytes();
                                let ccs = *hs & HS_CCS != 0;
                                let ev = hb.record(d, len as u16, Some([t, hi, lo]), ccs);
                                // Raised when the record is whole, as
                                // Suricata parses it then.
                                self.msg_left = ev.map_or(0, |e| e.bit() as u32);
                            }
                        }
                    }
                    self.rec_left -= n as u16;
                    b = rest;
                    if self.rec_left == 0 {
                        if self.mode & W_HB != 0 && self.mtype == 3 && self.msg_left != 0 {
                            self.fail(self.msg_left as u16, hs, p);
                            return;
                        }
                        if self.npart > 0 {
                            // A message header cut by its record's end.
                            let ev = Event::InvalidSslRecord.bit()
                                | Event::InvalidHandshakeMessage.bit();
                            self.fail(ev, hs, p);
                            return;
                        }
                        self.end_record(p);
                    }
                }
            }
        }
    }

    /// Holds bytes of a header until `n` are there; true when whole (in
    /// `part`).
    fn take(&mut self, b: &mut &[u8], n: usize) -> bool {
        let have = self.npart as usize;
        if have >= n {
            return true;
        }
        let k = (n - have).min(b.len());
        self.part[have..have + k].copy_from_slice(&b[..k]);
        self.npart += k as u8;
        *b = &b[k..];
        self.npart as usize == n
    }

    /// The handshake messages in `b`, bytes of a parsed record's body.
    fn messages(&mut self, mut b: &[u8], hs: &mut u8, p: &mut Pending) {
        while !b.is_empty() {
            if self.in_msg() && self.msg_left > 0 {
                let n = (self.msg_left as usize).min(b.len());
                self.msg_left -= n as u32;
                b = &b[n..];
                if self.msg_left == 0 {
                    self.end_message(hs);
                }
                continue;
            }
            if !self.take(&mut b, 4) {
                return;
            }
            let h = std::mem::take(&mut self.part);
            self.npart = 0;
            self.mtype = h[0];
            if !super::events::known_handshake(h[0]) {
                // Skipped to its record's end, not across records.
                p.events |= Event::InvalidHandshakeMessage.bit();
                self.mtype = M_UNKNOWN;
            }
            self.msg_left = u32::from_be_bytes([0, h[1], h[2], h[3]]);
            if self.msg_left == 0 {
                self.end_message(hs);
            }
        }
    }

    /// A whole handshake message of type [`Walk::mtype`].
    fn end_message(&mut self, hs: &mut u8) {
        let i = match self.mtype {
            1 => {
                *hs |= HS_CLIENT;
                0
            }
            2 => {
                *hs |= HS_SERVER;
                1
            }
            16 => 2,
            12 => 3,
            _ => {
                self.mtype = 0xff;
                return;
            }
        };
        self.mode = (self.mode & !(7 << W_FLAGS_SHIFT)) | (i + 1) << W_FLAGS_SHIFT;
        self.mtype = 0xff;
    }

    /// The record ends: its last message's state becomes the current one
    /// (Suricata parses a record once it is whole).
    fn end_record(&mut self, p: &mut Pending) {
        let i = self.mode >> W_FLAGS_SHIFT & 7;
        if i > 0 {
            p.flags = STATES[i as usize - 1];
        }
        // A message going on into the next record keeps its place.
        let keep = self.mtype != 0xff && self.mtype != M_UNKNOWN && self.mode & W_PARSE != 0;
        self.mode = W_RECORD;
        if !keep {
            self.mtype = 0xff;
            self.msg_left = 0;
        }
        if self.npart > 0 {
            // A message header cut by its record's end: Suricata gives the
            // direction up.
            self.mode = W_DEAD;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_state_parses_and_matches() {
        let s = SslState::parse("client_hello").unwrap();
        assert!(s.matches(CLIENT_HELLO) && !s.matches(SERVER_KEYX) && !s.matches(0));
        let s = SslState::parse("!client_hello").unwrap();
        assert!(!s.matches(CLIENT_HELLO) && s.matches(0) && s.matches(CLIENT_KEYX));
        let s = SslState::parse("server_hello | client_keyx,server_keyx").unwrap();
        assert_eq!(s.flags, SERVER_HELLO | CLIENT_KEYX | SERVER_KEYX);
        // `!a|b`: matches with b, or without a.
        let s = SslState::parse("!client_hello|server_hello").unwrap();
        assert!(s.matches(SERVER_HELLO) && s.matches(0) && !s.matches(CLIENT_HELLO));
        assert!(SslState::parse("unknown").unwrap().flags == UNKNOWN);
        for bad in [
            "",
            "| client_hello",
            "client_hello |",
            "client_helo",
            "client_hello server_hello",
        ] {
            assert_eq!(SslState::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn ssl_version_parses_and_matches() {
        let v = SslVersion::parse("tls1.0, TLS1.2").unwrap();
        assert!(v.matches(0x0301) && v.matches(0x0303) && !v.matches(0x0302) && !v.matches(0));
        assert!(SslVersion::parse("tls1.3").unwrap().matches(0x7f1c));
        assert!(!SslVersion::parse("tls1.3").unwrap().matches(0x7f1d));
        assert!(SslVersion::parse("sslv2").unwrap().matches(2));
        // 7.0.10: a negated value never matches.
        let n = SslVersion::parse("!tls1.2").unwrap();
        assert!((0..=0x0304).all(|v| !n.matches(v)));
        for bad in ["", "tls1.0,!tls1.2", "tls1.2,tls1.2", "tls1.4", "tls1.0;"] {
            assert!(SslVersion::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dates_parse_as_suricata() {
        let d = |s| date_epoch(s);
        assert_eq!(d("2024-01-01"), Some(1704067200));
        assert_eq!(d("2024-01"), Some(1704067200));
        assert_eq!(d("2024-1-1"), Some(1704067200));
        assert_eq!(d("2024-01-01T00"), Some(1704067200));
        assert_eq!(d("2024-01-01 00:00:01"), Some(1704067201));
        assert_eq!(d("2024-02-30"), d("2024-03-01"));
        assert_eq!(d("1704067200"), Some(1704067200));
        assert_eq!(d("2024"), Some(2024));
        for bad in [
            "12:30",
            "2024-13-01",
            "2024-01-01W",
            "2024-01-01T",
            "x",
            "2024-01-01T24",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
        let c = DateCmp::parse("2023-12-31 <> 2024-01-02").unwrap();
        assert!(c.matches(1704067200) && !c.matches(0));
        assert!(DateCmp::parse("<2024-01-01").unwrap().matches(1704067200));
        assert!(DateCmp::parse(">2024-01-01").unwrap().matches(1704067200));
        for bad in [
            "2024-01-02<>2024-01-01",
            "<2024-01-01<>2024-01-02",
            "\"2024-01-01\"",
            "2023-12-31T00:00:00 <> 2024-01-02",
        ] {
            assert!(DateCmp::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dn_values() {
        assert!(CertCond::parse_dn(false, "\"CN=a.example, O=X\"").is_ok());
        assert!(matches!(
            CertCond::parse_dn(true, "!\"CN=x\""),
            Ok(CertCond::Issuer { neg: true, .. })
        ));
        for bad in ["CN=x", "\"\"", "\"O=a/b\"", "\"a:b\"", "\"a+b\""] {
            assert!(CertCond::parse_dn(false, bad).is_err(), "{bad}");
        }
    }

    fn rec(t: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![t, 3, 3];
        v.extend_from_slice(&(body.len() as u16).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn msg(t: u8, n: usize) -> Vec<u8> {
        let mut v = vec![t, 0, (n >> 8) as u8, n as u8];
        v.extend(std::iter::repeat_n(0x41, n));
        v
    }

    #[test]
    fn walk_follows_messages_across_segments() {
        // A server flight of one record (hello, certificate, key exchange,
        // done) cut anywhere: its last state message is the key exchange.
        let flight = rec(
            22,
            &[msg(2, 40), msg(11, 300), msg(12, 70), msg(14, 0)].concat(),
        );
        for cut in [1, 3, 5, 7, 9, 50, 350, flight.len() - 1] {
            let mut f = TlsFlow::default();
            f.feed(1, &flight[..cut], 0, false);
            f.feed(1, &flight[cut..], cut as u64, false);
            assert!(f.apply(0));
            assert_eq!(f.cur, EXISTS | SERVER_KEYX, "cut {cut}");
            assert_eq!(f.ver[1], 0x0303);
        }
        // A message spanning two records.
        let m = msg(1, 60);
        let two = [rec(22, &m[..30]), rec(22, &m[30..])].concat();
        let mut f = TlsFlow::default();
        f.feed(0, &two, 0, false);
        f.apply(1);
        assert_eq!(f.cur & STATE_BITS, CLIENT_HELLO);
        // After a ChangeCipherSpec, handshake records are not parsed; the
        // next parse starts from no state.
        f.feed(
            0,
            &[rec(20, &[1]), rec(22, &msg(16, 8))].concat(),
            200,
            false,
        );
        f.apply(1);
        assert_eq!(f.cur, EXISTS);
        // Not TLS: never a state.
        let mut g = TlsFlow::default();
        g.feed(0, b"GET / HTTP/1.1\r\n", 0, false);
        assert!(!g.apply(1));
    }

    #[test]
    fn once_per_direction() {
        let mut f = TlsFlow::default();
        f.feed(0, &rec(22, &msg(1, 10)), 0, false);
        let not_ch = [SslState::parse("!client_hello").unwrap()];
        assert!(f.apply(1));
        assert!(!not_ch[0].matches(f.cur) && !f.matched_before(1, &not_ch, &[]));
        f.saw(1);
        f.feed(0, &rec(22, &msg(16, 10)), 15, false);
        f.apply(1);
        assert!(not_ch[0].matches(f.cur) && !f.matched_before(1, &not_ch, &[]));
        f.saw(1);
        f.feed(0, &rec(23, &[0; 9]), 34, false);
        f.apply(1);
        assert!(f.matched_before(1, &not_ch, &[]));
    }

    #[test]
    fn codec_round_trip() {
        let mut f = TlsFlow::default();
        f.feed(1, &rec(22, &msg(2, 40))[..20], 0, false);
        let mut buf = Vec::new();
        f.encode(&mut Writer::new(&mut buf));
        let g = TlsFlow::decode(&mut Reader::new(&buf), true).unwrap();
        assert_eq!(f, g);
        assert!(TlsFlow::decode(&mut Reader::new(&buf[..7]), true).is_err());
    }
}
