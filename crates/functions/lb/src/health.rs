//! Backend health as a clock-free state machine: the GWLB/haproxy model.
//!
//! Each backend has a [`Health`]: active checks (if configured) run every
//! `interval`, a check not answered within `timeout` fails, `rise`
//! consecutive successes bring a down backend up and `fall` consecutive
//! failures take an up one down. A passive signal (the backend's host is
//! down, as the controller sees it) takes it down at once, whatever the
//! checks say. An operator drain makes it [`BackendState::Draining`] (no new
//! connections, existing ones continue) until the deregistration delay
//! passes, then [`BackendState::Removed`] (out of consideration entirely).
//!
//! Nothing here reads a clock or sends a probe: the caller asks
//! [`Health::due`], sends the probe itself, reports [`Health::check_started`]
//! and [`Health::check_result`], and calls [`Health::poll`] so time-outs and
//! expiring drains are noticed. Times are nanoseconds on any monotonic clock.
//! Every call that may change the state returns the [`Transition`] it made.

pub use sluice_nf::BackendState;

/// How a backend is checked (per LB service; docs/FUNCTIONS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckParams {
    /// Time between the starts of two checks.
    pub interval_ns: u64,
    /// A check not answered within this long has failed.
    pub timeout_ns: u64,
    /// Consecutive successes that bring a down backend up.
    pub rise: u32,
    /// Consecutive failures that take an up backend down.
    pub fall: u32,
}

impl Default for CheckParams {
    /// haproxy's defaults: every 2 s, `rise 2`, `fall 3`; a 1 s timeout.
    fn default() -> Self {
        CheckParams {
            interval_ns: 2_000_000_000,
            timeout_ns: 1_000_000_000,
            rise: 2,
            fall: 3,
        }
    }
}

/// Default deregistration delay of a drain (AWS's is 300 s; Sluice's
/// backends are VMs on the same fabric, whose connections are short).
pub const DEFAULT_DEREGISTRATION_DELAY_NS: u64 = 30_000_000_000;

/// Why a backend changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// `n` consecutive checks failed (`timed_out`: the last one was not
    /// answered in time).
    ChecksFailed {
        /// Consecutive failures.
        n: u32,
        /// The last failure was a time-out.
        timed_out: bool,
    },
    /// `n` consecutive checks passed.
    ChecksPassed {
        /// Consecutive successes.
        n: u32,
    },
    /// The passive signal went down (true) or up again (false).
    Passive(bool),
    /// An operator drained it.
    Drained,
    /// Its deregistration delay passed.
    DelayPassed,
    /// An operator ended its drain.
    Undrained,
}

/// A change of a backend's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: BackendState,
    /// The state after.
    pub to: BackendState,
    /// Why.
    pub cause: Cause,
}

/// A drain under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// When it started.
    pub since_ns: u64,
    /// When its deregistration delay ends.
    pub until_ns: u64,
}

/// One backend's health (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    checks: Option<CheckParams>,
    /// What the checks say (true until they say otherwise: a restarted
    /// controller must not take a whole service down before its first checks).
    healthy: bool,
    /// Consecutive results that contradict `healthy`.
    streak: u32,
    next_check_ns: u64,
    in_flight: Option<u64>,
    passive_down: bool,
    drain: Option<Drain>,
    state: BackendState,
    since_ns: u64,
}

impl Health {
    /// A backend seen first at `now`: up, checked with `checks` (`None`: the
    /// passive signal and drains only), its first check due at once.
    pub fn new(checks: Option<CheckParams>, now: u64) -> Health {
        Health {
            checks,
            healthy: true,
            streak: 0,
            next_check_ns: now,
            in_flight: None,
            passive_down: false,
            drain: None,
            state: BackendState::Up,
            since_ns: now,
        }
    }

    /// The state as of the last call.
    pub fn state(&self) -> BackendState {
        self.state
    }

    /// Since when it has been in [`Health::state`].
    pub fn since_ns(&self) -> u64 {
        self.since_ns
    }

    /// What the checks say (true without checks).
    pub fn healthy(&self) -> bool {
        self.healthy
    }

    /// Whether the passive signal holds it down.
    pub fn passive_down(&self) -> bool {
        self.passive_down
    }

    /// The drain under way, if any.
    pub fn drain(&self) -> Option<Drain> {
        self.drain
    }

    /// The checks it runs.
    pub fn checks(&self) -> Option<CheckParams> {
        self.checks
    }

    /// Changes the checks (a new spec). Their verdict so far stands; the next
    /// check is due at once.
    pub fn set_checks(&mut self, checks: Option<CheckParams>, now: u64) -> Option<Transition> {
        if self.checks == checks {
            return None;
        }
        self.checks = checks;
        self.in_flight = None;
        self.streak = 0;
        self.next_check_ns = now;
        if checks.is_none() && !self.healthy {
            self.healthy = true;
            return self.settle(now, Cause::ChecksPassed { n: 0 });
        }
        None
    }

    /// Whether a check should start now (checks configured, none in flight,
    /// its time come, not removed).
    pub fn due(&self, now: u64) -> bool {
        self.checks.is_some()
            && self.in_flight.is_none()
            && now >= self.next_check_ns
            && self.state != BackendState::Removed
    }

    /// A check started at `now`.
    pub fn check_started(&mut self, now: u64) {
        if let Some(c) = self.checks {
            self.in_flight = Some(now);
            self.next_check_ns = now.saturating_add(c.interval_ns);
        }
    }

    /// The check in flight ended at `now`: `ok` (SYN-ACK, HTTP 2xx/3xx) or
    /// not (RST, refused). A result with no check in flight (one already
    /// timed out) is ignored.
    pub fn check_result(&mut self, now: u64, ok: bool) -> Option<Transition> {
        let started = self.in_flight.take()?;
        let c = self.checks?;
        if now.saturating_sub(started) >= c.timeout_ns {
            return self.count(now, false, true);
        }
        self.count(now, ok, false)
    }

    /// The result of a check that another component ran and timed (the
    /// agent of the backend's host; its interval and timeout are its own):
    /// counted at `now` against the thresholds. Ignored without checks.
    pub fn record(&mut self, now: u64, ok: bool, timed_out: bool) -> Option<Transition> {
        self.checks?;
        self.count(now, ok, timed_out && !ok)
    }

    /// Notices what time alone changes: a check in flight past its timeout
    /// fails, a drain past its deregistration delay ends in removal.
    pub fn poll(&mut self, now: u64) -> Option<Transition> {
        if let (Some(started), Some(c)) = (self.in_flight, self.checks) {
            if now.saturating_sub(started) >= c.timeout_ns {
                self.in_flight = None;
                if let Some(t) = self.count(now, false, true) {
                    return Some(t);
                }
            }
        }
        self.settle(now, Cause::DelayPassed)
    }

    /// The passive signal at `now`: `down` while the backend's host is down.
    pub fn set_passive_down(&mut self, down: bool, now: u64) -> Option<Transition> {
        if self.passive_down == down {
            return None;
        }
        self.passive_down = down;
        self.settle(now, Cause::Passive(down))
    }

    /// An operator drains it at `now` for `delay_ns`. Draining again keeps
    /// the first drain's start and moves its end to `now + delay_ns`.
    pub fn start_drain(&mut self, now: u64, delay_ns: u64) -> Option<Transition> {
        let since_ns = self.drain.map_or(now, |d| d.since_ns);
        self.drain = Some(Drain {
            since_ns,
            until_ns: now.saturating_add(delay_ns),
        });
        self.settle(now, Cause::Drained)
    }

    /// An operator ends its drain (or its removal) at `now`.
    pub fn undrain(&mut self, now: u64) -> Option<Transition> {
        self.drain.take()?;
        self.settle(now, Cause::Undrained)
    }

    fn count(&mut self, now: u64, ok: bool, timed_out: bool) -> Option<Transition> {
        let c = self.checks?;
        if ok == self.healthy {
            self.streak = 0;
            return None;
        }
        self.streak += 1;
        let need = if ok { c.rise } else { c.fall }.max(1);
        if self.streak < need {
            return None;
        }
        let n = self.streak;
        self.streak = 0;
        self.healthy = ok;
        let cause = if ok {
            Cause::ChecksPassed { n }
        } else {
            Cause::ChecksFailed { n, timed_out }
        };
        self.settle(now, cause)
    }

    /// The state at `now` from the inputs, in precedence order: an
    /// operator's drain over health (the operator's intent shows; both take
    /// no new connections), the passive signal with the checks.
    fn eval(&self, now: u64) -> BackendState {
        match self.drain {
            Some(d) if now >= d.until_ns => BackendState::Removed,
            Some(_) => BackendState::Draining,
            None if self.passive_down || !self.healthy => BackendState::Down,
            None => BackendState::Up,
        }
    }

    fn settle(&mut self, now: u64, cause: Cause) -> Option<Transition> {
        let to = self.eval(now);
        if to == self.state {
            return None;
        }
        let t = Transition {
            from: self.state,
            to,
            cause,
        };
        self.state = to;
        self.since_ns = now;
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn checked() -> Health {
        Health::new(Some(CheckParams::default()), 0)
    }

    /// Runs one check started at `at`, answered `ok` after 10 ms.
    fn check(h: &mut Health, at: u64, ok: bool) -> Option<Transition> {
        assert!(h.due(at), "a check is due at {at}");
        h.check_started(at);
        assert!(!h.due(at), "one check at a time");
        h.check_result(at + 10 * MS, ok)
    }

    #[test]
    fn a_new_backend_is_up_and_checked_at_once() {
        let h = checked();
        assert_eq!(h.state(), BackendState::Up);
        assert!(h.due(0));
        let passive = Health::new(None, 0);
        assert!(!passive.due(0), "no checks configured, none due");
    }

    #[test]
    fn fall_failures_in_a_row_take_it_down_and_rise_successes_bring_it_back() {
        let mut h = checked();
        assert_eq!(check(&mut h, 0, false), None);
        assert_eq!(check(&mut h, 2 * S, false), None);
        assert!(!h.due(3 * S), "the next check waits for the interval");
        let t = check(&mut h, 4 * S, false).expect("third failure: down");
        assert_eq!(
            t,
            Transition {
                from: BackendState::Up,
                to: BackendState::Down,
                cause: Cause::ChecksFailed {
                    n: 3,
                    timed_out: false
                }
            }
        );
        assert_eq!(h.state(), BackendState::Down);
        assert_eq!(h.since_ns(), 4 * S + 10 * MS);
        assert_eq!(check(&mut h, 6 * S, true), None);
        let t = check(&mut h, 8 * S, true).expect("second success: up");
        assert_eq!(t.to, BackendState::Up);
        assert_eq!(t.cause, Cause::ChecksPassed { n: 2 });
    }

    #[test]
    fn a_success_between_failures_restarts_the_count() {
        let mut h = checked();
        check(&mut h, 0, false);
        check(&mut h, 2 * S, false);
        check(&mut h, 4 * S, true);
        assert_eq!(check(&mut h, 6 * S, false), None);
        assert_eq!(check(&mut h, 8 * S, false), None);
        assert_eq!(h.state(), BackendState::Up);
        assert!(check(&mut h, 10 * S, false).is_some());
    }

    #[test]
    fn an_unanswered_check_fails_at_its_timeout() {
        let mut h = checked();
        for k in 0..3u64 {
            let at = 2 * S * k;
            h.check_started(at);
            assert_eq!(h.poll(at + 999 * MS), None, "not yet timed out");
            let t = h.poll(at + S);
            if k < 2 {
                assert_eq!(t, None);
            } else {
                assert_eq!(
                    t.map(|t| t.cause),
                    Some(Cause::ChecksFailed {
                        n: 3,
                        timed_out: true
                    })
                );
            }
            // A late answer to a timed-out check changes nothing.
            assert_eq!(h.check_result(at + S + MS, true), None);
        }
        assert_eq!(h.state(), BackendState::Down);
    }

    #[test]
    fn a_slow_success_counts_as_a_failure() {
        let mut h = Health::new(
            Some(CheckParams {
                fall: 1,
                ..CheckParams::default()
            }),
            0,
        );
        h.check_started(0);
        let t = h
            .check_result(S, true)
            .expect("answered at the timeout: failed");
        assert_eq!(t.to, BackendState::Down);
    }

    #[test]
    fn the_passive_signal_acts_at_once_and_checks_cannot_override_it() {
        let mut h = checked();
        let t = h.set_passive_down(true, 5 * S).expect("host down: down");
        assert_eq!((t.to, t.cause), (BackendState::Down, Cause::Passive(true)));
        for k in 0..3 {
            assert_eq!(check(&mut h, 6 * S + 2 * S * k, true), None);
        }
        assert_eq!(h.state(), BackendState::Down);
        let t = h.set_passive_down(false, 20 * S).expect("host back: up");
        assert_eq!(t.to, BackendState::Up);
        assert_eq!(h.set_passive_down(false, 21 * S), None, "no change twice");
    }

    #[test]
    fn a_drain_ends_in_removal_after_its_delay_and_undrain_restores_health() {
        let mut h = Health::new(None, 0);
        let t = h.start_drain(10 * S, 30 * S).expect("draining");
        assert_eq!((t.from, t.to), (BackendState::Up, BackendState::Draining));
        assert_eq!(h.poll(39 * S), None);
        let t = h.poll(40 * S).expect("delay passed: removed");
        assert_eq!((t.to, t.cause), (BackendState::Removed, Cause::DelayPassed));
        assert_eq!(h.poll(41 * S), None);
        h.set_passive_down(true, 42 * S);
        assert_eq!(h.state(), BackendState::Removed, "a drain outranks health");
        let t = h.undrain(43 * S).expect("undrained");
        assert_eq!((t.to, t.cause), (BackendState::Down, Cause::Undrained));
        assert_eq!(h.undrain(44 * S), None, "nothing to undrain");
    }

    #[test]
    fn draining_again_keeps_the_start_and_moves_the_end() {
        let mut h = Health::new(None, 0);
        h.start_drain(0, 10 * S);
        assert_eq!(h.start_drain(5 * S, 10 * S), None);
        assert_eq!(
            h.drain(),
            Some(Drain {
                since_ns: 0,
                until_ns: 15 * S
            })
        );
        assert_eq!(h.poll(14 * S), None);
        assert_eq!(h.poll(15 * S).map(|t| t.to), Some(BackendState::Removed));
        // A zero delay removes at once.
        let mut z = Health::new(None, 0);
        assert_eq!(
            z.start_drain(S, 0).map(|t| t.to),
            Some(BackendState::Removed)
        );
    }

    #[test]
    fn results_recorded_from_a_remote_prober_count_against_the_thresholds() {
        let mut h = checked();
        assert_eq!(h.record(S, false, false), None);
        assert_eq!(h.record(2 * S, false, false), None);
        let t = h.record(3 * S, false, true).expect("third failure: down");
        assert_eq!(
            t.cause,
            Cause::ChecksFailed {
                n: 3,
                timed_out: true
            }
        );
        assert_eq!(h.record(4 * S, true, false), None);
        assert_eq!(
            h.record(5 * S, true, false).map(|t| t.to),
            Some(BackendState::Up)
        );
        let mut none = Health::new(None, 0);
        for k in 0..5 {
            assert_eq!(
                none.record(k * S, false, false),
                None,
                "no checks configured"
            );
        }
        assert_eq!(none.state(), BackendState::Up);
    }

    #[test]
    fn a_removed_backend_is_not_checked() {
        let mut h = checked();
        h.start_drain(0, 0);
        assert!(!h.due(10 * S));
    }

    #[test]
    fn dropping_the_checks_forgets_their_verdict() {
        let mut h = Health::new(
            Some(CheckParams {
                fall: 1,
                ..CheckParams::default()
            }),
            0,
        );
        check(&mut h, 0, false);
        assert_eq!(h.state(), BackendState::Down);
        let t = h.set_checks(None, S).expect("no checks: up");
        assert_eq!(t.to, BackendState::Up);
        assert!(!h.due(10 * S));
    }
}
