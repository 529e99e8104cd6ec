//! Authentication and authorization end to end, on a real server: the attacks
//! of issue 21 replayed. Without a token nothing but `/healthz` and the API
//! description answers; tenant A's token cannot read, change or delete tenant
//! B (nor see B in any listing); a host's token cannot register as another host
//! or change one's underlay; a read-only token cannot write; only operators
//! manage tokens, whose secrets are shown once and stored hashed.

use std::path::Path;

mod common;
use common::call;

use serde_json::Value;
use sluice_controller::client::Client;
use sluice_controller::{serve, ServerHandle, ServerOptions, ROUTES};

/// `method url` with `token` (if any): the status and the body.
fn spec(tenant: &str, net: u8) -> String {
    format!(
        "tenant: {tenant}
elements:
  a: {{ type: service, vms: {{ {tenant}-a1: 10.{net}.0.1 }} }}
  b: {{ type: service, vms: {{ {tenant}-b1: 10.{net}.0.2 }} }}
  fw: {{ type: middlebox, function: monitor }}
chains:
  - {{ name: ab, path: [a, fw, b] }}
"
    )
}

fn vm(tenant: &str, name: &str, host: u32, addr: &str) -> String {
    format!(
        "{{\"tenant\":\"{tenant}\",\"name\":\"{name}\",\"host\":{host},\"iface\":\"v-{name}\",\
         \"mac\":\"02:00:00:00:00:07\",\"addr\":\"{addr}\"}}"
    )
}

fn host(id: u32, underlay: &str) -> String {
    format!(
        "{{\"host\":{id},\"name\":\"h{id}\",\"underlay\":\"{underlay}\",\
         \"api\":\"http://127.0.0.1:9\"}}"
    )
}

struct World {
    _server: ServerHandle,
    base: String,
    admin: String,
    acme: String,
    bravo: String,
    reader: String,
    h1: String,
    h2: String,
}

fn world(dir: &Path) -> World {
    let token_file = dir.join("admin.token");
    let server = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: dir.join("c.db"),
        state_url: "local".into(),
        admin_token_file: Some(token_file.clone()),
        fabric_auth: true,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    assert_eq!(server.bootstrapped(), Some(token_file.as_path()));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the admin token file is {mode:o}");
    let admin = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    let c = Client::new(&server.url()).with_token(Some(&admin));
    let tok = |name: &str, role: &str| c.create_token(name, role).unwrap().token;
    let (acme, bravo, reader) = (
        tok("acme-ci", "tenant:acme"),
        tok("bravo-ci", "tenant:bravo"),
        tok("auditor", "read-only"),
    );
    let (h1, h2) = (tok("host-1", "host:1"), tok("host-2", "host:2"));
    let base = server.url();
    // Each host registers with its own token; each tenant sets itself up.
    for (t, id) in [(&h1, 1), (&h2, 2)] {
        let ul = format!("10.255.0.{id}");
        assert_eq!(
            call(&base, Some(t), "POST", "/v1/hosts", &host(id, &ul)).0,
            200
        );
    }
    for (t, name, net) in [(&acme, "acme", 1), (&bravo, "bravo", 2)] {
        for (i, v) in ["a1", "b1"].iter().enumerate() {
            let vm_name = format!("{name}-{v}");
            let body = vm(
                name,
                &vm_name,
                1 + i as u32,
                &format!("10.{net}.0.{}", i + 1),
            );
            // The operator binds host interfaces to tenants.
            let (code, text) = call(
                &base,
                Some(&admin),
                "PUT",
                &format!("/v1/vms/{name}/{vm_name}"),
                &body,
            );
            assert_eq!(code, 201, "{text}");
        }
        let (code, text) = call(
            &base,
            Some(t),
            "PUT",
            &format!("/v1/tenants/{name}"),
            &spec(name, net),
        );
        assert_eq!(code, 201, "{text}");
    }
    // An event of bravo's: its middlebox scaled.
    let (code, text) = call(
        &base,
        Some(&bravo),
        "PUT",
        "/v1/tenants/bravo/middleboxes/fw",
        "{\"instances\":2}",
    );
    assert_eq!(code, 200, "{text}");
    World {
        _server: server,
        base,
        admin,
        acme,
        bravo,
        reader,
        h1,
        h2,
    }
}

/// A concrete path of each route template, aimed at tenant `t` and host 1.
fn concrete(tpl: &str, t: &str) -> String {
    tpl.replace("{name}", t)
        .replace("{tenant}", t)
        .replace("{id}", "1")
        .replace("{middlebox}", "fw")
        .replace("{chain}", "ab")
}

#[test]
fn without_a_known_token_only_health_and_the_api_description_answer() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path());
    for &(m, tpl) in ROUTES {
        let path = concrete(tpl, "acme");
        for token in [None, Some("sluice_0000"), Some("")] {
            let (code, text) = call(&w.base, token, m, &path, "");
            if matches!(tpl, "/healthz" | "/v1/openapi.yaml") {
                assert_eq!(code, 200, "{m} {path}");
            } else {
                assert_eq!(code, 401, "{m} {path} with {token:?}: {text}");
                let v: Value = serde_json::from_str(&text).unwrap();
                let msg = v["error"].as_str().unwrap();
                assert!(msg.contains("token"), "{msg}");
            }
        }
    }
    // The dashboard's files need none (they hold no data), under a policy
    // that lets the page load nothing from elsewhere and run no inline code.
    for path in ["/ui/", "/ui/app.js", "/ui/style.css"] {
        let r = ureq::get(&format!("{}{path}", w.base)).call().unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
        let csp = r.header("Content-Security-Policy").unwrap();
        assert!(
            csp.starts_with("default-src 'self'") && !csp.contains("unsafe"),
            "{csp}"
        );
    }
    // A token sent some other way is refused as such.
    let r = ureq::get(&format!("{}/v1/tenants", w.base))
        .set("Authorization", &format!("Basic {}", w.admin))
        .call();
    match r {
        Err(ureq::Error::Status(401, resp)) => {
            assert_eq!(
                resp.header("WWW-Authenticate"),
                Some("Bearer realm=\"sluice\"")
            );
            assert!(resp.into_string().unwrap().contains("not a bearer token"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_tenant_cannot_touch_or_see_another_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path());
    let admin = Client::new(&w.base).with_token(Some(&w.admin));
    let before = admin.tenant("bravo").unwrap();
    // Every route naming a tenant, aimed at bravo with acme's token.
    let bodies = |m: &str, tpl: &str| -> String {
        match (m, tpl) {
            ("PUT", "/v1/tenants/{name}") | ("POST", "/v1/tenants") => spec("bravo", 2),
            ("PUT", "/v1/vms/{tenant}/{name}") => vm("bravo", "bravo", 1, "10.2.0.9"),
            ("PUT", t) if t.ends_with("{middlebox}") => "{\"instances\":3}".into(),
            ("POST", t) if t.ends_with("metrics") => "{\"value\":1}".into(),
            ("POST", t) if t.ends_with("request") => "{\"up\":true}".into(),
            ("PUT", t) if t.ends_with("scaling") => "{}".into(),
            ("POST", t) if t.ends_with("blocks") => {
                "{\"vm\":\"bravo-b1\",\"from\":\"bravo-a1\"}".into()
            }
            _ => String::new(),
        }
    };
    let mut tried = 0;
    for &(m, tpl) in ROUTES {
        if !(tpl.contains("{name}") || tpl.contains("{tenant}") || tpl == "/v1/tenants")
            || tpl.starts_with("/v1/tokens")
            || (m == "GET" && tpl == "/v1/tenants")
        {
            continue;
        }
        let (code, text) = call(
            &w.base,
            Some(&w.acme),
            m,
            &concrete(tpl, "bravo"),
            &bodies(m, tpl),
        );
        assert_eq!(code, 403, "{m} {tpl} on bravo by acme: {text}");
        assert!(
            text.contains("acme-ci") && text.contains("tenant:acme") && text.contains("bravo"),
            "{text}"
        );
        tried += 1;
    }
    assert_eq!(tried, 20, "routes naming a tenant");
    // Bravo is untouched.
    let after = admin.tenant("bravo").unwrap();
    assert_eq!(after.generation, before.generation);
    assert_eq!(after.spec, before.spec);
    assert_eq!(admin.middlebox("bravo", "fw").unwrap().instances, 2);
    // Listings show acme's entries only, and some of them.
    for path in [
        "/v1/tenants",
        "/v1/vms",
        "/v1/instances",
        "/v1/chains",
        "/v1/events",
        "/v1/traffic",
    ] {
        let (code, text) = call(&w.base, Some(&w.acme), "GET", path, "");
        assert_eq!(code, 200, "{path}: {text}");
        assert!(
            !text.contains("bravo"),
            "{path} shows bravo to acme: {text}"
        );
        let all = call(&w.base, Some(&w.admin), "GET", path, "").1;
        assert!(
            all.contains("bravo"),
            "{path} shows the operator no bravo: {all}"
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        let n = v.as_array().unwrap().len();
        if path != "/v1/events" {
            assert!(n > 0, "{path} shows acme nothing of its own");
        }
    }
    // Hosts, their FIBs (every tenant's entries) and the tokens are not a tenant's.
    for path in [
        "/v1/hosts",
        "/v1/hosts/1/fib",
        "/v1/hosts/1/config",
        "/v1/tokens",
    ] {
        assert_eq!(
            call(&w.base, Some(&w.acme), "GET", path, "").0,
            403,
            "{path}"
        );
    }
    // It may not bind a host interface to itself, even under its own name:
    // the interface could be another tenant's VM's.
    let (code, text) = call(
        &w.base,
        Some(&w.acme),
        "PUT",
        "/v1/vms/acme/sneaky",
        &vm("acme", "sneaky", 1, "10.1.0.9"),
    );
    assert_eq!(code, 403, "{text}");
    // Its own tenant it reads and changes; its own VM it may delete.
    let (code, text) = call(&w.base, Some(&w.acme), "DELETE", "/v1/vms/acme/acme-b1", "");
    // Authorized: refused only because its applied spec still needs the VM.
    assert_eq!(code, 409, "{text}");
    assert!(text.contains("needs it"), "{text}");
    assert_eq!(
        call(&w.base, Some(&w.acme), "GET", "/v1/tenants/acme", "").0,
        200
    );
    let (code, text) = call(
        &w.base,
        Some(&w.acme),
        "PUT",
        "/v1/tenants/acme/middleboxes/fw",
        "{\"instances\":2}",
    );
    assert_eq!(code, 200, "{text}");
    assert_eq!(
        call(&w.base, Some(&w.bravo), "GET", "/v1/tenants/acme", "").0,
        403
    );
}

#[test]
fn a_host_cannot_take_another_hosts_identity() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path());
    let admin = Client::new(&w.base).with_token(Some(&w.admin));
    let before: Vec<(u32, String, String)> = admin
        .hosts()
        .unwrap()
        .into_iter()
        .map(|h| (h.id, h.underlay, h.api))
        .collect();
    // Host 2 re-registering as host 1, with another underlay.
    let (code, text) = call(
        &w.base,
        Some(&w.h2),
        "POST",
        "/v1/hosts",
        &host(1, "10.255.0.66"),
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("host:2") && text.contains("register host 1"),
        "{text}"
    );
    // Nor may it register a new host id, or read host 1's configuration.
    assert_eq!(
        call(
            &w.base,
            Some(&w.h2),
            "POST",
            "/v1/hosts",
            &host(3, "10.255.0.3")
        )
        .0,
        403
    );
    for path in ["/v1/hosts/1/config", "/v1/hosts/1/fib"] {
        assert_eq!(call(&w.base, Some(&w.h2), "GET", path, "").0, 403, "{path}");
    }
    // Nor anything else an agent does not do.
    for (m, path, body) in [
        ("GET", "/v1/hosts", String::new()),
        ("GET", "/v1/tenants/acme", String::new()),
        ("PUT", "/v1/vms/acme/x", vm("acme", "x", 2, "10.1.0.7")),
        ("DELETE", "/v1/tenants/acme", String::new()),
    ] {
        assert_eq!(
            call(&w.base, Some(&w.h2), m, path, &body).0,
            403,
            "{m} {path}"
        );
    }
    let after: Vec<(u32, String, String)> = admin
        .hosts()
        .unwrap()
        .into_iter()
        .map(|h| (h.id, h.underlay, h.api))
        .collect();
    assert_eq!(before, after);
    // Its own: a heartbeat and its configuration.
    assert_eq!(
        call(
            &w.base,
            Some(&w.h1),
            "POST",
            "/v1/hosts",
            &host(1, "10.255.0.1")
        )
        .0,
        200
    );
    let (code, text) = call(&w.base, Some(&w.h1), "GET", "/v1/hosts/1/config", "");
    assert_eq!(code, 200, "{text}");
}

#[test]
fn read_only_reads_everything_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path());
    for &(m, tpl) in ROUTES {
        let path = concrete(tpl, "acme");
        let (code, text) = call(&w.base, Some(&w.reader), m, &path, "");
        if tpl == "/v1/tokens" || m != "GET" {
            assert_eq!(code, 403, "{m} {path} by read-only: {text}");
        } else {
            // Allowed (a chain without a scaler is a 404 of the object).
            assert!(
                code == 200 || (code == 404 && text.contains("no scaler")),
                "{m} {path} by read-only: {code} {text}"
            );
        }
    }
    let (code, text) = call(
        &w.base,
        Some(&w.reader),
        "PUT",
        "/v1/tenants/acme",
        &spec("acme", 1),
    );
    assert_eq!(code, 403);
    assert!(
        text.contains("read-only") && text.contains("PUT /v1/tenants/acme"),
        "{text}"
    );
}

#[test]
fn only_operators_manage_tokens_and_secrets_are_shown_once() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path());
    let admin = Client::new(&w.base).with_token(Some(&w.admin));
    for t in [&w.acme, &w.reader, &w.h1] {
        let c = Client::new(&w.base).with_token(Some(t));
        assert!(c.tokens().is_err());
        assert!(c.create_token("x", "operator").is_err());
        assert!(c.delete_token("admin").is_err());
    }
    let (code, list) = call(&w.base, Some(&w.admin), "GET", "/v1/tokens", "");
    assert_eq!(code, 200);
    assert!(
        !list.contains("sluice_") && !list.contains("hash"),
        "{list}"
    );
    let names: Vec<String> = admin
        .tokens()
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(
        names,
        ["acme-ci", "admin", "auditor", "bravo-ci", "host-1", "host-2"]
    );
    // Bad requests name the field; names are unique.
    let (code, text) = call(
        &w.base,
        Some(&w.admin),
        "POST",
        "/v1/tokens",
        "{\"name\":\"n\",\"role\":\"root\"}",
    );
    assert_eq!(code, 400);
    assert!(text.contains("role"), "{text}");
    let (code, text) = call(
        &w.base,
        Some(&w.admin),
        "POST",
        "/v1/tokens",
        "{\"name\":\"a b\",\"role\":\"operator\"}",
    );
    assert_eq!(code, 400);
    assert!(text.contains("name"), "{text}");
    assert!(admin
        .create_token("acme-ci", "read-only")
        .unwrap_err()
        .to_string()
        .contains("exists"));
    // A deleted token stops working at once; the last operator token stays.
    admin.delete_token("acme-ci").unwrap();
    assert_eq!(
        call(&w.base, Some(&w.acme), "GET", "/v1/tenants/acme", "").0,
        401
    );
    let e = admin.delete_token("admin").unwrap_err();
    assert!(e.to_string().contains("last operator"), "{e}");
    // The database holds no secret.
    let raw = std::fs::read(dir.path().join("c.db")).unwrap();
    for t in [&w.admin, &w.bravo, &w.h2] {
        assert!(!raw.windows(t.len()).any(|x| x == t.as_bytes()));
    }
}

#[test]
fn a_restart_keeps_the_tokens_and_does_not_rewrite_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(dir.path());
    let base = w.base.clone();
    let acme = w.acme.clone();
    drop(w);
    let token_file = dir.path().join("admin.token");
    let before = std::fs::read_to_string(&token_file).unwrap();
    let server = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: dir.path().join("c.db"),
        state_url: "local".into(),
        admin_token_file: Some(token_file.clone()),
        fabric_auth: true,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    assert_eq!(server.bootstrapped(), None);
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), before);
    assert_ne!(server.url(), base);
    let (code, text) = call(&server.url(), Some(&acme), "GET", "/v1/tenants/acme", "");
    assert_eq!(code, 200, "{text}");
}
