//! Dinic's maximum flow on real capacities, with the source side of a minimum cut.
//!
//! Used by the CoMb provisioning decomposition: whether one epoch's traffic fits a
//! given provisioning is a bipartite transportation problem (class groups to nodes),
//! and a minimum cut names the node set whose capacity is short (Hall's condition).

use std::collections::VecDeque;

/// A flow network with `f64` capacities. Capacities may be reset between runs, so the
/// same graph serves many epochs.
#[derive(Debug, Clone)]
pub(crate) struct FlowNet {
    head: Vec<usize>,
    next: Vec<usize>,
    to: Vec<usize>,
    cap: Vec<f64>,
    init: Vec<f64>,
    level: Vec<i64>,
    iter: Vec<usize>,
}

const NONE: usize = usize::MAX;

impl FlowNet {
    /// A network with `n` vertices and no edges.
    pub(crate) fn new(n: usize) -> Self {
        Self {
            head: vec![NONE; n],
            next: Vec::new(),
            to: Vec::new(),
            cap: Vec::new(),
            init: Vec::new(),
            level: vec![-1; n],
            iter: vec![NONE; n],
        }
    }

    /// Adds edge `u -> v` with capacity `c`; returns its index for [`Self::set_cap`].
    pub(crate) fn add_edge(&mut self, u: usize, v: usize, c: f64) -> usize {
        let id = self.to.len();
        for (a, b, cap) in [(u, v, c), (v, u, 0.0)] {
            self.to.push(b);
            self.cap.push(cap);
            self.init.push(cap);
            self.next.push(self.head[a]);
            self.head[a] = self.to.len() - 1;
        }
        id
    }

    /// Sets the capacity of edge `id` for the next run.
    pub(crate) fn set_cap(&mut self, id: usize, c: f64) {
        self.init[id] = c;
    }

    /// Maximum flow from `s` to `t`; residual capacities below `eps` count as zero.
    pub(crate) fn max_flow(&mut self, s: usize, t: usize, eps: f64) -> f64 {
        self.cap.copy_from_slice(&self.init);
        let mut total = 0.0;
        while self.bfs(s, t, eps) {
            self.iter.copy_from_slice(&self.head);
            loop {
                let f = self.push(s, t, f64::INFINITY, eps);
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
        let mut reach = vec![false; self.head.len()];
        let mut queue = VecDeque::from([s]);
        reach[s] = true;
        while let Some(u) = queue.pop_front() {
            let mut e = self.head[u];
            while e != NONE {
                let v = self.to[e];
                if !reach[v] && self.cap[e] > eps {
                    reach[v] = true;
                    queue.push_back(v);
                }
                e = self.next[e];
            }
        }
        reach
    }

    fn bfs(&mut self, s: usize, t: usize, eps: f64) -> bool {
        self.level.iter_mut().for_each(|l| *l = -1);
        self.level[s] = 0;
        let mut queue = VecDeque::from([s]);
        while let Some(u) = queue.pop_front() {
            let mut e = self.head[u];
            while e != NONE {
                let v = self.to[e];
                if self.level[v] < 0 && self.cap[e] > eps {
                    self.level[v] = self.level[u] + 1;
                    queue.push_back(v);
                }
                e = self.next[e];
            }
        }
        self.level[t] >= 0
    }

    /// One augmenting path in the level graph (iterative, so deep graphs cannot
    /// overflow the stack).
    fn push(&mut self, s: usize, t: usize, limit: f64, eps: f64) -> f64 {
        let mut path: Vec<usize> = Vec::new();
        let mut u = s;
        loop {
            if u == t {
                let f = path.iter().fold(limit, |m, &e| m.min(self.cap[e]));
                for &e in &path {
                    self.cap[e] -= f;
                    self.cap[e ^ 1] += f;
                }
                return f;
            }
            let mut advanced = false;
            while self.iter[u] != NONE {
                let e = self.iter[u];
                let v = self.to[e];
                if self.cap[e] > eps && self.level[v] == self.level[u] + 1 {
                    path.push(e);
                    u = v;
                    advanced = true;
                    break;
                }
                self.iter[u] = self.next[e];
            }
            if !advanced {
                // Dead end: retreat and skip the edge that led here.
                self.level[u] = -1;
                match path.pop() {
                    None => return 0.0,
                    Some(e) => {
                        u = self.to[e ^ 1];
                        self.iter[u] = self.next[e];
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
        assert!((g.max_flow(0, 5, 1e-12) - 23.0).abs() < 1e-9);
        let side = g.source_side(0, 1e-12);
        assert_eq!(side, vec![true, true, true, false, true, false]);
        // Reset capacities and rerun.
        let e = g.add_edge(0, 5, 0.0);
        g.set_cap(e, 2.0);
        assert!((g.max_flow(0, 5, 1e-12) - 25.0).abs() < 1e-9);
    }
}
