//! The distributed programmable switch of Stratos §3.2.1, one port at a time.
//!
//! Each host runs one port of a tenant's switch. The port holds its share of the
//! forwarding information base ([`Fib`]): OpenFlow-style entries matching the ingress
//! port, the tenant (Geneve VNI), the chain position carried in the tunnel, and
//! header fields, with actions that deliver to a local VM or NF instance, tunnel to
//! another host, mirror a copy, or drop. A scaled middlebox is a [`Group`]: the
//! 32-bit direction-invariant flow hash space split into ranges, one per instance,
//! so both directions of a flow choose the same instance and a split can be changed
//! by moving range boundaries. The fabric between hosts is Geneve (RFC 8926) over
//! UDP ([`tunnel`]).
//!
//! Everything here is sans-IO: the host agent moves packets between interfaces and
//! calls [`Fib::lookup`] per packet of a batch. A FIB is replaced whole
//! ([`Fib::replace`]); the agent keeps forwarding with its last FIB while the
//! controller is unreachable.

pub mod fib;
pub mod tunnel;

pub use fib::{
    Action, Decision, Entry, Fib, FibError, Group, GroupId, HostId, LookupKey, Match, Output,
    PortId, Prefix, MIRROR_HOP,
};
