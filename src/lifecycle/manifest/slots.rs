//! The store's slots: for each manifest, by position (registration order), its registration's
//! event ID and how it is held, as one 32-byte record of a [`Column`] in spill space; the
//! manifests held decoded live beside them, by position. A finished process then costs the heap
//! nothing: its record is page cache once its block is full, and its frame is too.
//!
//! Record layout: bytes 0..16 the registration's event ID; byte 16 how the manifest is held
//! ([`LIVE`], [`SETTLED`] or [`RETIRED`]); bytes 17..20 zero; bytes 20..32 where a settled
//! manifest's frame is (`Spilled::to_bytes`), zero for a live one.
//!
//! Invariants: a position's record says [`LIVE`] exactly when `live` holds its manifest; a record
//! is written only through `push` and `set`, from a typed [`Slot`]; a record with any other kind
//! (which only a bug could write) reads as no manifest, never as another one.

use std::collections::BTreeMap;
use std::fs::File;

use super::frame::SettledFrame;
use super::{LifecycleIds, Manifest};
use crate::journal::EventId;
use crate::spill::{Column, Spill, SpillError, Spilled};

/// A manifest as the store holds it: decoded, or settled (module doc of `manifest`).
#[derive(Debug, Clone)]
pub(super) enum Slot {
    Live(Box<Manifest>),
    Settled(SettledFrame),
}

/// A slot as read: the decoded manifest borrowed, or where the settled frame is.
#[derive(Debug, Clone, Copy)]
pub(super) enum SlotRef<'a> {
    Live(&'a Manifest),
    Settled(SettledFrame),
}

impl SlotRef<'_> {
    /// The IDs its manifest allocated, read in place.
    pub(super) fn ids(&self, frames: &Spill) -> LifecycleIds {
        match self {
            SlotRef::Live(m) => m.ids,
            SlotRef::Settled(frame) => frame.ids(frames),
        }
    }
}

const LIVE: u8 = 1;
const SETTLED: u8 = 2;
/// Settled, and its output retired: what a retention pass counts without decoding.
const RETIRED: u8 = 3;

/// The registration's event ID a record holds.
fn registration_of(record: &[u8; 32]) -> EventId {
    let mut id = [0u8; 16];
    id.copy_from_slice(&record[..16]);
    EventId::from_bytes(id)
}

/// Every manifest's slot and registration, by position (module doc).
#[derive(Debug, Clone, Default)]
pub(super) struct Slots {
    records: Column<32>,
    live: BTreeMap<u32, Box<Manifest>>,
}

impl Slots {
    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// The slot at `position`, if there is one.
    pub(super) fn get(&self, position: usize) -> Option<SlotRef<'_>> {
        self.entry(position).map(|(_, slot)| slot)
    }

    /// The registration's event ID and the slot at `position`, from one read of its record.
    pub(super) fn entry(&self, position: usize) -> Option<(EventId, SlotRef<'_>)> {
        let record = self.records.get(position)?;
        let slot = match record[16] {
            LIVE => {
                let key = u32::try_from(position).ok()?;
                SlotRef::Live(self.live.get(&key)?)
            }
            kind @ (SETTLED | RETIRED) => {
                let mut at = [0u8; 12];
                at.copy_from_slice(&record[20..]);
                let at = Spilled::from_bytes(at);
                SlotRef::Settled(SettledFrame::at(at, kind == RETIRED))
            }
            _ => return None,
        };
        Some((registration_of(&record), slot))
    }

    /// The event ID of the registration at `position`.
    pub(super) fn registration(&self, position: usize) -> Option<EventId> {
        self.records.get(position).map(|r| registration_of(&r))
    }

    /// Adds the slot of the next position, registered under `registration`.
    pub(super) fn push(&mut self, registration: EventId, slot: Slot) {
        let position = self.len();
        let record = self.hold(position, registration, slot);
        self.records.push(record);
    }

    /// Replaces the slot at `position` (one that was pushed).
    pub(super) fn set(&mut self, position: usize, slot: Slot) {
        let Some(registration) = self.registration(position) else {
            return;
        };
        let record = self.hold(position, registration, slot);
        self.records.set(position, record);
    }

    /// The record of `slot` at `position`, with a live manifest moved into `live` (and a
    /// settled one's taken out).
    fn hold(&mut self, position: usize, registration: EventId, slot: Slot) -> [u8; 32] {
        let mut record = [0u8; 32];
        record[..16].copy_from_slice(&registration.as_bytes());
        // Positions stay below `SLOTS_MAX`, which fits a `u32` (the store checks it first).
        let key = u32::try_from(position).unwrap_or(u32::MAX);
        match slot {
            Slot::Live(m) => {
                record[16] = LIVE;
                self.live.insert(key, m);
            }
            Slot::Settled(frame) => {
                record[16] = if frame.retired() { RETIRED } else { SETTLED };
                record[20..].copy_from_slice(&frame.at_bytes());
                self.live.remove(&key);
            }
        }
        record
    }

    /// The decoded manifest at `position`, to change in place.
    pub(super) fn live_mut(&mut self, position: usize) -> Option<&mut Manifest> {
        let key = u32::try_from(position).ok()?;
        self.live.get_mut(&key).map(|m| &mut **m)
    }

    /// The manifests held decoded, in position order.
    pub(super) fn live(&self) -> impl Iterator<Item = &Manifest> {
        self.live.values().map(|m| &**m)
    }

    /// How many manifests are held decoded.
    pub(super) fn live_count(&self) -> usize {
        self.live.len()
    }

    /// Moves the records' spilled blocks into `file` (an unnamed file of this process's own),
    /// and every later block there; on a refusal they stay where they were.
    pub(super) fn spill_into(&mut self, file: File) -> Result<(), SpillError> {
        let records = std::mem::take(&mut self.records);
        let (records, outcome) = match records.into_file(file) {
            Ok(moved) => (moved, Ok(())),
            Err((kept, e)) => (kept, Err(e)),
        };
        self.records = records;
        outcome
    }

    /// Unmaps the pages of records that reads mapped (a snapshot reads them all).
    pub(super) fn release_resident(&self) {
        self.records.release_resident();
    }

    /// How many records live on the heap (those after the last whole block).
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn on_heap(&self) -> usize {
        self.records.on_heap()
    }

    /// Whether the records' blocks left the heap.
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn is_file(&self) -> bool {
        self.records.is_file()
    }
}
