//! The API's answers as an operator's tools read them, on a real server:
//! every error is an RFC 9457 problem (`application/problem+json`) with the
//! right status, a 405 says what the path allows, a too-large body is a 413,
//! and lists come in pages linked by `Link: rel="next"`, which the client
//! follows to the end.

use serde_json::Value;
use sluice_controller::client::{Client, ClientError};
mod common;
use common::start;

/// An answer: status, the headers asked for and the body.
struct Answer {
    status: u16,
    ctype: String,
    allow: Option<String>,
    link: Option<String>,
    body: String,
}

fn call(base: &str, token: Option<&str>, method: &str, path: &str, body: &str) -> Answer {
    let mut req = ureq::request(method, &format!("{base}{path}"));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let r = if body.is_empty() {
        req.call()
    } else {
        req.set("Content-Type", "application/json")
            .send_string(body)
    };
    let resp = match r {
        Ok(resp) => resp,
        Err(ureq::Error::Status(_, resp)) => resp,
        Err(e) => panic!("{method} {path}: {e}"),
    };
    Answer {
        status: resp.status(),
        ctype: resp.header("Content-Type").unwrap_or_default().to_string(),
        allow: resp.header("Allow").map(String::from),
        link: resp.header("Link").map(String::from),
        body: resp.into_string().unwrap(),
    }
}

fn host(id: u32) -> String {
    format!(
        "{{\"host\":{id},\"name\":\"h{id}\",\"underlay\":\"10.255.0.{id}\",\
         \"api\":\"http://127.0.0.1:9\"}}"
    )
}

/// The problem of an error answer, checked for the members every problem has.
fn problem(a: &Answer, status: u16) -> Value {
    assert_eq!(a.status, status, "{}", a.body);
    assert_eq!(a.ctype, "application/problem+json", "{status}: {}", a.body);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["status"], status);
    assert!(
        v["type"]
            .as_str()
            .unwrap()
            .starts_with("https://sluice.dev/problems/"),
        "{v}"
    );
    assert!(v["title"].is_string(), "{v}");
    assert!(!v["detail"].as_str().unwrap().is_empty(), "{v}");
    assert_eq!(v["error"], v["detail"], "the deprecated member differs");
    v
}

#[test]
fn every_error_status_answers_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(dir.path());
    let base = server.url();
    let admin = Some(admin.as_str());
    let reader = Client::new(&base)
        .with_token(admin)
        .create_token("auditor", "read-only")
        .unwrap()
        .token;

    let v = problem(&call(&base, admin, "GET", "/v1/hosts?limit=0", ""), 400);
    assert!(v["detail"].as_str().unwrap().starts_with("limit:"), "{v}");
    assert_eq!(v["instance"], "/v1/hosts");
    problem(&call(&base, None, "GET", "/v1/hosts", ""), 401);
    let body = "{\"name\":\"x\",\"role\":\"operator\"}";
    problem(&call(&base, Some(&reader), "POST", "/v1/tokens", body), 403);
    problem(&call(&base, admin, "GET", "/v1/nothing", ""), 404);
    problem(&call(&base, admin, "GET", "/v1/tenants/absent", ""), 404);
    let a = call(&base, admin, "POST", "/v1/tenants/acme", "tenant: acme");
    let v = problem(&a, 405);
    assert_eq!(v["type"], "https://sluice.dev/problems/method-not-allowed");
    assert_eq!(a.allow.as_deref(), Some("GET, PUT, DELETE"));
    let body = "{\"name\":\"auditor\",\"role\":\"read-only\"}";
    problem(&call(&base, admin, "POST", "/v1/tokens", body), 409);
    let big = format!("tenant: acme\n#{}\n", "x".repeat(1 << 20));
    let v = problem(&call(&base, admin, "PUT", "/v1/tenants/acme", &big), 413);
    assert_eq!(v["type"], "https://sluice.dev/problems/body-too-large");

    // The client reports the problem's detail.
    let e = Client::new(&base)
        .with_token(admin)
        .tenant("absent")
        .unwrap_err();
    assert_eq!(
        e,
        ClientError::Api {
            status: 404,
            message: "tenant `absent` is not applied".into()
        }
    );
}

#[test]
fn lists_come_in_linked_pages_and_the_client_reads_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(dir.path());
    let base = server.url();
    let admin = Some(admin.as_str());
    // Registered out of order.
    for id in [7, 3, 6, 1, 5, 2, 4] {
        assert_eq!(
            call(&base, admin, "POST", "/v1/hosts", &host(id)).status,
            200
        );
    }
    let mut path = "/v1/hosts?limit=3".to_string();
    let mut pages: Vec<Vec<u64>> = Vec::new();
    loop {
        let a = call(&base, admin, "GET", &path, "");
        assert_eq!((a.status, a.ctype.as_str()), (200, "application/json"));
        let items: Vec<Value> = serde_json::from_str(&a.body).unwrap();
        pages.push(items.iter().map(|h| h["id"].as_u64().unwrap()).collect());
        let Some(link) = a.link else { break };
        assert!(link.ends_with("; rel=\"next\""), "{link}");
        path = link
            .trim_start_matches('<')
            .split('>')
            .next()
            .unwrap()
            .to_string();
        assert!(pages.len() < 5, "the pages do not end: {pages:?}");
    }
    assert_eq!(pages, [vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
    // Without a limit the default page holds them all: no link.
    assert!(call(&base, admin, "GET", "/v1/hosts", "").link.is_none());
    let c = Client::new(&base).with_token(admin);
    let ids: Vec<u32> = c.hosts().unwrap().iter().map(|h| h.id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
    // The raw read follows the links too: one array.
    let raw: Vec<Value> = serde_json::from_str(&c.get_raw("/v1/hosts?limit=2").unwrap()).unwrap();
    assert_eq!(raw.len(), 7);
}
