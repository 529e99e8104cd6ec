//! Heartbeats and instance health: hosts register by heartbeating; instances an
//! agent reports dead (or suspected for [`SUSPECT_CONFIRM`]) leave every host's
//! groups, and rejoin once reported healthy for [`REJOIN_AFTER`]; a host silent
//! for [`HOST_SILENT`](super::HOST_SILENT) (six of its heartbeat intervals in a
//! large fleet, [`crate::liveness`]) has all its instances taken out until it is
//! heard again. Every heartbeat's answer tells the agent the interval to
//! heartbeat at.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sluice_proto::{HostHeartbeat, InstanceHealth, PinnedFlows};

use super::events::event;
use super::{DownReason, Reconciler, REJOIN_AFTER, REPUSH_AFTER, SUSPECT_CONFIRM};
use crate::desired::{instance_name, Host, InstanceKey};
use crate::error::ApiError;
use crate::model::HostAck;
use crate::store::Touched;

/// A parsed heartbeat (`POST /v1/hosts`).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    /// The heartbeat itself.
    pub hb: HostHeartbeat,
    /// Pinned-flow counts, if the agent sends them (else drains poll its status).
    pub pinned: Option<Vec<PinnedFlows>>,
    /// Whether the heartbeat carries instance health at all: only such hosts'
    /// silence suspects their instances.
    pub reports_health: bool,
}

/// Instances to take out of (`true`) or put back into their groups, and why.
type Changes = Vec<(InstanceKey, bool, String)>;

impl Reconciler {
    /// Registers or refreshes a host and applies the instance health it reports.
    pub fn heartbeat(&mut self, beat: Heartbeat, now: Instant) -> Result<HostAck, ApiError> {
        let Heartbeat {
            hb,
            pinned,
            reports_health,
        } = beat;
        let reg = hb.registration;
        let host = Host {
            id: reg.host,
            name: reg.name.clone(),
            underlay: reg.underlay,
            api: reg.api.trim_end_matches('/').to_string(),
            capacity: reg.capacity,
        };
        if self.desired.hosts.get(&reg.host) != Some(&host) {
            tracing::info!(
                host = host.id,
                name = %host.name,
                underlay = %host.underlay,
                api = %host.api,
                capacity = ?host.capacity,
                "host registered"
            );
            // The host itself and its peers (which carry its underlay): a
            // new host has none yet, so registering it derives its own
            // configuration only, not the fleet's.
            let mut scope: BTreeSet<u32> = self
                .configs
                .get(&reg.host)
                .map(|c| c.peers.iter().map(|p| p.host).collect())
                .unwrap_or_default();
            scope.insert(reg.host);
            // Changed in place, not on a copy of the fleet's state; undone
            // if it cannot be committed.
            let id = reg.host;
            let was = self.desired.hosts.insert(id, host);
            let touched = Touched {
                hosts: BTreeSet::from([id]),
                ..Touched::default()
            };
            self.commit_in_place(
                &scope,
                touched,
                move |d| match was {
                    Some(h) => {
                        d.hosts.insert(id, h);
                    }
                    None => {
                        d.hosts.remove(&id);
                    }
                },
                now,
            )?;
        }
        if self.desired.evacuated.contains(&reg.host) {
            // Alive after all: it may take instances again (those placed
            // elsewhere stay there).
            let mut next = self.desired.clone();
            next.evacuated.remove(&reg.host);
            self.commit(next, now)?;
            let mut e = event(
                "evacuated",
                format!("host {} heard from again: it may take instances", reg.host),
            );
            e.host = Some(reg.host);
            self.push_event(e, now);
        }
        let mut desired = self.configs.get(&reg.host).map(|c| c.version).unwrap_or(0);
        if reg.config_version > desired {
            // The agent runs a version from an earlier life of the controller (a
            // lost database): move past it so versions keep increasing for it.
            if let Some(c) = self.configs.get_mut(&reg.host) {
                c.version = reg.config_version + 1;
                desired = c.version;
            }
            self.store.save(&self.desired, &self.configs)?;
        }
        {
            let live = self.live.entry(reg.host).or_default();
            live.last_heard = Some(now);
            live.reported = Some(reg.config_version);
            live.reports_health |= reports_health;
        }
        if let Some(p) = pinned {
            self.pinned.insert(reg.host, (reg.config_version, p, now));
        }
        if !hb.chains.is_empty() {
            self.chain_reports.insert(reg.host, hb.chains);
        }
        if !hb.peers.is_empty() {
            self.peer_reports.insert(reg.host, hb.peers);
        }
        for ih in &hb.instances {
            // A report from a host the instance no longer runs on is stale.
            if self
                .desired
                .instance_by_name(&ih.name)
                .is_some_and(|(_, i)| i.host == reg.host)
            {
                self.instance_counts.insert(
                    ih.name.clone(),
                    crate::traffic::InstanceCounts {
                        rx: ih.rx_packets,
                        tx: ih.tx_packets,
                        drops: ih.drops + ih.queue_drops,
                    },
                );
                self.instance_cpu(&ih.name, ih.cpu_ms);
            }
        }
        self.health(reg.host, &hb.instances, now);
        self.backend_checks(reg.host, &hb.backend_checks, now);
        if !hb.accusations.is_empty() || self.accuses(reg.host) {
            self.accusations(reg.host, &hb.accusations, now);
        }
        // A failover may just have given this host a new version.
        let desired = self.configs.get(&reg.host).map_or(desired, |c| c.version);
        // Counted after registration: the fleet's size includes this host.
        let every = self.heartbeat_interval();
        self.counters.heartbeats += 1;
        let live = self.live.entry(reg.host).or_default();
        live.told = Some(every);
        let stale = reg.config_version != desired
            && !live.push_queued
            && !live.push_in_flight
            && live.last_push.is_none_or(|(v, at)| {
                v != desired || now.saturating_duration_since(at) >= REPUSH_AFTER
            });
        if stale {
            self.schedule_push(reg.host, now);
        }
        Ok(HostAck {
            host: reg.host,
            desired_version: desired,
            // Added by the HTTP edge, which holds the hosts' CA.
            api_cert: None,
            api_cert_not_after_ms: None,
            heartbeat_ms: Some(every.as_millis() as u64),
        })
    }

    /// Applies the instance health `host` reported: instances newly dead or
    /// suspected leave their groups, recovered ones rejoin (and instances out
    /// only because the host was silent rejoin now that it is heard, unless
    /// reported bad).
    fn health(&mut self, host: u32, report: &[InstanceHealth], now: Instant) {
        let mut changes: Changes = Vec::new();
        let mut mentioned = BTreeSet::new();
        for ih in report {
            let Some((key, inst)) = self.desired.instance_by_name(&ih.name) else {
                continue;
            };
            // A report from a host the instance no longer runs on is stale.
            if inst.host != host {
                continue;
            }
            let key = key.clone();
            mentioned.insert(key.clone());
            // Dead (its process gone after it ran) or suspected. An instance never
            // heard from and not suspected is still starting: left alone, as the
            // agent does, so new instances do not churn every host's groups.
            // A local-state instance is failed over only when its process is
            // gone: moving its flows on a mere suspicion would break them (their
            // state is inside it), while a slow instance may well answer again.
            let local = self.desired.local_state(&key.0, &key.1);
            let dead = !ih.alive && ih.last_heartbeat_age_ms.is_some();
            let suspected = ih.suspected && !local;
            // Suspected for SUSPECT_CONFIRM, report after report.
            let confirmed = suspected && {
                let since = *self.suspected_since.entry(key.clone()).or_insert(now);
                now.saturating_duration_since(since) >= SUSPECT_CONFIRM
            };
            if !suspected {
                self.suspected_since.remove(&key);
            }
            let bad = confirmed || dead;
            let healthy = !suspected && !dead;
            if !healthy {
                self.healthy_since.remove(&key);
            }
            let is_down = self.desired.down.contains(&key);
            if bad && !is_down {
                let why = if !ih.alive {
                    format!("host {host} reports its process dead")
                } else {
                    format!(
                        "host {host} suspects it (last heartbeat: {})",
                        ih.last_heartbeat_age_ms
                            .map_or("never".to_string(), |a| format!("{a} ms ago"))
                    )
                };
                changes.push((key, true, why));
            } else if healthy && is_down {
                let since = *self.healthy_since.entry(key.clone()).or_insert(now);
                let for_ = now.saturating_duration_since(since);
                if for_ >= REJOIN_AFTER {
                    changes.push((
                        key,
                        false,
                        format!("host {host} reports it alive (for {} ms)", for_.as_millis()),
                    ));
                }
            } else if bad && is_down {
                self.down_reason.insert(key, DownReason::Reported);
            }
        }
        let silent: Vec<InstanceKey> = self
            .down_reason
            .iter()
            .filter(|(k, r)| {
                **r == DownReason::HostSilent
                    && !mentioned.contains(*k)
                    && self
                        .desired
                        .instances
                        .get(*k)
                        .is_some_and(|i| i.host == host)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in silent {
            changes.push((k, false, format!("host {host} is heard from again")));
        }
        self.apply_health(changes, DownReason::Reported, now);
    }

    /// Takes instances out of (`true`) or back into their groups in one commit,
    /// and logs an event per instance.
    fn apply_health(&mut self, changes: Changes, reason: DownReason, now: Instant) {
        if changes.is_empty() {
            return;
        }
        let first = self.unix_ms(now);
        let mut next = self.desired.clone();
        for (k, down, _) in &changes {
            if *down {
                next.down.insert(k.clone());
            } else {
                next.down.remove(k);
            }
        }
        let pushed = match self.commit(next, now) {
            Ok(pushed) => pushed,
            Err(e) => {
                let e = event("error", format!("health change not applied: {}", e.msg));
                self.push_event(e, now);
                return;
            }
        };
        for (k, down, why) in changes {
            self.healthy_since.remove(&k);
            if down {
                self.down_reason.insert(k.clone(), reason);
            } else {
                self.down_reason.remove(&k);
            }
            let name = instance_name(&k.0, &k.1, k.2);
            let effect = if pushed.is_empty() {
                "no host's configuration changed (no other instance of its middlebox is up)"
                    .to_string()
            } else {
                format!(
                    "groups of {} rewritten on hosts {:?}",
                    k.1,
                    pushed.keys().collect::<Vec<_>>()
                )
            };
            let mut e = event(
                if down { "failover" } else { "rejoin" },
                format!(
                    "{name} {}: {why}; {effect}",
                    if down {
                        "out of its groups"
                    } else {
                        "back in its groups"
                    }
                ),
            );
            e.host = self.desired.instances.get(&k).map(|i| i.host);
            e.tenant = Some(k.0.clone());
            e.middlebox = Some(k.1.clone());
            e.instance = Some(name);
            e.first_report_ms = Some(first);
            let id = self.push_event(e, now);
            if !pushed.is_empty() {
                self.events.awaiting_push.insert(id, pushed.clone());
            }
        }
    }

    /// Suspects every instance of a health-reporting host silent for
    /// [`HOST_SILENT`](super::HOST_SILENT) or six of its intervals (`silent`, from [`Reconciler::silent_hosts`]: empty when
    /// every watched host is silent at once, since the controller or the
    /// management network is then the likelier culprit).
    pub(super) fn check_silence(&mut self, silent: &BTreeMap<u32, Duration>, now: Instant) {
        if silent.is_empty() {
            return;
        }
        let changes: Changes = self
            .desired
            .instances
            .iter()
            .filter(|(k, i)| silent.contains_key(&i.host) && !self.desired.down.contains(*k))
            .map(|(k, i)| {
                (
                    k.clone(),
                    true,
                    format!(
                        "host {} silent for {} ms (its agent may be gone)",
                        i.host,
                        silent[&i.host].as_millis()
                    ),
                )
            })
            .collect();
        self.apply_health(changes, DownReason::HostSilent, now);
        // HOST_GRACE in a small fleet; as much longer as the host's silence
        // threshold is in a large one.
        let current = self.heartbeat_interval();
        let dead: Vec<(u32, Duration)> = silent
            .iter()
            .map(|(h, d)| (*h, *d))
            .filter(|(h, d)| {
                let every = self
                    .live
                    .get(h)
                    .map_or(current, |l| Self::beats_every(l, current));
                *d > crate::liveness::dead_after(every) && !self.desired.evacuated.contains(h)
            })
            .collect();
        for (h, d) in dead {
            self.evacuate(h, d, now);
        }
    }

    /// Places the instances of `host`, silent for `silent`, on live hosts.
    fn evacuate(&mut self, host: u32, silent: Duration, now: Instant) {
        let mut next = self.desired.clone();
        let (moved, failed) = next.evacuate(host);
        if let Err(e) = self.commit(next, now) {
            tracing::error!(host, error = %e, "cannot evacuate the host");
            return;
        }
        let mut e = event(
            "evacuated",
            format!(
                "host {host} silent for {} s: taken for dead; instances of {} placed again on \
                 live hosts{}",
                silent.as_secs(),
                if moved.is_empty() {
                    "no tenant".to_string()
                } else {
                    moved.join(", ")
                },
                failed
                    .iter()
                    .map(|(t, e)| format!("; {t}: {e}"))
                    .collect::<String>()
            ),
        );
        e.host = Some(host);
        self.push_event(e, now);
    }
}
