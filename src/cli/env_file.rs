//! `--env-file FILE`: environment variables from a file, so that their values never appear in
//! this process's argv (`/proc/PID/cmdline` is readable by every local user).
//!
//! The format is the subset of the dotenv family (python-dotenv, Node's dotenv, Docker Compose's
//! `.env`, systemd's `EnvironmentFile=`) that all of them read the same way; anything they read
//! differently is refused with its line number rather than guessed at:
//!
//! - One `NAME=value` a line (LF or CRLF); an optional `export ` before the name; blank lines
//!   and lines whose first non-blank character is `#` are skipped; leading blanks are ignored.
//! - `NAME` is a letter or `_`, then letters, digits and `_`; `=` follows it directly.
//! - `value` is the rest of the line, taken as it is. In single quotes (`'...'`) it is the text
//!   between them, byte for byte; in double quotes likewise, without `\` or `$` (which the
//!   others expand). After a closing quote only blanks and a `# comment` may follow.
//! - Unquoted, a value may not start or end with a blank, hold ` #` or a tab before `#` (an
//!   inline comment to some readers, text to others), `\` or `$`: quote it.
//! - No value spans lines; no NUL; the text is UTF-8 (a leading byte-order mark is skipped).
//! - A name given twice takes its last value, as in every dotenv reader.
//!
//! Invariant: [`parse`] is total (any bytes are entries or one error), and an error names the
//! line and the rule, never the value (it may be a secret).

use thiserror::Error;

/// A line the format does not accept; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {problem}")]
pub(crate) struct EnvFileError {
    pub line: usize,
    pub problem: Problem,
}

/// What is wrong with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) enum Problem {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("holds a NUL byte")]
    Nul,
    #[error("not NAME=value")]
    NoEquals,
    #[error("the name is not a letter or _ followed by letters, digits and _")]
    BadName,
    #[error("a blank around = (write NAME=value)")]
    BlankAroundEquals,
    #[error("the value's opening quote is not closed on this line")]
    UnclosedQuote,
    #[error("text after the value's closing quote")]
    AfterQuote,
    #[error("\\ or $ in a double-quoted value (other readers expand them): use single quotes")]
    ExpandedInDoubleQuotes,
    #[error("an unquoted value with \\, $, a blank at an end or a blank before # (quote it)")]
    AmbiguousUnquoted,
}

/// The entries of an env file, in file order (a later one of the same name wins).
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<(String, String)>, EnvFileError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut entries = Vec::new();
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let at = |problem| EnvFileError {
            line: index + 1,
            problem,
        };
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.contains(&0) {
            return Err(at(Problem::Nul));
        }
        let text = std::str::from_utf8(raw).map_err(|_| at(Problem::NotUtf8))?;
        if let Some(entry) = parse_line(text).map_err(at)? {
            entries.push(entry);
        }
    }
    Ok(entries)
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// One line: `None` for a blank line or a comment.
fn parse_line(text: &str) -> Result<Option<(String, String)>, Problem> {
    let text = text.trim_start_matches(is_blank);
    if text.is_empty() || text.starts_with('#') {
        return Ok(None);
    }
    let text = match text.strip_prefix("export") {
        Some(rest) if rest.starts_with(is_blank) => rest.trim_start_matches(is_blank),
        _ => text,
    };
    let (name, value) = text.split_once('=').ok_or(Problem::NoEquals)?;
    if name.ends_with(is_blank) || value.starts_with(is_blank) {
        return Err(Problem::BlankAroundEquals);
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Problem::BadName);
    }
    Ok(Some((name.to_owned(), parse_value(value)?)))
}

fn parse_value(value: &str) -> Result<String, Problem> {
    let Some(quote) = value.chars().next().filter(|c| *c == '\'' || *c == '"') else {
        let ambiguous = value.ends_with(is_blank)
            || value.contains(['\\', '$'])
            || value.contains(" #")
            || value.contains("\t#");
        return if ambiguous {
            Err(Problem::AmbiguousUnquoted)
        } else {
            Ok(value.to_owned())
        };
    };
    let body = &value[1..];
    let end = body.find(quote).ok_or(Problem::UnclosedQuote)?;
    let (inner, after) = (&body[..end], &body[end + 1..]);
    let after = after.trim_start_matches(is_blank);
    if !after.is_empty() && !after.starts_with('#') {
        return Err(Problem::AfterQuote);
    }
    if quote == '"' && inner.contains(['\\', '$']) {
        return Err(Problem::ExpandedInDoubleQuotes);
    }
    Ok(inner.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(text: &str) -> Result<Vec<(String, String)>, EnvFileError> {
        parse(text.as_bytes())
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_common_subset_reads_as_every_dotenv_reads_it() {
        let file = "\u{feff}# a comment\n\n  TOKEN=s3cr=t\r\nexport MODE='a b # c $x \\n'\n\
                    EMPTY=\nQ=\"two words\"  # note\nTOKEN=again\n_x1=#not-a-comment\n";
        assert_eq!(
            one(file).unwrap(),
            pairs(&[
                ("TOKEN", "s3cr=t"),
                ("MODE", "a b # c $x \\n"),
                ("EMPTY", ""),
                ("Q", "two words"),
                ("TOKEN", "again"),
                ("_x1", "#not-a-comment"),
            ])
        );
        assert_eq!(one("").unwrap(), pairs(&[]));
        assert_eq!(one("export=1").unwrap(), pairs(&[("export", "1")]));
    }

    #[test]
    fn what_readers_disagree_on_is_refused_with_its_line() {
        let cases: &[(&str, Problem)] = &[
            ("A", Problem::NoEquals),
            ("1A=x", Problem::BadName),
            ("A-B=x", Problem::BadName),
            ("=x", Problem::BadName),
            ("A =x", Problem::BlankAroundEquals),
            ("A= x", Problem::BlankAroundEquals),
            ("A=\"x", Problem::UnclosedQuote),
            ("A='x'y", Problem::AfterQuote),
            ("A=\"x\\ny\"", Problem::ExpandedInDoubleQuotes),
            ("A=\"$HOME\"", Problem::ExpandedInDoubleQuotes),
            ("A=x #c", Problem::AmbiguousUnquoted),
            ("A=x ", Problem::AmbiguousUnquoted),
            ("A=$B", Problem::AmbiguousUnquoted),
            ("A=a\\b", Problem::AmbiguousUnquoted),
            ("A=a\0b", Problem::Nul),
        ];
        for (line, problem) in cases {
            let text = format!("# first\nOK=1\n{line}\n");
            assert_eq!(
                one(&text),
                Err(EnvFileError {
                    line: 3,
                    problem: *problem
                }),
                "{line:?}"
            );
        }
        assert_eq!(
            parse(b"A=\xff"),
            Err(EnvFileError {
                line: 1,
                problem: Problem::NotUtf8
            })
        );
    }

    #[test]
    fn an_error_never_shows_the_value() {
        let e = one("TOKEN=\"hunter2").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z_][A-Za-z0-9_]{0,8}"
    }

    proptest! {
        /// Any bytes: entries or one error naming a line the input has, never a panic.
        #[test]
        fn parse_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            match parse(&bytes) {
                Ok(entries) => for (k, v) in entries {
                    prop_assert!(!k.is_empty() && !k.contains('='));
                    prop_assert!(!v.contains(['\n', '\0']));
                }
                Err(e) => {
                    let lines = bytes.split(|&b| b == b'\n').count();
                    prop_assert!(e.line >= 1 && e.line <= lines);
                }
            }
        }

        /// Any value without a newline, NUL or single quote, written single-quoted, reads back
        /// as itself; so does every entry of a file written from entries.
        #[test]
        fn single_quoted_values_read_back(
            entries in proptest::collection::vec((name(), "[^\n\r\0']{0,20}"), 0..6),
        ) {
            let text: String = entries.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
            prop_assert_eq!(parse(text.as_bytes()).unwrap(), entries);
        }
    }
}
