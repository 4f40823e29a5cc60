//! Property tests of the journal against a reference model: the list of first writes, in order.
//!
//! The model also predicts where each record lands, from the documented packing rule alone:
//! segments start with a 64-byte header, a record takes 48 header bytes plus its payload rounded up
//! to 8, a record that does not fit the rest of the active segment starts a fresh segment of the
//! size given at the latest open, and an existing segment keeps the size its header records.
//!
//! Every journal lives in its own temporary root on the real file system.

use std::collections::HashMap;
use std::path::Path;

use procjournal::journal::reader::JournalReader;
use procjournal::limits::{
    PAGE_BYTES, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES, SEGMENT_BYTES_INITIAL,
    SEGMENT_RECORDS_OFFSET,
};
use procjournal::{
    Appended, Durability, EventId, EventKind, Journal, JournalOptions, Position, RecoveryReport,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

#[derive(Debug, Clone)]
struct Event {
    id: u128,
    kind: u16,
    codec: u8,
    payload: Vec<u8>,
}

impl Event {
    fn event_id(&self) -> EventId {
        EventId::from_bytes(self.id.to_le_bytes())
    }
    fn event_kind(&self) -> EventKind {
        EventKind::new(self.kind).expect("strategies never make kind 0")
    }
}

/// Predicts record positions (see the module documentation).
#[derive(Debug, Default)]
struct Layout {
    /// Sizes of the segments, by index.
    segments: Vec<usize>,
    /// Where the next record goes in the last segment.
    offset: usize,
    /// Size of segments created from now on.
    new_segment_bytes: usize,
}

impl Layout {
    /// Segment `index` of a journal opened with `configured` bytes: 1 MiB, doubling, at most the
    /// configured size (journal-format.md, "Segment files").
    fn size_of(index: usize, configured: usize) -> usize {
        configured.min(SEGMENT_BYTES_INITIAL << index.min(20))
    }

    fn opened(&mut self, segment_bytes: usize) {
        self.new_segment_bytes = segment_bytes;
        if self.segments.is_empty() {
            self.segments.push(Self::size_of(0, segment_bytes));
            self.offset = SEGMENT_RECORDS_OFFSET;
        }
    }

    fn place(&mut self, payload_bytes: usize) -> (u64, u64) {
        let bytes = RECORD_HEADER_BYTES + payload_bytes.next_multiple_of(RECORD_ALIGN_BYTES);
        let active = *self.segments.last().expect("placed after an open");
        if self.offset + bytes > active {
            let size = Self::size_of(self.segments.len(), self.new_segment_bytes)
                .max((SEGMENT_RECORDS_OFFSET + bytes).next_multiple_of(PAGE_BYTES));
            self.segments.push(size);
            self.offset = SEGMENT_RECORDS_OFFSET;
        }
        let at = (self.segments.len() as u64 - 1, self.offset as u64);
        self.offset += bytes;
        at
    }
}

/// The reference model: every first write, in append order, and where it landed.
#[derive(Debug, Default)]
struct Model {
    events: Vec<(Event, Position)>,
    by_id: HashMap<u128, usize>,
    layout: Layout,
}

impl Model {
    /// What an append of `event` must return: the original position for a known ID, a new one
    /// (the next seq, where the layout puts it) otherwise.
    fn append(&mut self, event: &Event) -> Appended {
        if let Some(&i) = self.by_id.get(&event.id) {
            return Appended {
                position: self.events[i].1,
                written: false,
            };
        }
        let (segment_index, offset) = self.layout.place(event.payload.len());
        let position = Position {
            seq: self.events.len() as u64 + 1,
            segment_index,
            offset,
        };
        self.by_id.insert(event.id, self.events.len());
        self.events.push((event.clone(), position));
        Appended {
            position,
            written: true,
        }
    }

    fn last_seq(&self) -> u64 {
        self.events.len() as u64
    }
}

fn options(durability: Durability, segment_bytes: usize) -> JournalOptions {
    JournalOptions {
        durability,
        segment_bytes,
    }
}

fn open(
    root: &Path,
    durability: Durability,
    segment_bytes: usize,
    model: &mut Model,
) -> Result<Journal, TestCaseError> {
    let (journal, report) = Journal::open(root, options(durability, segment_bytes))
        .map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
    prop_assert!(report.is_clean(), "open after a clean close: {:?}", report);
    prop_assert_eq!(report.records, model.last_seq());
    prop_assert_eq!(journal.last_seq(), model.last_seq());
    prop_assert_eq!(journal.durable_seq(), model.last_seq());
    model.layout.opened(segment_bytes);
    Ok(journal)
}

/// Appends `event` and checks the result against the model.
fn append(journal: &Journal, model: &mut Model, event: &Event) -> Result<(), TestCaseError> {
    let got = journal
        .append(
            event.event_id(),
            event.event_kind(),
            event.codec,
            &event.payload,
        )
        .map_err(|e| TestCaseError::fail(format!("append: {e}")))?;
    let want = model.append(event);
    prop_assert_eq!(got, want);
    prop_assert_eq!(journal.last_seq(), model.last_seq());
    prop_assert_eq!(journal.position_of(event.event_id()), Some(want.position));
    if journal.durability() != Durability::Os {
        // Sync and Group acknowledge only durable records, re-appends included.
        prop_assert!(journal.durable_seq() >= got.position.seq);
    }
    Ok(())
}

/// Reads the closed journal under `root` and checks it equals the model, and is clean.
fn check_journal(root: &Path, model: &Model) -> Result<RecoveryReport, TestCaseError> {
    let (records, report) = JournalReader::open(root)
        .and_then(|r| r.records(1))
        .map_err(|e| TestCaseError::fail(format!("read: {e}")))?;
    prop_assert!(report.is_clean(), "{:?}", report);
    prop_assert_eq!(records.len(), model.events.len());
    for (record, (event, position)) in records.iter().zip(&model.events) {
        prop_assert_eq!(record.position, *position);
        prop_assert_eq!(record.event_id, event.event_id());
        prop_assert_eq!(record.kind, event.kind);
        prop_assert_eq!(record.codec_version, event.codec);
        prop_assert!(
            record.payload == event.payload,
            "payload of seq {} differs",
            position.seq
        );
    }
    prop_assert_eq!(report.records, model.last_seq());
    prop_assert_eq!(
        report.last_seq,
        (model.last_seq() > 0).then_some(model.last_seq())
    );
    prop_assert_eq!(report.segments, model.layout.segments.len() as u64);
    Ok(report)
}

fn event() -> impl Strategy<Value = Event> {
    (
        any::<u128>(),
        1..=u16::MAX,
        any::<u8>(),
        vec(any::<u8>(), 0..3000),
    )
        .prop_map(|(id, kind, codec, payload)| Event {
            id,
            kind,
            codec,
            payload,
        })
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::Sync),
        Just(Durability::Group),
        Just(Durability::Os)
    ]
}

/// 4096..=65536 in whole pages.
fn segment_bytes() -> impl Strategy<Value = usize> {
    (1..=16usize).prop_map(|pages| pages * PAGE_BYTES)
}

#[derive(Debug, Clone)]
enum Op {
    /// Append an event (its random ID is new, barring a 2^-128 coincidence).
    New(Event),
    /// Append again the ID of an earlier event (picked by `Index`), with this kind and payload,
    /// or with the original ones when `same` is set.
    Again {
        pick: Index,
        same: bool,
        with: Event,
    },
    /// Close and reopen under these settings.
    Reopen(Durability, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => event().prop_map(Op::New),
        4 => (any::<Index>(), any::<bool>(), event())
            .prop_map(|(pick, same, with)| Op::Again { pick, same, with }),
        1 => (durability(), segment_bytes()).prop_map(|(d, s)| Op::Reopen(d, s)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever is appended is read back exactly, in order, with seqs 1..=n, at the positions the
    /// packing rule predicts, and the journal is clean; large sequences span several segments.
    #[test]
    fn round_trip_equals_the_model(
        events in vec(event(), 0..200),
        segment_bytes in segment_bytes(),
        durability in durability(),
    ) {
        let dir = tempfile::tempdir()?;
        let mut model = Model::default();
        let journal = open(dir.path(), durability, segment_bytes, &mut model)?;
        for event in &events {
            append(&journal, &mut model, event)?;
        }
        journal.sync().map_err(|e| TestCaseError::fail(format!("sync: {e}")))?;
        prop_assert_eq!(journal.durable_seq(), model.last_seq());
        drop(journal);

        let report = check_journal(dir.path(), &model)?;
        for (i, (_, position)) in model.events.iter().enumerate() {
            prop_assert_eq!(position.seq, i as u64 + 1);
        }
        let total_bytes: usize = SEGMENT_RECORDS_OFFSET
            + events
                .iter()
                .map(|e| RECORD_HEADER_BYTES + e.payload.len().next_multiple_of(RECORD_ALIGN_BYTES))
                .sum::<usize>();
        if total_bytes > segment_bytes {
            prop_assert!(
                report.segments > 1,
                "{} bytes of records in {} segment(s) of {} bytes",
                total_bytes,
                report.segments,
                segment_bytes
            );
        }
        // Segment files only: a `*.spare` (the next segment being zero-filled) may sit beside them.
        let files = std::fs::read_dir(dir.path().join("journal"))?
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
            })
            .count() as u64;
        prop_assert_eq!(files, report.segments, "segment files on disk");
    }

    /// For every split point k: append the first k events, close, reopen (possibly with another
    /// policy and segment size), append the rest; the journal equals the model either way.
    #[test]
    fn reopen_after_any_prefix_equals_the_model(
        events in vec(event(), 0..=12),
        first in (durability(), segment_bytes()),
        second in (durability(), segment_bytes()),
    ) {
        for k in 0..=events.len() {
            let dir = tempfile::tempdir()?;
            let mut model = Model::default();
            let journal = open(dir.path(), first.0, first.1, &mut model)?;
            for event in &events[..k] {
                append(&journal, &mut model, event)?;
            }
            drop(journal);
            check_journal(dir.path(), &model)?;

            let journal = open(dir.path(), second.0, second.1, &mut model)?;
            for event in &events[k..] {
                append(&journal, &mut model, event)?;
            }
            journal.sync().map_err(|e| TestCaseError::fail(format!("sync: {e}")))?;
            drop(journal);
            check_journal(dir.path(), &model)?;
            prop_assert_eq!(model.last_seq(), events.len() as u64);
        }
    }

    /// Re-appending a known ID, with any kind and payload, writes nothing and returns the original
    /// position, before and after reopens; the journal holds the first writes only.
    #[test]
    fn re_append_is_idempotent_across_reopens(
        ops in vec(op(), 0..80),
        initial in (durability(), segment_bytes()),
    ) {
        let dir = tempfile::tempdir()?;
        let mut model = Model::default();
        let mut settings = initial;
        let mut journal = open(dir.path(), settings.0, settings.1, &mut model)?;
        for op in &ops {
            match op {
                Op::New(event) => append(&journal, &mut model, event)?,
                Op::Again { pick, same, with } => {
                    if model.events.is_empty() {
                        continue;
                    }
                    let original = &model.events[pick.index(model.events.len())].0;
                    let event = if *same {
                        original.clone()
                    } else {
                        Event { id: original.id, ..with.clone() }
                    };
                    let before = journal.last_seq();
                    append(&journal, &mut model, &event)?;
                    prop_assert_eq!(journal.last_seq(), before, "a re-append wrote a record");
                }
                Op::Reopen(durability, segment_bytes) => {
                    drop(journal);
                    check_journal(dir.path(), &model)?;
                    settings = (*durability, *segment_bytes);
                    journal = open(dir.path(), settings.0, settings.1, &mut model)?;
                }
            }
        }
        drop(journal);
        check_journal(dir.path(), &model)?;

        // After a final reopen, the ID index rebuilt from disk answers every re-append.
        let journal = open(dir.path(), settings.0, settings.1, &mut model)?;
        let known: Vec<Event> = model.events.iter().map(|(e, _)| e.clone()).collect();
        for (i, event) in known.iter().enumerate() {
            let changed = Event {
                kind: event.kind % u16::MAX + 1,
                payload: event.payload.iter().rev().copied().chain([i as u8]).collect(),
                ..event.clone()
            };
            append(&journal, &mut model, &changed)?;
        }
        prop_assert_eq!(journal.last_seq(), known.len() as u64);
        prop_assert_eq!(
            journal.position_of(EventId::from_bytes(u128::MAX.to_le_bytes())),
            model.by_id.get(&u128::MAX).map(|&i| model.events[i].1)
        );
        drop(journal);
        check_journal(dir.path(), &model)?;
    }
}
