//! NFaaS packing experiments (Fig. 5) with the customer and server types of Tables I-II.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_optimizer::nfaas::{place, Mode, Resources};

use crate::SimError;

/// Customer sizes of Table I.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomerType {
    /// 300 connections/s.
    Small,
    /// 600 connections/s.
    Medium,
    /// 1200 connections/s.
    Large,
}

impl CustomerType {
    /// All types, smallest first.
    pub const ALL: [CustomerType; 3] = [
        CustomerType::Small,
        CustomerType::Medium,
        CustomerType::Large,
    ];

    /// Name as in the paper.
    pub fn name(self) -> &'static str {
        match self {
            CustomerType::Small => "small",
            CustomerType::Medium => "medium",
            CustomerType::Large => "large",
        }
    }

    /// Firewall, IDS and web proxy demands (cores, MB), Table I.
    pub fn nfs(self) -> Vec<Resources> {
        let r = |cpu, mem| Resources { cpu, mem };
        match self {
            CustomerType::Small => vec![r(0.1, 71.0), r(0.1, 462.0), r(0.5, 147.0)],
            CustomerType::Medium => vec![r(0.2, 71.0), r(0.2, 470.0), r(1.0, 151.0)],
            CustomerType::Large => vec![r(0.4, 71.0), r(0.4, 485.0), r(2.0, 160.0)],
        }
    }
}

/// Server sizes of Table II.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerType {
    /// 4 cores, 8 GB.
    Small,
    /// 6 cores, 12 GB.
    Medium,
    /// 8 cores, 16 GB.
    Large,
    /// 12 cores, 24 GB.
    Xlarge,
}

impl ServerType {
    /// All types, smallest first.
    pub const ALL: [ServerType; 4] = [
        ServerType::Small,
        ServerType::Medium,
        ServerType::Large,
        ServerType::Xlarge,
    ];

    /// Name as in the paper.
    pub fn name(self) -> &'static str {
        match self {
            ServerType::Small => "small",
            ServerType::Medium => "medium",
            ServerType::Large => "large",
            ServerType::Xlarge => "xlarge",
        }
    }

    /// Capacity (cores, MB), Table II.
    pub fn capacity(self) -> Resources {
        let (cpu, gb) = match self {
            ServerType::Small => (4.0, 8.0),
            ServerType::Medium => (6.0, 12.0),
            ServerType::Large => (8.0, 16.0),
            ServerType::Xlarge => (12.0, 24.0),
        };
        Resources {
            cpu,
            mem: gb * 1024.0,
        }
    }
}

/// Servers needed by each placement mode for one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerCounts {
    /// Tenant-centric.
    pub tenant: usize,
    /// Service-centric, NFs of different services may share a server.
    pub service: usize,
    /// Service-centric with servers dedicated to one service.
    pub service_dedicated: usize,
}

impl ServerCounts {
    /// Servers saved by service-centric placement, in percent of tenant-centric.
    pub fn saving_pct(&self) -> f64 {
        100.0 * (self.tenant as f64 - self.service as f64) / self.tenant as f64
    }
}

/// Servers of type `server` needed for `customers` under each mode.
pub fn count_servers(
    customers: &[CustomerType],
    server: ServerType,
) -> Result<ServerCounts, SimError> {
    let demands: Vec<Vec<Resources>> = customers.iter().map(|c| c.nfs()).collect();
    let cap = server.capacity();
    Ok(ServerCounts {
        tenant: place(&demands, cap, Mode::TenantCentric)?.servers.len(),
        service: place(&demands, cap, Mode::ServiceCentric { dedicated: false })?
            .servers
            .len(),
        service_dedicated: place(&demands, cap, Mode::ServiceCentric { dedicated: true })?
            .servers
            .len(),
    })
}

/// `n` customers of uniformly random type, reproducible from `seed`.
pub fn mixed_customers(n: usize, seed: u64) -> Vec<CustomerType> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| CustomerType::ALL[rng.gen_range(0..3)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_customers_on_small_servers_save_thirty_percent() {
        let c = vec![CustomerType::Large; 1000];
        let n = count_servers(&c, ServerType::Small).unwrap();
        // One 2.8-core tenant per 4-core server versus 2800 cores packed 4 per server.
        assert_eq!(n.tenant, 1000);
        assert_eq!(n.service, 700);
        assert!((n.saving_pct() - 30.0).abs() < 1e-9);
    }

    #[test]
    fn mixed_customers_are_reproducible() {
        assert_eq!(mixed_customers(50, 9), mixed_customers(50, 9));
        assert_ne!(mixed_customers(50, 9), mixed_customers(50, 10));
    }
}
