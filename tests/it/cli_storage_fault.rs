//! A terminal state the journal failed to record is never reported as the command's status: on
//! the tests' fault backend (feature `fault-injection`, `src/journal/fault.rs`), which tears every
//! segment write and fails every flush once a trigger file exists, the workload itself creates
//! the trigger after its `running` is recorded and then exits 3. `run` (offline and through the
//! daemon), `capture`, the daemon's `wait` and the MCP tools must all fail the call (125, or a
//! `not_persisted` tool error) and say why, never pass the 3 on as if it were durable.

use crate::common::daemon as daemon_common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use daemon_common::{Daemon, bin};
use serde_json::{Value, json};

const TRIGGER_ENV: &str = "PROCJOURNAL_TEST_FAULT_TRIGGER";
const BIN: &str = env!("CARGO_BIN_EXE_procjournal");

/// A root and, beside it (not inside: no reader of the root must see it), the trigger file.
struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    trigger: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let trigger = dir.path().join("fail-now");
        Scene {
            _dir: dir,
            root,
            trigger,
        }
    }

    /// The workload: waits until `ps` shows it running (its `running` record is written, so
    /// only the records of its end are left to fail), arms the fault, exits 3.
    fn script(&self) -> String {
        format!(
            "until '{BIN}' ps --root '{root}' | grep -q 'runnin[g] '; do sleep 0.01; done; \
             touch '{trigger}'; echo done; exit 3",
            root = self.root.display(),
            trigger = self.trigger.display()
        )
    }

    fn faulty(&self, mut command: Command) -> Command {
        command.env(TRIGGER_ENV, &self.trigger);
        command
    }

    fn daemon(&self) -> Daemon {
        Daemon::start_env(
            &self.root,
            &[],
            &[(TRIGGER_ENV, self.trigger.display().to_string())],
        )
    }
}

impl Drop for Scene {
    /// A run whose end was not persisted leaves its tree's cgroup for the root's next open to
    /// assess; this root is gone after the test, so its base cgroup goes with it.
    fn drop(&mut self) {
        daemon_common::remove_base_cgroup(&self.root);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_not_persisted(out: &Output, what: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{what}: {out:?}");
    assert!(
        stderr.contains("ended (exit code 3) but the terminal state was not persisted"),
        "{what}: {stderr}"
    );
    assert!(stderr.contains("exiting 125"), "{what}: {stderr}");
}

#[test]
fn run_exits_125_when_the_end_of_its_command_was_not_persisted() {
    let scene = Scene::new();
    let out = scene
        .faulty(bin())
        .args(["run", "--root"])
        .arg(&scene.root)
        .args(["--", "sh", "-c", &scene.script()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        scene.trigger.exists(),
        "the workload never armed the fault: {out:?}"
    );
    assert_eq!(text(&out.stdout), "done\n");
    assert_not_persisted(&out, "run");

    // The started line came only once the registration was durable: after the failure, a
    // fresh open still finds the process it named (the end lost, it is `lost_on_restore`).
    let stderr = text(&out.stderr);
    let handle = stderr
        .split_whitespace()
        .skip_while(|w| *w != "started")
        .nth(1)
        .unwrap_or_else(|| panic!("no started line: {stderr}"));
    let manifests = bin()
        .args(["journal", "manifests", "--json", "--root"])
        .arg(&scene.root)
        .output()
        .unwrap();
    let listed = text(&manifests.stdout);
    assert!(
        listed.contains(handle),
        "{handle} not in the journal: {listed}"
    );
}

#[test]
fn capture_exits_125_and_its_receipt_says_not_persisted() {
    let scene = Scene::new();
    let out = scene
        .faulty(bin())
        .args(["capture", "--root"])
        .arg(&scene.root)
        .args(["--", "sh", "-c", &scene.script()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_not_persisted(&out, "capture");
    let receipt: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(receipt["persisted"], false, "{receipt}");
    assert_eq!(receipt["exit_code"], 3, "{receipt}");
    assert!(receipt["persist_error"].is_string(), "{receipt}");
}

#[test]
fn the_daemons_wait_and_run_exit_125_when_the_end_was_not_persisted() {
    let scene = Scene::new();
    let _daemon = scene.daemon();
    let started = bin()
        .args(["start", "--root"])
        .arg(&scene.root)
        .args(["--json", "--", "sh", "-c", &scene.script()])
        .output()
        .unwrap();
    assert!(started.status.success(), "{started:?}");
    let info: Value = serde_json::from_str(text(&started.stdout).trim()).unwrap();
    let handle = info["handle"].as_str().unwrap().to_owned();
    let wait = |json: bool| {
        bin()
            .args(["wait", "--root"])
            .arg(&scene.root)
            .args(json.then_some("--json"))
            .arg(&handle)
            .output()
            .unwrap()
    };
    assert_not_persisted(&wait(false), "wait");
    let out = wait(true);
    assert_not_persisted(&out, "wait --json");
    let end: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(end["persisted"], false, "{end}");
    assert_eq!(end["exit_code"], 3, "{end}");

    // `run` through a daemon whose journal fails the same way.
    let scene = Scene::new();
    let _daemon = scene.daemon();
    let out = bin()
        .args(["run", "--root"])
        .arg(&scene.root)
        .args(["--", "sh", "-c", &scene.script()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains("through the daemon"), "{out:?}");
    assert_not_persisted(&out, "run through the daemon");
}

/// A `procjournal mcp --standalone` on `scene`'s root, spoken to line by line.
struct Mcp {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    next_id: u64,
}

impl Mcp {
    fn start(scene: &Scene) -> Mcp {
        let mut child = scene
            .faulty(bin())
            .args(["mcp", "--standalone", "--root"])
            .arg(&scene.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = Mcp {
            child,
            lines,
            next_id: 0,
        };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "cli_storage_fault", "version": "1"}});
        mcp.request("initialize", init);
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.lines.next().expect("the server ended").unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message["result"].clone();
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_tool_error(result: &Value, what: &str) {
    assert_eq!(result["isError"], true, "{what}: {result}");
    assert!(
        result.get("structuredContent").is_none(),
        "{what}: {result}"
    );
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("not_persisted: p-"), "{what}: {text}");
    assert!(text.contains("exit_code 3"), "{what}: {text}");
}

#[test]
fn mcp_wait_and_capture_are_tool_errors_when_the_end_was_not_persisted() {
    let scene = Scene::new();
    let mut mcp = Mcp::start(&scene);
    let started = mcp.call("start", json!({"command": ["sh", "-c", scene.script()]}));
    assert_ne!(started["isError"], true, "{started}");
    let handle = started["structuredContent"]["handle"].clone();
    let waited = mcp.call("wait", json!({"handle": handle}));
    assert_tool_error(&waited, "wait");
    assert_tool_error(&mcp.call("wait", json!({"handle": handle})), "wait again");

    let scene = Scene::new();
    let mut mcp = Mcp::start(&scene);
    let command = json!({"command": ["sh", "-c", scene.script()]});
    let captured = mcp.call("capture", json!({"start": command}));
    assert_tool_error(&captured, "capture");
}

#[test]
fn without_the_trigger_the_same_workload_passes_its_status_through() {
    // The control: the fault backend is in place but never armed (the trigger is elsewhere).
    let scene = Scene::new();
    let unarmed = scene.trigger.with_file_name("never-created");
    let script = scene
        .script()
        .replace(&format!("touch '{}'", scene.trigger.display()), "true");
    let out = bin()
        .env(TRIGGER_ENV, &unarmed)
        .args(["run", "--root"])
        .arg(&scene.root)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(!text(&out.stderr).contains("not persisted"), "{out:?}");
}
