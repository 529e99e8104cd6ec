//! `sluice testbed up` adds the context `testbed` to the CLI's config file and
//! makes it current, so `sluice status` needs nothing exported; `testbed down`
//! removes it. Needs root and the agent binary next to `sluice` (as e2e.rs).

use std::path::{Path, PathBuf};

mod common;
use common::sluice_env;

/// Runs `testbed down` on drop, so a failed assertion leaves no lab behind.
struct Down<'a>(&'a Path, &'a [(&'a str, &'a str)]);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if self.0.join("testbed.json").exists() {
            let _ = sluice_env(
                &["testbed", "down", "--dir", self.0.to_str().unwrap()],
                self.1,
            );
        }
    }
}

#[test]
fn testbed_up_makes_its_context_current_and_down_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("home/.config/sluice/config");
    let lab = dir.path().join("lab");
    let spec = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ));
    let env = [("SLUICE_CONFIG", config.to_str().unwrap())];
    let (lab_s, spec_s) = (lab.to_str().unwrap(), spec.to_str().unwrap());
    let (code, out, err) = sluice_env(
        &[
            "testbed", "up", "--dir", lab_s, "--spec", spec_s, "--no-web",
        ],
        &env,
    );
    let _down = Down(&lab, &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("context `testbed`"), "{out}");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("current_context: testbed"), "{text}");
    assert!(text.contains("admin.token"), "{text}");
    // TLS: the controllers' URLs are https (three by default, on etcd, as
    // deployed: the CLI follows whichever leads) and the context trusts
    // their CA.
    let urls = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("controller: "))
        .unwrap_or_else(|| panic!("no controller in the context: {text}"));
    let urls: Vec<&str> = urls.split(',').collect();
    assert_eq!(urls.len(), 3, "{text}");
    assert!(urls.iter().all(|u| u.starts_with("https://")), "{text}");
    assert!(
        text.contains("ca_file:") && text.contains("api-ca.pem"),
        "{text}"
    );

    // Nothing but the config file: the context gives the controller and token.
    let (code, out, err) = sluice_env(&["status"], &env);
    assert!(code == 0 || code == 3, "{out}{err}");
    assert!(out.contains("hosts: 3 registered"), "{out}");

    let (code, out, err) = sluice_env(&["testbed", "down", "--dir", lab_s], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed context `testbed`"), "{out}");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(!text.contains("testbed"), "{text}");

    // `--no-context` leaves the file alone.
    let (code, out, err) = sluice_env(
        &[
            "testbed",
            "up",
            "--dir",
            lab_s,
            "--spec",
            spec_s,
            "--no-web",
            "--no-context",
            // One controller on SQLite and one store server: the other shape.
            "--controllers",
            "1",
            "--store",
            "single",
        ],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("export SLUICE_CONFIG="), "{out}");
    assert!(!std::fs::read_to_string(&config)
        .unwrap()
        .contains("testbed"));
}
