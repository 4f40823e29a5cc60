//! Pages of output: how output is returned ([`Rendering`], [`OutputPage`]) and the one
//! rendering of a spool read that every surface shares ([`render_page`], [`read_page`]).

use serde::Serialize;

use crate::lifecycle::{Handle, State};
use crate::spool::Span;
use crate::spool::render::{self, ArtifactDescriptor};

/// How output is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Rendering {
    SafeText,
    Base64,
}

/// One page of output with every cursor field a client needs to resume exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OutputPage {
    pub handle: Handle,
    pub cursor: u64,
    pub next_cursor: u64,
    pub retained_from: u64,
    pub total_bytes: u64,
    pub gap: bool,
    /// Cursors the read stepped over before its bytes (a gap or damage) and why.
    pub skipped: Option<crate::spool::Skipped>,
    pub cursor_ahead: bool,
    pub rendering: Rendering,
    /// Safe text, or base64 of exactly the raw bytes.
    pub data: String,
    pub normalized: bool,
    pub binary: bool,
    pub spans: Vec<Span>,
    pub artifact: ArtifactDescriptor,
    pub state: State,
}

/// Renders one spool read of `requested` bytes as a page of at most `max_bytes`: the one
/// rendering shared by live processes, restored ones and offline readers, so every surface shows
/// the same bytes with the same cursor fields. The flag is true when the read was too short to
/// hold the page's first unit of safe text (a character, a `\r\n`, an escape sequence): the
/// caller then reads again with the next of [`render::page_read_sizes`] (see
/// [`read_page`] for the loop of a synchronous reader).
pub fn render_page(
    handle: &Handle,
    state: State,
    cursor: u64,
    read: &crate::spool::SpoolRead,
    requested: usize,
    max_bytes: usize,
    rendering: Rendering,
) -> (OutputPage, bool) {
    let start = read.next_cursor - read.bytes.len() as u64;
    let (data, normalized, binary, next_cursor, stalled) = match rendering {
        Rendering::SafeText => {
            let r =
                render::safe_text_of_read(handle, read, requested, max_bytes, state.is_terminal());
            (
                r.safe.text,
                r.safe.normalized,
                r.safe.binary,
                r.next_cursor,
                r.stalled,
            )
        }
        Rendering::Base64 => {
            let binary = render::safe_text(&read.bytes, true).binary;
            (
                render::base64(&read.bytes),
                false,
                binary,
                read.next_cursor,
                false,
            )
        }
    };
    let spans = read
        .spans
        .iter()
        .filter(|s| s.cursor < next_cursor)
        .map(|s| Span {
            len: s.len.min((next_cursor - s.cursor) as u32),
            ..*s
        })
        .collect();
    let page = OutputPage {
        handle: *handle,
        cursor,
        next_cursor,
        retained_from: read.retained_from,
        total_bytes: read.total_bytes,
        gap: read.gap,
        skipped: read.skipped.clone(),
        cursor_ahead: false,
        rendering,
        data,
        normalized,
        binary,
        spans,
        artifact: ArtifactDescriptor::new(handle, start, next_cursor),
        state,
    };
    (page, stalled)
}

/// Reads and renders one page with a synchronous reader (`read(size)` reads up to `size` bytes
/// from `cursor`), reading again while the page's first unit of safe text did not fit (see
/// [`render_page`]); for offline readers of a spool.
pub fn read_page<E>(
    handle: &Handle,
    state: State,
    cursor: u64,
    max_bytes: usize,
    rendering: Rendering,
    mut read: impl FnMut(usize) -> Result<crate::spool::SpoolRead, E>,
) -> Result<OutputPage, E> {
    let [first, rest @ ..] = match rendering {
        Rendering::SafeText => render::page_read_sizes(max_bytes),
        Rendering::Base64 => [max_bytes; 3],
    };
    let (mut page, mut stalled) = render_page(
        handle,
        state,
        cursor,
        &read(first)?,
        first,
        max_bytes,
        rendering,
    );
    for size in rest {
        if !stalled {
            break;
        }
        (page, stalled) = render_page(
            handle,
            state,
            cursor,
            &read(size)?,
            size,
            max_bytes,
            rendering,
        );
    }
    Ok(page)
}
