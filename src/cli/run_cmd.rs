//! `procjournal run -- CMD`: supervise one command in the foreground.
//!
//! Output streams to this terminal as it arrives (stdout to stdout, stderr to stderr, byte for
//! byte); Ctrl-C is forwarded as an interrupt (a second one stops the process); the exit status
//! mirrors the child's (a signal N becomes 128+N). Everything stays in the journal and the spool
//! for `journal dump`, `journal manifests` and `spool cat`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::lifecycle::event::ExitStatus;
use crate::spool::format::Stream;
use crate::supervisor::{Command, Services, StartError, Supervisor, SupervisorConfig};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Wall-clock limit, e.g. 30s, 500ms, 5m, 2h (a bare number is seconds).
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// A label k=v (repeatable).
    #[arg(long = "label", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s, 500ms, 5m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

pub(crate) fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{text:?} is not a label k=v")),
    }
}

/// Bytes copied to the terminal per read.
const PAGE_BYTES: usize = 1024 * 1024;
/// Grace between SIGTERM and SIGKILL after a second Ctrl-C.
const STOP_GRACE: Duration = Duration::from_secs(2);

pub(crate) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(supervise(args))
}

async fn supervise(args: RunArgs) -> anyhow::Result<ExitCode> {
    let root = super::root_or_default(args.root)?;
    let (supervisor, report) = Supervisor::open(SupervisorConfig::new(&root), Services::noop())
        .await
        .with_context(|| format!("cannot open the runtime root {}", root.display()))?;
    if !report.reconciled.is_empty() {
        eprintln!(
            "procjournal: {} process(es) of an earlier supervisor are now lost_on_restore",
            report.reconciled.len()
        );
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let mut command = Command::new(&args.command[0])
        .args(&args.command[1..])
        .cwd(cwd);
    for (k, v) in args.labels {
        command = command.label(k, v);
    }
    if let Some(limit) = args.timeout {
        command = command.timeout(limit);
    }
    let prepared = supervisor.prepare(command)?;
    let handle = match supervisor.start(prepared).await {
        Ok(handle) => handle,
        Err(StartError::Spawn { handle, message }) => {
            eprintln!("procjournal: {message} (recorded as {handle}, failed)");
            return Ok(ExitCode::from(127));
        }
        Err(e) => return Err(e.into()),
    };
    let mut cursor = 0u64;
    let mut interrupts = 0u32;
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    loop {
        let read = supervisor.output_raw(&handle, cursor, PAGE_BYTES).await?;
        let start = read.next_cursor - read.bytes.len() as u64;
        let mut broken_pipe = false;
        for span in &read.spans {
            let from = (span.cursor - start) as usize;
            let bytes = &read.bytes[from..from + span.len as usize];
            let written = match span.stream {
                Stream::Stdout => stdout.write_all(bytes).and_then(|()| stdout.flush()),
                Stream::Stderr => stderr.write_all(bytes).and_then(|()| stderr.flush()),
            };
            broken_pipe |= written.is_err();
        }
        cursor = read.next_cursor;
        if broken_pipe {
            // Nobody reads any more: stop the command rather than run it unread.
            let _ = supervisor.stop(&handle, STOP_GRACE).await;
            break;
        }
        if read.bytes.is_empty() {
            let terminal = supervisor
                .manifest(&handle)
                .is_some_and(|m| m.state.is_terminal());
            if terminal && cursor >= read.total_bytes {
                break;
            }
            tokio::select! {
                () = supervisor.output_changed(&handle, cursor) => {}
                _ = tokio::signal::ctrl_c() => {
                    interrupts += 1;
                    if interrupts == 1 {
                        let _ = supervisor.interrupt(&handle).await;
                    } else {
                        let (supervisor, handle) = (supervisor.clone(), handle);
                        tokio::spawn(async move { supervisor.stop(&handle, STOP_GRACE).await });
                    }
                }
            }
        }
    }
    let summary = supervisor.wait(&handle, None).await?;
    // Joins the publication of the terminal event and the completion notice.
    supervisor.shutdown(STOP_GRACE).await;
    if let Some(e) = &summary.persist_error {
        eprintln!("procjournal: the terminal state was not persisted: {e}");
    }
    if summary.state == crate::lifecycle::State::TimedOut {
        eprintln!("procjournal: {handle} timed out");
    }
    Ok(match summary.exit {
        ExitStatus::Code(code) => ExitCode::from((code & 0xff) as u8),
        ExitStatus::Signal(signal) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        ExitStatus::Unknown => ExitCode::from(1),
    })
}
