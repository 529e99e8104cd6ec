//! `sluice ips check RULEFILE...`: which rules of a rule set the IPS loads, and
//! why it skips the others.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;
use sluice_ips::rules::{self, RuleError, Vars};

use crate::error::CliError;

/// `sluice ips ...`.
#[derive(Subcommand, Debug)]
pub enum IpsCmd {
    /// Load rule files as the IPS would and count the rules loaded and skipped,
    /// by reason (keyword, protocol, ...). Exits 0 when the files were read, even
    /// with skipped rules; a file in which no rule parses is an error.
    Check(CheckArgs),
    /// Run Suricata's verification tests (suricata-verify's format: a
    /// directory per test with `test.yaml`, one `.rules` file and one
    /// capture) through the IPS and evaluate their EVE `filter` checks;
    /// tests needing what Sluice does not claim (other event types, shell
    /// checks, rules that do not load, ...) are skipped with the reason.
    /// Exits 1 when a test fails.
    Verify(crate::ips_verify::VerifyArgs),
}

/// `sluice ips check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Rule files (Suricata syntax).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Set a variable, e.g. `--var HOME_NET=[10.0.0.0/8]` (repeatable). Suricata's
    /// default `suricata.yaml` values are preset.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also list every skipped rule as `file:line: problem`.
    #[arg(long)]
    pub list: bool,
}

/// What `sluice ips check` found.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Report {
    /// Files read.
    pub files: usize,
    /// Rules found (loaded + skipped).
    pub total: usize,
    /// Rules the IPS loads.
    pub loaded: usize,
    /// Rules skipped.
    pub skipped: usize,
    /// Skipped rules by reason, most frequent first.
    pub by_reason: Vec<Reason>,
    /// The engine the IPS's literal searches run on in this build and
    /// environment: `vectorscan` or `hashed` (docs/FUNCTIONS.md, "Vectorscan").
    pub search: &'static str,
}

/// One reason with its count.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Reason {
    /// E.g. `keyword pcre`, `protocol http`, `error: bad value`.
    pub reason: String,
    /// Rules skipped for it.
    pub count: usize,
}

/// `sluice ips ...`.
pub fn run(cmd: IpsCmd) -> Result<(), CliError> {
    match cmd {
        IpsCmd::Check(a) => check(&a),
        IpsCmd::Verify(a) => crate::ips_verify::verify(&a),
    }
}

fn check(a: &CheckArgs) -> Result<(), CliError> {
    let mut vars: Vars = rules::suricata_default_vars();
    for v in &a.vars {
        let (k, val) = v
            .split_once('=')
            .ok_or_else(|| CliError::flag("var", format!("{v:?} is not NAME=VALUE")))?;
        vars.insert(
            k.trim().trim_start_matches('$').to_string(),
            val.to_string(),
        );
    }
    let mut loaded = Vec::new();
    let mut skipped: Vec<RuleError> = Vec::new();
    for f in &a.files {
        let text = std::fs::read_to_string(f).map_err(CliError::io(f))?;
        let name = f.display().to_string();
        let (r, w) = rules::parse_rules(&text, &name, &vars);
        if r.is_empty() && !w.is_empty() && !w.iter().any(|e| e.msg.is_unsupported()) {
            return Err(CliError::NoRuleParses {
                path: f.clone(),
                first: Box::new(w[0].clone()),
            });
        }
        loaded.extend(r);
        skipped.extend(w);
    }
    // Sids must be unique across files too, as the IPS requires.
    let mut seen = std::collections::HashSet::new();
    loaded.retain(|r| {
        if seen.insert(r.sid) {
            true
        } else {
            skipped.push(RuleError {
                file: r.file.to_string(),
                line: r.line,
                msg: rules::RuleSyntax::DuplicateSid(r.sid),
            });
            false
        }
    });
    let report = Report {
        files: a.files.len(),
        total: loaded.len() + skipped.len(),
        loaded: loaded.len(),
        skipped: skipped.len(),
        by_reason: rules::count_reasons(&skipped)
            .into_iter()
            .map(|(reason, count)| Reason { reason, count })
            .collect(),
        search: sluice_ips::search_engine(),
    };
    // The loaded rules must also compile into the automata the IPS runs.
    if !loaded.is_empty() {
        sluice_ips::engine::Engine::new(loaded).map_err(CliError::IpsCompile)?;
    }
    if a.json {
        let out = serde_json::to_string_pretty(&report).map_err(CliError::Answer)?;
        outln!("{out}")?;
    } else {
        crate::output::text(&table(&report))?;
    }
    if a.list {
        for e in &skipped {
            eprintln!("{e}");
        }
    }
    Ok(())
}

/// The report as a text table.
pub fn table(r: &Report) -> String {
    let pct = |n: usize| {
        if r.total == 0 {
            0.0
        } else {
            n as f64 * 100.0 / r.total as f64
        }
    };
    let mut s = format!(
        "files {}  rules {}  loaded {} ({:.1}%)  skipped {} ({:.1}%)\n",
        r.files,
        r.total,
        r.loaded,
        pct(r.loaded),
        r.skipped,
        pct(r.skipped)
    );
    s.push_str(&format!("literal search: {}\n", r.search));
    if !r.by_reason.is_empty() {
        s.push_str(&format!("{:>7}  {:>6}  skipped because\n", "rules", "%"));
        for x in &r.by_reason {
            s.push_str(&format!(
                "{:>7}  {:>5.1}%  {}\n",
                x.count,
                pct(x.count),
                x.reason
            ));
        }
    }
    s
}
