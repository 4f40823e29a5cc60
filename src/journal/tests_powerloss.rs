//! Power loss and lost tails, against the durability promises of journal-format.md.
//!
//! One check, [`check_after_crash`], states what must hold after a crash, given what the test
//! knows to be true (the ground truth, [`Truth`]): every acknowledged event is there at its seq
//! with its bytes, every record returned is an event the workload made, the read-only verify and
//! the writable open give the verdict the truth calls for (no damage when only unflushed writes
//! were lost; damage, not a torn tail, when flushed acknowledged bytes were hit), the next append
//! gets a seq above every acknowledged one, and a second open is clean (or still reports the
//! damage). It runs on three kinds of crash:
//! - the power-loss simulator ([`super::powerloss`]): random workloads under every policy, a crash
//!   at any point of the log, and any loss of the unflushed writes (two proptests, one per verdict);
//! - SIGKILL of a child process that appends on the real file system and acknowledges over a pipe;
//! - and, in its own test, a tail segment truncated at every offset or deleted.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use proptest::prelude::*;

use super::powerloss::{
    CrashState, Loss, PAGE_BYTES, PowerLossBackend, Sim, Tear, scratch_dir, segment_name,
    write_image,
};
use super::reader::{JournalReader, Record};
use super::*;
use crate::limits::SEGMENT_BYTES_MIN;

const KIND: EventKind = match EventKind::new(7) {
    Some(k) => k,
    None => panic!(),
};
const CODEC: u8 = 3;
/// Small segments, so that workloads rotate every few records.
const SEGMENT_BYTES: usize = 8192;
const PAYLOAD_BYTES_MAX: usize = 2048;

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The ID of event `index`: the index in the low half, a hash of it and the salt in the high
/// half, so that any record names the event it claims to be and a foreign record does not.
fn event_id(salt: u64, index: u64) -> EventId {
    let bits = (u128::from(mix(index ^ salt)) << 64) | u128::from(index);
    EventId::from_bytes(bits.to_le_bytes())
}

fn index_of(id: EventId) -> u64 {
    (u128::from_le_bytes(id.as_bytes()) & u128::from(u64::MAX)) as u64
}

fn payload(salt: u64, index: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = mix(salt ^ index.rotate_left(17));
    while out.len() < len {
        x = mix(x);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn options(durability: Durability, segment_bytes: usize) -> JournalOptions {
    JournalOptions {
        durability,
        segment_bytes,
    }
}

/// An acknowledged record whose flushed bytes the crash damaged.
#[derive(Debug, Clone)]
struct DamagedRecord {
    seq: u64,
    segment_index: u64,
    offset: u64,
    /// Whether its acknowledgement is on disk too (a later commit slot, flushed): then its loss
    /// is damage. Otherwise it was in the last flush that returned, and on disk it looks exactly
    /// like a record torn by a power loss during that flush (never acknowledged if the flush
    /// did not return): its loss may be reported as an unconfirmed commit instead.
    confirmed: bool,
    /// The acknowledged records that may be missing because of it: itself, and when it is not
    /// confirmed, the unconfirmed acknowledged records after it in its segment (with their
    /// offsets), which recovery cannot tell from an unacknowledged tail after a hole.
    may_lose: Vec<(u64, u64)>,
}

/// What is known to be true of a crashed root.
struct Truth<'a> {
    options: JournalOptions,
    /// Of the first writable open after the crash.
    tenure: Tenure,
    salt: u64,
    /// seq -> event index of every acknowledged record.
    acked: BTreeMap<u64, u64>,
    /// The payload of event `index`, if the workload ever made it.
    payload_of: &'a dyn Fn(u64) -> Option<Vec<u8>>,
    /// `Some` in the damage family: the plan hit this acknowledged record's flushed bytes.
    damaged: Option<DamagedRecord>,
    /// The event the check appends after reopening; the workload never made it.
    probe_index: u64,
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Every record is an event the workload made, in increasing seq order; every acknowledged
/// event is there at its seq, but those the damage may take. Returns the acknowledged seqs
/// missing (each one the damage may take).
fn check_records(what: &str, records: &[Record], truth: &Truth<'_>) -> Result<Vec<u64>, String> {
    let mut by_seq = BTreeMap::new();
    let mut last = 0;
    for r in records {
        let seq = r.position.seq;
        ensure!(seq > last, "{what}: seq {seq} after seq {last}");
        last = seq;
        let index = index_of(r.event_id);
        ensure!(
            r.event_id == event_id(truth.salt, index),
            "{what}: seq {seq} has an event ID no event of the workload has"
        );
        let expected = (truth.payload_of)(index);
        ensure!(
            expected.as_deref() == Some(&r.payload[..]),
            "{what}: seq {seq} (event {index}) holds a payload of {} bytes the workload did not \
             write (it wrote {:?} bytes)",
            r.payload.len(),
            expected.map(|p| p.len())
        );
        ensure!(
            r.kind == KIND.get() && r.codec_version == CODEC,
            "{what}: seq {seq}: kind {} codec {}",
            r.kind,
            r.codec_version
        );
        by_seq.insert(seq, index);
    }
    let mut missing = Vec::new();
    for (&seq, &index) in &truth.acked {
        match by_seq.get(&seq) {
            Some(&found) => ensure!(
                found == index,
                "{what}: acknowledged seq {seq} should hold event {index} but holds event {found}"
            ),
            None if truth
                .damaged
                .as_ref()
                .is_some_and(|d| d.may_lose.iter().any(|(s, _)| *s == seq)) =>
            {
                missing.push(seq);
            }
            None => {
                let found: Vec<u64> = by_seq.keys().copied().collect();
                return Err(format!(
                    "{what}: acknowledged seq {seq} (event {index}) is missing; seqs found: {}",
                    ranges(&found, 1)
                ));
            }
        }
    }
    Ok(missing)
}

/// The verdict the truth calls for, on a report; `missing` are the acknowledged seqs the
/// records lack.
fn check_verdict(
    what: &str,
    report: &RecoveryReport,
    truth: &Truth<'_>,
    missing: &[u64],
) -> Result<(), String> {
    let Some(d) = &truth.damaged else {
        ensure!(
            report.damaged.is_empty()
                && report.gaps.is_empty()
                && report.bad_segments.is_empty()
                && report.is_crash_residue_only(),
            "{what}: damage reported, but the crash lost only unflushed writes: {report:?}"
        );
        return Ok(());
    };
    let in_range = |seq: u64, offset: u64| {
        report.damaged.iter().any(|r| {
            r.segment_index == d.segment_index && r.start_offset <= offset && offset < r.end_offset
        }) || report.lost_acknowledged.iter().any(|l| {
            l.segment_index == d.segment_index && l.first_missing_seq <= seq && seq <= l.claimed_seq
        })
    };
    let unconfirmed = |seq: u64| {
        report.unconfirmed_commits.iter().any(|l| {
            l.segment_index == d.segment_index && l.first_missing_seq <= seq && seq <= l.claimed_seq
        })
    };
    ensure!(
        missing.contains(&d.seq),
        "{what}: the damaged acknowledged seq {} was handed out",
        d.seq
    );
    if d.confirmed {
        ensure!(
            in_range(d.seq, d.offset) && !report.is_crash_residue_only(),
            "{what}: acknowledged seq {} (segment {}, offset {}) was damaged after a later \
             commit slot confirmed it, but it is not reported as damage: {report:?}",
            d.seq,
            d.segment_index,
            d.offset
        );
    }
    for (seq, offset) in &d.may_lose {
        ensure!(
            !missing.contains(seq) || in_range(*seq, *offset) || unconfirmed(*seq),
            "{what}: acknowledged seq {seq} (segment {}, offset {offset}) is lost and no damaged \
             range, lost acknowledged records or unconfirmed commit covers it: {report:?}",
            d.segment_index
        );
    }
    Ok(())
}

/// The one statement of what must hold after a crash (simulated or SIGKILL). Opens `root` read-only,
/// then writable (appending one event), then writable again.
fn check_after_crash(root: &Path, truth: &Truth<'_>) -> Result<(), String> {
    let reader = JournalReader::open(root).map_err(|e| format!("reader: {e}"))?;
    let (records, _) = reader.records(1).map_err(|e| format!("records: {e}"))?;
    let missing = check_records("read-only records", &records, truth)?;
    let verify = reader.verify().map_err(|e| format!("verify: {e}"))?;
    check_verdict("read-only verify", &verify, truth, &missing)?;

    let mut visited = Vec::new();
    let options = truth.options.clone();
    let backend = default_backend();
    let mut visit = |r: reader::RecordView<'_>| visited.push(r.to_owned());
    let (journal, report) =
        Journal::open_with_backend(root, options, truth.tenure, backend, &mut visit)
            .map_err(|e| format!("writable open: {e}"))?;
    check_records("writable open", &visited, truth)?;
    ensure!(
        visited == records,
        "the writable open handed out other records than the read-only scan"
    );
    check_verdict("writable open", &report, truth, &missing)?;
    let max_acked = truth.acked.keys().next_back().copied().unwrap_or(0);
    let last = journal.last_seq();
    ensure!(
        last >= max_acked,
        "after reopening, last_seq is {last} but seq {max_acked} was acknowledged"
    );
    let probe = payload(truth.salt, truth.probe_index, 24);
    let appended = journal
        .append(event_id(truth.salt, truth.probe_index), KIND, CODEC, &probe)
        .map_err(|e| format!("append after reopen: {e}"))?;
    ensure!(appended.written, "the probe event was already there");
    ensure!(
        appended.position.seq > max_acked,
        "the first append after reopening got seq {}, but seq {max_acked} was acknowledged",
        appended.position.seq
    );
    journal
        .sync()
        .map_err(|e| format!("sync after reopen: {e}"))?;
    drop(journal);

    let (journal, again) =
        Journal::open(root, truth.options.clone()).map_err(|e| format!("second open: {e}"))?;
    match &truth.damaged {
        None => ensure!(
            again.is_clean(),
            "the second open after recovery is not clean: {again:?}"
        ),
        // The loss stays reported (an unconfirmed commit is residue the first open dealt with).
        Some(d) if d.confirmed => check_verdict("second open", &again, truth, &missing)?,
        Some(_) => {}
    }
    ensure!(
        journal.position_of(event_id(truth.salt, truth.probe_index)) == Some(appended.position),
        "the event appended after reopening is not where it was acknowledged"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Workloads under the simulator.

#[derive(Debug, Clone)]
enum Step {
    /// Append one event with a payload of this many bytes.
    Append(usize),
    /// `Journal::sync`.
    Sync,
    /// Drop the handle and open the journal again (a clean restart); with several threads, a sync.
    Reopen,
    /// Cut the power (this loss of the unflushed writes), put the image in place and reopen, so
    /// that later crashes happen to a recovered journal; with several threads, a sync.
    PowerCut(Loss),
}

#[derive(Debug, Clone)]
struct Workload {
    durability: Durability,
    /// A brief writer closes without a closing commit, and its open leaves the flush of what
    /// it found to its first commit.
    tenure: Tenure,
    threads: usize,
    steps: Vec<Step>,
    salt: u64,
}

impl Workload {
    /// Event `index` is the append at step `index`.
    fn payload_of(&self, index: u64) -> Option<Vec<u8>> {
        match self.steps.get(usize::try_from(index).ok()?)? {
            Step::Append(len) => Some(payload(self.salt, index, *len)),
            _ => None,
        }
    }

    fn probe_index(&self) -> u64 {
        self.steps.len() as u64 + 1_000_000
    }
}

fn workload() -> impl Strategy<Value = Workload> {
    let step = prop_oneof![
        16 => (0..PAYLOAD_BYTES_MAX).prop_map(Step::Append),
        2 => Just(Step::Sync),
        1 => Just(Step::Reopen),
        1 => loss().prop_map(Step::PowerCut),
    ];
    (
        prop_oneof![
            Just(Durability::Sync),
            Just(Durability::Group),
            Just(Durability::Os)
        ],
        1usize..=3,
        prop::collection::vec(step, 1..40),
        any::<u64>(),
        prop_oneof![Just(Tenure::Lasting), Just(Tenure::Brief)],
    )
        .prop_map(|(durability, threads, steps, salt, tenure)| Workload {
            durability,
            tenure,
            threads: if durability == Durability::Group {
                threads
            } else {
                1
            },
            steps,
            salt,
        })
}

/// Runs `w` on real files in `root` through the simulator and returns its log.
fn run_workload(root: &Path, w: &Workload) -> Arc<Sim> {
    let sim = Sim::new();
    let backend = PowerLossBackend::new(Arc::clone(&sim));
    let open = || {
        let backend: Arc<dyn Backend> = backend.clone();
        Journal::open_with_backend(
            root,
            options(w.durability, SEGMENT_BYTES),
            w.tenure,
            backend,
            &mut |_| {},
        )
        .expect("open under the simulator")
        .0
    };
    let append = |journal: &Journal, index: u64, len: usize| {
        let appended = journal
            .append(
                event_id(w.salt, index),
                KIND,
                CODEC,
                &payload(w.salt, index, len),
            )
            .expect("append under the simulator");
        assert!(appended.written);
        sim.appended(appended.position, index);
        appended.position.seq
    };
    if w.threads == 1 {
        let mut journal = open();
        // Under `Os`, appends returned but not yet covered by a `Journal::sync`.
        let mut unacked = Vec::new();
        for (index, step) in w.steps.iter().enumerate() {
            let index = index as u64;
            match step {
                Step::Append(len) => {
                    let seq = append(&journal, index, *len);
                    if w.durability == Durability::Os {
                        unacked.push((seq, index));
                    } else {
                        sim.acked(seq, index);
                    }
                }
                Step::Sync => {
                    journal.sync().expect("sync under the simulator");
                    for (seq, index) in unacked.drain(..) {
                        sim.acked(seq, index);
                    }
                }
                Step::Reopen => {
                    drop(journal);
                    journal = open();
                }
                Step::PowerCut(loss) => {
                    drop(journal);
                    let image = sim.state_at(sim.len()).image(loss);
                    let dir = root.join("journal");
                    for entry in std::fs::read_dir(&dir).expect("list journal") {
                        std::fs::remove_file(entry.expect("entry").path()).expect("remove");
                    }
                    write_image(root, &image).expect("put the image in place");
                    sim.power_cut(&image);
                    // What a sync had not covered before the cut is not acknowledged by a later one.
                    unacked.clear();
                    journal = open();
                }
            }
        }
    } else {
        // Several appenders share group flushes; each step belongs to thread `index % threads`.
        let journal = open();
        std::thread::scope(|scope| {
            for t in 0..w.threads {
                let (journal, append, sim) = (&journal, &append, &sim);
                scope.spawn(move || {
                    for (index, step) in w.steps.iter().enumerate() {
                        if index % w.threads != t {
                            continue;
                        }
                        let index = index as u64;
                        match step {
                            Step::Append(len) => {
                                let seq = append(journal, index, *len);
                                sim.acked(seq, index);
                            }
                            Step::Sync | Step::Reopen | Step::PowerCut(_) => {
                                journal.sync().expect("sync under the simulator");
                            }
                        }
                    }
                });
            }
        });
    }
    sim
}

#[derive(Debug, Clone)]
enum Hit {
    Flip(u8),
    Zero,
}

/// Damage to one acknowledged (so flushed) record: bytes flipped or zeroed. The record and the
/// bytes are taken modulo the number of acknowledged records and the record's length.
#[derive(Debug, Clone)]
struct Damage {
    record: usize,
    hits: Vec<(usize, Hit)>,
}

#[derive(Debug, Clone)]
struct Crash {
    /// After how many log entries the power goes (clamped to the log's length). Absolute rather
    /// than relative to the length, so that shrinking a workload's later steps keeps the point.
    at: usize,
    loss: Loss,
}

fn loss() -> impl Strategy<Value = Loss> {
    let mask = || prop::collection::vec(any::<bool>(), 1..12);
    let tear = prop_oneof![
        any::<usize>().prop_map(Tear::Prefix),
        any::<u64>().prop_map(Tear::Bytes),
    ];
    prop_oneof![
        Just(Loss::DropAll),
        Just(Loss::KeepAll),
        mask().prop_map(Loss::Writes),
        mask().prop_map(Loss::Pages),
        (mask(), any::<usize>(), tear).prop_map(|(keep, victim, tear)| Loss::Torn {
            keep,
            victim,
            tear
        }),
    ]
}

fn crash() -> impl Strategy<Value = Crash> {
    (0usize..400, loss()).prop_map(|(at, loss)| Crash { at, loss })
}

fn damage() -> impl Strategy<Value = Damage> {
    let hit = prop_oneof![(0u8..8).prop_map(Hit::Flip), Just(Hit::Zero)];
    (
        any::<usize>(),
        prop::collection::vec((any::<usize>(), hit), 1..4),
    )
        .prop_map(|(record, hits)| Damage { record, hits })
}

/// Hits the flushed bytes of one acknowledged record of the image. `None` when nothing is
/// acknowledged at this crash point.
fn apply_damage(
    state: &CrashState,
    image: &mut BTreeMap<String, Vec<u8>>,
    spec: &Damage,
) -> Result<Option<DamagedRecord>, String> {
    let acked: Vec<u64> = state.acked.keys().copied().collect();
    if acked.is_empty() {
        return Ok(None);
    }
    let seq = acked[spec.record % acked.len()];
    let (_, position) = state.appended[&seq];
    let name = segment_name(position.segment_index);
    let offset = position.offset as usize;
    // The model's own promise: an acknowledged record is whole in the durable image.
    let durable = &state.files[&name].durable;
    let (header, _) = format::decode_record(&durable[offset..]).map_err(|e| {
        format!("simulator: acknowledged seq {seq} is not whole in the durable image: {e}")
    })?;
    ensure!(
        header.seq == seq,
        "simulator: the durable image holds seq {} where seq {seq} was acknowledged",
        header.seq
    );
    let len = format::record_bytes(header.payload_bytes as usize);
    let bytes = image
        .get_mut(&name)
        .ok_or_else(|| format!("simulator: no image of {name}"))?;
    let before = bytes[offset..offset + len].to_vec();
    for (at, hit) in &spec.hits {
        let i = offset + at % len;
        match hit {
            Hit::Flip(bit) => bytes[i] ^= 1 << bit,
            Hit::Zero if bytes[i] != 0 => bytes[i] = 0,
            Hit::Zero => bytes[i] ^= 1,
        }
    }
    // Hits that undo each other still damage the record.
    if bytes[offset..offset + len] == before[..] {
        bytes[offset] ^= 0x80;
    }
    let confirmed = state.confirmed.contains(&seq);
    let may_lose = state
        .acked
        .keys()
        .filter(|&&s| s == seq || (!confirmed && s > seq && !state.confirmed.contains(&s)))
        .map(|s| state.appended[s].1)
        .filter(|p| p.segment_index == position.segment_index)
        .map(|p| (p.seq, p.offset))
        .collect();
    Ok(Some(DamagedRecord {
        seq,
        segment_index: position.segment_index,
        offset: position.offset,
        confirmed,
        may_lose,
    }))
}

/// Set to keep the image of a failing case (and every case shrinking tries) for a look.
const KEEP_ENV: &str = "PROCJOURNAL_POWERLOSS_KEEP";

/// Builds the image of `crash` (and `damage`) from the log, writes it into a fresh root and runs
/// the check. On failure with `PROCJOURNAL_POWERLOSS_KEEP` set the image is kept and named.
fn crash_and_check(
    sim: &Sim,
    w: &Workload,
    crash: &Crash,
    damage: Option<&Damage>,
) -> Result<(), TestCaseError> {
    let at = crash.at.min(sim.len());
    let state = sim.state_at(at);
    if let Some((seq, first, later)) = state.reused.first() {
        return Err(TestCaseError::fail(format!(
            "seq {seq} was acknowledged for event {first}, and after a power cut inside the \
             workload again for event {later}"
        )));
    }
    let mut image = state.image(&crash.loss);
    let damaged = match damage {
        Some(spec) => match apply_damage(&state, &mut image, spec).map_err(TestCaseError::fail)? {
            Some(d) => Some(d),
            // Nothing acknowledged yet at this point: nothing flushed to damage.
            None => return Ok(()),
        },
        None => None,
    };
    let dir = tempfile::Builder::new()
        .prefix("procjournal-powerloss-")
        .tempdir_in(scratch_dir())
        .map_err(|e| TestCaseError::fail(format!("image dir: {e}")))?;
    write_image(dir.path(), &image).map_err(|e| TestCaseError::fail(format!("image: {e}")))?;
    let truth = Truth {
        options: options(w.durability, SEGMENT_BYTES),
        tenure: w.tenure,
        salt: w.salt,
        acked: state.acked.clone(),
        payload_of: &|index| w.payload_of(index),
        damaged,
        probe_index: w.probe_index(),
    };
    check_after_crash(dir.path(), &truth).map_err(|message| {
        let kept = match std::env::var_os(KEEP_ENV) {
            Some(_) => format!("image kept at {}", dir.keep().display()),
            None => format!("set {KEEP_ENV}=1 to keep the image"),
        };
        let (writes, pieces) = state.pending_counts();
        TestCaseError::fail(format!(
            "{message}\n  crash after log entry {at} of {}; {writes} pending writes ({pieces} \
             page pieces); acknowledged seqs {}; appended seqs {}; {kept}",
            sim.len(),
            ranges(&truth.acked.keys().copied().collect::<Vec<_>>(), 1),
            ranges(&state.appended.keys().copied().collect::<Vec<_>>(), 1),
        ))
    })
}

fn workload_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("procjournal-powerloss-run-")
        .tempdir_in(scratch_dir())
        .expect("workload root")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        // Shrinking replays workloads; enough to reach a handful of steps.
        max_shrink_iters: 2048,
        ..ProptestConfig::default()
    })]

    /// Losing, keeping or tearing any of the writes since the last flush loses no acknowledged
    /// event and is never reported as damage; the next seq is above every acknowledged one.
    #[test]
    fn power_loss_of_unflushed_writes_keeps_every_acknowledged_event(
        w in workload(),
        crashes in prop::collection::vec(crash(), 1..4),
    ) {
        let root = workload_root();
        let sim = run_workload(root.path(), &w);
        for crash in &crashes {
            crash_and_check(&sim, &w, crash, None)?;
        }
    }

    /// Flipping or zeroing bytes of a flushed, acknowledged record is reported as damage (never
    /// as a torn tail to cut), whatever happened to the unflushed writes after it.
    #[test]
    fn damage_to_a_flushed_acknowledged_record_is_reported(
        w in workload(),
        crashes in prop::collection::vec((crash(), damage()), 1..3),
    ) {
        let root = workload_root();
        let sim = run_workload(root.path(), &w);
        for (crash, damage) in &crashes {
            crash_and_check(&sim, &w, crash, Some(damage))?;
        }
    }
}

/// Runs one case of the proptests above by hand and fails with the check's message.
fn replay(w: &Workload, crash: &Crash, damage: Option<&Damage>) {
    let root = workload_root();
    let sim = run_workload(root.path(), w);
    if let Err(e) = crash_and_check(&sim, w, crash, damage) {
        panic!("{e}");
    }
}

/// Appends of these sizes under `Os`, none synced, and a crash under `loss` just after the last
/// append returned (before the clean close flushes them), with `writes` writes pending.
fn unflushed_os_appends(lens: &[usize], loss: Loss, writes: usize) {
    let w = Workload {
        durability: Durability::Os,
        tenure: Tenure::Lasting,
        threads: 1,
        steps: lens.iter().map(|&len| Step::Append(len)).collect(),
        salt: 0,
    };
    let root = workload_root();
    let sim = run_workload(root.path(), &w);
    let at = sim.after_last_append();
    assert_eq!(sim.state_at(at).pending_counts().0, writes);
    if let Err(e) = crash_and_check(&sim, &w, &Crash { at, loss }, None) {
        panic!("{e}");
    }
}

/// Minimal case of the first proptest on format v1: under `Os`, three unflushed empty records;
/// the power cut lets only the second reach the disk. Nothing was acknowledged, yet v1 reports
/// [64, 112) as damage (row H, `ZeroGap`) because a valid record follows it, forever.
#[test]
fn an_unflushed_record_that_outlives_an_earlier_one_is_not_damage() {
    unflushed_os_appends(&[0, 0, 0], Loss::Writes(vec![false, true, false]), 3);
}

/// The same with the first record torn in its header (`Garbage`) and the second whole.
#[test]
fn an_unflushed_record_after_a_torn_unflushed_one_is_not_damage() {
    let loss = Loss::Torn {
        keep: vec![true],
        victim: 0,
        tear: Tear::Prefix(20),
    };
    unflushed_os_appends(&[0, 0], loss, 2);
}

/// Minimal case of the second proptest on format v1: one record appended under `Sync` (flushed
/// and acknowledged) and the journal closed, then one bit of the record flipped. With nothing
/// valid after it, v1 calls it a torn tail: verify reports no damage, the writable open zeroes
/// it, and the next append reuses seq 1. (In v2 the close's claim confirms the record.)
#[test]
fn a_flipped_bit_in_the_last_acknowledged_record_is_damage() {
    let root = workload_root();
    let w = Workload {
        durability: Durability::Sync,
        tenure: Tenure::Lasting,
        threads: 1,
        steps: vec![Step::Append(0)],
        salt: 0,
    };
    let sim = run_workload(root.path(), &w);
    assert!(sim.state_at(sim.len()).confirmed.contains(&1));
    let crash = Crash {
        at: usize::MAX,
        loss: Loss::DropAll,
    };
    let damage = Damage {
        record: 0,
        hits: vec![(0, Hit::Flip(0))],
    };
    replay(&w, &crash, Some(&damage));
}

/// Under `Os`, three appends and a `Journal::sync` (one commit claiming seq 3, flushed: all three
/// acknowledged), then the power goes before anything else is written, and a bit of record 1
/// flips. On disk this is exactly what a power loss during that flush leaves when the claim
/// landed and record 1 did not, so format v2 reports an unconfirmed commit of seqs 1..=3 (not
/// damage), drops records 2 and 3 with the hole, and never reuses their seqs.
#[test]
fn a_flipped_bit_in_the_last_commit_is_an_unconfirmed_commit() {
    let root = workload_root();
    let w = Workload {
        durability: Durability::Os,
        tenure: Tenure::Lasting,
        threads: 1,
        steps: vec![
            Step::Append(0),
            Step::Append(0),
            Step::Append(0),
            Step::Sync,
        ],
        salt: 0,
    };
    let sim = run_workload(root.path(), &w);
    // Just after the three acknowledgements, before the clean close confirms them.
    let at = (0..=sim.len())
        .find(|&k| sim.state_at(k).acked.len() == 3)
        .unwrap();
    let state = sim.state_at(at);
    assert!(state.confirmed.is_empty());
    let crash = Crash {
        at,
        loss: Loss::DropAll,
    };
    let damage = Damage {
        record: 0,
        hits: vec![(0, Hit::Flip(0))],
    };
    replay(&w, &crash, Some(&damage));
}

// ---------------------------------------------------------------------------------------------
// The simulator's own model, checked against the real files.

/// After a final flush nothing is pending, and the durable image is the file on disk.
#[test]
fn after_a_final_sync_the_durable_image_is_the_file_on_disk() {
    for durability in [Durability::Sync, Durability::Group, Durability::Os] {
        let root = workload_root();
        let w = Workload {
            durability,
            tenure: Tenure::Lasting,
            threads: 1,
            steps: (0..30)
                .map(|i| Step::Append(i * 97 % PAYLOAD_BYTES_MAX))
                .chain([Step::Sync])
                .collect(),
            salt: 5,
        };
        let sim = run_workload(root.path(), &w);
        let state = sim.state_at(sim.len());
        assert_eq!(state.pending_counts(), (0, 0), "{durability:?}");
        assert!(
            state.files.len() > 2,
            "{durability:?}: no rotation happened"
        );
        for (name, f) in &state.files {
            let on_disk = std::fs::read(root.path().join("journal").join(name)).unwrap();
            assert!(f.durable == on_disk, "{durability:?}: {name} differs");
        }
        assert_eq!(state.acked.len(), 30, "{durability:?}");
    }
}

/// Under `Os` without a sync, dropping the pending writes loses exactly the records of the
/// active segment (rotation flushed the others), and keeping them all loses nothing.
#[test]
fn dropping_unflushed_writes_loses_exactly_the_active_segments_records() {
    let root = workload_root();
    let w = Workload {
        durability: Durability::Os,
        tenure: Tenure::Lasting,
        threads: 1,
        steps: (0..30).map(|i| Step::Append(300 + i)).collect(),
        salt: 9,
    };
    let sim = run_workload(root.path(), &w);
    // Before the clean close, which flushes everything.
    let state = sim.state_at(sim.after_last_append());
    assert!(state.acked.is_empty());
    let active = state.appended.values().map(|(_, p)| p.segment_index).max();
    let flushed: Vec<u64> = state
        .appended
        .iter()
        .filter(|(_, (_, p))| Some(p.segment_index) != active)
        .map(|(seq, _)| *seq)
        .collect();
    assert!(!flushed.is_empty() && flushed.len() < 30);
    for (loss, expected) in [
        (Loss::DropAll, flushed.clone()),
        (Loss::KeepAll, (1..=30).collect()),
    ] {
        let dir = workload_root();
        write_image(dir.path(), &state.image(&loss)).unwrap();
        let (records, _) = JournalReader::open(dir.path()).unwrap().records(1).unwrap();
        let seqs: Vec<u64> = records.iter().map(|r| r.position.seq).collect();
        assert_eq!(seqs, expected, "{loss:?}");
    }
}

/// A write that spans pages is cut at page boundaries for the page-level plans, so a plan can
/// keep the second page of a record without its first.
#[test]
fn page_plans_cut_writes_at_page_boundaries() {
    let root = workload_root();
    let w = Workload {
        durability: Durability::Os,
        tenure: Tenure::Lasting,
        threads: 1,
        steps: vec![Step::Append(4000), Step::Append(10)],
        salt: 3,
    };
    let sim = run_workload(root.path(), &w);
    // Before the clean close, which flushes everything.
    let state = sim.state_at(sim.after_last_append());
    let first = state.appended[&1].1.offset as usize;
    let second = state.appended[&2].1.offset as usize;
    // Record 1 (4048 bytes) crosses from the first page into the second; record 2 follows it.
    assert!(first < PAGE_BYTES && PAGE_BYTES < second && second < 2 * PAGE_BYTES);
    assert_eq!(state.pending_counts(), (2, 3));
    let image = state.image(&Loss::Pages(vec![false, true, true]));
    let bytes = &image[&segment_name(0)];
    assert!(bytes[first..PAGE_BYTES].iter().all(|&b| b == 0));
    assert!(bytes[PAGE_BYTES..second].iter().any(|&b| b != 0));
    let image = state.image(&Loss::Torn {
        keep: vec![true],
        victim: 2,
        tear: Tear::Prefix(5),
    });
    let durable = &state.files[&segment_name(0)].durable;
    let bytes = &image[&segment_name(0)];
    let written = &state.image(&Loss::KeepAll)[&segment_name(0)];
    assert_eq!(bytes[first..second], written[first..second]);
    assert_eq!(bytes[second..second + 5], written[second..second + 5]);
    assert_ne!(
        bytes[second + 5..second + 64],
        written[second + 5..second + 64]
    );
    assert_eq!(
        bytes[second + 5..second + 64],
        durable[second + 5..second + 64]
    );
}

// ---------------------------------------------------------------------------------------------
// The same check after SIGKILL on the real file system.

const CHILD_ENV: &str = "PROCJOURNAL_POWERLOSS_CHILD";
const CHILD_TEST: &str = "journal::tests_powerloss::sigkill_child_appender";
const SEED_ENV: &str = "PROCJOURNAL_POWERLOSS_SEED";
/// Thread `t` of a child appends events `t * THREAD_STRIDE ..`.
const THREAD_STRIDE: u64 = 1 << 32;
const CHILD_APPENDS_MAX: u64 = 100_000;
const CHILD_THREADS: u64 = 3;
/// Turns a child that makes no progress at all into a failure with its stderr rather than a hung
/// run; a healthy child acknowledges within milliseconds, so this measures nothing.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(120);

fn child_payload_len(salt: u64, index: u64) -> usize {
    (mix(salt ^ index ^ 0xA5A5) % PAYLOAD_BYTES_MAX as u64) as usize
}

fn child_payload_of(salt: u64, index: u64) -> Option<Vec<u8>> {
    (index % THREAD_STRIDE < CHILD_APPENDS_MAX && index / THREAD_STRIDE < CHILD_THREADS)
        .then(|| payload(salt, index, child_payload_len(salt, index)))
}

fn policy_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Sync => "sync",
        Durability::Group => "group",
        Durability::Os => "os",
    }
}

/// The appender the SIGKILL test runs in a child (this test binary, re-executed with
/// `--exact` and `PROCJOURNAL_POWERLOSS_CHILD=<policy> <threads> <salt> <root>`); a no-op in an
/// ordinary run. It prints `ack <seq> <index>` for each acknowledged event: under `Sync` and
/// `Group` once `append` returned, under `Os` once a `Journal::sync` after it returned.
#[test]
fn sigkill_child_appender() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    // `<policy> <threads> <salt> <root>`: the root last, whatever characters it holds.
    let mut words = spec.splitn(4, ' ');
    let mut word = || words.next().expect("child spec");
    let durability = match word() {
        "sync" => Durability::Sync,
        "group" => Durability::Group,
        _ => Durability::Os,
    };
    let threads: u64 = word().parse().expect("threads");
    let salt: u64 = word().parse().expect("salt");
    let root = std::path::PathBuf::from(word());
    let (journal, _) =
        Journal::open(&root, options(durability, SEGMENT_BYTES)).expect("child: open");
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        // The harness may have left "test ... " without a newline; each ack is a line of its own.
        let _ = writeln!(out, "\n{line}").and_then(|()| out.flush());
    };
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (journal, say) = (&journal, &say);
            scope.spawn(move || {
                let mut unacked = Vec::new();
                for k in 0..CHILD_APPENDS_MAX {
                    let index = t * THREAD_STRIDE + k;
                    let len = child_payload_len(salt, index);
                    let a = journal
                        .append(
                            event_id(salt, index),
                            KIND,
                            CODEC,
                            &payload(salt, index, len),
                        )
                        .expect("child: append");
                    unacked.push((a.position.seq, index));
                    if durability == Durability::Os {
                        if k % 4 != 3 {
                            continue;
                        }
                        journal.sync().expect("child: sync");
                    }
                    for (seq, index) in unacked.drain(..) {
                        say(format!("ack {seq} {index}"));
                    }
                }
            });
        }
    });
}

fn parse_ack(line: &str) -> Option<(u64, u64)> {
    let (seq, index) = line.strip_prefix("ack ")?.trim_end().split_once(' ')?;
    Some((seq.parse().ok()?, index.parse().ok()?))
}

#[test]
fn sigkill_at_a_random_moment_keeps_every_acknowledged_event() {
    let seed = std::env::var(SEED_ENV).map_or_else(
        |_| {
            mix(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64))
        },
        |s| s.parse().expect("seed"),
    );
    let exe = std::env::current_exe().expect("current_exe");
    let mut x = seed;
    for round in 0..12u64 {
        let durability = [Durability::Sync, Durability::Group, Durability::Os][round as usize % 3];
        let threads = if durability == Durability::Group {
            CHILD_THREADS
        } else {
            1
        };
        x = mix(x);
        let salt = x;
        let kill_after = 1 + x % 150;
        let ctx = format!("seed {seed} ({SEED_ENV}={seed}) round {round} {durability:?}");
        // The real file system, not tmpfs: this is the crash a real disk sees.
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        let stderr_path = dir.path().join("child.stderr");
        let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let mut child = Command::new(&exe)
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(
                CHILD_ENV,
                format!(
                    "{} {threads} {salt} {}",
                    policy_name(durability),
                    root.display()
                ),
            )
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).expect("child stderr file"))
            .spawn()
            .expect("spawn child");
        // Acks arrive through a thread, so that a child that stops making progress (a deadlock
        // in the writer) fails the test with its stderr instead of hanging it.
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(ack) = parse_ack(&line)
                    && tx.send(ack).is_err()
                {
                    return;
                }
            }
        });
        let mut acked = BTreeMap::new();
        while (acked.len() as u64) < kill_after {
            match rx.recv_timeout(HANG_GUARD) {
                Ok((seq, index)) => {
                    acked.insert(seq, index);
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "{ctx}: no ack from the child ({e}) after {} acks; its stderr:\n{}",
                        acked.len(),
                        stderr()
                    );
                }
            }
        }
        // SIGKILL (std's `Child::kill`), mid-append: the moment is whatever the child is doing.
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("wait child");
        assert_eq!(
            status.signal(),
            Some(nix::sys::signal::Signal::SIGKILL as i32),
            "{ctx}: {status}; stderr:\n{}",
            stderr()
        );
        reader.join().expect("stdout reader");
        // Acks printed before the kill still count.
        acked.extend(rx.try_iter());
        let truth = Truth {
            options: options(durability, SEGMENT_BYTES),
            tenure: Tenure::Lasting,
            salt,
            acked,
            payload_of: &|index| child_payload_of(salt, index),
            damaged: None,
            probe_index: CHILD_THREADS * THREAD_STRIDE,
        };
        if let Err(message) = check_after_crash(&root, &truth) {
            panic!("{ctx}: {message}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Truncated or deleted tail segments.

/// Copies the files of `from`'s journal into a fresh root.
fn copy_root(from: &Path) -> tempfile::TempDir {
    let dir = workload_root();
    let journal = dir.path().join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    for entry in std::fs::read_dir(from.join("journal")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), journal.join(entry.file_name())).unwrap();
    }
    dir
}

/// Sorted values as runs (`1..=36 40 44..=52`), joining neighbours at most `step` apart.
fn ranges(values: &[u64], step: u64) -> String {
    if values.is_empty() {
        return "none".to_owned();
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] - values[j] <= step {
            j += 1;
        }
        out.push(if i == j {
            values[i].to_string()
        } else {
            format!("{}..={}", values[i], values[j])
        });
        i = j + 1;
    }
    out.join(" ")
}

/// Cut offsets as runs (every byte, or every 8th), `delete` for the deletion.
fn runs(cuts: &[Option<u64>]) -> String {
    let offsets: Vec<u64> = cuts.iter().flatten().copied().collect();
    let mut out = ranges(&offsets, 8);
    if cuts.contains(&None) {
        out.push_str(" delete");
    }
    out
}

/// Cutting the tail segment at any offset (every byte of the first 256, every 8th after), or
/// deleting it, never lets the next append reuse an acknowledged seq; a cut that loses
/// acknowledged records is reported as more than crash residue, both by verify and by the
/// writable open, and one that loses none (only zeroes) as no more than that. Acknowledged
/// records before the cut all stay.
#[test]
fn cutting_or_deleting_the_tail_segment_never_reuses_a_seq_and_reports_the_loss() {
    let salt = 11;
    let built = workload_root();
    let opts = options(Durability::Sync, SEGMENT_BYTES_MIN);
    let (journal, _) = Journal::open(built.path(), opts.clone()).unwrap();
    let mut positions = BTreeMap::new();
    let mut index = 0u64;
    // Three segments, the last with several records.
    while positions
        .values()
        .map(|(_, p): &(u64, Position)| p.segment_index)
        .max()
        .is_none_or(|s| s < 2)
        || positions
            .values()
            .filter(|(_, p)| p.segment_index == 2)
            .count()
            < 8
    {
        let len = 40 + (mix(index) % 300) as usize;
        let a = journal
            .append(
                event_id(salt, index),
                KIND,
                CODEC,
                &payload(salt, index, len),
            )
            .unwrap();
        positions.insert(a.position.seq, (index, a.position));
        index += 1;
    }
    drop(journal);
    let tail = segment_name(2);
    let tail_bytes = std::fs::read(built.path().join("journal").join(&tail)).unwrap();
    // The offset each record of the tail needs to survive a cut: one past its last non-zero
    // byte (a cut is read as zero-extended, so trailing zeroes are not lost).
    let needs: Vec<(u64, u64)> = positions
        .iter()
        .filter(|(_, (_, p))| p.segment_index == 2)
        .map(|(&seq, (_, p))| {
            let at = p.offset as usize;
            let (h, _) = format::decode_record(&tail_bytes[at..]).unwrap();
            let len = format::record_bytes(h.payload_bytes as usize);
            let end = tail_bytes[at..at + len]
                .iter()
                .rposition(|&b| b != 0)
                .map_or(at, |i| at + i + 1);
            (seq, end as u64)
        })
        .collect();
    let max_acked = *positions.keys().next_back().unwrap();
    let payload_of = |i: u64| (i < index).then(|| payload(salt, i, 40 + (mix(i) % 300) as usize));

    let cuts = (0..256u64)
        .chain((256..=SEGMENT_BYTES_MIN as u64).step_by(8))
        .map(Some)
        .chain([None]);
    // Failures by kind (the message with its numbers blanked), each with the cuts it hit, so
    // that a failure names every class of cut at once.
    let mut failures: BTreeMap<&str, (Vec<Option<u64>>, String)> = BTreeMap::new();
    let mut tried = 0;
    for cut in cuts {
        tried += 1;
        let root = copy_root(built.path());
        let path = root.path().join("journal").join(&tail);
        match cut {
            Some(len) => std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(len))
                .unwrap(),
            None => std::fs::remove_file(&path).unwrap(),
        }
        let lost: Vec<u64> = needs
            .iter()
            .filter(|(_, end)| cut.is_none_or(|c| c < *end))
            .map(|(seq, _)| *seq)
            .collect();
        // Every problem of this cut, not only the first.
        let mut problems = Vec::new();
        let mut check = |kind: &'static str, result: Result<(), String>| {
            if let Err(message) = result {
                problems.push((kind, message));
            }
        };
        let verify = JournalReader::open(root.path())
            .and_then(|r| r.verify())
            .expect("verify");
        let mut visited = Vec::new();
        let (journal, report) = Journal::open_visiting(root.path(), opts.clone(), |r| {
            visited.push(r.to_owned());
        })
        .expect("writable open");
        let truth = Truth {
            options: opts.clone(),
            tenure: Tenure::Lasting,
            salt,
            acked: positions
                .iter()
                .filter(|(seq, _)| !lost.contains(seq))
                .map(|(&seq, (i, _))| (seq, *i))
                .collect(),
            payload_of: &payload_of,
            damaged: None,
            probe_index: 1 << 40,
        };
        check(
            "an acknowledged record before the cut is missing",
            check_records("writable open", &visited, &truth).map(drop),
        );
        let a = journal
            .append(event_id(salt, 1 << 40), KIND, CODEC, b"after the cut")
            .expect("append after the cut");
        check(
            "a seq is reused",
            if a.position.seq > max_acked {
                Ok(())
            } else {
                Err(format!(
                    "the next append got seq {} but seqs up to {max_acked} were acknowledged",
                    a.position.seq
                ))
            },
        );
        for (who, r) in [("verify", &verify), ("the writable open", &report)] {
            if !lost.is_empty() && r.is_crash_residue_only() {
                check(
                    "the loss is reported as crash residue only",
                    Err(format!(
                        "{who}: acknowledged seqs {lost:?} are lost, but the report is only \
                         crash residue: {r:?}"
                    )),
                );
            }
            // A cut that took only zeroes took nothing: a short segment, not damage.
            if lost.is_empty() && !r.is_crash_residue_only() {
                check(
                    "a cut that lost nothing is reported as damage",
                    Err(format!("{who}: {r:?}")),
                );
            }
        }
        for (kind, message) in problems {
            let entry = failures
                .entry(kind)
                .or_insert_with(|| (Vec::new(), message));
            entry.0.push(cut);
        }
    }
    let summary: Vec<String> = failures
        .iter()
        .map(|(kind, (cuts, first))| {
            format!("{kind}: {} cuts ({}); e.g. {first}", cuts.len(), runs(cuts))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "of {tried} cuts of the tail segment (at these offsets, or its deletion):\n{}",
        summary.join("\n")
    );
}
