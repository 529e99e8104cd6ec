//! The SIEM sink: the agent forwards its NF instances' EVE lines to a real
//! Redis/Valkey stream and a syslog listener, counts what a down sink
//! loses, and reconnects when it is back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sluice_agent::siem::{Forwarder, RedisSink, SiemConfig, SyslogSink};
use sluice_agent::testing::{
    attach_vm, is_root, one_instance_between, standalone_options, VmHandle,
};
use sluice_agent::{Agent, AgentOptions};
use sluice_netns::Netns;
use sluice_proto::{AgentConfig, ChainName, InstanceConfig};
use sluice_state_redis::acl::{Admin, Value};
use sluice_state_redis::server::{server_binary, RedisServer};
use sluice_state_redis::Secret;

mod promtool;

/// Polls `done` every 50 ms for up to 20 s (real processes and threads).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The entries of stream `key`, each as its fields.
fn entries(admin: &mut Admin, key: &str) -> Vec<Vec<(String, String)>> {
    let r = admin
        .command(0, &[b"XRANGE", key.as_bytes(), b"-", b"+"])
        .unwrap();
    let Value::Array(Some(items)) = r else {
        panic!("XRANGE {key}: {r:?}")
    };
    items
        .into_iter()
        .map(|e| {
            let Value::Array(Some(parts)) = e else {
                panic!("entry {e:?}")
            };
            let Value::Array(Some(fields)) = &parts[1] else {
                panic!("fields {:?}", parts[1])
            };
            fields
                .chunks(2)
                .map(|kv| (kv[0].text().unwrap(), kv[1].text().unwrap()))
                .collect()
        })
        .collect()
}

fn field<'a>(e: &'a [(String, String)], k: &str) -> &'a str {
    &e.iter().find(|(f, _)| f == k).unwrap().1
}

/// Octet-counted syslog frames (RFC 6587) from every connection to
/// `listener`, one message each on the channel.
fn tcp_syslog(listener: TcpListener) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(s) = s else { break };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s);
                loop {
                    let mut len = Vec::new();
                    if r.read_until(b' ', &mut len).unwrap_or(0) == 0 {
                        break;
                    }
                    let n: usize = String::from_utf8_lossy(&len).trim().parse().unwrap();
                    let mut msg = vec![0u8; n];
                    if r.read_exact(&mut msg).is_err() {
                        break;
                    }
                    if tx.send(String::from_utf8(msg).unwrap()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    rx
}

fn append(path: &Path, lines: &[String]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

fn flow(n: usize) -> String {
    format!(
        r#"{{"timestamp":"2026-11-28T10:00:{n:02}.000000+0000","event_type":"flow","flow_id":{n}}}"#
    )
}

/// Lines appended (and rotated) after the forwarder started reach both
/// sinks; with the stream's server down they wait in a bounded queue whose
/// overflow is counted lost, and are delivered once it is back; the syslog
/// sink keeps delivering meanwhile.
#[test]
fn a_down_sink_counts_what_it_loses_and_takes_the_rest_when_it_is_back() {
    if server_binary().is_none() {
        eprintln!("skipped: needs redis-server or valkey-server");
        return;
    }
    let mut redis = RedisServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let eve = dir.path().join("eve");
    let file = eve.join("acme").join("acme_ips_0.eve.json");
    // Written before the forwarder started: not sent.
    append(&file, &[flow(0)]);
    let syslog = TcpListener::bind("127.0.0.1:0").unwrap();
    let syslog_addr = syslog.local_addr().unwrap();
    let msgs = tcp_syslog(syslog);
    let cfg = SiemConfig {
        redis: Some(RedisSink {
            url: redis.url(),
            stream: "siem".into(),
            maxlen: 1000,
        }),
        syslog: Some(SyslogSink::parse(&format!("tcp://{syslog_addr}")).unwrap()),
        queue: 5,
    };
    let fwd = Forwarder::start(&eve, "h1", &cfg, None).unwrap();
    let st = fwd.stats().clone();
    let (rs, ss) = (&st.sinks[0], &st.sinks[1]);
    assert_eq!((rs.name, ss.name), ("redis", "syslog-tcp"));
    let mut admin = Admin::open(&redis.url()).unwrap();

    // Appended, then rotated away with a line the forwarder may not have
    // read yet, then a new file: every line once, in the tenant's stream.
    append(&file, &[flow(1)]);
    append(&file, &[flow(2)]);
    std::fs::rename(&file, file.with_extension("json.1")).unwrap();
    append(&file, &[flow(3)]);
    wait_until("3 lines sent to each sink", || {
        rs.sent.load(Ordering::Relaxed) == 3 && ss.sent.load(Ordering::Relaxed) == 3
    });
    let mut ids: Vec<String> = entries(&mut admin, "siem:acme")
        .iter()
        .map(|e| {
            assert_eq!(field(e, "tenant"), "acme");
            assert_eq!(field(e, "event_type"), "flow");
            let v: serde_json::Value = serde_json::from_str(field(e, "eve")).unwrap();
            v["flow_id"].to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["1", "2", "3"]);
    let got: Vec<String> = (0..3)
        .map(|_| msgs.recv_timeout(Duration::from_secs(5)).unwrap())
        .collect();
    for m in &got {
        assert!(m.starts_with("<134>1 2026-11-28T10:00:0"), "{m}");
        assert!(
            m.contains(" h1 sluice - flow - {\"tenant\":\"acme\","),
            "{m}"
        );
    }

    // The stream's server dies: 8 lines, a queue of 5, 3 lost.
    redis.kill();
    append(&file, &(10..18).map(flow).collect::<Vec<_>>());
    wait_until("3 lines lost", || rs.lost.load(Ordering::Relaxed) == 3);
    assert!(!rs.up.load(Ordering::Relaxed));
    assert_eq!(rs.queued.load(Ordering::Relaxed), 5);
    assert_eq!(rs.sent.load(Ordering::Relaxed), 3);
    // The other sink is not held up.
    wait_until("syslog took the 8", || {
        ss.sent.load(Ordering::Relaxed) == 11
    });
    assert_eq!(ss.lost.load(Ordering::Relaxed), 0);

    // Back (empty, as it had no persistence): the 5 queued, the newest.
    redis.restart().unwrap();
    wait_until("the queue sent", || rs.sent.load(Ordering::Relaxed) == 8);
    assert!(rs.up.load(Ordering::Relaxed));
    assert_eq!(rs.queued.load(Ordering::Relaxed), 0);
    let mut admin = Admin::open(&redis.url()).unwrap();
    let ids: Vec<String> = entries(&mut admin, "siem:acme")
        .iter()
        .map(|e| {
            let v: serde_json::Value = serde_json::from_str(field(e, "eve")).unwrap();
            v["flow_id"].to_string()
        })
        .collect();
    assert_eq!(ids, ["13", "14", "15", "16", "17"]);
    drop(fwd);
}

const IPS_PORT: u16 = 5;

const IPS: &str = r#"
name: t.ips
functions:
  - type: ips
    name: ips
    rules:
      - 'alert tcp any any -> any 5000 (msg:"probe"; flow:to_server,established; content:"evil-payload"; sid:7; rev:1;)'
settings:
  batch_size: 32
  timer_interval_ms: 100
"#;

/// VM 1 -> ips -> VM 2 on chain 1, the replies VM 2 -> ips -> VM 1 on chain 2.
fn config(vm1: &VmHandle, vm2: &VmHandle) -> AgentConfig {
    let mut c = one_instance_between(
        vm1,
        vm2,
        InstanceConfig {
            name: "t/ips/0".into(),
            tenant: "t".into(),
            middlebox: "ips".into(),
            port: IPS_PORT,
            vni: 7,
            chain_yaml: IPS.into(),
            state: "local".into(),
            state_password: None,
            backends: Vec::new(),
        },
    );
    c.tenants[0].chains = vec![
        ChainName {
            id: 1,
            name: "to-web".into(),
            reverse: false,
        },
        ChainName {
            id: 2,
            name: "to-web".into(),
            reverse: true,
        },
    ];
    c
}

/// One signature sent through a deployed IPS instance is exactly one alert
/// entry in the tenant's stream (the agent authenticating with a password
/// file) and exactly one RFC 5424 alert message at the syslog listener.
#[test]
fn one_signature_is_one_alert_in_each_sink() {
    if !is_root() || server_binary().is_none() {
        eprintln!("skipped: needs root and redis-server");
        return;
    }
    let mut redis = RedisServer::start(&[]).unwrap();
    redis
        .secure("admin", &Secret::new("admin-pw-3f0a"))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let admin_pw = dir.path().join("admin.pw");
    std::fs::write(&admin_pw, "admin-pw-3f0a\n").unwrap();
    let admin_url = format!(
        "redis://admin@127.0.0.1:{}?password_file={}",
        redis.port(),
        admin_pw.display()
    );
    let mut admin = Admin::open(&admin_url).unwrap();
    // The sink's user may add to its streams and do nothing else.
    let r = admin
        .command(
            0,
            &[
                b"ACL",
                b"SETUSER",
                b"siem",
                b"on",
                b">siem-pw-91c2",
                b"~sluice:eve:*",
                b"-@all",
                b"+xadd",
            ],
        )
        .unwrap();
    assert_eq!(r, Value::Simple("OK".into()));
    let pw = dir.path().join("siem.pw");
    std::fs::write(&pw, "siem-pw-91c2\n").unwrap();
    let url = format!(
        "redis://siem@127.0.0.1:{}?password_file={}",
        redis.port(),
        pw.display()
    );
    let syslog = UdpSocket::bind("127.0.0.1:0").unwrap();
    syslog
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();

    let host = Netns::new("h").unwrap();
    let vm1 = attach_vm(host.name(), "vm1", Ipv4Addr::new(10, 0, 0, 1)).unwrap();
    let vm2 = attach_vm(host.name(), "vm2", Ipv4Addr::new(10, 0, 0, 2)).unwrap();
    let run_dir = dir.path().join("run");
    let agent = Agent::start(&AgentOptions {
        prefix: format!("s{}", std::process::id() % 100_000),
        run_dir: Some(run_dir.clone()),
        instance_exe: Some(env!("CARGO_BIN_EXE_sluiced").into()),
        siem: Some(SiemConfig {
            redis: Some(RedisSink {
                url: url.clone(),
                stream: "sluice:eve".into(),
                maxlen: 1000,
            }),
            syslog: Some(
                SyslogSink::parse(&format!("udp://{}", syslog.local_addr().unwrap())).unwrap(),
            ),
            queue: 1000,
        }),
        ..standalone_options(1, host.name())
    })
    .unwrap();
    let api = agent.api_url();
    // The echo server on VM 2.
    let addr = SocketAddr::from((vm2.addr, 5000));
    let listener = vm2
        .ns
        .run(move || TcpListener::bind(addr))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { break };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let r = ureq::put(&format!("{api}/v1/config")).send_json(config(&vm1, &vm2));
    assert_eq!(r.map(|r| r.status()).ok(), Some(200));

    // One connection, one signature (TCP retransmits while the instance starts).
    let mut s = vm1
        .ns
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(20)))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let msg = b"GET / HTTP/1.0\r\nX: evil-payload\r\n\r\n";
    s.write_all(msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    drop(s);

    let alerts = |admin: &mut Admin| {
        entries(admin, "sluice:eve:t")
            .into_iter()
            .filter(|e| field(e, "event_type") == "alert")
            .collect::<Vec<_>>()
    };
    wait_until("the alert in the stream", || !alerts(&mut admin).is_empty());
    let mut syslog_alerts = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(20);
    while syslog_alerts.is_empty() && Instant::now() < deadline {
        if let Ok(n) = syslog.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            if m.contains(" sluice - alert - ") {
                syslog_alerts.push(m);
            }
        }
    }
    // Anything sent twice would have arrived by now: the forwarder polls
    // every 100 ms.
    std::thread::sleep(Duration::from_secs(1));
    while let Ok(n) = syslog.recv(&mut buf) {
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        if m.contains(" sluice - alert - ") {
            syslog_alerts.push(m);
        }
    }
    let stream = alerts(&mut admin);
    assert_eq!(stream.len(), 1, "{stream:?}");
    assert_eq!(field(&stream[0], "tenant"), "t");
    let eve: serde_json::Value = serde_json::from_str(field(&stream[0], "eve")).unwrap();
    assert_eq!(eve["alert"]["signature_id"], 7);
    assert_eq!(eve["dest_port"], 5000);
    assert_eq!(syslog_alerts.len(), 1, "{syslog_alerts:?}");
    let m = &syslog_alerts[0];
    assert!(m.contains(" h1 sluice - alert - "), "{m}");
    let json: serde_json::Value =
        serde_json::from_str(m.split_once(" - alert - ").unwrap().1).unwrap();
    assert_eq!(json["tenant"], "t");
    assert_eq!(json["flow_id"], eve["flow_id"]);

    // Its counters, in Prometheus form; the password nowhere in them.
    let metrics = ureq::get(&format!("{api}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics.contains("sluice_siem_up{host=\"1\",sink=\"redis\"} 1"),
        "{metrics}"
    );
    assert!(metrics
        .contains("sluice_siem_events_total{host=\"1\",sink=\"syslog-udp\",outcome=\"lost\"} 0"));
    assert!(!metrics.contains("siem-pw-91c2"));
    // Per-chain and per-instance families name what the configuration names
    // (SYNs: the first may be retransmitted while the instance starts).
    assert!(
        metrics.contains(
            "sluice_chain_syns_total{host=\"1\",vni=\"7\",tenant=\"t\",chain=\"to-web\",direction=\"forward\"} "
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "sluice_instance_up{host=\"1\",port=\"5\",name=\"t/ips/0\",tenant=\"t\",middlebox=\"ips\",instance=\"t/ips/0\"} 1"
        ),
        "{metrics}"
    );
    promtool::assert_lints_clean(&metrics);
    agent.shutdown();
}

/// The flow ids of the entries of stream `key`, in stream order.
fn flow_ids(admin: &mut Admin, key: &str) -> Vec<u64> {
    entries(admin, key)
        .iter()
        .map(|e| {
            let v: serde_json::Value = serde_json::from_str(field(e, "eve")).unwrap();
            v["flow_id"].as_u64().unwrap()
        })
        .collect()
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

/// The sinks' positions saved in the run directory carry a forwarder across
/// restarts: what was written while it was stopped (a rotation included) is
/// sent after it, what it had sent is not sent again; after a crash (the
/// positions of an earlier save), only what it sent after that save is.
#[test]
fn a_restarted_forwarder_sends_what_was_written_while_it_was_stopped_once() {
    if server_binary().is_none() {
        eprintln!("skipped: needs redis-server or valkey-server");
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let eve = dir.path().join("eve");
    let file = eve.join("acme").join("acme_ips_0.eve.json");
    let positions = dir.path().join(sluice_agent::siem::saved::FILE);
    let cfg = SiemConfig {
        redis: Some(RedisSink {
            url: redis.url(),
            stream: "siem".into(),
            maxlen: 1000,
        }),
        syslog: None,
        queue: 1000,
    };
    let mut admin = Admin::open(&redis.url()).unwrap();
    let sent = |f: &Forwarder| f.stats().sinks[0].sent.load(Ordering::Relaxed);

    // The first start has nothing saved: what is in the files is history.
    append(&file, &[flow(0)]);
    let fwd = Forwarder::start(&eve, "h1", &cfg, Some(&positions)).unwrap();
    append(&file, &[flow(1), flow(2)]);
    wait_until("2 lines sent", || sent(&fwd) == 2);
    // Once saved (about every second), this is what a crash would leave.
    let size = std::fs::metadata(&file).unwrap().len();
    wait_until("the positions saved", || {
        sluice_agent::siem::saved::load(&positions)
            .unwrap()
            .is_some_and(|s| s.files.iter().any(|f| f.sinks.get("redis") == Some(&size)))
    });
    let at_crash = std::fs::read(&positions).unwrap();
    append(&file, &[flow(3)]);
    wait_until("3 lines sent", || sent(&fwd) == 3);
    drop(fwd);

    // Stopped: a line, then a rotation and a line in the new file.
    append(&file, &[flow(4)]);
    std::fs::rename(&file, file.with_extension("json.1")).unwrap();
    append(&file, &[flow(5)]);
    let fwd = Forwarder::start(&eve, "h1", &cfg, Some(&positions)).unwrap();
    wait_until("the 2 written while stopped", || sent(&fwd) == 2);
    // Anything sent again would have been by now (it polls every 100 ms).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sent(&fwd), 2);
    assert_eq!(
        sorted(flow_ids(&mut admin, "siem:acme")),
        [1, 2, 3, 4, 5],
        "each line once, none from before the first start"
    );
    drop(fwd);

    // As after a crash right after the earlier save: lines 3 and 4 (of the
    // rotated file) and 5 (of a file that save did not know) again, not
    // 1 and 2.
    std::fs::write(&positions, at_crash).unwrap();
    let fwd = Forwarder::start(&eve, "h1", &cfg, Some(&positions)).unwrap();
    wait_until("the unsaved tail sent again", || sent(&fwd) == 3);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sent(&fwd), 3);
    assert_eq!(
        sorted(flow_ids(&mut admin, "siem:acme")),
        [1, 2, 3, 3, 4, 4, 5, 5]
    );
    drop(fwd);
}

/// The agent keeps the positions in its run directory: EVE lines written
/// while it is stopped reach the SIEM after it restarts, and the ones it
/// sent before do not arrive twice.
#[test]
fn lines_written_while_the_agent_is_stopped_reach_the_siem_after_its_restart() {
    if !is_root() || server_binary().is_none() {
        eprintln!("skipped: needs root and redis-server");
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let host = Netns::new("h").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let file = run_dir.join("eve").join("t").join("t_ips_0.eve.json");
    let start = || {
        Agent::start(&AgentOptions {
            prefix: format!("r{}", std::process::id() % 100_000),
            run_dir: Some(run_dir.clone()),
            instance_exe: Some(env!("CARGO_BIN_EXE_sluiced").into()),
            siem: Some(SiemConfig {
                redis: Some(RedisSink {
                    url: redis.url(),
                    stream: "sluice:eve".into(),
                    maxlen: 1000,
                }),
                syslog: None,
                queue: 1000,
            }),
            ..standalone_options(1, host.name())
        })
        .unwrap()
    };
    let mut admin = Admin::open(&redis.url()).unwrap();
    let agent = start();
    append(&file, &[flow(1), flow(2)]);
    wait_until("2 lines in the stream", || {
        flow_ids(&mut admin, "sluice:eve:t").len() == 2
    });
    agent.shutdown();
    append(&file, &[flow(3), flow(4)]);
    let agent = start();
    wait_until("4 lines in the stream", || {
        flow_ids(&mut admin, "sluice:eve:t").len() >= 4
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(flow_ids(&mut admin, "sluice:eve:t"), [1, 2, 3, 4]);
    agent.shutdown();
}
