//! A Suricata/Snort rule subset: parser and header matching.
//!
//! Supported: actions `alert`, `drop`, `pass`; protocols `tcp`, `udp`, `icmp`,
//! `ip`; addresses and ports as `any`, single values, CIDR, port ranges `a:b`,
//! `a:`, `:b`, lists `[a,b]` (nested), negation `!`, variables `$NAME` from the
//! configuration; directions `->` and `<>`; options `msg`, `content` (with `|hex|`
//! and `\"`, `\\`, `\;`, `\:` escapes), `nocase`, `offset`, `depth`, `distance`,
//! `within`, `flow` (`to_server`, `to_client`, `from_client`, `from_server`,
//! `established`), `sid`, `rev`, `classtype`, `priority`. Anything else (or a
//! rule without `content`) is an error for that rule, which is skipped.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_wire::IpAddr;

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Raise an alert, let the packet through.
    Alert,
    /// Raise an alert, drop the packet and the rest of the flow.
    Drop,
    /// Stop inspecting the flow.
    Pass,
}

/// The protocol a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP streams.
    Tcp,
    /// UDP datagrams.
    Udp,
    /// ICMP messages.
    Icmp,
    /// Every IP packet.
    Ip,
}

/// An address expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddrExpr {
    /// Any address.
    Any,
    /// A network (prefix length in bits).
    Net(IpAddr, u8),
    /// A list: some positive element matches (or there are none) and no negated one.
    List(Vec<AddrExpr>),
    /// Negation.
    Not(Box<AddrExpr>),
}

/// A port expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortExpr {
    /// Any port.
    Any,
    /// An inclusive range.
    Range(u16, u16),
    /// A list, as for addresses.
    List(Vec<PortExpr>),
    /// Negation.
    Not(Box<PortExpr>),
}

fn net_contains(net: &IpAddr, prefix: u8, a: &IpAddr) -> bool {
    let (n, x) = (net.as_bytes(), a.as_bytes());
    if n.len() != x.len() {
        return false;
    }
    let full = prefix as usize / 8;
    if n[..full] != x[..full] {
        return false;
    }
    let rem = prefix % 8;
    rem == 0 || {
        let mask = 0xffu8 << (8 - rem);
        n[full] & mask == x[full] & mask
    }
}

impl AddrExpr {
    /// True if `a` is in the set.
    pub fn matches(&self, a: &IpAddr) -> bool {
        match self {
            AddrExpr::Any => true,
            AddrExpr::Net(n, p) => net_contains(n, *p, a),
            AddrExpr::Not(e) => !e.matches(a),
            AddrExpr::List(l) => {
                let mut has_pos = false;
                let mut pos = false;
                for e in l {
                    if let AddrExpr::Not(inner) = e {
                        if inner.matches(a) {
                            return false;
                        }
                    } else {
                        has_pos = true;
                        pos |= e.matches(a);
                    }
                }
                pos || !has_pos
            }
        }
    }
}

impl PortExpr {
    /// True if `p` is in the set.
    pub fn matches(&self, p: u16) -> bool {
        match self {
            PortExpr::Any => true,
            PortExpr::Range(a, b) => (*a..=*b).contains(&p),
            PortExpr::Not(e) => !e.matches(p),
            PortExpr::List(l) => {
                let mut has_pos = false;
                let mut pos = false;
                for e in l {
                    if let PortExpr::Not(inner) = e {
                        if inner.matches(p) {
                            return false;
                        }
                    } else {
                        has_pos = true;
                        pos |= e.matches(p);
                    }
                }
                pos || !has_pos
            }
        }
    }
}

/// One `content` with its modifiers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Content {
    /// The bytes to find.
    pub bytes: Vec<u8>,
    /// ASCII case-insensitive.
    pub nocase: bool,
    /// Earliest start, from the stream (TCP) or payload (others) start.
    pub offset: Option<u32>,
    /// The match must end within `depth` bytes after `offset`.
    pub depth: Option<u32>,
    /// Earliest start relative to the previous content's match end.
    pub distance: Option<i32>,
    /// The match must end within `within` bytes after previous end + distance.
    pub within: Option<u32>,
}

impl Content {
    /// True if positioned relative to the previous content.
    pub fn is_relative(&self) -> bool {
        self.distance.is_some() || self.within.is_some()
    }
}

/// A parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Action.
    pub action: Action,
    /// Protocol.
    pub proto: Proto,
    /// Source addresses.
    pub src: AddrExpr,
    /// Source ports.
    pub sport: PortExpr,
    /// `<>`: either orientation matches.
    pub bidir: bool,
    /// Destination addresses.
    pub dst: AddrExpr,
    /// Destination ports.
    pub dport: PortExpr,
    /// `msg`.
    pub msg: Arc<str>,
    /// Contents, in rule order.
    pub contents: Vec<Content>,
    /// `flow:to_server` (Some(true)) or `to_client` (Some(false)).
    pub to_server: Option<bool>,
    /// `flow:established`.
    pub established: bool,
    /// `sid`.
    pub sid: u32,
    /// `rev` (1 if absent).
    pub rev: u32,
    /// `classtype`.
    pub classtype: Option<Arc<str>>,
    /// `priority` (3 if absent).
    pub priority: u8,
    /// Where the rule came from.
    pub file: Arc<str>,
    /// Its line.
    pub line: usize,
}

/// A rule that could not be loaded: `file:line: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct RuleError {
    /// The rule file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub msg: RuleSyntax,
}

/// Why a rule was skipped. The messages are what operators read in the rule
/// warnings, so each names the offending token where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleSyntax {
    /// No `(` opens the option list.
    #[error("missing option list \"( ... )\"")]
    MissingOptions,
    /// No `)` closes the option list.
    #[error("missing closing \")\"")]
    MissingClose,
    /// `)` before `(`, or text after the closing `)`.
    #[error("malformed option list")]
    MalformedOptions,
    /// The header does not have seven fields.
    #[error("expected \"action proto src sport -> dst dport\" header, found {0} fields")]
    HeaderFields(usize),
    /// The action is not `alert`, `drop` or `pass`.
    #[error("unknown action \"{0}\"")]
    UnknownAction(String),
    /// The protocol is not `tcp`, `udp`, `icmp` or `ip`.
    #[error("unknown protocol \"{0}\"")]
    UnknownProtocol(String),
    /// The direction is not `->` or `<>`.
    #[error("unknown direction \"{0}\"")]
    UnknownDirection(String),
    /// An option that takes a value has none.
    #[error("\"{keyword}\" needs a value")]
    MissingValue {
        /// The option.
        keyword: String,
    },
    /// A content modifier comes before any `content`.
    #[error("\"{keyword}\" without a preceding content")]
    NoPrecedingContent {
        /// The modifier.
        keyword: String,
    },
    /// `content:!"..."`.
    #[error("negated content is not supported")]
    NegatedContent,
    /// `content:""`.
    #[error("empty content")]
    EmptyContent,
    /// A content modifier (`offset`, `depth`, `distance`, `within`) whose value is
    /// not a number of the right range.
    #[error("bad {keyword} value \"{value}\"")]
    BadModifier {
        /// The modifier.
        keyword: String,
        /// Its value as written.
        value: String,
    },
    /// `sid`, `rev` or `priority` whose value is not a number of the right range.
    #[error("bad {keyword} \"{value}\"")]
    BadValue {
        /// The option.
        keyword: String,
        /// Its value as written.
        value: String,
    },
    /// A `flow` option outside the supported subset.
    #[error("unsupported flow option \"{0}\"")]
    UnsupportedFlow(String),
    /// An option outside the supported subset.
    #[error("unsupported keyword \"{0}\"")]
    UnsupportedKeyword(String),
    /// No `sid` option.
    #[error("missing sid")]
    MissingSid,
    /// No `content` option.
    #[error("rules without content are not supported")]
    NoContent,
    /// A content (1-based) with both absolute and relative positioning.
    #[error("content {0}: cannot mix offset/depth with distance/within")]
    MixedPositioning(usize),
    /// The first content is positioned relative to a previous one.
    #[error("distance/within on the first content")]
    RelativeFirstContent,
    /// A content (1-based) whose `depth` cannot fit it.
    #[error("content {0}: depth shorter than the content")]
    DepthTooShort(usize),
    /// A content (1-based) whose `within` cannot fit it.
    #[error("content {0}: within shorter than the content")]
    WithinTooShort(usize),
    /// More contents than a [`crate::engine::Target`] can index.
    #[error("too many contents")]
    TooManyContents,
    /// A `"` is never closed.
    #[error("unterminated quoted string")]
    UnterminatedQuote,
    /// Text after the last `;` in the option list.
    #[error("option list must end with \";\"")]
    MissingSemicolon,
    /// A value that must be quoted is not.
    #[error("expected a quoted string, found {0}")]
    NotQuoted(String),
    /// An odd number of `|` in a content.
    #[error("unbalanced \"|\" in content")]
    UnbalancedPipe,
    /// A `|...|` block in a content that is not pairs of hex digits.
    #[error("bad hex in \"|{0}|\"")]
    BadHex(String),
    /// A `[` or `]` without its partner in a list.
    #[error("unbalanced \"{0}\"")]
    UnbalancedBracket(char),
    /// `[a,,b]`, `[]` and the like.
    #[error("empty list element")]
    EmptyListElement,
    /// A `$NAME` not in the configuration's variables.
    #[error("unknown variable \"${0}\"")]
    UnknownVariable(String),
    /// Variables refer to each other too deeply (or in a cycle) at `$NAME`.
    #[error("variables or lists nest too deep at ${0}")]
    VariableTooDeep(String),
    /// Variables, lists or negations nest beyond the recursion bound.
    #[error("variables, lists or negations nest too deep")]
    NestTooDeep,
    /// Not an IP address.
    #[error("bad address \"{0}\"")]
    BadAddress(String),
    /// A prefix length that is not a number or too long for the family.
    #[error("bad prefix length in \"{0}\"")]
    BadPrefix(String),
    /// Not a port number.
    #[error("bad port \"{0}\"")]
    BadPort(String),
    /// A port range whose low end is above its high end.
    #[error("empty port range \"{0}\"")]
    EmptyPortRange(String),
    /// A second rule with a sid already loaded.
    #[error("duplicate sid {0}")]
    DuplicateSid(u32),
}

/// Variables usable as `$NAME` in addresses and ports.
pub type Vars = BTreeMap<String, String>;

/// Parses a rules file's text. Returns the good rules and one error per skipped
/// rule; blank lines and `#` comments are ignored.
pub fn parse_rules(text: &str, file: &str, vars: &Vars) -> (Vec<Rule>, Vec<RuleError>) {
    let file_arc: Arc<str> = file.into();
    let mut rules: Vec<Rule> = Vec::new();
    let mut errors = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_rule(line, vars) {
            Ok(mut r) => {
                if rules.iter().any(|o| o.sid == r.sid) {
                    errors.push(RuleError {
                        file: file.into(),
                        line: n + 1,
                        msg: RuleSyntax::DuplicateSid(r.sid),
                    });
                    continue;
                }
                r.file = file_arc.clone();
                r.line = n + 1;
                rules.push(r);
            }
            Err(msg) => errors.push(RuleError {
                file: file.into(),
                line: n + 1,
                msg,
            }),
        }
    }
    (rules, errors)
}

/// Splits the header at whitespace outside brackets.
fn header_tokens(h: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = None;
    for (i, c) in h.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if c.is_whitespace() && depth <= 0 {
            if let Some(s) = start.take() {
                out.push(&h[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(&h[s..]);
    }
    out
}

/// Parses one rule line.
pub fn parse_rule(line: &str, vars: &Vars) -> Result<Rule, RuleSyntax> {
    let open = line.find('(').ok_or(RuleSyntax::MissingOptions)?;
    let close = line.rfind(')').ok_or(RuleSyntax::MissingClose)?;
    if close < open || !line[close + 1..].trim().is_empty() {
        return Err(RuleSyntax::MalformedOptions);
    }
    let toks = header_tokens(&line[..open]);
    if toks.len() != 7 {
        return Err(RuleSyntax::HeaderFields(toks.len()));
    }
    let action = match toks[0] {
        "alert" => Action::Alert,
        "drop" => Action::Drop,
        "pass" => Action::Pass,
        a => return Err(RuleSyntax::UnknownAction(a.into())),
    };
    let proto = match toks[1] {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" => Proto::Icmp,
        "ip" => Proto::Ip,
        p => return Err(RuleSyntax::UnknownProtocol(p.into())),
    };
    let bidir = match toks[4] {
        "->" => false,
        "<>" => true,
        d => return Err(RuleSyntax::UnknownDirection(d.into())),
    };
    let src = parse_addr(toks[2], vars, 0)?;
    let sport = parse_port(toks[3], vars, 0)?;
    let dst = parse_addr(toks[5], vars, 0)?;
    let dport = parse_port(toks[6], vars, 0)?;

    let mut rule = Rule {
        action,
        proto,
        src,
        sport,
        bidir,
        dst,
        dport,
        msg: "".into(),
        contents: Vec::new(),
        to_server: None,
        established: false,
        sid: 0,
        rev: 1,
        classtype: None,
        priority: 3,
        file: "".into(),
        line: 0,
    };
    let mut has_sid = false;
    for opt in split_options(&line[open + 1..close])? {
        let (name, val) = match opt.find(':') {
            Some(i) => (opt[..i].trim(), Some(opt[i + 1..].trim())),
            None => (opt.trim(), None),
        };
        fn need<'v>(v: Option<&'v str>, name: &str) -> Result<&'v str, RuleSyntax> {
            v.ok_or_else(|| RuleSyntax::MissingValue {
                keyword: name.into(),
            })
        }
        let bad_modifier = |v: &str| RuleSyntax::BadModifier {
            keyword: name.into(),
            value: v.into(),
        };
        let bad_value = |v: &str| RuleSyntax::BadValue {
            keyword: name.into(),
            value: v.into(),
        };
        let last = |r: &mut Rule| -> Result<usize, RuleSyntax> {
            if r.contents.is_empty() {
                Err(RuleSyntax::NoPrecedingContent {
                    keyword: name.into(),
                })
            } else {
                Ok(r.contents.len() - 1)
            }
        };
        match name {
            "msg" => rule.msg = unquote(need(val, name)?)?.into(),
            "content" => {
                let v = need(val, name)?;
                if v.starts_with('!') {
                    return Err(RuleSyntax::NegatedContent);
                }
                let bytes = parse_content(v)?;
                if bytes.is_empty() {
                    return Err(RuleSyntax::EmptyContent);
                }
                rule.contents.push(Content {
                    bytes,
                    ..Content::default()
                });
            }
            "nocase" => {
                let i = last(&mut rule)?;
                rule.contents[i].nocase = true;
            }
            "offset" | "depth" | "within" => {
                let i = last(&mut rule)?;
                let v = need(val, name)?;
                let n: u32 = v.parse().map_err(|_| bad_modifier(v))?;
                let c = &mut rule.contents[i];
                match name {
                    "offset" => c.offset = Some(n),
                    "depth" => c.depth = Some(n),
                    _ => c.within = Some(n),
                }
            }
            "distance" => {
                let i = last(&mut rule)?;
                let v = need(val, name)?;
                let n: i32 = v.parse().map_err(|_| bad_modifier(v))?;
                rule.contents[i].distance = Some(n);
            }
            "flow" => {
                for f in need(val, name)?.split(',') {
                    match f.trim() {
                        "to_server" | "from_client" => rule.to_server = Some(true),
                        "to_client" | "from_server" => rule.to_server = Some(false),
                        "established" => rule.established = true,
                        o => return Err(RuleSyntax::UnsupportedFlow(o.into())),
                    }
                }
            }
            "sid" => {
                let v = need(val, name)?;
                rule.sid = v.parse().map_err(|_| bad_value(v))?;
                has_sid = true;
            }
            "rev" => {
                let v = need(val, name)?;
                rule.rev = v.parse().map_err(|_| bad_value(v))?;
            }
            "priority" => {
                let v = need(val, name)?;
                rule.priority = v.parse().map_err(|_| bad_value(v))?;
            }
            "classtype" => rule.classtype = Some(need(val, name)?.into()),
            other => return Err(RuleSyntax::UnsupportedKeyword(other.into())),
        }
    }
    if !has_sid {
        return Err(RuleSyntax::MissingSid);
    }
    if rule.contents.is_empty() {
        return Err(RuleSyntax::NoContent);
    }
    for (i, c) in rule.contents.iter().enumerate() {
        let len = c.bytes.len() as u64;
        if c.is_relative() && (c.offset.is_some() || c.depth.is_some()) {
            return Err(RuleSyntax::MixedPositioning(i + 1));
        }
        if i == 0 && c.is_relative() {
            return Err(RuleSyntax::RelativeFirstContent);
        }
        if c.depth.is_some_and(|d| (d as u64) < len) {
            return Err(RuleSyntax::DepthTooShort(i + 1));
        }
        if c.within.is_some_and(|w| (w as u64) < len) {
            return Err(RuleSyntax::WithinTooShort(i + 1));
        }
    }
    if rule.contents.len() > 255 {
        return Err(RuleSyntax::TooManyContents);
    }
    Ok(rule)
}

/// Splits options at `;` outside quotes, honouring backslash escapes.
fn split_options(s: &str) -> Result<Vec<&str>, RuleSyntax> {
    let mut out = Vec::new();
    let mut in_q = false;
    let mut esc = false;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if esc {
            esc = false;
            continue;
        }
        match c {
            '\\' => esc = true,
            '"' => in_q = !in_q,
            ';' if !in_q => {
                let o = s[start..i].trim();
                if !o.is_empty() {
                    out.push(o);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if in_q {
        return Err(RuleSyntax::UnterminatedQuote);
    }
    if !s[start..].trim().is_empty() {
        return Err(RuleSyntax::MissingSemicolon);
    }
    Ok(out)
}

fn unquote(v: &str) -> Result<String, RuleSyntax> {
    let inner = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .ok_or_else(|| RuleSyntax::NotQuoted(v.into()))?;
    let mut out = String::new();
    let mut esc = false;
    for c in inner.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn parse_content(v: &str) -> Result<Vec<u8>, RuleSyntax> {
    let inner = unquote(v)?;
    let mut out = Vec::new();
    let mut parts = inner.split('|');
    let mut hex = false;
    let n = inner.matches('|').count();
    if n & 1 == 1 {
        return Err(RuleSyntax::UnbalancedPipe);
    }
    for part in parts.by_ref() {
        if hex {
            let digits: String = part.chars().filter(|c| !c.is_whitespace()).collect();
            if !digits.is_ascii() || digits.len() & 1 == 1 {
                return Err(RuleSyntax::BadHex(part.into()));
            }
            for i in (0..digits.len()).step_by(2) {
                let b = u8::from_str_radix(&digits[i..i + 2], 16)
                    .map_err(|_| RuleSyntax::BadHex(part.into()))?;
                out.push(b);
            }
        } else {
            out.extend_from_slice(part.as_bytes());
        }
        hex = !hex;
    }
    Ok(out)
}

/// Bounds recursion through variables and nested lists (no stack overflow on
/// hostile input).
const MAX_VAR_DEPTH: usize = 32;

fn var<'a>(name: &str, vars: &'a Vars, depth: usize) -> Result<&'a str, RuleSyntax> {
    if depth > MAX_VAR_DEPTH {
        return Err(RuleSyntax::VariableTooDeep(name.into()));
    }
    vars.get(name)
        .map(|s| s.as_str())
        .ok_or_else(|| RuleSyntax::UnknownVariable(name.into()))
}

/// Splits a bracketed list's inside at top-level commas.
fn list_items(s: &str) -> Result<Vec<&str>, RuleSyntax> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(RuleSyntax::UnbalancedBracket(']'));
        }
    }
    if depth != 0 {
        return Err(RuleSyntax::UnbalancedBracket('['));
    }
    out.push(s[start..].trim());
    if out.iter().any(|x| x.is_empty()) {
        return Err(RuleSyntax::EmptyListElement);
    }
    Ok(out)
}

/// Parses an address expression.
pub fn parse_addr(s: &str, vars: &Vars, depth: usize) -> Result<AddrExpr, RuleSyntax> {
    if depth > MAX_VAR_DEPTH {
        return Err(RuleSyntax::NestTooDeep);
    }
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('!') {
        return Ok(AddrExpr::Not(Box::new(parse_addr(rest, vars, depth + 1)?)));
    }
    if let Some(name) = s.strip_prefix('$') {
        return parse_addr(var(name, vars, depth)?, vars, depth + 1);
    }
    if s == "any" {
        return Ok(AddrExpr::Any);
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        let items = list_items(inner)?;
        return Ok(AddrExpr::List(
            items
                .into_iter()
                .map(|i| parse_addr(i, vars, depth + 1))
                .collect::<Result<_, _>>()?,
        ));
    }
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: std::net::IpAddr = a.parse().map_err(|_| RuleSyntax::BadAddress(s.into()))?;
    let addr = IpAddr::from(addr);
    let max = if addr.is_v4() { 32 } else { 128 };
    let prefix = match p {
        None => max,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|&x| x <= max)
            .ok_or_else(|| RuleSyntax::BadPrefix(s.into()))?,
    };
    Ok(AddrExpr::Net(addr, prefix))
}

/// Parses a port expression.
pub fn parse_port(s: &str, vars: &Vars, depth: usize) -> Result<PortExpr, RuleSyntax> {
    if depth > MAX_VAR_DEPTH {
        return Err(RuleSyntax::NestTooDeep);
    }
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('!') {
        return Ok(PortExpr::Not(Box::new(parse_port(rest, vars, depth + 1)?)));
    }
    if let Some(name) = s.strip_prefix('$') {
        return parse_port(var(name, vars, depth)?, vars, depth + 1);
    }
    if s == "any" {
        return Ok(PortExpr::Any);
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        let items = list_items(inner)?;
        return Ok(PortExpr::List(
            items
                .into_iter()
                .map(|i| parse_port(i, vars, depth + 1))
                .collect::<Result<_, _>>()?,
        ));
    }
    let num = |x: &str| -> Result<u16, RuleSyntax> {
        x.parse().map_err(|_| RuleSyntax::BadPort(s.into()))
    };
    match s.split_once(':') {
        Some((a, b)) => {
            let lo = if a.is_empty() { 0 } else { num(a)? };
            let hi = if b.is_empty() { u16::MAX } else { num(b)? };
            if lo > hi {
                return Err(RuleSyntax::EmptyPortRange(s.into()));
            }
            Ok(PortExpr::Range(lo, hi))
        }
        None => {
            let p = num(s)?;
            Ok(PortExpr::Range(p, p))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(a)
    }

    #[test]
    fn addresses_ports_and_vars() {
        let mut vars = Vars::new();
        vars.insert("HOME_NET".into(), "[10.0.0.0/8,192.168.1.0/24]".into());
        vars.insert("EXTERNAL_NET".into(), "!$HOME_NET".into());
        let a = parse_addr("$EXTERNAL_NET", &vars, 0).unwrap();
        assert!(!a.matches(&v4([10, 1, 2, 3])));
        assert!(a.matches(&v4([8, 8, 8, 8])));
        let l = parse_addr("[10.0.0.0/8, !10.1.0.0/16]", &vars, 0).unwrap();
        assert!(l.matches(&v4([10, 2, 0, 1])));
        assert!(!l.matches(&v4([10, 1, 0, 1])));
        assert!(!l.matches(&v4([11, 1, 0, 1])));
        let p = parse_port("[80,1024:,!8080]", &vars, 0).unwrap();
        assert!(p.matches(80) && p.matches(5000) && !p.matches(8080) && !p.matches(81));
        assert!(parse_port(":1023", &vars, 0).unwrap().matches(0));
        assert_eq!(
            parse_addr("$NOPE", &vars, 0),
            Err(RuleSyntax::UnknownVariable("NOPE".into()))
        );
        assert_eq!(
            parse_addr("10.0.0.0/33", &vars, 0),
            Err(RuleSyntax::BadPrefix("10.0.0.0/33".into()))
        );
        let v6 = parse_addr("2001:db8::/32", &vars, 0).unwrap();
        assert!(v6.matches(&IpAddr::V6([
            0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1
        ])));
        assert!(!v6.matches(&v4([10, 0, 0, 1])));
        // Self-referencing variables terminate with an error.
        let mut vars = Vars::new();
        vars.insert("A".into(), "$A".into());
        assert_eq!(parse_addr("$A", &vars, 0), Err(RuleSyntax::NestTooDeep));
    }

    #[test]
    fn contents_and_options() {
        let r = parse_rule(
            r#"drop tcp any any <> 10.0.0.0/8 [80,443] (msg:"a \"q\"; b"; content:"GET |20 2f|x"; nocase; offset:2; depth:20; content:"|00|z"; distance:1; within:5; flow:to_server,established; sid:7; rev:3; classtype:web; priority:1;)"#,
            &Vars::new(),
        )
        .unwrap();
        assert_eq!(&*r.msg, "a \"q\"; b");
        assert_eq!(r.contents[0].bytes, b"GET  /x");
        assert!(r.contents[0].nocase);
        assert_eq!(
            (r.contents[0].offset, r.contents[0].depth),
            (Some(2), Some(20))
        );
        assert_eq!(r.contents[1].bytes, b"\0z");
        assert_eq!(
            (r.contents[1].distance, r.contents[1].within),
            (Some(1), Some(5))
        );
        assert_eq!(
            (r.to_server, r.established, r.sid, r.rev, r.priority),
            (Some(true), true, 7, 3, 1)
        );
        assert!(r.bidir && r.action == Action::Drop);
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic spray of rule-shaped garbage, including multibyte text
        // inside hex escapes and lists.
        let pieces = [
            "alert",
            "drop",
            "tcp",
            "udp",
            " ",
            "any",
            "->",
            "<>",
            "[",
            "]",
            "!",
            "$X",
            "(",
            ")",
            ";",
            ":",
            "\"",
            "|",
            "é",
            "4",
            "a",
            "content",
            "msg",
            "sid:1",
            "depth:",
            "distance:-1",
            "within",
            ",",
            "10.0.0.0/8",
            "\\",
            "flow:",
            "1:2",
        ];
        let mut vars = Vars::new();
        vars.insert("X".into(), "[$X]".into());
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..20000 {
            let mut line = String::new();
            for _ in 0..(x % 24) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                line.push_str(pieces[(x % pieces.len() as u64) as usize]);
            }
            let _ = parse_rule(&line, &vars);
            let _ = parse_rule(&format!("alert tcp any any -> any any ({line})"), &vars);
        }
        assert_eq!(
            parse_content("\"|aéb|\""),
            Err(RuleSyntax::BadHex("aéb".into()))
        );
        let deep = format!("{}1.2.3.4{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(parse_addr(&deep, &vars, 0), Err(RuleSyntax::NestTooDeep));
        assert_eq!(parse_port(&deep, &vars, 0), Err(RuleSyntax::NestTooDeep));
        assert_eq!(
            parse_port(&"!".repeat(100_000), &vars, 0),
            Err(RuleSyntax::NestTooDeep)
        );
    }

    #[test]
    fn each_problem_names_its_token() {
        let v = Vars::new();
        let e = |opts: &str| parse_rule(&format!("alert tcp any any -> any any ({opts})"), &v);
        let bad = |k: &str, x: &str| RuleSyntax::BadValue {
            keyword: k.into(),
            value: x.into(),
        };
        let cases: Vec<(Result<Rule, RuleSyntax>, RuleSyntax, &str)> = vec![
            (
                parse_rule("alert tcp any any -> any any", &v),
                RuleSyntax::MissingOptions,
                "missing option list \"( ... )\"",
            ),
            (
                parse_rule("alert tcp any any -> any any (sid:1;", &v),
                RuleSyntax::MissingClose,
                "missing closing \")\"",
            ),
            (
                parse_rule("alert tcp any any -> any any (sid:1;) x", &v),
                RuleSyntax::MalformedOptions,
                "malformed option list",
            ),
            (
                parse_rule("alert tcp any -> any any (sid:1;)", &v),
                RuleSyntax::HeaderFields(6),
                "expected \"action proto src sport -> dst dport\" header, found 6 fields",
            ),
            (
                parse_rule("log tcp any any -> any any (sid:1;)", &v),
                RuleSyntax::UnknownAction("log".into()),
                "unknown action \"log\"",
            ),
            (
                parse_rule("alert tcp any any => any any (sid:1;)", &v),
                RuleSyntax::UnknownDirection("=>".into()),
                "unknown direction \"=>\"",
            ),
            (
                e("msg; sid:1;"),
                RuleSyntax::MissingValue {
                    keyword: "msg".into(),
                },
                "\"msg\" needs a value",
            ),
            (
                e("nocase; sid:1;"),
                RuleSyntax::NoPrecedingContent {
                    keyword: "nocase".into(),
                },
                "\"nocase\" without a preceding content",
            ),
            (
                e("content:!\"a\"; sid:1;"),
                RuleSyntax::NegatedContent,
                "negated content is not supported",
            ),
            (
                e("content:\"\"; sid:1;"),
                RuleSyntax::EmptyContent,
                "empty content",
            ),
            (
                e("content:\"a\"; depth:x; sid:1;"),
                RuleSyntax::BadModifier {
                    keyword: "depth".into(),
                    value: "x".into(),
                },
                "bad depth value \"x\"",
            ),
            (
                e("content:\"a\"; content:\"b\"; distance:y; sid:1;"),
                RuleSyntax::BadModifier {
                    keyword: "distance".into(),
                    value: "y".into(),
                },
                "bad distance value \"y\"",
            ),
            (e("content:\"a\"; sid:x;"), bad("sid", "x"), "bad sid \"x\""),
            (
                e("content:\"a\"; sid:1; rev:-1;"),
                bad("rev", "-1"),
                "bad rev \"-1\"",
            ),
            (
                e("content:\"a\"; sid:1; priority:300;"),
                bad("priority", "300"),
                "bad priority \"300\"",
            ),
            (
                e("content:\"a\"; flow:stateless; sid:1;"),
                RuleSyntax::UnsupportedFlow("stateless".into()),
                "unsupported flow option \"stateless\"",
            ),
            (e("content:\"a\";"), RuleSyntax::MissingSid, "missing sid"),
            (
                e("content:\"a\"; offset:1; content:\"b\"; distance:0; depth:3; sid:1;"),
                RuleSyntax::MixedPositioning(2),
                "content 2: cannot mix offset/depth with distance/within",
            ),
            (
                e("content:\"a\"; within:3; sid:1;"),
                RuleSyntax::RelativeFirstContent,
                "distance/within on the first content",
            ),
            (
                e("content:\"abc\"; depth:2; sid:1;"),
                RuleSyntax::DepthTooShort(1),
                "content 1: depth shorter than the content",
            ),
            (
                e("content:\"a\"; content:\"bc\"; within:1; sid:1;"),
                RuleSyntax::WithinTooShort(2),
                "content 2: within shorter than the content",
            ),
            (
                e(&format!("{}sid:1;", "content:\"a\"; ".repeat(256))),
                RuleSyntax::TooManyContents,
                "too many contents",
            ),
            (
                e("msg:\"a; sid:1;"),
                RuleSyntax::UnterminatedQuote,
                "unterminated quoted string",
            ),
            (
                e("content:\"a\"; sid:1"),
                RuleSyntax::MissingSemicolon,
                "option list must end with \";\"",
            ),
            (
                e("msg:a; sid:1;"),
                RuleSyntax::NotQuoted("a".into()),
                "expected a quoted string, found a",
            ),
            (
                e("content:\"|4g|\"; sid:1;"),
                RuleSyntax::BadHex("4g".into()),
                "bad hex in \"|4g|\"",
            ),
        ];
        for (got, kind, text) in cases {
            let err = got.expect_err(text);
            assert_eq!(err, kind);
            assert_eq!(err.to_string(), text);
        }
        let addr_cases = [
            (
                "[1.2.3.4,]",
                RuleSyntax::EmptyListElement,
                "empty list element",
            ),
            (
                "[1.2.3.4]]",
                RuleSyntax::UnbalancedBracket(']'),
                "unbalanced \"]\"",
            ),
            (
                "[[1.2.3.4]",
                RuleSyntax::UnbalancedBracket('['),
                "unbalanced \"[\"",
            ),
            (
                "1.2.3",
                RuleSyntax::BadAddress("1.2.3".into()),
                "bad address \"1.2.3\"",
            ),
            (
                "$NOPE",
                RuleSyntax::UnknownVariable("NOPE".into()),
                "unknown variable \"$NOPE\"",
            ),
        ];
        for (a, kind, text) in addr_cases {
            let err = parse_addr(a, &v, 0).expect_err(text);
            assert_eq!(err, kind);
            assert_eq!(err.to_string(), text);
        }
        let port_cases = [
            ("8o", RuleSyntax::BadPort("8o".into()), "bad port \"8o\""),
            (
                "90:80",
                RuleSyntax::EmptyPortRange("90:80".into()),
                "empty port range \"90:80\"",
            ),
        ];
        for (p, kind, text) in port_cases {
            let err = parse_port(p, &v, 0).expect_err(text);
            assert_eq!(err, kind);
            assert_eq!(err.to_string(), text);
        }
        let mut cyclic = Vars::new();
        cyclic.insert("A".into(), "$A".into());
        assert_eq!(
            parse_port("$A", &cyclic, 0).unwrap_err().to_string(),
            "variables, lists or negations nest too deep"
        );
        assert_eq!(
            var("A", &cyclic, MAX_VAR_DEPTH + 1)
                .unwrap_err()
                .to_string(),
            "variables or lists nest too deep at $A"
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let text = "# comment\n\nalert tcp any any -> any any (content:\"a\"; sid:1;)\nalert tcp any any -> any any (content:\"a\"; pcre:\"/x/\"; sid:2;)\nalert tcpp any any -> any any (content:\"a\"; sid:3;)\nalert tcp any any -> any any (content:\"a\"; sid:1;)\nalert tcp any any -> any any (content:\"a|4\"; sid:5;)\nalert tcp any any -> any any (sid:6;)\n";
        let (rules, errs) = parse_rules(text, "x.rules", &Vars::new());
        assert_eq!(rules.len(), 1);
        let kinds: Vec<(usize, &RuleSyntax)> = errs.iter().map(|e| (e.line, &e.msg)).collect();
        assert_eq!(
            kinds,
            vec![
                (4, &RuleSyntax::UnsupportedKeyword("pcre".into())),
                (5, &RuleSyntax::UnknownProtocol("tcpp".into())),
                (6, &RuleSyntax::DuplicateSid(1)),
                (7, &RuleSyntax::UnbalancedPipe),
                (8, &RuleSyntax::NoContent),
            ]
        );
        // The text operators see stays as it was.
        let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "x.rules:4: unsupported keyword \"pcre\"",
                "x.rules:5: unknown protocol \"tcpp\"",
                "x.rules:6: duplicate sid 1",
                "x.rules:7: unbalanced \"|\" in content",
                "x.rules:8: rules without content are not supported",
            ]
        );
    }
}
