//! The Model Context Protocol server behind `procjournal mcp`: the supervision of a runtime root,
//! offered to an agent harness as tools over stdio (JSON-RPC, one message per line,
//! [`transport`]).
//!
//! Two backends run the tools. Attached (the default), the server is a client of the root's
//! daemon (`procjournal serve`, started when none runs), so the processes it starts belong to the
//! daemon and outlive this server: MCP clients such as the Inspector start a new server for every
//! call. Standalone (`--standalone`), the server runs its own supervisor, whose processes end
//! with it. The instructions the agent gets at `initialize` say which.
//!
//! Every tool is a thin adapter over the request protocol ([`crate::protocol`]): its input schema
//! is the JSON Schema of the protocol's argument struct, [`decode_call`] looks the tool up and
//! validates its arguments with [`protocol::request_from_args`] into a [`ToolCall`] (the only
//! value a backend runs), and the request runs either through [`Dispatcher::dispatch`]
//! (standalone) or as the same request on the daemon's socket (attached), so both backends and the
//! socket accept exactly the same values and give exactly the same results, except that a tool's
//! result leaves out every `null` member (MCP never carries null: an argument may not be null
//! either). Its output schema is the reduced JSON Schema of the result type dispatch serializes
//! (`schema::output`; `tests/it/mcp_stdio.rs` validates every tool's results against it).
//!
//! Invariants:
//! - a tool call never fails at the protocol level because of its arguments or the process it
//!   names: malformed arguments, unknown handles, out-of-range values and oversized arguments are
//!   tool results with `isError: true` and a `code: message` text an agent can act on (the MCP
//!   specification asks for this, since clients show protocol errors to no model). Only an
//!   unknown tool name is a protocol error (`-32602`), as the specification says. A tool error
//!   carries no `structuredContent`: structured content is the tool's output, which its output
//!   schema describes. An end or a capture whose terminal state the journal failed to record
//!   (`persisted: false`) is such an error too (`not_persisted: …`, with the end in the text);
//! - an argument set is refused before anything runs, so a refused call changes nothing on disk:
//!   [`decode_call`] is pure, and a backend runs only the [`ToolCall`] it returns;
//! - attached, a start runs in this server's working directory and environment unless its
//!   arguments say otherwise, as it does standalone (the daemon's own never reach a command);
//! - stdout carries only protocol messages; this module writes nothing to it.

#[cfg(feature = "fleet")]
mod fleet;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
pub mod schema;
pub mod transport;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::tool::{schema_for_input, schema_for_output};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::admission::AdmissionSnapshot;
use crate::client::ClientError;
use crate::protocol::dispatch::{
    InputResult, InterruptResult, ListResult, ProcessInfo, ResizeResult, StartResult, WaitResult,
};
use crate::protocol::{
    self, ApiError, AwaitInputArgs, CaptureArgs, Dispatcher, ErrorCode, HandleArgs, InputArgs,
    ListArgs, OutputArgs, ProtocolErrorKind, Request, ResizeArgs, RestartArgs, StartArgs, StopArgs,
    WaitArgs,
};
use crate::supervisor::{CaptureReceipt, InputWaitStatus, OutputPage};

/// What the server tells the agent at `initialize`, before any tool is called: how to use the
/// tools, then [`ATTACHED`] or [`STANDALONE`], which say how long processes live.
pub const INSTRUCTIONS: &str = "\
procjournal supervises long-running shell commands durably: every process and all of its output \
are kept in a journal on disk. Typical use: `start` a command (you get a `handle`), read its \
output with `output` (pass each page's `next_cursor` back as `cursor` to continue exactly where \
you stopped; use `wait_ms` to wait for new output instead of polling fast), write to its stdin \
with `input`, end it with `stop` (or `interrupt` for Ctrl-C), and `wait` for its exit status. \
`list` shows every process this root knows, including ones started by earlier servers. Every \
`handle` argument takes a handle, the process's `number` (12 or \"#12\") or its `name`. A \
`command` is an argv list, or one string run by `sh -c`. `start` with `yield_ms` returns the \
output so far too (often the whole run), and `output` with `wait_ms` and `settle_ms` reads \
what came until the output went quiet. A page's `gap` is true when bytes before \
`retained_from` were dropped by retention (the page starts there instead), `total_bytes` counts \
every byte written, and a `cursor` past it reads nothing with `cursor_ahead` true. States: \
starting, running (live); exited, failed, timed_out, interrupted, terminated, killed, \
lost_on_restore (terminal). A result leaves out a field without a value (a running \
process has no `exit_code`; one ended by a signal has `signal` and no `exit_code`). A failed \
call returns isError with `code: message` (codes such as unknown_handle, bad_args, \
not_running, input_closed, wait_timeout, too_large, capacity; not_persisted: the process \
ended as the text says, but the journal failed to record it).";

/// How long processes live when the server is attached to the root's daemon.
pub const ATTACHED: &str = "\
Processes run under the root's daemon, not under this server: they keep running when this \
server exits or is restarted (your client may start a new server for every call), until they \
end, you `stop` them, or the daemon is shut down; handles stay valid across servers. A process \
that was live when its daemon died is `lost_on_restore`; its output stays readable.";

/// What the fleet's tools are, when the server was given a fleet.
#[cfg(feature = "fleet")]
pub const FLEET: &str = "\n\n\
The fleet_* tools read a NATS JetStream server that several machines (nodes) ship their \
journals to: fleet_status (nodes, live or unknown), fleet_ps (every node's processes), \
fleet_logs (a process's output by node and handle, from a cursor) and fleet_events (a node's \
records). They only read; start and stop processes with the tools above, on this machine.";

/// How long processes live when the server runs its own supervisor.
pub const STANDALONE: &str = "\
This server runs its own supervisor (--standalone): every process it started is stopped when \
the server exits (its stdin closes), and ends terminated or killed. Their records and output \
survive in the journal, so a later server lists them and serves their output; processes that \
were live when a server died without stopping them are `lost_on_restore`.";

/// One tool: its name, the protocol operation it runs, and what an agent is told about it.
struct ToolSpec {
    name: &'static str,
    op: &'static str,
    description: &'static str,
    schema: fn() -> Result<Arc<JsonObject>, String>,
    /// The schema of the result's `structuredContent` (what dispatch serializes).
    output: fn() -> Arc<JsonObject>,
    /// Each argument's description as the agent reads it (short: the protocol's doc comments
    /// are the reference; `handle`, the same everywhere, is described in [`INSTRUCTIONS`]).
    fields: &'static [(&'static str, &'static str)],
    read_only: bool,
    destructive: bool,
    idempotent: bool,
}

const TOOLS: [ToolSpec; 12] = [
    ToolSpec {
        name: "start",
        op: "start",
        description: "Run a command in the background, supervised. With `yield_ms` it waits \
(for the end, a full page or `settle_ms` of quiet) and adds `output`, a page as output gives. \
Waits up to `queue_ms` (default 600000) for capacity; `queued_ms` says how long.",
        schema: schema_for_input::<StartArgs>,
        output: schema_for_output::<StartResult>,
        fields: &[
            ("command", "argv list, or one string run by sh -c"),
            ("cwd", "absolute working directory"),
            ("env", "variables, values not stored"),
            ("name", "unique among live processes"),
            ("timeout_ms", "wall-clock limit"),
            ("idle_timeout_ms", "limit without activity"),
            ("retention_bytes", "output bytes kept"),
            ("queue_ms", "wait this long for capacity"),
            ("pty", "terminal {rows, cols}"),
            ("yield_ms", "wait for the end and return output"),
            ("settle_ms", "with yield_ms: return after this quiet"),
            ("max_bytes", "with yield_ms: bytes returned"),
        ],
        read_only: false,
        // It runs a command, which may delete or overwrite anything its user can.
        destructive: true,
        idempotent: false,
    },
    ToolSpec {
        name: "output",
        op: "output",
        description: "A page of output (stdout and stderr merged) from byte `cursor`; go on \
from `next_cursor`. All read when `state` is terminal and `next_cursor` = `total_bytes`.",
        schema: schema_for_input::<OutputArgs>,
        output: schema_for_output::<OutputPage>,
        fields: &[
            ("cursor", "byte offset (a next_cursor)"),
            ("max_bytes", "page size"),
            ("rendering", "safe_text or base64 (raw)"),
            ("wait_ms", "wait this long for output"),
            ("min_bytes", "wait for this many bytes"),
            ("settle_ms", "then for this much quiet"),
            ("tail_lines", "only the last lines"),
        ],
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "input",
        op: "input",
        description: "Write to a running process's stdin, and/or close it.",
        schema: schema_for_input::<InputArgs>,
        output: schema_for_output::<InputResult>,
        fields: &[
            ("text", "text (end lines with \\n)"),
            ("base64", "bytes, base64"),
            ("close", "close stdin"),
        ],
        read_only: false,
        destructive: false,
        idempotent: false,
    },
    ToolSpec {
        name: "restart",
        op: "restart",
        description: "Run a finished process's command again; give its `env` values again.",
        schema: schema_for_input::<RestartArgs>,
        output: schema_for_output::<ProcessInfo>,
        fields: &[
            ("env", "the withheld values"),
            ("queue_ms", "wait this long for capacity"),
            ("pty", "terminal {rows, cols}"),
        ],
        read_only: false,
        // It runs a command, which may delete or overwrite anything its user can.
        destructive: true,
        idempotent: false,
    },
    ToolSpec {
        name: "resize",
        op: "resize",
        description: "Resize the terminal of a process started with `pty` (it gets SIGWINCH).",
        schema: schema_for_input::<ResizeArgs>,
        output: schema_for_output::<ResizeResult>,
        fields: &[],
        read_only: false,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "stop",
        op: "stop",
        description: "SIGTERM to the process tree, SIGKILL after `grace_ms` (default 1500).",
        schema: schema_for_input::<StopArgs>,
        output: schema_for_output::<WaitResult>,
        fields: &[("grace_ms", "SIGTERM to SIGKILL")],
        read_only: false,
        destructive: true,
        idempotent: true,
    },
    ToolSpec {
        name: "interrupt",
        op: "interrupt",
        description: "Send SIGINT (Ctrl-C) to a process's group; returns at once.",
        schema: schema_for_input::<HandleArgs>,
        output: schema_for_output::<InterruptResult>,
        fields: &[],
        read_only: false,
        destructive: true,
        idempotent: false,
    },
    ToolSpec {
        name: "wait",
        op: "wait",
        description: "Wait until a process ends; after `timeout_ms`: wait_timeout.",
        schema: schema_for_input::<WaitArgs>,
        output: schema_for_output::<WaitResult>,
        fields: &[("timeout_ms", "give up after")],
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "list",
        op: "list",
        description: "Every process of this root, oldest first, earlier servers' included.",
        schema: schema_for_input::<ListArgs>,
        output: schema_for_output::<ListResult>,
        fields: &[("state", "only this state"), ("label", "only key=value")],
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "admission",
        op: "admission",
        description: "Why a start would be admitted, refused (capacity) or queued now.",
        schema: no_args_schema,
        output: schema_for_output::<AdmissionSnapshot>,
        fields: &[],
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "await_input",
        op: "await_input",
        description: "Mark a process as waiting for a human: its idle limit pauses.",
        schema: schema_for_input::<AwaitInputArgs>,
        output: schema_for_output::<InputWaitStatus>,
        fields: &[("waiting", "false clears")],
        read_only: false,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "capture",
        op: "capture",
        description: "Run a command to the end: each stream's first `max_bytes`, a receipt.",
        schema: schema_for_input::<CaptureArgs>,
        output: schema_for_output::<CaptureReceipt>,
        fields: &[
            ("start", "the start tool's arguments, yield_ms aside"),
            ("max_bytes", "bytes per stream"),
            ("rendering", "safe_text or base64 (raw)"),
        ],
        read_only: false,
        // It runs a command, which may delete or overwrite anything its user can.
        destructive: true,
        idempotent: false,
    },
];

/// Arguments whose schema an input schema only sketches (an object, its required fields): their
/// full form is another tool's, which the description names.
const SKETCHED: [(&str, &str); 1] = [("capture", "start")];

/// No arguments.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// The schema of a tool without arguments: an object with no properties (spelled out: clients
/// expect `properties` on every tool's input schema).
fn no_args_schema() -> Result<Arc<JsonObject>, String> {
    let mut schema = (*schema_for_input::<Empty>()?).clone();
    schema
        .entry("properties")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    Ok(Arc::new(schema))
}

/// What runs the tools' requests.
#[derive(Debug, Clone)]
enum Backend {
    /// This server's own supervisor (`--standalone`).
    Standalone(Dispatcher),
    /// The root's daemon, one connection per call.
    Daemon(Arc<DaemonLink>),
}

/// Where the daemon listens, and what a start that names neither gets from this server: its
/// working directory and its environment (the agent harness's, whose child this server is).
/// Its `Debug` names the variables, never their values.
pub(crate) struct DaemonLink {
    pub(crate) socket: PathBuf,
    pub(crate) cwd: Option<String>,
    pub(crate) env: BTreeMap<String, String>,
}

impl std::fmt::Debug for DaemonLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonLink")
            .field("socket", &self.socket)
            .field("cwd", &self.cwd)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl DaemonLink {
    /// The request as the daemon should run it: a start (or a capture's) gets this server's
    /// working directory and environment where it names none, and a restart this server's
    /// environment, since the
    /// daemon's are not the agent's (`inherit_env`, "the server's own environment", means this
    /// server's here too).
    pub(crate) fn localize(&self, request: Request) -> Request {
        match request {
            Request::Start(args) => Request::Start(self.localize_start(args)),
            Request::Capture {
                start,
                max_bytes,
                rendering,
            } => Request::Capture {
                start: self.localize_start(start),
                max_bytes,
                rendering,
            },
            Request::Restart(mut args) => {
                if args.client_env.is_none() {
                    args.client_env = Some(self.env.clone());
                    args.inherit_env = false;
                }
                Request::Restart(args)
            }
            other => other,
        }
    }

    fn localize_start(&self, mut args: StartArgs) -> StartArgs {
        if args.cwd.is_none() {
            args.cwd.clone_from(&self.cwd);
        }
        if args.client_env.is_none() {
            args.client_env = Some(self.env.clone());
            args.inherit_env = false;
        }
        args
    }

    async fn call(&self, request: Request) -> Result<Value, ApiError> {
        let request = self.localize(request);
        crate::client::call_async(&self.socket, &request)
            .await
            .map_err(|e| match e {
                ClientError::Api(error) => error,
                other => ApiError::new(
                    ErrorCode::Internal,
                    format!("the daemon at {}: {other}", self.socket.display()),
                ),
            })
    }
}

/// The MCP side of the request protocol: lists the tools and runs tool calls through a
/// [`Dispatcher`] or the root's daemon.
#[derive(Debug, Clone)]
pub struct McpServer {
    backend: Backend,
    tools: Arc<Vec<Tool>>,
    instructions: String,
    /// The fleet the `fleet_*` tools read (`--fleet`), when one was given.
    #[cfg(feature = "fleet")]
    fleet: Option<Arc<crate::fleet::FleetConfig>>,
}

/// A tool's input schema could not be generated (a programming error, caught by the tests).
#[derive(Debug, thiserror::Error)]
#[error("the input schema of tool {tool}: {message}")]
pub struct SchemaError {
    pub tool: &'static str,
    pub message: String,
}

impl McpServer {
    /// A server whose tools run on `dispatcher`'s supervisor, in this process: its processes
    /// end with it (the instructions say so).
    pub fn standalone(dispatcher: Dispatcher) -> Result<Self, SchemaError> {
        Ok(McpServer {
            backend: Backend::Standalone(dispatcher),
            tools: Arc::new(tools()?),
            instructions: format!("{INSTRUCTIONS}\n\n{STANDALONE}"),
            #[cfg(feature = "fleet")]
            fleet: None,
        })
    }

    /// A server whose tools run on the daemon listening on `socket`: its processes outlive it.
    /// Starts that name no working directory or environment get this process's.
    pub fn attached(socket: PathBuf) -> Result<Self, SchemaError> {
        let cwd = std::env::current_dir()
            .ok()
            .and_then(|dir| dir.into_os_string().into_string().ok());
        // A variable that is not UTF-8 cannot travel in JSON; it is left out, as `procjournal
        // start` leaves it out.
        let env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Ok(McpServer {
            backend: Backend::Daemon(Arc::new(DaemonLink { socket, cwd, env })),
            tools: Arc::new(tools()?),
            instructions: format!("{INSTRUCTIONS}\n\n{ATTACHED}"),
            #[cfg(feature = "fleet")]
            fleet: None,
        })
    }

    /// Adds the fleet's tools (`fleet_status`, `fleet_ps`, `fleet_logs`, `fleet_events`),
    /// which read what `config`'s server holds of every node.
    #[cfg(feature = "fleet")]
    pub fn with_fleet(mut self, config: crate::fleet::FleetConfig) -> Result<Self, SchemaError> {
        let mut tools = self.tools.as_ref().clone();
        tools.extend(fleet::tools().map_err(|message| SchemaError {
            tool: "fleet",
            message,
        })?);
        self.tools = Arc::new(tools);
        self.instructions.push_str(FLEET);
        self.fleet = Some(Arc::new(config));
        Ok(self)
    }

    /// The instructions sent at `initialize`.
    pub fn instructions(&self) -> &str {
        &self.instructions
    }

    /// Runs one decoded tool call on the backend: every failure that concerns the process it
    /// names becomes a tool error, so that the agent sees the message.
    async fn run(&self, call: ToolCall) -> CallToolResult {
        let outcome = match &self.backend {
            Backend::Standalone(dispatcher) => dispatcher.dispatch(call.request).await,
            Backend::Daemon(daemon) => daemon.call(call.request).await,
        };
        match outcome {
            Ok(mut value) => match not_persisted(&value) {
                Some(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
                None => {
                    schema::drop_nulls(&mut value);
                    CallToolResult::structured(value)
                }
            },
            Err(error) => error_result(&error),
        }
    }
}

/// The tool error of an end (`wait`, `stop`) or a capture receipt whose terminal state the
/// journal failed to record (`persisted: false`): the status it carries is known only in
/// memory, so the call failed as the CLI's 125 does, and the text says what the end was.
fn not_persisted(value: &Value) -> Option<String> {
    if value.get("persisted") != Some(&Value::Bool(false)) {
        return None;
    }
    let field = |name: &str| match value.get(name) {
        Some(Value::Null) | None => "none".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Some(format!(
        "not_persisted: {} ended ({}, exit_code {}, signal {}) but the journal failed to record \
         its end, so this status is known only in memory: {}",
        field("handle"),
        field("state"),
        field("exit_code"),
        field("signal"),
        field("persist_error"),
    ))
}

/// A tool call decoded by [`decode_call`]: the listed tool and the protocol request it runs,
/// validated exactly as the socket validates a request. Only `decode_call` builds one, so a
/// request that reaches a backend has passed that validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    tool: &'static str,
    op: &'static str,
    read_only: bool,
    request: Request,
}

impl ToolCall {
    /// The tool's name, as listed.
    #[cfg(any(test, feature = "test-support"))]
    pub fn tool(&self) -> &'static str {
        self.tool
    }

    /// The protocol operation the tool runs.
    #[cfg(any(test, feature = "test-support"))]
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// The validated request.
    #[cfg(any(test, feature = "test-support"))]
    pub fn request(&self) -> &Request {
        &self.request
    }
}

/// Why a tool call is refused before anything runs (so a refused call changes nothing).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// No listed tool has this name (`name` is the client's, cut short): the one protocol-level
    /// error of a call, `-32602`, as the MCP specification says.
    #[error("unknown tool {name:?} (tools: {known})")]
    UnknownTool { name: String, known: String },
    /// The arguments do not fit the tool (`bad_args`) or are too large (`too_large`): a tool
    /// error, which the agent sees.
    #[error("{0}")]
    Arguments(ApiError),
}

impl CallError {
    /// What the server answers: the JSON-RPC error of an unknown tool, or the tool error
    /// (`code: message`, `isError`) of refused arguments.
    pub fn answer(&self) -> Result<CallToolResult, ErrorData> {
        match self {
            CallError::UnknownTool { .. } => Err(ErrorData::invalid_params(self.to_string(), None)),
            CallError::Arguments(error) => Ok(error_result(error)),
        }
    }
}

/// The JSON-pointer path of the first null inside `value`, if any.
fn null_path(value: &Value, at: String) -> Option<String> {
    match value {
        Value::Null => Some(if at.is_empty() { "/".into() } else { at }),
        Value::Object(map) => map
            .iter()
            .find_map(|(k, v)| null_path(v, format!("{at}/{k}"))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| null_path(v, format!("{at}/{i}"))),
        _ => None,
    }
}

/// Decodes one `tools/call`: looks the tool up by name among those listed and validates its
/// `arguments` into the protocol request it runs ([`protocol::request_from_args`], the socket's
/// own validation). Pure and total: the decoder of the client's tool calls, fuzzed
/// (`fuzz/fuzz_targets/mcp_tool_call.rs`) and proptested (`tests/it/mcp_props.rs`). Arguments left
/// out are the same as an empty object.
pub fn decode_call(name: &str, arguments: Option<JsonObject>) -> Result<ToolCall, CallError> {
    let Some(spec) = TOOLS.iter().find(|t| t.name == name) else {
        let known: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        return Err(CallError::UnknownTool {
            name: truncate(name).into_owned(),
            known: known.join(", "),
        });
    };
    let args = Value::Object(arguments.unwrap_or_default());
    // The socket refuses request lines above this size; the same bound applies here so that
    // a huge argument (e.g. megabytes of input) is refused the same way on both surfaces.
    let size = serde_json::to_vec(&args).map_or(usize::MAX, |bytes| bytes.len());
    if size > protocol::REQUEST_BYTES_MAX {
        let kind = ProtocolErrorKind::TooLarge {
            len: size,
            max: protocol::REQUEST_BYTES_MAX,
        };
        return Err(CallError::Arguments(ApiError::new(
            ErrorCode::TooLarge,
            kind.to_string(),
        )));
    }
    // The schemas declare no null (the Inspector cannot send unions): an explicit null is
    // refused, so that what is accepted is what the listing says may be sent.
    if let Some(path) = null_path(&args, String::new()) {
        return Err(CallError::Arguments(ApiError::new(
            ErrorCode::BadArgs,
            format!("{path} is null: leave an optional argument out instead"),
        )));
    }
    match protocol::request_from_args(spec.op, args) {
        Ok(request) => Ok(ToolCall {
            tool: spec.name,
            op: spec.op,
            read_only: spec.read_only,
            // A tool's start waits for capacity unless told not to (`queue_ms: 0`).
            request: request.queue_by_default(crate::limits::ADMISSION_QUEUE_WAIT_MS_DEFAULT),
        }),
        Err(kind) => Err(CallError::Arguments(ApiError::new(
            ErrorCode::from(&kind),
            kind.to_string(),
        ))),
    }
}

/// The tool definitions, in the order they are listed.
pub fn tools() -> Result<Vec<Tool>, SchemaError> {
    TOOLS
        .iter()
        .map(|spec| {
            let schema = (spec.schema)().map_err(|message| SchemaError {
                tool: spec.name,
                message,
            })?;
            // Only the hints that differ from the specification's defaults (not read-only,
            // destructive, not idempotent, open world), to keep the listing small; processes
            // run on this machine only, so no tool reaches an open world. The specification
            // gives `destructiveHint` and `idempotentHint` meaning only when `readOnlyHint` is
            // false: a read-only tool says neither.
            let mut annotations = ToolAnnotations::new().open_world(false);
            if spec.read_only {
                annotations = annotations.read_only(true);
            } else {
                if !spec.destructive {
                    annotations = annotations.destructive(false);
                }
                if spec.idempotent {
                    annotations = annotations.idempotent(true);
                }
            }
            let mut input = schema::input(&schema);
            describe(spec, &mut input);
            let output = Arc::new(schema::output(&(spec.output)()));
            Ok(Tool::new(spec.name, spec.description, Arc::new(input))
                .with_raw_output_schema(output)
                .with_annotations(annotations))
        })
        .collect()
}

/// Sets each argument's description from the tool's table (a field missing from it has none),
/// and sketches the arguments [`SKETCHED`] names.
fn describe(spec: &ToolSpec, input: &mut JsonObject) {
    let Some(Value::Object(properties)) = input.get_mut("properties") else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        let Value::Object(property) = property else {
            continue;
        };
        if SKETCHED.contains(&(spec.name, name.as_str())) {
            property.retain(|k, _| k == "type" || k == "required");
        }
        // `handle` is described once, in the instructions: every tool takes the same.
        let text = spec.fields.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
        if let Some(text) = text {
            property.insert("description".to_owned(), Value::from(text));
        }
    }
}

/// A tool error: `code: message` as text, for the agent and for programs (the code is the
/// protocol's error code, the text before the first colon). No structured content: that is the
/// tool's output, which its output schema describes, and an error is not one.
fn error_result(error: &ApiError) -> CallToolResult {
    let code = serde_json::to_value(error.code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "internal".to_owned());
    CallToolResult::error(vec![ContentBlock::text(format!(
        "{code}: {}",
        error.message
    ))])
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("procjournal", env!("CARGO_PKG_VERSION"))
                    .with_title("procjournal: durable supervision of long-running commands"),
            )
            .with_instructions(self.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        #[cfg(feature = "fleet")]
        if let Some(config) = &self.fleet
            && fleet::is_fleet_tool(&request.name)
        {
            let config = Arc::clone(config);
            return Ok(fleet::call(&config, &request.name, request.arguments)
                .await
                .into());
        }
        let call = match decode_call(&request.name, request.arguments) {
            Ok(call) => call,
            Err(refused) => return refused.answer().map(Into::into),
        };
        // `wait` and `output` only read, so a cancelled call may simply be abandoned; the others
        // run to completion so that what they started (a spawn, a stop) is recorded whole.
        let result = if call.read_only {
            tokio::select! {
                result = self.run(call) => result,
                () = context.ct.cancelled() => error_result(&ApiError::new(
                    ErrorCode::Internal,
                    "the call was cancelled by the client",
                )),
            }
        } else {
            self.run(call).await
        };
        Ok(result.into())
    }
}

/// Keeps client-supplied text in error messages short.
fn truncate(text: &str) -> Cow<'_, str> {
    const MAX: usize = 64;
    if text.chars().count() <= MAX {
        Cow::Borrowed(text)
    } else {
        let mut short: String = text.chars().take(MAX).collect();
        short.push('…');
        Cow::Owned(short)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_a_description_and_a_protocol_op() {
        let tools = tools().expect("schemas");
        assert_eq!(tools.len(), TOOLS.len());
        for (tool, spec) in tools.iter().zip(TOOLS.iter()) {
            assert_eq!(tool.input_schema.get("type"), Some(&Value::from("object")));
            assert!(
                tool.input_schema.contains_key("properties"),
                "{}",
                spec.name
            );
            assert!(tool.description.as_deref().is_some_and(|d| d.len() > 30));
            assert!(protocol::OPS.contains(&spec.op), "{}", spec.op);
        }
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        for required in ["start", "output", "input", "stop", "wait", "list"] {
            assert!(names.contains(&required), "{required}");
        }
    }

    #[test]
    fn output_schema_documents_the_cursor_and_renderings() {
        let tools = tools().expect("schemas");
        let output = tools.iter().find(|t| t.name == "output").expect("output");
        let schema = serde_json::to_string(&output.input_schema).expect("json");
        for needle in [
            "cursor",
            "max_bytes",
            "rendering",
            "safe_text",
            "base64",
            "wait_ms",
        ] {
            assert!(schema.contains(needle), "{needle} missing from {schema}");
        }
    }

    #[test]
    fn errors_are_tool_errors_with_code_and_message() {
        let result = error_result(&ApiError::new(ErrorCode::UnknownHandle, "no process p-1"));
        assert_eq!(result.is_error, Some(true));
        let text = result.content[0].as_text().map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some("unknown_handle: no process p-1"));
        assert_eq!(result.structured_content, None);
    }

    #[test]
    fn every_tool_declares_an_object_output_schema() {
        for tool in tools().expect("schemas") {
            let schema = tool.output_schema.as_ref().expect("an output schema");
            assert_eq!(
                schema.get("type"),
                Some(&Value::from("object")),
                "{}",
                tool.name
            );
            assert!(schema.contains_key("properties"), "{}", tool.name);
        }
    }

    /// Attached, a start gets this server's directory and environment unless it names its own.
    #[test]
    fn attached_starts_run_where_the_server_runs() {
        let link = DaemonLink {
            socket: PathBuf::from("/nonexistent"),
            cwd: Some("/work/here".to_owned()),
            env: BTreeMap::from([("K".to_owned(), "v".to_owned())]),
        };
        let start = |args: Value| match protocol::request_from_args("start", args) {
            Ok(request) => match link.localize(request) {
                Request::Start(args) => args,
                other => panic!("{other:?}"),
            },
            Err(e) => panic!("{e}"),
        };
        let plain = start(serde_json::json!({"command": ["true"]}));
        assert_eq!(plain.cwd.as_deref(), Some("/work/here"));
        assert_eq!(plain.client_env, Some(link.env.clone()));
        let inherit = start(serde_json::json!({"command": ["true"], "inherit_env": true}));
        assert!(!inherit.inherit_env && inherit.client_env == Some(link.env.clone()));
        let own = start(serde_json::json!({
            "command": ["true"], "cwd": "/tmp", "client_env": {"A": "b"}
        }));
        assert_eq!(own.cwd.as_deref(), Some("/tmp"));
        assert_eq!(
            own.client_env,
            Some(BTreeMap::from([("A".to_owned(), "b".to_owned())]))
        );
        let capture = protocol::request_from_args(
            "capture",
            serde_json::json!({"start": {"command": ["true"]}}),
        )
        .map(|request| link.localize(request));
        let Ok(Request::Capture { start, .. }) = capture else {
            panic!("{capture:?}");
        };
        assert_eq!(start.cwd.as_deref(), Some("/work/here"));
        assert_eq!(start.client_env, Some(link.env.clone()));
        let shown = format!("{link:?}");
        assert!(
            shown.contains("\"K\"") && !shown.contains("\"v\""),
            "{shown}"
        );
    }
}
