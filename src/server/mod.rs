//! The daemon: one [`Supervisor`] answering the protocol of [`crate::protocol`] on a Unix socket.
//!
//! Invariants:
//! - the socket exists only while this server holds the root's writer lock: it is bound after
//!   [`Supervisor::open`] took the lock and removed before the supervisor (and the lock) is
//!   dropped, so a socket file left by a crashed daemon is replaced only by the next holder of
//!   the lock;
//! - the socket is mode 0600 and every connection's peer credentials are checked: only the
//!   user the server runs as is served (a peer of another user gets one `forbidden` response
//!   and is disconnected without taking a slot, which also covers the moment between bind and
//!   chmod);
//! - a request line longer than [`REQUEST_BYTES_MAX`] is refused and skipped without being
//!   buffered; a malformed request gets an error and the connection stays usable; neither
//!   changes anything on disk;
//! - once the first byte of a request line arrives, the whole line must arrive within
//!   [`REQUEST_LINE_MS`]; otherwise the connection gets one `timeout` error and is closed;
//! - a connection with no request in progress is closed after [`CONNECTION_IDLE_MS`] with one
//!   `idle` error; a connection whose request runs (including a `wait` or a long-polling
//!   `output`) is not idle, however long the request takes;
//! - a response must be taken by the client within [`RESPONSE_WRITE_MS`], else the connection
//!   is closed; the last error line of a connection the server closes gets [`FAREWELL_MS`];
//! - at most [`CONNECTIONS_MAX`] connections hold a slot, and a client that stalls cannot keep
//!   another out (below);
//! - a client that disconnects while waiting (`wait`, `output` with `wait_ms`) cancels only that
//!   wait; operations with effects (`start`, `stop`, `input`, `shutdown`) run to completion;
//! - an evicted or timed-out connection never had its pending request read: the server acts on
//!   a request only after the whole line arrived and the connection was marked running under the
//!   slot table's lock, the same lock eviction takes.
//!
//! Slots. Each connection is either *waiting on its client* (for the next request, or for the
//! rest of a line) or *running* (executing a request, or writing its response). When all slots
//! are taken and a connection arrives, the server evicts the connection that has been waiting on
//! its client the longest (counted from its last response, or from its accept if it never had
//! one): that connection gets one `busy` error and is closed, and the newcomer takes its slot.
//! Running connections are never evicted, so a request in progress always completes; only when
//! every slot is running is the newcomer refused with `busy`. So a slot held by a stalled client
//! is taken back the moment anyone else needs it, and one nobody needs is still given back by
//! the line and idle bounds. A running
//! connection holds its slot only while the client wants the answer: a `wait` is cancelled when
//! the client disconnects, and a response nobody reads is abandoned after [`RESPONSE_WRITE_MS`].
//! Why evict rather than refuse: refusing newcomers lets whoever got the slots first (a burst of
//! stalled clients) keep them for the whole line bound; evicting the longest-waiting one means
//! an ordinary client that sends its request at once is served even while stalled clients keep
//! arriving, as long as fewer than [`CONNECTIONS_MAX`] of them arrive before its request does.
//!
//! A failed accept (EMFILE, ENFILE: out of file descriptors) does not stop the server: the
//! longest-waiting connection is evicted to free a descriptor, and the next accept waits
//! [`ACCEPT_BACKOFF_MS`] so that a persistent failure does not spin.

#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod watch;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use crate::sync::Lock;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::protocol::{
    ApiError, Dispatcher, Envelope, ErrorCode, REQUEST_BYTES_MAX, Request, Response, decode_request,
};
use crate::supervisor::{
    RestoreReport, Services, ShutdownReport, Supervisor, SupervisorConfig, SupervisorError,
};

/// The socket's file name inside the root when `--socket` is not given.
pub const SOCKET_NAME: &str = "procjournal.sock";
/// Grace between SIGTERM and SIGKILL when the daemon itself is asked to stop by a signal: the
/// one default grace of every surface.
pub const SIGNAL_SHUTDOWN_GRACE: Duration = Duration::from_millis(crate::limits::GRACE_MS_DEFAULT);
/// `sun_path` holds 108 bytes including the terminating NUL.
const SOCKET_PATH_MAX: usize = 107;

// Bounds on clients live in crate::limits with their reasons; `ServerLimits::default()` is
// them, tests pass smaller ones.
pub use crate::limits::{
    ACCEPT_BACKOFF_MS, CONNECTION_IDLE_MS, CONNECTIONS_MAX, FAREWELL_MS, REQUEST_LINE_MS,
    RESPONSE_WRITE_MS,
};

// ---------------------------------------------------------------------------------------------

/// The bounds a [`Server`] enforces on its clients; `Default` is the constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// [`CONNECTIONS_MAX`].
    pub connections_max: usize,
    /// [`REQUEST_LINE_MS`].
    pub request_line: Duration,
    /// [`CONNECTION_IDLE_MS`].
    pub connection_idle: Duration,
    /// [`RESPONSE_WRITE_MS`].
    pub response_write: Duration,
    /// [`FAREWELL_MS`].
    pub farewell: Duration,
    /// [`ACCEPT_BACKOFF_MS`].
    pub accept_backoff: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            connections_max: CONNECTIONS_MAX,
            request_line: Duration::from_millis(REQUEST_LINE_MS),
            connection_idle: Duration::from_millis(CONNECTION_IDLE_MS),
            response_write: Duration::from_millis(RESPONSE_WRITE_MS),
            farewell: Duration::from_millis(FAREWELL_MS),
            accept_backoff: Duration::from_millis(ACCEPT_BACKOFF_MS),
        }
    }
}

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
    #[error("server limits: {0}")]
    Limits(&'static str),
    /// The root, its `LOCK` or the socket stopped being the file the server bound; every
    /// process was stopped as at a `shutdown`.
    #[error("{why}; the daemon stopped its processes and exited")]
    RootGone { why: String },
}

/// A bound daemon, ready to [`Server::run`].
#[derive(Debug)]
pub struct Server {
    dispatcher: Dispatcher,
    listener: UnixListener,
    socket: PathBuf,
    uid: u32,
    limits: ServerLimits,
    witness: watch::RootWitness,
}

impl Server {
    /// Opens the supervisor (taking the root's lock and restoring), then binds the socket.
    pub async fn bind(
        config: SupervisorConfig,
        socket: Option<PathBuf>,
    ) -> Result<(Server, RestoreReport), ServeError> {
        Server::bind_with_limits(config, socket, ServerLimits::default()).await
    }

    /// [`Server::bind`], enforcing `limits` instead of the defaults.
    pub async fn bind_with_limits(
        config: SupervisorConfig,
        socket: Option<PathBuf>,
        limits: ServerLimits,
    ) -> Result<(Server, RestoreReport), ServeError> {
        if limits.connections_max == 0 {
            return Err(ServeError::Limits("connections_max must be at least 1"));
        }
        // A daemon runs for long: large freed blocks must go back to the kernel.
        crate::heap::keep_large_blocks_mapped();
        // One descriptor budget for connections and processes, so that a crowd of clients
        // cannot make a start fail with EMFILE (it is refused, typed, at the process bound).
        let mut limits = limits;
        let mut config = config;
        let (connections, live) = crate::limits::descriptor_split(
            crate::limits::open_files_soft(),
            limits.connections_max,
        );
        limits.connections_max = connections;
        config.max_live = config.max_live.min(live);
        info!(connections, live = config.max_live, "descriptor budget");
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
        let witness = watch::RootWitness::take(supervisor.root(), &socket).map_err(|cause| {
            ServeError::Socket {
                path: socket.clone(),
                cause,
            }
        })?;
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
                limits,
                witness,
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

    pub fn limits(&self) -> &ServerLimits {
        &self.limits
    }

    /// Serves until a `shutdown` request, SIGTERM or SIGINT, or until the root is gone
    /// (`watch.rs`: then [`ServeError::RootGone`]); then shuts the supervisor down (every
    /// process tree stopped and confirmed) and removes the socket.
    pub async fn run(self) -> Result<ShutdownReport, ServeError> {
        let gone = self.witness.clone().gone();
        tokio::pin!(gone);
        let mut root_gone = None;
        let stop = Arc::new(Notify::new());
        let slots = Arc::new(Slots::new(self.limits.connections_max));
        let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
        let limits = self.limits;
        // One descriptor per permit, held by a connection from its accept until its descriptor
        // is closed (its farewell line included), so connections never take more than their
        // share of the descriptor budget. At most one accepted connection waits for a permit
        // (the loop accepts no other meanwhile); clients beyond it wait in the listen backlog,
        // which costs the daemon nothing.
        let descriptors = Arc::new(Semaphore::new(limits.connections_max));
        // Refusals of a full house of running requests: their farewells are bounded too.
        let refusals = Arc::new(Semaphore::new(crate::limits::REFUSALS_AT_ONCE));
        loop {
            let stream = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        // Out of descriptors: one stalled client gives its descriptor back so
                        // that the connections queued behind it can be accepted.
                        if e.raw_os_error().is_some_and(is_out_of_fds) {
                            slots.evict_one();
                        }
                        tokio::time::sleep(limits.accept_backoff).await;
                        continue;
                    }
                },
                () = stop.notified() => break,
                _ = sigterm.recv() => break,
                _ = sigint.recv() => break,
                why = &mut gone => {
                    root_gone = Some(why);
                    break;
                }
            };
            let permit = match Arc::clone(&descriptors).try_acquire_owned() {
                Ok(permit) => Some(permit),
                // Every descriptor is taken: the connection that waited on its client the
                // longest gives its own back (after its farewell line) to the newcomer.
                Err(_) if slots.evict_one().is_some() => tokio::select! {
                    permit = Arc::clone(&descriptors).acquire_owned() => permit.ok(),
                    () = stop.notified() => break,
                    _ = sigterm.recv() => break,
                    _ = sigint.recv() => break,
                },
                // Every connection is running a request: nobody can be evicted.
                Err(_) => None,
            };
            match permit {
                Some(permit) => self.admit(stream, permit, &slots, &stop),
                None => self.refuse_full_house(stream, &refusals),
            }
        }
        self.finish(root_gone).await
    }

    /// After the accept loop: every process stopped as at a `shutdown`, and the socket removed
    /// unless the root is gone (the path may then be another daemon's).
    async fn finish(self, root_gone: Option<String>) -> Result<ShutdownReport, ServeError> {
        match &root_gone {
            Some(why) => error!(%why, "the runtime root is gone: shutting down"),
            None => info!("shutting down"),
        }
        // Shared with a `shutdown` request that may be running: every caller gets one report.
        let report = self
            .dispatcher
            .supervisor()
            .shutdown(SIGNAL_SHUTDOWN_GRACE)
            .await;
        match root_gone {
            Some(why) => {
                info!(
                    terminated = report.terminated.len(),
                    killed = report.killed.len(),
                    teardown_failed = report.teardown_failed.len(),
                    "shut down"
                );
                Err(ServeError::RootGone { why })
            }
            None => {
                if let Err(e) = std::fs::remove_file(&self.socket) {
                    warn!(error = %e, "cannot remove the socket");
                }
                Ok(report)
            }
        }
    }

    /// Answers `busy` to a newcomer when every connection is running a request, within
    /// [`crate::limits::REFUSALS_AT_ONCE`].
    fn refuse_full_house(&self, stream: UnixStream, refusals: &Arc<Semaphore>) {
        let Ok(permit) = Arc::clone(refusals).try_acquire_owned() else {
            return; // dropped: closed without a line
        };
        let (_read, write) = stream.into_split();
        let message = format!(
            "all {} connections (CONNECTIONS_MAX) are running requests; try again",
            self.limits.connections_max
        );
        let farewell = self.limits.farewell;
        tokio::spawn(async move {
            say_farewell(write, ErrorCode::Busy, message, farewell).await;
            drop(permit);
        });
    }

    /// Checks the peer and gives the connection a slot (evicting if need be) before its task
    /// starts, so that the slot table always reflects the accept order.
    fn admit(
        &self,
        stream: UnixStream,
        permit: OwnedSemaphorePermit,
        slots: &Arc<Slots>,
        stop: &Arc<Notify>,
    ) {
        let farewell = self.limits.farewell;
        let refuse = |stream: UnixStream, permit: OwnedSemaphorePermit, code, message: String| {
            let (_read, write) = stream.into_split();
            tokio::spawn(async move {
                say_farewell(write, code, message, farewell).await;
                drop(permit);
            });
        };
        match stream.peer_cred().map(|c| c.uid()) {
            Ok(uid) if uid == self.uid => {}
            Ok(uid) => {
                warn!(peer_uid = uid, "refused a peer of another user");
                return refuse(
                    stream,
                    permit,
                    ErrorCode::Forbidden,
                    format!("this daemon serves uid {} only", self.uid),
                );
            }
            Err(e) => {
                warn!(error = %e, "cannot read peer credentials");
                return refuse(
                    stream,
                    permit,
                    ErrorCode::Forbidden,
                    "peer credentials unavailable".into(),
                );
            }
        }
        let Some(slot) = Slot::take(slots, Instant::now()) else {
            return refuse(
                stream,
                permit,
                ErrorCode::Busy,
                format!(
                    "all {} connections (CONNECTIONS_MAX) are running requests; try again",
                    self.limits.connections_max
                ),
            );
        };
        let conn = Connection {
            dispatcher: self.dispatcher.clone(),
            stop: Arc::clone(stop),
            limits: self.limits,
        };
        tokio::spawn(async move {
            conn.serve(stream, slot).await;
            drop(permit);
        });
    }
}

/// Whether an accept error means the process or the system is out of file descriptors.
fn is_out_of_fds(errno: i32) -> bool {
    errno == nix::errno::Errno::EMFILE as i32 || errno == nix::errno::Errno::ENFILE as i32
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

/// Writes a connection's last error line, within `bound`, then closes it.
async fn say_farewell(
    mut write: OwnedWriteHalf,
    code: ErrorCode,
    message: String,
    bound: Duration,
) {
    let line = Response::new(None, Err(ApiError::new(code, message))).to_line();
    if tokio::time::timeout(bound, write.write_all(&line))
        .await
        .is_err()
    {
        debug!("a closing connection did not take its last line");
    }
}

// ---------------------------------------------------------------------------------------------
// Slots

/// Who the connection is waiting on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// On its client: for a request, or for the rest of one. Evictable.
    Client,
    /// On the server: a request runs or its response is being written. Never evicted.
    Running,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    phase: Phase,
    /// When the server started waiting on the client (accept, or the end of the last response).
    since: Instant,
    evicted: Arc<Notify>,
}

/// The connections holding a slot. Pure bookkeeping: no I/O, so it is tested on its own.
#[derive(Debug)]
struct SlotTable {
    max: usize,
    next_id: u64,
    entries: Vec<Entry>,
}

impl SlotTable {
    fn new(max: usize) -> Self {
        SlotTable {
            max,
            next_id: 0,
            entries: Vec::with_capacity(max),
        }
    }

    /// A slot for a connection accepted at `now`, evicting the connection that has waited on
    /// its client the longest when all are taken; `None` when every slot is running.
    fn take(&mut self, now: Instant) -> Option<(u64, Arc<Notify>)> {
        if self.entries.len() >= self.max && self.evict_one().is_none() {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let evicted = Arc::new(Notify::new());
        self.entries.push(Entry {
            id,
            phase: Phase::Client,
            since: now,
            evicted: Arc::clone(&evicted),
        });
        Some((id, evicted))
    }

    /// Removes the connection that has waited on its client the longest (the lower ID on a
    /// tie: the older connection) and tells it so; returns its ID.
    fn evict_one(&mut self) -> Option<u64> {
        let (at, _) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.phase == Phase::Client)
            .min_by_key(|(_, e)| (e.since, e.id))?;
        let victim = self.entries.swap_remove(at);
        victim.evicted.notify_one();
        Some(victim.id)
    }

    /// Moves connection `id` to `phase`; false if it is gone (evicted).
    fn set(&mut self, id: u64, phase: Phase, now: Instant) -> bool {
        match self.entries.iter_mut().find(|e| e.id == id) {
            Some(entry) => {
                if phase == Phase::Client && entry.phase != Phase::Client {
                    entry.since = now;
                }
                entry.phase = phase;
                true
            }
            None => false,
        }
    }

    fn release(&mut self, id: u64) {
        if let Some(at) = self.entries.iter().position(|e| e.id == id) {
            self.entries.swap_remove(at);
        }
    }
}

#[derive(Debug)]
struct Slots {
    table: Lock<SlotTable>,
}

impl Slots {
    fn new(max: usize) -> Self {
        Slots {
            table: Lock::new(SlotTable::new(max)),
        }
    }

    // The table is consistent after every statement; a panic elsewhere while holding the lock
    // leaves nothing half-done worth refusing to serve over.
    fn lock(&self) -> MutexGuard<'_, SlotTable> {
        self.table.lock()
    }

    fn evict_one(&self) -> Option<u64> {
        self.lock().evict_one()
    }
}

/// A connection's slot, released when dropped.
#[derive(Debug)]
struct Slot {
    slots: Arc<Slots>,
    id: u64,
    evicted: Arc<Notify>,
}

impl Slot {
    fn take(slots: &Arc<Slots>, now: Instant) -> Option<Slot> {
        let (id, evicted) = slots.lock().take(now)?;
        Some(Slot {
            slots: Arc::clone(slots),
            id,
            evicted,
        })
    }

    /// Marks the connection running; false if it was evicted first (its line must not run).
    fn running(&self) -> bool {
        self.slots
            .lock()
            .set(self.id, Phase::Running, Instant::now())
    }

    /// Marks the connection waiting on its client from now on; false if it was evicted.
    fn waiting(&self) -> bool {
        self.slots
            .lock()
            .set(self.id, Phase::Client, Instant::now())
    }

    /// Resolves once the connection was evicted.
    async fn evicted(&self) {
        self.evicted.notified().await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().release(self.id);
    }
}

// ---------------------------------------------------------------------------------------------
// Connections

struct Connection {
    dispatcher: Dispatcher,
    stop: Arc<Notify>,
    limits: ServerLimits,
}

/// What one bounded line read found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Complete,
    TooLong(usize),
    Eof,
}

/// Why a connection's wait for its client ended without a line.
enum Stalled {
    Evicted,
    Idle,
    LineTimeout,
    Gone,
}

impl Connection {
    async fn serve(self, stream: UnixStream, slot: Slot) {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::with_capacity(64 * 1024, read);
        let mut line = Vec::new();
        loop {
            let read = match self.next_line(&mut reader, &mut line, &slot).await {
                Ok(read) => read,
                Err(stalled) => {
                    let Some((code, message)) = self.farewell(stalled) else {
                        return;
                    };
                    // The slot is given up before the farewell: the client has had its chance.
                    drop(slot);
                    say_farewell(write, code, message, self.limits.farewell).await;
                    return;
                }
            };
            // Under the lock eviction takes: from here on this line runs to completion.
            if !slot.running() {
                drop(slot);
                say_farewell(
                    write,
                    ErrorCode::Busy,
                    "evicted before the request could run; it was not run".to_owned(),
                    self.limits.farewell,
                )
                .await;
                return;
            }
            let response = match read {
                Line::Eof => return,
                Line::TooLong(len) => Response::new(
                    None,
                    Err(ApiError::new(
                        ErrorCode::TooLarge,
                        format!(
                            "the request is at least {len} bytes; at most {REQUEST_BYTES_MAX} are accepted"
                        ),
                    )),
                ),
                Line::Complete => match decode_request(&line) {
                    Err(e) => {
                        let error = ApiError::from(&e);
                        log_refusal("?", &error);
                        Response::new(e.id.clone(), Err(error))
                    }
                    Ok(envelope) => match self.answer(envelope, &mut reader, &mut write).await {
                        Some(response) => response,
                        None => return,
                    },
                },
            };
            if !self.write_response(&mut write, &response).await || !slot.waiting() {
                return;
            }
        }
    }

    /// What a connection that stalled is told before it is closed; `None` when its peer is
    /// gone and there is no one to tell.
    fn farewell(&self, stalled: Stalled) -> Option<(ErrorCode, String)> {
        Some(match stalled {
            Stalled::Gone => return None,
            Stalled::Evicted => (
                ErrorCode::Busy,
                format!(
                    "all {} connections (CONNECTIONS_MAX) were taken and this one had waited longest for a request; closing it",
                    self.limits.connections_max
                ),
            ),
            Stalled::Idle => (
                ErrorCode::Idle,
                format!(
                    "no request for {} ms (CONNECTION_IDLE_MS); closing the connection",
                    self.limits.connection_idle.as_millis()
                ),
            ),
            Stalled::LineTimeout => (
                ErrorCode::Timeout,
                format!(
                    "the request line was not completed within {} ms (REQUEST_LINE_MS); closing the connection",
                    self.limits.request_line.as_millis()
                ),
            ),
        })
    }

    /// Runs one decoded request and returns its response; `None` when the connection ends with
    /// it: the peer left during a wait or a long poll (which is then cancelled), or it was a
    /// shutdown, answered here before the server is told to stop.
    async fn answer<R: AsyncBufRead + Unpin>(
        &self,
        envelope: Envelope,
        reader: &mut R,
        write: &mut OwnedWriteHalf,
    ) -> Option<Response> {
        let op = envelope.request.op();
        let shutdown = matches!(envelope.request, Request::Shutdown { .. });
        let cancellable = matches!(
            envelope.request,
            Request::Wait { .. } | Request::Output { .. }
        );
        let outcome = if cancellable {
            tokio::select! {
                outcome = self.dispatcher.dispatch(envelope.request) => outcome,
                () = peer_gone(reader) => return None,
            }
        } else {
            self.dispatcher.dispatch(envelope.request).await
        };
        if let Err(error) = &outcome {
            log_refusal(op, error);
        }
        let response = Response::new(envelope.id, outcome);
        if shutdown {
            let _ = self.write_response(write, &response).await;
            self.stop.notify_one();
            return None;
        }
        Some(response)
    }

    /// Reads the next request line within the idle and line bounds, giving up when evicted.
    async fn next_line<R: AsyncBufRead + Unpin>(
        &self,
        reader: &mut R,
        line: &mut Vec<u8>,
        slot: &Slot,
    ) -> Result<Line, Stalled> {
        let first = tokio::select! {
            first = tokio::time::timeout(self.limits.connection_idle, reader.fill_buf()) => first,
            () = slot.evicted() => return Err(Stalled::Evicted),
        };
        match first {
            Err(_) => return Err(Stalled::Idle),
            Ok(Err(e)) => {
                debug!(error = %e, "connection read failed");
                return Err(Stalled::Gone);
            }
            Ok(Ok([])) => return Ok(Line::Eof),
            Ok(Ok(_)) => {}
        }
        let deadline = Instant::now() + self.limits.request_line;
        let read = tokio::select! {
            read = tokio::time::timeout_at(deadline, read_line(reader, line, REQUEST_BYTES_MAX)) => read,
            () = slot.evicted() => return Err(Stalled::Evicted),
        };
        match read {
            Err(_) => Err(Stalled::LineTimeout),
            Ok(Err(e)) => {
                debug!(error = %e, "connection read failed");
                Err(Stalled::Gone)
            }
            Ok(Ok(Line::Eof)) => Err(Stalled::Gone),
            Ok(Ok(read)) => Ok(read),
        }
    }

    /// Writes one response within [`RESPONSE_WRITE_MS`]; false when the connection is done.
    async fn write_response(&self, write: &mut OwnedWriteHalf, response: &Response) -> bool {
        match tokio::time::timeout(
            self.limits.response_write,
            write.write_all(&response.to_line()),
        )
        .await
        {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                debug!(error = %e, "connection write failed");
                false
            }
            Err(_) => {
                warn!(
                    bound_ms = self.limits.response_write.as_millis(),
                    "a client did not take its response (RESPONSE_WRITE_MS); closing the connection"
                );
                false
            }
        }
    }
}

/// One log line per request the daemon refused or failed: a refusal (paused, no capacity, a bad
/// request, an unknown handle) at info, a failure of the daemon's own (the journal, a
/// teardown) at warn. The message may quote what a client sent: escaped.
fn log_refusal(op: &str, error: &ApiError) {
    let message = crate::spool::render::escape_field(&error.message, false);
    let code = serde_json::to_value(error.code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    match error.code {
        ErrorCode::Internal | ErrorCode::TeardownFailed => {
            warn!(op, code, handle = error.handle.as_deref(), %message, "request failed");
        }
        // Waiting longer than asked is what a wait with a timeout is for.
        ErrorCode::WaitTimeout => {}
        _ => info!(op, code, handle = error.handle.as_deref(), %message, "request refused"),
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
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
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
    use proptest::prelude::*;

    proptest! {
        /// Inputs rich in newlines and long lines, at every bound and buffer size: the fuzz
        /// body's model of the framing holds.
        #[test]
        fn framing_matches_the_model(
            max in 0u8..64,
            capacity in 0u8..16,
            input in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'x'), any::<u8>()], 0..300),
        ) {
            let mut data = vec![max, capacity];
            data.extend(input);
            crate::fuzzing::server_framing(&data);
        }
    }

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

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[tokio::test]
    async fn a_full_table_evicts_the_connection_that_waited_on_its_client_longest() {
        let t0 = Instant::now();
        let mut table = SlotTable::new(3);
        let (a, _) = table.take(at(t0, 0)).unwrap();
        let (b, b_evicted) = table.take(at(t0, 1)).unwrap();
        let (c, _) = table.take(at(t0, 2)).unwrap();
        // `a` was served a response later than `b` connected: `b` has waited longest.
        assert!(table.set(a, Phase::Running, at(t0, 3)));
        assert!(table.set(a, Phase::Client, at(t0, 4)));
        let (d, _) = table.take(at(t0, 5)).unwrap();
        assert!(!table.set(b, Phase::Running, at(t0, 6)), "b was evicted");
        // The eviction left a wake-up for b's task even though nobody was waiting yet.
        let woken = tokio::time::timeout(Duration::from_secs(60), b_evicted.notified()).await;
        assert!(woken.is_ok(), "hung: b's task was never told");
        let ids: Vec<u64> = table.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.contains(&a) && ids.contains(&c) && ids.contains(&d));
        // Next in line is c (since 2), then a (since 4), then d (since 5).
        assert_eq!(table.evict_one(), Some(c));
        assert_eq!(table.evict_one(), Some(a));
        assert_eq!(table.evict_one(), Some(d));
        assert_eq!(table.evict_one(), None);
    }

    #[test]
    fn running_connections_are_never_evicted() {
        let t0 = Instant::now();
        let mut table = SlotTable::new(2);
        let (a, _) = table.take(at(t0, 0)).unwrap();
        let (b, _) = table.take(at(t0, 1)).unwrap();
        assert!(table.set(a, Phase::Running, at(t0, 2)));
        // b is the only one waiting on its client: it goes, however recent.
        let (c, _) = table.take(at(t0, 3)).unwrap();
        assert!(!table.set(b, Phase::Running, at(t0, 4)));
        assert!(table.set(c, Phase::Running, at(t0, 4)));
        // Every slot runs: the newcomer is refused and nobody is evicted.
        assert!(table.take(at(t0, 5)).is_none());
        assert_eq!(table.entries.len(), 2);
        // Running does not restart the clock; going back to waiting does.
        assert!(table.set(c, Phase::Client, at(t0, 6)));
        assert!(table.set(a, Phase::Client, at(t0, 7)));
        assert_eq!(table.evict_one(), Some(c));
    }

    #[test]
    fn released_slots_are_free_again_and_ties_go_to_the_older_connection() {
        let t0 = Instant::now();
        let mut table = SlotTable::new(2);
        let (a, _) = table.take(t0).unwrap();
        let (b, _) = table.take(t0).unwrap();
        table.release(a);
        table.release(a);
        let (c, _) = table.take(t0).unwrap();
        assert_eq!(table.entries.len(), 2);
        assert_eq!(table.evict_one(), Some(b));
        assert_eq!(table.evict_one(), Some(c));
    }
}
