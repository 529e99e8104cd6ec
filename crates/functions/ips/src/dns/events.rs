//! DNS app-layer events (`app-layer-event:dns.NAME`), decided from one
//! message as Suricata 7.0.10's DNS parser decides them.
//!
//! Suricata parses a message with its own rules, not with [`super::Message`]'s:
//! a request's questions only, a response's questions, answers and
//! authorities (not its additional records), each record's data by its type
//! (a name for CNAME, PTR, NS, MX, SRV, SOA; a first string for TXT). A
//! name is walked up to 255 labels and pointers, its dotted form cut at
//! 1025 characters; a pointer to where it is read stops the walk. The walk
//! is done here again, apart from [`super::Message`], because the events
//! are precisely where the two parsers may differ.
//!
//! Where Suricata puts an event decides when a rule sees it: the flags of a
//! message's header and names go on the message's own transaction ([`Outcome::own`]);
//! "malformed data", "not a request" and "not a response" go on the
//! transaction before it ([`Outcome::prev`]), already inspected unless it
//! came in the same stream chunk (pipelined DNS over TCP).

/// One of Suricata 7.0.10's DNS events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The message does not parse (a field, label or record cut short, a
    /// bad label type, a pointer out of the message).
    MalformedData,
    /// A response (QR set) sent to the server.
    NotRequest,
    /// A message with QR clear sent to the client.
    NotResponse,
    /// The reserved Z bit (0x0040) is set.
    ZFlagSet,
    /// An opcode of 7 or more.
    InvalidOpcode,
    /// A name longer than 1025 characters in dotted form (or cut after 255
    /// labels).
    NameTooLong,
    /// A compression pointer to where it is itself read, after a first
    /// pointer.
    InfiniteLoop,
    /// A name of more than 255 labels and pointers.
    TooManyLabels,
}

impl Event {
    /// The event named `name` (after `dns.`), as Suricata 7.0.10 spells it.
    pub fn parse(name: &str) -> Option<Event> {
        Some(match name {
            "malformed_data" => Event::MalformedData,
            "not_request" => Event::NotRequest,
            "not_response" => Event::NotResponse,
            "z_flag_set" => Event::ZFlagSet,
            "invalid_opcode" => Event::InvalidOpcode,
            "name_too_long" => Event::NameTooLong,
            "infinite_loop" => Event::InfiniteLoop,
            "too_many_labels" => Event::TooManyLabels,
            _ => return None,
        })
    }

    /// The event's bit in a set of events.
    pub fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// What parsing one message does, as Suricata 7.0.10's parser.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Events on the message's own transaction ([`Event::bit`]s).
    pub own: u8,
    /// Events on the transaction before it.
    pub prev: u8,
    /// The message made a transaction.
    pub tx: bool,
    /// The parser goes on after it (over TCP, to the next message).
    pub go_on: bool,
}

/// Longest dotted name Suricata keeps (`MAX_NAME_LEN`).
const MAX_NAME_LEN: usize = 1025;
/// Labels and pointers Suricata follows in one name.
const MAX_LABELS: usize = 255;

/// Name-walk flags, as Suricata's `DNSNameFlags`.
const TRUNCATED: u8 = 1;
const INFINITE_LOOP: u8 = 2;
const LABEL_LIMIT: u8 = 4;

/// A parse failure (Suricata's nom errors, incomplete or not).
struct Bad;

fn u16_at(i: &[u8]) -> Result<(&[u8], u16), Bad> {
    match i {
        [a, b, rest @ ..] => Ok((rest, u16::from_be_bytes([*a, *b]))),
        _ => Err(Bad),
    }
}

fn skip(i: &[u8], n: usize) -> Result<&[u8], Bad> {
    i.get(n..).ok_or(Bad)
}

/// Suricata's `dns_parse_name`: walks the name at `start` (a suffix of
/// `message`, or of a record's data); returns what follows it. Each loop
/// turn is a label or a pointer and there are at most 256: bounded.
fn name<'a>(start: &'a [u8], message: &'a [u8], flags: &mut u8) -> Result<&'a [u8], Bad> {
    let mut pos = start;
    let mut pivot: Option<&[u8]> = None;
    let mut len = 0usize;
    let mut count = 0usize;
    let mut f = 0u8;
    while let Some(&l) = pos.first() {
        if l == 0 {
            pos = &pos[1..];
            break;
        } else if l & 0xc0 == 0 {
            let label = pos.get(1..1 + l as usize).ok_or(Bad)?;
            if f & TRUNCATED == 0 {
                len += usize::from(len > 0) + label.len();
            }
            pos = &pos[1 + l as usize..];
        } else if l & 0xc0 == 0xc0 {
            let (rem, leader) = u16_at(pos)?;
            let offset = (leader & 0x3fff) as usize;
            let target = message.get(offset..).ok_or(Bad)?;
            // Suricata compares the bytes from the target with the bytes
            // from here: equal (lengths first) means the same place.
            if target == pos {
                f |= INFINITE_LOOP;
                if pivot.is_some() {
                    break;
                }
                return Err(Bad);
            }
            pos = target;
            pivot.get_or_insert(rem);
        } else {
            return Err(Bad);
        }
        count += 1;
        if count > MAX_LABELS {
            f |= LABEL_LIMIT;
            if pivot.is_some() {
                f |= TRUNCATED;
                break;
            }
            return Err(Bad);
        }
        if len > MAX_NAME_LEN {
            len = MAX_NAME_LEN;
            f |= TRUNCATED;
            if pivot.is_some() {
                break;
            }
        }
    }
    *flags |= f;
    Ok(pivot.unwrap_or(pos))
}

/// One record's data of type `rtype` (Suricata's `dns_parse_rdata`, at
/// least once: a TXT record's first string must parse, the rest may not).
fn rdata(data: &[u8], message: &[u8], rtype: u16, flags: &mut u8) -> Result<(), Bad> {
    match rtype {
        // CNAME, PTR, NS.
        5 | 12 | 2 => name(data, message, flags).map(drop),
        // SOA: two names, then five 32-bit numbers.
        6 => {
            let i = name(data, message, flags)?;
            let i = name(i, message, flags)?;
            skip(i, 20).map(drop)
        }
        // MX: a preference, then a name.
        15 => name(skip(data, 2)?, message, flags).map(drop),
        // SRV: priority, weight, port, then a name.
        33 => name(skip(data, 6)?, message, flags).map(drop),
        // TXT: a length byte and that many bytes.
        16 => {
            let n = *data.first().ok_or(Bad)? as usize;
            skip(data, 1 + n).map(drop)
        }
        // SSHFP: algorithm and type bytes.
        44 => skip(data, 2).map(drop),
        // A, AAAA, NULL and the rest: taken whole.
        _ => Ok(()),
    }
}

/// Suricata's `dns_parse_answer` over `count` records.
fn records<'a>(
    mut i: &'a [u8],
    message: &'a [u8],
    count: u16,
    flags: &mut u8,
) -> Result<&'a [u8], Bad> {
    // Each record takes at least 11 bytes: the loop ends with the bytes.
    for _ in 0..count {
        let rest = name(i, message, flags)?;
        let (rest, rtype) = u16_at(rest)?;
        let rest = skip(rest, 6)?;
        let (rest, rdlen) = u16_at(rest)?;
        let data = rest.get(..rdlen as usize).ok_or(Bad)?;
        if !data.is_empty() {
            rdata(data, message, rtype, flags)?;
        }
        i = &rest[rdlen as usize..];
    }
    Ok(i)
}

/// Suricata's `probe_header_validity`: the counts fit the length, a
/// message without records is the header alone, a query has a question.
fn header_valid(m: &[u8]) -> bool {
    let c = |k: usize| u16::from_be_bytes([m[k], m[k + 1]]) as usize;
    let (qd, an, ns, ar) = (c(4), c(6), c(8), c(10));
    let nb = qd + an + ns + ar;
    if 2 * nb > m.len() || (nb == 0 && m.len() > 12) {
        return false;
    }
    !(c(2) & 0x8000 == 0 && qd == 0)
}

/// The events of `m`, one DNS message (over TCP, without its length
/// prefix), parsed as a response (`response`, sent to the client) or a
/// request, as Suricata 7.0.10 does.
pub fn decide(m: &[u8], response: bool) -> Outcome {
    let mut out = Outcome::default();
    if m.len() < 12 || !header_valid(m) {
        // Suricata's parser stops without an event.
        return out;
    }
    let flags = u16::from_be_bytes([m[2], m[3]]);
    let count = |k: usize| u16::from_be_bytes([m[k], m[k + 1]]);
    let mut nf = 0u8;
    let body = (|| {
        let mut i = &m[12..];
        for _ in 0..count(4) {
            i = skip(name(i, m, &mut nf)?, 4)?;
        }
        if response {
            i = records(i, m, count(6), &mut nf)?;
            records(i, m, count(8), &mut nf)?;
        }
        Ok::<(), Bad>(())
    })();
    if body.is_err() {
        out.prev = Event::MalformedData.bit();
        return out;
    }
    let qr = flags & 0x8000 != 0;
    if !response && qr {
        out.prev = Event::NotRequest.bit();
        return out;
    }
    if response && !qr {
        out.prev = Event::NotResponse.bit();
    }
    out.tx = true;
    out.go_on = true;
    let mut own = 0;
    if flags & 0x0040 != 0 {
        own |= Event::ZFlagSet.bit();
    }
    if (flags >> 11) & 0xf >= 7 {
        own |= Event::InvalidOpcode.bit();
    }
    if nf & TRUNCATED != 0 {
        own |= Event::NameTooLong.bit();
    }
    if nf & INFINITE_LOOP != 0 {
        own |= Event::InfiniteLoop.bit();
    }
    if nf & LABEL_LIMIT != 0 {
        own |= Event::TooManyLabels.bit();
    }
    out.own = own;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(flags: u16, counts: [u16; 4], body: &[u8]) -> Vec<u8> {
        let mut m = vec![0x12, 0x34];
        m.extend_from_slice(&flags.to_be_bytes());
        for c in counts {
            m.extend_from_slice(&c.to_be_bytes());
        }
        m.extend_from_slice(body);
        m
    }

    fn query(flags: u16, qname: &[u8]) -> Vec<u8> {
        let mut b = qname.to_vec();
        b.extend_from_slice(&[0, 1, 0, 1]);
        msg(flags, [1, 0, 0, 0], &b)
    }

    const EX: &[u8] = b"\x07example\x03com\x00";

    #[test]
    fn sound_query_and_response() {
        let q = query(0x0100, EX);
        let o = decide(&q, false);
        assert_eq!(
            o,
            Outcome {
                own: 0,
                prev: 0,
                tx: true,
                go_on: true
            }
        );
        let mut b = EX.to_vec();
        b.extend_from_slice(&[
            0, 1, 0, 1, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 1,
        ]);
        let r = msg(0x8180, [1, 1, 0, 0], &b);
        assert_eq!(decide(&r, true).own, 0);
        assert_eq!(decide(&r, true).prev, 0);
    }

    #[test]
    fn header_flags() {
        assert_eq!(decide(&query(0x0140, EX), false).own, Event::ZFlagSet.bit());
        // AD and CD are not Z.
        assert_eq!(decide(&query(0x0130, EX), false).own, 0);
        assert_eq!(
            decide(&query(7 << 11, EX), false).own,
            Event::InvalidOpcode.bit()
        );
        assert_eq!(decide(&query(6 << 11, EX), false).own, 0);
    }

    #[test]
    fn direction() {
        let r = query(0x8180, EX);
        let o = decide(&r, false);
        assert_eq!(
            (o.prev, o.tx, o.go_on),
            (Event::NotRequest.bit(), false, false)
        );
        // A query sent to the client: "not a response" on the one before,
        // and a transaction of its own.
        let o = decide(&query(0x0100, EX), true);
        assert_eq!((o.prev, o.tx), (Event::NotResponse.bit(), true));
    }

    #[test]
    fn malformed_and_invalid_header() {
        let q = query(0x0100, EX);
        let o = decide(&q[..q.len() - 2], false);
        assert_eq!(
            (o.prev, o.tx, o.go_on),
            (Event::MalformedData.bit(), false, false)
        );
        // A query without a question fails the header check: no event.
        assert_eq!(
            decide(&msg(0x0100, [0, 0, 0, 0], b""), false),
            Outcome::default()
        );
        // A label type 0x40.
        assert_eq!(
            decide(&query(0x0100, b"\x41x\x00"), false).prev,
            Event::MalformedData.bit()
        );
        // A pointer past the message.
        assert_eq!(
            decide(&query(0x0100, b"\xc0\xff"), false).prev,
            Event::MalformedData.bit()
        );
        // A pointer to itself before any other: an error.
        assert_eq!(
            decide(&query(0x0100, b"\xc0\x0c"), false).prev,
            Event::MalformedData.bit()
        );
        assert_eq!(decide(&[0u8; 5], false), Outcome::default());
    }

    #[test]
    fn names() {
        // 12 -> 14, and 14 points at itself.
        let q = msg(0x0100, [1, 0, 0, 0], b"\xc0\x0e\xc0\x0e\x00\x01");
        assert_eq!(decide(&q, false).own, Event::InfiniteLoop.bit());
        // 12 -> 14 -> 12 ...: 256 pointers.
        let o = decide(&query(0x0100, b"\xc0\x0e\xc0\x0c"), false);
        assert_eq!(o.own, Event::TooManyLabels.bit() | Event::NameTooLong.bit());
        // 17 labels of 63: 1087 characters, no pointer.
        let long: Vec<u8> = (0..17)
            .flat_map(|_| std::iter::once(63).chain([b'a'; 63]))
            .chain([0])
            .collect();
        assert_eq!(
            decide(&query(0x0100, &long), false).own,
            Event::NameTooLong.bit()
        );
        // 15 of 63: 959 characters.
        let short: Vec<u8> = (0..15)
            .flat_map(|_| std::iter::once(63).chain([b'a'; 63]))
            .chain([0])
            .collect();
        assert_eq!(decide(&query(0x0100, &short), false).own, 0);
        // 256 one-byte labels, no pointer: an error.
        let many: Vec<u8> = (0..256).flat_map(|_| [1, b'a']).chain([0]).collect();
        assert_eq!(
            decide(&query(0x0100, &many), false).prev,
            Event::MalformedData.bit()
        );
    }

    #[test]
    fn record_data() {
        // A response whose CNAME data is cut short, then one whose data
        // points at itself after a pointer.
        let mut b = EX.to_vec();
        b.extend_from_slice(&[
            0, 1, 0, 1, 0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 3, 5, b'a', b'b',
        ]);
        assert_eq!(
            decide(&msg(0x8180, [1, 1, 0, 0], &b), true).prev,
            Event::MalformedData.bit()
        );
        // The same in an additional record: not parsed.
        let mut b = EX.to_vec();
        b.extend_from_slice(&[
            0, 1, 0, 1, 0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 3, 5, b'a', b'b',
        ]);
        let o = decide(&msg(0x8180, [1, 0, 0, 1], &b), true);
        assert_eq!((o.prev, o.tx), (0, true));
        // A request's records are not parsed either.
        assert!(decide(&msg(0x0100, [1, 1, 0, 0], &b), false).tx);
        // TXT: the first string must fit.
        let mut b = EX.to_vec();
        b.extend_from_slice(&[
            0, 1, 0, 1, 0xc0, 12, 0, 16, 0, 1, 0, 0, 0, 60, 0, 2, 5, b'a',
        ]);
        assert_eq!(
            decide(&msg(0x8180, [1, 1, 0, 0], &b), true).prev,
            Event::MalformedData.bit()
        );
    }

    #[test]
    fn names_parse() {
        for (s, e) in [
            ("malformed_data", Event::MalformedData),
            ("not_request", Event::NotRequest),
            ("not_response", Event::NotResponse),
            ("z_flag_set", Event::ZFlagSet),
            ("invalid_opcode", Event::InvalidOpcode),
            ("name_too_long", Event::NameTooLong),
            ("infinite_loop", Event::InfiniteLoop),
            ("too_many_labels", Event::TooManyLabels),
        ] {
            assert_eq!(Event::parse(s), Some(e));
        }
        assert_eq!(Event::parse("invalid_additionals"), None);
    }
}
