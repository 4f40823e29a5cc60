//! The integration tests, as one binary: each module is what used to be a test target of its own
//! (`cargo test --test it MODULE::` runs one). One binary links the crate once instead of once
//! per file, so a change to the library relinks one test executable. Only a test that must own
//! its process stays apart (`tests/embedded_guardian.rs`: its `main` is an embedding host's).
//!
//! A module that runs the `procjournal` binary, the daemon's protocol or the MCP server needs the
//! feature that builds it; `cargo test --no-default-features` runs the library's modules alone.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "tests start, signal and reap real processes directly"
)]

mod common;

#[cfg(feature = "cli")]
mod admission;
#[cfg(feature = "cli")]
mod admission_default;
#[cfg(feature = "cli")]
mod cli_brief_snapshot;
#[cfg(feature = "cli")]
mod cli_broken_pipe;
#[cfg(feature = "cli")]
mod cli_conventions;
#[cfg(feature = "cli")]
mod cli_daemon;
#[cfg(feature = "cli")]
mod cli_damaged_root;
#[cfg(feature = "cli")]
mod cli_env;
#[cfg(feature = "cli")]
mod cli_journal;
#[cfg(feature = "cli")]
mod cli_open_tenure;
#[cfg(feature = "cli")]
mod cli_pty;
#[cfg(feature = "cli")]
mod cli_recovery;
#[cfg(feature = "cli")]
mod cli_run_input;
#[cfg(feature = "cli")]
mod cli_run_live;
#[cfg(feature = "cli")]
mod cli_spool_turnover;
#[cfg(feature = "cli")]
mod cli_storage_fault;
#[cfg(feature = "cli")]
mod cli_terminal;
mod codec_golden;
#[cfg(feature = "cli")]
mod daemon_root_gone;
#[cfg(feature = "cli")]
mod daemon_scale;
mod decoder_props;
#[cfg(feature = "cli")]
mod fleet;
mod format_answers;
mod format_doc;
mod fuzz_regressions;
mod golden_journal;
#[cfg(feature = "cli")]
mod guardian_program;
mod guardian_zygote;
mod journal_crash;
mod journal_full_disk;
mod journal_props;
#[cfg(feature = "cli")]
mod launch_crash;
mod launch_durability;
#[cfg(feature = "cli")]
mod launch_env;
mod lifecycle_props;
#[cfg(feature = "mcp")]
mod mcp_props;
#[cfg(feature = "cli")]
mod mcp_python;
#[cfg(feature = "cli")]
mod mcp_stdio;
#[cfg(feature = "server")]
mod protocol_props;
#[cfg(feature = "cli")]
mod readme;
mod render_pages;
#[cfg(feature = "cli")]
mod restart;
#[cfg(feature = "cli")]
mod retention;
#[cfg(feature = "cli")]
mod root_security;
#[cfg(feature = "cli")]
mod server_abuse;
#[cfg(feature = "cli")]
mod short_handles;
#[cfg(feature = "cli")]
mod snapshot_crash;
mod snapshot_props;
mod spool_crash;
#[cfg(feature = "cli")]
mod spool_disk_full;
mod supervisor_capture;
#[cfg(feature = "cli")]
mod supervisor_deadlines;
#[cfg(feature = "cli")]
mod supervisor_ownership;
mod supervisor_pty;
mod supervisor_races;
mod supervisor_restore;
mod supervisor_states;
mod supervisor_tap;
mod tidy;
#[cfg(feature = "cli")]
mod tree_ownership;
#[cfg(feature = "cli")]
mod tree_survivors;
