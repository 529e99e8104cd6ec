//! `sluice ips verify DIR...`: Suricata's verification tests run through
//! Sluice's IPS.
//!
//! The tests are in the format of OISF's suricata-verify: a directory per
//! test holding a `test.yaml`, one `.rules` file and one capture. Each test
//! runs the capture offline through a chain of one IPS loaded with the
//! test's rules (what `sluice run` does), and its `filter` checks are
//! counted over the EVE records the IPS wrote, with suricata-verify's
//! semantics (a dotted field path, `[N]` indexes, `has-key` and
//! `not-has-key`; the records matching every field are counted and the
//! count compared). A test is **skipped**, with the reason, when it asks
//! for what Sluice does not claim to do: rules that do not load, checks of
//! event types other than `alert` (Sluice's IPS writes alerts; HTTP, DNS,
//! file and stats records are Suricata's logging, not detection), shell or
//! stats checks, its own command, features, or arguments and settings that
//! change Suricata's behaviour in ways not modelled here. So the pass rate
//! is over the tests whose rules and checks fit, which is how issue 20
//! counts it, and every skip is reported.
//!
//! Deciding what to run and evaluating the checks are pure functions
//! ([`prepare`], [`count_matches`]) tested without files; the runner
//! around them reads the directories and runs the captures.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::CliError;
use crate::run::{self, RunArgs};

/// `sluice ips verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Test directories, or directories whose subdirectories are tests (as
    /// suricata-verify's `tests/`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Where each test's chain and EVE output are written (`OUT/<test>/`).
    #[arg(long, default_value = "out/ips-verify")]
    pub out: PathBuf,
    /// The Suricata version whose expected outputs apply: tests and filters
    /// gated to other versions (`min-version`, `lt-version`, `version`) are
    /// skipped. 8.0.0: Sluice's EVE follows Suricata 8's schema (its DNS
    /// objects are EVE DNS version 3).
    #[arg(long, default_value = "8.0.0")]
    pub as_version: String,
    /// Suricata's `classification.config`, as suricata-verify passes it
    /// (EVE `category` and `severity`); without it, the rule's classtype
    /// name.
    #[arg(long)]
    pub classification_file: Option<PathBuf>,
    /// Where the IPS keeps its per-flow state, as `sluice run --state`:
    /// `local`, `redis://HOST:PORT` or `redis-cluster://...` (the same
    /// tests, with every flow's state in the store).
    #[arg(long, default_value = "local")]
    pub state: String,
    /// Only tests whose directory name contains one of these (repeatable).
    #[arg(long = "filter", value_name = "PATTERN")]
    pub patterns: Vec<String>,
    /// Print JSON instead of a line per test.
    #[arg(long)]
    pub json: bool,
}

/// A Suricata version as tests write it: `6`, `6.0` or `6.0.4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    major: u32,
    minor: Option<u32>,
    patch: Option<u32>,
}

impl Version {
    /// Parses the leading `MAJOR[.MINOR[.PATCH]]` (`7.0.0-dev` is 7.0.0).
    pub fn parse(s: &str) -> Option<Version> {
        let mut parts = s.trim().split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten();
        let patch = parts.next().flatten();
        Some(Version {
            major,
            minor,
            patch,
        })
    }

    fn key(self) -> (u32, u32, u32) {
        (self.major, self.minor.unwrap_or(0), self.patch.unwrap_or(0))
    }

    /// `self >= other`, missing parts counting as 0.
    pub fn at_least(self, other: Version) -> bool {
        self.key() >= other.key()
    }

    /// suricata-verify's `version_equal`: the parts both give agree (`6`
    /// matches every 6.x.y).
    pub fn matches(self, other: Version) -> bool {
        self.major == other.major
            && (self.minor.is_none() || other.minor.is_none() || self.minor == other.minor)
            && (self.patch.is_none() || other.patch.is_none() || self.patch == other.patch)
    }
}

/// One `filter` check.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// How many records must match (`count`), or bounds (`lt`, `gt`).
    pub count: Bound,
    /// The fields every counted record has: `(path, expected)`, where the
    /// path `has-key` / `not-has-key` name a path that must (not) exist.
    pub fields: Vec<(String, Value)>,
    /// The check's comment, quoted in a failure.
    pub comment: Option<String>,
}

/// A filter's expected count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Exactly.
    Exactly(u64),
    /// Fewer than.
    Below(u64),
    /// More than.
    Above(u64),
}

impl Bound {
    fn holds(self, n: u64) -> bool {
        match self {
            Bound::Exactly(c) => n == c,
            Bound::Below(c) => n < c,
            Bound::Above(c) => n > c,
        }
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Exactly(c) => write!(f, "{c}"),
            Bound::Below(c) => write!(f, "fewer than {c}"),
            Bound::Above(c) => write!(f, "more than {c}"),
        }
    }
}

/// What a test needs run, once [`prepare`] found nothing to skip it for.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The capture, relative to the test's directory.
    pub pcap: String,
    /// The rule file, relative to the test's directory.
    pub rules: String,
    /// `stream.midstream`.
    pub midstream: bool,
    /// `verify_checksums` for the chain (`-k none` is `none`; otherwise
    /// `auto`, what `sluice run` and Suricata's pcap mode do).
    pub checksums: &'static str,
    /// The checks that apply at the version verified against.
    pub filters: Vec<Filter>,
    /// Suricata runs inline (`--simulate-ips`, or `ips` in the test's name);
    /// otherwise it is an IDS, where a `drop` rule only alerts (`allowed`)
    /// and the flow goes on being inspected: the rules run with `drop`
    /// read as `alert` ([`as_ids`]).
    pub inline: bool,
    /// The checks not evaluated, each as what it checks (`http records`,
    /// `shell`): Suricata's logging beyond alerts, which Sluice does not
    /// write.
    pub unchecked: Vec<String>,
}

/// Features of a Suricata build that Sluice's IPS has: EVE JSON output
/// (`HAVE_LIBJANSSON` in Suricata 4 and 5) and `pcre` (`HAVE_PCRE2`).
const FEATURES: &[&str] = &["HAVE_LIBJANSSON", "HAVE_PCRE2", "RUST"];

/// Event types Sluice's IPS writes.
const WRITTEN: &[&str] = &["alert"];

/// Decides whether a test fits and what to run: `yaml` is its `test.yaml`
/// (`Value::Null` when it has none), `files` the names in its directory,
/// `version` the Suricata version verified against. `Err` is the reason it
/// is skipped.
pub fn prepare(
    name: &str,
    yaml: &Value,
    files: &[String],
    version: Version,
) -> Result<Plan, String> {
    let get = |k: &str| yaml.get(k);
    if get("command").is_some() {
        return Err("runs its own command".into());
    }
    if let Some(code) = get("exit-code").and_then(Value::as_i64) {
        if code != 0 {
            return Err(format!("expects Suricata to exit with {code}"));
        }
    }
    if let Some(req) = get("requires").and_then(Value::as_object) {
        for (k, v) in req {
            match k.as_str() {
                "min-version" => {
                    let want = version_of(v)?;
                    if !version.at_least(want) {
                        return Err(format!("requires at least Suricata {}", text(v)));
                    }
                }
                "lt-version" => {
                    let want = version_of(v)?;
                    if version.at_least(want) {
                        return Err(format!("requires Suricata before {}", text(v)));
                    }
                }
                "version" => {
                    if !version.matches(version_of(v)?) {
                        return Err(format!("only for Suricata {}", text(v)));
                    }
                }
                "pcap" => {}
                "features" => {
                    let missing: Vec<String> = v
                        .as_array()
                        .map(|a| a.iter().map(text).collect())
                        .unwrap_or_else(|| vec![text(v)])
                        .into_iter()
                        .filter(|f| !FEATURES.contains(&f.as_str()))
                        .collect();
                    if !missing.is_empty() {
                        return Err(format!("requires features {}", missing.join(", ")));
                    }
                }
                "env" | "files" | "script" | "config" | "keyword" => {
                    return Err(format!("requires {k} {}", text(v)));
                }
                other => return Err(format!("unknown requirement `{other}`")),
            }
        }
    }
    if let Some(skips) = get("skip").and_then(Value::as_array) {
        for s in skips {
            if s.get("uid").and_then(Value::as_u64) == Some(u64::from(current_uid())) {
                return Err("not for this user id".into());
            }
        }
    }
    // Arguments: the ones that only choose how Suricata runs are ignored;
    // ones that change what it detects are modelled or skip the test.
    let mut midstream = false;
    let mut checksums = "auto";
    // suricata-verify runs a test inline (`--simulate-ips`) when its name
    // says `ips`; otherwise Suricata is an IDS.
    let mut simulate_ips = name.contains("ips");
    let mut sets: Vec<String> = Vec::new();
    if let Some(args) = get("args").and_then(Value::as_array) {
        let words: Vec<String> = args
            .iter()
            .flat_map(|a| {
                text(a)
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut it = words.into_iter();
        while let Some(w) = it.next() {
            match w.as_str() {
                "-k" => match it.next().as_deref() {
                    Some("none") => checksums = "none",
                    Some("all") => checksums = "all",
                    Some("auto") => checksums = "auto",
                    other => return Err(format!("argument -k {}", other.unwrap_or(""))),
                },
                "--set" => sets.push(it.next().unwrap_or_default()),
                "--simulate-ips" => simulate_ips = true,
                "-v" | "-vv" | "-vvv" | "-vvvv" => {}
                // Where Suricata writes dataset `state`/`save` files: Sluice
                // reads them from the test's own output directory. Sluice's
                // inspection sizes are not randomised.
                "--no-random" => {}
                "--data-dir" => {
                    it.next();
                }
                w if w.starts_with("--data-dir=") => {}
                "--runmode" => {
                    it.next();
                }
                w if w.starts_with("--runmode=") => {}
                w if w.starts_with("--set=") => sets.push(w["--set=".len()..].to_string()),
                other => return Err(format!("argument {other}")),
            }
        }
    }
    for s in sets {
        let (k, v) = s.split_once('=').unwrap_or((s.as_str(), ""));
        match (k, v) {
            ("stream.midstream", "true" | "yes") => midstream = true,
            ("stream.midstream", "false" | "no") => midstream = false,
            ("stream.checksum-validation" | "pcap-file.checksum-checks", "no" | "false") => {
                checksums = "none"
            }
            // Where EVE and logs go, and what else is logged: not detection.
            (k, _)
                if k.starts_with("outputs.")
                    || k.starts_with("logging.")
                    || k.starts_with("stats.")
                    || k == "default-log-dir"
                    || k == "runmode"
                    || k == "classification-file"
                    || k == "reference-config-file" => {}
            _ => return Err(format!("setting {s}")),
        }
    }
    let pcaps: Vec<&String> = files
        .iter()
        .filter(|f| f.ends_with(".pcap") || f.ends_with(".pcapng"))
        .collect();
    let pcap = match get("pcap") {
        Some(p) => text(p),
        None => match pcaps.as_slice() {
            [one] => (*one).clone(),
            [] => return Err("no capture".into()),
            _ => return Err(format!("{} captures (one expected)", pcaps.len())),
        },
    };
    let rules: Vec<&String> = files.iter().filter(|f| f.ends_with(".rules")).collect();
    let rules = match rules.as_slice() {
        [one] => (*one).clone(),
        [] => return Err("no rules (detection disabled)".into()),
        _ => return Err(format!("{} rule files (one expected)", rules.len())),
    };
    let mut filters = Vec::new();
    let mut unchecked = Vec::new();
    if let Some(checks) = get("checks").and_then(Value::as_array) {
        for c in checks {
            let Some(obj) = c.as_object() else {
                return Err("a check is not a mapping".into());
            };
            for (kind, body) in obj {
                if kind != "filter" {
                    unchecked.push(kind.clone());
                    continue;
                }
                match filter(body, version) {
                    Checked::Applies(f) => filters.push(f),
                    Checked::OtherVersion => {}
                    Checked::Not(what) => unchecked.push(what),
                }
            }
        }
    }
    if files.iter().any(|f| f == "check.sh") {
        unchecked.push("check.sh".into());
    }
    if filters.is_empty() {
        return Err(match unchecked.first() {
            Some(_) => format!("checks only {}", summarise(&unchecked)),
            None => "no check applies".into(),
        });
    }
    Ok(Plan {
        inline: simulate_ips,
        pcap,
        rules,
        midstream,
        checksums,
        filters,
        unchecked,
    })
}

/// `["http records", "http records", "shell"]` as `2 http records, 1 shell`,
/// most frequent first.
pub fn summarise(what: &[String]) -> String {
    let mut n: std::collections::BTreeMap<&str, usize> = Default::default();
    for w in what {
        *n.entry(w.as_str()).or_default() += 1;
    }
    let mut v: Vec<(&str, usize)> = n.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(w, c)| format!("{c} {w}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What [`filter`] made of a `filter` check.
#[derive(Debug, PartialEq)]
enum Checked {
    /// Evaluated.
    Applies(Filter),
    /// Gated to another Suricata version.
    OtherVersion,
    /// Not evaluated: what it checks.
    Not(String),
}

/// Rules as an IDS runs them: a rule whose action is `drop` alerts instead
/// (Suricata in IDS mode logs it `allowed` and blocks nothing).
pub fn as_ids(rules: &str) -> String {
    let mut out = String::with_capacity(rules.len());
    for line in rules.split_inclusive('\n') {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        match body.strip_prefix("drop") {
            Some(rest) if rest.starts_with([' ', '\t']) => {
                out.push_str(indent);
                out.push_str("alert");
                out.push_str(rest);
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// One `filter` check: evaluated, gated to another version, or not
/// evaluated because it is about records Sluice does not write.
fn filter(body: &Value, version: Version) -> Checked {
    if let Some(f) = body.get("filename") {
        if text(f) != "eve.json" {
            return Checked::Not(text(f));
        }
    }
    for (key, newer) in [("min-version", true), ("lt-version", false)] {
        if let Some(v) = body.get(key) {
            match Version::parse(&text(v)) {
                Some(want) if version.at_least(want) != newer => return Checked::OtherVersion,
                Some(_) => {}
                None => return Checked::Not(format!("filters gated to version `{}`", text(v))),
            }
        }
    }
    if let Some(v) = body.get("version") {
        match Version::parse(&text(v)) {
            Some(want) if !version.matches(want) => return Checked::OtherVersion,
            Some(_) => {}
            None => return Checked::Not(format!("filters gated to version `{}`", text(v))),
        }
    }
    let count = if let Some(c) = body.get("count").and_then(Value::as_u64) {
        Bound::Exactly(c)
    } else if let Some(c) = body.get("lt").and_then(Value::as_u64) {
        Bound::Below(c)
    } else if let Some(c) = body.get("gt").and_then(Value::as_u64) {
        Bound::Above(c)
    } else {
        return Checked::Not("filters without a count".into());
    };
    let Some(m) = body.get("match").and_then(Value::as_object) else {
        return Checked::Not("filters without a match".into());
    };
    let mut fields = Vec::new();
    let mut event_type = None;
    for (k, v) in m {
        if k == "event_type" {
            event_type = Some(text(v));
        }
        if !["has-key", "not-has-key"].contains(&k.as_str()) && k.contains("__") {
            return Checked::Not("filters with field operators".into());
        }
        fields.push((k.clone(), v.clone()));
    }
    // A filter naming no event type may still count records Sluice does
    // not write; one naming an alert field is about alerts.
    let about = event_type.unwrap_or_else(|| {
        if m.keys().any(|k| k.starts_with("alert.")) {
            "alert".into()
        } else {
            "(any)".into()
        }
    });
    if !WRITTEN.contains(&about.as_str()) {
        return Checked::Not(format!("{about} records"));
    }
    Checked::Applies(Filter {
        count,
        fields,
        comment: body.get("comment").map(text),
    })
}

fn version_of(v: &Value) -> Result<Version, String> {
    Version::parse(&text(v)).ok_or_else(|| format!("a version `{}` that does not parse", text(v)))
}

/// A scalar as text (YAML numbers such as `6.0` included).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(text).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The user this runs as (the owner of its own `/proc` entry).
fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// The value at a dotted path (`alert.signature_id`, `smtp.rcpt_to[0]`), as
/// suricata-verify's `find_value` finds it.
pub fn find_value<'a>(path: &str, mut v: &'a Value) -> Option<&'a Value> {
    for part in path.split('.') {
        let (name, index) = match part.strip_suffix(']').and_then(|p| p.rsplit_once('[')) {
            Some((n, i)) if i.chars().all(|c| c.is_ascii_digit()) && !i.is_empty() => {
                (n, Some(i.parse::<usize>().ok()?))
            }
            _ => (part, None),
        };
        v = v.as_object()?.get(name)?;
        if let Some(i) = index {
            v = v.as_array()?.get(i)?;
        }
    }
    Some(v)
}

/// Equality as Python compares parsed YAML and JSON: numbers by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| same(p, q)))
        }
        _ => a == b,
    }
}

/// How many of `records` match every field of `f`.
pub fn count_matches(f: &Filter, records: &[Value]) -> u64 {
    records
        .iter()
        .filter(|r| {
            f.fields.iter().all(|(k, want)| match k.as_str() {
                "has-key" => find_value(&text(want), r).is_some(),
                "not-has-key" => find_value(&text(want), r).is_none(),
                _ => find_value(k, r).is_some_and(|got| same(got, want)),
            })
        })
        .count() as u64
}

/// `Ok(())` when every filter holds over `records`, else the first that
/// does not, as suricata-verify words it.
pub fn check(filters: &[Filter], records: &[Value]) -> Result<(), String> {
    for f in filters {
        let n = count_matches(f, records);
        if !f.count.holds(n) {
            let fields: Vec<String> = f
                .fields
                .iter()
                .map(|(k, v)| format!("{k}: {}", text(v)))
                .collect();
            return Err(match &f.comment {
                Some(c) => format!("{c}: expected {}, got {n}", f.count),
                None => format!(
                    "expected {} matches; got {n} for {{{}}}",
                    f.count,
                    fields.join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// One test's result.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Outcome {
    /// The test's directory name.
    pub name: String,
    /// `pass`, `fail` or `skip`.
    pub result: &'static str,
    /// Why it failed or was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The checks of a test that ran but were not evaluated (records other
    /// than alerts, shell checks), e.g. `1 http records`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchecked: Option<String>,
}

/// What `sluice ips verify` found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Tests passed.
    pub passed: usize,
    /// Tests failed.
    pub failed: usize,
    /// Tests skipped.
    pub skipped: usize,
    /// Skip reasons by count, most frequent first (the reason's first words).
    pub skipped_by_reason: Vec<(String, usize)>,
    /// Every test.
    pub tests: Vec<Outcome>,
}

/// The test directories under `paths`: a directory holding a `test.yaml`
/// (or, in older tests, a capture) is a test; any other directory's
/// subdirectories are searched, as suricata-verify groups tests in
/// directories (`tests/alert-max/alert-max-15`), down to [`MAX_DEPTH`].
fn gather(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    let mut tests = Vec::new();
    for p in paths {
        if !p.is_dir() {
            return Err(CliError::Io {
                path: p.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    "not a directory (a test directory, or one holding test directories)",
                ),
            });
        }
        walk(p, 0, &mut tests)?;
    }
    Ok(tests)
}

/// How deep [`gather`] looks for tests.
pub const MAX_DEPTH: usize = 4;

fn walk(dir: &Path, depth: usize, tests: &mut Vec<PathBuf>) -> Result<(), CliError> {
    let mut subs = Vec::new();
    let mut capture = false;
    for e in std::fs::read_dir(dir).map_err(CliError::io(dir))?.flatten() {
        let path = e.path();
        let n = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            // A test's own output directory is not a test.
            if n != "output" {
                subs.push(path);
            }
        } else if n.ends_with(".pcap") || n.ends_with(".pcapng") {
            capture = true;
        }
    }
    if dir.join("test.yaml").is_file() || capture {
        tests.push(dir.to_path_buf());
        return Ok(());
    }
    if depth < MAX_DEPTH {
        subs.sort();
        for s in subs {
            walk(&s, depth + 1, tests)?;
        }
    }
    Ok(())
}

/// Reads a test's `test.yaml` (`Null` when there is none).
fn read_yaml(path: &Path) -> Result<Value, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => yaml_serde::from_str::<Value>(&t).map_err(|e| format!("test.yaml: {e}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Null),
        Err(e) => Err(format!("test.yaml: {e}")),
    }
}

/// The address and port groups of a test's own `suricata.yaml`, the only
/// part of it read here.
fn own_vars(dir: &Path) -> Result<serde_json::Map<String, Value>, String> {
    let path = dir.join("suricata.yaml");
    let Ok(t) = std::fs::read_to_string(&path) else {
        return Ok(serde_json::Map::new());
    };
    // Suricata's files start with a `%YAML 1.1` directive.
    let body: String = t
        .lines()
        .filter(|l| !l.starts_with('%'))
        .collect::<Vec<_>>()
        .join("\n");
    let y: Value = yaml_serde::from_str(&body).map_err(|e| format!("suricata.yaml: {e}"))?;
    let mut vars = serde_json::Map::new();
    for group in ["address-groups", "port-groups"] {
        if let Some(m) = y
            .get("vars")
            .and_then(|v| v.get(group))
            .and_then(Value::as_object)
        {
            for (k, v) in m {
                vars.insert(k.clone(), Value::String(text(v)));
            }
        }
    }
    Ok(vars)
}

/// Runs one test; `run` names this run of the command, so that tests whose
/// captures share flows keep their state apart in a shared store (a chain's
/// name is its state's namespace).
fn run_one(dir: &Path, a: &VerifyArgs, version: Version, run: &str) -> Outcome {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let mut unchecked = None;
    let result = (|| -> Result<Result<(), String>, String> {
        let yaml = read_yaml(&dir.join("test.yaml"))?;
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let plan = prepare(&name, &yaml, &files, version).map_err(|s| format!("skip:{s}"))?;
        if !plan.unchecked.is_empty() {
            unchecked = Some(summarise(&plan.unchecked));
        }
        let vars = own_vars(dir).map_err(|s| format!("skip:{s}"))?;
        // Every rule must load, or the checks would test a smaller rule set.
        let mut rules_path = dir.join(&plan.rules);
        let text = std::fs::read_to_string(&rules_path)
            .map_err(|e| format!("{}: {e}", rules_path.display()))?;
        let mut all_vars = sluice_ips::rules::suricata_default_vars();
        for (k, v) in &vars {
            all_vars.insert(k.clone(), self::text(v));
        }
        let (_, skipped) = sluice_ips::rules::parse_rules(&text, &plan.rules, &all_vars);
        if let Some(e) = skipped.first() {
            return Err(format!("skip:rules that do not load ({e})"));
        }
        let out = a.out.join(&name);
        std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        if !plan.inline {
            let ids = out.join("ids.rules");
            std::fs::write(&ids, as_ids(&text)).map_err(|e| format!("{}: {e}", ids.display()))?;
            rules_path = ids;
        }
        let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let mut ips = json!({
            "type": "ips",
            "rule_files": [abs(&rules_path).display().to_string()],
        });
        // Suricata's default variables with the test's own over them, as
        // suricata-verify runs a test with the default suricata.yaml: the
        // rules were checked with these, and run with them.
        ips["vars"] = Value::Object(
            all_vars
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        );
        if let Some(c) = &a.classification_file {
            ips["classification_file"] = json!(abs(c).display().to_string());
        }
        // Dataset files a rule loads are in the test's directory (the
        // rules Sluice runs may be a rewritten copy elsewhere); `state`
        // files start afresh in the output directory, as Suricata's run
        // with `--data-dir` does.
        ips["dataset_dirs"] = json!([abs(dir).display().to_string()]);
        ips["data_dir"] = json!(abs(&out).display().to_string());
        let chain = json!({
            "name": format!("verify-{run}-{name}"),
            "functions": [ips],
            // Suricata runs IP-level keywords (`fragbits`, ...) on each
            // fragment and the others on the datagram it reassembles, as
            // Sluice's reassembler does with `reassemble` (UDP fragments
            // are dropped by default, docs/FUNCTIONS.md).
            "reassembly": {
                "midstream": plan.midstream,
                "udp_fragments": "reassemble",
                "other_fragments": "reassemble",
            },
            "settings": { "verify_checksums": plan.checksums },
        });
        let chain_path = out.join("chain.yaml");
        let yaml_text = yaml_serde::to_string(&chain).map_err(|e| e.to_string())?;
        std::fs::write(&chain_path, yaml_text)
            .map_err(|e| format!("{}: {e}", chain_path.display()))?;
        let eve = out.join("eve.json");
        let args = RunArgs {
            chain: chain_path,
            pcap: dir.join(&plan.pcap),
            out: None,
            eve: Some(eve.clone()),
            state: a.state.clone(),
            json: false,
            unshared: false,
            own: false,
            pipeline: None,
        };
        let summary = run::run(&args).map_err(|e| e.to_string())?;
        if let Some(e) = summary.input_error {
            return Err(format!("{}: {e}", plan.pcap));
        }
        let records: Vec<Value> = std::fs::read_to_string(&eve)
            .map_err(|e| format!("{}: {e}", eve.display()))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| format!("eve.json: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(check(&plan.filters, &records))
    })();
    let outcome = |result, detail: Option<String>| Outcome {
        name: name.clone(),
        result,
        detail,
        unchecked: unchecked.clone(),
    };
    match result {
        Ok(Ok(())) => outcome("pass", None),
        Ok(Err(why)) => outcome("fail", Some(why)),
        Err(s) => match s.strip_prefix("skip:") {
            Some(reason) => outcome("skip", Some(reason.to_string())),
            None => outcome("fail", Some(s)),
        },
    }
}

/// A skip reason's kind, for the summary: up to its first parenthesis or
/// colon, without versions and numbers.
fn reason_kind(r: &str) -> String {
    let head = r.split(['(', ':']).next().unwrap_or(r).trim();
    head.split_whitespace()
        .filter(|w| !w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `sluice ips verify`.
pub fn verify(a: &VerifyArgs) -> Result<(), CliError> {
    let version = Version::parse(&a.as_version).ok_or_else(|| {
        CliError::flag("as-version", format!("{:?} is not a version", a.as_version))
    })?;
    let tests: Vec<PathBuf> = gather(&a.paths)?
        .into_iter()
        .filter(|t| {
            a.patterns.is_empty()
                || t.file_name().is_some_and(|n| {
                    a.patterns
                        .iter()
                        .any(|p| n.to_string_lossy().contains(p.as_str()))
                })
        })
        .collect();
    let mut outcomes = Vec::new();
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    for (i, t) in tests.iter().enumerate() {
        let o = run_one(t, a, version, &format!("{run}-{i}"));
        if !a.json {
            let mut line = format!("{} {}", o.result.to_uppercase(), o.name);
            if let Some(d) = &o.detail {
                line.push_str(&format!(": {d}"));
            }
            if let Some(u) = &o.unchecked {
                line.push_str(&format!(" (not evaluated: {u})"));
            }
            outln!("{line}")?;
        }
        outcomes.push(o);
    }
    let count = |r: &str| outcomes.iter().filter(|o| o.result == r).count();
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    for o in outcomes.iter().filter(|o| o.result == "skip") {
        *reasons
            .entry(reason_kind(o.detail.as_deref().unwrap_or("")))
            .or_default() += 1;
    }
    let mut by_reason: Vec<(String, usize)> = reasons.into_iter().collect();
    by_reason.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    let report = Report {
        passed: count("pass"),
        failed: count("fail"),
        skipped: count("skip"),
        skipped_by_reason: by_reason,
        tests: outcomes,
    };
    if a.json {
        let out = serde_json::to_string_pretty(&report).map_err(CliError::Answer)?;
        outln!("{out}")?;
    } else {
        let ran = report.passed + report.failed;
        outln!()?;
        outln!(
            "passed {}, failed {}, skipped {} (of {} tests); {:.1}% of the tests that ran passed",
            report.passed,
            report.failed,
            report.skipped,
            report.tests.len(),
            if ran == 0 {
                0.0
            } else {
                100.0 * report.passed as f64 / ran as f64
            }
        )?;
        for (r, n) in &report.skipped_by_reason {
            outln!("  skipped {n:>5}  {r}")?;
        }
    }
    if report.failed > 0 {
        return Err(CliError::VerifyFailed {
            failed: report.failed,
            ran: report.passed + report.failed,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn y(s: &str) -> Value {
        yaml_serde::from_str(s).unwrap()
    }

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    const V7: Version = Version {
        major: 7,
        minor: Some(0),
        patch: Some(0),
    };

    #[test]
    fn versions_compare_as_suricata_verify_does() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("7.0.0").at_least(v("6")));
        assert!(v("7.0.0").at_least(v("7")));
        assert!(!v("7.0.0").at_least(v("7.0.1")));
        assert!(v("7.0.3").matches(v("7")) && v("7.0.3").matches(v("7.0")));
        assert!(!v("7.0.3").matches(v("7.1")));
        assert_eq!(v("8.0.0-dev"), v("8.0.0"));
        assert_eq!(Version::parse("x"), None);
    }

    #[test]
    fn an_alert_test_is_planned_with_its_arguments() {
        let t = y("
requires:
  min-version: 6.0.0
args:
  - -k none
  - --set stream.midstream=true
  - --set stats.stream-events=true
checks:
  - filter:
      count: 2
      match:
        event_type: alert
        alert.signature_id: 1
  - filter:
      min-version: 8
      count: 9
      match: { event_type: alert }
");
        let p = prepare(
            "t",
            &t,
            &files(&["input.pcap", "test.rules", "test.yaml"]),
            V7,
        )
        .unwrap();
        assert_eq!(p.pcap, "input.pcap");
        assert_eq!(p.rules, "test.rules");
        assert!(p.midstream);
        assert_eq!(p.checksums, "none");
        assert_eq!(p.filters.len(), 1, "the 8.0 filter does not apply to 7.0");
        assert_eq!(p.filters[0].count, Bound::Exactly(2));
    }

    #[test]
    fn tests_outside_what_sluice_claims_are_skipped_with_the_reason() {
        let fs = files(&["input.pcap", "test.rules"]);
        let skip = |t: &str, fs: &[String]| prepare("t", &y(t), fs, V7).unwrap_err();
        let alert = "checks: [{filter: {count: 1, match: {event_type: alert}}}]";
        assert!(skip(&format!("requires: {{min-version: 8}}\n{alert}"), &fs).contains("at least"));
        assert!(skip(&format!("requires: {{lt-version: 7}}\n{alert}"), &fs).contains("before"));
        let lua = format!("requires: {{features: [HAVE_LIBJANSSON, HAVE_LUA]}}\n{alert}");
        assert_eq!(skip(&lua, &fs), "requires features HAVE_LUA");
        let other = "checks: [{filter: {count: 1, match: {event_type: http}}}, {shell: {args: x}}]";
        assert_eq!(skip(other, &fs), "checks only 1 http records, 1 shell");
        let http_off = format!("args: ['--set app-layer.protocols.http.enabled=no']\n{alert}");
        assert!(skip(&http_off, &fs).contains("setting app-layer"));
        assert!(skip(&format!("command: ./x.sh\n{alert}"), &fs).contains("own command"));
        assert!(skip(alert, &files(&["input.pcap"])).contains("no rules"));
        assert!(skip(alert, &files(&["a.pcap", "b.pcap", "t.rules"])).contains("2 captures"));
        assert!(skip("checks: []", &fs).contains("no check"));
        // Checks of other records are listed, not evaluated, when an alert
        // check remains; so is a check script.
        let mixed = "requires: {features: [HAVE_LIBJANSSON]}
checks:
  - filter: {count: 1, match: {event_type: alert}}
  - filter: {count: 1, match: {event_type: http}}
  - shell: {args: x}";
        let with_script = files(&["input.pcap", "test.rules", "check.sh"]);
        let p = prepare("t", &y(mixed), &with_script, V7).unwrap();
        assert_eq!(p.filters.len(), 1);
        assert_eq!(
            summarise(&p.unchecked),
            "1 check.sh, 1 http records, 1 shell"
        );
    }

    #[test]
    fn filters_count_like_suricata_verify() {
        let recs: Vec<Value> = [
            r#"{"event_type":"alert","alert":{"signature_id":1,"rev":2},"app_proto":"http","smtp":{"rcpt_to":["a","b"]}}"#,
            r#"{"event_type":"alert","alert":{"signature_id":1,"rev":2.0}}"#,
            r#"{"event_type":"alert","alert":{"signature_id":2}}"#,
        ]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
        let f = |yaml: &str| match filter(&y(yaml), V7) {
            Checked::Applies(f) => f,
            other => panic!("{other:?}"),
        };
        // Without an event type, Suricata's other records would count too.
        assert_eq!(
            filter(&y("{count: 1, match: {has-key: app_proto}}"), V7),
            Checked::Not("(any) records".into())
        );
        assert_eq!(
            filter(
                &y("{min-version: 8, count: 1, match: {event_type: alert}}"),
                V7
            ),
            Checked::OtherVersion
        );
        assert_eq!(
            filter(
                &y("{lt-version: 7, count: 1, match: {event_type: alert}}"),
                V7
            ),
            Checked::OtherVersion
        );
        let n = |yaml: &str| count_matches(&f(yaml), &recs);
        assert_eq!(
            n("{count: 0, match: {event_type: alert, alert.signature_id: 1}}"),
            2
        );
        assert_eq!(n("{count: 0, match: {alert.rev: 2}}"), 2, "2 == 2.0");
        assert_eq!(
            n("{count: 0, match: {event_type: alert, has-key: app_proto}}"),
            1
        );
        assert_eq!(
            n("{count: 0, match: {event_type: alert, not-has-key: app_proto}}"),
            2
        );
        assert_eq!(
            n(r#"{count: 0, match: {event_type: alert, "smtp.rcpt_to[1]": b}}"#),
            1
        );
        assert_eq!(
            n(r#"{count: 0, match: {event_type: alert, "smtp.rcpt_to[2]": b}}"#),
            0
        );
        assert!(check(&[f("{count: 2, match: {alert.signature_id: 1}}")], &recs).is_ok());
        let e = check(&[f("{count: 3, match: {alert.signature_id: 1}}")], &recs).unwrap_err();
        assert!(e.contains("expected 3 matches; got 2"), "{e}");
        let e = check(
            &[
                f("{count: 1, comment: two alerts, match: {alert.signature_id: 2}}"),
                f("{lt: 2, match: {alert.signature_id: 1}}"),
            ],
            &recs,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "expected fewer than 2 matches; got 2 for {alert.signature_id: 1}"
        );
        assert!(check(&[f("{gt: 1, match: {alert.signature_id: 1}}")], &recs).is_ok());
    }

    #[test]
    fn an_ids_reads_drop_as_alert() {
        let r = "drop tcp any any -> any any (msg:\"drop me\"; sid:1;)\n  drop\tudp any any -> any any (sid:2;)\n# drop tcp (sid:3;)\nalert tcp any any -> any any (msg:\"drop\"; sid:4;)\ndropped";
        assert_eq!(
            as_ids(r),
            "alert tcp any any -> any any (msg:\"drop me\"; sid:1;)\n  alert\tudp any any -> any any (sid:2;)\n# drop tcp (sid:3;)\nalert tcp any any -> any any (msg:\"drop\"; sid:4;)\ndropped"
        );
        let t = y("checks: [{filter: {count: 1, match: {event_type: alert}}}]");
        let fs = files(&["input.pcap", "test.rules"]);
        assert!(!prepare("drop-01", &t, &fs, V7).unwrap().inline);
        assert!(prepare("drop-ips-01", &t, &fs, V7).unwrap().inline);
        let sim = y(
            "args: [--simulate-ips]\nchecks: [{filter: {count: 1, match: {event_type: alert}}}]",
        );
        assert!(prepare("drop-01", &sim, &fs, V7).unwrap().inline);
    }

    #[test]
    fn skip_reasons_are_grouped_by_kind() {
        assert_eq!(
            reason_kind("requires at least Suricata 8"),
            "requires at least Suricata"
        );
        assert_eq!(
            reason_kind("rules that do not load (test.rules:3: unsupported keyword \"lua\")"),
            "rules that do not load"
        );
        assert_eq!(reason_kind("checks http records"), "checks http records");
    }
}
