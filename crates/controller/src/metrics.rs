//! `GET /metrics`: the controller's view of the deployment in Prometheus text
//! format — hosts (alive, in sync), tenants, NF instances by tenant,
//! middlebox and state, configuration pushes and their latency, events — plus
//! the `process_*` metrics. Rendered from the reconciler's state and `now`
//! (pure but for the `/proc` read of [`sluice_metrics::process`]).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Instant;

use sluice_metrics::{escape, family, Histogram, LATENCY_BUCKETS};

use crate::reconcile::Reconciler;
use crate::resources::hosts::host_infos;
use crate::resources::tenants::instance_infos;

/// What the controller counts as it runs (the rest is derived from state when
/// scraped).
#[derive(Debug, Clone, PartialEq)]
pub struct Counters {
    /// Configuration pushes that the agent accepted.
    pub pushes_ok: u64,
    /// Configuration pushes that failed (and are retried).
    pub pushes_failed: u64,
    /// Time from starting a push to its answer.
    pub push_seconds: Histogram,
    /// Heartbeats (and registrations) received.
    pub heartbeats: u64,
    /// Pushes the agents accepted, by kind: whole configurations, deltas.
    pub pushes_by_kind: [u64; 2],
    /// Bytes of configuration sent (accepted or not), by kind.
    pub push_bytes: [u64; 2],
    /// Deltas an agent refused (another version ran, or an agent without
    /// `PATCH /v1/config`), each followed at once by the whole configuration.
    pub deltas_refused: u64,
}

/// What a push sent: a host's whole configuration (`PUT /v1/config`) or the
/// changes since the version its agent acknowledged (`PATCH /v1/config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushKind {
    /// The whole configuration.
    Full = 0,
    /// A [`sluice_proto::ConfigDelta`].
    Delta = 1,
}

impl PushKind {
    /// The metrics' label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PushKind::Full => "full",
            PushKind::Delta => "delta",
        }
    }
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            pushes_ok: 0,
            pushes_failed: 0,
            push_seconds: Histogram::new(LATENCY_BUCKETS),
            heartbeats: 0,
            pushes_by_kind: [0; 2],
            push_bytes: [0; 2],
            deltas_refused: 0,
        }
    }
}

/// The metrics text at `now`, including `process_*` if `process` is set
/// (tests leave it out to compare exact text).
pub fn render(r: &Reconciler, now: Instant, process: bool) -> String {
    let mut o = String::new();
    let hosts = host_infos(r, now);
    family(
        &mut o,
        "sluice_controller_host_up",
        "gauge",
        "1 if the host's agent was heard from within the last second (or, in a large fleet, six heartbeat intervals).",
    );
    for h in &hosts {
        let _ = writeln!(
            o,
            "sluice_controller_host_up{{host=\"{}\"}} {}",
            escape(&h.name),
            u8::from(h.alive)
        );
    }
    family(
        &mut o,
        "sluice_controller_host_in_sync",
        "gauge",
        "1 if the host reported running the configuration the controller wants.",
    );
    for h in &hosts {
        let _ = writeln!(
            o,
            "sluice_controller_host_in_sync{{host=\"{}\"}} {}",
            escape(&h.name),
            u8::from(h.in_sync)
        );
    }
    family(
        &mut o,
        "sluice_controller_host_push_failing",
        "gauge",
        "1 while pushes of the host's configuration fail (they are retried).",
    );
    for h in &hosts {
        let _ = writeln!(
            o,
            "sluice_controller_host_push_failing{{host=\"{}\"}} {}",
            escape(&h.name),
            u8::from(h.push_error.is_some())
        );
    }
    family(
        &mut o,
        "sluice_controller_host_contained",
        "gauge",
        "1 while the host is contained (accused by enough peers of ignoring congestion feedback).",
    );
    let d = r.desired();
    for (id, h) in &d.hosts {
        let _ = writeln!(
            o,
            "sluice_controller_host_contained{{host=\"{}\"}} {}",
            escape(&h.name),
            u8::from(d.contained.contains(id))
        );
    }
    family(
        &mut o,
        "sluice_controller_host_accusers",
        "gauge",
        "Hosts whose standing accusations of this host count toward its containment.",
    );
    for (id, n) in r.accused_hosts() {
        let name = d
            .hosts
            .get(&id)
            .map_or_else(|| id.to_string(), |h| h.name.clone());
        let _ = writeln!(
            o,
            "sluice_controller_host_accusers{{host=\"{}\"}} {n}",
            escape(&name)
        );
    }
    family(
        &mut o,
        "sluice_controller_tenants",
        "gauge",
        "Applied tenants.",
    );
    let _ = writeln!(o, "sluice_controller_tenants {}", r.desired().tenants.len());
    family(
        &mut o,
        "sluice_controller_instances",
        "gauge",
        "NF instances placed, by tenant, middlebox and state (placed, draining, down).",
    );
    let mut by: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for i in instance_infos(r.desired(), None) {
        *by.entry((i.tenant, i.middlebox, i.state)).or_default() += 1;
    }
    for ((t, mb, st), n) in &by {
        let _ = writeln!(
            o,
            "sluice_controller_instances{{tenant=\"{}\",middlebox=\"{}\",state=\"{}\"}} {n}",
            escape(t),
            escape(mb),
            escape(st)
        );
    }
    chain_hops(&mut o, r);
    let c = r.counters();
    family(
        &mut o,
        "sluice_controller_pushes_total",
        "counter",
        "Configuration pushes to agents, by result.",
    );
    let _ = writeln!(
        o,
        "sluice_controller_pushes_total{{result=\"ok\"}} {}\nsluice_controller_pushes_total{{result=\"error\"}} {}",
        c.pushes_ok, c.pushes_failed
    );
    family(
        &mut o,
        "sluice_controller_pushes_by_kind_total",
        "counter",
        "Configuration pushes the agents accepted, by kind: the whole configuration, or a delta against the version the agent acknowledged.",
    );
    for k in [PushKind::Full, PushKind::Delta] {
        let _ = writeln!(
            o,
            "sluice_controller_pushes_by_kind_total{{kind=\"{}\"}} {}",
            k.as_str(),
            c.pushes_by_kind[k as usize]
        );
    }
    family(
        &mut o,
        "sluice_controller_push_bytes_total",
        "counter",
        "Bytes of configuration sent to agents (JSON bodies, accepted or not), by kind.",
    );
    for k in [PushKind::Full, PushKind::Delta] {
        let _ = writeln!(
            o,
            "sluice_controller_push_bytes_total{{kind=\"{}\"}} {}",
            k.as_str(),
            c.push_bytes[k as usize]
        );
    }
    family(
        &mut o,
        "sluice_controller_push_deltas_refused_total",
        "counter",
        "Deltas an agent refused (it ran another version than the delta's base, or has no PATCH /v1/config), each followed at once by the whole configuration.",
    );
    let _ = writeln!(
        o,
        "sluice_controller_push_deltas_refused_total {}",
        c.deltas_refused
    );
    family(
        &mut o,
        "sluice_controller_push_duration_seconds",
        "histogram",
        "Time from sending a host its configuration to the agent's answer.",
    );
    c.push_seconds
        .render(&mut o, "sluice_controller_push_duration_seconds", "");
    family(
        &mut o,
        "sluice_controller_heartbeats_total",
        "counter",
        "Heartbeats (and registrations) received from agents.",
    );
    let _ = writeln!(o, "sluice_controller_heartbeats_total {}", c.heartbeats);
    family(
        &mut o,
        "sluice_controller_heartbeat_interval_seconds",
        "gauge",
        "The interval agents are told to heartbeat at (grows with the fleet to keep the heartbeats within the controller's budget).",
    );
    let _ = writeln!(
        o,
        "sluice_controller_heartbeat_interval_seconds {}",
        r.heartbeat_interval().as_secs_f64()
    );
    family(
        &mut o,
        "sluice_controller_events_total",
        "counter",
        "Events recorded since the controller started (GET /v1/events), by kind.",
    );
    for (kind, n) in r.events().totals() {
        let _ = writeln!(
            o,
            "sluice_controller_events_total{{kind=\"{}\"}} {n}",
            escape(kind)
        );
    }
    backends(&mut o, r, now);
    instance_drains(&mut o, r);
    distribution(&mut o, r);
    consolidation(&mut o, r);
    uplinks(&mut o, r);
    store(&mut o, r);
    leader(&mut o, r);
    if process {
        sluice_metrics::process(&mut o);
    }
    o
}

/// Which middleboxes each chain crosses, in order (an info metric, always 1):
/// what joins the instances' per-middlebox histograms into per-chain views.
/// A chain's mean added latency is the sum of its hops' means (each of its
/// packets crosses each hop), e.g. `sum by (tenant, chain)
/// (sluice_controller_chain_hop_info * on (tenant, middlebox) group_left ()
/// (sum by (tenant, middlebox) (rate(sluice_instance_added_latency_seconds_sum[5m]))
/// / sum by (tenant, middlebox) (rate(sluice_instance_added_latency_seconds_count[5m]))))`;
/// its quantiles are not sums of the hops' quantiles (docs/CONTROLLER.md).
fn chain_hops(o: &mut String, r: &Reconciler) {
    family(
        o,
        "sluice_controller_chain_hop_info",
        "gauge",
        "1 for each middlebox a chain crosses, by its position (hop, from 1) in the forward direction.",
    );
    for (t, tenant) in &r.desired().tenants {
        for c in &tenant.spec.chains {
            for (k, mb) in c.middleboxes(&tenant.spec).enumerate() {
                let _ = writeln!(
                    o,
                    "sluice_controller_chain_hop_info{{tenant=\"{}\",chain=\"{}\",hop=\"{}\",middlebox=\"{}\"}} 1",
                    escape(t),
                    escape(&c.name),
                    k + 1,
                    escape(mb)
                );
            }
        }
    }
}

/// NF instances draining (an operator's drain or a scale-in) or stopped by
/// an operator's drain: a state set, one series per state, 1 for the
/// current one. Instances serving have none.
fn instance_drains(o: &mut String, r: &Reconciler) {
    family(
        o,
        "sluice_controller_instance_drain",
        "gauge",
        "1 for the drain state of each NF instance draining or stopped (draining, stopped), 0 for the other.",
    );
    let d = r.desired();
    let keys: std::collections::BTreeSet<&crate::desired::InstanceKey> =
        d.draining.iter().chain(d.instance_drains.keys()).collect();
    for k in keys {
        let now = if d.draining.contains(k) {
            "draining"
        } else {
            "stopped"
        };
        for st in ["draining", "stopped"] {
            let _ = writeln!(
                o,
                "sluice_controller_instance_drain{{tenant=\"{}\",middlebox=\"{}\",instance=\"{}\",state=\"{st}\"}} {}",
                escape(&k.0),
                escape(&k.1),
                escape(&crate::desired::instance_name(&k.0, &k.1, k.2)),
                u8::from(st == now)
            );
        }
    }
}

/// The consolidated groups' split (CoMb's LP): the most loaded host's
/// predicted utilisation under the installed shares and under even ones.
fn consolidation(o: &mut String, r: &Reconciler) {
    let Some(v) = r.consolidation_view() else {
        return;
    };
    family(
        o,
        "sluice_controller_consolidation_worst_host_utilisation",
        "gauge",
        "Predicted utilisation (measured load over declared cores) of the most loaded host of the consolidated groups, under the installed split and under even shares (split=\"even\").",
    );
    for (split, x) in [("installed", v.installed), ("even", v.even)] {
        let _ = writeln!(
            o,
            "sluice_controller_consolidation_worst_host_utilisation{{split=\"{split}\"}} {x}"
        );
    }
}

/// Network-aware distribution's last decision per tenant: the worst uplink
/// load it predicts for the installed shares and for even ones, and each
/// rack uplink's predicted traffic (measured traffic through the testbed's
/// or the network's own counters is what to compare them with).
fn distribution(o: &mut String, r: &Reconciler) {
    let ds = r.distributions();
    family(
        o,
        "sluice_controller_distribution_worst_uplink",
        "gauge",
        "Predicted worst rack uplink load of each tenant's installed split (a fraction of the declared capacity; bytes per second when none is declared), and of even shares (split=\"even\").",
    );
    for (t, d) in ds {
        for (split, v) in [("installed", d.predicted_worst), ("even", d.even_worst)] {
            let _ = writeln!(
                o,
                "sluice_controller_distribution_worst_uplink{{tenant=\"{}\",split=\"{split}\"}} {v}",
                escape(t)
            );
        }
    }
    family(
        o,
        "sluice_controller_distribution_imbalance",
        "gauge",
        "The part of each tenant's hash space its installed split keeps away from even shares, averaged over its middleboxes (0: even).",
    );
    for (t, d) in ds {
        let _ = writeln!(
            o,
            "sluice_controller_distribution_imbalance{{tenant=\"{}\"}} {}",
            escape(t),
            d.imbalance
        );
    }
    family(
        o,
        "sluice_controller_distribution_uplink_target",
        "gauge",
        "The utilisation of a declared rack uplink below which network-aware distribution keeps shares even (present when capacities are declared).",
    );
    if let Some(t) = ds.values().find_map(|d| d.target) {
        let _ = writeln!(o, "sluice_controller_distribution_uplink_target {t}");
    }
    family(
        o,
        "sluice_controller_distribution_uplink_bytes_per_second",
        "gauge",
        "Traffic each tenant's installed split is predicted to put on each rack uplink, by direction (up: out of the rack).",
    );
    for (t, d) in ds {
        for (rack, (up, down)) in d.racks.iter().zip(&d.uplink) {
            for (dir, v) in [("up", up), ("down", down)] {
                let _ = writeln!(
                    o,
                    "sluice_controller_distribution_uplink_bytes_per_second{{tenant=\"{}\",rack=\"{}\",direction=\"{dir}\"}} {v}",
                    escape(t),
                    escape(rack)
                );
            }
        }
    }
}

/// The rack uplinks, measured from the agents' per-peer fabric counters
/// ([`crate::uplinks`]) next to what network-aware distribution predicted
/// for them (summed over tenants), so a wrong prediction shows. Present
/// with two racks or more.
fn uplinks(o: &mut String, r: &Reconciler) {
    let report = r.uplink_report();
    family(
        o,
        "sluice_controller_rack_uplink_bytes_total",
        "counter",
        "Bytes each rack uplink carried, by direction (up: out of the rack), measured: what the agents sent through the fabric between hosts of different racks, at wire size.",
    );
    for u in &report {
        for (dir, v) in [("up", u.up_bytes_total), ("down", u.down_bytes_total)] {
            let _ = writeln!(
                o,
                "sluice_controller_rack_uplink_bytes_total{{rack=\"{}\",direction=\"{dir}\"}} {v}",
                escape(&u.rack)
            );
        }
    }
    family(
        o,
        "sluice_controller_rack_uplink_bytes_per_second",
        "gauge",
        "Each rack uplink's traffic by direction: measured over the last second (source=\"measured\"), and predicted by network-aware distribution for the chains' traffic it splits (source=\"predicted\", summed over tenants; without the fabric's headers).",
    );
    for u in &report {
        let rows = [
            ("up", "measured", Some(u.up_bytes_per_s)),
            ("down", "measured", Some(u.down_bytes_per_s)),
            ("up", "predicted", u.predicted_up_bytes_per_s),
            ("down", "predicted", u.predicted_down_bytes_per_s),
        ];
        for (dir, source, v) in rows {
            if let Some(v) = v {
                let _ = writeln!(
                    o,
                    "sluice_controller_rack_uplink_bytes_per_second{{rack=\"{}\",direction=\"{dir}\",source=\"{source}\"}} {v}",
                    escape(&u.rack)
                );
            }
        }
    }
    family(
        o,
        "sluice_controller_rack_uplink_utilisation",
        "gauge",
        "The busier direction of each rack uplink as a fraction of its declared capacity, measured and predicted (present for declared uplinks).",
    );
    for u in &report {
        for (source, v) in [
            ("measured", u.utilisation),
            ("predicted", u.predicted_utilisation),
        ] {
            if let Some(v) = v {
                let _ = writeln!(
                    o,
                    "sluice_controller_rack_uplink_utilisation{{rack=\"{}\",source=\"{source}\"}} {v}",
                    escape(&u.rack)
                );
            }
        }
    }
}

/// The load balancers' backends: a state set (one series per state, 1 for
/// the backend's current one, as Prometheus's conventions for enums) and
/// the transitions by the state entered.
fn backends(o: &mut String, r: &Reconciler, now: Instant) {
    family(
        o,
        "sluice_controller_backend_state",
        "gauge",
        "1 for the state each load-balancer backend is in (up, down, draining, removed), 0 for the others.",
    );
    for b in r.backend_infos(None, now) {
        for st in crate::reconcile::BACKEND_STATES {
            let _ = writeln!(
                o,
                "sluice_controller_backend_state{{tenant=\"{}\",middlebox=\"{}\",backend=\"{}\",state=\"{}\"}} {}",
                escape(&b.tenant),
                escape(&b.middlebox),
                escape(&b.backend),
                st.as_str(),
                u8::from(b.state == st.as_str())
            );
        }
    }
    family(
        o,
        "sluice_controller_backend_transitions_total",
        "counter",
        "Load-balancer backend state changes since the controller started, by the state entered.",
    );
    for st in crate::reconcile::BACKEND_STATES {
        let _ = writeln!(
            o,
            "sluice_controller_backend_transitions_total{{to=\"{}\"}} {}",
            st.as_str(),
            r.backends
                .transitions
                .get(st.as_str())
                .copied()
                .unwrap_or(0)
        );
    }
}

/// Replicated controllers: which leads, and since when (nothing for a single
/// controller; standbys do not listen, so only the leader is scraped).
fn leader(o: &mut String, r: &Reconciler) {
    let Some(l) = r.leader() else {
        return;
    };
    family(
        o,
        "sluice_controller_leader",
        "gauge",
        "1 on the replicated controller that leads (the only one serving), by name.",
    );
    let _ = writeln!(
        o,
        "sluice_controller_leader{{name=\"{}\"}} 1",
        escape(&l.name)
    );
    family(
        o,
        "sluice_controller_leader_since_seconds",
        "gauge",
        "When this controller's term as leader began, Unix seconds.",
    );
    let _ = writeln!(
        o,
        "sluice_controller_leader_since_seconds {}",
        l.since_ms / 1000
    );
    let members = r.controllers();
    if members.is_empty() {
        return;
    }
    family(
        o,
        "sluice_controller_member",
        "gauge",
        "1 for each replicated controller running (its record in etcd is renewed), by name and role (leader or standby).",
    );
    for m in members {
        let role = if m.leading { "leader" } else { "standby" };
        let _ = writeln!(
            o,
            "sluice_controller_member{{name=\"{}\",role=\"{role}\"}} 1",
            escape(&m.name)
        );
    }
    family(
        o,
        "sluice_controller_standbys",
        "gauge",
        "Replicated controllers waiting to take over (0: the next leader failure stops the API until one returns).",
    );
    let _ = writeln!(
        o,
        "sluice_controller_standbys {}",
        members.iter().filter(|m| !m.leading).count()
    );
}

/// The state store's families, when the state URL names one (a `local`
/// store has nothing to watch).
fn store(o: &mut String, r: &Reconciler) {
    let h = r.store_health();
    if !h.probed_store() {
        return;
    }
    family(
        o,
        "sluice_controller_store_up",
        "gauge",
        "1 if the state store node answered the controller's last probe.",
    );
    for (node, up) in h.nodes_up() {
        let _ = writeln!(
            o,
            "sluice_controller_store_up{{node=\"{}\"}} {}",
            escape(&node),
            u8::from(up)
        );
    }
    family(
        o,
        "sluice_controller_store_lost_data_total",
        "counter",
        "Times a state store node was found to have lost its data (restarted empty or flushed).",
    );
    let _ = writeln!(
        o,
        "sluice_controller_store_lost_data_total {}",
        h.lost_data_total()
    );
    if let Some(s) = h.probe_seconds() {
        family(
            o,
            "sluice_controller_store_probe_seconds",
            "gauge",
            "How long the last probe of every state store node took.",
        );
        let _ = writeln!(o, "sluice_controller_store_probe_seconds {s}");
    }
}
