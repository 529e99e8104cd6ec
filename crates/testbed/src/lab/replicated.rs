//! The lab's replicated controllers (`sluice testbed up --controllers 3`):
//! a three-member etcd cluster (mutual TLS, certificates from a CA the lab
//! makes in `etcd/`) and N `sluice controller` processes on it, as
//! docs/DEPLOY.md's "Three controllers on etcd" runs them. One leads and
//! listens; the others wait without listening. The agents and the CLI
//! context are given every controller's URL.

use std::fs;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_etcd::server::EtcdCluster;

use super::{free_port, other, spawn_logged, write_toml, Lab, LabError};

/// One of the replicated controllers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// Its API port on loopback (listening only while it leads).
    pub port: u16,
    /// Its process (0: not running).
    pub pid: u32,
    /// Its settings file.
    pub conf: PathBuf,
    /// Its log.
    pub log: PathBuf,
}

/// One etcd member.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdMember {
    /// Its process (0: not running).
    pub pid: u32,
    /// Its command line, to start it again on its data.
    pub argv: Vec<String>,
    /// Its log.
    pub log: PathBuf,
}

fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

impl Lab {
    /// SIGKILLs the process group of `pid` (one the lab started), reaps it
    /// and forgets it.
    fn kill_recorded(&mut self, pid: u32) {
        if pid == 0 {
            return;
        }
        // SAFETY: signalling a process group the lab created, and reaping
        // our own child (harmless if it is not one).
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
            libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
        }
        self.state.pids.retain(|&p| p != pid);
    }

    /// Etcd member `i`, as recorded.
    fn etcd_member(&self, i: usize) -> Result<EtcdMember, LabError> {
        self.state
            .etcd
            .get(i)
            .cloned()
            .ok_or_else(|| other(format!("no etcd member {i}")))
    }
}

impl Lab {
    /// Starts the etcd cluster and `n` controllers on it, and waits until
    /// one leads.
    pub(super) fn start_replicated(&mut self, n: u32) -> Result<(), LabError> {
        let dir = self.state.dir.clone();
        let etcd_dir = dir.join("etcd");
        // A new lab is a new cluster: members started on a data directory
        // left by an earlier lab in this directory keep that cluster's
        // membership (its peers' old ports) and never elect a leader.
        if etcd_dir.exists() {
            fs::remove_dir_all(&etcd_dir).map_err(other)?;
        }
        fs::create_dir_all(&etcd_dir).map_err(other)?;
        let cluster = EtcdCluster::start_in(&etcd_dir, 3).map_err(other)?;
        let tls = cluster.client_tls();
        let endpoints = cluster.endpoints().join(",");
        let members: Vec<EtcdMember> = (0..3)
            .map(|i| EtcdMember {
                pid: cluster.pid(i).unwrap_or(0),
                argv: cluster.command(i),
                log: cluster.log(i),
            })
            .collect();
        // Stopped last, after the controllers.
        for m in &members {
            self.state.pids.push(m.pid);
        }
        self.state.etcd = members;
        cluster.detach();
        self.save()?;
        // One certificate every controller serves: clients trust its CA.
        let api = sluice_tls::pki::PrivatePki::create(
            &dir,
            "api",
            "Sluice controller",
            &["127.0.0.1", "localhost"],
        )
        .map_err(other)?;
        let token_file = dir.join("admin.token");
        for i in 0..n {
            let port = free_port()?;
            let mut t =
                self.controller_settings(port, &dir.join(format!("ctl{i}.db")), &token_file);
            t.insert("tls_cert".into(), api.cert.display().to_string().into());
            t.insert("tls_key".into(), api.key.display().to_string().into());
            t.insert("etcd".into(), endpoints.clone().into());
            t.insert("etcd_ca_file".into(), tls.ca.display().to_string().into());
            t.insert(
                "etcd_cert_file".into(),
                tls.cert.display().to_string().into(),
            );
            t.insert("etcd_key_file".into(), tls.key.display().to_string().into());
            t.insert("name".into(), format!("ctl{i}").into());
            let conf = dir.join(format!("ctl{i}.toml"));
            write_toml(&conf, &t)?;
            self.state.replicas.push(Replica {
                port,
                pid: 0,
                conf,
                log: dir.join(format!("ctl{i}.log")),
            });
            self.start_replica(i as usize)?;
        }
        self.state.token_file = token_file;
        self.state.ca_file = api.ca.clone();
        self.state.controllers = self
            .state
            .replicas
            .iter()
            .map(|r| format!("https://127.0.0.1:{}", r.port))
            .collect::<Vec<_>>()
            .join(",");
        self.save()?;
        self.leader(Duration::from_secs(30))?;
        Ok(())
    }

    /// Starts replica `i` (again), as a candidate.
    pub fn start_replica(&mut self, i: usize) -> Result<(), LabError> {
        let r = self
            .state
            .replicas
            .get(i)
            .cloned()
            .ok_or_else(|| other(format!("no controller {i}")))?;
        let child = spawn_logged(
            Command::new(&self.state.sluice)
                .arg("controller")
                .arg("--config")
                .arg(&r.conf),
            &r.log,
        )?;
        let pid = child.id();
        let old = r.pid;
        self.state.pids.retain(|&p| p != old);
        self.state.pids.insert(0, pid);
        self.state.replicas[i].pid = pid;
        self.save()
    }

    /// The replicated controller that leads (the one listening), waiting up
    /// to `within`; the lab's controller URL then names it.
    pub fn leader(&mut self, within: Duration) -> Result<usize, LabError> {
        let deadline = Instant::now() + within;
        loop {
            let up: Vec<usize> = (0..self.state.replicas.len())
                .filter(|&i| listening(self.state.replicas[i].port))
                .collect();
            if let [one] = up[..] {
                let url = format!("https://127.0.0.1:{}", self.state.replicas[one].port);
                if self.state.controller != url {
                    self.state.controller = url;
                    self.state.controller_pid = self.state.replicas[one].pid;
                    self.save()?;
                }
                return Ok(one);
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .state
                    .replicas
                    .iter()
                    .map(|r| r.log.display().to_string())
                    .collect();
                return Err(other(format!(
                    "{} of {} controllers listen after {within:?} (one should lead; logs: {})",
                    up.len(),
                    self.state.replicas.len(),
                    logs.join(", ")
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the leading controller; returns which it was.
    pub fn kill_leader(&mut self) -> Result<usize, LabError> {
        let i = self.leader(Duration::from_secs(1))?;
        self.kill_recorded(self.state.replicas[i].pid);
        self.state.replicas[i].pid = 0;
        self.save()?;
        Ok(i)
    }

    /// The etcd members' count.
    pub fn etcd_members(&self) -> usize {
        self.state.etcd.len()
    }

    /// SIGKILLs etcd member `i`.
    pub fn kill_etcd_member(&mut self, i: usize) -> Result<(), LabError> {
        let m = self.etcd_member(i)?;
        self.kill_recorded(m.pid);
        self.state.etcd[i].pid = 0;
        self.save()
    }

    /// Starts etcd member `i` again on its data.
    pub fn restart_etcd_member(&mut self, i: usize) -> Result<(), LabError> {
        let m = self.etcd_member(i)?;
        self.kill_recorded(m.pid);
        let child = sluice_etcd::server::spawn_member(&m.argv, &m.log).map_err(other)?;
        let pid = child.id();
        self.state.pids.push(pid);
        self.state.etcd[i].pid = pid;
        self.save()
    }
}
