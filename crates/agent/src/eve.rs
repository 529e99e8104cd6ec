//! The EVE logs of this host's NF instances, per tenant: where instances write
//! them ([`eve_path`]) and how `GET /v1/eve` reads them back ([`read`]).
//!
//! Layout: `{run_dir}/eve/{tenant}/{instance}.eve.json`, rotated by the
//! instance into `.eve.json.1`, `.2`, ... A tenant's directory holds only its
//! own instances' files, so a query for a tenant reads nothing of another.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::instances::sanitise;

/// The directory under an agent's run directory holding the EVE logs.
pub const EVE_DIR: &str = "eve";

/// Where instance `instance` of `tenant` writes its EVE log.
pub fn eve_path(run_dir: &Path, tenant: &str, instance: &str) -> PathBuf {
    run_dir
        .join(EVE_DIR)
        .join(tenant_dir(tenant))
        .join(format!("{}.eve.json", sanitise(instance)))
}

/// A tenant's directory name: its name made safe for a path, never `.` or `..`.
fn tenant_dir(tenant: &str) -> String {
    let s = sanitise(tenant);
    if s.chars().all(|c| c == '.') {
        format!("_{s}")
    } else {
        s
    }
}

/// Which events `GET /v1/eve` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EveQuery {
    /// Only this tenant's (all tenants' if `None`).
    pub tenant: Option<String>,
    /// Only events of this `event_type` (`alert`, `flow`, ...).
    pub event_type: Option<String>,
    /// Only events whose `timestamp` is later than this (EVE's RFC 3339 form,
    /// compared as text, which orders them by time).
    pub since: Option<String>,
    /// At most this many, the newest (1000 if 0).
    pub limit: usize,
}

impl EveQuery {
    /// Parses `tenant=T&event_type=alert&since=TS&limit=N`; unknown keys are
    /// refused by name.
    pub fn parse(query: &str) -> Result<EveQuery, String> {
        let mut q = EveQuery::default();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = decode(v);
            match k {
                "tenant" => q.tenant = Some(v),
                "event_type" => q.event_type = Some(v),
                "since" => q.since = Some(v),
                "limit" => {
                    q.limit = v
                        .parse()
                        .map_err(|_| format!("limit: `{v}` is not a number"))?
                }
                _ => {
                    return Err(format!(
                        "`{k}`: unknown query parameter (known: tenant, event_type, since, limit)"
                    ))
                }
            }
        }
        Ok(q)
    }

    fn limit(&self) -> usize {
        if self.limit == 0 {
            1000
        } else {
            self.limit.min(100_000)
        }
    }

    fn wants(&self, v: &Value) -> bool {
        let field = |k: &str| v.get(k).and_then(Value::as_str);
        self.event_type
            .as_deref()
            .is_none_or(|t| field("event_type") == Some(t))
            && self
                .since
                .as_deref()
                .is_none_or(|s| field("timestamp").is_some_and(|ts| ts > s))
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The events under `eve_dir` the query selects, oldest first (the newest
/// `limit`), each with a `tenant` field added. Lines that are not JSON (a
/// line being written) are skipped; a missing directory is no events.
pub fn read(eve_dir: &Path, q: &EveQuery) -> std::io::Result<Vec<Value>> {
    let tenants: Vec<(String, PathBuf)> = match &q.tenant {
        Some(t) => vec![(t.clone(), eve_dir.join(tenant_dir(t)))],
        None => match std::fs::read_dir(eve_dir) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        },
    };
    let mut out = Vec::new();
    for (tenant, dir) in tenants {
        let files = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect::<Vec<_>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for f in files {
            let is_eve = f
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".eve.json"));
            if !is_eve {
                continue;
            }
            let text = match std::fs::read_to_string(&f) {
                Ok(t) => t,
                // Rotated away between the listing and the read.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for line in text.lines() {
                let Ok(mut v) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                if !q.wants(&v) {
                    continue;
                }
                if let Value::Object(m) = &mut v {
                    m.insert("tenant".into(), tenant.clone().into());
                }
                out.push(v);
            }
        }
    }
    out.sort_by(|a, b| {
        let ts = |v: &Value| v.get("timestamp").and_then(Value::as_str).map(String::from);
        ts(a).cmp(&ts(b))
    });
    let skip = out.len().saturating_sub(q.limit());
    Ok(out.split_off(skip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, tenant: &str, inst: &str, suffix: &str, lines: &[&str]) {
        let p = eve_path(dir, tenant, inst);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let mut name = p.into_os_string();
        name.push(suffix);
        std::fs::write(name, lines.join("\n") + "\n").unwrap();
    }

    fn ev(ts: &str, kind: &str, id: u64) -> String {
        format!(r#"{{"timestamp":"{ts}","event_type":"{kind}","flow_id":{id}}}"#)
    }

    #[test]
    fn a_tenants_events_come_from_its_files_only_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let (a1, a2) = (
            ev("2026-01-01T00:00:02", "alert", 1),
            ev("2026-01-01T00:00:01", "flow", 2),
        );
        let a3 = ev("2026-01-01T00:00:00", "alert", 3);
        write(run, "acme", "acme/ips/0", "", &[&a1, &a2, "{not json"]);
        write(run, "acme", "acme/ips/1", ".1", &[&a3]);
        write(
            run,
            "beta",
            "beta/ips/0",
            "",
            &[&ev("2026-01-01T00:00:05", "alert", 9)],
        );
        let eve = run.join(EVE_DIR);
        let q = |s: &str| EveQuery::parse(s).unwrap();
        let ids = |v: Vec<Value>| {
            v.iter()
                .map(|e| e["flow_id"].as_u64().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(read(&eve, &q("tenant=acme")).unwrap()), [3, 2, 1]);
        assert_eq!(
            ids(read(&eve, &q("tenant=acme&event_type=alert")).unwrap()),
            [3, 1]
        );
        assert_eq!(
            ids(read(&eve, &q("tenant=acme&since=2026-01-01T00%3A00%3A00")).unwrap()),
            [2, 1]
        );
        assert_eq!(ids(read(&eve, &q("tenant=acme&limit=1")).unwrap()), [1]);
        let all = read(&eve, &q("")).unwrap();
        assert_eq!(ids(all.clone()), [3, 2, 1, 9]);
        assert_eq!(all[3]["tenant"], "beta");
        // A tenant with nothing written, or a path-like tenant name, reads nothing.
        assert!(read(&eve, &q("tenant=nobody")).unwrap().is_empty());
        assert!(read(&eve, &q("tenant=..%2Fbeta")).unwrap().is_empty());
        assert!(read(&eve, &q("tenant=..")).unwrap().is_empty());
        assert!(EveQuery::parse("colour=red")
            .unwrap_err()
            .contains("colour"));
    }
}
