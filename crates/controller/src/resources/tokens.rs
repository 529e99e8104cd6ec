//! `/v1/tokens`: API tokens (operator only). Creating one answers its secret,
//! once; listings name tokens and roles, never secrets or hashes.

use super::auth::Role;
use super::{body, json, Params, Reply};
use crate::error::ApiError;
use crate::model::{TokenCreated, TokenInfo, TokenRequest};
use crate::store::tokens::{TokenError, TokenStore};

/// A token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenAction {
    /// `GET /v1/tokens`.
    List,
    /// `POST /v1/tokens`.
    Create {
        /// Name.
        name: String,
        /// Role.
        role: Role,
    },
    /// `DELETE /v1/tokens/{name}`.
    Delete(String),
}

/// Whether `name` may name a token: short, and safe in a URL and a file name.
fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad(format!(
            "name: `{name}` is not a token name (1 to 64 letters, digits, `.`, `_`, `-`)"
        )))
    }
}

/// Parses a request on the tokens' paths.
pub fn parse(method: &str, tpl: &str, p: &Params, text: &str) -> Result<TokenAction, ApiError> {
    match (method, tpl) {
        ("GET", "/v1/tokens") => Ok(TokenAction::List),
        ("POST", "/v1/tokens") => {
            let req: TokenRequest = body(text)?;
            check_name(&req.name)?;
            let role = req
                .role
                .parse()
                .map_err(|e: super::auth::BadRole| ApiError::bad(e.to_string()))?;
            Ok(TokenAction::Create {
                name: req.name,
                role,
            })
        }
        ("DELETE", "/v1/tokens/{name}") => Ok(TokenAction::Delete(p.get(0))),
        _ => Err(super::unknown(tpl)),
    }
}

impl From<TokenError> for ApiError {
    fn from(e: TokenError) -> ApiError {
        match e {
            TokenError::Exists(_) | TokenError::LastOperator(_) => {
                ApiError::conflict(e.to_string())
            }
            TokenError::Unknown(_) => ApiError::not_found(e.to_string()),
            TokenError::Random(_) | TokenError::Store(_) => ApiError::internal(e.to_string()),
        }
    }
}

fn info(t: &crate::store::tokens::TokenRecord) -> TokenInfo {
    TokenInfo {
        name: t.name.clone(),
        role: t.role.to_string(),
        created_ms: t.created_ms,
    }
}

/// Carries out a token request at `now_ms` (Unix milliseconds).
pub fn execute(s: &mut TokenStore, a: TokenAction, now_ms: u64) -> Result<Reply, ApiError> {
    match a {
        TokenAction::List => json(200, &s.list().iter().map(info).collect::<Vec<_>>()),
        TokenAction::Create { name, role } => {
            let token = s.create(&name, role.clone(), now_ms)?;
            json(
                201,
                &TokenCreated {
                    name,
                    role: role.to_string(),
                    created_ms: now_ms,
                    token,
                },
            )
        }
        TokenAction::Delete(name) => {
            let t = s.delete(&name)?;
            json(200, &info(&t))
        }
    }
}
