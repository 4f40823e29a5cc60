//! Byte sizes on the command line (`--retention 64MiB`): a whole number and an optional binary
//! unit, parsed totally (every string gives a size or a [`SizeError`], never a panic or a
//! silently wrapped value).
//!
//! Units are powers of 1024 whether spelled `K`, `KiB` or `k` (as `ulimit`, systemd and
//! docker read them). `KB`, `MB`, `GB` and `TB` are refused, not guessed: half the world reads
//! them as powers of 1000.

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SizeError {
    #[error("{0:?} is not a size like 4096, 512K, 64MiB or 1G")]
    Malformed(String),
    #[error("unknown unit {unit:?} in {text:?} (B, K/KiB, M/MiB, G/GiB, T/TiB)")]
    UnknownUnit { text: String, unit: String },
    #[error("{unit:?} in {text:?} is ambiguous (1000 or 1024?): write {binary} for powers of 1024")]
    Ambiguous {
        text: String,
        unit: String,
        binary: &'static str,
    },
    #[error("{0:?} is too large")]
    Overflow(String),
}

/// The units accepted, lowercased, with their multipliers.
const UNITS: [(&str, u64); 10] = [
    ("", 1),
    ("b", 1),
    ("k", 1 << 10),
    ("kib", 1 << 10),
    ("m", 1 << 20),
    ("mib", 1 << 20),
    ("g", 1 << 30),
    ("gib", 1 << 30),
    ("t", 1 << 40),
    ("tib", 1 << 40),
];

/// Parses `text` into bytes: digits, optional spaces, an optional unit (any case).
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    let malformed = || SizeError::Malformed(shorten(text));
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    if digits.is_empty() {
        return Err(malformed());
    }
    let unit = unit.trim_start().to_ascii_lowercase();
    let multiplier = match unit.as_str() {
        "kb" | "mb" | "gb" | "tb" => {
            let binary = match unit.as_str() {
                "kb" => "K or KiB",
                "mb" => "M or MiB",
                "gb" => "G or GiB",
                _ => "T or TiB",
            };
            return Err(SizeError::Ambiguous {
                text: shorten(text),
                unit: unit.clone(),
                binary,
            });
        }
        other => match UNITS.iter().find(|(name, _)| *name == other) {
            Some((_, multiplier)) => *multiplier,
            None => {
                return Err(SizeError::UnknownUnit {
                    text: shorten(text),
                    unit: shorten(other),
                });
            }
        },
    };
    // Digits only, so the one failure left is a value past u64.
    let value: u64 = digits
        .parse()
        .map_err(|_| SizeError::Overflow(shorten(text)))?;
    value
        .checked_mul(multiplier)
        .ok_or_else(|| SizeError::Overflow(shorten(text)))
}

/// A size for people: the largest binary unit that divides it exactly (`64MiB`), else bytes.
pub(crate) fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes != 0 && bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `--retention SIZE`: a size within the bounds every surface enforces
/// ([`crate::limits::RETENTION_BYTES_MIN`] to [`crate::limits::RETENTION_BYTES_MAX`]).
pub(crate) fn parse_retention(text: &str) -> Result<u64, String> {
    use crate::limits::{RETENTION_BYTES_MAX, RETENTION_BYTES_MIN};
    let bytes = parse_size(text).map_err(|e| e.to_string())?;
    if !(RETENTION_BYTES_MIN..=RETENTION_BYTES_MAX).contains(&bytes) {
        return Err(format!(
            "{} is out of range: at least {} (one spool segment: retention deletes whole \
             segments) and at most {}",
            format_size(bytes),
            format_size(RETENTION_BYTES_MIN),
            format_size(RETENTION_BYTES_MAX)
        ));
    }
    Ok(bytes)
}

/// Keeps what a user typed short in error messages.
fn shorten(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_bytes_and_binary_units() {
        for (text, bytes) in [
            ("4096", 4096),
            ("0", 0),
            ("7B", 7),
            ("512K", 512 << 10),
            ("512k", 512 << 10),
            ("512KiB", 512 << 10),
            ("64MiB", 64 << 20),
            ("64mib", 64 << 20),
            ("64M", 64 << 20),
            ("1G", 1 << 30),
            ("1 GiB", 1 << 30),
            (" 2t ", 2 << 40),
            ("1TiB", 1 << 40),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text:?}");
        }
    }

    #[test]
    fn refuses_what_it_cannot_read_exactly() {
        let err = |text: &str| parse_size(text).unwrap_err();
        assert!(matches!(err(""), SizeError::Malformed(_)));
        assert!(matches!(err("MiB"), SizeError::Malformed(_)));
        assert!(matches!(err("-1"), SizeError::Malformed(_)));
        assert!(matches!(err("+1"), SizeError::Malformed(_)));
        assert!(matches!(err("1.5G"), SizeError::UnknownUnit { .. }));
        assert!(matches!(err("1e6"), SizeError::UnknownUnit { .. }));
        assert!(matches!(err("64 MiB extra"), SizeError::UnknownUnit { .. }));
        assert!(matches!(err("1P"), SizeError::UnknownUnit { .. }));
        assert!(matches!(err("64MB"), SizeError::Ambiguous { .. }));
        assert!(matches!(err("1gb"), SizeError::Ambiguous { .. }));
        assert!(matches!(
            err("18446744073709551616"),
            SizeError::Overflow(_)
        ));
        assert!(matches!(err("16777216T"), SizeError::Overflow(_)));
        assert!(err("64MB").to_string().contains("M or MiB"));
    }

    #[test]
    fn retention_is_bounded() {
        assert_eq!(parse_retention("64MiB"), Ok(64 << 20));
        assert_eq!(
            parse_retention("8M"),
            Ok(crate::limits::RETENTION_BYTES_MIN)
        );
        assert_eq!(
            parse_retention("4G"),
            Ok(crate::limits::RETENTION_BYTES_MAX)
        );
        for bad in ["0", "1M", "8388607", "4097M", "1T"] {
            let e = parse_retention(bad).unwrap_err();
            assert!(e.contains("out of range"), "{bad}: {e}");
        }
        assert!(parse_retention("64MB").unwrap_err().contains("ambiguous"));
    }

    #[test]
    fn formats_exact_units() {
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(3 << 10), "3KiB");
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(1000), "1000");
    }

    proptest! {
        /// Total: any string gives a size or an error, never a panic.
        #[test]
        fn any_text_is_parsed_or_refused(text in "\\PC{0,24}") {
            let _ = parse_size(&text);
            let _ = parse_retention(&text);
        }

        /// A number with any accepted unit spelling is exactly that many units, or an overflow.
        #[test]
        fn numbers_with_units_are_exact(
            value in any::<u64>(),
            (unit, multiplier) in proptest::sample::select(UNITS.to_vec()),
            upper in any::<bool>(),
            space in any::<bool>(),
        ) {
            let unit = if upper { unit.to_ascii_uppercase() } else { unit.to_owned() };
            let text = format!("{value}{}{unit}", if space { " " } else { "" });
            match value.checked_mul(multiplier) {
                Some(bytes) => prop_assert_eq!(parse_size(&text), Ok(bytes)),
                None => prop_assert!(matches!(parse_size(&text), Err(SizeError::Overflow(_)))),
            }
        }

        /// What `format_size` prints, `parse_size` reads back.
        #[test]
        fn formatted_sizes_parse_back(bytes in prop_oneof![
            any::<u64>(),
            (0u64..1 << 20, 0u32..4).prop_map(|(n, k)| n << (10 * k)),
        ]) {
            prop_assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
    }
}
