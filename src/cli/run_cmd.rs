//! `procjournal run -- CMD`: supervise one command in the foreground.
//!
//! It drives the same [`Dispatcher`] (request validation, start, output, stop, wait) and the same
//! supervisor actor as the daemon, so the foreground and daemon paths cannot drift apart.
//!
//! Output is live, with backpressure: the child's bytes come through a tap on the pipes the
//! supervisor drains (`Dispatcher::start_tapped`), not back out of the spool, and go to this
//! process's stdout and stderr byte for byte: what the tap holds is taken at once (at most its
//! depth of chunks) and written, in order, before more is taken, so one hand-over to the
//! blocking pool carries several chunks while the drain refills the tap. When this process's stdout (or stderr) is slow, the tap fills, the drain stops
//! reading, and the child blocks in `write`, exactly as it would writing to that stdout itself;
//! so the spool's retention never drops a byte before it is printed. The durable copy still goes
//! to the spool, with the same cursors, for `logs`, `journal dump`, `journal manifests` and
//! `spool cat`; if it has a gap (its capture is not complete; retention does not count), one
//! line on stderr says so when the child ends.
//!
//! Invariants:
//! - Every byte the child wrote before it exited is printed, in the order the drain read it,
//!   unless this process's stdout or stderr broke (the child is then stopped, as it would be by
//!   SIGPIPE) or a third Ctrl-C gave up on a reader.
//! - Writes run on the blocking pool, what the tap held at a time, so Ctrl-C is handled while a write
//!   waits for a slow reader: the first Ctrl-C interrupts the child (SIGINT), the second stops it
//!   as `stop` does (SIGTERM, SIGKILL after the grace), and a third kills it at once and also
//!   stops delivering output (the tap is dropped, the drain reads on into the spool), so a
//!   reader that never reads cannot keep `run` from exiting. A stop is recorded as one
//!   (`terminated` or `killed`), whatever status the child then exits with. SIGTERM and SIGHUP
//!   to `run` count as a Ctrl-C past the first (`foreground::Interrupts`): `run` is never ended
//!   by them before its command's end is recorded.
//! - The handle is printed once on stderr when the command has started.
//! - The exit status mirrors the child's (a signal N becomes 128+N).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::foreground::{
    Control, Interrupts, RawMode, STOP_GRACE_MS, ended, forward_input, user_terminal_size,
    write_stream,
};
use crate::lifecycle::Handle;
use crate::protocol::{Dispatcher, PtyArgs, Request, StartArgs, request_from_args};
use crate::supervisor::{Tap, TapAbandon, TapChunk, TapSink};
use crate::tree::PtySize;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    launch: super::launch_args::LaunchArgs,
    /// Run the command under a terminal: with a terminal here, it gets this terminal's size
    /// (and its changes) and every keystroke (this terminal is in raw mode meanwhile, restored
    /// at the end); without one, a 24x80 terminal fed from stdin.
    #[arg(long)]
    pty: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    super::foreground::run_to_exit(supervise(args))?
}

/// Starts the command with a tap on its output (queued once, when `queue` waits out a refusal
/// for capacity): its handle, the tap's receiver and what abandons the tap, or the refusal.
async fn start_tapped(
    dispatcher: &Dispatcher,
    mut start: StartArgs,
    queue: &super::queue::QueueArgs,
) -> Result<(Handle, TapOutput), crate::protocol::ApiError> {
    let (tap, output) = new_tap();
    let abandon = tap.abandoner();
    match dispatcher.start_tapped(start.clone(), tap).await {
        Ok(info) => Ok((info.handle, (output, abandon))),
        Err(e) => {
            let Some(ms) = queue.retry_after(&e) else {
                return Err(e);
            };
            // The refused start's tap went with it: a fresh one for the queued start.
            drop(output);
            let (tap, output) = new_tap();
            let abandon = tap.abandoner();
            start.queue_ms = Some(ms);
            let info = dispatcher.start_tapped(start, tap).await?;
            Ok((info.handle, (output, abandon)))
        }
    }
}

/// A tap's receiver and what abandons the tap.
type TapOutput = (mpsc::Receiver<TapChunk>, TapAbandon);

/// A tap for this process's stdout and stderr, whose chunks the drain writes itself where no
/// reader can make it wait (all of them into files or `/dev/null`, what fits into a pipe or a
/// socket: see `TapSink`); [`copy_tap`] writes the rest, on a thread that may be left blocked on
/// a reader that never reads.
fn new_tap() -> (Tap, mpsc::Receiver<TapChunk>) {
    use std::io::Write;
    use std::os::fd::AsFd;
    // The drain writes to the descriptors, past anything std still buffers for them.
    let _ = std::io::stdout().flush();
    match TapSink::of(std::io::stdout().as_fd(), std::io::stderr().as_fd()) {
        Ok(sink) if sink.any() => Tap::with_sink(sink),
        Ok(_) => Tap::new(),
        Err(e) => {
            tracing::debug!(error = %e, "cannot examine stdout and stderr; a tap with a writer");
            Tap::new()
        }
    }
}

async fn supervise(args: RunArgs) -> anyhow::Result<ExitCode> {
    let root = super::root_or_default(args.launch.root.clone())?;
    // A daemon serving the root holds its lock: the command runs through it instead (started
    // with this shell's environment, its output read back from the spool).
    let socket = crate::server::default_socket(&root);
    if super::run_daemon::serves(&socket) {
        let here = std::env::current_dir().context("cannot read the working directory")?;
        let env = super::target::client_environment();
        let queue = args.launch.queue.clone();
        let start = start_request(args, &here, Some(env))?;
        return super::run_daemon::run(start, &queue, &root, &socket).await;
    }
    let launcher = args.launch.tree.launcher(&root, true, true)?;
    let supervisor = super::open_supervisor(&root, args.launch.group, launcher).await?;
    let result = foreground(&supervisor, args).await;
    // On every path, a refusal and an error too: it joins the publication of the terminal
    // event, closes the journal cleanly and releases the launcher (the root's base cgroup).
    // The runtime is left to the process's exit (`run_to_exit`): what it still holds is never
    // dropped.
    supervisor
        .shutdown(Duration::from_millis(STOP_GRACE_MS))
        .await;
    result
}

/// Starts the command on `supervisor`, relays its output and Ctrl-C, and waits for its end.
async fn foreground(
    supervisor: &crate::supervisor::Supervisor,
    args: RunArgs,
) -> anyhow::Result<ExitCode> {
    let here = std::env::current_dir().context("cannot read the working directory")?;
    let uid = nix::unistd::geteuid().as_raw();
    // The daemon's path: the same request validation, the same dispatcher, the same actor.
    // The command runs in this process's environment (Git redirection removed): `run` is the
    // client's own process.
    let dispatcher = Dispatcher::new(
        supervisor.clone(),
        here.clone(),
        format!("uid {uid} via run"),
    )
    .inheriting_env();
    let queue = args.launch.queue.clone();
    let start = start_request(args, &here, None)?;
    // Before the start, so that a failure here leaves nothing running.
    let interrupts = Interrupts::watch()?;
    let pty = start.pty.is_some();
    let (handle, output) = match start_tapped(&dispatcher, start, &queue).await {
        Ok(started) => started,
        Err(e) => return super::exit::of_refusal(e),
    };
    // Once, before any output: the name under which `logs`, `ps` and `journal` find it later.
    note!("procjournal: started {handle}");
    // Only now may the drain write the command's output itself: after this line.
    output.1.open_sink();
    // With a terminal here, it is raw until the guard drops (every return below), so that
    // each keystroke (Ctrl-C included) reaches the command's terminal as typed.
    let _raw = if pty { RawMode::enter() } else { None };
    let control = Control::Local(dispatcher.clone());
    // Stdin is the command's input, as for any command run in the foreground.
    let forwarding = tokio::spawn(forward_input(control.clone(), handle, pty));
    relay(&control, handle, output, interrupts).await;
    forwarding.abort();
    let result = dispatcher
        .wait(handle, None)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    Ok(ended(handle, &result.into()))
}

/// The start request `run` makes, validated as the protocol validates it: with `client_env` the
/// command starts from it (through a daemon), else from this process's environment.
pub(super) fn start_request(
    args: RunArgs,
    here: &std::path::Path,
    client_env: Option<std::collections::BTreeMap<String, String>>,
) -> anyhow::Result<StartArgs> {
    let pty = args.pty.then(|| {
        let size = user_terminal_size().unwrap_or(PtySize::DEFAULT);
        PtyArgs {
            rows: size.rows,
            cols: size.cols,
        }
    });
    let start = args.launch.start(args.command, pty, here, client_env)?;
    let request = serde_json::to_value(&start)
        .map_err(|e| anyhow::anyhow!("cannot encode the command: {e}"))
        .and_then(|args| request_from_args("start", args).map_err(|e| anyhow::anyhow!("{}", e)))?;
    let Request::Start(start) = request else {
        anyhow::bail!("the start request did not decode as a start");
    };
    Ok(start)
}

/// Copies the tap to stdout and stderr until it ends (the drain stopped reading: the child is
/// terminal, or about to be), handling Ctrl-C meanwhile. One thread of the blocking pool takes
/// each chunk from the tap as the drain sends it and writes it before it takes the next: this
/// process's slowness reaches the tap, and through it the child. (A trip to the blocking pool
/// for each batch the tap held, from a task that received it, measured 7-10 % slower for a
/// 1 GiB `run`: two more hand-offs between threads per chunk.)
async fn relay(
    control: &Control,
    handle: Handle,
    (output, abandon): TapOutput,
    // One listener for the whole relay, so that no Ctrl-C falls between two waits.
    mut interrupts: Interrupts,
) {
    let failure = abandon.clone();
    let mut writing = Some(tokio::task::spawn_blocking(move || {
        copy_tap(output, &failure)
    }));
    while writing.is_some() {
        tokio::select! {
            written = finished(&mut writing) => {
                writing = None;
                if let Err(e) = written {
                    // A reader that went away is the shell's business (`run … | head`); a
                    // write that failed otherwise (a full disk) is said.
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        note!("procjournal: cannot write the output of {handle} ({e}); stopping it");
                    }
                    // Nobody reads any more: stop the command rather than run it unread. The
                    // writer dropped the tap first, so the drain reads on into the spool.
                    let _ = control
                        .call(Request::Stop { handle: handle.into(), grace_ms: STOP_GRACE_MS })
                        .await;
                }
            }
            give_up = interrupts.next(control, handle) => {
                if give_up {
                    // Give up on the reader: the write in flight is left to its thread (`run`
                    // does not wait for it), and the tap ends, so the spool keeps the rest.
                    abandon.abandon();
                    writing = None;
                }
            }
        }
    }
}

/// Writes every chunk of the tap, in order, until it ends or a write fails (here, or the
/// drain's to the tap's sink).
fn copy_tap(mut output: mpsc::Receiver<TapChunk>, tap: &TapAbandon) -> std::io::Result<()> {
    while let Some(chunk) = output.blocking_recv() {
        write_stream(chunk.stream, &chunk.bytes)?;
    }
    tap.failure().map_or(Ok(()), Err)
}

/// What the writer ended with (at the tap's end, or at its first failed write); a writer that
/// panicked counts as failed.
async fn finished(writing: &mut Option<JoinHandle<std::io::Result<()>>>) -> std::io::Result<()> {
    match writing {
        Some(write) => write
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e))),
        None => std::future::pending().await,
    }
}
