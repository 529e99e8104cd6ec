//! Weighted undirected graphs and deterministic shortest-path routing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Errors from graph construction and routing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// An edge names a node that does not exist.
    #[error("edge ({a}, {b}) names a node outside 0..{nodes}")]
    UnknownNode {
        /// One end.
        a: usize,
        /// Other end.
        b: usize,
        /// Node count.
        nodes: usize,
    },
    /// An edge weight is negative or not finite.
    #[error("edge ({a}, {b}) has weight {weight}; weights must be finite and non-negative")]
    BadWeight {
        /// One end.
        a: usize,
        /// Other end.
        b: usize,
        /// Offending weight.
        weight: f64,
    },
    /// No path joins the two nodes.
    #[error("no path from node {from} to node {to}: the graph is disconnected")]
    Disconnected {
        /// Source.
        from: usize,
        /// Destination.
        to: usize,
    },
}

/// An undirected graph with non-negative edge weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    adj: Vec<Vec<(usize, f64)>>,
}

impl Graph {
    /// Builds a graph over `nodes` nodes from `(a, b, weight)` edges. Self-loops are dropped.
    pub fn new(nodes: usize, edges: &[(usize, usize, f64)]) -> Result<Self, GraphError> {
        let mut adj = vec![Vec::new(); nodes];
        for &(a, b, weight) in edges {
            if a >= nodes || b >= nodes {
                return Err(GraphError::UnknownNode { a, b, nodes });
            }
            if !weight.is_finite() || weight < 0.0 {
                return Err(GraphError::BadWeight { a, b, weight });
            }
            if a != b {
                adj[a].push((b, weight));
                adj[b].push((a, weight));
            }
        }
        for list in &mut adj {
            list.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
        }
        Ok(Self { adj })
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.adj.len()
    }

    /// Shortest-path tree from `src`: `(dist, parent)`; ties go to the lower-numbered
    /// predecessor so routes are reproducible.
    fn dijkstra(&self, src: usize) -> (Vec<f64>, Vec<Option<usize>>) {
        let n = self.adj.len();
        let mut dist = vec![f64::INFINITY; n];
        let mut parent = vec![None; n];
        let mut heap = BinaryHeap::new();
        dist[src] = 0.0;
        // Distances are non-negative, so their bit patterns order like the values.
        heap.push(Reverse((0u64, src)));
        while let Some(Reverse((d, u))) = heap.pop() {
            let d = f64::from_bits(d);
            if d > dist[u] {
                continue;
            }
            for &(v, w) in &self.adj[u] {
                let nd = d + w;
                let better = nd < dist[v] - 1e-12
                    || ((nd - dist[v]).abs() <= 1e-12 && parent[v].is_some_and(|p| u < p));
                if better {
                    dist[v] = nd;
                    parent[v] = Some(u);
                    heap.push(Reverse((nd.to_bits(), v)));
                }
            }
        }
        (dist, parent)
    }

    /// All-pairs shortest paths: `paths[s][t]` is the node sequence from `s` to `t`.
    /// Fails on the first disconnected pair.
    pub fn all_pairs_paths(&self) -> Result<Vec<Vec<Vec<usize>>>, GraphError> {
        (0..self.nodes()).map(|s| self.paths_from(s)).collect()
    }

    /// The paths of [`Self::all_pairs_paths`] from one source (`paths[t]`), so that
    /// callers can stream over sources instead of holding every pair's path at once.
    /// Fails on the first node `src` cannot reach.
    pub fn paths_from(&self, src: usize) -> Result<Vec<Vec<usize>>, GraphError> {
        let (_, parent) = self.dijkstra(src);
        (0..self.nodes()).map(|t| walk(&parent, src, t)).collect()
    }

    /// The shortest path from `from` to `to`.
    pub fn shortest_path(&self, from: usize, to: usize) -> Result<Vec<usize>, GraphError> {
        let n = self.nodes();
        if from >= n || to >= n {
            return Err(GraphError::UnknownNode {
                a: from,
                b: to,
                nodes: n,
            });
        }
        let (_, parent) = self.dijkstra(from);
        walk(&parent, from, to)
    }
}

fn walk(parent: &[Option<usize>], s: usize, t: usize) -> Result<Vec<usize>, GraphError> {
    let mut path = vec![t];
    let mut cur = t;
    while cur != s {
        cur = parent[cur].ok_or(GraphError::Disconnected { from: s, to: t })?;
        path.push(cur);
    }
    path.reverse();
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_weighted_shortest_paths() {
        let g = Graph::new(4, &[(0, 1, 1.0), (1, 3, 1.0), (0, 2, 0.5), (2, 3, 2.0)]).unwrap();
        assert_eq!(g.shortest_path(0, 3).unwrap(), vec![0, 1, 3]);
        assert_eq!(g.shortest_path(3, 0).unwrap(), vec![3, 1, 0]);
        assert_eq!(g.shortest_path(2, 2).unwrap(), vec![2]);
    }

    #[test]
    fn reports_disconnection_and_bad_edges() {
        let g = Graph::new(3, &[(0, 1, 1.0)]).unwrap();
        assert_eq!(
            g.shortest_path(0, 2).unwrap_err(),
            GraphError::Disconnected { from: 0, to: 2 }
        );
        assert!(g.all_pairs_paths().is_err());
        assert!(matches!(
            Graph::new(2, &[(0, 5, 1.0)]),
            Err(GraphError::UnknownNode { .. })
        ));
        assert!(matches!(
            Graph::new(2, &[(0, 1, -1.0)]),
            Err(GraphError::BadWeight { .. })
        ));
    }
}
