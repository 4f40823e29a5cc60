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

/// The failpoint variables of the environment a guardian forked by the zygote was launched
/// with (its process has the zygote's): failpoints read them instead of the process's.
#[cfg(feature = "failpoints")]
static LAUNCH_ENV: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();

/// Failpoints read `envp` from now on: a forked guardian's launch environment. Only the
/// failpoints' own variables are kept, so that a test build's guardian holds no copy of the
/// whole environment that a shipped one would not (the memory bench measures a test build);
/// and a launch that sets none keeps nothing at all, so that its guardian writes no page of
/// its image a shipped one would not (the zygote's own environment, which failpoints then
/// read, is only the allocator's setting: it sets none either).
#[cfg(feature = "failpoints")]
pub(super) fn use_environment<'a>(envp: impl Iterator<Item = &'a std::ffi::CStr>) {
    let ours: Vec<_> = envp
        .filter(|e| e.to_bytes().starts_with(b"PROCJOURNAL_FAILPOINT_"))
        .map(std::ffi::CStr::to_owned)
        .collect();
    if !ours.is_empty() {
        let _ = LAUNCH_ENV.set(ours);
    }
}

#[cfg(not(feature = "failpoints"))]
pub(super) fn use_environment<'a>(_envp: impl Iterator<Item = &'a std::ffi::CStr>) {}

/// The value of `name` in the launch environment.
#[cfg(feature = "failpoints")]
fn var(name: &str) -> Option<std::ffi::OsString> {
    match LAUNCH_ENV.get() {
        Some(envp) => envp
            .iter()
            .find_map(|entry| value_in(entry.to_bytes(), name)),
        None => initial_var(name),
    }
}

/// The value of `name` in this process's initial environment, read from `/proc/self/environ`
/// rather than through `std::env`: std's environment lock lives among the image's statics, and
/// taking it would make that page this guardian's own, which a shipped guardian's never is
/// (the memory bench measures a test build). The guardian never changes its environment, so
/// the initial one is the one `std::env` would read.
#[cfg(feature = "failpoints")]
fn initial_var(name: &str) -> Option<std::ffi::OsString> {
    let environ = std::fs::read("/proc/self/environ").ok()?;
    environ
        .split(|&b| b == 0)
        .find_map(|entry| value_in(entry, name))
}

/// The value of `entry` (`NAME=value`) when its name is `name`.
#[cfg(feature = "failpoints")]
fn value_in(entry: &[u8], name: &str) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
    Some(std::ffi::OsStr::from_bytes(value).to_owned())
}

/// Stops at `name` if this build has failpoints and the environment names a directory for it.
#[cfg(feature = "failpoints")]
pub(super) fn hold(name: &str) {
    use std::time::{Duration, Instant};
    let Some(dir) = var(name).map(std::path::PathBuf::from) else {
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
pub(super) fn hold(_name: &str) {}

/// Panics as the guardian starts, right after its panic hook is set (`run.rs`): the test that a
/// guardian's panic aborts it, whatever the image and its profile.
pub const PANIC_AT_START: &str = "PROCJOURNAL_FAILPOINT_GUARDIAN_PANIC";

/// Panics at `name` if this build has failpoints and the environment sets it.
#[cfg(feature = "failpoints")]
pub(super) fn panic_if(name: &str) {
    if var(name).is_some() {
        panic!("guardian failpoint {name}");
    }
}

/// Without the `failpoints` feature nothing panics on request.
#[cfg(not(feature = "failpoints"))]
pub(super) fn panic_if(_name: &str) {}

/// Makes the guardian zygote exit right after it forked a guardian, before it answers: the
/// supervisor must find and adopt that guardian. Read from the launch's environment (the
/// request), set to anything.
pub const ZYGOTE_SILENT: &str = "PROCJOURNAL_FAILPOINT_ZYGOTE_SILENT";

/// Exits the process (the zygote) if this build has failpoints and `envp` sets `name`.
#[cfg(feature = "failpoints")]
pub(super) fn exit_if_requested<'a>(
    name: &str,
    mut envp: impl Iterator<Item = &'a std::ffi::CStr>,
) {
    let prefix = [name.as_bytes(), b"="].concat();
    if envp.any(|e| e.to_bytes().starts_with(&prefix)) {
        std::process::exit(3);
    }
}

/// Without the `failpoints` feature the zygote always answers.
#[cfg(not(feature = "failpoints"))]
pub(super) fn exit_if_requested<'a>(_name: &str, _envp: impl Iterator<Item = &'a std::ffi::CStr>) {}
