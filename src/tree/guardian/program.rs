//! Which executable runs the guardian, and where the CLI finds its small one.
//!
//! Every image that runs [`super::run_if_requested`] first thing is a guardian: the host's own
//! executable, the `procjournal` binary, or `procjournal-guardian`, the binary that is nothing
//! else and so the smallest to keep per live process. The CLI and the daemon take
//! `procjournal-guardian` from their own executable's directory
//! ([`GuardianProgram::beside_current_exe`]), and else re-execute themselves.
//!
//! Invariant: a program found beside the executable is used only if no user but the one running
//! procjournal and root can change it or any directory on the way to it (the rule of
//! `root/secure.rs`, OpenSSH's `StrictModes`, applied to the file and to every directory above
//! it), and only while the running executable is still the file at its path. The guardian sees
//! each workload's environment and writes the receipt its exit is proven by: it must be no
//! easier to replace than the running executable, which `/proc/self/exe` names with no path
//! lookup at all. Because only those two users can change what the check saw, the program is
//! then looked up by path at each launch without a race another user could win.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::root::secure;

/// The file name of the small guardian, beside the `procjournal` binary.
const GUARDIAN_BIN: &str = "procjournal-guardian";

/// Which executable runs the guardian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardianProgram {
    /// This process's own executable (`/proc/self/exe`, which names it even after the file was
    /// replaced): the host's `main` must call [`super::run_if_requested`] first thing.
    CurrentExe,
    /// A `procjournal-guardian` (or `procjournal`) binary, or any executable whose `main` calls
    /// [`super::run_if_requested`] first thing.
    Path(PathBuf),
}

impl GuardianProgram {
    /// `procjournal-guardian` from the running executable's directory when it is there and
    /// safe (see the module's invariant), else [`GuardianProgram::CurrentExe`], which is
    /// always right and only larger: a `procjournal` copied alone, or run where its directory
    /// is shared, still supervises, at the old cost per process. Which one and why is logged
    /// once per process (`info` for the fallback, `debug` otherwise).
    pub fn beside_current_exe() -> GuardianProgram {
        static TOLD: std::sync::Once = std::sync::Once::new();
        match beside_current_exe() {
            Ok(path) => {
                TOLD.call_once(|| tracing::debug!(program = %path.display(), "guardian program"));
                GuardianProgram::Path(path)
            }
            Err(why) => {
                TOLD.call_once(|| {
                    tracing::info!(
                        "no usable {GUARDIAN_BIN} beside this executable ({why}); each launch \
                         re-executes this executable as its guardian instead (more memory per \
                         process)"
                    );
                });
                GuardianProgram::CurrentExe
            }
        }
    }
}

/// The checked path of [`GUARDIAN_BIN`] in the running executable's directory, or why not.
fn beside_current_exe() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the running executable: {e}"))?;
    // After an upgrade replaced the running executable, what lies beside it belongs to another
    // build, whose guardian need not speak this one's protocol.
    let running =
        std::fs::metadata("/proc/self/exe").map_err(|e| format!("/proc/self/exe: {e}"))?;
    let replaced = || format!("{} was replaced since it started", exe.display());
    let at_path = std::fs::metadata(&exe).map_err(|_| replaced())?;
    if (at_path.dev(), at_path.ino()) != (running.dev(), running.ino()) {
        return Err(replaced());
    }
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    let path = dir.join(GUARDIAN_BIN);
    check_program(&path)?;
    Ok(path)
}

/// Whether `path` (canonical: its directory is the kernel's name of the running executable's)
/// is a program nobody but us and root can change: a regular file, not a link, owned by one of
/// them, writable by neither group nor others, executable, below directories that pass the
/// root's check.
fn check_program(path: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let refuse = |why: String| Err(format!("{}: {why}", path.display()));
    if !meta.file_type().is_file() {
        return refuse("is not a regular file".to_owned());
    }
    let me = secure::euid();
    if meta.uid() != me && meta.uid() != 0 {
        return refuse(format!(
            "is owned by uid {}, neither {me} nor root",
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return refuse(format!(
            "is writable by its group or by others (mode {:04o})",
            mode & 0o7777
        ));
    }
    if mode & 0o111 == 0 {
        return refuse("is not executable".to_owned());
    }
    secure::check_ancestors(path).map_err(|u| u.to_string())
}
