//! The one executor: carries out a parsed [`Action`] on the [`Reconciler`] at
//! `now` and shapes the reply. Pure: what the action requires of the outside
//! world (pushes, polls) is left in the reconciler's effects.

use std::time::Instant;

use crate::error::ApiError;
use crate::reconcile::Reconciler;
use crate::resources::{self, json, Action, Reply, OPENAPI_YAML};

/// Carries out `action`.
pub fn execute(r: &mut Reconciler, action: Action, now: Instant) -> Result<Reply, ApiError> {
    match action {
        Action::Health => json(200, &serde_json::json!({ "status": "ok" })),
        Action::OpenApi => Ok(Reply::Text("application/yaml", OPENAPI_YAML.into())),
        Action::Tenant(a) => resources::tenants::execute(r, a, now),
        Action::Host(a) => resources::hosts::execute(r, a, now),
        Action::Scaling(a) => resources::scaling::execute(r, a, now),
        Action::Events(q) => resources::events::execute(r, &q),
        // Tokens live outside the reconciler's state; the edge serves them.
        Action::Token(_) => Err(ApiError::internal(
            "token requests are served by the HTTP edge, not the reconciler",
        )),
    }
}
