//! The I/O edge of the store's health ([`crate::store_health`]): asks every
//! node of the state URL, over the admin connection [`crate::store_acl`] uses
//! (the URL's user, or none), `PING`, `ROLE`, in a cluster `CLUSTER MYID` and
//! `CLUSTER SLOTS`, and on a primary the marker key; and writes markers.
//! It times each round of probes (its one clock read: a measurement for
//! `/metrics`, never an input of a decision).
//!
//! In a cluster a key lives on the one primary serving its slot, so each
//! primary's marker is [`MARKER_KEY`] with a hash tag chosen to fall in the
//! first slot that primary serves ([`marker_key`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_state::StoreError;
use sluice_state_redis::acl::{Admin, Value};
use sluice_state_redis::slot_of;

use crate::store_health::{Answer, Marker, MarkerWrite, Probe, Role, SlotRange, Takeover};

/// The marker key (with a hash tag in a cluster, see [`marker_key`]).
pub const MARKER_KEY: &str = "sluice:store:epoch";

/// How often every store node is probed: often enough that a dead cluster
/// primary is replaced ([`crate::store_health::TAKEOVER_AFTER`] probes) well
/// within the cluster's own node timeout; a round is a handful of commands
/// per node.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The marker key of the primary serving `slot` in a cluster:
/// `sluice:store:epoch{N}` with the smallest `N` whose tag hashes to `slot`.
pub fn marker_key(slot: u16) -> String {
    // CRC16 spreads the decimal numbers over every slot well within 10^6.
    (0u32..1_000_000)
        .map(|n| format!("{MARKER_KEY}{{{n}}}"))
        .find(|k| slot_of(k.as_bytes()) == slot)
        .unwrap_or_else(|| MARKER_KEY.to_string())
}

/// The role `ROLE` answered.
pub fn parse_role(v: &Value) -> Option<Role> {
    match v {
        Value::Array(Some(items)) => items.first()?.text().map(|r| Role::from_reply(&r)),
        _ => None,
    }
}

/// A replica's primary (`host:port`) from its `ROLE` answer (`slave`, the
/// primary's host and port, ...); None for any other role.
pub fn parse_primary_of(v: &Value) -> Option<String> {
    let Value::Array(Some(items)) = v else {
        return None;
    };
    if Role::from_reply(&items.first()?.text()?) != Role::Replica {
        return None;
    }
    let host = items.get(1)?.text()?;
    let port = match items.get(2)? {
        Value::Int(p) => *p,
        other => other.text()?.parse().ok()?,
    };
    Some(format!("{host}:{port}"))
}

/// The slot ranges of a `CLUSTER SLOTS` answer; `addr` (the node asked)
/// stands in for a primary reported with an empty host.
pub fn parse_slots(v: &Value, addr: &str) -> Vec<SlotRange> {
    let Value::Array(Some(ranges)) = v else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in ranges {
        let Value::Array(Some(f)) = r else { continue };
        let (Some(Value::Int(a)), Some(Value::Int(b)), Some(Value::Array(Some(p)))) =
            (f.first(), f.get(1), f.get(2))
        else {
            continue;
        };
        let (Some(host), Some(Value::Int(port))) = (p.first().and_then(Value::text), p.get(1))
        else {
            continue;
        };
        let host = if host.is_empty() {
            addr.rsplit_once(':').map_or(host, |(h, _)| h.to_string())
        } else {
            host
        };
        let (Ok(first), Ok(last)) = (u16::try_from(*a), u16::try_from(*b)) else {
            continue;
        };
        // After the primary: its replicas, each `[host, port, id, ...]`.
        let replicas = f
            .iter()
            .skip(3)
            .filter_map(|r| {
                let Value::Array(Some(r)) = r else {
                    return None;
                };
                let (Some(h), Some(Value::Int(port))) = (r.first().and_then(Value::text), r.get(1))
                else {
                    return None;
                };
                (!h.is_empty()).then(|| (format!("{h}:{port}"), r.get(2).and_then(Value::text)))
            })
            .collect();
        out.push(SlotRange {
            first,
            last,
            primary: format!("{host}:{port}"),
            primary_id: p.get(2).and_then(Value::text),
            replicas,
        });
    }
    out
}

/// Whether a probe failed because the node refused the connection: its
/// port is closed, so its process is gone (the OS's `ECONNREFUSED`, which
/// Rust's `std::io::Error` spells "connection refused", capitalised or not),
/// unlike a timeout or an error reply from a node that runs.
fn refused(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(m) if m.to_ascii_lowercase().contains("connection refused"))
}

/// The admin connection to every store node, and each primary's marker key.
pub struct StoreProbe {
    admin: Admin,
    cluster: bool,
    /// The marker key of each node, from its last probe.
    keys: BTreeMap<String, String>,
}

impl StoreProbe {
    /// For a `redis://` or `redis-cluster://` state URL (or `rediss`): the connection (not
    /// made yet). Any other (`local`): `None`.
    pub fn from_state_url(state_url: &str) -> Result<Option<StoreProbe>, StoreError> {
        if !sluice_state_redis::is_store_url(state_url) {
            return Ok(None);
        }
        let cluster = sluice_state_redis::is_cluster_url(state_url);
        Ok(Some(StoreProbe {
            admin: Admin::open(state_url)?,
            cluster,
            keys: BTreeMap::new(),
        }))
    }

    /// The nodes' addresses, in the URL's order.
    pub fn nodes(&self) -> Vec<String> {
        self.admin.addrs()
    }

    /// Whether the URL names a cluster.
    pub fn cluster(&self) -> bool {
        self.cluster
    }

    /// Probes every node, one after the other; returns the probes and how
    /// long they took in all.
    pub fn probe(&mut self) -> (Vec<Probe>, Duration) {
        let started = Instant::now();
        let out = self
            .nodes()
            .into_iter()
            .enumerate()
            .map(|(i, node)| {
                let result = self.probe_node(i, &node);
                let refused = matches!(&result, Err(e) if refused(e));
                Probe {
                    node,
                    result: result.map_err(|e| e.to_string()),
                    refused,
                }
            })
            .collect();
        (out, started.elapsed())
    }

    fn ask(&mut self, i: usize, args: &[&[u8]], what: &str) -> Result<Value, StoreError> {
        match self.admin.command(i, args)? {
            Value::Error(e) => Err(StoreError::Refused(format!("{what}: {e}"))),
            v => Ok(v),
        }
    }

    fn probe_node(&mut self, i: usize, node: &str) -> Result<Answer, StoreError> {
        let pong = self.ask(i, &[b"PING"], "PING")?;
        if pong.text().as_deref() != Some("PONG") {
            return Err(StoreError::Protocol(format!(
                "PING: unexpected answer {pong:?}"
            )));
        }
        let role_reply = self.ask(i, &[b"ROLE"], "ROLE")?;
        let primary_of = parse_primary_of(&role_reply);
        let role = parse_role(&role_reply).ok_or_else(|| {
            StoreError::Protocol(format!("ROLE: unexpected answer {role_reply:?}"))
        })?;
        let (mut id, mut slots, mut key) = (None, Vec::new(), Some(MARKER_KEY.to_string()));
        if self.cluster {
            id = self.ask(i, &[b"CLUSTER", b"MYID"], "CLUSTER MYID")?.text();
            slots = parse_slots(
                &self.ask(i, &[b"CLUSTER", b"SLOTS"], "CLUSTER SLOTS")?,
                node,
            );
            key = slots
                .iter()
                .find(|r| r.primary_id.is_some() && r.primary_id == id)
                .map(|r| marker_key(r.first));
        }
        let marker = match (&key, role) {
            (Some(k), Role::Primary) => match self.ask(i, &[b"GET", k.as_bytes()], "GET")? {
                Value::Bulk(None) => Marker::Missing,
                v => Marker::Found(v.text().unwrap_or_default()),
            },
            _ => Marker::NotRead,
        };
        match key {
            Some(k) => self.keys.insert(node.to_string(), k),
            None => self.keys.remove(node),
        };
        Ok(Answer {
            role,
            id,
            slots,
            marker,
            primary_of,
        })
    }

    /// Asks the replica `t.replica` to take over its primary's slots now,
    /// without its (dead) primary's agreement: `CLUSTER FAILOVER FORCE`,
    /// which still needs the votes of most primaries, or, when
    /// `t.unilateral`, `CLUSTER FAILOVER TAKEOVER`, which does not (see
    /// [`Takeover::unilateral`]).
    pub fn take_over(&mut self, t: &Takeover) -> Result<(), StoreError> {
        let Some(i) = self.nodes().iter().position(|n| *n == t.replica) else {
            return Err(StoreError::Refused(format!(
                "{}: not a node of the state URL",
                t.replica
            )));
        };
        let (how, what): (&[u8], _) = if t.unilateral {
            (b"TAKEOVER", "CLUSTER FAILOVER TAKEOVER")
        } else {
            (b"FORCE", "CLUSTER FAILOVER FORCE")
        };
        self.ask(i, &[b"CLUSTER", b"FAILOVER", how], what)
            .map(|_| ())
    }

    /// Writes a marker on its node (the key found at its last probe).
    pub fn write(&mut self, w: &MarkerWrite) -> Result<(), StoreError> {
        let (Some(i), Some(key)) = (
            self.nodes().iter().position(|n| *n == w.node),
            self.keys.get(&w.node).cloned(),
        ) else {
            return Err(StoreError::Refused(format!(
                "{}: no marker key known for this node",
                w.node
            )));
        };
        self.ask(i, &[b"SET", key.as_bytes(), w.value.as_bytes()], "SET")
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_gets_a_marker_key_that_hashes_to_it() {
        for slot in [0u16, 1, 5460, 5461, 10922, 16383] {
            let k = marker_key(slot);
            assert!(k.starts_with(MARKER_KEY), "{k}");
            assert_eq!(slot_of(k.as_bytes()), slot, "{k}");
        }
    }

    fn bulk(s: &str) -> Value {
        Value::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn only_a_closed_port_counts_as_refused() {
        let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(refused(&StoreError::Unavailable(format!("h:1: {e}"))));
        let raw = std::io::Error::from_raw_os_error(libc_econnrefused());
        assert!(refused(&StoreError::Unavailable(format!("h:1: {raw}"))));
        assert!(!refused(&StoreError::Unavailable(
            "h:1: no answer within 500 ms".into()
        )));
        assert!(!refused(&StoreError::Timeout(500)));
        assert!(!refused(&StoreError::Refused("Connection refused".into())));
    }

    /// `ECONNREFUSED` on Linux.
    fn libc_econnrefused() -> i32 {
        111
    }

    #[test]
    fn role_and_slot_answers_are_read() {
        let role = Value::Array(Some(vec![bulk("master"), Value::Int(0)]));
        assert_eq!(parse_role(&role), Some(Role::Primary));
        let role = Value::Array(Some(vec![bulk("slave"), bulk("10.0.0.1")]));
        assert_eq!(parse_role(&role), Some(Role::Replica));
        assert_eq!(parse_primary_of(&role), None, "no port");
        let role = Value::Array(Some(vec![
            bulk("slave"),
            bulk("10.0.0.1"),
            Value::Int(7000),
            bulk("connected"),
            Value::Int(42),
        ]));
        assert_eq!(parse_primary_of(&role).as_deref(), Some("10.0.0.1:7000"));
        let primary = Value::Array(Some(vec![bulk("master"), Value::Int(0)]));
        assert_eq!(parse_primary_of(&primary), None);
        assert_eq!(parse_role(&Value::Int(1)), None);
        let slots = Value::Array(Some(vec![
            Value::Array(Some(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(Some(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id-a")])),
                Value::Array(Some(vec![bulk("10.0.0.2"), Value::Int(7001), bulk("id-b")])),
                // A replica without a host (not announced yet) is skipped.
                Value::Array(Some(vec![bulk(""), Value::Int(7005)])),
            ])),
            // An empty host: the node asked.
            Value::Array(Some(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(Some(vec![bulk(""), Value::Int(7002)])),
            ])),
            Value::Int(3),
        ]));
        assert_eq!(
            parse_slots(&slots, "h:7002"),
            [
                SlotRange {
                    first: 0,
                    last: 5460,
                    primary: "10.0.0.1:7000".into(),
                    primary_id: Some("id-a".into()),
                    replicas: vec![("10.0.0.2:7001".into(), Some("id-b".into()))],
                },
                SlotRange {
                    first: 5461,
                    last: 16383,
                    primary: "h:7002".into(),
                    primary_id: None,
                    replicas: Vec::new(),
                },
            ]
        );
    }
}
