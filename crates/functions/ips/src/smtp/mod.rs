//! `file_data` on `smtp` rules: the decoded bytes of each attachment of the
//! mail a client sends, as Suricata inspects them (ET Open's rules on
//! Ghostscript, Zimbra and Barracuda exploits mailed as attachments).
//!
//! On a flow detected as SMTP ([`crate::applayer`]), the client's stream
//! bytes go through [`mime::Reader`], which finds the messages (`DATA`,
//! `BDAT`), their MIME parts and which are attachments, and decodes those
//! (base64, quoted-printable). Each attachment's bytes accumulate up to
//! [`LIMIT`] (Suricata's SMTP `content-limit` default), and on each packet
//! that adds to them the `smtp` rules on `file_data` are inspected over the
//! attachment so far, so a content split across segments, base64 lines or
//! both is found. Past the limit each packet's decoded bytes are inspected
//! on their own (`ips_smtp_over_limit`). A rule raises one alert per mail
//! (Suricata's once per transaction), whichever of its attachments match.
//!
//! # State
//!
//! Like every other byte of per-flow state, the reader and the attachment
//! so far live in the store: the client direction's pending blob
//! ([`crate::pending::SMTP`], read in the batch's pending round trip only
//! for flows that have one), laid out as `[reader]` ([`mime::Reader::encode`],
//! 25 bytes plus the partial line, header field and boundaries it holds)
//! `[flags u8][nfired u8][nfired × rule u32][attachment bytes]`. Between
//! messages, at a command line's start, nothing is kept. A gap in the
//! client's stream drops the blob: the reader restarts at a command line,
//! and the rest of a message being read is not inspected (counted in
//! `ips_pending_discarded`).
//!
//! The server's replies are not read ([`mime`] says why that reads every
//! message the server accepts).

pub mod mime;

use sluice_nf::{Event, Packet};

use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::{inspect, pending, Ips};

/// Bytes of an attachment inspected whole: Suricata's default SMTP
/// `content-limit`.
pub const LIMIT: usize = 100_000;
/// Rules remembered as fired on a mail; past this, a further rule may fire
/// again on a later packet of the mail.
pub const MAX_FIRED: usize = 32;
/// The largest blob.
pub const MAX_BLOB: usize = mime::MAX_ENCODED + 2 + 4 * MAX_FIRED + LIMIT;

/// Flag: the attachment went past [`LIMIT`].
const OVER: u8 = 1;

/// A client direction's SMTP state as its blob holds it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Blob {
    reader: mime::Reader,
    over: bool,
    fired: Vec<u32>,
    file: Vec<u8>,
}

impl Blob {
    fn decode(b: &[u8]) -> Result<Blob, sluice_state::DecodeError> {
        let mut r = sluice_state::Reader::new(b);
        let reader = mime::Reader::decode(&mut r)?;
        let flags = r.u8()?;
        let n = r.u8()? as usize;
        if n > MAX_FIRED {
            return Err(sluice_state::DecodeError("smtp: too many fired rules"));
        }
        let fired = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
        let file = r.rest().to_vec();
        if file.len() > LIMIT {
            return Err(sluice_state::DecodeError("smtp: attachment over its limit"));
        }
        Ok(Blob {
            reader,
            over: flags & OVER != 0,
            fired,
            file,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let mut w = sluice_state::Writer::new(out);
        self.reader.encode(&mut w);
        w.u8(if self.over { OVER } else { 0 })
            .u8(self.fired.len() as u8);
        for &f in &self.fired {
            w.u32(f);
        }
        w.bytes(&self.file);
    }

    /// Nothing worth keeping: a reader at a command line's start.
    fn idle(&self) -> bool {
        self.reader.is_idle() && self.fired.is_empty()
    }
}

impl Ips {
    /// The client's new stream bytes `data` (at stream position `base`) on
    /// a flow detected as SMTP: read for attachments, over which the `smtp`
    /// rules on `file_data` are inspected. Returns true if the packet must
    /// be dropped.
    pub(crate) fn smtp_stream(
        &mut self,
        st: &mut FlowState,
        (d, hdr): (usize, &Header),
        p: &Packet,
        events: &mut Vec<Event>,
        (data, base): (&[u8], u64),
    ) -> bool {
        if self.engine.smtp_files.is_empty() || d != 0 || st.app != crate::applayer::SMTP {
            return false;
        }
        let cont = self.pend_ok(st, d, pending::SMTP, base);
        if !cont {
            // Another parser's unit (the first bytes of `EHLO` read as a
            // DNS length), or an SMTP blob these bytes do not continue.
            let ours = st.pend[d].kind == pending::SMTP;
            self.pend_drop(st, d, ours);
        }
        let mut raw = if cont { self.pend.take(d) } else { Vec::new() };
        let mut blob = if raw.is_empty() {
            Blob::default()
        } else {
            Blob::decode(&raw).unwrap_or_else(|_| {
                self.counters.smtp_corrupt += 1;
                Blob::default()
            })
        };
        // Whether an attachment was open before these bytes.
        let mut open = blob.reader.in_file();
        let mut out = std::mem::take(&mut self.smtp_out);
        out.clear();
        blob.reader.feed(data, &mut out);
        self.counters.smtp_mime_anomalies += u64::from(out.anomalies);
        // The packet's decoded bytes, between the marks: each region
        // belongs to the attachment open there, if any.
        let mut at = 0;
        let mut drop = false;
        let ends = out
            .marks
            .iter()
            .copied()
            .chain(std::iter::once((out.bytes.len(), mime::Mark::Message)));
        let n = out.marks.len();
        for (i, (pos, mark)) in ends.enumerate() {
            if open && pos > at {
                drop |= self.smtp_inspect(&mut blob, &out.bytes[at..pos], st, (d, hdr, p), events);
            }
            at = pos;
            if i == n {
                break;
            }
            match mark {
                mime::Mark::Start => {
                    open = true;
                    blob.file.clear();
                    blob.over = false;
                    self.counters.smtp_attachments += 1;
                }
                mime::Mark::End => {
                    open = false;
                    blob.file.clear();
                    blob.over = false;
                }
                mime::Mark::Message => blob.fired.clear(),
            }
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.smtp_out = out;
        if blob.idle() {
            if st.pend[d].kind == pending::SMTP {
                st.pend[d] = pending::Pend::default();
            }
            raw.clear();
            self.pend.put(d, raw);
        } else {
            raw.clear();
            blob.encode(&mut raw);
            self.pend_save(st, d, pending::SMTP, (raw, 0), base + data.len() as u64);
        }
        drop
    }

    /// Adds `new` to the attachment and inspects the rules not fired on the
    /// mail yet over it.
    fn smtp_inspect(
        &mut self,
        blob: &mut Blob,
        new: &[u8],
        st: &mut FlowState,
        (d, hdr, p): (usize, &Header, &Packet),
        events: &mut Vec<Event>,
    ) -> bool {
        if !blob.over && blob.file.len() + new.len() > LIMIT {
            blob.over = true;
            blob.file.clear();
            self.counters.smtp_over_limit += 1;
        }
        if !blob.over {
            blob.file.extend_from_slice(new);
        }
        let mut drop = false;
        for i in 0..self.engine.smtp_files.len() {
            let rule = self.engine.smtp_files[i];
            if blob.fired.contains(&rule)
                || self.has_fired(rule)
                || !self.engine.header_matches(rule, hdr)
            {
                continue;
            }
            let r = &self.engine.rules[rule as usize];
            let items = r.smtp_file.as_deref().unwrap_or_default();
            let buf = if blob.over { new } else { &blob.file[..] };
            if !inspect::inspect_items(r, items, buf, 0) {
                continue;
            }
            if blob.fired.len() < MAX_FIRED {
                blob.fired.push(rule);
            }
            drop |= self.fire(rule, st, (d, p, Some("smtp")), events);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        drop
    }
}
