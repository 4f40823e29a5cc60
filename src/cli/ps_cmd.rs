//! `procjournal ps`: the process list, from the daemon or (when none runs) the journal.
//!
//! The table's columns are a closed set ([`Column`]), chosen with `--format`; every string that
//! came from a client or the journal (handles, commands, labels, reasons) is escaped by
//! `render::escape_field` before it reaches the terminal. `--json` prints the protocol's process
//! objects unchanged (docs/cli-json.md).

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use super::args::parse_label;
use super::target::{Target, offline_manifests};
use super::views::{ProcView, label_list, now_unix_ms, shell_words};
use crate::lifecycle::State;
use crate::protocol::Request;
use crate::protocol::dispatch::ProcessInfo;

#[derive(Debug, Args)]
pub(crate) struct PsArgs {
    #[command(flatten)]
    target: Target,
    /// One JSON object per process per line (the protocol's process objects).
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// The columns, comma-separated, from: number, handle, state, pid, exit, age, duration, bytes,
    /// capture, tree, ownership, deadline, reason, cwd, labels, command.
    #[arg(long, value_name = "COLUMNS", value_delimiter = ',', value_parser = parse_column)]
    format: Option<Vec<Column>>,
    /// Only processes in this state (running, exited, lost_on_restore, ...).
    #[arg(long, value_parser = parse_state)]
    state: Option<State>,
    /// Only processes with this label k=v.
    #[arg(long, value_parser = parse_label)]
    label: Option<(String, String)>,
}

pub(crate) fn parse_state(text: &str) -> Result<State, String> {
    State::ALL
        .into_iter()
        .find(|s| s.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = State::ALL.iter().map(|s| s.name()).collect();
            format!("unknown state {text:?} (one of {})", names.join(", "))
        })
}

/// A column of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Number,
    Handle,
    State,
    Pid,
    Exit,
    Age,
    Duration,
    Bytes,
    Capture,
    Tree,
    Ownership,
    Deadline,
    Reason,
    Cwd,
    Labels,
    Command,
}

impl Column {
    const ALL: [Column; 16] = [
        Column::Number,
        Column::Handle,
        Column::State,
        Column::Pid,
        Column::Exit,
        Column::Age,
        Column::Duration,
        Column::Bytes,
        Column::Capture,
        Column::Tree,
        Column::Ownership,
        Column::Deadline,
        Column::Reason,
        Column::Cwd,
        Column::Labels,
        Column::Command,
    ];

    /// The table without `--format`.
    const DEFAULT: [Column; 13] = [
        Column::Number,
        Column::Handle,
        Column::State,
        Column::Pid,
        Column::Exit,
        Column::Age,
        Column::Duration,
        Column::Bytes,
        Column::Capture,
        Column::Tree,
        Column::Ownership,
        Column::Deadline,
        Column::Command,
    ];

    fn name(self) -> &'static str {
        match self {
            Column::Number => "number",
            Column::Handle => "handle",
            Column::State => "state",
            Column::Pid => "pid",
            Column::Exit => "exit",
            Column::Age => "age",
            Column::Duration => "duration",
            Column::Bytes => "bytes",
            Column::Capture => "capture",
            Column::Tree => "tree",
            Column::Ownership => "ownership",
            Column::Deadline => "deadline",
            Column::Reason => "reason",
            Column::Cwd => "cwd",
            Column::Labels => "labels",
            Column::Command => "command",
        }
    }

    /// Numbers align right.
    fn right(self) -> bool {
        matches!(
            self,
            Column::Number
                | Column::Pid
                | Column::Exit
                | Column::Age
                | Column::Duration
                | Column::Bytes
        )
    }

    /// The cell for `p`, escaped; `now_ms` is this client's clock, for ages and durations.
    fn cell(self, p: &ProcView, now_ms: u64) -> String {
        let esc = |s: &str| crate::spool::render::escape_field(s, false).into_owned();
        match self {
            Column::Number => p.number.to_string(),
            Column::Handle => esc(&p.handle),
            Column::State => p.state.name().to_owned(),
            Column::Pid => p.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            Column::Exit => match (p.exit_code, p.signal) {
                (Some(code), _) => code.to_string(),
                (None, Some(signal)) => format!("SIG{}", super::exit::signal_name(signal)),
                _ => "-".to_owned(),
            },
            Column::Age => p
                .registered_unix_ms
                .map_or_else(|| "-".to_owned(), |t| span_text(now_ms.saturating_sub(t))),
            Column::Duration => match p.running_unix_ms {
                // A process that never ran has no duration; a running one, its time so far.
                Some(from) => span_text(p.ended_unix_ms.unwrap_or(now_ms).saturating_sub(from)),
                None => "-".to_owned(),
            },
            Column::Bytes => p.total_bytes.to_string(),
            Column::Capture => capture_word(p).to_owned(),
            Column::Tree => esc(p.mechanism.as_deref().unwrap_or("-")),
            Column::Ownership => esc(p.ownership.as_ref().map_or("-", |o| o.assessment.as_str())),
            // The deadline that fired, or `await` while a human-input mark suspends the idle one.
            Column::Deadline => match (&p.deadline, p.awaiting_input) {
                (Some(d), _) => esc(d),
                (None, true) => "await".to_owned(),
                (None, false) => "-".to_owned(),
            },
            Column::Reason => esc(p.reason.as_deref().unwrap_or("-")),
            Column::Cwd => esc(&p.cwd),
            Column::Labels => {
                if p.labels.is_empty() {
                    "-".to_owned()
                } else {
                    label_list(p.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                }
            }
            Column::Command => shell_words(&p.command),
        }
    }
}

fn parse_column(text: &str) -> Result<Column, String> {
    let text = text.trim();
    Column::ALL
        .into_iter()
        .find(|c| c.name().eq_ignore_ascii_case(text))
        .ok_or_else(|| {
            let names: Vec<&str> = Column::ALL.iter().map(|c| c.name()).collect();
            format!("unknown column {text:?} (one of {})", names.join(", "))
        })
}

/// One word for the capture: `retired` once the output was removed; while the process runs,
/// `-`, or `gap` once output was lost; then the terminal status's word (`complete`,
/// `incomplete`, `failed`; the reason is in `ps --json`).
fn capture_word(p: &ProcView) -> &str {
    if p.retired.as_ref().is_some_and(|r| !r.is_null()) {
        return "retired";
    }
    match (&p.capture, p.state.is_terminal()) {
        (None, _) => "-",
        (Some(_), false) => "gap",
        (Some(c), true) => c.split(':').next().unwrap_or(c),
    }
}

/// A span of milliseconds for a table: `850ms`, `42s`, `3m07s`, `5h02m`, `12d03h`.
pub(crate) fn span_text(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// What `ps` says when no daemon serves the root: each state is what the journal last recorded,
/// and a process recorded as live (`running`, `starting`, ...) has nobody supervising it now; a
/// daemon that was SIGKILLed left its processes so. In the table such a state is marked `*`;
/// in `--json` every object carries `"served": false`. A supervisor that holds the root's lock
/// without a socket (`holder`: a `run`, `capture` or `mcp --standalone`) keeps those states
/// current: they are not marked, and each object carries `"supervised": true`.
fn say_offline(root: &std::path::Path, processes: &[Value], holder: Option<u32>) {
    let live = processes
        .iter()
        .filter(|p| {
            serde_json::from_value::<State>(p["state"].clone()).is_ok_and(|s| !s.is_terminal())
        })
        .count();
    let root = crate::spool::render::escape_field(&root.to_string_lossy(), false).into_owned();
    if let Some(pid) = holder {
        note!(
            "procjournal: no daemon serves {root}; pid {pid} supervises it without a socket \
             (a run, capture or mcp --standalone); each state is the last the journal recorded"
        );
    } else if live == 0 {
        note!("procjournal: no daemon serves {root}; each state is the last the journal recorded");
    } else {
        note!(
            "procjournal: no daemon serves {root}; each state is the last the journal recorded: \
             {live} recorded as live (marked *) have no supervisor now, and may have ended"
        );
    }
}

/// The processes the journal recorded, filtered as asked, each marked `"served": false`, and
/// whether the gate was recorded closed, and whether a supervisor without a socket holds the
/// root; said on stderr (`say_offline`).
fn offline_list(args: &PsArgs) -> anyhow::Result<(Vec<Value>, bool, bool)> {
    let root = args.target.root()?;
    let holder = crate::root::holder::lock_holder(&root.join("LOCK"));
    let (store, _) = offline_manifests(&root)?;
    let list: Vec<Value> = store
        .iter()
        .filter(|m| args.state.is_none_or(|s| m.state == s))
        .filter(|m| {
            args.label
                .as_ref()
                .is_none_or(|(k, v)| m.command.label(k) == Some(v.as_str()))
        })
        .map(|m| {
            let mut value = serde_json::to_value(ProcessInfo::from(&*m))?;
            if let Value::Object(fields) = &mut value {
                fields.insert("served".to_owned(), Value::Bool(false));
                fields.insert("supervised".to_owned(), Value::Bool(holder.is_some()));
            }
            Ok::<_, serde_json::Error>(value)
        })
        .collect::<Result<_, _>>()?;
    say_offline(&root, &list, holder);
    Ok((list, store.paused(), holder.is_some()))
}

pub(crate) fn ps(args: PsArgs) -> anyhow::Result<ExitCode> {
    let paused;
    let mut unsupervised = false;
    let processes: Vec<Value> = match args.target.try_connect()? {
        Some(mut client) => {
            let list;
            (list, paused) = daemon_list(&mut client, &args)?;
            list
        }
        None => {
            let (list, supervised);
            (list, paused, supervised) = offline_list(&args)?;
            // A supervisor without a socket keeps its live states current: no `*`.
            unsupervised = !supervised;
            list
        }
    };
    if paused {
        // On stderr: stdout stays the process list (one JSON object a line with --json).
        note!("procjournal: paused: new starts are refused until `procjournal resume`");
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        for p in &processes {
            writeln!(out, "{}", super::json::line(&p)?)?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let columns = args.format.unwrap_or_else(|| Column::DEFAULT.to_vec());
    let now_ms = now_unix_ms();
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(processes.len());
    for p in processes {
        let p: ProcView = serde_json::from_value(p).context("a process in the answer")?;
        rows.push(table_row(&p, &columns, now_ms, unsupervised));
    }
    write_table(&mut out, &columns, &rows)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The daemon's process list (as `--state` and `--label` filter it), and whether it is paused.
fn daemon_list(
    client: &mut crate::client::Client,
    args: &PsArgs,
) -> anyhow::Result<(Vec<Value>, bool)> {
    let hello = client.call(&Request::Hello)?;
    let paused = hello.get("paused").and_then(Value::as_bool) == Some(true);
    if let Some(damage) = hello.get("damage").and_then(Value::as_str) {
        note!(
            "procjournal: warning: the daemon opened a damaged root: {}",
            crate::spool::render::escape_field(damage, false)
        );
    }
    let result = client.call(&Request::List {
        state: args.state,
        label: args.label.clone(),
    })?;
    match result.get("processes") {
        Some(Value::Array(list)) => Ok((list.clone(), paused)),
        _ => bail!("the daemon's answer has no process list"),
    }
}

/// A process's cells in `columns`, its state starred when no supervisor keeps it current.
fn table_row(p: &ProcView, columns: &[Column], now_ms: u64, unsupervised: bool) -> Vec<String> {
    let mut row: Vec<String> = columns.iter().map(|c| c.cell(p, now_ms)).collect();
    if unsupervised && !p.state.is_terminal() {
        for (cell, column) in row.iter_mut().zip(columns) {
            if *column == Column::State {
                cell.push('*');
            }
        }
    }
    // Without --format, the labels follow the command, as they always did.
    if columns == Column::DEFAULT.as_slice()
        && !p.labels.is_empty()
        && let Some(last) = row.last_mut()
    {
        last.push_str(&format!("  [{}]", Column::Labels.cell(p, now_ms)));
    }
    row
}

/// Writes the header and the rows, each column as wide as its widest cell.
fn write_table(
    out: &mut impl Write,
    columns: &[Column],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    // The number is what people type (`logs 12`): `#` as its header, as `#12` names it.
    let header: Vec<String> = columns
        .iter()
        .map(|c| match c {
            Column::Number => "#".to_owned(),
            c => c.name().to_ascii_uppercase(),
        })
        .collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            std::iter::once(&header)
                .chain(rows)
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, column)) in row.iter().zip(columns).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            // The last column is not padded (a command is as long as it is).
            if i + 1 == columns.len() && !column.right() {
                line.push_str(cell);
            } else if column.right() {
                line.push_str(&format!("{cell:>w$}", w = widths[i]));
            } else {
                line.push_str(&format!("{cell:<w$}", w = widths[i]));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_at_a_glance() {
        assert_eq!(span_text(850), "850ms");
        assert_eq!(span_text(42_000), "42s");
        assert_eq!(span_text(187_000), "3m07s");
        assert_eq!(span_text(5 * 3_600_000 + 120_000), "5h02m");
        assert_eq!(span_text(12 * 86_400_000 + 3 * 3_600_000), "12d03h");
    }

    #[test]
    fn columns_parse_by_name_and_refuse_others() {
        assert_eq!(parse_column("AGE"), Ok(Column::Age));
        assert!(
            parse_column("nope")
                .unwrap_err()
                .contains("one of number, handle")
        );
    }
}
