//! Keeps journal-format.md true: its worked example is extracted from the document and compared
//! byte for byte with what the code writes, then decoded and read as a journal; its layout tables
//! are compared with the offsets of `format.rs`; its checksum definition is checked against the
//! code's. A failure here means the document or the format changed; both must change together.

// Helpers outside #[test] functions panic on purpose: a panic is how a test reports failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use procjournal::codec::{self, CODEC_VERSION};
use procjournal::journal::format::{
    self, CommitSlot, FORMAT_VERSION, RecordFields, SEGMENT_MAGIC, SegmentHeader,
};
use procjournal::journal::reader::JournalReader;
use procjournal::limits;
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions, Position};

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("journal-format.md");
    std::fs::read_to_string(path).expect("journal-format.md")
}

/// The lines of the fenced block that opens with exactly `fence`.
fn fenced_block<'a>(doc: &'a str, fence: &str) -> Vec<&'a str> {
    let mut lines = doc.lines().skip_while(|l| l.trim_end() != fence);
    assert!(
        lines.next().is_some(),
        "no block {fence:?} in journal-format.md"
    );
    lines.take_while(|l| l.trim_end() != "```").collect()
}

/// The bytes of the worked example: every whitespace-separated two-digit hex token of the block,
/// with everything after `#` on a line being a comment.
fn worked_example_bytes() -> Vec<u8> {
    let mut bytes = Vec::new();
    for line in fenced_block(&doc(), "```hex worked-example") {
        let code = line.split('#').next().unwrap_or("");
        for token in code.split_whitespace() {
            assert_eq!(token.len(), 2, "token {token:?} in line {line:?}");
            bytes.push(u8::from_str_radix(token, 16).expect("hex byte"));
        }
    }
    bytes
}

const JOURNAL_ID: &str = "5f0b2c4e-9a71-4d3c-8e21-64aa0d93b7e2";
const EVENT_IDS: [&str; 2] = [
    "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
    "017f22e2-79b0-7cc3-98c4-dc0c0c073990",
];

/// Parses a hyphenated UUID into its 16 bytes in RFC 9562 order.
fn uuid_bytes(text: &str) -> [u8; 16] {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    assert_eq!(hex.len(), 32);
    std::array::from_fn(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
}

fn example_header() -> SegmentHeader {
    SegmentHeader {
        format_version: FORMAT_VERSION,
        segment_bytes: 4096,
        journal_id: uuid_bytes(JOURNAL_ID),
        segment_index: 0,
        base_seq: 1,
        created_unix_ms: 1_700_000_000_000,
    }
}

fn example_payloads() -> [Vec<u8>; 2] {
    [
        codec::encode(&(7u32, "ls".to_owned())).unwrap(),
        codec::encode(&Some(-1i32)).unwrap(),
    ]
}

/// The commit area of the worked example: the clean close (generation 3) in slot 0, over the
/// commit of event 1 (generation 1), and the commit of event 2 (generation 2) in slot 1.
fn example_slots() -> [CommitSlot; 2] {
    let claim = |flags, generation| CommitSlot {
        flags,
        generation,
        committed_seq: 2,
        end_offset: 0x118,
        next_segment_bytes: 0,
        next_base_seq: 0,
    };
    [claim(format::SLOT_CLOSED, 3), claim(0, 2)]
}

/// The worked example as the code writes it: header, commit area, then the two records, chained.
fn example_from_code() -> (Vec<u8>, [u32; 2]) {
    let header = example_header();
    let mut out = header.encode().to_vec();
    for slot in example_slots() {
        out.extend_from_slice(&slot.encode(header.crc()));
    }
    let mut prev_crc = header.crc();
    let mut crcs = [0u32; 2];
    for (i, payload) in example_payloads().iter().enumerate() {
        let mut record = vec![0xeeu8; format::record_bytes(payload.len())];
        prev_crc = format::encode_record(
            &RecordFields {
                kind: i as u16 + 1,
                codec_version: CODEC_VERSION,
                seq: i as u64 + 1,
                event_id: uuid_bytes(EVENT_IDS[i]),
                prev_crc,
                payload,
            },
            &mut record,
        );
        crcs[i] = prev_crc;
        out.extend_from_slice(&record);
    }
    (out, crcs)
}

#[test]
fn the_worked_example_is_exactly_what_the_code_writes() {
    let documented = worked_example_bytes();
    let (written, _) = example_from_code();
    assert_eq!(documented.len(), 280, "64 + 2 x 48 + 64 + 56 bytes");
    for (offset, (d, w)) in documented.iter().zip(&written).enumerate() {
        assert_eq!(
            d, w,
            "journal-format.md worked example differs from the code at offset {offset:#05x}"
        );
    }
    assert_eq!(documented, written);
}

#[test]
fn the_worked_example_decodes_field_by_field() {
    let bytes = worked_example_bytes();
    let header = SegmentHeader::decode(&bytes).unwrap();
    assert_eq!(header, example_header());
    assert_eq!(header.crc(), 0xbcb0_01aa);
    assert_eq!(&bytes[..8], &SEGMENT_MAGIC);
    assert_eq!(FORMAT_VERSION, 2);
    for (i, slot) in example_slots().iter().enumerate() {
        let at = SegmentHeader::commit_slot_offset(i);
        assert_eq!(CommitSlot::decode(&bytes[at..], &header), Ok(Some(*slot)));
    }

    // The rest of the segment is zero, as on disk.
    let mut segment = bytes.clone();
    segment.resize(4096, 0);
    let payloads = example_payloads();
    let mut at = limits::SEGMENT_RECORDS_OFFSET;
    let mut chain = header.crc();
    for (i, payload) in payloads.iter().enumerate() {
        let (h, p) = format::decode_record(&segment[at..]).unwrap();
        assert_eq!(h.seq, i as u64 + 1);
        assert_eq!(h.kind, i as u16 + 1);
        assert_eq!(h.codec_version, CODEC_VERSION);
        assert_eq!(h.event_id, uuid_bytes(EVENT_IDS[i]));
        assert_eq!(h.prev_crc, chain);
        assert_eq!(h.payload_bytes as usize, payload.len());
        assert_eq!(p, &payload[..]);
        chain = h.header_crc;
        at += format::record_bytes(payload.len());
    }
    assert_eq!(at, 0x118);
    assert_eq!(chain, 0xbf7c_297c);
    assert_eq!(
        format::decode_record(&segment[at..]),
        Err(format::FrameError::Zero)
    );
    let first: (u32, String) = codec::decode(CODEC_VERSION, &payloads[0]).unwrap();
    assert_eq!(first, (7, "ls".to_owned()));
    let second: Option<i32> = codec::decode(CODEC_VERSION, &payloads[1]).unwrap();
    assert_eq!(second, Some(-1));
    assert_eq!(
        EventId::from_bytes(uuid_bytes(EVENT_IDS[0])).to_string(),
        EVENT_IDS[0]
    );
}

#[test]
fn the_worked_example_is_a_journal_that_reads_and_extends() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("journal");
    std::fs::create_dir(&dir).unwrap();
    let mut segment = worked_example_bytes();
    segment.resize(4096, 0);
    let path = dir.join("00000000000000000000.log");
    std::fs::write(&path, &segment).unwrap();

    let (records, report) = JournalReader::open(root.path())
        .unwrap()
        .records(1)
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(records.len(), 2);
    assert_eq!(
        records[1].position,
        Position {
            seq: 2,
            segment_index: 0,
            offset: 0xe0,
        }
    );
    assert_eq!(records[1].event_id.to_string(), EVENT_IDS[1]);

    // As the document says, the next record goes at 0x118 with seq 3, chained to record 2, and
    // its commit into slot 1 with generation 4.
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 4096,
    };
    let (journal, report) = Journal::open(root.path(), options).unwrap();
    assert!(report.is_clean(), "{report:?}");
    let kind = EventKind::new(3).unwrap();
    let appended = journal
        .append(EventId::from_bytes([3; 16]), kind, 0, b"")
        .unwrap();
    assert_eq!(
        appended.position,
        Position {
            seq: 3,
            segment_index: 0,
            offset: 0x118,
        }
    );
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(
        on_disk[..0x70],
        segment[..0x70],
        "header and slot 0 untouched"
    );
    assert_eq!(
        on_disk[0xa0..0x118],
        segment[0xa0..0x118],
        "records untouched"
    );
    let header = example_header();
    let slot1 = CommitSlot::decode(&on_disk[0x70..], &header)
        .unwrap()
        .unwrap();
    assert_eq!((slot1.generation, slot1.committed_seq), (4, 3));
    drop(journal);
    let on_disk = std::fs::read(&path).unwrap();
    let (h, payload) = format::decode_record(&on_disk[0x118..]).unwrap();
    assert_eq!((h.seq, h.prev_crc, payload.len()), (3, 0xbf7c_297c, 0));
    // An empty payload's checksum is the mask constant itself.
    assert_eq!(h.payload_crc, 0xa282_ead8);
}

/// The checksum as journal-format.md defines it, from the plain CRC-32 (IEEE) of crc32fast, with
/// the mask spelled out as the document writes it rather than as a rotation.
#[allow(clippy::manual_rotate)]
fn documented_masked_crc(bytes: &[u8]) -> u32 {
    let c = crc32fast::hash(bytes);
    ((c >> 15) | (c << 17)).wrapping_add(0xa282_ead8)
}

#[test]
fn the_checksum_is_the_documented_mask_of_crc32_ieee() {
    // The CRC-32/ISO-HDLC check value, and the documented check values of the masked CRC.
    assert_eq!(crc32fast::hash(b"123456789"), 0xcbf4_3926);
    assert_eq!(format::masked_crc(b"123456789"), 0x14d0_82c0);
    assert_eq!(format::masked_crc(b""), 0xa282_ead8);
    for input in [&b""[..], b"a", b"123456789", &[0u8; 44], &[0xffu8; 60]] {
        assert_eq!(format::masked_crc(input), documented_masked_crc(input));
    }
}

/// `(field, offset, width)` rows of the first table after `heading` whose header row starts with
/// `| offset | width | field |`, up to the first row whose width is not a number.
fn layout_table(doc: &str, heading: &str) -> Vec<(String, usize, usize)> {
    let after = doc
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no {heading:?}"))
        .1;
    let mut lines = after
        .lines()
        .skip_while(|l| !l.starts_with("| offset | width | field |"));
    assert!(lines.next().is_some(), "no layout table under {heading:?}");
    let mut rows = Vec::new();
    for line in lines.skip(1) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Ok(offset), Ok(width)) = (cells[1].parse(), cells[2].parse()) else {
            break;
        };
        rows.push((cells[3].trim_matches('`').to_owned(), offset, width));
    }
    rows
}

#[test]
fn the_layout_tables_match_the_offsets_of_format_rs() {
    let doc = doc();
    let segment: Vec<(String, usize, usize)> = [
        ("magic", format::SEG_MAGIC_OFFSET, 8),
        ("format_version", format::SEG_VERSION_OFFSET, 2),
        ("header_bytes", format::SEG_HEADER_BYTES_OFFSET, 2),
        ("segment_bytes", format::SEG_SEGMENT_BYTES_OFFSET, 4),
        ("journal_id", format::SEG_JOURNAL_ID_OFFSET, 16),
        ("segment_index", format::SEG_INDEX_OFFSET, 8),
        ("base_seq", format::SEG_BASE_SEQ_OFFSET, 8),
        ("created_unix_ms", format::SEG_CREATED_MS_OFFSET, 8),
        ("reserved", format::SEG_RESERVED_OFFSET, 4),
        ("header_crc", format::SEG_CRC_OFFSET, 4),
    ]
    .into_iter()
    .map(|(f, o, w)| (f.to_owned(), o, w))
    .collect();
    assert_eq!(layout_table(&doc, "## Segment header"), segment);
    let record: Vec<(String, usize, usize)> = [
        ("header_crc", format::REC_HEADER_CRC_OFFSET, 4),
        ("payload_crc", format::REC_PAYLOAD_CRC_OFFSET, 4),
        ("payload_bytes", format::REC_PAYLOAD_BYTES_OFFSET, 4),
        ("kind", format::REC_KIND_OFFSET, 2),
        ("codec_version", format::REC_CODEC_OFFSET, 1),
        ("flags", format::REC_FLAGS_OFFSET, 1),
        ("seq", format::REC_SEQ_OFFSET, 8),
        ("event_id", format::REC_EVENT_ID_OFFSET, 16),
        ("prev_crc", format::REC_PREV_CRC_OFFSET, 4),
        ("reserved", format::REC_RESERVED_OFFSET, 4),
    ]
    .into_iter()
    .map(|(f, o, w)| (f.to_owned(), o, w))
    .collect();
    assert_eq!(layout_table(&doc, "## Record header"), record);
    let slot: Vec<(String, usize, usize)> = [
        ("slot_crc", format::SLOT_CRC_OFFSET, 4),
        ("flags", format::SLOT_FLAGS_OFFSET, 4),
        ("generation", format::SLOT_GENERATION_OFFSET, 8),
        ("committed_seq", format::SLOT_COMMITTED_OFFSET, 8),
        ("end_offset", format::SLOT_END_OFFSET_OFFSET, 4),
        ("next_segment_bytes", format::SLOT_NEXT_BYTES_OFFSET, 4),
        ("next_base_seq", format::SLOT_NEXT_BASE_OFFSET, 8),
        ("reserved", format::SLOT_RESERVED_OFFSET, 8),
    ]
    .into_iter()
    .map(|(f, o, w)| (f.to_owned(), o, w))
    .collect();
    assert_eq!(layout_table(&doc, "## Commit area"), slot);
    assert_eq!(format::REC_HEADER_CRC_COVERS, 4..48);
}

#[test]
fn the_documented_limits_are_the_code_limits() {
    assert_eq!(limits::SEGMENT_HEADER_BYTES, 64);
    assert_eq!(limits::COMMIT_SLOT_BYTES, 48);
    assert_eq!(limits::SEGMENT_RECORDS_OFFSET, 160);
    assert_eq!(limits::SEGMENT_BYTES_INITIAL, 262_144);
    assert_eq!(limits::RECORD_HEADER_BYTES, 48);
    assert_eq!(limits::RECORD_ALIGN_BYTES, 8);
    assert_eq!(limits::RECORD_PAYLOAD_BYTES_MAX, 1_048_576);
    assert_eq!(limits::SEGMENT_BYTES_MIN, 4096);
    assert_eq!(limits::SEGMENT_BYTES_MAX, 1_073_741_824);
    assert_eq!(limits::SEGMENT_BYTES_DEFAULT, 4_194_304);
    assert_eq!(limits::SEGMENT_COUNT_MAX, 16_384);
    assert_eq!(limits::FOLLOW_POLL_MS, 50);
    assert_eq!(format::record_bytes(0), 48);
    assert_eq!(format::record_bytes(14), 64);
    assert_eq!(format::record_bytes(5), 56);
}

#[test]
fn the_per_journal_payload_limit_is_as_documented() {
    for (segment_bytes, limit) in [
        (4096, 3888),
        (8192, 7984),
        (1_048_576, 1_048_368),
        (1_052_672, 1_048_576),
        (16_777_216, 1_048_576),
    ] {
        let root = tempfile::tempdir().unwrap();
        let options = JournalOptions {
            durability: Durability::Os,
            segment_bytes,
        };
        let (journal, _) = Journal::open(root.path(), options).unwrap();
        assert_eq!(
            journal.payload_limit(),
            limit,
            "segment_bytes {segment_bytes}"
        );
        if segment_bytes == 4096 {
            // The largest record fills an empty segment exactly.
            assert_eq!(160 + format::record_bytes(limit), 4096);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lifecycle validity: the table of "### Validity", cell by cell, against the manifest store.

mod validity {
    use procjournal::EventId;
    use procjournal::lifecycle::event::{
        CaptureStatus, CommandSpec, CommandSpecV2, CompletionNotified, CursorBounds, Deadline,
        DeadlineFailed, DeadlineFired, EnvBase, EnvOverlay, EnvPolicy, ExitProof, ExitStatus,
        GateChanged, HumanInput, IdentityWitness, InputClosed, LifecyclePublished, Limits,
        LostOnRestore, OutputCheckpoint, OutputGap, OutputRetired, ProcessWitness, Registered,
        RegisteredV2, Running, Scoped, StopRequested, Terminal, TerminalResized, TreeMechanism,
        TreeReleased, kinds,
    };
    use procjournal::lifecycle::{
        Applied, Handle, LifecycleEvent, LifecycleIds, ManifestStore, State,
    };

    fn id(n: u8) -> EventId {
        EventId::from_bytes([n; 16])
    }

    const H: Handle = Handle(EventId(uuid::Uuid::from_bytes([1; 16])));
    const REGISTRATION: u8 = 9;

    fn ids() -> LifecycleIds {
        LifecycleIds {
            running: id(11),
            terminal: id(12),
            lost: id(13),
            completion: id(14),
        }
    }

    fn registered() -> LifecycleEvent {
        LifecycleEvent::Registered(Registered {
            handle: H,
            ids: ids(),
            // A wall-clock limit, so that its deadline may fire (rule W).
            command: CommandSpec {
                limits: Limits {
                    wall_clock_ms: Some(1_000),
                    ..Limits::default()
                },
                ..CommandSpec::default()
            },
            at_unix_ms: 1,
        })
    }

    fn running() -> LifecycleEvent {
        LifecycleEvent::Running(Running {
            handle: H,
            pid: 7,
            witness: IdentityWitness {
                start_time_ticks: 1,
                boot_id: [2; 16],
            },
            at_unix_ms: 2,
        })
    }

    fn exited() -> LifecycleEvent {
        LifecycleEvent::Terminal(Terminal {
            handle: H,
            state: State::Exited,
            exit: ExitStatus::Code(0),
            bounds: CursorBounds::default(),
            capture: CaptureStatus::Complete,
            reason: "exited".into(),
            at_unix_ms: 3,
        })
    }

    fn scoped() -> LifecycleEvent {
        LifecycleEvent::Scoped(Scoped {
            handle: H,
            mechanism: TreeMechanism::Group,
            boot_id: [2; 16],
            workload: ProcessWitness {
                pid: 7,
                start_time_ticks: 1,
                pidfs_ino: 0,
            },
            guardian: None,
            cgroup: None,
            receipt: None,
            at_unix_ms: 2,
        })
    }

    fn fired() -> LifecycleEvent {
        LifecycleEvent::DeadlineFired(DeadlineFired {
            handle: H,
            deadline: Deadline::Wall,
            limit_ms: 1_000,
            clock_from_unix_ms: 2,
            at_unix_ms: 3,
        })
    }

    /// The event a row's `event` cell names.
    fn event_of(cell: &str) -> LifecycleEvent {
        let at_unix_ms = 4;
        match cell {
            "Registered" => registered(),
            "RegisteredV2" => LifecycleEvent::RegisteredV2(RegisteredV2 {
                handle: H,
                ids: ids(),
                command: Box::new(CommandSpecV2 {
                    program: String::new(),
                    args: Vec::new(),
                    cwd: String::new(),
                    env_overrides: Vec::new(),
                    labels: Default::default(),
                    limits: Default::default(),
                    owner: String::new(),
                    env_policy: EnvPolicy {
                        base: EnvBase::Inherited,
                        removed: Vec::new(),
                        overlay: EnvOverlay::Off,
                    },
                }),
                restart_of: None,
                at_unix_ms: 1,
            }),
            "Running" => running(),
            "StopRequested" => LifecycleEvent::StopRequested(StopRequested {
                handle: H,
                reason: "r".into(),
                requested_by: "b".into(),
                at_unix_ms,
            }),
            "InputClosed" => LifecycleEvent::InputClosed(InputClosed {
                handle: H,
                at_unix_ms,
            }),
            "OutputCheckpoint" => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle: H,
                bounds: CursorBounds::default(),
                at_unix_ms,
            }),
            // Killed: reachable from starting and from running, as the table's row says.
            "Terminal" => LifecycleEvent::Terminal(Terminal {
                handle: H,
                state: State::Killed,
                exit: ExitStatus::Signal(9),
                bounds: CursorBounds::default(),
                capture: CaptureStatus::Complete,
                reason: "killed".into(),
                at_unix_ms,
            }),
            "LostOnRestore" => LifecycleEvent::LostOnRestore(LostOnRestore {
                handle: H,
                bounds: CursorBounds::default(),
                at_unix_ms,
            }),
            "LifecyclePublished of ids.running" => {
                LifecycleEvent::LifecyclePublished(LifecyclePublished {
                    handle: H,
                    event: ids().running,
                })
            }
            "LifecyclePublished of ids.terminal" => {
                LifecycleEvent::LifecyclePublished(LifecyclePublished {
                    handle: H,
                    event: ids().terminal,
                })
            }
            "CompletionNotified" => LifecycleEvent::CompletionNotified(CompletionNotified {
                handle: H,
                command: ids().completion,
            }),
            "Scoped" => scoped(),
            "TreeReleased (after Scoped)" => LifecycleEvent::TreeReleased(TreeReleased {
                handle: H,
                proof: ExitProof::CgroupEmpty,
                at_unix_ms,
            }),
            "OutputGap" => LifecycleEvent::OutputGap(OutputGap {
                handle: H,
                gap: procjournal::spool::Gap {
                    from: 0,
                    to: 4,
                    reason: procjournal::spool::LossReason::DiskFull,
                    errno: 28,
                },
                at_unix_ms,
            }),
            "OutputRetired" => LifecycleEvent::OutputRetired(OutputRetired {
                handle: H,
                reason: "clean: ended more than 0ms ago".into(),
                at_unix_ms,
            }),
            "GateChanged (pause, gate open)" => LifecycleEvent::GateChanged(GateChanged {
                paused: true,
                requested_by: "b".into(),
                reason: "r".into(),
                at_unix_ms,
            }),
            "HumanInput (waiting, not marked)" => LifecycleEvent::HumanInput(HumanInput {
                handle: H,
                waiting: true,
                by: "b".into(),
                at_unix_ms,
            }),
            "DeadlineFired (wall, the configured limit)" => fired(),
            "DeadlineFailed (after DeadlineFired)" => {
                LifecycleEvent::DeadlineFailed(DeadlineFailed {
                    handle: H,
                    deadline: Deadline::Wall,
                    error: "EPERM".into(),
                    at_unix_ms,
                })
            }
            "TerminalResized" => LifecycleEvent::TerminalResized(TerminalResized {
                handle: H,
                rows: 24,
                cols: 80,
                at_unix_ms,
            }),
            "AdmissionLimitSet (a limit of 2, none in force)" => LifecycleEvent::AdmissionLimitSet(
                procjournal::lifecycle::event::AdmissionLimitSet {
                    max_concurrent: Some(2),
                    requested_by: "b".into(),
                    at_unix_ms,
                },
            ),
            other => panic!("the validity table names an event this test does not know: {other:?}"),
        }
    }

    /// The record ID a row's `record ID` cell names; `fresh` takes the next unused ID.
    fn record_id(cell: &str, fresh: &mut u8) -> EventId {
        let slot = |name: &str| match name {
            "ids.running" => ids().running,
            "ids.terminal" => ids().terminal,
            "ids.lost" => ids().lost,
            "ids.completion" => ids().completion,
            other => panic!("unknown allocated ID {other:?}"),
        };
        if cell == "fresh" {
            *fresh += 1;
            return id(*fresh);
        }
        if let Some(args) = cell
            .strip_prefix("derived(")
            .and_then(|c| c.strip_suffix(')'))
        {
            let (from, purpose) = args.split_once(", ").expect("derived(ID, purpose)");
            return slot(from).derived(purpose.parse().expect("a purpose number"));
        }
        slot(cell)
    }

    /// A store where `H` is in `state` (`none`, `starting`, `running`, `terminal`), with its
    /// scope recorded first when `scope`, and its wall deadline fired first when `fired`.
    fn store_in(state: &str, scope: bool, fired: bool) -> ManifestStore {
        let mut store = ManifestStore::new();
        if state == "none" {
            return store;
        }
        store.apply(id(REGISTRATION), &registered()).unwrap();
        if scope {
            store.apply(ids().running.derived(3), &scoped()).unwrap();
        }
        if fired {
            store.apply(id(99), &self::fired()).unwrap();
        }
        if state == "running" || state == "terminal" {
            store.apply(ids().running, &running()).unwrap();
        }
        if state == "terminal" {
            store.apply(ids().terminal, &exited()).unwrap();
        }
        store
    }

    struct Row {
        event: String,
        record_id: String,
        cells: [String; 4],
        again: String,
    }

    fn rows() -> Vec<Row> {
        let doc = super::doc();
        let after = doc
            .split_once("\n### Validity\n")
            .expect("a Validity section")
            .1;
        let mut lines = after.lines().skip_while(|l| {
            !l.starts_with(
                "| rule | event | record ID | none | starting | running | terminal | again |",
            )
        });
        assert!(lines.next().is_some(), "no validity table");
        lines
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .map(|line| {
                let cells: Vec<String> =
                    line.split('|').map(|c| c.trim().replace('`', "")).collect();
                assert_eq!(cells.len(), 10, "{line}");
                Row {
                    event: cells[2].clone(),
                    record_id: cells[3].clone(),
                    cells: [4, 5, 6, 7].map(|i| cells[i].clone()),
                    again: cells[8].clone(),
                }
            })
            .collect()
    }

    #[test]
    fn the_validity_table_is_what_the_store_does() {
        let rows = rows();
        let mut kinds_seen: Vec<u16> = Vec::new();
        for row in &rows {
            let event = event_of(&row.event);
            kinds_seen.push(event.kind().get());
            let scope = row.event.contains("after Scoped");
            let fired = row.event.contains("after DeadlineFired");
            let mut fresh = 100;
            for (state, cell) in ["none", "starting", "running", "terminal"]
                .iter()
                .zip(&row.cells)
            {
                let mut store = store_in(state, scope, fired);
                let event_id = record_id(&row.record_id, &mut fresh);
                let result = store.apply(event_id, &event);
                match cell.as_str() {
                    "yes" => assert_eq!(result, Ok(Applied::Changed), "{} in {state}", row.event),
                    "no" => assert!(result.is_err(), "{} in {state}: {result:?}", row.event),
                    other => panic!("cell {other:?}: yes or no"),
                }
            }
            // `again`: once more, right after the first state that accepts it.
            let state = ["none", "starting", "running", "terminal"]
                .iter()
                .zip(&row.cells)
                .find(|(_, c)| *c == "yes")
                .map(|(s, _)| *s)
                .expect("a state that accepts it");
            let mut store = store_in(state, scope, fired);
            let first = record_id(&row.record_id, &mut fresh);
            store.apply(first, &event).unwrap();
            let before = store.clone();
            let second = record_id(&row.record_id, &mut fresh);
            let again = store.apply(second, &event);
            match row.again.as_str() {
                "rejected" => {
                    assert!(again.is_err(), "{} again: {again:?}", row.event);
                    assert_eq!(store, before);
                }
                "no-op" => {
                    assert_eq!(again, Ok(Applied::Unchanged), "{} again", row.event);
                    assert_eq!(store, before);
                }
                "accepted" => assert_eq!(again, Ok(Applied::Changed), "{} again", row.event),
                other => panic!("again {other:?}: rejected, no-op or accepted"),
            }
        }
        kinds_seen.sort_unstable();
        kinds_seen.dedup();
        let all: Vec<u16> = (kinds::REGISTERED..=kinds::LAST)
            .filter(|k| LifecycleEvent::is_lifecycle_kind(*k))
            .collect();
        assert_eq!(
            kinds_seen, all,
            "the validity table covers every lifecycle kind"
        );
    }
}
