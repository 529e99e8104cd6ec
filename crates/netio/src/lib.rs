//! Batched, non-blocking packet I/O for the data plane.
//!
//! Every receive is one `recvmmsg(2)` filling a whole [`RxBatch`], every send one
//! `sendmmsg(2)` of a slice of [`Msg`]s, so the per-packet cost is a copy, not a
//! system call. The `iovec`/`mmsghdr` arrays live in the batch and in the sockets
//! and are reused, so nothing is allocated per packet once they have grown to the
//! largest batch seen.
//!
//! - [`PacketSocket`]: raw Ethernet frames on one interface (`AF_PACKET`), with
//!   outgoing frames ignored and offloaded (partial) L4 checksums completed, so
//!   consumers always see valid checksums.
//! - [`UdpBatchSocket`]: UDP datagrams with their source / destination address.
//! - [`Poller`]: waits for any of a set of descriptors (`poll(2)`).
//! - [`in_netns`]: runs a closure on a thread that joined a named network namespace;
//!   sockets opened there stay in that namespace while the process itself stays in
//!   the root namespace.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

mod csum;
mod netns;
mod packet;
mod poll;
mod udp;

pub use csum::complete_l4_checksum;
pub use netns::{in_netns, in_netns_opt};
pub use packet::PacketSocket;
pub use poll::Poller;
pub use udp::UdpBatchSocket;

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
}

/// Receive buffers for one batch, reused across calls.
pub struct RxBatch {
    buf_size: usize,
    data: Vec<u8>,
    lens: Vec<u32>,
    srcs: Vec<Option<SocketAddrV4>>,
    /// Logical index -> buffer slot, so skipped messages leave no holes.
    slots: Vec<u32>,
    count: usize,
    raw: RawRx,
}

/// The kernel-facing arrays of an [`RxBatch`]; their pointers point into the
/// batch's own heap buffers, which never move once allocated.
struct RawRx {
    iov: Vec<libc::iovec>,
    hdr: Vec<libc::mmsghdr>,
    names: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CTRL_WORDS]>,
}

// SAFETY: the raw pointers only point into heap buffers owned by the same RxBatch
// and are only dereferenced by the kernel during a call that holds `&mut RxBatch`.
unsafe impl Send for RawRx {}

impl std::fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxBatch")
            .field("capacity", &self.capacity())
            .field("buf_size", &self.buf_size)
            .field("len", &self.count)
            .finish()
    }
}

impl RxBatch {
    /// `n` buffers of `buf_size` bytes each (both at least 1).
    pub fn new(n: usize, buf_size: usize) -> RxBatch {
        let n = n.clamp(1, MAX_VLEN);
        let buf_size = buf_size.max(1);
        let mut b = RxBatch {
            buf_size,
            data: vec![0u8; n * buf_size],
            lens: vec![0; n],
            srcs: vec![None; n],
            slots: vec![0; n],
            count: 0,
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
        };
        let base = b.data.as_mut_ptr();
        for i in 0..n {
            // SAFETY: i * buf_size is inside `data` (n * buf_size bytes).
            b.raw.iov[i].iov_base = unsafe { base.add(i * buf_size) }.cast();
            b.raw.iov[i].iov_len = buf_size;
        }
        b
    }

    /// How many buffers the batch has.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Size of each buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Frames received by the last call.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn range(&self, i: usize) -> std::ops::Range<usize> {
        let s = self.slots[i] as usize;
        let start = s * self.buf_size;
        start..start + self.lens[s] as usize
    }

    /// The `i`th frame or datagram received (panics if `i >= len()`, like slices).
    pub fn frame(&self, i: usize) -> &[u8] {
        assert!(i < self.count, "frame index {i} out of {}", self.count);
        &self.data[self.range(i)]
    }

    /// The `i`th frame, writable (for in-place rewriting before forwarding it).
    pub fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.count, "frame index {i} out of {}", self.count);
        let r = self.range(i);
        &mut self.data[r]
    }

    /// Where the `i`th datagram came from (UDP sockets; `None` for frames).
    pub fn src(&self, i: usize) -> Option<SocketAddrV4> {
        assert!(i < self.count, "frame index {i} out of {}", self.count);
        self.srcs[self.slots[i] as usize]
    }

    /// The received frames with their sources, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<SocketAddrV4>)> + '_ {
        (0..self.count).map(move |i| (self.frame(i), self.src(i)))
    }

    /// Calls `recvmmsg` once, non-blocking; returns how many messages arrived
    /// (0 if none was waiting). Slots are filled but not yet published.
    fn recv_raw(&mut self, fd: RawFd) -> io::Result<usize> {
        self.count = 0;
        let n = self.capacity();
        for i in 0..n {
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

    /// Publishes slot `slot` as the next frame, `len` bytes long.
    fn push(&mut self, slot: usize, len: usize, src: Option<SocketAddrV4>) {
        self.lens[slot] = len as u32;
        self.srcs[slot] = src;
        self.slots[self.count] = slot as u32;
        self.count += 1;
    }

    /// Whether the kernel cut message `slot` short.
    fn truncated(&self, slot: usize) -> bool {
        self.raw.hdr[slot].msg_hdr.msg_flags & libc::MSG_TRUNC != 0
            || self.raw.hdr[slot].msg_len as usize > self.buf_size
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
    /// A message of `body` alone.
    pub fn frame(body: &'a [u8]) -> Msg<'a> {
        Msg {
            head: &[],
            body,
            dst: None,
        }
    }
}

/// The kernel-facing arrays for sending, grown to the largest batch and reused.
struct RawTx {
    iov: Vec<libc::iovec>,
    hdr: Vec<libc::mmsghdr>,
    names: Vec<libc::sockaddr_in>,
}

// SAFETY: the pointers are rebuilt before each send and only used during it.
unsafe impl Send for RawTx {}

impl RawTx {
    fn new() -> RawTx {
        RawTx {
            iov: Vec::new(),
            hdr: Vec::new(),
            names: Vec::new(),
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
        let mut done = 0;
        while done < msgs.len() {
            let k = (msgs.len() - done).min(MAX_VLEN);
            self.fill(&msgs[done..done + k], with_dst);
            // SAFETY: headers point at iovecs and addresses filled just now, which
            // point at the caller's slices, alive for this call.
            let r =
                unsafe { libc::sendmmsg(fd, self.hdr.as_mut_ptr(), k as u32, libc::MSG_DONTWAIT) };
            if r > 0 {
                done += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The queue is full: the caller decides whether to wait or drop.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                // This message is at fault, not the socket: skip it.
                Some(
                    libc::EMSGSIZE
                    | libc::EINVAL
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

    fn fill(&mut self, msgs: &[Msg<'_>], with_dst: bool) {
        let k = msgs.len();
        if self.hdr.len() < k {
            // Growth happens during warm-up only; afterwards the arrays are reused.
            self.iov.resize(
                2 * k,
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
            );
            // SAFETY: all-zero is a valid mmsghdr / sockaddr_in.
            self.hdr.resize_with(k, || unsafe { std::mem::zeroed() });
            self.names.resize_with(k, || unsafe { std::mem::zeroed() });
        }
        for (i, m) in msgs.iter().enumerate() {
            self.iov[2 * i] = libc::iovec {
                iov_base: m.head.as_ptr() as *mut libc::c_void,
                iov_len: m.head.len(),
            };
            self.iov[2 * i + 1] = libc::iovec {
                iov_base: m.body.as_ptr() as *mut libc::c_void,
                iov_len: m.body.len(),
            };
            let h = &mut self.hdr[i];
            h.msg_len = 0;
            h.msg_hdr.msg_iov = &mut self.iov[2 * i];
            h.msg_hdr.msg_iovlen = 2;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            match (with_dst, m.dst) {
                (true, Some(d)) => {
                    self.names[i] = sockaddr_in(d);
                    h.msg_hdr.msg_name = (&mut self.names[i] as *mut libc::sockaddr_in).cast();
                    h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
                }
                _ => {
                    h.msg_hdr.msg_name = std::ptr::null_mut();
                    h.msg_hdr.msg_namelen = 0;
                }
            }
        }
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
