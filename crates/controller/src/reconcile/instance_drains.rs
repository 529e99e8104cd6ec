//! An operator's drain of one NF instance (`sluice drain instance`): it
//! leaves its groups for new flows at once (weight 0), and is stopped (kept
//! placed, with no process) once its flows no longer need it or the drain's
//! delay runs out, until `sluice undrain instance`. What "no longer need
//! it" means depends on where its middlebox keeps flow state:
//!
//! - `state: local` (pinned): the agents keep its pinned flows on it; it is
//!   stopped once no host has a flow pinned to it, as a scale-in drain is
//!   ended (`Reconciler::check_drains`).
//! - `state: shared` or `cached`: any instance can take a flow over, so its
//!   flows move at once, with their state in the store; it is stopped once
//!   every host of its tenant runs the configuration without it (packets
//!   still in flight to it on a host that has not switched are not lost).
//!
//! The drain is kept in [`crate::desired::Desired::instance_drains`] (when
//! its delay ends), so a restarted controller resumes what is left of it.

use std::time::{Duration, Instant};

use sluice_tenant::{Element, StateMode};

use super::Reconciler;
use crate::desired::{instance_name, InstanceKey};
use crate::error::ApiError;
use crate::model::InstanceDrainInfo;

impl Reconciler {
    /// The instance `index` of `tenant`'s middlebox `mb`, or a 404 naming
    /// what is missing.
    fn drained_key(&self, tenant: &str, mb: &str, index: u32) -> Result<InstanceKey, ApiError> {
        let t = self
            .desired
            .tenants
            .get(tenant)
            .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` is not applied")))?;
        if !matches!(t.spec.elements.get(mb), Some(Element::Middlebox { .. })) {
            return Err(ApiError::not_found(format!(
                "tenant `{tenant}` has no middlebox `{mb}`"
            )));
        }
        let key = (tenant.to_string(), mb.to_string(), index);
        if !self.desired.instances.contains_key(&key) {
            let have: Vec<String> = self
                .desired
                .instances
                .keys()
                .filter(|k| k.0 == tenant && k.1 == mb)
                .map(|k| k.2.to_string())
                .collect();
            return Err(ApiError::not_found(format!(
                "middlebox `{tenant}/{mb}` has no instance {index} (it has: {})",
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )));
        }
        Ok(key)
    }

    /// An operator drains instance `index` of `tenant`'s middlebox `mb`, for
    /// at most `delay` (see the module docs). Refused with 409 when it is
    /// the middlebox's last instance taking new flows, unless `force`, or
    /// when it is already draining because its middlebox was scaled in.
    /// Draining an instance under an operator's drain again moves the end
    /// of its delay (a stopped one stays stopped).
    pub fn drain_instance(
        &mut self,
        tenant: &str,
        mb: &str,
        index: u32,
        delay: Duration,
        force: bool,
        now: Instant,
    ) -> Result<InstanceDrainInfo, ApiError> {
        let key = self.drained_key(tenant, mb, index)?;
        let name = instance_name(tenant, mb, index);
        let operator = self.desired.instance_drains.contains_key(&key);
        if self.desired.stopped(&key) {
            return Ok(self.instance_drain_info(&key, false));
        }
        if self.desired.draining.contains(&key) && !operator {
            return Err(ApiError::conflict(format!(
                "{name} is already draining: its middlebox was scaled in, and it is removed once \
                 drained (scale `{tenant}/{mb}` out again to keep it)"
            )));
        }
        let others = self
            .desired
            .serving(tenant, mb)
            .into_iter()
            .filter(|k| *k != key)
            .count();
        if others == 0 && !operator && !force {
            return Err(ApiError::conflict(format!(
                "cannot drain {name}: it is the last instance of middlebox `{tenant}/{mb}` taking \
                 new flows (the others are draining or stopped), so its traffic would have \
                 nowhere to go; scale the middlebox out first, or drain with force"
            )));
        }
        let until_ms = self
            .unix_ms(now)
            .saturating_add(delay.as_millis().min(u128::from(u64::MAX)) as u64);
        let mut next = self.desired.clone();
        next.drain_instance(&key, until_ms);
        let pushed = self.commit(next, now)?;
        // The delay counts from now, also for a drain renewed.
        self.drains.insert(key.clone(), (now, delay));
        let local = self.desired.local_state(tenant, mb);
        let then = if local {
            "its pinned flows continue on it; it is stopped once none is left"
        } else {
            "its flows move to the other instances with their state in the store; it is \
             stopped once every host runs the configuration without it"
        };
        let hosts = if pushed.is_empty() {
            String::new()
        } else {
            format!(" (hosts {:?} pushed)", pushed.keys().collect::<Vec<_>>())
        };
        let e = super::events::instance_event(
            "drain",
            &key,
            format!(
                "{name} drained by an operator{}: no new flows; {then}, or in {} ms at the \
                 latest{hosts}",
                if others == 0 {
                    " (forced: it was the last one)"
                } else {
                    ""
                },
                delay.as_millis()
            ),
        );
        self.push_event(e, now);
        Ok(self.instance_drain_info(&key, true))
    }

    /// An operator ends the drain of instance `index` of `tenant`'s
    /// middlebox `mb`: it takes new flows again (a stopped one is started
    /// again first). Not drained is not an error (`changed: false`).
    pub fn undrain_instance(
        &mut self,
        tenant: &str,
        mb: &str,
        index: u32,
        now: Instant,
    ) -> Result<InstanceDrainInfo, ApiError> {
        let key = self.drained_key(tenant, mb, index)?;
        if !self.desired.instance_drains.contains_key(&key) {
            return Ok(self.instance_drain_info(&key, false));
        }
        let was = if self.desired.stopped(&key) {
            "stopped"
        } else {
            "draining"
        };
        let mut next = self.desired.clone();
        next.undrain_instance(&key);
        self.commit(next, now)?;
        self.drains.remove(&key);
        let name = instance_name(tenant, mb, index);
        let e = super::events::instance_event(
            "drain",
            &key,
            format!(
                "{name} undrained by an operator (was {was}): it takes new flows again{}",
                if was == "stopped" {
                    " once its process runs"
                } else {
                    ""
                }
            ),
        );
        self.push_event(e, now);
        Ok(self.instance_drain_info(&key, true))
    }

    /// What an operator's drain left of instance `key`.
    fn instance_drain_info(&self, key: &InstanceKey, changed: bool) -> InstanceDrainInfo {
        let d = &self.desired;
        // A scale-in drain shows too: such an instance is not serving.
        let state = if d.stopped(key) {
            "stopped"
        } else if d.draining.contains(key) {
            "draining"
        } else {
            "serving"
        };
        let state_mode = match d
            .tenants
            .get(&key.0)
            .and_then(|t| t.spec.elements.get(&key.1))
        {
            Some(Element::Middlebox {
                state: StateMode::Local,
                ..
            }) => "local",
            Some(Element::Middlebox {
                state: StateMode::Cached,
                ..
            }) => "cached",
            _ => "shared",
        };
        InstanceDrainInfo {
            name: instance_name(&key.0, &key.1, key.2),
            tenant: key.0.clone(),
            middlebox: key.1.clone(),
            host: d.instances.get(key).map_or(0, |i| i.host),
            state: state.to_string(),
            state_mode: state_mode.to_string(),
            drain_until_ms: d.instance_drains.get(key).copied(),
            changed,
        }
    }
}
