//! `/v1/tenants/{name}/blocks[/{id}]`: blocks on request ([`crate::blocks`]).
//! A tenant's token works on its own tenant's blocks only; the authorization
//! decision is made on the tenant in the path before anything is looked up,
//! so another tenant learns nothing of the VMs named.

use std::time::Instant;

use super::{body, json, Params, Reply};
use crate::blocks::BlockRequest;
use crate::error::ApiError;
use crate::reconcile::Reconciler;

/// A request on one tenant's blocks.
#[derive(Debug, Clone)]
pub struct BlockAction {
    /// The tenant in the path.
    pub tenant: String,
    /// What to do.
    pub what: BlockWhat,
}

/// What a [`BlockAction`] does.
#[derive(Debug, Clone)]
pub enum BlockWhat {
    /// `GET .../blocks`.
    List,
    /// `POST .../blocks`.
    Create(BlockRequest),
    /// `DELETE .../blocks/{id}`.
    Delete(u64),
}

/// Longest comment kept.
const MAX_COMMENT: usize = 1024;

/// Parses a request on the block paths.
pub fn parse(method: &str, tpl: &str, p: &Params, text: &str) -> Result<BlockAction, ApiError> {
    let what = match (method, tpl.rsplit('/').next().unwrap_or("")) {
        ("GET", "blocks") => BlockWhat::List,
        ("POST", "blocks") => {
            let r: BlockRequest = body(text)?;
            if r.vm.trim().is_empty() || r.from.trim().is_empty() {
                return Err(ApiError::bad("vm, from: both must be given"));
            }
            if r.comment.as_ref().is_some_and(|c| c.len() > MAX_COMMENT) {
                return Err(ApiError::bad(format!(
                    "comment: longer than {MAX_COMMENT} bytes"
                )));
            }
            BlockWhat::Create(r)
        }
        ("DELETE", "{id}") => {
            let id = p.get(1);
            BlockWhat::Delete(id.parse().map_err(|_| {
                ApiError::bad(format!("id: `{id}` is not a block id (a positive integer)"))
            })?)
        }
        _ => return Err(super::unknown(tpl)),
    };
    Ok(BlockAction {
        tenant: p.get(0),
        what,
    })
}

/// Carries out a block request for `actor`.
pub fn execute(
    r: &mut Reconciler,
    a: BlockAction,
    actor: &str,
    now: Instant,
) -> Result<Reply, ApiError> {
    let t = a.tenant.as_str();
    match a.what {
        BlockWhat::List => json(200, &r.blocks(t)?),
        BlockWhat::Create(req) => {
            let (made, info) = r.add_block(t, req, actor, now)?;
            json(if made { 201 } else { 200 }, &info)
        }
        BlockWhat::Delete(id) => json(200, &r.remove_block(t, id, actor, now)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_url(m: &str, url: &str, b: &str) -> Result<BlockAction, ApiError> {
        let (tpl, params) = super::super::route(m, url)?;
        parse(m, tpl, &Params(params), b)
    }

    #[test]
    fn requests_parse_into_their_actions() {
        let a = parse_url("GET", "/v1/tenants/acme/blocks", "").unwrap();
        assert!(a.tenant == "acme" && matches!(a.what, BlockWhat::List));
        let a = parse_url(
            "POST",
            "/v1/tenants/acme/blocks",
            r#"{"vm":"b1","from":"203.0.113.0/24","comment":"scanner"}"#,
        )
        .unwrap();
        match a.what {
            BlockWhat::Create(r) => {
                assert_eq!((r.vm.as_str(), r.from.as_str()), ("b1", "203.0.113.0/24"));
                assert_eq!(r.comment.as_deref(), Some("scanner"));
            }
            w => panic!("{w:?}"),
        }
        let a = parse_url("DELETE", "/v1/tenants/acme/blocks/7", "").unwrap();
        assert!(matches!(a.what, BlockWhat::Delete(7)));
    }

    #[test]
    fn bad_requests_are_refused_with_the_field() {
        for (m, u, b, want) in [
            ("POST", "/v1/tenants/acme/blocks", "{}", "body:"),
            ("POST", "/v1/tenants/acme/blocks", r#"{"vm":"b1"}"#, "body:"),
            (
                "POST",
                "/v1/tenants/acme/blocks",
                r#"{"vm":"","from":"a1"}"#,
                "vm, from",
            ),
            (
                "POST",
                "/v1/tenants/acme/blocks",
                r#"{"vm":"b1","from":"a1","to":"x"}"#,
                "unknown field",
            ),
            ("DELETE", "/v1/tenants/acme/blocks/x", "", "id:"),
            ("DELETE", "/v1/tenants/acme/blocks/-1", "", "id:"),
        ] {
            let e = parse_url(m, u, b).unwrap_err();
            assert_eq!(e.status, 400, "{m} {u} {b}");
            assert!(e.msg.contains(want), "{m} {u} {b}: {}", e.msg);
        }
        let long = format!(
            r#"{{"vm":"b1","from":"a1","comment":"{}"}}"#,
            "x".repeat(MAX_COMMENT + 1)
        );
        assert!(parse_url("POST", "/v1/tenants/acme/blocks", &long)
            .unwrap_err()
            .msg
            .contains("comment"));
        assert_eq!(
            parse_url("PUT", "/v1/tenants/acme/blocks", "")
                .unwrap_err()
                .status,
            405
        );
    }
}
