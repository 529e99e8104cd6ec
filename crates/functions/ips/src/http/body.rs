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
//! [head_len u32][head][body]`, integers little-endian. A blob written
//! before the head's finds were kept has no HEAD_KNOWN flag, and the head is
//! then searched on each packet, as it was.
//!
//! The body is kept up to the configured limit (`http_body_limit`, Suricata's
//! `request-body-limit`/`response-body-limit`, default [`DEFAULT_LIMIT`]).
//! Past it ([`BodyAcc::over`]) the kept body is dropped and each packet's body
//! bytes are inspected on their own (a content split across segments there
//! is missed; Suricata does not inspect past its limit at all), still once
//! per rule and message.

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
pub const MAX_BLOB: usize = 8
    + 4 * MAX_FIRED
    + 4 * MAX_FOUND
    + 4 * MAX_HEAD_FOUND
    + super::MAX_HEAD as usize
    + MAX_LIMIT as usize;

/// Flag: the body went past the limit.
const OVER: u8 = 1;
/// Flag: more than [`MAX_FOUND`] rules were found in the body.
const FOUND_FULL: u8 = 2;
/// Flag: `head_found` is the complete list of the head's finds.
const HEAD_KNOWN: u8 = 4;

/// The accumulated state of the message being received in a direction.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BodyAcc {
    /// This describes the message being framed (set at its head, or when
    /// read back from the store).
    pub live: bool,
    /// The body went past the limit: `body` is empty and each packet's body
    /// bytes are inspected on their own.
    pub over: bool,
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
    /// The message's head (empty when it was not seen).
    pub head: Vec<u8>,
    /// The body so far, at most the limit.
    pub body: Vec<u8>,
}

impl BodyAcc {
    /// Forgets the message (buffers kept).
    pub fn reset(&mut self) {
        self.live = false;
        self.over = false;
        self.fired.clear();
        self.found.clear();
        self.found_full = false;
        self.head_found.clear();
        self.head_known = false;
        self.head.clear();
        self.body.clear();
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
            + self.head.len()
            + self.body.len()
    }

    /// Writes the blob into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.encoded_len());
        let flags = if self.over { OVER } else { 0 }
            | if self.found_full { FOUND_FULL } else { 0 }
            | if self.head_known { HEAD_KNOWN } else { 0 };
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
        out.extend_from_slice(&(self.head.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.body);
    }

    /// Reads a blob [`encode`](BodyAcc::encode) wrote; an error names what
    /// does not fit.
    pub fn decode(&mut self, b: &[u8]) -> Result<(), &'static str> {
        self.reset();
        let (&flags, rest) = b.split_first().ok_or("empty http body blob")?;
        if flags & !(OVER | FOUND_FULL | HEAD_KNOWN) != 0 {
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
        if h > rest.len() || h > super::MAX_HEAD as usize {
            return Err("http body blob head out of bounds");
        }
        self.head.extend_from_slice(&rest[..h]);
        self.body.extend_from_slice(&rest[h..]);
        self.over = flags & OVER != 0;
        self.found_full = flags & FOUND_FULL != 0;
        self.head_known = flags & HEAD_KNOWN != 0;
        self.live = true;
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
    /// part past the limit (all of it once the body is over the limit).
    pub fn append<'a>(&mut self, bytes: &'a [u8], limit: usize) -> &'a [u8] {
        if self.over {
            return bytes;
        }
        let room = limit.saturating_sub(self.body.len());
        let n = room.min(bytes.len());
        self.body.extend_from_slice(&bytes[..n]);
        if n < bytes.len() {
            self.over = true;
        }
        &bytes[n..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_round_trips_and_rejects_garbage() {
        let mut a = BodyAcc {
            live: true,
            over: false,
            fired: vec![3, 70000],
            found: vec![9],
            found_full: false,
            head_found: vec![],
            head_known: false,
            head: b"POST / HTTP/1.1\r\n\r\n".to_vec(),
            body: b"abc".to_vec(),
        };
        let mut blob = Vec::new();
        a.encode(&mut blob);
        assert_eq!(blob.len(), a.encoded_len());
        let mut b = BodyAcc::default();
        b.decode(&blob).unwrap();
        assert_eq!(a, b);
        // Without the head's finds the layout is the one written before
        // they were kept, so such a blob still reads (head not known).
        assert_eq!(blob[0] & HEAD_KNOWN, 0);
        assert_eq!(blob[1], 2, "the fired rules' count right after the flags");
        a.set_head_found(&[7, 5, 7, 1 << 20]);
        assert!(a.head_known);
        assert_eq!(a.head_found, [5, 7, 1 << 20]);
        a.encode(&mut blob);
        assert_eq!(blob.len(), a.encoded_len());
        b.decode(&blob).unwrap();
        assert_eq!(a, b);
        // An empty list known is not the same as none known.
        a.set_head_found(&[]);
        assert!(a.head_known);
        a.encode(&mut blob);
        b.decode(&blob).unwrap();
        assert_eq!(a, b);
        // Too many to remember: the head is searched again.
        let many: Vec<u32> = (0..MAX_HEAD_FOUND as u32 + 1).collect();
        a.set_head_found(&many);
        assert!(!a.head_known && a.head_found.is_empty());
        a.over = true;
        a.body.clear();
        a.encode(&mut blob);
        b.decode(&blob).unwrap();
        assert_eq!(a, b);
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
            assert!(b.decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn append_stops_at_the_limit() {
        let mut a = BodyAcc::default();
        assert_eq!(a.append(b"abcd", 6), b"");
        assert_eq!(a.append(b"efgh", 6), b"gh");
        assert!(a.over);
        assert_eq!(a.body, b"abcdef");
        assert_eq!(a.append(b"ij", 6), b"ij");
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
