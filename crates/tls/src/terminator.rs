//! A TLS terminator in front of an HTTP server that serves a private Unix
//! socket.
//!
//! tiny_http's own `ssl-rustls` feature pins rustls 0.20 (RUSTSEC-2024-0336:
//! a peer can spin a thread forever), so the controller and the agents
//! terminate TLS themselves with the rustls ureq already brings: each
//! connection gets a thread that runs the handshake and relays plaintext to
//! the HTTP workers over a Unix socket in a private directory. A client that
//! speaks plain HTTP to the TLS port gets the server's `400` answer naming the
//! fix; a stalled or garbled handshake holds up nobody but its own thread.
//! With a [`PeerTag`], each request of a connection whose client presented a
//! verified certificate of the hosts' CA carries who it names
//! ([`crate::peer`]).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::peer::{PeerTag, Tagger};

/// What the terminator asks its server whether to stop.
pub trait Stopping: Send + Sync + 'static {
    /// True once the server is stopping: relays close and the acceptor returns.
    fn stopping(&self) -> bool;
}

impl Stopping for AtomicBool {
    fn stopping(&self) -> bool {
        self.load(Ordering::Acquire)
    }
}

/// The listener the HTTP workers serve behind the terminator: a Unix socket
/// in a fresh directory only the server's user can enter (removed when the
/// value is dropped).
pub struct Backend {
    dir: PathBuf,
    /// The socket's path.
    pub path: PathBuf,
}

impl Backend {
    /// A new directory under the system's temporary directory, named for the
    /// process and a random part, and the socket's listener in it. Directories
    /// of this prefix left by processes that no longer run (killed before
    /// they could remove theirs) are removed first.
    pub fn bind(prefix: &str) -> std::io::Result<(Backend, UnixListener)> {
        Backend::bind_in(&std::env::temp_dir(), prefix)
    }

    /// [`Backend::bind`] under `parent`.
    pub fn bind_in(parent: &Path, prefix: &str) -> std::io::Result<(Backend, UnixListener)> {
        use std::os::unix::fs::DirBuilderExt;
        sweep(parent, prefix);
        let mut r = [0u8; 12];
        getrandom::getrandom(&mut r).map_err(|e| std::io::Error::other(e.to_string()))?;
        let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let dir = parent.join(format!("{prefix}-{}-{name}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("http.sock");
        let backend = Backend { dir, path };
        let listener = UnixListener::bind(&backend.path)?;
        Ok((backend, listener))
    }
}

/// Removes `parent/{prefix}-{pid}-{random}` directories of this user whose
/// process is gone. A directory whose pid runs (or was reused) is kept: at
/// worst an empty directory stays, never a live server's socket goes.
fn sweep(parent: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let head = format!("{prefix}-");
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&head)) else {
            continue;
        };
        let Some((pid, random)) = rest.split_once('-') else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        if pid <= 0 || random.len() != 24 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me {
            continue;
        }
        // SAFETY: signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Most connections relayed at once, whatever the descriptors allow: each
/// holds a thread here and one in the HTTP server behind.
const MAX_CONNECTIONS: usize = 16_384;
/// Fewest, however low the open-files limit.
const MIN_CONNECTIONS: usize = 64;
/// Descriptors a relayed connection takes in the process: the client's socket,
/// this side of the connection to the backend, and the backend server's side
/// (which tiny_http holds twice, cloned to read and to write).
const FDS_PER_CONNECTION: u64 = 4;
/// Descriptors left for everything else (files, the store, pushes to agents).
const FDS_RESERVED: u64 = 256;

/// How many connections may be relayed at once with `open_files` descriptors
/// (the process's limit): a controller's agents each keep one open (a
/// keep-alive connection for their heartbeats), and a backend server that runs
/// out of descriptors stops accepting for good (tiny_http's accept thread
/// panics), so the cap keeps within the limit; more are closed at once.
pub fn connection_cap(open_files: u64) -> usize {
    let fit = open_files.saturating_sub(FDS_RESERVED) / FDS_PER_CONNECTION;
    (fit.min(MAX_CONNECTIONS as u64) as usize).max(MIN_CONNECTIONS)
}

/// The process's open-files limit (soft), if it can be read.
pub fn open_files_limit() -> Option<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0).then_some(l.rlim_cur)
}
/// A connection with nothing to relay for this long is closed.
const IDLE: Duration = Duration::from_secs(60);
/// How often waiting threads look at whether the server is stopping.
const STOP_CHECK: i32 = 100;

/// Accepts TLS connections on `listener` until the server stops, relaying
/// each to `backend` on a thread of its own; tagging the requests of clients
/// with a certificate with `tag`, if given.
pub fn acceptor<S: Stopping>(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    backend: PathBuf,
    plain_answer: &'static str,
    tag: Option<Arc<PeerTag>>,
    shared: Arc<S>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    // Read once: the caller sets the limit before it starts serving.
    let cap = connection_cap(open_files_limit().unwrap_or(1024));
    while !shared.stopping() {
        if !readable(listener.as_raw_fd(), STOP_CHECK) {
            continue;
        }
        let tcp = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => continue,
        };
        if live.fetch_add(1, Ordering::SeqCst) >= cap {
            live.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (config, backend, shared, live, tag) = (
            config.clone(),
            backend.clone(),
            shared.clone(),
            live.clone(),
            tag.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("tls-relay".into())
            .spawn(move || {
                // A failed connection concerns its client only.
                let _ = relay(
                    tcp,
                    config,
                    &backend,
                    plain_answer,
                    tag.as_deref(),
                    &*shared,
                );
                live.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The closure (and its count) went with the failed spawn.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether `fd` became readable (or closed) within `ms` milliseconds.
fn readable(fd: i32, ms: i32) -> bool {
    poll(&mut [pollfd(fd)], ms) > 0
}

fn pollfd(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn poll(fds: &mut [libc::pollfd], ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) }
}

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// One connection: the handshake, then plaintext both ways until either side
/// closes or it is idle for [`IDLE`].
fn relay<S: Stopping + ?Sized>(
    mut tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    backend: &Path,
    plain_answer: &str,
    tag: Option<&PeerTag>,
    shared: &S,
) -> std::io::Result<()> {
    tcp.set_write_timeout(Some(Duration::from_secs(10)))?;
    tcp.set_nodelay(true)?;
    if !readable(tcp.as_raw_fd(), IDLE.as_millis() as i32) {
        return Ok(());
    }
    let mut first = [0u8; 1];
    if tcp.peek(&mut first)? == 1 && first[0] != TLS_HANDSHAKE {
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{plain_answer}",
            plain_answer.len()
        );
        return tcp.write_all(answer.as_bytes());
    }
    let mut tls = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut back: Option<UnixStream> = None;
    let mut tagger: Option<Tagger> = None;
    let mut tagged = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut last = Instant::now();
    let mut client_done = false;
    loop {
        while tls.wants_write() {
            tls.write_tls(&mut tcp)?;
        }
        if shared.stopping() || last.elapsed() > IDLE {
            return Ok(());
        }
        let mut fds = vec![pollfd(tcp.as_raw_fd())];
        if client_done {
            // Ignored by poll: a closed socket would report a hang-up forever.
            fds[0].fd = -1;
        }
        if let Some(b) = &back {
            fds.push(pollfd(b.as_raw_fd()));
        }
        if poll(&mut fds, STOP_CHECK) <= 0 {
            continue;
        }
        last = Instant::now();
        if fds[0].revents != 0 && !client_done {
            if tls.read_tls(&mut tcp)? == 0 {
                client_done = true;
            }
            if let Err(e) = tls.process_new_packets() {
                // Send the alert it queued, then give up.
                while tls.wants_write() {
                    tls.write_tls(&mut tcp)?;
                }
                return Err(std::io::Error::other(e));
            }
            // Plaintext may come in the same read as the handshake's end.
            if back.is_none() && !tls.is_handshaking() {
                back = Some(connect(backend)?);
                // The verifier accepted the certificate: only its name is
                // left to read.
                tagger = tag.and_then(|t| {
                    let peer = crate::hosts::PeerCert::of(tls.peer_certificates()?.first()?)?;
                    Some(Tagger::new(t.line(&peer.line())))
                });
            }
            loop {
                match tls.reader().read(&mut buf) {
                    Ok(0) => {
                        client_done = true;
                        break;
                    }
                    Ok(n) => match (&mut back, &mut tagger) {
                        (Some(b), None) => b.write_all(&buf[..n])?,
                        (Some(b), Some(t)) => {
                            tagged.clear();
                            t.feed(&buf[..n], &mut tagged)
                                .map_err(std::io::Error::other)?;
                            b.write_all(&tagged)?;
                        }
                        (None, _) => return Ok(()),
                    },
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            if client_done {
                if let Some(b) = &back {
                    b.shutdown(std::net::Shutdown::Write)?;
                } else {
                    return Ok(());
                }
            }
        }
        if let (Some(b), Some(f)) = (&mut back, fds.get(1)) {
            if f.revents != 0 {
                let n = b.read(&mut buf)?;
                if n == 0 {
                    tls.send_close_notify();
                    while tls.wants_write() {
                        tls.write_tls(&mut tcp)?;
                    }
                    return Ok(());
                }
                tls.writer().write_all(&buf[..n])?;
            }
        }
    }
}

fn connect(backend: &Path) -> std::io::Result<UnixStream> {
    let b = UnixStream::connect(backend)?;
    b.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(b)
}

#[cfg(test)]
mod cap_tests {
    use super::*;

    #[test]
    fn the_connection_cap_keeps_within_the_open_files_limit() {
        // The usual shell default: 1,024 descriptors hold 192 connections
        // (512, the former cap, took 2,048 and killed the HTTP server).
        assert_eq!(connection_cap(1024), 192);
        assert!(connection_cap(1024) as u64 * FDS_PER_CONNECTION + FDS_RESERVED <= 1024);
        // The systemd units' 65,536: room for a 5,000-host fleet and more.
        assert_eq!(connection_cap(65_536), 16_320);
        assert_eq!(connection_cap(u64::MAX), MAX_CONNECTIONS);
        assert_eq!(connection_cap(0), MIN_CONNECTIONS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_process_s_directory_is_swept_and_a_live_one_kept() {
        let parent = tempfile::tempdir().unwrap();
        // A pid that ran and is gone: a child that exited and was reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let hex = "00112233445566778899aabb";
        let stale = parent.path().join(format!("sluice-test-{dead}-{hex}"));
        let live = parent
            .path()
            .join(format!("sluice-test-{}-{hex}", std::process::id()));
        let other = parent.path().join(format!("sluice-other-{dead}-{hex}"));
        let odd = parent.path().join(format!("sluice-test-{dead}-notrandom"));
        for d in [&stale, &live, &other, &odd] {
            std::fs::create_dir(d).unwrap();
        }
        let (backend, _listener) = Backend::bind_in(parent.path(), "sluice-test").unwrap();
        assert!(!stale.exists(), "the dead process's directory is removed");
        for d in [&live, &other, &odd] {
            assert!(d.exists(), "{} is kept", d.display());
        }
        let name = backend
            .dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            name.starts_with(&format!("sluice-test-{}-", std::process::id())),
            "{name}"
        );
        assert!(backend.path.exists());
        let dir = backend.dir.clone();
        drop(backend);
        assert!(!dir.exists(), "removed when dropped");
    }
}
