//! What the `sluice` command's integration tests share.

use std::process::Command;

/// Runs the `sluice` binary with `args`: its exit code, stdout and stderr. A
/// controller named in the environment is never used by accident.
#[allow(dead_code)] // Not every test binary uses it.
pub fn sluice(args: &[&str]) -> (i32, String, String) {
    sluice_env(args, &[])
}

/// [`sluice`] with environment variables set (the caller's `SLUICE_*` are
/// never inherited).
#[allow(dead_code)] // Not every test binary uses it.
pub fn sluice_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("SLUICE_CONTROLLER")
        .env_remove("SLUICE_TOKEN")
        .env_remove("SLUICE_CONFIG")
        .envs(env.iter().copied())
        .output()
        .expect("run sluice");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
