//! A command's output within a hang guard: a test that runs a CLI command many times under load
//! must fail, and say where the command waited, rather than hang the suite (and CI) for good.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` to its end, as `Command::output` does (no stdin, its output collected), in a
/// process group of its own. Past
/// `guard` (a hang guard, not a measurement) it panics with what each thread of the command and
/// of its children waits in (their `wchan`, their kernel stacks and, where gdb is installed,
/// their backtraces), after killing the group.
pub fn output_within(cmd: &mut Command, guard: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + guard;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let pid = child.id();
            let report = where_it_waits(pid);
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            let err = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
            panic!("{cmd:?} still ran after {guard:?}; stderr: {err}\n{report}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// What `pid` and its children are waiting in, thread by thread.
fn where_it_waits(pid: u32) -> String {
    let mut pids = vec![pid];
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    let mut report = String::new();
    for pid in pids {
        let read = |what: &str| std::fs::read_to_string(format!("/proc/{pid}/{what}"));
        report += &format!(
            "== {pid} {}",
            read("cmdline").unwrap_or_default().replace('\0', " ")
        );
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
        {
            let task = task.map(|t| t.file_name().to_string_lossy().into_owned());
            let task = task.unwrap_or_default();
            let read = |what: &str| read(&format!("task/{task}/{what}")).unwrap_or_default();
            report += &format!(
                "\n-- thread {task} {} waits in {}\n",
                read("comm").trim(),
                read("wchan")
            );
            report += &read("stack");
        }
        let gdb = Command::new("timeout")
            .args([
                "60",
                "gdb",
                "-p",
                &pid.to_string(),
                "-batch",
                "-ex",
                "thread apply all bt 40",
            ])
            .output();
        if let Ok(out) = gdb {
            report += &String::from_utf8_lossy(&out.stdout);
        }
        report.push('\n');
    }
    report
}

/// The guard fires on a command that outlives it, kills it, and says where it waited.
#[test]
fn a_command_past_its_guard_is_killed_and_says_where_it_waits() {
    let started = Instant::now();
    let caught = std::panic::catch_unwind(|| {
        output_within(Command::new("sleep").arg("30"), Duration::from_millis(300));
    });
    let message = caught.expect_err("no panic past the guard");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("still ran after 300ms"), "{message}");
    assert!(message.contains("sleep 30"), "{message}");
    assert!(message.contains("waits in"), "{message}");
    // Killed, not waited for: well before the sleep's own end.
    assert!(
        started.elapsed() < Duration::from_secs(29),
        "{:?}",
        started.elapsed()
    );
    // And a command that ends in time gives its output as `Command::output` would.
    let out = output_within(
        Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
        Duration::from_secs(60),
    );
    assert_eq!(
        (out.status.code(), &out.stdout[..], &out.stderr[..]),
        (Some(3), &b"out\n"[..], &b"err\n"[..])
    );
    // With no stdin, as `Command::output` gives: never the test's own.
    let out = output_within(
        Command::new("readlink").arg("/proc/self/fd/0"),
        Duration::from_secs(60),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/dev/null");
}
