//! `procjournal mcp [--root DIR] [--standalone]`: a Model Context Protocol server on stdin/stdout.
//!
//! Attached (the default), the server is a client of the root's daemon: it connects to the
//! daemon's socket, and when none listens it starts `procjournal serve` for the root, detached
//! (its own process group, stdin from /dev/null, stdout and stderr appended to
//! `<root>/daemon.log`), so the daemon and its processes outlive this server and every later
//! one: MCP clients such as the Inspector start a server per call. It says so on stderr. The
//! server options (`--retention`, `--tree-mechanism`, admission) apply to a daemon it starts; a
//! running daemon keeps its own.
//!
//! Standalone (`--standalone`), the server holds the root's supervisor (and so its lock) for its
//! whole life. It ends when the client closes stdin (or on SIGTERM/SIGINT): it then stops every
//! process it still runs (SIGTERM, [`SHUTDOWN_GRACE`], SIGKILL) so that they end `terminated`
//! or `killed` rather than orphaned, and exits.
//!
//! Either way diagnostics go to stderr; stdout carries only protocol messages, written by
//! [`crate::mcp::transport`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use rmcp::ServiceExt;

use crate::client::{SpawnedDaemon, connect_or_spawn};
use crate::mcp::{McpServer, transport};
use crate::protocol::{Dispatcher, Request};
use crate::server::default_socket;
use crate::supervisor::{Services, Supervisor};

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The daemon's socket (default: procjournal.sock in the root).
    #[arg(long, value_name = "PATH", conflicts_with = "standalone")]
    socket: Option<PathBuf>,
    /// Run a supervisor of its own in this process instead of attaching to the root's daemon:
    /// its processes are stopped when the server exits (the tool instructions say so), and it
    /// holds the root's lock meanwhile, so no daemon can serve the root.
    #[arg(long)]
    standalone: bool,
    /// Output each process keeps unless its start asks for other (default 64MiB), e.g. 256M,
    /// 1G; older output is deleted in whole segments. At least 8MiB, at most 4GiB. Attached:
    /// for a daemon this server starts.
    #[arg(long, value_name = "SIZE", value_parser = super::size::parse_retention)]
    retention: Option<u64>,
    #[command(flatten)]
    tree: super::TreeArgs,
    #[command(flatten)]
    admission: super::AdmissionArgs,
    /// Also offer the fleet's tools (fleet_status, fleet_ps, fleet_logs, fleet_events), which
    /// read this NATS JetStream server: nats://[user:password@]host:port (docs/fleet.md).
    #[arg(long, value_name = "URL")]
    fleet: Option<String>,
    #[command(flatten)]
    fleet_connection: super::fleet_args::Connection,
}

/// The server with the fleet's tools, when `--fleet` was given.
fn with_fleet(
    server: McpServer,
    fleet: &Option<crate::fleet::FleetConfig>,
) -> anyhow::Result<McpServer> {
    Ok(match fleet {
        Some(config) => server.with_fleet(config.clone())?,
        None => server,
    })
}

/// Grace between SIGTERM and SIGKILL for the processes still running when the client leaves.
/// Short, because MCP clients give a server about two seconds after closing stdin before they
/// signal it (the Python SDK does).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// How long the runtime may take to wind down its blocking tasks after the shutdown.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);
/// How long the last answers may take to reach stdout once the session ended.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

pub(crate) fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let root = super::root_or_default(args.root.clone())?;
    let root =
        std::path::absolute(&root).with_context(|| format!("runtime root {}", root.display()))?;
    let attached = if args.standalone {
        None
    } else {
        // Before the runtime: connecting (and starting a daemon) blocks, and nothing else runs yet.
        Some(attach(&root, &args)?)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let fleet = args
        .fleet
        .clone()
        .map(|url| args.fleet_connection.reader(&url));
    let result = runtime.block_on(async move {
        match attached {
            Some(socket) => serve_session(with_fleet(McpServer::attached(socket)?, &fleet)?).await,
            None => serve_standalone(root, args, &fleet).await,
        }
    });
    // A blocking read of stdin (when stdin is not a pipe) cannot be cancelled; do not wait for it.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result
}

/// Connects to the root's daemon, starting one when none listens; returns its socket.
fn attach(root: &Path, args: &McpArgs) -> anyhow::Result<PathBuf> {
    let socket = args.socket.clone().unwrap_or_else(|| default_socket(root));
    let wait = Duration::from_millis(crate::limits::DAEMON_AUTOSTART_WAIT_MS);
    let (mut client, spawned) = match connect_or_spawn(&socket, || spawn_daemon(root, args), wait) {
        Ok(connected) => connected,
        Err(e) => {
            // What the daemon said before it exited (a root held by a standalone server's lock,
            // say) is the reason; it is in its log, not on this process's stderr.
            let log = daemon_log(root);
            let said = log_tail(&log);
            let log_note = if said.is_empty() {
                String::new()
            } else {
                format!("\nits log {} ends:\n{said}", log.display())
            };
            anyhow::bail!(
                "cannot reach or start the daemon of {}: {e}{log_note}\n\
                 (`procjournal mcp --standalone` serves without a daemon)",
                root.display()
            );
        }
    };
    let hello = client
        .call(&Request::Hello)
        .with_context(|| format!("the daemon on {} does not answer", socket.display()))?;
    let pid = hello.get("pid").and_then(serde_json::Value::as_u64);
    match spawned {
        Some(SpawnedDaemon { pid }) => note!(
            "procjournal mcp: no daemon was running for {}; started one (pid {pid}, log {}). \
             It keeps running after this server, with every process it starts; \
             `procjournal shutdown --root {}` stops it",
            root.display(),
            daemon_log(root).display(),
            root.display()
        ),
        None => note!(
            "procjournal mcp: attached to the daemon of {} (pid {}) on {}",
            root.display(),
            pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            socket.display()
        ),
    }
    Ok(socket)
}

/// The last lines of a daemon's log (at most a few KiB of it), for an error message.
fn log_tail(log: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 4096;
    let Ok(mut file) = std::fs::File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let mut bytes = Vec::new();
    if file
        .seek(SeekFrom::Start(len.saturating_sub(TAIL)))
        .is_err()
        || file.read_to_end(&mut bytes).is_err()
    {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join("\n")
}

/// Where a daemon this command starts writes its stderr.
pub(crate) fn daemon_log(root: &Path) -> PathBuf {
    root.join("daemon.log")
}

/// Starts `procjournal serve` for `root`, detached: its own process group (a client that
/// signals this server's group, as the MCP Python SDK does when it closes, leaves it alone),
/// stdin from /dev/null, stdout and stderr appended to the root's `daemon.log` (never this
/// server's stdout, which is the MCP channel), working directory `/`.
fn spawn_daemon(root: &Path, args: &McpArgs) -> std::io::Result<std::process::Child> {
    let mut extra: Vec<std::ffi::OsString> = Vec::new();
    if let Some(bytes) = args.retention {
        extra.extend(["--retention".into(), bytes.to_string().into()]);
    }
    if let Some(value) = args.tree.tree.to_possible_value() {
        extra.extend(["--tree-mechanism".into(), value.get_name().into()]);
    }
    let admission = &args.admission;
    if let Some(n) = admission.max_concurrent {
        extra.extend(["--max-concurrent".into(), n.to_string().into()]);
    }
    if let Some(bytes) = admission.memory_budget {
        extra.extend(["--memory-budget".into(), bytes.to_string().into()]);
    }
    extra.extend(["--share".into(), admission.share.to_string().into()]);
    if let Some(bytes) = admission.floor {
        extra.extend(["--floor".into(), bytes.to_string().into()]);
    }
    super::spawn_detached_daemon(root, args.socket.as_deref(), &extra)
}

/// Serves one MCP session on stdio with `server`, until the client closes stdin or a signal.
async fn serve_session(server: McpServer) -> anyhow::Result<ExitCode> {
    let (read, write) = rmcp::transport::stdio_pipes();
    let (lines, writer) = transport::line_transport(read, write);
    let outcome = match server.serve(lines).await {
        Ok(running) => {
            let ct = running.cancellation_token();
            let stop_on_signal = tokio::spawn(async move {
                let reason = terminate_signal().await;
                note!("procjournal mcp: {reason}, shutting down");
                ct.cancel();
            });
            let quit = running.waiting().await;
            stop_on_signal.abort();
            match quit {
                Ok(reason) => {
                    note!("procjournal mcp: session ended ({reason:?})");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(anyhow::anyhow!("the MCP session task failed: {e}")),
            }
        }
        // The client went away or spoke something else before the handshake completed.
        Err(e) => Err(anyhow::anyhow!("MCP initialization failed: {e}")),
    };
    // The session is over and the transport gone: the writer ends after the last answers.
    let _ = tokio::time::timeout(FLUSH_WAIT, writer).await;
    outcome
}

async fn serve_standalone(
    root: PathBuf,
    args: McpArgs,
    fleet: &Option<crate::fleet::FleetConfig>,
) -> anyhow::Result<ExitCode> {
    let mut config = super::supervisor_config(&root);
    if let Some(bytes) = args.retention {
        config.spool.retention_bytes = bytes;
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    config.launcher = args.tree.launcher(&root, true, false)?;
    args.admission.apply(&mut config.admission);
    let (supervisor, report) = Supervisor::open(config, Services::noop())
        .await
        .with_context(|| {
            format!(
                "cannot open the runtime root {} for writing (one writer at a time holds {})",
                root.display(),
                root.join("LOCK").display()
            )
        })?;
    super::warn_damage(&root, &report);
    note!(
        "procjournal mcp: serving {} on stdio, standalone: its processes end with this server \
         ({} earlier process(es) now lost_on_restore, {} finished ones reopened)",
        supervisor.root().display(),
        report.reconciled.len(),
        report.reopened
    );
    for error in &report.errors {
        note!("procjournal mcp: restore: {error}");
    }
    let owner = format!("uid:{} via mcp", nix::unistd::getuid());
    // The MCP server is the agent harness's own child: its environment is the client's.
    let dispatcher = Dispatcher::new(supervisor.clone(), cwd, owner).inheriting_env();
    // Whatever the session comes to, the shutdown below runs: it closes the journal cleanly
    // and releases the launcher (the root's base cgroup).
    let server = McpServer::standalone(dispatcher).map_err(anyhow::Error::from);
    let outcome = match server.and_then(|s| with_fleet(s, fleet)) {
        Ok(server) => serve_session(server).await,
        Err(e) => Err(e),
    };
    let report = supervisor.shutdown(SHUTDOWN_GRACE).await;
    if !report.terminated.is_empty() || !report.killed.is_empty() {
        note!(
            "procjournal mcp: stopped {} process(es) ({} killed)",
            report.terminated.len() + report.killed.len(),
            report.killed.len()
        );
    }
    for (handle, reason) in &report.teardown_failed {
        note!("procjournal mcp: teardown of {handle} failed: {reason}");
    }
    outcome
}

/// Resolves on SIGTERM or SIGINT, naming it; never resolves if neither can be listened for.
async fn terminate_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (term, int) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        (Ok(mut term), Err(_)) => {
            term.recv().await;
            "SIGTERM"
        }
        (Err(_), Ok(mut int)) => {
            int.recv().await;
            "SIGINT"
        }
        (Err(_), Err(_)) => std::future::pending().await,
    }
}
