//! The environment a login shell sets up, captured for the PATH-like overlay
//! (`crate::environment`): `$SHELL -l -c` printing a marker and then the environment
//! NUL-separated (`env -0`), bounded in time ([`limits::LOGIN_SHELL_CAPTURE_MS`]) and size
//! ([`limits::LOGIN_SHELL_OUTPUT_BYTES_MAX`]).
//!
//! Invariants: blocking (run on the blocking pool, once per supervisor); the shell runs in its own
//! process group with stdin from /dev/null and stderr discarded; past the deadline or the size
//! bound the group is killed (while its leader is our unreaped child, so the group number
//! cannot have been reused) and reaped, and the capture fails with a typed error: nothing here
//! waits without a bound. What a profile prints before the marker is ignored.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::limits;

/// Printed before the environment, so that a profile's own output is told apart from it.
const MARKER: &[u8] = b"\0procjournal-login-env\0";
/// The command the shell runs: the marker (`\0` is an octal escape of POSIX printf), then the
/// environment, NUL-separated.
const SCRIPT: &str = r"printf '\0procjournal-login-env\0' && exec env -0";

/// Why no environment was captured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoginShellError {
    #[error("cannot run the login shell {shell}: {cause}")]
    Spawn {
        shell: PathBuf,
        cause: std::io::Error,
    },
    #[error("the login shell did not finish within {0} ms")]
    Timeout(u64),
    #[error("the login shell printed more than {0} bytes")]
    TooLarge(usize),
    #[error("reading the login shell's output: {0}")]
    Read(std::io::Error),
    #[error("the login shell exited with {0}")]
    Failed(std::process::ExitStatus),
    #[error("the login shell printed no environment (is `env -0` available?)")]
    NoEnvironment,
}

/// The shell to capture from: `$SHELL`, or `/bin/sh` without one.
pub fn default_shell() -> PathBuf {
    std::env::var_os("SHELL")
        .filter(|s| !s.is_empty())
        .map_or_else(|| PathBuf::from("/bin/sh"), PathBuf::from)
}

/// Runs `shell -l -c SCRIPT` and returns the variables it printed (entries that are not UTF-8
/// or have no `=` are skipped: the overlay takes only a few ASCII names).
pub fn capture(shell: &Path) -> Result<Vec<(String, String)>, LoginShellError> {
    capture_bounded(
        shell,
        Duration::from_millis(limits::LOGIN_SHELL_CAPTURE_MS),
        limits::LOGIN_SHELL_OUTPUT_BYTES_MAX,
    )
}

fn capture_bounded(
    shell: &Path,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Vec<(String, String)>, LoginShellError> {
    let deadline = Instant::now() + timeout;
    let mut child = std::process::Command::new(shell)
        .args(["-l", "-c", SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|cause| LoginShellError::Spawn {
            shell: shell.to_owned(),
            cause,
        })?;
    let result = read_until(&mut child, deadline, timeout, max_bytes);
    let exited = result.is_ok() && exits_by(&child, deadline);
    // Whatever is left of the group goes (a profile may have started something that holds the
    // pipe), while the leader is unreaped and so still pins the group number; then the leader is
    // reaped (it has exited, or was just killed).
    let _ = rustix::process::kill_process_group(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::KILL,
    );
    let status = child.wait();
    let output = result?;
    if !exited {
        return Err(LoginShellError::Timeout(timeout.as_millis() as u64));
    }
    let status = status.map_err(LoginShellError::Read)?;
    if !status.success() {
        return Err(LoginShellError::Failed(status));
    }
    parse(&output).ok_or(LoginShellError::NoEnvironment)
}

/// Reads the child's stdout until end of file, the deadline or `max_bytes`.
fn read_until(
    child: &mut std::process::Child,
    deadline: Instant,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Vec<u8>, LoginShellError> {
    let Some(stdout) = child.stdout.as_mut() else {
        return Err(LoginShellError::NoEnvironment);
    };
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !readable(stdout.as_fd(), left) {
            return Err(LoginShellError::Timeout(timeout.as_millis() as u64));
        }
        match stdout.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => {
                if out.len() + n > max_bytes {
                    return Err(LoginShellError::TooLarge(max_bytes));
                }
                out.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LoginShellError::Read(e)),
        }
    }
}

/// Whether `fd` has something to read (or its end) within `left`.
fn readable(fd: std::os::fd::BorrowedFd<'_>, left: Duration) -> bool {
    let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
    let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
    matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)), Ok(n) if n > 0)
}

/// Whether the child exits before the deadline (watched through a pidfd, which becomes readable
/// when it exits; it is not reaped here, so its group number stays pinned).
fn exits_by(child: &std::process::Child, deadline: Instant) -> bool {
    let Ok(pidfd) = super::open_pidfd(child.id()) else {
        return false;
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        if readable(pidfd.as_fd(), left) {
            return true;
        }
    }
}

/// The variables after the marker: `NAME=value` entries, NUL-separated.
fn parse(output: &[u8]) -> Option<Vec<(String, String)>> {
    let at = output.windows(MARKER.len()).position(|w| w == MARKER)?;
    let env = &output[at + MARKER.len()..];
    Some(
        env.split(|b| *b == 0)
            .filter_map(|entry| {
                let text = std::str::from_utf8(entry).ok()?;
                let (k, v) = text.split_once('=')?;
                (!k.is_empty()).then(|| (k.to_owned(), v.to_owned()))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_skips_a_profiles_chatter_and_odd_entries() {
        let mut out = b"welcome to the host\n".to_vec();
        out.extend_from_slice(MARKER);
        out.extend_from_slice(b"PATH=/a:/b\0EMPTY=\0=x\0noequals\0\xff=1\0K=v=w\0");
        let vars = parse(&out).unwrap();
        assert_eq!(
            vars,
            [
                ("PATH".to_owned(), "/a:/b".to_owned()),
                ("EMPTY".to_owned(), String::new()),
                ("K".to_owned(), "v=w".to_owned())
            ]
        );
        assert_eq!(parse(b"no marker"), None);
    }

    /// A fake login shell: a script that receives `-l -c SCRIPT` as a login shell would.
    fn fake_shell(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("shell");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_login_shell_profile_is_captured_after_its_chatter() {
        let dir = tempfile::tempdir().unwrap();
        let shell = fake_shell(
            dir.path(),
            "[ \"$1\" = -l ] || exit 9\necho 'motd: hello'\nexport PATH=/opt/fake/bin:/usr/bin:/bin\nexec /bin/sh -c \"$3\"",
        );
        let vars = capture(&shell).unwrap();
        let path = vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        assert_eq!(path, Some("/opt/fake/bin:/usr/bin:/bin"));
    }

    #[test]
    fn a_failing_slow_or_silent_login_shell_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let failing = fake_shell(dir.path(), "exit 3");
        assert!(matches!(capture(&failing), Err(LoginShellError::Failed(_))));
        let silent = fake_shell(dir.path(), "exit 0");
        assert!(matches!(
            capture(&silent),
            Err(LoginShellError::NoEnvironment)
        ));
        let missing = dir.path().join("no-such-shell");
        assert!(matches!(
            capture(&missing),
            Err(LoginShellError::Spawn { .. })
        ));
        // A shell that never finishes is killed at the bound (a short one here), with what it
        // started in its group.
        let slow = fake_shell(dir.path(), "sleep 600 & sleep 600");
        let result = capture_bounded(&slow, Duration::from_millis(200), 1 << 20);
        assert!(
            matches!(result, Err(LoginShellError::Timeout(200))),
            "{result:?}"
        );
        let chatty = fake_shell(dir.path(), "yes");
        let result = capture_bounded(&chatty, Duration::from_secs(60), 4096);
        assert!(
            matches!(result, Err(LoginShellError::TooLarge(4096))),
            "{result:?}"
        );
    }
}
