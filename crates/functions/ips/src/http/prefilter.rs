//! Which HTTP rules a message may match ([`BufferRules`]: one matcher per
//! buffer kind, each buffer of the message scanned by its kind's; the
//! packet's stream bytes for fast patterns before any buffer).

use super::{Buf, Buffers, NBUF};
use crate::bufrules::{fast_pattern, BufferRules, Joint, MpmScratch, MpmSet, Where};
use crate::engine::CompileError;
use crate::rules::{Item, Proto, Rule};

/// The prefilter group of buffer `b`: the body buffers hold the same bytes
/// (`file.data` and the direction's body), so they share one automaton.
fn group(b: Buf) -> usize {
    match b {
        Buf::RequestBody | Buf::ResponseBody | Buf::FileData => Buf::FileData as usize,
        _ => b as usize,
    }
}

/// True for the buffers searched as their group's buffer instead.
fn aliased(i: usize) -> bool {
    i == Buf::RequestBody as usize || i == Buf::ResponseBody as usize
}

/// True if buffer `b` can be in a message of the direction `request` says
/// (what [`Buffers::build_joined`] puts there).
pub(crate) fn in_direction(b: Buf, request: bool) -> bool {
    use Buf::*;
    match b {
        Method | Uri | UriRaw | Host | HostRaw | UserAgent | RequestLine | Referer | Accept
        | AcceptEnc | AcceptLang | RequestBody | StartRaw => request,
        StatCode | StatMsg | ResponseLine | Server | Location | ResponseBody | StartRawResponse => {
            !request
        }
        Protocol | Header | HeaderRaw | HeaderNames | Cookie | ContentType | ContentLen
        | Connection | Start | FileData => true,
    }
}

/// Rule `r`'s keyword lists per buffer as the prefilter sees them
/// ([`crate::bufrules::prefilter_list`]).
fn lists(r: &Rule) -> Vec<(usize, &[Item], bool)> {
    r.http
        .iter()
        .map(|l| crate::bufrules::prefilter_list(group(l.buf), &l.items, &l.xf))
        .collect()
}

/// True if rule `r` can match an HTTP message of the direction `request`
/// says: its `flow` direction allows it and every buffer it names can be in
/// such a message (an absent buffer matches nothing).
fn can_match(r: &Rule, request: bool) -> bool {
    r.to_server != Some(!request) && r.http.iter().all(|l| in_direction(l.buf, request))
}

/// The compiled prefilter of the HTTP rules.
#[derive(Default)]
pub struct HttpRules {
    rules: BufferRules,
    /// Per direction (0: requests, 1: responses), for a body's later
    /// packet whose bytes are all body bytes: one search of its body buffer
    /// for the fast patterns of the rules inspected on such packets that
    /// can match a message of that direction, both the body's and the
    /// packet bytes' ([`Joint`]). ET Open's body rules are about half
    /// `to_server`; a response's search leaves them out.
    joint: [Option<Joint>; 2],
}

impl HttpRules {
    /// Compiles the prefilter of the HTTP rules among `rules` (indexed as in
    /// `rules`).
    pub fn new(rules: &[Rule]) -> Result<HttpRules, CompileError> {
        // Rules naming only head buffers are inspected with the head,
        // never on the body's later packets ([`super::eval`]).
        let later = |r: &Rule| super::eval::kind(r) != super::eval::HEAD;
        let all = BufferRules::new(rules, Proto::Http, NBUF, lists, later)?;
        let mut joint: [Option<Joint>; 2] = Default::default();
        for (d, j) in joint.iter_mut().enumerate() {
            let request = d == 0;
            let (mut body, mut payload) = (MpmSet::default(), MpmSet::default());
            for (ri, r) in rules.iter().enumerate() {
                if r.proto != Proto::Http || !later(r) || !can_match(r, request) {
                    continue;
                }
                // The same choice of fast pattern as `BufferRules::new`'s.
                match fast_pattern(r, &lists(r)) {
                    Some((Where::Group(g), bytes, nocase)) if g == Buf::FileData as usize => {
                        body.add(bytes, nocase, ri as u32)
                    }
                    Some((Where::Payload, bytes, nocase)) => payload.add(bytes, nocase, ri as u32),
                    // A head buffer's: found in the head's finds, as before.
                    Some(_) | None => {}
                }
            }
            *j = Joint::build(body, payload)?;
        }
        Ok(HttpRules { rules: all, joint })
    }

    /// The fast patterns a response's (`request` false) or a request's body
    /// packets are searched for, for measuring the search.
    #[cfg(all(test, sluice_vectorscan))]
    pub(crate) fn body_patterns(&self, request: bool) -> Vec<(Vec<u8>, bool)> {
        self.joint[usize::from(!request)]
            .as_ref()
            .map(Joint::patterns)
            .unwrap_or_default()
    }

    /// Number of HTTP rules checked on every message (no content to
    /// prefilter on).
    pub fn unfiltered(&self) -> usize {
        self.rules.unfiltered()
    }

    /// True if there is no HTTP rule (HTTP is then not even parsed).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every HTTP rule, in order: the candidates without the prefilter.
    pub fn all(&self) -> &[u32] {
        self.rules.all()
    }

    /// Pushes to `out` the rules the message whose buffers are `b` may
    /// match, in a packet whose stream bytes are `data`; with `cont` (a
    /// later packet of the message, whose head was inspected before) only
    /// the rules inspected on later packets, plus those without a fast
    /// pattern. `out` may hold a rule more than once.
    ///
    /// `head`: what the head's buffers gave on an earlier packet of the
    /// message ([`HeadFinds`]).
    pub fn candidates(
        &self,
        b: &Buffers,
        data: &[u8],
        (cont, head): (bool, HeadFinds<'_>),
        mpm: &mut MpmScratch,
        out: &mut Vec<u32>,
    ) {
        self.rules.scan_payload(data, cont, mpm, out);
        self.scan_head(b, cont, head, mpm, out);
        let body = Buf::FileData as usize;
        if let Some(buf) = b.span_bytes(body) {
            self.rules.scan_buffer(body, buf, cont, mpm, out);
        }
        out.extend_from_slice(self.rules.always());
    }

    /// Pushes to `out` the rules found in the head's buffers of `b` (all
    /// but the body's), or those `head` remembers.
    fn scan_head(
        &self,
        b: &Buffers,
        cont: bool,
        head: HeadFinds<'_>,
        mpm: &mut MpmScratch,
        out: &mut Vec<u32>,
    ) {
        let record = match head {
            HeadFinds::Known(rules) => {
                out.extend_from_slice(rules);
                return;
            }
            HeadFinds::Scan(record) => record,
        };
        let at = out.len();
        for i in 0..NBUF {
            if aliased(i) || i == Buf::FileData as usize {
                continue;
            }
            if let Some(buf) = b.span_bytes(i) {
                self.rules.scan_buffer(i, buf, cont, mpm, out);
            }
        }
        if let Some(r) = record {
            r.extend_from_slice(&out[at..]);
        }
    }

    /// [`HttpRules::candidates`] (`cont` as there) for a body searched
    /// before up to `searched` bytes: its body buffer is searched only from where a
    /// fast pattern ending in the bytes after `searched` may start, and the
    /// rules found in it are also pushed to `found`; the caller adds those
    /// found in the bytes before.
    ///
    /// `joint`: on a body's later packet (`cont`) whose bytes `data` are
    /// all body bytes, the direction (true: a request); the body buffer
    /// then ends with `data`, and one search of it finds both the body's
    /// and the packet bytes' fast patterns ([`Joint`]), of only the rules
    /// that can match a message of that direction.
    pub fn candidates_after(
        &self,
        b: &Buffers,
        data: &[u8],
        (searched, cont, head, joint): (usize, bool, HeadFinds<'_>, Option<bool>),
        (mpm, out, found): (&mut MpmScratch, &mut Vec<u32>, &mut Vec<u32>),
    ) {
        let body = Buf::FileData as usize;
        let from = searched.saturating_sub(self.rules.max_len(body).saturating_sub(1));
        let span = b.span_bytes(body).map(|buf| &buf[from.min(buf.len())..]);
        let j = joint
            .filter(|_| cont)
            .map(|req| &self.joint[usize::from(!req)]);
        if let (Some(j), Some(buf)) = (j, span.filter(|buf| buf.ends_with(data))) {
            self.scan_head(b, cont, head, mpm, out);
            let at = out.len();
            let mut pay = std::mem::take(&mut mpm.joint);
            pay.clear();
            if let Some(j) = j {
                j.scan(buf, buf.len() - data.len(), mpm, (out, &mut pay));
            }
            found.extend_from_slice(&out[at..]);
            out.extend_from_slice(&pay);
            mpm.joint = pay;
            out.extend_from_slice(self.rules.always());
            return;
        }
        self.rules.scan_payload(data, cont, mpm, out);
        self.scan_head(b, cont, head, mpm, out);
        if let Some(buf) = span {
            let at = out.len();
            self.rules.scan_buffer(body, buf, cont, mpm, out);
            found.extend_from_slice(&out[at..]);
        }
        out.extend_from_slice(self.rules.always());
    }
}

/// The rules a message's head buffers make candidates, which depend on the
/// head's bytes only: found once, at the head, and remembered for the
/// body's later packets ([`super::body::BodyAcc::head_found`]) instead of
/// building and searching the head's buffers again on each.
pub enum HeadFinds<'a> {
    /// Search the head's buffers (pushing what they give to the list too,
    /// if one is given).
    Scan(Option<&'a mut Vec<u32>>),
    /// The head's buffers give these (already filtered as the `cont`
    /// search would be).
    Known(&'a [u32]),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every buffer a message of a direction has is one [`in_direction`]
    /// says it can have (the joint search leaves out the rules naming the
    /// others, so a buffer missing from its direction's list would lose
    /// that rule's alerts); and each side-only buffer is seen on its side.
    #[test]
    fn a_direction_has_only_the_buffers_in_direction_allows() {
        let request = b"POST /a/b?c=d HTTP/1.1\r\nHost: www.example.com:8080\r\n\
            User-Agent: x\r\nCookie: s=1\r\nReferer: http://r/\r\nAccept: */*\r\n\
            Accept-Encoding: gzip\r\nAccept-Language: en\r\nContent-Type: text/plain\r\n\
            Content-Length: 4\r\nConnection: close\r\n\r\n";
        let response = b"HTTP/1.1 302 Found\r\nServer: nginx\r\nLocation: /x\r\n\
            Set-Cookie: s=2\r\nContent-Type: text/html\r\nContent-Length: 4\r\n\
            Connection: close\r\n\r\n";
        let mut seen = [[false; 2]; NBUF];
        for (head, req) in [(&request[..], true), (&response[..], false)] {
            let mut b = Buffers::default();
            b.build_joined(Some(head), Some([b"body", b""]), req);
            for (i, s) in b.spans.iter().enumerate() {
                if s.is_some() {
                    seen[i][usize::from(!req)] = true;
                }
            }
        }
        for (i, s) in seen.iter().enumerate() {
            // Every buffer but the two no keyword names.
            let buf = crate::http::STICKY
                .iter()
                .find(|(_, b)| *b as usize == i)
                .map_or(
                    if i == Buf::StartRaw as usize {
                        Buf::StartRaw
                    } else {
                        Buf::StartRawResponse
                    },
                    |x| x.1,
                );
            assert!(buf as usize == i, "buffer {i} has no keyword");
            for (d, &has) in s.iter().enumerate() {
                let allowed = in_direction(buf, d == 0);
                assert!(!has || allowed, "{buf:?} in direction {d}");
            }
            // The buffers of one side are seen there: the test's heads
            // hold every field.
            assert!(
                s[0] || s[1],
                "{buf:?} in neither message: the heads lack a field"
            );
        }
    }
}
