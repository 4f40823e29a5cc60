//! An admission decision beside a start: the decision must not show in start latency.
//!
//! Run with `cargo bench --bench admission`. What is measured, each round:
//! 1. One admission step as a start takes it: `Admission::decide` then `admit`, and the
//!    `release` at its end, on a policy already holding `held` workloads with stable samples
//!    (0, 16 and 255: up to the default live bound), timed over many steps; ns per step.
//! 2. The host's telemetry as the sampler reads it once a second (`ProcTelemetry::host`:
//!    /proc/meminfo and our memory cgroups' limits), µs per read; off the start path (the
//!    blocking pool), shown for scale.
//! 3. Baselines in the same round: `Supervisor::start` of `true` plus its `wait`, and a plain
//!    `std::process::Command::new("true").status()` (spawn + wait), median of `runs` each,
//!    alternated so that load from other work hits both alike.
//!
//! The summary gives each figure's median over the rounds [min-max] and its ratio to the start
//! (decision time / start time: the share of a start's latency the decision costs). Target: the
//! decision below 0.1 % of a start. Nothing here asserts on time. Roots live under
//! `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir. `PROCJOURNAL_BENCH_QUICK=1` runs one
//! short round, for checking the harness only.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

#[path = "common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{Res, Row, Samples, Target};
use procjournal::Durability;
use procjournal::admission::{Admission, AdmissionConfig, HostSample, ProcTelemetry, Telemetry};
use procjournal::journal::EventId;
use procjournal::lifecycle::Handle;
use procjournal::supervisor::{Command, Services, Supervisor, SupervisorConfig};
use procjournal::tree::TreeSample;

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    /// Decision steps timed per round and size.
    steps: usize,
    /// Starts (and plain spawns) per round.
    runs: usize,
}

const FULL: Plan = Plan {
    rounds: 5,
    steps: 200_000,
    runs: 30,
};

const QUICK: Plan = Plan {
    rounds: 1,
    steps: 1_000,
    runs: 3,
};

const HELD: [usize; 3] = [0, 16, 255];

fn handle(n: u64) -> Handle {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    bytes[15] = 0xad;
    Handle(EventId::from_bytes(bytes))
}

/// A policy holding `held` workloads, each with two stable samples.
fn policy(held: usize) -> Admission {
    let host = HostSample {
        cores: Some(1024),
        available_bytes: Some(1 << 50),
    };
    let mut a = Admission::new(AdmissionConfig::default(), 1024, host);
    for i in 0..held as u64 {
        a.admit(handle(i));
        let sample = TreeSample {
            members: vec![(u32::try_from(i).unwrap_or(0) + 100, 7)],
            bytes: 3 << 30,
            complete: true,
            ..TreeSample::default()
        };
        a.observe(&handle(i), sample.clone());
        a.observe(&handle(i), sample);
    }
    a
}

/// ns per decide + admit + release on `a`.
fn decision_ns(a: &mut Admission, steps: usize) -> f64 {
    let extra = handle(u64::MAX);
    let t = Instant::now();
    for _ in 0..steps {
        let d = a.decide();
        if black_box(d.admit) {
            a.admit(extra);
        }
        black_box(a.release(&extra));
    }
    t.elapsed().as_nanos() as f64 / steps as f64
}

fn host_read_us(reads: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..reads {
        black_box(ProcTelemetry.host());
    }
    t.elapsed().as_nanos() as f64 / reads as f64 / 1e3
}

async fn start_and_wait(sup: &Supervisor, cwd: &std::path::Path) -> Res<Duration> {
    let t = Instant::now();
    let prepared = sup.prepare(Command::new("true").cwd(cwd))?;
    let handle = sup.start(prepared).await?;
    let end = sup.wait(&handle, None).await?;
    let took = t.elapsed();
    if end.exit != procjournal::lifecycle::event::ExitStatus::Code(0) {
        return Err(format!("true ended {end:?}").into());
    }
    Ok(took)
}

fn spawn_and_wait() -> Res<Duration> {
    let t = Instant::now();
    let status = std::process::Command::new("true").status()?;
    let took = t.elapsed();
    if !status.success() {
        return Err("true failed".into());
    }
    Ok(took)
}

fn median(mut v: Vec<f64>) -> f64 {
    common::quantile(&mut v, 0.5)
}

fn main() -> Res<()> {
    let plan = common::plan(FULL, QUICK);
    let base = common::bench_dir()?;
    common::print_file_system(&base, "roots", "makes the journal's syncs free");
    println!(
        "{} rounds; {} decision steps per size; {} starts and spawns per round; {} available CPUs",
        plan.rounds,
        plan.steps,
        plan.runs,
        common::available_cpus()
    );
    let all = Instant::now();
    let dir = tempfile::tempdir_in(&base)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut config = SupervisorConfig::new(dir.path().join("root"));
    config.durability = Durability::Os;
    // The automatic policy with the real telemetry: what a start pays by default.
    let sup = rt.block_on(Supervisor::open(config, Services::noop()))?.0;

    let mut decisions: Vec<Samples> = HELD.iter().map(|_| Samples::default()).collect();
    let mut host = Samples::default();
    let mut starts = Samples::default();
    let mut spawns = Samples::default();
    for round in 0..plan.rounds {
        common::print_round(round, plan.rounds);
        for (i, held) in HELD.iter().enumerate() {
            let mut a = policy(*held);
            decisions[i].push(decision_ns(&mut a, plan.steps));
        }
        host.push(host_read_us(plan.steps.min(2_000)) * 1e3);
        let (mut s, mut p) = (Vec::new(), Vec::new());
        for run in 0..plan.runs {
            // Alternate which goes first.
            if run % 2 == 0 {
                s.push(rt.block_on(start_and_wait(&sup, dir.path()))?.as_nanos() as f64);
                p.push(spawn_and_wait()?.as_nanos() as f64);
            } else {
                p.push(spawn_and_wait()?.as_nanos() as f64);
                s.push(rt.block_on(start_and_wait(&sup, dir.path()))?.as_nanos() as f64);
            }
        }
        starts.push(median(s));
        spawns.push(median(p));
    }
    rt.block_on(sup.shutdown(Duration::from_millis(100)));

    println!();
    println!("times in ns; ratio: figure / `Supervisor::start` of `true` + wait");
    let names: Vec<String> = HELD
        .iter()
        .map(|h| format!("decide+admit+release, {h} held"))
        .collect();
    let mut rows: Vec<Row> = names
        .iter()
        .zip(&decisions)
        .map(|(name, samples)| Row {
            figure: name,
            samples,
            baseline: "start+wait of true",
            base: &starts,
            target: Target::MaxRatio(0.001),
        })
        .collect();
    rows.push(Row {
        figure: "host telemetry read (sampler, off the start path)",
        samples: &host,
        baseline: "start+wait of true",
        base: &starts,
        target: Target::None,
    });
    rows.push(Row {
        figure: "start+wait of true",
        samples: &starts,
        baseline: "plain spawn+wait of true",
        base: &spawns,
        target: Target::None,
    });
    common::print_rows(&rows);
    for (held, samples) in HELD.iter().zip(&decisions) {
        println!(
            "decision with {held} held: {:.4} % of a start's latency (median over median)",
            100.0 * samples.median() / starts.median()
        );
    }
    common::print_total_time(all);
    Ok(())
}
