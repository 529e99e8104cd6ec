//! The IPS network function (StatelessNF Algorithm 2).
//!
//! Signatures in a Suricata/Snort rule subset ([`rules`]) are compiled into two
//! Aho-Corasick DFAs (case-sensitive and `nocase` contents). TCP is matched over
//! each direction's reassembled stream ([`sluice_nf::Ctx::streams`]), except the
//! packetwise rules (`dsize`, `flow:no_stream`), over each segment's payload; UDP,
//! ICMP and other IP packets over each datagram's payload on its own.
//!
//! # Per-flow state
//!
//! One record per flow (canonical key, table [`TABLE_FLOW`]) holds, per direction,
//! both DFA states (`u32` each) so a match resumes across packets and the
//! partial matches of multi-content rules, and per
//! flow its `flowbits` (up to [`engine::MAX_FLOWBITS`], as ids of the loaded rule
//! set's bit names), per direction its HTTP framing ([`http::HttpDir`]) and
//! the description of its pending unit ([`pending::Pend`]).
//! Layout: `[version u8][flags u8][last_seen u64][nbits u8]
//! [nbits × bit u16]` then per direction
//! `[cs u32][ci u32][nfired u8 = 0][nprog u8][nprog × (rule u32,
//! next u8, last_end u64)]`, then per direction the HTTP framing (1 byte, 16
//! while a message is framed), then per direction the pending unit (1 byte, 9
//! with one), then the detected stream protocol (1 byte) and the `flowint`
//! variables (`[n u8][n × (id u16, value u32)]`, [`flowint`]), then, for a
//! TLS flow when an `ssl_state`/`ssl_version`/`app-layer-event:tls` rule is loaded, its handshake
//! and event state ([`tls::legacy::TlsFlow`], 51 bytes and up): 37 bytes for a
//! flow without partial matches, flowbits, flowints,
//! HTTP message or pending unit, plus 13 per partial match,
//! 2 per flowbit, 6 per flowint, 15 per direction framing HTTP and 8 per direction with a
//! pending unit ([`engine::record_size`]). A change of flowbits is written like
//! a block: acked before the batch leaves; so is a change of a pending unit,
//! whose bytes are a blob of their own ([`pending`], table
//! [`pending::TABLE_PEND`]), read in one extra round trip per batch only for
//! the flows that have one.
//! A TCP flow's record is read once per batch and written once per batch if it
//! changed (Table 4.1: one read and one write per data packet); pure ACKs write
//! nothing. A client SYN re-initialises the automaton states (Algorithm 2 line 4),
//! keeping the blocked flag. UDP/ICMP flows need no state, except that when the
//! rules hold a non-TCP `drop` rule their record is read to enforce the block.
//!
//! # Matching semantics
//!
//! * Positions: `offset`/`depth` from the stream start (TCP, per direction) or the
//!   payload start (others). `depth` counts from `offset`. `distance`/`within` are
//!   relative to the end of the previous content's match: the next content must
//!   start at or after `prev_end + distance` and end at or before
//!   `prev_end + distance + within` (Suricata's definition).
//! * Single-content rules are exact: every occurrence is checked.
//! * Rules with `pcre`, `byte_test`, `byte_jump`, `byte_extract`, `isdataat`,
//!   `base64_decode` (its `base64_data` keywords over the decoded bytes),
//!   negated contents, `startswith`/`endswith` or positions from variables are
//!   buffer rules ([`inspect`]): inspected over each packet's bytes (a datagram's
//!   payload, or a TCP packet's new stream bytes, positions counted from the
//!   stream start) with Suricata's keyword semantics and backtracking, when the
//!   automata found their last positive content in those bytes (or on every
//!   payload if they have none). So over TCP a buffer rule matches what one
//!   packet's bytes hold, not a match split across segments.
//! * Packetwise rules ([`rules::Rule::packetwise`]: `dsize` or
//!   `flow:no_stream`/`tcp-pkt` with payload keywords, over TCP) inspect each
//!   segment's own payload, never the stream, as Suricata inspects a
//!   signature needing the packet: candidates are the rules whose last
//!   positive content the stream walk found inside an in-order segment's
//!   payload (or a walk of the payload alone, for a segment whose payload is
//!   not its new stream bytes: out of order, retransmitted, overlapping), and
//!   those without contents; each is inspected over the payload
//!   ([`inspect`], positions from the payload start). `flow:stateless` asks
//!   nothing of the packet: its content rules are stream rules.
//! * `flowbits` and `flowint` conditions are checked when a rule matches; its
//!   set/unset/toggle and flowint changes apply then, also for `noalert` rules.
//! * `stream_size` compares each direction's sequence space (1 + bytes
//!   delivered in sequence, from the reassembler) on TCP packets of a tracked
//!   stream, as a per-packet keyword.
//! * Multi-content rules are matched in rule order without backtracking: per rule a
//!   progress `(next content, end of the last satisfied one)` is kept. The first
//!   occurrence of the first content anchors the match; a later occurrence
//!   re-anchors it only when the second content has `within` (then a later anchor
//!   is never worse). A content without `distance`/`within` may match anywhere after
//!   the previous content was satisfied (Suricata also accepts it before). So a
//!   rule is missed when only a non-first occurrence of an intermediate content
//!   satisfies the next content's window, and contents must appear in rule order.
//!   Where the stream match fails, a multi-content rule with relative contents is
//!   also inspected over the packet's bytes as a buffer rule, which backtracks.
//! * `flow:to_server`/`to_client` use the reassembler's client (the SYN sender) for
//!   TCP; for other protocols (no state) the side with the higher port is taken as
//!   the client. `flow:established` only matches TCP after the handshake.
//! * `drop`: the packet completing the match is dropped with an alert of action
//!   `blocked`, and so is every later packet of the flow. `pass`: the flow is no
//!   longer inspected. Non-TCP rules fire at most once per datagram.
//! * Rules without contents are packet rules: checked on every packet (TCP ones
//!   too, with or without payload or stream) against the header, `flow`, and the
//!   per-packet keywords (`dsize`, `flags`, `itype`, `icode`, `ip_proto`, `ttl`,
//!   `sameip`), and they alert on every packet they match. Content rules check
//!   the per-packet keywords on the packet that completes the match.
//! * `threshold` / `detection_filter` withhold alerts after the batch's verdicts,
//!   counting matches per tracked key in the store ([`threshold`]); `noalert`
//!   applies the action without an alert.
//! * DNS rules (protocol `dns`) match DNS messages told by content on any
//!   port ([`dns::detect`]: a UDP payload that parses whole as a message, or
//!   over TCP one message after its length prefix, whole in a segment's
//!   stream bytes or split across segments, its first bytes then kept as a
//!   pending unit ([`pending`], [`dns::unit`]) and the whole message
//!   inspected on the segment ending with it). Their payload keywords
//!   inspect the packet's payload (over TCP, the message's bytes); their `dns.query` keywords each question's name of
//!   a request (QR clear), dotted without the trailing dot, one name at a
//!   time. They are prefiltered by their own automata over the names and
//!   payload ([`dns::prefilter`]). Over UDP the side sending a request is the
//!   client.
//! * Alerts per match, as Suricata counts them: a rule fires at most once per
//!   packet and again on any later packet whose new bytes match it; bytes
//!   already scanned are never scanned again, so no match counts twice.
//!   Nothing records that a rule fired (an alert costs no store write).
//! * HTTP rules (protocol `http`, or `tcp` with an HTTP keyword) match
//!   HTTP/1.x messages told by content on any port ([`http`]): each
//!   direction's framing lives in the flow record, and a message's buffers are
//!   inspected on the packet completing its head (with the body bytes that
//!   follow in it) and, for body rules, on each later packet adding body
//!   bytes, over the body accumulated so far with the head ([`http::body`],
//!   up to [`Config::http_body_limit`]; once per rule and message). A head split across
//!   segments is kept as a pending unit ([`pending`]) and inspected whole on
//!   the packet completing it, as if it had come in one segment. Their own
//!   prefilter runs over every buffer of a message ([`http::prefilter`]).
//! * TLS rules (protocol `tls`, or `tcp` with a TLS keyword) match a
//!   ClientHello or ServerHello at the start of a TCP segment's stream bytes
//!   ([`tls`]): `tls.sni`, `ja3.*` and `ja3s.*` buffers, and the server's
//!   TLS 1.2 Certificate message (`tls.certs`, `tls.cert_subject`,
//!   `tls.cert_issuer`, `tls.cert_serial`, through x509-parser); their own
//!   prefilter ([`tls::prefilter`]). A hello, or a Certificate message after
//!   a ServerHello or starting a segment, that a segment ends inside is kept
//!   as a pending unit ([`pending`], [`tls::unit`]) and parsed whole on the
//!   segment completing it. Messages over several handshake records are
//!   read from the records joined ([`tls::defragment`]). The legacy
//!   certificate keywords (`tls.subject`, `tls.issuerdn`, validity) are
//!   checked with the certificate's buffers; `ssl_state` and `ssl_version`
//!   rules on every packet against the flow's handshake state
//!   ([`tls::legacy`]), at most once per direction as Suricata raises them.
//! * A TCP packet's payload without a stream (a mid-stream pickup the
//!   reassembler does not accept, an IP fragment) is matched on its own, as a
//!   datagram's payload (positions from the payload start, no state carried to
//!   the next packet), and counted (`ips_tcp_unreassembled`); as in Suricata
//!   without `stream.midstream`, `flow:established` rules do not match it.
//! * Data in a SYN or SYN-ACK (TCP Fast Open) is stream data, inspected on the
//!   SYN and counting as established (the server's application receives it
//!   with the connection); SYN data the server refused is scanned again when
//!   resent ([`sluice_reassembly`]).

pub mod alproto;
pub mod applayer;
pub mod asn1;
pub mod bufrules;
pub mod classification;
mod datagrams;
pub mod dataset;
mod decide;
pub mod decode_events;
pub mod dns;
pub mod engine;
mod eve_meta;
pub mod flowint;
pub mod ftp;
mod hashmpm;
mod header;
pub mod http;
pub mod inspect;
pub mod packetidx;
pub mod pending;
pub mod pkthdr;
mod records;
pub mod rules;
pub mod smtp;
pub mod ssh;
#[cfg(test)]
mod testrng;
pub mod threshold;
pub mod tls;
pub mod transform;
#[cfg(sluice_vectorscan)]
mod vectorscan;

/// The engine the IPS's literal searches run on in this process:
/// `"vectorscan"` (built with `libhs` and not turned off by
/// `SLUICE_IPS_MPM=hashed`) or `"hashed"` (docs/FUNCTIONS.md, "Vectorscan").
pub fn search_engine() -> &'static str {
    hashmpm::engine_name()
}
mod views;
pub mod xbits;

use std::path::{Path, PathBuf};

use classification::Classes;
use engine::{Engine, FlowState, Target};
use rules::{Action, Proto, Rule, RuleError, Vars};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use sluice_nf::batch::{self, Pass};
use sluice_nf::{Batch, Ctx, NetworkFunction, NfError, StateStore};
use sluice_state::{Key, Namespace, OpId, Ops};
use sluice_wire::parse::L4;

/// Table of per-flow IPS records.
pub const TABLE_FLOW: u8 = 1;

fn default_timeout() -> u64 {
    300
}

/// IPS settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Rule files, relative to the configuration's directory.
    #[serde(default)]
    pub rule_files: Vec<PathBuf>,
    /// Rules given inline, one per entry (reported as file `<inline>`).
    #[serde(default)]
    pub rules: Vec<String>,
    /// Variables for addresses and ports, e.g. `HOME_NET: "10.0.0.0/8"`.
    #[serde(default)]
    pub vars: Vars,
    /// Seconds without packets after which a flow's record is forgotten (300).
    #[serde(default = "default_timeout")]
    pub idle_timeout_secs: u64,
    /// Send each batch's scan progress to the store before the batch leaves,
    /// under an ownership lease (default false: deferred like other refreshes,
    /// up to the flow cache's bound). With it a crash loses no scan progress
    /// (short of a host failure with the send in flight), at one send per batch;
    /// without it a crash can lose that bound's worth, and the survivor restarts
    /// the automata where the stream resynchronises (docs/STATE.md).
    #[serde(default)]
    pub sync_progress: bool,
    /// Suricata's `classification.config` (relative to the configuration's
    /// directory): EVE `category` becomes the classtype's description and
    /// `severity` its priority (a rule's own `priority` wins), and a rule
    /// naming a classtype the file lacks is refused. Without it `category` is
    /// the classtype's short name and `severity` the rule's `priority` or 3.
    #[serde(default)]
    pub classification_file: Option<PathBuf>,
    /// Bytes of an HTTP message's body kept for body rules (`http.request_body`,
    /// `http.response_body`, `file_data`), which inspect the body so far, as
    /// Suricata's `request-body-limit`/`response-body-limit` (default 100 KiB,
    /// at most 16 MiB; 0: each packet's body bytes are inspected on their
    /// own). Body bytes past it are inspected per packet ([`http::body`]).
    #[serde(default = "default_body_limit")]
    pub http_body_limit: u32,
    /// Where the `state` files of `dataset` keywords are, relative to the
    /// configuration's directory (Suricata's `--data-dir`; default that
    /// directory). They are read, never written: sets rules change live in
    /// the store ([`dataset`]).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// Directories searched, in order, for a `dataset`/`datarep` file
    /// given by a relative `load` and not next to the rule file (relative
    /// to the configuration's directory).
    #[serde(default)]
    pub dataset_dirs: Vec<PathBuf>,
}

fn default_body_limit() -> u32 {
    http::body::DEFAULT_LIMIT
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A rule file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The classification file has a line that does not parse.
    #[error("{path}: {source}")]
    Classification {
        /// The file.
        path: String,
        /// The line at fault.
        source: classification::ClassError,
    },
    /// `http_body_limit` is over [`http::body::MAX_LIMIT`].
    #[error("http_body_limit {0} is over the maximum of {max} bytes", max = http::body::MAX_LIMIT)]
    BodyLimit(u32),
    /// The signatures could not be compiled.
    #[error("cannot compile signatures: {0}")]
    Compile(#[from] engine::CompileError),
    /// Every rule given was refused: the IPS would inspect nothing while looking
    /// configured.
    #[error("no usable rule: all {refused} rules were refused (first: {first})")]
    NoUsableRule {
        /// Rules refused.
        refused: usize,
        /// The first refusal, with its file and line.
        first: Box<RuleError>,
    },
}

/// Loads and compiles the rules of `config` into an IPS. Bad rules are skipped
/// and reported by [`Ips::warnings`]; unreadable files fail, and so does a
/// configuration whose every rule was refused.
pub fn build(config: &Config, ns: Namespace, base_dir: &Path) -> Result<Ips, ConfigError> {
    if config.http_body_limit > http::body::MAX_LIMIT {
        return Err(ConfigError::BodyLimit(config.http_body_limit));
    }
    let mut rules = Vec::new();
    let mut warnings = Vec::new();
    for f in &config.rule_files {
        let path = base_dir.join(f);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let (r, w) = rules::parse_rules(&text, &f.display().to_string(), &config.vars);
        rules.extend(r);
        warnings.extend(w);
    }
    let inline = config.rules.join("\n");
    let (r, w) = rules::parse_rules(&inline, "<inline>", &config.vars);
    rules.extend(r);
    warnings.extend(w);
    // Sids must be unique across files too.
    let mut seen = rustc_hash::FxHashSet::default();
    rules.retain(|r| {
        if seen.insert(r.sid) {
            true
        } else {
            warnings.push(RuleError {
                file: r.file.to_string(),
                line: r.line,
                msg: rules::RuleSyntax::DuplicateSid(r.sid),
            });
            false
        }
    });
    let classes = match &config.classification_file {
        Some(f) => {
            let path = base_dir.join(f);
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
                path: shown.clone(),
                source,
            })?;
            Some(
                Classes::parse(&text).map_err(|source| ConfigError::Classification {
                    path: shown,
                    source,
                })?,
            )
        }
        None => None,
    };
    classify(&mut rules, classes.as_ref(), &mut warnings);
    if rules.is_empty() && !warnings.is_empty() {
        return Err(ConfigError::NoUsableRule {
            refused: warnings.len(),
            first: Box::new(warnings.swap_remove(0)),
        });
    }
    let dirs = dataset::Dirs {
        base_dir,
        data_dir: config.data_dir.as_deref().unwrap_or(Path::new(".")),
        search: &config.dataset_dirs,
    };
    let mut ips = Ips::with_dirs(rules, warnings, ns, config.idle_timeout_secs, &dirs)?;
    ips.sync_progress = config.sync_progress;
    ips.http_body_limit = config.http_body_limit;
    Ok(ips)
}

/// Gives each rule its EVE `category` and `severity` from `classes` (see
/// [`Config::classification_file`]); with `classes`, rules naming an unknown
/// classtype are refused into `warnings`.
pub fn classify(rules: &mut Vec<Rule>, classes: Option<&Classes>, warnings: &mut Vec<RuleError>) {
    rules.retain_mut(|r| {
        let class = match (&r.classtype, classes) {
            (Some(ct), Some(cs)) => match cs.0.get(&**ct) {
                Some(c) => Some(c),
                None => {
                    warnings.push(RuleError {
                        file: r.file.to_string(),
                        line: r.line,
                        msg: rules::RuleSyntax::UnknownClasstype(ct.to_string()),
                    });
                    return false;
                }
            },
            _ => None,
        };
        // Idempotent: without `classes`, what an earlier call set stays.
        r.category = class
            .map(|c| c.description.clone())
            .or_else(|| r.category.take())
            .or_else(|| r.classtype.clone());
        r.severity = r
            .priority
            .or(class.map(|c| c.priority))
            .unwrap_or(r.severity);
        true
    });
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets inspected.
    pub packets: u64,
    /// Bytes scanned.
    pub scanned_bytes: u64,
    /// Alerts raised (including blocked).
    pub alerts: u64,
    /// Packets dropped by `drop` rules or because their flow is blocked.
    pub blocked_packets: u64,
    /// Flows that matched a `pass` rule.
    pub passed_flows: u64,
    /// Frames that are not IP, passed uninspected.
    pub non_ip: u64,
    /// TCP packets with payload but no reassembled stream (matched on their own).
    pub tcp_unreassembled: u64,
    /// Stream chunks that followed bytes the reassembler skipped (a
    /// resynchronisation): the automata restarted there.
    pub stream_gaps: u64,
    /// Records that could not be decoded (their packets are dropped).
    pub corrupt_records: u64,
    /// Records deleted by the idle timer.
    pub expired: u64,
    /// Alerts withheld by `threshold` or `detection_filter`.
    pub thresholded: u64,
    /// Alerts withheld because their rule's `xbits` condition failed.
    pub xbits_withheld: u64,
    /// Alerts withheld because a `dataset` keyword on a set rules change
    /// did not hold once decided ([`dataset`]).
    pub dataset_withheld: u64,
    /// Values added to sets rules change.
    pub dataset_added: u64,
    /// Split units (HTTP heads, TLS handshake units, DNS messages) completed
    /// from a pending blob and inspected whole ([`pending`]).
    pub pending_joined: u64,
    /// Pending blobs written.
    pub pending_saved: u64,
    /// Writes of pending blobs sent as their new bytes only (the store's
    /// append), the blob having only grown since this batch read it: a
    /// body's packets then send what they add, not the body so far.
    pub pending_appended: u64,
    /// Pending blobs a batch took from the instance's memory instead of
    /// reading them from the store ([`pending::BlobCache`]): this instance
    /// wrote them last.
    pub pending_cached: u64,
    /// Units over their bound: the direction stopped being parsed for that
    /// protocol.
    pub pending_overflow: u64,
    /// Pending units discarded because bytes before their continuation were
    /// lost (a gap, or new bytes not where the unit ended).
    pub pending_discarded: u64,
    /// Pending blobs the record announced but the store did not return
    /// whole (expired or lost): their unit is not inspected.
    pub pending_lost: u64,
    /// SSH banners raising `invalid_banner` or `long_banner`
    /// ([`ssh::banner_events`]; counted while a rule on them is loaded).
    pub ssh_banner_events: u64,
    /// FTP command and reply lines reaching the FTP parser's bound
    /// ([`ftp::LINE_LIMIT`]): `ftp.request_command_too_long` and
    /// `ftp.response_command_too_long`.
    pub ftp_long_lines: u64,
    /// HTTP body packets whose head's prefilter finds came from the blob
    /// ([`http::body`]) instead of a search of the head's buffers.
    pub http_head_reused: u64,
    /// HTTP messages whose body is compressed (`gzip`, `deflate`) and
    /// inflated for body rules ([`http::inflate`]).
    pub http_inflated_bodies: u64,
    /// HTTP bodies that reached the body limit: the bytes past it are not
    /// inspected, as in Suricata ([`http::body`]).
    pub http_body_limited: u64,
    /// Inflaters rebuilt from the compressed bytes the store keeps (a body
    /// continued on another instance, or evicted from the cache).
    pub http_inflate_rebuilds: u64,
    /// Compressed bodies whose stream is corrupt: inflated up to there,
    /// then passed through as sent.
    pub http_inflate_errors: u64,
    /// Compressed bodies whose inflating libhtp would log as failed
    /// (`http.gzip_decompression_failed` raised; decided only when a rule
    /// asks for it or inspects bodies).
    pub http_inflate_failed_events: u64,
    /// Responses that raised `http.range_invalid` (decided only when a
    /// rule asks for it).
    pub http_range_invalid: u64,
    /// Transactions that raised `http.100_continue_already_seen` (decided
    /// only when a rule asks for it).
    pub http_continue_again: u64,
    /// Responses that raised `http.unable_to_match_response_to_request`
    /// (decided only when a rule asks for it).
    pub http_unmatched_responses: u64,
    /// Compressed bodies inflated up to the cap and no further.
    pub http_inflate_capped: u64,
    /// Compressed bodies past the kept bytes whose inflater this instance
    /// did not hold: not inflated further.
    pub http_inflate_lost: u64,
    /// SMTP attachments read ([`smtp`]).
    pub smtp_attachments: u64,
    /// SMTP messages whose MIME structure went past the reader's bounds
    /// ([`smtp::mime`]).
    pub smtp_mime_anomalies: u64,
    /// SMTP attachments past the inspected limit: their later bytes are
    /// inspected a packet at a time ([`smtp::LIMIT`]).
    pub smtp_over_limit: u64,
    /// SMTP reader records that did not decode: the reader restarted.
    pub smtp_corrupt: u64,
    /// Frames the chain's parse (or the defragmenter, as malformed)
    /// dropped that raised a decoder event, inspected by the
    /// `decode-event` rules ([`decode_events`]); they stay dropped.
    pub malformed_inspected: u64,
}

/// The IPS function.
pub struct Ips {
    engine: Engine,
    warnings: Vec<RuleError>,
    ns: Namespace,
    timeout_ns: u64,
    nontcp_drop: bool,
    /// See [`Config::sync_progress`].
    sync_progress: bool,
    counters: Counters,
    pass: Pass<Ips>,
    hits: Vec<(u64, Target)>,
    keys: Vec<Key>,
    pre: PreScan,
    thresholds: threshold::Thresholds,
    /// The rules' `xbits` and the batch's log of their matches.
    xbits: xbits::Xbits,
    /// The rules' datasets and the batch's log of the matches decided after
    /// it.
    datasets: dataset::Datasets,
    /// Alerts of the batch to withhold (xbits, datasets), reused.
    withhold: Vec<usize>,
    /// Reassembled IP datagrams joining the batch ([`datagrams`]).
    datagrams: datagrams::Datagrams,
    /// A rule has a checksum keyword (`tcpv4-csum`, ...): packets' checksums
    /// are verified for it.
    csum_rules: bool,
    /// Some rule is an `smtp`, `ftp` or `smb` one: flows' stream protocols
    /// are detected ([`applayer`]); otherwise nothing is detected or stored.
    app_detect: bool,
    /// Some rule has `app-layer-protocol`: each flow direction's protocol
    /// is detected ([`alproto`]); otherwise nothing is detected or stored.
    alp_detect: bool,
    /// A rule names a JA3 or JA3S buffer: fingerprints are then written in
    /// EVE's `tls` objects (Suricata's `ja3-fingerprints: auto`).
    ja3_logged: bool,
    /// Rules to inspect over the packet's buffer, reused across packets.
    cands: Vec<u32>,
    /// Packetwise rules to inspect over a TCP segment's payload, reused.
    pcands: Vec<u32>,
    /// The packet rules a packet may match, reused.
    prules: Vec<u32>,
    /// Per rule, whether its header matches the packet being evaluated
    /// (`decide::HDR_*`), reset after each packet through `hdr_touched`.
    hdr_memo: Vec<u8>,
    /// The rules `hdr_memo` holds a result for.
    hdr_touched: Vec<u32>,
    /// A TCP packet's two stream parts made contiguous, reused.
    buf: Vec<u8>,
    /// A DNS request's query names, each with a `.` before it, reused.
    dns_names: Vec<u8>,
    /// Where each name is in `dns_names`.
    dns_spans: Vec<(u32, u32)>,
    /// Where a response's record names are in `dns_names`, each with its
    /// section and whether it is a record's data (`section << 1 | data`).
    dns_recs: Vec<(u32, u32, u8)>,
    /// An HTTP message's buffers, reused.
    http_bufs: http::Buffers,
    /// What the SMTP reader found in a packet's bytes (reused).
    smtp_out: smtp::mime::Output,
    /// The inflaters of the compressed HTTP bodies this instance is
    /// receiving ([`http::inflate`]: a cache, rebuilt from the store).
    inflaters: http::inflate::Inflaters,
    /// A packet's inflated body bytes (reused).
    http_inflated: Vec<u8>,
    /// What an inflater's rebuild makes again, thrown away (reused).
    http_reinflated: Vec<u8>,
    /// The HTTP framing's pieces of a message, reused.
    http_piece: http::Piece,
    /// See [`Config::http_body_limit`].
    http_body_limit: u32,
    /// Per rule: [`http::eval::HEAD`] and [`http::eval::BODY`] if it names
    /// head or body buffers.
    http_kind: Vec<u8>,
    /// Per rule: it inspects a body only once the body is whole or big
    /// enough ([`http::eval::waits_for_body`]).
    http_waits: Vec<bool>,
    /// Some rule waits for bodies: a FIN or reset ends one.
    http_waits_any: bool,
    /// True if a loaded rule names a body buffer.
    http_body_rules: bool,
    /// A `to_server` rule asks for a response's Content-Encoding events
    /// ([`engine::OWED_CE`]): response heads are read for them.
    http_ce_owed: bool,
    /// The [`http::eval::RANGE_INVALID`] and [`http::eval::RANGE_OWED`]
    /// bits the loaded rules ask for: response heads' `Content-Range` is
    /// read when one is set ([`engine::RANGE_BAD`]).
    http_range: u16,
    /// A rule asks for `http.100_continue_already_seen` or
    /// `http.unable_to_match_response_to_request`: messages' beginnings
    /// and responses' statuses are followed
    /// ([`engine::FlowState::http_cont`]).
    http_tx: bool,
    /// The message being received in the packet's direction ([`http::body`]).
    http_acc: http::body::BodyAcc,
    /// A packet's body bytes past the limit, reused.
    http_extra: Vec<u8>,
    /// The prefilter's finds in a body's new bytes, reused.
    http_found: Vec<u32>,
    /// The prefilter's finds in a message's head buffers, reused.
    http_head_rec: Vec<u32>,
    /// Buffers after their transforms (`dotprefix`, ...), reused.
    http_dot: transform::Scratch,
    /// Packet-header buffers after their transforms, reused.
    hdr_xf: transform::Scratch,
    /// The headers of the packet being decided as they arrived
    /// ([`sluice_nf::Streams::rx_header`]), when `rx_hdr_on`; reused.
    rx_hdr: Vec<u8>,
    /// `rx_hdr` holds the packet's headers.
    rx_hdr_on: bool,
    /// The decoder events of the packet being decided, once a
    /// `decode-event` rule asked ([`decode_events`]).
    decode_ev: Option<decode_events::Events>,
    /// The packet being decided is an IP fragment that overlapped bytes
    /// its datagram already had (the defragmenter's
    /// `Streams::frag_overlapped`): its `frag_overlap` decoder event.
    frag_overlap: bool,
    /// The application-layer prefilters' scratch space, reused.
    mpm: bufrules::MpmScratch,
    /// The application-layer rules, and the buffer rules of the stream
    /// automata, are prefiltered ([`Ips::set_prefilter`]).
    prefilter: bool,
    /// A TLS hello's buffers, reused.
    tls_bufs: tls::Buffers,
    /// Handshake records joined when a message spans records (reused).
    tls_joined: Vec<u8>,
    /// The stream automata's scratch space ([`engine::Matcher::scan_with`]).
    scan_scratch: engine::ScanScratch,
    /// The stream pre-scan's first stages per class of flow direction.
    views: views::Views,
    /// The batch's pending units in memory ([`pending`]).
    pend: pending::PendBatch,
    /// The pending blobs this instance wrote last ([`pending::BlobCache`]).
    blob_cache: pending::BlobCache,
    /// The blob reads of the batch: (record, direction, read).
    pend_reads: Vec<(u32, u8, OpId)>,
    /// Blob writes of the batch sent as appends, counted by the write step
    /// (which sees the function only shared) and added to
    /// [`Counters::pending_appended`] after it.
    pend_appends: std::cell::Cell<u64>,
    /// A TCP packet's stream bytes made contiguous for the application
    /// layer, reused.
    joined: Vec<u8>,
    /// The rules that fired on the packet being decided: a rule raises at
    /// most one alert per packet, as Suricata counts them.
    fired: Vec<u32>,
    /// The application protocol the packet being decided was found to carry
    /// by its bytes, before its parser ran (so plain rules fired on the same
    /// packet name it, as Suricata's detection does after its app layer).
    app_now: Option<&'static str>,
}

/// The batch's TCP stream bytes scanned ahead of evaluation
/// ([`engine::Matcher::scan_units`]). Buffers are reused across batches.
#[derive(Default)]
struct PreScan {
    /// Per packet: its job, or NONE.
    job_of: Vec<u32>,
    /// Per job: (entry, direction, packet, walk restarts here).
    job_src: Vec<(u32, u8, u32, bool)>,
    /// Per unit (entry, direction): its jobs, in packet order.
    unit_jobs: Vec<Vec<u32>>,
    unit_of: FxHashMap<(u32, u8), u32>,
    /// Per entry: the next job of each direction restarts (a SYN was seen).
    reset: Vec<[bool; 2]>,
    /// Per job: (state before, state after) for the case-sensitive and nocase DFAs.
    cs: Vec<(u32, u32)>,
    ci: Vec<(u32, u32)>,
    /// (job, part, end, target), sorted by job; `hit_at[job]` is where a job's start.
    hits: Vec<(u32, u8, u64, Target)>,
    /// The hits being sorted, and where each (job, part) goes (reused).
    sorted: Vec<(u32, u8, u64, Target)>,
    sort_at: Vec<u32>,
    hit_at: Vec<u32>,
    /// Per job, in unit order: its packet's flow key as it travelled and
    /// whether it goes to the server (what the flow groups are checked on).
    job_flow: Vec<(sluice_wire::FlowKey, bool)>,
    /// Per flow group, the memoised check of the job it was made for:
    /// `(job number << 1) | matches`, job numbers counted from
    /// `grp_epoch` ([`Ips::prescan`]).
    grp_memo: Vec<u64>,
    /// Jobs pre-scanned before this batch.
    grp_epoch: u64,
    /// Per job, in unit order: its view ([`views::Views`]).
    view_of: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl Ips {
    /// An IPS over already parsed rules (set files of `dataset` keywords
    /// relative to the working directory).
    pub fn new(
        rules: Vec<rules::Rule>,
        warnings: Vec<RuleError>,
        ns: Namespace,
        idle_timeout_secs: u64,
    ) -> Result<Ips, ConfigError> {
        let dirs = dataset::Dirs {
            base_dir: Path::new("."),
            data_dir: Path::new("."),
            search: &[],
        };
        Self::with_dirs(rules, warnings, ns, idle_timeout_secs, &dirs)
    }

    /// An IPS over already parsed rules, their set files found in `dirs`.
    pub fn with_dirs(
        mut rules: Vec<rules::Rule>,
        mut warnings: Vec<RuleError>,
        ns: Namespace,
        idle_timeout_secs: u64,
        dirs: &dataset::Dirs<'_>,
    ) -> Result<Ips, ConfigError> {
        // Rules not loaded by `build` still get their EVE category and severity.
        classify(&mut rules, None, &mut warnings);
        // Rules that set flowbits are evaluated before rules that read them,
        // whatever their order in the files, as Suricata orders its
        // signatures (detect-engine-sigorder.c): set only, set and read,
        // read only, then the others; stable otherwise.
        rules.sort_by_key(|r| {
            use rules::payload::Flowbit;
            let read = r
                .flowbits
                .iter()
                .any(|f| matches!(f, Flowbit::IsSet(_) | Flowbit::IsNotSet(_)));
            let write = r
                .flowbits
                .iter()
                .any(|f| matches!(f, Flowbit::Set(_) | Flowbit::Unset(_) | Flowbit::Toggle(_)));
            match (write, read) {
                (true, false) => 0u8,
                (true, true) => 1,
                (false, true) => 2,
                (false, false) => 3,
            }
        });
        let datasets = dataset::resolve(&mut rules, dirs, &mut warnings);
        // Non-TCP flows keep a record only when a rule can block them, keeps
        // flowbits on them or asks whether they are established (traffic
        // seen both ways, [`engine::SEEN_REV`]).
        let nontcp_drop = rules.iter().any(|r| {
            !matches!(r.proto, Proto::Tcp | Proto::Http | Proto::Tls)
                && !r.proto.stream_app()
                && (r.action != Action::Alert
                    || !r.flowbits.is_empty()
                    || !r.flowints.is_empty()
                    || r.established
                    || r.not_established)
        });
        let csum_rules = rules.iter().any(|r| r.checks.csum.is_some());
        let thresholds = threshold::Thresholds::new(&rules);
        let xbits = xbits::Xbits::new(&rules);
        let app_detect = rules.iter().any(|r| r.proto.stream_app());
        let alp_detect = rules
            .iter()
            .any(|r| !r.alp.is_empty() || r.checks.applayer_events != 0);
        let ja3_logged = rules.iter().any(|r| {
            use crate::tls::Buf::*;
            r.tls
                .iter()
                .any(|l| matches!(l.buf, Ja3Hash | Ja3String | Ja3sHash | Ja3sString))
        });
        let engine = Engine::new(rules).map_err(ConfigError::Compile)?;
        let http_kind: Vec<u8> = engine.rules.iter().map(http::eval::kind).collect();
        // Bodies are accumulated (and inflated) when a rule inspects them,
        // or asks whether inflating one fails.
        let http_body_rules = http_kind.iter().any(|k| k & http::eval::BODY != 0)
            || engine
                .rules
                .iter()
                .any(|r| r.http_body_events & http::eval::GZIP_FAILED != 0);
        // A response's Content-Encoding events are owed to `to_server`
        // rules ([`engine::OWED_CE`]).
        let http_ce_owed = engine
            .rules
            .iter()
            .any(|r| r.http_body_events & (http::eval::CE_TOO_MANY | http::eval::CE_ABNORMAL) != 0);
        let http_range = engine.rules.iter().fold(0, |b, r| {
            b | r.http_body_events & (http::eval::RANGE_INVALID | http::eval::RANGE_OWED)
        });
        let http_tx = engine.rules.iter().any(|r| {
            r.http_body_events & (http::eval::CONTINUE_AGAIN | http::eval::UNMATCHED) != 0
        });
        let http_waits: Vec<bool> = engine
            .rules
            .iter()
            .map(http::eval::waits_for_body)
            .collect();
        let http_waits_any = http_waits.iter().any(|&w| w);
        let nrules = engine.rules.len();
        Ok(Ips {
            engine,
            warnings,
            ns,
            timeout_ns: idle_timeout_secs.saturating_mul(1_000_000_000).max(1),
            nontcp_drop,
            sync_progress: false,
            counters: Counters::default(),
            pass: Pass::default(),
            hits: Vec::new(),
            keys: Vec::new(),
            pre: PreScan::default(),
            thresholds,
            xbits,
            datasets,
            withhold: Vec::new(),
            datagrams: datagrams::Datagrams::default(),
            csum_rules,
            app_detect,
            alp_detect,
            ja3_logged,
            cands: Vec::new(),
            pcands: Vec::new(),
            prules: Vec::new(),
            hdr_memo: vec![decide::HDR_UNKNOWN; nrules],
            hdr_touched: Vec::new(),
            buf: Vec::new(),
            dns_names: Vec::new(),
            dns_spans: Vec::new(),
            dns_recs: Vec::new(),
            http_bufs: http::Buffers::default(),
            smtp_out: smtp::mime::Output::default(),
            inflaters: Default::default(),
            http_inflated: Vec::new(),
            http_reinflated: Vec::new(),
            http_piece: http::Piece::default(),
            http_body_limit: http::body::DEFAULT_LIMIT,
            http_kind,
            http_waits,
            http_waits_any,
            http_body_rules,
            http_ce_owed,
            http_range,
            http_tx,
            http_acc: Default::default(),
            http_extra: Vec::new(),
            http_found: Vec::new(),
            http_head_rec: Vec::new(),
            http_dot: transform::Scratch::default(),
            hdr_xf: transform::Scratch::default(),
            rx_hdr: Vec::new(),
            rx_hdr_on: false,
            decode_ev: None,
            frag_overlap: false,
            mpm: Default::default(),
            prefilter: true,
            tls_bufs: tls::Buffers::default(),
            tls_joined: Vec::new(),
            scan_scratch: Default::default(),
            views: Default::default(),
            pend: Default::default(),
            blob_cache: Default::default(),
            pend_reads: Vec::new(),
            pend_appends: Default::default(),
            joined: Vec::new(),
            fired: Vec::new(),
            app_now: None,
        })
    }

    /// Turns the HTTP, TLS and DNS prefilters on (the default) or off. Off,
    /// every rule of the protocol is inspected over every message, and every
    /// buffer or packetwise rule of the packet's protocol over every
    /// packet's bytes (not only those whose fast pattern the stream automata
    /// found): slower, with the same alerts and verdicts, which is what the
    /// prefilters are tested against.
    pub fn set_prefilter(&mut self, on: bool) {
        self.prefilter = on;
    }

    /// Waits until every view of the stream pre-scan made so far has its
    /// own Vectorscan database ([`views`]), compiled on a thread of its own
    /// while packets are searched with the database of all the patterns:
    /// from then on what the search finds no longer depends on timing (the
    /// verdicts never do). For tests that must cover both. Returns how
    /// many views have a database of their own (0 without Vectorscan).
    pub fn wait_views(&self) -> usize {
        let stages = self.views.stages();
        stages.iter().for_each(hashmpm::FirstStage::wait_compiled);
        stages.iter().filter(|s| s.has_own_search()).count()
    }

    /// Rules skipped while loading, with file and line.
    pub fn warnings(&self) -> &[RuleError] {
        &self.warnings
    }

    /// The skipped rules counted by reason ([`rules::RuleSyntax::reason`]), most
    /// frequent first.
    pub fn skipped_by_reason(&self) -> Vec<(String, usize)> {
        rules::count_reasons(&self.warnings)
    }

    /// Number of rules loaded.
    pub fn rule_count(&self) -> usize {
        self.engine.rules.len()
    }

    /// HTTP rules checked on every HTTP message (no content on an HTTP
    /// buffer for the prefilter).
    pub fn http_unfiltered(&self) -> usize {
        self.engine.http.unfiltered()
    }

    /// The counters.
    pub fn stats(&self) -> &Counters {
        &self.counters
    }

    /// Walks `bytes` through the DFAs with no rule evaluation and no state access:
    /// the raw scan limit the IPS is measured against. Returns match states met.
    pub fn raw_scan_bytes(&self, bytes: &[u8]) -> usize {
        self.engine.cs.as_ref().map_or(0, |m| m.raw_scan(bytes))
            + self.engine.ci.as_ref().map_or(0, |m| m.raw_scan(bytes))
    }
}

impl NetworkFunction for Ips {
    fn kind(&self) -> &'static str {
        "ips"
    }

    fn config_warnings(&self, out: &mut Vec<String>) {
        out.extend(self.warnings().iter().map(|w| w.to_string()));
        if !self.warnings.is_empty() {
            let by: Vec<String> = self
                .skipped_by_reason()
                .iter()
                .map(|(r, n)| format!("{n} {r}"))
                .collect();
            out.push(format!(
                "loaded {} rules, skipped {}: {}",
                self.rule_count(),
                self.warnings.len(),
                by.join(", ")
            ));
        }
    }

    fn namespace(&self) -> Namespace {
        self.ns
    }

    /// The scan state of every packet `process` inspects.
    fn prefetch(&self, batch: &Batch, ops: &mut Ops) {
        for p in batch
            .pkts
            .iter()
            .filter(|p| p.is_live() && p.meta.is_ip() && (p.meta.l4 == L4::Tcp || self.nontcp_drop))
        {
            let (canon, _) = p.meta.flow.canonical();
            let h = canon.directional_hash();
            if ops.first_listing(h, self.ns, TABLE_FLOW) {
                ops.get_owned(Key::flow(self.ns, TABLE_FLOW, &canon, &[]), h);
            }
        }
    }

    fn wants_streams(&self) -> bool {
        true
    }

    /// With a `decode-event` rule loaded, the frames the parse refused are
    /// inspected for their decoder events ([`decode_events`]).
    fn sees_malformed(&self) -> bool {
        self.engine.any_decode
    }

    fn wants_stream_events(&self) -> bool {
        self.engine.any_stream_event
    }

    fn process(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        let first_event = ctx.events.len();
        self.xbits.clear();
        self.datasets.clear();
        let datagrams = datagrams::Datagrams::any(ctx.streams);
        if datagrams {
            self.datagrams.enter(batch, ctx.streams, ctx.stage);
        }
        let r = batch::split(self, |ips, pass| {
            pass.gather(ips, batch, ctx);
            ips.counters.corrupt_records += pass.read(ips, store, ctx.now_ns)?;
            ips.read_pending(batch, ctx.streams, pass, store)?;
            ips.prescan(batch, ctx.streams, pass);
            pass.decide(ips, batch, ctx);
            let r = pass.write(ips, store);
            ips.counters.pending_appended += ips.pend_appends.take();
            // The blobs written are kept for the flows' next batches; after
            // a failed write none is trusted.
            match r {
                Ok(_) => ips.keep_blobs(pass),
                Err(_) => ips.blob_cache.clear(),
            }
            r
        });
        if datagrams {
            self.datagrams.leave(batch);
        }
        r?;
        if self.engine.any_decode {
            self.inspect_malformed(batch, ctx.events);
        }
        // xbits conditions, then thresholds, decide which of the batch's
        // alerts are raised, only once its verdicts are made (they never
        // change a verdict); a match whose xbits fail is not counted.
        let mut withhold = std::mem::take(&mut self.withhold);
        withhold.clear();
        self.xbits.apply(self.ns, &mut withhold, store)?;
        let unset = withhold.len();
        let added = self.datasets.added;
        self.datasets.apply(self.ns, &mut withhold, store)?;
        self.counters.dataset_added += self.datasets.added - added;
        withhold.sort_unstable();
        withhold.dedup();
        self.counters.xbits_withheld += unset as u64;
        self.counters.dataset_withheld += (withhold.len() - unset.min(withhold.len())) as u64;
        self.counters.alerts -= withhold.len() as u64;
        if !withhold.is_empty() {
            let mut j = first_event;
            let mut k = 0;
            let mut i = first_event;
            // Keep the events not withheld, in order.
            while i < ctx.events.len() {
                if k < withhold.len() && withhold[k] == i {
                    k += 1;
                } else {
                    ctx.events.swap(j, i);
                    j += 1;
                }
                i += 1;
            }
            ctx.events.truncate(j);
        }
        self.withhold = withhold;
        let withheld = self
            .thresholds
            .apply(self.ns, ctx.events, first_event, store)?;
        self.counters.alerts -= withheld as u64;
        self.counters.thresholded += withheld as u64;
        Ok(())
    }

    fn on_timers(&mut self, ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        let now = ctx.now_ns;
        loop {
            self.keys.clear();
            store.take_expired(self.ns, now, 256, &mut self.keys)?;
            if self.keys.is_empty() {
                return Ok(());
            }
            self.pass.ops.clear();
            // A threshold window's timer is its end: the record goes. Flow
            // records are checked for activity since the timer was armed.
            let ids: Vec<Option<OpId>> = self
                .keys
                .iter()
                .map(|k| (k.table() == TABLE_FLOW).then(|| self.pass.ops.get(*k)))
                .collect();
            store.execute(&mut self.pass.ops)?;
            let mut deadlines = Vec::with_capacity(ids.len());
            // Pending blobs of expiring records go with them.
            let mut blobs = Vec::new();
            for (k, id) in self.keys.iter().zip(&ids) {
                let Some(id) = id else {
                    deadlines.push(Some(0));
                    continue;
                };
                deadlines.push(match self.pass.ops.decode::<FlowState>(*id) {
                    Ok(Some(s)) if !self.expired(&s, now) => {
                        Some(s.last_seen.saturating_add(self.timeout_ns))
                    }
                    Ok(None) => None,
                    Ok(Some(s)) => {
                        if let Some(canon) = k.flow_key() {
                            for d in 0..2 {
                                if s.pend[d].has_blob() {
                                    blobs.push(pending::key(self.ns, &canon, d));
                                }
                            }
                        }
                        Some(0)
                    }
                    Err(_) => Some(0),
                });
            }
            let full = self.keys.len() == 256;
            self.pass.ops.clear();
            for k in blobs {
                self.pass.ops.delete(k);
            }
            for (k, dl) in self.keys.iter().zip(deadlines) {
                match dl {
                    Some(0) => {
                        self.pass.ops.delete(*k);
                        self.counters.expired += (k.table() == TABLE_FLOW) as u64;
                    }
                    Some(t) => {
                        self.pass.ops.arm_timer(*k, t);
                    }
                    None => {}
                }
            }
            if !self.pass.ops.is_empty() {
                store.execute(&mut self.pass.ops)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        let c = &self.counters;
        out.extend_from_slice(&[
            ("ips_rules", self.engine.rules.len() as u64),
            ("ips_rules_skipped", self.warnings.len() as u64),
            ("ips_packets", c.packets),
            ("ips_scanned_bytes", c.scanned_bytes),
            ("ips_alerts", c.alerts),
            ("ips_blocked_packets", c.blocked_packets),
            ("ips_passed_flows", c.passed_flows),
            ("ips_tcp_unreassembled", c.tcp_unreassembled),
            ("ips_non_ip", c.non_ip),
            ("ips_stream_gaps", c.stream_gaps),
            ("ips_datagrams", self.datagrams.inspected),
            ("ips_datagrams_refused", self.datagrams.refused),
            ("ips_corrupt_records", c.corrupt_records),
            ("ips_expired", c.expired),
            ("ips_thresholded", c.thresholded),
            ("ips_xbits_withheld", c.xbits_withheld),
            ("ips_dataset_withheld", c.dataset_withheld),
            ("ips_dataset_added", c.dataset_added),
            ("ips_pending_joined", c.pending_joined),
            ("ips_pending_saved", c.pending_saved),
            ("ips_pending_appended", c.pending_appended),
            ("ips_pending_cached", c.pending_cached),
            ("ips_pending_overflow", c.pending_overflow),
            ("ips_pending_discarded", c.pending_discarded),
            ("ips_pending_lost", c.pending_lost),
            ("ips_ssh_banner_events", c.ssh_banner_events),
            ("ips_ftp_long_lines", c.ftp_long_lines),
            ("ips_http_head_reused", c.http_head_reused),
            ("ips_http_inflated_bodies", c.http_inflated_bodies),
            ("ips_http_body_limited", c.http_body_limited),
            ("ips_http_inflate_rebuilds", c.http_inflate_rebuilds),
            ("ips_http_inflate_errors", c.http_inflate_errors),
            (
                "ips_http_inflate_failed_events",
                c.http_inflate_failed_events,
            ),
            ("ips_http_inflate_capped", c.http_inflate_capped),
            ("ips_http_range_invalid", c.http_range_invalid),
            ("ips_http_continue_again", c.http_continue_again),
            ("ips_http_unmatched_responses", c.http_unmatched_responses),
            ("ips_http_inflate_lost", c.http_inflate_lost),
            ("ips_smtp_attachments", c.smtp_attachments),
            ("ips_smtp_mime_anomalies", c.smtp_mime_anomalies),
            ("ips_smtp_over_limit", c.smtp_over_limit),
            ("ips_smtp_corrupt", c.smtp_corrupt),
            ("ips_malformed_inspected", c.malformed_inspected),
        ]);
    }
}
