//! HTTP rules on a TCP packet: the direction's framing advanced over the
//! packet's stream bytes ([`super::HttpDir::advance`]), and for each piece
//! of a message found there, its buffers built ([`super::Buffers`]),
//! candidates from the prefilter ([`super::prefilter`]), then each
//! candidate's keyword lists over their buffers.

use crate::bufrules::list_matches;
use sluice_nf::{Event, Packet};

use super::{Buffers, Phase, Piece};
use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::pending::{self, Pend};
use crate::{inspect, Ips};

impl Ips {
    /// Follows the HTTP messages of direction `d` through `data`, the
    /// packet's new stream bytes at stream position `base` (after a gap
    /// when `gap`), and matches the HTTP rules on them; returns true if the
    /// packet must be dropped.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn http_stream(
        &mut self,
        st: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
        data: &[u8],
        (base, gap): (u64, bool),
    ) -> bool {
        if self.engine.http.is_empty() || data.is_empty() {
            return false;
        }
        let mut me = st.http[d];
        let mut peer = st.http[1 - d];
        // Bytes were lost (a gap) or the stream was first seen mid-way: the
        // framing cannot be trusted.
        if gap || (me.phase == Phase::Start && base != 0) {
            me.off();
        }
        // The head pending from earlier bytes, if it continues here.
        let cont = self.pend_ok(st, d, pending::HTTP, base);
        if st.pend[d].kind == pending::HTTP && !cont {
            self.pend_drop(st, d, true);
        }
        if me.phase == Phase::Off {
            st.http[d] = me;
            return false;
        }
        let hdr = Header { http: true, ..*hdr };
        let request = hdr.to_server;
        let mut bufs = std::mem::take(&mut self.http_bufs);
        let mut piece = std::mem::take(&mut self.http_piece);
        let mut cands = std::mem::take(&mut self.cands);
        // The pending head's bytes (empty without one): a head completed
        // here that began earlier is these bytes and the new ones up to
        // its end, inspected as if it had come whole.
        let mut held = if cont { self.pend.take(d) } else { Vec::new() };
        let mut joined = false;
        let mut drop = false;
        me.advance(data, request, &mut peer, &mut piece, |pc: &Piece, _| {
            if st.flags & (BLOCKED | PASSED) != 0 {
                return;
            }
            let head = match (&pc.head, pc.head_cont) {
                (Some(r), _) => Some(&data[r.clone()]),
                (None, Some(end)) if cont && !joined => {
                    held.extend_from_slice(&data[..end]);
                    joined = true;
                    Some(&held[..])
                }
                (None, Some(_)) if joined => Some(&held[..]),
                _ => None,
            };
            bufs.build(head, data, &pc.body, request);
            drop |= self.http_message(&bufs, &mut cands, (st, d, &hdr, p), events, (data, base));
        });
        if joined {
            self.counters.pending_joined += 1;
        }
        if piece.overflow {
            self.counters.pending_overflow += 1;
        }
        // What is pending now: the head these bytes end inside, if its
        // beginning is known (`held` still holds the blob's bytes when the
        // head continues through all of these).
        if let Some(s) = piece.open {
            held.clear();
            held.extend_from_slice(&data[s..]);
        } else if piece.open_cont && cont && !joined {
            held.extend_from_slice(data);
        } else {
            held.clear();
        }
        if !held.is_empty() {
            self.pend_save(st, d, pending::HTTP, held, base + data.len() as u64);
        } else if st.pend[d].kind == pending::HTTP {
            st.pend[d] = Pend::default();
            self.pend.put(d, held);
        }
        st.http[d] = me;
        st.http[1 - d] = peer;
        self.http_bufs = bufs;
        self.http_piece = piece;
        self.cands = cands;
        drop
    }

    /// Matches the HTTP rules on one message's buffers `b`.
    fn http_message(
        &mut self,
        b: &Buffers,
        cands: &mut Vec<u32>,
        (st, d, hdr, p): (&mut FlowState, usize, &Header, &Packet),
        events: &mut Vec<Event>,
        (data, base): (&[u8], u64),
    ) -> bool {
        cands.clear();
        self.engine.http.candidates(b, data, &mut self.hits, cands);
        cands.sort_unstable();
        cands.dedup();
        let mut drop = false;
        let mut dot = std::mem::take(&mut self.http_dot);
        for &rule in cands.iter() {
            let r = &self.engine.rules[rule as usize];
            // One alert per matching message (Suricata's per transaction),
            // so pipelined requests in one packet each raise theirs.
            if !self.engine.header_matches(rule, hdr) {
                continue;
            }
            // Every buffer's keywords over that buffer (an absent buffer
            // matches nothing), and keywords before any buffer over the
            // packet's bytes.
            let ok = r.http.iter().all(|l| {
                b.get(l.buf)
                    .is_some_and(|buf| list_matches(r, &l.items, l.dotprefix, buf, &mut dot))
            }) && (r.items.is_empty() || inspect::inspect(r, data, base));
            if !ok {
                continue;
            }
            drop |= self.fire(rule, st, (d, p, Some("http")), events);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.http_dot = dot;
        drop
    }
}
