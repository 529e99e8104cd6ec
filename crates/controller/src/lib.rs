//! The controller of Sluice. This crate currently holds its core, the chain
//! compiler ([`compile`]): a pure function from a validated tenant spec and a
//! placement to the FIB of every host (Stratos §3.2, §6).

pub mod compile;

pub use compile::{compile, CompileError, Compiled, HostFib, Placement};
