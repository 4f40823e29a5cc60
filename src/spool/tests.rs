//! Spool tests against real files, checked against a reference model: a Vec of bytes with a
//! stream tag per byte.

use proptest::prelude::*;

use super::buffer::RecentBuffer;
use super::format::Stream;
use super::recovery::scan_segment;
use super::writer::WRITE_BUFFER_BYTES;
use super::*;

#[derive(Default)]
pub(super) struct Model {
    pub(super) bytes: Vec<u8>,
    pub(super) streams: Vec<Stream>,
}

impl Model {
    pub(super) fn append(&mut self, stream: Stream, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        self.streams
            .extend(std::iter::repeat_n(stream, bytes.len()));
    }
}

/// Checks one read against the model; returns the read for further checks.
pub(super) fn check_read(spool: &Spool, model: &Model, cursor: u64, max: usize) {
    let total = model.bytes.len() as u64;
    assert_eq!(spool.total_bytes(), total);
    let result = spool.read(cursor, max);
    if cursor > total {
        assert!(
            matches!(result, Err(SpoolError::CursorAhead { .. })),
            "{result:?}"
        );
        return;
    }
    let read = result.unwrap();
    let retained_from = spool.retained_from();
    assert_eq!(read.gap, cursor < retained_from);
    assert_eq!(
        (read.retained_from, read.total_bytes),
        (retained_from, total)
    );
    let start = cursor.max(retained_from) as usize;
    let n = max.min(total as usize - start);
    assert_eq!(
        read.bytes,
        model.bytes[start..start + n],
        "cursor {cursor} max {max}"
    );
    assert_eq!(read.next_cursor, (start + n) as u64);
    // Spans cover the bytes exactly, in order, with the right stream for every byte.
    let mut at = start as u64;
    for span in &read.spans {
        assert_eq!(span.cursor, at);
        assert!(span.len > 0);
        for c in span.cursor..span.cursor + u64::from(span.len) {
            assert_eq!(model.streams[c as usize], span.stream, "stream of byte {c}");
        }
        at += u64::from(span.len);
    }
    assert_eq!(at, read.next_cursor);
    // Adjacent spans of the same stream are merged.
    assert!(read.spans.windows(2).all(|w| w[0].stream != w[1].stream));
}

fn stream_of(i: usize) -> Stream {
    if i.is_multiple_of(3) {
        Stream::Stderr
    } else {
        Stream::Stdout
    }
}

pub(super) fn write_pattern(spool: &mut Spool, model: &mut Model, sizes: &[usize]) {
    for (i, &n) in sizes.iter().enumerate() {
        let bytes: Vec<u8> = (0..n)
            .map(|j| (model.bytes.len() + j) as u8 ^ (i as u8))
            .collect();
        spool.append(stream_of(i), &bytes).unwrap();
        model.append(stream_of(i), &bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_read_agrees_with_the_model(
        // Some appends larger than CHUNK_SPLIT_BYTES, so that they are split (across segments too).
        sizes in proptest::collection::vec(
            prop_oneof![3 => 1usize..3000, 1 => 1usize..3 * CHUNK_SPLIT_BYTES],
            0..60,
        ),
        segment_bytes in 200u64..40_000,
        retention_bytes in 1u64..80_000,
        probes in proptest::collection::vec((0u64..400_000, 1usize..10_000), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions { segment_bytes, retention_bytes };
        let (mut spool, recovery) = Spool::open_writer(dir.path(), [7; 16], options).unwrap();
        prop_assert!(recovery.is_clean());
        let mut model = Model::default();
        let mut last_retained = 0;
        for (i, &n) in sizes.iter().enumerate() {
            write_pattern(&mut spool, &mut model, &[n]);
            let _ = i;
            prop_assert!(spool.retained_from() >= last_retained, "retained_from moved back");
            last_retained = spool.retained_from();
            prop_assert!(spool.retained_from() <= spool.total_bytes());
        }
        let total = model.bytes.len() as u64;
        let mut cursors: Vec<(u64, usize)> = probes.clone();
        cursors.extend([(0, 10), (total, 10), (total + 1, 10), (spool.retained_from(), usize::MAX / 2)]);
        for &(cursor, max) in &cursors {
            check_read(&spool, &model, cursor % (total + 2), max);
        }
        // The same answers after a checkpoint and a reopen, by a writer and by a reader.
        spool.checkpoint().unwrap();
        drop(spool);
        let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
        prop_assert!(recovery.is_clean(), "{:?}", recovery);
        for &(cursor, max) in &cursors {
            check_read(&reader, &model, cursor % (total + 2), max);
        }
        let (mut spool, _) = Spool::open_writer(dir.path(), [7; 16], options).unwrap();
        write_pattern(&mut spool, &mut model, &[10, 20]);
        check_read(&spool, &model, spool.retained_from(), usize::MAX / 2);
    }

    #[test]
    fn the_rolling_buffer_answers_like_the_spool(
        sizes in proptest::collection::vec(1usize..500, 1..40),
        capacity in 1usize..3000,
        probes in proptest::collection::vec((0u64..20_000, 1usize..2000), 1..30),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions { segment_bytes: 1000, retention_bytes: 5000 };
        let (mut spool, _) = Spool::open_writer(dir.path(), [8; 16], options).unwrap();
        let mut buffer = RecentBuffer::new(capacity, 0);
        let mut model = Model::default();
        for (i, &n) in sizes.iter().enumerate() {
            let bytes: Vec<u8> = (0..n).map(|j| (i * 7 + j) as u8).collect();
            spool.append(stream_of(i), &bytes).unwrap();
            buffer.push(stream_of(i), &bytes);
            model.append(stream_of(i), &bytes);
        }
        prop_assert!(buffer.end() - buffer.start() <= capacity as u64);
        // The facade answers exactly like the spool whichever path it takes.
        let dir2 = tempfile::tempdir().unwrap();
        let (spool2, _) = Spool::open_writer(dir2.path(), [8; 16], options).unwrap();
        let mut output = Output::new(spool2, capacity);
        for (i, &n) in sizes.iter().enumerate() {
            let bytes: Vec<u8> = (0..n).map(|j| (i * 7 + j) as u8).collect();
            output.append(stream_of(i), &bytes).unwrap();
        }
        let total = spool.total_bytes();
        for &(cursor, max) in &probes {
            let cursor = cursor % (total + 2);
            let from_buffer = buffer.read(cursor, max, spool.retained_from(), total);
            let from_spool = spool.read(cursor, max);
            match (from_buffer, from_spool) {
                (None, _) => prop_assert!(cursor.max(spool.retained_from()) < buffer.start()),
                (Some(Ok(a)), Ok(b)) => prop_assert_eq!(a, b),
                (Some(Err(SpoolError::CursorAhead { .. })), Err(SpoolError::CursorAhead { .. })) => {}
                (a, b) => prop_assert!(false, "buffer {:?} spool {:?}", a, b),
            }
            match (output.read(cursor, max), spool.read(cursor, max)) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(SpoolError::CursorAhead { .. }), Err(SpoolError::CursorAhead { .. })) => {}
                (a, b) => prop_assert!(false, "output {:?} spool {:?}", a, b),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Appends of every size, through the write buffer (filled, written aligned, flushed or not):
    /// the writer reads back every byte at once; another reader sees a prefix of whole chunks
    /// before a flush and everything after it. What stays staged for `pwrite` starts on a cache
    /// line (`aligned` says why).
    #[test]
    fn staged_appends_are_read_back_at_once_and_reach_the_file_at_a_flush(
        steps in proptest::collection::vec(
            (prop_oneof![3 => 1usize..6000, 1 => 1usize..3 * WRITE_BUFFER_BYTES], any::<bool>()),
            1..24,
        ),
        segment_bytes in prop_oneof![Just(8u64 << 20), 20_000u64..1_500_000],
        probes in proptest::collection::vec((any::<u64>(), 1usize..20_000), 4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions { segment_bytes, retention_bytes: u64::MAX / 2 };
        let (mut spool, _) = Spool::open_writer(dir.path(), [10; 16], options).unwrap();
        let mut model = Model::default();
        for (i, &(n, flush)) in steps.iter().enumerate() {
            let bytes: Vec<u8> = (0..n).map(|j| (model.bytes.len() + j) as u8 ^ (i as u8)).collect();
            spool.append(stream_of(i), &bytes).unwrap();
            model.append(stream_of(i), &bytes);
            if !spool.pending.is_empty() {
                prop_assert_eq!(spool.pending.as_ptr().addr() % crate::aligned::ALIGN, 0);
            }
            let total = model.bytes.len() as u64;
            for &(c, max) in &probes {
                check_read(&spool, &model, c % (total + 1), max);
            }
            check_read(&spool, &model, total.saturating_sub(n as u64 + 7), n + 7);
            if flush {
                spool.flush().unwrap();
            }
            let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
            prop_assert!(recovery.bad_segments.is_empty(), "{:?}", recovery);
            let seen = reader.total_bytes();
            if flush {
                prop_assert!(recovery.is_clean(), "{:?}", recovery);
                prop_assert_eq!(seen, total);
            } else {
                prop_assert!(seen <= total);
            }
            let prefix = Model {
                bytes: model.bytes[..seen as usize].to_vec(),
                streams: model.streams[..seen as usize].to_vec(),
            };
            check_read(&reader, &prefix, 0, usize::MAX / 2);
        }
    }
}

#[test]
fn a_checkpoint_writes_staged_appends_before_it_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open_writer(dir.path(), [11; 16], SpoolOptions::default()).unwrap();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[100, 5000, 7]);
    let (reader, _) = Spool::open_reader(dir.path()).unwrap();
    assert_eq!(
        reader.total_bytes(),
        0,
        "small appends stay staged until a flush"
    );
    assert_eq!(spool.checkpoint().unwrap(), (0, 5107));
    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    check_read(&reader, &model, 0, usize::MAX / 2);
    // Dropping a writer writes what it staged.
    write_pattern(&mut spool, &mut model, &[33]);
    drop(spool);
    let (reader, _) = Spool::open_reader(dir.path()).unwrap();
    check_read(&reader, &model, 0, usize::MAX / 2);
}

#[test]
fn gap_cursor_ahead_and_end_of_output() {
    let dir = tempfile::tempdir().unwrap();
    let options = SpoolOptions {
        segment_bytes: 4096,
        retention_bytes: 8192,
    };
    let (mut spool, _) = Spool::open_writer(dir.path(), [1; 16], options).unwrap();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1000; 40]);
    assert!(
        spool.retained_from() > 0,
        "retention must have dropped segments"
    );
    let read = spool.read(0, 100).unwrap();
    assert!(read.gap);
    assert_eq!(read.spans[0].cursor, spool.retained_from());
    let end = spool.read(spool.total_bytes(), 100).unwrap();
    assert!(end.bytes.is_empty() && !end.gap);
    assert_eq!(end.next_cursor, spool.total_bytes());
    assert!(matches!(
        spool.read(spool.total_bytes() + 1, 1),
        Err(SpoolError::CursorAhead { .. })
    ));
    // Only whole segments are ever deleted, and no more than needed.
    let files = std::fs::read_dir(dir.path()).unwrap().count() as u64;
    assert!(files * 4096 >= spool.total_bytes() - spool.retained_from());
    assert!(spool.total_bytes() - spool.retained_from() <= 8192 + 4096);
}

/// Segment names in `dir`, sorted.
pub(super) fn segment_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names
}

/// A spool of 4 KiB segments and 8 KiB retention that defers its removals, as a supervisor's.
pub(super) fn deferring_spool() -> (tempfile::TempDir, Spool) {
    let dir = tempfile::tempdir().unwrap();
    let options = SpoolOptions {
        segment_bytes: 4096,
        retention_bytes: 8192,
    };
    let (mut spool, _) = Spool::open_writer(dir.path(), [1; 16], options).unwrap();
    spool.defer_removals();
    (dir, spool)
}

/// A supervised spool leaves the files retention drops to its next sync plan: the appends that
/// drop segments remove no file, reads start at the new window at once, and the plan's run (on
/// a thread of its own in the supervisor) removes exactly the dropped ones, before its
/// directory sync. What no plan took is removed when the handle drops.
#[test]
fn deferred_removals_leave_the_window_at_once_and_the_files_at_the_next_plan() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1000; 20]);
    let dropped = spool.retained_from();
    assert!(dropped > 0, "retention must have dropped segments");
    let before = segment_names(dir.path());
    assert_eq!(
        before.first(),
        Some(&segment_name(0)),
        "no file removed yet: {before:?}"
    );
    let read = spool.read(0, 100).unwrap();
    assert!(read.gap);
    assert_eq!(read.spans[0].cursor, dropped);
    check_read(&spool, &model, dropped, 1 << 16);

    let plan = spool.plan_sync().unwrap();
    assert!(!plan.is_empty());
    assert_eq!(spool.finish_sync(plan.run()).unwrap().0, dropped);
    let after = segment_names(dir.path());
    assert_eq!(after.first(), Some(&segment_name(dropped)), "{after:?}");
    assert!(
        before.ends_with(&after),
        "only the dropped ones went: {before:?} -> {after:?}"
    );

    write_pattern(&mut spool, &mut model, &[1000; 20]);
    let dropped = spool.retained_from();
    drop(spool);
    let (reopened, _) = Spool::open_reader(dir.path()).unwrap();
    assert_eq!(
        reopened.retained_from(),
        dropped,
        "the drop removed what no plan took"
    );
    assert_eq!(
        segment_names(dir.path()).first(),
        Some(&segment_name(dropped))
    );
}

/// A removal-only plan (for a writer whose window turns over faster than it checkpoints)
/// removes exactly the files retention dropped and syncs nothing: the durable total stays where
/// the last sync left it, and the next sync still covers every byte appended since.
#[test]
fn a_removal_plan_removes_the_dropped_files_and_makes_nothing_durable() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1000; 3]);
    let plan = spool.plan_sync().unwrap();
    spool.finish_sync(plan.run()).unwrap();
    let durable = spool.durable_total();
    assert_eq!(durable, 3000);
    write_pattern(&mut spool, &mut model, &[1000; 20]);
    let dropped = spool.retained_from();
    assert!(
        !spool.doomed.is_empty(),
        "retention must have dropped segments"
    );

    let plan = spool.plan_removals();
    assert!(plan.files.is_empty() && plan.sealed.is_empty(), "{plan:?}");
    assert!(plan.dir.is_none() && plan.parent.is_none(), "{plan:?}");
    assert_eq!(spool.finish_sync(plan.run()).unwrap(), (dropped, durable));
    assert!(spool.doomed.is_empty());
    assert_eq!(
        segment_names(dir.path()).first(),
        Some(&segment_name(dropped)),
        "exactly the dropped files went"
    );
    assert_eq!(spool.durable_total(), durable, "nothing was synced");
    check_read(&spool, &model, dropped, 1 << 16);

    let plan = spool.plan_sync().unwrap();
    assert!(
        !plan.files.is_empty(),
        "the sync still owes the active segment: {plan:?}"
    );
    assert!(plan.dir.is_some(), "and the directory the removals changed");
    assert_eq!(
        spool.finish_sync(plan.run()).unwrap(),
        (dropped, spool.total_bytes())
    );
}

/// Deferred removals go oldest first and stop at the first that fails, so the files left on
/// disk never skip a segment; what a plan could not remove, or a plan lost before it ran,
/// leaves its names to the next plan.
#[test]
fn deferred_removals_never_leave_a_hole_and_what_fails_waits_for_the_next_plan() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1000; 20]);
    let doomed = spool.doomed.clone();
    assert!(doomed.len() >= 3, "{doomed:?}");
    // A plan lost before it ran (its task died) takes nothing with it.
    drop(spool.plan_sync().unwrap());
    spool.abandon_sync();
    assert_eq!(spool.doomed, doomed);
    // The second oldest cannot be removed: a directory stands in its place.
    let blocker = dir.path().join(&doomed[1]);
    std::fs::remove_file(&blocker).unwrap();
    std::fs::create_dir(&blocker).unwrap();
    std::fs::write(blocker.join("x"), b"x").unwrap();
    let plan = spool.plan_sync().unwrap();
    spool.finish_sync(plan.run()).unwrap();
    let names = segment_names(dir.path());
    assert!(!names.contains(&doomed[0]), "the oldest went: {names:?}");
    assert!(
        names.contains(&doomed[2]),
        "nothing after the failure went: {names:?}"
    );
    assert_eq!(spool.doomed[..], doomed[1..], "the rest waits, in order");
    std::fs::remove_dir_all(&blocker).unwrap();
    let plan = spool.plan_sync().unwrap();
    spool.finish_sync(plan.run()).unwrap();
    assert!(spool.doomed.is_empty());
    assert_eq!(
        segment_names(dir.path()).first(),
        Some(&segment_name(spool.retained_from()))
    );
    check_read(&spool, &model, spool.retained_from(), 1 << 16);
}

/// Past the bound on deferred removals (no plan came), retention removes at once again: the
/// files a writer leaves behind stay bounded however long it goes without a sync.
#[test]
fn deferred_removals_are_bounded() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1000; 400]);
    let window = (spool.total_bytes() - spool.retained_from()).div_ceil(4096) as usize + 1;
    let files = segment_names(dir.path()).len();
    assert!(
        files <= window + crate::limits::SPOOL_REMOVALS_DEFERRED_MAX,
        "{files} files for a window of {window}"
    );
    assert!(files > window, "removals were deferred: {files} files");
    check_read(&spool, &model, spool.retained_from(), 1 << 16);
}

#[test]
fn torn_tail_is_cut_and_reported_and_whole_chunks_survive() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open_writer(dir.path(), [2; 16], SpoolOptions::default()).unwrap();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[100, 200, 300]);
    drop(spool);
    let seg = dir.path().join(segment_name(0));
    let len = std::fs::metadata(&seg).unwrap().len();
    // Tear the last chunk at every byte, as a crash mid-write would.
    let last_chunk = format::chunk_bytes(300) as u64;
    let pristine = std::fs::read(&seg).unwrap();
    for cut in (len - last_chunk + 1)..len {
        std::fs::write(&seg, &pristine[..cut as usize]).unwrap();
        let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
        assert_eq!(recovery.torn_tail_bytes, cut - (len - last_chunk));
        assert!(!recovery.torn_tail_cut);
        assert_eq!(reader.total_bytes(), 300);
        let (spool, recovery) =
            Spool::open_writer(dir.path(), [2; 16], SpoolOptions::default()).unwrap();
        assert!(recovery.torn_tail_cut);
        assert_eq!(spool.total_bytes(), 300);
        let m = Model {
            bytes: model.bytes[..300].to_vec(),
            streams: model.streams[..300].to_vec(),
        };
        check_read(&spool, &m, 0, 10_000);
        drop(spool);
        let (_, recovery) = Spool::open_reader(dir.path()).unwrap();
        assert!(recovery.is_clean());
    }
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_is_reported_as_corrupt_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    let options = SpoolOptions {
        segment_bytes: 2048,
        retention_bytes: 1 << 20,
    };
    let (mut spool, _) = Spool::open_writer(dir.path(), [3; 16], options).unwrap();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[500; 12]);
    drop(spool);
    let seg = dir.path().join(segment_name(0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[format::SPOOL_HEADER_BYTES + format::CHUNK_HEADER_BYTES + 3] ^= 1;
    std::fs::write(&seg, bytes).unwrap();
    let (reader, _) = Spool::open_reader(dir.path()).unwrap();
    let read = reader.read(0, 10).unwrap();
    let skipped = read.skipped.expect("the damaged chunk is named");
    assert_eq!((skipped.kind, skipped.from), (SkipKind::Damage, 0));
    assert_eq!(skipped.damage, Some(DamageKind::BadChunk));
    // The chunk after it follows at once: the damage is that chunk's 500 cursors.
    assert_eq!(skipped.to, 500);
    assert_eq!(read.bytes, model.bytes[500..510]);
    // Later segments stay readable.
    let later = reader.read(3000, 100).unwrap();
    assert_eq!(later.bytes, model.bytes[3000..3100]);
}

/// Segment files a spool holds a descriptor of.
fn held_descriptors(spool: &Spool) -> usize {
    spool.segments.iter().filter(|s| s.file.is_some()).count()
}

/// A writer and a reader hold only the newest segment's descriptor, however many segments are
/// retained; reads and checkpoints of sealed ones open them for the occasion and agree with the
/// model, and a checkpoint reopens only a sealed segment it has not synced yet.
#[test]
fn only_the_newest_segment_holds_a_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let options = SpoolOptions {
        segment_bytes: 2048,
        retention_bytes: 1 << 20,
    };
    let (mut spool, _) = Spool::open_writer(dir.path(), [4; 16], options).unwrap();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[700; 20]);
    assert!(spool.segments.len() >= 6, "{}", spool.segments.len());
    assert_eq!(held_descriptors(&spool), 1);
    // The first checkpoint syncs every segment (they were written since open), opening the
    // sealed ones one at a time as it runs; afterwards none of them is held.
    let plan = spool.plan_sync().unwrap();
    assert_eq!(plan.files.len(), 1);
    assert_eq!(plan.sealed.len() + 1, spool.segments.len());
    spool.finish_sync(plan.run()).unwrap();
    assert_eq!(held_descriptors(&spool), 1);
    for cursor in (0..model.bytes.len() as u64).step_by(333) {
        check_read(&spool, &model, cursor, 1500);
    }
    // Nothing new: the next plan opens no sealed segment.
    write_pattern(&mut spool, &mut model, &[10]);
    let plan = spool.plan_sync().unwrap();
    assert_eq!((plan.files.len(), plan.sealed.len()), (1, 0), "{plan:?}");
    spool.finish_sync(plan.run()).unwrap();
    drop(spool);
    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(held_descriptors(&reader), 1);
    for cursor in (0..model.bytes.len() as u64).step_by(333) {
        check_read(&reader, &model, cursor, 1500);
    }
}

/// A sealed segment is opened by name at each read; a file put under that name after the open
/// (another spool's segment, with valid chunks) is refused by its header, never read as output.
#[test]
fn a_sealed_segment_replaced_after_the_open_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let options = SpoolOptions {
        segment_bytes: 2048,
        retention_bytes: 1 << 20,
    };
    for (at, id) in [(dir.path(), [5; 16]), (other.path(), [6; 16])] {
        let (mut spool, _) = Spool::open_writer(at, id, options).unwrap();
        write_pattern(&mut spool, &mut Model::default(), &[500; 12]);
    }
    let (reader, _) = Spool::open_reader(dir.path()).unwrap();
    std::fs::copy(
        other.path().join(segment_name(0)),
        dir.path().join(segment_name(0)),
    )
    .unwrap();
    match reader.read(0, 100) {
        Err(SpoolError::Io { cause, .. }) => {
            assert_eq!(cause.kind(), std::io::ErrorKind::InvalidData, "{cause}");
        }
        other => panic!("a replaced segment must not be read: {other:?}"),
    }
    // The newest segment, held since the open, still reads.
    assert!(reader.read(5000, 100).is_ok());
}

/// Every 4 KiB read at many cursors of a spool of `total` bytes written in `append`-byte appends;
/// returns the most chunk-file bytes one read loaded (the index of a sealed segment is built
/// beforehand, as a first read of it does once).
fn most_loaded_by_a_read(total: usize, append: impl Fn(usize) -> usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let options = SpoolOptions {
        segment_bytes: 256 * 1024,
        retention_bytes: u64::MAX / 2,
    };
    let (mut spool, _) = Spool::open_writer(dir.path(), [9; 16], options).unwrap();
    let mut model = Model::default();
    let mut i = 0;
    while model.bytes.len() < total {
        let n = append(i).min(total - model.bytes.len());
        write_pattern(&mut spool, &mut model, &[n]);
        i += 1;
    }
    drop(spool);
    let (reader, _) = Spool::open_reader(dir.path()).unwrap();
    let total = total as u64;
    let mut most = 0;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let cursor = x % total;
        let _ = reader.read(cursor, 4096).unwrap();
        let (read, loaded) = reader.read_counted(cursor, 4096).unwrap();
        assert_eq!(
            read.bytes,
            model.bytes[cursor as usize..(cursor as usize + 4096).min(total as usize)]
        );
        most = most.max(loaded);
    }
    most
}

#[test]
fn a_read_loads_the_chunks_it_returns_whatever_the_spool_holds() {
    let whole = format::chunk_bytes(CHUNK_SPLIT_BYTES) as u64;
    for total in [64 * 1024, 4 * 1024 * 1024] {
        // Large appends and page-sized ones are runs of whole split chunks: a 4 KiB read loads
        // exactly the two chunks (at most) that hold its bytes.
        assert!(most_loaded_by_a_read(total, |_| 64 * 1024) <= 2 * whole);
        assert!(most_loaded_by_a_read(total, |_| 4096) <= 2 * whole);
        // Anything else: at most a stride and a chunk more on either side.
        let bound = 4096 + 2 * (INDEX_STRIDE_BYTES + 2 * whole);
        assert!(most_loaded_by_a_read(total, |i| 1 + (i * 7919) % 9000) <= bound);
        assert!(most_loaded_by_a_read(total, |i| 1 + i % 300) <= bound);
    }
}

#[test]
fn chunks_of_any_size_the_format_allows_are_read_back() {
    // Segments written chunk by chunk, as an older writer splitting at 64 KiB (or at the format's
    // limit) would have: the index and reads must not assume this writer's split.
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::default();
    let sizes: &[&[usize]] = &[
        &[65536, 65536, 34464, 65536, 12, 1, 4096, 4096, 100],
        &[format::CHUNK_PAYLOAD_BYTES_MAX, 7, 65536],
        &[3, 5, 8, 65536, 65536],
    ];
    for (s, chunk_sizes) in sizes.iter().enumerate() {
        let first = model.bytes.len() as u64;
        let mut bytes = format::SpoolHeader {
            spool_id: [4; 16],
            first_cursor: first,
            segment_index: s as u64,
            created_unix_ms: 0,
        }
        .encode()
        .to_vec();
        for (i, &n) in chunk_sizes.iter().enumerate() {
            let cursor = model.bytes.len() as u64;
            let payload: Vec<u8> = (0..n).map(|j| (cursor as usize + j * 31) as u8).collect();
            format::encode_chunk(stream_of(i), cursor, &payload, &mut bytes);
            model.append(stream_of(i), &payload);
        }
        std::fs::write(dir.path().join(segment_name(first)), bytes).unwrap();
    }
    let total = model.bytes.len() as u64;
    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    let mut cursor = 0;
    while cursor < total {
        for max in [1, 4096, 100_000] {
            check_read(&reader, &model, cursor, max);
        }
        cursor += 997;
    }
    check_read(&reader, &model, 0, usize::MAX / 2);
    // A writer continues such a spool with its own split.
    let (mut spool, recovery) =
        Spool::open_writer(dir.path(), [4; 16], SpoolOptions::default()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    write_pattern(&mut spool, &mut model, &[10_000, 3]);
    for cursor in (0..model.bytes.len() as u64).step_by(1999) {
        check_read(&spool, &model, cursor, 9000);
    }
}

/// A spool of one segment holding one chunk per size in `sizes` (each size at most
/// [`CHUNK_SPLIT_BYTES`]); returns the directory, the model and each chunk's (file offset,
/// cursor, payload bytes).
fn one_segment(sizes: &[usize]) -> (tempfile::TempDir, Model, Vec<(usize, u64, usize)>) {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open_writer(dir.path(), [12; 16], SpoolOptions::default()).unwrap();
    let mut model = Model::default();
    let mut chunks = Vec::new();
    let mut offset = format::SPOOL_HEADER_BYTES;
    for &n in sizes {
        assert!(n <= CHUNK_SPLIT_BYTES);
        chunks.push((offset, model.bytes.len() as u64, n));
        offset += format::chunk_bytes(n);
        write_pattern(&mut spool, &mut model, &[n]);
    }
    spool.flush().unwrap();
    drop(spool);
    (dir, model, chunks)
}

fn edit_segment(dir: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let seg = dir.join(segment_name(0));
    let mut bytes = std::fs::read(&seg).unwrap();
    edit(&mut bytes);
    std::fs::write(&seg, bytes).unwrap();
}

/// Reads everything that can be read from `reader`, stepping over each damaged range recovery
/// reported; checks every byte against the model and that exactly the damaged cursors fail.
fn check_around_damage(reader: &Spool, model: &Model, damaged: &[SpoolDamage]) {
    let total = model.bytes.len() as u64;
    assert_eq!(reader.total_bytes(), total);
    let mut cursor = 0;
    while cursor < total {
        if let Some(d) = damaged.iter().find(|d| d.first_cursor == cursor) {
            for c in [d.first_cursor, d.end_cursor - 1] {
                let read = reader.read(c, 100).unwrap();
                let skipped = read.skipped.as_ref().expect("damage is named");
                assert_eq!(
                    (skipped.kind, skipped.from),
                    (SkipKind::Damage, c),
                    "at {c}"
                );
                assert!(
                    skipped.to > c && skipped.to <= d.end_cursor,
                    "{skipped:?} in {d:?}"
                );
                // Whatever follows the damage in the same read is the model's.
                let to = skipped.to as usize;
                assert_eq!(read.bytes, model.bytes[to..to + read.bytes.len()]);
            }
            cursor = d.end_cursor;
            continue;
        }
        let read = reader.read(cursor, 1000).unwrap();
        assert!(!read.bytes.is_empty(), "no progress at {cursor}");
        let end = read.next_cursor as usize;
        assert_eq!(read.bytes, model.bytes[cursor as usize..end], "at {cursor}");
        cursor = read.next_cursor;
    }
}

#[test]
fn damage_in_the_middle_of_the_active_segment_is_reported_and_nothing_after_it_is_cut() {
    let sizes = [100, 200, 300, 400, 500, 600, 700];
    // Damage of every kind to the fourth chunk: its payload, its header (cursor field, checksum,
    // length), zeroes over it (a hole), zeroes over it and part of the next chunk's header.
    type Edit = fn(&mut Vec<u8>, usize);
    let edits: [(&str, Edit); 5] = [
        ("payload byte", |b, at| {
            b[at + format::CHUNK_HEADER_BYTES + 9] ^= 0x40
        }),
        ("cursor field", |b, at| b[at + 16] ^= 1),
        ("length field", |b, at| b[at + 8] = 0xff),
        ("zeroed chunk", |b, at| {
            b[at..at + format::chunk_bytes(400)].fill(0)
        }),
        ("zeroed chunk and next header", |b, at| {
            b[at..at + format::chunk_bytes(400) + 10].fill(0);
        }),
    ];
    for (what, edit) in edits {
        let (dir, model, chunks) = one_segment(&sizes);
        let (at, cursor, _) = chunks[3];
        let len = std::fs::metadata(dir.path().join(segment_name(0)))
            .unwrap()
            .len();
        edit_segment(dir.path(), |b| edit(b, at));
        let damaged_end = if what == "zeroed chunk and next header" {
            5
        } else {
            4
        };
        let (next_at, next_cursor, _) = chunks[damaged_end];
        let expected = SpoolDamage {
            segment: segment_name(0),
            start_offset: at as u64,
            end_offset: next_at as u64,
            first_cursor: cursor,
            end_cursor: next_cursor,
            reason: String::new(),
        };
        let same = |d: &SpoolDamage| SpoolDamage {
            reason: String::new(),
            ..d.clone()
        };
        let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
        assert_eq!(recovery.damaged.len(), 1, "{what}: {recovery:?}");
        assert_eq!(same(&recovery.damaged[0]), expected, "{what}");
        assert_eq!(recovery.torn_tail_bytes, 0, "{what}: {recovery:?}");
        assert!(!recovery.is_clean());
        check_around_damage(&reader, &model, &recovery.damaged);
        // A read that runs into the damage returns the bytes before it.
        let short = reader.read(0, 100_000).unwrap();
        assert_eq!(short.bytes, model.bytes[..cursor as usize], "{what}");
        drop(reader);

        // A writable open keeps the damage and every chunk after it, and appends after them.
        let (mut writer, recovery) =
            Spool::open_writer(dir.path(), [12; 16], SpoolOptions::default()).unwrap();
        assert_eq!(same(&recovery.damaged[0]), expected, "{what}");
        assert!(!recovery.torn_tail_cut, "{what}: {recovery:?}");
        assert_eq!(
            std::fs::metadata(dir.path().join(segment_name(0)))
                .unwrap()
                .len(),
            len,
            "{what}: nothing cut"
        );
        let mut model = model;
        write_pattern(&mut writer, &mut model, &[5000, 3]);
        check_around_damage(&writer, &model, &recovery.damaged);
        drop(writer);
        let (reader, again) = Spool::open_reader(dir.path()).unwrap();
        assert_eq!(again.damaged, recovery.damaged, "{what}");
        assert_eq!(again.torn_tail_bytes, 0);
        check_around_damage(&reader, &model, &again.damaged);
    }
}

#[test]
fn damage_with_nothing_valid_after_it_is_a_torn_tail() {
    let sizes = [100, 200, 300, 400];
    // The last chunk damaged, and garbage (no chunk) after a damaged chunk.
    let (dir, model, chunks) = one_segment(&sizes);
    let (at, cursor, _) = chunks[3];
    edit_segment(dir.path(), |b| b[at + format::CHUNK_HEADER_BYTES] ^= 1);
    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert!(recovery.damaged.is_empty(), "{recovery:?}");
    assert_eq!(recovery.torn_tail_bytes, format::chunk_bytes(400) as u64);
    assert_eq!(reader.total_bytes(), cursor);
    drop(reader);
    let (_, recovery) = Spool::open_writer(dir.path(), [12; 16], SpoolOptions::default()).unwrap();
    assert!(recovery.torn_tail_cut && recovery.damaged.is_empty());

    let (dir, _, chunks) = one_segment(&sizes);
    let (at, _, _) = chunks[1];
    edit_segment(dir.path(), |b| {
        for (i, x) in b[at..].iter_mut().enumerate() {
            *x = (i * 7 + 1) as u8;
        }
    });
    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert!(recovery.damaged.is_empty(), "{recovery:?}");
    assert_eq!(reader.total_bytes(), 100);
    let _ = model;
}

#[test]
fn a_valid_chunk_that_does_not_continue_the_cursors_is_no_resync_point() {
    // Bytes of a whole, valid chunk after damage, but naming a cursor the damaged bytes could not
    // have reached (or one already passed): not a continuation, so the rest is a torn tail.
    for wrong in [1_000_000u64, 50] {
        let (dir, _, chunks) = one_segment(&[100, 200, 300]);
        let (at, _, _) = chunks[1];
        edit_segment(dir.path(), |b| {
            b.truncate(at);
            b.extend_from_slice(&[0xAA; 64]);
            format::encode_chunk(Stream::Stdout, wrong, b"not a continuation", b);
        });
        let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
        assert!(recovery.damaged.is_empty(), "cursor {wrong}: {recovery:?}");
        assert_eq!(reader.total_bytes(), 100);
        assert!(recovery.torn_tail_bytes > 0);
    }
}

#[test]
fn several_damaged_ranges_are_each_reported() {
    let sizes: Vec<usize> = (1..=12).map(|i| i * 97).collect();
    let (dir, model, chunks) = one_segment(&sizes);
    edit_segment(dir.path(), |b| {
        for k in [2, 3, 7, 10] {
            b[chunks[k].0 + format::CHUNK_HEADER_BYTES + 1] ^= 0x10;
        }
    });
    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    let ranges: Vec<(u64, u64)> = recovery
        .damaged
        .iter()
        .map(|d| (d.first_cursor, d.end_cursor))
        .collect();
    assert_eq!(
        ranges,
        vec![
            (chunks[2].1, chunks[4].1),
            (chunks[7].1, chunks[8].1),
            (chunks[10].1, chunks[11].1)
        ]
    );
    check_around_damage(&reader, &model, &recovery.damaged);
}

#[test]
fn the_damage_seed_of_the_fuzz_target_has_damage() {
    // fuzz/corpus/spool_recovery/seed-8 builds valid chunks, garbage, then chunks continuing the
    // cursors: the fuzz target's mid-segment damage path is in its committed corpus.
    let seed = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/spool_recovery/seed-8"),
    )
    .unwrap();
    crate::fuzzing::spool_recovery(&seed);
    let mut bytes = format::SpoolHeader {
        spool_id: [7; 16],
        first_cursor: 0,
        segment_index: 0,
        created_unix_ms: 0,
    }
    .encode()
    .to_vec();
    let rest = &seed[1..];
    let (framed, garbage) = rest.split_at(rest.len() / 2);
    let mut cursor = 0;
    for part in framed.chunks(37) {
        format::encode_chunk(Stream::Stdout, cursor, part, &mut bytes);
        cursor += part.len() as u64;
    }
    bytes.extend_from_slice(garbage);
    bytes.resize(bytes.len().next_multiple_of(8), 0xEE);
    let scan = scan_segment(&bytes[64..], 64, 0, |_, _, _| {});
    assert!(
        scan.damaged.is_empty(),
        "nothing valid after the garbage yet"
    );
    cursor += 66;
    format::encode_chunk(Stream::Stdout, cursor, &framed[..53], &mut bytes);
    let scan = scan_segment(&bytes[64..], 64, 0, |_, _, _| {});
    assert_eq!(scan.damaged.len(), 1, "{scan:?}");
    assert_eq!(scan.end_cursor, cursor + 53);
}

/// Damage inside a sealed segment (found when its index is first built, not at open) costs only
/// the cursors it held: the chunks before and after it, in that segment and the later ones, stay
/// readable, as recovery keeps them in the active segment.
#[test]
fn damage_in_a_sealed_segment_costs_only_its_own_cursors() {
    let sizes = [100, 200, 300, 400, 500, 600];
    type Edit = fn(&mut Vec<u8>, usize);
    let edits: [(&str, Edit); 4] = [
        ("cursor field", |b, at| b[at + 16] ^= 1),
        ("length field", |b, at| b[at + 8] = 0xff),
        ("header checksum", |b, at| b[at] ^= 0x80),
        ("zeroed chunk", |b, at| {
            b[at..at + format::chunk_bytes(300)].fill(0)
        }),
    ];
    for (what, edit) in edits {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions {
            segment_bytes: 4096,
            retention_bytes: 1 << 20,
        };
        let (mut spool, _) = Spool::open_writer(dir.path(), [5; 16], options).unwrap();
        let mut model = Model::default();
        let mut chunks = Vec::new();
        let mut offset = format::SPOOL_HEADER_BYTES;
        for &n in &sizes {
            chunks.push((offset, model.bytes.len() as u64));
            offset += format::chunk_bytes(n);
            write_pattern(&mut spool, &mut model, &[n]);
        }
        // Later appends go to later segments: the first one is sealed.
        write_pattern(&mut spool, &mut model, &[700; 8]);
        drop(spool);
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(files >= 3, "the first segment is sealed: {files} files");
        let (at, cursor) = chunks[2];
        edit_segment(dir.path(), |b| edit(b, at));
        let (reader, _) = Spool::open_reader(dir.path()).unwrap();
        let damaged = [SpoolDamage {
            segment: segment_name(0),
            start_offset: at as u64,
            end_offset: chunks[3].0 as u64,
            first_cursor: cursor,
            end_cursor: chunks[3].1,
            reason: String::new(),
        }];
        check_around_damage(&reader, &model, &damaged);
        let short = reader.read(0, 100_000).unwrap();
        assert_eq!(short.bytes, model.bytes[..cursor as usize], "{what}");
        assert_eq!(
            reader.resume_after(cursor).unwrap(),
            Some(chunks[3].1),
            "{what}: reads resume at the first chunk after the damage"
        );
    }
}
