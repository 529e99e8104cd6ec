//! `sluice bench instance` on a private redis-server: every mode lets the same
//! frames through, and the pipelined runs really pipeline.

use sluice_bench::instance::{run, table, Options};
use sluice_state_redis::server::RedisServer;

#[test]
fn the_instance_benchmark_runs_every_mode_to_the_same_outcome() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let opts = Options {
        state: Some(srv.url()),
        filter: None,
        packets: 4_000,
        window: 128,
        reps: 1,
    };
    let ms = run(&opts, &mut |_| {}).unwrap();
    let names: Vec<&str> = ms.iter().map(|m| m.function.as_str()).collect();
    assert_eq!(names, ["firewall", "nat", "lb", "ips", "monitor"]);
    for m in &ms {
        assert_eq!(m.packets, 4_000, "{m:?}");
        assert!(m.forwarded[0] > 0, "{m:?}");
        assert_eq!(m.forwarded[0], m.forwarded[1], "cached: {m:?}");
        assert_eq!(m.forwarded[0], m.forwarded[2], "pipelined: {m:?}");
        // Four windows of 128 packets in batches of 32.
        assert_eq!(m.window, 128, "{m:?}");
        // Input idles once, at the end, with batches in flight.
        assert_eq!(m.idle_flushes, 1, "{m:?}");
        assert!(m.local_mpps > 0.0 && m.cached_mpps > 0.0 && m.pipelined_mpps > 0.0);
    }
    let t = table(&ms);
    assert!(t.contains("firewall") && !t.contains(" NO\n"), "{t}");
}
