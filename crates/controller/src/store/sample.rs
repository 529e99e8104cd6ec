//! A desired state with a row in every table of the stores, for their tests.

use sluice_proto::VmRegistration;
use sluice_tenant::TenantSpec;

use crate::desired::{Desired, Host};

/// The Figure 4 tenant on two hosts, mid fabric-key rotation, with a
/// contained host, a pardon, a backend drain and an instance drain: every
/// table has rows.
pub(crate) fn sample() -> (Desired, sluice_chain::Registry) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    let reg = sluice_builtin::registry();
    let spec = TenantSpec::parse(&text, "f4", Some(&reg)).unwrap();
    let mut d = Desired::default();
    for h in 1..=2u32 {
        d.hosts.insert(
            h,
            Host {
                id: h,
                name: format!("h{h}"),
                underlay: std::net::Ipv4Addr::new(10, 255, 0, h as u8),
                api: "http://127.0.0.1:1".into(),
                capacity: (h == 2).then(|| sluice_proto::HostCapacity {
                    instance_slots: Some(8),
                    rack: Some("r2".into()),
                    ..sluice_proto::HostCapacity::default()
                }),
            },
        );
    }
    for (n, a, g) in [
        ("gateway", "198.51.100.10", true),
        ("web-a1", "10.10.1.11", false),
        ("web-a2", "10.10.1.12", false),
        ("web-b1", "10.10.2.11", false),
        ("web-b2", "10.10.2.12", false),
    ] {
        d.register_vm(VmRegistration {
            tenant: "acme".into(),
            name: n.into(),
            host: 1 + (n.len() as u32 % 2),
            iface: format!("if-{n}"),
            mac: "02:00:00:00:00:09".into(),
            addr: a.parse().unwrap(),
            gateway: g,
        })
        .unwrap();
    }
    d.apply_tenant(&text, spec).unwrap();
    // Mid-rotation: both secrets, and which one hosts seal with.
    let mut f = crate::fabric::FabricSecret::new([3; 32]);
    f.rotate([4; 32]);
    d.fabric = Some(f);
    d.contained.insert(2);
    d.cordoned.insert(1);
    d.pardons.insert(3, 2);
    d.backend_drains.insert(
        ("acme".into(), "lb-a".into(), "10.10.1.11".into()),
        1_700_000_000_000,
    );
    // One instance draining under an operator's drain.
    let k = d
        .instances
        .keys()
        .next()
        .expect("figure 4 has instances")
        .clone();
    d.drain_instance(&k, 1_700_000_030_000);
    (d, reg)
}
