//! Golden bytes of the payload codec (codec version 1): every claim of journal-format.md, section
//! "Payload encoding", is checked here against `procjournal::codec`, so that a reader written in
//! another language from the document alone decodes exactly what this crate writes.
//!
//! If one of these tests fails, the bytes on disk of codec version 1 changed: that is a format
//! break, not a test to update. Add a new codec version instead.

// Helpers outside #[test] functions panic on purpose: a panic is how a test reports failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use procjournal::EventId;
use procjournal::codec::{self, CODEC_VERSION, CodecError, Decode, Encode};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Encodes `value`, checks its bytes against `expected_hex` (spaces ignored), and checks that the
/// bytes decode back to `value`.
#[track_caller]
fn golden<T>(value: T, expected_hex: &str)
where
    T: Encode + Decode<()> + PartialEq + std::fmt::Debug,
{
    let bytes = codec::encode(&value).expect("encode");
    let expected: String = expected_hex.split_whitespace().collect();
    assert_eq!(hex(&bytes), expected, "encoding of {value:?}");
    let back: T = codec::decode(CODEC_VERSION, &bytes).expect("decode");
    assert_eq!(back, value);
}

/// Checks that `hex_bytes` does not decode as a `T`.
#[track_caller]
fn rejected<T: Decode<()> + std::fmt::Debug>(hex_bytes: &str) -> CodecError {
    let compact: String = hex_bytes.split_whitespace().collect();
    let bytes: Vec<u8> = (0..compact.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&compact[i..i + 2], 16).expect("hex"))
        .collect();
    match codec::decode::<T>(CODEC_VERSION, &bytes) {
        Ok(v) => panic!("{hex_bytes} decoded as {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn codec_version_is_1() {
    assert_eq!(CODEC_VERSION, 1);
}

#[test]
fn unsigned_integers_are_fixed_width_little_endian() {
    golden(0xabu8, "ab");
    golden(0x0102u16, "0201");
    golden(0x0102_0304u32, "04030201");
    golden(0x0102_0304_0506_0708u64, "0807060504030201");
    golden(1u128, "01000000000000000000000000000000");
    // usize is written as a u64.
    golden(300usize, "2c01000000000000");
    // No variable-length integers: small values still take the full width.
    golden(0u64, "0000000000000000");
    golden(u64::MAX, "ffffffffffffffff");
}

#[test]
fn signed_integers_are_twos_complement_little_endian() {
    golden(-1i8, "ff");
    golden(-2i16, "feff");
    golden(-1i32, "ffffffff");
    golden(0x0102_0304i32, "04030201");
    golden(-2i64, "feffffffffffffff");
    golden(i64::MIN, "0000000000000080");
    // No zigzag encoding.
    golden(1i32, "01000000");
    // isize is written as an i64.
    golden(-1isize, "ffffffffffffffff");
}

#[test]
fn floats_are_ieee754_little_endian() {
    golden(1.0f32, "0000803f");
    golden(-2.5f64, "00000000000004c0");
}

#[test]
fn bool_is_one_byte_0_or_1_and_anything_else_is_rejected() {
    golden(false, "00");
    golden(true, "01");
    rejected::<bool>("02");
    rejected::<bool>("ff");
}

#[test]
fn char_is_its_utf8_bytes_without_a_length() {
    golden('a', "61");
    golden('é', "c3a9");
    golden('€', "e282ac");
    golden('😀', "f09f9880");
    // A lone surrogate or a truncated sequence is not a char.
    rejected::<char>("eda080");
    rejected::<char>("c3");
}

#[test]
fn unit_is_zero_bytes() {
    golden((), "");
}

#[test]
fn string_is_a_u64_length_then_utf8_bytes() {
    golden(String::new(), "0000000000000000");
    golden("ls".to_owned(), "0200000000000000 6c73");
    golden("é".to_owned(), "0200000000000000 c3a9");
    // Invalid UTF-8 is rejected.
    rejected::<String>("0100000000000000 ff");
    // &str encodes like String.
    assert_eq!(
        codec::encode(&"ls").unwrap(),
        codec::encode(&"ls".to_owned()).unwrap()
    );
}

#[test]
fn vec_is_a_u64_count_then_each_element() {
    golden(Vec::<u8>::new(), "0000000000000000");
    golden(vec![1u8, 2, 3], "0300000000000000 010203");
    golden(vec![1u32, 2], "0200000000000000 01000000 02000000");
    golden(
        vec!["a".to_owned(), "bc".to_owned()],
        "0200000000000000 0100000000000000 61 0200000000000000 6263",
    );
    // A slice encodes like a Vec.
    let slice: &[u8] = &[1, 2];
    assert_eq!(
        codec::encode(&slice).unwrap(),
        codec::encode(&vec![1u8, 2]).unwrap()
    );
}

#[test]
fn fixed_size_arrays_have_no_length() {
    golden([0xaau8; 4], "aaaaaaaa");
    golden(
        std::array::from_fn::<u8, 16, _>(|i| i as u8),
        "000102030405060708090a0b0c0d0e0f",
    );
    golden([1u16, 2, 3], "0100 0200 0300");
}

#[test]
fn option_is_a_u8_tag_then_the_value() {
    golden(None::<u32>, "00");
    golden(Some(7u32), "01 07000000");
    golden(Some(-1i32), "01 ffffffff");
    golden(Some(None::<u8>), "01 00");
    golden(Some("x".to_owned()), "01 0100000000000000 78");
    // Only 0 and 1 are tags.
    rejected::<Option<u8>>("02 00");
}

#[test]
fn result_is_a_u32_variant_index_then_the_value() {
    golden(Ok::<u8, u16>(5), "00000000 05");
    golden(Err::<u8, u16>(5), "01000000 0500");
    rejected::<Result<u8, u8>>("02000000 05");
}

#[test]
fn tuples_are_their_fields_in_order_with_no_framing() {
    golden((7u32, "ls".to_owned()), "07000000 0200000000000000 6c73");
    golden((true, 1u16, Some(2u8)), "01 0100 0102");
    golden(((1u8, 2u8), [3u8; 2]), "0102 0303");
}

#[test]
fn maps_are_a_u64_count_then_key_value_pairs_in_iteration_order() {
    let mut btree = BTreeMap::new();
    btree.insert(2u8, "b".to_owned());
    btree.insert(1u8, "a".to_owned());
    // BTreeMap iterates in key order, so its bytes are deterministic.
    golden(
        btree,
        "0200000000000000 01 0100000000000000 61 02 0100000000000000 62",
    );
    golden(BTreeMap::<u8, u8>::new(), "0000000000000000");
    // HashMap iterates in an unspecified order: one entry is deterministic, more are not.
    let mut hash = HashMap::new();
    hash.insert(9u16, 1u8);
    golden(hash, "0100000000000000 0900 01");
    let mut big = HashMap::new();
    for k in 0u8..20 {
        big.insert(k, u32::from(k) * 3);
    }
    let bytes = codec::encode(&big).unwrap();
    assert_eq!(bytes.len(), 8 + 20 * 5);
    assert_eq!(hex(&bytes[..8]), "1400000000000000");
    let back: HashMap<u8, u32> = codec::decode(CODEC_VERSION, &bytes).unwrap();
    assert_eq!(back, big);
}

#[test]
fn sets_are_a_u64_count_then_elements() {
    golden(BTreeSet::from([3u8, 1, 2]), "0300000000000000 010203");
    golden(HashSet::from([5u32]), "0100000000000000 05000000");
}

#[test]
fn boxes_and_shared_pointers_are_transparent() {
    golden(Box::new(5u16), "0500");
    golden(std::sync::Arc::new(5u16), "0500");
    golden(std::rc::Rc::new(5u16), "0500");
}

#[test]
fn vec_deque_is_a_u64_count_then_elements() {
    golden(
        std::collections::VecDeque::from([1u8, 2]),
        "0200000000000000 0102",
    );
}

#[test]
fn event_ids_are_their_16_bytes_in_rfc_9562_order_without_a_length() {
    let id = EventId::from_bytes([
        0x01, 0x7f, 0x22, 0xe2, 0x79, 0xb0, 0x7c, 0xc3, 0x98, 0xc4, 0xdc, 0x0c, 0x0c, 0x07, 0x39,
        0x8f,
    ]);
    assert_eq!(id.to_string(), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
    golden(id, "017f22e279b07cc398c4dc0c0c07398f");
    golden(Some(id), "01 017f22e279b07cc398c4dc0c0c07398f");
}

#[test]
fn durations_and_times_are_u64_seconds_then_u32_nanoseconds() {
    golden(Duration::new(1, 2), "0100000000000000 02000000");
    golden(
        SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 500),
        "00f1536500000000 f4010000",
    );
}

#[derive(Debug, PartialEq, Encode, Decode)]
struct Started {
    pid: u32,
    argv: Vec<String>,
    exit: Option<i32>,
    id: [u8; 4],
}

#[derive(Debug, PartialEq, Encode, Decode)]
struct Wrapper(u16, bool);

#[derive(Debug, PartialEq, Encode, Decode)]
struct Unit;

#[derive(Debug, PartialEq, Encode, Decode)]
enum Event {
    Spawned { pid: u32 },
    Exited(i32),
    Lost,
}

#[derive(Debug, PartialEq, Encode, Decode)]
#[allow(dead_code)]
enum WithDiscriminants {
    A = 10,
    B = 20,
}

#[test]
fn derived_structs_are_their_fields_in_declaration_order_with_no_names() {
    golden(
        Started {
            pid: 42,
            argv: vec!["ls".to_owned()],
            exit: None,
            id: [1, 2, 3, 4],
        },
        "2a000000 0100000000000000 0200000000000000 6c73 00 01020304",
    );
    golden(Wrapper(0x0102, true), "0201 01");
    golden(Unit, "");
}

#[test]
fn derived_enums_are_a_u32_variant_index_then_the_fields() {
    golden(Event::Spawned { pid: 7 }, "00000000 07000000");
    golden(Event::Exited(-1), "01000000 ffffffff");
    golden(Event::Lost, "02000000");
    // The index is the position of the variant in the declaration, not its discriminant.
    golden(WithDiscriminants::B, "01000000");
    // An index past the last variant is rejected.
    rejected::<Event>("03000000");
}

#[test]
fn nested_shapes_compose_without_extra_framing() {
    golden(
        vec![Some(Event::Lost), None],
        "0200000000000000 01 02000000 00",
    );
}

#[test]
fn decoding_must_consume_the_whole_payload() {
    let err = rejected::<u16>("0100 00");
    assert!(matches!(err, CodecError::Trailing(1)), "{err:?}");
    let err = rejected::<u32>("0100");
    assert!(matches!(err, CodecError::Decode(_)), "{err:?}");
}

#[test]
fn other_codec_versions_are_refused() {
    for version in [0u8, 2, 255] {
        let err = codec::decode::<u8>(version, &[1]).unwrap_err();
        assert!(
            matches!(err, CodecError::Version(v) if v == version),
            "{err:?}"
        );
    }
}

#[test]
fn a_length_claiming_more_than_the_decode_limit_is_refused_before_allocating() {
    // A Vec<u8> claiming 8 MiB + 1 bytes (the limit is 8 x the payload cap): refused by the
    // limit before any allocation.
    let err = rejected::<Vec<u8>>("0100800000000000");
    assert!(matches!(err, CodecError::Decode(_)), "{err:?}");
    assert!(format!("{err}").contains("Limit"), "{err}");
    // A Vec<u64> of 2^62 elements likewise.
    let err = rejected::<Vec<u64>>("0000000000000040");
    assert!(format!("{err}").contains("Limit"), "{err}");
}

/// Regression: the decode limit used to be the payload cap itself, but bincode claims the
/// *in-memory* size of container elements (24 bytes per `String`), so a 400 KB payload of 50,000
/// empty strings failed to decode. The largest payload the journal accepts must decode.
#[test]
fn every_payload_within_the_record_limit_decodes() {
    let limit = procjournal::limits::RECORD_PAYLOAD_BYTES_MAX;
    let strings = vec![String::new(); (limit - 8) / 8];
    let bytes = codec::encode(&strings).unwrap();
    assert_eq!(bytes.len(), limit);
    assert_eq!(
        codec::decode::<Vec<String>>(CODEC_VERSION, &bytes).unwrap(),
        strings
    );
    let pairs = vec![(String::new(), String::new()); (limit - 8) / 16];
    let bytes = codec::encode(&pairs).unwrap();
    assert!(bytes.len() <= limit);
    assert_eq!(
        codec::decode::<Vec<(String, String)>>(CODEC_VERSION, &bytes).unwrap(),
        pairs
    );
}
