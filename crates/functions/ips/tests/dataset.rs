//! `dataset` and `datarep` ([`sluice_ips::dataset`]): sets loaded from
//! files, sets rules change kept in the store (shared by instances, decided
//! after the batch), and the loads that refuse a rule, with the examples of
//! Suricata's documentation (rules/datasets).

use std::io::Write;
use std::path::Path;

use sluice_ips::{build, Config, Ips};
use sluice_state::{LocalStore, Namespace};
use sluice_wire::build::{udp_v4, udp_v6};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// A file of `text` in `dir`; its path.
fn file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    p.display().to_string()
}

fn config(rules: &[String], base: &Path) -> (Config, std::path::PathBuf) {
    (
        Config {
            rule_files: vec![],
            rules: rules.to_vec(),
            vars: Default::default(),
            idle_timeout_secs: 300,
            sync_progress: false,
            classification_file: None,
            http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
            data_dir: None,
            dataset_dirs: vec![],
        },
        base.to_path_buf(),
    )
}

/// An IPS of `rules` (set files relative to `base`), and its refusals.
fn ips_in(rules: &[String], base: &Path) -> (Ips, Vec<String>) {
    let (cfg, base) = config(rules, base);
    let ips = build(&cfg, Namespace(3), &base).unwrap();
    let w = ips.warnings().iter().map(|w| w.to_string()).collect();
    (ips, w)
}

/// The sids alerted on `frames` (one batch) over `st`.
fn sids(ips: &mut Ips, st: &mut LocalStore, frames: &[Vec<u8>]) -> Vec<u32> {
    common::run_in(ips, st, frames, 1)
        .0
        .into_iter()
        .map(|a| a.0)
        .collect()
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A datagram from `src` to `S` with `payload`.
fn from(src: [u8; 4], payload: &[u8]) -> Vec<u8> {
    udp_v4(src, S, 5000, 9999, payload)
}

#[test]
fn an_address_list_is_looked_up_with_ip_src_and_ip_dst() {
    let dir = tempfile::tempdir().unwrap();
    file(dir.path(), "bad.csv", "10.0.0.1\n# not an address\n");
    let (_, w) = ips_in(
        &["alert udp any any -> any any (ip.src; dataset:isset,bad,type ipv4,load bad.csv; sid:1;)".into()],
        dir.path(),
    );
    // A line that does not parse refuses the rule, naming file and line.
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("bad.csv:2") && w[0].contains("not an IPv4 address"),
        "{w:?}"
    );

    file(dir.path(), "bad.csv", "10.0.0.1\n172.16.0.9\n");
    file(dir.path(), "both.csv", "192.168.1.2\n2001:db8::7\n");
    let rules: Vec<String> = [
        "alert udp any any -> any any (ip.src; dataset:isset,bad,type ipv4,load bad.csv; sid:1;)",
        "alert udp any any -> any any (ip.src; dataset:isnotset,bad; sid:2;)",
        "alert udp any any -> any any (ip.dst; dataset:isset,bad; sid:3;)",
        // An `ip` set holds both families; an IPv4 address is found in it.
        "alert ip any any -> any any (ip.dst; dataset:isset,both,type ip,load both.csv; sid:4;)",
        "alert ip any any -> any any (ip.src; dataset:isset,both; sid:5;)",
    ]
    .map(String::from)
    .to_vec();
    let (mut ips, w) = ips_in(&rules, dir.path());
    assert!(w.is_empty(), "{w:?}");
    let mut st = LocalStore::new();
    assert_eq!(sids(&mut ips, &mut st, &[from(C, b"x")]), vec![1, 4]);
    assert_eq!(
        sids(&mut ips, &mut st, &[from([10, 9, 9, 9], b"x")]),
        vec![2, 4]
    );
    let v6 = |s: u16| {
        let mut a = [0u8; 16];
        a[..2].copy_from_slice(&[0x20, 0x01]);
        a[2..4].copy_from_slice(&[0x0d, 0xb8]);
        a[15] = s as u8;
        a
    };
    let frame = udp_v6(v6(7), v6(8), 5000, 9999, b"x");
    // An IPv6 source is not in an ipv4 set: isnotset holds.
    assert_eq!(sids(&mut ips, &mut st, &[frame]), vec![2, 5]);
}

/// The documentation's "tracking unique values": `set` matches a value the
/// first time only, and the set is the store's, so another instance over
/// the same store knows it too.
#[test]
fn set_matches_new_values_once_across_batches_and_instances() {
    let dir = tempfile::tempdir().unwrap();
    let rules = vec![
        "alert udp any any -> any any (msg:\"new source\"; ip.src; dataset:set,seen,type ipv4; sid:1;)".to_string(),
    ];
    let (mut a, w) = ips_in(&rules, dir.path());
    assert!(w.is_empty(), "{w:?}");
    let (mut b, _) = ips_in(&rules, dir.path());
    let mut st = LocalStore::new();
    // One batch: the second datagram of C finds C already added.
    assert_eq!(
        sids(
            &mut a,
            &mut st,
            &[from(C, b"1"), from(C, b"2"), from([10, 0, 0, 2], b"3")]
        ),
        vec![1, 1]
    );
    // Another instance, another batch: both sources are known.
    assert_eq!(sids(&mut b, &mut st, &[from(C, b"4")]), Vec::<u32>::new());
    assert_eq!(sids(&mut b, &mut st, &[from([10, 0, 0, 3], b"5")]), vec![1]);
    assert_eq!(b.stats().dataset_added, 1);
    assert_eq!(a.stats().dataset_withheld, 1);
    // A fresh store knows nothing.
    assert_eq!(
        sids(&mut a, &mut LocalStore::new(), &[from(C, b"6")]),
        vec![1]
    );
}

#[test]
fn unset_removes_a_loaded_value_once_and_isset_sees_the_change() {
    let dir = tempfile::tempdir().unwrap();
    file(
        dir.path(),
        "agents.lst",
        &format!("{}\n{}\n", b64("old-agent"), b64("other")),
    );
    let rules = [
        // sid 1 tests before sid 2 removes (rule order in one packet).
        "alert udp any any -> any any (msg:\"known\"; content:\"agent\"; dataset:isset,agents; sid:1;)",
        "alert udp any any -> any any (msg:\"removed\"; content:\"agent\"; dataset:unset,agents,type string,load agents.lst; sid:2;)",
    ]
    .map(String::from)
    .to_vec();
    // A dataset needs a sticky buffer (Suricata refuses it on the payload).
    for r in &rules {
        let e = sluice_ips::rules::parse_rule(r, &Default::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported keyword \"dataset outside a sticky buffer\""
        );
    }

    let rules = [
        "alert udp any any -> any any (msg:\"removed\"; ip.src; dataset:unset,hosts,type ipv4,load hosts.csv; sid:2;)",
        "alert udp any any -> any any (msg:\"still known\"; ip.src; dataset:isset,hosts; sid:3;)",
    ]
    .map(String::from)
    .to_vec();
    file(dir.path(), "hosts.csv", "10.0.0.1\n10.0.0.2\n");
    let (mut ips, w) = ips_in(&rules, dir.path());
    assert!(w.is_empty(), "{w:?}");
    let mut st = LocalStore::new();
    assert_eq!(sids(&mut ips, &mut st, &[from(C, b"a")]), vec![2]);
    assert_eq!(sids(&mut ips, &mut st, &[from(C, b"b")]), Vec::<u32>::new());
    assert_eq!(
        sids(&mut ips, &mut st, &[from([10, 0, 0, 2], b"c")]),
        vec![2]
    );
}

#[test]
fn datarep_compares_the_loaded_reputation() {
    let dir = tempfile::tempdir().unwrap();
    file(dir.path(), "rep.lst", "not base64!,90\n");
    // A string set's values are in base64.
    let (_, w) = ips_in(
        &["alert udp any any -> any any (ip.src; datarep:rep,>,50,load rep.lst,type string; sid:1;)".into()],
        dir.path(),
    );
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("rep.lst:1") && w[0].contains("base64"),
        "{w:?}"
    );

    let enc = |b: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(b)
    };
    file(
        dir.path(),
        "rep.lst",
        &format!("{},90\n{},10\n", enc(&C), enc(&[10, 0, 0, 2])),
    );
    let rules = [
        "alert udp any any -> any any (ip.src; datarep:rep,>,50,load rep.lst,type string; sid:1;)",
        "alert udp any any -> any any (ip.src; datarep:rep,<,50; sid:2;)",
        "alert udp any any -> any any (ip.src; datarep:rep,==,90; sid:3;)",
    ]
    .map(String::from)
    .to_vec();
    let (mut ips, w) = ips_in(&rules, dir.path());
    assert!(w.is_empty(), "{w:?}");
    let mut st = LocalStore::new();
    assert_eq!(sids(&mut ips, &mut st, &[from(C, b"a")]), vec![1, 3]);
    assert_eq!(
        sids(&mut ips, &mut st, &[from([10, 0, 0, 2], b"a")]),
        vec![2]
    );
    assert_eq!(
        sids(&mut ips, &mut st, &[from([10, 0, 0, 3], b"a")]),
        Vec::<u32>::new()
    );
}

#[test]
fn sets_that_cannot_be_had_refuse_their_rules_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    file(dir.path(), "a.csv", "10.0.0.1\n");
    let cases: [(&str, &str); 6] = [
        (
            "alert udp any any -> any any (ip.src; dataset:isset,nofile,type ipv4,load missing.csv; sid:1;)",
            "missing.csv",
        ),
        (
            "alert udp any any -> any any (ip.src; dataset:isset,untyped; sid:1;)",
            "dataset untyped not defined",
        ),
        (
            "drop udp any any -> any any (ip.src; dataset:set,s,type ipv4; sid:1;)",
            "on a drop rule",
        ),
        (
            "alert udp any any -> any any (ip.src; dataset:set,s,type ipv4; flowbits:set,x; sid:1;)",
            "flowbits or flowint change",
        ),
        (
            "alert udp any any -> any any (ip.src; dataset:isset,a,type ipv4,load a.csv; sid:1;)\nalert udp any any -> any any (ip.src; dataset:isset,a,type string; sid:2;)",
            "already exists and is of type ipv4",
        ),
        (
            "alert udp any any -> any any (ip.src; dataset:isset,a,type ipv4,load a.csv; sid:1;)\nalert udp any any -> any any (ip.src; dataset:isset,a,type ipv4,load b.csv; sid:2;)",
            "load or save differs",
        ),
    ];
    for (rules, want) in cases {
        let rules: Vec<String> = rules.lines().map(String::from).collect();
        let (cfg, base) = config(&rules, dir.path());
        let got = match build(&cfg, Namespace(3), &base) {
            Ok(ips) => ips
                .warnings()
                .iter()
                .map(|w| w.to_string())
                .collect::<Vec<_>>(),
            Err(e) => vec![e.to_string()],
        };
        assert!(got.iter().any(|w| w.contains(want)), "{rules:?}: {got:?}");
    }
}

#[test]
fn syntax_errors_name_the_value() {
    use sluice_ips::rules::{parse_rule, Vars};
    for bad in [
        "dataset:isset",
        "dataset:check,x,type string",
        "dataset:isset,x,type blob",
        "dataset:isset,x,load a,state b",
        "dataset:isset,x,load",
        "datarep:x,>=,5,type string",
        "datarep:x,>,70000,type string",
        "datarep:x,>,5,type ipv4",
        "datarep:x,>,5,load f",
    ] {
        let r = format!("alert udp any any -> any any (ip.src; {bad}; sid:1;)");
        let e = parse_rule(&r, &Vars::new()).unwrap_err();
        assert!(e.to_string().starts_with("bad data"), "{bad}: {e}");
    }
    let ok = "alert udp any any -> any any (ip.src; dataset:isset,x,type ipv4, memcap 10mb, hashsize 1024; sid:1;)";
    assert!(parse_rule(ok, &Vars::new()).is_ok());
}

mod fuzz {
    use proptest::prelude::*;
    use sluice_ips::dataset::{load_text, SetType};
    use sluice_ips::rules::{parse_rule, Vars};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any keyword value is a rule or a named error, never a panic.
        #[test]
        fn keyword_values_never_panic(v in "[ -~]{0,60}") {
            for kw in ["dataset", "datarep"] {
                let r = format!("alert udp any any -> any any (ip.src; {kw}:{v}; sid:1;)");
                let _ = parse_rule(&r, &Vars::new());
            }
        }

        /// Any file is a set or an error naming a line within it.
        #[test]
        fn set_files_never_panic(text in "[ -~\n]{0,200}") {
            for ty in [SetType::String, SetType::Md5, SetType::Sha256, SetType::Ipv4, SetType::Ip] {
                if let Err((line, _)) = load_text(ty, &text) {
                    prop_assert!(line >= 1 && line <= text.lines().count());
                }
            }
        }
    }
}
