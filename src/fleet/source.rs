//! The records a node ships, in order, read from its journal beside the writer: only records
//! the journal has made durable (a record the node could still lose must never be in the
//! fleet, where a later record would take its seq), and every seq accounted for (records
//! compacted away before they were read are handed out as a gap, never skipped).
//!
//! Invariant: the items sent cover `from..` without a hole or an overlap, in seq order: a
//! record's seq is the previous item's last seq plus one, or a gap covers the seqs between.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::journal::reader::{JournalReader, Record, RecordView};
use crate::journal::{Journal, JournalError};

/// How often the reader looks for new records, and for the journal's durable seq.
const POLL: Duration = Duration::from_millis(10);
/// How long a written record may wait for a flush before the reader asks for one. Records
/// appended without an acknowledgement (publications, completion notices, closed input) become
/// durable with the next flush, which on an idle node might never come; they are facts the fleet
/// should see, so a shipping node flushes a tail this old itself: at most one flush per this
/// interval, off every appender's path.
const FLUSH_AFTER: Duration = Duration::from_millis(250);

/// What the reader hands the shipper.
#[derive(Debug)]
pub(super) enum Item {
    Record(Record),
    /// The records `from..=to` were gone before they were read.
    Gap {
        from: u64,
        to: u64,
    },
    /// The reader stopped; the shipper starts again from where its stream ends.
    Failed(String),
}

/// Reads records from `from` on a thread of its own until `tx` is closed.
pub(super) fn spawn(
    root: PathBuf,
    journal: Arc<Journal>,
    from: u64,
    tx: mpsc::Sender<Item>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("procjournal-fleet-reader".to_owned())
        .spawn(move || {
            let failed = match read(&root, &journal, from, &tx) {
                Ok(()) => return,
                Err(e) => e.to_string(),
            };
            let _ = tx.blocking_send(Item::Failed(failed));
        })
        .map(|_| ())
}

/// Hands out records in order, each once it is durable.
struct Sender<'a> {
    journal: &'a Journal,
    tx: &'a mpsc::Sender<Item>,
    expected: u64,
}

impl Sender<'_> {
    /// False once the shipper is gone.
    fn send(&mut self, record: RecordView<'_>) -> bool {
        let seq = record.position.seq;
        if seq < self.expected {
            return !self.tx.is_closed();
        }
        let written = std::time::Instant::now();
        while self.journal.durable_seq() < seq {
            if self.tx.is_closed() {
                return false;
            }
            if written.elapsed() >= FLUSH_AFTER {
                // A failed flush poisons the journal, which the supervisor reports; the record
                // then stays unshipped, as it may not survive.
                if self.journal.sync().is_err() {
                    return false;
                }
                continue;
            }
            std::thread::sleep(POLL);
        }
        if seq > self.expected {
            let gap = Item::Gap {
                from: self.expected,
                to: seq - 1,
            };
            if self.tx.blocking_send(gap).is_err() {
                return false;
            }
        }
        self.expected = seq + 1;
        self.tx
            .blocking_send(Item::Record(record.to_owned()))
            .is_ok()
    }
}

fn read(
    root: &std::path::Path,
    journal: &Journal,
    from: u64,
    tx: &mpsc::Sender<Item>,
) -> Result<(), JournalError> {
    let reader = JournalReader::open(root)?;
    let mut sender = Sender {
        journal,
        tx,
        expected: from,
    };
    let mut open = true;
    let (mut follower, _) = reader.follow(from, |r| open = open && sender.send(r))?;
    while open {
        std::thread::sleep(POLL);
        follower.poll(|r| open = open && sender.send(r))?;
        open = open && !tx.is_closed();
    }
    Ok(())
}
