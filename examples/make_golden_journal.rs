//! Writes the golden journal of format version 1: twelve fixed events in segments of 4096 bytes,
//! under the runtime root given as the only argument (which must not hold a journal yet).
//!
//! `cargo run --example make_golden_journal -- <root>` produced `tests/data/journal-v1/` once (its
//! `LOCK` is deleted at the end: a fixture has no writer). That fixture is frozen: never regenerate
//! it, because its point is that bytes written by an *old* version still open. When the format
//! changes, bump the version, extend this program if needed, and commit its output as a new
//! `tests/data/journal-vN/` next to the old ones. `tests/it/golden_journal.rs` lists, independently of
//! this program, exactly what the v1 fixture holds.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "an example is a host: it may start processes of its own"
)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use procjournal::codec::{self, CODEC_VERSION};
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};

/// Codec version for payloads that are opaque bytes rather than a codec-1 value.
const OPAQUE: u8 = 0;

fn pattern(seq: u8, len: usize) -> Vec<u8> {
    (0..len).map(|j| (j * 7 + usize::from(seq)) as u8).collect()
}

/// `(codec_version, payload)` of event `seq` (1-based).
fn payload(seq: u8) -> anyhow::Result<(u8, Vec<u8>)> {
    Ok(match seq {
        1 => (
            CODEC_VERSION,
            codec::encode(&(1u32, "true".to_owned(), vec!["/bin/true".to_owned()]))?,
        ),
        2 => (OPAQUE, Vec::new()),
        3 => (OPAQUE, vec![0x2a]),
        4 => (OPAQUE, pattern(seq, 7)),
        5 => (OPAQUE, pattern(seq, 8)),
        6 => (CODEC_VERSION, codec::encode(&Some(-1i32))?),
        7 => (OPAQUE, pattern(seq, 1000)),
        8 => (OPAQUE, pattern(seq, 2000)),
        9 => (OPAQUE, pattern(seq, 3000)),
        10 => (
            CODEC_VERSION,
            codec::encode(&BTreeMap::from([
                ("exit".to_owned(), 0i64),
                ("pid".to_owned(), 4242),
            ]))?,
        ),
        11 => (OPAQUE, pattern(seq, 1500)),
        12 => (OPAQUE, pattern(seq, 1200)),
        _ => bail!("no event {seq}"),
    })
}

fn main() -> anyhow::Result<()> {
    let root: PathBuf = std::env::args_os()
        .nth(1)
        .context("usage: make_golden_journal <root>")?
        .into();
    let journal_dir = root.join("journal");
    if journal_dir.exists() && std::fs::read_dir(&journal_dir)?.next().is_some() {
        bail!("{} already holds a journal", journal_dir.display());
    }
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 4096,
    };
    let (journal, report) = Journal::open(&root, options)?;
    if !report.is_clean() {
        bail!("a fresh journal is not clean: {report:?}");
    }
    for seq in 1..=12u8 {
        let kind = EventKind::new(u16::from((seq - 1) % 4 + 1)).context("kind 0")?;
        let (codec_version, payload) = payload(seq)?;
        let appended = journal.append(
            EventId::from_bytes([seq; 16]),
            kind,
            codec_version,
            &payload,
        )?;
        println!(
            "seq {} kind {} codec {} bytes {} at segment {} offset {}",
            appended.position.seq,
            kind.get(),
            codec_version,
            payload.len(),
            appended.position.segment_index,
            appended.position.offset
        );
    }
    drop(journal);
    std::fs::remove_file(root.join("LOCK"))?;
    Ok(())
}
