//! Crashes of the launch handshake never wedge a root, and never release a live tree.
//!
//! A child process (this test binary, re-run as `crash_child` with `PJ_CRASH_POINT` set) opens a
//! real supervisor on a root, with the real guardian launcher (the `procjournal` binary) wrapped
//! by a launcher that stops at one point of the handshake (after `REG`; with `Registered`
//! durable, `Scoped` written and `GO` not sent; after `RUN`; after the workload's exit; after
//! the receipt), says so on its stdout, and sleeps. The test SIGKILLs it there (and, at some
//! points, its guardian too), waits until the guardian is gone, and then runs
//! `procjournal run -- echo hello` on the root, which must be admitted and print `hello`, and
//! `procjournal ps --json`, which must show the crashed process's tree `exited` unless a
//! process of that tree is still alive (then it must not be).
//! Every process of a crashed tree carries `PJ_CRASH_MARK=<token>` in its environment: that is
//! how the test tells whether a tree is really alive, and what it kills on the way out.
//!
//! The empty receipt: a launch on a full tmpfs root (the guardian can reserve no space for its
//! receipt, so the receipt stays empty) ends with its tree exited by its removed cgroup, and
//! the next `run` on the root, once space is back, is admitted. And its other side: a tmpfs
//! that fills while the tree runs leaves the receipt whole (its space was reserved at its
//! creation), and the receipt proves the tree's exit.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command as OsCommand, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::Killed;
use crate::common::tmpfs::SmallTmpfs;
use procjournal::supervisor::{Command, Services, Supervisor, SupervisorConfig};
use procjournal::tree::cgroup::{CgroupBase, base_name};
use procjournal::tree::{
    GuardianLauncher, GuardianProgram, Launcher, Register, SpawnError, SpawnSpec, Spawned,
};

const MARK: &str = "PJ_CRASH_MARK";
/// A hang guard: bounds a wait for a condition, measures nothing.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn pj() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_procjournal"))
}

/// The guardian program of the launchers built here: the one the CLI runs by default.
fn guardian_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_procjournal-guardian"))
}

/// Where the child stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// `REG` received, `Scoped` not yet appended.
    AfterReg,
    /// `Registered` durable and `Scoped` written, `GO` not sent: the window that wedged roots.
    ScopeWritten,
    /// `GO` sent and `RUN` received; the workload runs.
    AfterRun,
    /// The workload exited (its receipt may or may not be written yet).
    WorkloadExited,
    /// The guardian's receipt is written.
    AfterReceipt,
    /// `GO` sent and `RUN` received with no `Scoped` in the journal: what a lost page cache
    /// leaves of a launch whose scope was written but not yet flushed. Not in [`Point::ALL`]:
    /// its tree cannot be proven gone, which `check_after` would not accept.
    ScopeLost,
}

impl Point {
    const ALL: [Point; 5] = [
        Point::AfterReg,
        Point::ScopeWritten,
        Point::AfterRun,
        Point::WorkloadExited,
        Point::AfterReceipt,
    ];

    fn name(self) -> &'static str {
        match self {
            Point::AfterReg => "after_reg",
            Point::ScopeWritten => "scope_written",
            Point::AfterRun => "after_run",
            Point::WorkloadExited => "workload_exited",
            Point::AfterReceipt => "after_receipt",
            Point::ScopeLost => "scope_lost",
        }
    }

    fn parse(s: &str) -> Point {
        Point::ALL
            .into_iter()
            .chain([Point::ScopeLost])
            .find(|p| p.name() == s)
            .unwrap_or_else(|| panic!("unknown crash point {s}"))
    }
}

/// The real guardian launcher, stopping at `point`.
#[derive(Debug)]
struct StopAt {
    inner: GuardianLauncher,
    point: Point,
}

fn pause(point: Point) -> ! {
    println!("at {}", point.name());
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie has exited; its parent reaps it.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < HANG_GUARD, "hung: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Launcher for StopAt {
    fn gates(&self) -> bool {
        true
    }

    fn launch(&self, spec: &SpawnSpec, register: &mut Register<'_>) -> Result<Spawned, SpawnError> {
        let point = self.point;
        let mut workload = 0;
        let mut wrapped = |scope: &procjournal::tree::TreeScope| {
            let guardian = scope.guardian.map_or(0, |g| g.pid);
            workload = scope.workload.pid;
            println!("scope {guardian} {workload}");
            if point == Point::AfterReg {
                pause(point);
            }
            if point == Point::ScopeLost {
                // Neither the scope nor the registration's flush: SIGKILL keeps the page cache,
                // so the registration is all a restore finds, as after a lost `Scoped`.
                return Ok(());
            }
            let registered = register(scope);
            if point == Point::ScopeWritten && registered.is_ok() {
                pause(point);
            }
            registered
        };
        let spawned = self.inner.launch(spec, &mut wrapped)?;
        match point {
            Point::AfterRun | Point::ScopeLost => pause(point),
            Point::WorkloadExited => {
                wait_until("the workload's exit", || gone(workload));
                pause(point)
            }
            Point::AfterReceipt => {
                let receipt = spec.receipts.join(format!("{}.receipt", spec.name));
                wait_until("the receipt", || {
                    std::fs::read_to_string(&receipt).is_ok_and(|t| t.contains("\ncrc32 "))
                });
                pause(point)
            }
            _ => Ok(spawned),
        }
    }
}

/// The child: a supervisor that launches one marked workload and stops at `PJ_CRASH_POINT`.
#[test]
fn crash_child() {
    let Ok(point) = std::env::var("PJ_CRASH_POINT") else {
        return;
    };
    let point = Point::parse(&point);
    let root = PathBuf::from(std::env::var("PJ_CRASH_ROOT").unwrap());
    let cgroup = std::env::var("PJ_CRASH_CGROUP").is_ok();
    let token = std::env::var("PJ_CRASH_TOKEN").unwrap();
    let script = std::env::var("PJ_CRASH_SCRIPT").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut inner = GuardianLauncher::new(GuardianProgram::Path(guardian_bin())).unwrap();
        if cgroup {
            inner = inner.with_cgroups(Some(CgroupBase::probe(&base_name(&root)).unwrap()));
        }
        let mut config = SupervisorConfig::new(&root);
        config.launcher = Arc::new(StopAt { inner, point });
        let (sup, _) = Supervisor::open(config, Services::noop()).await.unwrap();
        let command = Command::new("sh")
            .arg("-c")
            .arg(script)
            .cwd(&root)
            .env(MARK, token);
        let prepared = sup.prepare(command).unwrap();
        let started = sup.start(prepared).await;
        // Only a point the launch passed gets here: wait for the end, then stop there.
        if let Ok(handle) = started {
            let _ = sup.wait(&handle, None).await;
        }
        pause(point);
    });
}

/// Pids of live (not zombie) processes whose environment carries `MARK=token`.
fn marked(token: &str) -> Vec<u32> {
    let needle = format!("{MARK}={token}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) && !gone(pid) {
            out.push(pid);
        }
    }
    out
}

/// SIGKILL through a pidfd (a pid that names another process by now is not touched: the
/// pidfd is checked to still carry the mark).
fn kill_marked(token: &str) {
    for pid in marked(token) {
        if let Ok(fd) = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::PidfdFlags::empty(),
        ) && marked(token).contains(&pid)
        {
            let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
        }
    }
}

struct Crashed {
    guardian: u32,
    token: String,
}

impl Drop for Crashed {
    fn drop(&mut self) {
        kill_marked(&self.token);
    }
}

/// Runs the child to `point` and SIGKILLs it there (with its guardian when `kill_guardian`).
fn crash(root: &Path, cgroup: bool, point: Point, script: &str, kill_guardian: bool) -> Crashed {
    let token = format!("{}-{}", std::process::id(), uuid_like());
    let mut child = OsCommand::new(std::env::current_exe().unwrap())
        .arg(crate::common::harness_name(module_path!(), "crash_child"))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env("PJ_CRASH_POINT", point.name())
        .env("PJ_CRASH_ROOT", root)
        .env("PJ_CRASH_TOKEN", &token)
        .env("PJ_CRASH_SCRIPT", script)
        .envs(cgroup.then_some(("PJ_CRASH_CGROUP", "1")))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut guardian = 0;
    let at = format!("at {}", point.name());
    loop {
        let line = lines
            .next()
            .expect("the child ended before its crash point")
            .unwrap();
        // libtest's `test crash_child ... ` may precede it on its line.
        if let Some((_, rest)) = line.split_once("scope ") {
            guardian = rest.split(' ').next().unwrap().parse().unwrap();
        }
        if line.ends_with(&at) {
            break;
        }
    }
    let crashed = Crashed { guardian, token };
    if kill_guardian {
        assert_ne!(guardian, 0, "the child named no guardian");
        // Our grandchild, unreaped by its parent (stopped at the crash point): its pid is its.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(guardian as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    crashed
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{}", N.fetch_add(1, Ordering::SeqCst))
}

/// A CLI command on `root`, to its end: within a hang guard (a command hung once here, in a
/// loaded run of the whole suite, and the suite then waited on it for good).
fn cli(root: &Path, args: &[&str]) -> std::process::Output {
    let mut command = OsCommand::new(pj());
    command
        .arg(args[0])
        .arg("--root")
        .arg(root)
        .args(&args[1..]);
    crate::common::bounded::output_within(&mut command, Duration::from_secs(180))
}

/// The ownership of the root's process number 1 (the crashed one), from `ps --json`.
fn ownership_of_first(root: &Path) -> serde_json::Value {
    first_process(root)["ownership"].clone()
}

/// The root's process number 1 (the crashed one), as `ps --json` shows it.
fn first_process(root: &Path) -> serde_json::Value {
    let out = cli(root, &["ps", "--json"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let first = text.lines().next().expect("ps lists the crashed process");
    let v: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(v["number"], 1, "{v}");
    v
}

/// `run --no-queue -- echo hello` on `root` is admitted at once and prints `hello`: nothing
/// left by a crash holds the capacity it needs.
fn admitted_without_queue(root: &Path, what: &str) {
    let out = cli(root, &["run", "--no-queue", "--", "echo", "hello"]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "hello"),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The tree mechanisms to crash under: a guardian alone, and a cgroup where one is usable.
fn mechanisms() -> Vec<bool> {
    let mut mechanisms = vec![false];
    if cgroups_usable() {
        mechanisms.push(true);
    }
    mechanisms
}

/// Whether a writable cgroup v2 hierarchy is here. Each call probes a base of its own name
/// and removes it again, so that concurrent tests neither race on one nor leave it behind.
fn cgroups_usable() -> bool {
    static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("procjournal-crash-probe-{}-{n}", std::process::id());
    match CgroupBase::probe(&name) {
        Ok(base) => {
            let _ = std::fs::remove_dir(base.dir());
            true
        }
        Err(_) => false,
    }
}

fn temp_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pj-crash-")
        .tempdir_in(if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .unwrap()
}

/// After a crash: once the guardian is gone, a `run` on the root is admitted, and the crashed
/// tree is `exited` only when none of its processes is alive, and not `unverified` when none is.
fn check_after(root: &Path, crashed: &Crashed, what: &str) -> serde_json::Value {
    if crashed.guardian != 0 {
        wait_until("the guardian's exit", || gone(crashed.guardian));
    }
    let out = cli(root, &["run", "--", "echo", "hello"]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "hello"),
        "{what}: the next run was not admitted: {}; ps: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&cli(root, &["ps", "--json"]).stdout)
    );
    let ownership = ownership_of_first(root);
    let alive = marked(&crashed.token);
    assert!(
        ownership["assessment"] != "unverified" || !alive.is_empty(),
        "{what}: nothing is alive, yet {ownership}"
    );
    if ownership["assessment"] == "exited" {
        assert!(
            alive.is_empty(),
            "{what}: released while {alive:?} live: {ownership}"
        );
    }
    ownership
}

/// The wedge: SIGKILL between `Scoped` written and `GO`. The guardian aborts (its receipt
/// has no nonce); the next `run` is admitted and `ps` shows the tree exited by that receipt,
/// with a cgroup and without one. Before the fix the receipt was "another registration's"
/// and the run exited 125 for want of capacity.
#[test]
fn a_crash_between_scoped_and_go_does_not_wedge_the_root() {
    for cgroup in mechanisms() {
        let dir = temp_root();
        let root = dir.path().join("root");
        let crashed = crash(&root, cgroup, Point::ScopeWritten, "echo first", false);
        let ownership = check_after(&root, &crashed, "scope_written");
        assert_eq!(ownership["assessment"], "exited", "{ownership}");
        assert_eq!(ownership["proof"]["by"], "receipt", "{ownership}");
    }
}

/// Every crash point of the launch handshake, each with the supervisor SIGKILLed there (the
/// guardian going on alone), with and without a cgroup; and, with a cgroup, the guardian
/// SIGKILLed with it before `GO` and while the workload runs. Never a slot held once the
/// guardian is gone, never a live tree released (`check_after`).
#[test]
fn no_crash_point_holds_a_slot_or_releases_a_live_tree() {
    let mut cases = Vec::new();
    let mechanisms = mechanisms();
    for &cgroup in &mechanisms {
        for point in Point::ALL {
            let script = match point {
                Point::AfterRun => "sleep 30",
                _ => "true",
            };
            cases.push((cgroup, point, script, false));
        }
    }
    if mechanisms.contains(&true) {
        cases.push((true, Point::ScopeWritten, "true", true));
        cases.push((true, Point::AfterRun, "sleep 30", true));
    }
    // Without a cgroup, a guardian killed while its workload runs lets the workload escape:
    // nothing proves it gone, and it is alive, so it must stay unverified.
    cases.push((false, Point::AfterRun, "sleep 30", true));
    for (cgroup, point, script, kill_guardian) in cases {
        let what = format!(
            "{} cgroup={cgroup} kill_guardian={kill_guardian}",
            point.name()
        );
        let dir = temp_root();
        let root = dir.path().join("root");
        let crashed = crash(&root, cgroup, point, script, kill_guardian);
        if !cgroup && kill_guardian {
            // The escaped workload is alive and holds its slot (rightly): no `run` is owed.
            wait_until("the guardian's exit", || gone(crashed.guardian));
            assert!(
                !marked(&crashed.token).is_empty(),
                "{what}: the workload died"
            );
            // A restore assesses it (the run may be refused for the slot the tree holds).
            let _ = cli(&root, &["run", "--", "true"]);
            let ownership = ownership_of_first(&root);
            assert_eq!(ownership["assessment"], "unverified", "{what}: {ownership}");
            // `ps` says what the evidence is, not "no receipt yet".
            let reason = ownership["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains("receipt is empty or incomplete")
                    && (reason.contains("the guardian is gone")
                        || reason.contains("the guardian has exited")),
                "{what}: {reason}"
            );
            // A stop re-assesses it: nothing proves the escaped tree gone, and it says so.
            let daemon = Daemon::serve(&root);
            let stop = cli(&root, &["stop", "1"]);
            drop(daemon);
            assert!(!stop.status.success(), "{what}: stop freed a live tree");
            assert!(
                String::from_utf8_lossy(&stop.stderr).contains("unverified"),
                "{what}: {}",
                String::from_utf8_lossy(&stop.stderr)
            );
            continue;
        }
        // Before `Scoped` nothing was recorded to hold a slot, and the aborted launch's receipt
        // (found by its handle alone) proves the command never ran.
        let ownership = check_after(&root, &crashed, &what);
        assert_eq!(ownership["assessment"], "exited", "{what}: {ownership}");
        if point == Point::AfterReg {
            assert_eq!(ownership["proof"]["by"], "receipt", "{what}: {ownership}");
            let receipts = std::fs::read_dir(root.join("trees")).unwrap().count();
            assert_eq!(receipts, 0, "{what}: the receipt was not retired");
        }
    }
}

/// A power loss without a reboot (a container restarted, `kill -9 -1`): supervisor, guardian and
/// workload SIGKILLed together, with no cgroup. Nothing proves such a tree gone, so it stays
/// `unverified`; but nothing of it can be observed either, so it is charged nothing: the next
/// `run --no-queue` is admitted however many such trees there are. Before, each was charged a
/// core and the floor for good, and on 2 cores the second one refused every later start (149
/// of 150 in a campaign of such crashes).
#[test]
fn trees_left_unverified_by_a_power_loss_hold_no_capacity() {
    let dir = temp_root();
    let root = dir.path().join("root");
    let rounds = 3;
    for _ in 0..rounds {
        let crashed = crash(&root, false, Point::AfterRun, "sleep 30", true);
        kill_marked(&crashed.token);
        wait_until("the workload's death", || marked(&crashed.token).is_empty());
    }
    admitted_without_queue(&root, "after the power losses");
    let ps = cli(&root, &["ps", "--json"]);
    let unverified = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|p| p["ownership"]["assessment"] == "unverified")
        .count();
    assert_eq!(
        unverified, rounds,
        "nothing proves them gone: none is released"
    );
}

/// A scope lost with the page cache after `GO` (a power loss, a failed write-back): restore finds
/// only the registration. The guardian took the tree down when its supervisor died, and its
/// receipt carries the nonce `GO` gave it, which nothing recorded binds: the tree is not
/// claimed `exited`, it stays `unverified` saying why, and it holds nothing, so the next `run`
/// is admitted. With a cgroup and without one.
#[test]
fn a_lost_scope_is_unverified_says_why_and_holds_nothing() {
    for cgroup in mechanisms() {
        let dir = temp_root();
        let root = dir.path().join("root");
        let crashed = crash(&root, cgroup, Point::ScopeLost, "sleep 30", false);
        wait_until("the guardian's exit", || gone(crashed.guardian));
        wait_until("the tree's end", || marked(&crashed.token).is_empty());
        admitted_without_queue(&root, &format!("cgroup={cgroup}"));
        let first = first_process(&root);
        assert_eq!(
            first["state"], "lost_on_restore",
            "cgroup={cgroup}: {first}"
        );
        let ownership = &first["ownership"];
        assert_eq!(
            ownership["assessment"], "unverified",
            "cgroup={cgroup}: {ownership}"
        );
        let reason = ownership["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("no tree scope was recorded") && reason.contains("power loss"),
            "cgroup={cgroup}: {reason}"
        );
    }
}

/// The empty receipt: launched on a full tmpfs root, the guardian can reserve no space for
/// its receipt and cannot write it; the tree is still `exited` (its cgroup was removed once
/// empty), and once space is back the next `run` is admitted.
#[test]
fn an_empty_receipt_on_a_full_disk_is_an_exit_by_its_cgroup() {
    let Some((tmpfs, root)) = small_tmpfs_root() else {
        return;
    };
    let fill = tmpfs.fill();
    let full = cli(&root, &["run", "--tree-mechanism", "cgroup", "--", "true"]);
    std::fs::remove_file(&fill).unwrap();
    assert!(
        full.status.success(),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    let out = cli(&root, &["run", "--", "echo", "hello"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hello");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ps = String::from_utf8(cli(&root, &["ps", "--json"]).stdout).unwrap();
    let second: serde_json::Value = serde_json::from_str(ps.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["ownership"]["assessment"], "exited", "{second}");
    // Not `receipt`: the receipt (removed once the release was durable) did not verify.
    assert_eq!(
        second["ownership"]["proof"]["by"], "cgroup_empty",
        "{second}"
    );
}

/// The other side of the empty receipt: a disk that fills while the tree runs. The guardian
/// made room for its receipt when it created it, so the receipt it writes at the end, on a
/// disk with no block left, is whole, and it proves the tree's exit.
#[test]
fn a_disk_that_fills_while_the_tree_runs_leaves_its_receipt_whole() {
    let dir = tempfile::tempdir().unwrap();
    let Some((tmpfs, root)) = small_tmpfs_root() else {
        return;
    };
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.01; done",
        started.display(),
        go.display()
    );
    let run = OsCommand::new(pj())
        .args(["run", "--root"])
        .arg(&root)
        .args(["--tree-mechanism", "cgroup", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Ends the `run` (and with it, through its guardian's lifeline, the tree) before the
    // tmpfs goes, whatever the test's end.
    let mut run = Killed(run);
    // The workload runs: its guardian created (and made room for) the receipt before it.
    wait_until("the workload", || started.exists());
    // Its room: the receipt's largest size (1024 bytes, journal-format.md) in zeros, which
    // read as a receipt not yet written.
    let receipts: Vec<_> = std::fs::read_dir(root.join("trees"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "receipt"))
        .collect();
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(std::fs::read(&receipts[0]).unwrap(), vec![0u8; 1024]);
    let fill = tmpfs.fill();
    std::fs::write(&go, b"").unwrap();
    let ended = Instant::now();
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(ended.elapsed() < HANG_GUARD, "hung: the run's end");
        std::thread::sleep(Duration::from_millis(5));
    };
    std::fs::remove_file(&fill).unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut run.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    let ps = String::from_utf8(cli(&root, &["ps", "--json"]).stdout).unwrap();
    let second: serde_json::Value = serde_json::from_str(ps.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["ownership"]["assessment"], "exited", "{second}");
    assert_eq!(second["ownership"]["proof"]["by"], "receipt", "{second}");
}

/// An 8 MiB tmpfs with a root on it whose journal and directories exist (one `run` made
/// them) before the disk fills; `None`, said on stderr, where no cgroup v2 is usable (the
/// root's runs use one) or no tmpfs can be mounted.
fn small_tmpfs_root() -> Option<(SmallTmpfs, PathBuf)> {
    if !cgroups_usable() {
        eprintln!("skipped: no usable cgroup v2 here");
        return None;
    }
    let tmpfs = SmallTmpfs::mount("8m")?;
    let root = tmpfs.path().join("root");
    let out = cli(&root, &["run", "--tree-mechanism", "cgroup", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    Some((tmpfs, root))
}

/// Kills the CPU hogs it holds when dropped (a failed assertion included).
struct Hogs(Vec<std::process::Child>);

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// A slot stays held after an end under CPU load: 100 sequential captures of a command that
/// exits 2, on one root, with a `yes` hog on every core, each failing fast when admission finds
/// no capacity (capture does not queue). None is refused: a guardian still writing its receipt
/// when the capture's drain looked is a lingering tree that the capture's shutdown waits for,
/// not an unverified one that the next capture's restore finds held. (The window itself is held
/// open deterministically by a failpoint in
/// `a_guardian_late_with_its_receipt_leaves_a_lingering_tree_not_an_unverified_one`; this is the
/// reproduction through the CLI, and its hogs burn every core it runs beside for as long as it
/// runs, so it is sized to load, not to count.)
#[test]
fn captures_under_cpu_load_never_find_a_slot_held() {
    const ROUNDS: usize = 100;
    let dir = temp_root();
    let root = dir.path().join("root");
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let _hogs = Hogs(
        (0..cores)
            .map(|_| {
                OsCommand::new("sh")
                    .args(["-c", "exec yes >/dev/null"])
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let mut refused = Vec::new();
    for round in 0..ROUNDS {
        let out = cli(&root, &["capture", "--", "sh", "-c", "echo x; exit 2"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if stderr.contains("no capacity") {
            refused.push((round, stderr));
            continue;
        }
        assert_eq!(out.status.code(), Some(2), "round {round}: {stderr}");
    }
    assert!(
        refused.is_empty(),
        "{} of {ROUNDS} refused: {refused:?}",
        refused.len()
    );
}

/// `stop` of a tree held unverified because its guardian (of the crashed supervisor) is still
/// ending it: the stop re-finds the guardian by its recorded identity, asks it to end the tree,
/// waits for it, and records the release its receipt proves before it answers, so that `ps`
/// right after shows the tree exited. The workload ignores SIGTERM, so the guardian takes its
/// grace (1.5 s) before SIGKILL, and the stop's own restore usually finds it still at work;
/// where the machine is slower than that, the restore proves the exit instead (still exited).
#[test]
fn stop_of_a_held_tree_ends_it_through_its_refound_guardian() {
    let dir = temp_root();
    let root = dir.path().join("root");
    let crashed = crash(
        &root,
        false,
        Point::AfterRun,
        "trap '' TERM; sleep 30",
        false,
    );
    let daemon = Daemon::serve(&root);
    let stop = cli(&root, &["stop", "1"]);
    drop(daemon);
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let ownership = ownership_of_first(&root);
    assert_eq!(ownership["assessment"], "exited", "{ownership}");
    assert!(marked(&crashed.token).is_empty(), "released while alive");
}

/// A daemon serving a root (`procjournal serve`), shut down and reaped when dropped.
struct Daemon {
    child: std::process::Child,
    root: PathBuf,
}

impl Daemon {
    fn serve(root: &Path) -> Daemon {
        let child = OsCommand::new(pj())
            .arg("serve")
            .arg("--root")
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let daemon = Daemon {
            child,
            root: root.to_owned(),
        };
        let socket = root.join("procjournal.sock");
        wait_until("the daemon's socket", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        daemon
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = cli(&self.root, &["shutdown"]);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The slot held after an end under load, made deterministic: the guardian is stopped by a
/// failpoint after its last reap and before its receipt and `DONE` (where a loaded machine
/// held it), so the drain's moment for the proof passes with the tree's only process left its
/// guardian. That tree must be lingering (watched until its receipt), never judged
/// `unverified` and held: before the guardian counted as a member, it was held, and a CLI
/// capture exited leaving it held, so that the next capture's restore found the guardian alive
/// and refused for want of capacity. Released, the receipt frees the slot and is recorded.
#[test]
fn a_guardian_late_with_its_receipt_leaves_a_lingering_tree_not_an_unverified_one() {
    use procjournal::admission::AdmissionConfig;
    use procjournal::lifecycle::LifecycleEvent;
    use procjournal::lifecycle::event::{ExitProof, ExitStatus};
    use procjournal::tree::guardian::failpoint;
    let (mechanisms, runtime) = failpoint_cases();
    for cgroup in mechanisms {
        let (_dir, root, gate) = failpoint_dirs();
        runtime.block_on(async {
            let sup = open_guarded(&root, cgroup, Some(AdmissionConfig::max_concurrent(1))).await;
            let command = Command::new("sh")
                .args(["-c", "echo x; exit 2"])
                .cwd(&root)
                .env(failpoint::BEFORE_RECEIPT, gate.display().to_string());
            let handle = sup.start(sup.prepare(command).unwrap()).await.unwrap();
            let ended = tokio::time::timeout(HANG_GUARD, sup.wait(&handle, None)).await;
            let summary = ended.expect("hung: the end").unwrap();
            assert_eq!(summary.exit, ExitStatus::Code(2));
            // The guardian is held (or on its way there, on a loaded machine): it has not
            // reported the tree gone, nor written its receipt.
            wait_until("the guardian at its failpoint", || {
                gate.join("reached").exists()
            });
            let stats = sup.stats().await.unwrap();
            assert_eq!(
                (stats.lingering, stats.unverified),
                (1, 0),
                "cgroup={cgroup}: a tree whose guardian is still at work was judged: {stats:?}"
            );
            // Still at the priority it was started with: it has work left that others wait on.
            let guardian: u32 = std::fs::read_to_string(gate.join("reached"))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                nice_of(guardian),
                nice_of(std::process::id()),
                "cgroup={cgroup}"
            );
            // Its slot is held, rightly, while it is watched.
            let in_use = || async { sup.admission().await.unwrap().decision.in_use };
            assert_eq!(in_use().await, 1);
            std::fs::write(gate.join("release"), b"").unwrap();
            let start = Instant::now();
            loop {
                let stats = sup.stats().await.unwrap();
                if stats.lingering == 0 {
                    assert_eq!(stats.unverified, 0, "{stats:?}");
                    assert_eq!(in_use().await, 0, "{stats:?}");
                    break;
                }
                assert!(start.elapsed() < HANG_GUARD, "hung: the receipt's release");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The slot is free: a start is admitted at once (no wait for capacity).
            let next = Command::new("true").cwd(&root);
            let next = sup.start(sup.prepare(next).unwrap()).await.unwrap();
            let _ = sup.wait(&next, None).await.unwrap();
            sup.shutdown(Duration::from_secs(1)).await;
        });
        let mut released = Vec::new();
        procjournal::journal::reader::JournalReader::open(&root)
            .unwrap()
            .scan(1, |r| {
                if let Ok(LifecycleEvent::TreeReleased(t)) =
                    LifecycleEvent::decode(r.kind, r.codec_version, r.payload)
                {
                    released.push(t.proof);
                }
            })
            .unwrap();
        let by_receipt = |p: &ExitProof| match p {
            ExitProof::Receipt { status, .. } => *status == ExitStatus::Code(2),
            _ => false,
        };
        assert!(
            released.iter().any(by_receipt),
            "cgroup={cgroup}: the release by receipt is not recorded: {released:?}"
        );
    }
}

/// A guardian that has reported its tree gone (`DONE`, its receipt written) but has not exited
/// does not hold the process's end: the end is recorded, released by the receipt, while the
/// guardian is still alive at its failpoint, and the guardian is reaped once it exits.
#[test]
fn the_end_is_recorded_by_receipt_before_its_guardian_exits_and_it_is_reaped_after() {
    use procjournal::lifecycle::event::{ExitProof, ExitStatus};
    use procjournal::tree::guardian::failpoint;
    let (mechanisms, runtime) = failpoint_cases();
    for cgroup in mechanisms {
        let (_dir, root, gate) = failpoint_dirs();
        runtime.block_on(async {
            let sup = open_guarded(&root, cgroup, None).await;
            let command = Command::new("sh")
                .args(["-c", "exit 3"])
                .cwd(&root)
                .env(failpoint::AFTER_DONE, gate.display().to_string());
            let handle = sup.start(sup.prepare(command).unwrap()).await.unwrap();
            let ended = tokio::time::timeout(HANG_GUARD, sup.wait(&handle, None)).await;
            let summary = ended.expect("hung: the end").unwrap();
            assert_eq!(summary.exit, ExitStatus::Code(3));
            assert_eq!(summary.persist_error, None);
            wait_until("the guardian at its failpoint", || {
                gate.join("reached").exists()
            });
            let guardian: u32 = std::fs::read_to_string(gate.join("reached"))
                .unwrap()
                .parse()
                .unwrap();
            let m = sup.manifest(&handle).unwrap();
            match m.released {
                Some(ExitProof::Receipt { status, reaped }) => {
                    assert_eq!(status, ExitStatus::Code(3), "cgroup={cgroup}");
                    assert_eq!(reaped, 1, "cgroup={cgroup}");
                }
                other => panic!("cgroup={cgroup}: expected a receipt, got {other:?}"),
            }
            let stats = sup.stats().await.unwrap();
            assert_eq!((stats.live, stats.lingering, stats.unverified), (0, 0, 0));
            assert!(
                !gone(guardian),
                "cgroup={cgroup}: the guardian is still held at its failpoint"
            );
            // All it has left is its exit: it yields the CPU to anything else.
            assert_eq!(nice_of(guardian), 19, "cgroup={cgroup}");
            std::fs::write(gate.join("release"), b"").unwrap();
            // Gone from /proc altogether: exited and reaped, not left a zombie.
            wait_until("the guardian reaped", || {
                !Path::new(&format!("/proc/{guardian}")).exists()
            });
            sup.shutdown(Duration::from_secs(1)).await;
        });
    }
}

/// The nice value of `pid` (field 19 of its `stat`).
fn nice_of(pid: u32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
    after_comm
        .split_whitespace()
        .nth(16)
        .unwrap()
        .parse()
        .unwrap()
}

/// The tree mechanisms a guardian failpoint is tested under (a guardian alone, and in a cgroup
/// where the machine has a writable hierarchy), and a runtime to run each case on.
fn failpoint_cases() -> (Vec<bool>, tokio::runtime::Runtime) {
    let mechanisms = mechanisms();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (mechanisms, runtime)
}

/// A failpoint case's directory, with its root and its failpoint's gate directory in it.
fn failpoint_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = temp_root();
    let (root, gate) = (dir.path().join("root"), dir.path().join("gate"));
    std::fs::create_dir(&gate).unwrap();
    (dir, root, gate)
}

/// A supervisor of `root` launching under the guardian binary, in a cgroup with `cgroup`, with
/// `admission` where one is given.
async fn open_guarded(
    root: &Path,
    cgroup: bool,
    admission: Option<procjournal::admission::AdmissionConfig>,
) -> Supervisor {
    let mut launcher = GuardianLauncher::new(GuardianProgram::Path(guardian_bin())).unwrap();
    if cgroup {
        let base = CgroupBase::probe(&base_name(root)).unwrap();
        launcher = launcher.with_cgroups(Some(base));
    }
    let mut config = SupervisorConfig::new(root);
    config.launcher = Arc::new(launcher);
    if let Some(admission) = admission {
        config.admission = admission;
    }
    Supervisor::open(config, Services::noop()).await.unwrap().0
}
