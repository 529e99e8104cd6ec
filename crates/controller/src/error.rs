//! [`ApiError`]: a refused request or a failed change, with the HTTP status class
//! it answers with and a message naming the field or object at fault; and its
//! answer as an RFC 9457 problem details object ([`ApiError::problem`]).

use serde_json::{Map, Value};

use crate::desired::PlaceError;
use crate::store::StoreError;

/// Where the problem types of this API live: a type is this and its slug.
pub const PROBLEM_BASE: &str = "https://sluice.dev/problems/";

/// The media type of an error answer (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Problem members an extension may not replace (RFC 9457 §3.1, and the
/// deprecated `error`).
const RESERVED: &[&str] = &["type", "title", "status", "detail", "instance", "error"];

/// An error answer: a status and what is wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (400 bad request, 404 unknown object, 409 conflict, ...).
    pub status: u16,
    /// What is wrong, naming the field or object.
    pub msg: String,
    /// Extension members of the problem details (a 409's `recent_changes`, a
    /// refused change's `plan`).
    pub ext: Map<String, Value>,
    /// A 405's methods the path does support (its `Allow` header).
    pub allow: Vec<&'static str>,
}

impl ApiError {
    /// An error of any status.
    pub fn new(status: u16, msg: impl Into<String>) -> ApiError {
        ApiError {
            status,
            msg: msg.into(),
            ..ApiError::default()
        }
    }

    /// This error with the extension member `key` (ignored for a reserved
    /// member's name, which the problem's own members own).
    pub fn with(mut self, key: &str, value: Value) -> ApiError {
        if !RESERVED.contains(&key) {
            self.ext.insert(key.to_string(), value);
        }
        self
    }

    /// 405: the path exists, not under this method; `allow` are its methods.
    pub fn method_not_allowed(msg: impl Into<String>, allow: Vec<&'static str>) -> ApiError {
        ApiError {
            allow,
            ..ApiError::new(405, msg)
        }
    }

    /// 413: the request's body is larger than the server takes.
    pub fn too_large(msg: impl Into<String>) -> ApiError {
        ApiError::new(413, msg)
    }

    /// The problem type's slug (`https://sluice.dev/problems/<slug>`), for the
    /// statuses this API answers with; `None` for others (`about:blank`).
    pub fn slug(&self) -> Option<&'static str> {
        Some(match self.status {
            400 => "bad-request",
            401 => "unauthenticated",
            403 => "forbidden",
            404 => "not-found",
            405 => "method-not-allowed",
            409 => "conflict",
            413 => "body-too-large",
            500 => "internal",
            _ => return None,
        })
    }

    /// The problem type's title: the same for every occurrence of the type.
    pub fn title(&self) -> &'static str {
        match self.status {
            400 => "The request is invalid",
            401 => "An API token is needed",
            403 => "The token may not do this",
            404 => "No such object or endpoint",
            405 => "Method not allowed on this path",
            409 => "Conflict with the current state",
            413 => "The request body is too large",
            500 => "The controller failed",
            _ => "Error",
        }
    }

    /// The RFC 9457 problem details of this error, about `instance` (the
    /// request's path) if given: `type`, `title`, `status`, `detail`,
    /// `instance`, the extension members, and `error` (= `detail`, deprecated:
    /// kept one release for clients that read it).
    pub fn problem(&self, instance: Option<&str>) -> Value {
        let mut m = Map::new();
        let ty = self.slug().map_or_else(
            || "about:blank".to_string(),
            |s| format!("{PROBLEM_BASE}{s}"),
        );
        m.insert("type".into(), Value::String(ty));
        m.insert("title".into(), self.title().into());
        m.insert("status".into(), self.status.into());
        m.insert("detail".into(), self.msg.clone().into());
        if let Some(i) = instance {
            m.insert("instance".into(), i.into());
        }
        for (k, v) in &self.ext {
            if !RESERVED.contains(&k.as_str()) {
                m.insert(k.clone(), v.clone());
            }
        }
        m.insert("error".into(), self.msg.clone().into());
        Value::Object(m)
    }

    /// 400: the request itself is wrong.
    pub fn bad(msg: impl Into<String>) -> ApiError {
        ApiError::new(400, msg)
    }

    /// 404: it names something that does not exist.
    pub fn not_found(msg: impl Into<String>) -> ApiError {
        ApiError::new(404, msg)
    }

    /// 409: it conflicts with the current state.
    pub fn conflict(msg: impl Into<String>) -> ApiError {
        ApiError::new(409, msg)
    }

    /// 500: the controller failed (its store, say).
    pub fn internal(msg: impl Into<String>) -> ApiError {
        ApiError::new(500, msg)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.msg, self.status)
    }
}

impl std::error::Error for ApiError {}

impl From<PlaceError> for ApiError {
    fn from(e: PlaceError) -> ApiError {
        match e {
            PlaceError::Compile {
                source: crate::CompileError::TooLarge(_),
                ..
            } => ApiError::bad(e.to_string()),
            PlaceError::BadCount(_) => ApiError::bad(e.to_string()),
            PlaceError::NoRoom(ref s) => {
                // The parts of the message as members, for clients to act on.
                let v = serde_json::to_value(s).unwrap_or(Value::Null);
                ApiError::conflict(e.to_string()).with("shortfall", v)
            }
            PlaceError::UnknownTenant(_) | PlaceError::UnknownMiddlebox { .. } => {
                ApiError::not_found(e.to_string())
            }
            e => ApiError::conflict(e.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_has_the_rfc_9457_members_its_extensions_and_the_old_error() {
        let e = ApiError::conflict("tenant `t` is at generation 3, not 2")
            .with("recent_changes", serde_json::json!(["+ chain web"]))
            .with("status", Value::from(200));
        let p = e.problem(Some("/v1/tenants/t"));
        assert_eq!(p["type"], "https://sluice.dev/problems/conflict");
        assert_eq!(p["title"], "Conflict with the current state");
        assert_eq!(p["status"], 409, "an extension replaced a problem member");
        assert_eq!(p["detail"], "tenant `t` is at generation 3, not 2");
        assert_eq!(p["error"], p["detail"]);
        assert_eq!(p["instance"], "/v1/tenants/t");
        assert_eq!(p["recent_changes"][0], "+ chain web");
        let other = ApiError::new(418, "teapot").problem(None);
        assert_eq!(other["type"], "about:blank");
        assert!(other.get("instance").is_none());
    }
}
