//! Properties of every decoder of bytes from disk, on stable Rust: the same decoders the fuzz targets
//! exercise, driven by proptest with a modest number of cases so that the suite runs in seconds.

use std::collections::BTreeMap;

use proptest::prelude::*;

use procjournal::codec;
use procjournal::fuzzing::{self, FuzzPayload, FuzzState};
use procjournal::journal::EventId;
use procjournal::journal::format::{self, CommitSlot, FrameError, RecordFields, SegmentHeader};
use procjournal::lifecycle::event::{
    CaptureStatus, CommandSpec, CommandSpecV2, CompletionNotified, CursorBounds, EnvBase,
    EnvOverlay, EnvPolicy, EnvVar, ExitStatus, IdentityWitness, InputClosed, LifecyclePublished,
    Limits, LostOnRestore, OutputCheckpoint, Registered, RegisteredV2, Running, StopRequested,
    Terminal,
};
use procjournal::lifecycle::{Handle, LifecycleEvent, LifecycleIds, State};
use procjournal::limits::{
    COMMIT_SLOT_BYTES, RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES, SEGMENT_BYTES_MAX,
    SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES, SEGMENT_INDEX_MAX, SEGMENT_RECORDS_OFFSET, SEQ_MAX,
};

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(256)
}

/// The owned fields of one record.
#[derive(Debug, Clone)]
struct Fields {
    kind: u16,
    codec_version: u8,
    seq: u64,
    event_id: [u8; 16],
    prev_crc: u32,
    payload: Vec<u8>,
}

impl Fields {
    fn borrow(&self) -> RecordFields<'_> {
        RecordFields {
            kind: self.kind,
            codec_version: self.codec_version,
            seq: self.seq,
            event_id: self.event_id,
            prev_crc: self.prev_crc,
            payload: &self.payload,
        }
    }

    fn encode(&self) -> (Vec<u8>, u32) {
        let mut out = vec![0u8; format::record_bytes(self.payload.len())];
        let crc = format::encode_record(&self.borrow(), &mut out);
        (out, crc)
    }
}

fn fields(max_payload: usize) -> impl Strategy<Value = Fields> {
    (
        1..=u16::MAX,
        any::<u8>(),
        1..=SEQ_MAX,
        any::<[u8; 16]>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..=max_payload),
    )
        .prop_map(
            |(kind, codec_version, seq, event_id, prev_crc, payload)| Fields {
                kind,
                codec_version,
                seq,
                event_id,
                prev_crc,
                payload,
            },
        )
}

fn segment_header() -> impl Strategy<Value = SegmentHeader> {
    let pages = (SEGMENT_BYTES_MIN / 4096) as u32..=(SEGMENT_BYTES_MAX / 4096) as u32;
    (
        pages,
        any::<[u8; 16]>(),
        0..=SEGMENT_INDEX_MAX,
        1..=SEQ_MAX,
        any::<u64>(),
        prop_oneof![
            Just(format::FORMAT_VERSION_V1),
            Just(format::FORMAT_VERSION)
        ],
    )
        .prop_map(
            |(pages, journal_id, segment_index, base_seq, created_unix_ms, format_version)| {
                SegmentHeader {
                    format_version,
                    segment_bytes: pages * 4096,
                    journal_id,
                    segment_index,
                    base_seq,
                    created_unix_ms,
                }
            },
        )
}

/// A version 2 header and a commit slot that keeps every rule of journal-format.md ("Commit
/// area") under it: any flags (sealed, closed, both, none), any generation from 1, a claim from
/// `base_seq - 1`, an aligned end inside the segment, and for a seal a valid successor size and
/// a base seq above the claim.
fn header_and_valid_slot() -> impl Strategy<Value = (SegmentHeader, CommitSlot)> {
    segment_header().prop_flat_map(|h| {
        let header = SegmentHeader {
            format_version: format::FORMAT_VERSION,
            ..h
        };
        let align = RECORD_ALIGN_BYTES as u32;
        let ends = SEGMENT_RECORDS_OFFSET as u32 / align..=header.segment_bytes / align;
        let pages = (SEGMENT_BYTES_MIN / 4096) as u32..=(SEGMENT_BYTES_MAX / 4096) as u32;
        (
            Just(header),
            0u32..4,
            1..=u64::MAX,
            header.base_seq - 1..SEQ_MAX,
            ends,
            pages,
            any::<u64>(),
        )
            .prop_map(
                move |(header, flags, generation, committed, end, pages, next)| {
                    let sealed = flags & format::SLOT_SEALED != 0;
                    let slot = CommitSlot {
                        flags,
                        generation,
                        committed_seq: committed,
                        end_offset: end * align,
                        next_segment_bytes: if sealed { pages * 4096 } else { 0 },
                        next_base_seq: if sealed {
                            committed + 1 + next % (SEQ_MAX - committed)
                        } else {
                            0
                        },
                    };
                    (header, slot)
                },
            )
    })
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 _=/.\u{e9}\u{1F600}-]{0,24}"
}

fn state() -> impl Strategy<Value = FuzzState> {
    prop_oneof![
        Just(FuzzState::Starting),
        (any::<u32>(), any::<u64>())
            .prop_map(|(pid, started_ms)| FuzzState::Running { pid, started_ms }),
        any::<i32>().prop_map(FuzzState::Exited),
        (any::<u8>(), any::<bool>())
            .prop_map(|(signo, core_dumped)| FuzzState::Signalled { signo, core_dumped }),
        text().prop_map(FuzzState::Failed),
    ]
}

fn payload_value() -> impl Strategy<Value = FuzzPayload> {
    (
        text(),
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<Option<u64>>(),
        proptest::collection::btree_map(text(), text(), 0..6),
        state(),
        any::<[u8; 16]>(),
        proptest::collection::vec(state(), 0..4),
    )
        .prop_map(
            |(command, output, exit_code, env, state, id, history)| FuzzPayload {
                command,
                output,
                exit_code,
                env: env.into_iter().collect::<BTreeMap<_, _>>(),
                state,
                id,
                history,
            },
        )
}

fn event_id() -> impl Strategy<Value = EventId> {
    any::<[u8; 16]>().prop_map(EventId::from_bytes)
}

fn limits() -> impl Strategy<Value = Limits> {
    any::<(Option<u64>, Option<u64>, Option<u64>)>().prop_map(|(a, b, c)| Limits {
        wall_clock_ms: a,
        idle_ms: b,
        output_retention_bytes: c,
    })
}

fn bounds() -> impl Strategy<Value = CursorBounds> {
    any::<(u64, u64)>().prop_map(|(retained_from, total_bytes)| CursorBounds {
        retained_from,
        total_bytes,
    })
}

fn ids() -> impl Strategy<Value = LifecycleIds> {
    (event_id(), event_id(), event_id(), event_id()).prop_map(
        |(running, terminal, lost, completion)| LifecycleIds {
            running,
            terminal,
            lost,
            completion,
        },
    )
}

/// The parts of a registration, with the labels as the list of pairs they are on the wire (in
/// any order, duplicates allowed: what a map decoder must accept).
type RegistrationParts = (
    EventId,
    LifecycleIds,
    String,
    Vec<String>,
    String,
    Vec<(String, String)>,
    Vec<(String, String)>,
    Limits,
    String,
    u64,
);

fn registration_parts() -> impl Strategy<Value = RegistrationParts> {
    let pairs = || proptest::collection::vec((text(), text()), 0..4);
    // Label keys from a small set, so that unsorted and duplicate keys are common.
    let labels = proptest::collection::vec(("[ab]{0,2}", text()), 0..5);
    (
        event_id(),
        ids(),
        text(),
        proptest::collection::vec(text(), 0..4),
        text(),
        pairs(),
        labels,
        limits(),
        text(),
        any::<u64>(),
    )
}

fn state_any() -> impl Strategy<Value = State> {
    proptest::sample::select(State::ALL.to_vec())
}

/// Any lifecycle event, of every kind.
fn lifecycle_event() -> impl Strategy<Value = LifecycleEvent> {
    let handle = || event_id().prop_map(Handle);
    let exit = prop_oneof![
        any::<i32>().prop_map(ExitStatus::Code),
        any::<i32>().prop_map(ExitStatus::Signal),
        Just(ExitStatus::Unknown),
    ];
    let capture = prop_oneof![
        Just(CaptureStatus::Complete),
        text().prop_map(CaptureStatus::Incomplete),
        text().prop_map(CaptureStatus::Failed),
    ];
    let overlay = prop_oneof![
        Just(EnvOverlay::Off),
        proptest::collection::vec(text(), 0..3).prop_map(|names| EnvOverlay::Applied { names }),
        text().prop_map(|reason| EnvOverlay::Failed { reason }),
    ];
    let policy = (0..3usize, proptest::collection::vec(text(), 0..3), overlay).prop_map(
        |(base, removed, overlay)| EnvPolicy {
            base: [EnvBase::Inherited, EnvBase::Explicit, EnvBase::Client][base],
            removed,
            overlay,
        },
    );
    let env = proptest::collection::vec((text(), proptest::option::of(text())), 0..4);
    prop_oneof![
        (
            handle(),
            ids(),
            registration_parts(),
            env,
            policy,
            proptest::option::of(handle())
        )
            .prop_map(|(handle, ids, p, env, env_policy, restart_of)| {
                LifecycleEvent::RegisteredV2(RegisteredV2 {
                    handle,
                    ids,
                    command: Box::new(CommandSpecV2 {
                        program: p.2,
                        args: p.3,
                        cwd: p.4,
                        env_overrides: env
                            .into_iter()
                            .map(|(name, value)| EnvVar { name, value })
                            .collect(),
                        labels: p.6.into_iter().collect(),
                        limits: p.7,
                        owner: p.8,
                        env_policy,
                    }),
                    restart_of,
                    at_unix_ms: p.9,
                })
            }),
        (handle(), ids(), registration_parts()).prop_map(|(handle, ids, p)| {
            LifecycleEvent::Registered(Registered {
                handle,
                ids,
                command: CommandSpec {
                    program: p.2,
                    args: p.3,
                    cwd: p.4,
                    env_overrides: p.5,
                    labels: p.6.into_iter().collect(),
                    limits: p.7,
                    owner: p.8,
                },
                at_unix_ms: p.9,
            })
        }),
        (
            handle(),
            any::<u32>(),
            any::<u64>(),
            any::<[u8; 16]>(),
            any::<u64>()
        )
            .prop_map(|(handle, pid, start_time_ticks, boot_id, at_unix_ms)| {
                LifecycleEvent::Running(Running {
                    handle,
                    pid,
                    witness: IdentityWitness {
                        start_time_ticks,
                        boot_id,
                    },
                    at_unix_ms,
                })
            }),
        (handle(), text(), text(), any::<u64>()).prop_map(|(handle, reason, requested_by, at)| {
            LifecycleEvent::StopRequested(StopRequested {
                handle,
                reason,
                requested_by,
                at_unix_ms: at,
            })
        }),
        (handle(), any::<u64>()).prop_map(|(handle, at_unix_ms)| {
            LifecycleEvent::InputClosed(InputClosed { handle, at_unix_ms })
        }),
        (handle(), bounds(), any::<u64>()).prop_map(|(handle, bounds, at_unix_ms)| {
            LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle,
                bounds,
                at_unix_ms,
            })
        }),
        (
            handle(),
            state_any(),
            exit,
            bounds(),
            capture,
            text(),
            any::<u64>()
        )
            .prop_map(
                |(handle, state, exit, bounds, capture, reason, at_unix_ms)| {
                    LifecycleEvent::Terminal(Terminal {
                        handle,
                        state,
                        exit,
                        bounds,
                        capture,
                        reason,
                        at_unix_ms,
                    })
                }
            ),
        (handle(), bounds(), any::<u64>()).prop_map(|(handle, bounds, at_unix_ms)| {
            LifecycleEvent::LostOnRestore(LostOnRestore {
                handle,
                bounds,
                at_unix_ms,
            })
        }),
        (handle(), event_id()).prop_map(|(handle, event)| {
            LifecycleEvent::LifecyclePublished(LifecyclePublished { handle, event })
        }),
        (handle(), event_id()).prop_map(|(handle, command)| {
            LifecycleEvent::CompletionNotified(CompletionNotified { handle, command })
        }),
    ]
}

/// A change to an encoding: flip some bits of one byte, set one byte or one `u32` to a small
/// value (option tags and enum indexes sit at the edge of their ranges: 0, 1, 2, 3, 8, 9, ...),
/// cut it short, or add a byte.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(proptest::sample::Index, u8),
    Byte(proptest::sample::Index, u8),
    U32(proptest::sample::Index, u32),
    Cut(proptest::sample::Index),
    Append(u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    use proptest::sample::Index;
    prop_oneof![
        (any::<Index>(), 1..=u8::MAX).prop_map(|(i, m)| Mutation::Flip(i, m)),
        (any::<Index>(), 0..=3u8).prop_map(|(i, b)| Mutation::Byte(i, b)),
        (any::<Index>(), 0..=12u32).prop_map(|(i, v)| Mutation::U32(i, v)),
        any::<Index>().prop_map(Mutation::Cut),
        any::<u8>().prop_map(Mutation::Append),
    ]
}

fn mutate(bytes: &[u8], m: &Mutation) -> Vec<u8> {
    let mut out = bytes.to_vec();
    match m {
        Mutation::Flip(i, mask) if !out.is_empty() => {
            let at = i.index(out.len());
            out[at] ^= mask;
        }
        Mutation::Byte(i, b) if !out.is_empty() => {
            let at = i.index(out.len());
            out[at] = *b;
        }
        Mutation::U32(i, v) if out.len() >= 4 => {
            let at = i.index(out.len() - 3);
            out[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        Mutation::Flip(..) | Mutation::Byte(..) | Mutation::U32(..) => {}
        Mutation::Cut(i) => out.truncate(i.index(bytes.len() + 1)),
        Mutation::Append(b) => out.push(*b),
    }
    out
}

proptest! {
    // Cheap cases (a few decodes each), and the mutations must find narrow targets.
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The fast lifecycle decoders equal the reference (bincode) on arbitrary bytes: the same
    /// accept/reject, equal values, the same error texts (`fuzzing::lifecycle_decoders`).
    #[test]
    fn fast_lifecycle_decoders_equal_the_reference_on_any_bytes(
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        fuzzing::lifecycle_decoders(&data);
    }

    /// ... on the encoding of any event, and on that encoding changed by one mutation.
    #[test]
    fn fast_lifecycle_decoders_equal_the_reference_on_encodings(
        event in lifecycle_event(),
        m in mutation(),
    ) {
        let bytes = event.encode().expect("encode");
        let decoded = LifecycleEvent::decode(event.kind().get(), codec::CODEC_VERSION, &bytes);
        prop_assert_eq!(decoded.ok(), Some(event));
        fuzzing::lifecycle_decoders(&bytes);
        fuzzing::lifecycle_decoders(&mutate(&bytes, &m));
    }
}

proptest! {
    // Each case sweeps every offset of one encoding, so a few cases cover every field.
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// ... on the encoding of any event with, at every offset in turn, one byte set to a tag
    /// value, or one `u32` set to an edge of an enum's range (option tags and variant indexes are
    /// narrow targets for random mutation), and on every prefix.
    #[test]
    fn fast_lifecycle_decoders_equal_the_reference_at_every_offset(event in lifecycle_event()) {
        let bytes = event.encode().expect("encode");
        for cut in 0..bytes.len() {
            fuzzing::lifecycle_decoders(&bytes[..cut]);
        }
        for at in 0..bytes.len() {
            for b in [0u8, 1, 2, 3, 0x80, 0xff] {
                let mut changed = bytes.clone();
                changed[at] = b;
                fuzzing::lifecycle_decoders(&changed);
            }
        }
        for at in 0..bytes.len().saturating_sub(3) {
            for v in [2u32, 3, 8, 9, 10, u32::MAX] {
                let mut changed = bytes.clone();
                changed[at..at + 4].copy_from_slice(&v.to_le_bytes());
                fuzzing::lifecycle_decoders(&changed);
            }
        }
    }

    /// ... on registrations whose labels are on the wire in any order, with duplicate keys
    /// (which a map decoder accepts: sorted, the last duplicate wins), and mutations of them.
    #[test]
    fn fast_registration_decoder_equals_the_reference_on_non_canonical_labels(
        handle in event_id(),
        p in registration_parts(),
        m in mutation(),
    ) {
        let parts = (handle, p.1, p.2, p.3, p.4, p.5, p.6, p.7, p.8, p.9);
        // A tuple encodes as its fields in order, which is the wire shape of `Registered`.
        let bytes = codec::encode(&parts).expect("encode");
        let reference = LifecycleEvent::decode_reference(
            procjournal::lifecycle::event::kinds::REGISTERED,
            codec::CODEC_VERSION,
            &bytes,
        );
        prop_assert!(reference.is_ok(), "{:?}", reference);
        fuzzing::lifecycle_decoders(&bytes);
        fuzzing::lifecycle_decoders(&mutate(&bytes, &m));
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes: every decoder returns a value or a typed error, and the fuzz bodies' own
    /// cross-checks (decoders agree, whatever decodes re-encodes to its bytes) hold.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = format::decode_record(&data);
        let _ = format::decode_record_header(&data);
        let _ = format::decode_record_header_unbounded(&data);
        let _ = SegmentHeader::decode(&data);
        let _ = codec::decode::<FuzzPayload>(codec::CODEC_VERSION, &data);
        fuzzing::record_decoder(&data);
        fuzzing::journal_commit_slot(&data);
        fuzzing::codec_decode(&data);
    }

    /// Every valid commit slot decodes back to itself, with or without bytes after it; cut short
    /// it is `Truncated`; under another segment's header it fails its checksum; and no single bit
    /// flip of its bytes decodes to the same slot (it is rejected, or decodes to another one).
    #[test]
    fn commit_slot_round_trip_and_bit_flips((header, slot) in header_and_valid_slot()) {
        let bytes = slot.encode(header.crc());
        prop_assert_eq!(CommitSlot::decode(&bytes, &header), Ok(Some(slot)));
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(&[0xff; 8]);
        prop_assert_eq!(CommitSlot::decode(&longer, &header), Ok(Some(slot)));
        prop_assert_eq!(
            CommitSlot::decode(&bytes[..COMMIT_SLOT_BYTES - 1], &header),
            Err(FrameError::Truncated)
        );
        let other = SegmentHeader {
            segment_index: header.segment_index ^ 1,
            ..header
        };
        prop_assert_eq!(CommitSlot::decode(&bytes, &other), Err(FrameError::HeaderChecksum));
        for bit in 0..COMMIT_SLOT_BYTES * 8 {
            let mut flipped = bytes;
            flipped[bit / 8] ^= 1 << (bit % 8);
            let decoded = CommitSlot::decode(&flipped, &header);
            prop_assert!(
                !matches!(decoded, Ok(Some(s)) if s == slot),
                "bit {} flipped and still decodes to {:?}", bit, slot
            );
        }
    }

    /// Arbitrary bytes behind a valid record header prefix still never panic (reaches the length,
    /// payload and padding checks, which random bytes almost never do).
    #[test]
    fn arbitrary_tail_after_valid_header_never_panics(
        f in fields(256),
        tail in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let (mut bytes, _) = f.encode();
        bytes.truncate(RECORD_HEADER_BYTES);
        bytes.extend_from_slice(&tail);
        fuzzing::record_decoder(&bytes);
    }

    #[test]
    fn record_round_trip(f in fields(4096), trailing in proptest::collection::vec(any::<u8>(), 0..32)) {
        let (mut bytes, crc) = f.encode();
        let len = bytes.len();
        prop_assert_eq!(len % 8, 0);
        {
            let (header, payload) = format::decode_record(&bytes).expect("decode");
            prop_assert_eq!(header.header_crc, crc);
            prop_assert_eq!(header.kind, f.kind);
            prop_assert_eq!(header.codec_version, f.codec_version);
            prop_assert_eq!(header.seq, f.seq);
            prop_assert_eq!(header.event_id, f.event_id);
            prop_assert_eq!(header.prev_crc, f.prev_crc);
            prop_assert_eq!(header.payload_bytes as usize, f.payload.len());
            prop_assert_eq!(payload, f.payload.as_slice());
        }
        // The slice runs to the end of the segment: whatever follows the record is not its concern.
        bytes.extend_from_slice(&trailing);
        let (header, payload) = format::decode_record(&bytes).expect("decode with trailing bytes");
        prop_assert_eq!(header.header_crc, crc);
        prop_assert_eq!(payload, f.payload.as_slice());
        // A record cut short anywhere is never accepted.
        bytes.truncate(len);
        for cut in [1, 8, len - RECORD_HEADER_BYTES].into_iter().filter(|&c| c > 0 && c <= len) {
            let expected = if len - cut < RECORD_HEADER_BYTES {
                FrameError::Truncated
            } else {
                FrameError::LengthPastEnd
            };
            prop_assert_eq!(format::decode_record(&bytes[..len - cut]).err(), Some(expected));
        }
        fuzzing::record_decoder(&bytes);
    }

    #[test]
    fn every_single_byte_corruption_of_a_record_is_rejected(f in fields(96), mask in 1..=u8::MAX) {
        let (good, _) = f.encode();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= mask;
            prop_assert!(
                format::decode_record(&bad).is_err(),
                "byte {} ^ {:#04x} accepted", at, mask
            );
        }
    }

    #[test]
    fn segment_header_round_trip_and_corruption(h in segment_header(), mask in 1..=u8::MAX) {
        let bytes = h.encode();
        prop_assert_eq!(SegmentHeader::decode(&bytes), Ok(h));
        for at in 0..SEGMENT_HEADER_BYTES {
            let mut bad = bytes;
            bad[at] ^= mask;
            prop_assert!(SegmentHeader::decode(&bad).is_err(), "byte {} ^ {:#04x} accepted", at, mask);
        }
        prop_assert_eq!(
            SegmentHeader::decode(&bytes[..SEGMENT_HEADER_BYTES - 1]),
            Err(FrameError::Truncated)
        );
    }

    #[test]
    fn codec_round_trip(value in payload_value()) {
        let bytes = codec::encode(&value).expect("encode");
        let decoded: FuzzPayload = codec::decode(codec::CODEC_VERSION, &bytes).expect("decode");
        prop_assert_eq!(&decoded, &value);
        fuzzing::codec_decode(&bytes);
        // Every strict prefix fails, and so does one trailing byte.
        for cut in [1, bytes.len() / 2, bytes.len()] {
            prop_assert!(codec::decode::<FuzzPayload>(1, &bytes[..bytes.len() - cut]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert!(codec::decode::<FuzzPayload>(1, &longer).is_err());
    }
}

/// The codec is not canonical for maps (duplicate or unsorted keys decode), which is why
/// `fuzzing::codec_decode` checks byte equality only for canonical input; pin that behaviour so a
/// change to it is noticed.
#[test]
fn codec_accepts_non_canonical_maps() {
    let value = FuzzPayload {
        command: "c".into(),
        output: vec![],
        exit_code: None,
        env: BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]),
        state: FuzzState::Starting,
        id: [0; 16],
        history: vec![],
    };
    let bytes = codec::encode(&value).expect("encode");
    // Swap the two entries: each is 8 + 1 + 8 + 1 = 18 bytes.
    let map_start = (8 + 1) + 8 + 1 + 8;
    let mut swapped = bytes.clone();
    swapped[map_start..map_start + 18].copy_from_slice(&bytes[map_start + 18..map_start + 36]);
    swapped[map_start + 18..map_start + 36].copy_from_slice(&bytes[map_start..map_start + 18]);
    assert_ne!(swapped, bytes);
    let decoded: FuzzPayload = codec::decode(1, &swapped).expect("unsorted map decodes");
    assert_eq!(decoded, value);
    fuzzing::codec_decode(&swapped);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The `FLOOR` decoder on any bytes, and on any floor (`fuzzing::journal_floor`: canonical,
    /// in range, `read_floor` agrees; a floor that decodes refuses every one-byte change).
    #[test]
    fn the_floor_decoder_is_total_and_canonical(
        data in proptest::collection::vec(any::<u8>(), 0..80),
        journal_id in any::<[u8; 16]>(),
        segment_index in 0u64..1 << 40,
        seq in 1u64..1 << 40,
        created_unix_ms in any::<u64>(),
    ) {
        fuzzing::journal_floor(&data);
        let floor = procjournal::journal::Floor { journal_id, segment_index, seq, created_unix_ms };
        let bytes = floor.encode();
        prop_assert_eq!(procjournal::journal::Floor::decode(&bytes), Ok(floor));
        fuzzing::journal_floor(&bytes);
    }
}
