//! Properties of the bytes an MCP client sends and of the daemon's responses a client decodes:
//! `mcp::transport::classify` and the clients' response decoder are total over arbitrary and
//! mutated input, with the invariants of their fuzz bodies (`fuzzing::mcp_line`,
//! `fuzzing::client_response`), and every line `classify` answers carries the id it could read.

use procjournal::fuzzing;
use procjournal::mcp::transport::{
    INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Verdict, classify,
};
use proptest::prelude::*;
use serde_json::{Value, json};

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
