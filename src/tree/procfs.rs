//! What /proc says about a process: its group and start time (its identity witness), and the boot.
//!
//! Every parser here is total: a process that vanished, or a line it cannot read, yields `None`,
//! never a panic (a pid's files disappear whenever it is reaped).

/// Who a pid named: the pid, its start time in clock ticks after boot, and the boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identity {
    pub pid: u32,
    pub start_time_ticks: u64,
    pub boot_id: [u8; 16],
}

/// The fields of /proc/PID/stat that identify a process and its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: u8,
    pub ppid: i64,
    pub pgrp: i64,
    pub start_time_ticks: u64,
}

/// Parses /proc/PID/stat. The command name (field 2) may hold spaces and parentheses, so fields
/// are counted after the last ')': state is field 3, pgrp field 5, starttime field 22.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let after_comm = text.get(text.rfind(')')? + 1..)?;
    let mut fields = after_comm.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let start_time_ticks = fields.nth(16)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        start_time_ticks,
    })
}

pub(crate) fn stat(pid: u32) -> Option<Stat> {
    use std::io::Read;
    // Room for a usual line at once (`fs::read_to_string` asks for the size, which /proc does
    // not know, then reads from 32 bytes up, a read per doubling); a longer one still grows.
    let mut text = String::with_capacity(STAT_BYTES);
    std::fs::File::open(format!("/proc/{pid}/stat"))
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    parse_stat(&text)
}

/// A /proc/PID/stat line is about 300 bytes; 52 fields of 20 digits and a 64-byte name at most.
const STAT_BYTES: usize = 1280;

/// /proc/sys/kernel/random/boot_id as 16 bytes, read once: it cannot change while this
/// process runs.
pub fn boot_id() -> Option<[u8; 16]> {
    static BOOT_ID: std::sync::OnceLock<Option<[u8; 16]>> = std::sync::OnceLock::new();
    *BOOT_ID.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        uuid::Uuid::parse_str(text.trim())
            .ok()
            .map(|u| *u.as_bytes())
    })
}

/// The identity of `pid` now; zeroes where /proc cannot say (the process is supervised either
/// way, and a zero witness never matches a live one).
pub fn identity(pid: u32) -> Identity {
    Identity {
        pid,
        start_time_ticks: stat(pid).map_or(0, |s| s.start_time_ticks),
        boot_id: boot_id().unwrap_or([0; 16]),
    }
}

/// Pids whose process group is `pgid`, zombies excluded (they hold nothing and take no signal).
pub(crate) fn group_members(pgid: u32) -> std::io::Result<Vec<(u32, Stat)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(s) = stat(pid)
            && s.pgrp == i64::from(pgid)
            && s.state != b'Z'
        {
            out.push((pid, s));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: b'S',
                ppid: 1,
                pgrp: 42,
                start_time_ticks: 12345
            })
        );
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("1 (x) S 1"), None);
        assert_eq!(parse_stat("1 (x"), None);
    }

    proptest::proptest! {
        /// The parser is total: any text (a process may vanish mid-read, a command name may
        /// hold anything) yields a value or `None`, never a panic; and a well-formed line with
        /// any command name parses to its fields.
        #[test]
        fn stat_parsing_is_total(text in ".{0,200}", comm in "[^\\x00]{0,40}", pgrp in 1i64..1_000_000, start in 0u64..u64::MAX / 2) {
            let _ = parse_stat(&text);
            let line = format!("7 ({comm}) S 1 {pgrp} {pgrp} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0");
            proptest::prop_assert_eq!(
                parse_stat(&line),
                Some(Stat { state: b'S', ppid: 1, pgrp, start_time_ticks: start })
            );
        }
    }

    #[test]
    fn the_identity_of_this_process_is_readable_and_stable() {
        let pid = std::process::id();
        let a = identity(pid);
        assert_ne!(a.start_time_ticks, 0);
        assert_ne!(a.boot_id, [0; 16]);
        assert_eq!(a, identity(pid));
    }
}
