//! The durability proof: a child process appends to a journal and acknowledges each append on
//! stdout; the parent kills it with SIGKILL at a random moment, reopens the journal and checks that
//! every acknowledged event is still there, with its exact bytes, at the sequence number the child
//! acknowledged.
//!
//! The test binary is its own child: [`crash_child_appender`] is an ordinary `#[test]` that does
//! nothing unless `PROCJOURNAL_CRASH_CHILD` is set, in which case it is the appender. The parent
//! runs `current_exe() --exact journal_crash::crash_child_appender --nocapture
//! --test-threads=1` with that variable and the root, policy, thread count and first event index
//! in the environment.
//!
//! Every scenario runs many rounds on the same root, so each reopen recovers the residue of the
//! previous kill on top of everything earlier rounds left. Events are deterministic functions of
//! an index (ID, kind, codec version, payload with the index in its first 8 bytes), so the parent
//! can check every record on disk, acknowledged or not, against what the child meant to write.
//!
//! Randomness comes from a xorshift generator seeded by a base seed and the round number. The base
//! seed is printed at the start of each scenario and named in every failure message; set
//! `PROCJOURNAL_CRASH_SEED=<seed>` to replay a run (the kill schedule replays; where exactly a
//! kill lands still depends on the machine).
//!
//! The last test checks that a dropped writer releases its root while other threads spawn
//! processes, which the scenarios (parallel threads that each spawn children) rely on.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use procjournal::journal::reader::{JournalReader, Record};
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};

const CHILD_ENV: &str = "PROCJOURNAL_CRASH_CHILD";
const ROOT_ENV: &str = "PROCJOURNAL_CRASH_ROOT";
const POLICY_ENV: &str = "PROCJOURNAL_CRASH_POLICY";
const THREADS_ENV: &str = "PROCJOURNAL_CRASH_THREADS";
const START_ENV: &str = "PROCJOURNAL_CRASH_START";
const SEED_ENV: &str = "PROCJOURNAL_CRASH_SEED";
/// The name the harness knows the child entry point by (`--exact`).
const CHILD_TEST: &str = "crash_child_appender";

/// Small segments so that rotations (seal, create, rename, directory fsync) happen every few
/// records and get killed in the middle too.
const SEGMENT_BYTES: usize = 8192;
const ROUNDS: u64 = 50;
/// The parent kills after between 0 and this many acknowledgements.
const MAX_ACKS_BEFORE_KILL: u64 = 200;
/// Appends one child thread makes at most; never reached (the parent kills long before) but it
/// bounds a child whose parent vanished without closing its stdout.
const APPENDS_PER_THREAD_MAX: u64 = 100_000;
/// First index of round `r` is `(r + 1) * ROUND_INDEX_STRIDE`; thread `t` of a child uses
/// `start + t * APPENDS_PER_THREAD_MAX ..`. Indices therefore never repeat across rounds.
const ROUND_INDEX_STRIDE: u64 = 1_000_000;
const GROUP_THREADS: u64 = 4;
/// Turns a hung child (a deadlock in the writer) into a failure with diagnostics instead of a hung
/// test run. Nothing is asserted about how long anything takes: a healthy child acknowledges its
/// first append in milliseconds, so this only fires if it makes no progress at all.
const HANG_GUARD: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Deterministic events.

use crate::common::rng;
use rng::{XorShift, mix};

fn id_of(index: u64) -> EventId {
    let bits = (u128::from(mix(index)) << 64) | u128::from(index);
    EventId::from_bytes(bits.to_le_bytes())
}

fn kind_of(index: u64) -> EventKind {
    EventKind::new(1 + (index % 1000) as u16).expect("kinds are 1..=1000")
}

fn codec_of(index: u64) -> u8 {
    (index % 5) as u8
}

/// 8..408 bytes mostly; one in 32 is 2000..7900 bytes (up to about the per-journal limit of
/// 8 KiB segments), so that a large record often forces a rotation. The first 8 bytes are the
/// index.
fn payload_of(index: u64) -> Vec<u8> {
    let h = mix(index ^ 0x5EED);
    let len = if h.is_multiple_of(32) {
        2000 + (h >> 8) % 5900
    } else {
        8 + (h >> 8) % 400
    } as usize;
    let mut payload = Vec::with_capacity(len);
    payload.extend_from_slice(&index.to_le_bytes());
    let mut rng = XorShift::new(h);
    while payload.len() < len {
        payload.extend_from_slice(&rng.next().to_le_bytes());
    }
    payload.truncate(len);
    payload
}

fn options(durability: Durability) -> JournalOptions {
    JournalOptions {
        durability,
        segment_bytes: SEGMENT_BYTES,
    }
}

fn policy_name(durability: Durability) -> &'static str {
    match durability {
        Durability::Sync => "sync",
        Durability::Group => "group",
        Durability::Os => "os",
    }
}

fn env_u64(name: &str) -> u64 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The child.

/// The appender run in the child process. Without `PROCJOURNAL_CRASH_CHILD` in the environment it
/// returns at once: in an ordinary `cargo test` run it is a no-op that always passes, and it only
/// does work when a crash test below re-executes this binary with
/// `--exact journal_crash::crash_child_appender`.
///
/// As the child it opens the journal under `PROCJOURNAL_CRASH_ROOT` with the policy of
/// `PROCJOURNAL_CRASH_POLICY`, and each of `PROCJOURNAL_CRASH_THREADS` threads appends events with
/// indices `PROCJOURNAL_CRASH_START + t * APPENDS_PER_THREAD_MAX + k`, printing `ack <seq> <index>`
/// and flushing stdout after each append returned `Ok`, until the parent kills the process.
#[test]
fn crash_child_appender() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let root = PathBuf::from(std::env::var_os(ROOT_ENV).expect("PROCJOURNAL_CRASH_ROOT"));
    let durability = match std::env::var(POLICY_ENV)
        .expect("PROCJOURNAL_CRASH_POLICY")
        .as_str()
    {
        "sync" => Durability::Sync,
        "group" => Durability::Group,
        "os" => Durability::Os,
        other => panic!("unknown policy {other}"),
    };
    let threads = env_u64(THREADS_ENV);
    let start = env_u64(START_ENV);
    // The harness may have printed "test crash_child_appender ... " without a newline: end that
    // line so every acknowledgement starts a line of its own.
    {
        let mut out = std::io::stdout().lock();
        writeln!(out).expect("stdout");
        out.flush().expect("stdout");
    }
    let (journal, _report) = Journal::open(&root, options(durability)).expect("child: open");
    std::thread::scope(|scope| {
        for t in 0..threads {
            let journal = &journal;
            scope.spawn(move || {
                for k in 0..APPENDS_PER_THREAD_MAX {
                    let index = start + t * APPENDS_PER_THREAD_MAX + k;
                    let appended = journal
                        .append(
                            id_of(index),
                            kind_of(index),
                            codec_of(index),
                            &payload_of(index),
                        )
                        .expect("child: append");
                    assert!(appended.written, "child: index {index} was already present");
                    let mut out = std::io::stdout().lock();
                    // A failed write means the parent is gone: stop quietly.
                    if writeln!(out, "ack {} {index}", appended.position.seq).is_err()
                        || out.flush().is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The parent.

#[derive(Debug, Clone, Copy)]
struct Ack {
    seq: u64,
    index: u64,
}

fn parse_ack(line: &str) -> Option<Ack> {
    let rest = line.strip_prefix("ack ")?;
    let (seq, index) = rest.trim_end().split_once(' ')?;
    Some(Ack {
        seq: seq.parse().ok()?,
        index: index.parse().ok()?,
    })
}

/// Totals of one scenario, printed at its end.
#[derive(Debug, Default)]
struct Tally {
    rounds: u64,
    kills: u64,
    acks: u64,
    unacked_survivors: u64,
    torn_tails: u64,
    records: u64,
    segments: u64,
}

struct Scenario {
    name: &'static str,
    durability: Durability,
    threads: u64,
}

fn base_seed() -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().unwrap_or_else(|e| panic!("{SEED_ENV}: {e}")),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            mix(nanos ^ u64::from(std::process::id()))
        }
    }
}

fn stderr_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no stderr: {e})"))
}

fn spawn_child(scenario: &Scenario, root: &Path, start: u64, stderr_path: &Path) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    let stderr = File::create(stderr_path).expect("create child stderr file");
    Command::new(exe)
        .args([
            "--exact",
            &crate::common::harness_name(module_path!(), CHILD_TEST),
        ])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env(ROOT_ENV, root)
        .env(POLICY_ENV, policy_name(scenario.durability))
        .env(THREADS_ENV, scenario.threads.to_string())
        .env(START_ENV, start.to_string())
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("spawn child")
}

/// One round: spawn, wait for `kill_after` acks, wait `delay`, SIGKILL, reap. Returns every ack
/// the child printed before it died (also those after `kill_after`).
fn crash_once(
    scenario: &Scenario,
    root: &Path,
    start: u64,
    kill_after: u64,
    delay: Duration,
    stderr_path: &Path,
    ctx: &str,
) -> Vec<Ack> {
    let mut child = spawn_child(scenario, root, start, stderr_path);
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel::<Ack>();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            // Only whole lines count; acks are single short writes, so they are never split.
            if !line.ends_with('\n') {
                continue;
            }
            if line.starts_with("ack ") {
                let ack = parse_ack(&line).unwrap_or_else(|| panic!("malformed ack line {line:?}"));
                if tx.send(ack).is_err() {
                    return;
                }
            }
        }
    });

    let mut acks = Vec::new();
    while (acks.len() as u64) < kill_after {
        match rx.recv_timeout(HANG_GUARD) {
            Ok(ack) => acks.push(ack),
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().expect("wait child");
                panic!(
                    "{ctx}: the child ended by itself ({status}) after {} acks, before the kill; \
                     its stderr:\n{}",
                    acks.len(),
                    stderr_of(stderr_path)
                );
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                panic!(
                    "{ctx}: the child made no progress for {HANG_GUARD:?} after {} acks \
                     (deadlock?); its stderr:\n{}",
                    acks.len(),
                    stderr_of(stderr_path)
                );
            }
        }
    }
    if !delay.is_zero() {
        // Not waiting for a condition: the delay is the random kill moment itself.
        std::thread::sleep(delay);
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).expect("SIGKILL the child");
    let status = child.wait().expect("wait child");
    assert_eq!(
        status.signal(),
        Some(Signal::SIGKILL as i32),
        "{ctx}: the child was expected to die of SIGKILL but ended with {status}; its stderr:\n{}",
        stderr_of(stderr_path)
    );
    reader.join().expect("stdout reader thread");
    acks.extend(rx.try_iter());
    acks
}

/// The event index a record's payload starts with (0 if it is too short to hold one).
fn index_in(record: &Record) -> u64 {
    record
        .payload
        .get(..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// Checks one record against the deterministic event its payload names; returns the index.
fn check_record(record: &Record, ctx: &str) -> u64 {
    assert!(
        record.payload.len() >= 8,
        "{ctx}: record seq {} has a payload of {} bytes, no index",
        record.position.seq,
        record.payload.len()
    );
    let index = index_in(record);
    assert_eq!(
        record.event_id,
        id_of(index),
        "{ctx}: seq {} index {index}: wrong event ID",
        record.position.seq
    );
    assert_eq!(
        record.kind,
        kind_of(index).get(),
        "{ctx}: seq {}",
        record.position.seq
    );
    assert_eq!(
        record.codec_version,
        codec_of(index),
        "{ctx}: seq {}",
        record.position.seq
    );
    assert!(
        record.payload == payload_of(index),
        "{ctx}: seq {} index {index}: payload differs from what was appended",
        record.position.seq
    );
    index
}

/// Reopens the journal writable after a kill and checks what recovery reports and what the writer
/// says; closes it and checks a read-only scan: clean, gapless, every record the deterministic
/// event it names, every acknowledged event at its acknowledged seq. `previous` are the records
/// checked after the previous round: they must all still be there, unchanged. Returns the records.
fn verify_after_crash(
    root: &Path,
    acked: &BTreeMap<u64, u64>,
    previous: &[Record],
    tally: &mut Tally,
    ctx: &str,
) -> Vec<Record> {
    let (journal, report) = Journal::open(root, options(Durability::Sync))
        .unwrap_or_else(|e| panic!("{ctx}: reopening after the kill failed: {e}"));
    assert!(
        report.is_crash_residue_only(),
        "{ctx}: recovery found more than crash residue: {report:?}"
    );
    assert!(
        report.torn_tails.len() <= 1,
        "{ctx}: a crash leaves at most one torn tail: {report:?}"
    );
    assert!(
        report.torn_tails.iter().all(|t| t.zeroed),
        "{ctx}: a writable open zeroes the torn tail: {report:?}"
    );
    tally.torn_tails += report.torn_tails.len() as u64;
    let last = journal.last_seq();
    assert_eq!(
        journal.durable_seq(),
        last,
        "{ctx}: after recovery everything on disk is durable"
    );
    assert_eq!(report.last_seq.unwrap_or(0), last, "{ctx}: report.last_seq");
    assert_eq!(report.records, last, "{ctx}: report.records");
    // The writer's ID index, rebuilt by recovery, must place every acknowledged event at its seq.
    for (&seq, &index) in acked {
        let position = journal.position_of(id_of(index));
        assert_eq!(
            position.map(|p| p.seq),
            Some(seq),
            "{ctx}: position_of(acknowledged index {index}) after recovery (journal ends at {last})"
        );
    }
    drop(journal);

    let (records, scan) = JournalReader::open(root)
        .and_then(|reader| reader.records(1))
        .expect("read-only scan");
    assert!(
        scan.is_clean(),
        "{ctx}: a read-only scan after the writable open repaired the residue: {scan:?}"
    );
    tally.segments = scan.segments;
    assert_eq!(
        records.len() as u64,
        last,
        "{ctx}: the read-only scan and the writer disagree on the number of records"
    );
    for (i, record) in records.iter().enumerate() {
        assert_eq!(
            record.position.seq,
            i as u64 + 1,
            "{ctx}: records are not gapless 1..=last"
        );
    }
    assert!(
        records.len() >= previous.len(),
        "{ctx}: the journal shrank from {} to {} records",
        previous.len(),
        records.len()
    );
    // Earlier rounds' records were checked one by one already: they must be byte-for-byte the same
    // (position, ID, kind, codec version, payload) after this crash and this recovery.
    if let Some(i) = (0..previous.len()).find(|&i| records[i] != previous[i]) {
        panic!(
            "{ctx}: seq {} changed after this crash: was {:?}, now {:?}",
            i + 1,
            previous[i],
            records[i].position
        );
    }
    let mut ids: HashSet<EventId> = previous.iter().map(|r| r.event_id).collect();
    for record in &records[previous.len()..] {
        check_record(record, ctx);
        assert!(
            ids.insert(record.event_id),
            "{ctx}: event ID of seq {} repeats",
            record.position.seq
        );
    }
    for (&seq, &index) in acked {
        let record = records.get(seq as usize - 1).unwrap_or_else(|| {
            panic!(
                "{ctx}: acknowledged seq {seq} (index {index}) is missing; the journal ends at \
                 seq {last}"
            )
        });
        // Every record was checked against the event its first 8 bytes name (this round or an
        // earlier one), so matching the index matches ID, kind, codec version and payload.
        let found = index_in(record);
        assert_eq!(
            found, index,
            "{ctx}: acknowledged seq {seq} should hold index {index} but holds index {found}"
        );
    }
    records
}

fn run_scenario(scenario: &Scenario) {
    let seed = base_seed();
    println!(
        "{}: base seed {seed} (replay with {SEED_ENV}={seed})",
        scenario.name
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let mut acked: BTreeMap<u64, u64> = BTreeMap::new();
    let mut tally = Tally::default();
    let mut records: Vec<Record> = Vec::new();
    for round in 0..ROUNDS {
        let last = records.len() as u64;
        let ctx = format!(
            "scenario {} base seed {seed} ({SEED_ENV}={seed}) round {round}",
            scenario.name
        );
        let mut rng = XorShift::new(seed ^ mix(round.wrapping_add(1)));
        // One round in eight kills around start-up (opening, recovery, first appends); the others
        // after 1..=MAX acks, half of them a little later still.
        let (kill_after, delay_us) = if rng.below(8) == 0 {
            (0, rng.below(20_000))
        } else {
            // Skewed towards short runs (mean about MAX / 4) so that the journal, which every
            // round scans several times, stays small; long runs still come up.
            let bound = 1 + rng.below(MAX_ACKS_BEFORE_KILL);
            let n = 1 + rng.below(bound);
            (
                n,
                if rng.below(2) == 0 {
                    0
                } else {
                    rng.below(2_000)
                },
            )
        };
        let ctx = format!("{ctx} (kill after {kill_after} acks + {delay_us} us)");
        let start = (round + 1) * ROUND_INDEX_STRIDE;
        let stderr_path = dir.path().join(format!("child-{round}.stderr"));
        let acks = crash_once(
            scenario,
            &root,
            start,
            kill_after,
            Duration::from_micros(delay_us),
            &stderr_path,
            &ctx,
        );
        tally.kills += 1;
        tally.acks += acks.len() as u64;

        // What the child claimed, checked before looking at the disk.
        let mut round_seqs = HashSet::new();
        for (k, ack) in acks.iter().enumerate() {
            assert!(
                ack.seq > last,
                "{ctx}: ack of seq {} is not after the previous end {last}",
                ack.seq
            );
            assert!(
                round_seqs.insert(ack.seq),
                "{ctx}: seq {} acknowledged twice",
                ack.seq
            );
            assert!(
                ack.index
                    .checked_sub(start)
                    .is_some_and(|o| o / APPENDS_PER_THREAD_MAX < scenario.threads),
                "{ctx}: ack of an index {} this child does not own",
                ack.index
            );
            if scenario.threads == 1 {
                // One appender: acks come in append order with consecutive seqs.
                assert_eq!(
                    (ack.seq, ack.index),
                    (last + 1 + k as u64, start + k as u64),
                    "{ctx}"
                );
            }
            assert!(
                acked.insert(ack.seq, ack.index).is_none(),
                "{ctx}: seq {} acknowledged in two rounds",
                ack.seq
            );
        }

        records = verify_after_crash(&root, &acked, &records, &mut tally, &ctx);
        let new_last = records.len() as u64;
        // Records of this round beyond the acks: each appender thread can have at most one
        // record written but not yet acknowledged when the kill came.
        let survivors = new_last - last;
        let unacked = survivors.checked_sub(acks.len() as u64).unwrap_or_else(|| {
            panic!(
                "{ctx}: {} acks but only {survivors} new records",
                acks.len()
            )
        });
        assert!(
            unacked <= scenario.threads,
            "{ctx}: {unacked} unacknowledged records survived with {} appender threads",
            scenario.threads
        );
        for record in &records[last as usize..] {
            let index = index_in(record);
            assert!(
                index
                    .checked_sub(start)
                    .is_some_and(|o| o / APPENDS_PER_THREAD_MAX < scenario.threads),
                "{ctx}: seq {} holds index {index}, not one of this round's",
                record.position.seq
            );
            if scenario.threads == 1 {
                assert_eq!(
                    index - start,
                    record.position.seq - last - 1,
                    "{ctx}: append order"
                );
            }
        }
        tally.unacked_survivors += unacked;
        tally.rounds += 1;
        tally.records = new_last;
    }
    println!("{}: {tally:?}", scenario.name);
    assert_eq!(tally.kills, ROUNDS);
    assert!(
        tally.acks > 0,
        "no round acknowledged anything: the test proved nothing"
    );
}

/// `Durability::Sync`, one appender: every acknowledged append was flushed before its ack.
#[test]
fn sigkill_during_sync_appends_loses_no_acknowledged_event() {
    run_scenario(&Scenario {
        name: "sync",
        durability: Durability::Sync,
        threads: 1,
    });
}

/// `Durability::Group` with several appender threads sharing flushes: every acknowledged append
/// was covered by a flush before its ack, whichever thread led it.
#[test]
fn sigkill_during_group_commit_loses_no_acknowledged_event() {
    run_scenario(&Scenario {
        name: "group",
        durability: Durability::Group,
        threads: GROUP_THREADS,
    });
}

/// `Durability::Os`: an ack only means the record is in the page cache, which a process crash
/// does not lose (the kernel still writes the pages the killed process dirtied through its shared
/// mapping). So after SIGKILL the reopened journal must still be a consistent, gapless prefix that
/// contains every acknowledged event. Power loss is out of scope here: under `Os` it may lose
/// acknowledged events, and nothing in this test claims otherwise.
#[test]
fn sigkill_during_os_appends_keeps_every_acknowledged_event_in_the_page_cache() {
    run_scenario(&Scenario {
        name: "os",
        durability: Durability::Os,
        threads: 1,
    });
}

/// Dropping a writer must release its root at once, also when another thread of the process is
/// spawning processes at the time (which a supervisor does all day). A spawned child holds copies
/// of the parent's descriptors from its fork until its `exec`; if the writer's `LOCK` descriptor
/// was open at the fork, the child's copy keeps the `flock` of that open file description after the
/// writer closed its own, and the next `Journal::open` in this process fails with `Locked`.
///
/// Regression: `Root` used to rely on the close of its descriptor; it now unlocks explicitly in
/// `Drop`, which releases the lock whatever copies of the descriptor exist.
#[test]
fn a_dropped_writer_releases_the_root_while_another_thread_spawns_processes() {
    const CYCLES_MIN: u64 = 200;
    const SPAWNS_MIN: u64 = 50;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    drop(Journal::open(root, options(Durability::Os)).expect("create the journal"));
    let stop = AtomicBool::new(false);
    let spawned = AtomicU64::new(0);
    let (cycles, failures, first_failure) = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut child = Command::new("true")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn true");
                child.wait().expect("wait true");
                spawned.fetch_add(1, Ordering::Relaxed);
            }
        });
        let mut cycles = 0u64;
        let mut failures = 0u64;
        let mut first_failure = None;
        // Enough open/drop cycles, with enough spawns among them to have overlapped some.
        while cycles < CYCLES_MIN || spawned.load(Ordering::Relaxed) < SPAWNS_MIN {
            match Journal::open(root, options(Durability::Os)) {
                Ok((journal, report)) => {
                    assert!(report.is_clean(), "{report:?}");
                    drop(journal);
                }
                Err(e) => {
                    failures += 1;
                    first_failure.get_or_insert_with(|| e.to_string());
                }
            }
            cycles += 1;
        }
        stop.store(true, Ordering::Relaxed);
        (cycles, failures, first_failure)
    });
    assert_eq!(
        failures,
        0,
        "{failures} of {cycles} reopens of a root whose writer had been dropped failed while \
         another thread spawned {} processes; the first: {}",
        spawned.load(Ordering::Relaxed),
        first_failure.unwrap_or_default()
    );
}
