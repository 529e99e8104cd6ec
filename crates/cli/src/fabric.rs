//! `sluice get fabric` and `sluice rotate fabric-key`: the keys sealing
//! datagrams between hosts and their rotation (docs/SECURITY.md, "The
//! fabric").

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::ctl::ClientArgs;
use crate::error::CliError;

/// `sluice rotate`.
#[derive(Args, Debug)]
pub struct RotateArgs {
    #[command(subcommand)]
    what: RotateWhat,
}

#[derive(Subcommand, Debug)]
enum RotateWhat {
    /// Rotate the fabric's keys: hosts first accept the new key, and seal
    /// with it once every live host holds it (the controller finishes the
    /// rotation on its own).
    FabricKey {
        /// Rotate without asking (needed when not on a terminal).
        #[arg(long)]
        yes: bool,
        /// Wait until the rotation has finished, at most this long (e.g.
        /// `30s`); without it the command returns once it has started.
        #[arg(long, value_name = "DURATION", value_parser = crate::backends::parse_delay)]
        wait: Option<Duration>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `sluice rotate ...`.
pub fn rotate(a: &RotateArgs) -> Result<(), CliError> {
    let RotateWhat::FabricKey { yes, wait, client } = &a.what;
    if !yes {
        crate::change::confirm("rotate the fabric's keys", "fabric")?;
    }
    let c = client.client()?;
    let mut v = c.rotate_fabric()?;
    if let Some(limit) = wait {
        let deadline = Instant::now() + *limit;
        while v.get("rotating").and_then(Value::as_bool) == Some(true) {
            if Instant::now() >= deadline {
                return Err(CliError::NotFinished(format!(
                    "the rotation has not finished after {limit:?}: waiting for host(s) {} to \
                     run the configuration with the new key (`sluice get hosts` shows which \
                     are alive and in sync)",
                    hosts(&v)
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
            v = c.fabric()?;
        }
    }
    if crate::output::structured(client.format(), &v)? {
        return Ok(());
    }
    print_status(&v)
}

/// `sluice get fabric`.
pub fn get(a: &ClientArgs) -> Result<(), CliError> {
    let v = a.client()?.fabric()?;
    if crate::output::structured(a.format(), &v)? {
        return Ok(());
    }
    print_status(&v)
}

fn hosts(v: &Value) -> String {
    let ids: Vec<String> = v
        .get("waiting_for")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|h| h.to_string()).collect())
        .unwrap_or_default();
    if ids.is_empty() {
        "none".into()
    } else {
        ids.join(", ")
    }
}

fn print_status(v: &Value) -> Result<(), CliError> {
    if v.get("sealed").and_then(Value::as_bool) != Some(true) {
        outln!("fabric: not sealed (fabric_auth = false)")?;
        return Ok(());
    }
    let keys: Vec<String> = v
        .get("keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|k| k.to_string()).collect())
        .unwrap_or_default();
    let sending = v.get("sending").map(Value::to_string).unwrap_or_default();
    if v.get("rotating").and_then(Value::as_bool) == Some(true) {
        outln!(
            "fabric: sealed with key {sending}; hosts accept keys {}; rotating, waiting for \
             host(s) {}",
            keys.join(", "),
            hosts(v)
        )?;
    } else {
        outln!("fabric: sealed with key {sending}")?;
    }
    Ok(())
}
