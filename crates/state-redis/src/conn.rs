//! The byte stream under one server connection: plain TCP, or TLS over TCP
//! (`rediss://`).
//!
//! The node code reads in two ways and both must work through TLS: a blocking
//! read bounded by the socket's timeout, and a read of whatever has already
//! arrived without waiting (one `recv` with `MSG_DONTWAIT`, see
//! [`Conn::read_ready`]). For TLS the ciphertext is pulled the same two ways
//! and rustls decrypts what arrived; a reply that arrives while the caller polls
//! still costs no wake-up.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use sluice_state::StoreError;

/// TLS settings of a `rediss://` URL, shared by every node of a store.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// Roots (the `ca_file`), and the client certificate if one was given.
    pub config: Arc<ClientConfig>,
    /// The name the server's certificate must carry (`server_name=`); by
    /// default the host of the address connected to (a DNS name or an IP).
    pub server_name: Option<ServerName<'static>>,
}

/// One connection's stream.
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
}

pub(crate) struct TlsConn {
    tls: ClientConnection,
    sock: TcpStream,
    /// Ciphertext received but not yet handed to rustls: `cipher[lo..hi]`.
    /// rustls pulls at most 4 KiB per `read_tls`, so reading the socket
    /// through it would cost a system call per 4 KiB of a large pipeline's
    /// replies; one receive fills this instead and rustls reads from memory.
    cipher: Box<[u8]>,
    lo: usize,
    hi: usize,
}

/// Bytes of ciphertext one receive may take (a few full TLS records).
const CIPHER_BUF: usize = 64 * 1024;

fn tls_err(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Conn {
    /// Wraps a connected socket to `addr` (`host:port`); with `tls`, completes
    /// the handshake first (bounded by the socket's timeouts). A certificate
    /// the settings do not trust is refused naming why; a handshake cut short
    /// leaves the server unavailable.
    pub(crate) fn establish(
        sock: TcpStream,
        addr: &str,
        tls: Option<&TlsSettings>,
    ) -> Result<Conn, StoreError> {
        let Some(t) = tls else {
            return Ok(Conn::Plain(sock));
        };
        let refused = |e: String| StoreError::Refused(format!("{addr}: {e}"));
        let name = match &t.server_name {
            Some(n) => n.clone(),
            None => {
                server_name_of(addr.rsplit_once(':').map_or(addr, |(h, _)| h)).map_err(refused)?
            }
        };
        let mut c = TlsConn {
            tls: ClientConnection::new(t.config.clone(), name)
                .map_err(|e| refused(format!("TLS: {e}")))?,
            sock,
            cipher: vec![0; CIPHER_BUF].into_boxed_slice(),
            lo: 0,
            hi: 0,
        };
        // Pipelines are written whole; rustls would otherwise refuse plaintext
        // beyond its 64 KiB send buffer until it is flushed.
        c.tls.set_buffer_limit(None);
        while c.tls.is_handshaking() {
            if let Err(e) = c.tls.complete_io(&mut c.sock) {
                if let Some(te) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    return Err(refused(format!("TLS handshake failed: {te}")));
                }
                return Err(StoreError::Unavailable(match e.kind() {
                    io::ErrorKind::UnexpectedEof => format!(
                        "{addr}: TLS handshake failed: the server closed the connection (is \
                         it a TLS port, and does it require a client certificate?)"
                    ),
                    _ => format!("{addr}: TLS handshake failed: {e}"),
                }));
            }
        }
        Ok(Conn::Tls(Box::new(c)))
    }

    /// Writes all of `buf`.
    pub(crate) fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(buf),
            Conn::Tls(c) => {
                c.tls.writer().write_all(buf)?;
                c.flush()
            }
        }
    }

    /// Reads what arrives, waiting up to the socket's read timeout; 0: the
    /// server closed the connection.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(c) => loop {
                if let Some(n) = c.plaintext(buf)? {
                    return Ok(n);
                }
                if c.lo == c.hi {
                    let n = c.sock.read(&mut c.cipher)?;
                    if n == 0 {
                        return Ok(0);
                    }
                    (c.lo, c.hi) = (0, n);
                }
                c.feed()?;
            },
        }
    }

    /// Reads what has already arrived without waiting: `WouldBlock` if
    /// nothing has, 0 if the server closed the connection.
    pub(crate) fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => recv_ready(s, buf),
            Conn::Tls(c) => loop {
                if let Some(n) = c.plaintext(buf)? {
                    return Ok(n);
                }
                // A record may arrive in pieces: loop until rustls has a whole
                // one or the socket has nothing more (WouldBlock).
                if c.lo == c.hi {
                    let n = recv_ready(&c.sock, &mut c.cipher)?;
                    if n == 0 {
                        return Ok(0);
                    }
                    (c.lo, c.hi) = (0, n);
                }
                c.feed()?;
            },
        }
    }

    /// Polls for up to `budget` and reads what arrives: 0 if nothing did (or
    /// the server closed the connection: the blocking read that follows says
    /// which). A reply that lands while the caller polls needs no wake-up,
    /// which is the dearer half of a loopback round trip on a virtual machine.
    pub(crate) fn poll_ready(&mut self, buf: &mut [u8], budget: Duration) -> io::Result<usize> {
        if budget.is_zero() {
            return Ok(0);
        }
        let start = Instant::now();
        loop {
            match self.read_ready(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if start.elapsed() >= budget {
                return Ok(0);
            }
            std::hint::spin_loop();
        }
    }
}

impl TlsConn {
    /// Decrypted bytes already held: `None` if there are none.
    fn plaintext(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.tls.reader().read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Hands the buffered ciphertext to rustls (as much as it takes) and
    /// decrypts it.
    fn feed(&mut self) -> io::Result<()> {
        while self.lo < self.hi {
            let mut rest = &self.cipher[self.lo..self.hi];
            let before = rest.len();
            match self.tls.read_tls(&mut rest) {
                Ok(0) => break,
                Ok(_) => self.lo += before - rest.len(),
                // rustls holds a full buffer of plaintext or of an unfinished
                // record: decrypt (below) and let the caller drain it first.
                Err(e) if e.kind() == io::ErrorKind::Other => break,
                Err(e) => return Err(e),
            }
            self.process()?;
            if self.tls.wants_read() {
                continue;
            }
            break;
        }
        self.process()
    }

    /// Decrypts what `read_tls` took in, and sends what that asks to send
    /// (alerts, key updates).
    fn process(&mut self) -> io::Result<()> {
        self.tls.process_new_packets().map_err(tls_err)?;
        self.flush()
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            self.tls.write_tls(&mut self.sock)?;
        }
        Ok(())
    }
}

/// The certificate name of `host` (the part of `host:port` before the port;
/// `[v6]` unbracketed): an IP address or a DNS name.
fn server_name_of(host: &str) -> Result<ServerName<'static>, String> {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(h.to_string())
        .map_err(|e| format!("`{h}` cannot be checked against a certificate: {e}"))
}

/// Reads what has already arrived on `stream` without waiting: one `recv` with
/// `MSG_DONTWAIT`, where switching the socket to non-blocking and back would
/// cost two more system calls on every send of unacknowledged writes.
pub(crate) fn recv_ready(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration
    // of the call, and the descriptor belongs to `stream`, which outlives it.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
