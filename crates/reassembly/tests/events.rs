//! Stream events decided through the reassembler: what a packet raises on
//! the record as it found it, only when a consumer asks.

use sluice_packet::{Batch, PacketPool};
use sluice_reassembly::events::StreamEvent as E;
use sluice_reassembly::{Config, Reassembler, Streams};
use sluice_state::{LocalStore, Namespace};
use sluice_wire::build::tcp_v4;
use sluice_wire::parse::parse_frame;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [10, 0, 0, 2];
const ISN_C: u32 = 100;
const ISN_S: u32 = 5000;

fn c2s(seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp_v4(C, S, 1000, 80, seq, ack, flags, payload)
}

fn s2c(seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp_v4(S, C, 80, 1000, seq, ack, flags, payload)
}

/// `frame` (Ethernet, IPv4 without options, TCP without options) with TCP
/// options `opts` (a multiple of 4 bytes) inserted, checksums recomputed.
fn with_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let at = 14 + 20 + 20;
    let mut f = frame[..at].to_vec();
    f.extend_from_slice(opts);
    f.extend_from_slice(&frame[at..]);
    let total = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f[14 + 20 + 12] = (((20 + opts.len()) / 4) as u8) << 4;
    f[24..26].fill(0);
    let c = sluice_wire::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    sluice_wire::rewrite::fill_l4_checksum(&mut f);
    f
}

/// A Fast Open option with an 8-byte cookie, padded.
const TFO: [u8; 12] = [34, 10, 1, 2, 3, 4, 5, 6, 7, 8, 1, 1];

/// Runs each frame as its own batch; the events each raised.
fn run(want: bool, frames: &[Vec<u8>]) -> Vec<u32> {
    let mut st = LocalStore::new();
    let mut r = Reassembler::new(Namespace(7), Config::default());
    let mut pool = PacketPool::new(16);
    let mut streams = Streams {
        want_events: want,
        ..Streams::default()
    };
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let mut b = Batch::with_capacity(1);
        assert!(b.push_frame(&mut pool, f, 1_000_000 * (i as u64 + 1), 0));
        for p in &mut b.pkts {
            p.meta = parse_frame(p.data()).unwrap();
        }
        r.process(&mut b, &mut st, &mut streams, 3).unwrap();
        out.push(streams.events(0));
        b.recycle(&mut pool);
    }
    out
}

#[test]
fn a_synack_with_a_wrong_ack_raises_its_event_and_does_not_synchronise_the_server() {
    let frames = [
        c2s(ISN_C, 0, SYN, &[]),
        // Forged: acknowledges nothing the client sent.
        s2c(9999, ISN_C + 7, SYN | ACK, &[]),
        s2c(ISN_S, ISN_C + 1, SYN | ACK, &[]),
        c2s(ISN_C + 1, ISN_S + 1, ACK, &[]),
        c2s(ISN_C, 0, SYN, &[]),
    ];
    let got = run(true, &frames);
    assert_eq!(
        got,
        [0, E::SynAckWithWrongAck.bit(), 0, 0, E::EstSynResend.bit()]
    );
    // The real SYN-ACK synchronised the server: its first byte is at
    // offset 0.
    let mut st = LocalStore::new();
    let mut r = Reassembler::new(Namespace(7), Config::default());
    let mut pool = PacketPool::new(16);
    let mut streams = Streams::default();
    let mut b = Batch::with_capacity(8);
    let more = [s2c(ISN_S + 1, ISN_C + 1, ACK | PSH, b"hello")];
    for (i, f) in frames[..4].iter().chain(&more).enumerate() {
        assert!(b.push_frame(&mut pool, f, 1_000 + i as u64, 0));
    }
    for p in &mut b.pkts {
        p.meta = parse_frame(p.data()).unwrap();
    }
    r.process(&mut b, &mut st, &mut streams, 3).unwrap();
    let (c, own, _) = streams.bytes(4, &b.pkts[4]).unwrap();
    assert_eq!((c.stream_offset, own), (0, &b"hello"[..]));
    assert!(streams.events.is_empty(), "not asked for");
}

#[test]
fn events_are_decided_only_when_asked() {
    let frames = [c2s(ISN_C, 0, SYN, &[]), c2s(7, ISN_C + 1, SYN | ACK, &[])];
    assert_eq!(run(true, &frames), [0, E::SynAckInWrongDirection.bit()]);
    assert_eq!(run(false, &frames), [0, 0]);
    // Without a record: a RST, a FIN.
    let none = [c2s(9, 0, RST, &[]), c2s(9, 1, FIN | ACK, &[])];
    assert_eq!(
        run(true, &none),
        [E::RstButNoSession.bit(), E::FinButNoSession.bit()]
    );
    assert_eq!(run(false, &none), [0, 0]);
}

#[test]
fn syn_recv_and_established_events() {
    let hs = [
        c2s(ISN_C, 0, SYN, &[]),
        s2c(ISN_S, ISN_C + 1, SYN | ACK, &[]),
    ];
    let case = |more: Vec<u8>| {
        let mut f = hs.to_vec();
        f.push(more);
        *run(true, &f).last().unwrap()
    };
    assert_eq!(
        case(s2c(ISN_S + 1, ISN_C + 1, ACK, &[])),
        E::AckInWrongDir.bit()
    );
    assert_eq!(
        case(s2c(ISN_S + 1, ISN_C + 1, ACK | PSH, b"inject")),
        E::AckDataInject.bit()
    );
    assert_eq!(
        case(c2s(ISN_C + 1, ISN_S + 9, ACK | PSH, b"x")),
        E::RightSeqWrongAckEvasion.bit()
    );
    assert_eq!(case(c2s(ISN_C + 1, ISN_S + 1, ACK, &[])), 0);
    assert_eq!(
        case(s2c(ISN_S, ISN_C + 2, SYN | ACK, &[])),
        E::SynAckResendWithDifferentAck.bit()
    );
    assert_eq!(case(s2c(ISN_S, ISN_C + 1, SYN | ACK, &[])), 0);
    assert_eq!(
        case(c2s(ISN_C + 50, 0, SYN, &[])),
        E::SynResendDiffSeqOnSynRecv.bit()
    );
    let mut est = hs.to_vec();
    est.push(c2s(ISN_C + 1, ISN_S + 1, ACK, &[]));
    est.push(s2c(ISN_S + 1, 0, SYN, &[]));
    est.push(c2s(ISN_C + 1, ISN_S + 1, SYN | ACK, &[]));
    assert_eq!(
        run(true, &est)[3..],
        [E::EstSynToClient.bit(), E::EstSynAckToServer.bit()]
    );
}

#[test]
fn a_simultaneous_open_raises_no_events() {
    // The server sends a SYN of its own (a four-way handshake): Suricata
    // follows it otherwise, so none of the events here is decided.
    let frames = [
        c2s(ISN_C, 0, SYN, &[]),
        s2c(ISN_S, 0, SYN, &[]),
        c2s(ISN_C, ISN_S + 1, SYN | ACK, &[]),
        s2c(ISN_S + 1, ISN_C + 1, ACK, &[]),
    ];
    assert_eq!(run(true, &frames), [0, 0, 0, 0]);
}

#[test]
fn fast_open_data_the_synack_ignores() {
    let syn = with_options(&c2s(ISN_C, 0, SYN, b"GET /"), &TFO);
    let ignored = s2c(ISN_S, ISN_C + 1, SYN | ACK, &[]);
    let taken = s2c(ISN_S, ISN_C + 6, SYN | ACK, &[]);
    let wrong = s2c(ISN_S, ISN_C + 3, SYN | ACK, &[]);
    assert_eq!(
        run(true, &[syn.clone(), ignored.clone()]),
        [0, E::SynAckTfoDataIgnored.bit()]
    );
    assert_eq!(run(true, &[syn.clone(), taken.clone()]), [0, 0]);
    assert_eq!(
        run(true, &[syn.clone(), wrong]),
        [0, E::SynAckWithWrongAck.bit()]
    );
    // Without the option Suricata's stream holds the SYN alone.
    let plain = c2s(ISN_C, 0, SYN, b"GET /");
    assert_eq!(run(true, &[plain.clone(), ignored]), [0, 0]);
    assert_eq!(run(true, &[plain, taken]), [0, E::SynAckWithWrongAck.bit()]);
    // A Fast Open session's ACK from the server raises nothing.
    let then = s2c(ISN_S + 1, ISN_C + 6, ACK, &[]);
    let taken = s2c(ISN_S, ISN_C + 6, SYN | ACK, &[]);
    assert_eq!(run(true, &[syn, taken, then]), [0, 0, 0]);
}
