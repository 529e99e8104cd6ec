//! `sluice drain instance TENANT MIDDLEBOX INSTANCE [--delay 30s] [--force]`
//! and `sluice undrain instance ...`: an operator's drain of one NF instance
//! (docs/RELIABILITY.md, "Draining an NF instance").

use std::time::Duration;

use clap::Args;
use sluice_controller::model::InstanceDrainInfo;

use crate::ctl::ClientArgs;
use crate::error::CliError;

/// `sluice drain instance ...`.
#[derive(Args, Debug)]
pub struct DrainInstanceArgs {
    #[command(flatten)]
    target: Target,
    /// The longest it drains before it is stopped, even with flows still
    /// pinned to it: `30s`, `500ms`, `5m` (default: the controller's, 30 s).
    #[arg(long, value_parser = crate::backends::parse_delay)]
    delay: Option<Duration>,
    /// Drain it even if it is the last instance of its middlebox taking new
    /// flows.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice undrain instance ...`.
#[derive(Args, Debug)]
pub struct UndrainInstanceArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args, Debug)]
struct Target {
    /// Tenant.
    tenant: String,
    /// Middlebox.
    middlebox: String,
    /// The instance: its index (`1` for `acme/fw/1`) or its name.
    #[arg(value_parser = parse_index)]
    instance: u32,
}

/// An instance's index, or its name `tenant/middlebox/k`.
fn parse_index(s: &str) -> Result<u32, String> {
    let k = s.rsplit('/').next().unwrap_or(s);
    k.parse().map_err(|_| {
        format!("{s:?} is not an instance (give its index, 1 for acme/fw/1, or its name)")
    })
}

/// `sluice drain instance ...`.
pub fn drain(a: &DrainInstanceArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let t = &a.target;
    let delay_ms = a.delay.map(|d| d.as_millis().min(u64::MAX as u128) as u64);
    let v = c.drain_instance(&t.tenant, &t.middlebox, t.instance, delay_ms, a.force)?;
    print(&a.client, &v)
}

/// `sluice undrain instance ...`.
pub fn undrain(a: &UndrainInstanceArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let t = &a.target;
    let v = c.undrain_instance(&t.tenant, &t.middlebox, t.instance)?;
    print(&a.client, &v)
}

fn print(client: &ClientArgs, v: &InstanceDrainInfo) -> Result<(), CliError> {
    if crate::output::structured(client.format(), v)? {
        return Ok(());
    }
    let what = match v.state.as_str() {
        "draining" if v.state_mode == "local" => {
            "draining: no new flows; its pinned flows continue, and it is stopped once none is \
             left or its delay ends"
        }
        "draining" => {
            "draining: no new flows; its flows move to the other instances with their state, \
             and it is stopped once every host runs without it"
        }
        "stopped" => "stopped: placed, no process, until `sluice undrain instance`",
        _ => "serving: it takes new flows",
    };
    let unchanged = if v.changed { "" } else { " (unchanged)" };
    outln!("{} on host {}: {what}{unchanged}", v.name, v.host)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_named_by_index_or_name() {
        assert_eq!(parse_index("1"), Ok(1));
        assert_eq!(parse_index("acme/fw/12"), Ok(12));
        assert!(parse_index("fw").unwrap_err().contains("not an instance"));
        assert!(parse_index("acme/fw/").is_err());
    }
}
