//! The `journal_open` target's checks: the journal a [`super::journal_plan`] describes, scanned
//! read-only and followed, opened writable (recovery), appended to and reopened, each step held to
//! what the steps before it found. Nothing here writes to the journal but the journal itself: the
//! files the plan wrote are the ground truth every later scan is compared with.

use std::collections::HashSet;
use std::path::Path;

use super::{FUZZ_SEGMENT_BYTES, TempRoot, journal_plan};
use crate::codec;
use crate::journal::format::SegmentHeader;
use crate::journal::reader::{Follower, JournalReader, Record};
use crate::journal::recovery::{self, CommitPoint, RecoveryReport};
use crate::journal::{
    Appended, Durability, EventId, EventKind, Journal, JournalError, JournalOptions, ResumedAt,
    Tenure,
};
use crate::limits::{SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX, SEQ_MAX};

/// The payload of the events the checks append.
const APPENDED_PAYLOAD: &[u8] = b"appended by the fuzz target";

/// Invariants of any report and the records it came with.
fn check_scan(records: &[Record], report: &RecoveryReport) {
    assert_eq!(report.records, records.len() as u64);
    for pair in records.windows(2) {
        assert!(
            pair[0].position.seq < pair[1].position.seq,
            "seqs do not increase"
        );
        let a = (pair[0].position.segment_index, pair[0].position.offset);
        let b = (pair[1].position.segment_index, pair[1].position.offset);
        assert!(a < b, "positions do not increase");
    }
    if let Some(last) = records.last() {
        assert_eq!(report.last_seq, Some(last.position.seq));
    }
    for r in records {
        assert_ne!(r.kind, 0);
        assert!(r.position.offset >= SEGMENT_HEADER_BYTES as u64);
    }
    for t in &report.torn_tails {
        assert!(t.start_offset < t.end_offset, "empty torn tail {t:?}");
        // Nothing valid after a torn tail.
        assert!(
            records
                .iter()
                .all(|r| (r.position.segment_index, r.position.offset)
                    < (t.segment_index, t.start_offset)),
            "a record lies after a torn tail"
        );
    }
    for d in &report.damaged {
        assert!(d.start_offset < d.end_offset, "empty damaged range {d:?}");
    }
}

/// Writes the journal described by `data` to a temporary root, scans it read-only, opens it
/// writable (recovery) and appends one event, checking that recovery loses no valid record, leaves
/// no torn tail, and that the appended event is read back last.
pub fn journal_open(data: &[u8]) {
    let plan = journal_plan(data);
    let Some(root) = TempRoot::new() else { return };
    let dir = root.path().join("journal");
    for (name, bytes) in &plan.files {
        if std::fs::write(dir.join(name), bytes).is_err() {
            return;
        }
    }
    check_journal(root.path(), plan.durability, plan.tenure, &plan.files);
    check_covered_open(root.path(), plan.durability, plan.covered_share);
}

/// (e) After the checks above, a brief writer's open resuming at `share` 255ths of the last seq,
/// which leaves the records up to it out of its index: it must not panic; where a reader finds
/// nothing wrong, it hands out exactly the records the reader finds above that seq, knows each of
/// their IDs, and reports nothing; it appends after the last record.
fn check_covered_open(root: &Path, durability: Durability, share: u8) {
    let Some((records, report)) = read_all(root) else {
        return;
    };
    let last = report.last_seq.unwrap_or(0);
    let after_seq = last.saturating_mul(u64::from(share)) / 255;
    let options = JournalOptions {
        durability,
        segment_bytes: FUZZ_SEGMENT_BYTES,
    };
    let mut visitor = ResumedAt {
        after_seq,
        ids: Vec::new(),
        seen: Vec::new(),
    };
    let (journal, open_report) =
        match Journal::open_resuming(root, options, Tenure::Brief, &mut visitor) {
            Ok(ok) => ok,
            Err(JournalError::Full { .. } | JournalError::TooManyRecords { .. }) => return,
            Err(e) => panic!("a covered open failed where the opens before it succeeded: {e}"),
        };
    if report.is_clean() {
        let above: Vec<u64> = records
            .iter()
            .map(|r| r.position.seq)
            .filter(|&seq| seq > after_seq)
            .collect();
        assert_eq!(
            visitor.seen, above,
            "a covered open handed out other records"
        );
        for r in records.iter().filter(|r| r.position.seq > after_seq) {
            assert!(
                journal.position_of(r.event_id).is_some(),
                "a record handed out is not indexed: {r:?}"
            );
        }
        // A writable open also looks for duplicate IDs, among the records it indexes.
        let mut found = open_report.clone();
        found.duplicate_ids.clear();
        assert!(found.is_clean(), "{open_report:?}");
        assert_eq!(open_report.last_seq, report.last_seq);
    }
    let held: HashSet<[u8; 16]> = records.iter().map(|r| r.event_id.as_bytes()).collect();
    let mut id = [0x5au8; 16];
    while held.contains(&id) {
        id[0] = id[0].wrapping_add(1);
    }
    let Some(kind) = EventKind::new(0x7777) else {
        return;
    };
    match journal.append(
        EventId::from_bytes(id),
        kind,
        codec::CODEC_VERSION,
        APPENDED_PAYLOAD,
    ) {
        Ok(a) => assert!(a.position.seq > last, "a covered open appended at {a:?}"),
        Err(JournalError::Full { .. }) => {}
        Err(e) => panic!("append after a covered open failed: {e}"),
    }
}

fn read_all(root: &Path) -> Option<(Vec<Record>, RecoveryReport)> {
    JournalReader::open(root).ok()?.records(0).ok()
}

fn check_journal(root: &Path, durability: Durability, tenure: Tenure, files: &[(String, Vec<u8>)]) {
    // (a) Read-only scan: must not panic; remember what it found.
    let Some(mut scanned) = Scanned::check(root, files) else {
        return;
    };

    // (b) Writable open: recovery. May fail, must not panic.
    let options = JournalOptions {
        durability,
        segment_bytes: FUZZ_SEGMENT_BYTES,
    };
    let Some((journal, recovered)) = scanned.check_recovery(&options, tenure) else {
        return;
    };

    // (c) Append one event with an ID the journal does not hold, then read it back last.
    let mut id = [0xa5u8; 16];
    while recovered.ids.contains(&id) {
        id[0] = id[0].wrapping_add(1);
    }
    let Some(kind) = EventKind::new(0x7777) else {
        return;
    };
    let Some(appended) = scanned.check_append(journal, &recovered, id, kind) else {
        return;
    };

    // (d) Open again after the clean close: the residue is gone, every damage the first open
    // found is still reported, and the next seq is above the one appended.
    let (journal, reopen_report) = match Journal::open(root, options) {
        Ok(ok) => ok,
        Err(JournalError::Full { .. }) => return,
        Err(e) => panic!("second writable open failed: {e}"),
    };
    check_reopen_report(&scanned, &recovered, &reopen_report);
    id[1] = id[1].wrapping_add(1);
    while recovered.ids.contains(&id) {
        id[0] = id[0].wrapping_add(1);
    }
    match journal.append(
        EventId::from_bytes(id),
        kind,
        codec::CODEC_VERSION,
        APPENDED_PAYLOAD,
    ) {
        Ok(again) => assert!(
            again.position.seq > appended.position.seq,
            "a seq used again after a reopen: {} then {}",
            appended.position.seq,
            again.position.seq
        ),
        Err(JournalError::Full { .. }) => {}
        Err(e) => panic!("append after the second open failed: {e}"),
    }
}

/// What the read-only scan found before any writable open, and the follower it started.
struct Scanned<'a> {
    root: &'a Path,
    files: &'a [(String, Vec<u8>)],
    before: Vec<Record>,
    report_before: RecoveryReport,
    /// What the commit areas claimed, read before any open writes.
    commits: Vec<SegmentCommit>,
    follower: Follower,
    /// Kept open beside the writer until the checks end, as a reader of a live journal is.
    _reader: JournalReader,
}

/// What the writable open recovered.
struct Recovered {
    report: RecoveryReport,
    /// The event IDs of the records before the open.
    ids: HashSet<[u8; 16]>,
    /// Segments whose commit area is damaged.
    damaged_areas: Vec<u64>,
    /// Segments whose end is damage.
    damaged_ends: Vec<u64>,
}

impl Recovered {
    /// Whether recovery may leave the claim of segment `index` unconfirmed: a segment whose
    /// commit area is damaged is never sealed (what its readable slot says is reported again,
    /// beside the damaged area), nor one whose end is damage (a seal would hide the damage from
    /// the fast path).
    fn may_stay_unconfirmed(&self, index: u64) -> bool {
        self.damaged_areas.contains(&index) || self.damaged_ends.contains(&index)
    }
}

impl<'a> Scanned<'a> {
    fn check(root: &'a Path, files: &'a [(String, Vec<u8>)]) -> Option<Scanned<'a>> {
        let (before, report_before) = read_all(root)?;
        check_scan(&before, &report_before);
        assert!(report_before.torn_tails.iter().all(|t| !t.zeroed));
        assert!(report_before.duplicate_ids.is_empty());
        let commits = read_commit_areas(&root.join("journal"), &report_before);
        check_commit_findings(&before, &report_before, &commits);

        // A follower hands out the same records as the scan, then nothing while nobody writes.
        let reader = JournalReader::open(root).ok()?;
        let mut followed = Vec::new();
        let (mut follower, follow_report) = match reader.follow(0, |r| followed.push(r.to_owned()))
        {
            Ok(ok) => ok,
            Err(e) => panic!("follow failed where a scan succeeded: {e}"),
        };
        assert_eq!(followed, before, "follow and scan disagree");
        assert_eq!(follow_report, report_before, "follow and scan disagree");
        let polled = poll_all(&mut follower);
        assert!(
            polled.is_empty(),
            "a follower of an idle journal handed out records the scan did not accept: {polled:?}"
        );
        Some(Scanned {
            root,
            files,
            before,
            report_before,
            commits,
            follower,
            _reader: reader,
        })
    }

    fn check_recovery(
        &self,
        options: &JournalOptions,
        tenure: Tenure,
    ) -> Option<(Journal, Recovered)> {
        let mut opened = Vec::new();
        let mut visit = |r: crate::journal::reader::RecordView<'_>| opened.push(r.to_owned());
        let backend = crate::journal::default_backend();
        let Ok((journal, open_report)) =
            Journal::open_with_backend(self.root, options.clone(), tenure, backend, &mut visit)
        else {
            return None;
        };
        // Nothing found is taken as durable before a flush covers it: a lasting open flushed
        // it all, a brief one only what the commit area confirms.
        assert!(journal.durable_seq() <= journal.last_seq());
        // The writable open hands out exactly the records the read-only scan did.
        assert_eq!(
            opened, self.before,
            "writable open and read-only scan disagree"
        );
        let ids = self.check_open_report(&open_report);
        let recovered = self.check_recovered(open_report, ids);
        Some((journal, recovered))
    }

    /// Recovery reports what the read-only scan found, plus duplicate IDs, and zeroes the tails;
    /// returns the event IDs the journal holds.
    fn check_open_report(&self, open_report: &RecoveryReport) -> HashSet<[u8; 16]> {
        assert!(open_report.torn_tails.iter().all(|t| t.zeroed));
        let mut comparable = open_report.clone();
        comparable.duplicate_ids.clear();
        for t in &mut comparable.torn_tails {
            t.zeroed = false;
        }
        assert_eq!(
            comparable, self.report_before,
            "writable open saw another journal"
        );
        let ids: HashSet<[u8; 16]> = self.before.iter().map(|r| r.event_id.as_bytes()).collect();
        assert_eq!(
            open_report.duplicate_ids.len(),
            self.before.len() - ids.len(),
            "duplicate IDs miscounted"
        );
        ids
    }

    /// After recovery: the same records, no torn tail, nothing else changed but repairs.
    fn check_recovered(&self, open_report: RecoveryReport, ids: HashSet<[u8; 16]>) -> Recovered {
        let Some((after_open, report_open)) = read_all(self.root) else {
            panic!("read-only scan failed after a successful writable open");
        };
        check_scan(&after_open, &report_open);
        assert_eq!(
            after_open, self.before,
            "recovery changed the valid records"
        );
        check_foreign_tails(self.root, self.files, &report_open.torn_tails, "recovery");
        assert!(report_open.leftover_tmp_files.is_empty());
        assert_eq!(
            report_open.damaged, self.report_before.damaged,
            "recovery touched damage"
        );
        assert_eq!(report_open.bad_segments, self.report_before.bad_segments);
        assert_eq!(report_open.gaps, self.report_before.gaps);
        // Every segment before the active one is sealed by now, and the active one claims what
        // it holds: no claim is left that a later open could not settle (but a damaged one).
        let damaged_areas: Vec<u64> = self
            .commits
            .iter()
            .filter(|c| c.point.damaged)
            .map(|c| c.header.segment_index)
            .collect();
        let damaged_ends: Vec<u64> = report_open
            .damaged
            .iter()
            .filter(|d| d.next_good_seq.is_none())
            .map(|d| d.segment_index)
            .collect();
        let recovered = Recovered {
            report: open_report,
            ids,
            damaged_areas,
            damaged_ends,
        };
        assert!(
            report_open
                .unconfirmed_commits
                .iter()
                .all(|u| recovered.may_stay_unconfirmed(u.segment_index)),
            "unconfirmed commits left after recovery: {:?}",
            report_open.unconfirmed_commits
        );
        recovered
    }

    /// Appends one event under `id` and reads it back last; `None` when the journal refused it
    /// as full (then unchanged).
    fn check_append(
        &mut self,
        journal: Journal,
        recovered: &Recovered,
        id: [u8; 16],
        kind: EventKind,
    ) -> Option<Appended> {
        let appended = journal.append(
            EventId::from_bytes(id),
            kind,
            codec::CODEC_VERSION,
            APPENDED_PAYLOAD,
        );
        let appended = match appended {
            Ok(a) => a,
            Err(JournalError::Full { .. }) => {
                self.check_refused_append(journal);
                return None;
            }
            Err(e) => panic!("append after recovery failed: {e}"),
        };
        assert!(
            appended.written,
            "a fresh event ID was taken for a duplicate"
        );
        if let Some(last) = self.before.last() {
            assert!(
                appended.position.seq > last.position.seq,
                "appended seq does not increase"
            );
        }
        check_next_seq(appended.position.seq, &recovered.report, &self.commits);
        drop(journal);
        self.check_read_back(&appended, id, kind)?;
        Some(appended)
    }

    /// Only a journal at one of its limits may refuse, and it must then be unchanged.
    fn check_refused_append(&mut self, journal: Journal) {
        let last_seq = self.before.last().map_or(0, |r| r.position.seq);
        let at_last_index = self
            .root
            .join("journal")
            .join(recovery::segment_file_name(SEGMENT_INDEX_MAX))
            .exists();
        assert!(
            last_seq >= SEQ_MAX || at_last_index,
            "append refused as full by a journal below its limits"
        );
        drop(journal);
        let Some((after_refusal, _)) = read_all(self.root) else {
            panic!("read-only scan failed after a refused append");
        };
        assert_eq!(
            after_refusal, self.before,
            "a refused append changed the records"
        );
        assert!(poll_all(&mut self.follower).is_empty());
    }

    /// The journal holds the records it held and the appended one after them, and the follower
    /// picks up exactly that one.
    fn check_read_back(
        &mut self,
        appended: &Appended,
        id: [u8; 16],
        kind: EventKind,
    ) -> Option<()> {
        let Some((after_append, report_append)) = read_all(self.root) else {
            panic!("read-only scan failed after an append");
        };
        check_scan(&after_append, &report_append);
        check_foreign_tails(
            self.root,
            self.files,
            &report_append.torn_tails,
            "the append",
        );
        assert_eq!(
            after_append.len(),
            self.before.len() + 1,
            "append lost or found records"
        );
        assert_eq!(&after_append[..self.before.len()], self.before.as_slice());
        let new = after_append.last()?;
        assert_eq!(new.position, appended.position);
        assert_eq!(new.event_id, EventId::from_bytes(id));
        assert_eq!(new.kind, kind.get());
        assert_eq!(new.codec_version, codec::CODEC_VERSION);
        assert_eq!(new.payload, APPENDED_PAYLOAD);

        let polled = poll_all(&mut self.follower);
        assert_eq!(
            polled.as_slice(),
            std::slice::from_ref(new),
            "the follower did not pick up the append"
        );
        Some(())
    }
}

/// After a clean close, the writer's residue is gone and every damage the first open found is
/// still reported.
fn check_reopen_report(scanned: &Scanned, recovered: &Recovered, reopen_report: &RecoveryReport) {
    let report_before = &scanned.report_before;
    check_foreign_tails(
        scanned.root,
        scanned.files,
        &reopen_report.torn_tails,
        "a clean close",
    );
    assert!(
        reopen_report
            .unconfirmed_commits
            .iter()
            .all(|u| recovered.may_stay_unconfirmed(u.segment_index)),
        "unconfirmed commits after a clean close: {reopen_report:?}"
    );
    assert!(
        report_before.is_crash_residue_only() || !reopen_report.is_crash_residue_only(),
        "damage found by the first open is no longer reported: first {report_before:?}, then {reopen_report:?}"
    );
}

/// A torn tail found after the writer had the journal (`after`: after recovery, an append, a
/// clean close) holds only bytes that were in the file before any open: the writer never leaves
/// bad bytes of its own. (Recovery zeroes every torn tail its scan finds, but the scan of a
/// cleanly closed or sealed segment reads only up to 48 bytes past the end its commit point
/// names, so bytes put further on from outside survive until the writer appends next to them.)
fn check_foreign_tails(
    root: &Path,
    files: &[(String, Vec<u8>)],
    tails: &[recovery::TornTail],
    after: &str,
) {
    for tail in tails {
        let name = recovery::segment_file_name(tail.segment_index);
        let now = std::fs::read(root.join("journal").join(&name)).unwrap_or_default();
        let before = files
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(&[][..], |(_, b)| b.as_slice());
        for at in tail.start_offset as usize..tail.end_offset as usize {
            let byte = now.get(at).copied().unwrap_or(0);
            assert!(
                byte == 0 || before.get(at) == Some(&byte),
                "{name}: a torn tail after {after} holds a byte the writer wrote at {at}: {tail:?}"
            );
        }
    }
}

/// The commit area of one usable version 2 segment, read from its file the way recovery reads it.
struct SegmentCommit {
    header: SegmentHeader,
    point: CommitPoint,
}

/// The commit areas of the version 2 segments that `report` did not reject (row I), read
/// before anything writes.
fn read_commit_areas(dir: &Path, report: &RecoveryReport) -> Vec<SegmentCommit> {
    let Ok((listed, _, _)) =
        crate::root::dir::Dir::reader(dir).and_then(|dir| recovery::list_segments(&dir))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (index, path) in listed {
        let name = recovery::segment_file_name(index);
        if report.bad_segments.iter().any(|b| b.file_name == name) {
            continue;
        }
        let Ok(mut bytes) = std::fs::read(&path) else {
            continue;
        };
        let Ok(header) = SegmentHeader::decode(&bytes) else {
            panic!("{name}: a segment the scan used has no valid header");
        };
        // A file cut inside its commit area may have lost the newer slot: the claim is unknown.
        let cut = bytes.len() < header.records_offset();
        bytes.resize(bytes.len().max(header.records_offset()), 0);
        let Some(mut point) = CommitPoint::read(&bytes, &header) else {
            continue;
        };
        point.damaged |= cut;
        out.push(SegmentCommit { header, point });
    }
    out
}

/// The first seq of `header`'s segment that `records` does not hold.
fn first_missing(records: &[Record], header: &SegmentHeader) -> u64 {
    records
        .iter()
        .filter(|r| r.position.segment_index == header.segment_index)
        .map(|r| r.position.seq + 1)
        .max()
        .unwrap_or(header.base_seq)
}

/// What a report says about commit points agrees with the commit areas on disk: a torn tail
/// never starts at or below its segment's confirmed seq (those records were durable: losing them
/// is damage); records missing up to a claim are reported, as lost when they were confirmed and
/// as an unconfirmed commit otherwise; an unreadable commit area is reported.
fn check_commit_findings(records: &[Record], report: &RecoveryReport, commits: &[SegmentCommit]) {
    let commit_of = |index: u64| commits.iter().find(|c| c.header.segment_index == index);
    for t in &report.torn_tails {
        if let Some(c) = commit_of(t.segment_index) {
            let first = first_missing(records, &c.header);
            assert!(
                first > c.point.confirmed,
                "a torn tail holds seq {first}, at or below the confirmed seq {}: {t:?}",
                c.point.confirmed
            );
        }
    }
    for c in commits {
        let name = recovery::segment_file_name(c.header.segment_index);
        let index = c.header.segment_index;
        let lost = report
            .lost_acknowledged
            .iter()
            .find(|l| l.segment_index == index);
        let unconfirmed = report
            .unconfirmed_commits
            .iter()
            .find(|l| l.segment_index == index);
        if c.point.damaged {
            assert!(
                report.damaged_commit_areas.contains(&name),
                "{name}: unreadable commit area not reported"
            );
            continue;
        }
        let first = first_missing(records, &c.header);
        let (claimed, confirmed) = (c.point.claimed, c.point.confirmed);
        assert!(claimed >= confirmed && confirmed >= c.header.base_seq - 1);
        let expected = (first <= claimed).then_some(recovery::CommitLoss {
            segment_index: index,
            first_missing_seq: first,
            claimed_seq: claimed,
            confirmed_seq: confirmed,
        });
        if first <= confirmed {
            assert_eq!(lost, expected.as_ref(), "{name}: lost acknowledged records");
            assert_eq!(unconfirmed, None, "{name}: lost records called unconfirmed");
        } else {
            assert_eq!(lost, None, "{name}: unconfirmed records called lost");
            assert_eq!(unconfirmed, expected.as_ref(), "{name}: unconfirmed commit");
        }
    }
}

/// The next seq after a writable open (`seq`, the first one appended) is above every seq that
/// may have been acknowledged: at least the report's floor, above the claim of every usable
/// segment's commit area (its newest slot's), at least the successor's base seq of its seal
/// (when the newest slot is one), and above what a segment whose claim is unknown could hold.
///
/// (Not above every claim of every slot that decodes: an older slot that claims more than the
/// newer one, or a seal older than a plain claim, is a state neither the writer nor recovery
/// ever writes, and recovery reads the commit point from the newest slot, as journal-format.md
/// says.)
fn check_next_seq(seq: u64, report: &RecoveryReport, commits: &[SegmentCommit]) {
    assert!(
        seq >= report.next_seq_floor,
        "appended seq {seq} below the floor {}",
        report.next_seq_floor
    );
    for c in commits {
        assert!(
            seq > c.point.claimed,
            "segment {}: appended seq {seq} is claimed by its commit area: {:?}",
            c.header.segment_index,
            c.point
        );
        if let Some(seal) = c.point.seal() {
            assert!(
                seq >= seal.next_base_seq,
                "segment {}: appended seq {seq} below its sealed successor's base: {seal:?}",
                c.header.segment_index
            );
        }
        if c.point.damaged {
            let capacity = SegmentHeader::record_capacity(u64::from(c.header.segment_bytes));
            assert!(
                seq >= c.header.base_seq + capacity,
                "segment {}: appended seq {seq} within what a segment with an unknown claim holds",
                c.header.segment_index
            );
        }
    }
}

fn poll_all(follower: &mut Follower) -> Vec<Record> {
    let mut out = Vec::new();
    if let Err(e) = follower.poll(|r| out.push(r.to_owned())) {
        panic!("follower poll failed: {e}");
    }
    out
}
