//! Private etcd clusters on loopback ports (Debian's `etcd-server`), for
//! tests and the testbed: every member speaks mutual TLS to clients and to its
//! peers, with certificates from a private CA made for the cluster. Nothing
//! relies on the package's system service.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_tls::pki::PrivatePki;

use crate::{Client, ClientTls};

/// The etcd binary: `$SLUICE_ETCD`, else `etcd` if it runs.
pub fn etcd_binary() -> Option<String> {
    let b = std::env::var("SLUICE_ETCD").unwrap_or_else(|_| "etcd".into());
    Command::new(&b)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())
        .map(|_| b)
}

/// One member.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// A running cluster, stopped (and its directory removed, if it made it) on
/// drop.
#[derive(Debug)]
pub struct EtcdCluster {
    binary: String,
    dir: PathBuf,
    owns_dir: bool,
    pki: PrivatePki,
    members: Vec<Member>,
    token: String,
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

impl EtcdCluster {
    /// Starts `n` members in a new directory under the system's temporary
    /// directory, and waits until the cluster serves.
    pub fn start(n: usize) -> Result<EtcdCluster, String> {
        let dir = std::env::temp_dir().join(format!(
            "sluice-etcd-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut c = EtcdCluster::start_in(&dir, n)?;
        c.owns_dir = true;
        Ok(c)
    }

    /// Starts `n` members keeping their data and certificates in `dir`
    /// (which is left in place on drop), and waits until the cluster serves.
    pub fn start_in(dir: &Path, n: usize) -> Result<EtcdCluster, String> {
        let binary = etcd_binary().ok_or_else(|| {
            "etcd is not installed (Debian: apt-get install etcd-server; or set SLUICE_ETCD)"
                .to_string()
        })?;
        if n == 0 {
            return Err("an etcd cluster needs at least one member".into());
        }
        let pki = PrivatePki::create(dir, "etcd", "Sluice etcd", &["127.0.0.1", "localhost"])?;
        let mut members = Vec::new();
        for i in 0..n {
            members.push(Member {
                name: format!("m{i}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                child: None,
            });
        }
        let token = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sluice".into());
        let mut c = EtcdCluster {
            binary,
            dir: dir.to_path_buf(),
            owns_dir: false,
            pki,
            members,
            token,
        };
        for i in 0..n {
            c.spawn(i)?;
        }
        c.wait_serving(Duration::from_secs(30))?;
        Ok(c)
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=https://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let m = &self.members[i];
        let data = self.dir.join(format!("{}.etcd", m.name));
        let log_path = self.dir.join(format!("{}.log", m.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let p = |p: &Path| p.display().to_string();
        let client = format!("https://127.0.0.1:{}", m.client_port);
        let peer = format!("https://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .args(["--cert-file", &p(&self.pki.cert)])
            .args(["--key-file", &p(&self.pki.key)])
            .args(["--trusted-ca-file", &p(&self.pki.ca)])
            .arg("--client-cert-auth")
            .args(["--peer-cert-file", &p(&self.pki.cert)])
            .args(["--peer-key-file", &p(&self.pki.key)])
            .args(["--peer-trusted-ca-file", &p(&self.pki.ca)])
            .arg("--peer-client-cert-auth")
            // A save of the whole desired state is one transaction.
            .args(["--max-txn-ops", "100000"])
            .args(["--max-request-bytes", "33554432"])
            // Old revisions are not needed: keep the database small.
            .args(["--auto-compaction-mode", "revision"])
            .args(["--auto-compaction-retention", "1000"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        // Its own process group: killed with its children, never by a
        // terminal's signals meant for the test.
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// The members' client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("https://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The files a client presents and trusts.
    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            ca: self.pki.ca.clone(),
            cert: self.pki.client_cert.clone(),
            key: self.pki.client_key.clone(),
        }
    }

    /// A client of every member.
    pub fn client(&self) -> Result<Client, String> {
        Client::new(
            &self.endpoints(),
            Some(&self.client_tls()),
            Duration::from_secs(2),
        )
        .map_err(|e| e.to_string())
    }

    /// Member `i`'s process id, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members.get(i)?.child.as_ref().map(|c| c.id())
    }

    /// Kills member `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members.get_mut(i).and_then(|m| m.child.take()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` to member `i` (SIGSTOP, SIGCONT).
    pub fn signal(&self, i: usize, signal: i32) {
        if let Some(pid) = self.pid(i) {
            // SAFETY: signalling our own child process.
            unsafe {
                libc::kill(pid as i32, signal);
            }
        }
    }

    /// Starts killed member `i` again on its data.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i);
        self.spawn(i)
    }

    /// Waits until a write through the cluster succeeds.
    pub fn wait_serving(&self, within: Duration) -> Result<(), String> {
        let client = self.client()?;
        let deadline = Instant::now() + within;
        loop {
            match client.put(b"/sluice-etcd/ready", b"1") {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "etcd did not serve within {within:?}: {e} (logs in {})",
                        self.dir.display()
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The directory of its data, certificates and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.signal(i, libc::SIGCONT);
            self.kill(i);
        }
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
