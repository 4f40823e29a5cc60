//! Measurement and report helpers shared by the benches (`benches/*.rs`, each `harness = false`,
//! each including this module with `mod common;`).
//!
//! One definition, for every bench, of how time and CPU are measured and how figures are
//! summarised and printed, so that the figures of different benches mean the same thing and a fix
//! to one of these helpers reaches all of them:
//! - set-up: the quick-or-full plan (`PROCJOURNAL_BENCH_QUICK`), the directory temp roots live
//!   under (`$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir), the file system holding it
//!   (from `/proc/self/mountinfo`), the 1-minute load average and the available CPUs;
//! - CPU time: a thread's on-CPU time and run-queue wait (`/proc/thread-self/schedstat`, [`Sched`])
//!   and the whole process's CPU time (`/proc/self/stat`, which also counts threads that exited);
//! - summaries: [`Samples`] of one figure over the rounds (median, min, max, spread, per-round
//!   ratios), quantiles of a run's latencies, MiB/s and size names;
//! - the report: number and ratio formatting, and the `| a | b |` tables, either from cells a bench
//!   builds itself or from [`Row`]s with a [`Target`].
//!
//! What a bench measures, its baselines, its wording and its table columns stay in the bench.

// Each bench uses a subset of these helpers, and every bench compiles this module on its own: what
// one bench leaves unused would otherwise warn (and fail `clippy -D warnings`) in that bench.
#![allow(dead_code)]

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;

/// A `start` request's arguments for `command` in `cwd`, with the client's environment and
/// nothing else asked for: what the benches that drive a daemon over its socket send.
pub fn start_args(command: Vec<String>, cwd: String) -> procjournal::protocol::StartArgs {
    procjournal::protocol::StartArgs {
        max_bytes: None,
        settle_ms: None,
        yield_ms: None,
        command,
        cwd: Some(cwd),
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
        queue_ms: None,
        pty: None,
    }
}

/// A `procjournal serve` of `bin` on `root` (its output discarded), once its socket accepts a
/// connection; an error if it ends first or does not answer in 30 s (then it is killed).
pub fn spawn_serve(bin: &Path, root: &Path) -> Res<std::process::Child> {
    use std::process::{Command, Stdio};
    let mut daemon = Command::new(bin)
        .args(["serve", "--root"])
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let socket = root.join("procjournal.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = daemon.try_wait()? {
            return Err(format!(
                "serve on {} ended before answering: {status}",
                root.display()
            )
            .into());
        }
        match procjournal::client::Client::connect(&socket) {
            Ok(_) => return Ok(daemon),
            Err(e) if Instant::now() > deadline => {
                let _ = daemon.kill();
                let _ = daemon.wait();
                return Err(format!("serve on {}: no answer in 30 s: {e}", root.display()).into());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Starts `true` in `cwd` through `client` and waits for it to exit 0; the milliseconds its
/// start took to answer (once `running` is acknowledged).
pub fn start_and_wait_true(client: &mut procjournal::client::Client, cwd: &str) -> Res<f64> {
    use procjournal::protocol::Request;
    let t = Instant::now();
    let started = client.call(&Request::Start(start_args(
        vec!["true".into()],
        cwd.to_owned(),
    )))?;
    let start_ms = t.elapsed().as_secs_f64() * 1e3;
    let handle: procjournal::lifecycle::Handle =
        started["handle"].as_str().ok_or("no handle")?.parse()?;
    let done = client.call(&Request::Wait {
        handle: handle.into(),
        timeout_ms: None,
    })?;
    if done["state"] != "exited" || done["exit_code"] != 0 {
        return Err(format!("{handle} ended {done}").into());
    }
    Ok(start_ms)
}

// ---------------------------------------------------------------------------------------------
// Set-up and the machine.

/// `quick` if `PROCJOURNAL_BENCH_QUICK` is set (one short round, for checking the harness only),
/// else `full`.
pub fn plan<P>(full: P, quick: P) -> P {
    if std::env::var_os("PROCJOURNAL_BENCH_QUICK").is_some() {
        quick
    } else {
        full
    }
}

/// The directory temp roots live under: `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir;
/// created if missing.
pub fn bench_dir() -> Res<PathBuf> {
    let dir = std::env::var_os("PROCJOURNAL_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The mount point, file-system type and source of `path`, from /proc/self/mountinfo.
pub fn mount_of(path: &Path) -> Option<(String, String, String)> {
    let path = path.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(String, String, String)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mount_point), Some(fs_type), Some(source)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        if path.starts_with(mount_point)
            && best
                .as_ref()
                .is_none_or(|(m, _, _)| mount_point.len() >= m.len())
        {
            best = Some((
                (*mount_point).to_owned(),
                (*fs_type).to_owned(),
                (*source).to_owned(),
            ));
        }
    }
    best
}

/// Prints the file system `dir` is on (`temp <what> under ...`), with a warning, ending in
/// `on_memory`, where it is tmpfs or ramfs: memory makes writes and syncs nearly free.
pub fn print_file_system(dir: &Path, what: &str, on_memory: &str) {
    match mount_of(dir) {
        Some((mount_point, fs_type, source)) => {
            println!(
                "temp {what} under {} on {mount_point} ({fs_type}, {source})",
                dir.display()
            );
            if matches!(fs_type.as_str(), "tmpfs" | "ramfs") {
                println!("WARNING: {fs_type} {on_memory}");
            }
        }
        None => println!("temp {what} under {} (file system unknown)", dir.display()),
    }
}

/// The 1-minute load average, to show how busy the machine was around each round.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The CPUs this process may run on (0 if unknown).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// `round i/n (load average ...)`, before each round.
pub fn print_round(i: usize, rounds: usize) {
    println!(
        "round {}/{} (load average {})",
        i + 1,
        rounds,
        load_average()
    );
}

/// The last line: the whole bench's wall time since `all`, and the load average at the end.
pub fn print_total_time(all: Instant) {
    println!(
        "total bench time {:.1} s; load average at the end {}",
        all.elapsed().as_secs_f64(),
        load_average()
    );
}

// ---------------------------------------------------------------------------------------------
// CPU time.

/// Scheduler time of one or more threads: on a CPU, and ready but waiting for one (run-queue
/// wait: time another process had the CPU, i.e. noise from the machine rather than cost of the
/// code).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sched {
    pub cpu_ns: u64,
    pub wait_ns: u64,
}

impl Sched {
    /// The calling thread's totals so far, from `/proc/thread-self/schedstat` (one read of the
    /// file); zero where the kernel does not provide them.
    pub fn now() -> Sched {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
        let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
        Sched {
            cpu_ns: fields.next().flatten().unwrap_or(0),
            wait_ns: fields.next().flatten().unwrap_or(0),
        }
    }

    /// The calling thread's time since `start` (taken with [`Sched::now`] on the same thread).
    pub fn since(start: Sched) -> Sched {
        let end = Sched::now();
        Sched {
            cpu_ns: end.cpu_ns.saturating_sub(start.cpu_ns),
            wait_ns: end.wait_ns.saturating_sub(start.wait_ns),
        }
    }

    pub fn add(&mut self, other: Sched) {
        self.cpu_ns += other.cpu_ns;
        self.wait_ns += other.wait_ns;
    }

    pub fn describe(&self) -> String {
        format!(
            "cpu {:.3} s, runqueue wait {:.3} s",
            self.cpu_ns as f64 / 1e9,
            self.wait_ns as f64 / 1e9
        )
    }
}

/// CPU time (user + system) of this whole process, exited threads included, from
/// /proc/self/stat, in seconds; NaN where it cannot be read.
pub fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let Some(after_comm) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return f64::NAN;
    };
    // after_comm starts at field 3; utime and stime are fields 14 and 15. USER_HZ is 100 on
    // Linux for every architecture this runs on.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => f64::NAN,
    }
}

// ---------------------------------------------------------------------------------------------
// Summaries.

/// Samples of one figure over the rounds.
#[derive(Debug, Default, Clone)]
pub struct Samples(pub Vec<f64>);

impl Samples {
    pub fn push(&mut self, x: f64) {
        self.0.push(x);
    }
    pub fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }
    pub fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
    pub fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }
    pub fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }
    /// (max - min) / median, in percent.
    pub fn spread_pct(&self) -> f64 {
        (self.max() - self.min()) / self.median() * 100.0
    }
    /// The per-round ratios of these samples over `base`'s.
    pub fn ratios(&self, base: &Samples) -> Samples {
        Samples(self.0.iter().zip(&base.0).map(|(a, b)| a / b).collect())
    }
}

/// The `q` quantile (0..=1) of `v`, which is sorted here; NaN if `v` is empty.
/// The `true` executable the shell loop runs: the first on `PATH` (a shell's own `true` is a
/// builtin, which forks nothing).
pub fn true_program() -> Res<PathBuf> {
    let path = std::env::var_os("PATH").ok_or("no PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("true"))
        .find(|p| p.is_file())
        .ok_or_else(|| "no true executable on PATH".into())
}

/// Milliseconds for a shell loop that runs `n` times the `true` executable, as
/// `for i in $(seq n); do /usr/bin/true; done` does: one fork, exec and wait of `sh` each. This
/// is the baseline the lean-processes issue measured its peers against (0.296 s for 200 there),
/// kept beside the stricter spawn + wait loops the benches also print.
pub fn shell_loop_ms(n: usize) -> Res<f64> {
    let program = true_program()?;
    let script = format!(
        "i=0; while [ $i -lt {n} ]; do '{}'; i=$((i+1)); done",
        program.display()
    );
    let start = Instant::now();
    let status = std::process::Command::new("sh")
        .args(["-c", &script])
        .status()?;
    let elapsed = start.elapsed();
    if !status.success() {
        return Err(format!("the shell loop failed: {status}").into());
    }
    Ok(elapsed.as_secs_f64() * 1e3)
}

/// `rounds` rounds of `runs` runs of a baseline and the project's figure, one of each per run in
/// an order that alternates from run to run and round to round (so load from other work hits
/// both alike); each round's figure is the median of its runs. Returns (baseline, project).
pub fn interleaved_rounds(
    rounds: usize,
    runs: usize,
    mut baseline: impl FnMut() -> Res<f64>,
    mut project: impl FnMut() -> Res<f64>,
) -> Res<(Samples, Samples)> {
    let (mut base, mut ours) = (Samples::default(), Samples::default());
    for round in 0..rounds {
        print_round(round, rounds);
        let (mut b, mut o) = (Samples::default(), Samples::default());
        for run in 0..runs {
            if (round + run) % 2 == 0 {
                b.push(baseline()?);
                o.push(project()?);
            } else {
                o.push(project()?);
                b.push(baseline()?);
            }
        }
        base.push(b.median());
        ours.push(o.median());
    }
    Ok((base, ours))
}

pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

pub fn mib_per_sec(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / MIB as f64 / elapsed.as_secs_f64()
}

/// "1 GiB", "32 MiB".
pub fn size_name(bytes: u64) -> String {
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

/// A file laid out as a journal segment is, for timing the syncs the sync table owes every
/// command (journal-format.md): written whole once and synced, so that a later write and
/// `fdatasync` of it allocate nothing, then taking records as the journal takes one: its bytes,
/// the commit area's, one `fdatasync`. The daemon and cold-run benches time their synced plain
/// loops with it, so that both mean the same sync.
pub struct SyncedRecords {
    file: std::fs::File,
    /// Where the next record goes (a `Cell`: a bench shares the file across its figures).
    at: std::cell::Cell<u64>,
}

impl SyncedRecords {
    const FILE_BYTES: u64 = 2 << 20;

    /// The file `name` in `dir`, which must not exist.
    pub fn create(dir: &Path, name: &str) -> Res<SyncedRecords> {
        use std::io::Write;
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join(name))?;
        file.write_all(&vec![0u8; Self::FILE_BYTES as usize])?;
        file.sync_all()?;
        Ok(SyncedRecords {
            file,
            at: std::cell::Cell::new(4096),
        })
    }

    /// One durable record: its bytes, the commit area's, then `fdatasync`.
    pub fn record(&self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let at = self.at.get();
        self.file.write_all_at(&[0xa5; 240], at)?;
        self.file.write_all_at(&[0x5a; 48], 64)?;
        self.at.set(if at + 512 >= Self::FILE_BYTES {
            4096
        } else {
            at + 256
        });
        self.file.sync_data()
    }
}

/// Deletes `path` (a file or a directory), then writes back every dirty page of the machine, so
/// that the next measurement starts without write-back of this one's pages competing with it.
pub fn discard(path: &Path) -> Res<()> {
    if path.is_dir() {
        std::fs::remove_dir_all(path)?;
    } else if path.exists() {
        std::fs::remove_file(path)?;
    }
    nix::unistd::sync();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The report.

/// Human number: 12.3k, 4.56M; below 100, `small_decimals` decimals.
pub fn human_number(v: f64, small_decimals: usize) -> String {
    if !v.is_finite() {
        "n/a".to_owned()
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.small_decimals$}")
    }
}

/// `median [min-max]`, with one decimal below 100 and none from 100.
pub fn fmt_samples(s: &Samples) -> String {
    let d = if s.median() < 100.0 { 1 } else { 0 };
    format!("{:.d$} [{:.d$}-{:.d$}]", s.median(), s.min(), s.max())
}

/// `ratio [min-max]`: the ratio of the medians of `value` and `base`, then the range of the
/// per-round ratios.
pub fn ratio_cell(value: &Samples, base: &Samples) -> String {
    let per_round = value.ratios(base);
    format!(
        "{:.2} [{:.2}-{:.2}]",
        value.median() / base.median(),
        per_round.min(),
        per_round.max()
    )
}

/// Prints a table: `header`, a rule, then `cells`, every column as wide as its widest cell.
pub fn print_cells<const N: usize>(header: [&str; N], cells: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[&str]| {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(&header);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("|-{}-|", rule.join("-|-"));
    for row in cells {
        line(&row.each_ref().map(String::as_str));
    }
}

/// What a figure must reach, for the `target` and `met` columns of [`print_rows`].
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// figure / baseline must be at least this.
    MinRatio(f64),
    /// figure / baseline must be at most this.
    MaxRatio(f64),
    /// The figure itself must be below this.
    BelowAbs(f64),
    None,
}

/// One line of a [`print_rows`] table: a figure beside its baseline.
#[derive(Debug)]
pub struct Row<'a> {
    pub figure: &'a str,
    pub samples: &'a Samples,
    pub baseline: &'a str,
    pub base: &'a Samples,
    pub target: Target,
}

/// Prints `rows` as a table: figure, median [min-max], baseline, its median [min-max], ratio of
/// the medians [per-round range], target, and whether the target is met.
pub fn print_rows<'r, 'a: 'r>(rows: impl IntoIterator<Item = &'r Row<'a>>) {
    let header = [
        "figure",
        "median [min-max]",
        "baseline",
        "median [min-max]",
        "ratio [per-round]",
        "target",
        "met",
    ];
    let mut cells: Vec<[String; 7]> = Vec::new();
    // A row whose section did not run (PROCJOURNAL_BENCH_ONLY chose another) has no samples:
    // it is left out rather than printed as NaN with a target "not met".
    for row in rows
        .into_iter()
        .filter(|r| !r.samples.median().is_nan() && !r.base.median().is_nan())
    {
        let ratio = row.samples.median() / row.base.median();
        let (target, met) = match row.target {
            Target::MinRatio(t) => (format!(">= {t}x"), Some(ratio >= t)),
            Target::MaxRatio(t) => (format!("<= {t}x"), Some(ratio <= t)),
            Target::BelowAbs(t) => (format!("< {t:.0}"), Some(row.samples.median() < t)),
            Target::None => ("-".to_owned(), None),
        };
        cells.push([
            row.figure.to_owned(),
            fmt_samples(row.samples),
            row.baseline.to_owned(),
            fmt_samples(row.base),
            ratio_cell(row.samples, row.base),
            target,
            match met {
                Some(true) => "yes".to_owned(),
                Some(false) => "NO".to_owned(),
                None => "-".to_owned(),
            },
        ]);
    }
    print_cells(header, &cells);
}
