//! The options every command that launches a process in the foreground takes (`run`,
//! `capture`), declared once so that their names, parsing and help cannot drift apart, and
//! turned into the protocol's start arguments in one place.
//!
//! Invariant: what these options say reaches the start request the same way from both
//! commands; only what differs (a terminal, how output comes back) is each command's own.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::args::{parse_duration, parse_env, parse_label};
use crate::protocol::{PtyArgs, StartArgs};

#[derive(Debug, Args)]
pub(crate) struct LaunchArgs {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal,
    /// ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Share the runtime root read-only with this group (a name or gid): directories 02750,
    /// files 0640, instead of 0700 and 0600. The root keeps it: a later open without --group
    /// leaves a shared root shared (`chmod 700 ROOT` makes it private again). Ignored when a
    /// daemon serves the root (its own access stands).
    #[arg(long, value_name = "GROUP", value_parser = super::args::parse_group)]
    pub group: Option<u32>,
    /// Wall-clock limit, e.g. 30s, 500ms, 5m, 2h (a bare number is seconds): the command is
    /// then stopped and ends `timed_out`, deadline `wall`.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Idle limit, e.g. 10m: stopped (`timed_out`, deadline `idle`) after this long without
    /// output, input or a signal.
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// A label k=v (repeatable).
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// A name to find the process by later (`procjournal logs NAME`); unique among live
    /// processes of the root.
    #[arg(long)]
    pub name: Option<String>,
    /// Working directory (default: this shell's; a relative one is taken from it).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    #[command(flatten)]
    pub env: super::env_args::EnvArgs,
    /// As --env, for a value the journal may keep (no secrets): a restart reuses it. NAME
    /// alone takes the value from procjournal's own environment.
    #[arg(long = "env-persist", value_name = "NAME[=value]", value_parser = parse_env)]
    pub env_persist: Vec<(String, String)>,
    /// Output kept in the spool, e.g. 64MiB (the default), 512M, 1G; older output is deleted
    /// in whole segments. At least 8MiB, at most 4GiB.
    #[arg(long, value_name = "SIZE", value_parser = super::size::parse_retention)]
    pub retention: Option<u64>,
    #[command(flatten)]
    pub tree: super::TreeArgs,
    #[command(flatten)]
    pub queue: super::queue::QueueArgs,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl LaunchArgs {
    /// The start arguments these options and `command` make, from the shell directory `here`:
    /// with `client_env` the command starts from it (through a daemon), else from this
    /// process's environment.
    pub fn start(
        self,
        command: Vec<String>,
        pty: Option<PtyArgs>,
        here: &Path,
        client_env: Option<std::collections::BTreeMap<String, String>>,
    ) -> anyhow::Result<StartArgs> {
        // Relative to this shell's directory, as `cd` would take it.
        let cwd = self
            .cwd
            .map_or_else(|| here.to_owned(), |dir| here.join(dir));
        let inherit_env = client_env.is_none();
        Ok(StartArgs {
            max_bytes: None,
            settle_ms: None,
            yield_ms: None,
            command,
            cwd: Some(
                cwd.to_str()
                    .with_context(|| format!("{} is not valid UTF-8", cwd.display()))?
                    .to_owned(),
            ),
            env: self.env.resolve()?,
            env_persist: self.env_persist.into_iter().collect(),
            client_env,
            inherit_env,
            login_shell_overlay: false,
            labels: self.labels.into_iter().collect(),
            name: self.name,
            timeout_ms: self.timeout.map(ms),
            idle_timeout_ms: self.idle_timeout.map(ms),
            retention_bytes: self.retention,
            queue_ms: None,
            pty,
        })
    }
}
