//! Properties of the bytes an MCP client sends and of the daemon's responses a client decodes:
//! `mcp::transport::classify` and the clients' response decoder are total over arbitrary and
//! mutated input, with the invariants of their fuzz bodies (`fuzzing::mcp_line`,
//! `fuzzing::client_response`), and every line `classify` answers carries the id it could read.
//! A tool call's name and arguments (`mcp::decode_call`), for every tool the server lists, with
//! arbitrary names and arbitrary JSON in and around each tool's documented arguments: a call the
//! server runs, valid as the socket defines it, or the documented error (an unknown tool is
//! JSON-RPC's -32602, bad arguments the tool error `bad_args: …`), with the invariants of
//! `fuzzing::check_tool_call`; and the arguments of every call that decodes satisfy the input
//! schema the tool declares.

use crate::common::schema;

use procjournal::fuzzing;
use procjournal::mcp::transport::{
    INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Verdict, classify,
};
use procjournal::mcp::{CallError, decode_call};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Ids as clients send them, good and bad.
fn id() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        any::<i64>().prop_map(|n| Some(json!(n))),
        "[a-z0-9-]{0,12}".prop_map(|s| Some(json!(s))),
        Just(Some(Value::Null)),
        Just(Some(json!(1.5))),
        Just(Some(json!(u64::MAX))),
        Just(Some(json!(true))),
        Just(Some(json!([1]))),
    ]
}

fn method() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        proptest::sample::select(vec![
            "initialize",
            "ping",
            "tools/list",
            "tools/call",
            "notifications/initialized",
            "notifications/cancelled",
            "resources/read",
            "no/such/method",
        ])
        .prop_map(|m| Some(json!(m))),
        Just(Some(json!(7))),
    ]
}

fn params() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(json!({}))),
        Just(Some(json!({"name": "list", "arguments": {}}))),
        Just(Some(
            json!({"name": "start", "arguments": {"command": ["true"]}})
        )),
        Just(Some(json!({"name": 1}))),
        Just(Some(json!({"arguments": []}))),
        Just(Some(json!({"requestId": 3}))),
        Just(Some(
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"}})
        )),
        Just(Some(json!([1, 2]))),
        Just(Some(json!("x"))),
        Just(Some(Value::Null)),
    ]
}

fn jsonrpc() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => Just(Some(json!("2.0"))),
        1 => Just(None),
        1 => Just(Some(json!("1.0"))),
        1 => Just(Some(json!(2))),
    ]
}

/// A JSON-RPC-shaped object from the parts (a part that is `None` is left out).
fn message() -> impl Strategy<Value = Value> {
    (jsonrpc(), id(), method(), params()).prop_map(|(v, id, method, params)| {
        let mut object = serde_json::Map::new();
        for (key, value) in [
            ("jsonrpc", v),
            ("id", id),
            ("method", method),
            ("params", params),
        ] {
            if let Some(value) = value {
                object.insert(key.to_owned(), value);
            }
        }
        Value::Object(object)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Arbitrary bytes: the fuzz body's invariants.
    #[test]
    fn arbitrary_lines_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::mcp_line(&bytes);
        fuzzing::client_response(&bytes);
    }

    /// JSON-RPC-shaped objects, whole and mutated: an answer carries the id the object had
    /// (when a string or a number), and its code says why.
    #[test]
    fn every_answer_carries_the_id_it_could_read(
        message in message(),
        cut in any::<prop::sample::Index>(),
        flip in any::<(prop::sample::Index, u8)>(),
    ) {
        let line = message.to_string().into_bytes();
        fuzzing::mcp_line(&line);
        let mut truncated = line.clone();
        truncated.truncate(cut.index(line.len() + 1));
        fuzzing::mcp_line(&truncated);
        let mut flipped = line.clone();
        let at = flip.0.index(line.len());
        flipped[at] ^= flip.1;
        fuzzing::mcp_line(&flipped);

        if let Verdict::Answer(answer) = classify(&line) {
            let answer: Value = serde_json::from_slice(&answer).expect("an answer is JSON");
            let code = answer["error"]["code"].as_i64().expect("a code");
            prop_assert!(code == INVALID_REQUEST || code == INVALID_PARAMS, "{}", answer);
            let sent = message
                .get("id")
                .filter(|id| id.is_string() || id.is_i64() || id.is_u64());
            prop_assert_eq!(&answer["id"], sent.unwrap_or(&Value::Null));
            if code == INVALID_PARAMS {
                prop_assert_eq!(&message["jsonrpc"], "2.0");
                prop_assert!(message["method"].is_string());
            }
        }
        if let Verdict::Answer(answer) = classify(&truncated)
            && serde_json::from_slice::<Value>(&truncated).is_err()
        {
            let answer: Value = serde_json::from_slice(&answer).expect("an answer is JSON");
            prop_assert_eq!(answer["error"]["code"].as_i64(), Some(PARSE_ERROR));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tool calls: the lookup by name and the arguments.

const HANDLE: &str = "p-0123456789abcdef0123456789abcdef";

/// Arguments each tool documents, every field given (docs/mcp.md's table); `None` for a
/// name no tool has.
fn documented_args(tool: &str) -> Option<Value> {
    let start = json!({
        "command": ["sh", "-c", "echo hi"], "cwd": "/tmp", "env": {"A": "b"},
        "env_persist": {"M": "fast"}, "labels": {"k": "v"}, "name": "job_1",
        "timeout_ms": 1000, "idle_timeout_ms": 500, "retention_bytes": 8 << 20,
        "queue_ms": 10, "pty": {"rows": 24, "cols": 80},
    });
    Some(match tool {
        "start" => start,
        "output" => json!({"handle": HANDLE, "cursor": 7, "max_bytes": 4,
            "rendering": "base64", "wait_ms": 100}),
        "input" => json!({"handle": HANDLE, "base64": "eQo=", "close": true}),
        "restart" => json!({"handle": HANDLE, "env": {"TOKEN": "x"}, "client_env": {"HOME": "/h"},
            "queue_ms": 5, "pty": {"rows": 1, "cols": 1}}),
        "resize" => json!({"handle": HANDLE, "rows": 40, "cols": 120}),
        "stop" => json!({"handle": HANDLE, "grace_ms": 1000}),
        "interrupt" => json!({"handle": HANDLE}),
        "wait" => json!({"handle": HANDLE, "timeout_ms": 3000}),
        "list" => json!({"state": "running", "label": "k=v"}),
        "admission" => json!({}),
        "await_input" => json!({"handle": HANDLE, "waiting": false}),
        "capture" => json!({"start": {"command": ["true"], "inherit_env": true},
            "max_bytes": 65536, "rendering": "safe_text"}),
        _ => return None,
    })
}

/// The input schema every listed tool declares, by name.
fn input_schemas() -> Map<String, Value> {
    let tools = procjournal::mcp::tools().expect("the tool list");
    tools
        .into_iter()
        .map(|t| {
            (
                t.name.into_owned(),
                Value::Object((*t.input_schema).clone()),
            )
        })
        .collect()
}

/// Checks a tool call with the fuzz body's invariants, and, when it decodes, its arguments
/// against the tool's input schema (what an agent is told it may send covers what is accepted).
fn check_call(schemas: &Map<String, Value>, name: &str, arguments: Option<Map<String, Value>>) {
    fuzzing::check_tool_call(name, arguments.clone());
    if decode_call(name, arguments.clone()).is_ok() {
        let schema = &schemas[name];
        let value = Value::Object(arguments.unwrap_or_default());
        let mut out = Vec::new();
        schema::violations(schema, schema, &value, "", &mut out);
        assert!(
            out.is_empty(),
            "{name} accepted {value} against its schema: {out:#?}"
        );
    }
}

/// Every listed tool decodes its documented arguments, and the errors are docs/mcp.md's.
#[test]
fn every_listed_tool_decodes_its_documented_arguments() {
    let schemas = input_schemas();
    assert_eq!(schemas.len(), fuzzing::listed_tools().len());
    for name in fuzzing::listed_tools() {
        let args = documented_args(name)
            .unwrap_or_else(|| panic!("tool {name} has no documented arguments here"));
        let Value::Object(args) = args else {
            unreachable!("an object")
        };
        check_call(&schemas, name, Some(args.clone()));
        let call = decode_call(name, Some(args)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(call.tool(), name);
        assert_eq!(call.request().op(), call.op());
    }
    // A name no tool has: the JSON-RPC error, the name quoted, cut short.
    let long = "x".repeat(500);
    for name in ["Start", "start ", "", "tools/list", long.as_str()] {
        check_call(&schemas, name, None);
        let Err(refused) = decode_call(name, None) else {
            panic!("{name:?} decoded");
        };
        let error = refused.answer().expect_err("a JSON-RPC error");
        assert_eq!(error.code.0, INVALID_PARAMS as i32);
        assert!(error.message.len() < 300, "{}", error.message);
    }
    // Bad arguments: the tool error `bad_args: …`, as tests/it/mcp_stdio.rs sees it on the wire.
    let tool_error = |name: &str, args: Value| -> String {
        let Value::Object(args) = args else {
            unreachable!("an object")
        };
        check_call(&schemas, name, Some(args.clone()));
        let Err(refused) = decode_call(name, Some(args)) else {
            panic!("{name} decoded");
        };
        assert!(matches!(refused, CallError::Arguments(_)), "{refused:?}");
        let result = refused.answer().expect("a tool error");
        assert_eq!(result.is_error, Some(true));
        result.content[0].as_text().expect("text").text.clone()
    };
    for (name, args) in [
        ("output", json!({"handle": "p-xyz"})),
        ("output", json!({"handle": HANDLE, "max_bytes": 0})),
        ("start", json!({"command": []})),
        ("start", json!({"command": ["true"], "cwd": "relative"})),
        ("stop", json!({"handle": HANDLE, "grace": 1})),
        ("resize", json!({"handle": HANDLE, "rows": 0, "cols": 80})),
        ("admission", json!({"x": 1})),
        ("list", json!({"label": "novalue"})),
    ] {
        let text = tool_error(name, args.clone());
        assert!(text.starts_with("bad_args: "), "{name} {args}: {text}");
    }
    let huge = "y".repeat(procjournal::protocol::REQUEST_BYTES_MAX);
    let text = tool_error("input", json!({"handle": HANDLE, "text": huge}));
    assert!(text.starts_with("too_large: "), "{text}");
}

/// Field names of every tool's arguments, and a few no tool has.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(vec![
            "handle", "command", "cwd", "env", "env_persist", "client_env", "inherit_env",
            "login_shell_overlay", "labels", "name", "timeout_ms", "idle_timeout_ms",
            "retention_bytes", "queue_ms", "pty", "rows", "cols", "start", "cursor",
            "max_bytes", "rendering", "wait_ms", "text", "base64", "close", "grace_ms",
            "waiting", "state", "label", "reference", "older_than_ms",
        ])
        .prop_map(str::to_owned),
        1 => "[a-zA-Z_]{0,10}",
    ]
}

/// JSON leaves, mostly near the values the tools take and their bounds.
fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        proptest::sample::select(vec![
            0u64,
            1,
            24,
            80,
            65535,
            65536,
            65537,
            1 << 20,
            (1 << 20) + 1,
            8 << 20,
            3_600_000,
            4 << 30,
            (4 << 30) + 1,
            u64::MAX,
        ])
        .prop_map(Value::from),
        proptest::sample::select(vec![
            HANDLE,
            "p-",
            "p-1",
            "",
            "/",
            "/tmp",
            "rel",
            "k=v",
            "=v",
            "eQo=",
            "===",
            "safe_text",
            "base64",
            "running",
            "exited",
            "job_1",
            "p-job",
            "sh",
            "\0",
            "héllo世界",
        ])
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ]
}

/// Arbitrary JSON values built from those leaves.
fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A name the server lists, that name changed a little, or any text.
fn name() -> impl Strategy<Value = String> {
    let listed = || proptest::sample::select(fuzzing::listed_tools().to_vec());
    prop_oneof![
        6 => listed(),
        1 => listed().prop_map(|n| n.to_uppercase()),
        1 => listed().prop_map(|n| format!("{n} ")),
        1 => ".{0,80}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Any name, and a tool's documented arguments (or none) with fields removed, replaced or
    /// added with arbitrary JSON: a call that decodes is valid and fits the tool's input schema,
    /// anything else is the documented error.
    #[test]
    fn tool_calls_decode_or_give_the_documented_error(
        name in name(),
        documented in any::<bool>(),
        left_out in any::<bool>(),
        edits in proptest::collection::vec((key(), proptest::option::of(value())), 0..4),
    ) {
        let schemas = input_schemas();
        let mut args = match documented_args(&name) {
            Some(Value::Object(args)) if documented => args,
            _ => Map::new(),
        };
        for (key, value) in edits {
            match value {
                Some(value) => args.insert(key, value),
                None => args.remove(&key),
            };
        }
        let arguments = (!(left_out && args.is_empty())).then_some(args);
        check_call(&schemas, &name, arguments);
    }

    /// Arbitrary bytes through the fuzz target's body (its own reading of a name and arguments).
    #[test]
    fn arbitrary_tool_call_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        fuzzing::mcp_tool_call(&bytes);
    }
}
