//! Waiting for capacity on the command line: `start`, `run`, `capture` and `restart` wait for it
//! by default (bounded by `--queue`, [`limits::ADMISSION_QUEUE_WAIT_MS_DEFAULT`] unless told),
//! and `--no-queue` fails at once.
//!
//! Invariants:
//! - Each start is asked first without a wait; only a refusal for capacity is retried, in the
//!   supervisor's first-in, first-out queue, so that a start that fits is not held behind the
//!   line, and the wait is said exactly once on stderr (with the decision that made it wait)
//!   when it begins, never when no wait happens.
//! - `--no-queue` keeps the fail-fast refusal (exit 125 with the decision).

use std::time::Duration;

use super::args::parse_duration;
use crate::limits;
use crate::protocol::{ApiError, ErrorCode};

/// `--queue` and `--no-queue`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct QueueArgs {
    /// When admission finds no capacity now, wait up to this long for it (first come, first
    /// served), e.g. 30s, 5m; at most 1h. Default: 10m (ADMISSION_QUEUE_WAIT_MS_DEFAULT). One
    /// line on stderr says when a wait begins and why.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_queue")]
    pub queue: Option<Duration>,
    /// Fail at once (exit 125, with the reason) when admission finds no capacity now, instead
    /// of waiting for it.
    #[arg(long)]
    pub no_queue: bool,
}

impl QueueArgs {
    /// How long a start refused for capacity may wait, in milliseconds (`None`: not at all).
    pub(crate) fn wait_ms(&self) -> Option<u64> {
        if self.no_queue {
            return None;
        }
        let ms = self
            .queue
            .map_or(limits::ADMISSION_QUEUE_WAIT_MS_DEFAULT, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            });
        (ms > 0).then_some(ms)
    }

    /// When `refusal` is for capacity and this start may wait: says so on stderr (the one line)
    /// and gives the `queue_ms` to ask again with.
    pub(crate) fn retry_after(&self, refusal: &ApiError) -> Option<u64> {
        if refusal.code != ErrorCode::Capacity {
            return None;
        }
        let ms = self.wait_ms()?;
        note!(
            "procjournal: {}",
            crate::spool::render::escape_field(&waiting_line(&refusal.message, ms), true)
        );
        Some(ms)
    }
}

/// "waiting for capacity (at most 600s; 2 of 2 slots in use (automatic: ...))" from a capacity
/// refusal's message, whose decision sits between "no capacity: " and "; see".
fn waiting_line(message: &str, ms: u64) -> String {
    let decision = message
        .split_once("no capacity: ")
        .map_or(message, |(_, rest)| rest);
    let decision = decision
        .split_once("; see `admission`")
        .map_or(decision, |(d, _)| d);
    format!(
        "waiting for capacity (at most {}s; {decision})",
        ms.div_ceil(1000)
    )
}

/// `request` (a capture) asked again with a wait for capacity of `ms`.
pub(crate) fn with_queue(request: crate::protocol::Request, ms: u64) -> crate::protocol::Request {
    match request {
        crate::protocol::Request::Capture {
            start,
            max_bytes,
            rendering,
        } => crate::protocol::Request::Capture {
            start: crate::protocol::StartArgs {
                queue_ms: Some(ms),
                ..start
            },
            max_bytes,
            rendering,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_line_names_the_decision() {
        let message = "start refused: no capacity: 2 of 2 slots in use (automatic: 2.0 of 1.4 \
                       cores charged); see `admission`, or wait with queue_ms (start --queue)";
        assert_eq!(
            waiting_line(message, 600_000),
            "waiting for capacity (at most 600s; 2 of 2 slots in use (automatic: 2.0 of 1.4 \
             cores charged))"
        );
        assert_eq!(
            waiting_line("other", 1),
            "waiting for capacity (at most 1s; other)"
        );
    }

    #[test]
    fn no_queue_and_zero_do_not_wait() {
        let q = |queue: Option<Duration>, no_queue| QueueArgs { queue, no_queue };
        assert_eq!(
            q(None, false).wait_ms(),
            Some(limits::ADMISSION_QUEUE_WAIT_MS_DEFAULT)
        );
        assert_eq!(q(Some(Duration::from_secs(3)), false).wait_ms(), Some(3000));
        assert_eq!(q(Some(Duration::ZERO), false).wait_ms(), None);
        assert_eq!(q(None, true).wait_ms(), None);
        let other = ApiError::new(ErrorCode::Refused, "paused".to_owned());
        assert_eq!(q(None, false).retry_after(&other), None);
    }
}
