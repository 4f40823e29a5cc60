//! The bytes of one manifest: the frame a snapshot holds for it (journal-format.md, "The
//! snapshot file"), and a settled manifest's compact form in the store, which is the same bytes.
//!
//! Invariants: [`read_manifest`] is total (a typed error, never a panic) and accepts exactly
//! what bincode's derived decoder of [`ManifestIn`] accepts, to equal values; [`manifest_in`] of
//! what it reads from [`manifest_out`]'s encoding gives the manifest back, number aside (the
//! store numbers manifests by position). A [`SettledFrame`] holds that encoding of its manifest,
//! or the bytes its manifest was just decoded from, so reading it gives that manifest again.

use std::collections::BTreeSet;

use super::super::command::{EnvMeta, StoredCommand, read_policy};
use super::super::event::{
    CursorBounds, DeadlineFailed, DeadlineFired, EnvPolicy, ExitProof, Handle, IdentityWitness,
    LifecycleIds, Limits, Scoped,
};
use super::super::state::State;
use super::super::wire;
use super::{Manifest, Retirement, TerminalResult};
use crate::codec::{self, Decode, Encode, Malformed, Reader};
use crate::journal::EventId;
use crate::spill::{Spill, Spilled};
use crate::spool::Gap;

/// A manifest as a snapshot writes it (`snapshot::encode`): borrowed from the store, so nothing is copied.
#[derive(Encode)]
pub(in crate::lifecycle) struct ManifestOut<'a> {
    registration: EventId,
    handle: Handle,
    ids: LifecycleIds,
    command_text: &'a str,
    command_ends: &'a [usize],
    command_args: usize,
    command_env: usize,
    limits: &'a Limits,
    registered_unix_ms: u64,
    state: State,
    pid: Option<u32>,
    witness: Option<IdentityWitness>,
    running_unix_ms: Option<u64>,
    stop_requests: u32,
    first_stop: Option<(&'a str, &'a str)>,
    input_closed: bool,
    bounds: CursorBounds,
    terminal: &'a Option<TerminalResult>,
    published: &'a BTreeSet<EventId>,
    completion_notified: bool,
    scope: &'a Option<Scoped>,
    released: &'a Option<ExitProof>,
    gaps: &'a [Gap],
    retired: &'a Option<Retirement>,
    awaiting_input: Option<u64>,
    deadline: &'a Option<DeadlineFired>,
    deadline_failures: &'a [DeadlineFailed],
    env: Option<ManifestEnvOut<'a>>,
}

/// The same fields as [`ManifestOut`], owned, as a snapshot's decoders read them.
#[derive(Decode)]
pub(in crate::lifecycle) struct ManifestIn {
    registration: EventId,
    handle: Handle,
    ids: LifecycleIds,
    command_text: String,
    command_ends: Vec<u64>,
    command_args: u64,
    command_env: u64,
    limits: Limits,
    registered_unix_ms: u64,
    state: State,
    pid: Option<u32>,
    witness: Option<IdentityWitness>,
    running_unix_ms: Option<u64>,
    stop_requests: u32,
    first_stop: Option<(String, String)>,
    input_closed: bool,
    bounds: CursorBounds,
    terminal: Option<TerminalResult>,
    published: Vec<EventId>,
    completion_notified: bool,
    scope: Option<Scoped>,
    released: Option<ExitProof>,
    gaps: Vec<Gap>,
    retired: Option<Retirement>,
    awaiting_input: Option<u64>,
    deadline: Option<DeadlineFired>,
    deadline_failures: Vec<DeadlineFailed>,
    env: Option<ManifestEnvIn>,
}

/// What a `RegisteredV2` registration added to a manifest (snapshot version 4): the environment
/// policy, which overrides' values were withheld, the restarted process. `None` for a manifest
/// registered by a `Registered` (0x0101) record, and in every manifest of versions 1 to 3.
#[derive(Encode)]
struct ManifestEnvOut<'a> {
    policy: &'a EnvPolicy,
    withheld: &'a [bool],
    restart_of: Option<Handle>,
}

#[derive(Decode)]
struct ManifestEnvIn {
    policy: EnvPolicy,
    withheld: Vec<bool>,
    restart_of: Option<Handle>,
}

pub(in crate::lifecycle) fn manifest_out<'a>(
    registration: EventId,
    m: &'a Manifest,
) -> ManifestOut<'a> {
    let (text, ends, args, env, limits) = m.command.parts();
    ManifestOut {
        registration,
        handle: m.handle,
        ids: m.ids,
        command_text: text,
        command_ends: ends,
        command_args: args,
        command_env: env,
        limits,
        registered_unix_ms: m.registered_unix_ms,
        state: m.state,
        pid: m.pid,
        witness: m.witness,
        running_unix_ms: m.running_unix_ms,
        stop_requests: m.stop_requests,
        first_stop: m.first_stop.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
        input_closed: m.input_closed,
        bounds: m.bounds,
        terminal: &m.terminal,
        published: &m.published,
        completion_notified: m.completion_notified,
        scope: &m.scope,
        released: &m.released,
        gaps: &m.gaps,
        retired: &m.retired,
        awaiting_input: m.awaiting_input,
        deadline: &m.deadline,
        deadline_failures: &m.deadline_failures,
        env: m.command.meta().map(|meta| ManifestEnvOut {
            policy: &meta.policy,
            withheld: &meta.withheld,
            restart_of: m.restart_of,
        }),
    }
}

pub(in crate::lifecycle) fn manifest_in(w: ManifestIn) -> Result<(EventId, Manifest), String> {
    let mut command = StoredCommand::from_parts(
        w.command_text,
        w.command_ends,
        w.command_args,
        w.command_env,
        w.limits,
    )
    .map_err(|_| "a command whose pieces do not fit its text".to_owned())?;
    let mut restart_of = None;
    if let Some(env) = w.env {
        let meta = EnvMeta {
            policy: env.policy,
            withheld: env.withheld.into_boxed_slice(),
        };
        command
            .set_meta(meta)
            .map_err(|_| "an environment that does not fit its command".to_owned())?;
        restart_of = env.restart_of;
    }
    // A set, written in order: anything else is not what `encode` writes.
    if w.published.windows(2).any(|p| p[0] >= p[1]) {
        return Err("published events out of order".to_owned());
    }
    let manifest = Manifest {
        handle: w.handle,
        // The store numbers it as it adds it, in registration order.
        number: 0,
        ids: w.ids,
        command,
        restart_of,
        registered_unix_ms: w.registered_unix_ms,
        state: w.state,
        pid: w.pid,
        witness: w.witness,
        running_unix_ms: w.running_unix_ms,
        stop_requests: w.stop_requests,
        first_stop: w.first_stop,
        input_closed: w.input_closed,
        bounds: w.bounds,
        terminal: w.terminal,
        published: w.published.into_iter().collect(),
        completion_notified: w.completion_notified,
        scope: w.scope,
        released: w.released,
        gaps: w.gaps,
        retired: w.retired,
        awaiting_input: w.awaiting_input,
        deadline: w.deadline,
        deadline_failures: w.deadline_failures,
    };
    Ok((w.registration, manifest))
}

/// Reads a [`ManifestIn`] by hand, field by field in the order it declares them (its derived
/// bincode encoding). Accepts exactly what `codec::decode_frame::<ManifestIn>` accepts, to equal
/// values (`Reader::frame`; `tests/it/snapshot_props.rs` and the `snapshot_decode` fuzz target hold
/// it to that). One line per field or group of fields (each group read by its own helper, in
/// its place): a field added to [`ManifestIn`] is added here, in the same place.
///
/// `version` is the snapshot's: version 1 frames end before `retired` (read as `None`), version 2
/// frames before `awaiting_input` (read as `None`, `None` and empty), version 3 frames before
/// `env` (read as `None`).
pub(in crate::lifecycle) fn read_manifest(
    r: &mut Reader<'_>,
    version: u16,
) -> Result<ManifestIn, Malformed> {
    let registration = wire::id(r)?;
    let handle = wire::handle(r)?;
    let ids = read_ids(r)?;
    let (command_text, command_ends, command_args, command_env, limits) = read_command(r)?;
    let registered_unix_ms = r.u64()?;
    let state = wire::state(r)?;
    let pid = if r.option()? { Some(r.u32()?) } else { None };
    let witness = read_witness(r)?;
    let running_unix_ms = wire::option_u64(r)?;
    let stop_requests = r.u32()?;
    let first_stop = read_first_stop(r)?;
    let input_closed = r.bool()?;
    let bounds = wire::bounds(r)?;
    let terminal = read_terminal(r)?;
    let published = read_published(r)?;
    let completion_notified = r.bool()?;
    let (scope, released) = read_scope(r)?;
    let gaps = read_gaps(r)?;
    let retired = read_retired(r, version)?;
    let (awaiting_input, deadline, deadline_failures) = read_human_and_deadlines(r, version)?;
    let env = read_env(r, version)?;
    Ok(ManifestIn {
        registration,
        handle,
        ids,
        command_text,
        command_ends,
        command_args,
        command_env,
        limits,
        registered_unix_ms,
        state,
        pid,
        witness,
        running_unix_ms,
        stop_requests,
        first_stop,
        input_closed,
        bounds,
        terminal,
        published,
        completion_notified,
        scope,
        released,
        gaps,
        retired,
        awaiting_input,
        deadline,
        deadline_failures,
        env,
    })
}

/// The fields of a [`ManifestIn`] that hold its stored command, in their place.
type CommandFields = (String, Vec<u64>, u64, u64, Limits);

/// A manifest's reserved follow-up IDs (the registration's own ID is read before them).
fn read_ids(r: &mut Reader<'_>) -> Result<LifecycleIds, Malformed> {
    Ok(LifecycleIds {
        running: wire::id(r)?,
        terminal: wire::id(r)?,
        lost: wire::id(r)?,
        completion: wire::id(r)?,
    })
}

/// A manifest's command: its text, the ends of its pieces, where its arguments and environment
/// begin, and its limits.
fn read_command(r: &mut Reader<'_>) -> Result<CommandFields, Malformed> {
    let command_text = wire::string(r)?;
    let n = r.count(8)?;
    let mut command_ends = Vec::with_capacity(n);
    for _ in 0..n {
        command_ends.push(r.u64()?);
    }
    let command_args = r.u64()?;
    let command_env = r.u64()?;
    let limits = wire::limits(r)?;
    Ok((
        command_text,
        command_ends,
        command_args,
        command_env,
        limits,
    ))
}

/// A manifest's `Option<IdentityWitness>`.
fn read_witness(r: &mut Reader<'_>) -> Result<Option<IdentityWitness>, Malformed> {
    Ok(if r.option()? {
        Some(wire::identity_witness(r)?)
    } else {
        None
    })
}

/// A manifest's first stop request, as its two strings.
fn read_first_stop(r: &mut Reader<'_>) -> Result<Option<(String, String)>, Malformed> {
    Ok(if r.option()? {
        Some((wire::string(r)?, wire::string(r)?))
    } else {
        None
    })
}

/// A manifest's `Option<TerminalResult>`.
fn read_terminal(r: &mut Reader<'_>) -> Result<Option<TerminalResult>, Malformed> {
    Ok(if r.option()? {
        Some(TerminalResult {
            state: wire::state(r)?,
            exit: wire::exit(r)?,
            capture: wire::capture(r)?,
            reason: wire::string(r)?,
            at_unix_ms: r.u64()?,
            event_id: wire::id(r)?,
        })
    } else {
        None
    })
}

/// A manifest's published event IDs, as the sequence they are encoded as.
fn read_published(r: &mut Reader<'_>) -> Result<Vec<EventId>, Malformed> {
    let n = r.count(16)?;
    let mut published = Vec::with_capacity(n);
    for _ in 0..n {
        published.push(wire::id(r)?);
    }
    Ok(published)
}

/// A manifest's `scope` and `released`, which follow one another.
fn read_scope(r: &mut Reader<'_>) -> Result<(Option<Scoped>, Option<ExitProof>), Malformed> {
    let scope = if r.option()? {
        Some(wire::scoped(r)?)
    } else {
        None
    };
    let released = if r.option()? {
        Some(wire::exit_proof(r)?)
    } else {
        None
    };
    Ok((scope, released))
}

/// A manifest's output gaps.
fn read_gaps(r: &mut Reader<'_>) -> Result<Vec<Gap>, Malformed> {
    let n = r.count(GAP_BYTES)?;
    let mut gaps = Vec::with_capacity(n);
    for _ in 0..n {
        gaps.push(wire::gap(r)?);
    }
    Ok(gaps)
}

/// A manifest's retirement: absent from version 1 frames, which end before it.
fn read_retired(r: &mut Reader<'_>, version: u16) -> Result<Option<Retirement>, Malformed> {
    Ok(if version > 1 && r.option()? {
        Some(Retirement {
            reason: wire::string(r)?,
            at_unix_ms: r.u64()?,
        })
    } else {
        None
    })
}

/// The fields of a [`ManifestIn`] that version 3 added, in their place.
type HumanAndDeadlines = (Option<u64>, Option<DeadlineFired>, Vec<DeadlineFailed>);

/// Version 3: the human-input mark and the deadlines.
fn read_human_and_deadlines(
    r: &mut Reader<'_>,
    version: u16,
) -> Result<HumanAndDeadlines, Malformed> {
    if version <= 2 {
        return Ok((None, None, Vec::new()));
    }
    let awaiting_input = wire::option_u64(r)?;
    let deadline = if r.option()? {
        Some(wire::deadline_fired(r)?)
    } else {
        None
    };
    let n = r.count(wire::DEADLINE_FAILED_BYTES_MIN)?;
    let mut failures = Vec::with_capacity(n);
    for _ in 0..n {
        failures.push(wire::deadline_failed(r)?);
    }
    Ok((awaiting_input, deadline, failures))
}

/// Version 4: what a `RegisteredV2` registration added.
fn read_env(r: &mut Reader<'_>, version: u16) -> Result<Option<ManifestEnvIn>, Malformed> {
    if !(version > 3 && r.option()?) {
        return Ok(None);
    }
    let policy = read_policy(r)?;
    let n = r.count(1)?;
    let mut withheld = Vec::with_capacity(n);
    for _ in 0..n {
        // A bool is encoded as an option tag is: 0 or 1, anything else refused.
        withheld.push(r.option()?);
    }
    let restart_of = if r.option()? {
        Some(Handle(EventId::from_bytes(r.bytes16()?)))
    } else {
        None
    };
    Ok(Some(ManifestEnvIn {
        policy,
        withheld,
        restart_of,
    }))
}

/// Bytes of one encoded `Gap`.
const GAP_BYTES: usize = 8 + 8 + 4 + 4;

/// The room a settled manifest's encoding starts with: most frames fit (a command, its
/// environment, a dozen IDs and cursors).
const SETTLE_BYTES: usize = 1024;

/// Where a frame's leading fields lie: after the registration's event ID, the handle, then the
/// four follow-up IDs (bincode's fixed-int encoding of `[u8; 16]`s, in `ManifestOut`'s order).
const HANDLE_AT: usize = 16;
const IDS_AT: usize = 32;

/// A settled manifest, held as its snapshot frame (without the frame's length prefix), encoded
/// in the current snapshot version, in the store's spill space (`crate::spill`): the heap keeps
/// only where it is and whether its output was retired (which an hourly retention pass asks of
/// every process). The frame is what a snapshot copies as it is; its handle and IDs are read in
/// place, without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::lifecycle) struct SettledFrame {
    at: Spilled,
    retired: bool,
}

impl SettledFrame {
    /// `m` (registered under `registration`) encoded into `spill`. `None` if it cannot be (a
    /// frame over the limit, a spill file that refuses the bytes): the manifest then stays
    /// decoded, which costs memory and nothing else. That the frame decodes back to `m` is the
    /// codec's round trip, which `tests/it/snapshot_props.rs` holds for any store; debug builds
    /// (every test) check it again here, for each one.
    pub(in crate::lifecycle) fn settle(
        registration: EventId,
        m: &Manifest,
        spill: &mut Spill,
    ) -> Option<SettledFrame> {
        // Room for a typical frame at once: grown from empty, the encoder's pushes reallocated
        // and copied it several times, a tenth of a replay's settling.
        let mut bytes = Vec::with_capacity(SETTLE_BYTES);
        codec::encode_into(&manifest_out(registration, m), &mut bytes).ok()?;
        Reader::frame(&bytes)?;
        let frame = SettledFrame::keep(&bytes, m, spill)?;
        if cfg!(debug_assertions) {
            let back = frame.decode(spill, m.number);
            debug_assert_eq!(
                back,
                Ok((registration, m.clone())),
                "a frame that does not round-trip"
            );
        }
        Some(frame)
    }

    /// The frame `m` was just decoded from (a current snapshot's, by the hand decoder), kept as
    /// it is: it decodes to `m` again. Where the spill was made over the snapshot's bytes, the
    /// frame stays there, uncopied. `None`: the spill refused it.
    pub(in crate::lifecycle) fn decoded_from(
        bytes: &[u8],
        m: &Manifest,
        spill: &mut Spill,
    ) -> Option<SettledFrame> {
        if let Some(at) = spill.adopt(bytes) {
            return Some(SettledFrame {
                at,
                retired: m.retired.is_some(),
            });
        }
        SettledFrame::keep(bytes, m, spill)
    }

    fn keep(bytes: &[u8], m: &Manifest, spill: &mut Spill) -> Option<SettledFrame> {
        let at = spill
            .append(bytes)
            .map_err(
                |e| tracing::debug!(handle = %m.handle, "a settled manifest kept decoded: {e}"),
            )
            .ok()?;
        Some(SettledFrame {
            at,
            retired: m.retired.is_some(),
        })
    }

    /// Whether the manifest's output was retired.
    pub(in crate::lifecycle) fn retired(&self) -> bool {
        self.retired
    }

    /// The frame at `at` in the store's spill, as a slot's record says (`slots.rs`).
    pub(super) fn at(at: Spilled, retired: bool) -> SettledFrame {
        SettledFrame { at, retired }
    }

    /// Where the frame is, as a slot's record keeps it.
    pub(super) fn at_bytes(&self) -> [u8; 12] {
        self.at.to_bytes()
    }

    /// The manifest, numbered `number`, and its registration's event ID.
    pub(in crate::lifecycle) fn decode(
        &self,
        spill: &Spill,
        number: u64,
    ) -> Result<(EventId, Manifest), String> {
        let mut r =
            Reader::frame(self.bytes(spill)).ok_or("a settled frame over the frame limit")?;
        let read = read_manifest(&mut r, super::super::snapshot::SNAPSHOT_VERSION);
        let w = read.map_err(|e| format!("a settled frame that does not decode: {e:?}"))?;
        if r.remaining() != 0 {
            return Err("a settled frame with bytes after its manifest".to_owned());
        }
        let (registration, mut m) = manifest_in(w)?;
        m.number = number;
        Ok((registration, m))
    }

    /// The frame's bytes, as a snapshot holds them after their length.
    pub(in crate::lifecycle) fn bytes<'s>(&self, spill: &'s Spill) -> &'s [u8] {
        spill.get(self.at)
    }

    /// The ID at `at`; every frame `settle` keeps starts with the fields read here.
    fn id_at(&self, spill: &Spill, at: usize) -> EventId {
        let mut id = [0u8; 16];
        if let Some(b) = self.bytes(spill).get(at..at + 16) {
            id.copy_from_slice(b);
        }
        EventId::from_bytes(id)
    }

    pub(in crate::lifecycle) fn handle(&self, spill: &Spill) -> Handle {
        Handle(self.id_at(spill, HANDLE_AT))
    }

    pub(in crate::lifecycle) fn ids(&self, spill: &Spill) -> LifecycleIds {
        LifecycleIds {
            running: self.id_at(spill, IDS_AT),
            terminal: self.id_at(spill, IDS_AT + 16),
            lost: self.id_at(spill, IDS_AT + 32),
            completion: self.id_at(spill, IDS_AT + 48),
        }
    }
}
