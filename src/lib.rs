//! procjournal: durable supervision of long-running commands.
//!
//! Every lifecycle change is a checksummed event in a memory-mapped, segmented journal with stable
//! event IDs ([`journal`]). The journal is the only source of truth; everything else is rebuilt
//! from it on open. See ARCHITECTURE.md for the map and journal-format.md for every byte on disk.
#![deny(unsafe_code)]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        clippy::disallowed_types,
        reason = "unit tests start, signal and reap real processes, and lock as they like"
    )
)]

pub mod admission;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "server")]
pub mod client;
pub mod codec;
pub mod environment;
mod event_id;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod idhash;
pub mod journal;
pub mod lifecycle;
pub mod limits;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "server")]
pub mod protocol;
pub mod root;
#[cfg(feature = "server")]
pub mod server;
pub mod spool;
pub mod supervisor;
mod sync;
pub mod tree;

pub use tree::guardian::run_if_requested as run_guardian_if_requested;

pub use journal::{
    Appended, Durability, EventId, EventKind, Journal, JournalError, JournalOptions, Position,
    RecoveryReport,
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
