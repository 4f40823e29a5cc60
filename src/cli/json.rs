//! The JSON every `--json` prints: serde_json's compact form, except that the characters a
//! terminal may act on and serde_json leaves raw are written as `\uXXXX` escapes.
//!
//! serde_json escapes only what JSON requires (`"`, `\` and U+0000–U+001F). DEL, the C1 controls
//! (U+0080–U+009F: U+009B is a CSI on a terminal that takes 8-bit controls) and the
//! bidirectional controls (`render::is_bidi_control`: U+202E reorders what a terminal shows
//! after it) would reach the terminal raw from a label, a command or an error. Escaped, the JSON
//! is the same value: `jq` and every parser read exactly the strings they read before.

use std::io::{self, Write};

use serde::Serialize;

/// Writes `value` as JSON to `writer` (no newline), as `serde_json::to_writer` does but with
/// the escapes above.
pub(crate) fn to_writer<W: Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
) -> serde_json::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(writer, TerminalSafe);
    value.serialize(&mut serializer)
}

/// `value` as one line of JSON (no newline), with the escapes above.
pub(crate) fn line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    to_writer(&mut out, value)?;
    // The formatter writes only what serde_json gives it (UTF-8) and ASCII escapes.
    String::from_utf8(out).map_err(|e| serde_json::Error::io(io::Error::other(e)))
}

fn escaped(c: char) -> bool {
    c == '\u{7f}' || ('\u{80}'..='\u{9f}').contains(&c) || crate::spool::render::is_bidi_control(c)
}

struct TerminalSafe;

impl serde_json::ser::Formatter for TerminalSafe {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut from = 0;
        for (at, c) in fragment.char_indices() {
            if escaped(c) {
                writer.write_all(&fragment.as_bytes()[from..at])?;
                write!(writer, "\\u{:04x}", u32::from(c))?;
                from = at + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[from..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn c1_del_and_bidi_controls_are_escaped_and_read_back_the_same() {
        let label = "a\u{9b}2J\u{7f}b\u{202e}c\u{1b}]0;t\u{7}é世";
        let value = serde_json::json!({"labels": {"k": label}, "n": 1});
        let text = line(&value).unwrap();
        assert_eq!(
            text,
            r#"{"labels":{"k":"a\u009b2J\u007fb\u202ec\u001b]0;t\u0007é世"},"n":1}"#
        );
        assert!(!text.chars().any(escaped));
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    proptest! {
        /// Any string: the line holds no character a terminal acts on, and parses back to the
        /// same value serde_json's own line does.
        #[test]
        fn every_string_round_trips_without_raw_controls(s in any::<String>()) {
            let value = serde_json::json!([s, {"k": s}]);
            let text = line(&value).unwrap();
            prop_assert!(!text.chars().any(|c| c.is_control() || escaped(c)));
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back, value);
        }
    }
}
