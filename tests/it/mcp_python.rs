//! `procjournal mcp` driven by the official Python MCP client SDK: tests/mcp/session_test.py runs
//! the built binary through initialize, tools/list, a start → output → input → stop → wait
//! session, bad input and two restarts (see the script's docstring for every check).
//!
//! The Python interpreter is the one of a virtual environment with `tests/mcp/requirements.txt`
//! installed, named by `PROCJOURNAL_MCP_PYTHON` (`.ci/run` creates `target/mcp-venv` and sets
//! it). Without the variable, `target/mcp-venv/bin/python` is used when it exists; when neither
//! is there the test is skipped with a loud note, except under CI (`CI=true`, or any value but
//! empty, `0` or `false`), where it fails: CI never passes without having run the client.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/session_test.py");
/// The script bounds itself at 150 s; this catches a hang outside its own timeout.
const RUN_LIMIT: Duration = Duration::from_secs(240);

fn python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("PROCJOURNAL_MCP_PYTHON").filter(|v| !v.is_empty()) {
        let python = PathBuf::from(python);
        assert!(
            python.exists(),
            "PROCJOURNAL_MCP_PYTHON={} does not exist",
            python.display()
        );
        return Some(python);
    }
    let venv = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/mcp-venv/bin/python"
    ));
    if venv.exists() {
        return Some(venv);
    }
    assert!(
        !under_ci(),
        "no Python with the `mcp` package under CI (CI={:?}): PROCJOURNAL_MCP_PYTHON is not set \
         and {} does not exist; .ci/run creates the MCP test venv",
        std::env::var("CI").unwrap_or_default(),
        venv.display()
    );
    None
}

/// Whether this runs under CI: `CI` set to anything but empty, `0` or `false` (CI services set
/// `CI=true`; a developer may export `CI=false`).
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE" | "False"))
}

#[test]
fn python_sdk_drives_the_mcp_server_through_a_session_and_restarts() {
    let Some(python) = python() else {
        eprintln!(
            "\n*** SKIPPED mcp_python: no Python with the `mcp` package. Run .ci/run, or:\n\
             ***   python3 -m venv target/mcp-venv && \
             target/mcp-venv/bin/pip install -r tests/mcp/requirements.txt\n"
        );
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(&python)
        .arg(SCRIPT)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_procjournal"))
        .arg("--workdir")
        .arg(work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    // Drain both pipes on threads so that a chatty script cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).map(|_| text)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = out.join().expect("stdout thread").unwrap_or_default();
    let err = err.join().expect("stderr thread").unwrap_or_default();
    let summary = out.lines().last().unwrap_or("").to_owned();
    match status {
        Some(status) if status.success() => {
            assert!(
                summary.starts_with("mcp session: ") && summary.ends_with(" passed, 0 failed"),
                "the script ended without its summary:\n{out}\n{err}"
            );
            eprintln!("{summary}");
        }
        Some(status) => panic!("session_test.py failed ({status}):\n{out}\n{err}"),
        None => panic!("session_test.py ran longer than {RUN_LIMIT:?}:\n{out}\n{err}"),
    }
}
