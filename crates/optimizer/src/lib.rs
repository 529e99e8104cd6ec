//! Placement and traffic-distribution optimisation for Sluice.
//!
//! Formulations from three papers, solved with HiGHS where they are linear programs:
//! CoMb's network-wide and per-box LPs ([`comb`]) and the hash/prefix filters that
//! realise its fractions ([`hash`]), Stratos's network-aware flow distribution and the
//! min-cut step of its placement ([`stratos`]), NFaaS best-fit placement ([`nfaas`]) and
//! shortest-path routing ([`graph`]). [`lp`] wraps the solver and
//! names the constraint families that make a model infeasible.
//!
//! Everything here is pure and deterministic: no I/O, no clocks, no randomness.

pub mod aligned;
pub mod comb;
pub mod graph;
pub mod hash;
pub mod lp;
mod maxflow;
pub mod nfaas;
pub mod stratos;
