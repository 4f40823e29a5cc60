//! Strict base64 decoding (RFC 4648 standard alphabet, padded) of client-supplied input bytes,
//! with the `base64` crate's `STANDARD` engine, whose configuration is exactly this contract.
//!
//! Invariant: [`decode`] is total and canonical: it accepts exactly the strings that
//! [`crate::spool::render::base64`] produces, so every byte string has one encoding and a decoded
//! request re-encodes to the same text. Whitespace, the URL-safe alphabet, missing padding and
//! non-zero trailing bits are refused with the offending position where there is one.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Why a base64 string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Base64Error {
    #[error("base64 length {0} is not a multiple of 4 (padding with '=' is required)")]
    Length(usize),
    #[error("invalid base64 character at offset {0}")]
    Character(usize),
    #[error("base64 padding is misplaced at offset {0}")]
    Padding(usize),
    #[error("base64 padding is missing or not canonical")]
    PaddingForm,
    #[error("base64 has non-zero bits after the last byte at offset {0}")]
    TrailingBits(usize),
}

/// Decodes padded standard base64.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    // The engine accepts an unpadded final quad under some padding modes; `STANDARD` requires
    // canonical padding, and the length check keeps the error as clear as it was.
    if !text.len().is_multiple_of(4) {
        return Err(Base64Error::Length(text.len()));
    }
    STANDARD.decode(text).map_err(|e| match e {
        base64::DecodeError::InvalidByte(at, b'=') => Base64Error::Padding(at),
        base64::DecodeError::InvalidByte(at, _) => Base64Error::Character(at),
        base64::DecodeError::InvalidLength(len) => Base64Error::Length(len),
        base64::DecodeError::InvalidLastSymbol(at, _) => Base64Error::TrailingBits(at),
        base64::DecodeError::InvalidPadding => Base64Error::PaddingForm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(decode(encoded).unwrap(), plain.as_bytes(), "{encoded}");
            assert_eq!(crate::spool::render::base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn refuses_non_canonical_and_foreign_forms() {
        assert_eq!(decode("Zg="), Err(Base64Error::Length(3)));
        assert_eq!(decode("Zg"), Err(Base64Error::Length(2)));
        assert_eq!(decode("Zh=="), Err(Base64Error::TrailingBits(1)));
        assert_eq!(decode("Zm9="), Err(Base64Error::TrailingBits(2)));
        assert_eq!(decode("Zm9v\nYmFy"), Err(Base64Error::Length(9)));
        assert_eq!(decode("Zm-_"), Err(Base64Error::Character(2)));
        assert_eq!(decode("Zm9 "), Err(Base64Error::Character(3)));
        for misplaced in ["Z===", "Zg==Zm9v", "Z=g="] {
            assert!(
                matches!(
                    decode(misplaced),
                    Err(Base64Error::Padding(_) | Base64Error::PaddingForm)
                ),
                "{misplaced}: {:?}",
                decode(misplaced)
            );
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        for len in 0..all.len() {
            let encoded = crate::spool::render::base64(&all[..len]);
            assert_eq!(decode(&encoded).unwrap(), &all[..len]);
        }
    }
}
