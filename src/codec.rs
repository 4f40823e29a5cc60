//! The payload codec: bincode 2.0.1, pinned exactly, with one fixed configuration.
//!
//! bincode is unmaintained (RUSTSEC-2025-0141) and 3.0.0 is an empty crate, so it is confined to
//! this module: nothing else in the crate names it. The configuration is little-endian with
//! fixed-width integers, which journal-format.md ("Payload encoding") spells out byte for byte so
//! that no reader needs bincode. Golden-byte tests pin the encoding of every shape an event uses.
//!
//! Invariants: decoding is total (allocation bounded by [`DECODE_LIMIT_BYTES`], never a panic,
//! typed error on any bad input), must consume the whole payload, and decodes every payload of
//! at most [`RECORD_PAYLOAD_BYTES_MAX`] bytes that `encode` produced.

use crate::limits::RECORD_PAYLOAD_BYTES_MAX;

pub use bincode::{Decode, Encode};

/// Version byte stored in each record header for payloads written by this module.
pub const CODEC_VERSION: u8 = 1;

/// The decoder's allocation bound. bincode claims `count x size_of::<element>()` of *memory*
/// before it decodes a container, so the bound must exceed the payload cap by the largest ratio of
/// in-memory size to minimal encoded size of any element type an event uses: 3 for `String`
/// (24 bytes in memory, 8 encoded when empty) and for `(String, String)` map entries. With 4x,
/// every payload the journal accepts decodes, and a forged count still fails before allocating.
pub const DECODE_LIMIT_BYTES: usize = 4 * RECORD_PAYLOAD_BYTES_MAX;

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::Limit<DECODE_LIMIT_BYTES>,
>;

const fn config() -> Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<DECODE_LIMIT_BYTES>()
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    #[error("cannot encode payload: {0}")]
    Encode(String),
    #[error("unsupported codec version {0}")]
    Version(u8),
    #[error("cannot decode payload: {0}")]
    Decode(String),
    #[error("{0} trailing bytes after the payload")]
    Trailing(usize),
}

pub fn encode<T: Encode>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

pub fn decode<T: Decode<()>>(codec_version: u8, bytes: &[u8]) -> Result<T, CodecError> {
    if codec_version != CODEC_VERSION {
        return Err(CodecError::Version(codec_version));
    }
    let (value, used) = bincode::decode_from_slice(bytes, config())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::Trailing(bytes.len() - used));
    }
    Ok(value)
}

/// Event IDs travel inside payloads as their 16 bytes (RFC 9562 order), no length prefix.
impl Encode for crate::journal::EventId {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        self.as_bytes().encode(encoder)
    }
}

impl<Context> Decode<Context> for crate::journal::EventId {
    fn decode<D: bincode::de::Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> Result<Self, bincode::error::DecodeError> {
        Ok(crate::journal::EventId::from_bytes(<[u8; 16]>::decode(
            decoder,
        )?))
    }
}

bincode::impl_borrow_decode!(crate::journal::EventId);
