//! Appends a few events to the journal of the default runtime root (or `$PROCJOURNAL_ROOT`) and
//! reads them back: the shortest path from a fresh checkout to bytes on disk.
//!
//! `cargo run --example quickstart`, then `cargo run -- journal dump` and `cargo run -- journal verify`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "an example is a host: it may start processes of its own"
)]

use procjournal::JournalReader;
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};

fn main() -> anyhow::Result<()> {
    let root = procjournal::default_root()?;
    let options = JournalOptions {
        durability: Durability::Sync,
        ..JournalOptions::default()
    };
    let (journal, report) = Journal::open(&root, options)?;
    if !report.is_clean() {
        eprintln!("recovery: {report:?}");
    }
    let kind = EventKind::new(0x7f00).ok_or_else(|| anyhow::anyhow!("kind 0"))?;
    let id = EventId::new_v7();
    let first = journal.append(id, kind, 0, b"hello from the quickstart")?;
    // A retried publication of the same ID is a no-op that returns the original position.
    let retry = journal.append(id, kind, 0, b"hello from the quickstart")?;
    assert_eq!(first.position, retry.position);
    println!(
        "appended seq {} (durable through seq {}) to {}",
        first.position.seq,
        journal.durable_seq(),
        journal.dir().display()
    );
    drop(journal);
    let (records, report) = JournalReader::open(&root)?.records(1)?;
    println!(
        "the journal holds {} records; clean: {}",
        records.len(),
        report.is_clean()
    );
    Ok(())
}
