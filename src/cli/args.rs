//! The value parsers of the command line that more than one command uses: durations, labels,
//! terminal sizes, environment variables, process references. (`size.rs` parses sizes.)

use std::time::Duration;

use crate::lifecycle::ProcessRef;

/// The `--grace` default of `stop` and `shutdown`: the one default grace of every surface
/// (`limits::GRACE_MS_DEFAULT`, which the daemon, MCP and Ctrl-C use), spelled for clap.
pub(crate) const GRACE_DEFAULT: &str = "1500ms";

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s, 500ms, 5m, 7d"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (ms, s, m, h, d)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

pub(crate) fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{text:?} is not a label k=v")),
    }
}

/// `24x80`: rows by columns, each at least 1.
pub(crate) fn parse_size(text: &str) -> Result<(u16, u16), String> {
    let parsed = text
        .split_once(['x', 'X'])
        .and_then(|(r, c)| Some((r.parse::<u16>().ok()?, c.parse::<u16>().ok()?)));
    match parsed {
        Some((rows, cols)) if rows > 0 && cols > 0 => Ok((rows, cols)),
        _ => Err(format!(
            "{text:?} is not a terminal size ROWSxCOLS like 24x80"
        )),
    }
}

/// `--group GROUP`: a group name or a numeric gid; the group a root is shared with, read-only.
pub(crate) fn parse_group(text: &str) -> Result<u32, String> {
    if let Ok(gid) = text.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(text) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => Err(format!("no group {text:?}")),
        Err(e) => Err(format!("group {text:?}: {e}")),
    }
}

/// `NAME=value`, or `NAME` alone for the value of NAME in this process's environment (which
/// keeps the value out of argv); the error never repeats a value (it may hold a secret).
pub(crate) fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        Some(_) => Err("not NAME=value (a non-empty name, then =, then the value)".to_owned()),
        None if text.is_empty() => Err("an empty name".to_owned()),
        None => match std::env::var(text) {
            Ok(value) => Ok((text.to_owned(), value)),
            Err(std::env::VarError::NotPresent) => Err(format!(
                "{} is not set in procjournal's environment (NAME alone takes its value from there)",
                crate::spool::render::escape_field(text, false)
            )),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                "the value of {} in procjournal's environment is not UTF-8",
                crate::spool::render::escape_field(text, false)
            )),
        },
    }
}

pub(crate) fn reference_arg(text: &str) -> Result<ProcessRef, String> {
    text.parse::<ProcessRef>().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI's `--grace` default is the grace every other surface uses.
    #[test]
    fn the_grace_default_is_the_one_of_every_surface() {
        assert_eq!(
            parse_duration(GRACE_DEFAULT),
            Ok(Duration::from_millis(crate::limits::GRACE_MS_DEFAULT))
        );
    }
}
