//! `procjournal serve` and the client commands that talk to it: `start`, `ps`, `logs`, `send`,
//! `stop`, `interrupt`, `wait`, `shutdown`.
//!
//! Every client command sends typed [`Request`]s through [`Client`]; when no daemon listens,
//! the read-only ones (`ps`, and `logs` of a process the journal shows as finished) read the
//! journal and the spool directly, without a lock, and say so on stderr.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use serde_json::Value;

use super::args::{
    GRACE_DEFAULT, parse_duration, parse_env, parse_label, parse_size, reference_arg,
};
use super::target::{Target, client_environment, resolve};
use crate::client::{Client, ClientError};
use crate::lifecycle::{ProcessRef, State};
use crate::protocol::{PtyArgs, Request, RestartArgs, StartArgs};
use crate::server::Server;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// serve

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    target: Target,
    /// Most processes live at once; more starts are refused.
    #[arg(long, default_value_t = 1024)]
    max_live: usize,
    /// Output each process keeps unless its start asks for other (default 64MiB), e.g. 256M,
    /// 1G; older output is deleted in whole segments. At least 8MiB, at most 4GiB.
    #[arg(long, value_name = "SIZE", value_parser = super::size::parse_retention)]
    retention: Option<u64>,
    /// Delete the output of a finished process (whose exit is verified) once it ended this
    /// long ago, e.g. 7d, 36h; `off` keeps all output. Checked at start and every hour.
    #[arg(long, value_name = "AGE", default_value = "7d", value_parser = parse_age)]
    retention_age: Age,
    #[command(flatten)]
    tree: super::TreeArgs,
    #[command(flatten)]
    admission: super::AdmissionArgs,
    /// Capture the PATH-like variables (PATH, PATHEXT, DOTNET_ROOT*) of a login shell once, at
    /// start, for `start --login-shell-overlay` (`$SHELL -l`, or the shell given).
    // Bare, it is the empty path: clap's PathBuf parser refuses an empty value, so the plain
    // OsString one is used.
    #[arg(long, value_name = "SHELL", num_args = 0..=1, default_missing_value = "",
          value_parser = |s: &str| Ok::<PathBuf, std::convert::Infallible>(PathBuf::from(s)))]
    login_shell: Option<PathBuf>,
    /// What the daemon logs: a level (error, warn, info, debug, trace) or a filter in
    /// RUST_LOG's syntax (default: $RUST_LOG, else `warn,procjournal=info`: one line per
    /// refusal, fault and restore decision, and per process start and end).
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// Append the log to this file instead of stderr: without a value daemon.log, a relative
    /// path in the root.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "daemon.log")]
    log_file: Option<PathBuf>,
    /// Share the runtime root read-only with this group (a name or gid): directories 02750,
    /// files 0640, instead of 0700 and 0600. The root keeps it: a later open without --group
    /// leaves a shared root shared (`chmod 700 ROOT` makes it private again).
    #[arg(long, value_name = "GROUP", value_parser = super::args::parse_group)]
    group: Option<u32>,
    #[command(flatten)]
    fleet: super::fleet_args::ServeFleet,
}

/// The default log filter: procjournal's own events at info, other crates' warnings.
const LOG_FILTER_DEFAULT: &str = "warn,procjournal=info";

/// Installs the daemon's log (tracing-subscriber): `--log-level`, else `RUST_LOG`, else
/// [`LOG_FILTER_DEFAULT`]; to stderr, or appended to `--log-file`.
fn init_log(
    root: &crate::root::RootDir,
    level: Option<&str>,
    file: Option<&Path>,
) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => EnvFilter::try_new(level).with_context(|| {
            format!(
                "--log-level {}",
                crate::spool::render::escape_field(level, false)
            )
        })?,
        None => {
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(LOG_FILTER_DEFAULT))
        }
    };
    // Not its own complaint about a failed write: made with `eprintln!`, it panics when stderr
    // is a closed pipe.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .log_internal_errors(false);
    let installed = match file {
        Some(path) => {
            // A plain name is opened in the root by its descriptor; `join` keeps an absolute
            // path as it is.
            let file = match path.to_str().filter(|name| !name.contains('/')) {
                Some(name) => root.open_file(name, true, true),
                None => crate::root::fsx::options()
                    .create(true)
                    .append(true)
                    .open(root.path().join(path)),
            }
            .with_context(|| format!("cannot open the log file {}", path.display()))?;
            // `&File` writes: each line is formatted whole and written with one `write` on an
            // append-mode file, so no lock is needed to keep lines apart.
            builder.with_writer(std::sync::Arc::new(file)).try_init()
        }
        None => builder.with_writer(std::io::stderr).try_init(),
    };
    // Only a second installation in one process fails; the first one stays.
    let _ = installed;
    Ok(())
}

/// `--retention-age`: a duration, or `off`.
#[derive(Debug, Clone, Copy)]
struct Age(Option<Duration>);

fn parse_age(text: &str) -> Result<Age, String> {
    if text == "off" {
        return Ok(Age(None));
    }
    parse_duration(text).map(|d| Age(Some(d)))
}

pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let root = args.target.root()?;
    let socket = args.target.socket.clone();
    // Checked, created and given its access before anything is written in it, the log first.
    let root_dir = crate::root::RootDir::prepare(&root, args.group)?;
    let fleet = args.fleet.config()?;
    init_log(
        &root_dir,
        args.log_level.as_deref(),
        args.log_file.as_deref(),
    )?;
    super::raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let mut config = super::supervisor_config(&root);
        config.group = args.group;
        config.max_live = args.max_live;
        args.admission.apply(&mut config.admission);
        if let Some(bytes) = args.retention {
            config.spool.retention_bytes = bytes;
        }
        config.retention = args.retention_age.0;
        config.launcher = args.tree.launcher(&root, false, false)?;
        config.login_shell = args.login_shell.map(|shell| {
            if shell.as_os_str().is_empty() {
                crate::tree::login_shell::default_shell()
            } else {
                shell
            }
        });
        let (server, restore) = Server::bind(config, socket)
            .await
            .with_context(|| format!("cannot serve the runtime root {}", root.display()))?;
        note_restore(&restore);
        note!(
            "procjournal: serving {} on {}",
            root.display(),
            server.socket().display()
        );
        super::fleet_args::start(fleet, &server);
        let report = server.run().await?;
        note!(
            "procjournal: shut down: {} terminated, {} killed, {} teardown failures",
            report.terminated.len(),
            report.killed.len(),
            report.teardown_failed.len()
        );
        for (handle, reason) in &report.teardown_failed {
            note!(
                "procjournal: teardown of {handle} failed: {}",
                crate::spool::render::escape_field(reason, true)
            );
        }
        Ok(if report.teardown_failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// What the restore of an earlier supervisor's processes found, on stderr.
fn note_restore(restore: &crate::supervisor::RestoreReport) {
    if !restore.reconciled.is_empty() {
        note!(
            "procjournal: {} process(es) of an earlier supervisor are now lost_on_restore",
            restore.reconciled.len()
        );
    }
    for error in &restore.errors {
        note!("procjournal: restore: {error}");
    }
}

// ---------------------------------------------------------------------------------------------
// start

#[derive(Debug, Args)]
pub(crate) struct StartCmdArgs {
    #[command(flatten)]
    target: Target,
    /// A label k=v (repeatable).
    #[arg(long = "label", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// A name to use instead of the handle in every command (`logs build`); unique among live
    /// processes. Letters, digits, '.', '_', '-'; starts with a letter or '_'.
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    env: super::env_args::EnvArgs,
    /// As --env, for a value the journal may keep (no secrets): a restart reuses it. NAME
    /// alone takes the value from procjournal's own environment.
    #[arg(long = "env-persist", value_name = "NAME[=value]", value_parser = parse_env)]
    env_persist: Vec<(String, String)>,
    /// Start from the daemon's environment instead of this shell's.
    #[arg(long)]
    daemon_env: bool,
    /// Overlay the PATH-like variables of the daemon's login shell (`serve --login-shell`).
    #[arg(long)]
    login_shell_overlay: bool,
    /// Wall-clock limit, e.g. 30s, 500ms, 5m, 2h: the tree is stopped and the process ends
    /// `timed_out`.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Idle limit, e.g. 10m: stopped (`timed_out`, deadline `idle`) after this long without
    /// output, input or a signal, unless marked with `await-input`.
    #[arg(long, value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// Output this process keeps (default: the daemon's, 64MiB unless `serve --retention`),
    /// e.g. 512M, 1G; older output is deleted in whole segments. At least 8MiB, at most 4GiB.
    #[arg(long, value_name = "SIZE", value_parser = super::size::parse_retention)]
    retention: Option<u64>,
    /// Working directory (default: this shell's).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    #[command(flatten)]
    queue: super::queue::QueueArgs,
    /// Run under a terminal of ROWSxCOLS (e.g. 24x80) instead of pipes: its output is one
    /// stream, `terminal`; `input` goes to the terminal and `resize` changes its size.
    #[arg(long, value_name = "ROWSxCOLS", value_parser = parse_size)]
    pty: Option<(u16, u16)>,
    /// Print the started process as JSON instead of its handle.
    #[arg(long)]
    json: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// resize

#[derive(Debug, Args)]
pub(crate) struct ResizeCmdArgs {
    #[command(flatten)]
    target: Target,
    /// The process: its handle (p-...), its number (12 or #12) or its name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
    /// The new size, ROWSxCOLS (e.g. 40x120).
    #[arg(value_parser = parse_size)]
    size: (u16, u16),
}

pub(crate) fn resize(args: ResizeCmdArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    client.call(&Request::Resize {
        handle: args.handle,
        rows: args.size.0,
        cols: args.size.1,
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn start(args: StartCmdArgs) -> anyhow::Result<ExitCode> {
    let cwd = match args.cwd {
        Some(dir) => std::path::absolute(&dir).with_context(|| format!("{}", dir.display()))?,
        None => std::env::current_dir().context("cannot read the working directory")?,
    };
    let cwd = cwd
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8", cwd.display()))?
        .to_owned();
    let client_env = (!args.daemon_env).then(client_environment);
    let mut start = StartArgs {
        max_bytes: None,
        settle_ms: None,
        yield_ms: None,
        command: args.command,
        cwd: Some(cwd),
        env: args.env.resolve()?,
        env_persist: args.env_persist.into_iter().collect(),
        client_env,
        inherit_env: args.daemon_env,
        login_shell_overlay: args.login_shell_overlay,
        labels: args.labels.into_iter().collect(),
        name: args.name,
        timeout_ms: args.timeout.map(|t| millis(t).max(1)),
        idle_timeout_ms: args.idle_timeout.map(|t| millis(t).max(1)),
        retention_bytes: args.retention,
        queue_ms: None,
        pty: args.pty.map(|(rows, cols)| PtyArgs { rows, cols }),
    };
    let mut client = args.target.connect_or_start()?;
    let info = match client.call(&Request::Start(start.clone())) {
        Err(ClientError::Api(e)) if let Some(ms) = args.queue.retry_after(&e) => {
            start.queue_ms = Some(ms);
            client.call(&Request::Start(start))?
        }
        other => other?,
    };
    if args.json {
        outln!("{}", super::json::line(&info)?)?;
    } else {
        let view: super::views::ProcView =
            serde_json::from_value(info).context("the daemon's answer")?;
        outln!(
            "{}",
            crate::spool::render::escape_field(&view.handle, false)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// restart

#[derive(Debug, Args)]
pub(crate) struct RestartCmdArgs {
    #[command(flatten)]
    target: Target,
    /// The finished process to run again: its handle (p-...), its number (12 or #12) or its
    /// name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
    // The values of the variables the journal withheld (set with `start --env`), given again
    // as a start's; a restart without one names what is missing.
    #[command(flatten)]
    env: super::env_args::EnvArgs,
    /// Start from the daemon's environment instead of this shell's.
    #[arg(long)]
    daemon_env: bool,
    #[command(flatten)]
    queue: super::queue::QueueArgs,
    /// Run under a terminal of ROWSxCOLS (a terminal is not carried over from the first run).
    #[arg(long, value_name = "ROWSxCOLS", value_parser = parse_size)]
    pty: Option<(u16, u16)>,
    /// Print the new process as JSON instead of its handle.
    #[arg(long)]
    json: bool,
}

pub(crate) fn restart(args: RestartCmdArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect_or_start()?;
    let handle = resolve(&mut client, &args.handle)?;
    let mut restart = RestartArgs {
        handle: handle.to_string(),
        env: args.env.resolve()?,
        client_env: (!args.daemon_env).then(client_environment),
        inherit_env: args.daemon_env,
        queue_ms: None,
        pty: args.pty.map(|(rows, cols)| PtyArgs { rows, cols }),
    };
    let info = match client.call(&Request::Restart(restart.clone())) {
        Err(ClientError::Api(e)) if let Some(ms) = args.queue.retry_after(&e) => {
            restart.queue_ms = Some(ms);
            client.call(&Request::Restart(restart))?
        }
        other => other?,
    };
    if args.json {
        outln!("{}", super::json::line(&info)?)?;
    } else {
        let view: super::views::ProcView =
            serde_json::from_value(info).context("the daemon's answer")?;
        outln!(
            "{}",
            crate::spool::render::escape_field(&view.handle, false)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// send

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    #[command(flatten)]
    target: Target,
    /// The process: its handle (p-...), its number (12 or #12, as `ps` shows it) or its name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
    /// Send this text instead of this command's stdin, with the usual escapes: \n, \t, \r,
    /// \0, \e (ESC), \\ (a backslash) and \xHH (any byte). No newline is added: `--text 'y\n'`
    /// answers a prompt.
    #[arg(long, value_parser = |t: &str| unescape(t).map(Unescaped))]
    text: Option<Unescaped>,
    /// Close the process's stdin afterwards, so it reads end-of-file.
    #[arg(long)]
    close: bool,
    /// Print `{handle, bytes_sent, closed}` as JSON instead of the note on stderr.
    #[arg(long)]
    json: bool,
}

/// `send --text`'s bytes (a type of its own: clap reads a bare `Vec` as many values).
#[derive(Debug, Clone)]
pub(crate) struct Unescaped(Vec<u8>);

/// The bytes `send --text` means: backslash escapes as in C and the shell's `printf`, so that
/// a prompt can be answered with `'y\n'`. An unknown escape is an error rather than a guess.
pub(crate) fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some((&e, tail)) = rest.split_first() else {
            return Err("a lone backslash at the end (write \\\\ for a backslash)".to_owned());
        };
        rest = tail;
        out.push(match e {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'0' => 0,
            b'e' => 0x1b,
            b'\\' => b'\\',
            b'x' => {
                let hex = rest
                    .get(..2)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("\\x must be followed by two hex digits")?;
                rest = &rest[2..];
                hex
            }
            other => {
                return Err(format!(
                    "unknown escape \\{} (known: \\n \\t \\r \\0 \\e \\\\ \\xHH)",
                    crate::spool::render::escape_field(&char::from(other).to_string(), false)
                ));
            }
        });
    }
    Ok(out)
}

/// Bytes per `input` request when streaming stdin (base64 of it fits the request limit).
const SEND_CHUNK_BYTES: usize = 512 * 1024;

pub(crate) fn send(args: SendArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    let handle = resolve(&mut client, &args.handle)?;
    let mut sent = 0u64;
    let mut push = |client: &mut Client, data: Vec<u8>, close: bool| -> anyhow::Result<()> {
        sent += data.len() as u64;
        client.call(&Request::Input {
            handle: handle.into(),
            data,
            close,
        })?;
        Ok(())
    };
    match args.text {
        Some(Unescaped(text)) => push(&mut client, text, args.close)?,
        None => {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; SEND_CHUNK_BYTES];
            loop {
                let n = match stdin.read(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e).context("reading stdin"),
                };
                if n == 0 {
                    break;
                }
                push(&mut client, buf[..n].to_vec(), false)?;
            }
            if args.close {
                push(&mut client, Vec::new(), true)?;
            }
        }
    }
    if args.json {
        let sent = serde_json::json!({"handle": handle.to_string(), "bytes_sent": sent, "closed": args.close});
        outln!("{}", super::json::line(&sent)?)?;
    } else {
        note!("procjournal: sent {sent} bytes to {handle}");
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// stop, interrupt, wait, shutdown

#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    #[command(flatten)]
    target: Target,
    /// The process: its handle (p-...), its number (12 or #12, as `ps` shows it) or its name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
    /// Time between SIGTERM and SIGKILL; the exit must then be proven within 0.5 s.
    #[arg(long, value_parser = parse_duration, default_value = GRACE_DEFAULT)]
    grace: Duration,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    #[command(flatten)]
    target: Target,
    /// The process: its handle (p-...), its number (12 or #12, as `ps` shows it) or its name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
    /// Give up after this long (exit status 124); the process keeps running.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct HandleCmdArgs {
    #[command(flatten)]
    target: Target,
    /// The process: its handle (p-...), its number (12 or #12, as `ps` shows it) or its name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
}

#[derive(Debug, Args)]
pub(crate) struct ShutdownCmdArgs {
    #[command(flatten)]
    target: Target,
    /// Time between SIGTERM and SIGKILL for every live process; each exit must then be proven
    /// within 0.5 s.
    #[arg(long, value_parser = parse_duration, default_value = GRACE_DEFAULT)]
    grace: Duration,
    /// Print the daemon's report as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct GateCmdArgs {
    #[command(flatten)]
    target: Target,
    /// Why (recorded in the journal with the change).
    #[arg(long, default_value = "")]
    reason: String,
    /// Print the gate as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AwaitInputCmdArgs {
    #[command(flatten)]
    target: Target,
    /// The process: its handle (p-...), its number (12 or #12, as `ps` shows it) or its name.
    #[arg(value_parser = reference_arg)]
    handle: ProcessRef,
    /// Clear the mark instead (writing input to the process clears it too).
    #[arg(long)]
    clear: bool,
}

/// `pause` and `resume`: the pause gate. Prints the gate as it is afterwards.
pub(crate) fn gate(args: GateCmdArgs, pause: bool) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    let request = if pause {
        Request::Pause {
            reason: args.reason,
        }
    } else {
        Request::Resume {
            reason: args.reason,
        }
    };
    let status = client.call(&request)?;
    if args.json {
        outln!("{}", super::json::line(&status)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let paused = status.get("paused").and_then(Value::as_bool) == Some(true);
    let changed = status.get("changed").and_then(Value::as_bool) == Some(true);
    outln!(
        "{}{}",
        if paused {
            "paused: new starts are refused; running processes go on"
        } else {
            "running: new starts are admitted"
        },
        if changed { "" } else { " (already)" }
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `await-input`: mark a process as waiting for human input (its idle limit is suspended).
pub(crate) fn await_input(args: AwaitInputCmdArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    client.call(&Request::AwaitInput {
        handle: args.handle,
        waiting: !args.clear,
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Deserialize)]
struct EndView {
    handle: String,
    state: State,
    exit_code: Option<i32>,
    signal: Option<i32>,
    total_bytes: u64,
    capture: String,
    /// A daemon from before the field recorded every end it returned.
    #[serde(default = "persisted_by_default")]
    persisted: bool,
    #[serde(default)]
    persist_error: Option<String>,
}

fn persisted_by_default() -> bool {
    true
}

/// Prints how the process ended; its status is the verdict, whether or not anyone reads this.
fn print_end(result: Value, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        super::out::verdict_stands(outln!("{}", super::json::line(&result)?))?;
    }
    let end: EndView = serde_json::from_value(result).context("the daemon's answer")?;
    if !json {
        let how = match (end.exit_code, end.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("signal SIG{}", super::exit::signal_name(signal)),
            _ => "no exit status".to_owned(),
        };
        // The handle and the capture's reason come from the daemon: escaped.
        super::out::verdict_stands(outln!(
            "{} {} ({how}; {} output bytes, capture {})",
            crate::spool::render::escape_field(&end.handle, false),
            end.state.name(),
            end.total_bytes,
            crate::spool::render::escape_field(&end.capture, false)
        ))?;
    }
    if !end.persisted {
        let why = end.persist_error.as_deref().unwrap_or("no reason given");
        super::exit::say_not_persisted(&end.handle, end.exit_code, end.signal, why);
        return Ok(ExitCode::from(super::exit::FAILURE));
    }
    Ok(super::exit::of_process(end.exit_code, end.signal))
}

pub(crate) fn stop(args: StopArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    let result = client.call(&Request::Stop {
        handle: args.handle,
        grace_ms: millis(args.grace),
    })?;
    // A stop whose end the journal failed to record did not do what it says.
    let persisted = result["persisted"].as_bool() != Some(false);
    let status = print_end(result, args.json)?;
    if !persisted {
        return Ok(status);
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn interrupt(args: HandleCmdArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    client.call(&Request::Interrupt(args.handle))?;
    Ok(ExitCode::SUCCESS)
}

/// Exits with the process's status (`exit::HELP`): its exit code, 128+N for signal N, 125 when
/// none is known, 124 when `--timeout` gave up.
pub(crate) fn wait(args: WaitArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    let result = match client.call(&Request::Wait {
        handle: args.handle,
        timeout_ms: args.timeout.map(millis),
    }) {
        Ok(result) => result,
        Err(ClientError::Api(e)) if e.code == crate::protocol::ErrorCode::WaitTimeout => {
            note!(
                "procjournal: {}",
                crate::spool::render::escape_field(&e.message, true)
            );
            return Ok(ExitCode::from(super::exit::WAIT_GAVE_UP));
        }
        Err(e) => return Err(e.into()),
    };
    print_end(result, args.json)
}

#[derive(Debug, Args)]
pub(crate) struct AdmissionCmdArgs {
    #[command(flatten)]
    target: Target,
    /// Admit at most N workloads at once from now on, replacing the automatic policy (as
    /// `pueue parallel N`); running workloads keep their capacity. Kept in the daemon's memory
    /// until it restarts.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=crate::limits::ADMISSION_LIMIT_MAX), conflicts_with = "auto")]
    max_concurrent: Option<u64>,
    /// Drop a limit set with --max-concurrent: back to the policy the daemon was started with.
    #[arg(long)]
    auto: bool,
    /// The daemon's whole answer as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn admission(args: AdmissionCmdArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    let request = if args.max_concurrent.is_some() || args.auto {
        Request::AdmissionLimit {
            max_concurrent: args.max_concurrent,
        }
    } else {
        Request::Admission
    };
    let snapshot = client.call(&request)?;
    if args.json {
        outln!("{}", super::json::line(&snapshot)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_decision(&snapshot)?;
    for r in snapshot["reservations"].as_array().into_iter().flatten() {
        outln!(
            "{}  reserved {}  observed {}  cores {}  {} ({} members)",
            crate::spool::render::escape_field(r["handle"].as_str().unwrap_or("?"), false),
            admission_size(&r["reserved_bytes"]),
            admission_size(&r["observed_bytes"]),
            admission_cores(&r["charged_millis"]),
            crate::spool::render::escape_field(r["sample"].as_str().unwrap_or("?"), false),
            admission_count(&r["members"]),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The admission decision of a snapshot for a person: slots, memory, cores and telemetry.
fn print_decision(snapshot: &Value) -> std::io::Result<()> {
    let d = &snapshot["decision"];
    outln!(
        "slots {} in use {} ({}) queued {}",
        admission_count(&d["slots"]),
        admission_count(&d["in_use"]),
        crate::spool::render::escape_field(d["basis"].as_str().unwrap_or("?"), false),
        admission_count(&snapshot["queued"])
    )?;
    outln!(
        "cores {} available {} share {}% floor {} reserved {} pool {}",
        admission_count(&d["cores"]),
        admission_size(&d["available_bytes"]),
        admission_count(&d["share_percent"]),
        admission_size(&d["floor_bytes"]),
        admission_size(&d["reserved_bytes"]),
        admission_size(&d["pool_bytes"]),
    )?;
    outln!(
        "cores charged {} of budget {} (max_concurrent {}{})",
        admission_cores(&d["charged_millis"]),
        admission_cores(&d["core_budget_millis"]),
        admission_count(&d["max_concurrent"]).replace("unknown", "none"),
        if d["runtime_limit"] == Value::Bool(true) {
            ", set at runtime"
        } else {
            ""
        },
    )?;
    outln!(
        "telemetry {} (sampled {} ms ago)",
        if snapshot["telemetry_complete"] == Value::Bool(true) {
            "complete"
        } else {
            "incomplete"
        },
        admission_count(&snapshot["sampled_ms_ago"])
    )
}

/// A count of the admission snapshot, `unknown` when it has none.
fn admission_count(v: &Value) -> String {
    v.as_u64()
        .map_or_else(|| "unknown".to_owned(), |n| n.to_string())
}

/// A byte size of the admission snapshot in MiB or GiB, `-` when it has none.
fn admission_size(v: &Value) -> String {
    v.as_u64().map_or_else(
        || "-".to_owned(),
        |b| {
            if b >= 1 << 30 {
                format!("{:.1}GiB", b as f64 / f64::from(1u32 << 30))
            } else {
                format!("{:.1}MiB", b as f64 / f64::from(1u32 << 20))
            }
        },
    )
}

/// Millicores of the admission snapshot as cores, `-` when it has none.
fn admission_cores(v: &Value) -> String {
    v.as_u64()
        .map_or_else(|| "-".to_owned(), |m| format!("{:.2}", m as f64 / 1000.0))
}

pub(crate) fn shutdown(args: ShutdownCmdArgs) -> anyhow::Result<ExitCode> {
    let mut client = args.target.connect()?;
    let report = client.call(&Request::Shutdown {
        grace_ms: millis(args.grace),
    })?;
    if args.json {
        outln!("{}", super::json::line(&report)?)?;
    }
    let count = |field: &str| {
        report
            .get(field)
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    if !args.json {
        outln!(
            "shut down: {} terminated, {} killed, {} teardown failures",
            count("terminated"),
            count("killed"),
            count("teardown_failed")
        )?;
    }
    // Each failure is said with its reason: the status alone would not tell which tree may
    // still be running, or why.
    for failed in report
        .get("teardown_failed")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let field = |i: usize| failed.get(i).and_then(Value::as_str).unwrap_or("?");
        note!(
            "procjournal: teardown of {} failed: {}",
            crate::spool::render::escape_field(field(0), true),
            crate::spool::render::escape_field(field(1), true)
        );
    }
    Ok(if count("teardown_failed") == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn send_text_escapes_mean_their_bytes() {
        assert_eq!(unescape(r"y\n").unwrap(), b"y\n");
        assert_eq!(
            unescape(r"a\tb\r\0\e[1m\\\x41\xff").unwrap(),
            b"a\tb\r\0\x1b[1m\\A\xff"
        );
        assert_eq!(unescape("plain é").unwrap(), "plain é".as_bytes());
        assert!(unescape(r"\q").unwrap_err().contains("unknown escape"));
        assert!(unescape(r"\x4").is_err());
        assert!(unescape(r"\x+f").is_err());
        assert!(unescape("trailing\\").is_err());
    }

    proptest::proptest! {
        /// Any text is bytes or an error, never a panic; any bytes, escaped, come back.
        #[test]
        fn unescape_is_total_and_inverts_escaping(text in ".{0,40}", bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = unescape(&text);
            let escaped: String = bytes.iter().map(|b| format!("\\x{b:02x}")).collect();
            proptest::prop_assert_eq!(unescape(&escaped).unwrap(), bytes);
        }
    }
}
