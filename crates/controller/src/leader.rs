//! Several controllers, one leading: the leader election of replicated
//! controllers on etcd (issue 22, item 2).
//!
//! Every controller of a replicated deployment campaigns for one key,
//! `ROOT/leader`: it takes a lease of [`EtcdOptions::lease_ttl`] and creates
//! the key attached to it, only if the key does not exist. The one that
//! created it leads: it loads the desired state from etcd, listens and
//! serves, and renews its lease every sixth of its time to live. The others
//! wait, not listening (clients and agents know every controller's address
//! and move on to the next one when one refuses connections), and look at the
//! key a few times a second. When the leader dies its lease runs out, etcd
//! deletes the key, and the next controller to create it leads.
//!
//! Kubernetes' controller-manager and scheduler lead the same way, and the
//! same way they exit when they lose their lease: a controller that could not
//! renew it in time ([`Term::valid`], five sixths of the lease) stops serving at once and starts again
//! as a candidate. Whatever it may still try to write fails anyway: every
//! write of the desired state, the tokens and the audit log is a transaction
//! conditional on the leader key being the one this controller created
//! ([`crate::store::etcd::Guard`]).
//!
//! [`Term`] is the pure part (when to renew, whether the lease is surely
//! still held), on the caller's clock; [`campaign`] and [`keep`] talk to etcd.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_etcd::{Client, ClientTls, Compare, EtcdError, Op, Txn};

use crate::store::etcd::Guard;

/// How a replicated controller reaches etcd and announces itself.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Every etcd member's client URL (`https://HOST:2379`).
    pub endpoints: Vec<String>,
    /// The client certificate, its key and the members' CA (mutual TLS;
    /// None only for a plain-HTTP etcd, which `sluice controller` refuses).
    pub tls: Option<ClientTls>,
    /// The key prefix of this deployment's records (`/sluice/`).
    pub root: String,
    /// This controller's name, written in the leader key.
    pub name: String,
    /// The URL clients reach this controller at, written in the leader key.
    pub advertise: String,
    /// The leader's lease: how long the controllers wait for a dead leader
    /// before another takes over.
    pub lease_ttl: Duration,
    /// Set to give up campaigning (a candidate asked to stop before it led).
    pub stop: Arc<AtomicBool>,
}

/// The leader key's value: who leads.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Leader {
    /// Its name.
    pub name: String,
    /// Where clients reach it.
    pub url: String,
}

/// A term of leadership: the lease it rests on and when it was last renewed,
/// on the caller's monotonic clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The etcd lease the leader key is attached to.
    pub lease: i64,
    /// The revision that created the leader key.
    pub revision: i64,
    ttl: Duration,
    /// When the last renewal that etcd confirmed was sent (a renewal counts
    /// from its sending, not its answer: etcd restarted the countdown at
    /// some moment in between, never before).
    renewed: Instant,
}

impl Term {
    /// A term won with a lease of `ttl` requested at `granted` (before the
    /// grant was sent).
    pub fn new(lease: i64, revision: i64, ttl: Duration, granted: Instant) -> Term {
        Term {
            lease,
            revision,
            ttl,
            renewed: granted,
        }
    }

    /// A renewal sent at `sent` was confirmed.
    pub fn renewed(&mut self, sent: Instant) {
        self.renewed = self.renewed.max(sent);
    }

    /// Whether a renewal is due at `now` (every sixth of the time to live:
    /// five chances before [`Term::valid`] gives up, so that an election
    /// among etcd's members, a second or two without answers, does not
    /// depose the controller).
    pub fn renew_due(&self, now: Instant) -> bool {
        now >= self.renewed + self.ttl / 6
    }

    /// Whether the lease is surely still held at `now`: until five sixths of
    /// its time to live after the last confirmed renewal. etcd counts the
    /// time to live from when it received the renewal, never before it was
    /// sent, and extends every lease when its own leader changes, so the
    /// sixth left is margin for clock rates; giving up early costs an
    /// election, holding on too long would let two controllers push at once
    /// (their writes are fenced either way).
    pub fn valid(&self, now: Instant) -> bool {
        now < self.renewed + self.ttl * 5 / 6
    }

    /// The guard of this term's writes.
    pub fn guard(&self, key: &[u8]) -> Guard {
        Guard {
            key: key.to_vec(),
            revision: self.revision,
        }
    }
}

/// The leader key of a deployment rooted at `root`.
pub fn leader_key(root: &str) -> Vec<u8> {
    format!("{root}leader").into_bytes()
}

/// Who leads now, if anyone.
pub fn current_leader(client: &Client, root: &str) -> Result<Option<Leader>, EtcdError> {
    Ok(client
        .get(&leader_key(root))?
        .and_then(|kv| serde_json::from_slice(&kv.value).ok()))
}

/// How often a candidate looks whether the leader key is gone.
const POLL: Duration = Duration::from_millis(200);

/// Campaigns until this controller leads (or `stop` is set: None). Returns
/// the term won.
pub fn campaign(
    client: &Client,
    opts: &EtcdOptions,
    stop: &AtomicBool,
) -> Result<Option<Term>, EtcdError> {
    let key = leader_key(&opts.root);
    let me = serde_json::to_vec(&Leader {
        name: opts.name.clone(),
        url: opts.advertise.clone(),
    })
    .unwrap_or_default();
    let ttl_s = opts.lease_ttl.as_secs().max(1) as i64;
    let mut announced: Option<Vec<u8>> = None;
    let mut last_err: Option<String> = None;
    while !stop.load(Ordering::SeqCst) {
        // Look first: a lease is granted only when the key is free.
        let attempt = (|| -> Result<Option<Term>, EtcdError> {
            if let Some(kv) = client.get(&key)? {
                if announced.as_deref() != Some(&kv.value[..]) {
                    tracing::info!(
                        leader = %String::from_utf8_lossy(&kv.value),
                        "another controller leads; waiting to take over"
                    );
                    announced = Some(kv.value);
                }
                return Ok(None);
            }
            let granted = Instant::now();
            let lease = client.lease_grant(ttl_s)?;
            let won = client.txn(&Txn {
                compare: vec![Compare::CreateRevision(key.clone(), 0)],
                success: vec![Op::Put {
                    key: key.clone(),
                    value: me.clone(),
                    lease,
                }],
                failure: Vec::new(),
            })?;
            if won.succeeded {
                return Ok(Some(Term::new(
                    lease,
                    won.revision,
                    opts.lease_ttl,
                    granted,
                )));
            }
            // Another candidate was quicker: do not leave a lease behind.
            let _ = client.lease_revoke(lease);
            Ok(None)
        })();
        match attempt {
            Ok(Some(term)) => return Ok(Some(term)),
            Ok(None) => last_err = None,
            Err(e) => {
                let msg = e.to_string();
                if last_err.as_deref() != Some(&msg) {
                    tracing::warn!(error = %msg, "cannot campaign for leadership; retrying");
                    last_err = Some(msg);
                }
            }
        }
        std::thread::sleep(POLL);
    }
    Ok(None)
}

/// Renews `term`'s lease until `stop` is set or the lease is lost; returns
/// whether it was lost (then the caller must stop serving). Gives the lease
/// back when stopped, so another controller takes over at once.
pub fn keep(client: &Client, mut term: Term, stop: &AtomicBool) -> bool {
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if !term.valid(now) {
            tracing::error!(
                lease = term.lease,
                "leadership lost: the lease could not be renewed in time; stopping"
            );
            return true;
        }
        if term.renew_due(now) {
            match client.lease_keepalive(term.lease) {
                Ok(Some(_)) => term.renewed(now),
                Ok(None) => {
                    tracing::error!(
                        lease = term.lease,
                        "leadership lost: etcd says the lease expired; stopping"
                    );
                    return true;
                }
                Err(e) => tracing::warn!(error = %e, "cannot renew the leader's lease; retrying"),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = client.lease_revoke(term.lease);
    false
}

/// A controller's record under `ROOT/members/NAME`, on a lease of its own
/// that it renews as long as it runs, leading or waiting: how the leader
/// knows its standbys (which do not listen) and shows them in `GET
/// /v1/status`, `sluice status` and its metrics. A controller that dies
/// drops out when its lease runs out ([`member_ttl`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// Where clients reach it when it leads.
    pub url: String,
    /// When this process started, Unix milliseconds.
    pub since_ms: u64,
}

/// The key of `name`'s member record.
pub fn member_key(root: &str, name: &str) -> Vec<u8> {
    format!("{root}members/{name}").into_bytes()
}

/// The prefix of every member record.
pub fn members_prefix(root: &str) -> Vec<u8> {
    format!("{root}members/").into_bytes()
}

/// How long a member record outlives its controller's last renewal: twice
/// the leader's lease, at least 6 s (a record is renewed every third of it).
pub fn member_ttl(lease_ttl: Duration) -> Duration {
    (lease_ttl * 2).max(Duration::from_secs(6))
}

/// The controllers of the deployment, from the member records (`kvs`, as
/// etcd lists the prefix) and the name of the one leading: each with its
/// role, sorted by name; records that do not parse are skipped.
pub fn members(kvs: &[sluice_etcd::Kv], leader: &str) -> Vec<crate::model::ControllerMember> {
    let mut out: Vec<crate::model::ControllerMember> = kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<Member>(&kv.value).ok())
        .map(|m| crate::model::ControllerMember {
            leading: m.name == leader,
            name: m.name,
            url: m.url,
            since_ms: m.since_ms,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Keeps this controller's member record in etcd on a thread of its own until
/// `stop` is set, then removes it (revokes its lease).
pub fn announce(
    client: Client,
    opts: &EtcdOptions,
    since_ms: u64,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let key = member_key(&opts.root, &opts.name);
    let me = serde_json::to_vec(&Member {
        name: opts.name.clone(),
        url: opts.advertise.clone(),
        since_ms,
    })
    .unwrap_or_default();
    let ttl = member_ttl(opts.lease_ttl);
    std::thread::Builder::new()
        .name("ctl-member".into())
        .spawn(move || {
            let mut lease: Option<i64> = None;
            let mut last_err: Option<String> = None;
            while !stop.load(Ordering::SeqCst) {
                let step = (|| -> Result<(), EtcdError> {
                    match lease {
                        Some(id) => {
                            if client.lease_keepalive(id)?.is_none() {
                                // Expired (etcd unreachable too long): anew.
                                lease = None;
                            }
                        }
                        None => {
                            let id = client.lease_grant(ttl.as_secs() as i64)?;
                            client.txn(&Txn {
                                compare: Vec::new(),
                                success: vec![Op::Put {
                                    key: key.clone(),
                                    value: me.clone(),
                                    lease: id,
                                }],
                                failure: Vec::new(),
                            })?;
                            lease = Some(id);
                        }
                    }
                    Ok(())
                })();
                match step {
                    Ok(()) => last_err = None,
                    Err(e) => {
                        let msg = e.to_string();
                        if last_err.as_deref() != Some(&msg) {
                            tracing::warn!(error = %msg, "cannot keep this controller's member record in etcd; retrying");
                            last_err = Some(msg);
                        }
                    }
                }
                let until = Instant::now() + ttl / 3;
                while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            if let Some(id) = lease {
                let _ = client.lease_revoke(id);
            }
        })
}

/// The hosts' CA every controller of the deployment signs with: kept in etcd
/// (`ROOT/hosts-ca`, the certificate and key in PEM; etcd is reachable only
/// with a client certificate of its CA, like the fabric secret next to it),
/// written to this controller's files before it loads them. The first leader
/// stores its own.
pub fn share_hosts_ca(client: &Client, root: &str, guard: &Guard, db: &Path) -> Result<(), String> {
    let Some((cert, key)) = crate::tls::hosts_ca_files(db) else {
        return Err("a replicated controller needs a `db` path for its files, not :memory:".into());
    };
    let k = format!("{root}hosts-ca").into_bytes();
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Pair {
        cert: String,
        key: String,
    }
    let stored = client.get(&k).map_err(|e| e.to_string())?;
    let pair = match stored {
        Some(kv) => serde_json::from_slice::<Pair>(&kv.value)
            .map_err(|e| format!("etcd key {root}hosts-ca: {e}"))?,
        None => {
            crate::tls::hosts_ca(db).map_err(|e| e.to_string())?;
            let read =
                |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
            let pair = Pair {
                cert: read(&cert)?,
                key: read(&key)?,
            };
            let put = client
                .txn(&Txn {
                    compare: vec![
                        Compare::CreateRevision(guard.key.clone(), guard.revision),
                        Compare::CreateRevision(k.clone(), 0),
                    ],
                    success: vec![Op::Put {
                        key: k.clone(),
                        value: serde_json::to_vec(&pair).unwrap_or_default(),
                        lease: 0,
                    }],
                    failure: Vec::new(),
                })
                .map_err(|e| e.to_string())?;
            if !put.succeeded {
                return Err("the hosts' CA could not be stored: leadership moved".into());
            }
            pair
        }
    };
    let write = |p: &Path, text: &str, mode| {
        sluice_tls::write_file(p, text, mode).map_err(|e| format!("{}: {e}", p.display()))
    };
    write(&key, &pair.key, 0o600)?;
    write(&cert, &pair.cert, 0o644)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_members_list_names_the_leader_and_skips_what_does_not_parse() {
        let kv = |name: &str| sluice_etcd::Kv {
            key: member_key("/sluice/", name),
            value: serde_json::to_vec(&Member {
                name: name.into(),
                url: format!("https://{name}:7420"),
                since_ms: 7,
            })
            .unwrap(),
            create_revision: 1,
            mod_revision: 1,
            lease: 0,
        };
        let mut junk = kv("c9");
        junk.value = b"not json".to_vec();
        let m = members(&[kv("c2"), junk, kv("c0"), kv("c1")], "c1");
        let names: Vec<(&str, bool)> = m.iter().map(|m| (m.name.as_str(), m.leading)).collect();
        assert_eq!(names, [("c0", false), ("c1", true), ("c2", false)]);
        assert_eq!(m[0].url, "https://c0:7420");
        assert!(member_key("/sluice/", "c0").starts_with(&members_prefix("/sluice/")));
        // A record outlives a missed renewal or two, and a short lease.
        assert_eq!(member_ttl(Duration::from_secs(3)), Duration::from_secs(6));
        assert_eq!(member_ttl(Duration::from_secs(10)), Duration::from_secs(20));
    }

    #[test]
    fn a_term_renews_every_sixth_and_gives_up_after_five_sixths() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(6);
        let mut t = Term::new(7, 10, ttl, t0);
        assert!(!t.renew_due(t0 + Duration::from_millis(999)));
        assert!(t.renew_due(t0 + Duration::from_secs(1)));
        assert!(t.valid(t0 + Duration::from_millis(4999)));
        assert!(!t.valid(t0 + Duration::from_secs(5)));
        // A confirmed renewal counts from its sending.
        t.renewed(t0 + Duration::from_millis(2500));
        assert!(t.valid(t0 + Duration::from_millis(7499)));
        assert!(!t.valid(t0 + Duration::from_millis(7500)));
        // An older confirmation arriving late does not move it back.
        t.renewed(t0 + Duration::from_secs(1));
        assert!(t.valid(t0 + Duration::from_millis(7499)));
        assert_eq!(
            t.guard(b"/sluice/leader"),
            Guard {
                key: b"/sluice/leader".to_vec(),
                revision: 10
            }
        );
    }
}
