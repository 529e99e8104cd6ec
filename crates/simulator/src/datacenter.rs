//! A datacenter tree: racks under aggregation switches under one core switch.
//!
//! Every rack has VM slots and a link to its aggregation switch; every aggregation switch
//! has a link to the core. Links are full duplex: each direction is a separate resource
//! with the link's capacity. Traffic inside a rack is free (the paper assumes very high
//! intra-rack capacity).

use crate::SimError;

/// Index of a rack.
pub type RackId = usize;

/// Shape of the datacenter.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeSpec {
    /// Number of racks.
    pub racks: usize,
    /// Racks under each aggregation switch (the last switch may have fewer).
    pub racks_per_agg: usize,
    /// VM slots per rack.
    pub slots_per_rack: usize,
    /// Capacity of every link, each direction, in Mbps.
    pub link_mbps: f64,
}

/// The datacenter tree with its directed links.
#[derive(Debug, Clone, PartialEq)]
pub struct Datacenter {
    spec: TreeSpec,
    aggs: usize,
}

impl Datacenter {
    /// Builds the tree, rejecting empty or negative dimensions.
    pub fn new(spec: TreeSpec) -> Result<Self, SimError> {
        if spec.racks == 0 || spec.racks_per_agg == 0 || spec.slots_per_rack == 0 {
            return Err(SimError::Config(
                "racks, racks per aggregation switch and slots per rack must be positive".into(),
            ));
        }
        if !spec.link_mbps.is_finite() || spec.link_mbps <= 0.0 {
            return Err(SimError::Config(format!(
                "link capacity {} Mbps must be positive",
                spec.link_mbps
            )));
        }
        let aggs = spec.racks.div_ceil(spec.racks_per_agg);
        Ok(Self { spec, aggs })
    }

    /// The spec this tree was built from.
    pub fn spec(&self) -> &TreeSpec {
        &self.spec
    }

    /// Number of directed links: rack up/down, then aggregation up/down.
    pub fn num_links(&self) -> usize {
        2 * self.spec.racks + 2 * self.aggs
    }

    /// Capacity of every directed link.
    pub fn link_capacities(&self) -> Vec<f64> {
        vec![self.spec.link_mbps; self.num_links()]
    }

    fn agg_of(&self, rack: RackId) -> usize {
        rack / self.spec.racks_per_agg
    }

    fn rack_up(&self, rack: RackId) -> usize {
        2 * rack
    }

    fn rack_down(&self, rack: RackId) -> usize {
        2 * rack + 1
    }

    fn agg_up(&self, agg: usize) -> usize {
        2 * self.spec.racks + 2 * agg
    }

    fn agg_down(&self, agg: usize) -> usize {
        2 * self.spec.racks + 2 * agg + 1
    }

    /// Aggregation switch of a rack.
    pub fn agg_of_rack(&self, rack: RackId) -> usize {
        self.agg_of(rack)
    }

    /// A rack's uplink and downlink.
    pub fn rack_links(&self, rack: RackId) -> [usize; 2] {
        [self.rack_up(rack), self.rack_down(rack)]
    }

    /// An aggregation switch's uplink and downlink to the core.
    pub fn agg_links(&self, agg: usize) -> [usize; 2] {
        [self.agg_up(agg), self.agg_down(agg)]
    }

    /// Whether a directed link is a rack (edge) link rather than an aggregation-core link.
    pub fn is_edge_link(&self, link: usize) -> bool {
        link < 2 * self.spec.racks
    }

    /// Directed links crossed going from rack `a` to rack `b` (empty inside a rack).
    pub fn path(&self, a: RackId, b: RackId) -> Vec<usize> {
        if a == b {
            return Vec::new();
        }
        let (ga, gb) = (self.agg_of(a), self.agg_of(b));
        if ga == gb {
            vec![self.rack_up(a), self.rack_down(b)]
        } else {
            vec![
                self.rack_up(a),
                self.agg_up(ga),
                self.agg_down(gb),
                self.rack_down(b),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dc() -> Datacenter {
        Datacenter::new(TreeSpec {
            racks: 10,
            racks_per_agg: 5,
            slots_per_rack: 7,
            link_mbps: 500.0,
        })
        .unwrap()
    }

    #[test]
    fn paths_climb_only_as_high_as_needed() {
        let d = dc();
        assert!(d.path(3, 3).is_empty());
        assert_eq!(d.path(0, 4).len(), 2);
        let p = d.path(0, 7);
        assert_eq!(p.len(), 4);
        // Opposite directions use disjoint directed links.
        let q = d.path(7, 0);
        assert!(p.iter().all(|l| !q.contains(l)));
        assert_eq!(d.num_links(), 24);
        assert!(d.is_edge_link(p[0]) && !d.is_edge_link(p[1]));
        // The helpers name exactly the links paths use.
        assert_eq!(p[0], d.rack_links(0)[0]);
        assert_eq!(p[3], d.rack_links(7)[1]);
        assert_eq!([p[1], q[2]], d.agg_links(d.agg_of_rack(0)));
    }

    #[test]
    fn rejects_empty_trees() {
        assert!(Datacenter::new(TreeSpec {
            racks: 0,
            racks_per_agg: 5,
            slots_per_rack: 7,
            link_mbps: 500.0
        })
        .is_err());
        assert!(Datacenter::new(TreeSpec {
            racks: 3,
            racks_per_agg: 5,
            slots_per_rack: 7,
            link_mbps: -1.0
        })
        .is_err());
    }
}
