//! TLS decoder events a rule can ask for with `app-layer-event:tls.NAME`,
//! raised as Suricata 7.0.10's TLS parser (app-layer-ssl.c) raises them,
//! from the records the flow's walk reads ([`super::legacy::Walk`]).
//!
//! Suricata keeps a TLS flow's events on its single transaction, so once
//! raised an event stays: a rule on it matches on the first packet of each
//! direction inspected after the parse that raised it (the parse of a
//! direction's bytes happens on the packet of the other direction that
//! acknowledges them, IDS mode), then never again in that direction. A
//! parse error (the events marked so below) stops Suricata's parsing of
//! the flow, both directions. A rule naming an event not modelled here is
//! skipped with the event's name as the reason, rather than never
//! matching; three events Suricata 7.0.10 knows but never raises
//! (`heartbeat_message`, `invalid_record_version`, `invalid_tls_header`)
//! load and never match, as there.

/// A TLS decoder event (its bit in a flow's event set is `1 << self`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `tls.invalid_tls_header`: never raised by 7.0.10 (its record header
    /// reader cannot fail).
    InvalidTlsHeader,
    /// `tls.invalid_record_version`: never raised by 7.0.10 (no record
    /// version check; checked with versions 0x0200 and 0x0305).
    InvalidRecordVersion,
    /// `tls.invalid_record_type`: a record whose type is not 20 to 24
    /// (parse error).
    InvalidRecordType,
    /// `tls.invalid_record_length`: a record of length 0 (parse error).
    InvalidRecordLength,
    /// `tls.invalid_handshake_message`: a handshake message of a type
    /// Suricata does not know (the parse goes on), or bytes left in a
    /// handshake record too short for a message header (with
    /// `invalid_ssl_record`; parse error).
    InvalidHandshakeMessage,
    /// `tls.heartbeat_message`: never raised by 7.0.10.
    Heartbeat,
    /// `tls.invalid_heartbeat_message`: before a ChangeCipherSpec, a
    /// heartbeat of a type other than request (1) or response (2), or with
    /// less than 16 bytes of padding; or a second heartbeat from the side
    /// that sent the one in flight (parse error).
    InvalidHeartbeat,
    /// `tls.overflow_heartbeat_message`: a heartbeat in clear whose payload
    /// length plus 3 exceeds its record (Heartbleed's request,
    /// CVE-2014-0160; parse error).
    OverflowHeartbeat,
    /// `tls.dataleak_heartbeat_mismatch`: after a ChangeCipherSpec, a
    /// heartbeat answering one in flight in a longer record than the
    /// request's (Heartbleed's leaking response; parse error).
    DataleakHeartbeatMismatch,
    /// `tls.invalid_ssl_record`: a parsed handshake record shorter than 4
    /// bytes, or ending inside a message header (parse error).
    InvalidSslRecord,
    /// `tls.multiple_sni_extensions`: a ClientHello with a second
    /// `server_name` extension ([`client_hello_events`]).
    MultipleSni,
    /// `tls.invalid_sni_type`: a `server_name` entry of a type other than
    /// host_name (0).
    InvalidSniType,
    /// `tls.invalid_sni_length`: a host name of 0 or more than 255 bytes,
    /// or longer than its extension.
    InvalidSniLength,
    /// `tls.handshake_invalid_length`: a ClientHello field or extension
    /// running past the message (or an odd cipher-suite list).
    HandshakeInvalidLength,
}

/// The events of the ClientHello's fields ([`client_hello_events`]).
pub const HELLO_EVENTS: u16 = (1 << Event::MultipleSni as u16)
    | (1 << Event::InvalidSniType as u16)
    | (1 << Event::InvalidSniLength as u16)
    | (1 << Event::HandshakeInvalidLength as u16);

/// The events by name (after `tls.`).
const NAMES: &[(&str, Event)] = &[
    ("invalid_tls_header", Event::InvalidTlsHeader),
    ("invalid_record_version", Event::InvalidRecordVersion),
    ("invalid_record_type", Event::InvalidRecordType),
    ("invalid_record_length", Event::InvalidRecordLength),
    ("invalid_handshake_message", Event::InvalidHandshakeMessage),
    ("heartbeat_message", Event::Heartbeat),
    ("invalid_heartbeat_message", Event::InvalidHeartbeat),
    ("overflow_heartbeat_message", Event::OverflowHeartbeat),
    (
        "dataleak_heartbeat_mismatch",
        Event::DataleakHeartbeatMismatch,
    ),
    ("invalid_ssl_record", Event::InvalidSslRecord),
    ("multiple_sni_extensions", Event::MultipleSni),
    ("invalid_sni_type", Event::InvalidSniType),
    ("invalid_sni_length", Event::InvalidSniLength),
    ("handshake_invalid_length", Event::HandshakeInvalidLength),
];

/// The hello events a ClientHello raises, its message (type, 24-bit
/// length, body) at `b[5..]` after a handshake record's header (records
/// joined, [`super::defragment`]), as Suricata's TLSDecodeHandshakeHello
/// reads it: the version, random, session id, cipher suites (an even
/// count), compression methods, then the extensions, each inside the
/// block; a `server_name` extension's first entry must be a host_name of
/// 1 to 255 bytes, and a second such extension is a repeat. The first
/// problem ends the reading, as there. Nothing (0) for bytes that are not
/// a whole ClientHello.
pub fn client_hello_events(b: &[u8]) -> u16 {
    if b.len() < 9 || b[0] != super::HANDSHAKE || b[5] != 1 {
        return 0;
    }
    let len = u32::from_be_bytes([0, b[6], b[7], b[8]]) as usize;
    let Some(body) = b.get(9..9 + len) else {
        return 0;
    };
    hello_body_events(body)
}

/// True unless extension `ty`'s data (not empty) holds a list running
/// past it, for the extensions Suricata 7.0.10 reads in a ClientHello:
/// `supported_groups` (a 16-bit length), `ec_point_formats` (8-bit) and
/// `supported_versions` (8-bit, at least 2).
fn list_fits(ty: u16, data: &[u8]) -> bool {
    match ty {
        super::EXT_SUPPORTED_GROUPS => {
            data.len() >= 2 && data.len() - 2 >= u16::from_be_bytes([data[0], data[1]]) as usize
        }
        super::EXT_EC_POINT_FORMATS => data.len() > data[0] as usize,
        43 => data[0] >= 2 && data.len() > data[0] as usize,
        _ => true,
    }
}

/// [`client_hello_events`] of a ClientHello's body.
fn hello_body_events(h: &[u8]) -> u16 {
    let bad = Event::HandshakeInvalidLength.bit();
    let mut i = 2 + 32;
    if h.len() < i {
        return bad;
    }
    // Session id, cipher suites, compression methods.
    let Some(&sid) = h.get(i) else { return bad };
    i += 1 + sid as usize;
    let Some(c) = h.get(i..i + 2) else { return bad };
    let ciphers = u16::from_be_bytes([c[0], c[1]]) as usize;
    i += 2;
    if h.len() < i + ciphers || !ciphers.is_multiple_of(2) {
        return bad;
    }
    i += ciphers;
    let Some(&comp) = h.get(i) else { return bad };
    i += 1 + comp as usize;
    if h.len() < i {
        return bad;
    }
    if i == h.len() {
        return 0;
    }
    let Some(e) = h.get(i..i + 2) else { return bad };
    let total = u16::from_be_bytes([e[0], e[1]]) as usize;
    i += 2;
    let Some(exts) = h.get(i..i + total) else {
        return bad;
    };
    let mut at = 0;
    let mut sni = false;
    while at < exts.len() {
        let Some(x) = exts.get(at..at + 4) else {
            return bad;
        };
        let (ty, n) = (
            u16::from_be_bytes([x[0], x[1]]),
            u16::from_be_bytes([x[2], x[3]]) as usize,
        );
        let Some(data) = exts.get(at + 4..at + 4 + n) else {
            return bad;
        };
        if ty == super::EXT_SERVER_NAME && !data.is_empty() {
            if data.len() < 3 {
                return bad;
            }
            if data[2] != 0 {
                return Event::InvalidSniType.bit();
            }
            let Some(l) = data.get(3..5) else { return bad };
            let name = u16::from_be_bytes([l[0], l[1]]) as usize;
            if name == 0 || name > 255 || data.len() < 5 + name {
                return Event::InvalidSniLength.bit();
            }
            if sni {
                return Event::MultipleSni.bit();
            }
            sni = true;
        } else if !data.is_empty() && !list_fits(ty, data) {
            return bad;
        }
        at += 4 + n;
    }
    0
}

impl Event {
    /// The event `app-layer-event` names (`tls.` and the event, as Suricata
    /// matches it: without case), if modelled.
    pub fn parse(name: &str) -> Option<Event> {
        let n = name.strip_prefix("tls.")?;
        NAMES
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|&(_, e)| e)
    }

    /// The event's bit in a flow's event set.
    #[inline]
    pub fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// Heartbeat state ([`Hb::flags`]): a heartbeat is in flight.
const HB_INFLIGHT: u8 = 1;
/// The client sent it.
const HB_CLIENT: u8 = 2;
/// The server sent it.
const HB_SERVER: u8 = 4;

/// The flow's heartbeat state (Suricata's `SSL_AL_FLAG_HB_*` flags and
/// `hb_record_len`), shared by both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hb {
    /// [`HB_INFLIGHT`], [`HB_CLIENT`], [`HB_SERVER`].
    pub flags: u8,
    /// The length of the encrypted request in flight (0: none).
    pub len: u16,
}

impl Hb {
    /// A whole heartbeat record of direction `d` (0: to the server) of
    /// length `rec_len`, its first bytes `head` (type and payload length,
    /// if the record has them), `ccs` if a ChangeCipherSpec came before:
    /// the event it raises, if any (every event here stops the parse).
    /// SSLv3ParseHeartbeatProtocol of 7.0.10.
    pub fn record(
        &mut self,
        d: usize,
        rec_len: u16,
        head: Option<[u8; 3]>,
        ccs: bool,
    ) -> Option<Event> {
        // Fewer than 3 bytes: nothing parsed.
        let [t, hi, lo] = head?;
        if !ccs && t != 1 && t != 2 {
            return Some(Event::InvalidHeartbeat);
        }
        if self.flags & HB_INFLIGHT == 0 {
            self.flags = HB_INFLIGHT | if d == 1 { HB_SERVER } else { HB_CLIENT };
            if ccs {
                // Encrypted: only its length is known, for the response.
                self.len = rec_len;
                return None;
            }
            let payload = u16::from_be_bytes([hi, lo]) as u32;
            if payload + 3 > rec_len as u32 {
                return Some(Event::OverflowHeartbeat);
            }
            if rec_len as u32 - payload - 3 < 16 {
                return Some(Event::InvalidHeartbeat);
            }
            return None;
        }
        let own = if d == 1 { HB_SERVER } else { HB_CLIENT };
        if self.flags & own != 0 {
            // OpenSSL drops a second heartbeat in flight from the same side.
            return Some(Event::InvalidHeartbeat);
        }
        // The answer to the one in flight.
        self.flags = 0;
        let req = std::mem::take(&mut self.len);
        (ccs && req > 0 && req < rec_len).then_some(Event::DataleakHeartbeatMismatch)
    }
}

/// True for a handshake message type Suricata 7.0.10 parses
/// (`SupportedHandshakeType`): others raise `invalid_handshake_message`.
pub fn known_handshake(t: u8) -> bool {
    matches!(
        t,
        0 | 1 | 2 | 4 | 11 | 12 | 13 | 14 | 15 | 16 | 20 | 21 | 22
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            Event::parse("tls.overflow_heartbeat_message"),
            Some(Event::OverflowHeartbeat)
        );
        assert_eq!(
            Event::parse("tls.INVALID_RECORD_TYPE"),
            Some(Event::InvalidRecordType)
        );
        assert_eq!(Event::parse("tls.certificate_invalid_der"), None);
        assert_eq!(Event::parse("http.invalid_record_type"), None);
        assert!(NAMES.iter().all(|&(_, e)| e.bit() != 0));
    }

    #[test]
    fn heartbleed_request_overflows() {
        // The classic request: payload length 0x4000 in a 3-byte record.
        let mut h = Hb::default();
        assert_eq!(
            h.record(0, 3, Some([1, 0x40, 0]), false),
            Some(Event::OverflowHeartbeat)
        );
        // A length that just fits with 16 bytes of padding is fine; 15 is not.
        let mut h = Hb::default();
        assert_eq!(h.record(0, 3 + 16 + 16, Some([1, 0, 16]), false), None);
        let mut h = Hb::default();
        assert_eq!(
            h.record(0, 3 + 16 + 15, Some([1, 0, 16]), false),
            Some(Event::InvalidHeartbeat)
        );
        let mut h = Hb::default();
        assert_eq!(
            h.record(0, 3 + 16, Some([1, 0, 17]), false),
            Some(Event::OverflowHeartbeat)
        );
    }

    #[test]
    fn heartbeat_exchanges() {
        // Request then response: no event; a second request in flight from
        // the same side is invalid.
        let mut h = Hb::default();
        assert_eq!(h.record(0, 35, Some([1, 0, 16]), false), None);
        assert_eq!(h.record(1, 35, Some([2, 0, 16]), false), None);
        assert_eq!(h, Hb::default());
        assert_eq!(h.record(0, 35, Some([1, 0, 16]), false), None);
        assert_eq!(
            h.record(0, 35, Some([1, 0, 16]), false),
            Some(Event::InvalidHeartbeat)
        );
        // A bad type in clear; any type once encrypted.
        assert_eq!(
            Hb::default().record(0, 35, Some([3, 0, 16]), false),
            Some(Event::InvalidHeartbeat)
        );
        assert_eq!(Hb::default().record(0, 35, Some([3, 0, 16]), true), None);
        // Too short to read: nothing.
        assert_eq!(Hb::default().record(0, 2, None, false), None);
    }

    #[test]
    fn encrypted_response_longer_than_request_leaks() {
        let mut h = Hb::default();
        assert_eq!(h.record(0, 40, Some([9, 9, 9]), true), None);
        assert_eq!(
            h.record(1, 2000, Some([7, 7, 7]), true),
            Some(Event::DataleakHeartbeatMismatch)
        );
        let mut h = Hb::default();
        assert_eq!(h.record(0, 40, Some([9, 9, 9]), true), None);
        assert_eq!(h.record(1, 40, Some([7, 7, 7]), true), None);
    }

    /// A ClientHello record: `body` after version and random, session id,
    /// ciphers and compression given, then `exts` as the extension block.
    fn hello(sid: &[u8], ciphers: &[u8], exts: &[u8]) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&[0x22; 32]);
        b.extend_from_slice(sid);
        b.extend_from_slice(ciphers);
        b.extend_from_slice(&[1, 0]);
        if !exts.is_empty() {
            b.extend_from_slice(&(exts.len() as u16).to_be_bytes());
            b.extend_from_slice(exts);
        }
        let mut r = vec![22, 3, 1];
        r.extend_from_slice(&((b.len() + 4) as u16).to_be_bytes());
        r.extend_from_slice(&[1, 0]);
        r.extend_from_slice(&(b.len() as u16).to_be_bytes());
        r.extend_from_slice(&b);
        r
    }

    fn sni(kind: u8, name: &[u8], claimed: u16) -> Vec<u8> {
        let mut e = vec![0, 0];
        let entry_len = 3 + name.len();
        e.extend_from_slice(&((entry_len + 2) as u16).to_be_bytes());
        e.extend_from_slice(&(entry_len as u16).to_be_bytes());
        e.push(kind);
        e.extend_from_slice(&claimed.to_be_bytes());
        e.extend_from_slice(name);
        e
    }

    #[test]
    fn client_hello_fields() {
        const C: &[u8] = &[0, 2, 0x13, 1];
        let ok = sni(0, b"a.example", 9);
        assert_eq!(client_hello_events(&hello(&[0], C, &ok)), 0);
        assert_eq!(
            client_hello_events(&hello(&[0], C, &[])),
            0,
            "no extensions"
        );
        let two = [ok.clone(), ok.clone()].concat();
        assert_eq!(
            client_hello_events(&hello(&[0], C, &two)),
            Event::MultipleSni.bit()
        );
        assert_eq!(
            client_hello_events(&hello(&[0], C, &sni(1, b"a", 1))),
            Event::InvalidSniType.bit()
        );
        for bad in [
            sni(0, b"", 0),
            sni(0, &[b'h'; 300], 300),
            sni(0, b"a.example", 40),
        ] {
            assert_eq!(
                client_hello_events(&hello(&[0], C, &bad)),
                Event::InvalidSniLength.bit()
            );
        }
        let hil = Event::HandshakeInvalidLength.bit();
        // A session id past the message, an odd cipher list, a groups list
        // past its extension; a well-formed groups list is fine.
        let mut cut = hello(&[40, 1, 2], &[], &[]);
        cut.truncate(5 + 4 + 2 + 32 + 3);
        let n = (cut.len() - 9) as u16;
        cut[3..5].copy_from_slice(&(n + 4).to_be_bytes());
        cut[7..9].copy_from_slice(&n.to_be_bytes());
        assert_eq!(client_hello_events(&cut), hil);
        assert_eq!(
            client_hello_events(&hello(&[0], &[0, 3, 0x13, 1, 0xc0], &[])),
            hil
        );
        let groups_past = [&ok[..], &[0, 10, 0, 4, 0, 40, 0, 29]].concat();
        assert_eq!(client_hello_events(&hello(&[0], C, &groups_past)), hil);
        let groups = [&ok[..], &[0, 10, 0, 4, 0, 2, 0, 29]].concat();
        assert_eq!(client_hello_events(&hello(&[0], C, &groups)), 0);
        // Not a whole ClientHello: nothing.
        let h = hello(&[0], C, &ok);
        assert_eq!(client_hello_events(&h[..h.len() - 1]), 0);
        assert_eq!(client_hello_events(b"GET / HTTP/1.1"), 0);
    }

    /// Hellos with random bytes flipped and random lengths: nothing
    /// panics and nothing reads outside the bytes.
    #[test]
    fn random_hellos_never_panic() {
        let mut rng = crate::testrng::Lcg::new(13);
        let base = hello(&[0], &[0, 2, 0x13, 1], &sni(0, b"a.example", 9));
        for _ in 0..20_000 {
            let mut h = base.clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(h.len() as u64) as usize;
                h[i] = rng.below(256) as u8;
            }
            h.truncate(rng.below(h.len() as u64 + 1) as usize);
            let _ = client_hello_events(&h);
        }
    }
}
