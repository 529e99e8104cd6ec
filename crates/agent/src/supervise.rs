//! `sluiced supervise`: runs the agent (`sluiced run` with the same arguments)
//! and starts it again whenever it dies, as systemd's `Restart=always` does in
//! a deployment (packaging/systemd/sluice-agent.service). The testbed runs its
//! agents this way, so a killed agent heals as it would on a real host.
//!
//! A restarted agent runs its saved configuration at once and adopts the
//! instance processes its previous life left running (crates/agent/src/
//! instances.rs): the data plane's gap is the agent's own restart, not an
//! instance start as well.
//!
//! The supervisor is a child subreaper (`PR_SET_CHILD_SUBREAPER`): when the
//! agent dies, its instance processes become the supervisor's children rather
//! than init's, and the supervisor reaps those that exit (any child but the
//! agent). Otherwise an adopted instance that exited would stay a zombie
//! until init got to it, and the agent would have to tell it from a live one.
//!
//! When to start again is [`Restarts`], a pure function of how the agent
//! ended and how long it ran: at once after a long life, then with a delay
//! doubling from [`FIRST_DELAY`] to [`MAX_DELAY`] while it keeps dying young, so
//! an agent that cannot start (a bad configuration file) does not spin. An
//! agent that exits with status 0 stopped because it was asked to, and is not
//! started again. SIGTERM or SIGINT to the supervisor is passed on to the
//! agent; the supervisor exits when the agent has.

use std::ffi::OsString;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The delay before the second start of an agent that keeps dying young.
pub const FIRST_DELAY: Duration = Duration::from_millis(250);
/// The longest delay between starts.
pub const MAX_DELAY: Duration = Duration::from_secs(8);
/// An agent that ran this long is started again at once, and the delay
/// starts over.
pub const HEALTHY_RUN: Duration = Duration::from_secs(30);
/// How long a stopping agent gets before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How an agent process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status.
    Exited(i32),
    /// A signal killed it.
    Signalled(i32),
}

impl Ended {
    fn of(s: ExitStatus) -> Ended {
        use std::os::unix::process::ExitStatusExt;
        match (s.code(), s.signal()) {
            (Some(c), _) => Ended::Exited(c),
            (None, Some(sig)) => Ended::Signalled(sig),
            (None, None) => Ended::Exited(-1),
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(c) => write!(f, "exited with status {c}"),
            Ended::Signalled(s) => write!(f, "killed by signal {s}"),
        }
    }
}

/// The restart policy's memory: the delay the next early death gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restarts {
    next: Duration,
    /// Starts after the first.
    pub count: u64,
}

impl Default for Restarts {
    fn default() -> Restarts {
        Restarts {
            next: Duration::ZERO,
            count: 0,
        }
    }
}

impl Restarts {
    /// After the agent ended (`how`) having run for `ran`: how long to wait
    /// before starting it again, or None to stop supervising.
    pub fn after(&mut self, how: Ended, ran: Duration) -> Option<Duration> {
        if how == Ended::Exited(0) {
            return None;
        }
        Some(self.died(ran))
    }

    /// After a process that should have kept running died having run for
    /// `ran`: how long to wait before starting it again. The first death
    /// after a healthy run is restarted at once (a killed process's work
    /// waits for nothing but its start); deaths in a row wait longer and
    /// longer, so a process that cannot start does not spin.
    pub fn died(&mut self, ran: Duration) -> Duration {
        if ran >= HEALTHY_RUN {
            self.next = Duration::ZERO;
        }
        let wait = self.next;
        self.next = if wait.is_zero() {
            FIRST_DELAY
        } else {
            (wait * 2).min(MAX_DELAY)
        };
        self.count += 1;
        wait
    }
}

/// Why supervision could not go on.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// The agent binary could not be started at all.
    #[error("cannot start the agent ({program}): {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The error.
        source: std::io::Error,
    },
    /// Waiting for the agent failed.
    #[error("cannot wait for the agent: {0}")]
    Wait(std::io::Error),
}

fn spawn(program: &std::path::Path, args: &[OsString]) -> Result<Child, SuperviseError> {
    Command::new(program)
        .arg("run")
        .args(args)
        .spawn()
        .map_err(|source| SuperviseError::Spawn {
            program: program.display().to_string(),
            source,
        })
}

/// Sends SIGTERM to `child`, and SIGKILL if it is still there after
/// [`STOP_GRACE`].
fn stop(child: &mut Child) -> Result<(), SuperviseError> {
    // SAFETY: kill(2) on the pid of a child this process has not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        // The agent stops the instances it adopted; they are our children.
        reap_orphans(child.id());
        if child.try_wait().map_err(SuperviseError::Wait)?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().map_err(SuperviseError::Wait)?;
    Ok(())
}

/// Makes this process the reaper of its orphaned descendants.
fn become_subreaper() {
    // SAFETY: prctl with an integer option and argument.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if r != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "cannot become a child subreaper: instances of a dead agent go to init"
        );
    }
}

/// Reaps every exited child but the agent (`agent`, left for its `Child` to
/// collect): instances orphaned by an agent's death.
fn reap_orphans(agent: u32) {
    loop {
        // SAFETY: a zeroed siginfo_t is a valid buffer for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on any child, without reaping (WNOWAIT), not blocking.
        let r = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: waitid filled in a SIGCHLD siginfo (or left it zeroed).
        let pid = unsafe { info.si_pid() };
        if r != 0 || pid <= 0 || pid as u32 == agent {
            return;
        }
        let mut status = 0;
        // SAFETY: reaps the exited child waitid reported.
        unsafe {
            libc::waitpid(pid, &mut status, libc::WNOHANG);
        }
        tracing::info!(pid, "reaped an orphaned process");
    }
}

/// Runs `program run ARGS...` until it exits with status 0 or `stop_flag`
/// is set (then the agent is stopped first), starting it again whenever it
/// dies otherwise. Each start and death is logged to stderr.
pub fn supervise(
    program: &std::path::Path,
    args: &[OsString],
    stop_flag: &AtomicBool,
) -> Result<(), SuperviseError> {
    become_subreaper();
    let mut restarts = Restarts::default();
    loop {
        let started = Instant::now();
        let mut child = spawn(program, args)?;
        tracing::info!(pid = child.id(), "agent started");
        let status = loop {
            if stop_flag.load(Ordering::Relaxed) {
                stop(&mut child)?;
                tracing::info!("agent stopped on request");
                return Ok(());
            }
            reap_orphans(child.id());
            if let Some(s) = child.try_wait().map_err(SuperviseError::Wait)? {
                break s;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let how = Ended::of(status);
        let ran = started.elapsed();
        let Some(wait) = restarts.after(how, ran) else {
            tracing::info!(exit = %how, "agent ended: not started again");
            return Ok(());
        };
        tracing::warn!(
            pid = child.id(),
            exit = %how,
            ran_s = ran.as_secs_f64(),
            restart = restarts.count,
            restart_in_s = wait.as_secs_f64(),
            "agent ended: starting it again"
        );
        let until = Instant::now() + wait;
        while Instant::now() < until {
            reap_orphans(0);
            if stop_flag.load(Ordering::Relaxed) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_exit_ends_supervision() {
        let mut r = Restarts::default();
        assert_eq!(r.after(Ended::Exited(0), Duration::from_secs(1)), None);
        assert_eq!(r.count, 0);
    }

    #[test]
    fn early_deaths_back_off_to_the_cap_and_a_long_life_resets() {
        let mut r = Restarts::default();
        let young = Duration::from_millis(100);
        let waits: Vec<Duration> = (0..8)
            .map(|_| r.after(Ended::Exited(1), young).unwrap())
            .collect();
        assert_eq!(waits[0], Duration::ZERO, "the first restart is at once");
        assert_eq!(waits[1], FIRST_DELAY);
        assert_eq!(waits[2], FIRST_DELAY * 2);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().unwrap(), MAX_DELAY);
        assert_eq!(r.count, 8);
        // A SIGKILL after a long life: at once again, and the delays start over.
        assert_eq!(
            r.after(Ended::Signalled(9), HEALTHY_RUN),
            Some(Duration::ZERO)
        );
        assert_eq!(r.after(Ended::Signalled(9), young), Some(FIRST_DELAY));
    }

    #[test]
    fn endings_name_what_happened() {
        assert_eq!(Ended::Exited(3).to_string(), "exited with status 3");
        assert_eq!(Ended::Signalled(9).to_string(), "killed by signal 9");
    }
}
