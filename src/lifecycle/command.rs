//! [`StoredCommand`]: the registered command as a manifest keeps it, in two allocations.
//!
//! A [`CommandSpec`] holds each string in an allocation of its own and its labels in a B-tree node
//! of 544 bytes; kept for every process of a journal, that is over a kilobyte and a dozen
//! allocations per manifest, and replay spent most of its time allocating and faulting those pages
//! in. A `StoredCommand` holds the same value as one string buffer and the end offsets of its
//! pieces.
//!
//! Invariants: `text` is the concatenation of the pieces program, each argument, cwd, each
//! environment override's name and value, each label's key and value, owner; `ends[i]` is the end
//! of piece `i` in `text` (so `ends` is non-decreasing and its last entry is `text.len()`); labels
//! are in strictly increasing key order (a map, as `CommandSpec::labels`). `meta` is `None` for a
//! command registered by a [`Registered`](super::event::Registered) (0x0101: every value held) and
//! `Some` for one registered by a [`RegisteredV2`](super::event::RegisteredV2): its policy, and
//! which overrides' values were withheld (not persisted); a withheld value's piece is empty. The
//! representation of a value is therefore unique, and two `StoredCommand`s are equal exactly when
//! the `CommandSpec`s (or `CommandSpecV2`s) they hold are.

use std::collections::BTreeMap;

use serde::Serialize;

use super::event::{CommandSpec, CommandSpecV2, EnvBase, EnvOverlay, EnvPolicy, EnvVar, Limits};
use crate::codec::{Malformed, Reader};

/// Smallest encodings of a string (its 8-byte length) and of a pair of strings.
pub(crate) const STRING_BYTES_MIN: usize = 8;
pub(crate) const PAIR_BYTES_MIN: usize = 2 * STRING_BYTES_MIN;
/// Smallest encoding of an `EnvVar`: a name and a `None` tag.
pub(crate) const ENV_VAR_BYTES_MIN: usize = STRING_BYTES_MIN + 1;

#[derive(Clone, PartialEq, Eq)]
pub struct StoredCommand {
    text: Box<str>,
    ends: Box<[usize]>,
    args: usize,
    env: usize,
    limits: Limits,
    meta: Option<Box<EnvMeta>>,
}

/// What a version 2 registration adds to a command: the environment policy, and for each
/// override whether its value was withheld (not persisted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvMeta {
    pub policy: EnvPolicy,
    pub withheld: Box<[bool]>,
}

/// Collects pieces into a `StoredCommand`, with the capacity measured beforehand.
struct Builder {
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl Builder {
    fn with_capacity(text: usize, pieces: usize) -> Self {
        Builder {
            text: Vec::with_capacity(text),
            ends: Vec::with_capacity(pieces),
        }
    }

    fn push(&mut self, piece: &[u8]) {
        self.text.extend_from_slice(piece);
        self.ends.push(self.text.len());
    }

    /// Checks the text once: every piece is valid UTF-8 exactly when the whole text is and every
    /// piece ends on a character boundary.
    fn finish(self, args: usize, env: usize, limits: Limits) -> Result<StoredCommand, Malformed> {
        let text = String::from_utf8(self.text).map_err(|_| Malformed)?;
        if !self.ends.iter().all(|&end| text.is_char_boundary(end)) {
            return Err(Malformed);
        }
        Ok(StoredCommand {
            text: text.into_boxed_str(),
            ends: self.ends.into_boxed_slice(),
            args,
            env,
            limits,
            meta: None,
        })
    }
}

impl StoredCommand {
    pub fn from_spec(spec: &CommandSpec) -> Self {
        let pairs = spec.env_overrides.len() + spec.labels.len();
        let pieces = 3 + spec.args.len() + 2 * pairs;
        let text = spec.program.len()
            + spec.args.iter().map(String::len).sum::<usize>()
            + spec.cwd.len()
            + spec
                .env_overrides
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + spec
                .labels
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + spec.owner.len();
        let mut text_buf = String::with_capacity(text);
        let mut ends = Vec::with_capacity(pieces);
        let mut push = |piece: &str| {
            text_buf.push_str(piece);
            ends.push(text_buf.len());
        };
        push(&spec.program);
        for arg in &spec.args {
            push(arg);
        }
        push(&spec.cwd);
        let env = spec.env_overrides.iter().map(|(k, v)| (k, v));
        for (k, v) in env.chain(&spec.labels) {
            push(k);
            push(v);
        }
        push(&spec.owner);
        StoredCommand {
            text: text_buf.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            args: spec.args.len(),
            env: spec.env_overrides.len(),
            limits: spec.limits.clone(),
            meta: None,
        }
    }

    /// The stored form of a version 2 registration's command: a withheld value is an empty
    /// piece, marked in `meta`.
    pub fn from_spec_v2(spec: &CommandSpecV2) -> Self {
        let legacy = CommandSpec {
            program: spec.program.clone(),
            args: spec.args.clone(),
            cwd: spec.cwd.clone(),
            env_overrides: spec
                .env_overrides
                .iter()
                .map(|v| (v.name.clone(), v.value.clone().unwrap_or_default()))
                .collect(),
            labels: spec.labels.clone(),
            limits: spec.limits.clone(),
            owner: spec.owner.clone(),
        };
        let mut command = StoredCommand::from_spec(&legacy);
        command.meta = Some(Box::new(EnvMeta {
            policy: spec.env_policy.clone(),
            withheld: spec
                .env_overrides
                .iter()
                .map(|v| v.value.is_none())
                .collect(),
        }));
        command
    }

    /// Reads a `CommandSpec` payload (the encoding of `CommandSpec`'s fields, in order) straight
    /// into its stored form, accepting exactly what decoding a `CommandSpec` accepts and giving
    /// the value `from_spec` gives for it. Two passes: the first checks the structure and
    /// measures, the second copies into buffers of the measured size; UTF-8 is checked once, over
    /// the whole text (see `Builder::finish`).
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Self::read_as(r, false)
    }

    /// [`StoredCommand::read`] for a `CommandSpecV2` payload (each override's value an
    /// `Option<String>`, the policy after the owner), giving what `from_spec_v2` gives.
    pub(crate) fn read_v2(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Self::read_as(r, true)
    }

    fn read_as(r: &mut Reader<'_>, v2: bool) -> Result<Self, Malformed> {
        let mut first = r.clone();
        let shape = Shape::measure(&mut first, v2)?;
        let mut b = Builder::with_capacity(shape.text, shape.pieces);
        b.push(r.str_bytes()?);
        let args = r.count(STRING_BYTES_MIN)?;
        for _ in 0..args {
            b.push(r.str_bytes()?);
        }
        b.push(r.str_bytes()?);
        let env = r.count(if v2 {
            ENV_VAR_BYTES_MIN
        } else {
            PAIR_BYTES_MIN
        })?;
        let mut withheld = Vec::with_capacity(if v2 { env } else { 0 });
        for _ in 0..env {
            b.push(r.str_bytes()?);
            if !v2 {
                b.push(r.str_bytes()?);
            } else if r.option()? {
                b.push(r.str_bytes()?);
                withheld.push(false);
            } else {
                b.push(b"");
                withheld.push(true);
            }
        }
        let labels = r.count(PAIR_BYTES_MIN)?;
        if shape.labels_sorted {
            for _ in 0..2 * labels {
                b.push(r.str_bytes()?);
            }
        } else {
            // As a decoded `BTreeMap`: sorted, and a later duplicate key wins. Each string is
            // checked here, since a replaced one never reaches the text that `finish` checks.
            let mut map = BTreeMap::new();
            for _ in 0..labels {
                map.insert(r.str()?, r.str()?);
            }
            for (k, v) in map {
                b.push(k.as_bytes());
                b.push(v.as_bytes());
            }
        }
        let limits = read_limits(r)?;
        b.push(r.str_bytes()?);
        let meta = if v2 {
            Some(Box::new(EnvMeta {
                policy: read_policy(r)?,
                withheld: withheld.into_boxed_slice(),
            }))
        } else {
            None
        };
        let mut command = b.finish(args, env, limits)?;
        command.meta = meta;
        Ok(command)
    }

    fn piece(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    fn pairs(&self, first: usize, count: usize) -> impl ExactSizeIterator<Item = (&str, &str)> {
        (0..count).map(move |k| (self.piece(first + 2 * k), self.piece(first + 2 * k + 1)))
    }

    pub fn program(&self) -> &str {
        self.piece(0)
    }

    pub fn args(&self) -> impl ExactSizeIterator<Item = &str> {
        (1..self.args + 1).map(|i| self.piece(i))
    }

    pub fn cwd(&self) -> &str {
        self.piece(1 + self.args)
    }

    /// Environment overrides, in the order given: the value, or `None` where it was withheld
    /// (not persisted).
    pub fn env_overrides(&self) -> impl ExactSizeIterator<Item = (&str, Option<&str>)> {
        let withheld = self.meta.as_ref().map(|m| &m.withheld);
        self.pairs(2 + self.args, self.env)
            .enumerate()
            .map(move |(i, (k, v))| {
                let held = withheld.is_none_or(|w| !w.get(i).copied().unwrap_or(false));
                (k, held.then_some(v))
            })
    }

    /// The names of the overrides whose values were not persisted, in the order given: what a
    /// restart must be given again.
    pub fn withheld_env_names(&self) -> impl Iterator<Item = &str> {
        self.env_overrides()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k)
    }

    /// The environment policy that applied; `None` for a command registered before it was
    /// recorded (kind 0x0101).
    pub fn env_policy(&self) -> Option<&EnvPolicy> {
        self.meta.as_ref().map(|m| &m.policy)
    }

    /// What a version 2 registration added, for a snapshot.
    pub(crate) fn meta(&self) -> Option<&EnvMeta> {
        self.meta.as_deref()
    }

    /// Attaches what a version 2 registration added, read back from a snapshot: `withheld` has
    /// one entry per override, and a withheld value's piece is empty.
    pub(crate) fn set_meta(&mut self, meta: EnvMeta) -> Result<(), Malformed> {
        if meta.withheld.len() != self.env {
            return Err(Malformed);
        }
        let first = 2 + self.args;
        let empty =
            (0..self.env).all(|i| !meta.withheld[i] || self.piece(first + 2 * i + 1).is_empty());
        if !empty || self.meta.is_some() {
            return Err(Malformed);
        }
        self.meta = Some(Box::new(meta));
        Ok(())
    }

    fn labels_at(&self) -> (usize, usize) {
        let first = 2 + self.args + 2 * self.env;
        (first, (self.ends.len() - 1 - first) / 2)
    }

    /// Labels, in key order.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        let (first, count) = self.labels_at();
        self.pairs(first, count)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        let (first, count) = self.labels_at();
        let mut keys = (0..count).map(|k| self.piece(first + 2 * k));
        let at = keys.position(|k| k == key)?;
        Some(self.piece(first + 2 * at + 1))
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn owner(&self) -> &str {
        self.piece(self.ends.len() - 1)
    }

    /// The representation itself, for a snapshot: the text, the end of each piece, and the
    /// counts of arguments and environment overrides (labels are what remains).
    pub(crate) fn parts(&self) -> (&str, &[usize], usize, usize, &Limits) {
        (&self.text, &self.ends, self.args, self.env, &self.limits)
    }

    /// Rebuilds a command from [`StoredCommand::parts`] read back from a snapshot, checking
    /// every invariant of the module doc (so that no accessor can index out of bounds or split a
    /// character, and two equal commands have equal parts).
    pub(crate) fn from_parts(
        text: String,
        ends: Vec<u64>,
        args: u64,
        env: u64,
        limits: Limits,
    ) -> Result<Self, Malformed> {
        let args = usize::try_from(args).map_err(|_| Malformed)?;
        let env = usize::try_from(env).map_err(|_| Malformed)?;
        // Program, arguments, cwd, environment pairs, label pairs, owner.
        let fixed = args
            .checked_add(env.checked_mul(2).ok_or(Malformed)?)
            .and_then(|n| n.checked_add(3))
            .ok_or(Malformed)?;
        if ends.len() < fixed || !(ends.len() - fixed).is_multiple_of(2) {
            return Err(Malformed);
        }
        let mut previous = 0usize;
        let mut converted = Vec::with_capacity(ends.len());
        for end in ends {
            let end = usize::try_from(end).map_err(|_| Malformed)?;
            if end < previous || end > text.len() || !text.is_char_boundary(end) {
                return Err(Malformed);
            }
            converted.push(end);
            previous = end;
        }
        if previous != text.len() {
            return Err(Malformed);
        }
        let command = StoredCommand {
            text: text.into_boxed_str(),
            ends: converted.into_boxed_slice(),
            args,
            env,
            limits,
            meta: None,
        };
        // Labels are a map: keys in strictly increasing order.
        let (first, count) = command.labels_at();
        let sorted =
            (1..count).all(|k| command.piece(first + 2 * (k - 1)) < command.piece(first + 2 * k));
        if !sorted {
            return Err(Malformed);
        }
        Ok(command)
    }

    /// The command as a registration of kind 0x0101 carried it (a withheld value as an empty
    /// string).
    pub fn to_spec(&self) -> CommandSpec {
        CommandSpec {
            program: self.program().to_owned(),
            args: self.args().map(str::to_owned).collect(),
            cwd: self.cwd().to_owned(),
            env_overrides: self
                .pairs(2 + self.args, self.env)
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            labels: self
                .labels()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            limits: self.limits.clone(),
            owner: self.owner().to_owned(),
        }
    }
}

/// What the first pass of [`StoredCommand::read`] learns.
struct Shape {
    text: usize,
    pieces: usize,
    labels_sorted: bool,
}

impl Shape {
    fn measure(r: &mut Reader<'_>, v2: bool) -> Result<Shape, Malformed> {
        let mut text = r.str_bytes()?.len();
        let mut pieces = 1;
        // Counts are bounded by the payload's length (`Reader::count`), so no sum overflows.
        let args = r.count(STRING_BYTES_MIN)?;
        for _ in 0..args {
            text += r.str_bytes()?.len();
        }
        text += r.str_bytes()?.len();
        let env = r.count(if v2 {
            ENV_VAR_BYTES_MIN
        } else {
            PAIR_BYTES_MIN
        })?;
        for _ in 0..env {
            text += r.str_bytes()?.len();
            if !v2 || r.option()? {
                text += r.str_bytes()?.len();
            }
        }
        let labels = r.count(PAIR_BYTES_MIN)?;
        let mut labels_sorted = true;
        // Byte order is `str` order, so sortedness can be judged before UTF-8 is checked.
        let mut previous: Option<&[u8]> = None;
        for _ in 0..labels {
            let key = r.str_bytes()?;
            labels_sorted &= previous.is_none_or(|p| p < key);
            previous = Some(key);
            text += key.len() + r.str_bytes()?.len();
        }
        read_limits(r)?;
        text += r.str_bytes()?.len();
        pieces += args + 1 + 2 * env + 2 * labels + 1;
        Ok(Shape {
            text,
            pieces,
            labels_sorted,
        })
    }
}

fn read_limits(r: &mut Reader<'_>) -> Result<Limits, Malformed> {
    let mut option = || -> Result<Option<u64>, Malformed> {
        Ok(if r.option()? { Some(r.u64()?) } else { None })
    };
    Ok(Limits {
        wall_clock_ms: option()?,
        idle_ms: option()?,
        output_retention_bytes: option()?,
    })
}

/// `EnvBase`, by the position of each variant in its declaration.
pub(crate) fn read_policy(r: &mut Reader<'_>) -> Result<EnvPolicy, Malformed> {
    let base = match r.variant(3)? {
        0 => EnvBase::Inherited,
        1 => EnvBase::Explicit,
        _ => EnvBase::Client,
    };
    let strings = |r: &mut Reader<'_>| -> Result<Vec<String>, Malformed> {
        let n = r.count(STRING_BYTES_MIN)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(r.str()?.to_owned());
        }
        Ok(out)
    };
    let removed = strings(r)?;
    let overlay = match r.variant(3)? {
        0 => EnvOverlay::Off,
        1 => EnvOverlay::Applied { names: strings(r)? },
        _ => EnvOverlay::Failed {
            reason: r.str()?.to_owned(),
        },
    };
    Ok(EnvPolicy {
        base,
        removed,
        overlay,
    })
}

impl PartialEq<CommandSpec> for StoredCommand {
    fn eq(&self, spec: &CommandSpec) -> bool {
        self.meta.is_none()
            && self.program() == spec.program
            && self.args().eq(spec.args.iter().map(String::as_str))
            && self.cwd() == spec.cwd
            && self.env_overrides().eq(spec
                .env_overrides
                .iter()
                .map(|(k, v)| (k.as_str(), Some(v.as_str()))))
            && self
                .labels()
                .eq(spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            && self.limits == spec.limits
            && self.owner() == spec.owner
    }
}

impl PartialEq<CommandSpecV2> for StoredCommand {
    fn eq(&self, spec: &CommandSpecV2) -> bool {
        self.env_policy() == Some(&spec.env_policy)
            && self.program() == spec.program
            && self.args().eq(spec.args.iter().map(String::as_str))
            && self.cwd() == spec.cwd
            && self.env_overrides().eq(spec
                .env_overrides
                .iter()
                .map(|v| (v.name.as_str(), v.value.as_deref())))
            && self
                .labels()
                .eq(spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            && self.limits == spec.limits
            && self.owner() == spec.owner
    }
}

impl From<&CommandSpec> for StoredCommand {
    fn from(spec: &CommandSpec) -> Self {
        StoredCommand::from_spec(spec)
    }
}

/// The command as `journal manifests --json` prints it (journal-format.md, "Manifests"): the
/// fields of a `CommandSpecV2`, the policy `null` for a registration of kind 0x0101.
#[derive(Debug, Serialize)]
struct View<'a> {
    program: &'a str,
    args: Vec<&'a str>,
    cwd: &'a str,
    env_overrides: Vec<EnvVar>,
    labels: BTreeMap<&'a str, &'a str>,
    limits: &'a Limits,
    owner: &'a str,
    env_policy: Option<&'a EnvPolicy>,
}

impl StoredCommand {
    fn view(&self) -> View<'_> {
        View {
            program: self.program(),
            args: self.args().collect(),
            cwd: self.cwd(),
            env_overrides: self
                .env_overrides()
                .map(|(k, v)| EnvVar {
                    name: k.to_owned(),
                    value: v.map(str::to_owned),
                })
                .collect(),
            labels: self.labels().collect(),
            limits: &self.limits,
            owner: self.owner(),
            env_policy: self.env_policy(),
        }
    }
}

/// Shown as the command it holds (withheld values as `None`).
impl std::fmt::Debug for StoredCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.view().fmt(f)
    }
}

impl Serialize for StoredCommand {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CommandSpec {
        CommandSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), String::new(), "é".into()],
            cwd: "/tmp".into(),
            env_overrides: vec![("B".into(), "2".into()), ("A".into(), String::new())],
            labels: BTreeMap::from([("a".into(), "1".into()), ("b".into(), String::new())]),
            limits: Limits {
                wall_clock_ms: Some(1),
                idle_ms: None,
                output_retention_bytes: Some(3),
            },
            owner: "me".into(),
        }
    }

    #[test]
    fn round_trips_and_answers_like_the_spec() {
        for s in [spec(), CommandSpec::default()] {
            let c = StoredCommand::from_spec(&s);
            assert_eq!(c.to_spec(), s);
            assert_eq!(c, s);
            assert!(format!("{c:?}").contains(&s.program));
            for (k, v) in &s.labels {
                assert_eq!(c.label(k), Some(v.as_str()));
            }
            assert_eq!(c.label("zz"), None);
        }
        let mut other = spec();
        other.args.push("x".into());
        assert_ne!(
            StoredCommand::from_spec(&other),
            StoredCommand::from_spec(&spec())
        );
        assert!(StoredCommand::from_spec(&other) != spec());
    }
}
