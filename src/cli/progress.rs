//! The progress bar of long offline scans (indicatif), on stderr only, so it never mixes with
//! what stdout prints.
//!
//! - Drawn only where indicatif's own test says stderr is a terminal that can take it (a tty,
//!   `TERM` set and not `dumb`): pipes, logs and tests see nothing. `PROCJOURNAL_PROGRESS=1`
//!   forces it on (for terminals that do not say so), `=0` off.
//! - Drawn once as the scan starts, so that a scan over before the first redraw is seen too
//!   (and a test can see it without a clock), then at most [`REDRAW_HZ`] times a second.
//! - Cleared when the scan ends, and when it is dropped on an error path, so no line of it stays
//!   behind the report.

use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};

use crate::journal::Position;

/// The most redraws a second (indicatif's default for stderr).
const REDRAW_HZ: u8 = 20;
/// Records between two updates of the bar: each costs a clock read, and a scan reads millions.
const RECORDS_PER_UPDATE: u64 = 1024;

#[derive(Debug)]
pub(crate) struct Progress {
    /// `None` when nothing is drawn, so a hidden bar costs a counter and a branch per record.
    bar: Option<ProgressBar>,
    records: u64,
    /// Sizes of the journal's segment files by index, to turn a position into bytes scanned.
    segments: Vec<(u64, u64)>,
}

impl Progress {
    /// A bar in bytes of the journal in `journal_dir` (its segment files' sizes, read now).
    pub(crate) fn journal(label: &'static str, journal_dir: &Path) -> Progress {
        let Some(target) = target() else {
            return Progress::hidden();
        };
        let mut segments = Vec::new();
        if let Ok(entries) = std::fs::read_dir(journal_dir) {
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
        Progress {
            bar: Some(bar(target, label, total_bytes, BYTES)),
            records: 0,
            segments,
        }
    }

    /// A bar counting `total` items (`spool verify`'s spools).
    pub(crate) fn items(label: &'static str, total: u64) -> Progress {
        Progress {
            bar: target().map(|target| bar(target, label, total, ITEMS)),
            ..Progress::hidden()
        }
    }

    fn hidden() -> Progress {
        Progress {
            bar: None,
            records: 0,
            segments: Vec::new(),
        }
    }

    /// A journal record at `position` was read.
    pub(crate) fn record(&mut self, position: Position) {
        self.records += 1;
        let Some(bar) = &self.bar else { return };
        if !self.records.is_multiple_of(RECORDS_PER_UPDATE) {
            return;
        }
        let before: u64 = self
            .segments
            .iter()
            .take_while(|s| s.0 < position.segment_index)
            .map(|s| s.1)
            .sum();
        bar.set_position(before + position.offset);
    }

    /// One of the bar's items is done.
    pub(crate) fn item(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Clears the bar; call before printing a report.
    pub(crate) fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

const BYTES: &str = "{prefix}: [{wide_bar}] {binary_bytes}/{binary_total_bytes}";
const ITEMS: &str = "{prefix}: [{wide_bar}] {pos}/{len}";

/// Where the bar is drawn, or `None` when it is not to be.
fn target() -> Option<ProgressDrawTarget> {
    let target = match std::env::var("PROCJOURNAL_PROGRESS").as_deref() {
        Ok("0") => return None,
        Ok("1") => {
            ProgressDrawTarget::term_like_with_hz(Box::new(console::Term::stderr()), REDRAW_HZ)
        }
        _ => ProgressDrawTarget::stderr_with_hz(REDRAW_HZ),
    };
    (!target.is_hidden()).then_some(target)
}

/// The bar, drawn once now.
fn bar(target: ProgressDrawTarget, label: &'static str, total: u64, template: &str) -> ProgressBar {
    // The templates are constants of this file: a bad one is a bug that any test drawing the bar
    // catches (the label would be missing); the fallback keeps a release build drawing all the same.
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(total), target)
        .with_style(style)
        .with_prefix(label)
        // Dropped on an error path (`?`), the bar is cleared too.
        .with_finish(ProgressFinish::AndClear);
    bar.force_draw();
    bar
}
