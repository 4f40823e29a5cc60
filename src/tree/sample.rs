//! Samples of whole trees, for admission (src/admission/): which processes a workload's tree
//! holds now, how much memory they use, and how much CPU time they have taken and waited for.
//!
//! A workload is its supervised root and every descendant, so the sample walks the tree the way
//! its mechanism sees it:
//! - a cgroup scope: every process in the scope and in the cgroups below it; the scope's
//!   `memory.current` is the tree's memory where the memory controller is enabled for it (it
//!   counts what RSS misses, page cache and kernel memory), else the members' RSS; its
//!   `cpu.stat` `usage_usec` is the tree's CPU time (it keeps what exited members used), else
//!   the members' utime+stime;
//! - a guardian without a cgroup: every descendant of the guardian (a child subreaper, so orphans
//!   stay in the walk), the guardian itself excluded;
//! - a process group: every member of the group started no earlier than its leader, and every
//!   descendant of those (a child that started a session of its own while its parent lives).
//!
//! Invariants:
//! - Every sample carries the monotonic time it was taken at, so that the policy turns two
//!   samples' CPU times into a rate. The time a member waited to run (the third field of its
//!   /proc/PID/schedstat, its main thread's) is summed apart from the CPU time, so that a tree
//!   that wants a core on a busy host is not seen as idle; where schedstat is missing it counts
//!   0 (the charge is then the usage alone).
//! - A sample is `complete` only if the membership could be listed and every member's memory and
//!   CPU time were read: a member that vanished between the listing and the read, an unreadable file, or a tree
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
    /// The membership was listed and every member's memory and CPU time read.
    pub complete: bool,
    /// The tree's CPU time so far in microseconds: the scope's `cpu.stat` `usage_usec`, or the
    /// sum of the members' utime+stime.
    pub cpu_usec: u64,
    /// The time the members waited on a run queue so far, in microseconds (their schedstat).
    pub wait_usec: u64,
    /// When the walk was taken: monotonic microseconds (from an epoch of this process's; only
    /// the difference between two samples means anything).
    pub at_usec: u64,
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

/// Clock ticks per second, the unit of utime and stime (100 if it cannot be read).
fn ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// Monotonic microseconds since this process first asked (only differences mean anything).
fn monotonic_usec() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// utime+stime (fields 14 and 15) of a /proc/PID/stat text, in clock ticks. Fields are counted
/// after the last ')', as the command name may hold spaces and parentheses.
pub(crate) fn parse_stat_cpu_ticks(text: &str) -> Option<u64> {
    let after_comm = text.get(text.rfind(')')? + 1..)?;
    let mut fields = after_comm.split_ascii_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime.saturating_add(stime))
}

/// The run-queue wait in nanoseconds of a /proc/PID/schedstat text (`on_cpu_ns wait_ns slices`).
pub(crate) fn parse_schedstat_wait_ns(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// `usage_usec` of a cgroup's `cpu.stat` text.
pub(crate) fn parse_cpu_stat_usage(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))?
        .trim()
        .parse()
        .ok()
}

/// One member's start time, CPU time (µs) and run-queue wait (µs), from its stat and schedstat.
fn member_cpu(pid: u32, tick_usec: u64) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let start = procfs::parse_stat(&text)?.start_time_ticks;
    let cpu = parse_stat_cpu_ticks(&text)?.saturating_mul(tick_usec);
    let wait = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|t| parse_schedstat_wait_ns(&t))
        .map_or(0, |ns| ns / 1000);
    Some((start, cpu, wait))
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
    let memberships: Vec<(Handle, Membership)> =
        trees.iter().map(|(h, t)| (*h, t.membership())).collect();
    sample_memberships(&memberships)
}

/// One sample of each membership, as [`sample_trees`] takes of a tree's: for trees no live
/// [`ProcessTree`] stands for any more (one held unverified after its guardian died), sampled by
/// what can still be observed of them.
pub fn sample_memberships(trees: &[(Handle, Membership)]) -> Vec<(Handle, TreeSample)> {
    let page = page_bytes();
    let tick_usec = 1_000_000 / ticks_per_second().min(1_000_000);
    let rows = trees
        .iter()
        .any(|(_, m)| matches!(m, Membership::Group { .. }))
        .then(scan)
        .flatten();
    trees
        .iter()
        .map(|(handle, membership)| {
            (
                *handle,
                sample_one(membership, rows.as_ref(), page, tick_usec),
            )
        })
        .collect()
}

fn sample_one(
    membership: &Membership,
    rows: Option<&HashMap<u32, Row>>,
    page: u64,
    tick_usec: u64,
) -> TreeSample {
    let at_usec = monotonic_usec();
    let unknown = TreeSample {
        at_usec,
        ..TreeSample::default()
    };
    let (pids, scope) = match membership {
        Membership::Empty => {
            return TreeSample {
                complete: true,
                ..unknown
            };
        }
        Membership::Unknown => return unknown,
        Membership::Group { pgid, since } => match rows {
            Some(rows) => (group_members(rows, *pgid, *since), None),
            None => return unknown,
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
                return unknown;
            }
            (pids, Some(scope))
        }
    };
    let mut complete = true;
    let mut members = Vec::with_capacity(pids.len());
    let (mut rss, mut cpu, mut wait) = (0u64, 0u64, 0u64);
    for pid in pids {
        match (member_cpu(pid, tick_usec), rss_bytes(pid, page)) {
            (Some((start, used, waited)), Some(bytes)) => {
                members.push((pid, start));
                rss = rss.saturating_add(bytes);
                cpu = cpu.saturating_add(used);
                wait = wait.saturating_add(waited);
            }
            // Vanished or unreadable: the sample cannot vouch for the tree's memory or CPU.
            _ => complete = false,
        }
    }
    members.sort_unstable();
    let read = |file: &str| scope.and_then(|s| std::fs::read_to_string(s.join(file)).ok());
    let current = read("memory.current").and_then(|t| t.trim().parse::<u64>().ok());
    let usage = read("cpu.stat").and_then(|t| parse_cpu_stat_usage(&t));
    TreeSample {
        members,
        bytes: current.unwrap_or(rss),
        complete,
        cpu_usec: usage.unwrap_or(cpu),
        wait_usec: wait,
        at_usec,
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

    #[test]
    fn cpu_fields_are_read_where_the_kernel_puts_them() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime ...
        let stat = "42 (a) b) c) S 1 42 42 0 -1 4194560 10 0 0 0 7 5 0 0 20 0 1 0 123 0 0";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(12));
        assert_eq!(parse_stat_cpu_ticks("42 (x) S 1 2"), None);
        assert_eq!(parse_schedstat_wait_ns("1000 2500 3\n"), Some(2500));
        assert_eq!(parse_schedstat_wait_ns("1000"), None);
        let cpu_stat = "usage_usec 8123\nuser_usec 8000\nsystem_usec 123\n";
        assert_eq!(parse_cpu_stat_usage(cpu_stat), Some(8123));
        assert_eq!(parse_cpu_stat_usage("user_usec 1\n"), None);
    }

    proptest::proptest! {
        /// Total: any text gives a value or `None`.
        #[test]
        fn statm_parsing_is_total(text in ".{0,120}") {
            let _ = parse_statm_resident(&text);
            let _ = parse_stat_cpu_ticks(&text);
            let _ = parse_schedstat_wait_ns(&text);
            let _ = parse_cpu_stat_usage(&text);
        }
    }

    /// A real busy loop's tree takes CPU time from one walk to the next (it is charged for what
    /// it uses); a real `sleep`'s takes none.
    #[test]
    fn a_busy_tree_takes_cpu_time_and_a_sleeping_one_does_not() {
        use std::os::unix::process::CommandExt;
        let spawn = |script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .process_group(0)
                .spawn()
                .expect("spawn")
        };
        let walk = |child: &std::process::Child| {
            let pid = child.id();
            let since = procfs::stat(pid).expect("stat").start_time_ticks;
            let rows = scan().expect("scan");
            sample_one(
                &Membership::Group { pgid: pid, since },
                Some(&rows),
                page_bytes(),
                1_000_000 / ticks_per_second(),
            )
        };
        let mut busy = spawn("while :; do :; done");
        let mut idle = spawn("exec sleep 60");
        // Walked once it is `sleep`: the shell's start and its exec take CPU time.
        let comm = format!("/proc/{}/comm", idle.id());
        for _ in 0..2000 {
            if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (busy0, idle0) = (walk(&busy), walk(&idle));
        // Bounded by the number of walks, not by time: the loop takes a tick within a few.
        let mut grew = false;
        for _ in 0..2000 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            let b = walk(&busy);
            assert!(b.complete && b.members == busy0.members, "{b:?}");
            assert!(b.at_usec >= busy0.at_usec);
            if b.cpu_usec + b.wait_usec > busy0.cpu_usec + busy0.wait_usec {
                grew = true;
                break;
            }
        }
        let idle1 = walk(&idle);
        let _ = busy.kill();
        let _ = idle.kill();
        let _ = busy.wait();
        let _ = idle.wait();
        assert!(grew, "the busy loop's CPU time never grew: {busy0:?}");
        assert!(
            idle1.complete && idle1.members == idle0.members,
            "{idle1:?}"
        );
        assert_eq!(idle1.cpu_usec, idle0.cpu_usec, "a sleep uses no CPU");
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
        let sample = sample_one(
            &Membership::Group { pgid, since: 0 },
            Some(&rows),
            page,
            10_000,
        );
        assert!(sample.bytes > 0);
        assert!(sample.members.iter().any(|(pid, _)| *pid == me));
    }
}
