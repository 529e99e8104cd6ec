//! How the multi-instance tests steer packets (`any_instance*.rs`,
//! `cached_*.rs`): the question a run asks its plan for each packet, and the
//! hash-range owners and leases of the cached runs.

// Every test binary includes this module and uses a different part of it.
#![allow(dead_code)]

use sluice_state::Ownership;
use sluice_wire::parse::parse_frame;

/// Where the packet a plan is asked about falls.
#[derive(Clone, Copy, Debug)]
pub enum At {
    /// Packet `i` opens a batch: the plan may change leases or kill an instance.
    Start(usize),
    /// Packet `i` would extend the batch being filled: the plan only answers
    /// (it is given no instances and a copy of which are alive), and a
    /// different answer ends the batch.
    Fill(usize),
}

impl At {
    /// The packet's index if it opens a batch.
    pub fn start(self) -> Option<usize> {
        match self {
            At::Start(i) => Some(i),
            At::Fill(_) => None,
        }
    }

    /// The packet's index in the trace.
    pub fn index(self) -> usize {
        match self {
            At::Start(i) | At::Fill(i) => i,
        }
    }
}

/// Decides which of the instances `I` gets a packet, given where it falls, its
/// frame, the instances and which are alive (setting one `false` kills it:
/// dropped without a flush, its memory lost).
pub type Plan<'a, I> = dyn FnMut(At, &[u8], &mut [I], &mut [bool]) -> usize + 'a;

/// The instance whose range (of `split`) holds the frame's direction-invariant
/// hash, as the switch's hash-range groups steer.
pub fn owner_of(split: &[Option<(u32, u32)>], frame: &[u8]) -> usize {
    let h = parse_frame(frame)
        .map(|m| m.flow.symmetric_hash())
        .unwrap_or(0);
    split
        .iter()
        .position(|r| r.is_some_and(|(lo, hi)| lo <= h && h <= hi))
        .unwrap_or(0)
}

/// A lease on `ranges`, valid far into the future.
pub fn lease(epoch: u64, ranges: Vec<(u32, u32)>) -> Ownership {
    Ownership {
        epoch,
        ranges,
        valid_until_ns: u64::MAX,
    }
}
