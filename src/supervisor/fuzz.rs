//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through): the safe-text
//! rendering and its paging, which every surface's reader runs through `read_page`.

// ---------------------------------------------------------------------------------------------
// safe_text

/// Safe-text rendering over arbitrary bytes: the text is UTF-8 with no control character but
/// newline and tab; `normalized == false` means the text is exactly the consumed bytes; at the end
/// of the output everything is consumed; otherwise only an unfinished unit (a character, `\r`, an
/// escape sequence shorter than `ESCAPE_BYTES_MAX`) is held back. Paged with the first byte's
/// limit, the pages concatenate to the whole rendering.
pub fn safe_text(data: &[u8]) {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let at_end = flags & 1 == 1;
    let r = crate::spool::render::safe_text(bytes, at_end);
    assert!(r.consumed <= bytes.len());
    if at_end {
        assert_eq!(r.consumed, bytes.len());
    } else {
        assert!(bytes.len() - r.consumed < crate::spool::render::ESCAPE_BYTES_MAX);
    }
    for c in r.text.chars() {
        assert!(
            c == '\n' || c == '\t' || !(c.is_control()),
            "control character {c:?} in safe text"
        );
    }
    if !r.normalized {
        assert_eq!(r.text.as_bytes(), &bytes[..r.consumed]);
    }
    assert_eq!(
        crate::spool::render::base64(bytes).len(),
        bytes.len().div_ceil(3) * 4
    );
    let max_bytes = usize::from(flags >> 1) + 1;
    let pages = safe_text_pages(bytes, max_bytes, at_end);
    assert_eq!(pages.concat(), r.text, "pages of {max_bytes} bytes");
}

/// The pages of safe text a client reads cursor by cursor, `max_bytes` at a time, from output
/// that is `bytes` (complete when `complete`), through [`crate::supervisor::read_page`], the loop
/// every surface's offline reader runs. Stops at the first page that makes no progress (the
/// live end). Also checks that no page ends inside the unit it started.
pub fn safe_text_pages(bytes: &[u8], max_bytes: usize, complete: bool) -> Vec<String> {
    use crate::lifecycle::State;
    use crate::supervisor::{Rendering, read_page};
    let handle = crate::lifecycle::Handle(crate::journal::EventId::from_bytes([7; 16]));
    let state = if complete {
        State::Exited
    } else {
        State::Running
    };
    let mut pages = Vec::new();
    let mut cursor = 0u64;
    loop {
        let read = |n: usize| -> Result<crate::spool::SpoolRead, std::convert::Infallible> {
            let from = usize::try_from(cursor)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let to = from.saturating_add(n).min(bytes.len());
            Ok(crate::spool::SpoolRead {
                bytes: bytes[from..to].to_vec(),
                next_cursor: to as u64,
                total_bytes: bytes.len() as u64,
                ..crate::spool::SpoolRead::default()
            })
        };
        let Ok(page) = read_page(&handle, state, cursor, max_bytes, Rendering::SafeText, read);
        if page.next_cursor == cursor {
            break;
        }
        assert!(page.next_cursor > cursor, "a page went backwards");
        pages.push(page.data);
        cursor = page.next_cursor;
    }
    pages
}
