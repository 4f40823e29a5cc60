//! Rendering tests: each normalisation rule, the split-sequence carry, base64 against known
//! vectors, and the no-path guarantee.

use super::*;

/// The renderer as it was before `plain_run`: one byte (or character) a step, the text built
/// with `push_str`. The differential property below holds the fast renderer to it.
fn reference(bytes: &[u8], at_end: bool) -> SafeText {
    let mut text = String::with_capacity(bytes.len());
    let mut normalized = false;
    let mut suspicious = 0usize;
    let mut nul = false;
    let mut i = 0;
    let mut consumed = bytes.len();
    let may_hold = |_from: usize| !at_end;
    while i < bytes.len() {
        let b = bytes[i];
        // Fast path: a run of printable ASCII.
        if (0x20..0x7f).contains(&b) {
            let run = bytes[i..]
                .iter()
                .position(|&c| !(0x20..0x7f).contains(&c))
                .map_or(bytes.len(), |p| i + p);
            // Printable ASCII is valid UTF-8, so the fallback never happens.
            text.push_str(std::str::from_utf8(&bytes[i..run]).unwrap_or_default());
            i = run;
            continue;
        }
        match b {
            b'\n' | b'\t' => {
                text.push(b as char);
                i += 1;
            }
            b'\r' => match bytes.get(i + 1) {
                Some(b'\n') => {
                    normalized = true;
                    text.push('\n');
                    i += 2;
                }
                None if may_hold(i) => {
                    consumed = i;
                    break;
                }
                _ => {
                    normalized = true;
                    text.push('\n');
                    i += 1;
                }
            },
            ESC => match escape_unit_len(&bytes[i..]) {
                Some(len) => {
                    normalized = true;
                    i += len;
                }
                None if may_hold(i) => {
                    consumed = i;
                    break;
                }
                None => {
                    normalized = true;
                    i = bytes.len();
                }
            },
            0x00..=0x1f | 0x7f => {
                normalized = true;
                nul |= b == 0;
                suspicious += 1;
                i += 1;
            }
            _ => {
                let len = utf8_len(b);
                let end = i + len;
                if len > 0 && end > bytes.len() {
                    // Possibly a character split by the read: hold it if its prefix is valid.
                    let prefix_ok = bytes[i + 1..].iter().all(|&c| (0x80..=0xbf).contains(&c));
                    if prefix_ok && may_hold(i) {
                        consumed = i;
                        break;
                    }
                }
                match (len > 0)
                    .then(|| bytes.get(i..end))
                    .flatten()
                    .and_then(|s| std::str::from_utf8(s).ok())
                {
                    Some(s) => {
                        let c = s.chars().next().unwrap_or('\u{fffd}');
                        if ('\u{80}'..='\u{9f}').contains(&c) {
                            normalized = true; // a C1 control
                            suspicious += 1;
                        } else {
                            text.push_str(s);
                        }
                        i = end;
                    }
                    None => {
                        normalized = true;
                        suspicious += 1;
                        text.push('\u{fffd}');
                        i += 1;
                    }
                }
            }
        }
    }
    let binary = nul || (consumed > 0 && suspicious * 10 > consumed);
    SafeText {
        text,
        normalized,
        binary,
        consumed,
    }
}

fn check(input: &[u8], text: &str, normalized: bool) {
    let r = safe_text(input, true);
    assert_eq!(r.text, text, "input {input:?}");
    assert_eq!(r.normalized, normalized, "input {input:?}");
    assert_eq!(r.consumed, input.len());
}

#[test]
fn plain_text_passes_through_unnormalized() {
    check(b"hello\tworld\n", "hello\tworld\n", false);
    check("héllo wörld ✓ 𝄞\n".as_bytes(), "héllo wörld ✓ 𝄞\n", false);
    check(b"", "", false);
}

#[test]
fn control_sequences_are_removed() {
    check(b"\x1b[1;31mred\x1b[0m", "red", true);
    check(b"\x1b]0;title\x07text", "text", true);
    check(b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link", true);
    check(b"\x1bP1$r0m\x1b\\after", "after", true);
    check(b"a\x1b(Bb\x1b7c\x1b=d", "abcd", true);
    check(
        b"bell\x07 back\x08 nul\x00 del\x7f",
        "bell back nul del",
        true,
    );
    check("c1\u{9b}31m".as_bytes(), "c131m", true);
}

#[test]
fn carriage_returns_become_newlines() {
    check(b"line\r\nnext", "line\nnext", true);
    check(b"10%\r20%\r30%\n", "10%\n20%\n30%\n", true);
}

#[test]
fn invalid_utf8_is_replaced() {
    check(b"a\xffb", "a\u{fffd}b", true);
    check(b"\xe2\x82", "\u{fffd}\u{fffd}", true);
    check(b"\xed\xa0\x80", "\u{fffd}\u{fffd}\u{fffd}", true); // a surrogate is not UTF-8
}

#[test]
fn binary_looking_data_is_flagged() {
    assert!(safe_text(b"text with a \x00 nul", true).binary);
    let noise: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    assert!(safe_text(&noise, true).binary);
    assert!(!safe_text(b"\x1b[32mgreen\x1b[0m text\n", true).binary);
}

#[test]
fn a_split_character_or_sequence_is_carried_to_the_next_read_not_replaced() {
    let whole = "ab€\x1b[31mc".as_bytes();
    // Render the stream in two reads at every split point, as a live poller would.
    for split in 0..=whole.len() {
        let first = safe_text(&whole[..split], false);
        let rest = &whole[first.consumed..];
        let second = safe_text(rest, true);
        assert_eq!(first.text + &second.text, "ab€c", "split at {split}");
    }
    // At the end of the output nothing is held back.
    let r = safe_text(b"ab\xe2\x82", true);
    assert_eq!(r.consumed, 4);
    assert!(r.text.ends_with('\u{fffd}'));
}

#[test]
fn a_lone_carriage_return_at_a_live_edge_waits_for_its_newline() {
    let r = safe_text(b"abc\r", false);
    assert_eq!((r.text.as_str(), r.consumed), ("abc", 3));
    let r = safe_text(b"\r\n", false);
    assert_eq!(r.text, "\n");
}

#[test]
fn base64_matches_rfc_4648_vectors() {
    for (raw, encoded) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64(raw.as_bytes()), encoded);
    }
    assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
}

#[test]
fn renderings_name_no_path() {
    let dir = tempfile::tempdir().unwrap();
    let handle = crate::lifecycle::Handle(crate::journal::EventId::from_bytes([5; 16]));
    let options = crate::spool::SpoolOptions::default();
    let (mut spool, _) = crate::spool::Spool::open_writer(dir.path(), [5; 16], options).unwrap();
    spool
        .append(crate::spool::format::Stream::Stdout, b"output\n")
        .unwrap();
    let read = spool.read(0, 100).unwrap();
    let rendered = safe_text_of_read(&handle, &read, 100, 100, true);
    let json = serde_json::to_string(&rendered).unwrap();
    let dir_name = dir.path().to_string_lossy().into_owned();
    assert!(!json.contains(&dir_name), "{json}");
    assert!(!json.contains(".seg") && !json.contains("spool/"), "{json}");
    assert_eq!(rendered.next_cursor, 7);
    let err = spool.read(99, 1).unwrap_err().to_string();
    assert!(!err.contains(&dir_name) && !err.contains('/'), "{err}");
}

proptest::proptest! {
    /// The renderer gives exactly what the one-step-at-a-time reference gives, on arbitrary bytes
    /// and on terminal-like output (runs of text, escapes, controls, UTF-8, cut anywhere).
    #[test]
    fn agrees_with_the_reference(
        raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        pieces in proptest::collection::vec(
            proptest::sample::select(vec![
                "plain words here ", "\n", "\t", "\r", "\r\n", "\x1b[1;31m", "\x1b]0;t\x07",
                "\x1b", "\x1b[", "é", "€", "𝄞", "\u{9b}", "\x00", "\x7f", "abcdefghijklmnop",
            ]),
            0..40,
        ),
        cut in 0usize..400,
        at_end in proptest::prelude::any::<bool>(),
    ) {
        let mut text: Vec<u8> = pieces.concat().into_bytes();
        text.truncate(cut.min(text.len()));
        for input in [&raw[..], &text[..]] {
            proptest::prop_assert_eq!(safe_text(input, at_end), reference(input, at_end));
        }
    }
}

#[test]
fn plain_runs_stop_at_every_kind_of_special_byte() {
    for special in [0x00u8, 0x07, 0x0d, 0x1b, 0x1f, 0x7f, 0x80, 0xc3, 0xff] {
        for at in 0..20 {
            let mut bytes = vec![b'x'; 20];
            bytes[at] = special;
            assert_eq!(plain_run(&bytes), at, "byte {special:#x} at {at}");
        }
    }
    let mut bytes = b"a\tb\nc d~ ".repeat(5);
    assert_eq!(plain_run(&bytes), bytes.len());
    bytes.push(0x1b);
    assert_eq!(plain_run(&bytes), bytes.len() - 1);
}

/// `utf8_char` accepts exactly the characters `std::str::from_utf8` accepts: every lead byte
/// against every second byte, with valid and invalid later bytes.
#[test]
fn utf8_char_agrees_with_std() {
    let std_len = |bytes: &[u8]| {
        let valid = match std::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
        };
        valid.chars().next().map(char::len_utf8)
    };
    let tails: [&[u8]; 5] = [
        &[0x80, 0x80],
        &[0xbf, 0xbf],
        &[0x7f, 0x80],
        &[0x80, 0xc0],
        &[],
    ];
    for lead in 0x80..=0xffu8 {
        for second in 0..=0xffu8 {
            for tail in tails {
                let mut bytes = vec![lead, second];
                bytes.extend_from_slice(tail);
                assert_eq!(utf8_char(&bytes), std_len(&bytes), "{bytes:02x?}");
            }
        }
        assert_eq!(utf8_char(&[lead]), None, "{lead:02x}");
    }
}

/// A field shows every control and bidirectional control as a visible escape, keeps other
/// characters (accents, CJK, emoji), and can be read back: a backslash is doubled.
#[test]
fn escape_field_shows_controls_and_bidi_overrides_as_escapes() {
    let hostile = "\x1b]0;pwned\x07\x1b[2J\r\u{9b}\u{202e}gnp.exe\\";
    assert_eq!(
        escape_field(hostile, false),
        r"\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}\u{202e}gnp.exe\\"
    );
    for c in [
        '\u{061c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{2066}', '\u{2069}',
    ] {
        assert_eq!(
            escape_field(&c.to_string(), false),
            c.escape_default().to_string()
        );
    }
    assert!(matches!(
        escape_field("héllo 世界 🦀 a\u{200d}b", false),
        std::borrow::Cow::Borrowed(_)
    ));
    assert_eq!(escape_field("a\nb", true), "a\nb");
    assert_eq!(escape_field("a\nb", false), r"a\nb");
}

proptest::proptest! {
    /// Whatever a client sends, the field holds no control or bidirectional control character.
    #[test]
    fn escape_field_leaves_no_control_character(text in proptest::prelude::any::<String>()) {
        let field = escape_field(&text, false);
        proptest::prop_assert!(!field.chars().any(|c| c.is_control() || is_bidi_control(c)), "{field:?}");
    }
}
