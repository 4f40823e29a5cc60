//! `--env` and `--env-file`: the environment variables a start sets whose values the journal
//! withholds (it keeps their names). Shared by `run`, `capture`, `start` and `restart`.
//!
//! `--env NAME=value` puts the value in this process's argv, which every local user can read in
//! `/proc/PID/cmdline` while it runs; `--env NAME` (the value from procjournal's own
//! environment) and `--env-file FILE` keep it out. Either way the value reaches the command
//! through the start request (in memory, or the daemon's socket), never through an argv.
//!
//! Invariant: the files come first, in the order given, then `--env`, so the command line wins;
//! within them a later name wins.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;

use super::args::parse_env;

#[derive(Debug, Default, clap::Args)]
pub(crate) struct EnvArgs {
    /// An environment variable for the command (repeatable): NAME takes its value from
    /// procjournal's own environment (`TOKEN=... procjournal run --env TOKEN -- CMD`); prefer it
    /// to NAME=value, which every local user can read in /proc/PID/cmdline while procjournal
    /// runs. The value is never written to disk or shown: the journal keeps the name.
    #[arg(long = "env", value_name = "NAME[=value]", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Environment variables from FILE, withheld as --env's (repeatable; --env wins): NAME=value
    /// lines, `#` comments and blank lines, values taken as written or in quotes (the subset
    /// every dotenv reader reads alike; a line outside it is refused with its number).
    #[arg(long = "env-file", value_name = "FILE")]
    env_file: Vec<PathBuf>,
}

impl EnvArgs {
    /// The variables, files first, then `--env`.
    pub(crate) fn resolve(self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut env = BTreeMap::new();
        for path in &self.env_file {
            let bytes = std::fs::read(path)
                .with_context(|| format!("cannot read --env-file {}", path.display()))?;
            let entries = super::env_file::parse(&bytes)
                .with_context(|| format!("--env-file {}", path.display()))?;
            env.extend(entries);
        }
        env.extend(self.env);
        Ok(env)
    }
}
