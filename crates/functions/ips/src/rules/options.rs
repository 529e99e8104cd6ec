//! Rule options: the table of every Suricata keyword with what this IPS does with
//! it, each supported keyword's parsing, and the per-packet checks
//! (`dsize`, `flags`, `itype`, `icode`, `ip_proto`, `ttl`, `sameip`).
//!
//! A rule is loaded only if every keyword it uses is enforced, a modifier that
//! cannot change whether the rule matches, or information that cannot change a
//! match; any other keyword skips the rule with the keyword as the reason.

use super::payload::{self, Item};
use super::{unquote, Content, Proto, Rule, RuleSyntax};
use sluice_wire::ipv4::option_bit as ipopt_bit;

/// What the IPS does with an option keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Evaluated exactly as Suricata evaluates it.
    Enforced,
    /// Information only (`msg`, `reference`, ...): cannot change whether or where a
    /// rule matches, so it is accepted; some feed the alert (`msg`, `sid`, ...).
    Ignored,
    /// A modifier of how the engine searches (`fast_pattern`, `rawbytes`,
    /// `prefilter`): cannot change whether a rule matches, so it is honoured by
    /// searching every content anyway.
    Modifier,
    /// A keyword this IPS cannot evaluate yet: the rule is skipped, and the keyword
    /// is the reason.
    Unsupported,
}

use Status::{Enforced as E, Ignored as I, Modifier as M, Unsupported as U};

/// Every rule keyword of Suricata 7 (and the older Snort-style spellings ET Open
/// still carries) with its status here. Keywords not in this table are reported
/// as unknown.
pub const KEYWORDS: &[(&str, Status)] = &[
    // Information.
    ("msg", I),
    ("sid", I),
    ("rev", I),
    ("gid", I),
    ("classtype", I),
    ("priority", I),
    ("reference", I),
    ("metadata", I),
    ("target", I),
    // Logs further packets of the session after a match; never changes a match
    // or a verdict.
    ("tag", I),
    // Payload, enforced.
    ("content", E),
    ("nocase", E),
    ("offset", E),
    ("depth", E),
    ("distance", E),
    ("within", E),
    ("fast_pattern", M),
    ("rawbytes", M),
    ("prefilter", M),
    ("startswith", E),
    ("endswith", E),
    ("isdataat", E),
    ("byte_test", E),
    ("byte_jump", E),
    ("byte_extract", E),
    ("pcre", E),
    ("flowbits", E),
    // Per packet, enforced.
    ("flow", E),
    ("dsize", E),
    ("flags", E),
    ("tcp.flags", E),
    ("itype", E),
    ("icode", E),
    ("ip_proto", E),
    ("ttl", E),
    ("sameip", E),
    ("noalert", E),
    ("threshold", E),
    ("detection_filter", E),
    // Sticky buffers and what only applies to one ([`super::DnsQuery`]).
    ("dns.query", E),
    ("dns_query", E),
    ("pkt_data", E),
    ("bsize", E),
    ("dotprefix", E),
    // HTTP sticky buffers, Snort-style modifiers and `urilen` ([`crate::http`]).
    ("http.uri", E),
    ("http.uri.raw", E),
    ("http.method", E),
    ("http.host", E),
    ("http.host.raw", E),
    ("http.user_agent", E),
    ("http.header", E),
    ("http.header.raw", E),
    ("http.header_names", E),
    ("http.cookie", E),
    ("http.stat_code", E),
    ("http.stat_msg", E),
    ("http.request_body", E),
    ("http.response_body", E),
    ("http.request_line", E),
    ("http.response_line", E),
    ("http.content_type", E),
    ("http.content_len", E),
    ("http.referer", E),
    ("http.location", E),
    ("http.server", E),
    ("http.start", E),
    ("http.protocol", E),
    ("http.accept", E),
    ("http.accept_enc", E),
    ("http.accept_lang", E),
    ("http.connection", E),
    ("http_uri", E),
    ("http_raw_uri", E),
    ("http_method", E),
    ("http_host", E),
    ("http_raw_host", E),
    ("http_user_agent", E),
    ("http_header", E),
    ("http_raw_header", E),
    ("http_header_names", E),
    ("http_cookie", E),
    ("http_stat_code", E),
    ("http_stat_msg", E),
    ("http_client_body", E),
    ("http_server_body", E),
    ("http_request_line", E),
    ("http_response_line", E),
    ("http_content_type", E),
    ("http_content_len", E),
    ("http_referer", E),
    ("http_location", E),
    ("http_server", E),
    ("http_start", E),
    ("http_protocol", E),
    ("http_accept", E),
    ("http_accept_enc", E),
    ("http_accept_lang", E),
    ("http_connection", E),
    // TLS sticky buffers ([`crate::tls`]).
    ("tls.sni", E),
    ("tls_sni", E),
    ("ja3.hash", E),
    ("ja3_hash", E),
    ("ja3.string", E),
    ("ja3_string", E),
    ("ja3s.hash", E),
    ("ja3s.string", E),
    ("tls.certs", E),
    ("tls.cert_subject", E),
    ("tls_cert_subject", E),
    ("tls.cert_issuer", E),
    ("tls_cert_issuer", E),
    ("tls.cert_serial", E),
    ("tls_cert_serial", E),
    ("file_data", E),
    ("file.data", E),
    ("urilen", E),
    ("uricontent", E),
    // Not yet.
    ("byte_math", E),
    ("entropy", U),
    ("replace", U),
    ("flowint", E),
    ("xbits", E),
    ("hostbits", E),
    ("stream_size", E),
    ("stream-event", E),
    ("app-layer-event", E),
    ("app-layer-protocol", E),
    ("decode-event", E),
    ("engine-event", U),
    ("fragbits", E),
    ("fragoffset", E),
    ("id", E),
    ("ipopts", E),
    ("seq", E),
    ("ack", E),
    ("window", E),
    ("tcp.mss", E),
    ("ipv4-csum", E),
    ("tcpv4-csum", E),
    ("tcpv6-csum", E),
    ("udpv4-csum", E),
    ("udpv6-csum", E),
    ("icmpv4-csum", E),
    ("icmpv6-csum", E),
    ("tcp.hdr", E),
    ("icmp_id", E),
    ("icmp_seq", E),
    ("icmpv4.hdr", E),
    ("icmpv6.hdr", E),
    ("icmpv6.mtu", E),
    ("ipv4.hdr", E),
    ("ipv6.hdr", E),
    ("udp.hdr", E),
    ("tos", E),
    ("geoip", U),
    ("iprep", U),
    ("datarep", E),
    ("dataset", E),
    ("ip.src", E),
    ("ip.dst", E),
    ("base64_decode", E),
    ("base64_data", E),
    ("asn1", E),
    ("lua", U),
    ("luajit", U),
    ("filestore", U),
    ("filename", U),
    ("fileext", U),
    ("filemagic", U),
    ("filemd5", U),
    ("filesha1", U),
    ("filesha256", U),
    ("filesize", U),
    ("file.name", U),
    ("stream_data", U),
    ("pcrexform", E),
    ("to_md5", E),
    ("to_sha1", E),
    ("to_sha256", E),
    ("to_lowercase", E),
    ("to_uppercase", E),
    ("strip_whitespace", E),
    ("compress_whitespace", E),
    ("url_decode", E),
    ("xor", E),
    ("header_lowercase", E),
    ("strip_pseudo_headers", E),
    ("transform", U),
    ("requires", U),
    ("config", U),
    ("bypass", U),
    ("rpc", U),
    ("ssh_proto", E),
    ("ssh.proto", E),
    ("ssh_version", U),
    ("ssh.software", E),
    ("ssh_software", E),
    ("ssh.softwareversion", U),
    ("ssh.protoversion", U),
    ("ssh.hassh", U),
    ("ssh.hassh.server", U),
    ("ssh.hassh.string", U),
    ("ssh.hassh.server.string", U),
    ("ssl_version", E),
    ("ssl_state", E),
    ("tls.version", E),
    ("tls.subject", E),
    ("tls.issuerdn", E),
    ("tls.fingerprint", E),
    // Stores the certificate on disk after a match (a post-match action):
    // never changes whether a rule matches; it only binds the rule to TLS.
    ("tls.store", I),
    ("tls_store", I),
    ("tls.cert_fingerprint", E),
    ("tls_cert_fingerprint", E),
    ("tls.cert_chain_len", E),
    ("tls_cert_notbefore", E),
    ("tls_cert_notafter", E),
    ("tls_cert_expired", E),
    ("tls_cert_valid", E),
    ("tls.random", E),
    ("tls.random_time", E),
    ("tls.random_bytes", E),
    ("tls.alpn", E),
    ("tls.subjectaltname", E),
    ("ja4.hash", U),
    ("dns.opcode", E),
    ("dns.answer.name", E),
    ("dns.answers.rrname", E),
    ("dns.authorities.rrname", E),
    ("dns.additionals.rrname", E),
    ("dns.response.rrname", E),
    ("dns.query.name", E),
    ("dns.queries.rrname", E),
    ("dns.rrtype", E),
    ("dns.rcode", E),
    ("smb.named_pipe", U),
    ("smb.share", U),
    ("smb.ntlmssp_user", U),
    ("smb.ntlmssp_domain", U),
    ("smb.version", U),
    ("dce_iface", U),
    ("dce_opnum", U),
    ("dce_stub_data", U),
    ("krb5_msg_type", U),
    ("krb5_cname", U),
    ("krb5_sname", U),
    ("krb5_err_code", U),
    ("snmp.community", U),
    ("snmp.pdu_type", U),
    ("snmp.version", U),
    ("sip.method", U),
    ("sip.uri", U),
    ("sip.stat_code", U),
    ("ftpbounce", U),
    ("ftpdata_command", U),
    ("ftp.command", U),
    ("ftp.command_data", U),
    ("modbus", U),
    ("dnp3_func", U),
    ("dnp3_ind", U),
    ("dnp3_obj", U),
    ("dnp3_data", U),
    ("enip_command", U),
    ("cip_service", U),
    ("template", U),
    ("quic.version", U),
    ("quic.sni", U),
    ("quic.ua", U),
    ("quic.cyu.hash", U),
    ("quic.cyu.string", U),
    ("mqtt.type", U),
    ("mqtt.topic", U),
    ("rfb.name", U),
    ("rfb.secresult", U),
    ("rfb.sectype", U),
    ("nfs_procedure", U),
    ("nfs.version", U),
    ("http2.frametype", U),
    ("http2.header", U),
    ("http2.header_name", U),
    ("smtp.helo", U),
    ("smtp.mail_from", U),
    ("smtp.rcpt_to", U),
    ("email.from", U),
    ("email.subject", U),
    ("email.to", U),
    ("email.cc", U),
    ("email.x_mailer", U),
    ("email.url", U),
    ("email.received", U),
    ("email.date", U),
    ("email.message_id", U),
    ("http.request_header", U),
    ("http.response_header", U),
];

/// The status of `keyword`, or None if Suricata has no such keyword.
pub fn status(keyword: &str) -> Option<Status> {
    KEYWORDS
        .iter()
        .find(|(k, _)| *k == keyword)
        .map(|&(_, s)| s)
}

/// A numeric condition as Suricata writes it: `N`, `<N`, `<=N`, `>N`, `>=N`,
/// `!N`, and the exclusive ranges `A<>B` and `A-B` (A < x < B).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumCmp {
    /// Lowest value that matches.
    pub lo: u32,
    /// Highest value that matches (below `lo`: nothing matches).
    pub hi: u32,
    /// The condition is inverted (`!`).
    pub not: bool,
}

impl NumCmp {
    /// True if `v` satisfies the condition.
    #[inline]
    pub fn matches(&self, v: u32) -> bool {
        (self.lo <= v && v <= self.hi) != self.not
    }

    /// Parses `s`; values above `max` are refused (`None`).
    pub fn parse(s: &str, max: u32) -> Option<NumCmp> {
        let s = s.trim();
        let num = |x: &str| -> Option<u32> {
            let x = x.trim();
            if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            x.parse::<u32>().ok().filter(|&n| n <= max)
        };
        let (not, s) = match s.strip_prefix('!') {
            Some(r) => (true, r.trim_start()),
            None => (false, s),
        };
        let range = |lo: u32, hi: u32| Some(NumCmp { lo, hi, not });
        if let Some((a, b)) = s.split_once("<>").or_else(|| s.split_once('-')) {
            let (a, b) = (num(a)?, num(b)?);
            // Suricata refuses a range without room inside it.
            if a >= b {
                return None;
            }
            return range(a + 1, b - 1);
        }
        if let Some(r) = s.strip_prefix("<=") {
            return range(0, num(r)?);
        }
        if let Some(r) = s.strip_prefix(">=") {
            return range(num(r)?, max);
        }
        if let Some(r) = s.strip_prefix('<') {
            let n = num(r)?;
            return if n == 0 { range(1, 0) } else { range(0, n - 1) };
        }
        if let Some(r) = s.strip_prefix('>') {
            let n = num(r)?;
            return if n >= max {
                range(1, 0)
            } else {
                range(n + 1, max)
            };
        }
        if let Some(r) = s.strip_prefix('=') {
            let n = num(r)?;
            return range(n, n);
        }
        let n = num(s)?;
        range(n, n)
    }
}

/// How `flags` compares the packet's TCP flags with the rule's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagMode {
    /// Exactly these flags (after the mask).
    Exact,
    /// `+`: these flags, others may be set too.
    All,
    /// `*`: any of these flags.
    Any,
    /// `!`: not all of these flags.
    Not,
}

/// `flags:[+*!]FLAGS[,IGNORED]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFlags {
    /// How to compare.
    pub mode: FlagMode,
    /// The rule's flags (`0` alone: none).
    pub flags: u8,
    /// Flags that take part in the comparison (all but the ignored ones).
    pub mask: u8,
}

impl TcpFlags {
    /// Suricata's comparison (detect-flags.c).
    #[inline]
    pub fn matches(&self, pflags: u8) -> bool {
        if self.flags == 0 && pflags != 0 {
            return self.mode == FlagMode::Not;
        }
        let f = pflags & self.mask;
        match self.mode {
            FlagMode::Any => f & self.flags != 0,
            FlagMode::All => f & self.flags == self.flags,
            FlagMode::Not => f & self.flags != self.flags,
            FlagMode::Exact => f == self.flags,
        }
    }

    /// True if it names SYN other than with `!` (Suricata then evaluates a
    /// rule without contents on SYN segments only).
    pub fn needs_syn(&self) -> bool {
        self.mode != FlagMode::Not && self.flags & 0x02 != 0
    }

    /// Parses the value of `flags`.
    pub fn parse(v: &str) -> Option<TcpFlags> {
        let v = v.trim();
        let (flags, ignored) = match v.split_once(',') {
            Some((f, i)) => (f.trim(), Some(i.trim())),
            None => (v, None),
        };
        let (mut mode, flags) = match flags.chars().next()? {
            '+' => (FlagMode::All, &flags[1..]),
            '*' => (FlagMode::Any, &flags[1..]),
            '!' => (FlagMode::Not, &flags[1..]),
            _ => (FlagMode::Exact, flags),
        };
        // Suricata reads a modifier among the flags too (`SA+` is `+SA`).
        let mut named = String::with_capacity(flags.len());
        for c in flags.chars() {
            match c {
                '+' => mode = FlagMode::All,
                '*' => mode = FlagMode::Any,
                '!' => mode = FlagMode::Not,
                c => named.push(c),
            }
        }
        let flags = named.as_str();
        let bits = |s: &str| -> Option<u8> {
            let mut b = 0u8;
            for c in s.trim().chars() {
                b |= match c.to_ascii_uppercase() {
                    'F' => 0x01,
                    'S' => 0x02,
                    'R' => 0x04,
                    'P' => 0x08,
                    'A' => 0x10,
                    'U' => 0x20,
                    // The two bits once reserved: ECE and CWR today.
                    'E' | '2' => 0x40,
                    'C' | '1' => 0x80,
                    '0' => 0,
                    _ => return None,
                };
            }
            Some(b)
        };
        let flags_str = flags.trim();
        if flags_str.is_empty() || (flags_str.contains('0') && flags_str.len() > 1) {
            return None;
        }
        Some(TcpFlags {
            mode,
            flags: bits(flags_str)?,
            mask: match ignored {
                Some(i) if !i.is_empty() => !bits(i)?,
                Some(_) => return None,
                None => 0xff,
            },
        })
    }
}

/// What the per-packet checks read from a packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketInfo {
    /// Transport payload length.
    pub dsize: u16,
    /// TCP flags (TCP only).
    pub tcp_flags: u8,
    /// ICMP type and code (ICMP only).
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// Source address equals destination address.
    pub sameip: bool,
    /// TCP window, sequence and acknowledgement numbers (TCP only).
    pub window: u16,
    /// TCP sequence number.
    pub seq: u32,
    /// TCP acknowledgement number.
    pub ack: u32,
    /// IPv4 header fields, for an IPv4 packet: (TOS, identification, flags
    /// and fragment offset as sent).
    pub ipv4: Option<(u8, u16, u16)>,
    /// The IPv4 options present as they arrived
    /// ([`sluice_wire::ipv4::option_bit`]).
    pub ipopts: u16,
    /// ICMP identifier and sequence number, for the ICMP messages that
    /// have them (echo, timestamp, information, address mask).
    pub icmp_idseq: Option<(u16, u16)>,
    /// An IPv6 packet.
    pub ipv6: bool,
    /// The TCP MSS option's value, if the segment carries one.
    pub mss: Option<u16>,
    /// For a TCP packet of a tracked stream, each direction's sequence
    /// space so far as Suricata counts it for `stream_size` (`next_seq -
    /// isn`: 1 for the SYN plus the bytes delivered in sequence, 0 before
    /// the direction's first segment): `[client, server]`.
    pub stream_size: Option<[u32; 2]>,
    /// The checksums' state ([`CSUM_KNOWN`], [`CSUM_IP_OK`],
    /// [`CSUM_L4_OK`]): computed only when a rule asks (0: unknown).
    pub csum: u8,
    /// The fragment offset as Suricata's detect-fragoffset.c reads it: the
    /// IPv4 header's field (in units of 8 bytes, 0 when not fragmented);
    /// for IPv6, the Fragment header's offset in bytes, and no value
    /// without one.
    pub frag_off: Option<u16>,
    /// The MTU of an ICMPv6 Packet Too Big message (type 2, code 0), as
    /// Suricata's detect-icmpv6-mtu.c reads it.
    pub icmpv6_mtu: Option<u32>,
    /// The stream events the TCP packet raised
    /// ([`sluice_reassembly::events`]); computed only when a rule asks.
    pub stream_events: u32,
    /// The protocol-detection events the packet's stream bytes raised
    /// ([`crate::alproto::on_bytes`]); computed only when a rule asks.
    pub applayer_events: u8,
}

/// Which stream `stream_size` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSide {
    /// The bytes the server sent.
    Server,
    /// The bytes the client sent.
    Client,
    /// Both directions must satisfy the comparison.
    Both,
    /// One of them must.
    Either,
}

/// `stream_size:SIDE,OP,N` (Suricata's detect-stream_size.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSize {
    /// Which stream.
    pub side: StreamSide,
    /// The comparison, `<`, `<=`, `=`, `!=`, `>=`, `>` against N.
    pub cmp: NumCmp,
}

impl StreamSize {
    /// Parses the keyword's value: a side, an operator among `<`, `<=`,
    /// `=` (`==`), `!=`, `>=`, `>`, and a number up to 2^32 - 1.
    pub fn parse(v: &str) -> Option<StreamSize> {
        let parts: Vec<&str> = v.split(',').map(str::trim).collect();
        let [side, op, n] = parts[..] else {
            return None;
        };
        let side = match side {
            "server" => StreamSide::Server,
            "client" => StreamSide::Client,
            "both" => StreamSide::Both,
            "either" => StreamSide::Either,
            _ => return None,
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u32 = n.parse().ok()?;
        let cmp = match op {
            "=" | "==" => NumCmp::parse(&format!("={n}"), u32::MAX)?,
            "<" | "<=" | ">" | ">=" => NumCmp::parse(&format!("{op}{n}"), u32::MAX)?,
            "!=" => NumCmp::parse(&format!("!{n}"), u32::MAX)?,
            _ => return None,
        };
        Some(StreamSize { side, cmp })
    }

    /// True if the sizes (`[client, server]`) satisfy the condition.
    #[inline]
    pub fn matches(&self, sizes: [u32; 2]) -> bool {
        let [c, s] = sizes.map(|x| self.cmp.matches(x));
        match self.side {
            StreamSide::Client => c,
            StreamSide::Server => s,
            StreamSide::Both => c && s,
            StreamSide::Either => c || s,
        }
    }
}

/// The per-packet conditions of a rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketChecks {
    /// `dsize`.
    pub dsize: Option<NumCmp>,
    /// `flags` (only TCP packets match).
    pub flags: Option<TcpFlags>,
    /// `itype` (only ICMP packets match).
    pub itype: Option<NumCmp>,
    /// `icode` (only ICMP packets match).
    pub icode: Option<NumCmp>,
    /// `ip_proto`.
    pub ip_proto: Option<NumCmp>,
    /// `ttl`.
    pub ttl: Option<NumCmp>,
    /// `sameip`.
    pub sameip: bool,
    /// `stream_size` (only TCP packets of a tracked stream match).
    pub stream_size: Option<StreamSize>,
    /// `window` (TCP only).
    pub window: Option<NumCmp>,
    /// `seq` (TCP only).
    pub seq: Option<u32>,
    /// `ack` (TCP only).
    pub ack: Option<u32>,
    /// `id` (IPv4 only).
    pub id: Option<NumCmp>,
    /// `tos` (IPv4 only).
    pub tos: Option<NumCmp>,
    /// `fragbits` (IPv4 only).
    pub fragbits: Option<FragBits>,
    /// `fragoffset` ([`PacketInfo::frag_off`]).
    pub fragoffset: Option<NumCmp>,
    /// `ipopts`: the option's bit ([`sluice_wire::ipv4::option_bit`]), or
    /// every bit for `any`.
    pub ipopts: Option<u16>,
    /// `icmp_id` (ICMP messages with an identifier only).
    pub icmp_id: Option<NumCmp>,
    /// `icmp_seq` (likewise).
    pub icmp_seq: Option<NumCmp>,
    /// The rule's protocol names a family (`ipv4`, `icmpv6`, ...):
    /// `Some(true)` for IPv6.
    pub ipv6: Option<bool>,
    /// `tcp.mss` (only segments with the option match).
    pub mss: Option<NumCmp>,
    /// `ipv4-csum`, `tcpv4-csum`, ... (Suricata's detect-csum.c).
    pub csum: Option<Csum>,
    /// `icmpv6.mtu` (ICMPv6 Packet Too Big messages of code 0 only).
    pub icmpv6_mtu: Option<NumCmp>,
    /// `stream-event`: the events' bits, all of which the packet must
    /// have raised (0: none asked).
    pub stream_events: u32,
    /// `app-layer-event:applayer_*`: protocol detection's events
    /// ([`crate::alproto`]), all of which the packet must have raised.
    pub applayer_events: u8,
}

/// A checksum keyword: `KIND-csum:valid|invalid` (Suricata's
/// detect-csum.c). Only packets of its protocol and family match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Csum {
    /// Which checksum: the IPv4 header's, or a transport's.
    pub kind: CsumKind,
    /// `valid` (true) or `invalid`.
    pub valid: bool,
}

/// The checksum a [`Csum`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsumKind {
    /// The IPv4 header's.
    Ipv4,
    /// TCP over IPv4 or IPv6 (`true`).
    Tcp(bool),
    /// UDP over IPv4 or IPv6.
    Udp(bool),
    /// ICMP over IPv4, ICMPv6 over IPv6.
    Icmp(bool),
}

/// [`PacketInfo::csum`]: the checksums were computed.
pub const CSUM_KNOWN: u8 = 1;
/// The IPv4 header's checksum is right (IPv4 packets).
pub const CSUM_IP_OK: u8 = 2;
/// The transport's checksum is right.
pub const CSUM_L4_OK: u8 = 4;

impl Csum {
    /// True if the packet (of IP protocol `proto`) is of the keyword's kind
    /// and its checksum is as the keyword says.
    fn matches(&self, proto: u8, p: &PacketInfo) -> bool {
        if p.csum & CSUM_KNOWN == 0 {
            return false;
        }
        let (ok, fits) = match self.kind {
            CsumKind::Ipv4 => (p.csum & CSUM_IP_OK != 0, !p.ipv6),
            CsumKind::Tcp(v6) => (p.csum & CSUM_L4_OK != 0, proto == 6 && p.ipv6 == v6),
            CsumKind::Udp(v6) => (p.csum & CSUM_L4_OK != 0, proto == 17 && p.ipv6 == v6),
            CsumKind::Icmp(v6) => (
                p.csum & CSUM_L4_OK != 0,
                proto == if v6 { 58 } else { 1 } && p.ipv6 == v6,
            ),
        };
        fits && ok == self.valid
    }
}

/// `fragbits:[*+!]<MDR>` (Suricata's detect-fragbits.c): the IPv4 header's
/// reserved (R), don't-fragment (D) and more-fragments (M) bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragBits {
    /// How the bits compare ([`FlagMode`]: exactly, plus others, any of,
    /// none of).
    pub mode: FlagMode,
    /// The bits, as in the header's flags field (R 0x8000, D 0x4000, M
    /// 0x2000).
    pub bits: u16,
}

impl FragBits {
    /// Parses the keyword's value.
    pub fn parse(v: &str) -> Option<FragBits> {
        let v = v.trim();
        let (mode, rest) = match v.chars().next()? {
            '+' => (FlagMode::All, &v[1..]),
            '*' => (FlagMode::Any, &v[1..]),
            '!' => (FlagMode::Not, &v[1..]),
            _ => (FlagMode::Exact, v),
        };
        let mut bits = 0u16;
        // A modifier after the bits is ignored, as Suricata's parser does
        // (`D+` is exactly D).
        for c in rest.trim().trim_end_matches(['+', '*', '!']).chars() {
            bits |= match c {
                'R' | 'r' => 0x8000,
                'D' | 'd' => 0x4000,
                'M' | 'm' => 0x2000,
                _ => return None,
            };
        }
        (bits != 0).then_some(FragBits { mode, bits })
    }

    /// True if the header's flags-and-offset field `field` satisfies it.
    pub fn matches(&self, field: u16) -> bool {
        let f = field & 0xe000;
        match self.mode {
            FlagMode::Exact => f == self.bits,
            // These bits and at least one other (detect-fragbits.c; unlike
            // `flags`' `+`).
            FlagMode::All => f & self.bits == self.bits && f != self.bits,
            FlagMode::Any => f & self.bits != 0,
            // Not all of them (detect-fragbits.c's `!`, as `flags`').
            FlagMode::Not => f & self.bits != self.bits,
        }
    }
}

/// `ipopts`'s names and their option types.
fn ipopt_named(name: &str) -> Option<u16> {
    Some(match name {
        "rr" => ipopt_bit(7),
        "eol" => ipopt_bit(0),
        "nop" => ipopt_bit(1),
        "ts" => ipopt_bit(68),
        "sec" => ipopt_bit(130),
        "esec" => ipopt_bit(133),
        "lsrr" => ipopt_bit(131),
        "ssrr" => ipopt_bit(137),
        "satid" => ipopt_bit(136),
        "qs" => ipopt_bit(25),
        "rtralt" => ipopt_bit(148),
        "cipso" => ipopt_bit(134),
        "any" => u16::MAX,
        _ => return None,
    })
}

impl PacketChecks {
    /// True if there is nothing to check.
    pub fn is_empty(&self) -> bool {
        *self == PacketChecks::default()
    }

    /// True if the packet (of IP protocol `proto`) satisfies every condition.
    #[inline]
    pub fn matches(&self, proto: u8, p: &PacketInfo) -> bool {
        let icmp = matches!(proto, 1 | 58);
        self.dsize.is_none_or(|c| c.matches(p.dsize as u32))
            && self
                .flags
                .is_none_or(|f| proto == 6 && f.matches(p.tcp_flags))
            && self
                .itype
                .is_none_or(|c| icmp && c.matches(p.icmp_type as u32))
            && self
                .icode
                .is_none_or(|c| icmp && c.matches(p.icmp_code as u32))
            && self.ip_proto.is_none_or(|c| c.matches(proto as u32))
            && self.ttl.is_none_or(|c| c.matches(p.ttl as u32))
            && (!self.sameip || p.sameip)
            && self
                .stream_size
                .is_none_or(|c| p.stream_size.is_some_and(|z| c.matches(z)))
            && p.stream_events & self.stream_events == self.stream_events
            && p.applayer_events & self.applayer_events == self.applayer_events
            && self.matches_headers(proto, p)
    }

    /// The IP, TCP and ICMP header fields' conditions.
    #[inline]
    fn matches_headers(&self, proto: u8, p: &PacketInfo) -> bool {
        let tcp = proto == 6;
        self.window
            .is_none_or(|c| tcp && c.matches(p.window as u32))
            && self.seq.is_none_or(|v| tcp && p.seq == v)
            && self.ack.is_none_or(|v| tcp && p.ack == v)
            && self
                .id
                .is_none_or(|c| p.ipv4.is_some_and(|h| c.matches(h.1 as u32)))
            && self
                .tos
                .is_none_or(|c| p.ipv4.is_some_and(|h| c.matches(h.0 as u32)))
            && self
                .fragbits
                .is_none_or(|f| p.ipv4.is_some_and(|h| f.matches(h.2)))
            && self
                .fragoffset
                .is_none_or(|c| p.frag_off.is_some_and(|o| c.matches(o as u32)))
            && self.ipopts.is_none_or(|m| p.ipopts & m != 0)
            && self.ipv6.is_none_or(|v6| p.ipv6 == v6)
            && self
                .mss
                .is_none_or(|c| p.mss.is_some_and(|m| c.matches(m as u32)))
            && self
                .icmp_id
                .is_none_or(|c| p.icmp_idseq.is_some_and(|x| c.matches(x.0 as u32)))
            && self
                .icmp_seq
                .is_none_or(|c| p.icmp_idseq.is_some_and(|x| c.matches(x.1 as u32)))
            && self.csum.is_none_or(|c| c.matches(proto, p))
            && self
                .icmpv6_mtu
                .is_none_or(|c| p.icmpv6_mtu.is_some_and(|m| c.matches(m)))
    }
}

/// Which packets of a TCP stream a rule inspects (`flow:only_stream`,
/// `flow:no_stream`, `tcp-pkt`, `tcp-stream`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamMode {
    /// Whatever the rule's keywords need (the stream for contents).
    #[default]
    Default,
    /// Only packets of a reassembled stream.
    Only,
    /// Only packets on their own, never the reassembled stream.
    No,
}

/// Which alerts of a rule a `threshold` or `detection_filter` lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThresholdKind {
    /// `type limit`: the first `count` matches of each window.
    Limit,
    /// `type threshold`: every `count`-th match within a window.
    Threshold,
    /// `type both`: once per window, at the `count`-th match.
    Both,
    /// `detection_filter`: every match after the first `count` of a window.
    DetectionFilter,
}

/// Whose matches a threshold counts together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// Per source address.
    BySrc,
    /// Per destination address.
    ByDst,
    /// All matches of the rule.
    ByRule,
    /// Per pair of addresses, either way (Suricata's IP pair).
    ByBoth,
    /// Per flow, both directions (Suricata 8).
    ByFlow,
}

/// `threshold:` / `detection_filter:`. A window starts with a match and lasts
/// `seconds`; a match after it starts the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threshold {
    /// Which alerts pass.
    pub kind: ThresholdKind,
    /// Whose matches count together.
    pub track: Track,
    /// `count`.
    pub count: u32,
    /// `seconds`.
    pub seconds: u32,
}

impl Threshold {
    /// Parses the value of `threshold` (`detection: false`) or
    /// `detection_filter`: comma-separated `type T`, `track T`, `count N`,
    /// `seconds N` in any order.
    pub fn parse(v: &str, detection: bool) -> Option<Threshold> {
        let (mut kind, mut track, mut count, mut seconds) = (None, None, None, None);
        if detection {
            kind = Some(ThresholdKind::DetectionFilter);
        }
        for part in v.split(',') {
            let mut w = part.split_whitespace();
            let (k, val) = (w.next()?, w.next()?);
            if w.next().is_some() {
                return None;
            }
            match k {
                "type" if !detection => {
                    kind = Some(match val {
                        "limit" => ThresholdKind::Limit,
                        "threshold" => ThresholdKind::Threshold,
                        "both" => ThresholdKind::Both,
                        _ => return None,
                    })
                }
                "track" => {
                    track = Some(match val {
                        "by_src" => Track::BySrc,
                        "by_dst" => Track::ByDst,
                        "by_rule" => Track::ByRule,
                        "by_both" => Track::ByBoth,
                        "by_flow" => Track::ByFlow,
                        _ => return None,
                    })
                }
                "count" => count = Some(val.parse().ok()?),
                "seconds" => seconds = Some(val.parse().ok()?),
                _ => return None,
            }
        }
        Some(Threshold {
            kind: kind?,
            track: track?,
            count: count?,
            seconds: seconds?,
        })
    }
}

fn ip_proto_number(name: &str) -> Option<u32> {
    Some(match name.to_ascii_lowercase().as_str() {
        "hopopt" => 0,
        "icmp" => 1,
        "igmp" => 2,
        "ipip" | "ipv4" | "ip-in-ip" => 4,
        "tcp" => 6,
        "udp" => 17,
        "ipv6" => 41,
        "ipv6-route" => 43,
        "ipv6-frag" => 44,
        "rsvp" => 46,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        "ipv6-icmp" | "icmpv6" => 58,
        "ipv6-nonxt" => 59,
        "ipv6-opts" => 60,
        "eigrp" => 88,
        "ospf" | "ospfigp" => 89,
        "pim" => 103,
        "vrrp" => 112,
        "l2tp" => 115,
        "sctp" => 132,
        _ => return None,
    })
}

fn need<'v>(v: Option<&'v str>, name: &str) -> Result<&'v str, RuleSyntax> {
    v.ok_or_else(|| RuleSyntax::MissingValue {
        keyword: name.into(),
    })
}

/// What reading a rule's options remembers between them.
#[derive(Debug, Default)]
pub(super) struct ParseCx {
    /// `sid` was given.
    pub has_sid: bool,
    /// The sticky buffer is `dns.query` (else the packet's payload).
    pub dns_query: bool,
    /// The sticky buffer is this HTTP buffer.
    pub http: Option<crate::http::Buf>,
    /// The sticky buffer is this TLS buffer.
    pub tls: Option<crate::tls::Buf>,
    /// The sticky buffer is `base64_data` (the last one of a rule).
    pub base64: bool,
    /// The sticky buffer is `file_data` on an `smtp` rule.
    pub smtp_file: bool,
    /// The sticky buffer is `ssh.proto` (`false`) or `ssh.software`
    /// (`true`).
    pub ssh: Option<bool>,
    /// The sticky buffer is `ip.src` (`false`) or `ip.dst` (`true`).
    pub ip: Option<bool>,
    /// The sticky buffer is this packet-header buffer.
    pub hdr: Option<crate::pkthdr::HdrBuf>,
    /// The packet-header buffers the rule named, each of which must get a
    /// keyword ([`named_buffers_used`]).
    pub hdr_named: Vec<crate::pkthdr::HdrBuf>,
    /// The transforms given since the sticky buffer ([`crate::transform`]).
    pub xf: crate::transform::Transforms,
    /// The list the sticky buffer's keywords go to, once one did (an index
    /// into the rule's lists of its kind).
    pub list: Option<usize>,
    /// A transform was given and no keyword after it yet (Suricata refuses
    /// a rule ending so).
    pub xf_pending: bool,
}

impl ParseCx {
    /// Leaves the sticky buffer: the next keywords go where the caller
    /// says (the packet's payload unless it sets another buffer).
    fn reset(&mut self) {
        self.dns_query = false;
        self.http = None;
        self.tls = None;
        self.smtp_file = false;
        self.ssh = None;
        self.ip = None;
        self.hdr = None;
        self.xf = Default::default();
        self.list = None;
        self.xf_pending = false;
    }
}

/// The index of the first of `lists` that `same` accepts, or of a list
/// `new` makes and appends: a sticky buffer's keywords join the list of
/// that buffer and transforms.
fn list_index<L>(lists: &mut Vec<L>, same: impl Fn(&L) -> bool, new: impl FnOnce() -> L) -> usize {
    match lists.iter().position(same) {
        Some(i) => i,
        None => {
            lists.push(new());
            lists.len() - 1
        }
    }
}

/// The list the next payload keyword goes to: the sticky buffer's.
fn items<'r>(rule: &'r mut Rule, cx: &mut ParseCx) -> &'r mut Vec<Item> {
    cx.xf_pending = false;
    if cx.base64 {
        return &mut rule.base64;
    }
    if cx.smtp_file {
        return rule.smtp_file.get_or_insert_with(Vec::new);
    }
    if let Some(sw) = cx.ssh {
        let i = match rule.ssh.iter().position(|(b, _)| *b == sw) {
            Some(i) => i,
            None => {
                rule.ssh.push((sw, Vec::new()));
                rule.ssh.len() - 1
            }
        };
        return &mut rule.ssh[i].1;
    }
    if let Some(dst) = cx.ip {
        let i = match rule.ip.iter().position(|(b, _)| *b == dst) {
            Some(i) => i,
            None => {
                rule.ip.push((dst, Vec::new()));
                rule.ip.len() - 1
            }
        };
        return &mut rule.ip[i].1;
    }
    if let Some(b) = cx.http {
        let i = *cx
            .list
            .get_or_insert_with(|| http_list_index(rule, b, &cx.xf));
        return &mut rule.http[i].items;
    }
    if let Some(b) = cx.hdr {
        // One list per buffer and transforms, as for HTTP's.
        let i = *cx.list.get_or_insert_with(|| {
            list_index(
                &mut rule.hdr,
                |l| l.buf == b && l.xf == cx.xf,
                || super::HdrList {
                    buf: b,
                    items: Vec::new(),
                    xf: cx.xf.clone(),
                },
            )
        });
        return &mut rule.hdr[i].items;
    }
    if let Some(b) = cx.tls {
        let i = *cx.list.get_or_insert_with(|| {
            // A buffer holding several values (`tls.certs`, ...) gets an
            // instance per sticky keyword, each matched on its own value
            // (Suricata 7's multi-buffer matching); another is one list per
            // buffer and transforms.
            list_index(
                &mut rule.tls,
                |l| !b.is_multi() && l.buf == b && l.xf == cx.xf,
                || super::TlsList {
                    buf: b,
                    items: Vec::new(),
                    xf: cx.xf.clone(),
                },
            )
        });
        return &mut rule.tls[i].items;
    }
    if cx.dns_query {
        if let Some(i) = cx.list {
            return &mut rule.dns_query[i].items;
        }
    }
    &mut rule.items
}

/// The index of HTTP buffer `b`'s list with transforms `xf` (made on first
/// use): a buffer named again with other transforms is another buffer, as
/// in Suricata.
fn http_list_index(
    rule: &mut Rule,
    b: crate::http::Buf,
    xf: &crate::transform::Transforms,
) -> usize {
    list_index(
        &mut rule.http,
        |l| l.buf == b && l.xf == *xf,
        || super::HttpList {
            buf: b,
            items: Vec::new(),
            xf: xf.clone(),
        },
    )
}

/// The plain (untransformed) list of HTTP buffer `b` (made on first use).
fn http_list(rule: &mut Rule, b: crate::http::Buf) -> &mut super::HttpList {
    let i = http_list_index(rule, b, &Default::default());
    &mut rule.http[i]
}

/// A TLS keyword makes a `tcp` rule a TLS one, as HTTP keywords do
/// ([`to_http`]); on other protocols it is refused.
fn to_tls(rule: &mut Rule, name: &str) -> Result<(), RuleSyntax> {
    no_hdr(rule, name)?;
    match rule.proto {
        Proto::Tls => Ok(()),
        Proto::Tcp if rule.dns_query.is_empty() && rule.http.is_empty() => {
            rule.proto = Proto::Tls;
            Ok(())
        }
        p => Err(RuleSyntax::UnsupportedKeyword(format!(
            "{name} on a {} rule",
            p.name()
        ))),
    }
}

/// Refuses application-layer keyword `name` in a rule with a packet-header
/// buffer: Suricata inspects such a header on the packet a transaction's
/// inspection starts at, which this IPS does not model.
fn no_hdr(rule: &Rule, name: &str) -> Result<(), RuleSyntax> {
    match rule.hdr.first() {
        Some(l) => Err(RuleSyntax::UnsupportedKeyword(format!(
            "{name} with {}",
            l.buf.keyword()
        ))),
        None => Ok(()),
    }
}

/// The keywords of HTTP buffer `b`.
fn http_items(rule: &mut Rule, b: crate::http::Buf) -> &mut Vec<Item> {
    &mut http_list(rule, b).items
}

/// An HTTP keyword makes a `tcp` rule an HTTP one (Suricata sets the rule's
/// application protocol from its buffers); on other protocols it is refused.
fn to_http(rule: &mut Rule, name: &str) -> Result<(), RuleSyntax> {
    no_hdr(rule, name)?;
    match rule.proto {
        Proto::Http => Ok(()),
        Proto::Tcp if rule.dns_query.is_empty() && rule.tls.is_empty() => {
            rule.proto = Proto::Http;
            Ok(())
        }
        p => Err(RuleSyntax::UnsupportedKeyword(format!(
            "{name} on a {} rule",
            p.name()
        ))),
    }
}

/// Moves content `k` (the last keyword read) to HTTP buffer `b`'s list.
fn move_content(rule: &mut Rule, k: usize, b: crate::http::Buf) {
    let item = Item::Content(k as u8);
    let lists = std::iter::once(&mut rule.items)
        .chain(rule.dns_query.iter_mut().map(|q| &mut q.items))
        .chain(rule.http.iter_mut().map(|l| &mut l.items))
        .chain(rule.tls.iter_mut().map(|l| &mut l.items));
    for l in lists {
        if let Some(i) = l.iter().rposition(|x| *x == item) {
            l.remove(i);
            break;
        }
    }
    http_items(rule, b).push(item);
}

/// Moves content `k` from wherever it was put to the plain (untransformed)
/// list of TLS buffer `b` (single-value buffers only).
fn move_tls_content(rule: &mut Rule, k: usize, b: crate::tls::Buf) {
    let item = Item::Content(k as u8);
    let lists = std::iter::once(&mut rule.items)
        .chain(rule.dns_query.iter_mut().map(|q| &mut q.items))
        .chain(rule.http.iter_mut().map(|l| &mut l.items))
        .chain(rule.tls.iter_mut().map(|l| &mut l.items));
    for l in lists {
        if let Some(i) = l.iter().rposition(|x| *x == item) {
            l.remove(i);
            break;
        }
    }
    let i = match rule.tls.iter().position(|l| l.buf == b && l.xf.is_empty()) {
        Some(i) => i,
        None => {
            rule.tls.push(super::TlsList {
                buf: b,
                items: Vec::new(),
                xf: Default::default(),
            });
            rule.tls.len() - 1
        }
    };
    rule.tls[i].items.push(item);
}

/// True if `rule` has conditions besides its header, `flow`, `flowbits`
/// operations and `flowint` operations (the event rules count anomalies
/// with them; they are done when the rule fires), protocol buffers aside.
fn beyond_flow_and_ops(rule: &Rule) -> bool {
    !rule.items.is_empty()
        || !rule.contents.is_empty()
        || !rule.base64.is_empty()
        || !rule.ip.is_empty()
        || !rule.checks.is_empty()
        || !rule.alp.is_empty()
        || rule.flowints.iter().any(|f| !f.op.changes())
        || !rule.xbits.is_empty()
        || !rule.hdr.is_empty()
        || rule.stream != super::StreamMode::Default
        || rule
            .flowbits
            .iter()
            .any(|f| matches!(f, super::Flowbit::IsSet(_) | super::Flowbit::IsNotSet(_)))
}

/// Refuses a rule with an HTTP body event ([`Rule::http_body_events`]) and
/// conditions besides its header, `flow`, `flowbits` operations and
/// `flowint` operations: the event is raised where the framing ends or a
/// body's bytes fail to inflate, with no message to inspect them on.
pub(super) fn http_body_event_alone(rule: &Rule) -> Result<(), RuleSyntax> {
    if rule.http_body_events != 0 && (beyond_flow_and_ops(rule) || !rule.http.is_empty()) {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event http body event (chunk length, decompression) with conditions other than flow, flowbits and flowint operations"
                .into(),
        ));
    }
    Ok(())
}

/// Moves a `to_server` rule's `http.too_many_encoding_layers` and
/// `http.abnormal_ce_header` (events of a response's head) to
/// [`Rule::http_body_events`]: the response raises them and the rule fires
/// on the client's next packet, as Suricata 7.0.10 replayed as an IDS
/// fires its own `to_server` rules on them (measured: on the client's
/// acknowledgement of the response; inline it never fires them). Such a
/// rule may have only its header, `flow`, `flowbits` and `flowint`
/// operations besides; others are refused, naming the event. A
/// `to_server` rule's `http.range_invalid` (raised by a response's body)
/// is owed the same way.
pub(super) fn owed_response_events(rule: &mut Rule) -> Result<(), RuleSyntax> {
    use crate::http::events::Event;
    if rule.to_server != Some(true) {
        return Ok(());
    }
    // Suricata fires a `to_server` rule on a second `100 Continue` inline
    // never, replayed as an IDS only when the interim responses and the
    // final one came in one segment (measured): refused.
    if rule.http_body_events & crate::http::eval::CONTINUE_AGAIN != 0 {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event http.100_continue_already_seen on a to_server rule (a response's event, which Suricata 7.0.10 fires on to_server rules inline never)"
                .into(),
        ));
    }
    if rule.http_body_events & crate::http::eval::UNMATCHED != 0 {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event http.unable_to_match_response_to_request on a to_server rule (a response's event; Suricata 7.0.10 fires such a rule on the client's next packet or at the flow's end, which is not followed)"
                .into(),
        ));
    }
    // `http.range_invalid` is raised on a response's body: owed likewise.
    if rule.http_body_events & crate::http::eval::RANGE_INVALID != 0 {
        rule.http_body_events &= !crate::http::eval::RANGE_INVALID;
        rule.http_body_events |= crate::http::eval::RANGE_OWED;
    }
    let Some(i) = rule
        .http
        .iter()
        .position(|l| l.buf == crate::http::Buf::StartRawResponse)
    else {
        return Ok(());
    };
    let mut bits = 0;
    let mut others = !rule.http[i].xf.is_empty() || rule.http.len() > 1;
    for it in &rule.http[i].items {
        match it {
            Item::HttpEvent(Event::TooManyEncodingLayers) => bits |= crate::http::eval::CE_TOO_MANY,
            Item::HttpEvent(Event::AbnormalCeHeader) => bits |= crate::http::eval::CE_ABNORMAL,
            _ => others = true,
        }
    }
    if bits == 0 {
        return Ok(());
    }
    if others || beyond_flow_and_ops(rule) {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event http.too_many_encoding_layers or http.abnormal_ce_header (a response's) on a to_server rule with conditions other than flow, flowbits and flowint operations"
                .into(),
        ));
    }
    rule.http.clear();
    rule.http_body_events |= bits;
    Ok(())
}

/// Refuses a rule with an SSH banner event ([`Rule::ssh_events`]) and
/// conditions besides its header, `flow`, `flowbits` operations and
/// `flowint` operations: the event stays on the flow and is matched on
/// packets that need not carry the banner.
pub(super) fn ssh_events_alone(rule: &Rule) -> Result<(), RuleSyntax> {
    if rule.ssh_events != 0 && (beyond_flow_and_ops(rule) || !rule.ssh.is_empty()) {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event:ssh with conditions other than flow, flowbits and flowint operations"
                .into(),
        ));
    }
    Ok(())
}

/// Refuses a rule with an FTP line event ([`Rule::ftp_events`]) and
/// conditions besides its header, `flow`, `flowbits` operations and
/// `flowint` operations: the event is raised where a line reaches the
/// bound, which need not be a packet holding the command's bytes.
pub(super) fn ftp_events_alone(rule: &Rule) -> Result<(), RuleSyntax> {
    if rule.ftp_events != 0 && beyond_flow_and_ops(rule) {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event:ftp with conditions other than flow, flowbits and flowint operations"
                .into(),
        ));
    }
    Ok(())
}

/// Whether `rule` is one of the flow's TLS handshake state
/// ([`Rule::tls_flow`]): `ssl_state` or `ssl_version` with nothing else
/// but its header, `flow` and `flowbits` operations. `ssl_state` with
/// other conditions is refused: Suricata inspects it on every packet
/// against a state other keywords do not share.
pub(super) fn tls_flow(rule: &Rule) -> Result<bool, RuleSyntax> {
    if rule.ssl_state.is_empty() && rule.ssl_version.is_empty() && rule.tls_events == 0 {
        return Ok(false);
    }
    if rule.tls_events != 0 && (!rule.ssl_state.is_empty() || !rule.ssl_version.is_empty()) {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event:tls with ssl_state or ssl_version".into(),
        ));
    }
    let other = beyond_flow_and_ops(rule)
        || !rule.tls.is_empty()
        || rule.tls_version.is_some()
        || rule.tls_chain_len.is_some()
        || !rule.tls_cert.is_empty();
    if !other {
        return Ok(true);
    }
    if rule.tls_events != 0 {
        return Err(RuleSyntax::UnsupportedKeyword(
            "app-layer-event:tls with conditions other than flow, flowbits and flowint operations"
                .into(),
        ));
    }
    if rule.ssl_state.is_empty() {
        // `ssl_version` with other TLS conditions: evaluated with them on
        // the hello of the packet's side.
        return Ok(false);
    }
    Err(RuleSyntax::UnsupportedKeyword(
        "ssl_state with conditions other than ssl_version, flow and flowbits operations".into(),
    ))
}

/// Checks that a rule of `rule`'s protocol may carry header `b`, as
/// Suricata's setup of the keyword does (`tcp.hdr` needs a protocol
/// including TCP, ...). Application-layer rules are refused: Suricata
/// inspects the header on the packet a transaction's inspection starts at,
/// which this IPS does not model.
fn hdr_proto(rule: &Rule, b: crate::pkthdr::HdrBuf) -> Result<(), RuleSyntax> {
    use crate::pkthdr::HdrBuf;
    if rule.app_layer() || !rule.http.is_empty() || !rule.tls.is_empty() {
        return Err(RuleSyntax::UnsupportedKeyword(format!(
            "{} on a {} rule",
            b.keyword(),
            rule.proto.name()
        )));
    }
    let v6 = rule.checks.ipv6;
    let ok = match b {
        HdrBuf::Ipv4 | HdrBuf::Ipv6 => true,
        HdrBuf::Tcp => matches!(rule.proto, Proto::Tcp | Proto::Ip) || rule.proto.stream_app(),
        HdrBuf::Udp => matches!(rule.proto, Proto::Udp | Proto::Ip),
        // `icmpv4` and `icmpv6` rules name one of the two.
        HdrBuf::Icmpv4 => {
            rule.proto == Proto::Ip || (rule.proto == Proto::Icmp && v6 != Some(true))
        }
        HdrBuf::Icmpv6 => {
            rule.proto == Proto::Ip || (rule.proto == Proto::Icmp && v6 != Some(false))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(RuleSyntax::BadValue {
            keyword: b.keyword().into(),
            value: format!("on a {} rule", rule.proto.name()),
        })
    }
}

/// A transform keyword ([`crate::transform`]): after a sticky buffer
/// (Suricata refuses it elsewhere), it applies to the keywords after it.
fn transform(
    rule: &mut Rule,
    name: &str,
    val: Option<&str>,
    cx: &mut ParseCx,
) -> Result<(), RuleSyntax> {
    use crate::transform::{Transform, TransformError};
    let t = match Transform::parse(name, val) {
        Some(Ok(t)) => t,
        Some(Err(TransformError::BadValue(m))) => {
            return Err(RuleSyntax::BadValue {
                keyword: name.into(),
                value: m,
            })
        }
        None => return Err(RuleSyntax::UnknownKeyword(name.into())),
    };
    if cx.smtp_file || cx.ssh.is_some() || cx.ip.is_some() {
        return Err(RuleSyntax::UnsupportedKeyword(format!(
            "{name} on {}",
            if cx.smtp_file {
                "an smtp file_data"
            } else if cx.ip.is_some() {
                "ip.src or ip.dst"
            } else {
                "ssh.proto or ssh.software"
            }
        )));
    }
    if cx.http.is_none() && cx.tls.is_none() && !cx.dns_query && cx.hdr.is_none() {
        return Err(RuleSyntax::TransformPlacement(name.into()));
    }
    // The keywords after it go to the buffer with the transforms so far
    // (the ones before it stay on the buffer they were given to).
    cx.xf.push(t);
    cx.xf_pending = true;
    if cx.dns_query {
        // The instance the sticky keyword opened, if nothing went to it
        // yet; else another one.
        match cx.list {
            Some(i) if rule.dns_query[i].items.is_empty() => rule.dns_query[i].xf = cx.xf.clone(),
            _ => {
                let (responses, records) = rule
                    .dns_query
                    .last()
                    .map_or((false, None), |q| (q.responses, q.records));
                rule.dns_query.push(super::DnsQuery {
                    responses,
                    records,
                    xf: cx.xf.clone(),
                    ..Default::default()
                });
                cx.list = Some(rule.dns_query.len() - 1);
            }
        }
    } else {
        cx.list = None;
    }
    Ok(())
}

/// Applies one option to `rule`.
pub(super) fn apply(
    rule: &mut Rule,
    name: &str,
    val: Option<&str>,
    cx: &mut ParseCx,
) -> Result<(), RuleSyntax> {
    if !cx.base64 {
        return apply_keyword(rule, name, val, cx);
    }
    // Suricata's `base64_data` is the rule's last buffer: a sticky buffer
    // after it (which would set one of these) is refused rather than
    // guessed. Rule keywords (`flow`, `xbits`, ...) may still follow.
    cx.reset();
    apply_keyword(rule, name, val, cx)?;
    if cx.http.is_some()
        || cx.tls.is_some()
        || cx.dns_query
        || cx.smtp_file
        || cx.ssh.is_some()
        || cx.hdr.is_some()
        || name == "pkt_data"
    {
        return Err(RuleSyntax::UnsupportedKeyword(format!(
            "{name} after base64_data"
        )));
    }
    Ok(())
}

/// One keyword (see [`apply`]).
fn apply_keyword(
    rule: &mut Rule,
    name: &str,
    val: Option<&str>,
    cx: &mut ParseCx,
) -> Result<(), RuleSyntax> {
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
    let num = |v: Option<&str>, max: u32| -> Result<NumCmp, RuleSyntax> {
        let v = need(v, name)?;
        NumCmp::parse(v, max).ok_or_else(|| bad_value(v))
    };
    match name {
        "msg" => rule.msg = unquote(need(val, name)?)?.into(),
        "base64_decode" => {
            let has = |l: &[Item]| l.iter().any(|i| matches!(i, Item::Base64Decode(_)));
            if has(&rule.items)
                || rule.http.iter().any(|l| has(&l.items))
                || rule.tls.iter().any(|l| has(&l.items))
                || rule.dns_query.iter().any(|q| has(&q.items))
            {
                return Err(RuleSyntax::UnsupportedKeyword("base64_decode twice".into()));
            }
            let d = payload::base64_decode(val)?;
            items(rule, cx).push(Item::Base64Decode(d));
        }
        "base64_data" => {
            let has = |l: &[Item]| l.iter().any(|i| matches!(i, Item::Base64Decode(_)));
            if !(has(&rule.items)
                || rule.http.iter().any(|l| has(&l.items))
                || rule.tls.iter().any(|l| has(&l.items))
                || rule.dns_query.iter().any(|q| has(&q.items)))
            {
                return Err(RuleSyntax::BadValue {
                    keyword: name.into(),
                    value: "without a base64_decode before it".into(),
                });
            }
            cx.base64 = true;
        }
        "content" => {
            let v = need(val, name)?;
            let (negated, v) = match v.strip_prefix('!') {
                Some(r) => (true, r.trim_start()),
                None => (false, v),
            };
            let bytes = super::parse_content(v)?;
            if bytes.is_empty() {
                return Err(RuleSyntax::EmptyContent);
            }
            if rule.contents.len() >= 255 {
                return Err(RuleSyntax::TooManyContents);
            }
            let k = rule.contents.len() as u8;
            items(rule, cx).push(Item::Content(k));
            rule.contents.push(Content {
                bytes,
                negated,
                in_b64: cx.base64,
                in_hdr: cx.hdr.is_some(),
                ..Content::default()
            });
        }
        "nocase" => {
            let i = last(rule)?;
            rule.contents[i].nocase = true;
        }
        "offset" | "depth" | "within" | "distance" => {
            let i = last(rule)?;
            let v = need(val, name)?;
            let c = &mut rule.contents[i];
            // A byte_extract variable instead of a number: the rule is
            // inspected over a buffer, where the variable has its value.
            if let Some(var) = rule.vars.iter().position(|x| x == v.trim()) {
                let var = Some(var as u8);
                match name {
                    "offset" => c.vars.offset = var,
                    "depth" => c.vars.depth = var,
                    "within" => c.vars.within = var,
                    _ => c.vars.distance = var,
                }
                return Ok(());
            }
            if name == "distance" {
                c.distance = Some(v.parse().map_err(|_| bad_modifier(v))?);
            } else {
                let n: u32 = v.parse().map_err(|_| bad_modifier(v))?;
                match name {
                    "offset" => c.offset = Some(n),
                    "depth" => c.depth = Some(n),
                    _ => c.within = Some(n),
                }
            }
        }
        "startswith" => {
            let i = last(rule)?;
            rule.contents[i].startswith = true;
        }
        "endswith" => {
            let i = last(rule)?;
            rule.contents[i].endswith = true;
        }
        "pcre" => {
            let (p, http) = payload::pcre(need(val, name)?)?;
            let item = Item::Pcre(Box::new(p));
            match http {
                Some(b) => {
                    to_http(rule, "pcre with an http flag")?;
                    http_items(rule, b).push(item);
                }
                None => items(rule, cx).push(item),
            }
        }
        "byte_test" => {
            let t = payload::byte_test(need(val, name)?, &rule.vars)?;
            items(rule, cx).push(Item::ByteTest(t));
        }
        "byte_jump" => {
            let j = payload::byte_jump(need(val, name)?, &rule.vars)?;
            items(rule, cx).push(Item::ByteJump(j));
        }
        "byte_extract" => {
            let e = payload::byte_extract(need(val, name)?, &mut rule.vars)?;
            items(rule, cx).push(Item::ByteExtract(e));
        }
        "byte_math" => {
            let m = payload::byte_math(need(val, name)?, &mut rule.vars)?;
            items(rule, cx).push(Item::ByteMath(m));
        }
        "isdataat" => {
            let d = payload::isdataat(need(val, name)?, &rule.vars)?;
            items(rule, cx).push(Item::IsDataAt(d));
        }
        "xbits" => rule.xbits.push(payload::xbits(need(val, name)?)?),
        "hostbits" => match payload::hostbits(need(val, name)?)? {
            None => rule.noalert = true,
            Some(x) => rule.xbits.push(x),
        },
        "flowint" => rule.flowints.push(payload::flowint(need(val, name)?)?),
        "flowbits" => match payload::flowbits(need(val, name)?)? {
            None => rule.noalert = true,
            Some(f) => rule.flowbits.push(f),
        },
        // Which content feeds the prefilter (every content is still checked,
        // so `only` changes nothing).
        "fast_pattern" => {
            let i = last(rule)?;
            let c = &mut rule.contents[i];
            c.fast_pattern = true;
            match val.map(str::trim) {
                None | Some("only") => {}
                Some(v) => {
                    let (o, l) = v.split_once(',').ok_or_else(|| bad_value(v))?;
                    let o: u16 = o.trim().parse().map_err(|_| bad_value(v))?;
                    let l: u16 = l.trim().parse().map_err(|_| bad_value(v))?;
                    if l == 0 || o as usize + l as usize > c.bytes.len() {
                        return Err(bad_value(v));
                    }
                    c.fast_chop = Some((o, l));
                }
            }
        }
        // Whether to search the raw bytes: there are no decoded ones here.
        "rawbytes" => {
            last(rule)?;
        }
        "prefilter" => {}
        // `dns_query` was a content modifier before Suricata 5 and is now an
        // alias of the sticky buffer (ET Open writes it before its content).
        // `dns.query`: the questions' names of requests; Suricata 8's
        // `dns.query.name` (`dns.queries.rrname`): of responses too.
        "dns.query" | "dns_query" | "dns.query.name" | "dns.queries.rrname" => {
            cx.reset();
            if rule.proto != Proto::Dns {
                return Err(RuleSyntax::UnsupportedKeyword(format!(
                    "{name} on a {} rule",
                    rule.proto.name()
                )));
            }
            let responses = name.contains(".name") || name.contains("rrname");
            if rule
                .dns_query
                .iter()
                .any(|q| q.responses != responses && q.records.is_none())
            {
                return Err(RuleSyntax::UnsupportedKeyword(format!(
                    "{name} with another query-name buffer"
                )));
            }
            // Each names one question's name: two may match two questions
            // (Suricata 7's multi-buffer matching).
            rule.dns_query.push(super::DnsQuery {
                responses,
                ..Default::default()
            });
            cx.list = Some(rule.dns_query.len() - 1);
            cx.dns_query = true;
        }
        // A response's record names (Suricata 8), each a multi-buffer.
        "dns.response.rrname"
        | "dns.answers.rrname"
        | "dns.answer.name"
        | "dns.authorities.rrname"
        | "dns.additionals.rrname" => {
            cx.reset();
            if rule.proto != Proto::Dns {
                return Err(RuleSyntax::UnsupportedKeyword(format!(
                    "{name} on a {} rule",
                    rule.proto.name()
                )));
            }
            let records = match name {
                "dns.response.rrname" => super::DnsRecords::All,
                "dns.authorities.rrname" => super::DnsRecords::Authorities,
                "dns.additionals.rrname" => super::DnsRecords::Additionals,
                _ => super::DnsRecords::Answers,
            };
            rule.dns_query.push(super::DnsQuery {
                responses: true,
                records: Some(records),
                ..Default::default()
            });
            cx.list = Some(rule.dns_query.len() - 1);
            cx.dns_query = true;
        }
        // Conditions on a DNS message's header and questions (integers,
        // Suricata's unsigned 8- and 16-bit integer syntax).
        "dns.opcode" | "dns.rcode" | "dns.rrtype" => {
            if rule.proto != Proto::Dns {
                return Err(RuleSyntax::UnsupportedKeyword(format!(
                    "{name} on a {} rule",
                    rule.proto.name()
                )));
            }
            let max = if name == "dns.rrtype" {
                u16::MAX as u32
            } else {
                255
            };
            let c = Some(num(val, max)?);
            let d = &mut rule.dns_checks;
            match name {
                "dns.opcode" => d.opcode = c,
                "dns.rcode" => d.rcode = c,
                _ => d.rrtype = c,
            }
        }
        "pkt_data" => cx.reset(),
        // The parts of an SSH identification string (`SSH-2.0-OpenSSH_9.6`:
        // `2.0`, `OpenSSH_9.6`), on `ssh` rules.
        // The packet's source or destination address as a buffer (4 or
        // 16 bytes), Suricata's sticky buffers for datasets.
        // A header of the packet as a buffer ([`crate::pkthdr`]); Suricata
        // refuses a transport's on a rule whose protocol cannot carry it.
        "ipv4.hdr" | "ipv6.hdr" | "tcp.hdr" | "udp.hdr" | "icmpv4.hdr" | "icmpv6.hdr" => {
            if let Some(v) = val {
                return Err(bad_value(v));
            }
            let b = crate::pkthdr::HdrBuf::from_keyword(name).ok_or_else(|| bad_value(name))?;
            hdr_proto(rule, b)?;
            cx.reset();
            cx.hdr = Some(b);
            if !cx.hdr_named.contains(&b) {
                cx.hdr_named.push(b);
            }
        }
        "icmpv6.mtu" => rule.checks.icmpv6_mtu = Some(num(val, u32::MAX)?),
        "ip.src" | "ip.dst" => {
            if val.is_some() {
                return Err(bad_value(val.unwrap_or_default()));
            }
            cx.reset();
            let dst = name == "ip.dst";
            if !rule.ip.iter().any(|(b, _)| *b == dst) {
                rule.ip.push((dst, Vec::new()));
            }
            cx.ip = Some(dst);
        }
        // A set lookup of the whole sticky buffer ([`crate::dataset`]);
        // Suricata refuses it elsewhere.
        "dataset" | "datarep" => {
            let v = need(val, name)?;
            let kw = if name == "dataset" {
                crate::dataset::parse_dataset(v)?
            } else {
                crate::dataset::parse_datarep(v)?
            };
            let sticky = cx.dns_query
                || cx.http.is_some()
                || cx.tls.is_some()
                || cx.smtp_file
                || cx.ssh.is_some()
                || cx.ip.is_some()
                || cx.hdr.is_some()
                || cx.base64;
            if !sticky {
                return Err(RuleSyntax::UnsupportedKeyword(format!(
                    "{name} outside a sticky buffer"
                )));
            }
            items(rule, cx).push(Item::Dataset(Box::new(kw)));
        }
        "ssh.proto" | "ssh_proto" | "ssh.software" | "ssh_software" => {
            if rule.proto != Proto::Ssh {
                return Err(RuleSyntax::UnsupportedKeyword(format!(
                    "{name} on a {} rule",
                    rule.proto.name()
                )));
            }
            cx.reset();
            let sw = name.ends_with("software");
            if !rule.ssh.iter().any(|(b, _)| *b == sw) {
                rule.ssh.push((sw, Vec::new()));
            }
            cx.ssh = Some(sw);
        }
        // On an `smtp` rule, the decoded bytes of each attachment
        // ([`crate::smtp`]), as Suricata's `file_data` there.
        "file_data" | "file.data" if rule.proto == Proto::Smtp => {
            cx.reset();
            rule.smtp_file.get_or_insert_with(Vec::new);
            cx.smtp_file = true;
        }
        // `urilen`: the (normalised, or with `,raw` the raw) target's length.
        "urilen" => {
            let v = need(val, name)?;
            let (cmp, buf) = match v.split_once(',') {
                Some((c, "raw")) => (c, crate::http::Buf::UriRaw),
                Some((c, "norm")) => (c, crate::http::Buf::Uri),
                Some(_) => return Err(bad_value(v)),
                None => (v, crate::http::Buf::Uri),
            };
            let c = NumCmp::parse(cmp, u32::MAX).ok_or_else(|| bad_value(v))?;
            to_http(rule, name)?;
            http_items(rule, buf).push(Item::Bsize(c));
        }
        // `asn1`: an anomaly among the BER objects decoded from here.
        "asn1" => {
            let a = crate::asn1::Asn1::parse(need(val, name)?)?;
            items(rule, cx).push(Item::Asn1(a));
        }
        // `app-layer-event:dns.NAME` and the other parsers' events
        // ([`super::alevents`]).
        "app-layer-event" if val.is_some_and(super::alevents::handles) => {
            super::alevents::apply(rule, need(val, name)?)?;
        }
        // `app-layer-event:http.NAME`: a check of the start and header
        // lines of a request or a response (the event's side), in the list
        // of a buffer no keyword names; not a sticky buffer, so the
        // keywords after it stay where they were.
        "app-layer-event" => {
            let v = need(val, name)?;
            // Protocol detection's events are the packet's, whatever the
            // protocol ([`crate::alproto::on_bytes`]).
            if v.starts_with("applayer_") {
                match crate::alproto::parse_event(v) {
                    Ok(bit) => rule.checks.applayer_events |= bit,
                    Err(Some(why)) => {
                        return Err(RuleSyntax::UnsupportedKeyword(format!("{name} {v}: {why}")))
                    }
                    Err(None) => return Err(bad_value(v)),
                }
                return Ok(());
            }
            // The chunk-size events end the framing, and decompression
            // fails on a body's bytes: decided by the body parser, not
            // from a head.
            let chunk = match v {
                "http.invalid_request_chunk_len" => crate::http::eval::REQUEST_CHUNK_LEN,
                "http.invalid_response_chunk_len" => crate::http::eval::RESPONSE_CHUNK_LEN,
                "http.gzip_decompression_failed" => crate::http::eval::GZIP_FAILED,
                // Raised on a response body's first bytes
                // ([`crate::http::range`]).
                "http.range_invalid" => crate::http::eval::RANGE_INVALID,
                // Raised by a second `100 Continue` head.
                "http.100_continue_already_seen" => crate::http::eval::CONTINUE_AGAIN,
                // Raised by a response's first bytes.
                "http.unable_to_match_response_to_request" => crate::http::eval::UNMATCHED,
                _ => 0,
            };
            if chunk != 0 {
                to_http(rule, name)?;
                rule.http_body_events |= chunk;
                return Ok(());
            }
            // `tls.NAME`: an event of the flow's TLS parse, evaluated with
            // the handshake state's rules ([`Rule::tls_flow`]).
            if let Some(e) = crate::tls::events::Event::parse(v) {
                to_tls(rule, name)?;
                rule.tls_events |= e.bit();
                return Ok(());
            }
            let Some(e) = crate::http::events::Event::parse(v) else {
                return Err(RuleSyntax::UnsupportedKeyword(format!("{name} {v}")));
            };
            to_http(rule, name)?;
            let buf = if e.request() {
                crate::http::Buf::StartRaw
            } else {
                crate::http::Buf::StartRawResponse
            };
            http_items(rule, buf).push(Item::HttpEvent(e));
        }
        // `decode-event:NAME`: a condition on the packet's decoder events
        // ([`crate::decode_events`]); a name Suricata does not know is a
        // rule error, as there.
        "decode-event" => {
            let v = need(val, name)?;
            let e = crate::decode_events::DecodeEvent::parse(v).ok_or_else(|| bad_value(v))?;
            rule.decode_event.push(e);
        }
        // `uricontent`: a content on `http.uri` (Snort's older spelling).
        "uricontent" => {
            apply(rule, "content", val, cx)?;
            let k = last(rule)?;
            to_http(rule, name)?;
            move_content(rule, k, crate::http::Buf::Uri);
        }
        // Suricata 7's `tls.fingerprint` is a content on
        // `tls.cert_fingerprint` (as `uricontent` is on `http.uri`).
        "tls.fingerprint" => {
            apply(rule, "content", val, cx)?;
            let k = last(rule)?;
            to_tls(rule, name)?;
            move_tls_content(rule, k, crate::tls::Buf::CertFingerprint);
        }
        // Conditions on the server certificate ([`crate::tls::legacy`]),
        // not sticky buffers.
        "tls.subject" | "tls.issuerdn" => {
            let v = need(val, name)?;
            to_tls(rule, name)?;
            let c = crate::tls::legacy::CertCond::parse_dn(name == "tls.issuerdn", v)
                .map_err(|why| bad_value(&format!("{v} ({why})")))?;
            rule.tls_cert.push(c);
        }
        "tls_cert_notbefore" | "tls_cert_notafter" => {
            let v = need(val, name)?;
            to_tls(rule, name)?;
            let d = crate::tls::legacy::DateCmp::parse(v)
                .map_err(|why| bad_value(&format!("{v} ({why})")))?;
            rule.tls_cert.push(if name == "tls_cert_notbefore" {
                crate::tls::legacy::CertCond::NotBefore(d)
            } else {
                crate::tls::legacy::CertCond::NotAfter(d)
            });
        }
        "tls_cert_expired" | "tls_cert_valid" => {
            if let Some(v) = val {
                return Err(bad_value(v));
            }
            to_tls(rule, name)?;
            rule.tls_cert.push(if name == "tls_cert_expired" {
                crate::tls::legacy::CertCond::Expired
            } else {
                crate::tls::legacy::CertCond::Valid
            });
        }
        // Conditions on the flow's TLS handshake ([`crate::tls::legacy`]).
        "ssl_version" => {
            let v = need(val, name)?;
            to_tls(rule, name)?;
            let c = crate::tls::legacy::SslVersion::parse(v)
                .map_err(|why| bad_value(&format!("{v} ({why})")))?;
            rule.ssl_version.push(c);
        }
        "ssl_state" => {
            let v = need(val, name)?;
            to_tls(rule, name)?;
            let c = crate::tls::legacy::SslState::parse(v).ok_or_else(|| bad_value(v))?;
            rule.ssl_state.push(c);
        }
        // Information (see the table), but Suricata binds the rule to TLS.
        "tls.store" | "tls_store" => {
            if let Some(v) = val {
                return Err(bad_value(v));
            }
            to_tls(rule, name)?;
        }
        // Not a sticky buffer: a condition on the TLS session, like
        // Suricata's (the keywords after it stay where they were).
        "tls.version" => {
            let v = need(val, name)?;
            to_tls(rule, name)?;
            rule.tls_version = Some(crate::tls::TlsVersion::parse(v).ok_or_else(|| bad_value(v))?);
        }
        other if crate::transform::Transform::is_keyword(other) => transform(rule, other, val, cx)?,
        // A whole buffer's length: only on a sticky buffer (Suricata).
        "bsize" => {
            if !cx.dns_query && cx.http.is_none() && cx.tls.is_none() && cx.hdr.is_none() {
                return Err(RuleSyntax::UnsupportedKeyword(name.into()));
            }
            let c = num(val, u32::MAX)?;
            items(rule, cx).push(Item::Bsize(c));
        }
        // A condition on the protocol the flow was detected as
        // ([`crate::alproto`]); Suricata refuses it in a rule its header or
        // an earlier sticky buffer already binds to a protocol.
        "app-layer-protocol" => {
            let v = need(val, name)?.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            let (negated, v) = match v.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, v),
            };
            let c = crate::alproto::Cond::parse(v, negated)?;
            if !matches!(
                rule.proto,
                Proto::Tcp | Proto::Udp | Proto::Icmp | Proto::Ip
            ) {
                return Err(RuleSyntax::AppLayerProtocol(format!(
                    "the rule is already bound to protocol {}",
                    rule.proto.name()
                )));
            }
            rule.alp.push(c)?;
        }
        "flow" => {
            for f in need(val, name)?.split(',') {
                match f.trim() {
                    "to_server" | "from_client" => rule.to_server = Some(true),
                    "to_client" | "from_server" => rule.to_server = Some(false),
                    "established" => rule.established = true,
                    "not_established" => rule.not_established = true,
                    "stateless" => rule.stateless = true,
                    "only_stream" => rule.stream = StreamMode::Only,
                    "no_stream" => rule.stream = StreamMode::No,
                    o => return Err(RuleSyntax::UnsupportedFlow(o.into())),
                }
            }
        }
        "dsize" => rule.checks.dsize = Some(num(val, u16::MAX as u32)?),
        "itype" => rule.checks.itype = Some(num(val, 255)?),
        "icode" => rule.checks.icode = Some(num(val, 255)?),
        "ttl" => rule.checks.ttl = Some(num(val, 255)?),
        "ip_proto" => {
            let v = need(val, name)?;
            let t = v.trim();
            let (prefix, rest) = match t.find(|c: char| c.is_ascii_alphanumeric()) {
                Some(i) => t.split_at(i),
                None => return Err(bad_value(v)),
            };
            let n = match ip_proto_number(rest) {
                Some(n) => n.to_string(),
                None => rest.to_string(),
            };
            rule.checks.ip_proto =
                Some(NumCmp::parse(&format!("{prefix}{n}"), 255).ok_or_else(|| bad_value(v))?);
        }
        "flags" | "tcp.flags" => {
            let v = need(val, name)?;
            rule.checks.flags = Some(TcpFlags::parse(v).ok_or_else(|| bad_value(v))?);
        }
        "window" => rule.checks.window = Some(num(val, u16::MAX as u32)?),
        // `stream-event:NAME`: an event Suricata's stream engine raises on
        // the packet, decided by the reassembler
        // ([`sluice_reassembly::events`]); one it cannot decide refuses
        // the rule with its reason.
        "stream-event" => {
            let v = need(val, name)?.trim().trim_matches('"');
            use sluice_reassembly::events::StreamEvent;
            match StreamEvent::parse(v) {
                Ok(e) => rule.checks.stream_events |= e.bit(),
                Err(Some(why)) => {
                    return Err(RuleSyntax::UnsupportedKeyword(format!(
                        "stream-event {v}: {why}"
                    )))
                }
                Err(None) => return Err(bad_value(v)),
            }
        }
        "ipv4-csum" | "tcpv4-csum" | "tcpv6-csum" | "udpv4-csum" | "udpv6-csum" | "icmpv4-csum"
        | "icmpv6-csum" => {
            let v = need(val, name)?;
            let valid = match v.trim().trim_matches('"') {
                "valid" => true,
                "invalid" => false,
                _ => return Err(bad_value(v)),
            };
            let v6 = name.contains("v6");
            let kind = match name.split('-').next().unwrap_or("") {
                "ipv4" => CsumKind::Ipv4,
                "tcpv4" | "tcpv6" => CsumKind::Tcp(v6),
                "udpv4" | "udpv6" => CsumKind::Udp(v6),
                _ => CsumKind::Icmp(v6),
            };
            rule.checks.csum = Some(Csum { kind, valid });
        }
        "tcp.mss" => rule.checks.mss = Some(num(val, u16::MAX as u32)?),
        // Not a sticky buffer: a condition on the server's certificate
        // chain (the Certificate message's count of certificates).
        "tls.cert_chain_len" => {
            to_tls(rule, name)?;
            rule.tls_chain_len = Some(num(val, u32::MAX)?);
        }
        "seq" | "ack" => {
            let v = need(val, name)?;
            let n: u32 = v.trim().parse().map_err(|_| bad_value(v))?;
            if name == "seq" {
                rule.checks.seq = Some(n);
            } else {
                rule.checks.ack = Some(n);
            }
        }
        "id" => rule.checks.id = Some(num(val, u16::MAX as u32)?),
        "icmp_id" => rule.checks.icmp_id = Some(num(val, u16::MAX as u32)?),
        "icmp_seq" => rule.checks.icmp_seq = Some(num(val, u16::MAX as u32)?),
        "tos" => {
            // Decimal, or hexadecimal after `x` or `0x` (Suricata's docs).
            let v = need(val, name)?;
            let t = v.trim();
            let (not, t) = match t.strip_prefix('!') {
                Some(r) => ("!", r.trim()),
                None => ("", t),
            };
            let hex = t.strip_prefix("0x").or_else(|| t.strip_prefix('x'));
            let n = match hex {
                Some(h) => u32::from_str_radix(h, 16).map_err(|_| bad_value(v))?,
                None => t.parse::<u32>().map_err(|_| bad_value(v))?,
            };
            rule.checks.tos =
                Some(NumCmp::parse(&format!("{not}{n}"), 255).ok_or_else(|| bad_value(v))?);
        }
        "fragbits" => {
            let v = need(val, name)?;
            rule.checks.fragbits = Some(FragBits::parse(v).ok_or_else(|| bad_value(v))?);
        }
        "fragoffset" => rule.checks.fragoffset = Some(num(val, 65535)?),
        "ipopts" => {
            let v = need(val, name)?;
            rule.checks.ipopts = Some(ipopt_named(v.trim()).ok_or_else(|| bad_value(v))?);
        }
        "sameip" => rule.checks.sameip = true,
        "stream_size" => {
            let v = need(val, name)?;
            rule.checks.stream_size = Some(StreamSize::parse(v).ok_or_else(|| bad_value(v))?);
        }
        "noalert" => rule.noalert = true,
        "threshold" | "detection_filter" => {
            let v = need(val, name)?;
            if rule.threshold.is_some() {
                return Err(RuleSyntax::TwoThresholds);
            }
            let t = Threshold::parse(v, name == "detection_filter").ok_or_else(|| bad_value(v))?;
            rule.threshold = Some(t);
        }
        "sid" => {
            let v = need(val, name)?;
            rule.sid = v.parse().map_err(|_| bad_value(v))?;
            cx.has_sid = true;
        }
        "rev" => {
            let v = need(val, name)?;
            rule.rev = v.parse().map_err(|_| bad_value(v))?;
        }
        "gid" => {
            let v = need(val, name)?;
            rule.gid = v.parse().map_err(|_| bad_value(v))?;
        }
        "priority" => {
            let v = need(val, name)?;
            rule.priority = Some(v.parse().map_err(|_| bad_value(v))?);
        }
        "classtype" => rule.classtype = Some(need(val, name)?.into()),
        "metadata" => {
            let v = need(val, name)?.trim();
            rule.metadata = Some(match rule.metadata.take() {
                Some(m) => format!("{m}, {v}").into(),
                None => v.into(),
            });
        }
        "target" => {
            let v = need(val, name)?;
            rule.target = Some(match v.trim() {
                "dest_ip" => true,
                "src_ip" => false,
                _ => return Err(bad_value(v)),
            });
        }
        other if crate::http::STICKY.iter().any(|(k, _)| *k == other) => {
            to_http(rule, other)?;
            cx.reset();
            cx.http = crate::http::STICKY
                .iter()
                .find(|(k, _)| *k == other)
                .map(|x| x.1);
        }
        other if crate::tls::STICKY.iter().any(|(k, _)| *k == other) => {
            to_tls(rule, other)?;
            cx.reset();
            cx.tls = crate::tls::STICKY
                .iter()
                .find(|(k, _)| *k == other)
                .map(|x| x.1);
        }
        other if crate::http::MODIFIERS.iter().any(|(k, _)| *k == other) => {
            let k = last(rule)?;
            to_http(rule, other)?;
            let b = crate::http::MODIFIERS
                .iter()
                .find(|(k, _)| *k == other)
                .map_or(crate::http::Buf::Uri, |x| x.1);
            move_content(rule, k, b);
        }
        other => {
            return Err(match status(other) {
                Some(Status::Ignored) => return Ok(()),
                Some(_) => RuleSyntax::UnsupportedKeyword(other.into()),
                None => RuleSyntax::UnknownKeyword(other.into()),
            })
        }
    }
    Ok(())
}

/// Refuses a rule naming a packet-header buffer without a keyword on it, as
/// Suricata does ("setup buffer ... but didn't add matches to it").
pub(super) fn named_buffers_used(rule: &Rule, cx: &ParseCx) -> Result<(), RuleSyntax> {
    for &b in &cx.hdr_named {
        if !rule.hdr.iter().any(|l| l.buf == b && !l.items.is_empty()) {
            return Err(RuleSyntax::EmptyBuffer(b.keyword().into()));
        }
    }
    Ok(())
}

/// Checks that hold between a rule's keywords once all are read.
pub(super) fn validate(rule: &Rule) -> Result<(), RuleSyntax> {
    // Suricata refuses a `tls.cert_fingerprint` content that is not a whole
    // fingerprint (59 characters), as it never matches.
    for l in &rule.tls {
        if l.buf != crate::tls::Buf::CertFingerprint || !l.xf.is_empty() {
            continue;
        }
        for i in &l.items {
            if let Item::Content(k) = i {
                let c = &rule.contents[*k as usize];
                if c.bytes.len() != 59 {
                    return Err(RuleSyntax::BadValue {
                        keyword: "tls.cert_fingerprint".into(),
                        value: format!(
                            "{} (a fingerprint is 59 characters)",
                            String::from_utf8_lossy(&c.bytes)
                        ),
                    });
                }
            }
        }
    }
    // An `smtp` rule on attachments is inspected over their bytes only; a
    // stream keyword as well would ask for a match in two places at once,
    // which Suricata's rule does over different transactions.
    if rule.smtp_file.is_some() && !rule.items.is_empty() {
        return Err(RuleSyntax::UnsupportedKeyword(
            "file_data after stream keywords on an smtp rule".into(),
        ));
    }
    if !rule.ssh.is_empty() && !rule.items.is_empty() {
        return Err(RuleSyntax::UnsupportedKeyword(
            "ssh.proto or ssh.software after stream keywords".into(),
        ));
    }
    for (i, c) in rule.contents.iter().enumerate() {
        let len = c.bytes.len() as u64;
        if c.is_relative() && c.is_absolute() {
            return Err(RuleSyntax::MixedPositioning(i + 1));
        }
        // `endswith` combines with a window (ET Open has `within; endswith`),
        // and with `startswith` (the buffer is the content).
        if c.startswith && (c.is_relative() || c.is_absolute()) {
            return Err(RuleSyntax::MixedPositioning(i + 1));
        }
        // Relative to nothing: the first payload keyword of a buffer.
        let first = |items: &[Item]| items.first() == Some(&Item::Content(i as u8));
        if c.is_relative()
            && (first(&rule.items)
                || rule.dns_query.iter().any(|q| first(&q.items))
                || rule.http.iter().any(|l| first(&l.items))
                || rule.tls.iter().any(|l| first(&l.items))
                || rule.smtp_file.as_ref().is_some_and(|l| first(l))
                || rule.ssh.iter().any(|(_, l)| first(l))
                || first(&rule.base64))
        {
            return Err(RuleSyntax::RelativeFirstContent);
        }
        if c.depth.is_some_and(|d| (d as u64) < len) {
            return Err(RuleSyntax::DepthTooShort(i + 1));
        }
        if c.within.is_some_and(|w| (w as u64) < len) {
            return Err(RuleSyntax::WithinTooShort(i + 1));
        }
    }
    // Suricata checks each positive content against its buffer's transforms.
    let lists = rule
        .http
        .iter()
        .map(|l| (&l.xf, &l.items))
        .chain(rule.tls.iter().map(|l| (&l.xf, &l.items)))
        .chain(rule.dns_query.iter().map(|q| (&q.xf, &q.items)));
    for (xf, items) in lists {
        for i in items {
            let Item::Content(k) = i else { continue };
            let c = &rule.contents[*k as usize];
            if c.negated {
                continue;
            }
            if let Some(t) = xf.refuses(&c.bytes) {
                return Err(RuleSyntax::TransformContent {
                    content: String::from_utf8_lossy(&c.bytes).into_owned(),
                    transform: t,
                });
            }
        }
    }
    if rule.contents.len() > 255 {
        return Err(RuleSyntax::TooManyContents);
    }
    // `base64_decode` ends its list (the decoded bytes are inspected by the
    // `base64_data` keywords, and nothing after them in the original
    // buffer), and those keywords need it to decode something.
    let b64_last = |l: &[Item]| {
        l.iter()
            .position(|i| matches!(i, Item::Base64Decode(_)))
            .is_none_or(|p| p + 1 == l.len())
    };
    if !(b64_last(&rule.items)
        && rule.http.iter().all(|l| b64_last(&l.items))
        && rule.tls.iter().all(|l| b64_last(&l.items))
        && rule.smtp_file.as_ref().is_none_or(|l| b64_last(l))
        && rule.ssh.iter().all(|(_, l)| b64_last(l))
        && rule.dns_query.iter().all(|q| b64_last(&q.items)))
    {
        return Err(RuleSyntax::UnsupportedKeyword(
            "keyword after base64_decode before base64_data".into(),
        ));
    }
    if rule.base64.is_empty()
        && (rule
            .items
            .iter()
            .any(|i| matches!(i, Item::Base64Decode(_)))
            || rule
                .http
                .iter()
                .any(|l| l.items.iter().any(|i| matches!(i, Item::Base64Decode(_)))))
    {
        return Err(RuleSyntax::UnsupportedKeyword(
            "base64_decode without base64_data keywords".into(),
        ));
    }
    if rule.threshold.is_some() && rule.action != super::Action::Alert {
        // Thresholds decide alerts after the batch's verdicts; a drop or pass
        // they would hold back has already acted.
        let k = match rule.threshold.map(|t| t.kind) {
            Some(ThresholdKind::DetectionFilter) => "detection_filter",
            _ => "threshold",
        };
        return Err(RuleSyntax::UnsupportedKeyword(format!(
            "{k} on a {} rule",
            match rule.action {
                super::Action::Drop => "drop",
                _ => "pass",
            }
        )));
    }
    let xcond = rule
        .xbits
        .iter()
        .any(|x| matches!(x.op, payload::XbitOp::IsSet | payload::XbitOp::IsNotSet));
    if xcond {
        // An xbits (or hostbits) condition is decided after the batch's
        // verdicts, from the store ([`crate::xbits`]): it can withhold an
        // alert, not undo a drop, a pass or a flowbit already changed.
        if rule.action != super::Action::Alert {
            return Err(RuleSyntax::UnsupportedKeyword(format!(
                "xbits or hostbits condition on a {} rule",
                match rule.action {
                    super::Action::Drop => "drop",
                    _ => "pass",
                }
            )));
        }
        if rule.flowbits.iter().any(|f| {
            matches!(
                f,
                payload::Flowbit::Set(_) | payload::Flowbit::Unset(_) | payload::Flowbit::Toggle(_)
            )
        }) {
            return Err(RuleSyntax::UnsupportedKeyword(
                "xbits or hostbits condition with a flowbits change".into(),
            ));
        }
        if rule.flowints.iter().any(|f| f.op.changes()) {
            return Err(RuleSyntax::UnsupportedKeyword(
                "xbits or hostbits condition with a flowint change".into(),
            ));
        }
    }
    if rule.packetwise() && rule.stream == StreamMode::Only {
        // `dsize` (a packet-header buffer) inspects each packet's payload,
        // `only_stream` only the stream (Suricata then needs both at once):
        // refused rather than guessed.
        let kw = match rule.hdr.first() {
            Some(l) if rule.checks.dsize.is_none() => l.buf.keyword(),
            _ => "dsize",
        };
        return Err(RuleSyntax::PacketPayload(kw.into()));
    }
    // UDP flows are established once traffic went both ways
    // ([`crate::engine::SEEN_REV`]); a `dns` rule's datagrams are UDP, its
    // streams TCP. An `ip` rule reads each packet's own protocol: TCP's
    // session, and for the others traffic both ways, which is tracked for
    // every protocol once such a rule is loaded (`Engine::ip_established`).
    let datagrams = matches!(rule.proto, Proto::Udp | Proto::Dns | Proto::Ip);
    if !matches!(rule.proto, Proto::Tcp | Proto::Http | Proto::Tls) && !rule.proto.stream_app() {
        // Established-ness and streams of other protocols are not tracked: refuse
        // rather than never match.
        let f = if rule.established && !datagrams {
            Some("established")
        } else if rule.not_established && !datagrams {
            Some("not_established")
        } else if rule.stream == StreamMode::Only {
            Some("only_stream")
        } else {
            None
        };
        if let Some(f) = f {
            return Err(RuleSyntax::UnsupportedFlow(format!(
                "{f} on {}",
                rule.proto.name()
            )));
        }
    }
    Ok(())
}
