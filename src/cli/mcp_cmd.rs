//! `procjournal mcp [--root DIR]`: a Model Context Protocol server on stdin/stdout.
//!
//! The server holds the root's supervisor (and so its lock) for its whole life. It ends when the
//! client closes stdin (or on SIGTERM/SIGINT): it then stops every process it still runs (SIGTERM,
//! [`SHUTDOWN_GRACE`], SIGKILL) so that they end `terminated` or `killed` rather than orphaned,
//! and exits. Diagnostics go to stderr; stdout carries only protocol messages.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rmcp::ServiceExt;

use crate::mcp::McpServer;
use crate::protocol::Dispatcher;
use crate::supervisor::{Services, Supervisor, SupervisorConfig};

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Runtime root (default: $PROCJOURNAL_ROOT, $XDG_STATE_HOME/procjournal, ~/.local/state/procjournal).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Output each process keeps unless its start asks for other (default 64MiB), e.g. 256M,
    /// 1G; older output is deleted in whole segments. At least 8MiB, at most 4GiB.
    #[arg(long, value_name = "SIZE", value_parser = super::size::parse_retention)]
    retention: Option<u64>,
    #[command(flatten)]
    tree: super::TreeArgs,
    #[command(flatten)]
    admission: super::AdmissionArgs,
}

/// Grace between SIGTERM and SIGKILL for the processes still running when the client leaves.
/// Short, because MCP clients give a server about two seconds after closing stdin before they
/// signal it (the Python SDK does).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// How long the runtime may take to wind down its blocking tasks after the shutdown.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

pub(crate) fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(serve(args));
    // A blocking read of stdin (when stdin is not a pipe) cannot be cancelled; do not wait for it.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result
}

async fn serve(args: McpArgs) -> anyhow::Result<ExitCode> {
    let root = super::root_or_default(args.root)?;
    let mut config = SupervisorConfig::new(&root);
    if let Some(bytes) = args.retention {
        config.spool.retention_bytes = bytes;
    }
    config.launcher = args.tree.launcher(&root, true)?;
    args.admission.apply(&mut config.admission);
    let (supervisor, report) = Supervisor::open(config, Services::noop())
        .await
        .with_context(|| {
            format!(
                "cannot open the runtime root {} for writing (one writer at a time holds {})",
                root.display(),
                root.join("LOCK").display()
            )
        })?;
    eprintln!(
        "procjournal mcp: serving {} on stdio ({} earlier process(es) now lost_on_restore, {} \
         finished ones reopened)",
        supervisor.root().display(),
        report.reconciled.len(),
        report.reopened.len()
    );
    for error in &report.errors {
        eprintln!("procjournal mcp: restore: {error}");
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let owner = format!("uid:{} via mcp", nix::unistd::getuid());
    // The MCP server is the agent harness's own child: its environment is the client's.
    let dispatcher = Dispatcher::new(supervisor.clone(), cwd, owner).inheriting_env();
    let server = McpServer::new(dispatcher)?;

    let outcome = match server.serve(rmcp::transport::stdio_pipes()).await {
        Ok(running) => {
            let ct = running.cancellation_token();
            let stop_on_signal = tokio::spawn(async move {
                let reason = terminate_signal().await;
                eprintln!("procjournal mcp: {reason}, shutting down");
                ct.cancel();
            });
            let quit = running.waiting().await;
            stop_on_signal.abort();
            match quit {
                Ok(reason) => {
                    eprintln!("procjournal mcp: session ended ({reason:?})");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(anyhow::anyhow!("the MCP session task failed: {e}")),
            }
        }
        // The client went away or spoke something else before the handshake completed.
        Err(e) => Err(anyhow::anyhow!("MCP initialization failed: {e}")),
    };
    let report = supervisor.shutdown(SHUTDOWN_GRACE).await;
    if !report.terminated.is_empty() || !report.killed.is_empty() {
        eprintln!(
            "procjournal mcp: stopped {} process(es) ({} killed)",
            report.terminated.len() + report.killed.len(),
            report.killed.len()
        );
    }
    for (handle, reason) in &report.teardown_failed {
        eprintln!("procjournal mcp: teardown of {handle} failed: {reason}");
    }
    outcome
}

/// Resolves on SIGTERM or SIGINT, naming it; never resolves if neither can be listened for.
async fn terminate_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (term, int) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        },
        (Ok(mut term), Err(_)) => {
            term.recv().await;
            "SIGTERM"
        }
        (Err(_), Ok(mut int)) => {
            int.recv().await;
            "SIGINT"
        }
        (Err(_), Err(_)) => std::future::pending().await,
    }
}
