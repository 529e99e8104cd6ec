//! The two shapes of a tenant spec document, and the one conversion between
//! them.
//!
//! * `sluice.dev/v1` (current): `apiVersion: sluice.dev/v1`, `kind: Tenant`,
//!   `metadata: {name, labels}`, `spec: {elements, chains}`;
//! * flat (the first format, still accepted): `tenant`, `elements`, `chains` at
//!   the top, no `apiVersion`.
//!
//! [`crate::TenantSpec::parse`] converts either to the flat shape with
//! [`convert`] and validates that.

use std::collections::BTreeMap;

use yaml_serde::{Mapping, Value};

use crate::{check_keys, Ctx, SpecError};

/// The `apiVersion` of the current format.
pub const API_VERSION: &str = "sluice.dev/v1";

/// Every `apiVersion` a spec may have.
pub const API_VERSIONS: &[&str] = &[API_VERSION];

/// The `kind` of a tenant spec.
pub const KIND: &str = "Tenant";

/// A spec document's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `tenant`, `elements`, `chains` at the top (no `apiVersion`).
    Flat,
    /// `apiVersion: sluice.dev/v1`, `kind`, `metadata`, `spec`.
    V1,
}

/// The shape of `doc`: versioned when it has any of the versioned format's
/// top-level keys.
pub fn format_of(doc: &Value) -> Format {
    let versioned = ["apiVersion", "kind", "metadata", "spec"]
        .iter()
        .any(|k| doc.get(k).is_some());
    if versioned {
        Format::V1
    } else {
        Format::Flat
    }
}

/// `doc` (either shape) in the shape `to`. From flat to v1 the tenant becomes
/// `metadata.name` and the rest `spec`; from v1 to flat `metadata.name` becomes
/// `tenant` and the labels, which the flat shape cannot hold, are dropped (read
/// them with [`labels`]). A v1 document's `apiVersion`, `kind` and keys are
/// checked: an unknown `apiVersion` or `kind` is an error naming the value and
/// the supported ones. What the elements and chains hold is checked later, by
/// the parse.
pub fn convert(doc: &Value, to: Format, source_name: &str) -> Result<Value, SpecError> {
    let c = Ctx {
        source: source_name,
    };
    let m = doc
        .as_mapping()
        .ok_or_else(|| c.err("(document)", "expected a mapping"))?;
    let flat = match format_of(doc) {
        Format::Flat => m.clone(),
        Format::V1 => v1_to_flat(&c, m)?,
    };
    Ok(match to {
        Format::Flat => Value::Mapping(flat),
        Format::V1 => flat_to_v1(flat, labels(doc, source_name)?),
    })
}

fn v1_to_flat(c: &Ctx<'_>, m: &Mapping) -> Result<Mapping, SpecError> {
    match m.get("apiVersion") {
        None => {
            return Err(c.err(
                "apiVersion",
                format!("missing (supported: {})", API_VERSIONS.join(", ")),
            ))
        }
        Some(Value::String(v)) if API_VERSIONS.contains(&v.as_str()) => {}
        Some(v) => {
            return Err(c.err(
                "apiVersion",
                format!(
                    "`{}` is not supported (supported: {})",
                    scalar(v),
                    API_VERSIONS.join(", ")
                ),
            ))
        }
    }
    match m.get("kind") {
        Some(Value::String(k)) if k == KIND => {}
        None => return Err(c.err("kind", format!("missing (supported: {KIND})"))),
        Some(k) => {
            return Err(c.err(
                "kind",
                format!("`{}` is not supported (supported: {KIND})", scalar(k)),
            ))
        }
    }
    check_keys(
        c,
        "(document)",
        m,
        &["apiVersion", "kind", "metadata", "spec"],
    )?;
    let meta = m
        .get("metadata")
        .and_then(Value::as_mapping)
        .ok_or_else(|| c.err("metadata", "expected a mapping with the tenant's name"))?;
    check_keys(c, "metadata", meta, &["name", "labels"])?;
    let name = meta
        .get("name")
        .ok_or_else(|| c.err("metadata.name", "missing"))?;
    let spec = m
        .get("spec")
        .and_then(Value::as_mapping)
        .ok_or_else(|| c.err("spec", "expected a mapping of elements and chains"))?;
    check_keys(c, "spec", spec, &["elements", "chains", "consolidate"])?;
    let mut flat = Mapping::new();
    flat.insert("tenant".into(), name.clone());
    for (k, v) in spec {
        flat.insert(k.clone(), v.clone());
    }
    Ok(flat)
}

fn flat_to_v1(mut flat: Mapping, labels: BTreeMap<String, String>) -> Value {
    let mut meta = Mapping::new();
    if let Some(name) = flat.remove("tenant") {
        meta.insert("name".into(), name);
    }
    if !labels.is_empty() {
        let l: Mapping = labels
            .into_iter()
            .map(|(k, v)| (Value::String(k), Value::String(v)))
            .collect();
        meta.insert("labels".into(), Value::Mapping(l));
    }
    let mut doc = Mapping::new();
    doc.insert("apiVersion".into(), API_VERSION.into());
    doc.insert("kind".into(), KIND.into());
    doc.insert("metadata".into(), Value::Mapping(meta));
    doc.insert("spec".into(), Value::Mapping(flat));
    Value::Mapping(doc)
}

/// The labels of a v1 document (`metadata.labels`: string keys and values);
/// none for a flat one.
pub fn labels(doc: &Value, source_name: &str) -> Result<BTreeMap<String, String>, SpecError> {
    let c = Ctx {
        source: source_name,
    };
    let Some(l) = doc.get("metadata").and_then(|m| m.get("labels")) else {
        return Ok(BTreeMap::new());
    };
    let l = l
        .as_mapping()
        .ok_or_else(|| c.err("metadata.labels", "expected a mapping of name to value"))?;
    l.iter()
        .map(|(k, v)| match (k, v) {
            (Value::String(k), Value::String(v)) => Ok((k.clone(), v.clone())),
            (Value::String(k), _) => Err(c.err(
                format!("metadata.labels.{k}"),
                "expected a string (quote it)",
            )),
            _ => Err(c.err("metadata.labels", "label names must be strings")),
        })
        .collect()
}

/// A scalar as written (for messages).
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => yaml_serde::to_string(v)
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Value {
        yaml_serde::from_str(s).unwrap()
    }

    const FLAT: &str = "
tenant: acme
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
chains: []
";

    const V1: &str = "
apiVersion: sluice.dev/v1
kind: Tenant
metadata:
  name: acme
spec:
  elements:
    a: { type: service, vms: { a1: 10.0.0.1 } }
  chains: []
";

    #[test]
    fn flat_converts_to_v1_and_back() {
        let (flat, v1) = (yaml(FLAT), yaml(V1));
        assert_eq!(format_of(&flat), Format::Flat);
        assert_eq!(format_of(&v1), Format::V1);
        assert_eq!(convert(&flat, Format::V1, "t").unwrap(), v1);
        assert_eq!(convert(&v1, Format::Flat, "t").unwrap(), flat);
        // Converting to the shape a document has changes nothing.
        assert_eq!(convert(&flat, Format::Flat, "t").unwrap(), flat);
        assert_eq!(convert(&v1, Format::V1, "t").unwrap(), v1);
    }

    #[test]
    fn labels_stay_in_v1_and_cannot_go_flat() {
        let doc = yaml(&V1.replace(
            "  name: acme\n",
            "  name: acme\n  labels: { team: edge, tier: \"1\" }\n",
        ));
        let l = labels(&doc, "t").unwrap();
        assert_eq!(l.get("team").map(String::as_str), Some("edge"));
        assert_eq!(convert(&doc, Format::V1, "t").unwrap(), doc);
        assert_eq!(convert(&doc, Format::Flat, "t").unwrap(), yaml(FLAT));
        let bad = yaml(&V1.replace("  name: acme\n", "  name: acme\n  labels: { tier: 1 }\n"));
        let e = labels(&bad, "t").unwrap_err();
        assert_eq!(e.path, "metadata.labels.tier");
    }

    #[test]
    fn unknown_versions_and_kinds_are_named_with_the_supported_ones() {
        let e = convert(
            &yaml(&V1.replace("sluice.dev/v1", "sluice.dev/v2")),
            Format::Flat,
            "t.yaml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.yaml: apiVersion: `sluice.dev/v2` is not supported (supported: sluice.dev/v1)"
        );
        let e = convert(
            &yaml(&V1.replace("Tenant", "Chain")),
            Format::Flat,
            "t.yaml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.yaml: kind: `Chain` is not supported (supported: Tenant)"
        );
        let e = convert(
            &yaml(&V1.replace("apiVersion: sluice.dev/v1\n", "")),
            Format::Flat,
            "t",
        )
        .unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.msg.as_str()),
            ("apiVersion", "missing (supported: sluice.dev/v1)")
        );
        // The name belongs in metadata, not in spec.
        let e = convert(
            &yaml(&V1.replace("  elements:", "  tenant: acme\n  elements:")),
            Format::Flat,
            "t",
        )
        .unwrap_err();
        assert_eq!(e.path, "spec.tenant");
        let e = convert(
            &yaml(&V1.replace("  name: acme\n", "  nom: acme\n")),
            Format::Flat,
            "t",
        )
        .unwrap_err();
        assert_eq!(e.path, "metadata.nom");
    }
}
