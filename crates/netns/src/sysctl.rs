//! Per-namespace sysctls, written through `/proc/sys`.

use std::io;

use crate::ns::{display, in_netns_opt};
use crate::NetnsError;

/// Sets sysctl `key` (dotted, as `sysctl(8)` takes it:
/// `net.ipv6.conf.all.disable_ipv6`) to `value` in namespace `ns` (`None`: the
/// current one). Network sysctls under `/proc/sys/net` belong to the
/// namespace of the thread that opens them, so the write happens on a thread
/// inside `ns`.
pub fn sysctl(ns: Option<&str>, key: &str, value: &str) -> Result<(), NetnsError> {
    let fail = |err| NetnsError::Sysctl {
        ns: display(ns).to_string(),
        key: key.to_string(),
        value: value.to_string(),
        err,
    };
    if key.is_empty() || key.contains('/') || key.split('.').any(|p| p.is_empty() || p == "..") {
        return Err(fail(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad sysctl key",
        )));
    }
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    in_netns_opt(ns, || std::fs::write(&path, value))?.map_err(fail)
}
