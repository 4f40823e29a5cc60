//! The fleet state: a KV bucket holding each node's processes' latest manifests, as the
//! protocol's process objects, under `<node>.<handle>` (docs/fleet.md, "The fleet state").
//!
//! Invariants: an entry is written only once its process's output up to the entry's
//! `total_bytes` is in the output stream (the shipper's order), so an entry found current needs
//! nothing shipped. An entry only moves forward in its node's journal. Each carries the seq of the
//! journal record it was written after, and every write names the revision it replaces (KV
//! `update`, or `create` for a new key); a refused write (another writer got there first: an
//! older incarnation of the node, a second shipper) reads the entry again and writes only if its
//! own seq is higher, so a stale writer never overwrites a newer manifest. The cache of known
//! revisions is bounded ([`REVISIONS_MAX`]); a miss costs one read. At a pass's start, when
//! every process of the node is checked at once, one read of the bucket's stream
//! ([`StateWriter::prefetch`]) stands in for a read per process; what it learned is dropped when
//! that check ends, and a write refused meanwhile reads its key again, as without it.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use async_nats::jetstream::{self, Context, kv};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::wire::NodeName;
use crate::lifecycle::Handle;

/// The bucket of every node's manifests (its stream is `KV_PJ_FLEET`).
pub const BUCKET: &str = "PJ_FLEET";
/// Revisions remembered before the cache is emptied.
const REVISIONS_MAX: usize = 4096;
/// Attempts at one write when other writers keep getting there first.
const ATTEMPTS: usize = 4;

/// One process of one node, the value of `<node>.<handle>` (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessEntry {
    /// 1.
    pub version: u32,
    pub node: String,
    /// The node's journal ID, 32 lowercase hex digits.
    pub journal: String,
    /// The seq of the journal record after which the manifest was read: it reflects that
    /// record and every earlier one.
    pub seq: u64,
    /// The protocol's process object (docs/protocol.md), as `ps --json` prints it.
    pub process: serde_json::Value,
}

/// The key of a process: `<node>.<handle>`.
pub fn key(node: &NodeName, handle: &Handle) -> String {
    format!("{node}.{handle}")
}

/// The bucket, made if missing (one revision kept per key: the latest manifest).
pub(super) async fn bucket(js: &Context) -> Result<kv::Store, String> {
    if let Ok(store) = js.get_key_value(BUCKET).await {
        return Ok(store);
    }
    js.create_key_value(kv::Config {
        bucket: BUCKET.to_owned(),
        history: 1,
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| e.to_string())
}

/// Writes a node's manifests.
pub(super) struct StateWriter {
    store: kv::Store,
    node: NodeName,
    journal: String,
    revisions: HashMap<Handle, u64>,
    /// What one read of the whole bucket found of this node, while a pass's start checks
    /// every process (`None` otherwise). A key missing was not in the bucket then; a key
    /// mapped to `None` was written by another writer since, and is read again.
    prefetched: Option<HashMap<Handle, Option<Held>>>,
    /// Digests of process objects (two keys: 128 bits), for comparing an entry read in bulk
    /// without keeping its whole value.
    digest_keys: (RandomState, RandomState),
}

/// An entry [`StateWriter::prefetch`] read: enough to decide whether it is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    revision: u64,
    /// A put of this journal's (a delete, another journal's entry or one that does not decode
    /// is older than any of this journal's).
    ours: bool,
    seq: u64,
    digest: u128,
}

impl StateWriter {
    pub(super) fn new(store: kv::Store, node: NodeName, journal: String) -> Self {
        StateWriter {
            store,
            node,
            journal,
            revisions: HashMap::new(),
            prefetched: None,
            digest_keys: (RandomState::new(), RandomState::new()),
        }
    }

    fn digest(&self, process: &serde_json::Value) -> u128 {
        // A `Value`'s maps are ordered by key, so equal values serialise to equal bytes.
        let bytes = serde_json::to_vec(process).unwrap_or_default();
        let (a, b) = &self.digest_keys;
        u128::from(a.hash_one(&bytes)) << 64 | u128::from(b.hash_one(&bytes))
    }

    /// Reads every entry of this node the bucket holds, in one pass over its stream (the
    /// latest message of each key), for the checks that follow until [`Self::end_prefetch`].
    pub(super) async fn prefetch(&mut self, js: &Context) -> Result<(), String> {
        let stream = js
            .get_stream(format!("KV_{BUCKET}"))
            .await
            .map_err(|e| e.to_string())?;
        let prefix = format!("$KV.{BUCKET}.{}.", self.node);
        let mut consumer = stream
            .create_consumer(OrderedConfig {
                filter_subject: format!("{prefix}>"),
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut held = HashMap::new();
        let pending = consumer
            .info()
            .await
            .map_err(|e| e.to_string())?
            .num_pending;
        if pending > 0 {
            let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
            while let Some(message) = messages.next().await {
                let message = message.map_err(|e| e.to_string())?;
                let info = message.info().map_err(|e| e.to_string())?;
                let (revision, left) = (info.stream_sequence, info.pending);
                if let Some(handle) = message.subject.strip_prefix(prefix.as_str())
                    && let Ok(handle) = handle.parse::<Handle>()
                {
                    held.insert(handle, Some(self.held_in(revision, &message)));
                }
                if left == 0 {
                    break;
                }
            }
        }
        self.prefetched = Some(held);
        Ok(())
    }

    /// What one message of the bucket's stream says of its key.
    fn held_in(&self, revision: u64, message: &jetstream::Message) -> Held {
        // A delete or purge carries the KV-Operation header (or, made by the server, a marker
        // reason); a put carries neither, or says PUT.
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_owned())
        };
        let put = header("KV-Operation").is_none_or(|op| op == "PUT")
            && header("Nats-Marker-Reason").is_none();
        self.held(revision, put, &message.payload)
    }

    /// What an entry holds, however it was read: one read of its key or the bulk read.
    fn held(&self, revision: u64, put: bool, payload: &[u8]) -> Held {
        let entry = serde_json::from_slice::<ProcessEntry>(payload).ok();
        match entry {
            Some(e) if put && e.journal == self.journal => Held {
                revision,
                ours: true,
                seq: e.seq,
                digest: self.digest(&e.process),
            },
            _ => Held {
                revision,
                ours: false,
                seq: 0,
                digest: 0,
            },
        }
    }

    /// Drops what [`Self::prefetch`] read: later checks read each key again.
    pub(super) fn end_prefetch(&mut self) {
        self.prefetched = None;
    }

    /// What to do with `process`, read after record `seq`: nothing, when the bucket already
    /// holds it or an entry at least as new (module doc); else write it over the revision
    /// found. One read, unless this writer wrote the key itself in this pass (then it knows the
    /// revision, and the caller marked the process changed).
    pub(super) async fn plan(
        &self,
        handle: &Handle,
        seq: u64,
        process: &serde_json::Value,
    ) -> Result<Plan, String> {
        if let Some(&revision) = self.revisions.get(handle) {
            return Ok(Plan::Write(Some(revision)));
        }
        let held = match self.prefetched.as_ref().map(|p| p.get(handle)) {
            Some(None) => return Ok(Plan::Write(None)),
            Some(Some(Some(held))) => *held,
            // Not prefetched, or changed since: read it.
            Some(Some(None)) | None => {
                let key = key(&self.node, handle);
                let Some(entry) = self.store.entry(&key).await.map_err(|e| e.to_string())? else {
                    return Ok(Plan::Write(None));
                };
                self.held(
                    entry.revision,
                    entry.operation == kv::Operation::Put,
                    &entry.value,
                )
            }
        };
        // An entry of another journal, a delete, or one that does not decode is older than
        // any of this journal's.
        let current = held.ours && (held.seq >= seq || held.digest == self.digest(process));
        Ok(if current {
            Plan::Skip
        } else {
            Plan::Write(Some(held.revision))
        })
    }

    /// Writes `process` (read after record `seq`) as `plan` says; when another writer got
    /// there first, reads again and decides again.
    pub(super) async fn write(
        &mut self,
        handle: Handle,
        seq: u64,
        process: serde_json::Value,
        mut plan: Plan,
    ) -> Result<(), String> {
        let key = key(&self.node, &handle);
        let entry = ProcessEntry {
            version: 1,
            node: self.node.to_string(),
            journal: self.journal.clone(),
            seq,
            process,
        };
        let body = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
        for _ in 0..ATTEMPTS {
            let Plan::Write(revision) = plan else {
                return Ok(());
            };
            let body = body.clone().into();
            let written = match revision {
                Some(r) => self.store.update(&key, body, r).await.map_err(|e| {
                    let lost = e.kind() == kv::UpdateErrorKind::WrongLastRevision;
                    (lost, e.to_string())
                }),
                None => self.store.create(&key, body).await.map_err(|e| {
                    let lost = e.kind() == kv::CreateErrorKind::AlreadyExists;
                    (lost, e.to_string())
                }),
            };
            match written {
                Ok(revision) => {
                    if self.revisions.len() >= REVISIONS_MAX {
                        self.revisions.clear();
                    }
                    self.revisions.insert(handle, revision);
                    return Ok(());
                }
                // Another writer got there first: read what it wrote, then decide.
                Err((true, _)) => {
                    self.revisions.remove(&handle);
                    if let Some(prefetched) = &mut self.prefetched {
                        // What the bulk read found is out of date for this key: a read decides.
                        prefetched.insert(handle, None);
                    }
                    plan = self.plan(&handle, seq, &entry.process).await?;
                }
                Err((false, e)) => return Err(e),
            }
        }
        Err(format!("{key}: other writers kept getting there first"))
    }
}

/// What [`StateWriter::plan`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// The bucket holds this process, or a newer entry of it: nothing to write.
    Skip,
    /// Write over this revision (`None`: create the key).
    Write(Option<u64>),
}
