//! `sluice ips check`: rules loaded and skipped by reason.

mod common;

use common::sluice;

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../functions/ips/tests/data/et-open-sample.rules"
);

#[test]
fn check_counts_rules_by_reason() {
    let (code, out, err) = sluice(&["ips", "check", SAMPLE]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("files 1  rules 10  loaded 9 (90.0%)  skipped 1 (10.0%)\n"),
        "{out}"
    );
    let reason = "keyword ftpbounce";
    assert!(
        out.lines()
            .any(|l| l.ends_with(reason) && l.trim_start().starts_with("1 ")),
        "{reason}: {out}"
    );
    let (code, out, _) = sluice(&["ips", "check", "--json", SAMPLE]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["total"], 10);
    assert_eq!(v["loaded"], 9);
    assert_eq!(v["skipped"], 1);
    assert_eq!(v["by_reason"].as_array().unwrap().len(), 1);
    // The search engine is named, and `SLUICE_IPS_MPM=hashed` (inherited by
    // the command) turns Vectorscan off.
    let search = v["search"].as_str().unwrap();
    assert!(search == "vectorscan" || search == "hashed", "{search}");
    if std::env::var("SLUICE_IPS_MPM").is_ok_and(|m| m == "hashed") {
        assert_eq!(search, "hashed");
    }
    // The preset variables can be overridden.
    let (code, out, _) = sluice(&["ips", "check", "--var", "HOME_NET=[10.1.0.0/16]", SAMPLE]);
    assert_eq!(code, 0);
    assert!(out.contains("loaded 9"), "{out}");
}

#[test]
fn a_file_without_rules_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("garbage.rules");
    std::fs::write(&f, "hello world\nthis is ( not a rule ;)\n").unwrap();
    let (code, _, err) = sluice(&["ips", "check", SAMPLE, f.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("garbage.rules: no rule parses"), "{err}");
    let (code, _, err) = sluice(&["ips", "check", "/nonexistent.rules"]);
    assert_ne!(code, 0);
    assert!(err.contains("/nonexistent.rules"), "{err}");
}
