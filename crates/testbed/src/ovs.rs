//! A private Open vSwitch: its database server and switch daemon with their
//! files in a directory of their own, started for a test or a benchmark and
//! killed (the directory removed) when the handle is dropped, also when the
//! caller fails. The switch runs the userspace datapath (`datapath_type=netdev`),
//! which needs no kernel module: it reads and writes ports with packet sockets
//! and does tunnels, Geneve included, itself. The system's OVS service, if any,
//! is neither used nor disturbed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::TestbedError;

/// A running private Open vSwitch.
pub struct Ovs {
    dir: PathBuf,
    children: Vec<Child>,
}

/// The vswitch schema of Debian's `openvswitch-common`.
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// Whether the Open vSwitch programs are installed (Debian package
/// `openvswitch-switch`).
pub fn available() -> bool {
    ["ovs-vswitchd", "ovsdb-server", "ovs-vsctl", "ovsdb-tool"]
        .iter()
        .all(|p| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        && std::path::Path::new(SCHEMA).exists()
}

fn sys(what: &str) -> impl FnOnce(std::io::Error) -> TestbedError + '_ {
    move |err| TestbedError::Sys {
        what: what.to_string(),
        err,
    }
}

impl Ovs {
    /// Starts `ovsdb-server` and, inside namespace `netns`, `ovs-vswitchd`.
    pub fn start(netns: &str) -> Result<Ovs, TestbedError> {
        let dir = std::env::temp_dir().join(crate::unique_name("ovs"));
        std::fs::create_dir_all(&dir).map_err(sys("create the OVS directory"))?;
        let mut ovs = Ovs {
            dir,
            children: Vec::new(),
        };
        let d = ovs.dir.display().to_string();
        let db = format!("{d}/conf.db");
        ovs.run("ovsdb-tool", &["create", &db, SCHEMA])?;
        let server = ovs
            .command("ovsdb-server")
            .args([
                &db,
                &format!("--remote=punix:{d}/db.sock"),
                &format!("--unixctl={d}/ovsdb.ctl"),
                &format!("--log-file={d}/ovsdb.log"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(sys("run ovsdb-server (Debian package openvswitch-switch)"))?;
        ovs.children.push(server);
        // The socket appears once the server listens.
        for _ in 0..200 {
            if ovs.dir.join("db.sock").exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        ovs.vsctl(&["--no-wait", "init"])?;
        // `ip netns exec` execs the program, so the child is the switch itself.
        let switch = ovs
            .command("ip")
            .args(["netns", "exec", netns, "ovs-vswitchd"])
            .args([
                &format!("unix:{d}/db.sock"),
                &format!("--unixctl={d}/vswitchd.ctl"),
                &format!("--log-file={d}/vswitchd.log"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(sys("run ovs-vswitchd"))?;
        ovs.children.push(switch);
        Ok(ovs)
    }

    /// A command with the OVS directories pointed at this instance's.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        for var in ["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"] {
            c.env(var, &self.dir);
        }
        c
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), TestbedError> {
        let out = self
            .command(program)
            .args(args)
            .output()
            .map_err(sys(program))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(TestbedError::Command {
                cmd: format!("{program} {}", args.join(" ")),
                stderr: format!(
                    "{}\nvswitchd log:\n{}",
                    String::from_utf8_lossy(&out.stderr).trim(),
                    self.log()
                ),
            })
        }
    }

    /// Runs `ovs-vsctl` against this instance; it waits (at most 20 s) for
    /// the switch to apply each change.
    pub fn vsctl(&self, args: &[&str]) -> Result<(), TestbedError> {
        let db = format!("--db=unix:{}/db.sock", self.dir.display());
        let mut all = vec![db.as_str(), "--timeout=20"];
        all.extend_from_slice(args);
        self.run("ovs-vsctl", &all)
    }

    /// The switch daemon's log so far (for error messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("vswitchd.log")).unwrap_or_default()
    }

    /// Makes host namespace `host` a Geneve tunnel endpoint on OVS's
    /// userspace datapath: its fabric port `fab` and underlay address `cidr`
    /// move onto bridge `brp` (which takes the port's MAC: OVS ends a tunnel
    /// only for packets addressed to the bridge, and peers may have resolved
    /// the address to that MAC already); the VM port `vm_port` and a Geneve
    /// port to `remote` with `vni` go on a MAC-learning bridge `bri`.
    pub fn geneve_endpoint(
        &self,
        host: &crate::Netns,
        fab: &str,
        cidr: &str,
        vm_port: &str,
        remote: &str,
        vni: u32,
    ) -> Result<(), TestbedError> {
        let rt = host.rtnl()?;
        let mac = sluice_netns::fmt_mac(&rt.link(fab)?.mac);
        rt.flush_addrs(fab)?;
        let hwaddr = format!("other-config:hwaddr=\"{mac}\"");
        self.vsctl(&[
            "add-br",
            "brp",
            "--",
            "set",
            "bridge",
            "brp",
            "datapath_type=netdev",
            &hwaddr,
        ])?;
        self.vsctl(&["add-port", "brp", fab])?;
        self.vsctl(&["set", "interface", "brp", "mtu_request=9000"])?;
        self.vsctl(&[
            "add-br",
            "bri",
            "--",
            "set",
            "bridge",
            "bri",
            "datapath_type=netdev",
        ])?;
        self.vsctl(&["add-port", "bri", vm_port])?;
        let remote = format!("options:remote_ip={remote}");
        let key = format!("options:key={vni}");
        self.vsctl(&[
            "add-port",
            "bri",
            "gnv0",
            "--",
            "set",
            "interface",
            "gnv0",
            "type=geneve",
            &remote,
            &key,
        ])?;
        Ok(host.addr("brp", cidr)?)
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
