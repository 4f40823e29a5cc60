//! The host's available memory: MemAvailable from /proc/meminfo, or the headroom of our own
//! memory cgroup (and of each ancestor up to its mount) where that is lower: a limit on our
//! cgroup (a container, a systemd slice) caps what our workloads can use whatever the machine
//! has free. cgroup v2 (`memory.max`, `memory.current`) and the v1 memory controller
//! (`memory.limit_in_bytes`, `memory.usage_in_bytes`) are both read.
//!
//! Invariant: every parser is total (any text gives a value or `None`); a file that cannot be
//! read leaves its bound out, and no readable bound at all gives `None` (no telemetry).

use std::path::{Component, Path, PathBuf};

/// MemAvailable in bytes from a /proc/meminfo text (`MemAvailable:  123456 kB`).
pub fn parse_meminfo_available(text: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let mut fields = rest.split_ascii_whitespace();
    let kib: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

/// A cgroup memory limit file's value: `max` (v2) or a value at or above 2^62 (v1's "no
/// limit" is `PAGE_COUNTER_MAX` pages in bytes, about 2^63) mean no limit (`Some(None)`).
pub fn parse_cgroup_limit(text: &str) -> Option<Option<u64>> {
    let t = text.trim();
    if t == "max" {
        return Some(None);
    }
    let v: u64 = t.parse().ok()?;
    Some((v < 1 << 62).then_some(v))
}

/// Where our memory cgroup lives: (directory, v2?) for each hierarchy that has one.
fn memory_cgroups(proc_cgroup: &str, mountinfo: &str) -> Vec<(PathBuf, PathBuf, bool)> {
    let mut out = Vec::new();
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let v2 = controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "memory") {
            continue;
        }
        if let Some((mount_point, dir)) = locate(mountinfo, path, v2) {
            out.push((mount_point, dir, v2));
        }
    }
    out
}

/// The directory of cgroup `path` under the first mount of its hierarchy whose root holds it:
/// (mount point, directory).
fn locate(mountinfo: &str, path: &str, v2: bool) -> Option<(PathBuf, PathBuf)> {
    fn plain(p: &Path) -> bool {
        p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    }
    let own = Path::new(path);
    if !plain(own) {
        return None;
    }
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let root = Path::new(fields.nth(3)?);
        let mount_point = Path::new(fields.next()?);
        fields.find(|f| *f == "-")?;
        let fstype = fields.next()?;
        let _source = fields.next()?;
        let options = fields.next().unwrap_or("");
        let ours = if v2 {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && options.split(',').any(|o| o == "memory")
        };
        if !ours || !plain(root) || !plain(mount_point) {
            return None;
        }
        let below = own.strip_prefix(root).ok()?;
        Some((mount_point.to_owned(), mount_point.join(below)))
    })
}

/// The headroom (limit minus usage) of `dir` and each ancestor up to `mount`, the smallest;
/// `None` when no level has a limit it could read.
fn headroom(mount: &Path, dir: &Path, v2: bool) -> Option<u64> {
    let (limit_file, usage_file) = if v2 {
        ("memory.max", "memory.current")
    } else {
        ("memory.limit_in_bytes", "memory.usage_in_bytes")
    };
    let read = |p: PathBuf| std::fs::read_to_string(p).ok();
    let mut least: Option<u64> = None;
    let mut at = Some(dir);
    while let Some(d) = at {
        if !d.starts_with(mount) {
            break;
        }
        let limit = read(d.join(limit_file))
            .and_then(|t| parse_cgroup_limit(&t))
            .flatten();
        let usage = read(d.join(usage_file)).and_then(|t| t.trim().parse::<u64>().ok());
        if let (Some(limit), Some(usage)) = (limit, usage) {
            let room = limit.saturating_sub(usage);
            least = Some(least.map_or(room, |l| l.min(room)));
        }
        if d == mount {
            break;
        }
        at = d.parent();
    }
    least
}

/// The memory available to our workloads now: MemAvailable, lowered to our memory cgroups'
/// headroom where that is less. `None` when MemAvailable cannot be read.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let mut available = parse_meminfo_available(&meminfo)?;
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for (mount, dir, v2) in memory_cgroups(&proc_cgroup, &mountinfo) {
        if let Some(room) = headroom(&mount, &dir, v2) {
            available = available.min(room);
        }
    }
    Some(available)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_available_is_read_in_bytes() {
        let text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   23757984 kB\n";
        assert_eq!(parse_meminfo_available(text), Some(23_757_984 * 1024));
        assert_eq!(parse_meminfo_available("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_available("MemAvailable: x kB\n"), None);
        assert_eq!(parse_meminfo_available("MemAvailable: 5 MB\n"), None);
    }

    #[test]
    fn cgroup_limits_max_and_v1_unlimited_read_as_none() {
        assert_eq!(parse_cgroup_limit("max\n"), Some(None));
        assert_eq!(parse_cgroup_limit("9223372036854771712\n"), Some(None));
        assert_eq!(parse_cgroup_limit("1073741824\n"), Some(Some(1 << 30)));
        assert_eq!(parse_cgroup_limit("-1"), None);
        assert_eq!(parse_cgroup_limit(""), None);
    }

    /// Both hierarchies are found, each under its own mount, a subtree mount's root stripped.
    #[test]
    fn memory_cgroups_are_located_in_v1_and_v2() {
        let proc_cgroup = "4:memory:/process_api/abc\n3:cpuset:/\n0::/user.slice/x\n";
        let mountinfo = "\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 /user.slice /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let found = memory_cgroups(proc_cgroup, mountinfo);
        assert_eq!(
            found,
            vec![
                (
                    PathBuf::from("/sys/fs/cgroup/memory"),
                    PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"),
                    false
                ),
                (
                    PathBuf::from("/sys/fs/cgroup/unified"),
                    PathBuf::from("/sys/fs/cgroup/unified/x"),
                    true
                ),
            ]
        );
        // A cgroup outside our namespace's view is not located.
        assert!(memory_cgroups("0::/../x\n", mountinfo).is_empty());
    }

    /// The smallest headroom of a cgroup and its ancestors up to the mount, from real files.
    #[test]
    fn headroom_is_the_least_of_every_level_with_a_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mount = dir.path().to_owned();
        let child = mount.join("a").join("b");
        std::fs::create_dir_all(&child).expect("mkdir");
        let write = |d: &Path, f: &str, v: &str| std::fs::write(d.join(f), v).expect("write");
        write(&mount, "memory.max", "max\n");
        write(&mount, "memory.current", "5\n");
        write(&mount.join("a"), "memory.max", "1000\n");
        write(&mount.join("a"), "memory.current", "300\n");
        write(&child, "memory.max", "900\n");
        write(&child, "memory.current", "100\n");
        assert_eq!(headroom(&mount, &child, true), Some(700));
        assert_eq!(headroom(&mount, &mount, true), None);
    }

    #[test]
    fn available_memory_is_readable_here() {
        let a = available_memory().expect("MemAvailable");
        assert!(a > 0);
    }

    proptest::proptest! {
        /// Total: any text gives a value or `None`, never a panic.
        #[test]
        fn the_parsers_are_total(text in "(?s).{0,300}", path in ".{0,40}") {
            let _ = parse_meminfo_available(&text);
            let _ = parse_cgroup_limit(&text);
            let _ = memory_cgroups(&text, &text);
            let _ = locate(&text, &path, true);
            let _ = locate(&text, &path, false);
        }

        /// A well-formed MemAvailable line reads back exactly.
        #[test]
        fn meminfo_round_trip(kib in 0u64..(1 << 40), before in "[A-Za-z]{1,10}") {
            let text = format!("{before}: 7 kB\nMemAvailable: {kib} kB\n");
            proptest::prop_assert_eq!(parse_meminfo_available(&text), Some(kib * 1024));
        }
    }
}
