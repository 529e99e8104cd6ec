//! Forwarding information base: entries, groups, lookup.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_wire::parse::{Fragment, PacketMeta, L4};

/// A port of this host's switch: a local VM's or NF instance's interface.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct PortId(pub u16);

/// Another host of the fabric (its tunnel endpoint is known to the agent).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct HostId(pub u32);

/// A group of middlebox instances sharing traffic by hash range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupId(pub u32);

/// Where a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Output {
    /// Out of a local port.
    Port(PortId),
    /// Through the fabric to another host, carrying the tenant and chain position.
    Host(HostId),
}

/// The bit of a chain hop that marks a mirror's copy on the fabric (hops of
/// middleboxes on the path count from 1 and stay below it).
pub const MIRROR_HOP: u8 = 0x80;

/// What an entry does, applied in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Send the packet to `Output`.
    Output(Output),
    /// Send a copy to `Output` (an off-path middlebox) and go on.
    Mirror(Output),
    /// Send a copy through the fabric to `host`, marked `(chain, hop)` (a hop
    /// with [`MIRROR_HOP`] set) so that host hands it to the mirror's
    /// instance instead of treating it as the chain's traffic; and go on.
    MirrorVia {
        /// Host of the mirror's instance.
        host: HostId,
        /// Chain id within the tenant.
        chain: u16,
        /// [`MIRROR_HOP`] plus the mirror's index in the chain's list.
        hop: u8,
    },
    /// Send to the instance of `GroupId` whose hash range holds the flow's hash.
    Select(GroupId),
    /// Record the chain and the hop the packet is at (carried in the tunnel option).
    SetChainHop {
        /// Chain id within the tenant.
        chain: u16,
        /// Position in the chain (the next middlebox to visit).
        hop: u8,
    },
    /// Drop the packet.
    Drop,
    /// Drop the packet because its recipient's owner blocked its source (a
    /// block on request, Seawall §3): a drop the agent counts as `blocked`.
    Block,
}

pub use sluice_wire::Prefix;

/// Serialises prefixes as `ADDR/LEN` strings.
mod prefix_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use sluice_wire::Prefix;

    pub fn serialize<S: Serializer>(p: &Option<Prefix>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_some(&p.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Prefix>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| Prefix::parse(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The fields an entry matches; `None` is a wildcard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Match {
    /// Ingress port (`None`: any port; packets from the fabric have no port).
    pub in_port: Option<PortId>,
    /// Arrived from the fabric (true) or a local port (false).
    pub from_fabric: Option<bool>,
    /// Tenant (VNI).
    pub vni: Option<u32>,
    /// Chain and hop carried by the tunnel (or set earlier on this host).
    pub chain_hop: Option<(u16, u8)>,
    /// Source prefix.
    #[serde(with = "prefix_str", default)]
    pub src: Option<Prefix>,
    /// Destination prefix.
    #[serde(with = "prefix_str", default)]
    pub dst: Option<Prefix>,
    /// IP protocol.
    pub proto: Option<u8>,
    /// Inclusive source port range.
    pub sport: Option<(u16, u16)>,
    /// Inclusive destination port range.
    pub dport: Option<(u16, u16)>,
}

/// One FIB entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Controller-assigned id (for counters and debugging).
    pub id: u64,
    /// Higher wins; among equal priorities, the entry added first.
    pub priority: u16,
    /// What it matches.
    #[serde(rename = "match")]
    pub m: Match,
    /// What it does.
    pub actions: Vec<Action>,
}

/// A split of the flow-hash space among instances: instance `k` owns the hashes
/// from the previous bound up to `bounds[k].0` (exclusive), the last one to the top.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// (upper bound, target), in increasing bound order; the last bound covers the rest.
    pub ranges: Vec<(u64, Output)>,
}

impl Group {
    /// Ranges proportional to `weights` (zero-weight targets get none).
    pub fn split(targets: &[(Output, u32)]) -> Result<Group, FibError> {
        let total: u64 = targets.iter().map(|t| t.1 as u64).sum();
        if total == 0 {
            return Err(FibError::EmptyGroup);
        }
        let mut acc = 0u64;
        let mut ranges = Vec::new();
        for &(o, w) in targets {
            if w == 0 {
                continue;
            }
            acc += w as u64;
            ranges.push(((acc << 32) / total, o));
        }
        Ok(Group { ranges })
    }

    /// The target owning `hash`.
    #[inline]
    pub fn select(&self, hash: u32) -> Option<Output> {
        let h = hash as u64;
        let i = self.ranges.partition_point(|r| r.0 <= h);
        self.ranges.get(i).or(self.ranges.last()).map(|r| r.1)
    }
}

/// A FIB that cannot be installed, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FibError {
    /// An entry selects a group that does not exist.
    #[error("entry {entry} selects group {group}, which is not defined")]
    UnknownGroup {
        /// Entry id.
        entry: u64,
        /// Group id.
        group: u32,
    },
    /// A group has no target with weight.
    #[error("a group needs at least one target with a non-zero weight")]
    EmptyGroup,
    /// Group ranges out of order.
    #[error("group {0}: ranges must increase")]
    BadRanges(u32),
    /// Two entries share an id.
    #[error("entry id {0} is used twice")]
    DuplicateId(u64),
}

/// What the lookup of one packet decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Where the packet goes (`None` with `drop` false: no entry matched).
    pub output: Option<Output>,
    /// Copies to send, each with the chain hop it carries on the fabric
    /// (`None`: the packet's own).
    pub mirrors: Vec<(Output, Option<(u16, u8)>)>,
    /// Chain and hop to carry onward.
    pub chain_hop: Option<(u16, u8)>,
    /// The packet is dropped.
    pub drop: bool,
    /// It is dropped by a block ([`Action::Block`]).
    pub blocked: bool,
    /// The entry that matched.
    pub entry: Option<u64>,
}

/// The packet-side inputs of a lookup.
#[derive(Debug, Clone, Copy)]
pub struct LookupKey<'a> {
    /// Local ingress port, or `None` if it came from the fabric.
    pub in_port: Option<PortId>,
    /// Tenant.
    pub vni: u32,
    /// Chain and hop from the tunnel option.
    pub chain_hop: Option<(u16, u8)>,
    /// The parsed inner packet.
    pub meta: &'a PacketMeta,
}

/// This host's share of a tenant switch's forwarding table.
#[derive(Debug, Clone, Default)]
pub struct Fib {
    entries: Vec<Entry>,
    groups: BTreeMap<GroupId, Group>,
    version: u64,
    hits: Vec<u64>,
    misses: u64,
}

impl Fib {
    /// An empty FIB (every lookup misses).
    pub fn new() -> Fib {
        Fib::default()
    }

    /// Replaces every entry and group at once (what the controller pushes), after
    /// checking them; on error the current FIB stays in force, untouched.
    pub fn replace(
        &mut self,
        mut entries: Vec<Entry>,
        groups: BTreeMap<GroupId, Group>,
        version: u64,
    ) -> Result<(), FibError> {
        let mut ids = std::collections::BTreeSet::new();
        for e in &entries {
            if !ids.insert(e.id) {
                return Err(FibError::DuplicateId(e.id));
            }
            for a in &e.actions {
                if let Action::Select(g) = a {
                    if !groups.contains_key(g) {
                        return Err(FibError::UnknownGroup {
                            entry: e.id,
                            group: g.0,
                        });
                    }
                }
            }
        }
        for (id, g) in &groups {
            if g.ranges.is_empty() {
                return Err(FibError::EmptyGroup);
            }
            if g.ranges.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(FibError::BadRanges(id.0));
            }
        }
        // Stable: equal priorities keep the controller's order.
        entries.sort_by_key(|e| std::cmp::Reverse(e.priority));
        self.hits = vec![0; entries.len()];
        self.entries = entries;
        self.groups = groups;
        self.version = version;
        Ok(())
    }

    /// The version of the installed FIB.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, highest priority first, with their hit counts.
    pub fn entries(&self) -> impl Iterator<Item = (&Entry, u64)> {
        self.entries.iter().zip(self.hits.iter().copied())
    }

    /// Lookups that matched no entry.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    fn matches(m: &Match, k: &LookupKey<'_>) -> bool {
        let meta = k.meta;
        if m.in_port.is_some_and(|p| k.in_port != Some(p))
            || m.from_fabric.is_some_and(|f| f != k.in_port.is_none())
            || m.vni.is_some_and(|v| v != k.vni)
            || m.chain_hop.is_some_and(|c| k.chain_hop != Some(c))
        {
            return false;
        }
        let needs_ip = m.src.is_some()
            || m.dst.is_some()
            || m.proto.is_some()
            || m.sport.is_some()
            || m.dport.is_some();
        if needs_ip && !meta.is_ip() {
            return false;
        }
        let f = &meta.flow;
        if m.src.is_some_and(|p| !p.contains(&f.src))
            || m.dst.is_some_and(|p| !p.contains(&f.dst))
            || m.proto.is_some_and(|p| p != f.proto)
        {
            return false;
        }
        // A later IP fragment carries no ports: it meets any port condition
        // of its protocol, so it goes where its datagram's first fragment
        // may go. Otherwise every fragment but the first of a datagram a
        // chain selects by port would bypass the chain (a signature, or a
        // firewall's decision, in the first only). One of another datagram
        // of the protocol goes through the chain too, where its functions'
        // fragment policies decide it.
        if meta.fragment == Fragment::Later {
            return true;
        }
        let ports = matches!(meta.l4, L4::Tcp | L4::Udp);
        if m.sport
            .is_some_and(|(lo, hi)| !ports || f.src_port < lo || f.src_port > hi)
            || m.dport
                .is_some_and(|(lo, hi)| !ports || f.dst_port < lo || f.dst_port > hi)
        {
            return false;
        }
        true
    }

    /// Looks a packet up: the first matching entry, highest priority first.
    pub fn lookup(&mut self, k: &LookupKey<'_>) -> Decision {
        let mut d = Decision {
            chain_hop: k.chain_hop,
            ..Decision::default()
        };
        let Some(i) = self.entries.iter().position(|e| Fib::matches(&e.m, k)) else {
            self.misses += 1;
            return d;
        };
        self.hits[i] += 1;
        let e = &self.entries[i];
        d.entry = Some(e.id);
        for a in &e.actions {
            match *a {
                Action::Output(o) => d.output = Some(o),
                Action::Mirror(o) => d.mirrors.push((o, None)),
                Action::MirrorVia { host, chain, hop } => {
                    d.mirrors.push((Output::Host(host), Some((chain, hop))))
                }
                Action::Select(g) => {
                    // The hash every instance choice uses: equal for both directions.
                    let h = k.meta.flow.symmetric_hash();
                    d.output = self.groups.get(&g).and_then(|g| g.select(h));
                }
                Action::SetChainHop { chain, hop } => d.chain_hop = Some((chain, hop)),
                Action::Drop => d.drop = true,
                Action::Block => {
                    d.drop = true;
                    d.blocked = true;
                }
            }
        }
        if d.drop {
            d.output = None;
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::build;
    use sluice_wire::parse::parse_frame;

    fn meta(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> PacketMeta {
        parse_frame(&build::tcp_v4(src, dst, sp, dp, 1, 0, 0x02, b"")).unwrap()
    }

    fn key(meta: &PacketMeta, port: Option<u16>) -> LookupKey<'_> {
        LookupKey {
            in_port: port.map(PortId),
            vni: 7,
            chain_hop: None,
            meta,
        }
    }

    fn entry(id: u64, priority: u16, m: Match, actions: Vec<Action>) -> Entry {
        Entry {
            id,
            priority,
            m,
            actions,
        }
    }

    #[test]
    fn priority_wildcards_and_fields() {
        let mut fib = Fib::new();
        let web = Match {
            dst: Some(Prefix::parse("192.0.2.0/24").unwrap()),
            proto: Some(6),
            dport: Some((80, 80)),
            ..Match::default()
        };
        fib.replace(
            vec![
                entry(
                    1,
                    10,
                    Match::default(),
                    vec![Action::Output(Output::Host(HostId(9)))],
                ),
                entry(2, 100, web, vec![Action::Output(Output::Port(PortId(3)))]),
                entry(
                    3,
                    200,
                    Match {
                        in_port: Some(PortId(5)),
                        ..Match::default()
                    },
                    vec![Action::Drop],
                ),
            ],
            BTreeMap::new(),
            1,
        )
        .unwrap();
        let m = meta([10, 0, 0, 1], [192, 0, 2, 8], 999, 80);
        assert_eq!(
            fib.lookup(&key(&m, Some(1))).output,
            Some(Output::Port(PortId(3)))
        );
        let d = fib.lookup(&key(&m, Some(5)));
        assert!(d.drop && !d.blocked && d.output.is_none() && d.entry == Some(3));
        let other = meta([10, 0, 0, 1], [192, 0, 2, 8], 999, 443);
        assert_eq!(
            fib.lookup(&key(&other, None)).output,
            Some(Output::Host(HostId(9)))
        );
        let hits: Vec<u64> = fib.entries().map(|(_, h)| h).collect();
        assert_eq!(hits, vec![1, 1, 1]);
    }

    #[test]
    fn every_fragment_of_a_datagram_a_chain_selects_by_port_takes_the_chain() {
        // A chain's entry for UDP to port 53; the rest goes straight on.
        let dns = Match {
            dst: Some(Prefix::parse("192.0.2.0/24").unwrap()),
            proto: Some(17),
            dport: Some((53, 53)),
            ..Match::default()
        };
        let mut fib = Fib::new();
        fib.replace(
            vec![
                entry(
                    1,
                    10,
                    Match::default(),
                    vec![Action::Output(Output::Port(PortId(9)))],
                ),
                entry(2, 100, dns, vec![Action::Output(Output::Port(PortId(3)))]),
            ],
            BTreeMap::new(),
            1,
        )
        .unwrap();
        let d = build::udp_v4([10, 0, 0, 1], [192, 0, 2, 8], 999, 53, &[7; 40]);
        let [first, later] = build::ipv4_fragments(&d, 16, 5);
        for f in [&first, &later] {
            let m = parse_frame(f).unwrap();
            assert_eq!(
                fib.lookup(&key(&m, Some(1))).output,
                Some(Output::Port(PortId(3)))
            );
        }
        // A later fragment cannot say its port: any of UDP takes the chain;
        // TCP ones do not (the protocol still decides), nor do whole
        // datagrams or first fragments to other ports.
        let other = build::udp_v4([10, 0, 0, 1], [192, 0, 2, 8], 999, 5353, &[7; 40]);
        let [first, later] = build::ipv4_fragments(&other, 16, 6);
        let out =
            |f: &[u8], fib: &mut Fib| fib.lookup(&key(&parse_frame(f).unwrap(), Some(1))).output;
        assert_eq!(out(&later, &mut fib), Some(Output::Port(PortId(3))));
        assert_eq!(out(&first, &mut fib), Some(Output::Port(PortId(9))));
        assert_eq!(out(&other, &mut fib), Some(Output::Port(PortId(9))));
        let tcp = build::tcp_v4([10, 0, 0, 1], [192, 0, 2, 8], 999, 53, 1, 0, 0x18, &[7; 40]);
        let [_, later] = build::ipv4_fragments(&tcp, 24, 7);
        assert_eq!(out(&later, &mut fib), Some(Output::Port(PortId(9))));
    }

    #[test]
    fn groups_split_by_weight_and_keep_both_directions_together() {
        let g =
            Group::split(&[(Output::Port(PortId(1)), 1), (Output::Port(PortId(2)), 3)]).unwrap();
        let mut fib = Fib::new();
        let mut groups = BTreeMap::new();
        groups.insert(GroupId(1), g);
        fib.replace(
            vec![entry(
                1,
                1,
                Match::default(),
                vec![
                    Action::Select(GroupId(1)),
                    Action::Mirror(Output::Port(PortId(9))),
                ],
            )],
            groups,
            2,
        )
        .unwrap();
        let mut counts = [0u32; 3];
        for i in 0..4000u32 {
            let a = [10, 1, (i >> 8) as u8, i as u8];
            let f = meta(a, [192, 0, 2, 1], 1000 + (i % 5000) as u16, 80);
            let r = meta([192, 0, 2, 1], a, 80, 1000 + (i % 5000) as u16);
            let d = fib.lookup(&key(&f, Some(0)));
            assert_eq!(
                d.output,
                fib.lookup(&key(&r, Some(0))).output,
                "both directions, one instance"
            );
            assert_eq!(d.mirrors, vec![(Output::Port(PortId(9)), None)]);
            match d.output {
                Some(Output::Port(PortId(p))) => counts[p as usize] += 1,
                other => panic!("{other:?}"),
            }
        }
        let share = counts[2] as f64 / 4000.0;
        assert!((0.70..0.80).contains(&share), "3:1 split, got {counts:?}");
    }

    #[test]
    fn bad_fibs_are_refused_and_the_old_one_kept() {
        let mut fib = Fib::new();
        fib.replace(
            vec![entry(1, 1, Match::default(), vec![Action::Drop])],
            BTreeMap::new(),
            1,
        )
        .unwrap();
        let e = fib
            .replace(
                vec![entry(
                    5,
                    1,
                    Match::default(),
                    vec![Action::Select(GroupId(4))],
                )],
                BTreeMap::new(),
                2,
            )
            .unwrap_err();
        assert_eq!(e, FibError::UnknownGroup { entry: 5, group: 4 });
        let e = fib
            .replace(
                vec![
                    entry(5, 1, Match::default(), vec![]),
                    entry(5, 2, Match::default(), vec![]),
                ],
                BTreeMap::new(),
                2,
            )
            .unwrap_err();
        assert_eq!(e, FibError::DuplicateId(5));
        assert_eq!(
            Group::split(&[(Output::Port(PortId(1)), 0)]),
            Err(FibError::EmptyGroup)
        );
        assert_eq!(
            (fib.version(), fib.len()),
            (1, 1),
            "the installed FIB is untouched"
        );
    }

    #[test]
    fn a_block_drops_and_says_so_whichever_way_the_packet_came() {
        let mut fib = Fib::new();
        let to_b = Match {
            dst: Some(Prefix::parse("10.0.0.2/32").unwrap()),
            ..Match::default()
        };
        let block = Match {
            src: Some(Prefix::parse("10.0.0.0/30").unwrap()),
            ..to_b.clone()
        };
        fib.replace(
            vec![
                entry(1, 2000, to_b, vec![Action::Output(Output::Port(PortId(2)))]),
                entry(2, 60000, block, vec![Action::Block]),
            ],
            BTreeMap::new(),
            1,
        )
        .unwrap();
        let blocked = meta([10, 0, 0, 1], [10, 0, 0, 2], 999, 80);
        for port in [Some(1), None] {
            let d = fib.lookup(&key(&blocked, port));
            assert!(d.drop && d.blocked && d.output.is_none(), "{port:?}: {d:?}");
        }
        let other = meta([10, 0, 0, 9], [10, 0, 0, 2], 999, 80);
        let d = fib.lookup(&key(&other, None));
        assert!(!d.drop && !d.blocked);
        assert_eq!(d.output, Some(Output::Port(PortId(2))));
    }
}
