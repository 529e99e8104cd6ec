//! Suricata rules: parser and header matching.
//!
//! Actions `alert`, `drop`, `pass`; protocols `tcp` (also `tcp-pkt`,
//! `tcp-stream`), `udp`, `icmp`, `ip`, and the application layers `dns`
//! (messages told by content, [`crate::dns::detect`]), `http`
//! ([`crate::http`]), `tls`/`ssl` ([`crate::tls`]) and `smtp`, `ftp`, `smb`
//! (stream rules on flows detected as that protocol, [`crate::applayer`]); addresses and ports as `any`, single values,
//! CIDR, port ranges `a:b`, `a:`, `:b`, lists `[a,b]` (nested), negation `!`,
//! variables `$NAME` from the configuration; directions `->` and `<>`. Every
//! option keyword is looked up in [`options::KEYWORDS`]: a rule loads only if each
//! of its keywords is enforced, a search modifier, or information; otherwise it is
//! skipped with the keyword as its reason ([`RuleSyntax::reason`]). Rules of
//! other application-layer protocols (`ssh`, `ftp-data`, ...) are skipped with the
//! protocol as the reason.
//!
//! Sticky buffers: after `dns.query` (or its older name `dns_query`, an alias
//! since Suricata 5) the payload keywords inspect the query names of DNS
//! requests ([`DnsQuery`]) until `pkt_data` returns to the packet's payload;
//! after an HTTP buffer keyword (`http.uri`, `file_data`, ...) they inspect
//! that buffer of each HTTP message ([`HttpList`]), and the Snort-style
//! modifiers (`http_uri`, ...) move the content before them there; after a
//! TLS buffer keyword (`tls.sni`, `ja3.hash`, ...) they inspect that buffer of
//! a TLS hello ([`TlsList`]); after a packet-header buffer (`tcp.hdr`,
//! `ipv4.hdr`, ...) that header of the packet ([`HdrList`],
//! [`crate::pkthdr`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_wire::IpAddr;

mod alevents;
pub mod options;
pub mod payload;

pub use payload::{Flowbit, Flowint, FlowintOp, FlowintVal, Item, Xbit, XbitOp, XbitTrack};

pub use options::{
    NumCmp, PacketChecks, PacketInfo, Status, StreamMode, StreamSide, StreamSize, TcpFlags,
    Threshold, ThresholdKind, Track,
};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP streams.
    Tcp,
    /// UDP datagrams.
    Udp,
    /// ICMP messages.
    Icmp,
    /// Every IP packet.
    Ip,
    /// DNS messages over UDP or TCP, whatever the ports ([`crate::dns::detect`]).
    Dns,
    /// HTTP/1.x over TCP, whatever the ports ([`crate::http`]).
    Http,
    /// TLS hellos over TCP, whatever the ports ([`crate::tls`]).
    Tls,
    /// The stream bytes of TCP flows detected as SMTP by content, whatever
    /// the ports ([`crate::applayer`]).
    Smtp,
    /// The stream bytes of TCP flows detected as FTP (control) by content.
    Ftp,
    /// The stream bytes of TCP flows detected as SMB by content.
    Smb,
    /// The stream bytes of TCP flows detected as SSH by content.
    Ssh,
}

impl Proto {
    /// True for the application protocols whose rules match the stream
    /// bytes of flows detected as that protocol ([`crate::applayer`]), as
    /// `tcp` rules match every TCP stream.
    pub fn stream_app(self) -> bool {
        matches!(self, Proto::Smtp | Proto::Ftp | Proto::Smb | Proto::Ssh)
    }

    /// The protocol as rules write it.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
            Proto::Ip => "ip",
            Proto::Dns => "dns",
            Proto::Http => "http",
            Proto::Tls => "tls",
            Proto::Smtp => "smtp",
            Proto::Ftp => "ftp",
            Proto::Smb => "smb",
            Proto::Ssh => "ssh",
        }
    }
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
    /// A long list of networks alone (IP reputation rules list thousands),
    /// searched by bisection: the same set as its [`AddrExpr::List`].
    Set(NetSet),
}

/// Networks as sorted, disjoint ranges of addresses, per family.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

/// Lists of networks at least this long become a [`NetSet`].
const NET_SET_MIN: usize = 16;

impl NetSet {
    /// The set of `nets` (address, prefix length; host bits ignored).
    pub fn new(nets: &[(IpAddr, u8)]) -> NetSet {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for &(a, p) in nets {
            match a {
                IpAddr::V4(b) => {
                    let mask = u32::MAX.checked_shl(32 - p as u32).unwrap_or(0);
                    let lo = u32::from_be_bytes(b) & mask;
                    v4.push((lo, lo | !mask));
                }
                IpAddr::V6(b) => {
                    let mask = u128::MAX.checked_shl(128 - p as u32).unwrap_or(0);
                    let lo = u128::from_be_bytes(b) & mask;
                    v6.push((lo, lo | !mask));
                }
            }
        }
        NetSet {
            v4: disjoint(v4),
            v6: disjoint(v6),
        }
    }

    /// The IPv4 ranges (inclusive, sorted, disjoint).
    pub fn v4_ranges(&self) -> &[(u32, u32)] {
        &self.v4
    }

    /// The IPv6 ranges (inclusive, sorted, disjoint).
    pub fn v6_ranges(&self) -> &[(u128, u128)] {
        &self.v6
    }

    /// True if `a` is in one of the networks.
    pub fn contains(&self, a: &IpAddr) -> bool {
        match *a {
            IpAddr::V4(b) => in_ranges(&self.v4, u32::from_be_bytes(b)),
            IpAddr::V6(b) => in_ranges(&self.v6, u128::from_be_bytes(b)),
        }
    }
}

/// `v` sorted with overlapping ranges merged.
fn disjoint<T: Ord + Copy>(mut v: Vec<(T, T)>) -> Vec<(T, T)> {
    v.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(v.len());
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

fn in_ranges<T: Ord + Copy>(v: &[(T, T)], x: T) -> bool {
    let i = v.partition_point(|r| r.0 <= x);
    i > 0 && v[i - 1].1 >= x
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
    /// The bound of the expression as the packet rules are indexed by
    /// ([`crate::packetidx`]): IPv4 ranges (inclusive, maybe overlapping)
    /// holding every IPv4 address it matches, and whether it may match an
    /// IPv6 address too; `None` when no positive network bounds its IPv4
    /// addresses (`any`, a negation alone). An IPv6 network bounds the IPv4
    /// addresses to none: ET's Tor lists mix both families, and an IPv4
    /// packet is a candidate only of their IPv4 entries.
    pub fn v4_bound(&self) -> Option<(Vec<(u32, u32)>, bool)> {
        match self {
            AddrExpr::Any | AddrExpr::Not(_) => None,
            AddrExpr::Net(IpAddr::V4(b), p) => {
                let mask = u32::MAX
                    .checked_shl(32u32.checked_sub(*p as u32)?)
                    .unwrap_or(0);
                let lo = u32::from_be_bytes(*b) & mask;
                Some((vec![(lo, lo | !mask)], false))
            }
            AddrExpr::Net(IpAddr::V6(_), _) => Some((Vec::new(), true)),
            AddrExpr::Set(set) => Some((set.v4.clone(), !set.v6.is_empty())),
            // Negated elements only narrow what the positive ones match.
            AddrExpr::List(l) => {
                let (mut out, mut v6, mut any_pos) = (Vec::new(), false, false);
                for e in l.iter().filter(|e| !matches!(e, AddrExpr::Not(_))) {
                    any_pos = true;
                    let (r, six) = e.v4_bound()?;
                    out.extend(r);
                    v6 |= six;
                }
                any_pos.then_some((out, v6))
            }
        }
    }

    /// True if `a` is in the set.
    pub fn matches(&self, a: &IpAddr) -> bool {
        match self {
            AddrExpr::Any => true,
            AddrExpr::Net(n, p) => net_contains(n, *p, a),
            AddrExpr::Not(e) => !e.matches(a),
            AddrExpr::Set(set) => set.contains(a),
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
    /// `content:!"..."`: the bytes must not be there.
    pub negated: bool,
    /// `startswith`: the match starts the buffer.
    pub startswith: bool,
    /// `endswith`: the match ends the buffer.
    pub endswith: bool,
    /// Positions given as `byte_extract` variables.
    pub vars: VarPos,
    /// `fast_pattern`: the content the prefilter searches for the rule
    /// ([`crate::bufrules`]); `fast_pattern:only` is the same here.
    pub fast_pattern: bool,
    /// `fast_pattern:offset,length`: only those bytes of the content are
    /// searched.
    pub fast_chop: Option<(u16, u16)>,
    /// The content is on `base64_data` (the decoded bytes of the rule's
    /// `base64_decode`): never searched in the stream or a buffer.
    pub in_b64: bool,
    /// The content is on a packet-header buffer ([`HdrList`]): never
    /// searched in the stream or the payload.
    pub in_hdr: bool,
}

/// `offset`, `depth`, `distance`, `within` given as a `byte_extract` variable
/// (its index in [`Rule::vars`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VarPos {
    /// `offset`.
    pub offset: Option<u8>,
    /// `depth`.
    pub depth: Option<u8>,
    /// `distance`.
    pub distance: Option<u8>,
    /// `within`.
    pub within: Option<u8>,
}

impl Content {
    /// True if the content is searched in the payload or the stream (not
    /// on `base64_data` or a packet-header buffer).
    pub fn in_payload(&self) -> bool {
        !self.in_b64 && !self.in_hdr
    }

    /// True if positioned relative to the previous match.
    pub fn is_relative(&self) -> bool {
        self.distance.is_some()
            || self.within.is_some()
            || self.vars.distance.is_some()
            || self.vars.within.is_some()
    }

    /// True if positioned from the buffer start.
    pub fn is_absolute(&self) -> bool {
        self.offset.is_some()
            || self.depth.is_some()
            || self.vars.offset.is_some()
            || self.vars.depth.is_some()
    }

    /// True if only an inspection over a buffer can evaluate it (the
    /// streaming automata cannot).
    pub fn needs_buffer(&self) -> bool {
        self.negated || self.startswith || self.endswith || self.vars != VarPos::default()
    }
}

/// The keywords of one `dns.query` sticky buffer of a rule: each question's
/// name of a DNS request, in dotted form without the trailing dot, inspected
/// on its own (a multi-buffer: the keywords must all match one name). A
/// rule naming the buffer twice has two, which may match two questions
/// (Suricata 7's multi-buffer matching).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DnsQuery {
    /// Payload keywords in rule order (contents by index in [`Rule::contents`]).
    pub items: Vec<Item>,
    /// The transforms of the buffer ([`crate::transform`]); with
    /// `dotprefix` the buffer is the name with a `.` before it.
    pub xf: crate::transform::Transforms,
    /// The names of responses' questions too (`dns.query.name`), not only
    /// requests' (`dns.query`).
    pub responses: bool,
    /// A response's record names instead of questions' (Suricata 8's
    /// `dns.response.rrname`, `dns.answers.rrname`, ...).
    pub records: Option<DnsRecords>,
}

/// Which names of a DNS response a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnsRecords {
    /// `dns.response.rrname`: the questions' names, then each record's
    /// owner name and its data when that is a name (CNAME, PTR, NS, MX,
    /// SOA), in every section.
    All,
    /// `dns.answers.rrname` (and `dns.answer.name`): the answers' owner
    /// names.
    Answers,
    /// `dns.authorities.rrname`.
    Authorities,
    /// `dns.additionals.rrname`.
    Additionals,
}

impl DnsRecords {
    /// True if a name of `section` (0: a question, 1-3: answer, authority,
    /// additional record), data name if `rdata`, is in the buffer.
    pub fn holds(self, section: u8, rdata: bool) -> bool {
        match self {
            DnsRecords::All => true,
            DnsRecords::Answers => section == 1 && !rdata,
            DnsRecords::Authorities => section == 2 && !rdata,
            DnsRecords::Additionals => section == 3 && !rdata,
        }
    }
}

/// A DNS rule's conditions on the message's header and questions
/// (`dns.opcode`, `dns.rcode`, `dns.rrtype`), requests and responses alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DnsChecks {
    /// `dns.opcode`.
    pub opcode: Option<options::NumCmp>,
    /// `dns.rcode`.
    pub rcode: Option<options::NumCmp>,
    /// `dns.rrtype`: some question's type.
    pub rrtype: Option<options::NumCmp>,
    /// `app-layer-event:dns.NAME`: the events ([`crate::dns::events::Event::bit`])
    /// the message must raise, all of them.
    pub events: u8,
}

/// The keywords of a rule on one HTTP buffer ([`crate::http::Buf`]): all must
/// match that buffer of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpList {
    /// The buffer.
    pub buf: crate::http::Buf,
    /// Payload keywords in rule order (contents by index in [`Rule::contents`]).
    pub items: Vec<Item>,
    /// The transforms the buffer goes through before its keywords
    /// ([`crate::transform`]).
    pub xf: crate::transform::Transforms,
}

/// The keywords of a rule on one TLS buffer ([`crate::tls::Buf`]): all must
/// match that buffer of one hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsList {
    /// The buffer.
    pub buf: crate::tls::Buf,
    /// Payload keywords in rule order (contents by index in [`Rule::contents`]).
    pub items: Vec<Item>,
    /// The transforms the buffer goes through before its keywords
    /// ([`crate::transform`]).
    pub xf: crate::transform::Transforms,
}

/// The keywords of a rule on one packet-header buffer
/// ([`crate::pkthdr::HdrBuf`]): all must match that header of the packet
/// the rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HdrList {
    /// The buffer.
    pub buf: crate::pkthdr::HdrBuf,
    /// Payload keywords in rule order (contents by index in [`Rule::contents`]).
    pub items: Vec<Item>,
    /// The transforms the buffer goes through before its keywords
    /// ([`crate::transform`]).
    pub xf: crate::transform::Transforms,
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
    /// Every payload keyword in rule order (contents by index): what a buffer
    /// inspection walks ([`crate::inspect`]).
    pub items: Vec<Item>,
    /// The keywords on the `dns.query` buffer, if the rule has that buffer
    /// (DNS rules only).
    pub dns_query: Vec<DnsQuery>,
    /// `dns.opcode`, `dns.rcode`, `dns.rrtype` (DNS rules only).
    pub dns_checks: DnsChecks,
    /// The keywords on HTTP buffers, one list per buffer (HTTP rules only).
    pub http: Vec<HttpList>,
    /// The keywords on TLS buffers, one list per buffer (TLS rules only).
    pub tls: Vec<TlsList>,
    /// The keywords on `file_data` of an `smtp` rule: inspected over each
    /// attachment's decoded bytes ([`crate::smtp`]), never the stream.
    pub smtp_file: Option<Vec<Item>>,
    /// The keywords on `ssh.proto` (`false`) and `ssh.software` (`true`) of
    /// an `ssh` rule, each over that part of an identification string
    /// ([`crate::applayer::ssh_id`]), never the stream.
    pub ssh: Vec<(bool, Vec<Item>)>,
    /// The keywords on `ip.src` (`false`) and `ip.dst` (`true`): each over
    /// that address of the packet (4 or 16 bytes), a condition of the rule
    /// wherever it matches.
    pub ip: Vec<(bool, Vec<Item>)>,
    /// The keywords on packet-header buffers (`tcp.hdr`, `ipv4.hdr`, ...),
    /// one list per buffer and transforms: conditions on the packet the
    /// rule matches, which must have each header.
    pub hdr: Vec<HdrList>,
    /// `decode-event`: the decoder events the packet must have raised, all
    /// of them ([`crate::decode_events`]).
    pub decode_event: Vec<crate::decode_events::DecodeEvent>,
    /// `tls.version` (TLS rules only).
    pub tls_version: Option<crate::tls::TlsVersion>,
    /// `tls.cert_chain_len` (TLS rules only): the certificates in the
    /// server's Certificate message.
    pub tls_chain_len: Option<options::NumCmp>,
    /// `tls.subject`, `tls.issuerdn`, `tls_cert_notbefore`,
    /// `tls_cert_notafter`, `tls_cert_expired`, `tls_cert_valid` (TLS rules
    /// only): conditions on the server certificate, all to hold.
    pub tls_cert: Vec<crate::tls::legacy::CertCond>,
    /// `ssl_version` conditions (TLS rules only), all to hold.
    pub ssl_version: Vec<crate::tls::legacy::SslVersion>,
    /// `ssl_state` conditions (TLS rules only), all to hold.
    pub ssl_state: Vec<crate::tls::legacy::SslState>,
    /// `app-layer-event:tls.NAME` events (TLS rules only), all to be raised
    /// ([`crate::tls::events::Event::bit`]; 0: none).
    pub tls_events: u16,
    /// A rule of the flow's TLS handshake state alone (`ssl_state`, or
    /// `ssl_version` without other TLS conditions): evaluated on every
    /// packet of the flow ([`crate::tls::legacy::TlsFlow`]), not on TLS
    /// messages.
    pub tls_flow: bool,
    /// `app-layer-event:ssh.invalid_banner` and `ssh.long_banner` (SSH
    /// rules only; [`crate::ssh::event_bit`]), all to be raised: a rule of
    /// these alone, evaluated on every packet of an SSH flow
    /// ([`crate::ssh`]).
    pub ssh_events: u8,
    /// `app-layer-event:ftp.request_command_too_long` and
    /// `ftp.response_command_too_long` (`ftp` rules only;
    /// [`crate::ftp::event_bit`]), all to be raised: a rule of these alone,
    /// fired on the packet whose bytes take a line to the FTP parser's
    /// bound ([`crate::ftp`]).
    pub ftp_events: u8,
    /// `app-layer-event:http.invalid_request_chunk_len` (bit 1),
    /// `http.invalid_response_chunk_len` (bit 2) and
    /// `http.gzip_decompression_failed` (bit 4): a rule of these alone,
    /// fired on the packet whose chunk-size line libhtp calls invalid
    /// ([`crate::http::chunk_line_invalid`]) or whose body bytes fail to
    /// inflate ([`crate::http::inflate::Inflater::take_failed`]), not on
    /// HTTP messages. Bits 8 and 16: a `to_server` rule's
    /// `http.too_many_encoding_layers` and `http.abnormal_ce_header`, all
    /// to be raised by a response, fired on the client's next packet
    /// ([`crate::engine::OWED_CE`]). Bits 32 and 64: `http.range_invalid`
    /// (a `to_server` rule's in 64, owed likewise); 128:
    /// `http.100_continue_already_seen`; 256:
    /// `http.unable_to_match_response_to_request`.
    pub http_body_events: u16,
    /// Names of the `byte_extract` variables.
    pub vars: Vec<String>,
    /// `flowbits` conditions and operations.
    pub flowbits: Vec<Flowbit>,
    /// `flowint` conditions and operations, in rule order.
    pub flowints: Vec<Flowint>,
    /// The `base64_data` keywords, inspected over what the rule's
    /// `base64_decode` decoded ([`crate::inspect`]).
    pub base64: Vec<Item>,
    /// `xbits` conditions and operations ([`crate::xbits`]).
    pub xbits: Vec<Xbit>,
    /// The rule's payload keywords need a buffer inspection (pcre, byte_*,
    /// isdataat, negated contents, ...): it is evaluated over each packet's
    /// bytes, not by the streaming automata alone.
    pub buffer: bool,
    /// `flow:to_server` (Some(true)) or `to_client` (Some(false)).
    pub to_server: Option<bool>,
    /// `flow:established`.
    pub established: bool,
    /// `flow:not_established` (TCP rules, and UDP and DNS ones: a datagram
    /// flow is established once traffic went both ways).
    pub not_established: bool,
    /// `flow:stateless`: matches whatever the flow's state. As in Suricata it
    /// asks nothing of the packet (a content rule with it is a stream rule).
    pub stateless: bool,
    /// Which TCP packets the rule inspects.
    pub stream: StreamMode,
    /// Conditions on the packet itself (`dsize`, `flags`, ...).
    pub checks: PacketChecks,
    /// `app-layer-protocol` conditions ([`crate::alproto`]).
    pub alp: crate::alproto::Checks,
    /// `noalert`: the rule's action applies, but no alert is raised.
    pub noalert: bool,
    /// `threshold` or `detection_filter`: which of its alerts are raised.
    pub threshold: Option<Threshold>,
    /// `sid`.
    pub sid: u32,
    /// `gid` (1 if absent).
    pub gid: u32,
    /// `rev` (1 if absent).
    pub rev: u32,
    /// `classtype`.
    pub classtype: Option<Arc<str>>,
    /// `metadata` (every one of the rule's, joined by `, `), written in
    /// EVE's `alert.metadata`.
    pub metadata: Option<Arc<str>>,
    /// `target`: `Some(true)` for `dest_ip`, `Some(false)` for `src_ip`
    /// (EVE's `alert.source` and `alert.target`).
    pub target: Option<bool>,
    /// `priority`, if the rule sets one.
    pub priority: Option<u8>,
    /// EVE `alert.category`: the classtype's description from the
    /// classification file, else the classtype itself ([`crate::build`]).
    pub category: Option<Arc<str>>,
    /// EVE `alert.severity`: the rule's `priority`, else its classtype's, else 3.
    pub severity: u8,
    /// Where the rule came from.
    pub file: Arc<str>,
    /// Its line.
    pub line: usize,
}

impl Rule {
    /// True for the application-layer rules (`dns`, `http`, `tls`, and
    /// `smtp` ones on `file_data`), inspected over their protocol's buffers
    /// only, never by the stream automata.
    pub fn app_layer(&self) -> bool {
        matches!(self.proto, Proto::Dns | Proto::Http | Proto::Tls)
            || self.smtp_file.is_some()
            || !self.ssh.is_empty()
            || self.ssh_events != 0
            || self.ftp_events != 0
    }

    /// True for a rule whose payload keywords Suricata inspects over each
    /// packet's own payload, never the reassembled TCP stream: one with
    /// `dsize`, `flow:no_stream` (`tcp-pkt`) or a packet-header buffer
    /// (`tcp.hdr`, ...: Suricata's `SIG_FLAG_REQUIRE_PACKET` keeps it from
    /// the stream) and payload keywords, over TCP (`tcp`, `ip`, or
    /// `smtp`/`ftp`/`smb` on flows detected as such). Its contents are
    /// matched within one segment's payload and `dsize` compares that
    /// payload's length.
    pub fn packetwise(&self) -> bool {
        (matches!(self.proto, Proto::Tcp | Proto::Ip) || self.proto.stream_app())
            && !self.items.is_empty()
            && (self.checks.dsize.is_some()
                || self.stream == StreamMode::No
                || !self.hdr.is_empty())
    }

    /// True for a TCP stream rule Suricata inspects over each packet's own
    /// payload as well as over the stream (its `SIG_FLAG_REQUIRE_PACKET` on
    /// a stream rule, detect-parse.c): a content with `depth` or `offset`,
    /// or `stream_size`. Such a rule matches a content at the start of a
    /// later segment, within its `depth` of that segment but not of the
    /// stream; at most once per packet either way.
    pub fn dual(&self) -> bool {
        (matches!(self.proto, Proto::Tcp | Proto::Ip) || self.proto.stream_app())
            && !self.app_layer()
            && !self.packetwise()
            && self.stream != StreamMode::Only
            && !self.items.is_empty()
            && (self.checks.stream_size.is_some()
                || self.contents.iter().any(|c| {
                    c.in_payload()
                        && (c.depth.is_some()
                            || c.offset.is_some()
                            || c.startswith
                            || c.vars.depth.is_some()
                            || c.vars.offset.is_some())
                }))
    }
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
    /// The protocol is not a protocol Suricata knows.
    #[error("unknown protocol \"{0}\"")]
    UnknownProtocol(String),
    /// An application-layer protocol (`http`, `tls`, ...) whose parsing
    /// this IPS does not have yet.
    #[error("unsupported protocol \"{0}\"")]
    UnsupportedProtocol(String),
    /// An action Suricata has and this IPS does not (`reject`: sends resets).
    #[error("unsupported action \"{0}\"")]
    UnsupportedAction(String),
    /// Both `threshold` and `detection_filter`, or either twice.
    #[error("only one threshold or detection_filter per rule")]
    TwoThresholds,
    /// A keyword Suricata does not have.
    #[error("unknown keyword \"{0}\"")]
    UnknownKeyword(String),
    /// The file ends in a line continued with `\`.
    #[error("the file ends inside a rule continued with a backslash")]
    UnendedContinuation,
    /// A rule whose last transform no keyword follows (Suricata refuses it).
    #[error("a transform ends its buffer: no keyword inspects its output")]
    TransformLast,
    /// A transform not right after a sticky buffer (Suricata refuses it).
    #[error("{0} must follow a sticky buffer directly, as in `http.uri; {0}; content:...`")]
    TransformPlacement(String),
    /// A content the buffer's transform can never produce (Suricata
    /// refuses the rule rather than load one that cannot match).
    #[error("content {content:?} cannot occur after transform {transform}")]
    TransformContent {
        /// The content, as written.
        content: String,
        /// The transform whose output cannot hold it.
        transform: &'static str,
    },
    /// A keyword that asks for each packet's own payload (`dsize`) in a rule
    /// that asks for the reassembled stream only (`flow:only_stream`,
    /// `tcp-stream`): the two contradict each other.
    #[error("{0} inspects each packet's payload, but flow:only_stream asks for the stream")]
    PacketPayload(String),
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
    /// `app-layer-protocol` naming a protocol Suricata knows and this IPS
    /// does not detect ([`crate::alproto`]).
    #[error("app-layer-protocol: protocol \"{0}\" is not detected by this IPS")]
    UnsupportedAppProto(String),
    /// A malformed `app-layer-protocol` (bad mode, negated `unknown`, no
    /// protocol, conflicting keywords, a rule already bound to a protocol).
    #[error("app-layer-protocol: {0}")]
    AppLayerProtocol(String),
    /// No `sid` option.
    #[error("missing sid")]
    MissingSid,
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
    /// A `classtype` the loaded classification file does not define.
    #[error("unknown classtype \"{0}\"")]
    UnknownClasstype(String),
    /// A `dataset` or `datarep` whose set cannot be had: its file is
    /// missing or has a bad line, its type disagrees with another rule's,
    /// ... ([`crate::dataset`]).
    #[error("{0}")]
    Dataset(String),
    /// A sticky buffer no keyword inspects (Suricata: "setup buffer ...
    /// but didn't add matches to it").
    #[error("sticky buffer {0} without a keyword after it")]
    EmptyBuffer(String),
}

impl RuleSyntax {
    /// True if the rule is well formed and uses something this IPS does not
    /// support yet (a keyword, protocol, action or flow option); false if the
    /// rule itself is wrong.
    pub fn is_unsupported(&self) -> bool {
        use RuleSyntax as S;
        matches!(
            self,
            S::UnsupportedKeyword(_)
                | S::UnsupportedAppProto(_)
                | S::UnsupportedProtocol(_)
                | S::UnsupportedAction(_)
                | S::UnsupportedFlow(_)
                | S::NegatedContent
                | S::PacketPayload(_)
                | S::DuplicateSid(_)
        )
    }

    /// Why the rule was skipped, as a class for statistics: `keyword pcre`,
    /// `protocol http`, `flow only_frag`, ... for what is not supported (yet);
    /// `error: ...` without the offending value for rules that are wrong.
    pub fn reason(&self) -> String {
        use RuleSyntax as S;
        match self {
            S::UnsupportedKeyword(k) => format!("keyword {k}"),
            S::UnsupportedAppProto(p) => format!("app-layer-protocol {p}"),
            S::UnknownKeyword(k) => format!("unknown keyword {k}"),
            S::UnsupportedProtocol(p) => format!("protocol {p}"),
            S::UnsupportedAction(a) => format!("action {a}"),
            S::UnsupportedFlow(f) => format!("flow {f}"),
            S::NegatedContent => "keyword content (negated)".into(),
            S::PacketPayload(k) => format!("{k} with flow:only_stream"),
            other => {
                let what = match other {
                    S::MissingOptions | S::MissingClose | S::MalformedOptions => "option list",
                    S::HeaderFields(_) | S::UnknownDirection(_) => "header",
                    S::UnknownAction(_) => "unknown action",
                    S::UnknownProtocol(_) => "unknown protocol",
                    S::MissingValue { .. } => "missing value",
                    S::NoPrecedingContent { .. } => "modifier without content",
                    S::EmptyContent => "empty content",
                    S::BadModifier { .. } | S::BadValue { .. } => "bad value",
                    S::TwoThresholds => "two thresholds",
                    S::MissingSid => "missing sid",
                    S::MixedPositioning(_)
                    | S::RelativeFirstContent
                    | S::DepthTooShort(_)
                    | S::WithinTooShort(_)
                    | S::TooManyContents => "content positioning",
                    S::UnterminatedQuote
                    | S::UnendedContinuation
                    | S::MissingSemicolon
                    | S::NotQuoted(_)
                    | S::UnbalancedPipe
                    | S::BadHex(_) => "syntax",
                    S::UnknownVariable(_) | S::VariableTooDeep(_) => "variable",
                    S::UnbalancedBracket(_)
                    | S::EmptyListElement
                    | S::NestTooDeep
                    | S::BadAddress(_)
                    | S::BadPrefix(_)
                    | S::BadPort(_)
                    | S::EmptyPortRange(_) => "address or port",
                    S::DuplicateSid(_) => "duplicate sid",
                    S::UnknownClasstype(_) => "unknown classtype",
                    S::Dataset(_) => "dataset",
                    S::AppLayerProtocol(_) => "app-layer-protocol",
                    S::TransformPlacement(_) | S::TransformContent { .. } | S::TransformLast => {
                        "transform"
                    }
                    S::EmptyBuffer(_) => "empty sticky buffer",
                    _ => "other",
                };
                format!("error: {what}")
            }
        }
    }
}

/// Protocols of Suricata's rule headers this IPS does not inspect yet (mostly
/// application layers): rules for them are skipped with reason `protocol NAME`.
pub const APP_PROTOCOLS: &[&str] = &[
    "http",
    "http1",
    "http2",
    "ftp-data",
    "dcerpc",
    "imap",
    "pop3",
    "msn",
    "jabber",
    "nfs",
    "ntp",
    "tftp",
    "ikev2",
    "ike",
    "krb5",
    "dhcp",
    "snmp",
    "sip",
    "rfb",
    "mqtt",
    "rdp",
    "quic",
    "modbus",
    "dnp3",
    "enip",
    "bittorrent-dht",
    "telnet",
    "websocket",
    "ldap",
    "pgsql",
    "sctp",
];

/// The variables of Suricata's default `suricata.yaml` (`HOME_NET` the private
/// ranges), which rule sets such as ET Open expect.
pub fn suricata_default_vars() -> Vars {
    [
        ("HOME_NET", "[192.168.0.0/16,10.0.0.0/8,172.16.0.0/12]"),
        ("EXTERNAL_NET", "!$HOME_NET"),
        ("HTTP_SERVERS", "$HOME_NET"),
        ("SMTP_SERVERS", "$HOME_NET"),
        ("SQL_SERVERS", "$HOME_NET"),
        ("DNS_SERVERS", "$HOME_NET"),
        ("TELNET_SERVERS", "$HOME_NET"),
        ("AIM_SERVERS", "$EXTERNAL_NET"),
        ("DC_SERVERS", "$HOME_NET"),
        ("DNP3_SERVER", "$HOME_NET"),
        ("DNP3_CLIENT", "$HOME_NET"),
        ("MODBUS_CLIENT", "$HOME_NET"),
        ("MODBUS_SERVER", "$HOME_NET"),
        ("ENIP_CLIENT", "$HOME_NET"),
        ("ENIP_SERVER", "$HOME_NET"),
        ("HTTP_PORTS", "80"),
        ("SHELLCODE_PORTS", "!80"),
        ("ORACLE_PORTS", "1521"),
        ("SSH_PORTS", "22"),
        ("DNP3_PORTS", "20000"),
        ("MODBUS_PORTS", "502"),
        ("FILE_DATA_PORTS", "[$HTTP_PORTS,110,143]"),
        ("FTP_PORTS", "21"),
        ("GENEVE_PORTS", "6081"),
        ("VXLAN_PORTS", "4789"),
        ("TEREDO_PORTS", "3544"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Counts skipped rules by reason ([`RuleSyntax::reason`]): most frequent first,
/// then by name.
pub fn count_reasons(errors: &[RuleError]) -> Vec<(String, usize)> {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for e in errors {
        *by.entry(e.msg.reason()).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// Variables usable as `$NAME` in addresses and ports.
pub type Vars = BTreeMap<String, String>;

/// Parses a rules file's text. Returns the good rules and one error per skipped
/// rule; blank lines and `#` comments are ignored.
pub fn parse_rules(text: &str, file: &str, vars: &Vars) -> (Vec<Rule>, Vec<RuleError>) {
    let file_arc: Arc<str> = file.into();
    let mut rules: Vec<Rule> = Vec::new();
    let mut errors = Vec::new();
    // A rule may go on over several lines, each but the last ending in `\`
    // (Suricata's loader: the backslash is dropped, the next line appended
    // as it is).
    let mut joined = String::new();
    let mut first = 0;
    for (n, raw) in text.lines().enumerate() {
        if joined.is_empty() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            first = n;
        }
        let piece = raw.trim_end();
        if let Some(head) = piece.strip_suffix('\\') {
            joined.push_str(head);
            continue;
        }
        joined.push_str(piece);
        let line = std::mem::take(&mut joined);
        let (line, n) = (line.trim(), first);
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
    if !joined.is_empty() {
        // The file ends inside a continued rule (Suricata drops it
        // silently).
        errors.push(RuleError {
            file: file.into(),
            line: first + 1,
            msg: RuleSyntax::UnendedContinuation,
        });
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
        a @ ("reject" | "rejectsrc" | "rejectdst" | "rejectboth") => {
            return Err(RuleSyntax::UnsupportedAction(a.into()))
        }
        a => return Err(RuleSyntax::UnknownAction(a.into())),
    };
    // `ipv4`, `ipv6`, `icmpv4`, `icmpv6`: `ip` and `icmp` of one family.
    let family = match toks[1] {
        "ipv4" | "icmpv4" => Some(false),
        "ipv6" | "icmpv6" => Some(true),
        _ => None,
    };
    let (proto, stream) = match toks[1] {
        "ipv4" | "ipv6" => (Proto::Ip, StreamMode::Default),
        "icmpv4" | "icmpv6" => (Proto::Icmp, StreamMode::Default),
        "tcp" => (Proto::Tcp, StreamMode::Default),
        "tcp-pkt" => (Proto::Tcp, StreamMode::No),
        "tcp-stream" => (Proto::Tcp, StreamMode::Only),
        "udp" => (Proto::Udp, StreamMode::Default),
        "icmp" => (Proto::Icmp, StreamMode::Default),
        "ip" | "pkthdr" => (Proto::Ip, StreamMode::Default),
        "dns" => (Proto::Dns, StreamMode::Default),
        "http" | "http1" => (Proto::Http, StreamMode::Default),
        "tls" | "ssl" => (Proto::Tls, StreamMode::Default),
        "smtp" => (Proto::Smtp, StreamMode::Default),
        "ftp" => (Proto::Ftp, StreamMode::Default),
        "smb" => (Proto::Smb, StreamMode::Default),
        "ssh" => (Proto::Ssh, StreamMode::Default),
        p if APP_PROTOCOLS.contains(&p) => return Err(RuleSyntax::UnsupportedProtocol(p.into())),
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
        items: Vec::new(),
        dns_query: Vec::new(),
        dns_checks: DnsChecks::default(),
        http: Vec::new(),
        tls: Vec::new(),
        smtp_file: None,
        ssh: Vec::new(),
        ip: Vec::new(),
        hdr: Vec::new(),
        decode_event: Vec::new(),
        metadata: None,
        target: None,
        tls_version: None,
        tls_chain_len: None,
        tls_cert: Vec::new(),
        ssl_version: Vec::new(),
        ssl_state: Vec::new(),
        tls_events: 0,
        tls_flow: false,
        ssh_events: 0,
        ftp_events: 0,
        http_body_events: 0,
        vars: Vec::new(),
        flowbits: Vec::new(),
        flowints: Vec::new(),
        base64: Vec::new(),
        xbits: Vec::new(),
        buffer: false,
        to_server: None,
        established: false,
        not_established: false,
        stateless: false,
        stream,
        checks: PacketChecks {
            ipv6: family,
            ..PacketChecks::default()
        },
        alp: crate::alproto::Checks::default(),
        noalert: false,
        threshold: None,
        sid: 0,
        gid: 1,
        rev: 1,
        classtype: None,
        priority: None,
        category: None,
        severity: 3,
        file: "".into(),
        line: 0,
    };
    let mut cx = options::ParseCx::default();
    for opt in split_options(&line[open + 1..close])? {
        let (name, val) = match opt.find(':') {
            Some(i) => (opt[..i].trim(), Some(opt[i + 1..].trim())),
            None => (opt.trim(), None),
        };
        options::apply(&mut rule, name, val, &mut cx)?;
    }
    if !cx.has_sid {
        return Err(RuleSyntax::MissingSid);
    }
    options::named_buffers_used(&rule, &cx)?;
    absolute_first(&rule.items, &mut rule.contents);
    if cx.xf_pending {
        return Err(RuleSyntax::TransformLast);
    }
    for q in &rule.dns_query {
        absolute_first(&q.items, &mut rule.contents);
    }
    for l in &rule.http {
        absolute_first(&l.items, &mut rule.contents);
    }
    for l in &rule.hdr {
        absolute_first(&l.items, &mut rule.contents);
    }
    for l in &rule.tls {
        absolute_first(&l.items, &mut rule.contents);
        // The serial is printed in upper case and the JA3 hashes in lower
        // case: Suricata folds the contents of these buffers (untransformed
        // ones only) to match.
        let fold: fn(&mut [u8]) = match l.buf {
            crate::tls::Buf::CertSerial => <[u8]>::make_ascii_uppercase,
            // Suricata lowercases these contents and refuses one that is
            // not a whole fingerprint ([`options::validate`]).
            crate::tls::Buf::CertFingerprint => <[u8]>::make_ascii_lowercase,
            crate::tls::Buf::Ja3Hash | crate::tls::Buf::Ja3sHash => <[u8]>::make_ascii_lowercase,
            _ => continue,
        };
        if l.xf.is_empty() {
            for i in &l.items {
                if let Item::Content(k) = i {
                    fold(&mut rule.contents[*k as usize].bytes);
                }
            }
        }
    }
    absolute_first(&rule.base64, &mut rule.contents);
    options::validate(&rule)?;
    rule.tls_flow = options::tls_flow(&rule)?;
    options::owed_response_events(&mut rule)?;
    options::http_body_event_alone(&rule)?;
    options::ssh_events_alone(&rule)?;
    options::ftp_events_alone(&rule)?;
    if !rule.alp.is_empty() {
        rule.alp.pd_only = pd_only(&rule);
    }
    // DNS and HTTP rules are always inspected over their buffers
    // ([`crate::dns`], [`crate::http`]), never by the stream automata.
    // A rule with a packet-header buffer is inspected over buffers too:
    // its payload keywords are not the only contents, which the stream
    // automata's in-order matching assumes.
    rule.buffer = matches!(rule.proto, Proto::Dns | Proto::Http | Proto::Tls)
        || !rule.hdr.is_empty()
        || rule.contents.iter().any(Content::needs_buffer)
        || rule.items.iter().any(|i| !matches!(i, Item::Content(_)));
    Ok(rule)
}

/// True if `app-layer-protocol` is the rule's only condition besides its
/// header and a `flow` direction (Suricata's `SignatureIsPDOnly`: no
/// payload keyword or buffer, nothing else in its match list; `flowbits`
/// operations run after a match and do not count).
fn pd_only(r: &Rule) -> bool {
    matches!(r.proto, Proto::Tcp | Proto::Udp | Proto::Icmp | Proto::Ip)
        && r.stream == StreamMode::Default
        && r.items.is_empty()
        && r.contents.is_empty()
        && r.dns_query.is_empty()
        && r.dns_checks == DnsChecks::default()
        && r.http.is_empty()
        && r.tls.is_empty()
        && r.smtp_file.is_none()
        && r.ssh.is_empty()
        && r.ssh_events == 0
        && r.ftp_events == 0
        && r.ip.is_empty()
        && r.hdr.is_empty()
        && r.base64.is_empty()
        && r.tls_version.is_none()
        && r.tls_chain_len.is_none()
        && r.tls_cert.is_empty()
        && r.ssl_version.is_empty()
        && r.ssl_state.is_empty()
        && r.checks.is_empty()
        && !r.established
        && !r.not_established
        && !r.stateless
        && r.flowints.is_empty()
        && r.xbits.is_empty()
        && r.flowbits
            .iter()
            .all(|f| !matches!(f, Flowbit::IsSet(_) | Flowbit::IsNotSet(_)))
}

/// A relative first keyword of a buffer is relative to the buffer start
/// (Suricata's reading, common in ET Open): `distance`/`within` become
/// `offset`/`depth`.
fn absolute_first(items: &[Item], contents: &mut [Content]) {
    if let Some(Item::Content(k)) = items.first() {
        let c = &mut contents[*k as usize];
        if c.vars == VarPos::default() && c.offset.is_none() && c.depth.is_none() {
            if let Some(d) = c.distance.take() {
                c.offset = Some(d.max(0) as u32);
            }
            if let Some(w) = c.within.take() {
                c.depth = Some(w);
            }
        }
    }
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
        let list: Vec<AddrExpr> = items
            .into_iter()
            .map(|i| parse_addr(i, vars, depth + 1))
            .collect::<Result<_, _>>()?;
        let nets: Vec<(IpAddr, u8)> = list
            .iter()
            .map_while(|e| match e {
                AddrExpr::Net(a, p) => Some((*a, *p)),
                _ => None,
            })
            .collect();
        if nets.len() == list.len() && nets.len() >= NET_SET_MIN {
            return Ok(AddrExpr::Set(NetSet::new(&nets)));
        }
        return Ok(AddrExpr::List(list));
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
mod tests;
