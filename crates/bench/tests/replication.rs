//! A firewall's connections survive the death of the store primary holding
//! their records: with writes waiting for a replica, the replica that takes
//! over has every record, and no established connection's packet is dropped
//! once the store answers again (real redis-server processes).

use sluice_bench::replication::failover;

#[test]
fn no_established_connection_loses_its_record_when_a_primary_dies() {
    let dir = tempfile::tempdir().unwrap();
    let row = failover(dir.path(), 1, true).expect("run the failover trace");
    assert!(row.killed && row.recovery_ms.is_some(), "{row:?}");
    assert!(
        row.dropped.is_empty(),
        "packets after the failover dropped: {:?}",
        row.dropped
    );
}
