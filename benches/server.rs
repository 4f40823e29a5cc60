//! Requests per second for `output` polls over the daemon's socket with 100 live processes, beside
//! the raw cost of a request/response round trip of the same sizes over a Unix socket, measured in
//! the same run.
//!
//! Run with `cargo bench --bench server`.
//!
//! Set-up (untimed): a `Server` is bound in-process (`Server::bind(SupervisorConfig::new(root),
//! Some(socket))`, then `run()`) on its own tokio runtime of 2 worker threads, the runtime
//! `procjournal serve` builds. In-process rather than the real binary so that this process's CPU
//! time covers the daemon's work and the supervisor can be reached directly for the in-process
//! diagnostic below; the socket, the connection handling and the dispatcher are the daemon's own,
//! only the `main` around them differs (and the clients share the daemon's process, so the
//! daemon's allocator and scheduler see them too). 100 processes are started through the protocol
//! (`start` requests via `procjournal::client::Client`), each `SCRIPT`: a 70-byte build-log line
//! every 50 ms, alive until shut down. The wait is bash's `read -t 0.05` on the process's stdin (a
//! pipe the supervisor holds open and never writes), not `sleep 0.05`: with `sleep`, 100 processes
//! fork 2000 times a second, which measured 1.3 of this machine's 2 cores on its own and would
//! have been most of what the bench saw; `read -t` writes the same lines for about a sixth of that.
//! The output rate is checked after set-up (a loop that does not wait would flood), and the
//! measurements start once every process has written 8 KiB.
//!
//! What is measured, `rounds` times, interleaved (round 1 measures everything once, then round
//! 2, ...; a figure and its baseline swap order every round, so that a burst of load from other
//! work on the machine hits both alike):
//! 1. `output` polls: N client threads (N = 1 and 4), each with its own connection, send `output`
//!    requests round-robin over the 100 handles (thread k starts at handle k*100/N), with
//!    `max_bytes` 65536, `rendering` safe_text, `wait_ms` 0, for `measure` of wall time each.
//!    Reported: requests/s (all threads), latency p50/p99 of one request (from writing the request
//!    line to the parsed response), this process's CPU time per request (the daemon's threads and
//!    the clients', from /proc/self/stat, which also counts threads that exited) less the
//!    background rate measured at the start of the round with no requests (output capture), and
//!    the client threads' own on-CPU time and run-queue wait per request (from
//!    /proc/thread-self/schedstat); the run-queue wait shows how much of the latency is waiting
//!    for one of the 2 cores.
//!    Two kinds of poll:
//!    - resume: each request resumes at that handle's `next_cursor` from the thread's previous
//!      page of it, as a following client does (cursor tables persist across measurements, and
//!      each measurement starts with one untimed pass over every handle). Polled this fast, a
//!      handle has rarely written anything since the last poll, so most pages are empty: the
//!      response is the page's metadata (~350 bytes) and the mean page data is a few bytes. This is
//!      the figure the issue asks for.
//!    - 4 KiB tail: the same, but each request starts 4096 bytes before the `next_cursor` last
//!      seen, so every page carries ~4 KiB of text (~4.5 KB responses): the cost of pages with
//!      data (reading, safe-text rendering, JSON escaping), which the resume polls barely exercise.
//! 2. Baseline: the same client threads running the same code and sending the same request lines
//!    (built per request from the typed `Request`, as `procjournal::client::Client` does), against
//!    a minimal echo server on another Unix socket in the same directory: a tokio runtime of 2
//!    worker threads (the daemon's shape), one task per connection reading a line through a 64 KiB
//!    `BufReader` (as the daemon does) and writing back a canned response line. The canned line is
//!    a real response of the same kind of poll captured at set-up (the median-length one of 200
//!    polls), so the response bytes are the same size and the client parses the same JSON (the
//!    echo client does not follow the cursor, since the server ignores it). What the baseline
//!    leaves out is exactly procjournal's per-request work: decoding and validating the request,
//!    the peer-gone watch, reading the output buffer, rendering safe text, building the JSON
//!    result and encoding the response. Both run while the 100 processes write and the supervisor
//!    captures their output, so that background load is in both. Each ratio is procjournal /
//!    baseline of the medians over rounds, with the spread of the per-round ratios.
//! 3. Diagnostics: `hello` requests over the same socket (protocol and connection overhead without
//!    the spool), and, in-process on one thread with no socket, the daemon's per-request work for
//!    each kind of poll, each stage timed on-CPU in its own loop: `decode_request`,
//!    `Supervisor::output` (state lookup, buffer read, safe-text rendering), `serde_json::to_value`
//!    of the page and `Response::to_line` (what `Dispatcher::dispatch` does for `wait_ms` 0), plus
//!    building the request line (the client's side) and all five in one loop.
//!
//! The machine may be shared: the 1-minute load average is printed with each round, and the
//! baseline is measured in the same run for that reason; compare ratios, not absolute figures,
//! across runs. Nothing here asserts on wall-clock time; the only checks are of correctness (every
//! response ok and answering its request, cursors never going back and no gaps, the output rate,
//! the shutdown report, no child left behind).
//!
//! Clean-up: a `shutdown` request over the socket; the server's report must name every process as
//! terminated or killed, and afterwards no process whose parent is this one, nor any member of the
//! started process groups, may remain (checked in /proc).
//!
//! Temp roots live under `$PROCJOURNAL_BENCH_DIR`, else Cargo's target tmp dir.
//! `PROCJOURNAL_BENCH_QUICK=1` runs one short round with 10 processes, for checking the harness
//! only. `PROCJOURNAL_BENCH_ONLY=resume|tail|hello` runs that daemon measurement alone (1
//! connection, no baseline), for profiling it with perf or strace.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "benches start, signal and reap their baselines and workloads directly"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use procjournal::client::Client;
use procjournal::lifecycle::Handle;
use procjournal::protocol::{Request, Response, decode_request};
use procjournal::server::Server;
use procjournal::supervisor::{Rendering, Supervisor, SupervisorConfig};
use serde_json::Value;

mod common;

use common::{Res, Samples, Sched, load_average, process_cpu_seconds, quantile};

/// Each supervised process (run by `bash -c`): a line every 50 ms, no fork per line (see the
/// file's documentation).
const SCRIPT: &str = concat!(
    r#"i=0; while :; do echo "line $i: compiling crate_$((i % 97)) (lib) in target/debug, "#,
    r#"3 warnings"; i=$((i+1)); read -t 0.05 _; done"#
);
const MAX_BYTES: u64 = 64 * 1024;
/// The longest response line read, as `procjournal::client` allows.
const RESPONSE_BYTES_MAX: u64 = 16 << 20;

#[derive(Debug, Clone, Copy)]
struct Plan {
    rounds: usize,
    processes: usize,
    measure: Duration,
    connections: [usize; 2],
}

const FULL: Plan = Plan {
    rounds: 3,
    processes: 100,
    measure: Duration::from_secs(3),
    connections: [1, 4],
};

const QUICK: Plan = Plan {
    rounds: 1,
    processes: 10,
    measure: Duration::from_millis(200),
    connections: [1, 4],
};

// ---------------------------------------------------------------------------------------------
// Small tools.

/// This process's CPU seconds per second of wall time while no request is sent (the supervisor
/// capturing the writers' output, and the runtimes' idle work).
fn background_cpu(d: Duration) -> f64 {
    let cpu0 = process_cpu_seconds();
    let t0 = Instant::now();
    std::thread::sleep(d);
    (process_cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// The daemon, in-process.

struct Daemon {
    socket: PathBuf,
    supervisor: Supervisor,
    thread: std::thread::JoinHandle<Res<procjournal::supervisor::ShutdownReport>>,
}

/// Binds a `Server` on `root` and runs it on its own runtime thread (2 workers, like `serve`).
fn start_daemon(root: &Path, socket: &Path) -> Res<Daemon> {
    let (tx, rx) = std::sync::mpsc::channel::<Res<Supervisor>>();
    let root = root.to_owned();
    let socket_path = socket.to_owned();
    let thread = std::thread::Builder::new()
        .name("daemon".into())
        .spawn(move || -> Res<_> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(async move {
                // Serving is measured, not admission: an explicit host limit.
                let mut config = SupervisorConfig::new(&root);
                config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
                    procjournal::limits::LIVE_PROCESSES_DEFAULT,
                );
                let bound = Server::bind(config, Some(socket_path)).await;
                let server = match bound {
                    Ok((server, _restore)) => {
                        let _ = tx.send(Ok(server.supervisor().clone()));
                        server
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("bind: {e}").into()));
                        return Err(e.into());
                    }
                };
                Ok(server.run().await?)
            })
        })?;
    let supervisor = rx.recv().map_err(|_| "the daemon thread ended early")??;
    Ok(Daemon {
        socket: socket.to_owned(),
        supervisor,
        thread,
    })
}

/// Starts `n` writers through the protocol; returns their handles and pids.
fn start_processes(socket: &Path, cwd: &Path, n: usize) -> Res<(Vec<Handle>, Vec<u32>)> {
    let mut client = Client::connect(socket)?;
    let mut handles = Vec::with_capacity(n);
    let mut pids = Vec::with_capacity(n);
    for _ in 0..n {
        let result = client.call(&Request::Start(common::start_args(
            vec!["bash".into(), "-c".into(), SCRIPT.into()],
            cwd.to_str().ok_or("non-UTF-8 temp dir")?.to_owned(),
        )))?;
        let handle: Handle = result["handle"].as_str().ok_or("no handle")?.parse()?;
        let pid = result["pid"].as_u64().ok_or("no pid")?;
        handles.push(handle);
        pids.push(u32::try_from(pid)?);
    }
    Ok((handles, pids))
}

/// Total output bytes of every process, as `output` pages report them.
fn total_bytes(socket: &Path, handles: &[Handle]) -> Res<Vec<u64>> {
    let mut client = Client::connect(socket)?;
    let mut totals = Vec::with_capacity(handles.len());
    for h in handles {
        let page = client.call(&output_request(*h, 0))?;
        totals.push(page["total_bytes"].as_u64().ok_or("no total_bytes")?);
    }
    Ok(totals)
}

fn output_request(handle: Handle, cursor: u64) -> Request {
    Request::Output {
        min_bytes: None,
        settle_ms: None,
        tail_lines: None,
        handle: handle.into(),
        cursor,
        max_bytes: MAX_BYTES,
        rendering: Rendering::SafeText,
        wait_ms: 0,
    }
}

// ---------------------------------------------------------------------------------------------
// The baseline: an echo server answering every line with one canned response line.

fn start_echo(socket: &Path, response: Vec<u8>) -> Res<tokio::runtime::Runtime> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("echo")
        .enable_all()
        .build()?;
    let listener = {
        let _guard = rt.enter();
        tokio::net::UnixListener::bind(socket)?
    };
    let response = Arc::new(response);
    rt.spawn(async move {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        while let Ok((stream, _)) = listener.accept().await {
            let response = Arc::clone(&response);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut reader = tokio::io::BufReader::with_capacity(64 * 1024, read);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if write.write_all(&response).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(rt)
}

// ---------------------------------------------------------------------------------------------
// Clients.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `output` polls at `tail` bytes before the end last seen (0: resume at `next_cursor`);
    /// checked and followed when `echo` is false, only parsed when it is true.
    Output {
        tail: u64,
        echo: bool,
    },
    Hello,
}

/// One client connection, speaking the line protocol the way `procjournal::client::Client` does
/// (a request line from the typed `Request`, a bounded line read, the response parsed into a
/// `Response`).
struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    line: Vec<u8>,
    next_id: u64,
}

impl Conn {
    fn connect(socket: &Path) -> Res<Conn> {
        let writer = UnixStream::connect(socket)?;
        let reader = BufReader::new(writer.try_clone()?);
        Ok(Conn {
            writer,
            reader,
            line: Vec::new(),
            next_id: 1,
        })
    }

    /// Sends `request`, returns the response's result (and leaves the raw line in `self.line`).
    fn call(&mut self, request: &Request, check: bool) -> Res<Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.writer
            .write_all(&request.to_line(Some(Value::from(id))))?;
        self.line.clear();
        let n = Read::by_ref(&mut self.reader)
            .take(RESPONSE_BYTES_MAX + 1)
            .read_until(b'\n', &mut self.line)?;
        if n == 0 || self.line.last() != Some(&b'\n') {
            return Err("truncated response".into());
        }
        let response: Response = serde_json::from_slice(&self.line)?;
        if check && response.id != Some(Value::from(id)) {
            return Err(format!("response to {:?}, expected {id}", response.id).into());
        }
        match (response.ok, response.result) {
            (true, Some(result)) => Ok(result),
            _ => Err(format!("request failed: {:?}", response.error).into()),
        }
    }

    /// One `output` poll of `handle`, `tail` bytes before `known` (the end last seen); returns
    /// the page's data length.
    fn poll(&mut self, handle: Handle, known: &mut u64, tail: u64, echo: bool) -> Res<usize> {
        let cursor = known.saturating_sub(tail);
        let page = self.call(&output_request(handle, cursor), !echo)?;
        let next = page["next_cursor"].as_u64().ok_or("no next_cursor")?;
        let data = page["data"].as_str().map_or(0, str::len);
        if !echo {
            if next < cursor || page["gap"] != Value::Bool(false) {
                return Err(format!("page from {cursor}: next_cursor {next}, {page}").into());
            }
            *known = next;
        }
        Ok(data)
    }
}

/// One measurement of N connections.
#[derive(Debug, Default, Clone)]
struct Measure {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    /// CPU time of the whole process per request.
    process_cpu_us: f64,
    /// The same, less the process's background CPU rate (output capture) over the measurement.
    net_cpu_us: f64,
    /// The client threads' on-CPU time per request.
    client_cpu_us: f64,
    /// The client threads' run-queue wait per request.
    client_wait_us: f64,
    resp_p50: f64,
    resp_p99: f64,
    data_mean: f64,
}

struct ThreadResult {
    requests: u64,
    latencies_us: Vec<f64>,
    resp_len: Vec<f64>,
    data_bytes: u64,
    cpu_ns: u64,
    wait_ns: u64,
}

/// Runs `n` client threads against `socket` for `duration`; `cursors` holds one table per thread
/// slot (persistent for the daemon's polls, scratch for the echo server's).
fn measure(
    socket: &Path,
    handles: &[Handle],
    cursors: &mut [Vec<u64>],
    n: usize,
    kind: Kind,
    duration: Duration,
    background: f64,
) -> Res<Measure> {
    let start = Barrier::new(n + 1);
    let end = Barrier::new(n + 1);
    let nh = handles.len();
    std::thread::scope(|scope| -> Res<Measure> {
        let mut threads = Vec::with_capacity(n);
        for (slot, table) in cursors.iter_mut().take(n).enumerate() {
            let (start, end) = (&start, &end);
            threads.push(scope.spawn(move || -> Res<ThreadResult> {
                let connected = Conn::connect(socket);
                let mut i = slot * nh / n;
                let mut run = |conn: &mut Conn, i: &mut usize| -> Res<(usize, usize)> {
                    let data = match kind {
                        Kind::Hello => {
                            conn.call(&Request::Hello, true)?;
                            0
                        }
                        Kind::Output { tail, echo } => {
                            let h = *i % nh;
                            *i += 1;
                            conn.poll(handles[h], &mut table[h], tail, echo)?
                        }
                    };
                    Ok((conn.line.len(), data))
                };
                // Warm-up, untimed: one pass over every handle.
                let warm = connected.and_then(|mut conn| {
                    for _ in 0..nh {
                        run(&mut conn, &mut i)?;
                    }
                    Ok(conn)
                });
                start.wait();
                let mut conn = match warm {
                    Ok(conn) => conn,
                    Err(e) => {
                        end.wait();
                        return Err(e);
                    }
                };
                let mut r = ThreadResult {
                    requests: 0,
                    latencies_us: Vec::with_capacity(1 << 16),
                    resp_len: Vec::with_capacity(1 << 16),
                    data_bytes: 0,
                    cpu_ns: 0,
                    wait_ns: 0,
                };
                let sched = Sched::now();
                let deadline = Instant::now() + duration;
                let mut failed = None;
                loop {
                    let t0 = Instant::now();
                    if t0 >= deadline {
                        break;
                    }
                    match run(&mut conn, &mut i) {
                        Ok((len, data)) => {
                            r.latencies_us.push(t0.elapsed().as_secs_f64() * 1e6);
                            r.resp_len.push(len as f64);
                            r.data_bytes += data as u64;
                            r.requests += 1;
                        }
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                let sched = Sched::since(sched);
                r.cpu_ns = sched.cpu_ns;
                r.wait_ns = sched.wait_ns;
                end.wait();
                match failed {
                    Some(e) => Err(e),
                    None => Ok(r),
                }
            }));
        }
        start.wait();
        let cpu0 = process_cpu_seconds();
        let t0 = Instant::now();
        end.wait();
        let elapsed = t0.elapsed();
        let cpu = process_cpu_seconds() - cpu0;
        let mut all = Vec::with_capacity(n);
        for t in threads {
            all.push(t.join().map_err(|_| "a client thread panicked")??);
        }
        let requests: u64 = all.iter().map(|r| r.requests).sum();
        let mut latencies: Vec<f64> = all.iter().flat_map(|r| r.latencies_us.clone()).collect();
        let mut lens: Vec<f64> = all.iter().flat_map(|r| r.resp_len.clone()).collect();
        let per = |ns: u64| ns as f64 / 1e3 / requests as f64;
        Ok(Measure {
            rps: requests as f64 / elapsed.as_secs_f64(),
            p50_us: quantile(&mut latencies, 0.5),
            p99_us: quantile(&mut latencies, 0.99),
            process_cpu_us: cpu * 1e6 / requests as f64,
            net_cpu_us: (cpu - background * elapsed.as_secs_f64()) * 1e6 / requests as f64,
            client_cpu_us: per(all.iter().map(|r| r.cpu_ns).sum()),
            client_wait_us: per(all.iter().map(|r| r.wait_ns).sum()),
            resp_p50: quantile(&mut lens, 0.5),
            resp_p99: quantile(&mut lens, 0.99),
            data_mean: all.iter().map(|r| r.data_bytes).sum::<u64>() as f64 / requests as f64,
        })
    })
}

// ---------------------------------------------------------------------------------------------
// In-process diagnostic: the daemon's per-request work for an `output` poll, without the socket.

/// On-CPU microseconds per request of each stage, each stage timed in its own loop.
#[derive(Debug, Default, Clone, Copy)]
struct Stages {
    decode: f64,
    output: f64,
    to_value: f64,
    to_line: f64,
    /// Building the request line (the client's work, included in `all`).
    request: f64,
    /// Request line, then all four stages, in one loop.
    all: f64,
}

/// Calls `f(i)` for i = 0, 1, ... for `d` of wall time; returns its on-CPU microseconds per call.
fn cpu_per_call(d: Duration, mut f: impl FnMut(usize) -> Res<()>) -> Res<f64> {
    let start = Sched::now();
    let deadline = Instant::now() + d;
    let mut calls = 0usize;
    while !calls.is_multiple_of(64) || Instant::now() < deadline {
        f(calls)?;
        calls += 1;
    }
    Ok(Sched::since(start).cpu_ns as f64 / 1e3 / calls as f64)
}

/// What the server does for one `output` poll of `handle` at `cursor` (as `Dispatcher::dispatch`
/// does it for `wait_ms` 0), on this thread: returns the response line and `next_cursor`.
fn serve_in_process(
    rt: &tokio::runtime::Runtime,
    sup: &Supervisor,
    line: &[u8],
) -> Res<(Vec<u8>, u64)> {
    let envelope = decode_request(line)?;
    let Request::Output {
        handle,
        cursor,
        max_bytes,
        rendering,
        ..
    } = envelope.request
    else {
        return Err("not an output request".into());
    };
    let procjournal::lifecycle::ProcessRef::Handle(handle) = handle else {
        return Err("not a handle".into());
    };
    let page = rt.block_on(sup.output(&handle, cursor, usize::try_from(max_bytes)?, rendering))?;
    let next = page.next_cursor;
    let value = serde_json::to_value(&page)?;
    Ok((Response::new(envelope.id, Ok(value)).to_line(), next))
}

/// The request line the server reads (without its newline) for a poll `tail` bytes before `known`.
fn request_line(handle: Handle, known: u64, tail: u64, id: usize) -> Vec<u8> {
    let mut line =
        output_request(handle, known.saturating_sub(tail)).to_line(Some(Value::from(id as u64)));
    line.pop();
    line
}

/// The daemon's per-request work for `output` polls `tail` bytes before the end (0: resuming),
/// without the socket, on this thread, stage by stage.
fn in_process(
    rt: &tokio::runtime::Runtime,
    sup: &Supervisor,
    handles: &[Handle],
    known: &mut [u64],
    tail: u64,
    d: Duration,
) -> Res<Stages> {
    let nh = handles.len();
    let d = d / 6;
    let all = cpu_per_call(d, |i| {
        let h = i % nh;
        let line = request_line(handles[h], known[h], tail, i);
        let (out, next) = serve_in_process(rt, sup, &line)?;
        std::hint::black_box(out);
        known[h] = next;
        Ok(())
    })?;
    // Inputs of each stage, as of now.
    let lines: Vec<Vec<u8>> = (0..nh)
        .map(|h| request_line(handles[h], known[h], tail, h))
        .collect();
    let cursor = |h: usize| known[h].saturating_sub(tail);
    let pages = (0..nh)
        .map(|h| {
            rt.block_on(sup.output(
                &handles[h],
                cursor(h),
                MAX_BYTES as usize,
                Rendering::SafeText,
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let responses = pages
        .iter()
        .enumerate()
        .map(|(h, page)| {
            Ok(Response::new(
                Some(Value::from(h)),
                Ok(serde_json::to_value(page)?),
            ))
        })
        .collect::<Res<Vec<_>>>()?;
    let request = cpu_per_call(d, |i| {
        let h = i % nh;
        std::hint::black_box(request_line(handles[h], known[h], tail, i));
        Ok(())
    })?;
    let decode = cpu_per_call(d, |i| {
        std::hint::black_box(decode_request(&lines[i % nh])?);
        Ok(())
    })?;
    let output = cpu_per_call(d, |i| {
        let h = i % nh;
        let page = rt.block_on(sup.output(
            &handles[h],
            cursor(h),
            MAX_BYTES as usize,
            Rendering::SafeText,
        ))?;
        std::hint::black_box(page);
        Ok(())
    })?;
    let to_value = cpu_per_call(d, |i| {
        std::hint::black_box(serde_json::to_value(&pages[i % nh])?);
        Ok(())
    })?;
    let to_line = cpu_per_call(d, |i| {
        std::hint::black_box(responses[i % nh].to_line());
        Ok(())
    })?;
    Ok(Stages {
        decode,
        output,
        to_value,
        to_line,
        request,
        all,
    })
}

// ---------------------------------------------------------------------------------------------
// Clean-up checks.

/// Processes (pid, comm) whose parent is this process or whose process group is one of `pgids`.
fn leftovers(pgids: &[u32]) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        // After the comm: state, ppid, pgrp.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let num = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
        let (Some(ppid), Some(pgrp)) = (num(1), num(2)) else {
            continue;
        };
        if ppid == me || pgids.contains(&pgrp) {
            found.push((pid, comm));
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Report.

#[derive(Debug, Default)]
struct Series {
    rps: Samples,
    p50: Samples,
    p99: Samples,
    cpu: Samples,
}

impl Series {
    fn push(&mut self, m: &Measure) {
        self.rps.push(m.rps);
        self.p50.push(m.p50_us);
        self.p99.push(m.p99_us);
        self.cpu.push(m.net_cpu_us);
    }
}

fn describe(name: &str, m: &Measure) {
    println!(
        "    {name:<28} {:>7.0} req/s  p50 {:>5.0} us  p99 {:>6.0} us  process CPU {:>5.1} (net {:>5.1}) us/req  \
         client CPU {:>5.1} + run-queue wait {:>5.1} us/req  response p50 {:.0} B p99 {:.0} B, \
         page data mean {:.1} B",
        m.rps,
        m.p50_us,
        m.p99_us,
        m.process_cpu_us,
        m.net_cpu_us,
        m.client_cpu_us,
        m.client_wait_us,
        m.resp_p50,
        m.resp_p99,
        m.data_mean
    );
}

struct Row<'a> {
    figure: String,
    samples: &'a Samples,
    baseline: String,
    base: &'a Samples,
}

fn print_table(rows: &[Row<'_>]) {
    let header = [
        "figure",
        "median [min-max]",
        "baseline",
        "median [min-max]",
        "ratio [per-round]",
    ];
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|row| {
            [
                row.figure.clone(),
                common::fmt_samples(row.samples),
                row.baseline.clone(),
                common::fmt_samples(row.base),
                common::ratio_cell(row.samples, row.base),
            ]
        })
        .collect();
    common::print_cells(header, &cells);
}

// ---------------------------------------------------------------------------------------------

/// What the `output` polls read: (name, bytes before the end last seen).
const VARIANTS: [(&str, u64); 2] = [("resume", 0), ("4 KiB tail", TAIL)];
/// How far behind the end the tail polls start.
const TAIL: u64 = 4096;

fn main() -> Res<()> {
    let plan = common::plan(FULL, QUICK);
    let tmp = tempfile::tempdir_in(common::bench_dir()?)?;
    let base = tmp.path();
    let root = base.join("root");
    let socket = base.join("pj.sock");
    match common::mount_of(base) {
        Some((mount_point, fs_type, _)) => {
            println!(
                "temp root under {} on {mount_point} ({fs_type})",
                base.display()
            );
        }
        None => println!("temp root under {}", base.display()),
    }
    println!(
        "{} rounds of {:.1} s per measurement; {} live processes; connections {:?}; {} available \
         CPUs; load {}",
        plan.rounds,
        plan.measure.as_secs_f64(),
        plan.processes,
        plan.connections,
        common::available_cpus(),
        load_average()
    );

    // Set-up: the daemon, the writers, and a check of their output rate.
    let daemon = start_daemon(&root, &socket)?;
    let (handles, pids) = start_processes(&daemon.socket, base, plan.processes)?;
    let before = total_bytes(&daemon.socket, &handles)?;
    std::thread::sleep(Duration::from_secs(1));
    let after = total_bytes(&daemon.socket, &handles)?;
    let rates: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let (lo, hi) = (
        rates.iter().min().copied().unwrap_or(0),
        rates.iter().max().copied().unwrap_or(0),
    );
    println!(
        "output per process over 1 s: {lo}-{hi} bytes (expected ~1300: ~20 lines of ~65 bytes)"
    );
    if lo == 0 || hi > 20_000 {
        return Err(format!("the writers do not write as expected ({lo}-{hi} bytes/s)").into());
    }
    // Until every process has written a whole tail.
    while total_bytes(&daemon.socket, &handles)?
        .iter()
        .any(|&t| t < 2 * TAIL)
    {
        std::thread::sleep(Duration::from_millis(250));
    }

    // Per variant, the baseline's canned response: the median-length of 200 real polls.
    let max_conns = plan.connections.iter().copied().max().unwrap_or(1);
    let mut cursors: Vec<Vec<u64>> = vec![vec![0; handles.len()]; max_conns];
    let mut echo_sockets = Vec::new();
    let mut echo_runtimes = Vec::new();
    for (v, &(name, tail)) in VARIANTS.iter().enumerate() {
        let mut conn = Conn::connect(&daemon.socket)?;
        let table = &mut cursors[0];
        for (h, handle) in handles.iter().enumerate() {
            conn.poll(*handle, &mut table[h], 0, false)?;
        }
        let mut lines = Vec::new();
        for i in 0..200 {
            let h = i % handles.len();
            conn.poll(handles[h], &mut table[h], tail, false)?;
            lines.push(conn.line.clone());
        }
        lines.sort_by_key(Vec::len);
        let canned = lines.swap_remove(lines.len() / 2);
        let shown = String::from_utf8_lossy(&canned);
        let shown: String = shown.trim_end().chars().take(600).collect();
        println!(
            "baseline response for {name} polls: {} bytes (median of 200 polls): {shown}{}",
            canned.len(),
            if canned.len() > 600 { "..." } else { "" }
        );
        let echo_socket = base.join(format!("echo-{v}.sock"));
        echo_runtimes.push(start_echo(&echo_socket, canned)?);
        echo_sockets.push(echo_socket);
    }

    // [variant][connections]
    let series = || -> Vec<Vec<Series>> {
        VARIANTS
            .iter()
            .map(|_| plan.connections.iter().map(|_| Series::default()).collect())
            .collect()
    };
    let (mut real, mut baseline) = (series(), series());
    let mut hello: Vec<Series> = plan.connections.iter().map(|_| Series::default()).collect();
    let mut stages: Vec<Vec<Stages>> = VARIANTS.iter().map(|_| Vec::new()).collect();
    let mut diag_cursors = vec![0u64; handles.len()];
    // The in-process diagnostic drives the supervisor from this thread through its own runtime,
    // as a connection task would (the actor lives on the server's runtime).
    let diag_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // `PROCJOURNAL_BENCH_ONLY=resume|tail|hello`: that daemon measurement alone, 1 connection,
    // for profiling it with perf or strace; no baseline, no table.
    let only = std::env::var("PROCJOURNAL_BENCH_ONLY").ok();
    let only_kind = match only.as_deref() {
        Some("resume") => Some(Kind::Output {
            tail: 0,
            echo: false,
        }),
        Some("tail") => Some(Kind::Output {
            tail: TAIL,
            echo: false,
        }),
        Some("hello") => Some(Kind::Hello),
        Some(other) => {
            return Err(format!("PROCJOURNAL_BENCH_ONLY={other}: resume|tail|hello").into());
        }
        None => None,
    };
    let rounds = if only_kind.is_some() { 0 } else { plan.rounds };
    if let Some(kind) = only_kind {
        println!("only {kind:?}, 1 connection (pid {})", std::process::id());
        let m = measure(
            &daemon.socket,
            &handles,
            &mut cursors,
            1,
            kind,
            plan.measure,
            0.0,
        )?;
        describe("daemon alone", &m);
    }
    let t0 = Instant::now();
    for round in 0..rounds {
        let background = background_cpu(plan.measure.min(Duration::from_secs(1)));
        println!(
            "round {} (load {}; background CPU of this process {:.0} ms/s)",
            round + 1,
            load_average(),
            background * 1e3
        );
        let swap = round % 2 == 1;
        for (v, &(name, tail)) in VARIANTS.iter().enumerate() {
            for (c, &n) in plan.connections.iter().enumerate() {
                for echo in [swap, !swap] {
                    let kind = Kind::Output { tail, echo };
                    if echo {
                        let mut scratch = vec![vec![0; handles.len()]; n];
                        let m = measure(
                            &echo_sockets[v],
                            &handles,
                            &mut scratch,
                            n,
                            kind,
                            plan.measure,
                            background,
                        )?;
                        describe(&format!("echo for {name}, {n} conn"), &m);
                        baseline[v][c].push(&m);
                    } else {
                        let m = measure(
                            &daemon.socket,
                            &handles,
                            &mut cursors,
                            n,
                            kind,
                            plan.measure,
                            background,
                        )?;
                        describe(&format!("output {name}, {n} conn"), &m);
                        real[v][c].push(&m);
                    }
                }
            }
        }
        for (c, &n) in plan.connections.iter().enumerate() {
            let m = measure(
                &daemon.socket,
                &handles,
                &mut cursors,
                n,
                Kind::Hello,
                plan.measure,
                background,
            )?;
            describe(&format!("hello (diagnostic), {n} conn"), &m);
            hello[c].push(&m);
        }
        for (v, &(name, tail)) in VARIANTS.iter().enumerate() {
            let s = in_process(
                &diag_rt,
                &daemon.supervisor,
                &handles,
                &mut diag_cursors,
                tail,
                plan.measure,
            )?;
            println!(
                "    in-process {name} poll, no socket, on-CPU us: decode {:.1} + \
                 Supervisor::output {:.1} + to_value {:.1} + to_line {:.1}; building the \
                 request line {:.1}; all in one loop {:.1}",
                s.decode, s.output, s.to_value, s.to_line, s.request, s.all
            );
            stages[v].push(s);
        }
    }
    println!(
        "({:.0} s; load {})",
        t0.elapsed().as_secs_f64(),
        load_average()
    );

    // Clean-up: shutdown over the socket, then check that nothing is left.
    let mut client = Client::connect(&daemon.socket)?;
    let answer = client.call(&Request::Shutdown { grace_ms: 2000 })?;
    drop(client);
    let report = daemon
        .thread
        .join()
        .map_err(|_| "the daemon thread panicked")??;
    for rt in echo_runtimes {
        rt.shutdown_background();
    }
    let stopped = report.terminated.len() + report.killed.len();
    if stopped != handles.len() || !report.teardown_failed.is_empty() {
        return Err(format!("shutdown report: {answer}").into());
    }
    let left = leftovers(&pids);
    if !left.is_empty() {
        return Err(format!("processes left after shutdown: {left:?}").into());
    }
    println!(
        "shut down: {} terminated, {} killed; no child process and no member of the {} process \
         groups left",
        report.terminated.len(),
        report.killed.len(),
        pids.len()
    );

    if only_kind.is_some() {
        return Ok(());
    }
    println!();
    let mut rows = Vec::new();
    for (v, &(name, _)) in VARIANTS.iter().enumerate() {
        for (c, &n) in plan.connections.iter().enumerate() {
            let (r, b) = (&real[v][c], &baseline[v][c]);
            let echo_name = format!("echo, same sizes, {n} conn");
            rows.push(Row {
                figure: format!("output {name}, {n} conn (req/s)"),
                samples: &r.rps,
                baseline: echo_name.clone(),
                base: &b.rps,
            });
            rows.push(Row {
                figure: "  latency p50 (us)".to_owned(),
                samples: &r.p50,
                baseline: echo_name.clone(),
                base: &b.p50,
            });
            rows.push(Row {
                figure: "  latency p99 (us)".to_owned(),
                samples: &r.p99,
                baseline: echo_name.clone(),
                base: &b.p99,
            });
            rows.push(Row {
                figure: "  process CPU per request, net (us)".to_owned(),
                samples: &r.cpu,
                baseline: echo_name,
                base: &b.cpu,
            });
        }
    }
    for (c, &n) in plan.connections.iter().enumerate() {
        rows.push(Row {
            figure: format!("hello (diagnostic), {n} conn (req/s)"),
            samples: &hello[c].rps,
            baseline: format!("echo for resume polls, {n} conn"),
            base: &baseline[0][c].rps,
        });
    }
    print_table(&rows);
    for (v, &(name, _)) in VARIANTS.iter().enumerate() {
        let med = |f: fn(&Stages) -> f64| Samples(stages[v].iter().map(f).collect()).median();
        println!(
            "in-process {name} poll (median over rounds, on-CPU us): decode_request {:.1}, \
             Supervisor::output {:.1}, serde_json::to_value {:.1}, Response::to_line {:.1}; building \
             the request line {:.1}; all five in one loop {:.1}",
            med(|s| s.decode),
            med(|s| s.output),
            med(|s| s.to_value),
            med(|s| s.to_line),
            med(|s| s.request),
            med(|s| s.all)
        );
    }
    Ok(())
}
