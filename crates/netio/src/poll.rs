//! Waiting for readiness of several descriptors (`poll(2)`).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A reusable set of descriptors to wait on. Register once, then call
/// [`Poller::wait`] in the loop; nothing is allocated per call.
#[derive(Debug, Default)]
pub struct Poller {
    fds: Vec<libc::pollfd>,
}

impl Poller {
    /// An empty set.
    pub fn new() -> Poller {
        Poller::default()
    }

    /// Adds `fd`, to wake when it is readable; returns its token (index).
    pub fn add(&mut self, fd: RawFd) -> usize {
        self.push(fd, libc::POLLIN)
    }

    /// Adds `fd`, to wake when it is writable (a full send queue drained).
    pub fn add_writable(&mut self, fd: RawFd) -> usize {
        self.push(fd, libc::POLLOUT)
    }

    fn push(&mut self, fd: RawFd, events: i16) -> usize {
        self.fds.push(libc::pollfd {
            fd,
            events,
            revents: 0,
        });
        self.fds.len() - 1
    }

    /// Removes every descriptor (keeping the allocation).
    pub fn clear(&mut self) {
        self.fds.clear();
    }

    /// How many descriptors are registered.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// True if none is registered.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Waits until a descriptor is ready or `timeout` passes; returns how many are
    /// ready (0 on timeout or when interrupted by a signal).
    ///
    /// The timeout is kept to the nanosecond (`ppoll(2)`): `poll(2)` takes whole
    /// milliseconds, and a deadline less than a millisecond away truncated to 0
    /// turned callers' waits for it into a busy loop.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        for p in &mut self.fds {
            p.revents = 0;
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: passes the live pollfd array and its length, and a live
        // timespec; no signal mask.
        let r = unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize)
    }

    /// Whether the descriptor of `token` was ready (or in error, which a read
    /// will report) after the last [`Poller::wait`].
    pub fn is_ready(&self, token: usize) -> bool {
        self.fds.get(token).is_some_and(|p| {
            p.revents & (p.events | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn wakes_on_readable_and_times_out_otherwise() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut p = Poller::new();
        let ta = p.add(a.as_raw_fd());
        let tb = p.add(b.as_raw_fd());
        assert_eq!(p.wait(Duration::from_millis(10)).unwrap(), 0);
        assert!(!p.is_ready(ta));
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        assert_eq!(p.wait(Duration::from_secs(5)).unwrap(), 1);
        assert!(p.is_ready(ta) && !p.is_ready(tb));
        assert!(!p.is_ready(99));
    }

    #[test]
    fn sub_millisecond_timeouts_sleep_instead_of_spinning() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut p = Poller::new();
        p.add(a.as_raw_fd());
        // 200 waits of 0.5 ms: at least 100 ms asleep (poll(2) would have
        // rounded each down to 0 and returned at once).
        let t = std::time::Instant::now();
        for _ in 0..200 {
            assert_eq!(p.wait(Duration::from_micros(500)).unwrap(), 0);
        }
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }
}
