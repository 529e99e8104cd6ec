//! Addresses, the 5-tuple flow key, and the direction-invariant flow hash.

use core::fmt;

/// An IPv4 or IPv6 address stored as raw network-order bytes.
///
/// Unlike `std::net::IpAddr` this exposes its bytes as a slice, which is what
/// checksums and key encodings need, and it is cheap to compare and hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpAddr {
    /// An IPv4 address.
    V4([u8; 4]),
    /// An IPv6 address.
    V6([u8; 16]),
}

impl IpAddr {
    /// The unspecified IPv4 address, used as a placeholder.
    pub const UNSPECIFIED_V4: IpAddr = IpAddr::V4([0; 4]);

    /// The address bytes in network order.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            IpAddr::V4(b) => b,
            IpAddr::V6(b) => b,
        }
    }

    /// True for IPv4.
    #[inline]
    pub fn is_v4(&self) -> bool {
        matches!(self, IpAddr::V4(_))
    }

    /// The IPv4 address as a host-order integer, or `None` for IPv6.
    #[inline]
    pub fn v4_u32(&self) -> Option<u32> {
        match self {
            IpAddr::V4(b) => Some(u32::from_be_bytes(*b)),
            IpAddr::V6(_) => None,
        }
    }
}

impl From<std::net::IpAddr> for IpAddr {
    fn from(a: std::net::IpAddr) -> Self {
        match a {
            std::net::IpAddr::V4(v) => IpAddr::V4(v.octets()),
            std::net::IpAddr::V6(v) => IpAddr::V6(v.octets()),
        }
    }
}

impl From<[u8; 4]> for IpAddr {
    fn from(b: [u8; 4]) -> Self {
        IpAddr::V4(b)
    }
}

impl From<[u8; 16]> for IpAddr {
    fn from(b: [u8; 16]) -> Self {
        IpAddr::V6(b)
    }
}

impl From<std::net::Ipv4Addr> for IpAddr {
    fn from(a: std::net::Ipv4Addr) -> Self {
        IpAddr::V4(a.octets())
    }
}

impl From<std::net::Ipv6Addr> for IpAddr {
    fn from(a: std::net::Ipv6Addr) -> Self {
        IpAddr::V6(a.octets())
    }
}

impl From<IpAddr> for std::net::IpAddr {
    fn from(a: IpAddr) -> Self {
        match a {
            IpAddr::V4(b) => std::net::IpAddr::V4(b.into()),
            IpAddr::V6(b) => std::net::IpAddr::V6(b.into()),
        }
    }
}

impl fmt::Display for IpAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        std::net::IpAddr::from(*self).fmt(f)
    }
}

impl fmt::Debug for IpAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for IpAddr {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<std::net::IpAddr>().map(Into::into)
    }
}

/// A directional 5-tuple, and the zone it lives in. For ICMP echo both ports carry
/// the echo identifier, so a request and its reply map to reverse keys of each
/// other; other ICMP messages have both ports zero.
///
/// The `zone` keeps apart identical 5-tuples of different virtual networks: two
/// tenants' `10.0.0.1:1234 -> 10.0.0.2:80` in VXLAN 100 and VXLAN 200 (or VLAN
/// 10 and VLAN 20) are different flows, with different state. It is 0 for
/// untagged, unencapsulated traffic, whose keys and store encoding are what they
/// were before zones existed. See [`crate::parse::zone`] for its layout.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// The virtual network (0: none). Both directions of a flow share it.
    pub zone: u32,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (or ICMP identifier).
    pub src_port: u16,
    /// Destination port (or ICMP identifier).
    pub dst_port: u16,
    /// IP protocol number of the transport (after IPv6 extension headers).
    pub proto: u8,
}

/// Which way a packet travels relative to a flow's canonical orientation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The packet's source is the canonical key's source.
    Forward,
    /// The packet's source is the canonical key's destination.
    Reverse,
}

/// Longest encoding of a [`FlowKey`]: version, proto, zone, two IPv6 addresses,
/// two ports.
pub const FLOW_KEY_MAX_ENCODED: usize = 2 + 4 + 16 + 16 + 4;

/// Set in the version byte of an encoding that carries a zone.
const ZONED: u8 = 0x80;

impl FlowKey {
    /// No flow: unspecified IPv4 addresses, ports and protocol 0, zone 0 (what
    /// a frame that is not IP, or whose IP header did not decode, carries).
    pub const UNSPECIFIED: FlowKey = FlowKey {
        zone: 0,
        src: IpAddr::UNSPECIFIED_V4,
        dst: IpAddr::UNSPECIFIED_V4,
        src_port: 0,
        dst_port: 0,
        proto: 0,
    };

    /// The same flow seen from the other end.
    #[inline]
    pub fn reverse(&self) -> FlowKey {
        FlowKey {
            zone: self.zone,
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
        }
    }

    /// Which side of its canonical orientation `self` is, without building the
    /// canonical key (as [`FlowKey::canonical`]`().1`).
    #[inline]
    pub fn side(&self) -> Side {
        if (self.src, self.src_port) <= (self.dst, self.dst_port) {
            Side::Forward
        } else {
            Side::Reverse
        }
    }

    /// The orientation shared by both directions (lower endpoint first) and which
    /// side of it `self` is. Both directions of a flow yield the same canonical key.
    #[inline]
    pub fn canonical(&self) -> (FlowKey, Side) {
        if (self.src, self.src_port) <= (self.dst, self.dst_port) {
            (*self, Side::Forward)
        } else {
            (self.reverse(), Side::Reverse)
        }
    }

    /// A hash equal for both directions of a flow, used to split flows among
    /// instances by hash range so that both directions choose the same instance.
    #[inline]
    pub fn symmetric_hash(&self) -> u32 {
        // The canonical key's hash, without building the canonical key.
        if (self.src, self.src_port) <= (self.dst, self.dst_port) {
            self.hash_of(&self.src, &self.dst, self.src_port, self.dst_port)
        } else {
            self.hash_of(&self.dst, &self.src, self.dst_port, self.src_port)
        }
    }

    /// The flow's id in EVE records (`flow_id`): 64 bits, equal for both
    /// directions and on every instance (a function of the canonical key,
    /// zone included), kept below 2^53 so JSON readers that hold numbers as
    /// doubles read it exactly; 0 is never an id.
    pub fn flow_id(&self) -> u64 {
        let (a, b, pa, pb) = if (self.src, self.src_port) <= (self.dst, self.dst_port) {
            (&self.src, &self.dst, self.src_port, self.dst_port)
        } else {
            (&self.dst, &self.src, self.dst_port, self.src_port)
        };
        let mut h: u64 = 0x6a09_e667_f3bc_c908 ^ self.proto as u64 ^ (self.zone as u64) << 8;
        h = mix(h, a);
        h = mix(h, b);
        h = mix64(h ^ ((pa as u64) << 16 | pb as u64));
        (h & ((1 << 53) - 1)).max(1)
    }

    /// A hash of the key as it is (direction-sensitive).
    #[inline]
    pub fn directional_hash(&self) -> u32 {
        self.hash_of(&self.src, &self.dst, self.src_port, self.dst_port)
    }

    #[inline]
    fn hash_of(&self, src: &IpAddr, dst: &IpAddr, sp: u16, dp: u16) -> u32 {
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ self.proto as u64 ^ (self.zone as u64) << 8;
        h = mix(h, src);
        h = mix(h, dst);
        h = mix64(h ^ ((sp as u64) << 16 | dp as u64));
        (h ^ (h >> 32)) as u32
    }

    /// Writes the key's stable binary encoding into `out` and returns its length.
    ///
    /// The layout is `[ip version][proto][src][dst][src_port][dst_port]`, in network
    /// order, and for a key with a zone `[ip version | 0x80][proto][zone][src]...`;
    /// it is what state-store keys are built from, so it must never change
    /// without a migration.
    pub fn encode(&self, out: &mut [u8; FLOW_KEY_MAX_ENCODED]) -> usize {
        let (ver, alen) = match self.src {
            IpAddr::V4(_) => (4u8, 4),
            IpAddr::V6(_) => (6u8, 16),
        };
        out[1] = self.proto;
        let a = if self.zone == 0 {
            out[0] = ver;
            2
        } else {
            out[0] = ver | ZONED;
            out[2..6].copy_from_slice(&self.zone.to_be_bytes());
            6
        };
        out[a..a + alen].copy_from_slice(self.src.as_bytes());
        out[a + alen..a + 2 * alen].copy_from_slice(self.dst.as_bytes());
        let p = a + 2 * alen;
        out[p..p + 2].copy_from_slice(&self.src_port.to_be_bytes());
        out[p + 2..p + 4].copy_from_slice(&self.dst_port.to_be_bytes());
        p + 4
    }

    /// Reads a key written by [`FlowKey::encode`].
    pub fn decode(b: &[u8]) -> Option<FlowKey> {
        let v = *b.first()?;
        let alen = match v & !ZONED {
            4 => 4,
            6 => 16,
            _ => return None,
        };
        let (zone, a) = if v & ZONED != 0 {
            let z = u32::from_be_bytes(b.get(2..6)?.try_into().ok()?);
            if z == 0 {
                // Zone 0 is always written without one: one key, one encoding.
                return None;
            }
            (z, 6)
        } else {
            (0, 2)
        };
        if b.len() != a + 2 * alen + 4 {
            return None;
        }
        let addr = |s: &[u8]| -> IpAddr {
            if alen == 4 {
                IpAddr::V4(s.try_into().unwrap())
            } else {
                IpAddr::V6(s.try_into().unwrap())
            }
        };
        let p = a + 2 * alen;
        Some(FlowKey {
            zone,
            proto: b[1],
            src: addr(&b[a..a + alen]),
            dst: addr(&b[a + alen..p]),
            src_port: u16::from_be_bytes([b[p], b[p + 1]]),
            dst_port: u16::from_be_bytes([b[p + 2], b[p + 3]]),
        })
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, r) = if self.src.is_v4() {
            ("", "")
        } else {
            ("[", "]")
        };
        write!(
            f,
            "{}/{l}{}{r}:{}->{l}{}{r}:{}",
            proto_name(self.proto),
            self.src,
            self.src_port,
            self.dst,
            self.dst_port
        )?;
        if self.zone != 0 {
            write!(f, "@{:#x}", self.zone)?;
        }
        Ok(())
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A short lowercase name for common protocol numbers (as EVE JSON writes them).
pub fn proto_name(p: u8) -> &'static str {
    match p {
        crate::ip_proto::TCP => "TCP",
        crate::ip_proto::UDP => "UDP",
        crate::ip_proto::ICMP => "ICMP",
        crate::ip_proto::ICMPV6 => "IPv6-ICMP",
        _ => "IP",
    }
}

/// The worker of `workers` (at least 1) that handles a flow whose
/// direction-invariant hash ([`FlowKey::symmetric_hash`]) is `hash`, so both
/// directions of a flow meet on one worker of a multi-core data plane.
///
/// The hash is remixed first: the switch gives an instance a contiguous range of
/// hashes, which dividing the raw hash by range would hand to one worker.
#[inline]
pub fn worker_of(hash: u32, workers: usize) -> usize {
    let n = workers.max(1) as u64;
    let mixed = mix64(hash as u64) as u32 as u64;
    // Multiply-shift instead of a modulo: uniform, and no division per packet.
    ((mixed * n) >> 32) as usize
}

#[inline]
fn mix64(mut x: u64) -> u64 {
    // splitmix64 finaliser: cheap and avalanches every input bit.
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[inline]
fn mix(h: u64, a: &IpAddr) -> u64 {
    match a {
        IpAddr::V4(b) => mix64(h ^ u32::from_be_bytes(*b) as u64),
        IpAddr::V6(b) => {
            let hi = u64::from_be_bytes(b[..8].try_into().unwrap());
            let lo = u64::from_be_bytes(b[8..].try_into().unwrap());
            mix64(mix64(h ^ hi) ^ lo)
        }
    }
}

#[cfg(test)]
mod flow_id_tests {
    use super::*;

    #[test]
    fn flow_ids_are_direction_invariant_wide_and_zone_aware() {
        let k = FlowKey {
            zone: 0,
            src: IpAddr::V4([10, 0, 0, 1]),
            dst: IpAddr::V4([10, 0, 0, 2]),
            src_port: 40000,
            dst_port: 80,
            proto: 6,
        };
        assert_eq!(k.flow_id(), k.reverse().flow_id());
        assert_ne!(k.flow_id(), FlowKey { zone: 5, ..k }.flow_id());
        // Wider than 32 bits: ids of many flows use the upper bits.
        let ids: Vec<u64> = (0..64)
            .map(|p| FlowKey { src_port: p, ..k }.flow_id())
            .collect();
        assert!(ids.iter().any(|&i| i > u32::MAX as u64));
        assert!(ids.iter().all(|&i| i > 0 && i < 1 << 53));
        let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(a: [u8; 4], b: [u8; 4], sp: u16, dp: u16) -> FlowKey {
        FlowKey {
            zone: 0,
            src: IpAddr::V4(a),
            dst: IpAddr::V4(b),
            src_port: sp,
            dst_port: dp,
            proto: 6,
        }
    }

    #[test]
    fn symmetric_hash_is_direction_invariant() {
        let f = k([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80);
        assert_eq!(f.symmetric_hash(), f.reverse().symmetric_hash());
        assert_ne!(f.directional_hash(), f.reverse().directional_hash());
        assert_eq!(f.canonical().0, f.reverse().canonical().0);
        assert_ne!(f.canonical().1, f.reverse().canonical().1);
    }

    #[test]
    fn workers_split_even_a_contiguous_hash_range_evenly() {
        // An instance leased the lower quarter of the hash space: its two or
        // three workers still share it about evenly.
        for n in [2usize, 3] {
            let mut per = vec![0u32; n];
            for h in (0..u32::MAX / 4).step_by(65_537) {
                let w = worker_of(h, n);
                assert!(w < n);
                per[w] += 1;
            }
            let total: u32 = per.iter().sum();
            let share = total / n as u32;
            assert!(
                per.iter()
                    .all(|&c| c > share * 9 / 10 && c < share * 11 / 10),
                "{per:?}"
            );
        }
        assert_eq!(worker_of(u32::MAX, 1), 0);
        assert_eq!(worker_of(12345, 0), 0);
        let f = k([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80);
        assert_eq!(
            worker_of(f.symmetric_hash(), 4),
            worker_of(f.reverse().symmetric_hash(), 4)
        );
    }

    #[test]
    fn symmetric_hash_spreads() {
        // 4096 flows over 16 buckets: every bucket is hit, none holds more than twice its share.
        let mut buckets = [0u32; 16];
        for i in 0..4096u32 {
            let f = k(
                [10, 0, (i >> 8) as u8, i as u8],
                [192, 0, 2, 1],
                1024 + i as u16,
                443,
            );
            buckets[(f.symmetric_hash() >> 28) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| b > 128 && b < 512), "{buckets:?}");
    }

    #[test]
    fn encode_round_trips() {
        let mut buf = [0u8; FLOW_KEY_MAX_ENCODED];
        let f = k([1, 2, 3, 4], [5, 6, 7, 8], 9, 10);
        let n = f.encode(&mut buf);
        assert_eq!(n, 14);
        assert_eq!(FlowKey::decode(&buf[..n]), Some(f));
        let g = FlowKey {
            zone: 0,
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            proto: 17,
        };
        let n = g.encode(&mut buf);
        assert_eq!(FlowKey::decode(&buf[..n]), Some(g));
        assert_eq!(FlowKey::decode(&buf[..n - 1]), None);
        // A zone makes a different key, with its own encoding, that round-trips.
        let z = FlowKey {
            zone: 0x0200_0064,
            ..g
        };
        let mut zb = [0u8; FLOW_KEY_MAX_ENCODED];
        let zn = z.encode(&mut zb);
        assert_eq!(zn, n + 4);
        assert_ne!(&zb[..zn], &buf[..n]);
        assert_eq!(FlowKey::decode(&zb[..zn]), Some(z));
        assert_ne!(z.symmetric_hash(), g.symmetric_hash());
        assert_eq!(z.reverse().zone, z.zone);
        assert_eq!(z.canonical().0.zone, z.zone);
        // A zoned encoding claiming zone 0 is refused.
        zb[2..6].copy_from_slice(&[0; 4]);
        assert_eq!(FlowKey::decode(&zb[..zn]), None);
    }
}
