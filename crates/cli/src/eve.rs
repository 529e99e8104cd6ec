//! `sluice alerts` and `sluice flows`: what deployed IPS and monitor instances
//! reported, gathered by the controller from every agent.

use std::time::Duration;

use clap::Args;
use serde_json::Value;

use sluice_controller::client::ClientError;

use crate::ctl::ClientArgs;
use crate::error::CliError;
use crate::output::Format;

/// `sluice alerts` / `sluice flows`.
#[derive(Args, Debug)]
pub struct EveArgs {
    /// Only this tenant's.
    #[arg(long)]
    tenant: Option<String>,
    /// Only events later than this EVE timestamp (`2026-11-26T17:00:00`).
    #[arg(long)]
    since: Option<String>,
    /// At most this many, the newest.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Keep printing new events as they arrive (every second) until interrupted.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// Prints the events of `kind` (`alerts` or `flows`). `-o json` prints one
/// EVE record per line as the IPS wrote it (so `--follow` streams valid JSON
/// lines); `-o yaml` one YAML document per record; `-o wide` adds the
/// alert's category, severity and flow id, or the flow's application
/// protocol, state, age and flow id. `--follow` reads the controller's
/// event stream (reconnecting if it restarts), or polls every second a
/// controller that has none.
pub fn run(kind: &str, a: &EveArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let mut p = Printer {
        fmt: a.client.format(),
        header: matches!(a.client.format(), Format::Table | Format::Wide),
        alerts: kind == "alerts",
        since: a.since.clone(),
    };
    if a.follow {
        match follow(&c, kind, a, &mut p) {
            // A controller without event streams: poll it.
            Err(CliError::Controller(ClientError::Api {
                status: 400,
                message,
            })) if message.contains("follow") => {}
            r => return r,
        }
    }
    loop {
        let events = c.eve(kind, a.tenant.as_deref(), p.since.as_deref(), a.limit)?;
        for e in &events {
            p.print(e)?;
        }
        if !a.follow {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Follows the controller's event stream until interrupted: after a lost
/// connection (the controller restarting), again from the last event seen.
fn follow(
    c: &sluice_controller::client::Client,
    kind: &str,
    a: &EveArgs,
    p: &mut Printer,
) -> Result<(), CliError> {
    let mut connected = false;
    loop {
        let mut failed = None;
        let since = p.since.clone();
        let r = c.eve_follow(
            kind,
            a.tenant.as_deref(),
            since.as_deref(),
            a.limit,
            |e| match p.print(&e) {
                Ok(()) => true,
                Err(err) => {
                    failed = Some(err);
                    false
                }
            },
        );
        if let Some(e) = failed {
            return Err(e);
        }
        match r {
            Ok(()) => connected = true,
            // Unreachable from the start, or refused: the user must know.
            Err(e @ ClientError::Api { .. }) => return Err(e.into()),
            Err(e) if !connected => return Err(e.into()),
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Prints events in the chosen format, remembering the last one's time.
struct Printer {
    fmt: Format,
    header: bool,
    alerts: bool,
    since: Option<String>,
}

impl Printer {
    fn print(&mut self, e: &Value) -> Result<(), CliError> {
        let fmt = self.fmt;
        match fmt {
            Format::Json => outln!("{e}")?,
            Format::Yaml => {
                let doc = crate::output::render(fmt, e)?.unwrap_or_default();
                crate::output::text(&format!("---\n{doc}"))?;
            }
            Format::Table | Format::Wide => {
                if self.header {
                    let (head, wide) = if self.alerts {
                        (ALERT_HEAD, ALERT_WIDE_HEAD)
                    } else {
                        (FLOW_HEAD, FLOW_WIDE_HEAD)
                    };
                    outln!("{head}{}", if fmt.wide() { wide } else { "" })?;
                    self.header = false;
                }
                let (line, wide) = if self.alerts {
                    (alert_line(e), alert_wide(e))
                } else {
                    (flow_line(e), flow_wide(e))
                };
                if fmt.wide() {
                    outln!("{line}{wide}")?;
                } else {
                    outln!("{line}")?;
                }
            }
        }
        if let Some(ts) = e.get("timestamp").and_then(Value::as_str) {
            self.since = Some(ts.to_string());
        }
        Ok(())
    }
}

const ALERT_HEAD: &str =
    "TIMESTAMP                        TENANT       ACTION   SID       FLOW                                          SIGNATURE";
const FLOW_HEAD: &str =
    "END                              TENANT       PROTO FLOW                                          PKTS>   PKTS<   BYTES>     BYTES<     REASON";

// Wide columns go after the last one, whose width varies (the signature, the
// reason): each starts with ` | ` so that they stay apart from it.
const ALERT_WIDE_HEAD: &str = " | CATEGORY                          SEV  FLOW_ID";
const FLOW_WIDE_HEAD: &str = " | APP_PROTO  STATE        AGE  FLOW_ID";

fn alert_wide(e: &Value) -> String {
    format!(
        " | {:<33} {:<4} {}",
        s(e, &["alert", "category"]),
        n(e, &["alert", "severity"]),
        n(e, &["flow_id"])
    )
}

fn flow_wide(e: &Value) -> String {
    format!(
        " | {:<10} {:<12} {:<4} {}",
        s(e, &["app_proto"]),
        s(e, &["flow", "state"]),
        n(e, &["flow", "age"]),
        n(e, &["flow_id"])
    )
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_str().unwrap_or("-")
}

fn n(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_u64().unwrap_or(0)
}

fn endpoints(e: &Value) -> String {
    let port = |k: &str| e.get(k).and_then(Value::as_u64).map(|p| format!(":{p}"));
    format!(
        "{}{} -> {}{}",
        s(e, &["src_ip"]),
        port("src_port").unwrap_or_default(),
        s(e, &["dest_ip"]),
        port("dest_port").unwrap_or_default()
    )
}

fn alert_line(e: &Value) -> String {
    format!(
        "{:<32} {:<12} {:<8} {:<9} {:<45} {}",
        s(e, &["timestamp"]),
        s(e, &["tenant"]),
        s(e, &["alert", "action"]),
        n(e, &["alert", "signature_id"]),
        endpoints(e),
        s(e, &["alert", "signature"])
    )
}

fn flow_line(e: &Value) -> String {
    format!(
        "{:<32} {:<12} {:<5} {:<45} {:<7} {:<7} {:<10} {:<10} {}",
        s(e, &["flow", "end"]),
        s(e, &["tenant"]),
        s(e, &["proto"]),
        endpoints(e),
        n(e, &["flow", "pkts_toserver"]),
        n(e, &["flow", "pkts_toclient"]),
        n(e, &["flow", "bytes_toserver"]),
        n(e, &["flow", "bytes_toclient"]),
        s(e, &["flow", "reason"])
    )
}
