//! DNS rules on a packet: the message told by content ([`super::detect`]),
//! candidates from the prefilter ([`super::prefilter`]), then each
//! candidate's payload keywords over the packet's payload and its
//! `dns.query` keywords over each query name of a request.

use sluice_nf::{Event, Packet};

use super::{Message, Strictness};
use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::pending::{self, Pend, Unit};
use crate::{inspect, Ips};

/// How strictly a flow's bytes are taken for DNS: as Suricata's parser on
/// port 53, as resolvers send them elsewhere ([`super::Strictness`]).
pub(crate) fn strictness(flow: &sluice_wire::FlowKey) -> Strictness {
    if flow.src_port == 53 || flow.dst_port == 53 {
        Strictness::Port
    } else {
        Strictness::Content
    }
}

impl Ips {
    /// A datagram: if its payload is a DNS message, the DNS rules are
    /// matched on it; returns true if it must be dropped. Without flow
    /// state, the side sending a request is the client (not the port
    /// heuristic of other datagrams).
    pub(crate) fn dns_datagram(
        &mut self,
        p: &Packet,
        st: &mut FlowState,
        hdr: &Header,
        events: &mut Vec<Event>,
    ) -> bool {
        if self.engine.dns.is_empty() {
            return false;
        }
        let payload = p.meta.payload(p.data());
        let Ok(msg) = super::detect_as(payload, false, strictness(&hdr.flow)) else {
            return false;
        };
        let hdr = Header {
            to_server: msg.is_request(),
            dns: true,
            ..*hdr
        };
        let d = if hdr.to_server { 0 } else { 1 };
        st.dirs[d] = self.engine.initial();
        // The events Suricata puts on the transaction before (malformed
        // data, not a request, not a response) are on one already
        // inspected: only the message's own count over UDP.
        let ev = self.dns_events(payload, !hdr.to_server).own;
        self.dns_message(&msg, payload, (st, d, &hdr, p), ev, events)
    }

    /// The DNS events of `m` (a message without its TCP length prefix),
    /// parsed as a response if `response`; none unless a rule tests one.
    fn dns_events(&self, m: &[u8], response: bool) -> super::events::Outcome {
        if !self.engine.dns.events {
            return super::events::Outcome::default();
        }
        let mut o = super::events::decide(m, response);
        if !o.tx {
            o.own = 0;
        }
        o
    }

    /// A TCP packet's new stream bytes `data` at stream position `base`, of
    /// direction `d`: a DNS message with its length prefix ([`super::unit`])
    /// that they are exactly, or that they complete after the pending one,
    /// is inspected whole ([`Ips::dns_message`]). A message these bytes
    /// start but do not finish is kept pending ([`crate::pending`]) when it
    /// starts where a message may start: at the stream's start or where the
    /// direction's previous message ended (the record remembers that as a
    /// DNS unit of no bytes). Returns true if the packet must be dropped.
    pub(crate) fn dns_stream(
        &mut self,
        st: &mut FlowState,
        (d, hdr): (usize, &Header),
        p: &Packet,
        events: &mut Vec<Event>,
        (data, base): (&[u8], u64),
    ) -> bool {
        if self.engine.dns.is_empty() {
            return false;
        }
        let pm = st.pend[d];
        let boundary =
            base == 0 || (pm.kind == pending::DNS && pm.len == 0 && pm.end == base as u32);
        let cont = pm.kind == pending::DNS && pm.len > 0 && self.pend_ok(st, d, pending::DNS, base);
        if pm.kind == pending::DNS && !cont && !boundary {
            self.pend_drop(st, d, true);
        }
        // A stream already told as HTTP or TLS is not taken for DNS (their
        // first bytes can read as a plausible DNS header).
        let free = matches!(st.pend[d].kind, pending::NONE | pending::DNS)
            && !st.http[d].active()
            && (cont || crate::tls::unit(data) == Unit::Not);
        let mut held = if cont { self.pend.take(d) } else { Vec::new() };
        let taken = held.len();
        if cont {
            held.extend_from_slice(data);
        }
        let unit: &[u8] = if cont { &held } else { data };
        let mut drop = false;
        let mut next = Pend::default();
        let how = strictness(&hdr.flow);
        match super::unit_as(unit, how) {
            Unit::Need if cont || (boundary && free) => {
                if !cont {
                    held.extend_from_slice(data);
                }
                self.pend_save(st, d, pending::DNS, (held, taken), base + data.len() as u64);
                return false;
            }
            Unit::Whole(_) => {
                // On port 53 a segment may hold several messages (Suricata
                // parses each): each whole one is inspected. A message the
                // segment only starts after them is not kept (not DNS from
                // there on).
                //
                // A message is inspected once the next one of the segment
                // is parsed: the events Suricata puts on the transaction
                // before a message (malformed data, not a request, not a
                // response) are seen when that one came in the same chunk
                // of the stream. After a message that stops Suricata's
                // parser, no event is raised in the segment.
                let hdr = Header { dns: true, ..*hdr };
                let mut at = 0;
                let mut waiting: Option<(Message<'_>, usize, usize, u8)> = None;
                let mut stopped = false;
                while at < unit.len() {
                    let rest = &unit[at..];
                    let Unit::Whole(n) = super::unit_as(rest, how) else {
                        break;
                    };
                    let mut out = self.dns_events(&rest[2..n], !hdr.to_server);
                    if stopped {
                        out = super::events::Outcome::default();
                    }
                    stopped |= self.engine.dns.events && !out.go_on;
                    if let Some((msg, from, len, ev)) = waiting.take() {
                        let raw = &unit[from..from + len];
                        drop |=
                            self.dns_message(&msg, raw, (st, d, &hdr, p), ev | out.prev, events);
                    }
                    let Ok(msg) = super::detect_as(&rest[..n], true, how) else {
                        break;
                    };
                    if cont && at == 0 {
                        self.counters.pending_joined += 1;
                    }
                    waiting = Some((msg, at, n, out.own));
                    at += n;
                }
                if let Some((msg, from, len, ev)) = waiting {
                    let raw = &unit[from..from + len];
                    drop |= self.dns_message(&msg, raw, (st, d, &hdr, p), ev, events);
                }
                if at == unit.len() {
                    // The next message may start where this one ends.
                    next = Pend {
                        kind: pending::DNS,
                        len: 0,
                        end: (base + data.len() as u64) as u32,
                    };
                }
            }
            _ => {}
        }
        if cont {
            held.clear();
            self.pend.put(d, held);
        }
        if free && (st.pend[d].kind == pending::DNS || next.kind == pending::DNS) {
            st.pend[d] = next;
        }
        drop
    }

    /// A TCP segment outside a tracked stream: if its payload is one whole
    /// DNS message after the length prefix, the DNS rules are matched on it (a rule fires once per
    /// packet, as other rules); returns true if it must be dropped.
    pub(crate) fn dns_segment(
        &mut self,
        p: &Packet,
        st: &mut FlowState,
        hdr: &Header,
        events: &mut Vec<Event>,
    ) -> bool {
        if self.engine.dns.is_empty() || p.meta.payload_len == 0 {
            return false;
        }
        let payload = p.meta.payload(p.data());
        let Ok(msg) = super::detect_as(payload, true, strictness(&hdr.flow)) else {
            return false;
        };
        let hdr = Header { dns: true, ..*hdr };
        let d = if hdr.to_server { 0 } else { 1 };
        let ev = self.dns_events(&payload[2..], !hdr.to_server).own;
        self.dns_message(&msg, payload, (st, d, &hdr, p), ev, events)
    }

    /// Matches the DNS rules on `msg`, carried in `payload`, which raised
    /// the DNS events `ev` ([`super::events::Event::bit`]).
    fn dns_message(
        &mut self,
        msg: &Message<'_>,
        payload: &[u8],
        (st, d, hdr, p): (&mut FlowState, usize, &Header, &Packet),
        ev: u8,
        events: &mut Vec<Event>,
    ) -> bool {
        let mut names = std::mem::take(&mut self.dns_names);
        let mut spans = std::mem::take(&mut self.dns_spans);
        names.clear();
        spans.clear();
        // The questions' names (`dns.query` inspects requests' only,
        // `dns.query.name` responses' too).
        if msg.is_request() || self.engine.dns.names_of_responses {
            for q in msg.questions() {
                let a = names.len() as u32;
                names.push(b'.');
                msg.write_name(q, &mut names);
                if names.len() as u32 == a + 1 {
                    // The root's empty name is no buffer, and Suricata's
                    // walk of the questions stops at the first such one.
                    names.truncate(a as usize);
                    break;
                }
                spans.push((a, names.len() as u32));
            }
        }
        // A response's record names, after the questions', each tagged
        // with its section and whether it is a record's data.
        let mut recs = std::mem::take(&mut self.dns_recs);
        recs.clear();
        if !msg.is_request() && self.engine.dns.record_names {
            let mut push = |at: u32, tag: u8, names: &mut Vec<u8>| {
                let a = names.len() as u32;
                names.push(b'.');
                msg.write_name_at(at, names);
                recs.push((a, names.len() as u32, tag));
            };
            for q in msg.questions() {
                push(q.name_at, 0, &mut names);
            }
            msg.each_record(|section, owner, data| {
                push(owner, section << 1, &mut names);
                if let Some(d) = data {
                    push(d, section << 1 | 1, &mut names);
                }
            });
        }
        let mut cands = std::mem::take(&mut self.cands);
        cands.clear();
        if self.prefilter {
            self.engine
                .dns
                .candidates(&names, &spans, payload, &mut self.hits, &mut cands);
        } else {
            cands.extend_from_slice(self.engine.dns.all());
        }
        cands.sort_unstable();
        cands.dedup();
        let mut drop = false;
        for &rule in &cands {
            let r = &self.engine.rules[rule as usize];
            if self.has_fired(rule)
                || !self.engine.header_matches(rule, hdr)
                || !checks_match(&r.dns_checks, msg, ev)
                || !inspect::inspect(r, payload, 0)
            {
                continue;
            }
            // Each instance of the buffer on some question's name.
            let xf = &mut self.http_dot;
            let ok = r.dns_query.iter().all(|q| {
                if !q.responses && !msg.is_request() {
                    return false;
                }
                // The names are written with a `.` before them, what
                // `dotprefix` alone inspects.
                let dot = q.xf.is_dotprefix();
                let mut one = |a: u32, b: u32| {
                    let name = &names[a as usize + usize::from(!dot)..b as usize];
                    let name = if dot { name } else { q.xf.apply(name, xf) };
                    inspect::inspect_items(r, &q.items, name, 0)
                };
                match q.records {
                    None => spans.iter().any(|&(a, b)| one(a, b)),
                    Some(which) => recs
                        .iter()
                        .filter(|&&(_, _, tag)| which.holds(tag >> 1, tag & 1 == 1))
                        .any(|&(a, b, _)| one(a, b)),
                }
            });
            if !ok {
                continue;
            }
            let from = events.len();
            drop |= self.fire(rule, st, (d, p, Some("dns")), events);
            crate::eve_meta::annotate(events, from, || crate::eve_meta::dns(msg, &names, &spans));
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.cands = cands;
        self.dns_names = names;
        self.dns_spans = spans;
        self.dns_recs = recs;
        drop
    }
}

/// `dns.opcode`, `dns.rcode` and `dns.rrtype` (some question's type) on
/// `msg`, and the events the rule tests among `ev`, those `msg` raised.
fn checks_match(c: &crate::rules::DnsChecks, msg: &Message<'_>, ev: u8) -> bool {
    let h = msg.header();
    c.events & !ev == 0
        && c.opcode.is_none_or(|n| n.matches(h.opcode() as u32))
        && c.rcode.is_none_or(|n| n.matches(h.rcode() as u32))
        && c.rrtype
            .is_none_or(|n| msg.questions().iter().any(|q| n.matches(q.qtype as u32)))
}
