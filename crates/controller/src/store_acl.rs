//! State store isolation between tenants (docs/SECURITY.md): when the state URL
//! names a user (`redis://admin@HOST:PORT?password_file=F`), that user is the
//! controller's admin account on the store, and every tenant gets an ACL user of
//! its own (`sluice_state_redis::acl`) confined to its key prefix. Its instances
//! are given the tenant's URL ([`instance_url`]) and password.
//!
//! Nothing extra is stored: a tenant's password is HMAC-SHA256 of its name keyed
//! with the admin password ([`tenant_password`]), recomputed whenever needed. It
//! never enters the desired state or the database; the pusher adds it to the
//! configuration it sends ([`Passwords::fill`]). Without a user in the state URL
//! nothing changes: instances share the URL, as before.
//!
//! Tenant users may not load code on the shared store, so the same
//! synchronisation loads the state backend's function library on every node
//! that lacks it (`Admin::load_library`): a node that restarted empty gets its
//! users and the library back within [`RESYNC`].

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use sluice_proto::{AgentConfig, StorePassword};
use sluice_state::StoreError;
use sluice_state_redis::acl::{tenant_prefix, tenant_user, Admin};
use sluice_state_redis::Secret;

/// How often the users are defined again (and the function library checked)
/// even if no tenant changed: a store that restarted without them gets them
/// back within this.
pub const RESYNC: Duration = Duration::from_secs(10);

/// How long after a failed synchronisation the next is tried.
pub const RETRY: Duration = Duration::from_millis(500);

/// `hex(HMAC-SHA256(secret, tenant))`: the password of `tenant`'s store user.
pub fn tenant_password(secret: &Secret, tenant: &str) -> Secret {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(tenant.as_bytes());
    let tag = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(64);
    for b in tag {
        hex.push_str(&format!("{b:02x}"));
    }
    Secret::new(hex)
}

/// The user named by a store URL (`redis://USER@...`), if any.
fn url_user(state_url: &str) -> Option<&str> {
    let rest = state_url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    authority.rsplit_once('@').map(|(u, _)| u)
}

/// The state URL `tenant`'s instances are given: with a user in `state_url`,
/// the same hosts and `poll_us` as the tenant's user with its key prefix (the
/// admin's `password_file` and `prefix` left out); without one, `state_url`.
pub fn instance_url(state_url: &str, tenant: &str) -> String {
    if url_user(state_url).is_none() {
        return state_url.to_string();
    }
    let (scheme, rest) = state_url.split_once("://").unwrap_or(("redis", state_url));
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    let hosts = base.rsplit_once('@').map_or(base, |(_, h)| h);
    let mut opts: Vec<String> = query
        .split('&')
        .filter(|o| !o.is_empty())
        .filter(|o| !o.starts_with("password_file=") && !o.starts_with("prefix="))
        .map(str::to_string)
        .collect();
    opts.push(format!("prefix={}", tenant_prefix(tenant)));
    format!(
        "{scheme}://{}@{hosts}?{}",
        tenant_user(tenant),
        opts.join("&")
    )
}

/// What bringing the store's users in line with `tenants` takes: the users to
/// define (every tenant's: redefining is harmless and repairs drift) and the
/// tenant users to delete (those of tenants that are gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Tenants whose users to (re)define.
    pub define: Vec<String>,
    /// User names to delete.
    pub delete: Vec<String>,
}

/// See [`Plan`]; `existing` are the tenant users the store has.
pub fn plan(existing: &[String], tenants: &BTreeSet<String>) -> Plan {
    let wanted: BTreeSet<String> = tenants.iter().map(|t| tenant_user(t)).collect();
    Plan {
        define: tenants.iter().cloned().collect(),
        delete: existing
            .iter()
            .filter(|u| !wanted.contains(*u))
            .cloned()
            .collect(),
    }
}

/// Derives tenants' passwords (cheap to clone, no I/O).
#[derive(Clone)]
pub struct Passwords {
    secret: Secret,
}

impl Passwords {
    /// Gives every instance of `cfg` whose state URL names a tenant user the
    /// password of its tenant.
    pub fn fill(&self, cfg: &mut AgentConfig) {
        for i in &mut cfg.instances {
            if url_user(&i.state) == Some(tenant_user(&i.tenant).as_str()) {
                let pw = tenant_password(&self.secret, &i.tenant);
                i.state_password = Some(StorePassword::new(pw.expose()));
            }
        }
    }
}

/// The controller's admin connection to the store and what it last did.
pub struct StoreAcl {
    admin: Admin,
    passwords: Passwords,
    /// The tenants whose users the store was last brought in line with, and when.
    synced: Option<(BTreeSet<String>, Instant)>,
    /// When the last synchronisation failed.
    failed_at: Option<Instant>,
}

impl StoreAcl {
    /// With a user in `state_url`: the admin connection (not connected yet) and
    /// the passwords derived from the admin's. Without one: `None`.
    pub fn from_state_url(state_url: &str) -> Result<Option<StoreAcl>, StoreError> {
        if url_user(state_url).is_none() {
            return Ok(None);
        }
        let admin = Admin::open(state_url)?;
        let secret = admin
            .auth()
            .map(|a| a.password.clone())
            .ok_or_else(|| StoreError::Refused("the store admin has no password".into()))?;
        Ok(Some(StoreAcl {
            admin,
            passwords: Passwords { secret },
            synced: None,
            failed_at: None,
        }))
    }

    /// The password deriver.
    pub fn passwords(&self) -> Passwords {
        self.passwords.clone()
    }

    /// Makes the next [`StoreAcl::sync`] run at once: a store node came back
    /// (restarted, maybe without the users and the library, and perhaps soon
    /// a primary its tenants' instances log in to), so waiting for
    /// [`RESYNC`] would keep them out that long.
    pub fn node_returned(&mut self) {
        self.synced = None;
        self.failed_at = None;
    }

    /// Whether [`StoreAcl::sync`] would talk to the store now.
    pub fn due(&self, tenants: &BTreeSet<String>, now: Instant) -> bool {
        if self
            .failed_at
            .is_some_and(|at| now.saturating_duration_since(at) < RETRY)
        {
            return false;
        }
        match &self.synced {
            Some((done, at)) => done != tenants || now.saturating_duration_since(*at) >= RESYNC,
            None => true,
        }
    }

    /// Brings the store's tenant users in line with `tenants` if [`StoreAcl::due`]:
    /// loads the function library where it is missing (first: a tenant's
    /// instances need it as soon as they can log in), deletes the users of
    /// departed tenants, (re)defines every tenant's.
    pub fn sync(&mut self, tenants: &BTreeSet<String>, now: Instant) -> Result<(), StoreError> {
        if !self.due(tenants, now) {
            return Ok(());
        }
        let r = (|| {
            // Every step is tried: a dead cluster node fails each of them,
            // and must not keep the live nodes from getting the rest.
            let mut first = match self.admin.load_library() {
                Ok(0) => Ok(()),
                Ok(n) => {
                    tracing::info!(
                        nodes = n,
                        library = sluice_state_redis::scripts::LIBRARY_NAME,
                        "loaded the state functions on store nodes that lacked them"
                    );
                    Ok(())
                }
                Err(e) => Err(e),
            };
            let existing = self.admin.tenant_users()?;
            let p = plan(&existing, tenants);
            for user in &p.delete {
                first = first.and(self.admin.delete_user(user));
            }
            for t in &p.define {
                let pw = tenant_password(&self.passwords.secret, t);
                first = first.and(self.admin.set_tenant_user(t, &pw));
            }
            first
        })();
        match &r {
            Ok(()) => {
                self.synced = Some((tenants.clone(), now));
                self.failed_at = None;
            }
            Err(_) => self.failed_at = Some(now),
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returning_node_makes_the_next_sync_due_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "admin-secret").unwrap();
        let url = format!("redis://admin@127.0.0.1:1?password_file={}", pw.display());
        let mut acl = StoreAcl::from_state_url(&url)
            .unwrap()
            .expect("a store URL with a user");
        let tenants: BTreeSet<String> = ["acme".to_string()].into();
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(100);
        acl.synced = Some((tenants.clone(), t0));
        assert!(!acl.due(&tenants, later), "synced: not before RESYNC");
        acl.node_returned();
        assert!(acl.due(&tenants, later));
        // Also right after a failed sync, which otherwise waits RETRY.
        acl.failed_at = Some(t0);
        assert!(!acl.due(&tenants, later));
        acl.node_returned();
        assert!(acl.due(&tenants, later));
    }

    #[test]
    fn passwords_are_a_keyed_hash_of_the_tenant() {
        let s = Secret::new("admin-secret");
        let a = tenant_password(&s, "acme");
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a, tenant_password(&s, "acme"), "derived, not stored");
        assert_ne!(a, tenant_password(&s, "acme2"));
        assert_ne!(a, tenant_password(&Secret::new("other"), "acme"));
        // RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?").
        assert_eq!(
            tenant_password(&Secret::new("Jefe"), "what do ya want for nothing?").expose(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn instances_get_their_tenants_user_and_prefix_and_nothing_of_the_admins() {
        assert_eq!(
            instance_url(
                "redis://admin@10.0.0.1:6379?password_file=/etc/pw&poll_us=20",
                "acme"
            ),
            "redis://sluice-t-acme@10.0.0.1:6379?poll_us=20&prefix=t.acme."
        );
        assert_eq!(
            instance_url("redis-cluster://admin@h:1,h:2/", "a.b"),
            "redis-cluster://sluice-t-a%2Eb@h:1,h:2/?prefix=t.a%2Eb."
        );
        // Without a user: the shared URL, as before store isolation.
        for plain in [
            "redis://127.0.0.1:6379",
            "redis://h:1?password_file=/a@b",
            "local",
        ] {
            assert_eq!(instance_url(plain, "acme"), plain);
        }
        // The URL an instance gets parses, as the tenant's user with its prefix.
        std::env::set_var(sluice_state_redis::PASSWORD_ENV, "x");
        let c = sluice_state_redis::Config::from_url(&instance_url("redis://admin@h:1", "acme"))
            .unwrap();
        std::env::remove_var(sluice_state_redis::PASSWORD_ENV);
        assert_eq!(c.auth.unwrap().user, "sluice-t-acme");
        assert_eq!(c.prefix, "t.acme.");
    }

    #[test]
    fn the_plan_removes_departed_tenants_and_defines_the_rest() {
        let tenants: BTreeSet<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let existing = vec!["sluice-t-a".to_string(), "sluice-t-gone".to_string()];
        assert_eq!(
            plan(&existing, &tenants),
            Plan {
                define: vec!["a".into(), "b".into()],
                delete: vec!["sluice-t-gone".into()],
            }
        );
    }

    #[test]
    fn only_instances_of_a_tenant_user_url_get_a_password() {
        let p = Passwords {
            secret: Secret::new("k"),
        };
        let inst = |tenant: &str, state: &str| sluice_proto::InstanceConfig {
            name: format!("{tenant}/fw/0"),
            tenant: tenant.into(),
            middlebox: "fw".into(),
            port: 1,
            vni: 1,
            chain_yaml: String::new(),
            state: state.into(),
            state_password: None,
            backends: Vec::new(),
        };
        let mut cfg = AgentConfig {
            instances: vec![
                inst("a", &instance_url("redis://admin@h:1", "a")),
                inst("b", "local"),
                inst("c", "redis://h:1"),
                // A URL naming another tenant's user gets no password of it.
                inst("d", &instance_url("redis://admin@h:1", "a")),
            ],
            ..AgentConfig::default()
        };
        p.fill(&mut cfg);
        let got: Vec<Option<&str>> = cfg
            .instances
            .iter()
            .map(|i| i.state_password.as_ref().map(|s| s.expose()))
            .collect();
        let a = tenant_password(&Secret::new("k"), "a");
        assert_eq!(got, [Some(a.expose()), None, None, None]);
    }

    /// A cluster URL: users on every node, and a dead node (a killed primary)
    /// keeps no tenant's user off the live ones.
    #[test]
    fn sync_defines_every_tenant_on_every_live_node_of_a_cluster() {
        use sluice_state_redis::acl::{tenant_user, Admin};
        use sluice_state_redis::server::RedisServer;
        let mut nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start(&[]).expect("start redis-server"))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "admin-pw\n").unwrap();
        for n in &mut nodes {
            n.secure("admin", &Secret::new("admin-pw")).unwrap();
        }
        let hosts: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let url = |hosts: &[String]| {
            format!(
                "redis-cluster://admin@{}?password_file={}",
                hosts.join(","),
                file.display()
            )
        };
        let mut acl = StoreAcl::from_state_url(&url(&hosts)).unwrap().unwrap();
        let t0 = Instant::now();
        let gone: BTreeSet<String> = ["gone".to_string()].into();
        acl.sync(&gone, t0).unwrap();
        nodes[0].kill();
        let two: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let e = acl.sync(&two, t0).unwrap_err().to_string();
        assert!(e.contains(&hosts[0]), "the dead node is named: {e}");
        for live in &hosts[1..] {
            let users = Admin::open(&url(std::slice::from_ref(live)))
                .unwrap()
                .tenant_users()
                .unwrap();
            assert_eq!(users, [tenant_user("a"), tenant_user("b")], "{live}");
            let mut one = Admin::open(&url(std::slice::from_ref(live))).unwrap();
            assert_eq!(one.load_library().unwrap(), 0, "{live} has the library");
        }
    }

    #[test]
    fn sync_talks_to_the_store_only_when_tenants_change_or_it_is_time() {
        let dir = std::env::temp_dir().join(format!("sluice-ctl-acl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "admin-pw\n").unwrap();
        // Port 1: nothing listens, so a sync that talks fails.
        let url = format!("redis://admin@127.0.0.1:1?password_file={}", file.display());
        let mut acl = StoreAcl::from_state_url(&url).unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(StoreAcl::from_state_url("redis://127.0.0.1:1")
            .unwrap()
            .is_none());
        let e = StoreAcl::from_state_url("redis://admin@h:1?password_file=/nonexistent")
            .err()
            .unwrap();
        assert!(e.to_string().contains("store user `admin`"), "{e}");

        let t0 = Instant::now();
        let one: BTreeSet<String> = ["a".to_string()].into();
        assert!(acl.due(&one, t0));
        let e = acl.sync(&one, t0).unwrap_err().to_string();
        assert!(e.contains("127.0.0.1:1") && !e.contains("admin-pw"), "{e}");
        assert!(!acl.due(&one, t0 + RETRY / 2), "a failure waits");
        assert!(acl.due(&one, t0 + RETRY));
        // As if the store had taken the users at t0.
        acl.failed_at = None;
        acl.synced = Some((one.clone(), t0));
        assert!(!acl.due(&one, t0 + RESYNC / 2));
        assert!(acl.due(&one, t0 + RESYNC), "defined again now and then");
        let two: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        assert!(acl.due(&two, t0), "a tenant came");
        assert!(acl.due(&BTreeSet::new(), t0), "a tenant left");
        assert_eq!(
            tenant_password(&acl.passwords().secret, "a"),
            tenant_password(&Secret::new("admin-pw"), "a"),
            "keyed with the admin password"
        );
    }
}
