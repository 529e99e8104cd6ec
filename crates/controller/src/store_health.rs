//! The state store's health, sans-IO: what the controller's probes of every
//! store node found ([`Probe`]) turned into the nodes' state, the events of
//! the feed (`store_unreachable` once per outage, `store_recovered`,
//! `store_lost_data`), the verdict of `GET /healthz` and the `store` section
//! of `GET /v1/status`. The probing itself (`PING`, `ROLE`, the marker) is
//! [`crate::store_probe`]'s; nothing here reads a clock or touches a socket.
//!
//! A store that restarted empty (no persistence) or was flushed still answers
//! `PING`: only its data tells. Every primary holds a marker key
//! ([`crate::store_probe::MARKER_KEY`]) the controller wrote, or found there
//! when it first saw the node; a primary that answers without it, or with
//! another value, lost its data. The marker is then written again.
//!
//! In a cluster, a primary whose port is closed (connection refused: its
//! process is gone, it is not merely slow) for [`TAKEOVER_AFTER`] probes in a
//! row has one of its reachable replicas asked to take over at once
//! ([`StoreHealth::takeovers`], `CLUSTER FAILOVER FORCE`; if the primary
//! still owns its slots [`TAKEOVER_RETRY`] probes later, `TAKEOVER`), as
//! Sentinel would,
//! instead of its slots waiting out the cluster's node timeout and the
//! replicas' election delay (issue 22's store-primary window). The replica has
//! every acknowledged write: batches wait for one replica (`WAIT 1`) before
//! their packets leave. Without the controller the cluster still fails over by
//! itself, later.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::EventInfo;
use crate::reconcile::event;

/// A store node's replication role, as `ROLE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `master`: takes writes.
    Primary,
    /// `slave`: copies a primary.
    Replica,
    /// Anything else (`sentinel`).
    Other,
}

impl Role {
    /// The role `ROLE`'s first element names.
    pub fn from_reply(name: &str) -> Role {
        match name {
            "master" => Role::Primary,
            "slave" | "replica" => Role::Replica,
            _ => Role::Other,
        }
    }
}

/// What the marker key held on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// Not read: a replica, or a cluster primary serving no slot.
    NotRead,
    /// The key is absent.
    Missing,
    /// The key's value.
    Found(String),
}

/// One slot range of a cluster and the primary serving it, as a node reports
/// it (`CLUSTER SLOTS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    /// First slot.
    pub first: u16,
    /// Last slot (inclusive).
    pub last: u16,
    /// The primary's `host:port`.
    pub primary: String,
    /// The primary's cluster node id, if reported.
    pub primary_id: Option<String>,
    /// Its replicas (`host:port`, node id if reported), in the order the
    /// node listed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<(String, Option<String>)>,
}

/// What a reachable node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Its role.
    pub role: Role,
    /// Its cluster node id (`CLUSTER MYID`), in a cluster.
    pub id: Option<String>,
    /// The cluster's slot ranges as it sees them (empty outside a cluster).
    pub slots: Vec<SlotRange>,
    /// The marker it holds.
    pub marker: Marker,
    /// A replica's primary (`host:port`, as its `ROLE` names it).
    pub primary_of: Option<String>,
}

/// One node's probe: its address and its answer, or why there was none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `host:port`, as the state URL lists it.
    pub node: String,
    /// Its answer, or the error that stands for its silence.
    pub result: Result<Answer, String>,
    /// Whether it failed because the node refused the connection (its port
    /// is closed), which is what a dead process looks like, unlike a timeout.
    pub refused: bool,
}

/// A replica to ask to take over its primary's slots now: see the module
/// docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// The replica's `host:port`, as the state URL lists it.
    pub replica: String,
    /// The primary it replaces, as the state URL lists it.
    pub primary: String,
    /// Without the other primaries' votes (`CLUSTER FAILOVER TAKEOVER`): a
    /// repeated request, after a forced one (`FORCE`, which still holds an
    /// election) left the dead primary owning its slots. An election that
    /// got no votes is not retried by the replica for twice the node
    /// timeout, and a voter that voted once refuses for as long, while the
    /// primary's port stays closed: its process is gone, so no second
    /// primary can be serving those slots.
    pub unilateral: bool,
}

/// What a round of probes asks the controller to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreActions {
    /// Markers to write.
    pub writes: Vec<MarkerWrite>,
    /// Replicas to ask to take over from dead primaries.
    pub takeovers: Vec<Takeover>,
    /// A node answers again, or answers without its data: define the
    /// tenants' users and load the library on it now, not at the next
    /// periodic sync.
    pub returned: bool,
}

/// Probes in a row that must find a primary's port closed before one of its
/// replicas is asked to take over: two, so one refused connection (a restart
/// under way, a listener briefly full) is not enough.
pub const TAKEOVER_AFTER: u32 = 2;

/// Probes in a row after a takeover was asked before it is asked again, if
/// the primary is still the slots' owner (the first request was lost or
/// refused).
pub const TAKEOVER_RETRY: u32 = 8;

/// A marker to write: the node, and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerWrite {
    /// `host:port`.
    pub node: String,
    /// The value to store.
    pub value: String,
}

/// One store node in `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreNodeInfo {
    /// `host:port`.
    pub node: String,
    /// Whether its last probe was answered.
    pub up: bool,
    /// Its role at its last answer.
    pub role: Option<Role>,
    /// When it last answered (Unix ms).
    pub last_ok_ms: Option<u64>,
    /// Times it was found to have lost its data since the controller started.
    pub lost_data_count: u64,
    /// Why its last probe failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A failing part of the store, in `GET /healthz`'s 503.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failing {
    /// `host:port` of the node at fault.
    pub node: String,
    /// What is wrong.
    pub reason: String,
}

/// The `store` section of `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreStatus {
    /// `local` (in-process, nothing to probe), `redis` or `redis-cluster`.
    pub kind: String,
    /// Whether `GET /healthz` counts the store as serving.
    pub healthy: bool,
    /// What keeps it from serving.
    pub failing: Vec<Failing>,
    /// Every node of the state URL.
    pub nodes: Vec<StoreNodeInfo>,
    /// Times a node was found to have lost its data since the controller started.
    pub lost_data_total: u64,
    /// How long the last probe of every node took, seconds.
    pub probe_seconds: Option<f64>,
}

/// What the controller knows of one node.
#[derive(Debug, Clone, Default)]
struct NodeState {
    /// `None` until its first probe.
    up: Option<bool>,
    role: Option<Role>,
    id: Option<String>,
    last_ok_ms: Option<u64>,
    lost_data_count: u64,
    error: Option<String>,
    /// The marker it must hold: `None` until written or found, and again
    /// after a loss until rewritten.
    expected: Option<String>,
    /// Probes in a row that found its port closed.
    refused_rounds: u32,
    /// `refused_rounds` when a replica was last asked to take over from it.
    takeover_asked: Option<u32>,
    /// Its primary, if it is a replica (its last answer's `ROLE`).
    primary_of: Option<String>,
}

/// The store's health: every node's state and the counters (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct StoreHealth {
    cluster: bool,
    /// The marker value this controller writes (random, drawn at start).
    epoch: String,
    /// In the state URL's order.
    nodes: Vec<(String, NodeState)>,
    /// The cluster's slot ranges, from the first node that answered.
    slots: Vec<SlotRange>,
    lost_data_total: u64,
    probe_seconds: Option<f64>,
}

impl StoreHealth {
    /// The health of a store of `nodes` (a cluster if `cluster`), not probed
    /// yet; `epoch` is the marker this controller writes.
    pub fn new(nodes: &[String], cluster: bool, epoch: String) -> StoreHealth {
        StoreHealth {
            cluster,
            epoch,
            nodes: nodes
                .iter()
                .map(|n| (n.clone(), NodeState::default()))
                .collect(),
            slots: Vec::new(),
            lost_data_total: 0,
            probe_seconds: None,
        }
    }

    /// Whether there are nodes to probe (a `local` store has none).
    pub fn probed_store(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// Takes in one round of probes (every node, `took` in all) made at
    /// `now_ms`: the events it causes, and the markers to write. Writes
    /// that succeed are reported to [`StoreHealth::marked`].
    pub fn observe(
        &mut self,
        probes: &[Probe],
        took: Duration,
        now_ms: u64,
    ) -> (Vec<EventInfo>, Vec<MarkerWrite>) {
        let mut events = Vec::new();
        let mut writes = Vec::new();
        self.probe_seconds = Some(took.as_secs_f64());
        let mut view: Option<Vec<SlotRange>> = None;
        for p in probes {
            let Some(st) = self
                .nodes
                .iter_mut()
                .find(|(n, _)| *n == p.node)
                .map(|(_, s)| s)
            else {
                continue;
            };
            if p.refused {
                st.refused_rounds += 1;
            } else {
                st.refused_rounds = 0;
                st.takeover_asked = None;
            }
            let a = match &p.result {
                Err(e) => {
                    if st.up != Some(false) {
                        events.push(event(
                            "store_unreachable",
                            format!("state store node {} does not answer: {e}", p.node),
                        ));
                    }
                    st.up = Some(false);
                    st.error = Some(e.clone());
                    continue;
                }
                Ok(a) => a,
            };
            if st.up == Some(false) {
                events.push(event(
                    "store_recovered",
                    format!("state store node {} answers again", p.node),
                ));
            }
            st.up = Some(true);
            st.error = None;
            st.role = Some(a.role);
            st.primary_of = a.primary_of.clone();
            st.last_ok_ms = Some(now_ms);
            if a.id.is_some() {
                st.id = a.id.clone();
            }
            if view.is_none() && !a.slots.is_empty() {
                view = Some(a.slots.clone());
            }
            if a.role != Role::Primary {
                // A replica's copy is its primary's business; promoted, it
                // is seen afresh.
                st.expected = None;
                continue;
            }
            let lost = match (&a.marker, &st.expected) {
                (Marker::NotRead, _) => None,
                (Marker::Found(v), None) => {
                    // Marked before (by this controller's predecessor, or a
                    // write whose answer was lost): its data goes back to then.
                    st.expected = Some(v.clone());
                    None
                }
                (Marker::Found(v), Some(e)) if v == e => None,
                (Marker::Missing, None) => {
                    writes.push(MarkerWrite {
                        node: p.node.clone(),
                        value: self.epoch.clone(),
                    });
                    None
                }
                (Marker::Found(v), Some(_)) => Some(format!("holds another marker ({v})")),
                (Marker::Missing, Some(_)) => Some("holds no marker".to_string()),
            };
            if let Some(why) = lost {
                st.lost_data_count += 1;
                self.lost_data_total += 1;
                st.expected = None;
                events.push(event(
                    "store_lost_data",
                    format!(
                        "state store node {} lost its data: it answers but {why} \
                         (restarted without persistence, or flushed); flows' state on it is gone",
                        p.node
                    ),
                ));
                writes.push(MarkerWrite {
                    node: p.node.clone(),
                    value: self.epoch.clone(),
                });
            }
        }
        if let Some(v) = view {
            self.slots = v;
        }
        (events, writes)
    }

    /// The replicas to ask to take over now, and the events that say so:
    /// for each slot range whose primary (a node of the state URL) refused
    /// [`TAKEOVER_AFTER`] probes in a row, its first replica that answered
    /// its last probe as a replica. Asked once per outage (again after
    /// [`TAKEOVER_RETRY`] more probes if the primary still owns the slots).
    /// Pure: call after [`StoreHealth::observe`].
    pub fn takeovers(&mut self) -> (Vec<EventInfo>, Vec<Takeover>) {
        let (mut events, mut out) = (Vec::new(), Vec::new());
        if !self.cluster {
            return (events, out);
        }
        let find = |nodes: &[(String, NodeState)], addr: &str, id: &Option<String>| {
            nodes
                .iter()
                .position(|(n, s)| *n == addr || (id.is_some() && s.id == *id))
        };
        for r in &self.slots {
            let Some(pi) = find(&self.nodes, &r.primary, &r.primary_id) else {
                continue;
            };
            let p = &self.nodes[pi].1;
            let due = p.refused_rounds >= TAKEOVER_AFTER
                && p.takeover_asked
                    .is_none_or(|at| p.refused_rounds >= at + TAKEOVER_RETRY);
            if !due || out.iter().any(|t: &Takeover| t.primary == self.nodes[pi].0) {
                continue;
            }
            // The replicas `CLUSTER SLOTS` lists, then any node whose `ROLE`
            // names this primary: `CLUSTER SLOTS` leaves a replica out until
            // gossip has carried its replication offset, which a primary
            // killed soon after the replica synced may never let happen.
            let answering = |i: usize| {
                let s = &self.nodes[i].1;
                s.up == Some(true) && s.role == Some(Role::Replica)
            };
            let replica = r
                .replicas
                .iter()
                .find_map(|(addr, id)| find(&self.nodes, addr, id).filter(|&i| answering(i)))
                .or_else(|| {
                    (0..self.nodes.len()).find(|&i| {
                        answering(i) && self.nodes[i].1.primary_of.as_deref() == Some(&r.primary)
                    })
                });
            let Some(ri) = replica else { continue };
            let (primary, rounds) = (self.nodes[pi].0.clone(), p.refused_rounds);
            let unilateral = p.takeover_asked.is_some();
            let replica = self.nodes[ri].0.clone();
            self.nodes[pi].1.takeover_asked = Some(rounds);
            events.push(event(
                "store_takeover",
                format!(
                    "state store primary {primary} refused {rounds} probes in a row: its replica \
                     {replica} is asked to take over its slots now (CLUSTER FAILOVER {})",
                    if unilateral { "TAKEOVER" } else { "FORCE" }
                ),
            ));
            out.push(Takeover {
                replica,
                primary,
                unilateral,
            });
        }
        (events, out)
    }

    /// Notes that `w` was written: the node must hold it from now on.
    pub fn marked(&mut self, w: &MarkerWrite) {
        if let Some((_, st)) = self.nodes.iter_mut().find(|(n, _)| *n == w.node) {
            if st.expected.is_none() {
                st.expected = Some(w.value.clone());
            }
        }
    }

    /// What keeps the store from serving: every node when none answers, and
    /// (cluster) each slot range whose primary is a node that does not
    /// answer. Empty before the first probe (nothing known is not a failure).
    pub fn failing(&self) -> Vec<Failing> {
        let down = |s: &NodeState| s.up == Some(false);
        let mut out = Vec::new();
        if !self.nodes.is_empty() && self.nodes.iter().all(|(_, s)| down(s)) {
            for (n, s) in &self.nodes {
                out.push(Failing {
                    node: n.clone(),
                    reason: format!("unreachable: {}", s.error.as_deref().unwrap_or("no answer")),
                });
            }
            return out;
        }
        if !self.cluster {
            return out;
        }
        for r in &self.slots {
            // A primary the URL does not list is not probed: nothing known.
            let owner = self
                .nodes
                .iter()
                .find(|(n, s)| *n == r.primary || (r.primary_id.is_some() && s.id == r.primary_id));
            if let Some((n, s)) = owner {
                if down(s) {
                    out.push(Failing {
                        node: n.clone(),
                        reason: format!(
                            "slots {}-{} have no reachable primary: {}",
                            r.first,
                            r.last,
                            s.error.as_deref().unwrap_or("no answer")
                        ),
                    });
                }
            }
        }
        out
    }

    /// Whether `node` answered its last probe (`None` before the first).
    pub fn up(&self, node: &str) -> Option<bool> {
        self.nodes.iter().find(|(n, _)| n == node)?.1.up
    }

    /// The nodes' addresses and whether each answered its last probe (only
    /// those probed).
    pub fn nodes_up(&self) -> Vec<(String, bool)> {
        self.nodes
            .iter()
            .filter_map(|(n, s)| Some((n.clone(), s.up?)))
            .collect()
    }

    /// Times a node lost its data since the controller started.
    pub fn lost_data_total(&self) -> u64 {
        self.lost_data_total
    }

    /// How long the last round of probes took, seconds.
    pub fn probe_seconds(&self) -> Option<f64> {
        self.probe_seconds
    }

    /// The `store` section of `GET /v1/status`.
    pub fn status(&self) -> StoreStatus {
        let failing = self.failing();
        StoreStatus {
            kind: match (self.nodes.is_empty(), self.cluster) {
                (true, _) => "local",
                (false, false) => "redis",
                (false, true) => "redis-cluster",
            }
            .into(),
            healthy: failing.is_empty(),
            failing,
            nodes: self
                .nodes
                .iter()
                .map(|(n, s)| StoreNodeInfo {
                    node: n.clone(),
                    up: s.up == Some(true),
                    role: s.role,
                    last_ok_ms: s.last_ok_ms,
                    lost_data_count: s.lost_data_count,
                    error: s.error.clone(),
                })
                .collect(),
            lost_data_total: self.lost_data_total,
            probe_seconds: self.probe_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ok(node: &str, role: Role, marker: Marker) -> Probe {
        Probe {
            node: node.into(),
            result: Ok(Answer {
                role,
                id: None,
                slots: Vec::new(),
                marker,
                primary_of: None,
            }),
            refused: false,
        }
    }

    fn dead(node: &str) -> Probe {
        Probe {
            node: node.into(),
            result: Err("connection refused".into()),
            refused: true,
        }
    }

    fn kinds(e: &[EventInfo]) -> Vec<&str> {
        e.iter().map(|e| e.kind.as_str()).collect()
    }

    fn one(node: &str) -> StoreHealth {
        StoreHealth::new(&[node.to_string()], false, "epoch-1".into())
    }

    #[test]
    fn an_outage_is_one_event_and_its_end_another() {
        let n = "10.0.0.1:6379";
        let mut h = one(n);
        assert!(h.failing().is_empty(), "not probed yet: nothing known");
        let (e, w) = h.observe(&[ok(n, Role::Primary, Marker::Missing)], MS, 1_000);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(w.len(), 1, "first sight: marked");
        h.marked(&w[0]);
        assert!(h.failing().is_empty());
        let (e, _) = h.observe(&[dead(n)], MS, 2_000);
        assert_eq!(kinds(&e), ["store_unreachable"]);
        assert!(e[0].reason.contains(n) && e[0].reason.contains("refused"));
        let f = h.failing();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].node, n);
        for t in [3_000, 4_000, 5_000] {
            let (e, _) = h.observe(&[dead(n)], MS, t);
            assert!(e.is_empty(), "one event per outage: {e:?}");
        }
        let s = h.status();
        assert!(!s.healthy && !s.nodes[0].up);
        assert_eq!(s.nodes[0].last_ok_ms, Some(1_000), "last answer kept");
        // Back with its data.
        let (e, w) = h.observe(
            &[ok(n, Role::Primary, Marker::Found("epoch-1".into()))],
            MS,
            6_000,
        );
        assert_eq!(kinds(&e), ["store_recovered"]);
        assert!(w.is_empty());
        assert!(h.failing().is_empty());
        assert_eq!(h.status().nodes[0].last_ok_ms, Some(6_000));
        assert_eq!(h.lost_data_total(), 0);
    }

    #[test]
    fn a_node_down_from_the_start_is_an_outage_too() {
        let n = "10.0.0.1:6379";
        let mut h = one(n);
        let (e, _) = h.observe(&[dead(n)], MS, 1);
        assert_eq!(kinds(&e), ["store_unreachable"]);
        assert_eq!(h.up(n), Some(false));
    }

    #[test]
    fn a_missing_marker_is_lost_data_once_and_is_rewritten() {
        let n = "10.0.0.1:6379";
        let mut h = one(n);
        let (_, w) = h.observe(&[ok(n, Role::Primary, Marker::Missing)], MS, 1);
        h.marked(&w[0]);
        let found = || ok(n, Role::Primary, Marker::Found("epoch-1".into()));
        assert!(h.observe(&[found()], MS, 2).0.is_empty());
        // Killed, restarted empty.
        h.observe(&[dead(n)], MS, 3);
        let (e, w) = h.observe(&[ok(n, Role::Primary, Marker::Missing)], MS, 4);
        assert_eq!(kinds(&e), ["store_recovered", "store_lost_data"]);
        assert!(e[1].reason.contains(n), "{}", e[1].reason);
        assert_eq!(
            w,
            [MarkerWrite {
                node: n.into(),
                value: "epoch-1".into()
            }]
        );
        // The rewrite's answer was lost: still missing, written again, no
        // second event.
        let (e, w) = h.observe(&[ok(n, Role::Primary, Marker::Missing)], MS, 5);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(w.len(), 1);
        h.marked(&w[0]);
        assert!(h.observe(&[found()], MS, 6).0.is_empty());
        assert_eq!(h.lost_data_total(), 1);
        assert_eq!(h.status().nodes[0].lost_data_count, 1);
        // A flush while up counts too.
        let (e, _) = h.observe(&[ok(n, Role::Primary, Marker::Missing)], MS, 7);
        assert_eq!(kinds(&e), ["store_lost_data"]);
        assert_eq!(h.lost_data_total(), 2);
    }

    #[test]
    fn a_marker_found_at_first_sight_is_adopted_and_another_one_is_a_loss() {
        let n = "10.0.0.1:6379";
        let mut h = one(n);
        // A previous controller marked it: not a loss, nothing written.
        let (e, w) = h.observe(&[ok(n, Role::Primary, Marker::Found("old".into()))], MS, 1);
        assert!(e.is_empty() && w.is_empty());
        let (e, w) = h.observe(
            &[ok(n, Role::Primary, Marker::Found("other".into()))],
            MS,
            2,
        );
        assert_eq!(kinds(&e), ["store_lost_data"]);
        assert_eq!(w[0].value, "epoch-1");
    }

    #[test]
    fn replicas_are_not_checked_for_the_marker() {
        let n = "10.0.0.2:6379";
        let mut h = one(n);
        let (e, w) = h.observe(&[ok(n, Role::Replica, Marker::NotRead)], MS, 1);
        assert!(e.is_empty() && w.is_empty());
        assert_eq!(h.status().nodes[0].role, Some(Role::Replica));
    }

    fn cluster_probe(node: &str, id: &str, role: Role, slots: &[SlotRange]) -> Probe {
        Probe {
            node: node.into(),
            result: Ok(Answer {
                role,
                id: Some(id.into()),
                slots: slots.to_vec(),
                marker: Marker::NotRead,
                primary_of: None,
            }),
            refused: false,
        }
    }

    #[test]
    fn a_cluster_fails_when_a_slot_range_has_no_reachable_primary() {
        let nodes: Vec<String> = ["h:1", "h:2", "h:3"].map(String::from).to_vec();
        let mut h = StoreHealth::new(&nodes, true, "e".into());
        let range = |first, last, primary: &str, id: &str| SlotRange {
            first,
            last,
            primary: primary.into(),
            primary_id: Some(id.into()),
            replicas: Vec::new(),
        };
        // The cluster names its primaries by IP: matched by node id.
        let slots = [
            range(0, 8191, "10.0.0.1:1", "a"),
            range(8192, 16383, "10.0.0.2:2", "b"),
        ];
        h.observe(
            &[
                cluster_probe("h:1", "a", Role::Primary, &slots),
                cluster_probe("h:2", "b", Role::Primary, &slots),
                cluster_probe("h:3", "c", Role::Replica, &slots),
            ],
            MS,
            1,
        );
        assert!(h.failing().is_empty());
        // `b` dies: its slots have no primary until its replica takes over.
        h.observe(
            &[
                cluster_probe("h:1", "a", Role::Primary, &slots),
                dead("h:2"),
                cluster_probe("h:3", "c", Role::Replica, &slots),
            ],
            MS,
            2,
        );
        let f = h.failing();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].node, "h:2");
        assert!(f[0].reason.contains("8192-16383"), "{}", f[0].reason);
        // `c` took over.
        let after = [
            range(0, 8191, "10.0.0.1:1", "a"),
            range(8192, 16383, "10.0.0.3:3", "c"),
        ];
        h.observe(
            &[
                cluster_probe("h:1", "a", Role::Primary, &after),
                dead("h:2"),
                cluster_probe("h:3", "c", Role::Primary, &after),
            ],
            MS,
            3,
        );
        assert!(h.failing().is_empty(), "{:?}", h.failing());
        assert_eq!(h.status().kind, "redis-cluster");
        // Every node down: every node named.
        h.observe(&[dead("h:1"), dead("h:2"), dead("h:3")], MS, 4);
        assert_eq!(h.failing().len(), 3);
    }

    #[test]
    fn a_primary_whose_port_stays_closed_has_a_replica_take_over_once() {
        let nodes: Vec<String> = ["h:1", "h:2", "h:3", "h:4"].map(String::from).to_vec();
        let mut h = StoreHealth::new(&nodes, true, "e".into());
        let slots = [
            SlotRange {
                first: 0,
                last: 8191,
                primary: "10.0.0.1:1".into(),
                primary_id: Some("a".into()),
                replicas: vec![("10.0.0.3:3".into(), Some("c".into()))],
            },
            SlotRange {
                first: 8192,
                last: 16383,
                primary: "10.0.0.2:2".into(),
                primary_id: Some("b".into()),
                // Its first replica is not probed (not in the URL); the
                // second answers.
                replicas: vec![
                    ("10.0.0.9:9".into(), Some("x".into())),
                    ("10.0.0.4:4".into(), Some("d".into())),
                ],
            },
        ];
        let round = |h: &mut StoreHealth, b: Probe| {
            h.observe(
                &[
                    cluster_probe("h:1", "a", Role::Primary, &slots),
                    b,
                    cluster_probe("h:3", "c", Role::Replica, &slots),
                    cluster_probe("h:4", "d", Role::Replica, &slots),
                ],
                MS,
                1,
            );
            h.takeovers()
        };
        let alive = || cluster_probe("h:2", "b", Role::Primary, &slots);
        assert_eq!(round(&mut h, alive()), (vec![], vec![]));
        // A timeout is not a closed port: nothing is forced, however long.
        let slow = || Probe {
            node: "h:2".into(),
            result: Err("timed out".into()),
            refused: false,
        };
        for _ in 0..5 {
            assert!(round(&mut h, slow()).1.is_empty());
        }
        // One refusal is not enough; the second asks `b`'s answering replica.
        assert!(round(&mut h, dead("h:2")).1.is_empty());
        let (events, t) = round(&mut h, dead("h:2"));
        assert_eq!(
            t,
            [Takeover {
                replica: "h:4".into(),
                primary: "h:2".into(),
                unilateral: false,
            }]
        );
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, "store_takeover");
        assert!(events[0].reason.contains("h:4"), "{}", events[0].reason);
        // Once per outage, then again only after TAKEOVER_RETRY more probes,
        // without an election this time.
        for _ in 0..TAKEOVER_RETRY - 1 {
            assert!(round(&mut h, dead("h:2")).1.is_empty());
        }
        let (events, t) = round(&mut h, dead("h:2"));
        assert!(t.len() == 1 && t[0].unilateral, "{t:?}");
        assert!(
            events[0].reason.contains("TAKEOVER"),
            "{}",
            events[0].reason
        );
        // Answering again resets the count, and the next outage starts with
        // an election again.
        round(&mut h, alive());
        assert!(round(&mut h, dead("h:2")).1.is_empty());
        let t = round(&mut h, dead("h:2")).1;
        assert!(t.len() == 1 && !t[0].unilateral, "{t:?}");
        // A replica that does not answer is never asked; outside a cluster
        // nothing is forced.
        let mut h = StoreHealth::new(&nodes, true, "e".into());
        for _ in 0..3 {
            h.observe(
                &[
                    cluster_probe("h:1", "a", Role::Primary, &slots),
                    dead("h:2"),
                    cluster_probe("h:3", "c", Role::Replica, &slots),
                    dead("h:4"),
                ],
                MS,
                1,
            );
            assert!(h.takeovers().1.is_empty());
        }
        let mut single = StoreHealth::new(&nodes[..1], false, "e".into());
        for _ in 0..3 {
            single.observe(&[dead("h:1")], MS, 1);
            assert!(single.takeovers().1.is_empty());
        }
    }

    #[test]
    fn a_replica_cluster_slots_does_not_list_yet_is_found_by_its_role() {
        let nodes: Vec<String> = ["h:1", "h:2"].map(String::from).to_vec();
        let mut h = StoreHealth::new(&nodes, true, "e".into());
        let slots = [SlotRange {
            first: 0,
            last: 16383,
            primary: "h:1".into(),
            primary_id: Some("a".into()),
            replicas: Vec::new(),
        }];
        let replica_of = |primary: &str| {
            let mut p = cluster_probe("h:2", "b", Role::Replica, &slots);
            if let Ok(a) = &mut p.result {
                a.primary_of = Some(primary.into());
            }
            p
        };
        // A replica of another primary is never asked.
        for _ in 0..3 {
            h.observe(&[dead("h:1"), replica_of("h:9")], MS, 1);
            assert!(h.takeovers().1.is_empty());
        }
        let mut h = StoreHealth::new(&nodes, true, "e".into());
        h.observe(
            &[
                cluster_probe("h:1", "a", Role::Primary, &slots),
                replica_of("h:1"),
            ],
            MS,
            1,
        );
        h.observe(&[dead("h:1"), replica_of("h:1")], MS, 2);
        h.observe(&[dead("h:1"), replica_of("h:1")], MS, 3);
        let t = h.takeovers().1;
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0].replica, "h:2");
    }

    #[test]
    fn a_local_store_has_nothing_to_probe_and_never_fails() {
        let h = StoreHealth::new(&[], false, "e".into());
        assert!(!h.probed_store());
        assert!(h.failing().is_empty());
        assert_eq!(h.status().kind, "local");
    }
}
