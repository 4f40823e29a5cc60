//! The request protocol every surface speaks: the daemon's Unix socket, the client commands and
//! the MCP tools. Version 1; the wire format is specified in `docs/protocol.md`.
//!
//! On the socket, each request and each response is one JSON object on one line:
//! `{"v":1,"id":7,"op":"output","args":{"handle":"p-…","cursor":0}}` →
//! `{"v":1,"id":7,"ok":true,"result":{…}}` or `{"v":1,"id":7,"ok":false,"error":{"code":…}}`.
//! The MCP tools take the same `args` objects (the same structs, the same JSON Schemas).
//!
//! Invariants:
//! - [`decode_request`] is total: any bytes give an [`Envelope`] or a typed [`ProtocolError`],
//!   never a panic (fuzzed by `fuzz/fuzz_targets/protocol_request.rs`, proptested in
//!   `tests/it/protocol_props.rs`);
//! - a decoded [`Request`] is fully validated: handles parsed, base64 decoded, every number within
//!   its documented range, unknown fields refused; dispatch never sees a malformed value;
//! - decoding touches nothing: only [`dispatch`] acts, so a bad request changes nothing on disk;
//! - [`Request::to_wire`] and [`decode_request`] round-trip: a client built from the typed
//!   request can only send what the server accepts;
//! - each operation is described once, a row of the table in `ops.rs` that [`OPS`],
//!   [`Request::op`], [`request_from_args`] and [`Request::to_wire`] are generated from; what is
//!   written by hand is each operation's check.

pub mod base64;
pub mod dispatch;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod ops;

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::lifecycle::{ProcessRef, State};
use crate::supervisor::Rendering;

pub use dispatch::Dispatcher;
pub use ops::{OPS, request_from_args};

/// The protocol version this build speaks; requests carry it as `"v"`.
pub const PROTOCOL_VERSION: u32 = 1;
pub use crate::limits::{REQUEST_BYTES_MAX, RETENTION_BYTES_MAX, RETENTION_BYTES_MIN};
/// The most output bytes one `output` request returns.
pub const OUTPUT_BYTES_MAX: u64 = 1 << 20;
/// `max_bytes` when a request leaves it out.
pub const OUTPUT_BYTES_DEFAULT: u64 = 64 << 10;
/// The longest an `output` request waits for new bytes (and a start's `yield_ms`).
pub const OUTPUT_WAIT_MS_MAX: u64 = 60_000;
pub use crate::limits::TAIL_LINES_MAX;
/// The longest grace between SIGTERM and SIGKILL a request may ask for.
pub const GRACE_MS_MAX: u64 = 600_000;
/// Grace between SIGTERM and SIGKILL when a request leaves it out.
pub const GRACE_MS_DEFAULT: u64 = crate::limits::GRACE_MS_DEFAULT;
/// Request IDs are echoed back; a long one is refused rather than stored.
pub const ID_CHARS_MAX: usize = 128;
/// The longest a start may wait for capacity (`queue_ms`).
pub const QUEUE_MS_MAX: u64 = crate::limits::ADMISSION_QUEUE_WAIT_MS_MAX;
/// The most arguments, environment variables or labels one start may carry.
pub const START_ITEMS_MAX: usize = 4096;

/// `start`: run a command under supervision. Its `Debug` shows the names of the environment
/// variables, never their values.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartArgs {
    /// The program and its arguments as a list, e.g. ["make", "test"] (a program without a
    /// slash is looked up on the server's PATH), or one string, a shell command line, run as
    /// ["sh", "-c", line] and recorded so.
    #[serde(deserialize_with = "command_line")]
    #[schemars(schema_with = "command_schema")]
    pub command: Vec<String>,
    /// Absolute working directory. Default: the server's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment variables set on top of the launch environment. Their values are never
    /// written to disk or shown (the journal keeps the names): a restart must be given them
    /// again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Environment variables set like `env`, whose values the journal keeps (no secrets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_persist: BTreeMap<String, String>,
    /// The environment to start from: the client's own (`procjournal start` sends its
    /// environment, so that the command runs as the shell that started it would run it).
    /// Git redirection variables (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_CONFIG*, ...) are
    /// removed from it; `env` and `env_persist` are set on top. Never written to disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_env: Option<BTreeMap<String, String>>,
    /// Start from the server's own environment instead (Git redirection removed all the same).
    /// Through the daemon, one of `client_env` and `inherit_env` is required: the daemon's
    /// environment never reaches a command unless asked for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherit_env: bool,
    /// Overlay the PATH-like variables (PATH, PATHEXT, DOTNET_ROOT*) of the server's login
    /// shell, as captured when it started (`serve --login-shell`); without a capture the
    /// environment is unchanged and the manifest says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub login_shell_overlay: bool,
    /// Free-form labels (key to value) to find the process again with `list`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// A name to use instead of the handle (`resolve`, and every CLI command): 1 to 64 ASCII
    /// letters, digits, '.', '_' or '-', starting with a letter or '_', not with "p-". Unique
    /// among live processes: a start whose name a live process holds fails with `name_taken`.
    /// Kept as the label `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Wall-clock limit in milliseconds; when it passes the process tree is terminated and the
    /// process ends `timed_out`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Idle limit in milliseconds: when the process shows no activity (output, input written to
    /// it, a signal sent to it) for this long, and is not marked as waiting for human input
    /// (`await_input`), its tree is terminated and it ends `timed_out`. Before any activity the
    /// clock runs from the start. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub idle_timeout_ms: Option<u64>,
    /// Bytes of output to keep (stdout and stderr together), from 8388608 (8 MiB, one spool
    /// segment) to 4294967296 (4 GiB). Older output is deleted in whole segments; reading it
    /// gives a page with `gap: true` that starts at `retained_from`. Default: the server's
    /// (64 MiB unless it was started with another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8_388_608, max = 4_294_967_296_u64))]
    pub retention_bytes: Option<u64>,
    /// When admission finds no capacity now (see `admission`), wait up to this many
    /// milliseconds (at most 3600000) for it, first come first served, instead of failing at
    /// once with a `capacity` error; 0 fails at once. Default: on the socket, fail at once; as
    /// an MCP tool, wait up to 600000 (ten minutes). A start that waited says so in its result
    /// (`queued_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 3_600_000))]
    pub queue_ms: Option<u64>,
    /// Run under a terminal of this size instead of pipes (for REPLs, full-screen programs,
    /// prompts, colours that appear only on a terminal): stdout and stderr arrive as one stream,
    /// `terminal`; `input` goes to the terminal (what a user types: end lines with "\r" or
    /// "\n"); `resize` changes its size. Default: pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtyArgs>,
    /// Wait up to this many milliseconds (at most 60000) after starting, and return the output
    /// so far with the process (`output`, a page from cursor 0): at once when it ends, when
    /// the page is full, or when `settle_ms` of quiet passed. Default: return at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 60_000))]
    pub yield_ms: Option<u64>,
    /// With `yield_ms`: return once no new output came for this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60_000))]
    pub settle_ms: Option<u64>,
    /// With `yield_ms`: the most bytes of output returned (1 to 1048576; default 65536).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_048_576))]
    pub max_bytes: Option<u64>,
}

/// `command` of a start: a list of strings is the program and its arguments; one string is a
/// shell command line, which runs as `sh -c LINE` (and is recorded so: what the journal keeps
/// is what ran).
fn command_line<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<String>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(
                "the program and its arguments as a sequence of strings, or a shell command \
                 line as one string",
            )
        }

        fn visit_str<E: serde::de::Error>(self, line: &str) -> Result<Self::Value, E> {
            if line.trim().is_empty() {
                return Err(E::custom("command is empty: give a shell command line"));
            }
            Ok(vec!["sh".to_owned(), "-c".to_owned(), line.to_owned()])
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut argv = Vec::new();
            while let Some(arg) = seq.next_element::<String>()? {
                argv.push(arg);
            }
            Ok(argv)
        }
    }
    deserializer.deserialize_any(Visitor)
}

/// A process reference as a client sends it: text (a handle, `12`, `#12`, a name) or a number,
/// as clients that convert typed text (`handle=12`) send a number.
fn reference_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = String;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a process handle, number or name")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(text.to_owned())
        }

        fn visit_u64<E: serde::de::Error>(self, number: u64) -> Result<Self::Value, E> {
            Ok(number.to_string())
        }
    }
    deserializer.deserialize_any(Visitor)
}

fn reference_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": ["string", "integer"]})
}

fn command_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["array", "string"],
        "items": {"type": "string"},
    })
}

/// `restart`: start a finished process's command again, as a new process linked to it
/// (`restart_of`). Everything the journal recorded is reused (command, working directory,
/// labels, limits, persisted variables); what it did not record is given again here. Its
/// `Debug` shows the names of the environment variables, never their values.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartArgs {
    /// The finished process to run again: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
    /// Values of the variables whose values the journal withheld (set with `env` at the first
    /// start, not `env_persist`), by name. A restart without one of them is refused with
    /// `missing_env`, naming each. Never written to disk.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The environment to start from, as for `start` (the base is not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_env: Option<BTreeMap<String, String>>,
    /// Start from the server's own environment, as for `start`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherit_env: bool,
    /// Wait up to this many milliseconds for capacity, as for `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 3_600_000))]
    pub queue_ms: Option<u64>,
    /// Run under a terminal of this size, as for `start` (a terminal is not carried over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtyArgs>,
}

impl std::fmt::Debug for RestartArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
        f.debug_struct("RestartArgs")
            .field("handle", &self.handle)
            .field("env", &names(&self.env))
            .field("client_env", &self.client_env.as_ref().map(names))
            .field("inherit_env", &self.inherit_env)
            .field("queue_ms", &self.queue_ms)
            .field("pty", &self.pty)
            .finish()
    }
}

/// `resolve`: the process a reference names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveArgs {
    /// A handle (p- and 32 hex digits), the process's number on this root (12 or #12, as `list`
    /// shows it), or its name (the live process with that name, else the newest that had it).
    pub reference: String,
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PtyArgs {
    /// Rows, 1 to 65535 (24 is the classic terminal).
    #[schemars(range(min = 1, max = 65535))]
    pub rows: u16,
    /// Columns, 1 to 65535 (80 is the classic terminal).
    #[schemars(range(min = 1, max = 65535))]
    pub cols: u16,
}

/// `resize`: change the size of a process's terminal (a `start` with `pty`); the program gets
/// SIGWINCH.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeArgs {
    /// The process: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
    /// Rows, 1 to 65535.
    #[schemars(range(min = 1, max = 65535))]
    pub rows: u16,
    /// Columns, 1 to 65535.
    #[schemars(range(min = 1, max = 65535))]
    pub cols: u16,
}

/// `capture`: run a command to completion and return its output, each stream (stdout and
/// stderr, or a terminal's one stream) up to `max_bytes`, with a receipt of how each ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureArgs {
    /// The command, exactly as `start` takes it (its `timeout_ms` and `idle_timeout_ms` bound
    /// the run; without them the call lasts as long as the command does).
    pub start: StartArgs,
    /// The most bytes of each stream returned (1 to 1048576; default 65536). A stream that
    /// writes more is returned `incomplete` with this many bytes; the rest stays in the
    /// process's output (read it with `output` from the stream's `resume_cursor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_048_576))]
    pub max_bytes: Option<u64>,
    /// "safe_text" (default): UTF-8 with terminal control sequences removed; "base64": exactly
    /// the raw bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendering: Option<Rendering>,
}

impl std::fmt::Debug for StartArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
        f.debug_struct("StartArgs")
            .field("command", &self.command)
            .field("cwd", &self.cwd)
            .field("env", &names(&self.env))
            .field("env_persist", &names(&self.env_persist))
            .field("client_env", &self.client_env.as_ref().map(names))
            .field("inherit_env", &self.inherit_env)
            .field("login_shell_overlay", &self.login_shell_overlay)
            .field("labels", &self.labels)
            .field("name", &self.name)
            .field("timeout_ms", &self.timeout_ms)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("retention_bytes", &self.retention_bytes)
            .field("queue_ms", &self.queue_ms)
            .field("pty", &self.pty)
            .field("yield_ms", &self.yield_ms)
            .field("settle_ms", &self.settle_ms)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

/// `list`: every process the journal knows, optionally filtered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only processes in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// Only processes with this label, given as "key=value".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// Names one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandleArgs {
    /// The process: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
}

/// `output`: one page of a process's combined stdout+stderr, from a byte cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputArgs {
    /// The process: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
    /// Byte offset in the combined output to read from. Start at 0; to continue, pass the
    /// previous page's `next_cursor`.
    #[serde(default)]
    pub cursor: u64,
    /// The most bytes to return (1 to 1048576; default 65536).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_048_576))]
    pub max_bytes: Option<u64>,
    /// "safe_text" (default): UTF-8 with terminal control sequences removed, for reading.
    /// "base64": exactly the raw bytes, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendering: Option<Rendering>,
    /// When there is nothing new at `cursor` and the process is still running, wait up to this
    /// many milliseconds (at most 60000) for more output before answering. Default: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 60_000))]
    pub wait_ms: Option<u64>,
    /// With `wait_ms`: wait until at least this many bytes past `cursor` are there (default 1;
    /// 0 with `settle_ms`), the page is full, or the process ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1_048_576))]
    pub min_bytes: Option<u64>,
    /// With `wait_ms`: then wait until no new byte came for this many milliseconds (quiet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60_000))]
    pub settle_ms: Option<u64>,
    /// Return only the last this many lines (after any wait), never from before `cursor`: the
    /// page's `cursor` says where they start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100_000))]
    pub tail_lines: Option<u64>,
}

/// `input`: write to a process's stdin, and/or close it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputArgs {
    /// The process: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
    /// Text to write, as is (add "\n" to end a line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Bytes to write, base64-encoded (standard alphabet, padded). Exclusive with `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// Close stdin after writing, so the process reads end-of-file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

/// `stop`: terminate a process's whole tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopArgs {
    /// The process: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
    /// Milliseconds between SIGTERM and SIGKILL (at most 600000; default 1500, `limits::GRACE_MS_DEFAULT`). The process ends
    /// `terminated` if it exits within the grace, else `killed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 600_000))]
    pub grace_ms: Option<u64>,
}

/// `wait`: block until a process is terminal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// The process: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
    /// Give up after this many milliseconds with a `wait_timeout` error; the process keeps
    /// running. Default: wait as long as it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The longest reason `pause` and `resume` record.
pub const REASON_CHARS_MAX: usize = 1024;

/// `pause` and `resume`: close or open the pause gate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateArgs {
    /// Why, recorded in the journal with the change (at most 1024 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `admission_limit`: change admission at runtime, as `pueue parallel N` does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmissionLimitArgs {
    /// At most this many workloads at once (1 to 65536), replacing the automatic policy (cores
    /// and available memory are then not consulted); left out or null: back to the policy the
    /// server was configured with. Workloads running keep their capacity. Kept until the server
    /// restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65536))]
    pub max_concurrent: Option<u64>,
}

/// The largest runtime admission limit (`admission_limit`); the live-process bound caps any
/// limit anyway, this only keeps the number sane.
pub const ADMISSION_LIMIT_MAX: u64 = crate::limits::ADMISSION_LIMIT_MAX;

/// `await_input`: mark a running process as waiting for human input (its idle limit is
/// suspended until input is written to it or the mark is cleared), or clear the mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AwaitInputArgs {
    /// The process: its handle, number (12 or #12) or name.
    #[serde(deserialize_with = "reference_text")]
    #[schemars(schema_with = "reference_schema")]
    pub handle: String,
    /// true (default): mark it as waiting; false: clear the mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<bool>,
}

/// `shutdown`: stop every process and the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShutdownArgs {
    /// Milliseconds between SIGTERM and SIGKILL (at most 600000; default 1500, `limits::GRACE_MS_DEFAULT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 600_000))]
    pub grace_ms: Option<u64>,
}

/// `clean`: retire the output of finished processes whose exit is verified.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CleanArgs {
    /// Retire output of processes that ended at least this many milliseconds ago. Default: the
    /// server's retention age (7 days unless configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than_ms: Option<u64>,
    /// Only report what would be retired; remove nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// A validated request: what dispatch acts on. A process is named by a [`ProcessRef`] (a
/// handle, a number or a name), which dispatch resolves against the root's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Server identity and protocol version; changes nothing.
    Hello,
    Start(StartArgs),
    /// A finished process's command again (the handle is checked to parse).
    Restart(RestartArgs),
    /// The process a handle, a number or a name names.
    Resolve(crate::lifecycle::ProcessRef),
    List {
        state: Option<State>,
        label: Option<(String, String)>,
    },
    Manifest(ProcessRef),
    Output {
        handle: ProcessRef,
        cursor: u64,
        max_bytes: u64,
        rendering: Rendering,
        wait_ms: u64,
        /// `None`: 1, or 0 with `settle_ms`.
        min_bytes: Option<u64>,
        settle_ms: Option<u64>,
        tail_lines: Option<u64>,
    },
    Input {
        handle: ProcessRef,
        data: Vec<u8>,
        close: bool,
    },
    Stop {
        handle: ProcessRef,
        grace_ms: u64,
    },
    Interrupt(ProcessRef),
    Wait {
        handle: ProcessRef,
        timeout_ms: Option<u64>,
    },
    Shutdown {
        grace_ms: u64,
    },
    Clean {
        older_than_ms: Option<u64>,
        dry_run: bool,
    },
    /// Admission now: slots, in use, each workload's reservation and the inputs.
    Admission,
    /// Sets the limit on workloads at once (`None`: back to the configured policy).
    AdmissionLimit {
        max_concurrent: Option<u64>,
    },
    Pause {
        reason: String,
    },
    Resume {
        reason: String,
    },
    AwaitInput {
        handle: ProcessRef,
        waiting: bool,
    },
    Resize {
        handle: ProcessRef,
        rows: u16,
        cols: u16,
    },
    /// Run a command to completion and return each stream (up to `max_bytes`) and a receipt.
    Capture {
        start: StartArgs,
        max_bytes: u64,
        rendering: Rendering,
    },
}

/// A request with the client's ID, echoed in the response.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub id: Option<Value>,
    pub request: Request,
}

/// Why a request was refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolErrorKind {
    #[error("the request is {len} bytes; at most {max} are accepted")]
    TooLarge { len: usize, max: usize },
    #[error("the request is not a JSON object: {0}")]
    Malformed(String),
    #[error("protocol version {0} is not supported (this server speaks {PROTOCOL_VERSION})")]
    UnsupportedVersion(u64),
    #[error("unknown operation {0:?} (known: {ops})", ops = OPS.join(", "))]
    UnknownOp(String),
    #[error("bad arguments for {op}: {message}")]
    BadArgs { op: &'static str, message: String },
}

/// A refused request, with the client's ID when it could be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind}")]
pub struct ProtocolError {
    pub id: Option<Value>,
    pub kind: ProtocolErrorKind,
}

/// Machine-readable error codes; stable across versions (new ones may be added).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not a JSON object, or a field of the wrong type at the top level.
    BadRequest,
    UnsupportedVersion,
    UnknownOp,
    /// The arguments do not fit the operation's schema or its ranges.
    BadArgs,
    TooLarge,
    /// The peer is not the user the server runs as.
    Forbidden,
    /// Too many connections at once: refused, or evicted to make room (the request on the
    /// connection, if any, was never read).
    Busy,
    /// A request line was not completed within the server's bound; the connection is closed.
    Timeout,
    /// The connection sent no request within the server's idle bound and is closed; no request
    /// was read, so a client may reconnect and send it.
    Idle,
    UnknownHandle,
    NotRunning,
    InputClosed,
    /// Admission refused the start (shutting down, at the live-process bound, queue full, paused).
    Refused,
    /// Admission found no capacity for the start, or the live-process bound is reached (or no
    /// capacity came within its `queue_ms`); the message gives the decision and its inputs,
    /// `admission` shows them in full. Asking again with `queue_ms` waits for capacity.
    Capacity,
    /// The command could not be spawned; it is recorded as `failed` under `handle`.
    SpawnFailed,
    WaitTimeout,
    TeardownFailed,
    /// The process's output was retired (removed by retention or `clean`); its manifest stays.
    Retired,
    /// `restart` of a process that has not ended (stop it first).
    NotFinished,
    /// `restart` without a value the journal withheld; the message names each missing
    /// variable, to be given in `env`.
    MissingEnv,
    /// A live process already has the name the start asked for (`handle` names it).
    NameTaken,
    /// The journal, the spool or the server failed.
    Internal,
    /// A code this client does not know (sent by a newer server).
    #[serde(other)]
    Unknown,
}

/// The error half of a response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// The process the error concerns, when there is one (a failed spawn has a handle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// With `spawn_failed`: which kind of failure (`not_found`, `not_executable`, `other`),
    /// for a client that answers with the shell's exit statuses 127 and 126.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn: Option<crate::supervisor::SpawnFailure>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            handle: None,
            spawn: None,
        }
    }
}

impl From<&ProtocolErrorKind> for ErrorCode {
    fn from(kind: &ProtocolErrorKind) -> Self {
        match kind {
            ProtocolErrorKind::TooLarge { .. } => ErrorCode::TooLarge,
            ProtocolErrorKind::Malformed(_) => ErrorCode::BadRequest,
            ProtocolErrorKind::UnsupportedVersion(_) => ErrorCode::UnsupportedVersion,
            ProtocolErrorKind::UnknownOp(_) => ErrorCode::UnknownOp,
            ProtocolErrorKind::BadArgs { .. } => ErrorCode::BadArgs,
        }
    }
}

impl From<&ProtocolError> for ApiError {
    fn from(e: &ProtocolError) -> Self {
        ApiError::new(ErrorCode::from(&e.kind), e.kind.to_string())
    }
}

/// One response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

impl Response {
    pub fn new(id: Option<Value>, outcome: Result<Value, ApiError>) -> Self {
        match outcome {
            Ok(result) => Response {
                v: PROTOCOL_VERSION,
                id,
                ok: true,
                result: Some(result),
                error: None,
            },
            Err(error) => Response {
                v: PROTOCOL_VERSION,
                id,
                ok: false,
                result: None,
                error: Some(error),
            },
        }
    }

    /// The response as one line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        // Serializing a Value tree cannot fail (string keys, no non-finite floats are produced).
        let mut line = serde_json::to_vec(self).unwrap_or_else(|e| {
            format!(
                r#"{{"v":{PROTOCOL_VERSION},"ok":false,"error":{{"code":"internal","message":"cannot encode the response: {e}"}}}}"#
            )
            .into_bytes()
        });
        line.push(b'\n');
        line
    }
}

/// Decodes and validates one request (without its trailing newline).
pub fn decode_request(bytes: &[u8]) -> Result<Envelope, ProtocolError> {
    let fail = |id: Option<Value>, kind| ProtocolError { id, kind };
    let mut object = request_object(bytes).map_err(|kind| fail(None, kind))?;
    let id = request_id(object.remove("id")).map_err(|kind| fail(None, kind))?;
    // From here on the ID is known, and every refusal carries it.
    let (op, args) = match op_and_args(object) {
        Ok(found) => found,
        Err(kind) => return Err(fail(id, kind)),
    };
    match request_from_args(&op, args) {
        Ok(request) => Ok(Envelope { id, request }),
        Err(kind) => Err(fail(id, kind)),
    }
}

/// The line as a JSON object, refused unread when it is over the size bound.
fn request_object(bytes: &[u8]) -> Result<Map<String, Value>, ProtocolErrorKind> {
    if bytes.len() > REQUEST_BYTES_MAX {
        return Err(ProtocolErrorKind::TooLarge {
            len: bytes.len(),
            max: REQUEST_BYTES_MAX,
        });
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ProtocolErrorKind::Malformed(e.to_string()))?;
    match value {
        Value::Object(object) => Ok(object),
        _ => Err(ProtocolErrorKind::Malformed(
            "expected an object".to_owned(),
        )),
    }
}

fn request_id(id: Option<Value>) -> Result<Option<Value>, ProtocolErrorKind> {
    match id {
        None | Some(Value::Null) => Ok(None),
        // Integers only: a float ID would not come back bit-exact (decimal to binary and back
        // is lossy), and clients match responses by ID (found by fuzzing).
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(Value::Number(n))),
        Some(Value::String(s)) if s.chars().count() <= ID_CHARS_MAX => Ok(Some(Value::String(s))),
        Some(_) => Err(ProtocolErrorKind::Malformed(format!(
            "\"id\" must be an integer or a string of at most {ID_CHARS_MAX} characters"
        ))),
    }
}

/// The envelope past its ID: the version checked, the operation's name and its `args` (an
/// object; left out or null is empty), and no other field.
fn op_and_args(mut object: Map<String, Value>) -> Result<(String, Value), ProtocolErrorKind> {
    let malformed = |m: &str| ProtocolErrorKind::Malformed(m.to_owned());
    match object.remove("v") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
            Some(v) => return Err(ProtocolErrorKind::UnsupportedVersion(v)),
            None => return Err(malformed("\"v\" must be a protocol version number")),
        },
        _ => return Err(malformed("\"v\" (the protocol version, 1) is required")),
    }
    let op = match object.remove("op") {
        Some(Value::String(op)) => op,
        _ => return Err(malformed("\"op\" (the operation name) is required")),
    };
    let args = match object.remove("args") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(args @ Value::Object(_)) => args,
        Some(_) => return Err(malformed("\"args\" must be an object")),
    };
    if let Some(field) = object.keys().next() {
        return Err(ProtocolErrorKind::Malformed(format!(
            "unknown field {:?} (expected v, id, op, args)",
            truncate(field)
        )));
    }
    Ok((op, args))
}

/// Keeps client-supplied text in error messages short.
fn truncate(text: &str) -> String {
    const MAX: usize = 64;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

impl Request {
    /// The request as one socket line, newline included.
    pub fn to_line(&self, id: Option<Value>) -> Vec<u8> {
        let (op, args) = self.to_wire();
        let mut object = Map::new();
        object.insert("v".to_owned(), Value::from(PROTOCOL_VERSION));
        if let Some(id) = id {
            object.insert("id".to_owned(), id);
        }
        object.insert("op".to_owned(), Value::from(op));
        object.insert("args".to_owned(), args);
        let mut line = Value::Object(object).to_string().into_bytes();
        line.push(b'\n');
        line
    }

    /// A start (`start`, `restart`, `capture`) that left `queue_ms` out, given `ms` instead: the
    /// MCP tools wait for capacity by default, as the command line does. `queue_ms: 0` still
    /// fails at once.
    pub fn queue_by_default(mut self, ms: u64) -> Request {
        let queue = match &mut self {
            Request::Start(args) | Request::Capture { start: args, .. } => &mut args.queue_ms,
            Request::Restart(args) => &mut args.queue_ms,
            _ => return self,
        };
        queue.get_or_insert(ms);
        self
    }

    /// How long dispatch may take beyond the server's own work (for client timeouts).
    pub fn blocks_for(&self) -> Option<Duration> {
        match self {
            Request::Output { wait_ms, .. } => Some(Duration::from_millis(*wait_ms)),
            Request::Wait { timeout_ms, .. } => timeout_ms.map(Duration::from_millis),
            Request::Start(args) => Some(Duration::from_millis(
                args.queue_ms.unwrap_or(0) + args.yield_ms.unwrap_or(0),
            )),
            Request::Restart(args) => Some(Duration::from_millis(args.queue_ms.unwrap_or(0))),
            // As long as the command runs: its own deadlines, if any, bound it.
            Request::Capture { .. } => None,
            Request::Stop { grace_ms, .. } | Request::Shutdown { grace_ms } => {
                Some(Duration::from_millis(*grace_ms))
            }
            _ => Some(Duration::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The environment fields: checked, and no error or `Debug` repeats a value.
    #[test]
    fn start_environments_are_checked_and_values_never_shown() {
        let start = |args: Value| request_from_args("start", args);
        let secret = "vAlUe-never-shown";
        let refused = [
            serde_json::json!({"command": ["true"], "env": {"K": secret}, "env_persist": {"K": "x"}}),
            serde_json::json!({"command": ["true"], "client_env": {"A": secret}, "inherit_env": true}),
            serde_json::json!({"command": ["true"], "client_env": {"A=B": secret}}),
            serde_json::json!({"command": ["true"], "env_persist": {"": secret}}),
            serde_json::json!({"command": ["true"], "client_env": {"A": "nul\u{0}"}}),
        ];
        for args in refused {
            let e = start(args.clone()).unwrap_err();
            assert!(!format!("{e} {e:?}").contains(secret), "{e}");
            assert!(!format!("{e}").contains("nul"), "{e}");
        }
        let Ok(Request::Start(args)) = start(serde_json::json!({
            "command": ["true"],
            "env": {"TOKEN": secret},
            "env_persist": {"MODE": "fast"},
            "client_env": {"HOME": secret},
            "login_shell_overlay": true,
        })) else {
            panic!("a valid start");
        };
        let text = format!("{args:?}");
        assert!(!text.contains(secret) && text.contains("TOKEN"), "{text}");
        assert!(!text.contains("fast") && text.contains("HOME"), "{text}");
        // The typed request round-trips through the wire form.
        let wire = serde_json::to_value(&args).unwrap();
        assert_eq!(start(wire).ok(), Some(Request::Start(args)));
    }

    #[test]
    fn restart_environments_are_checked_and_values_never_shown() {
        let restart = |args: Value| request_from_args("restart", args);
        let secret = "vAlUe-never-shown";
        let h = "p-0123456789abcdef0123456789abcdef";
        let refused = [
            serde_json::json!({"handle": h, "client_env": {"A": secret}, "inherit_env": true}),
            serde_json::json!({"handle": h, "env": {"A=B": secret}}),
            serde_json::json!({"handle": h, "env": {"": secret}}),
            serde_json::json!({"handle": h, "env": {"A": "nul\u{0}"}}),
            serde_json::json!({"handle": "p-1", "env": {"A": secret}}),
            serde_json::json!({"handle": h, "pty": {"rows": 0, "cols": 80}}),
            serde_json::json!({"handle": h, "queue_ms": QUEUE_MS_MAX + 1}),
            serde_json::json!({"handle": h, "command": ["true"]}),
        ];
        for args in refused {
            let e = restart(args.clone()).unwrap_err();
            assert!(
                matches!(e, ProtocolErrorKind::BadArgs { op: "restart", .. }),
                "{args}: {e}"
            );
            assert!(!format!("{e} {e:?}").contains(secret), "{e}");
        }
        let Ok(Request::Restart(args)) = restart(serde_json::json!({
            "handle": h,
            "env": {"TOKEN": secret},
            "client_env": {"HOME": secret},
        })) else {
            panic!("a valid restart");
        };
        let text = format!("{args:?}");
        assert!(!text.contains(secret) && text.contains("TOKEN"), "{text}");
        assert!(text.contains("HOME"), "{text}");
        let wire = serde_json::to_value(&args).unwrap();
        assert_eq!(restart(wire).ok(), Some(Request::Restart(args)));
    }

    /// IDs come back exactly: integers and short strings only (a float ID was not echoed
    /// bit-exact; `fuzz/regressions/protocol_request/float-id-not-echoed-exactly`).
    #[test]
    fn ids_are_integers_or_strings() {
        let id = |text: &str| decode_request(text.as_bytes()).map(|e| e.id);
        assert_eq!(
            id(r#"{"v":1,"id":18446744073709551615,"op":"hello"}"#),
            Ok(Some(serde_json::json!(u64::MAX)))
        );
        assert_eq!(
            id(r#"{"v":1,"id":-7,"op":"hello"}"#),
            Ok(Some(serde_json::json!(-7)))
        );
        assert_eq!(
            id(r#"{"v":1,"id":"x","op":"hello"}"#),
            Ok(Some(serde_json::json!("x")))
        );
        for bad in [
            r#"{"v":1,"id":1.5,"op":"hello"}"#,
            r#"{"v":1,"id":1e3,"op":"hello"}"#,
            r#"{"v":1,"id":[1],"op":"hello"}"#,
            r#"{"v":1,"id":true,"op":"hello"}"#,
        ] {
            let e = decode_request(bad.as_bytes()).unwrap_err();
            assert_eq!(ErrorCode::from(&e.kind), ErrorCode::BadRequest, "{bad}");
        }
    }

    /// The schemas an agent sees state the same ranges the decoder enforces.
    #[test]
    fn schemas_carry_the_ranges() {
        let output = serde_json::to_value(schemars::schema_for!(OutputArgs)).unwrap();
        let max_bytes = &output["properties"]["max_bytes"];
        assert_eq!(max_bytes["minimum"], serde_json::json!(1), "{max_bytes}");
        assert_eq!(max_bytes["maximum"], serde_json::json!(OUTPUT_BYTES_MAX));
        assert_eq!(
            output["properties"]["wait_ms"]["maximum"],
            serde_json::json!(OUTPUT_WAIT_MS_MAX)
        );
        let start = serde_json::to_value(schemars::schema_for!(StartArgs)).unwrap();
        let retention = &start["properties"]["retention_bytes"];
        assert_eq!(retention["minimum"], serde_json::json!(RETENTION_BYTES_MIN));
        assert_eq!(retention["maximum"], serde_json::json!(RETENTION_BYTES_MAX));
        let stop = serde_json::to_value(schemars::schema_for!(StopArgs)).unwrap();
        assert_eq!(
            stop["properties"]["grace_ms"]["maximum"],
            serde_json::json!(GRACE_MS_MAX)
        );
        assert_eq!(stop["additionalProperties"], serde_json::json!(false));
    }
}
