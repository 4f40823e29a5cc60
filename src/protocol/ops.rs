//! The operations, described once. One table (`operations!` below) gives each operation's name
//! on the wire, the `args` struct it is read from and written as, its check, its [`Request`]
//! variant and how that variant's fields are written back; [`OPS`], [`Request::op`],
//! [`request_from_args`] and [`Request::to_wire`] are all generated from it. Only the checks
//! are written by hand, one function per operation that has more than a field to copy.
//!
//! Invariants:
//! - an operation is one row, so the op names, the decoder and the encoder cannot disagree on
//!   which operations exist or which variant each names; a variant without a row does not
//!   compile (`op` and `to_wire` match exhaustively), and a name in two rows is an unreachable
//!   pattern, refused by clippy's `-D warnings`;
//! - decoding `args` is always, in this order: the nested-object check, serde into the row's
//!   struct (which refuses unknown fields), then the row's check; every refusal after the name
//!   lookup is `bad_args` for that operation, with the message the check gave;
//! - a check only reads the typed struct (no I/O, no clock), so decoding stays total and changes
//!   nothing;
//! - encoding writes every field explicitly, the defaults decoding filled in included, so that
//!   `request_from_args(r.to_wire())` is `r` whatever defaults a server has (proptested in
//!   `tests/it/protocol_props.rs`, fuzzed by `protocol_request`).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    ADMISSION_LIMIT_MAX, AdmissionLimitArgs, AwaitInputArgs, CaptureArgs, CleanArgs,
    GRACE_MS_DEFAULT, GRACE_MS_MAX, GateArgs, HandleArgs, InputArgs, ListArgs,
    OUTPUT_BYTES_DEFAULT, OUTPUT_BYTES_MAX, OUTPUT_WAIT_MS_MAX, OutputArgs, ProtocolErrorKind,
    QUEUE_MS_MAX, REASON_CHARS_MAX, RETENTION_BYTES_MAX, RETENTION_BYTES_MIN, Request, ResizeArgs,
    ResolveArgs, RestartArgs, START_ITEMS_MAX, ShutdownArgs, StartArgs, StopArgs, TAIL_LINES_MAX,
    WaitArgs, base64, truncate,
};
use crate::lifecycle::{ProcessRef, ReferenceError};
use crate::spool::render;
use crate::supervisor::Rendering;

/// Generates the four views of the table. A row is
/// `"name": Args => check; Variant {bindings} => args built from the bindings;`, the check being
/// any `FnOnce(Args) -> Result<Request, String>`. Bindings are in braces or parentheses as the
/// variant is declared (`{}` for a unit variant).
macro_rules! operations {
    ($($name:literal: $args:ty => $check:expr; $variant:ident $bind:tt => $wire:expr;)*) => {
        /// Every operation name, as it appears in `"op"`.
        pub const OPS: [&str; [$($name),*].len()] = [$($name),*];

        /// Validates the `args` of `op` into a [`Request`]; the MCP tools call this with their
        /// arguments so that both surfaces accept exactly the same values.
        pub fn request_from_args(op: &str, args: Value) -> Result<Request, ProtocolErrorKind> {
            type Decode = fn(Value) -> Result<Request, String>;
            let (op, decode): (&'static str, Decode) = match op {
                $($name => ($name, |args| checked::<$args>(args, $check)),)*
                _ => return Err(ProtocolErrorKind::UnknownOp(truncate(op))),
            };
            let bad = |message| ProtocolErrorKind::BadArgs { op, message };
            nested_objects(&args).map_err(bad)?;
            decode(args).map_err(bad)
        }

        impl Request {
            /// The operation's name on the wire (`start`, `output`, ...), for logs.
            pub fn op(&self) -> &'static str {
                match self {
                    $(Request::$variant { .. } => $name,)*
                }
            }

            /// The operation name and `args` object that `decode_request`
            /// turns back into `self`.
            pub fn to_wire(&self) -> (&'static str, Value) {
                let (op, args) = match self {
                    $(Request::$variant $bind => ($name, serde_json::to_value($wire)),)*
                };
                // Serializing these structs cannot fail (string keys, no floats).
                (op, args.unwrap_or(Value::Null))
            }
        }
    };
}

operations! {
    "hello": Empty => |Empty {}| Ok(Request::Hello);
        Hello {} => Empty {};
    "start": StartArgs => start;
        Start(args) => args;
    "restart": RestartArgs => restart;
        Restart(args) => args;
    "resolve": ResolveArgs => |a| Ok(Request::Resolve(reference(&a.reference)?));
        Resolve(r) => ResolveArgs { reference: r.to_string() };
    "list": ListArgs => list;
        List { state, label } => ListArgs {
            state: *state,
            label: label.as_ref().map(|(k, v)| format!("{k}={v}")),
        };
    "manifest": HandleArgs => |a| Ok(Request::Manifest(reference(&a.handle)?));
        Manifest(h) => HandleArgs { handle: h.to_string() };
    "output": OutputArgs => output;
        Output { handle, cursor, max_bytes, rendering, wait_ms, min_bytes, settle_ms, tail_lines }
            => OutputArgs {
                handle: handle.to_string(),
                cursor: *cursor,
                max_bytes: Some(*max_bytes),
                rendering: Some(*rendering),
                wait_ms: Some(*wait_ms),
                min_bytes: *min_bytes,
                settle_ms: *settle_ms,
                tail_lines: *tail_lines,
            };
    "input": InputArgs => input;
        // Bytes go as base64, which carries any; a bare close sends none.
        Input { handle, data, close } => InputArgs {
            handle: handle.to_string(),
            text: None,
            base64: (!data.is_empty() || !*close).then(|| render::base64(data)),
            close: *close,
        };
    "stop": StopArgs => |a| Ok(Request::Stop {
            handle: reference(&a.handle)?,
            grace_ms: grace(a.grace_ms)?,
        });
        Stop { handle, grace_ms } => StopArgs {
            handle: handle.to_string(),
            grace_ms: Some(*grace_ms),
        };
    "interrupt": HandleArgs => |a| Ok(Request::Interrupt(reference(&a.handle)?));
        Interrupt(h) => HandleArgs { handle: h.to_string() };
    "wait": WaitArgs => |a| Ok(Request::Wait {
            handle: reference(&a.handle)?,
            timeout_ms: a.timeout_ms,
        });
        Wait { handle, timeout_ms } => WaitArgs {
            handle: handle.to_string(),
            timeout_ms: *timeout_ms,
        };
    "shutdown": ShutdownArgs => |a| Ok(Request::Shutdown { grace_ms: grace(a.grace_ms)? });
        Shutdown { grace_ms } => ShutdownArgs { grace_ms: Some(*grace_ms) };
    "clean": CleanArgs => |a| Ok(Request::Clean {
            older_than_ms: a.older_than_ms,
            dry_run: a.dry_run,
        });
        Clean { older_than_ms, dry_run } => CleanArgs {
            older_than_ms: *older_than_ms,
            dry_run: *dry_run,
        };
    "admission": Empty => |Empty {}| Ok(Request::Admission);
        Admission {} => Empty {};
    "admission_limit": AdmissionLimitArgs => admission_limit;
        AdmissionLimit { max_concurrent } => AdmissionLimitArgs {
            max_concurrent: *max_concurrent,
        };
    "pause": GateArgs => |a| Ok(Request::Pause { reason: reason(a)? });
        Pause { reason } => GateArgs { reason: (!reason.is_empty()).then(|| reason.clone()) };
    "resume": GateArgs => |a| Ok(Request::Resume { reason: reason(a)? });
        Resume { reason } => GateArgs { reason: (!reason.is_empty()).then(|| reason.clone()) };
    "await_input": AwaitInputArgs => |a| Ok(Request::AwaitInput {
            handle: reference(&a.handle)?,
            waiting: a.waiting.unwrap_or(true),
        });
        AwaitInput { handle, waiting } => AwaitInputArgs {
            handle: handle.to_string(),
            waiting: Some(*waiting),
        };
    "resize": ResizeArgs => resize;
        Resize { handle, rows, cols } => ResizeArgs {
            handle: handle.to_string(),
            rows: *rows,
            cols: *cols,
        };
    "capture": CaptureArgs => capture;
        Capture { start, max_bytes, rendering } => CaptureArgs {
            start: start.clone(),
            max_bytes: Some(*max_bytes),
            rendering: Some(*rendering),
        };
}

/// The `args` of an operation that takes none.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// `args` read into `A`, then checked into a request.
fn checked<A: DeserializeOwned>(
    args: Value,
    check: impl FnOnce(A) -> Result<Request, String>,
) -> Result<Request, String> {
    check(serde_json::from_value(args).map_err(|e| e.to_string())?)
}

/// Refuses an array where an argument is an object (`start`, `pty`, and `start`'s `pty`):
/// serde reads a struct from a sequence of its fields in order too, which the schemas (and the
/// documentation) do not offer, so that `{"start": ["ls"]}` must not run `ls`.
fn nested_objects(args: &Value) -> Result<(), String> {
    let start = args.get("start");
    let fields = [
        ("start", start),
        ("pty", args.get("pty")),
        ("start.pty", start.and_then(|s| s.get("pty"))),
    ];
    match fields
        .into_iter()
        .find(|(_, v)| v.is_some_and(Value::is_array))
    {
        Some((name, _)) => Err(format!("{name}: an object, not an array")),
        None => Ok(()),
    }
}

/// A process reference parsed; what it names is dispatch's to resolve.
fn reference(text: &str) -> Result<ProcessRef, String> {
    text.parse().map_err(|e: ReferenceError| e.to_string())
}

fn start(args: StartArgs) -> Result<Request, String> {
    validate_start(&args)?;
    Ok(Request::Start(args))
}

fn restart(args: RestartArgs) -> Result<Request, String> {
    reference(&args.handle)?;
    validate_restart(&args)?;
    Ok(Request::Restart(args))
}

fn capture(args: CaptureArgs) -> Result<Request, String> {
    validate_start(&args.start).map_err(|e| format!("start: {e}"))?;
    let start = &args.start;
    if start.yield_ms.is_some() || start.settle_ms.is_some() || start.max_bytes.is_some() {
        return Err(
            "start: yield_ms, settle_ms and max_bytes are for the start tool; capture runs to \
             the end and takes its own max_bytes"
                .to_owned(),
        );
    }
    Ok(Request::Capture {
        max_bytes: max_bytes(args.max_bytes)?,
        start: args.start,
        rendering: args.rendering.unwrap_or(Rendering::SafeText),
    })
}

fn list(args: ListArgs) -> Result<Request, String> {
    let label = match args.label {
        None => None,
        Some(text) => match text.split_once('=') {
            Some((k, v)) if !k.is_empty() => Some((k.to_owned(), v.to_owned())),
            _ => return Err(format!("label {:?} is not key=value", truncate(&text))),
        },
    };
    Ok(Request::List {
        state: args.state,
        label,
    })
}

fn output(args: OutputArgs) -> Result<Request, String> {
    let max_bytes = max_bytes(args.max_bytes)?;
    let wait_ms = args.wait_ms.unwrap_or(0);
    within("wait_ms", Some(wait_ms), 0, OUTPUT_WAIT_MS_MAX)?;
    within("min_bytes", args.min_bytes, 0, OUTPUT_BYTES_MAX)?;
    within("settle_ms", args.settle_ms, 1, OUTPUT_WAIT_MS_MAX)?;
    within("tail_lines", args.tail_lines, 1, TAIL_LINES_MAX)?;
    Ok(Request::Output {
        handle: reference(&args.handle)?,
        cursor: args.cursor,
        max_bytes,
        rendering: args.rendering.unwrap_or(Rendering::SafeText),
        wait_ms,
        min_bytes: args.min_bytes,
        settle_ms: args.settle_ms,
        tail_lines: args.tail_lines,
    })
}

/// `text` and `base64` are two spellings of the bytes to write: one at most, or none with
/// `close`.
fn input(args: InputArgs) -> Result<Request, String> {
    let data = match (args.text, args.base64) {
        (Some(_), Some(_)) => return Err("give either text or base64, not both".to_owned()),
        (Some(text), None) => text.into_bytes(),
        (None, Some(encoded)) => base64::decode(&encoded).map_err(|e| e.to_string())?,
        (None, None) if args.close => Vec::new(),
        (None, None) => return Err("nothing to do: give text, base64 or close".to_owned()),
    };
    Ok(Request::Input {
        handle: reference(&args.handle)?,
        data,
        close: args.close,
    })
}

fn resize(args: ResizeArgs) -> Result<Request, String> {
    if args.rows == 0 || args.cols == 0 {
        return Err(format!(
            "{}x{}: a terminal has at least one row and one column",
            args.rows, args.cols
        ));
    }
    Ok(Request::Resize {
        handle: reference(&args.handle)?,
        rows: args.rows,
        cols: args.cols,
    })
}

fn admission_limit(args: AdmissionLimitArgs) -> Result<Request, String> {
    if let Some(n) = args.max_concurrent
        && !(1..=ADMISSION_LIMIT_MAX).contains(&n)
    {
        return Err(format!(
            "max_concurrent {n} is out of range (1 to {ADMISSION_LIMIT_MAX})"
        ));
    }
    Ok(Request::AdmissionLimit {
        max_concurrent: args.max_concurrent,
    })
}

/// The reason `pause` and `resume` record: empty when left out.
fn reason(args: GateArgs) -> Result<String, String> {
    let reason = args.reason.unwrap_or_default();
    if reason.chars().count() > REASON_CHARS_MAX || reason.contains('\0') {
        return Err(format!(
            "reason must be at most {REASON_CHARS_MAX} characters, without NUL"
        ));
    }
    Ok(reason)
}

/// `max_bytes` of `output` and `capture`: 1 to [`OUTPUT_BYTES_MAX`], [`OUTPUT_BYTES_DEFAULT`]
/// when left out.
fn max_bytes(bytes: Option<u64>) -> Result<u64, String> {
    let bytes = bytes.unwrap_or(OUTPUT_BYTES_DEFAULT);
    if !(1..=OUTPUT_BYTES_MAX).contains(&bytes) {
        return Err(format!(
            "max_bytes {bytes} is out of range (1 to {OUTPUT_BYTES_MAX})"
        ));
    }
    Ok(bytes)
}

/// `value`, when given, within `min..=max`.
fn within(name: &str, value: Option<u64>, min: u64, max: u64) -> Result<(), String> {
    match value {
        Some(v) if !(min..=max).contains(&v) => {
            Err(format!("{name} {v} is out of range ({min} to {max})"))
        }
        _ => Ok(()),
    }
}

fn grace(ms: Option<u64>) -> Result<u64, String> {
    let ms = ms.unwrap_or(GRACE_MS_DEFAULT);
    if ms > GRACE_MS_MAX {
        return Err(format!(
            "grace_ms {ms} is out of range (at most {GRACE_MS_MAX})"
        ));
    }
    Ok(ms)
}

fn queue(ms: Option<u64>) -> Result<(), String> {
    match ms {
        Some(ms) if ms > QUEUE_MS_MAX => Err(format!(
            "queue_ms {ms} is out of range (at most {QUEUE_MS_MAX})"
        )),
        _ => Ok(()),
    }
}

fn pty(pty: Option<&super::PtyArgs>) -> Result<(), String> {
    match pty {
        Some(pty) if pty.rows == 0 || pty.cols == 0 => Err(format!(
            "pty {}x{}: a terminal has at least one row and one column",
            pty.rows, pty.cols
        )),
        _ => Ok(()),
    }
}

/// The environment to start from is chosen once: the client's, or the server's on request.
fn one_base(client_env: bool, inherit_env: bool) -> Result<(), String> {
    if client_env && inherit_env {
        return Err("give client_env or inherit_env, not both".to_owned());
    }
    Ok(())
}

fn validate_restart(args: &RestartArgs) -> Result<(), String> {
    let client_env = args.client_env.as_ref();
    if args.env.len() > START_ITEMS_MAX || client_env.is_some_and(|e| e.len() > START_ITEMS_MAX) {
        return Err(format!("at most {START_ITEMS_MAX} variables each"));
    }
    let vars = || args.env.iter().chain(client_env.into_iter().flatten());
    if vars().any(|(k, v)| k.contains('\0') || v.contains('\0')) {
        return Err("variables cannot contain NUL characters".to_owned());
    }
    if vars().any(|(k, _)| k.is_empty() || k.contains('=')) {
        return Err("environment variable names must be non-empty and contain no '='".to_owned());
    }
    one_base(client_env.is_some(), args.inherit_env)?;
    queue(args.queue_ms)?;
    pty(args.pty.as_ref())
}

/// The checks of a start. The first that fails gives the message, so their order is part of
/// what a client sees: it is kept as it was when they were one function.
fn validate_start(args: &StartArgs) -> Result<(), String> {
    start_items(args)?;
    pty(args.pty.as_ref())?;
    // Names only in the message: values may be secrets.
    if let Some(k) = args.env.keys().find(|k| args.env_persist.contains_key(*k)) {
        return Err(format!(
            "environment variable {} is in both env and env_persist",
            truncate(k)
        ));
    }
    one_base(args.client_env.is_some(), args.inherit_env)?;
    start_name(args)?;
    start_limits(args)
}

/// The command, the variables and the labels: present, bounded in number, free of NUL (which
/// `execve` cannot carry), and variable names that `environ` can hold.
fn start_items(args: &StartArgs) -> Result<(), String> {
    let Some(program) = args.command.first() else {
        return Err("command is empty: give the program and its arguments".to_owned());
    };
    if program.is_empty() {
        return Err("the program name is empty".to_owned());
    }
    let client_env = args.client_env.as_ref();
    if args.command.len() > START_ITEMS_MAX
        || args.env.len() + args.env_persist.len() > START_ITEMS_MAX
        || args.labels.len() > START_ITEMS_MAX
        || client_env.is_some_and(|e| e.len() > START_ITEMS_MAX)
    {
        return Err(format!(
            "at most {START_ITEMS_MAX} arguments, variables and labels each"
        ));
    }
    let nul = |s: &String| s.contains('\0');
    let vars = || {
        (args.env.iter())
            .chain(&args.env_persist)
            .chain(client_env.into_iter().flatten())
    };
    if args.command.iter().any(nul)
        || vars().any(|(k, v)| nul(k) || nul(v))
        || args.cwd.as_ref().is_some_and(nul)
    {
        return Err("arguments, variables and cwd cannot contain NUL characters".to_owned());
    }
    if vars().any(|(k, _)| k.is_empty() || k.contains('=')) {
        return Err("environment variable names must be non-empty and contain no '='".to_owned());
    }
    Ok(())
}

/// A name is kept as the label `name`: both given must agree.
fn start_name(args: &StartArgs) -> Result<(), String> {
    let Some(name) = &args.name else {
        return Ok(());
    };
    if !crate::lifecycle::reference::valid_name(name) {
        return Err(format!(
            "{:?} is not a process name: 1 to 64 ASCII letters, digits, '.', '_' or '-', \
             starting with a letter or '_' (not \"p-\")",
            truncate(name)
        ));
    }
    if args
        .labels
        .get(crate::lifecycle::NAME_LABEL)
        .is_some_and(|l| l != name)
    {
        return Err("name and the label \"name\" differ: give one".to_owned());
    }
    Ok(())
}

/// The working directory, the deadlines, the queue wait, the yield and the retention.
fn start_limits(args: &StartArgs) -> Result<(), String> {
    if let Some(cwd) = &args.cwd
        && !cwd.starts_with('/')
    {
        return Err(format!("cwd {:?} must be an absolute path", truncate(cwd)));
    }
    if args.timeout_ms == Some(0) {
        return Err("timeout_ms must be at least 1".to_owned());
    }
    queue(args.queue_ms)?;
    if args.idle_timeout_ms == Some(0) {
        return Err("idle_timeout_ms must be at least 1".to_owned());
    }
    within("yield_ms", args.yield_ms, 0, OUTPUT_WAIT_MS_MAX)?;
    within("settle_ms", args.settle_ms, 1, OUTPUT_WAIT_MS_MAX)?;
    within("max_bytes", args.max_bytes, 1, OUTPUT_BYTES_MAX)?;
    if args.yield_ms.is_none() && (args.settle_ms.is_some() || args.max_bytes.is_some()) {
        return Err(
            "settle_ms and max_bytes shape the output yield_ms returns: give yield_ms".to_owned(),
        );
    }
    if let Some(bytes) = args.retention_bytes
        && !(RETENTION_BYTES_MIN..=RETENTION_BYTES_MAX).contains(&bytes)
    {
        return Err(format!(
            "retention_bytes {bytes} is out of range ({RETENTION_BYTES_MIN}, one spool segment, \
             to {RETENTION_BYTES_MAX})"
        ));
    }
    Ok(())
}
