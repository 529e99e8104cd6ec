//! NFaaS tenant-centric and service-centric placement with best fit (Tables I and II).
//!
//! Best fit places the next item on the eligible server with the *smallest* amount of
//! available CPU; a server is eligible if it has enough CPU and memory. A new server is
//! opened when none is eligible.

/// CPU cores and memory (MB) of a network function or a server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resources {
    /// CPU cores.
    pub cpu: f64,
    /// Memory in MB.
    pub mem: f64,
}

/// How network functions are grouped onto servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// All NFs of a customer on one server.
    TenantCentric,
    /// Each NF placed on its own; with `dedicated`, a server hosts a single service type.
    ServiceCentric {
        /// Restrict each server to one service (NF index).
        dedicated: bool,
    },
}

/// Errors from NFaaS placement.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NfaasError {
    /// A demand or capacity is negative or not finite.
    #[error("customer {customer} NF {nf}: demand must be finite and non-negative")]
    BadDemand {
        /// Customer index.
        customer: usize,
        /// NF index.
        nf: usize,
    },
    /// The server type has non-positive capacity.
    #[error("server capacity must be positive and finite")]
    BadServer,
    /// An item does not fit even on an empty server.
    #[error("customer {customer} (NF {nf:?}) needs more than one empty server offers")]
    TooLarge {
        /// Customer index.
        customer: usize,
        /// NF index, or `None` for a whole customer in tenant-centric mode.
        nf: Option<usize>,
    },
}

/// A used server in a placement.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// Capacity left.
    pub free: Resources,
    /// Service hosted when servers are dedicated.
    pub service: Option<usize>,
}

/// Result of [`place`].
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Servers opened, in opening order.
    pub servers: Vec<Server>,
    /// `assignment[c][f]`: server hosting NF `f` of customer `c`.
    pub assignment: Vec<Vec<usize>>,
}

const EPS: f64 = 1e-9;

fn fits(free: Resources, need: Resources) -> bool {
    free.cpu + EPS >= need.cpu && free.mem + EPS >= need.mem
}

/// Places every customer's NFs (`customers[c][f]`) on servers of type `server` in
/// customer order with best fit.
pub fn place(
    customers: &[Vec<Resources>],
    server: Resources,
    mode: Mode,
) -> Result<Placement, NfaasError> {
    if !(server.cpu.is_finite() && server.mem.is_finite() && server.cpu > 0.0 && server.mem > 0.0) {
        return Err(NfaasError::BadServer);
    }
    for (c, nfs) in customers.iter().enumerate() {
        for (f, d) in nfs.iter().enumerate() {
            if !(d.cpu.is_finite() && d.mem.is_finite() && d.cpu >= 0.0 && d.mem >= 0.0) {
                return Err(NfaasError::BadDemand { customer: c, nf: f });
            }
        }
    }
    let mut servers: Vec<Server> = Vec::new();
    let mut assignment = Vec::with_capacity(customers.len());
    for (c, nfs) in customers.iter().enumerate() {
        match mode {
            Mode::TenantCentric => {
                let need = Resources {
                    cpu: nfs.iter().map(|d| d.cpu).sum(),
                    mem: nfs.iter().map(|d| d.mem).sum(),
                };
                let s = best_fit(&mut servers, server, need, None).ok_or(NfaasError::TooLarge {
                    customer: c,
                    nf: None,
                })?;
                assignment.push(vec![s; nfs.len()]);
            }
            Mode::ServiceCentric { dedicated } => {
                let mut row = Vec::with_capacity(nfs.len());
                for (f, &need) in nfs.iter().enumerate() {
                    let service = dedicated.then_some(f);
                    let s = best_fit(&mut servers, server, need, service).ok_or(
                        NfaasError::TooLarge {
                            customer: c,
                            nf: Some(f),
                        },
                    )?;
                    row.push(s);
                }
                assignment.push(row);
            }
        }
    }
    Ok(Placement {
        servers,
        assignment,
    })
}

/// NFaaS's best fit among `servers` (`(id, free capacity)`): the eligible one (enough
/// CPU and memory for `need`) with the smallest available CPU; the earliest wins ties,
/// which keeps runs reproducible. `None`: none is eligible. Shared by [`place`] and the
/// controller's tenant- and service-centric placement.
pub fn best_fit_among<I>(
    servers: impl IntoIterator<Item = (I, Resources)>,
    need: Resources,
) -> Option<I> {
    let mut best: Option<(I, f64)> = None;
    for (id, free) in servers {
        if fits(free, need) && best.as_ref().is_none_or(|(_, cpu)| free.cpu < *cpu) {
            best = Some((id, free.cpu));
        }
    }
    best.map(|(id, _)| id)
}

fn best_fit(
    servers: &mut Vec<Server>,
    cap: Resources,
    need: Resources,
    service: Option<usize>,
) -> Option<usize> {
    if !fits(cap, need) {
        return None;
    }
    let pick = best_fit_among(
        servers
            .iter()
            .enumerate()
            .filter(|(_, s)| service.is_none() || s.service == service)
            .map(|(i, s)| (i, s.free)),
        need,
    );
    let i = pick.unwrap_or_else(|| {
        servers.push(Server { free: cap, service });
        servers.len() - 1
    });
    servers[i].free.cpu -= need.cpu;
    servers[i].free.mem -= need.mem;
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cpu: f64, mem: f64) -> Resources {
        Resources { cpu, mem }
    }

    /// Table I "large" customer: firewall, IDS, web proxy.
    fn large() -> Vec<Resources> {
        vec![r(0.4, 71.0), r(0.4, 485.0), r(2.0, 160.0)]
    }

    #[test]
    fn paper_example_small_servers_large_customers() {
        // A 4-core server fits one 2.8-core tenant; NF-level placement packs 4 cores.
        let customers = vec![large(); 10];
        let small = r(4.0, 8192.0);
        let t = place(&customers, small, Mode::TenantCentric).unwrap();
        assert_eq!(t.servers.len(), 10);
        let s = place(&customers, small, Mode::ServiceCentric { dedicated: false }).unwrap();
        assert_eq!(s.servers.len(), 7, "28 cores over 4-core servers");
        // The whole customer stays on one server in tenant mode.
        assert!(t.assignment.iter().all(|a| a.iter().all(|&x| x == a[0])));
    }

    #[test]
    fn best_fit_prefers_the_fullest_eligible_server() {
        let customers = vec![vec![r(3.0, 1.0)], vec![r(2.0, 1.0)], vec![r(1.0, 1.0)]];
        let p = place(&customers, r(4.0, 100.0), Mode::TenantCentric).unwrap();
        // 3 -> s0 (1 left); 2 -> s1 (2 left); 1 -> s0, the server with least CPU left.
        assert_eq!(p.assignment, vec![vec![0], vec![1], vec![0]]);
    }

    #[test]
    fn best_fit_among_takes_the_least_cpu_that_fits_and_the_first_of_equals() {
        let free = [
            ("a", r(4.0, 10.0)),
            ("b", r(1.0, 10.0)),
            ("c", r(1.0, 10.0)),
            ("d", r(0.5, 10.0)),
        ];
        assert_eq!(best_fit_among(free, r(1.0, 1.0)), Some("b"));
        assert_eq!(best_fit_among(free, r(1.0, 11.0)), None, "memory counts");
        // Unlimited servers (infinite capacity) fit worst.
        let free = [(1, r(f64::INFINITY, f64::INFINITY)), (2, r(2.0, 10.0))];
        assert_eq!(best_fit_among(free, r(1.0, 1.0)), Some(2));
    }

    #[test]
    fn dedicated_servers_host_one_service() {
        let customers = vec![large(); 3];
        let p = place(
            &customers,
            r(4.0, 8192.0),
            Mode::ServiceCentric { dedicated: true },
        )
        .unwrap();
        for row in &p.assignment {
            for (f, &s) in row.iter().enumerate() {
                assert_eq!(p.servers[s].service, Some(f));
            }
        }
    }

    #[test]
    fn invalid_inputs_are_errors() {
        assert_eq!(
            place(&[large()], r(2.0, 8192.0), Mode::TenantCentric).unwrap_err(),
            NfaasError::TooLarge {
                customer: 0,
                nf: None
            }
        );
        assert_eq!(
            place(&[vec![r(-1.0, 1.0)]], r(2.0, 8192.0), Mode::TenantCentric).unwrap_err(),
            NfaasError::BadDemand { customer: 0, nf: 0 }
        );
        assert_eq!(
            place(&[], r(0.0, 1.0), Mode::TenantCentric).unwrap_err(),
            NfaasError::BadServer
        );
    }
}
