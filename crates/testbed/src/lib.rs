//! The local testbed's building blocks: network namespaces (hosts, VMs), veth pairs
//! and bridges, created with iproute2 and removed when their handle is dropped, so
//! a failing test cleans up after itself. Names carry the process id and a counter,
//! so concurrent tests and runs never collide.
//!
//! Code that must run inside a namespace (opening a socket there, say) runs on a
//! thread that joined it with `setns(2)` ([`Netns::run`]); a socket keeps the
//! namespace it was created in, so it can then be used from any thread.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), as CI and the testbed have.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub mod elasticity;
pub mod experiments;
pub mod isolation;
pub mod lab;
pub mod ovs;
pub mod scaling;
pub mod scenario;
pub mod svg;
pub mod vm;

/// Why a testbed operation failed; the message carries the command and its stderr.
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
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A short unique name (`sl<pid><n><suffix>`, at most 15 bytes as interface names
/// require).
pub fn unique_name(suffix: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut s = format!("sl{}{}{}", std::process::id() % 100_000, n, suffix);
    s.truncate(15);
    s
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

/// A network namespace, deleted (with every interface in it) on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace with a unique name ending in `tag`, with loopback up.
    pub fn new(tag: &str) -> Result<Netns, TestbedError> {
        let name = unique_name(tag);
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip ARGS...` inside the namespace.
    pub fn ip(&self, args: &[&str]) -> Result<(), TestbedError> {
        let mut a = vec!["-n", &self.name];
        a.extend_from_slice(args);
        ip(&a)
    }

    /// Runs a command inside the namespace and returns its stdout.
    pub fn exec(&self, cmd: &[&str]) -> Result<String, TestbedError> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
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

    /// Runs `f` on a thread that joined this namespace, and returns its result.
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, TestbedError> {
        let path = format!("/run/netns/{}", self.name);
        let file = File::open(&path).map_err(|e| TestbedError::Sys {
            what: format!("open {path}"),
            err: e,
        })?;
        let h = std::thread::spawn(move || {
            // SAFETY: setns on a valid namespace fd affects only this thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if r != 0 {
                return Err(TestbedError::Sys {
                    what: "setns".into(),
                    err: std::io::Error::last_os_error(),
                });
            }
            Ok(f())
        });
        h.join().map_err(|_| TestbedError::Sys {
            what: "namespace thread".into(),
            err: std::io::Error::other("panicked"),
        })?
    }

    /// Adds `addr/len` to `dev` and brings it up.
    pub fn addr(&self, dev: &str, cidr: &str) -> Result<(), TestbedError> {
        self.ip(&["addr", "add", cidr, "dev", dev])?;
        self.ip(&["link", "set", dev, "up"])
    }
}

/// Runs `f` on a thread that joined the namespace called `name` (one this handle
/// does not own, such as a lab's), and returns its result.
pub fn run_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TestbedError> {
    let ns = std::mem::ManuallyDrop::new(Netns {
        name: name.to_string(),
    });
    ns.run(f)
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Creates a veth pair with one end (`a`) in `ns_a` and the other (`b`) in `ns_b`,
/// both up. Deleting either namespace removes the pair.
pub fn veth(ns_a: &Netns, a: &str, ns_b: &Netns, b: &str) -> Result<(), TestbedError> {
    let (ta, tb) = (unique_name("a"), unique_name("b"));
    ip(&["link", "add", &ta, "type", "veth", "peer", "name", &tb])?;
    let r = (|| {
        ip(&["link", "set", &ta, "netns", ns_a.name()])?;
        ip(&["link", "set", &tb, "netns", ns_b.name()])?;
        ns_a.ip(&["link", "set", &ta, "name", a])?;
        ns_b.ip(&["link", "set", &tb, "name", b])?;
        ns_a.ip(&["link", "set", a, "up"])?;
        ns_b.ip(&["link", "set", b, "up"])
    })();
    if r.is_err() {
        // Whatever is left in the root namespace must not outlive the test.
        let _ = ip(&["link", "del", &ta]);
        let _ = ip(&["link", "del", &tb]);
    }
    r
}

/// Creates a bridge `name` in `ns`, up, and attaches `ports` (interfaces in `ns`).
pub fn bridge(ns: &Netns, name: &str, ports: &[&str]) -> Result<(), TestbedError> {
    ns.ip(&["link", "add", name, "type", "bridge"])?;
    ns.ip(&["link", "set", name, "up"])?;
    for p in ports {
        ns.ip(&["link", "set", p, "master", name])?;
    }
    Ok(())
}
