//! Rendering output for clients: safe text, or base64 of exactly the raw bytes.
//!
//! Part of the spool because it renders spool bytes and names nothing above the spool (a
//! handle only by its display form): the supervisor renders its pages with it, and the
//! surfaces reach it as `crate::spool::render`, the path it had before it moved here.
//!
//! Safe text is what an agent or a terminal can show without being steered by the output:
//! - invalid UTF-8 becomes U+FFFD;
//! - terminal control sequences are removed: CSI (`ESC [` … final byte), OSC (`ESC ]` … BEL or
//!   ST), DCS/SOS/PM/APC (`ESC P|X|^|_` … ST), other `ESC` sequences, the 8-bit C1 controls, and
//!   C0 controls other than newline and tab (DEL too);
//! - `\r\n` becomes `\n` and a lone `\r` becomes `\n` (progress bars become lines, nothing is
//!   overwritten);
//! - `normalized` says whether anything was changed; `binary` flags binary-looking data (a NUL
//!   byte, or more than 10 % of bytes that are controls or invalid UTF-8).
//!
//! Units. Safe text is rendered in *units*: one well-formed UTF-8 character, a `\r\n` pair, one
//! escape sequence (at most [`ESCAPE_BYTES_MAX`] bytes: a longer one is cut there), or any other
//! single byte. Whether a unit is complete is decided by at most [`ESCAPE_BYTES_MAX`] bytes from
//! its start, so any rendering that starts on a unit boundary cuts the rest into the same units
//! as a rendering of the whole output does.
//!
//! Reads are *cut on unit boundaries*, never inside one:
//! - when the rendered bytes end inside a unit and more output may still come
//!   (`at_end == false`), those bytes are left out and `consumed` stops before them; the caller's
//!   next cursor is `start + consumed`, so the next read begins with the whole unit and a split
//!   character never turns into U+FFFD;
//! - a page ([`safe_text_page`]) takes only units that end within its `limit` (the client's
//!   `max_bytes`), except that its first unit is always taken whole, however long: a page
//!   smaller than one character returns that one character, and its next cursor is after it.
//!   So every page makes progress, and concatenating the pages read cursor by cursor gives
//!   exactly the safe text of the whole output (`tests/it/render_pages.rs`). A page's bytes may
//!   therefore exceed `max_bytes` by the rest of its first unit (three bytes for a character).
//!   [`safe_text_of_read`] says when a read was too short to hold that first unit
//!   ([`RenderedRead::stalled`]); the caller reads again with the next of [`page_read_sizes`].
//!
//! Invariants (fuzzed): the text is valid UTF-8 without control characters other than `\n` and
//! `\t`; `normalized == false` implies the text equals the consumed bytes. No rendering ever
//! contains a spool or journal path: the artifact descriptor names only the handle and the cursor
//! range.

use std::ops::ControlFlow;

use serde::Serialize;

/// The longest escape sequence removed whole (`limits::SAFE_TEXT_ESCAPE_BYTES_MAX`).
pub const ESCAPE_BYTES_MAX: usize = crate::limits::SAFE_TEXT_ESCAPE_BYTES_MAX;

/// The second read of a page whose first read was too short for its first unit: enough for a
/// character, a `\r\n` and every common escape sequence (colours, cursor movement), so only
/// long sequences (titles, hyperlinks) need the third, [`ESCAPE_BYTES_MAX`].
pub const SHORT_UNIT_BYTES: usize = 64;

/// Safe text of a byte range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SafeText {
    pub text: String,
    pub normalized: bool,
    pub binary: bool,
    /// How many input bytes the text covers (the rest were held back for the next read).
    pub consumed: usize,
}

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

/// Where an escape sequence starting at `bytes[0] == ESC` ends: `Some(len)`, or `None` when the
/// bytes end before the sequence does.
fn escape_len(bytes: &[u8]) -> Option<usize> {
    let kind = *bytes.get(1)?;
    match kind {
        b'[' => {
            // CSI: parameters and intermediates 0x20-0x3F, final byte 0x40-0x7E.
            let mut i = 2;
            loop {
                let b = *bytes.get(i)?;
                if (0x40..=0x7e).contains(&b) {
                    return Some(i + 1);
                }
                if !(0x20..=0x3f).contains(&b) {
                    // Malformed: end the sequence before the unexpected byte.
                    return Some(i);
                }
                i += 1;
            }
        }
        b']' | b'P' | b'X' | b'^' | b'_' => {
            // String sequences: end at ST (ESC \) or, for OSC, also BEL.
            let mut i = 2;
            loop {
                let b = *bytes.get(i)?;
                if b == BEL && kind == b']' {
                    return Some(i + 1);
                }
                if b == ESC {
                    let next = *bytes.get(i + 1)?;
                    return Some(if next == b'\\' { i + 2 } else { i });
                }
                i += 1;
            }
        }
        _ => {
            // nF / Fp / Fe / Fs: intermediates 0x20-0x2F, then one final byte.
            let mut i = 1;
            loop {
                let b = *bytes.get(i)?;
                if (0x20..=0x2f).contains(&b) {
                    i += 1;
                    continue;
                }
                return Some(if (0x30..=0x7e).contains(&b) { i + 1 } else { i });
            }
        }
    }
}

/// [`escape_len`] with the [`ESCAPE_BYTES_MAX`] cut: a sequence still open after that many bytes
/// ends there. Decided by the first [`ESCAPE_BYTES_MAX`] bytes alone, so a prefix of the output
/// that answers `Some` answers what the whole output would.
fn escape_unit_len(bytes: &[u8]) -> Option<usize> {
    let window = &bytes[..bytes.len().min(ESCAPE_BYTES_MAX)];
    escape_len(window).or((window.len() == ESCAPE_BYTES_MAX).then_some(ESCAPE_BYTES_MAX))
}

/// The length of the UTF-8 sequence a lead byte announces (0 for a byte that cannot lead).
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => 0,
    }
}

/// Bytes that pass through unchanged: printable ASCII, newline and tab.
fn plain(b: u8) -> bool {
    (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t'
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether the word holds a byte below 0x20 or above 0x7e (exact as a yes or no; which byte is
/// left to the caller). Classic SWAR tests: `w - 0x20..` borrows into a byte's high bit only for
/// bytes below 0x20 that had it clear; `w + 0x01..` sets it for 0x7f, `| w` for bytes >= 0x80.
fn has_special(w: u64) -> bool {
    ((w.wrapping_sub(ONES * 0x20) & !w) | w.wrapping_add(ONES) | w) & HIGHS != 0
}

/// The length of the run of [`plain`] bytes at the start of `bytes`, eight at a time where no
/// byte of a word can need attention (most output is long runs of printable ASCII).
fn plain_run(bytes: &[u8]) -> usize {
    if !bytes.first().is_some_and(|&b| plain(b)) {
        // Between special bytes (in non-ASCII text, at every character): no word test.
        return 0;
    }
    let mut i = 0;
    loop {
        while let Some(chunk) = bytes.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            if has_special(u64::from_le_bytes(word)) {
                break;
            }
            i += 8;
        }
        // The word that stopped the loop (a newline, often), or the tail, byte by byte.
        let end = (i + 8).min(bytes.len());
        while i < end {
            if !plain(bytes[i]) {
                return i;
            }
            i += 1;
        }
        if i == bytes.len() {
            return i;
        }
    }
}

/// The length of the well-formed UTF-8 character at the start of `bytes` (RFC 3629: no overlong
/// forms, no surrogates, nothing above U+10FFFF), or `None` when there is none, checked by hand:
/// this runs once per character of non-ASCII text.
fn utf8_char(bytes: &[u8]) -> Option<usize> {
    let cont = |i: usize| bytes.get(i).is_some_and(|&c| (0x80..=0xbf).contains(&c));
    let second = |lo: u8, hi: u8| bytes.get(1).is_some_and(|&c| (lo..=hi).contains(&c));
    match *bytes.first()? {
        0xc2..=0xdf => cont(1).then_some(2),
        0xe0 => (second(0xa0, 0xbf) && cont(2)).then_some(3),
        0xed => (second(0x80, 0x9f) && cont(2)).then_some(3),
        0xe1..=0xef => (cont(1) && cont(2)).then_some(3),
        0xf0 => (second(0x90, 0xbf) && cont(2) && cont(3)).then_some(4),
        0xf1..=0xf3 => (cont(1) && cont(2) && cont(3)).then_some(4),
        0xf4 => (second(0x80, 0x8f) && cont(2) && cont(3)).then_some(4),
        _ => None,
    }
}

/// Renders `bytes` as safe text. `at_end` says that no byte will ever follow these (the process
/// is terminal and the read reached the end), so nothing is held back.
pub fn safe_text(bytes: &[u8], at_end: bool) -> SafeText {
    safe_text_page(bytes, bytes.len(), at_end)
}

/// Renders the units of `bytes` that end within `limit` bytes, and the first unit whole even if
/// it ends beyond (see the module documentation); the bytes past `limit` serve only to tell
/// where a unit ends. `consumed` is where the next page starts.
pub fn safe_text_page(bytes: &[u8], limit: usize, at_end: bool) -> SafeText {
    let mut page = TextPage::new(bytes, limit, at_end);
    while page.at < page.limit {
        page.copy_plain_run();
        if page.at >= page.limit || page.special_unit().is_break() {
            break;
        }
    }
    page.into_safe_text()
}

/// A page of safe text being rendered: the text so far, where the next unit starts, and what
/// rendering changed. Each unit method renders one whole unit and moves past it, or breaks
/// without a change when the page ends before it.
struct TextPage<'a> {
    bytes: &'a [u8],
    limit: usize,
    at_end: bool,
    /// Built as bytes, each piece valid UTF-8 by construction (plain ASCII, a whole character
    /// that decoded, or U+FFFD), and checked once at the end.
    out: Vec<u8>,
    at: usize,
    normalized: bool,
    suspicious: usize,
    nul: bool,
}

impl<'a> TextPage<'a> {
    fn new(bytes: &'a [u8], limit: usize, at_end: bool) -> Self {
        TextPage {
            bytes,
            limit: limit.min(bytes.len()),
            at_end,
            out: Vec::with_capacity(bytes.len().min(limit)),
            at: 0,
            normalized: false,
            suspicious: 0,
            nul: false,
        }
    }

    /// A unit that starts at `at` and is `len` bytes long fits the page unless another unit
    /// came first and it ends beyond the limit.
    fn fits(&self, len: usize) -> bool {
        self.at == 0 || self.at + len <= self.limit
    }

    fn copy_plain_run(&mut self) {
        let run = plain_run(&self.bytes[self.at..self.limit]);
        self.out
            .extend_from_slice(&self.bytes[self.at..self.at + run]);
        self.at += run;
    }

    /// The unit at `at`, which starts with a byte that is not plain.
    fn special_unit(&mut self) -> ControlFlow<()> {
        let b = self.bytes[self.at];
        match b {
            b'\n' | b'\t' => {
                self.out.push(b);
                self.at += 1;
            }
            b'\r' => return self.carriage_return(),
            ESC => return self.escape(),
            0x00..=0x1f | 0x7f => {
                self.normalized = true;
                self.nul |= b == 0;
                self.suspicious += 1;
                self.at += 1;
            }
            _ => return self.non_ascii(b),
        }
        ControlFlow::Continue(())
    }

    fn carriage_return(&mut self) -> ControlFlow<()> {
        let len = match self.bytes.get(self.at + 1) {
            Some(b'\n') => 2,
            None if !self.at_end => return ControlFlow::Break(()),
            _ => 1,
        };
        if !self.fits(len) {
            return ControlFlow::Break(());
        }
        self.normalized = true;
        self.out.push(b'\n');
        self.at += len;
        ControlFlow::Continue(())
    }

    fn escape(&mut self) -> ControlFlow<()> {
        let len = match escape_unit_len(&self.bytes[self.at..]) {
            Some(len) => len,
            None if !self.at_end => return ControlFlow::Break(()),
            None => self.bytes.len() - self.at,
        };
        if !self.fits(len) {
            return ControlFlow::Break(());
        }
        self.normalized = true;
        self.at += len;
        ControlFlow::Continue(())
    }

    fn non_ascii(&mut self, b: u8) -> ControlFlow<()> {
        let (bytes, i) = (self.bytes, self.at);
        let len = utf8_len(b);
        if len > 0 && i + len > bytes.len() && !self.at_end {
            // Possibly a character split by the read: wait for it if its prefix is valid.
            let prefix_ok = bytes[i + 1..].iter().all(|&c| (0x80..=0xbf).contains(&c));
            if prefix_ok {
                return ControlFlow::Break(());
            }
        }
        match utf8_char(&bytes[i..]) {
            Some(len) if !self.fits(len) => return ControlFlow::Break(()),
            // U+0080-U+009F, the C1 controls: C2 80 to C2 9F.
            Some(2) if b == 0xc2 && bytes[i + 1] < 0xa0 => {
                self.normalized = true;
                self.suspicious += 1;
                self.at += 2;
            }
            Some(len) => {
                self.out.extend_from_slice(&bytes[i..i + len]);
                self.at += len;
            }
            None => {
                self.normalized = true;
                self.suspicious += 1;
                self.out.extend_from_slice("\u{fffd}".as_bytes());
                self.at += 1;
            }
        }
        ControlFlow::Continue(())
    }

    fn into_safe_text(self) -> SafeText {
        let consumed = self.at;
        let binary = self.nul || (consumed > 0 && self.suspicious * 10 > consumed);
        let mut normalized = self.normalized;
        // Never fails (see above); were it to, the text would still be valid, and marked changed.
        let text = String::from_utf8(self.out).unwrap_or_else(|e| {
            normalized = true;
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        });
        SafeText {
            text,
            normalized,
            binary,
            consumed,
        }
    }
}

/// Safe text of a spool read, with the cursor the next read should start from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RenderedRead {
    #[serde(flatten)]
    pub safe: SafeText,
    /// The read's start plus the bytes the text covers.
    pub next_cursor: u64,
    pub artifact: ArtifactDescriptor,
    /// The read ended inside its first unit while more output follows it: the page would make
    /// no progress, so the caller reads again with the next of [`page_read_sizes`].
    #[serde(skip)]
    pub stalled: bool,
}

/// The read sizes a page of at most `max_bytes` tries in turn, until its first unit is whole
/// ([`RenderedRead::stalled`] is false): the page, then [`SHORT_UNIT_BYTES`], then
/// [`ESCAPE_BYTES_MAX`], the longest unit (a read that long always holds a whole first unit, or
/// stops at a hole or at the end of the output).
pub fn page_read_sizes(max_bytes: usize) -> [usize; 3] {
    [
        max_bytes,
        max_bytes.max(SHORT_UNIT_BYTES),
        max_bytes.max(ESCAPE_BYTES_MAX),
    ]
}

/// Renders a page of at most `max_bytes` (but for its first unit) from a spool read of
/// `requested` bytes (one of [`page_read_sizes`]). `process_terminal` says the output is
/// complete, so a read that reached `total_bytes` holds nothing back. A read that stopped short
/// of `requested` before the end stopped at a hole (lost or damaged output): no byte continues
/// its last unit, so that unit is rendered as it is (a split character becomes U+FFFD there, as
/// it must: its other bytes were lost).
pub fn safe_text_of_read(
    handle: &impl std::fmt::Display,
    read: &super::SpoolRead,
    requested: usize,
    max_bytes: usize,
    process_terminal: bool,
) -> RenderedRead {
    let start = read.next_cursor - read.bytes.len() as u64;
    let reached_end = read.next_cursor == read.total_bytes;
    let stopped_at_hole = !reached_end && read.bytes.len() < requested;
    let at_end = (reached_end && process_terminal) || stopped_at_hole;
    let safe = safe_text_page(&read.bytes, max_bytes, at_end);
    let next_cursor = start + safe.consumed as u64;
    RenderedRead {
        artifact: ArtifactDescriptor::new(handle, start, next_cursor),
        stalled: safe.consumed == 0 && !read.bytes.is_empty() && !reached_end && !at_end,
        safe,
        next_cursor,
    }
}

/// One client-supplied string (a label, a command word, an error message) made safe for a
/// human's terminal, on one line: every control character (C0 with newline and tab, DEL, C1,
/// and so every escape sequence's introducer) and every bidirectional control (U+202E and the
/// rest of `is_bidi_control`) becomes a visible escape (`\n`, `\t`, `\u{1b}`, `\u{202e}`),
/// and a backslash is doubled so that the escapes are unambiguous. With `keep_newlines`, `\n`
/// stays a line break (for multi-line messages); everything else is escaped all the same.
pub fn escape_field(text: &str, keep_newlines: bool) -> std::borrow::Cow<'_, str> {
    let needs = |c: char| {
        c == '\\' || is_bidi_control(c) || (c.is_control() && !(keep_newlines && c == '\n'))
    };
    if !text.chars().any(needs) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Unicode's Bidi_Control characters (UAX #9): invisible, and a terminal that lays out
/// bidirectional text reorders what follows them, so a label holding U+202E can show a
/// different string than it is (the "Trojan Source" trick). Not `char::is_control` (they are
/// format characters, Cf).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Standard base64 (RFC 4648, with padding) of exactly `bytes` (the `base64` crate's
/// `STANDARD` engine, whose strict decoder `protocol::base64::decode` is).
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An opaque name for a range of a process's output: the handle and the cursor range, never a
/// path. Hosts pass it back to fetch the raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ArtifactDescriptor(pub String);

impl ArtifactDescriptor {
    /// `handle` is the process's handle (`lifecycle::Handle`, by its display form: the spool
    /// is below the lifecycle and knows no handle type).
    pub fn new(handle: &impl std::fmt::Display, start: u64, end: u64) -> Self {
        ArtifactDescriptor(format!("pjout:{handle}:{start}-{end}"))
    }
}

#[cfg(test)]
mod tests;
