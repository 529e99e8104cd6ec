//! `sluice get containment` and `sluice release HOST`: hosts that peers
//! accuse of ignoring their congestion feedback, the contained ones, and an
//! operator's release (Seawall §4; docs/ISOLATION.md, "Compromised hosts").

use clap::Args;

use crate::ctl::ClientArgs;
use crate::error::CliError;
use crate::output::{Align, Table};

/// `sluice release HOST`.
#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The contained host's id.
    host: u32,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice release HOST`: the host is a peer again; the accusations made so
/// far no longer count.
pub fn release(a: &ReleaseArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let released = c.release_host(a.host)?;
    if released {
        outln!(
            "host {} released: a peer again; earlier accusations no longer count",
            a.host
        )?;
    } else {
        outln!(
            "host {} was not contained (its accusations were reset)",
            a.host
        )?;
    }
    Ok(())
}

/// `sluice get containment`.
pub fn get(a: &ClientArgs) -> Result<(), CliError> {
    let c = a.client()?;
    let info = c.containment()?;
    if crate::output::structured(a.format(), &info)? {
        return Ok(());
    }
    let contained: Vec<String> = info.contained.iter().map(u32::to_string).collect();
    outln!(
        "contained hosts: {} (a host is contained once {} hosts accuse it)",
        if contained.is_empty() {
            "none".to_string()
        } else {
            contained.join(", ")
        },
        info.threshold
    )?;
    let mut t = Table::new(a.format())
        .col("HOST", Align::Right)
        .col("BY", Align::Right)
        .col("RATE_MBPS", Align::Right)
        .col("ALLOWED_MBPS", Align::Right)
        .wide_col("PERIODS", Align::Right)
        .col("AGE_S", Align::Right)
        .col("COUNTS", Align::Left);
    for x in info.accusations {
        t.row(vec![
            x.host.to_string(),
            x.by.to_string(),
            format!("{:.1}", x.rate_bps as f64 / 1e6),
            format!("{:.1}", x.allowance_bps as f64 / 1e6),
            x.congested_periods.to_string(),
            format!("{:.1}", x.age_ms as f64 / 1e3),
            if x.counts { "yes" } else { "no" }.to_string(),
        ]);
    }
    t.print()?;
    Ok(())
}
