//! Per-process deadlines (journal-format.md, "Deadlines"; docs/cli.md, "Deadlines"): a wall-clock
//! limit and an idle limit, enforced by one sweep in the actor over every live process.
//!
//! Each live process carries [`Clocks`]: its configured limits, the monotonic instant it started
//! running, the instant of its last activity (output read by the drain, input written to it, a
//! signal sent to it by a client; a PTY resize will call [`Clocks::touch`] too), whether it waits
//! for human input, and which deadline fired. Activity is recorded with one atomic store; nothing
//! is journaled per activity.
//!
//! Why one sweep and not a timer per process: activity would have to re-arm a process's idle
//! timer on every read of its output (a timer-wheel entry moved per read, from the drain's
//! task), while the sweep costs the hot path one atomic store, and the actor, at most every
//! [`limits::DEADLINE_SWEEP_MIN_MS`], nanoseconds per live process (integer comparisons of
//! milliseconds from one epoch; `benches/deadline.rs` measures a sweep over 10 000). The sweep is not periodic:
//! each check answers the earliest instant its process could reach a deadline (a lower bound:
//! activity only moves an idle deadline later), and the actor sleeps until the earliest of those,
//! so with no deadline near, nothing runs.
//!
//! This module is the clocks and the sweep's decision; acting on a decision (the records, the
//! teardown) is `enforce.rs`, so that the clocks, which the drain touches, import nothing of the
//! process.
//!
//! Invariants:
//! - The wall clock runs from the instant the process was spawned (its journaled `running`
//!   time), the idle clock from its last activity, or from that start before any activity.
//! - While a process waits for human input its idle clock does not run; when the mark is
//!   cleared (input written, or an explicit call) the clear is activity, so the idle clock
//!   restarts from it.
//! - At most one deadline fires per process (wall first when both are due at once); it is
//!   journaled (`DeadlineFired`) before its tree is stopped through the same teardown as `stop`
//!   (SIGTERM, grace, SIGKILL, exit proven); the process ends `timed_out` and its terminal reason
//!   names the deadline.
//! - Enforcement runs in a task per process: a failure to signal one tree (reported by tracing
//!   and a `DeadlineFailed` record, and retried after [`limits::DEADLINE_RETRY_MS`]) never delays
//!   the checks or the enforcement of others.
//! - Across a restart: a process live when its supervisor stopped is reconciled as
//!   `lost_on_restore` (never re-attached), so no process is ever given a new wall or idle
//!   period by a restart. Its manifest keeps the original start and the configured limits.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::now_unix_ms;
use crate::lifecycle::event::{Deadline, Limits};
use crate::limits;

const FIRED_NONE: u8 = 0;
const FIRED_WALL: u8 = 1;
const FIRED_IDLE: u8 = 2;
/// `Clocks::retry_at` while an enforcement is in flight (no retry pending).
const RETRY_NONE: u64 = u64::MAX;
/// `Clocks::start_at` before the process started.
const NOT_STARTED: u64 = u64::MAX;

/// The instant every clock counts milliseconds from: the sweep compares plain integers (a
/// `Duration` per process, and its conversion to milliseconds, cost more than the rest of the
/// check).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds from the epoch to `at` (0 for an instant before it).
fn ms_of(at: Instant) -> u64 {
    millis(at.saturating_duration_since(epoch()))
}

/// The instant `ms` milliseconds after the epoch.
fn instant_of(ms: u64) -> Instant {
    epoch() + Duration::from_millis(ms)
}

/// The deadline clocks of one process (module doc). Shared by the actor (which checks them), the
/// drain and stdin writer (which record activity) and the enforcement task.
#[derive(Debug)]
pub struct Clocks {
    wall_ms: Option<u64>,
    idle_ms: Option<u64>,
    /// When the process started running, as Unix ms (for the records).
    started_unix_ms: AtomicU64,
    /// When it started, in ms from the epoch (`NOT_STARTED` before).
    start_at: AtomicU64,
    /// The last activity, in ms from the epoch (the start before any).
    activity_at: AtomicU64,
    awaiting: AtomicBool,
    fired: AtomicU8,
    /// When a failed enforcement is tried again, in ms from the epoch; `RETRY_NONE` while none
    /// is pending.
    retry_at: AtomicU64,
}

/// What a check of one process's clocks found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No deadline can fire: none configured, not started yet, or one fired and its enforcement
    /// is in flight.
    Nothing,
    /// Nothing is due; no deadline of this process runs out before this instant.
    NotBefore(Instant),
    /// `deadline` ran out (its clock started at `clock_from`): enforce it. `first` is false for
    /// a retry of an enforcement that failed.
    Due {
        deadline: Deadline,
        limit_ms: u64,
        clock_from: Instant,
        first: bool,
    },
}

/// [`Check`] in milliseconds from the epoch: what the sweep computes per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckMs {
    Nothing,
    NotBefore(u64),
    Due {
        deadline: Deadline,
        limit_ms: u64,
        clock_from: u64,
        first: bool,
    },
}

impl CheckMs {
    fn at(self) -> Check {
        match self {
            CheckMs::Nothing => Check::Nothing,
            CheckMs::NotBefore(ms) => Check::NotBefore(instant_of(ms)),
            CheckMs::Due {
                deadline,
                limit_ms,
                clock_from,
                first,
            } => Check::Due {
                deadline,
                limit_ms,
                clock_from: instant_of(clock_from),
                first,
            },
        }
    }
}

fn millis(d: Duration) -> u64 {
    // Seconds and the sub-second part: no 128-bit division on the hot path.
    d.as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(d.subsec_millis()))
}

impl Clocks {
    pub fn new(limits: &Limits) -> Clocks {
        Clocks {
            wall_ms: limits.wall_clock_ms,
            idle_ms: limits.idle_ms,
            started_unix_ms: AtomicU64::new(0),
            start_at: AtomicU64::new(NOT_STARTED),
            activity_at: AtomicU64::new(0),
            awaiting: AtomicBool::new(false),
            fired: AtomicU8::new(FIRED_NONE),
            retry_at: AtomicU64::new(RETRY_NONE),
        }
    }

    /// Whether any deadline is configured.
    #[cfg(any(test, feature = "test-support"))]
    pub fn limited(&self) -> bool {
        self.wall_ms.is_some() || self.idle_ms.is_some()
    }

    /// The process started running at `at` (`unix_ms` as Unix time); once: later calls change
    /// nothing.
    pub fn start(&self, at: Instant, unix_ms: u64) {
        let at = ms_of(at);
        self.activity_at.store(at, Ordering::Relaxed);
        self.started_unix_ms.store(unix_ms, Ordering::Relaxed);
        let _ =
            self.start_at
                .compare_exchange(NOT_STARTED, at, Ordering::Release, Ordering::Relaxed);
    }

    /// Activity now (output, input, a signal; a PTY resize later): the idle clock restarts.
    pub fn touch(&self) {
        if self.idle_ms.is_some() {
            self.touch_at(Instant::now());
        }
    }

    pub fn touch_at(&self, now: Instant) {
        self.activity_at.fetch_max(ms_of(now), Ordering::Relaxed);
    }

    pub fn awaiting(&self) -> bool {
        self.awaiting.load(Ordering::Relaxed)
    }

    /// Marks or clears the wait for human input; a clear is activity. The supervisor calls it
    /// only together with the journal record (`set_awaiting_blocking`); the clocks of a live
    /// process are not reachable from outside the crate.
    pub fn set_awaiting(&self, waiting: bool) {
        if !waiting {
            self.touch_at(Instant::now());
        }
        self.awaiting.store(waiting, Ordering::Relaxed);
    }

    /// The deadline that fired, if one did.
    pub fn fired(&self) -> Option<Deadline> {
        match self.fired.load(Ordering::Relaxed) {
            FIRED_WALL => Some(Deadline::Wall),
            FIRED_IDLE => Some(Deadline::Idle),
            _ => None,
        }
    }

    /// The Unix time of a monotonic instant of this process's clocks.
    pub(super) fn unix_ms_of(&self, at: Instant) -> u64 {
        let start = self.start_at.load(Ordering::Acquire);
        if start == NOT_STARTED {
            return now_unix_ms();
        }
        self.started_unix_ms
            .load(Ordering::Relaxed)
            .saturating_add(ms_of(at).saturating_sub(start))
    }

    /// Decides, at `now`, whether a deadline is due (module doc).
    pub fn check(&self, now: Instant) -> Check {
        self.check_ms(ms_of(now)).at()
    }

    /// [`Clocks::check`] at `now` ms from the epoch: reads of the atomics and integer
    /// comparisons only (the sweep calls it for every live process).
    fn check_ms(&self, now: u64) -> CheckMs {
        let start = self.start_at.load(Ordering::Acquire);
        if start == NOT_STARTED {
            return CheckMs::Nothing;
        }
        if let Some(deadline) = self.fired() {
            let retry = self.retry_at.load(Ordering::Relaxed);
            if retry == RETRY_NONE {
                return CheckMs::Nothing;
            }
            if now < retry {
                return CheckMs::NotBefore(retry);
            }
            let (limit_ms, clock_from) = match deadline {
                Deadline::Wall => (self.wall_ms.unwrap_or(0), start),
                Deadline::Idle => (
                    self.idle_ms.unwrap_or(0),
                    self.activity_at.load(Ordering::Relaxed),
                ),
            };
            return CheckMs::Due {
                deadline,
                limit_ms,
                clock_from,
                first: false,
            };
        }
        let mut next = u64::MAX;
        if let Some(wall) = self.wall_ms {
            let due = start.saturating_add(wall);
            if now >= due {
                return CheckMs::Due {
                    deadline: Deadline::Wall,
                    limit_ms: wall,
                    clock_from: start,
                    first: true,
                };
            }
            next = due;
        }
        if let Some(idle) = self.idle_ms {
            let due = if self.awaiting() {
                // Suspended. Once cleared (at `now` at the earliest) it restarts from the clear.
                now.saturating_add(idle)
            } else {
                let last = self.activity_at.load(Ordering::Relaxed);
                let due = last.saturating_add(idle);
                if now >= due {
                    return CheckMs::Due {
                        deadline: Deadline::Idle,
                        limit_ms: idle,
                        clock_from: last,
                        first: true,
                    };
                }
                due
            };
            next = next.min(due);
        }
        if next == u64::MAX {
            CheckMs::Nothing
        } else {
            CheckMs::NotBefore(next)
        }
    }

    /// Claims the enforcement of a due deadline: the fired deadline is set (first time), and no
    /// retry is pending until [`Clocks::retry_after`].
    pub fn claim(&self, deadline: Deadline) {
        let v = match deadline {
            Deadline::Wall => FIRED_WALL,
            Deadline::Idle => FIRED_IDLE,
        };
        let _ = self
            .fired
            .compare_exchange(FIRED_NONE, v, Ordering::Relaxed, Ordering::Relaxed);
        self.retry_at.store(RETRY_NONE, Ordering::Relaxed);
    }

    /// The enforcement failed: try again `delay` after `now`.
    pub(crate) fn retry_after(&self, now: Instant, delay: Duration) {
        self.retry_at.store(ms_of(now + delay), Ordering::Relaxed);
    }
}

/// The sweep's decision over many processes (what the actor does each sweep, and what the
/// bench measures): calls `due` for every process whose deadline is due and returns the earliest
/// instant another one could be.
pub fn sweep<'a, T: 'a>(
    now: Instant,
    entries: impl IntoIterator<Item = (&'a Clocks, T)>,
    mut due: impl FnMut(T, Check),
) -> Option<Instant> {
    let now = ms_of(now);
    let mut next = u64::MAX;
    for (clocks, item) in entries {
        match clocks.check_ms(now) {
            CheckMs::Nothing => {}
            CheckMs::NotBefore(at) => next = next.min(at),
            c @ CheckMs::Due { .. } => due(item, c.at()),
        }
    }
    (next != u64::MAX).then(|| instant_of(next))
}

/// The retry delay after a failed enforcement.
pub(crate) fn retry_delay() -> Duration {
    Duration::from_millis(limits::DEADLINE_RETRY_MS)
}

/// The least time between two sweeps.
pub(crate) fn sweep_spacing() -> Duration {
    Duration::from_millis(limits::DEADLINE_SWEEP_MIN_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clocks(wall: Option<u64>, idle: Option<u64>) -> (Clocks, Instant) {
        let c = Clocks::new(&Limits {
            wall_clock_ms: wall,
            idle_ms: idle,
            output_retention_bytes: None,
        });
        let t0 = whole_ms();
        c.start(t0, 1_000);
        (c, t0)
    }

    /// An instant on a whole millisecond of the epoch, so that instants the tests derive from it
    /// are exactly what the clocks give back.
    fn whole_ms() -> Instant {
        instant_of(ms_of(Instant::now()) + 1)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nothing_before_the_start_or_without_limits() {
        let c = Clocks::new(&Limits {
            idle_ms: Some(5),
            ..Limits::default()
        });
        assert_eq!(c.check(Instant::now()), Check::Nothing);
        let (c, t0) = clocks(None, None);
        assert_eq!(c.check(t0 + ms(10_000)), Check::Nothing);
    }

    #[test]
    fn idle_runs_from_the_start_then_from_the_last_activity() {
        let (c, t0) = clocks(None, Some(100));
        assert_eq!(c.check(t0 + ms(50)), Check::NotBefore(t0 + ms(100)));
        assert!(matches!(
            c.check(t0 + ms(100)),
            Check::Due { deadline: Deadline::Idle, clock_from, first: true, .. } if clock_from == t0
        ));
        c.touch_at(t0 + ms(80));
        assert_eq!(c.check(t0 + ms(100)), Check::NotBefore(t0 + ms(180)));
        // Activity never moves the clock back.
        c.touch_at(t0 + ms(20));
        assert_eq!(c.check(t0 + ms(100)), Check::NotBefore(t0 + ms(180)));
    }

    #[test]
    fn waiting_for_input_suspends_idle_and_a_clear_restarts_it() {
        let (c, t0) = clocks(None, Some(100));
        c.set_awaiting(true);
        let far = t0 + ms(10_000);
        assert_eq!(c.check(far), Check::NotBefore(far + ms(100)));
        c.awaiting.store(false, Ordering::Relaxed);
        c.touch_at(far);
        assert_eq!(c.check(far + ms(99)), Check::NotBefore(far + ms(100)));
    }

    #[test]
    fn wall_wins_and_fires_once_then_retries_only_when_asked() {
        let (c, t0) = clocks(Some(100), Some(100));
        let due = c.check(t0 + ms(100));
        assert!(
            matches!(
                due,
                Check::Due {
                    deadline: Deadline::Wall,
                    limit_ms: 100,
                    first: true,
                    ..
                }
            ),
            "{due:?}"
        );
        c.claim(Deadline::Wall);
        assert_eq!(c.fired(), Some(Deadline::Wall));
        assert_eq!(c.check(t0 + ms(5_000)), Check::Nothing);
        c.retry_after(t0 + ms(200), ms(300));
        assert_eq!(c.check(t0 + ms(400)), Check::NotBefore(t0 + ms(500)));
        assert!(matches!(
            c.check(t0 + ms(500)),
            Check::Due {
                deadline: Deadline::Wall,
                first: false,
                ..
            }
        ));
        // A later claim of the other kind does not change which fired.
        c.claim(Deadline::Idle);
        assert_eq!(c.fired(), Some(Deadline::Wall));
    }

    #[test]
    fn the_sweep_reports_every_due_process_and_the_earliest_next() {
        let t0 = whole_ms();
        let all: Vec<Clocks> = (0..10u64)
            .map(|i| {
                let c = Clocks::new(&Limits {
                    idle_ms: Some(100 + i * 10),
                    ..Limits::default()
                });
                c.start(t0, 0);
                c
            })
            .collect();
        let mut due = Vec::new();
        let next = sweep(t0 + ms(125), all.iter().zip(0..), |i, _| due.push(i));
        assert_eq!(due, vec![0, 1, 2]);
        assert_eq!(next, Some(t0 + ms(130)));
    }
}
