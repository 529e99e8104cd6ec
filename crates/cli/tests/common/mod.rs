//! What the `sluice` command's integration tests share.

use std::process::Command;

/// Runs the `sluice` binary with `args`: its exit code, stdout and stderr. A
/// controller named in the environment is never used by accident.
pub fn sluice(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("SLUICE_CONTROLLER")
        .output()
        .expect("run sluice");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
