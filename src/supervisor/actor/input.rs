//! A child's stdin, owned by one writer task per process once a caller first asks for it.
//!
//! Invariants:
//! - Writes go in the order callers queued them, each bounded by `INPUT_WRITE_MS`, and each
//!   caller is answered: with what became of its write, or, once the input is closed or the
//!   process is terminal, by its reply being dropped, which it reads as the input closed.
//! - No request is ever left unanswered in the queue. A caller's `send` reserves room before it
//!   puts its request there, and tokio lets a request put through room reserved before the
//!   receiver went sit in the channel for as long as a sender lives, the caller's own among
//!   them, so its reply would never come (a `capture` whose command ended while it closed the
//!   input waited for ever). When the writer ends, for whatever reason, it closes the queue
//!   (no new request gets room) and takes what still comes through room reserved before.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::{InputOp, Reply};
use crate::limits;
use crate::supervisor::process::{InputEnd, Proc, ProcEvent, TerminalSummary};
use crate::tree::PtyMaster;

/// Owns a child's stdin: writes what callers queue until the queue closes, the input is
/// closed, or the process is terminal; then ends the queue, and keeps a terminal's input at
/// its end.
pub(super) async fn stdin_writer(
    pipe: InputEnd,
    mut queue: mpsc::Receiver<InputOp>,
    proc: Arc<Proc>,
    actor: mpsc::Sender<ProcEvent>,
) {
    let mut exited = proc.exited.subscribe();
    let terminal = serve(pipe, &mut queue, &proc, &actor, &mut exited).await;
    // Later writes find the input closed, as after a pipe's close.
    end_queue(&mut queue).await;
    if let Some((master, reply)) = terminal {
        let bound = Duration::from_millis(limits::INPUT_WRITE_MS);
        keep_terminal_at_eof(&master, &mut exited, bound, reply).await;
    }
}

/// Serves the queue until it closes, the process is terminal or the input is closed. A
/// terminal's input closed comes back with its request's reply, to be kept at its end.
async fn serve(
    mut pipe: InputEnd,
    queue: &mut mpsc::Receiver<InputOp>,
    proc: &Proc,
    actor: &mpsc::Sender<ProcEvent>,
    exited: &mut watch::Receiver<Option<TerminalSummary>>,
) -> Option<(Arc<PtyMaster>, Reply<()>)> {
    loop {
        let op = tokio::select! {
            op = queue.recv() => op,
            _ = exited.wait_for(Option::is_some) => None,
        };
        match op {
            Some(InputOp::Write(bytes, reply)) => {
                let _ = reply.send(write(&mut pipe, &bytes, proc, actor).await);
            }
            Some(InputOp::Close(reply)) => {
                if let InputEnd::Terminal(master) = pipe {
                    return Some((master, reply));
                }
                drop(pipe);
                let _ = reply.send(());
                return None;
            }
            None => return None,
        }
    }
}

/// Closes the queue and takes every request still put through room reserved before the close
/// (`recv` answers `None` once none is left and no room is held), dropping each one's reply.
async fn end_queue(queue: &mut mpsc::Receiver<InputOp>) {
    queue.close();
    while queue.recv().await.is_some() {}
}

/// Writes `bytes` to the child's stdin, bounded by `INPUT_WRITE_MS`; the answer to its caller.
async fn write(
    pipe: &mut InputEnd,
    bytes: &[u8],
    proc: &Proc,
    actor: &mpsc::Sender<ProcEvent>,
) -> Result<(), String> {
    let bound = Duration::from_millis(limits::INPUT_WRITE_MS);
    let mut written = 0usize;
    let result = tokio::time::timeout(bound, async {
        while written < bytes.len() {
            let n = pipe.write(&bytes[written..]).await?;
            written += n;
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    if written > 0 {
        // Input is activity; it also clears a wait for human input (journaled, by the actor).
        proc.clocks.touch();
        if proc.clocks.awaiting() {
            let _ = actor
                .send(ProcEvent::InputWritten {
                    handle: proc.handle,
                })
                .await;
        }
    }
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{e} after {written} of {} bytes", bytes.len())),
        Err(_) => Err(format!(
            "the process did not read its input within {} ms (INPUT_WRITE_MS); {written} of {} bytes were written",
            limits::INPUT_WRITE_MS,
            bytes.len()
        )),
    }
}

/// Ends a terminal's input as a pipe's end is ended: for good.
///
/// A terminal stays open (its master is the output too), so closing its input is what a user at
/// it does: typing the end-of-file character (Ctrl-D), bounded as a write. One is not enough. A
/// program that leaves canonical mode after it was typed (a shell's or a REPL's readline, taking
/// its first prompt) finds it turned into a NUL byte, which is not the end of anything, and
/// would wait forever for input that will never come; a pipe at its end answers every later read
/// with the end too. So the character is typed again each time the program changes the
/// terminal's line mode (its next prompt), until the process exits, at most
/// `limits::PTY_EOF_RETYPES` times; `reply` is answered after the first.
async fn keep_terminal_at_eof<T>(
    master: &PtyMaster,
    exited: &mut watch::Receiver<Option<T>>,
    bound: Duration,
    reply: oneshot::Sender<()>,
) {
    let mut mode = master.line_mode().ok();
    let eof = |mode: Option<crate::tree::pty::LineMode>| mode.map_or(0x04, |m| m.eof);
    let _ = tokio::time::timeout(bound, master.write(&[eof(mode)])).await;
    let _ = reply.send(());
    let mut poll = tokio::time::interval(Duration::from_millis(limits::PTY_EOF_POLL_MS));
    for _ in 0..limits::PTY_EOF_RETYPES {
        loop {
            tokio::select! {
                _ = exited.wait_for(Option::is_some) => return,
                _ = poll.tick() => {}
            }
            let now = master.line_mode().ok();
            if now != mode {
                mode = now;
                break;
            }
        }
        let _ = tokio::time::timeout(bound, master.write(&[eof(mode)])).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request put through room reserved before the writer ended is taken and its caller
    /// answered (its reply dropped), though the caller still holds its sender, as
    /// `Supervisor::close_input` does while it waits: a plain drop of the receiver left such a
    /// request in the channel, and its caller waiting, for good.
    #[tokio::test]
    async fn a_request_sent_through_room_reserved_before_the_end_is_answered() {
        let (tx, mut rx) = mpsc::channel(limits::INPUT_QUEUE_DEPTH);
        let permit = tx.reserve().await.expect("room in a fresh queue");
        let ending = tokio::spawn(async move { end_queue(&mut rx).await });
        while !tx.is_closed() {
            tokio::task::yield_now().await;
        }
        let (reply, answered) = oneshot::channel();
        permit.send(InputOp::Close(reply));
        // A guard against a hang, not a measure of time.
        let answer = tokio::time::timeout(Duration::from_secs(30), answered).await;
        assert!(
            matches!(answer, Ok(Err(_))),
            "the request was left in the queue: {answer:?}"
        );
        ending.await.expect("the queue's end");
        let (reply, _answered) = oneshot::channel();
        assert!(
            tx.send(InputOp::Close(reply)).await.is_err(),
            "an ended queue took a new request"
        );
    }
}
