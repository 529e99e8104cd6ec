//! "Any packet to any instance" for the header-rewriting functions (NAT and the
//! load balancer): the server side answers the addresses the chain actually sent
//! (the NAT's public address and port, the backend the LB chose), so the trace is
//! built as it is processed. One instance with local state and 2-4 instances
//! sharing Redis, sprayed and asymmetric, must produce identical bytes, and every
//! return packet must come back to the client from the address it first contacted,
//! with checksums that verify.

use sluice_state::{LocalStore, StateStore};
use sluice_state_redis::server::{flushall, RedisServer};
use sluice_state_redis::RedisStore;
use sluice_trafficgen::Rng;
use sluice_wire::parse::parse_frame;
use sluice_wire::IpAddr;

mod rewrite_traffic;
mod steering;
use rewrite_traffic::*;

/// Chooses the instance of step `i` given its frame and which instances live.
type Picker = dyn Fn(usize, &[u8], &[bool]) -> usize;

/// Runs the conversations through instances of `chain` on `stores`, `pick`
/// choosing the instance of each step.
fn run_picked(
    chain: &str,
    stores: Vec<Box<dyn StateStore>>,
    servers: &[(IpAddr, u16)],
    pick: &Picker,
) -> Outcome {
    run(
        instances(chain, stores),
        servers,
        &mut |pos, f, _, alive| pick(pos.index(), f, alive),
    )
}

fn spray(seed: u64) -> impl Fn(usize, &[u8], &[bool]) -> usize {
    move |i, _, alive| {
        Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9)).below(alive.len() as u64) as usize
    }
}

/// Packets from the inside (10/8) on one instance, from the outside on another.
fn asymmetric(_: usize, f: &[u8], alive: &[bool]) -> usize {
    let inside = parse_frame(f)
        .map(|m| m.flow.src.as_bytes()[0] == 10)
        .unwrap_or(true);
    usize::from(!inside) % alive.len()
}

/// `rewritten`: how many packets the chain must translate (the LB's services are
/// TCP, so it leaves UDP and pings to a VIP alone).
fn check(chain: &str, servers: &[(IpAddr, u16)], rewritten: usize) {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    check_with(chain, servers, rewritten, &srv, &srv.url());
}

/// [`check`] with instances connecting to `srv` by `url`.
fn check_with(
    chain: &str,
    servers: &[(IpAddr, u16)],
    rewritten: usize,
    srv: &RedisServer,
    url: &str,
) {
    let want = run_picked(
        chain,
        vec![Box::new(LocalStore::new())],
        servers,
        &|_, _, _| 0,
    );
    let passed = want.packets.iter().filter(|p| p.0).count();
    assert_eq!(want.packets.len(), 384);
    assert!(
        passed == want.packets.len(),
        "every packet of these conversations passes: {passed}"
    );
    assert_eq!(want.rewritten, rewritten, "translated packets");
    assert!(
        want.records.len() >= 60,
        "every conversation is exported: {}",
        want.records.len()
    );
    for n in [2usize, 3, 4] {
        for (name, pick) in [
            ("sprayed", &spray(n as u64) as &Picker),
            ("asymmetric", &asymmetric as &Picker),
        ] {
            let stores: Vec<Box<dyn StateStore>> = (0..n)
                .map(|_| Box::new(RedisStore::open(url).unwrap()) as Box<dyn StateStore>)
                .collect();
            let got = run_picked(chain, stores, servers, pick);
            same(&got, &want, &format!("{n} instances, {name}"));
            flushall(srv.port()).unwrap();
        }
    }
}

#[test]
fn nat_instances_behave_as_one() {
    check(NAT_CHAIN, &NAT_SERVERS, 384);
}

#[test]
fn lb_instances_behave_as_one() {
    check(LB_CHAIN, &LB_SERVERS, 324);
}

/// The NAT through a tenant's store user, confined to its key prefix: every
/// operation the NAT needs (mappings, port pools, timers) is allowed, and a
/// refused one would show as a store error or a changed packet.
#[test]
fn nat_instances_behave_as_one_as_a_tenant_store_user() {
    use sluice_state_redis::acl::{tenant_prefix, tenant_user, Admin};
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let pw = "nat-tenant-pw";
    let mut admin = Admin::open(&srv.url()).unwrap();
    admin
        .set_tenant_user("acme", &sluice_state_redis::Secret::new(pw))
        .unwrap();
    // A tenant's user may not load the backend's functions: the admin does.
    admin.load_library().unwrap();
    let file = std::env::temp_dir().join(format!("sluice-nat-acl-{}", std::process::id()));
    std::fs::write(&file, pw).unwrap();
    let url = format!(
        "redis://{}@127.0.0.1:{}?prefix={}&password_file={}",
        tenant_user("acme"),
        srv.port(),
        tenant_prefix("acme"),
        file.display()
    );
    check_with(NAT_CHAIN, &NAT_SERVERS, 384, &srv, &url);
    std::fs::remove_file(&file).unwrap();
}
