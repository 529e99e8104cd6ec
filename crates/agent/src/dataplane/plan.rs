//! What one received batch turns into: messages to send, each a small header
//! from the plan's arena followed by a slice of a received frame, so outputs
//! never copy what was received (the kernel gathers the two iovecs).

use std::net::SocketAddrV4;

use super::stats::CounterId;

/// Where an output message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dest {
    /// Out of the packet socket of VM port `0`.
    Vm(u16),
    /// Through the UDP socket to this address.
    Udp(SocketAddrV4),
}

/// One message to send: `arena[head]` then `frames[frame][body]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Out {
    /// Destination.
    pub dest: Dest,
    /// Counted against (tx or send_fail).
    pub counter: CounterId,
    /// Header bytes in the plan's arena.
    pub head: (u32, u32),
    /// Index of the received frame the body comes from (unused if the body is empty).
    pub frame: u32,
    /// Body range within that frame.
    pub body: (u32, u32),
}

impl Out {
    /// Bytes on the wire (payload of the socket).
    pub fn len(&self) -> usize {
        (self.head.1 - self.head.0 + self.body.1 - self.body.0) as usize
    }

    /// True for an empty message (never produced).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The messages one received batch produced, reused from batch to batch.
#[derive(Debug, Default)]
pub struct TxPlan {
    /// Header bytes.
    pub arena: Vec<u8>,
    /// Messages, in the order they were produced.
    pub outs: Vec<Out>,
    /// A buffer the core reuses while building messages.
    pub(super) scratch: Vec<u8>,
}

impl TxPlan {
    /// An empty plan.
    pub fn new() -> TxPlan {
        TxPlan::default()
    }

    /// Empties the plan, keeping its allocations.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.outs.clear();
    }

    /// True when the plan has nothing to send.
    pub fn is_empty(&self) -> bool {
        self.outs.is_empty()
    }

    /// The header bytes of `o`.
    pub fn head(&self, o: &Out) -> &[u8] {
        &self.arena[o.head.0 as usize..o.head.1 as usize]
    }

    /// The body of `o`, given the received frames.
    pub fn body<'a, F: Frames + ?Sized>(&self, frames: &'a F, o: &Out) -> &'a [u8] {
        if o.body.0 == o.body.1 {
            return &[];
        }
        &frames.frame(o.frame as usize)[o.body.0 as usize..o.body.1 as usize]
    }

    /// The whole message `o` as one buffer (tests and debugging; allocates).
    pub fn message<F: Frames + ?Sized>(&self, frames: &F, o: &Out) -> Vec<u8> {
        let mut v = self.head(o).to_vec();
        v.extend_from_slice(self.body(frames, o));
        v
    }

    /// Appends a message made of `parts` alone, no received frame in it
    /// (feedback, and packets that waited in a Seawall queue).
    pub(super) fn push_own(&mut self, dest: Dest, counter: CounterId, parts: &[&[u8]]) {
        let start = self.arena.len() as u32;
        for p in parts {
            self.arena.extend_from_slice(p);
        }
        self.outs.push(Out {
            dest,
            counter,
            head: (start, self.arena.len() as u32),
            frame: 0,
            body: (0, 0),
        });
    }

    pub(super) fn push_head(&mut self, bytes: &[u8]) -> (u32, u32) {
        let s = self.arena.len() as u32;
        self.arena.extend_from_slice(bytes);
        (s, self.arena.len() as u32)
    }
}

/// A batch of received frames or datagrams.
pub trait Frames {
    /// How many.
    fn count(&self) -> usize;
    /// The `i`th frame or datagram.
    fn frame(&self, i: usize) -> &[u8];
    /// Where datagram `i` came from (UDP only).
    fn src(&self, i: usize) -> Option<SocketAddrV4>;
    /// The `i`th frame, writable (sealed datagrams are opened in place).
    fn frame_mut(&mut self, i: usize) -> &mut [u8];
}

impl Frames for sluice_netio::RxBatch {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        sluice_netio::RxBatch::frame(self, i)
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        sluice_netio::RxBatch::src(self, i)
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        sluice_netio::RxBatch::frame_mut(self, i)
    }
}

impl Frames for [(Vec<u8>, Option<SocketAddrV4>)] {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self[i].0
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        self[i].1
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self[i].0
    }
}

impl Frames for Vec<(Vec<u8>, Option<SocketAddrV4>)> {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self[i].0
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        self[i].1
    }
    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self[i].0
    }
}
