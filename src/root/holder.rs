//! Who holds a root's writer lock, found without taking it.
//!
//! A reader (offline `ps`) must tell "no supervisor at all" from "a supervisor that serves no
//! socket" (`run`, `capture`, `mcp --standalone`), and must not take the lock to find out: even
//! a shared lock held for a moment makes a daemon starting at that moment fail. The kernel lists
//! every `flock` in `/proc/locks` (`N: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> 0 EOF`,
//! major and minor in hex, the inode in decimal); the holder is the line whose device and inode
//! are `LOCK`'s. Waiters (`N: -> FLOCK ...`) hold nothing and are skipped.
//!
//! Invariants: parsing is total (a line it cannot read is no holder, never a panic), and an
//! answer is a hint of the moment it was read: the holder may exit right after.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The pid holding `lock_file`'s exclusive flock, when `/proc/locks` names one.
pub(crate) fn lock_holder(lock_file: &Path) -> Option<u32> {
    let meta = std::fs::metadata(lock_file).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    holder_in(&locks, meta.dev(), meta.ino())
}

/// The pid of the exclusive flock on (`dev`, `ino`) in a `/proc/locks` text.
fn holder_in(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    locks.lines().find_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        let (kind, _, access, pid, file) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        if kind != "FLOCK" || access != "WRITE" {
            return None;
        }
        let mut parts = file.split(':');
        let maj = u64::from_str_radix(parts.next()?, 16).ok()?;
        let min = u64::from_str_radix(parts.next()?, 16).ok()?;
        let inode: u64 = parts.next()?.parse().ok()?;
        (maj == major && min == minor && inode == ino && parts.next().is_none())
            .then(|| pid.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_the_write_flock_on_the_same_device_and_inode() {
        let dev = nix::sys::stat::makedev(0xfe, 0);
        let text = "1: POSIX  ADVISORY  WRITE 7 fe:00:42 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 8 fe:00:42 0 EOF\n\
                    3: FLOCK  ADVISORY  READ 9 fe:00:42 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 10 fe:01:42 0 EOF\n\
                    5: FLOCK  ADVISORY  WRITE 11 fe:00:42 0 EOF\n";
        assert_eq!(holder_in(text, dev, 42), Some(11));
        assert_eq!(holder_in(text, dev, 43), None);
    }

    #[test]
    fn a_lock_this_process_holds_is_found_and_a_released_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let file = std::fs::File::create(&path).unwrap();
        assert_eq!(lock_holder(&path), None);
        file.try_lock().unwrap();
        assert_eq!(lock_holder(&path), Some(std::process::id()));
        file.unlock().unwrap();
        assert_eq!(lock_holder(&path), None);
    }

    proptest::proptest! {
        /// Any text is a pid it names or none, never a panic.
        #[test]
        fn any_text_is_read_without_panicking(text in ".{0,200}", dev: u64, ino: u64) {
            if let Some(pid) = holder_in(&text, dev, ino) {
                proptest::prop_assert!(text.contains(&pid.to_string()));
            }
        }
    }
}
