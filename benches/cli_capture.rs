//! Output capture through the command line, `run` and the daemon, beside the same output written
//! to a file by the shell, measured in the same run.
//!
//! Run with `cargo bench --bench cli_capture`. Two workloads of `BYTES` (1 GiB) each:
//! - zeros: `head -c BYTES /dev/zero`;
//! - text lines: `yes '<an 82-byte log line>' | head -c BYTES`, as a chatty build or server
//!   writes (a pipe between two processes already, as such output usually is).
//!
//! For each workload, in every round (order swapped round by round, so that other load on the
//! machine hits all alike), each of these once, timed from spawn to exit:
//! - baseline: `sh -c '<workload> > FILE'`: the bytes written once, to a file on the same file
//!   system as the roots, not synced (the issue's `head -c 1G > file`);
//! - for scale, the pipe alone: `sh -c '<workload> | cat > FILE'`: every supervisor must take
//!   output through a pipe, and this is what the pipe costs by itself;
//! - a reader that keeps nothing: `sh -c '<workload> | SINK'`, where SINK is this bench's own
//!   binary, enlarging the pipe to 1 MiB as the supervisor does, reading it 256 KiB at a time
//!   into a buffer on a cache line (as the drain does: `aligned` says why) and throwing every
//!   byte away. It reads as eagerly as the supervisor's drain does: whatever the
//!   pipe holds as soon as it holds anything, so `head`'s 4 KiB writes mostly meet an empty pipe
//!   and most reads bring a few KiB;
//! - the batching reader: the same reader, pausing 50 microseconds after every read that brought
//!   less than half its buffer, so that the pipe fills between reads and the writer and the
//!   reader stop taking turns at the pipe's lock a few KiB at a time. It used to be this bench's
//!   floor for zeros, and is not one: while the readers' buffers started off a cache line
//!   (`aligned` says what that cost), the eager reader took 0.15 to 0.2 times the baseline more
//!   than it; with buffers on a cache line both took about half the baseline, and the plain
//!   keeper below, whose writes space its reads out, less. For text lines `yes` and `head` and
//!   the reader share two CPUs;
//! - a plain keeper: `sh -c '<workload> | KEEPER'`, this bench's binary again, the pipe
//!   enlarged the same way, reading it in the drain's reads (256 KiB, into a buffer on a cache
//!   line) as soon as it holds
//!   anything and writing each read, as it is, into a file on the roots' file system at the
//!   read's offset modulo 64 MiB (a ring of the default retention, so that after the first 64
//!   MiB each write lands on pages already cached, as a spool reusing its segment files does).
//!   Nothing else: no framing, no checksum, no index, no second copy. It is the simplest
//!   supervisor that keeps a pipe's bytes in a file, for reference, not a floor: a drain with
//!   larger reads, or one that overlaps its writes with its reads, may do better;
//! - the same keeper made durable: one `fdatasync` of the ring at the end of the input, as a
//!   capture that says its kept output is on the disk when the result is out must do for its
//!   window (the baseline syncs nothing). Again a reference: a drain that starts writeback of
//!   its window before the end may do better;
//! - `run`: `procjournal run --root R -- sh -c '<workload>'`, its live copy to /dev/null: the
//!   open of the root, the drain into the spool (default retention, 64 MiB, so older segments
//!   are deleted as a ring), the live copy to this process's stdout, the write-behind syncs,
//!   the terminal event, the close. Into `/dev/null` (or a file), the drain writes the copy
//!   itself, as `run > log` does;
//! - the same `run` with its stdout a pipe this bench reads (in the drain's reads, keeping
//!   nothing), as `run | less` does: there the drain writes only small chunks itself, and only
//!   what fits without waiting; the rest goes through the tap's channel to a thread of its own,
//!   which a reader that stops reading may hold in `write` (for scale, no target);
//! - daemon: `procjournal start --root R -- sh -c '<workload>'` then `procjournal wait` for it,
//!   against one `procjournal serve` started for the bench: the same drain without a live copy.
//!
//! `sync()` runs (untimed) before each measurement, and the previous measurement's files are
//! deleted, so no writer pays for another's dirty pages. A round's figure is the time of its one
//! run; the report gives medians over rounds and the ratio to the baseline's median, with the
//! per-round range. The targets are the lean-processes goals: zeros at most 0.8x the baseline,
//! text lines at most 1.2x; the `met` column says whether this run met them.
//!
//! Nothing asserts on time; each run checks its exit status, and `run`'s and the daemon's spool
//! their byte count. Roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir;
//! `PROCJOURNAL_BENCH_QUICK=1` runs one round of 32 MiB, for checking the harness only.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use common::{GIB, MIB, Res, Row, Samples, Target};
use procjournal::aligned::ReadBuf;

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    bytes: u64,
}

const FULL: Plan = Plan {
    rounds: 5,
    bytes: GIB,
};
const QUICK: Plan = Plan {
    rounds: 1,
    bytes: 32 * MIB,
};

/// Figures of one workload (see `measure`).
const FIGURES: usize = 9;

const LINE: &str = "2026-12-04T16:00:00Z INFO request handled path=/api/v1/items status=200 ms=12";

/// The procjournal binary Cargo built (in the bench profile) for this bench.
fn procjournal_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_procjournal"))
}

/// The shell text of a workload of `bytes` bytes.
fn workload(text: bool, bytes: u64) -> String {
    if text {
        format!("yes '{LINE}' | head -c {bytes}")
    } else {
        format!("head -c {bytes} /dev/zero")
    }
}

/// Seconds `cmd` took from spawn to exit; fails unless it exited 0.
fn timed(cmd: &mut Command) -> Res<(f64, String)> {
    let start = Instant::now();
    let out = cmd.stdin(Stdio::null()).stderr(Stdio::piped()).output()?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok((secs, String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn settle(scratch: &Path) -> Res<()> {
    for entry in std::fs::read_dir(scratch)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    nix::unistd::sync();
    Ok(())
}

fn shell_to_file(shell: &str, scratch: &Path) -> Res<f64> {
    settle(scratch)?;
    let file = scratch.join("out");
    let (secs, _) = timed(
        Command::new("sh")
            .arg("-c")
            .arg(format!("{shell} > '{}'", file.display())),
    )?;
    Ok(secs)
}

/// `run` of `shell`, its stdout `/dev/null` or, `into_pipe`, a pipe this process reads.
fn run(bin: &Path, shell: &str, scratch: &Path, bytes: u64, into_pipe: bool) -> Res<f64> {
    settle(scratch)?;
    let root = scratch.join("root");
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--root"])
        .arg(&root)
        .args(["--", "sh", "-c", shell]);
    cmd.stdout(if into_pipe {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let start = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stderr(Stdio::null()).spawn()?;
    let reader = child
        .stdout
        .take()
        .map(|out| std::thread::spawn(|| discard(out)));
    let status = child.wait()?;
    if let Some(reader) = reader {
        reader
            .join()
            .map_err(|_| "the reader of run's stdout panicked")??;
    }
    let secs = start.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("run of {shell} failed: {status}").into());
    }
    check_total(bin, &root, "\"handle\"", bytes)?;
    Ok(secs)
}

/// The daemon of the bench: `serve` on a root of its own, until dropped.
struct Daemon {
    bin: PathBuf,
    root: PathBuf,
    child: Child,
}

impl Daemon {
    fn start(bin: &Path, root: &Path) -> Res<Daemon> {
        Ok(Daemon {
            bin: bin.to_owned(),
            root: root.to_owned(),
            child: common::spawn_serve(bin, root)?,
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args).arg("--root").arg(&self.root);
        cmd
    }

    /// Seconds from `start` to the return of `wait`; checks the spool's byte count after.
    fn capture(&self, shell: &str, bytes: u64) -> Res<f64> {
        let start = Instant::now();
        let (_, handle) = timed(self.command(&["start"]).args(["--", "sh", "-c", shell]))?;
        let handle = handle.trim().to_owned();
        timed(self.command(&["wait"]).arg(&handle).stdout(Stdio::null()))?;
        let secs = start.elapsed().as_secs_f64();
        check_total(&self.bin, &self.root, &handle, bytes)?;
        Ok(secs)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self
            .command(&["shutdown"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

/// Checks that the process whose `ps --json` line holds `marker` (its handle; `run`'s root holds
/// one process) counted `bytes` bytes of output.
fn check_total(bin: &Path, root: &Path, marker: &str, bytes: u64) -> Res<()> {
    let (_, json) = timed(Command::new(bin).args(["ps", "--json", "--root"]).arg(root))?;
    let want = format!("\"total_bytes\":{bytes}");
    let line = json
        .lines()
        .find(|l| l.contains(marker))
        .ok_or_else(|| format!("no process {marker} in {}", root.display()))?;
    let counted = line
        .match_indices(&want)
        .any(|(at, _)| !line[at + want.len()..].starts_with(|c: char| c.is_ascii_digit()));
    if !counted {
        return Err(format!("process {marker} did not count {bytes} bytes: {line}").into());
    }
    Ok(())
}

/// Set in the bench's own binary when it runs as a reader that keeps nothing ([`EAGER`] or
/// [`BATCHING`]) or as one that keeps the bytes in a ring file ([`KEEPING`] or [`DURABLE`]),
/// whose path is then in [`RING_ENV`].
const SINK_ENV: &str = "PROCJOURNAL_BENCH_CAPTURE_SINK";
const RING_ENV: &str = "PROCJOURNAL_BENCH_CAPTURE_RING";
const EAGER: &str = "eager";
const BATCHING: &str = "batching";
const KEEPING: &str = "keeping";
const DURABLE: &str = "durable";

/// The keepers' ring: the default retention (`SpoolOptions::default().retention_bytes`).
const RING_BYTES: u64 = 64 * MIB;

/// The keepers (module doc): stdin enlarged as the supervisor enlarges its pipes, read in the
/// drain's reads, each written at its offset modulo [`RING_BYTES`] into the file at `ring`;
/// `durable`: one `fdatasync` of it at the end.
fn keeper(ring: &Path, durable: bool) -> Res<()> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let stdin = std::io::stdin();
    let _ = nix::fcntl::fcntl(&stdin, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(ring)?;
    let mut buf = ReadBuf::zeroed(procjournal::limits::READ_BYTES);
    let mut input = stdin.lock();
    let mut at = 0u64;
    loop {
        let n = input.read(buf.room(procjournal::limits::READ_BYTES))?;
        if n == 0 {
            break;
        }
        let mut bytes = buf.bytes(n);
        while !bytes.is_empty() {
            let room = (RING_BYTES - at % RING_BYTES) as usize;
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            file.write_all_at(now, at % RING_BYTES)?;
            at += now.len() as u64;
            bytes = rest;
        }
    }
    if durable {
        file.sync_data()?;
    }
    Ok(())
}

/// Reads `from` to its end in the drain's reads, keeping nothing.
fn discard(mut from: impl std::io::Read) -> std::io::Result<()> {
    let len = procjournal::limits::READ_BYTES;
    let mut buf = ReadBuf::zeroed(len);
    while from.read(buf.room(len))? > 0 {}
    Ok(())
}

/// The readers that keep nothing: stdin (a pipe) enlarged as the supervisor enlarges its
/// pipes, read in reads of the supervisor's size until its end, every byte thrown away; the
/// batching one pauses after a read that brought less than half its buffer (module doc).
fn sink(batching: bool) -> Res<()> {
    use std::io::Read;
    let stdin = std::io::stdin();
    // An older kernel may refuse the size; the reader then reads the default pipe.
    let _ = nix::fcntl::fcntl(&stdin, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
    let len = procjournal::limits::READ_BYTES;
    let mut buf = ReadBuf::zeroed(len);
    let mut input = stdin.lock();
    loop {
        let n = input.read(buf.room(len))?;
        if n == 0 {
            return Ok(());
        }
        if batching && n < len / 2 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// The workload piped into the [`sink`] or [`keeper`] of the kind `how` names.
fn shell_to_sink(shell: &str, scratch: &Path, how: &str) -> Res<f64> {
    settle(scratch)?;
    let me = std::env::current_exe()?;
    let (secs, _) = timed(
        Command::new("sh")
            .arg("-c")
            .arg(format!("{shell} | '{}'", me.display()))
            .env(SINK_ENV, how)
            .env(RING_ENV, scratch.join("ring")),
    )?;
    Ok(secs)
}

/// One workload's figures over the rounds, in ms: (baseline, pipe, run, daemon, eager reader,
/// batching reader, keeper, durable keeper, run into a pipe).
fn measure(bin: &Path, plan: Plan, text: bool, base: &Path) -> Res<[Samples; FIGURES]> {
    let shell = workload(text, plan.bytes);
    let scratch = tempfile::tempdir_in(base)?;
    let daemon_root = tempfile::tempdir_in(base)?;
    let daemon = Daemon::start(bin, &daemon_root.path().join("root"))?;
    let mut figures: [Samples; FIGURES] = Default::default();
    let pipe = format!("{shell} | cat");
    for round in 0..plan.rounds {
        common::print_round(round, plan.rounds);
        let mut order: [usize; FIGURES] = std::array::from_fn(|i| i);
        if round % 2 == 1 {
            order.reverse();
        }
        for which in order {
            let secs = match which {
                0 => shell_to_file(&shell, scratch.path())?,
                1 => shell_to_file(&pipe, scratch.path())?,
                2 => run(bin, &shell, scratch.path(), plan.bytes, false)?,
                8 => run(bin, &shell, scratch.path(), plan.bytes, true)?,
                4 => shell_to_sink(&shell, scratch.path(), EAGER)?,
                5 => shell_to_sink(&shell, scratch.path(), BATCHING)?,
                6 => shell_to_sink(&shell, scratch.path(), KEEPING)?,
                7 => shell_to_sink(&shell, scratch.path(), DURABLE)?,
                _ => {
                    settle(scratch.path())?;
                    daemon.capture(&shell, plan.bytes)?
                }
            };
            figures[which].push(secs * 1e3);
        }
    }
    Ok(figures)
}

fn main() -> Res<()> {
    if let Some(how) = std::env::var_os(SINK_ENV) {
        if how == KEEPING || how == DURABLE {
            let ring = std::env::var_os(RING_ENV).ok_or("the keeper has no ring file")?;
            return keeper(Path::new(&ring), how == DURABLE);
        }
        return sink(how == BATCHING);
    }
    let plan = common::plan(FULL, QUICK);
    let base = common::bench_dir()?;
    common::print_file_system(&base, "roots and files", "makes every write free");
    let bin = procjournal_bin();
    println!(
        "binary {}; {} rounds of {} per workload; load {}; {} available CPUs",
        bin.display(),
        plan.rounds,
        common::size_name(plan.bytes),
        common::load_average(),
        common::available_cpus()
    );
    let all = Instant::now();
    let zeros = measure(&bin, plan, false, &base)?;
    let text = measure(&bin, plan, true, &base)?;
    let shell_file = "shell > file";
    let mut rows = Vec::new();
    for (name, figures, target) in [("zeros", &zeros, 0.8), ("text lines", &text, 1.2)] {
        let [
            baseline,
            pipe,
            run,
            daemon,
            eager,
            batch,
            keeping,
            durable,
            run_piped,
        ] = figures;
        for (figure, samples, goal) in [
            ("pipe | cat > file (scale)", pipe, Target::None),
            ("pipe | a reader keeping nothing", eager, Target::None),
            ("pipe | the same, reading in batches", batch, Target::None),
            (
                "pipe | a plain keeper into a ring file",
                keeping,
                Target::None,
            ),
            (
                "pipe | the same keeper, synced at the end",
                durable,
                Target::None,
            ),
            ("procjournal run", run, Target::MaxRatio(target)),
            ("procjournal run | a reader", run_piped, Target::None),
            ("daemon start + wait", daemon, Target::MaxRatio(target)),
        ] {
            rows.push((format!("{name}: {figure}, ms"), samples, baseline, goal));
        }
    }
    let rows: Vec<Row> = rows
        .iter()
        .map(|(figure, samples, base, target)| Row {
            figure,
            samples,
            baseline: shell_file,
            base,
            target: *target,
        })
        .collect();
    common::print_rows(&rows);
    common::print_total_time(all);
    Ok(())
}
