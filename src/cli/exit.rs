//! Exit statuses, in the manner of timeout(1) and `docker run`: a command's own status passes
//! through, and procjournal keeps the codes above 123 for itself, so that a caller can always
//! tell the supervised command's verdict from procjournal's.
//!
//! Invariant: no failure of procjournal itself (an error, a refused request, a usage error)
//! exits with anything but [`FAILURE`]; only the statuses of the supervised command and the
//! few documented verdicts below (0, 1, 3, 124) are used besides it.

use std::process::ExitCode;

/// procjournal itself failed: a usage error, an unreachable daemon, a refused request, an
/// unreadable journal (docker's 125).
pub(crate) const FAILURE: u8 = 125;
/// The command was found but cannot be run (no execute permission, not an executable).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub(crate) const NOT_FOUND: u8 = 127;
/// `wait --timeout` gave up before the process ended (timeout(1)'s 124); it keeps running.
pub(crate) const WAIT_GAVE_UP: u8 = 124;

/// What `--help` says about exit statuses (the top level, `run` and `wait`).
pub(crate) const HELP: &str = "\
Exit status (run, capture, wait, and start for a command that cannot start):
  N        the command's own exit status, passed through
  128+N    the command died of signal N (143: SIGTERM, 137: SIGKILL)
  124      wait --timeout gave up; the process keeps running
  125      procjournal itself failed (usage error, no daemon, refused request, unreadable
           journal), or it has no status to pass on (the process never started, its end
           was lost in a crash, or the journal failed to record its end: stderr says so)
  126      the command was found but cannot be executed
  127      the command was not found
Other commands exit 0 on success and 125 on failure; journal verify and journal manifests
exit 1 when they report a problem, logs --fail-on-gap exits 3 after a gap.";

/// The status a caller sees for a process that ended with `exit_code` or died of `signal`;
/// [`FAILURE`] when neither is known.
pub(crate) fn of_process(exit_code: Option<i32>, signal: Option<i32>) -> ExitCode {
    match (exit_code, signal) {
        // The low byte, as a shell sees a child's status.
        (Some(code), _) => ExitCode::from((code & 0xff) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        (None, None) => ExitCode::from(FAILURE),
    }
}

/// Says on stderr that `handle` ended as it did but the journal failed to record it, so that the
/// 125 that follows is not taken for the command's own status.
pub(crate) fn say_not_persisted(
    handle: &str,
    exit_code: Option<i32>,
    signal: Option<i32>,
    why: &str,
) {
    let how = match (exit_code, signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal SIG{}", signal_name(signal)),
        (None, None) => "no exit status".to_owned(),
    };
    note!(
        "procjournal: {} ended ({how}) but the terminal state was not persisted: {}; exiting {FAILURE}",
        crate::spool::render::escape_field(handle, true),
        crate::spool::render::escape_field(why, true)
    );
}

/// The status for a command that could not be spawned.
pub(crate) fn of_spawn(failure: Option<crate::supervisor::SpawnFailure>) -> ExitCode {
    use crate::supervisor::SpawnFailure;
    ExitCode::from(match failure {
        Some(SpawnFailure::NotFound) => NOT_FOUND,
        Some(SpawnFailure::NotExecutable) => CANNOT_EXECUTE,
        Some(SpawnFailure::Other) | None => FAILURE,
    })
}

/// A signal's name without `SIG` (`TERM`), or its number when it has none here.
/// The status for a request that was refused: a spawn failure is the command's (126, 127),
/// said on stderr as a start's failure is; any other refusal is procjournal's own failure.
pub(crate) fn of_refusal(e: crate::protocol::ApiError) -> anyhow::Result<ExitCode> {
    if e.code != crate::protocol::ErrorCode::SpawnFailed {
        anyhow::bail!("{}", e.message);
    }
    note!(
        "procjournal: {}",
        crate::spool::render::escape_field(&e.message, true)
    );
    Ok(of_spawn(e.spawn))
}

pub(crate) fn signal_name(signal: i32) -> String {
    match nix::sys::signal::Signal::try_from(signal) {
        Ok(s) => s.as_str().trim_start_matches("SIG").to_owned(),
        Err(_) => signal.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_pass_through_and_signals_add_128() {
        assert_eq!(of_process(Some(3), None), ExitCode::from(3));
        assert_eq!(of_process(Some(256 + 7), None), ExitCode::from(7));
        assert_eq!(of_process(None, Some(15)), ExitCode::from(143));
        assert_eq!(of_process(None, None), ExitCode::from(FAILURE));
        assert_eq!(signal_name(15), "TERM");
        assert_eq!(signal_name(9), "KILL");
        assert_eq!(signal_name(200), "200");
    }
}
