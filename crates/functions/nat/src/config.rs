//! The NAT's configuration and its validation into a [`Nat`].

use serde::Deserialize;
use sluice_nf::batch::Pass;
use sluice_state::{Key, Namespace, Ops};

use crate::{Counters, Nat, TABLE_POOL};

/// Mapping timeouts, in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// TCP without FIN or RST seen. Default 7440 (RFC 5382: at least 2 h 4 min).
    pub tcp_established: u64,
    /// TCP after a RST or FINs from both sides. Default 240 (RFC 5382).
    pub tcp_transitory: u64,
    /// UDP. Default 300 (RFC 4787: at least 2 min, 5 recommended).
    pub udp: u64,
    /// ICMP echo. Default 60 (RFC 5508).
    pub icmp: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_established: 7440,
            tcp_transitory: 240,
            udp: 300,
            icmp: 60,
        }
    }
}

/// What to do with IPv6 packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Ipv6Policy {
    /// Forward untouched.
    #[default]
    Pass,
    /// Drop (reason `ipv6`).
    Drop,
}

/// NAT configuration (YAML under `type: nat`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// IPv4 prefixes whose outgoing traffic is translated, e.g. `["10.0.0.0/8"]`.
    pub inside: Vec<String>,
    /// Public IPv4 addresses and prefixes (every address of a prefix is used).
    pub pool: Vec<String>,
    /// Public port range, inclusive. Default `"1024-65535"`.
    pub ports: String,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// IPv6 handling. Default `pass`.
    pub ipv6: Ipv6Policy,
    /// A mapping's `last_seen` is rewritten at most once per this many
    /// milliseconds, so timeouts are accurate to within it. Default 1000.
    pub refresh_ms: u64,
    /// Pool items this instance takes ahead, as one block, so that most new
    /// mappings need no pool round trip (a port block, as carrier-grade NATs
    /// keep). Default 0 (allocate each new mapping's item when it is needed).
    /// A block is recorded in the store with a count of the items used, and
    /// its unused items are freed by a timer if the instance dies before using
    /// them; which public port a flow gets then depends on which instance
    /// translates it.
    pub port_reserve: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            inside: Vec::new(),
            pool: Vec::new(),
            ports: "1024-65535".into(),
            timeouts: Timeouts::default(),
            ipv6: Ipv6Policy::Pass,
            refresh_ms: 1000,
            port_reserve: 0,
        }
    }
}

/// A configuration the NAT cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nat config: {0}")]
pub struct ConfigError(pub String);

fn parse_v4_prefix(s: &str) -> Result<(u32, u32), ConfigError> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (
            a,
            l.parse::<u32>()
                .ok()
                .filter(|&l| l <= 32)
                .ok_or_else(|| ConfigError(format!("invalid prefix length in \"{s}\"")))?,
        ),
        None => (s, 32),
    };
    let addr: std::net::Ipv4Addr = a
        .parse()
        .map_err(|_| ConfigError(format!("invalid IPv4 address \"{s}\" (NAT is IPv4 only)")))?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ok((u32::from(addr) & mask, mask))
}

/// Builds a NAT. `_base_dir` is unused (the NAT reads no files) but kept for a
/// uniform constructor.
pub fn build(
    config: &Config,
    ns: Namespace,
    _base_dir: &std::path::Path,
) -> Result<Nat, ConfigError> {
    let inside = config
        .inside
        .iter()
        .map(|s| parse_v4_prefix(s).map_err(|e| ConfigError(format!("inside: {}", e.0))))
        .collect::<Result<Vec<_>, _>>()?;
    if inside.is_empty() {
        return Err(ConfigError("`inside` needs at least one prefix".into()));
    }
    let mut pool = Vec::new();
    for s in &config.pool {
        let (net, mask) = parse_v4_prefix(s).map_err(|e| ConfigError(format!("pool: {}", e.0)))?;
        for i in 0..=(!mask) as u64 {
            pool.push(net + i as u32);
            if pool.len() > 1 << 20 {
                return Err(ConfigError("pool: more than 2^20 addresses".into()));
            }
        }
    }
    pool.sort_unstable();
    pool.dedup();
    if pool.is_empty() {
        return Err(ConfigError("`pool` needs at least one address".into()));
    }
    let (lo, hi) = config
        .ports
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)))
        .or_else(|| config.ports.trim().parse::<u16>().ok().map(|p| (p, p)))
        .filter(|(a, b)| a <= b && *a > 0)
        .ok_or_else(|| ConfigError(format!("ports: invalid range \"{}\"", config.ports)))?;
    let nports = (hi - lo) as u64 + 1;
    let items = nports * pool.len() as u64;
    if items > u32::MAX as u64 {
        return Err(ConfigError(
            "pool: more than 2^32 address-port pairs".into(),
        ));
    }
    let t = &config.timeouts;
    let s = |x: u64| x.saturating_mul(1_000_000_000);
    Ok(Nat {
        ns,
        inside,
        pool_index: pool
            .iter()
            .enumerate()
            .map(|(i, &a)| (a, i as u32))
            .collect(),
        pool,
        port_lo: lo,
        nports: nports as u32,
        items,
        pool_key: Key::new(ns, TABLE_POOL, b"pool"),
        pool_ready: false,
        ipv6: config.ipv6,
        t_est: s(t.tcp_established),
        t_trans: s(t.tcp_transitory),
        t_udp: s(t.udp),
        t_icmp: s(t.icmp),
        refresh_ns: config.refresh_ms.saturating_mul(1_000_000),
        reserve_n: config.port_reserve.min(4096) as usize,
        reserve: std::collections::VecDeque::new(),
        refill: None,
        scratch: Vec::new(),
        pass: Pass::default(),
        ops2: Ops::new(),
        pending: Vec::new(),
        recheck: Vec::new(),
        cut_at: u64::MAX,
        refused: false,
        sides: Vec::new(),
        keys: Vec::new(),
        ids: Vec::new(),
        ids2: Vec::new(),
        revs: Vec::new(),
        c: Counters::default(),
    })
}
