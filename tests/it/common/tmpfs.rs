//! A small tmpfs mounted for one test: a real file system that fills up. The tests run as
//! root; where mounting is not allowed, [`SmallTmpfs::mount`] prints why and the test passes
//! without running.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size mounted on a temporary directory, unmounted when dropped.
pub struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    /// `None`, with the reason printed, where this process may not mount one.
    pub fn mount(size: &str) -> Option<SmallTmpfs> {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(out) if out.status.success() => Some(SmallTmpfs { dir }),
            Ok(out) => {
                eprintln!(
                    "SKIPPED: cannot mount a {size} tmpfs ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the tmpfs to its last block with one file, whose path it returns.
    pub fn fill(&self) -> PathBuf {
        let fill = self.path().join("fill");
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=4k"])
            .arg(format!("of={}", fill.display()))
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run dd");
        let free = nix::sys::statvfs::statvfs(self.path())
            .expect("statvfs")
            .blocks_available();
        assert_eq!(free, 0, "the tmpfs is full");
        fill
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        // Lazily: a process a failed test left behind may still hold a file there.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
