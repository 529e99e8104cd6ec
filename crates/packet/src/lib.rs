//! Packet buffers, their pool, and batches.
//!
//! Batches, not packets, cross every boundary of the data plane: a function is
//! handed a [`Batch`] and decides a [`Verdict`] for each packet in it. Buffers come
//! from a [`PacketPool`] allocated up front, so steady-state processing allocates
//! nothing per packet; a batch hands its buffers back to the pool when recycled.

use sluice_wire::PacketMeta;

/// Bytes in one packet buffer: a 1500-byte MTU frame, VLAN tag, and room for
/// Geneve encapsulation, rounded up.
pub const BUF_SIZE: usize = 2048;
/// Bytes kept free in front of a received frame so an encapsulation header can be
/// prepended without moving the frame.
pub const HEADROOM: usize = 128;
/// The largest frame a buffer holds.
pub const MAX_FRAME: usize = BUF_SIZE - HEADROOM;
/// Default number of packets per batch (as DPDK's and NetBricks' bursts).
pub const DEFAULT_BATCH: usize = 32;

/// Why a packet was dropped: which stage and a short stable reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DropReason {
    /// Index of the stage (function in its chain) that dropped it; `u8::MAX` for the parser.
    pub stage: u8,
    /// A short snake_case reason, e.g. `"no_state"` or `"rule_deny"`.
    pub reason: &'static str,
}

/// What happens to a packet after a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Continue to the next stage, then out.
    #[default]
    Forward,
    /// Dropped; later stages skip it.
    Drop(DropReason),
}

/// The contents of a packet: its buffer, the frame's position in it, and metadata.
///
/// Reached through [`Packet`], which boxes it so that moving a packet between the
/// pool and batches moves one pointer, not a 2 KiB buffer and its metadata.
pub struct PacketInner {
    buf: [u8; BUF_SIZE],
    start: u16,
    len: u16,
    /// Capture or arrival time in nanoseconds (any epoch, monotone within a trace).
    pub ts_ns: u64,
    /// Port (interface) the packet arrived on.
    pub port: u16,
    /// The single-pass parse of the frame, filled by the data plane's parse stage.
    pub meta: PacketMeta,
    /// The verdict so far.
    pub verdict: Verdict,
}

/// One packet (a pooled, boxed [`PacketInner`]; its public fields are reached
/// directly, e.g. `p.meta`, `p.verdict`).
pub struct Packet(Box<PacketInner>);

impl core::ops::Deref for Packet {
    type Target = PacketInner;
    #[inline]
    fn deref(&self) -> &PacketInner {
        &self.0
    }
}

impl core::ops::DerefMut for Packet {
    #[inline]
    fn deref_mut(&mut self) -> &mut PacketInner {
        &mut self.0
    }
}

impl core::fmt::Debug for Packet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Packet")
            .field("len", &self.len)
            .field("ts_ns", &self.ts_ns)
            .field("flow", &self.meta.flow)
            .field("verdict", &self.verdict)
            .finish()
    }
}

impl Packet {
    fn new_boxed() -> Packet {
        Packet(Box::new(PacketInner {
            buf: [0u8; BUF_SIZE],
            start: HEADROOM as u16,
            len: 0,
            ts_ns: 0,
            port: 0,
            meta: PacketMeta::default(),
            verdict: Verdict::Forward,
        }))
    }

    /// The frame bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start as usize..(self.start + self.len) as usize]
    }

    /// The frame bytes, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let i = &mut *self.0;
        &mut i.buf[i.start as usize..(i.start + i.len) as usize]
    }

    /// The frame and its metadata, both mutable (for rewrites that keep them in step).
    #[inline]
    pub fn data_and_meta_mut(&mut self) -> (&mut [u8], &mut PacketMeta) {
        let inner = &mut *self.0;
        let (s, e) = (inner.start as usize, (inner.start + inner.len) as usize);
        (&mut inner.buf[s..e], &mut inner.meta)
    }

    /// Frame length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True if the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Replaces the frame with `bytes`, at the standard headroom. Fails if too long.
    #[inline]
    pub fn set_frame(&mut self, bytes: &[u8]) -> Result<(), FrameTooLong> {
        if bytes.len() > MAX_FRAME {
            return Err(FrameTooLong(bytes.len()));
        }
        let i = &mut *self.0;
        i.start = HEADROOM as u16;
        i.len = bytes.len() as u16;
        i.buf[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// The whole writable area after the headroom, for building a frame in place;
    /// follow with [`Packet::set_len`].
    #[inline]
    pub fn frame_area(&mut self) -> &mut [u8] {
        let i = &mut *self.0;
        i.start = HEADROOM as u16;
        &mut i.buf[HEADROOM..]
    }

    /// Sets the frame length after building in [`Packet::frame_area`].
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= BUF_SIZE - self.start as usize,
            "frame length beyond buffer"
        );
        self.len = len as u16;
    }

    /// Grows the frame at the front by `n` bytes (for encapsulation) and returns them.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.start as usize {
            return None;
        }
        let i = &mut *self.0;
        i.start -= n as u16;
        i.len += n as u16;
        let s = i.start as usize;
        Some(&mut i.buf[s..s + n])
    }

    /// Removes `n` bytes from the front (for decapsulation).
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len as usize {
            return false;
        }
        self.start += n as u16;
        self.len -= n as u16;
        true
    }

    /// True unless a stage dropped the packet.
    #[inline]
    pub fn is_live(&self) -> bool {
        self.verdict == Verdict::Forward
    }

    /// Marks the packet dropped by `stage` for `reason` (first drop wins).
    #[inline]
    pub fn drop_by(&mut self, stage: u8, reason: &'static str) {
        if self.verdict == Verdict::Forward {
            self.verdict = Verdict::Drop(DropReason { stage, reason });
        }
    }

    fn reset(&mut self) {
        // The metadata is not cleared: the parse stage overwrites all of it before
        // any function reads it, and clearing 150 bytes per packet shows in profiles.
        self.start = HEADROOM as u16;
        self.len = 0;
        self.ts_ns = 0;
        self.port = 0;
        self.verdict = Verdict::Forward;
    }
}

/// A frame longer than a buffer can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLong(pub usize);

impl core::fmt::Display for FrameTooLong {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "frame of {} bytes exceeds the {MAX_FRAME}-byte buffer",
            self.0
        )
    }
}

impl std::error::Error for FrameTooLong {}

/// A pool of packet buffers owned by one core (no locking: each data-plane core has
/// its own pool, as each has its own batches).
pub struct PacketPool {
    free: Vec<Packet>,
    capacity: usize,
}

impl PacketPool {
    /// A pool holding `capacity` buffers, all allocated now.
    pub fn new(capacity: usize) -> Self {
        let free = (0..capacity).map(|_| Packet::new_boxed()).collect();
        PacketPool { free, capacity }
    }

    /// Takes a buffer, or `None` if the pool is exhausted (the caller drops the
    /// frame and counts it, as a NIC does when its ring is full).
    #[inline]
    pub fn alloc(&mut self) -> Option<Packet> {
        self.free.pop()
    }

    /// Returns a buffer.
    #[inline]
    pub fn free(&mut self, mut p: Packet) {
        p.reset();
        debug_assert!(self.free.len() < self.capacity, "buffer returned twice");
        self.free.push(p);
    }

    /// Buffers currently free.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Buffers the pool was created with.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A batch of packets processed together by every stage.
#[derive(Debug, Default)]
pub struct Batch {
    /// The packets, in arrival order.
    pub pkts: Vec<Packet>,
}

impl Batch {
    /// An empty batch able to hold `cap` packets without reallocating.
    pub fn with_capacity(cap: usize) -> Self {
        Batch {
            pkts: Vec::with_capacity(cap),
        }
    }

    /// Number of packets.
    #[inline]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// True if the batch holds no packets.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Copies `frame` into a pooled buffer and appends it. Returns false (and drops
    /// the frame) if the pool is empty or the frame too long.
    #[inline]
    pub fn push_frame(
        &mut self,
        pool: &mut PacketPool,
        frame: &[u8],
        ts_ns: u64,
        port: u16,
    ) -> bool {
        let Some(mut p) = pool.alloc() else {
            return false;
        };
        if p.set_frame(frame).is_err() {
            pool.free(p);
            return false;
        }
        p.ts_ns = ts_ns;
        p.port = port;
        self.pkts.push(p);
        true
    }

    /// Returns every buffer to `pool`, leaving the batch empty for reuse.
    pub fn recycle(&mut self, pool: &mut PacketPool) {
        for p in self.pkts.drain(..) {
            pool.free(p);
        }
    }

    /// Packets still forwarded.
    pub fn live(&self) -> impl Iterator<Item = &Packet> {
        self.pkts.iter().filter(|p| p.is_live())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_round_trip_and_exhaustion() {
        let mut pool = PacketPool::new(2);
        let mut b = Batch::with_capacity(4);
        assert!(b.push_frame(&mut pool, &[1, 2, 3], 5, 0));
        assert!(b.push_frame(&mut pool, &[4], 6, 1));
        assert!(
            !b.push_frame(&mut pool, &[7], 7, 1),
            "exhausted pool refuses"
        );
        assert_eq!(b.pkts[0].data(), &[1, 2, 3]);
        b.pkts[0].drop_by(1, "x");
        b.pkts[0].drop_by(2, "y");
        assert_eq!(
            b.pkts[0].verdict,
            Verdict::Drop(DropReason {
                stage: 1,
                reason: "x"
            })
        );
        assert_eq!(b.live().count(), 1);
        b.recycle(&mut pool);
        assert_eq!(pool.available(), 2);
        let p = pool.alloc().unwrap();
        assert!(
            p.is_live() && p.is_empty(),
            "recycled buffers come back clean"
        );
    }

    #[test]
    fn encapsulation_headroom() {
        let mut pool = PacketPool::new(1);
        let mut p = pool.alloc().unwrap();
        p.set_frame(&[9; 10]).unwrap();
        p.push_front(50).unwrap().fill(1);
        assert_eq!(p.len(), 60);
        assert!(p.push_front(HEADROOM).is_none());
        assert!(p.pull_front(50));
        assert_eq!(p.data(), &[9; 10]);
        assert!(p.set_frame(&vec![0; MAX_FRAME + 1]).is_err());
    }
}
