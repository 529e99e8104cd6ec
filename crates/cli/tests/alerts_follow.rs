//! `sluice alerts --follow` reads the controller's event stream: the alerts
//! an agent's EVE files hold, then each new one as it is written, as JSON
//! lines (needs root: the agent runs in a namespace of its own).

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use sluice_agent::testing::{is_root, standalone_options};
use sluice_agent::{Agent, AgentOptions};
use sluice_controller::client::Client;
use sluice_proto::HostRegistration;
use sluice_testbed::Netns;

mod common;

fn alert(second: u32, sid: u64) -> String {
    format!(
        r#"{{"timestamp":"2026-11-28T10:00:{second:02}.000000+0000","event_type":"alert","flow_id":{sid},"alert":{{"signature_id":{sid},"signature":"probe"}}}}"#
    )
}

fn append(path: &std::path::Path, line: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

#[test]
fn alerts_follow_prints_old_and_new_alerts_as_they_are_written() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (h, url, token) = common::controller(dir.path());
    let host = Netns::new("h").unwrap();
    let run_dir = dir.path().join("run");
    let agent = Agent::start(&AgentOptions {
        prefix: format!("f{}", std::process::id() % 100_000),
        run_dir: Some(run_dir.clone()),
        ..standalone_options(1, host.name())
    })
    .unwrap();
    Client::new(&url)
        .with_token(Some(&token))
        .register_host(&HostRegistration {
            host: 1,
            name: "h1".into(),
            underlay: Ipv4Addr::new(10, 255, 0, 1),
            api: agent.api_url(),
            config_version: 0,
            api_token: None,
            capacity: None,
            api_csr: None,
        })
        .unwrap();
    let file = run_dir.join("eve").join("t").join("t_ips_0.eve.json");
    append(&file, &alert(1, 7));

    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["alerts", "--follow", "-o", "json"])
        .env_remove("SLUICE_CONFIG")
        .env_remove("SLUICE_CA_FILE")
        .env("SLUICE_CONTROLLER", &url)
        .env("SLUICE_TOKEN", &token)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let sid = |l: String| -> u64 {
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["tenant"], "t");
        v["alert"]["signature_id"].as_u64().unwrap()
    };
    let wait = Duration::from_secs(15);
    let first = rx.recv_timeout(wait);
    append(&file, &alert(2, 8));
    let second = rx.recv_timeout(wait);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(sid(first.expect("the alert already there")), 7);
    assert_eq!(sid(second.expect("the alert written while following")), 8);
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "each once"
    );
    agent.shutdown();
    h.shutdown();
}
