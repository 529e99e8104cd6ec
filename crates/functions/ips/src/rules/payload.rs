//! Payload keywords beyond plain contents: `pcre`, `byte_test`, `byte_jump`,
//! `byte_extract`, `isdataat`, and `flowbits`, parsed into what
//! [`crate::inspect`] evaluates over a buffer.
//!
//! Regular expressions are compiled with PCRE2 (the `pcre2` crate, which binds
//! libpcre2 and builds it from source when the system has none). Measured on
//! the 4,497 `pcre` options of the ET Open rules in `../shared/data/et-open/`:
//! PCRE2 compiles all of them, the `regex` crate's byte API 4,155 (no
//! backreferences or lookaround); `fancy-regex` only matches `&str`, and
//! payloads are bytes, not UTF-8. Rules are written for PCRE, so PCRE2 also
//! matches exactly as Suricata does.

use std::sync::Arc;

use super::RuleSyntax;

/// A number in a payload keyword: literal, or a `byte_extract` variable of the
/// rule (by index in [`super::Rule::vars`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Val {
    /// As written.
    Lit(i64),
    /// The value a `byte_extract` earlier in the rule read.
    Var(u8),
}

/// How extracted bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Read {
    /// Binary, most significant byte first (the default).
    #[default]
    Big,
    /// Binary, least significant byte first.
    Little,
    /// ASCII digits in this base (10, 16 or 8).
    Str(u32),
}

/// What `byte_test`, `byte_jump` and `byte_extract` share: where and how to
/// read a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extract {
    /// Bytes to read.
    pub nbytes: u8,
    /// Where, from the buffer start or (`relative`) the previous match's end.
    pub offset: Val,
    /// Relative to the previous match.
    pub relative: bool,
    /// Byte order or string base.
    pub read: Read,
    /// `bitmask`: the value is masked, then shifted right by the mask's
    /// trailing zeros.
    pub bitmask: Option<u64>,
}

/// A `byte_test` comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `=`
    Eq,
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// `&`: some bit in common.
    And,
    /// `^`: some bit different.
    Xor,
}

/// `byte_test:N,[!]OP,VALUE,OFFSET[,relative][,big|little][,string,dec|hex|oct][,bitmask M]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteTest {
    /// The read.
    pub ex: Extract,
    /// The comparison (extracted OP value).
    pub op: CmpOp,
    /// `!`: the comparison is inverted.
    pub negate: bool,
    /// The value compared with.
    pub value: Val,
}

/// `byte_jump:N,OFFSET[,relative][,multiplier M][,big|little][,string,..][,align]
/// [,from_beginning|from_end][,post_offset P][,bitmask M]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteJump {
    /// The read.
    pub ex: Extract,
    /// Multiplies the value read.
    pub multiplier: u64,
    /// Rounds the jump up to a multiple of 4.
    pub align: bool,
    /// Jump from the buffer start instead of after the bytes read.
    pub from_beginning: bool,
    /// Jump from the buffer end.
    pub from_end: bool,
    /// Added after the jump.
    pub post_offset: i64,
}

/// `byte_extract:N,OFFSET,NAME[,relative][,multiplier M][,big|little][,string,..]
/// [,align 2|4][,bitmask M]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteExtract {
    /// The read.
    pub ex: Extract,
    /// The variable set.
    pub var: u8,
    /// Multiplies the value read.
    pub multiplier: u64,
    /// Rounds the value up to a multiple of this (0: none).
    pub align: u8,
}

/// `byte_math`'s operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (a zero divisor from a variable: no match)
    Div,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
}

/// `byte_math:bytes N, offset O, oper OP, rvalue V, result NAME[, relative]
/// [, endian big|little][, string hex|dec|oct][, bitmask M]` (Suricata 7:
/// its options in any order): reads a number as `byte_extract` does,
/// applies `OP V`, then the bitmask, and sets variable `NAME`. Like
/// `byte_extract`, the next relative keyword starts after the bytes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteMath {
    /// The read (its bitmask is [`ByteMath::bitmask`], applied after `oper`).
    pub ex: Extract,
    /// The operator.
    pub oper: MathOp,
    /// The right operand: a number, or a variable set earlier.
    pub rvalue: Val,
    /// Masks the result, then shifts it right by the mask's trailing zeros.
    pub bitmask: Option<u64>,
    /// The variable set.
    pub var: u8,
}

impl ByteMath {
    /// `v OP r` as Suricata computes it on 64 bits; `None` for a division
    /// by zero.
    pub fn apply(&self, v: u64, r: u64) -> Option<u64> {
        let v = match self.oper {
            MathOp::Add => v.wrapping_add(r),
            MathOp::Sub => v.wrapping_sub(r),
            MathOp::Mul => v.wrapping_mul(r),
            MathOp::Div => v.checked_div(r)?,
            MathOp::Shl => v.checked_shl(u32::try_from(r).ok()?).unwrap_or(0),
            MathOp::Shr => v.checked_shr(u32::try_from(r).ok()?).unwrap_or(0),
        };
        Some(match self.bitmask {
            Some(m) => (v & m) >> m.trailing_zeros(),
            None => v,
        })
    }
}

/// `isdataat:[!]N[,relative]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsDataAt {
    /// The position (or bytes after the previous match).
    pub n: Val,
    /// Relative to the previous match.
    pub relative: bool,
    /// `!`: there must be no data there.
    pub negate: bool,
}

/// A compiled regular expression; equal when the source is.
#[derive(Clone)]
pub struct Regex(pub Arc<pcre2::bytes::Regex>);

impl std::fmt::Debug for Regex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.as_str())
    }
}

impl PartialEq for Regex {
    fn eq(&self, o: &Self) -> bool {
        self.0.as_str() == o.0.as_str()
    }
}
impl Eq for Regex {}

/// `pcre:[!]"/REGEX/FLAGS"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pcre {
    /// The compiled expression (with `A` as a `\A` anchor and `G`/`E` folded in).
    pub re: Regex,
    /// `!`: the expression must not match.
    pub negate: bool,
    /// `R`: searched from the previous match's end, which is where `^` and `A`
    /// anchor (Suricata passes the rest of the buffer as the subject).
    pub relative: bool,
}

/// One step of a rule's payload inspection, in rule order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// The content of that index in [`super::Rule::contents`].
    Content(u8),
    /// `pcre`.
    Pcre(Box<Pcre>),
    /// `byte_test`.
    ByteTest(ByteTest),
    /// `byte_jump`.
    ByteJump(ByteJump),
    /// `byte_extract`.
    ByteExtract(ByteExtract),
    /// `byte_math`.
    ByteMath(ByteMath),
    /// `isdataat`.
    IsDataAt(IsDataAt),
    /// `bsize`: the buffer's length (sticky buffers only).
    Bsize(super::NumCmp),
    /// `asn1`: BER objects decoded from here ([`crate::asn1`]).
    Asn1(crate::asn1::Asn1),
    /// `app-layer-event:http.NAME`: the HTTP decoder event, decided from the
    /// raw head buffer the item is in ([`crate::http::events`]).
    HttpEvent(crate::http::events::Event),
    /// `base64_decode`: decodes from here and inspects the decoded bytes
    /// with the rule's `base64_data` keywords ([`super::Rule::base64`]); the
    /// last keyword of its list (Suricata: "base64 is a terminal list").
    Base64Decode(Base64Decode),
    /// `dataset` or `datarep`: the whole buffer looked up in a set
    /// ([`crate::dataset`]).
    Dataset(Box<crate::dataset::DatasetKw>),
}

/// `base64_decode:[bytes N][, offset M][, relative]` (Suricata's
/// detect-base64-decode.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Base64Decode {
    /// Encoded bytes to decode at most (default and cap [`BASE64_DECODE_MAX`]).
    pub bytes: u32,
    /// Where decoding starts: from the buffer start, or with `relative` from
    /// the previous match's end.
    pub offset: u32,
    /// From the previous match's end.
    pub relative: bool,
}

/// Suricata's default (and here the cap) of `base64_decode`'s `bytes`.
pub const BASE64_DECODE_MAX: u32 = 65535;

/// `base64_decode` (no value: decode from the buffer's start).
pub(crate) fn base64_decode(v: Option<&str>) -> Result<Base64Decode, RuleSyntax> {
    let kw = "base64_decode";
    let mut d = Base64Decode {
        bytes: BASE64_DECODE_MAX,
        offset: 0,
        relative: false,
    };
    let Some(v) = v else {
        return Ok(d);
    };
    let (mut seen_bytes, mut seen_offset) = (false, false);
    for part in v.split(',').map(str::trim) {
        let mut w = part.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("relative"), None, _) if !d.relative => d.relative = true,
            (Some("bytes"), Some(n), None) if !seen_bytes => {
                let n: u32 = n.parse().map_err(|_| bad(kw, v))?;
                if n == 0 {
                    return Err(bad(kw, v));
                }
                d.bytes = n.min(BASE64_DECODE_MAX);
                seen_bytes = true;
            }
            (Some("offset"), Some(n), None) if !seen_offset => {
                d.offset = n.parse().map_err(|_| bad(kw, v))?;
                seen_offset = true;
            }
            _ => return Err(bad(kw, v)),
        }
    }
    Ok(d)
}

/// The value of a base64 character, or None.
#[inline]
pub(crate) fn b64_value(c: u8) -> Option<u8> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    })
}

/// Decodes `src` into `out` (cleared first) as Suricata's `DecodeBase64`
/// does in its non-strict mode (Suricata 5/6, util-crypt.c): 4 characters
/// make 3 bytes, less one per `=` in the block; decoding stops at a NUL or
/// at the first character that is neither base64 nor `=`, dropping an
/// incomplete block there; an incomplete block at the input's end gives its
/// whole bytes (n characters, n - 1 bytes). Returns the decoded length.
pub fn base64_decode_into(src: &[u8], out: &mut Vec<u8>) -> usize {
    out.clear();
    let (mut block, mut n, mut pad) = ([0u8; 4], 0usize, 0usize);
    let mut valid = true;
    let push_block = |out: &mut Vec<u8>, b: &[u8; 4], keep: usize| {
        let v = (b[0] as u32) << 18 | (b[1] as u32) << 12 | (b[2] as u32) << 6 | b[3] as u32;
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        out.extend_from_slice(&bytes[..keep]);
    };
    for &c in src {
        if c == 0 {
            break;
        }
        let val = match b64_value(c) {
            Some(x) => x,
            None if c == b'=' => {
                pad += 1;
                0
            }
            None => {
                valid = false;
                break;
            }
        };
        block[n] = val;
        n += 1;
        if n == 4 {
            push_block(out, &block, 3 - pad.min(3));
            block = [0; 4];
            n = 0;
            pad = 0;
        }
    }
    if valid && n > 0 {
        // Suricata counts n - 1 bytes for n characters left (padding in
        // them not deducted).
        push_block(out, &block, n - 1);
    }
    out.len()
}

/// A `flowbits` operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flowbit {
    /// Sets the bits when the rule matches.
    Set(Vec<String>),
    /// Clears them when the rule matches.
    Unset(Vec<String>),
    /// Flips them when the rule matches.
    Toggle(Vec<String>),
    /// The rule matches only if one of these bits is set.
    IsSet(Vec<String>),
    /// The rule matches only if one of these bits is not set.
    IsNotSet(Vec<String>),
}

/// What an `xbits` keyword does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XbitOp {
    /// Sets the bit (until `expire` seconds after the packet) when the rule matches.
    Set,
    /// Clears it when the rule matches.
    Unset,
    /// Flips it when the rule matches.
    Toggle,
    /// The rule matches only if the bit is set (and not expired).
    IsSet,
    /// The rule matches only if it is not.
    IsNotSet,
}

/// Whose bit an `xbits` keyword names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XbitTrack {
    /// The packet's source address.
    IpSrc = 1,
    /// The packet's destination address.
    IpDst = 2,
    /// The two addresses, whichever way the packet travels.
    IpPair = 3,
}

/// An `xbits` keyword: `xbits:OP,NAME,track ip_src|ip_dst|ip_pair[,expire N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xbit {
    /// The operation.
    pub op: XbitOp,
    /// The bit's name.
    pub name: String,
    /// Whose bit.
    pub track: XbitTrack,
    /// Seconds a `set` (or `toggle` setting) keeps the bit; Suricata's
    /// default is 30.
    pub expire_secs: u32,
}

/// Suricata's default `expire` of an xbit (detect-xbits.c).
pub const XBITS_EXPIRE_DEFAULT: u32 = 30;

/// The operation and bit name that `xbits` and `hostbits` both start with.
fn xbit_op_name<'a>(
    kw: &str,
    v: &str,
    op: &str,
    name: &'a str,
) -> Result<(XbitOp, &'a str), RuleSyntax> {
    let op = match op {
        "set" => XbitOp::Set,
        "unset" => XbitOp::Unset,
        "toggle" => XbitOp::Toggle,
        "isset" => XbitOp::IsSet,
        "isnotset" => XbitOp::IsNotSet,
        _ => return Err(bad(kw, v)),
    };
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(kw, v));
    }
    Ok((op, name))
}

/// `xbits`.
pub(crate) fn xbits(v: &str) -> Result<Xbit, RuleSyntax> {
    let kw = "xbits";
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    if parts.len() < 3 || parts.len() > 4 {
        return Err(bad(kw, v));
    }
    let (op, name) = xbit_op_name(kw, v, parts[0], parts[1])?;
    let track = match parts[2].strip_prefix("track").map(str::trim) {
        Some("ip_src") => XbitTrack::IpSrc,
        Some("ip_dst") => XbitTrack::IpDst,
        Some("ip_pair") => XbitTrack::IpPair,
        // `track tx` (Suricata 8) keeps bits per transaction: not here.
        Some("tx") => return Err(RuleSyntax::UnsupportedKeyword("xbits track tx".into())),
        _ => return Err(bad(kw, v)),
    };
    let expire_secs = match parts.get(3) {
        None => XBITS_EXPIRE_DEFAULT,
        Some(e) => match e.strip_prefix("expire").map(str::trim) {
            Some(n) => match n.parse::<u32>() {
                Ok(n) if n > 0 => n,
                _ => return Err(bad(kw, v)),
            },
            None => return Err(bad(kw, v)),
        },
    };
    Ok(Xbit {
        op,
        name: name.to_string(),
        track,
        expire_secs,
    })
}

/// Suricata's fixed `expire` of a hostbit (detect-hostbits.c: 300 s; the
/// keyword has no way to set another).
pub const HOSTBITS_EXPIRE: u32 = 300;

/// `hostbits:OP,NAME[,src|dst]` or `hostbits:noalert` (`None`).
///
/// Suricata keeps hostbits in the same host table as `xbits` tracked by
/// `ip_src`/`ip_dst`, under the same names, so a hostbit is an [`Xbit`] of
/// that track: `hostbits:set,x` and `xbits:isset,x,track ip_src` name one
/// bit. Without a direction the bit is the source's; `both`, an expiry or
/// anything after the direction is an error, as in Suricata 7.
pub(crate) fn hostbits(v: &str) -> Result<Option<Xbit>, RuleSyntax> {
    let kw = "hostbits";
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    if parts.len() == 1 && parts[0] == "noalert" {
        return Ok(None);
    }
    if parts.len() < 2 || parts.len() > 3 {
        return Err(bad(kw, v));
    }
    let (op, name) = xbit_op_name(kw, v, parts[0], parts[1])?;
    let track = match parts.get(2) {
        None | Some(&"src") => XbitTrack::IpSrc,
        Some(&"dst") => XbitTrack::IpDst,
        _ => return Err(bad(kw, v)),
    };
    Ok(Some(Xbit {
        op,
        name: name.to_string(),
        track,
        expire_secs: HOSTBITS_EXPIRE,
    }))
}

fn bad(keyword: &str, v: &str) -> RuleSyntax {
    RuleSyntax::BadValue {
        keyword: keyword.into(),
        value: v.into(),
    }
}

fn unsupported(what: String) -> RuleSyntax {
    RuleSyntax::UnsupportedKeyword(what)
}

/// Parses an integer in decimal or `0x` hex, with an optional sign.
pub(crate) fn int(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok()?,
        None => return None,
    };
    Some(if neg { -v } else { v })
}

/// A number or the name of a variable `byte_extract` set earlier in the rule.
pub(crate) fn val(s: &str, vars: &[String]) -> Option<Val> {
    if let Some(n) = int(s) {
        return Some(Val::Lit(n));
    }
    let s = s.trim();
    vars.iter().position(|v| v == s).map(|i| Val::Var(i as u8))
}

/// Applies the options common to the byte keywords; returns false for one it
/// does not know.
fn common_opt(
    kw: &str,
    o: &str,
    ex: &mut Extract,
    string: &mut bool,
    words: &mut std::iter::Peekable<std::slice::Iter<'_, &str>>,
) -> Result<bool, RuleSyntax> {
    match o {
        "relative" => ex.relative = true,
        "big" => ex.read = Read::Big,
        "little" => ex.read = Read::Little,
        "string" => *string = true,
        "hex" => ex.read = Read::Str(16),
        "dec" => ex.read = Read::Str(10),
        "oct" => ex.read = Read::Str(8),
        "dce" => return Err(unsupported(format!("{kw} dce"))),
        _ if o.starts_with("bitmask") => {
            let m = o["bitmask".len()..].trim();
            let m = if m.is_empty() {
                words.next().copied().unwrap_or("")
            } else {
                m
            };
            let v = int(m).filter(|&v| v > 0).ok_or_else(|| bad(kw, o))?;
            ex.bitmask = Some(v as u64);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn finish_read(kw: &str, v: &str, ex: &mut Extract, string: bool) -> Result<(), RuleSyntax> {
    match (string, ex.read) {
        (true, Read::Big | Read::Little) => ex.read = Read::Str(10),
        (false, Read::Str(_)) => return Err(bad(kw, v)),
        _ => {}
    }
    let max = if string { 20 } else { 8 };
    // A string of 0 bytes is the rest of the buffer (Suricata; ET Open uses
    // it on `http.content_len`).
    if (ex.nbytes == 0 && !string) || ex.nbytes > max {
        return Err(bad(kw, v));
    }
    Ok(())
}

fn parts(v: &str) -> Vec<&str> {
    v.split(',').map(str::trim).collect()
}

/// `byte_test`.
pub(crate) fn byte_test(v: &str, vars: &[String]) -> Result<ByteTest, RuleSyntax> {
    let kw = "byte_test";
    let p = parts(v);
    if p.len() < 4 {
        return Err(bad(kw, v));
    }
    let nbytes = p[0].parse::<u8>().map_err(|_| bad(kw, v))?;
    let (negate, op) = match p[1].strip_prefix('!') {
        Some(r) => (true, r.trim()),
        None => (false, p[1]),
    };
    let op = match op {
        "<" => CmpOp::Lt,
        ">" => CmpOp::Gt,
        "=" | "" => CmpOp::Eq,
        "<=" => CmpOp::Le,
        ">=" => CmpOp::Ge,
        "&" => CmpOp::And,
        "^" => CmpOp::Xor,
        _ => return Err(bad(kw, v)),
    };
    let value = val(p[2], vars).ok_or_else(|| bad(kw, v))?;
    let mut ex = Extract {
        nbytes,
        offset: val(p[3], vars).ok_or_else(|| bad(kw, v))?,
        relative: false,
        read: Read::Big,
        bitmask: None,
    };
    let mut string = false;
    let mut words = p[4..].iter().peekable();
    while let Some(o) = words.next() {
        if !common_opt(kw, o, &mut ex, &mut string, &mut words)? {
            return Err(bad(kw, v));
        }
    }
    finish_read(kw, v, &mut ex, string)?;
    Ok(ByteTest {
        ex,
        op,
        negate,
        value,
    })
}

/// `byte_jump`.
pub(crate) fn byte_jump(v: &str, vars: &[String]) -> Result<ByteJump, RuleSyntax> {
    let kw = "byte_jump";
    let p = parts(v);
    if p.len() < 2 {
        return Err(bad(kw, v));
    }
    let mut ex = Extract {
        nbytes: p[0].parse::<u8>().map_err(|_| bad(kw, v))?,
        offset: val(p[1], vars).ok_or_else(|| bad(kw, v))?,
        relative: false,
        read: Read::Big,
        bitmask: None,
    };
    let mut j = ByteJump {
        ex,
        multiplier: 1,
        align: false,
        from_beginning: false,
        from_end: false,
        post_offset: 0,
    };
    let mut string = false;
    let mut words = p[2..].iter().peekable();
    while let Some(o) = words.next() {
        if common_opt(kw, o, &mut ex, &mut string, &mut words)? {
            continue;
        }
        let (k, arg) = match o.split_once(char::is_whitespace) {
            Some((k, a)) => (k, a.trim()),
            None => (*o, ""),
        };
        match k {
            "align" => j.align = true,
            "from_beginning" => j.from_beginning = true,
            "from_end" => j.from_end = true,
            "multiplier" => {
                j.multiplier = int(arg).filter(|&m| m > 0).ok_or_else(|| bad(kw, v))? as u64
            }
            "post_offset" => j.post_offset = int(arg).ok_or_else(|| bad(kw, v))?,
            _ => return Err(bad(kw, v)),
        }
    }
    finish_read(kw, v, &mut ex, string)?;
    j.ex = ex;
    Ok(j)
}

/// `byte_extract`; `vars` gains the variable's name.
pub(crate) fn byte_extract(v: &str, vars: &mut Vec<String>) -> Result<ByteExtract, RuleSyntax> {
    let kw = "byte_extract";
    let p = parts(v);
    if p.len() < 3 {
        return Err(bad(kw, v));
    }
    let name = p[2];
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        || int(name).is_some()
    {
        return Err(bad(kw, v));
    }
    let mut ex = Extract {
        nbytes: p[0].parse::<u8>().map_err(|_| bad(kw, v))?,
        offset: Val::Lit(int(p[1]).ok_or_else(|| bad(kw, v))?),
        relative: false,
        read: Read::Big,
        bitmask: None,
    };
    let mut e = ByteExtract {
        ex,
        var: 0,
        multiplier: 1,
        align: 0,
    };
    let mut string = false;
    let mut words = p[3..].iter().peekable();
    while let Some(o) = words.next() {
        if common_opt(kw, o, &mut ex, &mut string, &mut words)? {
            continue;
        }
        let (k, arg) = match o.split_once(char::is_whitespace) {
            Some((k, a)) => (k, a.trim()),
            None => (*o, ""),
        };
        match k {
            "align" => {
                e.align = match arg {
                    "2" => 2,
                    "4" => 4,
                    _ => return Err(bad(kw, v)),
                }
            }
            "multiplier" => {
                e.multiplier = int(arg).filter(|&m| m > 0).ok_or_else(|| bad(kw, v))? as u64
            }
            _ => return Err(bad(kw, v)),
        }
    }
    finish_read(kw, v, &mut ex, string)?;
    e.ex = ex;
    e.var = var_index(kw, name, vars)?;
    Ok(e)
}

/// A variable's index in `vars`, added if new (`byte_extract`, `byte_math`).
fn var_index(kw: &str, name: &str, vars: &mut Vec<String>) -> Result<u8, RuleSyntax> {
    let i = match vars.iter().position(|x| x == name) {
        Some(i) => i,
        None => {
            if vars.len() >= MAX_VARS {
                return Err(unsupported(format!(
                    "{kw} (more than {MAX_VARS} variables)"
                )));
            }
            vars.push(name.to_string());
            vars.len() - 1
        }
    };
    Ok(i as u8)
}

/// `byte_math` (Suricata 7's syntax: `name value` pairs in any order);
/// `vars` gains the result's name.
pub(crate) fn byte_math(v: &str, vars: &mut Vec<String>) -> Result<ByteMath, RuleSyntax> {
    let kw = "byte_math";
    let why = |m: String| RuleSyntax::BadValue {
        keyword: kw.into(),
        value: format!("{v}: {m}"),
    };
    let mut ex = Extract {
        nbytes: 0,
        offset: Val::Lit(0),
        relative: false,
        read: Read::Big,
        bitmask: None,
    };
    let (mut nbytes, mut offset, mut oper, mut rvalue, mut result) = (None, None, None, None, None);
    let (mut endian, mut string, mut bitmask) = (None, None, None);
    for p in parts(v) {
        let (k, arg) = match p.split_once(char::is_whitespace) {
            Some((k, a)) => (k, a.trim()),
            None => (p, ""),
        };
        match k {
            "bytes" => {
                let n = arg
                    .parse::<u8>()
                    .ok()
                    .filter(|n| (1..=10).contains(n))
                    .ok_or_else(|| why(format!("bytes `{arg}` is not 1 to 10")))?;
                nbytes = Some(n);
            }
            "offset" => {
                let o = arg
                    .parse::<i32>()
                    .ok()
                    .filter(|o| (-65535..=65535).contains(o))
                    .ok_or_else(|| why(format!("offset `{arg}` is not -65535 to 65535")))?;
                offset = Some(o);
            }
            "oper" => {
                oper = Some(match arg {
                    "+" => MathOp::Add,
                    "-" => MathOp::Sub,
                    "*" => MathOp::Mul,
                    "/" => MathOp::Div,
                    "<<" => MathOp::Shl,
                    ">>" => MathOp::Shr,
                    _ => return Err(why(format!("unknown oper `{arg}`"))),
                })
            }
            "rvalue" => {
                rvalue = Some(match arg.parse::<u64>() {
                    // Suricata 7.0 loads 0 (a division by it never matches).
                    Ok(n) if n <= u32::MAX as u64 => Val::Lit(n as i64),
                    Ok(_) => return Err(why(format!("rvalue `{arg}` is over 4294967295"))),
                    Err(_) => match vars.iter().position(|x| x == arg) {
                        Some(i) => Val::Var(i as u8),
                        None => {
                            return Err(why(format!(
                                "rvalue `{arg}` is neither a number nor a variable set before"
                            )))
                        }
                    },
                })
            }
            "result" => {
                if arg.is_empty()
                    || !arg.starts_with(|c: char| c.is_ascii_alphabetic())
                    || !arg
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    return Err(why(format!("result `{arg}` is not a variable name")));
                }
                result = Some(arg);
            }
            "endian" if endian.is_none() => {
                endian = Some(match arg {
                    "big" => Read::Big,
                    "little" => Read::Little,
                    _ => return Err(why(format!("endian `{arg}`"))),
                })
            }
            "endian" => return Err(why("endian given twice".into())),
            "string" => {
                string = Some(match arg {
                    "hex" => 16,
                    "dec" => 10,
                    "oct" => 8,
                    _ => return Err(why(format!("string `{arg}`"))),
                })
            }
            "relative" if arg.is_empty() => ex.relative = true,
            "bitmask" => {
                let h = arg
                    .strip_prefix("0x")
                    .or_else(|| arg.strip_prefix("0X"))
                    .unwrap_or(arg);
                // Suricata reads the mask as hex, with or without `0x`.
                bitmask = Some(
                    u32::from_str_radix(h, 16).map_err(|_| why(format!("bitmask `{arg}`")))? as u64,
                );
            }
            "dce" => return Err(unsupported("byte_math dce".into())),
            _ => return Err(why(format!("unknown option `{p}`"))),
        }
    }
    let (Some(n), Some(o), Some(op), Some(r), Some(res)) = (nbytes, offset, oper, rvalue, result)
    else {
        return Err(why("needs bytes, offset, oper, rvalue and result".into()));
    };
    if matches!(op, MathOp::Shl | MathOp::Shr) && n > 4 {
        return Err(why(format!("bytes {n} with a shift (at most 4)")));
    }
    ex.nbytes = n;
    ex.offset = Val::Lit(o as i64);
    ex.read = match string {
        Some(base) => Read::Str(base),
        // More than 4 binary bytes load and never match (Suricata 7), as
        // the evaluation has it.
        None => endian.unwrap_or(Read::Big),
    };
    Ok(ByteMath {
        ex,
        oper: op,
        rvalue: r,
        bitmask: bitmask.filter(|&m| m != 0),
        var: var_index(kw, res, vars)?,
    })
}

/// Variables a rule may define with `byte_extract`.
pub const MAX_VARS: usize = 8;

/// `isdataat`.
pub(crate) fn isdataat(v: &str, vars: &[String]) -> Result<IsDataAt, RuleSyntax> {
    let kw = "isdataat";
    let p = parts(v);
    let (negate, n) = match p[0].strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, p[0]),
    };
    let n = val(n, vars).ok_or_else(|| bad(kw, v))?;
    if matches!(n, Val::Lit(x) if x < 0) {
        return Err(bad(kw, v));
    }
    let mut relative = false;
    for o in &p[1..] {
        match *o {
            "relative" => relative = true,
            // There are no decoded bytes here: raw bytes are what is inspected.
            "rawbytes" => {}
            _ => return Err(bad(kw, v)),
        }
    }
    Ok(IsDataAt {
        n,
        relative,
        negate,
    })
}

/// `$` outside character classes and escapes becomes `\z` (PCRE's
/// `DOLLAR_ENDONLY`, which the `pcre2` crate does not expose).
fn dollar_endonly(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 4);
    let (mut esc, mut class) = (false, false);
    for c in p.chars() {
        if esc {
            esc = false;
            out.push(c);
            continue;
        }
        match c {
            '\\' => esc = true,
            '[' => class = true,
            ']' => class = false,
            '$' if !class => {
                out.push_str("\\z");
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// `pcre`: `v` is `"/REGEX/FLAGS"`, optionally after `!`.
/// With the HTTP buffer its flag selects (`U`, `H`, ...), if any.
pub(crate) fn pcre(v: &str) -> Result<(Pcre, Option<crate::http::Buf>), RuleSyntax> {
    let kw = "pcre";
    let (negate, q) = match v.trim().strip_prefix('!') {
        Some(r) => (true, r.trim()),
        None => (false, v.trim()),
    };
    let inner = q
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .ok_or_else(|| RuleSyntax::NotQuoted(q.into()))?;
    // Only the rule language's own escapes are undone; a regex's backslashes
    // stay.
    let inner = inner.replace("\\\"", "\"").replace("\\;", ";");
    let body = inner.strip_prefix('/').ok_or_else(|| bad(kw, v))?;
    let end = body.rfind('/').ok_or_else(|| bad(kw, v))?;
    let (pat, flags) = (&body[..end], &body[end + 1..]);
    let mut b = pcre2::bytes::RegexBuilder::new();
    b.jit_if_available(true);
    let (mut anchored, mut relative, mut ungreedy, mut endonly, mut multi, mut extended) =
        (false, false, false, false, false, false);
    let mut http = None;
    for f in flags.chars() {
        match f {
            'i' => {
                b.caseless(true);
            }
            's' => {
                b.dotall(true);
            }
            'm' => {
                b.multi_line(true);
                multi = true;
            }
            'x' => {
                b.extended(true);
                extended = true;
            }
            'A' => anchored = true,
            'E' => endonly = true,
            'G' => ungreedy = true,
            'R' => relative = true,
            // `B` is accepted for Snort compatibility and does nothing in
            // Suricata; `O` lifts the configured match limits.
            'B' | 'O' => {}
            f if crate::http::pcre_flag(f).is_some() => {
                if http.is_some() {
                    return Err(bad(kw, v));
                }
                http = crate::http::pcre_flag(f);
            }
            // `http.host.raw` (the Host header as sent).
            'Z' if http.is_none() => http = Some(crate::http::Buf::HostRaw),
            'Z' => return Err(bad(kw, v)),
            _ => return Err(bad(kw, v)),
        }
    }
    let mut src = if endonly && !multi {
        dollar_endonly(pat)
    } else {
        pat.to_string()
    };
    if ungreedy {
        src.insert_str(0, "(?U)");
    }
    if anchored {
        // A newline ends a trailing `#` comment of an extended pattern.
        src = format!("\\A(?:{src}{})", if extended { "\n" } else { "" });
    }
    let re = b.build(&src).map_err(|e| RuleSyntax::BadValue {
        keyword: kw.into(),
        value: format!("{v}: {e}"),
    })?;
    Ok((
        Pcre {
            re: Regex(Arc::new(re)),
            negate,
            relative,
        },
        http,
    ))
}

fn names(s: &str) -> Vec<String> {
    s.split(['|', '&']).map(|n| n.trim().to_string()).collect()
}

/// `flowbits`; None for `noalert`.
pub(crate) fn flowbits(v: &str) -> Result<Option<Flowbit>, RuleSyntax> {
    let kw = "flowbits";
    let (cmd, arg) = match v.split_once(',') {
        Some((c, a)) => (c.trim(), Some(a.trim())),
        None => (v.trim(), None),
    };
    let list = |a: Option<&str>| -> Result<Vec<String>, RuleSyntax> {
        let n = names(a.ok_or_else(|| bad(kw, v))?);
        if n.iter().any(|x| {
            x.is_empty()
                || !x
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b',' && b != b';')
        }) {
            return Err(bad(kw, v));
        }
        Ok(n)
    };
    Ok(Some(match cmd {
        "noalert" if arg.is_none() => return Ok(None),
        "set" => Flowbit::Set(list(arg)?),
        "unset" => Flowbit::Unset(list(arg)?),
        "toggle" => Flowbit::Toggle(list(arg)?),
        "isset" => Flowbit::IsSet(list(arg)?),
        "isnotset" => Flowbit::IsNotSet(list(arg)?),
        _ => return Err(bad(kw, v)),
    }))
}

/// What a `flowint` keyword does (Suricata's detect-flowint.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowintOp {
    /// `=`: sets the variable when the rule matches.
    Set,
    /// `+`: adds to it (an unset variable starts from 0) when the rule matches.
    Add,
    /// `-`: subtracts from it when the rule matches (nothing if it is unset).
    Sub,
    /// `<`: the rule matches only if the variable is set and below the value.
    Lt,
    /// `<=`
    Le,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>=`
    Ge,
    /// `>`
    Gt,
    /// `isset`: the rule matches only if the variable is set.
    IsSet,
    /// `notset` / `isnotset`: only if it is not.
    NotSet,
}

impl FlowintOp {
    /// True for the operations that change the variable (applied after the
    /// rule matched, Suricata's post-match list); the others are conditions.
    pub fn changes(self) -> bool {
        matches!(self, FlowintOp::Set | FlowintOp::Add | FlowintOp::Sub)
    }
}

/// A `flowint` operand: a number or another flowint variable (0 while unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowintVal {
    /// A number (0 to 2^32 - 1).
    Num(u32),
    /// The value of this variable of the flow.
    Var(String),
}

/// A `flowint` keyword: `flowint:NAME,OP,VALUE` or `flowint:NAME,isset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flowint {
    /// The variable.
    pub name: String,
    /// The operation.
    pub op: FlowintOp,
    /// The operand (None for `isset`/`notset`).
    pub val: Option<FlowintVal>,
}

/// `flowint`, as Suricata's parse regex reads it: a name starting with a
/// letter followed by at least one of `[A-Za-z0-9_./]`, an operator, and a
/// value of at most 10 digits (at most 2^32 - 1) or a variable name
/// (a letter then at least one of `[A-Za-z0-9_]`).
pub(crate) fn flowint(v: &str) -> Result<Flowint, RuleSyntax> {
    let kw = "flowint";
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    if parts.len() < 2 || parts.len() > 3 {
        return Err(bad(kw, v));
    }
    let name = parts[0];
    let name_ok = name.len() >= 2
        && name.as_bytes()[0].is_ascii_alphabetic()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/'));
    if !name_ok {
        return Err(bad(kw, v));
    }
    let op = match parts[1] {
        "=" => FlowintOp::Set,
        "+" => FlowintOp::Add,
        "-" => FlowintOp::Sub,
        "<" => FlowintOp::Lt,
        "<=" => FlowintOp::Le,
        "==" => FlowintOp::Eq,
        "!=" => FlowintOp::Ne,
        ">=" => FlowintOp::Ge,
        ">" => FlowintOp::Gt,
        "isset" => FlowintOp::IsSet,
        "notset" | "isnotset" => FlowintOp::NotSet,
        _ => return Err(bad(kw, v)),
    };
    let val = match parts.get(2).copied() {
        // Suricata's regex accepts a value after isset/notset and ignores it.
        _ if matches!(op, FlowintOp::IsSet | FlowintOp::NotSet) => None,
        None | Some("") => return Err(bad(kw, v)),
        Some(x) if x.bytes().all(|b| b.is_ascii_digit()) => {
            if x.len() > 10 {
                return Err(bad(kw, v));
            }
            Some(FlowintVal::Num(x.parse().map_err(|_| bad(kw, v))?))
        }
        Some(x)
            if x.len() >= 2
                && x.as_bytes()[0].is_ascii_alphabetic()
                && x.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
        {
            Some(FlowintVal::Var(x.to_string()))
        }
        Some(_) => return Err(bad(kw, v)),
    };
    Ok(Flowint {
        name: name.to_string(),
        op,
        val,
    })
}
