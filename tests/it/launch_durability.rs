//! What the journal holds when a guardian's gate opens, and how soon the rest follows.
//!
//! A launch behind a gate flushes its registration while the guardian is forked, and writes its
//! scope without a flush of its own before it lets the workload exec. A real supervisor with the
//! real guardian, under `Durability::Group` and services that hear nothing (as every surface of
//! the CLI), launches through a launcher that wraps the guardian's and looks at the journal at
//! the moment the gate would open: the launch's registration must be durable by then, and its
//! scope written. (Not everything written before the scope: the previous command's publication
//! records, appended by a task of their own, may land between the two without a flush.) Then,
//! with nothing else appending, the scope must become durable on its own while the command
//! still runs (the acknowledgement of `running` at the publication delay), not wait for the
//! command's end.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use procjournal::journal::Journal;
use procjournal::lifecycle::event::kinds;
use procjournal::lifecycle::{Handle, State};
use procjournal::supervisor::{Command, Services, Supervisor, SupervisorConfig};
use procjournal::tree::{
    GuardianLauncher, GuardianProgram, Launcher, Register, SpawnError, SpawnSpec, Spawned,
    TreeScope,
};

/// A hang guard: bounds a wait for a condition, measures nothing.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The journal as the gate opened: what was durable once `register` returned, and what was
/// written by then.
#[derive(Debug, Clone, Copy)]
struct AtGate {
    durable: u64,
    written: u64,
}

/// The guardian's launcher, noting the journal's seqs around `register`.
#[derive(Debug)]
struct Watching {
    inner: GuardianLauncher,
    journal: Arc<OnceLock<Arc<Journal>>>,
    seen: Arc<Mutex<Vec<AtGate>>>,
}

impl Launcher for Watching {
    fn gates(&self) -> bool {
        true
    }

    fn launch(&self, spec: &SpawnSpec, register: &mut Register<'_>) -> Result<Spawned, SpawnError> {
        let journal = self.journal.get().expect("the journal, set after open");
        let mut wrapped = |scope: &TreeScope| {
            let registered = register(scope);
            // What the guardian's gate opens on: `GO` follows this return at once.
            let at = AtGate {
                durable: journal.durable_seq(),
                written: journal.last_seq(),
            };
            self.seen.lock().unwrap().push(at);
            registered
        };
        self.inner.launch(spec, &mut wrapped)
    }

    fn release(&self) {
        self.inner.release();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_opens_on_a_durable_registration_and_the_scope_follows_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let program = GuardianProgram::Path(env!("CARGO_BIN_EXE_procjournal-guardian").into());
    let journal = Arc::new(OnceLock::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let root = dir.path().join("root");
    let mut config = SupervisorConfig::new(&root);
    config.launcher = Arc::new(Watching {
        inner: GuardianLauncher::new(program).unwrap(),
        journal: Arc::clone(&journal),
        seen: Arc::clone(&seen),
    });
    let (sup, _) = Supervisor::open(config, Services::noop()).await.unwrap();
    journal.set(sup.journal()).unwrap();
    // Several launches, one after another: whether a flush not waited for would have ended
    // before the gate opened depends on the disk, so one launch could pass by luck.
    for n in 1..=LAUNCHES {
        let command = Command::new("sleep").arg("600").cwd(dir.path());
        let handle = sup.start(sup.prepare(command).unwrap()).await.unwrap();
        let at = *seen
            .lock()
            .unwrap()
            .last()
            .expect("the launch reached its gate");
        assert_eq!(seen.lock().unwrap().len(), n, "one gate per launch");
        let (registered, scoped) = seqs_of(&root, handle);
        assert!(
            at.durable >= registered,
            "launch {n}: the gate opened before its registration (seq {registered}) was \
             durable: {at:?}"
        );
        assert!(
            scoped <= at.written,
            "launch {n}: its scope (seq {scoped}) was not written by the gate: {at:?}"
        );
        scope_durable_while_it_runs(&sup, at).await;
        let manifest = sup.manifest(&handle).expect("the manifest");
        assert!(manifest.scope.is_some(), "the scope is recorded");
        assert!(
            !manifest.state.is_terminal(),
            "it still runs: {:?}",
            manifest.state
        );
        sup.stop(&handle, Duration::from_secs(5)).await.unwrap();
    }
    sup.shutdown(Duration::from_secs(5)).await;
}

/// Launches checked, each after the last one ended.
const LAUNCHES: usize = 5;

/// The seqs of `handle`'s registration and scope in the journal under `root`.
fn seqs_of(root: &std::path::Path, handle: Handle) -> (u64, u64) {
    let records = crate::common::supervisor::journal_records(root);
    let seq = |what: &str, is: &dyn Fn(&crate::common::supervisor::Rec) -> bool| {
        records
            .iter()
            .find(|r| r.event.handle() == Some(handle) && is(r))
            .map(|r| r.seq)
            .unwrap_or_else(|| panic!("no {what} of {handle}"))
    };
    (
        seq("registration", &|r| r.event.is_registration()),
        seq("scope", &|r| r.kind == kinds::SCOPED),
    )
}

/// Waits until everything written by `at`'s gate is durable. Nothing else appends while the
/// command sleeps: only the launch's own acknowledgement can make its scope durable before the
/// command ends.
async fn scope_durable_while_it_runs(sup: &Supervisor, at: AtGate) {
    let start = Instant::now();
    while sup.journal().durable_seq() < at.written {
        assert!(
            start.elapsed() < HANG_GUARD,
            "the scope was never made durable while the command ran: {at:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A launch waits for its registration's flush without waiting for the blocking thread that
/// started it: on a runtime whose blocking pool is one thread, the launch holds that thread,
/// and a launch that waited for a second one would never end.
#[test]
fn a_launch_on_a_one_thread_blocking_pool_does_not_wait_for_a_second_thread() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let program = GuardianProgram::Path(env!("CARGO_BIN_EXE_procjournal-guardian").into());
    let mut config = SupervisorConfig::new(dir.path().join("root"));
    config.launcher = Arc::new(GuardianLauncher::new(program).unwrap());
    let launched = async {
        let (sup, _) = Supervisor::open(config, Services::noop()).await.unwrap();
        let command = Command::new("true").cwd(dir.path());
        let handle = sup.start(sup.prepare(command).unwrap()).await.unwrap();
        let ran = sup.wait(&handle, None).await.unwrap();
        sup.shutdown(Duration::from_secs(5)).await;
        ran
    };
    let done = runtime.block_on(async { tokio::time::timeout(HANG_GUARD, launched).await });
    // Not a plain drop, which would wait for a hung blocking thread for ever.
    runtime.shutdown_timeout(Duration::from_secs(5));
    let result = done.expect("the launch hung on its own blocking pool");
    assert_eq!(result.state, State::Exited, "{result:?}");
}
