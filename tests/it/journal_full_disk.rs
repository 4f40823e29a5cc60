//! The journal on a real full file system: a small tmpfs mounted for the test (the tests run as
//! root; where mounting is not allowed the test prints why and passes without running).

use std::path::Path;

use crate::common::tmpfs::SmallTmpfs;

use procjournal::journal::reader::JournalReader;
use procjournal::limits::SEGMENT_BYTES_INITIAL;
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};

const KIND: EventKind = match EventKind::new(1) {
    Some(k) => k,
    None => panic!(),
};

fn options(segment_bytes: usize) -> JournalOptions {
    JournalOptions {
        durability: Durability::Sync,
        segment_bytes,
    }
}

/// Names in `root`'s journal directory that a segment creation leaves while it runs: the
/// `.log.tmp` of a segment created in place and the `.spare` prepared ahead of a rotation.
fn temporaries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root.join("journal"))
        .map(|entries| {
            entries
                .map(|e| {
                    e.expect("dir entry")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .filter(|n| n.ends_with(".tmp") || n.ends_with(".spare"))
                .collect()
        })
        .unwrap_or_default()
}

/// ENOSPC while a segment's zeroes are written: the partial file is removed at once (its space
/// given back), both for the first segment of a new journal (created as `.log.tmp`) and for the
/// spare the writer prepares in the background (`.spare`); nothing is left for `journal verify`
/// to report, what was appended is intact, and the failed spare does not poison the writer.
#[test]
fn a_segment_that_fills_the_disk_is_removed_at_once() {
    let first = SEGMENT_BYTES_INITIAL / 1024;
    let Some(fs) = SmallTmpfs::mount(&format!("{}k", first * 3 / 4)) else {
        return;
    };
    // A first segment larger than the file system: the open fails, and leaves nothing.
    let big = fs.path().join("big");
    let failed = Journal::open(&big, options(8 << 20));
    assert!(
        failed.is_err(),
        "a first segment of {first} KiB cannot fit in three quarters of it"
    );
    assert_eq!(temporaries(&big), Vec::<String>::new());
    drop(fs);

    // A first segment that fits and a spare that does not: once the first segment is half full
    // the spare (twice its size) is started, fails on its background thread and is removed;
    // appending goes on in the first segment.
    let Some(fs) = SmallTmpfs::mount(&format!("{}k", first * 2)) else {
        return;
    };
    let root = fs.path().join("root");
    let (journal, _) = Journal::open(&root, options_os(4 << 20)).expect("open");
    let payload = [7u8; 4000];
    let mut appended = 0u64;
    while journal.last_seq() == 0
        || journal
            .position_of(EventId::from_bytes(id(appended)))
            .is_some_and(|p| p.offset < first as u64 * 700)
    {
        appended += 1;
        journal
            .append(EventId::from_bytes(id(appended)), KIND, 1, &payload)
            .expect("append");
    }
    drop(journal);
    assert_eq!(temporaries(&root), Vec::<String>::new());
    let reader = JournalReader::open(&root).expect("reader");
    let report = reader.verify().expect("verify");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.records, appended);
    assert!(report.leftover_tmp_files.is_empty());
}

fn id(n: u64) -> [u8; 16] {
    (u128::from(n) + 1).to_le_bytes()
}

fn options_os(segment_bytes: usize) -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        segment_bytes,
    }
}
