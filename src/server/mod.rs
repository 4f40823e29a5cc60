//! The daemon: one [`Supervisor`] answering the protocol of [`crate::protocol`] on a Unix socket.
//!
//! Invariants:
//! - the socket exists only while this server holds the root's writer lock: it is bound after
//!   [`Supervisor::open`] took the lock and removed before the supervisor (and the lock) is
//!   dropped, so a socket file left by a crashed daemon is replaced only by the next holder of
//!   the lock;
//! - the socket is mode 0600 and every connection's peer credentials are checked: only the
//!   user the server runs as is served (a peer of another user gets one `forbidden` response
//!   and is disconnected, which also covers the moment between bind and chmod);
//! - a request line longer than [`REQUEST_BYTES_MAX`] is refused and skipped without being
//!   buffered; a malformed request gets an error and the connection stays usable; neither
//!   changes anything on disk;
//! - at most [`CONNECTIONS_MAX`] connections are served at once; one more gets `busy`;
//! - a client that disconnects while waiting (`wait`, `output` with `wait_ms`) cancels only that
//!   wait; operations with effects (`start`, `stop`, `input`, `shutdown`) run to completion.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, info, warn};

use crate::protocol::{
    ApiError, Dispatcher, ErrorCode, REQUEST_BYTES_MAX, Request, Response, decode_request,
};
use crate::supervisor::{
    RestoreReport, Services, ShutdownReport, Supervisor, SupervisorConfig, SupervisorError,
};

/// The socket's file name inside the root when `--socket` is not given.
pub const SOCKET_NAME: &str = "procjournal.sock";
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 256;
/// Grace between SIGTERM and SIGKILL when the daemon itself is asked to stop by a signal.
pub const SIGNAL_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// `sun_path` holds 108 bytes including the terminating NUL.
const SOCKET_PATH_MAX: usize = 107;

/// Where the daemon of `root` listens unless told otherwise.
pub fn default_socket(root: &Path) -> PathBuf {
    root.join(SOCKET_NAME)
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error(transparent)]
    Open(#[from] SupervisorError),
    #[error(
        "socket path {0} is longer than the {SOCKET_PATH_MAX} bytes a Unix socket allows; pass --socket with a shorter path"
    )]
    SocketPathTooLong(PathBuf),
    #[error("socket {0} is in use by another running daemon")]
    SocketInUse(PathBuf),
    #[error("socket {path}: {cause}")]
    Socket { path: PathBuf, cause: io::Error },
}

/// A bound daemon, ready to [`Server::run`].
#[derive(Debug)]
pub struct Server {
    dispatcher: Dispatcher,
    listener: UnixListener,
    socket: PathBuf,
    uid: u32,
}

impl Server {
    /// Opens the supervisor (taking the root's lock and restoring), then binds the socket.
    pub async fn bind(
        config: SupervisorConfig,
        socket: Option<PathBuf>,
    ) -> Result<(Server, RestoreReport), ServeError> {
        let (supervisor, report) = Supervisor::open(config, Services::noop()).await?;
        let socket = socket.unwrap_or_else(|| default_socket(supervisor.root()));
        let socket = std::path::absolute(&socket).map_err(|cause| ServeError::Socket {
            path: socket.clone(),
            cause,
        })?;
        if socket.as_os_str().len() > SOCKET_PATH_MAX {
            return Err(ServeError::SocketPathTooLong(socket));
        }
        let listener = bind_socket(&socket).await?;
        let uid = nix::unistd::geteuid().as_raw();
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let dispatcher = Dispatcher::new(supervisor, cwd, format!("uid {uid} via socket"));
        info!(socket = %socket.display(), "serving");
        Ok((
            Server {
                dispatcher,
                listener,
                socket,
                uid,
            },
            report,
        ))
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn supervisor(&self) -> &Supervisor {
        self.dispatcher.supervisor()
    }

    /// Serves until a `shutdown` request, SIGTERM or SIGINT; then shuts the supervisor down
    /// (every process tree stopped and confirmed) and removes the socket.
    pub async fn run(self) -> Result<ShutdownReport, ServeError> {
        let stop = Arc::new(tokio::sync::Notify::new());
        let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
        let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let permit = Arc::clone(&slots).try_acquire_owned().ok();
                        let conn = Connection {
                            dispatcher: self.dispatcher.clone(),
                            stop: Arc::clone(&stop),
                            uid: self.uid,
                        };
                        tokio::spawn(async move {
                            conn.serve(stream, permit.is_some()).await;
                            drop(permit);
                        });
                    }
                    // EMFILE and friends: keep serving the connections we have.
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                () = stop.notified() => break,
                _ = sigterm.recv() => break,
                _ = sigint.recv() => break,
            }
        }
        info!("shutting down");
        // Shared with a `shutdown` request that may be running: every caller gets one report.
        let report = self
            .dispatcher
            .supervisor()
            .shutdown(SIGNAL_SHUTDOWN_GRACE)
            .await;
        if let Err(e) = std::fs::remove_file(&self.socket) {
            warn!(error = %e, "cannot remove the socket");
        }
        Ok(report)
    }
}

fn signal(
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal, ServeError> {
    tokio::signal::unix::signal(kind).map_err(|cause| ServeError::Socket {
        path: PathBuf::from("(signal handler)"),
        cause,
    })
}

async fn bind_socket(path: &Path) -> Result<UnixListener, ServeError> {
    let err = |cause| ServeError::Socket {
        path: path.to_owned(),
        cause,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a socket",
                )));
            }
            // We hold the root's lock, so a daemon of this root cannot be running; a daemon of
            // another root pointed at the same --socket still answers connections.
            if UnixStream::connect(path).await.is_ok() {
                return Err(ServeError::SocketInUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(listener)
}

struct Connection {
    dispatcher: Dispatcher,
    stop: Arc<tokio::sync::Notify>,
    uid: u32,
}

/// What one bounded line read found.
enum Line {
    Complete,
    TooLong(usize),
    Eof,
}

impl Connection {
    async fn serve(self, stream: UnixStream, admitted: bool) {
        let peer = stream.peer_cred().map(|c| c.uid());
        let (read, mut write) = stream.into_split();
        let refuse = |code, message: String| Response::new(None, Err(ApiError::new(code, message)));
        match peer {
            Ok(uid) if uid == self.uid => {}
            Ok(uid) => {
                warn!(peer_uid = uid, "refused a peer of another user");
                let response = refuse(
                    ErrorCode::Forbidden,
                    format!("this daemon serves uid {} only", self.uid),
                );
                let _ = write.write_all(&response.to_line()).await;
                return;
            }
            Err(e) => {
                warn!(error = %e, "cannot read peer credentials");
                let response = refuse(ErrorCode::Forbidden, "peer credentials unavailable".into());
                let _ = write.write_all(&response.to_line()).await;
                return;
            }
        }
        if !admitted {
            let response = refuse(
                ErrorCode::Busy,
                format!("{CONNECTIONS_MAX} connections are open; try again"),
            );
            let _ = write.write_all(&response.to_line()).await;
            return;
        }
        let mut reader = BufReader::with_capacity(64 * 1024, read);
        let mut line = Vec::new();
        loop {
            let response = match read_line(&mut reader, &mut line, REQUEST_BYTES_MAX).await {
                Err(e) => {
                    debug!(error = %e, "connection read failed");
                    return;
                }
                Ok(Line::Eof) => return,
                Ok(Line::TooLong(len)) => refuse(
                    ErrorCode::TooLarge,
                    format!(
                        "the request is at least {len} bytes; at most {REQUEST_BYTES_MAX} are accepted"
                    ),
                ),
                Ok(Line::Complete) => match decode_request(&line) {
                    Err(e) => Response::new(e.id.clone(), Err(ApiError::from(&e))),
                    Ok(envelope) => {
                        let shutdown = matches!(envelope.request, Request::Shutdown { .. });
                        let cancellable = matches!(
                            envelope.request,
                            Request::Wait { .. } | Request::Output { .. }
                        );
                        let outcome = if cancellable {
                            tokio::select! {
                                outcome = self.dispatcher.dispatch(envelope.request) => outcome,
                                () = peer_gone(&mut reader) => return,
                            }
                        } else {
                            self.dispatcher.dispatch(envelope.request).await
                        };
                        let response = Response::new(envelope.id, outcome);
                        if shutdown {
                            let _ = write.write_all(&response.to_line()).await;
                            self.stop.notify_one();
                            return;
                        }
                        response
                    }
                },
            };
            if write.write_all(&response.to_line()).await.is_err() {
                return;
            }
        }
    }
}

/// Resolves when the peer closed its end; pends forever if it sends more (that is read later).
async fn peer_gone<R: AsyncBufRead + Unpin>(reader: &mut R) {
    match reader.fill_buf().await {
        Ok([]) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// Reads one `\n`-terminated line into `line` (without the newline), keeping at most `max`
/// bytes: a longer line is consumed and dropped, and reported with the length seen. A final
/// line without a newline counts as a line.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    line.clear();
    let mut seen = 0usize;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if seen == 0 {
                Line::Eof
            } else if seen > max {
                Line::TooLong(seen)
            } else {
                Line::Complete
            });
        }
        let (chunk, done, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        seen = seen.saturating_add(chunk.len());
        if seen <= max {
            line.extend_from_slice(chunk);
        } else if !line.is_empty() {
            // Drop what was kept: the line is refused whole.
            line.clear();
            line.shrink_to(64 * 1024);
        }
        reader.consume(done);
        if found {
            return Ok(if seen > max {
                Line::TooLong(seen)
            } else {
                Line::Complete
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, usize>> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, &mut line, max).await.unwrap() {
                Line::Eof => return out,
                Line::Complete => out.push(Ok(line.clone())),
                Line::TooLong(n) => out.push(Err(n)),
            }
        }
    }

    #[tokio::test]
    async fn lines_are_bounded_and_skipped_whole() {
        let got = lines(b"ab\n0123456789\ncd\n\nlast", 5).await;
        assert_eq!(
            got,
            vec![
                Ok(b"ab".to_vec()),
                Err(10),
                Ok(b"cd".to_vec()),
                Ok(Vec::new()),
                Ok(b"last".to_vec())
            ]
        );
        assert_eq!(lines(b"123456", 5).await, vec![Err(6)]);
        assert_eq!(lines(b"12345\n", 5).await, vec![Ok(b"12345".to_vec())]);
        assert!(lines(b"", 5).await.is_empty());
    }
}
