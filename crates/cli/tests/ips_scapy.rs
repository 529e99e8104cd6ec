//! Verification tests whose captures Scapy builds (`tests/scapy/captures.py`
//! and the modules it imports), not Sluice's own packet builder, so a packet
//! our builder and our parser got wrong the same way cannot pass. Each test
//! follows an example of Suricata's documentation for a keyword or a stream
//! behaviour (its builder names it), in suricata-verify's format
//! (`tests/scapy/NAME/test.rules`, `test.yaml`), and is run by `sluice ips
//! verify`: stream behaviours (`stream-*`: out of order, overlaps and
//! retransmissions, gaps, TCP Fast Open, urgent data, flow directions),
//! payload and header keywords (`kw-*`), the application layer (`app-*`:
//! HTTP buffers and normalisation, TLS certificates and JA3, DNS over TCP,
//! protocol detection by content, EVE metadata) and the first tests
//! (`stream-split-content`, `http-uri-host`, `smtp-file-data`, ...). Scapy is
//! what `scripts/test.sh` installs (`python3-scapy`).

use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::sluice;

fn scapy_available() -> bool {
    Command::new("/usr/bin/python3")
        .args(["-c", "import scapy.layers.tls.handshake, cryptography.x509"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

#[test]
fn scapy_built_captures_raise_the_documented_alerts() {
    if !scapy_available() {
        // The suite's script installs Scapy (and runs as root): there its
        // absence is a broken environment, not a pass.
        assert!(
            !sluice_agent::testing::is_root(),
            "python3-scapy and python3-cryptography are needed (scripts/test.sh installs them)"
        );
        eprintln!("skipped: python3-scapy or python3-cryptography is not installed");
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scapy");
    let tmp = tempfile::tempdir().unwrap();
    let tests = tmp.path().join("tests");
    copy_dir(&src, &tests);
    let script = tests.join("captures.py");
    let out = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&tests)
        // No `__pycache__` beside the tests (it would read as one).
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "captures.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The scripts (captures.py and the modules it imports) are not tests.
    for e in std::fs::read_dir(&tests).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "py") {
            std::fs::remove_file(&p).unwrap();
        }
    }
    let names: Vec<String> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // Every test directory in the repo (one holding a test.rules), each
    // with its capture written.
    let want = std::fs::read_dir(&src)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("test.rules").is_file())
        .count();
    assert!(want >= 18, "{want} test directories");
    assert_eq!(names.len(), want, "{names:?}");
    for n in &names {
        assert!(
            tests.join(n).join("input.pcap").is_file(),
            "{n}: no capture"
        );
    }
    let (code, text, err) = sluice(&[
        "ips",
        "verify",
        tests.to_str().unwrap(),
        "--out",
        tmp.path().join("out").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}\n{err}");
    assert!(
        text.contains(&format!("passed {want}, failed 0, skipped 0")),
        "{text}\n{err}"
    );
}
