//! Where the controller is and which API token to send: flags, then the
//! environment, then a kubectl-like config file of named contexts.
//!
//! ```yaml
//! current_context: testbed
//! contexts:
//!   - name: testbed
//!     controller: http://127.0.0.1:7420
//!     token_file: admin.token        # relative: to this file's directory
//!   - name: acme
//!     controller: https://sluice.example
//!     ca_file: /etc/sluice/ca.pem    # the controller's CA (its DB.ca.pem)
//!     token: sluice_...
//! ```
//!
//! The file is `$SLUICE_CONFIG`, else `~/.config/sluice/config`; `sluice config
//! view` shows it without secrets, `sluice config use-context NAME` switches.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The context used unless `--context` names another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    /// Named controllers and credentials.
    #[serde(default)]
    pub contexts: Vec<Context>,
}

/// A controller and the token to use with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    /// Its name.
    pub name: String,
    /// The controller's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    /// The token itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the token (relative: to the config file's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The CA certificate (PEM) an `https://` controller's certificate must
    /// chain to (relative: to the config file's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

fn bad(path: &Path, msg: impl Into<String>) -> CliError {
    CliError::Config {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

impl Config {
    /// Parses and checks a config file's text (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Config, CliError> {
        let c: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            yaml_serde::from_str(text).map_err(|e| bad(path, e.to_string()))?
        };
        for (i, ctx) in c.contexts.iter().enumerate() {
            let at = format!("contexts[{i}]");
            if ctx.name.is_empty() {
                return Err(bad(path, format!("{at}.name: must not be empty")));
            }
            if c.contexts[..i].iter().any(|o| o.name == ctx.name) {
                return Err(bad(
                    path,
                    format!("{at}.name: a context named `{}` comes before", ctx.name),
                ));
            }
            if ctx.token.is_some() && ctx.token_file.is_some() {
                return Err(bad(
                    path,
                    format!(
                        "{at} (`{}`): give `token` or `token_file`, not both",
                        ctx.name
                    ),
                ));
            }
        }
        if let Some(cur) = &c.current_context {
            if c.context(cur).is_none() {
                return Err(bad(
                    path,
                    format!("current_context: no context is named `{cur}`"),
                ));
            }
        }
        Ok(c)
    }

    /// The context called `name`.
    pub fn context(&self, name: &str) -> Option<&Context> {
        self.contexts.iter().find(|c| c.name == name)
    }
}

/// The config file's path, and whether it was named explicitly (then it must
/// exist).
fn config_path() -> Option<(PathBuf, bool)> {
    if let Some(p) = std::env::var_os("SLUICE_CONFIG").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(p), true));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some((PathBuf::from(home).join(".config/sluice/config"), false))
}

/// The config file (none: an empty config) and its path.
fn load() -> Result<(Config, Option<PathBuf>), CliError> {
    let Some((path, explicit)) = config_path() else {
        return Ok((Config::default(), None));
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((Config::parse(&text, &path)?, Some(path))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            Ok((Config::default(), Some(path)))
        }
        Err(e) => Err(bad(
            &path,
            format!(
                "{e}{}",
                if explicit {
                    " (named by $SLUICE_CONFIG)"
                } else {
                    ""
                }
            ),
        )),
    }
}

/// The config file's path for writing: `$SLUICE_CONFIG`, else
/// `~/.config/sluice/config` (created if missing).
fn write_path() -> Result<PathBuf, CliError> {
    config_path()
        .map(|(p, _)| p)
        .ok_or_else(|| CliError::flag("config", "no config file: set $SLUICE_CONFIG or $HOME"))
}

/// The config file at `path`; a missing file is an empty config.
fn read_or_empty(path: &Path) -> Result<Config, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Config::parse(&text, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
        Err(e) => Err(bad(path, e.to_string())),
    }
}

/// Writes `cfg` to `path`. An existing file is rewritten in place, so it keeps
/// its owner and mode; a new one (and its directory) is created readable by
/// its owner only, as it may come to hold tokens.
fn store(cfg: &Config, path: &Path) -> Result<(), CliError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let text = yaml_serde::to_string(cfg).map_err(|e| bad(path, e.to_string()))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(CliError::io(parent))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(CliError::io(path))?;
    f.write_all(text.as_bytes()).map_err(CliError::io(path))
}

/// Adds `ctx` to the config file at `path` (replacing a context of the same
/// name), and makes it the current context if `current`.
pub fn upsert_context_at(path: &Path, ctx: Context, current: bool) -> Result<(), CliError> {
    let mut cfg = read_or_empty(path)?;
    let name = ctx.name.clone();
    match cfg.contexts.iter_mut().find(|c| c.name == name) {
        Some(c) => *c = ctx,
        None => cfg.contexts.push(ctx),
    }
    if current {
        cfg.current_context = Some(name);
    }
    store(&cfg, path)
}

/// Removes the context `name` from the config file at `path` if `which`
/// accepts it (a context of that name pointing elsewhere stays); no longer
/// current if it was. Whether it removed one.
pub fn remove_context_at(
    path: &Path,
    name: &str,
    which: impl Fn(&Context) -> bool,
) -> Result<bool, CliError> {
    let mut cfg = read_or_empty(path)?;
    let before = cfg.contexts.len();
    cfg.contexts.retain(|c| c.name != name || !which(c));
    if cfg.contexts.len() == before {
        return Ok(false);
    }
    if cfg.current_context.as_deref() == Some(name) {
        cfg.current_context = None;
    }
    store(&cfg, path)?;
    Ok(true)
}

/// [`upsert_context_at`] on the CLI's config file; its path.
pub fn upsert_context(ctx: Context, current: bool) -> Result<PathBuf, CliError> {
    let path = write_path()?;
    upsert_context_at(&path, ctx, current)?;
    Ok(path)
}

/// [`remove_context_at`] on the CLI's config file; its path if it removed one.
pub fn remove_context(
    name: &str,
    which: impl Fn(&Context) -> bool,
) -> Result<Option<PathBuf>, CliError> {
    let path = write_path()?;
    Ok(remove_context_at(&path, name, which)?.then_some(path))
}

/// Reads a token file: its first line, trimmed; empty is an error.
pub fn read_token_file(path: &Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path).map_err(CliError::io(path))?;
    let t = text.lines().next().unwrap_or("").trim().to_string();
    if t.is_empty() {
        return Err(CliError::Config {
            path: path.to_path_buf(),
            msg: "the token file is empty".into(),
        });
    }
    Ok(t)
}

/// The controller URL and token a command uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The controller's URL.
    pub url: String,
    /// The token (None: send none; the controller will answer 401).
    pub token: Option<String>,
    /// The CA file to trust (None: the system's web roots, which do not know
    /// a controller's own CA).
    pub ca_file: Option<PathBuf>,
}

/// Default controller URL.
const DEFAULT_URL: &str = "http://127.0.0.1:7420";

/// Resolves the controller, token and CA file: `--controller`/`--token`/
/// `--ca-file`, else `$SLUICE_CONTROLLER`/`$SLUICE_TOKEN`/`$SLUICE_CA_FILE`,
/// else the context (`--context`, else the file's `current_context`), else
/// the default URL, no token and no CA file. The config file is read only
/// when a flag or variable leaves the URL or token open.
pub fn resolve(
    url: Option<&str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
    context: Option<&str>,
) -> Result<Target, CliError> {
    let env = |k: &str| std::env::var(k).ok().filter(|s| !s.is_empty());
    let mut url = url.map(str::to_string).or_else(|| env("SLUICE_CONTROLLER"));
    let mut token = token.map(str::to_string).or_else(|| env("SLUICE_TOKEN"));
    let mut ca_file = ca_file
        .map(Path::to_path_buf)
        .or_else(|| env("SLUICE_CA_FILE").map(PathBuf::from));
    if url.is_none() || token.is_none() || context.is_some() {
        let (cfg, path) = load()?;
        let path = path.unwrap_or_default();
        let name = context.map(str::to_string).or(cfg.current_context.clone());
        if let Some(name) = name {
            let ctx = cfg.context(&name).ok_or_else(|| {
                bad(
                    &path,
                    format!("--context: no context is named `{name}` in this file"),
                )
            })?;
            let dir = path.parent().unwrap_or(Path::new("."));
            // The context's CA belongs to the context's controller: not
            // taken for a URL given by a flag or the environment.
            if url.is_none() && ca_file.is_none() {
                ca_file = ctx.ca_file.as_ref().map(|f| dir.join(f));
            }
            url = url.or(ctx.controller.clone());
            if token.is_none() {
                token = match (&ctx.token, &ctx.token_file) {
                    (Some(t), _) => Some(t.clone()),
                    (None, Some(f)) => {
                        let f = path.parent().unwrap_or(Path::new(".")).join(f);
                        Some(read_token_file(&f).map_err(|e| {
                            bad(&path, format!("context `{name}`: token_file: {e}"))
                        })?)
                    }
                    (None, None) => None,
                };
            }
        }
    }
    Ok(Target {
        url: url.unwrap_or_else(|| DEFAULT_URL.into()),
        token,
        ca_file,
    })
}

/// `sluice config`.
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Show the config file, tokens redacted.
    View,
    /// Make NAME the current context.
    UseContext {
        /// A context of the file.
        name: String,
    },
}

/// `sluice config ...`.
#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    what: ConfigCmd,
}

/// The config without secrets: tokens become `<redacted>`.
pub fn redacted(c: &Config) -> Config {
    let mut c = c.clone();
    for ctx in &mut c.contexts {
        if ctx.token.is_some() {
            ctx.token = Some("<redacted>".into());
        }
    }
    c
}

/// `sluice config view | use-context`.
pub fn run(a: &ConfigArgs) -> Result<(), CliError> {
    let (mut cfg, path) = load()?;
    let Some(path) = path else {
        return Err(CliError::flag(
            "config",
            "no config file: set $SLUICE_CONFIG or $HOME",
        ));
    };
    match &a.what {
        ConfigCmd::View => {
            outln!("# {}", path.display())?;
            let text =
                yaml_serde::to_string(&redacted(&cfg)).map_err(|e| bad(&path, e.to_string()))?;
            crate::output::text(&text)?;
        }
        ConfigCmd::UseContext { name } => {
            if cfg.context(name).is_none() {
                let known: Vec<&str> = cfg.contexts.iter().map(|c| c.name.as_str()).collect();
                return Err(bad(
                    &path,
                    format!(
                        "no context is named `{name}` (contexts: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
            cfg.current_context = Some(name.clone());
            let text = yaml_serde::to_string(&cfg).map_err(|e| bad(&path, e.to_string()))?;
            // Rewritten in place: the file keeps its owner and mode (it may
            // hold tokens).
            std::fs::write(&path, text).map_err(CliError::io(&path))?;
            outln!("current context: {name}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configs_name_the_file_and_the_field() {
        let p = Path::new("/etc/sluice.yaml");
        let cases = [
            ("contexts: [{name: a}, {name: a}]", "contexts[1].name"),
            ("contexts: [{name: a, token: x, token_file: f}]", "not both"),
            (
                "current_context: b\ncontexts: [{name: a}]",
                "current_context",
            ),
            ("contexts: [{name: a, tokn: x}]", "tokn"),
            ("contexts: [{name: ''}]", "contexts[0].name"),
        ];
        for (text, want) in cases {
            let e = Config::parse(text, p).unwrap_err().to_string();
            assert!(e.starts_with("/etc/sluice.yaml"), "{e}");
            assert!(e.contains(want), "{text}: {e}");
        }
        let c = Config::parse(
            "current_context: b\ncontexts: [{name: a, token: s}, {name: b, token_file: t}]",
            p,
        )
        .unwrap();
        assert_eq!(c.context("b").unwrap().token_file, Some(PathBuf::from("t")));
        assert_eq!(Config::parse("", p).unwrap(), Config::default());
    }

    #[test]
    fn contexts_are_added_made_current_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // A new file in a new directory: created private.
        let path = dir.path().join("sluice/config");
        let tb = |url: &str| Context {
            name: "testbed".into(),
            controller: Some(url.into()),
            token_file: Some("/tmp/tb/admin.token".into()),
            token: None,
            ca_file: Some("/tmp/tb/controller.ca.pem".into()),
        };
        upsert_context_at(&path, tb("http://10.0.0.1:7420"), true).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let other = Context {
            name: "prod".into(),
            controller: Some("https://sluice.example".into()),
            ..Context::default()
        };
        upsert_context_at(&path, other.clone(), false).unwrap();
        // Replaced, not duplicated; current stays.
        upsert_context_at(&path, tb("http://10.0.0.2:7420"), true).unwrap();
        let c = read_or_empty(&path).unwrap();
        assert_eq!(c.current_context.as_deref(), Some("testbed"));
        assert_eq!(c.contexts, vec![tb("http://10.0.0.2:7420"), other.clone()]);
        // Another testbed's context of the same name stays.
        let mine = |c: &Context| c.token_file.as_deref() == Some(Path::new("/elsewhere"));
        assert!(!remove_context_at(&path, "testbed", mine).unwrap());
        assert_eq!(read_or_empty(&path).unwrap().contexts.len(), 2);
        assert!(remove_context_at(&path, "testbed", |_| true).unwrap());
        let c = read_or_empty(&path).unwrap();
        assert_eq!(c.current_context, None);
        assert_eq!(c.contexts, vec![other]);
    }

    #[test]
    fn views_never_show_a_token() {
        let c = Config::parse(
            "contexts: [{name: a, token: sluice_secret}]",
            Path::new("c"),
        )
        .unwrap();
        let text = yaml_serde::to_string(&redacted(&c)).unwrap();
        assert!(
            !text.contains("sluice_secret") && text.contains("<redacted>"),
            "{text}"
        );
    }
}
