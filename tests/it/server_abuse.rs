//! The server survives its clients: a real daemon (`Server::bind_with_limits` + `Server::run` on
//! its own tokio runtime, in this process so that the bounds can be made small) and real Unix
//! socket clients that stall, idle, flood the slots or wait on long-running processes.
//!
//! Every timeout here is a hang guard: it fails a test that hangs and measures nothing. The
//! bounds under test are made small so that the tests finish quickly, never asserted on.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use procjournal::Durability;
use procjournal::client::Client;
use procjournal::protocol::Request;
use procjournal::server::{ServeError, Server, ServerLimits};
use procjournal::supervisor::{ShutdownReport, SupervisorConfig};
use serde_json::{Value, json};

/// Bounds a hang; measures nothing.
const HANG_GUARD: Duration = Duration::from_secs(60);
/// Long enough never to fire during a test: for the bounds a test is not about.
const NEVER: Duration = Duration::from_secs(3600);

/// A fresh root, on tmpfs when there is one (the journal's fsyncs cost nothing there).
/// The tests here time the server's bounds against real connections; run one at a time, so that
/// a thousand stalled connections of one test do not starve another's (each is a separate
/// daemon, but they share the two cores).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn temp_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("procjournal-abuse-")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::Builder::new()
        .prefix("procjournal-abuse-")
        .tempdir()
        .expect("temp dir")
}

/// Raises this process's descriptor limit to the hard limit: the clients and the in-process
/// daemon share it, and the flood test holds a few thousand descriptors.
fn raise_fd_limit(needed: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("setrlimit");
    }
    assert!(
        hard >= needed,
        "this test needs {needed} file descriptors; the hard limit is {hard}"
    );
}

/// A daemon served by this process, shut down (through the protocol) when dropped.
struct Daemon {
    rt: Option<tokio::runtime::Runtime>,
    task: Option<tokio::task::JoinHandle<Result<ShutdownReport, ServeError>>>,
    socket: PathBuf,
    root: tempfile::TempDir,
}

impl Daemon {
    fn start(limits: ServerLimits) -> Daemon {
        let root = temp_root();
        // The shape `procjournal serve` builds: 2 worker threads.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let socket = root.path().join("d.sock");
        let mut config = SupervisorConfig::new(root.path().join("rt"));
        // Supervision, not admission, is under test: an explicit host limit (the live bound's
        // default), so that the machine's cores and memory do not decide how many run at once.
        config.admission = procjournal::admission::AdmissionConfig::max_concurrent(
            procjournal::limits::LIVE_PROCESSES_DEFAULT,
        );
        config.durability = Durability::Os;
        let (server, _) = rt
            .block_on(Server::bind_with_limits(
                config,
                Some(socket.clone()),
                limits,
            ))
            .expect("bind");
        let task = rt.spawn(server.run());
        Daemon {
            rt: Some(rt),
            task: Some(task),
            socket,
            root,
        }
    }

    fn conn(&self) -> Conn {
        Conn::open(&self.socket)
    }

    /// A file in the root, for the test's processes to watch.
    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// Starts a process that runs until the file `go` (in the root) exists; returns its handle.
    fn start_held_process(&self) -> String {
        let go = self.path("go");
        let script = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
        let started = self
            .conn()
            .call(json!({"v":1,"id":1,"op":"start","args":{"command":["sh","-c",script],"inherit_env":true}}));
        ok(&started)["handle"]
            .as_str()
            .expect("a handle")
            .to_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let (Some(rt), Some(task)) = (self.rt.take(), self.task.take()) else {
            return;
        };
        if std::thread::panicking() {
            rt.shutdown_background();
            return;
        }
        let _ = std::fs::write(self.path("go"), b"");
        let mut conn = self.conn();
        let bye = conn.call(json!({"v":1,"op":"shutdown","args":{"grace_ms":0}}));
        ok(&bye);
        let ended = rt.block_on(async { tokio::time::timeout(HANG_GUARD, task).await });
        let report = ended
            .expect("hung: the daemon did not stop")
            .expect("the daemon's task panicked")
            .expect("the daemon failed");
        assert!(report.teardown_failed.is_empty(), "{report:?}");
    }
}

/// A raw protocol connection whose reads give up after [`HANG_GUARD`].
struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

/// What the daemon sent next on a connection.
#[derive(Debug)]
enum Next {
    Line(Value),
    /// End of file, or a reset: a server that closes with bytes of ours unread resets.
    Closed,
}

impl Conn {
    fn open(socket: &Path) -> Conn {
        let writer = UnixStream::connect(socket).expect("connect");
        writer
            .set_read_timeout(Some(HANG_GUARD))
            .expect("read timeout");
        let reader = BufReader::new(writer.try_clone().expect("clone"));
        Conn { writer, reader }
    }

    /// Sends bytes; a daemon that already hung up is not an error here: what it said before
    /// hanging up is read next.
    fn send(&mut self, bytes: &[u8]) {
        match self.writer.write_all(bytes) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {}
            Err(e) => panic!("send: {e}"),
        }
    }

    fn next(&mut self) -> Next {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Next::Closed,
            Ok(_) => Next::Line(
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}")),
            ),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => Next::Closed,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("hung: no answer and no close within {HANG_GUARD:?}")
            }
            Err(e) => panic!("read: {e}"),
        }
    }

    fn call(&mut self, request: Value) -> Value {
        let mut line = serde_json::to_vec(&request).expect("json");
        line.push(b'\n');
        self.send(&line);
        match self.next() {
            Next::Line(v) => v,
            Next::Closed => panic!("closed instead of answering {request}"),
        }
    }

    /// The connection's last words: one error line with `code`, then the close.
    fn expect_farewell(&mut self, code: &str) -> String {
        let line = match self.next() {
            Next::Line(v) => v,
            Next::Closed => panic!("closed without the {code} error"),
        };
        assert_eq!(error_code(&line), code, "{line}");
        assert!(line.get("id").is_none(), "{line}");
        assert!(
            matches!(self.next(), Next::Closed),
            "still open after {line}"
        );
        line["error"]["message"].as_str().unwrap_or("").to_owned()
    }

    /// Whether the daemon has neither sent anything nor closed the connection yet. What it did
    /// send stays buffered for [`Conn::next`].
    fn is_quiet(&mut self) -> bool {
        if !self.reader.buffer().is_empty() {
            return false;
        }
        self.reader
            .get_ref()
            .set_nonblocking(true)
            .expect("nonblocking");
        let quiet = matches!(self.reader.fill_buf(), Err(e) if e.kind() == ErrorKind::WouldBlock);
        self.reader
            .get_ref()
            .set_nonblocking(false)
            .expect("blocking");
        quiet
    }
}

fn ok(response: &Value) -> &Value {
    assert_eq!(response["ok"], json!(true), "{response}");
    &response["result"]
}

fn error_code(response: &Value) -> &str {
    assert_eq!(response["ok"], json!(false), "{response}");
    response["error"]["code"].as_str().expect("an error code")
}

const HELLO: &[u8] = b"{\"v\":1,\"id\":1,\"op\":\"hello\"}\n";
const HALF_LINE: &[u8] = b"{\"v\":1,\"op\":\"hel";

/// An ordinary client: connects, says hello, is answered.
fn assert_served(daemon: &Daemon) -> Conn {
    let mut conn = daemon.conn();
    conn.send(HELLO);
    match conn.next() {
        Next::Line(v) => {
            assert_eq!(v["id"], json!(1), "{v}");
            ok(&v);
        }
        Next::Closed => panic!("an ordinary client was not served"),
    }
    conn
}

#[test]
fn a_thousand_stalled_half_lines_do_not_lock_out_an_ordinary_client() {
    let _serial = one_at_a_time();
    const STALLED: usize = 1000;
    // The clients' 1000, as many again on the daemon's side while evicted ones say goodbye.
    raise_fd_limit(2 * STALLED as u64 + 256);
    let daemon = Daemon::start(ServerLimits {
        request_line: Duration::from_secs(2),
        connection_idle: NEVER,
        ..ServerLimits::default()
    });
    let mut stalled: Vec<Conn> = (0..STALLED)
        .map(|_| {
            let mut conn = daemon.conn();
            conn.send(HALF_LINE);
            conn
        })
        .collect();
    assert_served(&daemon);
    // Every stalled connection is closed: evicted for a newcomer, or past the line bound.
    let (mut evicted, mut timed_out) = (0, 0);
    for conn in &mut stalled {
        let line = match conn.next() {
            Next::Line(v) => v,
            Next::Closed => panic!("closed without an error line"),
        };
        match error_code(&line) {
            "busy" => evicted += 1,
            "timeout" => timed_out += 1,
            other => panic!("unexpected {other}: {line}"),
        }
        assert!(
            matches!(conn.next(), Next::Closed),
            "still open after {line}"
        );
    }
    assert_eq!(evicted + timed_out, STALLED);
    // The daemon still serves after all that.
    assert_served(&daemon);
}

#[test]
fn a_stalled_half_line_gets_a_timeout_naming_the_bound_and_is_closed() {
    let _serial = one_at_a_time();
    raise_fd_limit(256);
    let daemon = Daemon::start(ServerLimits {
        request_line: Duration::from_millis(200),
        connection_idle: NEVER,
        ..ServerLimits::default()
    });
    let mut stalled = daemon.conn();
    stalled.send(HALF_LINE);
    // A line trickled a byte at a time is bounded the same way.
    let mut trickle = daemon.conn();
    trickle.send(b"{");
    // Requests before the stall are answered; the bound is per line.
    let mut served_then_stalled = daemon.conn();
    served_then_stalled.send(HELLO);
    served_then_stalled.send(HALF_LINE);
    let message = stalled.expect_farewell("timeout");
    assert!(
        message.contains("REQUEST_LINE_MS") && message.contains("200 ms"),
        "{message}"
    );
    loop {
        match trickle.writer.write_all(b" ") {
            Ok(()) if trickle.is_quiet() => std::thread::sleep(Duration::from_millis(20)),
            _ => break,
        }
    }
    trickle.expect_farewell("timeout");
    match served_then_stalled.next() {
        Next::Line(v) => assert_eq!(v["id"], json!(1), "{v}"),
        Next::Closed => panic!("closed before answering"),
    }
    served_then_stalled.expect_farewell("timeout");
    assert_served(&daemon);
}

#[test]
fn an_idle_connection_is_closed_but_one_waiting_on_a_process_is_not() {
    let _serial = one_at_a_time();
    raise_fd_limit(256);
    let idle = Duration::from_millis(300);
    let daemon = Daemon::start(ServerLimits {
        request_line: NEVER,
        connection_idle: idle,
        ..ServerLimits::default()
    });
    let handle = daemon.start_held_process();
    let mut waiter = daemon.conn();
    waiter.send(
        format!(
            "{}\n",
            json!({"v":1,"id":7,"op":"wait","args":{"handle":handle}})
        )
        .as_bytes(),
    );
    // Connected after the wait was sent: once this one is closed as idle, the waiter has been
    // waiting longer than the idle bound.
    let mut silent = daemon.conn();
    let mut served = assert_served(&daemon);
    let message = silent.expect_farewell("idle");
    assert!(
        message.contains("CONNECTION_IDLE_MS") && message.contains("300 ms"),
        "{message}"
    );
    served.expect_farewell("idle");
    // And twice over, in case the waiter's request was read late.
    daemon.conn().expect_farewell("idle");
    assert!(waiter.is_quiet(), "the waiting connection was closed");
    std::fs::write(daemon.path("go"), b"").expect("release the process");
    match waiter.next() {
        Next::Line(v) => {
            assert_eq!(v["id"], json!(7), "{v}");
            let end = ok(&v);
            assert_eq!(end["handle"], json!(handle));
            assert_eq!(end["state"], json!("exited"), "{v}");
            assert_eq!(end["exit_code"], json!(0), "{v}");
        }
        Next::Closed => panic!("the waiting connection was closed"),
    }
    // Answered, it is idle like any other.
    waiter.expect_farewell("idle");
}

#[test]
fn the_client_sends_again_after_an_idle_close() {
    let _serial = one_at_a_time();
    raise_fd_limit(256);
    let idle = Duration::from_millis(200);
    let daemon = Daemon::start(ServerLimits {
        connection_idle: idle,
        ..ServerLimits::default()
    });
    let mut client = Client::connect(&daemon.socket).expect("connect");
    client.call(&Request::Hello).expect("hello");
    // A connection opened after the client's went idle; once it is closed, so is the client's.
    daemon.conn().expect_farewell("idle");
    std::thread::sleep(2 * idle);
    let hello = client
        .call(&Request::Hello)
        .expect("hello after an idle close");
    assert!(hello["pid"].is_u64(), "{hello}");
}

#[test]
fn slots_are_fair_stalled_clients_are_evicted_oldest_first() {
    let _serial = one_at_a_time();
    raise_fd_limit(1024);
    let max = ServerLimits::default().connections_max;
    let daemon = Daemon::start(ServerLimits {
        request_line: NEVER,
        connection_idle: NEVER,
        ..ServerLimits::default()
    });
    // Every slot taken: half of them stalled mid-line, half idle.
    let mut holders: Vec<Conn> = (0..max)
        .map(|i| {
            let mut conn = daemon.conn();
            if i % 2 == 0 {
                conn.send(HALF_LINE);
            }
            conn
        })
        .collect();
    // Nothing times out here, so only eviction can make room; the oldest holder goes.
    let mut newcomer = assert_served(&daemon);
    let message = holders[0].expect_farewell("busy");
    assert!(message.contains("CONNECTIONS_MAX"), "{message}");
    // The next newcomer takes the next oldest slot; the newer ones keep theirs.
    assert_served(&daemon);
    holders[1].expect_farewell("busy");
    for (i, conn) in holders.iter_mut().enumerate().skip(2) {
        assert!(conn.is_quiet(), "holder {i} was disturbed");
    }
    // A holder that was only slow is still served when it finishes its line.
    holders[2].send(b"lo\"}\n");
    match holders[2].next() {
        Next::Line(v) => assert_eq!(v["ok"], json!(true), "{v}"),
        Next::Closed => panic!("a slow holder was closed"),
    }
    // The first newcomer is still served too.
    newcomer.send(HELLO);
    assert!(matches!(newcomer.next(), Next::Line(_)));
}

#[test]
fn running_requests_are_never_evicted_and_a_full_house_of_them_refuses_newcomers() {
    let _serial = one_at_a_time();
    raise_fd_limit(256);
    const SLOTS: usize = 4;
    let daemon = Daemon::start(ServerLimits {
        connections_max: SLOTS,
        request_line: NEVER,
        connection_idle: NEVER,
        ..ServerLimits::default()
    });
    let handle = daemon.start_held_process();
    let wait_line = format!(
        "{}\n",
        json!({"v":1,"id":9,"op":"wait","args":{"handle":handle}})
    );
    let open_waiter = || {
        let mut conn = daemon.conn();
        conn.send(wait_line.as_bytes());
        conn
    };
    // A stalled client holds a slot too; the waiters' newcomers evict it, not each other.
    let mut stalled = daemon.conn();
    stalled.send(HALF_LINE);
    let mut waiters: Vec<Conn> = (0..SLOTS).map(|_| open_waiter()).collect();
    // Once every slot runs a `wait`, a newcomer is refused and nobody is evicted. A waiter
    // whose line the daemon had not read yet when a newcomer came was still waiting on its
    // client, so it may have been evicted (told `busy`, its wait never ran): it sends its wait
    // again and the newcomers go on until one is refused. Usually the first one is.
    let mut tries = 0;
    let refused = loop {
        tries += 1;
        assert!(tries < 1000, "hung: no newcomer was ever refused");
        std::thread::sleep(Duration::from_millis(50));
        let mut reopened = false;
        for waiter in &mut waiters {
            if !waiter.is_quiet() {
                waiter.expect_farewell("busy");
                *waiter = open_waiter();
                reopened = true;
            }
        }
        if reopened {
            // No newcomer in the same round: on a loaded machine one sent at once could evict
            // the reopened waiter again before its line is read, round after round.
            continue;
        }
        let mut newcomer = daemon.conn();
        newcomer.send(HELLO);
        let reply = match newcomer.next() {
            Next::Line(v) => v,
            Next::Closed => panic!("a newcomer was closed without an answer"),
        };
        if reply["ok"] == json!(false) && waiters.iter_mut().all(|w| w.is_quiet()) {
            break reply;
        }
    };
    assert_eq!(error_code(&refused), "busy", "{refused}");
    // A refusal means no slot was waiting on its client: the stalled one had been evicted.
    stalled.expect_farewell("busy");
    for (i, waiter) in waiters.iter_mut().enumerate() {
        assert!(waiter.is_quiet(), "waiter {i} was disturbed by the refusal");
    }
    std::fs::write(daemon.path("go"), b"").expect("release the process");
    for waiter in &mut waiters {
        match waiter.next() {
            Next::Line(v) => assert_eq!(ok(&v)["state"], json!("exited"), "{v}"),
            Next::Closed => panic!("a waiter was closed"),
        }
    }
    assert_served(&daemon);
}
