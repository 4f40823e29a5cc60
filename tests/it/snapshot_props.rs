//! Property tests of snapshots (src/lifecycle/snapshot.rs) and of restoring from them.
//!
//! - Round trip: any store the validator builds from random events (random commands with any
//!   Unicode, every event kind, rejections ignored), with random retained IDs and replay issues,
//!   encodes to a snapshot that decodes to the same store, IDs and report, and re-encodes to the
//!   same bytes; the decoder by hand decodes it as bincode's derived decoder does.
//! - Differential: on every input of the totality properties below, the decoder by hand and the
//!   reference decoder agree, value for value and error for error (`fuzzing::snapshot_decode`).
//! - Totality: the decoder never panics on random bytes, nor on a real snapshot with random bytes
//!   flipped, inserted or removed, with or without its checksums fixed up (the fuzz target's
//!   body, `fuzzing::snapshot_decode`, which also checks that whatever decodes re-encodes to its
//!   bytes).
//! - Restore: the workload appended through a `Lifecycle` with snapshots, compactions, reopens and
//!   snapshots cut short at a random step, in a random order, always reopens to the store (and
//!   replay counts) of a full replay of a mirror root that was never snapshotted.

use std::path::Path;

use procjournal::journal::CrashPoints;
use procjournal::journal::reader::JournalReader;
use procjournal::lifecycle::event::*;
use procjournal::lifecycle::replay::ReplayIssue;
use procjournal::lifecycle::snapshot::RetainedStep;
use procjournal::lifecycle::{
    Lifecycle, LifecycleEvent, ManifestStore, ReplayReport, Replayer, State, snapshot, workload,
};
use procjournal::spool::{Gap, LossReason};
use procjournal::{Durability, EventId, JournalOptions};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

fn id(h: u8, k: u8) -> EventId {
    let mut b = [0u8; 16];
    b[0] = 0x11;
    b[1] = h;
    b[2] = k;
    EventId::from_bytes(b)
}

fn ids(h: u8) -> LifecycleIds {
    LifecycleIds {
        running: id(h, 1),
        terminal: id(h, 2),
        lost: id(h, 3),
        completion: id(h, 4),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Register(u8, CommandSpec),
    Running(u8, u32),
    Stop(u8, String, String),
    Close(u8),
    Checkpoint(u8, u64, u64),
    Gap(u8, u64, u64),
    Terminal(u8, usize, String, u8),
    Lost(u8),
    Publish(u8, u8),
    Complete(u8),
    Scope(u8, Option<String>),
    Release(u8, u8),
    Retire(u8, String),
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,12}"
}

fn command() -> impl Strategy<Value = CommandSpec> {
    (
        text(),
        vec(text(), 0..4),
        text(),
        vec((text(), text()), 0..3),
        btree_map(text(), text(), 0..3),
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
        ),
        text(),
    )
        .prop_map(
            |(program, args, cwd, env_overrides, labels, (wall, idle), owner)| CommandSpec {
                program,
                args,
                cwd,
                env_overrides,
                labels,
                limits: Limits {
                    wall_clock_ms: wall,
                    idle_ms: idle,
                    output_retention_bytes: None,
                },
                owner,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0u8..5;
    prop_oneof![
        2 => (h.clone(), command()).prop_map(|(h, c)| Op::Register(h, c)),
        1 => (h.clone(), any::<u32>()).prop_map(|(h, p)| Op::Running(h, p)),
        1 => (h.clone(), text(), text()).prop_map(|(h, a, b)| Op::Stop(h, a, b)),
        1 => h.clone().prop_map(Op::Close),
        1 => (h.clone(), 0u64..500, 0u64..1000).prop_map(|(h, r, t)| Op::Checkpoint(h, r, t)),
        1 => (h.clone(), 0u64..1000, 1u64..50).prop_map(|(h, f, l)| Op::Gap(h, f, l)),
        1 => (h.clone(), 0usize..9, text(), 0u8..3).prop_map(|(h, s, r, c)| Op::Terminal(h, s, r, c)),
        1 => h.clone().prop_map(Op::Lost),
        1 => (h.clone(), 0u8..3).prop_map(|(h, w)| Op::Publish(h, w)),
        1 => h.clone().prop_map(Op::Complete),
        1 => (h.clone(), proptest::option::of(text())).prop_map(|(h, c)| Op::Scope(h, c)),
        1 => (h.clone(), 0u8..3).prop_map(|(h, p)| Op::Release(h, p)),
        1 => (h, text()).prop_map(|(h, reason)| Op::Retire(h, reason)),
    ]
}

/// The event an op stands for, with its ID (allocated IDs for the steps, fresh ones otherwise).
fn concrete(n: usize, op: &Op) -> (EventId, LifecycleEvent) {
    let fresh = {
        let mut b = [0u8; 16];
        b[0] = 0x22;
        b[8..].copy_from_slice(&(n as u64).to_le_bytes());
        EventId::from_bytes(b)
    };
    let handle = |h: u8| Handle(id(h, 0));
    match op.clone() {
        Op::Register(h, command) => (
            id(h, 5),
            LifecycleEvent::Registered(Registered {
                handle: handle(h),
                ids: ids(h),
                command,
                at_unix_ms: n as u64,
            }),
        ),
        Op::Running(h, pid) => (
            ids(h).running,
            LifecycleEvent::Running(Running {
                handle: handle(h),
                pid,
                witness: IdentityWitness {
                    start_time_ticks: u64::from(pid) * 3,
                    boot_id: [h; 16],
                },
                at_unix_ms: n as u64,
            }),
        ),
        Op::Stop(h, reason, requested_by) => (
            fresh,
            LifecycleEvent::StopRequested(StopRequested {
                handle: handle(h),
                reason,
                requested_by,
                at_unix_ms: n as u64,
            }),
        ),
        Op::Close(h) => (
            fresh,
            LifecycleEvent::InputClosed(InputClosed {
                handle: handle(h),
                at_unix_ms: n as u64,
            }),
        ),
        Op::Checkpoint(h, r, t) => (
            fresh,
            LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle: handle(h),
                bounds: CursorBounds {
                    retained_from: r,
                    total_bytes: t,
                },
                at_unix_ms: n as u64,
            }),
        ),
        Op::Gap(h, from, len) => (
            fresh,
            LifecycleEvent::OutputGap(OutputGap {
                handle: handle(h),
                gap: Gap {
                    from,
                    to: from + len,
                    reason: if len % 2 == 0 {
                        LossReason::DiskFull
                    } else {
                        LossReason::IoError
                    },
                    errno: len as i32,
                },
                at_unix_ms: n as u64,
            }),
        ),
        Op::Terminal(h, state, reason, capture) => (
            ids(h).terminal,
            LifecycleEvent::Terminal(Terminal {
                handle: handle(h),
                state: State::ALL[state],
                exit: ExitStatus::Signal(state as i32),
                bounds: CursorBounds {
                    retained_from: 0,
                    total_bytes: 2000,
                },
                capture: match capture {
                    0 => CaptureStatus::Complete,
                    1 => CaptureStatus::Incomplete(reason.clone()),
                    _ => CaptureStatus::Failed(reason.clone()),
                },
                reason,
                at_unix_ms: n as u64,
            }),
        ),
        Op::Lost(h) => (
            ids(h).lost,
            LifecycleEvent::LostOnRestore(LostOnRestore {
                handle: handle(h),
                bounds: CursorBounds {
                    retained_from: 0,
                    total_bytes: 2000,
                },
                at_unix_ms: n as u64,
            }),
        ),
        Op::Publish(h, which) => {
            let event = [ids(h).running, ids(h).terminal, ids(h).lost][which as usize];
            (
                event.derived(derived::PUBLISHED),
                LifecycleEvent::LifecyclePublished(LifecyclePublished {
                    handle: handle(h),
                    event,
                }),
            )
        }
        Op::Complete(h) => (
            ids(h).completion.derived(derived::NOTIFIED),
            LifecycleEvent::CompletionNotified(CompletionNotified {
                handle: handle(h),
                command: ids(h).completion,
            }),
        ),
        // Every shape of a scope (mechanism, guardian, cgroup, receipt), for the decoders.
        Op::Scope(h, cgroup) => (
            ids(h).running.derived(derived::SCOPED),
            LifecycleEvent::Scoped(Scoped {
                handle: handle(h),
                mechanism: [
                    TreeMechanism::Group,
                    TreeMechanism::Guardian,
                    TreeMechanism::Cgroup,
                ][n % 3],
                boot_id: [h; 16],
                workload: ProcessWitness {
                    pid: 7,
                    start_time_ticks: 8,
                    pidfs_ino: 9,
                },
                guardian: (n % 2 == 1).then_some(ProcessWitness {
                    pid: 70,
                    start_time_ticks: 80,
                    pidfs_ino: n as u64,
                }),
                receipt: cgroup.as_ref().map(|c| ReceiptBinding {
                    path: format!("{c}/receipt"),
                    dev: 3,
                    ino: n as u64,
                    nonce: [n as u8; 16],
                }),
                cgroup,
                at_unix_ms: n as u64,
            }),
        ),
        Op::Release(h, proof) => (
            ids(h).terminal.derived(derived::RELEASED),
            LifecycleEvent::TreeReleased(TreeReleased {
                handle: handle(h),
                proof: match proof {
                    0 => ExitProof::CgroupEmpty,
                    1 => ExitProof::BootChanged,
                    _ => ExitProof::Receipt {
                        status: ExitStatus::Code(1),
                        reaped: 3,
                    },
                },
                at_unix_ms: n as u64,
            }),
        ),
        Op::Retire(h, reason) => (
            ids(h).terminal.derived(derived::RETIRED),
            LifecycleEvent::OutputRetired(OutputRetired {
                handle: handle(h),
                reason,
                at_unix_ms: n as u64,
            }),
        ),
    }
}

fn issue() -> impl Strategy<Value = ReplayIssue> {
    (1u64..1000, proptest::option::of(text()), text())
        .prop_map(|(seq, handle, error)| ReplayIssue { seq, handle, error })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn a_snapshot_of_any_store_round_trips(
        ops in vec(op(), 0..60),
        retained in vec((any::<prop::sample::Index>(), 0u8..11, 1u64..=1000, 1u16..), 0..50),
        rejected in vec(issue(), 0..3),
        undecodable in vec(issue(), 0..3),
        counts in (any::<u64>(), any::<u64>()),
        seq in 1000u64..2000,
        journal_id in any::<[u8; 16]>(),
    ) {
        let mut store = ManifestStore::new();
        for (n, op) in ops.iter().enumerate() {
            let (event_id, event) = concrete(n, op);
            let _ = store.apply(event_id, &event);
        }
        // Any candidates of any manifests, ascending, each once, as a persist finds them.
        let mut retained: Vec<RetainedStep> = if store.is_empty() {
            Vec::new()
        } else {
            retained
                .into_iter()
                .map(|(m, which, seq, kind)| RetainedStep {
                    manifest: m.index(store.len()) as u32,
                    which,
                    seq,
                    kind,
                })
                .collect()
        };
        retained.sort();
        retained.dedup_by_key(|r| (r.manifest, r.which));
        let replay = ReplayReport {
            lifecycle_events: counts.0,
            other_events: counts.1,
            rejected,
            undecodable,
            ..ReplayReport::default()
        };
        let bytes = snapshot::encode(journal_id, seq, 42, &store, &retained, &replay).unwrap();
        let back = snapshot::decode(&bytes).unwrap();
        // The decoder by hand against bincode's derived one.
        let reference = snapshot::decode_reference(&bytes).unwrap();
        prop_assert_eq!(&reference.store, &back.store);
        prop_assert_eq!(&reference.retained, &back.retained);
        prop_assert_eq!(&back.store, &store);
        prop_assert_eq!(&back.retained, &retained);
        prop_assert_eq!(&back.replay, &replay);
        let again =
            snapshot::encode(journal_id, seq, 42, &back.store, &back.retained, &back.replay)
                .unwrap();
        prop_assert_eq!(again, bytes);
    }

    #[test]
    fn the_decoder_is_total_on_random_bytes(bytes in vec(any::<u8>(), 0..3000)) {
        procjournal::fuzzing::snapshot_decode(&bytes);
    }

    #[test]
    fn the_decoder_is_total_on_a_damaged_snapshot(
        events in 0u64..60,
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let original = procjournal::fuzzing::workload_snapshot(events);
        let mut bytes = original.clone();
        for (at, value, how) in edits {
            let i = at.index(bytes.len() + 1);
            match how {
                0 if i < bytes.len() => bytes[i] ^= value | 1,
                1 => bytes.insert(i, value),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => bytes.push(value),
            }
        }
        // Both as damaged and behind a header fixed up to vouch for it.
        procjournal::fuzzing::snapshot_decode(&bytes);
        // Damage is always caught: never a different valid snapshot.
        if snapshot::decode(&bytes).is_ok() {
            prop_assert_eq!(bytes, original);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Restore

fn options() -> JournalOptions {
    JournalOptions {
        durability: Durability::Os,
        segment_bytes: 4096 * 2,
    }
}

#[derive(Debug, Clone)]
enum Step {
    Append(u64),
    Snapshot,
    Reopen,
    /// A snapshot cut short before its `n`-th file-system step, then a reopen.
    Crash(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u64..80).prop_map(Step::Append),
        2 => Just(Step::Snapshot),
        1 => Just(Step::Reopen),
        1 => (0usize..16).prop_map(Step::Crash),
    ]
}

struct CrashAt(usize, usize);

impl CrashPoints for CrashAt {
    fn reached(&mut self, step: &'static str) -> std::io::Result<()> {
        if self.0 == self.1 {
            return Err(std::io::Error::other(format!(
                "simulated crash before {step}"
            )));
        }
        self.1 += 1;
        Ok(())
    }
}

fn full_replay(root: &Path) -> (ManifestStore, ReplayReport) {
    let mut replayer = Replayer::default();
    JournalReader::open(root)
        .unwrap()
        .scan(1, |r| replayer.feed(&r))
        .unwrap();
    replayer.finish()
}

fn mirror(events: u64) -> (ManifestStore, ReplayReport) {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
        for n in 0..events {
            let (id, event) = workload::event(n);
            lc.append(id, &event).unwrap();
        }
    }
    full_replay(dir.path())
}

fn check_open(root: &Path, events: u64, context: &str) -> Result<Lifecycle, TestCaseError> {
    let (lc, recovery, replay) = Lifecycle::open(root, options()).unwrap();
    prop_assert!(
        recovery.is_crash_residue_only(),
        "{}: {:?}",
        context,
        recovery
    );
    prop_assert!(recovery.gaps.is_empty(), "{}: {:?}", context, recovery);
    prop_assert!(replay.is_clean(), "{}: {:?}", context, replay);
    prop_assert_eq!(lc.journal().last_seq(), events, "{}", context);
    let (want, want_report) = mirror(events);
    prop_assert!(
        *lc.store() == want,
        "{}: the store differs from the full replay",
        context
    );
    prop_assert_eq!(replay.of_records(), want_report, "{}", context);
    Ok(lc)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_order_of_snapshots_crashes_and_reopens_restores_the_full_replay(
        steps in vec(step(), 1..14),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut events = 0u64;
        let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
        for (i, s) in steps.iter().enumerate() {
            let context = format!("step {i} of {steps:?}");
            match s {
                Step::Append(k) => {
                    for n in events..events + k {
                        let (id, event) = workload::event(n);
                        prop_assert!(lc.append(id, &event).unwrap().written, "{}", context);
                    }
                    events += k;
                }
                Step::Snapshot => {
                    lc.snapshot_now().unwrap();
                }
                Step::Reopen => {
                    drop(lc);
                    lc = check_open(dir.path(), events, &context)?;
                }
                Step::Crash(at) => {
                    let _ = lc.snapshot_now_with(&mut CrashAt(*at, 0));
                    drop(lc);
                    lc = check_open(dir.path(), events, &context)?;
                }
            }
        }
        drop(lc);
        let lc = check_open(dir.path(), events, "at the end")?;
        // Every retried step of the first process is still recognised.
        drop(lc);
        let (mut lc, _, _) = Lifecycle::open(dir.path(), options()).unwrap();
        for n in 0..events.min(workload::LANES * workload::PHASES) {
            let (id, event) = workload::event(n);
            if workload::under_a_fresh_id(&event) {
                continue;
            }
            prop_assert!(!lc.append(id, &event).unwrap().written, "retry of event {}", n);
        }
        prop_assert_eq!(lc.journal().last_seq(), events);
    }
}

// ---------------------------------------------------------------------------------------------
// journal-format.md's layout tables of the floor and snapshot headers, against the bytes the code
// writes.

/// `(field, offset, width)` rows of the first table after `heading` whose header row starts with
/// `| offset | width | field |` (as in tests/it/format_doc.rs).
fn layout_table(heading: &str) -> Vec<(String, usize, usize)> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("journal-format.md"))
            .unwrap();
    let after = doc
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no {heading:?}"))
        .1;
    let mut lines = after
        .lines()
        .skip_while(|l| !l.starts_with("| offset | width | field |"))
        .skip(2);
    let mut rows = Vec::new();
    while let Some(line) = lines.next().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        rows.push((
            cells[3].trim_matches('`').to_owned(),
            cells[1].parse().unwrap(),
            cells[2].parse().unwrap(),
        ));
    }
    rows
}

/// Checks that each documented field of `bytes` holds `expected(field)` (little-endian, at its
/// width), that the rows tile 0..64, and that the last four bytes are the masked CRC of the rest.
fn check_layout(rows: &[(String, usize, usize)], bytes: &[u8], expected: impl Fn(&str) -> Vec<u8>) {
    let mut at = 0;
    for (field, offset, width) in rows {
        assert_eq!(*offset, at, "{field} does not follow the field before it");
        at += width;
        if field.ends_with("crc") && offset + width == 64 {
            let crc = procjournal::journal::format::masked_crc(&bytes[..60]);
            assert_eq!(&bytes[60..64], &crc.to_le_bytes(), "{field}");
            continue;
        }
        assert_eq!(
            &bytes[*offset..offset + width],
            &expected(field)[..],
            "{field} at {offset}"
        );
    }
    assert_eq!(at, 64);
}

#[test]
fn the_floor_and_snapshot_header_tables_match_the_bytes() {
    use procjournal::journal::Floor;
    use procjournal::lifecycle::snapshot::SnapshotHeader;
    let floor = Floor {
        journal_id: [0x11; 16],
        segment_index: 0x0102_0304,
        seq: 0x0506_0708_090a,
        created_unix_ms: 0x0b0c_0d0e_0f10,
    };
    check_layout(
        &layout_table("### The floor file"),
        &floor.encode(),
        |f| match f {
            "magic" => b"PJFLOOR\0".to_vec(),
            "version" => 1u16.to_le_bytes().to_vec(),
            "floor_bytes" => 64u16.to_le_bytes().to_vec(),
            "reserved" => vec![0; 4],
            "journal_id" => vec![0x11; 16],
            "segment_index" => floor.segment_index.to_le_bytes().to_vec(),
            "seq" => floor.seq.to_le_bytes().to_vec(),
            "created_unix_ms" => floor.created_unix_ms.to_le_bytes().to_vec(),
            other => panic!("undocumented field {other}"),
        },
    );
    let header = SnapshotHeader {
        journal_id: [0x22; 16],
        seq: 0x1122_3344,
        payload_bytes: 0x5566_7788,
        created_unix_ms: 0x99aa_bbcc,
        payload_crc: 0xdead_beef,
    };
    check_layout(
        &layout_table("### The snapshot file"),
        &header.encode(),
        |f| match f {
            "magic" => b"PJSNAPS\0".to_vec(),
            "version" => snapshot::SNAPSHOT_VERSION.to_le_bytes().to_vec(),
            "header_bytes" => 64u16.to_le_bytes().to_vec(),
            "codec_version" => vec![1],
            "reserved" => vec![0; 3],
            "journal_id" => vec![0x22; 16],
            "seq" => header.seq.to_le_bytes().to_vec(),
            "payload_bytes" => header.payload_bytes.to_le_bytes().to_vec(),
            "created_unix_ms" => header.created_unix_ms.to_le_bytes().to_vec(),
            "payload_crc" => header.payload_crc.to_le_bytes().to_vec(),
            other => panic!("undocumented field {other}"),
        },
    );
}
