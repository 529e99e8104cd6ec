//! What a `sluice` subcommand can fail with.
//!
//! Every variant names the thing that went wrong (a file, a flag, the controller, the
//! testbed) and its message already carries its source's, so that the one line
//! `main` prints (`error: ...`, then a non-zero exit) is enough to act on.

use std::io;
use std::path::{Path, PathBuf};

use sluice_controller::client::ClientError;
use sluice_testbed::lab::LabError;

use crate::run::RunError;

/// The error of one `sluice` subcommand.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file or directory could not be read, written or created.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// A command-line flag has a value the command cannot use.
    #[error("--{flag}: {problem}")]
    Flag {
        /// The flag, without its dashes.
        flag: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
    /// A tenant spec does not parse or validate (the error names its file and field).
    #[error(transparent)]
    Spec(#[from] sluice_tenant::SpecError),
    /// The controller could not be reached or refused a request.
    #[error(transparent)]
    Controller(#[from] ClientError),
    /// The controller refused a tenant spec (its answer names the field at fault).
    #[error("{}: {source}", path.display())]
    Apply {
        /// The spec's file.
        path: PathBuf,
        /// The controller's answer.
        #[source]
        source: ClientError,
    },
    /// A destructive command was not confirmed.
    #[error("{what}: not confirmed{}", if *.tty { "" } else { " (stdin is not a terminal: pass --yes to confirm)" })]
    NotConfirmed {
        /// What was not done.
        what: String,
        /// Whether a terminal was asked.
        tty: bool,
    },
    /// The controller answered with JSON this client does not understand (a version
    /// mismatch, or not a Sluice controller).
    #[error("unexpected answer from the controller: {0}")]
    Answer(#[source] serde_json::Error),
    /// The controller could not start.
    #[error("cannot start the controller: {0}")]
    Serve(#[source] sluice_controller::ControllerError),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] io::Error),
    /// The testbed or an experiment on it failed.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// A spec's variant for an experiment could not be written.
    #[error("{}: {source}", path.display())]
    Variant {
        /// The base spec.
        path: PathBuf,
        /// What was wrong with it.
        #[source]
        source: sluice_testbed::elasticity::VariantError,
    },
    /// `testbed up`/`demo`/an experiment was pointed at a directory whose testbed is
    /// still up.
    #[error(
        "a testbed is already up in {dir} (run `sluice testbed down --dir {dir}` first)",
        dir = .0.display()
    )]
    AlreadyUp(PathBuf),
    /// Some of the testbed demo's checks failed.
    #[error("{failed} of {total} checks failed (logs were in {})", dir.display())]
    ChecksFailed {
        /// Checks that failed.
        failed: usize,
        /// Checks run.
        total: usize,
        /// The lab's directory (logs, database).
        dir: PathBuf,
    },
    /// `sluice ips verify`: some tests failed (each is listed above).
    #[error("{failed} of the {ran} verification tests that ran failed")]
    VerifyFailed {
        /// Tests failed.
        failed: usize,
        /// Tests run (passed and failed).
        ran: usize,
    },
    /// A benchmark could not run (the bench crate reports its failures as text naming
    /// the step that failed).
    #[error("benchmark: {0}")]
    Bench(String),
    /// Something the command waited for did not happen in time (what and
    /// where to look).
    #[error("{0}")]
    NotFinished(String),
    /// A benchmark filter matched nothing.
    #[error("no measurement ran (check --filter)")]
    NoMeasurement,
    /// `sluice run`/`demo`/`sample` failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The CLI's config file (contexts) or a token file is unusable.
    #[error("{}: {msg}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        msg: String,
    },
    /// A rule file in which no rule parses (not a rule file, or all rules broken).
    #[error("{}: no rule parses (first: {first})", path.display())]
    NoRuleParses {
        /// The file.
        path: PathBuf,
        /// The first rule's problem, with its line.
        first: Box<sluice_ips::rules::RuleError>,
    },
    /// The loaded rules could not be compiled into the IPS's automata.
    #[error("cannot compile the loaded rules: {0}")]
    IpsCompile(#[source] sluice_ips::engine::CompileError),
    /// Own executable not found (the testbed starts `sluiced` from next to it).
    #[error("cannot find own binary: {0}")]
    OwnBinary(#[source] io::Error),
    /// Writing to stdout failed, or its reader went away (not a failure:
    /// see [`CliError::stdout_closed`]).
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    /// Data could not be written as `-o json|yaml` asks.
    #[error("cannot write the answer as {format}: {msg}")]
    Encode {
        /// JSON or YAML.
        format: &'static str,
        /// What the encoder said.
        msg: String,
    },
    /// `sluice status`: the deployment is degraded (exit code
    /// [`DEGRADED_EXIT`]).
    #[error("degraded: {hosts_down} of {hosts} hosts down, {instances_down} of {instances} NF instances not running{store}")]
    Degraded {
        /// Hosts not alive.
        hosts_down: usize,
        /// Hosts registered (visible to the token).
        hosts: usize,
        /// NF instances whose process is not known to run.
        instances_down: usize,
        /// NF instances placed.
        instances: usize,
        /// What is wrong with the state store (`, ...`), or nothing.
        store: String,
    },
    /// A testbed directory nginx's workers (another user) cannot read.
    #[error(
        "{}: mode {mode:04o}: {problem}; the testbed's nginx workers run as another user \
         and would answer 403 (fix: `chmod o+rx {}`, or pick a directory under one that is: \
         --dir /tmp/sluice-testbed)",
        path.display(), path.display()
    )]
    NotReadableByOthers {
        /// The directory (the lab's, or one of its parents).
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// What others lack.
        problem: &'static str,
    },
}

/// Exit code of `sluice status` when a host is down or an NF instance is not
/// running (1 stays "the command failed": the controller could not be asked).
pub const DEGRADED_EXIT: u8 = 3;

impl CliError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: &Path) -> impl FnOnce(io::Error) -> CliError + '_ {
        move |source| CliError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Wraps a spec-variant error with the base spec's path.
    pub fn variant(
        path: &Path,
    ) -> impl FnOnce(sluice_testbed::elasticity::VariantError) -> CliError + '_ {
        move |source| CliError::Variant {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether stdout's reader went away: what it read was what it wanted,
    /// so `main` exits 0 without a message.
    pub fn stdout_closed(&self) -> bool {
        use crate::output::OutputError::Closed;
        matches!(
            self,
            CliError::Output(Closed) | CliError::Run(RunError::Output(Closed))
        )
    }

    /// The process's exit code for this error.
    pub fn exit_code(&self) -> u8 {
        if self.stdout_closed() {
            return 0;
        }
        match self {
            CliError::Degraded { .. } => DEGRADED_EXIT,
            _ => 1,
        }
    }

    /// A bad value of `--flag`.
    pub fn flag(flag: &'static str, problem: impl Into<String>) -> CliError {
        CliError::Flag {
            flag,
            problem: problem.into(),
        }
    }
}
