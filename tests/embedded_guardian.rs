//! An embedding host provides the guardian in either of the two ways the library offers: its own
//! executable, whose `main` calls `procjournal::run_guardian_if_requested()` first thing
//! (`GuardianProgram::CurrentExe`: this test binary is that host, hence `harness = false`), or
//! another program (`GuardianProgram::Path`): the small `procjournal-guardian`, and the
//! `procjournal` binary, which is a guardian too.
//!
//! For each way: a workload that exits 3 after writing "hi" ends `exited` with code 3, its output
//! and a scope owned by a guardian (`TreeMechanism::Guardian`) whose verified receipt released
//! the tree; and a workload that leaves a `setsid` grandchild behind has its guardian run by the
//! program asked for, and after `stop` no process of its tree (the guardian included) is alive.
//! Every process of that tree carries `PJ_EMBEDDED_MARK=<token>` in its environment; whatever a
//! failed run leaves is SIGKILLed (through pidfds) on the way out.
//!
//! Prints one `ok` line per case; any failure panics, so the binary exits non-zero.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "tests start, signal and reap real processes directly"
)]

// A binary of its own (its `main` is the host's), so it uses only a part of the helpers.
#[allow(dead_code)]
#[path = "it/common/supervisor.rs"]
mod supervisor_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use procjournal::lifecycle::event::{ExitProof, ExitStatus, TreeMechanism};
use procjournal::lifecycle::{Handle, Manifest, State};
use procjournal::supervisor::Supervisor;
use procjournal::tree::{GuardianLauncher, GuardianProgram};
use supervisor_common::{HANG_GUARD, config, guarded, open, sh, start, temp_root};

/// The environment variable that marks every process of the lingering tree.
const MARK: &str = "PJ_EMBEDDED_MARK";
/// How long the tree gets to be gone after `stop` returned, and a late release to be recorded; a
/// passing run waits only until it is.
const SETTLE: Duration = Duration::from_secs(10);

fn main() {
    // First, before any thread exists: this binary is also every launch's guardian.
    procjournal::run_guardian_if_requested();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let this_exe = std::env::current_exe().expect("current exe");
    let small_bin = PathBuf::from(env!("CARGO_BIN_EXE_procjournal-guardian"));
    let procjournal_bin = PathBuf::from(env!("CARGO_BIN_EXE_procjournal"));
    let ways = [
        ("CurrentExe", GuardianProgram::CurrentExe, this_exe),
        (
            "Path procjournal-guardian",
            GuardianProgram::Path(small_bin.clone()),
            small_bin,
        ),
        (
            "Path procjournal",
            GuardianProgram::Path(procjournal_bin.clone()),
            procjournal_bin,
        ),
    ];
    runtime.block_on(async {
        for (name, program, exe) in ways {
            exits_with_a_receipt(name, program.clone()).await;
            stop_leaves_no_survivor(name, program, &exe).await;
        }
    });
}

/// A supervisor on a fresh root whose launcher runs guardians with `program`.
async fn guardian_supervisor(root: &Path, program: GuardianProgram) -> Supervisor {
    let mut cfg = config(root);
    cfg.launcher = Arc::new(GuardianLauncher::new(program).expect("guardian launcher"));
    open(cfg).await.0
}

async fn output(sup: &Supervisor, handle: &Handle) -> Vec<u8> {
    sup.output_raw(handle, 0, 1024)
        .await
        .expect("read output")
        .bytes
}

fn manifest(sup: &Supervisor, handle: &Handle) -> Manifest {
    sup.manifest(handle).expect("manifest")
}

fn guardian_scope(name: &str, m: &Manifest) -> u32 {
    let Some(scope) = &m.scope else {
        panic!("{name}: no scope recorded: {m:?}");
    };
    assert_eq!(
        scope.mechanism,
        TreeMechanism::Guardian,
        "{name}: {scope:?}"
    );
    let Some(guardian) = scope.guardian else {
        panic!("{name}: the scope names no guardian: {scope:?}");
    };
    guardian.pid
}

async fn exits_with_a_receipt(name: &str, program: GuardianProgram) {
    let root = temp_root();
    let sup = guardian_supervisor(root.path(), program).await;
    let h = start(&sup, sh(root.path(), "echo hi; exit 3")).await;
    let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!(
        (summary.state, summary.exit),
        (State::Exited, ExitStatus::Code(3)),
        "{name}: {summary:?}"
    );
    assert_eq!(output(&sup, &h).await, b"hi\n", "{name}: output");
    let m = manifest(&sup, &h);
    guardian_scope(name, &m);
    let Some(ExitProof::Receipt { status, reaped }) = m.released else {
        panic!(
            "{name}: the tree was not released by a receipt: {:?}",
            m.released
        );
    };
    assert_eq!(status, ExitStatus::Code(3), "{name}: the receipt's status");
    assert!(reaped >= 1, "{name}: the receipt reaped {reaped}");
    let _ = sup.shutdown(Duration::from_secs(1)).await;
    println!("ok {name}: exit 3, output \"hi\\n\", released by a receipt (reaped {reaped})");
}

async fn stop_leaves_no_survivor(name: &str, program: GuardianProgram, exe: &Path) {
    let root = temp_root();
    let sup = guardian_supervisor(root.path(), program).await;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let _cleanup = KillMarked(token.clone());
    let command = sh(root.path(), "echo hi; (setsid sleep 300 &); exit 3").env(MARK, &token);
    let h = start(&sup, command).await;
    let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!(summary.exit, ExitStatus::Code(3), "{name}: {summary:?}");
    assert!(
        output(&sup, &h).await.starts_with(b"hi\n"),
        "{name}: output"
    );

    // The grandchild lives on in a session of its own, under the guardian.
    let deadline = Instant::now() + HANG_GUARD;
    while !marked(&token).iter().any(|&pid| comm(pid) == "sleep") {
        assert!(
            Instant::now() < deadline,
            "{name}: the setsid sleep never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let guardian = guardian_scope(name, &manifest(&sup, &h));
    let guardian_exe = std::fs::read_link(format!("/proc/{guardian}/exe")).expect("guardian exe");
    assert_eq!(
        guardian_exe,
        exe.canonicalize().expect("canonical exe"),
        "{name}: the guardian runs another program"
    );

    guarded("stop", sup.stop(&h, Duration::from_secs(1)))
        .await
        .expect("stop");
    let deadline = Instant::now() + SETTLE;
    let mut left = marked(&token);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = marked(&token);
    }
    assert!(
        left.is_empty(),
        "{name}: processes survived the stop: {:?}",
        left.iter().map(|&p| (p, comm(p))).collect::<Vec<_>>()
    );
    let released = loop {
        let released = manifest(&sup, &h).released;
        if released.is_some() || Instant::now() >= deadline {
            break released;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        matches!(
            released,
            Some(ExitProof::Receipt {
                status: ExitStatus::Code(3),
                ..
            })
        ),
        "{name}: the stopped tree was not released by a receipt: {released:?}"
    );
    let _ = sup.shutdown(Duration::from_secs(1)).await;
    println!(
        "ok {name}: the guardian ran {}, and stop left no process of a tree with a setsid grandchild",
        exe.display()
    );
}

/// Live (not zombie) processes whose environment holds `PJ_EMBEDDED_MARK=<token>`.
fn marked(token: &str) -> Vec<i32> {
    let entry = format!("{MARK}={token}").into_bytes();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if !environ.split(|&b| b == 0).any(|v| v == entry) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if !matches!(state, Some("Z" | "X")) {
            out.push(pid);
        }
    }
    out
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_default()
}

/// Dropped (pass or fail), SIGKILLs every marked process still alive, through pidfds opened
/// before a second scan still found the pid marked: never a reused pid.
struct KillMarked(String);

impl Drop for KillMarked {
    fn drop(&mut self) {
        use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
        let deadline = Instant::now() + SETTLE;
        while Instant::now() < deadline {
            let pinned: Vec<_> = marked(&self.0)
                .into_iter()
                .filter_map(|pid| {
                    Some((
                        pid,
                        pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()?,
                    ))
                })
                .collect();
            if pinned.is_empty() {
                return;
            }
            let still = marked(&self.0);
            for (pid, fd) in &pinned {
                if still.contains(pid) {
                    let _ = pidfd_send_signal(fd, Signal::KILL);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
