//! The lab's state store: one private `redis-server`, or a replicated Redis
//! Cluster (three primaries with a replica each) so that no store node is a
//! single point of failure (docs/STATE.md, "Replication").
//!
//! Either way authentication is on: the default user is off and the
//! controller is the admin (docs/SECURITY.md). Every setting, the password
//! included, is in the nodes' configuration files (owner only), never on a
//! command line; `redis-cli` gets the password from `REDISCLI_AUTH`.
//!
//! And either way the nodes speak TLS only (no plain port): clients,
//! replication and the cluster bus, with a certificate for 127.0.0.1 from a
//! CA the lab makes (`store-ca.pem` in its directory, which the store URL
//! names as `ca_file`).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_state_redis::server::{
    await_cluster_ready, cluster_settings, dbsize, replication_role, TlsFiles,
};
use sluice_state_redis::{Auth, Secret, TlsSettings};

use super::{other, random_hex, spawn_logged, wait_tcp, write_private, Lab, LabError, STORE_ADMIN};

/// Which state store the lab runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// One `redis-server`: a single point of failure.
    #[default]
    Single,
    /// A Redis Cluster of [`CLUSTER_PRIMARIES`] primaries with a replica
    /// each; a killed primary is replaced by its replica.
    Cluster,
}

impl std::str::FromStr for StoreKind {
    type Err = LabError;

    fn from_str(s: &str) -> Result<StoreKind, LabError> {
        match s {
            "single" => Ok(StoreKind::Single),
            "cluster" => Ok(StoreKind::Cluster),
            _ => Err(other(format!(
                "unknown store `{s}` (known: single, cluster)"
            ))),
        }
    }
}

/// The primaries of a lab's cluster (each with one replica).
pub const CLUSTER_PRIMARIES: usize = 3;

/// How long a lab's cluster node may stop answering before its replica
/// takes over: short, so a failover takes about two seconds.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1000;

/// How long `redis-cli --cluster create` may take before the lab gives up.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// A store process of the lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreNode {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its process id.
    pub pid: u32,
}

/// The ACL part of every store node's configuration: the default user off,
/// the admin with every permission, and the admin as the user a replica
/// syncs with (with the default user off it could not otherwise).
fn acl_config(admin_pw: &str) -> String {
    format!(
        "user default off\n\
         user {STORE_ADMIN} on >{admin_pw} ~* &* +@all\n\
         masteruser {STORE_ADMIN}\n\
         masterauth {admin_pw}\n"
    )
}

/// `n` distinct free loopback ports: every listener is held until all are
/// chosen, so none is handed out twice.
fn free_ports(n: usize) -> Result<Vec<u16>, LabError> {
    let held = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(other))
        .collect::<Result<Vec<_>, _>>()?;
    held.iter()
        .map(|l| Ok(l.local_addr().map_err(other)?.port()))
        .collect()
}

impl Lab {
    /// Starts the state store of kind `kind` and sets the store URL the
    /// controller is given.
    pub(super) fn start_store(&mut self, kind: StoreKind) -> Result<(), LabError> {
        let dir = self.state.dir.clone();
        let admin_pw = random_hex(16)?;
        let pw_file = dir.join("store-admin.pw");
        self.state.store_files.push(pw_file.clone());
        self.save()?;
        write_private(&pw_file, &format!("{admin_pw}\n"))?;
        // Recorded before they exist, so a failed start still removes them.
        self.state.store_files.extend(TlsFiles::paths(&dir).all());
        self.save()?;
        let tls = TlsFiles::create(&dir, &["127.0.0.1", "localhost"]).map_err(other)?;
        let ports = match kind {
            StoreKind::Single => vec![self.start_single(&admin_pw, &tls)?],
            StoreKind::Cluster => self.start_cluster(&admin_pw, &tls)?,
        };
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let scheme = match kind {
            StoreKind::Single => "rediss",
            StoreKind::Cluster => "rediss-cluster",
        };
        // A cluster URL lists every node, replicas included: a client that
        // starts while a primary is down still finds the cluster, and the
        // controller defines the tenants' users on each node.
        self.state.store = format!(
            "{scheme}://{STORE_ADMIN}@{}?password_file={}&ca_file={}",
            hosts.join(","),
            pw_file.display(),
            tls.ca.display()
        );
        self.state.store_kind = kind;
        self.save()
    }

    /// Starts one store process with configuration `conf` (logging to
    /// `log`), records it and waits until it listens on `port`.
    fn start_node(&mut self, conf: &Path, log: &Path, port: u16) -> Result<(), LabError> {
        let mut child = spawn_logged(Command::new("redis-server").arg(conf), log)?;
        self.state.pids.push(child.id());
        self.state.store_nodes.push(StoreNode {
            port,
            pid: child.id(),
        });
        self.save()?;
        wait_tcp(port, "redis-server", &mut child, log)
    }

    fn start_single(&mut self, admin_pw: &str, tls: &TlsFiles) -> Result<u16, LabError> {
        let dir = self.state.dir.clone();
        let port = super::free_port()?;
        let conf = dir.join("redis.conf");
        self.state.store_files.push(conf.clone());
        write_private(
            &conf,
            &format!(
                "{}bind 127.0.0.1\nsave \"\"\nappendonly no\ndir \"{}\"\n{}",
                settings(tls.server_settings(port)),
                dir.display(),
                acl_config(admin_pw)
            ),
        )?;
        self.start_node(&conf, &dir.join("redis.log"), port)?;
        Ok(port)
    }

    /// Starts the nodes, then joins them with `redis-cli --cluster create`
    /// (the first [`CLUSTER_PRIMARIES`] become primaries) and waits until
    /// every replica is in sync.
    fn start_cluster(&mut self, admin_pw: &str, tls: &TlsFiles) -> Result<Vec<u16>, LabError> {
        let dir = self.state.dir.clone();
        let n = CLUSTER_PRIMARIES * 2;
        // Node and cluster bus ports both chosen: the default bus port
        // (port + 10000) may be taken or out of range.
        let all = free_ports(2 * n)?;
        let (ports, buses) = all.split_at(n);
        let nodes_dir = dir.join("store-cluster");
        self.state.store_files.push(nodes_dir.clone());
        self.save()?;
        let _ = fs::remove_dir_all(&nodes_dir);
        for (&port, &bus) in ports.iter().zip(buses) {
            let d = nodes_dir.join(format!("node-{port}"));
            fs::create_dir_all(&d).map_err(|e| other(format!("{}: {e}", d.display())))?;
            let conf = d.join("redis.conf");
            write_private(
                &conf,
                &format!(
                    "{}bind 127.0.0.1\nsave \"\"\nappendonly no\ndir \"{}\"\n\
                     cluster-port {bus}\ncluster-config-file nodes.conf\n{}{}",
                    settings(tls.server_settings(port)),
                    d.display(),
                    settings(cluster_settings(CLUSTER_NODE_TIMEOUT_MS)),
                    acl_config(admin_pw)
                ),
            )?;
            self.start_node(&conf, &dir.join(format!("redis-{port}.log")), port)?;
        }
        let log = dir.join("redis-cluster-create.log");
        let f = fs::File::create(&log).map_err(|e| other(format!("{}: {e}", log.display())))?;
        let mut cmd = Command::new("redis-cli");
        cmd.env("REDISCLI_AUTH", admin_pw)
            .args(["--tls", "--cacert"])
            .arg(&tls.ca)
            .args(["--user", STORE_ADMIN, "--cluster", "create"])
            .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(f.try_clone().map_err(other)?))
            .stderr(Stdio::from(f));
        let mut child = cmd
            .spawn()
            .map_err(|e| other(format!("cannot run redis-cli: {e}")))?;
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            if let Some(st) = child.try_wait().map_err(other)? {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if status.is_none_or(|s| !s.success()) {
            let text = fs::read_to_string(&log).unwrap_or_default();
            return Err(other(format!(
                "redis-cli --cluster create {}; its output ({}):\n{}",
                status.map_or(format!("took over {CREATE_TIMEOUT:?}"), |s| s.to_string()),
                log.display(),
                text.lines().rev().take(15).collect::<Vec<_>>().join("\n")
            )));
        }
        let auth = admin_auth(admin_pw);
        let client = tls.client_settings().map_err(other)?;
        await_cluster_ready(ports, 1, Some(&auth), Some(&client)).map_err(other)?;
        Ok(ports.to_vec())
    }

    /// The store nodes that are primaries now (a cluster's change on a
    /// failover), asked as the admin; a node that does not answer is left out.
    pub fn store_primaries(&self) -> Vec<StoreNode> {
        let (Ok(auth), Ok(tls)) = (self.store_admin(), self.store_tls()) else {
            return Vec::new();
        };
        self.state
            .store_nodes
            .iter()
            .filter(|n| {
                replication_role(n.port, Some(&auth), Some(&tls)).is_ok_and(|r| r == "master")
            })
            .cloned()
            .collect()
    }

    /// The keys each store node holds (`DBSIZE`; a node that does not answer
    /// is left out), by port.
    pub fn store_keys(&self) -> Vec<(u16, u64)> {
        let (Ok(auth), Ok(tls)) = (self.store_admin(), self.store_tls()) else {
            return Vec::new();
        };
        self.state
            .store_nodes
            .iter()
            .filter_map(|n| Some((n.port, dbsize(n.port, Some(&auth), Some(&tls)).ok()?)))
            .collect()
    }

    /// Kills the store node on `port` (SIGKILL, as a crash would).
    pub fn kill_store_node(&self, port: u16) -> Result<(), LabError> {
        let node = self
            .state
            .store_nodes
            .iter()
            .find(|n| n.port == port)
            .ok_or_else(|| other(format!("no store node on port {port} in this lab")))?;
        let pid = node.pid as libc::pid_t;
        // SAFETY: signalling and reaping our own child's process group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        Ok(())
    }

    /// Starts the cluster node on `port` again after it was killed, from its
    /// configuration and `nodes.conf`: it learns that its replica took its
    /// slots and rejoins as that node's replica (empty, so it syncs from it),
    /// and the cluster has a replica per primary again. Waits until it answers
    /// as a replica.
    pub fn restart_store_node(&mut self, port: u16, within: Duration) -> Result<(), LabError> {
        let i = self
            .state
            .store_nodes
            .iter()
            .position(|n| n.port == port)
            .ok_or_else(|| other(format!("no store node on port {port} in this lab")))?;
        if self.state.store_kind != StoreKind::Cluster {
            return Err(other(
                "only a cluster's node can be restarted (a single server would come back empty)",
            ));
        }
        let conf = self
            .state
            .dir
            .join("store-cluster")
            .join(format!("node-{port}"))
            .join("redis.conf");
        let log = self.state.dir.join(format!("redis-{port}.log"));
        let mut child = spawn_logged(Command::new("redis-server").arg(&conf), &log)?;
        let old = self.state.store_nodes[i].pid;
        self.state.pids.retain(|&p| p != old);
        self.state.pids.push(child.id());
        self.state.store_nodes[i].pid = child.id();
        self.save()?;
        wait_tcp(port, "redis-server", &mut child, &log)?;
        let auth = self.store_admin()?;
        let tls = self.store_tls()?;
        let deadline = Instant::now() + within;
        loop {
            if replication_role(port, Some(&auth), Some(&tls)).is_ok_and(|r| r == "slave") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(other(format!(
                    "the store node on port {port} did not rejoin as a replica within {within:?} (see {})",
                    log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The store's admin credentials (its password read from its file).
    pub fn store_admin(&self) -> Result<Auth, LabError> {
        let file = self
            .state
            .store_files
            .iter()
            .find(|f| f.ends_with("store-admin.pw"))
            .ok_or_else(|| other("the lab recorded no store password file"))?;
        let pw = fs::read_to_string(file).map_err(|e| other(format!("{}: {e}", file.display())))?;
        Ok(admin_auth(pw.trim()))
    }
}

impl Lab {
    /// The TLS settings a client of the lab's store needs (its CA).
    pub fn store_tls(&self) -> Result<TlsSettings, LabError> {
        let ca = self
            .state
            .store_files
            .iter()
            .find(|f| f.ends_with("store-ca.pem"))
            .ok_or_else(|| other("the lab recorded no store CA"))?;
        sluice_state_redis::tls_settings(&format!("ca_file={}", ca.display())).map_err(other)
    }
}

/// Settings as configuration-file lines (`name value`).
fn settings(pairs: Vec<(&'static str, String)>) -> String {
    pairs
        .into_iter()
        .map(|(k, v)| format!("{k} {v}\n"))
        .collect()
}

fn admin_auth(pw: &str) -> Auth {
    Auth {
        user: STORE_ADMIN.to_string(),
        password: Secret::new(pw),
    }
}

/// Removes the store's files (configurations holding the password, the
/// password file, a cluster's node directories) after its processes stopped.
pub(super) fn remove_files(files: &[PathBuf]) {
    for f in files {
        if f.is_dir() {
            let _ = fs::remove_dir_all(f);
        } else {
            let _ = fs::remove_file(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_kinds_parse_by_name_and_refuse_others() {
        assert_eq!("single".parse::<StoreKind>().unwrap(), StoreKind::Single);
        assert_eq!("cluster".parse::<StoreKind>().unwrap(), StoreKind::Cluster);
        let e = "sentinel".parse::<StoreKind>().unwrap_err().to_string();
        assert!(
            e.contains("sentinel") && e.contains("single, cluster"),
            "{e}"
        );
        assert_eq!(StoreKind::default(), StoreKind::Single);
    }

    #[test]
    fn every_node_turns_the_default_user_off_and_lets_replicas_sync_as_the_admin() {
        let c = acl_config("pw1");
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(
            lines,
            [
                "user default off",
                "user sluice-admin on >pw1 ~* &* +@all",
                "masteruser sluice-admin",
                "masterauth pw1"
            ]
        );
    }

    #[test]
    fn free_ports_are_distinct() {
        let p = free_ports(12).unwrap();
        let mut d = p.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 12, "{p:?}");
    }
}
