//! One process's output: the spool with the rolling buffer in front of it.
//!
//! Invariant: the buffer always ends where the spool ends (`buffer.end() == spool.total_bytes()`),
//! because every append goes to the spool first and then, only if the spool kept it, to the
//! buffer; and the buffer never holds a lost byte: whenever the spool loses bytes (a failed
//! write or sync), the buffer starts again, empty, at the spool's end, so reads of the lost
//! cursors fall through to the spool, which reports them as a gap.
//! Reads are answered from memory when the cursor is inside the buffer and from the spool
//! otherwise, with identical results either way (proptested in `tests.rs`).

use super::buffer::RecentBuffer;
use super::format::Stream;
use super::{Spool, SpoolError, SpoolRead, SyncDone, SyncPlan};

#[derive(Debug)]
pub struct Output {
    spool: Spool,
    buffer: RecentBuffer,
}

impl Output {
    pub fn new(spool: Spool, buffer_bytes: usize) -> Self {
        let buffer = RecentBuffer::new(buffer_bytes, spool.total_bytes());
        Output { spool, buffer }
    }

    pub fn spool(&self) -> &Spool {
        &self.spool
    }

    pub fn append(&mut self, stream: Stream, bytes: &[u8]) -> Result<(), SpoolError> {
        let losses = self.spool.losses();
        let result = self.spool.append(stream, bytes);
        if result.is_ok() && self.spool.losses() == losses {
            self.buffer.push(stream, bytes);
        }
        self.after(losses);
        result
    }

    /// Starts the buffer again at the spool's end if the spool lost bytes since `losses`.
    fn after(&mut self, losses: u64) {
        if self.spool.losses() != losses || self.buffer.end() != self.spool.total_bytes() {
            self.buffer = RecentBuffer::new(self.buffer.capacity(), self.spool.total_bytes());
        }
    }

    /// Runs a spool operation that may lose bytes (a failed write or sync), keeping the
    /// buffer free of lost bytes.
    fn guarded<T>(&mut self, op: impl FnOnce(&mut Spool) -> T) -> T {
        let losses = self.spool.losses();
        let result = op(&mut self.spool);
        self.after(losses);
        result
    }

    /// [`Spool::flush`]: every appended byte reaches the spool's files.
    pub fn flush(&mut self) -> Result<(), SpoolError> {
        self.guarded(Spool::flush)
    }

    /// [`Spool::retire_idle_spares`].
    pub fn retire_idle_spares(&mut self) -> bool {
        self.spool.retire_idle_spares()
    }

    /// [`Spool::finish`]: no more appends; an open gap is closed at the end.
    pub fn finish(&mut self) {
        self.spool.finish();
    }

    /// [`Spool::gaps_recorded`].
    pub fn gaps_recorded(&mut self, upto: u64) {
        self.spool.gaps_recorded(upto);
    }

    #[cfg(any(test, feature = "test-support"))]
    pub fn checkpoint(&mut self) -> Result<(u64, u64), SpoolError> {
        self.guarded(Spool::checkpoint)
    }

    /// [`Spool::plan_sync`]: the checkpoint's syncs can then run without this output's lock.
    pub fn plan_sync(&mut self) -> Result<SyncPlan, SpoolError> {
        self.guarded(Spool::plan_sync)
    }

    /// [`Spool::plan_removals`].
    pub fn plan_removals(&self) -> SyncPlan {
        self.spool.plan_removals()
    }

    /// [`Spool::finish_sync`].
    pub fn finish_sync(&mut self, done: SyncDone) -> Result<(u64, u64), SpoolError> {
        self.guarded(|spool| spool.finish_sync(done))
    }

    /// [`Spool::abandon_sync`].
    pub fn abandon_sync(&mut self) {
        self.spool.abandon_sync();
    }

    pub fn read(&self, cursor: u64, max_bytes: usize) -> Result<SpoolRead, SpoolError> {
        let (retained_from, total) = (self.spool.retained_from(), self.spool.total_bytes());
        if cursor < retained_from && !self.spool.gaps().is_empty() {
            // A recorded gap may lie before `retained_from`, with a reason of its own.
            return self.spool.read(cursor, max_bytes);
        }
        match self.buffer.read(cursor, max_bytes, retained_from, total) {
            Some(answer) => answer,
            None => self.spool.read(cursor, max_bytes),
        }
    }
}
