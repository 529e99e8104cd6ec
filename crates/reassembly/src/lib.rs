//! TCP stream reassembly over the state API (StatelessNF Algorithm 3).
//!
//! A [`Reassembler`] turns the TCP packets of a batch into in-order stream bytes
//! ([`Streams`]) that any function of the chain may consume (the IPS does). All of
//! its state lives in a [`StateStore`], so any instance can process any packet.
//!
//! # State
//!
//! * **Connection record** (table [`TABLE_CONN`], key = canonical flow key): which
//!   side is the client (the SYN sender), handshake flags, and per direction the
//!   next expected sequence number, the bytes delivered so far and the sorted list
//!   of buffered out-of-order segments `(seq u32, len u16)`. Layout (little-endian):
//!   `[version=2 u8][flags u8][synced u8][last_seen u64]` (`flags`: client
//!   side, SYN-ACK seen, established, mid-stream, FIN each way, RST, and bit 7
//!   Fast Open; `synced`: bits 0-1
//!   which directions know their sequence numbers, bits 2-3 which resynchronised
//!   and have not delivered since, bits 4-5 which know `ts_recent`, bit 6 the
//!   handshake restarted before completing; the last two bits of each byte
//!   serve stream events only, see [`events`], and cost no byte) then per
//!   direction `[next u32][delivered u64][ts_recent u32][n u8][n × (seq u32, len u16)]`:
//!   45 bytes plus 6 per buffered segment ([`record::record_size`]); at most
//!   237 bytes with the default 16 segments per direction. Version 1 records
//!   (no `ts_recent`) are still read.
//! * **Segment blobs** (table [`TABLE_SEG`], key = canonical flow, direction byte,
//!   big-endian seq): the raw buffered bytes; their length is checked against the
//!   record on read.
//!
//! # Store access per batch
//!
//! One round trip reads every connection record the batch touches. A second one
//! carries, in this order, the reads of buffered blobs that packets released (only
//! when a gap filled), deletes of those blobs, writes of newly buffered blobs, the
//! changed records and timers. A record is written only if it changed (a pure ACK
//! of an established connection writes nothing), or to refresh `last_seen` when it
//! is older than an eighth of the idle timeout. Packets of one flow in a batch see
//! each other's effects through a per-batch overlay; a segment buffered and released
//! within the same batch never reaches the store.
//!
//! # Policy
//!
//! * **First wins, and the host is made to agree.** Bytes already received
//!   (delivered or buffered) are never replaced by a later segment covering the
//!   same sequence numbers: an IPS can never un-scan bytes. Host stacks differ
//!   (Ptacek & Newsham; Linux keeps an in-order segment over queued
//!   out-of-order data it covers), so where they could read other bytes than
//!   these, the packet is normalised inline: an in-order segment whose bytes lie
//!   under buffered ones leaves carrying the buffered bytes, its checksum
//!   recomputed (`reassembly_overlap_rewrites`); an out-of-order segment over
//!   buffered bytes is dropped (`reassembly_overlap_drops`: the earlier copy was
//!   forwarded, and the sender retransmits what is missing once the gap fills).
//!   Retransmitted bytes behind the stream are trimmed and forwarded as they are:
//!   every stack keeps the bytes it already received in order.
//! * **Insertion.** A segment the host will discard must not stand for the real
//!   one: a data segment without ACK is dropped (`reassembly_no_ack`), and the
//!   chain verifies TCP checksums before reassembly (`verify_checksums`, see
//!   sluice-chain's `checksums.rs`).
//! * **Urgent data.** Most stacks take the urgent byte out of the stream
//!   (Linux without `SO_OOBINLINE`), so the application reads other bytes than
//!   were inspected: the URG flag and urgent pointer are cleared on every
//!   segment (`reassembly_urgent_cleared`), and every receiver reads the bytes
//!   inline. Applications relying on urgent data (telnet's interrupt) see it
//!   inline too.
//! * **PAWS** (RFC 7323 §5): per direction the sender's latest TCP timestamp
//!   on a data segment at the stream's left edge (`ts_recent`) is kept, and a
//!   data segment timestamped older (serial arithmetic) is dropped
//!   (`reassembly_paws_drops`): Linux discards it, so its bytes must not stand
//!   for the real ones. Pure ACKs are not looked at (they write nothing), so a
//!   forgery timestamped between the sender's last data segment and a later
//!   pure ACK of its own still passes here and not at the host.
//! * **TTL.** A segment whose IP TTL expires on a router between the IPS and
//!   the host is read here and never there: every TCP segment arriving with
//!   a TTL (hop limit) below [`Config::min_ttl`] (default 8) leaves with that
//!   TTL, IPv4 header checksum patched (`reassembly_ttl_raised`; Snort's
//!   `ip4: ttl` normaliser). Sluice's own path does not decrement TTLs; a
//!   legitimate segment arrives this low only after some 56 hops.
//! * **IP options.** A host may drop a packet for its options (Linux drops
//!   source-routed ones by default) that an IPS reads: the IPv4 options of
//!   every TCP segment are overwritten with NOPs, header checksum patched
//!   (`reassembly_ip_options_cleared`, [`Config::clear_ip_options`]; Snort's
//!   `ip4: opts`). IPv6 extension headers are left alone. The headers of a
//!   segment rewritten here (URG, TTL, IP options, overlapping bytes and
//!   the checksum) are kept as they arrived for the batch
//!   ([`Streams::rx_header`]), so a consumer can read what the sender sent
//!   (the IPS's `tcp.hdr`, `ipv4.hdr`).
//! * **IP fragments of TCP.** A fragment carries no TCP header (or only the
//!   first does), so the stream never sees its bytes: a signature split over
//!   two fragments would pass, each fragment inspected alone, while the host
//!   reassembles it. With [`Config::tcp_fragments`] `drop` (the default)
//!   every IPv4 or IPv6 fragment of a TCP segment is dropped
//!   (`reassembly_tcp_fragment_drops`): TCP senders set Don't Fragment and
//!   size segments to the path (Linux does), so only an evasion or a broken
//!   path fragments TCP. `inspect` passes them, each matched on its own.
//! * **IP fragments of UDP.** The same holds for a datagram sent in
//!   fragments: nothing joins them, so a signature split over two would
//!   pass. With [`Config::udp_fragments`] `drop` (the default) every IPv4 or
//!   IPv6 fragment of a UDP datagram is dropped
//!   (`reassembly_udp_fragment_drops`); `inspect` passes them, each matched
//!   on its own. Few UDP protocols fragment today (DNS resolvers cap EDNS
//!   answers at 1,232 bytes since DNS Flag Day 2020 to avoid it), but a
//!   deployment carrying large datagrams (IKE with certificates, some VPNs,
//!   NFS over UDP) sets `inspect`.
//! * **Out-of-order packets are forwarded** as they arrive; their bytes reach the
//!   stream consumer only once the gap before them fills. A receiver cannot use
//!   them before that either, so a match completed by the gap-filling packet still
//!   lets an IPS drop that packet and block the flow before the application sees it.
//! * **Bounded buffer, fail closed.** When buffering a segment would exceed
//!   [`Config::max_segments`] or [`Config::max_bytes`] for its direction, it is not
//!   buffered and the packet is dropped (`reassembly_overflow`), so its bytes never
//!   pass unscanned; the sender retransmits.
//! * **Resync.** When one side acknowledges bytes of the other that were never
//!   delivered here, and the sender did send that far (buffered segments reach
//!   the acknowledged point), the bytes between what was delivered and the first
//!   buffered segment reached the receiver past this reassembler: the record was
//!   behind the stream (an instance died before its last progress reached the
//!   store) or traffic bypassed it. Nobody will resend acknowledged bytes, so
//!   waiting would fill the buffer and stall the connection; instead the gap is
//!   skipped (`reassembly_resyncs`, `reassembly_resync_skipped_bytes`), the
//!   buffered bytes are delivered with the next packet that has no bytes of
//!   its own, whichever way it travels (the receiver's acknowledging ACK or
//!   RST itself, as a [`StreamChunk::peer`] chunk, `reassembly_peer_releases`:
//!   their sender may send nothing more), or else with the sender's next
//!   packet, and that chunk says [`StreamChunk::gap`] so a consumer restarts
//!   whatever it carries across the stream (the IPS its automata). An honest receiver
//!   never acknowledges bytes it lacks, and acknowledgements beyond anything
//!   sent are ignored, so a lost segment on the way is still waited for.
//! * **SYN-ACK.** A SYN-ACK synchronises the server's side only if it
//!   acknowledges the client's SYN (or data sent with it): the client
//!   discards one that does not (RFC 9293 §3.10.7.3), and the real one
//!   that follows must not be taken for a retransmission.
//! * **Stream events.** For a consumer that asks ([`Streams::want_events`],
//!   the IPS with `stream-event` rules), each TCP packet's Suricata stream
//!   events are decided on the record as the packet found it ([`events`]);
//!   otherwise nothing is computed, nor kept beyond what the record holds.
//! * **Mid-stream pickup.** With `midstream: false` (default), packets of
//!   connections never seen from their SYN get no stream (`None` chunk) and pass
//!   untouched (dropping them is the stateful firewall's job). With `midstream: true`
//!   the first packet seen creates a record: its sender is taken as the client,
//!   each direction starts at its first packet's sequence number, and the
//!   connection is flagged established.
//! * Data in a SYN or SYN-ACK (TCP Fast Open, RFC 7413) is stream data: a
//!   server's stack hands a client SYN's data to the application with the
//!   connection, before the handshake completes, so it is delivered (and
//!   inspected) with that packet, flagged established for rules that need it
//!   (`tfo_bytes`). Data on a SYN that does not start or restart the
//!   connection (a retransmission, an injected SYN) is not. FIN does not
//!   advance the sequence space (nothing may follow it). A client SYN with a new ISN restarts
//!   the connection only if the old one is closed (RST or FIN both ways) or never
//!   established; otherwise it is ignored, so an injected SYN cannot reset the
//!   stream of a live connection.
//! * A record (and its blobs) expires after [`Config::idle_timeout_secs`] without
//!   packets; an expired record is treated as absent even before its timer fires.
//! * Two instances racing on packets of one flow at the same instant may lose an
//!   update (no compare-and-set on the record); flows are expected to be steered by
//!   symmetric hash, as in StatelessNF.

pub mod defrag;
pub mod events;
pub mod record;
pub mod streams;

pub use defrag::{DefragCounters, Defragmenter};
use record::{
    gap_bit, ts_bit, Conn, Seg, C2S, F_CLIENT_FWD, F_ESTABLISHED, F_FIN_C, F_FIN_S, F_MIDSTREAM,
    F_RST, F_SYNACK, F_TFO, MAX_SEGMENTS_CAP, S2C, S_ODD,
};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use sluice_packet::Batch;
use sluice_state::{DecodeError, Key, Namespace, OpId, Ops, StateStore, StoreError};
use sluice_wire::parse::{Fragment, L4};
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN, URG};
use sluice_wire::FlowKey;
pub use streams::{Datagram, RxHeader, StreamChunk, Streams};

/// Table of connection records.
pub const TABLE_CONN: u8 = 1;
/// Table of buffered segment blobs.
pub const TABLE_SEG: u8 = 2;

/// Reassembly settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Buffered out-of-order segments per direction (default 16, at most 64).
    pub max_segments: usize,
    /// Buffered out-of-order bytes per direction (default 65536).
    pub max_bytes: usize,
    /// Seconds without packets after which a connection is forgotten (default 300).
    pub idle_timeout_secs: u64,
    /// Deliver streams of connections picked up mid-stream (default false).
    pub midstream: bool,
    /// Send each batch's stream progress to the store before the batch leaves,
    /// under an ownership lease (default false: deferred, up to the flow
    /// cache's bound; a crash can lose that much, and the survivor
    /// resynchronises where the receiver's acknowledgements show bytes passed).
    pub sync_progress: bool,
    /// TCP segments arriving with a lower IP TTL (or hop limit) leave with
    /// this one (default 8; 0 leaves TTLs alone), so that no segment read
    /// here expires before the host (see "Normalisation").
    pub min_ttl: u8,
    /// Overwrite the IPv4 options of TCP segments with NOPs (default true),
    /// so no host drops for its options a segment read here (see
    /// "Normalisation").
    pub clear_ip_options: bool,
    /// What IP fragments of TCP segments get: `drop` (default) or `inspect`
    /// (forwarded, each fragment's payload matched on its own; see
    /// "Normalisation").
    pub tcp_fragments: TcpFragments,
    /// What IP fragments of UDP datagrams get: `drop` (default), `inspect`
    /// (forwarded, each fragment's payload matched on its own) or
    /// `reassemble` (forwarded, the whole datagram matched; see the
    /// [`defrag`] module).
    pub udp_fragments: Fragments,
    /// What IP fragments of other protocols (ICMP, ESP, GRE, ...) get:
    /// `inspect` (default: forwarded, each matched on its own),
    /// `reassemble` or `drop`.
    pub other_fragments: Fragments,
    /// Fragments one datagram may have under `reassemble` (default 64, at
    /// most 255): a fragment beyond is dropped and its datagram blocked.
    pub max_fragments: usize,
    /// Seconds after its first fragment a datagram being reassembled is
    /// forgotten (default 60, Windows' value; Linux's is 30): never less
    /// than a receiver's, or a fragment sent after this forgot the others
    /// would complete there a datagram never inspected here.
    pub fragment_timeout_secs: u64,
}

/// The policy for IP fragments of UDP datagrams ([`Config::udp_fragments`])
/// and of other protocols but TCP ([`Config::other_fragments`]).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Fragments {
    /// Dropped.
    #[default]
    Drop,
    /// Forwarded; consumers see each fragment alone.
    Inspect,
    /// Forwarded; the fragment completing a datagram brings the whole
    /// datagram to consumers ([`Streams::datagrams`]).
    Reassemble,
}

/// The policy for IP fragments of TCP segments ([`Config::tcp_fragments`])
/// and of UDP datagrams ([`Config::udp_fragments`]).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TcpFragments {
    /// Dropped: the stream cannot see their bytes.
    #[default]
    Drop,
    /// Forwarded; consumers see each fragment's payload alone.
    Inspect,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_segments: 16,
            max_bytes: 65536,
            idle_timeout_secs: 300,
            min_ttl: 8,
            clear_ip_options: true,
            tcp_fragments: TcpFragments::Drop,
            udp_fragments: Fragments::Drop,
            other_fragments: Fragments::Inspect,
            max_fragments: 64,
            fragment_timeout_secs: 60,
            midstream: false,
            sync_progress: false,
        }
    }
}

/// Why a batch could not be reassembled.
#[derive(Debug, thiserror::Error)]
pub enum ReassemblyError {
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored value could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl From<ReassemblyError> for StoreError {
    /// For callers whose error type is the store's (the chain's stream stage): a
    /// decode error surfaces as a protocol error of the store.
    fn from(e: ReassemblyError) -> StoreError {
        match e {
            ReassemblyError::Store(e) => e,
            ReassemblyError::Decode(e) => StoreError::Protocol(e.to_string()),
        }
    }
}

/// What the reassembler did, for summaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// TCP packets examined.
    pub packets: u64,
    /// Stream bytes delivered.
    pub delivered_bytes: u64,
    /// Segments (pieces) buffered out of order.
    pub buffered_segments: u64,
    /// Buffered segments released.
    pub released_segments: u64,
    /// Packets that released the other direction's bytes a resync left
    /// buffered ([`StreamChunk::peer`]).
    pub peer_releases: u64,
    /// Payload bytes that were already received (retransmissions, overlaps).
    pub duplicate_bytes: u64,
    /// Packets dropped because the out-of-order buffer was full.
    pub overflow_drops: u64,
    /// Connections picked up mid-stream.
    pub midstream_pickups: u64,
    /// TCP packets of connections without a record (no stream delivered).
    pub untracked: u64,
    /// Records that could not be decoded (their packets are dropped).
    pub corrupt_records: u64,
    /// Buffered blobs missing or damaged when released (the packet is dropped).
    pub lost_segments: u64,
    /// SYNs ignored because they would reset a live connection.
    pub syn_ignored: u64,
    /// Connections expired by their idle timer.
    pub expired: u64,
    /// Resynchronisations: the receiver acknowledged bytes this reassembler
    /// never delivered (see the module documentation, "Resync").
    pub resyncs: u64,
    /// Stream bytes skipped, undelivered, by resynchronisations.
    pub resync_skipped_bytes: u64,
    /// Bytes carried by a SYN or SYN-ACK (TCP Fast Open), delivered.
    pub tfo_bytes: u64,
    /// Data segments without ACK dropped (see "Normalisation").
    pub no_ack_drops: u64,
    /// Out-of-order segments overlapping buffered bytes, dropped.
    pub overlap_drops: u64,
    /// In-order segments whose bytes under buffered ones differed and were
    /// rewritten to them.
    pub overlap_rewrites: u64,
    /// Segments whose URG flag and urgent pointer were cleared.
    pub urgent_cleared: u64,
    /// Data segments with a TCP timestamp older than the sender's latest,
    /// dropped (PAWS, see "Normalisation").
    pub paws_drops: u64,
    /// TCP segments whose IP TTL was raised to [`Config::min_ttl`].
    pub ttl_raised: u64,
    /// TCP segments whose IPv4 options were overwritten with NOPs.
    pub ip_options_cleared: u64,
    /// IP fragments of TCP segments dropped ([`TcpFragments::Drop`]).
    pub tcp_fragment_drops: u64,
    /// IP fragments of UDP datagrams dropped ([`Config::udp_fragments`]).
    pub udp_fragment_drops: u64,
    /// IP fragments of other protocols dropped ([`Config::other_fragments`]).
    pub other_fragment_drops: u64,
}

#[derive(Clone, Copy)]
enum Piece {
    /// Bytes `start..start+len` of packet `pkt`'s payload.
    Slice { pkt: u32, start: u16, len: u16 },
    /// Bytes `skip..skip+len` of a blob read by `op`.
    Stored { op: OpId, skip: u16, len: u16 },
}

struct Entry {
    canon: FlowKey,
    key: Key,
    read: OpId,
    conn: Option<Conn>,
    corrupt: bool,
    dirty: bool,
    delete: bool,
    created_at: Option<u64>,
    /// The flow's direction-invariant hash (the record is the flow's own).
    hash: u32,
    /// The record's flags as read (a change is written through and acknowledged).
    read_flags: Option<u8>,
}

/// Bytes `at..at+len` of packet `pkt`'s payload lie under the first `len`
/// bytes of `piece` (from `skip`), which the stream delivered instead.
#[derive(Clone, Copy)]
struct Rewrite {
    pkt: u32,
    at: u16,
    len: u16,
    piece: u32,
    skip: u16,
}

struct Pending {
    entry: u32,
    dir: u8,
    seq: u32,
    pkt: u32,
    start: u16,
    len: u16,
    live: bool,
}

/// TCP reassembly for one function namespace. See the crate documentation.
pub struct Reassembler {
    ns: Namespace,
    cfg: Config,
    defrag: Defragmenter,
    timeout_ns: u64,
    counters: Counters,
    ops: Ops,
    entries: Vec<Entry>,
    index: FxHashMap<FlowKey, u32>,
    pkt_entry: Vec<u32>,
    pending: Vec<Pending>,
    pieces: Vec<Piece>,
    /// (packet, first piece, end piece) of deliveries that go to the arena.
    extras: Vec<(u32, u32, u32)>,
    /// In-order packets' bytes lying under buffered ones, to be made equal.
    rewrites: Vec<Rewrite>,
    /// Bytes of a rewrite, reused.
    scratch: Vec<u8>,
    del_keys: Vec<Key>,
    keys: Vec<Key>,
    /// The batch's consumer reads stream events ([`Streams::want_events`]).
    want_events: bool,
    /// The stream events of the packet being stepped.
    pkt_events: u32,
}

const NONE: u32 = u32::MAX;

fn seg_key(ns: Namespace, canon: &FlowKey, dir: usize, seq: u32) -> Key {
    let s = seq.to_be_bytes();
    Key::flow(ns, TABLE_SEG, canon, &[dir as u8, s[0], s[1], s[2], s[3]])
}

impl Reassembler {
    /// A reassembler keeping its state in namespace `ns`.
    pub fn new(ns: Namespace, config: Config) -> Self {
        let mut cfg = config;
        cfg.max_segments = cfg.max_segments.min(MAX_SEGMENTS_CAP);
        cfg.max_fragments = cfg.max_fragments.clamp(1, 255);
        Reassembler {
            ns,
            defrag: Defragmenter::new(
                ns,
                defrag::DefragConfig {
                    max_fragments: cfg.max_fragments,
                    timeout_ns: cfg.fragment_timeout_secs.saturating_mul(1_000_000_000),
                },
            ),
            timeout_ns: cfg.idle_timeout_secs.saturating_mul(1_000_000_000).max(1),
            cfg,
            counters: Counters::default(),
            ops: Ops::new(),
            entries: Vec::new(),
            index: FxHashMap::default(),
            pkt_entry: Vec::new(),
            pending: Vec::new(),
            pieces: Vec::new(),
            extras: Vec::new(),
            rewrites: Vec::new(),
            scratch: Vec::new(),
            del_keys: Vec::new(),
            keys: Vec::new(),
            want_events: false,
            pkt_events: 0,
        }
    }

    /// The namespace of the reassembler's state.
    pub fn namespace(&self) -> Namespace {
        self.ns
    }

    /// The effective configuration (after clamping).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// What happened so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The counters as (name, value) pairs.
    pub fn counter_list(&self, out: &mut Vec<(&'static str, u64)>) {
        let c = &self.counters;
        out.extend_from_slice(&[
            ("reassembly_packets", c.packets),
            ("reassembly_delivered_bytes", c.delivered_bytes),
            ("reassembly_buffered_segments", c.buffered_segments),
            ("reassembly_released_segments", c.released_segments),
            ("reassembly_peer_releases", c.peer_releases),
            ("reassembly_duplicate_bytes", c.duplicate_bytes),
            ("reassembly_overflow_drops", c.overflow_drops),
            ("reassembly_midstream_pickups", c.midstream_pickups),
            ("reassembly_untracked", c.untracked),
            ("reassembly_corrupt_records", c.corrupt_records),
            ("reassembly_lost_segments", c.lost_segments),
            ("reassembly_syn_ignored", c.syn_ignored),
            ("reassembly_expired", c.expired),
            ("reassembly_resyncs", c.resyncs),
            ("reassembly_resync_skipped_bytes", c.resync_skipped_bytes),
            ("reassembly_tfo_bytes", c.tfo_bytes),
            ("reassembly_no_ack_drops", c.no_ack_drops),
            ("reassembly_paws_drops", c.paws_drops),
            ("reassembly_ttl_raised", c.ttl_raised),
            ("reassembly_ip_options_cleared", c.ip_options_cleared),
            ("reassembly_tcp_fragment_drops", c.tcp_fragment_drops),
            ("reassembly_udp_fragment_drops", c.udp_fragment_drops),
            ("reassembly_other_fragment_drops", c.other_fragment_drops),
            ("reassembly_overlap_drops", c.overlap_drops),
            ("reassembly_overlap_rewrites", c.overlap_rewrites),
            ("reassembly_urgent_cleared", c.urgent_cleared),
        ]);
        let d = self.defrag.counters();
        out.extend_from_slice(&[
            ("reassembly_fragments", d.fragments),
            ("reassembly_datagrams", d.datagrams),
            ("reassembly_fragment_overlap_rewrites", d.overlap_rewrites),
            ("reassembly_fragment_blocked", d.blocked_drops),
            ("reassembly_fragment_malformed", d.malformed_drops),
            ("reassembly_fragment_limit_drops", d.limit_drops),
            ("reassembly_fragment_lost", d.lost),
            ("reassembly_fragment_corrupt_records", d.corrupt_records),
            ("reassembly_fragment_races", d.races),
            ("reassembly_fragment_race_retries", d.race_retries),
            ("reassembly_datagrams_blocked", d.blocked_datagrams),
            ("reassembly_fragments_expired", d.expired),
        ]);
    }

    /// Appends the connection-record reads [`Reassembler::process`] would make
    /// for `batch` (for a pipelining caller to fetch ahead).
    pub fn prefetch(&self, batch: &Batch, ops: &mut Ops) {
        for p in batch
            .pkts
            .iter()
            .filter(|p| p.is_live() && p.meta.l4 == L4::Tcp && p.meta.fragment == Fragment::None)
        {
            let (canon, _) = p.meta.flow.canonical();
            let h = canon.directional_hash();
            if ops.first_listing(h, self.ns, TABLE_CONN) {
                ops.get_owned(Key::flow(self.ns, TABLE_CONN, &canon, &[]), h);
            }
        }
    }

    /// Reassembles the live TCP packets of `batch` into `streams` (which is reset
    /// to the batch's size first). Drops packets only to fail closed (buffer
    /// overflow, corrupt or lost state), with `stage` as the drop stage.
    pub fn process(
        &mut self,
        batch: &mut Batch,
        store: &mut dyn StateStore,
        streams: &mut Streams,
        stage: u8,
    ) -> Result<(), ReassemblyError> {
        streams.reset(batch.len());
        self.want_events = streams.want_events;
        self.ops.clear();
        self.entries.clear();
        self.index.clear();
        self.pkt_entry.clear();
        self.pending.clear();
        self.pieces.clear();
        self.extras.clear();
        self.rewrites.clear();
        self.del_keys.clear();

        // Urgent data leaves the stream at most receivers (see
        // `clear_urgent`): every receiver reads it inline once URG is gone.
        // Likewise a segment that would expire before the host (see
        // `raise_ttl`): one comparison per packet, a rewrite only when low.
        let min_ttl = self.cfg.min_ttl;
        let clear_opts = self.cfg.clear_ip_options;
        let drop_fragments = self.cfg.tcp_fragments == TcpFragments::Drop;
        for (i, p) in batch.pkts.iter_mut().enumerate() {
            if p.is_live() && p.meta.fragment != Fragment::None {
                // A later fragment parses as `OtherIp`: its protocol says
                // TCP or UDP.
                let proto = p.meta.flow.proto;
                if proto == sluice_wire::ip_proto::TCP {
                    if drop_fragments {
                        self.counters.tcp_fragment_drops += 1;
                        p.drop_by(stage, "reassembly_tcp_fragment");
                        continue;
                    }
                } else {
                    let (policy, counter, reason) = if proto == sluice_wire::ip_proto::UDP {
                        (
                            self.cfg.udp_fragments,
                            &mut self.counters.udp_fragment_drops,
                            "reassembly_udp_fragment",
                        )
                    } else {
                        (
                            self.cfg.other_fragments,
                            &mut self.counters.other_fragment_drops,
                            "reassembly_other_fragment",
                        )
                    };
                    match policy {
                        Fragments::Drop => {
                            *counter += 1;
                            p.drop_by(stage, reason);
                        }
                        Fragments::Inspect => {}
                        Fragments::Reassemble => streams.fragments.push(i as u32),
                    }
                    continue;
                }
            }
            if !p.is_live() || p.meta.l4 != L4::Tcp {
                continue;
            }
            // A rule reads the headers as they arrived (Suricata's
            // `tcp.hdr`, `ipv4.hdr`): kept before the first rewrite.
            let low_ttl = p.meta.ttl < min_ttl;
            let opts = clear_opts
                && p.meta.ethertype == 0x0800
                && p.meta.l4_offset as usize > p.meta.l3_offset as usize + 20;
            if p.meta.tcp_flags & URG != 0 || low_ttl || opts {
                streams.keep_rx_header(i, p.data(), &p.meta);
            }
            if p.meta.tcp_flags & URG != 0 {
                let (frame, meta) = p.data_and_meta_mut();
                if sluice_wire::rewrite::clear_urgent(frame, meta) {
                    self.counters.urgent_cleared += 1;
                }
            }
            if opts {
                let (frame, meta) = p.data_and_meta_mut();
                if sluice_wire::rewrite::clear_ip_options(frame, meta) {
                    self.counters.ip_options_cleared += 1;
                }
            }
            if low_ttl {
                let (frame, meta) = p.data_and_meta_mut();
                if sluice_wire::rewrite::raise_ttl(frame, meta, min_ttl) {
                    self.counters.ttl_raised += 1;
                }
            }
        }

        if !streams.fragments.is_empty() {
            let take = std::mem::take(&mut streams.fragments);
            let r = self.defrag.process(batch, &take, store, streams, stage);
            streams.fragments = take;
            r?;
        }

        // Pass 1: one read per connection touched.
        for p in &batch.pkts {
            let mut ei = NONE;
            if p.is_live() && p.meta.l4 == L4::Tcp && p.meta.fragment == Fragment::None {
                let (canon, _) = p.meta.flow.canonical();
                ei = match self.index.get(&canon) {
                    Some(&e) => e,
                    None => {
                        let key = Key::flow(self.ns, TABLE_CONN, &canon, &[]);
                        // Both directions of a flow go to the owner of its
                        // direction-invariant hash: a flow cache may hold the record.
                        let hash = canon.directional_hash();
                        let read = self.ops.get_owned(key, hash);
                        let e = self.entries.len() as u32;
                        self.entries.push(Entry {
                            canon,
                            key,
                            read,
                            conn: None,
                            corrupt: false,
                            dirty: false,
                            delete: false,
                            created_at: None,
                            hash,
                            read_flags: None,
                        });
                        self.index.insert(canon, e);
                        e
                    }
                };
            }
            self.pkt_entry.push(ei);
        }
        if self.entries.is_empty() {
            return Ok(());
        }
        store.execute(&mut self.ops)?;
        for e in &mut self.entries {
            match self.ops.decode::<Conn>(e.read) {
                Ok(Some(c)) => {
                    // Whether it is idle past the timeout is decided by each
                    // packet's own time (`step`).
                    e.read_flags = Some(c.flags);
                    e.conn = Some(c);
                }
                Ok(None) => {}
                Err(_) => {
                    self.counters.corrupt_records += 1;
                    e.corrupt = true;
                }
            }
        }
        self.ops.clear();

        // Pass 2: advance every connection packet by packet.
        for i in 0..batch.pkts.len() {
            let ei = self.pkt_entry[i];
            if ei == NONE {
                continue;
            }
            self.counters.packets += 1;
            self.pkt_events = 0;
            match self.step(i, ei as usize, batch) {
                Step::Chunk(c) => streams.chunks[i] = Some(c),
                Step::Nothing => {}
                Step::Drop(reason) => batch.pkts[i].drop_by(stage, reason),
            }
            if self.pkt_events != 0 {
                streams.events.push((i as u32, self.pkt_events));
            }
        }

        // Writes, after the blob reads queued during pass 2.
        for k in &self.del_keys {
            self.ops.delete(*k);
        }
        for pd in &self.pending {
            if !pd.live {
                continue;
            }
            let p = &batch.pkts[pd.pkt as usize];
            let payload = p.meta.payload(p.data());
            let bytes = &payload[pd.start as usize..pd.start as usize + pd.len as usize];
            let canon = self.entries[pd.entry as usize].canon;
            self.ops
                .put(seg_key(self.ns, &canon, pd.dir as usize, pd.seq), bytes);
        }
        for e in &self.entries {
            match (&e.conn, e.dirty, e.delete) {
                // A new record or a handshake/close flag change is acknowledged
                // before the batch leaves; stream progress of an established
                // connection (next sequence numbers, buffered segment lists) is
                // deferred, or with `sync_progress` sent before the batch leaves
                // without waiting for the store's reply (docs/STATE.md, "What a
                // crash can lose").
                (Some(c), true, _) if e.created_at.is_none() && e.read_flags == Some(c.flags) => {
                    if self.cfg.sync_progress {
                        self.ops.put_value_unacked(e.key, c, e.hash);
                    } else {
                        self.ops.put_value_deferred(e.key, c, e.hash);
                    }
                }
                (Some(c), true, _) => {
                    self.ops.put_value_owned(e.key, c, e.hash);
                }
                (None, _, true) => {
                    self.ops.delete(e.key);
                }
                _ => {}
            }
            if let Some(t) = e.created_at {
                self.ops.arm_timer(e.key, t.saturating_add(self.timeout_ns));
            }
        }
        if !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
        }

        // Materialise released bytes into the arena.
        for x in 0..self.extras.len() {
            let (pkt, a, b) = self.extras[x];
            let start = streams.arena.len();
            let mut ok = true;
            for piece in &self.pieces[a as usize..b as usize] {
                match *piece {
                    Piece::Slice { pkt, start, len } => {
                        let p = &batch.pkts[pkt as usize];
                        let payload = p.meta.payload(p.data());
                        streams.arena.extend_from_slice(
                            &payload[start as usize..start as usize + len as usize],
                        );
                    }
                    Piece::Stored { op, skip, len } => {
                        let (s, l) = (skip as usize, len as usize);
                        match self.ops.value(op) {
                            Some(v) if v.len() >= s + l => {
                                streams.arena.extend_from_slice(&v[s..s + l])
                            }
                            _ => {
                                ok = false;
                                break;
                            }
                        }
                    }
                }
            }
            let i = pkt as usize;
            if ok {
                if let Some(c) = &mut streams.chunks[i] {
                    c.extra_start = start as u32;
                    c.extra_len = (streams.arena.len() - start) as u32;
                    self.counters.delivered_bytes += c.extra_len as u64;
                }
            } else {
                // The bytes were forwarded when buffered but are gone now: never let
                // the packet that would have revealed them pass unscanned.
                streams.arena.truncate(start);
                streams.chunks[i] = None;
                self.counters.lost_segments += 1;
                batch.pkts[i].drop_by(stage, "reassembly_segment_lost");
            }
        }
        // Where an in-order packet's own bytes lie under buffered ones, the
        // stream delivered the buffered copy; the packet is made to carry
        // the same bytes, so its receiver reads what was inspected whichever
        // copy its stack keeps.
        for k in 0..self.rewrites.len() {
            let rw = self.rewrites[k];
            let i = rw.pkt as usize;
            if !batch.pkts[i].is_live() {
                continue;
            }
            let (s, l) = (rw.skip as usize, rw.len as usize);
            self.scratch.clear();
            match self.pieces[rw.piece as usize] {
                Piece::Slice { pkt, start, .. } => {
                    let p = &batch.pkts[pkt as usize];
                    let from = start as usize + s;
                    self.scratch
                        .extend_from_slice(&p.meta.payload(p.data())[from..from + l]);
                }
                Piece::Stored { op, skip, .. } => {
                    let from = skip as usize + s;
                    match self.ops.value(op) {
                        Some(v) if v.len() >= from + l => {
                            self.scratch.extend_from_slice(&v[from..from + l])
                        }
                        _ => continue,
                    }
                }
            }
            let p = &mut batch.pkts[i];
            let at = p.meta.payload_offset as usize + rw.at as usize;
            if p.data()[at..at + l] != self.scratch[..] {
                // The checksum changes with the bytes.
                streams.keep_rx_header(i, p.data(), &p.meta);
                let frame = p.data_mut();
                frame[at..at + l].copy_from_slice(&self.scratch);
                sluice_wire::rewrite::fill_l4_checksum(frame);
                self.counters.overlap_rewrites += 1;
            }
        }
        Ok(())
    }

    fn step(&mut self, i: usize, ei: usize, batch: &Batch) -> Step {
        let p = &batch.pkts[i];
        let m = &p.meta;
        let now = p.ts_ns;
        let flags = m.tcp_flags;
        let syn_only = flags & (SYN | ACK) == SYN;
        let (_, side) = m.flow.canonical();
        let fwd = side == sluice_wire::flow::Side::Forward;
        let e = &mut self.entries[ei];
        if e.corrupt && !syn_only {
            return Step::Drop("reassembly_state_corrupt");
        }
        // Idle past the timeout at this packet's time: over, whether or not its
        // timer ran yet (the timer would have removed it exactly so).
        if let Some(old) = e
            .conn
            .filter(|c| c.last_seen.saturating_add(self.timeout_ns) <= now)
        {
            for (d, dir) in old.dirs.iter().enumerate() {
                for s in dir.segs() {
                    self.del_keys.push(seg_key(self.ns, &e.canon, d, s.seq));
                }
            }
            for pd in &mut self.pending {
                if pd.entry == ei as u32 {
                    pd.live = false;
                }
            }
            e.conn = None;
            e.delete = true;
            e.dirty = false;
        }

        // Stream events are decided on the record as the packet found it.
        if self.want_events {
            if let Some(c) = &e.conn {
                let seg = events::Segment {
                    flags,
                    seq: m.tcp_seq,
                    ack: m.tcp_ack,
                    len: m.payload_len,
                    from_client: c.has(F_CLIENT_FWD) == fwd,
                };
                self.pkt_events = events::decide(c, &seg);
            } else {
                self.pkt_events = events::no_session(flags, m.payload_len, self.cfg.midstream);
            }
        }

        // A client SYN may (re)start the connection.
        if syn_only {
            let restart = match &e.conn {
                None => true,
                Some(c) => {
                    let client = c.has(F_CLIENT_FWD) == fwd;
                    let isn_next = m.tcp_seq.wrapping_add(1);
                    let base = c.dirs[C2S].next.wrapping_sub(c.dirs[C2S].delivered as u32);
                    if client && base == isn_next && c.synced(C2S) {
                        false // retransmitted SYN
                    } else if c.closed() || !c.has(F_ESTABLISHED) {
                        true
                    } else {
                        self.counters.syn_ignored += 1;
                        false
                    }
                }
            };
            if restart {
                if let Some(old) = &e.conn {
                    for (d, dir) in old.dirs.iter().enumerate() {
                        for s in dir.segs() {
                            self.del_keys.push(seg_key(self.ns, &e.canon, d, s.seq));
                        }
                    }
                    for pd in &mut self.pending {
                        if pd.entry == ei as u32 {
                            pd.live = false;
                        }
                    }
                }
                let mut c = Conn {
                    flags: if fwd { F_CLIENT_FWD } else { 0 },
                    synced: 1 << C2S,
                    last_seen: now,
                    ..Conn::default()
                };
                if self.want_events {
                    // A handshake restarted before it completed (a SYN
                    // from the server, or the client's with another ISN)
                    // is one Suricata follows otherwise: no events.
                    if e.conn.as_ref().is_some_and(|old| !old.closed()) {
                        c.synced |= S_ODD;
                    }
                    if tcp_options(p.data(), m).is_some_and(events::has_tfo) {
                        c.flags |= F_TFO;
                    }
                }
                let mut chunk = StreamChunk {
                    to_server: true,
                    ..StreamChunk::default()
                };
                // Fast Open data: the SYN's sequence number is consumed
                // first, the data follows it.
                let len = m.payload_len;
                c.dirs[C2S].next = m.tcp_seq.wrapping_add(1).wrapping_add(len as u32);
                if len > 0 {
                    c.dirs[C2S].delivered = len as u64;
                    chunk.own_len = len;
                    chunk.established = true;
                    self.counters.delivered_bytes += len as u64;
                    self.counters.tfo_bytes += len as u64;
                }
                e.conn = Some(c);
                e.corrupt = false;
                e.dirty = true;
                e.delete = false;
                e.created_at = Some(now);
                return Step::Chunk(chunk);
            }
        }

        if e.conn.is_none() {
            if flags & RST != 0 || !self.cfg.midstream {
                self.counters.untracked += 1;
                return Step::Nothing;
            }
            // Mid-stream pickup: the sender of a SYN-ACK is the server, otherwise
            // the first sender is taken as the client.
            let synack = flags & (SYN | ACK) == SYN | ACK;
            let client_fwd = if synack { !fwd } else { fwd };
            let mut c = Conn {
                flags: F_MIDSTREAM
                    | if client_fwd { F_CLIENT_FWD } else { 0 }
                    | if synack { 0 } else { F_ESTABLISHED },
                last_seen: now,
                ..Conn::default()
            };
            if synack {
                c.flags |= F_SYNACK;
                c.synced = 1 << S2C;
                c.dirs[S2C].next = m.tcp_seq.wrapping_add(1);
            }
            self.counters.midstream_pickups += 1;
            e.conn = Some(c);
            e.dirty = true;
            e.delete = false;
            e.created_at = Some(now);
            if synack {
                return Step::Chunk(StreamChunk::default());
            }
        }

        let Some(c) = e.conn.as_mut() else {
            return Step::Nothing;
        };
        let d = if c.has(F_CLIENT_FWD) == fwd { C2S } else { S2C };
        if flags & (SYN | RST | ACK) == 0 && m.payload_len > 0 {
            // Every receiver discards it (RFC 9293 §3.10.7.4: "if the ACK
            // bit is off, drop the segment"); delivering it would let its
            // bytes stand for the real ones sent after it.
            self.counters.no_ack_drops += 1;
            return Step::Drop("reassembly_no_ack");
        }
        // The fields a packet can change, for change detection and rollback (the
        // segment list changes only with its length).
        let before = Snapshot::of(c);
        // PAWS (RFC 7323 §5.3): a receiver keeps the sender's latest timestamp
        // and discards a segment carrying an older one (Linux does), so such a
        // segment's bytes must not stand for the real ones the host will take.
        if m.payload_len > 0 && flags & (RST | SYN) == 0 {
            if let Some(tsval) = tcp_tsval(p.data(), m) {
                let dir = &mut c.dirs[d];
                if c.synced & ts_bit(d) != 0 && (tsval.wrapping_sub(dir.ts_recent) as i32) < 0 {
                    self.counters.paws_drops += 1;
                    return Step::Drop("reassembly_paws");
                }
                // Kept from segments at the stream's left edge, as receivers
                // do (a segment beyond a gap may be a forgery the host never
                // takes). Pure ACKs are not looked at: they write nothing.
                if c.synced & ts_bit(d) == 0 || dir.rel(m.tcp_seq) <= 0 {
                    dir.ts_recent = tsval;
                    c.synced |= ts_bit(d);
                }
            }
        }

        // The SYN-ACK that synchronises the server's side: its data (Fast
        // Open) is stream data from the sequence number after it.
        let mut synack_data = false;
        if flags & RST != 0 {
            c.flags |= F_RST;
        } else if flags & SYN != 0 {
            // The client discards a SYN-ACK acknowledging neither its
            // SYN nor data sent with it (RFC 9293 §3.10.7.3), so it does
            // not synchronise the server's side: the real one may follow.
            let base = c.dirs[C2S].next.wrapping_sub(c.dirs[C2S].delivered as u32);
            let acceptable =
                !c.synced(C2S) || m.tcp_ack.wrapping_sub(base) as u64 <= c.dirs[C2S].delivered;
            if d == S2C && flags & ACK != 0 && !c.synced(S2C) && acceptable {
                if self.want_events && tcp_options(p.data(), m).is_some_and(events::has_tfo) {
                    c.flags |= F_TFO;
                }
                c.synced |= 1 << S2C;
                c.flags |= F_SYNACK;
                c.dirs[S2C].next = m.tcp_seq.wrapping_add(1);
                synack_data = m.payload_len > 0;
                rewind_unaccepted_syn_data(c, m.tcp_ack);
            }
        } else {
            // The handshake's ACK acknowledges the server's SYN, and may
            // acknowledge Fast Open data of the SYN-ACK with it.
            let s_base = c.dirs[S2C].next.wrapping_sub(c.dirs[S2C].delivered as u32);
            if d == C2S
                && flags & ACK != 0
                && c.has(F_SYNACK)
                && !c.has(F_ESTABLISHED)
                && c.synced(S2C)
                && m.tcp_ack.wrapping_sub(s_base) <= c.dirs[S2C].delivered as u32
            {
                c.flags |= F_ESTABLISHED;
            }
            if !c.synced(d) && c.has(F_MIDSTREAM) {
                c.synced |= 1 << d;
                c.dirs[d].next = m.tcp_seq;
            }
            if flags & FIN != 0 {
                c.flags |= if d == C2S { F_FIN_C } else { F_FIN_S };
            }
        }

        let mut chunk = StreamChunk {
            to_server: d == C2S,
            established: c.has(F_ESTABLISHED),
            stream_offset: c.dirs[d].delivered,
            gap: c.synced & gap_bit(d) != 0,
            peer_offset: c.dirs[1 - d].delivered,
            peer_synced: c.synced(1 - d),
            ..StreamChunk::default()
        };
        let len = m.payload_len as i64;
        let mut result = Step::Chunk(chunk);
        if synack_data {
            self.counters.tfo_bytes += len as u64;
            chunk.established = true;
        }
        // A packet without data of a direction whose buffered bytes begin
        // where it was delivered to (a resynchronisation skipped the bytes
        // before them: see `resync`) releases them too, as a packet with
        // data does: a FIN or RST may be the last packet of that direction,
        // and bytes already forwarded must not wait for one that never
        // comes unscanned.
        let release = len == 0 && flags & SYN == 0 && c.synced(d) && {
            let dir = &c.dirs[d];
            dir.n > 0 && dir.rel(dir.segs[0].seq) <= 0 && dir.rel(m.tcp_seq) <= dir.lead()
        };
        if ((flags & (SYN | RST) == 0 || synack_data) && len > 0) || release {
            if !c.synced(d) {
                result = Step::Nothing;
            } else {
                let dir = &mut c.dirs[d];
                let data_seq = if synack_data {
                    m.tcp_seq.wrapping_add(1)
                } else {
                    m.tcp_seq
                };
                let off = dir.rel(data_seq);
                let end = off + len;
                if end <= 0 {
                    self.counters.duplicate_bytes += len as u64;
                } else if off <= dir.lead() {
                    // In order: own bytes interleaved with buffered ones (first wins).
                    let mut own_total: i64 = 0;
                    let first_piece = self.pieces.len() as u32;
                    let mut cur: i64 = 0;
                    // Behind buffered bytes (after a resynchronisation), the
                    // packet's own bytes follow them in the chunk's released part.
                    let mut own_set = off > 0;
                    loop {
                        if dir.n > 0 && dir.rel(dir.segs[0].seq) <= cur {
                            let sg = dir.remove_first();
                            let srel = dir.rel(sg.seq);
                            let skip = (cur - srel).max(0);
                            let slen = sg.len as i64 - skip;
                            let mut bufs = (&mut self.pending, &mut self.ops, &mut self.del_keys);
                            let at = (self.ns, &e.canon, ei, d);
                            if let Some(piece) = take_segment(&mut bufs, at, sg, skip, slen) {
                                // The packet's own bytes under these: its
                                // receiver may keep either copy, so they
                                // are made equal to what is delivered.
                                let (a, b) = (cur.max(off), (cur + slen).min(end));
                                if a < b {
                                    self.rewrites.push(Rewrite {
                                        pkt: i as u32,
                                        at: (a - off) as u16,
                                        len: (b - a) as u16,
                                        piece: self.pieces.len() as u32,
                                        skip: (a - cur) as u16,
                                    });
                                }
                                self.pieces.push(piece);
                                cur += slen;
                            }
                            self.counters.released_segments += 1;
                            continue;
                        }
                        if cur < end {
                            let limit = if dir.n > 0 {
                                end.min(dir.rel(dir.segs[0].seq))
                            } else {
                                end
                            };
                            let start = (cur - off) as u16;
                            let l = (limit - cur) as u16;
                            own_total += l as i64;
                            if !own_set {
                                chunk.own_start = start;
                                chunk.own_len = l;
                                own_set = true;
                                self.counters.delivered_bytes += l as u64;
                            } else {
                                self.pieces.push(Piece::Slice {
                                    pkt: i as u32,
                                    start,
                                    len: l,
                                });
                            }
                            cur = limit;
                            continue;
                        }
                        break;
                    }
                    self.counters.duplicate_bytes += (len - own_total) as u64;
                    let last_piece = self.pieces.len() as u32;
                    if last_piece > first_piece {
                        self.extras.push((i as u32, first_piece, last_piece));
                    }
                    dir.next = dir.next.wrapping_add(cur as u32);
                    dir.delivered += cur as u64;
                    result = Step::Chunk(chunk);
                } else {
                    // Out of order: buffer only the bytes in gaps between buffered ones.
                    let mut gaps = [(0i64, 0i64); MAX_SEGMENTS_CAP + 1];
                    let mut ng = 0;
                    let mut cur = off;
                    for s in dir.segs() {
                        let (a, b) = (dir.rel(s.seq), dir.rel(s.seq) + s.len as i64);
                        if b <= cur {
                            continue;
                        }
                        if a >= end {
                            break;
                        }
                        if a > cur {
                            gaps[ng] = (cur, a);
                            ng += 1;
                        }
                        cur = cur.max(b);
                    }
                    if cur < end {
                        gaps[ng] = (cur, end);
                        ng += 1;
                    }
                    let new_bytes: i64 = gaps[..ng].iter().map(|(a, b)| b - a).sum();
                    if new_bytes < len {
                        // Over buffered bytes: a receiver may keep either
                        // copy (Linux keeps a later one that covers an
                        // earlier), and the earlier was forwarded already.
                        self.counters.overlap_drops += 1;
                        before.restore(c);
                        return Step::Drop("reassembly_overlap");
                    }
                    if ng > 0 {
                        if dir.n as usize + ng > self.cfg.max_segments
                            || dir.buffered_bytes() + new_bytes as usize > self.cfg.max_bytes
                        {
                            self.counters.overflow_drops += 1;
                            // Nothing changed except maybe flags from this packet:
                            // roll back so a dropped packet leaves no trace.
                            before.restore(c);
                            return Step::Drop("reassembly_overflow");
                        }
                        for &(a, b) in &gaps[..ng] {
                            let seq = dir.next.wrapping_add(a as u32);
                            dir.insert(Seg {
                                seq,
                                len: (b - a) as u16,
                            });
                            self.pending.push(Pending {
                                entry: ei as u32,
                                dir: d as u8,
                                seq,
                                pkt: i as u32,
                                start: (a - off) as u16,
                                len: (b - a) as u16,
                                live: true,
                            });
                            self.counters.buffered_segments += 1;
                        }
                    }
                }
            }
        }
        if let Step::Chunk(ch) = &mut result {
            if ch.gap && c.dirs[d].delivered != before.delivered[d] {
                // The consumer learns of the skipped bytes with the first bytes
                // delivered after them.
                c.synced &= !gap_bit(d);
            } else {
                ch.gap = false;
            }
        }
        if flags & ACK != 0 && !matches!(result, Step::Drop(_)) {
            if let Some(skipped) = resync(c, d ^ 1, m.tcp_ack) {
                self.counters.resyncs += 1;
                self.counters.resync_skipped_bytes += skipped;
            }
        }
        // The other direction's bytes a resynchronisation (now or before)
        // left at the head of its stream reached their receiver: it
        // acknowledged them. Their sender may send nothing more (this
        // packet may be the receiver's RST), so a packet bringing no bytes
        // of its own releases them, as a chunk of their direction marked
        // `peer`: no byte that passed waits for a packet that never comes.
        let o = d ^ 1;
        let own_empty = matches!(&result, Step::Chunk(ch) if ch.is_empty())
            && self.extras.last().is_none_or(|x| x.0 != i as u32);
        if own_empty
            && m.payload_len == 0
            && flags & SYN == 0
            && c.synced(o)
            && c.dirs[o].n > 0
            && c.dirs[o].rel(c.dirs[o].segs[0].seq) <= 0
        {
            let mut peer = StreamChunk {
                to_server: o == C2S,
                established: c.has(F_ESTABLISHED),
                stream_offset: c.dirs[o].delivered,
                gap: c.synced & gap_bit(o) != 0,
                peer_offset: c.dirs[d].delivered,
                peer_synced: c.synced(d),
                peer: true,
                ..StreamChunk::default()
            };
            let first_piece = self.pieces.len() as u32;
            let dir = &mut c.dirs[o];
            let mut cur: i64 = 0;
            while dir.n > 0 && dir.rel(dir.segs[0].seq) <= cur {
                let sg = dir.remove_first();
                let skip = (cur - dir.rel(sg.seq)).max(0);
                let slen = sg.len as i64 - skip;
                let mut bufs = (&mut self.pending, &mut self.ops, &mut self.del_keys);
                if let Some(piece) =
                    take_segment(&mut bufs, (self.ns, &e.canon, ei, o), sg, skip, slen)
                {
                    self.pieces.push(piece);
                    cur += slen;
                }
                self.counters.released_segments += 1;
            }
            dir.next = dir.next.wrapping_add(cur as u32);
            dir.delivered += cur as u64;
            if cur > 0 {
                self.extras
                    .push((i as u32, first_piece, self.pieces.len() as u32));
                c.synced &= !gap_bit(o);
                self.counters.peer_releases += 1;
            } else {
                peer.gap = false;
            }
            result = Step::Chunk(peer);
        }
        if let Step::Chunk(ch) = &mut result {
            ch.established = c.has(F_ESTABLISHED) || synack_data;
        }
        if Snapshot::of(c) != before {
            e.dirty = true;
        }
        if e.dirty || now > c.last_seen.saturating_add(self.timeout_ns / 8) {
            c.last_seen = c.last_seen.max(now);
            e.dirty = true;
        }
        result
    }

    /// After every function decided `batch` (the one [`Reassembler::process`]
    /// saw last): blocks the datagrams whose completing fragment was dropped
    /// (see the [`defrag`] module).
    pub fn finish(
        &mut self,
        batch: &mut Batch,
        store: &mut dyn StateStore,
    ) -> Result<(), ReassemblyError> {
        self.defrag.finish(batch, store)
    }

    /// Expires connections idle for the timeout at `now_ns`: deletes their records
    /// and buffered blobs, and datagrams being reassembled past their
    /// timeout. Returns how many connections were expired.
    pub fn on_timers(
        &mut self,
        now_ns: u64,
        store: &mut dyn StateStore,
    ) -> Result<usize, ReassemblyError> {
        let mut expired = 0;
        loop {
            self.keys.clear();
            store.take_expired(self.ns, now_ns, 256, &mut self.keys)?;
            if self.keys.is_empty() {
                return Ok(expired);
            }
            let full = self.keys.len() == 256;
            self.ops.clear();
            let ids: Vec<OpId> = self.keys.iter().map(|k| self.ops.get(*k)).collect();
            store.execute(&mut self.ops)?;
            self.del_keys.clear();
            let mut rearm: Vec<(Key, u64)> = Vec::new();
            let mut frag_ops = Ops::new();
            for (k, id) in self.keys.iter().zip(ids) {
                if self
                    .defrag
                    .expire(k, self.ops.value(id), now_ns, &mut frag_ops)
                {
                    continue;
                }
                match self.ops.decode::<Conn>(id).transpose() {
                    None => {}
                    Some(Ok(c)) if c.last_seen.saturating_add(self.timeout_ns) > now_ns => {
                        rearm.push((*k, c.last_seen + self.timeout_ns));
                    }
                    Some(res) => {
                        if let (Ok(c), Some(canon)) = (res, k.flow_key()) {
                            for (d, dir) in c.dirs.iter().enumerate() {
                                for s in dir.segs() {
                                    self.del_keys.push(seg_key(self.ns, &canon, d, s.seq));
                                }
                            }
                        }
                        self.del_keys.push(*k);
                        expired += 1;
                        self.counters.expired += 1;
                    }
                }
            }
            self.ops.clear();
            for k in &self.del_keys {
                self.ops.delete(*k);
            }
            for (k, t) in rearm {
                self.ops.arm_timer(k, t);
            }
            if !self.ops.is_empty() {
                store.execute(&mut self.ops)?;
            }
            if !frag_ops.is_empty() {
                store.execute(&mut frag_ops)?;
            }
            if !full {
                return Ok(expired);
            }
        }
    }
}

/// A SYN-ACK acknowledging `ack`: if the client's SYN carried data (Fast
/// Open) that the server did not accept (it acknowledges only the SYN,
/// RFC 7413 §4.2: no valid cookie), that data never reached the application
/// and the client sends it again after the handshake. Since bytes already
/// delivered are never replaced (first wins), the resent bytes would pass
/// as duplicates, unscanned, and they need not equal what the SYN carried:
/// the stream is rewound to the acknowledged point and flagged as a gap, so
/// a consumer restarts its automata and scans the resent bytes as new.
fn rewind_unaccepted_syn_data(c: &mut Conn, ack: u32) {
    if c.has(F_ESTABLISHED) || c.dirs[C2S].delivered == 0 {
        return;
    }
    let dir = &mut c.dirs[C2S];
    let base = dir.next.wrapping_sub(dir.delivered as u32);
    let accepted = ack.wrapping_sub(base) as u64;
    if accepted < dir.delivered {
        dir.next = ack;
        dir.delivered = accepted;
        c.synced |= gap_bit(C2S);
    }
}

/// The bytes of buffered segment `sg` of direction `d` of entry `ei` (flow
/// `canon`) from `skip` on (`slen` of them), as a piece of a chunk: a
/// slice of the batch's packet that brought it, or the stored blob (read
/// with the batch's second round trip, then deleted). `None` when none of
/// its bytes are left (the segment is only forgotten).
fn take_segment(
    (pending, ops, del_keys): &mut (&mut Vec<Pending>, &mut Ops, &mut Vec<Key>),
    (ns, canon, ei, d): (Namespace, &FlowKey, usize, usize),
    sg: Seg,
    skip: i64,
    slen: i64,
) -> Option<Piece> {
    let same = pending
        .iter_mut()
        .find(|pd| pd.live && pd.entry == ei as u32 && pd.dir as usize == d && pd.seq == sg.seq);
    match same {
        Some(pd) => {
            pd.live = false;
            (slen > 0).then_some(Piece::Slice {
                pkt: pd.pkt,
                start: pd.start + skip as u16,
                len: slen as u16,
            })
        }
        None => {
            let k = seg_key(ns, canon, d, sg.seq);
            del_keys.push(k);
            (slen > 0).then(|| Piece::Stored {
                op: ops.get(k),
                skip: skip as u16,
                len: slen as u16,
            })
        }
    }
}

/// Direction `o`'s receiver acknowledged `ack`. If that is beyond what was
/// delivered, and the sender did send that far (buffered segments reach it),
/// the bytes between what was delivered and the first buffered segment (or
/// `ack`, if that comes first) reached the receiver past this reassembler: they
/// are skipped and the gap is flagged for the consumer. Buffered segments stay,
/// to be delivered (scanned) with the next packet of that direction. Returns the
/// bytes skipped.
///
/// Waiting for those bytes instead would stall the connection: nobody
/// retransmits acknowledged bytes, and the buffer fills. An honest receiver
/// never acknowledges bytes it lacks, so this happens only when the record is
/// behind the stream (its last progress was lost with a failed instance, or
/// traffic bypassed us); an acknowledgement beyond anything sent is ignored.
fn resync(c: &mut Conn, o: usize, ack: u32) -> Option<u64> {
    if !c.synced(o) || c.dirs[o].n == 0 {
        return None;
    }
    let dir = &mut c.dirs[o];
    let a = dir.rel(ack);
    let first = dir.rel(dir.segs[0].seq);
    let reach = dir
        .segs()
        .iter()
        .map(|s| dir.rel(s.seq) + s.len as i64)
        .max()
        .unwrap_or(0);
    if a <= 0 || a > reach || first <= 0 {
        return None;
    }
    let skip = a.min(first);
    dir.next = dir.next.wrapping_add(skip as u32);
    dir.delivered += skip as u64;
    c.synced |= gap_bit(o);
    Some(skip as u64)
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    flags: u8,
    synced: u8,
    next: [u32; 2],
    delivered: [u64; 2],
    ts_recent: [u32; 2],
    n: [u8; 2],
}

impl Snapshot {
    fn of(c: &Conn) -> Snapshot {
        Snapshot {
            flags: c.flags,
            synced: c.synced,
            next: [c.dirs[0].next, c.dirs[1].next],
            delivered: [c.dirs[0].delivered, c.dirs[1].delivered],
            ts_recent: [c.dirs[0].ts_recent, c.dirs[1].ts_recent],
            n: [c.dirs[0].n, c.dirs[1].n],
        }
    }

    /// Undoes a packet's changes made before any segment was inserted or removed.
    fn restore(&self, c: &mut Conn) {
        c.flags = self.flags;
        c.synced = self.synced;
        for d in 0..2 {
            c.dirs[d].next = self.next[d];
            c.dirs[d].delivered = self.delivered[d];
            c.dirs[d].ts_recent = self.ts_recent[d];
        }
    }
}

/// A TCP segment's option bytes.
fn tcp_options<'a>(frame: &'a [u8], m: &sluice_wire::parse::PacketMeta) -> Option<&'a [u8]> {
    frame.get(m.l4_offset as usize + 20..m.payload_offset as usize)
}

/// The TSval of a TCP segment's timestamp option, if it has one (options
/// that do not parse: none, as a receiver would not find one either).
fn tcp_tsval(frame: &[u8], m: &sluice_wire::parse::PacketMeta) -> Option<u32> {
    let opts = tcp_options(frame, m)?;
    if opts.is_empty() {
        return None;
    }
    sluice_wire::tcp::TcpOptions::parse(opts)
        .ok()?
        .timestamps
        .map(|(v, _)| v)
}

enum Step {
    Chunk(StreamChunk),
    Nothing,
    Drop(&'static str),
}
