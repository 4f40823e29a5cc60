//! The daemon owns what it starts, at scale: under `ulimit -n 64` it runs 10 000 commands, two
//! at a time, and then 64 at once, and afterwards its descriptors and its resident memory are
//! back within a small constant of where they started.
//!
//! Each command runs under the daemon's default tree mechanism (a guardian, and a cgroup where
//! the hierarchy is writable), so the test also proves every guardian reaped and every receipt
//! retired. Real `procjournal serve`, real children, real descriptors: the counts come from
//! /proc/PID/fd and /proc/PID/status of the daemon. Nothing here measures speed; the timeouts
//! are hang guards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use procjournal::client::{Client, ClientError};
use procjournal::lifecycle::Handle;
use procjournal::protocol::{ErrorCode, Request, StartArgs};
use serde_json::Value;

/// Bounds a hang; it is not a measurement.
const HANG_GUARD: Duration = Duration::from_secs(600);

/// Descriptors the daemon may hold above its warmed-up count afterwards: one journal segment
/// rotation's worth (the new segment's mapping and a spare being prepared), and a connection
/// the kernel may not have released yet. Every per-process descriptor (3 pipes, a control
/// socket or a pidfd, spool files) must be gone; a leak of one per command would show as thousands.
const DESCRIPTORS_SLACK: usize = 4;

/// Anonymous resident memory the daemon that ran everything may hold above a fresh daemon that
/// only restored the same journal, in KiB. The journal's projection (one manifest per process
/// ever run, and the event-ID index) grows with the commands in both alike, about 2 KiB a
/// command until snapshots compact it, so it cancels out; what remains is what the
/// supervisor owns beyond the journal: the bounded caches (4 096 terminal summaries, about
/// 1 MiB) and freed memory the allocator keeps. A leak of a task, a 64 KiB output buffer or a
/// 256 KiB read buffer per command would cost 0.6-2.5 GiB.
const RSS_SLACK_KIB: u64 = 6 * 1024;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_procjournal"))
}

fn temp_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("procjournal-scale-")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temp dir")
}

struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The base cgroup of the test's root, if the killed daemon left it (empty).
        use procjournal::tree::cgroup::{CgroupBase, base_name};
        if let Some(root) = self.socket.parent()
            && let Ok(base) = CgroupBase::probe(&base_name(root))
        {
            let _ = std::fs::remove_dir(base.dir());
        }
    }
}

impl Daemon {
    /// `procjournal serve` under `ulimit -n 64`, set by the shell that execs it.
    fn start(root: &Path) -> Daemon {
        Daemon::start_with(root, "")
    }

    /// [`Daemon::start`] with more options of `serve`.
    fn start_with(root: &Path, options: &str) -> Daemon {
        let script = format!(
            "ulimit -n 64 && exec '{}' serve --root '{}' {options}",
            bin().display(),
            root.display()
        );
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the daemon");
        let socket = root.join("procjournal.sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Client::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "the daemon did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, socket }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("read the daemon's fds")
            .count()
    }

    /// A `/proc/PID/status` field in KiB.
    fn status_kib(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/PID/status"))
    }

    fn open_files_limit(&self) -> u64 {
        let limits =
            std::fs::read_to_string(format!("/proc/{}/limits", self.pid())).expect("limits");
        limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
            .expect("Max open files")
    }
}

/// Children of `parent` that are zombies (exited, never reaped).
/// What `read` gives once `done` holds of it, or at `until`, whichever comes first: counts
/// that settle just after the last command's result (descriptors, reaps, receipts).
fn settled<T>(until: Instant, mut read: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
    let mut value = read();
    while !done(&value) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        value = read();
    }
    value
}

fn zombie_children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.first() == Some(&"Z") && fields.get(1) == Some(&parent.to_string().as_str()) {
            out.push(pid);
        }
    }
    out
}

fn start_request(root: &Path) -> Request {
    start_of(root, &["true"], None)
}

/// A start of `command` in `root`, waiting up to `queue_ms` for capacity.
fn start_of(root: &Path, command: &[&str], queue_ms: Option<u64>) -> Request {
    Request::Start(StartArgs {
        max_bytes: None,
        settle_ms: None,
        yield_ms: None,
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        cwd: Some(root.display().to_string()),
        env: Default::default(),
        env_persist: Default::default(),
        client_env: None,
        inherit_env: true,
        login_shell_overlay: false,
        labels: Default::default(),
        name: None,
        timeout_ms: None,
        idle_timeout_ms: None,
        retention_bytes: None,
        queue_ms,
        pty: None,
    })
}

/// Sends `request` over `client`, connecting first if need be and again whenever the daemon
/// closed the connection without reading the request (`busy` when evicted, or a closed socket):
/// those requests were never run, so sending them again is safe. Other API errors are returned.
fn call(
    socket: &Path,
    client: &mut Option<Client>,
    request: &Request,
    deadline: Instant,
) -> Result<Value, procjournal::protocol::ApiError> {
    loop {
        assert!(Instant::now() < deadline, "hung on {request:?}");
        let c = match client {
            Some(c) => c,
            None => match Client::connect(socket) {
                Ok(c) => client.insert(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            },
        };
        match c.call(request) {
            Ok(value) => return Ok(value),
            Err(ClientError::Api(e)) if e.code == ErrorCode::Busy => {
                *client = None;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(ClientError::Io(_) | ClientError::BadResponse(_)) => *client = None,
            Err(ClientError::Api(e)) => return Err(e),
            Err(e) => panic!("{request:?}: {e}"),
        }
    }
}

/// Runs one `true` to completion, retrying refusals for capacity (the daemon's typed answer to
/// a start that does not wait, when its descriptor budget or admission is spent). Returns how
/// many starts were refused.
fn run_one(socket: &Path, client: &mut Option<Client>, root: &Path, deadline: Instant) -> usize {
    let mut refused = 0;
    loop {
        match call(socket, client, &start_request(root), deadline) {
            Ok(info) => {
                let handle: Handle = info["handle"]
                    .as_str()
                    .and_then(|h| h.parse().ok())
                    .expect("a handle");
                let request = Request::Wait {
                    handle: handle.into(),
                    timeout_ms: None,
                };
                let waited = call(socket, client, &request, deadline).expect("wait");
                assert_eq!(waited["state"], "exited", "{waited}");
                assert_eq!(waited["exit_code"], 0, "{waited}");
                return refused;
            }
            // The live bound or admission (on a machine of two cores it admits two): both
            // answer `capacity`, with the reason.
            Err(e) if e.code == ErrorCode::Capacity => {
                assert!(e.message.contains("no capacity: "), "{e:?}");
                refused += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("start: {e:?}"),
        }
    }
}

/// Scans the journal for the terminal records: every command ended exactly once.
fn terminal_count(root: &Path) -> usize {
    let out = Command::new(bin())
        .args(["journal", "manifests", "--json", "--root"])
        .arg(root)
        .output()
        .expect("journal manifests");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"exited\""))
        .count()
}

#[test]
fn under_ulimit_64_ten_thousand_commands_and_64_at_once_leave_nothing_behind() {
    let dir = temp_root();
    let root = dir.path().join("rt");
    std::fs::create_dir_all(&root).expect("root");
    let daemon = Daemon::start(&root);
    assert_eq!(daemon.open_files_limit(), 64);
    let deadline = Instant::now() + HANG_GUARD;

    // Warm-up: the runtime's threads, the journal's first segment and its spare, the caches.
    let mut client = None;
    for _ in 0..200 {
        run_one(&daemon.socket, &mut client, &root, deadline);
    }
    drop(client.take());
    std::thread::sleep(Duration::from_millis(300));
    let fds_before = daemon.descriptors();
    let rss_before = daemon.status_kib("RssAnon:");
    let file_before = daemon.status_kib("RssFile:");

    // Two clients at once, 5 000 commands each, one after another: the daemon admits two at a
    // time on a machine of two cores, so this is its steady state rather than one command's
    // latency end to end (and it halves the test's wall time, the longest of the suite).
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (socket, root) = (&daemon.socket, &root);
            s.spawn(move || {
                let mut client = None;
                for _ in 0..5_000 {
                    run_one(socket, &mut client, root, deadline);
                }
            });
        }
    });

    // 64 at once: more than the descriptor budget allows live, so some are refused with the
    // typed capacity error and retried; none fails with EMFILE.
    let refused: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64)
            .map(|_| {
                let (socket, root) = (daemon.socket.clone(), root.clone());
                s.spawn(move || {
                    let mut client = None;
                    run_one(&socket, &mut client, &root, deadline)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .sum()
    });
    println!("64 at once: {refused} starts refused for capacity and retried");

    // Let closing connections and the last publications settle, then count.
    let settle = Instant::now() + Duration::from_secs(10);
    let fds_after = settled(
        settle,
        || daemon.descriptors(),
        |&n| n <= fds_before + DESCRIPTORS_SLACK,
    );
    let rss_after = daemon.status_kib("RssAnon:");
    let file_after = daemon.status_kib("RssFile:");
    println!(
        "descriptors {fds_before} -> {fds_after}; anonymous resident memory {rss_before} KiB -> \
         {rss_after} KiB; file-backed {file_before} KiB -> {file_after} \
         KiB; over 10 064 commands"
    );
    assert!(
        fds_after <= fds_before + DESCRIPTORS_SLACK,
        "descriptors grew from {fds_before} to {fds_after}"
    );

    // Every guardian was reaped (none is left a zombie of the daemon), and every receipt was
    // retired once its proof was in the journal: no file per command outlives the command.
    // A guardian is reaped once its command's result is out: the last ones may still be going.
    let zombies = settled(settle, || zombie_children(daemon.pid()), Vec::is_empty);
    assert!(
        zombies.is_empty(),
        "zombie children of the daemon: {zombies:?}"
    );
    // And so is a receipt.
    let receipts_left = || {
        std::fs::read_dir(root.join("trees"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let receipts = settled(settle, receipts_left, |&n| n == 0);
    assert_eq!(
        receipts,
        0,
        "receipts left in {}",
        root.join("trees").display()
    );

    let mut client = Client::connect(&daemon.socket).expect("connect");
    let hello: Value = client.call(&Request::Hello).expect("hello");
    assert_eq!(hello["live"], 0, "{hello}");
    let report: Value = client
        .call(&Request::Shutdown { grace_ms: 1000 })
        .expect("shutdown");
    assert_eq!(report["teardown_failed"], serde_json::json!([]), "{report}");
    drop(client);
    drop(daemon);
    assert_eq!(terminal_count(&root), 200 + 10_000 + 64);

    // A fresh daemon restoring the same journal holds the same projection.
    let fresh = Daemon::start(&root);
    let mut client = Client::connect(&fresh.socket).expect("connect");
    let _: Value = client.call(&Request::Hello).expect("hello");
    let rss_fresh = fresh.status_kib("RssAnon:");
    println!(
        "a fresh daemon restoring the same journal: anonymous resident memory {rss_fresh} KiB"
    );
    assert!(
        rss_after <= rss_fresh + RSS_SLACK_KIB,
        "the daemon that ran 10 064 commands holds {rss_after} KiB, a fresh one restoring the \
         same journal {rss_fresh} KiB: more than {RSS_SLACK_KIB} KiB beyond the projection"
    );
    let _: Value = client
        .call(&Request::Shutdown { grace_ms: 1000 })
        .expect("shutdown");
}

/// Output each writer of the descriptor count below keeps: three default spool segments' worth.
const WRITTEN_BYTES: u64 = 20 << 20;

/// Waits until the process `handle` names has `total_bytes` of output recorded.
fn wait_for_output(socket: &Path, handle: &str, total_bytes: u64, deadline: Instant) {
    let mut client = None;
    loop {
        let request = Request::Resolve(handle.parse::<Handle>().expect("a handle").into());
        let info = call(socket, &mut client, &request, deadline).expect("resolve");
        if info["total_bytes"].as_u64() == Some(total_bytes) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Under `ulimit -n 64`, each live process holds six of the daemon's descriptors however much
/// output it retains (sealed spool segments hold none: they are opened only to be read), so the
/// budget fits three live processes rather than one. The live bound answers `capacity`, which
/// makes the command line and the MCP tools ask again with a wait; and a thousand starts sent
/// back to back with such a wait all start, none refused, each running to its end.
#[test]
fn under_ulimit_64_every_start_waits_its_turn_and_a_live_process_holds_six_descriptors() {
    let dir = temp_root();
    let root = dir.path().join("rt");
    std::fs::create_dir_all(&root).expect("root");
    // Admission by count, above the live bound: on a machine of two cores the automatic one
    // would admit two, and the bound under test is the descriptors'.
    let daemon = Daemon::start_with(&root, "--max-concurrent 16");
    let deadline = Instant::now() + HANG_GUARD;
    let live_max = procjournal::limits::descriptor_split(64, usize::MAX).1;
    assert_eq!(live_max, 3);
    let mut client = None;
    for _ in 0..20 {
        run_one(&daemon.socket, &mut client, &root, deadline);
    }
    std::thread::sleep(Duration::from_millis(300));
    let idle = daemon.descriptors();

    let script = format!("head -c {WRITTEN_BYTES} /dev/zero; exec sleep 600");
    let writers: Vec<String> = (0..live_max)
        .map(|_| {
            let request = start_of(&root, &["sh", "-c", &script], None);
            let info = call(&daemon.socket, &mut client, &request, deadline).expect("start");
            info["handle"].as_str().expect("a handle").to_owned()
        })
        .collect();
    for handle in &writers {
        wait_for_output(&daemon.socket, handle, WRITTEN_BYTES, deadline);
    }
    let segments = std::fs::read_dir(root.join("spool").join(&writers[0]))
        .expect("spool dir")
        .count();
    assert!(segments >= 3, "{segments} segment files");
    std::thread::sleep(Duration::from_millis(300));
    let busy = daemon.descriptors();
    let per_process = (busy.saturating_sub(idle)) as f64 / live_max as f64;
    println!(
        "descriptors: {idle} idle, {busy} with {live_max} live processes of {segments} spool \
         segments each: {per_process:.2} per live process"
    );
    assert!(
        busy <= idle + 6 * live_max,
        "{busy} descriptors with {live_max} live processes, {idle} idle: more than 6 each"
    );

    // At the bound, a start that does not wait is refused for capacity, with the reason.
    match call(&daemon.socket, &mut client, &start_request(&root), deadline) {
        Err(e) => {
            assert_eq!(e.code, ErrorCode::Capacity, "{e:?}");
            assert!(e.message.contains("processes are live"), "{e:?}");
        }
        Ok(info) => panic!("a start beyond the live bound started: {info}"),
    }
    for handle in &writers {
        let request = Request::Stop {
            handle: handle.parse::<Handle>().expect("a handle").into(),
            grace_ms: 1000,
        };
        call(&daemon.socket, &mut client, &request, deadline).expect("stop");
    }

    // A thousand back to back, each waiting for capacity: none is refused.
    let started: Vec<Handle> = (0..1000)
        .map(|i| {
            let request = start_of(&root, &["true"], Some(600_000));
            match call(&daemon.socket, &mut client, &request, deadline) {
                Ok(info) => info["handle"]
                    .as_str()
                    .and_then(|h| h.parse().ok())
                    .expect("a handle"),
                Err(e) => panic!("start {i} of 1000 was refused: {e:?}"),
            }
        })
        .collect();
    for handle in started {
        let request = Request::Wait {
            handle: handle.into(),
            timeout_ms: None,
        };
        let waited = call(&daemon.socket, &mut client, &request, deadline).expect("wait");
        assert_eq!(waited["state"], "exited", "{waited}");
        assert_eq!(waited["exit_code"], 0, "{waited}");
    }
    let report: Value = call(
        &daemon.socket,
        &mut client,
        &Request::Shutdown { grace_ms: 1000 },
        deadline,
    )
    .expect("shutdown");
    assert_eq!(report["teardown_failed"], serde_json::json!([]), "{report}");
}
