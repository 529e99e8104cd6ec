//! Suricata's stream events (its `stream-event` rule keyword): which ones a
//! TCP packet raises, decided from the connection record as the packet
//! found it, as Suricata 7's stream engine (stream-tcp.c) decides them from
//! its session.
//!
//! Only what this record can decide exactly is decided; Suricata's other
//! events need state this reassembler does not keep (windows, the last
//! acknowledgement of each side, timestamps of every segment, the segments
//! already delivered), and [`unsupported`] says why for each. Events are
//! computed only for a consumer that asks ([`crate::Streams::want_events`]),
//! so a chain without `stream-event` rules does not pay for them.
//!
//! The states map as follows (a record created by a client SYN, never by a
//! mid-stream pickup, and not after a simultaneous open, see
//! [`crate::record`]): Suricata's SYN_SENT is a record whose server side
//! is not synchronised yet; SYN_RECV one whose SYN-ACK was accepted and
//! whose handshake did not complete; ESTABLISHED one whose handshake
//! completed, before any FIN or RST.

use crate::record::{
    Conn, C2S, F_ESTABLISHED, F_FIN_C, F_FIN_S, F_MIDSTREAM, F_RST, F_SYNACK, F_TFO, S2C, S_ODD,
};
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};

/// A stream event a rule can name: its bit in a packet's event set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StreamEvent {
    /// SYN_SENT: a SYN-ACK from the client (not a simultaneous open).
    SynAckInWrongDirection = 0,
    /// SYN_SENT: the server's SYN-ACK does not acknowledge the SYN.
    SynAckWithWrongAck,
    /// SYN_SENT: the SYN carried Fast Open data and the SYN-ACK
    /// acknowledges only the SYN.
    SynAckTfoDataIgnored,
    /// SYN_RECV: a SYN-ACK from the client.
    SynAckToServerOnSynRecv,
    /// SYN_RECV: the server resends its SYN-ACK acknowledging something else.
    SynAckResendWithDifferentAck,
    /// SYN_RECV: a SYN from the server.
    SynToClientOnSynRecv,
    /// SYN_RECV: the client resends its SYN with another sequence number.
    SynResendDiffSeqOnSynRecv,
    /// SYN_RECV: the client's ACK has the right sequence number but does
    /// not acknowledge the SYN-ACK.
    RightSeqWrongAckEvasion,
    /// SYN_RECV: the client's ACK has neither the right sequence number
    /// nor the right acknowledgement (or a sequence number before the
    /// right one).
    WrongSeqWrongAck,
    /// SYN_RECV: an ACK from the server (Suricata inline only).
    AckInWrongDir,
    /// SYN_RECV: data from the server right after its SYN-ACK (Suricata
    /// inline only).
    AckDataInject,
    /// ESTABLISHED: a SYN-ACK from the client.
    EstSynAckToServer,
    /// ESTABLISHED: a SYN from the server.
    EstSynToClient,
    /// ESTABLISHED: the client resends its SYN.
    EstSynResend,
    /// ESTABLISHED: the client sends a SYN with another sequence number.
    EstSynResendDiffSeq,
    /// A RST of a connection without a record.
    RstButNoSession,
    /// A FIN of a connection without a record (that does not start one
    /// mid-stream).
    FinButNoSession,
    /// A segment without the ACK flag and a non-zero acknowledgement
    /// number (decided from the packet alone, by the consumer).
    PktBrokenAck,
    /// Never raised here: Suricata raises it when a flow's packet reaches
    /// another thread than its first one; no flow is bound to an instance
    /// here.
    WrongThread,
    /// Never raised here: Suricata raises it only under its urgent policy
    /// `oob` (its default is `inline`, as this reassembler's policy).
    UrgentOobLimitReached,
    /// Never raised here: Suricata raises it only with
    /// `stream.async-oneside` (off by default), which has no equivalent here.
    AsyncWrongSeq,
    /// Never raised, as by Suricata 7: it queues a SYN-ACK resent with
    /// another ISN instead (to match the client's ACK against).
    SynAckResendWithDiffSeq,
}

/// Every event with its name in Suricata's `stream-event` keyword.
pub const NAMES: &[(&str, StreamEvent)] = &[
    (
        "3whs_synack_in_wrong_direction",
        StreamEvent::SynAckInWrongDirection,
    ),
    (
        "3whs_synack_with_wrong_ack",
        StreamEvent::SynAckWithWrongAck,
    ),
    (
        "3whs_synack_tfo_data_ignored",
        StreamEvent::SynAckTfoDataIgnored,
    ),
    (
        "3whs_synack_toserver_on_syn_recv",
        StreamEvent::SynAckToServerOnSynRecv,
    ),
    (
        "3whs_synack_resend_with_different_ack",
        StreamEvent::SynAckResendWithDifferentAck,
    ),
    (
        "3whs_syn_toclient_on_syn_recv",
        StreamEvent::SynToClientOnSynRecv,
    ),
    (
        "3whs_syn_resend_diff_seq_on_syn_recv",
        StreamEvent::SynResendDiffSeqOnSynRecv,
    ),
    (
        "3whs_right_seq_wrong_ack_evasion",
        StreamEvent::RightSeqWrongAckEvasion,
    ),
    ("3whs_wrong_seq_wrong_ack", StreamEvent::WrongSeqWrongAck),
    ("3whs_ack_in_wrong_dir", StreamEvent::AckInWrongDir),
    ("3whs_ack_data_inject", StreamEvent::AckDataInject),
    ("est_synack_toserver", StreamEvent::EstSynAckToServer),
    ("est_syn_toclient", StreamEvent::EstSynToClient),
    ("est_syn_resend", StreamEvent::EstSynResend),
    ("est_syn_resend_diff_seq", StreamEvent::EstSynResendDiffSeq),
    ("rst_but_no_session", StreamEvent::RstButNoSession),
    ("fin_but_no_session", StreamEvent::FinButNoSession),
    ("pkt_broken_ack", StreamEvent::PktBrokenAck),
    ("wrong_thread", StreamEvent::WrongThread),
    (
        "reassembly_urgent_oob_limit_reached",
        StreamEvent::UrgentOobLimitReached,
    ),
    ("3whs_async_wrong_seq", StreamEvent::AsyncWrongSeq),
    (
        "3whs_synack_resend_with_diff_seq",
        StreamEvent::SynAckResendWithDiffSeq,
    ),
];

/// Suricata 7's other stream events, each with why it is not decided here.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "3whs_synack_flood",
        "needs the queue of SYN-ACKs Suricata keeps",
    ),
    ("3whs_syn_flood", "needs the queue of SYNs Suricata keeps"),
    (
        "4whs_synack_with_wrong_ack",
        "simultaneous opens are not tracked",
    ),
    (
        "4whs_synack_with_wrong_syn",
        "simultaneous opens are not tracked",
    ),
    ("4whs_wrong_seq", "simultaneous opens are not tracked"),
    ("4whs_invalid_ack", "simultaneous opens are not tracked"),
    (
        "closewait_ack_out_of_window",
        "needs windows and the close states",
    ),
    (
        "closewait_fin_out_of_window",
        "needs windows and the close states",
    ),
    (
        "closewait_invalid_ack",
        "needs the last acknowledgements and the close states",
    ),
    (
        "closewait_pkt_before_last_ack",
        "needs the last acknowledgements and the close states",
    ),
    ("closing_ack_wrong_seq", "needs the close states"),
    (
        "closing_invalid_ack",
        "needs the last acknowledgements and the close states",
    ),
    ("est_packet_out_of_window", "needs the windows"),
    ("est_pkt_before_last_ack", "needs the last acknowledgements"),
    ("est_synack_resend", "needs the last acknowledgements"),
    (
        "est_synack_resend_with_different_ack",
        "needs the last acknowledgements",
    ),
    (
        "est_synack_resend_with_diff_seq",
        "needs the last acknowledgements",
    ),
    ("est_invalid_ack", "needs the last acknowledgements"),
    ("fin_invalid_ack", "needs the last acknowledgements"),
    ("fin1_ack_wrong_seq", "needs the close states"),
    ("fin1_fin_wrong_seq", "needs windows and the close states"),
    (
        "fin1_invalid_ack",
        "needs the last acknowledgements and the close states",
    ),
    ("fin2_ack_wrong_seq", "needs the close states"),
    ("fin2_fin_wrong_seq", "needs the close states"),
    (
        "fin2_invalid_ack",
        "needs the last acknowledgements and the close states",
    ),
    ("fin_out_of_window", "needs the windows"),
    (
        "fin_syn",
        "needs the windows (Suricata checks it after the FIN's window)",
    ),
    ("lastack_ack_wrong_seq", "needs the close states"),
    (
        "lastack_invalid_ack",
        "needs the last acknowledgements and the close states",
    ),
    ("timewait_ack_wrong_seq", "needs the close states"),
    (
        "timewait_invalid_ack",
        "needs the last acknowledgements and the close states",
    ),
    ("shutdown_syn_resend", "needs the close states"),
    (
        "pkt_invalid_timestamp",
        "needs the timestamps of every segment",
    ),
    ("pkt_invalid_ack", "needs the last acknowledgements"),
    ("pkt_broken_ack_flag", "not a Suricata 7 event"),
    ("rst_invalid_ack", "needs the last acknowledgements"),
    ("pkt_retransmission", "needs the segments already delivered"),
    (
        "pkt_spurious_retransmission",
        "needs the last acknowledgements",
    ),
    ("pkt_bad_window_update", "needs the windows"),
    (
        "suspected_rst_inject",
        "needs which side's RST Suricata accepted",
    ),
    ("est_ack_zwp_data", "needs the windows"),
    (
        "reassembly_segment_before_base_seq",
        "needs the segments already delivered",
    ),
    ("reassembly_no_segment", "needs Suricata's segment memory"),
    ("reassembly_seq_gap", "needs Suricata's inspection progress"),
    (
        "reassembly_overlap_different_data",
        "needs the segments already delivered",
    ),
    (
        "reassembly_depth_reached",
        "needs Suricata's reassembly depth",
    ),
    ("reassembly_insert_memcap", "needs Suricata's memory caps"),
    ("reassembly_insert_limit", "needs Suricata's memory caps"),
    (
        "reassembly_insert_invalid",
        "needs Suricata's segment memory",
    ),
    (
        "reassembly_urgent_oob_invalid",
        "needs Suricata's urgent policy oob",
    ),
];

impl StreamEvent {
    /// The event named `name` (`stream-event:NAME`), or, for one of
    /// Suricata's that is not decided here, why not (`Err(Some(why))`);
    /// `Err(None)` for a name Suricata does not have.
    pub fn parse(name: &str) -> Result<StreamEvent, Option<&'static str>> {
        let name = name.trim();
        if let Some((_, e)) = NAMES.iter().find(|(n, _)| *n == name) {
            return Ok(*e);
        }
        Err(unsupported(name))
    }

    /// Its bit in an event set.
    #[inline]
    pub const fn bit(self) -> u32 {
        1 << self as u8
    }
}

/// Why Suricata's stream event `name` is not decided here, if it is one.
pub fn unsupported(name: &str) -> Option<&'static str> {
    UNSUPPORTED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
}

/// What [`decide`] reads of a TCP packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Segment {
    /// TCP flags as they arrived.
    pub flags: u8,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Payload length.
    pub len: u16,
    /// Sent by the connection's client (the SYN's sender).
    pub from_client: bool,
}

/// The events packet `s` raises on connection `c` as it found it (before
/// the packet changed it), Suricata 7's stream engine's in inline mode.
/// A pure function of the record and the packet.
pub(crate) fn decide(c: &Conn, s: &Segment) -> u32 {
    // A record picked up mid-stream or after a simultaneous open has other
    // directions or states in Suricata; one closed is past the states
    // decided here.
    if c.has(F_MIDSTREAM) || c.synced & S_ODD != 0 || c.has(F_RST) {
        return 0;
    }
    let f = s.flags;
    let syn = f & SYN != 0;
    let synack = f & (SYN | ACK) == SYN | ACK;
    let tfo = c.has(F_TFO);
    // Suricata's client ISN + 1 and server ISN + 1: the first sequence
    // number of each direction's stream (resyncs and rewinds move `next`
    // and `delivered` together).
    let base = |d: usize| c.dirs[d].next.wrapping_sub(c.dirs[d].delivered as u32);
    let (cb, sb) = (base(C2S), base(S2C));
    if c.synced(C2S) && !c.synced(S2C) {
        // SYN_SENT: a SYN-ACK, whatever else it carries, is the
        // handshake's second packet.
        if !synack {
            return 0;
        }
        if s.from_client {
            return StreamEvent::SynAckInWrongDirection.bit();
        }
        // With Fast Open (the SYN carried the option) the SYN-ACK may
        // acknowledge the SYN's data too; without, only the SYN.
        let syn_data = if tfo { c.dirs[C2S].delivered as u32 } else { 0 };
        if s.ack == cb {
            return if syn_data > 0 {
                StreamEvent::SynAckTfoDataIgnored.bit()
            } else {
                0
            };
        }
        if s.ack != cb.wrapping_add(syn_data) {
            return StreamEvent::SynAckWithWrongAck.bit();
        }
        return 0;
    }
    let established = c.has(F_ESTABLISHED);
    if !c.has(F_SYNACK) || c.has(F_FIN_C) || c.has(F_FIN_S) || f & (RST | FIN) != 0 {
        return 0;
    }
    // Suricata first checks whether a segment with data retransmits
    // bytes (`StreamTcpPacketIsSpuriousRetransmission`), which needs the
    // last acknowledgements: segments with data raise none of the SYN
    // events here.
    if syn {
        if s.len > 0 {
            return 0;
        }
        let e = match (established, synack, s.from_client) {
            (false, true, true) => StreamEvent::SynAckToServerOnSynRecv,
            // Suricata's client `last_ack` in SYN_RECV is the accepted
            // SYN-ACK's acknowledgement, the client's ISN + 1 without
            // Fast Open.
            (false, true, false) if !tfo && s.ack != cb => {
                StreamEvent::SynAckResendWithDifferentAck
            }
            (false, false, false) => StreamEvent::SynToClientOnSynRecv,
            // With Fast Open, a client SYN may start a new session in
            // Suricata (its data was ignored) rather than raise an event.
            (false, false, true) if !tfo && s.seq != cb.wrapping_sub(1) => {
                StreamEvent::SynResendDiffSeqOnSynRecv
            }
            (true, true, true) => StreamEvent::EstSynAckToServer,
            (true, false, false) => StreamEvent::EstSynToClient,
            (true, false, true) if !tfo => {
                if s.seq == cb.wrapping_sub(1) {
                    StreamEvent::EstSynResend
                } else {
                    StreamEvent::EstSynResendDiffSeq
                }
            }
            _ => return 0,
        };
        return e.bit();
    }
    if established || f & ACK == 0 || tfo {
        return 0;
    }
    // SYN_RECV, an ACK. Suricata's keep-alive check comes first: at most
    // one byte, one before the sender's next sequence number, acknowledging
    // what the other side's last acknowledgement is.
    let (own, other) = if s.from_client { (cb, sb) } else { (sb, cb) };
    if s.len <= 1 && s.seq == own.wrapping_sub(1) && s.ack == other {
        return 0;
    }
    // A segment whose data ends before the stream's start is a
    // retransmission first (see above).
    if s.len > 0 && (s.seq.wrapping_add(s.len as u32).wrapping_sub(own) as i32) <= 0 {
        return 0;
    }
    if s.from_client {
        if s.seq == cb {
            return if s.ack != sb {
                StreamEvent::RightSeqWrongAckEvasion.bit()
            } else {
                0
            };
        }
        // Suricata takes a segment beyond the client's ISN + 1 that
        // acknowledges the SYN-ACK, within the SYN-ACK's window, as
        // following lost ones; the window is not kept here, so only the
        // segments it rejects in any window raise the event.
        if s.ack != sb || (s.seq.wrapping_sub(cb) as i32) < 0 {
            return StreamEvent::WrongSeqWrongAck.bit();
        }
        return 0;
    }
    if s.len > 0 && s.ack == cb && s.seq == sb {
        StreamEvent::AckDataInject.bit()
    } else {
        StreamEvent::AckInWrongDir.bit()
    }
}

/// The events a packet of a connection without a record raises: a RST,
/// or a FIN that does not start a record mid-stream (with `midstream`, a
/// FIN carrying data does, as in Suricata).
pub fn no_session(flags: u8, len: u16, midstream: bool) -> u32 {
    if flags & RST != 0 {
        StreamEvent::RstButNoSession.bit()
    } else if flags & FIN != 0 && (!midstream || len == 0) {
        StreamEvent::FinButNoSession.bit()
    } else {
        0
    }
}

/// True if TCP options `opts` carry a Fast Open option (kind 34, or the
/// experimental kind 254 with magic 0xF989, RFC 7413 §4.1.1), as Suricata's
/// decoder finds one.
pub fn has_tfo(opts: &[u8]) -> bool {
    let mut b = opts;
    while let Some(&kind) = b.first() {
        match kind {
            0 => return false,
            1 => {
                b = &b[1..];
                continue;
            }
            _ => {}
        }
        let Some(&len) = b.get(1) else {
            return false;
        };
        let len = len as usize;
        if len < 2 || len > b.len() {
            return false;
        }
        match kind {
            34 if len == 2 || (6..=18).contains(&len) => return true,
            254 if len >= 4 && b[2] == 0xf9 && b[3] == 0x89 => return true,
            _ => {}
        }
        b = &b[len..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::StreamEvent as E;
    use super::*;
    use crate::record::F_CLIENT_FWD;

    const ISN_C: u32 = 1000;
    const ISN_S: u32 = 50000;

    /// SYN seen: SYN_SENT.
    fn syn_sent() -> Conn {
        let mut c = Conn {
            flags: F_CLIENT_FWD,
            synced: 1 << C2S,
            ..Conn::default()
        };
        c.dirs[C2S].next = ISN_C + 1;
        c
    }

    /// SYN-ACK accepted: SYN_RECV.
    fn syn_recv() -> Conn {
        let mut c = syn_sent();
        c.flags |= F_SYNACK;
        c.synced |= 1 << S2C;
        c.dirs[S2C].next = ISN_S + 1;
        c
    }

    /// Handshake complete, some bytes each way: ESTABLISHED.
    fn est() -> Conn {
        let mut c = syn_recv();
        c.flags |= F_ESTABLISHED;
        c.dirs[C2S].next += 30;
        c.dirs[C2S].delivered = 30;
        c.dirs[S2C].next += 70;
        c.dirs[S2C].delivered = 70;
        c
    }

    fn client(flags: u8, seq: u32, ack: u32, len: u16) -> Segment {
        Segment {
            flags,
            seq,
            ack,
            len,
            from_client: true,
        }
    }

    fn server(flags: u8, seq: u32, ack: u32, len: u16) -> Segment {
        Segment {
            from_client: false,
            ..client(flags, seq, ack, len)
        }
    }

    #[test]
    fn syn_sent_synack_direction_and_ack() {
        let c = syn_sent();
        let sa = SYN | ACK;
        assert_eq!(
            decide(&c, &client(sa, 7, ISN_S + 1, 0)),
            E::SynAckInWrongDirection.bit()
        );
        assert_eq!(decide(&c, &server(sa, ISN_S, ISN_C + 1, 0)), 0);
        assert_eq!(
            decide(&c, &server(sa, ISN_S, ISN_C + 2, 0)),
            E::SynAckWithWrongAck.bit()
        );
        assert_eq!(
            decide(&c, &server(sa, ISN_S, ISN_C, 0)),
            E::SynAckWithWrongAck.bit()
        );
        // A SYN-ACK with RST or FIN too is still the handshake's.
        assert_eq!(
            decide(&c, &server(sa | RST, ISN_S, 9, 0)),
            E::SynAckWithWrongAck.bit()
        );
        // Near misses: not a SYN-ACK.
        assert_eq!(decide(&c, &client(SYN, ISN_C + 5, 0, 0)), 0);
        assert_eq!(decide(&c, &server(ACK, ISN_S, 9, 0)), 0);
        assert_eq!(decide(&c, &server(SYN, ISN_S, 0, 0)), 0);
    }

    #[test]
    fn syn_sent_fast_open() {
        // The SYN carried 8 bytes and the Fast Open option.
        let mut c = syn_sent();
        c.flags |= F_TFO;
        c.dirs[C2S].next += 8;
        c.dirs[C2S].delivered = 8;
        let sa = SYN | ACK;
        assert_eq!(
            decide(&c, &server(sa, ISN_S, ISN_C + 1, 0)),
            E::SynAckTfoDataIgnored.bit()
        );
        assert_eq!(decide(&c, &server(sa, ISN_S, ISN_C + 9, 0)), 0);
        assert_eq!(
            decide(&c, &server(sa, ISN_S, ISN_C + 5, 0)),
            E::SynAckWithWrongAck.bit()
        );
        // Data without the option: Suricata's stream has only the SYN.
        c.flags &= !F_TFO;
        assert_eq!(decide(&c, &server(sa, ISN_S, ISN_C + 1, 0)), 0);
        assert_eq!(
            decide(&c, &server(sa, ISN_S, ISN_C + 9, 0)),
            E::SynAckWithWrongAck.bit()
        );
        // The option without data: only the SYN to acknowledge.
        let mut c = syn_sent();
        c.flags |= F_TFO;
        assert_eq!(decide(&c, &server(sa, ISN_S, ISN_C + 1, 0)), 0);
    }

    #[test]
    fn syn_recv_syns_and_synacks() {
        let c = syn_recv();
        let sa = SYN | ACK;
        assert_eq!(
            decide(&c, &client(sa, ISN_C, ISN_S + 1, 0)),
            E::SynAckToServerOnSynRecv.bit()
        );
        assert_eq!(decide(&c, &server(sa, ISN_S, ISN_C + 1, 0)), 0);
        assert_eq!(
            decide(&c, &server(sa, ISN_S, ISN_C + 3, 0)),
            E::SynAckResendWithDifferentAck.bit()
        );
        // Another ISN, same acknowledgement: queued by Suricata, no event.
        assert_eq!(decide(&c, &server(sa, ISN_S + 9, ISN_C + 1, 0)), 0);
        assert_eq!(
            decide(&c, &server(SYN, 77, 0, 0)),
            E::SynToClientOnSynRecv.bit()
        );
        assert_eq!(decide(&c, &client(SYN, ISN_C, 0, 0)), 0);
        assert_eq!(
            decide(&c, &client(SYN, ISN_C + 1, 0, 0)),
            E::SynResendDiffSeqOnSynRecv.bit()
        );
        // Near misses: RST and FIN go first, data is checked as a
        // retransmission first, Fast Open sessions may be reused.
        assert_eq!(decide(&c, &client(sa | RST, ISN_C, 1, 0)), 0);
        assert_eq!(decide(&c, &client(SYN | FIN, ISN_C + 1, 0, 0)), 0);
        assert_eq!(decide(&c, &client(SYN, ISN_C + 1, 0, 4)), 0);
        let mut t = c;
        t.flags |= F_TFO;
        assert_eq!(decide(&t, &client(SYN, ISN_C + 1, 0, 0)), 0);
        assert_eq!(decide(&t, &server(sa, ISN_S, ISN_C + 3, 0)), 0);
        assert_eq!(
            decide(&t, &client(sa, ISN_C, 1, 0)),
            E::SynAckToServerOnSynRecv.bit()
        );
    }

    #[test]
    fn syn_recv_acks() {
        let c = syn_recv();
        // The client's: right sequence number, wrong acknowledgement.
        assert_eq!(
            decide(&c, &client(ACK, ISN_C + 1, ISN_S + 5, 3)),
            E::RightSeqWrongAckEvasion.bit()
        );
        assert_eq!(decide(&c, &client(ACK, ISN_C + 1, ISN_S + 1, 3)), 0);
        // Wrong both, or before the right sequence number.
        assert_eq!(
            decide(&c, &client(ACK, ISN_C + 9, ISN_S + 5, 3)),
            E::WrongSeqWrongAck.bit()
        );
        assert_eq!(
            decide(&c, &client(ACK, ISN_C - 5, ISN_S + 1, 0)),
            E::WrongSeqWrongAck.bit()
        );
        // Beyond it acknowledging the SYN-ACK: lost segments (within the
        // window Suricata checks).
        assert_eq!(decide(&c, &client(ACK, ISN_C + 9, ISN_S + 1, 3)), 0);
        // The server's: an ACK in the wrong direction, or data right after
        // the SYN-ACK.
        assert_eq!(
            decide(&c, &server(ACK, ISN_S + 1, ISN_C + 1, 0)),
            E::AckInWrongDir.bit()
        );
        assert_eq!(
            decide(&c, &server(ACK | 8, ISN_S + 1, ISN_C + 1, 5)),
            E::AckDataInject.bit()
        );
        assert_eq!(
            decide(&c, &server(ACK, ISN_S + 1, ISN_C + 2, 5)),
            E::AckInWrongDir.bit()
        );
        // Near misses: a keep-alive, a retransmission before the stream,
        // no ACK flag, Fast Open, a FIN.
        assert_eq!(decide(&c, &server(ACK, ISN_S, ISN_C + 1, 0)), 0);
        assert_eq!(decide(&c, &client(ACK, ISN_C, ISN_S + 1, 1)), 0);
        assert_eq!(decide(&c, &server(ACK, ISN_S - 10, ISN_C + 1, 5)), 0);
        assert_eq!(decide(&c, &server(8, ISN_S + 1, 0, 5)), 0);
        assert_eq!(decide(&c, &server(ACK | FIN, ISN_S + 1, ISN_C + 1, 0)), 0);
        let mut t = c;
        t.flags |= F_TFO;
        assert_eq!(decide(&t, &server(ACK, ISN_S + 1, ISN_C + 1, 0)), 0);
        assert_eq!(decide(&t, &client(ACK, ISN_C + 1, ISN_S + 5, 3)), 0);
    }

    #[test]
    fn established_syns() {
        let c = est();
        assert_eq!(
            decide(&c, &client(SYN | ACK, ISN_C, 1, 0)),
            E::EstSynAckToServer.bit()
        );
        assert_eq!(decide(&c, &server(SYN, 5, 0, 0)), E::EstSynToClient.bit());
        assert_eq!(decide(&c, &client(SYN, ISN_C, 0, 0)), E::EstSynResend.bit());
        assert_eq!(
            decide(&c, &client(SYN, ISN_C + 31, 0, 0)),
            E::EstSynResendDiffSeq.bit()
        );
        // Near misses: the server's SYN-ACK resent, an ACK, data, FIN.
        assert_eq!(decide(&c, &server(SYN | ACK, ISN_S, ISN_C + 1, 0)), 0);
        assert_eq!(decide(&c, &server(ACK, ISN_S + 1, ISN_C + 1, 0)), 0);
        assert_eq!(decide(&c, &client(SYN, ISN_C, 0, 3)), 0);
        assert_eq!(decide(&c, &client(SYN | FIN, ISN_C, 0, 0)), 0);
    }

    #[test]
    fn states_suricata_follows_otherwise_raise_nothing() {
        let syn = client(SYN, ISN_C, 0, 0);
        for f in [F_MIDSTREAM, F_RST, F_FIN_C, F_FIN_S] {
            let mut c = est();
            c.flags |= f;
            assert_eq!(decide(&c, &syn), 0, "flag {f}");
        }
        let mut c = est();
        c.synced |= S_ODD;
        assert_eq!(decide(&c, &syn), 0);
        let mut c = syn_sent();
        c.synced |= S_ODD;
        assert_eq!(decide(&c, &client(SYN | ACK, 1, 1, 0)), 0);
    }

    #[test]
    fn packets_without_a_record() {
        assert_eq!(no_session(RST, 0, false), E::RstButNoSession.bit());
        assert_eq!(no_session(RST | FIN, 5, true), E::RstButNoSession.bit());
        assert_eq!(no_session(FIN | ACK, 0, false), E::FinButNoSession.bit());
        assert_eq!(no_session(FIN | ACK, 9, false), E::FinButNoSession.bit());
        assert_eq!(no_session(FIN | ACK, 0, true), E::FinButNoSession.bit());
        // Mid-stream pickups start on a FIN with data.
        assert_eq!(no_session(FIN | ACK, 9, true), 0);
        assert_eq!(no_session(ACK, 9, false), 0);
        assert_eq!(no_session(SYN, 0, false), 0);
    }

    #[test]
    fn names_parse_and_unsupported_ones_say_why() {
        for (n, e) in NAMES {
            assert_eq!(StreamEvent::parse(n), Ok(*e));
            assert!(unsupported(n).is_none(), "{n}");
        }
        // Distinct bits.
        let all = NAMES.iter().fold(0u32, |a, (_, e)| {
            assert_eq!(a & e.bit(), 0);
            a | e.bit()
        });
        assert_eq!(all.count_ones() as usize, NAMES.len());
        assert!(StreamEvent::parse("est_invalid_ack").unwrap_err().is_some());
        assert!(StreamEvent::parse("reassembly_overlap_different_data")
            .unwrap_err()
            .is_some());
        assert_eq!(StreamEvent::parse("no_such_event"), Err(None));
    }

    #[test]
    fn fast_open_option_is_found_as_suricata_finds_it() {
        assert!(has_tfo(&[2, 4, 5, 0xb4, 34, 10, 1, 2, 3, 4, 5, 6, 7, 8]));
        assert!(has_tfo(&[1, 1, 34, 2]));
        assert!(has_tfo(&[254, 6, 0xf9, 0x89, 0, 0]));
        assert!(!has_tfo(&[254, 6, 0xf9, 0x88, 0, 0]));
        assert!(!has_tfo(&[34, 4, 1, 2]));
        assert!(!has_tfo(&[34, 20, 1, 2]));
        assert!(!has_tfo(&[0, 34, 2]));
        assert!(!has_tfo(&[8, 10, 0, 0, 0, 1, 0, 0, 0, 0]));
        assert!(!has_tfo(&[34]));
    }
}
