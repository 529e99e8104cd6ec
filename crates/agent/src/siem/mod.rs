//! The SIEM sink: the agent forwards every EVE line its NF instances write
//! to a Redis/Valkey stream and/or a syslog receiver.
//!
//! **Who sends.** The agent, not the instances: it follows the EVE files
//! under `{run_dir}/eve/{tenant}/` ([`tail`]), so an instance never blocks
//! on, connects to or holds credentials for a SIEM, and a host has one
//! connection per sink however many instances it runs. The files stay the
//! record (`GET /v1/eve`, `sluice alerts`); the sink is a copy.
//!
//! **A down sink never stops anything.** Lines wait in a bounded queue per
//! sink ([`Outbox`]); when it is full the oldest are dropped and counted
//! lost. A failed send drops the connection and retries after a backoff
//! that doubles from 100 ms to 5 s ([`Backoff`]). Delivery is at least once:
//! a batch whose connection broke mid-way is sent again whole.
//!
//! **Restarts.** Each sink's position in each file is saved in the run
//! directory ([`saved`]), so a restarted agent sends what was written while
//! it was down, and of what it had sent, again only what it sent after the
//! last save (about a second's worth; nothing after a clean stop).
//!
//! **Redis/Valkey.** One `XADD {stream}:{tenant} MAXLEN ~ {maxlen} * tenant T
//! event_type E eve LINE` per line, a batch pipelined in one round trip.
//! Credentials as the state store's: `redis://USER@HOST:PORT?password_file=F`
//! (never a password in the URL, on a command line or in a log; `rediss://`
//! with `ca_file=` for TLS).
//!
//! **Syslog.** One RFC 5424 message per line ([`syslog`]), over UDP (one
//! datagram each) or TCP (octet-counted frames), the EVE JSON as its MSG
//! with the tenant added.

pub mod saved;
pub mod syslog;
pub mod tail;

use std::collections::{HashMap, VecDeque};
use std::io::{Read as _, Seek, SeekFrom, Write as _};
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_state_redis::acl::{Admin, Value};

/// Default stream key prefix: a tenant's stream is `sluice:eve:TENANT`.
pub const DEFAULT_STREAM: &str = "sluice:eve";
/// Default approximate length each stream is trimmed to.
pub const DEFAULT_MAXLEN: u64 = 100_000;
/// Default number of lines a sink holds while it is down.
pub const DEFAULT_QUEUE: usize = 10_000;

/// Lines sent per batch (one round trip to Redis).
const BATCH: usize = 512;
/// How often the files are looked at.
const POLL: Duration = Duration::from_millis(100);
/// Most bytes read of one file per poll.
const MAX_READ: u64 = 1 << 20;
/// Connect, read and write timeout of the sinks' connections.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Where the EVE lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiemConfig {
    /// A Redis/Valkey stream per tenant.
    pub redis: Option<RedisSink>,
    /// A syslog receiver.
    pub syslog: Option<SyslogSink>,
    /// Lines each sink holds while it is down; beyond, the oldest are lost.
    pub queue: usize,
}

impl SiemConfig {
    /// Whether any sink is configured.
    pub fn any(&self) -> bool {
        self.redis.is_some() || self.syslog.is_some()
    }
}

/// The Redis/Valkey sink's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSink {
    /// `redis://[USER@]HOST:PORT[?password_file=F]`.
    pub url: String,
    /// Stream key prefix: tenant `T`'s lines go to `{stream}:T`.
    pub stream: String,
    /// `MAXLEN ~` of every `XADD`.
    pub maxlen: u64,
}

/// Syslog's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One datagram per message (RFC 5426).
    Udp,
    /// Octet-counted frames on a stream (RFC 6587).
    Tcp,
}

/// The syslog sink's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyslogSink {
    /// UDP or TCP.
    pub transport: Transport,
    /// `HOST:PORT`.
    pub addr: String,
}

impl SyslogSink {
    /// Parses `udp://HOST:PORT` or `tcp://HOST:PORT`.
    pub fn parse(url: &str) -> Result<SyslogSink, String> {
        let (transport, addr) = if let Some(a) = url.strip_prefix("udp://") {
            (Transport::Udp, a)
        } else if let Some(a) = url.strip_prefix("tcp://") {
            (Transport::Tcp, a)
        } else {
            return Err(format!(
                "siem_syslog `{url}`: expected udp://HOST:PORT or tcp://HOST:PORT"
            ));
        };
        let port_ok = addr
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !port_ok {
            return Err(format!(
                "siem_syslog `{url}`: `{addr}` is not HOST:PORT with a port from 1 to 65535"
            ));
        }
        Ok(SyslogSink {
            transport,
            addr: addr.to_string(),
        })
    }

    fn name(&self) -> &'static str {
        match self.transport {
            Transport::Udp => "syslog-udp",
            Transport::Tcp => "syslog-tcp",
        }
    }
}

/// One EVE line and the tenant whose instance wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The tenant (its EVE directory's name).
    pub tenant: String,
    /// The EVE JSON, without its newline.
    pub eve: String,
    /// The inode of the file it was read from.
    pub ino: u64,
    /// Where in that file it starts: a sink holding it has not handled
    /// that file from there on ([`saved::position`]).
    pub start: u64,
}

/// A sink's queue: bounded, the oldest lines dropped (and counted) first.
#[derive(Debug)]
pub struct Outbox {
    lines: VecDeque<Arc<Line>>,
    cap: usize,
    /// Lines dropped because the queue was full.
    pub lost: u64,
}

impl Outbox {
    /// An empty queue of at most `cap` lines (at least 1).
    pub fn new(cap: usize) -> Outbox {
        Outbox {
            lines: VecDeque::new(),
            cap: cap.max(1),
            lost: 0,
        }
    }

    /// Queues `line`, dropping the oldest if full.
    pub fn push(&mut self, line: Arc<Line>) {
        if self.lines.len() == self.cap {
            self.lines.pop_front();
            self.lost += 1;
        }
        self.lines.push_back(line);
    }

    /// The oldest `n` lines (fewer if there are fewer).
    pub fn front(&mut self, n: usize) -> &[Arc<Line>] {
        let n = n.min(self.lines.len());
        &self.lines.make_contiguous()[..n]
    }

    /// Removes the oldest `n` (they were sent).
    pub fn sent(&mut self, n: usize) {
        self.lines.drain(..n.min(self.lines.len()));
    }

    /// Lines waiting.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether the next push drops the oldest.
    pub fn is_full(&self) -> bool {
        self.lines.len() == self.cap
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// When a failed sink is tried again: after 100 ms, doubling to 5 s, back
/// to none after a success. Times are the caller's (`now` since any origin).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Backoff {
    delay: Duration,
    next: Option<Duration>,
}

impl Backoff {
    /// The first delay.
    pub const MIN: Duration = Duration::from_millis(100);
    /// The longest.
    pub const MAX: Duration = Duration::from_secs(5);

    /// Whether a send may be tried at `now`.
    pub fn ready(&self, now: Duration) -> bool {
        self.next.is_none_or(|t| now >= t)
    }

    /// A send failed at `now`.
    pub fn failed(&mut self, now: Duration) {
        self.delay = if self.delay.is_zero() {
            Self::MIN
        } else {
            (self.delay * 2).min(Self::MAX)
        };
        self.next = Some(now + self.delay);
    }

    /// A send succeeded.
    pub fn succeeded(&mut self) {
        *self = Backoff::default();
    }

    /// Whether the last send failed.
    pub fn down(&self) -> bool {
        self.next.is_some()
    }
}

/// One sink's counters, read by `/metrics`.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// `redis`, `syslog-udp` or `syslog-tcp`.
    pub name: &'static str,
    /// Lines sent.
    pub sent: AtomicU64,
    /// Lines lost: dropped from a full queue, or refused by the sink.
    pub lost: AtomicU64,
    /// Lines waiting.
    pub queued: AtomicU64,
    /// Whether the last send succeeded (or none was needed yet).
    pub up: AtomicBool,
}

/// The forwarder's counters, read by `/metrics`.
#[derive(Debug, Default)]
pub struct SiemStats {
    /// One per configured sink.
    pub sinks: Vec<SinkStats>,
    /// Lines read that were not EVE JSON (skipped).
    pub invalid: AtomicU64,
}

/// A connection that sends a batch of lines.
trait Sink: Send {
    /// Sends `lines`; how many of them the sink refused (lost: sending them
    /// again would be refused again).
    fn send(&mut self, lines: &[Arc<Line>]) -> Result<u64, String>;
    /// Forgets the connection: the next send reconnects.
    fn reset(&mut self);
}

/// What a line says of itself (the rest is skipped when parsing).
#[derive(serde::Deserialize)]
struct EveHead {
    event_type: Option<String>,
    timestamp: Option<String>,
    alert: Option<AlertHead>,
}

#[derive(serde::Deserialize)]
struct AlertHead {
    severity: Option<u64>,
}

struct RedisOut {
    admin: Admin,
    stream: String,
    maxlen: String,
}

impl Sink for RedisOut {
    fn send(&mut self, lines: &[Arc<Line>]) -> Result<u64, String> {
        let keys: Vec<(String, String)> = lines
            .iter()
            .map(|l| {
                let kind = serde_json::from_str::<EveHead>(&l.eve)
                    .ok()
                    .and_then(|h| h.event_type)
                    .unwrap_or_default();
                (format!("{}:{}", self.stream, l.tenant), kind)
            })
            .collect();
        let cmds: Vec<Vec<&[u8]>> = lines
            .iter()
            .zip(&keys)
            .map(|(l, (key, kind))| {
                vec![
                    &b"XADD"[..],
                    key.as_bytes(),
                    b"MAXLEN",
                    b"~",
                    self.maxlen.as_bytes(),
                    b"*",
                    b"tenant",
                    l.tenant.as_bytes(),
                    b"event_type",
                    kind.as_bytes(),
                    b"eve",
                    l.eve.as_bytes(),
                ]
            })
            .collect();
        let replies = self.admin.pipeline(0, &cmds).map_err(|e| e.to_string())?;
        // A refusal (NOPERM, WRONGTYPE, OOM) would refuse the retry too:
        // counted lost, so it cannot block the queue.
        let refused = replies
            .iter()
            .filter(|r| matches!(r, Value::Error(_)))
            .count();
        if let Some(Value::Error(e)) = replies.iter().find(|r| matches!(r, Value::Error(_))) {
            tracing::warn!(error = %e, refused, "the SIEM stream refused lines: they are lost");
        }
        Ok(refused as u64)
    }

    fn reset(&mut self) {}
}

struct SyslogOut {
    sink: SyslogSink,
    host: String,
    udp: Option<UdpSocket>,
    tcp: Option<TcpStream>,
    buf: Vec<u8>,
    msg: Vec<u8>,
}

impl SyslogOut {
    fn resolve(&self) -> Result<std::net::SocketAddr, String> {
        self.sink
            .addr
            .to_socket_addrs()
            .map_err(|e| format!("{}: {e}", self.sink.addr))?
            .next()
            .ok_or_else(|| format!("{}: no address", self.sink.addr))
    }

    /// The RFC 5424 message of `l` in `self.msg`.
    fn message(&mut self, l: &Line) -> bool {
        let Ok(h) = serde_json::from_str::<EveHead>(&l.eve) else {
            return false;
        };
        let head = syslog::Head {
            event_type: h.event_type.as_deref().unwrap_or(""),
            alert_severity: h.alert.and_then(|a| a.severity),
            timestamp: h.timestamp.as_deref(),
        };
        // The tenant, which the file's directory gives, joins the event.
        let msg = match l.eve.strip_prefix('{') {
            Some(rest) => {
                let sep = if rest.trim_start().starts_with('}') {
                    ""
                } else {
                    ","
                };
                format!(
                    "{{\"tenant\":{}{sep}{rest}",
                    serde_json::Value::from(l.tenant.as_str())
                )
            }
            None => l.eve.clone(),
        };
        self.msg.clear();
        syslog::format(&mut self.msg, &self.host, &head, &msg);
        true
    }
}

impl Sink for SyslogOut {
    fn send(&mut self, lines: &[Arc<Line>]) -> Result<u64, String> {
        let mut refused = 0;
        match self.sink.transport {
            Transport::Udp => {
                if self.udp.is_none() {
                    let to = self.resolve()?;
                    let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
                    let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
                    s.connect(to).map_err(|e| format!("{to}: {e}"))?;
                    self.udp = Some(s);
                }
                for l in lines {
                    if !self.message(l) {
                        refused += 1;
                        continue;
                    }
                    if let Some(s) = &self.udp {
                        s.send(&self.msg)
                            .map_err(|e| format!("{}: {e}", self.sink.addr))?;
                    }
                }
            }
            Transport::Tcp => {
                if self.tcp.is_none() {
                    let to = self.resolve()?;
                    let s = TcpStream::connect_timeout(&to, TIMEOUT)
                        .map_err(|e| format!("{to}: {e}"))?;
                    let _ = s.set_write_timeout(Some(TIMEOUT));
                    let _ = s.set_nodelay(true);
                    self.tcp = Some(s);
                }
                self.buf.clear();
                for l in lines {
                    if self.message(l) {
                        syslog::frame_tcp(&mut self.buf, &self.msg);
                    } else {
                        refused += 1;
                    }
                }
                if let Some(s) = &mut self.tcp {
                    s.write_all(&self.buf)
                        .map_err(|e| format!("{}: {e}", self.sink.addr))?;
                }
            }
        }
        Ok(refused)
    }

    fn reset(&mut self) {
        self.udp = None;
        self.tcp = None;
    }
}

/// One sink with its queue, backoff and counters.
struct Runner {
    /// Its name, as in the metrics and the saved positions.
    name: &'static str,
    /// Per inode, where it resumed after a restart: lines starting before
    /// were handled by its previous life and are not sent again.
    skip: HashMap<u64, u64>,
    sink: Box<dyn Sink>,
    outbox: Outbox,
    backoff: Backoff,
    last_error: Option<String>,
    /// Lines the sink refused.
    refused: u64,
}

/// The running forwarder: a thread following the EVE files.
#[derive(Debug)]
pub struct Forwarder {
    stats: Arc<SiemStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Starts forwarding the lines appended under `eve_dir` to `cfg`'s
    /// sinks; `host` is syslog's HOSTNAME. With `positions` (a file in the
    /// run directory), the sinks' positions are saved there and a later
    /// start resumes from them ([`saved`]); without, or on the first start,
    /// the lines already in the files are not sent. Fails only on settings
    /// that cannot work (an unreadable password file).
    pub fn start(
        eve_dir: &Path,
        host: &str,
        cfg: &SiemConfig,
        positions: Option<&Path>,
    ) -> Result<Forwarder, String> {
        let mut runners = Vec::new();
        let mut stats = SiemStats::default();
        if let Some(r) = &cfg.redis {
            let admin = Admin::open(&r.url).map_err(|e| format!("siem_redis: {e}"))?;
            runners.push(Runner::new(
                "redis",
                Box::new(RedisOut {
                    admin,
                    stream: r.stream.clone(),
                    maxlen: r.maxlen.to_string(),
                }),
                cfg.queue,
            ));
            stats.sinks.push(SinkStats::named("redis"));
        }
        if let Some(s) = &cfg.syslog {
            stats.sinks.push(SinkStats::named(s.name()));
            runners.push(Runner::new(
                s.name(),
                Box::new(SyslogOut {
                    sink: s.clone(),
                    host: host.to_string(),
                    udp: None,
                    tcp: None,
                    buf: Vec::new(),
                    msg: Vec::new(),
                }),
                cfg.queue,
            ));
        }
        let stats = Arc::new(stats);
        let stop = Arc::new(AtomicBool::new(false));
        // The first listing, before returning: resume where the last life
        // saved, or, with nothing saved, take what is there now as written
        // before (not sent) and send everything appended later.
        let (listed, paths) = list(eve_dir);
        let last = match positions.map(saved::load).transpose() {
            Ok(s) => s.flatten(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot resume the SIEM sinks: lines already in the EVE files are not sent");
                None
            }
        };
        let cursors = match last {
            Some(last) => {
                let names: Vec<&str> = runners.iter().map(|r| r.name).collect();
                let r = saved::plan(&last, &listed, &names, |i, fp| {
                    start_of(&paths[i], fp.len as usize).as_ref() == Some(fp)
                });
                for (run, skip) in runners.iter_mut().zip(r.skip) {
                    run.skip = skip;
                }
                tail::Cursors::resume(r.read_from)
            }
            None => {
                let mut c = tail::Cursors::default();
                c.plan(&listed, MAX_READ);
                c
            }
        };
        let (st, sp, dir) = (stats.clone(), stop.clone(), eve_dir.to_path_buf());
        let positions = positions.map(Path::to_path_buf);
        let thread = std::thread::Builder::new()
            .name("sluice-siem".into())
            .spawn(sluice_logging::in_current_span(move || {
                run(&dir, positions.as_deref(), cursors, runners, &st, &sp)
            }))
            .map_err(|e| format!("cannot start the SIEM forwarder: {e}"))?;
        Ok(Forwarder {
            stats,
            stop,
            thread: Some(thread),
        })
    }

    /// Its counters.
    pub fn stats(&self) -> &Arc<SiemStats> {
        &self.stats
    }

    /// Stops the thread (lines still queued are not sent).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

impl SinkStats {
    fn named(name: &'static str) -> SinkStats {
        SinkStats {
            name,
            up: AtomicBool::new(true),
            ..SinkStats::default()
        }
    }
}

impl Runner {
    fn new(name: &'static str, sink: Box<dyn Sink>, queue: usize) -> Runner {
        Runner {
            name,
            skip: HashMap::new(),
            sink,
            outbox: Outbox::new(queue),
            backoff: Backoff::default(),
            last_error: None,
            refused: 0,
        }
    }

    /// Sends what is queued while the sink takes it.
    fn drain(&mut self, now: Duration, st: &SinkStats) {
        while !self.outbox.is_empty() && self.backoff.ready(now) {
            let batch = self.outbox.front(BATCH);
            let n = batch.len();
            match self.sink.send(batch) {
                Ok(refused) => {
                    self.outbox.sent(n);
                    self.refused += refused;
                    st.sent.fetch_add(n as u64 - refused, Ordering::Relaxed);
                    if self.backoff.down() {
                        tracing::info!(sink = st.name, "the SIEM sink takes events again");
                    }
                    self.backoff.succeeded();
                    self.last_error = None;
                }
                Err(e) => {
                    self.sink.reset();
                    self.backoff.failed(now);
                    if self.last_error.as_deref() != Some(&e) {
                        tracing::warn!(
                            sink = st.name,
                            error = %e,
                            "cannot send to the SIEM sink: events wait in its queue, the oldest lost when it is full"
                        );
                        self.last_error = Some(e);
                    }
                }
            }
        }
        st.up.store(!self.backoff.down(), Ordering::Relaxed);
        st.lost
            .store(self.outbox.lost + self.refused, Ordering::Relaxed);
        st.queued.store(self.outbox.len() as u64, Ordering::Relaxed);
    }
}

/// The EVE files under `eve_dir`, with their tenants (directory names).
fn list(eve_dir: &Path) -> (Vec<tail::Listed>, Vec<PathBuf>) {
    use std::os::unix::fs::MetadataExt;
    let (mut listed, mut paths) = (Vec::new(), Vec::new());
    let Ok(tenants) = std::fs::read_dir(eve_dir) else {
        return (listed, paths);
    };
    for t in tenants.filter_map(Result::ok) {
        let Ok(files) = std::fs::read_dir(t.path()) else {
            continue;
        };
        let tenant = t.file_name().to_string_lossy().into_owned();
        for f in files.filter_map(Result::ok) {
            let is_eve = f
                .file_name()
                .to_str()
                .is_some_and(|n| n.contains(".eve.json"));
            let Ok(md) = f.metadata() else { continue };
            if !is_eve || !md.is_file() {
                continue;
            }
            listed.push(tail::Listed {
                tenant: tenant.clone(),
                ino: md.ino(),
                size: md.len(),
            });
            paths.push(f.path());
        }
    }
    (listed, paths)
}

/// The fingerprint of the first `len` bytes of `path` (None if it has fewer
/// or cannot be read).
fn start_of(path: &Path, len: usize) -> Option<saved::Fingerprint> {
    let mut buf = vec![0u8; len];
    std::fs::File::open(path).ok()?.read_exact(&mut buf).ok()?;
    Some(saved::Fingerprint::of(&buf))
}

/// The sinks' positions in the files of the last listing.
fn snapshot(
    listed: &[tail::Listed],
    paths: &[PathBuf],
    cursors: &tail::Cursors,
    runners: &mut [Runner],
    fingerprints: &mut HashMap<u64, saved::Fingerprint>,
) -> saved::Saved {
    use std::os::unix::fs::MetadataExt;
    fingerprints.retain(|ino, _| listed.iter().any(|f| f.ino == *ino));
    let mut files = Vec::new();
    for (f, path) in listed.iter().zip(paths) {
        let Some(read) = cursors.position(f.ino) else {
            continue;
        };
        let prefix = match fingerprints.get(&f.ino) {
            Some(fp) => *fp,
            None => {
                // A file's start never changes (it is only appended to):
                // once complete, its fingerprint is kept.
                let len = f.size.min(saved::PREFIX as u64) as usize;
                let Some(fp) = start_of(path, len) else {
                    continue;
                };
                if len == saved::PREFIX {
                    fingerprints.insert(f.ino, fp);
                }
                fp
            }
        };
        // Renamed over by another file since the listing: not this one.
        if std::fs::metadata(path).map_or(true, |m| m.ino() != f.ino) {
            continue;
        }
        let sinks = runners
            .iter_mut()
            .map(|r| {
                let queued = r.outbox.front(usize::MAX).iter().map(|l| (l.ino, l.start));
                (
                    r.name.to_string(),
                    saved::position(f.ino, read, queued, &r.skip),
                )
            })
            .collect();
        files.push(saved::SavedFile {
            tenant: f.tenant.clone(),
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            ino: f.ino,
            prefix,
            sinks,
        });
    }
    saved::Saved { files }
}

/// Reads `r` of `path`; the complete lines, and how many bytes they took.
fn read_lines(path: &Path, r: &tail::Read, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(r.from))?;
    buf.clear();
    f.take(r.to - r.from).read_to_end(buf)?;
    let n = tail::complete(buf);
    // A line longer than a whole read would never complete: skip it.
    if n == 0 && buf.len() as u64 == MAX_READ {
        return Ok(buf.len());
    }
    buf.truncate(n);
    Ok(n)
}

fn run(
    eve_dir: &Path,
    positions: Option<&Path>,
    mut cursors: tail::Cursors,
    mut runners: Vec<Runner>,
    stats: &SiemStats,
    stop: &AtomicBool,
) {
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut fingerprints = HashMap::new();
    let mut last_saved: Option<saved::Saved> = None;
    let mut next_save = Duration::ZERO;
    let mut save_error: Option<String> = None;
    let mut save = |listed: &[tail::Listed],
                    paths: &[PathBuf],
                    cursors: &tail::Cursors,
                    runners: &mut [Runner]| {
        let Some(path) = positions else {
            return;
        };
        let now = snapshot(listed, paths, cursors, runners, &mut fingerprints);
        if last_saved.as_ref() == Some(&now) {
            return;
        }
        match saved::store(path, &now) {
            Ok(()) => {
                last_saved = Some(now);
                save_error = None;
            }
            Err(e) => {
                let e = format!("{}: {e}", path.display());
                if save_error.as_deref() != Some(&e) {
                    tracing::warn!(error = %e, "cannot save the SIEM sinks' positions: a restart would send their lines again");
                    save_error = Some(e);
                }
            }
        }
    };
    let (mut listed, mut paths) = (Vec::new(), Vec::new());
    while !stop.load(Ordering::Acquire) {
        (listed, paths) = list(eve_dir);
        for r in cursors.plan(&listed, MAX_READ) {
            let f = &listed[r.file];
            match read_lines(&paths[r.file], &r, &mut buf) {
                Ok(n) => cursors.consumed(f.ino, r.from, n as u64),
                // Rotated away or removed since the listing: the next one says.
                Err(_) => continue,
            }
            // The buffer holds whole lines from `r.from`.
            let mut next = r.from;
            for text in buf.split(|&b| b == b'\n') {
                let at = next;
                next += text.len() as u64 + 1;
                if text.is_empty() {
                    continue;
                }
                let Ok(eve) = std::str::from_utf8(text) else {
                    stats.invalid.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if !eve.starts_with('{') {
                    stats.invalid.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let line = Arc::new(Line {
                    tenant: f.tenant.clone(),
                    eve: eve.to_string(),
                    ino: f.ino,
                    start: at,
                });
                for (run, st) in runners.iter_mut().zip(&stats.sinks) {
                    if run.skip.get(&f.ino).is_some_and(|s| at < *s) {
                        continue;
                    }
                    // A burst longer than the queue is lost only to a sink
                    // that is down.
                    if run.outbox.is_full() {
                        run.drain(start.elapsed(), st);
                    }
                    run.outbox.push(line.clone());
                }
            }
        }
        let now = start.elapsed();
        for (run, st) in runners.iter_mut().zip(&stats.sinks) {
            run.drain(now, st);
        }
        if now >= next_save {
            save(&listed, &paths, &cursors, &mut runners);
            next_save = now + saved::SAVE_EVERY;
        }
        std::thread::sleep(POLL);
    }
    // What is still queued is read again by the next start.
    save(&listed, &paths, &cursors, &mut runners);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(i: usize) -> Arc<Line> {
        Arc::new(Line {
            tenant: "acme".into(),
            eve: format!("{{\"n\":{i}}}"),
            ino: 1,
            start: 10 * i as u64,
        })
    }

    #[test]
    fn a_full_queue_drops_and_counts_its_oldest_lines() {
        let mut o = Outbox::new(3);
        for i in 0..5 {
            o.push(line(i));
        }
        assert_eq!(o.lost, 2);
        let front: Vec<_> = o.front(2).iter().map(|l| l.eve.clone()).collect();
        assert_eq!(front, ["{\"n\":2}", "{\"n\":3}"]);
        o.sent(2);
        assert_eq!(o.len(), 1);
        assert_eq!(o.front(10)[0].eve, "{\"n\":4}");
    }

    #[test]
    fn a_failing_sink_is_retried_after_a_doubling_delay_up_to_five_seconds() {
        let ms = Duration::from_millis;
        let mut b = Backoff::default();
        assert!(b.ready(ms(0)) && !b.down());
        b.failed(ms(1000));
        assert!(!b.ready(ms(1099)) && b.ready(ms(1100)) && b.down());
        b.failed(ms(1100));
        assert!(!b.ready(ms(1299)) && b.ready(ms(1300)));
        for _ in 0..10 {
            b.failed(ms(2000));
        }
        assert!(!b.ready(ms(6999)) && b.ready(ms(7000)));
        b.succeeded();
        assert!(b.ready(ms(0)) && !b.down());
    }

    #[test]
    fn syslog_urls_name_their_transport_and_a_port() {
        assert_eq!(
            SyslogSink::parse("udp://siem.example:514").unwrap(),
            SyslogSink {
                transport: Transport::Udp,
                addr: "siem.example:514".into()
            }
        );
        assert_eq!(
            SyslogSink::parse("tcp://[::1]:6514").unwrap().transport,
            Transport::Tcp
        );
        for bad in [
            "siem:514",
            "udp://siem",
            "tcp://:514",
            "udp://siem:0",
            "udp://siem:99999",
        ] {
            let e = SyslogSink::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn the_syslog_message_carries_the_tenant_inside_the_eve_json() {
        let mut out = SyslogOut {
            sink: SyslogSink::parse("udp://127.0.0.1:9").unwrap(),
            host: "h1".into(),
            udp: None,
            tcp: None,
            buf: Vec::new(),
            msg: Vec::new(),
        };
        let l = Line {
            tenant: "ac\"me".into(),
            eve: r#"{"event_type":"alert","alert":{"severity":2}}"#.into(),
            ino: 1,
            start: 0,
        };
        assert!(out.message(&l));
        let text = String::from_utf8(out.msg.clone()).unwrap();
        let json = text.split_once(" - alert - ").unwrap().1;
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["tenant"], "ac\"me");
        assert_eq!(v["alert"]["severity"], 2);
        assert!(text.starts_with("<131>1 - h1 sluice - alert - "), "{text}");
        let empty = Line {
            tenant: "t".into(),
            eve: "{}".into(),
            ino: 1,
            start: 0,
        };
        assert!(out.message(&empty));
        assert!(String::from_utf8(out.msg.clone())
            .unwrap()
            .ends_with(r#"{"tenant":"t"}"#));
        assert!(!out.message(&Line {
            tenant: "t".into(),
            eve: "{not json".into(),
            ino: 1,
            start: 0,
        }));
    }
}
