//! A progress line on stderr for long offline scans, shown only when stderr is a terminal (so
//! pipes, logs and tests see nothing) and only once a scan has run for a moment.
//!
//! The line is redrawn in place (`\r`, then erase to the end of the line) at most every
//! [`REDRAW`], and erased when the scan ends, so it never mixes with what stdout prints.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::journal::Position;

/// The least time between two redraws, and the time before the first.
const REDRAW: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub(crate) struct Progress {
    label: &'static str,
    enabled: bool,
    shown: bool,
    started: Instant,
    last: Instant,
    records: u64,
    /// Sizes of the journal's segment files by index, to turn a position into bytes scanned.
    segments: Vec<(u64, u64)>,
    total_bytes: u64,
}

impl Progress {
    /// A progress line for a scan of the journal in `journal_dir`. `PROCJOURNAL_PROGRESS=1`
    /// forces it on (for terminals that do not say so), `=0` off.
    pub(crate) fn journal(label: &'static str, journal_dir: &Path) -> Progress {
        let enabled = match std::env::var("PROCJOURNAL_PROGRESS").as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => std::io::stderr().is_terminal(),
        };
        let mut segments = Vec::new();
        if enabled && let Ok(entries) = std::fs::read_dir(journal_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let index = name
                    .to_str()
                    .and_then(|n| n.strip_suffix(".log"))
                    .and_then(|n| n.parse::<u64>().ok());
                if let (Some(index), Ok(meta)) = (index, entry.metadata()) {
                    segments.push((index, meta.len()));
                }
            }
        }
        segments.sort_unstable();
        let total_bytes = segments.iter().map(|s| s.1).sum();
        let now = Instant::now();
        Progress {
            label,
            enabled,
            shown: false,
            started: now,
            last: now,
            records: 0,
            segments,
            total_bytes,
        }
    }

    pub(crate) fn record(&mut self, position: Position) {
        self.records += 1;
        if !self.enabled || !self.records.is_multiple_of(1024) {
            return;
        }
        let now = Instant::now();
        if now - self.started < REDRAW || now - self.last < REDRAW {
            return;
        }
        self.last = now;
        let before: u64 = self
            .segments
            .iter()
            .take_while(|s| s.0 < position.segment_index)
            .map(|s| s.1)
            .sum();
        let done = before + position.offset;
        let percent = if self.total_bytes == 0 {
            100.0
        } else {
            (done as f64 * 100.0 / self.total_bytes as f64).min(100.0)
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[K{}: {percent:5.1}% of {} MiB, {} records",
            self.label,
            self.total_bytes >> 20,
            self.records
        );
        let _ = err.flush();
        self.shown = true;
    }

    /// Erases the line; call before printing a report.
    pub(crate) fn finish(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
