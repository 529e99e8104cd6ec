//! Compromised hosts (Seawall §4): agents accuse peers that ignore their
//! congestion feedback (`sluice_seawall::audit`) in every heartbeat, and
//! drop the accused's packets to themselves meanwhile (the incremental
//! sandbox). The controller contains a host only once `threshold` distinct
//! hosts accuse it, so a single subverted host cannot get an innocent one
//! shut out: an accusation is attributed to the heartbeat's host, which the
//! API checks against the caller's host token (a report in another host's
//! name is a 403 before it gets here), a host cannot accuse itself, and a
//! contained host's accusations count for nothing. A contained host leaves
//! every peer list and its instances are placed again elsewhere
//! ([`crate::desired::Desired::contain`]); only an operator releases it.
//! Accusations made before a release do not count again: the accusing agents
//! must withdraw them (their auditors forgive a host within its allowance)
//! and find the host misbehaving anew.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_proto::Accusation;

use super::events::event;
use super::Reconciler;
use crate::error::ApiError;

/// An accusation not repeated for this long is dropped (its reporter went
/// silent, or stopped sending accusations).
pub const ACCUSATION_TTL: Duration = Duration::from_secs(5);

/// Distinct accusers that contain a host unless the controller is told
/// otherwise (`sluice controller --containment-threshold`).
pub const DEFAULT_THRESHOLD: usize = 2;

/// One host's accusation of another, as the controller keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The agent's evidence, latest.
    pub(crate) evidence: Accusation,
    /// When the controller first heard it.
    pub(crate) first: Instant,
    /// When it was last repeated.
    pub(crate) last: Instant,
}

/// The live containment state (never persisted but the contained set, which
/// is part of the desired state).
#[derive(Debug, Clone)]
pub struct Containment {
    /// Accusers needed to contain a host.
    pub(crate) threshold: usize,
    /// Accusations by (accused, accuser).
    pub(crate) held: BTreeMap<(u32, u32), Held>,
    /// When each host was last released by an operator.
    pub(crate) released: BTreeMap<u32, Instant>,
}

impl Default for Containment {
    fn default() -> Containment {
        Containment {
            threshold: DEFAULT_THRESHOLD,
            held: BTreeMap::new(),
            released: BTreeMap::new(),
        }
    }
}

/// `GET /v1/containment`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContainmentInfo {
    /// Accusers needed to contain a host.
    pub threshold: usize,
    /// Contained hosts.
    pub contained: Vec<u32>,
    /// Standing accusations.
    pub accusations: Vec<AccusationInfo>,
}

/// One standing accusation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AccusationInfo {
    /// The accused host.
    pub host: u32,
    /// The accusing host.
    pub by: u32,
    /// What the accused sent, bits/s.
    pub rate_bps: u64,
    /// What the feedback allowed it, bits/s.
    pub allowance_bps: u64,
    /// Congested periods in a row it had been told of.
    pub congested_periods: u32,
    /// Milliseconds since the controller first heard it.
    pub age_ms: u64,
    /// Whether it counts toward containment (false: made before the
    /// accused's last release, or by a contained host).
    pub counts: bool,
}

impl Reconciler {
    /// Sets how many distinct accusers contain a host (at least 1).
    pub fn set_containment_threshold(&mut self, f: usize) {
        self.containment.threshold = f.max(1);
    }

    /// Takes `reporter`'s current accusations (the whole list: one missing
    /// was withdrawn) and contains any host they bring to the threshold.
    pub(super) fn accusations(&mut self, reporter: u32, list: &[Accusation], now: Instant) {
        let mut fresh = Vec::new();
        let withdrawn: Vec<u32> = self
            .containment
            .held
            .keys()
            .filter(|(a, r)| *r == reporter && !list.iter().any(|x| x.host == *a))
            .map(|(a, _)| *a)
            .collect();
        for a in withdrawn {
            self.containment.held.remove(&(a, reporter));
            let mut e = event(
                "accusation",
                format!("host {reporter} withdrew its accusation of host {a}"),
            );
            e.host = Some(a);
            self.push_event(e, now);
        }
        for x in list {
            // Only registered hosts, never itself.
            if x.host == reporter || !self.desired.hosts.contains_key(&x.host) {
                continue;
            }
            match self.containment.held.get_mut(&(x.host, reporter)) {
                Some(h) => {
                    h.evidence = x.clone();
                    h.last = now;
                }
                None => {
                    self.containment.held.insert(
                        (x.host, reporter),
                        Held {
                            evidence: x.clone(),
                            first: now,
                            last: now,
                        },
                    );
                    fresh.push(x.clone());
                }
            }
        }
        for x in fresh {
            let mut e = event(
                "accusation",
                format!(
                    "host {reporter} accuses host {} of ignoring its congestion feedback: {} bit/s against an allowance of {} after {} congested periods",
                    x.host, x.rate_bps, x.allowance_bps, x.congested_periods
                ),
            );
            e.host = Some(x.host);
            self.push_event(e, now);
            self.check_containment(x.host, now);
        }
    }

    /// Whether `reporter` has standing accusations.
    pub(super) fn accuses(&self, reporter: u32) -> bool {
        self.containment.held.keys().any(|(_, r)| *r == reporter)
    }

    /// Whether `(accused, accuser)`'s accusation counts.
    fn counts(&self, accused: u32, accuser: u32, h: &Held) -> bool {
        !self.desired.contained.contains(&accuser)
            && self
                .containment
                .released
                .get(&accused)
                .is_none_or(|r| h.first > *r)
    }

    /// The hosts whose accusations of `host` count.
    fn accusers(&self, host: u32) -> Vec<u32> {
        self.containment
            .held
            .range((host, 0)..=(host, u32::MAX))
            .filter(|((a, r), h)| self.counts(*a, *r, h))
            .map(|((_, r), _)| *r)
            .collect()
    }

    /// Contains `host` if enough hosts accuse it.
    fn check_containment(&mut self, host: u32, now: Instant) {
        if self.desired.contained.contains(&host) {
            return;
        }
        let by = self.accusers(host);
        if by.len() < self.containment.threshold {
            return;
        }
        let mut next = self.desired.clone();
        let (moved, failed) = next.contain(host);
        let reason = format!(
            "host {host} contained: accused by hosts {by:?} (threshold {}); it is no host's peer and its instances of {moved:?} were placed elsewhere",
            self.containment.threshold
        );
        match self.commit(next, now) {
            Ok(_) => self.contained_events(host, reason, failed, now),
            Err(err) => {
                let mut e = event(
                    "error",
                    format!("host {host} should be contained but could not be: {err:?}"),
                );
                e.host = Some(host);
                self.push_event(e, now);
            }
        }
    }

    /// Drops accusations not repeated for [`ACCUSATION_TTL`].
    pub(super) fn expire_accusations(&mut self, now: Instant) {
        self.containment
            .held
            .retain(|_, h| now.saturating_duration_since(h.last) < ACCUSATION_TTL);
    }

    /// Contains `host` because an operator revoked its credentials (the API
    /// edge refuses its certificates and deleted its tokens): it leaves every
    /// peer list and its instances are placed elsewhere, as a host accused by
    /// enough others is. Returns whether it was newly contained.
    pub fn revoke_host(&mut self, host: u32, now: Instant) -> Result<bool, ApiError> {
        if !self.desired.hosts.contains_key(&host) {
            return Err(ApiError::not_found(format!(
                "host {host} is not registered"
            )));
        }
        if self.desired.contained.contains(&host) {
            return Ok(false);
        }
        let mut next = self.desired.clone();
        let (moved, failed) = next.contain(host);
        self.commit(next, now)?;
        let reason = format!(
            "host {host} revoked by an operator: its certificates are refused, it is no host's \
             peer and its instances of {moved:?} were placed elsewhere"
        );
        self.contained_events(host, reason, failed, now);
        Ok(true)
    }

    /// Logs a committed containment of `host`: why, and an error event per
    /// tenant whose instances found no other host.
    fn contained_events(
        &mut self,
        host: u32,
        reason: String,
        failed: Vec<(String, crate::desired::PlaceError)>,
        now: Instant,
    ) {
        tracing::warn!(host, "{reason}");
        let mut e = event("contained", reason);
        e.host = Some(host);
        self.push_event(e, now);
        for (t, why) in failed {
            let mut e = event(
                "error",
                format!("tenant `{t}`: instances of contained host {host} could not be placed again: {why}"),
            );
            e.tenant = Some(t);
            e.host = Some(host);
            self.push_event(e, now);
        }
    }

    /// Releases a contained host (an operator's decision): it is a peer again
    /// and may take instances; accusations made so far no longer count.
    pub fn release_host(&mut self, host: u32, now: Instant) -> Result<bool, ApiError> {
        if !self.desired.hosts.contains_key(&host) {
            return Err(ApiError::not_found(format!(
                "host {host} is not registered"
            )));
        }
        self.containment.released.insert(host, now);
        let was = self.desired.contained.contains(&host);
        // The agents hear of the release too: each forgets its own
        // accusations of the host instead of sandboxing it until its auditor
        // forgives it.
        let mut next = self.desired.clone();
        next.contained.remove(&host);
        *next.pardons.entry(host).or_default() += 1;
        self.commit(next, now)?;
        let what = if was {
            "released by an operator: a peer again"
        } else {
            "cleared of accusations by an operator"
        };
        let mut e = event("contained", format!("host {host} {what}"));
        e.host = Some(host);
        self.push_event(e, now);
        Ok(was)
    }

    /// What `GET /v1/containment` shows.
    pub fn containment(&self, now: Instant) -> ContainmentInfo {
        ContainmentInfo {
            threshold: self.containment.threshold,
            contained: self.desired.contained.iter().copied().collect(),
            accusations: self
                .containment
                .held
                .iter()
                .map(|(&(a, r), h)| AccusationInfo {
                    host: a,
                    by: r,
                    rate_bps: h.evidence.rate_bps,
                    allowance_bps: h.evidence.allowance_bps,
                    congested_periods: h.evidence.congested_periods,
                    age_ms: now.saturating_duration_since(h.first).as_millis() as u64,
                    counts: self.counts(a, r, h),
                })
                .collect(),
        }
    }

    /// Accusers of each accused host (counting ones), for `/metrics`.
    pub fn accused_hosts(&self) -> BTreeMap<u32, usize> {
        let mut out = BTreeMap::new();
        for &(a, _) in self.containment.held.keys() {
            out.insert(a, self.accusers(a).len());
        }
        out
    }
}
