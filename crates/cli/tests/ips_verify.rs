//! `sluice ips verify` over test directories in suricata-verify's format,
//! with captures built here: a test whose checks hold passes, one whose
//! count is wrong fails with suricata-verify's message, the test's
//! arguments reach the IPS (`stream.midstream`), and tests outside what
//! Sluice claims are skipped with their reason.

use std::path::Path;

use sluice_wire::build;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;
use common::sluice;

const C: [u8; 4] = [10, 1, 0, 5];
const S: [u8; 4] = [10, 2, 0, 7];

/// A connection to port 80 sending `payload`, from its handshake or (when
/// `handshake` is false) picked up mid-stream.
fn capture(path: &Path, payload: &[u8], handshake: bool) {
    let (cs, ss) = (1_000u32, 50_000u32);
    let mut frames = Vec::new();
    if handshake {
        frames.push(build::tcp_v4(C, S, 40000, 80, cs, 0, SYN, b""));
        frames.push(build::tcp_v4(S, C, 80, 40000, ss, cs + 1, SYN | ACK, b""));
        frames.push(build::tcp_v4(C, S, 40000, 80, cs + 1, ss + 1, ACK, b""));
    }
    frames.push(build::tcp_v4(
        C,
        S,
        40000,
        80,
        cs + 1,
        ss + 1,
        ACK | PSH,
        payload,
    ));
    let ack = cs + 1 + payload.len() as u32;
    frames.push(build::tcp_v4(S, C, 80, 40000, ss + 1, ack, ACK, b""));
    let f = std::fs::File::create(path).unwrap();
    let mut w = sluice_pcap::PcapWriter::new(std::io::BufWriter::new(f)).unwrap();
    for (i, fr) in frames.iter().enumerate() {
        w.write(1_000_000_000 + i as u64 * 1_000, fr).unwrap();
    }
    w.finish().unwrap();
}

const RULES: &str = "alert tcp any any -> any 80 (msg:\"evil\"; flow:to_server,established; content:\"EVIL\"; sid:1; rev:1;)
alert tcp any any -> any 80 (msg:\"good\"; content:\"GOOD\"; sid:2; rev:1;)
";

fn test_dir(root: &Path, name: &str, yaml: &str, rules: &str, handshake: bool) {
    let d = root.join(name);
    std::fs::create_dir_all(&d).unwrap();
    capture(&d.join("input.pcap"), b"hello EVIL world", handshake);
    std::fs::write(d.join("test.rules"), rules).unwrap();
    std::fs::write(d.join("test.yaml"), yaml).unwrap();
}

const ONE_ALERT: &str = "requires:
  min-version: 6.0.0
checks:
  - filter:
      count: 1
      match:
        event_type: alert
        alert.signature_id: 1
  - filter:
      count: 0
      match:
        event_type: alert
        alert.signature_id: 2
";

#[test]
fn suricata_verify_tests_pass_fail_and_skip() {
    let tmp = tempfile::tempdir().unwrap();
    let tests = tmp.path().join("tests");
    test_dir(&tests, "alert-content", ONE_ALERT, RULES, true);
    test_dir(
        &tests,
        "alert-wrong-count",
        &ONE_ALERT.replace("count: 1", "count: 2"),
        RULES,
        true,
    );
    // Picked up mid-stream: with `stream.midstream` the flow is established
    // and the rule alerts; without it nothing is delivered.
    test_dir(
        &tests,
        "midstream-on",
        &format!("args:\n  - --set stream.midstream=true\n{ONE_ALERT}"),
        RULES,
        false,
    );
    test_dir(
        &tests,
        "midstream-off",
        &ONE_ALERT.replace("count: 1", "count: 0"),
        RULES,
        false,
    );
    test_dir(
        &tests,
        "needs-lua",
        ONE_ALERT,
        "alert tcp any any -> any any (msg:\"l\"; lua:x.lua; sid:1;)\n",
        true,
    );
    test_dir(
        &tests,
        "http-log",
        "checks:\n  - filter:\n      count: 1\n      match:\n        event_type: http\n",
        RULES,
        true,
    );
    // Grouped one level down, as suricata-verify groups some tests; its
    // HTTP check is listed, not evaluated.
    test_dir(
        &tests.join("group"),
        "mixed",
        &format!(
            "{ONE_ALERT}  - filter:\n      count: 1\n      match:\n        event_type: http\n"
        ),
        RULES,
        true,
    );
    test_dir(
        &tests,
        "future",
        &ONE_ALERT.replace("6.0.0", "99"),
        RULES,
        true,
    );
    // A drop rule: an IDS (suricata-verify's default) alerts and blocks
    // nothing; a test named `ips` runs inline and blocks.
    let action = |a: &str| {
        format!("checks:\n  - filter:\n      count: 1\n      match:\n        event_type: alert\n        alert.action: {a}\n")
    };
    let drop_rule = "drop tcp any any -> any 80 (msg:\"evil\"; content:\"EVIL\"; sid:1;)\n";
    test_dir(&tests, "drop-ids", &action("allowed"), drop_rule, true);
    test_dir(&tests, "drop-ips", &action("blocked"), drop_rule, true);
    let out = tmp.path().join("out");
    let (code, text, err) = sluice(&[
        "ips",
        "verify",
        tests.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "one test fails: {text}\n{err}");
    assert!(
        err.contains("1 of the 7 verification tests that ran failed"),
        "{text}\n{err}"
    );
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1).map(|n| n.trim_end_matches(':')) == Some(name))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .to_string()
    };
    assert_eq!(line("alert-content"), "PASS alert-content");
    assert_eq!(line("drop-ids"), "PASS drop-ids");
    assert_eq!(line("drop-ips"), "PASS drop-ips");
    assert_eq!(
        line("alert-wrong-count"),
        "FAIL alert-wrong-count: expected 2 matches; got 1 for {alert.signature_id: 1, event_type: alert}"
    );
    assert_eq!(line("midstream-on"), "PASS midstream-on");
    assert_eq!(line("midstream-off"), "PASS midstream-off");
    assert!(
        line("needs-lua").starts_with("SKIP needs-lua: rules that do not load"),
        "{text}"
    );
    assert_eq!(
        line("http-log"),
        "SKIP http-log: checks only 1 http records"
    );
    assert_eq!(line("mixed"), "PASS mixed (not evaluated: 1 http records)");
    assert_eq!(line("future"), "SKIP future: requires at least Suricata 99");
    assert!(
        text.contains(
            "passed 6, failed 1, skipped 3 (of 10 tests); 85.7% of the tests that ran passed"
        ),
        "{text}"
    );
    // What ran is kept: the chain and the EVE records of each test.
    let eve = std::fs::read_to_string(out.join("alert-content/eve.json")).unwrap();
    assert_eq!(eve.lines().count(), 1, "{eve}");
    assert!(out.join("midstream-on/chain.yaml").is_file());

    // JSON, and one test chosen by name.
    let (code, json, err) = sluice(&[
        "ips",
        "verify",
        tests.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--filter",
        "midstream",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["passed"], 2, "{v}");
    assert_eq!(v["tests"].as_array().unwrap().len(), 2, "{v}");
}

/// The same tests with every flow's state in Redis: the same outcomes,
/// although the tests' captures share their flows' addresses and ports.
#[test]
fn the_same_tests_pass_with_state_in_the_store() {
    let Ok(srv) = sluice_state_redis::server::RedisServer::start(&[]) else {
        panic!("redis-server must be installed (scripts/test.sh installs it)");
    };
    let tmp = tempfile::tempdir().unwrap();
    let tests = tmp.path().join("tests");
    test_dir(&tests, "alert-content", ONE_ALERT, RULES, true);
    test_dir(&tests, "alert-again", ONE_ALERT, RULES, true);
    test_dir(
        &tests,
        "midstream-on",
        &format!("args:\n  - --set stream.midstream=true\n{ONE_ALERT}"),
        RULES,
        false,
    );
    let (code, text, err) = sluice(&[
        "ips",
        "verify",
        tests.to_str().unwrap(),
        "--out",
        tmp.path().join("out").to_str().unwrap(),
        "--state",
        &srv.url(),
    ]);
    assert_eq!(code, 0, "{text}\n{err}");
    assert!(text.contains("passed 3, failed 0, skipped 0"), "{text}");
}

#[test]
fn a_path_that_is_not_a_directory_is_an_error_naming_it() {
    let (code, _, err) = sluice(&["ips", "verify", "/nonexistent/sv-tests"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("/nonexistent/sv-tests") && err.contains("not a directory"),
        "{err}"
    );
}
