//! `app-layer-event:PROTO.NAME` for the parsers other than HTTP's: which
//! events Sluice decides, and the rule condition each becomes.

use super::{Proto, Rule, RuleSyntax};

fn bad_value(v: &str) -> RuleSyntax {
    RuleSyntax::BadValue {
        keyword: "app-layer-event".into(),
        value: v.into(),
    }
}

/// True if `v` names an event of a protocol handled here (`dns.`).
pub(super) fn handles(v: &str) -> bool {
    v.starts_with("dns.")
}

/// Adds the event `v` (`dns.NAME`) to `rule`'s conditions. A name Suricata
/// 7.0.10 does not know is a bad value (Suricata rejects the rule); a rule
/// whose protocol is not the event's is skipped.
pub(super) fn apply(rule: &mut Rule, v: &str) -> Result<(), RuleSyntax> {
    if let Some(name) = v.strip_prefix("dns.") {
        let e = crate::dns::events::Event::parse(name).ok_or_else(|| bad_value(v))?;
        if rule.proto != Proto::Dns {
            return Err(RuleSyntax::UnsupportedKeyword(format!(
                "app-layer-event {v} on a {} rule",
                rule.proto.name()
            )));
        }
        rule.dns_checks.events |= e.bit();
        return Ok(());
    }
    Err(bad_value(v))
}
