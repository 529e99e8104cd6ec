//! Opening sockets inside a network namespace while the process stays outside.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Runs `f` on a fresh thread that joined the network namespace `name` (as made
/// by `ip netns add`, i.e. `/run/netns/NAME`) and returns its result. A socket
/// keeps the namespace it was created in, so sockets `f` opens can be used from
/// any thread afterwards. The calling thread's namespace is untouched.
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad network namespace name {name:?}"),
        ));
    }
    let path = format!("/run/netns/{name}");
    let file = File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {name}: {path}: {e}")))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on a valid namespace descriptor; it changes only this
            // thread, which ends when `f` returns.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("setns into {name}: {e}")));
            }
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// [`in_netns`] when a namespace is given, else `f` on the calling thread.
pub fn in_netns_opt<T: Send>(name: Option<&str>, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    match name {
        Some(n) => in_netns(n, f),
        None => Ok(f()),
    }
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
