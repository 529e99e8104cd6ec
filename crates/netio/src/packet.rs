//! Raw Ethernet frames on one interface (`AF_PACKET`, `SOCK_RAW`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::{big_buffers, setsockopt_int, socket, Msg, RawTx, RxBatch, SocketStats};

/// `struct tpacket_stats` (`PACKET_STATISTICS`).
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: u32,
    drops: u32,
}

/// Frames of one interface, read and written in batches.
///
/// Opened in the calling thread's network namespace (see [`crate::in_netns`]).
/// Frames this socket (or anyone on this host) sends out of the interface are not
/// read back. Frames the local stack handed over with a partial checksum (offload)
/// are completed before they are returned.
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
    tx: RawTx,
    stats: SocketStats,
    kernel_drops: u64,
}

impl std::fmt::Debug for PacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .finish()
    }
}

fn ctx(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl PacketSocket {
    /// Opens a non-blocking packet socket bound to `iface` (all protocols).
    pub fn open(iface: &str) -> io::Result<PacketSocket> {
        let name = CString::new(iface).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name {iface:?} contains NUL"),
            )
        })?;
        // SAFETY: name is a valid C string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(ctx(
                io::Error::last_os_error(),
                format_args!("interface {iface}"),
            ));
        }
        // Protocol 0 receives nothing until bind sets ETH_P_ALL together with the
        // interface, so no frame of another interface slips in between.
        let fd =
            socket(libc::AF_PACKET, libc::SOCK_RAW, 0).map_err(|e| ctx(e, "AF_PACKET socket"))?;
        // Kernels before 4.20 lack it; outgoing frames are then filtered by
        // sll_pkttype in recv_batch.
        let _ = setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);
        setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)
            .map_err(|e| ctx(e, "PACKET_AUXDATA"))?;
        big_buffers(&fd);
        // SAFETY: all-zero is a valid sockaddr_ll.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: passes a live sockaddr_ll with its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r != 0 {
            return Err(ctx(
                io::Error::last_os_error(),
                format_args!("bind to {iface}"),
            ));
        }
        Ok(PacketSocket {
            fd,
            ifindex: ifindex as i32,
            tx: RawTx::new(),
            stats: SocketStats::default(),
            kernel_drops: 0,
        })
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Receives up to `batch.capacity()` frames with one system call, without
    /// blocking; returns how many are in `batch` now (0 if nothing was waiting).
    /// Truncated and outgoing frames are skipped and counted.
    pub fn recv_batch(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        let n = batch.recv_raw(self.fd.as_raw_fd())?;
        for slot in 0..n {
            // SAFETY: the kernel filled names[slot] with a sockaddr_ll (family
            // AF_PACKET); sockaddr_storage is large and aligned enough for it.
            let sll = unsafe {
                &*(&batch.raw.names[slot] as *const libc::sockaddr_storage)
                    .cast::<libc::sockaddr_ll>()
            };
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                self.stats.rx_outgoing += 1;
                continue;
            }
            if batch.truncated(slot) {
                self.stats.rx_truncated += 1;
                continue;
            }
            let status = aux_status(&batch.raw.hdr[slot].msg_hdr);
            let len = batch.raw.hdr[slot].msg_len as usize;
            batch.push(slot, len, None);
            if status & libc::TP_STATUS_CSUMNOTREADY != 0 {
                let i = batch.len() - 1;
                if crate::complete_l4_checksum(batch.frame_mut(i)) {
                    self.stats.rx_csum_completed += 1;
                }
            }
        }
        Ok(batch.len())
    }

    /// Sends frames (each `head` followed by `body`; `dst` is ignored) with as few
    /// system calls as possible, without blocking.
    ///
    /// Returns how many messages were consumed from the front of `msgs`: sent, or
    /// refused individually by the kernel (too big, say; counted in
    /// [`SocketStats::tx_errors`]). Fewer than `msgs.len()` means the socket's queue
    /// is full (`EAGAIN`/`ENOBUFS`): wait until writable or drop the rest. An error
    /// is returned only when the socket itself fails before anything was consumed
    /// (interface gone, say).
    pub fn send_batch(&mut self, msgs: &[Msg<'_>]) -> io::Result<usize> {
        self.tx
            .send(self.fd.as_raw_fd(), msgs, false, &mut self.stats)
    }

    /// Counters of skipped and fixed frames.
    pub fn stats(&self) -> SocketStats {
        self.stats
    }

    /// Frames the kernel dropped because the receive queue was full, since the
    /// socket was opened.
    pub fn kernel_drops(&mut self) -> io::Result<u64> {
        let mut s = TpacketStats::default();
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: passes a live TpacketStats and its size; reading resets the
        // kernel's counters, hence the running total.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut s as *mut TpacketStats).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        self.kernel_drops += s.drops as u64;
        Ok(self.kernel_drops)
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The `tp_status` of the message's `PACKET_AUXDATA`, or 0 without one.
fn aux_status(h: &libc::msghdr) -> u32 {
    // SAFETY: the kernel set msg_controllen to the control data it wrote into the
    // buffer msg_control points at; the CMSG macros stay within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET
                && (*c).cmsg_type == libc::PACKET_AUXDATA
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(std::mem::size_of::<libc::tpacket_auxdata>() as u32) as usize
            {
                let aux =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::tpacket_auxdata>());
                return aux.tp_status;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}
