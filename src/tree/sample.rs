//! Memory samples of whole trees, for admission (src/admission/): which processes a workload's
//! tree holds now and how much memory they use.
//!
//! A workload is its supervised root and every descendant, so the sample walks the tree the way
//! its mechanism sees it:
//! - a cgroup scope: every process in the scope and in the cgroups below it; the scope's
//!   `memory.current` is the tree's memory where the memory controller is enabled for it (it
//!   counts what RSS misses, page cache and kernel memory), else the members' RSS;
//! - a guardian without a cgroup: every descendant of the guardian (a child subreaper, so orphans
//!   stay in the walk), the guardian itself excluded;
//! - a process group: every member of the group started no earlier than its leader, and every
//!   descendant of those (a child that started a session of its own while its parent lives).
//!
//! Invariants:
//! - A sample is `complete` only if the membership could be listed and every member's memory was
//!   read: a member that vanished between the listing and the read, an unreadable file, or a tree
//!   whose mechanism can no longer list it (a guardian that was reaped without a scope) makes it
//!   incomplete. Stability (the same membership in two consecutive samples) is the admission
//!   policy's to judge, from the sorted member list a sample carries.
//! - Sampling only reads /proc and cgroupfs: it never signals, never waits, and runs on the
//!   blocking pool (it lists directories).
//! - The parsers are total: any text yields a value or `None`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{ProcessTree, procfs};
use crate::lifecycle::Handle;

/// How a tree's members are found now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// Members of process group `pgid` that started no earlier than `since` (the leader's start
    /// time, so a reused group number's processes are not counted), and their descendants.
    Group { pgid: u32, since: u64 },
    /// Every descendant of `root` (a child subreaper), `root` itself excluded.
    Descendants { root: u32 },
    /// Every process in the cgroup `scope` and below it.
    Cgroup { scope: PathBuf },
    /// The tree is proven empty.
    Empty,
    /// The mechanism can no longer list the tree: any sample of it is incomplete.
    Unknown,
}

/// One walk of one tree.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct TreeSample {
    /// The members, as (pid, start time in ticks), sorted: two samples with equal lists saw the
    /// same processes (a reused pid has another start time).
    pub members: Vec<(u32, u64)>,
    /// The tree's memory: the scope's `memory.current`, or the sum of the members' RSS.
    pub bytes: u64,
    /// The membership was listed and every member's memory read.
    pub complete: bool,
}

/// A process as one scan of /proc saw it.
#[derive(Debug, Clone, Copy)]
struct Row {
    ppid: u32,
    pgrp: i64,
    start: u64,
}

/// Every live (non-zombie) process now, by pid; `None` when /proc cannot be listed.
fn scan() -> Option<HashMap<u32, Row>> {
    let mut rows = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(s) = procfs::stat(pid)
            && s.state != b'Z'
        {
            rows.insert(
                pid,
                Row {
                    ppid: u32::try_from(s.ppid).unwrap_or(0),
                    pgrp: s.pgrp,
                    start: s.start_time_ticks,
                },
            );
        }
    }
    Some(rows)
}

/// The page size statm counts in (4096 if it cannot be read).
fn page_bytes() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| u64::try_from(p).ok())
        .unwrap_or(4096)
}

/// The resident set of `pid` in bytes from /proc/PID/statm (its second field, in pages).
fn rss_bytes(pid: u32, page: u64) -> Option<u64> {
    parse_statm_resident(&std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?)
        .map(|pages| pages.saturating_mul(page))
}

/// The resident pages of a /proc/PID/statm text (`size resident shared text lib data dt`).
pub(crate) fn parse_statm_resident(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Pids in `dir`'s `cgroup.procs` and in every cgroup below it; `None` if any listing failed.
fn cgroup_pids(dir: &Path, out: &mut Vec<u32>) -> Option<()> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    for line in text.lines() {
        out.push(line.trim().parse().ok()?);
    }
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        if entry.file_type().ok()?.is_dir() {
            cgroup_pids(&entry.path(), out)?;
        }
    }
    Some(())
}

/// The members of a group and their descendants, from one scan.
fn group_members(rows: &HashMap<u32, Row>, pgid: u32, since: u64) -> Vec<u32> {
    let mut members: HashSet<u32> = rows
        .iter()
        .filter(|(_, r)| r.pgrp == i64::from(pgid) && r.start >= since)
        .map(|(pid, _)| *pid)
        .collect();
    // Descendants of members by parent pid, to a fixed point (a chain of sessions is short).
    loop {
        let more: Vec<u32> = rows
            .iter()
            .filter(|(pid, r)| !members.contains(pid) && members.contains(&r.ppid))
            .map(|(pid, _)| *pid)
            .collect();
        if more.is_empty() {
            break;
        }
        members.extend(more);
    }
    members.into_iter().collect()
}

/// Samples every tree in `trees`: one scan of /proc serves every process group among them.
pub fn sample_trees(trees: &[(Handle, Arc<dyn ProcessTree>)]) -> Vec<(Handle, TreeSample)> {
    let page = page_bytes();
    let memberships: Vec<Membership> = trees.iter().map(|(_, t)| t.membership()).collect();
    let rows = memberships
        .iter()
        .any(|m| matches!(m, Membership::Group { .. }))
        .then(scan)
        .flatten();
    trees
        .iter()
        .zip(memberships)
        .map(|((handle, _), membership)| (*handle, sample_one(&membership, rows.as_ref(), page)))
        .collect()
}

fn sample_one(membership: &Membership, rows: Option<&HashMap<u32, Row>>, page: u64) -> TreeSample {
    let (pids, scope) = match membership {
        Membership::Empty => {
            return TreeSample {
                members: Vec::new(),
                bytes: 0,
                complete: true,
            };
        }
        Membership::Unknown => return TreeSample::default(),
        Membership::Group { pgid, since } => match rows {
            Some(rows) => (group_members(rows, *pgid, *since), None),
            None => return TreeSample::default(),
        },
        Membership::Descendants { root } => (
            super::guardian::descendants_of(*root)
                .into_iter()
                .map(|(pid, _)| pid)
                .collect(),
            None,
        ),
        Membership::Cgroup { scope } => {
            let mut pids = Vec::new();
            if cgroup_pids(scope, &mut pids).is_none() {
                return TreeSample::default();
            }
            (pids, Some(scope))
        }
    };
    let mut complete = true;
    let mut members = Vec::with_capacity(pids.len());
    let mut rss = 0u64;
    for pid in pids {
        let start = match rows.and_then(|r| r.get(&pid)) {
            Some(row) => Some(row.start),
            None => procfs::stat(pid).map(|s| s.start_time_ticks),
        };
        match (start, rss_bytes(pid, page)) {
            (Some(start), Some(bytes)) => {
                members.push((pid, start));
                rss = rss.saturating_add(bytes);
            }
            // Vanished or unreadable: the sample cannot vouch for the tree's memory.
            _ => complete = false,
        }
    }
    members.sort_unstable();
    let current = scope.and_then(|s| {
        std::fs::read_to_string(s.join("memory.current"))
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    TreeSample {
        members,
        bytes: current.unwrap_or(rss),
        complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_resident_is_the_second_field() {
        assert_eq!(parse_statm_resident("100 25 3 1 0 40 0\n"), Some(25));
        assert_eq!(parse_statm_resident("100"), None);
        assert_eq!(parse_statm_resident(""), None);
        assert_eq!(parse_statm_resident("1 x"), None);
    }

    proptest::proptest! {
        /// Total: any text gives a value or `None`.
        #[test]
        fn statm_parsing_is_total(text in ".{0,120}") {
            let _ = parse_statm_resident(&text);
        }
    }

    /// This process's own RSS is readable and not zero, and a group walk from a real scan
    /// finds this process in its own group.
    #[test]
    fn a_scan_finds_this_process_with_its_memory() {
        let me = std::process::id();
        let page = page_bytes();
        assert!(rss_bytes(me, page).is_some_and(|b| b > 0));
        let rows = scan().expect("scan /proc");
        let row = rows.get(&me).expect("this process in the scan");
        let pgid = u32::try_from(row.pgrp).expect("pgrp");
        let members = group_members(&rows, pgid, 0);
        assert!(members.contains(&me), "{members:?}");
        let sample = sample_one(&Membership::Group { pgid, since: 0 }, Some(&rows), page);
        assert!(sample.bytes > 0);
        assert!(sample.members.iter().any(|(pid, _)| *pid == me));
    }
}
