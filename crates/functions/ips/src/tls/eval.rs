//! TLS rules on a TCP segment: the hello told by content ([`super::detect`]),
//! its buffers built ([`super::Buffers`]), candidates from the prefilter
//! ([`super::prefilter`]), then each candidate's keyword lists over their
//! buffers and its payload keywords over the segment's payload.

use crate::bufrules::list_matches;
use sluice_nf::{Event, Packet};

use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::pending::{self, Pend, Unit};
use crate::{inspect, Ips};

impl Ips {
    /// A TCP segment outside a tracked stream: if its payload starts with a
    /// whole ClientHello or ServerHello, the TLS rules are matched on it (a
    /// rule fires once per packet, as other rules); returns
    /// true if it must be dropped.
    pub(crate) fn tls_segment(
        &mut self,
        p: &Packet,
        st: &mut FlowState,
        hdr: &Header,
        events: &mut Vec<Event>,
    ) -> bool {
        if self.engine.tls.is_empty() || p.meta.payload_len == 0 {
            return false;
        }
        let payload = p.meta.payload(p.data());
        self.tls_unit(p, st, hdr, events, payload)
    }

    /// A TCP packet's new stream bytes `data` at stream position `base`, of
    /// direction `d`: a TLS unit ([`super::unit`]) starting there, or
    /// continuing the one pending, is inspected once whole
    /// ([`Ips::tls_unit`]); a unit these bytes end inside is kept pending
    /// ([`crate::pending`]). Returns true if the packet must be dropped.
    pub(crate) fn tls_stream(
        &mut self,
        st: &mut FlowState,
        (d, hdr): (usize, &Header),
        p: &Packet,
        events: &mut Vec<Event>,
        (data, base): (&[u8], u64),
    ) -> bool {
        // Without TLS rules on messages, hellos are still read for the
        // version the handshake state's rules see.
        if self.engine.tls.is_empty() && self.engine.tls_flow.is_empty() {
            return false;
        }
        let cont = self.pend_ok(st, d, pending::TLS, base);
        if st.pend[d].kind == pending::TLS && !cont {
            self.pend_drop(st, d, true);
        }
        let mut held = if cont { self.pend.take(d) } else { Vec::new() };
        let taken = held.len();
        if cont {
            held.extend_from_slice(data);
        }
        let unit: &[u8] = if cont { &held } else { data };
        let mut drop = false;
        match super::unit(unit) {
            Unit::Need if cont || st.pend[d].kind == pending::NONE => {
                if !cont {
                    held.extend_from_slice(data);
                }
                self.pend_save(st, d, pending::TLS, (held, taken), base + data.len() as u64);
                return false;
            }
            // Another protocol's unit is pending here: not TLS.
            Unit::Need | Unit::Not => {}
            u => {
                if u == Unit::Over {
                    // What there is is inspected; the unit is given up.
                    self.counters.pending_overflow += 1;
                } else if cont {
                    self.counters.pending_joined += 1;
                }
                drop = self.tls_unit(p, st, hdr, events, unit);
            }
        }
        if cont {
            st.pend[d] = Pend::default();
            held.clear();
            self.pend.put(d, held);
        }
        drop
    }

    /// A TCP packet of direction `x` (0: to the server) of a flow: the other
    /// direction's bytes it acknowledges are parsed ([`super::legacy`]),
    /// then, if the flow has a TLS state, the rules of that state
    /// ([`crate::rules::Rule::tls_flow`]) are evaluated, each raised on the
    /// first packet of a direction it matches (Suricata's once per
    /// transaction and direction). Returns true if the packet must be
    /// dropped.
    pub(crate) fn tls_flow_packet(
        &mut self,
        st: &mut FlowState,
        x: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        if !st.tls.apply(x) {
            return false;
        }
        let hdr = Header { tls: true, ..*hdr };
        let mut drop = false;
        for i in 0..self.engine.tls_flow.len() {
            let rule = self.engine.tls_flow[i];
            if self.has_fired(rule) || !self.engine.header_matches(rule, &hdr) {
                continue;
            }
            let r = &self.engine.rules[rule as usize];
            let t = &st.tls;
            let ok = if r.tls_events != 0 {
                // Rules on events have no `ssl_state`/`ssl_version`.
                t.events_match(x, r.tls_events)
            } else {
                r.ssl_state.iter().all(|s| s.matches(t.cur))
                    && r.ssl_version.iter().all(|v| v.matches(t.ver[x]))
                    && !t.matched_before(x, &r.ssl_state, &r.ssl_version)
            };
            if !ok {
                continue;
            }
            drop |= self.fire(rule, st, (x, p, Some("tls")), events);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        st.tls.saw(x);
        drop
    }

    /// Matches the TLS rules on `payload`, if it starts with a hello or a
    /// Certificate message ([`super::Buffers::fill`]); returns true if the
    /// packet must be dropped.
    fn tls_unit(
        &mut self,
        p: &Packet,
        st: &mut FlowState,
        hdr: &Header,
        events: &mut Vec<Event>,
        payload: &[u8],
    ) -> bool {
        // The buffers come from the records joined when a message spans
        // records (`super::defragment`); payload keywords still see the bytes
        // as they came.
        let raw = payload;
        let mut joined = std::mem::take(&mut self.tls_joined);
        let payload: &[u8] = if super::defragment(raw, &mut joined) {
            &joined
        } else {
            raw
        };
        if self.engine.tls_hello_events && hdr.to_server {
            st.tls
                .hello_events(super::events::client_hello_events(payload));
        }
        let mut bufs = std::mem::take(&mut self.tls_bufs);
        if !bufs.fill(payload) {
            self.tls_bufs = bufs;
            self.tls_joined = joined;
            return false;
        }
        let hdr = Header { tls: true, ..*hdr };
        let d = if hdr.to_server { 0 } else { 1 };
        if let Some((_, ver)) = bufs.version() {
            // The hello's version, parsed whole, for `ssl_version`.
            st.tls.hello_version(d, ver);
        }
        // `tls_cert_expired`/`tls_cert_valid` compare with the packet's time
        // (Suricata's flow time at inspection).
        let now = (p.ts_ns / 1_000_000_000) as i64;
        let mut cands = std::mem::take(&mut self.cands);
        cands.clear();
        if self.prefilter {
            self.engine
                .tls
                .candidates(&bufs, payload, &mut self.mpm, &mut cands);
        } else {
            cands.extend_from_slice(self.engine.tls.all());
        }
        cands.sort_unstable();
        cands.dedup();
        let mut drop = false;
        let mut dot = std::mem::take(&mut self.http_dot);
        for &rule in &cands {
            let r = &self.engine.rules[rule as usize];
            if self.has_fired(rule) || !self.engine.header_matches(rule, &hdr) {
                continue;
            }
            // Every buffer's keywords over that buffer (a buffer the hello
            // lacks matches nothing; over one of `tls.certs`' certificates),
            // and keywords before any buffer over the payload.
            let ok = r.tls.iter().all(|l| {
                bufs.each(l.buf, payload)
                    .any(|buf| list_matches(r, &l.items, &l.xf, buf, 0, &mut dot))
            }) && r.tls_version.is_none_or(|v| {
                // The version Suricata keeps for the packet's side: the
                // client's on a packet to the server, the server's on one
                // to the client.
                bufs.version().is_some_and(|(k, ver)| {
                    (k == super::Kind::Client) == hdr.to_server && v.matches(ver)
                })
            }) && r
                .tls_chain_len
                .is_none_or(|c| bufs.cert_count() > 0 && c.matches(bufs.cert_count() as u32))
                && (r.tls_cert.is_empty()
                    || bufs
                        .cert_view()
                        .is_some_and(|c| r.tls_cert.iter().all(|k| k.matches(&c, now))))
                && (r.ssl_version.is_empty()
                    || bufs.version().is_some_and(|(k, ver)| {
                        (k == super::Kind::Client) == hdr.to_server
                            && r.ssl_version.iter().all(|v| v.matches(ver))
                    }))
                && (r.items.is_empty() || inspect::inspect(r, raw, 0));
            if !ok {
                continue;
            }
            let from = events.len();
            drop |= self.fire(rule, st, (d, p, Some("tls")), events);
            let ja3 = self.ja3_logged;
            crate::eve_meta::annotate(events, from, || crate::eve_meta::tls(&bufs, payload, ja3));
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.http_dot = dot;
        self.cands = cands;
        self.tls_bufs = bufs;
        self.tls_joined = joined;
        drop
    }
}
