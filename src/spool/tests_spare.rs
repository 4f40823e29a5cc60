//! Spares (`spare.rs`): a supervised spool writes its new segments into the files retention
//! dropped, and nothing a reader, a crash or a finished spool sees tells the difference, except
//! the files' identities.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use proptest::prelude::*;

use super::format::Stream;
use super::spare::SPARES_MAX;
use super::tests::{Model, check_read, deferring_spool, segment_names, write_pattern};
use super::*;

/// The inode of every segment file in `dir`, by name.
fn inodes(dir: &Path) -> Vec<(String, u64)> {
    segment_names(dir)
        .into_iter()
        .map(|n| {
            let ino = std::fs::metadata(dir.join(&n)).unwrap().ino();
            (n, ino)
        })
        .collect()
}

fn spare_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".seg.tmp"))
        .collect()
}

/// Appends `rounds` times, running a removal-only plan (as a supervisor whose window turns over
/// faster than it checkpoints) or a full sync plan after each. Returns in how many rounds the
/// active segment was a recycled file.
fn turn_over(spool: &mut Spool, model: &mut Model, rounds: usize, dir: &Path) -> usize {
    let mut recycled = 0;
    for round in 0..rounds {
        // Sizes that vary, so that segments end at different offsets and a recycled file is
        // now longer, now shorter than the segment written into it.
        write_pattern(spool, model, &[900 + (round * 389) % 1400, 700]);
        let plan = if round % 3 == 0 {
            spool.plan_sync().unwrap()
        } else {
            spool.plan_removals()
        };
        spool.finish_sync(plan.run()).unwrap();
        recycled += usize::from(spool.stale_to > 0);
        assert!(spool.spares.len() <= SPARES_MAX, "{:?}", spool.spares);
        // A sealed segment's file ends at its chunks, recycled or not.
        for sealed in spool.segments.iter().rev().skip(1) {
            let len = std::fs::metadata(&sealed.path).unwrap().len();
            assert_eq!(len, sealed.valid_len, "{}", sealed.path.display());
        }
        assert!(
            spare_files(dir).len() <= SPARES_MAX,
            "{:?}",
            spare_files(dir)
        );
    }
    recycled
}

/// Through many turns of the window the spool's new segments are written into the files it
/// dropped (at most `SPARES_MAX` of them kept aside), every read agrees with the model, and once
/// the spool finishes no spare is left and its newest file ends at its last chunk: a read-only
/// open finds nothing torn.
#[test]
fn a_turning_window_writes_its_new_segments_into_the_files_it_dropped() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    let recycled = turn_over(&mut spool, &mut model, 60, dir.path());
    let segments_made = spool.segments.back().unwrap().header.segment_index + 1;
    assert!(segments_made > 30, "{segments_made}");
    assert!(
        recycled > 40,
        "the newest segment was a recycled file in {recycled} of 60 rounds"
    );
    check_read(&spool, &model, spool.retained_from(), 1 << 20);
    check_read(&spool, &model, 0, 1 << 20);

    spool.finish();
    let plan = spool.plan_sync().unwrap();
    spool.finish_sync(plan.run()).unwrap();
    assert!(
        spare_files(dir.path()).is_empty(),
        "{:?}",
        spare_files(dir.path())
    );
    let newest = dir.path().join(segment_names(dir.path()).last().unwrap());
    let active = spool.segments.back().unwrap();
    assert_eq!(std::fs::metadata(&newest).unwrap().len(), active.valid_len);
    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    check_read(&reader, &model, reader.retained_from(), 1 << 20);
    drop(spool);
    assert!(spare_files(dir.path()).is_empty());
}

/// A writer killed while its newest segment is a recycled file leaves that file's old chunks
/// after its own: they are older cursors, so every open reads them as a torn tail (never as
/// damage or output), and a writable open cuts them.
#[test]
fn a_recycled_segment_left_by_a_crash_ends_at_its_own_chunks() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    turn_over(&mut spool, &mut model, 20, dir.path());
    // Into a recycled file, not to its end.
    for _ in 0..20 {
        let active = spool.segments.back().unwrap();
        if spool.stale_to > active.valid_len {
            break;
        }
        write_pattern(&mut spool, &mut model, &[300]);
        let plan = spool.plan_removals();
        spool.finish_sync(plan.run()).unwrap();
    }
    let active = spool.segments.back().unwrap();
    assert!(
        spool.stale_to > active.valid_len,
        "the newest file is not a recycled one"
    );
    let (valid, stale) = (active.valid_len, spool.stale_to);
    spool.flush().unwrap();
    // A crash: no drop, no cleanup.
    std::mem::forget(spool);

    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert_eq!(recovery.old_tail_bytes, stale - valid, "{recovery:?}");
    assert!(
        recovery.is_clean(),
        "old output is neither torn nor damaged: {recovery:?}"
    );
    check_read(&reader, &model, reader.retained_from(), 1 << 20);
    let (writer, recovery) = Spool::open_writer(dir.path(), [1; 16], reader.options).unwrap();
    assert!(recovery.torn_tail_cut, "{recovery:?}");
    let newest = dir.path().join(segment_names(dir.path()).last().unwrap());
    assert_eq!(std::fs::metadata(newest).unwrap().len(), valid);
    check_read(&writer, &model, writer.retained_from(), 1 << 20);
    assert!(
        spare_files(dir.path()).is_empty(),
        "a writable open removes spares"
    );
}

/// A power loss can keep a spare's rename to a new segment's name and lose the header written
/// over its old one: the newest file then names a cursor its header does not. Nothing in it
/// was ever synced (the header goes first and every sync covers it), so recovery takes it for
/// an unfinished segment, as a newest file shorter than a header: not a bad file, and a
/// writable open removes it.
#[test]
fn a_newest_file_with_an_older_header_of_its_spool_is_an_unfinished_rewrite() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1500, 1500, 1500]);
    spool.checkpoint().unwrap();
    let total = spool.total_bytes();
    drop(spool);
    let oldest = dir.path().join(segment_names(dir.path())[0].clone());
    let rewritten = dir.path().join(segment_name(total + 5000));
    std::fs::copy(&oldest, &rewritten).unwrap();
    let len = std::fs::metadata(&rewritten).unwrap().len();

    let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert!(recovery.bad_segments.is_empty(), "{recovery:?}");
    assert_eq!(recovery.torn_tail_bytes, len);
    assert_eq!(reader.total_bytes(), total);
    check_read(&reader, &model, reader.retained_from(), 1 << 20);
    let (_, recovery) = Spool::open_writer(dir.path(), [1; 16], reader.options).unwrap();
    assert!(recovery.torn_tail_cut && recovery.bad_segments.is_empty());
    assert!(!rewritten.exists(), "a writable open removes it");
    // Another spool's file in the same place is not this spool's rewrite: it stays bad.
    let mut foreign = std::fs::read(&oldest).unwrap();
    let mut header = format::SpoolHeader::decode(&foreign[..format::SPOOL_HEADER_BYTES]).unwrap();
    header.spool_id[0] ^= 1;
    foreign[..format::SPOOL_HEADER_BYTES].copy_from_slice(&header.encode());
    std::fs::write(&rewritten, &foreign).unwrap();
    let (_, recovery) = Spool::open_reader(dir.path()).unwrap();
    assert_eq!(recovery.bad_segments.len(), 1, "{recovery:?}");
}

/// A reader in another process holds the segment it opened last; the writer may since have
/// dropped it and written a newer segment into its file. The reader then finds the segment
/// gone, as it would a deleted one: retention moved past it while it read (a gap with that
/// reason, and the read goes on after it), never damage. Once a terminal record fixed the
/// window, nothing moves it: a segment gone then is an error, not retention.
#[test]
fn a_reader_whose_segment_was_recycled_finds_it_gone_not_damaged() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1500, 700]);
    spool.flush().unwrap();
    let (mut reader, _) = Spool::open_reader(dir.path()).unwrap();
    let newest = reader.segments.back().unwrap();
    let held = newest.header.first_cursor;
    let ino = newest.file.as_ref().unwrap().metadata().unwrap().ino();
    let rewritten = |dir: &Path| {
        inodes(dir)
            .into_iter()
            .any(|(name, i)| i == ino && name != segment_name(held))
    };
    for _ in 0..50 {
        if rewritten(dir.path()) {
            break;
        }
        turn_over(&mut spool, &mut model, 1, dir.path());
    }
    assert!(
        rewritten(dir.path()),
        "the reader's file never held a newer segment"
    );

    let read = reader.read(held, 1 << 20).unwrap();
    let skipped = read.skipped.clone().unwrap();
    assert!(read.gap && read.bytes.is_empty(), "{read:?}");
    assert_eq!(skipped.kind, SkipKind::Gap);
    assert_eq!((skipped.from, skipped.to), (held, reader.total_bytes()));
    assert_eq!(skipped.loss, Some(LossReason::Retention));

    reader.hold_retained_from(reader.retained_from());
    match reader.read(held, 1 << 20) {
        Err(SpoolError::Io { cause, .. }) => {
            assert_eq!(cause.kind(), std::io::ErrorKind::NotFound, "{cause}");
        }
        other => panic!("a segment gone after the terminal record read as {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Any appends, with removal-only and full plans in any order, and the spool finished or
    /// killed at the end: every read agrees with the model before and after a reopen, the
    /// reopen finds no damage and no bad file, and a finished spool leaves nothing torn.
    #[test]
    fn recycling_never_changes_what_is_read(
        steps in proptest::collection::vec((1usize..5000, 0u8..3), 1..50),
        segment_bytes in 300u64..6000,
        retention_bytes in 1u64..20_000,
        finished in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = SpoolOptions { segment_bytes, retention_bytes };
        let (mut spool, _) = Spool::open_writer(dir.path(), [9; 16], options).unwrap();
        spool.defer_removals();
        let mut model = Model::default();
        for (i, &(n, plan)) in steps.iter().enumerate() {
            let stream = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
            let bytes: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            spool.append(stream, &bytes).unwrap();
            model.append(stream, &bytes);
            match plan {
                0 => {}
                1 => { let p = spool.plan_removals(); spool.finish_sync(p.run()).unwrap(); }
                _ => { let p = spool.plan_sync().unwrap(); spool.finish_sync(p.run()).unwrap(); }
            }
            prop_assert!(spare_files(dir.path()).len() <= SPARES_MAX);
        }
        check_read(&spool, &model, spool.retained_from(), usize::MAX / 2);
        if finished {
            spool.finish();
            let p = spool.plan_sync().unwrap();
            spool.finish_sync(p.run()).unwrap();
            drop(spool);
        } else {
            spool.flush().unwrap();
            std::mem::forget(spool);
        }
        let (reader, recovery) = Spool::open_reader(dir.path()).unwrap();
        prop_assert!(recovery.damaged.is_empty() && recovery.bad_segments.is_empty(), "{:?}", recovery);
        if finished {
            prop_assert!(recovery.is_clean(), "{:?}", recovery);
            prop_assert!(spare_files(dir.path()).is_empty());
        }
        check_read(&reader, &model, reader.retained_from(), usize::MAX / 2);
        let (writer, recovery) = Spool::open_writer(dir.path(), [9; 16], options).unwrap();
        prop_assert!(recovery.damaged.is_empty() && recovery.bad_segments.is_empty(), "{:?}", recovery);
        check_read(&writer, &model, writer.retained_from(), usize::MAX / 2);
        prop_assert!(spare_files(dir.path()).is_empty());
    }
}

/// A spare is written into only once a directory sync after its rename succeeded: while the
/// directory syncs of removal-only plans fail, the files they renamed are removed by the next
/// plan instead of reused, and every new segment is a created file.
#[test]
fn a_spare_no_directory_sync_made_durable_is_removed_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let options = SpoolOptions {
        segment_bytes: 4096,
        retention_bytes: 8192,
    };
    let seam = std::sync::Arc::new(io::FaultIo::new());
    let (mut spool, _) =
        Spool::open_writer_with(dir.path(), [1; 16], options, seam.clone()).unwrap();
    spool.defer_removals();
    let mut model = Model::default();
    write_pattern(&mut spool, &mut model, &[1500; 8]);
    seam.fail_every(io::Op::SyncDir, libc::EIO);
    for _ in 0..10 {
        write_pattern(&mut spool, &mut model, &[1500, 700]);
        let plan = spool.plan_removals();
        spool.finish_sync(plan.run()).unwrap();
        assert!(spool.spares.is_empty(), "{:?}", spool.spares);
        assert_eq!(spool.stale_to, 0, "the newest segment is a recycled file");
        assert!(spare_files(dir.path()).len() <= SPARES_MAX);
    }
    let log = seam.log();
    let failed_syncs = log
        .iter()
        .filter(|&&(op, failed)| op == io::Op::SyncDir && failed);
    assert!(failed_syncs.count() >= 5, "{log:?}");
    check_read(&spool, &model, spool.retained_from(), 1 << 20);

    seam.heal();
    let recycled = turn_over(&mut spool, &mut model, 6, dir.path());
    assert!(recycled > 0, "healed, spares are made and used again");
}

/// Once the window stops turning over, the spares go: a call with no segment started since the
/// last gives them up, and the next plan removes their files; reads are as before.
#[test]
fn a_window_that_stopped_turning_gives_up_its_spares() {
    let (dir, mut spool) = deferring_spool();
    let mut model = Model::default();
    for _ in 0..20 {
        if !spool.spares.is_empty() {
            break;
        }
        turn_over(&mut spool, &mut model, 1, dir.path());
    }
    assert!(!spool.spares.is_empty(), "no spare was made");
    assert!(
        !spool.retire_idle_spares(),
        "segments were started since the spool opened"
    );
    assert!(!spool.spares.is_empty());
    // Output that stays in the newest segment: the window does not turn.
    write_pattern(&mut spool, &mut model, &[10]);
    assert!(spool.retire_idle_spares());
    assert!(spool.spares.is_empty());
    let plan = spool.plan_removals();
    spool.finish_sync(plan.run()).unwrap();
    assert!(
        spare_files(dir.path()).is_empty(),
        "{:?}",
        spare_files(dir.path())
    );
    check_read(&spool, &model, spool.retained_from(), 1 << 20);
    assert!(!spool.retire_idle_spares(), "nothing left to give up");
}
