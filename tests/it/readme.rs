//! Every command README.md and the pages of docs/ show is run here, so that no page can drift
//! from the binary.
//!
//! Each ```` ```sh ```` block of the README and of docs/*.md is run as it is written, line after line in one bash
//! (so `h=$(procjournal start ...)` carries to the lines after it), with `procjournal` on `PATH`
//! being the binary under test and a root of its own (`PROCJOURNAL_ROOT`). Each command's exit
//! status, and where it says something a reader relies on, its output, are checked against the
//! scenario below that names the block. A block this file does not know, a command that changed,
//! or a scenario whose block is gone fails [`every_readme_block_has_a_scenario`]: a README edit
//! comes with its proof.
//!
//! What the harness adds around a block, and never inside a command:
//! - the files the block's commands name (`./deploy`, a `Makefile`, a small cargo project, a login
//!   shell that puts a `dotnet` on `PATH`), written before the block;
//! - `cargo run --` read as `procjournal` (the same binary, built by `cargo test`'s profile;
//!   `.ci/run` runs the quick start's line literally, with `cargo run`);
//! - after a `serve ... &` line, a wait for its socket, which a person typing the next line gives
//!   it anyway (the daemon `start` would otherwise start could win the root, without the flags
//!   `serve` was given);
//! - between two `start`s of quick commands, a wait for the first to end, which a person typing
//!   also gives it (automatic admission on a 2-core machine has one slot);
//! - hooks that change the world between two lines where the block's comments say it changed
//!   (the admission block: the slot's holder ends);
//! - `procjournal shutdown` and a wait for background jobs at the end.
//!
//! Lines that are `cargo test ...` or the Python venv set-up are what `.ci/run` runs itself;
//! [`ci_runs_the_readme_lines_it_owns`] checks that it does.
//!
//! A block of another system's commands (docs/systemd.md's `systemctl --user`, which needs a
//! user's systemd) is fenced ```` ```console ```` and is not run.
//!
//! The JSON block of docs/mcp.md (an MCP client configuration) is run as a client would: its `command` and
//! `args` are spawned (with the root replaced by a scratch one) and asked for the tool list. The
//! TOML block's crate counts are compared with `cargo tree`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One page of the repository (`docs/mcp.md`).
fn page(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

/// README.md and every page of docs/ after it, one text: a block is run wherever it lives.
fn readme() -> String {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    let mut text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for page in pages {
        text.push('\n');
        text.push_str(&std::fs::read_to_string(page).unwrap());
    }
    text
}

/// The fenced blocks of `text` whose info string is `lang` (its first word), in order.
fn blocks(text: &str, lang: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // The open block: whether it is one of `lang`'s, and its lines.
    let mut open: Option<(bool, Vec<String>)> = None;
    for line in text.lines() {
        if let Some(info) = line.strip_prefix("```") {
            match open.take() {
                Some((true, block)) => out.push(block),
                Some((false, _)) => {}
                None => open = Some((info.split([',', ' ']).next() == Some(lang), Vec::new())),
            }
            continue;
        }
        if let Some((_, block)) = open.as_mut() {
            block.push(line.to_owned());
        }
    }
    out
}

/// A block's commands: its lines that are neither blank nor a comment.
fn commands(block: &[String]) -> Vec<String> {
    block
        .iter()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect()
}

#[derive(Debug, Clone)]
enum Expect {
    /// `.ci/run` runs this line (or the command it stands for); see
    /// [`ci_runs_the_readme_lines_it_owns`].
    Ci,
    /// Run here: its exit status, and text its stdout and its stderr contain.
    Runs {
        status: i32,
        stdout: Vec<&'static str>,
        stderr: Vec<&'static str>,
    },
}

fn status(status: i32) -> Expect {
    Expect::Runs {
        status,
        stdout: Vec::new(),
        stderr: Vec::new(),
    }
}

fn says(status: i32, stdout: &[&'static str], stderr: &[&'static str]) -> Expect {
    Expect::Runs {
        status,
        stdout: stdout.to_vec(),
        stderr: stderr.to_vec(),
    }
}

struct Scenario {
    name: &'static str,
    /// Shell run before the block, in its directory (fixtures, earlier processes).
    setup: &'static str,
    /// Shell run after the command at this index (0-based), before the next.
    hooks: Vec<(usize, &'static str)>,
    /// The block's commands exactly as the README has them, with what each must do.
    lines: Vec<(&'static str, Expect)>,
}

/// Files every block may name. `make`'s default goal ends at once; a block that needs it to
/// wait says so in its setup.
const FIXTURES: &str = r#"
printf 'all:\n\t@echo built\ntest:\n\t@echo tested\ncheck:\n\t@echo checked\n' > Makefile
printf '#!/bin/sh\necho "deploying with a token of ${#API_TOKEN} characters"\n' > deploy
cp deploy deploy.sh
printf '#!/bin/sh\necho "benchmarking in mode $MODE"\n' > bench
printf '#!/bin/sh\nread answer\necho "answer: $answer"\n' > long-job
chmod +x deploy deploy.sh bench long-job
"#;

/// After `serve ... &`: a person takes a second to type the next line; the harness waits for the
/// socket instead (bounded: a daemon that never listens fails the line after it).
const AWAIT_SOCKET: &str = r#"
for _ in $(seq 1 600); do [ -S "$PROCJOURNAL_ROOT/procjournal.sock" ] && break; sleep 0.05; done
"#;

/// Between two starts: a person typing the next line finds the last one's quick command done;
/// the harness waits for that (bounded) instead, since automatic admission on a small machine
/// (2 cores at 70 %: one slot) refuses a start while another workload runs, as it should.
const AWAIT_IDLE: &str = r#"
for _ in $(seq 1 1200); do [ -z "$(procjournal ps --state running --json 2>/dev/null)" ] && break; sleep 0.05; done
"#;

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "quick_start",
            setup: "",
            hooks: vec![],
            lines: vec![
                (
                    "cargo run -- run -- sh -c 'echo hello; echo oops >&2; exit 3'; cargo run -- journal manifests",
                    says(
                        0,
                        &["hello\n", " exited ", "exit=3"],
                        &["oops\n", "procjournal: started p-"],
                    ),
                ),
                ("cargo test", Expect::Ci),
            ],
        },
        Scenario {
            name: "mcp_python_client",
            setup: "",
            hooks: vec![],
            lines: vec![
                (
                    "python3 -m venv target/mcp-venv && target/mcp-venv/bin/pip install -r tests/mcp/requirements.txt",
                    Expect::Ci,
                ),
                ("cargo test --test it mcp_python -- --nocapture", Expect::Ci),
            ],
        },
        Scenario {
            name: "terminals",
            // Without a terminal of its own `run --pty` feeds the command's terminal from stdin,
            // here empty: its end is typed as Ctrl-D, which ends the shell and the REPL.
            setup: "",
            hooks: vec![],
            lines: vec![
                (
                    "procjournal run --pty -- bash          # an interactive shell under a supervised terminal",
                    says(0, &[], &["procjournal: started p-"]),
                ),
                (
                    "procjournal run --pty -- python3 -i    # a REPL; `top`, `vim`, prompts for passwords work too",
                    says(0, &[">>> "], &["procjournal: started p-"]),
                ),
            ],
        },
        Scenario {
            name: "capture",
            // A small crate for clippy to check, built in a target directory of its own.
            setup: r#"
export CARGO_TARGET_DIR="$PWD/cargo-target"
mkdir -p src
printf '[package]\nname = "readme-fixture"\nversion = "0.1.0"\nedition = "2021"\n' > Cargo.toml
printf 'fn main() {\n    println!("checked by clippy");\n}\n' > src/main.rs
"#,
            hooks: vec![],
            lines: vec![
                (
                    "procjournal capture --timeout 10m -- cargo clippy --message-format=json   # one JSON receipt line",
                    says(
                        0,
                        &[
                            r#""complete":true"#,
                            r#""state":"exited""#,
                            r#""exit_code":0"#,
                        ],
                        &[],
                    ),
                ),
                (
                    "procjournal capture --max-bytes 1048576 --base64 -- sh -c 'make check'    # the raw bytes",
                    // "checked\n" in base64.
                    says(
                        0,
                        &[r#""prefix":"Y2hlY2tlZAo=""#, r#""complete":true"#],
                        &[],
                    ),
                ),
            ],
        },
        Scenario {
            name: "daemon",
            // `make -j4` here asks a question and then works until it is stopped.
            setup: r#"printf 'all:\n\t@echo building; read answer; echo "answer: $$answer"; sleep 600\n' > Makefile"#,
            hooks: vec![(0, AWAIT_SOCKET)],
            lines: vec![
                (
                    "procjournal serve &                                   # optional: start runs one when none does",
                    status(0),
                ),
                (
                    "h=$(procjournal start --label job=build -- make -j4)  # prints the handle",
                    // The daemon was already there: nothing is said about starting one.
                    status(0),
                ),
                (
                    "procjournal ps                                        # or --json, --state running, --label job=build",
                    says(0, &[" running ", "make -j4", "[job=build]"], &[]),
                ),
                (
                    "printf 'y\\n' | procjournal send \"$h\"                  # or --text 'y\\n' (escapes); --close: EOF",
                    says(0, &[], &["sent 2 bytes"]),
                ),
                (
                    "procjournal logs --tail 20 -t --stream-marker \"$h\"    # the last 20 lines, timed, out|/err|",
                    // What it holds depends on how far make got: only the status is certain.
                    status(0),
                ),
                (
                    "procjournal stop \"$h\" --grace 5s                      # SIGTERM to the tree, grace, SIGKILL",
                    says(0, &["terminated (signal SIGTERM"], &[]),
                ),
                (
                    "procjournal logs -f \"$h\"                              # all of it; -f follows until the end",
                    status(0),
                ),
                (
                    "procjournal wait \"$h\"                                 # exits with the process's status",
                    status(128 + 15),
                ),
                (
                    "procjournal shutdown                                  # stops every process, then the daemon",
                    says(0, &["shut down"], &[]),
                ),
            ],
        },
        Scenario {
            name: "numbers_and_names",
            // Two processes before, so that the one named build is number 3.
            setup: "procjournal run -- true && procjournal run -- true",
            hooks: vec![],
            lines: vec![
                (
                    "procjournal start --name build -- make -j4",
                    says(0, &["p-"], &["no daemon was running", "started one"]),
                ),
                (
                    "procjournal logs -f build                             # the live process named build",
                    says(0, &["built\n"], &[]),
                ),
                (
                    "procjournal logs 3                                    # process number 3",
                    says(0, &["built\n"], &[]),
                ),
                (
                    "procjournal restart build                             # names outlive their process: the newest",
                    says(0, &["p-"], &[]),
                ),
            ],
        },
        Scenario {
            name: "environment",
            // A login shell whose profile (the whole of it: /etc/profile would set PATH anew)
            // puts a `dotnet` on PATH that nothing else has.
            setup: r#"
mkdir -p login-tools
printf '#!/bin/sh\necho "dotnet $* ran from the login PATH"\n' > login-tools/dotnet
printf '#!/bin/sh\nPATH="%s/login-tools:$PATH"; export PATH\n[ "$1" = -l ] && shift\nexec /bin/sh "$@"\n' "$PWD" > login-shell
chmod +x login-tools/dotnet login-shell
export SHELL="$PWD/login-shell"
"#,
            hooks: vec![(0, AWAIT_SOCKET), (1, AWAIT_IDLE), (2, AWAIT_IDLE)],
            lines: vec![
                (
                    "procjournal serve --login-shell &                       # captures $SHELL -l's PATH once",
                    status(0),
                ),
                (
                    "API_TOKEN=\"$TOKEN\" procjournal start --env API_TOKEN -- ./deploy  # not in argv, not on disk",
                    says(0, &["p-"], &[]),
                ),
                (
                    "procjournal start --env-persist MODE=fast -- ./bench     # this value is kept in the journal",
                    says(0, &["p-"], &[]),
                ),
                (
                    "procjournal start --login-shell-overlay -- dotnet test   # PATH etc. as a login shell sets them",
                    says(0, &["p-"], &[]),
                ),
            ],
        },
        Scenario {
            name: "admission",
            // One slot, held by a process that ends when the file `release` appears.
            setup: r#"
procjournal serve --max-concurrent 1 2>serve.log &
for _ in $(seq 1 600); do [ -S "$PROCJOURNAL_ROOT/procjournal.sock" ] && break; sleep 0.05; done
procjournal start -- sh -c 'while [ ! -e release ]; do sleep 0.05; done' >/dev/null
"#,
            hooks: vec![(0, "touch release")],
            lines: vec![
                (
                    "procjournal start --no-queue -- make -j8  # start refused: no capacity: 1 of 1 slots in use (host limit: max_concurrent 1, ...)",
                    says(125, &[], &["no capacity: 1 of 1 slots in use"]),
                ),
                (
                    "procjournal start -- make                 # waits in line (one stderr line says so) up to 10 minutes; --queue 30s sets it",
                    says(0, &["p-"], &[]),
                ),
                (
                    "procjournal admission --max-concurrent 4  # at most 4 at once from now on, as pueue parallel 4 (--auto: back)",
                    status(0),
                ),
                (
                    "procjournal admission                     # slots, in use, core charges, inputs, each workload's reservation (--json)",
                    status(0),
                ),
            ],
        },
        Scenario {
            name: "clean",
            setup: "procjournal run -- echo old >/dev/null",
            hooks: vec![],
            lines: vec![
                (
                    "procjournal clean --older-than 1d --dry-run   # what would go, and what is kept and why",
                    status(0),
                ),
                (
                    "procjournal clean --older-than 1d             # through the daemon if one runs, else on the root",
                    status(0),
                ),
            ],
        },
        Scenario {
            name: "restart",
            setup: "",
            hooks: vec![],
            lines: vec![
                (
                    "h=$(procjournal start --env API_TOKEN=\"$TOKEN\" --env-persist MODE=ci -- ./deploy.sh)",
                    status(0),
                ),
                (
                    "procjournal wait \"$h\"                              # only a finished process is restarted",
                    says(0, &[" exited"], &[]),
                ),
                (
                    "procjournal restart \"$h\"                           # procjournal: cannot restart p-…: the values of",
                    says(125, &[], &["API_TOKEN", "supply them again"]),
                ),
                (
                    "API_TOKEN=\"$TOKEN\" procjournal restart \"$h\" --env API_TOKEN  # the new handle",
                    says(0, &["p-"], &[]),
                ),
            ],
        },
        Scenario {
            name: "pause",
            setup: r#"
procjournal serve 2>serve.log &
for _ in $(seq 1 600); do [ -S "$PROCJOURNAL_ROOT/procjournal.sock" ] && break; sleep 0.05; done
"#,
            hooks: vec![],
            lines: vec![
                (
                    "procjournal pause --reason \"deploying the database\"",
                    says(0, &["paused"], &[]),
                ),
                (
                    "procjournal start -- make test     # procjournal: refused: the supervisor is paused: ...",
                    says(125, &[], &["refused", "the supervisor is paused"]),
                ),
                (
                    "procjournal ps                     # stderr: procjournal: paused: new starts are refused ...",
                    says(0, &[], &["procjournal: paused: new starts are refused"]),
                ),
                ("procjournal resume", status(0)),
            ],
        },
        Scenario {
            name: "idle_and_input",
            setup: "",
            hooks: vec![],
            lines: vec![
                (
                    "h=$(procjournal start --idle-timeout 5m --timeout 2h -- ./long-job)",
                    status(0),
                ),
                (
                    "procjournal await-input \"$h\"       # it asks a question: do not stop it as idle",
                    status(0),
                ),
                (
                    "printf 'yes\\n' | procjournal send \"$h\"   # answered: the idle clock restarts",
                    status(0),
                ),
                (
                    "procjournal ps                     # DEADLINE: -, await, idle or wall",
                    says(0, &["DEADLINE"], &[]),
                ),
            ],
        },
    ]
}

fn scenario(name: &str) -> Scenario {
    scenarios()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no scenario {name}"))
}

/// The script that runs `scenario` in its directory: every command's output to files of its own
/// and its status to `statuses`.
fn script(scenario: &Scenario) -> String {
    let mut s = String::from("set +e\nexec </dev/null\n");
    s.push_str(FIXTURES);
    s.push_str(scenario.setup);
    s.push_str("\nmkdir -p readme-out\n: > readme-out/statuses\n");
    for (i, (line, expect)) in scenario.lines.iter().enumerate() {
        if matches!(expect, Expect::Ci) {
            continue;
        }
        let line = line.replace("cargo run -- ", "procjournal ");
        // The line on lines of its own: a trailing comment must not swallow the braces.
        s.push_str(&format!(
            "{{\n{line}\n}} >readme-out/out.{i} 2>readme-out/err.{i}\n\
             echo \"{i} $?\" >> readme-out/statuses\n"
        ));
        for (after, hook) in &scenario.hooks {
            if *after == i {
                s.push_str(hook);
                s.push('\n');
            }
        }
    }
    s.push_str("procjournal shutdown >/dev/null 2>&1\nwait\n");
    s
}

/// Runs `name`'s block and checks every command it runs.
fn run_scenario(name: &str) {
    let scenario = scenario(name);
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_procjournal"), bin.join("procjournal")).unwrap();
    let root = dir.join("root");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::fs::write(dir.join("readme.sh"), script(&scenario)).unwrap();
    let mut child = Command::new("bash")
        .arg("readme.sh")
        .current_dir(dir)
        .env("PATH", path)
        .env("PROCJOURNAL_ROOT", &root)
        .env("TOKEN", "s3cret-token-from-the-test")
        .env_remove("RUST_LOG")
        .env_remove("PROCJOURNAL_PROGRESS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // Only a guard against a hang (a `logs -f` that never ends): no time is asserted.
    let started = Instant::now();
    let outcome = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(300) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            let _ = Command::new(env!("CARGO_BIN_EXE_procjournal"))
                .args(["shutdown", "--root"])
                .arg(&root)
                .output();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = dir.join("readme-out");
    let statuses = std::fs::read_to_string(out.join("statuses")).unwrap_or_default();
    eprintln!("README block {name}: statuses by line\n{statuses}");
    let mut failures = Vec::new();
    if outcome.is_none() {
        failures.push(format!("the block hung; statuses so far:\n{statuses}"));
    }
    for (i, (line, expect)) in scenario.lines.iter().enumerate() {
        let Expect::Runs {
            status,
            stdout,
            stderr,
        } = expect
        else {
            continue;
        };
        let got = statuses
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{i} ")))
            .and_then(|n| n.trim().parse::<i32>().ok());
        let read = |stream: &str| {
            std::fs::read(out.join(format!("{stream}.{i}")))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        let (got_out, got_err) = (read("out"), read("err"));
        let mut wrong = Vec::new();
        if got != Some(*status) {
            wrong.push(format!("exit status {got:?}, want {status}"));
        }
        for want in stdout {
            if !got_out.contains(want) {
                wrong.push(format!("stdout lacks {want:?}"));
            }
        }
        for want in stderr {
            if !got_err.contains(want) {
                wrong.push(format!("stderr lacks {want:?}"));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "`{line}`: {}\n--- stdout\n{got_out}--- stderr\n{got_err}",
                wrong.join("; ")
            ));
        }
    }
    // Nothing is left serving the scratch root: the block's daemon was shut down. `shutdown`
    // answers before the daemon has closed its socket and exited, so this waits (bounded).
    let socket = root.join("procjournal.sock");
    let stopping = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        if stopping.elapsed() > Duration::from_secs(30) {
            failures.push("a daemon still serves the block's root after shutdown".to_owned());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stderr = child
        .stderr
        .take()
        .map(|mut e| {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
            s
        })
        .unwrap_or_default();
    assert!(
        failures.is_empty(),
        "README block {name}:\n{}\n(the block's own stderr: {stderr})",
        failures.join("\n\n")
    );
}

#[test]
fn every_readme_block_has_a_scenario() {
    let text = readme();
    let mut known: Vec<Vec<String>> = scenarios()
        .iter()
        .map(|s| s.lines.iter().map(|(l, _)| (*l).to_owned()).collect())
        .collect();
    let mut unknown = Vec::new();
    for block in blocks(&text, "sh") {
        let cmds = commands(&block);
        match known.iter().position(|k| *k == cmds) {
            Some(i) => {
                known.remove(i);
            }
            None => unknown.push(cmds.join("\n")),
        }
    }
    assert!(
        unknown.is_empty(),
        "README sh blocks no scenario in tests/it/readme.rs runs (add or update one):\n{}",
        unknown.join("\n---\n")
    );
    assert!(
        known.is_empty(),
        "scenarios in tests/it/readme.rs whose block is no longer in the README: {known:?}"
    );
    assert_eq!(
        blocks(&page("docs/mcp.md"), "json").len(),
        1,
        "the MCP configuration block"
    );
    assert_eq!(
        blocks(&page("docs/library.md"), "toml").len(),
        1,
        "the dependency block"
    );
}

#[test]
fn ci_runs_the_readme_lines_it_owns() {
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    // The test command itself, which also runs tests/it/mcp_python.rs with the client installed.
    assert!(ci.lines().any(|l| l.trim() == "cargo test"), "{ci}");
    assert!(ci.contains("export PROCJOURNAL_MCP_PYTHON="), "{ci}");
    // The same virtual environment, from the same requirements.
    assert!(ci.contains("target/mcp-venv") && ci.contains("python3 -m venv"));
    assert!(ci.contains("-r tests/mcp/requirements.txt"));
    // The quick start as written, `cargo run` and all.
    let quick = scenario("quick_start").lines[0].0;
    assert!(ci.contains("README quick start"), "{ci}");
    assert!(
        readme().contains(quick),
        "the quick start line .ci/run extracts"
    );
}

#[test]
fn quick_start() {
    run_scenario("quick_start");
}

#[test]
fn terminals() {
    run_scenario("terminals");
}

#[test]
fn capture() {
    run_scenario("capture");
}

#[test]
fn daemon() {
    run_scenario("daemon");
}

#[test]
fn numbers_and_names() {
    run_scenario("numbers_and_names");
}

#[test]
fn environment() {
    run_scenario("environment");
}

#[test]
fn admission() {
    run_scenario("admission");
}

#[test]
fn clean() {
    run_scenario("clean");
}

#[test]
fn restart() {
    run_scenario("restart");
}

#[test]
fn pause() {
    run_scenario("pause");
}

#[test]
fn idle_and_input() {
    run_scenario("idle_and_input");
}

/// The MCP client configuration, spawned as a client spawns it: `command` with `args` (the root
/// swapped for a scratch one), initialised, asked for its tools.
#[test]
fn mcp_configuration() {
    let block = blocks(&page("docs/mcp.md"), "json").remove(0).join("\n");
    let config: Value = serde_json::from_str(&block).expect("docs/mcp.md's MCP configuration");
    let server = &config["mcpServers"]["procjournal"];
    assert_eq!(server["command"], "procjournal");
    let mut args: Vec<String> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    let at = args.iter().position(|a| a == "--root").unwrap();
    args[at + 1] = root.display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_procjournal"))
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "readme", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ];
    for request in &requests {
        writeln!(stdin, "{request}").unwrap();
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut tools = None;
    for line in lines.by_ref() {
        let answer: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if answer["id"] == 2 {
            tools = Some(answer["result"]["tools"].clone());
            break;
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    let stop = Command::new(env!("CARGO_BIN_EXE_procjournal"))
        .args(["shutdown", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(status.success(), "{status}");
    // The server attached to (here: started) the root's daemon, which the shutdown stopped.
    assert!(stop.status.success(), "{stop:?}");
    let names: Vec<&str> = tools
        .as_ref()
        .and_then(Value::as_array)
        .expect("a tools/list answer")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["start", "output", "stop", "wait"] {
        assert!(names.contains(&tool), "{tool} not in {names:?}");
    }
}

/// The crate counts the dependency block states, against `cargo tree` (counted as `.ci/run`
/// counts them).
#[test]
fn dependency_counts() {
    let block = blocks(&page("docs/library.md"), "toml")
        .remove(0)
        .join("\n");
    let numbers: Vec<usize> = block
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let (lean_said, full_said) = match numbers.as_slice() {
        // "0.1" holds two numbers before the counts.
        [0, 1, lean, full] => (*lean, *full),
        other => panic!("the dependency block's numbers: {other:?} in {block}"),
    };
    let count = |extra: &[&str]| -> usize {
        let out = Command::new(env!("CARGO"))
            .args(["tree", "-e", "normal", "--prefix", "none", "--offline"])
            .args(extra)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let mut crates: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.replace(" (*)", "").replace(" (proc-macro)", ""))
            .collect();
        crates.sort_unstable();
        crates.dedup();
        crates.len()
    };
    assert_eq!(
        (lean_said, full_said),
        (count(&["--no-default-features"]), count(&[])),
        "README: `{block}`"
    );
}

#[test]
fn blocks_are_read_as_written() {
    let text = "a\n```sh\none # c\n\n# only a comment\ntwo\n```\n```json\n{}\n```\n```rust,no_run\nx\n```\n";
    let sh = blocks(text, "sh");
    assert_eq!(sh.len(), 1);
    assert_eq!(commands(&sh[0]), ["one # c", "two"]);
    assert_eq!(blocks(text, "json"), [vec!["{}".to_owned()]]);
    assert_eq!(blocks(text, "rust").len(), 1);
    assert!(blocks(text, "toml").is_empty());
}
