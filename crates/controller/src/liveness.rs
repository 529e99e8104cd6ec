//! How often agents heartbeat, and how long a host may stay silent, as the
//! fleet grows (sans-IO: functions of the fleet's size and of intervals, no
//! clock).
//!
//! Every heartbeat is a request to one controller. At a fixed 50 ms, 5,000
//! hosts would send 100,000 a second; instead the controller spends a fixed
//! budget ([`HEARTBEAT_BUDGET_PER_S`]) on them and tells each agent, in its
//! heartbeat's answer (`heartbeat_ms`), the interval that keeps the fleet
//! within it: [`heartbeat_interval`]. A host is taken for silent after
//! [`SILENT_BEATS`] of the intervals it may be using ([`silent_after`]), so a
//! small fleet keeps the 50 ms and 300 ms it always had, and a large one
//! detects a dead agent in seconds instead of milliseconds (~37 s at 5,000
//! hosts): the price of the budget. Instance failures are not slowed by it
//! (their agent moves their flows locally, and heartbeats at once when the
//! health it reports changes); faster host failure detection at scale is for
//! peer-to-peer probing between agents, with the controller told only of
//! changes.

use std::time::Duration;

use sluice_proto::{HEARTBEAT_MAX, HEARTBEAT_MIN};

use crate::reconcile::{HOST_GRACE, HOST_SILENT};

/// Heartbeats per second the controller budgets for, all agents together:
/// 80% of the 1,000 requests/s the controller is sized to take from its fleet
/// (issue 25), leaving the rest for the heartbeats agents send early (a new
/// configuration applied, an instance's health changed) and for jitter. A
/// heartbeat costs the controller ~0.13 ms (release build), so the budget is
/// about a tenth of a core.
pub const HEARTBEAT_BUDGET_PER_S: u64 = 800;

/// Heartbeats a host may miss before it is taken for silent (300 ms at 50 ms):
/// enough that a delayed or lost request or two does not fail a live host over.
pub const SILENT_BEATS: u32 = 6;

/// The interval a fleet of `hosts` heartbeats at: one agent every 50 ms
/// ([`HEARTBEAT_MIN`]) until the fleet would exceed
/// [`HEARTBEAT_BUDGET_PER_S`] (40 hosts), then `hosts / budget` seconds
/// (rounded up to the millisecond), at most [`HEARTBEAT_MAX`] (reached at
/// 8,000 hosts; a larger fleet exceeds the budget).
pub fn heartbeat_interval(hosts: usize) -> Duration {
    let ms = (hosts as u64)
        .saturating_mul(1000)
        .div_ceil(HEARTBEAT_BUDGET_PER_S);
    Duration::from_millis(ms).clamp(HEARTBEAT_MIN, HEARTBEAT_MAX)
}

/// How long a host heartbeating every `interval` may be unheard before its
/// instances are taken out: [`SILENT_BEATS`] intervals ([`HOST_SILENT`] at the
/// shortest). The caller passes the longest interval the host may be using:
/// the one it was last told or the fleet's current one, whichever is longer
/// (a host told a longer interval before the fleet shrank still sleeps by it).
pub fn silent_after(interval: Duration) -> Duration {
    (interval * SILENT_BEATS).max(HOST_SILENT)
}

/// How long a host heartbeating every `interval` may be unheard before it is
/// taken for dead and its instances are placed elsewhere: [`HOST_GRACE`] at the
/// shortest interval, and always the same 9.7 s past [`silent_after`].
pub fn dead_after(interval: Duration) -> Duration {
    silent_after(interval) + HOST_GRACE.saturating_sub(HOST_SILENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_small_fleet_keeps_50_ms_and_300_ms() {
        for n in [0, 1, 3, 40] {
            assert_eq!(heartbeat_interval(n), 50 * MS, "{n} hosts");
        }
        assert_eq!(silent_after(heartbeat_interval(3)), HOST_SILENT);
        assert_eq!(dead_after(heartbeat_interval(3)), HOST_GRACE);
    }

    #[test]
    fn a_large_fleet_stays_within_the_budget() {
        assert_eq!(heartbeat_interval(41), 52 * MS, "rounded up");
        assert_eq!(heartbeat_interval(1000), 1250 * MS);
        assert_eq!(heartbeat_interval(5000), 6250 * MS);
        for n in [41, 100, 999, 1000, 4000, 5000, 8000] {
            let per_s = n as f64 / heartbeat_interval(n).as_secs_f64();
            assert!(
                per_s <= HEARTBEAT_BUDGET_PER_S as f64,
                "{n} hosts: {per_s}/s"
            );
        }
        assert_eq!(silent_after(heartbeat_interval(5000)), 37_500 * MS);
        assert!(dead_after(heartbeat_interval(5000)) > silent_after(heartbeat_interval(5000)));
    }

    #[test]
    fn the_interval_is_capped() {
        assert_eq!(heartbeat_interval(8000), HEARTBEAT_MAX);
        assert_eq!(heartbeat_interval(1_000_000), HEARTBEAT_MAX);
        assert_eq!(heartbeat_interval(usize::MAX), HEARTBEAT_MAX);
    }

    #[test]
    fn the_interval_never_shrinks_as_the_fleet_grows() {
        let mut last = Duration::ZERO;
        for n in 0..10_000 {
            let i = heartbeat_interval(n);
            assert!(i >= last, "{n} hosts");
            last = i;
        }
    }
}
