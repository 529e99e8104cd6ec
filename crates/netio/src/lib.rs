//! Batched, non-blocking packet I/O for the data plane.
//!
//! Nothing here makes a system call per packet, and nothing is allocated per
//! packet once the reused arrays have grown to the largest batch seen:
//!
//! - [`PacketSocket`]: raw Ethernet frames on one interface (`AF_PACKET`), with
//!   outgoing frames ignored and offloaded (partial) L4 checksums completed, so
//!   consumers always see valid checksums. Opened with [`PacketOptions::ring`], the
//!   kernel copies received frames into a memory-mapped `TPACKET_V2` ring that is
//!   read in place (no system call at all while frames keep arriving); otherwise
//!   one `recvmmsg(2)` fills a whole [`RxBatch`]. Sends are one `sendmmsg(2)` per
//!   batch, optionally past the qdisc layer (`PACKET_QDISC_BYPASS`).
//! - [`UdpBatchSocket`]: UDP datagrams with their source / destination address,
//!   `recvmmsg`/`sendmmsg`. With [`UdpBatchSocket::enable_gso`], runs of
//!   equal-sized datagrams to one destination leave as one `UDP_SEGMENT`
//!   super-datagram (one trip through the stack, the bridge and the receiver's
//!   stack); with [`UdpBatchSocket::enable_gro`], super-datagrams arrive whole
//!   and are split back into their datagrams in the batch.
//! - [`Poller`]: waits for any of a set of descriptors (`poll(2)`).
//! - [`in_netns`]: runs a closure on a thread that joined a named network namespace;
//!   sockets opened there stay in that namespace while the process itself stays in
//!   the root namespace.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

mod csum;
mod netns;
mod packet;
mod poll;
mod ring;
mod udp;

pub use csum::complete_l4_checksum;
pub use netns::{in_netns, in_netns_opt};
pub use packet::{enable_tso, PacketOptions, PacketSocket, RingInfo};
pub use poll::Poller;
pub use udp::{UdpBatchSocket, GRO_BUF_SIZE};

/// A good receive buffer size: a 9000-byte MTU frame plus its Ethernet header,
/// rounded up.
pub const DEFAULT_BUF_SIZE: usize = 9216;

/// Most messages handed to one `sendmmsg`/`recvmmsg` call (the kernel's
/// `UIO_MAXIOV`); longer batches are split.
const MAX_VLEN: usize = 1024;

/// Control-message room per received message (`tpacket_auxdata` needs 40 bytes).
const CTRL_WORDS: usize = 8;

/// Counters a socket keeps about frames it skipped or fixed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Frames or datagrams longer than the receive buffer (dropped, not delivered).
    pub rx_truncated: u64,
    /// Our own outgoing frames seen by the capture and skipped (packet sockets on
    /// kernels without `PACKET_IGNORE_OUTGOING`).
    pub rx_outgoing: u64,
    /// Frames whose L4 checksum was left to the NIC and completed here.
    pub rx_csum_completed: u64,
    /// Messages the kernel refused individually (too big, no route, ...); they are
    /// skipped by [`PacketSocket::send_batch`] / [`UdpBatchSocket::send_batch`].
    pub tx_errors: u64,
    /// Receive calls that returned at least one frame or datagram.
    pub rx_batches: u64,
    /// Frames or datagrams those calls returned (with `rx_batches`: the batch
    /// size actually achieved).
    pub rx_frames: u64,
    /// Send system calls made (`sendmmsg`), successful or not.
    pub tx_calls: u64,
    /// Messages those calls consumed.
    pub tx_msgs: u64,
    /// UDP super-datagrams sent (`UDP_SEGMENT`), and the datagrams they carried.
    pub tx_gso: u64,
    /// Datagrams carried by `tx_gso` super-datagrams.
    pub tx_gso_segs: u64,
    /// Coalesced UDP datagrams received (`UDP_GRO`), split back here.
    pub rx_gro: u64,
    /// Frames longer than a ring slot, read from the socket's queue instead.
    pub rx_ring_copies: u64,
    /// Frames the kernel dropped because the ring or receive queue was full (as
    /// of the last [`PacketSocket::kernel_drops`] call).
    pub rx_kernel_drops: u64,
}

/// Receive buffers for one batch, reused across calls.
///
/// A batch holds frames of one receive call. They live either in the batch's own
/// buffers (`recvmmsg`) or, for a packet socket with a receive ring, in the ring
/// itself: then the batch holds those ring slots and gives them back to the
/// kernel when it is cleared, refilled or dropped (read in place, never copied).
/// A UDP datagram the kernel coalesced (`UDP_GRO`) is split back into its
/// segments, so one buffer can hold many frames.
pub struct RxBatch {
    buf_size: usize,
    /// Start of `n * buf_size` bytes owned by `_data`; only used through raw
    /// pointers (the kernel's iovecs and the spans) after construction.
    base: *mut u8,
    _data: Vec<u8>,
    /// The frames, in arrival order.
    spans: Vec<Span>,
    raw: RawRx,
    /// The ring the held slots belong to.
    ring: Option<Arc<ring::RingMap>>,
    /// Ring slots this batch's frames occupy, to release.
    held: Vec<u32>,
}

/// One received frame: where it lies (own buffer or ring slot) and its sender.
#[derive(Clone, Copy)]
struct Span {
    ptr: *mut u8,
    len: u32,
    src: Option<SocketAddrV4>,
}

/// The kernel-facing arrays of an [`RxBatch`]; their pointers point into the
/// batch's own heap buffers, which never move once allocated.
struct RawRx {
    iov: Vec<libc::iovec>,
    hdr: Vec<libc::mmsghdr>,
    names: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CTRL_WORDS]>,
}

// SAFETY: the raw pointers point into heap buffers owned by the same RxBatch, or
// into a ring mapping the batch keeps alive through its Arc; they are only
// dereferenced through `&self`/`&mut self` methods or by the kernel during a call
// that holds `&mut RxBatch`.
unsafe impl Send for RxBatch {}

impl std::fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxBatch")
            .field("capacity", &self.capacity())
            .field("buf_size", &self.buf_size)
            .field("len", &self.spans.len())
            .field("ring_slots_held", &self.held.len())
            .finish()
    }
}

impl Drop for RxBatch {
    fn drop(&mut self) {
        self.release_ring();
    }
}

impl RxBatch {
    /// `n` buffers of `buf_size` bytes each (both at least 1): at most `n`
    /// messages per receive call.
    pub fn new(n: usize, buf_size: usize) -> RxBatch {
        let n = n.clamp(1, MAX_VLEN);
        let buf_size = buf_size.max(1);
        // A Vec, not a Box: the pointers taken here stay valid when the batch
        // (and the Vec's pointer to its heap buffer) moves.
        let mut data = vec![0u8; n * buf_size];
        let base = data.as_mut_ptr();
        let mut b = RxBatch {
            buf_size,
            base,
            _data: data,
            spans: Vec::with_capacity(n),
            raw: RawRx {
                iov: (0..n)
                    .map(|_| libc::iovec {
                        iov_base: std::ptr::null_mut(),
                        iov_len: 0,
                    })
                    .collect(),
                // SAFETY: mmsghdr and sockaddr_storage are plain C structs for
                // which all-zero is valid.
                hdr: (0..n).map(|_| unsafe { std::mem::zeroed() }).collect(),
                // SAFETY: as above.
                names: (0..n).map(|_| unsafe { std::mem::zeroed() }).collect(),
                ctrl: vec![[0u64; CTRL_WORDS]; n],
            },
            ring: None,
            held: Vec::with_capacity(n),
        };
        for i in 0..n {
            b.raw.iov[i].iov_base = b.slot_ptr(i).cast();
            b.raw.iov[i].iov_len = buf_size;
        }
        b
    }

    /// Messages one receive call can return at most (the number of buffers;
    /// coalesced UDP datagrams may still yield more frames).
    pub fn capacity(&self) -> usize {
        self.raw.hdr.len()
    }

    /// Size of each buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Frames received by the last call.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True if the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Forgets the frames and gives any ring slots they occupy back to the
    /// kernel. Receiving into the batch does this first; call it earlier to free
    /// the slots as soon as the frames are no longer needed.
    pub fn clear(&mut self) {
        self.spans.clear();
        self.release_ring();
    }

    fn release_ring(&mut self) {
        if let Some(r) = &self.ring {
            for &s in &self.held {
                r.release(s as usize);
            }
        }
        self.held.clear();
        self.ring = None;
    }

    /// Start of own buffer `slot`.
    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.capacity());
        // SAFETY: slot * buf_size is inside the n * buf_size bytes at base.
        unsafe { self.base.add(slot * self.buf_size) }
    }

    /// The `i`th frame or datagram received (panics if `i >= len()`, like slices).
    pub fn frame(&self, i: usize) -> &[u8] {
        let s = self.spans[i];
        // SAFETY: a span points at `len` initialised bytes inside our own buffer
        // or inside a ring slot this batch holds (kept mapped by `self.ring`,
        // not written by the kernel until released); the borrow of `self` keeps
        // the batch from being refilled meanwhile.
        unsafe { std::slice::from_raw_parts(s.ptr, s.len as usize) }
    }

    /// The `i`th frame, writable (for in-place rewriting before forwarding it).
    pub fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        let s = self.spans[i];
        // SAFETY: as in `frame`; spans never overlap, and `&mut self` makes this
        // the only live reference into the batch's frames.
        unsafe { std::slice::from_raw_parts_mut(s.ptr, s.len as usize) }
    }

    /// Where the `i`th datagram came from (UDP sockets; `None` for frames).
    pub fn src(&self, i: usize) -> Option<SocketAddrV4> {
        self.spans[i].src
    }

    /// The received frames with their sources, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<SocketAddrV4>)> + '_ {
        (0..self.len()).map(move |i| (self.frame(i), self.src(i)))
    }

    /// Prepares header `i` to receive into own buffer `i`.
    fn arm(&mut self, i: usize) {
        let h = &mut self.raw.hdr[i];
        h.msg_len = 0;
        h.msg_hdr.msg_name = (&mut self.raw.names[i] as *mut libc::sockaddr_storage).cast();
        h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        h.msg_hdr.msg_iov = &mut self.raw.iov[i];
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_control = self.raw.ctrl[i].as_mut_ptr().cast();
        h.msg_hdr.msg_controllen = std::mem::size_of::<[u64; CTRL_WORDS]>() as _;
        h.msg_hdr.msg_flags = 0;
    }

    /// Calls `recvmmsg` once for up to `max` messages, non-blocking; returns how
    /// many arrived (0 if none was waiting). Own buffers are filled but not
    /// published. Does not clear the batch.
    fn recv_raw(&mut self, fd: RawFd, max: usize) -> io::Result<usize> {
        let n = max.min(self.capacity());
        if n == 0 {
            return Ok(0);
        }
        for i in 0..n {
            self.arm(i);
        }
        loop {
            // SAFETY: every header points at live buffers of the advertised sizes.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    self.raw.hdr.as_mut_ptr(),
                    n as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(0),
                _ => return Err(e),
            }
        }
    }

    /// One `recvmsg` into own buffer `slot`, non-blocking; returns whether a
    /// message arrived.
    fn recv_one(&mut self, fd: RawFd, slot: usize) -> io::Result<bool> {
        self.arm(slot);
        loop {
            // SAFETY: the header points at live buffers of the advertised sizes.
            let r =
                unsafe { libc::recvmsg(fd, &mut self.raw.hdr[slot].msg_hdr, libc::MSG_DONTWAIT) };
            if r >= 0 {
                self.raw.hdr[slot].msg_len = r as u32;
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(false),
                _ => return Err(e),
            }
        }
    }

    /// Publishes `len` bytes at `off` of own buffer `slot` as the next frame.
    fn push_own(&mut self, slot: usize, off: usize, len: usize, src: Option<SocketAddrV4>) {
        debug_assert!(off + len <= self.buf_size);
        // SAFETY: off + len stays inside buffer `slot` (checked by callers against
        // the received length, which the kernel bounds by buf_size).
        let ptr = unsafe { self.slot_ptr(slot).add(off) };
        self.spans.push(Span {
            ptr,
            len: len as u32,
            src,
        });
    }

    /// Publishes a frame lying in ring slot `slot` of `ring`; the batch holds the
    /// slot until it is cleared.
    fn push_ring(&mut self, ring: &Arc<ring::RingMap>, slot: usize, ptr: *mut u8, len: usize) {
        if self.ring.is_none() {
            self.ring = Some(ring.clone());
        }
        debug_assert!(self.ring.as_ref().is_some_and(|r| Arc::ptr_eq(r, ring)));
        self.held.push(slot as u32);
        self.spans.push(Span {
            ptr,
            len: len as u32,
            src: None,
        });
    }

    /// Whether the kernel cut message `slot` short.
    fn truncated(&self, slot: usize) -> bool {
        self.raw.hdr[slot].msg_hdr.msg_flags & libc::MSG_TRUNC != 0
            || self.raw.hdr[slot].msg_len as usize > self.buf_size
    }

    /// Length the kernel reported for message `slot`.
    fn msg_len(&self, slot: usize) -> usize {
        self.raw.hdr[slot].msg_len as usize
    }
}

/// One message to send: `head` then `body`, gathered by the kernel from two
/// iovecs, so a header (a Geneve header, say) goes in front of a frame without
/// copying it.
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    /// Bytes sent first (may be empty).
    pub head: &'a [u8],
    /// Bytes sent after `head`.
    pub body: &'a [u8],
    /// Destination (UDP sockets; ignored by packet sockets).
    pub dst: Option<SocketAddrV4>,
}

impl<'a> Msg<'a> {
    /// Bytes of the message (`head` and `body`).
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// True for a message of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A message of `body` alone.
    pub fn frame(body: &'a [u8]) -> Msg<'a> {
        Msg {
            head: &[],
            body,
            dst: None,
        }
    }
}

/// Length of a `struct virtio_net_hdr` (what `PACKET_VNET_HDR` puts in front of
/// every frame).
pub const VNET_HDR_LEN: usize = 10;

/// The `virtio_net_hdr` of a frame sent through a packet socket with
/// [`PacketOptions::vnet_hdr`]: how to finish the frame (checksum, segmentation).
/// All-zero (the default) is a complete, ordinary frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM` (1): the L4 checksum is partial, to be
    /// finished from `csum_start` with the result at `csum_start + csum_offset`.
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`: 0 none, 1 TCPv4, 4 TCPv6, 5 UDP (| 0x80 ECN).
    pub gso_type: u8,
    /// Bytes of headers (Ethernet to the end of TCP) in a super-frame.
    pub hdr_len: u16,
    /// Payload bytes per segment of a super-frame.
    pub gso_size: u16,
    /// Where checksumming starts (the L4 header's offset in the frame).
    pub csum_start: u16,
    /// Where the checksum goes, from `csum_start` (16 for TCP).
    pub csum_offset: u16,
}

impl VnetHdr {
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
    pub const NEEDS_CSUM: u8 = 1;
    /// `VIRTIO_NET_HDR_GSO_TCPV4`.
    pub const GSO_TCPV4: u8 = 1;

    /// The header as the kernel reads it (host byte order, which is what packet
    /// sockets use for the legacy virtio header).
    pub fn to_bytes(self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }
}

/// A frame for [`PacketSocket::send_frames`]: the concatenation of
/// `slices[parts]` (a rewritten header, then payloads lying elsewhere: gathered
/// by the kernel, not copied here), described by `vnet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxFrame {
    /// Range of the caller's slice list making up the frame.
    pub parts: std::ops::Range<usize>,
    /// Checksum and segmentation instructions (all-zero for a plain frame).
    pub vnet: VnetHdr,
}

/// Most datagrams in one `UDP_SEGMENT` super-datagram (the kernel allows 64 on
/// older kernels, 128 on newer ones).
const GSO_MAX_SEGS: usize = 64;
/// Most bytes of UDP payload in one super-datagram (IPv4's 65,535 minus the IP
/// and UDP headers).
const GSO_MAX_BYTES: usize = 65_507;
/// Control-message room for one `UDP_SEGMENT` (`CMSG_SPACE(2)` = 24 bytes).
const TX_CTRL_WORDS: usize = 3;
/// The header of a plain frame on a `PACKET_VNET_HDR` socket.
static ZERO_VNET: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

/// The kernel-facing arrays for sending, grown to the largest batch and reused.
struct RawTx {
    iov: Vec<libc::iovec>,
    hdr: Vec<libc::mmsghdr>,
    names: Vec<libc::sockaddr_in>,
    ctrl: Vec<[u64; TX_CTRL_WORDS]>,
    /// virtio-net headers of the frames of the last fill (frame sends).
    vnet: Vec<[u8; VNET_HDR_LEN]>,
    /// Per header of the last fill: index (into the filled slice) just past the
    /// last message it carries.
    ends: Vec<usize>,
    /// Coalesce runs of equal-sized datagrams to one destination (UDP only).
    gso: bool,
    /// Put a virtio-net header in front of every frame (`PACKET_VNET_HDR`).
    vnet_prefix: bool,
    /// Destinations whose route refused super-datagrams (no checksum offload
    /// on the way out: `EIO`); they get plain datagrams.
    no_gso: Vec<SocketAddrV4>,
}

// SAFETY: the pointers are rebuilt before each send and only used during it.
unsafe impl Send for RawTx {}

/// What a fill puts in one header.
enum Fill<'m, 'a> {
    /// `Msg`s (UDP datagrams, possibly coalesced, or plain frames).
    Msgs(&'m [Msg<'a>], bool),
    /// Gathered frames with their virtio-net headers.
    Frames(&'m [TxFrame], &'m [&'a [u8]]),
}

impl RawTx {
    fn new() -> RawTx {
        RawTx {
            iov: Vec::new(),
            hdr: Vec::new(),
            names: Vec::new(),
            ctrl: Vec::new(),
            vnet: Vec::new(),
            ends: Vec::new(),
            gso: false,
            vnet_prefix: false,
            no_gso: Vec::new(),
        }
    }

    /// Sends `msgs` with as few `sendmmsg` calls as possible; see
    /// [`PacketSocket::send_batch`] for the meaning of the result.
    fn send(
        &mut self,
        fd: RawFd,
        msgs: &[Msg<'_>],
        with_dst: bool,
        stats: &mut SocketStats,
    ) -> io::Result<usize> {
        self.send_loop(fd, Fill::Msgs(msgs, with_dst), stats)
    }

    /// Sends gathered frames; same result as [`RawTx::send`].
    fn send_frames(
        &mut self,
        fd: RawFd,
        frames: &[TxFrame],
        slices: &[&[u8]],
        stats: &mut SocketStats,
    ) -> io::Result<usize> {
        self.send_loop(fd, Fill::Frames(frames, slices), stats)
    }

    fn send_loop(
        &mut self,
        fd: RawFd,
        what: Fill<'_, '_>,
        stats: &mut SocketStats,
    ) -> io::Result<usize> {
        let total = match &what {
            Fill::Msgs(m, _) => m.len(),
            Fill::Frames(f, _) => f.len(),
        };
        let mut done = 0;
        // Messages before this index are sent one datagram each: a
        // super-datagram covering them was refused, so each gets its own verdict.
        let mut single_until: usize = 0;
        while done < total {
            let k = match &what {
                Fill::Msgs(m, with_dst) => {
                    self.fill_msgs(&m[done..], *with_dst, single_until.saturating_sub(done))
                }
                Fill::Frames(f, slices) => self.fill_frames(&f[done..], slices),
            };
            // SAFETY: headers point at iovecs, addresses and control data filled
            // just now, which point at the caller's slices (or at `ZERO_VNET` and
            // our own arrays), alive for this call.
            let r =
                unsafe { libc::sendmmsg(fd, self.hdr.as_mut_ptr(), k as u32, libc::MSG_DONTWAIT) };
            stats.tx_calls += 1;
            if r > 0 {
                let r = r as usize;
                if matches!(what, Fill::Msgs(..)) {
                    for h in 0..r {
                        let segs = self.ends[h] - if h == 0 { 0 } else { self.ends[h - 1] };
                        if segs > 1 {
                            stats.tx_gso += 1;
                            stats.tx_gso_segs += segs as u64;
                        }
                    }
                }
                stats.tx_msgs += self.ends[r - 1] as u64;
                done += self.ends[r - 1];
                continue;
            }
            let e = io::Error::last_os_error();
            let first = self.ends[0];
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The queue is full: the caller decides whether to wait or drop.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                // A super-datagram was refused: EIO means the route cannot take
                // them at all (no checksum offload), anything else may be one bad
                // message in it. Either way, retry its messages one by one.
                Some(err) if first > 1 => {
                    if let (libc::EIO, Fill::Msgs(m, _)) = (err, &what) {
                        if let Some(d) = m[done].dst {
                            self.no_gso.push(d);
                        }
                    }
                    single_until = done + first;
                }
                // This message is at fault, not the socket: skip it.
                Some(
                    libc::EMSGSIZE
                    | libc::EINVAL
                    | libc::EIO
                    | libc::EDESTADDRREQ
                    | libc::ENETUNREACH
                    | libc::EHOSTUNREACH
                    | libc::EACCES
                    | libc::EPERM
                    | libc::ECONNREFUSED
                    | libc::EAFNOSUPPORT,
                ) => {
                    stats.tx_errors += 1;
                    done += 1;
                }
                _ if done > 0 => break,
                _ => return Err(e),
            }
        }
        Ok(done)
    }

    /// How many of `msgs` (from the front) one super-datagram can carry: same
    /// destination, same size, except that the last one may be shorter.
    fn run_len(&self, msgs: &[Msg<'_>]) -> usize {
        let Some(first) = msgs.first() else {
            return 0;
        };
        let size = first.len();
        let Some(dst) = first.dst else {
            return 1;
        };
        if size == 0 || self.no_gso.contains(&dst) {
            return 1;
        }
        let mut total = size;
        let mut k = 1;
        while k < msgs.len() && k < GSO_MAX_SEGS {
            let m = &msgs[k];
            let len = m.len();
            if m.dst != Some(dst) || len > size || len == 0 || total + len > GSO_MAX_BYTES {
                break;
            }
            total += len;
            k += 1;
            if len < size {
                break;
            }
        }
        k
    }

    /// Makes room for `heads` headers and `iovs` iovecs. Pointers into the
    /// arrays are taken while filling, so they must not reallocate then; growth
    /// happens during warm-up only.
    fn reserve(&mut self, heads: usize, iovs: usize) {
        if self.iov.len() < iovs {
            self.iov.resize(
                iovs,
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
            );
        }
        if self.hdr.len() < heads {
            // SAFETY: all-zero is a valid mmsghdr / sockaddr_in.
            self.hdr
                .resize_with(heads, || unsafe { std::mem::zeroed() });
            self.names
                .resize_with(heads, || unsafe { std::mem::zeroed() });
            self.ctrl.resize(heads, [0; TX_CTRL_WORDS]);
            self.vnet.resize(heads, [0; VNET_HDR_LEN]);
        }
        self.ends.clear();
    }

    fn set_iov(&mut self, at: usize, b: &[u8]) {
        self.iov[at] = libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
    }

    /// Points header `h` at `n` iovecs from `iov0`, no address, no control data.
    fn set_hdr(&mut self, h: usize, iov0: usize, n: usize) {
        let iov = &mut self.iov[iov0] as *mut libc::iovec;
        let hd = &mut self.hdr[h];
        hd.msg_len = 0;
        hd.msg_hdr.msg_iov = iov;
        hd.msg_hdr.msg_iovlen = n as _;
        hd.msg_hdr.msg_flags = 0;
        hd.msg_hdr.msg_control = std::ptr::null_mut();
        hd.msg_hdr.msg_controllen = 0;
        hd.msg_hdr.msg_name = std::ptr::null_mut();
        hd.msg_hdr.msg_namelen = 0;
    }

    /// Builds up to `MAX_VLEN` headers for the front of `msgs` (the first
    /// `single` messages one datagram each); returns how many headers.
    fn fill_msgs(&mut self, msgs: &[Msg<'_>], with_dst: bool, single: usize) -> usize {
        let per = if self.vnet_prefix { 3 } else { 2 };
        let most = msgs.len().min(MAX_VLEN * GSO_MAX_SEGS);
        self.reserve(msgs.len().min(MAX_VLEN), per * most);
        let mut i = 0;
        let mut h = 0;
        while i < msgs.len() && h < MAX_VLEN {
            let segs = if with_dst && self.gso && i >= single {
                self.run_len(&msgs[i..])
            } else {
                1
            };
            let iov0 = per * i;
            for (j, m) in msgs[i..i + segs].iter().enumerate() {
                let at = iov0 + per * j;
                if self.vnet_prefix {
                    self.set_iov(at, &ZERO_VNET);
                }
                self.set_iov(at + per - 2, m.head);
                self.set_iov(at + per - 1, m.body);
            }
            self.set_hdr(h, iov0, per * segs);
            let m = &msgs[i];
            let hd = &mut self.hdr[h];
            if segs > 1 {
                let c = &mut self.ctrl[h];
                hd.msg_hdr.msg_control = c.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE of a u16 is 24 bytes, the size of `c`.
                hd.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
                // SAFETY: the control buffer is large enough for one cmsghdr and a
                // u16 (checked by CMSG_SPACE above), and properly aligned (u64s).
                unsafe {
                    let cm = libc::CMSG_FIRSTHDR(&hd.msg_hdr);
                    (*cm).cmsg_level = libc::SOL_UDP;
                    (*cm).cmsg_type = libc::UDP_SEGMENT;
                    (*cm).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), m.len() as u16);
                }
            }
            if let (true, Some(d)) = (with_dst, m.dst) {
                self.names[h] = sockaddr_in(d);
                hd.msg_hdr.msg_name = (&mut self.names[h] as *mut libc::sockaddr_in).cast();
                hd.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            }
            i += segs;
            self.ends.push(i);
            h += 1;
        }
        h
    }

    /// Builds up to `MAX_VLEN` headers, one per frame: its virtio-net header,
    /// then its parts.
    fn fill_frames(&mut self, frames: &[TxFrame], slices: &[&[u8]]) -> usize {
        let n = frames.len().min(MAX_VLEN);
        let iovs: usize = frames[..n].iter().map(|f| f.parts.len() + 1).sum();
        self.reserve(n, iovs);
        let mut at = 0;
        for (h, f) in frames[..n].iter().enumerate() {
            self.vnet[h] = f.vnet.to_bytes();
            let v = &self.vnet[h] as *const [u8; VNET_HDR_LEN];
            // SAFETY: `vnet` has `n` entries and is not resized until the next
            // fill, so the pointer stays valid for the send.
            self.set_iov(at, unsafe { &*v });
            for (j, k) in f.parts.clone().enumerate() {
                self.set_iov(at + 1 + j, slices[k]);
            }
            self.set_hdr(h, at, f.parts.len() + 1);
            at += f.parts.len() + 1;
            self.ends.push(h + 1);
        }
        n
    }
}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

fn from_sockaddr_in(s: &libc::sockaddr_storage) -> Option<SocketAddrV4> {
    if s.ss_family as i32 != libc::AF_INET {
        return None;
    }
    // SAFETY: the family says the storage holds a sockaddr_in, and sockaddr_storage
    // is large and aligned enough for it.
    let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
    Some(SocketAddrV4::new(
        Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
        u16::from_be(sin.sin_port),
    ))
}

/// `socket(2)`, owned.
fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the returned descriptor is owned by the OwnedFd.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt_int(fd: &OwnedFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int of the advertised size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Socket buffer size asked for; the `*FORCE` options (root) exceed
/// `net.core.rmem_max`, otherwise the kernel caps it.
const SOCKET_BUFFER: i32 = 8 << 20;

/// Makes the socket's buffers big, so bursts wait in the kernel, not on the floor.
fn big_buffers(fd: &OwnedFd) {
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if setsockopt_int(fd, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
            // Not privileged: take what the sysctl allows.
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, SOCKET_BUFFER);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn everything_moves_between_threads() {
        assert_send::<RxBatch>();
        assert_send::<PacketSocket>();
        assert_send::<UdpBatchSocket>();
        assert_send::<Poller>();
    }

    #[test]
    fn empty_batch_and_sockaddr_round_trip() {
        let b = RxBatch::new(0, 0);
        assert_eq!((b.capacity(), b.buf_size(), b.len()), (1, 1, 0));
        assert!(b.is_empty() && b.iter().next().is_none());
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 6081);
        let sin = sockaddr_in(a);
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
        unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        assert_eq!(from_sockaddr_in(&ss), Some(a));
        ss.ss_family = libc::AF_INET6 as libc::sa_family_t;
        assert_eq!(from_sockaddr_in(&ss), None);
    }
}
