//! CLI conventions against a controller run in-process: `-o json|yaml|wide`
//! (and the old `--json`), `-f -` for specs on stdin, a closed stdout is no
//! panic, `status` exits 3 when degraded, shell completions, and `testbed
//! down` removing the context `testbed up` added.

use std::io::Write;
use std::process::{Command, Stdio};

use sluice_controller::client::Client;

mod common;
use common::{controller, register_two_hosts, sluice, sluice_env, SPEC};

/// Runs `sluice` with `stdin` as its standard input.
fn sluice_stdin(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("SLUICE_CONTROLLER")
        .env_remove("SLUICE_TOKEN")
        .env_remove("SLUICE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `sluice` writing into a pipe whose reader is already gone, as `|
/// head -1` is once it has its line (deterministic: every write fails with
/// EPIPE); its exit code and stderr.
fn sluice_into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("SLUICE_CONFIG")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn output_formats_stdin_specs_closed_pipes_and_degraded_status() {
    let dir = tempfile::tempdir().unwrap();
    let (h, url, token) = controller(dir.path());
    let c = Client::new(&url).with_token(Some(&token));
    let env = [
        ("SLUICE_CONTROLLER", url.as_str()),
        ("SLUICE_TOKEN", token.as_str()),
    ];
    let run = |args: &[&str]| sluice_env(args, &env);

    // Nothing registered: healthy, exit 0, in every format.
    let (code, out, err) = run(&["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hosts: 0 registered"), "{out}");
    let (code, out, _) = run(&["status", "-o", "json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["controller"], url.as_str());
    // `--json` is still there, hidden, and the same as `-o json`.
    let (code, old, _) = run(&["status", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(old, out);
    let (code, out, _) = run(&["status", "-o", "yaml"]);
    assert_eq!(code, 0);
    let yaml: serde_json::Value = yaml_serde::from_str(&out).unwrap();
    assert_eq!(yaml, json);
    let (code, _, err) = run(&["get", "hosts", "--json", "-o", "yaml"]);
    assert_eq!(code, 2, "conflicting formats are a usage error");
    assert!(err.contains("--json"), "{err}");
    let (_, help, _) = run(&["status", "--help"]);
    assert!(
        help.contains("-o, --output") && !help.contains("--json"),
        "{help}"
    );
    assert!(help.contains("3 when the deployment is degraded"), "{help}");

    // A reader that went away: no panic, exit 0, for a table and for JSON.
    for args in [
        &["status", "--json"][..],
        &["get", "hosts"],
        &["completion", "bash"],
    ] {
        let mut v = args.to_vec();
        v.extend(["--controller", &url, "--token", &token]);
        if args[0] == "completion" {
            v.truncate(2);
        }
        let (code, err) = sluice_into_closed_pipe(&v);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
    // Offline commands too (`sluice demo` prints through `run`'s summary).
    let out = dir.path().join("demo");
    let (code, err) = sluice_into_closed_pipe(&["demo", "--out", out.to_str().unwrap()]);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(code, Some(0), "{err}");
    // ... and through a shell pipeline as people write it.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' status --json --controller '{url}' --token '{token}' | head -1",
            env!("CARGO_BIN_EXE_sluice")
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));

    // Specs from stdin: diff, apply and check take `-f -`.
    register_two_hosts(&c);
    let (code, out, err) = sluice_stdin(&["check", "-f", "-"], SPEC);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("<stdin>: tenant `t` is valid"), "{out}");
    let remote = ["--controller", url.as_str(), "--token", token.as_str()];
    let with = |args: &[&'static str]| {
        let mut v: Vec<&str> = args.to_vec();
        v.extend(remote);
        v
    };
    let (code, out, err) = sluice_stdin(&with(&["diff", "-f", "-"]), SPEC);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("generation none -> 1"), "{out}");
    assert!(c.tenants().unwrap().is_empty(), "a diff applied the spec");
    let (code, _, err) = sluice_stdin(&with(&["apply", "-f", "-"]), "tenant: [");
    assert_ne!(code, 0);
    assert!(err.contains("<stdin>"), "{err}");
    let (code, out, err) = sluice_stdin(&with(&["apply", "-f", "-", "-o", "json"]), SPEC);
    assert_eq!(code, 0, "{err}");
    let applied: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(applied["tenant"], "t");
    assert_eq!(c.tenants().unwrap().len(), 1);

    // Tables, wide tables, YAML.
    let (code, out, _) = run(&["get", "hosts"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("ID") && !out.contains("IN_SYNC"), "{out}");
    assert!(out.contains("10.255.0.1"), "{out}");
    let (code, out, _) = run(&["get", "hosts", "-o", "wide"]);
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().contains("IN_SYNC"), "{out}");
    // Slots used of those the host declared.
    assert!(out.lines().next().unwrap().contains("SLOTS"), "{out}");
    assert!(out.contains("/64"), "{out}");
    let (code, out, _) = run(&["get", "instances"]);
    assert_eq!(code, 0);
    assert!(!out.contains("HOST_NAME"), "{out}");
    let (code, out, _) = run(&["get", "instances", "-o", "wide"]);
    assert_eq!(code, 0);
    let head = out.lines().next().unwrap();
    assert!(
        head.contains("HOST_NAME") && head.contains("UNDERLAY"),
        "{out}"
    );
    assert!(
        out.lines()
            .skip(1)
            .all(|l| l.contains(" h1 ") || l.contains(" h2 ")),
        "{out}"
    );
    // Where each instance is and why; one tenant's by name.
    let (code, out, err) = run(&["get", "placement"]);
    assert_eq!(code, 0, "{err}");
    let head = out.lines().next().unwrap();
    assert!(
        head.contains("RACK") && head.contains("POLICY") && head.contains("REASON"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("rack-aware")).count(),
        2,
        "{out}"
    );
    let (code, out, err) = run(&["get", "placement", "t", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(v.len(), 2, "{out}");
    let (code, out, _) = run(&["get", "placement", "nobody", "-o", "json"]);
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "[]");
    let (code, out, _) = run(&["get", "instances", "-o", "yaml"]);
    assert_eq!(code, 0);
    let v: Vec<serde_json::Value> = yaml_serde::from_str(&out).unwrap();
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|i| i["tenant"] == "t"), "{out}");
    for args in [
        &["get", "tenants", "-o", "yaml"][..],
        &["get", "vms", "-o", "yaml"],
        &["get", "chains", "-o", "yaml"],
        &["events", "-o", "yaml"],
        &["audit", "-o", "yaml"],
        &["token", "list", "-o", "yaml"],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        yaml_serde::from_str::<serde_json::Value>(&out)
            .unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"));
    }
    let (code, out, _) = run(&["audit", "-o", "wide"]);
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().contains("TENANT"), "{out}");

    // No agent reports the instances: degraded, exit 3, the status printed
    // first (in any format).
    let (code, out, err) = run(&["status"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("NF instances: 2 placed, 0 alive"), "{out}");
    assert!(
        err.contains("degraded: 0 of 2 hosts down, 2 of 2 NF instances not running"),
        "{err}"
    );
    let (code, out, _) = run(&["status", "-o", "json"]);
    assert_eq!(code, 3);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["hosts"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let (code, out, _) = run(&["status", "-o", "wide"]);
    assert_eq!(code, 3);
    assert!(
        out.contains("http://127.0.0.1:9") && out.contains(" pid "),
        "{out}"
    );
    // A controller that cannot be asked is an error, not "degraded".
    let (code, _, err) = sluice(&["status", "--controller", "http://127.0.0.1:9"]);
    assert_eq!(code, 1, "{err}");
    h.shutdown();
}

#[test]
fn completions_for_each_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = sluice(&["completion", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for sub in ["status", "apply", "get", "testbed"] {
            assert!(out.contains(sub), "{shell}: no `{sub}`");
        }
    }
    let (code, _, _) = sluice(&["completion", "tcsh"]);
    assert_eq!(code, 2);
}

#[test]
fn testbed_down_removes_the_context_of_its_own_lab_only() {
    let dir = tempfile::tempdir().unwrap();
    let lab = dir.path().join("lab");
    std::fs::create_dir(&lab).unwrap();
    let token_file = lab.join("admin.token");
    // A lab with nothing left to stop (no prefix, no processes, no
    // namespaces): what `down` reads.
    let state = serde_json::json!({
        "prefix": "", "dir": lab, "namespaces": [], "pids": [],
        "controller": "http://127.0.0.1:9", "store": "", "fabric": ["", ""],
        "hosts": [], "vms": [], "tenant": "t", "token_file": token_file,
    });
    std::fs::write(lab.join("testbed.json"), state.to_string()).unwrap();
    let config = dir.path().join("config");
    let other = "current_context: testbed\ncontexts:\n  - {name: testbed, controller: \"http://127.0.0.1:9\", token_file: /elsewhere/admin.token}\n  - {name: prod, controller: \"https://sluice.example\"}\n".to_string();
    std::fs::write(&config, &other).unwrap();
    let cfg = [("SLUICE_CONFIG", config.to_str().unwrap())];
    let lab_s = lab.to_str().unwrap();
    // Another lab's context of the same name stays.
    let (code, _, err) = sluice_env(&["testbed", "down", "--dir", lab_s], &cfg);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), other);
    // This lab's goes, and is no longer current.
    std::fs::write(lab.join("testbed.json"), state.to_string()).unwrap();
    std::fs::write(
        &config,
        other.replace("/elsewhere/admin.token", token_file.to_str().unwrap()),
    )
    .unwrap();
    let (code, out, err) = sluice_env(&["testbed", "down", "--dir", lab_s], &cfg);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed context `testbed`"), "{out}");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        !text.contains("testbed") && text.contains("prod") && !text.contains("current_context"),
        "{text}"
    );
}

#[test]
fn testbed_demo_refuses_a_directory_nginx_cannot_read_before_starting() {
    // 0700, as `mktemp -d` makes it.
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let d = dir.path().to_str().unwrap();
    for args in [
        &["testbed", "demo", "--dir", d][..],
        &["testbed", "up", "--dir", d],
    ] {
        let (code, _, err) = sluice(args);
        assert_eq!(code, 1, "{args:?}");
        assert!(
            err.contains(d) && err.contains("mode 0700") && err.contains("chmod o+rx"),
            "{args:?}: {err}"
        );
        // Refused before anything was made there.
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{args:?}"
        );
    }
}

#[test]
fn convert_rewrites_specs_between_the_formats_keeping_their_meaning() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let flat = root.join("examples/tenant/figure4.yaml");
    let (code, v1, err) = sluice(&["convert", "-f", flat.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        v1.starts_with("apiVersion: sluice.dev/v1\nkind: Tenant\n"),
        "{v1}"
    );
    let (code, back, err) = sluice_stdin(&["convert", "-f", "-", "--to", "flat"], &v1);
    assert_eq!(code, 0, "{err}");
    assert!(back.starts_with("tenant: acme\n"), "{back}");
    // Both read back as the same tenant.
    for text in [&v1, &back] {
        let (code, out, err) = sluice_stdin(&["check", "-f", "-"], text);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("tenant `acme` is valid: 10 elements, 3 chains"),
            "{out}"
        );
    }
    let (code, _, err) = sluice_stdin(&["convert", "-f", "-"], "apiVersion: sluice.dev/v9\n");
    assert_ne!(code, 0);
    assert!(
        err.contains("sluice.dev/v9") && err.contains("supported: sluice.dev/v1"),
        "{err}"
    );
}

/// Source files that may write to stderr with `eprintln!`: the CLI's own
/// messages to the person running it (errors, warnings, progress), and the
/// harnesses it drives. Everything else that runs as a daemon logs through
/// `tracing` (crates/logging): levels, timestamps, fields, `RUST_LOG`.
const EPRINTLN_ALLOWED: &[&str] = &[
    "crates/cli/src/bench.rs",
    "crates/cli/src/experiment.rs",
    "crates/cli/src/ips.rs",
    "crates/cli/src/main.rs",
    "crates/cli/src/run.rs",
    "crates/cli/src/testbed.rs",
    "crates/cli/src/tokens.rs",
    "crates/simulator/src/bin/sluice-sim.rs",
    // `sluice experiment chaos`'s probe harness, run by the CLI.
    "crates/testbed/src/chaos.rs",
];

/// The `.rs` files under `dir`, recursively, but for test files and
/// directories (`tests.rs`, `tests/`, `benches/`).
fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !["tests", "benches", "target", "fuzz"].contains(&name.as_str()) {
                sources(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

#[test]
fn daemons_log_through_tracing_not_eprintln() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    sources(&root.join("crates"), &mut files);
    assert!(files.len() > 100, "found only {} sources", files.len());
    let mut found = Vec::new();
    let mut scanned_daemon = false;
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if EPRINTLN_ALLOWED.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        scanned_daemon |= rel == "crates/agent/src/main.rs";
        // A file's unit tests (its `#[cfg(test)]` module at the end) may
        // print what they measured.
        let code = text.split("\n#[cfg(test)]\nmod ").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if !l.starts_with("//") && l.contains("eprintln!(") {
                found.push(format!("{rel}:{}: {}", i + 1, l));
            }
        }
    }
    assert!(scanned_daemon, "the agent's main.rs was not scanned");
    assert!(
        found.is_empty(),
        "log with `tracing` (or, for a message to the CLI's user, add the file to EPRINTLN_ALLOWED):\n{}",
        found.join("\n")
    );
}

/// `sluice controller` is a daemon: with `SLUICE_LOG_FORMAT=json` every
/// line it writes is a JSON event, its own (`sluice::ctl`) and the
/// controller library's alike, with the values as fields; `RUST_LOG` picks
/// targets.
#[test]
fn the_controller_logs_json_events_with_fields() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin.token");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["controller", "--listen", "127.0.0.1:0", "--db", ":memory:"])
        .args(["--tls", "off", "--fabric-auth", "off", "--admin-token-file"])
        .arg(&token_file)
        .env_remove("SLUICE_CONFIG")
        .env("SLUICE_LOG_FORMAT", "json")
        // The controller library's events at info, this process's own, and
        // nothing else (the state store's, say) below warn.
        .env("RUST_LOG", "warn,sluice::ctl=info,sluice_controller=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    // Killed if anything below panics, so it never outlives the test.
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.to_string()])
                .status();
        }
    }
    let kill = Kill(child.id());
    let parse = |l: &str| -> serde_json::Value {
        serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
    };
    let url = loop {
        let mut l = String::new();
        assert_ne!(stderr.read_line(&mut l).unwrap(), 0, "ended: {lines:?}");
        let v = parse(&l);
        lines.push(v.clone());
        if let Some(u) = v["fields"]["url"].as_str() {
            break u.to_string();
        }
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let token = std::fs::read_to_string(&token_file).unwrap();
    register_two_hosts(&Client::new(&url).with_token(Some(token.trim())));
    drop(kill);
    for l in stderr.lines() {
        lines.push(parse(&l.unwrap()));
    }
    assert!(child.wait().unwrap().success());
    let text = format!("{lines:#?}");
    for l in &lines {
        assert!(
            l["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{l}"
        );
        // Info and up: pushes to the hosts (which do not exist) fail.
        assert!(
            ["INFO", "WARN"].contains(&l["level"].as_str().unwrap()),
            "{l}"
        );
    }
    let with = |msg: &str| -> Vec<&serde_json::Value> {
        lines
            .iter()
            .filter(|l| l["fields"]["message"] == msg)
            .collect()
    };
    let first = with(
        "first start: created the operator token `admin`; its secret is in the file (mode 0600)",
    );
    assert_eq!(first.len(), 1, "{text}");
    assert_eq!(first[0]["target"], "sluice::ctl");
    // The secret itself never goes to the log.
    assert!(!text.contains(token.trim()), "{text}");
    let registered = with("host registered");
    let hosts: Vec<u64> = registered
        .iter()
        .filter_map(|l| l["fields"]["host"].as_u64())
        .collect();
    assert_eq!(hosts, [1, 2], "{text}");
    assert!(
        registered[0]["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("sluice_controller::")),
        "{text}"
    );
    assert_eq!(registered[0]["fields"]["underlay"], "10.255.0.1", "{text}");
    // A push logs in its span, which names the host.
    for p in with("push failed (retrying)") {
        assert_eq!(p["span"]["name"], "push", "{p}");
        assert_eq!(p["span"]["host"], p["fields"]["host"], "{p}");
    }
    let stopping = with("stopping");
    assert_eq!(stopping.len(), 1, "{text}");
    assert_eq!(stopping[0]["fields"]["signal"], 15, "{text}");
}
