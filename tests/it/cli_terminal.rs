//! The command-line conventions on a real terminal: the `procjournal` binary with a
//! pseudo-terminal as its stdout and stderr, everything it wrote read back from the master side.
//!
//! - Untrusted strings (a label, a working directory and command words holding an OSC title
//!   sequence, a CSI clear screen, a bare CR, the C1 control U+009B and the bidi override
//!   U+202E) reach the terminal only escaped: in `ps`, `ps --format`, `journal manifests`,
//!   `journal dump`, errors that quote them (the CLI's, clap's usage errors, the daemon's), both
//!   offline and through a daemon; `logs` shows the command's own output as safe text, with
//!   every escape sequence and control removed, as docs/cli.md promises.
//! - The progress bar of the long scans is drawn on a terminal stderr (its label and a position
//!   past the start, without any clock: the bar is drawn as the scan starts and indicatif lets
//!   the first updates through), cleared at the end, never drawn on a pipe and never written to
//!   stdout.

use crate::common::daemon as daemon_common;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use daemon_common::{Daemon, bin, client};
use nix::fcntl::OFlag;
use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};

/// Terminal control sequences as an attacker would put them in a label or a command word.
const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J\r\u{9b}\u{202e}";
/// [`HOSTILE`] as `render::escape_field` shows it.
const ESCAPED: &str = r"\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}\u{202e}";
/// Only a hang fails on time: a run prints what it has within milliseconds.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A terminal pair: the test reads the master; the slave is the binary's stdout or stderr.
struct Pty {
    master: nix::pty::PtyMaster,
    slave: OwnedFd,
}

/// A fresh 24x100 terminal. Both ends are close-on-exec from the start (`posix_openpt` with
/// `O_CLOEXEC`, the slave opened by std), so a daemon another test spawns meanwhile never
/// inherits one and keeps the terminal open.
fn pty() -> Pty {
    let master =
        nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC).unwrap();
    nix::pty::grantpt(&master).unwrap();
    nix::pty::unlockpt(&master).unwrap();
    let path = nix::pty::ptsname_r(&master).unwrap();
    let slave: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
        .unwrap()
        .into();
    rustix::termios::tcsetwinsize(
        &slave,
        rustix::termios::Winsize {
            ws_row: 24,
            ws_col: 100,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .unwrap();
    Pty { master, slave }
}

/// Which of the binary's outputs is the terminal.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Term {
    Both,
    Stdout,
    Stderr,
}

/// What one run left: its status, every byte the terminal got, and what went to pipes.
struct Seen {
    status: i32,
    screen: Vec<u8>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs the binary with `args` and the terminal on `term` (the other output a pipe), as a
/// terminal emulator would start it (`TERM=xterm`); `PROCJOURNAL_PROGRESS` as `progress` says.
fn on_terminal(args: &[&str], term: Term, progress: Option<&str>) -> Seen {
    let Pty { master, slave } = pty();
    let mut cmd = bin();
    cmd.args(args)
        .env("TERM", "xterm")
        .env_remove("PROCJOURNAL_PROGRESS")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(value) = progress {
        cmd.env("PROCJOURNAL_PROGRESS", value);
    }
    if term != Term::Stderr {
        cmd.stdout(Stdio::from(slave.try_clone().unwrap()));
    }
    if term != Term::Stdout {
        cmd.stderr(Stdio::from(slave.try_clone().unwrap()));
    }
    let child = cmd.spawn().unwrap();
    // Only the child holds the slave now, so the master reads EIO once it has exited.
    drop(cmd);
    drop(slave);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut master = master;
        let mut screen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match master.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => screen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(screen);
    });
    let out = child.wait_with_output().unwrap();
    let screen = rx
        .recv_timeout(HANG_GUARD)
        .unwrap_or_else(|_| panic!("{args:?}: the terminal stayed open after the run ended"));
    Seen {
        status: out.status.code().unwrap_or(-1),
        screen,
        stdout: out.stdout,
        stderr: out.stderr,
    }
}

/// `args` with `--root ROOT` after the subcommand (two words for `journal` and `spool`).
fn rooted<'a>(args: &[&'a str], root: &'a str) -> Vec<&'a str> {
    let at = if ["journal", "spool"].contains(&args[0]) {
        2
    } else {
        1
    };
    let mut all = args[..at].to_vec();
    all.extend(["--root", root]);
    all.extend_from_slice(&args[at..]);
    all
}

/// clap's colours on a terminal (SGR, `ESC [ ... m`): the only escape sequences procjournal
/// writes itself, taken out before looking for others.
fn without_colours(screen: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(screen.len());
    let mut i = 0;
    while i < screen.len() {
        if screen[i..].starts_with(b"\x1b[") {
            let params = screen[i + 2..]
                .iter()
                .take_while(|b| b.is_ascii_digit() || **b == b';')
                .count();
            if screen.get(i + 2 + params) == Some(&b'm') {
                i += 3 + params;
                continue;
            }
        }
        out.push(screen[i]);
        i += 1;
    }
    out
}

/// Nothing of [`HOSTILE`] reached the terminal raw: no ESC, BEL, C1 control or bidi override,
/// and no CR but the terminal's own before each newline (the pty turns `\n` into `\r\n`).
fn assert_inert(what: &str, screen: &[u8]) {
    let text = String::from_utf8_lossy(screen);
    let raw = |needle: &str| text.contains(needle);
    assert!(
        !raw("\x1b") && !raw("\x07") && !raw("\u{9b}") && !raw("\u{202e}"),
        "{what}: a raw control reached the terminal: {text:?}"
    );
    let bare_cr = screen
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\r' && screen.get(i + 1) != Some(&b'\n'));
    assert!(!bare_cr, "{what}: a bare CR reached the terminal: {text:?}");
}

/// Runs `args` against `root` with the terminal as stdout and stderr (no progress bar: its
/// own escape sequences are not under test here) and checks that the terminal shows `shown`
/// and nothing raw; returns the status.
fn check_escaped(root: &str, args: &[&str], shown: &str) -> i32 {
    let seen = on_terminal(&rooted(args, root), Term::Both, Some("0"));
    let screen = without_colours(&seen.screen);
    assert_inert(&format!("{args:?}"), &screen);
    let text = String::from_utf8_lossy(&screen);
    assert!(text.contains(shown), "{args:?} shows no {shown:?}: {text}");
    seen.status
}

/// Process 1: a label, a working directory and two command words holding [`HOSTILE`], started
/// through pipes by `through` (`run`, or `start` with a daemon); it prints `out:`, [`HOSTILE`]
/// and `:end`.
fn start_hostile(root: &Path, through: &str) {
    let cwd = root.join(format!("cwd-{HOSTILE}"));
    std::fs::create_dir_all(&cwd).unwrap();
    let label = format!("t={HOSTILE}");
    let script = r#"printf 'out:%s:end\n' "$1""#;
    let args = [
        through,
        "--label",
        &label,
        "--cwd",
        cwd.to_str().unwrap(),
        "--",
    ];
    let command = ["sh", "-c", script, HOSTILE, HOSTILE];
    let (status, _, err) = client(root, &[&args[..], &command[..]].concat());
    assert_eq!(status, 0, "{err}");
}

/// Every human rendering of the hostile process, and the errors that quote a hostile string.
fn check_renderings(root: &str, daemon: bool) {
    let label = format!("t={ESCAPED}");
    assert_eq!(check_escaped(root, &["ps"], ESCAPED), 0);
    let format = ["ps", "--format", "number,handle,labels,command,cwd"];
    assert_eq!(check_escaped(root, &format, &format!("cwd-{ESCAPED}")), 0);
    assert_eq!(check_escaped(root, &format, &label), 0);
    assert_eq!(
        check_escaped(root, &["ps", "--label", &format!("t={HOSTILE}")], ESCAPED),
        0
    );
    // The command's own output as safe text, as docs/cli.md promises: its escape sequences and
    // controls removed, the CR a line break, the text around them kept. A bidi override is a
    // character of the text there, not a control, and is not removed (only escaped fields are
    // held to that).
    let seen = on_terminal(&rooted(&["logs", "1"], root), Term::Both, Some("0"));
    assert_eq!(seen.status, 0);
    let text = String::from_utf8(seen.screen).unwrap();
    assert_inert("logs", text.replace('\u{202e}', "").as_bytes());
    assert!(
        text.contains("out:\r\n") && text.contains(":end\r\n"),
        "{text:?}"
    );
    // Errors quoting what was typed: a reference clap refuses, an unknown argument, an
    // invalid value, an invalid name, a program that does not exist.
    assert_eq!(check_escaped(root, &["logs", HOSTILE], ESCAPED), 125);
    assert_eq!(check_escaped(root, &["logs", "1", HOSTILE], ESCAPED), 125);
    assert_eq!(
        check_escaped(root, &["ps", "--state", HOSTILE], ESCAPED),
        125
    );
    assert_eq!(check_escaped(root, &[HOSTILE], ESCAPED), 125);
    let verb = if daemon { "start" } else { "run" };
    // The name's error quotes it as Rust does (`{:?}`), whose backslashes the CLI's escaping
    // then doubles: shown twice escaped, and still nothing raw.
    let twice = ESCAPED.replace('\\', r"\\");
    assert_eq!(
        check_escaped(root, &[verb, "--name", HOSTILE, "--", "true"], &twice),
        125
    );
    let program = format!("./{HOSTILE}");
    assert_eq!(check_escaped(root, &[verb, "--", &program], ESCAPED), 127);
}

/// Offline (no daemon): `ps`, `journal manifests` and `journal dump` read the journal itself.
#[test]
fn untrusted_strings_reach_a_terminal_escaped_offline() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    start_hostile(dir.path(), "run");
    check_renderings(root, false);
    let label = format!("t={ESCAPED}");
    assert_eq!(check_escaped(root, &["journal", "manifests"], &label), 0);
    let dump = ["journal", "dump"];
    assert_eq!(
        check_escaped(root, &dump, &format!("command.labels.{label}")),
        0
    );
    assert_eq!(check_escaped(root, &dump, &format!("cwd-{ESCAPED}")), 0);
    // JSON keeps the string for programs, and on a terminal it is inert too: JSON escapes ESC,
    // BEL and CR itself, and the CLI also writes DEL, the C1 controls and the bidi controls as
    // \u escapes (serde_json leaves them raw).
    for args in [
        &["ps", "--json"][..],
        &["journal", "manifests", "--json"],
        &["journal", "dump", "--json"],
    ] {
        let seen = on_terminal(&rooted(args, root), Term::Both, Some("0"));
        assert_eq!(seen.status, 0, "{args:?}");
        assert_inert(&format!("{args:?}"), &seen.screen);
    }
    let (_, json, _) = client(dir.path(), &["ps", "--json"]);
    assert!(
        json.contains(r"\u009b") && json.contains(r"\u202e"),
        "{json}"
    );
    let row: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(row["labels"]["t"], HOSTILE);
}

/// Through a daemon: `ps` renders the daemon's answers, `logs` its pages, and a spawn failure
/// is the daemon's error text.
#[test]
fn untrusted_strings_reach_a_terminal_escaped_through_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let _daemon = Daemon::start(dir.path());
    start_hostile(dir.path(), "start");
    let (status, _, err) = client(dir.path(), &["wait", "1"]);
    assert_eq!(status, 0, "{err}");
    check_renderings(root, true);
}

const KIND: EventKind = match EventKind::new(3) {
    Some(k) => k,
    None => panic!(),
};

/// A journal of `n` records over many small segments, written through the library.
fn write_journal(root: &Path, n: u32) {
    let options = JournalOptions {
        durability: Durability::Os,
        segment_bytes: 64 * 1024,
    };
    let (journal, _) = Journal::open(root, options).unwrap();
    for i in 0..n {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&(i + 1).to_le_bytes());
        journal
            .append(EventId::from_bytes(id), KIND, 1, &[7; 40])
            .unwrap();
    }
    journal.sync().unwrap();
}

/// Every line the bar drew for `label` (each draw starts after a line erase or at the start).
fn bar_lines(screen: &str, label: &str) -> Vec<String> {
    screen
        .split(['\r', '\n'])
        .map(|l| l.trim_start_matches("\x1b[2K"))
        .filter(|l| l.starts_with(&format!("{label}: [")))
        .map(str::to_owned)
        .collect()
}

/// `journal verify` of a journal of many records: on a terminal stderr the bar shows its label
/// and a position past the start (so it moved with the scan), and is erased last; stdout is
/// the report alone, the same bytes as through pipes. With stderr a pipe and stdout the
/// terminal, nothing is drawn anywhere.
#[test]
fn journal_verify_draws_its_bar_on_a_terminal_stderr_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    write_journal(dir.path(), 20_000);
    let args = rooted(&["journal", "verify"], root);
    let piped = bin()
        .args(&args)
        .env_remove("PROCJOURNAL_PROGRESS")
        .output()
        .unwrap();
    assert!(piped.status.success());
    assert!(piped.stderr.is_empty(), "{:?}", piped.stderr);
    let report = String::from_utf8(piped.stdout.clone()).unwrap();
    assert!(report.contains("records 20000"), "{report}");

    let seen = on_terminal(&args, Term::Stderr, None);
    assert_eq!(seen.status, 0);
    assert_eq!(seen.stdout, piped.stdout, "stdout holds the report alone");
    let screen = String::from_utf8(seen.screen).unwrap();
    let drawn = bar_lines(&screen, "verifying");
    assert!(!drawn.is_empty(), "no bar on the terminal: {screen:?}");
    assert!(
        drawn.iter().any(|l| !l.contains("] 0 B/")),
        "the bar never moved: {drawn:?}"
    );
    assert!(
        drawn.iter().all(|l| l.contains("MiB")),
        "a bar in bytes of the segments: {drawn:?}"
    );
    assert!(screen.ends_with("\r\x1b[2K"), "not cleared: {screen:?}");

    // PROCJOURNAL_PROGRESS=0 on a terminal: nothing.
    let off = on_terminal(&args, Term::Stderr, Some("0"));
    assert!(off.screen.is_empty(), "{:?}", off.screen);
    assert_eq!(off.stdout, piped.stdout);

    let seen = on_terminal(&args, Term::Stdout, None);
    assert_eq!(seen.status, 0);
    assert!(seen.stderr.is_empty(), "{:?}", seen.stderr);
    let screen = String::from_utf8(seen.screen).unwrap();
    assert!(screen.contains("records 20000"), "{screen}");
    assert!(
        !screen.contains('\x1b') && !screen.contains("verifying"),
        "{screen:?}"
    );
}

/// Every long scan draws its bar on a terminal stderr and leaves stdout as it is through pipes:
/// `journal manifests`, `journal dump` (into a pipe), `spool verify` (the journal's replay, then
/// its spools), and the journal replays of `ps` and `logs -t` without a daemon.
#[test]
fn every_long_scan_draws_on_a_terminal_stderr_and_never_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    for _ in 0..3 {
        let (status, _, err) = client(dir.path(), &["run", "--", "echo", "hello"]);
        assert_eq!(status, 0, "{err}");
    }
    let scans: [(&[&str], &[&str]); 6] = [
        (&["journal", "manifests"], &["replaying"]),
        (&["journal", "dump"], &["dumping"]),
        (&["spool", "verify"], &["replaying", "checking spools"]),
        (&["journal", "verify"], &["verifying"]),
        (&["ps"], &["replaying"]),
        (&["logs", "-t", "1"], &["replaying", "reading times"]),
    ];
    for (scan, labels) in scans {
        let args = rooted(scan, root);
        let piped = bin()
            .args(&args)
            .env_remove("PROCJOURNAL_PROGRESS")
            .output()
            .unwrap();
        assert!(piped.status.success(), "{scan:?}");
        let seen = on_terminal(&args, Term::Stderr, None);
        assert_eq!(seen.status, 0, "{scan:?}");
        assert!(!piped.stdout.is_empty(), "{scan:?}");
        if scan[0] == "ps" {
            // Its AGE column moves on between two runs.
            assert_eq!(
                piped.stdout.iter().filter(|&&b| b == b'\n').count(),
                seen.stdout.iter().filter(|&&b| b == b'\n').count(),
                "{scan:?}"
            );
        } else {
            assert_eq!(seen.stdout, piped.stdout, "{scan:?}");
        }
        let screen = String::from_utf8(seen.screen).unwrap();
        for label in labels {
            assert!(
                !bar_lines(&screen, label).is_empty(),
                "{scan:?}: no {label:?} bar: {screen:?}"
            );
        }
        // The bar is cleared before anything else reaches stderr: after the last clear there
        // are only whole note lines (offline `ps` says no daemon serves the root), no bar.
        let after = screen.rsplit_once("\r\x1b[2K").map(|(_, after)| after);
        assert!(
            after.is_some_and(|after| after
                .lines()
                .all(|line| line.trim_end().starts_with("procjournal: "))),
            "{scan:?}: not cleared: {screen:?}"
        );
        // Through a pipe, stderr holds at most the notes procjournal always prints there.
        let err = String::from_utf8(piped.stderr).unwrap();
        assert!(
            !err.contains('\x1b') && !err.contains(": ["),
            "{scan:?}: {err:?}"
        );
    }
    // `journal dump` into the same terminal as its bar would be: no bar at all.
    let seen = on_terminal(&rooted(&["journal", "dump"], root), Term::Both, None);
    let screen = String::from_utf8(seen.screen).unwrap();
    assert!(screen.contains("registered"), "{screen}");
    assert!(
        !screen.contains("dumping") && !screen.contains('\x1b'),
        "{screen:?}"
    );
}
