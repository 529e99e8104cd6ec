//! DNS rules on a packet: the message told by content ([`super::detect`]),
//! candidates from the prefilter ([`super::prefilter`]), then each
//! candidate's payload keywords over the packet's payload and its
//! `dns.query` keywords over each query name of a request.

use sluice_nf::{Event, Packet};

use super::Message;
use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::{inspect, Ips};

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
        let Ok(msg) = super::detect(payload, false) else {
            return false;
        };
        let hdr = Header {
            to_server: msg.is_request(),
            dns: true,
            ..*hdr
        };
        let d = if hdr.to_server { 0 } else { 1 };
        st.dirs[d] = self.engine.initial();
        self.dns_message(&msg, payload, (st, d, &hdr, p), events)
    }

    /// A TCP segment: if its payload is one whole DNS message after the
    /// length prefix, the DNS rules are matched on it (a rule fires once per
    /// flow direction, as other rules over TCP); returns true if it must be
    /// dropped.
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
        let Ok(msg) = super::detect(payload, true) else {
            return false;
        };
        let hdr = Header { dns: true, ..*hdr };
        let d = if hdr.to_server { 0 } else { 1 };
        self.dns_message(&msg, payload, (st, d, &hdr, p), events)
    }

    /// Matches the DNS rules on `msg`, carried in `payload`.
    fn dns_message(
        &mut self,
        msg: &Message<'_>,
        payload: &[u8],
        (st, d, hdr, p): (&mut FlowState, usize, &Header, &Packet),
        events: &mut Vec<Event>,
    ) -> bool {
        let mut names = std::mem::take(&mut self.dns_names);
        let mut spans = std::mem::take(&mut self.dns_spans);
        names.clear();
        spans.clear();
        // `dns.query` is the requests' (to server) buffer only.
        if msg.is_request() {
            for q in msg.questions() {
                let a = names.len() as u32;
                names.push(b'.');
                msg.write_name(q, &mut names);
                spans.push((a, names.len() as u32));
            }
        }
        let mut cands = std::mem::take(&mut self.cands);
        cands.clear();
        self.engine
            .dns
            .candidates(&names, &spans, payload, &mut self.hits, &mut cands);
        cands.sort_unstable();
        cands.dedup();
        let mut drop = false;
        for &rule in &cands {
            let r = &self.engine.rules[rule as usize];
            if st.dirs[d].has_fired(rule)
                || !self.engine.header_matches(rule, hdr)
                || !inspect::inspect(r, payload, 0)
            {
                continue;
            }
            if let Some(q) = &r.dns_query {
                // Without `dotprefix` the buffer starts after the `.`.
                let skip = usize::from(!q.dotprefix);
                let one = |&(a, b): &(u32, u32)| {
                    let name = &names[a as usize + skip..b as usize];
                    inspect::inspect_items(r, &q.items, name, 0)
                };
                if !spans.iter().any(one) {
                    continue;
                }
            }
            drop |= self.fire(rule, st, d, p, events, true);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.cands = cands;
        self.dns_names = names;
        self.dns_spans = spans;
        drop
    }
}
