//! Suricata's `classification.config`: each `classtype` a rule names has a
//! description (EVE `alert.category`) and a priority (EVE `alert.severity`,
//! unless the rule sets its own `priority`).
//!
//! Lines are `config classification: SHORTNAME,DESCRIPTION,PRIORITY`; `#`
//! starts a comment. With a classification file loaded, a rule naming a
//! classtype the file lacks is refused, as Suricata refuses it.

use std::collections::BTreeMap;
use std::sync::Arc;

/// One classtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// Its description (EVE `alert.category`).
    pub description: Arc<str>,
    /// Its priority (EVE `alert.severity` unless the rule overrides it).
    pub priority: u8,
}

/// The classtypes of a classification file, by short name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Classes(pub BTreeMap<String, Class>);

/// A line of a classification file that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct ClassError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

impl Classes {
    /// Parses a classification file's text.
    pub fn parse(text: &str) -> Result<Classes, ClassError> {
        let mut out = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |msg: String| ClassError { line: i + 1, msg };
            let Some(rest) = line
                .strip_prefix("config")
                .map(str::trim_start)
                .and_then(|r| r.strip_prefix("classification"))
                .map(str::trim_start)
                .and_then(|r| r.strip_prefix(':'))
            else {
                return Err(err(format!(
                    "expected `config classification: NAME,DESCRIPTION,PRIORITY`, found `{line}`"
                )));
            };
            let parts: Vec<&str> = rest.split(',').map(str::trim).collect();
            let [name, description, priority] = parts[..] else {
                return Err(err(format!(
                    "expected three comma-separated fields, found {}",
                    parts.len()
                )));
            };
            if name.is_empty() {
                return Err(err("empty classtype name".into()));
            }
            let priority: u8 = priority
                .parse()
                .map_err(|_| err(format!("priority `{priority}` is not a number 0-255")))?;
            out.insert(
                name.to_string(),
                Class {
                    description: description.into(),
                    priority,
                },
            );
        }
        Ok(Classes(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suricata_lines_parse_and_bad_ones_name_their_line() {
        let c = Classes::parse(
            "# comment\n\nconfig classification: not-suspicious,Not Suspicious Traffic,3\n\
             config classification: trojan-activity,A Network Trojan was detected, 1\n",
        )
        .unwrap();
        assert_eq!(c.0.len(), 2);
        assert_eq!(
            c.0["trojan-activity"],
            Class {
                description: "A Network Trojan was detected".into(),
                priority: 1
            }
        );
        let e = Classes::parse("config classification: a,b\n").unwrap_err();
        assert_eq!(e.line, 1);
        let e = Classes::parse("\nconfig classification: a,b,high\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.msg.contains("high"));
        assert!(Classes::parse("classification a,b,1").is_err());
    }
}
