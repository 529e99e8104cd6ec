//! The dashboard in a real browser: headless Chromium (Debian's `chromium`),
//! driven over WebDriver by `chromedriver` (`chromium-driver`), against the
//! Figure 4 tenant on a three-host namespace testbed carrying traffic. The
//! test asserts on the page's DOM: the hosts alive and in sync, the store
//! serving, the chains' packet rates while downloads run, the tenant's chain
//! graph with its middleboxes and instance counts, the IPS's alert exactly
//! once, the failover of a killed instance; and that a tenant's token shows
//! that tenant alone. It saves two screenshots (in docs/img/ with
//! `SLUICE_UPDATE_SCREENSHOTS=1`, else under the target directory). Needs root and
//! what e2e.rs needs, plus chromium and chromium-driver (scripts/common.sh
//! installs them); says it skipped, and why, only if those are absent.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_testbed::lab::Lab;

mod common;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// W3C WebDriver's key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn note(line: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-notes");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("dashboard.txt"), format!("{line}\n"));
    eprintln!("{line}");
}

/// A WebDriver session of headless Chromium, with its chromedriver; both
/// ended on drop (the driver was started in its own process group, which
/// the browser it starts inherits).
struct Browser {
    driver: Child,
    base: String,
    session: String,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium that accepts the
    /// certificate whose public key hashes to `spki` (base64 SHA-256), and
    /// nothing else untrusted. The flags keep Chromium from reaching for the
    /// network (no updates, sync, QUIC probes or first-run pages), which on
    /// a closed machine would stall it.
    fn start(spki: &str, profile: &Path) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let mut b = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while ureq::get(&format!("{}/status", b.base))
            .call()
            .ok()
            .and_then(|r| r.into_json::<Value>().ok())
            .is_none_or(|v| v["value"]["ready"] != true)
        {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let args = [
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--window-size=1400,1100".into(),
            format!("--user-data-dir={}", profile.display()),
            format!("--ignore-certificate-errors-spki-list={spki}"),
        ];
        let v = b.call(
            "POST",
            "/session",
            json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            }}}),
        );
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        b
    }

    /// A WebDriver command: its `value`; panics naming the command if it fails.
    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = if path == "/session" {
            format!("{}{path}", self.base)
        } else {
            format!("{}/session/{}{path}", self.base, self.session)
        };
        let req = ureq::request(method, &url).timeout(Duration::from_secs(60));
        let r = if method == "GET" {
            req.call()
        } else {
            req.send_json(body)
        };
        match r {
            Ok(r) => r.into_json::<Value>().expect("WebDriver JSON")["value"].take(),
            Err(ureq::Error::Status(code, r)) => {
                let mut s = String::new();
                let _ = r.into_reader().take(4096).read_to_string(&mut s);
                panic!("WebDriver {method} {path}: {code} {s}")
            }
            Err(e) => panic!("WebDriver {method} {path}: {e}"),
        }
    }

    fn open(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    /// Runs `script` (a function body) in the page: what it returns.
    fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
    }

    fn element(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        v[ELEMENT].as_str().expect("element id").to_string()
    }

    fn click(&self, css: &str) {
        let e = self.element(css);
        self.call("POST", &format!("/element/{e}/click"), json!({}));
    }

    fn type_into(&self, css: &str, text: &str) {
        let e = self.element(css);
        self.call(
            "POST",
            &format!("/element/{e}/value"),
            json!({ "text": text }),
        );
    }

    /// Signs in with `token` through the page's form.
    fn sign_in(&self, token: &str) {
        self.wait(
            "the sign-in form",
            "!document.getElementById('login').hidden",
        );
        self.type_into("#token", token);
        self.click("#login-button");
    }

    /// Waits (up to 60 s) until `expr` is true in the page; panics with what
    /// the page shows otherwise.
    fn wait(&self, what: &str, expr: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.js(&format!("return !!({expr});")) == true {
                return;
            }
            if Instant::now() > deadline {
                let page = self.js(
                    "return document.getElementById('status').textContent + ' | ' + \
                     document.getElementById('login-error').textContent + ' | ' + \
                     document.body.innerText.slice(0, 3000);",
                );
                panic!("the dashboard never showed {what} ({expr}); it shows: {page}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn screenshot(&self, to: &Path) {
        let v = self.call("GET", "/screenshot", Value::Null);
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .expect("a PNG");
        std::fs::write(to, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = ureq::delete(&format!("{}/session/{}", self.base, self.session))
                .timeout(Duration::from_secs(10))
                .call();
        }
        // The driver's group: the driver and any browser left behind.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
    }
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Base64 of the SHA-256 of the public key of the certificate in PEM file
/// `pem` (what `--ignore-certificate-errors-spki-list` takes).
fn spki_hash(pem: &Path) -> String {
    use base64::Engine;
    use sha2::Digest;
    let text = std::fs::read(pem).expect("the controller's certificate");
    let (_, p) = x509_parser::pem::parse_x509_pem(&text).expect("PEM");
    let cert = p.parse_x509().expect("a certificate");
    let spki = cert.public_key().raw;
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(spki))
}

/// Where the screenshots go: docs/img/ with `SLUICE_UPDATE_SCREENSHOTS=1`
/// (to refresh the documentation's), else the target directory, so that a
/// test run leaves the source tree as it was.
fn screenshots() -> PathBuf {
    if std::env::var_os("SLUICE_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1") {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/img"))
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard")
    }
}

/// Every line of every EVE file (`*.eve.json`, rotated ones included) under
/// `dir`.
fn eve_lines(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            eve_lines(&p, out);
        } else if p.to_string_lossy().contains(".eve.json") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            out.extend(text.lines().map(String::from));
        }
    }
}

/// A second tenant, so that a tenant's view has something to leave out: one
/// monitor between two external subnets, behind a gateway VM whose interface
/// does not exist (its agent keeps trying to open it; no traffic).
const OTHER: &str = "tenant: other
elements:
  outside: { type: external, subnets: [192.0.2.0/24] }
  beyond: { type: external, subnets: [198.18.0.0/24] }
  watch: { type: middlebox, function: monitor }
chains:
  - { name: in, path: [outside, watch, beyond] }
";

#[test]
fn the_dashboard_shows_the_deployment_live_in_a_real_browser() {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        note(&format!(
            "dashboard: SKIPPED, {CHROMIUM} or {CHROMEDRIVER} is missing \
             (apt-get install chromium chromium-driver; scripts/test.sh does)"
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::up(&common::lab_options(common::figure4_spec(), dir.path()))
        .unwrap_or_else(|e| panic!("testbed did not come up: {e}"));
    let st = lab.state().clone();
    let http = st.http();
    let api = |method: &str, path: &str, token: &str| {
        http.request(method, &format!("{}{path}", st.controller))
            .set("Authorization", &format!("Bearer {token}"))
    };
    let operator = st.token();
    api("PUT", "/v1/vms/other/gw", &operator)
        .send_json(
            json!({"tenant": "other", "name": "gw", "host": 1, "iface": "dash-none0",
            "mac": "02:00:00:00:77:01", "addr": "10.77.0.1", "gateway": true}),
        )
        .expect("register the second tenant's gateway");
    api("POST", "/v1/tenants", &operator)
        .set("Content-Type", "application/yaml")
        .send_string(OTHER)
        .unwrap_or_else(|e| match e {
            ureq::Error::Status(c, r) => panic!(
                "apply the second tenant: {c} {}",
                r.into_string().unwrap_or_default()
            ),
            e => panic!("apply the second tenant: {e}"),
        });
    let created: Value = api("POST", "/v1/tokens", &operator)
        .send_json(json!({"name": "acme-dashboard", "role": "tenant:acme"}))
        .expect("a tenant token")
        .into_json()
        .unwrap();
    let acme = created["token"].as_str().unwrap().to_string();
    // The API the page calls narrows a tenant's traffic to its own chains.
    let theirs: Vec<Value> = api("GET", "/v1/traffic", &acme)
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert!(
        theirs.len() == 3 && theirs.iter().all(|c| c["tenant"] == "acme"),
        "{theirs:?}"
    );

    // Downloads through east-to-a (fw, ips, lb-a, mirrored to mon) for as
    // long as the browser watches.
    let gw = st.vm("gateway").expect("the gateway VM").netns.clone();
    let _traffic = Killed(
        Command::new("ip")
            .args(["netns", "exec", &gw, "sh", "-c"])
            .arg(
                "while :; do curl -s -o /dev/null --max-time 10 --interface 198.51.100.10 \
                 http://10.10.1.100/blob; done",
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the downloads"),
    );
    // The IPS's signature, sent once.
    let blocked = sluice_testbed::scenario::curl(
        &lab,
        "gateway",
        Some("198.51.100.10"),
        "http://10.10.1.100/index.html?f=/etc/passwd",
        3,
    );
    assert!(blocked.is_none(), "the IPS let the signature through");

    let leaf = st.ca_file.with_file_name("controller.tls.pem");
    let profile = dir.path().join("chromium-profile");
    let b = Browser::start(&spki_hash(&leaf), &profile);
    let ui = format!("{}/ui/", st.controller);
    let started = Instant::now();
    b.open(&ui);
    b.sign_in(&operator);

    // The operator's view: every host alive and in sync, the store serving,
    // both tenants' instances, packets flowing through east-to-a.
    let q = |css: &str| format!("document.querySelectorAll('{css}')");
    b.wait(
        "three hosts alive and in sync",
        &format!(
            "{}.length === 3",
            q("#hosts tbody tr[data-alive=true][data-in-sync=true]")
        ),
    );
    b.wait(
        "the store serving",
        "document.getElementById('store').dataset.healthy === 'true'",
    );
    b.wait(
        "acme's six instances and other's one",
        &format!(
            "{}.length === 6 && {}.length === 1",
            q("#instances tbody tr[data-instance^=\"acme/\"]"),
            q("#instances tbody tr[data-instance^=\"other/\"]")
        ),
    );
    b.wait(
        "packets through east-to-a",
        &format!(
            "Number({}[0]?.dataset.pps) > 0",
            q("#chains tr[data-chain=\"acme/east-to-a\"]")
        ),
    );
    b.wait(
        "what east-to-a adds, measured end to end",
        &format!(
            "Number({}[0]?.dataset.p99) > 0",
            q("#chains tr[data-chain=\"acme/east-to-a\"] td.latency")
        ),
    );
    assert_eq!(
        b.js(&format!("return {}.length;", q("#chains tbody tr"))),
        4,
        "the operator sees every tenant's chains"
    );
    let pps = b
        .js(&format!(
            "return Number({}[0].dataset.pps);",
            q("#chains tr[data-chain=\"acme/east-to-a\"]")
        ))
        .as_f64()
        .unwrap_or_default();

    // Acme's view, as the operator opens it: the graph of each chain from
    // the spec, live rates on the middleboxes, the alert once.
    b.open(&format!("{ui}#/tenant/acme"));
    let hop = |chain: &str, name: &str| {
        format!(
            "document.querySelector('.graph[data-chain=\"{chain}\"] g.hop[data-name=\"{name}\"]')"
        )
    };
    b.wait(
        "east-to-a's graph",
        &format!("{} !== null", hop("east-to-a", "lb-a")),
    );
    let hops = b.js(
        "return [...document.querySelectorAll('.graph[data-chain=\"east-to-a\"] g.hop')]\
         .map(g => [g.dataset.name, g.dataset.kind, g.dataset.instances || null, \
         g.dataset.mirror || null]);",
    );
    assert_eq!(
        hops,
        json!([
            ["clients-east", "external", null, null],
            ["http", "select", null, null],
            ["fw", "middlebox", "2", null],
            ["ips", "middlebox", "1", null],
            ["lb-a", "middlebox", "1", null],
            ["web-a", "service", null, null],
            ["mon", "middlebox", "1", "true"]
        ]),
        "east-to-a drawn from the spec"
    );
    b.wait(
        "packets into the firewall",
        &format!("Number({}.dataset.rx) > 0", hop("east-to-a", "fw")),
    );
    b.wait(
        "the IPS's alert",
        &format!("{}.length >= 1", q("#alerts li[data-sid=\"1000001\"]")),
    );
    // A few more polls: anything reported twice would show by then.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        b.js(&format!(
            "return {}.length;",
            q("#alerts li[data-sid=\"1000001\"]")
        )),
        1,
        "the alert shows up exactly once"
    );
    assert_eq!(
        b.js(
            "return st.alerts.tenant === 'acme' && !st.alerts.polling && st.alerts.abort !== null;"
        ),
        true,
        "the alerts come from the controller's event stream"
    );
    // Once in `sluice alerts` too, and once in the EVE sink the instances
    // write (the files every agent serves from its run directory).
    let (code, out, err) = common::sluice_env(
        &["alerts", "--tenant", "acme", "-o", "json"],
        &[("SLUICE_CONFIG", st.config.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{err}");
    let sid = |line: &str| {
        serde_json::from_str::<Value>(line)
            .is_ok_and(|e| e["event_type"] == "alert" && e["alert"]["signature_id"] == 1_000_001)
    };
    assert_eq!(out.lines().filter(|l| sid(l)).count(), 1, "{out}");
    let mut sink = Vec::new();
    eve_lines(dir.path(), &mut sink);
    assert_eq!(
        sink.iter().filter(|l| sid(l)).count(),
        1,
        "the EVE files hold the alert once: {sink:?}"
    );

    // An instance of the firewall is killed: its failover shows.
    // Its pid as its agent reports it (the agent may be slow to answer: a
    // listing without it is asked again).
    let deadline = Instant::now() + Duration::from_secs(20);
    let victim = loop {
        let instances: Vec<Value> = api("GET", "/v1/instances", &operator)
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        let pid = instances
            .iter()
            .find(|i| i["name"] == "acme/fw/0")
            .and_then(|i| i["pid"].as_u64());
        match pid {
            Some(p) => break p,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            None => panic!("acme/fw/0 has no pid: {instances:?}"),
        }
    };
    let killed = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill {victim}");
    b.wait(
        "the failover of acme/fw/0",
        &format!(
            "{}.length >= 1",
            q("#history li[data-kind=failover][data-instance=\"acme/fw/0\"]")
        ),
    );
    let img = screenshots();
    std::fs::create_dir_all(&img).unwrap();
    b.screenshot(&img.join("dashboard-tenant.png"));
    // And in the operator's feed.
    b.open(&ui);
    b.wait(
        "the failover in the operator's events",
        &format!(
            "{}.length >= 1 && {}.length === 3",
            q("#events li[data-kind=failover][data-instance=\"acme/fw/0\"]"),
            q("#hosts tbody tr[data-alive=true]")
        ),
    );
    b.screenshot(&img.join("dashboard-operator.png"));

    // Acme's own token: acme's chains, nothing of the other tenant, even
    // when asked for it.
    b.click("#logout");
    b.sign_in(&acme);
    b.wait(
        "acme's view for acme's token",
        "document.getElementById('who').textContent === 'tenant acme' && \
         document.querySelectorAll('#graphs .graph').length === 3",
    );
    b.open(&format!("{ui}#/tenant/other"));
    b.wait(
        "acme's view again",
        "document.querySelectorAll('#graphs .graph').length === 3 && \
         document.getElementById('alerts').children.length > 0",
    );
    let text = b.js("return document.body.innerText;");
    let text = text.as_str().unwrap();
    assert!(
        !text.contains("Tenant other") && !text.contains("watch") && text.contains("east-to-a"),
        "a tenant's view shows its tenant alone: {text}"
    );
    assert!(
        b.js("return document.getElementById('hosts').tBodies[0].children.length;") == 0,
        "no hosts in a tenant's view"
    );
    note(&format!(
        "dashboard: checked in Chromium over WebDriver in {:.1} s (east-to-a at {pps:.0} packets/s); \
         screenshots in {}",
        started.elapsed().as_secs_f64(),
        img.display()
    ));
}
