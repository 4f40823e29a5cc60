//! What tells a daemon that its runtime root is gone: the root directory, its `LOCK` and the
//! socket, each identified by device and inode when the server bound, checked again every
//! [`ROOT_WATCH_MS`]. A root deleted (`rm -rf`), replaced by another directory, a `LOCK`
//! removed (the next writer would take a fresh one beside this daemon) or a socket removed
//! (nobody can reach the daemon) ends the daemon, as systemd ends a unit whose
//! `RequiresMountsFor=` vanished: a daemon nobody can reach, writing into unlinked files,
//! would otherwise run for ever.
//!
//! Invariant: only a path that no longer names the file it named at bind counts; a file that
//! cannot be stat'ed for another reason (EACCES, EIO) is no proof and is checked again later.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::limits::ROOT_WATCH_MS;

/// The identities taken at bind.
#[derive(Debug, Clone)]
pub(super) struct RootWitness {
    files: Vec<(&'static str, PathBuf, (u64, u64))>,
}

fn identity(path: &Path, follow: bool) -> io::Result<(u64, u64)> {
    let meta = if follow {
        std::fs::metadata(path)?
    } else {
        std::fs::symlink_metadata(path)?
    };
    Ok((meta.dev(), meta.ino()))
}

impl RootWitness {
    /// Taken once the lock is held and the socket bound. The root is followed (it may be given
    /// through a symlink); the lock and the socket are not.
    pub(super) fn take(root: &Path, socket: &Path) -> io::Result<RootWitness> {
        let lock = root.join("LOCK");
        Ok(RootWitness {
            files: vec![
                ("the runtime root", root.to_owned(), identity(root, true)?),
                ("its LOCK", lock.clone(), identity(&lock, false)?),
                ("the socket", socket.to_owned(), identity(socket, false)?),
            ],
        })
    }

    /// What is gone or replaced, if anything.
    fn check(&self) -> Option<String> {
        for (what, path, was) in &self.files {
            let follow = *what == "the runtime root";
            match identity(path, follow) {
                Ok(now) if now == *was => {}
                Ok(_) => return Some(format!("{what} {} was replaced", path.display())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Some(format!("{what} {} was removed", path.display()));
                }
                Err(_) => {}
            }
        }
        None
    }

    /// Resolves, with what happened, once something is gone.
    pub(super) async fn gone(self) -> String {
        let mut tick = tokio::time::interval(Duration::from_millis(ROOT_WATCH_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let witness = self.clone();
            // A stat may block on a slow file system: off the runtime's threads.
            if let Ok(Some(why)) = tokio::task::spawn_blocking(move || witness.check()).await {
                return why;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_or_replaced_file_is_named_and_an_intact_root_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("LOCK"), b"").unwrap();
        let socket = root.join("procjournal.sock");
        std::fs::write(&socket, b"").unwrap();
        let witness = RootWitness::take(&root, &socket).unwrap();
        assert_eq!(witness.check(), None);
        // Replaced: a new file under the same name is another inode (the old one kept alive so
        // that the number cannot be reused at once).
        let _old = std::fs::File::open(root.join("LOCK")).unwrap();
        std::fs::remove_file(root.join("LOCK")).unwrap();
        std::fs::write(root.join("LOCK"), b"").unwrap();
        assert!(witness.check().unwrap().contains("LOCK"));
        std::fs::remove_dir_all(&root).unwrap();
        let why = witness.check().unwrap();
        assert!(
            why.contains("runtime root") && why.contains("removed"),
            "{why}"
        );
    }
}
