//! An operator's drain of a host for maintenance (`sluice drain host`): the
//! host takes no new instance and its instances whose flow state is in the
//! store are placed elsewhere, so it can be taken down without losing a
//! connection.

use std::time::Instant;

use super::{event, Reconciler};
use crate::error::ApiError;
use crate::model::HostDrainInfo;

impl Reconciler {
    /// Drains `host` ([`crate::desired::Desired::drain_host`]). Refused (409,
    /// nothing changed) when some instance has no room on another host,
    /// unless `force` (which also moves `state: local` instances, losing
    /// their connections).
    pub fn drain_host(
        &mut self,
        host: u32,
        force: bool,
        now: Instant,
    ) -> Result<HostDrainInfo, ApiError> {
        if !self.desired.hosts.contains_key(&host) {
            return Err(ApiError::not_found(format!(
                "host {host} is not registered"
            )));
        }
        let mut next = self.desired.clone();
        let d = next.drain_host(host, force);
        if !d.failed.is_empty() && !force {
            let why: Vec<String> = d.failed.iter().map(|(t, e)| format!("{t}: {e}")).collect();
            return Err(ApiError::conflict(format!(
                "cannot drain host {host}: its instances have no room elsewhere ({}); add \
                 capacity, or drain with force to leave them unplaced",
                why.join("; ")
            )));
        }
        self.commit(next, now)?;
        let name = |k: &crate::desired::InstanceKey| format!("{}/{}/{}", k.0, k.1, k.2);
        let info = HostDrainInfo {
            host,
            moved: d.moved.iter().map(|(k, h)| (name(k), *h)).collect(),
            kept: d.kept.iter().map(name).collect(),
            unplaced: d.failed.iter().map(|(t, e)| format!("{t}: {e}")).collect(),
        };
        let mut reason = format!(
            "host {host} drained by an operator: it takes no new instance; {} instance(s) \
             placed on other hosts",
            info.moved.len()
        );
        if !info.kept.is_empty() {
            reason.push_str(&format!(
                "; kept (state: local, moving them would lose their connections): {}",
                info.kept.join(", ")
            ));
        }
        if !info.unplaced.is_empty() {
            reason.push_str(&format!("; not placed: {}", info.unplaced.join("; ")));
        }
        let mut e = event("drained", reason);
        e.host = Some(host);
        self.push_event(e, now);
        Ok(info)
    }

    /// Ends an operator's drain of `host`. Returns whether it was drained.
    pub fn undrain_host(&mut self, host: u32, now: Instant) -> Result<bool, ApiError> {
        if !self.desired.hosts.contains_key(&host) {
            return Err(ApiError::not_found(format!(
                "host {host} is not registered"
            )));
        }
        if !self.desired.cordoned.contains(&host) {
            return Ok(false);
        }
        let mut next = self.desired.clone();
        next.undrain_host(host);
        self.commit(next, now)?;
        let mut e = event(
            "drained",
            format!("host {host} undrained by an operator: it may take instances again"),
        );
        e.host = Some(host);
        self.push_event(e, now);
        Ok(true)
    }
}
