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
//!
//! [`Reader`] reads the same encoding by hand, borrowing from the payload, for hot paths (replay)
//! where bincode's owned decoding costs more than the rest of the work. It is the second and last
//! place that knows the encoding; a decoder built on it must accept exactly the bytes that
//! [`decode`] accepts for the same type (differential tests in `tests/it/decoder_props.rs` and the
//! `lifecycle_store` fuzz target hold each such decoder to that).

use crate::limits::RECORD_PAYLOAD_BYTES_MAX;

#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;

pub use bincode::{Decode, Encode};

/// Version byte stored in each record header for payloads written by this module.
pub const CODEC_VERSION: u8 = 1;

/// The decoder's allocation bound. bincode claims `count x size_of::<element>()` of *memory*
/// before it decodes a container (and the bytes of every integer it reads), so the bound must
/// exceed the payload cap by the largest ratio of claims to minimal encoded size of any element
/// type an event uses: `EnvVar` (48 bytes in memory and 9 read for a name and a `None`, per 9
/// encoded: 6.3); `String` and `(String, String)` claim 4 per encoded byte. With 8x, every
/// payload the journal accepts decodes (`an_envvar_payload_at_the_cap_decodes`), and a forged
/// count still fails before allocating.
pub const DECODE_LIMIT_BYTES: usize = 8 * RECORD_PAYLOAD_BYTES_MAX;

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

/// The allocation bound of [`decode_frame`], by the argument of [`DECODE_LIMIT_BYTES`] applied
/// to a snapshot frame's size bound instead of a record's.
pub const FRAME_DECODE_LIMIT_BYTES: usize = 4 * crate::limits::SNAPSHOT_FRAME_BYTES_MAX;

type FrameConfig = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::Limit<FRAME_DECODE_LIMIT_BYTES>,
>;

const fn frame_config() -> FrameConfig {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<FRAME_DECODE_LIMIT_BYTES>()
}

/// Appends the encoding of `value` to `out` (the same bytes [`encode`] returns).
pub fn encode_into<T: Encode>(value: &T, out: &mut Vec<u8>) -> Result<usize, CodecError> {
    bincode::encode_into_std_write(value, out, config())
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes one frame of a snapshot (journal-format.md, "Snapshots and compaction"): the same
/// encoding as [`decode`], for values up to [`crate::limits::SNAPSHOT_FRAME_BYTES_MAX`] bytes,
/// which may exceed one record's payload. The codec version is the snapshot header's, checked by
/// the caller. Total, and must consume every byte, like [`decode`].
pub fn decode_frame<T: Decode<()>>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, used) = bincode::decode_from_slice(bytes, frame_config())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::Trailing(bytes.len() - used));
    }
    Ok(value)
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

/// A payload that [`Reader`] could not read. Carries no detail on purpose: a caller that needs the
/// reason decodes the same bytes with [`decode`], whose error is the one every reader reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// A borrowing reader of one codec version 1 payload, by hand (journal-format.md, "Payload
/// encoding"): fixed-width little-endian integers, `u64` lengths, `u8` option tags, `u32` enum
/// variant indexes, strings as validated UTF-8.
///
/// It only reads payloads of at most [`RECORD_PAYLOAD_BYTES_MAX`] bytes ([`Reader::new`] refuses
/// longer ones). That is what makes its acceptance equal to [`decode`]'s without modelling
/// bincode's allocation claims: bincode claims less than 8 bytes per encoded byte for the element
/// types of events (`String`: 24 in memory and 8 read per 8 encoded; `EnvVar`: 48 and 9 per 9),
/// so a payload that is all there never reaches [`DECODE_LIMIT_BYTES`] (8 x the payload cap), and
/// bincode refuses a payload only for a reason this reader checks too.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `payload`, when [`decode`] would get as far as reading it: codec version 1 and
    /// at most [`RECORD_PAYLOAD_BYTES_MAX`] bytes. Anything else is for [`decode`].
    pub fn new(codec_version: u8, payload: &'a [u8]) -> Option<Self> {
        (codec_version == CODEC_VERSION && payload.len() <= RECORD_PAYLOAD_BYTES_MAX)
            .then_some(Reader { rest: payload })
    }

    /// A reader of one snapshot frame (up to [`crate::limits::SNAPSHOT_FRAME_BYTES_MAX`] bytes,
    /// checked by the caller), whose codec version is the snapshot header's. Its acceptance
    /// equals [`decode_frame`]'s by the argument above, with the frame cap in place of the
    /// payload cap: bincode's frame limit is 4 x the frame cap, and it claims at most 3 bytes of
    /// memory per encoded byte for the element types of a manifest (strings; `u64`, `EventId` and
    /// `Gap` elements claim at most 4/3 of their encoded size).
    pub fn frame(bytes: &'a [u8]) -> Option<Self> {
        (bytes.len() <= crate::limits::SNAPSHOT_FRAME_BYTES_MAX).then_some(Reader { rest: bytes })
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    #[inline]
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let (head, rest) = self.rest.split_first_chunk::<N>().ok_or(Malformed)?;
        self.rest = rest;
        Ok(*head)
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take::<1>()?[0])
    }

    #[inline]
    pub fn u16(&mut self) -> Result<u16, Malformed> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    #[inline]
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    #[inline]
    pub fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(i32::from_le_bytes(self.take()?))
    }

    #[inline]
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    /// A `[u8; 16]` (an `EventId`, a boot ID): 16 bytes, no length.
    #[inline]
    pub fn bytes16(&mut self) -> Result<[u8; 16], Malformed> {
        self.take()
    }

    /// A length or element count: a `u64` that must fit `usize`.
    #[inline]
    pub fn length(&mut self) -> Result<usize, Malformed> {
        usize::try_from(self.u64()?).map_err(|_| Malformed)
    }

    /// A container's element count, for elements that encode in at least `element_bytes_min`
    /// bytes (non-zero): a count the bytes left cannot hold is refused before anything is sized
    /// by it (decoding would fail anyway, at the first missing element).
    #[inline]
    pub fn count(&mut self, element_bytes_min: usize) -> Result<usize, Malformed> {
        let n = self.length()?;
        if n > self.rest.len() / element_bytes_min.max(1) {
            return Err(Malformed);
        }
        Ok(n)
    }

    /// A `String` or `&str`: its length, then that many bytes of valid UTF-8.
    #[inline]
    pub fn str(&mut self) -> Result<&'a str, Malformed> {
        std::str::from_utf8(self.str_bytes()?).map_err(|_| Malformed)
    }

    /// The bytes of a `String` or `&str`, not yet checked to be UTF-8: the caller must check
    /// them (all of them, including any it drops) before it accepts the payload.
    #[inline]
    pub fn str_bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.length()?;
        if len > self.rest.len() {
            return Err(Malformed);
        }
        let (text, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(text)
    }

    /// A `bool`: `00` false, `01` true; any other byte is refused.
    #[inline]
    pub fn bool(&mut self) -> Result<bool, Malformed> {
        self.option()
    }

    /// An `Option` tag: `false` for `None`, `true` for `Some`; any tag but 0 and 1 is refused.
    #[inline]
    pub fn option(&mut self) -> Result<bool, Malformed> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed),
        }
    }

    /// An enum variant index, which must be below `variants`.
    #[inline]
    pub fn variant(&mut self, variants: u32) -> Result<u32, Malformed> {
        let index = self.u32()?;
        if index < variants {
            Ok(index)
        } else {
            Err(Malformed)
        }
    }

    /// Ends the read: the payload must be consumed exactly.
    #[inline]
    pub fn finish(self) -> Result<(), Malformed> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(Malformed)
        }
    }
}

/// Event IDs travel inside payloads as their 16 bytes (RFC 9562 order), no length prefix.
impl Encode for crate::event_id::EventId {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        self.as_bytes().encode(encoder)
    }
}

impl<Context> Decode<Context> for crate::event_id::EventId {
    fn decode<D: bincode::de::Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> Result<Self, bincode::error::DecodeError> {
        Ok(crate::event_id::EventId::from_bytes(<[u8; 16]>::decode(
            decoder,
        )?))
    }
}

bincode::impl_borrow_decode!(crate::event_id::EventId);
