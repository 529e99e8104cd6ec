//! The local testbed's building blocks: network namespaces (hosts, VMs), veth pairs
//! and bridges, removed when their handle is dropped, so a failing test cleans up
//! after itself. Names carry the process id and a counter, so concurrent tests
//! and runs never collide.
//!
//! The namespaces, links and sysctls themselves are [`sluice_netns`]'s (set up
//! over netlink, re-exported here); what this crate adds is the lab around them.
//! [`ip`] and [`NetnsExt`] remain for what the lab builds with iproute2 and
//! other tools directly (tunnel devices, `ethtool` settings, reading a
//! namespace's sysfs).
//!
//! Code that must run inside a namespace (opening a socket there, say) runs on a
//! thread that joined it with `setns(2)` ([`Netns::run`]); a socket keeps the
//! namespace it was created in, so it can then be used from any thread.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), as CI and the testbed have.

use std::process::Command;

pub mod chaos;
pub mod containment;
pub mod elasticity;
pub mod experiments;
pub mod isolation;
pub mod lab;
pub mod ovs;
pub mod placement;
pub mod scaling;
pub mod scenario;
pub mod svg;
pub mod vm;

pub use sluice_netns::{bridge, unique_name, veth, Netns, NetnsError};

/// Why a testbed operation failed; the message carries the command and its stderr,
/// or the namespace, link and operation.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// An `ip` command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A system call failed.
    #[error("{what}: {err}")]
    Sys {
        /// What was attempted.
        what: String,
        /// The OS error.
        err: std::io::Error,
    },
    /// Setting up a namespace, link, address or sysctl failed.
    #[error(transparent)]
    Netns(#[from] NetnsError),
}

/// Runs `ip ARGS...`, failing with its stderr.
pub fn ip(args: &[&str]) -> Result<(), TestbedError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| TestbedError::Sys {
            what: "run ip".into(),
            err: e,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestbedError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Commands run in a [`Netns`], for what the testbed does with tools rather
/// than through [`sluice_netns`].
pub trait NetnsExt {
    /// Runs `ip ARGS...` inside the namespace.
    fn ip(&self, args: &[&str]) -> Result<(), TestbedError>;
    /// Runs a command inside the namespace (`ip netns exec`, which also shows
    /// it the namespace's own `/sys`) and returns its stdout.
    fn exec(&self, cmd: &[&str]) -> Result<String, TestbedError>;
}

impl NetnsExt for Netns {
    fn ip(&self, args: &[&str]) -> Result<(), TestbedError> {
        let mut a = vec!["-n", self.name()];
        a.extend_from_slice(args);
        ip(&a)
    }

    fn exec(&self, cmd: &[&str]) -> Result<String, TestbedError> {
        let out = Command::new("ip")
            .args(["netns", "exec", self.name()])
            .args(cmd)
            .output()
            .map_err(|e| TestbedError::Sys {
                what: format!("run {cmd:?}"),
                err: e,
            })?;
        if !out.status.success() {
            return Err(TestbedError::Command {
                cmd: cmd.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Runs `f` on a thread that joined the namespace called `name` (one no handle
/// here owns, such as a lab's), and returns its result.
pub fn run_in<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, TestbedError> {
    Ok(sluice_netns::in_netns(name, f)?)
}
