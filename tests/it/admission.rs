//! Soft admission in the supervisor: real processes, with the policy's inputs
//! injected (cores, available memory, tree samples) or read from the real /proc.
//!
//! The pure policy (floor, minimum slot, incomplete and unstable samples, missing telemetry,
//! host override) is tested in src/admission/tests.rs; here the same rules reach the actor:
//! samples flow to decisions, starts fail fast or queue FIFO with a deadline, capacity is
//! released when a terminal result is recorded, and lingering trees keep theirs.

use crate::common::daemon as daemon_common;
use crate::common::supervisor as supervisor_common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use procjournal::admission::{
    AdmissionConfig, AdmissionSnapshot, Basis, HostSample, SampleState, Telemetry,
};
use procjournal::lifecycle::Handle;
use procjournal::supervisor::{Command, StartError, Supervisor, SupervisorConfig};
use procjournal::tree::{ProcessTree, TreeSample};
use supervisor_common::{KillGuard, config, guarded, open, sh, start, temp_root};

const GIB: u64 = 1 << 30;

/// The policy's inputs, set by the test: the host, and one sample given for every tree; and
/// how many times the host was read.
#[derive(Debug, Default)]
struct Injected {
    host: Mutex<HostSample>,
    tree: Mutex<Option<TreeSample>>,
    host_reads: AtomicUsize,
}

#[derive(Debug, Clone, Default)]
struct InjectedTelemetry(Arc<Injected>);

impl InjectedTelemetry {
    fn set_host(&self, cores: Option<usize>, available_bytes: Option<u64>) {
        *self.0.host.lock().unwrap() = HostSample {
            cores,
            available_bytes,
        };
    }
    fn set_tree(&self, sample: Option<TreeSample>) {
        *self.0.tree.lock().unwrap() = sample;
    }
    fn host_reads(&self) -> usize {
        self.0.host_reads.load(Ordering::SeqCst)
    }
}

impl Telemetry for InjectedTelemetry {
    fn host(&self) -> HostSample {
        self.0.host_reads.fetch_add(1, Ordering::SeqCst);
        *self.0.host.lock().unwrap()
    }
    fn trees(&self, trees: &[(Handle, Arc<dyn ProcessTree>)]) -> Vec<(Handle, TreeSample)> {
        match &*self.0.tree.lock().unwrap() {
            Some(s) => trees.iter().map(|(h, _)| (*h, s.clone())).collect(),
            None => Vec::new(),
        }
    }
}

fn admission_config(root: &Path, admission: AdmissionConfig) -> SupervisorConfig {
    let mut cfg = config(root);
    cfg.admission = AdmissionConfig {
        sample_every: Duration::from_millis(10),
        ..admission
    };
    cfg
}

/// The automatic policy's configuration, its host as given, read through the returned handle.
fn injected(
    root: &Path,
    cores: Option<usize>,
    available_bytes: Option<u64>,
) -> (SupervisorConfig, InjectedTelemetry) {
    let telemetry = InjectedTelemetry::default();
    telemetry.set_host(cores, available_bytes);
    let mut cfg = admission_config(root, AdmissionConfig::default());
    cfg.telemetry = Arc::new(telemetry.clone());
    (cfg, telemetry)
}

async fn snapshot(sup: &Supervisor) -> AdmissionSnapshot {
    sup.admission().await.expect("admission")
}

/// Polls the admission snapshot until `done` holds (bounded by the hang guard).
async fn until(
    sup: &Supervisor,
    what: &str,
    done: impl Fn(&AdmissionSnapshot) -> bool,
) -> AdmissionSnapshot {
    guarded(what, async {
        loop {
            let s = snapshot(sup).await;
            if done(&s) {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

fn sleeper(cwd: &Path) -> Command {
    Command::new("sleep").arg("60").cwd(cwd)
}

fn capacity_decision(result: Result<Handle, StartError>) -> procjournal::admission::Decision {
    match result {
        Err(StartError::Capacity { decision, prepared }) => {
            assert!(
                !prepared.spec().program.is_empty(),
                "the prepared process comes back"
            );
            *decision
        }
        other => panic!("expected a capacity refusal, got {other:?}"),
    }
}

/// The decision that refused a start of `true` in `cwd` for capacity.
async fn refused_true(sup: &Supervisor, cwd: &Path) -> procjournal::admission::Decision {
    let prepared = sup.prepare(Command::new("true").cwd(cwd)).expect("prepare");
    capacity_decision(sup.start(prepared).await)
}

/// A queued start that no capacity reaches fails at its deadline with the decision that kept it
/// waiting, and hands its prepared process back; the holder is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_start_fails_at_its_deadline() {
    let root = temp_root();
    let (sup, _rx) = open(admission_config(
        root.path(),
        AdmissionConfig::max_concurrent(1),
    ))
    .await;
    let mut guard = KillGuard::new(&sup);
    let holder = guard.watch(start(&sup, sleeper(root.path())).await);
    let waiting = Duration::from_millis(200);
    let queued = sup
        .prepare(
            Command::new("true")
                .cwd(root.path())
                .wait_for_capacity(waiting),
        )
        .expect("prepare");
    match guarded("queued start", sup.start(queued)).await {
        Err(StartError::CapacityTimeout {
            prepared,
            decision,
            waited,
        }) => {
            assert_eq!(prepared.spec().program, "true");
            assert_eq!((decision.in_use, decision.slots), (1, 1), "{decision:?}");
            assert_eq!(decision.basis, Basis::HostLimit);
            assert!(waited >= waiting, "failed before its deadline: {waited:?}");
        }
        other => panic!("expected CapacityTimeout, got {other:?}"),
    }
    let s = snapshot(&sup).await;
    assert_eq!((s.queued, s.decision.in_use), (0, 1), "{s:?}");
    assert!(
        sup.manifest(&holder)
            .is_some_and(|m| !m.state.is_terminal())
    );
    sup.shutdown(Duration::from_millis(100)).await;
}

/// Queued starts are admitted first in, first out as capacity frees, one slot at a time; a
/// fail-fast start meanwhile is refused rather than overtaking them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_starts_are_admitted_in_order() {
    let root = temp_root();
    let (sup, _rx) = open(admission_config(
        root.path(),
        AdmissionConfig::max_concurrent(1),
    ))
    .await;
    let mut guard = KillGuard::new(&sup);
    let holder = guard.watch(start(&sup, sleeper(root.path())).await);
    let order = root.path().join("order");
    let mut queued = Vec::new();
    for (i, name) in ["b", "c", "d", "e"].into_iter().enumerate() {
        let command = sh(root.path(), &format!("echo {name} >> {}", order.display()))
            .wait_for_capacity(Duration::from_secs(60));
        let prepared = sup.prepare(command).expect("prepare");
        let s = sup.clone();
        queued.push(tokio::spawn(async move { s.start(prepared).await }));
        // Enqueued in this order: each is in the queue before the next is sent.
        until(&sup, "enqueued", |s| s.queued == i + 1).await;
    }
    let fresh = sup
        .prepare(Command::new("true").cwd(root.path()))
        .expect("prepare");
    let d = capacity_decision(sup.start(fresh).await);
    assert_eq!(d.in_use, 1);
    assert_eq!(snapshot(&sup).await.queued, 4);

    guarded(
        "stop the holder",
        sup.stop(&holder, Duration::from_millis(100)),
    )
    .await
    .expect("stop");
    for task in queued {
        let handle = guarded("queued start", task)
            .await
            .expect("task")
            .expect("admitted");
        guarded("wait", sup.wait(&handle, None))
            .await
            .expect("wait");
    }
    let written = std::fs::read_to_string(&order).expect("order file");
    assert_eq!(written, "b\nc\nd\ne\n", "admitted out of order");
    let s = snapshot(&sup).await;
    assert_eq!((s.queued, s.decision.in_use), (0, 0), "{s:?}");
    sup.shutdown(Duration::from_millis(100)).await;
}

/// The host is read when a decision first depends on it, not before: commands run one at a
/// time never read it (one slot is always there), a start beside a running one reads it once
/// and is decided by it (two cores at 70 %: room for two workloads, not three), and so are the
/// starts after it, with no second read until the trees are sampled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_is_read_once_a_decision_depends_on_it() {
    let root = temp_root();
    let (mut cfg, telemetry) = injected(root.path(), Some(2), Some(64 * GIB));
    // No periodic sample in the test's time: every read is a decision's.
    cfg.admission.sample_every = Duration::from_secs(3600);
    let (sup, _rx) = open(cfg).await;
    let mut guard = KillGuard::new(&sup);
    for _ in 0..3 {
        let h = start(&sup, Command::new("true").cwd(root.path())).await;
        guarded("wait", sup.wait(&h, None)).await.expect("wait");
    }
    assert_eq!(
        telemetry.host_reads(),
        0,
        "read for starts it cannot change"
    );

    guard.watch(start(&sup, sleeper(root.path())).await);
    assert_eq!(telemetry.host_reads(), 0, "read for a start beside nothing");
    guard.watch(start(&sup, sleeper(root.path())).await);
    assert_eq!(
        telemetry.host_reads(),
        1,
        "not read for the second workload"
    );
    let d = refused_true(&sup, root.path()).await;
    assert_eq!(
        (d.basis, d.in_use, d.slots),
        (Basis::Automatic, 2, 2),
        "{d:?}"
    );
    assert_eq!(d.cores, Some(2), "{d:?}");
    let s = snapshot(&sup).await;
    assert_eq!(s.decision.available_bytes, Some(64 * GIB), "{s:?}");
    assert_eq!(telemetry.host_reads(), 1, "read again before any sample");
    drop(guard);
    sup.shutdown(Duration::from_millis(100)).await;
}

/// Samples reach decisions: a stable 10 GiB tree fills a 6 GiB host that had room for two
/// floors; an incomplete sample puts it back at the floor; no memory telemetry leaves one slot;
/// and telemetry that shows capacity again admits the queue's head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_telemetry_reaches_the_decisions() {
    let root = temp_root();
    let (cfg, telemetry) = injected(root.path(), Some(64), Some(6 * GIB));
    let (sup, _rx) = open(cfg).await;
    let mut guard = KillGuard::new(&sup);
    let a = guard.watch(start(&sup, sleeper(root.path())).await);

    // Not sampled: the floor. 70 % of 6 GiB holds two floors.
    let s = snapshot(&sup).await;
    assert_eq!(s.decision.basis, Basis::Automatic);
    assert_eq!(
        (s.decision.slots, s.decision.reserved_bytes),
        (2, 2 * GIB),
        "{s:?}"
    );

    // A complete sample of the same membership, twice: stable, 10 GiB reserved, no room.
    let big = TreeSample {
        members: vec![(4242, 1)],
        bytes: 10 * GIB,
        complete: true,
        ..TreeSample::default()
    };
    telemetry.set_tree(Some(big.clone()));
    let s = until(&sup, "stable sample", |s| {
        s.reservations
            .iter()
            .any(|r| r.sample == SampleState::Stable)
    })
    .await;
    assert_eq!(s.reservations[0].handle, a);
    assert_eq!(s.reservations[0].reserved_bytes, 10 * GIB);
    assert!(s.telemetry_complete);
    let d = refused_true(&sup, root.path()).await;
    assert_eq!(
        (d.in_use, d.slots, d.reserved_bytes),
        (1, 1, 10 * GIB),
        "{d:?}"
    );
    assert_eq!(d.observed_bytes, 10 * GIB);
    assert_eq!(d.available_bytes, Some(6 * GIB));

    // An incomplete sample keeps the floor: room again.
    telemetry.set_tree(Some(TreeSample {
        complete: false,
        ..big
    }));
    let s = until(&sup, "incomplete sample", |s| {
        s.reservations
            .iter()
            .any(|r| r.sample == SampleState::Incomplete)
    })
    .await;
    assert_eq!((s.decision.reserved_bytes, s.decision.slots), (2 * GIB, 2));
    assert!(!s.telemetry_complete);

    // No memory telemetry: one slot, taken by `a`.
    telemetry.set_host(Some(64), None);
    until(&sup, "no telemetry", |s| {
        s.decision.basis == Basis::NoMemoryTelemetry
    })
    .await;
    let d = refused_true(&sup, root.path()).await;
    assert_eq!(d.slots, 1);

    // A start queues; telemetry showing memory again admits it, with `a` still running.
    let queued = sup
        .prepare(
            Command::new("true")
                .cwd(root.path())
                .wait_for_capacity(Duration::from_secs(60)),
        )
        .expect("prepare");
    let s2 = sup.clone();
    let task = tokio::spawn(async move { s2.start(queued).await });
    until(&sup, "enqueued", |s| s.queued == 1).await;
    telemetry.set_host(Some(64), Some(100 * GIB));
    let handle = guarded("admitted by telemetry", task)
        .await
        .expect("task")
        .expect("admitted");
    guarded("wait", sup.wait(&handle, None))
        .await
        .expect("wait");
    assert!(sup.manifest(&a).is_some_and(|m| !m.state.is_terminal()));
    sup.shutdown(Duration::from_millis(100)).await;
}

/// Real `sleep` children and the real /proc telemetry: the tree of a shell and its two sleeps
/// is sampled whole (three members, their RSS), stably, and with a small floor its reservation
/// is what it uses; the count is bounded by 70 % of the detected cores, and a refused start
/// names the real inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_sleep_children_with_real_telemetry() {
    let root = temp_root();
    let mut cfg = admission_config(
        root.path(),
        AdmissionConfig {
            floor_bytes: 4096,
            ..AdmissionConfig::default()
        },
    );
    // The real telemetry (SupervisorConfig's default).
    cfg.telemetry = SupervisorConfig::new("/unused").telemetry;
    let (sup, _rx) = open(cfg).await;
    let mut guard = KillGuard::new(&sup);
    let tree = guard.watch(start(&sup, sh(root.path(), "sleep 60 & sleep 60; wait")).await);
    // Sleeping, the tree demands almost no CPU: its stable samples come to charge it far less
    // than the core a new workload is charged. Its start may be charged more for a sample or
    // two (the execs, and their waits for a CPU on a loaded machine), so this waits for the
    // settled figure; a tree charged as busy for good fails here.
    let s = until(&sup, "a stable, idle three-member sample", |s| {
        s.reservations
            .iter()
            .any(|r| r.sample == SampleState::Stable && r.members == 3 && r.charged_millis < 500)
    })
    .await;
    let r = &s.reservations[0];
    assert_eq!(r.handle, tree);
    let observed = r.observed_bytes.expect("observed");
    // A shell and two sleeps hold some hundreds of KiB at least, and far less than a GiB.
    assert!(observed > 100 * 1024 && observed < GIB, "{r:?}");
    assert_eq!(r.reserved_bytes, observed);
    let cores = std::thread::available_parallelism().expect("cores").get();
    assert_eq!(s.decision.cores, Some(cores));
    assert!(s.decision.available_bytes.is_some_and(|a| a > 0), "{s:?}");
    assert!(s.telemetry_complete, "{s:?}");
    // Charged far less than a core, more starts fit than the 70 % of the cores a count would
    // allow.
    assert_eq!(s.decision.core_budget_millis, Some(cores as u64 * 700));
    let by_count = (cores * 70 / 100).max(1);
    let mut others = Vec::new();
    for _ in 0..by_count + 1 {
        let prepared = sup.prepare(sleeper(root.path())).expect("prepare");
        let h = sup.start(prepared).await;
        others.push(guard.watch(h.expect("an idle tree leaves room")));
        until(&sup, "the new sleep settles", |s| {
            s.reservations
                .iter()
                .all(|r| r.sample == SampleState::Stable && r.charged_millis < 500)
        })
        .await;
    }
    for h in std::iter::once(&tree).chain(&others) {
        guarded("stop", sup.stop(h, Duration::from_millis(100)))
            .await
            .expect("stop");
    }
    let s = snapshot(&sup).await;
    assert_eq!((s.decision.in_use, s.reservations.len()), (0, 0), "{s:?}");
    sup.shutdown(Duration::from_millis(100)).await;
}

/// The release race at one slot: a host whose `wait` returned and that starts the next command
/// at once is never refused for capacity the finished process held, and sees it released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_then_start_at_one_slot_is_never_refused() {
    const ROUNDS: usize = 300;
    let root = temp_root();
    let (sup, _rx) = open(admission_config(
        root.path(),
        AdmissionConfig::max_concurrent(1),
    ))
    .await;
    let mut refused = Vec::new();
    let mut still_counted = 0;
    for round in 0..ROUNDS {
        let prepared = sup
            .prepare(Command::new("true").cwd(root.path()))
            .expect("prepare");
        let handle = match sup.start(prepared).await {
            Ok(h) => h,
            Err(e) => {
                refused.push(format!("round {round}: {e}"));
                continue;
            }
        };
        guarded("wait", sup.wait(&handle, None))
            .await
            .expect("wait");
        if sup.live_count() != 0 {
            still_counted += 1;
        }
        if round % 50 == 0 {
            assert_eq!(snapshot(&sup).await.decision.in_use, 0, "round {round}");
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {ROUNDS} refused: {refused:?}",
        refused.len()
    );
    assert_eq!(still_counted, 0, "live_count() != 0 right after wait");
    sup.shutdown(Duration::from_millis(100)).await;
}

/// A detached descendant that outlives its leader keeps its workload's capacity (the result is
/// not withheld: `wait` returns), until the lingering tree is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_tree_keeps_its_capacity() {
    let root = temp_root();
    let (sup, _rx) = open(admission_config(
        root.path(),
        AdmissionConfig::max_concurrent(1),
    ))
    .await;
    let mut guard = KillGuard::new(&sup);
    let leader = guard.watch(start(&sup, sh(root.path(), "sleep 60 & exit 0")).await);
    let summary = guarded("wait", sup.wait(&leader, None))
        .await
        .expect("wait");
    assert!(summary.state.is_terminal());
    let s = snapshot(&sup).await;
    assert_eq!(
        s.decision.in_use, 1,
        "the lingering tree holds its slot: {s:?}"
    );
    let d = refused_true(&sup, root.path()).await;
    assert_eq!(d.in_use, 1);
    guarded(
        "stop the lingering tree",
        sup.stop(&leader, Duration::from_millis(100)),
    )
    .await
    .expect("stop");
    until(&sup, "released", |s| s.decision.in_use == 0).await;
    let h = start(&sup, Command::new("true").cwd(root.path())).await;
    guarded("wait", sup.wait(&h, None)).await.expect("wait");
    sup.shutdown(Duration::from_millis(100)).await;
}

/// Through the daemon and the client commands: `serve --max-concurrent 1` refuses a second
/// start with the decision (code `capacity`), `start --queue` waits and fails at its deadline,
/// and `procjournal admission` shows the slot, the workload and the inputs.
#[test]
fn the_daemon_refuses_queues_and_shows_admission() {
    use daemon_common::{Daemon, client};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start_with(
        root,
        &["--max-concurrent", "1", "--tree-mechanism", "group"],
    );
    let (code, out, err) = client(root, &["start", "--", "sleep", "60"]);
    assert_eq!(code, 0, "{err}");
    let holder = out.trim().to_owned();
    let (code, _, err) = client(root, &["start", "--no-queue", "--", "true"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("no capacity: 1 of 1 slots in use (host limit: max_concurrent 1"),
        "{err}"
    );
    let (code, _, err) = client(root, &["start", "--queue", "100ms", "--", "true"]);
    assert_ne!(code, 0);
    assert!(err.contains("no capacity within"), "{err}");
    // The default waits, and says so once when the wait begins.
    assert_eq!(
        err.matches("procjournal: waiting for capacity (at most 1s; 1 of 1 slots in use")
            .count(),
        1,
        "{err}"
    );
    let (code, out, err) = client(root, &["admission", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["decision"]["in_use"], 1, "{v}");
    assert_eq!(v["decision"]["slots"], 1, "{v}");
    assert_eq!(v["decision"]["basis"], "host_limit", "{v}");
    assert_eq!(v["decision"]["max_concurrent"], 1, "{v}");
    assert_eq!(v["reservations"][0]["handle"], holder.as_str(), "{v}");
    assert_eq!(v["queued"], 0, "{v}");
    let (code, out, err) = client(root, &["admission"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("slots 1 in use 1 (host_limit) queued 0"),
        "{out}"
    );
    assert!(out.contains(&holder), "{out}");
    // A runtime limit admits a second workload now, and --auto goes back to the configured one.
    let (code, out, err) = client(root, &["admission", "--max-concurrent", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&v["decision"]["slots"], &v["decision"]["runtime_limit"]),
        (&serde_json::json!(2), &serde_json::json!(true)),
        "{v}"
    );
    let (code, out, err) = client(root, &["start", "--no-queue", "--", "sleep", "60"]);
    assert_eq!(code, 0, "{err}");
    let second = out.trim().to_owned();
    let (code, _, err) = client(root, &["start", "--no-queue", "--", "true"]);
    assert_eq!(code, 125, "{err}");
    let (code, out, err) = client(root, &["admission", "--auto", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["decision"]["max_concurrent"], 1, "{v}");
    assert_eq!(v["decision"]["runtime_limit"], false, "{v}");
    let (code, _, err) = client(root, &["stop", &second]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = client(root, &["stop", &holder]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = client(root, &["start", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
}

/// A capture that waited for capacity says how long in its receipt (`queued_ms`), as a start's
/// result does, through the daemon's protocol and the CLI's `capture` line; one that did not
/// wait leaves it out.
#[test]
fn a_capture_that_waited_says_how_long() {
    use daemon_common::{Daemon, bin, client};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let _daemon = Daemon::start_with(
        root,
        &["--max-concurrent", "1", "--tree-mechanism", "group"],
    );
    let receipt_of = |out: &std::process::Output| -> serde_json::Value {
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let capture = |command: &str| {
        bin()
            .args(["capture", "--root"])
            .arg(root)
            .args(["--", "sh", "-c", command])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let at_once = capture("echo now").wait_with_output().unwrap();
    assert_eq!(at_once.status.code(), Some(0), "{at_once:?}");
    let v = receipt_of(&at_once);
    assert!(v.get("queued_ms").is_none(), "{v}");
    let (code, out, err) = client(root, &["start", "--", "sleep", "600"]);
    assert_eq!(code, 0, "{err}");
    let holder = out.trim().to_owned();
    let waiting = capture("echo later");
    // The capture waits in the daemon's queue until the holder is stopped.
    let start = std::time::Instant::now();
    loop {
        let (code, out, err) = client(root, &["admission", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        if v["queued"] == 1 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "hung: {v}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, _, err) = client(root, &["stop", &holder]);
    assert_eq!(code, 0, "{err}");
    let later = waiting.wait_with_output().unwrap();
    assert_eq!(later.status.code(), Some(0), "{later:?}");
    let v = receipt_of(&later);
    assert!(v["queued_ms"].is_u64(), "{v}");
    assert_eq!(v["streams"][0]["prefix"], "later\n", "{v}");
    assert!(
        String::from_utf8_lossy(&later.stderr).contains("waiting for capacity"),
        "{later:?}"
    );
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
}

/// A limit set at runtime is journaled: the daemon restarted on the root keeps it over its
/// configuration (`runtime_limit` true), a restart from a snapshot too, and `--auto`, journaled
/// as well, goes back to the configured policy for good.
#[test]
fn a_runtime_limit_survives_a_daemon_restart() {
    use daemon_common::{Daemon, bin, client};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let journal = |root: &Path, command: &str| {
        let mut cmd = bin();
        cmd.args(["journal", command, "--root"]).arg(root);
        if command == "dump" {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let limit_of = |root: &Path| -> serde_json::Value {
        let (code, out, err) = client(root, &["admission", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        serde_json::json!([
            v["decision"]["max_concurrent"],
            v["decision"]["runtime_limit"]
        ])
    };
    let restart = |daemon: Daemon, compact: bool| {
        let (code, _, err) = client(root, &["shutdown"]);
        assert_eq!(code, 0, "{err}");
        drop(daemon);
        if compact {
            // The next open restores from the snapshot this writes.
            let out = journal(root, "compact");
            assert!(out.status.success(), "{out:?}");
        }
        Daemon::start_with(
            root,
            &["--max-concurrent", "5", "--tree-mechanism", "group"],
        )
    };
    let daemon = Daemon::start_with(
        root,
        &["--max-concurrent", "5", "--tree-mechanism", "group"],
    );
    assert_eq!(limit_of(root), serde_json::json!([5, false]));
    let (code, _, err) = client(root, &["admission", "--max-concurrent", "2"]);
    assert_eq!(code, 0, "{err}");
    let daemon = restart(daemon, false);
    assert_eq!(
        limit_of(root),
        serde_json::json!([2, true]),
        "lost at restart"
    );
    // The same limit again records nothing; a snapshot carries it.
    let (code, _, err) = client(root, &["admission", "--max-concurrent", "2"]);
    assert_eq!(code, 0, "{err}");
    let daemon = restart(daemon, true);
    assert_eq!(
        limit_of(root),
        serde_json::json!([2, true]),
        "lost in a snapshot"
    );
    let (code, _, err) = client(root, &["admission", "--auto"]);
    assert_eq!(code, 0, "{err}");
    let daemon = restart(daemon, false);
    assert_eq!(limit_of(root), serde_json::json!([5, false]), "--auto lost");
    let (code, _, err) = client(root, &["shutdown"]);
    assert_eq!(code, 0, "{err}");
    drop(daemon);
    let out = journal(root, "dump");
    assert!(out.status.success(), "{out:?}");
    let out = String::from_utf8_lossy(&out.stdout);
    let set: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("\"admission_limit_set\""))
        .collect();
    assert_eq!(set.len(), 2, "one record per change: {set:?}");
}

/// A start may not ask to wait longer than the bound, and the configuration is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_are_checked() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.admission.share_percent = 0;
    assert!(
        Supervisor::open(cfg, procjournal::supervisor::Services::noop())
            .await
            .is_err()
    );
    let (sup, _rx) = open(config(root.path())).await;
    let too_long = Duration::from_millis(procjournal::limits::ADMISSION_QUEUE_WAIT_MS_MAX + 1);
    assert!(
        sup.prepare(
            Command::new("true")
                .cwd(root.path())
                .wait_for_capacity(too_long)
        )
        .is_err()
    );
    sup.shutdown(Duration::from_millis(100)).await;
}
