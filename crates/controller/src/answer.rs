//! The answer to a request, shaped before any socket sees it: status, headers
//! and body of a reply or of an error (RFC 9457 problem details, with `Allow`
//! on a 405 and `WWW-Authenticate` on a 401). The HTTP edge only copies it out.

use crate::error::{ApiError, PROBLEM_JSON};
use crate::resources::Reply;

/// An answer ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Headers, in order.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: String,
}

impl Answer {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The answer to a request on `path` that got `reply`; `link` is a list's
/// `Link` header (its next page), if any.
pub fn answer(reply: Result<Reply, ApiError>, path: &str, link: Option<String>) -> Answer {
    match reply {
        Ok(Reply::Json(status, v)) => {
            let mut headers = vec![("Content-Type", "application/json".to_string())];
            if let Some(l) = link {
                headers.push(("Link", l));
            }
            Answer {
                status,
                headers,
                body: v.to_string(),
            }
        }
        Ok(Reply::Text(ctype, body)) => Answer {
            status: 200,
            headers: vec![("Content-Type", ctype.to_string())],
            body,
        },
        Err(e) => {
            let mut headers = vec![("Content-Type", PROBLEM_JSON.to_string())];
            if e.status == 401 {
                headers.push(("WWW-Authenticate", "Bearer realm=\"sluice\"".to_string()));
            }
            if e.status == 405 {
                headers.push(("Allow", e.allow.join(", ")));
            }
            Answer {
                status: e.status,
                headers,
                body: e.problem(Some(path)).to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{parse, Request};
    use serde_json::Value;

    fn problem(a: &Answer) -> Value {
        assert_eq!(a.header("content-type"), Some(PROBLEM_JSON), "{a:?}");
        let v: Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["status"], a.status);
        assert_eq!(v["error"], v["detail"]);
        assert!(v["type"]
            .as_str()
            .unwrap()
            .starts_with(crate::error::PROBLEM_BASE));
        v
    }

    fn request(method: &str, url: &str) -> Answer {
        let path = url.split('?').next().unwrap();
        let req = Request {
            method,
            url,
            content_type: None,
            body: "",
            if_match: None,
        };
        answer(
            parse(&req).map(|_| Reply::Text("text/plain", String::new())),
            path,
            None,
        )
    }

    #[test]
    fn a_405_is_a_problem_with_the_allowed_methods() {
        let a = request("POST", "/v1/tenants/acme");
        assert_eq!(a.status, 405);
        assert_eq!(a.header("Allow"), Some("GET, PUT, DELETE"));
        let v = problem(&a);
        assert_eq!(v["type"], "https://sluice.dev/problems/method-not-allowed");
        assert_eq!(v["instance"], "/v1/tenants/acme");
    }

    #[test]
    fn every_error_status_is_a_problem() {
        let a = request("GET", "/v1/nothing");
        assert_eq!(
            (a.status, problem(&a)["title"].as_str()),
            (404, Some("No such object or endpoint"))
        );
        let a = request("GET", "/v1/hosts?limit=0");
        assert_eq!(a.status, 400);
        assert!(problem(&a)["detail"]
            .as_str()
            .unwrap()
            .starts_with("limit:"));
        let a = answer(
            Err(crate::resources::auth::unauthenticated("no token")),
            "/v1/hosts",
            None,
        );
        assert_eq!(a.status, 401);
        assert!(a.header("WWW-Authenticate").is_some());
        problem(&a);
        for status in [403, 409, 413] {
            let a = answer(Err(ApiError::new(status, "no")), "/v1/x", None);
            assert_eq!(a.status, status);
            problem(&a);
        }
    }

    #[test]
    fn a_list_keeps_its_array_and_gets_its_link() {
        let a = answer(
            Ok(Reply::Json(200, serde_json::json!([1]))),
            "/v1/hosts",
            Some("</v1/hosts?limit=1&after=5b315d>; rel=\"next\"".into()),
        );
        assert_eq!(a.header("content-type"), Some("application/json"));
        assert_eq!(a.body, "[1]");
        assert!(a.header("link").unwrap().contains("rel=\"next\""));
    }
}
