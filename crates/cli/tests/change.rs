//! Safe changes through the CLI against a controller on loopback: `diff` and
//! `apply --dry-run` change nothing, `--if-generation` refuses a stale spec
//! naming what changed, a spec removing every NF instance needs `--force`,
//! `delete` wants `--yes` without a terminal, and `audit` lists who did what.

use sluice_controller::client::Client;

mod common;
use common::{controller, register_two_hosts, sluice, SPEC};

#[test]
fn diff_dry_run_generations_force_confirmation_and_audit() {
    let dir = tempfile::tempdir().unwrap();
    let (h, url, token) = controller(dir.path());
    let c = Client::new(&url).with_token(Some(&token));
    register_two_hosts(&c);
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let spec = file("t.yaml", SPEC);
    let run = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--controller", &url, "--token", &token]);
        sluice(&v)
    };

    // A diff of a new tenant: every instance and FIB entry it would add.
    let (code, out, err) = run(&["diff", "-f", &spec]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tenant t: generation none -> 1"), "{out}");
    assert!(
        out.contains("+ middlebox mon") && out.contains("+ chain ab"),
        "{out}"
    );
    assert!(out.contains("+ instance t/mon/0@"), "{out}");
    assert!(out.contains("FIB entries"), "{out}");
    assert!(c.tenants().unwrap().is_empty(), "a diff applied the spec");

    // Applied only if absent (generation 0), then at generation 1.
    let (code, _, err) = run(&["apply", "-f", &spec, "--if-generation", "0"]);
    assert_eq!(code, 0, "{err}");
    let more = file("t3.yaml", &SPEC.replace("instances: 2", "instances: 3"));
    let (code, out, _) = run(&["apply", "-f", &more, "--dry-run"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("generation 1 -> 2") && out.contains("+ instance t/mon/2@"),
        "{out}"
    );
    assert_eq!(c.tenants().unwrap()[0].generation, 1, "a dry run applied");
    let (code, _, err) = run(&["apply", "-f", &more, "--if-generation", "1"]);
    assert_eq!(code, 0, "{err}");
    // Someone still editing generation 1 is refused, and told what changed.
    let (code, _, err) = run(&["apply", "-f", &spec, "--if-generation", "1"]);
    assert_ne!(code, 0);
    assert!(err.contains("generation 2, not 1"), "{err}");
    assert!(err.contains("~ middlebox mon"), "{err}");
    assert_eq!(c.tenants().unwrap()[0].generation, 2);

    // Removing every NF instance needs --force.
    let bare = file(
        "bare.yaml",
        &SPEC
            .replace(
                "  mon: { type: middlebox, function: monitor, instances: 2 }\n",
                "",
            )
            .replace("[a, mon, b]", "[a, b]"),
    );
    let (code, _, err) = run(&["apply", "-f", &bare]);
    assert_ne!(code, 0);
    assert!(
        err.contains("every NF instance") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(c.tenants().unwrap()[0].instances, 3);

    // Another tenant's token cannot change t: refused (403) and recorded
    // under its name.
    let other = c.create_token("bravo-ci", "tenant:bravo").unwrap().token;
    let (code, _, err) = sluice(&[
        "apply",
        "-f",
        &more,
        "--controller",
        &url,
        "--token",
        &other,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("bravo-ci"), "{err}");
    // Nor read t's audit entries: its view of the log is its own (empty).
    let (code, out, _) = sluice(&["audit", "--json", "--controller", &url, "--token", &other]);
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "[]", "{out}");

    // Delete asks; without a terminal it needs --yes.
    let (code, _, err) = run(&["delete", "tenant", "t"]);
    assert_ne!(code, 0);
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(c.tenants().unwrap().len(), 1);
    let (code, out, _) = run(&["delete", "tenant", "t", "--dry-run"]);
    assert_eq!(code, 0);
    assert!(out.contains("- instance t/mon/2@"), "{out}");
    let (code, _, err) = run(&["delete", "tenant", "t", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(c.tenants().unwrap().is_empty());

    // The audit log: every change asked for, refused ones included.
    let (code, out, _) = run(&["audit", "--tenant", "t"]);
    assert_eq!(code, 0);
    let entries = out
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .count();
    // Two VMs, two applies, the stale apply, the one without --force and the
    // other tenant's (refused), the delete; dry runs and diffs are not changes.
    assert_eq!(entries, 8, "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("bravo-ci") && l.contains(" 403 ")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("admin") && l.contains("delete tenant t")),
        "{out}"
    );
    for (want, status) in [
        ("apply tenant t", " 201 "),
        ("apply tenant t", " 403 "),
        ("apply tenant t", " 409 "),
        ("delete tenant t", " 200 "),
    ] {
        assert!(
            out.lines().any(|l| l.contains(want) && l.contains(status)),
            "no `{want}` with{status}in\n{out}"
        );
    }
    h.shutdown();
}
