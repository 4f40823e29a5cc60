//! Guardians forked by a zygote (`GuardianLauncher::with_zygote`, what the daemon uses): each is
//! this process's own child holding only its own descriptors, a zygote that died is replaced
//! without a failed launch, a launch too large for the zygote is exec'd, and the zygote ends
//! with its launcher or its daemon. Real guardians, real signals.

#[cfg(feature = "cli")]
use crate::common::daemon as daemon_common;
use crate::common::supervisor as supervisor_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use procjournal::lifecycle::State;
use procjournal::lifecycle::event::ExitProof;
use procjournal::supervisor::{Command, Supervisor};
use procjournal::tree::guardian::failpoint::ZYGOTE_SILENT;
use procjournal::tree::guardian::{
    GUARDIAN_ARG, REQUEST_MAX, ZYGOTE_ARG, ZYGOTE_COMM, ZYGOTE_ONCE_ARG,
};
use procjournal::tree::{GuardianLauncher, GuardianProgram};
use supervisor_common::{config, guarded, open, start, temp_root};

/// A hang guard for processes to appear or go; it bounds a hang, it measures nothing.
const HANG_GUARD: Duration = Duration::from_secs(30);

fn launcher() -> Arc<GuardianLauncher> {
    let program = GuardianProgram::Path(env!("CARGO_BIN_EXE_procjournal-guardian").into());
    Arc::new(
        GuardianLauncher::new(program)
            .expect("guardian launcher")
            .with_zygote(true),
    )
}

/// Field `n` (1-based, after the command name) of /proc/PID/stat; `None` once the pid is gone.
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n - 1).map(str::to_owned)
}

/// Gone, or a zombie no one reaped: not running.
fn alive(pid: u32) -> bool {
    stat_field(pid, 1).is_some_and(|state| state != "Z")
}

fn exists(pid: u32) -> bool {
    stat_field(pid, 1).is_some()
}

fn parent_of(pid: u32) -> Option<u32> {
    stat_field(pid, 2)?.parse().ok()
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// What each descriptor of `pid` points at (`socket:[…]`, `/dev/null`, …).
fn descriptors(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .collect()
}

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG_GUARD;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {HANG_GUARD:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The guardian's pid of `handle`, from its recorded scope.
fn guardian_of(sup: &Supervisor, handle: &procjournal::Handle) -> u32 {
    let scope = sup.manifest(handle).unwrap().scope.unwrap();
    scope.guardian.expect("a guardian").pid
}

/// A supervisor whose guardians a zygote forks, and `n` idle `sleep`s under it: the root (held
/// for the test's length), the supervisor, its notices, the launcher and the handles.
async fn sleeps_under_a_zygote(
    n: usize,
) -> (
    tempfile::TempDir,
    Supervisor,
    tokio::sync::mpsc::UnboundedReceiver<procjournal::supervisor::ServiceEvent>,
    Arc<GuardianLauncher>,
    Vec<procjournal::Handle>,
) {
    let root = temp_root();
    let mut cfg = config(root.path());
    let zygote_launcher = launcher();
    cfg.launcher = zygote_launcher.clone();
    let (sup, rx) = open(cfg).await;
    let mut handles = Vec::new();
    for _ in 0..n {
        let cmd = Command::new("sleep").arg("300").cwd(root.path());
        handles.push(start(&sup, cmd).await);
    }
    (root, sup, rx, zygote_launcher, handles)
}

/// Stops every one of `handles` (each stop bounded), then shuts `sup` down.
async fn stop_all_and_shut_down(sup: Supervisor, handles: &[procjournal::Handle]) {
    for handle in handles {
        guarded("stop", sup.stop(handle, Duration::from_secs(2)))
            .await
            .unwrap();
    }
    let _ = sup.shutdown(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forked_guardians_are_our_children_holding_only_their_own_descriptors() {
    let (_root, sup, _rx, zygote_launcher, handles) = sleeps_under_a_zygote(3).await;
    let zygote = zygote_launcher
        .zygote_pid()
        .expect("a zygote after a launch");
    let me = std::process::id();
    assert_eq!(parent_of(zygote), Some(me));
    assert_eq!(comm(zygote), ZYGOTE_COMM.to_str().unwrap());
    for handle in &handles {
        let guardian = guardian_of(&sup, handle);
        assert_eq!(parent_of(guardian), Some(me), "the guardian is our child");
        assert!(cmdline(guardian).contains(ZYGOTE_ARG), "forked, not exec'd");
        assert_eq!(comm(guardian), "procjournal-gua", "its image's name again");
        // Its streams (/dev/null once the workload runs), its signalfd, its control socket,
        // its receipt and the workload's exec-error pipe: the zygote's socket and the other
        // launches' descriptors are not among them.
        let fds = descriptors(guardian);
        let sockets = fds.iter().filter(|t| t.starts_with("socket:")).count();
        assert_eq!(sockets, 1, "{fds:?}");
        assert_eq!(fds.len(), 7, "{fds:?}");
    }
    for handle in &handles {
        let summary = guarded("stop", sup.stop(handle, Duration::from_secs(2)))
            .await
            .unwrap();
        assert_eq!(summary.state, State::Terminated);
        let m = sup.manifest(handle).unwrap();
        assert!(
            matches!(m.released, Some(ExitProof::Receipt { .. })),
            "{:?}",
            m.released
        );
    }
    let _ = sup.shutdown(Duration::from_millis(100)).await;
    drop(sup);
    drop(zygote_launcher);
    // The launcher's drop ended the zygote and reaped it: not even a zombie is left.
    until("the zygote reaped", || !exists(zygote));
}

/// The NUL-separated entries of /proc/PID/environ.
fn environ(pid: u32) -> Vec<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    bytes
        .split(|&b| b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect()
}

/// The zygote's allocator setting (no cache of freed blocks, so that a forked guardian shares
/// more of its pages) is the guardian's own environment, never its workload's: the workload
/// gets exactly the environment its launch asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zygotes_allocator_setting_never_reaches_a_workload() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.launcher = launcher();
    let (sup, _rx) = open(cfg).await;
    let cmd = Command::new("sleep")
        .arg("300")
        .cwd(root.path())
        .env("PJ_ZYGOTE_TEST_MARK", "1");
    let handle = start(&sup, cmd).await;
    let guardian = guardian_of(&sup, &handle);
    assert!(cmdline(guardian).contains(ZYGOTE_ARG), "forked, not exec'd");
    let tunable = "GLIBC_TUNABLES=glibc.malloc.tcache_count=0".to_owned();
    assert_eq!(environ(guardian), vec![tunable.clone()]);
    let workload = sup.manifest(&handle).unwrap().pid.expect("a pid");
    until("the workload exec'd", || comm(workload) == "sleep");
    let env = environ(workload);
    assert!(env.contains(&"PJ_ZYGOTE_TEST_MARK=1".to_owned()), "{env:?}");
    assert!(!env.contains(&tunable), "{env:?}");
    guarded("stop", sup.stop(&handle, Duration::from_secs(2)))
        .await
        .unwrap();
    let _ = sup.shutdown(Duration::from_millis(100)).await;
}

/// The address ranges of `pid`'s anonymous mappings (the kernel merges adjacent ones).
fn anonymous_ranges(pid: u32) -> Vec<(u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let unnamed = fields.nth(4).is_none();
            let range = (
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            );
            unnamed.then_some(range)
        })
        .collect()
}

/// The longest run of bytes `zygote` maps anonymously and `guardian` does not.
fn longest_unmapped_in(guardian: u32, zygote: u32) -> u64 {
    let theirs = anonymous_ranges(guardian);
    let mut longest = 0;
    for (start, end) in anonymous_ranges(zygote) {
        let mut at = start;
        while at < end {
            let mapped = |a: u64| theirs.iter().any(|&(s, e)| s <= a && a < e);
            let run_start = at;
            while at < end && !mapped(at) {
                at += 4096;
            }
            longest = longest.max(at - run_start);
            at += 4096;
        }
    }
    longest
}

/// The zygote receives each request into a mapping of its own, and every guardian it forks
/// unmaps it at once: a guardian keeps no copy of a page the zygote receives the next launch's
/// request into (which would be private to each guardian, and hold another launch's
/// environment). A forked guardian otherwise maps what the zygote maps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_guardian_keeps_no_mapping_of_the_zygotes_request_buffer() {
    let (_root, sup, _rx, zygote_launcher, handles) = sleeps_under_a_zygote(3).await;
    let zygote = zygote_launcher.zygote_pid().expect("a zygote");
    let buffer = ((REQUEST_MAX + 1) as u64).next_multiple_of(4096);
    for handle in &handles {
        let guardian = guardian_of(&sup, handle);
        assert!(cmdline(guardian).contains(ZYGOTE_ARG), "forked, not exec'd");
        let unmapped = longest_unmapped_in(guardian, zygote);
        assert!(
            (buffer..buffer + 64 * 1024).contains(&unmapped),
            "guardian {guardian}: {unmapped} bytes the zygote maps are not mapped, {buffer} expected"
        );
    }
    stop_all_and_shut_down(sup, &handles).await;
}

/// The private dirty KiB of `pid`'s mappings that `which` picks, from `/proc/PID/smaps`, and
/// whether any mapping was picked. `which` gets the mapping's permissions and its name.
fn private_dirty_of(pid: u32, which: impl Fn(&str, &str) -> bool) -> (u64, bool) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (mut kib, mut any, mut picked) = (0, false, false);
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            let name = fields.get(5).copied().unwrap_or("");
            picked = which(fields[1], name);
            any |= picked;
        } else if picked && fields.first() == Some(&"Private_Dirty:") {
            kib += fields[1].parse::<u64>().unwrap();
        }
    }
    (kib, any)
}

/// A forked guardian allocates from the small image's own arena, as its zygote does between
/// forks: neither writes the C library's heap or its allocator's state in the C library's
/// data, so every idle guardian shares those pages with the zygote instead of holding four of
/// its own (each page the zygote writes after a fork stays with that guardian).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_guardian_writes_no_page_of_the_c_librarys_allocator() {
    let (_root, sup, _rx, _launcher, handles) = sleeps_under_a_zygote(3).await;
    for handle in &handles {
        let guardian = guardian_of(&sup, handle);
        assert!(cmdline(guardian).contains(ZYGOTE_ARG), "forked, not exec'd");
        let (heap, mapped) = private_dirty_of(guardian, |_, name| name == "[heap]");
        assert!(mapped, "guardian {guardian} has a C library heap");
        assert_eq!(heap, 0, "guardian {guardian}: private dirty KiB of [heap]");
        let libc_data = |perms: &str, name: &str| {
            let file = name.rsplit('/').next().unwrap_or("");
            perms.starts_with("rw") && (file.starts_with("libc.so") || file.starts_with("libc-"))
        };
        let (data, mapped) = private_dirty_of(guardian, libc_data);
        if mapped {
            assert_eq!(
                data, 0,
                "guardian {guardian}: private dirty KiB of libc's data"
            );
        } else {
            eprintln!(
                "no writable mapping of a shared libc (a static build?): its data not checked"
            );
        }
    }
    stop_all_and_shut_down(sup, &handles).await;
}

/// A forked guardian, and its zygote between forks, write no page of the small image's own
/// statics (its `.data` and `.bss`): the allocator keeps what it writes in its arena, the
/// zygote fills the standard library's first-use caches before it forks, and failpoints read
/// the environment without std's lock. So every idle guardian shares that page with the
/// zygote; a page either writes after a fork is that guardian's own (4 KiB each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_guardian_writes_no_page_of_its_images_statics() {
    let (_root, sup, _rx, _launcher, handles) = sleeps_under_a_zygote(3).await;
    let image = env!("CARGO_BIN_EXE_procjournal-guardian");
    for handle in &handles {
        let guardian = guardian_of(&sup, handle);
        assert!(cmdline(guardian).contains(ZYGOTE_ARG), "forked, not exec'd");
        let statics = |perms: &str, name: &str| perms.starts_with("rw") && name == image;
        let (kib, mapped) = private_dirty_of(guardian, statics);
        assert!(mapped, "guardian {guardian} maps {image} writable");
        assert_eq!(
            kib, 0,
            "guardian {guardian}: private dirty KiB of its image's statics"
        );
    }
    stop_all_and_shut_down(sup, &handles).await;
}

/// Whether a readable mapping of `pid` holds `needle`, read through /proc/PID/mem (mappings
/// that cannot be read, such as `[vvar]`, are passed over).
fn memory_holds(pid: u32, needle: &[u8]) -> bool {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            return false;
        };
        let Some((from, to)) = range.split_once('-') else {
            return false;
        };
        let from = u64::from_str_radix(from, 16).unwrap();
        let to = u64::from_str_radix(to, 16).unwrap();
        let mut bytes = vec![0u8; usize::try_from(to - from).unwrap()];
        perms.starts_with('r')
            && mem.read_exact_at(&mut bytes, from).is_ok()
            && bytes.windows(needle.len()).any(|w| w == needle)
    })
}

/// The workload's environment, most of a launch's request, leaves a forked guardian with its
/// workload's fork: the zygote decodes it into a mapping of its own, which the guardian drops
/// with its arguments, so no page of an idle guardian holds it (decoded onto the allocator's
/// pages, it stayed there, a page per 4 KiB, once the zygote reused those blocks). The workload
/// itself holds it: the scan finds what is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_guardian_keeps_no_copy_of_its_workloads_environment() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: reading a guardian's memory (it is not dumpable) needs root");
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let token = format!("envmark{nanos:x}p{}", std::process::id());
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.launcher = launcher();
    let (sup, _rx) = open(cfg).await;
    let mut handles = Vec::new();
    for _ in 0..2 {
        let cmd = Command::new("sleep")
            .arg("300")
            .cwd(root.path())
            .env("PJ_LARGE_VARIABLE", token.repeat(16 * 1024 / token.len()));
        handles.push(start(&sup, cmd).await);
    }
    for handle in &handles {
        let guardian = guardian_of(&sup, handle);
        assert!(cmdline(guardian).contains(ZYGOTE_ARG), "forked, not exec'd");
        let children = format!("/proc/{guardian}/task/{guardian}/children");
        let workload: u32 = std::fs::read_to_string(children)
            .unwrap()
            .split_whitespace()
            .next()
            .expect("the guardian's workload")
            .parse()
            .unwrap();
        assert!(
            memory_holds(workload, token.as_bytes()),
            "the workload {workload} got the variable"
        );
        assert!(
            !memory_holds(guardian, token.as_bytes()),
            "guardian {guardian} still holds its workload's environment"
        );
    }
    stop_all_and_shut_down(sup, &handles).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_zygote_is_reaped_and_replaced_and_no_launch_fails() {
    let root = temp_root();
    let mut cfg = config(root.path());
    let zygote_launcher = launcher();
    cfg.launcher = zygote_launcher.clone();
    let (sup, _rx) = open(cfg).await;
    let sh = |script: &str| Command::new("sh").arg("-c").arg(script).cwd(root.path());
    let first = start(&sup, sh("exit 3")).await;
    let old = zygote_launcher.zygote_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until("the zygote dead", || !alive(old));
    // The guardian is alive until the workload reads its stdin's end (ours, kept open).
    let second = start(&sup, sh("read x; exit 4")).await;
    let new = zygote_launcher.zygote_pid().unwrap();
    assert_ne!(new, old, "a new zygote");
    assert!(!exists(old), "the killed zygote was reaped");
    assert!(cmdline(guardian_of(&sup, &second)).contains(ZYGOTE_ARG));
    sup.input(&second, b"\n").await.unwrap();
    for (handle, code) in [(first, 3), (second, 4)] {
        guarded("wait", sup.wait(&handle, None)).await.unwrap();
        match sup.manifest(&handle).unwrap().released {
            Some(ExitProof::Receipt { status, .. }) => assert_eq!(
                status,
                procjournal::lifecycle::event::ExitStatus::Code(code)
            ),
            other => panic!("expected a receipt, got {other:?}"),
        }
    }
    let _ = sup.shutdown(Duration::from_millis(100)).await;
}

/// A zygote that dies after its fork and before its answer leaves a guardian nobody was told
/// of: the launcher finds it (its child holding the launch's control socket) and adopts it, so
/// the launch succeeds with one guardian, and no process is left unknown or unreaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guardian_forked_by_a_zygote_that_died_before_answering_is_adopted() {
    let root = temp_root();
    let mut cfg = config(root.path());
    let zygote_launcher = launcher();
    cfg.launcher = zygote_launcher.clone();
    let (sup, _rx) = open(cfg).await;
    let first = start(&sup, Command::new("true").cwd(root.path())).await;
    guarded("wait", sup.wait(&first, None)).await.unwrap();
    let silent = zygote_launcher.zygote_pid().expect("a zygote");
    let cmd = Command::new("sh")
        .arg("-c")
        .arg("read x; exit 5")
        .env(ZYGOTE_SILENT, "1")
        .cwd(root.path());
    let handle = start(&sup, cmd).await;
    assert_eq!(
        zygote_launcher.zygote_pid(),
        None,
        "the silent zygote is gone"
    );
    assert!(!exists(silent), "and reaped, not left a zombie");
    let guardian = guardian_of(&sup, &handle);
    assert_eq!(parent_of(guardian), Some(std::process::id()));
    assert!(
        cmdline(guardian).contains(ZYGOTE_ARG),
        "the forked one, adopted"
    );
    sup.input(&handle, b"\n").await.unwrap();
    guarded("wait", sup.wait(&handle, None)).await.unwrap();
    match sup.manifest(&handle).unwrap().released {
        Some(ExitProof::Receipt { status, .. }) => {
            assert_eq!(status, procjournal::lifecycle::event::ExitStatus::Code(5))
        }
        other => panic!("expected a receipt, got {other:?}"),
    }
    let next = start(&sup, Command::new("true").cwd(root.path())).await;
    assert!(zygote_launcher.zygote_pid().is_some(), "a new zygote");
    guarded("wait", sup.wait(&next, None)).await.unwrap();
    let _ = sup.shutdown(Duration::from_millis(100)).await;
}

/// A launch whose environment does not fit one zygote request is exec'd as without a zygote,
/// and its workload gets that environment all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_too_large_for_the_zygote_is_exec_d() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.launcher = launcher();
    let (sup, _rx) = open(cfg).await;
    // Two variables: one string of an exec may hold at most 128 KiB (MAX_ARG_STRLEN).
    let big = "x".repeat(100 * 1024);
    let cmd = Command::new("sh")
        .arg("-c")
        .arg("printf %s%s \"$BIG1\" \"$BIG2\" | wc -c; sleep 300")
        .env("BIG1", big.clone())
        .env("BIG2", big)
        .cwd(root.path());
    let handle = start(&sup, cmd).await;
    let guardian = guardian_of(&sup, &handle);
    assert!(cmdline(guardian).contains(GUARDIAN_ARG), "exec'd");
    let deadline = Instant::now() + HANG_GUARD;
    let text = loop {
        let read = sup.output_raw(&handle, 0, 64).await.unwrap();
        let text = String::from_utf8_lossy(&read.bytes).into_owned();
        if text.contains('\n') || Instant::now() >= deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(text.trim(), (2 * 100 * 1024).to_string());
    guarded("stop", sup.stop(&handle, Duration::from_secs(2)))
        .await
        .unwrap();
    let _ = sup.shutdown(Duration::from_millis(100)).await;
}

/// A daemon killed with SIGKILL leaves no zygote behind: it sees its socket end and exits.
#[cfg(feature = "cli")]
#[test]
fn a_sigkilled_daemon_leaves_no_zygote() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon_common::Daemon::start(dir.path());
    let (code, _, err) = daemon_common::client(dir.path(), &["start", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    let pid = daemon.child.id();
    let zygote = *zygotes_of(pid).first().expect("the daemon's zygote");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until("the zygote gone", || !alive(zygote));
    drop(daemon);
}

/// The launcher's `prepare` (what `run` calls while it opens its root) starts the zygote
/// before any launch, `start_zygote` after it starts no second one, and the first launch's
/// guardian is forked by that same zygote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zygote_started_before_the_first_launch_forks_it() {
    let root = temp_root();
    let mut cfg = config(root.path());
    let zygote_launcher = launcher();
    assert_eq!(zygote_launcher.zygote_pid(), None, "lazy until asked");
    // What `run` calls beside its open.
    procjournal::tree::Launcher::prepare(&*zygote_launcher);
    let early = zygote_launcher.zygote_pid().expect("started at once");
    assert_eq!(parent_of(early), Some(std::process::id()));
    zygote_launcher.start_zygote();
    assert_eq!(zygote_launcher.zygote_pid(), Some(early), "one zygote");
    cfg.launcher = zygote_launcher.clone();
    let (sup, _rx) = open(cfg).await;
    let handle = start(&sup, Command::new("sleep").arg("300").cwd(root.path())).await;
    assert_eq!(zygote_launcher.zygote_pid(), Some(early), "the same zygote");
    assert!(cmdline(guardian_of(&sup, &handle)).contains(ZYGOTE_ARG));
    guarded("stop", sup.stop(&handle, Duration::from_secs(2)))
        .await
        .unwrap();
    let _ = sup.shutdown(Duration::from_millis(100)).await;
    drop(sup);
    drop(zygote_launcher);
    until("the zygote reaped", || !exists(early));
}

/// The zygotes among the children of `parent` (`run`, a daemon), by `/proc/PID/stat`.
#[cfg(feature = "cli")]
fn zygotes_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| parent_of(*p) == Some(parent) && comm(*p) == ZYGOTE_COMM.to_str().unwrap())
        .collect()
}

/// `procjournal run` starts a zygote while it opens the root, and that zygote becomes its one
/// guardian instead of forking one: while the workload runs, no other zygote is there, and
/// none is left when `run` ends, on its own or by SIGKILL.
#[cfg(feature = "cli")]
#[test]
fn runs_zygote_becomes_its_guardian_and_leaves_no_zygote() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rt");
    for kill in [false, true] {
        // The workload prints its guardian's pid and command line, then waits for `$GO`.
        let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_procjournal"))
            .arg("run")
            .arg("--root")
            .arg(&root)
            .args(["--", "sh", "-c"])
            .arg("echo $PPID; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; while [ ! -e \"$GO\" ]; do sleep 0.02; done")
            .env("GO", format!("go-{kill}"))
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let _kill = KillRunOnPanic {
            run: run.id(),
            root: &root,
        };
        let mut out = BufReader::new(run.stdout.take().unwrap());
        let (mut pid, mut line) = (String::new(), String::new());
        out.read_line(&mut pid).unwrap();
        out.read_line(&mut line).unwrap();
        let guardian: u32 = pid.trim().parse().unwrap();
        assert!(
            line.contains(ZYGOTE_ONCE_ARG),
            "the zygote, become the guardian: {line}"
        );
        assert_eq!(parent_of(guardian), Some(run.id()), "run's own child");
        let zygotes = zygotes_of(run.id());
        assert!(zygotes.is_empty(), "no other zygote: {zygotes:?}");
        if kill {
            run.kill().unwrap();
        } else {
            std::fs::write(dir.path().join("go-false"), b"").unwrap();
        }
        let status = run.wait().unwrap();
        assert_eq!(status.success(), !kill, "{status:?}");
        until("the guardian gone", || !alive(guardian));
    }
    // A `run` killed leaves its root's base cgroup for the root's next open; this root is gone
    // after the test, so its base goes with it.
    daemon_common::remove_base_cgroup(&root);
}

/// Kills a `run` (and so, through its guardian, its workload) when a failed assertion unwinds
/// past it, then removes the base cgroup it leaves: otherwise the workload polls for a `$GO`
/// file that the test's removed directory can no longer hold, for ever.
#[cfg(feature = "cli")]
struct KillRunOnPanic<'a> {
    run: u32,
    root: &'a std::path::Path,
}

#[cfg(feature = "cli")]
impl Drop for KillRunOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Ok(pid) = i32::try_from(self.run) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            daemon_common::remove_base_cgroup(self.root);
        }
    }
}

/// The child of [`run_and_capture_leave_no_orphan_for_their_parents_reaper`]: a child subreaper (so that
/// whatever `run` or `capture` leaves behind becomes its child) that runs `procjournal run --
/// true`, then `procjournal capture -- true`, and after each prints every process it inherited
/// from it, or `none`.
#[cfg(feature = "cli")]
#[test]
fn subreaper_child() {
    let Some(root) = std::env::var_os("PJ_SUBREAPER_ROOT") else {
        return;
    };
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    for command in ["run", "capture"] {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_procjournal"))
            .arg(command)
            .arg("--root")
            .arg(&root)
            .args(["--", "true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{command}: {status:?}");
        // Its children were made ours when it exited, before its exit was reported to us.
        let me = std::process::id();
        let inherited: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| parent_of(p) == Some(me))
            .map(|p| format!("{p} {}", comm(p)))
            .collect();
        if inherited.is_empty() {
            println!("{command} inherited: none");
        } else {
            println!("{command} inherited: {}", inherited.join(", "));
        }
    }
}

/// `procjournal run` and `capture` reap everything they started before they exit, their
/// guardian zygote too, though they leave their runtime to the exit: the process that inherits
/// their orphans (a subreaper, or PID 1) finds none, not even a zombie.
#[cfg(feature = "cli")]
#[test]
fn run_and_capture_leave_no_orphan_for_their_parents_reaper() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rt");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .arg(crate::common::harness_name(
            module_path!(),
            "subreaper_child",
        ))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env("PJ_SUBREAPER_ROOT", &root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for command in ["run", "capture"] {
        assert!(
            stdout.contains(&format!("{command} inherited: none")),
            "{stdout}"
        );
    }
    daemon_common::remove_base_cgroup(&root);
}

/// The zygote of a launcher that launches once becomes that launch's guardian: the guardian's
/// pid is the zygote's, the slot is empty after it, the workload's end is proven by the
/// guardian's receipt as a forked guardian's is, and the next launch starts another zygote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zygote_of_one_launch_becomes_its_guardian() {
    use procjournal::tree::Launcher;
    let root = temp_root();
    let program = GuardianProgram::Path(env!("CARGO_BIN_EXE_procjournal-guardian").into());
    let once = Arc::new(
        GuardianLauncher::new(program)
            .expect("guardian launcher")
            .with_zygote(true)
            .with_one_launch(true),
    );
    once.prepare();
    let zygote = once.zygote_pid().expect("a zygote, started by prepare");
    until("the zygote's exec", || {
        cmdline(zygote).contains(ZYGOTE_ONCE_ARG)
    });
    assert!(
        cmdline(zygote).contains(ZYGOTE_ONCE_ARG),
        "{}",
        cmdline(zygote)
    );
    let mut cfg = config(root.path());
    cfg.launcher = once.clone();
    let (sup, _rx) = open(cfg).await;
    for round in 0..2 {
        let waits = Command::new("sh").arg("-c").arg("read x").cwd(root.path());
        let handle = start(&sup, waits).await;
        let guardian = guardian_of(&sup, &handle);
        if round == 0 {
            assert_eq!(guardian, zygote, "the zygote became the guardian");
        }
        assert!(
            cmdline(guardian).contains(ZYGOTE_ONCE_ARG),
            "{}",
            cmdline(guardian)
        );
        assert_eq!(once.zygote_pid(), None, "nothing left in the slot");
        sup.input(&handle, b"\n").await.unwrap();
        let summary = guarded("wait", sup.wait(&handle, None)).await.unwrap();
        assert_eq!(summary.state, State::Exited, "{summary:?}");
        supervisor_common::assert_released_by_receipt(&sup, &handle);
        until("the guardian reaped", || !exists(guardian));
    }
    let _ = sup.shutdown(Duration::from_millis(100)).await;
}
