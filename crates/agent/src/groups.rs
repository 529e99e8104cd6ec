//! How the agent picks a group's target, sans-IO: local speculative failover
//! (a suspected instance's hash ranges handed to the survivors) and flow
//! pinning (Stratos §4.2: a flow keeps its first choice while the split changes).
//!
//! The controller's [`Group`] splits the direction-invariant flow hash space into
//! ranges. When a local instance is suspected, [`failover_group`] gives each of
//! its ranges to the next live target in ring order (range order, wrapping),
//! leaving every other range alone, so flows of live instances never move and
//! every agent applying the rule to the same group and the same suspects gets the
//! same answer. A packet that arrived from the fabric for a group is always
//! delivered to a local instance ([`GroupSel::choose`]): the sending host may not
//! know which of our instances are suspected, and sending it back would bounce it
//! between hosts.

use std::collections::{BTreeMap, HashMap};

use sluice_switch::{Group, Output};
use sluice_wire::FlowKey;

/// The controller's group with the suspected targets' ranges handed to the next
/// live target in ring order. Range bounds are unchanged (the rewritten group
/// covers the same hashes, range for range); `None` if every target is dead.
pub fn failover_group(g: &Group, dead: impl Fn(Output) -> bool) -> Option<Group> {
    let n = g.ranges.len();
    let live: Vec<bool> = g.ranges.iter().map(|r| !dead(r.1)).collect();
    if !live.iter().any(|l| *l) {
        return None;
    }
    let ranges = (0..n)
        .map(|i| {
            let j = (0..n).map(|k| (i + k) % n).find(|&j| live[j]).unwrap_or(i);
            (g.ranges[i].0, g.ranges[j].1)
        })
        .collect();
    Some(Group { ranges })
}

/// Index of the range of `g` that owns `hash` (as [`Group::select`] picks it).
#[inline]
pub fn range_index(g: &Group, hash: u32) -> usize {
    let h = hash as u64;
    let i = g.ranges.partition_point(|r| r.0 <= h);
    i.min(g.ranges.len().saturating_sub(1))
}

/// What a group selection decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Send it there.
    Out(Output),
    /// Every target the packet may go to is suspected: drop it.
    NoLive,
}

/// One group as the agent selects from it: the controller's split, the
/// failover-rewritten one, and the policy.
#[derive(Debug, Clone)]
pub struct GroupSel {
    /// The controller's group.
    pub orig: Group,
    /// Per range of `orig`: its target after failover (None: all dead).
    eff: Vec<Option<Output>>,
    /// Per range: the live local target a packet from the fabric goes to when
    /// `eff` is another host (first live local port in ring order).
    fabric: Vec<Option<Output>>,
    has_local: bool,
    /// Pin flows to their first choice.
    pub pinned: bool,
    /// Targets with no new flows whose pinned flows stay.
    pub draining: Vec<Output>,
    /// Targets a pinned flow may stay on: the group's and the draining ones,
    /// minus suspected local ports.
    valid: Vec<Output>,
    /// The targets keep state inside themselves: only an exited instance is
    /// failed over, never a merely suspected one.
    pub local_state: bool,
    /// Nonzero: the controller lets local instances hold leases on their
    /// ranges ([`sluice_proto::GroupPolicy::lease_epoch`]).
    pub lease_epoch: u64,
}

impl GroupSel {
    /// A group with nothing suspected.
    pub fn new(orig: Group, pinned: bool, draining: Vec<Output>) -> GroupSel {
        let mut g = GroupSel {
            eff: Vec::new(),
            fabric: Vec::new(),
            has_local: orig.ranges.iter().any(|r| matches!(r.1, Output::Port(_))),
            orig,
            pinned,
            draining,
            valid: Vec::new(),
            local_state: false,
            lease_epoch: 0,
        };
        g.refresh(|_| false);
        g
    }

    /// Recomputes the effective targets for the suspects `dead` says; returns
    /// whether any range changed hands compared with the controller's split.
    pub fn refresh(&mut self, dead: impl Fn(Output) -> bool) -> bool {
        self.refresh_ready(dead, |_| false)
    }

    /// [`GroupSel::refresh`], also keeping new flows off targets still
    /// `starting` (never heard from) as long as a ready one can take them; if
    /// none can, starting targets are used (they may be up by the time the
    /// packet arrives).
    pub fn refresh_ready(
        &mut self,
        dead: impl Fn(Output) -> bool,
        starting: impl Fn(Output) -> bool,
    ) -> bool {
        let n = self.orig.ranges.len();
        let avoid = |o: Output| dead(o) || starting(o);
        self.eff =
            match failover_group(&self.orig, avoid).or_else(|| failover_group(&self.orig, &dead)) {
                Some(g) => g.ranges.iter().map(|r| Some(r.1)).collect(),
                None => vec![None; n],
            };
        let local_after = |i: usize, skip: &dyn Fn(Output) -> bool| {
            (0..n)
                .map(|k| self.orig.ranges[(i + k) % n].1)
                .find(|o| matches!(o, Output::Port(_)) && !skip(*o))
        };
        self.fabric = (0..n)
            .map(|i| local_after(i, &avoid).or_else(|| local_after(i, &dead)))
            .collect();
        self.valid = self
            .orig
            .ranges
            .iter()
            .map(|r| r.1)
            .chain(self.draining.iter().copied())
            .filter(|o| !dead(*o))
            .collect();
        self.valid.sort_by_key(|o| order(*o));
        self.valid.dedup();
        self.eff
            .iter()
            .zip(&self.orig.ranges)
            .any(|(e, r)| *e != Some(r.1))
    }

    /// The inclusive hash ranges the controller's split gives `target`, if every
    /// flow of them goes to `target` and nothing but the hash decides: no
    /// failover moved one of them away, and the group neither pins flows, keeps
    /// state in its instances nor drains a target. `None` otherwise, or if
    /// `target` has no range. (An instance may own these under a lease.)
    pub fn owned_ranges(&self, target: Output) -> Option<Vec<(u32, u32)>> {
        if self.pinned || self.local_state || !self.draining.is_empty() {
            return None;
        }
        let n = self.orig.ranges.len();
        let mut out: Vec<(u32, u32)> = Vec::new();
        for i in 0..n {
            if self.orig.ranges[i].1 != target {
                continue;
            }
            if self.eff.get(i) != Some(&Some(target)) {
                return None;
            }
            let lo = if i == 0 { 0 } else { self.orig.ranges[i - 1].0 };
            let hi = if i + 1 == n {
                u32::MAX as u64
            } else {
                self.orig.ranges[i].0.saturating_sub(1)
            };
            if lo > hi || lo > u32::MAX as u64 {
                continue;
            }
            let (lo, hi) = (lo as u32, hi.min(u32::MAX as u64) as u32);
            match out.last_mut() {
                Some(last) if last.1.checked_add(1) == Some(lo) => last.1 = hi,
                _ => out.push((lo, hi)),
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// The target for a flow of hash `hash` by the current split (failover
    /// applied); `from_fabric` packets go to a local instance only.
    pub fn choose(&self, hash: u32, from_fabric: bool) -> Choice {
        if self.orig.ranges.is_empty() {
            return Choice::NoLive;
        }
        let i = range_index(&self.orig, hash);
        let eff = self.eff[i];
        if from_fabric && !matches!(eff, Some(Output::Port(_))) {
            if let Some(o) = self.fabric[i] {
                return Choice::Out(o);
            }
            // A host with no instance of the group here (a transient difference
            // between hosts' configurations): pass it on as selected.
            if !self.has_local {
                return eff.map_or(Choice::NoLive, Choice::Out);
            }
            return Choice::NoLive;
        }
        eff.map_or(Choice::NoLive, Choice::Out)
    }

    /// True if a flow pinned to `o` may stay there.
    pub fn may_keep(&self, o: Output, from_fabric: bool) -> bool {
        (!from_fabric || matches!(o, Output::Port(_))) && self.valid.contains(&o)
    }
}

/// Key of a pinned flow: the group and the flow in its direction-invariant
/// (canonical) orientation, so both directions share the entry. Packets that
/// arrived from the fabric pin separately (they must stay on this host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PinKey {
    /// Tenant VNI.
    pub vni: u32,
    /// Group id.
    pub group: u32,
    /// Arrived from the fabric.
    pub fabric: bool,
    /// The canonical flow key.
    pub flow: FlowKey,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: PinKey,
    out: Output,
    last_ns: u64,
    referenced: bool,
}

/// A bounded flow table (fixed capacity, clock eviction, idle timeout): flow ->
/// the target it was first sent to.
#[derive(Debug, Clone)]
pub struct PinTable {
    map: HashMap<PinKey, u32>,
    slots: Vec<Slot>,
    hand: usize,
    cap: usize,
    idle_ns: u64,
    /// Entries evicted while still live (the table was full).
    pub evicted: u64,
}

/// Default capacity of the pin table (entries over every pinned group).
pub const PIN_CAPACITY: usize = 65_536;
/// Default idle timeout of a pinned flow.
pub const PIN_IDLE_NS: u64 = 30_000_000_000;

impl PinTable {
    /// A table of at most `cap` flows (at least 1), forgetting flows idle for
    /// `idle_ns`.
    pub fn new(cap: usize, idle_ns: u64) -> PinTable {
        PinTable {
            map: HashMap::new(),
            slots: Vec::new(),
            hand: 0,
            cap: cap.max(1),
            idle_ns,
            evicted: 0,
        }
    }

    /// Flows held (idle ones included until reused).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    fn idle(&self, s: &Slot, now_ns: u64) -> bool {
        now_ns.saturating_sub(s.last_ns) > self.idle_ns
    }

    /// The target `key` is pinned to (and marks it used), unless it idled out.
    pub fn get(&mut self, key: &PinKey, now_ns: u64) -> Option<Output> {
        let i = *self.map.get(key)? as usize;
        if self.idle(&self.slots[i], now_ns) {
            return None;
        }
        let s = &mut self.slots[i];
        s.last_ns = now_ns;
        s.referenced = true;
        Some(s.out)
    }

    /// Pins `key` to `out` (replacing an earlier pin; evicting an idle or, if
    /// none, a not recently used flow when full).
    pub fn insert(&mut self, key: PinKey, out: Output, now_ns: u64) {
        let slot = Slot {
            key,
            out,
            last_ns: now_ns,
            referenced: true,
        };
        if let Some(&i) = self.map.get(&key) {
            self.slots[i as usize] = slot;
            return;
        }
        if self.slots.len() < self.cap {
            self.map.insert(key, self.slots.len() as u32);
            self.slots.push(slot);
            return;
        }
        // Clock: give recently used flows a second chance; at most two turns.
        let n = self.slots.len();
        let mut victim = self.hand;
        for _ in 0..2 * n {
            let i = self.hand;
            self.hand = (self.hand + 1) % n;
            if self.idle(&self.slots[i], now_ns) || !self.slots[i].referenced {
                victim = i;
                break;
            }
            self.slots[i].referenced = false;
        }
        if !self.idle(&self.slots[victim], now_ns) {
            self.evicted += 1;
        }
        let old = self.slots[victim].key;
        self.map.remove(&old);
        self.slots[victim] = slot;
        self.map.insert(key, victim as u32);
    }

    /// Live flows per (vni, group, target), targets ordered ports first.
    pub fn counts(&self, now_ns: u64) -> BTreeMap<PinCountKey, (Output, u64)> {
        let mut m = BTreeMap::new();
        for s in &self.slots {
            if self.idle(s, now_ns) {
                continue;
            }
            m.entry((s.key.vni, s.key.group, order(s.out)))
                .or_insert((s.out, 0))
                .1 += 1;
        }
        m
    }
}

/// `(vni, group, order(target))`: how [`PinTable::counts`] sorts.
pub type PinCountKey = (u32, u32, (u8, u32));

/// A sort key for outputs (which have no order of their own).
pub fn order(o: Output) -> (u8, u32) {
    match o {
        Output::Port(p) => (0, p.0 as u32),
        Output::Host(h) => (1, h.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_switch::{HostId, PortId};
    use sluice_wire::build;
    use sluice_wire::parse::parse_frame;

    fn p(n: u16) -> Output {
        Output::Port(PortId(n))
    }

    fn h(n: u32) -> Output {
        Output::Host(HostId(n))
    }

    fn flow(i: u32) -> FlowKey {
        let f = build::tcp_v4(
            [10, 0, (i >> 8) as u8, i as u8],
            [10, 1, 0, 1],
            1000 + (i % 5000) as u16,
            80,
            1,
            0,
            0x02,
            b"",
        );
        parse_frame(&f).unwrap().flow
    }

    fn key(i: u32) -> PinKey {
        PinKey {
            vni: 7,
            group: 1,
            fabric: false,
            flow: flow(i).canonical().0,
        }
    }

    #[test]
    fn owned_ranges_are_what_the_hash_alone_sends_to_a_target() {
        let g = Group::split(&[(p(1), 1), (h(2), 1), (p(3), 2)]).unwrap();
        let mut sel = GroupSel::new(g.clone(), false, vec![]);
        let r1 = sel.owned_ranges(p(1)).unwrap();
        let r3 = sel.owned_ranges(p(3)).unwrap();
        assert_eq!(r1, vec![(0, (g.ranges[0].0 - 1) as u32)]);
        assert_eq!(r3, vec![(g.ranges[1].0 as u32, u32::MAX)]);
        // Every hash the split sends to port 3 is in its ranges, and no other.
        for i in 0..2000u32 {
            let hash = flow(i).symmetric_hash();
            let to3 = matches!(sel.choose(hash, false), Choice::Out(o) if o == p(3));
            let owned = r3.iter().any(|r| r.0 <= hash && hash <= r.1);
            assert_eq!(to3, owned, "hash {hash}");
        }
        assert_eq!(sel.owned_ranges(p(9)), None, "no range");
        // A failover that moves port 1's range away, or onto port 3: port 1
        // owns nothing, port 3 still owns exactly its own ranges.
        sel.refresh(|o| o == p(1));
        assert_eq!(sel.owned_ranges(p(1)), None);
        assert_eq!(sel.owned_ranges(p(3)), Some(r3.clone()));
        // Policies where more than the hash decides grant nothing.
        let mut pinned = GroupSel::new(g.clone(), true, vec![]);
        assert_eq!(pinned.owned_ranges(p(3)), None);
        pinned.pinned = false;
        pinned.local_state = true;
        assert_eq!(pinned.owned_ranges(p(3)), None);
        let draining = GroupSel::new(g, false, vec![p(4)]);
        assert_eq!(draining.owned_ranges(p(3)), None);
        // Adjacent ranges of one target merge.
        let two = Group::split(&[(p(1), 1), (p(1), 1), (p(2), 2)]).unwrap();
        let sel = GroupSel::new(two.clone(), false, vec![]);
        assert_eq!(
            sel.owned_ranges(p(1)),
            Some(vec![(0, (two.ranges[1].0 - 1) as u32)])
        );
    }

    #[test]
    fn failover_keeps_coverage_and_live_ranges() {
        let g = Group::split(&[(p(1), 1), (h(2), 1), (p(3), 1), (p(4), 1)]).unwrap();
        let f = failover_group(&g, |o| o == p(3)).unwrap();
        assert_eq!(f.ranges.len(), g.ranges.len());
        for (a, b) in f.ranges.iter().zip(&g.ranges) {
            assert_eq!(a.0, b.0, "same bounds: every hash is still covered");
            if b.1 != p(3) {
                assert_eq!(a.1, b.1, "live targets keep their ranges");
            }
        }
        assert_eq!(f.ranges[2].1, p(4), "the next live target in ring order");
        // The last one wraps to the first.
        let f = failover_group(&g, |o| o == p(4)).unwrap();
        assert_eq!(f.ranges[3].1, p(1));
        // Two dead in a row go to the same survivor.
        let f = failover_group(&g, |o| o == p(3) || o == p(4)).unwrap();
        assert_eq!((f.ranges[2].1, f.ranges[3].1), (p(1), p(1)));
        assert!(failover_group(&g, |_| true).is_none());
        assert_eq!(failover_group(&g, |_| false).unwrap(), g);
    }

    #[test]
    fn failover_is_deterministic_and_both_directions_agree() {
        let g = Group::split(&[(p(1), 1), (p(2), 1), (p(3), 1)]).unwrap();
        let a = failover_group(&g, |o| o == p(2)).unwrap();
        let b = failover_group(&g.clone(), |o| o == p(2)).unwrap();
        assert_eq!(a, b);
        for i in 0..500 {
            let f = flow(i);
            let (x, y) = (
                a.select(f.symmetric_hash()),
                a.select(f.reverse().symmetric_hash()),
            );
            assert_eq!(x, y);
            assert_ne!(x, Some(p(2)));
        }
    }

    #[test]
    fn fabric_packets_stay_local() {
        // Host 1's view: its port 1, host 2, its port 3.
        let g = Group::split(&[(p(1), 1), (h(2), 1), (p(3), 1)]).unwrap();
        let mut s = GroupSel::new(g.clone(), false, vec![]);
        let hash_in = |i: usize| {
            (0..u32::MAX)
                .step_by(997)
                .find(|&x| range_index(&g, x) == i)
                .unwrap()
        };
        // Nothing suspected: a fabric packet whose hash is host 2's goes to the
        // next local port rather than back to the fabric.
        assert_eq!(s.choose(hash_in(1), true), Choice::Out(p(3)));
        assert_eq!(s.choose(hash_in(1), false), Choice::Out(h(2)));
        // Port 3 suspected: its local traffic goes to port 1 (next live, wrapping),
        // host 2's range seen from the fabric too.
        assert!(s.refresh(|o| o == p(3)));
        assert_eq!(s.choose(hash_in(2), false), Choice::Out(p(1)));
        assert_eq!(s.choose(hash_in(2), true), Choice::Out(p(1)));
        assert_eq!(s.choose(hash_in(1), true), Choice::Out(p(1)));
        // Port 1 suspected: its range goes to host 2, but from the fabric to port 3.
        assert!(s.refresh(|o| o == p(1)));
        assert_eq!(s.choose(hash_in(0), false), Choice::Out(h(2)));
        assert_eq!(s.choose(hash_in(0), true), Choice::Out(p(3)));
        // Every local one dead: the fabric's packets are dropped, not bounced.
        s.refresh(|o| matches!(o, Output::Port(_)));
        assert_eq!(s.choose(hash_in(0), true), Choice::NoLive);
        assert_eq!(s.choose(hash_in(0), false), Choice::Out(h(2)));
        // All dead.
        s.refresh(|_| true);
        assert_eq!(s.choose(hash_in(1), false), Choice::NoLive);
        // Restored.
        assert!(!s.refresh(|_| false));
        assert_eq!(s.choose(hash_in(2), false), Choice::Out(p(3)));
        // Port 3 still starting: avoided while another target can take its flows,
        // used when none can.
        assert!(s.refresh_ready(|_| false, |o| o == p(3)));
        assert_eq!(s.choose(hash_in(2), false), Choice::Out(p(1)));
        assert_eq!(s.choose(hash_in(1), true), Choice::Out(p(1)));
        s.refresh_ready(|o| o != p(3), |o| o == p(3));
        assert_eq!(s.choose(hash_in(0), false), Choice::Out(p(3)));
        assert_eq!(s.choose(hash_in(1), true), Choice::Out(p(3)));
    }

    /// Selects like the agent does for a pinned group.
    fn pick(t: &mut PinTable, s: &GroupSel, i: u32, now: u64) -> Output {
        let k = key(i);
        if let Some(o) = t.get(&k, now) {
            if s.may_keep(o, false) {
                return o;
            }
        }
        let Choice::Out(o) = s.choose(flow(i).symmetric_hash(), false) else {
            panic!("no live target");
        };
        t.insert(k, o, now);
        o
    }

    #[test]
    fn pinned_flows_survive_a_new_split() {
        let mut t = PinTable::new(10_000, PIN_IDLE_NS);
        let one = GroupSel::new(Group::split(&[(p(1), 1)]).unwrap(), true, vec![]);
        for i in 0..200 {
            assert_eq!(pick(&mut t, &one, i, 1), p(1));
        }
        // Scale out: existing flows stay, new ones follow the new split.
        let two = GroupSel::new(Group::split(&[(p(1), 1), (p(2), 1)]).unwrap(), true, vec![]);
        for i in 0..200 {
            assert_eq!(pick(&mut t, &two, i, 2), p(1), "flow {i} stays");
        }
        let mut to2 = 0;
        for i in 1000..1400 {
            let o = pick(&mut t, &two, i, 3);
            assert_eq!(Some(o), two.orig.select(flow(i).symmetric_hash()));
            to2 += usize::from(o == p(2));
        }
        assert!(to2 > 100, "new flows use the new split ({to2})");
        // Drain port 1: no new flows, its pinned flows stay.
        let drain = GroupSel::new(Group::split(&[(p(2), 1)]).unwrap(), true, vec![p(1)]);
        for i in 0..200 {
            assert_eq!(pick(&mut t, &drain, i, 4), p(1));
        }
        for i in 2000..2100 {
            assert_eq!(pick(&mut t, &drain, i, 4), p(2));
        }
        let c = t.counts(4);
        assert_eq!(c[&(7, 1, order(p(1)))].1, 200 + (400 - to2) as u64);
        // Removed outright (not draining): its flows move.
        let gone = GroupSel::new(Group::split(&[(p(2), 1)]).unwrap(), true, vec![]);
        assert_eq!(pick(&mut t, &gone, 5, 5), p(2));
        // Idle flows are forgotten.
        let late = 5 + PIN_IDLE_NS + 1;
        assert!(t.get(&key(6), late).is_none());
        assert!(t.counts(late).is_empty());
    }

    #[test]
    fn a_suspected_pinned_target_loses_its_flows() {
        let mut t = PinTable::new(100, PIN_IDLE_NS);
        let mut s = GroupSel::new(Group::split(&[(p(1), 1), (p(2), 1)]).unwrap(), true, vec![]);
        let i = (0..100).find(|&i| pick(&mut t, &s, i, 1) == p(1)).unwrap();
        s.refresh(|o| o == p(1));
        assert_eq!(pick(&mut t, &s, i, 2), p(2));
        s.refresh(|_| false);
        assert_eq!(
            pick(&mut t, &s, i, 3),
            p(2),
            "re-pinned: stays after rejoin"
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = PinTable::new(64, PIN_IDLE_NS);
        for i in 0..1000 {
            t.insert(key(i), p(1), i as u64);
        }
        assert_eq!(t.len(), 64);
        assert!(t.map.len() <= 64);
        assert!(t.get(&key(999), 1000).is_some(), "the newest is kept");
        assert!(t.evicted > 0);
        // Entries map to their slots.
        for (k, &i) in &t.map {
            assert_eq!(t.slots[i as usize].key, *k);
        }
    }
}
