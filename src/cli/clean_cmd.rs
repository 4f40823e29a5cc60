//! `procjournal clean`: retire the output of finished processes (see `lifecycle::retention`),
//! through the daemon when one runs, else on the root directly (taking its writer lock).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::daemon_cmd::Target;
use crate::lifecycle::retention::{self, CleanReport, RetentionRequest};
use crate::protocol::Request;

#[derive(Debug, Args)]
pub(crate) struct CleanArgs {
    #[command(flatten)]
    target: Target,
    /// Retire output of processes that ended at least this long ago, e.g. 7d, 12h, 30m.
    /// Default: the daemon's retention age, else 7d.
    #[arg(long, value_parser = super::run_cmd::parse_duration)]
    older_than: Option<Duration>,
    /// Say what would be retired; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Exit status: 0 when every retirement asked for completed, 1 when some failed (the report
/// says which and why; the next pass tries again).
pub(crate) fn clean(args: CleanArgs) -> anyhow::Result<ExitCode> {
    let report: CleanReport = match args.target.try_connect()? {
        Some(mut client) => {
            let value = client.call(&Request::Clean {
                older_than_ms: args
                    .older_than
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                dry_run: args.dry_run,
            })?;
            serde_json::from_value(value).context("the daemon's clean report")?
        }
        None => offline(&args)?,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_report(&mut out, &report)?;
    }
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The pass on the root itself: nothing is live without a daemon, so nothing is held; a process
/// a crashed supervisor left live is not terminal and is kept.
fn offline(args: &CleanArgs) -> anyhow::Result<CleanReport> {
    let root = args.target.root()?;
    super::existing(&root)?;
    eprintln!("procjournal: no daemon is running; cleaning the root directly");
    let (mut lifecycle, _, _) =
        crate::lifecycle::Lifecycle::open(&root, crate::journal::JournalOptions::default())
            .with_context(|| format!("cannot open {} for writing", root.display()))?;
    let request = RetentionRequest {
        older_than: args.older_than.unwrap_or(Duration::from_millis(
            crate::limits::RETENTION_AGE_DEFAULT_MS,
        )),
        dry_run: args.dry_run,
        by: "clean",
    };
    let now = crate::supervisor::now_unix_ms();
    let spool_root = root.join("spool");
    let held = std::collections::HashSet::new();
    let plan = retention::plan(lifecycle.store(), now, request.older_than, &held);
    let leftovers = retention::leftovers(lifecycle.store(), &spool_root)
        .with_context(|| format!("cannot list {}", spool_root.display()))?;
    Ok(retention::execute(
        &request,
        plan,
        leftovers,
        now,
        &spool_root,
        &mut lifecycle,
        &mut crate::journal::compact::NoCrash,
    ))
}

fn print_report(out: &mut impl Write, r: &CleanReport) -> std::io::Result<()> {
    let verb = if r.dry_run { "would retire" } else { "retired" };
    for done in &r.retired {
        writeln!(
            out,
            "{verb} {}: {} files, {} bytes",
            done.handle, done.removed.files, done.removed.bytes
        )?;
    }
    for done in &r.finished {
        writeln!(
            out,
            "finished an interrupted retirement of {}: {} files, {} bytes",
            done.handle, done.removed.files, done.removed.bytes
        )?;
    }
    for kept in &r.kept {
        let why = match kept.reason {
            retention::KeepReason::Unverified => "its exit is not verified",
            retention::KeepReason::Held => "its tree is still owned",
            retention::KeepReason::NotTerminal => "it is not finished",
            retention::KeepReason::TooRecent => "it ended too recently",
        };
        writeln!(out, "kept {}: {why}", kept.handle)?;
    }
    for failed in &r.failed {
        writeln!(
            out,
            "FAILED {}: {}",
            failed.handle,
            crate::render::escape_field(&failed.error, true)
        )?;
    }
    let bytes: u64 = r.retired.iter().map(|d| d.removed.bytes).sum();
    writeln!(
        out,
        "{verb} {} ({} bytes); {} kept as unverified or owned, {} too recent, {} not finished, {} retired earlier",
        r.retired.len(),
        bytes,
        r.kept.len(),
        r.too_recent,
        r.not_terminal,
        r.already_retired
    )
}
