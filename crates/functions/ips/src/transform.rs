//! Suricata's transforms: keywords right after a sticky buffer that turn
//! its bytes into something else before the buffer's keywords inspect them
//! (`http.uri; to_lowercase; content:"/admin";`). They chain, in the order
//! the rule gives them.
//!
//! Each transform is applied as Suricata 7 applies it, quirks included:
//! `compress_whitespace` keeps the first byte of a run of whitespace (not a
//! space), `url_decode` leaves a `%` not followed by two hex digits as it is
//! and turns `+` into a space, `pcrexform` leaves the buffer alone when its
//! expression does not match. Whitespace is C's `isspace()` (space, `\t`,
//! `\n`, `\v`, `\f`, `\r`).
//!
//! A content the transformed buffer can never hold makes the rule refused,
//! as Suricata refuses it (`content:"Admin"` after `to_lowercase`), so an
//! operator learns of the dead rule at load time ([`Transforms::validate`]).
//!
//! The buffers a prefilter searches are not transformed: a content after a
//! transform other than `dotprefix` is not a fast pattern
//! ([`Transforms::prefilterable`]), and a rule with no other is inspected on
//! every message of its protocol.

use std::sync::Arc;

use md5::Digest as _;

use crate::rules::payload::Regex;

/// One transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transform {
    /// `dotprefix`: a `.` before the buffer.
    DotPrefix,
    /// `strip_whitespace`: every whitespace byte removed.
    StripWhitespace,
    /// `compress_whitespace`: each run of whitespace cut to its first byte.
    CompressWhitespace,
    /// `to_lowercase`: ASCII letters in lower case.
    ToLowercase,
    /// `to_uppercase`: ASCII letters in upper case.
    ToUppercase,
    /// `to_md5`: the buffer's MD5 digest (16 raw bytes).
    ToMd5,
    /// `to_sha1`: its SHA-1 digest (20 raw bytes).
    ToSha1,
    /// `to_sha256`: its SHA-256 digest (32 raw bytes).
    ToSha256,
    /// `url_decode`: `%HH` decoded and `+` made a space.
    UrlDecode,
    /// `xor:"HEX"`: each byte XORed with the key, repeated.
    Xor(Arc<[u8]>),
    /// `header_lowercase`: header names (up to each line's `:`) in lower
    /// case, values as they are.
    HeaderLowercase,
    /// `strip_pseudo_headers`: lines starting with `:` removed (HTTP/2's
    /// pseudo-headers; CRs and LFs before the `:` stay).
    StripPseudoHeaders,
    /// `pcrexform:"REGEX"`: the expression's first capture, if it matches.
    Pcrexform(Regex),
}

/// Why a transform keyword was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransformError {
    /// A value was given to a transform that takes none, or none to one
    /// that needs one, or the value is malformed.
    BadValue(String),
}

impl Transform {
    /// The transform named `name` with its value `val`, or `None` if `name`
    /// is no transform.
    pub fn parse(name: &str, val: Option<&str>) -> Option<Result<Transform, TransformError>> {
        let plain = |t: Transform| {
            Some(match val {
                None => Ok(t),
                Some(v) => Err(TransformError::BadValue(format!(
                    "{name} takes no value, got `{v}`"
                ))),
            })
        };
        match name {
            "dotprefix" => plain(Transform::DotPrefix),
            "strip_whitespace" => plain(Transform::StripWhitespace),
            "compress_whitespace" => plain(Transform::CompressWhitespace),
            "to_lowercase" => plain(Transform::ToLowercase),
            "to_uppercase" => plain(Transform::ToUppercase),
            "to_md5" => plain(Transform::ToMd5),
            "to_sha1" => plain(Transform::ToSha1),
            "to_sha256" => plain(Transform::ToSha256),
            "url_decode" => plain(Transform::UrlDecode),
            "header_lowercase" => plain(Transform::HeaderLowercase),
            "strip_pseudo_headers" => plain(Transform::StripPseudoHeaders),
            "xor" => Some(xor_key(val).map(Transform::Xor)),
            "pcrexform" => Some(pcrexform(val).map(Transform::Pcrexform)),
            _ => None,
        }
    }

    /// True if `name` is a transform keyword.
    pub fn is_keyword(name: &str) -> bool {
        Transform::parse(name, None).is_some()
    }

    /// The keyword's name, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Transform::DotPrefix => "dotprefix",
            Transform::StripWhitespace => "strip_whitespace",
            Transform::CompressWhitespace => "compress_whitespace",
            Transform::ToLowercase => "to_lowercase",
            Transform::ToUppercase => "to_uppercase",
            Transform::ToMd5 => "to_md5",
            Transform::ToSha1 => "to_sha1",
            Transform::ToSha256 => "to_sha256",
            Transform::UrlDecode => "url_decode",
            Transform::Xor(_) => "xor",
            Transform::HeaderLowercase => "header_lowercase",
            Transform::StripPseudoHeaders => "strip_pseudo_headers",
            Transform::Pcrexform(_) => "pcrexform",
        }
    }

    /// True if `content` can occur in this transform's output (Suricata's
    /// validation of a content against the transforms before it).
    fn admits(&self, content: &[u8]) -> bool {
        match self {
            Transform::StripWhitespace => !content.iter().any(|&b| is_space(b)),
            Transform::CompressWhitespace => {
                !content.windows(2).any(|w| is_space(w[0]) && is_space(w[1]))
            }
            Transform::ToLowercase => !content.iter().any(u8::is_ascii_uppercase),
            Transform::ToUppercase => !content.iter().any(u8::is_ascii_lowercase),
            _ => true,
        }
    }

    /// Writes the transform of `input` to `out` (cleared first).
    fn apply(&self, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        match self {
            Transform::DotPrefix => {
                out.push(b'.');
                out.extend_from_slice(input);
            }
            Transform::StripWhitespace => {
                out.extend(input.iter().copied().filter(|&b| !is_space(b)));
            }
            Transform::CompressWhitespace => {
                let mut prev_space = false;
                for &b in input {
                    let s = is_space(b);
                    if !(s && prev_space) {
                        out.push(b);
                    }
                    prev_space = s;
                }
            }
            Transform::ToLowercase => {
                out.extend(input.iter().map(u8::to_ascii_lowercase));
            }
            Transform::ToUppercase => {
                out.extend(input.iter().map(u8::to_ascii_uppercase));
            }
            Transform::ToMd5 => out.extend_from_slice(&md5::Md5::digest(input)),
            Transform::ToSha1 => out.extend_from_slice(&sha1::Sha1::digest(input)),
            Transform::ToSha256 => out.extend_from_slice(&sha2::Sha256::digest(input)),
            Transform::UrlDecode => url_decode(input, out),
            Transform::Xor(key) => {
                out.extend(input.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k));
            }
            Transform::HeaderLowercase => {
                let mut in_value = false;
                for &b in input {
                    if in_value {
                        out.push(b);
                        in_value = b != b'\n';
                    } else {
                        out.push(b.to_ascii_lowercase());
                        in_value = b == b':';
                    }
                }
            }
            Transform::StripPseudoHeaders => {
                // Suricata 7's scan: a line starts after each LF, past any
                // CR or LF; from a `:` there up to and with the next LF,
                // nothing is kept.
                let (mut new_line, mut pseudo) = (true, false);
                for &b in input {
                    if new_line {
                        pseudo |= b == b':';
                        new_line = b == b'\r' || b == b'\n';
                    } else if b == b'\n' {
                        new_line = true;
                        if !pseudo {
                            out.push(b);
                        }
                        pseudo = false;
                        continue;
                    }
                    if !pseudo {
                        out.push(b);
                    }
                }
            }
            Transform::Pcrexform(re) => {
                let cap = re.0.captures(input).ok().flatten();
                match cap.as_ref().and_then(|c| c.get(1)) {
                    Some(m) => out.extend_from_slice(m.as_bytes()),
                    None => out.extend_from_slice(input),
                }
            }
        }
    }
}

/// C's `isspace()` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `url_decode` as Suricata does it: `%HH` with two hex digits decoded (not
/// `%uHHHH`), `+` made a space, everything else kept.
fn url_decode(input: &[u8], out: &mut Vec<u8>) {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'%' => match (
                input.get(i + 1).copied().and_then(hex),
                input.get(i + 2).copied().and_then(hex),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
}

/// `xor`'s value: a quoted string of hex digit pairs, 1 to 255 bytes.
fn xor_key(val: Option<&str>) -> Result<Arc<[u8]>, TransformError> {
    let bad = |why: &str| TransformError::BadValue(format!("xor: {why}"));
    let v = val
        .ok_or_else(|| bad("needs a key, as xor:\"0d0ac8ff\""))?
        .trim();
    let v = v
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .ok_or_else(|| bad(&format!("key `{v}` is not double quoted")))?;
    if v.is_empty() || v.len() % 2 != 0 || v.len() > 510 {
        return Err(bad(&format!(
            "key `{v}` is not 1 to 255 bytes as pairs of hex digits"
        )));
    }
    let key = (0..v.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&v[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad(&format!("key `{v}` holds a non-hex digit")))?;
    Ok(key.into())
}

/// `pcrexform`'s value: a quoted PCRE (no slashes, no flags) with at least
/// one capture group.
fn pcrexform(val: Option<&str>) -> Result<Regex, TransformError> {
    let bad = |why: String| TransformError::BadValue(format!("pcrexform: {why}"));
    let v = val.ok_or_else(|| bad("needs an expression".into()))?.trim();
    let src = v
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .ok_or_else(|| bad(format!("`{v}` is not quoted")))?
        .replace("\\\"", "\"")
        .replace("\\;", ";");
    let mut b = pcre2::bytes::RegexBuilder::new();
    b.jit_if_available(true);
    let re = b.build(&src).map_err(|e| bad(format!("`{src}`: {e}")))?;
    if re.captures_len() < 2 {
        return Err(bad(format!("`{src}` has no capture group")));
    }
    Ok(Regex(Arc::new(re)))
}

/// The transforms of one sticky buffer, in the rule's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transforms(Vec<Transform>);

/// Two buffers a chain of transforms alternates between, reused.
#[derive(Default)]
pub struct Scratch {
    a: Vec<u8>,
    b: Vec<u8>,
}

impl Transforms {
    /// True if there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends `t`.
    pub fn push(&mut self, t: Transform) {
        self.0.push(t);
    }

    /// The transforms, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Transform> {
        self.0.iter()
    }

    /// True if the buffer is only given a `.` before it (or nothing), so a
    /// prefilter over the untransformed buffer still finds the contents
    /// (without their leading `.`).
    pub fn prefilterable(&self) -> bool {
        self.0.iter().all(|t| *t == Transform::DotPrefix) && self.0.len() <= 1
    }

    /// True if this is `dotprefix` alone.
    pub fn is_dotprefix(&self) -> bool {
        self.0 == [Transform::DotPrefix]
    }

    /// The first transform whose output can never hold `content`, if any.
    pub fn refuses(&self, content: &[u8]) -> Option<&'static str> {
        self.0
            .iter()
            .find(|t| !t.admits(content))
            .map(Transform::name)
    }

    /// `buf` transformed: `buf` itself when there is no transform, else
    /// one of `s`'s buffers.
    pub fn apply<'a>(&self, buf: &'a [u8], s: &'a mut Scratch) -> &'a [u8] {
        let Some((first, rest)) = self.0.split_first() else {
            return buf;
        };
        first.apply(buf, &mut s.a);
        for t in rest {
            t.apply(&s.a, &mut s.b);
            std::mem::swap(&mut s.a, &mut s.b);
        }
        &s.a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ts: &[(&str, Option<&str>)], input: &[u8]) -> Vec<u8> {
        let mut x = Transforms::default();
        for (n, v) in ts {
            x.push(Transform::parse(n, *v).unwrap().unwrap());
        }
        let mut s = Scratch::default();
        x.apply(input, &mut s).to_vec()
    }

    #[test]
    fn each_transform_as_suricata_applies_it() {
        assert_eq!(run(&[("dotprefix", None)], b"a.com"), b".a.com");
        assert_eq!(
            run(&[("strip_whitespace", None)], b" a \t b\r\n\x0b\x0cc "),
            b"abc"
        );
        // The run's first byte stays as it is, not made a space.
        assert_eq!(
            run(&[("compress_whitespace", None)], b"a \t b\t\t\nc  "),
            b"a b\tc "
        );
        assert_eq!(run(&[("to_lowercase", None)], b"AbC\xC4"), b"abc\xC4");
        assert_eq!(run(&[("to_uppercase", None)], b"aBc"), b"ABC");
        assert_eq!(
            run(
                &[("url_decode", None)],
                b"Suricata%20is+%27%61wesome%21%27%25%30%30%ZZ%4"
            ),
            b"Suricata is 'awesome!'%00%ZZ%4"
        );
        assert_eq!(run(&[("url_decode", None)], b"%4a%4A%"), b"JJ%");
        assert_eq!(
            run(&[("xor", Some("\"0d0a\""))], b"\x0d\x0a\x0d\x0b\x00"),
            b"\0\0\0\x01\x0d"
        );
        assert_eq!(
            run(
                &[("header_lowercase", None)],
                b"Header1: Value1\nHEADER2:VALUE:x\n"
            ),
            b"header1: Value1\nheader2:VALUE:x\n"
        );
        assert_eq!(
            run(
                &[("strip_pseudo_headers", None)],
                b"Header1: Value1\n:method:get\nheader2:Value2"
            ),
            b"Header1: Value1\nheader2:Value2"
        );
        // CR or LF before the `:` still starts the line (kept), and an
        // LF ending a pseudo-header line goes with it.
        assert_eq!(
            run(
                &[("strip_pseudo_headers", None)],
                b"x: 1\n\r:auth: q\nend\n\n:a\n"
            ),
            b"x: 1\n\rend\n\n"
        );
        assert_eq!(
            run(&[("pcrexform", Some("\"id=([0-9]+)\""))], b"x?id=42&y"),
            b"42"
        );
        // No match: the buffer as it was.
        assert_eq!(run(&[("pcrexform", Some("\"id=([0-9]+)\""))], b"x"), b"x");
    }

    #[test]
    fn digests_are_raw_bytes_of_the_whole_buffer() {
        // RFC 1321, FIPS 180 test vectors for "abc".
        assert_eq!(
            run(&[("to_md5", None)], b"abc"),
            b"\x90\x01\x50\x98\x3c\xd2\x4f\xb0\xd6\x96\x3f\x7d\x28\xe1\x7f\x72"
        );
        assert_eq!(
            run(&[("to_sha1", None)], b"abc")[..4],
            [0xa9, 0x99, 0x3e, 0x36]
        );
        assert_eq!(
            run(&[("to_sha256", None)], b"abc")[..4],
            [0xba, 0x78, 0x16, 0xbf]
        );
    }

    #[test]
    fn transforms_chain_in_the_rule_s_order() {
        assert_eq!(
            run(
                &[
                    ("compress_whitespace", None),
                    ("to_uppercase", None),
                    ("dotprefix", None)
                ],
                b"a  b"
            ),
            b".A B"
        );
        assert_eq!(
            run(
                &[("url_decode", None), ("strip_whitespace", None)],
                b"a%20b+c"
            ),
            b"abc"
        );
        // Each step reads the last one's output, across more than two.
        assert_eq!(
            run(
                &[
                    ("to_uppercase", None),
                    ("to_lowercase", None),
                    ("to_uppercase", None),
                    ("dotprefix", None)
                ],
                b"x"
            ),
            b".X"
        );
    }

    #[test]
    fn contents_the_output_cannot_hold_are_named() {
        let mut x = Transforms::default();
        x.push(Transform::ToLowercase);
        assert_eq!(x.refuses(b"Admin"), Some("to_lowercase"));
        assert_eq!(x.refuses(b"admin"), None);
        let mut x = Transforms::default();
        x.push(Transform::StripWhitespace);
        assert_eq!(x.refuses(b"a b"), Some("strip_whitespace"));
        let mut x = Transforms::default();
        x.push(Transform::CompressWhitespace);
        assert_eq!(x.refuses(b"a b"), None);
        assert_eq!(x.refuses(b"a \tb"), Some("compress_whitespace"));
        let mut x = Transforms::default();
        x.push(Transform::ToUppercase);
        assert_eq!(x.refuses(b"ADMIn"), Some("to_uppercase"));
    }

    #[test]
    fn bad_values_are_named() {
        let err = |n: &str, v: Option<&str>| match Transform::parse(n, v) {
            Some(Err(TransformError::BadValue(m))) => m,
            other => panic!("{n}: {other:?}"),
        };
        assert!(err("xor", Some("\"0d0\"")).contains("pairs of hex"));
        assert!(err("xor", Some("\"zz\"")).contains("non-hex"));
        assert!(err("xor", None).contains("needs a key"));
        assert!(err("xor", Some("0d0a")).contains("double quoted"));
        assert!(err("pcrexform", Some("\"abc\"")).contains("no capture"));
        assert!(err("pcrexform", Some("\"(a\"")).contains("pcrexform"));
        assert!(err("to_lowercase", Some("x")).contains("takes no value"));
        assert!(Transform::parse("content", None).is_none());
    }

    #[test]
    fn only_dotprefix_keeps_the_prefilter() {
        let mut x = Transforms::default();
        assert!(x.prefilterable());
        x.push(Transform::DotPrefix);
        assert!(x.prefilterable() && x.is_dotprefix());
        x.push(Transform::ToLowercase);
        assert!(!x.prefilterable() && !x.is_dotprefix());
    }
}
