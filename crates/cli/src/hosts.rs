//! `sluice drain host ID [--force]` and `sluice undrain host ID`: an
//! operator's drain of a host for maintenance (docs/RELIABILITY.md, "Draining
//! a host").

use clap::Args;

use crate::ctl::ClientArgs;
use crate::error::CliError;

/// `sluice drain host ID [--force]`.
#[derive(Args, Debug)]
pub struct DrainHostArgs {
    /// The host's id.
    host: u32,
    /// Also move `state: local` instances (their connections are lost), and
    /// drain even if some instance finds no room elsewhere (it is left
    /// unplaced).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice undrain host ID`.
#[derive(Args, Debug)]
pub struct UndrainHostArgs {
    /// The host's id.
    host: u32,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice drain host ...`: prints what moved where and what stayed.
pub fn drain(a: &DrainHostArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let v = c.drain_host(a.host, a.force)?;
    if crate::output::structured(a.client.format(), &v)? {
        return Ok(());
    }
    outln!(
        "host {} drained: it takes no new instance; {} instance(s) moved",
        v.host,
        v.moved.len()
    )?;
    for (i, to) in &v.moved {
        outln!("  {i} -> host {to}")?;
    }
    for i in &v.kept {
        outln!(
            "  {i} stays (state: local; moving it would lose its connections: scale its \
             middlebox in, or drain with --force)"
        )?;
    }
    for u in &v.unplaced {
        outln!("  not placed: {u}")?;
    }
    Ok(())
}

/// `sluice undrain host ...`.
pub fn undrain(a: &UndrainHostArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    if c.undrain_host(a.host)? {
        outln!("host {} undrained: it may take instances again", a.host)?;
    } else {
        outln!("host {} was not drained", a.host)?;
    }
    Ok(())
}
