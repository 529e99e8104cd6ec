//! How the commands that print controller data print it: the `-o/--output`
//! format (the table, a wider table, the controller's JSON, or the same data as
//! YAML), column-aligned tables, and writing to stdout where a reader that
//! went away (`sluice status -o json | head -1`) is a clean stop, not a panic.
//!
//! Why a writer and not `SIGPIPE` restored to its default at start: a default
//! `SIGPIPE` kills the process on the spot, and `sluice testbed` or an
//! experiment killed half way would leave namespaces and processes behind.
//! A write error travels up as [`OutputError::Closed`] through `?`, so every
//! `Drop` on the way runs, and `main` then exits 0 without a message.

use std::fmt;
use std::io::{self, Write};

use clap::ValueEnum;
use serde::Serialize;

use crate::error::CliError;

/// What `-o/--output` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Format {
    /// The table or text for people (the default).
    #[default]
    Table,
    /// The table with more columns where there is more to show.
    Wide,
    /// The controller's JSON, pretty-printed.
    Json,
    /// The same data as YAML.
    Yaml,
}

impl Format {
    /// Whether it is the wide table.
    pub fn wide(self) -> bool {
        self == Format::Wide
    }
}

/// Writing to stdout failed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Stdout's reader went away (`sluice status -o json | head -1`): not a
    /// failure, `main` exits 0 without a message.
    #[error("stdout closed")]
    Closed,
    /// Writing to stdout failed otherwise.
    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] io::Error),
}

/// Writes `args` and a newline to stdout; a closed pipe is
/// [`OutputError::Closed`].
pub fn line(args: fmt::Arguments<'_>) -> Result<(), OutputError> {
    let mut out = io::stdout().lock();
    writeln!(out, "{args}").map_err(stdout_error)
}

/// Writes `text` to stdout as is (no newline added).
pub fn text(text: &str) -> Result<(), OutputError> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(stdout_error)
}

/// A failed write to stdout: [`OutputError::Closed`] if its reader went away.
pub fn stdout_error(e: io::Error) -> OutputError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        OutputError::Closed
    } else {
        OutputError::Stdout(e)
    }
}

/// `println!` through [`line()`]: evaluates to `Result<(), OutputError>`.
macro_rules! outln {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($t:tt)*) => {
        $crate::output::line(format_args!($($t)*))
    };
}

/// `v` as JSON (pretty) or YAML, as `fmt` asks; `None` for the tables.
pub fn render<T: Serialize + ?Sized>(fmt: Format, v: &T) -> Result<Option<String>, CliError> {
    let text = match fmt {
        Format::Json => serde_json::to_string_pretty(v).map_err(|e| CliError::Encode {
            format: "JSON",
            msg: e.to_string(),
        })?,
        Format::Yaml => yaml_serde::to_string(v).map_err(|e| CliError::Encode {
            format: "YAML",
            msg: e.to_string(),
        })?,
        Format::Table | Format::Wide => return Ok(None),
    };
    Ok(Some(text))
}

/// Prints `v` as JSON or YAML if `fmt` asks for one of them; `false`: the
/// caller prints its table.
pub fn structured<T: Serialize + ?Sized>(fmt: Format, v: &T) -> Result<bool, CliError> {
    match render(fmt, v)? {
        Some(t) => {
            outln!("{}", t.trim_end())?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// [`structured`] for the controller's answer as received (JSON text).
pub fn structured_raw(fmt: Format, raw: &str) -> Result<bool, CliError> {
    if matches!(fmt, Format::Table | Format::Wide) {
        return Ok(false);
    }
    let v: serde_json::Value = serde_json::from_str(raw).map_err(CliError::Answer)?;
    structured(fmt, &v)
}

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A table whose columns are as wide as their widest cell; columns marked
/// wide-only show with `-o wide` alone.
#[derive(Debug)]
pub struct Table {
    cols: Vec<(&'static str, Align, bool)>,
    rows: Vec<Vec<String>>,
    wide: bool,
}

impl Table {
    /// An empty table, wide if `fmt` is [`Format::Wide`].
    pub fn new(fmt: Format) -> Table {
        Table {
            cols: Vec::new(),
            rows: Vec::new(),
            wide: fmt.wide(),
        }
    }

    /// Adds a column shown in every table.
    pub fn col(mut self, head: &'static str, align: Align) -> Table {
        self.cols.push((head, align, false));
        self
    }

    /// Adds a column shown with `-o wide` only.
    pub fn wide_col(mut self, head: &'static str, align: Align) -> Table {
        self.cols.push((head, align, true));
        self
    }

    /// Adds a row: one cell per column, wide-only ones included.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table's lines, header first, without trailing spaces.
    pub fn lines(&self) -> Vec<String> {
        let shown: Vec<usize> = (0..self.cols.len())
            .filter(|&i| self.wide || !self.cols[i].2)
            .collect();
        fn cell(r: &[String], i: usize) -> &str {
            r.get(i).map(String::as_str).unwrap_or("")
        }
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| cell(r, i).chars().count())
                .chain([self.cols[i].0.len()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = shown.iter().map(|&i| width(i)).collect();
        let head: Vec<String> = shown.iter().map(|&i| self.cols[i].0.to_string()).collect();
        std::iter::once(head)
            .chain(
                self.rows
                    .iter()
                    .map(|r| shown.iter().map(|&i| cell(r, i).to_string()).collect()),
            )
            .map(|cells| {
                let mut l = String::new();
                for (k, (c, &i)) in cells.iter().zip(&shown).enumerate() {
                    if k > 0 {
                        l.push_str("  ");
                    }
                    let w = widths[k];
                    match self.cols[i].1 {
                        Align::Left => l.push_str(&format!("{c:<w$}")),
                        Align::Right => l.push_str(&format!("{c:>w$}")),
                    }
                }
                l.trim_end().to_string()
            })
            .collect()
    }

    /// Prints the table.
    pub fn print(&self) -> Result<(), CliError> {
        for l in self.lines() {
            outln!("{l}")?;
        }
        Ok(())
    }
}

/// An optional value, `-` when absent.
pub fn opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// `yes` or `no`.
pub fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// `used/total` of a limited resource, `used/-` without a limit.
pub fn used_of(used: u32, total: Option<u32>) -> String {
    format!("{used}/{}", opt(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(fmt: Format) -> Table {
        let mut t = Table::new(fmt)
            .col("NAME", Align::Left)
            .col("N", Align::Right)
            .wide_col("EXTRA", Align::Left);
        t.row(vec!["a".into(), "10".into(), "x".into()]);
        t.row(vec!["longer".into(), "2".into(), "yy".into()]);
        t
    }

    #[test]
    fn tables_align_and_show_wide_columns_only_when_wide() {
        assert_eq!(
            sample(Format::Table).lines(),
            ["NAME     N", "a       10", "longer   2"]
        );
        assert_eq!(
            sample(Format::Wide).lines(),
            ["NAME     N  EXTRA", "a       10  x", "longer   2  yy"]
        );
    }

    #[test]
    fn used_of_shows_no_limit_as_a_dash() {
        assert_eq!(used_of(3, Some(64)), "3/64");
        assert_eq!(used_of(0, None), "0/-");
    }

    #[test]
    fn json_and_yaml_render_the_same_data() {
        let v = serde_json::json!({"hosts": [{"id": 1, "alive": true}]});
        let j = render(Format::Json, &v).unwrap().unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&j).unwrap(), v);
        let y = render(Format::Yaml, &v).unwrap().unwrap();
        assert_eq!(yaml_serde::from_str::<serde_json::Value>(&y).unwrap(), v);
        assert!(render(Format::Wide, &v).unwrap().is_none());
    }

    #[test]
    fn a_closed_pipe_is_a_clean_stop_and_other_errors_are_not() {
        let closed = stdout_error(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(matches!(closed, OutputError::Closed));
        assert!(CliError::from(closed).stdout_closed());
        let full = stdout_error(io::Error::from(io::ErrorKind::StorageFull));
        assert!(matches!(full, OutputError::Stdout(_)));
        assert!(!CliError::from(full).stdout_closed());
        let run = CliError::from(crate::run::RunError::from(OutputError::Closed));
        assert!(run.stdout_closed() && run.exit_code() == 0);
    }
}
