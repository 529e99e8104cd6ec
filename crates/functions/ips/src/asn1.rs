//! The `asn1` keyword: decodes BER objects from a position in the buffer and
//! matches if one of them, or an object nested in one, shows an anomaly the
//! rule names, as Suricata's `asn1` does:
//!
//! * `oversize_length N`: an object's length is over `N`;
//! * `bitstring_overflow`: a primitive universal BIT STRING whose unused-bits
//!   count is more than its bits;
//! * `double_overflow`: a primitive universal REAL over 256 bytes in decimal
//!   encoding (the MSASN1 overflow ET's NTLMSSP rules look for).
//!
//! Decoding starts at the buffer's start, at `absolute_offset N`, or at
//! `relative_offset N` from the previous match's end (no match if that is
//! outside the buffer or past 65,535), and reads top-level objects until one
//! does not decode; more than [`MAX_FRAMES`] of them, or nesting deeper than
//! that, is no match at all. The decoder checks structure (tags, definite
//! and indefinite lengths, nesting) but not each type's contents, so a few
//! malformed objects Suricata's decoder refuses (a BOOLEAN of two bytes) are
//! read here; a BIT STRING needs its unused-bits byte.

use crate::rules::RuleSyntax;

/// Objects (top-level, and levels of nesting) decoded at most.
pub const MAX_FRAMES: usize = 30;

/// The `asn1` keyword's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Asn1 {
    /// `bitstring_overflow`.
    pub bitstring_overflow: bool,
    /// `double_overflow`.
    pub double_overflow: bool,
    /// `oversize_length N`.
    pub oversize_length: Option<u32>,
    /// `absolute_offset N`.
    pub absolute_offset: Option<u16>,
    /// `relative_offset N` (may be negative).
    pub relative_offset: Option<i32>,
}

impl Asn1 {
    /// Parses `asn1`'s value: options separated by commas.
    pub fn parse(v: &str) -> Result<Asn1, RuleSyntax> {
        let bad = || RuleSyntax::BadValue {
            keyword: "asn1".into(),
            value: v.into(),
        };
        let mut a = Asn1::default();
        for opt in v.split(',').map(str::trim) {
            let mut w = opt.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                (Some("bitstring_overflow"), None, _) => a.bitstring_overflow = true,
                (Some("double_overflow"), None, _) => a.double_overflow = true,
                (Some("oversize_length"), Some(n), None) => {
                    a.oversize_length = Some(n.parse().map_err(|_| bad())?)
                }
                (Some("absolute_offset"), Some(n), None) => {
                    a.absolute_offset = Some(n.parse().map_err(|_| bad())?)
                }
                (Some("relative_offset"), Some(n), None) => {
                    a.relative_offset = Some(n.parse().map_err(|_| bad())?)
                }
                _ => return Err(bad()),
            }
        }
        let checks = a.bitstring_overflow || a.double_overflow || a.oversize_length.is_some();
        if !checks || (a.absolute_offset.is_some() && a.relative_offset.is_some()) {
            return Err(bad());
        }
        Ok(a)
    }

    /// True if decoding `buf` from the keyword's position (`prev`: the
    /// previous match's end) finds an anomaly it names.
    pub fn matches(&self, buf: &[u8], prev: usize) -> bool {
        let at = match (self.absolute_offset, self.relative_offset) {
            (Some(a), _) => a as i64,
            (None, Some(r)) => prev as i64 + r as i64,
            (None, None) => 0,
        };
        if !(0..=u16::MAX as i64).contains(&at) || at as usize >= buf.len() {
            return false;
        }
        let mut rest = &buf[at as usize..];
        let mut frames = 0;
        let mut hit = false;
        while !rest.is_empty() {
            if frames >= MAX_FRAMES {
                return false;
            }
            match self.object(rest, MAX_FRAMES) {
                Some((used, h)) => {
                    hit |= h;
                    rest = &rest[used..];
                    frames += 1;
                }
                None => break,
            }
        }
        hit
    }

    /// Decodes the object `b` starts with: its length in bytes and whether
    /// it or an object in it shows an anomaly; `None` if it does not decode
    /// (or nests deeper than `depth`).
    fn object(&self, b: &[u8], depth: usize) -> Option<(usize, bool)> {
        if depth == 0 {
            return None;
        }
        let id = *b.first()?;
        let (universal, constructed) = (id >> 6 == 0, id & 0x20 != 0);
        let mut i = 1;
        let mut tag = (id & 0x1f) as u32;
        if tag == 0x1f {
            // High tag number: base 128, at most four bytes.
            tag = 0;
            loop {
                let c = *b.get(i)?;
                i += 1;
                tag = tag.checked_mul(128)? | (c & 0x7f) as u32;
                if c & 0x80 == 0 {
                    break;
                }
                if i > 5 {
                    return None;
                }
            }
        }
        let l = *b.get(i)?;
        i += 1;
        let len = match l {
            0..=0x7f => Some(l as usize),
            0x80 => None,
            0xff => return None,
            _ => {
                let n = (l & 0x7f) as usize;
                if n > 8 {
                    return None;
                }
                let mut v: u64 = 0;
                for k in 0..n {
                    v = v << 8 | *b.get(i + k)? as u64;
                }
                i += n;
                Some(usize::try_from(v).ok()?)
            }
        };
        let (content, used, mut hit) = match len {
            Some(n) => {
                let end = i.checked_add(n)?;
                let c = b.get(i..end)?;
                let mut hit = false;
                if constructed {
                    let mut r = c;
                    while !r.is_empty() {
                        let (u, h) = self.object(r, depth - 1)?;
                        hit |= h;
                        r = &r[u..];
                    }
                }
                (c, end, hit)
            }
            // Indefinite: constructed only, children up to end-of-contents.
            None if constructed => {
                let mut j = i;
                let mut hit = false;
                loop {
                    if b.get(j..j + 2)? == [0, 0] {
                        break;
                    }
                    let (u, h) = self.object(&b[j..], depth - 1)?;
                    hit |= h;
                    j += u;
                }
                (&b[i..j], j + 2, hit)
            }
            None => return None,
        };
        if let Some(max) = self.oversize_length {
            hit |= content.len() > max as usize;
        }
        if universal && !constructed {
            match tag {
                // BIT STRING: the first byte counts the unused bits.
                3 => {
                    let (&bits, _) = content.split_first()?;
                    hit |= self.bitstring_overflow && bits as usize > content.len() * 8;
                }
                // REAL, decimal encoding (NR forms), over 256 bytes.
                9 => {
                    hit |= self.double_overflow
                        && content.first().is_some_and(|c| c & 0xc0 == 0)
                        && content.len() > 256;
                }
                _ => {}
            }
        }
        Some((used, hit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &str) -> Asn1 {
        Asn1::parse(v).unwrap()
    }

    /// X.690's example (Appendix A.3): a 136-byte record of nested strings.
    const A3: &[u8] =
        b"\x60\x81\x85\x61\x10\x1a\x04John\x1a\x01P\x1a\x05Smith\xa0\x0a\x1a\x08Director\
        \x42\x01\x33\xa1\x0a\x43\x0819710917\xa2\x12\x61\x10\x1a\x04Mary\x1a\x01T\x1a\x05Smith\
        \xa3\x42\x31\x1f\x61\x11\x1a\x05Ralph\x1a\x01T\x1a\x05Smith\xa0\x0a\x43\x0819571111\
        \x31\x1f\x61\x11\x1a\x05Susan\x1a\x01B\x1a\x05Jones\xa0\x0a\x43\x0819590717";

    #[test]
    fn options_parse_and_bad_ones_are_named() {
        assert_eq!(
            a("double_overflow, bitstring_overflow, relative_offset 54, oversize_length 2048"),
            Asn1 {
                bitstring_overflow: true,
                double_overflow: true,
                oversize_length: Some(2048),
                absolute_offset: None,
                relative_offset: Some(54),
            }
        );
        assert_eq!(
            a("oversize_length 1, relative_offset -3").relative_offset,
            Some(-3)
        );
        for bad in [
            "",
            "absolute_offset 0",
            "oversize_length",
            "oversize_length x",
            "bitstring_overflow, absolute_offset 1, relative_offset 1",
            "absolute_offset 70000, double_overflow",
            "nonsense",
        ] {
            assert!(Asn1::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_anomaly_and_its_near_miss() {
        // The record's outer length is 133: over 132, not over 133.
        assert_eq!(A3.len(), 136);
        assert!(a("oversize_length 132, absolute_offset 0").matches(A3, 0));
        assert!(!a("oversize_length 133, absolute_offset 0").matches(A3, 0));
        // A one-byte BIT STRING ignoring 255 bits; ignoring 7 is fine.
        assert!(a("bitstring_overflow").matches(b"\x03\x01\xff", 0));
        assert!(!a("bitstring_overflow").matches(b"\x03\x01\x07", 0));
        // Nested in a SEQUENCE, and after another object.
        assert!(a("bitstring_overflow").matches(b"\x02\x01\x05\x30\x03\x03\x01\xff", 0));
        // A decimal REAL of 257 bytes; of 256 it is not.
        let real = |n: usize| {
            let mut b = vec![0x09, 0x82, (n >> 8) as u8, n as u8];
            b.resize(4 + n, 0x05);
            b
        };
        assert!(a("double_overflow").matches(&real(257), 0));
        assert!(!a("double_overflow").matches(&real(256), 0));
        // Binary encoding (first byte 0x80) is not the decimal one.
        let mut bin = real(300);
        bin[4] = 0x80;
        assert!(!a("double_overflow").matches(&bin, 0));
        // Indefinite lengths nest too.
        assert!(a("bitstring_overflow").matches(b"\x30\x80\x03\x01\xff\x00\x00", 0));
    }

    #[test]
    fn offsets_truncation_and_bounds() {
        let bits = b"junk\x03\x01\xff";
        // From the buffer start the junk does not decode: nothing found.
        assert!(!a("bitstring_overflow").matches(bits, 0));
        assert!(a("bitstring_overflow, absolute_offset 4").matches(bits, 0));
        assert!(a("bitstring_overflow, relative_offset 2").matches(bits, 2));
        assert!(a("bitstring_overflow, relative_offset -2").matches(bits, 6));
        assert!(!a("bitstring_overflow, relative_offset -7").matches(bits, 6));
        assert!(!a("bitstring_overflow, absolute_offset 7").matches(bits, 0));
        // A truncated object, or one claiming more than there is, is no match.
        assert!(!a("bitstring_overflow").matches(b"\x30\x05\x03\x01\xff", 0));
        assert!(!a("oversize_length 1").matches(b"\x04\x84\xff\xff\xff\xffab", 0));
        // More than thirty objects: no match at all, as in Suricata.
        let mut many = b"\x05\x00".repeat(MAX_FRAMES);
        many.extend_from_slice(b"\x03\x01\xff");
        assert!(!a("bitstring_overflow").matches(&many, 0));
        let mut ok = b"\x05\x00".repeat(MAX_FRAMES - 1);
        ok.extend_from_slice(b"\x03\x01\xff");
        assert!(a("bitstring_overflow").matches(&ok, 0));
        // Thirty levels of nesting decode; thirty-one do not.
        let nested = |levels: usize| {
            let mut o = vec![0x03, 0x01, 0xff];
            for _ in 1..levels {
                let mut s = vec![0x30, 0x82, (o.len() >> 8) as u8, o.len() as u8];
                s.extend_from_slice(&o);
                o = s;
            }
            o
        };
        assert!(a("bitstring_overflow").matches(&nested(MAX_FRAMES), 0));
        assert!(!a("bitstring_overflow").matches(&nested(MAX_FRAMES + 1), 0));
        // Garbage never panics.
        let mut g = 0x9e37_79b9u32;
        for _ in 0..2000 {
            let n = (g % 40) as usize;
            let v: Vec<u8> = (0..n)
                .map(|_| {
                    g ^= g << 13;
                    g ^= g >> 17;
                    g ^= g << 5;
                    g as u8
                })
                .collect();
            let _ = a("bitstring_overflow, double_overflow, oversize_length 3").matches(&v, 0);
        }
    }
}
