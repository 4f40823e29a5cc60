//! Short commands through the daemon, start to completion, beside a plain tokio spawn + wait
//! loop measured in the same run.
//!
//! Run with `cargo bench --bench daemon`. Each round measures both once, in alternating order,
//! over 3 rounds; the report gives medians, min-max spreads, and the ratio of the medians with
//! its per-round range.
//!
//! 1. Through the daemon: a `Server` (2 worker threads, as `serve`) in this process on a real
//!    Unix socket, under `Durability::Group` on the project disk; one blocking client on this
//!    thread sends `start` of `true` and then `wait` for it, 200 times in a row, over one
//!    connection. Each command is registered, spawned into its own process group with a pidfd,
//!    drained, terminalized, published and notified: every record acknowledged durable.
//!    Baseline: the same 200 `true`s as `tokio::process::Command::new("true").spawn()` +
//!    `wait()` in a loop on a 2-worker runtime. Target: <= 2x the baseline. For scale (not
//!    measured here): the issue measured s6 at 0.520 s for the same job with pre-created
//!    services, and main before the actor at 0.653 s.
//! 2. The same through the daemon with the 200 commands sent by 8 clients at once (25 each),
//!    beside 8 concurrent plain loops: throughput when the journal can share group commits.
//! 3. The same 200 in a row through a daemon launching as `serve` does: each command under a
//!    guardian (the `procjournal-guardian` binary Cargo built) in a per-launch cgroup (a
//!    guardian alone, said so, where the cgroup probe fails): everything a supervised process
//!    costs, beside the same baseline and beside the issue's own baseline, a shell loop that
//!    runs the `true` executable 200 times (`common::shell_loop_ms`: a fork and exec of `sh`'s
//!    each, slower than tokio's spawn). Target: s6's ratio as the issue measured it (0.667 s
//!    against a 0.296 s shell loop, 2.25x), on both rows; only the shell-loop row compares like
//!    with like, the other is stricter.
//!    Beside them (no target): the plain loop with the two syncs the sync table
//!    (journal-format.md) owes every command, the registration durable before the spawn and the
//!    terminal events durable before the wait answers, each a record's bytes and the commit
//!    area's written into a file on the root's disk that was written whole once (as a journal
//!    segment is), then `fdatasync`. What it adds to the plain loop is what the promises cost on
//!    this disk, whoever keeps them: a target of 2x leaves a supervisor one plain loop's time
//!    for everything it adds, so in a round where the syncs alone add more, no supervisor
//!    keeping those promises meets the target unless it spawns and waits for `true` faster than
//!    tokio. On a shared virtual disk a sync's cost changes from one moment to the next, so the
//!    report gives it round by round. And both daemons again under `Durability::Os` (no
//!    `fdatasync`): their difference is what the guardians add (their processes, cgroups and
//!    receipts) whatever the disk does, against the quarter of a plain loop that the serve
//!    target leaves them beyond the plain daemon's 2x.
//! 4. Start to running, both daemons: each `start` of 1 and 3 timed from the request to its
//!    answer, which comes once `running` is acknowledged; the p50 of a round's 200, beside a
//!    whole plain command (the plain loop's time over its commands: spawn, exec and exit of
//!    `true`, and the wait; `spawn()` alone returns before the exec, at about 0.05 ms here).
//!    Target: 0.7x s6's start as the issue measured it against its plain spawn (6.97 ms against
//!    1.99 ms): at most 2.45x the plain command.
//!
//! Nothing here asserts on time; the only checks are of correctness (every command `exited 0`).
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use common::{
    Res, Row, Samples, Target, bench_dir, plan, print_file_system, print_round, print_rows,
    print_total_time, shell_loop_ms,
};
use procjournal::Durability;
use procjournal::client::Client;
use procjournal::protocol::Request;
use procjournal::server::Server;
use procjournal::supervisor::{Supervisor, SupervisorConfig};
use procjournal::tree::cgroup::CgroupBase;
use procjournal::tree::{GroupLauncher, GuardianLauncher, GuardianProgram, Launcher};

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    commands: usize,
    clients: usize,
}

const FULL: Plan = Plan {
    rounds: 3,
    commands: 200,
    clients: 8,
};

const QUICK: Plan = Plan {
    rounds: 1,
    commands: 40,
    clients: 4,
};

struct Daemon {
    socket: PathBuf,
    supervisor: Supervisor,
    thread: std::thread::JoinHandle<Res<()>>,
}

/// Binds a `Server` on `root` and runs it on its own runtime thread (2 workers, like `serve`).
fn start_daemon(root: &Path, durability: Durability, launcher: Arc<dyn Launcher>) -> Res<Daemon> {
    let (tx, rx) = std::sync::mpsc::channel::<Res<Supervisor>>();
    let root = root.to_owned();
    let socket = root.join("procjournal.sock");
    let thread = std::thread::Builder::new()
        .name("daemon".into())
        .spawn(move || -> Res<()> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let mut config = SupervisorConfig::new(&root);
                config.durability = durability;
                config.launcher = launcher;
                // Supervision is measured, not admission: on a 2-core machine the automatic
                // policy admits two workloads, and the 8 clients' starts would be refused.
                config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
                    procjournal::limits::LIVE_PROCESSES_DEFAULT,
                );
                match Server::bind(config, None).await {
                    Ok((server, _)) => {
                        let _ = tx.send(Ok(server.supervisor().clone()));
                        server.run().await?;
                        Ok(())
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("bind: {e}").into()));
                        Err(e.into())
                    }
                }
            })
        })?;
    let supervisor = rx.recv().map_err(|_| "the daemon thread ended early")??;
    Ok(Daemon {
        socket,
        supervisor,
        thread,
    })
}

/// `n` commands, each started and waited for before the next, over one connection; the
/// milliseconds of each `start`.
fn through_daemon(socket: &Path, cwd: &str, n: usize) -> Res<Vec<f64>> {
    let mut client = Client::connect(socket)?;
    (0..n)
        .map(|_| common::start_and_wait_true(&mut client, cwd))
        .collect()
}

/// Milliseconds for `commands` through the daemon, by `clients` clients at once, and the p50
/// of the starts' milliseconds.
fn daemon_ms(socket: &Path, cwd: &str, commands: usize, clients: usize) -> Res<(f64, f64)> {
    let t = Instant::now();
    let mut starts = std::thread::scope(|s| -> Res<Vec<f64>> {
        let workers: Vec<_> = (0..clients)
            .map(|_| s.spawn(|| through_daemon(socket, cwd, commands / clients)))
            .collect();
        let mut starts = Vec::with_capacity(commands);
        for w in workers {
            starts.extend(w.join().map_err(|_| "client thread panicked")??);
        }
        Ok(starts)
    })?;
    let elapsed = t.elapsed().as_secs_f64() * 1e3;
    Ok((elapsed, common::quantile(&mut starts, 0.5)))
}

/// Milliseconds for `commands` plain tokio spawn + wait of `true`, in `loops` concurrent loops.
fn plain_ms(rt: &tokio::runtime::Runtime, commands: usize, loops: usize) -> Res<f64> {
    rt.block_on(async {
        let t = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..loops {
            let n = commands / loops;
            set.spawn(async move {
                for _ in 0..n {
                    let status = tokio::process::Command::new("true").spawn()?.wait().await?;
                    if !status.success() {
                        return Err(std::io::Error::other(format!("true: {status}")));
                    }
                }
                Ok(())
            });
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3)
    })
}

/// Milliseconds for `commands` plain tokio spawn + wait of `true`, each between two durable
/// records as the journal writes one ([`common::SyncedRecords`]).
fn synced_plain_ms(
    rt: &tokio::runtime::Runtime,
    file: &common::SyncedRecords,
    commands: usize,
) -> Res<f64> {
    rt.block_on(async {
        let t = Instant::now();
        for _ in 0..commands {
            file.record()?;
            let status = tokio::process::Command::new("true").spawn()?.wait().await?;
            if !status.success() {
                return Err(format!("true: {status}").into());
            }
            file.record()?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3)
    })
}

/// The launcher `serve` uses: a guardian, the small binary, forked by a zygote, in a
/// per-launch cgroup where the machine allows one; and its name. `PROCJOURNAL_BENCH_ZYGOTE=0`
/// exec's each guardian instead, for a comparison.
fn serve_launcher(tag: &str) -> Res<(Arc<dyn Launcher>, &'static str)> {
    let zygote = std::env::var("PROCJOURNAL_BENCH_ZYGOTE").map_or(true, |v| v != "0");
    if !zygote {
        println!("PROCJOURNAL_BENCH_ZYGOTE=0: the serve-like daemon exec's each guardian");
    }
    let guardian = GuardianLauncher::new(GuardianProgram::Path(
        env!("CARGO_BIN_EXE_procjournal-guardian").into(),
    ))?
    .with_zygote(zygote);
    Ok(
        match CgroupBase::probe(&format!("procjournal-bench-{tag}-{}", std::process::id())) {
            Ok(base) => (
                Arc::new(guardian.with_cgroups(Some(base))),
                "guardian+cgroup",
            ),
            Err(e) => {
                println!("no per-launch cgroup ({e}): the serve-like daemon uses guardians only");
                (Arc::new(guardian), "guardian")
            }
        },
    )
}

/// Every figure of the bench over the rounds.
#[derive(Debug, Default)]
struct Figures {
    seq: Samples,
    seq_base: Samples,
    par: Samples,
    par_base: Samples,
    os: Samples,
    serve: Samples,
    serve_os: Samples,
    start_group: Samples,
    start_serve: Samples,
    spawn: Samples,
    shell: Samples,
    synced: Samples,
}

/// The daemons the bench drives: the library's default launcher (process groups) under
/// `Group` and `Os` durability, and the launcher `serve` uses.
struct Daemons {
    group: Daemon,
    os: Daemon,
    serve: Daemon,
    /// `serve`'s launcher under `Os` durability: what the guardians cost, whatever the disk.
    serve_os: Daemon,
    /// [`synced_plain_ms`]'s file, beside the roots.
    synced: common::SyncedRecords,
}

impl Daemons {
    fn start(dir: &Path, serve: Arc<dyn Launcher>, serve_os: Arc<dyn Launcher>) -> Res<Daemons> {
        let root = |name: &str| -> Res<PathBuf> {
            let root = dir.join(name);
            std::fs::create_dir_all(&root)?;
            Ok(root)
        };
        Ok(Daemons {
            group: start_daemon(&root("rt")?, Durability::Group, Arc::new(GroupLauncher))?,
            // Diagnostic: without fdatasync, to show what a command's durable records cost.
            os: start_daemon(&root("rt-os")?, Durability::Os, Arc::new(GroupLauncher))?,
            serve: start_daemon(&root("rt-serve")?, Durability::Group, serve)?,
            serve_os: start_daemon(&root("rt-serve-os")?, Durability::Os, serve_os)?,
            synced: common::SyncedRecords::create(dir, "synced-loop")?,
        })
    }

    /// A shutdown request ends each server's loop, as it would end `serve`.
    fn stop(self) -> Res<()> {
        for daemon in [self.group, self.os, self.serve, self.serve_os] {
            Client::connect(&daemon.socket)?.call(&Request::Shutdown { grace_ms: 2000 })?;
            drop(daemon.supervisor);
            match daemon.thread.join() {
                Ok(r) => r?,
                Err(_) => return Err("the daemon thread panicked".into()),
            }
        }
        Ok(())
    }
}

/// One round: every figure once, the daemon and the plain loops in alternating order.
fn round(
    d: &Daemons,
    rt: &tokio::runtime::Runtime,
    cwd: &str,
    plan: Plan,
    i: usize,
    f: &mut Figures,
) -> Res<()> {
    let seq = |f: &mut Figures| -> Res<()> {
        let (ms, start) = daemon_ms(&d.group.socket, cwd, plan.commands, 1)?;
        f.seq.push(ms);
        f.start_group.push(start);
        let (ms, start) = daemon_ms(&d.serve.socket, cwd, plan.commands, 1)?;
        f.serve.push(ms);
        f.start_serve.push(start);
        Ok(())
    };
    let plain = |f: &mut Figures| -> Res<()> {
        let ms = plain_ms(rt, plan.commands, 1)?;
        f.seq_base.push(ms);
        f.spawn.push(ms / plan.commands as f64);
        f.par_base.push(plain_ms(rt, plan.commands, plan.clients)?);
        f.shell.push(shell_loop_ms(plan.commands)?);
        f.synced
            .push(synced_plain_ms(rt, &d.synced, plan.commands)?);
        Ok(())
    };
    if i.is_multiple_of(2) {
        seq(f)?;
        plain(f)?;
    } else {
        plain(f)?;
        seq(f)?;
    }
    f.par
        .push(daemon_ms(&d.group.socket, cwd, plan.commands, plan.clients)?.0);
    f.os.push(daemon_ms(&d.os.socket, cwd, plan.commands, 1)?.0);
    f.serve_os
        .push(daemon_ms(&d.serve_os.socket, cwd, plan.commands, 1)?.0);
    println!(
        "  {} commands: daemon {:.0} ms, as serve {:.0} ms, plain {:.0} ms; {} at once: daemon \
         {:.0} ms, plain {:.0} ms; start p50 {:.2} / {:.2} ms, a plain command {:.2} ms; \
         shell loop {:.0} ms; plain with two syncs each {:.0} ms; without syncs: daemon {:.0} \
         ms, as serve {:.0} ms",
        plan.commands,
        f.seq.0[i],
        f.serve.0[i],
        f.seq_base.0[i],
        plan.clients,
        f.par.0[i],
        f.par_base.0[i],
        f.start_group.0[i],
        f.start_serve.0[i],
        f.spawn.0[i],
        f.shell.0[i],
        f.synced.0[i],
        f.os.0[i],
        f.serve_os.0[i],
    );
    Ok(())
}

fn report(f: &Figures, plan: Plan, serve_name: &str) {
    let seq_name = format!("{} commands through the daemon, ms", plan.commands);
    let serve_name = format!("  the same as serve launches ({serve_name}), ms");
    let par_name = format!("the same by {} clients at once, ms", plan.clients);
    let os_name = "  diagnostic: the same, Durability::Os (no fdatasync), ms".to_owned();
    let serve_os_name = "  diagnostic: as serve, Durability::Os, ms".to_owned();
    let base_name = "plain tokio spawn+wait loop, ms".to_owned();
    let par_base_name = format!("{} plain loops at once, ms", plan.clients);
    let spawn_name = "a plain spawn+wait of true, ms".to_owned();
    let shell_name = format!("shell loop of {} x true, ms", plan.commands);
    let synced_name = "  the plain loop with the two syncs each command owes, ms".to_owned();
    let row = |figure, samples, baseline, base, target| Row {
        figure,
        samples,
        baseline,
        base,
        target,
    };
    print_rows(&[
        row(
            &seq_name,
            &f.seq,
            &base_name,
            &f.seq_base,
            Target::MaxRatio(2.0),
        ),
        row(
            &serve_name,
            &f.serve,
            &base_name,
            &f.seq_base,
            Target::MaxRatio(2.25),
        ),
        row(
            "  the same, beside the issue's baseline, ms",
            &f.serve,
            &shell_name,
            &f.shell,
            Target::MaxRatio(2.25),
        ),
        row(&os_name, &f.os, &base_name, &f.seq_base, Target::None),
        row(
            &serve_os_name,
            &f.serve_os,
            &base_name,
            &f.seq_base,
            Target::None,
        ),
        row(
            &synced_name,
            &f.synced,
            &base_name,
            &f.seq_base,
            Target::None,
        ),
        row(&par_name, &f.par, &par_base_name, &f.par_base, Target::None),
        row(
            "start to running acknowledged, p50, ms",
            &f.start_group,
            &spawn_name,
            &f.spawn,
            Target::MaxRatio(2.45),
        ),
        row(
            "  the same as serve launches, p50, ms",
            &f.start_serve,
            &spawn_name,
            &f.spawn,
            Target::MaxRatio(2.45),
        ),
    ]);
    print_sync_cost(f);
    print_guardian_cost(f, plan);
    println!(
        "for scale (measured by the issue, not here): s6 667 ms against a 296 ms shell loop \
         (2.25x); s6's start 6.97 ms against a 1.99 ms spawn"
    );
}

/// What the two syncs alone added to the plain loop, round by round, against what the 2x and
/// 2.25x targets leave a supervisor (one plain loop, and a quarter more). This disk's flushes
/// change cost from one moment to the next, so each round is judged by itself.
fn print_sync_cost(f: &Figures) {
    let added: Vec<f64> = f
        .synced
        .0
        .iter()
        .zip(&f.seq_base.0)
        .map(|(synced, plain)| synced / plain - 1.0)
        .collect();
    let over = |allowed: f64| added.iter().filter(|&&a| a > allowed).count();
    let per_round: Vec<String> = added.iter().map(|a| format!("{a:.2}")).collect();
    println!(
        "the two syncs alone added [{}]x the plain loop, round by round; the 2x target leaves a \
         supervisor 1x and the 2.25x target 1.25x. The syncs alone exceed the first in {} of \
         {} rounds and the second in {}; in such a round no supervisor keeping the sync table \
         meets the target (unless it spawns and waits faster than the baseline). A sync's cost \
         changes from one moment to the next on this shared disk, so a daemon's round may have \
         caught a cheaper moment.",
        per_round.join(", "),
        over(1.0),
        added.len(),
        over(1.25),
    );
}

/// What the guardians add with no sync in the way (both daemons under `Os` durability), per
/// round, against what the serve target leaves them beyond the plain daemon's: 0.25 plain loops.
fn print_guardian_cost(f: &Figures, plan: Plan) {
    let added: Vec<String> = f
        .serve_os
        .0
        .iter()
        .zip(&f.os.0)
        .zip(&f.seq_base.0)
        .map(|((serve, os), plain)| format!("{:.2}", (serve - os) / plain))
        .collect();
    let per_command = (f.serve_os.median() - f.os.median()) / plan.commands as f64;
    println!(
        "without syncs, the guardians (their processes, cgroups and receipts) added [{}]x the \
         plain loop to the plain daemon, round by round, about {:.0} us a command; the serve \
         target allows 0.25x beyond the daemon's 2x.",
        added.join(", "),
        per_command * 1000.0,
    );
}

fn main() -> Res<()> {
    let all = Instant::now();
    let plan = plan(FULL, QUICK);
    let dir = tempfile::Builder::new()
        .prefix("bench-daemon-")
        .tempdir_in(bench_dir()?)?;
    print_file_system(
        dir.path(),
        "runtime root",
        "on tmpfs the journal's fdatasyncs cost nothing",
    );
    let cwd = dir.path().to_str().ok_or("non-UTF-8 temp dir")?.to_owned();
    let (serve, serve_name) = serve_launcher("daemon")?;
    let (serve_os, _) = serve_launcher("daemon-os")?;
    let daemons = Daemons::start(dir.path(), serve, serve_os)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // Untimed warm-up of all: the daemons' journal segments and spares, the binaries' pages.
    for d in [
        &daemons.group,
        &daemons.os,
        &daemons.serve,
        &daemons.serve_os,
    ] {
        through_daemon(&d.socket, &cwd, 20)?;
    }
    plain_ms(&rt, 20, 1)?;
    let mut figures = Figures::default();
    for i in 0..plan.rounds {
        print_round(i, plan.rounds);
        round(&daemons, &rt, &cwd, plan, i, &mut figures)?;
    }
    report(&figures, plan, serve_name);
    let stats = rt.block_on(daemons.group.supervisor.stats())?;
    println!("supervisor after the runs: {stats:?}");
    daemons.stop()?;
    print_total_time(all);
    Ok(())
}
