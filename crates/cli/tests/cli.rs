//! The `sluice` command end to end: the sample, and the documented errors.

use std::path::Path;
use std::process::Command;

fn sluice(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

fn pass_chain(dir: &Path) -> String {
    write(dir, "pass.yaml", b"name: p\nfunctions:\n  - type: pass\n")
}

#[test]
fn bad_chain_files_name_file_and_problem() {
    let d = tempfile::tempdir().unwrap();
    let pcap = d.path().join("s");
    let (code, _, _) = sluice(&["sample", "--out", pcap.to_str().unwrap()]);
    assert_eq!(code, 0);
    let pcap = pcap.join("sample.pcap");
    let pcap = pcap.to_str().unwrap();

    let missing = d.path().join("nope.yaml");
    let (code, _, err) = sluice(&["run", "--chain", missing.to_str().unwrap(), "--pcap", pcap]);
    assert_ne!(code, 0);
    assert!(err.contains("nope.yaml"), "{err}");

    let bad = write(
        d.path(),
        "bad.yaml",
        b"name: x\nfunctions:\n  - type: pass\n    bogus: 1\n",
    );
    let (code, _, err) = sluice(&["run", "--chain", &bad, "--pcap", pcap]);
    assert_ne!(code, 0);
    assert!(
        err.contains("functions[0]") && err.contains("bogus"),
        "{err}"
    );

    let syntax = write(d.path(), "syntax.yaml", b"name: x\nfunctions: [\n");
    let (code, _, err) = sluice(&["run", "--chain", &syntax, "--pcap", pcap]);
    assert_ne!(code, 0);
    assert!(err.contains("syntax.yaml") && err.contains("line"), "{err}");

    let unknown = write(
        d.path(),
        "unknown.yaml",
        b"name: x\nfunctions:\n  - type: frewall\n",
    );
    let (code, _, err) = sluice(&["run", "--chain", &unknown, "--pcap", pcap]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown function type `frewall`"), "{err}");
}

#[test]
fn bad_traces_are_reported_and_what_came_before_is_kept() {
    let d = tempfile::tempdir().unwrap();
    let chain = pass_chain(d.path());
    let garbage = write(d.path(), "garbage.pcap", b"this is not a capture file");
    let (code, _, err) = sluice(&["run", "--chain", &chain, "--pcap", &garbage]);
    assert_ne!(code, 0);
    assert!(
        err.contains("garbage.pcap") && err.contains("magic"),
        "{err}"
    );

    // Cut the sample short in the middle of a record.
    let s = d.path().join("s");
    sluice(&["sample", "--out", s.to_str().unwrap()]);
    let whole = std::fs::read(s.join("sample.pcap")).unwrap();
    let cut = write(d.path(), "cut.pcap", &whole[..whole.len() / 2 + 7]);
    let out = d.path().join("out.pcap");
    let (code, stdout, err) = sluice(&[
        "run",
        "--chain",
        &chain,
        "--pcap",
        &cut,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("cut.pcap") && err.contains("truncated"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let read = v["frames_read"].as_u64().unwrap();
    assert!(read > 10);
    // Every frame read before the error went through and was written out.
    let fwd = v["stats"]["forwarded"].as_u64().unwrap();
    let written = std::fs::read(&out).unwrap();
    assert!(fwd > 0 && written.len() > 24);
    assert_eq!(v["stats"]["packets"].as_u64().unwrap(), read);
}

#[test]
fn state_backend_must_be_known() {
    let d = tempfile::tempdir().unwrap();
    let chain = pass_chain(d.path());
    let s = d.path().join("s");
    sluice(&["sample", "--out", s.to_str().unwrap()]);
    let pcap = s.join("sample.pcap");
    let (code, _, err) = sluice(&[
        "run",
        "--chain",
        &chain,
        "--pcap",
        pcap.to_str().unwrap(),
        "--state",
        "etcd://x",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--state etcd://x"), "{err}");
}
