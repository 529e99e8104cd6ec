//! Stand-alone runner for the reproductions; the `sluice` binary does not mount them, so
//! that it does not link the LP solver (HiGHS).

use clap::Parser;

#[derive(Parser)]
#[command(name = "sluice-sim", about = "Run Sluice's paper reproductions")]
struct Cli {
    #[command(subcommand)]
    cmd: sluice_simulator::cli::SimCommand,
}

fn main() -> std::process::ExitCode {
    match sluice_simulator::cli::run(Cli::parse().cmd) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
