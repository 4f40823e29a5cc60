//! A tap: a live, bounded copy of one process's output for one consumer, with backpressure
//! (`procjournal run` prints what the workload writes without the spool's retention
//! in between, and a slow terminal or pipe slows the workload down instead of losing bytes).
//!
//! A [`Tap`] rides a [`PreparedProcess`](super::PreparedProcess) into the drain, which copies
//! every chunk it reads from the workload's pipes to the tap's channel as well as to the spool,
//! in the order it read them (the spool's cursors are unchanged by a tap).
//!
//! Invariants:
//! - The channel holds at most [`limits::TAP_DEPTH`] chunks of at most [`limits::READ_BYTES`].
//!   The drain reads a pipe only while it holds room for what it reads ([`Tapping::may_read`]),
//!   so a consumer that falls behind stops the reads, the pipes fill, and the workload blocks in
//!   `write`, as it would writing to the consumer directly.
//! - Waiting for room is one more arm of the drain's loop, never an await inside another arm:
//!   checkpoints and the leader's exit are handled while the tap is full (deadlines are the
//!   actor's sweep's, `deadline.rs`, and stop the tree whatever the tap holds).
//! - A dropped receiver ends the tap, not the process: the drain reads on without it. So does
//!   [`TapAbandon::abandon`], for a consumer whose receiver is held by a thread that may be
//!   blocked writing to a reader that stopped reading.
//! - The consumer must read the tap or drop it. Bytes the workload wrote before its exit are
//!   owed to the consumer however slowly it reads (see `drain`'s final window), so a receiver
//!   held but never read holds the process at its end, as a reader that never reads holds a
//!   shell pipeline.
//! - The sender goes when the drain stops reading: the receiver sees the end once the last
//!   chunk is taken, and the process is terminal (or about to be) from then on.

use std::sync::Arc;

use tokio::sync::{Notify, mpsc};
use tracing::debug;

use crate::limits;
use crate::spool::format::Stream;

/// Bytes the workload wrote to one stream, in the order the drain read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapChunk {
    pub stream: Stream,
    pub bytes: Vec<u8>,
}

/// The sending side of a tap, attached to a process with
/// [`PreparedProcess::with_tap`](super::PreparedProcess::with_tap).
#[derive(Debug)]
pub struct Tap {
    sender: mpsc::Sender<TapChunk>,
    abandoned: Arc<Notify>,
}

impl Tap {
    /// A tap of [`limits::TAP_DEPTH`] chunks and the receiver its consumer reads.
    pub fn new() -> (Tap, mpsc::Receiver<TapChunk>) {
        let (sender, receiver) = mpsc::channel(limits::TAP_DEPTH);
        let abandoned = Arc::new(Notify::new());
        (Tap { sender, abandoned }, receiver)
    }

    /// What ends this tap from its consumer's side without its receiver.
    pub fn abandoner(&self) -> TapAbandon {
        TapAbandon(Arc::clone(&self.abandoned))
    }
}

/// Ends a tap as dropping its receiver does: the drain reads on without it. For a consumer
/// that reads the tap on a thread of its own, which may be blocked writing (to a reader that
/// stopped reading) when the consumer gives up: its receiver cannot be dropped then.
#[derive(Debug, Clone)]
pub struct TapAbandon(Arc<Notify>);

impl TapAbandon {
    pub fn abandon(&self) {
        // A permit is kept if the drain is not waiting now: it takes it at its next wait.
        self.0.notify_one();
    }
}

/// Room reserved for one chunk, and what ends the tap.
#[derive(Debug)]
pub(crate) struct Room(mpsc::OwnedPermit<TapChunk>, Arc<Notify>);

/// The drain's side of a tap: whether it may read a pipe now.
#[derive(Debug)]
pub(crate) enum Tapping {
    /// No tap, or its receiver is gone: the drain reads whenever a pipe is ready.
    Off,
    /// The tap is full: no pipe is read until the consumer takes a chunk (or abandons it).
    Waiting(mpsc::Sender<TapChunk>, Arc<Notify>),
    /// Room for one chunk is reserved: the next read goes to the tap.
    Ready(mpsc::OwnedPermit<TapChunk>, Arc<Notify>),
}

impl Tapping {
    pub fn new(tap: Option<Tap>) -> Tapping {
        match tap {
            Some(tap) => Tapping::Waiting(tap.sender, tap.abandoned),
            None => Tapping::Off,
        }
    }

    /// The drain may read a pipe: there is no tap, or room for what it reads.
    pub fn may_read(&self) -> bool {
        !self.waiting()
    }

    pub fn waiting(&self) -> bool {
        matches!(self, Tapping::Waiting(..))
    }

    /// Resolves with room for one chunk (and what ends the tap), or an error once the receiver
    /// is gone or the tap was abandoned; never while not waiting. Cancel safe: it reserves
    /// through a clone of the sender (the drain is its only sender, so dropping the future
    /// loses no place in the queue), an abandonment's permit is taken only when it resolves,
    /// and the drain's loop creates it afresh on every turn.
    pub async fn room(&self) -> Result<Room, mpsc::error::SendError<()>> {
        match self {
            Tapping::Waiting(sender, abandoned) => tokio::select! {
                room = sender.clone().reserve_owned() => {
                    room.map(|permit| Room(permit, Arc::clone(abandoned)))
                }
                () = abandoned.notified() => Err(mpsc::error::SendError(())),
            },
            Tapping::Off | Tapping::Ready(..) => std::future::pending().await,
        }
    }

    /// Takes what [`Tapping::room`] resolved with.
    pub fn reserved(&mut self, room: Result<Room, mpsc::error::SendError<()>>) {
        *self = match room {
            Ok(Room(permit, abandoned)) => Tapping::Ready(permit, abandoned),
            Err(_) => {
                // The consumer is gone (`run`'s stdout broke, or it gave up on its reader):
                // the drain reads on without it, so the workload never waits for nobody.
                debug!("tap receiver dropped or abandoned; draining without it");
                Tapping::Off
            }
        };
    }

    /// Hands bytes just read to the consumer, in the room reserved for them.
    pub fn send(&mut self, stream: Stream, bytes: &[u8]) {
        *self = match std::mem::replace(self, Tapping::Off) {
            // A receiver dropped since the reservation drops the chunk; the next reservation
            // then finds it gone and turns the tap off.
            Tapping::Ready(permit, abandoned) => Tapping::Waiting(
                permit.send(TapChunk {
                    stream,
                    bytes: bytes.to_vec(),
                }),
                abandoned,
            ),
            other => other,
        };
    }
}
