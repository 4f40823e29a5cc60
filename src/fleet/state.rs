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
//! revisions is bounded ([`REVISIONS_MAX`]); a miss costs one read.

use std::collections::HashMap;

use async_nats::jetstream::{self, Context, kv};
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
}

impl StateWriter {
    pub(super) fn new(store: kv::Store, node: NodeName, journal: String) -> Self {
        StateWriter {
            store,
            node,
            journal,
            revisions: HashMap::new(),
        }
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
        let key = key(&self.node, handle);
        let Some(entry) = self.store.entry(&key).await.map_err(|e| e.to_string())? else {
            return Ok(Plan::Write(None));
        };
        // An entry of another journal, or one that does not decode, is older than any of
        // this journal's.
        let held = serde_json::from_slice::<ProcessEntry>(&entry.value).ok();
        let current = entry.operation == kv::Operation::Put
            && held.is_some_and(|h| {
                h.journal == self.journal && (h.seq >= seq || h.process == *process)
            });
        Ok(if current {
            Plan::Skip
        } else {
            Plan::Write(Some(entry.revision))
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
        for _ in 0..ATTEMPTS {
            let Plan::Write(revision) = plan else {
                return Ok(());
            };
            let entry = ProcessEntry {
                version: 1,
                node: self.node.to_string(),
                journal: self.journal.clone(),
                seq,
                process: process.clone(),
            };
            let body = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
            let written = match revision {
                Some(r) => self.store.update(&key, body.into(), r).await.map_err(|e| {
                    let lost = e.kind() == kv::UpdateErrorKind::WrongLastRevision;
                    (lost, e.to_string())
                }),
                None => self.store.create(&key, body.into()).await.map_err(|e| {
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
                    plan = self.plan(&handle, seq, &process).await?;
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
