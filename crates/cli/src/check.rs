//! `sluice check -f SPEC`: validate a tenant spec without applying it.

use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;

/// `sluice check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The spec (`-`: read it from stdin).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
}

/// `sluice check -f SPEC`: parse and validate a tenant spec, print what it holds.
pub fn run(a: &CheckArgs) -> Result<(), CliError> {
    let (file, text) = crate::ctl::read_spec(&a.file)?;
    let name = file.display().to_string();
    let spec = sluice_tenant::TenantSpec::parse(&text, &name, Some(&sluice_builtin::registry()))?;
    outln!(
        "{name}: tenant `{}` is valid: {} elements, {} chains",
        spec.tenant,
        spec.elements.len(),
        spec.chains.len()
    )?;
    for c in &spec.chains {
        outln!(
            "  chain {:<16} {}{}{}",
            c.name,
            c.path.join(" -> "),
            if c.bidirectional {
                " (bidirectional)"
            } else {
                ""
            },
            if c.mirror.is_empty() {
                String::new()
            } else {
                format!(", mirrored to {}", c.mirror.join(", "))
            }
        )?;
    }
    Ok(())
}

/// `sluice convert`.
#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The spec (`-`: read it from stdin).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// The shape to write: `v1` (`apiVersion: sluice.dev/v1`, `kind`,
    /// `metadata`, `spec`) or `flat` (the earlier `tenant:` format; labels
    /// are dropped).
    #[arg(long, default_value = "v1", value_parser = ["v1", "flat"])]
    pub to: String,
}

/// `sluice convert -f SPEC [--to v1|flat]`: print the spec in the other
/// document format (docs/TENANTS.md, "Document format"), after checking that
/// the result parses. Comments are not carried over.
pub fn convert(a: &ConvertArgs) -> Result<(), CliError> {
    use sluice_tenant::format::{convert, Format};
    use sluice_tenant::{SpecError, TenantSpec};
    let (file, text) = crate::ctl::read_spec(&a.file)?;
    let name = file.display().to_string();
    let err = |msg: String| SpecError {
        source_name: name.clone(),
        path: "(document)".into(),
        msg,
    };
    let doc: yaml_serde::Value = yaml_serde::from_str(&text).map_err(|e| err(e.to_string()))?;
    let to = if a.to == "flat" {
        Format::Flat
    } else {
        Format::V1
    };
    let out = convert(&doc, to, &name)?;
    let yaml = yaml_serde::to_string(&out).map_err(|e| err(e.to_string()))?;
    // What it writes must mean the same spec (but for the labels the flat
    // format cannot hold).
    let before = TenantSpec::parse(&text, &name, None)?;
    let mut after = TenantSpec::parse(&yaml, &name, None)?;
    if to == Format::Flat {
        after.labels.clone_from(&before.labels);
    }
    if before != after {
        return Err(err(
            "the converted spec differs from the original (please report this)".into(),
        )
        .into());
    }
    crate::output::text(&yaml)?;
    Ok(())
}
