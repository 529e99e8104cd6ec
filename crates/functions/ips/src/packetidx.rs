//! The rules without contents (packet rules), indexed by address: they are
//! checked on every packet, and the IP-reputation rule sets (ET's `ciarmy`,
//! `compromised`, `drop`, `dshield`, `botcc`) are thousands of them, each
//! matching a list of addresses. Each rule bounded by IPv4 networks on one
//! side (the narrower of source and destination, by addresses covered) is
//! filed under those networks; a packet's candidates are the rules filed
//! under its source or destination address, plus the rules with no such
//! bound (`any`, negations, `<>`), then checked whole in rule order. A
//! side's IPv6 networks bound its IPv4 addresses to none (ET's Tor lists
//! mix both families: filed under their IPv4 entries, not checked on every
//! packet); an IPv6 packet's candidates are the rules without a bound and
//! those whose filed side may match IPv6. A rule matches only addresses its
//! networks cover, so the candidates hold every rule that can match.

use std::collections::BTreeMap;

use sluice_wire::IpAddr;

use crate::rules::Rule;

/// Rules by IPv4 address: `starts` are the sorted first addresses of
/// elementary ranges, range `i` (up to the next start) holding
/// `rules[offs[i]..offs[i + 1]]`, in rule order.
#[derive(Default)]
struct ByAddr {
    starts: Vec<u32>,
    offs: Vec<u32>,
    rules: Vec<u32>,
}

impl ByAddr {
    /// Builds the index of `(first, last, rule)` ranges.
    fn new(ranges: &[(u32, u32, u32)]) -> ByAddr {
        // Sweep the range ends in address order: at each boundary the rules
        // whose ranges cover the next addresses are the set in force.
        let mut events: Vec<(u64, bool, u32)> = Vec::with_capacity(ranges.len() * 2);
        for &(lo, hi, r) in ranges {
            events.push((lo as u64, true, r));
            events.push((hi as u64 + 1, false, r));
        }
        events.sort_unstable();
        // Per rule in force, how many of its ranges cover the addresses
        // from here (a rule's ranges may overlap).
        let mut active: BTreeMap<u32, u32> = BTreeMap::new();
        let mut idx = ByAddr::default();
        let mut k = 0;
        while k < events.len() {
            let at = events[k].0;
            while k < events.len() && events[k].0 == at {
                let (_, open, r) = events[k];
                let n = active.entry(r).or_insert(0);
                if open {
                    *n += 1;
                } else {
                    *n -= 1;
                    if *n == 0 {
                        active.remove(&r);
                    }
                }
                k += 1;
            }
            if at > u32::MAX as u64 {
                break;
            }
            idx.starts.push(at as u32);
            idx.offs.push(idx.rules.len() as u32);
            idx.rules.extend(active.keys());
        }
        idx.offs.push(idx.rules.len() as u32);
        idx
    }

    /// The rules filed under address `a`.
    fn get(&self, a: u32) -> &[u32] {
        let i = self.starts.partition_point(|&s| s <= a);
        if i == 0 {
            return &[];
        }
        &self.rules[self.offs[i - 1] as usize..self.offs[i] as usize]
    }
}

/// The packet rules of one packet class, indexed.
#[derive(Default)]
pub struct PacketRules {
    /// Rules without an IPv4 bound, in order: candidates of every packet.
    always: Vec<u32>,
    /// The candidates of a packet that is not IPv4 both ways: `always` and
    /// the rules whose filed side may match an IPv6 address, in order.
    not_v4: Vec<u32>,
    /// Rules by their source's, then their destination's networks.
    by: [ByAddr; 2],
    /// Number of rules.
    count: usize,
}

/// Number of addresses `ranges` cover (overlaps counted twice: only to
/// compare two sides).
fn size(ranges: &[(u32, u32)]) -> u64 {
    ranges.iter().map(|&(a, b)| (b - a) as u64 + 1).sum()
}

impl PacketRules {
    /// Indexes `ids`, rules of `rules`, in order.
    pub fn new(rules: &[Rule], ids: &[u32]) -> PacketRules {
        let mut p = PacketRules {
            count: ids.len(),
            ..PacketRules::default()
        };
        let mut side: [Vec<(u32, u32, u32)>; 2] = Default::default();
        for &id in ids {
            let r = &rules[id as usize];
            // `<>` matches either way round: no side bounds it.
            let covers = if r.bidir {
                [None, None]
            } else {
                [r.src.v4_bound(), r.dst.v4_bound()]
            };
            let best = covers
                .iter()
                .enumerate()
                .filter_map(|(s, c)| c.as_ref().map(|c| (s, c)))
                .min_by_key(|(_, (c, _))| size(c));
            match best {
                Some((s, (c, v6))) => {
                    side[s].extend(c.iter().map(|&(a, b)| (a, b, id)));
                    if *v6 {
                        p.not_v4.push(id);
                    }
                }
                None => {
                    p.always.push(id);
                    p.not_v4.push(id);
                }
            }
        }
        p.by = [ByAddr::new(&side[0]), ByAddr::new(&side[1])];
        p
    }

    /// True if there is no rule.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Pushes to `out` the rules a packet from `src` to `dst` may match, in
    /// rule order, each once.
    pub fn candidates(&self, src: &IpAddr, dst: &IpAddr, out: &mut Vec<u32>) {
        out.clear();
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst) {
            out.extend_from_slice(&self.always);
            out.extend_from_slice(self.by[0].get(u32::from_be_bytes(*s)));
            out.extend_from_slice(self.by[1].get(u32::from_be_bytes(*d)));
            // A rule is filed under one side only.
            out.sort_unstable();
        } else {
            out.extend_from_slice(&self.not_v4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::parse_rule;

    /// Every rule whose addresses match a packet is among its candidates,
    /// in order and once; and the index does narrow them.
    #[test]
    fn candidates_hold_every_rule_whose_addresses_match() {
        let mut rng = crate::testrng::Lcg::new(7);
        let mut rnd = |n: u64| rng.below(n);
        let mut many = Vec::new();
        for _ in 0..30 {
            many.push(format!("1.2.{}.{}", rnd(4), rnd(256)));
        }
        many.push("5.6.7.0/24".into());
        let many = format!("[{}]", many.join(","));
        let exprs = [
            "any",
            "10.0.0.0/8",
            "[1.2.3.4,5.6.7.0/24]",
            "!10.0.0.0/8",
            "[10.0.0.0/8,!10.1.0.0/16]",
            "[!10.1.0.0/16]",
            "[1.2.3.4,::1]",
            "[::1,5.6.7.8,2001:db8::/32]",
            "[2001:db8::5,::2]",
            "::1",
            "1.2.0.0/15",
            "0.0.0.0/0",
            "255.255.255.255",
            &many,
        ];
        let mut rules = Vec::new();
        for sid in 1..=300 {
            let src = exprs[rnd(exprs.len() as u64) as usize];
            let dst = exprs[rnd(exprs.len() as u64) as usize];
            let dir = if rnd(10) == 0 { "<>" } else { "->" };
            let text = format!("alert ip {src} any {dir} {dst} any (msg:\"t\"; sid:{sid};)");
            rules.push(parse_rule(&text, &Default::default()).unwrap());
        }
        let ids: Vec<u32> = (0..rules.len() as u32).collect();
        let idx = PacketRules::new(&rules, &ids);
        let pool = |r: u64| match r % 6 {
            0 => IpAddr::V4([1, 2, (r / 6 % 4) as u8, (r / 24 % 256) as u8]),
            1 => IpAddr::V4([10, (r / 6 % 3) as u8, 0, 1]),
            2 => IpAddr::V4([5, 6, 7, (r / 6 % 256) as u8]),
            3 => IpAddr::V4([255, 255, 255, 255]),
            4 => IpAddr::V4([192, 168, 0, 1]),
            _ => IpAddr::V4([1, 3, 0, 0]),
        };
        let (mut out, mut narrowed) = (Vec::new(), 0);
        for _ in 0..3000 {
            let (s, d) = (pool(rnd(1 << 20)), pool(rnd(1 << 20)));
            idx.candidates(&s, &d, &mut out);
            let want: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&i| {
                    let r = &rules[i as usize];
                    (r.src.matches(&s) && r.dst.matches(&d))
                        || (r.bidir && r.src.matches(&d) && r.dst.matches(&s))
                })
                .collect();
            assert!(out.windows(2).all(|w| w[0] < w[1]), "{out:?}");
            for w in &want {
                assert!(out.contains(w), "rule {w} missing for {s:?} -> {d:?}");
            }
            narrowed += (out.len() < rules.len() / 2) as usize;
        }
        assert!(narrowed > 1000, "the index narrowed {narrowed} packets");
        // IPv6 packets: the rules without an IPv4 bound and those whose
        // filed side names IPv6 networks (fails if a list mixing both
        // families is filed under its IPv4 entries only).
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        let mut doc = [0u8; 16];
        doc[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        doc[15] = 5;
        let v6s = [IpAddr::V6(v6), IpAddr::V6(doc)];
        for s in &v6s {
            for d in &v6s {
                idx.candidates(s, d, &mut out);
                assert!(out.windows(2).all(|w| w[0] < w[1]), "{out:?}");
                for (i, r) in rules.iter().enumerate() {
                    if (r.src.matches(s) && r.dst.matches(d))
                        || (r.bidir && r.src.matches(d) && r.dst.matches(s))
                    {
                        assert!(
                            out.contains(&(i as u32)),
                            "rule {i} missing for {s:?} -> {d:?}"
                        );
                    }
                }
            }
        }
    }

    /// A list mixing IPv4 and IPv6 networks (ET's Tor rules) is filed under
    /// its IPv4 entries: an IPv4 packet from elsewhere does not make it a
    /// candidate (it did, checked on every packet towards `$HOME_NET`, when
    /// its IPv6 entries made the side unbounded), one from a listed IPv4
    /// address does, and so does an IPv6 packet.
    #[test]
    fn a_list_of_both_families_is_filed_under_its_ipv4_entries() {
        let text = "alert tcp [1.2.3.4,2001:db8::1] any -> [10.0.0.0/8,192.168.0.0/16] any (msg:\"tor\"; sid:1;)";
        let rules = vec![parse_rule(text, &Default::default()).unwrap()];
        let idx = PacketRules::new(&rules, &[0]);
        let mut out = Vec::new();
        let home = IpAddr::V4([10, 0, 0, 5]);
        idx.candidates(&IpAddr::V4([9, 9, 9, 9]), &home, &mut out);
        assert!(out.is_empty(), "{out:?}");
        idx.candidates(&IpAddr::V4([1, 2, 3, 4]), &home, &mut out);
        assert_eq!(out, [0]);
        let mut tor = [0u8; 16];
        tor[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        tor[15] = 1;
        let mut other = [0u8; 16];
        other[15] = 2;
        idx.candidates(&IpAddr::V6(tor), &IpAddr::V6(other), &mut out);
        assert_eq!(out, [0]);
    }
}
