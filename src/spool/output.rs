//! One process's output: the spool with the rolling buffer in front of it.
//!
//! Invariant: the buffer always ends where the spool ends (`buffer.end() == spool.total_bytes()`),
//! because every append goes to the spool first and then, only if that succeeded, to the buffer.
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
        if let Err(e) = self.spool.append(stream, bytes) {
            // A failed append may still have appended a prefix of whole chunks: the buffer starts
            // again, empty, where the spool now ends (older reads fall through to the spool).
            if self.buffer.end() != self.spool.total_bytes() {
                self.buffer = RecentBuffer::new(self.buffer.capacity(), self.spool.total_bytes());
            }
            return Err(e);
        }
        self.buffer.push(stream, bytes);
        debug_assert_eq!(self.buffer.end(), self.spool.total_bytes());
        Ok(())
    }

    /// [`Spool::flush`]: every appended byte reaches the spool's files.
    pub fn flush(&mut self) -> Result<(), SpoolError> {
        self.spool.flush()
    }

    pub fn checkpoint(&mut self) -> Result<(u64, u64), SpoolError> {
        self.spool.checkpoint()
    }

    /// [`Spool::plan_sync`]: the checkpoint's syncs can then run without this output's lock.
    pub fn plan_sync(&mut self) -> Result<SyncPlan, SpoolError> {
        self.spool.plan_sync()
    }

    /// [`Spool::finish_sync`].
    pub fn finish_sync(&mut self, done: SyncDone) -> Result<(u64, u64), SpoolError> {
        self.spool.finish_sync(done)
    }

    /// [`Spool::abandon_sync`].
    pub fn abandon_sync(&mut self) {
        self.spool.abandon_sync();
    }

    pub fn read(&self, cursor: u64, max_bytes: usize) -> Result<SpoolRead, SpoolError> {
        let (retained_from, total) = (self.spool.retained_from(), self.spool.total_bytes());
        match self.buffer.read(cursor, max_bytes, retained_from, total) {
            Some(answer) => answer,
            None => self.spool.read(cursor, max_bytes),
        }
    }
}
