//! Coalescing consecutive TCP segments into super-frames on their way to a VM
//! (software GRO), sans-IO.
//!
//! Every frame the agent writes to a VM's link costs a socket buffer, a trip
//! through the link and a trip through the VM's TCP stack, which then answers
//! with ACKs that cost the same on the way back. A bulk transfer delivers runs of
//! segments of one flow, in order, in the same batch; the kernel's GRO would
//! merge such a run into one buffer at the VM's NIC. This does the same before
//! the link: the run leaves as one frame carrying a `virtio_net_hdr` (TCPv4
//! GSO, partial checksum), which crosses a link with TSO whole and is taken by
//! the VM's stack like a GRO'd buffer.
//!
//! The rules follow Linux's `tcp_gro_receive`: same addresses, ports, TOS, TTL
//! and DF, IPv4 without options or fragmentation, identical TCP header (length,
//! options, ACK number, window) except the sequence number, flags ACK or
//! ACK|PSH only, sequence numbers contiguous, every segment but the last the
//! size of the first, a PSH or a short segment ends the run. Like GRO, each
//! segment's TCP checksum is verified before it is merged (the super-frame's
//! checksum is left partial, which the VM's stack trusts); a segment that fails
//! is sent alone for the VM to drop.

use sluice_netio::{TxFrame, VnetHdr};
use sluice_wire::checksum::{fold, sum};

use crate::dataplane::{Frames, Out, TxPlan};

/// Most segments merged into one super-frame.
pub const MAX_SEGS: usize = 64;
/// Largest IPv4 datagram a super-frame may carry.
const MAX_IP_LEN: usize = 65_535;
const ETHERTYPE_IPV4: u16 = 0x0800;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
/// Length of the rewritten MAC header a VM delivery starts with.
const MAC_HEAD: usize = 12;
/// Offset of the IPv4 header in a VM delivery's body (after the EtherType).
const IP_AT: usize = 2;

/// One piece of an outgoing frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Bytes of the coalescer's own header arena.
    Arena(u32, u32),
    /// The plan's header bytes of out `i`.
    Head(u32),
    /// Bytes `from..to` of the body of out `i`.
    Body(u32, u32, u32),
}

/// What one batch of deliveries to a VM port became.
#[derive(Debug, Default)]
pub struct Coalescer {
    arena: Vec<u8>,
    parts: Vec<Part>,
    /// Payload ranges (within their bodies) of the run being built.
    payloads: Vec<(u32, u32)>,
    /// Frames to send, in order (their `parts` index [`Coalescer::parts`]).
    pub frames: Vec<TxFrame>,
    /// How many of the outs each frame carries.
    pub outs_per_frame: Vec<u32>,
    /// Segments merged into super-frames so far (beyond the first of each).
    pub merged: u64,
    /// Super-frames built so far.
    pub super_frames: u64,
    /// Segments not merged because their checksum was wrong.
    pub bad_csum: u64,
}

/// A TCP/IPv4 segment as the coalescer sees it: offsets within the out's body.
#[derive(Debug, Clone, Copy)]
struct Seg {
    saddr: [u8; 4],
    daddr: [u8; 4],
    tos: u8,
    ttl: u8,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    win: u16,
    flags: u8,
    /// TCP header length.
    thl: usize,
    /// Body offset where the payload starts and its length.
    payload_at: usize,
    payload_len: usize,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The segment in a VM delivery's body (EtherType onwards), if it is one the
/// coalescer may merge.
fn seg_of(body: &[u8]) -> Option<Seg> {
    if body.len() < IP_AT + 40 || be16(body, 0) != ETHERTYPE_IPV4 {
        return None;
    }
    let ip = &body[IP_AT..];
    // IPv4 without options; DF only (no MF, offset 0); TCP.
    if ip[0] != 0x45 || be16(ip, 6) != 0x4000 || ip[9] != 6 {
        return None;
    }
    let total = be16(ip, 2) as usize;
    if total > ip.len() || total < 40 {
        return None;
    }
    let tcp = &ip[20..total];
    let thl = ((tcp[12] >> 4) as usize) * 4;
    if thl < 20 || thl > tcp.len() {
        return None;
    }
    let flags = tcp[13];
    if flags & !TCP_PSH != TCP_ACK {
        return None;
    }
    let payload_len = tcp.len() - thl;
    if payload_len == 0 {
        return None;
    }
    Some(Seg {
        saddr: [ip[12], ip[13], ip[14], ip[15]],
        daddr: [ip[16], ip[17], ip[18], ip[19]],
        tos: ip[1],
        ttl: ip[8],
        sport: be16(tcp, 0),
        dport: be16(tcp, 2),
        seq: be32(tcp, 4),
        ack: be32(tcp, 8),
        win: be16(tcp, 14),
        flags,
        thl,
        payload_at: IP_AT + 20 + thl,
        payload_len,
    })
}

/// Whether segment `b` (body `bb`) may follow `last` in a run that started with
/// `first` (body `fb`).
fn may_follow(first: &Seg, fb: &[u8], last: &Seg, b: &Seg, bb: &[u8]) -> bool {
    let same = b.saddr == first.saddr
        && b.daddr == first.daddr
        && b.sport == first.sport
        && b.dport == first.dport
        && b.tos == first.tos
        && b.ttl == first.ttl
        && b.ack == first.ack
        && b.win == first.win
        && b.thl == first.thl;
    same
        && last.flags & TCP_PSH == 0
        && last.payload_len == first.payload_len
        && b.payload_len <= first.payload_len
        && b.seq == last.seq.wrapping_add(last.payload_len as u32)
        // Options (timestamps) identical, as GRO demands.
        && fb[IP_AT + 40..first.payload_at] == bb[IP_AT + 40..b.payload_at]
}

/// One's-complement sum of `data` added to `acc`, the same value as
/// [`sluice_wire::checksum::sum`] but several times faster: the sum does not
/// depend on byte order (RFC 1071 §2(B)), so native 32-bit words are added into
/// independent 64-bit lanes (which the compiler vectorises, and which cannot
/// overflow below 2^32 words) and the folded result is swapped once.
fn fast_sum(acc: u32, data: &[u8]) -> u32 {
    const LANES: usize = 8;
    let mut lanes = [0u64; LANES];
    let mut blocks = data.chunks_exact(4 * LANES);
    for b in &mut blocks {
        for (k, lane) in lanes.iter_mut().enumerate() {
            let w = [b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]];
            *lane += u32::from_ne_bytes(w) as u64;
        }
    }
    let mut s: u64 = lanes.iter().fold(0u64, |a, &l| {
        let (r, c) = a.overflowing_add(l);
        r + c as u64
    });
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    let mut v = s as u32;
    v = (v & 0xffff) + (v >> 16);
    v = (v & 0xffff) + (v >> 16);
    let v = if cfg!(target_endian = "little") {
        (v as u16).swap_bytes()
    } else {
        v as u16
    };
    // Folding `acc` first keeps the addition from overflowing; the tail starts
    // a multiple of 32 bytes in, so at an even offset.
    let acc = (acc & 0xffff) + (acc >> 16) + v as u32;
    sum(acc, blocks.remainder())
}

/// The pseudo-header sum of a TCP/IPv4 segment of `len` bytes.
fn pseudo(s: &Seg, len: usize) -> u32 {
    let mut acc = sum(0, &s.saddr);
    acc = sum(acc, &s.daddr);
    acc + 6 + len as u32
}

/// Whether the TCP checksum of segment `s` in `body` is right.
fn csum_ok(s: &Seg, body: &[u8]) -> bool {
    let tcp = &body[IP_AT + 20..s.payload_at + s.payload_len];
    let acc = fast_sum(pseudo(s, tcp.len()), tcp);
    fold(acc) == 0
}

impl Coalescer {
    /// An empty coalescer.
    pub fn new() -> Coalescer {
        Coalescer::default()
    }

    /// The parts the frames name.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Bytes of part `p`, given the plan and frames the outs refer to.
    pub fn part<'a, F: Frames + ?Sized>(
        &'a self,
        p: Part,
        plan: &'a TxPlan,
        frames: &'a F,
        outs: &[Out],
    ) -> &'a [u8] {
        match p {
            Part::Arena(a, b) => &self.arena[a as usize..b as usize],
            Part::Head(i) => plan.head(&outs[i as usize]),
            Part::Body(i, from, to) => {
                let b = plan.body(frames, &outs[i as usize]);
                // Plain frames name the whole body as 0..u32::MAX.
                &b[(from as usize).min(b.len())..(to as usize).min(b.len())]
            }
        }
    }

    /// Turns `outs` (deliveries to one VM port, in order) into frames: runs of
    /// mergeable segments become super-frames, everything else goes as it is.
    pub fn build<F: Frames + ?Sized>(&mut self, plan: &TxPlan, frames: &F, outs: &[Out]) {
        self.arena.clear();
        self.parts.clear();
        self.frames.clear();
        self.outs_per_frame.clear();
        let mut i = 0;
        while i < outs.len() {
            let n = self.run(plan, frames, outs, i);
            if n <= 1 {
                self.plain(i);
                i += 1;
            } else {
                i += n;
            }
        }
    }

    /// Sends out `i` as it is.
    fn plain(&mut self, i: usize) {
        let p0 = self.parts.len();
        self.parts.push(Part::Head(i as u32));
        self.parts.push(Part::Body(i as u32, 0, u32::MAX));
        self.frames.push(TxFrame {
            parts: p0..p0 + 2,
            vnet: VnetHdr::default(),
        });
        self.outs_per_frame.push(1);
    }

    /// Tries to build a super-frame from the outs starting at `i`; returns how
    /// many it took (0 or 1: none was built).
    fn run<F: Frames + ?Sized>(
        &mut self,
        plan: &TxPlan,
        frames: &F,
        outs: &[Out],
        i: usize,
    ) -> usize {
        let o = &outs[i];
        if plan.head(o).len() != MAC_HEAD || i + 1 >= outs.len() {
            return 0;
        }
        let fb = plan.body(frames, o);
        let Some(first) = seg_of(fb) else {
            return 0;
        };
        let mut last = first;
        let mut ip_len = 20 + first.thl + first.payload_len;
        self.payloads.clear();
        self.payloads.push((
            first.payload_at as u32,
            (first.payload_at + first.payload_len) as u32,
        ));
        let mut j = i + 1;
        while j < outs.len() && j - i < MAX_SEGS {
            let q = &outs[j];
            if q.dest != o.dest || plan.head(q) != plan.head(o) {
                break;
            }
            let bb = plan.body(frames, q);
            let Some(b) = seg_of(bb) else {
                break;
            };
            if !may_follow(&first, fb, &last, &b, bb) || ip_len + b.payload_len > MAX_IP_LEN {
                break;
            }
            // Checksums are verified only for segments about to be merged (a
            // frame sent alone is verified by the VM).
            if j == i + 1 && !csum_ok(&first, fb) {
                self.bad_csum += 1;
                return 0;
            }
            if !csum_ok(&b, bb) {
                self.bad_csum += 1;
                break;
            }
            ip_len += b.payload_len;
            self.payloads
                .push((b.payload_at as u32, (b.payload_at + b.payload_len) as u32));
            last = b;
            j += 1;
            if b.flags & TCP_PSH != 0 || b.payload_len < first.payload_len {
                break;
            }
        }
        let n = j - i;
        if n < 2 {
            return 0;
        }
        // The super-frame's headers: the first segment's, with the total length,
        // a fresh IP checksum, the last segment's PSH, and the pseudo-header sum
        // as the partial TCP checksum.
        let a0 = self.arena.len();
        self.arena.extend_from_slice(plan.head(o));
        self.arena.extend_from_slice(&fb[..first.payload_at]);
        let ip_at = a0 + MAC_HEAD + IP_AT;
        self.arena[ip_at + 2..ip_at + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        self.arena[ip_at + 10..ip_at + 12].copy_from_slice(&[0, 0]);
        let ipc = fold(sum(0, &self.arena[ip_at..ip_at + 20]));
        self.arena[ip_at + 10..ip_at + 12].copy_from_slice(&ipc.to_be_bytes());
        let tcp_at = ip_at + 20;
        self.arena[tcp_at + 13] |= last.flags & TCP_PSH;
        let partial = !fold(pseudo(&first, ip_len - 20));
        self.arena[tcp_at + 16..tcp_at + 18].copy_from_slice(&partial.to_be_bytes());
        let p0 = self.parts.len();
        self.parts
            .push(Part::Arena(a0 as u32, self.arena.len() as u32));
        for (k, &(from, to)) in self.payloads.iter().enumerate() {
            self.parts.push(Part::Body((i + k) as u32, from, to));
        }
        let eth_hlen = MAC_HEAD + IP_AT;
        self.frames.push(TxFrame {
            parts: p0..self.parts.len(),
            vnet: VnetHdr {
                flags: VnetHdr::NEEDS_CSUM,
                gso_type: VnetHdr::GSO_TCPV4,
                hdr_len: (eth_hlen + 20 + first.thl) as u16,
                gso_size: first.payload_len as u16,
                csum_start: (eth_hlen + 20) as u16,
                csum_offset: 16,
            },
        });
        self.outs_per_frame.push(n as u32);
        self.super_frames += 1;
        self.merged += (n - 1) as u64;
        n
    }
}

/// Outs carried by the first `frames` frames of a build.
pub fn outs_in(outs_per_frame: &[u32], frames: usize) -> usize {
    outs_per_frame[..frames].iter().map(|&n| n as usize).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::{CounterId, Dest};
    use sluice_wire::build::{tcp_repr, write_frame, Transport};
    use sluice_wire::parse::{parse_frame, L4};
    use sluice_wire::rewrite::verify_all_checksums;
    use sluice_wire::IpAddr;
    use std::net::SocketAddrV4;

    const VM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const ROUTER: [u8; 6] = [2, 0x53, 0x4c, 0, 0, 1];

    /// A TCP/IPv4 frame with DF set, timestamps `ts` (if any), `len` payload bytes
    /// derived from `seq`.
    fn seg_frame(src_port: u16, seq: u32, len: usize, flags: u8, ts: Option<u32>) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|k| (seq as usize + k * 7) as u8).collect();
        let mut t = tcp_repr(src_port, 5201, seq, 77, flags);
        t.options.timestamps = ts.map(|v| (v, 1));
        let mut buf = vec![0u8; 14 + 60 + 60 + len];
        let n = write_frame(
            &mut buf,
            IpAddr::V4([10, 10, 1, 11]),
            IpAddr::V4([10, 10, 2, 11]),
            Transport::Tcp(t),
            &payload,
        )
        .unwrap();
        buf.truncate(n);
        // Set DF and fix the IP checksum, as Linux sends TCP.
        buf[14 + 6] = 0x40;
        buf[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
        let c = fold(sum(0, &buf[14..34]));
        buf[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
        assert!(verify_all_checksums(&buf));
        buf
    }

    /// A plan delivering every frame to VM port 1 (as the data plane's `emit` does:
    /// a 12-byte MAC head, the body from the EtherType on).
    /// Received frames as the dataplane's `Frames` (no sources).
    type Received = Vec<(Vec<u8>, Option<SocketAddrV4>)>;
    /// A case: what it shows, the frames, the outs per frame expected.
    type Case = (&'static str, Vec<Vec<u8>>, Vec<u32>);

    fn plan_for(frames: &[Vec<u8>]) -> (TxPlan, Received) {
        let mut plan = TxPlan::new();
        for (i, f) in frames.iter().enumerate() {
            let s = plan.arena.len() as u32;
            plan.arena.extend_from_slice(&VM_MAC);
            plan.arena.extend_from_slice(&ROUTER);
            plan.outs.push(Out {
                dest: Dest::Vm(1),
                counter: CounterId::Port(1),
                head: (s, s + 12),
                frame: i as u32,
                body: ((f.len() as u32).min(12), f.len() as u32),
            });
        }
        (plan, frames.iter().map(|f| (f.clone(), None)).collect())
    }

    /// The frames the coalescer produced, as bytes, with their headers.
    fn built(frames: &[Vec<u8>]) -> (Coalescer, Vec<(Vec<u8>, VnetHdr, u32)>) {
        let (plan, rx) = plan_for(frames);
        let mut c = Coalescer::new();
        c.build(&plan, &rx, &plan.outs);
        let out = c
            .frames
            .iter()
            .zip(&c.outs_per_frame)
            .map(|(f, &n)| {
                let mut b = Vec::new();
                for &p in &c.parts()[f.parts.clone()] {
                    b.extend_from_slice(c.part(p, &plan, &rx, &plan.outs));
                }
                (b, f.vnet, n)
            })
            .collect();
        (c, out)
    }

    /// What the VM's stack sees after the kernel finished the partial checksum.
    fn finished(mut f: Vec<u8>, v: &VnetHdr) -> Vec<u8> {
        assert_eq!(v.flags, VnetHdr::NEEDS_CSUM);
        let start = v.csum_start as usize;
        let at = start + v.csum_offset as usize;
        // The field holds the pseudo-header sum: summing from csum_start over the
        // segment (field included) and complementing gives the checksum.
        let c = fold(sum(0, &f[start..]));
        f[at..at + 2].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// `f` is `orig` as delivered: the VM's MAC and the router's, then the rest
    /// of the frame untouched.
    fn assert_delivered(f: &[u8], orig: &[u8]) {
        let mut want = [VM_MAC, ROUTER].concat();
        want.extend_from_slice(orig.get(12..).unwrap_or(&[]));
        assert_eq!(f, &want[..]);
    }

    fn payload(f: &[u8]) -> Vec<u8> {
        let m = parse_frame(f).unwrap();
        assert_eq!(m.l4, L4::Tcp);
        m.payload(f).to_vec()
    }

    #[test]
    fn a_run_becomes_one_super_frame_the_vm_can_take() {
        let mss = 1448;
        let mut frames: Vec<Vec<u8>> = (0..10)
            .map(|i| seg_frame(40000, 1000 + i * mss as u32, mss, 0x10, Some(5)))
            .collect();
        // The last one short and with PSH, as a write's tail.
        frames.push(seg_frame(40000, 1000 + 10 * mss as u32, 300, 0x18, Some(5)));
        let (c, out) = built(&frames);
        assert_eq!(out.len(), 1, "one super-frame");
        let (f, v, n) = out.into_iter().next().unwrap();
        assert_eq!(n, 11);
        assert_eq!(c.merged, 10);
        assert_eq!(v.gso_type, VnetHdr::GSO_TCPV4);
        assert_eq!(v.gso_size as usize, mss);
        assert_eq!(v.csum_start, 34);
        assert_eq!(v.csum_offset, 16);
        // 20 bytes of TCP header + 12 of timestamps.
        assert_eq!(v.hdr_len, 14 + 20 + 32);
        assert_eq!(&f[..6], &VM_MAC);
        let f = finished(f, &v);
        assert!(
            verify_all_checksums(&f),
            "IP and finished TCP checksums hold"
        );
        let m = parse_frame(&f).unwrap();
        assert_eq!(m.tcp_seq, 1000);
        assert!(m.tcp_has(0x08), "PSH of the last segment is kept");
        let want: Vec<u8> = frames.iter().flat_map(|f| payload(f)).collect();
        assert_eq!(payload(&f), want, "payloads in order");
    }

    #[test]
    fn runs_end_where_gro_would_end_them() {
        let p = 1000u32;
        let cases: Vec<Case> = vec![
            (
                "sequence gap",
                vec![
                    seg_frame(1, 0, 1000, 0x10, None),
                    seg_frame(1, p, 1000, 0x10, None),
                    seg_frame(1, 3 * p, 1000, 0x10, None),
                ],
                vec![2, 1],
            ),
            (
                "another flow in between",
                vec![
                    seg_frame(1, 0, 1000, 0x10, None),
                    seg_frame(2, p, 1000, 0x10, None),
                    seg_frame(1, p, 1000, 0x10, None),
                ],
                vec![1, 1, 1],
            ),
            (
                "PSH ends a run",
                vec![
                    seg_frame(1, 0, 1000, 0x10, None),
                    seg_frame(1, p, 1000, 0x18, None),
                    seg_frame(1, 2 * p, 1000, 0x10, None),
                    seg_frame(1, 3 * p, 1000, 0x10, None),
                ],
                vec![2, 2],
            ),
            (
                "a short segment ends a run",
                vec![
                    seg_frame(1, 0, 1000, 0x10, None),
                    seg_frame(1, p, 500, 0x10, None),
                    seg_frame(1, p + 500, 1000, 0x10, None),
                ],
                vec![2, 1],
            ),
            (
                "a bigger segment is not merged",
                vec![
                    seg_frame(1, 0, 500, 0x10, None),
                    seg_frame(1, 500, 1000, 0x10, None),
                ],
                vec![1, 1],
            ),
            (
                "SYN, FIN and pure ACKs stay alone",
                vec![
                    seg_frame(1, 0, 0, 0x02, None),
                    seg_frame(1, 1, 1000, 0x11, None),
                    seg_frame(1, 1001, 0, 0x10, None),
                    seg_frame(1, 1001, 0, 0x10, None),
                ],
                vec![1, 1, 1, 1],
            ),
            (
                "different timestamps",
                vec![
                    seg_frame(1, 0, 1000, 0x10, Some(1)),
                    seg_frame(1, p, 1000, 0x10, Some(1)),
                    seg_frame(1, 2 * p, 1000, 0x10, Some(2)),
                ],
                vec![2, 1],
            ),
        ];
        for (what, frames, want) in cases {
            let (_, out) = built(&frames);
            let got: Vec<u32> = out.iter().map(|(_, _, n)| *n).collect();
            assert_eq!(got, want, "{what}");
            // Frames sent alone are the original frames, byte for byte.
            let mut k = 0;
            for (f, v, n) in &out {
                if *n == 1 {
                    assert_eq!(*v, VnetHdr::default(), "{what}");
                    assert_delivered(f, &frames[k]);
                }
                k += *n as usize;
            }
        }
    }

    #[test]
    fn bad_checksums_are_not_merged_and_long_runs_are_split() {
        let mut frames: Vec<Vec<u8>> = (0..4)
            .map(|i| seg_frame(1, i * 100, 100, 0x10, None))
            .collect();
        let last = frames[2].len() - 1;
        frames[2][last] ^= 0xff;
        let (c, out) = built(&frames);
        let got: Vec<u32> = out.iter().map(|(_, _, n)| *n).collect();
        assert_eq!(got, vec![2, 1, 1]);
        assert_delivered(&out[1].0, &frames[2]);
        assert!(c.bad_csum >= 1);

        let frames: Vec<Vec<u8>> = (0..150)
            .map(|i| seg_frame(1, i * 100, 100, 0x10, None))
            .collect();
        let (_, out) = built(&frames);
        let got: Vec<u32> = out.iter().map(|(_, _, n)| *n).collect();
        assert_eq!(got, vec![64, 64, 22]);
        let all: Vec<u8> = out
            .into_iter()
            .flat_map(|(f, v, _)| payload(&finished(f, &v)))
            .collect();
        let want: Vec<u8> = frames.iter().flat_map(|f| payload(f)).collect();
        assert_eq!(all, want);
    }

    #[test]
    fn anything_else_goes_as_it_is() {
        let udp = sluice_wire::build::udp_v4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, &[7; 100]);
        let frames = vec![udp.clone(), udp.clone(), vec![0u8; 20], vec![0u8; 3]];
        let (_, out) = built(&frames);
        assert_eq!(out.len(), 4);
        for ((f, v, n), orig) in out.iter().zip(&frames) {
            assert_eq!((*n, *v), (1, VnetHdr::default()));
            assert_delivered(f, orig);
        }
    }

    #[test]
    fn fast_sum_matches_the_reference() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for len in [0, 1, 2, 7, 8, 9, 31, 32, 33, 63, 64, 1448, 4999] {
            for acc in [0, 1, 0xffff, 0x1234_5678, u32::MAX] {
                assert_eq!(
                    fold(fast_sum(acc, &data[..len])),
                    fold(sum(acc, &data[..len])),
                    "len {len} acc {acc:#x}"
                );
            }
        }
    }
}
