//! Rotating the fabric's keys (docs/SECURITY.md, "The fabric"): an operator
//! starts a rotation, and the reconciler finishes it on its own once every
//! live host runs a configuration holding the new key. Finishing earlier would
//! have hosts seal datagrams under a key some receiver does not hold yet.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::events::event;
use super::Reconciler;
use crate::error::ApiError;

/// The fabric's keys as `GET /v1/fabric` shows them (never a secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FabricStatus {
    /// Datagrams between hosts are sealed (`fabric_auth`).
    pub sealed: bool,
    /// The key id hosts seal with (absent when not sealed).
    pub sending: Option<u8>,
    /// Key ids hosts accept, oldest first: two during a rotation.
    pub keys: Vec<u8>,
    /// A rotation is under way.
    pub rotating: bool,
    /// Hosts the rotation waits for: alive, not yet running a configuration
    /// with the new key.
    pub waiting_for: Vec<u32>,
}

impl Reconciler {
    /// Starts rotating the fabric's keys to `fresh`: every host accepts the old
    /// and the new key, and still seals with the old, until every live host
    /// runs that configuration; then [`Reconciler::tick`] finishes the
    /// rotation. A 409 if sealing is off or a rotation is under way (a second
    /// one would seal with a key not every host holds yet).
    pub fn rotate_fabric_key(
        &mut self,
        fresh: [u8; 32],
        now: Instant,
    ) -> Result<FabricStatus, ApiError> {
        let mut next = self.desired.clone();
        let Some(f) = &mut next.fabric else {
            return Err(ApiError::new(
                409,
                "the fabric is not sealed (fabric_auth = false): there are no keys to rotate",
            ));
        };
        if f.secrets.len() > 1 {
            return Err(ApiError::new(
                409,
                format!(
                    "a rotation of the fabric's keys is under way (waiting for host(s) {:?} to \
                     take key {}); start another once it has finished",
                    self.fabric_waiting_for(),
                    f.secrets.last().map_or(0, |s| s.0)
                ),
            ));
        }
        f.rotate(fresh);
        let id = f.secrets.last().map_or(0, |s| s.0);
        self.commit(next, now)?;
        self.fabric_rotation = Some(self.config_versions());
        self.push_event(
            event(
                "fabric",
                format!("fabric key rotation started: hosts accept key {id}, still seal with the old one"),
            ),
            now,
        );
        Ok(self.fabric_status())
    }

    /// Makes every host seal with the newest fabric key and forget the old.
    pub fn finish_fabric_rotation(&mut self, now: Instant) -> Result<(), ApiError> {
        let mut next = self.desired.clone();
        if let Some(f) = &mut next.fabric {
            f.finish_rotation();
        }
        self.commit(next, now)?;
        self.fabric_rotation = None;
        Ok(())
    }

    /// The fabric's keys and the rotation's progress.
    pub fn fabric_status(&self) -> FabricStatus {
        match &self.desired.fabric {
            None => FabricStatus {
                sealed: false,
                sending: None,
                keys: Vec::new(),
                rotating: false,
                waiting_for: Vec::new(),
            },
            Some(f) => FabricStatus {
                sealed: true,
                sending: Some(f.sending),
                keys: f.secrets.iter().map(|s| s.0).collect(),
                rotating: f.secrets.len() > 1,
                waiting_for: if f.secrets.len() > 1 {
                    self.fabric_waiting_for()
                } else {
                    Vec::new()
                },
            },
        }
    }

    fn config_versions(&self) -> BTreeMap<u32, u64> {
        self.configs.iter().map(|(h, c)| (*h, c.version)).collect()
    }

    /// Registered, uncontained hosts that have not reported running the
    /// rotation's configuration (all of them while it is being pushed).
    fn fabric_waiting_for(&self) -> Vec<u32> {
        let need = self.fabric_rotation.clone().unwrap_or_default();
        self.desired
            .hosts
            .keys()
            .filter(|h| !self.desired.contained.contains(h))
            .filter(|h| {
                let want = need.get(h).copied().unwrap_or(u64::MAX);
                self.live
                    .get(h)
                    .and_then(|l| l.reported)
                    .is_none_or(|r| r < want)
            })
            .copied()
            .collect()
    }

    /// Finishes a rotation under way once every host still heard from runs a
    /// configuration holding the new key. A silent host (`silent`) is not
    /// waited for: it gets the finished keys with its next configuration when
    /// it returns, and until then it seals with the old key, which its peers
    /// no longer accept — the same as being down.
    pub(super) fn check_fabric_rotation(&mut self, silent: &BTreeMap<u32, Duration>, now: Instant) {
        let rotating = self
            .desired
            .fabric
            .as_ref()
            .is_some_and(|f| f.secrets.len() > 1);
        if !rotating {
            self.fabric_rotation = None;
            return;
        }
        if self.fabric_rotation.is_none() {
            // Restarted mid-rotation: every stored configuration already holds
            // both keys.
            self.fabric_rotation = Some(self.config_versions());
        }
        let waiting: Vec<u32> = self
            .fabric_waiting_for()
            .into_iter()
            .filter(|h| !silent.contains_key(h))
            .collect();
        if !waiting.is_empty() {
            return;
        }
        match self.finish_fabric_rotation(now) {
            Ok(()) => {
                let id = self.desired.fabric.as_ref().map_or(0, |f| f.sending);
                tracing::info!(key = id, "fabric key rotation finished");
                self.push_event(
                    event(
                        "fabric",
                        format!("fabric key rotation finished: hosts seal with key {id} and forget the old one"),
                    ),
                    now,
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "finishing the fabric key rotation failed; retrying");
            }
        }
    }
}
