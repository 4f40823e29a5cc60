//! Helpers shared by the tests that drive the real binary's daemon (`cli_daemon.rs`,
//! `tree_survivors.rs`): the binary, a client command against a root, a `procjournal serve`
//! killed on drop, and a raw protocol connection.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_procjournal"))
}

/// Runs a client command against `root`; returns (status, stdout, stderr).
pub fn client(root: &Path, args: &[&str]) -> (i32, String, String) {
    // `--root` right after the subcommand: anything after `--` belongs to the command.
    let out: Output = bin()
        .arg(args[0])
        .arg("--root")
        .arg(root)
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A running `procjournal serve`, killed on drop if still alive.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    /// The runtime root it serves.
    pub root: PathBuf,
}

impl Daemon {
    pub fn start(root: &Path) -> Daemon {
        Daemon::start_with(root, &[])
    }

    pub fn start_with(root: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_env(root, extra, &[])
    }

    /// [`Daemon::start_with`], with `env` added to the daemon's environment.
    pub fn start_env(root: &Path, extra: &[&str], env: &[(&str, String)]) -> Daemon {
        let child = bin()
            .arg("serve")
            .arg("--root")
            .arg(root)
            // Supervision, not admission, is under test (unless `extra` sets a limit): an explicit
            // host limit, so that the machine's cores and memory do not decide how many run at
            // once. `--share` (70 is the default) asks for the automatic policy.
            .args(
                if extra.contains(&"--max-concurrent") || extra.contains(&"--share") {
                    &[][..]
                } else {
                    &["--max-concurrent", "256"][..]
                },
            )
            .args(extra)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let socket = root.join("procjournal.sock");
        let mut daemon = Daemon {
            child,
            socket,
            root: root.to_owned(),
        };
        daemon.await_ready();
        daemon
    }

    /// Ready when a hello round trip succeeds (the socket file can exist before `listen`).
    pub fn await_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(mut conn) = Conn::open(&self.socket)
                && conn.call(json!({"v":1,"op":"hello"}))["ok"] == json!(true)
            {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err)
                    .unwrap();
                panic!("daemon exited early ({status}): {err}");
            }
            assert!(Instant::now() < deadline, "daemon never became ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_base_cgroup(&self.root);
    }
}

/// Removes the base cgroup of `root`: a SIGKILLed daemon cannot, and the test's root (whose
/// name the base carries) is gone after the test. The guardians of a killed daemon are still
/// ending their trees (and removing their scopes) for up to their grace, so this waits for
/// that, bounded.
pub fn remove_base_cgroup(root: &Path) {
    use procjournal::tree::cgroup::{CgroupBase, base_name};
    let Ok(base) = CgroupBase::probe(&base_name(root)) else {
        return;
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::remove_dir(base.dir()).is_err() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A raw protocol connection.
pub struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Conn {
    pub fn open(socket: &Path) -> std::io::Result<Conn> {
        let writer = UnixStream::connect(socket)?;
        writer.set_read_timeout(Some(Duration::from_secs(60)))?;
        let reader = BufReader::new(writer.try_clone()?);
        Ok(Conn { writer, reader })
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> Value {
        self.writer.write_all(bytes).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad response {line:?}: {e}"))
    }

    pub fn call(&mut self, request: Value) -> Value {
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        self.send_raw(&line)
    }
}
