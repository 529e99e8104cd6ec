//! Raw Ethernet frames on one interface (`AF_PACKET`, `SOCK_RAW`), received
//! through a memory-mapped ring or with `recvmmsg`, sent with `sendmmsg`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::ring::{RxRing, Slot, PACKET_COPY_THRESH, TP_STATUS_CSUMNOTREADY};
use crate::{
    big_buffers, setsockopt_int, socket, Msg, RawTx, RxBatch, SocketStats, TxFrame, VNET_HDR_LEN,
};

/// `PACKET_QDISC_BYPASS` (`linux/if_packet.h`).
const PACKET_QDISC_BYPASS: i32 = 20;
/// `PACKET_VNET_HDR`.
const PACKET_VNET_HDR: i32 = 15;

/// `struct tpacket_stats` (`PACKET_STATISTICS`).
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: u32,
    drops: u32,
}

/// How to open a [`PacketSocket`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketOptions {
    /// Receive through a memory-mapped `TPACKET_V2` ring of about this many
    /// bytes (slots sized for the interface's MTU), read in place without a
    /// system call per frame; `None`: `recvmmsg` into the batch's buffers. If the
    /// kernel refuses the ring, the socket falls back to `recvmmsg` (see
    /// [`PacketSocket::ring`]).
    pub ring: Option<usize>,
    /// Hand sent frames straight to the device, past the qdisc layer
    /// (`PACKET_QDISC_BYPASS`): no queueing discipline, traffic control or taps
    /// on the way out, so less work per frame.
    pub qdisc_bypass: bool,
    /// Exchange a `virtio_net_hdr` with the kernel (`PACKET_VNET_HDR`), so
    /// [`PacketSocket::send_frames`] can hand over TCP super-frames with a
    /// partial checksum, which cross the interface whole if it has TSO (see
    /// [`enable_tso`]). Received frames are returned without the header.
    pub vnet_hdr: bool,
    /// Only send: the socket is bound to the interface with protocol 0, so
    /// the kernel hands it no frame (no ring, nothing queued) while it sends
    /// as any other. What a forwarding thread that does not read a port
    /// sends to it through (`ring` is then ignored).
    pub send_only: bool,
}

impl PacketOptions {
    /// Ring memory [`PacketOptions::fast`] asks for: 8,192 slots of 2 KiB at MTU
    /// 1500. A TCP sender bursts a whole window while the reader may be waiting
    /// for a CPU; with 2,048 slots a loaded 2-core machine dropped frames.
    pub const RING_BYTES: usize = 16 << 20;

    /// What a data plane wants: a receive ring and no qdisc.
    pub fn fast() -> PacketOptions {
        PacketOptions {
            ring: Some(Self::RING_BYTES),
            qdisc_bypass: true,
            vnet_hdr: false,
            send_only: false,
        }
    }
}

/// The shape of a socket's receive ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingInfo {
    /// Slots.
    pub frames: usize,
    /// Bytes per slot (frames up to about this minus 80 bytes fit; longer ones
    /// are read from the socket's queue).
    pub frame_size: usize,
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
    ring: Option<RxRing>,
    ring_error: Option<String>,
    vnet_hdr: bool,
}

impl std::fmt::Debug for PacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("ring", &self.ring())
            .finish()
    }
}

fn ctx(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// `struct ifreq` with the `ifr_mtu` member of its union.
#[repr(C)]
struct IfreqMtu {
    name: [libc::c_char; libc::IFNAMSIZ],
    mtu: libc::c_int,
    _pad: [u8; 20],
}

/// The MTU of `name` in the calling thread's namespace (via any socket there).
fn mtu(fd: &OwnedFd, name: &CString) -> Option<usize> {
    let mut req = IfreqMtu {
        name: [0; libc::IFNAMSIZ],
        mtu: 0,
        _pad: [0; 20],
    };
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return None;
    }
    for (d, s) in req.name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the name from and writes the MTU into a live
    // ifreq-sized buffer.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req as *mut IfreqMtu) };
    (r == 0 && req.mtu > 0).then_some(req.mtu as usize)
}

impl PacketSocket {
    /// Opens a non-blocking packet socket bound to `iface` (all protocols),
    /// received with `recvmmsg`, sent through the qdisc layer.
    pub fn open(iface: &str) -> io::Result<PacketSocket> {
        PacketSocket::open_with(iface, &PacketOptions::default())
    }

    /// Opens a non-blocking packet socket bound to `iface` (all protocols) with
    /// `opts`.
    pub fn open_with(iface: &str, opts: &PacketOptions) -> io::Result<PacketSocket> {
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
        // interface, so no frame of another interface slips in between (or into
        // the ring, which is set up before binding).
        let fd =
            socket(libc::AF_PACKET, libc::SOCK_RAW, 0).map_err(|e| ctx(e, "AF_PACKET socket"))?;
        // Kernels before 4.20 lack it; outgoing frames are then filtered by
        // sll_pkttype in recv_batch.
        let _ = setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);
        setsockopt_int(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)
            .map_err(|e| ctx(e, "PACKET_AUXDATA"))?;
        big_buffers(&fd);
        // Before the ring: the kernel refuses to change it once a ring exists.
        if opts.vnet_hdr {
            setsockopt_int(&fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1)
                .map_err(|e| ctx(e, "PACKET_VNET_HDR"))?;
        }
        let mut ring = None;
        let mut ring_error = None;
        if let Some(bytes) = opts.ring.filter(|_| !opts.send_only) {
            let mtu = mtu(&fd, &name).unwrap_or(1500);
            match RxRing::setup(&fd, mtu, bytes) {
                Ok(r) => {
                    // Frames longer than a slot (the MTU grew, a GSO frame) are
                    // queued whole on the socket too, instead of only truncated.
                    setsockopt_int(&fd, libc::SOL_PACKET, PACKET_COPY_THRESH, 1)
                        .map_err(|e| ctx(e, "PACKET_COPY_THRESH"))?;
                    ring = Some(r);
                }
                Err(e) => ring_error = Some(format!("PACKET_RX_RING: {e}")),
            }
        }
        if opts.qdisc_bypass {
            setsockopt_int(&fd, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1)
                .map_err(|e| ctx(e, "PACKET_QDISC_BYPASS"))?;
        }
        // SAFETY: all-zero is a valid sockaddr_ll.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        // Protocol 0 registers no receive hook: a send-only socket costs the
        // kernel nothing per frame on the interface.
        sll.sll_protocol = if opts.send_only {
            0
        } else {
            (libc::ETH_P_ALL as u16).to_be()
        };
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
        let mut tx = RawTx::new();
        tx.vnet_prefix = opts.vnet_hdr;
        Ok(PacketSocket {
            fd,
            ifindex: ifindex as i32,
            tx,
            stats: SocketStats::default(),
            kernel_drops: 0,
            ring,
            ring_error,
            vnet_hdr: opts.vnet_hdr,
        })
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The receive ring, if the socket has one.
    pub fn ring(&self) -> Option<RingInfo> {
        self.ring.as_ref().map(|r| RingInfo {
            frames: r.frame_nr(),
            frame_size: r.frame_size(),
        })
    }

    /// Whether frames carry a `virtio_net_hdr` ([`PacketOptions::vnet_hdr`]).
    pub fn vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// Why a ring asked for was not set up (the socket then uses `recvmmsg`).
    pub fn ring_error(&self) -> Option<&str> {
        self.ring_error.as_deref()
    }

    /// Whether the ring holds a frame not yet taken (one memory read, no
    /// system call: what a busy-polling loop checks). Always false without a
    /// ring; frames longer than a slot also count.
    pub fn ring_ready(&self) -> bool {
        self.ring.as_ref().is_some_and(|r| r.ready())
    }

    /// Receives up to `batch.capacity()` frames without blocking; returns how
    /// many are in `batch` now (0 if nothing was waiting). Truncated and outgoing
    /// frames are skipped and counted.
    ///
    /// With a ring, no system call is made: the frames stay in their ring slots,
    /// which `batch` holds until it is cleared or refilled (so release it
    /// promptly: the kernel drops frames when the ring is full). Frames longer
    /// than a slot are read from the socket's queue into the batch's buffers
    /// (one `recvmsg` each), keeping arrival order.
    pub fn recv_batch(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        if self.ring.is_some() {
            self.recv_ring(batch)?;
        } else {
            self.recv_plain(batch)?;
        }
        if !batch.is_empty() {
            self.stats.rx_batches += 1;
            self.stats.rx_frames += batch.len() as u64;
        }
        Ok(batch.len())
    }

    fn recv_ring(&mut self, batch: &mut RxBatch) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        let Some(ring) = self.ring.as_mut() else {
            return Ok(());
        };
        let cap = batch.capacity();
        // Own buffers used so far for frames read from the queue; never more
        // than the frames published, so never more than the capacity.
        let mut own = 0;
        while batch.len() < cap {
            match ring.next() {
                Slot::Empty => break,
                Slot::Frame {
                    slot,
                    data,
                    len,
                    status,
                    outgoing,
                } => {
                    if outgoing {
                        ring.map().release(slot);
                        self.stats.rx_outgoing += 1;
                        continue;
                    }
                    batch.push_ring(ring.map(), slot, data, len);
                    if status & TP_STATUS_CSUMNOTREADY != 0 {
                        let i = batch.len() - 1;
                        if crate::complete_l4_checksum(batch.frame_mut(i)) {
                            self.stats.rx_csum_completed += 1;
                        }
                    }
                }
                Slot::TooBig { copied: false, .. } => {
                    // Only the slot's worth arrived (no room on the queue).
                    self.stats.rx_truncated += 1;
                }
                Slot::TooBig { copied: true, .. } => {
                    // The copy is next on the queue: the kernel queued it when it
                    // filled the slot, and queues in ring order.
                    if !batch.recv_one(fd, own)? {
                        self.stats.rx_truncated += 1;
                        continue;
                    }
                    self.stats.rx_ring_copies += 1;
                    if let Some(st) = take_own(&mut self.stats, batch, own, self.vnet_hdr) {
                        if st & libc::TP_STATUS_CSUMNOTREADY != 0 {
                            let i = batch.len() - 1;
                            if crate::complete_l4_checksum(batch.frame_mut(i)) {
                                self.stats.rx_csum_completed += 1;
                            }
                        }
                        own += 1;
                    }
                }
            }
        }
        Ok(())
    }

    fn recv_plain(&mut self, batch: &mut RxBatch) -> io::Result<()> {
        let n = batch.recv_raw(self.fd.as_raw_fd(), usize::MAX)?;
        for slot in 0..n {
            if let Some(status) = take_own(&mut self.stats, batch, slot, self.vnet_hdr) {
                if status & libc::TP_STATUS_CSUMNOTREADY != 0 {
                    let i = batch.len() - 1;
                    if crate::complete_l4_checksum(batch.frame_mut(i)) {
                        self.stats.rx_csum_completed += 1;
                    }
                }
            }
        }
        Ok(())
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

    /// Sends frames gathered from `slices` (each [`TxFrame`] names a range of
    /// them) with their virtio-net headers, with as few system calls as
    /// possible; same result as [`PacketSocket::send_batch`]. Needs
    /// [`PacketOptions::vnet_hdr`].
    pub fn send_frames(&mut self, frames: &[TxFrame], slices: &[&[u8]]) -> io::Result<usize> {
        if !self.vnet_hdr {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "send_frames needs a socket opened with vnet_hdr",
            ));
        }
        if frames
            .iter()
            .any(|f| f.parts.end > slices.len() || f.parts.start > f.parts.end)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a frame names slices that are not there",
            ));
        }
        self.tx
            .send_frames(self.fd.as_raw_fd(), frames, slices, &mut self.stats)
    }

    /// Counters of skipped and fixed frames.
    pub fn stats(&self) -> SocketStats {
        SocketStats {
            rx_kernel_drops: self.kernel_drops,
            ..self.stats
        }
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

/// Publishes the message received into own buffer `slot` unless it is an
/// outgoing or truncated frame (counted); returns its auxdata status.
fn take_own(stats: &mut SocketStats, batch: &mut RxBatch, slot: usize, vnet: bool) -> Option<u32> {
    // SAFETY: the kernel filled names[slot] with a sockaddr_ll (family
    // AF_PACKET); sockaddr_storage is large and aligned enough for it.
    let sll = unsafe {
        &*(&batch.raw.names[slot] as *const libc::sockaddr_storage).cast::<libc::sockaddr_ll>()
    };
    if sll.sll_pkttype == libc::PACKET_OUTGOING {
        stats.rx_outgoing += 1;
        return None;
    }
    if batch.truncated(slot) {
        stats.rx_truncated += 1;
        return None;
    }
    let status = aux_status(&batch.raw.hdr[slot].msg_hdr);
    let len = batch.msg_len(slot);
    // With PACKET_VNET_HDR the data starts with the virtio header; what it says
    // (a partial checksum) is in the auxdata status too.
    let skip = if vnet { VNET_HDR_LEN } else { 0 };
    if len < skip {
        stats.rx_truncated += 1;
        return None;
    }
    batch.push_own(slot, skip, len - skip, None);
    Some(status)
}

/// `SIOCETHTOOL` and the legacy ethtool commands used by [`enable_tso`].
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with the `ifr_data` member of its union.
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

fn ethtool(fd: &OwnedFd, name: &[u8], cmd: u32, data: u32) -> io::Result<u32> {
    let mut v = EthtoolValue { cmd, data };
    let mut req = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data: (&mut v as *mut EthtoolValue).cast(),
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCETHTOOL reads the name and the command through ifr_data,
    // which points at a live ethtool_value, and writes the result there.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfreqData) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v.data)
}

/// Turns on TCP segmentation offload (with the scatter-gather and checksum
/// offload it needs) for frames sent *out of* `iface`, in the calling thread's
/// namespace, and returns whether TSO is on now. A data plane calls this on its
/// side of a VM link so TCP super-frames it sends (see
/// [`PacketSocket::send_frames`]) reach the VM whole, as a virtio NIC offering
/// guest TSO would deliver them; frames the VM sends are not affected.
pub fn enable_tso(iface: &str) -> io::Result<bool> {
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {iface:?}"),
        ));
    }
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    for cmd in [ETHTOOL_STXCSUM, ETHTOOL_SSG, ETHTOOL_STSO] {
        ethtool(&fd, name, cmd, 1).map_err(|e| ctx(e, format_args!("ethtool {iface}")))?;
    }
    Ok(ethtool(&fd, name, ETHTOOL_GTSO, 0)? != 0)
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
