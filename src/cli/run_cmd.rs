//! `procjournal run -- CMD`: supervise one command in the foreground.
//!
//! It drives the same [`Dispatcher`] (request validation, start, output, stop, wait) and the same
//! supervisor actor as the daemon, so the foreground and daemon paths cannot drift apart.
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

use crate::protocol::{Dispatcher, ErrorCode, Request, StartArgs, request_from_args};
use crate::spool::format::Stream;
use crate::supervisor::{Services, Supervisor, SupervisorConfig};

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
    /// Output kept in the spool, e.g. 64MiB (the default), 512M, 1G; older output is deleted
    /// in whole segments. At least 8MiB, at most 4GiB.
    #[arg(long, value_name = "SIZE", value_parser = super::size::parse_retention)]
    retention: Option<u64>,
    #[command(flatten)]
    tree: super::TreeArgs,
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
const STOP_GRACE_MS: u64 = crate::limits::GRACE_MS_DEFAULT;
/// How long one output request waits for new bytes; Ctrl-C is seen at once regardless.
const POLL_WAIT_MS: u64 = 60_000;

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
    let mut config = SupervisorConfig::new(&root);
    config.launcher = args.tree.launcher(&root, true)?;
    let (supervisor, report) = Supervisor::open(config, Services::noop())
        .await
        .with_context(|| format!("cannot open the runtime root {}", root.display()))?;
    if !report.reconciled.is_empty() {
        eprintln!(
            "procjournal: {} process(es) of an earlier supervisor are now lost_on_restore",
            report.reconciled.len()
        );
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let uid = nix::unistd::geteuid().as_raw();
    // The daemon's path: the same request validation, the same dispatcher, the same actor.
    let dispatcher = Dispatcher::new(
        supervisor.clone(),
        cwd.clone(),
        format!("uid {uid} via run"),
    );
    let start = StartArgs {
        command: args.command,
        cwd: Some(cwd.to_string_lossy().into_owned()),
        env: Default::default(),
        labels: args.labels.into_iter().collect(),
        timeout_ms: args
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)),
        retention_bytes: args.retention,
    };
    let request = serde_json::to_value(&start)
        .map_err(|e| anyhow::anyhow!("cannot encode the command: {e}"))
        .and_then(|args| request_from_args("start", args).map_err(|e| anyhow::anyhow!("{}", e)))?;
    let Request::Start(start) = request else {
        anyhow::bail!("the start request did not decode as a start");
    };
    let handle = match dispatcher.start(start).await {
        Ok(info) => info.handle,
        Err(e) if e.code == ErrorCode::SpawnFailed => {
            eprintln!("procjournal: {}", e.message);
            return Ok(ExitCode::from(127));
        }
        Err(e) => anyhow::bail!("{}", e.message),
    };
    let mut cursor = 0u64;
    let mut interrupts = 0u32;
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    loop {
        let read = tokio::select! {
            read = dispatcher.output_raw(handle, cursor, PAGE_BYTES, POLL_WAIT_MS) => {
                read.map_err(|e| anyhow::anyhow!("{}", e.message))?
            }
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts == 1 {
                    let _ = dispatcher.interrupt(handle).await;
                } else {
                    let dispatcher = dispatcher.clone();
                    tokio::spawn(async move { dispatcher.stop(handle, STOP_GRACE_MS).await });
                }
                continue;
            }
        };
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
            let _ = dispatcher.stop(handle, STOP_GRACE_MS).await;
            break;
        }
        if read.bytes.is_empty() && cursor >= read.total_bytes {
            let terminal = supervisor
                .manifest(&handle)
                .is_some_and(|m| m.state.is_terminal());
            if terminal {
                break;
            }
        }
    }
    let result = dispatcher
        .wait(handle, None)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    // Joins the publication of the terminal event and the completion notice.
    supervisor
        .shutdown(Duration::from_millis(STOP_GRACE_MS))
        .await;
    if let Some(e) = &result.persist_error {
        eprintln!("procjournal: the terminal state was not persisted: {e}");
    }
    if result.state == crate::lifecycle::State::TimedOut {
        eprintln!("procjournal: {handle} timed out");
    }
    Ok(match (result.exit_code, result.signal) {
        (Some(code), _) => ExitCode::from((code & 0xff) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        (None, None) => ExitCode::from(1),
    })
}
