//! EVE `category` and `severity` from a classification file, as Suricata
//! writes them: the classtype's description, and its priority unless the rule
//! sets its own; a rule naming a classtype the file lacks is refused.

use std::path::Path;

use sluice_ips::rules::RuleSyntax;
use sluice_ips::{build, Config, ConfigError, Ips};
use sluice_nf::{Alert, Ctx, Event, NetworkFunction, Streams};
use sluice_packet::{Batch, PacketPool};
use sluice_state::{LocalStore, Namespace};
use sluice_wire::build::udp_v4;
use sluice_wire::parse::parse_frame;

/// Our own lines in Suricata's format (its file is GPL reference data, read
/// below only where present).
const CLASSES: &str = "\
# config classification:shortname,short description,priority
config classification: trojan-activity,A Network Trojan was detected, 1
config classification: policy-violation,Potential Corporate Privacy Violation,1
config classification: misc-activity,Misc activity,3
";

fn ips_with(dir: &Path, file: Option<&str>, rules: &[&str]) -> Result<Ips, ConfigError> {
    let cfg = Config {
        rule_files: vec![],
        rules: rules.iter().map(|s| s.to_string()).collect(),
        vars: Default::default(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: file.map(Into::into),
        http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
        data_dir: None,
        dataset_dirs: vec![],
    };
    build(&cfg, Namespace(2), dir)
}

/// The alerts one UDP datagram carrying `payload` raises.
fn alerts(ips: &mut Ips, payload: &[u8]) -> Vec<Alert> {
    let mut pool = PacketPool::new(4);
    let mut b = Batch::with_capacity(1);
    b.push_frame(
        &mut pool,
        &udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 4000, 53, payload),
        1_000,
        0,
    );
    for p in &mut b.pkts {
        p.meta = parse_frame(p.data()).unwrap();
    }
    let (mut events, mut emit) = (Vec::new(), Vec::new());
    let streams = Streams::default();
    let mut ctx = Ctx {
        now_ns: 2_000,
        stage: 1,
        streams: &streams,
        events: &mut events,
        emit: &mut emit,
    };
    ips.process(&mut b, &mut ctx, &mut LocalStore::new())
        .unwrap();
    events
        .into_iter()
        .filter_map(|e| match e {
            Event::Alert(a) => Some(a),
            Event::Flow(_) => None,
        })
        .collect()
}

const RULES: &[&str] = &[
    r#"alert udp any any -> any any (msg:"trojan"; content:"evil"; classtype:trojan-activity; sid:1;)"#,
    r#"alert udp any any -> any any (msg:"own priority"; content:"odd"; classtype:misc-activity; priority:2; sid:2;)"#,
    r#"alert udp any any -> any any (msg:"no class"; content:"bare"; sid:3;)"#,
];

#[test]
fn category_and_severity_come_from_the_classification_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("classification.config"), CLASSES).unwrap();
    let mut ips = ips_with(dir.path(), Some("classification.config"), RULES).unwrap();
    assert!(ips.warnings().is_empty(), "{:?}", ips.warnings());
    let a = alerts(&mut ips, b"an evil odd bare payload");
    let by_sid = |sid| a.iter().find(|x| x.sid == sid).unwrap();
    assert_eq!(
        by_sid(1).category.as_deref(),
        Some("A Network Trojan was detected")
    );
    assert_eq!(by_sid(1).severity, 1);
    // The rule's own priority wins over its classtype's.
    assert_eq!(by_sid(2).category.as_deref(), Some("Misc activity"));
    assert_eq!(by_sid(2).severity, 2);
    assert_eq!(
        (by_sid(3).category.as_deref(), by_sid(3).severity),
        (None, 3)
    );

    // Without the file: the short name, the rule's priority or 3.
    let mut plain = ips_with(dir.path(), None, RULES).unwrap();
    let a = alerts(&mut plain, b"evil");
    assert_eq!(a[0].category.as_deref(), Some("trojan-activity"));
    assert_eq!(a[0].severity, 3);
}

#[test]
fn unknown_classtypes_are_refused_and_bad_files_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.config"), CLASSES).unwrap();
    let ips = ips_with(
        dir.path(),
        Some("c.config"),
        &[
            RULES[0],
            r#"alert udp any any -> any any (msg:"x"; content:"x"; classtype:made-up; sid:9;)"#,
        ],
    )
    .unwrap();
    assert_eq!(ips.warnings().len(), 1);
    assert_eq!(
        ips.warnings()[0].msg,
        RuleSyntax::UnknownClasstype("made-up".into())
    );
    std::fs::write(
        dir.path().join("bad.config"),
        "config classification: a,b,high\n",
    )
    .unwrap();
    let e = ips_with(dir.path(), Some("bad.config"), RULES)
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("bad.config") && msg.contains("line 1"),
        "{msg}"
    );
    let e = ips_with(dir.path(), Some("missing.config"), RULES)
        .err()
        .unwrap();
    assert!(e.to_string().contains("missing.config"), "{e}");
}

/// Suricata's own list, where the shared data is present: every classtype
/// parses, and ET Open's common ones are in it.
#[test]
fn suricatas_classification_file_loads() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/data/suricata/classification.config");
    let Ok(text) = std::fs::read_to_string(&p) else {
        eprintln!("skipped: {} is not here", p.display());
        return;
    };
    let c = sluice_ips::classification::Classes::parse(&text).unwrap();
    assert!(c.0.len() > 30, "{}", c.0.len());
    assert_eq!(c.0["trojan-activity"].priority, 1);
    assert_eq!(&*c.0["bad-unknown"].description, "Potentially Bad Traffic");
}
