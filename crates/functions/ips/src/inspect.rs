//! Payload inspection over a buffer, as Suricata's content inspection does
//! it: a rule's payload keywords in rule order, each from the previous match's
//! end where relative, with backtracking — when a relative keyword after a
//! content or `pcre` fails, that content or `pcre` is retried at its next
//! occurrence (bounded by [`STEPS`]).
//!
//! The buffer is a datagram's payload, or a TCP packet's new stream bytes
//! (`base` is the stream position of its first byte, so that `offset`, `depth`
//! and absolute `byte_*`/`isdataat` positions count from the stream start).
//! A DNS rule's `dns.query` keywords are inspected the same way over each
//! query name ([`inspect_items`]). Nothing is allocated: regexes were compiled at load, and PCRE2's match data
//! comes from the regex's own cache.

use crate::rules::payload::{Base64Decode, ByteJump, CmpOp, Extract, Item, Read, Val, MAX_VARS};
use crate::rules::{Content, Rule};

thread_local! {
    /// The bytes `base64_decode` decoded: one buffer per thread, grown to the
    /// largest decoding once (at most 3/4 of `BASE64_DECODE_MAX`) and
    /// reused, so no packet allocates.
    static B64_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Keyword evaluations one inspection may make, backtracking included (as
/// Suricata's `inspection-recursion-limit`): a hostile payload cannot make a
/// rule cost more than this.
pub const STEPS: u32 = 3000;

struct Cx<'a> {
    rule: &'a Rule,
    items: &'a [Item],
    data: &'a [u8],
    base: i64,
    vars: [u64; MAX_VARS],
    steps: u32,
}

/// True if `rule`'s payload keywords match `data`, whose first byte is at
/// stream position `base` (0 for a datagram).
pub fn inspect(rule: &Rule, data: &[u8], base: u64) -> bool {
    inspect_items(rule, &rule.items, data, base)
}

/// True if `items` (one of `rule`'s keyword lists: its payload's or a sticky
/// buffer's) match `data`, whose first byte is at position `base`.
pub fn inspect_items(rule: &Rule, items: &[Item], data: &[u8], base: u64) -> bool {
    let mut cx = Cx {
        rule,
        items,
        data,
        base: base.min(i64::MAX as u64) as i64,
        vars: [0; MAX_VARS],
        steps: STEPS,
    };
    cx.run(0, 0)
}

/// First occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8], nocase: bool) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    if !nocase {
        return memchr::memmem::find(hay, needle);
    }
    let Some(&first) = needle.first() else {
        return Some(0);
    };
    // Only where the first byte matches in either case is the rest compared:
    // comparing every window costs a call per byte of the buffer.
    let (lo, up) = (first.to_ascii_lowercase(), first.to_ascii_uppercase());
    let starts = &hay[..=hay.len() - needle.len()];
    let mut at = 0;
    while at < starts.len() {
        let rel = if lo == up {
            memchr::memchr(lo, &starts[at..])
        } else {
            memchr::memchr2(lo, up, &starts[at..])
        }?;
        let i = at + rel;
        if hay[i..i + needle.len()].eq_ignore_ascii_case(needle) {
            return Some(i);
        }
        at = i + 1;
    }
    None
}

impl Item {
    /// True if the keyword is positioned from the previous match.
    fn relative(&self, rule: &Rule) -> bool {
        match self {
            Item::Content(k) => rule.contents[*k as usize].is_relative(),
            Item::Pcre(p) => p.relative,
            Item::ByteTest(t) => t.ex.relative,
            Item::ByteJump(j) => j.ex.relative,
            Item::ByteExtract(e) => e.ex.relative,
            Item::ByteMath(m) => m.ex.relative,
            Item::IsDataAt(d) => d.relative,
            Item::Bsize(_) | Item::HttpEvent(_) | Item::Dataset(_) => false,
            Item::Asn1(a) => a.relative_offset.is_some(),
            Item::Base64Decode(d) => d.relative,
        }
    }
}

impl Cx<'_> {
    fn val(&self, v: Val) -> i64 {
        match v {
            Val::Lit(n) => n,
            Val::Var(i) => self.vars[i as usize & (MAX_VARS - 1)] as i64,
        }
    }

    fn next_relative(&self, i: usize) -> bool {
        self.items.get(i + 1).is_some_and(|n| n.relative(self.rule))
    }

    /// Evaluates items `i..` with the previous match ending at `prev`.
    fn run(&mut self, i: usize, prev: usize) -> bool {
        let rule = self.rule;
        let Some(item) = self.items.get(i) else {
            return true;
        };
        if self.steps == 0 {
            return false;
        }
        self.steps -= 1;
        match item {
            Item::Content(k) => self.content(i, &rule.contents[*k as usize], prev),
            Item::Pcre(p) => {
                let start = if p.relative { prev } else { 0 };
                let subject = &self.data[start.min(self.data.len())..];
                if p.negate {
                    return !p.re.0.is_match(subject).unwrap_or(false) && self.run(i + 1, prev);
                }
                let mut from = 0;
                while from <= subject.len() {
                    let m = match p.re.0.find_at(subject, from) {
                        Ok(Some(m)) => m,
                        _ => return false,
                    };
                    if self.run(i + 1, start + m.end()) {
                        return true;
                    }
                    if !self.next_relative(i) || self.steps == 0 {
                        return false;
                    }
                    from = m.start() + 1;
                }
                false
            }
            Item::ByteTest(t) => {
                let Some((v, _)) = self.read(&t.ex, prev) else {
                    return false;
                };
                let x = self.val(t.value) as u64;
                let ok = match t.op {
                    CmpOp::Lt => v < x,
                    CmpOp::Gt => v > x,
                    CmpOp::Eq => v == x,
                    CmpOp::Le => v <= x,
                    CmpOp::Ge => v >= x,
                    CmpOp::And => v & x != 0,
                    CmpOp::Xor => v ^ x != 0,
                };
                ok != t.negate && self.run(i + 1, prev)
            }
            Item::ByteJump(j) => match self.jump(j, prev) {
                Some(np) => self.run(i + 1, np),
                None => false,
            },
            Item::ByteExtract(e) => {
                let Some((mut v, after)) = self.read(&e.ex, prev) else {
                    return false;
                };
                v = v.wrapping_mul(e.multiplier);
                if e.align > 0 {
                    let a = e.align as u64;
                    v = v.wrapping_add(a - 1) / a * a;
                }
                self.vars[e.var as usize & (MAX_VARS - 1)] = v;
                self.run(i + 1, after)
            }
            Item::ByteMath(m) => {
                // More than 4 binary bytes: loaded, never matched
                // (Suricata 7).
                if m.ex.nbytes > 4 && !matches!(m.ex.read, Read::Str(_)) {
                    return false;
                }
                let Some((v, after)) = self.read(&m.ex, prev) else {
                    return false;
                };
                let Some(v) = m.apply(v, self.val(m.rvalue) as u64) else {
                    return false;
                };
                self.vars[m.var as usize & (MAX_VARS - 1)] = v;
                self.run(i + 1, after)
            }
            Item::IsDataAt(d) => {
                // A variable of 100,000,000 or more is no data there
                // (Suricata's bound; a wrapped subtraction is one).
                if let Val::Var(v) = d.n {
                    if self.vars[v as usize & (MAX_VARS - 1)] >= 100_000_000 {
                        return d.negate && self.run(i + 1, prev);
                    }
                }
                let n = self.val(d.n);
                let len = self.data.len() as i64;
                let there = if d.relative {
                    (prev as i64).saturating_add(n) <= len
                } else {
                    n.saturating_sub(self.base) < len
                };
                there != d.negate && self.run(i + 1, prev)
            }
            Item::Bsize(c) => {
                // The whole buffer's size: a window's bytes and those
                // before it (Suricata's `inspect_offset`).
                let len =
                    u32::try_from(self.data.len() as i64 + self.base.max(0)).unwrap_or(u32::MAX);
                c.matches(len) && self.run(i + 1, prev)
            }
            Item::HttpEvent(e) => e.raised(self.data) && self.run(i + 1, prev),
            Item::Asn1(a) => a.matches(self.data, prev) && self.run(i + 1, prev),
            Item::Base64Decode(d) => self.base64(d, prev),
            Item::Dataset(d) => {
                // The whole buffer (a window's bytes for a body in parts).
                if !d.deferred {
                    return d.check(rule.sid, self.data) && self.run(i + 1, prev);
                }
                // A value seen on a path that then fails is not the rule's.
                let mark = crate::dataset::seen_mark();
                if d.check(rule.sid, self.data) && self.run(i + 1, prev) {
                    return true;
                }
                crate::dataset::seen_truncate(mark);
                false
            }
        }
    }

    /// `base64_decode` then the rule's `base64_data` keywords over the
    /// decoded bytes (positions from their start), as Suricata's
    /// `DetectBase64DecodeDoMatch`: from the buffer start or (`relative`)
    /// the previous match's end, `offset` further (no match if that is not
    /// before the end), at most `bytes` encoded bytes. Terminal: nothing of
    /// the original buffer follows. Decoding costs one step per 256 encoded
    /// bytes on top of the keyword's (bounded work under backtracking).
    fn base64(&mut self, d: &Base64Decode, prev: usize) -> bool {
        let start = if d.relative { prev } else { 0 };
        let rest = self.data.len().saturating_sub(start);
        if d.offset as usize >= rest && (d.offset > 0 || rest == 0) {
            return false;
        }
        let from = start + d.offset as usize;
        let to = from + (rest - d.offset as usize).min(d.bytes as usize);
        let input = &self.data[from..to];
        let cost = (input.len() / 256) as u32;
        if cost >= self.steps {
            self.steps = 0;
            return false;
        }
        self.steps -= cost;
        B64_SCRATCH.with(|scratch| {
            // The `base64_data` list holds no `base64_decode` (refused at
            // load), so the scratch is never borrowed twice.
            let Ok(mut out) = scratch.try_borrow_mut() else {
                return false;
            };
            if crate::rules::payload::base64_decode_into(input, &mut out) == 0 {
                return false;
            }
            inspect_items(self.rule, &self.rule.base64, &out, 0)
        })
    }

    /// A content: its window, then each occurrence in it until the rest of the
    /// rule matches (or, for a negated content, that there is none).
    fn content(&mut self, i: usize, c: &Content, prev: usize) -> bool {
        let len = self.data.len() as i64;
        let clen = c.bytes.len() as i64;
        let (mut lo, mut hi) = (0i64, len);
        if c.startswith {
            lo = -self.base;
            hi = lo.saturating_add(clen);
        } else if c.is_relative() {
            let dist = match c.vars.distance {
                Some(v) => self.val(Val::Var(v)),
                None => c.distance.unwrap_or(0) as i64,
            };
            lo = (prev as i64).saturating_add(dist);
            let within = match c.vars.within {
                Some(v) => Some(self.val(Val::Var(v))),
                None => c.within.map(|w| w as i64),
            };
            if let Some(w) = within {
                hi = lo.saturating_add(w);
            }
        } else if c.is_absolute() {
            let off = match c.vars.offset {
                Some(v) => self.val(Val::Var(v)),
                None => c.offset.unwrap_or(0) as i64,
            };
            lo = off.saturating_sub(self.base);
            let depth = match c.vars.depth {
                Some(v) => Some(self.val(Val::Var(v))),
                None => c.depth.map(|d| d as i64),
            };
            if let Some(d) = depth {
                hi = lo.saturating_add(d);
            }
        }
        if c.endswith {
            lo = lo.max(len - clen);
        }
        let lo = lo.clamp(0, len) as usize;
        let hi = hi.clamp(0, len) as usize;
        if c.negated {
            let found = lo < hi && find(&self.data[lo..hi], &c.bytes, c.nocase).is_some();
            return !found && self.run(i + 1, prev);
        }
        let mut from = lo;
        while from < hi {
            let Some(at) = find(&self.data[from..hi], &c.bytes, c.nocase) else {
                return false;
            };
            let start = from + at;
            let end = start + c.bytes.len();
            if c.endswith && end != self.data.len() {
                return false;
            }
            if self.run(i + 1, end) {
                return true;
            }
            // Another occurrence only helps a keyword placed relative to this
            // one (Suricata's rule).
            if !self.next_relative(i) || self.steps == 0 {
                return false;
            }
            from = start + 1;
        }
        false
    }

    /// The number `ex` reads and the position after the bytes read.
    fn read(&self, ex: &Extract, prev: usize) -> Option<(u64, usize)> {
        let off = self.val(ex.offset);
        let pos = if ex.relative {
            (prev as i64).saturating_add(off)
        } else {
            off.saturating_sub(self.base)
        };
        if pos < 0 || pos as u64 > self.data.len() as u64 {
            return None;
        }
        let pos = pos as usize;
        // 0 bytes of a string: up to 20 digits, to the buffer's end.
        let n = match (ex.nbytes, ex.read) {
            (0, Read::Str(_)) => (self.data.len() - pos).min(20),
            (n, _) => n as usize,
        };
        if pos + n > self.data.len() || n == 0 {
            return None;
        }
        let b = &self.data[pos..pos + n];
        let mut end = pos + n;
        let mut v: u64 = match ex.read {
            Read::Big => b.iter().fold(0u64, |a, &x| (a << 8) | x as u64),
            Read::Little => b.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64),
            Read::Str(radix) => {
                let (v, used) = strtoull(b, radix)?;
                end = pos + used;
                v
            }
        };
        if let Some(m) = ex.bitmask {
            v = (v & m) >> m.trailing_zeros();
        }
        Some((v, end))
    }

    /// Where `byte_jump` lands (Suricata's detect-bytejump.c arithmetic).
    fn jump(&self, j: &ByteJump, prev: usize) -> Option<usize> {
        let (v, after) = self.read(&j.ex, prev)?;
        let mut v = v.checked_mul(j.multiplier)?;
        if j.align && v % 4 != 0 {
            v = v.checked_add(4 - v % 4)?;
        }
        let v = i64::try_from(v).ok()?.checked_add(j.post_offset)?;
        let len = self.data.len() as i64;
        let at = if j.from_beginning {
            v.saturating_sub(self.base)
        } else if j.from_end {
            len.saturating_add(v)
        } else {
            (after as i64).saturating_add(v)
        };
        if at > len {
            return None;
        }
        Some(at.max(0) as usize)
    }
}

/// C's `strtoull(b, &end, radix)` as Suricata's string reads call it: the
/// value and the bytes it read, or `None` when no digit was read or the
/// value overflows. Leading whitespace and a sign are read (a `-` negates,
/// wrapping), and in base 16 an `0x` before the digits.
fn strtoull(b: &[u8], radix: u32) -> Option<(u64, usize)> {
    let mut i = b
        .iter()
        .take_while(|c| c.is_ascii_whitespace() || **c == 0x0b)
        .count();
    let neg = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digit = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(radix));
    if radix == 16
        && matches!(b.get(i..i + 2), Some(b"0x" | b"0X"))
        && digit(b.get(i + 2)).is_some()
    {
        i += 2;
    }
    let start = i;
    let mut v: u64 = 0;
    while let Some(d) = digit(b.get(i)) {
        v = v.checked_mul(radix as u64)?.checked_add(d as u64)?;
        i += 1;
    }
    if i == start {
        return None;
    }
    Some((if neg { v.wrapping_neg() } else { v }, i))
}

#[cfg(test)]
mod strtoull_tests {
    use super::strtoull;

    #[test]
    fn reads_as_c_does() {
        assert_eq!(strtoull(b"12KB", 10), Some((12, 2)));
        assert_eq!(strtoull(b" 42", 10), Some((42, 3)));
        assert_eq!(strtoull(b"0x1234", 16), Some((0x1234, 6)));
        assert_eq!(strtoull(b"0xg", 16), Some((0, 1)));
        assert_eq!(strtoull(b"ff", 16), Some((255, 2)));
        assert_eq!(strtoull(b"-1", 10), Some((u64::MAX, 2)));
        assert_eq!(strtoull(b"+7", 8), Some((7, 2)));
        assert_eq!(strtoull(b"x1", 10), None);
        assert_eq!(strtoull(b" ", 10), None);
        assert_eq!(strtoull(b"99999999999999999999999", 10), None);
    }
}

#[cfg(test)]
mod find_tests {
    use super::find;

    /// The plain definition `find` must agree with.
    fn naive(hay: &[u8], needle: &[u8], nocase: bool) -> Option<usize> {
        (0..=hay.len().checked_sub(needle.len())?).find(|&i| {
            let w = &hay[i..i + needle.len()];
            if nocase {
                w.eq_ignore_ascii_case(needle)
            } else {
                w == needle
            }
        })
    }

    #[test]
    fn agrees_with_the_definition() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // A small alphabet with both cases and a non-letter, so matches,
        // near misses and case variants are frequent.
        let alpha = b"aAbB1";
        for _ in 0..20_000 {
            let hn = (next() % 24) as usize;
            let nn = 1 + (next() % 4) as usize;
            let hay: Vec<u8> = (0..hn).map(|_| alpha[(next() % 5) as usize]).collect();
            let needle: Vec<u8> = (0..nn).map(|_| alpha[(next() % 5) as usize]).collect();
            for nocase in [false, true] {
                assert_eq!(
                    find(&hay, &needle, nocase),
                    naive(&hay, &needle, nocase),
                    "{hay:?} {needle:?} {nocase}"
                );
            }
        }
        assert_eq!(find(b"xx", b"", true), Some(0));
        assert_eq!(find(b"GET /", b"get", true), Some(0));
        assert_eq!(find(b"a-Get", b"gEt", true), Some(2));
    }
}
