//! Supervisor latency, throughput and memory, each figure printed beside a baseline measured in
//! the same run.
//!
//! Run with `cargo bench --bench supervisor`. Every measurement runs 3 times (rounds), interleaved
//! (round 1 measures everything once, then round 2, ...; a figure and its baseline swap order
//! every round) so that a burst of load from other work on the machine hits a figure and its
//! baseline alike. The report gives the median and the min-max spread over rounds; each ratio is
//! the ratio of the medians, with the spread of the per-round ratios.
//!
//! What is measured:
//! 1. Start-to-running latency: p50 and p99 over 300 sequential starts of `true` (after 20
//!    untimed), from the call of `Supervisor::start` to its return (it returns once `running` is
//!    acknowledged under `Durability::Group`: a `Registered` and a `Running` record, each
//!    flushed, plus the spool directory and the spawn). Each process is waited for, untimed,
//!    before the next start; the whole start-to-terminal time is printed as a diagnostic.
//!    Baseline: a plain
//!    `tokio::process::Command::new("true").spawn()` + `wait()`, same runtime, same count.
//!    Target: p50 <= 1.5x the baseline (p99 <= 3x, proposed), i.e. the
//!    durable bookkeeping costs at most about what the spawn itself costs. Breakdown, measured
//!    alone in the same round: a spawn+wait configured like the supervisor's (three pipes, own
//!    process group), one durable `Journal::append` under `Group` (a start makes two), and one
//!    `Spool::open_writer` of a new directory (mkdir + directory fsync); plus the run-queue wait
//!    of all threads of this process per start, which shows how much of the time went to other
//!    work on the machine.
//! 2. Output throughput: `head -c 1G /dev/zero` through the supervisor into its spool, from
//!    `start` to the return of `wait` (so the final spool checkpoint, an fdatasync of what was
//!    not yet synced, is included). Spool retention is 4 GiB, larger than the output, so nothing
//!    is deleted and the spool holds all of it, like the baseline's file. Baseline: the same
//!    `head` spawned with stdout piped (default 64 KiB pipe), copied by a plain Rust loop of
//!    64 KiB `read` + `write_all` into one file on the same file system, no sync. Printed for
//!    scale, not for the target: the same copy with a 1 MiB pipe (what the supervisor asks for
//!    with F_SETPIPE_SZ) and, separately, that copy followed by one `fdatasync`. Every writer
//!    starts with no dirty pages (the previous measurement's files are deleted and `sync()` runs,
//!    untimed). CPU seconds of this process per GiB are printed for each, and, as a diagnostic,
//!    the supervisor with a one-hour checkpoint interval and no write-behind (only the final
//!    checkpoint syncs: the whole output is written back after the workload ends, as the
//!    copy + fdatasync does).
//!    Target: >= 0.7x.
//! 3. RSS per idle supervised process: a fresh process (this binary, re-executed) opens a
//!    supervisor, reads its VmRSS, starts 500 `sleep 600`, waits until all are running and then
//!    500 ms more, reads VmRSS again and prints (after - before) / 500; then shuts down. The
//!    children are other processes, so only the supervisor's own cost is counted. Baseline, also
//!    in a fresh process: 500 plain tokio spawns of `sleep 600` with stdin, stdout and stderr
//!    piped, each held by a task awaiting `wait()`. Target: <= 32 KiB per process
//!    (pueue measured 30 KiB).
//! 4. Launch-to-running latency per tree mechanism (`guardian`): p50 and p90 over 200
//!    sequential starts of `true` (after 20 untimed), from the call of `Supervisor::start` to its
//!    return (`running` acknowledged), as in 1, for three launchers: the default `GroupLauncher`,
//!    a `GuardianLauncher` without cgroup, and one with a per-launch cgroup (skipped, with the
//!    reason printed, when `CgroupBase::probe` fails). The guardian is the `procjournal-guardian`
//!    binary Cargo built for this bench (`CARGO_BIN_EXE_procjournal-guardian`), as the CLI runs. Baseline: the plain tokio
//!    spawn + `wait()` of 1, same count, in the same round. Target (the guardian issue): the
//!    guardian's p50 <= 3x the baseline.
//! 5. Stop latency of a 200-process tree (`tree_stop`): `sh -c 'for i in $(seq 200); do sleep
//!    300 & done; wait'` is started under each launcher (as `env <MARK>=<token> sh -c ...`, so
//!    that every process of the tree, and nothing else, carries the marker in its environment,
//!    whatever group or session it is in); once 201 marked processes are live, `stop(handle,
//!    5 s)` is timed until it returns (the process terminal, the teardown's wait for an empty
//!    tree done) and no marked process is live (zombies do not count: here PID 1 reaps orphans
//!    only every ~2 s; the group mechanism does not count them either). Also printed: whether
//!    the manifest's `released` (the tree's exit proof) is set when `stop` returns. Baseline,
//!    in the same run: the same tree started with std `Command` + `process_group(0)`, then
//!    `killpg(SIGTERM)`, `wait()` of `sh`, and /proc scanned (1 ms apart) until no marked process
//!    is live. 5 runs, interleaved; the median is reported. No target (a figure for the issue).
//!
//! Nothing here asserts on wall-clock time; the only checks are of correctness (exit states,
//! byte counts).
//!
//! Temp roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir (on the project
//! disk); the file system is printed, since tmpfs would make the write figures meaningless.
//! `PROCJOURNAL_BENCH_QUICK=1` runs one short round, for checking the harness only;
//! `PROCJOURNAL_BENCH_ONLY=latency|starts|output|rss|guardian|tree_stop` runs one part
//! (`starts`: the supervised starts alone), for profiling it with perf or strace.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

use std::error::Error;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use procjournal::lifecycle::State;
use procjournal::lifecycle::event::{CaptureStatus, ExitStatus};
use procjournal::spool::{Spool, SpoolOptions};
use procjournal::supervisor::{Command, Services, Supervisor, SupervisorConfig};
use procjournal::tree::cgroup::CgroupBase;
use procjournal::tree::{GroupLauncher, GuardianLauncher, GuardianProgram, Launcher};
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};

mod common;

use common::{
    GIB, MIB, Res, Row, Samples, Target, discard, load_average, mib_per_sec, quantile, size_name,
};

/// Set in the re-executed child that measures RSS: `supervisor` or `plain`.
const RSS_CHILD_ENV: &str = "PROCJOURNAL_BENCH_RSS_CHILD";
/// The runtime root of the RSS child's supervisor.
const RSS_ROOT_ENV: &str = "PROCJOURNAL_BENCH_RSS_ROOT";
/// How many idle children the RSS child starts.
const RSS_CHILDREN_ENV: &str = "PROCJOURNAL_BENCH_RSS_CHILDREN";
/// The RSS target, KiB per supervised process.
const RSS_TARGET_KIB: f64 = 32.0;
const COPY_BYTES: usize = 64 * 1024;

/// How much each measurement does.
#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    warmup_starts: usize,
    starts: usize,
    output_bytes: u64,
    idle_children: usize,
    /// Timed starts per launcher and round in the `guardian` part.
    guardian_starts: usize,
    /// Runs of each tree stop in the `tree_stop` part.
    tree_runs: usize,
}

const FULL: Plan = Plan {
    rounds: 3,
    warmup_starts: 20,
    starts: 300,
    output_bytes: GIB,
    idle_children: 500,
    guardian_starts: 200,
    tree_runs: 5,
};

const QUICK: Plan = Plan {
    rounds: 1,
    warmup_starts: 5,
    starts: 30,
    output_bytes: 64 * MIB,
    idle_children: 50,
    guardian_starts: 30,
    tree_runs: 1,
};

// ---------------------------------------------------------------------------------------------
// Small tools.

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Time every thread of this process has spent runnable but waiting for a CPU, summed over
/// `/proc/self/task/*/schedstat` (field 2), in microseconds. Threads that exited are missing.
fn runqueue_wait_us() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    let mut ns = 0u64;
    for task in tasks.flatten() {
        if let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += stat
                .split_whitespace()
                .nth(1)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    ns as f64 / 1e3
}

/// A `/proc/self/status` field in KiB (`VmRSS`, `RssAnon`, ...).
fn status_kib(field: &str) -> Res<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kib = rest.trim().trim_end_matches("kB").trim().parse()?;
            return Ok(kib);
        }
    }
    Err(format!("no {field} in /proc/self/status").into())
}

fn runtime() -> Res<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn config(root: &Path) -> SupervisorConfig {
    let mut config = SupervisorConfig::new(root);
    // Supervision is measured, not admission: an explicit host limit.
    config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
        procjournal::limits::LIVE_PROCESSES_DEFAULT,
    );
    config.durability = Durability::Group;
    config
}

// ---------------------------------------------------------------------------------------------
// 1. Start-to-running latency.

#[derive(Debug, Default)]
struct Latency {
    p50: f64,
    p90: f64,
    p99: f64,
    /// Run-queue wait of all this process's threads per timed operation (us): time lost to
    /// other work on the machine rather than to the operation.
    runq: f64,
}

fn latency_of(mut v: Vec<f64>, runq_us: f64) -> Latency {
    let n = v.len() as f64;
    Latency {
        p50: quantile(&mut v, 0.5),
        p90: quantile(&mut v, 0.9),
        p99: quantile(&mut v, 0.99),
        runq: runq_us / n,
    }
}

/// Returns (start -> return of `start`, start -> return of `wait`), in microseconds each, of
/// `plan.starts` starts through `launcher`.
async fn supervised_starts(
    root: &Path,
    plan: Plan,
    launcher: Arc<dyn Launcher>,
) -> Res<(Latency, Latency)> {
    let mut config = config(root);
    config.launcher = launcher;
    let (sup, _) = Supervisor::open(config, Services::noop()).await?;
    let cwd = root.to_owned();
    let mut to_running = Vec::with_capacity(plan.starts);
    let mut to_terminal = Vec::with_capacity(plan.starts);
    let mut runq = 0.0;
    for i in 0..plan.warmup_starts + plan.starts {
        let q0 = runqueue_wait_us();
        let prepared = sup.prepare(Command::new("true").cwd(&cwd))?;
        let t0 = Instant::now();
        let handle = sup
            .start(prepared)
            .await
            .map_err(|e| format!("start: {e}"))?;
        let t1 = Instant::now();
        let summary = sup.wait(&handle, None).await?;
        let t2 = Instant::now();
        if summary.state != State::Exited || summary.exit != ExitStatus::Code(0) {
            return Err(format!("`true` ended {:?} {:?}", summary.state, summary.exit).into());
        }
        if i >= plan.warmup_starts {
            to_running.push(us(t1 - t0));
            to_terminal.push(us(t2 - t0));
            runq += runqueue_wait_us() - q0;
        }
    }
    sup.shutdown(Duration::from_secs(1)).await;
    Ok((latency_of(to_running, runq), latency_of(to_terminal, runq)))
}

async fn plain_spawns(plan: Plan, like_supervisor: bool) -> Res<Latency> {
    let mut v = Vec::with_capacity(plan.starts);
    let mut runq = 0.0;
    for i in 0..plan.warmup_starts + plan.starts {
        let q0 = runqueue_wait_us();
        let t0 = Instant::now();
        let mut command = tokio::process::Command::new("true");
        if like_supervisor {
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0);
        }
        let status = command.spawn()?.wait().await?;
        let t1 = Instant::now();
        if !status.success() {
            return Err("`true` failed".into());
        }
        if i >= plan.warmup_starts {
            v.push(us(t1 - t0));
            runq += runqueue_wait_us() - q0;
        }
    }
    Ok(latency_of(v, runq))
}

/// Parts of a start measured on their own, for the breakdown: a durable journal append (the
/// supervisor makes two per start, `Registered` and `Running`) and the creation of a spool.
fn journal_appends(root: &Path, plan: Plan) -> Res<Latency> {
    let options = JournalOptions {
        durability: Durability::Group,
        ..JournalOptions::default()
    };
    let (journal, _) = Journal::open(root, options)?;
    let kind = EventKind::new(0x0101).ok_or("kind")?;
    // About the size of a `Registered` payload of `true`.
    let payload = vec![0x5au8; 160];
    let mut v = Vec::with_capacity(plan.starts);
    for i in 0..plan.warmup_starts + plan.starts {
        let t0 = Instant::now();
        journal.append(EventId::new_v7(), kind, 1, &payload)?;
        if i >= plan.warmup_starts {
            v.push(us(t0.elapsed()));
        }
    }
    Ok(latency_of(v, f64::NAN))
}

fn spool_creations(dir: &Path, plan: Plan) -> Res<Latency> {
    let mut v = Vec::with_capacity(plan.starts);
    for i in 0..plan.warmup_starts + plan.starts {
        let id = EventId::new_v7();
        let t0 = Instant::now();
        Spool::open_writer(
            &dir.join(id.to_string()),
            id.as_bytes(),
            SpoolOptions::default(),
        )?;
        if i >= plan.warmup_starts {
            v.push(us(t0.elapsed()));
        }
    }
    Ok(latency_of(v, f64::NAN))
}

// ---------------------------------------------------------------------------------------------
// 2. Output throughput.

/// MiB/s and CPU seconds per GiB of `head -c N /dev/zero` through a supervisor into its spool.
/// `periodic_syncs: false` sets the checkpoint interval to an hour and turns write-behind off,
/// leaving only the final checkpoint (a diagnostic).
async fn supervised_output(root: &Path, bytes: u64, periodic_syncs: bool) -> Res<(f64, f64)> {
    let mut config = config(root);
    if !periodic_syncs {
        config.checkpoint_interval = Duration::from_secs(3600);
        config.write_behind_bytes = None;
    }
    config.spool = SpoolOptions {
        retention_bytes: 4 * GIB,
        ..SpoolOptions::default()
    };
    let (sup, _) = Supervisor::open(config, Services::noop()).await?;
    let prepared = sup.prepare(
        Command::new("head")
            .args(["-c", &bytes.to_string(), "/dev/zero"])
            .cwd(root),
    )?;
    let cpu0 = common::process_cpu_seconds();
    let t0 = Instant::now();
    let handle = sup
        .start(prepared)
        .await
        .map_err(|e| format!("start: {e}"))?;
    let summary = sup.wait(&handle, None).await?;
    let elapsed = t0.elapsed();
    let cpu = common::process_cpu_seconds() - cpu0;
    if summary.state != State::Exited
        || summary.exit != ExitStatus::Code(0)
        || summary.capture != CaptureStatus::Complete
        || summary.bounds.total_bytes != bytes
        || summary.bounds.retained_from != 0
    {
        return Err(format!("supervised head ended {summary:?}").into());
    }
    sup.shutdown(Duration::from_secs(1)).await;
    Ok((
        mib_per_sec(bytes, elapsed),
        cpu / (bytes as f64 / GIB as f64),
    ))
}

/// How the plain copy is done.
#[derive(Debug, Clone, Copy)]
struct CopyKind {
    big_pipe: bool,
    fdatasync: bool,
}

/// MiB/s and CPU seconds per GiB of `head -c N /dev/zero | <Rust copy loop> > file`.
fn plain_copy(file: &Path, bytes: u64, kind: CopyKind) -> Res<(f64, f64)> {
    let cpu0 = common::process_cpu_seconds();
    let t0 = Instant::now();
    let mut child = std::process::Command::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    if kind.big_pipe {
        nix::fcntl::fcntl(&stdout, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20))?;
    }
    let mut out = File::create(file)?;
    let mut buf = vec![0u8; COPY_BYTES];
    let mut copied = 0u64;
    loop {
        let n = stdout.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        copied += n as u64;
    }
    if kind.fdatasync {
        out.sync_data()?;
    }
    let status = child.wait()?;
    let elapsed = t0.elapsed();
    let cpu = common::process_cpu_seconds() - cpu0;
    if !status.success() || copied != bytes {
        return Err(format!("plain copy: {status}, {copied} bytes").into());
    }
    Ok((
        mib_per_sec(bytes, elapsed),
        cpu / (bytes as f64 / GIB as f64),
    ))
}

// ---------------------------------------------------------------------------------------------
// 3. RSS per idle process, in a fresh process each.

/// The body of the re-executed child: prints `rss <before VmRSS> <after VmRSS> <before RssAnon>
/// <after RssAnon>` in KiB, then ends its children.
fn rss_child(mode: &str) -> Res<()> {
    let children: usize = std::env::var(RSS_CHILDREN_ENV)?.parse()?;
    let rt = runtime()?;
    let line = rt.block_on(async {
        match mode {
            "supervisor" => {
                let root = PathBuf::from(std::env::var(RSS_ROOT_ENV)?);
                let mut config = config(&root);
                config.max_live = children + 1;
                let (sup, _) = Supervisor::open(config, Services::noop()).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                let before = (status_kib("VmRSS")?, status_kib("RssAnon")?);
                for _ in 0..children {
                    let prepared = sup.prepare(Command::new("sleep").arg("600").cwd(&root))?;
                    sup.start(prepared)
                        .await
                        .map_err(|e| format!("start: {e}"))?;
                }
                if sup.live_count() != children {
                    return Err(format!("{} live, not {children}", sup.live_count()).into());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                let after = (status_kib("VmRSS")?, status_kib("RssAnon")?);
                let report = sup.shutdown(Duration::from_secs(5)).await;
                if report.terminated.len() != children {
                    return Err(format!("shutdown: {report:?}").into());
                }
                Ok::<_, Box<dyn Error + Send + Sync>>(format!(
                    "rss {} {} {} {}",
                    before.0, after.0, before.1, after.1
                ))
            }
            "plain" => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let before = (status_kib("VmRSS")?, status_kib("RssAnon")?);
                let mut tasks = Vec::with_capacity(children);
                let mut pids = Vec::with_capacity(children);
                for _ in 0..children {
                    let mut child = tokio::process::Command::new("sleep")
                        .arg("600")
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .process_group(0)
                        .kill_on_drop(true)
                        .spawn()?;
                    pids.push(child.id().ok_or("no pid")?);
                    tasks.push(tokio::spawn(async move {
                        // Hold the pipes as a supervisor would, and wait.
                        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
                        let status = child.wait().await;
                        drop(pipes);
                        status
                    }));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                let after = (status_kib("VmRSS")?, status_kib("RssAnon")?);
                for pid in pids {
                    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid)?);
                    nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGTERM)?;
                }
                for task in tasks {
                    task.await??;
                }
                Ok(format!(
                    "rss {} {} {} {}",
                    before.0, after.0, before.1, after.1
                ))
            }
            other => Err(format!("unknown RSS mode {other:?}").into()),
        }
    })?;
    println!("{line}");
    Ok(())
}

/// KiB of VmRSS and of RssAnon per idle process, measured in a fresh copy of this binary.
fn rss_per_process(mode: &str, root: &Path, children: usize) -> Res<(f64, f64)> {
    let exe = std::env::current_exe()?;
    let output = std::process::Command::new(exe)
        .env(RSS_CHILD_ENV, mode)
        .env(RSS_ROOT_ENV, root)
        .env(RSS_CHILDREN_ENV, children.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "RSS child ({mode}) failed: {}; stdout: {text}",
            output.status
        )
        .into());
    }
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("rss "))
        .ok_or_else(|| format!("RSS child ({mode}) printed no figures: {text}"))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let [rss0, rss1, anon0, anon1] = v[..] else {
        return Err(format!("RSS child ({mode}): {line}").into());
    };
    let n = children as f64;
    Ok(((rss1 - rss0) / n, (anon1 - anon0) / n))
}

// ---------------------------------------------------------------------------------------------
// 4. Launch-to-running latency per tree mechanism, and 5. the stop of a 200-process tree.

/// The environment variable that marks every process of a measured tree, and nothing else.
const MARK: &str = "PROCJOURNAL_BENCH_MARK";
/// The tree `tree_stop` stops: `sh` and its 200 `sleep`s.
const TREE_SCRIPT: &str = "for i in $(seq 200); do sleep 300 & done; wait";
const TREE_PROCS: usize = 201;
/// The grace of each supervised stop: SIGTERM ends `sh` and `sleep`, so it is never used up.
const TREE_GRACE: Duration = Duration::from_secs(5);
/// A hang guard for a tree to form or to vanish; it bounds a hang, it measures nothing.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// The launchers compared, by name: the default group, a guardian (the `procjournal-guardian`
/// binary Cargo built for this bench), and a guardian with per-launch cgroups when the probe succeeds.
#[derive(Debug)]
struct Launchers {
    list: Vec<(&'static str, Arc<dyn Launcher>)>,
    /// The cgroup base this bench created, removed at the end.
    cgroup_base: Option<PathBuf>,
}

impl Launchers {
    fn new() -> Res<Launchers> {
        let guardian = || {
            GuardianLauncher::new(GuardianProgram::Path(
                env!("CARGO_BIN_EXE_procjournal-guardian").into(),
            ))
        };
        let mut list: Vec<(&'static str, Arc<dyn Launcher>)> = vec![
            ("group", Arc::new(GroupLauncher)),
            ("guardian", Arc::new(guardian()?)),
        ];
        let mut cgroup_base = None;
        match CgroupBase::probe(&format!("procjournal-bench-{}", std::process::id())) {
            Ok(base) => {
                println!("guardian+cgroup: scopes under {}", base.dir().display());
                cgroup_base = Some(base.dir().to_owned());
                list.push((
                    "guardian+cgroup",
                    Arc::new(guardian()?.with_cgroups(Some(base))),
                ));
            }
            Err(e) => println!("guardian+cgroup skipped: the cgroup probe failed: {e}"),
        }
        Ok(Launchers { list, cgroup_base })
    }

    /// Removes the cgroup base (every scope in it was removed by its guardian).
    fn remove_cgroup_base(&self) {
        if let Some(dir) = &self.cgroup_base
            && let Err(e) = std::fs::remove_dir(dir)
        {
            println!("could not remove the cgroup base {}: {e}", dir.display());
        }
    }
}

/// Samples of the `guardian` part: per launcher (in [`Launchers`] order), and the baseline.
#[derive(Debug, Default)]
struct GuardianResults {
    p50: Vec<Samples>,
    p90: Vec<Samples>,
    base_p50: Samples,
    base_p90: Samples,
}

/// One round of the `guardian` part: every launcher's starts and the plain spawns, in an order
/// rotated every round.
fn guardian_round(
    i: usize,
    plan: Plan,
    base: &Path,
    rt: &tokio::runtime::Runtime,
    launchers: &Launchers,
    r: &mut GuardianResults,
) -> Res<()> {
    let plan = Plan {
        starts: plan.guardian_starts,
        ..plan
    };
    let n = launchers.list.len();
    r.p50.resize_with(n, Samples::default);
    r.p90.resize_with(n, Samples::default);
    // Index n is the baseline.
    for k in (0..=n).map(|k| (k + i) % (n + 1)) {
        if k == n {
            let s = rt.block_on(plain_spawns(plan, false))?;
            r.base_p50.push(s.p50);
            r.base_p90.push(s.p90);
        } else {
            let root = base.join(format!("guardian-{k}-{i}"));
            let launcher = Arc::clone(&launchers.list[k].1);
            let (running, _) = rt.block_on(supervised_starts(&root, plan, launcher))?;
            discard(&root)?;
            r.p50[k].push(running.p50);
            r.p90[k].push(running.p90);
        }
    }
    let figures: Vec<String> = launchers
        .list
        .iter()
        .enumerate()
        .map(|(k, (name, _))| format!("{name} {:.0}/{:.0}", r.p50[k].0[i], r.p90[k].0[i]))
        .collect();
    println!(
        "  start -> running p50/p90 us: {}; plain spawn+wait {:.0}/{:.0}",
        figures.join("; "),
        r.base_p50.0[i],
        r.base_p90.0[i]
    );
    Ok(())
}

/// How many live processes (zombies excluded: they are dead, and here PID 1 reaps orphans only
/// every ~2 s) hold `MARK=<token>` in their environment.
fn marked(token: &str) -> Res<usize> {
    let entry = format!("{MARK}={token}").into_bytes();
    let mut n = 0;
    for dirent in std::fs::read_dir("/proc")?.flatten() {
        let name = dirent.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // Vanished and unreadable processes are skipped.
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|e| e == entry.as_slice()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let state = stat
            .rfind(')')
            .and_then(|at| stat[at + 1..].split_whitespace().next());
        if !matches!(state, Some("Z" | "X")) {
            n += 1;
        }
    }
    Ok(n)
}

/// Scans /proc, `pause` apart, until `done` holds of the count of marked processes. Returns when
/// the scan that found it began and the first scan's count; an error after [`HANG_GUARD`].
fn poll_marked(
    token: &str,
    pause: Duration,
    what: &str,
    done: impl Fn(usize) -> bool,
) -> Res<(Instant, usize)> {
    let t0 = Instant::now();
    let mut first = None;
    loop {
        let at = Instant::now();
        let n = marked(token)?;
        let first = *first.get_or_insert(n);
        if done(n) {
            return Ok((at, first));
        }
        if t0.elapsed() > HANG_GUARD {
            return Err(format!("{what}: {n} marked processes after {HANG_GUARD:?}").into());
        }
        std::thread::sleep(pause);
    }
}

/// One supervised stop of the 200-process tree.
#[derive(Debug, Clone, Copy)]
struct StopRun {
    /// `stop` called -> returned, ms.
    returned_ms: f64,
    /// `stop` called -> returned and no marked process live, ms.
    gone_ms: f64,
    /// Marked processes live when `stop` returned.
    left: usize,
    /// The manifest's `released` (the tree's exit proof) was set when `stop` returned.
    released: bool,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn supervised_tree_stop(
    root: &Path,
    launcher: Arc<dyn Launcher>,
    token: String,
) -> Res<StopRun> {
    let mut config = config(root);
    config.launcher = launcher;
    let (sup, _) = Supervisor::open(config, Services::noop()).await?;
    let run = async {
        let prepared = sup.prepare(
            Command::new("env")
                .args([format!("{MARK}={token}"), "sh".into(), "-c".into()])
                .arg(TREE_SCRIPT)
                .cwd(root),
        )?;
        let handle = sup
            .start(prepared)
            .await
            .map_err(|e| format!("start: {e}"))?;
        let t = token.clone();
        tokio::task::spawn_blocking(move || {
            poll_marked(&t, Duration::from_millis(10), "forming", |n| {
                n >= TREE_PROCS
            })
        })
        .await??;
        let t0 = Instant::now();
        let summary = sup.stop(&handle, TREE_GRACE).await?;
        let returned = t0.elapsed();
        let released = sup.manifest(&handle).is_some_and(|m| m.released.is_some());
        if summary.state != State::Terminated {
            return Err(format!(
                "the tree's stop ended {:?} {:?}",
                summary.state, summary.exit
            )
            .into());
        }
        let t = token.clone();
        let (at, left) = tokio::task::spawn_blocking(move || {
            poll_marked(&t, Duration::from_millis(1), "vanishing", |n| n == 0)
        })
        .await??;
        let gone = if left == 0 { returned } else { at - t0 };
        Ok::<_, Box<dyn Error + Send + Sync>>(StopRun {
            returned_ms: ms(returned),
            gone_ms: ms(gone),
            left,
            released,
        })
    }
    .await;
    sup.shutdown(Duration::from_secs(1)).await;
    run
}

/// The baseline: the same tree in a plain process group, `killpg(SIGTERM)`, `wait()` of `sh`,
/// then /proc scanned until no marked process is live. Milliseconds from the kill.
fn plain_tree_kill(token: &str) -> Res<f64> {
    use nix::sys::signal::{Signal, killpg};
    let mut child = std::process::Command::new("env")
        .arg(format!("{MARK}={token}"))
        .args(["sh", "-c", TREE_SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
    let mut measure = || -> Res<f64> {
        poll_marked(token, Duration::from_millis(10), "forming", |n| {
            n >= TREE_PROCS
        })?;
        let t0 = Instant::now();
        killpg(pgid, Signal::SIGTERM)?;
        child.wait()?;
        let waited = t0.elapsed();
        let (at, left) = poll_marked(token, Duration::from_millis(1), "vanishing", |n| n == 0)?;
        Ok(ms(if left == 0 { waited } else { at - t0 }))
    };
    let measured = measure();
    // Unreaped, `sh` still pins the group id: end what is left of a failed run.
    if measured.is_err() && matches!(child.try_wait(), Ok(None)) {
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = child.wait();
    }
    measured
}

/// Samples of the `tree_stop` part: per launcher (in [`Launchers`] order), and the baseline.
#[derive(Debug, Default)]
struct TreeStopResults {
    runs: Vec<Vec<StopRun>>,
    base: Samples,
}

fn tree_stop_run(
    i: usize,
    base: &Path,
    rt: &tokio::runtime::Runtime,
    launchers: &Launchers,
    r: &mut TreeStopResults,
) -> Res<()> {
    let n = launchers.list.len();
    r.runs.resize_with(n, Vec::new);
    for k in (0..=n).map(|k| (k + i) % (n + 1)) {
        let token = format!("{}-{i}-{k}", std::process::id());
        if k == n {
            r.base.push(plain_tree_kill(&token)?);
        } else {
            let root = base.join(format!("tree-{k}-{i}"));
            let launcher = Arc::clone(&launchers.list[k].1);
            let run = rt.block_on(supervised_tree_stop(&root, launcher, token))?;
            discard(&root)?;
            r.runs[k].push(run);
        }
    }
    let figures: Vec<String> = launchers
        .list
        .iter()
        .zip(&r.runs)
        .map(|(l, runs)| {
            let run = runs[i];
            format!(
                "{} {:.1} (returned {:.1}, {} left, released {})",
                l.0,
                run.gone_ms,
                run.returned_ms,
                run.left,
                if run.released { "yes" } else { "no" }
            )
        })
        .collect();
    println!(
        "  run {}: stop -> tree gone ms: {}; plain killpg {:.1}",
        i + 1,
        figures.join("; "),
        r.base.0[i]
    );
    Ok(())
}

fn print_guardian(launchers: &Launchers, r: &GuardianResults) {
    let names: Vec<(String, String)> = launchers
        .list
        .iter()
        .map(|(name, _)| {
            (
                format!("{name}: start -> running p50 (us)"),
                format!("{name}: start -> running p90 (us)"),
            )
        })
        .collect();
    let mut rows = Vec::new();
    for (k, (name, _)) in launchers.list.iter().enumerate() {
        let target = if name.starts_with("guardian") {
            Target::MaxRatio(3.0)
        } else {
            Target::None
        };
        rows.push(Row {
            figure: &names[k].0,
            samples: &r.p50[k],
            baseline: "tokio spawn+wait `true` p50",
            base: &r.base_p50,
            target,
        });
        rows.push(Row {
            figure: &names[k].1,
            samples: &r.p90[k],
            baseline: "tokio spawn+wait `true` p90",
            base: &r.base_p90,
            target: Target::None,
        });
    }
    common::print_rows(&rows);
}

fn print_tree_stop(launchers: &Launchers, r: &TreeStopResults) {
    let samples: Vec<(String, Samples, String, Samples)> = launchers
        .list
        .iter()
        .zip(&r.runs)
        .map(|((name, _), runs)| {
            (
                format!("{name}: stop -> tree gone (ms)"),
                Samples(runs.iter().map(|run| run.gone_ms).collect()),
                format!("  {name}: stop -> returned (ms)"),
                Samples(runs.iter().map(|run| run.returned_ms).collect()),
            )
        })
        .collect();
    let mut rows = Vec::new();
    for (gone_name, gone, returned_name, returned) in &samples {
        for (figure, samples) in [(gone_name, gone), (returned_name, returned)] {
            rows.push(Row {
                figure,
                samples,
                baseline: "killpg SIGTERM, plain group",
                base: &r.base,
                target: Target::None,
            });
        }
    }
    common::print_rows(&rows);
    for ((name, _), runs) in launchers.list.iter().zip(&r.runs) {
        println!(
            "{name}: released when stop returned in {}/{} runs; marked processes left then: {:?}",
            runs.iter().filter(|run| run.released).count(),
            runs.len(),
            runs.iter().map(|run| run.left).collect::<Vec<_>>()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The report.

#[derive(Debug, Default)]
struct Results {
    start_p50: Samples,
    start_p99: Samples,
    terminal_p50: Samples,
    terminal_p99: Samples,
    spawn_p50: Samples,
    spawn_p99: Samples,
    start_runq: Samples,
    spawn_runq: Samples,
    piped_p50: Samples,
    piped_p99: Samples,
    append_p50: Samples,
    append_p99: Samples,
    spool_p50: Samples,
    spool_p99: Samples,
    sup_mibps: Samples,
    sup_cpu: Samples,
    final_only_mibps: Samples,
    final_only_cpu: Samples,
    copy_mibps: Samples,
    copy_cpu: Samples,
    bigpipe_mibps: Samples,
    bigpipe_cpu: Samples,
    synced_mibps: Samples,
    synced_cpu: Samples,
    sup_rss: Samples,
    sup_anon: Samples,
    plain_rss: Samples,
    plain_anon: Samples,
}

/// Which parts run (`PROCJOURNAL_BENCH_ONLY=latency|starts|output|rss|guardian|tree_stop`, for
/// profiling one of them; `starts` is the supervised starts alone, without baseline or
/// breakdown).
#[derive(Debug, Clone, Copy, Default)]
struct Parts {
    latency: bool,
    starts_only: bool,
    output: bool,
    rss: bool,
    guardian: bool,
    tree_stop: bool,
}

fn latency_round(
    i: usize,
    plan: Plan,
    base: &Path,
    rt: &tokio::runtime::Runtime,
    r: &mut Results,
    starts_only: bool,
) -> Res<()> {
    let swap = i % 2 == 1;
    let root = base.join(format!("latency-{i}"));
    for which in [swap, !swap] {
        if which && starts_only {
            continue;
        }
        if which {
            let s = rt.block_on(plain_spawns(plan, false))?;
            r.spawn_p50.push(s.p50);
            r.spawn_p99.push(s.p99);
            r.spawn_runq.push(s.runq);
        } else {
            let (running, terminal) =
                rt.block_on(supervised_starts(&root, plan, Arc::new(GroupLauncher)))?;
            r.start_p50.push(running.p50);
            r.start_p99.push(running.p99);
            r.start_runq.push(running.runq);
            r.terminal_p50.push(terminal.p50);
            r.terminal_p99.push(terminal.p99);
        }
    }
    discard(&root)?;
    if starts_only {
        println!(
            "  start -> running p50 {:.0} p99 {:.0} us",
            r.start_p50.0[i], r.start_p99.0[i]
        );
        return Ok(());
    }
    // The breakdown.
    let s = rt.block_on(plain_spawns(plan, true))?;
    r.piped_p50.push(s.p50);
    r.piped_p99.push(s.p99);
    let s = journal_appends(&root, plan)?;
    discard(&root)?;
    r.append_p50.push(s.p50);
    r.append_p99.push(s.p99);
    std::fs::create_dir_all(&root)?;
    let s = spool_creations(&root, plan)?;
    discard(&root)?;
    r.spool_p50.push(s.p50);
    r.spool_p99.push(s.p99);
    println!(
        "  start -> running p50 {:.0} p99 {:.0} us (start -> terminal p50 {:.0} p99 {:.0}); \
         plain spawn+wait p50 {:.0} p99 {:.0} us",
        r.start_p50.0[i],
        r.start_p99.0[i],
        r.terminal_p50.0[i],
        r.terminal_p99.0[i],
        r.spawn_p50.0[i],
        r.spawn_p99.0[i]
    );
    println!(
        "  breakdown p50/p99 us: spawn+wait with 3 pipes and own group {:.0}/{:.0}; durable \
         journal append {:.0}/{:.0}; Spool::open_writer (new dir) {:.0}/{:.0}; run-queue wait \
         per start (all threads): supervised {:.0}, plain {:.0}",
        r.piped_p50.0[i],
        r.piped_p99.0[i],
        r.append_p50.0[i],
        r.append_p99.0[i],
        r.spool_p50.0[i],
        r.spool_p99.0[i],
        r.start_runq.0[i],
        r.spawn_runq.0[i]
    );
    Ok(())
}

fn output_round(
    i: usize,
    plan: Plan,
    base: &Path,
    rt: &tokio::runtime::Runtime,
    r: &mut Results,
) -> Res<()> {
    let swap = i % 2 == 1;
    let root = base.join(format!("output-{i}"));
    let file = base.join(format!("copy-{i}"));
    nix::unistd::sync();
    for which in [swap, !swap] {
        if which {
            let kind = CopyKind {
                big_pipe: false,
                fdatasync: false,
            };
            let (mibps, cpu) = plain_copy(&file, plan.output_bytes, kind)?;
            r.copy_mibps.push(mibps);
            r.copy_cpu.push(cpu);
            discard(&file)?;
        } else {
            let (mibps, cpu) = rt.block_on(supervised_output(&root, plan.output_bytes, true))?;
            r.sup_mibps.push(mibps);
            r.sup_cpu.push(cpu);
            discard(&root)?;
        }
    }
    // Diagnostics.
    let (mibps, cpu) = rt.block_on(supervised_output(&root, plan.output_bytes, false))?;
    discard(&root)?;
    r.final_only_mibps.push(mibps);
    r.final_only_cpu.push(cpu);
    for fdatasync in [false, true] {
        let kind = CopyKind {
            big_pipe: true,
            fdatasync,
        };
        let (mibps, cpu) = plain_copy(&file, plan.output_bytes, kind)?;
        discard(&file)?;
        if fdatasync {
            r.synced_mibps.push(mibps);
            r.synced_cpu.push(cpu);
        } else {
            r.bigpipe_mibps.push(mibps);
            r.bigpipe_cpu.push(cpu);
        }
    }
    println!(
        "  {} of output, MiB/s (CPU s/GiB): supervisor {:.0} ({:.2}); plain copy {:.0} ({:.2}); \
         supervisor syncing only at the end {:.0} ({:.2}); 1 MiB pipe {:.0} ({:.2}); 1 MiB \
         pipe + fdatasync {:.0} ({:.2})",
        size_name(plan.output_bytes),
        r.sup_mibps.0[i],
        r.sup_cpu.0[i],
        r.copy_mibps.0[i],
        r.copy_cpu.0[i],
        r.final_only_mibps.0[i],
        r.final_only_cpu.0[i],
        r.bigpipe_mibps.0[i],
        r.bigpipe_cpu.0[i],
        r.synced_mibps.0[i],
        r.synced_cpu.0[i]
    );
    Ok(())
}

fn rss_round(i: usize, plan: Plan, base: &Path, r: &mut Results) -> Res<()> {
    let swap = i % 2 == 1;
    let root = base.join(format!("rss-{i}"));
    for which in [swap, !swap] {
        if which {
            let (rss, anon) = rss_per_process("plain", &root, plan.idle_children)?;
            r.plain_rss.push(rss);
            r.plain_anon.push(anon);
        } else {
            let (rss, anon) = rss_per_process("supervisor", &root, plan.idle_children)?;
            r.sup_rss.push(rss);
            r.sup_anon.push(anon);
        }
    }
    discard(&root)?;
    println!(
        "  KiB per idle process ({}), VmRSS (RssAnon): supervisor {:.1} ({:.1}); plain tokio \
         spawn {:.1} ({:.1})",
        plan.idle_children, r.sup_rss.0[i], r.sup_anon.0[i], r.plain_rss.0[i], r.plain_anon.0[i]
    );
    Ok(())
}

fn main() -> Res<()> {
    if let Ok(mode) = std::env::var(RSS_CHILD_ENV) {
        return rss_child(&mode);
    }
    let plan = common::plan(FULL, QUICK);
    let tmp = tempfile::tempdir_in(common::bench_dir()?)?;
    let base = tmp.path();
    common::print_file_system(base, "roots", "is memory: the write figures mean nothing");
    println!(
        "{} rounds; {} timed starts (+{} warm-up); {} of output; {} idle processes; {} timed \
         starts per launcher (guardian); {} tree stops per launcher (tree_stop); {} available CPUs",
        plan.rounds,
        plan.starts,
        plan.warmup_starts,
        size_name(plan.output_bytes),
        plan.idle_children,
        plan.guardian_starts,
        plan.tree_runs,
        common::available_cpus()
    );
    let rt = runtime()?;
    let parts = match std::env::var("PROCJOURNAL_BENCH_ONLY").as_deref() {
        Ok(only @ ("latency" | "starts")) => Parts {
            latency: true,
            starts_only: only == "starts",
            ..Parts::default()
        },
        Ok("output") => Parts {
            output: true,
            ..Parts::default()
        },
        Ok("rss") => Parts {
            rss: true,
            ..Parts::default()
        },
        Ok("guardian") => Parts {
            guardian: true,
            ..Parts::default()
        },
        Ok("tree_stop") => Parts {
            tree_stop: true,
            ..Parts::default()
        },
        _ => Parts {
            latency: true,
            starts_only: false,
            output: true,
            rss: true,
            guardian: true,
            tree_stop: true,
        },
    };
    let launchers = if parts.guardian || parts.tree_stop {
        Some(Launchers::new()?)
    } else {
        None
    };
    let mut r = Results::default();
    let mut g = GuardianResults::default();
    let t0 = Instant::now();
    let rounds = if parts.latency || parts.output || parts.rss || parts.guardian {
        plan.rounds
    } else {
        0
    };
    for i in 0..rounds {
        println!("round {} (load {})", i + 1, load_average());
        if parts.latency {
            latency_round(i, plan, base, &rt, &mut r, parts.starts_only)?;
        }
        if parts.output {
            output_round(i, plan, base, &rt, &mut r)?;
        }
        if parts.rss {
            rss_round(i, plan, base, &mut r)?;
        }
        if let Some(launchers) = launchers.as_ref().filter(|_| parts.guardian) {
            guardian_round(i, plan, base, &rt, launchers, &mut g)?;
        }
    }
    let mut t = TreeStopResults::default();
    if let Some(launchers) = launchers.as_ref().filter(|_| parts.tree_stop) {
        println!(
            "tree stop: {} runs (load {})",
            plan.tree_runs,
            load_average()
        );
        for i in 0..plan.tree_runs {
            tree_stop_run(i, base, &rt, launchers, &mut t)?;
        }
    }
    println!("({:.0} s)", t0.elapsed().as_secs_f64());
    if let Some(launchers) = &launchers {
        launchers.remove_cgroup_base();
        if parts.guardian {
            println!();
            print_guardian(launchers, &g);
        }
        if parts.tree_stop {
            println!();
            print_tree_stop(launchers, &t);
        }
    }
    if !(parts.latency || parts.output || parts.rss) {
        return Ok(());
    }
    println!();
    common::print_rows(&[
        Row {
            figure: "start -> running p50 (us)",
            samples: &r.start_p50,
            baseline: "tokio spawn+wait `true` p50",
            base: &r.spawn_p50,
            target: Target::MaxRatio(1.5),
        },
        Row {
            figure: "start -> running p99 (us)",
            samples: &r.start_p99,
            baseline: "tokio spawn+wait `true` p99",
            base: &r.spawn_p99,
            target: Target::MaxRatio(3.0),
        },
        Row {
            figure: "start -> terminal p50 (us)",
            samples: &r.terminal_p50,
            baseline: "tokio spawn+wait `true` p50",
            base: &r.spawn_p50,
            target: Target::None,
        },
        Row {
            figure: "start -> terminal p99 (us)",
            samples: &r.terminal_p99,
            baseline: "tokio spawn+wait `true` p99",
            base: &r.spawn_p99,
            target: Target::None,
        },
        Row {
            figure: "  part: spawn+wait, 3 pipes, own group (p50 us)",
            samples: &r.piped_p50,
            baseline: "tokio spawn+wait `true` p50",
            base: &r.spawn_p50,
            target: Target::None,
        },
        Row {
            figure: "  part: durable journal append (p50 us)",
            samples: &r.append_p50,
            baseline: "tokio spawn+wait `true` p50",
            base: &r.spawn_p50,
            target: Target::None,
        },
        Row {
            figure: "  part: durable journal append (p99 us)",
            samples: &r.append_p99,
            baseline: "tokio spawn+wait `true` p99",
            base: &r.spawn_p99,
            target: Target::None,
        },
        Row {
            figure: "  run-queue wait per start, all threads (us)",
            samples: &r.start_runq,
            baseline: "same, plain spawn+wait",
            base: &r.spawn_runq,
            target: Target::None,
        },
        Row {
            figure: "  part: Spool::open_writer, new dir (p50 us)",
            samples: &r.spool_p50,
            baseline: "tokio spawn+wait `true` p50",
            base: &r.spawn_p50,
            target: Target::None,
        },
        Row {
            figure: "output through supervisor (MiB/s)",
            samples: &r.sup_mibps,
            baseline: "pipe -> Rust copy -> file",
            base: &r.copy_mibps,
            target: Target::MinRatio(0.7),
        },
        Row {
            figure: "  same, synced only at the end (MiB/s)",
            samples: &r.final_only_mibps,
            baseline: "pipe -> Rust copy -> file",
            base: &r.copy_mibps,
            target: Target::None,
        },
        Row {
            figure: "output through supervisor (MiB/s)",
            samples: &r.sup_mibps,
            baseline: "same, 1 MiB pipe",
            base: &r.bigpipe_mibps,
            target: Target::None,
        },
        Row {
            figure: "output through supervisor (MiB/s)",
            samples: &r.sup_mibps,
            baseline: "same, 1 MiB pipe + fdatasync",
            base: &r.synced_mibps,
            target: Target::None,
        },
        Row {
            figure: "output CPU of this process (s/GiB)",
            samples: &r.sup_cpu,
            baseline: "pipe -> Rust copy -> file",
            base: &r.copy_cpu,
            target: Target::None,
        },
        Row {
            figure: "output CPU of this process (s/GiB)",
            samples: &r.sup_cpu,
            baseline: "same, 1 MiB pipe + fdatasync",
            base: &r.synced_cpu,
            target: Target::None,
        },
        Row {
            figure: "VmRSS per idle process (KiB)",
            samples: &r.sup_rss,
            baseline: "plain tokio spawn, pipes held",
            base: &r.plain_rss,
            target: Target::BelowAbs(RSS_TARGET_KIB),
        },
        Row {
            figure: "RssAnon per idle process (KiB)",
            samples: &r.sup_anon,
            baseline: "plain tokio spawn, pipes held",
            base: &r.plain_anon,
            target: Target::None,
        },
    ]);
    Ok(())
}
