//! `promtool check metrics` (Debian's `prometheus` package) on an agent's
//! `/metrics`: Prometheus's own linter (base units, `_total` counters, help
//! text, no duplicate series).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Asserts that promtool accepts `text`; if promtool is not installed, says
/// so in the test notes instead.
pub fn assert_lints_clean(text: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-notes");
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(
            dir.join("agent-metrics.txt"),
            "agent metrics: promtool not installed (Debian's prometheus package), not linted\n",
        );
        return;
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
