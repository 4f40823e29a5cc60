//! Every bound of the crate in one place, with the relations between them checked at compile time.
//!
//! Names end in their unit (`_bytes`, `_ms`, `_count`) so that a comparison of two limits with
//! different units reads wrong at a glance.

/// Bytes of a segment's fixed header (see journal-format.md, "Segment header").
pub const SEGMENT_HEADER_BYTES: usize = 64;

/// Bytes of a record's fixed header (see journal-format.md, "Record header").
pub const RECORD_HEADER_BYTES: usize = 48;

/// Records start on this alignment; the gap after a payload is zero.
pub const RECORD_ALIGN_BYTES: usize = 8;

/// The largest payload of one record, whatever the segment size. Lifecycle events are small; this
/// bounds the memory a reader allocates for a record whose length field it cannot yet trust.
pub const RECORD_PAYLOAD_BYTES_MAX: usize = 1024 * 1024;

/// Segment sizes are whole pages so that preallocation and the mapping cover the same pages.
pub const PAGE_BYTES: usize = 4096;

/// The smallest segment: one page, enough for the header and a few small records. Tests use it to
/// cross many segment boundaries; production journals use the default.
pub const SEGMENT_BYTES_MIN: usize = PAGE_BYTES;

/// The largest segment. Segment offsets are stored as u32.
pub const SEGMENT_BYTES_MAX: usize = 1024 * 1024 * 1024;

/// Default segment size: large enough that rotation (write zeroes, fdatasync, rename, fsync of the
/// directory) is rare, small enough that preallocating one does not stall appenders for long.
pub const SEGMENT_BYTES_DEFAULT: usize = 16 * 1024 * 1024;

/// A journal holds at most this many segments (about 16 TiB at the maximum segment size); the
/// bound keeps directory scans and the segment table finite.
pub const SEGMENT_COUNT_MAX: usize = 1 << 14;

/// A follower re-reads the tail at most this often when nothing new arrived.
pub const FOLLOW_POLL_MS: u64 = 50;

const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(RECORD_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(SEGMENT_BYTES_MIN.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SEGMENT_BYTES_MAX.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SEGMENT_BYTES_DEFAULT.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SEGMENT_BYTES_MIN > SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES);
const _: () = assert!(SEGMENT_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(RECORD_PAYLOAD_BYTES_MAX < SEGMENT_BYTES_MAX);

/// Sequence numbers above this are never written and never accepted from disk, so `seq + 1`
/// cannot overflow anywhere (2^62 events is far beyond any journal's life).
pub const SEQ_MAX: u64 = 1 << 62;

/// Segment indices above this are never written and never accepted from disk (file names or
/// headers), so `index + 1` cannot overflow.
pub const SEGMENT_INDEX_MAX: u64 = 1 << 40;
