//! The MCP server's stdio transport: JSON-RPC 2.0 messages, one per line, read and written here
//! instead of by the SDK's own stdio transport, so that every line gets the answer JSON-RPC
//! requires.
//!
//! Why not the SDK's: its transport deliberately ignores lines that are not JSON (no -32700),
//! answers JSON that is not a message with -32600 but without the request's id (the client then
//! waits forever for its answer), skips an over-long line silently, and its service keys
//! requests by id, so of two in-flight requests with one id only one is answered. A line
//! filter in front of it could not see when an id is answered; as a transport, this sees both
//! directions as typed messages.
//!
//! Invariants:
//! - every line that is not a message the server acts on is answered here, never dropped:
//!   not JSON → -32700 Parse error, id null; JSON that is not a request object (an array, a
//!   scalar, no `jsonrpc: "2.0"`, a method that is not a string, an id that is neither a
//!   string nor an integer, params that are neither an object nor an array) → -32600 Invalid
//!   Request, with the id whenever one can be read (a string or an integer under `id`), else
//!   null; a well-formed request for a method the server knows whose params do not fit it →
//!   -32602 Invalid params with its id (an unknown method is the server's -32601); a line
//!   longer than [`MCP_LINE_BYTES_MAX`] → -32600, id null (it is skipped unread, so its id
//!   is never seen);
//! - a request whose id is in flight (passed to the server and neither answered nor cancelled)
//!   is answered -32600 with that id and not passed on, so both get an answer;
//! - a notification or a response that does not parse gets no answer (JSON-RPC forbids
//!   answering a notification; nobody waits for an answer to a response); it is traced;
//! - stdout carries whole lines only, in order: one writer task writes every line, answers
//!   from here and the server's alike.
//!
//! [`classify`] is the decoder of the client's bytes: total, fuzzed
//! (`fuzz/fuzz_targets/mcp_line.rs`) and proptested (`tests/it/mcp_props.rs`).

use std::collections::HashSet;
use std::io;
use std::sync::Arc;

use crate::sync::Lock;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, ConstString, JsonRpcMessage, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::limits::MCP_LINE_BYTES_MAX;

/// JSON-RPC's error codes for messages that cannot be acted on.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// Lines waiting for the writer; a client that stops reading stops this transport's reads
/// once they are taken, instead of growing a queue.
const OUT_QUEUE: usize = 64;

/// What to do with one line from the client.
#[derive(Debug)]
pub enum Verdict {
    /// A message for the server.
    Pass(Box<ClientJsonRpcMessage>),
    /// Not a message the server can act on: this error line (newline included) answers it.
    Answer(Vec<u8>),
    /// Nothing to do (an empty line, a malformed notification or response).
    Ignore(&'static str),
}

/// One error response line: `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}`.
pub fn error_line(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let mut error = Map::new();
    error.insert("code".to_owned(), Value::from(code));
    error.insert("message".to_owned(), Value::from(short(message)));
    let mut object = Map::new();
    object.insert("jsonrpc".to_owned(), Value::from("2.0"));
    object.insert("id".to_owned(), id.clone());
    object.insert("error".to_owned(), Value::Object(error));
    let mut line = Value::Object(object).to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Keeps error messages (which may quote a parser's view of the client's bytes) short.
fn short(message: &str) -> String {
    const MAX: usize = 200;
    if message.chars().count() <= MAX {
        message.to_owned()
    } else {
        let mut text: String = message.chars().take(MAX).collect();
        text.push('…');
        text
    }
}

/// Decides what one line (without its newline) from the client is. Total: any bytes give a
/// verdict, never a panic.
pub fn classify(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // RFC 8259 lets a parser ignore a leading byte order mark; the SDK's transport does.
    let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Ignore("an empty line");
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            return Verdict::Answer(error_line(
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: {e}"),
            ));
        }
    };
    let object = match &value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return invalid(
                &Value::Null,
                "a batch (MCP sends one message per line, without batches)",
            );
        }
        _ => return invalid(&Value::Null, "a message is a JSON object"),
    };
    let id = answer_id(object);
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(JsonRpcMessage::Request(request)) if matches!(&request.request, ClientRequest::CustomRequest(custom) if typed_method(&custom.method)) => {
            misfit_params(&request.request, &id)
        }
        Ok(message) => Verdict::Pass(Box::new(message)),
        Err(e) => unreadable(object, &id, &e),
    }
}

fn invalid(id: &Value, why: &str) -> Verdict {
    Verdict::Answer(error_line(
        id,
        INVALID_REQUEST,
        &format!("Invalid Request: {why}"),
    ))
}

/// The id to answer with: a string or an integer, echoed as it is. A fractional number is not
/// echoed (null): it would not come back bit-exact through a float, and JSON-RPC says an id
/// should not have one.
fn answer_id(object: &Map<String, Value>) -> Value {
    match object.get("id") {
        Some(id @ Value::String(_)) => id.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n.clone()),
        _ => Value::Null,
    }
}

/// The SDK takes a request for a method it knows whose params do not fit that method as a
/// custom request, which the server would answer "method not found": this answers it
/// -32602 instead.
fn misfit_params(request: &ClientRequest, id: &Value) -> Verdict {
    let ClientRequest::CustomRequest(custom) = request else {
        return Verdict::Ignore("not a custom request");
    };
    let detail = if custom.method == CallToolRequestMethod::VALUE {
        serde_json::from_value::<CallToolRequestParams>(
            custom.params.clone().unwrap_or(Value::Null),
        )
        .err()
        .map(|e| format!(": {e}"))
    } else {
        None
    };
    Verdict::Answer(error_line(
        id,
        INVALID_PARAMS,
        &format!(
            "Invalid params for {}{}",
            custom.method,
            detail.unwrap_or_default()
        ),
    ))
}

/// What a JSON object the SDK could not read as a message gets: the first rule of JSON-RPC it
/// breaks, in the order of the module's invariants.
fn unreadable(object: &Map<String, Value>, id: &Value, e: &serde_json::Error) -> Verdict {
    let has_id = object.contains_key("id");
    let method = object.get("method");
    if method.is_none() && has_id && (object.contains_key("result") || object.contains_key("error"))
    {
        return Verdict::Ignore("a malformed response");
    }
    if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    if !matches!(method, Some(Value::String(_))) {
        return invalid(id, "\"method\" must be a string");
    }
    if !matches!(
        object.get("params"),
        None | Some(Value::Object(_) | Value::Array(_))
    ) {
        return invalid(id, "\"params\" must be an object");
    }
    if !has_id {
        // A notification: never answered, even when it does not parse.
        return Verdict::Ignore("a notification with params that do not parse");
    }
    let integer_or_string = match id {
        Value::Number(n) => n.is_i64(),
        Value::String(_) => true,
        _ => false,
    };
    if !integer_or_string {
        return invalid(
            id,
            "\"id\" must be a string or an integer from -2^63 to 2^63-1",
        );
    }
    Verdict::Answer(error_line(
        id,
        INVALID_PARAMS,
        &format!("Invalid params: {e}"),
    ))
}

/// The request methods the SDK reads into typed requests. A request for one of them that the SDK
/// read as a custom request had params that do not fit the method.
fn typed_method(method: &str) -> bool {
    use rmcp::model::{
        CancelTaskMethod, CompleteRequestMethod, DiscoverRequestMethod, GetPromptRequestMethod,
        GetSkillRequestMethod, GetTaskMethod, InitializeResultMethod, ListPromptsRequestMethod,
        ListResourceTemplatesRequestMethod, ListResourcesRequestMethod, ListSkillsRequestMethod,
        ListToolsRequestMethod, PingRequestMethod, ReadResourceDirectoryRequestMethod,
        ReadResourceRequestMethod, SetLevelRequestMethod, SubscribeRequestMethod,
        SubscriptionsListenRequestMethod, UnsubscribeRequestMethod, UpdateTaskMethod,
    };
    [
        PingRequestMethod::VALUE,
        InitializeResultMethod::VALUE,
        DiscoverRequestMethod::VALUE,
        CompleteRequestMethod::VALUE,
        SetLevelRequestMethod::VALUE,
        GetPromptRequestMethod::VALUE,
        ListPromptsRequestMethod::VALUE,
        ListResourcesRequestMethod::VALUE,
        ListResourceTemplatesRequestMethod::VALUE,
        ReadResourceRequestMethod::VALUE,
        SubscriptionsListenRequestMethod::VALUE,
        SubscribeRequestMethod::VALUE,
        UnsubscribeRequestMethod::VALUE,
        CallToolRequestMethod::VALUE,
        ListToolsRequestMethod::VALUE,
        GetTaskMethod::VALUE,
        UpdateTaskMethod::VALUE,
        CancelTaskMethod::VALUE,
        ListSkillsRequestMethod::VALUE,
        GetSkillRequestMethod::VALUE,
        ReadResourceDirectoryRequestMethod::VALUE,
    ]
    .contains(&method)
}

/// The key of a request id in the in-flight set: its JSON text (`1` and `"1"` differ).
fn id_key(id: &rmcp::model::RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// The ids of requests passed to the server and not yet answered or cancelled.
type InFlight = Arc<Lock<HashSet<String>>>;

/// The transport: lines from `R`, lines to the writer task.
#[derive(Debug)]
pub struct LineTransport<R> {
    reader: BufReader<R>,
    /// The line being read; kept across a cancelled read (the service polls `receive` in a
    /// `select!`), so that no byte of a partly read line is lost.
    line: Vec<u8>,
    /// Skipping the rest of an over-long line.
    discarding: bool,
    /// An answer not yet handed to the writer (kept across a cancelled `receive`).
    pending: Option<Vec<u8>>,
    out: mpsc::Sender<Vec<u8>>,
    in_flight: InFlight,
    /// Whether a request was passed on: before the first (the handshake), the SDK ends the
    /// session on any other message, so notifications and responses are dropped (traced).
    started: bool,
}

/// A transport over `read` and `write`, and the task that writes its lines: it ends once the
/// transport and every send it started are gone, having written every line it was given, so
/// awaiting it after the session ends flushes the last answers.
pub fn line_transport<R, W>(read: R, write: W) -> (LineTransport<R>, tokio::task::JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, mut lines) = mpsc::channel::<Vec<u8>>(OUT_QUEUE);
    let writer = tokio::spawn(async move {
        let mut write = write;
        while let Some(line) = lines.recv().await {
            if let Err(e) = write.write_all(&line).await {
                tracing::debug!(error = %e, "stdout closed");
                return;
            }
            // Flush each message: a client waits for it.
            if write.flush().await.is_err() {
                return;
            }
        }
    });
    let transport = LineTransport {
        reader: BufReader::new(read),
        line: Vec::new(),
        discarding: false,
        pending: None,
        out,
        in_flight: Arc::new(Lock::new(HashSet::new())),
        started: false,
    };
    (transport, writer)
}

/// One bounded line read.
enum LineRead {
    Line,
    Oversized,
    Eof,
}

impl<R: AsyncRead + Unpin + Send> LineTransport<R> {
    /// Reads one line into `self.line` (newline excluded), never buffering more than
    /// [`MCP_LINE_BYTES_MAX`] bytes. Cancel-safe: bytes taken from the reader are in `self.line`
    /// (or skipped, with `discarding` set) before the next await.
    async fn read_line(&mut self) -> io::Result<LineRead> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                // A last line without a newline is still a line.
                if !self.line.is_empty() && !self.discarding {
                    return Ok(LineRead::Line);
                }
                return Ok(LineRead::Eof);
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let body = &available[..newline.unwrap_or(available.len())];
            let mut outcome = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if self.line.len() + body.len() > MCP_LINE_BYTES_MAX {
                self.line.clear();
                self.discarding = newline.is_none();
                outcome = Some(LineRead::Oversized);
            } else {
                self.line.extend_from_slice(body);
                if newline.is_some() {
                    outcome = Some(LineRead::Line);
                }
            }
            self.reader.consume(take);
            if let Some(outcome) = outcome {
                return Ok(outcome);
            }
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight.lock()
    }

    /// What to do with a message that parsed: requests are checked against the ids in flight.
    fn admit(&mut self, message: ClientJsonRpcMessage) -> Verdict {
        match &message {
            JsonRpcMessage::Request(_) => self.started = true,
            _ if !self.started => {
                return Verdict::Ignore("a notification or response before the first request");
            }
            _ => {}
        }
        match &message {
            JsonRpcMessage::Request(request) => {
                let key = id_key(&request.id);
                if !self.in_flight().insert(key.clone()) {
                    let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
                    return Verdict::Answer(error_line(
                        &id,
                        INVALID_REQUEST,
                        &format!(
                            "Invalid Request: id {key} is already used by a request in progress \
                             (each request needs an id of its own)"
                        ),
                    ));
                }
            }
            JsonRpcMessage::Notification(notification) => {
                // A cancelled request is not answered by the server (the MCP specification
                // asks it not to be): its id is free again.
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.in_flight().remove(&id_key(id));
                }
            }
            _ => {}
        }
        Verdict::Pass(Box::new(message))
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> Transport<RoleServer> for LineTransport<R> {
    type Error = io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answered = match &item {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = answered {
            self.in_flight().remove(&id_key(id));
        }
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        let out = self.out.clone();
        async move {
            let line = line.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            out.send(line)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed"))
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if self.pending.is_some() {
                // Reserve first: cancelled here, the answer is still pending.
                let permit = self.out.reserve().await.ok()?;
                if let Some(line) = self.pending.take() {
                    permit.send(line);
                }
            }
            match self.read_line().await {
                Ok(LineRead::Line) => {}
                Ok(LineRead::Oversized) => {
                    tracing::debug!(max = MCP_LINE_BYTES_MAX, "an over-long line, skipped");
                    self.pending = Some(error_line(
                        &Value::Null,
                        INVALID_REQUEST,
                        &format!(
                            "Invalid Request: a line longer than {MCP_LINE_BYTES_MAX} bytes \
                             (skipped unread)"
                        ),
                    ));
                    continue;
                }
                Ok(LineRead::Eof) => return None,
                Err(e) => {
                    tracing::debug!(error = %e, "stdin failed");
                    return None;
                }
            }
            let verdict = classify(&self.line);
            self.line.clear();
            let verdict = match verdict {
                Verdict::Pass(message) => self.admit(*message),
                other => other,
            };
            match verdict {
                Verdict::Pass(message) => return Some(*message),
                Verdict::Answer(line) => self.pending = Some(line),
                Verdict::Ignore(what) => tracing::debug!("ignored {what}"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // The writer ends once every sender is dropped, after the lines already queued.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match classify(line.as_bytes()) {
            Verdict::Answer(bytes) => serde_json::from_slice(&bytes).expect("an answer is JSON"),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn each_kind_of_bad_line_gets_the_error_json_rpc_requires() {
        for (line, code, id) in [
            ("not json", PARSE_ERROR, Value::Null),
            ("{\"jsonrpc\":\"2.0\",\"id\":1,", PARSE_ERROR, Value::Null),
            ("[1,2]", INVALID_REQUEST, Value::Null),
            ("[]", INVALID_REQUEST, Value::Null),
            ("42", INVALID_REQUEST, Value::Null),
            ("{\"foo\":\"boo\"}", INVALID_REQUEST, Value::Null),
            (
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"params\":7}",
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                "{\"id\":7,\"method\":\"tools/list\"}",
                INVALID_REQUEST,
                7.into(),
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":\"a\"}",
                INVALID_REQUEST,
                "a".into(),
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":1}",
                INVALID_REQUEST,
                8.into(),
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\",\"params\":\"x\"}",
                INVALID_REQUEST,
                9.into(),
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}",
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":18446744073709551615,\"method\":\"ping\"}",
                INVALID_REQUEST,
                serde_json::json!(u64::MAX),
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}",
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":{\"nam\":1}}",
                INVALID_PARAMS,
                10.into(),
            ),
        ] {
            let answer = answer(line);
            assert_eq!(answer["jsonrpc"], "2.0", "{line}");
            assert_eq!(answer["error"]["code"], code, "{line}: {answer}");
            assert_eq!(answer["id"], id, "{line}: {answer}");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
        }
    }

    #[test]
    fn messages_pass_and_malformed_notifications_are_not_answered() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"no/such/method"}"#,
            // Notifications are never answered; this one reaches the server as a custom one.
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":[]}}"#,
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Verdict::Pass(_)),
                "{line}"
            );
        }
        for line in [
            "",
            "  \r",
            r#"{"jsonrpc":"2.0","id":3,"result":7,"error":8}"#,
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Verdict::Ignore(_)),
                "{line}: {:?}",
                classify(line.as_bytes())
            );
        }
    }
}
