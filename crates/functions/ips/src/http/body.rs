//! The body of the HTTP message a direction is receiving, accumulated so
//! that body rules (`http.request_body`, `http.response_body`, `file_data`)
//! inspect the body so far, as Suricata inspects its body buffer: a content
//! split across TCP segments of the body is found.
//!
//! While a message's body arrives over several packets it waits, with the
//! message's head (so rules naming head buffers and the body match when the
//! body comes later) and the body rules already fired on the message (so the
//! growing buffer, inspected again on each packet, raises each rule once per
//! message, Suricata's once per transaction), as the direction's pending
//! blob ([`crate::pending::HTTP_BODY`]). So that a packet's re-inspection
//! does not search the whole body again for the prefilter's contents, the
//! blob also lists the rules the prefilter found in the body so far (up to
//! [`MAX_FOUND`]; past that the whole body is searched on each packet): a
//! packet then searches only its new body bytes, from where a content
//! ending in them may start. Likewise the rules the prefilter found in the
//! message's head buffers (those inspected on the body's packets, up to
//! [`MAX_HEAD_FOUND`]), so the head is not searched again on each body
//! packet: they depend on the head's bytes only. Layout:
//! `[flags u8][nfired u8][nfired × rule u32][nfound u8][nfound × rule u32]
//! ([nhead u8][nhead × rule u32] with flag HEAD_KNOWN)
//! [head_len u32]([inspected u32] with flag INSPECTED)
//! ([compression fields] with flag ZIP)[head][body]`, integers little-endian. A blob written
//! before the head's finds were kept has no HEAD_KNOWN flag, and the head is
//! then searched on each packet, as it was.
//!
//! The body is kept up to the configured limit (`http_body_limit`, Suricata's
//! `request-body-limit`/`response-body-limit`, default [`DEFAULT_LIMIT`]).
//! As in Suricata, the bytes past it are not inspected ([`BodyAcc::limited`]):
//! the body up to the limit is inspected as the message's whole body, then
//! the kept body is dropped. A body whose start this instance does not hold
//! (a lost blob, no accumulation) has each packet's body bytes inspected on
//! their own ([`BodyAcc::over`]).

/// Body rules remembered per message as fired; past this, a further body
/// rule that fires may fire again on a later packet of the message.
pub const MAX_FIRED: usize = 32;
/// Rules the prefilter found in a body remembered per message; past this
/// the body is searched whole on each packet.
pub const MAX_FOUND: usize = 64;
/// Rules the prefilter found in a message's head remembered for its body's
/// packets; past this the head is searched again on each.
pub const MAX_HEAD_FOUND: usize = 64;
/// Default body limit: 100 KiB, Suricata's default `request-body-limit` and
/// `response-body-limit`.
pub const DEFAULT_LIMIT: u32 = 100 * 1024;
/// The largest limit a configuration may set (16 MiB), so a stored blob's
/// length can be checked.
pub const MAX_LIMIT: u32 = 16 * 1024 * 1024;
/// The largest blob: flags, the fired rules, the head and the body.
pub const MAX_BLOB: usize = 12
    + 14
    + super::inflate::Z_KEPT
    + 4 * MAX_FIRED
    + 4 * MAX_FOUND
    + 4 * MAX_HEAD_FOUND
    + super::MAX_HEAD as usize
    + MAX_LIMIT as usize;

/// Flag: the body went past the limit.
const OVER: u8 = 1;
/// Flag: more than [`MAX_FOUND`] rules were found in the body.
const FOUND_FULL: u8 = 2;
/// Flag: the body reached the limit (`over` for that reason): what follows
/// it is not inspected.
const LIMITED: u8 = 16;
/// Flag: a body inspection happened past the minimal inspect size; its
/// length (u32) follows the head's ([`BodyAcc::inspected`]).
const INSPECTED: u8 = 32;
/// Flag: `head_found` is the complete list of the head's finds.
const HEAD_KNOWN: u8 = 4;
/// Flag: the body is compressed; its coding and compressed bytes follow the
/// head's length ([`super::inflate`]).
const ZIP: u8 = 8;

/// The accumulated state of the message being received in a direction.
///
/// The head and the body live in one buffer, `raw`, from `at` on: the blob
/// as read from the store, decoded in place (its fields before `at`), so a
/// body packet neither copies the body out of the blob nor back in when
/// the fields did not change ([`BodyAcc::decode`], [`BodyAcc::encode`]);
/// the blob used to be copied twice more per packet, whole, up to the body
/// limit.
#[derive(Debug, Default, Clone)]
pub struct BodyAcc {
    /// This describes the message being framed (set at its head, or when
    /// read back from the store).
    pub live: bool,
    /// The body went past the limit, or its start is not held: `body` is
    /// empty and each packet's body bytes are inspected on their own.
    pub over: bool,
    /// The body reached the limit: the bytes past it are not inspected, as
    /// Suricata stores no body past its `request-body-limit` /
    /// `response-body-limit`.
    pub limited: bool,
    /// The body's length at its last inspection once it was ready
    /// (Suricata's `body_inspected`): past the minimal inspect size, later
    /// inspections see a window of the body from near there
    /// ([`super::eval::body_window`]).
    pub inspected: u32,
    /// Body rules that fired on this message.
    pub fired: Vec<u32>,
    /// Rules the prefilter found in the body so far.
    pub found: Vec<u32>,
    /// More than [`MAX_FOUND`] were: `found` is incomplete.
    pub found_full: bool,
    /// The rules inspected on the body's packets that the prefilter found
    /// in the message's head buffers, when `head_known`.
    pub head_found: Vec<u32>,
    /// `head_found` is complete: the head's buffers need not be searched.
    pub head_known: bool,
    /// The encoded fields (up to `at`), the head, the body so far.
    raw: Vec<u8>,
    /// Where the head begins in `raw`.
    at: usize,
    /// The head's length.
    head_len: usize,
    /// How many of `raw`'s first bytes are still the blob
    /// [`decode`](BodyAcc::decode) took (0 when it holds no decoded blob).
    intact: usize,
    /// Scratch space for the fields when encoding.
    fields: Vec<u8>,
    /// `at` and `head_len` while `raw` is lent ([`BodyAcc::lend`]).
    lent: (usize, usize),
    /// The body's content coding: not identity, its bytes are inflated
    /// before they are kept ([`super::inflate`]).
    pub coding: super::inflate::Coding,
    /// The compressed bytes so far, up to [`super::inflate::Z_KEPT`]: what
    /// rebuilds the inflater on an instance without it.
    pub z: Vec<u8>,
    /// Compressed bytes seen in all.
    pub ztaken: u64,
    /// Inflating stopped (a corrupt stream, the inflated size's cap, or an
    /// inflater that cannot be rebuilt): later body bytes are not kept,
    /// unless passed through (`zpass`).
    pub zstop: bool,
    /// The stream broke (with `zstop`): the body's bytes from there on are
    /// kept as sent, as libhtp passes a stream it cannot inflate through.
    pub zpass: bool,
    /// `http.gzip_decompression_failed` was raised on this body.
    pub zevent: bool,
}

/// Equal when they describe the same message state, wherever the bytes sit.
impl PartialEq for BodyAcc {
    fn eq(&self, o: &BodyAcc) -> bool {
        self.live == o.live
            && self.over == o.over
            && self.limited == o.limited
            && self.inspected == o.inspected
            && self.fired == o.fired
            && self.found == o.found
            && self.found_full == o.found_full
            && self.head_found == o.head_found
            && self.head_known == o.head_known
            && self.head() == o.head()
            && self.body() == o.body()
            && self.coding == o.coding
            && self.z == o.z
            && self.ztaken == o.ztaken
            && self.zstop == o.zstop
            && self.zpass == o.zpass
            && self.zevent == o.zevent
    }
}

impl Eq for BodyAcc {}

impl BodyAcc {
    /// Forgets the message (buffers kept).
    pub fn reset(&mut self) {
        self.live = false;
        self.over = false;
        self.limited = false;
        self.inspected = 0;
        self.fired.clear();
        self.found.clear();
        self.found_full = false;
        self.head_found.clear();
        self.head_known = false;
        self.raw.clear();
        self.at = 0;
        self.head_len = 0;
        self.intact = 0;
        self.coding = super::inflate::Coding::Identity;
        self.z.clear();
        self.ztaken = 0;
        self.zstop = false;
        self.zpass = false;
        self.zevent = false;
    }

    /// The message's head (empty when it was not seen).
    pub fn head(&self) -> &[u8] {
        &self.raw[self.at..self.at + self.head_len]
    }

    /// The body so far, at most the limit.
    pub fn body(&self) -> &[u8] {
        &self.raw[self.at + self.head_len..]
    }

    /// Lends the buffer holding the head and the body, as (buffer, where
    /// the head is in it, where the body is), until [`BodyAcc::give_back`]: the message's body
    /// buffer is then these bytes where it used to be a copy of them, up to
    /// the limit per packet ([`super::Buffers::lend_body`]). Meanwhile the
    /// head and the body read as empty.
    pub fn lend(&mut self) -> (Vec<u8>, std::ops::Range<usize>, std::ops::Range<usize>) {
        let head = self.at..self.at + self.head_len;
        let body = head.end..self.raw.len();
        self.lent = (self.at, self.head_len);
        self.at = 0;
        self.head_len = 0;
        (std::mem::take(&mut self.raw), head, body)
    }

    /// Takes back the buffer [`BodyAcc::lend`] lent, unchanged.
    pub fn give_back(&mut self, raw: Vec<u8>) {
        self.raw = raw;
        (self.at, self.head_len) = self.lent;
    }

    /// Sets the message's head, forgetting any body.
    pub fn set_head(&mut self, head: &[u8]) {
        self.raw.clear();
        self.intact = 0;
        self.at = 0;
        self.raw.extend_from_slice(head);
        self.head_len = head.len();
    }

    /// Forgets the body kept so far (the head stays).
    pub fn clear_body(&mut self) {
        self.raw.truncate(self.at + self.head_len);
        self.intact = self.intact.min(self.raw.len());
    }

    /// Writes the fields before the head into `out` (cleared first).
    fn encode_fields(&self, out: &mut Vec<u8>) {
        out.clear();
        let zip = self.coding != super::inflate::Coding::Identity;
        let flags = if self.over { OVER } else { 0 }
            | if self.found_full { FOUND_FULL } else { 0 }
            | if self.head_known { HEAD_KNOWN } else { 0 }
            | if zip { ZIP } else { 0 }
            | if self.limited { LIMITED } else { 0 }
            | if self.inspected > 0 { INSPECTED } else { 0 };
        out.push(flags);
        let head = self.head_known.then_some(&self.head_found);
        for list in [Some(&self.fired), Some(&self.found), head]
            .into_iter()
            .flatten()
        {
            out.push(list.len() as u8);
            for r in list {
                out.extend_from_slice(&r.to_le_bytes());
            }
        }
        out.extend_from_slice(&(self.head_len as u32).to_le_bytes());
        if self.inspected > 0 {
            out.extend_from_slice(&self.inspected.to_le_bytes());
        }
        if zip {
            out.push(self.coding.code());
            out.push(u8::from(self.zstop) | u8::from(self.zpass) << 1 | u8::from(self.zevent) << 2);
            out.extend_from_slice(&self.ztaken.to_le_bytes());
            out.extend_from_slice(&(self.z.len() as u32).to_le_bytes());
            out.extend_from_slice(&self.z);
        }
    }

    /// Bytes [`encode`](BodyAcc::encode) writes.
    pub fn encoded_len(&self) -> usize {
        7 + 4 * self.fired.len()
            + 4 * self.found.len()
            + if self.head_known {
                1 + 4 * self.head_found.len()
            } else {
                0
            }
            + if self.inspected > 0 { 4 } else { 0 }
            + if self.coding != super::inflate::Coding::Identity {
                14 + self.z.len()
            } else {
                0
            }
            + self.raw.len()
            - self.at
    }

    /// Moves the blob into `out` (its bytes replaced) and forgets the
    /// message, as [`reset`](BodyAcc::reset). When the fields are those the
    /// blob was decoded with, the buffer itself moves: no byte of the head
    /// or the body is copied. Returns how many of `out`'s first bytes are
    /// the blob [`decode`](BodyAcc::decode) took (the body only grew since):
    /// the store needs only the bytes after them.
    pub fn encode(&mut self, out: &mut Vec<u8>) -> usize {
        let mut fields = std::mem::take(&mut self.fields);
        self.encode_fields(&mut fields);
        let mut kept = 0;
        if self.raw[..self.at] == fields[..] {
            kept = if self.intact >= self.at {
                self.intact
            } else {
                0
            };
            std::mem::swap(out, &mut self.raw);
        } else {
            out.clear();
            out.reserve(fields.len() + self.raw.len() - self.at);
            out.extend_from_slice(&fields);
            out.extend_from_slice(&self.raw[self.at..]);
        }
        self.fields = fields;
        self.reset();
        kept
    }

    /// Reads a blob [`encode`](BodyAcc::encode) wrote, taking its buffer
    /// (`b` is left empty, holding this accumulator's old buffer); an error
    /// names what does not fit, and leaves `b` as it was.
    pub fn decode(&mut self, b: &mut Vec<u8>) -> Result<(), &'static str> {
        self.reset();
        let (&flags, rest) = b.split_first().ok_or("empty http body blob")?;
        if flags & !(OVER | FOUND_FULL | HEAD_KNOWN | ZIP | LIMITED | INSPECTED) != 0 {
            return Err("malformed http body blob");
        }
        let mut rest = rest;
        let head = (flags & HEAD_KNOWN != 0).then_some((&mut self.head_found, MAX_HEAD_FOUND));
        let lists = [
            Some((&mut self.fired, MAX_FIRED)),
            Some((&mut self.found, MAX_FOUND)),
            head,
        ];
        for (list, max) in lists.into_iter().flatten() {
            let (&n, tail) = rest.split_first().ok_or("http body blob too short")?;
            if n as usize > max {
                return Err("malformed http body blob");
            }
            rest = tail;
            for _ in 0..n {
                let (r, tail) = rest
                    .split_first_chunk::<4>()
                    .ok_or("http body blob too short")?;
                list.push(u32::from_le_bytes(*r));
                rest = tail;
            }
        }
        let (h, rest) = rest
            .split_first_chunk::<4>()
            .ok_or("http body blob too short")?;
        let h = u32::from_le_bytes(*h) as usize;
        let mut rest = rest;
        let mut inspected = 0;
        if flags & INSPECTED != 0 {
            let (n, tail) = rest
                .split_first_chunk::<4>()
                .ok_or("http body blob too short")?;
            inspected = u32::from_le_bytes(*n);
            rest = tail;
        }
        if flags & ZIP != 0 {
            let (&[c, stop], tail) = rest
                .split_first_chunk::<2>()
                .ok_or("http body blob too short")?;
            let coding = super::inflate::Coding::from_code(c)
                .filter(|c| *c != super::inflate::Coding::Identity)
                .ok_or("malformed http body blob")?;
            let (t, tail) = tail
                .split_first_chunk::<8>()
                .ok_or("http body blob too short")?;
            let (n, tail) = tail
                .split_first_chunk::<4>()
                .ok_or("http body blob too short")?;
            let n = u32::from_le_bytes(*n) as usize;
            let ztaken = u64::from_le_bytes(*t);
            if n > super::inflate::Z_KEPT
                || n > tail.len()
                || (n as u64) > ztaken
                || stop > 7
                || stop & 3 == 2
            {
                return Err("http body blob compressed bytes out of bounds");
            }
            self.coding = coding;
            self.zstop = stop & 1 != 0;
            self.zpass = stop & 2 != 0;
            self.zevent = stop & 4 != 0;
            self.ztaken = ztaken;
            self.z.extend_from_slice(&tail[..n]);
            rest = &tail[n..];
        }
        if h > rest.len() || h > super::MAX_HEAD as usize {
            self.coding = super::inflate::Coding::Identity;
            self.z.clear();
            return Err("http body blob head out of bounds");
        }
        let at = b.len() - rest.len();
        self.over = flags & OVER != 0;
        self.limited = flags & LIMITED != 0;
        self.inspected = inspected;
        self.found_full = flags & FOUND_FULL != 0;
        self.head_known = flags & HEAD_KNOWN != 0;
        self.live = true;
        std::mem::swap(&mut self.raw, b);
        b.clear();
        self.at = at;
        self.head_len = h;
        self.intact = self.raw.len();
        Ok(())
    }

    /// True if body rule `rule` fired on this message.
    pub fn has_fired(&self, rule: u32) -> bool {
        self.fired.contains(&rule)
    }

    /// Remembers that body rule `rule` fired on this message (up to
    /// [`MAX_FIRED`]).
    pub fn mark(&mut self, rule: u32) {
        if self.fired.len() < MAX_FIRED && !self.has_fired(rule) {
            self.fired.push(rule);
        }
    }

    /// Remembers the rules of `rules` (the prefilter's finds in the body's
    /// new bytes); past [`MAX_FOUND`] the list is marked incomplete.
    pub fn note_found(&mut self, rules: &[u32]) {
        for &r in rules {
            if self.found_full || self.found.contains(&r) {
                continue;
            }
            if self.found.len() == MAX_FOUND {
                self.found_full = true;
                self.found.clear();
            } else {
                self.found.push(r);
            }
        }
    }

    /// Remembers `rules` (the head buffers' finds of the rules inspected on
    /// the body's packets, in any order, repeats allowed) as the complete
    /// list, unless they are more than [`MAX_HEAD_FOUND`].
    pub fn set_head_found(&mut self, rules: &[u32]) {
        self.head_found.clear();
        self.head_found.extend_from_slice(rules);
        self.head_found.sort_unstable();
        self.head_found.dedup();
        self.head_known = self.head_found.len() <= MAX_HEAD_FOUND;
        if !self.head_known {
            self.head_found.clear();
        }
    }

    /// Keeps `bytes` (the next body bytes) up to `limit` in all; returns the
    /// bytes to inspect on their own: none past the limit (Suricata does
    /// not inspect them), all of them when the body's start is not held
    /// (`over` without `limited`).
    pub fn append<'a>(&mut self, bytes: &'a [u8], limit: usize) -> &'a [u8] {
        if self.limited {
            return &[];
        }
        if self.over {
            return bytes;
        }
        let room = limit.saturating_sub(self.body().len());
        let n = room.min(bytes.len());
        self.raw.extend_from_slice(&bytes[..n]);
        if n < bytes.len() {
            self.over = true;
            self.limited = true;
            return &[];
        }
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_round_trips_and_rejects_garbage() {
        let mut a = BodyAcc {
            live: true,
            inspected: 41_000,
            limited: true,
            over: true,
            fired: vec![3, 70000],
            found: vec![9],
            ..BodyAcc::default()
        };
        a.set_head(b"POST / HTTP/1.1\r\n\r\n");
        assert_eq!(a.append(b"abc", 100), b"");
        // Encoding forgets the message: round trips go through a copy.
        let enc = |a: &BodyAcc, blob: &mut Vec<u8>| {
            let want = a.encoded_len();
            a.clone().encode(blob);
            assert_eq!(blob.len(), want);
        };
        let mut blob = Vec::new();
        enc(&a, &mut blob);
        let mut b = BodyAcc::default();
        b.decode(&mut blob.clone()).unwrap();
        assert_eq!(a, b);
        // Without the head's finds the layout is the one written before
        // they were kept, so such a blob still reads (head not known).
        assert_eq!(blob[0] & HEAD_KNOWN, 0);
        assert_eq!(blob[1], 2, "the fired rules' count right after the flags");
        a.set_head_found(&[7, 5, 7, 1 << 20]);
        assert!(a.head_known);
        assert_eq!(a.head_found, [5, 7, 1 << 20]);
        enc(&a, &mut blob);
        b.decode(&mut blob.clone()).unwrap();
        assert_eq!(a, b);
        // An empty list known is not the same as none known.
        a.set_head_found(&[]);
        assert!(a.head_known);
        enc(&a, &mut blob);
        b.decode(&mut blob.clone()).unwrap();
        assert_eq!(a, b);
        // Too many to remember: the head is searched again.
        let many: Vec<u32> = (0..MAX_HEAD_FOUND as u32 + 1).collect();
        a.set_head_found(&many);
        assert!(!a.head_known && a.head_found.is_empty());
        a.over = true;
        a.clear_body();
        enc(&a, &mut blob);
        b.decode(&mut blob.clone()).unwrap();
        assert_eq!(a, b);
        // A compressed body keeps its coding and compressed bytes.
        a.coding = crate::http::inflate::Coding::Gzip;
        a.z = vec![0x1f, 0x8b, 8, 0, 1, 2, 3];
        a.ztaken = 9000;
        enc(&a, &mut blob);
        b.decode(&mut blob.clone()).unwrap();
        assert_eq!(a, b);
        assert_eq!(blob[0] & ZIP, ZIP);
        a.zstop = true;
        enc(&a, &mut blob);
        b.decode(&mut blob.clone()).unwrap();
        assert_eq!(a, b);
        // Passed through and the event raised: kept too.
        a.zpass = true;
        a.zevent = true;
        enc(&a, &mut blob);
        b.decode(&mut blob.clone()).unwrap();
        assert_eq!(a, b);
        let sat = blob.len() - a.head().len() - a.z.len() - 4 - 8 - 1;
        assert_eq!(blob[sat], 7);
        // Passed through without having stopped, or an unknown bit: refused.
        for stop in [2, 6, 8] {
            let mut bad = blob.clone();
            bad[sat] = stop;
            assert!(b.decode(&mut bad).is_err(), "stop bits {stop}");
        }
        a.zpass = false;
        a.zevent = false;
        enc(&a, &mut blob);
        // Compressed bytes past what the blob holds, or more than seen.
        let zat = blob.len() - a.head().len() - a.z.len() - 4 - 8 - 2;
        let mut bad = blob.clone();
        bad[zat] = 9;
        assert!(b.decode(&mut bad).is_err());
        let mut bad = blob.clone();
        bad[zat + 2..zat + 10].copy_from_slice(&3u64.to_le_bytes());
        assert!(b.decode(&mut bad).is_err());
        let mut bad = blob.clone();
        bad.truncate(zat + 12);
        assert!(b.decode(&mut bad).is_err());
        a.coding = crate::http::inflate::Coding::Identity;
        a.z.clear();
        a.ztaken = 0;
        a.zstop = false;
        for bad in [
            &[][..],
            &[0],
            &[8, 0, 0, 0, 0, 0, 0],
            &[4, 0, 0, 0, 0, 0, 0],
            &[4, 0, 0, 65, 0, 0, 0, 0],
            &[0, 1, 0],
            &[0, 0, 0, 9, 0, 0, 0],
            &[0, 0, 65, 0, 0, 0, 0],
        ] {
            let mut v = bad.to_vec();
            assert!(b.decode(&mut v).is_err(), "{bad:?}");
            assert_eq!(v, bad, "a blob refused is left as it was");
        }
    }

    /// A body packet's round trip: decoded in place, a body packet's bytes
    /// appended, encoded with the same fields, the blob's own buffer moves
    /// back (no copy) and holds the blob a copy would have written; with
    /// changed fields (a rule fired) the blob is written anew, and reads
    /// back the same.
    #[test]
    fn a_body_packet_moves_the_blob_without_copying_it() {
        let mut a = BodyAcc {
            live: true,
            found: vec![4],
            ..BodyAcc::default()
        };
        a.set_head(b"HTTP/1.1 200 OK\r\n\r\n");
        a.append(b"<html>", 1000);
        let mut blob = Vec::new();
        a.clone().encode(&mut blob);
        let mut b = BodyAcc::default();
        let mut held = blob.clone();
        held.reserve(4096);
        let buf = held.as_ptr();
        b.decode(&mut held).unwrap();
        assert!(held.is_empty());
        assert_eq!(b.append(b"<body>", 1000), b"");
        a.append(b"<body>", 1000);
        assert_eq!(b, a);
        let mut want = Vec::new();
        a.clone().encode(&mut want);
        let kept = b.encode(&mut held);
        assert_eq!(held, want);
        assert_eq!(held.as_ptr(), buf, "the same buffer, not a copy");
        // The blob as stored, then only the new body bytes: an append.
        assert_eq!(kept, blob.len());
        assert_eq!(&held[kept..], b"<body>");
        assert_eq!(b, BodyAcc::default(), "encoding forgets the message");
        // A rule fired: the fields grow, the blob is rewritten.
        b.decode(&mut held).unwrap();
        b.mark(9);
        a.mark(9);
        let mut out = Vec::new();
        let want_len = b.encoded_len();
        assert_eq!(b.encode(&mut out), 0, "fields changed: written whole");
        assert_eq!(out.len(), want_len);
        let mut c = BodyAcc::default();
        c.decode(&mut out).unwrap();
        assert_eq!(c, a);
        assert_eq!(c.body(), b"<html><body>");
        // Past the limit the body is dropped: only the fields and the head
        // are still as stored, and the fields change (the flag), so whole.
        let mut blob = Vec::new();
        c.clone().encode(&mut blob);
        let mut d = BodyAcc::default();
        d.decode(&mut blob).unwrap();
        d.append(&[b'x'; 64], 16);
        d.clear_body();
        let mut out = Vec::new();
        assert_eq!(d.encode(&mut out), 0);
        // A new message's head replaces the blob: nothing kept.
        let mut blob = Vec::new();
        c.clone().encode(&mut blob);
        d.decode(&mut blob).unwrap();
        d.set_head(b"HTTP/1.1 204 No Content\r\n\r\n");
        d.live = true;
        assert_eq!(d.encode(&mut out), 0);
    }

    #[test]
    fn append_stops_at_the_limit() {
        let mut a = BodyAcc::default();
        assert_eq!(a.append(b"abcd", 6), b"");
        // Past the limit nothing is inspected (Suricata stores no more).
        assert_eq!(a.append(b"efgh", 6), b"");
        assert!(a.over && a.limited);
        assert_eq!(a.body(), b"abcdef");
        assert_eq!(a.append(b"ij", 6), b"");
        // A body whose start is not held: each packet's bytes on their own.
        let mut b = BodyAcc {
            over: true,
            ..BodyAcc::default()
        };
        assert_eq!(b.append(b"ij", 6), b"ij");
        a.mark(1);
        a.mark(1);
        assert_eq!(a.fired, vec![1]);
        a.note_found(&[5, 5, 6]);
        assert_eq!(a.found, vec![5, 6]);
        let many: Vec<u32> = (0..MAX_FOUND as u32 + 1).collect();
        a.note_found(&many);
        assert!(a.found_full && a.found.is_empty());
    }
}
