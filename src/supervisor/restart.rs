//! `restart`: a finished process's command started again, as a new process linked to the old
//! one (`restart_of` in its `RegisteredV2`).
//!
//! Invariants:
//! - Only a terminal process is restarted: a live one is still the command's one instance, and
//!   restarting it would run the command twice under two handles the user thinks are one.
//! - The link is set here and nowhere else, after the journal was seen to hold the old handle:
//!   replay rejects a registration whose `restart_of` names a handle not registered before it,
//!   so an unchecked link would be a record that a later open refuses.
//! - The new command is what the journal recorded: program, arguments, working directory,
//!   labels, limits, owner, the overrides with their persistence, and whether the login-shell
//!   overlay was asked for. A value the journal withheld (a secret) must be supplied again, by
//!   name; a restart never invents or drops one ([`crate::environment::for_restart`]).
//! - What the journal does not record is the caller's to give again: the base environment (the
//!   restarter's, as for any start), a wait for capacity, and a terminal (the journal keeps a
//!   terminal's sizes as events, not in the manifest; a restart does not guess one).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Command, PrepareError, StartError, Supervisor};
use crate::environment::{self, RestartEnvError};
use crate::lifecycle::event::EnvOverlay;
use crate::lifecycle::{Handle, State};

/// Why a process cannot be restarted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestartError {
    #[error("{0} is not a process this journal knows")]
    UnknownHandle(Handle),
    /// The process has not ended: a restart would run its command twice.
    #[error("{handle} is {} and has not ended; stop it first", state.name())]
    NotFinished { handle: Handle, state: State },
    /// Values the journal withheld were not supplied again (their names, in command order).
    #[error("cannot restart {handle}: {source}")]
    Environment {
        handle: Handle,
        #[source]
        source: RestartEnvError,
    },
    /// The recorded command no longer validates here (its retention is below this
    /// supervisor's spool segment, say).
    #[error("cannot restart {handle}: {source}")]
    Prepare {
        handle: Handle,
        #[source]
        source: PrepareError,
    },
    #[error(transparent)]
    Start(#[from] StartError),
}

impl Supervisor {
    /// The command that starts `handle`'s again, linked to it: everything the journal recorded
    /// (see the module doc), with each withheld environment value taken from `supplied` by name.
    /// The caller may still set what a restart does not carry over (a base environment with
    /// [`Command::client_env`] or [`Command::env_base`], [`Command::wait_for_capacity`],
    /// [`Command::pty`]) before preparing and starting it.
    pub fn restart_command(
        &self,
        handle: &Handle,
        supplied: &BTreeMap<String, String>,
    ) -> Result<Command, RestartError> {
        let m = self
            .manifest(handle)
            .ok_or(RestartError::UnknownHandle(*handle))?;
        if !m.state.is_terminal() {
            return Err(RestartError::NotFinished {
                handle: *handle,
                state: m.state,
            });
        }
        let overrides =
            environment::for_restart(&m, supplied).map_err(|source| RestartError::Environment {
                handle: *handle,
                source,
            })?;
        let recorded = &m.command;
        let overlay = recorded
            .env_policy()
            .is_some_and(|p| !matches!(p.overlay, EnvOverlay::Off));
        let mut command = Command::new(recorded.program())
            .args(recorded.args())
            .cwd(recorded.cwd())
            .owner(recorded.owner())
            .login_shell_overlay(overlay);
        for (k, v) in recorded.labels() {
            command = command.label(k, v);
        }
        let limits = recorded.limits();
        if let Some(ms) = limits.wall_clock_ms {
            command = command.timeout(Duration::from_millis(ms));
        }
        if let Some(ms) = limits.idle_ms {
            command = command.idle_timeout(Duration::from_millis(ms));
        }
        if let Some(bytes) = limits.output_retention_bytes {
            command = command.output_retention(bytes);
        }
        Ok(command.restarting(*handle, overrides))
    }

    /// [`Supervisor::restart_command`], prepared and started as it is (the supervisor's own
    /// environment as the base, no terminal, no wait for capacity). Returns the new handle.
    pub async fn restart(
        &self,
        handle: &Handle,
        supplied: &BTreeMap<String, String>,
    ) -> Result<Handle, RestartError> {
        let command = self.restart_command(handle, supplied)?;
        let prepared = self
            .prepare(command)
            .map_err(|source| RestartError::Prepare {
                handle: *handle,
                source,
            })?;
        Ok(self.start(prepared).await?)
    }
}
