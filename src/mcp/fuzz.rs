//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

use std::collections::BTreeMap;
use std::path::PathBuf;

// ---------------------------------------------------------------------------------------------
// mcp_line

/// The MCP server's line decoder ([`crate::mcp::transport::classify`]: framing, the JSON-RPC
/// envelope, the SDK's typed messages) over arbitrary bytes, and the same bytes as a tool call's
/// name and arguments: never a panic; an answer is exactly one JSON-RPC error line (an object
/// with `jsonrpc` "2.0", code -32700, -32600 or -32602, a message, and an id that is the string
/// or integer the line carried under `id`, else null); bytes that are not JSON are answered -32700
/// with id null; a message that passes re-encodes to a line that passes again. A `tools/call`
/// whose params hold the input's text as `name` and an object as `arguments` passes (the tool
/// name is the server's to refuse); with `arguments` neither an object nor null it is answered
/// -32602 with its id.
#[cfg(feature = "mcp")]
pub fn mcp_line(data: &[u8]) {
    use crate::mcp::transport::{PARSE_ERROR, Verdict, classify};
    let line = data.strip_suffix(b"\n").unwrap_or(data);
    let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
    let trimmed = trimmed.strip_prefix(b"\xef\xbb\xbf").unwrap_or(trimmed);
    match classify(line) {
        Verdict::Answer(answer) => {
            let value = check_error_answer(trimmed, &answer);
            if serde_json::from_slice::<serde_json::Value>(trimmed).is_err() {
                assert_eq!(value["error"]["code"], PARSE_ERROR);
                assert!(value["id"].is_null());
            }
        }
        Verdict::Pass(message) => {
            let again = match serde_json::to_vec(&message) {
                Ok(bytes) => bytes,
                Err(e) => panic!("a message that passed does not encode: {e}"),
            };
            assert!(
                matches!(classify(&again), Verdict::Pass(_)),
                "a re-encoded message does not pass"
            );
        }
        Verdict::Ignore(_) => {}
    }
    check_call_line(data, line);
}

/// An answer of the MCP server's line decoder to `line`: exactly one JSON-RPC error line (an
/// object with `jsonrpc` "2.0", code -32700, -32600 or -32602, a message, and the id the line
/// carried, else null), as a JSON value.
#[cfg(feature = "mcp")]
fn check_error_answer(line: &[u8], answer: &[u8]) -> serde_json::Value {
    let Some(body) = answer.strip_suffix(b"\n") else {
        panic!("an answer without its newline");
    };
    assert!(!body.contains(&b'\n'), "an answer spans lines");
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => panic!("an answer that is not JSON: {e}"),
    };
    assert_eq!(value["jsonrpc"], "2.0");
    let code = value["error"]["code"].as_i64().unwrap_or_default();
    assert!([-32700, -32600, -32602].contains(&code), "code {code}");
    assert!(
        value["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    let sent: Option<serde_json::Value> = serde_json::from_slice(line).ok();
    let sent_id = sent
        .as_ref()
        .and_then(|v| v.get("id"))
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64());
    match sent_id {
        Some(id) => assert_eq!(value["id"], *id, "the id is not echoed"),
        None => assert!(value["id"].is_null(), "an id the line did not carry"),
    }
    value
}

/// A `tools/call` whose params hold `data`'s text as `name` and `line` (when it is JSON) as
/// `arguments` passes when they are an object (or null), and is answered -32602 with its id
/// otherwise.
#[cfg(feature = "mcp")]
fn check_call_line(data: &[u8], line: &[u8]) {
    use crate::mcp::transport::{INVALID_PARAMS, Verdict, classify};
    let name = String::from_utf8_lossy(data);
    let arguments = serde_json::from_slice::<serde_json::Value>(line)
        .unwrap_or_else(|_| serde_json::Value::Object(serde_json::Map::new()));
    let call = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    });
    let call = call.to_string().into_bytes();
    // `arguments` may be left out, so null is the same as none.
    match (
        classify(&call),
        arguments.is_object() || arguments.is_null(),
    ) {
        (Verdict::Pass(_), true) => {}
        (Verdict::Answer(answer), false) => {
            let value = check_error_answer(&call, &answer);
            assert_eq!(value["error"]["code"], INVALID_PARAMS);
            assert_eq!(value["id"], 1);
        }
        (verdict, object) => panic!("a tools/call with object arguments {object}: {verdict:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// mcp_tool_call

/// The MCP server's decoding of a `tools/call` ([`crate::mcp::decode_call`]: the tool looked up
/// by name, its `arguments` validated into the protocol request it runs) over arbitrary bytes.
/// The first byte picks the name: below 0xF0 the listed tool at that index (modulo the count)
/// with the rest as `arguments`; else the text of the rest's first line, with what follows it as
/// `arguments`. Arguments that are not a JSON object are left out (a client cannot send them: the
/// transport answers -32602, see [`mcp_line`]). The invariants are [`check_tool_call`]'s.
#[cfg(feature = "mcp")]
pub fn mcp_tool_call(data: &[u8]) {
    let [pick, rest @ ..] = data else {
        return;
    };
    let listed = listed_tools();
    let (name, arguments) = if *pick < 0xF0 {
        let name = &listed[usize::from(*pick) % listed.len()];
        (std::borrow::Cow::Borrowed(name.as_str()), rest)
    } else {
        let (head, tail) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        (String::from_utf8_lossy(head), tail)
    };
    let arguments = match serde_json::from_slice::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(object)) => Some(object),
        _ => None,
    };
    check_tool_call(&name, arguments);
}

/// The names of the tools the server lists (`tools/list`), in order; built once, since each
/// builds its JSON Schemas.
#[cfg(feature = "mcp")]
pub fn listed_tools() -> &'static [String] {
    static LISTED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LISTED.get_or_init(|| match crate::mcp::tools() {
        Ok(tools) => tools.into_iter().map(|t| t.name.into_owned()).collect(),
        Err(e) => panic!("the tool list cannot be built: {e}"),
    })
}

/// One `tools/call` with this `name` and `arguments` (`None`: left out), as the server decodes
/// it: never a panic, and
/// - a name the server lists decodes to a call of that tool, or to refused arguments; any other
///   name is an unknown tool, whose answer is the JSON-RPC error -32602 ("unknown tool …", the
///   name cut short);
/// - refused arguments are `bad_args` or `too_large` only, answered as docs/mcp.md says: a tool
///   result with `isError`, no structured content, and the one text `code: message`;
/// - arguments left out decode as an empty object does;
/// - a decoded request is valid as the socket defines it: its wire form validates
///   ([`crate::protocol::request_from_args`]) to the very same request, and so does what an
///   attached server sends the daemon (the request with the server's working directory and
///   environment added, as `mcp::DaemonLink::localize` adds them) as one line the daemon decodes
///   back to it, unless that line is over the socket's bound (then refused whole, as too large).
#[cfg(feature = "mcp")]
pub fn check_tool_call(name: &str, arguments: Option<serde_json::Map<String, serde_json::Value>>) {
    use crate::mcp::decode_call;
    let listed = listed_tools().iter().any(|t| t == name);
    let decoded = decode_call(name, arguments.clone());
    if arguments.is_none() {
        assert_eq!(
            decoded,
            decode_call(name, Some(serde_json::Map::new())),
            "arguments left out decode otherwise than an empty object"
        );
    }
    match decoded {
        Ok(call) => {
            assert!(listed, "a call of a tool the server does not list");
            assert_eq!(call.tool(), name);
            check_decoded_request(&call);
        }
        Err(refused) => check_refused_call(&refused, listed),
    }
}

/// A decoded call's request is valid as the socket defines it, as it is and as an attached
/// server sends it to the daemon.
#[cfg(feature = "mcp")]
fn check_decoded_request(call: &crate::mcp::ToolCall) {
    use crate::mcp::DaemonLink;
    use crate::protocol::{ProtocolErrorKind, decode_request, request_from_args};
    let (op, args) = call.request().to_wire();
    assert_eq!(op, call.op(), "arguments decoded into another operation");
    match request_from_args(op, args) {
        Ok(again) => assert_eq!(&again, call.request(), "the request changed"),
        Err(e) => panic!("a decoded request the socket refuses: {e}"),
    }
    let link = DaemonLink {
        socket: PathBuf::from("/nonexistent/daemon.sock"),
        cwd: Some("/fuzz/cwd".to_owned()),
        env: BTreeMap::from([
            ("HOME".to_owned(), "/fuzz".to_owned()),
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ]),
    };
    let sent = link.localize(call.request().clone());
    let line = sent.to_line(Some(serde_json::Value::from(1)));
    let Some(body) = line.strip_suffix(b"\n") else {
        panic!("a request line without its newline");
    };
    match decode_request(body) {
        Ok(envelope) => {
            assert_eq!(envelope.request, sent, "the daemon reads another request")
        }
        Err(e) if matches!(e.kind, ProtocolErrorKind::TooLarge { .. }) => {}
        Err(e) => panic!("the daemon refuses what an attached server sends: {e}"),
    }
}

/// A refused call: an unknown tool answered as a JSON-RPC error, or refused arguments of a listed
/// tool answered as a tool error (`listed`: whether the server lists the tool called).
#[cfg(feature = "mcp")]
fn check_refused_call(refused: &crate::mcp::CallError, listed: bool) {
    use crate::mcp::CallError;
    use crate::protocol::ErrorCode;
    match (refused, refused.answer()) {
        (CallError::UnknownTool { name: shown, .. }, Err(error)) => {
            assert!(!listed, "a listed tool is unknown");
            assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(
                error.message.starts_with("unknown tool "),
                "{}",
                error.message
            );
            assert!(shown.chars().count() <= 65, "the name is not cut short");
        }
        (CallError::Arguments(api), Ok(result)) => {
            assert!(
                listed,
                "arguments refused for a tool the server does not list"
            );
            let code = match api.code {
                ErrorCode::BadArgs => "bad_args",
                ErrorCode::TooLarge => "too_large",
                other => panic!("arguments refused with {other:?}"),
            };
            assert!(!api.message.is_empty(), "a refusal without a message");
            assert_eq!(result.is_error, Some(true));
            assert!(
                result.structured_content.is_none(),
                "a tool error with structured content"
            );
            let texts: Vec<&str> = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
                .collect();
            assert_eq!(texts, [format!("{code}: {}", api.message)]);
        }
        (refused, answer) => panic!("{refused:?} answered {answer:?}"),
    }
}
