//! [`ApiError`]: a refused request or a failed change, with the HTTP status class
//! it answers with and a message naming the field or object at fault.

use crate::desired::PlaceError;
use crate::store::StoreError;

/// An error answer: a status and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (400 bad request, 404 unknown object, 409 conflict, ...).
    pub status: u16,
    /// What is wrong, naming the field or object.
    pub msg: String,
}

impl ApiError {
    /// 400: the request itself is wrong.
    pub fn bad(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            msg: msg.into(),
        }
    }

    /// 404: it names something that does not exist.
    pub fn not_found(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            msg: msg.into(),
        }
    }

    /// 409: it conflicts with the current state.
    pub fn conflict(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 409,
            msg: msg.into(),
        }
    }

    /// 500: the controller failed (its store, say).
    pub fn internal(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 500,
            msg: msg.into(),
        }
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
