//! TLS rules on a TCP segment: the hello told by content ([`super::detect`]),
//! its buffers built ([`super::Buffers`]), candidates from the prefilter
//! ([`super::prefilter`]), then each candidate's keyword lists over their
//! buffers and its payload keywords over the segment's payload.

use crate::bufrules::list_matches;
use sluice_nf::{Event, Packet};

use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::{inspect, Ips};

impl Ips {
    /// A TCP segment: if its payload starts with a whole ClientHello or
    /// ServerHello, the TLS rules are matched on it (a rule fires once per
    /// flow direction, as other rules over TCP); returns true if it must be
    /// dropped.
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
        let mut bufs = std::mem::take(&mut self.tls_bufs);
        if !bufs.fill(payload) {
            self.tls_bufs = bufs;
            return false;
        }
        let hdr = Header { tls: true, ..*hdr };
        let d = if hdr.to_server { 0 } else { 1 };
        let mut cands = std::mem::take(&mut self.cands);
        cands.clear();
        self.engine
            .tls
            .candidates(&bufs, payload, &mut self.hits, &mut cands);
        cands.sort_unstable();
        cands.dedup();
        let mut drop = false;
        let mut dot = std::mem::take(&mut self.http_dot);
        for &rule in &cands {
            let r = &self.engine.rules[rule as usize];
            if st.dirs[d].has_fired(rule) || !self.engine.header_matches(rule, &hdr) {
                continue;
            }
            // Every buffer's keywords over that buffer (a buffer the hello
            // lacks matches nothing; over one of `tls.certs`' certificates),
            // and keywords before any buffer over the payload.
            let ok = r.tls.iter().all(|l| {
                bufs.each(l.buf, payload)
                    .any(|buf| list_matches(r, &l.items, l.dotprefix, buf, &mut dot))
            }) && (r.items.is_empty() || inspect::inspect(r, payload, 0));
            if !ok {
                continue;
            }
            drop |= self.fire(rule, st, d, p, events, true);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.http_dot = dot;
        self.cands = cands;
        self.tls_bufs = bufs;
        drop
    }
}
