//! UDP datagrams in batches (`recvmmsg`/`sendmmsg` on an IPv4 UDP socket), with
//! optional segmentation offload both ways (`UDP_SEGMENT` out, `UDP_GRO` in).

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::{
    big_buffers, from_sockaddr_in, setsockopt_int, sockaddr_in, socket, Msg, RawTx, RxBatch,
    SocketStats,
};

/// Receive buffer size for a socket with [`UdpBatchSocket::enable_gro`]: a
/// coalesced datagram can be as long as the largest UDP payload.
pub const GRO_BUF_SIZE: usize = 65_536;

/// A non-blocking IPv4 UDP socket read and written in batches.
///
/// Bound in the calling thread's network namespace (see [`crate::in_netns`]).
pub struct UdpBatchSocket {
    fd: OwnedFd,
    local: SocketAddrV4,
    tx: RawTx,
    stats: SocketStats,
    gro: bool,
}

impl std::fmt::Debug for UdpBatchSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpBatchSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("local", &self.local)
            .finish()
    }
}

impl UdpBatchSocket {
    /// Binds a UDP socket to `addr` (port 0 picks one; see [`Self::local_addr`]).
    pub fn bind(addr: SocketAddrV4) -> io::Result<UdpBatchSocket> {
        UdpBatchSocket::bind_with(addr, false)
    }

    /// Binds one of several sockets sharing `addr` (`SO_REUSEPORT`): the
    /// kernel spreads received datagrams over them by their source and
    /// destination addresses and ports, so one sender's datagrams all reach
    /// one socket, in order. Every socket of the group must be bound with
    /// this, by the same user; port 0 on the first picks the port the others
    /// then name.
    pub fn bind_shared(addr: SocketAddrV4) -> io::Result<UdpBatchSocket> {
        UdpBatchSocket::bind_with(addr, true)
    }

    fn bind_with(addr: SocketAddrV4, shared: bool) -> io::Result<UdpBatchSocket> {
        let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
        setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        if shared {
            setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        }
        big_buffers(&fd);
        let sin = sockaddr_in(addr);
        // SAFETY: passes a live sockaddr_in with its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sin as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("bind UDP {addr}: {e}")));
        }
        // SAFETY: all-zero is a valid sockaddr_storage; getsockname fills it.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: passes a live buffer and its size.
        let r = unsafe {
            libc::getsockname(
                fd.as_raw_fd(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let local = from_sockaddr_in(&ss).unwrap_or(addr);
        Ok(UdpBatchSocket {
            fd,
            local,
            tx: RawTx::new(),
            stats: SocketStats::default(),
            gro: false,
        })
    }

    /// Sends runs of equal-sized datagrams to one destination (the last of a
    /// run may be shorter) as one `UDP_SEGMENT` super-datagram: one trip through
    /// the stack and any bridge or veth on the way, segmented only where a
    /// device needs it (or delivered whole to a receiver with `UDP_GRO`). Returns
    /// false (and sends plain datagrams) if the kernel lacks UDP GSO.
    /// Destinations whose route refuses super-datagrams get plain ones.
    pub fn enable_gso(&mut self) -> bool {
        // Setting the socket's default segment size to 0 (none) succeeds
        // exactly when the kernel knows UDP_SEGMENT (4.18+).
        let ok = setsockopt_int(&self.fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok();
        self.tx.gso = ok;
        ok
    }

    /// Asks the kernel to deliver coalesced datagrams whole (`UDP_GRO`, 5.0+):
    /// a super-datagram from a GSO sender arrives as one message and is split
    /// back into its datagrams in the batch, each with the same source. Receive
    /// buffers must then hold [`GRO_BUF_SIZE`] bytes, or coalesced datagrams are
    /// truncated (and counted in [`SocketStats::rx_truncated`]). Returns false
    /// if the kernel refused.
    pub fn enable_gro(&mut self) -> bool {
        self.gro = setsockopt_int(&self.fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        self.gro
    }

    /// A second handle on the same socket (same address, same queues) with
    /// its own send buffers and counters, for another thread to send from;
    /// UDP GSO and GRO as set on this one.
    pub fn try_clone(&self) -> io::Result<UdpBatchSocket> {
        let mut tx = RawTx::new();
        tx.gso = self.tx.gso;
        Ok(UdpBatchSocket {
            fd: self.fd.try_clone()?,
            local: self.local,
            tx,
            stats: SocketStats::default(),
            gro: self.gro,
        })
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// Receives up to `batch.capacity()` datagrams with one system call, without
    /// blocking; [`RxBatch::src`] gives each sender. Returns how many are in
    /// `batch` (0 if nothing was waiting). Truncated datagrams are skipped and
    /// counted.
    pub fn recv_batch(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        let n = batch.recv_raw(self.fd.as_raw_fd(), usize::MAX)?;
        for slot in 0..n {
            if batch.truncated(slot) {
                self.stats.rx_truncated += 1;
                continue;
            }
            let src = from_sockaddr_in(&batch.raw.names[slot]);
            let len = batch.msg_len(slot);
            let seg = if self.gro {
                gro_size(&batch.raw.hdr[slot].msg_hdr)
            } else {
                0
            };
            if seg == 0 || seg >= len {
                batch.push_own(slot, 0, len, src);
                continue;
            }
            self.stats.rx_gro += 1;
            let mut off = 0;
            while off < len {
                let l = seg.min(len - off);
                batch.push_own(slot, off, l, src);
                off += l;
            }
        }
        if !batch.is_empty() {
            self.stats.rx_batches += 1;
            self.stats.rx_frames += batch.len() as u64;
        }
        Ok(batch.len())
    }

    /// Sends each message (`head` then `body`) as one datagram to its `dst`; same
    /// result as [`crate::PacketSocket::send_batch`]. A message without `dst` is
    /// refused and counted in [`SocketStats::tx_errors`].
    pub fn send_batch(&mut self, msgs: &[Msg<'_>]) -> io::Result<usize> {
        self.tx
            .send(self.fd.as_raw_fd(), msgs, true, &mut self.stats)
    }

    /// Counters of skipped datagrams and refused sends.
    pub fn stats(&self) -> SocketStats {
        self.stats
    }
}

/// The segment size of a coalesced datagram (its `UDP_GRO` control message), or
/// 0 if it was not coalesced.
fn gro_size(h: &libc::msghdr) -> usize {
    // SAFETY: the kernel set msg_controllen to the control data it wrote into the
    // buffer msg_control points at; the CMSG macros stay within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP
                && (*c).cmsg_type == libc::UDP_GRO
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(2) as usize
            {
                // The kernel writes an int (put_cmsg of gso_size as int).
                let v = if (*c).cmsg_len as usize >= libc::CMSG_LEN(4) as usize {
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()) as usize
                } else {
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u16>()) as usize
                };
                return v;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}

impl AsRawFd for UdpBatchSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
