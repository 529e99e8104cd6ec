//! The `sluice` command end to end: the sample, and the documented errors.

use std::path::Path;

mod common;
use common::sluice;

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

fn pairs(v: &serde_json::Value) -> std::collections::BTreeMap<String, u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap()))
        .collect()
}

/// The README's main job: the sample trace through firewall -> IPS -> monitor.
#[test]
fn demo_gives_every_expected_verdict() {
    use sluice_wire::parse::{parse_frame, L4};
    let d = tempfile::tempdir().unwrap();
    let (code, out, err) = sluice(&["demo", "--out", d.path().to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let st = &v["stats"];
    assert_eq!(st["packets"], 384);
    assert_eq!(st["non_ip"], 2);
    assert_eq!(pairs(&st["malformed"]).values().sum::<u64>(), 3);
    let fw = &st["stages"][0];
    assert_eq!(fw["kind"], "firewall");
    let fw_drops = pairs(&fw["dropped"]);
    assert_eq!(
        fw_drops.get("rule_deny"),
        Some(&20),
        "telnet SYNs and their retries"
    );
    assert_eq!(
        fw_drops.get("no_state"),
        Some(&5),
        "mid-stream packets without state"
    );
    let ips = &st["stages"][1];
    assert!(pairs(&ips["dropped"])["ips_blocked"] >= 2);
    assert_eq!(st["alerts"], 4);
    // 30 web + 3 signature flows + 10 DNS + 4 pings are allowed, tracked and exported.
    assert_eq!(st["flow_records"], 47);

    let eve = std::fs::read_to_string(d.path().join("eve.json")).unwrap();
    let mut sids: Vec<u64> = eve
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event_type"] == "alert")
        .map(|e| e["alert"]["signature_id"].as_u64().unwrap())
        .collect();
    sids.sort();
    assert_eq!(sids, vec![1000001, 1000001, 1000002, 1000003]);

    // What left the chain: no server ever receives the attack's bytes in order.
    let f = std::fs::File::open(d.path().join("forwarded.pcap")).unwrap();
    let mut r = sluice_pcap::PcapReader::new(f).unwrap();
    let mut buf = Vec::new();
    let mut streams: std::collections::BTreeMap<_, Vec<(u32, Vec<u8>)>> = Default::default();
    let mut forwarded = 0;
    while r.next_into(&mut buf).unwrap().is_some() {
        forwarded += 1;
        let m = parse_frame(&buf).unwrap();
        if m.l4 == L4::Tcp && m.flow.dst_port == 80 && m.payload_len > 0 {
            streams
                .entry(m.flow)
                .or_default()
                .push((m.tcp_seq, m.payload(&buf).to_vec()));
        }
        assert_ne!(m.flow.dst_port, 23, "denied telnet must not pass");
    }
    assert_eq!(forwarded, st["forwarded"].as_u64().unwrap());
    for segs in streams.values_mut() {
        segs.sort();
        let mut bytes = Vec::new();
        let mut next = segs[0].0;
        for (seq, p) in segs.iter() {
            if *seq != next {
                break; // a gap: the receiver cannot read past it
            }
            bytes.extend_from_slice(p);
            next = seq.wrapping_add(p.len() as u32);
        }
        assert!(
            !bytes.windows(11).any(|w| w == b"/etc/passwd"),
            "attack reached a server"
        );
    }
}

#[test]
fn check_validates_tenant_specs() {
    let spec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    );
    let (code, out, err) = sluice(&["check", "-f", spec]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("3 chains") && out.contains("fw -> ips -> lb-a"),
        "{out}"
    );
    let d = tempfile::tempdir().unwrap();
    let bad = write(d.path(), "bad.yaml", b"tenant: x\nelements: {a: {type: external, subnets: [1.2.3.0/24]}}\nchains: [{name: c, path: [a, zz]}]\n");
    let (code, _, err) = sluice(&["check", "-f", &bad]);
    assert_ne!(code, 0);
    assert!(
        err.contains("bad.yaml: chains[0].path[1]: unknown element `zz`"),
        "{err}"
    );
}

/// `sluice run` against Redis with the flow cache (`--own`) and pipelined
/// (`--pipeline`) writes exactly what a run with local state writes: the same
/// forwarded packets in the same order, the same alerts and flow records.
#[test]
fn cached_and_pipelined_runs_on_redis_match_local_state() {
    use sluice_state_redis::server::{flushall, RedisServer};
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let url = srv.url();
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = sluice(&["sample", "--out", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let chain = d.path().join("chain.yaml");
    let pcap = d.path().join("sample.pcap");
    let run = |tag: &str, extra: &[&str]| {
        let out = d.path().join(format!("{tag}.pcap"));
        let eve = d.path().join(format!("{tag}.json"));
        let mut args = vec![
            "run",
            "--chain",
            chain.to_str().unwrap(),
            "--pcap",
            pcap.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--eve",
            eve.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, stdout, err) = sluice(&args);
        assert_eq!(code, 0, "{tag}: {err}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let mut events: Vec<String> = std::fs::read_to_string(&eve)
            .unwrap()
            .lines()
            .map(|l| {
                let mut e: serde_json::Value = serde_json::from_str(l).unwrap();
                // When a record is exported depends on batch timing, not content.
                e.as_object_mut().unwrap().remove("timestamp");
                e.to_string()
            })
            .collect();
        events.sort();
        (std::fs::read(&out).unwrap(), events, v)
    };
    let (want_pcap, want_events, _) = run("local", &[]);
    // Fresh namespaces per run: the chain name is the same, so flush between.
    for (tag, extra) in [
        ("own", vec!["--state", url.as_str(), "--own"]),
        ("pipe", vec!["--state", url.as_str(), "--pipeline", "64"]),
    ] {
        flushall(srv.port()).unwrap();
        let (got_pcap, got_events, v) = run(tag, &extra);
        assert!(got_pcap == want_pcap, "{tag}: forwarded packets differ");
        assert_eq!(got_events, want_events, "{tag}: alerts and flow records");
        assert_eq!(v["stats"]["store_errors"], 0, "{tag}");
    }
}

/// `--out` or `--eve` naming the input trace is refused before anything is
/// truncated: the trace is still whole afterwards.
#[test]
fn outputs_naming_the_input_are_refused_and_the_input_survives() {
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = sluice(&["sample", "--out", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let chain = pass_chain(d.path());
    let pcap = d.path().join("sample.pcap");
    let before = std::fs::read(&pcap).unwrap();
    // The same file under another name counts too.
    let other_name = d.path().join(".").join("sample.pcap");
    for flag in ["--out", "--eve"] {
        let (code, _, err) = sluice(&[
            "run",
            "--chain",
            &chain,
            "--pcap",
            pcap.to_str().unwrap(),
            flag,
            other_name.to_str().unwrap(),
        ]);
        assert_ne!(code, 0, "{flag}");
        assert!(
            err.contains(flag) && err.contains("the input trace"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(&pcap).unwrap(),
            before,
            "{flag} destroyed the input"
        );
    }
    let out = d.path().join("out.pcap");
    let (code, _, err) = sluice(&[
        "run",
        "--chain",
        &chain,
        "--pcap",
        pcap.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--eve",
        out.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("the --out file"), "{err}");
}

/// A store that refuses the run's writes makes the run fail, saying so, instead
/// of exiting 0 with packets silently dropped.
#[test]
fn a_store_failing_during_the_run_fails_the_run() {
    use sluice_state_redis::server::RedisServer;
    // Every write is refused (no replica can acknowledge it); reads still work,
    // so the store opens and fails only once the chain writes state.
    let srv = RedisServer::start(&["--min-replicas-to-write", "1"]).expect("start redis-server");
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = sluice(&["sample", "--out", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let chain = d.path().join("chain.yaml");
    let pcap = d.path().join("sample.pcap");
    let (code, out, err) = sluice(&[
        "run",
        "--chain",
        chain.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--state",
        &srv.url(),
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("store operations failed during the run") && err.contains("NOREPLICAS"),
        "{err}"
    );
}

/// `sluice run --state` as a tenant's store user: the password comes from
/// `SLUICE_STORE_PASSWORD` (never the command line), the run works within the
/// tenant's prefix, and a missing, wrong or inline password fails clearly
/// without being echoed.
#[test]
fn runs_against_a_store_as_a_tenant_user_with_the_password_from_the_environment() {
    use sluice_state_redis::acl::{tenant_prefix, tenant_user, Admin};
    use sluice_state_redis::server::RedisServer;
    use sluice_state_redis::Secret;
    const PW: &str = "cli-tenant-pw-6a0f";
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let mut admin = Admin::open(&srv.url()).unwrap();
    admin.set_tenant_user("acme", &Secret::new(PW)).unwrap();
    // A tenant's user may not load the backend's functions: the admin does.
    admin.load_library().unwrap();
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = sluice(&["sample", "--out", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let chain = d.path().join("chain.yaml");
    let pcap = d.path().join("sample.pcap");
    let url = format!(
        "redis://{}@127.0.0.1:{}?prefix={}",
        tenant_user("acme"),
        srv.port(),
        tenant_prefix("acme")
    );
    let run = |state: &str, pw: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.args(["run", "--chain", chain.to_str().unwrap()])
            .args(["--pcap", pcap.to_str().unwrap(), "--state", state])
            .env_remove("SLUICE_CONTROLLER")
            .env_remove(sluice_state_redis::PASSWORD_ENV);
        if let Some(pw) = pw {
            c.env(sluice_state_redis::PASSWORD_ENV, pw);
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code().unwrap_or(-1), err)
    };
    let (code, err) = run(&url, Some(PW));
    assert_eq!(code, 0, "{err}");
    let (code, err) = run(&url, None);
    assert!(code != 0 && err.contains("has no password"), "{err}");
    let (code, err) = run(&url, Some("wrong-pw-91"));
    assert!(
        code != 0 && err.contains("WRONGPASS") && !err.contains("wrong-pw-91"),
        "{err}"
    );
    let inline = url.replace("sluice-t-acme@", &format!("sluice-t-acme:{PW}@"));
    let (code, err) = run(&inline, None);
    assert!(
        code != 0 && err.contains("password in the URL") && !err.contains(PW),
        "{err}"
    );
    // Without the prefix the tenant's user may touch nothing.
    let bare = url.replace("?prefix=t.acme.", "");
    let (code, err) = run(&bare, Some(PW));
    assert!(code != 0 && err.contains("NOPERM"), "{err}");
}
