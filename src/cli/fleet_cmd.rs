//! `procjournal fleet ...`: what the fleet's server holds of every node, read from NATS alone.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::deferred::Deferred;
use super::fleet_args::Connection;
use crate::fleet::{NodeName, NodeStatus};

#[derive(Debug, Subcommand)]
pub(crate) enum FleetCommand {
    /// Every node the server holds a stream of: what it shipped, how far behind its journal
    /// it is, and whether it is live (a heartbeat within three of its intervals) or unknown.
    Status(Deferred<StatusArgs>),
    /// Every process of every node, from the fleet state: what each node last recorded; a
    /// process its node recorded as running reads `unknown` while the node is not live.
    Ps(Deferred<PsArgs>),
    /// A process's output, from the node's output stream: NODE/HANDLE, from --cursor; gaps (what
    /// the node did not keep) are said on stderr with their reason; -f follows until the process
    /// ended and all its output was read.
    Logs(Deferred<LogsArgs>),
    /// The records the nodes shipped, in order (one node with --node), as JSON lines; --follow
    /// goes on with new ones.
    Events(Deferred<EventsArgs>),
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The server: nats://[user:password@]host:port.
    #[arg(long, value_name = "URL")]
    fleet: String,
    #[command(flatten)]
    connection: Connection,
    /// NODE/HANDLE, e.g. build-01/p-01a2...
    #[arg(value_name = "NODE/HANDLE")]
    process: String,
    /// Start at this combined cursor.
    #[arg(long, default_value_t = 0)]
    cursor: u64,
    /// Follow until the process ended and its whole output was read.
    #[arg(short = 'f', long)]
    follow: bool,
    /// The bytes exactly as the process wrote them, instead of safe text.
    #[arg(long)]
    raw: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// The server: nats://[user:password@]host:port.
    #[arg(long, value_name = "URL")]
    fleet: String,
    #[command(flatten)]
    connection: Connection,
    /// This node's records only (required with --follow).
    #[arg(long, value_name = "NAME", required_if_eq("follow", "true"))]
    node: Option<String>,
    /// Go on with records shipped after the read began.
    #[arg(long)]
    follow: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PsArgs {
    /// The server: nats://[user:password@]host:port.
    #[arg(long, value_name = "URL")]
    fleet: String,
    #[command(flatten)]
    connection: Connection,
    /// This node's processes only.
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// JSON, one object per process: `node`, `state`, `recorded_state`, `seq`, `process`.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The server: nats://[user:password@]host:port.
    #[arg(long, value_name = "URL")]
    fleet: String,
    #[command(flatten)]
    connection: Connection,
    /// JSON, one object per node.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(command: FleetCommand) -> anyhow::Result<ExitCode> {
    match command {
        FleetCommand::Status(args) => status(args.into_inner()),
        FleetCommand::Ps(args) => ps(args.into_inner()),
        FleetCommand::Logs(args) => logs(args.into_inner()),
        FleetCommand::Events(args) => events(args.into_inner()),
    }
}

/// A current-thread runtime for one read of the server.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn ps(args: PsArgs) -> anyhow::Result<ExitCode> {
    let config = args.connection.reader(&args.fleet);
    let processes =
        runtime()?.block_on(crate::fleet::fleet_processes(&config, args.node.as_deref()))?;
    if args.json {
        for p in &processes {
            outln!("{}", super::json::line(p)?)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<16} {:>5} {:<34} {:<16} {:>5}  COMMAND",
        "NODE",
        "#",
        "HANDLE",
        "STATE",
        "EXIT"
    )?;
    for p in &processes {
        let exit = match (
            p.process["exit_code"].as_i64(),
            p.process["signal"].as_i64(),
        ) {
            (Some(code), _) => code.to_string(),
            (None, Some(signal)) => format!("SIG{signal}"),
            _ => "-".to_owned(),
        };
        let command: Vec<&str> = p.process["command"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        // What the server holds is any writer's: escaped for the terminal.
        let escape = |text: &str| crate::spool::render::escape_field(text, true).into_owned();
        outln!(
            "{:<16} {:>5} {:<34} {:<16} {:>5}  {}",
            escape(&p.node),
            p.process["number"].as_u64().unwrap_or(0),
            escape(p.process["handle"].as_str().unwrap_or("-")),
            escape(&p.state),
            exit,
            escape(&command.join(" "))
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let config = args.connection.reader(&args.fleet);
    let nodes = runtime()?.block_on(crate::fleet::fleet_status(&config))?;
    if args.json {
        for node in &nodes {
            outln!("{}", super::json::line(node)?)?;
        }
    } else {
        print_table(&nodes)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(nodes: &[NodeStatus]) -> std::io::Result<()> {
    outln!(
        "{:<20} {:<8} {:>10} {:>10} {:>8} {:>10}",
        "NODE",
        "STATE",
        "SHIPPED",
        "HEAD",
        "LAG",
        "HEARTBEAT"
    )?;
    let or_dash = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    for n in nodes {
        let age = n.heartbeat_age_ms.map_or_else(
            || "never".to_owned(),
            |ms| format!("{:.1}s ago", ms as f64 / 1000.0),
        );
        outln!(
            "{:<20} {:<8} {:>10} {:>10} {:>8} {:>10}",
            n.node,
            n.state,
            n.shipped_seq,
            or_dash(n.head_seq),
            or_dash(n.lag),
            age
        )?;
    }
    Ok(())
}

fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let config = args.connection.reader(&args.fleet);
    let (node, handle) = args
        .process
        .split_once('/')
        .context("a process is NODE/HANDLE")?;
    let node = NodeName::new(node)?;
    let handle: crate::lifecycle::Handle = handle
        .parse()
        .map_err(|e| anyhow::anyhow!("{handle}: {e}"))?;
    let runtime = runtime()?;
    // One connection for the whole read, the follow's polls included.
    let reader = runtime.block_on(crate::fleet::FleetReader::connect(&config))?;
    // As `logs` on the node: a cursor beyond what the process wrote is an error.
    let recorded = runtime.block_on(reader.process(&node, &handle))?;
    let total = recorded
        .as_ref()
        .and_then(|e| e.process["total_bytes"].as_u64());
    if let Some(total) = total.filter(|&t| args.cursor > t) {
        anyhow::bail!(
            "cursor {} is beyond the end of the output ({total} bytes)",
            args.cursor
        );
    }
    let at = std::rc::Rc::new(std::cell::Cell::new(args.cursor));
    let failed = std::rc::Rc::new(std::cell::Cell::new(None::<std::io::Error>));
    let print = |part: &crate::fleet::OutputPart| {
        at.set(part.end);
        let written = print_part(part, args.raw);
        let ok = written.is_ok();
        failed.set(written.err());
        ok
    };
    runtime.block_on(async {
        let read = reader.output(&node, &handle, args.cursor, args.follow, print);
        if !args.follow {
            return read.await.map(|_| ());
        }
        let ended = async {
            loop {
                tokio::time::sleep(crate::fleet::read::FOLLOW_POLL).await;
                match reader.process(&node, &handle).await {
                    Ok(Some(e)) if ended_and_read(&e, at.get()) => return,
                    _ => {}
                }
            }
        };
        tokio::select! {
            read = read => read.map(|_| ()),
            () = ended => Ok(()),
        }
    })?;
    if let Some(e) = failed.take() {
        return Err(e.into());
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the entry's process ended and its whole recorded output was read.
fn ended_and_read(entry: &crate::fleet::ProcessEntry, at: u64) -> bool {
    let state = entry.process["state"].as_str().unwrap_or("running");
    let total = entry.process["total_bytes"].as_u64().unwrap_or(u64::MAX);
    !matches!(state, "starting" | "running") && at >= total
}

fn print_part(part: &crate::fleet::OutputPart, raw: bool) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(reason) = &part.gap {
        note!(
            "-- {} bytes lost at cursor {}: {} --",
            part.end - part.cursor,
            part.cursor,
            crate::spool::render::escape_field(reason, false)
        );
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    if raw {
        out.write_all(&part.bytes)?;
    } else {
        out.write_all(
            crate::spool::render::safe_text(&part.bytes, true)
                .text
                .as_bytes(),
        )?;
    }
    out.flush()
}

fn events(args: EventsArgs) -> anyhow::Result<ExitCode> {
    let config = args.connection.reader(&args.fleet);
    let runtime = runtime()?;
    let nodes: Vec<NodeName> = match &args.node {
        Some(node) => vec![NodeName::new(node)?],
        None => runtime
            .block_on(crate::fleet::fleet_status(&config))?
            .into_iter()
            .filter_map(|n| NodeName::new(&n.node).ok())
            .collect(),
    };
    let failed = std::cell::Cell::new(None::<anyhow::Error>);
    for node in nodes {
        runtime.block_on(crate::fleet::read_events(
            &config,
            &node,
            0,
            args.follow,
            |event| {
                let line = super::json::line(event).map_err(anyhow::Error::from);
                match line.and_then(|l| outln!("{l}").map_err(anyhow::Error::from)) {
                    Ok(()) => true,
                    Err(e) => {
                        failed.set(Some(e));
                        false
                    }
                }
            },
        ))?;
        if let Some(e) = failed.take() {
            return Err(e);
        }
    }
    Ok(ExitCode::SUCCESS)
}
