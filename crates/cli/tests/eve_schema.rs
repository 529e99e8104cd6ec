//! Sluice's EVE output against Suricata's own JSON schema for EVE
//! (`etc/schema.json` of OISF/suricata, kept in `../shared/data/suricata/`;
//! GPL reference data, read in place rather than copied into the repository).
//! The schema forbids unknown top-level members, so a field Sluice invents or
//! misnames fails here. Validated with Python's `jsonschema` (which
//! `scripts/check-openapi.sh` installs with openapi-spec-validator).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::sluice;

fn note(line: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-notes");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("eve-schema.txt"), format!("{line}\n"));
    eprintln!("{line}");
}

/// Lines of `eve` that the schema refuses, with the reasons (None: the
/// validator could not run).
fn invalid_lines(schema: &Path, eve: &Path) -> Option<String> {
    const CHECK: &str = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
v = jsonschema.validators.validator_for(schema)(schema)
n = 0
for i, line in enumerate(open(sys.argv[2])):
    e = json.loads(line)
    for err in v.iter_errors(e):
        print(f"line {i + 1} ({e.get('event_type')}): {list(err.path)}: {err.message[:200]}")
    n += 1
print(f"checked {n}", file=sys.stderr)
"#;
    let out = Command::new("python3")
        .args(["-c", CHECK])
        .arg(schema)
        .arg(eve)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn alerts_and_flow_records_validate_against_suricatas_eve_schema() {
    let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/suricata/eve-schema.json");
    if !schema.exists() {
        note("EVE schema: ../shared/data/suricata/eve-schema.json is absent, not validated");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = sluice(&["demo", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let eve = dir.path().join("eve.json");
    let text = std::fs::read_to_string(&eve).unwrap();
    for kind in ["\"event_type\":\"alert\"", "\"event_type\":\"flow\""] {
        assert!(text.contains(kind), "the demo writes {kind}");
    }
    let Some(bad) = invalid_lines(&schema, &eve) else {
        note("EVE schema: python3 with jsonschema is not available, not validated");
        return;
    };
    assert!(
        bad.is_empty(),
        "EVE lines Suricata's schema refuses:\n{bad}"
    );

    // The check can fail: a misnamed member and a flow_id as a string are refused.
    let broken = dir.path().join("broken.json");
    let first = text.lines().next().unwrap();
    let wrong = first.replacen("\"flow_id\":", "\"flow_id\":\"x\",\"flowid\":", 1);
    std::fs::write(&broken, format!("{wrong}\n")).unwrap();
    let bad = invalid_lines(&schema, &broken).unwrap();
    assert!(bad.contains("flowid") && bad.contains("flow_id"), "{bad}");
}
