//! The deadline sweep: its decision over 10 000 live processes, and a real run of
//! deadlines firing on as many live `sleep`s as the bench asks for, each figure beside a baseline
//! measured in the same run.
//!
//! Run with `cargo bench --bench deadline` (`PROCJOURNAL_BENCH_QUICK=1`: one short round, to
//! check the harness; `PROCJOURNAL_BENCH_ONLY=decision|real`: one part). Rounds are interleaved:
//! each measures every figure and its baseline once, in alternating order.
//!
//! What is measured:
//! 1. The decision (`decision`): one sweep, `supervisor::deadline::sweep`, over 10 000 started
//!    processes' clocks held as the actor holds them (an `Arc` each, in a `HashMap` by handle:
//!    the walk's cache misses are the actor's), every one with an idle limit (a quarter with a
//!    wall-clock limit too, an eighth marked as waiting for human input), none due: the sweep
//!    reads every clock and computes the earliest next deadline, the actor's whole work per
//!    sweep when nothing fires. Median of 200 sweeps a round, per sweep. Baselines: a walk of the
//!    same map that only counts its entries (what iterating the table costs at all), and the
//!    minimum of a `Vec<u64>` of 10 000 (a contiguous array). Target: a sweep of 10 000 under
//!    1 ms (the actor sweeps at most 10 times a second, `DEADLINE_SWEEP_MIN_MS`).
//! 2. A real run (`real`): N live `sleep 600` (N = 1000; each holds its descriptors, so N is
//!    bounded by the descriptor budget) under one supervisor with an idle limit of 3 s each, all
//!    of which fire. From the journal: per process, `fired - due` (the sweep's lateness: due is
//!    its start + 3 s) and `terminal - fired` (the stop: SIGTERM and the exit proven).
//!    Baseline, same supervisor, same round: N `sleep 600` without limits stopped by N
//!    concurrent `stop` calls, per process `terminal - call`. Printed: p50 and p99 of each, and
//!    the worst per process of `terminal - due` (the sweep's lateness and the stop together)
//!    beside the worst `terminal - call`. Milliseconds, from the journal's Unix-ms timestamps.
//!    The deadlines fall due over the seconds the n starts take, so they fire in many small
//!    sweeps rather than in one burst.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

mod common;

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Res, Row, Samples, Target, plan, print_cells, print_round, print_rows, quantile};
use procjournal::lifecycle::event::Limits;
use procjournal::lifecycle::{Handle, Manifest};
use procjournal::supervisor::deadline::{Clocks, sweep};
use procjournal::supervisor::{Command, Services, Supervisor, SupervisorConfig};

const ENTRIES: usize = 10_000;
const SWEEPS: usize = 200;
const IDLE_MS: u64 = 3_000;

fn clocks_map(now: tokio::time::Instant) -> HashMap<u128, Arc<Clocks>> {
    (0..ENTRIES)
        .map(|i| {
            let c = Clocks::new(&Limits {
                wall_clock_ms: (i % 4 == 0).then_some(3_600_000),
                idle_ms: Some(600_000 + i as u64),
                output_retention_bytes: None,
            });
            c.start(now, 0);
            if i % 8 == 0 {
                c.set_awaiting(true);
            }
            // A spread of handles, as v7 IDs are.
            (
                (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835),
                Arc::new(c),
            )
        })
        .collect()
}

/// Nanoseconds per call of `f`, the median of `reps` calls.
fn per_call(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64
        })
        .collect();
    quantile(&mut v, 0.5)
}

#[derive(Default)]
struct Decision {
    sweep: Samples,
    walk: Samples,
    vec: Samples,
}

fn decision_round(i: usize, r: &mut Decision) {
    let now = tokio::time::Instant::now();
    let map = clocks_map(now);
    let plain: Vec<u64> = (0..ENTRIES as u64).map(|i| i.wrapping_mul(7919)).collect();
    let at = now + Duration::from_millis(1);
    let measure_sweep = || {
        per_call(SWEEPS, || {
            let next = sweep(at, map.values().map(|c| (&**c, ())), |(), _| {
                panic!("nothing is due")
            });
            black_box(next);
        })
    };
    let measure_walk = || {
        per_call(SWEEPS, || {
            black_box(map.values().filter(|c| black_box(c).limited()).count());
        })
    };
    let measure_vec = || {
        per_call(SWEEPS, || {
            black_box(black_box(&plain).iter().min());
        })
    };
    if i.is_multiple_of(2) {
        r.sweep.push(measure_sweep());
        r.walk.push(measure_walk());
        r.vec.push(measure_vec());
    } else {
        r.vec.push(measure_vec());
        r.walk.push(measure_walk());
        r.sweep.push(measure_sweep());
    }
}

fn print_decision(r: &Decision) {
    println!(
        "\n1. The sweep's decision over {ENTRIES} live processes (ns per sweep, median of \
         {SWEEPS}; none due)"
    );
    print_rows(&[
        Row {
            figure: "sweep of 10 000 clocks",
            samples: &r.sweep,
            baseline: "walk of the same map",
            base: &r.walk,
            target: Target::BelowAbs(1_000_000.0),
        },
        Row {
            figure: "sweep of 10 000 clocks",
            samples: &r.sweep,
            baseline: "min of a Vec<u64> of 10 000",
            base: &r.vec,
            target: Target::None,
        },
    ]);
    println!(
        "per process: {:.1} ns (sweep), {:.1} ns (walk), {:.2} ns (Vec)",
        r.sweep.median() / ENTRIES as f64,
        r.walk.median() / ENTRIES as f64,
        r.vec.median() / ENTRIES as f64
    );
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Default)]
struct Real {
    late_p50: Samples,
    late_p99: Samples,
    fired_stop_p50: Samples,
    fired_stop_p99: Samples,
    client_stop_p50: Samples,
    client_stop_p99: Samples,
    deadline_span: Samples,
    client_span: Samples,
}

async fn start_sleeps(sup: &Supervisor, root: &Path, n: usize, idle: bool) -> Res<Vec<Handle>> {
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        let mut command = Command::new("sleep").arg("600").cwd(root);
        if idle {
            command = command.idle_timeout(Duration::from_millis(IDLE_MS));
        }
        let prepared = sup.prepare(command)?;
        handles.push(sup.start(prepared).await.map_err(|e| e.to_string())?);
    }
    Ok(handles)
}

fn q(v: &mut [f64], p: f64) -> f64 {
    quantile(v, p)
}

async fn real_round(n: usize, base: &Path, r: &mut Real) -> Res<()> {
    let dir = tempfile::Builder::new()
        .prefix("deadline-bench-")
        .tempdir_in(base)?;
    let mut config = SupervisorConfig::new(dir.path().join("rt"));
    config.max_live = 2 * n + 16;
    // Every sleep at once: an explicit limit, not this machine's automatic share.
    config.admission = procjournal::admission::AdmissionConfig::max_concurrent(2 * n + 16);
    let (sup, _) = Supervisor::open(config, Services::noop()).await?;
    let cwd = dir.path().to_owned();

    // Baseline: n processes without limits, stopped by n concurrent client stops.
    let plain = start_sleeps(&sup, &cwd, n, false).await?;
    let called = unix_ms();
    let stops: Vec<_> = plain
        .iter()
        .map(|h| {
            let (sup, h) = (sup.clone(), *h);
            tokio::spawn(async move { sup.stop(&h, Duration::from_secs(5)).await })
        })
        .collect();
    for s in stops {
        s.await?.map_err(|e| e.to_string())?;
    }
    let mut client: Vec<f64> = plain
        .iter()
        .filter_map(|h| sup.manifest(h))
        .filter_map(|m| {
            m.terminal
                .map(|t| t.at_unix_ms.saturating_sub(called) as f64)
        })
        .collect();
    r.client_span
        .push(client.iter().copied().fold(0.0, f64::max));
    r.client_stop_p50.push(q(&mut client, 0.5));
    r.client_stop_p99.push(q(&mut client, 0.99));

    // Deadlines: n processes with an idle limit, all of which fire.
    let idle = start_sleeps(&sup, &cwd, n, true).await?;
    let mut ended: Vec<Manifest> = Vec::with_capacity(n);
    for h in &idle {
        sup.wait(h, Some(Duration::from_secs(120)))
            .await
            .map_err(|e| e.to_string())?;
        ended.push(sup.manifest(h).ok_or("no manifest")?);
    }
    let mut late = Vec::new();
    let mut fired_stop = Vec::new();
    let mut worst = 0u64;
    for m in &ended {
        let d = m.deadline.as_ref().ok_or("a deadline did not fire")?;
        let due = d.clock_from_unix_ms + d.limit_ms;
        let end = m.terminal.as_ref().ok_or("not terminal")?.at_unix_ms;
        late.push(d.at_unix_ms.saturating_sub(due) as f64);
        fired_stop.push(end.saturating_sub(d.at_unix_ms) as f64);
        worst = worst.max(end.saturating_sub(due));
    }
    r.late_p50.push(q(&mut late, 0.5));
    r.late_p99.push(q(&mut late, 0.99));
    r.fired_stop_p50.push(q(&mut fired_stop, 0.5));
    r.fired_stop_p99.push(q(&mut fired_stop, 0.99));
    r.deadline_span.push(worst as f64);
    sup.shutdown(Duration::from_secs(1)).await;
    Ok(())
}

fn print_real(n: usize, r: &Real) {
    println!(
        "\n2. A real run: {n} live `sleep 600` with an idle limit of {IDLE_MS} ms each, all \
         firing, beside {n} stopped by concurrent client `stop` calls (ms, from the journal)"
    );
    print_rows(&[
        Row {
            figure: "deadline: fired -> terminal, p50",
            samples: &r.fired_stop_p50,
            baseline: "client stop: call -> terminal, p50",
            base: &r.client_stop_p50,
            target: Target::None,
        },
        Row {
            figure: "deadline: fired -> terminal, p99",
            samples: &r.fired_stop_p99,
            baseline: "client stop: call -> terminal, p99",
            base: &r.client_stop_p99,
            target: Target::None,
        },
        Row {
            figure: "deadline: due -> terminal, worst",
            samples: &r.deadline_span,
            baseline: "client stop: call -> terminal, worst",
            base: &r.client_span,
            target: Target::None,
        },
    ]);
    print_cells(
        [
            "sweep lateness (fired - due), ms",
            "median [min-max] over rounds",
        ],
        &[
            ["p50".to_owned(), common::fmt_samples(&r.late_p50)],
            ["p99".to_owned(), common::fmt_samples(&r.late_p99)],
        ],
    );
}

fn main() -> Res<()> {
    let all = Instant::now();
    let rounds = plan(3, 1);
    let n = plan(1000, 50);
    let only = std::env::var("PROCJOURNAL_BENCH_ONLY").ok();
    let runs = |part: &str| only.as_deref().is_none_or(|o| o == part);
    let base = common::bench_dir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (mut decision, mut real) = (Decision::default(), Real::default());
    for i in 0..rounds {
        print_round(i, rounds);
        if runs("decision") {
            // The clocks' instants are tokio's, which need a runtime's clock.
            rt.block_on(async { decision_round(i, &mut decision) });
        }
        if runs("real") {
            rt.block_on(real_round(n, &base, &mut real))?;
        }
    }
    if runs("decision") {
        print_decision(&decision);
    }
    if runs("real") {
        print_real(n, &real);
    }
    common::print_total_time(all);
    Ok(())
}
