//! Helpers for tests of code over the state API.

/// A shared in-process store that runs `hook` just before its `at`-th `execute`
/// (1-based): tests use it to make a second instance act between two round trips
/// of the first, forcing the races that atomic operations must resolve.
pub struct Interleave {
    /// The store both instances share.
    pub inner: crate::SharedLocalStore,
    /// `execute` calls so far.
    pub calls: usize,
    /// The call before which `hook` runs.
    pub at: usize,
    /// What the other instance does.
    pub hook: Option<Box<dyn FnMut()>>,
}

impl crate::StateStore for Interleave {
    fn execute(&mut self, ops: &mut crate::Ops) -> Result<(), crate::StoreError> {
        self.calls += 1;
        if self.calls == self.at {
            if let Some(h) = self.hook.as_mut() {
                h();
            }
        }
        self.inner.execute(ops)
    }
    fn take_expired(
        &mut self,
        ns: crate::Namespace,
        now: u64,
        max: usize,
        out: &mut Vec<crate::Key>,
    ) -> Result<(), crate::StoreError> {
        self.inner.take_expired(ns, now, max, out)
    }
    fn counters(&self) -> crate::StoreCounters {
        self.inner.counters()
    }
    fn describe(&self) -> String {
        "interleave".into()
    }
}
