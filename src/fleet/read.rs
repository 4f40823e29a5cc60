//! Reading what the nodes shipped, from the server alone: a process's output (`fleet logs`) and
//! the nodes' journal records (`fleet events`).
//!
//! Invariant: everything read is decoded by `wire`'s total decoders; a message that does not
//! decode is reported as such (an `Undecodable` part or event), never guessed at or skipped.

use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use async_nats::jetstream::{self, Context, stream};
use futures_util::StreamExt;
use serde::Serialize;

use super::FleetConfig;
use super::status::{FleetReader, StatusError, connect, nats};
use super::wire::{self, NodeName};
use crate::lifecycle::{Handle, LifecycleEvent};

/// The reason of a gap the fleet's output stream made: its retention removed the messages.
pub const STREAM_DROPPED: &str = "dropped by the fleet's output retention";

/// One message of a process's output subject, as a reader gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputPart {
    /// The cursors it covers: `cursor..end`.
    pub cursor: u64,
    pub end: u64,
    /// `stdout`, `stderr` or `terminal` for bytes; `None` for a gap.
    pub stream: Option<String>,
    #[serde(skip)]
    pub bytes: Vec<u8>,
    /// Why the cursors of a gap were not kept.
    pub gap: Option<String>,
}

/// Where a read of a stream starts: its first message, a stream seq, or (not following) nowhere:
/// nothing of the subject is left to read.
#[derive(Debug, Clone, Copy)]
enum From {
    First,
    StreamSeq(u64),
    Past,
}

/// Every message on `subject` of `stream` from `from` up to the subject's last message when the
/// read began (and after it while `follow` says so), in order.
async fn consume_from(
    stream: &stream::Stream,
    subject: &str,
    from: From,
    follow: bool,
    mut each: impl FnMut(&jetstream::Message) -> Result<bool, StatusError>,
) -> Result<(), StatusError> {
    let last = match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => m.sequence,
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound && !follow => {
            return Ok(());
        }
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => 0,
        Err(e) => return Err(nats(e)),
    };
    let deliver_policy = match from {
        From::First => DeliverPolicy::All,
        From::StreamSeq(start_sequence) => DeliverPolicy::ByStartSequence { start_sequence },
        From::Past if follow => DeliverPolicy::ByStartSequence {
            start_sequence: last + 1,
        },
        From::Past => return Ok(()),
    };
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: subject.to_owned(),
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(nats)?;
    let mut messages = consumer.messages().await.map_err(nats)?;
    while let Some(message) = messages.next().await {
        let message = message.map_err(nats)?;
        let seq = message.info().map_err(nats)?.stream_sequence;
        if !each(&message)? {
            return Ok(());
        }
        if !follow && seq >= last {
            return Ok(());
        }
    }
    Ok(())
}

/// A header of `message`, if it has one.
fn header(message: &jetstream::Message, name: &str) -> Option<String> {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
}

/// One output message, decoded.
fn output_part(message: &jetstream::Message) -> Result<OutputPart, StatusError> {
    let get = |name: &str| header(message, name);
    let undecodable = |e: wire::WireError| StatusError::Nats(format!("an output message: {e}"));
    let cursor_text = get(wire::H_CURSOR);
    let gap_to = get(wire::H_GAP_TO);
    let end = wire::decode_output_end(
        cursor_text.as_deref(),
        gap_to.as_deref(),
        message.payload.len(),
    )
    .map_err(undecodable)?;
    let cursor = wire::decode_cursor(wire::H_CURSOR, cursor_text.as_deref().unwrap_or(""))
        .map_err(undecodable)?;
    Ok(OutputPart {
        cursor,
        end,
        stream: gap_to
            .is_none()
            .then(|| get(wire::H_STREAM).unwrap_or_default()),
        bytes: message.payload.to_vec(),
        gap: gap_to.map(|_| get(wire::H_GAP_REASON).unwrap_or_default()),
    })
}

/// `handle`'s output on `node` from `cursor` on, part by part (the first trimmed to start at
/// `cursor`); with `follow`, also what is shipped after the read began, until `each` says stop.
/// Returns the cursor after the last part.
pub async fn read_output(
    config: &FleetConfig,
    node: &NodeName,
    handle: &Handle,
    cursor: u64,
    follow: bool,
    each: impl FnMut(&OutputPart) -> bool,
) -> Result<u64, StatusError> {
    let reader = FleetReader::connect(config).await?;
    reader.output(node, handle, cursor, follow, each).await
}

impl FleetReader {
    /// [`read_output`] on this reader's connection.
    pub async fn output(
        &self,
        node: &NodeName,
        handle: &Handle,
        cursor: u64,
        follow: bool,
        each: impl FnMut(&OutputPart) -> bool,
    ) -> Result<u64, StatusError> {
        output_on(&self.js, node, handle, cursor, follow, each).await
    }
}

async fn output_on(
    js: &Context,
    node: &NodeName,
    handle: &Handle,
    cursor: u64,
    follow: bool,
    mut each: impl FnMut(&OutputPart) -> bool,
) -> Result<u64, StatusError> {
    let mut next = cursor;
    let subject = node.output_subject(handle);
    let mut stream: stream::Stream = js.get_stream(node.output_stream()).await.map_err(nats)?;
    let from = if cursor == 0 {
        From::First
    } else {
        let first = stream.info().await.map_err(nats)?.state.first_sequence;
        first_ending_after(&stream, &subject, first, cursor).await?
    };
    consume_from(&stream, &subject, from, follow, |message| {
        let mut part = output_part(message)?;
        if part.end <= next {
            return Ok(true);
        }
        if part.cursor > next {
            // The stream's own retention removed the messages before this one.
            let dropped = OutputPart {
                cursor: next,
                end: part.cursor,
                stream: None,
                bytes: Vec::new(),
                gap: Some(STREAM_DROPPED.to_owned()),
            };
            next = part.cursor;
            if !each(&dropped) {
                return Ok(false);
            }
        }
        if part.cursor < next {
            if part.gap.is_none() {
                part.bytes.drain(..(next - part.cursor) as usize);
            }
            part.cursor = next;
        }
        next = part.end;
        Ok(each(&part))
    })
    .await?;
    Ok(next)
}

/// Where a read of `subject` from `cursor` starts: the stream seq of the subject's first message
/// (at or after stream seq `first`) whose output ends after `cursor`, or [`From::Past`] when
/// none does. A subject's messages follow its cursors, so whether the subject's
/// first message at or after a stream seq ends after `cursor` only turns from no to yes as the
/// seq grows: a binary search over the stream's seqs finds the start in O(log n) reads, where
/// reading the subject from its first message to the cursor took one read per message before.
async fn first_ending_after(
    stream: &stream::Stream,
    subject: &str,
    first: u64,
    cursor: u64,
) -> Result<From, StatusError> {
    let last = match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => m.sequence,
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
            return Ok(From::First);
        }
        Err(e) => return Err(nats(e)),
    };
    let (mut lo, mut hi) = (first, last.saturating_add(1));
    // The least stream seq known to hold a message that ends after `cursor`.
    let mut found = hi;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let message = match stream.get_first_raw_message_by_subject(subject, mid).await {
            Ok(m) => m,
            // Nothing of the subject from `mid` on: every answer lies below `mid`.
            Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => {
                hi = mid;
                continue;
            }
            Err(e) => return Err(nats(e)),
        };
        let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
        let end = wire::decode_output_end(
            header(wire::H_CURSOR).as_deref(),
            header(wire::H_GAP_TO).as_deref(),
            message.payload.len(),
        )
        .map_err(|e| StatusError::Nats(format!("output message {}: {e}", message.sequence)))?;
        if end > cursor {
            found = found.min(message.sequence);
            hi = mid;
        } else {
            lo = message.sequence.max(mid) + 1;
        }
    }
    Ok(if found > last {
        From::Past
    } else {
        From::StreamSeq(found)
    })
}

/// One message of a node's record stream, as `fleet events` shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShippedEvent {
    pub node: String,
    pub journal: String,
    /// The record's seq; for a gap, its last.
    pub seq: u64,
    pub event_id: Option<String>,
    pub kind: Option<u16>,
    /// The lifecycle event, decoded, as `journal dump --json` shows it (`None` for another kind
    /// or a payload that does not decode).
    pub event: Option<serde_json::Value>,
    /// A gap: the first seq it covers, and why its records were not shipped.
    pub gap_from: Option<u64>,
    pub gap_reason: Option<String>,
}

fn shipped_event(node: &str, message: &jetstream::Message) -> Result<ShippedEvent, StatusError> {
    let get = |name: &str| header(message, name);
    let at = wire::decode_shipped(get(wire::H_JOURNAL).as_deref(), get(wire::H_SEQ).as_deref())
        .map_err(|e| StatusError::Nats(format!("a record of {node}: {e}")))?;
    let kind = get(wire::H_KIND).and_then(|k| k.parse::<u16>().ok());
    let codec = get(wire::H_CODEC).and_then(|c| c.parse::<u8>().ok());
    let event = match (kind, codec) {
        (Some(kind), Some(codec)) if LifecycleEvent::is_lifecycle_kind(kind) => {
            LifecycleEvent::decode(kind, codec, &message.payload)
                .ok()
                .and_then(|e| serde_json::to_value(e).ok())
        }
        _ => None,
    };
    Ok(ShippedEvent {
        node: node.to_owned(),
        journal: wire::journal_hex(&at.journal_id),
        seq: at.seq,
        event_id: get(wire::H_EVENT_ID),
        kind,
        event,
        gap_from: get(wire::H_GAP_FROM).and_then(|f| wire::decode_seq(wire::H_GAP_FROM, &f).ok()),
        gap_reason: get(wire::H_GAP_REASON),
    })
}

/// Every shipped record of `node` after journal seq `after` (0: from the first), in order;
/// with `follow`, also those shipped later, until `each` says stop.
pub async fn read_events(
    config: &FleetConfig,
    node: &NodeName,
    after: u64,
    follow: bool,
    mut each: impl FnMut(&ShippedEvent) -> bool,
) -> Result<(), StatusError> {
    let js = connect(config).await?;
    let name = node.to_string();
    let mut stream = js.get_stream(node.events_stream()).await.map_err(nats)?;
    let state = stream.info().await.map_err(nats)?.state.clone();
    let from = if after == 0 {
        From::First
    } else {
        match first_after(&stream, state.first_sequence, state.last_sequence, after).await? {
            Some(seq) => From::StreamSeq(seq),
            None if follow => From::StreamSeq(state.last_sequence + 1),
            None => return Ok(()),
        }
    };
    let subject = node.events_subject();
    consume_from(&stream, &subject, from, follow, |message| {
        Ok(each(&shipped_event(&name, message)?))
    })
    .await
}

/// The stream seq of the first message in `first..=last` that covers a journal seq above
/// `after`. A node's messages are in journal seq order, so a binary search finds it in
/// O(log n) reads instead of reading the stream from its start.
async fn first_after(
    stream: &stream::Stream,
    first: u64,
    last: u64,
    after: u64,
) -> Result<Option<u64>, StatusError> {
    let (mut lo, mut hi) = (first, last.saturating_add(1));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let covers = match stream.get_raw_message(mid).await {
            Ok(m) => {
                let seq = m.headers.get(wire::H_SEQ).map(|v| v.as_str().to_owned());
                wire::decode_seq(wire::H_SEQ, seq.as_deref().unwrap_or(""))
                    .map_err(|e| StatusError::Nats(format!("stream seq {mid}: {e}")))?
            }
            // Removed by the stream's limits, which remove the oldest: below any answer.
            Err(_) => 0,
        };
        if covers > after {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok((lo <= last).then_some(lo))
}

/// How long a follower waits between looks at a process's state.
pub const FOLLOW_POLL: Duration = Duration::from_millis(500);
