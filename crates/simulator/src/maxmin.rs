//! Weighted max-min fair sharing by progressive filling.
//!
//! Every flow crosses a set of resources (directed links, middlebox instances) and has a
//! demand. Rates grow in proportion to each flow's weight until a resource saturates or
//! the flow reaches its demand; flows through a saturated resource freeze. With weights
//! equal to demands (what the Stratos simulation uses) every unconstrained flow reaches its
//! demand at the same instant, so aggregates of many TCP connections share a bottleneck in
//! proportion to their size.

/// One flow in a max-min computation.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// Indices of the resources the flow crosses (duplicates count twice).
    pub resources: Vec<usize>,
    /// Rate the flow would use if nothing constrained it.
    pub demand: f64,
    /// Share weight; must be positive.
    pub weight: f64,
}

/// Computes the weighted max-min fair rates of `flows` over resources with `capacity`.
/// Infinite capacities are allowed. Flows with zero demand or weight get rate 0.
pub fn max_min_rates(capacity: &[f64], flows: &[Flow]) -> Vec<f64> {
    let mut rate = vec![0.0; flows.len()];
    let mut active: Vec<bool> = flows
        .iter()
        .map(|f| f.demand > 0.0 && f.weight > 0.0)
        .collect();
    let mut remaining = capacity.to_vec();
    // Each round freezes at least one flow, so this terminates in at most |flows| rounds.
    loop {
        let mut weight_sum = vec![0.0; capacity.len()];
        let mut any = false;
        for (f, flow) in flows.iter().enumerate() {
            if active[f] {
                any = true;
                for &r in &flow.resources {
                    weight_sum[r] += flow.weight;
                }
            }
        }
        if !any {
            break;
        }
        // Largest common increment `dt` of the fill level before something saturates.
        let mut dt = f64::INFINITY;
        for (r, &w) in weight_sum.iter().enumerate() {
            if w > 0.0 {
                dt = dt.min(remaining[r].max(0.0) / w);
            }
        }
        for (f, flow) in flows.iter().enumerate() {
            if active[f] {
                dt = dt.min((flow.demand - rate[f]) / flow.weight);
            }
        }
        let dt = dt.max(0.0);
        for (f, flow) in flows.iter().enumerate() {
            if active[f] {
                rate[f] += dt * flow.weight;
                for &r in &flow.resources {
                    remaining[r] -= dt * flow.weight;
                }
            }
        }
        let saturated: Vec<bool> = remaining
            .iter()
            .zip(capacity)
            .map(|(&rem, &cap)| cap.is_finite() && rem <= 1e-9 * cap.max(1.0))
            .collect();
        let mut froze = false;
        for (f, flow) in flows.iter().enumerate() {
            if active[f]
                && (rate[f] >= flow.demand * (1.0 - 1e-12)
                    || flow.resources.iter().any(|&r| saturated[r]))
            {
                active[f] = false;
                froze = true;
            }
        }
        if !froze {
            // Numerical safety: nothing saturated although dt was finite.
            break;
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(resources: Vec<usize>, demand: f64) -> Flow {
        Flow {
            resources,
            demand,
            weight: 1.0,
        }
    }

    #[test]
    fn classic_parking_lot() {
        // Link 0 and link 1 of capacity 1; flow A crosses both, B only 0, C only 1.
        let r = max_min_rates(
            &[1.0, 1.0],
            &[
                flow(vec![0, 1], 10.0),
                flow(vec![0], 10.0),
                flow(vec![1], 10.0),
            ],
        );
        for x in r {
            assert!((x - 0.5).abs() < 1e-9);
        }
    }

    #[test]
    fn small_demands_release_capacity_to_others() {
        let r = max_min_rates(
            &[10.0],
            &[
                flow(vec![0], 2.0),
                flow(vec![0], 100.0),
                flow(vec![0], 100.0),
            ],
        );
        assert!((r[0] - 2.0).abs() < 1e-9);
        assert!((r[1] - 4.0).abs() < 1e-9 && (r[2] - 4.0).abs() < 1e-9);
    }

    #[test]
    fn weights_share_proportionally_and_infinite_capacity_is_free() {
        let flows = vec![
            Flow {
                resources: vec![0, 1],
                demand: 100.0,
                weight: 3.0,
            },
            Flow {
                resources: vec![0],
                demand: 100.0,
                weight: 1.0,
            },
        ];
        let r = max_min_rates(&[8.0, f64::INFINITY], &flows);
        assert!((r[0] - 6.0).abs() < 1e-9 && (r[1] - 2.0).abs() < 1e-9);
        let r = max_min_rates(&[f64::INFINITY], &[flow(vec![0], 7.0)]);
        assert!((r[0] - 7.0).abs() < 1e-9);
    }
}
