//! `procjournal clean`: retire the output of finished processes (see `lifecycle::retention`),
//! through the daemon when one runs, else on the root directly (taking its writer lock).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::args::parse_duration;
use super::target::Target;
use crate::lifecycle::retention::{self, CleanReport};
use crate::protocol::Request;
use crate::supervisor::{Services, Supervisor, SupervisorConfig};

#[derive(Debug, Args)]
pub(crate) struct CleanArgs {
    #[command(flatten)]
    target: Target,
    /// Retire output of processes that ended at least this long ago, e.g. 7d, 12h, 30m.
    /// Default: the daemon's retention age, else 7d.
    #[arg(long, value_parser = parse_duration)]
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
        super::json::to_writer(&mut out, &report)?;
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

/// The pass on the root itself, through a supervisor of its own (no daemon runs, so nothing is
/// live here): opening it restores the root as any writer does, which also assesses every tree
/// whose release an earlier supervisor did not record (a `run` that ended before its guardian's
/// receipt was read), so that a verified exit counts as one. Its own retention is off: the pass
/// is this one, with the age asked for.
fn offline(args: &CleanArgs) -> anyhow::Result<CleanReport> {
    let root = args.target.root()?;
    super::existing(&root)?;
    note!("procjournal: no daemon is running; cleaning the root directly");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let mut config = SupervisorConfig::new(&root);
        config.retention = None;
        let (sup, _) = Supervisor::open(config, Services::noop())
            .await
            .with_context(|| format!("cannot open {} for writing", root.display()))?;
        let older_than = args.older_than.unwrap_or(Duration::from_millis(
            crate::limits::RETENTION_AGE_DEFAULT_MS,
        ));
        let report = sup.clean(older_than, args.dry_run).await;
        sup.shutdown(Duration::ZERO).await;
        Ok(report?)
    })
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
            crate::spool::render::escape_field(&failed.error, true)
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
