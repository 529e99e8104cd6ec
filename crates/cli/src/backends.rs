//! `sluice drain backend`, `sluice undrain backend` and `sluice get
//! backends` (and the dispatch of `sluice drain host`, in [`crate::hosts`],
//! and `sluice drain instance`, in [`crate::instances`]): the health of the backends behind tenants' load balancers and
//! operators' drains (docs/FUNCTIONS.md, "Backend health and draining").

use std::time::Duration;

use clap::{Args, Subcommand};
use sluice_controller::model::BackendInfo;

use crate::ctl::ClientArgs;
use crate::error::CliError;
use crate::output::{Align, Table};

/// `sluice drain ...`.
#[derive(Args, Debug)]
pub struct DrainArgs {
    #[command(subcommand)]
    what: DrainWhat,
}

#[derive(Subcommand, Debug)]
enum DrainWhat {
    /// A backend of a load balancer: no new connections at once; its
    /// connections continue until the deregistration delay passes, then it
    /// is removed (their packets dropped).
    Backend(DrainBackendArgs),
    /// A host, for maintenance: it takes no new instance, and its instances
    /// whose state is in the store move to other hosts (their connections
    /// continue there). `state: local` instances stay unless `--force`.
    Host(crate::hosts::DrainHostArgs),
    /// An NF instance: no new flows at once; stopped (kept placed, no
    /// process) once its flows no longer need it or the delay passes, until
    /// undrained. The last instance of a middlebox taking new flows needs
    /// `--force`.
    Instance(crate::instances::DrainInstanceArgs),
}

/// `sluice drain backend TENANT MIDDLEBOX ADDR [--delay 30s]`.
#[derive(Args, Debug)]
struct DrainBackendArgs {
    #[command(flatten)]
    target: Target,
    /// The deregistration delay: `30s`, `500ms`, `5m` (default: the
    /// controller's, 30 s).
    #[arg(long, value_parser = parse_delay)]
    delay: Option<Duration>,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice undrain ...`.
#[derive(Args, Debug)]
pub struct UndrainArgs {
    #[command(subcommand)]
    what: UndrainWhat,
}

#[derive(Subcommand, Debug)]
enum UndrainWhat {
    /// A backend of a load balancer: it takes new connections again.
    Backend(UndrainBackendArgs),
    /// A host: it may take new instances again.
    Host(crate::hosts::UndrainHostArgs),
    /// An NF instance: it takes new flows again (started again if stopped).
    Instance(crate::instances::UndrainInstanceArgs),
}

#[derive(Args, Debug)]
struct UndrainBackendArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args, Debug)]
struct Target {
    /// Tenant.
    tenant: String,
    /// The load balancer (an `lb` middlebox of the tenant's spec).
    middlebox: String,
    /// The backend as the load balancer's configuration names it
    /// (`10.10.1.11`, `10.10.1.11:8080`), or an IP for every backend at it.
    addr: String,
}

/// A delay with its unit: `ms`, `s`, `m` (a bare number is seconds).
pub(crate) fn parse_delay(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a delay (e.g. 30s, 500ms, 5m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

/// `sluice drain backend ...`.
pub fn drain(a: &DrainArgs) -> Result<(), CliError> {
    let b = match &a.what {
        DrainWhat::Backend(b) => b,
        DrainWhat::Host(h) => return crate::hosts::drain(h),
        DrainWhat::Instance(i) => return crate::instances::drain(i),
    };
    let c = b.client.client()?;
    let t = &b.target;
    let delay_ms = b.delay.map(|d| d.as_millis().min(u64::MAX as u128) as u64);
    let after = c.drain_backend(&t.tenant, &t.middlebox, &t.addr, delay_ms)?;
    print(&b.client, &after)
}

/// `sluice undrain backend ...`.
pub fn undrain(a: &UndrainArgs) -> Result<(), CliError> {
    let b = match &a.what {
        UndrainWhat::Backend(b) => b,
        UndrainWhat::Host(h) => return crate::hosts::undrain(h),
        UndrainWhat::Instance(i) => return crate::instances::undrain(i),
    };
    let c = b.client.client()?;
    let t = &b.target;
    let after = c.undrain_backend(&t.tenant, &t.middlebox, &t.addr)?;
    print(&b.client, &after)
}

/// `sluice get backends`.
pub fn get(client: &ClientArgs, tenant: Option<&str>) -> Result<(), CliError> {
    let c = client.client()?;
    let v: Vec<BackendInfo> = c
        .backends()?
        .into_iter()
        .filter(|b| tenant.is_none_or(|t| b.tenant == t))
        .collect();
    print(client, &v)
}

/// How long from now Unix time `ms` is (negative: ago), for a person.
fn from_now(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if ms >= now {
        format!("in {:.1} s", (ms - now) as f64 / 1000.0)
    } else {
        format!("{:.1} s ago", (now - ms) as f64 / 1000.0)
    }
}

fn print(client: &ClientArgs, v: &[BackendInfo]) -> Result<(), CliError> {
    let fmt = client.format();
    if crate::output::structured(fmt, &v)? {
        return Ok(());
    }
    let mut t = Table::new(fmt)
        .col("TENANT", Align::Left)
        .col("MIDDLEBOX", Align::Left)
        .col("BACKEND", Align::Left)
        .col("STATE", Align::Left)
        .col("SINCE", Align::Right)
        .col("VM", Align::Left)
        .col("HOST", Align::Right)
        .wide_col("HOST_DOWN", Align::Left)
        .col("DRAIN_ENDS", Align::Right)
        .wide_col("LAST_CHECK", Align::Left);
    for b in v {
        t.row(vec![
            b.tenant.clone(),
            b.middlebox.clone(),
            b.backend.clone(),
            b.state.clone(),
            from_now(b.since_ms),
            b.vm.clone().unwrap_or_else(|| "-".into()),
            b.host.map_or("-".into(), |h| h.to_string()),
            if b.host_down { "yes" } else { "no" }.into(),
            b.drain_until_ms.map_or("-".into(), from_now),
            b.last_check.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    t.print()?;
    Ok(())
}

/// `sluice status`'s backend lines: how many, and each that is not up.
pub fn print_status(v: &[BackendInfo]) -> Result<(), CliError> {
    let not_up: Vec<&BackendInfo> = v.iter().filter(|b| b.state != "up").collect();
    outln!(
        "load-balancer backends: {}, {} up",
        v.len(),
        v.len() - not_up.len()
    )?;
    for b in not_up {
        outln!(
            "  {}/{} {:<22} {}{}",
            b.tenant,
            b.middlebox,
            b.backend,
            b.state.to_uppercase(),
            match (b.host_down, b.host, b.drain_until_ms) {
                (true, Some(h), _) => format!(" (host {h} down)"),
                (_, _, Some(ms)) if b.state == "draining" => format!(" (removed {})", from_now(ms)),
                _ if !b.healthy => format!(
                    " (health checks failing: {})",
                    b.last_check.as_deref().unwrap_or("no result")
                ),
                _ => String::new(),
            }
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_take_units_and_refuse_nonsense() {
        assert_eq!(parse_delay("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_delay("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_delay("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_delay("5h").unwrap_err().contains("unknown unit"));
        assert!(parse_delay("soon").unwrap_err().contains("not a delay"));
        assert!(parse_delay("-3s").is_err());
    }
}
