//! `/v1/backends` (every load-balancer backend's health) and
//! `/v1/tenants/{name}/middleboxes/{middlebox}/backends/{addr}/drain` (an
//! operator drains a backend, or ends its drain).

use std::time::{Duration, Instant};

use super::{body, json, Params, Reply};
use crate::error::ApiError;
use crate::model::DrainRequest;
use crate::reconcile::Reconciler;

/// The deregistration delay of a drain that names none.
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::from_secs(30);

/// The longest deregistration delay accepted (a day: a typo of units must not
/// leave a backend draining for years).
pub const MAX_DRAIN_DELAY: Duration = Duration::from_secs(86_400);

/// A backend request.
#[derive(Debug, Clone)]
pub enum BackendAction {
    /// `GET /v1/backends`.
    List,
    /// `PUT .../backends/{addr}/drain`.
    Drain {
        /// Tenant.
        tenant: String,
        /// The `lb` middlebox.
        middlebox: String,
        /// The backend: its address as configured, or an IP for every
        /// backend at it.
        addr: String,
        /// The deregistration delay.
        delay: Duration,
    },
    /// `DELETE .../backends/{addr}/drain`.
    Undrain {
        /// Tenant.
        tenant: String,
        /// The `lb` middlebox.
        middlebox: String,
        /// The backend.
        addr: String,
    },
}

impl BackendAction {
    /// The tenant a drain or undrain concerns.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            BackendAction::List => None,
            BackendAction::Drain { tenant, .. } | BackendAction::Undrain { tenant, .. } => {
                Some(tenant)
            }
        }
    }
}

/// A drain's deregistration delay from its body's `delay_ms`: the default
/// when absent, refused beyond a day (backend and instance drains alike).
pub(crate) fn drain_delay(delay_ms: Option<u64>) -> Result<Duration, ApiError> {
    let delay = delay_ms.map_or(DEFAULT_DRAIN_DELAY, Duration::from_millis);
    if delay > MAX_DRAIN_DELAY {
        return Err(ApiError::bad(format!(
            "delay_ms: {} is longer than a day ({} ms)",
            delay.as_millis(),
            MAX_DRAIN_DELAY.as_millis()
        )));
    }
    Ok(delay)
}

/// Parses a request on the backend paths.
pub fn parse(method: &str, tpl: &str, p: &Params, text: &str) -> Result<BackendAction, ApiError> {
    match (method, tpl) {
        ("GET", "/v1/backends") => Ok(BackendAction::List),
        ("PUT", _) => {
            let req: DrainRequest = if text.trim().is_empty() {
                DrainRequest::default()
            } else {
                body(text)?
            };
            let delay = drain_delay(req.delay_ms)?;
            Ok(BackendAction::Drain {
                tenant: p.get(0),
                middlebox: p.get(1),
                addr: p.get(2),
                delay,
            })
        }
        ("DELETE", _) => Ok(BackendAction::Undrain {
            tenant: p.get(0),
            middlebox: p.get(1),
            addr: p.get(2),
        }),
        _ => Err(super::unknown(tpl)),
    }
}

/// Carries out a backend request.
pub fn execute(r: &mut Reconciler, a: BackendAction, now: Instant) -> Result<Reply, ApiError> {
    match a {
        BackendAction::List => {
            r.refresh_backends(now);
            json(200, &r.backend_infos(None, now))
        }
        BackendAction::Drain {
            tenant,
            middlebox,
            addr,
            delay,
        } => json(
            200,
            &r.drain_backend(&tenant, &middlebox, &addr, delay, now)?,
        ),
        BackendAction::Undrain {
            tenant,
            middlebox,
            addr,
        } => json(200, &r.undrain_backend(&tenant, &middlebox, &addr, now)?),
    }
}
