//! Views of the stream pre-scan: per class of flow direction, a first
//! stage of the hashed search ([`crate::hashmpm::FirstStage`]) holding only
//! the stream patterns with a target in a flow group that class matches.
//!
//! ET Open's one- and two-byte contents of rules for other ports (`|00|` in
//! hundreds of SMB rules, `|ff|`, ...) made a third of an HTML body's
//! positions and a seventh of a binary body's pass the first stage of all
//! the patterns, when a tenth of those had a pattern whose rules a port-80
//! flow can match: the second stage's work was spent on hits the group
//! check drops. A job of a flow direction is searched with its class's
//! view, so only positions where a pattern of its groups may start pass.
//!
//! Where the stream patterns' long ones are Vectorscan's, a view also has
//! a Vectorscan database of only its own patterns, short ones too, compiled
//! on another thread ([`crate::hashmpm::FirstStage`]): on ET Open a port-80
//! response's view holds 193 of the 2,203, and the search of all the long
//! ones was a seventh of the IPS's time on web traffic, the hashed pass for
//! the short ones another seventh.
//!
//! Views are built when a class is first seen (then reused: no allocation
//! per packet), shared by the classes that match the same groups, at most
//! [`MAX_VIEWS`] of them and [`MAX_KEYS`] classes remembered: past those a
//! job is searched with the first stage of all the patterns, as before. A
//! view is derived from the rules only, never from a flow's bytes: no
//! per-flow state lives here (every byte of it is in the store).

use rustc_hash::FxHashMap;
use sluice_wire::FlowKey;

use crate::engine::Engine;
use crate::hashmpm::FirstStage;
use crate::header::ClassKey;

/// No view: the first stage of all the patterns.
pub const NO_VIEW: u32 = u32::MAX;
/// The most views kept (each 24 KiB).
pub const MAX_VIEWS: usize = 64;
/// The most classes remembered.
pub const MAX_KEYS: usize = 16 * 1024;

/// The views built so far ([`Views::view`]).
#[derive(Default)]
pub struct Views {
    by_key: FxHashMap<ClassKey, u32>,
    by_set: FxHashMap<Vec<u64>, u32>,
    stages: Vec<FirstStage>,
    /// Scratch: the accepted groups of the class being added.
    set: Vec<u64>,
}

impl Views {
    /// The view of flow direction `flow`, `to_server` (an index into
    /// [`Views::stages`]), built if its class is new; [`NO_VIEW`] when the
    /// engine has none or the bounds are reached.
    pub fn view(&mut self, engine: &Engine, flow: &FlowKey, to_server: bool) -> u32 {
        let Some(key) = engine.view_key(flow, to_server) else {
            return NO_VIEW;
        };
        if let Some(&v) = self.by_key.get(&key) {
            return v;
        }
        self.add(engine, key, flow, to_server)
    }

    #[cold]
    #[inline(never)]
    fn add(&mut self, engine: &Engine, key: ClassKey, flow: &FlowKey, to_server: bool) -> u32 {
        if self.by_key.len() >= MAX_KEYS {
            return NO_VIEW;
        }
        engine.accepted_groups(flow, to_server, &mut self.set);
        let v = match self.by_set.get(&self.set) {
            Some(&v) => v,
            None if self.stages.len() < MAX_VIEWS => match engine.view_stage(&self.set) {
                Some(stage) => {
                    self.stages.push(stage);
                    let v = (self.stages.len() - 1) as u32;
                    self.by_set.insert(self.set.clone(), v);
                    v
                }
                None => NO_VIEW,
            },
            None => NO_VIEW,
        };
        self.by_key.insert(key, v);
        v
    }

    /// The views' first stages.
    pub fn stages(&self) -> &[FirstStage] {
        &self.stages
    }
}
