//! What `run` does in the foreground, whichever supervisor runs its command (its own, or the
//! root's daemon: `run_daemon.rs`): Ctrl-C escalated through a [`Control`], stdin and terminal
//! size changes forwarded to a PTY, this terminal in raw mode meanwhile, output written to the
//! stream it came from, and the end reported with the command's status.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tokio::sync::mpsc;

use crate::lifecycle::Handle;
use crate::protocol::{Dispatcher, Request};
use crate::spool::format::Stream;
use crate::tree::PtySize;

/// The runtime of a command that supervises one process in the foreground (`run`, `capture`):
/// one thread, this one, and the blocking pool for files and launches. Its one process's
/// drain, the actor and the output's copy then take turns instead of waking each other across
/// threads, and on two cores they leave the other to the workload. Measured first against two
/// workers (release builds, interleaved runs on one machine), one worker took 1 GiB of zeros
/// through `run` from 529 to 443 ms median (the shell writing it to a file: 385 ms), 1 GiB of
/// text lines from 751 to 713 ms (589 ms), and `run -- true` 0.25 ms of CPU less, two threads
/// fewer. Then against that one worker, the caller's thread as the only one (the same way:
/// 8 rounds of text lines, 6 of 40 `run -- true` on copies of a root of 250 processes): text
/// lines 1684 -> 1394 ms median (the shell 1370 ms, on a slower day), `run -- true` 8.0 ->
/// 7.6 ms, one thread and its wake-ups fewer; `capture` and zeros unchanged within the noise.
fn one_process_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `task` on a [`one_process_runtime`] that is then neither dropped nor shut down, for a
/// command whose process exits right after (`run`, `capture`): the exit ends the runtime's
/// threads and closes what its tasks still hold (descriptors, mappings, the root's lock). A
/// drop would wait for every blocking task (a write abandoned at the third Ctrl-C may be
/// blocked on a reader that never reads, and must not hold the exit), and even a shutdown in
/// the background wakes every idle blocking thread to unmap its stacks and exit, ahead of
/// this one on two cores (an `ftrace` in docs/operations.md: 0.3 ms). The caller
/// leaves nothing with work for its drop: it shuts its supervisor down, which ends the
/// launcher and every spool writer, and a brief writer's journal makes no closing commit.
pub(super) fn run_to_exit<F: std::future::Future>(task: F) -> anyhow::Result<F::Output> {
    let runtime = one_process_runtime()?;
    let output = runtime.block_on(task);
    std::mem::forget(runtime);
    Ok(output)
}

/// Grace between SIGTERM and SIGKILL after a second Ctrl-C (a third sends SIGKILL at once).
pub(super) const STOP_GRACE_MS: u64 = crate::limits::GRACE_MS_DEFAULT;

/// The fields of a `wait` result that `run` reports, from the dispatcher or from the daemon.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Ended {
    state: crate::lifecycle::State,
    exit_code: Option<i32>,
    signal: Option<i32>,
    capture: String,
    #[serde(default)]
    persist_error: Option<String>,
}

impl From<crate::protocol::dispatch::WaitResult> for Ended {
    fn from(r: crate::protocol::dispatch::WaitResult) -> Ended {
        Ended {
            state: r.state,
            exit_code: r.exit_code,
            signal: r.signal,
            capture: r.capture,
            persist_error: r.persist_error,
        }
    }
}

/// What `run` says when the command has ended, and the status it exits with: the command's,
/// or [`super::exit::FAILURE`] when its end is not durable (the sync table promises the status
/// acknowledged before `run` returns it; one known only in memory is no such status).
pub(super) fn ended(handle: Handle, end: &Ended) -> ExitCode {
    let status = super::exit::of_process(end.exit_code, end.signal);
    if let Some(e) = &end.persist_error {
        super::exit::say_not_persisted(&handle.to_string(), end.exit_code, end.signal, e);
    }
    if end.state == crate::lifecycle::State::TimedOut {
        note!("procjournal: {handle} timed out");
    }
    if end.capture != "complete" {
        // The printed copy and the durable one come from the same reads, so a capture cut short
        // (a descendant held a pipe past the final drain) cut both; retention is not a gap here.
        let why = end
            .capture
            .strip_prefix("incomplete: ")
            .unwrap_or(&end.capture);
        note!("procjournal: the durable copy of this output is incomplete: {why}");
    }
    if end.persist_error.is_some() {
        return ExitCode::from(super::exit::FAILURE);
    }
    status
}

/// Where the command is controlled from: this process's own supervisor, or the root's daemon.
#[derive(Debug, Clone)]
pub(super) enum Control {
    Local(Dispatcher),
    Daemon(PathBuf),
}

impl Control {
    pub(super) async fn call(&self, request: Request) -> Result<serde_json::Value, String> {
        match self {
            Control::Local(dispatcher) => dispatcher.dispatch(request).await.map_err(|e| e.message),
            Control::Daemon(socket) => crate::client::call_async(socket, &request)
                .await
                .map_err(|e| e.to_string()),
        }
    }
}

/// What asks `run` to end its command from outside, watched from before the start: Ctrl-C
/// (SIGINT), escalated by [`interrupted`]; and SIGTERM or SIGHUP (a job controller cancelling
/// `run`, its terminal gone). Left to their default those two ended `run` at once: its command
/// was killed by its guardian's lifeline, nothing recorded its end until the root's next open,
/// and the root's cgroup stayed behind until then. Each now counts as a Ctrl-C past the first:
/// the first stops the command (recorded as the stop), the next kills it, and `run` exits with
/// the command's status. One that comes while the start is being answered (a start waiting in
/// the queue for capacity, say: through a daemon, where nothing else can hold it) is acted on
/// once the command has started, as a Ctrl-C always was: the start is never left unanswered,
/// nor a command unstopped.
pub(super) struct Interrupts {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    presses: u32,
}

impl Interrupts {
    pub(super) fn watch() -> anyhow::Result<Interrupts> {
        use anyhow::Context;
        use tokio::signal::unix::{SignalKind, signal};
        let watch = |kind: SignalKind, what: &str| {
            signal(kind).with_context(|| format!("cannot watch for {what}"))
        };
        Ok(Interrupts {
            int: watch(SignalKind::interrupt(), "Ctrl-C")?,
            term: watch(SignalKind::terminate(), "SIGTERM")?,
            hup: watch(SignalKind::hangup(), "SIGHUP")?,
            presses: 0,
        })
    }

    /// Waits for the next of them; true for SIGTERM or SIGHUP (at least a stop), false for
    /// Ctrl-C. Cancel-safe.
    pub(super) async fn any(&mut self) -> bool {
        tokio::select! {
            Some(()) = self.int.recv() => false,
            Some(()) = self.term.recv() => true,
            Some(()) = self.hup.recv() => true,
            else => std::future::pending::<bool>().await,
        }
    }

    /// Waits for the next of them and acts on it (see [`interrupted`]); true when the output
    /// is to be given up. Cancel-safe: nothing is done before a signal has arrived.
    pub(super) async fn next(&mut self, control: &Control, handle: Handle) -> bool {
        let stop_at_least = self.any().await;
        self.presses = if stop_at_least {
            self.presses.max(1) + 1
        } else {
            self.presses + 1
        };
        interrupted(self.presses, control, handle)
    }
}

/// The `n`th Ctrl-C (from 1): SIGINT, then a stop (SIGTERM, SIGKILL after the grace; recorded
/// as the stop it is, `terminated` or `killed`, not a normal exit), then SIGKILL at once.
/// Whether to give up delivering output (the third and later).
pub(super) fn interrupted(n: u32, control: &Control, handle: Handle) -> bool {
    let (say, request) = match n {
        1 => (
            "interrupting {handle} (SIGINT; Ctrl-C again to stop it)",
            Request::Interrupt(handle.into()),
        ),
        2 => (
            "stopping {handle} (SIGTERM; Ctrl-C again to kill)",
            Request::Stop {
                handle: handle.into(),
                grace_ms: STOP_GRACE_MS,
            },
        ),
        3 => (
            "killing {handle}",
            Request::Stop {
                handle: handle.into(),
                grace_ms: 0,
            },
        ),
        _ => return true,
    };
    note!(
        "procjournal: {}",
        say.replace("{handle}", &handle.to_string())
    );
    // Not awaited here: a stop lasts its grace, and Ctrl-C must stay answered meanwhile.
    let control = control.clone();
    tokio::spawn(async move { control.call(request).await });
    n >= 3
}

/// Writes `bytes` where `stream`'s output goes here; a terminal's bytes go where a terminal's
/// output would, to stdout.
pub(super) fn write_stream(stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
    match stream {
        Stream::Stdout | Stream::Terminal => write_unbuffered(std::io::stdout().lock(), bytes),
        Stream::Stderr => write_unbuffered(std::io::stderr().lock(), bytes),
    }
}

/// Writes `bytes` to the descriptor itself, under std's lock so that nothing else interleaves,
/// after whatever std still buffers. std's stdout is line-buffered: it would scan each chunk for
/// its last newline and split it into two writes, a sixth of `run`'s CPU on 1 GiB of output.
/// (A standard descriptor closed when this process started is `/dev/null`: std opens it in its
/// place before `main`, so no file of the root can take descriptor 1 or 2.)
fn write_unbuffered<W: Write + std::os::fd::AsFd>(mut to: W, bytes: &[u8]) -> std::io::Result<()> {
    to.flush()?;
    crate::supervisor::write_all(to.as_fd(), bytes)
}

/// The size of the terminal on stdin, if stdin is one.
pub(super) fn user_terminal_size() -> Option<PtySize> {
    let stdin = std::io::stdin();
    if !rustix::termios::isatty(&stdin) {
        return None;
    }
    let w = rustix::termios::tcgetwinsize(&stdin).ok()?;
    (w.ws_row > 0 && w.ws_col > 0).then_some(PtySize {
        rows: w.ws_row,
        cols: w.ws_col,
    })
}

/// The user's terminal in raw mode; its settings are restored when this drops (a normal end,
/// an error return or a panic's unwinding alike).
pub(super) struct RawMode {
    saved: rustix::termios::Termios,
}

impl RawMode {
    /// `None` when stdin is not a terminal (nothing to change) or refuses raw mode.
    pub(super) fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        if !rustix::termios::isatty(&stdin) {
            return None;
        }
        let saved = rustix::termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Flush, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

/// Whether stdin is known to give nothing: it is /dev/null, or descriptor 0 is not open at all
/// (std's start-up puts /dev/null there, so in `procjournal` that is the first case). Any other
/// stdin is read until it ends.
fn stdin_gives_nothing() -> bool {
    use std::os::fd::AsFd;
    match rustix::fs::fstat(std::io::stdin().as_fd()) {
        Ok(st) => crate::supervisor::is_dev_null(&st),
        Err(e) => e == rustix::io::Errno::BADF,
    }
}

/// Reads stdin on a thread of its own into `tx` until it ends or `tx`'s receiver is gone.
fn spawn_stdin_reader(tx: mpsc::Sender<Vec<u8>>) {
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin().lock();
        // Up to 64 KiB per read: one request each (through a daemon, one connection each), so
        // piped input goes in few requests; typing still comes as it is typed.
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// Forwards what is typed (or piped) on stdin to the command's input, and, for a command on a
/// terminal (`terminal`), this terminal's size changes (SIGWINCH) as resizes, until stdin ends
/// (then the command's input is closed: a pipe's end, a terminal's end-of-file character) or
/// the task is aborted. Stdin is read on a thread of its own: its descriptor is shared with the
/// shell, so it is not made non-blocking. A stdin that gives nothing ([`stdin_gives_nothing`])
/// gets no thread: the command's input is closed at once.
pub(super) async fn forward_input(control: Control, handle: Handle, terminal: bool) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(16);
    if stdin_gives_nothing() {
        // Its end is known without a read: the command's input is closed at once, with no
        // thread (a stack mapped, a 64 KiB buffer, a wake-up of the other CPU) started for a
        // read that returns nothing, as it was for every `run </dev/null`.
        drop(tx);
    } else {
        spawn_stdin_reader(tx);
    }
    let mut winch = terminal
        .then(|| tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok())
        .flatten();
    loop {
        tokio::select! {
            bytes = rx.recv() => {
                let request = match bytes {
                    Some(data) => Request::Input { handle: handle.into(), data, close: false },
                    None => Request::Input { handle: handle.into(), data: Vec::new(), close: true },
                };
                let end = matches!(request, Request::Input { close: true, .. });
                match control.call(request).await {
                    // A command that stopped reading for the whole bound keeps what it was not
                    // given open, and says so; one that closed its input or ended took what
                    // it wanted, as a pipe's reader does.
                    Err(why) if why.contains("INPUT_WRITE_MS") => {
                        note!("procjournal: input to {handle} stopped: {why}");
                        return;
                    }
                    Err(_) => return,
                    Ok(_) if end => return,
                    Ok(_) => {}
                }
            }
            Some(()) = async {
                match &mut winch {
                    Some(w) => w.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some(size) = user_terminal_size() {
                    let _ = control
                        .call(Request::Resize { handle: handle.into(), rows: size.rows, cols: size.cols })
                        .await;
                }
            }
        }
    }
}
