//! The shipper: a task of the daemon that publishes every durable journal record, in order, to
//! its node's stream, and a heartbeat beside it.
//!
//! Exactly once: each publish carries `Nats-Expected-Last-Sequence`, the stream seq the
//! shipper believes its stream ends at, so the server stores a message only right after the
//! one the shipper last saw stored. Any belief that is not the server's (a retry after a lost
//! ack, a restart, a replay of the whole journal, a second writer) is refused rather than
//! stored twice, whatever the duplicate window; the shipper then asks the stream where it ends
//! (its last message's `Pj-Journal` and `Pj-Seq`) and goes on from there. That last message is
//! the only authority on where to resume: nothing is kept on the node. `Nats-Msg-Id` is the
//! event ID, so that a retry inside the window is answered as a duplicate too.
//!
//! Never in the way of the node: the shipper only reads the journal (`source.rs`, on a thread
//! of its own), so appends never wait on it; while the server is away it retries with a
//! bounded backoff and catches up after. At most `window` publishes await their acks at once.

use std::collections::{BTreeMap, VecDeque};
use std::future::{Future, IntoFuture};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, Context, publish::PublishAck, stream};
use tokio::sync::mpsc;

use super::output::{self, OutputShipper, Progress};
use super::source::{self, Item};
use super::state::{self, Plan, StateWriter};
use super::wire::{self, NodeName, Shipped};
use super::{FleetConfig, FleetStatus};
use crate::journal::Journal;
use crate::lifecycle::{Handle, LifecycleEvent};
use crate::protocol::dispatch::ProcessInfo;
use crate::supervisor::Supervisor;
use crate::sync::Lock;

type AckFuture =
    Pin<Box<dyn Future<Output = Result<PublishAck, jetstream::context::PublishError>> + Send>>;

/// Why one pass of shipping ended.
#[derive(Debug, thiserror::Error)]
pub(super) enum PassEnd {
    #[error("{0}")]
    Nats(String),
    /// The server's stream does not end where the shipper believed: ask it again.
    #[error("the stream does not end where the shipper believed: {0}")]
    Resync(String),
    #[error("the journal reader stopped: {0}")]
    Reader(String),
}

fn nats(e: impl std::fmt::Display) -> PassEnd {
    PassEnd::Nats(e.to_string())
}

/// What the shipper shares with the daemon.
pub(super) struct Shared {
    pub config: FleetConfig,
    pub root: PathBuf,
    pub journal: Arc<Journal>,
    /// The daemon's supervisor, whose manifests go to the fleet state; `None` ships the
    /// journal alone.
    pub supervisor: Option<Supervisor>,
    pub status: Arc<Lock<FleetStatus>>,
}

/// The wait before a pass after a failed one: doubled each time, up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// The pause before a pass after a resynchronisation.
const RESYNC_PAUSE: Duration = Duration::from_millis(10);

/// Ships until the runtime ends.
pub(super) async fn run(shared: Shared) {
    let client = match connect(&shared.config).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(
                "fleet: cannot connect to {}: {e}",
                shared.config.redacted_url()
            );
            shared.status.lock().last_error = Some(e);
            return;
        }
    };
    let js = jetstream::new(client);
    let shared = Arc::new(shared);
    // Liveness does not wait on shipping: a node busy with a backlog is still live.
    tokio::spawn(beat_forever(js.clone(), Arc::clone(&shared)));
    let mut replay_from = shared.config.replay_from;
    let mut backoff = BACKOFF_MIN;
    let mut outage: Option<Instant> = None;
    loop {
        let began = Instant::now();
        let end = pass(&js, &shared, replay_from.take(), &mut outage).await;
        {
            let mut status = shared.status.lock();
            status.last_error = Some(end.to_string());
            status.connected = false;
        }
        if began.elapsed() > BACKOFF_MAX * 5 {
            // A pass that shipped for a while ended: a new outage, not the same one.
            backoff = BACKOFF_MIN;
        }
        match end {
            PassEnd::Resync(why) => {
                shared.status.lock().resyncs += 1;
                tracing::info!("fleet: resynchronising: {why}");
                backoff = BACKOFF_MIN;
                // Two shippers of one journal take turns rather than spin.
                tokio::time::sleep(RESYNC_PAUSE).await;
                continue;
            }
            other if outage.is_none() => {
                tracing::warn!("fleet: shipping paused, retrying: {other}");
                outage = Some(Instant::now());
            }
            _ => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn connect(config: &FleetConfig) -> Result<async_nats::Client, String> {
    config
        .options()
        .await?
        .retry_on_initial_connect()
        .name(format!("procjournal node {}", config.node))
        // The client's own reconnection waits grow to seconds; a node catching up after an
        // outage should notice the server back within a fraction of one.
        .reconnect_delay_callback(|attempts| {
            BACKOFF_MIN
                .saturating_mul(u32::try_from(attempts).unwrap_or(u32::MAX))
                .min(BACKOFF_MAX / 2)
        })
        .connect(config.url.as_str())
        .await
        .map_err(|e| e.to_string())
}

/// The stream of `node`'s records: the server's if it exists (an operator may have made it
/// with replicas or limits of their own), else a file-backed one.
async fn events_stream(js: &Context, node: &NodeName) -> Result<stream::Stream, PassEnd> {
    js.get_or_create_stream(stream::Config {
        name: node.events_stream(),
        subjects: vec![node.events_subject()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(nats)
}

/// Where the stream ends: its last stream seq and what its last message covers (`None` for an
/// empty stream, or one whose messages were all removed).
async fn stream_end(stream: &mut stream::Stream) -> Result<(u64, Option<Shipped>), PassEnd> {
    let last = stream.info().await.map_err(nats)?.state.last_sequence;
    if last == 0 {
        return Ok((0, None));
    }
    let message = match stream.get_raw_message(last).await {
        Ok(m) => m,
        // Purged or aged out: the stream lost what it held, which the node ships again.
        Err(e) if e.to_string().contains("no message found") => return Ok((last, None)),
        Err(e) => return Err(nats(e)),
    };
    let get = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
    let shipped =
        wire::decode_shipped(get(wire::H_JOURNAL).as_deref(), get(wire::H_SEQ).as_deref())
            .map_err(|e| PassEnd::Nats(format!("the stream's last message (seq {last}): {e}")))?;
    Ok((last, Some(shipped)))
}

/// One pass: find where the stream ends, read the journal from there, publish in a window.
async fn pass(
    js: &Context,
    shared: &Shared,
    replay_from: Option<u64>,
    outage: &mut Option<Instant>,
) -> PassEnd {
    match pass_inner(js, shared, replay_from, outage).await {
        Ok(never) => match never {},
        Err(end) => end,
    }
}

async fn pass_inner(
    js: &Context,
    shared: &Shared,
    replay_from: Option<u64>,
    outage: &mut Option<Instant>,
) -> Result<std::convert::Infallible, PassEnd> {
    let node = &shared.config.node;
    let journal_id = shared.journal.journal_id();
    let mut stream = events_stream(js, node).await?;
    heartbeat_stream(js).await?;
    let (mut stream_last, end) = stream_end(&mut stream).await?;
    let mut next = match end {
        Some(s) if s.journal_id == journal_id => s.seq + 1,
        _ => 1,
    };
    if let Some(from) = replay_from {
        // A replay believes the stream empty: every publish of it must be refused.
        (stream_last, next) = (0, from);
    }
    let state = match &shared.supervisor {
        Some(_) => {
            output::output_stream(js, node, shared.config.output_bytes)
                .await
                .map_err(PassEnd::Nats)?;
            Some(StateWriter::new(
                state::bucket(js).await.map_err(PassEnd::Nats)?,
                node.clone(),
                wire::journal_hex(&journal_id),
            ))
        }
        None => None,
    };
    started(shared, next, stream_last, outage);
    let (tx, rx) = mpsc::channel(shared.config.window.max(1));
    source::spawn(shared.root.clone(), Arc::clone(&shared.journal), next, tx)
        .map_err(|e| PassEnd::Reader(e.to_string()))?;
    let mut pass = Pass {
        js,
        shared,
        journal_id,
        subject: node.events_subject(),
        stream_last,
        pending: VecDeque::new(),
        state,
        output: OutputShipper::new(node.clone()),
        dirty: BTreeMap::new(),
    };
    pass.reconcile(next - 1).await?;
    pass.run(rx).await
}

/// Says where shipping starts, in the status and the log.
fn started(shared: &Shared, next: u64, stream_last: u64, outage: &mut Option<Instant>) {
    {
        let mut status = shared.status.lock();
        status.connected = true;
        status.shipped_seq = next - 1;
        status.stream_seq = stream_last;
    }
    // The lag at the start of a pass: how much the node wrote that the stream does not hold.
    let behind = shared.journal.last_seq().saturating_sub(next - 1);
    if let Some(since) = outage.take() {
        tracing::info!(
            "fleet: shipping again after {:.1} s, from seq {next} ({behind} records behind)",
            since.elapsed().as_secs_f64()
        );
    } else {
        let stream = shared.config.node.events_stream();
        tracing::info!("fleet: shipping to {stream} from seq {next} ({behind} records behind)");
    }
}

/// Manifests written to the fleet state at once, at most, before more records are published.
const DIRTY_MAX: usize = 256;

/// One pass's shipping state.
struct Pass<'a> {
    js: &'a Context,
    shared: &'a Shared,
    journal_id: [u8; 16],
    subject: String,
    /// The stream seq this pass believes its stream ends at.
    stream_last: u64,
    /// Publishes awaiting their acks: the ack, the seq the message covers, the process the
    /// record is about.
    pending: VecDeque<(AckFuture, u64, Option<Handle>)>,
    state: Option<StateWriter>,
    output: OutputShipper,
    /// Processes whose shipped records the fleet state does not reflect yet, with the seq of
    /// the last such record.
    dirty: BTreeMap<Handle, u64>,
}

impl Pass<'_> {
    async fn run(
        &mut self,
        mut rx: mpsc::Receiver<Item>,
    ) -> Result<std::convert::Infallible, PassEnd> {
        loop {
            let room = self.pending.len() < self.shared.config.window.max(1);
            let waiting = !self.pending.is_empty();
            let behind = !self.dirty.is_empty();
            tokio::select! {
                // Acks, then records, then the fleet state and output: a large output is shipped
                // in slices between records, never ahead of them.
                biased;
                ack = front_ack(&mut self.pending), if waiting => {
                    let (_, seq, handle) = self.pending.pop_front().ok_or_else(|| nats("no ack"))?;
                    acknowledged(ack, seq, self.shared)?;
                    if let Some(handle) = handle {
                        self.dirty.insert(handle, seq);
                    }
                    if self.dirty.len() >= DIRTY_MAX {
                        self.write_state().await?;
                    }
                }
                item = rx.recv(), if room => {
                    let item = item.ok_or_else(|| PassEnd::Reader("ended".to_owned()))?;
                    self.publish(item).await?;
                }
                () = std::future::ready(()), if behind => self.write_state().await?,
            }
        }
    }

    async fn publish(&mut self, item: Item) -> Result<(), PassEnd> {
        // Only a pass that keeps the fleet state needs to know whose record it is.
        let handle = match &item {
            Item::Record(r) if self.state.is_some() => handle_of(r),
            _ => None,
        };
        let (headers, body, seq) = message(&self.journal_id, item)?;
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(name, value.as_str());
        }
        map.insert(
            wire::H_EXPECTED_LAST_SEQ,
            self.stream_last.to_string().as_str(),
        );
        let ack = self
            .js
            .publish_with_headers(self.subject.clone(), map, body.into())
            .await
            .map_err(nats)?;
        self.stream_last += 1;
        self.pending.push_back((ack.into_future(), seq, handle));
        Ok(())
    }

    /// Brings the fleet state up to the supervisor's manifests before shipping goes on: writes
    /// done by an earlier pass may have been cut short (an outage between a record's ack and its
    /// manifest's write), and records shipped before the node kept a state have none. Entries
    /// that already hold a process as it is now are only read.
    async fn reconcile(&mut self, shipped: u64) -> Result<(), PassEnd> {
        let Some(supervisor) = &self.shared.supervisor else {
            return Ok(());
        };
        let began = std::time::Instant::now();
        let all = supervisor.list(&crate::supervisor::ListFilter::default());
        let processes = all.len();
        self.dirty
            .extend(all.into_iter().map(|m| (m.handle, shipped)));
        if let Some(state) = &mut self.state {
            state.prefetch(self.js).await.map_err(PassEnd::Nats)?;
        }
        let written = self.write_state().await;
        if let Some(state) = &mut self.state {
            state.end_prefetch();
        }
        tracing::info!(
            "fleet: state of {processes} processes checked in {} ms",
            began.elapsed().as_millis()
        );
        written
    }

    /// Writes the manifests of the processes whose records were shipped since the last time.
    async fn write_state(&mut self) -> Result<(), PassEnd> {
        let (Some(state), Some(supervisor)) = (&mut self.state, &self.shared.supervisor) else {
            self.dirty.clear();
            return Ok(());
        };
        while let Some((handle, seq)) = self.dirty.pop_first() {
            let Some(manifest) = supervisor.manifest(&handle) else {
                continue;
            };
            let process = serde_json::to_value(ProcessInfo::from(&manifest)).map_err(nats)?;
            let plan = state
                .plan(&handle, seq, &process)
                .await
                .map_err(PassEnd::Nats)?;
            if plan == Plan::Skip {
                continue;
            }
            // The output first: an entry saying `total_bytes` T means the output stream holds
            // the process's output up to T, so an entry found current needs nothing shipped.
            let upto = manifest.bounds.total_bytes;
            match self.output.ship(self.js, supervisor, handle, upto).await {
                Ok(Progress::Done) => {}
                // More than a slice to ship: the rest after the records waiting meanwhile.
                Ok(Progress::More) => {
                    self.dirty.insert(handle, seq);
                    return Ok(());
                }
                // Its entry waits for its output (the entry would claim more than the stream
                // holds).
                Ok(Progress::Stalled) => continue,
                Err(e) => {
                    self.output.forget(&handle);
                    return Err(PassEnd::Nats(format!("output of {handle}: {e}")));
                }
            }
            state
                .write(handle, seq, process, plan)
                .await
                .map_err(PassEnd::Nats)?;
        }
        Ok(())
    }
}

/// The process a lifecycle record is about (`None` for other records and root-level events).
fn handle_of(record: &crate::journal::reader::Record) -> Option<Handle> {
    if !LifecycleEvent::is_lifecycle_kind(record.kind) {
        return None;
    }
    LifecycleEvent::decode(record.kind, record.codec_version, &record.payload)
        .ok()?
        .handle()
}

async fn front_ack(
    pending: &mut VecDeque<(AckFuture, u64, Option<Handle>)>,
) -> Result<PublishAck, jetstream::context::PublishError> {
    match pending.front_mut() {
        Some((ack, _, _)) => ack.await,
        None => std::future::pending().await,
    }
}

/// One message to publish: its headers, its body, and the highest journal seq it covers.
type Message = (Vec<(&'static str, String)>, Vec<u8>, u64);

/// The message of an item.
fn message(journal_id: &[u8; 16], item: Item) -> Result<Message, PassEnd> {
    match item {
        Item::Record(r) => Ok((
            wire::record_headers(
                journal_id,
                r.position.seq,
                r.event_id,
                r.kind,
                r.codec_version,
            ),
            r.payload,
            r.position.seq,
        )),
        Item::Gap { from, to } => {
            tracing::warn!(
                "fleet: records {from}..={to} were compacted away before they were shipped: \
                 shipped as a gap"
            );
            Ok((
                wire::gap_headers(journal_id, from, to, wire::GAP_COMPACTED),
                Vec::new(),
                to,
            ))
        }
        Item::Failed(why) => Err(PassEnd::Reader(why)),
    }
}

/// Takes the server's answer to the publish of the message covering `seq`.
fn acknowledged(
    ack: Result<PublishAck, jetstream::context::PublishError>,
    seq: u64,
    shared: &Shared,
) -> Result<(), PassEnd> {
    use jetstream::context::PublishErrorKind;
    let ack = match ack {
        Ok(ack) => ack,
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
            return Err(PassEnd::Resync(e.to_string()));
        }
        Err(e) => return Err(nats(e)),
    };
    if ack.duplicate {
        // Stored before, under the same ID: the stream is not where this pass believed.
        return Err(PassEnd::Resync(format!(
            "seq {seq} was already stored, at stream seq {}",
            ack.sequence
        )));
    }
    let mut status = shared.status.lock();
    status.shipped_seq = seq;
    status.stream_seq = ack.sequence;
    status.last_error = None;
    Ok(())
}

/// The stream of every node's last heartbeat.
async fn heartbeat_stream(js: &Context) -> Result<(), PassEnd> {
    js.get_or_create_stream(stream::Config {
        name: wire::HEARTBEAT_STREAM.to_owned(),
        subjects: vec![format!("{}*", wire::HEARTBEAT_SUBJECT_PREFIX)],
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        allow_direct: true,
        ..Default::default()
    })
    .await
    .map(|_| ())
    .map_err(nats)
}

/// Publishes the node's heartbeat every interval, whatever shipping is doing, until the
/// runtime ends.
async fn beat_forever(js: Context, shared: Arc<Shared>) {
    let mut beat = tokio::time::interval(shared.config.heartbeat);
    loop {
        beat.tick().await;
        heartbeat(&js, &shared).await;
    }
}

/// Publishes the node's heartbeat (docs/fleet.md); a failure only shows as lag and age.
async fn heartbeat(js: &Context, shared: &Shared) {
    let beat = {
        let status = shared.status.lock();
        super::Heartbeat {
            version: 1,
            node: shared.config.node.to_string(),
            journal: wire::journal_hex(&shared.journal.journal_id()),
            head_seq: shared.journal.last_seq(),
            durable_seq: shared.journal.durable_seq(),
            shipped_seq: status.shipped_seq,
            unix_ms: super::now_unix_ms(),
            interval_ms: u64::try_from(shared.config.heartbeat.as_millis()).unwrap_or(u64::MAX),
        }
    };
    let Ok(body) = serde_json::to_vec(&beat) else {
        return;
    };
    // A plain publish: the stream keeps it, and no ack is awaited, so that a stalled server
    // never holds the shipping loop for an ack timeout.
    let subject = shared.config.node.heartbeat_subject();
    let _ = js.client().publish(subject, body.into()).await;
}
