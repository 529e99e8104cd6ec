//! What reassembly hands to the functions of a chain for one batch.

use sluice_packet::Packet;

/// The in-order stream bytes one packet made available, in one direction.
///
/// Bytes come from two places: a sub-range of the packet's own payload (the new,
/// in-order part of it, after trimming anything already delivered), followed by
/// bytes released from the out-of-order buffer that the packet made contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamChunk {
    /// True if these bytes travel from the connection's initiator (client) to the
    /// responder (server).
    pub to_server: bool,
    /// True once the three-way handshake was seen complete for this connection.
    pub established: bool,
    /// Stream offset (bytes since the initial sequence number + 1) of the first byte
    /// delivered.
    pub stream_offset: u64,
    /// Start of the packet-payload part, relative to the payload start.
    pub own_start: u16,
    /// Length of the packet-payload part.
    pub own_len: u16,
    /// Start of the released part in [`Streams::arena`].
    pub extra_start: u32,
    /// Length of the released part.
    pub extra_len: u32,
    /// Bytes before these were skipped, never delivered (a resynchronisation:
    /// the receiver acknowledged them, so they passed without this reassembler).
    /// A consumer carrying state across the stream, such as an IPS's automaton,
    /// must not continue it over the gap.
    pub gap: bool,
    /// The other direction's stream offset at this packet: the bytes it
    /// has delivered so far (what a consumer comparing both directions'
    /// sizes, such as the IPS's `stream_size`, needs on either side's
    /// packets).
    pub peer_offset: u64,
    /// The other direction's first segment (SYN, SYN-ACK or a mid-stream
    /// pickup) was seen: its sequence numbers are known.
    pub peer_synced: bool,
    /// These bytes travel the other way than the packet carrying them:
    /// bytes a resynchronisation left buffered, released by a packet of
    /// their receiver (its ACK or RST) that has no bytes of its own, since
    /// their sender may send nothing more. `to_server` tells the bytes'
    /// direction; the packet's is the other.
    pub peer: bool,
}

impl StreamChunk {
    /// Total bytes delivered.
    pub fn len(&self) -> usize {
        self.own_len as usize + self.extra_len as usize
    }

    /// True if no bytes were delivered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A whole IP datagram that packet `pkt`, one of its fragments, completed
/// (see the `defrag` module): an Ethernet frame in [`Streams::arena`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Index in the batch of the fragment that completed it.
    pub pkt: u32,
    /// Start of the frame in the arena.
    pub start: u32,
    /// Length of the frame.
    pub len: u32,
}

/// A packet's network and transport headers as they arrived, kept because
/// this reassembler rewrote them (see [`Streams::rx_header`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxHeader {
    /// Index of the packet in the batch.
    pub pkt: u32,
    /// Start of the copy in [`Streams::rx_arena`].
    pub start: u32,
    /// Length of the copy.
    pub len: u32,
}

/// Per-packet stream deliveries for one batch, indexed like the batch's packets.
#[derive(Debug, Default)]
pub struct Streams {
    /// One entry per packet; `None` for packets that are not TCP of a tracked
    /// connection (UDP, ICMP, dropped, no state).
    pub chunks: Vec<Option<StreamChunk>>,
    /// Bytes released from out-of-order buffers during this batch, and
    /// reassembled datagrams.
    pub arena: Vec<u8>,
    /// IP datagrams completed in this batch, in packet order.
    pub datagrams: Vec<Datagram>,
    /// Indices of the IP fragments taken for reassembly in this batch: a
    /// consumer matches them as IP packets only (their transport header
    /// and payload are the datagram's).
    pub fragments: Vec<u32>,
    /// The packets whose headers this reassembler rewrote in place (URG
    /// cleared, TTL raised, IP options cleared, a checksum recomputed over
    /// replaced bytes), sorted by packet: their headers as they arrived
    /// are in [`Streams::rx_arena`].
    pub rx_headers: Vec<RxHeader>,
    /// The bytes of [`Streams::rx_headers`].
    pub rx_arena: Vec<u8>,
    /// Set by the chain when a consumer reads stream events (kept across
    /// batches): only then does the reassembler decide them.
    pub want_events: bool,
    /// The packets that raised stream events, with their event sets
    /// ([`crate::events::StreamEvent::bit`]), sorted by packet.
    pub events: Vec<(u32, u32)>,
    /// The IP fragments whose bytes lay over bytes already received for
    /// their datagram (an overlap or an exact duplicate; Suricata's
    /// `frag_overlap` decoder event), sorted.
    pub overlapped: Vec<u32>,
}

impl Streams {
    /// Clears for a new batch of `n` packets, keeping capacity.
    pub fn reset(&mut self, n: usize) {
        self.chunks.clear();
        self.chunks.resize(n, None);
        self.arena.clear();
        self.datagrams.clear();
        self.fragments.clear();
        self.rx_headers.clear();
        self.rx_arena.clear();
        self.events.clear();
        self.overlapped.clear();
    }

    /// True if fragment `i` overlapped bytes its datagram already had
    /// ([`Streams::overlapped`]).
    #[inline]
    pub fn frag_overlapped(&self, i: usize) -> bool {
        !self.overlapped.is_empty() && self.overlapped.binary_search(&(i as u32)).is_ok()
    }

    /// The stream events packet `i` raised ([`crate::events`]); 0 when
    /// none, or when no consumer asked for them ([`Streams::want_events`]).
    #[inline]
    pub fn events(&self, i: usize) -> u32 {
        if self.events.is_empty() {
            return 0;
        }
        let at = self.events.partition_point(|e| (e.0 as usize) < i);
        self.events
            .get(at)
            .filter(|e| e.0 as usize == i)
            .map_or(0, |e| e.1)
    }

    /// Keeps packet `i`'s headers (`frame` from the IP header to the
    /// payload, as `meta` places them) before a first rewrite of them; a
    /// packet already kept keeps its first copy, the one as it arrived.
    pub fn keep_rx_header(
        &mut self,
        i: usize,
        frame: &[u8],
        meta: &sluice_wire::parse::PacketMeta,
    ) {
        let at = self.rx_headers.partition_point(|h| (h.pkt as usize) < i);
        if self.rx_headers.get(at).is_some_and(|h| h.pkt as usize == i) {
            return;
        }
        let Some(hdr) = frame.get(meta.l3_offset as usize..meta.payload_offset as usize) else {
            return;
        };
        let start = self.rx_arena.len() as u32;
        self.rx_arena.extend_from_slice(hdr);
        self.rx_headers.insert(
            at,
            RxHeader {
                pkt: i as u32,
                start,
                len: hdr.len() as u32,
            },
        );
    }

    /// Packet `i`'s headers as they arrived, from its IP header to its
    /// payload, if this reassembler rewrote them; `None` when the packet's
    /// own bytes are as they arrived.
    pub fn rx_header(&self, i: usize) -> Option<&[u8]> {
        if self.rx_headers.is_empty() {
            return None;
        }
        let at = self.rx_headers.partition_point(|h| (h.pkt as usize) < i);
        let h = self.rx_headers.get(at).filter(|h| h.pkt as usize == i)?;
        self.rx_arena
            .get(h.start as usize..(h.start + h.len) as usize)
    }

    /// The frame of datagram `d`.
    pub fn datagram(&self, d: &Datagram) -> &[u8] {
        &self.arena[d.start as usize..(d.start + d.len) as usize]
    }

    /// The delivered bytes of packet `i` as two slices (own part, released part).
    pub fn bytes<'a>(
        &'a self,
        i: usize,
        pkt: &'a Packet,
    ) -> Option<(StreamChunk, &'a [u8], &'a [u8])> {
        let c = self.chunks.get(i).copied().flatten()?;
        let payload = pkt.meta.payload(pkt.data());
        let s = c.own_start as usize;
        let own = payload.get(s..s + c.own_len as usize).unwrap_or(&[]);
        let e = c.extra_start as usize;
        let extra = self.arena.get(e..e + c.extra_len as usize).unwrap_or(&[]);
        Some((c, own, extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet's first kept copy stands (the headers as they arrived),
    /// copies are found by packet whatever order they were kept in, and a
    /// new batch forgets them.
    #[test]
    fn rx_headers_keep_the_first_copy_per_packet() {
        let mut s = Streams::default();
        let meta = sluice_wire::parse::PacketMeta {
            l3_offset: 2,
            payload_offset: 5,
            ..Default::default()
        };
        s.keep_rx_header(7, &[0, 0, 1, 2, 3, 9], &meta);
        s.keep_rx_header(7, &[0, 0, 4, 4, 4, 9], &meta);
        s.keep_rx_header(3, &[0, 0, 5, 6, 7, 9], &meta);
        assert_eq!(s.rx_header(7), Some(&[1, 2, 3][..]));
        assert_eq!(s.rx_header(3), Some(&[5, 6, 7][..]));
        assert_eq!(s.rx_header(4), None);
        // Offsets past the frame keep nothing.
        let bad = sluice_wire::parse::PacketMeta {
            payload_offset: 50,
            ..meta
        };
        s.keep_rx_header(9, &[0; 6], &bad);
        assert_eq!(s.rx_header(9), None);
        s.reset(10);
        assert_eq!(s.rx_header(7), None);
    }
}
