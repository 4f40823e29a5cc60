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

    /// Writes `process` (read after record `seq`) under its key, unless the entry there is
    /// already as new (module doc).
    pub(super) async fn put(
        &mut self,
        handle: Handle,
        seq: u64,
        process: serde_json::Value,
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
            let revision = match self.revisions.get(&handle) {
                Some(&revision) => Some(revision),
                None => match self.current(&key, seq, &entry.process).await? {
                    Current::Newer => return Ok(()),
                    Current::Revision(r) => Some(r),
                    Current::Missing => None,
                },
            };
            let written = match revision {
                Some(r) => self
                    .store
                    .update(&key, body.clone().into(), r)
                    .await
                    .map_err(|e| {
                        (
                            e.kind() == kv::UpdateErrorKind::WrongLastRevision,
                            e.to_string(),
                        )
                    }),
                None => self
                    .store
                    .create(&key, body.clone().into())
                    .await
                    .map_err(|e| {
                        (
                            e.kind() == kv::CreateErrorKind::AlreadyExists,
                            e.to_string(),
                        )
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
                }
                Err((false, e)) => return Err(e),
            }
        }
        Err(format!("{key}: other writers kept getting there first"))
    }

    /// Whether the bucket already holds `process` for `handle` (read unless this writer wrote
    /// the key itself, in which case the caller knows better: it was marked changed).
    pub(super) async fn holds(
        &self,
        handle: &Handle,
        process: &serde_json::Value,
    ) -> Result<bool, String> {
        if self.revisions.contains_key(handle) {
            return Ok(false);
        }
        let key = key(&self.node, handle);
        let Some(entry) = self.store.entry(&key).await.map_err(|e| e.to_string())? else {
            return Ok(false);
        };
        let held = serde_json::from_slice::<ProcessEntry>(&entry.value).ok();
        Ok(entry.operation == kv::Operation::Put
            && held.is_some_and(|h| h.journal == self.journal && h.process == *process))
    }

    /// What the bucket holds under `key`, beside an entry read after record `seq`. An entry of
    /// another journal, or one that does not decode, is older than any of this journal's.
    /// An entry holding the same process as `process` needs no write either.
    async fn current(
        &self,
        key: &str,
        seq: u64,
        process: &serde_json::Value,
    ) -> Result<Current, String> {
        let Some(entry) = self.store.entry(key).await.map_err(|e| e.to_string())? else {
            return Ok(Current::Missing);
        };
        let held = serde_json::from_slice::<ProcessEntry>(&entry.value).ok();
        let newer = entry.operation == kv::Operation::Put
            && held.is_some_and(|h| {
                h.journal == self.journal && (h.seq >= seq || h.process == *process)
            });
        Ok(if newer {
            Current::Newer
        } else {
            Current::Revision(entry.revision)
        })
    }
}

/// What a key holds now.
enum Current {
    Missing,
    Revision(u64),
    /// An entry at least as new as the one to write.
    Newer,
}
