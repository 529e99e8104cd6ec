//! Packet buffers, their pool, and batches.
//!
//! Batches, not packets, cross every boundary of the data plane: a function is
//! handed a [`Batch`] and decides a [`Verdict`] for each packet in it. Buffers come
//! from a [`PacketPool`], so steady-state processing allocates nothing per packet;
//! a batch hands its buffers back to the pool when recycled.
//!
//! The pool has two classes. Every packet carries a small buffer inline (a
//! 1500-byte MTU frame and its headroom), allocated when the pool is made, so the
//! common path touches one allocation per packet as it always did. A frame longer
//! than that (a jumbo frame, a capture taken with segmentation offload, up to
//! [`MAX_LARGE_FRAME`] bytes) also takes a separately allocated large buffer from
//! the pool's second, bounded class; the packet's frame then lives there until it
//! is freed. Large buffers are made on first need, up to the bound, and reused
//! from then on, so a pool that never sees a large frame never holds one.

use sluice_wire::PacketMeta;

/// Bytes in a packet's inline (small) buffer: a 1500-byte MTU frame, VLAN tag,
/// and room for Geneve encapsulation, rounded up.
pub const BUF_SIZE: usize = 2048;
/// Bytes kept free in front of a received frame so an encapsulation header can be
/// prepended without moving the frame (in both classes).
pub const HEADROOM: usize = 128;
/// The largest frame the inline buffer holds; longer frames take a large buffer.
pub const MAX_FRAME: usize = BUF_SIZE - HEADROOM;
/// The largest frame a packet holds at all: the parser refuses longer frames
/// (an IPv4 or IPv6 packet's length field is 16 bits), so no buffer needs more.
pub const MAX_LARGE_FRAME: usize = u16::MAX as usize;
/// Bytes in one large buffer: the headroom and the largest frame.
pub const LARGE_BUF_SIZE: usize = HEADROOM + MAX_LARGE_FRAME;
/// Large buffers a pool made by [`PacketPool::new`] may hold at most (4 MiB).
pub const DEFAULT_LARGE_BUFFERS: usize = 64;
/// Default number of packets per batch (as DPDK's and NetBricks' bursts).
pub const DEFAULT_BATCH: usize = 32;

/// One large buffer.
type LargeBuf = Box<[u8; LARGE_BUF_SIZE]>;

/// The inline buffer, on a cache-line boundary: with [`HEADROOM`] a multiple of
/// 64, a received frame starts on one too, so copying it in is aligned.
#[repr(C, align(64))]
struct InlineBuf([u8; BUF_SIZE]);

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
///
/// The layout is fixed so that everything read to reach the frame (`large`,
/// `start`, `len`) and the verdict share the first cache line, followed by the
/// parse and the buffer: left to the compiler, `large` landed on a cache line
/// of its own at the end of the buffer, one more line touched per packet.
#[repr(C)]
pub struct PacketInner {
    /// When set, the frame lives here instead of in `buf`.
    large: Option<LargeBuf>,
    start: u32,
    len: u32,
    /// Capture or arrival time in nanoseconds (any epoch, monotone within a trace).
    pub ts_ns: u64,
    /// The verdict so far.
    pub verdict: Verdict,
    /// Port (interface) the packet arrived on.
    pub port: u16,
    /// The single-pass parse of the frame, filled by the data plane's parse stage.
    pub meta: PacketMeta,
    buf: InlineBuf,
}

impl PacketInner {
    /// The buffer the frame lives in (a select between two pointers, no copy).
    #[inline(always)]
    fn storage(&self) -> &[u8] {
        match &self.large {
            Some(b) => &b[..],
            None => &self.buf.0[..],
        }
    }

    #[inline(always)]
    fn storage_mut(&mut self) -> &mut [u8] {
        match &mut self.large {
            Some(b) => &mut b[..],
            None => &mut self.buf.0[..],
        }
    }
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
            .field("large", &self.large.is_some())
            .field("ts_ns", &self.ts_ns)
            .field("flow", &self.meta.flow)
            .field("verdict", &self.verdict)
            .finish()
    }
}

impl Packet {
    fn new_boxed() -> Packet {
        Packet(Box::new(PacketInner {
            buf: InlineBuf([0u8; BUF_SIZE]),
            large: None,
            start: HEADROOM as u32,
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
        let (s, e) = (self.start as usize, (self.start + self.len) as usize);
        &self.storage()[s..e]
    }

    /// The frame bytes, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (s, e) = (self.start as usize, (self.start + self.len) as usize);
        &mut self.0.storage_mut()[s..e]
    }

    /// The frame and its metadata, both mutable (for rewrites that keep them in step).
    #[inline]
    pub fn data_and_meta_mut(&mut self) -> (&mut [u8], &mut PacketMeta) {
        let inner = &mut *self.0;
        let (s, e) = (inner.start as usize, (inner.start + inner.len) as usize);
        let buf: &mut [u8] = match &mut inner.large {
            Some(b) => &mut b[..],
            None => &mut inner.buf.0[..],
        };
        (&mut buf[s..e], &mut inner.meta)
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

    /// True if the packet carries a large buffer (its frame may exceed [`MAX_FRAME`]).
    #[inline]
    pub fn is_large(&self) -> bool {
        self.large.is_some()
    }

    /// The longest frame this packet's buffer holds at the standard headroom:
    /// [`MAX_FRAME`], or [`MAX_LARGE_FRAME`] with a large buffer.
    #[inline]
    pub fn max_frame(&self) -> usize {
        self.storage().len() - HEADROOM
    }

    /// Replaces the frame with `bytes`, at the standard headroom. Fails if longer
    /// than this packet's buffer holds ([`Packet::max_frame`]); take packets from
    /// [`PacketPool::alloc_for`] to get one big enough.
    #[inline]
    pub fn set_frame(&mut self, bytes: &[u8]) -> Result<(), FrameTooLong> {
        let max = self.max_frame();
        if bytes.len() > max {
            return Err(FrameTooLong {
                len: bytes.len(),
                max,
            });
        }
        let i = &mut *self.0;
        i.start = HEADROOM as u32;
        i.len = bytes.len() as u32;
        i.storage_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// The whole writable area after the headroom, for building a frame in place;
    /// follow with [`Packet::set_len`].
    #[inline]
    pub fn frame_area(&mut self) -> &mut [u8] {
        let i = &mut *self.0;
        i.start = HEADROOM as u32;
        &mut i.storage_mut()[HEADROOM..]
    }

    /// Sets the frame length after building in [`Packet::frame_area`].
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.storage().len() - self.start as usize,
            "frame length beyond buffer"
        );
        self.len = len as u32;
    }

    /// Grows the frame at the front by `n` bytes (for encapsulation) and returns them.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.start as usize {
            return None;
        }
        let i = &mut *self.0;
        i.start -= n as u32;
        i.len += n as u32;
        let s = i.start as usize;
        Some(&mut i.storage_mut()[s..s + n])
    }

    /// Removes `n` bytes from the front (for decapsulation).
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len as usize {
            return false;
        }
        self.start += n as u32;
        self.len -= n as u32;
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
        self.start = HEADROOM as u32;
        self.len = 0;
        self.ts_ns = 0;
        self.port = 0;
        self.verdict = Verdict::Forward;
    }
}

/// A frame longer than a packet's buffer can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame of {len} bytes exceeds the {max}-byte packet buffer")]
pub struct FrameTooLong {
    /// The frame's length.
    pub len: usize,
    /// The most the buffer holds.
    pub max: usize,
}

/// Why the pool could not give a packet for a frame. Each is a drop for the
/// caller to count; [`AllocError::reason`] names it in drop counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Every packet of the pool is in use.
    #[error("packet pool exhausted: all {0} buffers in use")]
    Exhausted(usize),
    /// The frame needs a large buffer and every large buffer is in use.
    #[error(
        "large-frame pool exhausted: all {0} buffers for frames over {MAX_FRAME} bytes in use"
    )]
    LargeExhausted(usize),
    /// Longer than any buffer (and than any frame the parser accepts).
    #[error("frame of {0} bytes exceeds the largest packet buffer ({MAX_LARGE_FRAME} bytes)")]
    TooLong(usize),
}

impl AllocError {
    /// A short stable snake_case name for drop counters.
    pub fn reason(&self) -> &'static str {
        match self {
            AllocError::Exhausted(_) => "pool_exhausted",
            AllocError::LargeExhausted(_) => "large_pool_exhausted",
            AllocError::TooLong(_) => "oversize",
        }
    }
}

/// Frames a pool refused, by reason (kept by the pool so that a caller can report
/// them without counting at every call site).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolRefusals {
    /// No packet was free.
    pub exhausted: u64,
    /// The frame needed a large buffer and none was free.
    pub large_exhausted: u64,
    /// The frame was longer than [`MAX_LARGE_FRAME`].
    pub too_long: u64,
}

impl PoolRefusals {
    /// All refusals.
    pub fn total(&self) -> u64 {
        self.exhausted + self.large_exhausted + self.too_long
    }
}

/// A pool of packet buffers owned by one core (no locking: each data-plane core has
/// its own pool, as each has its own batches).
pub struct PacketPool {
    free: Vec<Packet>,
    capacity: usize,
    large_free: Vec<LargeBuf>,
    /// Large buffers made so far (free or attached to a packet).
    large_made: usize,
    large_capacity: usize,
    refused: PoolRefusals,
}

impl PacketPool {
    /// A pool holding `capacity` packets, all allocated now, and up to
    /// `capacity.min(DEFAULT_LARGE_BUFFERS)` large buffers.
    pub fn new(capacity: usize) -> Self {
        Self::with_large(capacity, capacity.min(DEFAULT_LARGE_BUFFERS))
    }

    /// A pool holding `capacity` packets, all allocated now, and up to `large`
    /// large buffers, each made the first time it is needed (a pool that never
    /// sees a frame over [`MAX_FRAME`] costs no memory for them). `large` is
    /// capped at `capacity`: a large buffer is only ever attached to a packet.
    pub fn with_large(capacity: usize, large: usize) -> Self {
        let free = (0..capacity).map(|_| Packet::new_boxed()).collect();
        let large_capacity = large.min(capacity);
        PacketPool {
            free,
            capacity,
            large_free: Vec::with_capacity(large_capacity),
            large_made: 0,
            large_capacity,
            refused: PoolRefusals::default(),
        }
    }

    /// Takes a packet with the inline buffer only, or `None` if the pool is
    /// exhausted (the caller drops the frame and counts it, as a NIC does when
    /// its ring is full).
    #[inline]
    pub fn alloc(&mut self) -> Option<Packet> {
        let p = self.free.pop();
        if p.is_none() {
            self.refused.exhausted += 1;
        }
        p
    }

    /// Takes a packet able to hold a frame of `len` bytes: with a large buffer
    /// attached when `len` exceeds [`MAX_FRAME`]. Refusals are counted
    /// ([`PacketPool::refusals`]) and returned, never a panic.
    #[inline]
    pub fn alloc_for(&mut self, len: usize) -> Result<Packet, AllocError> {
        if len <= MAX_FRAME {
            return self.alloc().ok_or(AllocError::Exhausted(self.capacity));
        }
        self.alloc_large(len)
    }

    /// The rare path of [`PacketPool::alloc_for`], kept out of line so the small
    /// path stays as short as it was.
    #[cold]
    #[inline(never)]
    fn alloc_large(&mut self, len: usize) -> Result<Packet, AllocError> {
        if len > MAX_LARGE_FRAME {
            self.refused.too_long += 1;
            return Err(AllocError::TooLong(len));
        }
        let buf = match self.large_free.pop() {
            Some(b) => b,
            None if self.large_made < self.large_capacity => {
                self.large_made += 1;
                new_large()
            }
            None => {
                self.refused.large_exhausted += 1;
                return Err(AllocError::LargeExhausted(self.large_capacity));
            }
        };
        let Some(mut p) = self.alloc() else {
            self.large_free.push(buf);
            return Err(AllocError::Exhausted(self.capacity));
        };
        p.0.large = Some(buf);
        Ok(p)
    }

    /// Returns a packet (and its large buffer, if any).
    #[inline]
    pub fn free(&mut self, mut p: Packet) {
        if p.0.large.is_some() {
            self.free_large(&mut p);
        }
        p.reset();
        debug_assert!(self.free.len() < self.capacity, "buffer returned twice");
        self.free.push(p);
    }

    #[cold]
    #[inline(never)]
    fn free_large(&mut self, p: &mut Packet) {
        if let Some(b) = p.0.large.take() {
            debug_assert!(
                self.large_free.len() < self.large_made,
                "large buffer returned twice"
            );
            self.large_free.push(b);
        }
    }

    /// Packets currently free.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Packets the pool was created with.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Large buffers that could be attached now: the free ones and those not made yet.
    pub fn large_available(&self) -> usize {
        self.large_free.len() + (self.large_capacity - self.large_made)
    }

    /// Most large buffers the pool holds.
    pub fn large_capacity(&self) -> usize {
        self.large_capacity
    }

    /// Frames refused so far, by reason.
    pub fn refusals(&self) -> PoolRefusals {
        self.refused
    }
}

/// A zeroed large buffer, allocated directly on the heap (never on the stack).
fn new_large() -> LargeBuf {
    vec![0u8; LARGE_BUF_SIZE]
        .into_boxed_slice()
        .try_into()
        .expect("a slice of LARGE_BUF_SIZE bytes")
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

    /// Copies `frame` into a pooled buffer (a large one for a frame over
    /// [`MAX_FRAME`]) and appends it. Returns false (and drops the frame) if the
    /// pool refused it; the pool counts why ([`PacketPool::refusals`]).
    #[inline]
    pub fn push_frame(
        &mut self,
        pool: &mut PacketPool,
        frame: &[u8],
        ts_ns: u64,
        port: u16,
    ) -> bool {
        self.try_push_frame(pool, frame, ts_ns, port).is_ok()
    }

    /// [`Batch::push_frame`], saying why a frame was refused.
    #[inline]
    pub fn try_push_frame(
        &mut self,
        pool: &mut PacketPool,
        frame: &[u8],
        ts_ns: u64,
        port: u16,
    ) -> Result<(), AllocError> {
        let mut p = pool.alloc_for(frame.len())?;
        // Cannot fail: alloc_for gave a buffer for this length.
        let _ = p.set_frame(frame);
        p.ts_ns = ts_ns;
        p.port = port;
        self.pkts.push(p);
        Ok(())
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
        assert_eq!(
            b.try_push_frame(&mut pool, &[7], 7, 1),
            Err(AllocError::Exhausted(2)),
            "exhausted pool refuses"
        );
        assert_eq!(pool.refusals().exhausted, 1);
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
        assert_eq!(
            p.set_frame(&vec![0; MAX_FRAME + 1]),
            Err(FrameTooLong {
                len: MAX_FRAME + 1,
                max: MAX_FRAME
            }),
            "a small packet refuses a large frame"
        );
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + i / 251) as u8).collect()
    }

    #[test]
    fn small_frames_never_take_large_buffers() {
        let mut pool = PacketPool::new(4);
        let mut b = Batch::with_capacity(4);
        assert!(b.push_frame(&mut pool, &pattern(MAX_FRAME), 1, 0));
        assert!(!b.pkts[0].is_large());
        assert_eq!(b.pkts[0].max_frame(), MAX_FRAME);
        assert_eq!(b.pkts[0].data(), &pattern(MAX_FRAME)[..]);
        assert_eq!(pool.large_available(), 4, "no large buffer made");
        b.recycle(&mut pool);
    }

    #[test]
    fn large_frames_round_trip_in_both_sizes() {
        let mut pool = PacketPool::with_large(8, 2);
        let mut b = Batch::with_capacity(8);
        for len in [MAX_FRAME + 1, 9014, MAX_LARGE_FRAME] {
            let f = pattern(len);
            b.try_push_frame(&mut pool, &f, 1, 0).unwrap();
            let p = b.pkts.last().unwrap();
            assert!(p.is_large());
            assert_eq!(p.max_frame(), MAX_LARGE_FRAME);
            assert_eq!(p.data(), &f[..], "{len}-byte frame intact");
            b.recycle(&mut pool);
        }
        assert_eq!(pool.large_available(), 2);
        // A large packet encapsulates and decapsulates like a small one.
        let mut p = pool.alloc_for(9014).unwrap();
        p.set_frame(&pattern(9014)).unwrap();
        p.push_front(HEADROOM).unwrap().fill(0xee);
        assert_eq!(p.len(), 9014 + HEADROOM);
        assert!(p.push_front(1).is_none(), "headroom used up");
        assert!(p.pull_front(HEADROOM));
        assert_eq!(p.data(), &pattern(9014)[..]);
        p.data_mut()[0] = 0;
        let (d, _) = p.data_and_meta_mut();
        assert_eq!((d.len(), d[0], d[9013]), (9014, 0, pattern(9014)[9013]));
        let area = p.frame_area().len();
        assert_eq!(area, MAX_LARGE_FRAME);
        p.set_len(MAX_LARGE_FRAME);
        assert_eq!(p.len(), MAX_LARGE_FRAME);
        pool.free(p);
        // The large buffer went back with its packet: a small frame now gets a
        // small packet, and both large buffers are free again.
        let q = pool.alloc_for(60).unwrap();
        assert!(!q.is_large());
        assert_eq!(pool.large_available(), 2);
        pool.free(q);
    }

    #[test]
    fn large_class_is_bounded_and_its_exhaustion_counted() {
        let mut pool = PacketPool::with_large(4, 2);
        let mut b = Batch::with_capacity(4);
        let big = pattern(9014);
        assert!(b.push_frame(&mut pool, &big, 1, 0));
        assert!(b.push_frame(&mut pool, &big, 2, 0));
        assert_eq!(
            b.try_push_frame(&mut pool, &big, 3, 0),
            Err(AllocError::LargeExhausted(2))
        );
        assert_eq!(
            AllocError::LargeExhausted(2).reason(),
            "large_pool_exhausted"
        );
        // Small frames still flow while the large class is exhausted.
        assert!(b.push_frame(&mut pool, &[1; 60], 4, 0));
        assert_eq!(
            pool.available(),
            1,
            "the refused frame gave its packet back"
        );
        assert_eq!(
            b.try_push_frame(&mut pool, &vec![0; MAX_LARGE_FRAME + 1], 5, 0),
            Err(AllocError::TooLong(MAX_LARGE_FRAME + 1))
        );
        assert_eq!(
            pool.refusals(),
            PoolRefusals {
                exhausted: 0,
                large_exhausted: 1,
                too_long: 1
            }
        );
        b.recycle(&mut pool);
        assert_eq!((pool.available(), pool.large_available()), (4, 2));
        assert!(
            b.push_frame(&mut pool, &big, 6, 0),
            "freed large buffers are reused"
        );
        // With every packet taken, a large frame is refused for the packet, and the
        // large buffer it would have used stays free.
        let mut held = Vec::new();
        while let Some(p) = pool.alloc() {
            held.push(p);
        }
        assert_eq!(pool.alloc_for(9014).unwrap_err(), AllocError::Exhausted(4));
        assert_eq!(pool.large_available(), 1);
        for p in held {
            pool.free(p);
        }
        b.recycle(&mut pool);
    }

    #[test]
    fn large_class_never_exceeds_the_packets() {
        let pool = PacketPool::with_large(3, 100);
        assert_eq!(pool.large_capacity(), 3);
        assert_eq!(
            PacketPool::new(1000).large_capacity(),
            DEFAULT_LARGE_BUFFERS
        );
    }

    #[test]
    fn the_frame_is_reached_from_the_first_cache_line_and_starts_aligned() {
        use std::mem::{align_of, offset_of};
        for end in [
            offset_of!(PacketInner, large) + 8,
            offset_of!(PacketInner, start) + 4,
            offset_of!(PacketInner, len) + 4,
            offset_of!(PacketInner, verdict) + std::mem::size_of::<Verdict>(),
        ] {
            assert!(end <= 64, "a field the hot path reads ends at {end}");
        }
        assert_eq!(align_of::<PacketInner>(), 64);
        assert_eq!((offset_of!(PacketInner, buf) + HEADROOM) % 64, 0);
        let mut pool = PacketPool::new(1);
        let mut p = pool.alloc_for(64).unwrap();
        p.set_frame(&[1; 64]).unwrap();
        assert_eq!(p.data().as_ptr() as usize % 64, 0);
        pool.free(p);
    }
}
