//! procjournal: durable supervision of long-running commands.
//!
//! Every lifecycle change is a checksummed event in a memory-mapped, segmented journal with stable
//! event IDs ([`Journal`]). The journal is the only source of truth; everything else is rebuilt
//! from it on open. See ARCHITECTURE.md for the map and journal-format.md for every byte on disk.
#![deny(unsafe_code)]
#![warn(unnameable_types)]
// Without the CLI, what only the CLI, the daemon or the MCP server use (offline inspection,
// rendering for terminals) has no caller in the library: dead there, alive in the full build,
// where dead code is still an error.
#![cfg_attr(not(feature = "cli"), allow(dead_code, unused_imports))]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        clippy::disallowed_types,
        reason = "unit tests start, signal and reap real processes, and lock as they like"
    )
)]

// The layers: private, so that what an embedder may use is only what the crate root re-exports
// below; public under the `test-support` feature, which only the crate's own tests, benches and
// fuzz targets turn on, so that they can reach the layers they test. Each is declared twice,
// plainly rather than by a macro, so that rustfmt (which does not look inside macros) formats
// every file of every layer.
#[cfg(feature = "test-support")]
pub mod admission;
#[cfg(not(feature = "test-support"))]
mod admission;
#[cfg(all(feature = "cli", feature = "test-support"))]
pub mod cli;
#[cfg(all(feature = "cli", not(feature = "test-support")))]
mod cli;
#[cfg(all(feature = "server", feature = "test-support"))]
pub mod client;
#[cfg(all(feature = "server", not(feature = "test-support")))]
mod client;
#[cfg(feature = "test-support")]
pub mod environment;
#[cfg(not(feature = "test-support"))]
mod environment;
#[cfg(all(feature = "fleet", feature = "test-support"))]
pub mod fleet;
#[cfg(all(feature = "fleet", not(feature = "test-support")))]
mod fleet;
#[cfg(feature = "test-support")]
pub mod journal;
#[cfg(not(feature = "test-support"))]
mod journal;
#[cfg(feature = "test-support")]
pub mod lifecycle;
#[cfg(not(feature = "test-support"))]
mod lifecycle;
#[cfg(all(feature = "mcp", feature = "test-support"))]
pub mod mcp;
#[cfg(all(feature = "mcp", not(feature = "test-support")))]
mod mcp;
#[cfg(all(feature = "server", feature = "test-support"))]
pub mod protocol;
#[cfg(all(feature = "server", not(feature = "test-support")))]
mod protocol;
#[cfg(feature = "test-support")]
pub mod root;
#[cfg(not(feature = "test-support"))]
mod root;
#[cfg(all(feature = "server", feature = "test-support"))]
pub mod server;
#[cfg(all(feature = "server", not(feature = "test-support")))]
mod server;
#[cfg(feature = "test-support")]
pub mod spool;
#[cfg(not(feature = "test-support"))]
mod spool;
#[cfg(feature = "test-support")]
pub mod supervisor;
#[cfg(not(feature = "test-support"))]
mod supervisor;
#[cfg(feature = "test-support")]
pub mod tree;
#[cfg(not(feature = "test-support"))]
mod tree;

#[cfg(feature = "test-support")]
pub mod aligned;
#[cfg(not(feature = "test-support"))]
mod aligned;
pub mod codec;
mod event_id;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod heap;
#[doc(hidden)]
pub mod idhash;
mod idsort;
pub mod limits;
mod runs;
mod spill;
mod sync;

// The surface: what a host embeds. Everything else is the layers' own business.

/// The root the CLI uses when none is given.
#[cfg(feature = "cli")]
pub use cli::default_root;
/// The binary's entry point (`src/bin/procjournal.rs`); not for embedders.
#[cfg(feature = "cli")]
#[doc(hidden)]
pub use cli::main as cli_main;

/// The small guardian image's allocator (`src/bin/procjournal-guardian.rs`); not for embedders.
#[doc(hidden)]
pub use tree::guardian::GuardianAllocator;
pub use tree::guardian::run_if_requested as run_guardian_if_requested;

// The journal.
pub use journal::reader::JournalReader;
pub use journal::{
    Appended, Durability, EventId, EventKind, Journal, JournalError, JournalOptions, Position,
    RecoveryReport, Tenure,
};

// The supervisor.
pub use supervisor::{CaptureLimits, Command, Rendering, Services, Supervisor, SupervisorConfig};

// The daemon, its protocol and its clients.
#[cfg(feature = "server")]
pub use client::{Client, ClientError, DaemonStartError, call_async, connect_or_spawn};
#[cfg(feature = "server")]
pub use protocol::dispatch::{
    HelloResult, InputResult, InterruptResult, ListResult, ProcessInfo, ResizeResult, StartResult,
    WaitResult,
};
#[cfg(feature = "server")]
pub use protocol::{Dispatcher, Request};
#[cfg(feature = "server")]
pub use server::{ServeError, Server, ServerLimits, default_socket};

// The fleet.
#[cfg(feature = "fleet")]
pub use fleet::{
    Fleet, FleetConfig, FleetProcess, FleetReader, FleetStatus, NodeName, NodeStatus, OutputPart,
    ProcessEntry, ShippedEvent, StatusError, WireError, fleet_process, fleet_processes,
    fleet_status, read_events, read_output,
};

// The MCP server.
#[cfg(feature = "mcp")]
pub use mcp::McpServer;

// Admission: how many workloads run at once.
pub use admission::{
    AdmissionConfig, AdmissionSnapshot, Basis, Decision, HostSample, SampleState, Telemetry,
    WorkloadReservation,
};

// The client (feature `server`).
#[cfg(feature = "server")]
pub use client::SpawnedDaemon;

// Environments of restarts.
pub use environment::RestartEnvError;

// The journal: records, recovery, compaction, reading.
pub use journal::OpenVisitor;
pub use journal::compact::{Compacted, CrashPoints, Head, NoCrash};
pub use journal::floor::{Floor, FloorError, Resume, RetainedId};
pub use journal::reader::{Follower, Record, RecordView};
pub use journal::recovery::{BadSegment, DamagedRange, DuplicateId, SeqGap, TornTail};
pub use journal::{CommitLoss, MissingSegment, Row};

// The lifecycle: handles, events, manifests, snapshots, retention.
pub use lifecycle::event::{
    CaptureStatus, CommandSpec, CommandSpecV2, CursorBounds, Deadline, DeadlineFailed,
    DeadlineFired, EnvBase, EnvOverlay, EnvPolicy, EnvVar, ExitProof, ExitStatus, Handle,
    HandleParseError, IdentityWitness, Limits, ProcessWitness, ReceiptBinding, Scoped,
    TreeMechanism,
};
pub use lifecycle::manifest::{Manifest, Rejection, Retirement, TerminalResult};
pub use lifecycle::reference::{ProcessRef, ReferenceError};
pub use lifecycle::replay::{ReplayIssue, ReplayReport, SnapshotProblem};
pub use lifecycle::retention::{CleanReport, KeepReason, Kept, RetireFailure, RetiredOutput};
pub use lifecycle::snapshot::SnapshotError;
pub use lifecycle::state::State;
pub use lifecycle::{LifecycleError, SnapshotPolicy};
pub use lifecycle::{LifecycleIds, NAME_LABEL, StoredCommand};

// The MCP server (feature `mcp`).
#[cfg(feature = "mcp")]
pub use mcp::SchemaError;

// The protocol (feature `server`).
#[cfg(feature = "server")]
pub use protocol::dispatch::Ownership;
#[cfg(feature = "server")]
pub use protocol::{
    ApiError, ErrorCode, ProtocolError, ProtocolErrorKind, PtyArgs, RestartArgs, StartArgs,
};

// Roots.
pub use root::RootError;

// Output: the spool and what it says of gaps.
pub use spool::format::Stream;
pub use spool::loss::{DamageKind, Gap, LossReason, SkipKind, Skipped};
pub use spool::remove::Removed;
pub use spool::render::ArtifactDescriptor;
pub use spool::{Span, SpoolOptions, SpoolRead};

// The supervisor: starting, reading, waiting, capturing, stopping.
pub use supervisor::command::{Lease, PrepareError, PreparedProcess};
pub use supervisor::restore::RestoreReport;
pub use supervisor::{
    CaptureError, CaptureFailure, CaptureFault, CaptureReceipt, CaptureResult, DrainEnd, Drained,
    GateStatus, Incomplete, IncompleteCapture, InputWaitStatus, ListFilter, OutputPage, Refusal,
    RestartError, ShutdownReport, SpawnFailure, SpoolArtifact, StartError, Started, StreamCapture,
    StreamEnd, StreamReceipt, SupervisorError, SupervisorStats, Tap, TapAbandon, TapBytes,
    TapChunk, TapSink, TerminalSummary, Why, WorkloadStatus,
};
pub use supervisor::{
    Completion, CompletionNotifier, LifecycleNotice, LifecyclePublisher, ServiceError, ServiceEvent,
};

// Process trees: the launcher seam, signals and samples.
pub use tree::cgroup::{CgroupBase, Scope as CgroupScope, Unavailable as CgroupUnavailable};
pub use tree::pty::{LineMode, PtyMaster, PtySize};
pub use tree::sample::{Membership, TreeSample};
pub use tree::{
    GroupLauncher, GuardianLauncher, GuardianProgram, GuardianTree, Identity, Launcher, LeaderExit,
    ProcessTree, SpawnError, SpawnSpec, Spawned, Streams, TreeScope, TreeSignal,
};

/// The examples of README.md and of the pages of docs/ are compiled as doctests so that they
/// stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
struct CliDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
struct LibraryDoctests;
