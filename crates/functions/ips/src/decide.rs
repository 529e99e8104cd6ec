//! The IPS's decisions on the shared batch skeleton ([`sluice_nf::batch`]): the
//! batch's stream bytes scanned ahead ([`Ips::prescan`]), then each packet's
//! hits evaluated in order over its flow's record.

use rustc_hash::FxBuildHasher;
use sluice_nf::batch::{BatchNf, Pass, Read, Record};
use sluice_nf::{Alert, AlertAction, Batch, Ctx, Event, Packet, StreamChunk, Streams};
use sluice_packet::Verdict;
use sluice_state::{DecodeError, Key, Ops};
use sluice_wire::parse::L4;
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};
use sluice_wire::FlowKey;

use crate::engine::{
    self, FlowState, Header, BLOCKED, OWED, PASSED, RANGE_BAD, SEEN_FWD, SEEN_REV,
};

/// [`Ips::keep_header_hits`]'s memo: not checked yet on this packet.
pub(crate) const HDR_UNKNOWN: u8 = 0;
/// The rule's header matches the packet.
const HDR_OK: u8 = 1;
/// It does not.
const HDR_NO: u8 = 2;
use crate::http;
use crate::pending::{self, Pend};
use crate::rules::{Action, PacketInfo};
use crate::{inspect, Ips, NONE, TABLE_FLOW};

/// A flow record's bookkeeping for one batch.
pub struct Scan {
    /// The flow's direction-invariant hash (the record is the flow's own).
    pub hash: u32,
    /// Scan state changed: sent before the batch leaves, without waiting for the
    /// store's acknowledgement. Otherwise only `last_seen` moved, and the write may
    /// be deferred.
    pub through: bool,
    /// Flags (blocked, passed) changed: written through and acknowledged.
    pub flagged: bool,
    /// The record's index in the batch (its pending bytes' slots).
    pub rec: u32,
}

impl BatchNf for Ips {
    type Id = FlowKey;
    type Value = FlowState;
    type Extra = Scan;
    /// Whether a record existed decides whether a stale one is rewritten.
    type Old = Option<FlowState>;
    /// The flow's record, for the packets that keep one (TCP, and every
    /// protocol when a non-TCP rule can block).
    type Plan = Option<u32>;
    type Hasher = FxBuildHasher;

    fn pass(&mut self) -> &mut Pass<Self> {
        &mut self.pass
    }

    /// Signatures are written for IP: other frames pass, counted.
    fn unclassified(&mut self, _p: &Packet) -> Result<(), &'static str> {
        self.counters.non_ip += 1;
        Ok(())
    }

    fn plan(&mut self, p: &Packet, pass: &mut Pass<Self>) -> Result<Option<u32>, &'static str> {
        if p.meta.l4 != L4::Tcp && !self.nontcp_drop {
            return Ok(None);
        }
        let (canon, _) = p.meta.flow.canonical();
        // The index a new record gets.
        let rec = pass.recs.len() as u32;
        Ok(Some(pass.record(canon, || {
            let key = Key::flow(self.ns, TABLE_FLOW, &canon, &[]);
            let hash = canon.directional_hash();
            let x = Scan {
                hash,
                through: false,
                flagged: false,
                rec,
            };
            (key, Read::Owned(hash), x)
        })))
    }

    /// A record whose automaton states this rule set does not have is
    /// corrupt. Whether a record is idle past the timeout is decided per
    /// packet, against the packet's own time (`decide`).
    fn load(
        &mut self,
        rec: &mut Record<FlowState, Scan, Option<FlowState>>,
        read: Result<Option<FlowState>, DecodeError>,
        _now_ns: u64,
    ) {
        match read {
            Ok(Some(s)) if self.engine.valid(&s.dirs[0]) && self.engine.valid(&s.dirs[1]) => {
                rec.load(Some(s));
            }
            Ok(None) => rec.cur = Some(self.fresh()),
            _ => rec.corrupt = true,
        }
    }

    fn decide(
        &mut self,
        i: usize,
        p: &mut Packet,
        plan: Option<u32>,
        pass: &mut Pass<Self>,
        ctx: &mut Ctx<'_>,
    ) {
        self.counters.packets += 1;
        self.fired.clear();
        if self.datasets.any_deferred {
            crate::dataset::clear_seen();
        }
        self.app_now = None;
        if self.engine.any_decode {
            self.decode_ev = None;
            self.frag_overlap = ctx.streams.frag_overlapped(i);
        }
        // The packet's headers as they arrived, if the reassembler rewrote
        // them (rare): only rules with a header buffer read them.
        self.rx_hdr_on = false;
        if self.engine.any_hdr {
            if let Some(b) = ctx.streams.rx_header(i) {
                self.rx_hdr.clear();
                self.rx_hdr.extend_from_slice(b);
                self.rx_hdr_on = true;
            }
        }
        let mut st = match plan.map(|ei| &pass.recs[ei]) {
            Some(e) if e.corrupt => {
                p.drop_by(ctx.stage, "ips_state_corrupt");
                return;
            }
            // A record idle past the timeout at this packet's time is over,
            // whether or not its timer ran yet: the flow starts afresh.
            Some(e) => match e.cur {
                Some(s) if !self.expired(&s, p.ts_ns) => s,
                _ => self.fresh(),
            },
            None => FlowState {
                dirs: [self.engine.initial(); 2],
                ..FlowState::default()
            },
        };
        let before = st;
        if st.flags & BLOCKED != 0 {
            self.counters.blocked_packets += 1;
            p.drop_by(ctx.stage, "ips_blocked");
            return;
        }
        self.pend.cur = plan.unwrap_or(NONE);
        let drop = if p.meta.l4 == L4::Tcp {
            self.inspect_stream(i, p, &mut st, ctx)
        } else if st.flags & PASSED == 0 {
            self.inspect_datagram(p, &mut st, ctx.events)
        } else {
            false
        };
        if drop {
            self.counters.blocked_packets += 1;
            p.drop_by(ctx.stage, "ips_blocked");
        }
        if let Some(ei) = plan {
            let now = p.ts_ns;
            let e = &mut pass.recs[ei];
            let stale = now > st.last_seen.saturating_add(self.timeout_ns / 8);
            if st != before || (stale && e.old.is_some()) {
                e.x.through |= st != before;
                // A pending blob's description is acknowledged with the
                // blob, so another instance finds both.
                e.x.flagged |= st.flags != before.flags
                    || st.bits != before.bits
                    || st.ints != before.ints
                    || st.pend != before.pend;
                st.last_seen = st.last_seen.max(now);
                e.dirty = true;
            }
            e.cur = Some(st);
        }
    }

    fn write(&self, e: &Record<FlowState, Scan, Option<FlowState>>, ops: &mut Ops) {
        let Some(state) = &e.cur else { return };
        let exists = e.old.is_some();
        if e.x.flagged || !exists {
            // A new record, a flow blocked or passed: acknowledged before
            // the batch leaves.
            ops.put_value_owned(e.key, state, e.x.hash);
        } else if e.x.through && self.sync_progress {
            // Scan progress (automaton states, partial
            // matches): sent before the batch leaves, not waited for.
            ops.put_value_unacked(e.key, state, e.x.hash);
        } else {
            // Refreshes, and scan progress unless `sync_progress`: a
            // crash may lose them; the stream then resynchronises.
            ops.put_value_deferred(e.key, state, e.x.hash);
        }
        if !exists {
            ops.arm_timer(e.key, state.last_seen.saturating_add(self.timeout_ns));
        }
        for d in 0..2 {
            let new = state.pend[d];
            let old = e.old.map(|o| o.pend[d]).unwrap_or_default();
            if !new.has_blob() && !old.has_blob() {
                continue;
            }
            let Some(canon) = e.key.flow_key() else {
                continue;
            };
            let key = pending::key(self.ns, &canon, d);
            if new.has_blob() {
                if new != old {
                    if let Some(b) = self.pend.of(e.x.rec, d) {
                        // A blob that only grew since this batch read it
                        // is sent as its new bytes: a body's packets would
                        // otherwise each rewrite the whole body so far. The
                        // next reader checks the length against the
                        // record's, so a lost append is caught as a lost blob.
                        let at = old.len as usize;
                        let grew = old.has_blob()
                            && old.kind == new.kind
                            && b.len() >= at
                            && self.pend.stored(e.x.rec, d) == at;
                        if !grew {
                            ops.put(key, b);
                        } else if b.len() > at {
                            ops.append(key, &b[at..]);
                            self.pend_appends.set(self.pend_appends.get() + 1);
                        }
                        ops.arm_timer(key, state.last_seen.saturating_add(self.timeout_ns));
                    }
                }
            } else if old.has_blob() {
                ops.delete(key);
            }
        }
    }
}

/// Both directions' sizes as `stream_size` compares them, `[client,
/// server]`, at a packet of a tracked stream: Suricata's `next_seq - isn`
/// for each direction, so 1 (the SYN's sequence number) plus the bytes
/// delivered in sequence so far, this packet's included, and 0 for a
/// direction whose first segment was not seen yet. Computed in `u32` as
/// Suricata's sequence numbers are (it wraps after 4 GiB).
#[inline]
fn stream_sizes(c: &StreamChunk) -> [u32; 2] {
    let own = (c.stream_offset + c.len() as u64 + 1) as u32;
    let peer = if c.peer_synced {
        (c.peer_offset + 1) as u32
    } else {
        0
    };
    if c.to_server {
        [own, peer]
    } else {
        [peer, own]
    }
}

/// The stream events TCP packet `i` raised: the reassembler's, and
/// `pkt_broken_ack`, which Suricata raises from the segment alone (an
/// acknowledgement number without the ACK flag), session or not.
fn stream_events(i: usize, p: &Packet, streams: &Streams) -> u32 {
    use sluice_reassembly::events::StreamEvent;
    let broken = p.meta.tcp_flags_rx & ACK == 0 && p.meta.tcp_ack != 0;
    streams.events(i)
        | if broken {
            StreamEvent::PktBrokenAck.bit()
        } else {
            0
        }
}

/// What the per-packet keywords read from `p`; with `csum` (a rule has a
/// checksum keyword) its checksums are verified too.
#[inline]
fn packet_info(p: &Packet, csum: bool) -> PacketInfo {
    let m = &p.meta;
    let ipv4 = ipv4_fields(p);
    PacketInfo {
        csum: if csum { checksums(p) } else { 0 },
        dsize: m.payload_len,
        // As the packet arrived: the reassembler's normalisation (URG
        // cleared, a low TTL raised) is for the host, not for the rules.
        tcp_flags: m.tcp_flags_rx,
        icmp_type: m.icmp_type,
        icmp_code: m.icmp_code,
        ttl: m.ttl_rx,
        sameip: m.flow.src == m.flow.dst,
        window: m.tcp_window,
        seq: m.tcp_seq,
        ack: m.tcp_ack,
        ipv4,
        ipopts: m.ip_opts_rx,
        icmp_idseq: icmp_idseq(p),
        ipv6: !m.flow.src.is_v4(),
        mss: tcp_mss(p),
        stream_size: None,
        frag_off: match ipv4 {
            Some(h) => Some(h.2 & 0x1fff),
            None => frag_offset_v6(p),
        },
        icmpv6_mtu: icmpv6_mtu(p),
        stream_events: 0,
        applayer_events: 0,
    }
}

/// The MTU of an ICMPv6 Packet Too Big message of code 0 (Suricata's
/// detect-icmpv6-mtu.c: other codes and types have none).
fn icmpv6_mtu(p: &Packet) -> Option<u32> {
    let m = &p.meta;
    if m.l4 != L4::Icmp
        || m.flow.proto != 58
        || m.icmp_type != 2
        || m.icmp_code != 0
        || m.fragment != sluice_wire::parse::Fragment::None
    {
        return None;
    }
    let o = m.l4_offset as usize;
    let b = p.data().get(o + 4..o + 8)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// [`PacketInfo::frag_off`] of `p`, not IPv4.
fn frag_offset_v6(p: &Packet) -> Option<u16> {
    let m = &p.meta;
    if m.fragment == sluice_wire::parse::Fragment::None {
        return None;
    }
    let b = p.data().get(m.l3_offset as usize..m.l3_end as usize)?;
    sluice_wire::ipv6::fragment_header(b).map(|h| h.offset)
}

/// The state of `p`'s checksums as they arrived ([`PacketInfo::csum`]).
fn checksums(p: &Packet) -> u8 {
    use crate::rules::options::{CSUM_IP_OK, CSUM_KNOWN, CSUM_L4_OK};
    let (m, frame) = (&p.meta, p.data());
    let mut c = CSUM_KNOWN;
    if m.ethertype == 0x0800 {
        let o = m.l3_offset as usize;
        let ihl = frame.get(o).map_or(0, |b| (b & 0xf) as usize * 4);
        let ok = frame.get(o..o + ihl).is_some_and(|h| {
            ihl >= 20 && sluice_wire::checksum::fold(sluice_wire::checksum::sum(0, h)) == 0
        });
        if ok {
            c |= CSUM_IP_OK;
        }
    }
    if sluice_wire::parse::transport_checksum_ok(frame, m) {
        c |= CSUM_L4_OK;
    }
    c
}

/// An IPv4 packet's TOS, identification, and flags with fragment offset.
fn ipv4_fields(p: &Packet) -> Option<(u8, u16, u16)> {
    let m = &p.meta;
    if m.ethertype != 0x0800 {
        return None;
    }
    let h = p
        .data()
        .get(m.l3_offset as usize..m.l3_offset as usize + 8)?;
    Some((
        h[1],
        u16::from_be_bytes([h[4], h[5]]),
        u16::from_be_bytes([h[6], h[7]]),
    ))
}

/// A TCP segment's MSS option (kind 2, length 4), if its options hold one.
fn tcp_mss(p: &Packet) -> Option<u16> {
    let m = &p.meta;
    if m.l4 != sluice_wire::parse::L4::Tcp {
        return None;
    }
    let o = m.l4_offset as usize;
    let hl = ((*p.data().get(o + 12)? >> 4) as usize) * 4;
    let mut opts = p.data().get(o + 20..o + hl)?;
    while let Some(&kind) = opts.first() {
        match kind {
            0 => return None,
            1 => opts = &opts[1..],
            _ => {
                let len = *opts.get(1)? as usize;
                if len < 2 || len > opts.len() {
                    return None;
                }
                if kind == 2 && len == 4 {
                    return Some(u16::from_be_bytes([opts[2], opts[3]]));
                }
                opts = &opts[len..];
            }
        }
    }
    None
}

/// An ICMP message's identifier and sequence number, for the types that
/// carry them (echo, timestamp, information and address mask, and ICMPv6
/// echo).
fn icmp_idseq(p: &Packet) -> Option<(u16, u16)> {
    let m = &p.meta;
    let with = match m.flow.proto {
        1 => matches!(m.icmp_type, 0 | 8 | 13..=18),
        58 => matches!(m.icmp_type, 128 | 129),
        _ => false,
    };
    if !with {
        return None;
    }
    let h = p
        .data()
        .get(m.l4_offset as usize..m.l4_offset as usize + 8)?;
    Some((
        u16::from_be_bytes([h[4], h[5]]),
        u16::from_be_bytes([h[6], h[7]]),
    ))
}

impl Ips {
    /// After the batch's writes: keeps each blob written (or read and
    /// unchanged) in memory for its flow's next batch on this instance,
    /// under the record as written ([`pending::BlobCache`]).
    pub(crate) fn keep_blobs(&mut self, pass: &mut Pass<Ips>) {
        for e in pass.recs.iter() {
            let Some(st) = &e.cur else { continue };
            for d in 0..2 {
                let pend = st.pend[d];
                if !pend.has_blob() {
                    continue;
                }
                let Some(canon) = e.key.flow_key() else {
                    continue;
                };
                let Some(b) = self.pend.take_of(e.x.rec, d) else {
                    continue;
                };
                if b.len() == pend.len as usize {
                    self.blob_cache.keep(&canon, d, (pend, st.last_seen), b);
                }
            }
        }
    }

    /// Reads the pending blobs the batch needs ([`crate::pending`]): of the
    /// records announcing one, for each direction a packet of the batch
    /// brings stream bytes to. One round trip for the whole batch, none if
    /// no record needs one.
    pub(crate) fn read_pending(
        &mut self,
        batch: &Batch,
        streams: &Streams,
        pass: &mut Pass<Ips>,
        store: &mut dyn sluice_nf::StateStore,
    ) -> Result<(), sluice_nf::NfError> {
        self.pend.reset(pass.recs.len());
        let any = pass.recs.iter().any(|e| {
            e.cur
                .is_some_and(|s| s.pend[0].has_blob() || s.pend[1].has_blob())
        });
        if !any {
            return Ok(());
        }
        pass.ops.clear();
        self.pend_reads.clear();
        for (i, p) in batch.pkts.iter().enumerate() {
            let Some(Some(ei)) = pass.plans[i] else {
                continue;
            };
            let Some(c) = streams.chunks.get(i).copied().flatten() else {
                continue;
            };
            if !p.is_live() {
                continue;
            }
            let d = if c.to_server { 0 } else { 1 };
            let e = &pass.recs[ei];
            let Some(st) = &e.cur else { continue };
            // A packet without bytes needs the body it ends, if it ends one.
            if c.is_empty() && !(self.http_eof(p, st, &c) && st.pend[d].kind == pending::HTTP_BODY)
            {
                continue;
            }
            if !st.pend[d].has_blob() || self.pend.has(ei, d) {
                continue;
            }
            let (canon, _) = p.meta.flow.canonical();
            // Written last by this instance, under the record as read now:
            // taken from memory, no round trip.
            if let Some(b) = self.blob_cache.take(&canon, d, st.pend[d], st.last_seen) {
                let n = b.len();
                *self.pend.slot(ei, d) = b;
                self.pend.set_stored(ei, d, n);
                self.counters.pending_cached += 1;
                continue;
            }
            self.pend.slot(ei, d);
            // Moved, not copied, out of the results: a body so far may be
            // up to the body limit.
            let id = pass.ops.get_moved(pending::key(self.ns, &canon, d));
            self.pend_reads.push((ei, d as u8, id));
        }
        if self.pend_reads.is_empty() {
            return Ok(());
        }
        store.execute(&mut pass.ops)?;
        for k in 0..self.pend_reads.len() {
            let (ei, d, id) = self.pend_reads[k];
            let want = pass.recs[ei].cur.map_or(0, |s| s.pend[d as usize].len) as usize;
            match pass.ops.value(id) {
                Some(v) if v.len() == want => {
                    pass.ops.take_value(id, self.pend.slot(ei, d as usize));
                    self.pend.set_stored(ei, d as usize, want);
                }
                // The unit is not inspected; the packets deciding it see
                // the mismatch and forget it.
                _ => self.counters.pending_lost += 1,
            }
        }
        Ok(())
    }

    /// A flow's state before any packet.
    fn fresh(&self) -> FlowState {
        FlowState {
            dirs: [self.engine.initial(); 2],
            ..FlowState::default()
        }
    }

    /// Whether `s` is idle past the timeout at `now` (its timer removes it
    /// from then on).
    pub(crate) fn expired(&self, s: &FlowState, now: u64) -> bool {
        s.last_seen.saturating_add(self.timeout_ns) <= now
    }

    /// Matches a TCP packet's reassembled bytes, using the pre-scan's result
    /// where it holds; returns true if the packet must be dropped.
    fn inspect_stream(
        &mut self,
        i: usize,
        p: &Packet,
        st: &mut FlowState,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        if p.meta.tcp_flags & (SYN | ACK) == SYN {
            // A new connection starts its automata afresh (Algorithm 2).
            st.dirs = [self.engine.initial(); 2];
            st.http = Default::default();
            st.pend = [Pend::default(); 2];
            st.app = crate::applayer::UNKNOWN;
            st.ssh_ev = 0;
            st.http_cont = 0;
            st.alp = [crate::alproto::UNKNOWN; 2];
            st.tls = Default::default();
            st.flags &= !(PASSED | OWED | RANGE_BAD);
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        let chunk = ctx.streams.chunks.get(i).copied().flatten();
        let hdr = Header {
            flow: p.meta.flow,
            tcp: true,
            // Outside a tracked stream the sender of a SYN is the client, and
            // otherwise the side with the higher port, as for datagrams.
            to_server: chunk.map_or_else(
                || {
                    if p.meta.tcp_flags & SYN != 0 {
                        p.meta.tcp_flags & ACK == 0
                    } else {
                        p.meta.flow.src_port >= p.meta.flow.dst_port
                    }
                },
                |c| c.to_server,
            ),
            established: chunk.is_some_and(|c| c.established),
            stream: chunk.is_some(),
            pkt: PacketInfo {
                stream_size: chunk.map(|c| stream_sizes(&c)),
                stream_events: if self.engine.any_stream_event {
                    stream_events(i, p, ctx.streams)
                } else {
                    0
                },
                ..packet_info(p, self.csum_rules)
            },
            dns: false,
            http: false,
            tls: false,
            app: st.app,
            alp: crate::alproto::Flow::default(),
        };
        // A chunk of the other direction's bytes (a `peer` release, on a
        // packet without bytes of its own): packet rules see the packet as
        // it travels, the stream its bytes as they travelled (addresses and
        // ports the other way round).
        let phdr = hdr;
        let hdr = match chunk {
            Some(c) if c.peer => Header {
                flow: p.meta.flow.reverse(),
                ..hdr
            },
            _ => hdr,
        };
        let phdr = Header {
            to_server: hdr.to_server != chunk.is_some_and(|c| c.peer),
            ..phdr
        };
        let d = if hdr.to_server { 0 } else { 1 };
        let pd = if phdr.to_server { 0 } else { 1 };
        // The protocol-detection flag belongs to the packet as it travels;
        // every rule of this packet sees the flow's verdicts so far.
        let (hdr, phdr) = if self.alp_detect {
            let flag = crate::alproto::take_pd(&mut st.alp, pd);
            let alp = crate::alproto::flow(st.alp, flag);
            (Header { alp, ..hdr }, Header { alp, ..phdr })
        } else {
            (hdr, phdr)
        };
        // Protocol detection's events belong to the packet whose bytes
        // raise them, and the rules without contents that ask for them run
        // before those bytes are inspected: decided here on a copy of the
        // verdicts (the bytes update the flow's own in `inspect_chunk`).
        let (hdr, phdr) = if self.engine.any_applayer_event {
            let ev = self.applayer_events(st.alp, d, i, p, ctx.streams);
            let with = |h: Header| Header {
                pkt: PacketInfo {
                    applayer_events: ev,
                    ..h.pkt
                },
                ..h
            };
            (with(hdr), with(phdr))
        } else {
            (hdr, phdr)
        };
        if self.packet_rules(st, pd, &phdr, p, ctx.events) {
            return true;
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        // The TLS handshake state's rules see every packet, after the other
        // direction's bytes it acknowledges ([`crate::tls::legacy`]).
        if !self.engine.tls_flow.is_empty() && self.tls_flow_packet(st, pd, &phdr, p, ctx.events) {
            return true;
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        // Likewise the SSH banner events ([`crate::ssh`]).
        if self.ssh_event_packet(st, (pd, 0), &phdr, p, ctx.events) {
            return true;
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        // And a response's Content-Encoding and range events owed to
        // `to_server` rules ([`OWED`]), on the client's next packet.
        if st.flags & OWED != 0 && phdr.to_server {
            if self.http_owed(st, &phdr, p, ctx.events) {
                return true;
            }
            if st.flags & PASSED != 0 {
                return false;
            }
        }
        let Some((c, own, extra)) = ctx.streams.bytes(i, p) else {
            // Outside a tracked stream each segment is inspected on its own.
            if self.dns_segment(p, st, &hdr, ctx.events) {
                return true;
            }
            if st.flags & PASSED != 0 {
                return false;
            }
            if self.tls_segment(p, st, &hdr, ctx.events) {
                return true;
            }
            if st.flags & PASSED != 0 || p.meta.payload_len == 0 {
                return false;
            }
            // No stream (picked up mid-stream with `midstream: false`, or an
            // IP fragment): the payload is matched on its own, as a
            // datagram's, so no byte passes unscanned; `flow:established`
            // rules do not match it (Suricata's midstream semantics).
            self.counters.tcp_unreassembled += 1;
            let mut scratch = *st;
            scratch.dirs[d] = self.engine.initial();
            let drop = self.match_payload(&mut scratch, d, &hdr, p, ctx.events);
            st.flags = scratch.flags;
            st.bits = scratch.bits;
            st.ints = scratch.ints;
            return drop;
        };
        if c.is_empty() {
            // The direction's stream ends: an HTTP body being received ends
            // with it, and the rules waiting for it inspect it.
            if self.http_eof(p, st, &c) && st.pend[d].kind == pending::HTTP_BODY {
                let end = st.pend[d].end as u64;
                if self.http_stream(st, d, &hdr, p, ctx.events, &[], (end, false, true)) {
                    return true;
                }
                if st.flags & (BLOCKED | PASSED) != 0 {
                    return false;
                }
            }
            // No new stream bytes (a retransmission, a segment held out of
            // order): the packetwise rules still inspect its payload, as
            // Suricata inspects every packet's.
            return self.packetwise_segment(st, pd, &phdr, p, ctx.events);
        }
        // The application layer parses the packet's new stream bytes in
        // one piece.
        let mut joined = std::mem::take(&mut self.joined);
        let data: &[u8] = if extra.is_empty() {
            own
        } else {
            joined.clear();
            joined.extend_from_slice(own);
            joined.extend_from_slice(extra);
            &joined
        };
        let drop = self.inspect_chunk(p, st, (d, &hdr), ctx, (c, own, extra, data), i);
        self.joined = joined;
        drop
    }

    /// The protocol-detection events (`alproto::EV_*`) packet `i`'s new
    /// stream bytes of direction `d` raise on a flow whose verdicts are
    /// `alp`; the verdicts themselves are left as they are.
    fn applayer_events(
        &mut self,
        alp: [u8; 2],
        d: usize,
        i: usize,
        p: &Packet,
        streams: &Streams,
    ) -> u8 {
        let Some((c, own, extra)) = streams.bytes(i, p) else {
            return 0;
        };
        if c.is_empty() {
            return 0;
        }
        let mut a = alp;
        if extra.is_empty() {
            return crate::alproto::on_bytes(&mut a, d, own, c.stream_offset);
        }
        let mut joined = std::mem::take(&mut self.joined);
        joined.clear();
        joined.extend_from_slice(own);
        joined.extend_from_slice(extra);
        let ev = crate::alproto::on_bytes(&mut a, d, &joined, c.stream_offset);
        self.joined = joined;
        ev
    }

    /// [`Ips::inspect_stream`] on a packet with new stream bytes `data`
    /// (its `own` and `extra` parts joined).
    fn inspect_chunk(
        &mut self,
        p: &Packet,
        st: &mut FlowState,
        (d, hdr): (usize, &Header),
        ctx: &mut Ctx<'_>,
        (c, own, extra, data): (StreamChunk, &[u8], &[u8], &[u8]),
        i: usize,
    ) -> bool {
        let base = c.stream_offset;
        if base == 0 && (http::looks_like_request(data) || http::looks_like_response(data)) {
            self.app_now = Some("http");
        }
        // A direction's first bytes may decide the flow's stream protocol,
        // before this packet's rules are evaluated.
        let app_hdr;
        let hdr = if base == 0 && st.app == crate::applayer::UNKNOWN && self.app_detect {
            st.app = crate::applayer::detect(st.app, data, hdr.to_server);
            app_hdr = Header {
                app: st.app,
                ..*hdr
            };
            &app_hdr
        } else {
            hdr
        };
        // The bytes' protocol verdicts hold for the rules matching them, as
        // Suricata's app layer runs before its stream inspection; the
        // packet's own detection flag stays as it was.
        let alp_hdr;
        let hdr = if self.alp_detect {
            crate::alproto::on_bytes(&mut st.alp, d, data, base);
            alp_hdr = Header {
                alp: crate::alproto::flow(st.alp, hdr.alp.pd),
                ..*hdr
            };
            &alp_hdr
        } else {
            hdr
        };
        if c.gap {
            // Bytes before these were lost: a pending unit cannot continue.
            self.pend_drop(st, d, true);
        }
        if !self.engine.tls_flow.is_empty() {
            st.tls.feed(d, data, base, c.gap);
        }
        if self.tls_stream(st, (d, hdr), p, ctx.events, (data, base)) {
            return true;
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        if self.dns_stream(st, (d, hdr), p, ctx.events, (data, base)) {
            return true;
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        if self.smtp_stream(st, (d, hdr), p, ctx.events, (data, base)) {
            return true;
        }
        if self.ftp_stream(st, (d, hdr), p, ctx.events, (data, base)) {
            return true;
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        let x = if c.peer { 1 - d } else { d };
        if base == 0 && self.ssh_ident(st, (d, x, hdr), p, ctx.events, data) {
            return true;
        }
        if st.flags & PASSED != 0 {
            return false;
        }
        self.counters.scanned_bytes += c.len() as u64;
        let j = self.pre.job_of.get(i).copied().unwrap_or(NONE) as usize;
        let ds = &mut st.dirs[d];
        if c.gap {
            self.counters.stream_gaps += 1;
            self.engine.after_gap(ds);
        }
        // The pre-scan assumed this flow's state; use it only if it holds.
        if j < self.pre.cs.len() && self.pre.cs[j].0 == ds.cs && self.pre.ci[j].0 == ds.ci {
            ds.cs = self.pre.cs[j].1;
            ds.ci = self.pre.ci[j].1;
            let (lo, hi) = (self.pre.hit_at[j] as usize, self.pre.hit_at[j + 1] as usize);
            self.hits
                .extend(self.pre.hits[lo..hi].iter().map(|h| (h.2, h.3)));
        } else {
            let sc = (&mut self.hits, &mut self.scan_scratch);
            self.engine.scan(ds, own, base, sc);
            let sc = (&mut self.hits, &mut self.scan_scratch);
            self.engine.scan(ds, extra, base + own.len() as u64, sc);
        }
        let bytes = Bytes {
            parts: [own, extra],
            base,
        };
        let payload = p.meta.payload(p.data());
        let seg = Segment {
            payload,
            at: (c.own_start == 0 && own.len() == payload.len()).then_some(base),
        };
        if self.evaluate(st, d, hdr, p, ctx.events, bytes, Some(seg)) {
            return true;
        }
        if st.flags & (BLOCKED | PASSED) != 0 || !self.engine.parses_http() {
            return false;
        }
        let eof = self.http_eof(p, st, &c);
        self.http_stream(st, d, hdr, p, ctx.events, data, (base, c.gap, eof))
    }

    /// True if packet `p`, carrying chunk `c`, ends its direction's stream
    /// (a FIN or a reset from its sender) while an HTTP rule waits for a
    /// body's end ([`http::eval::waits_for_body`]).
    fn http_eof(&self, p: &Packet, st: &FlowState, c: &StreamChunk) -> bool {
        self.http_waits_any
            && !c.peer
            && p.meta.tcp_flags & (FIN | RST) != 0
            && st.http.iter().any(|h| h.in_body())
    }

    /// Matches a datagram's payload on its own; only the flow flags persist.
    /// Returns true if the packet must be dropped.
    fn inspect_datagram(
        &mut self,
        p: &Packet,
        st: &mut FlowState,
        events: &mut Vec<Event>,
    ) -> bool {
        let f = &p.meta.flow;
        let to_server = f.src_port >= f.dst_port;
        let d = if to_server { 0 } else { 1 };
        // Which endpoint sent it, by address rather than by the port
        // guess above, so a flow between equal ports is established too.
        if f.proto == 17 || self.engine.ip_established {
            st.flags |= match f.canonical().1 {
                sluice_wire::flow::Side::Forward => SEEN_FWD,
                sluice_wire::flow::Side::Reverse => SEEN_REV,
            };
        }
        let established = st.flags & (SEEN_FWD | SEEN_REV) == SEEN_FWD | SEEN_REV;
        let mut scratch = *st;
        scratch.dirs[d] = self.engine.initial();
        let hdr = Header {
            flow: *f,
            tcp: false,
            to_server,
            established,
            stream: false,
            pkt: packet_info(p, self.csum_rules),
            dns: false,
            http: false,
            tls: false,
            app: crate::applayer::UNKNOWN,
            alp: if self.alp_detect && f.proto == 17 {
                let payload = p.meta.payload(p.data());
                let strict = crate::dns::eval::strictness(f);
                crate::alproto::datagram(crate::dns::detect_as(payload, false, strict).is_ok())
            } else {
                crate::alproto::Flow::default()
            },
        };
        let mut drop = self.packet_rules(&mut scratch, d, &hdr, p, events);
        if scratch.flags & (BLOCKED | PASSED) == 0 {
            drop |= self.match_payload(&mut scratch, d, &hdr, p, events);
        }
        if scratch.flags & (BLOCKED | PASSED) == 0 {
            drop |= self.dns_datagram(p, &mut scratch, &hdr, events);
        }
        st.flags = scratch.flags;
        st.bits = scratch.bits;
        st.ints = scratch.ints;
        drop
    }

    /// Matches the content and buffer rules over `p`'s payload on its own
    /// (positions from the payload start; `scratch`'s automata for direction
    /// `d` start afresh); returns true if the packet must be dropped.
    fn match_payload(
        &mut self,
        scratch: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        let payload = p.meta.payload(p.data());
        self.counters.scanned_bytes += payload.len() as u64;
        let sc = (&mut self.hits, &mut self.scan_scratch);
        self.engine.scan(&mut scratch.dirs[d], payload, 0, sc);
        let bytes = Bytes {
            parts: [payload, &[]],
            base: 0,
        };
        self.evaluate(scratch, d, hdr, p, events, bytes, None)
    }

    /// Inspects a TCP segment's payload with the packetwise rules alone (its
    /// stream bytes, if any, were matched elsewhere); returns true if the
    /// packet must be dropped.
    fn packetwise_segment(
        &mut self,
        st: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        let payload = p.meta.payload(p.data());
        if !self.engine.any_packetwise || payload.is_empty() {
            return false;
        }
        let mut pcands = std::mem::take(&mut self.pcands);
        pcands.clear();
        let seg = Segment { payload, at: None };
        let drop = self.inspect_segment(&mut pcands, (st, d, hdr, p), events, seg);
        self.pcands = pcands;
        drop
    }

    /// Inspects the packetwise rules ([`crate::rules::Rule::packetwise`])
    /// over a TCP segment's own payload: `pcands`, found by the stream walk
    /// inside it, or, when its payload is not its new stream bytes, by a walk
    /// of the payload alone; and those without a content. Positions count
    /// from the payload's start. Returns true if the packet must be dropped.
    fn inspect_segment(
        &mut self,
        pcands: &mut Vec<u32>,
        (st, d, hdr, p): (&mut FlowState, usize, &Header, &Packet),
        events: &mut Vec<Event>,
        seg: Segment<'_>,
    ) -> bool {
        if seg.at.is_none() {
            // A retransmission, overlap or out-of-order segment: the stream
            // walk did not see this payload as it is.
            let mut ds = self.engine.initial();
            self.counters.scanned_bytes += seg.payload.len() as u64;
            let sc = (&mut self.hits, &mut self.scan_scratch);
            self.engine.scan(&mut ds, seg.payload, 0, sc);
            for &(_, t) in &self.hits {
                let r = t.rule as usize;
                if (self.engine.packetwise[r] && self.engine.trigger[r] == t.content)
                    || (self.engine.dual[r] && self.engine.dual_trigger[r] == t.content)
                {
                    pcands.push(t.rule);
                }
            }
            self.hits.clear();
        }
        pcands.extend_from_slice(self.engine.always_packetwise());
        if !self.prefilter {
            let pw = &self.engine.packetwise;
            pcands.extend(
                self.engine
                    .fast_rules(6)
                    .iter()
                    .filter(|&&r| pw[r as usize]),
            );
            pcands.extend_from_slice(&self.engine.dual_rules);
        }
        if pcands.is_empty() {
            return false;
        }
        pcands.sort_unstable();
        pcands.dedup();
        let bytes = Bytes {
            parts: [seg.payload, &[]],
            base: 0,
        };
        self.inspect_buffer(pcands, (st, d, hdr, p), events, bytes)
    }

    /// Evaluates the rules without contents on a packet, each of which raises an
    /// alert on every packet it matches (Suricata's packet rules); returns true
    /// if the packet must be dropped. Stops at a drop or pass.
    fn packet_rules(
        &mut self,
        st: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        let mut rules = std::mem::take(&mut self.prules);
        self.engine.packet_rules(hdr, &mut rules);
        let mut drop = false;
        let syn = hdr.pkt.tcp_flags & 0x02 != 0;
        for &rule in &rules {
            // Suricata evaluates a rule without contents whose `flags` asks
            // for SYN (but for `!`) on SYN segments only (its SYN list of
            // rules without a prefilter): `*SR` does not match a lone RST.
            if !syn
                && self.engine.rules[rule as usize]
                    .checks
                    .flags
                    .is_some_and(|f| f.needs_syn())
            {
                continue;
            }
            if self.engine.packet_matches(rule, hdr) && self.fire(rule, st, (d, p, None), events) {
                drop = true;
                break;
            }
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.prules = rules;
        drop
    }

    /// Evaluates the `decode-event` rules without contents on the frames of
    /// `batch` the chain's parse refused (or the defragmenter dropped as
    /// malformed), which no function decides: each frame's decoder events
    /// are decided from its bytes ([`crate::decode_events::malformed`]) and
    /// a matching rule raises its alert, with the flow the frame's headers
    /// name. The frame stays dropped whatever the rule's action: a
    /// malformed frame is never forwarded.
    pub(crate) fn inspect_malformed(&mut self, batch: &Batch, events: &mut Vec<Event>) {
        let mut rules = std::mem::take(&mut self.prules);
        for p in &batch.pkts {
            let Verdict::Drop(why) = p.verdict else {
                continue;
            };
            // u8::MAX is the parser's stage (sluice_packet::DropReason).
            if why.stage != u8::MAX && why.reason != "reassembly_fragment_malformed" {
                continue;
            }
            let (ev, flow) = crate::decode_events::malformed(p.data());
            if ev.is_empty() {
                continue;
            }
            self.counters.malformed_inspected += 1;
            self.fired.clear();
            self.decode_ev = Some(ev);
            self.app_now = None;
            self.rx_hdr_on = false;
            let mut st = FlowState {
                dirs: [self.engine.initial(); 2],
                ..FlowState::default()
            };
            let hdr = match flow {
                // As a datagram's: the protocol the IP header names, and
                // the direction guessed from the ports.
                Some(flow) => {
                    let hdr = Header {
                        flow,
                        tcp: flow.proto == 6,
                        to_server: flow.src_port >= flow.dst_port,
                        established: false,
                        stream: false,
                        pkt: PacketInfo::default(),
                        dns: false,
                        http: false,
                        tls: false,
                        app: crate::applayer::UNKNOWN,
                        alp: crate::alproto::Flow::default(),
                    };
                    self.engine.packet_rules(&hdr, &mut rules);
                    rules.retain(|&r| {
                        !self.engine.rules[r as usize].decode_event.is_empty()
                            && self.engine.packet_matches(r, &hdr)
                    });
                    Some(hdr)
                }
                // No IP header decoded: as in Suricata, an `ip` rule's
                // addresses and ports are not checked, and a transport's
                // rule does not match.
                None => {
                    rules.clear();
                    rules.extend_from_slice(&self.engine.decode_ip_rules);
                    None
                }
            };
            let d = usize::from(hdr.is_some_and(|h| !h.to_server));
            for &rule in &rules {
                let before = events.len();
                self.fire(rule, &mut st, (d, p, None), events);
                // The parse left the packet no flow: the alert names the
                // one its headers do.
                if let (Some(f), Some(Event::Alert(a))) = (flow, events.get_mut(before)) {
                    a.flow = f;
                    a.flow_id = f.flow_id();
                }
                if st.flags & (BLOCKED | PASSED) != 0 {
                    break;
                }
            }
        }
        self.decode_ev = None;
        self.prules = rules;
    }

    /// True if rule `rule` already fired on the packet being decided.
    #[inline]
    pub(crate) fn has_fired(&self, rule: u32) -> bool {
        self.fired.contains(&rule)
    }

    /// Applies a matching rule's action and raises its alert; a rule fires at
    /// most once per packet ([`Ips::has_fired`]). `app`: the application
    /// protocol whose parser matched the rule; otherwise the alert names the
    /// flow's, if one was detected (as Suricata's `app_proto`).
    pub(crate) fn fire(
        &mut self,
        rule: u32,
        st: &mut FlowState,
        (d, p, app): (usize, &Packet, Option<&'static str>),
        events: &mut Vec<Event>,
    ) -> bool {
        let r = &self.engine.rules[rule as usize];
        if !r.ip.is_empty() && !ip_buffers_match(r, &p.meta.flow) {
            return false;
        }
        if !r.hdr.is_empty() {
            let rx = self.rx_hdr_on.then_some(&self.rx_hdr[..]);
            if !hdr_buffers_match(r, p, rx, &mut self.hdr_xf) {
                return false;
            }
        }
        if !r.decode_event.is_empty() {
            // Decided once per packet, when the first rule asks.
            // The defragmenter tells overlaps; the frame tells the rest.
            let overlap = self.frag_overlap.then(|| {
                if p.meta.flow.src.is_v4() {
                    crate::decode_events::DecodeEvent::Ipv4FragOverlap
                } else {
                    crate::decode_events::DecodeEvent::Ipv6FragOverlap
                }
            });
            let ev = *self.decode_ev.get_or_insert_with(|| {
                let ev = crate::decode_events::events_of(p.data(), &p.meta);
                overlap.map_or(ev, |o| ev.with(o))
            });
            if !r.decode_event.iter().all(|&e| ev.has(e)) {
                return false;
            }
        }
        if !self.engine.flowbits_ok(rule, &st.bits) || !self.engine.flowints.ok(rule, &st.ints) {
            return false;
        }
        // Post-match changes: flowbits, then flowint (Suricata runs both
        // from the post-match list; they touch different variables).
        self.engine.flowbits_apply(rule, &mut st.bits);
        self.engine.flowints.apply(rule, &mut st.ints);
        let r = &self.engine.rules[rule as usize];
        self.fired.push(rule);
        if self.xbits.uses(rule) {
            // Decided after the batch ([`crate::xbits`]): the alert it raises
            // (the next event) may be withheld then.
            let alerts = r.action != Action::Pass && !r.noalert;
            let ev = alerts.then_some(events.len());
            self.xbits.log(rule, p.meta.flow, p.ts_ns, ev);
        }
        if self.datasets.uses(rule) {
            // Decided after the batch too ([`crate::dataset`]).
            let alerts = r.action != Action::Pass && !r.noalert;
            self.datasets.fired(r.sid, alerts.then_some(events.len()));
        }
        let action = match r.action {
            Action::Pass => {
                st.flags |= PASSED;
                self.counters.passed_flows += 1;
                return false;
            }
            Action::Alert => AlertAction::Allowed,
            Action::Drop => {
                st.flags |= BLOCKED;
                AlertAction::Blocked
            }
        };
        if r.noalert {
            return action == AlertAction::Blocked;
        }
        self.counters.alerts += 1;
        events.push(Event::Alert(Alert {
            ts_ns: p.ts_ns,
            flow: p.meta.flow,
            flow_id: p.meta.flow.flow_id(),
            action,
            gid: r.gid,
            sid: r.sid,
            rev: r.rev,
            msg: r.msg.clone(),
            category: r.category.clone(),
            severity: r.severity,
            to_server: d == 0,
            app_proto: app
                .or(self.app_now)
                .or_else(|| http::detected(&st.http).then_some("http"))
                .or_else(|| crate::applayer::name(st.app)),
            app_meta: None,
            rule_metadata: r.metadata.clone(),
            target: r.target,
        }));
        action == AlertAction::Blocked
    }

    /// Evaluates the collected hits in stream order; returns true if the packet must
    /// be dropped. Stops at a drop or pass.
    /// Scans the stream bytes of every TCP packet of the batch that will need it,
    /// several flows at a time, recording each packet's automaton states before and
    /// after and its hits. The main loop then evaluates packets in order, using these
    /// results where the flow's state matches what the pre-scan assumed (and scanning
    /// itself otherwise), so verdicts are exactly those of scanning in order.
    pub(crate) fn prescan(&mut self, batch: &Batch, streams: &Streams, pass: &Pass<Ips>) {
        let pre = &mut self.pre;
        pre.job_of.clear();
        pre.job_of.resize(batch.pkts.len(), NONE);
        pre.job_src.clear();
        for u in pre.unit_jobs.iter_mut() {
            u.clear();
        }
        pre.unit_of.clear();
        pre.reset.clear();
        pre.reset.resize(pass.recs.len(), [false; 2]);
        let mut nunits = 0usize;
        for (i, p) in batch.pkts.iter().enumerate() {
            let Some(Some(ei)) = pass.plans[i] else {
                continue;
            };
            if !p.is_live() || p.meta.l4 != L4::Tcp {
                continue;
            }
            let e = &pass.recs[ei];
            match &e.cur {
                Some(st) if !e.corrupt && st.flags & (BLOCKED | PASSED) == 0 => {}
                _ => continue,
            }
            // A new connection restarts both directions' walks (as the main loop does).
            if p.meta.tcp_flags & (SYN | ACK) == SYN {
                pre.reset[ei as usize] = [true; 2];
            }
            let Some((c, _, _)) = streams.bytes(i, p) else {
                continue;
            };
            if c.is_empty() {
                continue;
            }
            let d = if c.to_server { 0u8 } else { 1 };
            let u = *pre.unit_of.entry((ei, d)).or_insert_with(|| {
                nunits += 1;
                (nunits - 1) as u32
            }) as usize;
            if pre.unit_jobs.len() <= u {
                pre.unit_jobs.resize_with(u + 1, Vec::new);
            }
            let j = pre.job_src.len() as u32;
            let reset = std::mem::take(&mut pre.reset[ei as usize][d as usize]);
            pre.job_src.push((ei, d, i as u32, reset));
            pre.unit_jobs[u].push(j);
            pre.job_of[i] = j;
        }
        let njobs = pre.job_src.len();
        pre.cs.clear();
        pre.cs.resize(njobs, (0, 0));
        pre.ci.clear();
        pre.ci.resize(njobs, (0, 0));
        pre.hits.clear();
        if njobs == 0 {
            pre.hit_at.clear();
            pre.hit_at.push(0);
            return;
        }
        // Jobs in unit order, so each unit is a contiguous range.
        let mut order: Vec<u32> = Vec::with_capacity(njobs);
        let mut ranges = Vec::with_capacity(nunits);
        let mut starts_cs = Vec::with_capacity(nunits);
        let mut starts_ci = Vec::with_capacity(nunits);
        for u in &pre.unit_jobs[..nunits] {
            let lo = order.len();
            order.extend_from_slice(u);
            ranges.push((lo, order.len()));
            let (ei, d, _, _) = pre.job_src[u[0] as usize];
            // Units are made only of records with a state (not corrupt).
            let (cs, ci) = pass.recs[ei].cur.as_ref().map_or((0, 0), |st| {
                (st.dirs[d as usize].cs, st.dirs[d as usize].ci)
            });
            starts_cs.push(cs);
            starts_ci.push(ci);
        }
        let mut jobs: Vec<engine::Job<'_>> = Vec::with_capacity(njobs);
        pre.job_flow.clear();
        pre.view_of.clear();
        for &j in &order {
            let (_, d, i, reset) = pre.job_src[j as usize];
            let p = &batch.pkts[i as usize];
            // What the main loop's header will say ([`Ips::inspect_stream`]):
            // a `peer` chunk's bytes travelled the other way.
            let peer = streams
                .chunks
                .get(i as usize)
                .copied()
                .flatten()
                .is_some_and(|c| c.peer);
            let flow = if peer {
                p.meta.flow.reverse()
            } else {
                p.meta.flow
            };
            pre.job_flow.push((flow, d == 0));
            // Without the prefilter every hit is kept, so every pattern
            // searched.
            pre.view_of.push(if self.prefilter {
                self.views.view(&self.engine, &flow, d == 0)
            } else {
                crate::views::NO_VIEW
            });
            // Every job was made from a packet with a chunk; an empty job keeps the
            // indices aligned should that ever not hold.
            let (base, own, extra) = match streams.bytes(i as usize, p) {
                Some((c, own, extra)) => (c.stream_offset, own, extra),
                None => (0, &[][..], &[][..]),
            };
            jobs.push(engine::Job {
                parts: [own, extra],
                base,
                reset,
            });
        }
        let mut out_cs = vec![(0u32, 0u32); njobs];
        let mut out_ci = vec![(0u32, 0u32); njobs];
        let sc = &mut self.scan_scratch;
        // The hits of rules whose header cannot match the job's flow
        // direction are not even recorded: [`Ips::evaluate`] would drop
        // them ([`Ips::keep_header_hits`]) before anything reads them. The
        // check is per flow group, memoised per job (an entry holds the
        // job's number in the instance's lifetime, times two, plus the
        // answer). Without the prefilter every hit is kept, so the
        // prefilter tests compare against this too.
        let engine = &self.engine;
        let filter = self.prefilter;
        let crate::PreScan {
            hits,
            job_flow,
            grp_memo,
            grp_epoch,
            view_of,
            ..
        } = pre;
        let epoch = *grp_epoch;
        let mut keep = |job: u32, g: u32| -> bool {
            if !filter {
                return true;
            }
            let g = g as usize;
            if grp_memo.len() <= g {
                grp_memo.resize(g + 1, 0);
            }
            let key = (epoch + job as u64 + 1) << 1;
            let m = grp_memo[g];
            if m & !1 == key {
                return m & 1 != 0;
            }
            let (flow, to_server) = &job_flow[job as usize];
            let ok = engine.group_matches(g as u32, flow, *to_server);
            grp_memo[g] = key | ok as u64;
            ok
        };
        engine.scan_units(
            &ranges,
            [&starts_cs, &starts_ci],
            &jobs,
            [&mut out_cs, &mut out_ci],
            (hits, sc),
            &mut keep,
            (view_of, self.views.stages()),
        );
        *grp_epoch += njobs as u64;
        // Back from unit order to job ids.
        for (pos, &j) in order.iter().enumerate() {
            pre.cs[j as usize] = out_cs[pos];
            pre.ci[j as usize] = out_ci[pos];
        }
        for h in pre.hits.iter_mut() {
            h.0 = order[h.0 as usize];
        }
        // Stable by (job, part), in linear time: a batch of ET traffic has
        // hundreds of thousands of hits (one-byte contents of hundreds of
        // rules), where a comparison sort was a sixth of the IPS's time.
        let key = |h: &(u32, u8, u64, engine::Target)| h.0 as usize * 2 + (h.1 as usize).min(1);
        let at = &mut pre.sort_at;
        at.clear();
        at.resize(njobs * 2 + 1, 0);
        for h in &pre.hits {
            at[key(h) + 1] += 1;
        }
        for k in 1..at.len() {
            at[k] += at[k - 1];
        }
        if let Some(&first) = pre.hits.first() {
            pre.sorted.clear();
            pre.sorted.resize(pre.hits.len(), first);
            for h in &pre.hits {
                let k = key(h);
                pre.sorted[at[k] as usize] = *h;
                at[k] += 1;
            }
            std::mem::swap(&mut pre.hits, &mut pre.sorted);
        }
        pre.hit_at.clear();
        let mut k = 0;
        for j in 0..=njobs as u32 {
            while k < pre.hits.len() && pre.hits[k].0 < j {
                k += 1;
            }
            pre.hit_at.push(k as u32);
        }
    }

    /// `bytes` are the packet's bytes: the buffer the rules needing one are
    /// inspected over, once the streaming hits are evaluated.
    ///
    /// `seg`: for TCP stream bytes, the segment's own payload, which the
    /// packetwise rules inspect instead of the stream; `None` when `bytes`
    /// are the packet's payload (a datagram, TCP without a stream), which
    /// they then inspect like buffer rules.
    #[allow(clippy::too_many_arguments)] // one packet's whole context
    fn evaluate(
        &mut self,
        st: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &Packet,
        events: &mut Vec<Event>,
        bytes: Bytes<'_>,
        seg: Option<Segment<'_>>,
    ) -> bool {
        self.keep_header_hits(hdr);
        let tcp_payload = seg.is_none() && hdr.flow.proto == 6;
        let always = self.engine.always_rules(hdr.flow.proto);
        let pkt_work = seg.is_some_and(|s| self.engine.any_packetwise && !s.payload.is_empty());
        let pkt_always = tcp_payload && !self.engine.always_packetwise().is_empty();
        let unfiltered = !self.prefilter && !self.engine.fast_rules(hdr.flow.proto).is_empty();
        if self.hits.is_empty() && always.is_empty() && !pkt_work && !pkt_always && !unfiltered {
            return false;
        }
        self.hits.sort_unstable();
        let hits = std::mem::take(&mut self.hits);
        let mut cands = std::mem::take(&mut self.cands);
        cands.clear();
        let mut pcands = std::mem::take(&mut self.pcands);
        pcands.clear();
        let mut drop = false;
        for &(end, t) in &hits {
            if self.has_fired(t.rule) {
                continue;
            }
            let r = t.rule as usize;
            if self.engine.dual[r] && self.engine.dual_trigger[r] == t.content {
                // Also a candidate for its segment's own payload (checked
                // after the stream: at most one alert per packet).
                let len = self.engine.rules[r].contents[t.content as usize]
                    .bytes
                    .len();
                if seg.is_some_and(|s| s.holds(end, len)) {
                    pcands.push(t.rule);
                }
            }
            if self.engine.packetwise[r] {
                // Never part of the streaming match: a candidate for the
                // payload it was found in.
                if self.engine.trigger[r] == t.content {
                    let len = self.engine.rules[r].contents[t.content as usize]
                        .bytes
                        .len();
                    match seg {
                        None => cands.push(t.rule),
                        Some(s) if s.holds(end, len) => pcands.push(t.rule),
                        Some(_) => {}
                    }
                }
                continue;
            }
            if self.engine.on_hit(t, end, &mut st.dirs[d], hdr) {
                if self.fire(t.rule, st, (d, p, None), events) {
                    drop = true;
                }
            } else if self.engine.trigger[t.rule as usize] == t.content {
                // A buffer rule, or a multi-content one the streaming match
                // (which does not backtrack) has not completed.
                cands.push(t.rule);
            }
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.hits = hits;
        self.hits.clear();
        if unfiltered {
            // Every buffer or packetwise rule, not only those whose fast
            // pattern the automata found: what the prefilter must agree with.
            for &r in self.engine.fast_rules(hdr.flow.proto) {
                if seg.is_some() && self.engine.packetwise[r as usize] {
                    pcands.push(r);
                } else {
                    cands.push(r);
                }
            }
            if seg.is_some() {
                pcands.extend_from_slice(&self.engine.dual_rules);
            }
        }
        if st.flags & (BLOCKED | PASSED) == 0 && bytes.parts.iter().any(|b| !b.is_empty()) {
            cands.extend_from_slice(self.engine.always_rules(hdr.flow.proto));
            if tcp_payload {
                cands.extend_from_slice(self.engine.always_packetwise());
            }
            if !cands.is_empty() {
                cands.sort_unstable();
                cands.dedup();
                let r = (&mut *st, d, hdr, p);
                drop |= self.inspect_buffer(&cands, r, events, bytes);
            }
        }
        self.cands = cands;
        if let Some(s) = seg {
            if pkt_work && st.flags & (BLOCKED | PASSED) == 0 {
                drop |= self.inspect_segment(&mut pcands, (&mut *st, d, hdr, p), events, s);
            }
        }
        self.pcands = pcands;
        drop
    }

    /// Drops the hits of rules whose header does not match the packet: the
    /// streaming match and the inspections ignore them anyway (each checks
    /// the header first), and ET's one-byte contents (`|00|` in 475 rules)
    /// make thousands per packet. Each rule's header is checked once.
    fn keep_header_hits(&mut self, hdr: &Header) {
        if self.hits.is_empty() {
            return;
        }
        let (memo, touched) = (&mut self.hdr_memo, &mut self.hdr_touched);
        let engine = &self.engine;
        self.hits.retain(|h| {
            let r = h.1.rule as usize;
            match memo[r] {
                HDR_OK => true,
                HDR_NO => false,
                _ => {
                    let ok = engine.header_matches(h.1.rule, hdr);
                    memo[r] = if ok { HDR_OK } else { HDR_NO };
                    touched.push(h.1.rule);
                    ok
                }
            }
        });
        for &r in touched.iter() {
            memo[r as usize] = HDR_UNKNOWN;
        }
        touched.clear();
    }

    /// Inspects the candidate rules over the packet's buffer ([`inspect`]);
    /// returns true if the packet must be dropped.
    fn inspect_buffer(
        &mut self,
        cands: &[u32],
        (st, d, hdr, p): (&mut FlowState, usize, &Header, &Packet),
        events: &mut Vec<Event>,
        bytes: Bytes<'_>,
    ) -> bool {
        let mut buf = std::mem::take(&mut self.buf);
        let [own, extra] = bytes.parts;
        let data: &[u8] = if extra.is_empty() {
            own
        } else {
            buf.clear();
            buf.extend_from_slice(own);
            buf.extend_from_slice(extra);
            &buf
        };
        let mut drop = false;
        for &rule in cands {
            if self.has_fired(rule)
                || !self.engine.header_matches(rule, hdr)
                || !inspect::inspect(&self.engine.rules[rule as usize], data, bytes.base)
            {
                continue;
            }
            drop |= self.fire(rule, st, (d, p, None), events);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.buf = buf;
        drop
    }
}

/// A TCP segment's own payload beside its new stream bytes.
#[derive(Clone, Copy)]
pub(crate) struct Segment<'a> {
    payload: &'a [u8],
    /// The stream position of `payload[0]` when the new stream bytes start
    /// with the whole payload (an in-order segment): the stream walk's hits
    /// inside it are then exactly the payload's own.
    at: Option<u64>,
}

impl Segment<'_> {
    /// True if a pattern of `len` bytes ending at stream position `end` lies
    /// inside the payload.
    #[inline]
    fn holds(&self, end: u64, len: usize) -> bool {
        self.at
            .is_some_and(|at| end >= at + len as u64 && end <= at + self.payload.len() as u64)
    }
}

/// A packet's bytes for a buffer inspection: a TCP packet's own and released
/// stream bytes at stream position `base`, or a datagram's payload at 0.
#[derive(Clone, Copy)]
pub(crate) struct Bytes<'a> {
    parts: [&'a [u8]; 2],
    base: u64,
}

/// True if the keywords of `r` on packet-header buffers match packet `p`'s
/// headers ([`crate::pkthdr`]; `rx`: its headers as they arrived, if they
/// were rewritten since): conditions on the packet, whatever else of the
/// rule matched. A packet without one of the headers does not match.
fn hdr_buffers_match(
    r: &crate::rules::Rule,
    p: &Packet,
    rx: Option<&[u8]>,
    s: &mut crate::transform::Scratch,
) -> bool {
    r.hdr.iter().all(|l| {
        l.buf
            .of(p.data(), &p.meta, rx)
            .is_some_and(|b| crate::bufrules::list_matches(r, &l.items, &l.xf, b, 0, s))
    })
}

/// True if the `ip.src` and `ip.dst` keywords of `r` match the addresses
/// of a packet of `flow` (as it travelled): conditions on the packet,
/// whatever else of the rule matched.
fn ip_buffers_match(r: &crate::rules::Rule, flow: &sluice_wire::FlowKey) -> bool {
    r.ip.iter().all(|(dst, items)| {
        let a = if *dst { &flow.dst } else { &flow.src };
        crate::inspect::inspect_items(r, items, a.as_bytes(), 0)
    })
}
