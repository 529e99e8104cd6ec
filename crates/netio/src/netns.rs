//! Opening sockets inside a network namespace while the process stays outside.

use std::io;

/// Runs `f` on a fresh thread that joined the network namespace `name` (as made
/// by `ip netns add` or [`sluice_netns::create`], i.e. `/run/netns/NAME`) and
/// returns its result. A socket keeps the namespace it was created in, so
/// sockets `f` opens can be used from any thread afterwards. The calling
/// thread's namespace is untouched. This is [`sluice_netns::in_netns`] with its
/// error as an `io::Error` (same kind), which is what socket code here speaks.
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    sluice_netns::in_netns(name, f).map_err(io::Error::from)
}

/// [`in_netns`] when a namespace is given, else `f` on the calling thread.
pub fn in_netns_opt<T: Send>(name: Option<&str>, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    sluice_netns::in_netns_opt(name, f).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused() {
        for n in ["", "a/b", "..", "."] {
            assert_eq!(
                in_netns(n, || ()).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
        assert!(in_netns("sluice-no-such-netns", || ()).is_err());
    }
}
