//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

use std::collections::BTreeMap;

use crate::codec::{self, Decode, Encode};

// ------------------------------------------------------------------------------------------------
// codec_decode

/// A representative event payload: every shape the codec must carry.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct FuzzPayload {
    pub command: String,
    pub output: Vec<u8>,
    pub exit_code: Option<u64>,
    pub env: BTreeMap<String, String>,
    pub state: FuzzState,
    pub id: [u8; 16],
    pub history: Vec<FuzzState>,
}

/// A representative enum with unit, tuple and struct variants.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum FuzzState {
    Starting,
    Running { pid: u32, started_ms: u64 },
    Exited(i32),
    Signalled { signo: u8, core_dumped: bool },
    Failed(String),
}

/// The same wire shape as [`FuzzPayload`], with the map as the list of pairs it is on the wire. A
/// map decoder keeps the last of duplicate keys and sorts them, so only a payload whose keys are
/// strictly increasing is the canonical encoding of the value it decodes to.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
struct FuzzPayloadWire {
    command: String,
    output: Vec<u8>,
    exit_code: Option<u64>,
    env: Vec<(String, String)>,
    state: FuzzState,
    id: [u8; 16],
    history: Vec<FuzzState>,
}

/// Decodes `data` as a [`FuzzPayload`]; when it decodes, re-encoding must give back `data` exactly
/// (or, when the map part of `data` is not canonical, the canonical encoding of the same value).
pub fn codec_decode(data: &[u8]) {
    assert!(codec::decode::<FuzzPayload>(codec::CODEC_VERSION.wrapping_add(1), data).is_err());
    let value = codec::decode::<FuzzPayload>(codec::CODEC_VERSION, data);
    let wire = codec::decode::<FuzzPayloadWire>(codec::CODEC_VERSION, data);
    let (value, wire) = match (value, wire) {
        (Ok(value), Ok(wire)) => (value, wire),
        (Err(_), Err(_)) => return,
        (value, wire) => panic!(
            "the map and its wire shape disagree: {:?} vs {:?}",
            value.map(|_| ()),
            wire.map(|_| ())
        ),
    };
    let from_wire: BTreeMap<String, String> = wire.env.iter().cloned().collect();
    assert_eq!(value.env, from_wire);
    let encoded = match codec::encode(&value) {
        Ok(bytes) => bytes,
        Err(e) => panic!("a decoded value does not encode: {e}"),
    };
    let canonical = wire.env.windows(2).all(|w| w[0].0 < w[1].0);
    if canonical {
        assert_eq!(
            encoded, data,
            "a decoded payload does not re-encode to its bytes"
        );
    } else {
        let canonical_wire = FuzzPayloadWire {
            env: value.env.clone().into_iter().collect(),
            ..wire
        };
        let expected = match codec::encode(&canonical_wire) {
            Ok(bytes) => bytes,
            Err(e) => panic!("the canonical wire shape does not encode: {e}"),
        };
        assert_eq!(encoded, expected);
    }
    match codec::decode::<FuzzPayload>(codec::CODEC_VERSION, &encoded) {
        Ok(again) => assert_eq!(again, value, "decode(encode(v)) != v"),
        Err(e) => panic!("a re-encoded payload does not decode: {e}"),
    }
}
