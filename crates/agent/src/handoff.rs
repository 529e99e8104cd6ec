//! Handing received frames between the data plane's forwarding threads.
//!
//! Each forwarding thread reads its own sockets, but a frame belongs to the
//! shard of its flow ([`crate::dataplane::Sharding`]), which the kernel cannot
//! pick for us (see `dataplane/shard.rs`). A thread therefore splits every
//! batch it reads: its own frames it forwards in place ([`Subset`]), the
//! others it copies into a [`Parcel`] per owner and ships whole.
//!
//! Between every ordered pair of threads there is one [`link`]: a bounded
//! queue of full parcels one way and a queue of emptied parcels back, both
//! std's bounded channels used with `try_send` / `try_recv` only (lock-free
//! array queues; nothing blocks). The parcels are allocated once, when the
//! link is made: a link owns [`PARCELS_PER_LINK`] of them and no more, so
//! the memory in flight is bounded and the packet path allocates nothing
//! (a frame buffer grows to the longest frame it has held, then stays). When
//! every parcel of a link is in flight the sender drops what it cannot hand
//! over and counts it ([`Outbound::dropped`]), as a full receive ring would.
//!
//! One receiving socket's frames of one flow always go through the same
//! link, in order, so a flow is not reordered by the hand-off.

use std::net::SocketAddrV4;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};

use crate::dataplane::Frames;

/// Frames a parcel holds (a receive batch's worth).
pub const PARCEL_FRAMES: usize = 64;
/// Parcels one link owns: how many batches may wait for one thread from
/// another before the sender drops.
pub const PARCELS_PER_LINK: usize = 16;

/// Where the frames of a parcel were received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// On this VM port.
    Vm(u16),
    /// On the Geneve socket (each frame with its sender's address).
    Udp,
}

/// Frames of one origin, copied for another thread.
#[derive(Debug)]
pub struct Parcel {
    origin: Origin,
    len: usize,
    frames: Vec<(Vec<u8>, Option<SocketAddrV4>)>,
}

impl Parcel {
    fn new() -> Parcel {
        Parcel {
            origin: Origin::Udp,
            len: 0,
            frames: (0..PARCEL_FRAMES).map(|_| (Vec::new(), None)).collect(),
        }
    }

    /// Where its frames were received.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// How many frames it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn is_full(&self) -> bool {
        self.len == self.frames.len()
    }

    /// Copies a frame in (the caller checked there is room).
    fn push(&mut self, frame: &[u8], src: Option<SocketAddrV4>) {
        let slot = &mut self.frames[self.len];
        slot.0.clear();
        slot.0.extend_from_slice(frame);
        slot.1 = src;
        self.len += 1;
    }
}

impl Frames for Parcel {
    fn count(&self) -> usize {
        self.len
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self.frames[..self.len][i].0
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        self.frames[..self.len][i].1
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.frames[..self.len][i].0
    }
}

/// The sending end of a link: fills parcels and ships them.
#[derive(Debug)]
pub struct Outbound {
    full: SyncSender<Parcel>,
    empty: Receiver<Parcel>,
    /// Empty parcels at hand.
    free: Vec<Parcel>,
    /// The parcel being filled.
    open: Option<Parcel>,
    handed: u64,
    dropped: u64,
}

/// The receiving end of a link: takes full parcels, gives them back empty.
#[derive(Debug)]
pub struct Inbound {
    full: Receiver<Parcel>,
    empty: SyncSender<Parcel>,
}

/// A link from one thread to another, with its parcels.
pub fn link() -> (Outbound, Inbound) {
    // Each channel can hold every parcel of the link, so a send never finds
    // it full.
    let (full_tx, full_rx) = sync_channel(PARCELS_PER_LINK);
    let (empty_tx, empty_rx) = sync_channel(PARCELS_PER_LINK);
    (
        Outbound {
            full: full_tx,
            empty: empty_rx,
            free: (0..PARCELS_PER_LINK).map(|_| Parcel::new()).collect(),
            open: None,
            handed: 0,
            dropped: 0,
        },
        Inbound {
            full: full_rx,
            empty: empty_tx,
        },
    )
}

impl Outbound {
    /// Copies `frame` into the open parcel for `origin`; ships the open
    /// parcel first if it is full or of another origin. Returns whether a
    /// parcel was shipped; a frame that finds no free parcel is dropped and
    /// counted.
    pub fn put(&mut self, origin: Origin, frame: &[u8], src: Option<SocketAddrV4>) -> bool {
        let mut shipped = false;
        if self
            .open
            .as_ref()
            .is_some_and(|p| p.origin != origin || p.is_full())
        {
            shipped = self.flush();
        }
        if self.open.is_none() {
            let Some(mut p) = self.free.pop().or_else(|| self.empty.try_recv().ok()) else {
                self.dropped += 1;
                return shipped;
            };
            p.origin = origin;
            p.len = 0;
            self.open = Some(p);
        }
        if let Some(p) = self.open.as_mut() {
            p.push(frame, src);
            self.handed += 1;
        }
        shipped
    }

    /// Ships the open parcel if it holds anything; returns whether it did.
    pub fn flush(&mut self) -> bool {
        let Some(p) = self.open.take() else {
            return false;
        };
        if p.is_empty() {
            self.open = Some(p);
            return false;
        }
        match self.full.try_send(p) {
            Ok(()) => true,
            // The receiver is gone (its thread ended): keep the parcel.
            Err(TrySendError::Full(mut p) | TrySendError::Disconnected(mut p)) => {
                self.dropped += p.len as u64;
                p.len = 0;
                self.free.push(p);
                false
            }
        }
    }

    /// Frames copied into parcels so far.
    pub fn handed(&self) -> u64 {
        self.handed
    }

    /// Frames dropped because every parcel of the link was in flight.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl Inbound {
    /// The next full parcel, if one waits.
    pub fn take(&mut self) -> Option<Parcel> {
        // Empty, or the sender's thread ended.
        self.full.try_recv().ok()
    }

    /// Gives a parcel back to its sender, emptied.
    pub fn give_back(&mut self, mut p: Parcel) {
        p.len = 0;
        // Never full (it holds every parcel of the link); if the sender is
        // gone the parcel is freed.
        let _ = self.empty.try_send(p);
    }
}

/// This thread's frames of a received batch, by index, as a batch of their
/// own: forwarded in place, without a copy.
pub struct Subset<'a, F: ?Sized> {
    frames: &'a mut F,
    idx: &'a [u32],
}

impl<'a, F: Frames + ?Sized> Subset<'a, F> {
    /// The frames of `frames` at `idx` (each below `frames.count()`).
    pub fn new(frames: &'a mut F, idx: &'a [u32]) -> Subset<'a, F> {
        Subset { frames, idx }
    }
}

impl<F: Frames + ?Sized> Frames for Subset<'_, F> {
    fn count(&self) -> usize {
        self.idx.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        self.frames.frame(self.idx[i] as usize)
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        self.frames.src(self.idx[i] as usize)
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        self.frames.frame_mut(self.idx[i] as usize)
    }
}

/// Splits a received batch between threads: the indices of thread `me`'s
/// frames go into `mine`; every other frame is copied to the link of its
/// shard (`out[shard]`; a shard without a link, which only `me` should be,
/// keeps its frames too). `shard_of` names a frame's shard. Returns a mask
/// of the shards a parcel was shipped to (bit `s`; the open parcels are not
/// shipped here: see [`flush_all`]).
pub fn split<F: Frames + ?Sized>(
    frames: &F,
    origin: Origin,
    me: usize,
    mut shard_of: impl FnMut(&[u8]) -> usize,
    mine: &mut Vec<u32>,
    out: &mut [Option<Outbound>],
) -> u64 {
    mine.clear();
    let mut shipped = 0u64;
    for i in 0..frames.count() {
        let f = frames.frame(i);
        let s = shard_of(f);
        match out.get_mut(s).and_then(|o| o.as_mut()) {
            Some(o) if s != me => {
                if o.put(origin, f, frames.src(i)) {
                    shipped |= 1 << s;
                }
            }
            _ => mine.push(i as u32),
        }
    }
    shipped
}

/// Ships every open parcel; returns the mask of shards one went to.
pub fn flush_all(out: &mut [Option<Outbound>]) -> u64 {
    let mut shipped = 0u64;
    for (s, o) in out.iter_mut().enumerate() {
        if o.as_mut().is_some_and(|o| o.flush()) {
            shipped |= 1 << s;
        }
    }
    shipped
}

#[cfg(test)]
mod tests;
