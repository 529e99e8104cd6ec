//! A `PACKET_RX_RING` (`TPACKET_V2`) shared with the kernel: the kernel copies
//! each received frame into the next free slot and flips the slot's status word;
//! we read frames where they lie and hand slots back by flipping it again. No
//! system call per frame, and no copy into user buffers.
//!
//! Why version 2 and not 3: `TPACKET_V3` hands whole blocks to user space, and a
//! block is only handed over when it is full or when its retire timer (at least a
//! millisecond) expires. At low rates (a request/response exchange, TCP's ACK
//! clock) that adds up to a millisecond per hop. Version 2 hands over every frame
//! as soon as it is written, and the ring still needs no system call per frame.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// `PACKET_VERSION` socket option and `TPACKET_V2` value (`linux/if_packet.h`).
pub(crate) const PACKET_VERSION: i32 = 10;
pub(crate) const TPACKET_V2: i32 = 1;
/// `PACKET_RX_RING`.
const PACKET_RX_RING: i32 = 5;
/// `PACKET_COPY_THRESH`: frames that do not fit a slot are also queued whole on
/// the socket's ordinary receive queue, and their slot says `TP_STATUS_COPY`.
pub(crate) const PACKET_COPY_THRESH: i32 = 7;

/// Slot status bits (`tp_status`).
pub(crate) const TP_STATUS_KERNEL: u32 = 0;
pub(crate) const TP_STATUS_USER: u32 = 1;
pub(crate) const TP_STATUS_COPY: u32 = 1 << 1;
pub(crate) const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;

/// `struct tpacket2_hdr`, at the start of every slot.
#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

/// Where the `sockaddr_ll` of a slot starts: after the header, 16-byte aligned.
const SLL_OFFSET: usize = (std::mem::size_of::<Tpacket2Hdr>() + 15) & !15;

/// Room a slot needs in front of the frame: the kernel puts the MAC header at
/// `align16(hdrlen + 16) - 14` with `hdrlen = SLL_OFFSET + sizeof(sockaddr_ll)`.
const SLOT_OVERHEAD: usize = 96;

/// The mapping of one ring. Shared (by `Arc`) between the socket and the
/// batches still reading frames from it, so it is unmapped only after both are
/// done; the kernel keeps the pages alive while they are mapped, even after the
/// socket is closed.
pub(crate) struct RingMap {
    base: *mut u8,
    len: usize,
    frame_size: usize,
    frame_nr: usize,
}

// SAFETY: the mapping is plain shared memory; slot ownership (kernel or us) is
// decided by the atomic status word, and a slot we own is read and written by
// one batch at a time (the one the socket handed it to).
unsafe impl Send for RingMap {}
// SAFETY: as above; shared access only touches status words, atomically.
unsafe impl Sync for RingMap {}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

impl RingMap {
    fn slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.frame_nr);
        // SAFETY: block size is a multiple of the frame size (see `RxRing::setup`),
        // so slot i starts i * frame_size bytes in, inside the mapping.
        unsafe { self.base.add(i * self.frame_size) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: every slot starts with the u32 tp_status, 16-byte aligned (the
        // mapping is page aligned and frame_size a multiple of 16); the kernel
        // and we access it as a 32-bit word.
        unsafe { &*self.slot(i).cast::<AtomicU32>() }
    }

    /// Gives slot `i` back to the kernel (after its frame was used).
    pub(crate) fn release(&self, i: usize) {
        // Release: our reads (and checksum writes) of the frame happen before the
        // kernel may reuse the slot.
        self.status(i).store(TP_STATUS_KERNEL, Ordering::Release);
    }
}

/// What [`RxRing::next`] found in the next slot.
pub(crate) enum Slot {
    /// Nothing more: the kernel still owns the next slot.
    Empty,
    /// A frame in slot `slot`: `len` bytes at `data` (ours until released).
    Frame {
        slot: usize,
        data: *mut u8,
        len: usize,
        status: u32,
        outgoing: bool,
    },
    /// A frame longer than the slot. With `copied`, the whole frame waits on the
    /// socket's receive queue. The slot is already released.
    TooBig { copied: bool },
}

/// The receive ring of one packet socket.
pub(crate) struct RxRing {
    map: Arc<RingMap>,
    /// Next slot to look at.
    head: usize,
}

/// Sizes of a ring: slots big enough for an MTU-sized frame (a power of two,
/// at least 2 KiB), as many as fit in `bytes` (at least 64).
pub(crate) fn ring_geometry(mtu: usize, bytes: usize) -> (usize, usize, usize, usize) {
    let frame_size = (SLOT_OVERHEAD + 14 + 4 + mtu).next_power_of_two().max(2048);
    let page = 4096usize;
    let block_size = frame_size.max(page);
    let frames_per_block = block_size / frame_size;
    let block_nr = (bytes / block_size).max(64usize.div_ceil(frames_per_block));
    (
        block_size,
        block_nr,
        frame_size,
        block_nr * frames_per_block,
    )
}

impl RxRing {
    /// Switches `fd` to `TPACKET_V2`, asks for a ring for frames up to `mtu`
    /// bytes of payload in about `bytes` of memory, and maps it. Must run before
    /// the socket is bound.
    pub(crate) fn setup(fd: &OwnedFd, mtu: usize, bytes: usize) -> io::Result<RxRing> {
        crate::setsockopt_int(fd, libc::SOL_PACKET, PACKET_VERSION, TPACKET_V2)?;
        let (block_size, block_nr, frame_size, frame_nr) = ring_geometry(mtu, bytes);
        let req = TpacketReq {
            tp_block_size: block_size as u32,
            tp_block_nr: block_nr as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frame_nr as u32,
        };
        // SAFETY: passes a live tpacket_req and its size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_RX_RING,
                (&req as *const TpacketReq).cast(),
                std::mem::size_of::<TpacketReq>() as u32,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = block_size * block_nr;
        // SAFETY: maps the ring the kernel just allocated for this socket; the
        // result is checked below. (The ring's pages are the kernel's and never
        // swapped; mapping them allocates nothing.)
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RxRing {
            map: Arc::new(RingMap {
                base: base.cast(),
                len,
                frame_size,
                frame_nr,
            }),
            head: 0,
        })
    }

    /// The mapping, for batches that hold slots.
    pub(crate) fn map(&self) -> &Arc<RingMap> {
        &self.map
    }

    /// Slots in the ring.
    pub(crate) fn frame_nr(&self) -> usize {
        self.map.frame_nr
    }

    /// Bytes of one slot.
    pub(crate) fn frame_size(&self) -> usize {
        self.map.frame_size
    }

    /// Whether the next slot holds a frame (a memory read, no system call).
    pub(crate) fn ready(&self) -> bool {
        self.map.status(self.head).load(Ordering::Acquire) & TP_STATUS_USER != 0
    }

    /// Takes the next slot if the kernel filled it.
    pub(crate) fn next(&mut self) -> Slot {
        let i = self.head;
        let status = self.map.status(i).load(Ordering::Acquire);
        if status & TP_STATUS_USER == 0 {
            return Slot::Empty;
        }
        self.head = (i + 1) % self.map.frame_nr;
        let slot = self.map.slot(i);
        // SAFETY: the slot is ours (status USER, read with Acquire, so the
        // kernel's writes to it are visible); the header is at its start.
        let h = unsafe { &*slot.cast::<Tpacket2Hdr>() };
        let (len, snap, mac) = (h.tp_len as usize, h.tp_snaplen as usize, h.tp_mac as usize);
        if snap < len || mac + snap > self.map.frame_size {
            self.map.release(i);
            return Slot::TooBig {
                copied: status & TP_STATUS_COPY != 0,
            };
        }
        // SAFETY: sockaddr_ll follows the header at SLL_OFFSET, inside the slot.
        let sll = unsafe { &*slot.add(SLL_OFFSET).cast::<libc::sockaddr_ll>() };
        Slot::Frame {
            slot: i,
            // SAFETY: mac + snap <= frame_size was checked above.
            data: unsafe { slot.add(mac) },
            len: snap,
            status,
            outgoing: sll.sll_pkttype == libc::PACKET_OUTGOING,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_matches_the_kernel() {
        assert_eq!(std::mem::size_of::<Tpacket2Hdr>(), 32);
        assert_eq!(SLL_OFFSET, 32);
        // macoff for Ethernet: align16(32 + 20 + 16) - 14 = 66, well inside the
        // overhead reserved per slot.
        let hdrlen = SLL_OFFSET + std::mem::size_of::<libc::sockaddr_ll>();
        assert_eq!(((hdrlen + 16 + 15) & !15) - 14, 66);
        // With a 10-byte virtio-net header the network header moves 10 bytes
        // on: 90 bytes of the slot before the IP header, inside the overhead.
        const { assert!(SLOT_OVERHEAD >= 90) };
    }

    #[test]
    fn geometry_fits_frames_and_blocks() {
        for (mtu, bytes) in [
            (1500, 4 << 20),
            (9000, 4 << 20),
            (1500, 0),
            (65535, 1 << 20),
        ] {
            let (bs, bn, fs, fnr) = ring_geometry(mtu, bytes);
            assert!(fs.is_power_of_two() && fs >= SLOT_OVERHEAD + 18 + mtu);
            assert_eq!(bs % fs, 0);
            assert_eq!(bs % 4096, 0);
            assert_eq!(fnr, bn * (bs / fs));
            assert!(fnr >= 64);
        }
        assert_eq!(ring_geometry(1500, 4 << 20).2, 2048);
    }
}
