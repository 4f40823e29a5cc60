//! Where a client command finds the processes it names: the root's daemon ([`Target`], a
//! reference resolved by it, this shell's environment sent with a start), or, when none runs,
//! the journal replayed read-only ([`offline_manifests`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::client::{Client, ClientError};
use crate::journal::reader::JournalReader;
use crate::lifecycle::{Handle, ProcessRef};
use crate::protocol::Request;
use crate::server::default_socket;

/// Where the daemon is: `--socket`, else `procjournal.sock` in the root.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The daemon's socket (default: procjournal.sock in the root).
    #[arg(long, value_name = "PATH")]
    pub(super) socket: Option<PathBuf>,
}

impl Target {
    pub(crate) fn root(&self) -> anyhow::Result<PathBuf> {
        let root = super::root_or_default(self.root.clone())?;
        std::path::absolute(&root).with_context(|| format!("runtime root {}", root.display()))
    }

    pub(crate) fn socket(&self) -> anyhow::Result<PathBuf> {
        match &self.socket {
            Some(socket) => Ok(socket.clone()),
            None => Ok(default_socket(&self.root()?)),
        }
    }

    pub(super) fn connect(&self) -> anyhow::Result<Client> {
        let socket = self.socket()?;
        Client::connect(&socket).map_err(|e| match e {
            ClientError::NoDaemon { .. } => anyhow::anyhow!(
                "{e}\nstart one with `procjournal serve{}`",
                self.root
                    .as_ref()
                    .map_or_else(String::new, |r| format!(" --root {}", r.display()))
            ),
            other => other.into(),
        })
    }

    /// A connection to the root's daemon, starting one when none listens (detached, so it
    /// outlives this command, and said on stderr): what `start` and `restart` use, so that a
    /// newcomer never has to open a second terminal for `serve`.
    pub(super) fn connect_or_start(&self) -> anyhow::Result<Client> {
        let socket = self.socket()?;
        let root = self.root()?;
        let wait = Duration::from_millis(crate::limits::DAEMON_AUTOSTART_WAIT_MS);
        let spawn = || super::spawn_detached_daemon(&root, self.socket.as_deref(), &[]);
        match crate::client::connect_or_spawn(&socket, spawn, wait) {
            Ok((client, None)) => Ok(client),
            Ok((client, Some(spawned))) => {
                note!(
                    "procjournal: no daemon was running for {}; started one (pid {}, log {}); \
                     `procjournal shutdown` stops it",
                    root.display(),
                    spawned.pid,
                    root.join("daemon.log").display()
                );
                Ok(client)
            }
            Err(e) => Err(anyhow::anyhow!(
                "cannot reach or start the daemon of {}: {e} (see {})",
                root.display(),
                root.join("daemon.log").display()
            )),
        }
    }

    /// A connection, or `None` when no daemon listens (the caller falls back to the journal).
    pub(crate) fn try_connect(&self) -> anyhow::Result<Option<Client>> {
        match Client::connect(&self.socket()?) {
            Ok(client) => Ok(Some(client)),
            Err(ClientError::NoDaemon { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// The handle `reference` names: a handle as it is (the daemon checks it), a number or a name
/// asked of the daemon (`resolve`). Only for a command that makes several calls about one
/// process (`logs`, `send`, `restart`): it pins them all to the process the reference named
/// first, even if a name moves to another process meanwhile. A command of one call sends the
/// reference itself, so that the daemon resolves it and acts in the same step.
pub(crate) fn resolve(client: &mut Client, reference: &ProcessRef) -> anyhow::Result<Handle> {
    if let ProcessRef::Handle(h) = reference {
        return Ok(*h);
    }
    let info = client.call(&Request::Resolve(reference.clone()))?;
    let view: super::views::ProcView =
        serde_json::from_value(info).context("the daemon's answer")?;
    view.handle
        .parse()
        .map_err(|e| anyhow::anyhow!("the daemon's answer: {e}"))
}

/// This shell's environment, as a command would get it run from here (the daemon removes Git
/// redirection from it); a variable that is not UTF-8 cannot travel in JSON and is left out.
pub(super) fn client_environment() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Replays the journal read-only: what `ps` and `logs` show when no daemon runs.
pub(crate) fn offline_manifests(
    root: &Path,
) -> anyhow::Result<(crate::lifecycle::ManifestStore, bool)> {
    super::existing(root)?;
    let reader = JournalReader::open(root)
        .context("cannot read the journal (has anything run under this root?)")?;
    let mut progress = super::progress::Progress::journal("replaying", &reader.dir());
    let (store, replay, recovery) =
        crate::lifecycle::restore_read_only(reader.root(), |r| progress.record(r.position))?;
    progress.finish();
    let clean = recovery.is_clean() && replay.is_clean();
    if let Some(damage) = crate::lifecycle::damage::summary(&recovery, &replay) {
        note!("procjournal: warning: {damage}");
    } else if !clean {
        note!(
            "procjournal: the journal has damage or invalid events; `procjournal journal verify` reports them"
        );
    }
    Ok((store, clean))
}
