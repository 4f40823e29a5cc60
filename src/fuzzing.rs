//! Bodies of the cargo-fuzz targets, kept in the library so that `tests/it/fuzz_regressions.rs` replays
//! every committed seed and regression input through exactly the same code on stable Rust in CI.
//! Each function must never panic on any input except when an invariant it checks is broken.
//!
//! - [`record_decoder`]: the record and segment-header decoders of `journal::format`, their
//!   agreement with each other and with the encoders, and the pure segment scanner of recovery run
//!   over the input as the body of a segment.
//! - [`journal_open`]: structure-aware; the input describes one to three segment files (valid or
//!   broken headers, valid chained records, stale records, garbage, zero runs, torn ends, short and
//!   long files), which are written to a fresh temporary root and then scanned read-only, opened
//!   writable (recovery) and appended to.
//! - [`journal_commit_slot`]: the commit-slot decoder of version 2 segments under arbitrary
//!   headers (totality, re-encoding, the rules of journal-format.md restated), and the commit
//!   point recovery derives from two slots.
//! - [`codec_decode`]: the payload codec on a representative event shape.
//! - [`lifecycle_decoders`] (run by the `lifecycle_store` target): the fast lifecycle decoders
//!   against the reference (bincode) decoder, on the same bytes.
//! - [`replay`]: structure-aware; the input describes a sequence of records, mostly real
//!   lifecycle events of every kind over four handles, plus mutated payloads, garbage, other
//!   kinds and codec versions, fed to `Replayer`: the report, the manifests and determinism
//!   ([`check_replay`], which `tests/it/lifecycle_props.rs` also runs on its own sequences).
//! - [`guardian_control`]: the guardian's control lines (`tree::guardian::wire`): the line splitter
//!   under every chunking, both message decoders, and their round trip.
//! - [`guardian_receipt`]: the guardian's exit-receipt decoder, as given and with its checksum
//!   fixed up, and its round trip.
//! - [`guardian_zygote`]: the guardian zygote's request and reply decoders, and their canonical
//!   round trip.
//! - [`snapshot_decode`]: the snapshot decoder, as given and behind a header fixed up to vouch
//!   for the payload, and its round trip.
//! - [`mcp_tool_call`] (with `mcp`): the MCP server's tool lookup and argument decoding
//!   ([`check_tool_call`], which `tests/it/mcp_props.rs` also runs on its own names and arguments).
//! - [`env_file`] (with `cli`): the `--env-file` decoder and its round trip.
//! - [`fleet_message`] (with `fleet`): what a node reads back from a fleet's server (the last
//!   message's headers, a heartbeat), and the headers' round trip.
//!
//! Temporary roots live under [`std::env::temp_dir`] (set `TMPDIR=/dev/shm` when fuzzing for speed)
//! and are removed when each run ends.
//!
//! Every minimised crash the campaigns found is kept in `fuzz/regressions/<target>/` and replayed by
//! `tests/it/fuzz_regressions.rs`; those of bugs not fixed yet are listed in [`KNOWN_BUGS`] (and in
//! that test's `OPEN_BUGS`, which checks that they still fail).
//!
//! Each layer keeps the bodies of its own decoders beside them, in a `fuzz` module behind
//! the `fuzzing` feature (`src/journal/fuzz/`, `src/lifecycle/fuzz/`, `src/mcp/fuzz.rs`, ...),
//! where the layer check of `tests/it/tidy.rs` covers them like any other file; this file only
//! names them.

/// Bugs the campaigns found that are not fixed yet: `(target, regression input, what is wrong)`.
/// Each input is in `fuzz/regressions/<target>/` and still fails its target.
pub const KNOWN_BUGS: &[(&str, &str, &str)] = &[];

#[cfg(feature = "cli")]
pub use crate::cli::fuzz::env_file;
#[cfg(feature = "server")]
pub use crate::client::fuzz::client_response;
pub use crate::codec::fuzz::{FuzzPayload, FuzzState, codec_decode};
#[cfg(feature = "fleet")]
pub use crate::fleet::fuzz::fleet_message;
pub use crate::journal::fuzz::{
    FUZZ_JOURNAL_ID, FUZZ_SEGMENT_BYTES, JournalPlan, journal_commit_slot, journal_floor,
    journal_open, journal_plan, record_decoder,
};
pub use crate::lifecycle::fuzz::{
    REPLAY_RECORDS_MAX, ReplayRecord, check_replay, lifecycle_decoders, lifecycle_store, replay,
    replay_records, snapshot_decode, workload_snapshot,
};
#[cfg(feature = "mcp")]
pub use crate::mcp::fuzz::{check_tool_call, listed_tools, mcp_line, mcp_tool_call};
#[cfg(feature = "server")]
pub use crate::protocol::fuzz::protocol_request;
#[cfg(feature = "server")]
pub use crate::server::fuzz::server_framing;
pub use crate::spool::fuzz::spool_recovery;
pub use crate::supervisor::fuzz::{safe_text, safe_text_pages};
pub use crate::tree::fuzz::{guardian_control, guardian_receipt, guardian_zygote};
