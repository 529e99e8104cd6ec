//! Network namespaces and the links, addresses, routes, neighbours, sysctls and
//! offloads inside them, set up in-process: over rtnetlink, `/proc/sys` and the
//! `SIOCETHTOOL` ioctl, with no `ip`, `sysctl` or `ethtool` command run.
//!
//! Namespaces are named the way `ip netns` names them (a bind mount of the
//! namespace on `/run/netns/NAME`), so the two interoperate: `ip netns exec`
//! enters one made here, and [`in_netns`] enters one `ip netns add` made.
//!
//! - [`create`], [`delete`], [`exists`], [`list`]: named namespaces; [`Netns`] is an
//!   owned one, deleted (with every interface in it) on drop.
//! - [`in_netns`]: runs a closure on a thread that joined a namespace. A socket
//!   keeps the namespace it was created in, so sockets opened there can be used
//!   from any thread afterwards, while the process stays where it was.
//! - [`Rtnl`]: an rtnetlink socket opened in one namespace, for links (veth
//!   pairs, bridges, moving, renaming, up/down, MTU, MAC, master), addresses,
//!   routes and neighbours.
//! - [`sysctl`] and [`offloads_off`]: per-namespace knobs.
//! - [`veth`], [`bridge`] and [`attach_endpoint`]: the shapes the agent and
//!   the testbed build out of those.
//!
//! Needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root).

use std::io;

mod ethtool;
mod ns;
mod rtnl;
mod setup;
mod sysctl;

pub use ethtool::offloads_off;
pub use ns::{
    create, delete, exists, in_netns, in_netns_opt, list, unique_name, Netns, NETNS_RUN_DIR,
};
pub use rtnl::{fmt_mac, Link, Route, RouteEntry, Rtnl};
pub use setup::{attach_endpoint, bridge, veth, Endpoint};
pub use sysctl::sysctl;

/// How the current namespace is named in messages.
const CURRENT: &str = "(current)";

/// Why a namespace operation failed; the message names the namespace, the
/// object (link, address, key) and the operation.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A namespace name that cannot be a file name in [`NETNS_RUN_DIR`].
    #[error("bad network namespace name {0:?}")]
    BadName(String),
    /// Creating, opening, entering or deleting a namespace failed.
    #[error("network namespace {ns}: {op}: {err}")]
    Namespace {
        /// The namespace.
        ns: String,
        /// What was attempted.
        op: String,
        /// The OS error.
        err: io::Error,
    },
    /// An rtnetlink request failed.
    #[error("network namespace {ns}: {op} {target}: {err}")]
    Netlink {
        /// The namespace the request was made in.
        ns: String,
        /// What was attempted (`set up`, `add address 10.0.0.1/24 to`, ...).
        op: String,
        /// The link (or other object) it was attempted on.
        target: String,
        /// The kernel's answer.
        err: io::Error,
    },
    /// A sysctl could not be written.
    #[error("network namespace {ns}: sysctl {key}={value}: {err}")]
    Sysctl {
        /// The namespace.
        ns: String,
        /// The key, dotted (`net.ipv6.conf.all.disable_ipv6`).
        key: String,
        /// The value.
        value: String,
        /// The OS error.
        err: io::Error,
    },
    /// An offload could not be turned off (and is still on).
    #[error("network namespace {ns}: turn off {feature} on {link}: {err}")]
    Offload {
        /// The namespace.
        ns: String,
        /// The link.
        link: String,
        /// The feature (`tx-checksumming`, `tcp-segmentation-offload`, ...).
        feature: String,
        /// Why.
        err: io::Error,
    },
    /// A value that does not parse (a MAC, an address with prefix).
    #[error("bad {what} {value:?}")]
    Parse {
        /// What it should have been.
        what: &'static str,
        /// What was given.
        value: String,
    },
}

impl From<NetnsError> for io::Error {
    /// Keeps the OS error's kind, so callers can still tell "no such namespace"
    /// (`NotFound`) from "not allowed" (`PermissionDenied`).
    fn from(e: NetnsError) -> io::Error {
        let kind = match &e {
            NetnsError::BadName(_) | NetnsError::Parse { .. } => io::ErrorKind::InvalidInput,
            NetnsError::Namespace { err, .. }
            | NetnsError::Netlink { err, .. }
            | NetnsError::Sysctl { err, .. }
            | NetnsError::Offload { err, .. } => err.kind(),
        };
        io::Error::new(kind, e.to_string())
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], NetnsError> {
    let bad = || NetnsError::Parse {
        what: "MAC address",
        value: s.to_string(),
    };
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next().ok_or_else(bad)?;
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

/// Parses `a.b.c.d/len` (IPv4 with prefix length).
pub fn parse_cidr(s: &str) -> Result<(std::net::Ipv4Addr, u8), NetnsError> {
    let bad = || NetnsError::Parse {
        what: "IPv4 address/prefix",
        value: s.to_string(),
    };
    let (a, l) = s.split_once('/').ok_or_else(bad)?;
    let addr = a.parse().map_err(|_| bad())?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    if len > 32 {
        return Err(bad());
    }
    Ok((addr, len))
}

#[cfg(test)]
mod tests;
