//! The command-line surface. Errors get their context here, at the edge (anyhow); the library
//! below returns typed errors.
//!
//! Recovery tooling (`journal ...`) is offline and read-only: it takes no lock and never writes, so
//! it may run against a root that a live writer holds.

mod journal_cmd;
mod run_cmd;
mod spool_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "procjournal",
    version,
    about = "Durable supervision of long-running commands"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Supervise one command in the foreground: stream its output, forward Ctrl-C, exit with its
    /// status, and keep everything in the journal and spool.
    Run(run_cmd::RunArgs),
    /// Recovery tooling: read a journal offline.
    #[command(subcommand)]
    Journal(journal_cmd::JournalCommand),
    /// Recovery tooling: read a process's output spool offline.
    #[command(subcommand)]
    Spool(spool_cmd::SpoolCommand),
}

/// `--root DIR`, else `$PROCJOURNAL_ROOT`, else `$XDG_STATE_HOME/procjournal`, else
/// `~/.local/state/procjournal`.
pub fn default_root() -> anyhow::Result<PathBuf> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(root) = env("PROCJOURNAL_ROOT") {
        return Ok(root);
    }
    if let Some(state) = env("XDG_STATE_HOME") {
        return Ok(state.join("procjournal"));
    }
    match env("HOME") {
        Some(home) => Ok(home.join(".local/state/procjournal")),
        None => anyhow::bail!(
            "no --root given and neither PROCJOURNAL_ROOT, XDG_STATE_HOME nor HOME is set"
        ),
    }
}

pub(crate) fn root_or_default(root: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match root {
        Some(root) => Ok(root),
        None => default_root(),
    }
}

/// Runs the CLI; the exit code is the command's verdict (see each command's help).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(args),
        Command::Journal(cmd) => journal_cmd::run(cmd),
        Command::Spool(cmd) => spool_cmd::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("procjournal: {error:#}");
            ExitCode::from(2)
        }
    }
}
