//! How `output` and a start's `yield_ms` wait for output, and how `tail_lines` finds the last
//! lines: so that an agent reads a command's output in as few calls as the output allows.
//!
//! Invariants:
//! - a wait never polls: it sleeps on the process's output signal ([`Supervisor::output_changed`])
//!   and on its own bounds, and each wake-up reads one byte to learn the total;
//! - a wait ends, whichever comes first, when the process is terminal (its output is whole),
//!   when a page's worth is there, when its bound passes, or when its condition holds: at
//!   least `min_bytes` past the cursor, and then, with `settle`, no new byte for `settle`;
//! - the page after a wait is exactly the supervisor's page from its start cursor (the cursor
//!   asked for, or with `tail_lines` the start of the last lines, never before the cursor
//!   asked for), so its gap and cursor fields mean what they mean for any page.

use std::time::{Duration, Instant};

use super::{Dispatcher, api};
use crate::lifecycle::Handle;
use crate::protocol::{ApiError, OUTPUT_BYTES_MAX};
use crate::supervisor::{OutputPage, Rendering, SupervisorError};

/// What a read waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputWait {
    /// The longest the wait lasts.
    pub bound: Duration,
    /// Bytes past the cursor that end the wait (with `settle`: that start the quiet clock).
    pub min_bytes: u64,
    /// Quiet (no new byte) that ends the wait once `min_bytes` are there.
    pub settle: Option<Duration>,
}

impl OutputWait {
    /// `output`'s wait: up to `wait_ms` for `min_bytes` (default 1, or 0 with `settle_ms`) and
    /// then, with `settle_ms`, for that much quiet.
    pub fn for_output(wait_ms: u64, min_bytes: Option<u64>, settle_ms: Option<u64>) -> Self {
        let settle = settle_ms.map(Duration::from_millis);
        OutputWait {
            bound: Duration::from_millis(wait_ms),
            min_bytes: min_bytes.unwrap_or(if settle.is_some() { 0 } else { 1 }),
            settle,
        }
    }

    /// A start's `yield_ms`: for the end (or a full page), or with `settle_ms` for quiet.
    pub fn for_yield(yield_ms: u64, settle_ms: Option<u64>) -> Self {
        let settle = settle_ms.map(Duration::from_millis);
        OutputWait {
            bound: Duration::from_millis(yield_ms),
            min_bytes: if settle.is_some() { 0 } else { u64::MAX },
            settle,
        }
    }
}

impl Dispatcher {
    /// One page of `handle`'s output from `cursor` (or its last `tail_lines` lines past it),
    /// after waiting as `wait` says.
    pub(super) async fn output(
        &self,
        handle: Handle,
        cursor: u64,
        max_bytes: usize,
        rendering: Rendering,
        wait: OutputWait,
        tail_lines: Option<u64>,
    ) -> Result<OutputPage, ApiError> {
        let sup = self.supervisor();
        let deadline = Instant::now() + wait.bound;
        if !wait.bound.is_zero() {
            self.await_output(&handle, cursor, max_bytes as u64, &wait, deadline)
                .await;
        }
        let from = match tail_lines {
            Some(lines) => self.tail_start(&handle, cursor, max_bytes, lines).await?,
            None => cursor,
        };
        loop {
            let page = match sup.output(&handle, from, max_bytes, rendering).await {
                Ok(page) => page,
                Err(SupervisorError::CursorAhead { total_bytes, .. }) => {
                    return self
                        .cursor_ahead_page(handle, cursor, total_bytes, rendering)
                        .await;
                }
                Err(e) => return Err(api(e)),
            };
            let nothing_new = page.next_cursor == from && !page.gap;
            let left = deadline.saturating_duration_since(Instant::now());
            if !nothing_new || page.state.is_terminal() || left.is_zero() || wait.min_bytes == 0 {
                return Ok(page);
            }
            // Wait past what the page saw in total, not past `cursor`: a render that held back a
            // split character leaves `next_cursor == cursor` with bytes already there.
            if tokio::time::timeout(left, sup.output_changed(&handle, page.total_bytes))
                .await
                .is_err()
            {
                return Ok(page);
            }
        }
    }

    /// Sleeps until the wait is over (see the module doc); reads nothing it returns.
    async fn await_output(
        &self,
        handle: &Handle,
        cursor: u64,
        page_bytes: u64,
        wait: &OutputWait,
        deadline: Instant,
    ) {
        let sup = self.supervisor();
        loop {
            // A read that fails (a cursor ahead, a retired spool) ends the wait: the page read
            // after it reports the same failure.
            let Ok(probe) = sup.output_raw(handle, cursor, 1).await else {
                return;
            };
            let terminal = sup.manifest(handle).is_none_or(|m| m.state.is_terminal());
            let have = probe.total_bytes.saturating_sub(cursor);
            let left = deadline.saturating_duration_since(Instant::now());
            if terminal || have >= page_bytes || left.is_zero() {
                return;
            }
            let sleep = match wait.settle {
                _ if have < wait.min_bytes => left,
                Some(settle) => settle.min(left),
                None => return,
            };
            if tokio::time::timeout(sleep, sup.output_changed(handle, probe.total_bytes))
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// The cursor where the last `lines` lines of the output end-most `max_bytes` start, never
    /// before `cursor` (a page starts there and holds at most `max_bytes` anyway).
    async fn tail_start(
        &self,
        handle: &Handle,
        cursor: u64,
        max_bytes: usize,
        lines: u64,
    ) -> Result<u64, ApiError> {
        let sup = self.supervisor();
        let total = match sup.output_raw(handle, cursor, 1).await {
            Ok(read) => read.total_bytes,
            // The page read reports a cursor beyond the end as such.
            Err(SupervisorError::CursorAhead { .. }) => return Ok(cursor),
            Err(e) => return Err(api(e)),
        };
        let window = max_bytes.min(OUTPUT_BYTES_MAX as usize);
        let mut at = total.saturating_sub(window as u64).max(cursor);
        let mut base = at;
        let mut bytes = Vec::with_capacity(window);
        // A read may stop short (at a segment's end, before a gap): read on to the total.
        while at < total && bytes.len() < window {
            let read = sup
                .output_raw(handle, at, window - bytes.len())
                .await
                .map_err(api)?;
            if read.bytes.is_empty() {
                break;
            }
            if read.skipped.is_some() {
                // Lines do not run across lost output: the tail starts after it.
                bytes.clear();
                base = read.next_cursor - read.bytes.len() as u64;
            }
            bytes.extend_from_slice(&read.bytes);
            at = read.next_cursor;
        }
        Ok(base + tail_offset(&bytes, lines) as u64)
    }
}

/// Where the last `lines` lines of `bytes` start: after the `lines`-th newline from the end, a
/// final newline ending the last line rather than starting another (0 when there are fewer).
pub fn tail_offset(bytes: &[u8], lines: u64) -> usize {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut seen = 0;
    for (i, byte) in body.iter().enumerate().rev() {
        if *byte == b'\n' {
            seen += 1;
            if seen == lines {
                return i + 1;
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_starts_after_the_nth_newline_from_the_end() {
        assert_eq!(tail_offset(b"a\nb\nc\n", 1), 4);
        assert_eq!(tail_offset(b"a\nb\nc\n", 2), 2);
        assert_eq!(tail_offset(b"a\nb\nc\n", 3), 0);
        assert_eq!(tail_offset(b"a\nb\nc\n", 9), 0);
        assert_eq!(tail_offset(b"a\nb\nc", 1), 4);
        assert_eq!(tail_offset(b"a\r\nb\r\n", 1), 3);
        assert_eq!(tail_offset(b"", 1), 0);
        assert_eq!(tail_offset(b"\n\n", 1), 1);
    }

    #[test]
    fn waits_default_as_documented() {
        let plain = OutputWait::for_output(1000, None, None);
        assert_eq!((plain.min_bytes, plain.settle), (1, None));
        let quiet = OutputWait::for_output(1000, None, Some(200));
        assert_eq!(quiet.min_bytes, 0);
        let some = OutputWait::for_output(1000, Some(64), Some(200));
        assert_eq!(some.min_bytes, 64);
        assert_eq!(OutputWait::for_yield(1000, None).min_bytes, u64::MAX);
        assert_eq!(OutputWait::for_yield(1000, Some(5)).min_bytes, 0);
    }
}
