//! A capture's per-stream buffers while it reads, and how each stream's end is settled once
//! the process's end is known.
//!
//! Invariants:
//! - Each stream's buffer holds at most the limit, and its capacity never passes it (growth is
//!   capped at the limit, never doubled past it); past the limit the stream keeps its prefix
//!   and is incomplete.
//! - A stream is [`StreamEnd::Eof`] only when the drain saw its end of file, every byte the
//!   spool counted was read without a gap, and all of them fit the limit; otherwise it carries
//!   every reason found (the first of each kind) or its failure.
//! - The recorded capture status is never contradicted: when it says incomplete or failed and
//!   no stream was found wanting, every stream carries it.

use std::time::Duration;

use super::{CaptureFailure, Incomplete, StreamCapture, StreamEnd};
use crate::lifecycle::event::CaptureStatus;
use crate::spool::SpoolRead;
use crate::spool::format::Stream;
use crate::supervisor::process::{DrainEnd, Drained, TerminalSummary};

/// A capture's per-stream buffers while it reads.
pub(super) struct Buffers {
    limit: usize,
    streams: Vec<Collecting>,
}

struct Collecting {
    stream: Stream,
    bytes: Vec<u8>,
    spool_bytes: u64,
    resume_cursor: u64,
    reasons: Vec<Incomplete>,
}

impl Collecting {
    fn new(stream: Stream) -> Self {
        Collecting {
            stream,
            bytes: Vec::new(),
            spool_bytes: 0,
            resume_cursor: 0,
            reasons: Vec::new(),
        }
    }

    /// Adds a reason unless one of its kind is there (the first of each kind is kept).
    fn incomplete(&mut self, reason: Incomplete) {
        let kind = std::mem::discriminant(&reason);
        if !self
            .reasons
            .iter()
            .any(|r| std::mem::discriminant(r) == kind)
        {
            self.reasons.push(reason);
        }
    }
    /// Takes the process-wide capture status the journal recorded as this stream's own: an
    /// incomplete one is a reason, a failed one the failure returned.
    fn adopt_recorded(&mut self, capture: &CaptureStatus) -> Option<CaptureFailure> {
        match capture {
            CaptureStatus::Complete => None,
            CaptureStatus::Incomplete(reason) => {
                self.incomplete(Incomplete::Recorded {
                    reason: reason.clone(),
                });
                None
            }
            CaptureStatus::Failed(reason) => Some(CaptureFailure::Recorded {
                reason: reason.clone(),
            }),
        }
    }

    fn into_capture(self, failure: Option<CaptureFailure>) -> StreamCapture {
        StreamCapture {
            stream: self.stream,
            end: match failure {
                Some(failure) => StreamEnd::Failed { failure },
                None if self.reasons.is_empty() => StreamEnd::Eof,
                None => StreamEnd::Incomplete {
                    reasons: self.reasons,
                },
            },
            bytes: self.bytes,
            spool_bytes: self.spool_bytes,
            resume_cursor: self.resume_cursor,
        }
    }
}

impl Buffers {
    pub(super) fn new(streams: &[Stream], limit: usize) -> Self {
        Buffers {
            limit,
            streams: streams.iter().map(|s| Collecting::new(*s)).collect(),
        }
    }

    fn stream_mut(&mut self, stream: Stream) -> &mut Collecting {
        let i = match self.streams.iter().position(|s| s.stream == stream) {
            Some(i) => i,
            // A stream the launch should not have: kept apart all the same, never mixed in.
            None => {
                self.streams.push(Collecting::new(stream));
                self.streams.len() - 1
            }
        };
        &mut self.streams[i]
    }

    /// Files one read's bytes by their spans; a hole it stepped over makes every stream
    /// incomplete (which stream's bytes it held is not known).
    pub(super) fn take(&mut self, read: &SpoolRead) {
        if let Some(skipped) = &read.skipped {
            for s in &mut self.streams {
                s.incomplete(Incomplete::Gap {
                    skipped: skipped.clone(),
                });
            }
        }
        let start = read.next_cursor - read.bytes.len() as u64;
        let limit = self.limit;
        for span in &read.spans {
            let from = usize::try_from(span.cursor - start).unwrap_or(usize::MAX);
            let Some(bytes) = read.bytes.get(from..from.saturating_add(span.len as usize)) else {
                continue;
            };
            let s = self.stream_mut(span.stream);
            s.spool_bytes += bytes.len() as u64;
            let room = limit - s.bytes.len();
            let kept = bytes.len().min(room);
            if kept > 0 {
                push_bounded(&mut s.bytes, &bytes[..kept], limit);
                s.resume_cursor = span.cursor + kept as u64;
            }
            if kept < bytes.len() {
                s.incomplete(Incomplete::LimitExceeded {
                    limit: limit as u64,
                });
            }
        }
    }

    /// Each stream's end, from what was read, the drain's account and the recorded status.
    pub(super) fn settle(
        self,
        summary: &TerminalSummary,
        read_failure: Option<&str>,
        cursor: u64,
    ) -> Vec<StreamCapture> {
        let settling = Settling {
            summary,
            read_failure,
            cursor,
        };
        let mut settled: Vec<_> = self
            .streams
            .into_iter()
            .map(|mut s| {
                let failure = settling.judge(&mut s);
                (s, failure)
            })
            .collect();
        // The recorded status is never contradicted: if it says incomplete or failed and no
        // stream was found wanting, every stream carries it.
        let wanting = settled
            .iter()
            .any(|(s, failure)| failure.is_some() || !s.reasons.is_empty());
        if !wanting {
            for (s, failure) in &mut settled {
                *failure = s.adopt_recorded(&summary.capture);
            }
        }
        settled
            .into_iter()
            .map(|(s, failure)| s.into_capture(failure))
            .collect()
    }
}

/// What every stream's end is settled against: the process's end, the failure that stopped
/// the capture's reads, and the cursor they reached.
struct Settling<'a> {
    summary: &'a TerminalSummary,
    read_failure: Option<&'a str>,
    cursor: u64,
}

impl Settling<'_> {
    /// How the drain left `stream` (`None`: the drain gave no account of it).
    fn drain_end(&self, stream: Stream) -> Option<&DrainEnd> {
        let Drained { first, stderr, .. } = self.summary.drained.as_ref()?;
        match stream {
            Stream::Stderr => stderr.as_ref(),
            s if s == first.0 => Some(&first.1),
            _ => None,
        }
    }

    /// Adds to `s` every reason it is incomplete, and returns why it failed, if it did.
    fn judge(&self, s: &mut Collecting) -> Option<CaptureFailure> {
        let final_drain_ms = self
            .summary
            .drained
            .as_ref()
            .map_or(0, |d| duration_ms(d.final_drain));
        let total = self.summary.bounds.total_bytes;
        let mut failure = self.read_failure.map(|message| CaptureFailure::SpoolRead {
            message: message.to_owned(),
        });
        if self.cursor < total {
            s.incomplete(Incomplete::Unread {
                from: self.cursor,
                to: total,
            });
        }
        match self.drain_end(s.stream) {
            Some(DrainEnd::Eof) => {}
            Some(DrainEnd::Open) => s.incomplete(Incomplete::DrainBound { final_drain_ms }),
            Some(DrainEnd::Failed(message)) => {
                failure.get_or_insert(CaptureFailure::Drain {
                    message: message.clone(),
                });
            }
            // No account of this stream from the drain: the recorded status speaks for all.
            None => failure = failure.or(s.adopt_recorded(&self.summary.capture)),
        }
        failure
    }
}

/// Appends `bytes` to `buf` without its capacity ever passing `limit` (a doubling `Vec` would
/// reserve up to twice what it holds).
fn push_bounded(buf: &mut Vec<u8>, bytes: &[u8], limit: usize) {
    let needed = buf.len() + bytes.len();
    if needed > buf.capacity() {
        let grown = (buf.capacity() * 2).max(needed).min(limit.max(needed));
        buf.reserve_exact(grown - buf.len());
    }
    buf.extend_from_slice(bytes);
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::{Skipped, Span};

    fn read(start: u64, spans: &[(Stream, &[u8])]) -> SpoolRead {
        let mut r = SpoolRead {
            next_cursor: start,
            ..SpoolRead::default()
        };
        for (stream, bytes) in spans {
            r.spans.push(Span {
                stream: *stream,
                cursor: r.next_cursor,
                len: bytes.len() as u32,
            });
            r.bytes.extend_from_slice(bytes);
            r.next_cursor += bytes.len() as u64;
        }
        r.total_bytes = r.next_cursor;
        r
    }

    /// Each stream keeps its own prefix of at most the limit, with the cursor after it, and
    /// counts every byte it saw; the buffer never reserves past the limit.
    #[test]
    fn streams_are_split_and_each_is_bounded() {
        let mut b = Buffers::new(&[Stream::Stdout, Stream::Stderr], 5);
        b.take(&read(
            0,
            &[
                (Stream::Stdout, b"abc"),
                (Stream::Stderr, b"E"),
                (Stream::Stdout, b"defg"),
            ],
        ));
        let out = &b.streams[0];
        assert_eq!(out.bytes, b"abcde");
        assert!(out.bytes.capacity() <= 5, "{}", out.bytes.capacity());
        assert_eq!((out.spool_bytes, out.resume_cursor), (7, 6));
        assert_eq!(out.reasons, vec![Incomplete::LimitExceeded { limit: 5 }]);
        let err = &b.streams[1];
        assert_eq!((err.bytes.as_slice(), err.reasons.len()), (&b"E"[..], 0));
    }

    #[test]
    fn a_hole_makes_every_stream_incomplete_once() {
        let mut b = Buffers::new(&[Stream::Terminal], 64);
        let mut r = read(10, &[(Stream::Terminal, b"x")]);
        r.skipped = Some(Skipped::gap(
            0,
            10,
            crate::spool::loss::LossReason::Retention,
            0,
        ));
        b.take(&r);
        b.take(&r);
        assert_eq!(b.streams[0].reasons.len(), 1);
        assert!(matches!(b.streams[0].reasons[0], Incomplete::Gap { .. }));
    }
}
