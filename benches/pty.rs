//! PTY output throughput: a PTY launch's output drained into its spool, beside a raw
//! `openpty` copy loop measured in the same run.
//!
//! Run with `cargo bench --bench pty`. Each round runs, alternating (the order swapped every
//! round, so that other load on the machine hits both alike):
//! - baseline: `openpty`, `head -c N /dev/zero` spawned with the slave as its stdout, the slave
//!   closed here, and the master read with blocking `read`s of 64 KiB until EIO (the end of
//!   output), then the child reaped: the terminal's own cost, nothing kept;
//! - figure: `Supervisor::start` of the same command with `Command::pty(24, 80)` (no guardian,
//!   `Durability::Os`), until `wait` returns: the master read through tokio's reactor, every
//!   byte appended to the spool, the journal's records.
//!
//! A round's figure is the median MiB/s of its runs. Nothing asserts on time; each run checks
//! that all N bytes arrived. `PROCJOURNAL_BENCH_QUICK=1` runs one short round.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

#[path = "common/mod.rs"]
mod common;

use std::io::Read;
use std::process::{Command as OsCommand, Stdio};
use std::sync::Arc;
use std::time::Instant;

use common::{MIB, Res, Row, Target};
use procjournal::Durability;
use procjournal::supervisor::{Command, Services, Supervisor, SupervisorConfig};
use procjournal::tree::GroupLauncher;

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    runs: usize,
    bytes: u64,
}

const FULL: Plan = Plan {
    rounds: 5,
    runs: 3,
    bytes: 64 * MIB,
};
const QUICK: Plan = Plan {
    rounds: 1,
    runs: 1,
    bytes: 8 * MIB,
};

/// The raw copy loop: MiB/s of `head -c bytes /dev/zero` through a fresh terminal.
fn raw_openpty(bytes: u64) -> Res<f64> {
    let pair = nix::pty::openpty(None, None)?;
    let start = Instant::now();
    let mut child = OsCommand::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(pair.slave))
        .stderr(Stdio::null())
        .spawn()?;
    let mut master = std::fs::File::from(pair.master);
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            // EIO: the last slave descriptor closed, everything written was read.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) => return Err(e.into()),
        }
    }
    child.wait()?;
    let elapsed = start.elapsed();
    if got != bytes {
        return Err(format!("raw copy: {got} of {bytes} bytes").into());
    }
    Ok(common::mib_per_sec(bytes, elapsed))
}

/// A PTY launch of the same command: MiB/s from `start` to `wait`.
async fn pty_launch(sup: &Supervisor, cwd: &std::path::Path, bytes: u64) -> Res<f64> {
    let command = Command::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .cwd(cwd)
        .pty(24, 80);
    let prepared = sup.prepare(command)?;
    let start = Instant::now();
    let handle = sup.start(prepared).await.map_err(|e| e.to_string())?;
    let summary = sup.wait(&handle, None).await?;
    let elapsed = start.elapsed();
    if summary.bounds.total_bytes != bytes {
        return Err(format!(
            "pty launch: {} of {bytes} bytes",
            summary.bounds.total_bytes
        )
        .into());
    }
    Ok(common::mib_per_sec(bytes, elapsed))
}

fn main() -> Res<()> {
    let plan = common::plan(FULL, QUICK);
    let dir = tempfile::Builder::new()
        .prefix("pty-bench-")
        .tempdir_in(common::bench_dir()?)?;
    common::print_file_system(dir.path(), "spool", "the spool's writes cost no disk");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut config = SupervisorConfig::new(dir.path().join("root"));
    config.durability = Durability::Os;
    config.launcher = Arc::new(GroupLauncher);
    // Room for every run's output: retention is not what is measured.
    config.spool.retention_bytes = config.spool.retention_bytes.max(plan.bytes * 2);
    let (sup, _) = runtime.block_on(Supervisor::open(config, Services::noop()))?;
    let (raw, launched) = common::interleaved_rounds(
        plan.rounds,
        plan.runs,
        || raw_openpty(plan.bytes),
        || runtime.block_on(pty_launch(&sup, dir.path(), plan.bytes)),
    )?;
    runtime.block_on(sup.shutdown(std::time::Duration::from_secs(2)));
    println!(
        "\nPTY output, {} per run, {} round(s) of {} run(s) (MiB/s):",
        common::size_name(plan.bytes),
        plan.rounds,
        plan.runs
    );
    common::print_rows(&[Row {
        figure: "PTY launch into the spool",
        samples: &launched,
        baseline: "raw openpty copy loop",
        base: &raw,
        target: Target::None,
    }]);
    Ok(())
}
