//! `sluiced`'s logs as an operator gets them: `SLUICE_LOG_FORMAT=json` gives
//! one JSON object per line with a timestamp, the level, the target and the
//! event's fields (and an instance's span); `RUST_LOG` filters them; the
//! default is timestamped text at `info`. Runs the real binary: `supervise`
//! over `run --check-config` (which prints its settings and exits 0), `run`
//! missing a setting, and `instance` with a chain file that is not there.

use std::process::Command;

use serde_json::Value;

/// Runs `sluiced ARGS` with only the log variables given in `env` (the
/// caller's own are not inherited); its success, stdout and stderr.
fn sluiced(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluiced"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("SLUICE_LOG_FORMAT")
        .envs(env.iter().copied())
        .output()
        .expect("run sluiced");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A supervisor whose agent only checks its settings: two events (the agent
/// started, the agent ended for good) and the settings on stdout.
const SUPERVISE: &[&str] = &[
    "supervise",
    "--check-config",
    "--host-id",
    "1",
    "--name",
    "logs",
    "--controller",
    "http://127.0.0.1:9",
    // An address some interface here has, so no MTU warning is logged.
    "--underlay",
    "127.0.0.1",
];

/// Every line of `stderr` as JSON (panics, naming the line, on one that is not).
fn json_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Whether `t` looks like an RFC 3339 UTC timestamp (`2026-11-28T09:26:18.730020Z`).
fn rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && t.ends_with('Z')
        && t[..4].parse::<u32>().is_ok_and(|y| y >= 2024)
}

#[test]
fn json_lines_carry_timestamp_level_target_and_fields() {
    let (ok, out, err) = sluiced(SUPERVISE, &[("SLUICE_LOG_FORMAT", "json")]);
    assert!(ok, "{err}");
    assert!(out.contains("settings OK"), "the agent ran: {out}");
    let lines = json_lines(&err);
    assert_eq!(lines.len(), 2, "{err}");
    for l in &lines {
        assert!(
            l["timestamp"].as_str().is_some_and(rfc3339),
            "timestamp: {l}"
        );
        assert_eq!(l["level"], "INFO", "{l}");
        assert_eq!(l["target"], "sluice_agent::supervise", "{l}");
    }
    // The values are fields of their own, not words in a sentence.
    assert_eq!(lines[0]["fields"]["message"], "agent started", "{err}");
    assert!(
        lines[0]["fields"]["pid"].as_u64().is_some_and(|p| p > 1),
        "{err}"
    );
    assert_eq!(lines[1]["fields"]["exit"], "exited with status 0", "{err}");
}

#[test]
fn rust_log_filters_by_level_and_target() {
    // At `warn` the two `info` events are gone; the agent still ran.
    let (ok, out, err) = sluiced(
        SUPERVISE,
        &[("SLUICE_LOG_FORMAT", "json"), ("RUST_LOG", "warn")],
    );
    assert!(ok && out.contains("settings OK"), "{out}{err}");
    assert_eq!(err, "", "nothing at warn or above happened");
    // A target turned off, the rest at info: the same.
    let (ok, _, err) = sluiced(
        SUPERVISE,
        &[("RUST_LOG", "info,sluice_agent::supervise=off")],
    );
    assert!(ok);
    assert_eq!(err, "");
    // Debug shows what info shows (and maybe more).
    let (_, _, err) = sluiced(SUPERVISE, &[("RUST_LOG", "debug")]);
    assert!(err.contains("agent started"), "{err}");
}

#[test]
fn the_default_is_timestamped_text_at_info() {
    let (ok, _, err) = sluiced(SUPERVISE, &[]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    for l in &lines {
        let stamp = l.split_whitespace().next().unwrap_or("");
        assert!(rfc3339(stamp), "no timestamp first: {l}");
        assert!(l.contains(" INFO sluice_agent::supervise: "), "{l}");
    }
    assert!(lines[0].contains("agent started pid="), "{err}");
}

#[test]
fn unusable_settings_are_named_and_the_defaults_used() {
    let (ok, _, err) = sluiced(
        SUPERVISE,
        &[
            ("SLUICE_LOG_FORMAT", "yaml"),
            ("RUST_LOG", "sluice_agent=loud"),
        ],
    );
    assert!(ok, "{err}");
    assert!(
        err.contains("WARN") && err.contains("SLUICE_LOG_FORMAT") && err.contains("`yaml`"),
        "{err}"
    );
    assert!(
        err.contains("RUST_LOG") && err.contains("sluice_agent=loud"),
        "{err}"
    );
    // Text, at info.
    assert!(
        err.contains(" INFO sluice_agent::supervise: agent started"),
        "{err}"
    );
}

#[test]
fn the_last_error_is_an_event_with_the_error_as_a_field() {
    let (ok, _, err) = sluiced(&["run", "--name", "logs"], &[("SLUICE_LOG_FORMAT", "json")]);
    assert!(!ok);
    let lines = json_lines(&err);
    let last = lines.last().expect("an event");
    assert_eq!(last["level"], "ERROR", "{err}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("host_id") && e.contains("--host-id")),
        "{err}"
    );
}

#[test]
fn an_instance_process_logs_in_its_span() {
    let dir = tempfile::tempdir().unwrap();
    let chain = dir.path().join("missing.yaml");
    let (ok, _, err) = sluiced(
        &[
            "instance",
            "--name",
            "acme/fw/0",
            "--listen",
            "127.0.0.1:0",
            "--agent",
            "127.0.0.1:9",
            "--chain",
            chain.to_str().unwrap(),
        ],
        &[("SLUICE_LOG_FORMAT", "json")],
    );
    assert!(!ok);
    let lines = json_lines(&err);
    let last = lines.last().expect("an event");
    assert_eq!(last["level"], "ERROR", "{err}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("missing.yaml")),
        "{err}"
    );
    let span = &last["span"];
    assert_eq!(span["name"], "instance", "{err}");
    assert_eq!(span["tenant"], "acme", "{err}");
    assert_eq!(span["middlebox"], "fw", "{err}");
    assert_eq!(span["instance"], "acme/fw/0", "{err}");
}
