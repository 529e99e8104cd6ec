use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

fn args(a: &[&str]) -> RunArgs {
    Cli::try_parse_from(std::iter::once("sluiced").chain(a.iter().copied()))
        .expect("the flags parse")
        .run
}

fn file(text: &str) -> AgentFile {
    parse_file("/etc/sluice/agent.toml", text).expect("the file parses")
}

const REQUIRED: &str = "host_id = 3\nname = \"c3\"\ncontroller = \"http://10.0.0.1:7420\"\nunderlay_interface = \"eth1\"\n";

#[test]
fn a_flag_wins_over_the_file_which_wins_over_the_default() {
    let f = file(&format!(
        "{REQUIRED}vm_mtu = 9000\nprefix = \"fromfile\"\nlisten = \"10.0.0.3:7101\"\n"
    ));
    let s = resolve(
        &args(&["--prefix", "flag", "--host-id", "4"]),
        &f,
        Some(Path::new("a.toml")),
    )
    .unwrap();
    assert_eq!(s.host_id, 4);
    assert_eq!(s.prefix, "flag");
    assert_eq!(s.vm_mtu, 9000);
    assert_eq!(s.listen, "10.0.0.3:7101");
    assert_eq!(s.name, "c3");
    assert_eq!(s.underlay_interface.as_deref(), Some("eth1"));
    // Defaults.
    assert_eq!(s.netns, None);
    assert_eq!(s.geneve_port, 6081);
    assert_eq!(s.suspect_ms, 150);
    assert!(s.fabric_auth);
    assert_eq!(s.seawall, None);
    assert_eq!(s.run_dir, PathBuf::from(DEFAULT_RUN_DIR));
    assert_eq!(s.instance_slots, DEFAULT_INSTANCE_SLOTS);
}

#[test]
fn instance_slots_come_from_the_file_or_the_flag() {
    let f = file(&format!("{REQUIRED}instance_slots = 8\n"));
    assert_eq!(resolve(&args(&[]), &f, None).unwrap().instance_slots, 8);
    let s = resolve(&args(&["--instance-slots", "0"]), &f, None).unwrap();
    assert_eq!(s.instance_slots, 0, "a host may offer no instance slot");
}

#[test]
fn rack_comes_from_the_file_or_the_flag_and_empty_is_none() {
    assert_eq!(
        resolve(&args(&[]), &file(REQUIRED), None).unwrap().rack,
        None
    );
    let f = file(&format!("{REQUIRED}rack = \"r1\"\n"));
    assert_eq!(
        resolve(&args(&[]), &f, None).unwrap().rack.as_deref(),
        Some("r1")
    );
    let s = resolve(&args(&["--rack", "r2"]), &f, None).unwrap();
    assert_eq!(s.rack.as_deref(), Some("r2"), "the flag wins");
    let s = resolve(&args(&["--rack", ""]), &f, None).unwrap();
    assert_eq!(s.rack, None);
}

#[test]
fn a_rack_uplink_comes_from_the_file_or_the_flag_and_zero_is_none() {
    assert_eq!(
        resolve(&args(&[]), &file(REQUIRED), None)
            .unwrap()
            .rack_uplink_mbit,
        None
    );
    let f = file(&format!("{REQUIRED}rack_uplink_mbit = 10000\n"));
    let s = resolve(&args(&[]), &f, None).unwrap();
    assert_eq!(s.rack_uplink_mbit, Some(10_000));
    let s = resolve(&args(&["--rack-uplink-mbit", "40000"]), &f, None).unwrap();
    assert_eq!(s.rack_uplink_mbit, Some(40_000), "the flag wins");
    let s = resolve(&args(&["--rack-uplink-mbit", "0"]), &f, None).unwrap();
    assert_eq!(s.rack_uplink_mbit, None);
    let e = parse_file(
        "/etc/sluice/agent.toml",
        &format!("{REQUIRED}rack_uplink_mbit = -1\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("rack_uplink_mbit"), "{e}");
}

#[test]
fn flags_alone_are_enough() {
    let s = resolve(
        &args(&[
            "--host-id",
            "1",
            "--name",
            "h1",
            "--netns",
            "ns1",
            "--underlay",
            "10.255.0.1",
            "--controller",
            "http://127.0.0.1:1",
        ]),
        &AgentFile::default(),
        None,
    )
    .unwrap();
    assert_eq!(s.netns.as_deref(), Some("ns1"));
    assert_eq!(s.underlay, Some(Ipv4Addr::new(10, 255, 0, 1)));
    assert_eq!(s.underlay_interface, None);
}

#[test]
fn seawall_flag_alone_turns_it_on_and_its_settings_apply() {
    let f = file(&format!(
        "{REQUIRED}seawall_period_ms = 2.5\nseawall_max_mbps = 1000.0\n"
    ));
    let s = resolve(&args(&["--seawall"]), &f, None).unwrap();
    let c = s.seawall.expect("seawall on");
    assert_eq!(c.period_ns, 2_500_000);
    assert_eq!(c.max_rate_bps, 1_000_000_000);
    assert_eq!(c.decrease, 0.2);
    let on_in_file = file(&format!("{REQUIRED}seawall = true\n"));
    let off = resolve(&args(&["--seawall", "false"]), &on_in_file, None).unwrap();
    assert_eq!(off.seawall, None);
}

#[test]
fn an_unknown_key_is_refused_naming_it_and_the_file() {
    let e = parse_file(
        "/etc/sluice/agent.toml",
        &format!("{REQUIRED}underlay_iface = \"eth1\"\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("/etc/sluice/agent.toml"), "{e}");
    assert!(e.contains("underlay_iface"), "{e}");
}

#[test]
fn a_value_of_the_wrong_type_is_refused_naming_the_key() {
    let e = parse_file("a.toml", "host_id = \"one\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("a.toml") && e.contains("host_id"), "{e}");
}

#[test]
fn a_missing_required_value_names_the_field_and_both_ways_to_set_it() {
    let f = file("name = \"c3\"\ncontroller = \"http://x\"\nunderlay = \"10.0.0.3\"\n");
    let e = resolve(&args(&[]), &f, Some(Path::new("/etc/sluice/agent.toml")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("host_id"), "{e}");
    assert!(e.contains("--host-id"), "{e}");
    assert!(e.contains("/etc/sluice/agent.toml"), "{e}");
    let e = resolve(
        &args(&["--host-id", "1"]),
        &file("name = \"c\"\ncontroller = \"http://x\"\n"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("underlay_interface") && e.contains("--underlay"),
        "{e}"
    );
    assert!(e.contains("--config"), "{e}");
}

#[test]
fn an_impossible_vm_mtu_is_refused() {
    let f = file(&format!("{REQUIRED}vm_mtu = 20\n"));
    let e = resolve(&args(&[]), &f, None).unwrap_err().to_string();
    assert!(e.contains("vm_mtu 20"), "{e}");
}

#[test]
fn the_underlay_must_carry_the_vm_mtu_plus_geneve() {
    // 1500 + inner Ethernet 14 + Geneve 8 + chain/hop with clock 12 + UDP 8 + IPv4 20.
    assert_eq!(underlay_mtu_needed(1500, false, false), 1562);
    // + sealing: option 16 + tag 16.
    assert_eq!(underlay_mtu_needed(1500, false, true), 1594);
    // + Seawall's sequence option 16.
    assert_eq!(underlay_mtu_needed(1500, true, true), 1610);
    assert_eq!(check_mtu("eth1", 1594, 1500, false, true), Ok(()));
    assert_eq!(check_mtu("eth1", 9000, 1500, true, true), Ok(()));
    assert_eq!(check_mtu("eth1", 1562, 1500, false, false), Ok(()));
    let e = check_mtu("eth1", 1593, 1500, false, true).unwrap_err();
    assert_eq!((e.needed, e.vm_max), (1594, 1499));
    let m = e.to_string();
    for part in [
        "eth1",
        "MTU 1593",
        "MTU 1500",
        "need 1594",
        "at most 1499",
        "sealing 32",
    ] {
        assert!(m.contains(part), "{part:?} not in {m}");
    }
    // The common mistake: a 1500-byte underlay under 1500-byte VMs.
    let e = check_mtu("eth1", 1500, 1500, false, true).unwrap_err();
    assert_eq!((e.needed, e.vm_max), (1594, 1406));
}

/// The shipped file with every `# key = value` line uncommented.
fn shipped_uncommented() -> String {
    include_str!("../../../../packaging/etc/agent.toml")
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("# ")?;
            let key = l.split(" = ").next()?;
            (l.contains(" = ") && key.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                .then(|| l.to_string())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_shipped_file_parses_and_shows_every_setting_with_its_default() {
    let shipped = include_str!("../../../../packaging/etc/agent.toml");
    // As shipped (all commented out) it parses.
    assert_eq!(file(shipped), AgentFile::default());
    let text = shipped_uncommented();
    let full = file(&text);
    // Every flag but --config is in the file.
    let cmd = <Cli as clap::CommandFactory>::command();
    for a in cmd.get_arguments() {
        let key = a.get_id().as_str();
        if key == "config" || key == "check_config" || key == "help" {
            continue;
        }
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{key} = "))),
            "the shipped agent.toml lacks {key}"
        );
    }
    // What it shows as defaults are the defaults.
    let required = AgentFile {
        host_id: full.host_id,
        name: full.name.clone(),
        controller: full.controller.clone(),
        token_file: full.token_file.clone(),
        ca_file: full.ca_file.clone(),
        underlay_interface: full.underlay_interface.clone(),
        underlay: full.underlay,
        ..AgentFile::default()
    };
    assert_eq!(
        resolve(&args(&[]), &full, None).unwrap(),
        resolve(&args(&[]), &required, None).unwrap()
    );
    assert_eq!(
        resolve(&args(&["--seawall"]), &full, None).unwrap(),
        resolve(&args(&["--seawall"]), &required, None).unwrap()
    );
}

#[test]
fn a_ca_file_needs_an_https_controller_and_a_certificate_in_it() {
    let e = resolve(&args(&["--ca-file", "/etc/ca.pem"]), &file(REQUIRED), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ca_file") && e.contains("https://"), "{e}");
    let https = REQUIRED.replace("http://", "https://");
    let s = resolve(&args(&["--ca-file", "/etc/ca.pem"]), &file(&https), None).unwrap();
    assert_eq!(s.ca_file, Some(PathBuf::from("/etc/ca.pem")));
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("ca.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let e = tls_trusting(&empty).unwrap_err().to_string();
    assert!(
        e.contains("ca.pem") && e.contains("no PEM certificate"),
        "{e}"
    );
    let e = tls_trusting(&dir.path().join("absent.pem"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent.pem"), "{e}");
}

#[test]
fn siem_sinks_come_from_the_file_or_the_flags_and_bad_ones_are_refused() {
    use crate::siem::{SyslogSink, Transport};
    let s = resolve(&args(&[]), &file(REQUIRED), None).unwrap();
    assert!(!s.siem.any(), "no sink by default");
    let f = file(&format!(
        "{REQUIRED}\nsiem_redis = \"redis://siem@127.0.0.1:6379?password_file=/etc/sluice/siem.pw\"\nsiem_syslog = \"udp://10.0.0.9:514\"\nsiem_queue = 50\n"
    ));
    let s = resolve(&args(&["--siem-syslog", "tcp://siem:6514"]), &f, None).unwrap();
    let r = s.siem.redis.unwrap();
    assert_eq!((r.stream.as_str(), r.maxlen), ("sluice:eve", 100_000));
    assert_eq!(
        s.siem.syslog,
        Some(SyslogSink {
            transport: Transport::Tcp,
            addr: "siem:6514".into()
        })
    );
    assert_eq!(s.siem.queue, 50);
    for (flags, needle) in [
        (&["--siem-syslog", "syslog://x:514"][..], "udp://HOST:PORT"),
        (&["--siem-redis", "valkey://x:1"][..], "redis://"),
        (
            &["--siem-redis", "redis://u:secret@x:1"][..],
            "u:<redacted>@x:1",
        ),
        (&["--siem-redis-stream", "a b"][..], "siem_redis_stream"),
        (&["--siem-queue", "0"][..], "siem_queue"),
    ] {
        let e = resolve(&args(flags), &file(REQUIRED), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{flags:?}: {e}");
        assert!(!e.contains("secret"), "{e}");
    }
}

#[test]
fn dataplane_threads_come_from_the_file_or_the_flag_and_0_is_the_cores() {
    let f = file(&format!("{REQUIRED}dataplane_threads = 4\n"));
    assert_eq!(
        resolve(&args(&[]), &f, None).unwrap().dataplane_threads,
        Some(4)
    );
    let s = resolve(&args(&["--dataplane-threads", "2"]), &f, None).unwrap();
    assert_eq!(s.dataplane_threads, Some(2), "the flag wins");
    let s = resolve(&args(&["--dataplane-threads", "0"]), &f, None).unwrap();
    assert_eq!(s.dataplane_threads, None, "0: the cores");
    assert_eq!(
        resolve(&args(&[]), &file(REQUIRED), None)
            .unwrap()
            .dataplane_threads,
        None
    );
    let e = resolve(&args(&["--dataplane-threads", "65"]), &f, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dataplane_threads 65") && e.contains("64"),
        "{e}"
    );
    let n = default_dataplane_threads();
    assert!((1..=crate::dataplane::MAX_SHARDS).contains(&n), "{n}");
}
