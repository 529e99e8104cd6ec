//! `sluice get containment` and `sluice release HOST`: hosts that peers
//! accuse of ignoring their congestion feedback, the contained ones, and an
//! operator's release (Seawall §4; docs/ISOLATION.md, "Compromised hosts").
//! `sluice revoke HOST`: an operator's containment of a host whose
//! credentials it no longer trusts (docs/SECURITY.md, "Revoking a host").

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

/// `sluice revoke HOST`.
#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// The host's id.
    host: u32,
    /// Revoke without asking (needed when not on a terminal).
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice revoke HOST`: the host's certificates and tokens stop working
/// and it is contained (no host's peer; its instances placed elsewhere).
pub fn revoke(a: &RevokeArgs) -> Result<(), CliError> {
    if !a.yes {
        crate::change::confirm(
            &format!(
                "revoke host {} (refuse its certificates, delete its tokens, contain it)",
                a.host
            ),
            &a.host.to_string(),
        )?;
    }
    let c = a.client.client()?;
    let v = c.revoke_host(a.host)?;
    if crate::output::structured(a.client.format(), &v)? {
        return Ok(());
    }
    let tokens = v
        .get("tokens_deleted")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    outln!(
        "host {} revoked: its certificates are refused, {tokens} token(s) deleted, and it is {}",
        a.host,
        if v.get("contained").and_then(serde_json::Value::as_bool) == Some(true) {
            "now contained (no host's peer; its instances placed elsewhere)"
        } else {
            "still contained"
        }
    )?;
    outln!(
        "to take it back: `sluice token create NAME --role host:{}` for its agent, then `sluice release {}`",
        a.host,
        a.host
    )?;
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
