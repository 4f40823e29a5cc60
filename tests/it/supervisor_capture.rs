//! Run-to-completion capture: `Supervisor::capture` with real processes,
//! real pipes and terminals, real deadlines. Each stream ends at EOF, incomplete (with every
//! reason) or failed; buffers are bounded while the spool keeps everything; the consumer's
//! helper never passes partial bytes as the whole output.

use crate::common::supervisor as supervisor_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use procjournal::lifecycle::event::{CaptureStatus, Deadline, ExitStatus};
use procjournal::lifecycle::{Handle, State};
use procjournal::spool::format::Stream;
use procjournal::supervisor::{
    CaptureFault, CaptureLimits, CaptureResult, Command, Incomplete, Rendering, StreamEnd,
    Supervisor, Why,
};
use procjournal::tree::{GroupLauncher, GuardianLauncher, GuardianProgram, Launcher};
use supervisor_common::{config, guarded, open, sh, temp_root};

fn launchers() -> [(&'static str, Arc<dyn Launcher>); 2] {
    let program = GuardianProgram::Path(env!("CARGO_BIN_EXE_procjournal-guardian").into());
    let guardian = GuardianLauncher::new(program).expect("guardian launcher");
    [
        ("group", Arc::new(GroupLauncher)),
        ("guardian", Arc::new(guardian)),
    ]
}

async fn open_with(root: &Path, launcher: Arc<dyn Launcher>) -> Supervisor {
    let mut cfg = config(root);
    cfg.launcher = launcher;
    open(cfg).await.0
}

async fn capture(sup: &Supervisor, command: Command, limits: CaptureLimits) -> CaptureResult {
    let prepared = sup.prepare(command).expect("prepare");
    guarded("capture", sup.capture(prepared, limits))
        .await
        .expect("capture")
}

fn limit(stream_bytes: usize) -> CaptureLimits {
    CaptureLimits { stream_bytes }
}

fn reasons(result: &CaptureResult, stream: Stream) -> Vec<Incomplete> {
    match &result.stream(stream).expect("stream").end {
        StreamEnd::Incomplete { reasons } => reasons.clone(),
        other => panic!("{stream:?} is not incomplete: {other:?}"),
    }
}

/// Every byte of one stream of `handle`'s output, read back from the spool (no hole allowed).
async fn spool_stream(sup: &Supervisor, handle: &Handle, stream: Stream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        let read = sup
            .output_raw(handle, cursor, 4 << 20)
            .await
            .expect("read output");
        assert!(read.skipped.is_none(), "{:?}", read.skipped);
        let start = read.next_cursor - read.bytes.len() as u64;
        for span in read.spans.iter().filter(|s| s.stream == stream) {
            let at = (span.cursor - start) as usize;
            out.extend_from_slice(&read.bytes[at..at + span.len as usize]);
        }
        if read.next_cursor >= read.total_bytes {
            return out;
        }
        cursor = read.next_cursor;
    }
}

/// Deterministic bytes that no run of a short period repeats in (an LCG's high bytes).
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        })
        .collect()
}

/// The case: 20 MiB to stdout against the default 16 MiB limit. The result is
/// incomplete with exactly the first 16 MiB written; the spool holds all 20 MiB, and the rest
/// starts at the receipt's cursor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_mib_give_a_sixteen_mib_prefix_and_the_spool_keeps_all() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let written = pattern(20 << 20);
    std::fs::write(root.path().join("data"), &written).expect("write data");
    let result = capture(&sup, sh(root.path(), "cat data"), CaptureLimits::default()).await;
    assert_eq!(CaptureLimits::default().stream_bytes, 16 << 20);
    assert_eq!(
        (result.status.state, result.status.exit),
        (State::Exited, ExitStatus::Code(0))
    );
    assert_eq!(result.status.capture, CaptureStatus::Complete);
    assert_eq!(result.fault, None);
    let out = result.stream(Stream::Stdout).expect("stdout");
    assert_eq!(out.bytes.len(), 16 << 20);
    assert!(
        out.bytes == written[..16 << 20],
        "the prefix is the first 16 MiB written"
    );
    assert_eq!(out.spool_bytes, 20 << 20);
    assert_eq!(
        reasons(&result, Stream::Stdout),
        vec![Incomplete::LimitExceeded { limit: 16 << 20 }]
    );
    assert_eq!(out.resume_cursor, 16 << 20, "stdout is the only stream");
    assert_eq!(
        result.stream(Stream::Stderr).map(|s| &s.end),
        Some(&StreamEnd::Eof)
    );
    assert_eq!(result.spool.total_bytes, 20 << 20);
    assert!(result.spool.dir.is_dir());
    // The consumer's helper refuses it, naming the stream and why.
    let refused = result.complete_stdout().expect_err("incomplete");
    assert_eq!(refused.stream, Stream::Stdout);
    assert!(
        matches!(&refused.why, Why::Incomplete(r) if r.len() == 1),
        "{refused}"
    );
    assert!(refused.to_string().contains("stdout"), "{refused}");
    assert_eq!(result.complete_stderr().expect("stderr is whole"), b"");
    // The spool has every byte, and the rest of the stream from the receipt's cursor.
    let spooled = spool_stream(&sup, &result.handle, Stream::Stdout).await;
    assert!(spooled == written, "the spool holds all 20 MiB as written");
    let rest = sup
        .output_raw(&result.handle, out.resume_cursor, 4 << 20)
        .await
        .expect("read the rest");
    assert!(
        rest.bytes == written[16 << 20..],
        "the rest starts at resume_cursor"
    );
    sup.shutdown(Duration::from_secs(2)).await;
}

/// A configured limit works the same way, per stream: stdout past it is a prefix, stderr under
/// it is whole; under the limit both are whole, at EOF, exactly as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_limit_applies_to_each_stream_alone() {
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let out_bytes = pattern(2500);
        let err_bytes: Vec<u8> = pattern(3000)[2500..].to_vec();
        std::fs::write(root.path().join("out"), &out_bytes).expect("write");
        std::fs::write(root.path().join("err"), &err_bytes).expect("write");
        let both = "cat out; cat err >&2";

        let over = capture(&sup, sh(root.path(), both), limit(1000)).await;
        let out = over.stream(Stream::Stdout).expect("stdout");
        assert_eq!(out.bytes, out_bytes[..1000], "{name}");
        assert_eq!(out.spool_bytes, 2500, "{name}");
        assert_eq!(
            reasons(&over, Stream::Stdout),
            vec![Incomplete::LimitExceeded { limit: 1000 }],
            "{name}"
        );
        assert_eq!(
            over.complete_stderr().expect("stderr is under the limit"),
            err_bytes,
            "{name}"
        );
        assert!(over.complete_stdout().is_err(), "{name}");
        assert!(!over.is_complete(), "{name}");

        let under = capture(&sup, sh(root.path(), both), limit(4096)).await;
        assert!(under.is_complete(), "{name}: {under:?}");
        assert_eq!(under.complete_stdout().expect("whole"), out_bytes, "{name}");
        assert_eq!(under.complete_stderr().expect("whole"), err_bytes, "{name}");
        for s in &under.streams {
            assert_eq!(s.end, StreamEnd::Eof, "{name}: {:?}", s.stream);
        }
        assert_eq!(under.status.exit, ExitStatus::Code(0), "{name}");
        assert!(
            under
                .complete_terminal()
                .is_err_and(|e| e.why == Why::NoSuchStream),
            "{name}"
        );
        // A capture's process is an ordinary one: in the journal, its output in the spool.
        let m = sup.manifest(&under.handle).expect("manifest");
        assert_eq!(m.state, State::Exited, "{name}");
        assert_eq!(m.bounds.total_bytes, 3000, "{name}");
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// A non-zero exit is not a fault: the output of a failing check is whole and parseable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_still_has_complete_output() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let result = capture(
        &sup,
        sh(root.path(), "echo 'FAILED: 1 test'; exit 1"),
        CaptureLimits::default(),
    )
    .await;
    assert_eq!(result.status.exit, ExitStatus::Code(1));
    assert_eq!(
        result.complete_stdout().expect("whole"),
        b"FAILED: 1 test\n"
    );
    sup.shutdown(Duration::from_secs(2)).await;
}

/// A receipt's safe-text prefix is cut on a character boundary: `世界` (3 bytes each) in 4-
/// and 1-byte prefixes is `世` (3 bytes covered), never `世` and a U+FFFD for half of `界`; a
/// base64 prefix is exactly the bytes asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_prefix_never_splits_a_character() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let result = capture(
        &sup,
        sh(root.path(), "printf '\\344\\270\\226\\347\\225\\214'"),
        CaptureLimits::default(),
    )
    .await;
    assert_eq!(result.complete_stdout().expect("whole"), "世界".as_bytes());
    for asked in [1, 3, 4, 5] {
        let receipt = result.receipt(asked, Rendering::SafeText);
        let stdout = &receipt.streams[0];
        assert_eq!(
            (stdout.prefix.as_str(), stdout.prefix_bytes),
            ("世", 3),
            "{asked}"
        );
    }
    let whole = result.receipt(6, Rendering::SafeText);
    assert_eq!(
        (
            whole.streams[0].prefix.as_str(),
            whole.streams[0].prefix_bytes
        ),
        ("世界", 6)
    );
    let raw = result.receipt(4, Rendering::Base64);
    assert_eq!(
        (raw.streams[0].prefix.as_str(), raw.streams[0].prefix_bytes),
        ("5LiW5w==", 4)
    );
    sup.shutdown(Duration::from_secs(2)).await;
}

/// Nobody types into a capture: a command that reads its input gets end of file at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_reads_input_gets_end_of_file() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let piped = capture(
        &sup,
        sh(root.path(), "cat; echo read-all"),
        CaptureLimits::default(),
    )
    .await;
    assert_eq!(piped.complete_stdout().expect("whole"), b"read-all\n");
    let terminal = Command::new("sh")
        .args(["-c", "cat; echo read-all"])
        .cwd(root.path())
        .pty(24, 80);
    let terminal = capture(&sup, terminal, CaptureLimits::default()).await;
    assert_eq!(
        terminal.complete_terminal().expect("whole"),
        b"read-all\r\n"
    );
    sup.shutdown(Duration::from_secs(2)).await;
}

/// A background descendant that writes on after the root exited holds the pipes open: the
/// capture returns once the final-drain window after the root's exit ends (the hang guard only
/// catches a hang), with the root's status, and the held streams incomplete for that reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descendant_that_writes_on_is_cut_off_by_the_drain_bound() {
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let script = "setsid sh -c 'echo $$ > writer.pid; while :; do echo tick; echo tock >&2; \
                      sleep 0.01; done' & \
                      while [ ! -s writer.pid ]; do sleep 0.01; done; exit 3";
        let result = capture(&sup, sh(root.path(), script), CaptureLimits::default()).await;
        let pid: i32 = std::fs::read_to_string(root.path().join("writer.pid"))
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert_eq!(
            (result.status.state, result.status.exit),
            (State::Exited, ExitStatus::Code(3)),
            "{name}: the root's exit"
        );
        assert_eq!(result.fault, None, "{name}");
        for stream in [Stream::Stdout, Stream::Stderr] {
            assert!(
                reasons(&result, stream).contains(&Incomplete::DrainBound {
                    final_drain_ms: 200
                }),
                "{name}: {stream:?}"
            );
        }
        let refused = result.complete_stdout().expect_err("held open");
        assert!(matches!(refused.why, Why::Incomplete(_)), "{name}");
        assert!(
            matches!(result.status.capture, CaptureStatus::Incomplete(_)),
            "{name}"
        );
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// A wall deadline during capture ends the run through the shared termination; the result
/// keeps the deadline as its fault (not the SIGTERM that followed it), and the helper refuses
/// even the stream that reached EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_deadline_is_the_fault_not_the_signal() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let command =
        sh(root.path(), "echo started; exec sleep 600").timeout(Duration::from_millis(300));
    let result = capture(&sup, command, CaptureLimits::default()).await;
    assert_eq!(result.status.state, State::TimedOut);
    assert_eq!(
        result.fault,
        Some(CaptureFault::Deadline {
            deadline: Deadline::Wall,
            limit_ms: 300
        })
    );
    assert!(
        matches!(result.status.exit, ExitStatus::Signal(_)),
        "{:?}",
        result.status.exit
    );
    let out = result.stream(Stream::Stdout).expect("stdout");
    assert_eq!(
        (out.bytes.as_slice(), &out.end),
        (&b"started\n"[..], &StreamEnd::Eof)
    );
    let refused = result.complete_stdout().expect_err("cut short");
    assert!(
        matches!(refused.why, Why::Fault(CaptureFault::Deadline { .. })),
        "{refused}"
    );
    assert!(refused.to_string().contains("wall deadline"), "{refused}");
    let receipt = result.receipt(1024, Rendering::SafeText);
    assert!(!receipt.complete);
    let json = serde_json::to_value(&receipt).expect("json");
    assert_eq!(json["fault"]["fault"], "deadline");
    assert_eq!(json["fault"]["deadline"], "wall");
    assert_eq!(json["streams"][0]["prefix"], "started\n");
    sup.shutdown(Duration::from_secs(2)).await;
}

/// Under a terminal there is one stream, `terminal`: the raw bytes (with the terminal's `\r\n`)
/// and nothing else; a full-screen program's escape sequences are captured exactly and the
/// receipt's safe text has none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_capture_has_one_raw_stream() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let screen = "\x1b[?1049h\x1b[2J\x1b[1;1Hfull screen\x1b[?1049l";
    let command = Command::new("printf")
        .arg(format!("{screen}\\n"))
        .cwd(root.path())
        .pty(24, 80);
    let result = capture(&sup, command, CaptureLimits::default()).await;
    assert_eq!(result.streams.len(), 1);
    let expected = format!("{screen}\r\n");
    assert_eq!(
        result.complete_terminal().expect("whole"),
        expected.as_bytes()
    );
    assert!(
        result
            .complete_stdout()
            .is_err_and(|e| e.why == Why::NoSuchStream)
    );
    let receipt = result.receipt(4096, Rendering::SafeText);
    assert_eq!(receipt.streams[0].prefix, "full screen\n");
    sup.shutdown(Duration::from_secs(2)).await;
}

/// A capture dropped before its result stops its process through the stop path (nobody is
/// left to read what it was started for), and the stop request says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_capture_stops_its_process() {
    abandon_once_written(true).await;
}

/// A capture dropped after the actor answered its start, but before it read the answer, stops
/// its process too: the actor's answer found someone, so the actor does not stop it. Polled
/// once (its start sent, its answer awaited), then left unpolled until its process runs and
/// has written (by then the answer is sent), then dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_dropped_with_its_answer_unread_stops_its_process() {
    abandon_once_written(false).await;
}

/// Starts a capture of a command that writes and then sleeps, drops the capture once its
/// process runs and has written, and checks the process was stopped as abandoned. The capture
/// is polled once first (its start sent), and driven while waiting only when `driven`.
async fn abandon_once_written(driven: bool) {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let prepared = sup
        .prepare(sh(root.path(), "echo up; exec sleep 600"))
        .expect("prepare");
    // Boxed: dropping it drops the capture itself.
    let mut capturing = Box::pin(sup.capture(prepared, CaptureLimits::default()));
    tokio::select! {
        biased;
        r = &mut capturing => panic!("the capture ended by itself: {r:?}"),
        () = std::future::ready(()) => {}
    }
    let handle = loop {
        let pause = tokio::time::sleep(Duration::from_millis(20));
        if driven {
            tokio::select! {
                r = &mut capturing => panic!("the capture ended by itself: {r:?}"),
                () = pause => {}
            }
        } else {
            pause.await;
        }
        let Some(m) = sup.list(&Default::default()).pop() else {
            continue;
        };
        let written = sup
            .output_raw(&m.handle, 0, 16)
            .await
            .map_or(0, |r| r.total_bytes);
        if m.state == State::Running && written > 0 {
            break m.handle;
        }
    };
    drop(capturing);
    ends_as_abandoned(&sup, &handle).await;
    sup.shutdown(Duration::from_secs(2)).await;
}

/// Waits for `handle` to end and checks it was stopped as an abandoned capture's process.
async fn ends_as_abandoned(sup: &Supervisor, handle: &Handle) {
    let summary = guarded("wait", sup.wait(handle, None)).await.expect("wait");
    assert_eq!(summary.state, State::Terminated);
    let m = sup.manifest(handle).expect("manifest");
    assert_eq!(
        m.first_stop.as_ref().map(|(reason, _)| reason.as_str()),
        Some("capture abandoned")
    );
}

/// A capture dropped before its start was answered (it never learned the handle) still owns its
/// process: the start's answer finds no one and stops the process as an abandoned capture's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_dropped_during_its_start_stops_its_process() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    let prepared = sup
        .prepare(sh(root.path(), "exec sleep 600"))
        .expect("prepare");
    // Polled once (the start is sent to the supervisor), then dropped at once: its answer comes
    // only after the spawn, which takes far longer than one poll.
    let dropped = tokio::time::timeout(
        Duration::ZERO,
        sup.capture(prepared, CaptureLimits::default()),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the capture finished within one poll: {dropped:?}"
    );
    let handle = guarded("the start", async {
        loop {
            if let Some(m) = sup.list(&Default::default()).pop() {
                break m.handle;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    ends_as_abandoned(&sup, &handle).await;
    sup.shutdown(Duration::from_secs(2)).await;
}

/// Limits out of range are refused before anything starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_out_of_range_start_nothing() {
    let root = temp_root();
    let sup = open(config(root.path())).await.0;
    for bad in [0, procjournal::limits::CAPTURE_STREAM_BYTES_MAX + 1] {
        let prepared = sup.prepare(sh(root.path(), "true")).expect("prepare");
        let refused = sup.capture(prepared, limit(bad)).await;
        assert!(
            matches!(
                refused,
                Err(procjournal::supervisor::CaptureError::Limits { .. })
            ),
            "{bad}"
        );
    }
    assert!(sup.list(&Default::default()).is_empty());
    sup.shutdown(Duration::from_secs(2)).await;
}
