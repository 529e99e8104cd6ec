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
