//! Pages of safe text never split a UTF-8 character (or a `\r\n`, or an escape sequence), at any
//! `max_bytes`: written into a real spool in random chunks and read back page by page, cursor by
//! cursor, through `supervisor::read_page` (the loop of every offline reader; the supervisor's
//! `output` runs the same sizes), the pages concatenate to the safe text of the whole output, and
//! no page holds a U+FFFD the output did not.

use procjournal::EventId;
use procjournal::lifecycle::{Handle, State};
use procjournal::spool::format::Stream;
use procjournal::spool::render;
use procjournal::spool::{Spool, SpoolOptions};
use procjournal::supervisor::{OutputPage, Rendering, read_page};
use proptest::prelude::*;

fn handle() -> Handle {
    Handle(EventId::from_bytes([9; 16]))
}

/// Reads every page from cursor 0 until a page makes no progress (the end, or a live end).
fn pages(spool: &Spool, state: State, max_bytes: usize) -> Vec<OutputPage> {
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        let page = read_page(
            &handle(),
            state,
            cursor,
            max_bytes,
            Rendering::SafeText,
            |n| spool.read(cursor, n),
        )
        .expect("a read within the output");
        if page.next_cursor == cursor {
            return out;
        }
        assert!(page.next_cursor > cursor);
        cursor = page.next_cursor;
        out.push(page);
    }
}

/// The text written into a fresh spool in chunks of the given sizes (cycled), stdout and stderr
/// alternating, so that chunk and span boundaries fall anywhere, inside characters too.
fn spool_of(dir: &std::path::Path, bytes: &[u8], chunks: &[usize]) -> Spool {
    let (mut spool, _) =
        Spool::open_writer(dir, [9; 16], SpoolOptions::default()).expect("spool writer");
    let mut at = 0;
    for (k, &size) in chunks.iter().cycle().enumerate() {
        if at >= bytes.len() {
            break;
        }
        let end = (at + size.max(1)).min(bytes.len());
        let stream = if k % 2 == 0 {
            Stream::Stdout
        } else {
            Stream::Stderr
        };
        spool.append(stream, &bytes[at..end]).expect("append");
        at = end;
    }
    spool.flush().expect("flush");
    spool
}

/// Text with what splits badly: multi-byte characters of every length, `\r\n`, lone `\r`,
/// escape sequences (some unfinished), C1 controls and the replacement character itself.
fn tricky_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        any::<String>(),
        proptest::sample::select(vec![
            "é",
            "世界",
            "𝄞",
            "héllo世界",
            "\r\n",
            "\r",
            "\n",
            "\x1b[1;31m",
            "\x1b]0;title\x07",
            "\x1b]8;;http://example.com/\x1b\\",
            "\x1b",
            "\u{9b}",
            "\u{fffd}",
            "ascii ",
        ])
        .prop_map(str::to_owned),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn pages_concatenate_to_the_whole_and_never_split_a_character(
        text in tricky_text(),
        max_bytes in 1usize..24,
        chunks in proptest::collection::vec(1usize..9, 1..6),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = spool_of(dir.path(), text.as_bytes(), &chunks);
        let replacements = |s: &str| s.matches('\u{fffd}').count();
        for (state, complete) in [(State::Exited, true), (State::Running, false)] {
            let whole = render::safe_text(text.as_bytes(), complete).text;
            let pages = pages(&spool, state, max_bytes);
            let joined: String = pages.iter().map(|p| p.data.as_str()).collect();
            prop_assert_eq!(&joined, &whole, "max_bytes {} ({:?})", max_bytes, state);
            // No new U+FFFD: paging never splits a character. Fewer is right when one sat inside
            // an escape sequence, which safe text drops whole, paged or not (the kept seed:
            // "\u{1b}]\u{fffd}", an unfinished OSC holding one).
            prop_assert!(replacements(&joined) <= replacements(&text));
            for page in &pages {
                // A page is over its max_bytes only by the rest of its one first unit.
                let len = usize::try_from(page.next_cursor - page.cursor).unwrap_or(usize::MAX);
                if len > max_bytes {
                    let start = usize::try_from(page.cursor).unwrap_or(usize::MAX);
                    let first = render::safe_text_page(&text.as_bytes()[start..], 1, complete);
                    prop_assert_eq!(first.consumed, len, "an oversized page holds one unit");
                }
            }
        }
    }
}

/// The issue's example: `héllo世界` read 4 bytes at a time, cursor by cursor.
#[test]
fn hello_world_in_four_byte_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = "héllo世界";
    let spool = spool_of(dir.path(), text.as_bytes(), &[100]);
    let pages = pages(&spool, State::Exited, 4);
    let datas: Vec<&str> = pages.iter().map(|p| p.data.as_str()).collect();
    // h é l (4 bytes), l o (2: 世 would end past 4), 世 (3), 界 (3).
    assert_eq!(datas, ["hél", "lo", "世", "界"]);
    let cursors: Vec<(u64, u64)> = pages.iter().map(|p| (p.cursor, p.next_cursor)).collect();
    assert_eq!(cursors, [(0, 4), (4, 6), (6, 9), (9, 12)]);
    // One byte at a time: every character whole, the next cursor after it.
    let ones: Vec<String> = pages_of_one(&spool);
    assert_eq!(ones, ["h", "é", "l", "l", "o", "世", "界"]);
}

fn pages_of_one(spool: &Spool) -> Vec<String> {
    pages(spool, State::Exited, 1)
        .into_iter()
        .map(|p| p.data)
        .collect()
}

/// A long escape sequence (a hyperlink with a 2 KiB URL) first on a 1-byte page: the page steps
/// over the whole sequence, the next one starts with the link's text.
#[test]
fn a_long_escape_sequence_is_stepped_over_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = "x".repeat(2048);
    let text = format!("\x1b]8;;http://{url}\x1b\\link");
    let spool = spool_of(dir.path(), text.as_bytes(), &[1000]);
    let pages = pages(&spool, State::Exited, 1);
    assert_eq!(pages[0].data, "");
    assert_eq!(pages[0].next_cursor, (text.len() - 4) as u64);
    let rest: String = pages[1..].iter().map(|p| p.data.as_str()).collect();
    assert_eq!(rest, "link");
}
