//! docs/openapi.yaml is valid YAML, a valid OpenAPI 3.1 document (checked by
//! `openapi-spec-validator` where Python has it), and describes every route
//! the server implements (and no route it does not), the paging of every list
//! and the problem answer of every operation.

use std::path::Path;
use std::process::Command;

use sluice_controller::resources::page;
use sluice_controller::{OPENAPI_YAML, ROUTES};
use yaml_serde::Value;

/// Leaves a line for scripts/test.sh's summary of what could not be checked.
fn note(line: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-notes");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        dir.join("openapi.txt"),
        format!("openapi_is_valid_openapi_3_1: {line}\n"),
    );
}

/// The same check as scripts/check-openapi.sh, skipped (with a note) where
/// python3 lacks the validator.
#[test]
fn openapi_is_valid_openapi_3_1() {
    let has = Command::new("python3")
        .args(["-c", "import openapi_spec_validator"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        eprintln!(
            "skipped: python3 has no openapi_spec_validator (scripts/check-openapi.sh installs it)"
        );
        note("skipped (no python3 module openapi_spec_validator)");
        return;
    }
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.yaml");
    let out = Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&doc)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "docs/openapi.yaml is not valid OpenAPI:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn openapi_describes_every_route() {
    let doc: Value = yaml_serde::from_str(OPENAPI_YAML).expect("docs/openapi.yaml parses");
    assert_eq!(doc["openapi"].as_str(), Some("3.1.0"));
    let paths = doc["paths"].as_mapping().expect("paths");
    for (method, path) in ROUTES {
        let item = paths
            .get(*path)
            .unwrap_or_else(|| panic!("docs/openapi.yaml lacks path {path}"));
        let op = &item[method.to_ascii_lowercase().as_str()];
        assert!(op.is_mapping(), "docs/openapi.yaml lacks {method} {path}");
        assert!(
            op["responses"].is_mapping(),
            "{method} {path} has no responses"
        );
        assert_eq!(
            op["responses"]["default"]["$ref"].as_str(),
            Some("#/components/responses/Error"),
            "{method} {path} does not say its errors are problems"
        );
        if page::is_list(method, path) {
            let params: Vec<&str> = op["parameters"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|p| p["$ref"].as_str())
                .collect();
            for want in [
                "#/components/parameters/Limit",
                "#/components/parameters/After",
            ] {
                assert!(params.contains(&want), "{method} {path} lacks {want}");
            }
            assert!(
                op["responses"]["200"]["headers"]["Link"].is_mapping(),
                "{method} {path} does not document its Link header"
            );
        }
    }
    let problem = &doc["components"]["responses"]["Error"]["content"]["application/problem+json"];
    assert!(
        problem.is_mapping(),
        "errors are not application/problem+json"
    );
    for (p, item) in paths {
        let p = p.as_str().unwrap();
        for (m, _) in item.as_mapping().unwrap() {
            let m = m.as_str().unwrap();
            if m == "parameters" {
                continue;
            }
            assert!(
                ROUTES
                    .iter()
                    .any(|(rm, rp)| *rp == p && rm.eq_ignore_ascii_case(m)),
                "docs/openapi.yaml documents {m} {p}, which the server does not implement"
            );
        }
    }
    // Every $ref resolves.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Mapping(m) => {
                for (k, x) in m {
                    if k.as_str() == Some("$ref") {
                        out.push(x.as_str().unwrap_or_default().to_string());
                    }
                    refs(x, out);
                }
            }
            Value::Sequence(s) => s.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    for r in all {
        let mut at = &doc;
        for part in r.trim_start_matches("#/").split('/') {
            at = &at[part];
        }
        assert!(!at.is_null(), "unresolved $ref {r}");
    }
}
