//! HTTP rules on a TCP packet: the direction's framing advanced over the
//! packet's stream bytes ([`super::HttpDir::advance`]), and for each piece
//! of a message found there, its buffers built ([`super::Buffers`]),
//! candidates from the prefilter ([`super::prefilter`]), then each
//! candidate's keyword lists over their buffers. Body rules see the body
//! accumulated so far ([`super::body`]).

use crate::bufrules::list_matches;
use sluice_nf::{Event, Packet};

use super::body::BodyAcc;
use super::inflate::{Coding, Inflater, Stop, Z_KEPT};
use super::prefilter::HeadFinds;
use super::{Buf, Buffers, HttpDir, Phase, Piece};
use crate::engine::{
    FlowState, Header, BLOCKED, OWED, OWED_ABNORMAL, OWED_RANGE, OWED_TOO_MANY, PASSED, RANGE_BAD,
};
use crate::pending::{self, Pend};
use crate::rules::Rule;
use crate::{inspect, Ips};

/// [`kind`]: the rule names a head buffer.
pub(crate) const HEAD: u8 = 1;
/// [`kind`]: the rule names a body buffer.
pub(crate) const BODY: u8 = 2;

/// Which kinds of HTTP buffers rule `r` names ([`HEAD`], [`BODY`]).
pub(crate) fn kind(r: &Rule) -> u8 {
    r.http.iter().fold(0, |k, l| {
        k | match l.buf {
            Buf::RequestBody | Buf::ResponseBody | Buf::FileData => BODY,
            _ => HEAD,
        }
    })
}

/// Suricata inspects a message's body once it is whole, or once it holds
/// its `request-body-minimal-inspect-size` (32 KiB) or
/// `response-body-minimal-inspect-size` (40 KiB): not on each packet.
pub(crate) const MIN_INSPECT: [usize; 2] = [32 * 1024, 40 * 1024];

/// Suricata's `request-body-inspect-window` (4 KiB) and
/// `response-body-inspect-window` (16 KiB): once a body was inspected past
/// its minimal inspect size, later inspections see about this much of it.
pub(crate) const INSPECT_WINDOW: [usize; 2] = [4 * 1024, 16 * 1024];

/// Where the body buffer starts for an inspection of a body of `total`
/// bytes, `inspected` at the last one (`d`: 0 a request, 1 a response), as
/// Suricata's body reassembly computes it: the whole body until an
/// inspection happened past the minimal inspect size, then a window
/// ending at the body's end and reaching back at least a quarter window
/// before the bytes not inspected yet.
pub(crate) fn body_window(inspected: usize, total: usize, d: usize) -> usize {
    if inspected <= MIN_INSPECT[d] || total < inspected {
        return 0;
    }
    let win = INSPECT_WINDOW[d];
    let fresh = total - inspected;
    if fresh < win {
        inspected.saturating_sub(win - fresh)
    } else {
        inspected - win / 4
    }
}

/// True if rule `r` must wait for a message's body to be whole (or its
/// minimal inspect size): its body keywords could match a part of the body
/// and not the whole (a `bsize`, `endswith`, negated content, a digest...),
/// so inspecting the body so far on each packet, as is done for the others
/// (whose match in a part is a match in the whole), would fire where
/// Suricata does not.
pub(crate) fn waits_for_body(r: &Rule) -> bool {
    use crate::rules::Item;
    use crate::transform::Transform;
    let monotone = |i: &Item| match i {
        Item::Content(k) => {
            let c = &r.contents[*k as usize];
            !c.negated && !c.endswith
        }
        Item::Pcre(p) => {
            // An anchor at the end, or a negative lookaround, may stop
            // matching as bytes come.
            let src = p.re.0.as_str();
            !p.negate
                && !["$", "\\z", "\\Z", "(?!", "(?<!"]
                    .iter()
                    .any(|a| src.contains(a))
        }
        Item::ByteJump(j) => !j.from_end,
        Item::IsDataAt(d) => !d.negate,
        Item::ByteTest(_) | Item::ByteExtract(_) | Item::ByteMath(_) | Item::Asn1(_) => true,
        Item::HttpEvent(_) => true,
        // A whole body's value, not a part's.
        Item::Bsize(_) | Item::Base64Decode(_) | Item::Dataset(_) => false,
    };
    r.http.iter().any(|l| {
        matches!(l.buf, Buf::RequestBody | Buf::ResponseBody | Buf::FileData)
            && (!l.items.iter().all(monotone)
                || !l.xf.iter().all(|t| {
                    matches!(
                        t,
                        Transform::DotPrefix | Transform::ToLowercase | Transform::ToUppercase
                    )
                }))
    })
}

/// [`Rule::http_body_events`]'s bit of `http.invalid_request_chunk_len`.
pub(crate) const REQUEST_CHUNK_LEN: u16 = 1;
/// [`Rule::http_body_events`]'s bit of `http.invalid_response_chunk_len`.
pub(crate) const RESPONSE_CHUNK_LEN: u16 = 2;
/// [`Rule::http_body_events`]'s bit of `http.gzip_decompression_failed`.
pub(crate) const GZIP_FAILED: u16 = 4;
/// [`Rule::http_body_events`]'s bit of a `to_server` rule's
/// `http.too_many_encoding_layers` ([`crate::engine::OWED_CE`]).
pub(crate) const CE_TOO_MANY: u16 = 8;
/// [`Rule::http_body_events`]'s bit of a `to_server` rule's
/// `http.abnormal_ce_header`.
pub(crate) const CE_ABNORMAL: u16 = 16;
/// [`Rule::http_body_events`]'s bit of `http.range_invalid`, fired on the
/// response body's first bytes ([`super::range`]).
pub(crate) const RANGE_INVALID: u16 = 32;
/// [`Rule::http_body_events`]'s bit of a `to_server` rule's
/// `http.range_invalid` ([`crate::engine::OWED_RANGE`]).
pub(crate) const RANGE_OWED: u16 = 64;
/// [`Rule::http_body_events`]'s bit of `http.100_continue_already_seen`,
/// fired on the packet bringing a second `100 Continue` to one request.
pub(crate) const CONTINUE_AGAIN: u16 = 128;
/// [`Rule::http_body_events`]'s bit of
/// `http.unable_to_match_response_to_request`, fired on the packet
/// bringing a response's first bytes when no request is left to answer.
pub(crate) const UNMATCHED: u16 = 256;
/// [`FlowState::http_cont`]: the current request was answered by a
/// `100 Continue` already.
pub(crate) const CONT_SEEN: u8 = 1;
/// [`FlowState::http_cont`]: its `http.100_continue_already_seen` was
/// raised (once per transaction, as Suricata's events are a set).
pub(crate) const CONT_RAISED: u8 = 2;
/// [`FlowState::http_cont`]'s bits counting the requests begun and not
/// yet answered (0 to 2; 3: more, no longer counted).
pub(crate) const PENDING: u8 = 12;
/// One request in [`PENDING`].
const PENDING_ONE: u8 = 4;

impl Ips {
    /// Follows the HTTP messages of direction `d` through `data`, the
    /// packet's new stream bytes at stream position `base` (after a gap
    /// when `gap`), and matches the HTTP rules on them; returns true if the
    /// packet must be dropped. With `eof` the direction's stream ends after
    /// them (a FIN or a reset): a body being received ends there
    /// ([`super::HttpDir::finish`]), and the rules waiting for it inspect
    /// it (`data` may then be empty).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn http_stream(
        &mut self,
        st: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
        data: &[u8],
        (base, gap, eof): (u64, bool, bool),
    ) -> bool {
        // An FTP control connection is no HTTP flow (a long `USER` line
        // in one segment could look like a request's start); its pending
        // slot follows its lines ([`crate::ftp`]).
        if !self.engine.parses_http() || (data.is_empty() && !eof) || st.app == crate::applayer::FTP
        {
            return false;
        }
        let mut me = st.http[d];
        let mut peer = st.http[1 - d];
        // Bytes were lost (a gap) or the stream was first seen mid-way: the
        // framing cannot be trusted.
        if gap || (me.phase == Phase::Start && base != 0) {
            me.off();
        }
        // Body accumulation runs only when a rule inspects bodies.
        let limit = if self.http_body_rules {
            self.http_body_limit as usize
        } else {
            0
        };
        // The head, or the body of the current message, pending from
        // earlier bytes, if it continues here.
        let cont = self.pend_ok(st, d, pending::HTTP, base);
        let body_cont = limit > 0 && self.pend_ok(st, d, pending::HTTP_BODY, base);
        let ours = matches!(st.pend[d].kind, pending::HTTP | pending::HTTP_BODY);
        if ours && !cont && !body_cont {
            self.pend_drop(st, d, true);
        }
        if me.phase == Phase::Off {
            st.http[d] = me;
            return false;
        }
        let hdr = Header { http: true, ..*hdr };
        let request = hdr.to_server;
        let canon = p.meta.flow.canonical().0;
        let mut bufs = std::mem::take(&mut self.http_bufs);
        let mut piece = std::mem::take(&mut self.http_piece);
        let mut cands = std::mem::take(&mut self.cands);
        let mut acc = std::mem::take(&mut self.http_acc);
        let mut extra = std::mem::take(&mut self.http_extra);
        // The pending head's bytes (empty without one): a head completed
        // here that began earlier is these bytes and the new ones up to
        // its end, inspected as if it had come whole.
        let mut held = if cont || body_cont {
            self.pend.take(d)
        } else {
            Vec::new()
        };
        let taken = held.len();
        acc.reset();
        if body_cont {
            if acc.decode(&mut held).is_err() {
                self.counters.pending_lost += 1;
                acc.reset();
            }
            held.clear();
        }
        let mut joined = false;
        let mut drop = false;
        let mut each = |pc: &Piece, _: &HttpDir| {
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
            let new_msg = pc.head.is_some() || pc.head_cont.is_some();
            // A response head's Content-Encoding events, owed to the
            // `to_server` rules on them until the client's next packet.
            if new_msg && !request && self.http_ce_owed {
                if let Some(r) = head.and_then(|h| super::events::content_encoding(h, false)) {
                    st.flags |= if r.too_many { OWED_TOO_MANY } else { 0 }
                        | if r.abnormal { OWED_ABNORMAL } else { 0 };
                }
            }
            // A message whose head began in these bytes: libhtp's
            // transactions begin there ([`Ips::http_begun`]).
            if self.http_tx && pc.head.is_some() {
                drop |= self.http_begun(st, (d, request), &hdr, p, events);
            }
            // `http.100_continue_already_seen`: libhtp's interim responses
            // of one transaction, a second `100` raising it (once); any
            // other status ends the transaction.
            if new_msg && !request && self.http_tx {
                if !head.is_some_and(super::status_is_100) {
                    st.http_cont &= PENDING;
                } else if st.http_cont & CONT_SEEN == 0 {
                    st.http_cont |= CONT_SEEN;
                } else if st.http_cont & CONT_RAISED == 0 {
                    st.http_cont |= CONT_RAISED;
                    self.counters.http_continue_again += 1;
                    drop |= self.http_body_event(st, d, &hdr, p, events, CONTINUE_AGAIN);
                }
            }
            // `http.range_invalid`: decided by the response's head, raised
            // by its body's first bytes.
            if new_msg && !request && self.http_range != 0 {
                st.flags &= !RANGE_BAD;
                if head.is_some_and(super::events::content_range_invalid) {
                    st.flags |= RANGE_BAD;
                }
            }
            if new_msg {
                acc.reset();
                acc.live = true;
                self.inflaters.forget(&canon, d);
                match head {
                    Some(h) if limit > 0 => {
                        acc.set_head(h);
                        // Requests' bodies are inflated too: Suricata
                        // 7.0.10 finds a page in a gzip POST's
                        // `http.request_body` (measured), so an upload
                        // compressed by its sender hides nothing. A
                        // request's coding is read from a whole value
                        // only, as libhtp reads it ([`super::ce`]).
                        acc.coding = Coding::of_head(h, request);
                        if acc.coding != Coding::Identity {
                            self.counters.http_inflated_bodies += 1;
                        }
                    }
                    // Without accumulation each packet's body is inspected
                    // on its own.
                    _ => acc.over = true,
                }
            } else if !acc.live {
                // A body whose beginning this instance does not hold (no
                // accumulation, a lost blob, a record of an older version):
                // inspected per packet, as past the limit.
                acc.live = true;
                acc.over = true;
            }
            // The body bytes the prefilter searched on earlier packets
            // (None: search all of the body buffer).
            let searched = (!acc.over && !acc.found_full).then_some(acc.body().len());
            extra.clear();
            let was_limited = acc.limited;
            let mut zfailed = false;
            for r in &pc.body {
                if acc.coding == Coding::Identity || acc.zpass {
                    let past = acc.append(&data[r.clone()], limit);
                    extra.extend_from_slice(past);
                } else {
                    let mut out = std::mem::take(&mut self.http_inflated);
                    out.clear();
                    zfailed |= self.inflate_body(&mut acc, (&canon, d), &data[r.clone()], &mut out);
                    let past = acc.append(&out, limit);
                    extra.extend_from_slice(past);
                    self.http_inflated = out;
                }
            }
            // `http.gzip_decompression_failed`, once per body (Suricata's
            // events are a transaction's set), on the packet whose bytes
            // failed.
            if zfailed && !acc.zevent {
                acc.zevent = true;
                self.counters.http_inflate_failed_events += 1;
                drop |= self.http_body_event(st, d, &hdr, p, events, GZIP_FAILED);
            }
            if st.flags & RANGE_BAD != 0 && pc.body.iter().any(|r| !r.is_empty()) {
                st.flags &= !RANGE_BAD;
                self.counters.http_range_invalid += 1;
                if self.http_range & RANGE_OWED != 0 {
                    st.flags |= OWED_RANGE;
                }
                if self.http_range & RANGE_INVALID != 0 {
                    drop |= self.http_body_event(st, d, &hdr, p, events, RANGE_INVALID);
                }
            }
            if acc.limited && !was_limited {
                self.counters.http_body_limited += 1;
            }
            let fresh = !pc.body.is_empty();
            // The body held so far (lent below, when it is then read as
            // empty).
            let body_len = acc.body().len() + extra.len();
            let has_body = !acc.body().is_empty() || !extra.is_empty();
            let head = if new_msg {
                head
            } else {
                (!acc.head().is_empty()).then_some(acc.head())
            };
            // The kept body is the body buffer: lent to the buffers rather
            // than copied (bytes past the limit follow it, so then copied).
            let lend = extra.is_empty() && !acc.body().is_empty();
            let body = (has_body && !lend).then_some([acc.body(), &extra[..]]);
            // A later packet's head is built only if a rule inspected on it
            // names a head buffer (a sixth of ET Open's body packets on the
            // bench's mix) or it alerts: the head is then in the lent bytes.
            let defer = lend && !new_msg;
            bufs.build_joined(if defer { None } else { head }, body, request);
            let has_head = !acc.head().is_empty();
            if lend {
                let (raw, head, body) = acc.lend();
                bufs.lend_body(raw, body, request);
                if defer && has_head {
                    bufs.defer_head(head, request);
                }
            }
            // All of the packet's bytes are this body's: the body buffer
            // ends with them, and one search covers both.
            // (Not when they are inflated: the body's bytes are others.)
            let whole = acc.coding == Coding::Identity
                && matches!(&pc.body[..], [r] if *r == (0..data.len()));
            let ctx = Msg {
                cont: !new_msg,
                fresh,
                searched,
                joint: (!new_msg && whole).then_some(request),
                has_head,
                done: pc.done,
                // A body read to the connection's close ends with the
                // stream's FIN or reset (`done` then); past the limit each
                // packet's bytes are all.
                body_ready: pc.done || acc.over || body_len >= MIN_INSPECT[usize::from(!request)],
                window: if acc.over {
                    0
                } else {
                    body_window(acc.inspected as usize, body_len, usize::from(!request))
                },
            };
            drop |= self.http_message(
                &mut bufs,
                &mut cands,
                (st, d, &hdr, p),
                events,
                (data, base),
                (&mut acc, ctx),
            );
            if let Some(raw) = bufs.take_lent() {
                acc.give_back(raw);
            }
            // What Suricata counts as inspected: the body at an inspection
            // once it was ready.
            if ctx.body_ready && (ctx.fresh || ctx.done) {
                acc.inspected = u32::try_from(body_len).unwrap_or(u32::MAX);
            }
            // Past the limit only the head and fired rules are kept.
            if acc.over {
                acc.clear_body();
            }
            if pc.done {
                // A body-less response's invalid range raises nothing.
                if !request {
                    st.flags &= !RANGE_BAD;
                }
                if acc.coding != Coding::Identity {
                    self.inflaters.forget(&canon, d);
                }
                acc.reset();
            }
        };
        me.advance(data, request, &mut peer, &mut piece, &mut each);
        if eof {
            me.finish(&mut piece, &mut each);
        }
        // A head begun here and not ended: its transaction begins too.
        if self.http_tx && piece.open.is_some() && !drop && st.flags & (BLOCKED | PASSED) == 0 {
            drop = self.http_begun(st, (d, request), &hdr, p, events);
        }
        if joined {
            self.counters.pending_joined += 1;
        }
        if piece.overflow {
            self.counters.pending_overflow += 1;
        }
        if piece.chunk_invalid && !drop && st.flags & (BLOCKED | PASSED) == 0 {
            let bit = if request {
                REQUEST_CHUNK_LEN
            } else {
                RESPONSE_CHUNK_LEN
            };
            drop = self.http_body_event(st, d, &hdr, p, events, bit);
        }
        // What is pending now: the head these bytes end inside, if its
        // beginning is known (`held` still holds the blob's bytes when the
        // head continues through all of these)...
        let mut kept = 0;
        if let Some(s) = piece.open {
            held.clear();
            held.extend_from_slice(&data[s..]);
        } else if piece.open_cont && cont && !joined {
            held.extend_from_slice(data);
            kept = taken;
        } else {
            held.clear();
        }
        let end = base + data.len() as u64;
        let live = st.flags & (BLOCKED | PASSED) == 0;
        if !held.is_empty() && live {
            self.pend_save(st, d, pending::HTTP, (held, kept), end);
        } else if limit > 0 && live && acc.live && me.in_body() {
            // ...or the body of the message these bytes end inside.
            let kept = acc.encode(&mut held);
            self.pend_save(st, d, pending::HTTP_BODY, (held, kept), end);
        } else if matches!(st.pend[d].kind, pending::HTTP | pending::HTTP_BODY) {
            held.clear();
            st.pend[d] = Pend::default();
            self.pend.put(d, held);
        }
        st.http[d] = me;
        st.http[1 - d] = peer;
        self.http_bufs = bufs;
        self.http_piece = piece;
        self.cands = cands;
        self.http_acc = acc;
        self.http_extra = extra;
        drop
    }

    /// Fires the rules of HTTP body event `bit` ([`Rule::http_body_events`])
    /// on packet `p`: [`REQUEST_CHUNK_LEN`] or [`RESPONSE_CHUNK_LEN`] for
    /// a chunk-size line libhtp calls invalid;
    /// [`GZIP_FAILED`] for `http.gzip_decompression_failed`, a body whose
    /// inflating failed. Returns true if the packet must be dropped.
    /// Rare: kept out of the per-message path it is called from.
    #[cold]
    #[inline(never)]
    fn http_body_event(
        &mut self,
        st: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
        bit: u16,
    ) -> bool {
        self.http_events_fire(st, (d, hdr, p), events, (bit, bit))
    }

    /// Fires on packet `p` of direction `d` the rules of
    /// [`Rule::http_body_events`] naming a bit of `mask`, when every one
    /// they name is in `raised`. Returns true if the packet must be
    /// dropped.
    fn http_events_fire(
        &mut self,
        st: &mut FlowState,
        (d, hdr, p): (usize, &Header, &Packet),
        events: &mut Vec<Event>,
        (mask, raised): (u16, u16),
    ) -> bool {
        for k in 0..self.engine.http_body_ev.len() {
            let r = self.engine.http_body_ev[k];
            let want = self.engine.rules[r as usize].http_body_events & mask;
            if want == 0 || want & !raised != 0 || !self.engine.header_matches(r, hdr) {
                continue;
            }
            if self.fire(r, st, (d, p, Some("http")), events) {
                return true;
            }
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        false
    }

    /// A message of direction `d` (a request if `request`) began on packet
    /// `p`, as libhtp's transactions begin at a message's first byte: a
    /// request counts one more awaiting its response; a response (not the
    /// one after a `100 Continue`, which is the same transaction's) takes
    /// one, or raises `http.unable_to_match_response_to_request` when none
    /// is left (measured against Suricata 7.0.10: each response past the
    /// requests raises it). Past 2 requests awaiting answers the count
    /// stops, and so does the check, for the connection; likewise once the
    /// requests' direction is no longer framed (a gap, a head too long).
    /// Returns true if the packet must be dropped.
    fn http_begun(
        &mut self,
        st: &mut FlowState,
        (d, request): (usize, bool),
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        let n = st.http_cont & PENDING;
        if request {
            if n != PENDING {
                st.http_cont += PENDING_ONE;
            }
            return false;
        }
        if st.http_cont & CONT_SEEN != 0
            || n == PENDING
            || st.http[1 - d].phase == super::Phase::Off
        {
            return false;
        }
        if n != 0 {
            st.http_cont -= PENDING_ONE;
            return false;
        }
        self.counters.http_unmatched_responses += 1;
        self.http_body_event(st, d, hdr, p, events, UNMATCHED)
    }

    /// Fires the `to_server` rules on the Content-Encoding and range events
    /// a response raised ([`crate::engine::OWED`] in `st.flags`) on
    /// packet `p`, the client's next one (`hdr`: as it travels); the
    /// events are then spent. A rule fires when all the events it names
    /// were raised. Returns true if the packet must be dropped.
    #[cold]
    pub(crate) fn http_owed(
        &mut self,
        st: &mut FlowState,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        let owed = st.flags & OWED;
        st.flags &= !OWED;
        let raised = [
            (OWED_TOO_MANY, CE_TOO_MANY),
            (OWED_ABNORMAL, CE_ABNORMAL),
            (OWED_RANGE, RANGE_OWED),
        ]
        .iter()
        .filter(|(f, _)| owed & f != 0)
        .fold(0, |b, (_, bit)| b | bit);
        let hdr = Header { http: true, ..*hdr };
        let mask = CE_TOO_MANY | CE_ABNORMAL | RANGE_OWED;
        self.http_events_fire(st, (0, &hdr, p), events, (mask, raised))
    }

    /// Inflates a compressed body's next bytes `z` into `out`, with the
    /// instance's inflater of that body, or one rebuilt from the
    /// compressed bytes `acc` keeps ([`super::inflate`]). Returns true if
    /// libhtp would have logged a failed inflate on these bytes
    /// ([`Inflater::take_failed`]). A stream that breaks is passed
    /// through from there, as libhtp passes it: its bytes, these included,
    /// are the body as sent ([`BodyAcc::zpass`]).
    fn inflate_body(
        &mut self,
        acc: &mut BodyAcc,
        (canon, d): (&sluice_wire::FlowKey, usize),
        z: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        if acc.zstop {
            return false;
        }
        let mut inf = match self.inflaters.take(canon, d, acc.ztaken) {
            Some(i) => i,
            None if acc.ztaken > acc.z.len() as u64 => {
                // Its start is no longer kept: the body cannot be inflated
                // here.
                self.counters.http_inflate_lost += 1;
                acc.zstop = true;
                return false;
            }
            None => {
                let mut i = Inflater::new(acc.coding);
                if acc.ztaken > 0 {
                    self.counters.http_inflate_rebuilds += 1;
                    let mut again = std::mem::take(&mut self.http_reinflated);
                    again.clear();
                    let r = i.feed(&acc.z, &mut again);
                    self.http_reinflated = again;
                    // Raised when those bytes came.
                    i.take_failed();
                    if r.is_err() {
                        acc.zstop = true;
                        return false;
                    }
                }
                i
            }
        };
        if acc.z.len() + z.len() <= Z_KEPT {
            acc.z.extend_from_slice(z);
        }
        acc.ztaken += z.len() as u64;
        let r = inf.feed(z, out);
        let failed = inf.take_failed();
        match r {
            Ok(()) => self.inflaters.put(canon, d, inf),
            Err(stop) => {
                match stop {
                    Stop::Corrupt => {
                        self.counters.http_inflate_errors += 1;
                        acc.zpass = true;
                        out.extend_from_slice(z);
                    }
                    Stop::Capped => self.counters.http_inflate_capped += 1,
                }
                acc.zstop = true;
            }
        }
        failed
    }

    /// Matches the HTTP rules on one message's buffers `b`.
    fn http_message(
        &mut self,
        b: &mut Buffers,
        cands: &mut Vec<u32>,
        (st, d, hdr, p): (&mut FlowState, usize, &Header, &Packet),
        events: &mut Vec<Event>,
        (data, base): (&[u8], u64),
        (acc, msg): (&mut BodyAcc, Msg),
    ) -> bool {
        cands.clear();
        // The head's buffers are searched unless their finds are known.
        if !(msg.cont && acc.head_known) {
            b.head_ready();
        }
        // The head's finds are remembered with the message's head (to be
        // used on its body's packets) and used on those packets.
        let mut head_rec = std::mem::take(&mut self.http_head_rec);
        head_rec.clear();
        let record = self.prefilter && !msg.cont && msg.has_head;
        if self.prefilter && msg.cont && acc.head_known {
            self.counters.http_head_reused += 1;
        }
        match msg.searched {
            // Every HTTP rule a candidate: what the prefilter must agree with.
            _ if !self.prefilter => cands.extend_from_slice(self.engine.http.all()),
            Some(n) => {
                let mut newly = std::mem::take(&mut self.http_found);
                newly.clear();
                let head = head_finds(msg.cont, acc, &mut head_rec);
                self.engine.http.candidates_after(
                    b,
                    data,
                    (n, msg.cont, head, msg.joint),
                    (&mut self.mpm, cands, &mut newly),
                );
                // Only body rules are inspected on the body's later packets.
                let kinds = &self.http_kind;
                newly.retain(|&r| kinds[r as usize] & BODY != 0);
                acc.note_found(&newly);
                if !acc.found_full {
                    cands.extend_from_slice(&acc.found);
                } else {
                    // Too many to remember: this time the whole body.
                    cands.clear();
                    let head = head_finds(msg.cont, acc, &mut head_rec);
                    self.engine
                        .http
                        .candidates(b, data, (msg.cont, head), &mut self.mpm, cands);
                }
                self.http_found = newly;
            }
            None => {
                let head = head_finds(msg.cont, acc, &mut head_rec);
                self.engine
                    .http
                    .candidates(b, data, (msg.cont, head), &mut self.mpm, cands)
            }
        }
        if record {
            // What the body's packets' search of the head would give: the
            // finds of the rules inspected there.
            let kinds = &self.http_kind;
            head_rec.retain(|&r| kinds[r as usize] != HEAD);
            acc.set_head_found(&head_rec);
        }
        self.http_head_rec = head_rec;
        cands.sort_unstable();
        cands.dedup();
        let mut drop = false;
        let mut dot = std::mem::take(&mut self.http_dot);
        for &rule in cands.iter() {
            let kind = self.http_kind[rule as usize];
            if kind & BODY != 0 {
                // Once per message; on a later packet only when the body
                // grew (the same buffer cannot match anew), or for a rule
                // that waits, when the body became ready.
                let waits = self.http_waits[rule as usize];
                if acc.has_fired(rule)
                    || (waits && !msg.body_ready)
                    || (msg.cont && !msg.fresh && !(waits && msg.done))
                {
                    continue;
                }
            } else if msg.cont && kind & HEAD != 0 {
                // Head rules were inspected with the head.
                continue;
            }
            let r = &self.engine.rules[rule as usize];
            // One alert per matching message (Suricata's per transaction),
            // so pipelined requests in one packet each raise theirs.
            if !self.engine.header_matches(rule, hdr) {
                continue;
            }
            // Every buffer's keywords over that buffer (an absent buffer
            // matches nothing), and keywords before any buffer over the
            // packet's bytes.
            if kind & HEAD != 0 {
                b.head_ready();
            }
            let ok = r.http.iter().all(|l| {
                b.get(l.buf).is_some_and(|buf| {
                    // A body past its first inspection is seen through its
                    // window, positions counted from the body's start.
                    let w = match l.buf {
                        Buf::RequestBody | Buf::ResponseBody | Buf::FileData => {
                            msg.window.min(buf.len())
                        }
                        _ => 0,
                    };
                    list_matches(r, &l.items, &l.xf, &buf[w..], w as u64, &mut dot)
                })
            }) && (r.items.is_empty() || inspect::inspect(r, data, base));
            if !ok {
                continue;
            }
            if kind & BODY != 0 {
                acc.mark(rule);
            }
            // The alert's metadata names the head's fields.
            b.head_ready();
            let from = events.len();
            drop |= self.fire(rule, st, (d, p, Some("http")), events);
            crate::eve_meta::annotate(events, from, || crate::eve_meta::http(b));
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.http_dot = dot;
        drop
    }
}

/// How the prefilter gets the rules of a message's head buffers: on a
/// body's later packet (`cont`) from what `acc` remembers, if it does;
/// else by searching them, recording the finds in `rec`.
fn head_finds<'a>(cont: bool, acc: &'a BodyAcc, rec: &'a mut Vec<u32>) -> HeadFinds<'a> {
    if cont && acc.head_known {
        HeadFinds::Known(&acc.head_found)
    } else {
        HeadFinds::Scan(Some(rec))
    }
}

/// Where a message's piece stands ([`Ips::http_message`]).
#[derive(Clone, Copy)]
struct Msg {
    /// The message's head was inspected on an earlier packet.
    cont: bool,
    /// The piece brought body bytes.
    fresh: bool,
    /// Body bytes whose prefilter finds are in the message's found list.
    searched: Option<usize>,
    /// The packet's bytes are all body bytes of this message, seen
    /// before: its direction (true: a request), for the joint search
    /// ([`super::prefilter::HttpRules::candidates_after`]).
    joint: Option<bool>,
    /// The message's head is known (kept with its body).
    has_head: bool,
    /// The message ends in this piece.
    done: bool,
    /// The body is whole, or big enough, for the rules that wait for it
    /// ([`waits_for_body`]).
    body_ready: bool,
    /// Where the body buffer starts for the body rules ([`body_window`]).
    window: usize,
}

#[cfg(test)]
mod window_tests {
    use super::body_window;

    #[test]
    fn windows_as_suricata_computes_them() {
        // Before an inspection past the minimal size: the whole body.
        assert_eq!(body_window(0, 60_000, 1), 0);
        assert_eq!(body_window(40 * 1024, 60_000, 1), 0);
        // Inspected at 41,000, now 45,000: 4,000 new bytes, under the 16 KiB
        // window, so it reaches back the rest of the window.
        assert_eq!(body_window(41_000, 45_000, 1), 41_000 - (16 * 1024 - 4_000));
        // 20,000 new bytes: a quarter window before them.
        assert_eq!(body_window(41_000, 61_000, 1), 41_000 - 4 * 1024);
        // Requests: 32 KiB and 4 KiB.
        assert_eq!(body_window(33_000, 40_000, 0), 33_000 - 1024);
        assert_eq!(body_window(33_000, 34_000, 0), 33_000 - (4 * 1024 - 1_000));
        // A body shorter than inspected (never, but no underflow).
        assert_eq!(body_window(50_000, 10, 1), 0);
    }
}
