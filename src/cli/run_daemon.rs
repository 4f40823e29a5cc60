//! `run` and `capture` on a root a daemon serves.
//!
//! The daemon holds the root's lock, so these commands cannot open a supervisor of their own
//! there (before, both failed with "held by another writer" as soon as a `start` had started a
//! daemon). They go through it instead: the command starts from this shell's environment and
//! directory, as `start` sends them, and `capture` is the protocol's `capture`.
//!
//! `run`'s output then comes back out of the spool (long-polled `output` pages, each span written
//! to the stream it came from) rather than from a tap on the pipes, so a slow stdout here does
//! not hold the command back: once the reader is a whole retention window behind, the bytes in
//! between are gone, and each such range is said on stderr as the spool's notice (`-- N bytes
//! lost ...: retention --`), never skipped silently.
//!
//! Invariants:
//! - Every byte the spool holds from cursor 0 to the end is written once, in cursor order, to
//!   the stream it came from; every range it does not hold is one stderr line with its reason.
//! - Ctrl-C escalates as in `run_cmd` (SIGINT, stop, SIGKILL), through the daemon.
//! - The exit status is the command's, as `run_cmd` computes it (both through `foreground.rs`).

use std::future::Future;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};

use super::foreground::{Control, Ended, Interrupts, RawMode, ended, forward_input, write_stream};
use super::views::PageView;
use crate::client::{ClientError, call_async};
use crate::lifecycle::Handle;
use crate::protocol::{Request, StartArgs};
use crate::spool::format::Stream;
use crate::spool::render;
use crate::supervisor::Rendering;

/// Bytes asked for per page, and how long the daemon may hold a page for new output.
const PAGE_BYTES: u64 = 1 << 20;
const WAIT_MS: u64 = 30_000;

/// Whether a daemon answers on `socket`.
pub(super) fn serves(socket: &Path) -> bool {
    crate::client::Client::connect(socket).is_ok()
}

/// The exit status for a request the daemon refused (`exit::of_refusal`), or the error that
/// kept it from answering.
fn refused(e: ClientError) -> anyhow::Result<ExitCode> {
    match e {
        ClientError::Api(e) => super::exit::of_refusal(e),
        other => Err(other.into()),
    }
}

/// Runs `start` (`run`'s request, with this shell's environment) through the daemon on `socket`.
pub(super) async fn run(
    mut start: StartArgs,
    queue: &super::queue::QueueArgs,
    root: &Path,
    socket: &Path,
) -> anyhow::Result<ExitCode> {
    let pty = start.pty.is_some();
    // Before the start, so that a failure here leaves nothing running.
    let mut interrupts = Interrupts::watch()?;
    let info = match call_async(socket, &Request::Start(start.clone())).await {
        Err(ClientError::Api(e)) if let Some(ms) = queue.retry_after(&e) => {
            start.queue_ms = Some(ms);
            call_async(socket, &Request::Start(start)).await
        }
        other => other,
    };
    let handle = match info {
        Ok(info) => serde_json::from_value::<Handle>(info["handle"].clone())
            .context("the daemon's start result names no handle")?,
        Err(e) => return refused(e),
    };
    note!(
        "procjournal: started {handle} (through the daemon serving {})",
        root.display()
    );
    let _raw = if pty { RawMode::enter() } else { None };
    let control = Control::Daemon(socket.to_owned());
    // Stdin is the command's input, as for any command run in the foreground.
    let forwarding = tokio::spawn(forward_input(control.clone(), handle, pty));
    let followed = follow(&control, handle, &mut interrupts).await;
    forwarding.abort();
    let result = match followed? {
        Some(end) => end,
        None => control
            .call(Request::Wait {
                handle: handle.into(),
                timeout_ms: None,
            })
            .await
            .map_err(|e| anyhow::anyhow!(e))?,
    };
    let result: Ended = serde_json::from_value(result).context("the daemon's wait result")?;
    Ok(ended(handle, &result))
}

/// Awaits `work`, answering Ctrl-C, SIGTERM and SIGHUP meanwhile; `None` once one of them gave
/// up on the output.
async fn answering<F: Future>(
    work: F,
    interrupts: &mut Interrupts,
    control: &Control,
    handle: Handle,
) -> Option<F::Output> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return Some(out),
            give_up = interrupts.next(control, handle) => {
                if give_up {
                    return None;
                }
            }
        }
    }
}

/// A page of output, or the process's end (the `wait` beside the pages) if that came first.
enum Next {
    Page(Result<serde_json::Value, String>),
    End(Result<serde_json::Value, String>),
}

/// Prints the process's output from cursor 0 until it has ended and all of it was read. A
/// `wait` runs beside the pages: an end the journal failed to record leaves the process
/// `running` in every page, so the end that `wait` returns is what stops the reading then
/// (the rest is read without waiting), and it is returned so as not to be asked for again.
async fn follow(
    control: &Control,
    handle: Handle,
    interrupts: &mut Interrupts,
) -> anyhow::Result<Option<serde_json::Value>> {
    let mut cursor = 0u64;
    let waited = control.call(Request::Wait {
        handle: handle.into(),
        timeout_ms: None,
    });
    tokio::pin!(waited);
    let mut end: Option<serde_json::Value> = None;
    loop {
        let request = output_request(handle, cursor, end.is_none());
        let next = async {
            tokio::select! {
                page = control.call(request) => Next::Page(page),
                ended = &mut waited, if end.is_none() => Next::End(ended),
            }
        };
        let Some(next) = answering(next, interrupts, control, handle).await else {
            return Ok(end);
        };
        let page = match next {
            Next::Page(page) => page,
            Next::End(ended) => {
                end = Some(ended.map_err(|e| anyhow::anyhow!(e))?);
                continue;
            }
        };
        let (page, bytes, spans) = decode_page(page, cursor)?;
        let write = tokio::task::spawn_blocking(move || write_spans(&spans, &bytes));
        match answering(write, interrupts, control, handle).await {
            None => return Ok(end),
            Some(Ok(Ok(()))) => {}
            Some(_) => {
                // Nobody reads any more: stop the command rather than run it unread, as
                // `run_cmd` does when its stdout breaks.
                let _ = control
                    .call(Request::Stop {
                        handle: handle.into(),
                        grace_ms: crate::limits::GRACE_MS_DEFAULT,
                    })
                    .await;
                return Ok(end);
            }
        }
        cursor = page.next_cursor;
        if (page.state.is_terminal() || end.is_some()) && cursor >= page.total_bytes {
            return Ok(end);
        }
    }
}

/// The `output` request for the page at `cursor`, held for new output while `waiting`.
fn output_request(handle: Handle, cursor: u64, waiting: bool) -> Request {
    Request::Output {
        min_bytes: None,
        settle_ms: None,
        tail_lines: None,
        handle: handle.into(),
        cursor,
        max_bytes: PAGE_BYTES,
        rendering: Rendering::Base64,
        wait_ms: if waiting { WAIT_MS } else { 0 },
    }
}

/// A page's spans, each as the stream it came from and its length.
type Spans = Vec<(Stream, usize)>;

/// The page the daemon answered at `cursor`, its bytes and the stream and length of each span;
/// says on stderr what the page lost.
fn decode_page(
    page: Result<serde_json::Value, String>,
    cursor: u64,
) -> anyhow::Result<(PageView, Vec<u8>, Spans)> {
    let page = page.map_err(|e| anyhow::anyhow!(e))?;
    let page: PageView = serde_json::from_value(page).context("an output page")?;
    if page.cursor_ahead {
        bail!("the daemon has less output than was already printed (cursor {cursor})");
    }
    if let Some(skipped) = &page.skipped {
        note!("{}", render::escape_field(&skipped.notice(), false));
    } else if page.gap {
        let lost = page.retained_from.saturating_sub(cursor);
        note!("-- {lost} bytes lost at cursor {cursor}: retention --");
    }
    let bytes = crate::protocol::base64::decode(&page.data)
        .with_context(|| format!("the output page at cursor {cursor} is not base64"))?;
    let spans: Spans = page
        .spans
        .iter()
        .map(|s| (stream_of(&s.stream), s.len as usize))
        .collect();
    Ok((page, bytes, spans))
}

fn stream_of(name: &str) -> Stream {
    match name {
        "stderr" => Stream::Stderr,
        "terminal" => Stream::Terminal,
        _ => Stream::Stdout,
    }
}

/// Writes a page's bytes, span by span, each to its stream. Bytes no span covers (a daemon that
/// sends no spans) go to stdout.
fn write_spans(spans: &[(Stream, usize)], bytes: &[u8]) -> std::io::Result<()> {
    let mut rest = bytes;
    for &(stream, len) in spans {
        let (this, after) = rest.split_at(len.min(rest.len()));
        write_stream(stream, this)?;
        rest = after;
    }
    if rest.is_empty() {
        Ok(())
    } else {
        write_stream(Stream::Stdout, rest)
    }
}

/// `capture` through the daemon: `request` is a validated `capture` whose start carries this
/// shell's environment. Prints the receipt and returns the command's status.
pub(super) async fn capture(
    socket: &Path,
    request: Request,
    queue: &super::queue::QueueArgs,
) -> anyhow::Result<ExitCode> {
    let receipt = match call_async(socket, &request).await {
        Err(ClientError::Api(e)) if let Some(ms) = queue.retry_after(&e) => {
            call_async(socket, &super::queue::with_queue(request, ms)).await
        }
        other => other,
    };
    let receipt = match receipt {
        Ok(receipt) => receipt,
        Err(e) => return refused(e),
    };
    super::out::verdict_stands(outln!("{}", super::json::line(&receipt)?))?;
    let int = |field: &str| receipt[field].as_i64().and_then(|n| i32::try_from(n).ok());
    if let Some(why) = receipt["persist_error"].as_str() {
        let handle = receipt["handle"].as_str().unwrap_or("the process");
        super::exit::say_not_persisted(handle, int("exit_code"), int("signal"), why);
        return Ok(ExitCode::from(super::exit::FAILURE));
    }
    Ok(super::exit::of_process(int("exit_code"), int("signal")))
}
