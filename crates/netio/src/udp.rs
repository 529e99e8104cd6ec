//! UDP datagrams in batches (`recvmmsg`/`sendmmsg` on an IPv4 UDP socket).

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::{
    big_buffers, from_sockaddr_in, setsockopt_int, sockaddr_in, socket, Msg, RawTx, RxBatch,
    SocketStats,
};

/// A non-blocking IPv4 UDP socket read and written in batches.
///
/// Bound in the calling thread's network namespace (see [`crate::in_netns`]).
pub struct UdpBatchSocket {
    fd: OwnedFd,
    local: SocketAddrV4,
    tx: RawTx,
    stats: SocketStats,
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
        let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
        setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
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
        let n = batch.recv_raw(self.fd.as_raw_fd())?;
        for slot in 0..n {
            if batch.truncated(slot) {
                self.stats.rx_truncated += 1;
                continue;
            }
            let src = from_sockaddr_in(&batch.raw.names[slot]);
            let len = batch.raw.hdr[slot].msg_len as usize;
            batch.push(slot, len, src);
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

impl AsRawFd for UdpBatchSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
