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

/// `n` distinct free ports. Every listener is held until all are bound: a
/// port asked for alone is free again the moment its listener closes, so
/// the kernel may hand it out twice (two members once got the same client
/// port and the cluster never formed).
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("no free port: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
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
        let ports = free_ports(2 * n)?;
        let members: Vec<Member> = ports
            .chunks(2)
            .enumerate()
            .map(|(i, p)| Member {
                name: format!("m{i}"),
                client_port: p[0],
                peer_port: p[1],
                child: None,
            })
            .collect();
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

    /// Member `i`'s command line (binary first).
    pub fn command(&self, i: usize) -> Vec<String> {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=https://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let m = &self.members[i];
        let data = self.dir.join(format!("{}.etcd", m.name));
        let p = |p: &Path| p.display().to_string();
        let client = format!("https://127.0.0.1:{}", m.client_port);
        let peer = format!("https://127.0.0.1:{}", m.peer_port);
        let mut argv: Vec<String> = vec![self.binary.clone()];
        for (k, v) in [
            ("--name", m.name.clone()),
            ("--data-dir", p(&data)),
            ("--listen-client-urls", client.clone()),
            ("--advertise-client-urls", client),
            ("--listen-peer-urls", peer.clone()),
            ("--initial-advertise-peer-urls", peer),
            ("--initial-cluster", initial.join(",")),
            ("--initial-cluster-token", self.token.clone()),
            ("--initial-cluster-state", "new".into()),
            ("--cert-file", p(&self.pki.cert)),
            ("--key-file", p(&self.pki.key)),
            ("--trusted-ca-file", p(&self.pki.ca)),
            ("--peer-cert-file", p(&self.pki.cert)),
            ("--peer-key-file", p(&self.pki.key)),
            ("--peer-trusted-ca-file", p(&self.pki.ca)),
            // A save of the whole desired state is one transaction.
            ("--max-txn-ops", "100000".into()),
            ("--max-request-bytes", "33554432".into()),
            // Old revisions are not needed: keep the database small.
            ("--auto-compaction-mode", "revision".into()),
            ("--auto-compaction-retention", "1000".into()),
            ("--logger", "zap".into()),
            ("--log-outputs", "stderr".into()),
        ] {
            argv.push(k.into());
            argv.push(v);
        }
        argv.push("--client-cert-auth".into());
        argv.push("--peer-client-cert-auth".into());
        argv
    }

    /// Member `i`'s log file.
    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let argv = self.command(i);
        let child = spawn_member(&argv, &self.log(i))?;
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

impl EtcdCluster {
    /// Leaves the members running beyond this value (a testbed that outlives
    /// the command that started it); returns their process ids. Their data
    /// and certificates stay in [`EtcdCluster::dir`].
    pub fn detach(mut self) -> Vec<u32> {
        self.owns_dir = false;
        self.members
            .iter_mut()
            .filter_map(|m| m.child.take().map(|c| c.id()))
            .collect()
    }
}

/// Starts an etcd member with command line `argv` (as
/// [`EtcdCluster::command`] gives it), appending its output to `log`, in a
/// process group of its own (killed with its children, never by a
/// terminal's signals meant for the caller).
pub fn spawn_member(argv: &[String], log: &Path) -> Result<Child, String> {
    let (bin, args) = argv
        .split_first()
        .ok_or_else(|| "an empty etcd command line".to_string())?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    use std::os::unix::process::CommandExt;
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))
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

#[cfg(test)]
mod port_tests {
    #[test]
    fn ports_asked_for_together_are_distinct() {
        let p = super::free_ports(16).unwrap();
        let distinct: std::collections::BTreeSet<u16> = p.iter().copied().collect();
        assert_eq!(distinct.len(), 16, "{p:?}");
    }
}
