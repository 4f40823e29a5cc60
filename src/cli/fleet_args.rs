//! The fleet's options: the connection to a NATS server that `serve --fleet` ships to and
//! `procjournal fleet` reads from, and `serve`'s own (`--fleet`, `--node`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::fleet::{Fleet, FleetConfig, NodeName};

/// The connection to a fleet's server, shared by `serve` and `fleet`.
#[derive(Debug, Clone, Args)]
pub(crate) struct Connection {
    /// A NATS `.creds` file (a user JWT and its nkey seed), for servers in operator mode.
    #[arg(long, value_name = "FILE")]
    fleet_creds: Option<PathBuf>,
    /// A CA certificate (PEM) to trust for TLS to the server.
    #[arg(long, value_name = "FILE")]
    fleet_ca: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that require one.
    #[arg(long, value_name = "FILE", requires = "fleet_key")]
    fleet_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", requires = "fleet_cert")]
    fleet_key: Option<PathBuf>,
}

impl Connection {
    /// A reader's configuration: it reads every node, so its own name is a placeholder.
    pub(crate) fn reader(&self, url: &str) -> FleetConfig {
        self.config(url, NodeName::reader())
    }

    pub(crate) fn config(&self, url: &str, node: NodeName) -> FleetConfig {
        let mut config = FleetConfig::new(url, node);
        config.creds = self.fleet_creds.clone();
        config.tls_ca = self.fleet_ca.clone();
        config.tls_client = self.fleet_cert.clone().zip(self.fleet_key.clone());
        config
    }
}

/// `serve`'s fleet options.
#[derive(Debug, Args)]
pub(crate) struct ServeFleet {
    /// Ship every durable journal record, exactly once and in order, to this NATS JetStream
    /// server: nats://[user:password@]host:port (tls:// for TLS). The daemon works the same
    /// while the server is away and catches up after (docs/fleet.md).
    #[arg(long, value_name = "URL")]
    fleet: Option<String>,
    /// This node's name in the fleet: 1 to 64 of A-Z a-z 0-9 _ - (default: the host name,
    /// other characters as '-').
    #[arg(long, value_name = "NAME", requires = "fleet", value_parser = parse_node)]
    node: Option<NodeName>,
    /// What the node's output stream on the server keeps (default 1G), when the node creates
    /// it; older output goes first, and a reader finds it as a gap.
    #[arg(long, value_name = "SIZE", requires = "fleet", value_parser = parse_output_bytes)]
    fleet_output_bytes: Option<u64>,
    #[command(flatten)]
    connection: Connection,
}

fn parse_output_bytes(text: &str) -> Result<u64, String> {
    super::size::parse_size(text).map_err(|e| e.to_string())
}

fn parse_node(text: &str) -> Result<NodeName, String> {
    NodeName::new(text).map_err(|e| e.to_string())
}

/// The host name as a node name: characters a name cannot hold become '-'.
fn host_node() -> anyhow::Result<NodeName> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the host name")?;
    let name: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(crate::fleet::wire::NODE_NAME_BYTES_MAX)
        .collect();
    NodeName::new(&name).context("the host name makes no node name: give --node")
}

impl ServeFleet {
    /// The shipper's configuration, when `--fleet` was given.
    pub(crate) fn config(&self) -> anyhow::Result<Option<FleetConfig>> {
        let Some(url) = &self.fleet else {
            return Ok(None);
        };
        let node = match &self.node {
            Some(node) => node.clone(),
            None => host_node()?,
        };
        let mut config = self.connection.config(url, node);
        if let Some(bytes) = self.fleet_output_bytes {
            config.output_bytes = bytes;
        }
        Ok(Some(config))
    }
}

/// Starts shipping `root`'s journal when `serve` was given `--fleet`, and says so.
pub(crate) fn start(config: Option<FleetConfig>, server: &crate::server::Server) {
    let Some(config) = config else {
        return;
    };
    note!(
        "procjournal: shipping the journal to {} as node {}",
        config.redacted_url(),
        config.node
    );
    Fleet::start_supervised(config, server.supervisor().clone());
}
