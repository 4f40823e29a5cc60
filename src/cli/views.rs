//! What the client commands read and show: the daemon's answers as the fields they print
//! ([`ProcView`], [`PageView`]), commands and labels as a person reads them (quoted, every
//! control character escaped), and the time now.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::lifecycle::State;

/// The fields of a process the client commands print (a daemon from before a field leaves it
/// at its default).
#[derive(Debug, Deserialize)]
pub(super) struct ProcView {
    pub(super) handle: String,
    /// The process's number on the root (0 from a daemon that predates numbers).
    #[serde(default)]
    pub(super) number: u64,
    pub(super) state: State,
    pub(super) pid: Option<u32>,
    pub(super) command: Vec<String>,
    #[serde(default)]
    pub(super) cwd: String,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) registered_unix_ms: Option<u64>,
    #[serde(default)]
    pub(super) running_unix_ms: Option<u64>,
    #[serde(default)]
    pub(super) ended_unix_ms: Option<u64>,
    #[serde(default)]
    pub(super) reason: Option<String>,
    pub(super) exit_code: Option<i32>,
    pub(super) signal: Option<i32>,
    pub(super) total_bytes: u64,
    #[serde(default)]
    pub(super) capture: Option<String>,
    #[serde(default)]
    pub(super) retired: Option<Value>,
    #[serde(default)]
    pub(super) mechanism: Option<String>,
    #[serde(default)]
    pub(super) ownership: Option<OwnershipView>,
    #[serde(default)]
    pub(super) awaiting_input: bool,
    #[serde(default)]
    pub(super) deadline: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct OwnershipView {
    pub(super) assessment: String,
}

/// The fields of an output page the client reads.
#[derive(Debug, Deserialize)]
pub(super) struct PageView {
    pub(super) next_cursor: u64,
    pub(super) retained_from: u64,
    pub(super) total_bytes: u64,
    pub(super) gap: bool,
    #[serde(default)]
    pub(super) skipped: Option<crate::spool::Skipped>,
    pub(super) cursor_ahead: bool,
    pub(super) data: String,
    pub(super) state: State,
    #[serde(default)]
    pub(super) spans: Vec<SpanView>,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct SpanView {
    pub(super) stream: String,
    pub(super) cursor: u64,
    pub(super) len: u32,
}

/// A command as a shell would quote it, each word's control characters shown as escapes
/// (`render::escape_field`): a client-supplied word cannot steer the terminal or break the line.
pub(crate) fn shell_words<S: AsRef<str>>(words: &[S]) -> String {
    let quote = |w: &S| {
        let w = crate::spool::render::escape_field(w.as_ref(), false);
        let plain = !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
        if plain {
            w.into_owned()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// Labels as `[k=v,...]` for a human, each key and value escaped like a command word.
pub(crate) fn label_list<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let labels: Vec<String> = labels
        .map(|(k, v)| {
            format!(
                "{}={}",
                crate::spool::render::escape_field(k, false),
                crate::spool::render::escape_field(v, false)
            )
        })
        .collect();
    labels.join(",")
}

pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
