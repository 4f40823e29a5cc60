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

// ---------------------------------------------------------------------------------------------
// The supervisor's bounds (issue 12: every resource it holds has an owner and a bound). Hitting
// one gives the caller a typed error that names it; nothing already acknowledged is dropped.

/// Processes live at once by default. Each holds about [`DESCRIPTORS_PER_PROCESS`] descriptors
/// and a drain task; 256 keeps the daemon far below the default `ulimit -n` of 1024 with room
/// for connections. The effective bound is also capped by the descriptor budget (below).
pub const LIVE_PROCESSES_DEFAULT: usize = 256;

/// Descriptors one live process costs the supervisor: stdin, stdout and stderr pipe ends, the
/// pidfd, the spool's active segment and directory, and one more for a segment rotation or a
/// sync in flight. Measured with /proc/self/fd on a process that writes while it is polled.
pub const DESCRIPTORS_PER_PROCESS: usize = 7;

/// Descriptors kept back from the live-process budget for everything else the supervisor opens:
/// the journal (segment, spare, directory, lock), the runtime (epoll, eventfds, signal pipe),
/// standard streams, cached finished-spool readers and a few connections. With `ulimit -n 64`
/// this leaves room for 4 live processes: refused starts, never EMFILE in the middle of one.
pub const DESCRIPTORS_RESERVED: usize = 32;

/// Messages queued to the supervisor's actor before senders wait: deep enough that a burst of
/// starts and polls from every connection does not stall, shallow enough to bound memory to a
/// few hundred KiB of queued commands.
pub const ACTOR_INBOX_DEPTH: usize = 1024;

/// Writes queued to one process's stdin: a client that sends faster than the child reads waits
/// (backpressure) once this many are pending, instead of the supervisor buffering without end.
pub const INPUT_QUEUE_DEPTH: usize = 16;

/// How long one write to a child's stdin may wait for the child to read before the caller gets
/// a typed timeout (the bytes already written stay written; the error says how many).
pub const INPUT_WRITE_MS: u64 = 30_000;

/// Waiters (`wait`, `stop`) on one process at once. Each is a watch receiver; the bound keeps a
/// client that opens waits in a loop from growing the process's waiter list without end.
pub const WAITERS_PER_PROCESS_MAX: usize = 1024;

/// Finished processes whose spool reader stays open for polls (each holds descriptors for its
/// segments while cached). Readers beyond it are reopened on demand from the spool directory.
pub const FINISHED_READERS_CACHED_DEFAULT: usize = 8;

/// Terminal summaries remembered for finished processes (about 200 bytes each): the journal has
/// the same answer, except when the terminal event could not be persisted, which only this
/// cache remembers for a while.
pub const FINISHED_SUMMARIES_CACHED: usize = 4096;

/// Trees whose leader exited while members lived on, kept owned so that stop and shutdown still
/// reach them. Beyond this many the oldest are no longer watched (and a warning says so).
pub const LINGERING_TREES_MAX: usize = 1024;

/// How long a call into the host (publisher, notifier, lease release) is awaited before it is
/// reported as stuck. Its blocking thread is left to finish; the publication is retried by the
/// next restore.
pub const SERVICE_CALL_MS: u64 = 30_000;

const _: () = assert!(DESCRIPTORS_PER_PROCESS >= 4);
const _: () = assert!(INPUT_QUEUE_DEPTH >= 1 && ACTOR_INBOX_DEPTH >= 16);
