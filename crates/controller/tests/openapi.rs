//! docs/openapi.yaml is valid YAML, an OpenAPI 3 document, and describes every
//! route the server implements (and no route it does not).

use sluice_controller::{OPENAPI_YAML, ROUTES};
use yaml_serde::Value;

#[test]
fn openapi_describes_every_route() {
    let doc: Value = yaml_serde::from_str(OPENAPI_YAML).expect("docs/openapi.yaml parses");
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
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
    }
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
