//! What a supervisor is opened with: [`SupervisorConfig`], its defaults and its checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::SupervisorError;
#[cfg(doc)]
use super::{Command, Supervisor};
use crate::admission::{AdmissionConfig, ProcTelemetry, Telemetry};
use crate::journal::{Durability, Tenure};
use crate::lifecycle::SnapshotPolicy;
use crate::limits;
use crate::spool::SpoolOptions;
use crate::tree::{GroupLauncher, Launcher};

/// Everything a supervisor is opened with, besides the host's services.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The runtime root; made absolute once at open.
    pub root: PathBuf,
    pub durability: Durability,
    /// At most this many processes are live at once (further capped by the descriptor budget:
    /// see [`limits::DESCRIPTORS_PER_PROCESS`]).
    pub max_live: usize,
    pub spool: SpoolOptions,
    /// Bytes of recent output each process keeps in memory for polls.
    pub buffer_bytes: usize,
    /// How long output is still drained after the workload exited (200 ms by default).
    pub final_drain: Duration,
    /// How often a process's durable output bounds are recorded while it writes.
    pub checkpoint_interval: Duration,
    /// Between checkpoints, a process's spool is synced (without a journal record) each time this
    /// many bytes were appended since the last sync began, so that a fast writer's output goes
    /// to disk while it runs instead of all at its next checkpoint. `None`: only checkpoints sync.
    /// The default, 8 MiB (one default spool segment), measured as fast as 16 MiB and faster
    /// than 32 MiB, whose larger final sync the workload's exit then waits for. A writer fast
    /// enough to turn its spool's window over within a `checkpoint_interval` gets no
    /// write-behind, only the removal of what retention dropped: what a sync wrote back would be
    /// dropped before the next checkpoint, which syncs at most the window.
    pub write_behind_bytes: Option<u64>,
    /// Grace between SIGTERM and SIGKILL for timeouts (stop and shutdown take their own); with
    /// [`limits::KILL_PROOF_MS`] after it, the termination's whole budget.
    pub default_grace: Duration,
    /// How long shutdown waits to join the supervisor's tasks once every process is terminal.
    pub kill_confirm: Duration,
    /// Finished processes whose spool reader stays open for polls.
    pub finished_readers_cached: usize,
    /// Where the boot id is read when a recorded tree is assessed (a different boot proves
    /// the former lifetime over); tests point it at a file to simulate a reboot.
    pub boot_id_source: PathBuf,
    /// How workloads are launched into trees (replaceable to inject faults in tests).
    pub launcher: Arc<dyn Launcher>,
    /// When snapshots of the manifests are written (and the journal compacted below them): in
    /// the background while the journal grows, and at a clean shutdown.
    pub snapshots: SnapshotPolicy,
    /// Output of a finished process whose exit is verified is removed once it ended this long
    /// ago (`lifecycle::retention`); `None` keeps everything (a pass at open still finishes
    /// removals a crash interrupted). Default: 7 days.
    pub retention: Option<Duration>,
    /// Soft admission: how many workloads may hold capacity at once (src/admission/). The
    /// default is automatic (70 % of cores and available memory, 2 GiB per workload); an
    /// explicit `max_concurrent` or `memory_budget_bytes` replaces it.
    pub admission: AdmissionConfig,
    /// Where admission's inputs come from: the host's cores and available memory and samples of
    /// the live trees (replaceable: tests inject the policy's inputs).
    pub telemetry: Arc<dyn Telemetry>,
    /// The login shell whose PATH-like variables a command may ask to overlay
    /// ([`Command::login_shell_overlay`]): captured once, at open (`tree::login_shell`; a
    /// change of the shell's profile takes effect at the next open). `None`: no capture, and a
    /// command that asks gets its environment unchanged, with the overlay recorded as failed.
    pub login_shell: Option<PathBuf>,
    /// Refuse to open a root whose recovery or replay found damage (lost acknowledged records,
    /// missing or bad segments, a damaged commit area, history compacted away...), with
    /// [`SupervisorError::Damaged`], before anything is reconciled or started. Off (the
    /// default), such a root opens, the damage is logged once (a warning) and kept for
    /// [`Supervisor::damage`]. A crash's residue (a torn tail, say) is never damage.
    pub strict: bool,
    /// The group (a gid) the root is shared with, read-only (`02750`, files `0640`); `None`
    /// keeps a root as it is (a new one private, `0700` and `0600`). See `crate::root`.
    pub group: Option<u32>,
    /// How long this supervisor is meant to live: [`Tenure::Brief`] for one command (the CLI's
    /// `run` and `capture`), whose open leaves the journal's index and the settled manifests on
    /// the heap instead of spilling them (see [`Tenure`]). [`Tenure::Lasting`] by default.
    pub tenure: Tenure,
}

impl SupervisorConfig {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SupervisorConfig {
            root: root.into(),
            durability: Durability::Group,
            max_live: limits::LIVE_PROCESSES_DEFAULT,
            spool: SpoolOptions::default(),
            buffer_bytes: 64 * 1024,
            final_drain: Duration::from_millis(200),
            checkpoint_interval: Duration::from_secs(1),
            write_behind_bytes: Some(8 * 1024 * 1024),
            default_grace: Duration::from_millis(limits::GRACE_MS_DEFAULT),
            kill_confirm: Duration::from_secs(5),
            finished_readers_cached: limits::FINISHED_READERS_CACHED_DEFAULT,
            boot_id_source: PathBuf::from("/proc/sys/kernel/random/boot_id"),
            launcher: Arc::new(GroupLauncher),
            snapshots: SnapshotPolicy::default(),
            retention: Some(Duration::from_millis(limits::RETENTION_AGE_DEFAULT_MS)),
            admission: AdmissionConfig::default(),
            telemetry: Arc::new(ProcTelemetry),
            login_shell: None,
            strict: false,
            group: None,
            tenure: Tenure::Lasting,
        }
    }

    /// The spool of a process that keeps `retention` bytes of output (`None`, for a process
    /// recorded before retention was: the default). Its segments grow with its retention so that
    /// it holds at most [`limits::RETENTION_SEGMENTS_MAX`] sealed segments, so any retention
    /// costs the per-segment state the default costs.
    pub(crate) fn spool_for(&self, retention: Option<u64>) -> SpoolOptions {
        let retention_bytes = retention.unwrap_or(self.spool.retention_bytes);
        SpoolOptions {
            segment_bytes: self
                .spool
                .segment_bytes
                .max(retention_bytes.div_ceil(limits::RETENTION_SEGMENTS_MAX)),
            retention_bytes,
        }
    }

    /// Refuses a configuration no process could honour.
    pub(super) fn check(&self) -> Result<(), SupervisorError> {
        self.admission.check().map_err(SupervisorError::Config)?;
        let (min, max) = (self.spool.segment_bytes, limits::RETENTION_BYTES_MAX);
        if min == 0 || !(min..=max).contains(&self.spool.retention_bytes) {
            return Err(SupervisorError::Config(format!(
                "spool.retention_bytes {} is out of range (one segment, {min}, to {max}); \
                 spool.segment_bytes must be positive",
                self.spool.retention_bytes
            )));
        }
        Ok(())
    }
}
