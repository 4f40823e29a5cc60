//! The ownership assessment of a recorded tree: `live`, `exited` (with what proved it) or
//! `unverified` (with why), shared by restore, capacity and the surfaces.
//!
//! Invariants:
//! - Nothing here signals a persisted pid. A recorded guardian is re-attached only through a
//!   fresh pidfd whose identity matches the record (pidfs inode, or start time where the kernel
//!   has no pidfs), and only to watch it.
//! - Missing, partial or corrupt evidence never proves an exit: a receipt must verify against
//!   the registration (file identity, handle, workload witness, and its nonce or, for an
//!   aborted launch's receipt, its guardian's identity, boot and `status none`: see
//!   guardian/mod.rs); a cgroup must report `populated 0`, or be gone from a hierarchy that is
//!   still mounted (the kernel removes only an empty cgroup); a boot id must be known on both
//!   sides and differ. A receipt that does not verify is not the end of the assessment: the
//!   guardian and the cgroup are asked next, so an empty or foreign receipt with the guardian
//!   gone and the cgroup empty is an exit.
//! - Every call re-reads the evidence; nothing is cached here.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::Membership;
use super::cgroup::Scope;
use super::guardian::{
    CgroupEvidence, Registration, Rejection, cgroup_evidence, verify_receipt,
    verify_unscoped_receipt,
};
use super::pidfs_ino;
use super::procfs;
use crate::lifecycle::event::{ExitProof, ExitStatus, ProcessWitness, Scoped};
use crate::tree::LeaderExit;

/// What the evidence of a recorded tree says now.
#[derive(Debug)]
pub enum Assessment {
    Exited(ExitProof),
    /// The recorded guardian still runs (re-attached by identity): the tree is owned, and the
    /// guardian will write its receipt.
    GuardianAlive(OwnedFd),
    /// The guardian is gone without a receipt, but the recorded cgroup still holds processes:
    /// the cgroup (ours by its path) can still end them.
    CgroupPopulated(Scope),
    Unverified(String),
}

/// The boot id at `source` (normally /proc/sys/kernel/random/boot_id; tests point it elsewhere
/// to simulate a reboot).
pub fn read_boot_id(source: &Path) -> Option<[u8; 16]> {
    let text = std::fs::read_to_string(source).ok()?;
    uuid::Uuid::parse_str(text.trim())
        .ok()
        .map(|u| *u.as_bytes())
}

/// A pidfd for the process `w` recorded, if that very process still runs.
pub fn reattach(w: &ProcessWitness) -> Option<OwnedFd> {
    let fd = super::open_pidfd(w.pid).ok()?;
    let same = if w.pidfs_ino != 0 {
        pidfs_ino(&fd) == w.pidfs_ino
    } else {
        // Pinned first, read second: if the stat matches, it is the pinned process's.
        w.start_time_ticks != 0
            && procfs::stat(w.pid).is_some_and(|s| s.start_time_ticks == w.start_time_ticks)
    };
    same.then_some(fd)
}

/// Whether the process a pidfd names has exited (a zombie included), without waiting.
fn exited(fd: &OwnedFd) -> bool {
    use std::os::fd::AsFd;
    let mut fds = [nix::poll::PollFd::new(
        fd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO), Ok(n) if n > 0)
}

/// Assesses a recorded scope from its evidence now. `boot_now` is the current boot id.
pub fn assess(scope: &Scoped, boot_now: Option<[u8; 16]>) -> Assessment {
    if let Some(now) = boot_now
        && scope.boot_id != [0; 16]
        && now != scope.boot_id
    {
        return Assessment::Exited(ExitProof::BootChanged);
    }
    let mut why = Vec::new();
    if let Some(binding) = &scope.receipt {
        let registration = Registration {
            binding,
            handle: &scope.handle.to_string(),
            workload: &scope.workload,
            // Nothing in the record says whether `GO` was sent: the receipt of an aborted
            // launch binds by what its guardian knew before it (guardian/mod.rs).
            gateless_guardian: scope.guardian.as_ref(),
            boot_id: scope.boot_id,
        };
        match verify_receipt(&registration) {
            Ok(r) => {
                return Assessment::Exited(ExitProof::Receipt {
                    status: match r.status {
                        Some(LeaderExit::Code(c)) => ExitStatus::Code(c),
                        Some(LeaderExit::Signal(s)) => ExitStatus::Signal(s),
                        None => ExitStatus::Unknown,
                    },
                    reaped: r.reaped,
                });
            }
            Err(e) => why.push(format!("its receipt does not prove the exit ({e})")),
        }
    }
    if let Some(guardian) = &scope.guardian {
        match reattach(guardian) {
            // An exited guardian nobody reaped yet (its parent died, and the reaper it was
            // given is slow or never reaps) still has its pidfd: its readability says it exited.
            Some(fd) if !exited(&fd) => return Assessment::GuardianAlive(fd),
            Some(_) => why.push("the guardian has exited".to_owned()),
            None => why.push("the guardian is gone".to_owned()),
        }
    }
    if let Some(path) = &scope.cgroup {
        match cgroup_evidence(Path::new(path)) {
            CgroupEvidence::Empty => return Assessment::Exited(ExitProof::CgroupEmpty),
            CgroupEvidence::Populated(cgroup) => return Assessment::CgroupPopulated(cgroup),
            CgroupEvidence::Unknown(e) => why.push(format!("its cgroup: {e}")),
        }
    }
    if scope.guardian.is_none() {
        why.push("a process group cannot prove that no member left it".to_owned());
    }
    Assessment::Unverified(why.join("; "))
}

/// What can still be observed of a recorded tree that nothing proved gone, for admission to
/// charge it by: its cgroup; while its guardian (re-attached by identity) lives, nothing yet
/// (the guardian is ending it: the floor and a core); else its workload's process group (the
/// workload leads its own session), members started no earlier than the workload. A pgid is not
/// reused while any process has it, so a process that now holds the workload's pid with another
/// start time means the group is gone. Only for charging: nothing here proves an exit or
/// signals anyone.
pub fn observable(scope: &Scoped) -> Membership {
    if let Some(path) = &scope.cgroup {
        return Membership::Cgroup { scope: path.into() };
    }
    if let Some(guardian) = &scope.guardian
        && reattach(guardian).is_some_and(|fd| !exited(&fd))
    {
        return Membership::Unknown;
    }
    let w = &scope.workload;
    match procfs::stat(w.pid).map(|s| s.start_time_ticks) {
        Some(start) if start != w.start_time_ticks => Membership::Empty,
        _ => Membership::Group {
            pgid: w.pid,
            since: w.start_time_ticks,
        },
    }
}

/// The evidence of a registration whose scope was never recorded (its launch was cut short
/// before `Scoped` was written, or a lost page cache took it): the receipt its guardian left
/// at `receipt`, if it proves that the gate never opened (guardian/mod.rs), or why there is no
/// proof.
pub fn assess_unscoped(receipt: &Path, handle: &str) -> Result<ExitProof, String> {
    match verify_unscoped_receipt(receipt, handle) {
        Ok(r) => Ok(ExitProof::Receipt {
            status: ExitStatus::Unknown,
            reaped: r.reaped,
        }),
        Err(Rejection::Unreadable { cause, .. }) => Err(format!(
            "{UNSCOPED}, and no guardian receipt says the command never ran ({cause})"
        )),
        Err(e) => Err(format!(
            "{UNSCOPED}, and its receipt does not prove the command never ran ({e})"
        )),
    }
}

/// Why a registration without a scope has no tree to assess.
pub const UNSCOPED: &str =
    "no tree scope was recorded (its launch was cut short, or a power loss took its scope)";

/// Whether a guardian may still be writing the receipt at `path`: it exists, holds no complete
/// receipt yet, and was created within `within` (an older one belongs to a guardian that died).
pub fn receipt_pending(path: &Path, within: Duration) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let young = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .is_some_and(|age| age < within);
    let complete = crate::root::fsx::open_read(path)
        .and_then(|mut f| {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut bytes).map(|_| bytes)
        })
        .is_ok_and(|b| b.ends_with(b"\n") && !b.contains(&0));
    meta.is_file() && young && !complete
}

/// What the evidence of a recorded, unreleased tree says now, in words for `ps`: the reason it
/// is not (yet) released, read from the evidence rather than guessed from the record.
pub fn evidence_note(scope: &Scoped) -> String {
    match assess(scope, procfs::boot_id()) {
        Assessment::Exited(proof) => format!(
            "proven gone ({}); its release is recorded at the root's next assessment",
            proof_words(&proof)
        ),
        Assessment::GuardianAlive(_) => {
            "its guardian still runs and is ending the tree (its receipt comes at the end)".into()
        }
        Assessment::CgroupPopulated(_) => {
            "its guardian is gone and its cgroup still holds processes (a stop ends them)".into()
        }
        Assessment::Unverified(why) => why,
    }
}

fn proof_words(proof: &ExitProof) -> &'static str {
    match proof {
        ExitProof::Receipt { .. } => "a verified receipt",
        ExitProof::CgroupEmpty => "its cgroup is empty",
        ExitProof::BootChanged => "the machine rebooted",
    }
}

/// SIGTERM to a re-attached guardian through its pidfd, then a bounded wait for its exit.
pub fn end_guardian(pidfd: &std::os::fd::OwnedFd) -> Result<(), String> {
    use std::os::fd::AsFd;
    rustix::process::pidfd_send_signal(pidfd.as_fd(), rustix::process::Signal::TERM)
        .map_err(|e| format!("signalling its guardian: {e}"))?;
    let bound = crate::limits::ORPHANED_TREE_GRACE_MS
        + crate::limits::KILL_PROOF_MS
        + crate::limits::GUARDIAN_REAP_MS;
    let mut fds = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = u16::try_from(bound).unwrap_or(u16::MAX);
    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err(format!(
            "its guardian did not end its tree within {bound} ms"
        )),
        Err(e) => Err(format!("waiting for its guardian: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::event::TreeMechanism;
    use crate::lifecycle::{Handle, event::ReceiptBinding};

    fn witness_of(child: &std::process::Child) -> ProcessWitness {
        let pid = child.id();
        let fd = crate::tree::open_pidfd(pid).unwrap();
        ProcessWitness {
            pid,
            start_time_ticks: procfs::stat(pid).unwrap().start_time_ticks,
            pidfs_ino: pidfs_ino(&fd),
        }
    }

    /// PID reuse: a record whose pidfs inode, or (without pidfs) start time, does not match the
    /// process that now has its pid is never re-attached, so never watched nor signalled; the
    /// assessment says `unverified` and the process that has the pid is untouched.
    #[test]
    fn a_recorded_identity_that_does_not_match_is_never_reattached() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let real = witness_of(&child);
        assert!(reattach(&real).is_some());
        if real.pidfs_ino != 0 {
            let other_ino = ProcessWitness {
                pidfs_ino: real.pidfs_ino + 1,
                ..real
            };
            assert!(reattach(&other_ino).is_none());
        }
        let other_start = ProcessWitness {
            pidfs_ino: 0,
            start_time_ticks: real.start_time_ticks + 1,
            ..real
        };
        assert!(reattach(&other_start).is_none());
        let unknown_start = ProcessWitness {
            pidfs_ino: 0,
            start_time_ticks: 0,
            ..real
        };
        assert!(reattach(&unknown_start).is_none());

        let dir = tempfile::tempdir().unwrap();
        let scope = Scoped {
            handle: Handle(crate::journal::EventId::new_v7()),
            mechanism: TreeMechanism::Guardian,
            boot_id: procfs::boot_id().unwrap(),
            workload: other_start,
            guardian: Some(other_start),
            cgroup: None,
            receipt: Some(ReceiptBinding {
                path: dir.path().join("none.receipt").display().to_string(),
                dev: 0,
                ino: 0,
                nonce: [1; 16],
            }),
            at_unix_ms: 0,
        };
        match assess(&scope, procfs::boot_id()) {
            Assessment::Unverified(why) => assert!(why.contains("guardian is gone"), "{why}"),
            other => panic!("expected unverified, got {other:?}"),
        }
        // Another boot proves the record's lifetime over, whatever the pid now names.
        assert!(matches!(
            assess(&scope, Some([9; 16])),
            Assessment::Exited(ExitProof::BootChanged)
        ));
        // Untouched: still running (not a zombie, not stopped; `D`, a wait on the disk, is
        // what a loaded machine shows of a sleeper for a moment).
        let state = procfs::stat(real.pid).unwrap().state;
        assert!(matches!(state, b'S' | b'R' | b'D'), "{}", state as char);
        let _ = child.kill();
        let _ = child.wait();
    }
}
