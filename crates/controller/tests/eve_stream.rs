//! `GET /v1/alerts?follow=true`: the controller streams the agents' EVE
//! events as Server-Sent Events, scoped to a tenant's token like the
//! listing, and keeps sending new ones as the agents report them.

mod common;

use std::io::BufRead;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_controller::client::{Client, ClientError};
use sluice_proto::HostRegistration;

/// An agent that answers `GET /v1/eve` with the events in its list of the
/// asked type and tenant, later than `since` (as the real agent filters).
struct FakeAgent {
    url: String,
    events: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
}

fn query_param(url: &str, key: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| decode(v))
    })
}

/// `%XX` escapes decoded (what the controller's encoding of a timestamp
/// or tenant uses).
fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

impl FakeAgent {
    fn start() -> FakeAgent {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let events: Arc<Mutex<Vec<Value>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (ev, st) = (events.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let url = req.url().to_string();
                let body = if url.starts_with("/v1/eve?") {
                    let kind = query_param(&url, "event_type");
                    let tenant = query_param(&url, "tenant");
                    let since = query_param(&url, "since").unwrap_or_default();
                    let list: Vec<Value> = ev
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|e| {
                            kind.as_deref() == e["event_type"].as_str()
                                && tenant
                                    .as_deref()
                                    .is_none_or(|t| Some(t) == e["tenant"].as_str())
                                && e["timestamp"].as_str().unwrap() > since.as_str()
                        })
                        .cloned()
                        .collect();
                    serde_json::to_string(&list).unwrap()
                } else {
                    "{}".to_string()
                };
                let _ = req.respond(tiny_http::Response::from_string(body));
            }
        });
        FakeAgent { url, events, stop }
    }

    fn add(&self, e: Value) {
        self.events.lock().unwrap().push(e);
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn alert(tenant: &str, second: u32, sid: u64) -> Value {
    json!({
        "timestamp": format!("2026-11-28T10:00:{second:02}.000000+0000"),
        "event_type": "alert",
        "tenant": tenant,
        "flow_id": sid * 100,
        "alert": {"signature_id": sid, "signature": "probe"},
    })
}

/// Follows `kind` with `c` on a thread: the events on the channel.
fn follow(c: Client, tenant: Option<&str>) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    let tenant = tenant.map(String::from);
    std::thread::spawn(move || {
        let _ = c.eve_follow("alerts", tenant.as_deref(), None, 0, |e| tx.send(e).is_ok());
    });
    rx
}

fn sid(e: &Value) -> u64 {
    e["alert"]["signature_id"].as_u64().unwrap()
}

#[test]
fn alerts_stream_to_a_tenant_its_own_old_and_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (h, admin) = common::start(dir.path());
    let url = h.url();
    let agent = FakeAgent::start();
    let c = Client::new(&url).with_token(Some(&admin));
    c.register_host(&HostRegistration {
        host: 1,
        name: "h1".into(),
        underlay: Ipv4Addr::new(10, 255, 0, 1),
        api: agent.url.clone(),
        config_version: 0,
        api_token: None,
        capacity: None,
        api_csr: None,
    })
    .unwrap();
    agent.add(alert("acme", 1, 1));
    agent.add(alert("beta", 2, 2));
    let acme = c.create_token("acme-user", "tenant:acme").unwrap().token;

    // A tenant asking for another tenant's alerts gets its own, as with
    // the listing.
    let mine = follow(Client::new(&url).with_token(Some(&acme)), Some("beta"));
    let all = follow(Client::new(&url).with_token(Some(&admin)), None);
    let wait = Duration::from_secs(10);
    assert_eq!(sid(&mine.recv_timeout(wait).unwrap()), 1);
    let first: Vec<u64> = (0..2)
        .map(|_| sid(&all.recv_timeout(wait).unwrap()))
        .collect();
    assert_eq!(first, [1, 2]);

    // New events as the agent reports them, once each.
    agent.add(alert("beta", 3, 3));
    agent.add(alert("acme", 4, 4));
    let e = mine.recv_timeout(wait).unwrap();
    assert_eq!((sid(&e), e["tenant"].as_str()), (4, Some("acme")));
    let next: Vec<u64> = (0..2)
        .map(|_| sid(&all.recv_timeout(wait).unwrap()))
        .collect();
    assert_eq!(next, [3, 4]);
    // Polled every second: anything sent twice would be here by now.
    assert!(mine.recv_timeout(Duration::from_millis(2500)).is_err());
    assert!(all.try_recv().is_err());

    // What it is on the wire: a server-sent event per record, its
    // timestamp its id (what `since` resumes after).
    let r = ureq::get(&format!("{url}/v1/alerts?follow=true&limit=1"))
        .set("Authorization", &format!("Bearer {admin}"))
        .call()
        .unwrap();
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"));
    let lines: Vec<String> = std::io::BufReader::new(r.into_reader())
        .lines()
        .map(Result::unwrap)
        .take_while(|l| !l.starts_with("data:"))
        .collect();
    assert_eq!(
        lines,
        [
            "retry: 1000",
            "",
            "event: alert",
            "id: 2026-11-28T10:00:04.000000+0000"
        ]
    );
    let (code, body) = common::call(&url, Some(&admin), "GET", "/v1/alerts?follow=maybe", "");
    assert!(code == 400 && body.contains("follow"), "{code} {body}");
    let e = Client::new(&url).eve_follow("alerts", None, None, 0, |_| true);
    assert!(
        matches!(e, Err(ClientError::Api { status: 401, .. })),
        "{e:?}"
    );
    h.shutdown();
}
