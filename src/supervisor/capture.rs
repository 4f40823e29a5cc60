//! Run-to-completion capture: run one command as an
//! ordinary supervised process and hand back its whole output, or an honest receipt of what it
//! could not hand back.
//!
//! [`Supervisor::capture`] starts the command like any other (journaled, spooled, stoppable,
//! restored as `lost_on_restore` after a crash), follows its output with the same calls every
//! reader uses ([`Supervisor::output_raw`] until it has caught up, then
//! [`Supervisor::output_changed`] beside [`Supervisor::wait`]), and splits the bytes by their
//! spans into one buffer per stream (stdout and stderr, or a PTY launch's one terminal stream).
//!
//! It reads the spool rather than tapping the pipes: the bytes it returns are then exactly the
//! bytes the spool holds, at the cursors it holds them (a consumer that gets a prefix reads the
//! rest from the spool, from the cursor the receipt gives, without a seam), output the spool
//! lost is a gap the read reports rather than bytes only the capture saw, and the workload is
//! never slowed by its reader (a tap blocks the workload while its consumer is behind; a spool
//! reader may fall behind and catch up). The cost is that a reader slower than the workload
//! may find output retention already deleted, which is reported as a gap like any other.
//!
//! Invariants:
//! - Memory is bounded: each stream's buffer holds at most [`CaptureLimits::stream_bytes`]
//!   (its growth is capped at the limit, never doubled past it), plus one read of at most
//!   [`limits::CAPTURE_READ_BYTES`] in flight. Past the limit the stream is marked incomplete
//!   and its buffer keeps the prefix; the spool still gets every byte.
//! - A stream is [`StreamEnd::Eof`] only when the drain saw its end of file, every one of its
//!   bytes the spool counted was read without a gap or damage, and all of them fit the limit.
//!   Anything less is incomplete (with every reason found) or failed (with its cause); no
//!   partial bytes ever pass [`CaptureResult::complete`] as success.
//! - A fault keeps its original cause: a deadline that fired is reported as that deadline
//!   (from its journal record), not as the SIGTERM or SIGKILL the shared termination then
//!   sent; a capture that cannot read the output stops the process through the shared stop path
//!   (`StopRequested` records why) and reports its read failure.
//! - Capture never waits on a descendant: it ends when the workload's terminal result is
//!   recorded, which the drain's final-drain window bounds (`SupervisorConfig::final_drain`),
//!   and a stream the window cut off is incomplete with that reason.
//! - A capture gives the command no input: its stdin is closed at the start (a terminal gets
//!   the end-of-file character), so a command that reads input ends instead of waiting for
//!   input nobody can send.
//! - A capture dropped before its result stops its process (the stop path, recorded as
//!   "capture abandoned"): nobody is left to read the result it was started for. Dropped
//!   while its start is still unanswered, it never learns the handle; the actor's answer then
//!   finds no one and sends the same stop (`stop_if_unanswered`), and an answer that came but
//!   was never read is taken at the drop and stopped alike.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::actor::Msg;
use super::process::TerminalSummary;
use super::{PreparedProcess, Rendering, StartError, Supervisor, SupervisorError};
use crate::lifecycle::event::{CaptureStatus, Deadline, ExitStatus};
use crate::lifecycle::{Handle, Manifest, State};
use crate::limits;
use crate::spool::Skipped;
use crate::spool::format::Stream;
use crate::spool::render::{self, ArtifactDescriptor};

mod buffers;

use buffers::Buffers;

/// How much a capture returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureLimits {
    /// Bytes of each stream the result holds (stdout and stderr each, or a terminal's one
    /// stream): 1 to [`limits::CAPTURE_STREAM_BYTES_MAX`]; default
    /// [`limits::CAPTURE_STREAM_BYTES_DEFAULT`] (16 MiB). A stream that writes more is
    /// incomplete, with its first `stream_bytes` bytes.
    pub stream_bytes: usize,
}

impl Default for CaptureLimits {
    fn default() -> Self {
        CaptureLimits {
            stream_bytes: limits::CAPTURE_STREAM_BYTES_DEFAULT,
        }
    }
}

/// Why a capture gave no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The limits are out of range; nothing was started.
    #[error("capture limit stream_bytes {stream_bytes} is out of range (1 to {max})")]
    Limits { stream_bytes: usize, max: usize },
    /// The command was not started (or, for [`StartError::Spawn`], failed to spawn and is
    /// recorded as `failed`).
    #[error(transparent)]
    Start(StartError),
    /// The process's end could not be learnt (the supervisor stopped); the journal has what
    /// was recorded under `handle`.
    #[error("capture of {handle}: {error}")]
    Wait {
        handle: Handle,
        error: SupervisorError,
    },
}

/// How one stream of a capture ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "end", rename_all = "snake_case")]
pub enum StreamEnd {
    /// End of file, and every byte of the stream is in the result.
    Eof,
    /// The result does not hold the whole stream; every reason found, in the order found (at
    /// most one of each kind).
    Incomplete { reasons: Vec<Incomplete> },
    /// Capturing the stream failed.
    Failed { failure: CaptureFailure },
}

/// Why a stream is incomplete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Incomplete {
    /// The stream wrote more than the limit: the result holds its first `limit` bytes, the
    /// spool every byte (read on from the stream's `resume_cursor`).
    LimitExceeded { limit: u64 },
    /// The spool does not hold some output: lost (retention, a full disk, a failed sync) or
    /// damaged. The range is in cursors of the combined output, whose bytes may have been this
    /// stream's: the first such range, with its reason.
    Gap { skipped: Skipped },
    /// The stream was still open when the final-drain window after the workload's exit ended
    /// (a descendant holds it): what it wrote from then on was not read.
    DrainBound { final_drain_ms: u64 },
    /// The capture status the journal recorded for the process says its output is incomplete
    /// (used when the drain's own account of each stream is not at hand).
    Recorded { reason: String },
    /// Output the spool counts that the capture did not read (`from..to`).
    Unread { from: u64, to: u64 },
}

/// Why capturing a stream failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum CaptureFailure {
    /// The drain could not read the stream, or the spool could not be created for its bytes.
    Drain { message: String },
    /// Reading the spool back failed; the capture stopped the process.
    SpoolRead { message: String },
    /// The journal's capture status says capture failed (used when the drain's own account of
    /// each stream is not at hand).
    Recorded { reason: String },
}

/// What ended a run before it finished by itself: the original cause, not the signal the
/// shared termination sent for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum CaptureFault {
    /// A deadline of the command fired (its `DeadlineFired` record): the tree was terminated
    /// for it and the process is `timed_out`.
    Deadline { deadline: Deadline, limit_ms: u64 },
    /// The process was stopped, interrupted or shut down by the supervisor (`state` says which
    /// end it came to); `requested` is the first recorded stop request's reason and requester.
    Stopped {
        state: State,
        reason: String,
        requested: Option<(String, String)>,
    },
    /// The process failed (its spawn or its record) or has no end this supervisor saw.
    Failed { state: State, reason: String },
    /// The capture could not read the output back from the spool, and stopped the process.
    Capture { failure: String },
}

/// How the workload ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkloadStatus {
    pub state: State,
    /// The root's exit: its code or signal (a descendant's fate is not part of it).
    pub exit: ExitStatus,
    /// The terminal record's reason (empty if the journal has no terminal record).
    pub reason: String,
    /// The process-wide capture status the journal recorded.
    pub capture: CaptureStatus,
    /// Set when the terminal result could not be recorded (it is then known only in memory).
    pub persist_error: Option<String>,
}

/// One stream of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCapture {
    pub stream: Stream,
    pub end: StreamEnd,
    /// The stream's bytes: all of them when `end` is [`StreamEnd::Eof`], else a prefix of at
    /// most the limit (what was read before the first reason it is incomplete).
    pub bytes: Vec<u8>,
    /// Bytes of this stream read from the spool (those in `bytes` and those past the limit).
    pub spool_bytes: u64,
    /// The cursor of the combined output just past the last byte in `bytes`: the rest of the
    /// stream is at or after it (read the spool from there and keep this stream's spans).
    pub resume_cursor: u64,
}

/// Where the whole output is: the process's spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolArtifact {
    /// The retained output as a client names it (`pjout:HANDLE:FROM-TO`, no path).
    pub artifact: ArtifactDescriptor,
    /// Output kept: `retained_from..total_bytes` of the combined stream.
    pub retained_from: u64,
    pub total_bytes: u64,
    /// The spool's directory under the runtime root, for a host on this machine (never
    /// rendered for a client; it does not exist when the process wrote nothing).
    pub dir: PathBuf,
}

/// The result of a capture, complete or not: it is its own receipt (the process's identity and
/// status, the fault, each stream's end and prefix, where the whole output is). A consumer that
/// parses output takes it through [`CaptureResult::complete`] (or `complete_stdout`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureResult {
    pub handle: Handle,
    pub status: WorkloadStatus,
    /// What cut the run short, if anything did.
    pub fault: Option<CaptureFault>,
    /// stdout and stderr, or a PTY launch's terminal stream.
    pub streams: Vec<StreamCapture>,
    pub spool: SpoolArtifact,
    /// How long the start waited for capacity (`None`: it did not wait).
    pub queued: Option<Duration>,
}

/// A capture that cannot be taken as the whole output of a finished run: which stream, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("the {} capture of {handle} is not complete: {why}", stream_name(*stream))]
pub struct IncompleteCapture {
    pub handle: Handle,
    pub stream: Stream,
    pub why: Why,
}

/// Why [`CaptureResult::complete`] refused a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// The run was cut short: its output, even read to end of file, is not a finished run's.
    Fault(CaptureFault),
    Incomplete(Vec<Incomplete>),
    Failed(CaptureFailure),
    /// The launch has no such stream (a PTY launch has only `terminal`; pipes have no
    /// `terminal`).
    NoSuchStream,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Fault(fault) => write!(f, "{}", fault.describe()),
            Why::Incomplete(reasons) => {
                let text: Vec<String> = reasons.iter().map(Incomplete::describe).collect();
                write!(f, "incomplete: {}", text.join("; "))
            }
            Why::Failed(failure) => write!(f, "failed: {}", failure.describe()),
            Why::NoSuchStream => write!(f, "the launch has no such stream"),
        }
    }
}

impl Incomplete {
    pub fn describe(&self) -> String {
        match self {
            Incomplete::LimitExceeded { limit } => {
                format!("more than the limit of {limit} bytes (the spool has the rest)")
            }
            Incomplete::Gap { skipped } => skipped.notice(),
            Incomplete::DrainBound { final_drain_ms } => format!(
                "still open {final_drain_ms} ms after the workload exited (a descendant holds it)"
            ),
            Incomplete::Recorded { reason } => reason.clone(),
            Incomplete::Unread { from, to } => format!("output {from}..{to} was not read"),
        }
    }
}

impl CaptureFailure {
    pub fn describe(&self) -> String {
        match self {
            CaptureFailure::Drain { message } => format!("draining it: {message}"),
            CaptureFailure::SpoolRead { message } => format!("reading the spool: {message}"),
            CaptureFailure::Recorded { reason } => reason.clone(),
        }
    }
}

impl CaptureFault {
    pub fn describe(&self) -> String {
        match self {
            CaptureFault::Deadline { deadline, limit_ms } => {
                format!("the {} deadline of {limit_ms} ms fired", deadline.name())
            }
            CaptureFault::Stopped {
                state,
                reason,
                requested,
            } => match requested {
                Some((why, by)) => format!("{state} ({reason}; stop requested by {by}: {why})"),
                None => format!("{state} ({reason})"),
            },
            CaptureFault::Failed { state, reason } => format!("{state}: {reason}"),
            CaptureFault::Capture { failure } => format!("capture failed: {failure}"),
        }
    }
}

impl CaptureResult {
    /// Whether every stream ended at EOF with all its bytes here and nothing cut the run short.
    pub fn is_complete(&self) -> bool {
        self.fault.is_none() && self.streams.iter().all(|s| s.end == StreamEnd::Eof)
    }

    /// The stream, if the launch has it.
    pub fn stream(&self, stream: Stream) -> Option<&StreamCapture> {
        self.streams.iter().find(|s| s.stream == stream)
    }

    /// The whole of `stream` from a run that finished by itself, or why not: what an
    /// output-dependent consumer calls before parsing. A fault (a deadline, a stop) refuses
    /// every stream, even one read to end of file.
    pub fn complete(&self, stream: Stream) -> Result<&[u8], IncompleteCapture> {
        let refuse = |why| IncompleteCapture {
            handle: self.handle,
            stream,
            why,
        };
        if let Some(fault) = &self.fault {
            return Err(refuse(Why::Fault(fault.clone())));
        }
        let s = self
            .stream(stream)
            .ok_or_else(|| refuse(Why::NoSuchStream))?;
        match &s.end {
            StreamEnd::Eof => Ok(&s.bytes),
            StreamEnd::Incomplete { reasons } => Err(refuse(Why::Incomplete(reasons.clone()))),
            StreamEnd::Failed { failure } => Err(refuse(Why::Failed(failure.clone()))),
        }
    }

    /// [`CaptureResult::complete`] of stdout.
    pub fn complete_stdout(&self) -> Result<&[u8], IncompleteCapture> {
        self.complete(Stream::Stdout)
    }

    /// [`CaptureResult::complete`] of stderr.
    pub fn complete_stderr(&self) -> Result<&[u8], IncompleteCapture> {
        self.complete(Stream::Stderr)
    }

    /// [`CaptureResult::complete`] of a PTY launch's terminal.
    pub fn complete_terminal(&self) -> Result<&[u8], IncompleteCapture> {
        self.complete(Stream::Terminal)
    }

    /// The receipt as a client sees it: everything but the spool's path, with each stream's
    /// first `prefix_bytes` bytes rendered (`SafeText` strips terminal control sequences).
    pub fn receipt(&self, prefix_bytes: usize, rendering: Rendering) -> CaptureReceipt {
        let (exit_code, signal) = match self.status.exit {
            ExitStatus::Code(c) => (Some(c), None),
            ExitStatus::Signal(s) => (None, Some(s)),
            ExitStatus::Unknown => (None, None),
        };
        CaptureReceipt {
            handle: self.handle,
            complete: self.is_complete(),
            state: self.status.state,
            exit_code,
            signal,
            reason: self.status.reason.clone(),
            fault: self.fault.clone(),
            streams: self
                .streams
                .iter()
                .map(|s| {
                    StreamReceipt::of(
                        &self.handle,
                        s,
                        self.spool.total_bytes,
                        prefix_bytes,
                        rendering,
                    )
                })
                .collect(),
            retained_from: self.spool.retained_from,
            total_bytes: self.spool.total_bytes,
            artifact: self.spool.artifact.clone(),
            persisted: self.status.persist_error.is_none(),
            persist_error: self.status.persist_error.clone(),
            queued_ms: self
                .queued
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// A capture's receipt as clients see it (the `capture` operation's result, `procjournal
/// capture`'s output): identity, status, fault, each stream's end, counts and rendered prefix,
/// and the artifact descriptor of the whole retained output. No path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CaptureReceipt {
    pub handle: Handle,
    /// Every stream ended at EOF with all its bytes here, and nothing cut the run short.
    pub complete: bool,
    pub state: State,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: String,
    pub fault: Option<CaptureFault>,
    pub streams: Vec<StreamReceipt>,
    pub retained_from: u64,
    pub total_bytes: u64,
    pub artifact: ArtifactDescriptor,
    /// False only when the journal failed to record the terminal state: the status above is
    /// then known only in memory, `persist_error` says why, and every surface fails the call.
    pub persisted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persist_error: Option<String>,
    /// How long the start waited for capacity, in milliseconds (left out when it did not
    /// wait), as in a start's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<u64>,
}

/// One stream in a [`CaptureReceipt`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StreamReceipt {
    pub stream: Stream,
    /// `"end": "eof"`, `"incomplete"` with `reasons`, or `"failed"` with `failure`.
    #[serde(flatten)]
    pub end: StreamEnd,
    /// Bytes of the stream read from the spool, and how many of them the capture held.
    pub spool_bytes: u64,
    pub captured_bytes: u64,
    /// Where the rest of the stream is: at or after this cursor of the combined output.
    pub resume_cursor: u64,
    /// The combined output from `resume_cursor` on, when the stream is not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest: Option<ArtifactDescriptor>,
    /// The first `prefix_bytes` captured bytes, rendered. Safe text is cut on a character (or
    /// escape sequence) boundary, so `prefix_bytes` may be a little under the bytes asked for
    /// (or, for a first character longer than that, over).
    pub rendering: Rendering,
    pub prefix: String,
    pub prefix_bytes: u64,
    pub binary: bool,
}

impl StreamReceipt {
    fn of(
        handle: &Handle,
        s: &StreamCapture,
        total_bytes: u64,
        prefix_bytes: usize,
        rendering: Rendering,
    ) -> Self {
        let limit = s.bytes.len().min(prefix_bytes);
        let (text, binary, covered) = match rendering {
            Rendering::SafeText => {
                // Cut on a unit boundary (a character, an escape sequence), as an output page
                // is: a prefix that stops inside a character leaves it out, rather than showing
                // a U+FFFD the output does not hold. Only the end of a stream captured whole
                // is the end: a character cut there is shown as what it is, invalid.
                let at_end = s.end == StreamEnd::Eof && limit == s.bytes.len();
                let safe = render::safe_text_page(&s.bytes, limit, at_end);
                (safe.text, safe.binary, safe.consumed)
            }
            // Exactly the bytes: no unit to keep whole.
            Rendering::Base64 => {
                let prefix = &s.bytes[..limit];
                (
                    render::base64(prefix),
                    render::safe_text(prefix, true).binary,
                    limit,
                )
            }
        };
        StreamReceipt {
            stream: s.stream,
            end: s.end.clone(),
            spool_bytes: s.spool_bytes,
            captured_bytes: s.bytes.len() as u64,
            resume_cursor: s.resume_cursor,
            rest: (s.end != StreamEnd::Eof)
                .then(|| ArtifactDescriptor::new(handle, s.resume_cursor, total_bytes)),
            rendering,
            prefix: text,
            prefix_bytes: covered as u64,
            binary,
        }
    }
}

impl Supervisor {
    /// Runs `prepared` to completion and returns its output, each stream limited to
    /// `limits.stream_bytes` (the spool keeps everything): see the module documentation. The
    /// process is an ordinary supervised one (its deadlines apply, `stop` reaches it, it is in
    /// `list`); the call returns once its terminal result is recorded and its output read.
    pub async fn capture(
        &self,
        prepared: PreparedProcess,
        limits: CaptureLimits,
    ) -> Result<CaptureResult, CaptureError> {
        let max = limits::CAPTURE_STREAM_BYTES_MAX;
        if !(1..=max).contains(&limits.stream_bytes) {
            return Err(CaptureError::Limits {
                stream_bytes: limits.stream_bytes,
                max,
            });
        }
        let streams: &[Stream] = if prepared.pty().is_some() {
            &[Stream::Terminal]
        } else {
            &[Stream::Stdout, Stream::Stderr]
        };
        let prepared = PreparedProcess {
            stop_if_unanswered: true,
            ..prepared
        };
        let mut answer = StartUnread {
            sup: self,
            answer: self
                .send_start(prepared)
                .await
                .map_err(CaptureError::Start)?,
        };
        let started =
            super::start_answer((&mut answer.answer).await).map_err(CaptureError::Start)?;
        let handle = started.handle;
        let span = tracing::info_span!("capture", %handle);
        let mut result = self
            .follow(handle, streams, limits)
            .instrument(span)
            .await?;
        result.queued = started.queued;
        Ok(result)
    }

    /// Reads `handle`'s output into per-stream buffers until its terminal result is recorded
    /// and every byte the spool counts was read, then settles each stream's end.
    async fn follow(
        &self,
        handle: Handle,
        streams: &[Stream],
        limits: CaptureLimits,
    ) -> Result<CaptureResult, CaptureError> {
        let mut abandon = StopOnDrop {
            sup: self,
            handle,
            armed: true,
        };
        // Nobody can type into a capture: a command that reads its input gets end of file
        // rather than waiting for its deadline. A process already gone has no input to close.
        if let Err(e) = self.close_input(&handle).await {
            tracing::debug!(%handle, error = %e, "capture: the input was not closed");
        }
        let buffers = Buffers::new(streams, limits.stream_bytes);
        let (followed, ended) = self.read_to_end(handle, buffers).await;
        if let Some(failure) = &followed.read_failure {
            tracing::warn!(%handle, %failure, "capture cannot read the output; stopping the process");
            let grace = self.shared.config.default_grace;
            let _ = self
                .stop_for(&handle, grace, format!("capture failed: {failure}"))
                .await;
        }
        let summary = match ended {
            Some(Ok(summary)) => summary,
            _ => self
                .wait(&handle, None)
                .await
                .map_err(|error| CaptureError::Wait { handle, error })?,
        };
        abandon.armed = false;
        Ok(self.capture_result(handle, summary, followed))
    }

    /// Reads `handle`'s output into `buffers` until it has caught up once its terminal result
    /// is recorded, or a read fails; with the end, when the reads saw it come.
    async fn read_to_end(
        &self,
        handle: Handle,
        mut buffers: Buffers,
    ) -> (Followed, Option<Result<TerminalSummary, SupervisorError>>) {
        let mut cursor = 0u64;
        let mut read_failure = None;
        let mut ended = None;
        let waited = self.wait(&handle, None);
        tokio::pin!(waited);
        loop {
            match self
                .output_raw(&handle, cursor, limits::CAPTURE_READ_BYTES)
                .await
            {
                Ok(read) => {
                    buffers.take(&read);
                    let moved = read.next_cursor != cursor;
                    cursor = read.next_cursor;
                    if moved && cursor < read.total_bytes {
                        continue;
                    }
                }
                Err(e) => {
                    read_failure = Some(e.to_string());
                    break;
                }
            }
            // Caught up. Once the result is recorded no byte follows it (the drain's last
            // append comes before the terminal event): the read above was the last.
            if ended.is_some() {
                break;
            }
            tokio::select! {
                biased;
                summary = &mut waited => ended = Some(summary),
                () = self.output_changed(&handle, cursor) => {}
            }
        }
        let followed = Followed {
            buffers,
            cursor,
            read_failure,
        };
        (followed, ended)
    }

    /// The result of a capture whose process ended with `summary`: its status and record, the
    /// fault, each stream settled, and where the whole output is.
    fn capture_result(
        &self,
        handle: Handle,
        summary: TerminalSummary,
        followed: Followed,
    ) -> CaptureResult {
        let Followed {
            buffers,
            cursor,
            read_failure,
        } = followed;
        let manifest = self.manifest(&handle);
        let fault = match &read_failure {
            Some(failure) => Some(CaptureFault::Capture {
                failure: failure.clone(),
            }),
            None => fault_of(&summary, manifest.as_ref()),
        };
        let streams = buffers.settle(&summary, read_failure.as_deref(), cursor);
        let (retained_from, total_bytes) =
            (summary.bounds.retained_from, summary.bounds.total_bytes);
        CaptureResult {
            handle,
            status: WorkloadStatus {
                state: summary.state,
                exit: summary.exit,
                reason: manifest
                    .as_ref()
                    .and_then(|m| m.terminal.as_ref())
                    .map(|t| t.reason.clone())
                    .unwrap_or_default(),
                capture: summary.capture.clone(),
                persist_error: summary.persist_error.clone(),
            },
            fault,
            streams,
            spool: SpoolArtifact {
                artifact: ArtifactDescriptor::new(&handle, retained_from, total_bytes),
                retained_from,
                total_bytes,
                dir: self.shared.spool_dir(&handle),
            },
            queued: None,
        }
    }
}

/// What a capture's reads came to: the bytes by stream, the cursor they reached, and the
/// failure that stopped them, if one did.
struct Followed {
    buffers: Buffers,
    cursor: u64,
    read_failure: Option<String>,
}

/// What cut the run short, from its end and its record (`None`: it exited by itself).
fn fault_of(summary: &TerminalSummary, manifest: Option<&Manifest>) -> Option<CaptureFault> {
    let reason = || {
        manifest
            .and_then(|m| m.terminal.as_ref())
            .map(|t| t.reason.clone())
            .unwrap_or_default()
    };
    match summary.state {
        State::Exited => None,
        State::TimedOut => Some(match manifest.and_then(|m| m.deadline.as_ref()) {
            Some(fired) => CaptureFault::Deadline {
                deadline: fired.deadline,
                limit_ms: fired.limit_ms,
            },
            None => CaptureFault::Failed {
                state: summary.state,
                reason: reason(),
            },
        }),
        State::Terminated | State::Killed | State::Interrupted => Some(CaptureFault::Stopped {
            state: summary.state,
            reason: reason(),
            requested: manifest.and_then(|m| m.first_stop.clone()),
        }),
        _ => Some(CaptureFault::Failed {
            state: summary.state,
            reason: reason(),
        }),
    }
}

fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
        Stream::Terminal => "terminal",
    }
}

/// The answer to a capture's start while the capture waits for it. Dropped unread, it takes
/// an answer the actor already sent and stops that process: the actor stops it only when its
/// answer finds no one (`stop_if_unanswered`), and an answer sent before the capture was
/// dropped, but never read, found someone.
struct StartUnread<'a> {
    sup: &'a Supervisor,
    answer: super::StartAnswer,
}

impl Drop for StartUnread<'_> {
    fn drop(&mut self) {
        // Closed first, so that an answer is either taken here or refused to its sender.
        self.answer.close();
        if let Ok(Ok(started)) = self.answer.try_recv() {
            drop(StopOnDrop {
                sup: self.sup,
                handle: started.handle,
                armed: true,
            });
        }
    }
}

/// Stops a capture's process when the capture is dropped before its result (see the module
/// documentation): through the actor's stop path, without waiting (a drop cannot await).
struct StopOnDrop<'a> {
    sup: &'a Supervisor,
    handle: Handle,
    armed: bool,
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (reply, _) = oneshot::channel();
        let sent = self.sup.actor.try_send(Msg::Stop {
            handle: self.handle,
            grace: self.sup.shared.config.default_grace,
            reason: "capture abandoned".to_owned(),
            reply,
        });
        if sent.is_err() {
            tracing::warn!(handle = %self.handle, "capture abandoned, but its stop could not be queued; the process runs on");
        }
    }
}
