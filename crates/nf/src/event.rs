//! Events functions produce, written as EVE JSON (Suricata's log format) lines.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use sluice_wire::flow::proto_name;
use sluice_wire::FlowKey;

/// What an IPS did about a matching packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertAction {
    /// The packet was let through (an `alert` rule).
    Allowed,
    /// The packet was dropped (a `drop` rule).
    Blocked,
}

/// A signature match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// Time of the packet that completed the match.
    pub ts_ns: u64,
    /// The packet's flow key as it travelled.
    pub flow: FlowKey,
    /// Direction-invariant flow id.
    pub flow_id: u64,
    /// Allowed or blocked.
    pub action: AlertAction,
    /// Generator id (1 for text rules).
    pub gid: u32,
    /// Signature id.
    pub sid: u32,
    /// Signature revision.
    pub rev: u32,
    /// The rule's `msg`.
    pub msg: Arc<str>,
    /// The rule's `classtype`, if any.
    pub category: Option<Arc<str>>,
    /// Severity (priority), 3 if unknown.
    pub severity: u8,
    /// True if the matched bytes travelled client to server.
    pub to_server: bool,
    /// The flow's application protocol, if detected (`http`, `tls`, `dns`).
    pub app_proto: Option<&'static str>,
    /// The application-layer record Suricata writes next to an alert (its
    /// `http`, `tls` or `dns` object): the key and the object. Boxed: only
    /// alerts raised by a protocol's rules carry one.
    pub app_meta: Option<Box<(&'static str, Value)>>,
    /// The rule's `metadata` text (`key value, key value`), written as
    /// EVE's `alert.metadata` (each key with the list of its values).
    pub rule_metadata: Option<Arc<str>>,
    /// The rule's `target`: `Some(true)` when the packet's destination is
    /// the target (`dest_ip`), `Some(false)` its source (EVE's
    /// `alert.source` and `alert.target`).
    pub target: Option<bool>,
}

/// A flow's lifetime counters, exported when it ends or at flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRecord {
    /// The flow as its first packet travelled (client to server).
    pub flow: FlowKey,
    /// Direction-invariant flow id.
    pub flow_id: u64,
    /// Packets client to server.
    pub pkts_toserver: u64,
    /// Packets server to client.
    pub pkts_toclient: u64,
    /// Bytes (whole frames) client to server.
    pub bytes_toserver: u64,
    /// Bytes server to client.
    pub bytes_toclient: u64,
    /// First packet time.
    pub start_ns: u64,
    /// Last packet time.
    pub end_ns: u64,
    /// Why the record was written: `"timeout"`, `"tcp_close"` or `"shutdown"`.
    pub reason: &'static str,
    /// Flow state at export: `"new"`, `"established"` or `"closed"`.
    pub state: &'static str,
}

/// Anything a function reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A signature matched.
    Alert(Alert),
    /// A flow ended (or was flushed).
    Flow(FlowRecord),
}

/// RFC 3339 timestamp with microseconds and a `+0000` offset, as Suricata writes.
pub fn eve_timestamp(ts_ns: u64) -> String {
    let secs = (ts_ns / 1_000_000_000) as i64;
    let micros = (ts_ns % 1_000_000_000) / 1000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}+0000",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A rule's `metadata` text as EVE writes it: each entry `key value`
/// (split at the first space; entries split at commas), each key with the
/// list of its values in rule order.
fn metadata(text: &str) -> Value {
    let mut m = Map::new();
    for entry in text.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let (k, v) = entry.split_once(' ').unwrap_or((entry, ""));
        let list = m
            .entry(k.to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(l) = list {
            l.push(v.trim().into());
        }
    }
    Value::Object(m)
}

/// An address as Suricata's EVE writes it: IPv4 dotted, IPv6 as eight
/// groups of four hex digits, none left out (`fd00:0001:0000:...`), so a
/// record matches what tools written for Suricata's EVE compare.
pub fn eve_ip(a: &sluice_wire::IpAddr) -> String {
    match a {
        sluice_wire::IpAddr::V4(_) => a.to_string(),
        sluice_wire::IpAddr::V6(b) => {
            let mut s = String::with_capacity(39);
            for (i, g) in b.chunks(2).enumerate() {
                if i > 0 {
                    s.push(':');
                }
                s.push_str(&format!("{:02x}{:02x}", g[0], g[1]));
            }
            s
        }
    }
}

fn tuple(m: &mut Map<String, Value>, f: &FlowKey) {
    m.insert("src_ip".into(), eve_ip(&f.src).into());
    m.insert("dest_ip".into(), eve_ip(&f.dst).into());
    if matches!(f.proto, 6 | 17) {
        m.insert("src_port".into(), f.src_port.into());
        m.insert("dest_port".into(), f.dst_port.into());
    }
    m.insert("proto".into(), proto_name(f.proto).into());
    // The zone as EVE names it: VLAN ids, or the kind of tunnel it came from
    // (EVE has no field for a VNI; `flow_id` already differs per zone).
    use sluice_wire::encap::{zone_of, TunnelKind, ZoneOf};
    match zone_of(f.zone) {
        ZoneOf::None => {}
        ZoneOf::Vlan(o, 0) => {
            m.insert("vlan".into(), json!([o]));
        }
        ZoneOf::Vlan(o, i) => {
            m.insert("vlan".into(), json!([o, i]));
        }
        ZoneOf::Tunnel(kind, _) => {
            let proto = match kind {
                TunnelKind::Gre | TunnelKind::Erspan => "GRE",
                TunnelKind::IpInIp => "IP",
                _ => "UDP",
            };
            m.insert("tunnel".into(), json!({ "proto": proto }));
        }
    }
}

impl Event {
    /// The event as one EVE JSON object.
    pub fn to_eve(&self) -> Value {
        let mut m = Map::new();
        match self {
            Event::Alert(a) => {
                m.insert("timestamp".into(), eve_timestamp(a.ts_ns).into());
                m.insert("flow_id".into(), a.flow_id.into());
                m.insert("event_type".into(), "alert".into());
                tuple(&mut m, &a.flow);
                m.insert(
                    "direction".into(),
                    if a.to_server {
                        "to_server"
                    } else {
                        "to_client"
                    }
                    .into(),
                );
                if let Some(app) = a.app_proto {
                    m.insert("app_proto".into(), app.into());
                }
                if let Some(meta) = &a.app_meta {
                    m.insert(meta.0.into(), meta.1.clone());
                }
                let mut alert = json!({
                    "action": match a.action { AlertAction::Allowed => "allowed", AlertAction::Blocked => "blocked" },
                    "gid": a.gid,
                    "signature_id": a.sid,
                    "rev": a.rev,
                    "signature": &*a.msg,
                    "category": a.category.as_deref().unwrap_or(""),
                    "severity": a.severity,
                });
                if let Some(t) = a.target {
                    let end = |ip: &sluice_wire::IpAddr, port: u16| {
                        let mut e = json!({ "ip": eve_ip(ip) });
                        if matches!(a.flow.proto, 6 | 17) {
                            e["port"] = port.into();
                        }
                        e
                    };
                    let src = end(&a.flow.src, a.flow.src_port);
                    let dst = end(&a.flow.dst, a.flow.dst_port);
                    let (source, target) = if t { (src, dst) } else { (dst, src) };
                    alert["source"] = source;
                    alert["target"] = target;
                }
                if let Some(md) = &a.rule_metadata {
                    alert["metadata"] = metadata(md);
                }
                m.insert("alert".into(), alert);
            }
            Event::Flow(r) => {
                m.insert("timestamp".into(), eve_timestamp(r.end_ns).into());
                m.insert("flow_id".into(), r.flow_id.into());
                m.insert("event_type".into(), "flow".into());
                tuple(&mut m, &r.flow);
                m.insert(
                    "flow".into(),
                    json!({
                        "pkts_toserver": r.pkts_toserver,
                        "pkts_toclient": r.pkts_toclient,
                        "bytes_toserver": r.bytes_toserver,
                        "bytes_toclient": r.bytes_toclient,
                        "start": eve_timestamp(r.start_ns),
                        "end": eve_timestamp(r.end_ns),
                        "age": (r.end_ns.saturating_sub(r.start_ns)) / 1_000_000_000,
                        "state": r.state,
                        "reason": r.reason,
                        "alerted": false,
                    }),
                );
            }
        }
        Value::Object(m)
    }

    /// The event as one line of EVE JSON (no trailing newline).
    pub fn to_eve_line(&self) -> String {
        self.to_eve().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::IpAddr;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(eve_timestamp(0), "1970-01-01T00:00:00.000000+0000");
        // 2024-02-29T12:34:56.789012Z
        assert_eq!(
            eve_timestamp(1_709_210_096_789_012_000),
            "2024-02-29T12:34:56.789012+0000"
        );
    }

    #[test]
    fn ipv6_addresses_are_written_in_full() {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[1] = 0x00;
        a[3] = 1;
        a[15] = 5;
        assert_eq!(
            eve_ip(&IpAddr::V6(a)),
            "fd00:0001:0000:0000:0000:0000:0000:0005"
        );
        assert_eq!(eve_ip(&IpAddr::V4([10, 0, 0, 1])), "10.0.0.1");
    }

    #[test]
    fn alert_has_eve_fields() {
        let e = Event::Alert(Alert {
            ts_ns: 1_000_000_000,
            flow: FlowKey {
                zone: 0,
                src: IpAddr::V4([10, 0, 0, 1]),
                dst: IpAddr::V4([10, 0, 0, 2]),
                src_port: 1,
                dst_port: 80,
                proto: 6,
            },
            flow_id: 42,
            action: AlertAction::Blocked,
            gid: 1,
            sid: 1000001,
            rev: 2,
            msg: "test sig".into(),
            category: Some("web-application-attack".into()),
            severity: 1,
            to_server: true,
            app_proto: Some("http"),
            app_meta: Some(Box::new((
                "http",
                json!({"hostname": "example.com", "url": "/x"}),
            ))),
            rule_metadata: Some("created_at 2022_10_11, cve CVE_2022_1, cve CVE_2022_2".into()),
            target: Some(true),
        });
        let v = e.to_eve();
        assert_eq!(v["event_type"], "alert");
        assert_eq!(v["app_proto"], "http");
        assert_eq!(v["alert"]["signature_id"], 1000001);
        assert_eq!(v["alert"]["action"], "blocked");
        assert_eq!(
            v["alert"]["metadata"],
            json!({"created_at": ["2022_10_11"], "cve": ["CVE_2022_1", "CVE_2022_2"]})
        );
        assert_eq!(v["alert"]["target"], json!({"ip": "10.0.0.2", "port": 80}));
        assert_eq!(v["alert"]["source"], json!({"ip": "10.0.0.1", "port": 1}));
        assert_eq!(v["dest_port"], 80);
        assert_eq!(v["proto"], "TCP");
        assert_eq!(v["http"]["hostname"], "example.com");
    }
}
