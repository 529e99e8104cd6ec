//! `sluice alerts` and `sluice flows`: what deployed IPS and monitor instances
//! reported, gathered by the controller from every agent.

use std::time::Duration;

use clap::Args;
use serde_json::Value;

use crate::ctl::ClientArgs;
use crate::error::CliError;

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

/// Prints the events of `kind` (`alerts` or `flows`).
pub fn run(kind: &str, a: &EveArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    let mut since = a.since.clone();
    let mut header = !a.client.json();
    loop {
        let events = c.eve(kind, a.tenant.as_deref(), since.as_deref(), a.limit)?;
        for e in &events {
            if a.client.json() {
                println!("{e}");
            } else {
                if header {
                    println!(
                        "{}",
                        if kind == "alerts" {
                            ALERT_HEAD
                        } else {
                            FLOW_HEAD
                        }
                    );
                    header = false;
                }
                println!(
                    "{}",
                    if kind == "alerts" {
                        alert_line(e)
                    } else {
                        flow_line(e)
                    }
                );
            }
        }
        if let Some(ts) = events
            .last()
            .and_then(|e| e.get("timestamp"))
            .and_then(Value::as_str)
        {
            since = Some(ts.to_string());
        }
        if !a.follow {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

const ALERT_HEAD: &str =
    "TIMESTAMP                        TENANT       ACTION   SID       FLOW                                          SIGNATURE";
const FLOW_HEAD: &str =
    "END                              TENANT       PROTO FLOW                                          PKTS>   PKTS<   BYTES>     BYTES<     REASON";

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
