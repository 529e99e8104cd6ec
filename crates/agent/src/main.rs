//! `sluiced`: Sluice's host agent (`run`), the agent under a supervisor that
//! restarts it (`supervise`), and one NF instance process (`instance`, which
//! the agent spawns for each instance it runs).

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sluiced", about = "Sluice host agent", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the host agent (settings from flags and/or `--config FILE`).
    Run(Box<sluice_agent::settings::RunArgs>),
    /// Run the host agent and start it again whenever it dies (what systemd's
    /// Restart=always does in a deployment): `sluiced supervise --config FILE`
    /// runs `sluiced run --config FILE`.
    Supervise {
        /// The arguments of `sluiced run`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Run one NF instance (what the agent spawns).
    Instance {
        /// Instance name (`tenant/middlebox/k`).
        #[arg(long)]
        name: String,
        /// Namespace its data socket lives in.
        #[arg(long)]
        netns: Option<String>,
        /// Address to receive Geneve on (instance side of the link, port 6081).
        #[arg(long)]
        listen: SocketAddrV4,
        /// Where to send forwarded packets (agent side of the link, port 6081).
        #[arg(long)]
        agent: SocketAddrV4,
        /// Chain YAML file.
        #[arg(long)]
        chain: PathBuf,
        /// State backend: local, redis://HOST:PORT or redis-cluster://HOST:PORT,...
        #[arg(long, default_value = "local")]
        state: String,
        /// EVE log for the functions' alerts and flow records (rotated by size).
        #[arg(long)]
        eve: Option<PathBuf>,
        /// JSON file of its load balancer's backends that are not up, written
        /// by the agent; read again whenever it changes.
        #[arg(long)]
        backends: Option<PathBuf>,
    },
}

fn stop_flag() -> Result<Arc<AtomicBool>, std::io::Error> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    Ok(stop)
}

/// A fresh secret for this agent's own API: 256 random bits, hex. Only the
/// controller learns it (in the heartbeats); it is never printed.
fn api_token() -> Result<String, String> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|e| format!("cannot draw the API token: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// `sluiced run`: flags over the file over the defaults, checked against this
/// machine (underlay interface, MTU), then the agent until a signal.
fn run(args: &sluice_agent::settings::RunArgs, stop: &AtomicBool) -> Result<(), String> {
    use sluice_agent::settings;
    let file = settings::load(args).map_err(|e| e.to_string())?;
    let s = settings::resolve(args, &file, args.config.as_deref()).map_err(|e| e.to_string())?;
    if args.check_config {
        println!("settings OK:\n{s:#?}");
        return Ok(());
    }
    let opts = settings::prepare(&s, api_token()?).map_err(|e| e.to_string())?;
    sluice_agent::run(&opts, stop).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before anything can go wrong: every daemon's events, and its last
    // error, go through the same subscriber (RUST_LOG, SLUICE_LOG_FORMAT;
    // children inherit both).
    sluice_logging::init();
    // An instance process's events (its last error too) name the instance.
    let span = match &cli.cmd {
        Cmd::Instance { name, .. } => sluice_instance::span(name),
        _ => tracing::Span::none(),
    };
    let _entered = span.enter();
    let stop = match stop_flag() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot install signal handlers");
            return ExitCode::FAILURE;
        }
    };
    let r = match cli.cmd {
        Cmd::Run(args) => run(&args, &stop),
        Cmd::Supervise { args } => std::env::current_exe()
            .map_err(|e| format!("cannot find this program's path: {e}"))
            .and_then(|exe| {
                sluice_agent::supervise::supervise(&exe, &args, &stop).map_err(|e| e.to_string())
            }),
        Cmd::Instance {
            name,
            netns,
            listen,
            agent,
            chain,
            state,
            eve,
            backends,
        } => {
            let opts = sluice_instance::InstanceOptions {
                name,
                netns,
                listen,
                agent,
                chain,
                state,
                eve,
                backends,
            };
            sluice_instance::run(&opts, &stop).map_err(|e| e.to_string())
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "stopped by an error");
            ExitCode::FAILURE
        }
    }
}
