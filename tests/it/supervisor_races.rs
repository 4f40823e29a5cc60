//! Races for the one-shot terminal gate, with real processes and real signals: a natural exit,
//! `stop`, a wall-clock timeout and `shutdown` race for the same process, in every combination,
//! eight processes at a time.
//!
//! - `exit_stop_timeout_and_shutdown_race_to_exactly_one_terminal_path` (1040 racing processes):
//!   for every process exactly one terminal record in the journal (and a replayed terminal
//!   manifest that agrees), exactly one capacity release, exactly one lease release, exactly one
//!   completion notification, and the notification never before the lease release.
//! - `a_stop_or_shutdown_that_loses_the_race_reports_the_true_outcome` (384 racing processes):
//!   the same races, checking that a `stop` or `shutdown` that comes too late answers with the
//!   result instead of a teardown failure, and that `killed` means SIGKILL ended the process.
//! - `a_start_racing_shutdown_is_refused_or_torn_down`: a start admitted just before shutdown
//!   closes admission does not outlive the shutdown.
//!
//! Randomness (delays, sleeps, limits, graces) comes from a xorshift generator whose seed is
//! printed; set `PROCJOURNAL_RACE_SEED=<seed>` to replay a run's choices (the races themselves
//! depend on the scheduler, so a replay is likely, not certain, to hit the same interleavings).

use crate::common::supervisor as supervisor_common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use procjournal::lifecycle::event::{ExitStatus, kinds};
use procjournal::lifecycle::{Handle, ManifestStore, State};
use procjournal::supervisor::{
    Command, Completion, LifecycleNotice, Refusal, ServiceEvent, ShutdownReport, StartError,
    Supervisor, SupervisorConfig, TerminalSummary,
};
use supervisor_common::{
    Clock, CountingLease, LeaseProbe, config, guarded, journal_records, kind_counts, replay,
    sequenced_services, sh, temp_root,
};
use tokio::sync::mpsc::UnboundedReceiver;

/// Rounds of the main race test; each runs `PER_ROUND` processes at once.
const ROUNDS: usize = 130;
/// The bound on concurrency: processes racing at once.
const PER_ROUND: usize = 8;
/// Every this many rounds, a fresh supervisor is shut down while its processes race.
const SHUTDOWN_EVERY: usize = 4;
const SEED_ENV: &str = "PROCJOURNAL_RACE_SEED";

/// xorshift64*.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..=max`.
    fn upto(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }
}

fn seed() -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().expect("PROCJOURNAL_RACE_SEED is a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How the process would end by itself.
#[derive(Debug, Clone, Copy)]
enum Natural {
    /// `sh -c 'exit N'`.
    ShExit(i32),
    /// `sleep 0.0NN`.
    Sleep(u64),
    /// `sleep 30`: only a racer ends it.
    Long,
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    natural: Natural,
    /// Delay before `stop`, and its grace.
    stop: Option<(u64, u64)>,
    /// Wall-clock limit.
    timeout_ms: Option<u64>,
    /// The supervisor is shut down during the race.
    shutdown: bool,
}

impl Plan {
    /// The `i`-th plan of a round: bits of `i` choose stop, timeout and a long-running command,
    /// so that every round covers every combination; the rest is random.
    fn new(i: usize, shutdown: bool, rng: &mut Rng) -> Plan {
        let stop = (i & 1 != 0).then(|| (rng.upto(15), rng.upto(10)));
        let timeout_ms = (i & 2 != 0).then(|| 1 + rng.upto(20));
        let long = i & 4 != 0 && (stop.is_some() || timeout_ms.is_some() || shutdown);
        let natural = if long {
            Natural::Long
        } else if rng.upto(2) == 0 {
            Natural::ShExit(rng.upto(3) as i32)
        } else {
            Natural::Sleep(1 + rng.upto(14))
        };
        Plan {
            natural,
            stop,
            timeout_ms,
            shutdown,
        }
    }

    fn racers(&self) -> String {
        let mut v = Vec::new();
        if !matches!(self.natural, Natural::Long) {
            v.push("exit");
        }
        if self.stop.is_some() {
            v.push("stop");
        }
        if self.timeout_ms.is_some() {
            v.push("timeout");
        }
        if self.shutdown {
            v.push("shutdown");
        }
        v.join("+")
    }

    fn command(&self, cwd: &Path) -> Command {
        let cmd = match self.natural {
            Natural::ShExit(n) => sh(cwd, &format!("exit {n}")),
            Natural::Sleep(n) => Command::new("sleep").arg(format!("0.{n:03}")).cwd(cwd),
            Natural::Long => Command::new("sleep").arg("30").cwd(cwd),
        };
        match self.timeout_ms {
            Some(t) => cmd.timeout(ms(t)),
            None => cmd,
        }
    }
}

/// One supervised process of the test and what it saw.
#[derive(Debug)]
struct Outcome {
    handle: Handle,
    /// Index of the supervisor (and root) it ran under.
    sup: usize,
    plan: Option<Plan>,
    probe: LeaseProbe,
    summary: TerminalSummary,
    stop: Option<Result<TerminalSummary, String>>,
}

fn race_config(root: &Path) -> SupervisorConfig {
    let mut cfg = config(root);
    // Timeouts escalate quickly; stop and shutdown bring their own graces.
    cfg.default_grace = ms(10);
    cfg
}

/// Starts one process, then (after every process of the round started) races `stop` against
/// whatever else is involved, and waits for the terminal result.
async fn run_one(
    sup: Supervisor,
    sup_index: usize,
    cwd: PathBuf,
    plan: Plan,
    clock: Clock,
    started: Arc<tokio::sync::Barrier>,
) -> Outcome {
    let (lease, probe) = CountingLease::boxed(&clock);
    let prepared = sup
        .prepare(plan.command(&cwd))
        .expect("prepare")
        .with_lease(lease);
    let started_result = sup.start(prepared).await;
    started.wait().await;
    let handle = match started_result {
        Ok(h) => h,
        Err(e) => panic!("start of {plan:?} failed: {e}"),
    };
    let stop = match plan.stop {
        Some((delay, grace)) => {
            tokio::time::sleep(ms(delay)).await;
            Some(
                guarded("stop", sup.stop(&handle, ms(grace)))
                    .await
                    .map_err(|e| e.to_string()),
            )
        }
        None => None,
    };
    let summary = guarded("wait", sup.wait(&handle, None))
        .await
        .unwrap_or_else(|e| panic!("wait for {handle} ({plan:?}): {e}"));
    Outcome {
        handle,
        sup: sup_index,
        plan: Some(plan),
        probe,
        summary,
        stop,
    }
}

/// Service events, stamped with the clock tick of the call, gathered per handle.
#[derive(Debug, Default)]
struct Seen {
    completed: HashMap<Handle, Vec<(u64, Completion)>>,
    published: HashMap<Handle, Vec<(u64, LifecycleNotice)>>,
}

impl Seen {
    fn take(&mut self, (at, event): (u64, ServiceEvent)) {
        match event {
            ServiceEvent::Completed(c) => self.completed.entry(c.handle).or_default().push((at, c)),
            ServiceEvent::Published(n) => self.published.entry(n.handle).or_default().push((at, n)),
        }
    }

    /// Receives until every handle of `handles` has a completion.
    async fn until_completed(
        &mut self,
        rx: &mut UnboundedReceiver<(u64, ServiceEvent)>,
        handles: &[Handle],
    ) {
        guarded("completion notifications", async {
            while handles.iter().any(|h| !self.completed.contains_key(h)) {
                let event = rx.recv().await.expect("services channel closed");
                self.take(event);
            }
        })
        .await;
    }
}

/// A background process that holds one unit of capacity for a whole round: if any racing
/// process gave its capacity back twice, the count would fall to 0 while this one still runs.
async fn start_background(sup: &Supervisor, cwd: &Path, clock: &Clock) -> (Handle, LeaseProbe) {
    let (lease, probe) = CountingLease::boxed(clock);
    let prepared = sup
        .prepare(Command::new("sleep").arg("30").cwd(cwd))
        .expect("prepare")
        .with_lease(lease);
    let handle = sup.start(prepared).await.expect("start background");
    (handle, probe)
}

/// Everything a run of [`race`] observed.
#[derive(Debug)]
struct Run {
    seed: u64,
    outcomes: Vec<Outcome>,
    /// Violations of exactly-once found along the way (capacity counts).
    capacity: Vec<String>,
    reports: Vec<(usize, ShutdownReport)>,
    seen: Seen,
    /// Per supervisor: lifecycle record counts per handle and the replayed manifests.
    journals: Vec<(KindCounts, ManifestStore)>,
    roots: usize,
}

type KindCounts = BTreeMap<Handle, BTreeMap<u16, usize>>;

/// Runs `rounds` rounds of `PER_ROUND` racing processes; every `SHUTDOWN_EVERY`-th round runs
/// under a fresh supervisor that is shut down during the race.
async fn race(rounds: usize, seed: u64) -> Run {
    let mut rng = Rng::new(seed);
    let clock = Clock::default();
    let (services, mut rx) = sequenced_services(&clock);
    let cwd = std::env::temp_dir();

    let mut roots = Vec::new();
    let mut sups: Vec<Supervisor> = Vec::new();
    let main_root = temp_root();
    let (main, _) = Supervisor::open(race_config(main_root.path()), services.clone())
        .await
        .expect("open the main supervisor");
    roots.push(main_root);
    sups.push(main.clone());

    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut seen = Seen::default();
    let mut capacity: Vec<String> = Vec::new();
    let mut reports: Vec<(usize, ShutdownReport)> = Vec::new();

    for round in 0..rounds {
        let shutdown_round = round % SHUTDOWN_EVERY == SHUTDOWN_EVERY - 1;
        let (sup, sup_index) = if shutdown_round {
            let root = temp_root();
            let (sup, _) = Supervisor::open(race_config(root.path()), services.clone())
                .await
                .expect("open a supervisor to shut down");
            roots.push(root);
            sups.push(sup.clone());
            (sup, sups.len() - 1)
        } else {
            (main.clone(), 0)
        };
        let background = if shutdown_round {
            None
        } else {
            Some(start_background(&sup, &cwd, &clock).await)
        };

        let started = Arc::new(tokio::sync::Barrier::new(PER_ROUND + 1));
        let mut set = tokio::task::JoinSet::new();
        for i in 0..PER_ROUND {
            let plan = Plan::new(i, shutdown_round, &mut rng);
            set.spawn(run_one(
                sup.clone(),
                sup_index,
                cwd.clone(),
                plan,
                clock.clone(),
                Arc::clone(&started),
            ));
        }
        let shutdown = {
            let (sup, started) = (sup.clone(), Arc::clone(&started));
            let (delay, grace) = (rng.upto(15), rng.upto(10));
            tokio::spawn(async move {
                started.wait().await;
                if shutdown_round {
                    tokio::time::sleep(ms(delay)).await;
                    Some(sup.shutdown(ms(grace)).await)
                } else {
                    None
                }
            })
        };
        let round_outcomes = guarded("a round", set.join_all()).await;
        let report = guarded("shutdown", shutdown).await.expect("shutdown task");
        let handles: Vec<Handle> = round_outcomes.iter().map(|o| o.handle).collect();
        seen.until_completed(&mut rx, &handles).await;
        outcomes.extend(round_outcomes);

        match (background, report) {
            (Some((bg, probe)), _) => {
                // Every racing process is terminal and notified (so released): only the
                // background process holds capacity now.
                if sup.live_count() != 1 {
                    capacity.push(format!(
                        "round {round}: live_count {} with only the background process live",
                        sup.live_count()
                    ));
                }
                let stopped = guarded("stop background", sup.stop(&bg, ms(5000)))
                    .await
                    .expect("stop the background process");
                seen.until_completed(&mut rx, &[bg]).await;
                outcomes.push(Outcome {
                    handle: bg,
                    sup: sup_index,
                    plan: None,
                    probe,
                    summary: stopped,
                    stop: None,
                });
            }
            (None, Some(report)) => reports.push((sup_index, report)),
            (None, None) => unreachable!("a round has a background process or a shutdown"),
        }
        if sup.live_count() != 0 {
            capacity.push(format!(
                "round {round}: live_count {} after every process was notified",
                sup.live_count()
            ));
        }
    }

    // Nothing is left: the main supervisor's shutdown has nothing to do.
    let last = guarded("main shutdown", main.shutdown(ms(100))).await;
    assert_eq!(
        last,
        ShutdownReport::default(),
        "nothing was live at the end"
    );
    for (i, sup) in sups.iter().enumerate() {
        assert_eq!(
            sup.live_count(),
            0,
            "supervisor {i} still counts live processes"
        );
    }
    // Every supervisor and task gone: the channel closes and every late event is in.
    drop((main, sups, services));
    guarded("every supervisor dropped", async {
        while let Some(event) = rx.recv().await {
            seen.take(event);
        }
    })
    .await;

    let journals: Vec<_> = roots
        .iter()
        .map(|root| {
            let rt = root.path().join("rt");
            let (store, report) = replay(&rt);
            assert!(report.is_clean(), "replay of {}: {report:?}", rt.display());
            (kind_counts(&journal_records(&rt)), store)
        })
        .collect();
    Run {
        seed,
        outcomes,
        capacity,
        reports,
        seen,
        journals,
        roots: roots.len(),
    }
}

fn describe(o: &Outcome) -> String {
    match &o.plan {
        Some(plan) => format!("{} ({plan:?})", o.handle),
        None => format!("{} (background)", o.handle),
    }
}

/// Exactly one terminal record (and a replayed terminal manifest that agrees), one capacity
/// release, one lease release, one completion notification after the lease release, and one
/// terminal publication after the running one, for every process.
fn exactly_once_violations(run: &Run) -> Vec<String> {
    let mut anomalies = run.capacity.clone();
    let seen = &run.seen;
    for o in &run.outcomes {
        let what = describe(o);
        let (counts, store) = &run.journals[o.sup];
        let count = |kind| {
            counts
                .get(&o.handle)
                .and_then(|c| c.get(&kind))
                .copied()
                .unwrap_or(0)
        };
        for (kind, name, expected) in [
            (kinds::REGISTERED_V2, "registered", 1),
            (kinds::TERMINAL, "terminal", 1),
            (kinds::LOST_ON_RESTORE, "lost_on_restore", 0),
            (kinds::COMPLETION_NOTIFIED, "completion_notified", 1),
        ] {
            if count(kind) != expected {
                anomalies.push(format!(
                    "{what}: {} {name} records, expected {expected}",
                    count(kind)
                ));
            }
        }
        match store.get(&o.handle) {
            Some(m)
                if m.state == o.summary.state
                    && m.terminal.as_ref().is_some_and(|t| {
                        t.event_id == m.ids.terminal && t.exit == o.summary.exit
                    }) => {}
            other => anomalies.push(format!(
                "{what}: replayed manifest {:?} differs from the summary {:?}",
                other.map(|m| (m.state, m.terminal.as_ref().map(|t| t.exit))),
                o.summary
            )),
        }
        if !o.summary.state.is_terminal() || o.summary.persist_error.is_some() {
            anomalies.push(format!("{what}: summary {:?}", o.summary));
        }
        if o.probe.releases() != 1 {
            anomalies.push(format!(
                "{what}: lease released {} times",
                o.probe.releases()
            ));
        }
        let completed = seen.completed.get(&o.handle).map_or(&[][..], Vec::as_slice);
        if completed.len() != 1 {
            anomalies.push(format!(
                "{what}: {} completion notifications",
                completed.len()
            ));
        }
        for (at, c) in completed {
            if *at <= o.probe.released_at() {
                anomalies.push(format!(
                    "{what}: completion notified at tick {at}, lease released at tick {}",
                    o.probe.released_at()
                ));
            }
            if c.state != o.summary.state || c.exit != o.summary.exit {
                anomalies.push(format!("{what}: completion {c:?} differs from the summary"));
            }
            if store
                .get(&o.handle)
                .is_some_and(|m| m.ids.completion != c.command_id)
            {
                anomalies.push(format!("{what}: completion under an unexpected command id"));
            }
        }
        let published = seen.published.get(&o.handle).map_or(&[][..], Vec::as_slice);
        let terminal_notices: Vec<_> = published
            .iter()
            .filter(|(_, n)| n.state.is_terminal())
            .collect();
        let running_notices: Vec<_> = published
            .iter()
            .filter(|(_, n)| n.state == State::Running)
            .collect();
        if terminal_notices.len() != 1 || running_notices.len() != 1 {
            anomalies.push(format!("{what}: published {published:?}"));
        } else {
            let (t_at, t) = terminal_notices[0];
            if t.state != o.summary.state {
                anomalies.push(format!("{what}: published terminal {t:?}"));
            }
            if running_notices[0].0 > *t_at {
                anomalies.push(format!(
                    "{what}: running published after the terminal state"
                ));
            }
            if completed.iter().any(|(c_at, _)| c_at < t_at) {
                anomalies.push(format!(
                    "{what}: completion notified before the terminal publication"
                ));
            }
        }
        if let Some(Ok(s)) = &o.stop
            && *s != o.summary
        {
            anomalies.push(format!("{what}: stop answered {s:?}, wait {:?}", o.summary));
        }
    }
    anomalies
}

/// A `stop` or `shutdown` that loses the race to an exit (or to another racer) must not report a
/// teardown failure for a process that ended, and a process is `killed` only if SIGKILL ended it.
fn late_racer_violations(run: &Run) -> Vec<String> {
    let mut anomalies = Vec::new();
    for o in &run.outcomes {
        if o.summary.state == State::Killed && o.summary.exit != ExitStatus::Signal(9) {
            anomalies.push(format!(
                "{}: recorded killed, but it ended by {:?}",
                describe(o),
                o.summary.exit
            ));
        }
        if let Some(Err(e)) = &o.stop {
            anomalies.push(format!(
                "{}: stop failed ({e}) although the process ended {:?} {:?}",
                describe(o),
                o.summary.state,
                o.summary.exit
            ));
        }
    }
    for (sup_index, report) in &run.reports {
        for (h, reason) in &report.teardown_failed {
            let o = run.outcomes.iter().find(|o| o.handle == *h);
            anomalies.push(format!(
                "supervisor {sup_index}: shutdown reported teardown_failed for {h} ({reason}); it ended {:?}",
                o.map(|o| (o.summary.state, o.summary.exit))
            ));
        }
        for h in &report.killed {
            if let Some(o) = run.outcomes.iter().find(|o| o.handle == *h)
                && o.summary.state != State::Killed
            {
                anomalies.push(format!(
                    "shutdown reported {h} killed, but it ended {:?}",
                    o.summary.state
                ));
            }
        }
    }
    anomalies
}

fn summarize(run: &Run) -> (usize, BTreeMap<String, usize>) {
    let mut combos: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_state: BTreeMap<String, usize> = BTreeMap::new();
    for o in &run.outcomes {
        if let Some(plan) = &o.plan {
            *combos.entry(plan.racers()).or_default() += 1;
        }
        let exit = match o.summary.exit {
            ExitStatus::Code(_) => "code".to_owned(),
            ExitStatus::Signal(n) => format!("signal {n}"),
            ExitStatus::Unknown => "unknown".to_owned(),
        };
        *by_state
            .entry(format!("{} by {exit}", o.summary.state))
            .or_default() += 1;
    }
    let racing = run.outcomes.iter().filter(|o| o.plan.is_some()).count();
    eprintln!(
        "{racing} racing processes (+{} background) under {} supervisors; racers: {combos:?}; \
         end states: {by_state:?}",
        run.outcomes.len() - racing,
        run.roots
    );
    (racing, combos)
}

fn fail_on(what: &str, seed: u64, anomalies: &[String]) {
    if !anomalies.is_empty() {
        let shown: Vec<_> = anomalies.iter().take(40).map(String::as_str).collect();
        panic!(
            "{} {what} (seed {seed}; first {}):\n{}",
            anomalies.len(),
            shown.len(),
            shown.join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_stop_timeout_and_shutdown_race_to_exactly_one_terminal_path() {
    let seed = seed();
    eprintln!("{SEED_ENV}={seed}");
    let run = race(ROUNDS, seed).await;
    let (racing, combos) = summarize(&run);
    assert!(racing >= 1000, "{racing} iterations");
    assert_eq!(
        combos.len(),
        15,
        "every combination of racers ran: {combos:?}"
    );
    fail_on(
        "exactly-once violations",
        run.seed,
        &exactly_once_violations(&run),
    );
    // What late racers report is asserted by its own test, below.
    let late = late_racer_violations(&run);
    if !late.is_empty() {
        eprintln!(
            "({} misreported outcomes of late racers; see \
             a_stop_or_shutdown_that_loses_the_race_reports_the_true_outcome)",
            late.len()
        );
    }
}

/// `stop` and `shutdown` that lose the race (the process was already exiting, or another racer
/// ended it) answer with the terminal result, not a teardown failure; and a process whose grace
/// ran out while it was already dying of SIGTERM is not recorded as `killed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_or_shutdown_that_loses_the_race_reports_the_true_outcome() {
    const ROUNDS_HERE: usize = 48;
    let seed = seed();
    eprintln!("{SEED_ENV}={seed}");
    let run = race(ROUNDS_HERE, seed).await;
    summarize(&run);
    fail_on(
        "exactly-once violations",
        run.seed,
        &exactly_once_violations(&run),
    );
    fail_on(
        "misreported outcomes of late racers",
        run.seed,
        &late_racer_violations(&run),
    );
}

/// A start admitted just before `shutdown` closes admission must not outlive the shutdown: once
/// both have returned, the process is either refused or terminal (or reported as a teardown
/// failure). Each iteration races a few starts of `sleep 30` against one shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_racing_shutdown_is_refused_or_torn_down() {
    const ITERATIONS: usize = 60;
    const STARTS: usize = 3;
    let seed = seed();
    eprintln!("{SEED_ENV}={seed}");
    let mut rng = Rng::new(seed ^ 0x5eed);
    let clock = Clock::default();
    let cwd = std::env::temp_dir();
    let mut survivors = Vec::new();
    let (mut refused, mut started) = (0usize, 0usize);
    for iteration in 0..ITERATIONS {
        let root = temp_root();
        let (services, mut rx) = sequenced_services(&clock);
        let mut cfg = race_config(root.path());
        // Shutdown joins the drain tasks it knows of for at most this long; a process it missed
        // would hold its drain task (and so the shutdown) for the whole bound.
        cfg.kill_confirm = ms(300);
        let (sup, _) = Supervisor::open(cfg, services).await.expect("open");
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..STARTS {
            let (sup, cwd, clock) = (sup.clone(), cwd.clone(), clock.clone());
            set.spawn(async move {
                let (lease, probe) = CountingLease::boxed(&clock);
                let prepared = sup
                    .prepare(Command::new("sleep").arg("30").cwd(&cwd))
                    .expect("prepare")
                    .with_lease(lease);
                (sup.start(prepared).await, probe)
            });
        }
        let delay = rng.upto(3);
        let shutdown = {
            let sup = sup.clone();
            tokio::spawn(async move {
                if delay > 0 {
                    tokio::time::sleep(ms(delay)).await;
                }
                sup.shutdown(ms(1000)).await
            })
        };
        let starts = guarded("starts", set.join_all()).await;
        let report = guarded("shutdown", shutdown).await.expect("shutdown task");
        let mut handles = Vec::new();
        for (result, probe) in starts {
            match result {
                Ok(h) => {
                    started += 1;
                    let m = sup.manifest(&h).expect("manifest");
                    let reported = report.teardown_failed.iter().any(|(f, _)| *f == h);
                    if !m.state.is_terminal() && !reported {
                        survivors.push(format!(
                            "iteration {iteration}: {h} is {} after shutdown returned {report:?}",
                            m.state
                        ));
                        // Clean up what shutdown left behind.
                        let _ = guarded("stop a survivor", sup.stop(&h, ms(1000))).await;
                    }
                    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
                    assert!(s.state.is_terminal());
                    handles.push((h, probe));
                }
                Err(StartError::Refused {
                    reason: Refusal::ShuttingDown,
                    prepared,
                }) => {
                    refused += 1;
                    drop(prepared);
                    assert_eq!(probe.releases(), 0, "a refused start released its lease");
                }
                Err(e) => panic!("iteration {iteration}: unexpected start error {e}"),
            }
        }
        let mut seen = Seen::default();
        let hs: Vec<Handle> = handles.iter().map(|(h, _)| *h).collect();
        seen.until_completed(&mut rx, &hs).await;
        for (h, probe) in &handles {
            assert_eq!(probe.releases(), 1, "{h}: lease releases");
        }
        assert_eq!(
            sup.live_count(),
            0,
            "iteration {iteration}: capacity given back"
        );
        if survivors.len() >= 3 {
            break;
        }
    }
    eprintln!("{started} starts admitted, {refused} refused");
    assert!(
        survivors.is_empty(),
        "{} processes outlived the shutdown that raced their start (seed {seed}):\n{}",
        survivors.len(),
        survivors.join("\n")
    );
}
