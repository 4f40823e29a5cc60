//! A tap on a process's output (live output with backpressure), through the library
//! with real processes: a full tap stops the drain's reads (the workload blocks in `write`) but
//! not its checkpoints nor its wall-clock limit; a dropped receiver, or an abandoned tap whose
//! receiver is still held, lets the process run on; and what the tap delivers is exactly what
//! the spool keeps.
//!
//! Nothing here measures time: the sleeps give a broken drain the chance to show itself (a
//! marker file written too early), and every wait on a condition has only a hang guard.

use crate::common::supervisor as supervisor_common;
use crate::common::tmpfs::SmallTmpfs;

use std::path::Path;
use std::time::Duration;

use procjournal::lifecycle::State;
use procjournal::lifecycle::event::{CaptureStatus, ExitStatus};
use procjournal::spool::format::Stream;
use procjournal::supervisor::{Supervisor, Tap, TapChunk, TapSink};
use supervisor_common::{KillGuard, config, guarded, open, sh, temp_root};
use tokio::sync::mpsc;

/// Far more than the slack between a workload and a tap's consumer (a 1 MiB pipe per stream
/// and `TAP_DEPTH` chunks of 256 KiB): a workload that got this far was not held back.
const BEYOND_SLACK: u64 = 16 * 1024 * 1024;

/// Long enough for an unthrottled workload to write `BEYOND_SLACK` many times over.
const PAUSE: Duration = Duration::from_millis(500);

async fn start_tapped(
    sup: &Supervisor,
    command: procjournal::supervisor::Command,
) -> (procjournal::lifecycle::Handle, mpsc::Receiver<TapChunk>) {
    let (tap, rx) = Tap::new();
    let prepared = sup.prepare(command).expect("prepare").with_tap(tap);
    match sup.start(prepared).await {
        Ok(h) => (h, rx),
        Err(e) => panic!("start failed: {e}"),
    }
}

/// Takes every chunk until the tap ends; returns (stdout bytes, stderr bytes).
async fn read_all(rx: &mut mpsc::Receiver<TapChunk>) -> (u64, u64) {
    let (mut out, mut err) = (0u64, 0u64);
    guarded("the tap's end", async {
        while let Some(chunk) = rx.recv().await {
            match chunk.stream {
                Stream::Stdout => out += chunk.bytes.len() as u64,
                Stream::Stderr => err += chunk.bytes.len() as u64,
                Stream::Terminal => panic!("a pipe launch has no terminal stream"),
            }
        }
    })
    .await;
    (out, err)
}

fn marker_script(marker: &Path) -> String {
    format!(
        "head -c {BEYOND_SLACK} /dev/zero; : > '{}'; echo done",
        marker.display()
    )
}

/// Waits for the [`marker_script`] of `h`, which must have run to its end with every byte in
/// the spool.
async fn wrote_everything(sup: &Supervisor, h: procjournal::lifecycle::Handle, marker: &Path) {
    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert!(marker.exists());
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(0)));
    assert_eq!(s.capture, CaptureStatus::Complete);
    assert_eq!(s.bounds.total_bytes, BEYOND_SLACK + 5);
}

/// A consumer that reads nothing holds the workload in `write`; the drain still records
/// checkpoints meanwhile; once the consumer reads, every byte arrives, and the tap carries
/// exactly what the spool counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tap_blocks_the_workload_but_not_the_checkpoints() {
    let root = temp_root();
    let mut cfg = config(root.path());
    cfg.checkpoint_interval = Duration::from_millis(20);
    let (sup, _events) = open(cfg).await;
    let mut guard = KillGuard::new(&sup);
    let marker = root.path().join("wrote-everything");
    let (h, mut rx) = start_tapped(&sup, sh(root.path(), &marker_script(&marker))).await;
    guard.watch(h);
    // The drain read what fits in the tap, then stopped reading; its checkpoints go on.
    guarded("a checkpoint while the tap is full", async {
        while sup.manifest(&h).expect("manifest").bounds.total_bytes == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(PAUSE).await;
    assert!(
        !marker.exists(),
        "the workload wrote everything while nobody read the tap"
    );
    let held = sup.manifest(&h).expect("manifest");
    assert!(!held.state.is_terminal(), "{:?}", held.state);
    assert!(held.bounds.total_bytes < BEYOND_SLACK, "{:?}", held.bounds);

    let (out, err) = read_all(&mut rx).await;
    assert!(marker.exists());
    assert_eq!((out, err), (BEYOND_SLACK + 5, 0));
    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(0)));
    assert_eq!(s.capture, CaptureStatus::Complete);
    assert_eq!(s.bounds.total_bytes, out + err);
}

/// The wall-clock limit ends a workload blocked behind a full tap; the bytes the workload left
/// in its pipe are still owed to the consumer, who gets them all however late it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wall_clock_limit_fires_while_the_tap_is_full() {
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let marker = root.path().join("wrote-everything");
    let pid_file = root.path().join("pid");
    let script = format!(
        "echo $$ > '{}'; {}",
        pid_file.display(),
        marker_script(&marker)
    );
    let command = sh(root.path(), &script).timeout(Duration::from_millis(300));
    let (h, mut rx) = start_tapped(&sup, command).await;
    guard.watch(h);
    // The leader is gone while nobody has read the tap: the limit fired behind it.
    guarded("the leader's end", async {
        loop {
            if let Ok(pid) = std::fs::read_to_string(&pid_file)
                && let Ok(pid) = pid.trim().parse::<i32>()
                && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(PAUSE).await;
    // Still owed to the consumer: the drain waits for it rather than cutting the output short.
    assert!(!sup.manifest(&h).expect("manifest").state.is_terminal());
    let (out, err) = read_all(&mut rx).await;
    assert!(!marker.exists());
    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!(s.state, State::TimedOut);
    assert_eq!(s.capture, CaptureStatus::Complete);
    assert_eq!(s.bounds.total_bytes, out + err);
    assert!(out > 0 && out < BEYOND_SLACK, "{out}");
}

/// A consumer that goes away (its receiver dropped) does not hold the workload: the drain reads
/// on without the tap, and the spool has every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tap_lets_the_workload_run_on() {
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    let marker = root.path().join("wrote-everything");
    let (h, rx) = start_tapped(&sup, sh(root.path(), &marker_script(&marker))).await;
    guard.watch(h);
    tokio::time::sleep(PAUSE).await;
    assert!(!marker.exists());
    drop(rx);
    wrote_everything(&sup, h, &marker).await;
}

/// A consumer that abandons its tap while its receiver is still held (by a thread blocked
/// writing elsewhere) does not hold the workload either: the drain reads on without the tap,
/// whether the abandonment comes while it waits for room or before, and the spool has every
/// byte. The receiver gets no chunk after the ones it held room for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_tap_lets_the_workload_run_on_though_its_receiver_is_held() {
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let mut guard = KillGuard::new(&sup);
    for early in [false, true] {
        let marker = root.path().join(format!("wrote-everything-{early}"));
        let (tap, mut rx) = Tap::new();
        let abandon = tap.abandoner();
        if early {
            abandon.abandon();
        }
        let prepared = sup
            .prepare(sh(root.path(), &marker_script(&marker)))
            .expect("prepare")
            .with_tap(tap);
        let h = sup.start(prepared).await.expect("start");
        guard.watch(h);
        if !early {
            tokio::time::sleep(PAUSE).await;
            assert!(!marker.exists(), "the tap held the workload back");
            abandon.abandon();
        }
        wrote_everything(&sup, h, &marker).await;
        let (out, _) = read_all(&mut rx).await;
        assert!(out < BEYOND_SLACK, "{out} bytes reached an abandoned tap");
    }
}

/// A tap's chunks are the drain's own read buffers, each going back to the tap when its
/// consumer drops it and read into again: what the consumer gets is still every byte the spool
/// keeps, in order, while it holds some chunks for a while and drops others at once. Every
/// chunk starts on a cache line (the kernel's copy into a buffer off one is twice as slow).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recycled_chunks_carry_exactly_what_the_spool_keeps() {
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let (h, mut rx) = start_tapped(&sup, sh(root.path(), "seq 1 1000000")).await;
    let mut got = Vec::new();
    let mut held = std::collections::VecDeque::new();
    guarded("the tap's end", async {
        while let Some(chunk) = rx.recv().await {
            assert_eq!(
                chunk.bytes.as_ptr().addr() % 64,
                0,
                "a chunk off a cache line"
            );
            got.extend_from_slice(&chunk.bytes);
            held.push_back(chunk);
            if held.len() > 2 {
                held.pop_front();
            }
        }
    })
    .await;
    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(0)));
    let expected: String = (1..=1_000_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected.as_bytes(),
        "the tap's bytes differ from seq's"
    );
    let mut kept = Vec::new();
    while (kept.len() as u64) < s.bounds.total_bytes {
        let page = sup
            .output_raw(&h, kept.len() as u64, 1 << 20)
            .await
            .expect("read the spool");
        assert!(!page.bytes.is_empty(), "the spool ends early");
        kept.extend_from_slice(&page.bytes);
    }
    assert!(kept == got, "the tap's bytes differ from the spool's");
}

/// `seq`'s lines `range`, as it prints them.
fn lines(range: std::ops::RangeInclusive<u32>) -> String {
    range.map(|i| format!("{i}\n")).collect()
}

/// A script that prints the lines `1..=first`, waits for the file it returns (in `dir`) to
/// exist, then prints the rest up to `last`.
fn paused_seq(dir: &Path, first: u32, last: u32) -> (std::path::PathBuf, String) {
    let go = dir.join("go");
    let script = format!(
        "seq 1 {first}; while [ ! -e '{}' ]; do sleep 0.01; done; seq {} {last}",
        go.display(),
        first + 1
    );
    (go, script)
}

/// A tap with a sink held shut and its receiver: once opened, the drain writes every chunk to
/// the files `out` and `err` itself.
fn held_tap(out: &Path, err: &Path) -> (Tap, mpsc::Receiver<TapChunk>) {
    use std::os::fd::AsFd;
    let out = std::fs::File::create(out).expect("stdout file");
    let err = std::fs::File::create(err).expect("stderr file");
    let sink = TapSink::of(out.as_fd(), err.as_fd()).expect("examine the files");
    assert!(sink.whole(), "files take whole writes");
    Tap::with_sink(sink)
}

/// How many chunks the receiver still gets before the tap's end.
async fn chunks_to_the_end(rx: &mut mpsc::Receiver<TapChunk>) -> usize {
    guarded("the tap's end", async {
        let mut chunks = 0;
        while rx.recv().await.is_some() {
            chunks += 1;
        }
        chunks
    })
    .await
}

/// [`held_tap`], opened.
fn direct_tap(out: &Path, err: &Path) -> (Tap, mpsc::Receiver<TapChunk>) {
    let (tap, rx) = held_tap(out, err);
    tap.abandoner().open_sink();
    (tap, rx)
}

/// A sink not opened yet gets nothing: every chunk goes to the receiver. Once opened (after the
/// consumer wrote what it got), the drain writes the rest to it, and the two together are the
/// workload's output, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_sink_gets_nothing_until_the_consumer_opens_it() {
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let (out, err) = (root.path().join("out"), root.path().join("err"));
    let (tap, mut rx) = held_tap(&out, &err);
    let opener = tap.abandoner();
    let (go, script) = paused_seq(root.path(), 50_000, 100_000);
    let prepared = sup
        .prepare(sh(root.path(), &script))
        .expect("prepare")
        .with_tap(tap);
    // A failed assertion leaves no workload waiting for its file.
    let mut guard = KillGuard::new(&sup);
    let h = guard.watch(sup.start(prepared).await.expect("start"));
    let before = lines(1..=50_000);
    let mut got = Vec::new();
    let written = || std::fs::metadata(&out).expect("out").len();
    guarded("the chunks before the opening", async {
        while got.len() < before.len() {
            tokio::select! {
                chunk = rx.recv() => got.extend_from_slice(&chunk.expect("the end").bytes),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            assert_eq!(written(), 0, "the drain wrote to a held sink");
        }
    })
    .await;
    assert!(got == before.as_bytes(), "the receiver's chunks differ");
    opener.open_sink();
    std::fs::write(&go, b"").expect("go");
    let more = chunks_to_the_end(&mut rx).await;
    assert_eq!(more, 0, "an open sink of files sent chunks");
    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(0)));
    let rest = std::fs::read(&out).expect("read out");
    assert!(
        rest == lines(50_001..=100_000).as_bytes(),
        "the sink's bytes differ"
    );
}

/// A tap with a sink: the drain writes each stream to its own file, in order, exactly what the
/// spool keeps; the receiver gets no chunk, sees the end, and finds no failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_gets_exactly_what_the_spool_keeps_and_the_receiver_only_the_end() {
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let (out, err) = (root.path().join("out"), root.path().join("err"));
    let (tap, mut rx) = direct_tap(&out, &err);
    let failure = tap.abandoner();
    let script = "seq 1 300000; seq 1 20000 >&2; seq 300001 400000";
    let prepared = sup
        .prepare(sh(root.path(), script))
        .expect("prepare")
        .with_tap(tap);
    let h = sup.start(prepared).await.expect("start");
    let chunks = chunks_to_the_end(&mut rx).await;
    assert_eq!(chunks, 0, "a tap with a sink sent chunks");
    assert!(failure.failure().is_none());
    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(0)));
    let got_out = std::fs::read(&out).expect("read out");
    let got_err = std::fs::read(&err).expect("read err");
    let expected_out = lines(1..=300_000) + &lines(300_001..=400_000);
    assert!(got_out == expected_out.as_bytes(), "stdout's file differs");
    assert!(
        got_err == lines(1..=20_000).as_bytes(),
        "stderr's file differs"
    );
    let written = (got_out.len() + got_err.len()) as u64;
    assert_eq!(s.bounds.total_bytes, written);
}

/// A sink whose file system fills up: the failed write ends the tap, the receiver that sees the
/// end finds why (no space), and the workload runs on to its end with every byte in the spool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sink_ends_the_tap_says_why_and_the_workload_runs_on() {
    let Some(small) = SmallTmpfs::mount("1m") else {
        return;
    };
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let (tap, mut rx) = direct_tap(&small.path().join("out"), &root.path().join("err"));
    let failure = tap.abandoner();
    let marker = root.path().join("wrote-everything");
    let prepared = sup
        .prepare(sh(root.path(), &marker_script(&marker)))
        .expect("prepare")
        .with_tap(tap);
    let h = sup.start(prepared).await.expect("start");
    let first = guarded("the tap's end", rx.recv()).await;
    assert!(first.is_none(), "a tap with a sink sent a chunk");
    let why = failure.failure().expect("the failed write is kept");
    assert_eq!(why.raw_os_error(), Some(nix::libc::ENOSPC), "{why}");
    wrote_everything(&sup, h, &marker).await;
}

/// An abandoned tap with a sink: the drain writes nothing more to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_sink_gets_nothing_more() {
    let root = temp_root();
    let (sup, _events) = open(config(root.path())).await;
    let (out, err) = (root.path().join("out"), root.path().join("err"));
    let (tap, mut rx) = direct_tap(&out, &err);
    tap.abandoner().abandon();
    let prepared = sup
        .prepare(sh(root.path(), "seq 1 100000; echo done >&2"))
        .expect("prepare")
        .with_tap(tap);
    let h = sup.start(prepared).await.expect("start");
    chunks_to_the_end(&mut rx).await;
    let s = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(0)));
    assert!(s.bounds.total_bytes > 0);
    assert_eq!(std::fs::metadata(&out).expect("out").len(), 0);
    assert_eq!(std::fs::metadata(&err).expect("err").len(), 0);
}

/// A pipe's reader that reads `first` bytes, says so, and reads nothing more until told to go
/// on; then all the rest, to the end.
fn paused_reader(
    mut reader: std::io::PipeReader,
    first: usize,
) -> (
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<Vec<u8>>,
) {
    use std::io::Read;
    let (read_first, first_read) = std::sync::mpsc::channel();
    let (go_on, going_on) = std::sync::mpsc::channel::<()>();
    let reading = std::thread::spawn(move || {
        let mut got = vec![0; first];
        reader.read_exact(&mut got).expect("read the first bytes");
        read_first.send(()).expect("say so");
        going_on.recv().expect("told to go on");
        reader.read_to_end(&mut got).expect("read the rest");
        got
    });
    (first_read, go_on, reading)
}

/// A sink whose stdout is a pipe: the drain writes what fits while no chunk it sent is still
/// out, and the consumer writes the chunks it gets (the rest) to the same pipe. The drain
/// writes the first lines itself (the consumer has received nothing when they are read); with
/// the reader paused, the pipe fills and chunks go to the consumer; the reader then gets
/// exactly what `seq` wrote, in order.
#[test]
fn a_pipe_takes_the_drains_writes_and_the_consumers_in_order() {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const LAST: u32 = 2_000_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let root = temp_root();
    let (sup, _events) = runtime.block_on(open(config(root.path())));
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    let null = std::fs::File::create("/dev/null").expect("/dev/null");
    let sink = TapSink::of(writer.as_fd(), null.as_fd()).expect("examine");
    assert!(sink.any() && !sink.whole(), "a pipe takes what fits");
    let (tap, mut rx) = Tap::with_sink(sink);
    tap.abandoner().open_sink();
    let first = lines(1..=1000);
    let (first_read, go_on, reading) = paused_reader(reader, first.len());
    // The consumer, as `run`'s: each chunk written before the next is taken.
    let received = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&received);
    let consuming = std::thread::spawn(move || {
        while let Some(chunk) = rx.blocking_recv() {
            counted.fetch_add(chunk.bytes.len(), Ordering::SeqCst);
            writer.write_all(&chunk.bytes).expect("write a chunk");
        }
    });
    let (go, script) = paused_seq(root.path(), 1000, LAST);
    let prepared = sup
        .prepare(sh(root.path(), &script))
        .expect("prepare")
        .with_tap(tap);
    // A failed assertion leaves no workload waiting for its file.
    let mut guard = KillGuard::new(&sup);
    let h = guard.watch(runtime.block_on(sup.start(prepared)).expect("start"));
    first_read.recv().expect("the first lines");
    assert_eq!(
        received.load(Ordering::SeqCst),
        0,
        "the drain wrote nothing itself"
    );
    std::fs::write(&go, b"").expect("go");
    runtime.block_on(guarded("a chunk for the consumer", async {
        while received.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }));
    go_on.send(()).expect("the reader goes on");
    let s = runtime
        .block_on(guarded("wait", sup.wait(&h, None)))
        .expect("wait");
    assert_eq!((s.state, s.exit), (State::Exited, ExitStatus::Code(0)));
    consuming.join().expect("the consumer");
    // The sink's descriptor went with the tap: the reader sees the end.
    let got = reading.join().expect("the reader");
    let expected = lines(1..=LAST);
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected.as_bytes(),
        "the pipe's bytes differ from seq's"
    );
}
