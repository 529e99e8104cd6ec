//! `sluice token create | list | delete`: the controller's API tokens
//! (operator tokens only). A new token's secret is printed once, alone on
//! stdout, so it can be captured: `sluice token create ci --role read-only > ci.token`.

use clap::{Args, Subcommand};

use crate::ctl::ClientArgs;
use crate::error::CliError;

/// `sluice token`.
#[derive(Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    what: TokenCmd,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum TokenCmd {
    /// Create a token; prints its secret (shown this once).
    Create {
        /// Its name (letters, digits, `.`, `_`, `-`).
        name: String,
        /// `operator`, `read-only`, `tenant:NAME` or `host:ID` (a one-time
        /// bootstrap token: spent once it got host ID its certificate; make
        /// another to re-join a host that lost it).
        #[arg(long)]
        role: String,
    },
    /// Tokens: names, roles, when created (never secrets).
    List,
    /// Delete a token: requests carrying it are refused at once.
    Delete {
        /// Its name.
        name: String,
    },
}

/// Runs `sluice token ...`.
pub fn run(a: &TokenArgs) -> Result<(), CliError> {
    let c = a.client.client()?;
    match &a.what {
        TokenCmd::Create { name, role } => {
            let t = c.create_token(name, role)?;
            if !crate::output::structured(a.client.format(), &t)? {
                eprintln!(
                    "created token `{}` (role {}); its secret, shown this once:",
                    t.name, t.role
                );
                outln!("{}", t.token)?;
            }
        }
        TokenCmd::List => {
            let v = c.tokens()?;
            if crate::output::structured(a.client.format(), &v)? {
                return Ok(());
            }
            outln!("{:<24} {:<24} CREATED_MS", "NAME", "ROLE")?;
            for t in v {
                outln!("{:<24} {:<24} {}", t.name, t.role, t.created_ms)?;
            }
        }
        TokenCmd::Delete { name } => {
            let t = c.delete_token(name)?;
            outln!("deleted token `{}` (role {})", t.name, t.role)?;
        }
    }
    Ok(())
}
