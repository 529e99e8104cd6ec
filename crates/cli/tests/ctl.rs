//! `sluice controller`, `apply`, `get`, `delete` and `status` against a controller
//! run as the `sluice` binary on loopback.

use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

mod common;
use common::sluice;

/// The controller process, stopped (SIGTERM) on drop.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn apply_get_delete_status_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let db = dir.path().join("c.db");
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "controller",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--db",
            db.to_str().unwrap(),
            "--state",
            "redis://127.0.0.1:1",
        ])
        .spawn()
        .unwrap();
    let mut ctl = Controller(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sluice(&["get", "tenants", "--controller", &url]).0 != 0 {
        assert!(Instant::now() < deadline, "the controller did not come up");
        assert!(ctl.0.try_wait().unwrap().is_none(), "the controller exited");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A bad spec: non-zero exit, the file and the field named.
    let bad = dir.path().join("bad.yaml");
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    std::fs::write(&bad, spec.replace("function: ips", "function: ipz")).unwrap();
    let (code, _, err) = sluice(&["apply", "-f", bad.to_str().unwrap(), "--controller", &url]);
    assert_ne!(code, 0);
    assert!(err.contains("bad.yaml"), "{err}");
    assert!(err.contains("elements.ips"), "{err}");

    // A good spec with nowhere to run: refused, naming why.
    let good = dir.path().join("figure4.yaml");
    std::fs::write(&good, &spec).unwrap();
    let (code, _, err) = sluice(&["apply", "-f", good.to_str().unwrap(), "--controller", &url]);
    assert_ne!(code, 0);
    assert!(err.contains("gateway") || err.contains("no host"), "{err}");

    // Reads.
    let (code, out, _) = sluice(&["get", "tenants", "--controller", &url]);
    assert_eq!(code, 0);
    assert!(out.starts_with("TENANT"), "{out}");
    let (code, out, _) = sluice(&["get", "hosts", "--json", "--controller", &url]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!([])
    );
    let (code, out, _) = sluice(&["status", "--controller", &url]);
    assert_eq!(code, 0);
    assert!(out.contains("hosts: 0 registered"), "{out}");
    let (code, _, err) = sluice(&["delete", "tenant", "nobody", "--controller", &url]);
    assert_ne!(code, 0);
    assert!(err.contains("nobody"), "{err}");
    let (code, _, err) = sluice(&["get", "fib", "7", "--controller", &url]);
    assert_ne!(code, 0);
    assert!(err.contains("host 7"), "{err}");

    // SIGTERM stops it cleanly.
    Command::new("kill")
        .args(["-TERM", &ctl.0.id().to_string()])
        .status()
        .unwrap();
    let status = ctl.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // Nothing listens any more.
    let (code, _, err) = sluice(&["status", "--controller", &url]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot reach the controller"), "{err}");
}
