//! PTY launches: a workload under a real terminal, with and without a
//! guardian. Real terminals, real processes, real signals.

use crate::common::supervisor as supervisor_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use procjournal::lifecycle::LifecycleEvent;
use procjournal::lifecycle::State;
use procjournal::lifecycle::event::CaptureStatus;
use procjournal::spool::format::Stream;
use procjournal::supervisor::{Command, Supervisor};
use procjournal::supervisor::{Rendering, SupervisorError};
use procjournal::tree::{GroupLauncher, GuardianLauncher, GuardianProgram, Launcher};
use supervisor_common::{config, guarded, journal_records, open, start, temp_root};

fn guardian() -> Arc<dyn Launcher> {
    let program = GuardianProgram::Path(env!("CARGO_BIN_EXE_procjournal-guardian").into());
    Arc::new(GuardianLauncher::new(program).expect("guardian launcher"))
}

fn launchers() -> [(&'static str, Arc<dyn Launcher>); 2] {
    [("group", Arc::new(GroupLauncher)), ("guardian", guardian())]
}

async fn open_with(root: &Path, launcher: Arc<dyn Launcher>) -> Supervisor {
    let mut cfg = config(root);
    cfg.launcher = launcher;
    open(cfg).await.0
}

/// Every byte of `handle`'s output from cursor 0, checking that each is the terminal's.
async fn terminal_output(sup: &Supervisor, handle: &procjournal::lifecycle::Handle) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        let read = sup
            .output_raw(handle, cursor, 1024 * 1024)
            .await
            .expect("read output");
        assert!(
            read.skipped.is_none(),
            "nothing skipped: {:?}",
            read.skipped
        );
        for span in &read.spans {
            assert_eq!(span.stream, Stream::Terminal, "a PTY launch has one stream");
        }
        out.extend_from_slice(&read.bytes);
        if read.next_cursor >= read.total_bytes || read.bytes.is_empty() {
            return out;
        }
        cursor = read.next_cursor;
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// The workload's standard streams are a terminal of the launch's size, and its controlling
/// terminal (`/dev/tty` opens only for a process with one); what it wrote is the terminal
/// stream, with the terminal's output processing (`\n` as `\r\n`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_sees_a_controlling_terminal_of_the_launch_size() {
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let h = start(
            &sup,
            Command::new("sh")
                .arg("-c")
                .arg("stty size; test -t 0 && test -t 1 && test -t 2 && echo tty012; : </dev/tty && echo ctty")
                .cwd(root.path())
                .pty(30, 100),
        )
        .await;
        let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
        assert_eq!(summary.state, State::Exited, "{name}: {summary:?}");
        assert_eq!(summary.capture, CaptureStatus::Complete, "{name}");
        let out = text(&terminal_output(&sup, &h).await);
        assert_eq!(out, "30 100\r\ntty012\r\nctty\r\n", "{name}");
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// A size of 0 is refused before anything is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_without_rows_or_columns_is_refused() {
    let root = temp_root();
    let sup = open_with(root.path(), Arc::new(GroupLauncher)).await;
    let refused = sup.prepare(Command::new("true").cwd(root.path()).pty(0, 80));
    assert!(refused.is_err(), "{refused:?}");
    sup.shutdown(Duration::from_secs(2)).await;
}

/// 200 KB written just before the exit are all captured: the master's end of output (EIO) comes
/// only after the bytes the slave wrote, and the final drain starts after what the terminal held
/// at the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_written_just_before_the_exit_is_all_captured() {
    const BYTES: usize = 200 * 1024;
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let h = start(
            &sup,
            Command::new("sh")
                .arg("-c")
                .arg(format!("head -c {BYTES} /dev/zero | tr '\\0' x; exit 3"))
                .cwd(root.path())
                .pty(24, 80),
        )
        .await;
        let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
        assert_eq!(summary.state, State::Exited, "{name}: {summary:?}");
        assert_eq!(summary.capture, CaptureStatus::Complete, "{name}");
        assert_eq!(summary.bounds.total_bytes, BYTES as u64, "{name}");
        let out = terminal_output(&sup, &h).await;
        assert_eq!(out.len(), BYTES, "{name}");
        assert!(out.iter().all(|&b| b == b'x'), "{name}");
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// A full-screen program (the alternate screen, a clear, cursor addressing, then back) is kept
/// raw, byte for byte as it wrote it, and its safe-text rendering has none of the sequences:
/// only the text it placed on the screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_screen_program_is_kept_raw_and_rendered_safely() {
    // terminfo's sequences for xterm when `tput` is there, else the same kind by hand.
    let script = if std::process::Command::new("tput")
        .arg("-V")
        .output()
        .is_ok()
    {
        "tput smcup; tput clear; tput cup 5 10; printf 'full screen'; tput cup 6 10; \
         printf 'second'; tput rmcup"
    } else {
        "printf '\\033[?1049h\\033[H\\033[2J\\033[6;11Hfull screen\\033[7;11Hsecond\\033[?1049l'"
    };
    // What the program writes, through a pipe: the terminal must not change a byte of it (it
    // has no newline for the terminal's output processing to turn into \r\n).
    let expected = std::process::Command::new("sh")
        .args(["-c", script])
        .env("TERM", "xterm")
        .output()
        .expect("run the script")
        .stdout;
    assert!(
        expected.contains(&0x1b) && !expected.contains(&b'\n'),
        "{expected:?}"
    );
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let h = start(
            &sup,
            Command::new("sh")
                .args(["-c", script])
                .env("TERM", "xterm")
                .cwd(root.path())
                .pty(24, 80),
        )
        .await;
        let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
        assert_eq!(summary.capture, CaptureStatus::Complete, "{name}");
        assert_eq!(terminal_output(&sup, &h).await, expected, "{name}: raw");
        let page = sup
            .output(&h, 0, 64 * 1024, Rendering::SafeText)
            .await
            .expect("safe text");
        assert_eq!(page.data, "full screensecond", "{name}: {page:?}");
        assert!(page.normalized && !page.data.contains('\u{1b}'), "{name}");
        let raw = sup
            .output(&h, 0, 64 * 1024, Rendering::Base64)
            .await
            .expect("base64");
        assert!(
            !raw.normalized && raw.next_cursor == expected.len() as u64,
            "{name}"
        );
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// Input goes to the terminal: the line discipline echoes it, and the workload reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_goes_to_the_terminal() {
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let h = start(
            &sup,
            Command::new("sh")
                .arg("-c")
                .arg("read line; echo got:$line")
                .cwd(root.path())
                .pty(24, 80),
        )
        .await;
        sup.input(&h, b"hello\n").await.expect("input");
        let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
        assert_eq!(summary.state, State::Exited, "{name}: {summary:?}");
        let out = text(&terminal_output(&sup, &h).await);
        assert_eq!(
            out, "hello\r\ngot:hello\r\n",
            "{name}: echo, then the answer"
        );
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// Closing a terminal's input is the end-of-file character: `cat` ends as at a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_input_of_a_terminal_ends_a_reader() {
    let root = temp_root();
    let sup = open_with(root.path(), guardian()).await;
    let h = start(&sup, Command::new("cat").cwd(root.path()).pty(24, 80)).await;
    sup.input(&h, b"abc\n").await.expect("input");
    sup.close_input(&h).await.expect("close input");
    let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    assert_eq!(summary.state, State::Exited, "{summary:?}");
    assert_eq!(summary.capture, CaptureStatus::Complete);
    let out = text(&terminal_output(&sup, &h).await);
    assert!(out.starts_with("abc\r\nabc\r\n"), "{out:?}");
    sup.shutdown(Duration::from_secs(2)).await;
}

/// A descendant in a session of its own that holds the terminal open does not withhold the
/// result: the final drain ends the capture (reported incomplete) while it still runs, and the
/// guardian's tree then stays owned until stop takes it down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_descendant_holding_the_terminal_does_not_withhold_the_result() {
    let root = temp_root();
    let sup = open_with(root.path(), guardian()).await;
    let h = start(
        &sup,
        Command::new("sh")
            .arg("-c")
            // The shell waits (on a FIFO) until the holder has left its session: a holder still
            // in the shell's process group would get the SIGHUP the shell's exit sends there.
            .arg("mkfifo f; setsid sh -c 'echo pid:$$ >f; exec sleep 300' & cat f")
            .cwd(root.path())
            .pty(24, 80),
    )
    .await;
    let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
    let out = text(&terminal_output(&sup, &h).await);
    assert_eq!(summary.state, State::Exited, "{summary:?}");
    assert!(
        matches!(summary.capture, CaptureStatus::Incomplete(_)),
        "{:?} {out:?}",
        summary.capture
    );
    let pid: u32 = out
        .trim()
        .strip_prefix("pid:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(alive(pid), "the holder still runs when the result is out");
    guarded("stop", sup.stop(&h, Duration::from_secs(1)))
        .await
        .expect("stop the lingering tree");
    assert!(!alive(pid), "stop took the holder down");
    sup.shutdown(Duration::from_secs(2)).await;
}

/// Stop takes a PTY tree down whole: the shell and its background child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_takes_a_terminal_tree_down() {
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let h = start(
            &sup,
            Command::new("sh")
                .arg("-c")
                .arg("sleep 300 & echo pid:$!; wait")
                .cwd(root.path())
                .pty(24, 80),
        )
        .await;
        let mut out = String::new();
        guarded("the child's pid", async {
            while !out.contains('\n') {
                sup.output_changed(&h, out.len() as u64).await;
                out = text(&terminal_output(&sup, &h).await);
            }
        })
        .await;
        let pid: u32 = out
            .trim()
            .strip_prefix("pid:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {out:?}"));
        let summary = guarded("stop", sup.stop(&h, Duration::from_secs(1)))
            .await
            .expect("stop");
        assert!(
            matches!(summary.state, State::Terminated | State::Killed),
            "{name}: {summary:?}"
        );
        assert!(!alive(pid), "{name}: the background child is gone");
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// A resize reaches the workload (a program that asks sees the new size) and is journaled:
/// the launch size rides `running`, each resize follows in the order applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_reaches_the_workload_and_is_journaled() {
    for (name, launcher) in launchers() {
        let root = temp_root();
        let sup = open_with(root.path(), launcher).await;
        let h = start(
            &sup,
            Command::new("sh")
                .arg("-c")
                .arg("stty size; read x; stty size")
                .cwd(root.path())
                .pty(30, 100),
        )
        .await;
        // The first size is out before the resize, so that it is the launch's.
        guarded("the first size", async {
            while !text(&terminal_output(&sup, &h).await).contains('\n') {
                sup.output_changed(&h, 0).await;
            }
        })
        .await;
        sup.resize(&h, 40, 120).await.expect("resize");
        sup.input(&h, b"go\n").await.expect("input");
        let summary = guarded("wait", sup.wait(&h, None)).await.expect("wait");
        assert_eq!(summary.state, State::Exited, "{name}: {summary:?}");
        let out = text(&terminal_output(&sup, &h).await);
        assert_eq!(out, "30 100\r\ngo\r\n40 120\r\n", "{name}");
        let sizes: Vec<(u16, u16)> = journal_records(&root.path().join("rt"))
            .into_iter()
            .filter_map(|r| match r.event {
                LifecycleEvent::TerminalResized(e) if e.handle == h => Some((e.rows, e.cols)),
                _ => None,
            })
            .collect();
        assert_eq!(sizes, [(30, 100), (40, 120)], "{name}");
        // Ended: nothing to resize.
        assert!(
            matches!(
                sup.resize(&h, 10, 10).await,
                Err(SupervisorError::NotRunning(_))
            ),
            "{name}"
        );
        sup.shutdown(Duration::from_secs(2)).await;
    }
}

/// A pipe launch has no terminal to resize, and a terminal has at least one row and column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_terminal_is_resized_and_never_to_nothing() {
    let root = temp_root();
    let sup = open_with(root.path(), Arc::new(GroupLauncher)).await;
    let piped = start(&sup, Command::new("sleep").arg("30").cwd(root.path())).await;
    assert!(matches!(
        sup.resize(&piped, 10, 10).await,
        Err(SupervisorError::NoTerminal(_))
    ));
    let tty = start(
        &sup,
        Command::new("sleep").arg("30").cwd(root.path()).pty(5, 5),
    )
    .await;
    assert!(matches!(
        sup.resize(&tty, 0, 10).await,
        Err(SupervisorError::Resize { .. })
    ));
    for h in [piped, tty] {
        guarded("stop", sup.stop(&h, Duration::from_secs(1)))
            .await
            .expect("stop");
    }
    sup.shutdown(Duration::from_secs(2)).await;
}
