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
