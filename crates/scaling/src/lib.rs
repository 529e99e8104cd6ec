//! Stratos's greedy middlebox scaling heuristic (§4.1.1), as a pure state machine.
//!
//! The scaler sees only an application-reported metric (requests/s, response time)
//! and the order of the middleboxes in a chain; it knows nothing of what the
//! middleboxes do. Fed metric samples with their times ([`Scaler::observe`]), it
//! answers with [`Decision`]s (add or remove one instance of a middlebox) that the
//! caller carries out, and logs an [`Event`] with the reason for every step.
//!
//! * **Trigger**: a sustained change of the metric (worse than the level it settled
//!   at by `trigger` for `sustain`, or worse than `target`) starts a scale-up; a
//!   sustained improvement of the same size starts a scale-down.
//! * **Scale up**: one trial instance of one middlebox at a time, along the chain;
//!   after `window` the trial is kept if the metric improved by at least
//!   `improve`, and the same middlebox is tried again; otherwise it is discarded
//!   and the next middlebox is tried. Passes repeat while one keeps an instance and
//!   the target (if any) is not met. If a pass keeps nothing and nothing was kept so
//!   far, a *scale-all* trial adds one instance of every middlebox at once; if that
//!   helps, it is kept and a scale-down pass removes what was not needed.
//! * **Scale down**: remove one instance at a time along the chain; re-add it if
//!   the metric drops by at least `improve`.
//! * The tenant's `budget` (total instances of the chain) is never exceeded; after
//!   scaling the scaler waits `cooldown` before it may trigger again.
//!
//! [`Strategy::None`] and [`Strategy::All`] are the paper's baselines (Table 2).
//! Time is whatever clock the caller uses, in nanoseconds; nothing here reads a
//! clock, so runs are deterministic and unit-testable.

use std::collections::BTreeMap;

/// Whether bigger metric values are better (throughput) or worse (latency).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Requests/s, goodput.
    HigherIsBetter,
    /// Response time.
    LowerIsBetter,
}

/// Which scaling policy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Stratos's greedy heuristic.
    Greedy,
    /// Never scale (baseline).
    None,
    /// Add (or remove) one instance of every middlebox at a time (baseline).
    All,
}

/// Tuning of the heuristic.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Policy.
    pub strategy: Strategy,
    /// How to read the metric.
    pub direction: Direction,
    /// Relative change that counts as an improvement (or a drop) in a trial, e.g. 0.1.
    pub improve: f64,
    /// Relative change from the settled level that triggers scaling, e.g. 0.25.
    pub trigger: f64,
    /// How long a change must last before it triggers, ns.
    pub sustain_ns: u64,
    /// How long a trial is observed, ns (the first `settle` fraction is ignored).
    pub window_ns: u64,
    /// Fraction of a window ignored while the new instance warms up (0..1).
    pub settle: f64,
    /// Pause after scaling before the next trigger, ns.
    pub cooldown_ns: u64,
    /// Most instances the chain's middleboxes may have in total.
    pub budget: u32,
    /// Metric value at which performance is suitable (optional); worse than this,
    /// sustained, also triggers scale-up, and passes stop once it is reached.
    pub target: Option<f64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            strategy: Strategy::Greedy,
            direction: Direction::HigherIsBetter,
            improve: 0.10,
            trigger: 0.25,
            sustain_ns: 5_000_000_000,
            window_ns: 10_000_000_000,
            settle: 0.3,
            cooldown_ns: 30_000_000_000,
            budget: 16,
            target: None,
        }
    }
}

/// A configuration or chain the scaler cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScalerError {
    /// The chain names no middlebox.
    #[error("the chain has no middlebox to scale")]
    EmptyChain,
    /// A middlebox appears twice.
    #[error("middlebox `{0}` appears twice in the chain")]
    Duplicate(String),
    /// A middlebox starts with no instance.
    #[error("middlebox `{0}` has no instance; every middlebox needs at least one")]
    NoInstance(String),
    /// A parameter is out of range.
    #[error("{0}")]
    BadConfig(String),
    /// The chain already exceeds the budget.
    #[error("the chain already has {have} instances, more than the budget of {budget}")]
    OverBudget {
        /// Instances now.
        have: u32,
        /// The budget.
        budget: u32,
    },
}

/// What the caller must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start one more instance of the middlebox.
    Add(String),
    /// Stop one instance of the middlebox.
    Remove(String),
}

/// One logged step, with its reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When, ns.
    pub at_ns: u64,
    /// What happened and why.
    pub what: String,
    /// Instances per middlebox after the step.
    pub counts: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Watching for a sustained change.
    Steady {
        /// When the current deviation began, and whether it is a degradation.
        deviating: Option<(u64, bool)>,
    },
    /// Observing a trial.
    Trial(Trial),
    /// Waiting before the next trigger.
    Cooldown { until_ns: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TrialKind {
    /// Measuring the level before a pass (scale up if true), changing nothing.
    Measure(bool),
    /// Added one instance of chain[i] (scale up).
    Up(usize),
    /// Added one of every middlebox.
    UpAll,
    /// Removed one instance of chain[i] (scale down).
    Down(usize),
    /// Removed one of every middlebox (the `All` baseline).
    DownAll,
}

#[derive(Debug, Clone, PartialEq)]
struct Trial {
    kind: TrialKind,
    started_ns: u64,
    /// The metric before the trial (mean of the last window).
    before: f64,
    sum: f64,
    n: u32,
}

/// The scaler of one chain.
#[derive(Debug, Clone)]
pub struct Scaler {
    cfg: Config,
    chain: Vec<String>,
    counts: BTreeMap<String, u32>,
    phase: Phase,
    /// The level the metric settled at after the last scaling (the trigger's
    /// reference), and a running mean of recent samples.
    settled: Option<f64>,
    recent: Recent,
    /// Pass bookkeeping.
    kept_this_pass: bool,
    kept_any: bool,
    tried_all: bool,
    events: Vec<Event>,
}

/// Mean of the samples of the last `window_ns`.
#[derive(Debug, Clone, Default)]
struct Recent {
    samples: std::collections::VecDeque<(u64, f64)>,
    sum: f64,
}

impl Recent {
    fn push(&mut self, t: u64, v: f64, window: u64) {
        self.samples.push_back((t, v));
        self.sum += v;
        while let Some(&(t0, v0)) = self.samples.front() {
            if t.saturating_sub(t0) > window {
                self.samples.pop_front();
                self.sum -= v0;
            } else {
                break;
            }
        }
    }

    fn mean(&self) -> Option<f64> {
        (!self.samples.is_empty()).then(|| self.sum / self.samples.len() as f64)
    }

    fn clear(&mut self) {
        self.samples.clear();
        self.sum = 0.0;
    }
}

impl Scaler {
    /// A scaler for a chain whose middleboxes (in chain order) have the given
    /// instance counts.
    pub fn new(cfg: Config, chain: &[(String, u32)]) -> Result<Scaler, ScalerError> {
        if chain.is_empty() {
            return Err(ScalerError::EmptyChain);
        }
        if !(0.0..10.0).contains(&cfg.improve) || cfg.improve == 0.0 {
            return Err(ScalerError::BadConfig(format!(
                "improve must be a positive fraction, not {}",
                cfg.improve
            )));
        }
        if cfg.trigger.is_nan()
            || cfg.trigger <= 0.0
            || !(0.0..1.0).contains(&cfg.settle)
            || cfg.window_ns == 0
        {
            return Err(ScalerError::BadConfig(
                "trigger must be > 0, settle in [0, 1) and window > 0".into(),
            ));
        }
        let mut counts = BTreeMap::new();
        for (m, c) in chain {
            if *c == 0 {
                return Err(ScalerError::NoInstance(m.clone()));
            }
            if counts.insert(m.clone(), *c).is_some() {
                return Err(ScalerError::Duplicate(m.clone()));
            }
        }
        let have: u32 = counts.values().sum();
        if have > cfg.budget {
            return Err(ScalerError::OverBudget {
                have,
                budget: cfg.budget,
            });
        }
        Ok(Scaler {
            cfg,
            chain: chain.iter().map(|c| c.0.clone()).collect(),
            counts,
            phase: Phase::Steady { deviating: None },
            settled: None,
            recent: Recent::default(),
            kept_this_pass: false,
            kept_any: false,
            tried_all: false,
            events: Vec::new(),
        })
    }

    /// Instances per middlebox as the scaler believes them to be.
    pub fn counts(&self) -> &BTreeMap<String, u32> {
        &self.counts
    }

    /// Every event so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// A trial or scaling pass is under way.
    pub fn scaling(&self) -> bool {
        matches!(self.phase, Phase::Trial(_))
    }

    /// `a` is better than `b` by at least the fraction `by`.
    fn better(&self, a: f64, b: f64, by: f64) -> bool {
        match self.cfg.direction {
            Direction::HigherIsBetter => a >= b * (1.0 + by),
            Direction::LowerIsBetter => a <= b * (1.0 - by).max(0.0),
        }
    }

    fn target_met(&self, v: f64) -> bool {
        match self.cfg.target {
            None => false,
            Some(t) => match self.cfg.direction {
                Direction::HigherIsBetter => v >= t,
                Direction::LowerIsBetter => v <= t,
            },
        }
    }

    fn log(&mut self, at_ns: u64, what: String) {
        self.events.push(Event {
            at_ns,
            what,
            counts: self.counts.clone(),
        });
    }

    fn total(&self) -> u32 {
        self.counts.values().sum()
    }

    /// Feeds one metric sample taken at `now_ns`; returns what to do now.
    pub fn observe(&mut self, now_ns: u64, metric: f64) -> Vec<Decision> {
        if !metric.is_finite() || self.cfg.strategy == Strategy::None {
            return Vec::new();
        }
        self.recent.push(now_ns, metric, self.cfg.window_ns);
        match self.phase.clone() {
            Phase::Cooldown { until_ns } => {
                if now_ns >= until_ns {
                    self.settled = self.recent.mean();
                    self.phase = Phase::Steady { deviating: None };
                }
                Vec::new()
            }
            Phase::Steady { deviating } => self.steady(now_ns, metric, deviating),
            Phase::Trial(mut t) => {
                let elapsed = now_ns.saturating_sub(t.started_ns);
                if (elapsed as f64) >= self.cfg.settle * self.cfg.window_ns as f64 {
                    t.sum += metric;
                    t.n += 1;
                }
                if elapsed >= self.cfg.window_ns && t.n > 0 {
                    let after = t.sum / t.n as f64;
                    self.finish_trial(now_ns, t, after)
                } else {
                    self.phase = Phase::Trial(t);
                    Vec::new()
                }
            }
        }
    }

    fn steady(&mut self, now: u64, metric: f64, deviating: Option<(u64, bool)>) -> Vec<Decision> {
        let Some(level) = self.settled else {
            // The first window sets the reference level.
            if let Some(&(t0, _)) = self.recent.samples.front() {
                if now.saturating_sub(t0) >= self.cfg.sustain_ns {
                    self.settled = self.recent.mean();
                }
            }
            return Vec::new();
        };
        let worse = self.better(level, metric, self.cfg.trigger)
            || (self.cfg.target.is_some() && !self.target_met(metric));
        let improved = self.better(metric, level, self.cfg.trigger);
        let dev = if worse {
            Some(true)
        } else if improved {
            Some(false)
        } else {
            None
        };
        match (dev, deviating) {
            (None, _) => {
                self.phase = Phase::Steady { deviating: None };
                Vec::new()
            }
            (Some(d), Some((since, d0))) if d == d0 => {
                if now.saturating_sub(since) < self.cfg.sustain_ns {
                    return Vec::new();
                }
                let before = self.recent.mean().unwrap_or(metric);
                let secs = (now - since) as f64 / 1e9;
                let why = if d {
                    format!("metric {before:.3} worse than settled {level:.3} (or the target) for {secs:.1} s")
                } else {
                    format!("metric {before:.3} better than settled {level:.3} for {secs:.1} s")
                };
                self.begin(now, d, &why)
            }
            (Some(d), _) => {
                self.phase = Phase::Steady {
                    deviating: Some((now, d)),
                };
                Vec::new()
            }
        }
    }

    /// Starts a scale-up (`up`) or scale-down pass now, whatever the metric did:
    /// for callers that know more (the load halved, an operator asked). Ignored
    /// while a pass is under way; returns the first decisions.
    pub fn request(&mut self, now_ns: u64, up: bool, reason: &str) -> Vec<Decision> {
        if self.scaling() || self.cfg.strategy == Strategy::None {
            return Vec::new();
        }
        self.begin(now_ns, up, reason)
    }

    /// Changes the target (the application's goal, e.g. the offered request rate).
    pub fn set_target(&mut self, target: Option<f64>) {
        self.cfg.target = target;
    }

    fn begin(&mut self, now: u64, up: bool, why: &str) -> Vec<Decision> {
        self.kept_this_pass = false;
        self.kept_any = false;
        self.tried_all = false;
        // The level to beat is measured afresh: samples from before the change
        // that triggered the pass would make every trial look like a success or
        // a failure.
        self.log(
            now,
            format!(
                "{why}: measuring for {:.1} s before scaling {}",
                self.cfg.window_ns as f64 / 1e9,
                if up { "up" } else { "down" }
            ),
        );
        self.trial(now, TrialKind::Measure(up), 0.0);
        Vec::new()
    }

    fn start_pass(&mut self, now: u64, up: bool, before: f64) -> Vec<Decision> {
        match (up, self.cfg.strategy) {
            (true, Strategy::All) => self.start_all(now, before),
            (true, _) => self.start_up(now, 0, before),
            (false, Strategy::All) => self.start_down_all(now, before),
            (false, _) => self.start_down(now, 0, before),
        }
    }

    fn trial(&mut self, now: u64, kind: TrialKind, before: f64) {
        self.phase = Phase::Trial(Trial {
            kind,
            started_ns: now,
            before,
            sum: 0.0,
            n: 0,
        });
    }

    /// Starts a scale-up trial on chain[i..], or ends the pass.
    fn start_up(&mut self, now: u64, i: usize, before: f64) -> Vec<Decision> {
        if i >= self.chain.len() {
            return self.end_up_pass(now, before);
        }
        if self.total() + 1 > self.cfg.budget {
            self.log(
                now,
                format!(
                    "budget of {} instances reached: not adding {}",
                    self.cfg.budget, self.chain[i]
                ),
            );
            return self.done(now);
        }
        let m = self.chain[i].clone();
        *self.counts.entry(m.clone()).or_default() += 1;
        self.log(
            now,
            format!("trial: one more {m} (metric before {before:.3})"),
        );
        self.trial(now, TrialKind::Up(i), before);
        vec![Decision::Add(m)]
    }

    fn end_up_pass(&mut self, now: u64, level: f64) -> Vec<Decision> {
        if self.kept_this_pass && !self.target_met(level) {
            self.kept_this_pass = false;
            self.log(
                now,
                "an instance was kept in this pass: another pass".into(),
            );
            return self.start_up(now, 0, level);
        }
        if !self.kept_any && !self.tried_all && self.chain.len() > 1 {
            return self.start_all(now, level);
        }
        self.done(now)
    }

    fn start_all(&mut self, now: u64, before: f64) -> Vec<Decision> {
        self.tried_all = true;
        let n = self.chain.len() as u32;
        if self.total() + n > self.cfg.budget {
            self.log(
                now,
                format!(
                    "budget of {} instances leaves no room for one more of every middlebox",
                    self.cfg.budget
                ),
            );
            return self.done(now);
        }
        let mut out = Vec::new();
        for m in self.chain.clone() {
            *self.counts.entry(m.clone()).or_default() += 1;
            out.push(Decision::Add(m));
        }
        self.log(
            now,
            format!("scale-all trial: one more of every middlebox (metric before {before:.3})"),
        );
        self.trial(now, TrialKind::UpAll, before);
        out
    }

    fn start_down(&mut self, now: u64, i: usize, before: f64) -> Vec<Decision> {
        let mut i = i;
        while i < self.chain.len() && self.counts[&self.chain[i]] <= 1 {
            i += 1;
        }
        if i >= self.chain.len() {
            return self.done(now);
        }
        let m = self.chain[i].clone();
        *self.counts.get_mut(&m).expect("chain member") -= 1;
        self.log(
            now,
            format!("trial: one {m} fewer (metric before {before:.3})"),
        );
        self.trial(now, TrialKind::Down(i), before);
        vec![Decision::Remove(m)]
    }

    fn start_down_all(&mut self, now: u64, before: f64) -> Vec<Decision> {
        if self.chain.iter().any(|m| self.counts[m] <= 1) {
            return self.done(now);
        }
        let mut out = Vec::new();
        for m in self.chain.clone() {
            *self.counts.get_mut(&m).expect("chain member") -= 1;
            out.push(Decision::Remove(m));
        }
        self.log(
            now,
            format!("trial: one fewer of every middlebox (metric before {before:.3})"),
        );
        self.trial(now, TrialKind::DownAll, before);
        out
    }

    fn finish_trial(&mut self, now: u64, t: Trial, after: f64) -> Vec<Decision> {
        let pct = if t.before != 0.0 {
            (after - t.before) / t.before.abs() * 100.0
        } else {
            0.0
        };
        match t.kind {
            TrialKind::Measure(up) => self.start_pass(now, up, after),
            TrialKind::Up(i) => {
                let m = self.chain[i].clone();
                if self.better(after, t.before, self.cfg.improve) {
                    self.kept_this_pass = true;
                    self.kept_any = true;
                    self.log(
                        now,
                        format!("kept the new {m}: metric {after:.3} ({pct:+.1}%)"),
                    );
                    if self.target_met(after) {
                        self.log(now, "target reached".into());
                        return self.done(now);
                    }
                    self.start_up(now, i, after)
                } else {
                    *self.counts.get_mut(&m).expect("chain member") -= 1;
                    self.log(
                        now,
                        format!("discarded the new {m}: metric {after:.3} ({pct:+.1}%) is no real improvement"),
                    );
                    let mut out = vec![Decision::Remove(m)];
                    out.extend(self.start_up(now, i + 1, t.before));
                    out
                }
            }
            TrialKind::UpAll => {
                if self.better(after, t.before, self.cfg.improve) {
                    self.kept_any = true;
                    self.log(
                        now,
                        format!("kept one more of every middlebox: metric {after:.3} ({pct:+.1}%)"),
                    );
                    if self.cfg.strategy == Strategy::All {
                        return self.start_all(now, after);
                    }
                    self.log(
                        now,
                        "scale-down pass to remove what scale-all added needlessly".into(),
                    );
                    self.start_down(now, 0, after)
                } else {
                    let mut out = Vec::new();
                    for m in self.chain.clone() {
                        *self.counts.get_mut(&m).expect("chain member") -= 1;
                        out.push(Decision::Remove(m));
                    }
                    self.log(
                        now,
                        format!("discarded the scale-all trial: metric {after:.3} ({pct:+.1}%)"),
                    );
                    out.extend(self.done(now));
                    out
                }
            }
            TrialKind::Down(i) => {
                let m = self.chain[i].clone();
                // With a target, a removal stands while the metric still meets
                // it: a response time far below the target may move by a large
                // fraction without anyone being worse served.
                if self.better(t.before, after, self.cfg.improve) && !self.target_met(after) {
                    *self.counts.get_mut(&m).expect("chain member") += 1;
                    self.log(
                        now,
                        format!("{m} is needed: metric fell to {after:.3} ({pct:+.1}%) without it; re-added"),
                    );
                    let mut out = vec![Decision::Add(m)];
                    out.extend(self.start_down(now, i + 1, t.before));
                    out
                } else {
                    self.log(
                        now,
                        format!("removed a {m} for good: metric {after:.3} ({pct:+.1}%)"),
                    );
                    self.start_down(now, i, after)
                }
            }
            TrialKind::DownAll => {
                if self.better(t.before, after, self.cfg.improve) && !self.target_met(after) {
                    let mut out = Vec::new();
                    for m in self.chain.clone() {
                        *self.counts.get_mut(&m).expect("chain member") += 1;
                        out.push(Decision::Add(m));
                    }
                    self.log(
                        now,
                        format!("every middlebox is needed: metric fell to {after:.3}; re-added"),
                    );
                    out.extend(self.done(now));
                    out
                } else {
                    self.log(
                        now,
                        format!("removed one of every middlebox: metric {after:.3}"),
                    );
                    self.start_down_all(now, after)
                }
            }
        }
    }

    fn done(&mut self, now: u64) -> Vec<Decision> {
        self.log(
            now,
            format!(
                "scaling done; cooling down for {:.1} s",
                self.cfg.cooldown_ns as f64 / 1e9
            ),
        );
        self.recent.clear();
        self.phase = Phase::Cooldown {
            until_ns: now + self.cfg.cooldown_ns,
        };
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
