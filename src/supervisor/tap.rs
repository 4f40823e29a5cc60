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
//!   Each chunk is the very buffer the drain read its bytes into (no copy), and goes back to
//!   the drain's spares, over a channel of their own, when the consumer drops it; the drain
//!   keeps at most [`SPARES_MAX`].
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
//! - A tap with a [`TapSink`] ([`Tap::with_sink`]) has the drain write chunks itself, right
//!   after their append to the spool, in the room it holds for them (which it keeps for the
//!   next read when it wrote them all), only while every chunk it sent before is written
//!   (dropped by the consumer, which writes each before it drops it: [`TapShared`]'s count of
//!   chunks out), and only what the sink takes now; the rest goes to the consumer as a chunk,
//!   in order, under the same backpressure as any chunk. Where both outlets take whole writes
//!   the consumer gets no chunk at all (until an abandonment: the drain then writes nothing
//!   more, and waits for room as any tap's drain does, which the abandonment ends).
//! - The drain writes nothing to a sink until the consumer opens it ([`TapAbandon::open_sink`]):
//!   a consumer that prints lines of its own first (`run` names the process it started) keeps
//!   them ahead of the workload's bytes. Until then the hold counts as one chunk out, so every
//!   chunk goes to the consumer, and the drain writes only once those are written too.
//! - A failed write of the drain's ends the tap as a dropped receiver does, and is kept for the
//!   consumer ([`TapAbandon::failure`]) before the sender goes, so that the consumer that sees
//!   the end can tell whether every byte was written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::{Notify, mpsc};
use tracing::debug;

use crate::aligned::ReadBuf;
use crate::limits;
use crate::spool::format::Stream;

use super::tap_sink::TapSink;

/// Read buffers a tap keeps for the drain to read into again: one per chunk the channel holds,
/// the one its consumer is writing and the one the drain is reading into.
pub const SPARES_MAX: usize = limits::TAP_DEPTH + 2;

/// Bytes the workload wrote to one stream, in the order the drain read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapChunk {
    pub stream: Stream,
    pub bytes: TapBytes,
}

/// A chunk's bytes: the buffer the drain read them into, which goes back to its tap's spares
/// when dropped (the drain reads a later chunk into it instead of copying each chunk).
pub struct TapBytes {
    /// Room for [`limits::READ_BYTES`] (zeroed once, when it was made), of which the bytes from
    /// `start` (those the drain did not write itself) to `len` are the chunk's.
    buf: ReadBuf,
    start: usize,
    len: usize,
    /// The drain's spares, while it drains.
    spares: Option<mpsc::UnboundedSender<ReadBuf>>,
    /// The tap's count of chunks out, for a chunk of a tap.
    tap: Option<Arc<TapShared>>,
}

impl std::ops::Deref for TapBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf
            .bytes(self.len)
            .get(self.start..)
            .unwrap_or_default()
    }
}

impl Drop for TapBytes {
    fn drop(&mut self) {
        if let Some(spares) = &self.spares {
            // A drain that ended takes none: the buffer is freed.
            let _ = spares.send(std::mem::take(&mut self.buf));
        }
        if let Some(tap) = &self.tap {
            // After the consumer's write of these bytes, if it wrote them: the drain's next
            // write of its own follows it.
            tap.out.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Clone for TapBytes {
    /// A copy of the bytes, which goes back to no tap.
    fn clone(&self) -> TapBytes {
        TapBytes::from(self.to_vec())
    }
}

impl PartialEq for TapBytes {
    fn eq(&self, other: &TapBytes) -> bool {
        **self == **other
    }
}

impl Eq for TapBytes {}

impl std::fmt::Debug for TapBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapBytes")
            .field("len", &self.len())
            .finish()
    }
}

impl From<Vec<u8>> for TapBytes {
    /// Bytes of no tap (for a consumer's tests, or a copy).
    fn from(buf: Vec<u8>) -> TapBytes {
        TapBytes {
            start: 0,
            len: buf.len(),
            buf: ReadBuf::from(buf),
            spares: None,
            tap: None,
        }
    }
}

/// What the drain and the consumer of a tap share: what ends it from the consumer's side
/// (see [`TapAbandon`]), and the drain's own writes.
#[derive(Debug, Default)]
pub(crate) struct TapShared {
    abandoned: Notify,
    /// The same abandonment, for a drain that writes to a sink and never waits on `abandoned`.
    gave_up: AtomicBool,
    /// Why the drain's write to a sink failed: set once, by the drain, which writes no more.
    failure: std::sync::OnceLock<std::io::Error>,
    /// Where the drain writes chunks itself.
    sink: Option<TapSink>,
    /// Chunks sent and not dropped yet, plus one while the sink is held: the drain writes to
    /// the sink only at 0.
    out: AtomicUsize,
    /// The sink is not open yet: the one in `out` that no chunk accounts for.
    held: AtomicBool,
}

impl TapShared {
    /// Writes what the sink takes of `bytes` now, if nothing sent before is still out (and the
    /// tap was not abandoned); how many bytes it wrote.
    fn write_first(&self, stream: Stream, bytes: &[u8]) -> std::io::Result<usize> {
        match &self.sink {
            Some(sink)
                if self.out.load(Ordering::Acquire) == 0
                    && !self.gave_up.load(Ordering::Relaxed) =>
            {
                sink.write_now(stream, bytes)
            }
            _ => Ok(0),
        }
    }

    /// Keeps why a write of the drain's failed (the tap ends with it).
    fn failed(&self, e: std::io::Error) {
        debug!(error = %e, "writing to the tap's sink failed; draining without it");
        // The only write: the tap is off from here on.
        let _ = self.failure.set(e);
    }
}

/// The drain's spare read buffers: the chunks its consumer dropped come back over `back`; a
/// buffer whose bytes the drain wrote itself is `ready` for the next read.
#[derive(Debug)]
pub(crate) struct Spares {
    back: mpsc::UnboundedSender<ReadBuf>,
    returned: mpsc::UnboundedReceiver<ReadBuf>,
    ready: Option<ReadBuf>,
}

impl Spares {
    fn new() -> Spares {
        let (back, returned) = mpsc::unbounded_channel();
        Spares {
            back,
            returned,
            ready: None,
        }
    }

    /// A returned buffer, or a new one; past [`SPARES_MAX`] returned, the rest are freed (a
    /// consumer that held many chunks at once gives them all back).
    fn take(&mut self) -> ReadBuf {
        if let Some(buf) = self.ready.take() {
            return buf;
        }
        while self.returned.len() > SPARES_MAX {
            let _ = self.returned.try_recv();
        }
        self.returned
            .try_recv()
            .unwrap_or_else(|_| ReadBuf::zeroed(limits::READ_BYTES))
    }

    fn give_back(&self, buf: ReadBuf) {
        let _ = self.back.send(buf);
    }
}

/// The sending side of a tap, attached to a process with
/// [`PreparedProcess::with_tap`](super::PreparedProcess::with_tap).
#[derive(Debug)]
pub struct Tap {
    sender: mpsc::Sender<TapChunk>,
    shared: Arc<TapShared>,
}

impl Tap {
    /// A tap of [`limits::TAP_DEPTH`] chunks and the receiver its consumer reads.
    pub fn new() -> (Tap, mpsc::Receiver<TapChunk>) {
        let (sender, receiver) = mpsc::channel(limits::TAP_DEPTH);
        let shared = Arc::new(TapShared::default());
        (Tap { sender, shared }, receiver)
    }

    /// A tap whose chunks the drain writes to `sink` itself where it may (module doc), once
    /// the consumer opens it ([`TapAbandon::open_sink`]), and the receiver of the rest; with a
    /// [`TapSink::whole`] sink, the receiver sees only what came before the opening, then the
    /// end.
    pub fn with_sink(sink: TapSink) -> (Tap, mpsc::Receiver<TapChunk>) {
        let (sender, receiver) = mpsc::channel(limits::TAP_DEPTH);
        let shared = Arc::new(TapShared {
            sink: Some(sink),
            out: AtomicUsize::new(1),
            held: AtomicBool::new(true),
            ..TapShared::default()
        });
        (Tap { sender, shared }, receiver)
    }

    /// What ends this tap from its consumer's side without its receiver.
    pub fn abandoner(&self) -> TapAbandon {
        TapAbandon(Arc::clone(&self.shared))
    }
}

/// Ends a tap as dropping its receiver does: the drain reads on without it. For a consumer
/// that reads the tap on a thread of its own, which may be blocked writing (to a reader that
/// stopped reading) when the consumer gives up: its receiver cannot be dropped then.
#[derive(Debug, Clone)]
pub struct TapAbandon(Arc<TapShared>);

impl TapAbandon {
    pub fn abandon(&self) {
        self.0.gave_up.store(true, Ordering::Relaxed);
        // A permit is kept if the drain is not waiting now: it takes it at its next wait.
        self.0.abandoned.notify_one();
    }

    /// Lets the drain write to the tap's sink (module doc), once every chunk it sent before is
    /// written: call it when what the consumer writes ahead of the workload's bytes is written.
    /// Once is enough; a tap without a sink ignores it.
    pub fn open_sink(&self) {
        if self.0.held.swap(false, Ordering::AcqRel) {
            // Release: what the consumer wrote before happens before the drain's writes.
            self.0.out.fetch_sub(1, Ordering::Release);
        }
    }

    /// Why the drain's write to the tap's sink failed (a tap without a sink: never). Kept
    /// before the receiver sees the end.
    pub fn failure(&self) -> Option<std::io::Error> {
        let e = self.0.failure.get()?;
        Some(match e.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(e.kind(), e.to_string()),
        })
    }
}

/// Room reserved for one chunk, and what ends the tap.
#[derive(Debug)]
pub(crate) struct Room(mpsc::OwnedPermit<TapChunk>, Arc<TapShared>);

/// The drain's side of a tap: whether it may read a pipe now.
#[derive(Debug)]
pub(crate) enum Tapping {
    /// No tap, or its receiver is gone: the drain reads whenever a pipe is ready.
    Off,
    /// The tap is full: no pipe is read until the consumer takes a chunk (or abandons it).
    Waiting(mpsc::Sender<TapChunk>, Arc<TapShared>, Spares),
    /// Room for one chunk is reserved: the next read goes to the tap.
    Ready(mpsc::OwnedPermit<TapChunk>, Arc<TapShared>, Spares),
}

impl Tapping {
    pub fn new(tap: Option<Tap>) -> Tapping {
        match tap {
            Some(tap) => Tapping::Waiting(tap.sender, tap.shared, Spares::new()),
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
            Tapping::Waiting(sender, shared, _) => tokio::select! {
                room = sender.clone().reserve_owned() => {
                    room.map(|permit| Room(permit, Arc::clone(shared)))
                }
                () = shared.abandoned.notified() => Err(mpsc::error::SendError(())),
            },
            Tapping::Off | Tapping::Ready(..) => std::future::pending().await,
        }
    }

    /// Takes what [`Tapping::room`] resolved with.
    pub fn reserved(&mut self, room: Result<Room, mpsc::error::SendError<()>>) {
        let spares = match std::mem::replace(self, Tapping::Off) {
            Tapping::Waiting(_, _, spares) | Tapping::Ready(_, _, spares) => spares,
            Tapping::Off => return,
        };
        *self = match room {
            Ok(Room(permit, shared)) => Tapping::Ready(permit, shared, spares),
            Err(_) => {
                // The consumer is gone (`run`'s stdout broke, or it gave up on its reader):
                // the drain reads on without it, so the workload never waits for nobody.
                debug!("tap receiver dropped or abandoned; draining without it");
                Tapping::Off
            }
        };
    }

    /// A buffer to read the next chunk into, when room for it is reserved (`None` otherwise:
    /// the drain reads into its own scratch buffer). Hand it back with [`Tapping::send`], or
    /// with [`Tapping::put_back`] if nothing was read into it.
    pub fn buffer(&mut self) -> Option<ReadBuf> {
        match self {
            Tapping::Ready(_, _, spares) => Some(spares.take()),
            Tapping::Off | Tapping::Waiting(..) => None,
        }
    }

    /// Keeps a buffer [`Tapping::buffer`] gave that holds no chunk.
    pub fn put_back(&self, buf: ReadBuf) {
        if let Tapping::Ready(_, _, spares) | Tapping::Waiting(_, _, spares) = self {
            spares.give_back(buf);
        }
    }

    /// Writes what the tap's sink takes now of the first `len` bytes of `buf` (from
    /// [`Tapping::buffer`]), just read, and hands the rest to the consumer, in the room
    /// reserved for them.
    pub fn send(&mut self, stream: Stream, buf: ReadBuf, len: usize) {
        *self = match std::mem::replace(self, Tapping::Off) {
            // A receiver dropped since the reservation drops the chunk; the next reservation
            // then finds it gone and turns the tap off.
            Tapping::Ready(permit, shared, mut spares) => {
                let start = match shared.write_first(stream, buf.bytes(len)) {
                    Ok(written) => written,
                    Err(e) => {
                        shared.failed(e);
                        return;
                    }
                };
                if start == len {
                    // All written: the room and the buffer serve the next read.
                    spares.ready = Some(buf);
                    *self = Tapping::Ready(permit, shared, spares);
                    return;
                }
                shared.out.fetch_add(1, Ordering::Relaxed);
                let bytes = TapBytes {
                    buf,
                    start,
                    len,
                    spares: Some(spares.back.clone()),
                    tap: Some(Arc::clone(&shared)),
                };
                let sender = permit.send(TapChunk { stream, bytes });
                Tapping::Waiting(sender, shared, spares)
            }
            other => other,
        };
    }
}
