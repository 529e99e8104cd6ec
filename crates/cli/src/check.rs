//! `sluice check -f SPEC`: validate a tenant spec without applying it.

use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;

/// `sluice check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The spec.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
}

/// `sluice check -f SPEC`: parse and validate a tenant spec, print what it holds.
pub fn run(a: &CheckArgs) -> Result<(), CliError> {
    let file = a.file.as_path();
    let text = std::fs::read_to_string(file).map_err(CliError::io(file))?;
    let name = file.display().to_string();
    let spec = sluice_tenant::TenantSpec::parse(&text, &name, Some(&sluice_builtin::registry()))?;
    println!(
        "{name}: tenant `{}` is valid: {} elements, {} chains",
        spec.tenant,
        spec.elements.len(),
        spec.chains.len()
    );
    for c in &spec.chains {
        println!(
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
        );
    }
    Ok(())
}
