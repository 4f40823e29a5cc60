//! Test failpoints of the guardian: places where a loaded machine can hold a guardian for as
//! long as it likes, made to hold it for as long as a test likes, so that the supervisor's
//! judgement in that window is tested deterministically instead of by load and luck.
//!
//! Invariant: a failpoint exists only in a build with the `failpoints` feature, which only the
//! crate's own tests turn on (through their dev-dependency on the crate itself); in any other
//! build the functions here are empty and no variable is read, so a production guardian cannot
//! trip one by an inherited environment. Within a test build a failpoint is tripped only by its
//! variable in the guardian's environment (the workload's, as launched), so it holds only the
//! launches a test asked it to.
//!
//! A tripped failpoint names a directory: the guardian writes `reached` there (its pid) and
//! waits until `release` appears, at most [`crate::limits::FAILPOINT_HOLD_MAX_MS`]. One is no
//! pause: [`PANIC_AT_START`], set to anything, makes the guardian panic, as a bug in it would.

/// Holds the guardian after its last reap (ECHILD, the scope empty) and before it removes its
/// cgroup, writes its receipt and reports `DONE`: the window in which the supervisor sees a
/// tree with no member left but its guardian, and no proof yet.
pub const BEFORE_RECEIPT: &str = "PROCJOURNAL_FAILPOINT_BEFORE_RECEIPT";

/// Holds the guardian after it reported `DONE` (its receipt written) and before it exits: the
/// window in which the supervisor has its proof and the guardian is still its unreaped child.
pub const AFTER_DONE: &str = "PROCJOURNAL_FAILPOINT_AFTER_DONE";

/// The failpoint variables a guardian was launched with, read once as it starts and kept on
/// its stack, never in a static: a static would make a page of the small image's statics this
/// guardian's own, which a shipped guardian's never is (the memory bench measures a test
/// build). Only the failpoints' own variables are kept, so that a test build's guardian holds
/// no copy of the whole environment that a shipped one would not; a launch that sets none
/// keeps nothing at all. Without the `failpoints` feature it holds nothing and reads nothing.
#[derive(Debug, Default)]
pub(super) struct Launch {
    #[cfg(feature = "failpoints")]
    vars: Vec<std::ffi::CString>,
}

impl Launch {
    /// An exec'd guardian's: its own initial environment, read from `/proc/self/environ`
    /// rather than through `std::env`, whose lock lives among the image's statics (the
    /// guardian never changes its environment, so the initial one is the one `std::env`
    /// would read).
    pub(super) fn own() -> Launch {
        #[cfg(feature = "failpoints")]
        {
            let environ = std::fs::read("/proc/self/environ").unwrap_or_default();
            Launch::of(environ.split(|&b| b == 0))
        }
        #[cfg(not(feature = "failpoints"))]
        Launch::default()
    }

    /// A guardian forked by the zygote: the launch's environment `envp` (its process has the
    /// zygote's, which is only the allocator's setting and sets no failpoint).
    pub(super) fn forked<'a>(envp: impl Iterator<Item = &'a std::ffi::CStr>) -> Launch {
        #[cfg(feature = "failpoints")]
        {
            Launch::of(envp.map(std::ffi::CStr::to_bytes))
        }
        #[cfg(not(feature = "failpoints"))]
        {
            let _ = envp;
            Launch::default()
        }
    }

    /// Keeps the failpoints' entries of `envp`, copying no other: a copy freed again would
    /// leave its bytes on the allocator's pages (a forked guardian must keep no copy of its
    /// workload's environment).
    #[cfg(feature = "failpoints")]
    fn of<'a>(envp: impl Iterator<Item = &'a [u8]>) -> Launch {
        let vars = envp
            .filter(|e| e.starts_with(b"PROCJOURNAL_FAILPOINT_"))
            .filter_map(|e| std::ffi::CString::new(e).ok())
            .collect();
        Launch { vars }
    }

    /// The value of `name` in the launch environment.
    #[cfg(feature = "failpoints")]
    fn var(&self, name: &str) -> Option<std::ffi::OsString> {
        self.vars
            .iter()
            .find_map(|entry| value_in(entry.to_bytes(), name))
    }

    /// Stops at `name` if this build has failpoints and the launch names a directory for it.
    #[cfg(feature = "failpoints")]
    pub(super) fn hold(&self, name: &str) {
        use std::time::{Duration, Instant};
        let Some(dir) = self.var(name).map(std::path::PathBuf::from) else {
            return;
        };
        if std::fs::write(dir.join("reached"), std::process::id().to_string()).is_err() {
            return;
        }
        let bound = Instant::now() + Duration::from_millis(crate::limits::FAILPOINT_HOLD_MAX_MS);
        while !dir.join("release").exists() && Instant::now() < bound {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Without the `failpoints` feature there is nothing to stop at.
    #[cfg(not(feature = "failpoints"))]
    pub(super) fn hold(&self, _name: &str) {}

    /// Panics at `name` if this build has failpoints and the launch sets it.
    #[cfg(feature = "failpoints")]
    pub(super) fn panic_if(&self, name: &str) {
        if self.var(name).is_some() {
            panic!("guardian failpoint {name}");
        }
    }

    /// Without the `failpoints` feature nothing panics on request.
    #[cfg(not(feature = "failpoints"))]
    pub(super) fn panic_if(&self, _name: &str) {}

    /// Exits the process (the zygote) if this build has failpoints and the launch sets `name`.
    #[cfg(feature = "failpoints")]
    pub(super) fn exit_if(&self, name: &str) {
        if self.var(name).is_some() {
            std::process::exit(3);
        }
    }

    /// Without the `failpoints` feature the zygote always answers.
    #[cfg(not(feature = "failpoints"))]
    pub(super) fn exit_if(&self, _name: &str) {}
}

/// The value of `entry` (`NAME=value`) when its name is `name`.
#[cfg(feature = "failpoints")]
fn value_in(entry: &[u8], name: &str) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
    Some(std::ffi::OsStr::from_bytes(value).to_owned())
}

/// Panics as the guardian starts, right after its panic hook is set (`run.rs`): the test that a
/// guardian's panic aborts it, whatever the image and its profile.
pub const PANIC_AT_START: &str = "PROCJOURNAL_FAILPOINT_GUARDIAN_PANIC";

/// Makes the guardian zygote exit right after it forked a guardian, before it answers: the
/// supervisor must find and adopt that guardian. Read from the launch's environment (the
/// request), set to anything.
pub const ZYGOTE_SILENT: &str = "PROCJOURNAL_FAILPOINT_ZYGOTE_SILENT";
