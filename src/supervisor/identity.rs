//! Identity witnesses: what proves which process a pid named (start time since boot, and the boot).
//!
//! Read from /proc; a witness that cannot be read is recorded as zeroes rather than failing the
//! start, because the process is already running and must be supervised either way.

use crate::lifecycle::event::IdentityWitness;

/// Field 22 of /proc/PID/stat: start time in clock ticks after boot. The command name (field 2)
/// may contain spaces and parentheses, so fields are counted after the last ')'.
fn start_time_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // after_comm starts at field 3 (state); starttime is field 22 => index 19 here.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// /proc/sys/kernel/random/boot_id as 16 bytes.
pub(crate) fn boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    uuid::Uuid::parse_str(text.trim())
        .ok()
        .map(|u| *u.as_bytes())
}

pub(crate) fn witness(pid: u32) -> IdentityWitness {
    IdentityWitness {
        start_time_ticks: start_time_ticks(pid).unwrap_or(0),
        boot_id: boot_id().unwrap_or([0; 16]),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_witness_of_this_process_is_readable_and_stable() {
        let pid = std::process::id();
        let a = super::witness(pid);
        let b = super::witness(pid);
        assert_ne!(a.start_time_ticks, 0);
        assert_ne!(a.boot_id, [0; 16]);
        assert_eq!(a, b);
    }
}
