//! Simulations reproducing the Stratos, NFaaS, CoMb and Seawall evaluations.
//!
//! Library modules are deterministic for a given seed and do no I/O; only [`cli`] (the
//! reproduction runners) and [`bench`](mod@bench) touch files, clocks and the terminal.

pub mod bench;
pub mod cli;
pub mod comb;
pub mod datacenter;
pub mod maxmin;
pub mod nfaas;
pub mod seawall;
pub mod stratos;
pub mod svg;
pub mod topology;

/// Errors from simulations and reproduction runners.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A simulation parameter is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A tenant's initial VMs could not be placed.
    #[error("no free VM slot left for tenant {tenant}")]
    OutOfSlots {
        /// Tenant that could not be placed.
        tenant: usize,
    },
    /// Flow distribution failed.
    #[error("flow distribution: {0}")]
    Distribution(#[from] sluice_optimizer::stratos::StratosError),
    /// NFaaS placement failed.
    #[error("NFaaS placement: {0}")]
    Nfaas(#[from] sluice_optimizer::nfaas::NfaasError),
    /// An input file is malformed.
    #[error("parsing {what}: {detail}")]
    Parse {
        /// File or data set being parsed.
        what: String,
        /// What is wrong.
        detail: String,
    },
    /// A CoMb formulation failed.
    #[error("CoMb: {0}")]
    Comb(#[from] sluice_optimizer::comb::CombError),
    /// Routing failed (for example a disconnected topology).
    #[error("routing: {0}")]
    Graph(#[from] sluice_optimizer::graph::GraphError),
    /// Writing outputs failed.
    #[error("writing {path}: {source}")]
    Io {
        /// File or directory being written.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
}
