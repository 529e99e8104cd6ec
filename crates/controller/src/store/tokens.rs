//! API tokens, durable in the controller's database (SQLite, or etcd for
//! replicated controllers): a name, a role, when it was created and the
//! SHA-256 of the secret. The secret itself is shown once,
//! when the token is created, and never kept: a presented token is hashed and
//! looked up, so comparing secrets needs no constant-time care (the attacker
//! does not control which stored hash a lookup touches).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rusqlite::{params, Connection};
use sha2::{Digest, Sha256};

use super::etcd::{hex, unhex};
use super::StoreError;
use crate::resources::auth::{Principal, Role};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, hash BLOB NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS revocations (host INTEGER PRIMARY KEY, at_secs INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS spent (
    hash BLOB PRIMARY KEY, name TEXT NOT NULL, host INTEGER NOT NULL, key BLOB NOT NULL,
    spent_ms INTEGER NOT NULL);
";

/// How long a spent bootstrap token still gets its own certificate request
/// answered again: an agent whose answer was lost in transit retries with the
/// same token and key, and would otherwise need an operator's new token.
pub const SPENT_GRACE_MS: u64 = 10 * 60 * 1000;

/// A bootstrap token spent by a host's first certificate: within
/// [`SPENT_GRACE_MS`] it answers a request for the same key again, and
/// nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpentToken {
    /// The token's name.
    pub name: String,
    /// The host it joined.
    pub host: u32,
    /// The public key (DER) its certificate was issued for.
    pub key: Vec<u8>,
    /// When it was spent, Unix milliseconds.
    pub spent_ms: u64,
}

/// Prefix of every secret, so a leaked one is recognisable (secret scanners).
pub const SECRET_PREFIX: &str = "sluice_";

/// A stored token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// Name (unique).
    pub name: String,
    /// Role.
    pub role: Role,
    /// When it was created, Unix milliseconds.
    pub created_ms: u64,
}

/// A token could not be created or deleted.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The name is taken.
    #[error("name: a token named `{0}` exists already")]
    Exists(String),
    /// No token has this name.
    #[error("no token is named `{0}`")]
    Unknown(String),
    /// Deleting it would leave no operator token.
    #[error("token `{0}` is the last operator token: create another before deleting it")]
    LastOperator(String),
    /// The system's random source failed.
    #[error("cannot draw a random secret: {0}")]
    Random(String),
    /// The database refused.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The SHA-256 of a secret, as stored.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A new secret: 256 random bits, hex, after [`SECRET_PREFIX`].
pub fn new_secret() -> Result<String, TokenError> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|e| TokenError::Random(e.to_string()))?;
    let mut s = String::with_capacity(SECRET_PREFIX.len() + 64);
    s.push_str(SECRET_PREFIX);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    Ok(s)
}

/// Where the tokens are durable.
enum Back {
    Sqlite(Connection),
    /// Keys `tokens/HASH`, `revoked/HOST` and `spent/HASH` under the root,
    /// written only while the guard (this controller's leadership) holds.
    Etcd {
        client: Arc<sluice_etcd::Client>,
        root: String,
        guard: Option<super::etcd::Guard>,
    },
}

/// One change to the stored tokens; a method's changes are applied in one
/// transaction.
enum Change<'a> {
    PutToken([u8; 32], &'a TokenRecord),
    DeleteToken([u8; 32], &'a str),
    PutRevocation(u32, u64),
    PutSpent([u8; 32], &'a SpentToken),
    DeleteSpent([u8; 32]),
}

#[derive(serde::Serialize, serde::Deserialize)]
struct TokenRec {
    name: String,
    role: String,
    created_ms: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SpentRec {
    name: String,
    host: u32,
    /// The public key, hex.
    key: String,
    spent_ms: u64,
}

impl Back {
    fn apply(&mut self, changes: &[Change<'_>]) -> Result<(), TokenError> {
        match self {
            Back::Sqlite(conn) => {
                let tx = conn.unchecked_transaction().map_err(db)?;
                for c in changes {
                    match c {
                        Change::PutToken(hash, t) => tx.execute(
                            "INSERT INTO tokens (name, role, hash, created_ms) VALUES (?1, ?2, ?3, ?4)",
                            params![t.name, t.role.to_string(), hash.to_vec(), t.created_ms as i64],
                        ),
                        Change::DeleteToken(_, name) => {
                            tx.execute("DELETE FROM tokens WHERE name = ?1", params![name])
                        }
                        Change::PutRevocation(host, at) => tx.execute(
                            "INSERT INTO revocations (host, at_secs) VALUES (?1, ?2)
                             ON CONFLICT(host) DO UPDATE SET at_secs = excluded.at_secs",
                            params![*host as i64, *at as i64],
                        ),
                        Change::PutSpent(hash, t) => tx.execute(
                            "INSERT OR REPLACE INTO spent (hash, name, host, key, spent_ms) \
                             VALUES (?1, ?2, ?3, ?4, ?5)",
                            params![hash.to_vec(), t.name, t.host as i64, t.key, t.spent_ms as i64],
                        ),
                        Change::DeleteSpent(hash) => tx.execute(
                            "DELETE FROM spent WHERE hash = ?1",
                            params![hash.to_vec()],
                        ),
                    }
                    .map_err(db)?;
                }
                tx.commit().map_err(db)
            }
            Back::Etcd {
                client,
                root,
                guard,
            } => {
                use sluice_etcd::Op;
                let key = |rest: String| format!("{root}{rest}").into_bytes();
                let mut ops = Vec::new();
                for c in changes {
                    ops.push(match c {
                        Change::PutToken(hash, t) => Op::Put {
                            key: key(format!("tokens/{}", hex(hash))),
                            value: to_json(&TokenRec {
                                name: t.name.clone(),
                                role: t.role.to_string(),
                                created_ms: t.created_ms,
                            }),
                            lease: 0,
                        },
                        Change::DeleteToken(hash, _) => {
                            Op::Delete(key(format!("tokens/{}", hex(hash))))
                        }
                        Change::PutRevocation(host, at) => Op::Put {
                            key: key(format!("revoked/{host}")),
                            value: at.to_string().into_bytes(),
                            lease: 0,
                        },
                        Change::PutSpent(hash, t) => Op::Put {
                            key: key(format!("spent/{}", hex(hash))),
                            value: to_json(&SpentRec {
                                name: t.name.clone(),
                                host: t.host,
                                key: hex(&t.key),
                                spent_ms: t.spent_ms,
                            }),
                            lease: 0,
                        },
                        Change::DeleteSpent(hash) => {
                            Op::Delete(key(format!("spent/{}", hex(hash))))
                        }
                    });
                }
                let t = sluice_etcd::Txn {
                    compare: guard
                        .iter()
                        .map(|g| sluice_etcd::Compare::CreateRevision(g.key.clone(), g.revision))
                        .collect(),
                    success: ops,
                    failure: Vec::new(),
                };
                let done = client.txn(&t).map_err(|e| TokenError::Store(e.into()))?;
                if done.succeeded {
                    Ok(())
                } else {
                    Err(TokenError::Store(StoreError::NotLeader))
                }
            }
        }
    }
}

/// A record above as JSON (it cannot fail: plain strings and numbers).
fn to_json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// The token table, with every token also kept in memory by hash (a request's
/// lookup touches no disk).
pub struct TokenStore {
    back: Back,
    by_hash: BTreeMap<[u8; 32], TokenRecord>,
    /// Revoked hosts: every certificate issued to host N at or before
    /// `revoked[N]` (Unix seconds) is refused. Kept with the tokens: both are
    /// what the API checks on every request, from memory.
    revoked: BTreeMap<u32, u64>,
    /// Spent bootstrap tokens by hash (see [`SpentToken`]).
    spent: BTreeMap<[u8; 32], SpentToken>,
}

fn db(e: rusqlite::Error) -> TokenError {
    TokenError::Store(StoreError::Sqlite(e))
}

impl TokenStore {
    /// Opens the token table of the database at `path` (`:memory:`: a private
    /// in-memory one) and loads it.
    pub fn open(path: &Path) -> Result<TokenStore, StoreError> {
        let open = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = if path.as_os_str() == ":memory:" {
            Connection::open_in_memory().map_err(open)?
        } else {
            Connection::open(path).map_err(open)?
        };
        conn.execute_batch(SCHEMA).map_err(open)?;
        let mut by_hash = BTreeMap::new();
        {
            let mut st = conn.prepare("SELECT name, role, hash, created_ms FROM tokens")?;
            let rows = st.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?;
            for row in rows {
                let (name, role, hash, created) = row?;
                let role: Role = role
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("token `{name}`: {e}")))?;
                let hash: [u8; 32] = hash.try_into().map_err(|_| {
                    StoreError::Corrupt(format!("token `{name}`: hash is not 32 bytes"))
                })?;
                by_hash.insert(
                    hash,
                    TokenRecord {
                        name,
                        role,
                        created_ms: created.max(0) as u64,
                    },
                );
            }
        }
        let mut revoked = BTreeMap::new();
        {
            let mut st = conn.prepare("SELECT host, at_secs FROM revocations")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (h, at) = row?;
                let h = u32::try_from(h)
                    .map_err(|_| StoreError::Corrupt(format!("revocation of host {h}")))?;
                revoked.insert(h, at.max(0) as u64);
            }
        }
        let mut spent = BTreeMap::new();
        {
            let mut st = conn.prepare("SELECT hash, name, host, key, spent_ms FROM spent")?;
            let rows = st.query_map([], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })?;
            for row in rows {
                let (hash, name, host, key, at) = row?;
                let corrupt = || StoreError::Corrupt(format!("spent token `{name}`"));
                let hash: [u8; 32] = hash.try_into().map_err(|_| corrupt())?;
                let host = u32::try_from(host).map_err(|_| corrupt())?;
                spent.insert(
                    hash,
                    SpentToken {
                        name,
                        host,
                        key,
                        spent_ms: at.max(0) as u64,
                    },
                );
            }
        }
        Ok(TokenStore {
            back: Back::Sqlite(conn),
            by_hash,
            revoked,
            spent,
        })
    }

    /// Loads the tokens kept in etcd under `root` (ending in `/`), written
    /// from now on only while `guard` holds.
    pub fn open_etcd(
        client: Arc<sluice_etcd::Client>,
        root: &str,
        guard: Option<super::etcd::Guard>,
    ) -> Result<TokenStore, StoreError> {
        let corrupt = |what: String| StoreError::Corrupt(format!("etcd: {what}"));
        let hash_of = |key: &[u8], prefix: &str| -> Result<[u8; 32], StoreError> {
            let k = String::from_utf8_lossy(key);
            k.strip_prefix(&format!("{root}{prefix}"))
                .and_then(unhex)
                .and_then(|h| h.try_into().ok())
                .ok_or_else(|| corrupt(format!("key {k} does not end in a hash")))
        };
        let mut by_hash = BTreeMap::new();
        for kv in client.get_prefix(format!("{root}tokens/").as_bytes())? {
            let hash = hash_of(&kv.key, "tokens/")?;
            let r: TokenRec = serde_json::from_slice(&kv.value)
                .map_err(|e| corrupt(format!("token record: {e}")))?;
            let role: Role = r
                .role
                .parse()
                .map_err(|e| corrupt(format!("token `{}`: {e}", r.name)))?;
            by_hash.insert(
                hash,
                TokenRecord {
                    name: r.name,
                    role,
                    created_ms: r.created_ms,
                },
            );
        }
        let mut revoked = BTreeMap::new();
        for kv in client.get_prefix(format!("{root}revoked/").as_bytes())? {
            let k = String::from_utf8_lossy(&kv.key).into_owned();
            let host = k
                .rsplit('/')
                .next()
                .and_then(|h| h.parse().ok())
                .ok_or_else(|| corrupt(format!("key {k}")))?;
            let at = String::from_utf8_lossy(&kv.value)
                .parse()
                .map_err(|_| corrupt(format!("key {k}: not a number")))?;
            revoked.insert(host, at);
        }
        let mut spent = BTreeMap::new();
        for kv in client.get_prefix(format!("{root}spent/").as_bytes())? {
            let hash = hash_of(&kv.key, "spent/")?;
            let r: SpentRec = serde_json::from_slice(&kv.value)
                .map_err(|e| corrupt(format!("spent token record: {e}")))?;
            let key = unhex(&r.key)
                .ok_or_else(|| corrupt(format!("spent token `{}`: key is not hex", r.name)))?;
            spent.insert(
                hash,
                SpentToken {
                    name: r.name,
                    host: r.host,
                    key,
                    spent_ms: r.spent_ms,
                },
            );
        }
        Ok(TokenStore {
            back: Back::Etcd {
                client,
                root: root.to_string(),
                guard,
            },
            by_hash,
            revoked,
            spent,
        })
    }

    /// Revokes host `host`'s credentials at `at_secs` (Unix seconds): every
    /// certificate issued to it until then is refused from now on, and its
    /// tokens (a bootstrap token not spent yet) are deleted. Returns the
    /// names of the deleted tokens. A host re-joins with a token minted
    /// afterwards, whose certificate is issued after the revocation.
    pub fn revoke_host(&mut self, host: u32, at_secs: u64) -> Result<Vec<String>, TokenError> {
        let tokens: Vec<([u8; 32], &str)> = self
            .by_hash
            .iter()
            .filter(|(_, t)| t.role == Role::Host(host))
            .map(|(h, t)| (*h, t.name.as_str()))
            .collect();
        let mut changes = vec![Change::PutRevocation(host, at_secs)];
        changes.extend(tokens.iter().map(|(h, n)| Change::DeleteToken(*h, n)));
        changes.extend(
            self.spent
                .iter()
                .filter(|(_, t)| t.host == host)
                .map(|(h, _)| Change::DeleteSpent(*h)),
        );
        self.back.apply(&changes)?;
        let names = tokens.iter().map(|(_, n)| n.to_string()).collect();
        self.by_hash.retain(|_, t| t.role != Role::Host(host));
        self.spent.retain(|_, t| t.host != host);
        self.revoked.insert(host, at_secs);
        Ok(names)
    }

    /// Whether a certificate of host `host` issued at `issued_secs` was
    /// revoked (issued at or before the host's revocation).
    pub fn certificate_revoked(&self, host: u32, issued_secs: u64) -> bool {
        self.revoked.get(&host).is_some_and(|&at| issued_secs <= at)
    }

    /// When host `host`'s credentials were last revoked, Unix seconds.
    pub fn revoked_at(&self, host: u32) -> Option<u64> {
        self.revoked.get(&host).copied()
    }

    /// Whether no token exists (a first start).
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// Who a presented secret belongs to.
    pub fn lookup(&self, secret: &str) -> Option<Principal> {
        self.by_hash.get(&hash_secret(secret)).map(|t| Principal {
            name: t.name.clone(),
            role: t.role.clone(),
        })
    }

    /// The spent bootstrap token a presented secret was, if spent less than
    /// [`SPENT_GRACE_MS`] before `now_ms`.
    pub fn spent(&self, secret: &str, now_ms: u64) -> Option<&SpentToken> {
        self.spent
            .get(&hash_secret(secret))
            .filter(|t| now_ms.saturating_sub(t.spent_ms) < SPENT_GRACE_MS)
    }

    /// Spends the bootstrap token `name` of host `host` on a certificate for
    /// `key` at `now_ms`: it no longer authenticates anything, except that
    /// request again for a while ([`TokenStore::spent`]). Forgets tokens
    /// spent longer ago than that.
    pub fn spend(
        &mut self,
        name: &str,
        host: u32,
        key: &[u8],
        now_ms: u64,
    ) -> Result<TokenRecord, TokenError> {
        let Some(hash) = self
            .by_hash
            .iter()
            .find(|(_, t)| t.name == name)
            .map(|(h, _)| *h)
        else {
            return Err(TokenError::Unknown(name.to_string()));
        };
        let cutoff = now_ms.saturating_sub(SPENT_GRACE_MS);
        let record = SpentToken {
            name: name.to_string(),
            host,
            key: key.to_vec(),
            spent_ms: now_ms,
        };
        let mut changes = vec![Change::DeleteToken(hash, name)];
        changes.extend(
            self.spent
                .iter()
                .filter(|(_, t)| t.spent_ms < cutoff)
                .map(|(h, _)| Change::DeleteSpent(*h)),
        );
        changes.push(Change::PutSpent(hash, &record));
        self.back.apply(&changes)?;
        self.spent.retain(|_, t| t.spent_ms >= cutoff);
        self.spent.insert(hash, record);
        self.by_hash
            .remove(&hash)
            .ok_or_else(|| TokenError::Unknown(name.to_string()))
    }

    /// Every token, by name.
    pub fn list(&self) -> Vec<TokenRecord> {
        let mut v: Vec<TokenRecord> = self.by_hash.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Creates a token; returns its secret (the only time it exists in full).
    pub fn create(&mut self, name: &str, role: Role, now_ms: u64) -> Result<String, TokenError> {
        let secret = new_secret()?;
        self.create_with(name, role, &secret, now_ms)?;
        Ok(secret)
    }

    /// Creates a token with a secret drawn by the caller (who had to keep it
    /// somewhere safe first: the bootstrap's admin token file).
    pub fn create_with(
        &mut self,
        name: &str,
        role: Role,
        secret: &str,
        now_ms: u64,
    ) -> Result<(), TokenError> {
        if self.by_hash.values().any(|t| t.name == name) {
            return Err(TokenError::Exists(name.to_string()));
        }
        let hash = hash_secret(secret);
        let record = TokenRecord {
            name: name.to_string(),
            role,
            created_ms: now_ms,
        };
        self.back.apply(&[Change::PutToken(hash, &record)])?;
        self.by_hash.insert(hash, record);
        Ok(())
    }

    /// Deletes the token called `name`; refuses to delete the last operator
    /// token (nobody could manage tokens after).
    pub fn delete(&mut self, name: &str) -> Result<TokenRecord, TokenError> {
        let Some((hash, rec)) = self
            .by_hash
            .iter()
            .find(|(_, t)| t.name == name)
            .map(|(h, t)| (*h, t.clone()))
        else {
            return Err(TokenError::Unknown(name.to_string()));
        };
        let operators = self
            .by_hash
            .values()
            .filter(|t| t.role == Role::Operator)
            .count();
        if rec.role == Role::Operator && operators == 1 {
            return Err(TokenError::LastOperator(name.to_string()));
        }
        self.back.apply(&[Change::DeleteToken(hash, name)])?;
        self.by_hash.remove(&hash);
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens the same stored tokens again (as a restarted controller, or
    /// another controller taking the lead), and reads every stored byte.
    struct Backend {
        open: Box<dyn Fn() -> TokenStore>,
        raw: Box<dyn Fn() -> Vec<u8>>,
        _keep: Box<dyn std::any::Any>,
    }

    /// SQLite, and etcd if it is installed.
    fn backends() -> Vec<Backend> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let p2 = path.clone();
        let mut v = vec![Backend {
            open: Box::new(move || TokenStore::open(&path).unwrap()),
            raw: Box::new(move || std::fs::read(&p2).unwrap()),
            _keep: Box::new(dir),
        }];
        if sluice_etcd::server::etcd_binary().is_some() {
            let c = sluice_etcd::server::EtcdCluster::start(1).unwrap();
            let client = Arc::new(c.client().unwrap());
            let c2 = client.clone();
            v.push(Backend {
                open: Box::new(move || {
                    TokenStore::open_etcd(client.clone(), "/sluice/", None).unwrap()
                }),
                raw: Box::new(move || {
                    c2.get_prefix(b"/")
                        .unwrap()
                        .into_iter()
                        .flat_map(|kv| [kv.key, kv.value].concat())
                        .collect()
                }),
                _keep: Box::new(c),
            });
        } else {
            eprintln!("etcd is not installed: the etcd backend is not tested");
        }
        v
    }

    #[test]
    fn a_revocation_refuses_older_certificates_deletes_the_hosts_tokens_and_survives_a_reopen() {
        for b in backends() {
            let mut s = (b.open)();
            s.create("admin", Role::Operator, 1).unwrap();
            let spare = s.create("h3-spare", Role::Host(3), 2).unwrap();
            s.create("h4", Role::Host(4), 3).unwrap();
            assert!(!s.certificate_revoked(3, 100));
            assert_eq!(s.revoke_host(3, 1_000).unwrap(), ["h3-spare"]);
            assert!(s.lookup(&spare).is_none());
            // Issued at or before the revocation: refused; after: accepted.
            assert!(s.certificate_revoked(3, 999));
            assert!(s.certificate_revoked(3, 1_000));
            assert!(!s.certificate_revoked(3, 1_001));
            // Other hosts and their tokens are untouched.
            assert!(!s.certificate_revoked(4, 999));
            assert_eq!(s.list().len(), 2);
            drop(s);
            let mut s = (b.open)();
            assert_eq!(s.revoked_at(3), Some(1_000));
            assert!(s.certificate_revoked(3, 1_000));
            // Revoking again moves the line forward (a re-joined host lost again).
            assert!(s.revoke_host(3, 2_000).unwrap().is_empty());
            assert!(s.certificate_revoked(3, 1_500));
        }
    }

    #[test]
    fn a_spent_token_answers_only_its_own_key_for_a_while_and_survives_a_reopen() {
        for b in backends() {
            let mut s = (b.open)();
            s.create("admin", Role::Operator, 1).unwrap();
            let t = s.create("h2-join", Role::Host(2), 2).unwrap();
            assert!(s.spent(&t, 10).is_none(), "not spent yet");
            assert_eq!(
                s.spend("h2-join", 2, b"key-a", 1_000).unwrap().name,
                "h2-join"
            );
            assert!(
                s.lookup(&t).is_none(),
                "a spent token authenticates nothing"
            );
            let sp = s.spent(&t, 1_000 + SPENT_GRACE_MS - 1).unwrap();
            assert_eq!((sp.host, &sp.key[..]), (2, &b"key-a"[..]));
            assert!(s.spent(&t, 1_000 + SPENT_GRACE_MS).is_none(), "grace over");
            assert!(matches!(
                s.spend("h2-join", 2, b"key-b", 2_000),
                Err(TokenError::Unknown(_))
            ));
            drop(s);
            let mut s = (b.open)();
            assert_eq!(s.spent(&t, 5_000).unwrap().key, b"key-a");
            // Spending another token later forgets the old record…
            let u = s.create("h3-join", Role::Host(3), 3).unwrap();
            s.spend("h3-join", 3, b"key-c", 1_000 + SPENT_GRACE_MS + 1)
                .unwrap();
            assert!(s.spent(&t, 1_000).is_none());
            // …and revoking the host forgets its own at once.
            assert!(s.spent(&u, 1_000 + SPENT_GRACE_MS + 2).is_some());
            s.revoke_host(3, 9).unwrap();
            assert!(s.spent(&u, 1_000 + SPENT_GRACE_MS + 2).is_none());
            drop(s);
            assert!((b.open)().spent(&u, 1_000 + SPENT_GRACE_MS + 2).is_none());
        }
    }

    #[test]
    fn secrets_are_kept_only_as_hashes_and_survive_a_reopen() {
        for b in backends() {
            let mut s = (b.open)();
            assert!(s.is_empty());
            let secret = s.create("alice", Role::Tenant("acme".into()), 7).unwrap();
            assert!(secret.starts_with(SECRET_PREFIX));
            assert_eq!(secret.len(), SECRET_PREFIX.len() + 64);
            assert_ne!(secret, s.create("bob", Role::Operator, 8).unwrap());
            assert!(matches!(
                s.create("alice", Role::ReadOnly, 9),
                Err(TokenError::Exists(_))
            ));
            drop(s);
            let raw = (b.raw)();
            assert!(
                !raw.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "the secret is in the store"
            );
            let mut s = (b.open)();
            assert_eq!(
                s.lookup(&secret),
                Some(Principal {
                    name: "alice".into(),
                    role: Role::Tenant("acme".into())
                })
            );
            assert_eq!(s.lookup("sluice_00"), None);
            assert!(matches!(s.delete("bob"), Err(TokenError::LastOperator(_))));
            assert_eq!(s.delete("alice").unwrap().name, "alice");
            assert_eq!(s.lookup(&secret), None);
            assert!(matches!(s.delete("alice"), Err(TokenError::Unknown(_))));
            assert_eq!(
                s.list().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
                ["bob"]
            );
        }
    }
}
