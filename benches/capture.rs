//! Capture throughput: `Supervisor::capture` of a command's whole stdout, beside a
//! raw pipe copy measured in the same run.
//!
//! Run with `cargo bench --bench capture`. Each round runs, alternating (the order swapped
//! every round, so that other load on the machine hits both alike):
//! - baseline: `head -c N /dev/zero` spawned with a pipe as its stdout, read here with blocking
//!   `read`s of 64 KiB into one buffer until end of file, then the child reaped: the pipe's own
//!   cost, with the bytes held as a capture holds them, nothing kept on disk;
//! - figure: `Supervisor::capture` of the same command (no guardian, `Durability::Os`, a
//!   stream limit of N so that every byte is returned): the drain's reads into the spool, the
//!   journal's records, and the capture's reads of the spool back into its buffer.
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
use procjournal::supervisor::{CaptureLimits, Command, Services, Supervisor, SupervisorConfig};
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

/// The raw copy: MiB/s of `head -c bytes /dev/zero` read from its stdout pipe into memory.
fn raw_pipe(bytes: u64) -> Res<f64> {
    let start = Instant::now();
    let mut child = OsCommand::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no stdout pipe")?;
    let mut held = Vec::with_capacity(usize::try_from(bytes)?);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stdout.read(&mut buf)? {
            0 => break,
            n => held.extend_from_slice(&buf[..n]),
        }
    }
    child.wait()?;
    let elapsed = start.elapsed();
    if held.len() as u64 != bytes {
        return Err(format!("raw copy: {} of {bytes} bytes", held.len()).into());
    }
    Ok(common::mib_per_sec(bytes, elapsed))
}

/// A capture of the same command: MiB/s from the call to its result.
async fn capture(sup: &Supervisor, cwd: &std::path::Path, bytes: u64) -> Res<f64> {
    let command = Command::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .cwd(cwd);
    let prepared = sup.prepare(command)?;
    let limits = CaptureLimits {
        stream_bytes: usize::try_from(bytes)?,
    };
    let start = Instant::now();
    let result = sup.capture(prepared, limits).await?;
    let elapsed = start.elapsed();
    let got = result.complete_stdout()?.len() as u64;
    if got != bytes {
        return Err(format!("capture: {got} of {bytes} bytes").into());
    }
    Ok(common::mib_per_sec(bytes, elapsed))
}

fn main() -> Res<()> {
    let plan = common::plan(FULL, QUICK);
    let dir = tempfile::Builder::new()
        .prefix("capture-bench-")
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
    let (raw, captured) = common::interleaved_rounds(
        plan.rounds,
        plan.runs,
        || raw_pipe(plan.bytes),
        || runtime.block_on(capture(&sup, dir.path(), plan.bytes)),
    )?;
    runtime.block_on(sup.shutdown(std::time::Duration::from_secs(2)));
    println!(
        "\nCapture of stdout, {} per run, {} round(s) of {} run(s) (MiB/s):",
        common::size_name(plan.bytes),
        plan.rounds,
        plan.runs
    );
    common::print_rows(&[Row {
        figure: "capture (spool and back)",
        samples: &captured,
        baseline: "raw pipe copy into memory",
        base: &raw,
        target: Target::None,
    }]);
    Ok(())
}
