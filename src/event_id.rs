//! [`EventId`], the stable identity of a journal record, which the layers above the journal
//! carry in their payloads too (`codec.rs` encodes it as its 16 bytes).
//!
//! A leaf of its own, re-exported as `journal::EventId` (its path for embedders), so that the
//! codec, which the layers above the journal use, imports no layer.

use serde::Serialize;

/// A stable, caller-allocated event identity (a UUID; v7 by default so IDs sort by creation time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct EventId(pub uuid::Uuid);

impl EventId {
    /// A fresh time-ordered ID, for callers that allocate IDs ahead of the events they name.
    pub fn new_v7() -> Self {
        EventId(uuid::Uuid::now_v7())
    }
    pub fn as_bytes(&self) -> [u8; 16] {
        *self.0.as_bytes()
    }
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        EventId(uuid::Uuid::from_bytes(bytes))
    }

    /// A deterministic ID for a record that follows from this one (its publication, say): the
    /// same input always gives the same ID, so the follow-up record is exactly as idempotent as
    /// the event it follows. The result is a UUIDv8 (version 8, RFC variant), so it never equals
    /// a v7 ID; different `purpose`s give different IDs.
    pub fn derived(&self, purpose: u8) -> EventId {
        let mut b = self.as_bytes();
        b[15] ^= purpose;
        b[14] ^= 0xa5;
        b[6] = (b[6] & 0x0f) | 0x80;
        b[8] = (b[8] & 0x3f) | 0x80;
        EventId::from_bytes(b)
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
