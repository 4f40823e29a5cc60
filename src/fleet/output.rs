//! Output shipping: each process's output, in bounded chunks tagged with their combined cursor,
//! to the node's output stream `PJ_OUT_<node>`, one subject per process (docs/fleet.md, "The
//! output stream"); what the node's retention removed (or the node could not read) before it was
//! shipped is a gap message with its reason, never skipped.
//!
//! Invariants: the messages of one process's subject cover its cursors `0..` without a hole or an
//! overlap, in order (each starts where the previous ended); every publish names the subject's
//! last stream seq it follows (`Nats-Expected-Last-Subject-Sequence`), so a retry or a second
//! shipper is refused, never stored twice; where a process's output resumes is its subject's last
//! message. The per-process positions kept in memory are a bounded cache ([`POSITIONS_MAX`]).

use std::collections::HashMap;

use async_nats::HeaderMap;
use async_nats::jetstream::{Context, stream};

use super::wire::{self, NodeName};
use crate::lifecycle::Handle;
use crate::spool::format::Stream;
use crate::supervisor::{Supervisor, SupervisorError};

/// Bytes of output in one message, at most (the server's default `max_payload` is 1 MiB).
pub const CHUNK_BYTES_MAX: usize = 64 * 1024;
/// Reads of one process's output per call (64 of up to 64 KiB: 4 MiB), so that a large output is
/// shipped in slices between the records that arrive meanwhile.
const SLICE_READS: usize = 64;
/// Processes whose shipping position is remembered before the cache is emptied.
const POSITIONS_MAX: usize = 4096;

/// How far a call of [`OutputShipper::ship`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Progress {
    /// Everything up to the recorded total is in the stream.
    Done,
    /// A slice was shipped; there is more.
    More,
    /// The spool gave nothing more before the recorded total (it should not: a record states
    /// output already written); the next record of the process, or the next pass, tries again.
    Stalled,
}

/// Where one process's output stands on the server.
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    /// The cursor after the last byte (or gap) shipped.
    next: u64,
    /// The stream seq of the subject's last message (0: none).
    subject_seq: u64,
}

/// The name of a stream (one byte string, for the header).
pub fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
        Stream::Terminal => "terminal",
    }
}

pub(super) struct OutputShipper {
    node: NodeName,
    positions: HashMap<Handle, Position>,
}

/// The output stream of `node`, made if missing, keeping at most `max_bytes` (the oldest
/// messages go first; a reader finds what went as a gap).
pub(super) async fn output_stream(
    js: &Context,
    node: &NodeName,
    max_bytes: u64,
) -> Result<(), String> {
    js.get_or_create_stream(stream::Config {
        name: node.output_stream(),
        subjects: vec![format!("{}.*", node.output_subject_prefix())],
        storage: stream::StorageType::File,
        max_bytes: i64::try_from(max_bytes).unwrap_or(i64::MAX),
        discard: stream::DiscardPolicy::Old,
        ..Default::default()
    })
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

impl OutputShipper {
    pub(super) fn new(node: NodeName) -> Self {
        OutputShipper {
            node,
            positions: HashMap::new(),
        }
    }

    /// Ships `handle`'s output up to `upto` (its recorded total), at most [`SLICE_READS`]
    /// reads of it.
    pub(super) async fn ship(
        &mut self,
        js: &Context,
        supervisor: &Supervisor,
        handle: Handle,
        upto: u64,
    ) -> Result<Progress, String> {
        let subject = self.node.output_subject(&handle);
        let mut at = match self.positions.get(&handle) {
            Some(p) => *p,
            None => resume(js, &self.node, &subject).await?,
        };
        let mut reads = 0;
        while at.next < upto && reads < SLICE_READS {
            reads += 1;
            let read = supervisor
                .output_raw(&handle, at.next, CHUNK_BYTES_MAX)
                .await;
            let read = match read {
                Ok(read) => read,
                Err(SupervisorError::Retired { reason, .. }) => {
                    let why = format!("retired: {reason}");
                    at = publish_gap(js, &subject, &handle, at, upto, &why).await?;
                    break;
                }
                Err(e) => return Err(e.to_string()),
            };
            let before = at.next;
            if let Some(skipped) = &read.skipped {
                let to = skipped.to.min(upto);
                at = publish_gap(js, &subject, &handle, at, to, &skipped.reason).await?;
            }
            for span in &read.spans {
                let from = (span.cursor - read.spans[0].cursor) as usize;
                let bytes = &read.bytes[from..from + span.len as usize];
                at = publish_chunk(js, &subject, &handle, at, span.stream, bytes).await?;
            }
            if at.next == before {
                break; // nothing more to read yet (the spool is behind the record)
            }
        }
        if self.positions.len() >= POSITIONS_MAX {
            self.positions.clear();
        }
        self.positions.insert(handle, at);
        Ok(if at.next >= upto {
            Progress::Done
        } else if reads < SLICE_READS {
            Progress::Stalled
        } else {
            Progress::More
        })
    }

    /// Forgets where `handle` stands (after a refusal: the subject is read again next time).
    pub(super) fn forget(&mut self, handle: &Handle) {
        self.positions.remove(handle);
    }
}

/// Where a subject's output ends: its last message's cursor and length (or gap end).
async fn resume(js: &Context, node: &NodeName, subject: &str) -> Result<Position, String> {
    let stream = js
        .get_stream(node.output_stream())
        .await
        .map_err(|e| e.to_string())?;
    let message = match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => m,
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
            return Ok(Position::default());
        }
        Err(e) => return Err(e.to_string()),
    };
    let get = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
    let next = wire::decode_output_end(
        get(wire::H_CURSOR).as_deref(),
        get(wire::H_GAP_TO).as_deref(),
        message.payload.len(),
    )
    .map_err(|e| format!("{subject}: its last message: {e}"))?;
    Ok(Position {
        next,
        subject_seq: message.sequence,
    })
}

async fn publish(
    js: &Context,
    subject: &str,
    at: Position,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    next: u64,
) -> Result<Position, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(name, value.as_str());
    }
    map.insert(
        wire::H_EXPECTED_LAST_SUBJECT_SEQ,
        at.subject_seq.to_string().as_str(),
    );
    let ack = js
        .publish_with_headers(subject.to_owned(), map, body.into())
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    if ack.duplicate {
        return Err(format!("{subject}: cursor {} was already stored", at.next));
    }
    Ok(Position {
        next,
        subject_seq: ack.sequence,
    })
}

async fn publish_chunk(
    js: &Context,
    subject: &str,
    handle: &Handle,
    at: Position,
    stream: Stream,
    bytes: &[u8],
) -> Result<Position, String> {
    let headers = wire::chunk_headers(handle, at.next, stream_name(stream));
    let next = at.next + bytes.len() as u64;
    publish(js, subject, at, headers, bytes.to_vec(), next).await
}

async fn publish_gap(
    js: &Context,
    subject: &str,
    handle: &Handle,
    at: Position,
    to: u64,
    reason: &str,
) -> Result<Position, String> {
    if to <= at.next {
        return Ok(at);
    }
    tracing::warn!(
        "fleet: output {}..{to} of {handle} was not kept ({reason}): shipped as a gap",
        at.next
    );
    let headers = wire::output_gap_headers(handle, at.next, to, reason);
    publish(js, subject, at, headers, Vec::new(), to).await
}
