//! References people can type for a process: its handle, its number on the root, or its name.
//!
//! - A *number* is the position of the process's registration in the root's store, from 1
//!   (`Manifest::number`). Positions are never removed or reordered (retention retires output,
//!   never a manifest; a snapshot restores manifests in registration order), so a number names
//!   the same process for the life of the root, as pueue's task ids do.
//! - A *name* is the value of the label [`NAME_LABEL`], set with `--name`. It is unique among
//!   live processes (the supervisor's actor refuses a start whose name a live process holds), so
//!   a name resolves to its live holder, or, when none is live, to the newest process that had
//!   it: `procjournal logs build` still works after the build ended.
//!
//! Invariants: parsing is total and unambiguous: a full handle (`p-` and 32 hex digits) is a
//! handle, all digits (optionally after `#`) are a number, and a name is what [`valid_name`]
//! accepts, which excludes both other forms, so no text means two things.

use super::event::Handle;
use std::borrow::Cow;

use super::manifest::{Manifest, ManifestStore};

/// The label that holds a process's name.
pub const NAME_LABEL: &str = "name";
/// The longest name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;

/// A reference to one process, as a person types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessRef {
    Handle(Handle),
    Number(u64),
    Name(String),
}

/// Why a reference names no process, or is not a reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    #[error(
        "{0:?} is not a process reference: give a handle (p-...), a number (12 or #12) or a name"
    )]
    Malformed(String),
    #[error("no process with handle {0}")]
    UnknownHandle(Handle),
    #[error("no process number {0} on this root")]
    UnknownNumber(u64),
    #[error("no process named {0:?}")]
    UnknownName(String),
}

/// Whether `name` may name a process: 1 to [`NAME_BYTES_MAX`] bytes of ASCII letters, digits,
/// `.`, `_` and `-`, starting with a letter or `_` and not with `p-` (so it is neither a number
/// nor a handle, nor a handle cut short, and needs no quoting in a shell or escaping on a
/// terminal).
pub fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    first_ok
        && name.len() <= NAME_BYTES_MAX
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !name.starts_with("p-")
}

impl std::str::FromStr for ProcessRef {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Ok(h) = text.parse::<Handle>() {
            return Ok(ProcessRef::Handle(h));
        }
        let digits = text.strip_prefix('#').unwrap_or(text);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return match digits.parse::<u64>() {
                Ok(n) if n > 0 => Ok(ProcessRef::Number(n)),
                _ => Err(ReferenceError::Malformed(text.chars().take(80).collect())),
            };
        }
        if valid_name(text) {
            return Ok(ProcessRef::Name(text.to_owned()));
        }
        Err(ReferenceError::Malformed(text.chars().take(80).collect()))
    }
}

impl From<Handle> for ProcessRef {
    fn from(handle: Handle) -> Self {
        ProcessRef::Handle(handle)
    }
}

impl std::fmt::Display for ProcessRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcessRef::Handle(h) => write!(f, "{h}"),
            ProcessRef::Number(n) => write!(f, "#{n}"),
            ProcessRef::Name(name) => f.write_str(name),
        }
    }
}

impl ManifestStore {
    /// The process `reference` names (see the module doc for names).
    pub fn resolve(&self, reference: &ProcessRef) -> Result<Cow<'_, Manifest>, ReferenceError> {
        match reference {
            ProcessRef::Handle(h) => self.get(h).ok_or(ReferenceError::UnknownHandle(*h)),
            ProcessRef::Number(n) => self.by_number(*n).ok_or(ReferenceError::UnknownNumber(*n)),
            ProcessRef::Name(name) => {
                let named = |m: &Manifest| m.command.label(NAME_LABEL) == Some(name.as_str());
                // The first live one in registration order; a live process is never settled,
                // so the manifests held decoded are enough.
                if let Some(m) = self.live().find(|m| named(m) && !m.state.is_terminal()) {
                    return Ok(Cow::Borrowed(m));
                }
                // Else the newest, searched from the end: settled ones are decoded only until
                // it is found.
                self.iter_rev()
                    .find(|m| named(m))
                    .ok_or_else(|| ReferenceError::UnknownName(name.clone()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Parsing any text is total, and what parses prints back to text that parses to it.
        #[test]
        fn parsing_is_total_and_round_trips(text in "(#?[0-9]{0,22})|(p-[0-9a-f]{0,34})|(.{0,70})") {
            if let Ok(r) = text.parse::<ProcessRef>() {
                prop_assert_eq!(r.to_string().parse::<ProcessRef>(), Ok(r));
            }
        }
    }

    #[test]
    fn every_text_means_at_most_one_thing() {
        let h = "p-0123456789abcdef0123456789abcdef";
        assert!(matches!(h.parse(), Ok(ProcessRef::Handle(_))));
        assert_eq!("12".parse(), Ok(ProcessRef::Number(12)));
        assert_eq!("#12".parse(), Ok(ProcessRef::Number(12)));
        assert_eq!("build".parse(), Ok(ProcessRef::Name("build".into())));
        assert_eq!(
            "_web-1.api".parse(),
            Ok(ProcessRef::Name("_web-1.api".into()))
        );
        for bad in [
            "",
            "#",
            "0",
            "#0",
            "99999999999999999999999",
            "1a",
            "-x",
            "a b",
            "é",
            "x\u{1b}]0;t\u{7}",
            "p-0123",
            &"a".repeat(NAME_BYTES_MAX + 1),
        ] {
            assert!(
                matches!(bad.parse::<ProcessRef>(), Err(ReferenceError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(valid_name(&"a".repeat(NAME_BYTES_MAX)));
        // A name is never a handle or a number, and the display form parses back.
        for r in [
            ProcessRef::Number(7),
            ProcessRef::Name("api".into()),
            ProcessRef::Handle(h.parse().unwrap()),
        ] {
            assert_eq!(r.to_string().parse(), Ok(r));
        }
    }
}
