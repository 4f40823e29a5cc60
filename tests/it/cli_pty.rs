//! `procjournal run --pty` end to end: driven from a real terminal (a tmux pane), and without
//! one. tmux is installed by `.ci/run`; where it is missing the tmux test says so and passes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs tmux on its own server socket (so no user session is touched).
fn tmux(socket: &Path, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .output()
        .expect("run tmux");
    assert!(
        out.status.success(),
        "tmux {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls the pane until `done` holds; the bound only turns a hang into a failure.
fn until(socket: &Path, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let screen = tmux(socket, &["capture-pane", "-p", "-t", "t"]);
        if done(&screen) {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {what}; screen:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct KillServer<'a>(&'a Path);

impl Drop for KillServer<'_> {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(self.0)
            .arg("kill-server")
            .status();
    }
}

/// In a tmux pane: `procjournal run --pty -- bash` gets the pane's size, a typed command runs
/// in it and its answer comes back to the pane, a resize of the pane reaches bash (SIGWINCH
/// forwarded), and after `exit` the pane's terminal is out of raw mode again.
#[test]
fn run_pty_drives_bash_from_a_real_terminal() {
    if !tmux_available() {
        println!("SKIPPED: tmux is not installed (.ci/run installs it with apt-get)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tmux.sock");
    let root = dir.path().join("root");
    let exe = env!("CARGO_BIN_EXE_procjournal");
    let _kill = KillServer(&socket);
    // The pane runs a shell script: the run, then the pane's terminal settings after it.
    let script = dir.path().join("pane.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{exe} run --root {root} --pty -- bash --norc --noprofile; echo \"run-exit:$?\"; stty -a | grep -o -- '-\\?icanon' | head -1; sleep 600\n",
            root = root.display()
        ),
    )
    .unwrap();
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "100",
            "-y",
            "30",
            "sh",
            script.to_str().unwrap(),
        ],
    );
    until(&socket, "bash's prompt", |s| {
        s.contains('$') || s.contains('#')
    });
    tmux(
        &socket,
        &[
            "send-keys",
            "-t",
            "t",
            "stty size; echo hello-$((6*7))",
            "Enter",
        ],
    );
    let screen = until(&socket, "the answer", |s| s.contains("hello-42"));
    assert!(
        screen.contains("30 100"),
        "bash sees the pane's size:\n{screen}"
    );
    tmux(
        &socket,
        &["resize-window", "-t", "t", "-x", "120", "-y", "40"],
    );
    // The resize reaches bash through SIGWINCH on our side and a resize on its terminal.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tmux(
            &socket,
            &["send-keys", "-t", "t", "clear; stty size", "Enter"],
        );
        std::thread::sleep(Duration::from_millis(200));
        let screen = tmux(&socket, &["capture-pane", "-p", "-t", "t"]);
        if screen.contains("40 120") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "bash never saw 40x120:\n{screen}"
        );
    }
    tmux(&socket, &["send-keys", "-t", "t", "exit 7", "Enter"]);
    let screen = until(&socket, "the run's end", |s| s.contains("run-exit:"));
    assert!(
        screen.contains("run-exit:7"),
        "the exit status is bash's:\n{screen}"
    );
    let screen = until(&socket, "the terminal's mode", |s| s.contains("icanon"));
    assert!(
        screen.lines().any(|l| l.trim() == "icanon"),
        "the pane's terminal is canonical again (raw mode restored):\n{screen}"
    );
}

/// Without a terminal of its own, `run --pty` still runs the command under one (24x80), fed
/// from stdin; stdin's end is the end-of-file character.
#[test]
fn run_pty_without_a_terminal_uses_24x80_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_procjournal"))
        .args(["run", "--root"])
        .arg(dir.path().join("root"))
        .args([
            "--pty",
            "--",
            "sh",
            "-c",
            "stty size; test -t 0 && echo tty; read l; echo got:$l",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(b"typed\n")?;
            child.wait_with_output()
        })
        .expect("run procjournal");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The terminal echoes what was typed, whenever it arrives; the answers come in order.
    let answers = stdout.replacen("typed\r\n", "", 1);
    assert_eq!(answers, "24 80\r\ntty\r\ngot:typed\r\n", "{stdout:?}");
}

/// An interactive shell and a REPL on a terminal whose input ends at once (stdin /dev/null, the
/// docs/cli.md's `run --pty -- bash` from a script) end, as they would reading a pipe at its end: the
/// first Ctrl-D reaches the terminal before readline takes it out of canonical mode, which turns
/// it into a NUL byte; the end-of-file character is typed again at the next prompt. Before, both
/// waited forever. Also a canonical reader (`cat`) still sees the first one.
#[test]
fn run_pty_with_stdin_at_its_end_ends_readline_programs() {
    let dir = tempfile::tempdir().unwrap();
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["bash"],
        vec!["bash", "--norc", "-i"],
        vec!["sh", "-c", "cat; echo cat-saw-the-end"],
    ];
    let python = Command::new("python3").arg("--version").output().is_ok();
    if python {
        commands.push(vec!["python3", "-i"]);
    } else {
        eprintln!("python3 not installed: its REPL is not run");
    }
    for command in commands {
        let mut child = Command::new(env!("CARGO_BIN_EXE_procjournal"))
            .args(["run", "--root"])
            .arg(dir.path().join("root"))
            .args(["--pty", "--"])
            .args(&command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Only a guard against the hang this test is about: no time is asserted.
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{command:?} on a terminal whose input ended is still running");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(status.success(), "{command:?}: {status}\n{stdout}");
        if command[0] == "sh" {
            assert!(stdout.contains("cat-saw-the-end"), "{stdout:?}");
        }
    }
}
