//! Every bound of the crate in one place, with the relations between them checked at compile time.
//!
//! Names end in their unit (`_bytes`, `_ms`, `_count`) so that a comparison of two limits with
//! different units reads wrong at a glance.

/// How long an open of a root waits for this same process to release it (a supervisor that was
/// shut down drops its last journal handle right after), before it reports the root as held.
pub const LOCK_HANDOVER_MS: u64 = 5_000;

/// Bytes of a segment's fixed header (see journal-format.md, "Segment header").
pub const SEGMENT_HEADER_BYTES: usize = 64;

/// Bytes of one commit slot of a version 2 segment; two follow the fixed header.
pub const COMMIT_SLOT_BYTES: usize = 48;

/// Where the records of a version 2 segment start: the fixed header, then two commit slots.
pub const SEGMENT_RECORDS_OFFSET: usize = SEGMENT_HEADER_BYTES + 2 * COMMIT_SLOT_BYTES;

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
/// directory) is rare, small enough that preallocating one does not stall appenders for long, and
/// that a writer's open, which reads the active segment to its end to check that what follows
/// its last record is zero, reads little: a brief open (`run`) of a root whose journal had
/// reached 16 MiB segments took 28.8 to 30.0 ms, of the same workload written with 4 MiB ones 25.1
/// to 25.7 (20 000 processes of the lifecycle workload, medians of 9 opens, two rounds). A
/// rotation every 4 MiB is one about every 3 600 processes of `run -- true` (1.16 MB of journal
/// per 1 000 of them, on a root grown by `run`s).
pub const SEGMENT_BYTES_DEFAULT: usize = 4 * 1024 * 1024;

/// The size of a journal's first segment; each next one doubles, up to the configured size
/// (`SEGMENT_BYTES_DEFAULT` by default). A root holding a few records then takes 256 KiB, not 4
/// MiB, and one that holds many pays for a rotation about every doubling. Small first segments
/// also keep what a writer's open reads small while a root is young: the active segment to its
/// end (its zero tail), and the records compaction cannot remove yet because they share a
/// segment with records it must keep. With 1 MiB, 1 200 `run -- true` from an empty root took
/// 7.54 and 8.58 ms on average against 7.30 and 8.30 with 256 KiB (two interleaved sequences,
/// faster in each of their six windows of 200 runs, most at the end: about 0.6 ms a run).
pub const SEGMENT_BYTES_INITIAL: usize = 256 * 1024;

/// A journal holds at most this many segments (about 16 TiB at the maximum segment size); the
/// bound keeps directory scans and the segment table finite.
pub const SEGMENT_COUNT_MAX: usize = 1 << 14;

/// A follower re-reads the tail at most this often when nothing new arrived.
pub const FOLLOW_POLL_MS: u64 = 50;

/// A daemon checks this often that its root, `LOCK` and socket are still the files it bound
/// (`server::watch`): three stats a second cost nothing, and a daemon nobody can reach any
/// more ends within about a second.
pub const ROOT_WATCH_MS: u64 = 1000;

/// The block a scan reads a cleanly closed segment's tail in, to check that it is zero: 16 reads
/// per MiB, and a buffer that stays small whatever the segment size (measured on a cold open of a
/// 1 MiB segment: 0.14 ms with 64 KiB blocks, 0.25 ms with 256 KiB, whose fresh buffer's page
/// faults cost more than the reads they save).
pub const SCAN_BLOCK_BYTES: usize = 64 * 1024;

const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(RECORD_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(SEGMENT_BYTES_MIN.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SEGMENT_BYTES_MAX.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SEGMENT_BYTES_DEFAULT.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SEGMENT_BYTES_MIN > SEGMENT_RECORDS_OFFSET + RECORD_HEADER_BYTES);
const _: () = assert!(SEGMENT_BYTES_INITIAL.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SCAN_BLOCK_BYTES.is_multiple_of(PAGE_BYTES));
const _: () = assert!(SEGMENT_RECORDS_OFFSET.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(SEGMENT_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(RECORD_PAYLOAD_BYTES_MAX < SEGMENT_BYTES_MAX);

/// Sequence numbers above this are never written and never accepted from disk, so `seq + 1`
/// cannot overflow anywhere (2^62 events is far beyond any journal's life).
pub const SEQ_MAX: u64 = 1 << 62;

/// Segment indices above this are never written and never accepted from disk (file names or
/// headers), so `index + 1` cannot overflow.
pub const SEGMENT_INDEX_MAX: u64 = 1 << 40;

// ---------------------------------------------------------------------------------------------
// Snapshots and compaction (journal-format.md, "Snapshots and compaction"). A snapshot is the
// manifests at a seq; segments wholly below the *previous* snapshot's seq may then be removed, so
// that one damaged snapshot never costs a record.

/// A running supervisor writes a snapshot once the journal has grown by this many bytes since the
/// newest one, and by at least that snapshot's own size. The second term keeps the bytes written
/// to snapshots below the bytes written to the journal (a store of 100,000 processes makes a
/// snapshot of tens of MB: writing one per 16 MiB of journal would write more snapshot than
/// journal); the first keeps small stores from snapshotting for every few records. Four default
/// segments: compaction removes whole segments, so snapshotting more often than a segment fills
/// would remove nothing more.
pub const SNAPSHOT_AFTER_BYTES_MIN: u64 = 16 * 1024 * 1024;

/// On a clean shutdown a snapshot is written when the journal grew by this many bytes since the
/// newest snapshot (and by a quarter of that snapshot's size), the records the open replayed
/// included: the next open then replays little. A brief writer (`run`, `capture`) opens and closes
/// the root for every command, so whatever it replays, every later open replays again until some
/// close writes a snapshot. A `run -- true` appends about 1.2 KB (nine records), so a root used
/// only through `run` is snapshotted by about every 55th run while it is small, and by every 200th
/// or so at 1 200 processes (a snapshot of about 1 MB: the quarter rules there). That run pays the
/// snapshot's syncs (about 1.3 ms more on a root of 100 processes); below the minimum a snapshot is
/// not worth them. At 1 MiB, such a root replayed up to 1 MiB of records (about 5 000) at every
/// open: 1 200 `run -- true` from an empty root took 10.39 and 11.55 ms a run on average, against
/// 9.63 and 10.67 ms at 64 KiB (two runs, each of 24 interleaved rounds of 50 runs per minimum,
/// each minimum on its own root; 16 KiB took 9.86 ms, 256 KiB 10.94).
pub const SNAPSHOT_AT_SHUTDOWN_BYTES_MIN: u64 = 64 * 1024;

/// How often the supervisor's actor asks whether a snapshot is due (a cheap comparison under the
/// lifecycle lock). Checkpoints of long-running processes grow the journal without any process
/// finishing, so the check cannot only follow terminal events.
pub const SNAPSHOT_CHECK_MS: u64 = 5_000;

/// Snapshots kept: the newest and the one before it. Compaction removes segments only below the
/// older one, so a newest snapshot found damaged is replaced by the older one and the records
/// after it, with nothing lost.
pub const SNAPSHOTS_KEPT: usize = 2;

/// The largest snapshot file a reader accepts (header included). Bounds what a reader allocates
/// for a file it has not checked yet; 2^29 manifests (the store's bound) would not fit, but far
/// more than a root ever holds do (100,000 processes make a snapshot of about 40 MB).
pub const SNAPSHOT_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

/// The largest frame of a snapshot's payload (one manifest, or one run of retained IDs). A
/// manifest holds at most a registration's command, a stop reason, a terminal reason and a scope,
/// each bounded by one record's payload, plus a few hundred gaps.
pub const SNAPSHOT_FRAME_BYTES_MAX: usize = 8 * RECORD_PAYLOAD_BYTES_MAX;

/// Retained event IDs per frame of a snapshot (42 bytes each: about 170 KB a frame).
pub const SNAPSHOT_IDS_PER_FRAME: usize = 4096;

const _: () = assert!(SNAPSHOT_AT_SHUTDOWN_BYTES_MIN <= SNAPSHOT_AFTER_BYTES_MIN);
const _: () = assert!(SNAPSHOT_AFTER_BYTES_MIN >= SEGMENT_BYTES_DEFAULT as u64);
const _: () = assert!(SNAPSHOTS_KEPT >= 2);
const _: () = assert!(SNAPSHOT_IDS_PER_FRAME * 64 <= SNAPSHOT_FRAME_BYTES_MAX);

// ---------------------------------------------------------------------------------------------
// The supervisor's bounds (every resource it holds has an owner and a bound). Hitting
// one gives the caller a typed error that names it; nothing already acknowledged is dropped.

/// Processes live at once by default. Each holds about [`DESCRIPTORS_PER_PROCESS`] descriptors
/// and a drain task; 256 keeps the daemon far below the default `ulimit -n` of 1024 with room
/// for connections. The effective bound is also capped by the descriptor budget (below).
pub const LIVE_PROCESSES_DEFAULT: usize = 256;

/// Descriptors one live process costs the supervisor: stdin, stdout and stderr pipe ends, the
/// workload's pidfd (a process group's leader) or the guardian's control socket (a guardian is
/// named by its pid, our unreaped child's), the spool's directory and its active segment (the
/// six it holds); one more for a sealed segment opened for a read or for the sync after a
/// rotation: sealed segments hold no descriptor, so the count does not grow with the output
/// retained (`tests/it/daemon_scale.rs` counts them in /proc/PID/fd of a daemon whose processes
/// each retain several segments); and one for the guardian's pidfd while it is reaped, at the
/// end. A sync in flight shares the active segment's descriptor.
pub const DESCRIPTORS_PER_PROCESS: usize = 8;

/// Descriptors kept back from the live-process budget for everything else the supervisor opens:
/// the journal (segment, spare, directory, lock), the runtime (epoll, eventfds, signal pipe),
/// standard streams, cached finished-spool readers and a few connections. With `ulimit -n 64`
/// this leaves room for 3 live processes: waiting starts, never EMFILE in the middle of one.
pub const DESCRIPTORS_RESERVED: usize = 32;

/// The soft `RLIMIT_NOFILE` of this process (`usize::MAX` when it cannot be read).
pub fn open_files_soft() -> usize {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE).map_or(usize::MAX, |(soft, _)| {
        usize::try_from(soft).unwrap_or(usize::MAX)
    })
}

/// How one descriptor budget (`open_files` minus [`DESCRIPTORS_RESERVED`]) is split between
/// connections and live processes, so that neither can starve the other into EMFILE: a quarter
/// for connections (at least 2, at most `connections_max`), the rest for processes at
/// [`DESCRIPTORS_PER_PROCESS`] each (at least 1). Returns (connections, live processes).
pub const fn descriptor_split(open_files: usize, connections_max: usize) -> (usize, usize) {
    let budget = open_files.saturating_sub(DESCRIPTORS_RESERVED);
    let mut connections = budget / 4;
    if connections > connections_max {
        connections = connections_max;
    }
    if connections < 2 {
        connections = 2;
    }
    let mut live = budget.saturating_sub(connections) / DESCRIPTORS_PER_PROCESS;
    if live < 1 {
        live = 1;
    }
    (connections, live)
}

const _: () = assert!(descriptor_split(64, 256).0 == 8 && descriptor_split(64, 256).1 == 3);
const _: () = assert!(descriptor_split(1024, 256).0 == 248);
const _: () = assert!(descriptor_split(0, 256).1 == 1);

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

/// How often a terminal whose input was closed is checked for a change of line mode (a prompt
/// that switched to raw mode after the end-of-file character was typed, and so lost it), and how
/// many times the character is typed again at most (a full-screen program switches modes often;
/// each retype is one byte to a program that reads at the end of its input anyway).
pub const PTY_EOF_POLL_MS: u64 = 25;
pub const PTY_EOF_RETYPES: u32 = 16;

/// Chunks (each at most [`READ_BYTES`]) a process's tap holds for its consumer before the drain
/// stops reading that process's pipes, so that the workload blocks in `write` exactly as it
/// would writing to the slow consumer directly. Measured with `run` piping 1 GiB to `cat`:
/// depths 1, 2, 4 and 8 are equally fast (about 2.3 s here; the spool's writes bound it, not the
/// hand-off), so the depth only buys slack for a consumer whose writes stall now and then.
/// Four chunks (1 MiB, as much as one pipe) absorb such a stall before the workload feels it;
/// each chunk more holds another 256 KiB per tapped process and lets the workload run further
/// ahead of a consumer that is really slow.
pub const TAP_DEPTH: usize = 4;

const _: () = assert!(TAP_DEPTH >= 1);

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

/// How long a login shell may take to print its environment for the PATH-like overlay
/// (`tree::login_shell`), once per supervisor at open. Generous: version managers (nvm, conda,
/// sdkman) in a profile take seconds; a shell that takes longer is killed with its process group
/// and the overlay is recorded as failed, never waited for.
pub const LOGIN_SHELL_CAPTURE_MS: u64 = 10_000;

/// The most bytes a login shell may print for the overlay: an environment is a few KiB, a
/// profile's chatter a little more; anything beyond is not an environment, and is refused
/// rather than buffered.
pub const LOGIN_SHELL_OUTPUT_BYTES_MAX: usize = 1 << 20;

/// How long a guardian may take to answer each step of its launch handshake (its `REG` after
/// the spawn, its `RUN` after `GO`), and to exit after an aborted launch. Generous: the
/// guardian is an exec of this binary and one fork, about a millisecond here, but a loaded
/// machine may page the binary in first.
pub const GUARDIAN_HANDSHAKE_MS: u64 = 10_000;

/// How long the end of a workload waits for its guardian to prove the whole tree gone (the
/// guardian writes its receipt at ECHILD, well under a millisecond after a workload that left
/// nothing behind) before the process is recorded as leaving a lingering tree instead.
pub const TREE_PROOF_WAIT_MS: u64 = 50;

/// A process's `running` is published this long after its spawn, not at once: a command that
/// ends sooner has it published by its terminal publication (first, in order), which finds it
/// already durable by the terminal event's commit, so a short command costs the journal one
/// `fdatasync` fewer. Short enough that a host hears of a long-running process at once for
/// any human or agent purpose.
pub const RUNNING_PUBLICATION_DELAY_MS: u64 = 10;

/// How long a drain waits, after the terminal result is out, for a guardian that reported its
/// tree gone to exit so that it is reaped (it exits at once; this bounds a stalled one, which
/// its tree's drop then tries once more without waiting).
pub const GUARDIAN_REAP_MS: u64 = 2_000;

/// How long a guardian stopped at a test failpoint (`tree::guardian::failpoint`, feature
/// `failpoints`) waits for the test to release it before it goes on by itself: a test that
/// panicked before its release must not leave a guardian and its receipt behind for ever.
/// Far beyond any test's hang guard.
pub const FAILPOINT_HOLD_MAX_MS: u64 = 120_000;

/// How often trees that nothing proved gone (their guardian died without a receipt) are
/// re-assessed from their evidence (receipt, cgroup, boot id). Each assessment reads a file or
/// two per tree; a second keeps held capacity from lingering long after the proof appears.
pub const ASSESS_INTERVAL_MS: u64 = 1_000;

/// How long a finished process's output is kept by default (seven days): long enough for a
/// person back from a weekend to read what ran on Friday.
pub const RETENTION_AGE_DEFAULT_MS: u64 = 7 * 24 * 3_600_000;

/// How often the retention policy runs (and once at every open). A pass reads every manifest in
/// memory and lists the spool directory once; an hour keeps old output at most an hour past its
/// age, at a cost no one notices.
pub const RETENTION_PASS_INTERVAL_MS: u64 = 3_600_000;

/// How long a termination waits, after its SIGKILL, for the exit to be proven (the terminal
/// event persisted and no member left) before it reports failure: SIGKILL cannot be caught, so
/// what is still there after half a second is in uninterruptible sleep or escaped; the tree
/// stays owned either way. With the default grace (1.5 s) a termination's whole budget is the
/// 2 s a termination has.
pub const KILL_PROOF_MS: u64 = 500;

/// The most lines an `output` request's `tail_lines` asks for: a page holds at most
/// `protocol::OUTPUT_BYTES_MAX` bytes whatever the count, so the bound only keeps a count from
/// meaning "everything" by accident; a hundred thousand lines is more than any page fits.
pub const TAIL_LINES_MAX: u64 = 100_000;

/// The grace between SIGTERM and SIGKILL when the caller names none (`stop`, `shutdown`,
/// timeouts): with [`KILL_PROOF_MS`], the 2 s termination budget.
pub const GRACE_MS_DEFAULT: u64 = 1_500;

/// How long a guardian whose supervisor died (or that was itself asked to end) waits between
/// SIGTERM and SIGKILL to its tree: with the quiesce before it, the whole termination stays
/// within the 2 s budget a termination has.
pub const ORPHANED_TREE_GRACE_MS: u64 = 1_500;

/// How long a call into the host (publisher, notifier, lease release) is awaited before it is
/// reported as stuck. Its blocking thread is left to finish; the publication is retried by the
/// next restore.
pub const SERVICE_CALL_MS: u64 = 30_000;

const _: () = assert!(DESCRIPTORS_PER_PROCESS >= 4);
const _: () = assert!(INPUT_QUEUE_DEPTH >= 1 && ACTOR_INBOX_DEPTH >= 16);

// ---------------------------------------------------------------------------------------------
// Soft admission (src/admission/).

/// The share of detected logical cores and of currently available memory that automatic
/// admission may spend: the default of the products this serves, which leaves 30 % of a
/// shared host to Docker, target applications and whatever else runs outside our ownership.
pub const ADMISSION_SHARE_PERCENT_DEFAULT: u8 = 70;

/// The least memory reserved for each workload (a supervised root and all its descendants):
/// 2 GiB. Builds, checks and agent provider subprocesses start small and grow, so a
/// fresh workload's small RSS says nothing about what it will take; only a complete, stable
/// sample of its whole tree may raise its reservation above this.
pub const ADMISSION_FLOOR_BYTES_DEFAULT: u64 = 2 * 1024 * 1024 * 1024;

/// How often the live trees and the host's available memory are sampled while anything holds
/// capacity or waits for it. A walk reads two small /proc files per member (and, for process
/// groups, one scan of /proc shared by all of them), on the blocking pool; once a second keeps
/// reservations current for workloads that grow over seconds to minutes. Two consecutive
/// complete walks with the same membership make a sample stable, so a reservation follows a
/// workload within two intervals.
pub const ADMISSION_SAMPLE_MS: u64 = 1_000;

/// Between the two walks of each held (unverified) tree that a restore takes before the first
/// decision, so that this decision already charges such a tree what is observable of it (two
/// complete walks make a sample stable) rather than a core and the floor. Short: it delays only
/// an open that found such a tree.
pub const HELD_PRESAMPLE_GAP_MS: u64 = 50;

/// Starts waiting for capacity at once (those whose caller asked to queue). Each holds a
/// prepared command (a few hundred bytes to a few KiB) and a reply; the bound keeps a client
/// that queues in a loop from growing the actor's memory without end, while being far above
/// what a host's agents queue at once (the daemon has at most [`CONNECTIONS_MAX`] requests in
/// flight). Past it a queued start is refused at once (`Refusal::QueueFull`).
pub const ADMISSION_QUEUE_MAX: usize = 1024;

/// The longest a start may ask to wait for capacity (`queue_ms`): an hour. A start is one
/// request on a connection or one tool call, whose client waits for its answer; a longer wait
/// is better expressed by the caller retrying.
pub const ADMISSION_QUEUE_WAIT_MS_MAX: u64 = 3_600_000;

/// The largest limit `admission --max-concurrent` may set at runtime. The live-process bound
/// ([`LIVE_PROCESSES_DEFAULT`] or `--max-live`, capped by the descriptor budget) caps every
/// decision anyway; this keeps the number a client sends within what a host could mean.
pub const ADMISSION_LIMIT_MAX: u64 = 65_536;

/// How long `start`, `run`, `capture` and `restart` on the command line, and the MCP tools
/// `start`, `capture` and `restart`, wait for capacity when they are not told otherwise
/// (`--queue`, `queue_ms`; `--no-queue` or `queue_ms: 0` fail at once): ten minutes. A host
/// without capacity for a command usually has it again once a build or a test run ends, which
/// takes minutes; a wait longer than that is more likely a stuck workload, and the caller is
/// then told why (the decision that kept it waiting) instead of hanging on. At most
/// [`ADMISSION_QUEUE_WAIT_MS_MAX`].
pub const ADMISSION_QUEUE_WAIT_MS_DEFAULT: u64 = 600_000;

const _: () = assert!(ADMISSION_QUEUE_WAIT_MS_DEFAULT <= ADMISSION_QUEUE_WAIT_MS_MAX);

const _: () =
    assert!(ADMISSION_SHARE_PERCENT_DEFAULT > 0 && ADMISSION_SHARE_PERCENT_DEFAULT <= 100);
const _: () = assert!(ADMISSION_QUEUE_MAX >= CONNECTIONS_MAX);

// ---------------------------------------------------------------------------------------------
// The daemon's bounds on its clients (src/server). `ServerLimits::default()` is these.

/// Connections holding a slot at once. Each slot costs a task, a 64 KiB read buffer and a file
/// descriptor (16 MiB and 256 descriptors in all, well inside a default soft limit of 1024);
/// the clients are one user's commands and agents, which rarely hold more than a few dozen
/// connections, so 256 leaves room for bursts without letting a runaway client exhaust the
/// daemon's descriptors.
pub const CONNECTIONS_MAX: usize = 256;

/// Milliseconds between the first byte of a request line and its newline. A request is at most
/// 1 MiB and every client writes it in one go over a local socket, which takes milliseconds;
/// 10 s leaves room for a client that is swapped out, stopped in a debugger for a moment or
/// starved of CPU, while a half line sent by a stalled client is dropped soon enough that it
/// does not pile up behind the slots.
pub const REQUEST_LINE_MS: u64 = 10_000;

/// Milliseconds a connection may wait for its next request before it is closed. Clients keep a
/// connection between requests (`logs -f` between polls, `send` between chunks of its stdin,
/// whose gaps are the user's); a minute outlasts the pauses of a working client, and
/// `crate::client::Client` reconnects after an `idle` close, since no request was read. An
/// abandoned connection (a client that forgot to close it) is let go soon after.
pub const CONNECTION_IDLE_MS: u64 = 60_000;

/// Milliseconds a client has to take one response. The largest response is about 1.4 MiB (a
/// 1 MiB page, base64 or escaped text, plus JSON), which a reading client takes in
/// milliseconds; 30 s tolerates a paused reader, and beyond it a client that sends requests but
/// reads no answers would hold a running slot forever.
pub const RESPONSE_WRITE_MS: u64 = 30_000;

/// Milliseconds for the last error line (`busy`, `timeout`, `idle`, `forbidden`) of a connection
/// the server is closing. The line is small and the socket buffer of a client that reads
/// nothing is usually empty, so it goes at once; the connection no longer holds a slot
/// meanwhile, so this bounds how many closing descriptors pile up (at most the accept rate
/// times this).
pub const FAREWELL_MS: u64 = 1_000;

/// Milliseconds to wait after a failed accept before the next. Accept fails persistently when
/// the process is out of descriptors; retrying at once would spin on the CPU, while 50 ms adds
/// little to the wait of a queued client once descriptors are free again.
pub const ACCEPT_BACKOFF_MS: u64 = 50;

const _: () = assert!(CONNECTIONS_MAX > 0);
const _: () = assert!(REQUEST_LINE_MS < CONNECTION_IDLE_MS);

/// Refusals whose farewell line may be in flight at once when every connection is running a
/// request; beyond it a newcomer's connection is closed without a line (it reads EOF and may
/// try again), so a crowd of newcomers cannot pile up descriptors.
pub const REFUSALS_AT_ONCE: usize = 4;

/// The longest request line accepted from a client, socket or MCP (base64 input of up to
/// 768 KiB fits). Longer lines are refused and skipped without being buffered.
pub const REQUEST_BYTES_MAX: usize = 1 << 20;

/// The longest escape sequence safe text removes whole (an OSC title or hyperlink, a DCS
/// string). A page of safe text never ends inside a sequence, so the first sequence of a page may
/// have to be read whole: this bounds that read. 1 MiB is the largest page a client may ask for
/// (`protocol::OUTPUT_BYTES_MAX`), so a bounded sequence costs no more than one page. A longer
/// one (inline images) is cut here, and what follows the cut reads as text (controls removed).
pub const SAFE_TEXT_ESCAPE_BYTES_MAX: usize = 1 << 20;

/// The longest line `procjournal mcp` reads from its client; a longer one is answered with an
/// Invalid Request error (id null: it is not buffered, so its id is never read) and skipped. It
/// is larger than [`REQUEST_BYTES_MAX`] so that a tool call whose arguments are merely too large
/// gets a tool error the agent can read (`too_large`), as the socket's requests do; 16 MiB is
/// the line bound of the MCP SDK's own stdio transport.
pub const MCP_LINE_BYTES_MAX: usize = 16 << 20;

const _: () = assert!(MCP_LINE_BYTES_MAX > REQUEST_BYTES_MAX);

/// How long a client that started the daemon (`procjournal mcp`) waits for it to listen. Its
/// restore reads the journal first, which takes seconds on a large root; a daemon that needs
/// longer is left running (the error names its pid) rather than killed mid-restore.
pub const DAEMON_AUTOSTART_WAIT_MS: u64 = 30_000;

/// After the daemon a client started exited without listening, how long the client still tries
/// to connect: two clients that start a daemon at once both spawn one, and the one that loses
/// the root's lock exits while the winner is still restoring.
pub const DAEMON_SPAWN_LOSER_GRACE_MS: u64 = 3_000;

/// A started daemon's log (`<root>/daemon.log`) larger than this is moved aside
/// (`daemon.log.old`, one kept) before the next daemon is started, so it never grows without
/// bound across daemons.
pub const DAEMON_LOG_BYTES_MAX: u64 = 1 << 20;

const _: () = assert!(DAEMON_SPAWN_LOSER_GRACE_MS < DAEMON_AUTOSTART_WAIT_MS);

/// Bytes read from a pipe per read call: a quarter of the enlarged pipe, so one wakeup moves a
/// lot and the spool writes several chunks in one call. One buffer of this size per runtime
/// thread serves every drain on it (an idle process holds none).
pub const READ_BYTES: usize = 256 * 1024;

/// After a spool write or sync failed, a new segment is tried at most this often: often enough
/// that output resumes within a drain's checkpoint interval once space returns, rarely enough
/// that a full disk costs a busy writer a file creation per quarter second, not per read.
pub const SPOOL_RETRY_MS: u64 = 250;

/// Gaps (output lost to failed writes or syncs) one process may have. Each is a journal
/// record and an entry in its manifest; a disk that keeps failing would otherwise grow both
/// without bound. Past it, writing does not resume: the last gap stays open to the end of the
/// output, so nothing is lost silently, only kept less.
pub const GAPS_PER_PROCESS_MAX: usize = 256;

/// The pipe size asked for with F_SETPIPE_SZ: larger pipes mean fewer wakeups (research: 1 MiB
/// pipes tripled throughput on this kind of machine).
pub const PIPE_BYTES: i32 = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Output retention (output that is never lost silently). What a process's spool keeps
// is configurable per daemon (`serve --retention`) and per process (`start --retention`,
// `StartArgs::retention_bytes`, `Command::output_retention`); what is past it is deleted in whole
// oldest segments, and readers asking for it get a gap.

/// Bytes of one spool segment by default (`SpoolOptions::default().segment_bytes`, checked by a
/// test): a spool rotates to a new file once its active one holds this much.
pub const SPOOL_SEGMENT_BYTES_DEFAULT: u64 = 8 * 1024 * 1024;

/// Output bytes a process keeps by default (`SpoolOptions::default().retention_bytes`): a long
/// build's or test run's tail several times over, at a cost of 64 MiB of disk per process.
pub const RETENTION_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

/// The least retention a start or a daemon may ask for: one default spool segment. Retention
/// deletes whole segments and never the active one, so less than a segment could not be honoured
/// (the spool would keep the whole active segment anyway); a value this small keeps between
/// nothing and one segment of the most recent output, depending on where the last rotation fell.
pub const RETENTION_BYTES_MIN: u64 = SPOOL_SEGMENT_BYTES_DEFAULT;

/// Sealed segments a spool holds at most at its retention: the default's count
/// (64 MiB / 8 MiB). An open spool keeps a header and an index per segment, and the directory
/// listing at open grows with them, so a larger retention gets larger segments
/// (`retention / RETENTION_SEGMENTS_MAX`) rather than more of them.
pub const RETENTION_SEGMENTS_MAX: u64 = 8;

/// Segments retention has dropped from a spool's window whose files a supervised spool leaves
/// for its next sync to remove, off the drain's thread (`Spool::defer_removals`): removing a
/// segment frees its page cache there and then, about 3 ms for an 8 MiB segment measured on
/// this kind of machine, which stalled the drain for a third of the time a 1 GiB capture took.
/// Past this many (no sync came: a checkpoint is at most a second away while output flows, and
/// every write-behind's worth of output starts a sync, or only these removals when the window
/// turns over too fast for a sync to be worth it), the next one is removed at once, as an
/// unsupervised spool removes each.
pub const SPOOL_REMOVALS_DEFERRED_MAX: usize = 16;

/// Files of dropped segments a supervised spool keeps to write its next segments into
/// (`spool/spare.rs`), each a whole segment on disk beyond the retention bound. Two let a new
/// segment find one while the sync that readies the next is still running: a capture of 1 GiB
/// of zeros through `run` and the default window of 64 MiB created 10 files for its 129
/// segments (the first window's 9, and one while no spare was ready) and reused the others.
pub const SPOOL_SPARES_MAX: usize = 2;

/// The most retention a start or a daemon may ask for: 4 GiB per process. More is far more often
/// a unit mistake than a wish (the live-process bound times this is already a terabyte of disk),
/// and at [`RETENTION_SEGMENTS_MAX`] segments its segments are 512 MiB, the most a read of a
/// damaged sealed segment loads at once.
pub const RETENTION_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Deadlines: the wall-clock and idle limits of each process, enforced by one sweep in
// the actor over every live process (`src/supervisor/deadline.rs`).

/// The sweep runs at the earliest deadline any live process could reach, but never sooner than
/// this after the previous sweep: a sweep costs nanoseconds per live process
/// (`benches/deadline.rs` measures one over 10 000), so at most ten a second keep it far below a
/// millisecond of the actor's time per second at the live bound, and a deadline fires at most
/// this late.
pub const DEADLINE_SWEEP_MIN_MS: u64 = 100;

/// After enforcing a fired deadline failed (the tree could not be signalled or its exit not
/// proven), the sweep tries that process again this much later: often enough that a transient
/// failure costs seconds, rarely enough that a permanent one costs little.
pub const DEADLINE_RETRY_MS: u64 = 2_000;

/// Failures to enforce a fired deadline recorded per process (a journal record and a manifest
/// entry each); later ones are only traced, so a tree that can never be signalled cannot grow
/// the journal without bound.
pub const DEADLINE_FAILURES_MAX: usize = 8;

// ---------------------------------------------------------------------------------------------
// Run-to-completion capture: `Supervisor::capture`
// (`src/supervisor/capture.rs`) returns a command's whole output, each stream bounded.

/// Bytes of each stream a capture returns by default (16 MiB): a quality check's or a
/// probe's whole report many times over; more is an incomplete stream with this prefix, and
/// the spool keeps the rest.
pub const CAPTURE_STREAM_BYTES_DEFAULT: usize = 16 * 1024 * 1024;

/// The most a capture may be asked to buffer per stream: the most output a spool may keep
/// (`RETENTION_BYTES_MAX`). A larger buffer could only hold what retention already deleted.
pub const CAPTURE_STREAM_BYTES_MAX: usize = RETENTION_BYTES_MAX as usize;

/// Bytes one read of the spool moves into a capture's buffers: the same as the largest
/// `output` page (`protocol::OUTPUT_BYTES_MAX`), so that a 16 MiB stream takes 16 reads, and a
/// capture holds at most this much beside its buffers.
pub const CAPTURE_READ_BYTES: usize = 1 << 20;

const _: () = assert!(CAPTURE_STREAM_BYTES_DEFAULT <= CAPTURE_STREAM_BYTES_MAX);

const _: () = assert!(RETENTION_BYTES_MIN <= RETENTION_BYTES_DEFAULT);
const _: () = assert!(RETENTION_BYTES_DEFAULT <= RETENTION_BYTES_MAX);
const _: () =
    assert!(RETENTION_BYTES_DEFAULT / RETENTION_SEGMENTS_MAX == SPOOL_SEGMENT_BYTES_DEFAULT);
const _: () = assert!(RETENTION_BYTES_MAX / RETENTION_SEGMENTS_MAX <= 512 * 1024 * 1024);

#[cfg(test)]
mod tests {
    /// The spool's defaults are the bounds named here (the spool keeps its own copy).
    #[test]
    fn spool_defaults_are_the_named_bounds() {
        let options = crate::spool::SpoolOptions::default();
        assert_eq!(options.segment_bytes, super::SPOOL_SEGMENT_BYTES_DEFAULT);
        assert_eq!(options.retention_bytes, super::RETENTION_BYTES_DEFAULT);
    }
}
