//! `app-layer-event:PROTO.NAME` for the DNS, SSH and FTP parsers: which
//! events Sluice decides, and the rule condition each becomes.

use super::{Proto, Rule, RuleSyntax};

fn bad_value(v: &str) -> RuleSyntax {
    RuleSyntax::BadValue {
        keyword: "app-layer-event".into(),
        value: v.into(),
    }
}

/// True if `v` names an event of a protocol handled here (`dns.`, `ssh.`).
pub(super) fn handles(v: &str) -> bool {
    v.starts_with("dns.") || v.starts_with("ssh.") || v.starts_with("ftp.")
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
    if let Some(name) = v.strip_prefix("ssh.") {
        // Suricata's third SSH event is not decided.
        if name == "invalid_record" {
            return Err(RuleSyntax::UnsupportedKeyword(format!(
                "app-layer-event {v}: needs the SSH records tracked across segments"
            )));
        }
        let bit = crate::ssh::event_bit(name).ok_or_else(|| bad_value(v))?;
        if rule.proto != Proto::Ssh {
            return Err(RuleSyntax::UnsupportedKeyword(format!(
                "app-layer-event {v} on a {} rule",
                rule.proto.name()
            )));
        }
        rule.ssh_events |= bit;
        return Ok(());
    }
    if let Some(name) = v.strip_prefix("ftp.") {
        let bit = crate::ftp::event_bit(name).ok_or_else(|| bad_value(v))?;
        if rule.proto != Proto::Ftp {
            return Err(RuleSyntax::UnsupportedKeyword(format!(
                "app-layer-event {v} on a {} rule",
                rule.proto.name()
            )));
        }
        rule.ftp_events |= bit;
        return Ok(());
    }
    Err(bad_value(v))
}

#[cfg(test)]
mod tests {
    use crate::rules::{parse_rule, RuleSyntax, Vars};

    fn parse(opts: &str, proto: &str) -> Result<crate::rules::Rule, RuleSyntax> {
        parse_rule(
            &format!("alert {proto} any any -> any any (msg:\"x\"; {opts} sid:1;)"),
            &Vars::default(),
        )
    }

    #[test]
    fn ssh_banner_events_load_alone_on_ssh_rules() {
        let r = parse("flow:established; app-layer-event:ssh.long_banner;", "ssh").unwrap();
        assert_eq!(r.ssh_events, crate::ssh::LONG_BANNER);
        let r = parse(
            "app-layer-event:ssh.invalid_banner; flowint:ssh.anomaly.count,+,1;",
            "ssh",
        )
        .unwrap();
        assert_eq!(r.ssh_events, crate::ssh::INVALID_BANNER);
        // Skipped, with the reason: another protocol, other conditions,
        // the event not decided.
        for (opts, proto, why) in [
            ("app-layer-event:ssh.long_banner;", "tcp", "on a tcp rule"),
            (
                "app-layer-event:ssh.long_banner; content:\"SSH-\";",
                "ssh",
                "conditions other than flow",
            ),
            (
                "app-layer-event:ssh.invalid_record;",
                "ssh",
                "records tracked",
            ),
        ] {
            match parse(opts, proto) {
                Err(RuleSyntax::UnsupportedKeyword(k)) => assert!(k.contains(why), "{k}"),
                other => panic!("{opts}: {other:?}"),
            }
        }
        // A name Suricata does not know: the rule is refused as there.
        assert!(matches!(
            parse("app-layer-event:ssh.short_banner;", "ssh"),
            Err(RuleSyntax::BadValue { .. })
        ));
    }
}
