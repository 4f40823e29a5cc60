//! `procjournal fleet ...`: what the fleet's server holds of every node, read from NATS alone.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::fleet_args::Connection;
use crate::fleet::{NodeName, NodeStatus};

#[derive(Debug, Subcommand)]
pub(crate) enum FleetCommand {
    /// Every node the server holds a stream of: what it shipped, how far behind its journal
    /// it is, and whether it is live (a heartbeat within three of its intervals) or unknown.
    Status(StatusArgs),
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
        FleetCommand::Status(args) => status(args),
    }
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    // The node name is not used to read; any valid one does.
    let node = NodeName::new("reader").context("a constant node name")?;
    let config = args.connection.config(&args.fleet, node);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let nodes = runtime.block_on(crate::fleet::fleet_status(&config))?;
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
