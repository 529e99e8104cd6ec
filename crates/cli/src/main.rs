//! `sluice`: the command-line entry point.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

// First: its `outln!` is used by the modules below.
#[macro_use]
mod output;
mod backends;
mod bench;
mod block;
mod change;
mod check;
mod config;
mod containment;
mod controller_config;
mod ctl;
mod demo;
mod error;
mod eve;
mod experiment;
mod fabric;
mod hosts;
mod instances;
mod ips;
mod ips_verify;
mod run;
mod testbed;
mod tokens;

use error::CliError;

/// Sluice runs network-function chains: firewall, NAT, load balancer, IPS and flow
/// monitor, with their per-flow state behind a store API.
#[derive(Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Process a pcap/pcapng trace through a chain offline.
    Run(run::RunArgs),
    /// Generate the sample chain and trace, run them, and print the summary.
    Demo(demo::DemoArgs),
    /// Run benchmarks (results are ratios to a baseline measured in the same run).
    Bench {
        #[command(subcommand)]
        which: bench::BenchCmd,
    },
    /// Validate a tenant specification (YAML) without applying it.
    Check(check::CheckArgs),
    /// Rewrite a tenant specification in the versioned (`apiVersion`) or the
    /// earlier flat format.
    Convert(check::ConvertArgs),
    /// Write the sample trace (and its chain and rule files) without running it.
    Sample(demo::SampleArgs),
    /// Run the controller (REST API, desired state in SQLite) until SIGINT/SIGTERM.
    Controller(Box<ctl::ControllerArgs>),
    /// Apply a tenant specification through the controller.
    Apply(ctl::ApplyArgs),
    /// Show what applying a tenant specification would change (a dry run).
    Diff(change::DiffArgs),
    /// Alerts of deployed IPS instances (EVE), gathered from every agent.
    Alerts(eve::EveArgs),
    /// Flow records of deployed monitor instances (EVE), gathered from every agent.
    Flows(eve::EveArgs),
    /// The controller's log of change requests: who, what, when, what changed.
    Audit(change::AuditArgs),
    /// Show what the controller holds: tenants, hosts, VMs, instances, chains, FIBs.
    Get(ctl::GetArgs),
    /// Delete a tenant (or a VM registration) through the controller.
    Delete(ctl::DeleteArgs),
    /// Hosts alive and in sync, tenants, NF instances alive.
    ///
    /// Exit status: 0 when every host is alive and every NF instance runs; 3
    /// when the deployment is degraded (a host down, an NF instance not
    /// running or not reported), after printing as usual; 1 when the
    /// controller cannot be asked.
    Status(ctl::StatusArgs),
    /// Scale a middlebox of a tenant to N instances through the controller.
    Scale(ctl::ScaleArgs),
    /// Block traffic from a source (a VM of the tenant, or any prefix) to
    /// one of the tenant's VMs: dropped at the sending host, and again at the
    /// receiving host.
    Block(block::BlockArgs),
    /// Remove a block (`sluice get blocks` lists them): the traffic flows again.
    Unblock(block::UnblockArgs),
    /// Release a host contained for ignoring congestion feedback (`sluice
    /// get containment` lists accused and contained hosts).
    Release(containment::ReleaseArgs),
    /// Revoke a host's credentials (its certificates are refused, its tokens
    /// deleted) and contain it: for a host that is lost or compromised.
    Revoke(containment::RevokeArgs),
    /// Rotate keys: `fabric-key`, the keys sealing datagrams between hosts.
    Rotate(fabric::RotateArgs),
    /// Drain a load balancer's backend, a host or an NF instance: no new
    /// connections or flows; existing ones continue until a delay passes.
    Drain(backends::DrainArgs),
    /// End a drain (`sluice get backends`, `get hosts` and `get instances`
    /// show what is drained).
    Undrain(backends::UndrainArgs),
    /// Failovers, rejoins, drains and scaling decisions the controller logged.
    Events(ctl::EventsArgs),
    /// Report an application metric sample of a chain (feeds its scaler).
    Metric(ctl::MetricArgs),
    /// Manage the controller's API tokens (operator tokens only).
    Token(tokens::TokenArgs),
    /// The CLI's contexts (controller and token): view, use-context.
    Config(config::ConfigArgs),
    /// IPS rule sets: `check` counts the rules the IPS loads and why it skips
    /// the others.
    Ips {
        #[command(subcommand)]
        what: ips::IpsCmd,
    },
    /// Experiments on a testbed (needs root): `failover` is StatelessNF Fig. 4.7,
    /// `elasticity` Fig. 4.8.
    Experiment {
        #[command(subcommand)]
        what: experiment::ExperimentCmd,
    },
    /// A whole deployment on this machine: hosts and VMs as network namespaces,
    /// Redis, the controller and one agent per host (needs root).
    Testbed {
        #[command(subcommand)]
        what: testbed::TestbedCmd,
    },
    /// Print a shell completion script: `source <(sluice completion bash)`,
    /// or save it where the shell loads completions from.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Writes `shell`'s completion script for the whole command line to `out`.
fn completion(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut Cli::command(), "sluice", out);
}

fn main() -> ExitCode {
    let result: Result<(), CliError> = match Cli::parse().cmd {
        Cmd::Run(a) => run::main(&a).map_err(CliError::from),
        Cmd::Demo(a) => demo::demo(&a.out, a.json).map_err(CliError::from),
        Cmd::Sample(a) => demo::write_sample(&a.out)
            .map(|_| ())
            .map_err(CliError::from),
        Cmd::Bench { which } => bench::run(which),
        Cmd::Check(a) => check::run(&a),
        Cmd::Convert(a) => check::convert(&a),
        Cmd::Controller(a) => ctl::controller(&a),
        Cmd::Apply(a) => ctl::apply(&a),
        Cmd::Get(a) => ctl::get(&a),
        Cmd::Diff(a) => change::diff(&a),
        Cmd::Audit(a) => change::audit(&a),
        Cmd::Alerts(a) => eve::run("alerts", &a),
        Cmd::Flows(a) => eve::run("flows", &a),
        Cmd::Delete(a) => ctl::delete(&a),
        Cmd::Status(a) => ctl::status(&a),
        Cmd::Scale(a) => ctl::scale(&a),
        Cmd::Block(a) => block::block(&a),
        Cmd::Unblock(a) => block::unblock(&a),
        Cmd::Release(a) => containment::release(&a),
        Cmd::Revoke(a) => containment::revoke(&a),
        Cmd::Rotate(a) => fabric::rotate(&a),
        Cmd::Drain(a) => backends::drain(&a),
        Cmd::Undrain(a) => backends::undrain(&a),
        Cmd::Events(a) => ctl::events(&a),
        Cmd::Metric(a) => ctl::metric(&a),
        Cmd::Token(a) => tokens::run(&a),
        Cmd::Config(a) => config::run(&a),
        Cmd::Ips { what } => ips::run(what),
        Cmd::Experiment { what } => experiment::run(what),
        Cmd::Testbed { what } => testbed::run(what),
        Cmd::Completion { shell } => {
            let mut buf = Vec::new();
            completion(shell, &mut buf);
            output::text(&String::from_utf8_lossy(&buf)).map_err(CliError::from)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away: it had what it wanted.
        Err(e) if e.stdout_closed() => ExitCode::SUCCESS,
        Err(e @ CliError::Degraded { .. }) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_name_the_subcommands_for_every_shell() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut buf = Vec::new();
            completion(shell, &mut buf);
            let text = String::from_utf8(buf).unwrap();
            for sub in ["status", "apply", "testbed", "completion"] {
                assert!(text.contains(sub), "{shell}: no `{sub}`");
            }
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
