//! A small client of etcd's v3 API, for the controller's replicated desired
//! state and its leader election: ranges, transactions and leases, through
//! etcd's gRPC gateway (JSON over HTTP/1.1, keys and values in base64,
//! 64-bit integers as strings), over mutual TLS.
//!
//! The client knows every member of the cluster and sends each request to the
//! member that answered last; a member that cannot be reached, or answers
//! that it has no leader, is passed over for the next. A request is never
//! sent twice to one member, but a transaction whose answer was lost may have
//! been applied: callers guard their transactions with comparisons (the
//! controller's with its leadership), so applying one twice changes nothing.
//!
//! [`server`] starts private etcd clusters (tests and the testbed).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};

pub mod server;

/// A request could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No member answered.
    #[error("no etcd member answered ({endpoints}): {last}")]
    Unreachable {
        /// The members tried.
        endpoints: String,
        /// The last member's error.
        last: String,
    },
    /// A member refused the request.
    #[error("etcd at {endpoint} refused {what}: {message}")]
    Refused {
        /// The member.
        endpoint: String,
        /// The call.
        what: &'static str,
        /// etcd's message.
        message: String,
    },
    /// An answer that does not parse.
    #[error("etcd at {endpoint}: unexpected answer to {what}: {message}")]
    Answer {
        /// The member.
        endpoint: String,
        /// The call.
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The TLS files could not be used.
    #[error("etcd client TLS: {0}")]
    Tls(String),
    /// The client's settings are wrong.
    #[error("etcd client: {0}")]
    Config(String),
}

/// The files of a client's mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA the members' certificates are checked against.
    pub ca: PathBuf,
    /// The client's certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

/// One key and its value, as a range returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The revision that created the key (it changes when the key is deleted
    /// and made again).
    pub create_revision: i64,
    /// The revision of its last change.
    pub mod_revision: i64,
    /// The lease it is attached to (0: none).
    pub lease: i64,
}

/// A condition of a transaction (each compares for equality).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key was created at this revision (0: the key does not exist).
    CreateRevision(Vec<u8>, i64),
    /// The key was last changed at this revision.
    ModRevision(Vec<u8>, i64),
    /// The key holds this value.
    Value(Vec<u8>, Vec<u8>),
}

/// An operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets a key (attached to a lease unless 0).
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its value.
        value: Vec<u8>,
        /// The lease (0: none).
        lease: i64,
    },
    /// Deletes a key.
    Delete(Vec<u8>),
    /// Deletes every key with this prefix.
    DeletePrefix(Vec<u8>),
    /// Reads a key.
    Get(Vec<u8>),
}

/// A transaction: if every comparison holds, `success` is applied, else
/// `failure`, atomically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// The conditions.
    pub compare: Vec<Compare>,
    /// What is done when they hold.
    pub success: Vec<Op>,
    /// What is done when one does not.
    pub failure: Vec<Op>,
}

/// What a transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResult {
    /// Whether the conditions held (`success` was applied).
    pub succeeded: bool,
    /// The keys each `Get` of the applied branch found, in order.
    pub gets: Vec<Vec<Kv>>,
    /// The store's revision after it.
    pub revision: i64,
}

/// A client of one etcd cluster.
pub struct Client {
    endpoints: Vec<String>,
    agent: ureq::Agent,
    /// The member that answered last.
    current: AtomicUsize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.endpoints)
            .finish()
    }
}

/// The first key after every key starting with `prefix` (etcd's
/// `range_end` of a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff (or empty): the range runs to the end of the keys.
    vec![0]
}

fn b64(b: &[u8]) -> String {
    B64.encode(b)
}

fn tls_config(tls: &ClientTls) -> Result<Arc<rustls::ClientConfig>, EtcdError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let err = |p: &Path, e: &dyn std::fmt::Display| EtcdError::Tls(format!("{}: {e}", p.display()));
    let certs = |p: &Path| -> Result<Vec<CertificateDer<'static>>, EtcdError> {
        let v = CertificateDer::pem_file_iter(p)
            .map_err(|e| err(p, &e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(p, &e))?;
        if v.is_empty() {
            return Err(err(p, &"no PEM certificate in it"));
        }
        Ok(v)
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&tls.ca)? {
        roots.add(c).map_err(|e| err(&tls.ca, &e))?;
    }
    let chain = certs(&tls.cert)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| err(&tls.key, &e))?;
    let config = rustls::ClientConfig::builder_with_provider(sluice_tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| EtcdError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| err(&tls.cert, &e))?;
    Ok(Arc::new(config))
}

impl Client {
    /// A client of the cluster whose members answer at `endpoints`
    /// (`https://HOST:PORT` with `tls`, `http://` without), each request
    /// given at most `timeout`.
    pub fn new(
        endpoints: &[String],
        tls: Option<&ClientTls>,
        timeout: Duration,
    ) -> Result<Client, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::Config("no endpoint given".into()));
        }
        for e in endpoints {
            let want = if tls.is_some() { "https://" } else { "http://" };
            if !e.starts_with(want) {
                return Err(EtcdError::Config(format!(
                    "endpoint `{e}` does not start with {want}{}",
                    if tls.is_some() {
                        " (TLS files were given)"
                    } else {
                        " (no TLS files were given)"
                    }
                )));
            }
        }
        let mut agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout.min(Duration::from_millis(500)))
            .timeout(timeout);
        if let Some(t) = tls {
            agent = agent.tls_config(tls_config(t)?);
        }
        Ok(Client {
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_string())
                .collect(),
            agent: agent.build(),
            current: AtomicUsize::new(0),
        })
    }

    /// The members' addresses.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// POSTs `body` to `path` on the current member, moving on to the next
    /// ones while a member cannot be reached or has no leader.
    fn call(&self, what: &'static str, path: &str, body: &Value) -> Result<Value, EtcdError> {
        let n = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last = String::new();
        for i in 0..n {
            let idx = (first + i) % n;
            let endpoint = &self.endpoints[idx];
            match self
                .agent
                .post(&format!("{endpoint}{path}"))
                .send_json(body.clone())
            {
                Ok(resp) => {
                    self.current.store(idx, Ordering::Relaxed);
                    return resp.into_json::<Value>().map_err(|e| EtcdError::Answer {
                        endpoint: endpoint.clone(),
                        what,
                        message: e.to_string(),
                    });
                }
                Err(ureq::Error::Status(code, resp)) => {
                    let text = resp.into_string().unwrap_or_default();
                    let message = serde_json::from_str::<Value>(&text)
                        .ok()
                        .and_then(|v| {
                            v.get("message")
                                .or_else(|| v.get("error"))
                                .and_then(Value::as_str)
                                .map(String::from)
                        })
                        .unwrap_or(text);
                    // A member cut off from the others, or still electing,
                    // answers 503: another may serve.
                    if code == 503 || message.contains("no leader") {
                        last = format!("{endpoint}: {message}");
                        continue;
                    }
                    return Err(EtcdError::Refused {
                        endpoint: endpoint.clone(),
                        what,
                        message: format!("{code}: {message}"),
                    });
                }
                Err(e) => last = format!("{endpoint}: {e}"),
            }
        }
        Err(EtcdError::Unreachable {
            endpoints: self.endpoints.join(", "),
            last,
        })
    }

    /// Every key in `[key, range_end)` (`range_end` None: `key` alone), in
    /// key order.
    pub fn range(&self, key: &[u8], range_end: Option<&[u8]>) -> Result<Vec<Kv>, EtcdError> {
        let mut body = json!({ "key": b64(key) });
        if let Some(end) = range_end {
            body["range_end"] = b64(end).into();
        }
        let v = self.call("range", "/v3/kv/range", &body)?;
        kvs(&v, self.current_endpoint(), "range")
    }

    /// Every key starting with `prefix`, in key order.
    pub fn get_prefix(&self, prefix: &[u8]) -> Result<Vec<Kv>, EtcdError> {
        self.range(prefix, Some(&prefix_end(prefix)))
    }

    /// The key's value, if it exists.
    pub fn get(&self, key: &[u8]) -> Result<Option<Kv>, EtcdError> {
        Ok(self.range(key, None)?.into_iter().next())
    }

    /// Runs a transaction.
    pub fn txn(&self, t: &Txn) -> Result<TxnResult, EtcdError> {
        let compare: Vec<Value> = t
            .compare
            .iter()
            .map(|c| match c {
                Compare::CreateRevision(k, r) => json!({
                    "key": b64(k), "result": "EQUAL", "target": "CREATE",
                    "create_revision": r.to_string()
                }),
                Compare::ModRevision(k, r) => json!({
                    "key": b64(k), "result": "EQUAL", "target": "MOD",
                    "mod_revision": r.to_string()
                }),
                Compare::Value(k, v) => json!({
                    "key": b64(k), "result": "EQUAL", "target": "VALUE", "value": b64(v)
                }),
            })
            .collect();
        let ops = |ops: &[Op]| -> Vec<Value> {
            ops.iter()
                .map(|o| match o {
                    Op::Put { key, value, lease } => {
                        let mut p = json!({ "key": b64(key), "value": b64(value) });
                        if *lease != 0 {
                            p["lease"] = lease.to_string().into();
                        }
                        json!({ "request_put": p })
                    }
                    Op::Delete(k) => json!({ "request_delete_range": { "key": b64(k) } }),
                    Op::DeletePrefix(p) => json!({
                        "request_delete_range": { "key": b64(p), "range_end": b64(&prefix_end(p)) }
                    }),
                    Op::Get(k) => json!({ "request_range": { "key": b64(k) } }),
                })
                .collect()
        };
        let body = json!({
            "compare": compare,
            "success": ops(&t.success),
            "failure": ops(&t.failure),
        });
        let v = self.call("txn", "/v3/kv/txn", &body)?;
        let endpoint = self.current_endpoint();
        let mut gets = Vec::new();
        for r in v
            .get("responses")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            if let Some(range) = r.get("response_range") {
                gets.push(kvs(range, endpoint, "txn")?);
            }
        }
        Ok(TxnResult {
            // Protocol buffers' JSON leaves out a false.
            succeeded: v.get("succeeded").and_then(Value::as_bool).unwrap_or(false),
            gets,
            revision: int(v.get("header").and_then(|h| h.get("revision"))),
        })
    }

    /// Puts `value` at `key`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), EtcdError> {
        self.call(
            "put",
            "/v3/kv/put",
            &json!({ "key": b64(key), "value": b64(value) }),
        )
        .map(drop)
    }

    /// Grants a lease of `ttl_s` seconds; returns its id.
    pub fn lease_grant(&self, ttl_s: i64) -> Result<i64, EtcdError> {
        let v = self.call("lease grant", "/v3/lease/grant", &json!({ "TTL": ttl_s }))?;
        let id = int(v.get("ID"));
        if id == 0 {
            return Err(EtcdError::Answer {
                endpoint: self.current_endpoint().to_string(),
                what: "lease grant",
                message: format!("no lease id in {v}"),
            });
        }
        Ok(id)
    }

    /// Renews lease `id`; returns its new time to live in seconds, or None
    /// when the lease no longer exists (expired or revoked).
    pub fn lease_keepalive(&self, id: i64) -> Result<Option<i64>, EtcdError> {
        let v = self.call(
            "lease keepalive",
            "/v3/lease/keepalive",
            &json!({ "ID": id.to_string() }),
        )?;
        let ttl = int(v.get("result").and_then(|r| r.get("TTL")));
        Ok((ttl > 0).then_some(ttl))
    }

    /// Revokes lease `id`: every key attached to it is deleted.
    pub fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.call(
            "lease revoke",
            "/v3/lease/revoke",
            &json!({ "ID": id.to_string() }),
        )
        .map(drop)
    }

    fn current_endpoint(&self) -> &str {
        &self.endpoints[self.current.load(Ordering::Relaxed) % self.endpoints.len()]
    }
}

/// A 64-bit integer protocol buffers' JSON wrote as a string (or left out:
/// 0).
fn int(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The `kvs` of a range answer.
fn kvs(v: &Value, endpoint: &str, what: &'static str) -> Result<Vec<Kv>, EtcdError> {
    let bad = |message: String| EtcdError::Answer {
        endpoint: endpoint.to_string(),
        what,
        message,
    };
    let decode = |field: Option<&Value>| -> Result<Vec<u8>, EtcdError> {
        match field {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => B64.decode(s).map_err(|e| bad(format!("base64: {e}"))),
            Some(other) => Err(bad(format!("not a string: {other}"))),
        }
    };
    let Some(list) = v.get("kvs") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| bad("`kvs` is not a list".into()))?;
    list.iter()
        .map(|kv| {
            Ok(Kv {
                key: decode(kv.get("key"))?,
                value: decode(kv.get("value"))?,
                create_revision: int(kv.get("create_revision")),
                mod_revision: int(kv.get("mod_revision")),
                lease: int(kv.get("lease")),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_are_the_next_key_after_the_prefix() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn endpoints_must_match_whether_tls_is_given() {
        let e = Client::new(
            &["https://127.0.0.1:1".into()],
            None,
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not start with http://"), "{e}");
        let e = Client::new(&[], None, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no endpoint"), "{e}");
    }

    #[test]
    fn answers_decode_and_missing_fields_are_zero() {
        let v = json!({"kvs": [{"key": b64(b"k"), "value": b64(b"v"), "create_revision": "7",
                                 "mod_revision": "9"}]});
        let got = kvs(&v, "e", "range").unwrap();
        assert_eq!(
            got,
            vec![Kv {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                create_revision: 7,
                mod_revision: 9,
                lease: 0
            }]
        );
        assert!(kvs(&json!({}), "e", "range").unwrap().is_empty());
        let e = kvs(&json!({"kvs": [{"key": "%%%"}]}), "e", "range").unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
    }
}
