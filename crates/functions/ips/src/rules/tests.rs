use super::*;

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(a)
}

#[test]
fn addresses_ports_and_vars() {
    let mut vars = Vars::new();
    vars.insert("HOME_NET".into(), "[10.0.0.0/8,192.168.1.0/24]".into());
    vars.insert("EXTERNAL_NET".into(), "!$HOME_NET".into());
    let a = parse_addr("$EXTERNAL_NET", &vars, 0).unwrap();
    assert!(!a.matches(&v4([10, 1, 2, 3])));
    assert!(a.matches(&v4([8, 8, 8, 8])));
    let l = parse_addr("[10.0.0.0/8, !10.1.0.0/16]", &vars, 0).unwrap();
    assert!(l.matches(&v4([10, 2, 0, 1])));
    assert!(!l.matches(&v4([10, 1, 0, 1])));
    assert!(!l.matches(&v4([11, 1, 0, 1])));
    let p = parse_port("[80,1024:,!8080]", &vars, 0).unwrap();
    assert!(p.matches(80) && p.matches(5000) && !p.matches(8080) && !p.matches(81));
    assert!(parse_port(":1023", &vars, 0).unwrap().matches(0));
    assert_eq!(
        parse_addr("$NOPE", &vars, 0),
        Err(RuleSyntax::UnknownVariable("NOPE".into()))
    );
    assert_eq!(
        parse_addr("10.0.0.0/33", &vars, 0),
        Err(RuleSyntax::BadPrefix("10.0.0.0/33".into()))
    );
    let v6 = parse_addr("2001:db8::/32", &vars, 0).unwrap();
    assert!(v6.matches(&IpAddr::V6([
        0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1
    ])));
    assert!(!v6.matches(&v4([10, 0, 0, 1])));
    // Self-referencing variables terminate with an error.
    let mut vars = Vars::new();
    vars.insert("A".into(), "$A".into());
    assert_eq!(parse_addr("$A", &vars, 0), Err(RuleSyntax::NestTooDeep));
}

#[test]
fn contents_and_options() {
    let r = parse_rule(
        r#"drop tcp any any <> 10.0.0.0/8 [80,443] (msg:"a \"q\"; b"; content:"GET |20 2f|x"; nocase; offset:2; depth:20; content:"|00|z"; distance:1; within:5; flow:to_server,established; sid:7; rev:3; classtype:web; priority:1;)"#,
        &Vars::new(),
    )
    .unwrap();
    assert_eq!(&*r.msg, "a \"q\"; b");
    assert_eq!(r.contents[0].bytes, b"GET  /x");
    assert!(r.contents[0].nocase);
    assert_eq!(
        (r.contents[0].offset, r.contents[0].depth),
        (Some(2), Some(20))
    );
    assert_eq!(r.contents[1].bytes, b"\0z");
    assert_eq!(
        (r.contents[1].distance, r.contents[1].within),
        (Some(1), Some(5))
    );
    assert_eq!(
        (r.to_server, r.established, r.sid, r.rev, r.priority),
        (Some(true), true, 7, 3, Some(1))
    );
    assert!(r.bidir && r.action == Action::Drop);
}

#[test]
fn garbage_never_panics() {
    // A deterministic spray of rule-shaped garbage, including multibyte text
    // inside hex escapes and lists.
    let pieces = [
        "alert",
        "drop",
        "tcp",
        "udp",
        " ",
        "any",
        "->",
        "<>",
        "[",
        "]",
        "!",
        "$X",
        "(",
        ")",
        ";",
        ":",
        "\"",
        "|",
        "é",
        "4",
        "a",
        "content",
        "msg",
        "sid:1",
        "depth:",
        "distance:-1",
        "within",
        ",",
        "10.0.0.0/8",
        "\\",
        "flow:",
        "1:2",
    ];
    let mut vars = Vars::new();
    vars.insert("X".into(), "[$X]".into());
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..20000 {
        let mut line = String::new();
        for _ in 0..(x % 24) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            line.push_str(pieces[(x % pieces.len() as u64) as usize]);
        }
        let _ = parse_rule(&line, &vars);
        let _ = parse_rule(&format!("alert tcp any any -> any any ({line})"), &vars);
    }
    assert_eq!(
        parse_content("\"|aéb|\""),
        Err(RuleSyntax::BadHex("aéb".into()))
    );
    let deep = format!("{}1.2.3.4{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(parse_addr(&deep, &vars, 0), Err(RuleSyntax::NestTooDeep));
    assert_eq!(parse_port(&deep, &vars, 0), Err(RuleSyntax::NestTooDeep));
    assert_eq!(
        parse_port(&"!".repeat(100_000), &vars, 0),
        Err(RuleSyntax::NestTooDeep)
    );
}

#[test]
fn each_problem_names_its_token() {
    let v = Vars::new();
    let e = |opts: &str| parse_rule(&format!("alert tcp any any -> any any ({opts})"), &v);
    let bad = |k: &str, x: &str| RuleSyntax::BadValue {
        keyword: k.into(),
        value: x.into(),
    };
    let cases: Vec<(Result<Rule, RuleSyntax>, RuleSyntax, &str)> = vec![
        (
            parse_rule("alert tcp any any -> any any", &v),
            RuleSyntax::MissingOptions,
            "missing option list \"( ... )\"",
        ),
        (
            parse_rule("alert tcp any any -> any any (sid:1;", &v),
            RuleSyntax::MissingClose,
            "missing closing \")\"",
        ),
        (
            parse_rule("alert tcp any any -> any any (sid:1;) x", &v),
            RuleSyntax::MalformedOptions,
            "malformed option list",
        ),
        (
            parse_rule("alert tcp any -> any any (sid:1;)", &v),
            RuleSyntax::HeaderFields(6),
            "expected \"action proto src sport -> dst dport\" header, found 6 fields",
        ),
        (
            parse_rule("log tcp any any -> any any (sid:1;)", &v),
            RuleSyntax::UnknownAction("log".into()),
            "unknown action \"log\"",
        ),
        (
            parse_rule("alert tcp any any => any any (sid:1;)", &v),
            RuleSyntax::UnknownDirection("=>".into()),
            "unknown direction \"=>\"",
        ),
        (
            e("msg; sid:1;"),
            RuleSyntax::MissingValue {
                keyword: "msg".into(),
            },
            "\"msg\" needs a value",
        ),
        (
            e("nocase; sid:1;"),
            RuleSyntax::NoPrecedingContent {
                keyword: "nocase".into(),
            },
            "\"nocase\" without a preceding content",
        ),
        (
            e("pcre:\"x\"; sid:1;"),
            RuleSyntax::BadValue {
                keyword: "pcre".into(),
                value: "\"x\"".into(),
            },
            "bad pcre \"\"x\"\"",
        ),
        (
            e("content:\"\"; sid:1;"),
            RuleSyntax::EmptyContent,
            "empty content",
        ),
        (
            e("content:\"a\"; depth:x; sid:1;"),
            RuleSyntax::BadModifier {
                keyword: "depth".into(),
                value: "x".into(),
            },
            "bad depth value \"x\"",
        ),
        (
            e("content:\"a\"; content:\"b\"; distance:y; sid:1;"),
            RuleSyntax::BadModifier {
                keyword: "distance".into(),
                value: "y".into(),
            },
            "bad distance value \"y\"",
        ),
        (e("content:\"a\"; sid:x;"), bad("sid", "x"), "bad sid \"x\""),
        (
            e("content:\"a\"; sid:1; rev:-1;"),
            bad("rev", "-1"),
            "bad rev \"-1\"",
        ),
        (
            e("content:\"a\"; sid:1; priority:300;"),
            bad("priority", "300"),
            "bad priority \"300\"",
        ),
        (
            e("content:\"a\"; flow:only_frag; sid:1;"),
            RuleSyntax::UnsupportedFlow("only_frag".into()),
            "unsupported flow option \"only_frag\"",
        ),
        (e("content:\"a\";"), RuleSyntax::MissingSid, "missing sid"),
        (
            e("content:\"a\"; offset:1; content:\"b\"; distance:0; depth:3; sid:1;"),
            RuleSyntax::MixedPositioning(2),
            "content 2: cannot mix offset/depth with distance/within",
        ),
        (
            e("content:\"a\"; within:depth; sid:1;"),
            RuleSyntax::BadModifier {
                keyword: "within".into(),
                value: "depth".into(),
            },
            "bad within value \"depth\"",
        ),
        (
            e("content:\"abc\"; depth:2; sid:1;"),
            RuleSyntax::DepthTooShort(1),
            "content 1: depth shorter than the content",
        ),
        (
            e("content:\"a\"; content:\"bc\"; within:1; sid:1;"),
            RuleSyntax::WithinTooShort(2),
            "content 2: within shorter than the content",
        ),
        (
            e(&format!("{}sid:1;", "content:\"a\"; ".repeat(256))),
            RuleSyntax::TooManyContents,
            "too many contents",
        ),
        (
            e("msg:\"a; sid:1;"),
            RuleSyntax::UnterminatedQuote,
            "unterminated quoted string",
        ),
        (
            e("content:\"a\"; sid:1"),
            RuleSyntax::MissingSemicolon,
            "option list must end with \";\"",
        ),
        (
            e("msg:a; sid:1;"),
            RuleSyntax::NotQuoted("a".into()),
            "expected a quoted string, found a",
        ),
        (
            e("content:\"|4g|\"; sid:1;"),
            RuleSyntax::BadHex("4g".into()),
            "bad hex in \"|4g|\"",
        ),
    ];
    for (got, kind, text) in cases {
        let err = got.expect_err(text);
        assert_eq!(err, kind);
        assert_eq!(err.to_string(), text);
    }
    let addr_cases = [
        (
            "[1.2.3.4,]",
            RuleSyntax::EmptyListElement,
            "empty list element",
        ),
        (
            "[1.2.3.4]]",
            RuleSyntax::UnbalancedBracket(']'),
            "unbalanced \"]\"",
        ),
        (
            "[[1.2.3.4]",
            RuleSyntax::UnbalancedBracket('['),
            "unbalanced \"[\"",
        ),
        (
            "1.2.3",
            RuleSyntax::BadAddress("1.2.3".into()),
            "bad address \"1.2.3\"",
        ),
        (
            "$NOPE",
            RuleSyntax::UnknownVariable("NOPE".into()),
            "unknown variable \"$NOPE\"",
        ),
    ];
    for (a, kind, text) in addr_cases {
        let err = parse_addr(a, &v, 0).expect_err(text);
        assert_eq!(err, kind);
        assert_eq!(err.to_string(), text);
    }
    let port_cases = [
        ("8o", RuleSyntax::BadPort("8o".into()), "bad port \"8o\""),
        (
            "90:80",
            RuleSyntax::EmptyPortRange("90:80".into()),
            "empty port range \"90:80\"",
        ),
    ];
    for (p, kind, text) in port_cases {
        let err = parse_port(p, &v, 0).expect_err(text);
        assert_eq!(err, kind);
        assert_eq!(err.to_string(), text);
    }
    let mut cyclic = Vars::new();
    cyclic.insert("A".into(), "$A".into());
    assert_eq!(
        parse_port("$A", &cyclic, 0).unwrap_err().to_string(),
        "variables, lists or negations nest too deep"
    );
    assert_eq!(
        var("A", &cyclic, MAX_VAR_DEPTH + 1)
            .unwrap_err()
            .to_string(),
        "variables or lists nest too deep at $A"
    );
}

#[test]
fn errors_name_file_and_line() {
    let text = "# comment\n\nalert tcp any any -> any any (content:\"a\"; sid:1;)\nalert tcp any any -> any any (content:\"a\"; ftpbounce; sid:2;)\nalert tcpp any any -> any any (content:\"a\"; sid:3;)\nalert tcp any any -> any any (content:\"a\"; sid:1;)\nalert tcp any any -> any any (content:\"a|4\"; sid:5;)\nalert tcp any any -> any any (sid:6;)\nalert dcerpc any any -> any any (sid:9;)\n";
    let (rules, errs) = parse_rules(text, "x.rules", &Vars::new());
    // A rule without content is a packet rule.
    assert_eq!(rules.len(), 2);
    let kinds: Vec<(usize, &RuleSyntax)> = errs.iter().map(|e| (e.line, &e.msg)).collect();
    assert_eq!(
        kinds,
        vec![
            (4, &RuleSyntax::UnsupportedKeyword("ftpbounce".into())),
            (5, &RuleSyntax::UnknownProtocol("tcpp".into())),
            (6, &RuleSyntax::DuplicateSid(1)),
            (7, &RuleSyntax::UnbalancedPipe),
            (9, &RuleSyntax::UnsupportedProtocol("dcerpc".into())),
        ]
    );
    // The text operators see stays as it was.
    let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        msgs,
        vec![
            "x.rules:4: unsupported keyword \"ftpbounce\"",
            "x.rules:5: unknown protocol \"tcpp\"",
            "x.rules:6: duplicate sid 1",
            "x.rules:7: unbalanced \"|\" in content",
            "x.rules:9: unsupported protocol \"dcerpc\"",
        ]
    );
}

#[test]
fn long_network_lists_match_as_their_lists_do() {
    // Random networks (v4 and v6, any prefix, host bits set) and addresses
    // near them: the bisected set and the element-by-element list agree.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..200 {
        let n = NET_SET_MIN + (next() % 40) as usize;
        let mut nets = Vec::new();
        for _ in 0..n {
            let a = if next() % 4 == 0 {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&next().to_be_bytes());
                b[0] = 0x20;
                (IpAddr::V6(b), (next() % 129) as u8)
            } else {
                // A narrow space so networks overlap and nest.
                let v = 0x0a00_0000 | (next() as u32 & 0xffff);
                (IpAddr::V4(v.to_be_bytes()), 16 + (next() % 17) as u8)
            };
            nets.push(a);
        }
        let text = nets
            .iter()
            .map(|(a, p)| format!("{}/{p}", std::net::IpAddr::from(*a)))
            .collect::<Vec<_>>()
            .join(",");
        let set = parse_addr(&format!("[{text}]"), &Vars::new(), 0).unwrap();
        assert!(matches!(set, AddrExpr::Set(_)));
        let list = AddrExpr::List(nets.iter().map(|&(a, p)| AddrExpr::Net(a, p)).collect());
        for _ in 0..200 {
            let probe = if next() % 4 == 0 {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&next().to_be_bytes());
                b[0] = 0x20;
                b[1] = nets
                    .iter()
                    .find_map(|(a, _)| match a {
                        IpAddr::V6(b) => Some(b[1]),
                        _ => None,
                    })
                    .unwrap_or(0);
                IpAddr::V6(b)
            } else {
                IpAddr::V4((0x0a00_0000 | (next() as u32 & 0xffff)).to_be_bytes())
            };
            assert_eq!(
                set.matches(&probe),
                list.matches(&probe),
                "{text} {probe:?}"
            );
        }
    }
    // Short lists and lists with negations stay lists.
    let short = parse_addr("[1.2.3.4,5.6.7.8]", &Vars::new(), 0).unwrap();
    assert!(matches!(short, AddrExpr::List(_)));
}

/// `fragbits` as Suricata's detect-fragbits.c compares: exactly, `+` all of
/// them and maybe others, `*` any of them, `!` not all of them; `ipopts`
/// names; `tos` in decimal and hex.
#[test]
fn ip_header_keywords() {
    use super::options::{FragBits, PacketInfo};
    let fb = |s: &str| FragBits::parse(s).unwrap();
    let (r, d, m) = (0x8000u16, 0x4000u16, 0x2000u16);
    assert!(fb("D").matches(d) && !fb("D").matches(d | m) && !fb("D").matches(0));
    assert!(fb("D").matches(d | 0x0123), "the offset is not a flag");
    assert!(fb("+D").matches(d | m) && !fb("+DM").matches(d));
    assert!(fb("*MR").matches(r) && !fb("*MR").matches(d));
    assert!(fb("!M").matches(d) && !fb("!M").matches(m | d));
    assert!(FragBits::parse("X").is_none() && FragBits::parse("").is_none());
    let rule = |o: &str| {
        parse_rule(
            &format!("alert ip any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
    };
    let checks = |o: &str| rule(o).unwrap().checks;
    let info = PacketInfo {
        ipv4: Some((0x88, 7, d)),
        ipopts: sluice_wire::ipv4::option_bit(131),
        ..PacketInfo::default()
    };
    assert!(checks("tos:x88;").matches(17, &info));
    assert!(checks("tos:136;").matches(17, &info));
    assert!(!checks("tos:!136;").matches(17, &info));
    assert!(checks("id:7;").matches(17, &info) && !checks("id:8;").matches(17, &info));
    assert!(checks("ipopts:lsrr;").matches(17, &info));
    assert!(checks("ipopts:any;").matches(17, &info));
    assert!(!checks("ipopts:rr;").matches(17, &info));
    assert!(
        !checks("id:7;").matches(17, &PacketInfo::default()),
        "not IPv4"
    );
    assert!(rule("ipopts:bogus;").is_err() && rule("tos:x1g;").is_err());
    // TCP fields only on TCP.
    let tcp = PacketInfo {
        window: 55808,
        ..PacketInfo::default()
    };
    assert!(checks("window:55808;").matches(6, &tcp));
    assert!(!checks("window:55808;").matches(17, &tcp));
    assert!(checks("window:!1024;").matches(6, &tcp));
    assert!(checks("seq:0; ack:0;").matches(6, &tcp));
    assert!(checks("tcp.flags:0;").matches(6, &tcp));
}

/// `ipv4`, `ipv6`, `icmpv4` and `icmpv6` rules: `ip` and `icmp` rules
/// restricted to one family.
#[test]
fn family_protocols() {
    use super::options::PacketInfo;
    let r = |p: &str| {
        parse_rule(
            &format!("alert {p} any any -> any any (sid:1;)"),
            &Vars::new(),
        )
        .unwrap()
    };
    let v4 = PacketInfo::default();
    let v6 = PacketInfo {
        ipv6: true,
        ..PacketInfo::default()
    };
    for (p, proto, six) in [
        ("ipv4", Proto::Ip, false),
        ("ipv6", Proto::Ip, true),
        ("icmpv4", Proto::Icmp, false),
        ("icmpv6", Proto::Icmp, true),
    ] {
        let rule = r(p);
        assert_eq!(rule.proto, proto, "{p}");
        assert_eq!(rule.checks.matches(58, &v6), six, "{p}");
        assert_eq!(rule.checks.matches(1, &v4), !six, "{p}");
    }
    assert!(r("ip").checks.matches(17, &v6) && r("ip").checks.matches(17, &v4));
}

/// `dns.opcode`, `dns.rcode` and `dns.rrtype` belong to DNS rules and take
/// Suricata's integer syntax.
#[test]
fn dns_header_keywords() {
    let r = |p: &str, o: &str| {
        parse_rule(
            &format!("alert {p} any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
    };
    let c = r("dns", "dns.opcode:!0; dns.rcode:3; dns.rrtype:16;")
        .unwrap()
        .dns_checks;
    assert!(c.opcode.unwrap().matches(4) && !c.opcode.unwrap().matches(0));
    assert!(c.rcode.unwrap().matches(3) && c.rrtype.unwrap().matches(16));
    assert!(r("udp", "dns.opcode:4;").is_err());
    assert!(r("dns", "dns.opcode:256;").is_err());
    assert!(r("dns", "dns.rrtype:65535;").is_ok());
}

/// `ssh.proto`/`ssh_proto` and `ssh.software`/`ssh_software` are sticky
/// buffers of `ssh` rules only, and a rule mixing them with stream keywords
/// is refused.
#[test]
fn ssh_identification_buffers() {
    let r = |p: &str, o: &str| {
        parse_rule(
            &format!("alert {p} any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
    };
    let rule = r(
        "ssh",
        r#"ssh.proto; content:"2.0"; ssh_software; content:"PuTTY";"#,
    )
    .unwrap();
    assert_eq!(rule.ssh.len(), 2);
    assert!(rule.items.is_empty() && rule.app_layer());
    assert!(r("tcp", r#"ssh.proto; content:"2.0";"#).is_err());
    assert!(r("ssh", r#"content:"SSH-"; ssh.software; content:"x";"#).is_err());
}

/// `dns.query.name` and `dns.queries.rrname` inspect responses' question
/// names too; mixed with `dns.query` on one rule they are refused.
#[test]
fn dns_query_name_buffers() {
    let r = |o: &str| {
        parse_rule(
            &format!("alert dns any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
    };
    assert!(r(r#"dns.query.name; content:"a";"#).unwrap().dns_query[0].responses);
    assert!(r(r#"dns.queries.rrname; content:"a";"#).unwrap().dns_query[0].responses);
    assert!(!r(r#"dns.query; content:"a";"#).unwrap().dns_query[0].responses);
    assert!(r(r#"dns.query; content:"a"; dns.query.name; content:"b";"#).is_err());
}

/// Suricata folds `tls.cert_serial` contents to upper case and JA3 hash
/// contents to lower case, as those buffers are printed; not after a
/// transform (another buffer to Suricata).
#[test]
fn tls_serial_and_ja3_contents_are_folded() {
    let r = |o: &str| {
        parse_rule(
            &format!("alert tls any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
        .unwrap()
    };
    assert_eq!(
        r(r#"tls.cert_serial; content:"5c:19:b7";"#).contents[0].bytes,
        b"5C:19:B7"
    );
    assert_eq!(
        r(r#"ja3.hash; content:"F49DE2";"#).contents[0].bytes,
        b"f49de2"
    );
    assert_eq!(r(r#"ja3s.hash; content:"AB";"#).contents[0].bytes, b"ab");
    assert_eq!(r(r#"tls.sni; content:"AB";"#).contents[0].bytes, b"AB");
    assert_eq!(
        r(r#"tls.cert_serial; to_lowercase; content:"5c";"#).contents[0].bytes,
        b"5c"
    );
}

/// `startswith; endswith` on one content: the buffer is the content.
#[test]
fn startswith_and_endswith_together() {
    let rule = parse_rule(
        r#"alert http any any -> any any (http.method; content:"GET"; startswith; endswith; sid:1;)"#,
        &Vars::new(),
    )
    .unwrap();
    let items = &rule.http[0].items;
    assert!(crate::inspect::inspect_items(&rule, items, b"GET", 0));
    assert!(!crate::inspect::inspect_items(&rule, items, b"GETS", 0));
    assert!(!crate::inspect::inspect_items(&rule, items, b"AGET", 0));
}

/// A rule continued over lines ending in `\`, as Suricata's loader reads
/// it (the backslash dropped, the next line appended).
#[test]
fn rules_continued_over_lines() {
    let text = "# a comment\nalert tcp any any -> any any (msg:\"two \\\n  lines\"; content:\"a\"; \\\n sid:1;)\nalert tcp any any -> any any (content:\"b\"; sid:2;)\r\n";
    let (rules, errors) = parse_rules(text, "t.rules", &Vars::new());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(rules.len(), 2);
    assert_eq!(&*rules[0].msg, "two   lines");
    assert_eq!((rules[0].line, rules[1].line), (2, 5));
    // A file ending inside a continued rule: named, not silently lost.
    let (rules, errors) = parse_rules(
        "alert tcp any any -> any any (sid:1;) \\\n",
        "t.rules",
        &Vars::new(),
    );
    assert!(rules.is_empty());
    assert_eq!(errors[0].msg, RuleSyntax::UnendedContinuation);
}

/// Suricata's detect-fragbits.c: `+` asks for the bits and at least one
/// other; a modifier after the bits is ignored by its parser, while one
/// among `flags` counts.
#[test]
fn fragbits_plus_and_modifiers_after_the_bits() {
    let plus = options::FragBits::parse("+D").unwrap();
    assert!(!plus.matches(0x4000), "D alone");
    assert!(plus.matches(0x6000), "D and M");
    assert!(!plus.matches(0x2000), "M alone");
    assert_eq!(
        options::FragBits::parse("D+"),
        options::FragBits::parse("D")
    );
    assert_eq!(
        options::TcpFlags::parse("SA+"),
        options::TcpFlags::parse("+SA")
    );
    assert_eq!(
        options::TcpFlags::parse("S*,12"),
        options::TcpFlags::parse("*S,12")
    );
    assert!(options::TcpFlags::parse("+S").unwrap().needs_syn());
    assert!(!options::TcpFlags::parse("!S").unwrap().needs_syn());
    assert!(!options::TcpFlags::parse("*AR").unwrap().needs_syn());
}
