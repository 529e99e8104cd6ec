//! `/v1/tenants/{name}/middleboxes/{middlebox}/instances/{id}/drain`: an
//! operator (or the tenant) drains one NF instance, or ends its drain
//! (docs/RELIABILITY.md, "Draining an NF instance").

use std::time::{Duration, Instant};

use super::{body, json, Params, Reply};
use crate::error::ApiError;
use crate::model::InstanceDrainRequest;
use crate::reconcile::Reconciler;

/// An instance-drain request.
#[derive(Debug, Clone)]
pub enum InstanceAction {
    /// `PUT .../instances/{id}/drain`.
    Drain {
        /// Tenant.
        tenant: String,
        /// Middlebox.
        middlebox: String,
        /// The instance's index (`acme/fw/1` is instance 1 of `acme/fw`).
        index: u32,
        /// The longest it drains before it is stopped.
        delay: Duration,
        /// Drain even the last instance taking new flows.
        force: bool,
    },
    /// `DELETE .../instances/{id}/drain`.
    Undrain {
        /// Tenant.
        tenant: String,
        /// Middlebox.
        middlebox: String,
        /// The instance's index.
        index: u32,
    },
}

impl InstanceAction {
    /// The tenant the request concerns.
    pub fn tenant(&self) -> &str {
        match self {
            InstanceAction::Drain { tenant, .. } | InstanceAction::Undrain { tenant, .. } => tenant,
        }
    }

    /// `tenant/middlebox/index`, the instance's name.
    pub fn instance(&self) -> String {
        match self {
            InstanceAction::Drain {
                tenant,
                middlebox,
                index,
                ..
            }
            | InstanceAction::Undrain {
                tenant,
                middlebox,
                index,
            } => crate::desired::instance_name(tenant, middlebox, *index),
        }
    }
}

fn index(id: &str) -> Result<u32, ApiError> {
    id.parse().map_err(|_| {
        ApiError::bad(format!(
            "id: `{id}` is not an instance index (instance `acme/fw/1` is index 1)"
        ))
    })
}

/// Parses a request on the instance-drain path.
pub fn parse(method: &str, tpl: &str, p: &Params, text: &str) -> Result<InstanceAction, ApiError> {
    match method {
        "PUT" => {
            let req: InstanceDrainRequest = if text.trim().is_empty() {
                InstanceDrainRequest::default()
            } else {
                body(text)?
            };
            let delay = super::backends::drain_delay(req.delay_ms)?;
            Ok(InstanceAction::Drain {
                tenant: p.get(0),
                middlebox: p.get(1),
                index: index(&p.get(2))?,
                delay,
                force: req.force,
            })
        }
        "DELETE" => Ok(InstanceAction::Undrain {
            tenant: p.get(0),
            middlebox: p.get(1),
            index: index(&p.get(2))?,
        }),
        _ => Err(super::unknown(tpl)),
    }
}

/// Carries out an instance-drain request.
pub fn execute(r: &mut Reconciler, a: InstanceAction, now: Instant) -> Result<Reply, ApiError> {
    match a {
        InstanceAction::Drain {
            tenant,
            middlebox,
            index,
            delay,
            force,
        } => json(
            200,
            &r.drain_instance(&tenant, &middlebox, index, delay, force, now)?,
        ),
        InstanceAction::Undrain {
            tenant,
            middlebox,
            index,
        } => json(200, &r.undrain_instance(&tenant, &middlebox, index, now)?),
    }
}
