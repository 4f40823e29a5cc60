//! `procjournal capture -- CMD`: run one command to completion in the foreground and print its
//! capture receipt as one line of JSON (the protocol's `capture` result: each stream's end,
//! counts, cursors and rendered prefix, the status and the fault).
//!
//! It goes through the same request validation and [`Dispatcher`] as every surface (the
//! protocol's `capture`), on a supervisor it opens on the root, as `run` does; the command runs
//! in this process's environment. Nothing of the command's output reaches this process's
//! stdout except inside the receipt.
//!
//! Ctrl-C, SIGTERM and SIGHUP stop the command (the first with the grace, a later one at once)
//! rather than end this process before the command's end is recorded: the receipt is printed
//! all the same, its fault the stop. Through a daemon the signals end only the client, and the
//! daemon finishes the capture and records it.
//!
//! The exit status mirrors the command's as `run`'s does (`exit.rs`: 128+N for a signal N, 127
//! when it was not found, 126 when it cannot be executed, 125 when procjournal failed or has
//! no status, and 125 when the journal failed to record the end: the receipt's `persisted` is
//! then false); whether the output is whole is the receipt's `complete`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::args::parse_size;
use crate::protocol::{ApiError, CaptureArgs, Dispatcher, PtyArgs, Request, StartArgs};
use crate::supervisor::{CaptureReceipt, Rendering};

#[derive(Debug, Args)]
pub(crate) struct CaptureCmdArgs {
    #[command(flatten)]
    launch: super::launch_args::LaunchArgs,
    /// Bytes of each stream to return, 1 to 1048576 (default 65536); a stream that writes more
    /// is `incomplete` (the spool keeps the rest: `logs --cursor` from its `resume_cursor`).
    #[arg(long, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// Each stream's bytes as base64 (exactly the raw bytes) instead of safe text.
    #[arg(long)]
    base64: bool,
    /// Run under a terminal of ROWSxCOLS (e.g. 24x80): one stream, `terminal`.
    #[arg(long, value_name = "ROWSxCOLS", value_parser = parse_size)]
    pty: Option<(u16, u16)>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub(crate) fn run(args: CaptureCmdArgs) -> anyhow::Result<ExitCode> {
    super::foreground::run_to_exit(capture(args))?
}

async fn capture(args: CaptureCmdArgs) -> anyhow::Result<ExitCode> {
    let root = super::root_or_default(args.launch.root.clone())?;
    // A daemon serving the root holds its lock: the capture runs through it, from this shell's
    // environment.
    let socket = crate::server::default_socket(&root);
    let through_daemon = super::run_daemon::serves(&socket);
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    // Only a supervisor of this process's own launches trees: the daemon's mechanism is its.
    let launcher = (!through_daemon)
        .then(|| args.launch.tree.launcher(&root, true, true))
        .transpose()?;
    let queue = args.launch.queue.clone();
    let group = args.launch.group;
    let request = capture_request(args, &cwd, through_daemon)?;
    let Some(launcher) = launcher else {
        return super::run_daemon::capture(&socket, request, &queue).await;
    };
    let supervisor = super::open_supervisor(&root, group, launcher).await?;
    let receipt = stoppable(&supervisor, run_capture(&supervisor, request, &cwd, &queue)).await;
    // On every path, as `run`: joins the publication of the terminal event and the completion
    // notice, closes the journal cleanly and releases the launcher (the root's base cgroup).
    supervisor
        .shutdown(Duration::from_millis(crate::limits::GRACE_MS_DEFAULT))
        .await;
    let receipt = match receipt? {
        Ok(receipt) => receipt,
        Err(e) => return super::exit::of_refusal(e),
    };
    let line = super::json::line(&receipt).context("cannot encode the receipt")?;
    super::out::verdict_stands(outln!("{line}"))?;
    if let Some(why) = &receipt.persist_error {
        let handle = receipt.handle.to_string();
        super::exit::say_not_persisted(&handle, receipt.exit_code, receipt.signal, why);
        return Ok(ExitCode::from(super::exit::FAILURE));
    }
    Ok(super::exit::of_process(receipt.exit_code, receipt.signal))
}

/// Awaits `capture` on `supervisor`, which supervises only it, stopping its command on Ctrl-C,
/// SIGTERM or SIGHUP instead of letting the signal end this process before the command's end is
/// recorded: the first stops it (SIGTERM, SIGKILL after the grace; recorded as the stop, which
/// the receipt then gives as the fault), a later one kills it at once.
async fn stoppable<T>(
    supervisor: &crate::supervisor::Supervisor,
    capture: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let mut interrupts = super::foreground::Interrupts::watch()?;
    tokio::pin!(capture);
    let mut grace = Duration::from_millis(crate::limits::GRACE_MS_DEFAULT);
    loop {
        tokio::select! {
            receipt = &mut capture => return receipt,
            _ = interrupts.any() => {
                let filter = crate::supervisor::ListFilter::default();
                for m in supervisor.list(&filter) {
                    if m.state.is_terminal() {
                        continue;
                    }
                    note!("procjournal: stopping {} ({} ms of grace)", m.handle, grace.as_millis());
                    // Not awaited here: a stop lasts its grace, and a second signal must be
                    // answered meanwhile.
                    let supervisor = supervisor.clone();
                    tokio::spawn(async move { supervisor.stop(&m.handle, grace).await });
                }
                grace = Duration::ZERO;
            }
        }
    }
}

/// The capture itself on `supervisor` (retried once in the queue when `queue` asks): its
/// receipt, or the refusal.
async fn run_capture(
    supervisor: &crate::supervisor::Supervisor,
    request: Request,
    cwd: &std::path::Path,
    queue: &super::queue::QueueArgs,
) -> anyhow::Result<Result<CaptureReceipt, ApiError>> {
    let uid = nix::unistd::geteuid().as_raw();
    let dispatcher = Dispatcher::new(
        supervisor.clone(),
        cwd.to_owned(),
        format!("uid {uid} via capture"),
    )
    .inheriting_env();
    let Request::Capture {
        start,
        max_bytes,
        rendering,
    } = request
    else {
        anyhow::bail!("the capture request did not decode as a capture");
    };
    let receipt = dispatcher
        .capture(start.clone(), max_bytes, rendering)
        .await;
    if let Err(e) = &receipt
        && let Some(ms) = queue.retry_after(e)
    {
        let start = StartArgs {
            queue_ms: Some(ms),
            ..start
        };
        return Ok(dispatcher.capture(start, max_bytes, rendering).await);
    }
    Ok(receipt)
}

/// The `capture` request, validated as the protocol validates it; through a daemon its start
/// carries this shell's environment, else the command starts from this process's.
fn capture_request(
    args: CaptureCmdArgs,
    cwd: &std::path::Path,
    through_daemon: bool,
) -> anyhow::Result<Request> {
    let client_env = through_daemon.then(super::target::client_environment);
    let pty = args.pty.map(|(rows, cols)| PtyArgs { rows, cols });
    let wire = CaptureArgs {
        start: args.launch.start(args.command, pty, cwd, client_env)?,
        max_bytes: args.max_bytes,
        rendering: Some(if args.base64 {
            Rendering::Base64
        } else {
            Rendering::SafeText
        }),
    };
    serde_json::to_value(&wire)
        .map_err(|e| anyhow::anyhow!("cannot encode the command: {e}"))
        .and_then(|value| {
            crate::protocol::request_from_args("capture", value).map_err(|e| anyhow::anyhow!("{e}"))
        })
}
