//! `app-layer-protocol:[!]<protocol>[,<mode>]` (Suricata's
//! detect-app-layer-protocol.c): a condition on the application protocol
//! the IPS detected on the flow, per direction.
//!
//! Each direction of a TCP flow is classified by its first stream bytes
//! ([`detect_dir`]), as Suricata's protocol detection runs per direction:
//! HTTP/1 (a request line, or `HTTP/1.` from the server), TLS (a hello
//! record), DNS (one whole length-prefixed message), SMTP and FTP (the
//! client's commands, the FTP server's `220 (` banner), SMB and SSH (either
//! peer). A direction whose first bytes match nothing is not known yet; it
//! is done once it carried [`DONE_BYTES`] (Suricata's pattern search depth
//! for that direction, measured against 7.0.10 on ports without probing
//! parsers), and then it becomes `failed` as soon as the other direction is
//! known or done as well — Suricata's bail-out conditions. One byte per
//! direction in the flow's store record ([`crate::engine::FlowState::alp`])
//! holds the verdict and the protocol-detection flag below, so another
//! instance continuing the flow knows both.
//!
//! Suricata evaluates a rule whose only condition (besides the header and
//! `flow` direction) is this keyword only on the packet that carries the
//! "protocol detection done" flag of its direction: the first packet of
//! that direction after the verdict, which it reaches when the other side
//! acknowledges the deciding bytes. A verdict taken on this direction's own
//! bytes flags the next packet of the direction; one taken on the other
//! direction's bytes skips the acknowledgement travelling this way first
//! ([`Flow::pd`]). Such a rule therefore alerts at most once per direction.
//! UDP flows are decided by their datagram: DNS if it is one
//! ([`crate::dns::detect_as`]), else failed, and every datagram carries the
//! flag, as Suricata's do.
//!
//! Only computed (and stored) when a loaded rule has the keyword.

use crate::rules::RuleSyntax;

/// Not decided: no bytes seen in the direction yet.
pub const UNKNOWN: u8 = 0;
/// HTTP/1.x (`http` and `http1` name it).
pub const HTTP: u8 = 1;
/// TLS.
pub const TLS: u8 = 2;
/// DNS.
pub const DNS: u8 = 3;
/// SMTP.
pub const SMTP: u8 = 4;
/// FTP (control connection).
pub const FTP: u8 = 5;
/// SMB.
pub const SMB: u8 = 6;
/// SSH.
pub const SSH: u8 = 7;
/// Bytes seen, none matched, fewer than [`DONE_BYTES`]: still unknown.
const NOMATCH: u8 = 13;
/// No match in at least [`DONE_BYTES`]: unknown until the other direction
/// is known or done too.
const NOMATCH_DONE: u8 = 14;
/// Protocol detection failed (`failed`).
pub const FAILED: u8 = 15;

/// The state's bits of a direction's byte; the two bits above count down
/// to the protocol-detection flag ([`Flow::pd`]).
const STATE: u8 = 0x0f;
const PD_SHIFT: u8 = 4;
const PD_BITS: u8 = 0x30;
/// In the client direction's byte: Suricata gave up on the flow's
/// application layer (wrong first-data direction, detection skipped), so
/// no further detection event is raised ([`on_bytes`]).
const DISABLED: u8 = 0x40;

/// `app-layer-event:applayer_mismatch_protocol_both_directions`: the
/// second direction detected a protocol other than the first's.
pub const EV_MISMATCH: u8 = 1;
/// `applayer_wrong_direction_first_data`: a protocol whose parser wants
/// the client's data first ([`FIRST_TO_SERVER`]) was detected on a flow
/// whose first data came from the server.
pub const EV_WRONG_DIRECTION: u8 = 2;
/// `applayer_detect_protocol_only_one_direction`: one direction detected
/// a protocol, the other's detection finished without one.
pub const EV_ONE_DIRECTION: u8 = 4;
/// `applayer_proto_detection_skipped`: more than [`SKIP_BYTES`] in one
/// direction without a match and nothing from the other side.
pub const EV_SKIPPED: u8 = 8;
/// Bytes one direction may carry, undetected, while the other sends none,
/// before Suricata gives detection up (app-layer.c's cutoff).
pub const SKIP_BYTES: u64 = 100_000;

/// The protocols whose parser registers an acceptable first-data direction
/// of to-server only (`AppLayerParserRegisterParserAcceptableDataDirection`
/// in Suricata 7.0.10): TLS. HTTP no longer does there (measured: a flow
/// starting with a server's response raises no event).
const FIRST_TO_SERVER: &[u8] = &[TLS];

/// The `app-layer-event` names of protocol detection (Suricata's
/// app-layer-events.c) and their bits; the two of protocol changes need a
/// STARTTLS or upgrade follower this IPS does not have, and refuse the
/// rule with that reason.
pub fn parse_event(name: &str) -> Result<u8, Option<&'static str>> {
    Ok(match name {
        "applayer_mismatch_protocol_both_directions" => EV_MISMATCH,
        "applayer_wrong_direction_first_data" => EV_WRONG_DIRECTION,
        "applayer_detect_protocol_only_one_direction" => EV_ONE_DIRECTION,
        "applayer_proto_detection_skipped" => EV_SKIPPED,
        "applayer_no_tls_after_starttls" | "applayer_unexpected_protocol" => {
            return Err(Some(
                "protocol changes (STARTTLS, upgrades) are not followed",
            ))
        }
        _ => return Err(None),
    })
}

/// Bytes of a direction (to server, to client) without a match after which
/// Suricata 7.0.10's pattern search is done for it.
pub const DONE_BYTES: [u64; 2] = [17, 8];

/// The protocol names the keyword accepts and their values.
const NAMES: &[(&str, u8)] = &[
    ("http", HTTP),
    ("http1", HTTP),
    ("tls", TLS),
    ("dns", DNS),
    ("smtp", SMTP),
    ("ftp", FTP),
    ("smb", SMB),
    ("ssh", SSH),
    ("failed", FAILED),
    ("unknown", UNKNOWN),
];

/// Application protocols Suricata knows that this IPS does not detect: a
/// rule naming one is skipped, never loaded as one that cannot match.
const UNDETECTED: &[&str] = &[
    "http2",
    "ftp-data",
    "dcerpc",
    "imap",
    "pop3",
    "msn",
    "jabber",
    "irc",
    "nfs",
    "ntp",
    "tftp",
    "ikev2",
    "ike",
    "krb5",
    "dhcp",
    "snmp",
    "sip",
    "rfb",
    "mqtt",
    "rdp",
    "quic",
    "modbus",
    "dnp3",
    "enip",
    "bittorrent-dht",
    "telnet",
    "websocket",
    "ldap",
    "pgsql",
    "doh2",
    "mdns",
    "template",
];

/// Which of the flow's protocols a condition reads (Suricata 8's modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The protocol of the packet's direction (the default).
    #[default]
    Direction,
    /// The client's direction.
    ToServer,
    /// The server's direction.
    ToClient,
    /// Either direction's.
    Either,
    /// The protocol the flow is parsed as.
    Final,
    /// The protocol before a protocol change; the IPS follows none
    /// (STARTTLS, HTTP upgrades), so the same as [`Mode::Final`].
    Original,
}

/// One `app-layer-protocol` keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cond {
    /// The protocol value ([`HTTP`], ..., [`FAILED`], [`UNKNOWN`]).
    pub proto: u8,
    /// `!proto`.
    pub negated: bool,
    /// Which protocol of the flow it reads.
    pub mode: Mode,
}

/// Most `app-layer-protocol` keywords one rule may have (several negated
/// ones, one per mode otherwise).
pub const MAX_CONDS: usize = 4;

/// A rule's `app-layer-protocol` keywords: all must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checks {
    n: u8,
    conds: [Cond; MAX_CONDS],
    /// The keyword is the rule's only condition besides its header: the
    /// rule is evaluated only on packets carrying the protocol-detection
    /// flag (Suricata's "PD-only" signatures).
    pub pd_only: bool,
}

/// What the flow's protocol detection tells one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flow {
    /// Per direction (to server, to client): [`UNKNOWN`], a protocol or
    /// [`FAILED`] (values between are unknown too).
    pub dirs: [u8; 2],
    /// The packet carries its direction's protocol-detection flag.
    pub pd: bool,
}

impl Cond {
    /// Parses the keyword's value (`!` already taken off as `negated`).
    pub fn parse(v: &str, negated: bool) -> Result<Cond, RuleSyntax> {
        let bad = |why: String| RuleSyntax::AppLayerProtocol(why);
        let (name, mode) = match v.split_once(',') {
            Some((n, m)) => (n.trim(), Some(m.trim())),
            None => (v.trim(), None),
        };
        if name.is_empty() {
            return Err(bad("no protocol named".into()));
        }
        let mode = match mode {
            None | Some("direction") => Mode::Direction,
            Some("to_server") => Mode::ToServer,
            Some("to_client") => Mode::ToClient,
            Some("either") => Mode::Either,
            Some("final") => Mode::Final,
            Some("original") => Mode::Original,
            Some(m) => {
                return Err(bad(format!(
                "unknown mode \"{m}\" (direction, to_server, to_client, either, final, original)"
            )))
            }
        };
        let Some(&(_, proto)) = NAMES.iter().find(|(n, _)| *n == name) else {
            if UNDETECTED.contains(&name) {
                return Err(RuleSyntax::UnsupportedAppProto(name.into()));
            }
            return Err(bad(format!("unknown protocol \"{name}\"")));
        };
        if proto == UNKNOWN && negated {
            return Err(bad("\"unknown\" cannot be negated".into()));
        }
        Ok(Cond {
            proto,
            negated,
            mode,
        })
    }

    /// True if the flow's protocol as this condition's mode reads it
    /// matches, on a packet travelling `to_server`.
    #[inline]
    fn matches(&self, f: &Flow, to_server: bool) -> bool {
        let [ts, tc] = [value(f.dirs[0]), value(f.dirs[1])];
        if self.mode == Mode::Either {
            // A negation never matches what is not known yet.
            if self.negated && ts == UNKNOWN && tc == UNKNOWN {
                return false;
            }
            return (ts == self.proto || tc == self.proto) != self.negated;
        }
        let v = match self.mode {
            Mode::Direction if to_server => ts,
            Mode::Direction => tc,
            Mode::ToServer => ts,
            Mode::ToClient => tc,
            // The first protocol detected decides how the flow is parsed;
            // one side's failure alone does not fail the flow.
            _ => final_proto(ts, tc),
        };
        if self.negated && v == UNKNOWN {
            return false;
        }
        (v == self.proto) != self.negated
    }
}

/// A direction's value as the keyword reads it: a protocol, [`FAILED`] or
/// [`UNKNOWN`].
#[inline]
fn value(b: u8) -> u8 {
    match b & STATE {
        NOMATCH | NOMATCH_DONE => UNKNOWN,
        v if v <= SSH || v == FAILED => v,
        _ => UNKNOWN,
    }
}

fn final_proto(ts: u8, tc: u8) -> u8 {
    let known = |v: u8| v != UNKNOWN && v != FAILED;
    if known(ts) {
        ts
    } else if known(tc) {
        tc
    } else if ts == FAILED || tc == FAILED {
        FAILED
    } else {
        UNKNOWN
    }
}

impl Checks {
    /// True if the rule has no `app-layer-protocol` keyword.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The keywords.
    pub fn conds(&self) -> &[Cond] {
        &self.conds[..self.n as usize]
    }

    /// Adds a keyword, refusing the combinations Suricata refuses: within
    /// one mode, a positive condition with any other, or the same one twice.
    pub fn push(&mut self, c: Cond) -> Result<(), RuleSyntax> {
        for o in self.conds() {
            if o.mode == c.mode && (!c.negated || !o.negated || o.proto == c.proto) {
                return Err(RuleSyntax::AppLayerProtocol(
                    "a positive match cannot be combined with another app-layer-protocol of the same mode"
                        .into(),
                ));
            }
        }
        if self.n as usize == MAX_CONDS {
            return Err(RuleSyntax::AppLayerProtocol(format!(
                "more than {MAX_CONDS} app-layer-protocol keywords"
            )));
        }
        self.conds[self.n as usize] = c;
        self.n += 1;
        Ok(())
    }

    /// True if every keyword holds on a packet travelling `to_server` of a
    /// flow whose detection is `f`.
    #[inline]
    pub fn matches(&self, f: &Flow, to_server: bool) -> bool {
        if self.pd_only && !f.pd {
            return false;
        }
        self.conds().iter().all(|c| c.matches(f, to_server))
    }
}

/// The protocol a direction's first stream bytes `data` start, if any
/// (`to_server`: the client's).
pub fn detect_dir(data: &[u8], to_server: bool) -> Option<u8> {
    if crate::tls::detect(data).is_ok() {
        return Some(TLS);
    }
    match crate::applayer::detect(crate::applayer::UNKNOWN, data, to_server) {
        crate::applayer::SMB => return Some(SMB),
        crate::applayer::SSH => return Some(SSH),
        crate::applayer::SMTP => return Some(SMTP),
        crate::applayer::FTP => return Some(FTP),
        _ => {}
    }
    let http = if to_server {
        crate::http::looks_like_request(data)
    } else {
        data.starts_with(b"HTTP/1.")
    };
    if http {
        return Some(HTTP);
    }
    crate::dns::detect(data, true).is_ok().then_some(DNS)
}

/// Updates a TCP flow's detection `alp` with stream bytes `data` of
/// direction `d` (0: to server) at stream position `base`; the verdicts
/// they settle arm their direction's protocol-detection flag. Returns the
/// detection events (`EV_*`) the bytes raise: each at most once a flow, on
/// the packet bringing the deciding bytes, as Suricata's inline mode
/// raises them.
pub fn on_bytes(alp: &mut [u8; 2], d: usize, data: &[u8], base: u64) -> u8 {
    let before = [settled(alp[0]), settled(alp[1])];
    let mut s = [alp[0] & STATE, alp[1] & STATE];
    let was = s;
    let total = base + data.len() as u64;
    if s[d] == UNKNOWN {
        s[d] = if base == 0 {
            detect_dir(data, d == 0).unwrap_or(NOMATCH)
        } else {
            // The direction's start was not seen (a gap): nothing to
            // detect from, as Suricata gives up on a gap at the start.
            NOMATCH_DONE
        };
    }
    if s[d] == NOMATCH && total >= DONE_BYTES[d] {
        s[d] = NOMATCH_DONE;
    }
    let o = 1 - d;
    let known = |v: u8| v != UNKNOWN && v <= SSH;
    let mut ev = 0;
    match (s[d], s[o]) {
        (NOMATCH_DONE, NOMATCH_DONE) => s = [FAILED; 2],
        (NOMATCH_DONE, x) if known(x) => {
            s[d] = FAILED;
            ev |= EV_ONE_DIRECTION;
        }
        (x, NOMATCH_DONE) if known(x) => {
            s[o] = FAILED;
            ev |= EV_ONE_DIRECTION;
        }
        _ => {}
    }
    if known(s[d]) && !known(was[d]) {
        if known(s[o]) && s[o] != s[d] {
            ev |= EV_MISMATCH;
        }
        // The flow's first data came from the server if it is the server
        // detecting before the client sent anything, or the client
        // detecting after the server sent bytes.
        let server_first = if d == 1 {
            was[0] == UNKNOWN
        } else {
            was[1] != UNKNOWN
        };
        if server_first && FIRST_TO_SERVER.contains(&s[d]) {
            // Suricata disables the flow's application layer here: no
            // other event follows.
            ev = EV_WRONG_DIRECTION;
        }
    }
    if s[d] == NOMATCH_DONE && s[o] == UNKNOWN && base <= SKIP_BYTES && total > SKIP_BYTES {
        ev |= EV_SKIPPED;
    }
    let disabled = alp[0] & DISABLED != 0;
    if ev & (EV_WRONG_DIRECTION | EV_SKIPPED) != 0 {
        alp[0] |= DISABLED;
    }
    for x in 0..2 {
        let mut b = (alp[x] & !STATE) | s[x];
        if !before[x] && settled(b) {
            // Decided on this direction's bytes: its next packet carries
            // the flag; on the other's: after the acknowledgement.
            b = (b & !PD_BITS) | (if x == d { 1 } else { 2 } << PD_SHIFT);
        }
        alp[x] = b;
    }
    if disabled {
        0
    } else {
        ev
    }
}

/// True once a direction's verdict is a protocol or `failed`.
fn settled(b: u8) -> bool {
    let v = b & STATE;
    v == FAILED || (v != UNKNOWN && v <= SSH)
}

/// The protocol-detection flag of a TCP packet of direction `d`: counts
/// the direction's countdown down, true when it reaches the packet.
pub fn take_pd(alp: &mut [u8; 2], d: usize) -> bool {
    let n = (alp[d] & PD_BITS) >> PD_SHIFT;
    if n == 0 {
        return false;
    }
    alp[d] = (alp[d] & !PD_BITS) | ((n - 1) << PD_SHIFT);
    n == 1
}

/// True if `b` is a direction's byte a record may hold (`d`: its
/// direction; only the client's carries [`DISABLED`]).
pub fn valid(b: u8, d: usize) -> bool {
    let v = b & STATE;
    let extra = if d == 0 { DISABLED } else { 0 };
    (v <= SSH || v >= NOMATCH)
        && (b & PD_BITS) >> PD_SHIFT <= 2
        && b & !(STATE | PD_BITS | extra) == 0
}

/// What a UDP datagram tells: DNS both ways if it is a DNS message, else
/// failed; every datagram carries the flag.
pub fn datagram(dns: bool) -> Flow {
    Flow {
        dirs: [if dns { DNS } else { FAILED }; 2],
        pd: true,
    }
}

/// A TCP flow's detection as one packet sees it.
#[inline]
pub fn flow(alp: [u8; 2], pd: bool) -> Flow {
    Flow { dirs: alp, pd }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(v: &str) -> Result<Cond, RuleSyntax> {
        match v.strip_prefix('!') {
            Some(rest) => Cond::parse(rest, true),
            None => Cond::parse(v, false),
        }
    }

    #[test]
    fn parses_protocols_negation_and_modes() {
        let c = cond("http").unwrap();
        assert_eq!((c.proto, c.negated, c.mode), (HTTP, false, Mode::Direction));
        assert_eq!(cond("http1").unwrap().proto, HTTP);
        let c = cond("!tls").unwrap();
        assert_eq!((c.proto, c.negated), (TLS, true));
        assert_eq!(cond("failed").unwrap().proto, FAILED);
        assert!(cond("!failed").unwrap().negated);
        assert_eq!(cond("unknown").unwrap().proto, UNKNOWN);
        for (m, want) in [
            ("direction", Mode::Direction),
            ("to_server", Mode::ToServer),
            ("to_client", Mode::ToClient),
            ("either", Mode::Either),
            ("final", Mode::Final),
            ("original", Mode::Original),
        ] {
            assert_eq!(cond(&format!("ssh,{m}")).unwrap().mode, want, "{m}");
            assert_eq!(cond(&format!("!dns, {m}")).unwrap().mode, want, "{m}");
        }
    }

    #[test]
    fn refuses_bad_values_and_skips_undetected_protocols() {
        let err = |v: &str| cond(v).unwrap_err().to_string();
        assert!(cond("unknown,final").is_ok());
        assert!(err("!unknown").contains("\"unknown\" cannot be negated"));
        assert!(err("").contains("no protocol"));
        assert!(err(",final").contains("no protocol"));
        assert!(err("http,sideways").contains("unknown mode \"sideways\""));
        assert!(err("gopher").contains("unknown protocol \"gopher\""));
        assert!(err("HTTP").contains("unknown protocol \"HTTP\""));
        for p in ["http2", "imap", "dcerpc", "ftp-data"] {
            let e = cond(p).unwrap_err();
            assert_eq!(e, RuleSyntax::UnsupportedAppProto(p.into()));
            assert!(e.is_unsupported());
            assert_eq!(e.reason(), format!("app-layer-protocol {p}"));
        }
        assert!(!cond("gopher").unwrap_err().is_unsupported());
    }

    #[test]
    fn conflicts_are_refused_as_suricata_does() {
        let mut c = Checks::default();
        c.push(cond("!http").unwrap()).unwrap();
        c.push(cond("!smtp").unwrap()).unwrap();
        assert!(
            c.push(cond("tls").unwrap()).is_err(),
            "positive with negated"
        );
        assert!(c.push(cond("!http").unwrap()).is_err(), "duplicate");
        // Another mode is another question.
        c.push(cond("tls,to_client").unwrap()).unwrap();
        assert_eq!(c.conds().len(), 3);
        let mut d = Checks::default();
        d.push(cond("http").unwrap()).unwrap();
        assert!(d.push(cond("!smtp").unwrap()).is_err());
        assert!(d.push(cond("dns").unwrap()).is_err());
    }

    fn f(ts: u8, tc: u8) -> Flow {
        flow([ts, tc], false)
    }

    #[test]
    fn direction_mode_reads_the_packets_direction() {
        let c = cond("http").unwrap();
        assert!(c.matches(&f(HTTP, UNKNOWN), true));
        assert!(!c.matches(&f(HTTP, UNKNOWN), false));
        assert!(c.matches(&f(UNKNOWN, HTTP), false));
        let n = cond("!http").unwrap();
        assert!(!n.matches(&f(HTTP, FAILED), true));
        assert!(n.matches(&f(HTTP, FAILED), false));
        assert!(n.matches(&f(TLS, TLS), true));
        // Negation never matches the unknown state, pending bytes included.
        assert!(!n.matches(&f(UNKNOWN, UNKNOWN), true));
        assert!(!n.matches(&f(NOMATCH, NOMATCH_DONE), true));
        assert!(!n.matches(&f(NOMATCH, NOMATCH_DONE), false));
        let u = cond("unknown").unwrap();
        assert!(u.matches(&f(NOMATCH_DONE, SSH), true));
        assert!(!u.matches(&f(NOMATCH_DONE, SSH), false));
        let fl = cond("failed").unwrap();
        assert!(fl.matches(&f(SMTP, FAILED), false));
        assert!(!fl.matches(&f(SMTP, FAILED), true));
    }

    #[test]
    fn other_modes() {
        let x = f(HTTP, FAILED);
        assert!(cond("http,to_server").unwrap().matches(&x, false));
        assert!(!cond("http,to_client").unwrap().matches(&x, false));
        assert!(cond("failed,to_client").unwrap().matches(&x, true));
        assert!(cond("failed,either").unwrap().matches(&x, true));
        assert!(cond("http,either").unwrap().matches(&x, false));
        assert!(!cond("!http,either").unwrap().matches(&x, false));
        assert!(cond("!tls,either").unwrap().matches(&x, false));
        assert!(!cond("!tls,either")
            .unwrap()
            .matches(&f(UNKNOWN, UNKNOWN), true));
        // One side's failure does not fail the flow's final protocol.
        assert!(cond("http,final").unwrap().matches(&x, false));
        assert!(cond("http,original").unwrap().matches(&x, false));
        assert!(!cond("failed,final").unwrap().matches(&x, false));
        assert!(cond("failed,final")
            .unwrap()
            .matches(&f(FAILED, FAILED), true));
        assert!(cond("ssh,final").unwrap().matches(&f(UNKNOWN, SSH), true));
        assert!(!cond("!ssh,final")
            .unwrap()
            .matches(&f(UNKNOWN, NOMATCH), true));
    }

    #[test]
    fn pd_only_rules_need_the_flag() {
        let mut c = Checks::default();
        c.push(cond("ssh").unwrap()).unwrap();
        assert!(c.matches(&f(SSH, SSH), true));
        c.pd_only = true;
        assert!(!c.matches(&f(SSH, SSH), true));
        assert!(c.matches(&flow([SSH, SSH], true), true));
        assert!(!c.matches(&flow([TLS, SSH], true), true));
    }

    #[test]
    fn detects_each_direction_by_its_first_bytes() {
        assert_eq!(
            detect_dir(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true),
            Some(HTTP)
        );
        assert_eq!(detect_dir(b"HTTP/1.1 200 OK\r\n\r\n", false), Some(HTTP));
        assert_eq!(detect_dir(b"HTTP/1.1 200 OK\r\n\r\n", true), None);
        assert_eq!(detect_dir(b"EHLO x\r\n", true), Some(SMTP));
        assert_eq!(detect_dir(b"220 mx ESMTP\r\n", false), None);
        assert_eq!(detect_dir(b"USER a\r\n", true), Some(FTP));
        assert_eq!(detect_dir(b"220 (vsFTPd)\r\n", false), Some(FTP));
        assert_eq!(detect_dir(b"SSH-2.0-x\r\n", false), Some(SSH));
        assert_eq!(detect_dir(b"SSH-2.0-x\r\n", true), Some(SSH));
        assert_eq!(
            detect_dir(&[0, 0, 0, 0x40, 0xfe, b'S', b'M', b'B'], false),
            Some(SMB)
        );
        assert_eq!(detect_dir(b"XYZW junk junk\r\n", true), None);
        // A DNS query over TCP: length prefix, header, one question.
        let mut q = vec![0u8, 0, 0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        q.extend_from_slice(b"\x01a\x07example\x00\x00\x01\x00\x01");
        let n = (q.len() - 2) as u16;
        q[..2].copy_from_slice(&n.to_be_bytes());
        assert_eq!(detect_dir(&q, true), Some(DNS));
    }

    /// An HTTP request, then a response: each direction is detected on its
    /// own bytes and flags its own next packet.
    #[test]
    fn verdicts_and_flags_of_a_detected_flow() {
        let mut a = [0u8; 2];
        on_bytes(&mut a, 0, b"GET / HTTP/1.1\r\n\r\n", 0);
        assert_eq!(value(a[0]), HTTP);
        assert_eq!(value(a[1]), UNKNOWN);
        // The server's acknowledgement carries no flag of its own.
        assert!(!take_pd(&mut a, 1));
        assert!(take_pd(&mut a, 0), "the client's next packet");
        assert!(!take_pd(&mut a, 0), "once");
        on_bytes(&mut a, 1, b"HTTP/1.1 200 OK\r\n\r\n", 0);
        assert_eq!(value(a[1]), HTTP);
        assert!(take_pd(&mut a, 1));
        // Later bytes change nothing.
        on_bytes(&mut a, 0, b"junk", 40);
        assert_eq!(a, [HTTP, HTTP]);
        assert!(valid(a[0], 0) && valid(a[1], 1));
    }

    /// A direction without a match fails once it carried enough bytes and
    /// the other side is known or done too; too few bytes stay unknown.
    #[test]
    fn failure_needs_both_sides_done() {
        let mut a = [0u8; 2];
        on_bytes(&mut a, 0, b"0123456789abcdef", 0);
        assert_eq!(a, [NOMATCH, UNKNOWN], "16 bytes: not done");
        on_bytes(&mut a, 0, b"g", 16);
        assert_eq!(a, [NOMATCH_DONE, UNKNOWN], "17: done, waits for the server");
        on_bytes(&mut a, 1, b"0123456", 0);
        assert_eq!(a[1], NOMATCH);
        on_bytes(&mut a, 1, b"7", 7);
        assert_eq!([value(a[0]), value(a[1])], [FAILED, FAILED]);
        // The server's bytes decided: its next packet is flagged, the
        // client's after the acknowledgement.
        assert!(take_pd(&mut a, 1));
        assert!(!take_pd(&mut a, 0));
        assert!(take_pd(&mut a, 0));
        assert!(valid(a[0], 0) && valid(a[1], 1));
    }

    #[test]
    fn one_side_known_fails_the_other() {
        // SMTP: the server's banner matches nothing; the client's command
        // decides the client side, and the banner side fails.
        let mut a = [0u8; 2];
        on_bytes(&mut a, 1, b"220 mx.example ESMTP\r\n", 0);
        assert_eq!(a, [UNKNOWN, NOMATCH_DONE]);
        on_bytes(&mut a, 0, b"EHLO client\r\n", 0);
        assert_eq!([value(a[0]), value(a[1])], [SMTP, FAILED]);
        assert!(!take_pd(&mut a, 1), "the acknowledgement");
        assert!(take_pd(&mut a, 1));
        // A short answer to a detected request stays unknown until done.
        let mut b = [0u8; 2];
        on_bytes(&mut b, 0, b"GET / HTTP/1.1\r\n\r\n", 0);
        on_bytes(&mut b, 1, b"zz\r\n", 0);
        assert_eq!(value(b[1]), UNKNOWN);
        on_bytes(&mut b, 1, b"more\r\n", 4);
        assert_eq!(value(b[1]), FAILED);
        // Bytes after a gap at the start decide nothing but are done.
        let mut g = [0u8; 2];
        on_bytes(&mut g, 0, b"GET / HTTP/1.1\r\n", 100);
        assert_eq!(g, [NOMATCH_DONE, UNKNOWN]);
    }

    #[test]
    fn datagrams() {
        assert_eq!(datagram(true).dirs, [DNS, DNS]);
        assert_eq!(datagram(false).dirs, [FAILED, FAILED]);
        assert!(datagram(false).pd);
        assert!(!valid(0x3f, 0) && !valid(8, 0) && valid(0x2f, 0));
        // Only the client's byte carries the disabled flag.
        assert!(valid(DISABLED | 0x2f, 0) && !valid(DISABLED | 0x2f, 1));
        assert!(!valid(0x80, 0));
    }

    #[test]
    fn detection_events() {
        const HELLO_START: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
        // Mismatch: the second direction detects another protocol, once.
        let mut a = [0u8; 2];
        assert_eq!(on_bytes(&mut a, 0, HELLO_START, 0), 0);
        assert_eq!(on_bytes(&mut a, 1, b"SSH-2.0-x\r\n", 0), EV_MISMATCH);
        assert_eq!(on_bytes(&mut a, 1, b"more bytes", 11), 0);
        // The same protocol both ways: nothing.
        let mut a = [0u8; 2];
        on_bytes(&mut a, 0, HELLO_START, 0);
        assert_eq!(on_bytes(&mut a, 1, b"HTTP/1.1 200 OK\r\n", 0), 0);
        // One direction: the other's detection ends without a match, on
        // whichever side's bytes settle it.
        let mut a = [0u8; 2];
        on_bytes(&mut a, 0, HELLO_START, 0);
        assert_eq!(on_bytes(&mut a, 1, &[0xee; 20], 0), EV_ONE_DIRECTION);
        let mut a = [0u8; 2];
        assert_eq!(on_bytes(&mut a, 1, &[0xee; 20], 0), 0);
        assert_eq!(on_bytes(&mut a, 0, HELLO_START, 0), EV_ONE_DIRECTION);
        // Neither side detected: failed both ways, no event.
        let mut a = [0u8; 2];
        on_bytes(&mut a, 0, &[0xee; 20], 0);
        assert_eq!(on_bytes(&mut a, 1, &[0xee; 20], 0), 0);
        assert_eq!([value(a[0]), value(a[1])], [FAILED, FAILED]);
    }

    #[test]
    fn wrong_direction_and_skipped_disable_later_events() {
        let hello = {
            let mut body = vec![3, 3];
            body.extend_from_slice(&[0x22; 32]);
            body.extend_from_slice(&[0, 0, 2, 0x13, 1, 1, 0, 0, 0]);
            let mut r = vec![22, 3, 1, 0, body.len() as u8 + 4, 1, 0, 0, body.len() as u8];
            r.extend_from_slice(&body);
            r
        };
        assert_eq!(detect_dir(&hello, true), Some(TLS));
        // The server's bytes first, then the client's hello: TLS wants the
        // client first. The server side failing afterwards is not raised.
        let mut a = [0u8; 2];
        assert_eq!(on_bytes(&mut a, 1, &[0xee; 4], 0), 0);
        assert_eq!(on_bytes(&mut a, 0, &hello, 0), EV_WRONG_DIRECTION);
        assert_eq!(on_bytes(&mut a, 1, &[0xee; 20], 4), 0);
        assert!(valid(a[0], 0) && valid(a[1], 1));
        // A server hello before anything from the client is the same.
        let mut a = [0u8; 2];
        assert_eq!(on_bytes(&mut a, 1, &hello, 0), EV_WRONG_DIRECTION);
        // The client first: nothing.
        let mut a = [0u8; 2];
        assert_eq!(on_bytes(&mut a, 0, &hello, 0), 0);
        // Skipped: crossing the cutoff undetected, the other side silent.
        let mut a = [0u8; 2];
        let seg = [0xab; 1000];
        let mut raised = 0;
        for k in 0..101u64 {
            raised += u32::from(on_bytes(&mut a, 0, &seg, k * 1000) == EV_SKIPPED);
        }
        assert_eq!(raised, 1);
        // Detection continues for app-layer-protocol, but raises nothing.
        assert_eq!(on_bytes(&mut a, 1, b"HTTP/1.1 200 OK\r\n", 0), 0);
        assert_eq!(value(a[1]), HTTP);
        // Under the cutoff, or with the other side heard from: no event.
        let mut a = [0u8; 2];
        on_bytes(&mut a, 1, b"x", 0);
        for k in 0..101u64 {
            assert_eq!(on_bytes(&mut a, 0, &seg, k * 1000) & EV_SKIPPED, 0);
        }
    }
}
