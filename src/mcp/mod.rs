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
//! socket accept exactly the same values and give exactly the same results. Its output schema is
//! the JSON Schema of the result type dispatch serializes (`tests/mcp_stdio.rs` validates every
//! tool's results against it).
//!
//! Invariants:
//! - a tool call never fails at the protocol level because of its arguments or the process it
//!   names: malformed arguments, unknown handles, out-of-range values and oversized arguments are
//!   tool results with `isError: true` and a `code: message` text an agent can act on (the MCP
//!   specification asks for this, since clients show protocol errors to no model). Only an
//!   unknown tool name is a protocol error (`-32602`), as the specification says. A tool error
//!   carries no `structuredContent`: structured content is the tool's output, which its output
//!   schema describes;
//! - an argument set is refused before anything runs, so a refused call changes nothing on disk:
//!   [`decode_call`] is pure, and a backend runs only the [`ToolCall`] it returns;
//! - attached, a start runs in this server's working directory and environment unless its
//!   arguments say otherwise, as it does standalone (the daemon's own never reach a command);
//! - stdout carries only protocol messages; this module writes nothing to it.

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
    InputResult, InterruptResult, ListResult, ProcessInfo, ResizeResult, WaitResult,
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
`list` shows every process this root knows, including ones started by earlier servers. States: \
starting, running (live); exited, failed, timed_out, interrupted, terminated, killed, \
lost_on_restore (terminal). A failed call returns isError with `code: message` (codes such as \
unknown_handle, bad_args, not_running, input_closed, wait_timeout, too_large, capacity).";

/// How long processes live when the server is attached to the root's daemon.
pub const ATTACHED: &str = "\
Processes run under the root's daemon, not under this server: they keep running when this \
server exits or is restarted (your client may start a new server for every call), until they \
end, you `stop` them, or the daemon is shut down; handles stay valid across servers. A process \
that was live when its daemon died is `lost_on_restore`; its output stays readable.";

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
    title: &'static str,
    description: &'static str,
    schema: fn() -> Result<Arc<JsonObject>, String>,
    /// The schema of the result's `structuredContent` (what dispatch serializes).
    output: fn() -> Arc<JsonObject>,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
}

const TOOLS: [ToolSpec; 12] = [
    ToolSpec {
        name: "start",
        op: "start",
        title: "Start a command",
        description: "Start a command under supervision and return at once (it runs in the \
background, in its own process group, with stdin, stdout and stderr captured). `command` is the \
program and its arguments as a list; no shell is involved unless you run one, e.g. \
[\"sh\", \"-c\", \"make test 2>&1\"]. Returns the process: `handle` (pass it to every other tool), \
`state` (`running`), `pid`, `command`, `cwd`, `labels`, `registered_unix_ms`, `retention_bytes` \
(the output bytes kept: set `retention_bytes` to keep more or less than the server's default). \
If the program \
cannot be spawned the error is spawn_failed and the process is recorded as `failed` under the \
handle the error names. If the server has no capacity for another command now the start waits in line for it \
(`queue_ms`, default 600000; the result's `queued_ms` says how long it waited), and fails with \
the error capacity when none came (the `admission` tool says why); `queue_ms: 0` fails at once. \
For an interactive program (a REPL such as `python3 -i`, a shell, a prompt, a full-screen or \
colour-on-a-terminal program) set `pty` {rows, cols}: it then runs under a terminal, its output \
is one stream (`terminal` in `spans`; read it with `output`, \"safe_text\" removes the escape \
sequences), `input` types into the terminal (end a line with \"\\n\") and `resize` changes its size.",
        schema: schema_for_input::<StartArgs>,
        output: schema_for_output::<ProcessInfo>,
        read_only: false,
        destructive: false,
        idempotent: false,
    },
    ToolSpec {
        name: "output",
        op: "output",
        title: "Read output",
        description: "Read one page of a process's output: stdout and stderr merged in the order \
they arrived, addressed by byte offset (`cursor`). Start at cursor 0; to continue, pass the \
page's `next_cursor` back as `cursor` (nothing is skipped or repeated). The page has: `data` \
(the bytes from `cursor` to `next_cursor`, as `rendering` says: \"safe_text\" is UTF-8 with \
terminal control sequences such as colours and cursor movement removed, for reading; \"base64\" \
is exactly the raw bytes), `next_cursor`, `total_bytes` (all output written so far), \
`retained_from` (the oldest byte still kept; older output was discarded by retention), \
`skipped` (when the page starts after `cursor`: the range `from`..`to` it stepped over, its \
`kind` (\"gap\": output that was not kept, such as retention or a full disk; \"damage\": output \
the files should hold and cannot read) and its `reason`; the bytes in `data` start at `to`; \
never a splice: cursors count over the range), `gap` (true when `skipped` is a gap), \
`cursor_ahead` (true when `cursor` was beyond \
`total_bytes`: no data is returned and `next_cursor` is the end of the output), `state` (the \
process's state; when it is terminal and `next_cursor` equals `total_bytes` you have read \
everything), `spans` (which byte ranges came from stdout or stderr). All sizes and offsets are \
bytes. Set `wait_ms` to wait for new output of a running process instead of polling.",
        schema: schema_for_input::<OutputArgs>,
        output: schema_for_output::<OutputPage>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "input",
        op: "input",
        title: "Write to stdin",
        description: "Write to a running process's stdin: `text` as UTF-8 (include \"\\n\" to end \
a line; most programs read line by line) or `base64` for arbitrary bytes, and/or `close: true` \
to close stdin so the program sees end-of-file. Returns `bytes_written` and `closed`. Errors: \
not_running (the process has ended), input_closed (stdin was closed or the program stopped \
reading).",
        schema: schema_for_input::<InputArgs>,
        output: schema_for_output::<InputResult>,
        read_only: false,
        destructive: false,
        idempotent: false,
    },
    ToolSpec {
        name: "restart",
        op: "restart",
        title: "Run a finished command again",
        description: "Start the command of a finished process again, as a new process linked to \
the old one (its `restart_of` names it): same program, arguments, working directory, labels, \
limits and persisted environment variables. Variables whose values were not persisted (a \
start's `env`, which may hold secrets) must be given again in `env`; without them the error is \
missing_env and names each. Returns the new process, as `start` does. Errors: not_finished (the \
process is still running: stop it first), unknown_handle, capacity, refused (paused).",
        schema: schema_for_input::<RestartArgs>,
        output: schema_for_output::<ProcessInfo>,
        read_only: false,
        destructive: false,
        idempotent: false,
    },
    ToolSpec {
        name: "resize",
        op: "resize",
        title: "Resize a terminal",
        description: "Change the size (`rows`, `cols`, each at least 1) of the terminal of a process started with `pty`; the program gets SIGWINCH and redraws for the new size. The size is recorded in the journal. Returns `handle`, `rows` and `cols`. Errors: not_running (the process has ended), bad_args (the process was started without `pty`).",
        schema: schema_for_input::<ResizeArgs>,
        output: schema_for_output::<ResizeResult>,
        read_only: false,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "stop",
        op: "stop",
        title: "Stop a process",
        description: "Stop a process and its whole process tree: SIGTERM, then SIGKILL if it is \
still alive after `grace_ms` milliseconds. Returns once it has ended, with the same fields as \
`wait`; its state is `terminated` (it exited after SIGTERM) or `killed` (SIGKILL was needed). \
Stopping a process that already ended returns how it ended.",
        schema: schema_for_input::<StopArgs>,
        output: schema_for_output::<WaitResult>,
        read_only: false,
        destructive: true,
        idempotent: true,
    },
    ToolSpec {
        name: "interrupt",
        op: "interrupt",
        title: "Interrupt (Ctrl-C)",
        description: "Send SIGINT (what Ctrl-C sends) to a running process's process group and \
return at once. Many programs stop cleanly on it; use `wait` to see whether it ended, and \
`stop` if it did not.",
        schema: schema_for_input::<HandleArgs>,
        output: schema_for_output::<InterruptResult>,
        read_only: false,
        destructive: true,
        idempotent: false,
    },
    ToolSpec {
        name: "wait",
        op: "wait",
        title: "Wait for the end",
        description: "Wait until a process has ended and return how: `state` (exited, failed, \
timed_out, interrupted, terminated, killed or lost_on_restore), `exit_code` (when it exited \
normally) or `signal` (the signal number that ended it, e.g. 15 for SIGTERM, 9 for SIGKILL), \
`total_bytes` and `retained_from` of its output, `capture` (\"complete\" when every output byte \
was recorded). Set `timeout_ms` to give up after that many milliseconds: the error is then \
wait_timeout and the process keeps running. Without it the call blocks until the process ends, \
so prefer a timeout for commands that may run long.",
        schema: schema_for_input::<WaitArgs>,
        output: schema_for_output::<WaitResult>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "list",
        op: "list",
        title: "List processes",
        description: "List every process this runtime root knows, oldest first, including those \
of earlier server runs (processes that were live when an earlier server died are \
`lost_on_restore`; their output is still readable with `output`). Each entry has `handle`, \
`state`, `pid`, `command`, `cwd`, `labels`, `registered_unix_ms`, `exit_code`, `signal`, \
`retained_from`/`total_bytes` of its output as last recorded, and `retention_bytes` (how much \
output it keeps; older output is discarded). Filter by `state` or by a `label` \
given as \"key=value\".",
        schema: schema_for_input::<ListArgs>,
        output: schema_for_output::<ListResult>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "admission",
        op: "admission",
        title: "Capacity and admission",
        description: "Show why a start would be admitted, refused or kept waiting now. The server \
admits a command only while capacity remains: by default 70 % of the machine's cores and of its \
available memory, at least 2 GiB reserved per running command and all its subprocesses, at \
least one command always (the operator may set an explicit limit instead). Returns `decision` \
(`admit`, `slots`, `in_use`, `basis`: automatic, no_memory_telemetry or host_limit, and the \
inputs `cores`, `available_bytes`, `share_percent`, `floor_bytes`, `reserved_bytes`, \
`pool_bytes`), `reservations` (per process handle: `reserved_bytes`, `observed_bytes`, `sample`), \
`telemetry_complete` and `queued` (starts waiting). A `start` refused with code `capacity` can be \
retried later, or given a longer `queue_ms` to wait for capacity in line.",
        schema: no_args_schema,
        output: schema_for_output::<AdmissionSnapshot>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "await_input",
        op: "await_input",
        title: "Mark as waiting for a human",
        description: "Mark a running process as waiting for human input (`waiting`: true, the \
default), or clear the mark (`waiting`: false). While marked, its idle limit (`idle_timeout_ms` \
of `start`) does not run, so a prompt that waits for a person is not stopped as idle; writing to \
its stdin with `input` clears the mark and restarts the idle clock. Returns `waiting` and \
`changed` (false when it already was so). Errors: not_running (the process has ended).",
        schema: schema_for_input::<AwaitInputArgs>,
        output: schema_for_output::<InputWaitStatus>,
        read_only: false,
        destructive: false,
        idempotent: true,
    },
    ToolSpec {
        name: "capture",
        op: "capture",
        title: "Run to completion and capture",
        description: "Run a command to completion and return its whole output in one call: for \
checks and probes whose output you will parse (a test run, a linter, `git status`). `start` \
takes the same fields as the start tool (set its `timeout_ms` to bound the run; without it the \
call lasts as long as the command). Returns `complete` (true only when every stream reached end \
of file with all its bytes returned and nothing cut the run short: parse the output only then), \
`state`, `exit_code` or `signal`, `fault` (what cut the run short: a deadline, a stop, or a \
capture failure), and `streams` (stdout and stderr, or one `terminal` stream with `pty`), each \
with `end` (\"eof\", \"incomplete\" with its `reasons`, or \"failed\" with its `failure`), \
`prefix` (the stream's first `max_bytes` bytes, as `rendering` says), `spool_bytes` and \
`resume_cursor` (read the rest with the output tool from there). The process stays in `list` \
under its `handle`.",
        schema: schema_for_input::<CaptureArgs>,
        output: schema_for_output::<CaptureReceipt>,
        read_only: false,
        destructive: false,
        idempotent: false,
    },
];

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
        })
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
            Ok(value) => CallToolResult::structured(value),
            Err(error) => error_result(&error),
        }
    }
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
    pub fn tool(&self) -> &'static str {
        self.tool
    }

    /// The protocol operation the tool runs.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// Whether the tool only reads (a cancelled call may then simply be abandoned).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The validated request.
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

/// Decodes one `tools/call`: looks the tool up by name among those listed and validates its
/// `arguments` into the protocol request it runs ([`protocol::request_from_args`], the socket's
/// own validation). Pure and total: the decoder of the client's tool calls, fuzzed
/// (`fuzz/fuzz_targets/mcp_tool_call.rs`) and proptested (`tests/mcp_props.rs`). Arguments left
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
            let annotations = ToolAnnotations::with_title(spec.title)
                .read_only(spec.read_only)
                .destructive(spec.destructive)
                .idempotent(spec.idempotent)
                // Processes run on this machine only; nothing reaches an open world.
                .open_world(false);
            Ok(Tool::new(spec.name, spec.description, schema)
                .with_raw_output_schema((spec.output)())
                .with_title(spec.title)
                .with_annotations(annotations))
        })
        .collect()
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
            assert!(tool.description.as_deref().is_some_and(|d| d.len() > 80));
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
            assert!(schema.contains_key("required"), "{}", tool.name);
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
