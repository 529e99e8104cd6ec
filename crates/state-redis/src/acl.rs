//! Store isolation between tenants: one Redis/Valkey ACL user per tenant, whose
//! key pattern covers only the keys stored under that tenant's prefix, and the
//! admin connection that creates and deletes those users and loads the
//! backend's functions.
//!
//! A tenant's instances connect as [`tenant_user`] with `?prefix=`
//! [`tenant_prefix`]: every key and timer set they touch then starts with the
//! prefix (`t.acme.{XXXXXXXX}k`), and the server refuses (`NOPERM`) any other key,
//! inside the backend's functions too. A tenant user may call those functions
//! (`FCALL`) but not load code (`FUNCTION LOAD`, `SCRIPT LOAD`, `EVAL`): the
//! store is shared, and Lua of a tenant's own could keep it busy for every
//! tenant. The admin loads the library ([`Admin::load_library`]).
//!
//! Tenant names are escaped so that no name can widen the
//! pattern: only `[A-Za-z0-9_-]` pass unchanged, everything else (`.` included,
//! so `t.a.` never prefixes tenant `a.b`'s `t.a%2Eb.`) becomes `%XX`.

use sluice_state::StoreError;

use crate::node::Node;
use crate::resp::Reply;
use crate::{Auth, Secret};

/// Every command the state backend sends as a tenant's user, directly or from
/// its functions ([`crate::scripts`]), and nothing else: a tenant user is
/// allowed exactly these. `AUTH` needs no permission; `CLUSTER|SLOTS`, `ASKING`,
/// `WAIT` and `ROLE` are for Redis Cluster. Nothing that loads or runs code of
/// the caller's (`FUNCTION LOAD`/`DELETE`/`FLUSH`/`RESTORE`, `SCRIPT LOAD`,
/// `EVAL`, `EVALSHA`): only `FCALL` of functions the admin loaded.
pub const TENANT_COMMANDS: &[&str] = &[
    // Sent directly (node.rs, cluster.rs).
    "get",
    "set",
    "append",
    "del",
    "mset",
    "incrby",
    "zadd",
    "zrem",
    "fcall",
    "cluster|slots",
    "asking",
    "wait",
    "role",
    // Called by the functions.
    "exists",
    "hset",
    "hget",
    "hmget",
    "lpop",
    "rpush",
    "sadd",
    "srem",
    "zrangebyscore",
];

/// The name prefix of every user [`Admin::set_tenant_user`] creates.
pub const TENANT_USER_PREFIX: &str = "sluice-t-";

/// `tenant` with every byte outside `[A-Za-z0-9_-]` written `%XX`.
fn escape(tenant: &str) -> String {
    let mut out = String::with_capacity(tenant.len());
    for b in tenant.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The ACL user of `tenant`'s instances: `sluice-t-<escaped tenant>`.
pub fn tenant_user(tenant: &str) -> String {
    format!("{TENANT_USER_PREFIX}{}", escape(tenant))
}

/// The key prefix of `tenant`'s state: `t.<escaped tenant>.`.
pub fn tenant_prefix(tenant: &str) -> String {
    format!("t.{}.", escape(tenant))
}

/// The arguments of the `ACL SETUSER` that (re)creates `user`: enabled, only
/// `password`, only keys starting with `prefix`, only [`TENANT_COMMANDS`], no
/// Pub/Sub channels. `reset` first, so running it again changes nothing and an
/// older definition is replaced whole.
pub fn setuser_args(user: &str, password: &Secret, prefix: &str) -> Vec<Vec<u8>> {
    let mut a: Vec<Vec<u8>> = vec![
        b"ACL".to_vec(),
        b"SETUSER".to_vec(),
        user.as_bytes().to_vec(),
        b"reset".to_vec(),
        b"on".to_vec(),
        format!(">{}", password.expose()).into_bytes(),
        format!("~{prefix}*").into_bytes(),
        b"resetchannels".to_vec(),
        b"-@all".to_vec(),
    ];
    a.extend(TENANT_COMMANDS.iter().map(|c| format!("+{c}").into_bytes()));
    a
}

/// An administrative connection (to a server, or to every node listed in a
/// cluster URL: ACL users are per node) that manages tenant users.
pub struct Admin {
    nodes: Vec<Node>,
}

impl Admin {
    /// Connects to `redis://USER@HOST:PORT` or `redis-cluster://USER@H:P,...`
    /// (or their TLS variants `rediss://`, `rediss-cluster://`; password as in
    /// [`crate::Config::from_url`]); the user needs the `ACL` command, and
    /// `FUNCTION` for [`Admin::load_library`]. For a cluster, list every node:
    /// each keeps its own users.
    pub fn open(url: &str) -> Result<Admin, StoreError> {
        let cluster = crate::is_cluster_url(url);
        let scheme = if cluster {
            "redis-cluster://"
        } else {
            "redis://"
        };
        let u = crate::parse_url(url, scheme)?;
        let hosts: Vec<&str> = u.hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| !h.contains(':')) || (!cluster && hosts.len() != 1) {
            return Err(StoreError::Refused(format!(
                "`{}`: expected {scheme}USER@HOST:PORT",
                crate::redact_url(url)
            )));
        }
        let nodes = hosts
            .into_iter()
            .map(|h| {
                let mut n = Node::new(
                    h.to_string(),
                    std::time::Duration::from_secs(2),
                    std::time::Duration::ZERO,
                );
                n.auth = u.auth.clone();
                n.tls = u.tls.clone();
                n.load_library = false;
                n
            })
            .collect();
        Ok(Admin { nodes })
    }

    /// The credentials it connects with.
    pub fn auth(&self) -> Option<&Auth> {
        self.nodes.first().and_then(|n| n.auth.as_ref())
    }

    /// Creates or redefines `tenant`'s user with `password` on every node.
    /// Its connections also need the function library
    /// ([`Admin::load_library`]), which they may not load themselves. A node
    /// that fails (a dead cluster node) does not keep the user off the
    /// others: every node is tried, and the first failure is returned.
    pub fn set_tenant_user(&mut self, tenant: &str, password: &Secret) -> Result<(), StoreError> {
        let args = setuser_args(&tenant_user(tenant), password, &tenant_prefix(tenant));
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        let mut first = Ok(());
        for n in &mut self.nodes {
            // The server may quote a rule it refuses, and a rule holds the password.
            let r = expect_ok(n, &args, "ACL SETUSER").map_err(|e| match e {
                StoreError::Refused(m) => {
                    StoreError::Refused(m.replace(password.expose(), "<redacted>"))
                }
                other => other,
            });
            first = first.and(r);
        }
        first
    }

    /// Loads the state backend's function library ([`crate::scripts::LIBRARY`])
    /// on every node that lacks it or holds other code under its name
    /// (`FUNCTION LOAD REPLACE`), and returns on how many it did. Tenant users
    /// cannot load it, so this is what gives their connections the library,
    /// and gives it back to a node that restarted empty. A replica refuses
    /// the load (`READONLY`) and is left alone: it gets the library from its
    /// primary. As in [`Admin::set_tenant_user`], every node is tried.
    pub fn load_library(&mut self) -> Result<usize, StoreError> {
        use crate::scripts::{LIBRARY, LIBRARY_NAME};
        let mut first = Ok(());
        let mut loaded = 0;
        for n in &mut self.nodes {
            let r = (|| {
                let listed = call(
                    n,
                    &[
                        b"FUNCTION",
                        b"LIST",
                        b"LIBRARYNAME",
                        LIBRARY_NAME.as_bytes(),
                        b"WITHCODE",
                    ],
                )?;
                let Reply::Array(Some(_)) = &listed else {
                    let e = n.unexpected(&format!("{}: FUNCTION LIST", n.addr), &listed);
                    return Err(match n.error_text(&listed) {
                        Some(t) if t.starts_with(b"ERR unknown command") => {
                            StoreError::Refused(format!("{e}: {}", crate::node::NEEDS_FUNCTIONS))
                        }
                        _ => e,
                    });
                };
                // The code is unique to the library (its first line names it).
                if holds_bulk(&owned(&n.rbuf, &listed), LIBRARY.as_bytes()) {
                    return Ok(false);
                }
                let r = call(n, &[b"FUNCTION", b"LOAD", b"REPLACE", LIBRARY.as_bytes()])?;
                n.loaded(&r)?;
                Ok(matches!(r, Reply::Bulk(Some(_))))
            })();
            match r {
                Ok(fresh) => loaded += usize::from(fresh),
                Err(e) => first = first.and(Err(e)),
            }
        }
        first.map(|()| loaded)
    }

    /// Deletes `user` on every node (its connections are closed by the
    /// server); as in [`Admin::set_tenant_user`], every node is tried.
    pub fn delete_user(&mut self, user: &str) -> Result<(), StoreError> {
        let mut first = Ok(());
        for n in &mut self.nodes {
            let r = match call(n, &[b"ACL", b"DELUSER", user.as_bytes()]) {
                Ok(Reply::Int(_)) => Ok(()),
                Ok(other) => Err(n.unexpected("ACL DELUSER", &other)),
                Err(e) => Err(e),
            };
            first = first.and(r);
        }
        first
    }

    /// The tenant users (names starting with [`TENANT_USER_PREFIX`]) on any
    /// node that answers. A node that does not (a dead cluster node) is
    /// skipped, so the live ones can still be brought in line; the first
    /// failure is returned only if no node answered.
    pub fn tenant_users(&mut self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        let mut failure = None;
        let mut answered = false;
        for n in &mut self.nodes {
            let r = match call(n, &[b"ACL", b"USERS"]) {
                Ok(r) => r,
                Err(e) => {
                    failure.get_or_insert(e);
                    continue;
                }
            };
            let Reply::Array(Some(items)) = &r else {
                failure.get_or_insert(n.unexpected("ACL USERS", &r));
                continue;
            };
            answered = true;
            for it in items {
                if let Reply::Bulk(Some(range)) = it {
                    let name = String::from_utf8_lossy(&n.rbuf[range.clone()]).into_owned();
                    if name.starts_with(TENANT_USER_PREFIX) && !out.contains(&name) {
                        out.push(name);
                    }
                }
            }
        }
        match failure {
            Some(e) if !answered => Err(e),
            _ => {
                out.sort();
                Ok(out)
            }
        }
    }
}

impl Admin {
    /// A counter of the `INFO` section `section` of the first node (e.g.
    /// `stats`, `total_commands_processed`), for measurements. Connecting
    /// counts a command of its own (`AUTH`, if it authenticates).
    pub fn info_field(&mut self, section: &str, field: &str) -> Result<u64, StoreError> {
        let n = &mut self.nodes[0];
        let r = call(n, &[b"INFO", section.as_bytes()])?;
        let Reply::Bulk(Some(range)) = &r else {
            return Err(n.unexpected("INFO", &r));
        };
        let text = String::from_utf8_lossy(&n.rbuf[range.clone()]).into_owned();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(field)?
                    .strip_prefix(':')?
                    .trim()
                    .parse()
                    .ok()
            })
            .ok_or_else(|| StoreError::Protocol(format!("INFO {section}: no `{field}`")))
    }
}

/// A reply of [`Admin::command`], copied out of the connection's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `+OK`, `+PONG`.
    Simple(String),
    /// `-ERR ...`: the server refused the command.
    Error(String),
    /// `:42`.
    Int(i64),
    /// A bulk string (`None` for a nil).
    Bulk(Option<Vec<u8>>),
    /// An array (`None` for a nil).
    Array(Option<Vec<Value>>),
}

impl Value {
    /// A bulk or simple string as text.
    pub fn text(&self) -> Option<String> {
        match self {
            Value::Simple(s) => Some(s.clone()),
            Value::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// Whether `v` is the bulk string `b` or holds it at any depth.
fn holds_bulk(v: &Value, b: &[u8]) -> bool {
    match v {
        Value::Bulk(Some(x)) => x == b,
        Value::Array(Some(items)) => items.iter().any(|i| holds_bulk(i, b)),
        _ => false,
    }
}

fn owned(buf: &[u8], r: &Reply) -> Value {
    let text = |x: &std::ops::Range<usize>| String::from_utf8_lossy(&buf[x.clone()]).into_owned();
    match r {
        Reply::Simple(x) => Value::Simple(text(x)),
        Reply::Error(x) => Value::Error(text(x)),
        Reply::Int(i) => Value::Int(*i),
        Reply::Bulk(b) => Value::Bulk(b.as_ref().map(|x| buf[x.clone()].to_vec())),
        Reply::Array(a) => Value::Array(
            a.as_ref()
                .map(|items| items.iter().map(|i| owned(buf, i)).collect()),
        ),
    }
}

impl Admin {
    /// The addresses (`host:port`) of its nodes, in the URL's order.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    /// Sends one command to node `i` (of [`Admin::addrs`]) and returns its
    /// reply; an error reply is a [`Value::Error`], not a failure. For health
    /// probes (`PING`, `ROLE`, `CLUSTER SLOTS`) and the controller's own keys.
    pub fn command(&mut self, i: usize, args: &[&[u8]]) -> Result<Value, StoreError> {
        let n = self
            .nodes
            .get_mut(i)
            .ok_or_else(|| StoreError::Refused(format!("no store node {i} in the admin's URL")))?;
        let r = call(n, args)?;
        Ok(owned(&n.rbuf, &r))
    }
}

impl Admin {
    /// Sends `commands` to node `i` in one write and reads their replies, in
    /// order: one round trip for the lot (the agent's SIEM sink adds a batch of
    /// EVE lines to streams this way). An error reply is a [`Value::Error`] in
    /// its place; a lost connection fails the whole call, and which of the
    /// commands the server ran before it is then unknown.
    pub fn pipeline(
        &mut self,
        i: usize,
        commands: &[Vec<&[u8]>],
    ) -> Result<Vec<Value>, StoreError> {
        let n = self
            .nodes
            .get_mut(i)
            .ok_or_else(|| StoreError::Refused(format!("no store node {i} in the admin's URL")))?;
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let named = |n: &Node, e: StoreError| match e {
            StoreError::Unavailable(m) if !m.contains(&n.addr) => {
                StoreError::Unavailable(format!("{}: {m}", n.addr))
            }
            StoreError::Timeout(ms) => {
                StoreError::Unavailable(format!("{}: no answer within {ms} ms", n.addr))
            }
            other => other,
        };
        let sent = (|| {
            n.check_no_started()?;
            n.ensure_conn()?;
            n.wbuf.clear();
            for c in commands {
                crate::resp::encode(&mut n.wbuf, c);
            }
            let sent = n.send();
            n.wbuf.clear();
            sent?;
            n.receive(commands.len())
        })();
        match sent {
            Ok(replies) => Ok(replies.iter().map(|r| owned(&n.rbuf, r)).collect()),
            Err(e) => Err(named(n, e)),
        }
    }
}

/// Sends one command on `n` and reads its reply. A node that cannot be
/// reached is named in the error: with several, the operator needs to know
/// which one is down.
fn call(n: &mut Node, args: &[&[u8]]) -> Result<Reply, StoreError> {
    call_unnamed(n, args).map_err(|e| match e {
        StoreError::Unavailable(m) if !m.contains(&n.addr) => {
            StoreError::Unavailable(format!("{}: {m}", n.addr))
        }
        StoreError::Timeout(ms) => {
            StoreError::Unavailable(format!("{}: no answer within {ms} ms", n.addr))
        }
        other => other,
    })
}

fn call_unnamed(n: &mut Node, args: &[&[u8]]) -> Result<Reply, StoreError> {
    // The admin's commands are idempotent (definitions, reads, markers): one
    // sent on a connection kept from before, which the node closed when it
    // restarted, is sent again once on a new one, instead of failing a sync
    // or a probe because of what the node did in between.
    let reused = n.connected();
    match call_once(n, args) {
        Err(StoreError::Unavailable(_)) if reused => {
            n.drop_conn();
            call_once(n, args)
        }
        r => r,
    }
}

fn call_once(n: &mut Node, args: &[&[u8]]) -> Result<Reply, StoreError> {
    n.check_no_started()?;
    n.ensure_conn()?;
    n.wbuf.clear();
    crate::resp::encode(&mut n.wbuf, args);
    let sent = n.send();
    // `ACL SETUSER` carries a password.
    n.wbuf.clear();
    sent?;
    let mut r = n.receive(1)?;
    Ok(r.remove(0))
}

fn expect_ok(n: &mut Node, args: &[&[u8]], what: &str) -> Result<(), StoreError> {
    match call(n, args)? {
        Reply::Simple(_) => Ok(()),
        other => Err(n.unexpected(what, &other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_tenant_name_can_widen_or_share_another_tenants_pattern() {
        assert_eq!(tenant_prefix("acme"), "t.acme.");
        assert_eq!(tenant_user("acme-2_x"), "sluice-t-acme-2_x");
        // Glob characters and braces never reach the pattern or the hash tag.
        assert_eq!(tenant_prefix("*"), "t.%2A.");
        assert_eq!(tenant_prefix("a{b}"), "t.a%7Bb%7D.");
        assert_eq!(tenant_user("a b"), "sluice-t-a%20b");
        // `a`'s pattern `t.a.*` does not cover tenant `a.b`'s keys.
        let (a, ab) = (tenant_prefix("a"), tenant_prefix("a.b"));
        assert!(!ab.starts_with(&a), "{a} {ab}");
        for t in ["acme", "a.b", "*", "x?[y]", "%41", "ü"] {
            assert!(crate::valid_prefix(&tenant_prefix(t)), "{t}");
            let p = tenant_prefix(t);
            assert_eq!(p.matches('.').count(), 2, "{t}: {p}");
        }
        // Distinct names, distinct prefixes (escaping is injective).
        assert_ne!(tenant_prefix("%41"), tenant_prefix("A"));
    }

    #[test]
    fn the_setuser_command_grants_only_the_prefix_and_the_listed_commands() {
        let args = setuser_args("sluice-t-a", &Secret::new("pw"), "t.a.");
        let text: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(
            &text[..9],
            [
                "ACL",
                "SETUSER",
                "sluice-t-a",
                "reset",
                "on",
                ">pw",
                "~t.a.*",
                "resetchannels",
                "-@all"
            ]
        );
        assert_eq!(text.len(), 9 + TENANT_COMMANDS.len());
        assert!(text.iter().all(|t| !t.contains("@all") || t == "-@all"));
        // Functions the admin loaded may be called; no code may be loaded,
        // run from text or removed (nor any category granted).
        assert!(TENANT_COMMANDS.contains(&"fcall"));
        for c in TENANT_COMMANDS {
            let base = c.split('|').next().unwrap();
            assert!(
                ![
                    "eval",
                    "evalsha",
                    "eval_ro",
                    "evalsha_ro",
                    "script",
                    "function",
                    "config"
                ]
                .contains(&base)
                    && !c.starts_with('@'),
                "{c}"
            );
        }
    }
}
