//! `procjournal run` prints the child's output live, with backpressure: the real
//! binary, real children, and a reader on the other end of `run`'s stdout that is slow on
//! purpose. Every byte reaches a slow reader even when the child writes four times the spool's
//! retention; the child is held in `write` while the reader reads nothing; a gap in the durable
//! copy is announced on one stderr line.
//!
//! Nothing here measures time: the reader's pauses make a broken `run` show itself (bytes
//! missing, a marker file written too early), and no assertion depends on how long anything
//! took.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The child's stdout: four blocks of 64 MiB (four times the default retention), each the
/// decimal numbers from the block's number on, one a line, cut at 64 MiB: cheap for `sh` to
/// write, and any loss, duplication or reordering shows.
const BLOCK: usize = 64 * 1024 * 1024;
const BLOCKS: usize = 4;
const STDOUT_GENERATOR: &str = "for i in 1 2 3 4; do seq $i 100000000 | head -c 67108864; done";

/// Far more than the slack between the child and `run`'s reader (the child's 1 MiB pipe, the
/// tap's 1 MiB, the chunks being written, at most the tap's depth, and `run`'s own stdout
/// pipe): a child that got this far was not held back.
const BEYOND_SLACK: usize = 16 * 1024 * 1024;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_procjournal"))
}

fn run_piped(root: &Path, args: &[&str]) -> Child {
    bin()
        .args(["run", "--root"])
        .arg(root)
        .arg("--")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `run` of `sh -c script` on `root`, with no input; its stdout and stderr are the caller's.
fn run_sh(root: &Path, script: &str) -> Command {
    let mut run = bin();
    run.args(["run", "--root"])
        .arg(root)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null());
    run
}

/// Reads all of `stream` on a thread of its own (so that a full stderr pipe never stalls `run`).
fn collect(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).unwrap();
        bytes
    })
}

/// The same stdout, straight from the generator (no procjournal): what the reader must get.
fn reference_stdout() -> Child {
    Command::new("sh")
        .args(["-c", STDOUT_GENERATOR])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A reader of `run`'s stdout that checks every byte against the reference as it goes (the
/// bytes compared, not a checksum of them: an unoptimized test build hashes 256 MiB slowly).
struct Checked {
    stdout: std::process::ChildStdout,
    reference: Child,
    expected: Vec<u8>,
    total: usize,
}

impl Checked {
    /// Reads up to `buf.len()` bytes; false at the end.
    fn read(&mut self, buf: &mut [u8]) -> bool {
        let n = self.stdout.read(buf).unwrap();
        if n == 0 {
            return false;
        }
        self.expected.resize(n, 0);
        let reference = self.reference.stdout.as_mut().unwrap();
        reference
            .read_exact(&mut self.expected)
            .unwrap_or_else(|e| {
                panic!(
                    "run printed more than the generator wrote, after {}: {e}",
                    self.total
                )
            });
        assert!(
            buf[..n] == self.expected[..],
            "bytes {}..{} differ from the generator's",
            self.total,
            self.total + n
        );
        self.total += n;
        true
    }
}

/// `run`'s stderr without the line that announces the handle, which comes first, once.
fn child_stderr(stderr: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(stderr);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    assert!(first.starts_with("procjournal: started p-"), "{text}");
    assert!(!rest.contains("procjournal: started"), "{text}");
    rest.as_bytes().to_vec()
}

fn expected_stderr() -> Vec<u8> {
    let mut text: String = (1..=1000).map(|n| format!("{n}\n")).collect();
    text.push_str("end\n");
    text.into_bytes()
}

/// `child`'s exit, once it exited; a hang guard kills it at `deadline` and fails with `why`.
fn exit_by(
    child: &mut Child,
    deadline: std::time::Instant,
    why: impl Fn() -> String,
) -> std::process::ExitStatus {
    loop {
        if let Some(exit) = child.try_wait().unwrap() {
            return exit;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("{}", why());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn manifests(root: &Path) -> Vec<Value> {
    let out = bin()
        .args(["journal", "manifests", "--json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("handle").is_some())
        .collect()
}

/// 256 MiB through a reader that reads nothing for a while, then dribbles, then drinks: every
/// byte arrives, in order, on stdout, and every stderr byte on stderr, although the spool kept
/// only the last 64 MiB (reading back from the spool could not have printed them all).
#[test]
fn a_slow_reader_gets_every_byte_of_four_times_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let script = format!("seq 1 1000 >&2; {STDOUT_GENERATOR}; echo end >&2");
    let mut child = run_piped(root, &["sh", "-c", &script]);
    let stderr = collect(child.stderr.take().unwrap());
    let mut reader = Checked {
        stdout: child.stdout.take().unwrap(),
        reference: reference_stdout(),
        expected: Vec::new(),
        total: 0,
    };
    // Nothing at all for a while: the child runs ahead of the reader by the slack, then waits.
    std::thread::sleep(Duration::from_secs(2));
    // Small reads with pauses.
    let mut small = [0u8; 4096];
    for _ in 0..200 {
        assert!(reader.read(&mut small));
        std::thread::sleep(Duration::from_millis(2));
    }
    // The rest, in large reads.
    let mut large = vec![0u8; 1 << 20];
    while reader.read(&mut large) {}
    let status = child.wait().unwrap();
    let stderr = child_stderr(&stderr.join().unwrap());
    assert!(
        status.success(),
        "{status:?}: {}",
        String::from_utf8_lossy(&stderr)
    );
    assert_eq!(reader.total, BLOCK * BLOCKS);
    // The generator has nothing more either.
    let mut rest = Vec::new();
    let mut reference = reader.reference;
    reference
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut rest)
        .unwrap();
    assert!(rest.is_empty(), "run printed {} bytes too few", rest.len());
    assert!(reference.wait().unwrap().success());
    // Exactly the child's stderr: nothing lost, and no notice of an incomplete copy.
    assert_eq!(
        String::from_utf8_lossy(&stderr),
        String::from_utf8_lossy(&expected_stderr())
    );
    // The durable copy: complete, every byte counted, the oldest dropped by retention.
    let listed = manifests(root);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let bounds = &listed[0]["bounds"];
    assert_eq!(
        bounds["total_bytes"].as_u64(),
        Some((BLOCK * BLOCKS + expected_stderr().len()) as u64),
        "{listed:?}"
    );
    assert!(bounds["retained_from"].as_u64().unwrap() > 0, "{listed:?}");
}

/// While the reader reads nothing, the child is held in `write`: it does not get past a point
/// far beyond the slack until the reader reads, and then it does.
#[test]
fn the_child_waits_while_the_reader_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let marker = dir.path().join("wrote-everything");
    let script = format!("head -c {BEYOND_SLACK} /dev/zero; : > \"$1\"; echo after; echo done >&2");
    let mut child = run_piped(root, &["sh", "-c", &script, "sh", marker.to_str().unwrap()]);
    let stderr = collect(child.stderr.take().unwrap());
    let mut stdout = child.stdout.take().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !marker.exists(),
        "the child wrote everything while nobody read run's stdout"
    );
    let mut bytes = Vec::new();
    stdout.read_to_end(&mut bytes).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(marker.exists());
    assert_eq!(bytes.len(), BEYOND_SLACK + "after\n".len());
    assert!(bytes.ends_with(b"\0after\n"));
    assert_eq!(child_stderr(&stderr.join().unwrap()), b"done\n");
}

/// A descendant that holds the output open past the final drain leaves the durable copy
/// incomplete: `run` says so on one stderr line when the child ends, and still exits with the
/// child's status.
#[test]
fn an_incomplete_durable_copy_is_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let out = bin()
        .args(["run", "--root"])
        .arg(root)
        .args(["--", "sh", "-c", "echo held; (setsid sleep 2 &); exit 3"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(out.stdout, b"held\n");
    let stderr = String::from_utf8(child_stderr(&out.stderr)).unwrap();
    let notices: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("procjournal: the durable copy of this output is incomplete: "))
        .collect();
    assert_eq!(notices.len(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// With its stdout closed (`>&-`), `run` does what the command alone would with a closed stdout
/// of its own: the child's bytes go nowhere, and it runs to its end with its own status. `run`
/// writes the child's output to descriptor 1 itself, not through std's buffered stream, and no
/// file of the root may take that descriptor's place (the journal would get the output).
#[test]
fn a_closed_stdout_takes_the_output_away_and_the_command_runs_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let out = Command::new("sh")
        .args(["-c", "exec \"$0\" \"$@\" >&-"])
        .arg(env!("CARGO_BIN_EXE_procjournal"))
        .args(["run", "--root"])
        .arg(&root)
        .args([
            "--",
            "sh",
            "-c",
            "head -c 3000000 /dev/zero; echo done >&2; exit 4",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_eq!(child_stderr(&out.stderr), b"done\n");
    let m = manifests(&root);
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0]["state"], "exited", "{m:?}");
    assert_eq!(m[0]["bounds"]["total_bytes"], 3_000_005, "{m:?}");
}

/// The third Ctrl-C gives up on a reader that reads nothing: `run`'s write to it is left
/// blocked, the tap ends, the drain reads on into the spool, and `run` exits with the killed
/// child's status instead of waiting for the reader for ever.
#[test]
fn the_third_ctrl_c_gives_up_on_a_reader_that_reads_nothing() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = run_piped(dir.path(), &["sh", "-c", "trap '' INT TERM; exec yes"]);
    let stdout = child.stdout.take().unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    // Until `run`'s stdout pipe is full: its writer is then blocked in `write`.
    let capacity = nix::fcntl::fcntl(&stdout, nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap();
    let capacity = u64::try_from(capacity).unwrap();
    let held = || rustix::io::ioctl_fionread(&stdout).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while held() < capacity {
        assert!(
            std::time::Instant::now() < deadline,
            "run's stdout never filled"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let mut said = String::new();
    for says in ["interrupting", "stopping", "killing"] {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "{said}");
            said.push_str(&line);
            if line.contains(says) {
                break;
            }
        }
    }
    let exit = exit_by(&mut child, deadline, || {
        format!("run waited for a reader that reads nothing: {said}")
    });
    assert_eq!(exit.code(), Some(128 + 9), "{said}");
    drop(stdout);
}

/// Into files (which `run`'s drain writes itself, no reader being able to hold a write): every
/// byte of each stream, in order, in its own file, and the child's status.
#[test]
fn into_files_every_byte_of_each_stream_arrives_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let status = run_sh(
        &dir.path().join("root"),
        "seq 1 300000; seq 1 1000 >&2; seq 300001 400000; echo end >&2; exit 5",
    )
    .stdout(std::fs::File::create(&out).unwrap())
    .stderr(std::fs::File::create(&err).unwrap())
    .status()
    .unwrap();
    assert_eq!(status.code(), Some(5));
    let expected: String = (1..=400_000).map(|n| format!("{n}\n")).collect();
    assert!(
        std::fs::read(&out).unwrap() == expected.as_bytes(),
        "stdout's file differs from seq's"
    );
    assert_eq!(
        child_stderr(&std::fs::read(&err).unwrap()),
        expected_stderr()
    );
}

/// Into a file on a full file system: `run` says on stderr that it cannot write the output and
/// why, and stops the command rather than run it unread (as for a reader gone); the spool has
/// what the command wrote.
///
/// The stop may come before the command has written everything, so the command counts its
/// chunks in a file beside the root: every chunk whose write returned must be in the spool.
#[test]
fn into_a_full_disk_it_says_so_and_stops_the_command() {
    const CHUNKS: u64 = 64;
    const CHUNK: u64 = 62_500;
    let Some(small) = crate::common::tmpfs::SmallTmpfs::mount("1m") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let err = dir.path().join("err");
    let count = dir.path().join("count");
    let script = format!(
        "i=0; while [ $i -lt {CHUNKS} ]; do head -c {CHUNK} /dev/zero; i=$((i+1)); \
         echo $i >> {}; done; exec sleep 600",
        count.display()
    );
    let mut child = run_sh(&root, &script)
        .stdout(std::fs::File::create(small.path().join("out")).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let exit = exit_by(&mut child, deadline, || {
        "run did not stop a command whose output it cannot write".to_owned()
    });
    let said = String::from_utf8_lossy(&std::fs::read(&err).unwrap()).into_owned();
    assert!(
        said.contains("cannot write the output of p-") && said.contains("No space left"),
        "{said}"
    );
    assert_ne!(exit.code(), Some(0), "{said}");
    let m = manifests(&root);
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0]["state"], "terminated", "{m:?}");
    assert_eq!(m[0]["terminal"]["reason"], "stopped", "{m:?}");
    // Appended one line a chunk, so a line without its newline was never written.
    let counted = std::fs::read_to_string(&count).unwrap_or_default();
    let written = counted.matches('\n').count() as u64;
    let total = m[0]["bounds"]["total_bytes"].as_u64().unwrap();
    assert!(
        total >= written * CHUNK && total <= (written + 1).min(CHUNKS) * CHUNK,
        "{written} chunks written, {total} bytes in the spool: {m:?}"
    );
}
