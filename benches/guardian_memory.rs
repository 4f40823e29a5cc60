//! Memory per idle supervised process: what its guardian costs, beside a plain `sleep`.
//!
//! Run with `cargo bench --bench guardian_memory`. Four ways of keeping N idle `sleep 600`
//! (N = 40; 8 with `PROCJOURNAL_BENCH_QUICK=1`), measured in the same run, one after the other:
//! - forked by a zygote: as the small guardian below, but each guardian forked by one zygote of
//!   that image (`GuardianLauncher::with_zygote`, what the daemon does); the zygote's own
//!   memory is added to the guardians' in equal parts;
//! - small guardian: a supervisor (guardians only, no cgroup: the guardian's own cost) whose
//!   guardian program is `procjournal-guardian`, the image the CLI and the daemon run when it is
//!   installed beside them;
//! - old guardian: the same supervisor with the `procjournal` binary as its guardian, the image
//!   `GuardianProgram::CurrentExe` re-executes in the CLI (the fallback when no small guardian is
//!   beside it);
//! - baseline: N `sleep 600` forked and exec'd directly by this bench (`std::process::Command`),
//!   with no guardian, no supervisor and no capture.
//!
//! For each way, once every process is started, this bench reads `/proc/<pid>/smaps_rollup` of
//! every guardian (a child of this bench running the guardian image) and every workload (a
//! `sleep`), and sums `Pss`, `Private_Dirty` and `Rss`. PSS charges each shared page to the
//! processes mapping it in equal parts, so it is what one more process adds to the machine;
//! private dirty is what no other process can share. The supervisor's share is the growth of
//! this bench's own PSS and private dirty over the N starts, divided by N: the pipes, spool and
//! tasks the supervisor keeps per live process, which are the same for both guardians (its
//! kernel-side descriptors are not in it; the heap grows in steps, so this figure moves by
//! several KiB between runs). One start before them is not counted, neither its guardian and
//! workload nor the supervisor's growth: what the first launch costs once (the zygote's start,
//! the journal's first pages, the runtime's threads) is no process's share. Each way is
//! measured twice, the second pass in the reverse order (the heap one way grew and freed serves
//! the next, so a way measured first is charged more of it), and each figure is the mean of its
//! two passes; the supervisor's share of each pass is printed too. The report gives
//! each figure per process and the ratios: small guardian over old, and each way's total per
//! supervised process over the baseline `sleep`; and the lean-processes goal, guardian and
//! supervisor together at most 64 KiB per process, for the way the daemon launches (forked by
//! a zygote). The guardians' figures are not noisy the way time is: nothing asserted.
//!
//! Temp roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the baseline starts, signals and reaps its sleeps directly"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use procjournal::supervisor::{Command, Services, Supervisor, SupervisorConfig};
use procjournal::tree::{GuardianLauncher, GuardianProgram};

mod common;

use common::{Res, bench_dir, plan, print_cells, print_file_system, print_total_time};

const SMALL: &str = env!("CARGO_BIN_EXE_procjournal-guardian");
const OLD: &str = env!("CARGO_BIN_EXE_procjournal");

/// Memory of one or more processes, in KiB, from `smaps_rollup`.
#[derive(Debug, Clone, Copy, Default)]
struct Mem {
    pss: f64,
    private_dirty: f64,
    rss: f64,
}

impl Mem {
    fn of(pid: u32) -> Res<Mem> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
        let field = |name: &str| -> Res<f64> {
            let kib = text
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .ok_or_else(|| format!("no {name} in smaps_rollup of {pid}"))?;
            Ok(kib.trim().parse::<f64>()?)
        };
        Ok(Mem {
            pss: field("Pss:")?,
            private_dirty: field("Private_Dirty:")?,
            rss: field("Rss:")?,
        })
    }

    fn sum(pids: &[u32]) -> Res<Mem> {
        let mut total = Mem::default();
        for pid in pids {
            let m = Mem::of(*pid)?;
            total.pss += m.pss;
            total.private_dirty += m.private_dirty;
            total.rss += m.rss;
        }
        Ok(total)
    }

    fn per(self, n: usize) -> Mem {
        let n = n as f64;
        Mem {
            pss: self.pss / n,
            private_dirty: self.private_dirty / n,
            rss: self.rss / n,
        }
    }

    fn plus(self, o: Mem) -> Mem {
        Mem {
            pss: self.pss + o.pss,
            private_dirty: self.private_dirty + o.private_dirty,
            rss: self.rss + o.rss,
        }
    }

    fn minus(self, o: Mem) -> Mem {
        Mem {
            pss: self.pss - o.pss,
            private_dirty: self.private_dirty - o.private_dirty,
            rss: self.rss - o.rss,
        }
    }
}

/// The pids whose parent is `parent`, from `/proc/*/stat`.
fn children_of(parent: u32) -> Res<Vec<u32>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Field 4, after the `(comm)` that may hold spaces.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    Ok(out)
}

/// `nanosleep` and `clock_nanosleep` (x86_64), where an idle `sleep` waits.
const SLEEP_CALLS: &[&str] = &["35", "230"];
/// `poll` and `ppoll` (x86_64), where an idle guardian waits.
const POLL_CALLS: &[&str] = &["7", "271"];
/// `recvmsg` (x86_64), where an idle zygote waits.
const RECV_CALLS: &[&str] = &["47"];
/// A hang guard for a process to settle; it bounds a hang, it measures nothing.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// Waits until `pid` blocks in one of `calls` (`/proc/<pid>/syscall`): a process that has just
/// exec'd may still be loading (its loader's page faults), and a measure then would miss them.
fn settled(pid: u32, calls: &[&str]) -> Res<()> {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let text = std::fs::read_to_string(format!("/proc/{pid}/syscall"))?;
        if text
            .split_whitespace()
            .next()
            .is_some_and(|c| calls.contains(&c))
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{pid} did not settle: {}", text.trim()).into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What one way of keeping N sleeps costs, per process.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    guardian: Mem,
    workload: Mem,
    supervisor: Mem,
}

impl Cost {
    fn total(&self) -> Mem {
        self.guardian.plus(self.workload).plus(self.supervisor)
    }

    /// The mean of two passes of one way.
    fn mean(a: &Cost, b: &Cost) -> Cost {
        Cost {
            guardian: a.guardian.plus(b.guardian).per(2),
            workload: a.workload.plus(b.workload).per(2),
            supervisor: a.supervisor.plus(b.supervisor).per(2),
        }
    }
}

/// N sleeps under a supervisor whose guardian program is `program`; with `zygote`, each
/// guardian forked by a zygote of it (what the daemon does), whose own memory is charged to the
/// guardians in equal parts.
async fn supervised(program: &str, n: usize, base: &Path, zygote: bool) -> Res<Cost> {
    let dir = tempfile::Builder::new()
        .prefix("guardian-memory-")
        .tempdir_in(base)?;
    let mut config = SupervisorConfig::new(dir.path().join("rt"));
    config.max_live = n + 16;
    config.admission = procjournal::admission::AdmissionConfig::max_concurrent(n + 16);
    config.launcher = Arc::new(
        GuardianLauncher::new(GuardianProgram::Path(PathBuf::from(program)))?.with_zygote(zygote),
    );
    let (sup, _) = Supervisor::open(config, Services::noop()).await?;
    let me = std::process::id();
    let sleep = || Command::new("sleep").arg("600").cwd(dir.path());
    // The first launch, not counted: what it costs once (the zygote's start, the journal's
    // first pages, the runtime's threads) is no process's share.
    sup.start(sup.prepare(sleep())?)
        .await
        .map_err(|e| e.to_string())?;
    let first = children_of(me)?;
    let before = Mem::of(me)?;
    for _ in 0..n {
        sup.start(sup.prepare(sleep())?)
            .await
            .map_err(|e| e.to_string())?;
    }
    let (zygotes, guardians): (Vec<u32>, Vec<u32>) = children_of(me)?
        .into_iter()
        .filter(|c| is_zygote(*c) || !first.contains(c))
        .partition(|c| is_zygote(*c));
    if zygotes.len() != usize::from(zygote) {
        return Err(format!("{} zygotes with zygote={zygote}", zygotes.len()).into());
    }
    let exe = std::fs::canonicalize(program)?;
    for g in guardians.iter().chain(&zygotes) {
        if std::fs::read_link(format!("/proc/{g}/exe"))? != exe {
            return Err(format!("child {g} is not running {}", exe.display()).into());
        }
    }
    if guardians.len() != n {
        return Err(format!("{} guardians for {n} starts", guardians.len()).into());
    }
    let mut workloads = Vec::new();
    for g in &guardians {
        settled(*g, POLL_CALLS)?;
        workloads.extend(children_of(*g)?);
    }
    for w in &workloads {
        settled(*w, SLEEP_CALLS)?;
    }
    for z in &zygotes {
        settled(*z, RECV_CALLS)?;
    }
    let cost = Cost {
        guardian: Mem::sum(&guardians)?.plus(Mem::sum(&zygotes)?).per(n),
        workload: Mem::sum(&workloads)?.per(n),
        supervisor: Mem::of(me)?.minus(before).per(n),
    };
    sup.shutdown(Duration::from_secs(5)).await;
    Ok(cost)
}

/// N sleeps forked and exec'd by this bench, with nothing around them.
fn baseline(n: usize) -> Res<Cost> {
    let mut children = Vec::with_capacity(n);
    for _ in 0..n {
        children.push(std::process::Command::new("sleep").arg("600").spawn()?);
    }
    let pids: Vec<u32> = children.iter().map(std::process::Child::id).collect();
    for pid in &pids {
        settled(*pid, SLEEP_CALLS)?;
    }
    let workload = Mem::sum(&pids)?.per(n);
    for mut c in children {
        c.kill()?;
        c.wait()?;
    }
    Ok(Cost {
        workload,
        ..Cost::default()
    })
}

fn kib(v: f64) -> String {
    format!("{v:.1}")
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".to_owned()
    }
}

/// The zygote, told from the guardians it forked (they share its command line) by its name.
fn is_zygote(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == "pj-zygote")
}

fn print_report(n: usize, forked: &Cost, small: &Cost, old: &Cost, base: &Cost) {
    println!("\nper idle supervised process, KiB ({n} `sleep 600` each way)");
    let row = |what: &str, c: &Cost| {
        let t = c.total();
        [
            what.to_owned(),
            kib(c.guardian.pss),
            kib(c.guardian.private_dirty),
            kib(c.guardian.rss),
            kib(c.supervisor.pss),
            kib(c.supervisor.private_dirty),
            kib(c.workload.pss),
            kib(t.pss),
            kib(t.private_dirty),
            ratio(t.pss, base.workload.pss),
        ]
    };
    print_cells(
        [
            "way",
            "guardian PSS",
            "guardian priv dirty",
            "guardian RSS",
            "supervisor PSS",
            "supervisor priv dirty",
            "sleep PSS",
            "total PSS",
            "total priv dirty",
            "total PSS / baseline",
        ],
        &[
            row("forked by a zygote", forked),
            row("small guardian", small),
            row("old guardian", old),
            row("baseline sleep", base),
        ],
    );
    println!(
        "forked by a zygote / small guardian: PSS {}, private dirty {}, RSS {}",
        ratio(forked.guardian.pss, small.guardian.pss),
        ratio(forked.guardian.private_dirty, small.guardian.private_dirty),
        ratio(forked.guardian.rss, small.guardian.rss),
    );
    println!(
        "small guardian / old guardian: PSS {}, private dirty {}, RSS {}",
        ratio(small.guardian.pss, old.guardian.pss),
        ratio(small.guardian.private_dirty, old.guardian.private_dirty),
        ratio(small.guardian.rss, old.guardian.rss),
    );
    println!(
        "small guardian / baseline sleep: PSS {}, private dirty {}",
        ratio(small.guardian.pss, base.workload.pss),
        ratio(small.guardian.private_dirty, base.workload.private_dirty),
    );
    let lean = forked.guardian.plus(forked.supervisor).pss;
    println!(
        "forked by a zygote, guardian + supervisor: {} KiB PSS per process; target <= {GOAL_KIB:.0} KiB: {}",
        kib(lean),
        if lean <= GOAL_KIB { "met" } else { "NOT met" },
    );
}

/// The lean-processes goal: what a supervised process costs beside its workload, in KiB.
const GOAL_KIB: f64 = 64.0;

fn print_sizes() -> Res<()> {
    for (what, path) in [("small guardian", SMALL), ("old guardian", OLD)] {
        let len = std::fs::metadata(path)?.len();
        println!("{what}: {path}, {:.1} MiB on disk", len as f64 / 1048576.0);
    }
    Ok(())
}

fn main() -> Res<()> {
    let all = Instant::now();
    let n = plan(40, 8);
    let base = bench_dir()?;
    print_file_system(&base, "roots", "(memory figures are unaffected)");
    print_sizes()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let plain = baseline(n)?;
    // A first round warms this process up (its allocator's arenas, the runtime's threads), so
    // that neither measured way is charged for it as the supervisor's share.
    rt.block_on(supervised(SMALL, n, &base, false))?;
    // Each way twice, the second pass in the reverse order: the heap this process grew for one
    // way and freed serves the next, so a way measured first would be charged more of it.
    let ways = [(SMALL, true), (SMALL, false), (OLD, false)];
    let mut passes = Vec::with_capacity(2 * ways.len());
    for (program, zygote) in ways.iter().chain(ways.iter().rev()) {
        passes.push(rt.block_on(supervised(program, n, &base, *zygote))?);
    }
    let [f1, s1, o1, o2, s2, f2] = passes.as_slice() else {
        return Err("not six passes".into());
    };
    println!(
        "supervisor's share per process, KiB PSS, pass 1 / pass 2: forked by a zygote {} / {}, \
         small guardian {} / {}, old guardian {} / {}",
        kib(f1.supervisor.pss),
        kib(f2.supervisor.pss),
        kib(s1.supervisor.pss),
        kib(s2.supervisor.pss),
        kib(o1.supervisor.pss),
        kib(o2.supervisor.pss),
    );
    let (forked, small, old) = (Cost::mean(f1, f2), Cost::mean(s1, s2), Cost::mean(o1, o2));
    print_report(n, &forked, &small, &old, &plain);
    print_total_time(all);
    Ok(())
}
