//! The application-layer objects an alert carries in EVE, as Suricata writes
//! them next to an alert raised on a protocol's transaction: `http`
//! (hostname, url, user agent, method, protocol, status, ...), `tls` (sni,
//! subject, issuerdn, serial, fingerprint, ja3, ja3s) and `dns` (the query names), in
//! the format of Suricata 8's EVE schema.
//!
//! They are built from the buffers the protocol's rules were just matched on,
//! and only when one of those rules raised an alert: nothing is built or
//! allocated for a packet that raises none. An alert of a stream or packet
//! rule on the same flow carries `app_proto` but no object (Suricata's
//! would carry the transaction's; the IPS keeps no transaction past the
//! message it inspects).

use serde_json::{json, Map, Value};
use sluice_nf::Event;

/// Gives each alert of `events[from..]` that has no application object the
/// one `meta` builds (called at most once, and only if there is such an
/// alert).
pub(crate) fn annotate(
    events: &mut [Event],
    from: usize,
    meta: impl FnOnce() -> (&'static str, Value),
) {
    let mut meta = Some(meta);
    let mut made: Option<(&'static str, Value)> = None;
    for e in events.iter_mut().skip(from) {
        if let Event::Alert(a) = e {
            if a.app_meta.is_none() {
                if made.is_none() {
                    made = meta.take().map(|f| f());
                }
                a.app_meta = made.clone().map(Box::new);
            }
        }
    }
}

fn text(b: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(b).into_owned())
}

/// The `http` object of a message's buffers.
pub(crate) fn http(b: &crate::http::Buffers) -> (&'static str, Value) {
    use crate::http::Buf;
    let mut m = Map::new();
    for (key, buf) in [
        ("hostname", Buf::Host),
        ("url", Buf::UriRaw),
        ("http_user_agent", Buf::UserAgent),
        ("http_refer", Buf::Referer),
        ("http_method", Buf::Method),
        ("protocol", Buf::Protocol),
        ("redirect", Buf::Location),
    ] {
        if let Some(v) = b.get(buf) {
            m.insert(key.into(), text(v));
        }
    }
    if let Some(ct) = b.get(Buf::ContentType) {
        // Suricata logs the media type without its parameters.
        let end = ct.iter().position(|&c| c == b';').unwrap_or(ct.len());
        m.insert("http_content_type".into(), text(ct[..end].trim_ascii()));
    }
    if let Some(code) = b
        .get(Buf::StatCode)
        .and_then(|c| std::str::from_utf8(c).ok())
        .and_then(|c| c.parse::<u16>().ok())
    {
        m.insert("status".into(), code.into());
    }
    if let Some(len) = b
        .get(Buf::ContentLen)
        .and_then(|c| std::str::from_utf8(c).ok())
        .and_then(|c| c.trim().parse::<u64>().ok())
    {
        m.insert("length".into(), len.into());
    }
    ("http", Value::Object(m))
}

/// The `tls` object of a hello (or certificate) parsed from `payload`;
/// with `ja3`, its JA3 or JA3S fingerprint (Suricata computes them only
/// when a rule needs them, `ja3-fingerprints: auto`).
pub(crate) fn tls(b: &crate::tls::Buffers, payload: &[u8], ja3: bool) -> (&'static str, Value) {
    use crate::tls::Buf;
    let mut m = Map::new();
    for (key, buf) in [
        ("sni", Buf::Sni),
        ("subject", Buf::CertSubject),
        ("issuerdn", Buf::CertIssuer),
        ("serial", Buf::CertSerial),
        ("fingerprint", Buf::CertFingerprint),
    ] {
        if let Some(v) = b.get(buf, payload) {
            m.insert(key.into(), text(v));
        }
    }
    let prints: &[(&str, Buf, Buf)] = if ja3 {
        &[
            ("ja3", Buf::Ja3Hash, Buf::Ja3String),
            ("ja3s", Buf::Ja3sHash, Buf::Ja3sString),
        ]
    } else {
        &[]
    };
    for &(key, hash, string) in prints {
        if let (Some(h), Some(s)) = (b.get(hash, payload), b.get(string, payload)) {
            m.insert(key.into(), json!({ "hash": text(h), "string": text(s) }));
        }
    }
    ("tls", Value::Object(m))
}

/// A DNS record type's name as Suricata writes it (its number otherwise).
fn rrtype(t: u16) -> Value {
    let name = match t {
        1 => "A",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        15 => "MX",
        16 => "TXT",
        28 => "AAAA",
        33 => "SRV",
        35 => "NAPTR",
        43 => "DS",
        46 => "RRSIG",
        48 => "DNSKEY",
        65 => "HTTPS",
        255 => "ANY",
        _ => return t.to_string().into(),
    };
    name.into()
}

/// The `dns` object of a message as Suricata 8 writes it next to an alert
/// (EVE DNS version 3): `type` (`request` or `response`), `id`, `flags`,
/// `rd`, `opcode`, a response's `rcode`, and a request's `queries` (each
/// with `rrname` and `rrtype`; `names` holds each question's name after a
/// `.`, at `spans`).
pub(crate) fn dns(
    msg: &crate::dns::Message<'_>,
    names: &[u8],
    spans: &[(u32, u32)],
) -> (&'static str, Value) {
    let h = msg.header();
    let flags = h.flags();
    let mut m = Map::new();
    m.insert("version".into(), 3.into());
    let request = msg.is_request();
    m.insert(
        "type".into(),
        if request { "request" } else { "response" }.into(),
    );
    m.insert("id".into(), h.id().into());
    m.insert("flags".into(), format!("{flags:x}").into());
    m.insert("rd".into(), (flags & 0x0100 != 0).into());
    m.insert("opcode".into(), h.opcode().into());
    if !request {
        let rcode: Value = match h.rcode() {
            0 => "NOERROR".into(),
            1 => "FORMERR".into(),
            2 => "SERVFAIL".into(),
            3 => "NXDOMAIN".into(),
            4 => "NOTIMP".into(),
            5 => "REFUSED".into(),
            n => n.to_string().into(),
        };
        m.insert("rcode".into(), rcode);
    }
    let queries: Vec<Value> = msg
        .questions()
        .iter()
        .zip(spans)
        .map(|(q, &(a, z))| {
            let name = names.get(a as usize + 1..z as usize).unwrap_or_default();
            json!({ "rrname": text(name), "rrtype": rrtype(q.qtype) })
        })
        .collect();
    if !queries.is_empty() {
        m.insert("queries".into(), Value::Array(queries));
    }
    ("dns", Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_nf::{Alert, AlertAction};
    use sluice_wire::{FlowKey, IpAddr};

    fn alert(sid: u32) -> Event {
        Event::Alert(Alert {
            ts_ns: 0,
            flow: FlowKey {
                zone: 0,
                src: IpAddr::V4([10, 0, 0, 1]),
                dst: IpAddr::V4([10, 0, 0, 2]),
                src_port: 1,
                dst_port: 80,
                proto: 6,
            },
            flow_id: 1,
            action: AlertAction::Allowed,
            gid: 1,
            sid,
            rev: 1,
            msg: "m".into(),
            category: None,
            severity: 3,
            to_server: true,
            app_proto: Some("http"),
            app_meta: None,
            rule_metadata: None,
            target: None,
        })
    }

    #[test]
    fn only_the_new_alerts_get_the_object_and_it_is_built_once() {
        let mut events = vec![alert(1), alert(2), alert(3)];
        let mut built = 0;
        annotate(&mut events, 1, || {
            built += 1;
            ("http", json!({"hostname": "a"}))
        });
        assert_eq!(built, 1);
        let v: Vec<Value> = events.iter().map(Event::to_eve).collect();
        assert!(v[0].get("http").is_none(), "raised before");
        assert_eq!(v[1]["http"]["hostname"], "a");
        assert_eq!(v[2]["http"]["hostname"], "a");
        // Nothing new: nothing built.
        let mut never = 0;
        annotate(&mut events, 3, || {
            never += 1;
            ("http", Value::Null)
        });
        assert_eq!(never, 0);
    }

    #[test]
    fn record_types_are_named() {
        assert_eq!(rrtype(1), "A");
        assert_eq!(rrtype(28), "AAAA");
        assert_eq!(rrtype(999), "999");
    }
}
