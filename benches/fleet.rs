//! The fleet's shipping, beside a plain async-nats publisher in the same run, against a real
//! nats-server (`PROCJOURNAL_NATS_SERVER`, as the tests use; without it the bench says so and
//! measures nothing).
//!
//! Run with `cargo bench --bench fleet`. Each round, on a fresh server (JetStream in a temp dir):
//! - catch-up: a journal of `records` records of the lifecycle workload (finished processes,
//!   12 records each) is written while the server is down; the shipper (`Fleet::start`, the
//!   journal's records) is started, then the server; the figure is the time from the server
//!   listening to the stream holding every record: what a node that was cut off pays to catch up;
//! - baseline: an async-nats publisher sends the same messages (the same headers but the chain,
//!   the same payloads) to a fresh stream, in a window of the same size, and waits for every ack;
//! - append latency: 2 000 acknowledged appends (`Lifecycle::append`, each made durable) to a
//!   fresh node: one that ships nothing, one shipping to the server while it is up, and one
//!   while it is stopped (SIGSTOP): p99 of each, and their ratios.
//!
//! The report gives the medians over rounds: shipping's throughput as a ratio of the
//! publisher's (goal at least 0.7), the catch-up time (goal under 60 s for 1 000 000 records),
//! and the p99 ratio down/up (goal at most 1.1). Nothing asserts on time; each run checks that
//! the stream holds every record. `PROCJOURNAL_BENCH_QUICK=1` runs one round of 20 000 records.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream;
use procjournal::lifecycle::{Lifecycle, workload};
use procjournal::{Durability, Fleet, FleetConfig, JournalOptions, NodeName};

use common::{Res, Row, Samples, Target, bench_dir, plan, print_rows, print_total_time};

#[derive(Clone, Copy)]
struct Plan {
    rounds: usize,
    records: u64,
    appends: usize,
}

const FULL: Plan = Plan {
    rounds: 3,
    records: 1_000_000,
    appends: 2000,
};
const QUICK: Plan = Plan {
    rounds: 1,
    records: 20_000,
    appends: 300,
};

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(binary: &Path, dir: &Path) -> Res<Server> {
        std::fs::create_dir_all(dir)?;
        let child = Command::new(binary)
            .args(["-a", "127.0.0.1", "-p", "-1", "-js", "-sd"])
            .arg(dir.join("store"))
            .arg("--ports_file_dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let file = dir.join(format!("nats-server_{}.ports", child.id()));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
                && let Some(url) = v["nats"][0].as_str()
            {
                let port = url.rsplit(':').next().ok_or("no port")?.parse()?;
                while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Ok(Server { child, port });
            }
            if Instant::now() > deadline {
                return Err("nats-server wrote no ports file".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn signal(&self, signal: &str) -> Res<()> {
        Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()?;
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn journal(root: &Path, records: u64) -> Res<Lifecycle> {
    let options = JournalOptions {
        durability: Durability::Os,
        ..JournalOptions::default()
    };
    let (mut lc, _, _) = Lifecycle::open(root, options)?;
    for n in 0..records {
        let (id, event) = workload::event(n);
        lc.append(id, &event)?;
    }
    lc.journal().sync()?;
    Ok(lc)
}

/// Catch-up: the server starts after the shipper; seconds until the stream holds every record.
fn catch_up(binary: &Path, dir: &Path, root: &Path, records: u64) -> Res<(f64, Server)> {
    let lc = journal(root, records)?;
    let rt = tokio::runtime::Runtime::new()?;
    let _guard = rt.enter();
    // A port that no server listens on yet: the shipper retries until one does.
    let probe = Server::start(binary, &dir.join("probe"))?;
    let port = probe.port;
    drop(probe);
    let url = format!("nats://127.0.0.1:{port}");
    let fleet = Fleet::start(
        FleetConfig::new(&url, NodeName::new("bench")?),
        root.to_owned(),
        lc.journal_arc(),
    );
    std::thread::sleep(Duration::from_millis(300));
    let server = Server::start_on(binary, dir, port)?;
    let t0 = Instant::now();
    while fleet.status().shipped_seq < records {
        if t0.elapsed() > Duration::from_secs(600) {
            return Err(format!("not caught up: {:?}", fleet.status()).into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok((t0.elapsed().as_secs_f64(), server))
}

impl Server {
    fn start_on(binary: &Path, dir: &Path, port: u16) -> Res<Server> {
        std::fs::create_dir_all(dir)?;
        let child = Command::new(binary)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.join("store"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(Server { child, port })
    }
}

/// The baseline: the same messages from a plain publisher, in a window of the same size.
fn publisher(url: &str, root: &Path) -> Res<f64> {
    let reader = procjournal::JournalReader::open(root)?;
    let (records, _) = reader.records(1)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let js = jetstream::new(async_nats::connect(url).await?);
        js.create_stream(jetstream::stream::Config {
            name: "BASELINE".to_owned(),
            subjects: vec!["baseline".to_owned()],
            ..Default::default()
        })
        .await?;
        let t0 = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        for r in &records {
            let mut h = HeaderMap::new();
            let id = r.event_id.to_string();
            h.insert("Nats-Msg-Id", id.as_str());
            h.insert("Pj-Journal", "00000000000000000000000000000000");
            h.insert("Pj-Seq", r.position.seq.to_string().as_str());
            h.insert("Pj-Event-Id", id.as_str());
            h.insert("Pj-Kind", r.kind.to_string().as_str());
            h.insert("Pj-Codec", r.codec_version.to_string().as_str());
            let ack = js
                .publish_with_headers("baseline", h, r.payload.clone().into())
                .await?;
            pending.push_back(ack);
            if pending.len() >= procjournal::fleet::WINDOW_DEFAULT
                && let Some(ack) = pending.pop_front()
            {
                ack.await?;
            }
        }
        for ack in pending {
            ack.await?;
        }
        Ok(t0.elapsed().as_secs_f64())
    })
}

/// p99 of `appends` acknowledged appends, in ms, to a fresh node shipping to `url` (`None`: a
/// node that ships nothing).
fn append_p99(root: &Path, url: Option<&str>, appends: usize) -> Res<f64> {
    let (mut lc, _, _) = Lifecycle::open(root, JournalOptions::default())?;
    let rt = tokio::runtime::Runtime::new()?;
    let _guard = rt.enter();
    let name = root.file_name().and_then(|n| n.to_str()).unwrap_or("x");
    let node = NodeName::new(&format!("latency-{name}"))?;
    let _fleet = url.map(|url| {
        Fleet::start(
            FleetConfig::new(url, node),
            root.to_owned(),
            lc.journal_arc(),
        )
    });
    let from = 0;
    let mut times = Vec::with_capacity(appends);
    for n in from..from + appends as u64 {
        let (id, event) = workload::event(n);
        let t0 = Instant::now();
        lc.append(id, &event)?;
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(common::quantile(&mut times, 0.99))
}

fn main() -> Res<()> {
    let all = Instant::now();
    let Some(binary) = std::env::var_os("PROCJOURNAL_NATS_SERVER").map(PathBuf::from) else {
        println!(
            "SKIPPED fleet bench: PROCJOURNAL_NATS_SERVER names no nats-server (see docs/development.md)"
        );
        return Ok(());
    };
    let plan = plan(FULL, QUICK);
    let [mut ship, mut base, mut catch, mut up, mut down, mut none] =
        std::array::from_fn::<Samples, 6, _>(|_| Samples::default());
    for round in 0..plan.rounds {
        let dir = tempfile::tempdir_in(bench_dir()?)?;
        let (ship_s, server) = catch_up(
            &binary,
            &dir.path().join("a"),
            &dir.path().join("root"),
            plan.records,
        )?;
        let base_s = publisher(&server.url(), &dir.path().join("root"))?;
        record(
            &mut ship,
            &mut base,
            &mut catch,
            plan.records,
            ship_s,
            base_s,
        );
        let none_ms = append_p99(&dir.path().join("none"), None, plan.appends)?;
        let up_ms = append_p99(&dir.path().join("up"), Some(&server.url()), plan.appends)?;
        server.signal("-STOP")?;
        let down_ms = append_p99(&dir.path().join("down"), Some(&server.url()), plan.appends);
        server.signal("-CONT")?;
        let down_ms = down_ms?;
        none.push(none_ms);
        up.push(up_ms);
        down.push(down_ms);
        println!(
            "round {}: {} records caught up in {ship_s:.2} s (publisher {base_s:.2} s); append p99 {none_ms:.3} ms shipping nothing, {up_ms:.3} ms up, {down_ms:.3} ms down",
            round + 1,
            plan.records
        );
    }
    print_rows(&[
        Row {
            figure: "shipping, records/s",
            samples: &ship,
            baseline: "plain publisher, records/s",
            base: &base,
            target: Target::MinRatio(0.7),
        },
        Row {
            figure: "append p99 while the server is stopped, ms",
            samples: &down,
            baseline: "append p99 while it is up, ms",
            base: &up,
            target: Target::MaxRatio(1.1),
        },
        Row {
            figure: "append p99 while shipping to a server that is up, ms",
            samples: &up,
            baseline: "append p99 of a node that ships nothing, ms",
            base: &none,
            target: Target::None,
        },
    ]);
    println!(
        "catch-up of {} records after an outage: median {:.2} s (goal under 60 s for 1 000 000)",
        plan.records,
        catch.median()
    );
    print_total_time(all);
    Ok(())
}

fn record(
    ship: &mut Samples,
    base: &mut Samples,
    catch: &mut Samples,
    records: u64,
    ship_s: f64,
    base_s: f64,
) {
    ship.push(records as f64 / ship_s);
    base.push(records as f64 / base_s);
    catch.push(ship_s);
}
