//! TCP stream reassembly (placeholder header; implementation in progress).
pub mod streams;
