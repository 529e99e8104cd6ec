//! `sluice controller`, `apply`, `get`, `delete`, `status`, `token` and
//! `config` against a controller run as the `sluice` binary on loopback, with
//! the admin token it writes at its first start.

use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

mod common;
use common::{sluice, sluice_env};

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
    // TLS is on by default: the controller makes its CA next to the database.
    let url = format!("https://127.0.0.1:{port}");
    let db = dir.path().join("c.db");
    let ca = dir.path().join("c.ca.pem");
    let ca_s = ca.to_str().unwrap();
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
    // The admin token goes next to the database, before the API listens.
    let token_file = dir.path().join("c.admin-token");
    let deadline = Instant::now() + Duration::from_secs(20);
    // Up once it answers at all (a 401: no token was sent).
    let up = || {
        sluice(&["get", "tenants", "--controller", &url, "--ca-file", ca_s])
            .2
            .contains("no token")
    };
    while !up() {
        assert!(Instant::now() < deadline, "the controller did not come up");
        assert!(ctl.0.try_wait().unwrap().is_none(), "the controller exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let admin = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();

    let mode = std::fs::metadata(dir.path().join("c.tls.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Without a token: refused, saying how to send one.
    let (code, _, err) = sluice(&["get", "tenants", "--controller", &url, "--ca-file", ca_s]);
    assert_ne!(code, 0);
    assert!(err.contains("no token"), "{err}");
    // Without the CA: the certificate is not trusted, and the error says what
    // to give; plain http:// to the TLS port is refused, naming https://.
    let with_token = [("SLUICE_TOKEN", admin.as_str())];
    let (code, _, err) = sluice_env(&["get", "tenants", "--controller", &url], &with_token);
    assert_ne!(code, 0);
    assert!(
        err.contains("certificate") && err.contains("--ca-file"),
        "{err}"
    );
    let plain = url.replace("https://", "http://");
    let (code, _, err) = sluice_env(&["get", "tenants", "--controller", &plain], &with_token);
    assert_ne!(code, 0);
    assert!(err.contains("https://"), "{err}");
    let (code, _, err) = sluice_env(
        &["get", "tenants", "--controller", &plain, "--ca-file", ca_s],
        &with_token,
    );
    assert_ne!(code, 0);
    assert!(err.contains("https://"), "{err}");
    // A context of a config file gives the controller and the token.
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "current_context: local\ncontexts:\n  - {{name: local, controller: \"{url}\", token_file: c.admin-token, ca_file: c.ca.pem}}\n"
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    let (code, out, err) = sluice_env(&["get", "tenants"], &[("SLUICE_CONFIG", cfg)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("TENANT"), "{out}");
    // ... and so does the environment.
    let url = url.as_str();
    let env = [
        ("SLUICE_CONTROLLER", url),
        ("SLUICE_TOKEN", admin.as_str()),
        ("SLUICE_CA_FILE", ca_s),
    ];
    let sluice = |args: &[&str]| sluice_env(args, &env);

    // A bad spec: non-zero exit, the file and the field named.
    let bad = dir.path().join("bad.yaml");
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    std::fs::write(&bad, spec.replace("function: ips", "function: ipz")).unwrap();
    let (code, _, err) = sluice(&["apply", "-f", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("bad.yaml"), "{err}");
    assert!(err.contains("elements.ips"), "{err}");

    // A good spec with nowhere to run: refused, naming why.
    let good = dir.path().join("figure4.yaml");
    std::fs::write(&good, &spec).unwrap();
    let (code, _, err) = sluice(&["apply", "-f", good.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("gateway") || err.contains("no host"), "{err}");

    // Reads.
    let (code, out, _) = sluice(&["get", "tenants"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("TENANT"), "{out}");
    let (code, out, _) = sluice(&["get", "hosts", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!([])
    );
    // The state URL names a store nobody runs: degraded (exit 3), and the
    // store's line says so.
    let (code, out, err) = sluice(&["status"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("hosts: 0 registered"), "{out}");
    assert!(
        out.contains("store: redis 1 node(s), 0 up, NOT SERVING")
            && out.contains("node 127.0.0.1:1")
            && out.contains("DOWN"),
        "{out}"
    );
    assert!(
        err.contains("1 of 1 state store nodes down (the store does not serve)"),
        "{err}"
    );
    let (code, out, _) = sluice(&["status", "--json"]);
    assert_eq!(code, 3);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["store"]["nodes"][0]["node"], "127.0.0.1:1", "{out}");
    assert_eq!(v["store"]["nodes"][0]["up"], false, "{out}");
    let (code, _, err) = sluice(&["delete", "tenant", "nobody"]);
    assert_ne!(code, 0);
    assert!(err.contains("nobody"), "{err}");
    let (code, _, err) = sluice(&["get", "fib", "7"]);
    assert_ne!(code, 0);
    assert!(err.contains("host 7"), "{err}");

    // Tokens: the secret printed once, alone on stdout; listings without it.
    let (code, secret, err) = sluice(&["token", "create", "acme-ci", "--role", "tenant:acme"]);
    assert_eq!(code, 0, "{err}");
    let secret = secret.trim().to_string();
    assert!(
        secret.starts_with("sluice_") && !secret.contains('\n'),
        "{secret}"
    );
    let (code, out, _) = sluice(&["token", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("acme-ci") && out.contains("tenant:acme") && out.contains("admin"),
        "{out}"
    );
    assert!(!out.contains("sluice_"), "{out}");
    let (code, _, err) = sluice(&["token", "create", "x", "--role", "root"]);
    assert_ne!(code, 0);
    assert!(err.contains("role"), "{err}");
    // The tenant's token: its own tenants only, no hosts, no tokens.
    let tenant_env = [
        ("SLUICE_CONTROLLER", url),
        ("SLUICE_TOKEN", secret.as_str()),
        ("SLUICE_CA_FILE", ca_s),
    ];
    let (code, out, err) = sluice_env(&["status"], &tenant_env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hosts: not visible to this token"), "{out}");
    for args in [
        &["get", "hosts"][..],
        &["token", "list"],
        &["get", "fib", "1"],
    ] {
        let (code, _, err) = sluice_env(args, &tenant_env);
        assert_ne!(code, 0, "{args:?}");
        assert!(
            err.contains("forbidden") && err.contains("tenant:acme"),
            "{args:?}: {err}"
        );
    }
    let (code, _, _) = sluice(&["token", "delete", "acme-ci"]);
    assert_eq!(code, 0);
    let (code, _, err) = sluice_env(&["get", "tenants"], &tenant_env);
    assert_ne!(code, 0);
    assert!(err.contains("unknown token"), "{err}");

    // `config view` shows no secret; `use-context` switches; a bad file is named.
    std::fs::write(
        &config,
        format!(
            "current_context: local\ncontexts:\n  - {{name: local, controller: \"{url}\", token_file: c.admin-token, ca_file: c.ca.pem}}\n  - {{name: inline, controller: \"{url}\", token: \"{admin}\", ca_file: c.ca.pem}}\n"
        ),
    )
    .unwrap();
    let cfg_env = [("SLUICE_CONFIG", cfg)];
    let (code, out, err) = sluice_env(&["config", "view"], &cfg_env);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("inline") && out.contains("<redacted>"),
        "{out}"
    );
    assert!(!out.contains(&admin), "{out}");
    let (code, _, err) = sluice_env(&["config", "use-context", "inline"], &cfg_env);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = sluice_env(&["get", "tenants"], &cfg_env);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("TENANT"), "{out}");
    assert!(std::fs::read_to_string(&config)
        .unwrap()
        .contains("current_context: inline"));
    let (code, _, err) = sluice_env(&["config", "use-context", "nope"], &cfg_env);
    assert_ne!(code, 0);
    assert!(
        err.contains("nope") && err.contains("local, inline"),
        "{err}"
    );
    std::fs::write(
        &config,
        "contexts:\n  - {name: a, token: x, token_file: y}\n",
    )
    .unwrap();
    let (code, _, err) = sluice_env(&["get", "tenants"], &cfg_env);
    assert_ne!(code, 0);
    assert!(
        err.contains("config.yaml") && err.contains("contexts[0]"),
        "{err}"
    );
    let missing = dir.path().join("missing.yaml");
    let (code, _, err) = sluice_env(
        &["get", "tenants"],
        &[("SLUICE_CONFIG", missing.to_str().unwrap())],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("missing.yaml") && err.contains("SLUICE_CONFIG"),
        "{err}"
    );

    // SIGTERM stops it cleanly.
    Command::new("kill")
        .args(["-TERM", &ctl.0.id().to_string()])
        .status()
        .unwrap();
    let status = ctl.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // Nothing listens any more.
    let (code, _, err) = sluice(&["status"]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot reach the controller"), "{err}");
}
