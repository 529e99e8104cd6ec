//! Starting and stopping a private `redis-server` (or `valkey-server`) on a loopback
//! port, for tests, benchmarks and the testbed. Nothing relies on a system service.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Empties the server on loopback `port` (`FLUSHALL`), so a test can reuse it
/// for a fresh run.
pub fn flushall(port: u16) -> Result<(), String> {
    use std::io::{Read, Write};
    let err = |e: std::io::Error| format!("FLUSHALL on 127.0.0.1:{port}: {e}");
    let mut c = TcpStream::connect(("127.0.0.1", port)).map_err(err)?;
    c.write_all(b"FLUSHALL\r\n").map_err(err)?;
    let mut b = [0u8; 8];
    let n = c.read(&mut b).map_err(err)?;
    if b[..n].starts_with(b"+OK") {
        Ok(())
    } else {
        Err(format!(
            "FLUSHALL on 127.0.0.1:{port}: {}",
            String::from_utf8_lossy(&b[..n])
        ))
    }
}

/// A counter of the `INFO` section `section` of the server on loopback `port`
/// (e.g. `stats`, `total_commands_processed`), for measurements.
pub fn info_field(port: u16, section: &str, field: &str) -> Result<u64, String> {
    use std::io::{Read, Write};
    let err = |e: std::io::Error| format!("INFO {section} on 127.0.0.1:{port}: {e}");
    let mut c = TcpStream::connect(("127.0.0.1", port)).map_err(err)?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(err)?;
    c.write_all(format!("INFO {section}\r\n").as_bytes())
        .map_err(err)?;
    // A bulk string: `$LEN\r\n` then LEN bytes and `\r\n`.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let body = loop {
        let n = c.read(&mut chunk).map_err(err)?;
        if n == 0 {
            return Err(format!(
                "INFO {section} on 127.0.0.1:{port}: connection closed"
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let Some((head, rest)) = text.split_once("\r\n") else {
            continue;
        };
        let len: usize = head
            .strip_prefix('$')
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| format!("INFO {section} on 127.0.0.1:{port}: reply {head:?}"))?;
        if rest.len() >= len {
            break rest[..len].to_string();
        }
    };
    body.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .parse()
                .ok()
        })
        .ok_or_else(|| format!("INFO {section} on 127.0.0.1:{port}: no `{field}`"))
}

/// A private CA with a server and a client certificate signed by it, as PEM
/// files, for store servers that speak TLS (tests and the testbed; a
/// deployment brings its own). ECDSA P-256; names are IP addresses or DNS
/// names. Both certificates may serve as either end (server and client
/// authentication): a cluster node's certificate is also what it presents
/// when it connects to the others.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA's certificate: what clients trust (`ca_file=`).
    pub ca: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server's key (mode 0600).
    pub key: PathBuf,
    /// A client certificate (`cert_file=`), for servers that require one.
    pub client_cert: PathBuf,
    /// Its key (mode 0600, `key_file=`).
    pub client_key: PathBuf,
}

impl From<sluice_tls::pki::PrivatePki> for TlsFiles {
    fn from(p: sluice_tls::pki::PrivatePki) -> TlsFiles {
        TlsFiles {
            ca: p.ca,
            cert: p.cert,
            key: p.key,
            client_cert: p.client_cert,
            client_key: p.client_key,
        }
    }
}

impl TlsFiles {
    /// Where [`TlsFiles::create`] puts them in `dir` (nothing is written).
    pub fn paths(dir: &Path) -> TlsFiles {
        sluice_tls::pki::PrivatePki::paths(dir, "store").into()
    }

    /// Every file, for removal.
    pub fn all(&self) -> [PathBuf; 5] {
        [
            self.ca.clone(),
            self.cert.clone(),
            self.key.clone(),
            self.client_cert.clone(),
            self.client_key.clone(),
        ]
    }

    /// Makes the CA and both certificates in `dir` (`store-ca.pem`,
    /// `store.pem`, `store.key`, `store-client.pem`, `store-client.key`), the
    /// server's naming `names`. The CA's key is not kept.
    pub fn create(dir: &Path, names: &[&str]) -> Result<TlsFiles, String> {
        Ok(sluice_tls::pki::PrivatePki::create(dir, "store", "Sluice store", names)?.into())
    }

    /// The server settings that serve TLS only, on `port` (the plain port
    /// off), with these files, replicas and the cluster bus over TLS too, and
    /// client certificates `optional` (clients authenticate with ACL users;
    /// `yes` would require one of every client). As (name, value) pairs, like
    /// [`cluster_settings`].
    pub fn server_settings(&self, port: u16) -> Vec<(&'static str, String)> {
        let p = |p: &Path| p.display().to_string();
        vec![
            ("port", "0".into()),
            ("tls-port", port.to_string()),
            ("tls-cert-file", p(&self.cert)),
            ("tls-key-file", p(&self.key)),
            ("tls-ca-cert-file", p(&self.ca)),
            ("tls-auth-clients", "optional".into()),
            ("tls-replication", "yes".into()),
            ("tls-cluster", "yes".into()),
        ]
    }

    /// The client's settings trusting this CA (no client certificate), as a
    /// `rediss://` URL carries them.
    pub fn client_settings(&self) -> Result<crate::TlsSettings, String> {
        crate::tls_settings(&format!("ca_file={}", self.ca.display()))
    }
}

/// A running server process, killed and its directory removed on drop.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// The admin user [`RedisServer::secure`] created, set up again on restart.
    admin: Option<(String, crate::Secret)>,
}

/// The server binary: `$SLUICE_REDIS_SERVER`, else `redis-server`, else `valkey-server`.
pub fn server_binary() -> Option<String> {
    if let Ok(b) = std::env::var("SLUICE_REDIS_SERVER") {
        return Some(b);
    }
    ["redis-server", "valkey-server"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        })
        .map(String::from)
}

/// The `process_id` a server on `conn` reports (`INFO server`), if it answers.
fn server_pid(mut conn: TcpStream) -> Option<u32> {
    use std::io::{Read, Write};
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    conn.write_all(b"INFO server\r\n").ok()?;
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&text).contains("process_id:") || !text.ends_with(b"\r\n") {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        text.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl RedisServer {
    /// Starts a server with no persistence on a free loopback port and waits until it
    /// accepts connections. `extra` adds arguments (e.g. `--cluster-enabled yes`).
    pub fn start(extra: &[&str]) -> Result<RedisServer, String> {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port().map_err(|e| e.to_string())?;
            match RedisServer::start_on(port, extra) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Starts a server on `port` (see [`RedisServer::start`]).
    pub fn start_on(port: u16, extra: &[&str]) -> Result<RedisServer, String> {
        let bin = server_binary().ok_or(
            "neither redis-server nor valkey-server found (scripts/test.sh installs redis-server)",
        )?;
        let mut last = String::new();
        let dir = std::env::temp_dir().join(format!("sluice-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&bin);
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args([
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ])
        .arg("--dir")
        .arg(&dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| format!("{bin}: {e}"))?;
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut s = RedisServer {
            child,
            port,
            dir,
            extra,
            admin: None,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = s.child.try_wait() {
                last = format!("{bin} exited with {status} on port {port}");
                break;
            }
            if let Ok(conn) = TcpStream::connect(("127.0.0.1", port)) {
                // Another test's server may have taken the port between
                // `free_port` and this one's bind (ours then exits): only ours
                // will do.
                match server_pid(conn) {
                    Some(pid) if pid == s.child.id() => return Ok(s),
                    Some(pid) => {
                        last = format!("port {port} is another server's (pid {pid})");
                        break;
                    }
                    None => {}
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if last.is_empty() {
            last = format!("{bin} did not accept connections on port {port} within 5 s");
        }
        Err(last)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Turns on authentication: creates the ACL user `user` with `password` and
    /// every permission, then disables the `default` user, so every connection
    /// must `AUTH` (and the helpers [`flushall`] and [`info_field`] no longer
    /// work). The password travels over the socket, never on a command line.
    pub fn secure(&mut self, user: &str, password: &crate::Secret) -> Result<(), String> {
        let rule = format!(">{}", password.expose());
        let setup: [&[&[u8]]; 2] = [
            &[
                b"ACL",
                b"SETUSER",
                user.as_bytes(),
                b"reset",
                b"on",
                rule.as_bytes(),
                b"~*",
                b"&*",
                b"+@all",
            ],
            &[b"ACL", b"SETUSER", b"default", b"off"],
        ];
        for args in setup {
            let r = command(self.port, args)?;
            if !r.starts_with(b"+OK") {
                return Err(format!(
                    "ACL SETUSER on port {}: {}",
                    self.port,
                    String::from_utf8_lossy(&r).trim_end()
                ));
            }
        }
        self.admin = Some((user.to_string(), password.clone()));
        Ok(())
    }

    /// Starts a fresh, empty server on the same port (after [`RedisServer::kill`]),
    /// with the admin user of [`RedisServer::secure`] if it had one.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let extra: Vec<&str> = self.extra.iter().map(|s| s.as_str()).collect();
        let mut fresh = RedisServer::start_on(self.port, &extra)?;
        if let Some((user, pw)) = &self.admin {
            fresh.secure(user, pw)?;
        }
        std::mem::swap(self, &mut fresh);
        // `fresh` now holds the dead process; dropping it must not remove our directory.
        fresh.dir = PathBuf::new();
        Ok(())
    }

    /// Stops the server (`SIGSTOP`) as a hung machine would: its connections
    /// stay open and nothing answers. [`RedisServer::resume`] undoes it.
    pub fn pause(&self) {
        // SAFETY: signalling our own child process; no memory is involved.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGSTOP) };
    }

    /// Continues a server stopped by [`RedisServer::pause`].
    pub fn resume(&self) {
        // SAFETY: as in `pause`.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGCONT) };
    }

    /// Kills the server now (as a crash would), keeping the handle.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Polls `done` every 50 ms for up to 20 s (processes starting, a cluster
/// agreeing: real time, not a decision).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out after 20 s waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The cluster node id of the server on `port` (`CLUSTER MYID`).
fn node_id(port: u16) -> Result<String, String> {
    let r = command(port, &[b"CLUSTER", b"MYID"])?;
    match crate::resp::parse(&r, 0) {
        Ok(Some((crate::resp::Reply::Bulk(Some(x)), _))) => {
            Ok(String::from_utf8_lossy(&r[x]).into_owned())
        }
        _ => Err(format!(
            "CLUSTER MYID on port {port}: {}",
            String::from_utf8_lossy(&r).trim_end()
        )),
    }
}

/// Sends one command to `port` and returns the raw reply (for cluster setup).
fn command(port: u16, args: &[&[u8]]) -> Result<Vec<u8>, String> {
    command_as(port, None, None, args)
}

/// [`command`] on a connection that first authenticates as `auth` (in the
/// same write: `AUTH`, then the command), if given, over TLS with `tls`. The
/// password travels over the socket only, and an `AUTH` refusal is reported
/// without it.
fn command_as(
    port: u16,
    auth: Option<&crate::Auth>,
    tls: Option<&crate::TlsSettings>,
    args: &[&[u8]],
) -> Result<Vec<u8>, String> {
    let sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    sock.set_write_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut c = crate::conn::Conn::establish(sock, &format!("127.0.0.1:{port}"), tls)
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    if let Some(a) = auth {
        crate::resp::encode(
            &mut buf,
            &[b"AUTH", a.user.as_bytes(), a.password.expose().as_bytes()],
        );
    }
    crate::resp::encode(&mut buf, args);
    c.write_all(&buf).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = c.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
        out.extend_from_slice(&chunk[..n]);
        let Ok(Some((first, next))) = crate::resp::parse(&out, 0) else {
            continue;
        };
        if auth.is_none() {
            return Ok(out);
        }
        if !matches!(first, crate::resp::Reply::Simple(_)) {
            return Err(format!(
                "AUTH on port {port}: {}",
                String::from_utf8_lossy(&out[..next]).trim_end()
            ));
        }
        if let Ok(Some(_)) = crate::resp::parse(&out, next) {
            return Ok(out.split_off(next));
        }
    }
}

/// The replication role (`master` or `slave`) the server on loopback `port`
/// reports in `INFO replication`, asked as `auth` if given, over TLS with `tls`.
pub fn replication_role(
    port: u16,
    auth: Option<&crate::Auth>,
    tls: Option<&crate::TlsSettings>,
) -> Result<String, String> {
    let r = command_as(port, auth, tls, &[b"INFO", b"replication"])
        .map_err(|e| format!("INFO replication on port {port}: {e}"))?;
    String::from_utf8_lossy(&r)
        .lines()
        .find_map(|l| l.strip_prefix("role:"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| format!("INFO replication on port {port}: no role"))
}

/// How many keys the server on loopback `port` holds (`DBSIZE`), asked as
/// `auth` if given, over TLS with `tls`.
pub fn dbsize(
    port: u16,
    auth: Option<&crate::Auth>,
    tls: Option<&crate::TlsSettings>,
) -> Result<u64, String> {
    let r = command_as(port, auth, tls, &[b"DBSIZE"])
        .map_err(|e| format!("DBSIZE on port {port}: {e}"))?;
    match crate::resp::parse(&r, 0) {
        Ok(Some((crate::resp::Reply::Int(n), _))) if n >= 0 => Ok(n as u64),
        _ => Err(format!(
            "DBSIZE on port {port}: {}",
            String::from_utf8_lossy(&r).trim_end()
        )),
    }
}

/// The settings of every node of a cluster whose primaries may be replaced:
/// a primary that stops answering for `node_timeout_ms` is replaced by one of
/// its replicas; slots whose primary is down are refused meanwhile, the
/// others keep being served (`cluster-require-full-coverage no`); any replica
/// may take over however long it was cut off (validity factor 0: the writes
/// it holds are the ones clients were told are safe); and a replica syncs
/// without a disk and at once. As (name, value) pairs, for a command line
/// (`--name value`) or a configuration file (`name value`).
pub fn cluster_settings(node_timeout_ms: u64) -> Vec<(&'static str, String)> {
    [
        ("cluster-enabled", "yes".to_string()),
        ("cluster-node-timeout", node_timeout_ms.to_string()),
        ("cluster-require-full-coverage", "no".into()),
        ("cluster-replica-validity-factor", "0".into()),
        ("repl-diskless-sync", "yes".into()),
        ("repl-diskless-sync-delay", "0".into()),
    ]
    .into()
}

/// Waits (up to 20 s) until the cluster of the loopback nodes on `ports` is
/// formed with `per` replicas per primary: every node reports
/// `cluster_state:ok`, `ports.len() / (per + 1)` of them are primaries each
/// with `per` replicas, and every replica's link to its primary is up.
/// `auth`: the user to ask as when the default user is off; `tls`: the
/// nodes' TLS settings if they serve only TLS.
pub fn await_cluster_ready(
    ports: &[u16],
    per: usize,
    auth: Option<&crate::Auth>,
    tls: Option<&crate::TlsSettings>,
) -> Result<(), String> {
    let text = |port: u16, args: &[&[u8]]| {
        command_as(port, auth, tls, args).map(|r| String::from_utf8_lossy(&r).into_owned())
    };
    let synced = format!("connected_slaves:{per}");
    wait_until("the cluster to be ok and every replica in sync", || {
        let mut primaries = 0;
        let ready = ports.iter().all(|&p| {
            let ok = text(p, &[b"CLUSTER", b"INFO"]).is_ok_and(|t| t.contains("cluster_state:ok"));
            ok && text(p, &[b"INFO", b"replication"]).is_ok_and(|t| {
                if t.contains("role:master") {
                    primaries += 1;
                    t.contains(&synced)
                } else {
                    t.contains("master_link_status:up")
                }
            })
        });
        ready && primaries * (per + 1) == ports.len()
    })
}

/// A Redis Cluster on loopback, each node a [`RedisServer`], slots split evenly
/// over the primaries; stopped on drop.
pub struct RedisCluster {
    /// The primaries, in slot order.
    pub nodes: Vec<RedisServer>,
    /// The replicas: `replicas[i * per + j]` is primary `i`'s `j`-th.
    pub replicas: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` cluster-enabled servers, assigns the 16384 slots in even ranges,
    /// joins them, and waits until every node reports `cluster_state:ok`.
    pub fn start(n: usize) -> Result<RedisCluster, String> {
        RedisCluster::start_replicated(n, 0, 2000)
    }

    /// Starts `primaries` primaries with `per` replicas each, with the
    /// [`cluster_settings`] of `node_timeout_ms`: a primary that stops
    /// answering for that long is replaced by one of its replicas.
    pub fn start_replicated(
        primaries: usize,
        per: usize,
        node_timeout_ms: u64,
    ) -> Result<RedisCluster, String> {
        let settings: Vec<String> = cluster_settings(node_timeout_ms)
            .into_iter()
            .flat_map(|(k, v)| [format!("--{k}"), v])
            .collect();
        let args: Vec<&str> = settings.iter().map(String::as_str).collect();
        let mut nodes = Vec::new();
        for _ in 0..primaries {
            nodes.push(RedisServer::start(&args)?);
        }
        let mut replicas = Vec::new();
        for _ in 0..primaries * per {
            replicas.push(RedisServer::start(&args)?);
        }
        let per_primary = 16384 / primaries;
        for (i, s) in nodes.iter().enumerate() {
            let lo = (i * per_primary).to_string();
            let hi = if i + 1 == primaries {
                16383
            } else {
                (i + 1) * per_primary - 1
            }
            .to_string();
            let r = command(
                s.port,
                &[b"CLUSTER", b"ADDSLOTSRANGE", lo.as_bytes(), hi.as_bytes()],
            )?;
            if !r.starts_with(b"+OK") {
                return Err(format!(
                    "CLUSTER ADDSLOTSRANGE: {}",
                    String::from_utf8_lossy(&r)
                ));
            }
        }
        for s in nodes[1..].iter().chain(&replicas) {
            let p = s.port.to_string();
            command(
                nodes[0].port,
                &[b"CLUSTER", b"MEET", b"127.0.0.1", p.as_bytes()],
            )?;
        }
        // Known by id, not just counted: a node still in its handshake is
        // counted under a provisional id that `CLUSTER REPLICATE` refuses.
        let ids = nodes
            .iter()
            .chain(&replicas)
            .map(|s| node_id(s.port))
            .collect::<Result<Vec<_>, _>>()?;
        wait_until("every node to know the others", || {
            nodes.iter().chain(&replicas).all(|s| {
                command(s.port, &[b"CLUSTER", b"NODES"]).is_ok_and(|r| {
                    let text = String::from_utf8_lossy(&r);
                    ids.iter().all(|id| text.contains(id.as_str())) && !text.contains("handshake")
                })
            })
        })?;
        for (i, id) in ids.iter().take(nodes.len()).enumerate() {
            for r in &replicas[i * per..(i + 1) * per] {
                let reply = command(r.port, &[b"CLUSTER", b"REPLICATE", id.as_bytes()])?;
                if !reply.starts_with(b"+OK") {
                    return Err(format!(
                        "CLUSTER REPLICATE on port {}: {}",
                        r.port,
                        String::from_utf8_lossy(&reply).trim_end()
                    ));
                }
            }
        }
        let ports: Vec<u16> = nodes.iter().chain(&replicas).map(|s| s.port).collect();
        await_cluster_ready(&ports, per, None, None)?;
        Ok(RedisCluster { nodes, replicas })
    }

    /// Waits until a replica of the killed primary `i` has taken its slots
    /// over (its `INFO replication` says `role:master`) and returns its index
    /// in `replicas`.
    pub fn await_failover(&self, i: usize) -> Result<usize, String> {
        let per = self.replicas.len() / self.nodes.len().max(1);
        let mut promoted = None;
        wait_until("a replica to take over", || {
            promoted = (i * per..(i + 1) * per).find(|&r| {
                command(self.replicas[r].port, &[b"INFO", b"replication"])
                    .is_ok_and(|x| String::from_utf8_lossy(&x).contains("role:master"))
            });
            promoted.is_some()
        })?;
        promoted.ok_or_else(|| "no replica took over".into())
    }

    /// `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,...`, every node (a client
    /// that starts while a primary is down still finds the cluster).
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .chain(&self.replicas)
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis-cluster://{}", addrs.join(","))
    }
}
