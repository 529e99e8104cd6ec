//! Structured logs for Sluice's daemons (`sluiced run | supervise | instance`
//! and `sluice controller`): [`init`] installs one `tracing` subscriber that
//! writes one line per event to stderr, with a timestamp, the level, the
//! event's fields and those of the spans it is in.
//!
//! Settings come from the environment, so that a daemon's children (the NF
//! instances an agent spawns, the agent a supervisor restarts) log the same
//! way without being told:
//!
//! - `RUST_LOG`: which events, in `tracing-subscriber`'s `EnvFilter` syntax
//!   (`warn`, `info,sluice_agent::io=debug`, ...); unset or empty: `info`.
//! - `SLUICE_LOG_FORMAT`: `human` (the default) or `json` (one object per
//!   line: `timestamp`, `level`, `target`, `fields`, `span`, `spans`).
//!
//! A value that cannot be used is not fatal: the default is used instead and
//! the first event logged says what was wrong.
//!
//! Records of the `log` crate (rustls, ureq) become events too, under the
//! same filter (their targets are their modules: `rustls::...`).

use std::fmt;
use std::io::IsTerminal;
use std::str::FromStr;
use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// The variable holding the filter (`tracing-subscriber`'s `EnvFilter` syntax).
pub const FILTER_ENV: &str = "RUST_LOG";
/// The variable choosing the format: `human` or `json`.
pub const FORMAT_ENV: &str = "SLUICE_LOG_FORMAT";
/// The filter when [`FILTER_ENV`] is unset, empty or unusable.
pub const DEFAULT_FILTER: &str = "info";

/// How each event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// One line of text: timestamp, level, spans, target, message, `key=value` fields.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Format, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "human" | "text" => Ok(Format::Human),
            "json" => Ok(Format::Json),
            other => Err(format!(
                "unknown log format `{other}` (expected `human` or `json`)"
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Human => "human",
            Format::Json => "json",
        })
    }
}

/// What [`resolve`] made of the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The format to write.
    pub format: Format,
    /// The filter directives to apply (valid).
    pub filter: String,
    /// What could not be used, and what is used instead (logged as warnings
    /// once the subscriber is installed).
    pub problems: Vec<String>,
}

/// The settings for the values of [`FILTER_ENV`] and [`FORMAT_ENV`] (`None`:
/// unset). Pure, so that the fallbacks are testable without a process.
pub fn resolve(filter: Option<&str>, format: Option<&str>) -> Settings {
    let mut problems = Vec::new();
    let format = match format.map(str::trim).filter(|f| !f.is_empty()) {
        None => Format::Human,
        Some(f) => f.parse().unwrap_or_else(|e| {
            problems.push(format!("{FORMAT_ENV}: {e}; writing `human`"));
            Format::Human
        }),
    };
    let filter = match filter.map(str::trim).filter(|f| !f.is_empty()) {
        None => DEFAULT_FILTER.to_string(),
        Some(f) => match EnvFilter::builder().parse(f) {
            Ok(_) => f.to_string(),
            Err(e) => {
                problems.push(format!(
                    "{FILTER_ENV}: cannot use `{f}` ({e}); filtering with `{DEFAULT_FILTER}`"
                ));
                DEFAULT_FILTER.to_string()
            }
        },
    };
    Settings {
        format,
        filter,
        problems,
    }
}

static INSTALLED: OnceLock<Format> = OnceLock::new();

/// Installs the process's subscriber from `RUST_LOG` and `SLUICE_LOG_FORMAT`
/// (see the crate's documentation), writing to stderr. Call it once, first
/// thing in `main`; later calls (and calls in a process where another
/// subscriber is installed, as in tests) do nothing. Returns the format in
/// use.
pub fn init() -> Format {
    let s = resolve(
        std::env::var(FILTER_ENV).ok().as_deref(),
        std::env::var(FORMAT_ENV).ok().as_deref(),
    );
    *INSTALLED.get_or_init(|| install(&s))
}

fn install(s: &Settings) -> Format {
    // `resolve` checked the directives; the default parses.
    let filter = EnvFilter::builder()
        .parse(&s.filter)
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let installed = match s.format {
        Format::Human => tracing_subscriber::registry()
            .with(filter)
            .with(fmt.with_ansi(std::io::stderr().is_terminal()))
            .try_init(),
        Format::Json => tracing_subscriber::registry()
            .with(filter)
            .with(
                fmt.json()
                    .with_ansi(false)
                    .with_current_span(true)
                    .with_span_list(true),
            )
            .try_init(),
    };
    if installed.is_ok() {
        for p in &s.problems {
            tracing::warn!("{p}");
        }
    }
    s.format
}

/// `f` made to run in the span current where this is called: a thread
/// spawned with it logs in its parent's context (`tracing` spans do not
/// follow threads by themselves). The span is entered once, when the thread
/// starts, not per event.
pub fn in_current_span<T>(f: impl FnOnce() -> T) -> impl FnOnce() -> T {
    let span = tracing::Span::current();
    move || span.in_scope(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_means_info_and_human() {
        for (filter, format) in [(None, None), (Some(""), Some(" "))] {
            let s = resolve(filter, format);
            assert_eq!(s.format, Format::Human);
            assert_eq!(s.filter, "info");
            assert!(s.problems.is_empty(), "{:?}", s.problems);
        }
    }

    #[test]
    fn valid_values_are_used_as_given() {
        let s = resolve(Some("warn,sluice_agent::io=debug"), Some("JSON"));
        assert_eq!(s.format, Format::Json);
        assert_eq!(s.filter, "warn,sluice_agent::io=debug");
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert_eq!(resolve(None, Some("human")).format, Format::Human);
    }

    #[test]
    fn unusable_values_fall_back_and_say_what_was_wrong() {
        let s = resolve(Some("sluice_agent=loud"), Some("xml"));
        assert_eq!(s.format, Format::Human);
        assert_eq!(s.filter, "info");
        assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
        assert!(
            s.problems[0].contains("SLUICE_LOG_FORMAT") && s.problems[0].contains("`xml`"),
            "{:?}",
            s.problems
        );
        assert!(
            s.problems[1].contains("RUST_LOG") && s.problems[1].contains("sluice_agent=loud"),
            "{:?}",
            s.problems
        );
    }

    #[test]
    fn formats_print_as_they_parse() {
        for f in [Format::Human, Format::Json] {
            assert_eq!(f.to_string().parse::<Format>(), Ok(f));
        }
    }
}
