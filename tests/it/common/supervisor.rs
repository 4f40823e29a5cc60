//! Helpers shared by the supervisor integration tests (`supervisor_states.rs`,
//! `supervisor_races.rs`): temp roots, configs, commands, journal scans and replays, a counting
//! lease, sequenced channel services, and a guard that kills what a failed test left running.
//!
//! `tests/embedded_guardian.rs`, a binary of its own, includes it by path and uses a part of it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use procjournal::Durability;
use procjournal::journal::reader::JournalReader;
use procjournal::lifecycle::event::kinds;
use procjournal::lifecycle::{Handle, LifecycleEvent, ManifestStore, ReplayReport, Replayer};
use procjournal::supervisor::{
    Command, Completion, CompletionNotifier, Lease, LifecycleNotice, LifecyclePublisher,
    ServiceError, ServiceEvent, Services, Supervisor, SupervisorConfig,
};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// A hang guard for awaits that must finish; it bounds a hang, it does not measure anything.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A fresh runtime root. Prefers /dev/shm (tmpfs: fsyncs and the journal's preallocation cost
/// nothing there) and falls back to the default temp dir.
pub fn temp_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("procjournal-sup-")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::Builder::new()
        .prefix("procjournal-sup-")
        .tempdir()
        .expect("temp dir")
}

/// A config for tests: `Durability::Os` (durability is not what these tests are about).
pub fn config(root: &Path) -> SupervisorConfig {
    let mut config = SupervisorConfig::new(root.join("rt"));
    config.durability = Durability::Os;
    // Supervision, not admission, is under test: an explicit host limit (the live bound's
    // default), so that the machine's cores and memory do not decide how many run at once.
    config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
        procjournal::limits::LIVE_PROCESSES_DEFAULT,
    );
    config
}

/// Opens a supervisor with channel services on a fresh root (nothing to restore).
pub async fn open(
    config: SupervisorConfig,
) -> (
    Supervisor,
    tokio::sync::mpsc::UnboundedReceiver<ServiceEvent>,
) {
    let (services, rx) = Services::channel();
    let (sup, report) = Supervisor::open(config, services)
        .await
        .expect("open supervisor");
    assert!(
        report.reconciled.is_empty() && report.errors.is_empty(),
        "{report:?}"
    );
    (sup, rx)
}

/// Prepares and starts `command`, panicking if either fails.
pub async fn start(sup: &Supervisor, command: Command) -> Handle {
    let prepared = sup.prepare(command).expect("prepare");
    match sup.start(prepared).await {
        Ok(h) => h,
        Err(e) => panic!("start failed: {e}"),
    }
}

/// `sh -c script` in `cwd`.
pub fn sh(cwd: &Path, script: &str) -> Command {
    Command::new("sh").arg("-c").arg(script).cwd(cwd)
}

/// Awaits `fut`, panicking with `what` if it hangs.
pub async fn guarded<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, fut).await {
        Ok(v) => v,
        Err(_) => panic!("hung: {what}"),
    }
}

/// One lifecycle record of the journal, decoded.
#[derive(Debug, Clone)]
pub struct Rec {
    pub seq: u64,
    pub kind: u16,
    pub event: LifecycleEvent,
}

/// Every lifecycle record of the journal under `root`, decoded (panics on an undecodable one).
pub fn journal_records(root: &Path) -> Vec<Rec> {
    let reader = JournalReader::open(root).expect("open journal reader");
    let mut out = Vec::new();
    let report = reader
        .scan(1, |r| {
            if LifecycleEvent::is_lifecycle_kind(r.kind) {
                let event = LifecycleEvent::decode(r.kind, r.codec_version, r.payload)
                    .unwrap_or_else(|e| panic!("undecodable record seq {}: {e}", r.position.seq));
                out.push(Rec {
                    seq: r.position.seq,
                    kind: r.kind,
                    event,
                });
            }
        })
        .expect("scan journal");
    assert!(
        report.duplicate_ids.is_empty(),
        "duplicate ids: {:?}",
        report.duplicate_ids
    );
    assert!(
        out.windows(2).all(|w| w[0].seq < w[1].seq),
        "records out of seq order"
    );
    out
}

/// Kinds of the lifecycle records of `handle`, in journal order.
pub fn kinds_of(records: &[Rec], handle: &Handle) -> Vec<u16> {
    records
        .iter()
        .filter(|r| r.event.handle() == Some(*handle))
        .map(|r| r.kind)
        .collect()
}

/// Counts of each lifecycle kind per handle (root-level records, the pause gate's, are not
/// counted).
pub fn kind_counts(records: &[Rec]) -> BTreeMap<Handle, BTreeMap<u16, usize>> {
    let mut out: BTreeMap<Handle, BTreeMap<u16, usize>> = BTreeMap::new();
    for r in records {
        let Some(handle) = r.event.handle() else {
            continue;
        };
        *out.entry(handle).or_default().entry(r.kind).or_default() += 1;
    }
    out
}

pub fn kind_name(kind: u16) -> &'static str {
    match kind {
        kinds::REGISTERED | kinds::REGISTERED_V2 => "registered",
        kinds::RUNNING => "running",
        kinds::STOP_REQUESTED => "stop_requested",
        kinds::INPUT_CLOSED => "input_closed",
        kinds::OUTPUT_CHECKPOINT => "output_checkpoint",
        kinds::TERMINAL => "terminal",
        kinds::LOST_ON_RESTORE => "lost_on_restore",
        kinds::LIFECYCLE_PUBLISHED => "lifecycle_published",
        kinds::COMPLETION_NOTIFIED => "completion_notified",
        kinds::SCOPED => "scoped",
        kinds::TREE_RELEASED => "tree_released",
        _ => "other",
    }
}

/// A fresh replay of the journal under `root` into manifests, independent of any supervisor.
pub fn replay(root: &Path) -> (ManifestStore, ReplayReport) {
    let reader = JournalReader::open(root).expect("open journal reader");
    let mut replayer = Replayer::default();
    reader
        .scan(1, |r| replayer.feed(&r))
        .expect("scan journal for replay");
    replayer.finish()
}

/// A global order of things that happened in a test (lease releases, service calls).
#[derive(Debug, Clone, Default)]
pub struct Clock(Arc<AtomicU64>);

impl Clock {
    pub fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// A lease that counts its releases and records when (on the [`Clock`]) the last one happened.
#[derive(Debug)]
pub struct CountingLease {
    pub probe: LeaseProbe,
    pub clock: Clock,
}

/// What the test keeps of a [`CountingLease`] after handing it to the supervisor.
#[derive(Debug, Clone, Default)]
pub struct LeaseProbe {
    releases: Arc<AtomicUsize>,
    released_at: Arc<AtomicU64>,
}

impl LeaseProbe {
    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }
    /// Clock tick of the (last) release; 0 if never released.
    pub fn released_at(&self) -> u64 {
        self.released_at.load(Ordering::SeqCst)
    }
}

impl CountingLease {
    pub fn boxed(clock: &Clock) -> (Box<dyn Lease>, LeaseProbe) {
        let probe = LeaseProbe::default();
        let lease = CountingLease {
            probe: probe.clone(),
            clock: clock.clone(),
        };
        (Box::new(lease), probe)
    }
}

impl Lease for CountingLease {
    fn release(self: Box<Self>) {
        let at = self.clock.tick();
        self.probe.released_at.store(at, Ordering::SeqCst);
        self.probe.releases.fetch_add(1, Ordering::SeqCst);
    }
}

/// Channel services that stamp every call with a [`Clock`] tick taken inside the call (so the
/// order is the order of the calls, not of the receiving).
#[derive(Debug)]
struct SequencedSink {
    clock: Clock,
    tx: UnboundedSender<(u64, ServiceEvent)>,
}

impl LifecyclePublisher for SequencedSink {
    fn publish(&self, notice: &LifecycleNotice) -> Result<(), ServiceError> {
        let at = self.clock.tick();
        self.tx
            .send((at, ServiceEvent::Published(notice.clone())))
            .map_err(|_| ServiceError("receiver gone".to_owned()))
    }
}

impl CompletionNotifier for SequencedSink {
    fn notify(&self, completion: &Completion) -> Result<(), ServiceError> {
        let at = self.clock.tick();
        self.tx
            .send((at, ServiceEvent::Completed(completion.clone())))
            .map_err(|_| ServiceError("receiver gone".to_owned()))
    }
}

pub fn sequenced_services(clock: &Clock) -> (Services, UnboundedReceiver<(u64, ServiceEvent)>) {
    let (tx, rx) = unbounded_channel();
    let sink = Arc::new(SequencedSink {
        clock: clock.clone(),
        tx,
    });
    (
        Services {
            publisher: sink.clone(),
            notifier: sink,
        },
        rx,
    )
}

/// Receives service events until a `Completed` for `handle` arrives; returns it and keeps every
/// other event in `seen`.
pub async fn completed_of(
    rx: &mut UnboundedReceiver<ServiceEvent>,
    seen: &mut Vec<ServiceEvent>,
    handle: &Handle,
) -> Completion {
    if let Some(c) = seen.iter().find_map(|e| match e {
        ServiceEvent::Completed(c) if c.handle == *handle => Some(c.clone()),
        _ => None,
    }) {
        return c;
    }
    guarded("completion notification", async {
        loop {
            let event = rx.recv().await.expect("services channel closed");
            seen.push(event.clone());
            if let ServiceEvent::Completed(c) = event
                && c.handle == *handle
            {
                return c;
            }
        }
    })
    .await
}

/// Kills (SIGKILL to the group) every process of `handles` that is still non-terminal when the
/// guard is dropped, so that a failing test leaves nothing running.
#[derive(Debug)]
pub struct KillGuard {
    pub supervisor: Supervisor,
    pub handles: Vec<Handle>,
}

impl KillGuard {
    pub fn new(supervisor: &Supervisor) -> Self {
        KillGuard {
            supervisor: supervisor.clone(),
            handles: Vec::new(),
        }
    }
    pub fn watch(&mut self, handle: Handle) -> Handle {
        self.handles.push(handle);
        handle
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        for h in &self.handles {
            if let Some(m) = self.supervisor.manifest(h)
                && !m.state.is_terminal()
                && let Some(pid) = m.pid
                && let Ok(pid) = i32::try_from(pid)
            {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Standard base64 with padding, written independently of the crate's encoder.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A launcher of process groups whose tree led by `pgid` cannot be signalled (set by the test,
/// or, with `first`, to the first tree launched); every other tree gets the real signals.
#[derive(Debug, Default)]
pub struct Unsignallable {
    pub pgid: Arc<std::sync::Mutex<Option<u32>>>,
    pub first: bool,
}

#[derive(Debug)]
struct FailingTree {
    inner: Arc<dyn procjournal::tree::ProcessTree>,
    pgid: Arc<std::sync::Mutex<Option<u32>>>,
}

impl procjournal::tree::ProcessTree for FailingTree {
    fn mechanism(&self) -> procjournal::tree::Mechanism {
        self.inner.mechanism()
    }
    fn identity(&self) -> procjournal::tree::Identity {
        self.inner.identity()
    }
    fn signal(&self, signal: procjournal::tree::TreeSignal) -> std::io::Result<()> {
        let pid = self.inner.identity().pid;
        if *self.pgid.lock().expect("lock") == Some(pid) {
            return Err(std::io::Error::other(format!(
                "injected: cannot send {} to {pid}",
                signal.name()
            )));
        }
        self.inner.signal(signal)
    }
    fn wait_leader(
        &self,
    ) -> procjournal::tree::TreeFuture<'_, std::io::Result<procjournal::tree::LeaderExit>> {
        self.inner.wait_leader()
    }
    fn members(&self) -> std::io::Result<usize> {
        self.inner.members()
    }
    fn surely_empty(&self) -> bool {
        self.inner.surely_empty()
    }
    fn wait_empty(&self) -> procjournal::tree::TreeFuture<'_, ()> {
        self.inner.wait_empty()
    }
}

impl procjournal::tree::Launcher for Unsignallable {
    fn launch(
        &self,
        spec: &procjournal::tree::SpawnSpec,
        register: &mut procjournal::tree::Register<'_>,
    ) -> Result<procjournal::tree::Spawned, procjournal::tree::SpawnError> {
        let mut spawned = procjournal::tree::GroupLauncher.launch(spec, register)?;
        if self.first {
            let pid = spawned.tree.identity().pid;
            self.pgid.lock().expect("lock").get_or_insert(pid);
        }
        spawned.tree = Arc::new(FailingTree {
            inner: spawned.tree,
            pgid: Arc::clone(&self.pgid),
        });
        Ok(spawned)
    }
}

/// Every file under `dir` (recursively) that contains `needle`: the secrets tests scan a whole
/// root with it (the tests of the binary's secrets, so only with it).
#[cfg(feature = "cli")]
pub fn files_containing(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let bytes = std::fs::read(entry.path()).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(entry.path());
                }
            }
        }
    }
    found
}

/// `handle`'s tree was proven gone by its guardian's receipt.
pub fn assert_released_by_receipt(sup: &Supervisor, handle: &procjournal::Handle) {
    let released = sup.manifest(handle).unwrap().released;
    assert!(
        matches!(
            released,
            Some(procjournal::lifecycle::event::ExitProof::Receipt { .. })
        ),
        "{released:?}"
    );
}
