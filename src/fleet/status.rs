//! What a fleet's server says of every node, read from NATS alone (`procjournal fleet status`):
//! for each node's stream, what it holds and where it ends, and the node's last heartbeat.
//!
//! Invariant: a node is `live` only while its last heartbeat is younger than three of its own
//! intervals; a node whose heartbeat is older or missing reads as `unknown`, never as what it
//! last said (its processes may have ended, or it may be gone).

use std::time::Duration;

use async_nats::jetstream::{self, Context};
use futures_util::StreamExt;
use serde::Serialize;

use super::wire::{self, Shipped};
use super::{FleetConfig, Heartbeat, now_unix_ms};

/// Heartbeats older than this many of the node's intervals read as `unknown`.
const SILENT_AFTER_INTERVALS: u64 = 3;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeStatus {
    pub node: String,
    /// `live` or `unknown` (module doc).
    pub state: &'static str,
    /// The journal the stream's last message is of, and the highest seq it covers.
    pub journal: Option<String>,
    pub shipped_seq: u64,
    /// Messages the stream holds now, and its last stream seq.
    pub messages: u64,
    pub stream_seq: u64,
    /// From the last heartbeat: the journal's last seq, and how far the stream is behind it.
    pub head_seq: Option<u64>,
    pub lag: Option<u64>,
    pub heartbeat_age_ms: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    #[error("cannot connect to {url}: {cause}")]
    Connect { url: String, cause: String },
    #[error("{0}")]
    Nats(String),
}

pub(super) fn nats(e: impl std::fmt::Display) -> StatusError {
    StatusError::Nats(e.to_string())
}

/// A reader's connection to the server (no retry: a reader wants an answer now).
pub(super) async fn connect(config: &FleetConfig) -> Result<Context, StatusError> {
    let refused = |cause: String| StatusError::Connect {
        url: config.redacted_url(),
        cause,
    };
    let client = config
        .options()
        .await
        .map_err(refused)?
        .connection_timeout(Duration::from_secs(5))
        .connect(config.url.as_str())
        .await
        .map_err(|e| refused(e.to_string()))?;
    Ok(jetstream::new(client))
}

/// Every node the server holds a stream of, by name.
pub async fn fleet_status(config: &FleetConfig) -> Result<Vec<NodeStatus>, StatusError> {
    let js = connect(config).await?;
    node_statuses(&js).await
}

async fn node_statuses(js: &Context) -> Result<Vec<NodeStatus>, StatusError> {
    let mut names = Vec::new();
    let mut listed = js.stream_names();
    while let Some(name) = listed.next().await {
        let name = name.map_err(nats)?;
        if let Some(node) = name.strip_prefix(wire::EVENTS_STREAM_PREFIX) {
            names.push(node.to_owned());
        }
    }
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for node in names {
        out.push(node_status(js, node).await?);
    }
    Ok(out)
}

async fn node_status(js: &Context, node: String) -> Result<NodeStatus, StatusError> {
    let name = format!("{}{node}", wire::EVENTS_STREAM_PREFIX);
    let mut stream = js.get_stream(&name).await.map_err(nats)?;
    let state = stream.info().await.map_err(nats)?.state.clone();
    let shipped = last_shipped(&stream, state.last_sequence).await;
    let beat = last_heartbeat(js, &node).await;
    let now = now_unix_ms();
    let age = beat.as_ref().map(|b| now.saturating_sub(b.unix_ms));
    let live = match (&beat, age) {
        (Some(b), Some(age)) => age <= b.interval_ms.max(1) * SILENT_AFTER_INTERVALS,
        _ => false,
    };
    let shipped_seq = shipped.map_or(0, |s| s.seq);
    let same_journal =
        |b: &Heartbeat| shipped.is_some_and(|s| wire::journal_hex(&s.journal_id) == b.journal);
    Ok(NodeStatus {
        state: if live { "live" } else { "unknown" },
        journal: shipped.map(|s| wire::journal_hex(&s.journal_id)),
        shipped_seq,
        messages: state.messages,
        stream_seq: state.last_sequence,
        head_seq: beat.as_ref().map(|b| b.head_seq),
        lag: beat
            .as_ref()
            .and_then(|b| lag(b, shipped_seq, same_journal(b))),
        heartbeat_age_ms: age,
        node,
    })
}

/// How far the stream is behind the journal the heartbeat describes; `None` when the heartbeat
/// is older than what the stream holds (the node appended since: its next heartbeat says).
fn lag(beat: &Heartbeat, shipped_seq: u64, same_journal: bool) -> Option<u64> {
    if !same_journal {
        return Some(beat.head_seq);
    }
    beat.head_seq.checked_sub(shipped_seq)
}

async fn last_shipped(stream: &jetstream::stream::Stream, last: u64) -> Option<Shipped> {
    if last == 0 {
        return None;
    }
    let message = stream.get_raw_message(last).await.ok()?;
    let get = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
    wire::decode_shipped(get(wire::H_JOURNAL).as_deref(), get(wire::H_SEQ).as_deref()).ok()
}

async fn last_heartbeat(js: &Context, node: &str) -> Option<Heartbeat> {
    let stream = js.get_stream(wire::HEARTBEAT_STREAM).await.ok()?;
    let subject = format!("{}{node}", wire::HEARTBEAT_SUBJECT_PREFIX);
    let message = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .ok()?;
    serde_json::from_slice::<Heartbeat>(&message.payload).ok()
}

/// One process of the fleet, as `fleet ps` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetProcess {
    pub node: String,
    /// The state to believe: the recorded one, except that a process its node last recorded as
    /// live reads `unknown` while the node is not `live` (module doc).
    pub state: String,
    /// What the node last recorded, and the journal seq that record was shipped at.
    pub recorded_state: String,
    pub seq: u64,
    /// The protocol's process object, as the node last recorded it.
    pub process: serde_json::Value,
}

/// Every process of the fleet's state (of `node` alone when given), by node and number.
pub async fn fleet_processes(
    config: &FleetConfig,
    node: Option<&str>,
) -> Result<Vec<FleetProcess>, StatusError> {
    let js = connect(config).await?;
    let live: std::collections::BTreeSet<String> = node_statuses(&js)
        .await?
        .into_iter()
        .filter(|n| n.state == "live")
        .map(|n| n.node)
        .collect();
    let Ok(store) = js.get_key_value(super::state::BUCKET).await else {
        return Ok(Vec::new());
    };
    let mut keys = store.keys().await.map_err(nats)?;
    let mut out = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(nats)?;
        if node.is_some_and(|n| !key.starts_with(&format!("{n}."))) {
            continue;
        }
        let Some(value) = store.get(&key).await.map_err(nats)? else {
            continue;
        };
        // An entry that does not decode is not this crate's; it is passed over.
        let Ok(entry) = serde_json::from_slice::<super::state::ProcessEntry>(&value) else {
            continue;
        };
        let recorded = entry.process["state"].as_str().unwrap_or("").to_owned();
        let running = matches!(recorded.as_str(), "starting" | "running");
        out.push(FleetProcess {
            state: if running && !live.contains(&entry.node) {
                "unknown".to_owned()
            } else {
                recorded.clone()
            },
            node: entry.node,
            recorded_state: recorded,
            seq: entry.seq,
            process: entry.process,
        });
    }
    out.sort_by(|a, b| {
        (&a.node, a.process["number"].as_u64()).cmp(&(&b.node, b.process["number"].as_u64()))
    });
    Ok(out)
}

/// A reader's connection to a fleet's server, for several reads (`fleet logs -f` asks for a
/// process's entry every half second: one connection, not one a poll).
#[derive(Debug, Clone)]
pub struct FleetReader {
    pub(super) js: Context,
}

impl FleetReader {
    pub async fn connect(config: &FleetConfig) -> Result<Self, StatusError> {
        Ok(FleetReader {
            js: connect(config).await?,
        })
    }

    /// The fleet state's entry of one process, if the server holds one.
    pub async fn process(
        &self,
        node: &super::NodeName,
        handle: &crate::lifecycle::Handle,
    ) -> Result<Option<super::state::ProcessEntry>, StatusError> {
        let Ok(store) = self.js.get_key_value(super::state::BUCKET).await else {
            return Ok(None);
        };
        let key = super::state::key(node, handle);
        let Some(value) = store.get(&key).await.map_err(nats)? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice(&value).ok())
    }
}

/// The fleet state's entry of one process, if the server holds one.
pub async fn fleet_process(
    config: &FleetConfig,
    node: &super::NodeName,
    handle: &crate::lifecycle::Handle,
) -> Result<Option<super::state::ProcessEntry>, StatusError> {
    FleetReader::connect(config)
        .await?
        .process(node, handle)
        .await
}
