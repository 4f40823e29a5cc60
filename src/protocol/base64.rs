//! Strict base64 decoding (RFC 4648 standard alphabet, padded) of client-supplied input bytes.
//!
//! Invariant: [`decode`] is total and canonical: it accepts exactly the strings that
//! [`crate::render::base64`] produces, so every byte string has one encoding and a decoded
//! request re-encodes to the same text. Whitespace, the URL-safe alphabet, missing padding and
//! non-zero trailing bits are refused with the offending position.

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
    #[error("base64 has non-zero bits after the last byte at offset {0}")]
    TrailingBits(usize),
}

fn value(byte: u8) -> Option<u8> {
    match byte {
        b'A'..=b'Z' => Some(byte - b'A'),
        b'a'..=b'z' => Some(byte - b'a' + 26),
        b'0'..=b'9' => Some(byte - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Decodes padded standard base64.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Err(Base64Error::Length(bytes.len()));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (q, quad) in bytes.chunks_exact(4).enumerate() {
        let at = q * 4;
        let last = q + 1 == quads;
        let pad = quad.iter().rev().take_while(|&&b| b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(Base64Error::Padding(at + 4 - pad));
        }
        let mut v = [0u8; 4];
        for (i, &b) in quad[..4 - pad].iter().enumerate() {
            v[i] = match value(b) {
                Some(x) => x,
                None if b == b'=' => return Err(Base64Error::Padding(at + i)),
                None => return Err(Base64Error::Character(at + i)),
            };
        }
        let n = (u32::from(v[0]) << 18)
            | (u32::from(v[1]) << 12)
            | (u32::from(v[2]) << 6)
            | u32::from(v[3]);
        let (b0, b1, b2) = ((n >> 16) as u8, (n >> 8) as u8, n as u8);
        match pad {
            0 => out.extend_from_slice(&[b0, b1, b2]),
            1 => {
                if b2 != 0 {
                    return Err(Base64Error::TrailingBits(at + 2));
                }
                out.extend_from_slice(&[b0, b1]);
            }
            _ => {
                if b1 != 0 {
                    return Err(Base64Error::TrailingBits(at + 1));
                }
                out.push(b0);
            }
        }
    }
    Ok(out)
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
            assert_eq!(crate::render::base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn refuses_non_canonical_and_foreign_forms() {
        assert_eq!(decode("Zg="), Err(Base64Error::Length(3)));
        assert_eq!(decode("Zg"), Err(Base64Error::Length(2)));
        assert_eq!(decode("Zh=="), Err(Base64Error::TrailingBits(1)));
        assert_eq!(decode("Zm9="), Err(Base64Error::TrailingBits(2)));
        assert_eq!(decode("Z==="), Err(Base64Error::Padding(1)));
        assert_eq!(decode("Zg==Zm9v"), Err(Base64Error::Padding(2)));
        assert_eq!(decode("Z=g="), Err(Base64Error::Padding(1)));
        assert_eq!(decode("Zm9v\nYmFy"), Err(Base64Error::Length(9)));
        assert_eq!(decode("Zm-_"), Err(Base64Error::Character(2)));
        assert_eq!(decode("Zm9 "), Err(Base64Error::Character(3)));
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        for len in 0..all.len() {
            let encoded = crate::render::base64(&all[..len]);
            assert_eq!(decode(&encoded).unwrap(), &all[..len]);
        }
    }
}
