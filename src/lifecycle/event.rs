//! The lifecycle events the supervisor appends, one journal record each.
//!
//! Each event kind has a fixed journal kind number ([`LifecycleEvent::kind`]) and a payload encoded
//! by [`crate::codec`]; golden-byte tests below fail if the bytes of any kind ever change. Numbers
//! are assigned once and never reused; enum order is irrelevant to the bytes of the record kind,
//! but the payload of each kind is a struct whose field order is part of the format.

use std::collections::BTreeMap;

use serde::Serialize;

use super::state::State;
use crate::codec::{self, CodecError, Decode, Encode};
use crate::journal::{EventId, EventKind};

/// The opaque identity of one supervised process; allocated by the supervisor, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
pub struct Handle(pub EventId);

/// Handles appear in JSON as their display form, the same string the CLI prints.
impl Serialize for Handle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The schema of the display form, for the MCP tools' output schemas.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Handle {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Handle".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^p-[0-9a-f]{32}$",
            "description": "A process handle: p- and 32 lowercase hex digits.",
        })
    }
}

impl<'de> serde::Deserialize<'de> for Handle {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "p-{}", self.0.0.simple())
    }
}

/// A string that is not a handle's display form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a process handle (p- and 32 lowercase hex digits)")]
pub struct HandleParseError(pub String);

/// Parses exactly the display form (`p-` and 32 lowercase hex digits), so every handle has one
/// spelling: clients compare handles as strings.
impl std::str::FromStr for Handle {
    type Err = HandleParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || HandleParseError(text.chars().take(80).collect());
        let hex = text.strip_prefix("p-").ok_or_else(err)?;
        if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(err());
        }
        let uuid = uuid::Uuid::try_parse(hex).map_err(|_| err())?;
        Ok(Handle(EventId(uuid)))
    }
}

/// Event IDs allocated at registration for every later lifecycle step that happens at most once,
/// so that a retried append of that step is a no-op at the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct LifecycleIds {
    pub running: EventId,
    pub terminal: EventId,
    pub lost: EventId,
    /// The command ID under which completion is notified.
    pub completion: EventId,
}

/// Limits the host asked for; `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct Limits {
    pub wall_clock_ms: Option<u64>,
    pub idle_ms: Option<u64>,
    pub output_retention_bytes: Option<u64>,
}

/// What to run, as registered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct CommandSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: String,
    /// Variables set on top of the launch environment, in the order given.
    pub env_overrides: Vec<(String, String)>,
    pub labels: BTreeMap<String, String>,
    pub limits: Limits,
    /// Who asked for the process (a host-defined principal).
    pub owner: String,
}

/// Proof of which process a pid named: its start time in clock ticks since boot (from
/// /proc/PID/stat) and the boot it belongs to. A pid alone can be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct IdentityWitness {
    pub start_time_ticks: u64,
    pub boot_id: [u8; 16],
}

/// Byte cursors of the combined output stream. Invariant: `retained_from <= total_bytes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct CursorBounds {
    pub retained_from: u64,
    pub total_bytes: u64,
}

impl CursorBounds {
    pub fn is_valid(&self) -> bool {
        self.retained_from <= self.total_bytes
    }
    /// True when neither cursor moved backwards from `earlier`.
    pub fn extends(&self, earlier: &CursorBounds) -> bool {
        self.retained_from >= earlier.retained_from && self.total_bytes >= earlier.total_bytes
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Encode, Decode)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// No status could be observed (spawn failure, lost on restore).
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
#[serde(rename_all = "snake_case")]
pub enum CaptureStatus {
    /// Both streams reached EOF and every byte is in the spool.
    Complete,
    /// Capture ended before EOF (final drain elapsed, limit hit); the reason says which.
    Incomplete(String),
    /// Capture failed; the reason says how.
    Failed(String),
}

/// The registration of kind 0x0101, which earlier versions wrote: its overrides' values are all
/// in the journal. Still replayed; the supervisor now writes [`RegisteredV2`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct Registered {
    pub handle: Handle,
    pub ids: LifecycleIds,
    pub command: CommandSpec,
    pub at_unix_ms: u64,
}

/// Where a launch environment started from (journal-format.md, "Lifecycle events").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Encode, Decode)]
#[serde(rename_all = "snake_case")]
pub enum EnvBase {
    /// The supervisor's own environment.
    Inherited,
    /// An environment the embedding host gave explicitly.
    Explicit,
    /// The environment of the client that asked (`procjournal start`), as a shell would run it.
    Client,
}

/// What became of the overlay of PATH-like variables captured from a login shell.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum EnvOverlay {
    /// Not asked for.
    Off,
    /// Applied: the names it set (a subset of the overlay's list).
    Applied { names: Vec<String> },
    /// Asked for but unavailable (the capture failed, timed out, ...): the environment is as
    /// it would be without the overlay.
    Failed { reason: String },
}

/// As JSON: `{"status": "off"|"applied"|"failed", "names": [...], "reason": null|"..."}`, every
/// key always present.
impl Serialize for EnvOverlay {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (status, names, reason): (&str, &[String], Option<&str>) = match self {
            EnvOverlay::Off => ("off", &[], None),
            EnvOverlay::Applied { names } => ("applied", names, None),
            EnvOverlay::Failed { reason } => ("failed", &[], Some(reason)),
        };
        let mut s = serializer.serialize_struct("EnvOverlay", 3)?;
        s.serialize_field("status", status)?;
        s.serialize_field("names", names)?;
        s.serialize_field("reason", &reason)?;
        s.end()
    }
}

/// Which launch-environment policy applied to a process. Names only: no value of any variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct EnvPolicy {
    pub base: EnvBase,
    /// The Git redirection variables the base (and overlay) held and the policy removed, in the
    /// order of `environment::GIT_REDIRECTION` (an override of the same name set it again).
    pub removed: Vec<String>,
    pub overlay: EnvOverlay,
}

/// One environment override as the journal keeps it: its value only when the caller marked it
/// persistable (`None`: the value was never written; a restart must be given it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct EnvVar {
    pub name: String,
    pub value: Option<String>,
}

/// What to run, as a `RegisteredV2` event records it: a [`CommandSpec`] whose overrides keep only
/// persistable values, with the environment policy that applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct CommandSpecV2 {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: String,
    /// Variables set on top of the launch environment, in the order given.
    pub env_overrides: Vec<EnvVar>,
    pub labels: BTreeMap<String, String>,
    pub limits: Limits,
    pub owner: String,
    pub env_policy: EnvPolicy,
}

/// The registration the supervisor writes (kind 0x010D): as [`Registered`], with environment
/// values kept only where persistable, the policy that built the environment, and the process
/// this one restarts (none for a first start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct RegisteredV2 {
    pub handle: Handle,
    pub ids: LifecycleIds,
    /// Boxed (encoded as the `CommandSpecV2` itself) so that every `LifecycleEvent` stays the
    /// size of its largest other variant: replay moves decoded events around.
    pub command: Box<CommandSpecV2>,
    pub restart_of: Option<Handle>,
    pub at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct Running {
    pub handle: Handle,
    pub pid: u32,
    pub witness: IdentityWitness,
    pub at_unix_ms: u64,
}

/// Which mechanism owns a process's tree (recorded so that `ps` and the manifest can say it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Encode, Decode)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TreeMechanism {
    /// A process group led by the workload; a member that calls `setsid` escapes it.
    Group,
    /// A guardian subreaper: every descendant stays its descendant, and an exit receipt
    /// proves the tree gone.
    Guardian,
    /// A guardian whose workload runs in its own cgroup v2: stop freezes and kills the cgroup,
    /// and the cgroup's emptiness proves the tree gone.
    Cgroup,
}

impl TreeMechanism {
    pub fn name(self) -> &'static str {
        match self {
            TreeMechanism::Group => "group",
            TreeMechanism::Guardian => "guardian",
            TreeMechanism::Cgroup => "cgroup",
        }
    }
}

/// Which process a pid named: its start time (clock ticks since boot) and, where the kernel has
/// pidfs (Linux 6.9+), its pidfd's inode number, unique per process within one boot (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct ProcessWitness {
    pub pid: u32,
    pub start_time_ticks: u64,
    pub pidfs_ino: u64,
}

/// The receipt a guardian writes at ECHILD, as registered: the file (its path under the runtime
/// root, device and inode, created by the guardian before the workload ran) and the nonce the
/// receipt must carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct ReceiptBinding {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    #[serde(skip)]
    pub nonce: [u8; 16],
}

/// The tree's scope, persisted before the workload may exec (guardian) or right after the
/// spawn (group): everything a later supervisor needs to assess the tree without ever
/// signalling a bare pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct Scoped {
    pub handle: Handle,
    pub mechanism: TreeMechanism,
    pub boot_id: [u8; 16],
    pub workload: ProcessWitness,
    pub guardian: Option<ProcessWitness>,
    pub cgroup: Option<String>,
    pub receipt: Option<ReceiptBinding>,
    pub at_unix_ms: u64,
}

/// What proved that a whole tree has exited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum ExitProof {
    /// The guardian's receipt, verified against the registration (file identity, nonce,
    /// handle, workload witness).
    Receipt { status: ExitStatus, reaped: u64 },
    /// The workload's cgroup reports `populated 0`, or was removed from a cgroup hierarchy
    /// that is still mounted (the kernel removes only an empty cgroup).
    CgroupEmpty,
    /// The boot id differs from the one the scope was recorded under: that kernel lifetime,
    /// and every process in it, has ended.
    BootChanged,
}

/// The tree of a process is proven gone; its ownership is released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct TreeReleased {
    pub handle: Handle,
    pub proof: ExitProof,
    pub at_unix_ms: u64,
}

/// Output the spool could not keep (a write or a sync failed): the cursors of the lost bytes and
/// why. Appended before any checkpoint or terminal bounds that reach past it, so that a reader
/// of the journal tells this loss from damage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct OutputGap {
    pub handle: Handle,
    pub gap: crate::spool::Gap,
    pub at_unix_ms: u64,
}

/// A finished process's output was retired by the retention policy or `clean`: appended (and
/// acknowledged) before any of its spool files is removed, so that a crash part-way leaves a
/// record that says the output is going, and the next open finishes the removal. Allowed only
/// once the process's exit is verified ([`crate::lifecycle::Manifest::exit_verified`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct OutputRetired {
    pub handle: Handle,
    /// Why: the policy that retired it (`retention: older than 7d`, `clean: older than 1h`).
    pub reason: String,
    pub at_unix_ms: u64,
}

/// The size of a PTY launch's terminal (`Command::pty`): appended with `running` for the size it
/// was launched with, and for every resize after it, once the terminal has the new size (the
/// kernel then sends SIGWINCH to its foreground process group). Not a state change: a process
/// whose journal holds one ran under a terminal, and the newest one is its terminal's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct TerminalResized {
    pub handle: Handle,
    /// At least 1.
    pub rows: u16,
    /// At least 1.
    pub cols: u16,
    pub at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct StopRequested {
    pub handle: Handle,
    pub reason: String,
    pub requested_by: String,
    pub at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct InputClosed {
    pub handle: Handle,
    pub at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct OutputCheckpoint {
    pub handle: Handle,
    pub bounds: CursorBounds,
    pub at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct Terminal {
    pub handle: Handle,
    pub state: State,
    pub exit: ExitStatus,
    pub bounds: CursorBounds,
    pub capture: CaptureStatus,
    pub reason: String,
    pub at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct LostOnRestore {
    pub handle: Handle,
    /// The last cursor bounds known durable (from the last checkpoint).
    pub bounds: CursorBounds,
    pub at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct LifecyclePublished {
    pub handle: Handle,
    /// The lifecycle event that was published to the host's services. Named `published_event`
    /// in JSON, where `event` is [`LifecycleEvent`]'s tag (the two would be one key).
    #[serde(rename = "published_event")]
    pub event: EventId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct CompletionNotified {
    pub handle: Handle,
    pub command: EventId,
}

/// The pause gate changed (root-level: it names no process). While paused, new starts are
/// refused; processes already running go on. The projection keeps the last change, so a restart
/// (with or without a snapshot) keeps the gate as it was. A change to the state the gate is
/// already in is refused, so the journal holds only real changes, alternating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct GateChanged {
    pub paused: bool,
    pub requested_by: String,
    pub reason: String,
    pub at_unix_ms: u64,
}

/// The admission limit set at runtime (root-level: it names no process): `Some(n)`, at most
/// `n` workloads at once (an explicit host limit that replaces the automatic policy), or `None`,
/// back to the configured policy. The projection keeps the last one, so a restart (with or
/// without a snapshot) keeps the limit an operator set. A setting equal to the one in force is
/// refused, as is a limit of 0, so the journal holds only real changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct AdmissionLimitSet {
    pub max_concurrent: Option<u64>,
    pub requested_by: String,
    pub at_unix_ms: u64,
}

/// Which per-process deadline (journal-format.md, "Deadlines").
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, Encode, Decode,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Deadline {
    /// `Limits::wall_clock_ms` after the process started running.
    Wall,
    /// `Limits::idle_ms` without activity (output, input, signals), counted from the start
    /// before any activity, and not while the process waits for human input.
    Idle,
}

impl Deadline {
    pub fn name(self) -> &'static str {
        match self {
            Deadline::Wall => "wall",
            Deadline::Idle => "idle",
        }
    }
}

/// A process was marked as waiting for human input (`waiting`), which suspends its idle clock,
/// or the mark was cleared (by input written to it, or by an explicit call; `by` says which).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct HumanInput {
    pub handle: Handle,
    pub waiting: bool,
    pub by: String,
    pub at_unix_ms: u64,
}

/// A deadline of a process ran out; the supervisor stops its whole tree (TERM, grace, KILL)
/// and the process ends `timed_out`. `limit_ms` is the configured limit (the registration's);
/// `clock_from_unix_ms` is when the clock that ran out started (the start for `wall`; the last
/// activity, or the start before any, for `idle`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct DeadlineFired {
    pub handle: Handle,
    pub deadline: Deadline,
    pub limit_ms: u64,
    pub clock_from_unix_ms: u64,
    pub at_unix_ms: u64,
}

/// Enforcing a fired deadline failed (the tree could not be inspected or signalled); the
/// supervisor tries again and goes on checking the others. At most
/// `limits::DEADLINE_FAILURES_MAX` are recorded per process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct DeadlineFailed {
    pub handle: Handle,
    pub deadline: Deadline,
    pub error: String,
    pub at_unix_ms: u64,
}

/// Every lifecycle event. The journal kind number of each variant is fixed forever.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LifecycleEvent {
    Registered(Registered),
    Running(Running),
    StopRequested(StopRequested),
    InputClosed(InputClosed),
    OutputCheckpoint(OutputCheckpoint),
    Terminal(Terminal),
    LostOnRestore(LostOnRestore),
    LifecyclePublished(LifecyclePublished),
    CompletionNotified(CompletionNotified),
    Scoped(Scoped),
    TreeReleased(TreeReleased),
    OutputGap(OutputGap),
    OutputRetired(OutputRetired),
    GateChanged(GateChanged),
    HumanInput(HumanInput),
    DeadlineFired(DeadlineFired),
    DeadlineFailed(DeadlineFailed),
    TerminalResized(TerminalResized),
    RegisteredV2(RegisteredV2),
    AdmissionLimitSet(AdmissionLimitSet),
}

/// Purposes of the record IDs derived from a registration's allocated IDs
/// ([`EventId::derived`]). A record that states a fact about an allocated step (its publication,
/// the completion notice, the tree's scope and release) carries an ID that is a function of that
/// step's ID, so a retry of the same fact finds its record and a second record of it is never
/// written; the store refuses any other ID (journal-format.md, "Lifecycle events"). Fixed
/// forever, like the kinds.
pub mod derived {
    /// `LifecyclePublished`: derived from the ID of the event it reports.
    pub const PUBLISHED: u8 = 1;
    /// `CompletionNotified`: derived from `ids.completion`.
    pub const NOTIFIED: u8 = 2;
    /// `Scoped`: derived from `ids.running`.
    pub const SCOPED: u8 = 3;
    /// `TreeReleased`: derived from `ids.terminal`.
    pub const RELEASED: u8 = 4;
    /// `OutputRetired`: derived from `ids.terminal`.
    pub const RETIRED: u8 = 9;
}

/// Journal kind numbers of lifecycle events.
pub mod kinds {
    pub const REGISTERED: u16 = 0x0101;
    pub const RUNNING: u16 = 0x0102;
    pub const STOP_REQUESTED: u16 = 0x0103;
    pub const INPUT_CLOSED: u16 = 0x0104;
    pub const OUTPUT_CHECKPOINT: u16 = 0x0105;
    pub const TERMINAL: u16 = 0x0106;
    pub const LOST_ON_RESTORE: u16 = 0x0107;
    pub const LIFECYCLE_PUBLISHED: u16 = 0x0108;
    pub const COMPLETION_NOTIFIED: u16 = 0x0109;
    pub const SCOPED: u16 = 0x010A;
    pub const TREE_RELEASED: u16 = 0x010B;
    pub const OUTPUT_GAP: u16 = 0x010C;
    pub const GATE_CHANGED: u16 = 0x010E;
    pub const HUMAN_INPUT: u16 = 0x010F;
    pub const DEADLINE_FIRED: u16 = 0x0110;
    pub const DEADLINE_FAILED: u16 = 0x0111;
    pub const OUTPUT_RETIRED: u16 = 0x0112;
    pub const TERMINAL_RESIZED: u16 = 0x0113;
    pub const REGISTERED_V2: u16 = 0x010D;
    pub const ADMISSION_LIMIT_SET: u16 = 0x0114;
    /// The highest lifecycle kind: lifecycle kinds are the range from `REGISTERED` to it.
    pub const LAST: u16 = ADMISSION_LIMIT_SET;
}

/// Why a record could not be read as a lifecycle event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventDecodeError {
    #[error("kind {0:#06x} is not a lifecycle event")]
    NotLifecycle(u16),
    #[error("lifecycle payload of kind {kind:#06x}: {cause}")]
    Payload {
        kind: u16,
        // In the message, not exposed again as the error's source (chains would repeat it).
        cause: CodecError,
    },
}

impl LifecycleEvent {
    pub fn kind(&self) -> EventKind {
        let raw = match self {
            LifecycleEvent::Registered(_) => kinds::REGISTERED,
            LifecycleEvent::Running(_) => kinds::RUNNING,
            LifecycleEvent::StopRequested(_) => kinds::STOP_REQUESTED,
            LifecycleEvent::InputClosed(_) => kinds::INPUT_CLOSED,
            LifecycleEvent::OutputCheckpoint(_) => kinds::OUTPUT_CHECKPOINT,
            LifecycleEvent::Terminal(_) => kinds::TERMINAL,
            LifecycleEvent::LostOnRestore(_) => kinds::LOST_ON_RESTORE,
            LifecycleEvent::LifecyclePublished(_) => kinds::LIFECYCLE_PUBLISHED,
            LifecycleEvent::CompletionNotified(_) => kinds::COMPLETION_NOTIFIED,
            LifecycleEvent::Scoped(_) => kinds::SCOPED,
            LifecycleEvent::TreeReleased(_) => kinds::TREE_RELEASED,
            LifecycleEvent::OutputGap(_) => kinds::OUTPUT_GAP,
            LifecycleEvent::OutputRetired(_) => kinds::OUTPUT_RETIRED,
            LifecycleEvent::GateChanged(_) => kinds::GATE_CHANGED,
            LifecycleEvent::HumanInput(_) => kinds::HUMAN_INPUT,
            LifecycleEvent::DeadlineFired(_) => kinds::DEADLINE_FIRED,
            LifecycleEvent::DeadlineFailed(_) => kinds::DEADLINE_FAILED,
            LifecycleEvent::TerminalResized(_) => kinds::TERMINAL_RESIZED,
            LifecycleEvent::RegisteredV2(_) => kinds::REGISTERED_V2,
            LifecycleEvent::AdmissionLimitSet(_) => kinds::ADMISSION_LIMIT_SET,
        };
        match EventKind::new(raw) {
            Some(kind) => kind,
            None => unreachable!("lifecycle kinds are non-zero constants"),
        }
    }

    /// The event's name as its JSON form tags it (`terminal`, `registered_v2`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            LifecycleEvent::Registered(_) => "registered",
            LifecycleEvent::Running(_) => "running",
            LifecycleEvent::StopRequested(_) => "stop_requested",
            LifecycleEvent::InputClosed(_) => "input_closed",
            LifecycleEvent::OutputCheckpoint(_) => "output_checkpoint",
            LifecycleEvent::Terminal(_) => "terminal",
            LifecycleEvent::LostOnRestore(_) => "lost_on_restore",
            LifecycleEvent::LifecyclePublished(_) => "lifecycle_published",
            LifecycleEvent::CompletionNotified(_) => "completion_notified",
            LifecycleEvent::Scoped(_) => "scoped",
            LifecycleEvent::TreeReleased(_) => "tree_released",
            LifecycleEvent::OutputGap(_) => "output_gap",
            LifecycleEvent::OutputRetired(_) => "output_retired",
            LifecycleEvent::GateChanged(_) => "gate_changed",
            LifecycleEvent::HumanInput(_) => "human_input",
            LifecycleEvent::DeadlineFired(_) => "deadline_fired",
            LifecycleEvent::DeadlineFailed(_) => "deadline_failed",
            LifecycleEvent::TerminalResized(_) => "terminal_resized",
            LifecycleEvent::RegisteredV2(_) => "registered_v2",
            LifecycleEvent::AdmissionLimitSet(_) => "admission_limit_set",
        }
    }

    pub fn is_lifecycle_kind(kind: u16) -> bool {
        (kinds::REGISTERED..=kinds::LAST).contains(&kind)
    }

    /// Whether this is a registration (of either kind).
    #[cfg(any(test, feature = "test-support"))]
    pub fn is_registration(&self) -> bool {
        matches!(
            self,
            LifecycleEvent::Registered(_) | LifecycleEvent::RegisteredV2(_)
        )
    }

    /// The process the event is about; `None` for a root-level event (the pause gate, the
    /// admission limit).
    pub fn handle(&self) -> Option<Handle> {
        Some(match self {
            LifecycleEvent::Registered(e) => e.handle,
            LifecycleEvent::Running(e) => e.handle,
            LifecycleEvent::StopRequested(e) => e.handle,
            LifecycleEvent::InputClosed(e) => e.handle,
            LifecycleEvent::OutputCheckpoint(e) => e.handle,
            LifecycleEvent::Terminal(e) => e.handle,
            LifecycleEvent::LostOnRestore(e) => e.handle,
            LifecycleEvent::LifecyclePublished(e) => e.handle,
            LifecycleEvent::CompletionNotified(e) => e.handle,
            LifecycleEvent::Scoped(e) => e.handle,
            LifecycleEvent::TreeReleased(e) => e.handle,
            LifecycleEvent::OutputGap(e) => e.handle,
            LifecycleEvent::OutputRetired(e) => e.handle,
            LifecycleEvent::TerminalResized(e) => e.handle,
            LifecycleEvent::RegisteredV2(e) => e.handle,
            LifecycleEvent::HumanInput(e) => e.handle,
            LifecycleEvent::DeadlineFired(e) => e.handle,
            LifecycleEvent::DeadlineFailed(e) => e.handle,
            LifecycleEvent::GateChanged(_) | LifecycleEvent::AdmissionLimitSet(_) => return None,
        })
    }

    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        match self {
            LifecycleEvent::Registered(e) => codec::encode(e),
            LifecycleEvent::Running(e) => codec::encode(e),
            LifecycleEvent::StopRequested(e) => codec::encode(e),
            LifecycleEvent::InputClosed(e) => codec::encode(e),
            LifecycleEvent::OutputCheckpoint(e) => codec::encode(e),
            LifecycleEvent::Terminal(e) => codec::encode(e),
            LifecycleEvent::LostOnRestore(e) => codec::encode(e),
            LifecycleEvent::LifecyclePublished(e) => codec::encode(e),
            LifecycleEvent::CompletionNotified(e) => codec::encode(e),
            LifecycleEvent::Scoped(e) => codec::encode(e),
            LifecycleEvent::TreeReleased(e) => codec::encode(e),
            LifecycleEvent::OutputGap(e) => codec::encode(e),
            LifecycleEvent::OutputRetired(e) => codec::encode(e),
            LifecycleEvent::GateChanged(e) => codec::encode(e),
            LifecycleEvent::HumanInput(e) => codec::encode(e),
            LifecycleEvent::DeadlineFired(e) => codec::encode(e),
            LifecycleEvent::DeadlineFailed(e) => codec::encode(e),
            LifecycleEvent::TerminalResized(e) => codec::encode(e),
            LifecycleEvent::RegisteredV2(e) => codec::encode(e),
            LifecycleEvent::AdmissionLimitSet(e) => codec::encode(e),
        }
    }

    /// The reference decoder: bincode, through [`crate::codec::decode`]. Kept as the statement
    /// of what a payload means; the differential tests hold the fast decoder to it.
    pub fn decode_reference(
        kind: u16,
        codec_version: u8,
        payload: &[u8],
    ) -> Result<Self, EventDecodeError> {
        let v = codec_version;
        Ok(match kind {
            kinds::REGISTERED => Self::Registered(payload_of(kind, v, payload)?),
            kinds::RUNNING => Self::Running(payload_of(kind, v, payload)?),
            kinds::STOP_REQUESTED => Self::StopRequested(payload_of(kind, v, payload)?),
            kinds::INPUT_CLOSED => Self::InputClosed(payload_of(kind, v, payload)?),
            kinds::OUTPUT_CHECKPOINT => Self::OutputCheckpoint(payload_of(kind, v, payload)?),
            kinds::TERMINAL => Self::Terminal(payload_of(kind, v, payload)?),
            kinds::LOST_ON_RESTORE => Self::LostOnRestore(payload_of(kind, v, payload)?),
            kinds::LIFECYCLE_PUBLISHED => Self::LifecyclePublished(payload_of(kind, v, payload)?),
            kinds::COMPLETION_NOTIFIED => Self::CompletionNotified(payload_of(kind, v, payload)?),
            kinds::SCOPED => Self::Scoped(payload_of(kind, v, payload)?),
            kinds::OUTPUT_GAP => Self::OutputGap(payload_of(kind, v, payload)?),
            kinds::TREE_RELEASED => Self::TreeReleased(payload_of(kind, v, payload)?),
            kinds::OUTPUT_RETIRED => Self::OutputRetired(payload_of(kind, v, payload)?),
            kinds::GATE_CHANGED => Self::GateChanged(payload_of(kind, v, payload)?),
            kinds::HUMAN_INPUT => Self::HumanInput(payload_of(kind, v, payload)?),
            kinds::DEADLINE_FIRED => Self::DeadlineFired(payload_of(kind, v, payload)?),
            kinds::DEADLINE_FAILED => Self::DeadlineFailed(payload_of(kind, v, payload)?),
            kinds::TERMINAL_RESIZED => Self::TerminalResized(payload_of(kind, v, payload)?),
            kinds::REGISTERED_V2 => Self::RegisteredV2(payload_of(kind, v, payload)?),
            kinds::ADMISSION_LIMIT_SET => Self::AdmissionLimitSet(payload_of(kind, v, payload)?),
            other => return Err(EventDecodeError::NotLifecycle(other)),
        })
    }
}

/// One kind's payload through bincode, its error wrapped with the `kind` it was read as.
fn payload_of<T: Decode<()>>(
    kind: u16,
    codec_version: u8,
    payload: &[u8],
) -> Result<T, EventDecodeError> {
    codec::decode(codec_version, payload).map_err(|cause| EventDecodeError::Payload { kind, cause })
}
