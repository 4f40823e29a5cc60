//! The fleet's tools (`procjournal mcp --fleet URL`): what a NATS JetStream server holds of the
//! nodes that ship to it, read from the server alone, as `procjournal fleet` reads it
//! (docs/fleet.md). They are listed only when the server was given a fleet, after the root's own
//! tools, and they only read.
//!
//! Invariants: as for every tool, a bad argument or an unreachable server is a tool result with
//! `isError` and a `code: message` text, never a protocol error; every result is bounded (a page
//! of output of at most `max_bytes`, at most `limit` events), and leaves out its null members.

use std::sync::Arc;

use rmcp::handler::server::tool::{schema_for_input, schema_for_output};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema;
use crate::fleet::{FleetConfig, FleetProcess, NodeName, NodeStatus, ShippedEvent};
use crate::lifecycle::Handle;

/// Output bytes a `fleet_logs` page holds unless told otherwise, and at most.
const PAGE_BYTES_DEFAULT: u64 = 64 * 1024;
const PAGE_BYTES_MAX: u64 = 1024 * 1024;
/// Events a `fleet_events` call returns unless told otherwise, and at most.
const EVENTS_DEFAULT: u32 = 100;
const EVENTS_MAX: u32 = 1000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StatusArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PsArgs {
    node: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LogsArgs {
    node: String,
    handle: String,
    cursor: Option<u64>,
    #[schemars(range(min = 1, max = 1048576))]
    max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EventsArgs {
    node: String,
    after_seq: Option<u64>,
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct StatusResult {
    nodes: Vec<NodeStatus>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct PsResult {
    processes: Vec<FleetProcess>,
}

/// A page of a process's output as the server holds it.
#[derive(Debug, Serialize, JsonSchema)]
struct LogsResult {
    /// The page as safe text.
    text: String,
    cursor: u64,
    /// Where the next page starts; equal to `cursor` when the server holds nothing more yet.
    next_cursor: u64,
    /// Cursors the node did not keep before they were shipped (or the fleet's output stream
    /// dropped), with the reason.
    gaps: Vec<Gap>,
    /// Every byte the process wrote, as its node last recorded it (absent when the fleet state
    /// has no entry for it).
    total_bytes: Option<u64>,
    /// `cursor` is beyond `total_bytes`: nothing to read there.
    cursor_ahead: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Gap {
    from: u64,
    to: u64,
    reason: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct EventsResult {
    events: Vec<ShippedEvent>,
    /// The seq to pass as `after_seq` for the next events.
    last_seq: u64,
}

type InputSchema = fn() -> Result<Arc<JsonObject>, String>;
type OutputSchema = fn() -> Arc<JsonObject>;
/// A fleet tool: name, description, input schema, output schema.
type Spec = (&'static str, &'static str, InputSchema, OutputSchema);

const TOOLS: [Spec; 4] = [
    (
        "fleet_status",
        "Every node shipping to the fleet: shipped seq, lag, heartbeat age, live or unknown.",
        schema_for_input::<StatusArgs>,
        schema_for_output::<StatusResult>,
    ),
    (
        "fleet_ps",
        "Every process of every node (or `node`'s) as its node last recorded it; a process \
         recorded as running on a node that is not live reads `unknown`.",
        schema_for_input::<PsArgs>,
        schema_for_output::<PsResult>,
    ),
    (
        "fleet_logs",
        "A page of a process's output from the fleet (`node`, `handle`, from `cursor`): pass \
         `next_cursor` back to continue; `gaps` are output its node did not keep.",
        schema_for_input::<LogsArgs>,
        schema_for_output::<LogsResult>,
    ),
    (
        "fleet_events",
        "The journal records `node` shipped, in order, after `after_seq` (at most `limit`).",
        schema_for_input::<EventsArgs>,
        schema_for_output::<EventsResult>,
    ),
];

/// The fleet tools' definitions.
pub(super) fn tools() -> Result<Vec<Tool>, String> {
    TOOLS
        .iter()
        .map(|(name, description, input, output)| {
            let mut input = schema::input(&*input()?);
            input
                .entry("properties")
                .or_insert_with(|| Value::Object(JsonObject::new()));
            let output = Arc::new(schema::output(&output()));
            let annotations = ToolAnnotations::new().open_world(false).read_only(true);
            Ok(Tool::new(*name, *description, Arc::new(input))
                .with_raw_output_schema(output)
                .with_annotations(annotations))
        })
        .collect()
}

/// Whether `name` is a fleet tool.
pub(super) fn is_fleet_tool(name: &str) -> bool {
    TOOLS.iter().any(|(n, ..)| *n == name)
}

fn bad_args(message: impl std::fmt::Display) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("bad_args: {message}"))])
}

fn failed(message: impl std::fmt::Display) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("fleet: {message}"))])
}

fn structured(result: impl Serialize) -> CallToolResult {
    match serde_json::to_value(result) {
        Ok(mut value) => {
            schema::drop_nulls(&mut value);
            CallToolResult::structured(value)
        }
        Err(e) => failed(e),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    arguments: Option<JsonObject>,
) -> Result<T, CallToolResult> {
    let args = Value::Object(arguments.unwrap_or_default());
    serde_json::from_value(args).map_err(bad_args)
}

/// Runs fleet tool `name` against `config`'s server.
pub(super) async fn call(
    config: &FleetConfig,
    name: &str,
    arguments: Option<JsonObject>,
) -> CallToolResult {
    let result = match name {
        "fleet_status" => status(config, arguments).await,
        "fleet_ps" => ps(config, arguments).await,
        "fleet_logs" => logs(config, arguments).await,
        _ => events(config, arguments).await,
    };
    result.unwrap_or_else(|refused| refused)
}

async fn status(
    config: &FleetConfig,
    arguments: Option<JsonObject>,
) -> Result<CallToolResult, CallToolResult> {
    let StatusArgs {} = decode(arguments)?;
    let nodes = crate::fleet::fleet_status(config).await.map_err(failed)?;
    Ok(structured(StatusResult { nodes }))
}

async fn ps(
    config: &FleetConfig,
    arguments: Option<JsonObject>,
) -> Result<CallToolResult, CallToolResult> {
    let args: PsArgs = decode(arguments)?;
    let processes = crate::fleet::fleet_processes(config, args.node.as_deref())
        .await
        .map_err(failed)?;
    Ok(structured(PsResult { processes }))
}

async fn logs(
    config: &FleetConfig,
    arguments: Option<JsonObject>,
) -> Result<CallToolResult, CallToolResult> {
    let args: LogsArgs = decode(arguments)?;
    let node = NodeName::new(&args.node).map_err(bad_args)?;
    let handle: Handle = args
        .handle
        .parse()
        .map_err(|e| bad_args(format!("handle: {e}")))?;
    let max = args
        .max_bytes
        .unwrap_or(PAGE_BYTES_DEFAULT)
        .clamp(1, PAGE_BYTES_MAX) as usize;
    let cursor = args.cursor.unwrap_or(0);
    let reader = crate::fleet::FleetReader::connect(config)
        .await
        .map_err(failed)?;
    let recorded = reader.process(&node, &handle).await.map_err(failed)?;
    let total_bytes = recorded.and_then(|e| e.process["total_bytes"].as_u64());
    if total_bytes.is_some_and(|t| cursor > t) {
        let (text, next_cursor, gaps, cursor_ahead) = (String::new(), cursor, Vec::new(), true);
        let page = LogsResult {
            text,
            cursor,
            next_cursor,
            gaps,
            total_bytes,
            cursor_ahead,
        };
        return Ok(structured(page));
    }
    let (mut bytes, mut gaps, mut next) = (Vec::new(), Vec::new(), cursor);
    reader
        .output(&node, &handle, cursor, false, |part| {
            match &part.gap {
                Some(reason) => gaps.push(Gap {
                    from: part.cursor,
                    to: part.end,
                    reason: reason.clone(),
                }),
                None => {
                    let room = max - bytes.len();
                    let take = part.bytes.len().min(room);
                    bytes.extend_from_slice(&part.bytes[..take]);
                    next = part.cursor + take as u64;
                    return bytes.len() < max;
                }
            }
            next = part.end;
            bytes.len() < max
        })
        .await
        .map_err(failed)?;
    let text = crate::spool::render::safe_text(&bytes, true).text;
    let cursor_ahead = false;
    let page = LogsResult {
        text,
        cursor,
        next_cursor: next,
        gaps,
        total_bytes,
        cursor_ahead,
    };
    Ok(structured(page))
}

async fn events(
    config: &FleetConfig,
    arguments: Option<JsonObject>,
) -> Result<CallToolResult, CallToolResult> {
    let args: EventsArgs = decode(arguments)?;
    let node = NodeName::new(&args.node).map_err(bad_args)?;
    let after = args.after_seq.unwrap_or(0);
    let limit = args.limit.unwrap_or(EVENTS_DEFAULT).clamp(1, EVENTS_MAX) as usize;
    let mut events = Vec::new();
    crate::fleet::read_events(config, &node, after, false, |event| {
        if event.seq > after {
            events.push(event.clone());
        }
        events.len() < limit
    })
    .await
    .map_err(failed)?;
    let last_seq = events.last().map_or(after, |e| e.seq);
    Ok(structured(EventsResult { events, last_seq }))
}
