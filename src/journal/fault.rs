//! A fault-injecting [`Backend`] for tests: it forwards to the real files and fails the Nth write or
//! the Nth flush, with EIO, ENOSPC, or a short write that lands only the first half of the bytes.
//!
//! Armed by a trigger file instead ([`from_env`], feature `fault-injection`: the binary the
//! integration tests run), it fails every write (torn: half of it lands) and every flush once
//! the file exists, so that a test's own workload decides the moment the storage fails while
//! the supervisor lives. A release build has no such hook: the feature is the tests' alone.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::storage::{Backend, FileBackend, SegmentStore, Syncer};
use crate::root::dir::Dir;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// The binary's trigger mode tears writes only; the unit tests use every fault.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Fault {
    Eio,
    Enospc,
    ShortWrite,
}

#[derive(Debug)]
pub(crate) struct Faults {
    /// Writes left before the failing one (negative: disarmed).
    writes_left: AtomicI64,
    flushes_left: AtomicI64,
    fault: Fault,
    /// When set, every write and flush fails once this file exists (the counters are unused).
    trigger: Option<PathBuf>,
}

/// The environment variable naming the trigger file of the binary's journal backend.
#[cfg(feature = "fault-injection")]
pub(crate) const TRIGGER_ENV: &str = "PROCJOURNAL_TEST_FAULT_TRIGGER";

/// The backend the variable [`TRIGGER_ENV`] asks for: every segment write torn and every flush
/// failed with EIO once its file exists; `None` without it.
#[cfg(feature = "fault-injection")]
pub(crate) fn from_env() -> Option<Arc<dyn Backend>> {
    let trigger = PathBuf::from(std::env::var_os(TRIGGER_ENV)?);
    let mut faults = Faults::new(None, None, Fault::ShortWrite);
    Arc::get_mut(&mut faults)?.trigger = Some(trigger);
    Some(Arc::new(FaultyBackend { faults }))
}

impl Faults {
    pub(crate) fn new(fail_write: Option<i64>, fail_flush: Option<i64>, fault: Fault) -> Arc<Self> {
        Arc::new(Faults {
            writes_left: AtomicI64::new(fail_write.unwrap_or(-1)),
            flushes_left: AtomicI64::new(fail_flush.unwrap_or(-1)),
            fault,
            trigger: None,
        })
    }

    fn fires(&self, counter: &AtomicI64) -> bool {
        match &self.trigger {
            Some(trigger) => trigger.exists(),
            None => counter.fetch_sub(1, Ordering::SeqCst) == 0,
        }
    }

    fn write_fires(&self) -> bool {
        self.fires(&self.writes_left)
    }

    fn flush_fires(&self) -> bool {
        self.fires(&self.flushes_left)
    }

    fn error(&self) -> io::Error {
        match self.fault {
            Fault::Enospc => io::Error::from_raw_os_error(28),
            Fault::Eio | Fault::ShortWrite => io::Error::from_raw_os_error(5),
        }
    }
}

#[derive(Debug)]
pub(crate) struct FaultyBackend {
    pub(crate) faults: Arc<Faults>,
}

#[derive(Debug)]
struct FaultyStore {
    inner: Box<dyn SegmentStore>,
    faults: Arc<Faults>,
}

#[derive(Debug)]
struct FaultySyncer {
    inner: Arc<dyn Syncer>,
    faults: Arc<Faults>,
}

impl Syncer for FaultySyncer {
    fn sync(&self) -> io::Result<()> {
        if self.faults.flush_fires() {
            return Err(self.faults.error());
        }
        self.inner.sync()
    }
    fn write_slot(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_slot(offset, bytes)
    }
}

impl SegmentStore for FaultyStore {
    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        if self.faults.write_fires() {
            if self.faults.fault == Fault::ShortWrite {
                self.inner.write_at(offset, &bytes[..bytes.len() / 2])?;
            }
            return Err(self.faults.error());
        }
        self.inner.write_at(offset, bytes)
    }
    fn syncer(&self) -> Arc<dyn Syncer> {
        Arc::new(FaultySyncer {
            inner: self.inner.syncer(),
            faults: Arc::clone(&self.faults),
        })
    }
}

impl Backend for FaultyBackend {
    fn prepare_spare(&self, dir: &Dir, spare_name: &str, segment_bytes: usize) -> io::Result<()> {
        if self.faults.write_fires() {
            return Err(self.faults.error());
        }
        FileBackend.prepare_spare(dir, spare_name, segment_bytes)
    }
    fn commit_spare(
        &self,
        dir: &Dir,
        spare_name: &str,
        name: &str,
        header: &[u8],
    ) -> io::Result<()> {
        if self.faults.flush_fires() {
            return Err(self.faults.error());
        }
        FileBackend.commit_spare(dir, spare_name, name, header)
    }
    fn open_segment(
        &self,
        dir: &Dir,
        name: &str,
        segment_bytes: usize,
        through_map: bool,
    ) -> io::Result<Box<dyn SegmentStore>> {
        Ok(Box::new(FaultyStore {
            inner: FileBackend.open_segment(dir, name, segment_bytes, through_map)?,
            faults: Arc::clone(&self.faults),
        }))
    }
    fn sync_segment(&self, dir: &Dir, name: &str) -> io::Result<()> {
        if self.faults.flush_fires() {
            return Err(self.faults.error());
        }
        FileBackend.sync_segment(dir, name)
    }

    fn extend_segment(&self, dir: &Dir, name: &str, segment_bytes: usize) -> io::Result<()> {
        if self.faults.write_fires() {
            return Err(self.faults.error());
        }
        FileBackend.extend_segment(dir, name, segment_bytes)
    }
}
