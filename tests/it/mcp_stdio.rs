//! `procjournal mcp` over its stdin and stdout, as MCP clients drive it: the built binary spawned
//! as a child, JSON-RPC lines written to its stdin, answers read from its stdout.
//!
//! - The MCP Inspector's pattern (CLI mode starts a new server for every call): a process started
//!   through one server is read by a second and stopped by a third, and was running in between;
//!   the daemon the first server started is shut down at the end (no leak).
//! - `--standalone`: a process ends with its server, and the instructions say so.
//! - JSON-RPC errors: a non-JSON line gets -32700 with id null, an invalid request -32600 with
//!   its id, params that do not fit -32602 with its id, an over-long line -32600; two in-flight
//!   requests with one id get two answers.
//! - Every tool, in both modes, declares an output schema, and its `structuredContent`
//!   validates against it (a small validator of the schema keywords schemars writes).
//! - Pages of safe text at a small `max_bytes` never split a character, in both modes.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

/// Bounds that only guard against a hang (the machine is shared; nothing here is timed).
const ANSWER_WAIT: Duration = Duration::from_secs(60);
const EXIT_WAIT: Duration = Duration::from_secs(60);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_procjournal"))
}

/// One `procjournal mcp` child and the lines of its stdout.
pub(crate) struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// Answers read while waiting for another id.
    early: Vec<Value>,
    next_id: u64,
}

impl Server {
    pub(crate) fn start(root: &Path, extra: &[&str]) -> Server {
        let mut child = bin()
            .arg("mcp")
            .arg("--root")
            .arg(root)
            .args(["--max-concurrent", "64"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn procjournal mcp");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut stderr = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Server {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr: Some(stderr),
            early: Vec::new(),
            next_id: 1000,
        }
    }

    fn send_raw(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).expect("write to the server");
        stdin.write_all(b"\n").expect("write to the server");
        stdin.flush().expect("flush");
    }

    fn send(&mut self, message: &Value) {
        self.send_raw(message.to_string().as_bytes());
    }

    /// The next line the server writes, as JSON; every line must be one JSON message.
    fn next(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(ANSWER_WAIT)
            .unwrap_or_else(|e| panic!("no line from the server within {ANSWER_WAIT:?}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line {line:?}: {e}"))
    }

    /// The answer to `id` (notifications and other answers in between are kept aside).
    fn answer(&mut self, id: &Value) -> Value {
        if let Some(at) = self.early.iter().position(|m| m.get("id") == Some(id)) {
            return self.early.remove(at);
        }
        loop {
            let message = self.next();
            if message.get("id") == Some(id) {
                return message;
            }
            if message.get("id").is_some() {
                self.early.push(message);
            }
        }
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = Value::from(self.next_id);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer = self.answer(&id);
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        answer
    }

    /// The handshake; returns the instructions.
    pub(crate) fn initialize(&mut self) -> String {
        let init = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "mcp_stdio", "version": "1"},
            }),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init["result"]["instructions"]
            .as_str()
            .unwrap_or_else(|| panic!("instructions: {init}"))
            .to_owned()
    }

    /// The result of a tool call (successful or not).
    pub(crate) fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        answer
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{tool}: {answer}"))
    }

    /// A successful call's structured content.
    pub(crate) fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments.clone());
        assert_ne!(result["isError"], true, "{tool} {arguments}: {result}");
        result["structuredContent"].clone()
    }

    /// Closes stdin, waits for the exit, returns stderr.
    pub(crate) fn close(mut self) -> String {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let stderr = self
                    .stderr
                    .take()
                    .and_then(|t| t.join().ok())
                    .unwrap_or_default();
                assert!(status.success(), "mcp exited {status}: {stderr}");
                return stderr;
            }
            if started.elapsed() > EXIT_WAIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the server did not exit after its stdin closed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The daemon an attached server started: shut down (and proven gone) when dropped, so a
/// failing test leaves no daemon behind either.
struct DaemonGuard {
    root: PathBuf,
}

impl DaemonGuard {
    /// The daemon's pid, from its `hello`.
    fn pid(&self) -> Option<i32> {
        let socket = self.root.join("procjournal.sock");
        let mut stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
        stream
            .write_all(b"{\"v\":1,\"id\":1,\"op\":\"hello\"}\n")
            .ok()?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).ok()?;
        let hello: Value = serde_json::from_str(&line).ok()?;
        i32::try_from(hello["result"]["pid"].as_u64()?).ok()
    }

    /// `procjournal shutdown`, then waits until the daemon's process is gone.
    fn shut_down(&self) {
        let pid = self.pid();
        let out = bin()
            .arg("shutdown")
            .arg("--root")
            .arg(&self.root)
            .stdin(Stdio::null())
            .output()
            .expect("procjournal shutdown");
        assert!(
            out.status.success(),
            "shutdown: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(pid) = pid {
            wait_gone(pid);
        }
        assert!(
            !self.root.join("procjournal.sock").exists(),
            "the daemon's socket outlived it"
        );
    }
}

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = bin()
                .arg("shutdown")
                .arg("--root")
                .arg(&self.root)
                .stdin(Stdio::null())
                .output();
            if alive(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

fn alive(pid: i32) -> bool {
    // A zombie is not alive: its /proc stat says Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn wait_gone(pid: i32) {
    let started = Instant::now();
    while alive(pid) {
        assert!(
            started.elapsed() < EXIT_WAIT,
            "process {pid} is still alive"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// A validator of the JSON Schema keywords schemars writes (shared with tests/it/mcp_props.rs).

use crate::common::schema;
use schema::violations;

/// The output schema of every tool, from `tools/list`.
pub(crate) fn output_schemas(server: &mut Server) -> Map<String, Value> {
    let listed = server.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    let mut schemas = Map::new();
    for tool in tools {
        let name = tool["name"].as_str().expect("name").to_owned();
        let schema = tool
            .get("outputSchema")
            .cloned()
            .unwrap_or_else(|| panic!("tool {name} declares no outputSchema"));
        assert_eq!(schema["type"], "object", "{name}: {schema}");
        schemas.insert(name, schema);
    }
    schemas
}

/// Checks a tool's structured content against its output schema; returns it.
pub(crate) fn conforms(schemas: &Map<String, Value>, tool: &str, content: Value) -> Value {
    let schema = schemas
        .get(tool)
        .unwrap_or_else(|| panic!("no schema for {tool}"));
    let mut out = Vec::new();
    violations(schema, schema, &content, "", &mut out);
    assert!(out.is_empty(), "{tool}: {out:#?}\nin {content}");
    // The top level, spelled out: every required property is there, and nothing else is.
    let properties = schema["properties"].as_object().expect("properties");
    for (key, _) in content.as_object().expect("an object") {
        assert!(
            properties.contains_key(key),
            "{tool}: {key} is not in its schema"
        );
    }
    content
}

/// Runs every tool once on `server` and checks each result against the tool's output schema;
/// also reads `héllo世界` in 4-byte pages. Returns the tools called.
fn exercise_every_tool(server: &mut Server) -> Vec<String> {
    let schemas = output_schemas(server);
    let mut called = Vec::new();
    let mut call = |server: &mut Server, tool: &str, args: Value| {
        called.push(tool.to_owned());
        let content = server.ok(tool, args);
        conforms(&schemas, tool, content)
    };
    // `printf` with octal escapes: héllo世界 as its UTF-8 bytes.
    let script = r"printf 'h\303\251llo\344\270\226\347\225\214'; read line; echo; echo got:$line; exec sleep 300";
    let started = call(server, "start", json!({"command": ["sh", "-c", script]}));
    let handle = started["handle"].as_str().expect("handle").to_owned();
    let mut text = String::new();
    let mut pages = Vec::new();
    let mut cursor = 0;
    while text != "héllo世界" {
        let page = call(
            server,
            "output",
            json!({"handle": handle, "cursor": cursor, "max_bytes": 4, "wait_ms": 1000}),
        );
        let data = page["data"].as_str().expect("data");
        assert!(!data.contains('\u{fffd}'), "page {page}");
        if !data.is_empty() {
            pages.push(data.to_owned());
        }
        text.push_str(data);
        cursor = page["next_cursor"].as_u64().expect("next_cursor");
        assert!(text.len() <= "héllo世界".len(), "{text:?}");
    }
    assert_eq!(pages, ["hél", "lo", "世", "界"]);
    let wrote = call(server, "input", json!({"handle": handle, "text": "hi\n"}));
    assert_eq!(wrote["bytes_written"], 3);
    call(
        server,
        "await_input",
        json!({"handle": handle, "waiting": true}),
    );
    call(server, "interrupt", json!({"handle": handle}));
    let waited = call(
        server,
        "wait",
        json!({"handle": handle, "timeout_ms": 30000}),
    );
    assert_eq!(waited["state"], "interrupted", "{waited}");
    let raw = call(
        server,
        "output",
        json!({"handle": handle, "rendering": "base64"}),
    );
    assert!(raw["data"].as_str().is_some_and(|d| !d.is_empty()));
    let again = call(server, "restart", json!({"handle": handle}));
    assert_eq!(again["restart_of"], handle.as_str(), "{again}");
    let again_handle = again["handle"].as_str().expect("handle").to_owned();
    call(
        server,
        "stop",
        json!({"handle": again_handle, "grace_ms": 5000}),
    );
    let tty = call(
        server,
        "start",
        json!({"command": ["sleep", "300"], "pty": {"rows": 24, "cols": 80}}),
    );
    let tty_handle = tty["handle"].as_str().expect("handle").to_owned();
    let resized = call(
        server,
        "resize",
        json!({"handle": tty_handle, "rows": 30, "cols": 100}),
    );
    assert_eq!(
        (resized["rows"].as_u64(), resized["cols"].as_u64()),
        (Some(30), Some(100))
    );
    let stopped = call(
        server,
        "stop",
        json!({"handle": tty_handle, "grace_ms": 5000}),
    );
    assert!(
        stopped["state"] == "terminated" || stopped["state"] == "killed",
        "{stopped}"
    );
    let captured = call(
        server,
        "capture",
        json!({"start": {"command": ["sh", "-c", r"printf 'h\303\251llo\n'; exit 3"]}}),
    );
    assert_eq!(captured["complete"], true, "{captured}");
    assert_eq!(captured["exit_code"], 3, "{captured}");
    assert_eq!(captured["streams"][0]["prefix"], "héllo\n", "{captured}");
    let listed = call(server, "list", json!({}));
    assert!(listed["processes"].as_array().is_some_and(|p| p.len() >= 2));
    call(server, "admission", json!({}));
    called
}

fn assert_every_tool_was_called(server: &mut Server, called: &[String]) {
    for tool in output_schemas(server).keys() {
        assert!(called.contains(tool), "tool {tool} was not exercised");
    }
}

// ---------------------------------------------------------------------------------------------

/// The MCP Inspector in CLI mode starts a server per call: start through one server, read
/// through a second, stop through a third. Attached to the daemon the first one started, the
/// process runs on in between.
#[test]
fn processes_outlive_each_server_as_the_inspector_uses_them() {
    let work = tempfile::tempdir().expect("tempdir");
    let root = work.path().join("root");
    let daemon = DaemonGuard { root: root.clone() };

    let mut first = Server::start(&root, &[]);
    let instructions = first.initialize();
    assert!(
        instructions.contains("keep running when this server exits"),
        "{instructions}"
    );
    let started = first.ok(
        "start",
        json!({"command": ["sh", "-c", "echo ready:$$; exec sleep 300"]}),
    );
    let handle = started["handle"].as_str().expect("handle").to_owned();
    let pid = i32::try_from(started["pid"].as_u64().expect("pid")).expect("pid");
    let stderr = first.close();
    assert!(
        stderr.contains("started one"),
        "the first server says it started a daemon: {stderr}"
    );
    assert!(
        daemon.pid().is_some(),
        "the daemon outlives the first server"
    );

    // The process kept running after the server that started it exited.
    assert!(
        alive(pid),
        "the process ended with the server that started it"
    );
    let mut second = Server::start(&root, &[]);
    second.initialize();
    let listed = second.ok("list", json!({}));
    let entry = listed["processes"]
        .as_array()
        .and_then(|p| p.iter().find(|e| e["handle"] == handle))
        .cloned()
        .expect("the second server lists the process");
    assert_eq!(entry["state"], "running", "{entry}");
    let page = second.ok("output", json!({"handle": handle, "wait_ms": 10000}));
    assert_eq!(page["data"], format!("ready:{pid}\n"));
    assert_eq!(page["state"], "running");
    let stderr = second.close();
    assert!(stderr.contains("attached to the daemon"), "{stderr}");

    assert!(alive(pid), "the process ended with the second server");
    let mut third = Server::start(&root, &[]);
    third.initialize();
    let stopped = third.ok("stop", json!({"handle": handle, "grace_ms": 5000}));
    assert_eq!(stopped["state"], "terminated", "{stopped}");
    let waited = third.ok("wait", json!({"handle": handle, "timeout_ms": 10000}));
    assert_eq!(waited["state"], "terminated");
    // Every tool works attached, and its results fit its output schema.
    let called = exercise_every_tool(&mut third);
    assert_every_tool_was_called(&mut third, &called);
    third.close();
    wait_gone(pid);
    daemon.shut_down();
}

/// Standalone, the server's processes end with it, and the instructions say so.
#[test]
fn a_standalone_server_stops_its_processes_when_it_exits() {
    let work = tempfile::tempdir().expect("tempdir");
    let root = work.path().join("root");
    let mut server = Server::start(&root, &["--standalone"]);
    let instructions = server.initialize();
    assert!(
        instructions.contains("every process it started is stopped when the server exits"),
        "{instructions}"
    );
    let started = server.ok("start", json!({"command": ["sleep", "300"]}));
    let handle = started["handle"].as_str().expect("handle").to_owned();
    let pid = i32::try_from(started["pid"].as_u64().expect("pid")).expect("pid");
    let called = exercise_every_tool(&mut server);
    assert_every_tool_was_called(&mut server, &called);
    server.close();
    assert!(!alive(pid), "the process outlived its standalone server");
    assert!(
        !root.join("procjournal.sock").exists(),
        "no daemon was started"
    );

    let mut later = Server::start(&root, &["--standalone"]);
    later.initialize();
    let listed = later.ok("list", json!({}));
    let entry = listed["processes"]
        .as_array()
        .and_then(|p| p.iter().find(|e| e["handle"] == handle))
        .cloned()
        .expect("listed");
    assert_eq!(entry["state"], "terminated", "{entry}");
    later.close();
}

/// Each malformed line gets the JSON-RPC error the specification requires, with the id
/// whenever one can be read, and the server keeps serving.
#[test]
fn malformed_lines_get_json_rpc_errors_with_their_ids() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start(&work.path().join("root"), &["--standalone"]);
    // Before the handshake too: a line that is not JSON is answered, and the session goes on.
    server.send_raw(b"this is not JSON");
    let parse = server.next();
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null);
    server.initialize();

    let cases: [(&[u8], i64, Value); 7] = [
        (b"{\"jsonrpc\":\"2.0\",\"id\":1,", -32700, Value::Null),
        (b"{\"jsonrpc\":\"2.0\",\"id\":41}", -32600, json!(41)),
        (b"{\"id\":\"s-42\",\"method\":\"tools/list\"}", -32600, json!("s-42")),
        (b"{\"jsonrpc\":\"2.0\",\"id\":43,\"method\":7}", -32600, json!(43)),
        (b"[{\"jsonrpc\":\"2.0\",\"id\":44,\"method\":\"ping\"}]", -32600, Value::Null),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":45,\"method\":\"tools/call\",\"params\":{\"arguments\":{}}}",
            -32602,
            json!(45),
        ),
        (b"\xff\xfe not UTF-8", -32700, Value::Null),
    ];
    for (line, code, id) in cases {
        server.send_raw(line);
        let answer = server.next();
        assert_eq!(
            answer["error"]["code"],
            code,
            "{}: {answer}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(
            answer["id"],
            id,
            "{}: {answer}",
            String::from_utf8_lossy(line)
        );
    }

    // A line longer than the server reads is skipped unread and answered, id null.
    let long = vec![b'x'; (16 << 20) + 1];
    server.send_raw(&long);
    let answer = server.next();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["id"], Value::Null);

    // Two in-flight requests with one id: both answered (the second refused with its id).
    let started = server.ok("start", json!({"command": ["sleep", "300"]}));
    let handle = started["handle"].clone();
    let wait = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "wait", "arguments": {"handle": handle, "timeout_ms": 3000}}});
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "list", "arguments": {}}});
    server.send(&wait);
    server.send(&list);
    let (a, b) = (server.answer(&json!(9)), server.answer(&json!(9)));
    let (duplicate, waited) = if a.get("error").is_some() {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(duplicate["error"]["code"], -32600, "{duplicate}");
    assert!(
        duplicate["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in progress")),
        "{duplicate}"
    );
    let text = waited["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("wait_timeout: "), "{waited}");
    // Once answered, the id may be used again.
    server.send(&list);
    let again = server.answer(&json!(9));
    assert!(
        again["result"]["structuredContent"]["processes"].is_array(),
        "{again}"
    );

    // A tool error is text and isError, with no structured content.
    let refused = server.call("output", json!({"handle": "p-xyz"}));
    assert_eq!(refused["isError"], true);
    assert!(refused.get("structuredContent").is_none(), "{refused}");
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("bad_args: "))
    );
    server.ok("stop", json!({"handle": handle, "grace_ms": 1000}));
    server.close();
}

/// An attached server on a root a standalone server holds cannot start a daemon there: it exits
/// with an error that names the lock (from the daemon's log), and writes nothing on stdout.
#[test]
fn attaching_to_a_root_held_by_a_standalone_server_fails_naming_the_lock() {
    let work = tempfile::tempdir().expect("tempdir");
    let root = work.path().join("root");
    let mut holder = Server::start(&root, &["--standalone"]);
    holder.initialize();
    let out = bin()
        .arg("mcp")
        .arg("--root")
        .arg(&root)
        .stdin(Stdio::null())
        .output()
        .expect("procjournal mcp");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("LOCK") && stderr.contains("daemon.log"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "stdout is the MCP channel: {:?}",
        out.stdout
    );
    holder.close();
}

/// The validator above refuses what does not fit (so that its silence means something).
#[test]
fn the_schema_validator_refuses_what_does_not_fit() {
    let schema = json!({
        "type": "object",
        "properties": {
            "handle": {"type": "string"},
            "state": {"$ref": "#/$defs/State"},
            "exit_code": {"type": ["integer", "null"]},
            "proof": {"anyOf": [{"$ref": "#/$defs/Proof"}, {"type": "null"}]},
        },
        "required": ["handle", "state"],
        "$defs": {
            "State": {"type": "string", "enum": ["running", "exited"]},
            "Proof": {"oneOf": [
                {"type": "object", "properties": {"by": {"const": "receipt"}}, "required": ["by"]},
                {"type": "object", "properties": {"by": {"const": "boot"}}, "required": ["by"]},
            ]},
        },
    });
    let fails = |value: Value| {
        let mut out = Vec::new();
        violations(&schema, &schema, &value, "", &mut out);
        out
    };
    assert!(fails(json!({"handle": "p", "state": "running", "exit_code": null})).is_empty());
    assert!(fails(json!({"handle": "p", "state": "exited", "proof": {"by": "boot"}})).is_empty());
    for bad in [
        json!({"state": "running"}),
        json!({"handle": 1, "state": "running"}),
        json!({"handle": "p", "state": "sleeping"}),
        json!({"handle": "p", "state": "running", "exit_code": "0"}),
        json!({"handle": "p", "state": "running", "proof": {"by": "guess"}}),
        json!([]),
    ] {
        assert!(!fails(bad.clone()).is_empty(), "{bad} passed");
    }
}

/// `tools/list` fits an agent's budget: at most 12 KiB of JSON for every tool, each with an
/// input and an output schema, and no format outside JSON Schema's, no optional input as a
/// union with null or a `$ref` (clients that convert typed text could not send it), no output
/// field typed null and no `type` array anywhere.
#[test]
fn the_tool_listing_is_small_and_standard() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start(&work.path().join("root"), &["--standalone"]);
    server.initialize();
    let listed = server.request("tools/list", json!({}));
    let result = &listed["result"];
    let bytes = serde_json::to_vec(result).expect("json").len();
    eprintln!("tools/list: {bytes} bytes of JSON");
    assert!(bytes <= 12_288, "tools/list is {bytes} bytes");
    let text = result.to_string();
    for format in ["uint", "int8", "int16", "int32", "int64", "double", "float"] {
        assert!(
            !text.contains(&format!("\"format\":\"{format}")),
            "{format}"
        );
    }
    for tool in result["tools"].as_array().expect("tools") {
        assert!(tool["outputSchema"]["properties"].is_object(), "{tool}");
        // A result leaves out a field without a value, so no output field is typed null, and
        // each type is its own branch (what the Inspector's `--strict` check asks for).
        let output = tool["outputSchema"].to_string();
        assert!(!output.contains("\"null\""), "{output}");
        assert!(!output.contains("\"type\":["), "{output}");
        let input = tool["inputSchema"].to_string();
        assert!(
            !input.contains("$ref") && !input.contains("\"null\""),
            "{input}"
        );
    }
    server.close();
}

/// The 8.9 KB counter is read whole in at most three calls: a start that yields, then output
/// that waits for quiet or the end. Handles, numbers and names all name the process, and a
/// string command runs through `sh -c`, recorded so.
#[test]
fn a_counter_is_read_in_three_calls_by_any_reference() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start(&work.path().join("root"), &["--standalone"]);
    server.initialize();
    let script = "for i in $(seq 1 2000); do echo $i; done";
    let expected: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    assert_eq!(expected.len(), 8893);
    let mut calls = 1;
    let started = server.ok(
        "start",
        json!({"command": script, "yield_ms": 30000, "name": "counter"}),
    );
    assert_eq!(started["command"], json!(["sh", "-c", script]), "{started}");
    let mut page = started["output"].clone();
    let mut text = page["data"].as_str().expect("data").to_owned();
    let number = started["number"].as_u64().expect("number");
    while !(page["state"] != "running"
        && page["state"] != "starting"
        && page["next_cursor"] == page["total_bytes"])
    {
        calls += 1;
        assert!(calls <= 3, "more than three calls: {page}");
        page = server.ok(
            "output",
            json!({"handle": number, "cursor": page["next_cursor"], "wait_ms": 30000,
                   "settle_ms": 1000}),
        );
        text.push_str(page["data"].as_str().expect("data"));
    }
    eprintln!("counter: {} bytes in {calls} calls", text.len());
    assert_eq!(text, expected);
    // The last lines, by name and by "#N".
    let tail = server.ok("output", json!({"handle": "counter", "tail_lines": 2}));
    assert_eq!(tail["data"], "1999\n2000\n", "{tail}");
    assert_eq!(tail["cursor"], 8893 - 10);
    let waited = server.ok("wait", json!({"handle": format!("#{number}")}));
    assert_eq!(waited["exit_code"], 0, "{waited}");
    let refused = server.call("wait", json!({"handle": "nobody"}));
    assert_eq!(refused["isError"], true, "{refused}");
    server.close();
}
