//! The fleet (feature `fleet`): each node's journal shipped to NATS JetStream, exactly once and
//! in order, and what the fleet's server says of every node (docs/fleet.md specifies every
//! subject, header and body).
//!
//! Invariants:
//! - Node-local facts stay observations: nothing here is ever consulted to decide anything on
//!   the node, and the node works the same while the server is away.
//! - Only durable records are shipped, each once, in seq order, and every seq is accounted for:
//!   a record compacted away before it was read is shipped as a gap with its reason.
//! - Where shipping resumes is decided by the server's stream alone (its last message); the
//!   node keeps no cursor of its own.

#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
pub mod output;
pub mod read;
mod ship;
mod source;
pub mod state;
pub mod status;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use read::{OutputPart, ShippedEvent, read_events, read_output};
pub use state::ProcessEntry;
pub use status::StatusError;
pub use status::{
    FleetProcess, FleetReader, NodeStatus, fleet_process, fleet_processes, fleet_status,
};
pub use wire::{NodeName, WireError};

use crate::journal::Journal;
use crate::supervisor::Supervisor;
use crate::sync::Lock;

/// Publishes awaiting their acks at once, by default: the research's measurements put a
/// pipelined, chained publish at about 79 k messages a second with a window of 1 000, against
/// 5.7 k one at a time; async-nats refuses more than 5 000 unacknowledged.
pub const WINDOW_DEFAULT: usize = 256;
/// Output bytes a node's output stream keeps, by default (when the node creates it).
pub const OUTPUT_BYTES_DEFAULT: u64 = 1 << 30;
/// How often a node says it is alive, by default.
pub const HEARTBEAT_DEFAULT: Duration = Duration::from_secs(1);

/// Where and as what a daemon ships its journal.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The server, `nats://[user:password@]host:port` (or `tls://`); credentials in the URL are
    /// used as async-nats takes them.
    pub url: String,
    pub node: NodeName,
    /// A `.creds` file (a user JWT and its nkey seed: NATS's decentralised authentication).
    pub creds: Option<PathBuf>,
    /// A CA to trust for TLS, and a client certificate and key.
    pub tls_ca: Option<PathBuf>,
    pub tls_client: Option<(PathBuf, PathBuf)>,
    pub window: usize,
    pub heartbeat: Duration,
    /// What the node's output stream keeps, when the node creates it (an operator's stream
    /// keeps its own limits).
    pub output_bytes: u64,
    /// Test support: the first pass ships from this seq believing the stream empty, as a
    /// shipper that lost track would, which the stream must refuse record by record.
    #[doc(hidden)]
    pub replay_from: Option<u64>,
}

impl FleetConfig {
    pub fn new(url: impl Into<String>, node: NodeName) -> Self {
        FleetConfig {
            url: url.into(),
            node,
            creds: None,
            tls_ca: None,
            tls_client: None,
            window: WINDOW_DEFAULT,
            heartbeat: HEARTBEAT_DEFAULT,
            output_bytes: OUTPUT_BYTES_DEFAULT,
            replay_from: None,
        }
    }

    /// The client's options: TLS and credentials as configured (a reader's fail fast; the
    /// shipper adds its retries).
    pub(crate) async fn options(&self) -> Result<async_nats::ConnectOptions, String> {
        let mut options =
            async_nats::ConnectOptions::new().connection_timeout(std::time::Duration::from_secs(2));
        if let Some(ca) = &self.tls_ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((cert, key)) = &self.tls_client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if let Some(creds) = &self.creds {
            options = options
                .credentials_file(creds)
                .await
                .map_err(|e| format!("credentials file {}: {e}", creds.display()))?;
        }
        Ok(options)
    }

    /// The URL without its password, for logs.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }
}

/// `scheme://user:secret@host` → `scheme://user:***@host`; a token alone is starred too.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((auth, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = auth.split_once(':').map_or("", |(u, _)| u);
    if user.is_empty() {
        format!("{scheme}://***@{host}")
    } else {
        format!("{scheme}://{user}:***@{host}")
    }
}

/// What the shipper of this daemon knows of its progress.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetStatus {
    pub connected: bool,
    /// The highest journal seq the stream is known to hold.
    pub shipped_seq: u64,
    /// The stream's seq of that message.
    pub stream_seq: u64,
    /// Times the stream did not end where the shipper believed (a lost ack, a restart, another
    /// writer) and the shipper asked it again: each a publish refused, never one stored twice.
    pub resyncs: u64,
    pub last_error: Option<String>,
}

/// A node's heartbeat, the body of its message on `pj.hb.<node>` (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// 1.
    pub version: u32,
    pub node: String,
    /// The journal's ID, 32 lowercase hex digits.
    pub journal: String,
    /// The journal's last seq, its durable seq, and what the stream holds.
    pub head_seq: u64,
    pub durable_seq: u64,
    pub shipped_seq: u64,
    /// When it was sent, and how often the node sends one.
    pub unix_ms: u64,
    pub interval_ms: u64,
}

/// The shipper of a running daemon.
#[derive(Debug, Clone)]
pub struct Fleet {
    status: Arc<Lock<FleetStatus>>,
}

impl Fleet {
    /// Starts shipping `journal` (of `root`) on the current runtime: its records only.
    pub fn start(config: FleetConfig, root: PathBuf, journal: Arc<Journal>) -> Fleet {
        Fleet::spawn(config, root, journal, None)
    }

    /// Starts shipping what `supervisor` keeps: its journal's records and its processes'
    /// manifests (the fleet state).
    pub fn start_supervised(config: FleetConfig, supervisor: Supervisor) -> Fleet {
        let root = supervisor.root().to_owned();
        let journal = supervisor.journal();
        Fleet::spawn(config, root, journal, Some(supervisor))
    }

    fn spawn(
        config: FleetConfig,
        root: PathBuf,
        journal: Arc<Journal>,
        supervisor: Option<Supervisor>,
    ) -> Fleet {
        let status = Arc::new(Lock::new(FleetStatus::default()));
        let shared = ship::Shared {
            config,
            root,
            journal,
            supervisor,
            status: Arc::clone(&status),
        };
        let span = tracing::info_span!("fleet", node = %shared.config.node);
        tokio::spawn(tracing::Instrument::instrument(ship::run(shared), span));
        Fleet { status }
    }

    pub fn status(&self) -> FleetStatus {
        self.status.lock().clone()
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_and_tokens_never_reach_a_log() {
        assert_eq!(redact("nats://u:pw@h:4222"), "nats://u:***@h:4222");
        assert_eq!(redact("nats://tok@h:4222"), "nats://***@h:4222");
        assert_eq!(redact("nats://h:4222"), "nats://h:4222");
        assert_eq!(redact("h:4222"), "h:4222");
    }
}
