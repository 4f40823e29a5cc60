//! Rendering tests: each normalisation rule, the split-sequence carry, base64 against known
//! vectors, and the no-path guarantee.

use super::*;

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
    let rendered = safe_text_of_read(&handle, &read, 100, true);
    let json = serde_json::to_string(&rendered).unwrap();
    let dir_name = dir.path().to_string_lossy().into_owned();
    assert!(!json.contains(&dir_name), "{json}");
    assert!(!json.contains(".seg") && !json.contains("spool/"), "{json}");
    assert_eq!(rendered.next_cursor, 7);
    let err = spool.read(99, 1).unwrap_err().to_string();
    assert!(!err.contains(&dir_name) && !err.contains('/'), "{err}");
}
