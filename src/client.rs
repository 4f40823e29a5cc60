//! Clients of the daemon's socket: [`Client`], blocking, for the client commands and for hosts
//! that do not run tokio; [`call_async`], one request on a connection of its own, for async hosts
//! (`procjournal mcp`); and [`connect_or_spawn`], which starts a daemon when none listens.
//!
//! Invariants: every request sent is built from a typed [`Request`] (so it is one the server
//! accepts); a response is read with a bounded line read and decoded totally — a server that
//! sends garbage or too much gets a [`ClientError::BadResponse`], never a panic; responses are
//! matched to requests by ID; a request is sent again (once, on a new connection) only when
//! the daemon said it never read it (an `idle` close, or `busy` before the request).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::protocol::{ApiError, ErrorCode, Request, Response};

#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;

/// The longest response line read: a 1 MiB output page in base64 inside JSON fits easily.
pub const RESPONSE_BYTES_MAX: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Nothing listens on the socket (no daemon runs for this root).
    #[error("no daemon is listening on {socket}: {cause}")]
    NoDaemon { socket: PathBuf, cause: io::Error },
    #[error("talking to the daemon: {0}")]
    Io(#[from] io::Error),
    #[error("the daemon sent a bad response: {0}")]
    BadResponse(String),
    /// The daemon refused or failed the request.
    #[error("{0}")]
    Api(ApiError),
}

/// What one round trip got, short of a failure.
#[derive(Debug)]
pub(crate) enum Answer {
    Result(Value),
    /// The daemon closed the connection without reading the request.
    Unread(ApiError),
}

/// One connection to a daemon.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Client {
    pub fn connect(socket: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(socket).map_err(|cause| match cause.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::NoDaemon {
                socket: socket.to_owned(),
                cause,
            },
            _ => ClientError::Io(cause),
        })?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Client {
            socket: socket.to_owned(),
            writer: stream,
            reader,
            next_id: 1,
        })
    }

    /// Sends one request and returns its result.
    pub fn call(&mut self, request: &Request) -> Result<Value, ClientError> {
        match self.call_once(request)? {
            Answer::Result(result) => Ok(result),
            Answer::Unread(error) => {
                // The daemon closed this connection without reading the request (it had been
                // idle too long, or was evicted for a newcomer): a new one may well be served.
                let fresh = Client::connect(&self.socket)?;
                self.writer = fresh.writer;
                self.reader = fresh.reader;
                match self.call_once(request)? {
                    Answer::Result(result) => Ok(result),
                    Answer::Unread(_) => Err(ClientError::Api(error)),
                }
            }
        }
    }

    fn call_once(&mut self, request: &Request) -> Result<Answer, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        if let Err(e) = self
            .writer
            .write_all(&request.to_line(Some(Value::from(id))))
        {
            // A server that refuses a connection (forbidden, busy) answers and hangs up before
            // reading; its answer says more than the broken pipe.
            if !matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) {
                return Err(e.into());
            }
        }
        let mut line = Vec::new();
        let n = Read::by_ref(&mut self.reader)
            .take(RESPONSE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Err(ClientError::BadResponse(
                "the daemon closed the connection".to_owned(),
            ));
        }
        decode_answer(&line, id)
    }

    /// [`Client::call`], with the result decoded into `T`.
    pub fn call_as<T: DeserializeOwned>(&mut self, request: &Request) -> Result<T, ClientError> {
        let value = self.call(request)?;
        serde_json::from_value(value).map_err(|e| ClientError::BadResponse(e.to_string()))
    }
}

/// Decodes one response line (newline included) to the request `id`: total, so a server that
/// sends garbage gets [`ClientError::BadResponse`], never a panic (the `client_response` fuzz
/// target holds it to that).
pub(crate) fn decode_answer(line: &[u8], id: u64) -> Result<Answer, ClientError> {
    if line.last() != Some(&b'\n') {
        return Err(ClientError::BadResponse(format!(
            "a response longer than {RESPONSE_BYTES_MAX} bytes, or a truncated one"
        )));
    }
    let response: Response =
        serde_json::from_slice(line).map_err(|e| ClientError::BadResponse(e.to_string()))?;
    if response.id.is_some() && response.id != Some(Value::from(id)) {
        // Errors the server sends before it could read an ID carry none.
        return Err(ClientError::BadResponse(format!(
            "response to request {:?}, expected {id}",
            response.id
        )));
    }
    let unread = response.id.is_none();
    match (response.ok, response.result, response.error) {
        (true, Some(result), _) => Ok(Answer::Result(result)),
        (false, _, Some(error))
            if unread && matches!(error.code, ErrorCode::Idle | ErrorCode::Busy) =>
        {
            Ok(Answer::Unread(error))
        }
        (false, _, Some(error)) => Err(ClientError::Api(error)),
        _ => Err(ClientError::BadResponse(
            "neither a result nor an error".to_owned(),
        )),
    }
}

fn connect_error(socket: &Path, cause: io::Error) -> ClientError {
    match cause.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::NoDaemon {
            socket: socket.to_owned(),
            cause,
        },
        _ => ClientError::Io(cause),
    }
}

/// Sends one request on a connection of its own and returns its result, for async hosts
/// (`procjournal mcp` attached to a daemon, where calls run concurrently). Dropping the future
/// closes the connection, which cancels a `wait` or a long-polling `output` on the daemon's side
/// (operations with effects run to completion there). Sent again once, on a new connection,
/// when the daemon says it never read it, as [`Client::call`] does.
pub async fn call_async(socket: &Path, request: &Request) -> Result<Value, ClientError> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    const ID: u64 = 1;
    let line = request.to_line(Some(Value::from(ID)));
    let mut unread = None;
    for _ in 0..2 {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|cause| connect_error(socket, cause))?;
        let (read, mut write) = stream.into_split();
        if let Err(e) = write.write_all(&line).await {
            // As in `call_once`: a refusal's answer says more than the broken pipe.
            if !matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) {
                return Err(e.into());
            }
        }
        let mut response = Vec::new();
        let n = tokio::io::BufReader::new(read)
            .take(RESPONSE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut response)
            .await?;
        if n == 0 {
            return Err(ClientError::BadResponse(
                "the daemon closed the connection".to_owned(),
            ));
        }
        match decode_answer(&response, ID)? {
            Answer::Result(result) => return Ok(result),
            Answer::Unread(error) => unread = Some(error),
        }
    }
    Err(match unread {
        Some(error) => ClientError::Api(error),
        None => ClientError::BadResponse("no answer".to_owned()),
    })
}

/// A daemon that [`connect_or_spawn`] started, and that is the one serving (not one that lost
/// the root's lock to a daemon started meanwhile).
#[derive(Debug)]
pub struct SpawnedDaemon {
    pub pid: u32,
}

/// Why [`connect_or_spawn`] found no daemon and could not start one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonStartError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot start the daemon: {0}")]
    Spawn(io::Error),
    #[error("the daemon it started exited ({status}) without listening on {socket}")]
    Exited {
        status: std::process::ExitStatus,
        socket: PathBuf,
    },
    #[error("the daemon it started (pid {pid}) is not listening on {socket} after {waited:?}")]
    NotListening {
        pid: u32,
        socket: PathBuf,
        waited: std::time::Duration,
    },
}

/// Connects to the daemon on `socket`, starting one with `spawn` when none listens.
///
/// `spawn` starts the daemon detached (its own process group, stdio away from the caller's), so
/// that it outlives the caller; this waits at most `wait` for it to listen. Two callers that
/// race both spawn; the one whose daemon loses the root's lock still connects to the winner's
/// (a daemon that exited is given `limits::DAEMON_SPAWN_LOSER_GRACE_MS` for another's socket to
/// appear).
pub fn connect_or_spawn(
    socket: &Path,
    spawn: impl FnOnce() -> io::Result<std::process::Child>,
    wait: std::time::Duration,
) -> Result<(Client, Option<SpawnedDaemon>), DaemonStartError> {
    use std::time::{Duration, Instant};
    match Client::connect(socket) {
        Ok(client) => return Ok((client, None)),
        Err(ClientError::NoDaemon { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let mut child = spawn().map_err(DaemonStartError::Spawn)?;
    let pid = child.id();
    let started = Instant::now();
    let mut exited: Option<(std::process::ExitStatus, Instant)> = None;
    let mut pause = Duration::from_millis(5);
    loop {
        match Client::connect(socket) {
            Ok(mut client) => {
                // A daemon started by someone else meanwhile (`serve &` a moment before, another
                // client's autostart) may be the one that answers, and the one spawned here then
                // lost the root's lock: the start is only reported when its pid is the one that
                // serves, so nobody is told of a daemon that no longer exists.
                let serving = client
                    .call(&Request::Hello)?
                    .get("pid")
                    .and_then(Value::as_u64);
                let ours = serving == Some(u64::from(pid));
                if !ours {
                    // The loser exits by itself (it found the root locked); reaping it keeps no
                    // zombie behind a long-lived caller (the MCP server).
                    std::thread::spawn(move || child.wait());
                }
                return Ok((client, ours.then_some(SpawnedDaemon { pid })));
            }
            Err(ClientError::NoDaemon { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        if exited.is_none()
            && let Ok(Some(status)) = child.try_wait()
        {
            exited = Some((status, Instant::now()));
        }
        if let Some((status, at)) = exited
            && at.elapsed() >= Duration::from_millis(crate::limits::DAEMON_SPAWN_LOSER_GRACE_MS)
        {
            return Err(DaemonStartError::Exited {
                status,
                socket: socket.to_owned(),
            });
        }
        if started.elapsed() >= wait {
            return Err(DaemonStartError::NotListening {
                pid,
                socket: socket.to_owned(),
                waited: wait,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn code() -> impl Strategy<Value = ErrorCode> {
        prop_oneof![
            Just(ErrorCode::Idle),
            Just(ErrorCode::Busy),
            Just(ErrorCode::UnknownHandle),
            Just(ErrorCode::Internal),
        ]
    }

    proptest! {
        /// Every response the server can send is decoded by the client's rules: a result or an
        /// error for its request; an ID-less idle or busy error means the request was not read;
        /// another request's ID is a bad response.
        #[test]
        fn responses_decode_by_id_and_outcome(
            id in prop_oneof![Just(None), Just(Some(7u64)), (8u64..).prop_map(Some)],
            ok in any::<bool>(),
            text in ".{0,40}",
            code in code(),
        ) {
            let outcome = if ok {
                Ok(Value::String(text.clone()))
            } else {
                Err(ApiError::new(code, text.clone()))
            };
            let line = Response::new(id.map(Value::from), outcome).to_line();
            let got = decode_answer(&line, 7);
            match (id, ok) {
                (Some(other), _) if other != 7 => {
                    prop_assert!(matches!(got, Err(ClientError::BadResponse(_))));
                }
                (_, true) => {
                    prop_assert!(matches!(got, Ok(Answer::Result(Value::String(t))) if t == text));
                }
                (None, false) if matches!(code, ErrorCode::Idle | ErrorCode::Busy) => {
                    prop_assert!(matches!(got, Ok(Answer::Unread(e)) if e.code == code));
                }
                (_, false) => {
                    prop_assert!(matches!(got, Err(ClientError::Api(e)) if e.code == code && e.message == text));
                }
            }
            // Cut anywhere before its newline, the same line is refused, never misread.
            for cut in [0, line.len() / 2, line.len() - 1] {
                prop_assert!(matches!(decode_answer(&line[..cut], 7), Err(ClientError::BadResponse(_))));
            }
        }

        /// Arbitrary bytes: never a panic, and the fuzz body's checks hold.
        #[test]
        fn arbitrary_bytes_are_decoded_totally(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            crate::fuzzing::client_response(&data);
        }
    }
}
