//! `sluice diff` and `sluice audit`, and what `apply --dry-run`, `delete` and
//! `diff` share: printing a change plan and asking before a destructive change.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use crate::ctl::{ApplyArgs, ClientArgs};
use crate::error::CliError;
use clap::Args;
use sluice_controller::change::ChangePlan;

/// `sluice diff`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The tenant spec (YAML; `-`: read it from stdin).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice audit`.
#[derive(Args, Debug)]
pub struct AuditArgs {
    /// Only entries of this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Only entries after this sequence number.
    #[arg(long, default_value_t = 0)]
    since: u64,
    /// At most this many (the newest).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    #[command(flatten)]
    client: ClientArgs,
}

/// `sluice diff -f SPEC`: what applying the spec would change — an apply as a
/// dry run that also shows a spec removing everything — exit status 0 whether
/// or not it changes anything.
pub fn diff(a: &DiffArgs) -> Result<(), CliError> {
    crate::ctl::apply(&ApplyArgs {
        file: a.file.clone(),
        dry_run: true,
        force: true,
        if_generation: None,
        client: a.client.clone(),
    })
}

/// `sluice audit`: the controller's log of change requests.
pub fn audit(a: &AuditArgs) -> Result<(), CliError> {
    let entries = a
        .client
        .client()?
        .audit(a.since, a.tenant.as_deref(), a.limit)?;
    let fmt = a.client.format();
    if crate::output::structured(fmt, &entries)? {
        return Ok(());
    }
    // Wide: the tenant each request concerns, after the actor.
    let tenant = |t: &str| {
        if fmt.wide() {
            format!(" {t:<16}")
        } else {
            String::new()
        }
    };
    outln!(
        "{:>6} {:<24} {:<16}{} {:>6}  ACTION",
        "SEQ",
        "TIME (UTC)",
        "ACTOR",
        tenant("TENANT"),
        "STATUS"
    )?;
    for e in entries {
        outln!(
            "{:>6} {:<24} {:<16}{} {:>6}  {}",
            e.seq,
            utc(e.at_ms),
            e.actor,
            tenant(e.tenant.as_deref().unwrap_or("-")),
            e.status,
            e.action
        )?;
        for c in &e.changes {
            outln!("{:>6}   {c}", "")?;
        }
    }
    Ok(())
}

/// Prints what a change does, as `apply --dry-run`, `delete --dry-run` and
/// `diff` show it.
pub fn print_plan(p: &ChangePlan) -> Result<(), CliError> {
    let gen = |g: u64| {
        if g == 0 {
            "none".to_string()
        } else {
            g.to_string()
        }
    };
    outln!(
        "tenant {}: generation {} -> {}",
        p.tenant,
        gen(p.generation_before),
        gen(p.generation_after)
    )?;
    if p.is_empty() {
        outln!("  no change")?;
        return Ok(());
    }
    for l in &p.spec {
        outln!("  {l}")?;
    }
    for i in &p.instances_added {
        outln!("  + instance {i}")?;
    }
    for i in &p.instances_removed {
        outln!("  - instance {i}")?;
    }
    for (h, f) in &p.fib {
        outln!(
            "  host {h}: +{} -{} FIB entries",
            f.added.len(),
            f.removed.len()
        )?;
        for e in &f.added {
            outln!("    + {e}")?;
        }
        for e in &f.removed {
            outln!("    - {e}")?;
        }
    }
    Ok(())
}

/// Asks on the terminal before `what`: the answer must be `name` (or `y`).
/// Without a terminal on stdin it refuses: scripts pass `--yes`.
pub fn confirm(what: &str, name: &str) -> Result<(), CliError> {
    let stdin = std::io::stdin();
    let refused = |tty| CliError::NotConfirmed {
        what: what.to_string(),
        tty,
    };
    if !stdin.is_terminal() {
        return Err(refused(false));
    }
    eprint!("{what}? Type `{name}` (or y) to confirm: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .map_err(|_| refused(true))?;
    let l = line.trim();
    if l == name || l.eq_ignore_ascii_case("y") || l.eq_ignore_ascii_case("yes") {
        Ok(())
    } else {
        Err(refused(true))
    }
}

/// `ms` since the epoch as `YYYY-MM-DD HH:MM:SS.mmm`.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn times_print_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        // 2026-11-26 17:00:38.250 UTC.
        assert_eq!(utc(1_795_712_438_250), "2026-11-26 17:00:38.250");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00.000");
    }
}
