//! `sluiced`: Sluice's host agent (`run`) and one NF instance process
//! (`instance`, which the agent spawns for each instance it runs).

use std::net::{Ipv4Addr, SocketAddrV4};
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
    /// Run the host agent.
    Run {
        /// Host id (unique in the fabric).
        #[arg(long)]
        host_id: u32,
        /// Host name.
        #[arg(long)]
        name: String,
        /// The host's network namespace (data-plane sockets are opened there).
        #[arg(long)]
        netns: String,
        /// Tunnel endpoint address of the host.
        #[arg(long)]
        underlay: Ipv4Addr,
        /// Controller base URL, e.g. http://127.0.0.1:7000.
        #[arg(long)]
        controller: String,
        /// File holding this host's API token (role `host:ID`; `sluice token
        /// create h1 --role host:1`). A file, never a flag: command lines are
        /// visible to every local user.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// API listen address (port 0: any; the address is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Name prefix of instance namespaces and interfaces (at most 9 bytes).
        #[arg(long)]
        prefix: String,
        /// Directory for the saved configuration, chain files and instance logs.
        #[arg(long)]
        run_dir: PathBuf,
        /// Geneve UDP port.
        #[arg(long, default_value_t = sluice_proto::GENEVE_PORT)]
        geneve_port: u16,
        /// An NF instance without a heartbeat for this many milliseconds is
        /// suspected and its traffic moved to the surviving instances.
        #[arg(long, default_value_t = 30)]
        suspect_ms: u64,
        /// Rate-control this host's VMs and NF instances with Seawall: each
        /// port's traffic to each other host gets a rate that follows loss
        /// reports from that host, so VMs share congested paths equally however
        /// many flows they open (docs/ISOLATION.md).
        #[arg(long)]
        seawall: bool,
        /// Seawall: how often rates change (receivers report), milliseconds.
        #[arg(long, default_value_t = 5.0, requires = "seawall")]
        seawall_period_ms: f64,
        /// Seawall: additive increase per period, Mbit/s.
        #[arg(long, default_value_t = 10.0, requires = "seawall")]
        seawall_increase_mbps: f64,
        /// Seawall: multiplicative decrease on loss (0 < d < 1).
        #[arg(long, default_value_t = 0.2, requires = "seawall")]
        seawall_decrease: f64,
        /// Seawall: highest rate (and a new sender's), Mbit/s.
        #[arg(long, default_value_t = 100_000.0, requires = "seawall")]
        seawall_max_mbps: f64,
        /// Seawall: depth of a sender's token bucket, milliseconds at its rate.
        #[arg(long, default_value_t = 2.0, requires = "seawall")]
        seawall_burst_ms: f64,
        /// Seawall: queueing delay on the way to this host that counts as
        /// congestion, milliseconds (0: only loss does).
        #[arg(long, default_value_t = 1.0, requires = "seawall")]
        seawall_queue_delay_ms: f64,
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
    },
}

fn stop_flag() -> Result<Arc<AtomicBool>, std::io::Error> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    Ok(stop)
}

/// The token in `path`: its first line, trimmed.
fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
    let t = text.lines().next().unwrap_or("").trim();
    if t.is_empty() {
        return Err(format!(
            "--token-file {}: the file is empty",
            path.display()
        ));
    }
    Ok(t.to_string())
}

/// A fresh secret for this agent's own API: 256 random bits, hex. Only the
/// controller learns it (in the heartbeats); it is never printed.
fn api_token() -> Result<String, String> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|e| format!("cannot draw the API token: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stop = match stop_flag() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluiced: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = match cli.cmd {
        Cmd::Run {
            host_id,
            name,
            netns,
            underlay,
            controller,
            token_file,
            listen,
            prefix,
            run_dir,
            geneve_port,
            suspect_ms,
            seawall,
            seawall_period_ms,
            seawall_increase_mbps,
            seawall_decrease,
            seawall_max_mbps,
            seawall_burst_ms,
            seawall_queue_delay_ms,
        } => {
            let seawall = seawall.then(|| sluice_seawall::Config {
                period_ns: (seawall_period_ms * 1e6) as u64,
                increase_bps: (seawall_increase_mbps * 1e6) as u64,
                decrease: seawall_decrease,
                max_rate_bps: (seawall_max_mbps * 1e6) as u64,
                burst_ns: (seawall_burst_ms * 1e6) as u64,
                queue_delay_ns: (seawall_queue_delay_ms * 1e6) as u64,
                ..sluice_seawall::Config::default()
            });
            let token = match token_file.as_deref().map(read_token).transpose() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sluiced: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let opts = sluice_agent::AgentOptions {
                host: host_id,
                name,
                netns: Some(netns),
                underlay,
                controller: Some(controller),
                controller_token: token,
                api_token: Some(match api_token() {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("sluiced: {e}");
                        return ExitCode::FAILURE;
                    }
                }),
                listen,
                prefix,
                run_dir: Some(run_dir),
                udp: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, geneve_port),
                instance_exe: None,
                suspect_after: Some(std::time::Duration::from_millis(suspect_ms.max(1))),
                seawall,
            };
            sluice_agent::run(&opts, &stop).map_err(|e| e.to_string())
        }
        Cmd::Instance {
            name,
            netns,
            listen,
            agent,
            chain,
            state,
            eve,
        } => {
            let opts = sluice_instance::InstanceOptions {
                name,
                netns,
                listen,
                agent,
                chain,
                state,
                eve,
            };
            sluice_instance::run(&opts, &stop).map_err(|e| e.to_string())
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluiced: {e}");
            ExitCode::FAILURE
        }
    }
}
