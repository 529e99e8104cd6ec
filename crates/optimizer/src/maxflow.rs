//! Dinic's maximum flow on real capacities, with the source side of a minimum cut.
//!
//! Used by the CoMb provisioning decomposition: whether one epoch's traffic fits a
//! given provisioning is a bipartite transportation problem (class groups to nodes),
//! and a minimum cut names the node set whose capacity is short (Hall's condition).
//! The exact min-max-load solver (`comb::flow`) raises capacities between runs and
//! keeps the flow already found ([`FlowNet::raise_cap`], [`FlowNet::augment`]).
//!
//! Edges are stored by tail (compressed sparse rows), built once when the first flow is
//! computed: on KDL's network (7 million half-edges) scanning a node's thousands of
//! reverse edges through a linked list was one cache miss per edge and took most of
//! the solve time.

use std::collections::VecDeque;

/// A flow network with `f64` capacities. Capacities may be reset between runs, so the
/// same graph serves many epochs. All edges must be added before the first run.
#[derive(Debug, Clone)]
pub(crate) struct FlowNet {
    n: usize,
    /// Build phase, per edge (`id / 2`; ids are even so that callers' ids match the
    /// half-edge numbering of a paired layout): tail, head.
    ends: Vec<(u32, u32)>,
    /// Per edge: capacity for the next run from scratch (reverse edges start at 0).
    init: Vec<f64>,
    /// Per edge: the slot of its forward half in the rows below (empty until built).
    slot: Vec<u32>,
    /// `start[u]..start[u + 1]`: the slots of `u`'s outgoing half-edges.
    start: Vec<usize>,
    /// Per slot: head, residual capacity, slot of the paired half-edge.
    to: Vec<u32>,
    cap: Vec<f64>,
    rev: Vec<u32>,
    level: Vec<i32>,
    iter: Vec<usize>,
    path: Vec<usize>,
}

impl FlowNet {
    /// A network with `n` vertices and room for `edges` edges.
    pub(crate) fn with_capacity(n: usize, edges: usize) -> Self {
        let mut net = Self::new(n);
        net.ends.reserve_exact(edges);
        net.init.reserve_exact(edges);
        net
    }

    /// A network with `n` vertices and no edges.
    pub(crate) fn new(n: usize) -> Self {
        assert!(u32::try_from(n).is_ok(), "too many vertices");
        Self {
            n,
            ends: Vec::new(),
            init: Vec::new(),
            slot: Vec::new(),
            start: Vec::new(),
            to: Vec::new(),
            cap: Vec::new(),
            rev: Vec::new(),
            level: vec![-1; n],
            iter: vec![0; n],
            path: Vec::new(),
        }
    }

    fn built(&self) -> bool {
        !self.start.is_empty()
    }

    /// Adds edge `u -> v` with capacity `c`; returns its index for [`Self::set_cap`].
    pub(crate) fn add_edge(&mut self, u: usize, v: usize, c: f64) -> usize {
        assert!(!self.built(), "edges must be added before the first run");
        assert!(u < self.n && v < self.n, "edge ({u}, {v}) out of range");
        let id = 2 * self.init.len();
        self.ends.push((u as u32, v as u32));
        self.init.push(c);
        id
    }

    /// Lays the edges out by tail; the residual capacities start at `init`.
    fn build(&mut self) {
        if self.built() {
            return;
        }
        let m = 2 * self.ends.len();
        assert!(u32::try_from(m).is_ok(), "too many edges");
        let mut start = vec![0usize; self.n + 1];
        for &(u, v) in &self.ends {
            start[u as usize + 1] += 1;
            start[v as usize + 1] += 1;
        }
        for u in 0..self.n {
            start[u + 1] += start[u];
        }
        let mut fill = start;
        let mut to = vec![0u32; m];
        let mut cap = vec![0.0; m];
        let mut rev = vec![0u32; m];
        let mut slot = Vec::with_capacity(self.ends.len());
        for (&(u, v), &c) in self.ends.iter().zip(&self.init) {
            let a = fill[u as usize];
            fill[u as usize] += 1;
            let b = fill[v as usize];
            fill[v as usize] += 1;
            to[a] = v;
            cap[a] = c;
            rev[a] = b as u32;
            to[b] = u;
            rev[b] = a as u32;
            slot.push(a as u32);
        }
        // `fill[u]` now ends u's row, i.e. starts u + 1's; shift it back into place.
        let mut start = fill;
        start.rotate_right(1);
        start[0] = 0;
        self.ends = Vec::new();
        self.start = start;
        self.slot = slot;
        self.to = to;
        self.cap = cap;
        self.rev = rev;
    }

    /// Sets the capacity of edge `id` for the next run.
    pub(crate) fn set_cap(&mut self, id: usize, c: f64) {
        self.init[id / 2] = c;
    }

    /// Raises the capacity of edge `id` to `c` without discarding the current flow
    /// (which stays feasible because no capacity goes down), so that [`Self::augment`]
    /// continues from it.
    pub(crate) fn raise_cap(&mut self, id: usize, c: f64) {
        let e = id / 2;
        debug_assert!(c >= self.init[e], "capacities may only go up");
        self.build();
        self.cap[self.slot[e] as usize] += c - self.init[e];
        self.init[e] = c;
    }

    /// Current flow on edge `id`: the residual capacity of its reverse edge, which
    /// starts at zero (capacity minus residual would be NaN on infinite edges).
    pub(crate) fn flow(&self, id: usize) -> f64 {
        if self.built() {
            self.cap[self.rev[self.slot[id / 2] as usize] as usize]
        } else {
            0.0
        }
    }

    /// Maximum flow from `s` to `t`; residual capacities below `eps` count as zero.
    pub(crate) fn max_flow(&mut self, s: usize, t: usize, eps: f64) -> f64 {
        if self.built() {
            for (&a, &c) in self.slot.iter().zip(&self.init) {
                self.cap[a as usize] = c;
                self.cap[self.rev[a as usize] as usize] = 0.0;
            }
        }
        self.augment(s, t, eps)
    }

    /// Augments the current flow to a maximum one; returns the flow added.
    pub(crate) fn augment(&mut self, s: usize, t: usize, eps: f64) -> f64 {
        self.build();
        let mut total = 0.0;
        while self.bfs(s, t, eps) {
            self.iter.copy_from_slice(&self.start[..self.n]);
            loop {
                let f = self.push(s, t, eps);
                if f <= eps {
                    break;
                }
                total += f;
            }
        }
        total
    }

    /// After [`Self::max_flow`]: `reach[v]` is true for vertices reachable from `s` in
    /// the residual network (the source side of a minimum cut).
    pub(crate) fn source_side(&self, s: usize, eps: f64) -> Vec<bool> {
        let mut reach = vec![false; self.n];
        reach[s] = true;
        if !self.built() {
            return reach;
        }
        let mut queue = VecDeque::from([s]);
        while let Some(u) = queue.pop_front() {
            for e in self.start[u]..self.start[u + 1] {
                let v = self.to[e] as usize;
                if !reach[v] && self.cap[e] > eps {
                    reach[v] = true;
                    queue.push_back(v);
                }
            }
        }
        reach
    }

    fn bfs(&mut self, s: usize, t: usize, eps: f64) -> bool {
        self.level.iter_mut().for_each(|l| *l = -1);
        self.level[s] = 0;
        let mut queue = VecDeque::from([s]);
        while let Some(u) = queue.pop_front() {
            for e in self.start[u]..self.start[u + 1] {
                let v = self.to[e] as usize;
                if self.level[v] < 0 && self.cap[e] > eps {
                    self.level[v] = self.level[u] + 1;
                    queue.push_back(v);
                }
            }
        }
        self.level[t] >= 0
    }

    /// One augmenting path in the level graph (iterative, so deep graphs cannot
    /// overflow the stack).
    fn push(&mut self, s: usize, t: usize, eps: f64) -> f64 {
        self.path.clear();
        let mut u = s;
        loop {
            if u == t {
                let f = self
                    .path
                    .iter()
                    .fold(f64::INFINITY, |m, &e| m.min(self.cap[e]));
                for &e in &self.path {
                    self.cap[e] -= f;
                    self.cap[self.rev[e] as usize] += f;
                }
                return f;
            }
            let end = self.start[u + 1];
            let mut advanced = false;
            while self.iter[u] < end {
                let e = self.iter[u];
                let v = self.to[e] as usize;
                if self.cap[e] > eps && self.level[v] == self.level[u] + 1 {
                    self.path.push(e);
                    u = v;
                    advanced = true;
                    break;
                }
                self.iter[u] += 1;
            }
            if !advanced {
                // Dead end: retreat and skip the edge that led here.
                self.level[u] = -1;
                match self.path.pop() {
                    None => return 0.0,
                    Some(e) => {
                        u = self.to[self.rev[e] as usize] as usize;
                        self.iter[u] = e + 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_network_and_min_cut() {
        // s=0, t=5; max flow 23 (CLRS figure 26.6).
        let mut g = FlowNet::new(6);
        for (u, v, c) in [
            (0, 1, 16.0),
            (0, 2, 13.0),
            (2, 1, 4.0),
            (1, 3, 12.0),
            (3, 2, 9.0),
            (2, 4, 14.0),
            (4, 3, 7.0),
            (3, 5, 20.0),
            (4, 5, 4.0),
        ] {
            g.add_edge(u, v, c);
        }
        let late = g.add_edge(0, 5, 0.0);
        assert!((g.max_flow(0, 5, 1e-12) - 23.0).abs() < 1e-9);
        let side = g.source_side(0, 1e-12);
        assert_eq!(side, vec![true, true, true, false, true, false]);
        // Reset capacities and rerun.
        g.set_cap(late, 2.0);
        assert!((g.max_flow(0, 5, 1e-12) - 25.0).abs() < 1e-9);
        assert!((g.flow(late) - 2.0).abs() < 1e-12);
        // Raising a capacity keeps the flow and only adds the difference.
        g.raise_cap(late, 5.0);
        assert!((g.augment(0, 5, 1e-12) - 3.0).abs() < 1e-9);
        assert!((g.flow(late) - 5.0).abs() < 1e-12);
    }
}
