//! The fast decoder of lifecycle payloads: each event kind's fields read by hand with
//! [`codec::Reader`], in the order the structs of `event.rs` declare them (which is their derived
//! bincode encoding, journal-format.md "Lifecycle events").
//!
//! `LifecycleEvent::decode` is here too, beside the decoder it tries first: `event.rs` imports
//! nothing of this module, which imports its types.
//!
//! Replay decodes every record of the journal, and bincode's generic decoding (allocation claims,
//! error values built on the way) cost more than the rest of replay; the fixed-size kinds (6 in
//! 10 events are output checkpoints) decode here without allocating at all.
//!
//! Invariants: total (any bytes give an event or [`Malformed`], never a panic; no allocation is
//! sized by an unchecked count: a count is checked against the bytes left before anything is
//! reserved); and accepts exactly the payloads [`LifecycleEvent::decode_reference`] (bincode)
//! accepts, decoding them to equal values. [`LifecycleEvent::decode`] only ever returns an error
//! from the reference decoder, so error texts are the same whichever decoder ran. Checked by the
//! differential properties in `tests/it/decoder_props.rs` and by the `lifecycle_store` fuzz target.

use std::collections::BTreeMap;

use super::command::{
    ENV_VAR_BYTES_MIN, PAIR_BYTES_MIN, STRING_BYTES_MIN, StoredCommand, read_policy,
};
use super::event::{
    CaptureStatus, CommandSpec, CommandSpecV2, CompletionNotified, CursorBounds, Deadline,
    DeadlineFailed, DeadlineFired, EnvVar, EventDecodeError, ExitProof, ExitStatus, GateChanged,
    Handle, HumanInput, IdentityWitness, InputClosed, LifecycleEvent, LifecycleIds,
    LifecyclePublished, Limits, LostOnRestore, OutputCheckpoint, ProcessWitness, ReceiptBinding,
    Registered, RegisteredV2, Running, Scoped, StopRequested, Terminal, TreeMechanism, kinds,
};
use super::state::State;
use crate::codec::{Malformed, Reader};
use crate::journal::EventId;
use crate::spool::{Gap, LossReason};

pub(super) fn id(r: &mut Reader<'_>) -> Result<EventId, Malformed> {
    Ok(EventId::from_bytes(r.bytes16()?))
}

pub(super) fn handle(r: &mut Reader<'_>) -> Result<Handle, Malformed> {
    Ok(Handle(id(r)?))
}

pub(super) fn string(r: &mut Reader<'_>) -> Result<String, Malformed> {
    Ok(r.str()?.to_owned())
}

pub(super) fn bounds(r: &mut Reader<'_>) -> Result<CursorBounds, Malformed> {
    Ok(CursorBounds {
        retained_from: r.u64()?,
        total_bytes: r.u64()?,
    })
}

/// `State`, by the position of each variant in its declaration.
pub(super) fn state(r: &mut Reader<'_>) -> Result<State, Malformed> {
    Ok(match r.variant(9)? {
        0 => State::Starting,
        1 => State::Running,
        2 => State::Exited,
        3 => State::Failed,
        4 => State::TimedOut,
        5 => State::Interrupted,
        6 => State::Terminated,
        7 => State::Killed,
        _ => State::LostOnRestore,
    })
}

pub(super) fn exit(r: &mut Reader<'_>) -> Result<ExitStatus, Malformed> {
    Ok(match r.variant(3)? {
        0 => ExitStatus::Code(r.i32()?),
        1 => ExitStatus::Signal(r.i32()?),
        _ => ExitStatus::Unknown,
    })
}

pub(super) fn capture(r: &mut Reader<'_>) -> Result<CaptureStatus, Malformed> {
    Ok(match r.variant(3)? {
        0 => CaptureStatus::Complete,
        1 => CaptureStatus::Incomplete(string(r)?),
        _ => CaptureStatus::Failed(string(r)?),
    })
}

pub(super) fn deadline(r: &mut Reader<'_>) -> Result<Deadline, Malformed> {
    Ok(match r.variant(2)? {
        0 => Deadline::Wall,
        _ => Deadline::Idle,
    })
}

pub(super) fn option_u64(r: &mut Reader<'_>) -> Result<Option<u64>, Malformed> {
    Ok(if r.option()? { Some(r.u64()?) } else { None })
}

pub(super) fn limits(r: &mut Reader<'_>) -> Result<Limits, Malformed> {
    Ok(Limits {
        wall_clock_ms: option_u64(r)?,
        idle_ms: option_u64(r)?,
        output_retention_bytes: option_u64(r)?,
    })
}

pub(super) fn identity_witness(r: &mut Reader<'_>) -> Result<IdentityWitness, Malformed> {
    Ok(IdentityWitness {
        start_time_ticks: r.u64()?,
        boot_id: r.bytes16()?,
    })
}

fn process_witness(r: &mut Reader<'_>) -> Result<ProcessWitness, Malformed> {
    Ok(ProcessWitness {
        pid: r.u32()?,
        start_time_ticks: r.u64()?,
        pidfs_ino: r.u64()?,
    })
}

/// A `Scoped` payload, field by field as `event.rs` declares it.
pub(super) fn scoped(r: &mut Reader<'_>) -> Result<Scoped, Malformed> {
    Ok(Scoped {
        handle: handle(r)?,
        mechanism: match r.variant(3)? {
            0 => TreeMechanism::Group,
            1 => TreeMechanism::Guardian,
            _ => TreeMechanism::Cgroup,
        },
        boot_id: r.bytes16()?,
        workload: process_witness(r)?,
        guardian: if r.option()? {
            Some(process_witness(r)?)
        } else {
            None
        },
        cgroup: if r.option()? { Some(string(r)?) } else { None },
        receipt: if r.option()? {
            Some(ReceiptBinding {
                path: string(r)?,
                dev: r.u64()?,
                ino: r.u64()?,
                nonce: r.bytes16()?,
            })
        } else {
            None
        },
        at_unix_ms: r.u64()?,
    })
}

pub(super) fn exit_proof(r: &mut Reader<'_>) -> Result<ExitProof, Malformed> {
    Ok(match r.variant(3)? {
        0 => ExitProof::Receipt {
            status: exit(r)?,
            reaped: r.u64()?,
        },
        1 => ExitProof::CgroupEmpty,
        _ => ExitProof::BootChanged,
    })
}

pub(super) fn gap(r: &mut Reader<'_>) -> Result<Gap, Malformed> {
    Ok(Gap {
        from: r.u64()?,
        to: r.u64()?,
        reason: match r.variant(4)? {
            0 => LossReason::Retention,
            1 => LossReason::DiskFull,
            2 => LossReason::IoError,
            _ => LossReason::SyncFailed,
        },
        errno: r.i32()?,
    })
}

#[inline(never)]
fn command(r: &mut Reader<'_>) -> Result<CommandSpec, Malformed> {
    let program = string(r)?;
    let n = r.count(STRING_BYTES_MIN)?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        args.push(string(r)?);
    }
    let cwd = string(r)?;
    let n = r.count(PAIR_BYTES_MIN)?;
    let mut env_overrides = Vec::with_capacity(n);
    for _ in 0..n {
        env_overrides.push((string(r)?, string(r)?));
    }
    let n = r.count(PAIR_BYTES_MIN)?;
    let mut labels = BTreeMap::new();
    for _ in 0..n {
        // As bincode's map decoder: insert in the order found, a later duplicate key wins.
        labels.insert(string(r)?, string(r)?);
    }
    let limits = Limits {
        wall_clock_ms: option_u64(r)?,
        idle_ms: option_u64(r)?,
        output_retention_bytes: option_u64(r)?,
    };
    let owner = string(r)?;
    Ok(CommandSpec {
        program,
        args,
        cwd,
        env_overrides,
        labels,
        limits,
        owner,
    })
}

#[inline(never)]
fn command_v2(r: &mut Reader<'_>) -> Result<CommandSpecV2, Malformed> {
    let program = string(r)?;
    let n = r.count(STRING_BYTES_MIN)?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        args.push(string(r)?);
    }
    let cwd = string(r)?;
    let n = r.count(ENV_VAR_BYTES_MIN)?;
    let mut env_overrides = Vec::with_capacity(n);
    for _ in 0..n {
        let name = string(r)?;
        let value = if r.option()? { Some(string(r)?) } else { None };
        env_overrides.push(EnvVar { name, value });
    }
    let n = r.count(PAIR_BYTES_MIN)?;
    let mut labels = BTreeMap::new();
    for _ in 0..n {
        labels.insert(string(r)?, string(r)?);
    }
    let limits = Limits {
        wall_clock_ms: option_u64(r)?,
        idle_ms: option_u64(r)?,
        output_retention_bytes: option_u64(r)?,
    };
    let owner = string(r)?;
    let env_policy = read_policy(r)?;
    Ok(CommandSpecV2 {
        program,
        args,
        cwd,
        env_overrides,
        labels,
        limits,
        owner,
        env_policy,
    })
}

fn option_handle(r: &mut Reader<'_>) -> Result<Option<Handle>, Malformed> {
    Ok(if r.option()? { Some(handle(r)?) } else { None })
}

/// A registration as replay folds it: the command already in its stored form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registration {
    pub handle: Handle,
    pub ids: LifecycleIds,
    pub command: StoredCommand,
    pub restart_of: Option<Handle>,
    pub at_unix_ms: u64,
}

impl Registration {
    pub fn from_event(e: &Registered) -> Self {
        Registration {
            handle: e.handle,
            ids: e.ids,
            command: StoredCommand::from_spec(&e.command),
            restart_of: None,
            at_unix_ms: e.at_unix_ms,
        }
    }

    pub fn from_event_v2(e: &RegisteredV2) -> Self {
        Registration {
            handle: e.handle,
            ids: e.ids,
            command: StoredCommand::from_spec_v2(&e.command),
            restart_of: e.restart_of,
            at_unix_ms: e.at_unix_ms,
        }
    }

    /// The registration of either kind, `None` for any other event.
    pub fn of(e: &LifecycleEvent) -> Option<Self> {
        match e {
            LifecycleEvent::Registered(e) => Some(Self::from_event(e)),
            LifecycleEvent::RegisteredV2(e) => Some(Self::from_event_v2(e)),
            _ => None,
        }
    }
}

/// Decodes a `REGISTERED` or `REGISTERED_V2` payload (by `kind`) into a [`Registration`];
/// accepts exactly what [`decode`] accepts for that kind, and gives `Registration::of` what it
/// decodes.
pub(crate) fn registration(
    kind: u16,
    codec_version: u8,
    payload: &[u8],
) -> Result<Registration, Malformed> {
    let v2 = match kind {
        kinds::REGISTERED => false,
        kinds::REGISTERED_V2 => true,
        _ => return Err(Malformed),
    };
    let mut r = Reader::new(codec_version, payload).ok_or(Malformed)?;
    let handle = handle(&mut r)?;
    let ids = LifecycleIds {
        running: id(&mut r)?,
        terminal: id(&mut r)?,
        lost: id(&mut r)?,
        completion: id(&mut r)?,
    };
    let (command, restart_of) = if v2 {
        (StoredCommand::read_v2(&mut r)?, option_handle(&mut r)?)
    } else {
        (StoredCommand::read(&mut r)?, None)
    };
    let registration = Registration {
        handle,
        ids,
        command,
        restart_of,
        at_unix_ms: r.u64()?,
    };
    r.finish()?;
    Ok(registration)
}

// Inlined into `decode`, and `decode` into its callers, so that the event (280 bytes, the size of
// its largest variant) is built where the caller keeps it instead of being copied out twice. The
// family readers it dispatches to are inlined into it for the same reason.
#[inline(always)]
fn event(kind: u16, r: &mut Reader<'_>) -> Result<LifecycleEvent, Malformed> {
    match kind {
        kinds::REGISTERED | kinds::REGISTERED_V2 => registration_event(kind, r),
        kinds::RUNNING
        | kinds::STOP_REQUESTED
        | kinds::INPUT_CLOSED
        | kinds::OUTPUT_CHECKPOINT
        | kinds::TERMINAL
        | kinds::LOST_ON_RESTORE => process_event(kind, r),
        kinds::LIFECYCLE_PUBLISHED
        | kinds::COMPLETION_NOTIFIED
        | kinds::GATE_CHANGED
        | kinds::HUMAN_INPUT
        | kinds::DEADLINE_FIRED
        | kinds::DEADLINE_FAILED => control_event(kind, r),
        _ => Err(Malformed),
    }
}

/// A manifest's reserved follow-up IDs, as a registration carries them.
fn ids(r: &mut Reader<'_>) -> Result<LifecycleIds, Malformed> {
    Ok(LifecycleIds {
        running: id(r)?,
        terminal: id(r)?,
        lost: id(r)?,
        completion: id(r)?,
    })
}

/// The registrations: `Registered` and `RegisteredV2`.
#[inline(always)]
fn registration_event(kind: u16, r: &mut Reader<'_>) -> Result<LifecycleEvent, Malformed> {
    Ok(match kind {
        kinds::REGISTERED => LifecycleEvent::Registered(Registered {
            handle: handle(r)?,
            ids: ids(r)?,
            command: command(r)?,
            at_unix_ms: r.u64()?,
        }),
        kinds::REGISTERED_V2 => LifecycleEvent::RegisteredV2(RegisteredV2 {
            handle: handle(r)?,
            ids: ids(r)?,
            command: Box::new(command_v2(r)?),
            restart_of: option_handle(r)?,
            at_unix_ms: r.u64()?,
        }),
        _ => return Err(Malformed),
    })
}

/// The events of a registered process's life, from running to its end.
#[inline(always)]
fn process_event(kind: u16, r: &mut Reader<'_>) -> Result<LifecycleEvent, Malformed> {
    Ok(match kind {
        kinds::RUNNING => LifecycleEvent::Running(Running {
            handle: handle(r)?,
            pid: r.u32()?,
            witness: IdentityWitness {
                start_time_ticks: r.u64()?,
                boot_id: r.bytes16()?,
            },
            at_unix_ms: r.u64()?,
        }),
        kinds::STOP_REQUESTED => LifecycleEvent::StopRequested(StopRequested {
            handle: handle(r)?,
            reason: string(r)?,
            requested_by: string(r)?,
            at_unix_ms: r.u64()?,
        }),
        kinds::INPUT_CLOSED => LifecycleEvent::InputClosed(InputClosed {
            handle: handle(r)?,
            at_unix_ms: r.u64()?,
        }),
        kinds::OUTPUT_CHECKPOINT => LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
            handle: handle(r)?,
            bounds: bounds(r)?,
            at_unix_ms: r.u64()?,
        }),
        kinds::TERMINAL => LifecycleEvent::Terminal(Terminal {
            handle: handle(r)?,
            state: state(r)?,
            exit: exit(r)?,
            bounds: bounds(r)?,
            capture: capture(r)?,
            reason: string(r)?,
            at_unix_ms: r.u64()?,
        }),
        kinds::LOST_ON_RESTORE => LifecycleEvent::LostOnRestore(LostOnRestore {
            handle: handle(r)?,
            bounds: bounds(r)?,
            at_unix_ms: r.u64()?,
        }),
        _ => return Err(Malformed),
    })
}

/// The notices, the pause gate, the human-input marks and the deadlines.
#[inline(always)]
fn control_event(kind: u16, r: &mut Reader<'_>) -> Result<LifecycleEvent, Malformed> {
    Ok(match kind {
        kinds::LIFECYCLE_PUBLISHED => LifecycleEvent::LifecyclePublished(LifecyclePublished {
            handle: handle(r)?,
            event: id(r)?,
        }),
        kinds::COMPLETION_NOTIFIED => LifecycleEvent::CompletionNotified(CompletionNotified {
            handle: handle(r)?,
            command: id(r)?,
        }),
        kinds::GATE_CHANGED => LifecycleEvent::GateChanged(GateChanged {
            paused: r.bool()?,
            requested_by: string(r)?,
            reason: string(r)?,
            at_unix_ms: r.u64()?,
        }),
        kinds::HUMAN_INPUT => LifecycleEvent::HumanInput(HumanInput {
            handle: handle(r)?,
            waiting: r.bool()?,
            by: string(r)?,
            at_unix_ms: r.u64()?,
        }),
        kinds::DEADLINE_FIRED => LifecycleEvent::DeadlineFired(deadline_fired(r)?),
        kinds::DEADLINE_FAILED => LifecycleEvent::DeadlineFailed(deadline_failed(r)?),
        _ => return Err(Malformed),
    })
}

/// A `DeadlineFired` payload (also a manifest's `deadline` in a snapshot).
pub(super) fn deadline_fired(r: &mut Reader<'_>) -> Result<DeadlineFired, Malformed> {
    Ok(DeadlineFired {
        handle: handle(r)?,
        deadline: deadline(r)?,
        limit_ms: r.u64()?,
        clock_from_unix_ms: r.u64()?,
        at_unix_ms: r.u64()?,
    })
}

/// Smallest encoding of a `DeadlineFailed`: handle, deadline variant, empty error, time.
pub(super) const DEADLINE_FAILED_BYTES_MIN: usize = 16 + 4 + STRING_BYTES_MIN + 8;

/// A `DeadlineFailed` payload (also each of a manifest's `deadline_failures` in a snapshot).
pub(super) fn deadline_failed(r: &mut Reader<'_>) -> Result<DeadlineFailed, Malformed> {
    Ok(DeadlineFailed {
        handle: handle(r)?,
        deadline: deadline(r)?,
        error: string(r)?,
        at_unix_ms: r.u64()?,
    })
}

/// Decodes the payload of a lifecycle record of `kind`, or `Malformed` when this decoder does not
/// accept it (then the reference decoder says why, or decodes a payload this one does not read:
/// another codec version, a payload over the record cap).
#[inline(always)]
pub(crate) fn decode(
    kind: u16,
    codec_version: u8,
    payload: &[u8],
) -> Result<LifecycleEvent, Malformed> {
    let mut r = Reader::new(codec_version, payload).ok_or(Malformed)?;
    let event = event(kind, &mut r)?;
    r.finish()?;
    Ok(event)
}

/// `decode` is defined here, beside the fast decoder it tries first, so that `event.rs` (the
/// events and their reference decoder) needs nothing of this module, which reads its types.
impl LifecycleEvent {
    /// Decodes the payload of a record of `kind`. Total: any bytes give an event or an error.
    ///
    /// Reads with the fast decoder of `wire.rs`, which accepts exactly what
    /// [`LifecycleEvent::decode_reference`] accepts; whatever it does not read goes to the
    /// reference, so every error (and its text) is the reference's.
    pub fn decode(kind: u16, codec_version: u8, payload: &[u8]) -> Result<Self, EventDecodeError> {
        match decode(kind, codec_version, payload) {
            Ok(event) => Ok(event),
            Err(_) => Self::decode_reference(kind, codec_version, payload),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    /// Every fixed-size kind and a registration, through both decoders.
    #[test]
    fn agrees_with_the_reference_on_examples() {
        let h = Handle(EventId::from_bytes([7; 16]));
        let events = [
            LifecycleEvent::OutputCheckpoint(OutputCheckpoint {
                handle: h,
                bounds: CursorBounds {
                    retained_from: 3,
                    total_bytes: 9,
                },
                at_unix_ms: 12,
            }),
            LifecycleEvent::Terminal(Terminal {
                handle: h,
                state: State::Killed,
                exit: ExitStatus::Signal(9),
                bounds: CursorBounds::default(),
                capture: CaptureStatus::Failed("pipe".into()),
                reason: "killed".into(),
                at_unix_ms: 1,
            }),
            LifecycleEvent::Registered(Registered {
                handle: h,
                ids: LifecycleIds {
                    running: EventId::from_bytes([1; 16]),
                    terminal: EventId::from_bytes([2; 16]),
                    lost: EventId::from_bytes([3; 16]),
                    completion: EventId::from_bytes([4; 16]),
                },
                command: CommandSpec {
                    program: "/bin/é".into(),
                    args: vec!["a".into(), String::new()],
                    env_overrides: vec![("K".into(), "V".into())],
                    labels: BTreeMap::from([("x".into(), "y".into())]),
                    limits: Limits {
                        idle_ms: Some(5),
                        ..Limits::default()
                    },
                    ..CommandSpec::default()
                },
                at_unix_ms: 2,
            }),
        ];
        for e in events {
            let bytes = e.encode().expect("encode");
            let kind = e.kind().get();
            assert_eq!(decode(kind, codec::CODEC_VERSION, &bytes), Ok(e.clone()));
            let reference = LifecycleEvent::decode_reference(kind, codec::CODEC_VERSION, &bytes);
            assert_eq!(reference.ok(), Some(e));
            // Every strict prefix is refused by both.
            for cut in 0..bytes.len() {
                assert_eq!(
                    decode(kind, codec::CODEC_VERSION, &bytes[..cut]),
                    Err(Malformed)
                );
                assert!(
                    LifecycleEvent::decode_reference(kind, codec::CODEC_VERSION, &bytes[..cut])
                        .is_err()
                );
            }
        }
    }

    #[test]
    fn a_count_larger_than_the_payload_is_refused_without_reserving() {
        // Registered: handle and four IDs, then a program of 0 bytes, then 2^62 args.
        let mut bytes = vec![0u8; 5 * 16 + 8];
        bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
        assert_eq!(
            decode(kinds::REGISTERED, codec::CODEC_VERSION, &bytes),
            Err(Malformed)
        );
        assert!(
            LifecycleEvent::decode_reference(kinds::REGISTERED, codec::CODEC_VERSION, &bytes)
                .is_err()
        );
    }
}
