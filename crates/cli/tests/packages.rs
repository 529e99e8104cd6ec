//! The Debian packages (`scripts/package.sh`) build, install into a scratch root
//! with dpkg, create the controller's system user there, carry units that
//! `systemd-analyze verify` accepts without a warning, and their installed
//! binaries run. Built from this test build's binaries, so no release build is
//! needed; the release packages differ only in the binaries' optimisation.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn note(line: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-notes");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("packages.txt"), format!("{line}\n"));
    eprintln!("{line}");
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn packages_install_into_a_scratch_root_and_their_units_verify() {
    let uid = Command::new("id").arg("-u").output().map(|o| text(&o));
    if uid.ok().as_deref().map(str::trim) != Some("0") {
        note("packages: not checked, dpkg --root needs root");
        return;
    }
    for tool in ["dpkg-deb", "dpkg", "systemd-analyze", "systemd-sysusers"] {
        if !have(tool) {
            note(&format!(
                "packages: not checked, {tool} is not on this machine (Debian's dpkg and systemd)"
            ));
            return;
        }
    }
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_sluice"))
        .parent()
        .expect("the binary's directory")
        .to_path_buf();
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("debs");
    let built = run(Command::new("bash")
        .arg(repo().join("scripts/package.sh"))
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--out")
        .arg(&out)
        .arg("--fast"));
    let debs: Vec<PathBuf> = text(&built).lines().map(PathBuf::from).collect();
    assert_eq!(debs.len(), 2, "two packages: {debs:?}");
    for (deb, name) in debs.iter().zip(["sluice-agent", "sluice"]) {
        let field = run(Command::new("dpkg-deb")
            .arg("--field")
            .arg(deb)
            .arg("Package"));
        assert_eq!(text(&field).trim(), name, "{deb:?}");
    }
    // A binary linked with Vectorscan (the IPS's search, where the build found
    // libhs) makes its package depend on the library's package.
    for (deb, bin) in debs.iter().zip(["sluiced", "sluice"]) {
        let ldd = run(Command::new("ldd").arg(bin_dir.join(bin)));
        let depends = run(Command::new("dpkg-deb")
            .arg("--field")
            .arg(deb)
            .arg("Depends"));
        let depends = text(&depends);
        assert!(depends.starts_with("libc6, systemd"), "{depends}");
        assert_eq!(
            text(&ldd).contains("libhs.so"),
            depends.contains("vectorscan"),
            "{bin}: Depends {depends:?}"
        );
    }
    // The configuration files are conffiles: an upgrade keeps the operator's edits.
    let conffiles = run(Command::new("dpkg-deb")
        .arg("--info")
        .arg(&debs[1])
        .arg("conffiles"));
    assert!(text(&conffiles).contains("/etc/sluice/controller.toml"));

    // A scratch root with an empty dpkg database; maintainer scripts run outside
    // it (DPKG_ROOT tells them where), and libc6/systemd are not "installed" there.
    let root = tmp.path().join("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "var/log"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").expect("status");
    let mut install = Command::new("dpkg");
    install
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "--force-depends", "-i"])
        .args(&debs);
    run(&mut install);
    let status = run(Command::new("dpkg-query")
        .arg(format!("--root={}", root.display()))
        .args(["-W", "-f=${Package} ${Status}\n"]));
    assert_eq!(
        text(&status),
        "sluice install ok installed\nsluice-agent install ok installed\n"
    );
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("sluice:") && l.ends_with(":/var/lib/sluice:/usr/sbin/nologin")),
        "the controller's system user: {passwd}"
    );

    // The installed binaries run.
    for (bin, want) in [
        ("usr/bin/sluice", "sluice "),
        ("usr/bin/sluiced", "sluiced "),
    ] {
        let v = run(Command::new(root.join(bin)).arg("--version"));
        assert!(text(&v).starts_with(want), "{bin}: {}", text(&v));
        run(Command::new(root.join(bin)).arg("--help"));
    }
    // The shipped configuration files are what the daemons accept.
    run(Command::new(root.join("usr/bin/sluice"))
        .args(["controller", "--check-config", "--config"])
        .arg(root.join("etc/sluice/controller.toml")));
    // The agent's file leaves the host's identity to the operator: given as
    // flags here, over the file.
    let agent = run(Command::new(root.join("usr/bin/sluiced"))
        .args(["run", "--check-config", "--config"])
        .arg(root.join("etc/sluice/agent.toml"))
        .args([
            "--host-id",
            "7",
            "--name",
            "h7",
            "--controller",
            "https://controller:7420",
        ])
        .args(["--underlay-interface", "eth1"]));
    assert!(text(&agent).contains("host_id: 7"), "{}", text(&agent));
    assert!(
        text(&agent).contains("/var/lib/sluice-agent"),
        "{}",
        text(&agent)
    );
    let incomplete = Command::new(root.join("usr/bin/sluiced"))
        .args(["run", "--check-config", "--config"])
        .arg(root.join("etc/sluice/agent.toml"))
        .output()
        .expect("sluiced");
    assert!(!incomplete.status.success());
    assert!(
        String::from_utf8_lossy(&incomplete.stderr).contains("host_id"),
        "names what is missing: {}",
        String::from_utf8_lossy(&incomplete.stderr)
    );
    for f in [
        "usr/share/bash-completion/completions/sluice",
        "usr/share/zsh/vendor-completions/_sluice",
        "usr/share/fish/vendor_completions.d/sluice.fish",
    ] {
        let c = std::fs::read_to_string(root.join(f)).expect(f);
        assert!(c.contains("controller"), "{f} completes subcommands");
    }

    // systemd-analyze verify resolves the units' dependencies (network-online.target,
    // multi-user.target) in the root: give it the host's own unit files.
    let units = root.join("lib/systemd/system");
    for entry in std::fs::read_dir("/lib/systemd/system").expect("host units") {
        let entry = entry.expect("entry");
        let dest = units.join(entry.file_name());
        if !dest.exists() && entry.path().is_file() {
            let _ = std::fs::copy(entry.path(), dest);
        }
    }
    for unit in ["sluice-controller.service", "sluice-agent.service"] {
        let v = run(Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .arg(units.join(unit)));
        let warnings = String::from_utf8_lossy(&v.stderr);
        assert!(warnings.trim().is_empty(), "{unit}: {warnings}");
    }

    // Removing keeps the operator's configuration; purging removes it.
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "-r", "sluice"]));
    assert!(!root.join("usr/bin/sluice").exists());
    assert!(root.join("etc/sluice/controller.toml").exists());
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "-P", "sluice"]));
    assert!(!root.join("etc/sluice/controller.toml").exists());
}
