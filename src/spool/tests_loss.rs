//! Lost and damaged output: failures injected at every write and sync (the property), the
//! damage cases a reader must name, and the reader's view from a journal's record.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::format::{self, Stream};
use super::io::FaultIo;
use super::*;

const ENOSPC: i32 = nix::errno::Errno::ENOSPC as i32;
const EIO: i32 = nix::errno::Errno::EIO as i32;

/// The byte written at `cursor`: depends on the cursor, so a byte returned at the wrong cursor
/// (a splice) never matches.
fn byte_at(cursor: u64) -> u8 {
    (cursor.wrapping_mul(31) ^ (cursor >> 7)) as u8
}

fn bytes_from(cursor: u64, n: usize) -> Vec<u8> {
    (cursor..cursor + n as u64).map(byte_at).collect()
}

fn small(segment_bytes: u64) -> SpoolOptions {
    SpoolOptions {
        segment_bytes,
        retention_bytes: 1 << 30,
    }
}

/// Every cursor of the spool, read from 0 in pieces of `max`: bytes (checked against
/// [`byte_at`]) or holes. Returns the holes, merged where they touch and have the same kind
/// and reason. Asserts that reads partition the cursors: every cursor once, in order.
fn walk(spool: &Spool, max: usize) -> Vec<Skipped> {
    let mut holes: Vec<Skipped> = Vec::new();
    let mut cursor = 0;
    while cursor < spool.total_bytes() {
        let read = spool.read(cursor, max).unwrap();
        let mut at = cursor;
        if let Some(s) = &read.skipped {
            assert_eq!(s.from, cursor, "a hole starts where the read was asked");
            assert!(s.to > s.from);
            assert_eq!(read.gap, s.kind == SkipKind::Gap);
            match holes.last_mut() {
                Some(h) if h.to == s.from && h.kind == s.kind && h.reason == s.reason => {
                    h.to = s.to;
                }
                _ => holes.push(s.clone()),
            }
            at = s.to;
        }
        assert_eq!(
            read.bytes,
            bytes_from(at, read.bytes.len()),
            "bytes at {at}"
        );
        assert_eq!(read.next_cursor, at + read.bytes.len() as u64);
        assert!(read.next_cursor > cursor, "no progress at {cursor}");
        cursor = read.next_cursor;
    }
    assert_eq!(cursor, spool.total_bytes());
    holes
}

#[derive(Debug, Clone)]
enum Step {
    Append(Stream, usize),
    Checkpoint,
    /// The disk fails every call from now until `Heal`.
    Break(i32),
    Heal,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (any::<bool>(), 1usize..9000).prop_map(|(err, n)| Step::Append(
            if err { Stream::Stderr } else { Stream::Stdout },
            n
        )),
        2 => Just(Step::Checkpoint),
        1 => prop_oneof![Just(ENOSPC), Just(EIO)].prop_map(Step::Break),
        1 => Just(Step::Heal),
    ]
}

/// Runs `steps` against a spool whose file system fails the calls in `faults` (call number,
/// errno), and checks the promise: every byte appended is readable at its cursor or inside a
/// reported gap, never both, never neither; cursors never repeat; and a reader of the files,
/// given the gaps the writer reported (as the journal records them), sees exactly the same.
fn run(steps: &[Step], faults: &[(u64, i32)]) {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultIo::new());
    for &(at, errno) in faults {
        io.fail_at(at, errno);
    }
    let seam: Arc<dyn super::io::SpoolIo> = io.clone();
    let (mut spool, _) =
        Spool::open_writer_with(&dir.path().join("s"), [9; 16], small(16 * 1024), seam).unwrap();
    spool.retry_interval = Duration::ZERO;
    let mut total = 0u64;
    for s in steps {
        match s {
            Step::Append(stream, n) => {
                let _ = spool.append(*stream, &bytes_from(total, *n));
                total += *n as u64;
                assert_eq!(spool.total_bytes(), total, "cursors count every byte");
            }
            Step::Checkpoint => {
                if let Ok((_, durable)) = spool.checkpoint() {
                    assert!(durable <= total);
                }
            }
            Step::Break(errno) => io.fail_from(io.calls(), *errno),
            Step::Heal => io.heal(),
        }
    }
    let _ = spool.flush();
    spool.finish();
    let gaps = spool.gaps().to_vec();
    let holes = walk(&spool, 3000);
    // The writer's own view: every hole is its gaps, with their reason (a walk joins gaps
    // that touch and share a reason).
    for h in &holes {
        assert_eq!(h.kind, SkipKind::Gap, "{h:?}");
        let inside: u64 = gaps
            .iter()
            .filter(|g| h.from <= g.from && g.to <= h.to && Some(g.reason) == h.loss)
            .map(Gap::len)
            .sum();
        assert_eq!(inside, h.len(), "{h:?} is not made of {gaps:?}");
    }
    let lost: u64 = gaps.iter().map(Gap::len).sum();
    let holes_len: u64 = holes.iter().map(Skipped::len).sum();
    assert_eq!(lost, holes_len, "{gaps:?} vs {holes:?}");
    for w in gaps.windows(2) {
        assert!(w[0].to <= w[1].from, "gaps overlap: {gaps:?}");
    }
    if !io.log().iter().any(|(_, failed)| *failed) {
        assert!(gaps.is_empty(), "a gap without a failure: {gaps:?}");
    }
    drop(spool);
    // A reader of the files, with the writer's record.
    let (mut reader, _) = Spool::open_reader(&dir.path().join("s")).unwrap();
    reader.hold_to_record(&gaps, total);
    assert_eq!(reader.total_bytes(), total);
    assert_eq!(
        walk(&reader, 2000),
        holes,
        "the reader sees what the writer saw"
    );
}

#[test]
fn a_full_disk_is_a_gap_and_writing_resumes_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultIo::new());
    let seam: Arc<dyn super::io::SpoolIo> = io.clone();
    let (mut spool, _) =
        Spool::open_writer_with(dir.path(), [1; 16], small(1 << 20), seam).unwrap();
    spool.retry_interval = Duration::ZERO;
    spool.append(Stream::Stdout, &bytes_from(0, 1000)).unwrap();
    spool.flush().unwrap();
    io.fail_from(io.calls(), ENOSPC);
    spool
        .append(Stream::Stdout, &bytes_from(1000, 500))
        .unwrap();
    let failed = spool.flush();
    assert!(matches!(failed, Err(SpoolError::Io { .. })), "{failed:?}");
    assert!(spool.is_failing());
    // Still full: counted, lost, and no error again (the gap already says it).
    spool
        .append(Stream::Stderr, &bytes_from(1500, 700))
        .unwrap();
    io.heal();
    spool
        .append(Stream::Stdout, &bytes_from(2200, 300))
        .unwrap();
    assert!(!spool.is_failing());
    assert_eq!(spool.total_bytes(), 2500);
    assert_eq!(
        spool.gaps(),
        &[Gap {
            from: 1000,
            to: 2200,
            reason: LossReason::DiskFull,
            errno: ENOSPC
        }]
    );
    let holes = walk(&spool, 10_000);
    assert_eq!(holes.len(), 1);
    assert_eq!(holes[0].reason, "disk full (ENOSPC)");
    assert_eq!(
        holes[0].notice(),
        "-- 1200 bytes lost at cursor 1000: disk full (ENOSPC) --"
    );
    // A checkpoint covers the gap only once it is closed, and reports it to be recorded.
    let (_, durable) = spool.checkpoint().unwrap();
    assert_eq!(durable, 2500);
    assert_eq!(spool.unrecorded_gaps(durable).len(), 1);
    spool.gaps_recorded(durable);
    assert!(spool.unrecorded_gaps(durable).is_empty());
}

#[test]
fn a_failed_sync_loses_everything_since_the_last_good_one_and_is_never_trusted_again() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultIo::new());
    let seam: Arc<dyn super::io::SpoolIo> = io.clone();
    let (mut spool, _) =
        Spool::open_writer_with(dir.path(), [2; 16], small(1 << 20), seam).unwrap();
    spool.retry_interval = Duration::ZERO;
    spool.append(Stream::Stdout, &bytes_from(0, 1000)).unwrap();
    assert_eq!(spool.checkpoint().unwrap().1, 1000);
    spool
        .append(Stream::Stdout, &bytes_from(1000, 1000))
        .unwrap();
    // The next sync call fails once; the bytes are still in the page cache and readable.
    let log = io.log().len() as u64;
    io.fail_at(io.calls() + 1, EIO);
    assert!(
        spool.checkpoint().is_err(),
        "{:?}",
        &io.log()[log as usize..]
    );
    // Not retried as if nothing happened: the bytes since the last good sync are a gap.
    assert_eq!(spool.gaps().len(), 1);
    let gap = spool.gaps()[0];
    assert_eq!(
        (gap.from, gap.to, gap.reason),
        (1000, 2000, LossReason::SyncFailed)
    );
    spool
        .append(Stream::Stdout, &bytes_from(2000, 100))
        .unwrap();
    let (_, durable) = spool.checkpoint().unwrap();
    assert_eq!(durable, 2100);
    // The bytes the failed sync covered are never returned, though the file still has them.
    let read = spool.read(1000, 50).unwrap();
    assert!(read.bytes.iter().all(|_| true) && read.skipped.is_some());
    assert_eq!(read.skipped.unwrap().to, 2000);
    assert_eq!(read.bytes, bytes_from(2000, 50));
    assert_eq!(walk(&spool, 500).len(), 1);
}

#[test]
fn a_spool_whose_directory_cannot_be_created_counts_its_output_as_lost_until_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultIo::new());
    io.fail_at(0, ENOSPC);
    let seam: Arc<dyn super::io::SpoolIo> = io.clone();
    let (mut spool, _) =
        Spool::open_writer_with(&dir.path().join("s"), [3; 16], small(1 << 20), seam).unwrap();
    spool.retry_interval = Duration::ZERO;
    assert!(spool.append(Stream::Stdout, &bytes_from(0, 10)).is_err());
    spool.append(Stream::Stdout, &bytes_from(10, 10)).unwrap();
    assert_eq!(spool.gaps()[0].from, 0);
    assert_eq!(spool.gaps()[0].to, 10);
    assert_eq!(walk(&spool, 100).len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_byte_is_readable_or_in_a_reported_gap_under_any_failure(
        steps in proptest::collection::vec(step(), 1..50),
        faults in proptest::collection::vec(
            (0u64..60, prop_oneof![Just(ENOSPC), Just(EIO)]), 0..4),
    ) {
        run(&steps, &faults);
    }
}

#[test]
fn every_single_failure_point_keeps_the_promise() {
    // Each call of one fixed workload failing in turn, with each errno.
    let steps: Vec<Step> = (0..30)
        .flat_map(|i| {
            let mut v = vec![Step::Append(Stream::Stdout, 1500 + i * 97)];
            if i % 4 == 3 {
                v.push(Step::Checkpoint);
            }
            v
        })
        .collect();
    for errno in [ENOSPC, EIO] {
        for at in 0..40 {
            run(&steps, &[(at, errno)]);
        }
    }
}

/// A spool of several sealed segments written whole: `(dir, total)`. Segments of 2200 bytes hold
/// four 500-byte chunks each.
fn sealed_spool() -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open_writer(dir.path(), [4; 16], small(2200)).unwrap();
    let mut total = 0;
    for _ in 0..16 {
        spool
            .append(Stream::Stdout, &bytes_from(total, 500))
            .unwrap();
        total += 500;
    }
    spool.checkpoint().unwrap();
    (dir, total)
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn damage_of(holes: &[Skipped]) -> Vec<(u64, u64, Option<DamageKind>)> {
    holes.iter().map(|h| (h.from, h.to, h.damage)).collect()
}

#[test]
fn a_missing_middle_segment_is_named_and_everything_around_it_is_read() {
    let (dir, total) = sealed_spool();
    let files = segment_files(dir.path());
    assert!(files.len() >= 4);
    std::fs::remove_file(&files[1]).unwrap();
    let (mut reader, _) = Spool::open_reader(dir.path()).unwrap();
    reader.hold_to_record(&[], total);
    let holes = walk(&reader, 700);
    assert_eq!(
        damage_of(&holes),
        vec![(2000, 4000, Some(DamageKind::MissingFile))]
    );
}

#[test]
fn a_short_earlier_segment_gives_its_intact_bytes_and_names_the_rest() {
    let (dir, total) = sealed_spool();
    let files = segment_files(dir.path());
    // Cut the first segment inside its third chunk: two chunks (1000 bytes) stay intact.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap();
    let keep = format::SPOOL_HEADER_BYTES + 2 * format::chunk_bytes(500) + 100;
    file.set_len(keep as u64).unwrap();
    let (mut reader, _) = Spool::open_reader(dir.path()).unwrap();
    reader.hold_to_record(&[], total);
    let holes = walk(&reader, 700);
    assert_eq!(
        damage_of(&holes),
        vec![(1000, 2000, Some(DamageKind::ShortFile))]
    );
    // The read that used to fail with "failed to fill whole buffer" returns the intact bytes.
    let read = reader.read(0, 4000).unwrap();
    assert_eq!(read.bytes, bytes_from(0, 1000));
}

#[test]
fn a_truncated_last_segment_is_named_against_the_recorded_total() {
    let (dir, total) = sealed_spool();
    let files = segment_files(dir.path());
    let last = files.last().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(last).unwrap();
    file.set_len(format::SPOOL_HEADER_BYTES as u64 + format::chunk_bytes(500) as u64)
        .unwrap();
    drop(file);
    let (mut reader, _) = Spool::open_reader(dir.path()).unwrap();
    // Alone, the files look like a shorter output; the journal's total says otherwise.
    assert!(reader.total_bytes() < total);
    reader.hold_to_record(&[], total);
    let holes = walk(&reader, 700);
    let first_of_last = total - 2000 + 500;
    assert_eq!(
        damage_of(&holes),
        vec![(first_of_last, total, Some(DamageKind::Truncated))]
    );
}

#[test]
fn a_flipped_byte_costs_only_its_chunk() {
    let (dir, total) = sealed_spool();
    let files = segment_files(dir.path());
    let mut bytes = std::fs::read(&files[2]).unwrap();
    let second_chunk = format::SPOOL_HEADER_BYTES + format::chunk_bytes(500);
    bytes[second_chunk + format::CHUNK_HEADER_BYTES + 7] ^= 0x10;
    std::fs::write(&files[2], bytes).unwrap();
    let (mut reader, _) = Spool::open_reader(dir.path()).unwrap();
    reader.hold_to_record(&[], total);
    let holes = walk(&reader, 700);
    assert_eq!(
        damage_of(&holes),
        vec![(4500, 5000, Some(DamageKind::BadChunk))]
    );
    assert!(holes[0].reason.contains("checksum"), "{}", holes[0].reason);
}

#[test]
fn a_recorded_gap_between_segments_is_a_gap_not_damage() {
    let (dir, total) = sealed_spool();
    let files = segment_files(dir.path());
    std::fs::remove_file(&files[1]).unwrap();
    let (mut reader, _) = Spool::open_reader(dir.path()).unwrap();
    let gap = Gap {
        from: 2000,
        to: 4000,
        reason: LossReason::DiskFull,
        errno: ENOSPC,
    };
    reader.hold_to_record(&[gap], total);
    let holes = walk(&reader, 700);
    assert_eq!(holes.len(), 1);
    assert_eq!(
        (holes[0].from, holes[0].to, holes[0].kind, holes[0].loss),
        (2000, 4000, SkipKind::Gap, Some(LossReason::DiskFull))
    );
}
