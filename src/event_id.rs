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
    ///
    /// Bytes 15 and 14 are XORed with `purpose` and `0xa5`, byte 6's high nibble becomes 8 (the
    /// version) and byte 8's top two bits `10` (the variant). It is computed on the ID as one
    /// big-endian integer, byte `i` at bits `8 * (15 - i)`: changed a byte at a time, the result
    /// was stored in narrow pieces that a 16-byte read of it then waited for (an open derives
    /// the IDs of every manifest a snapshot retains).
    pub fn derived(&self, purpose: u8) -> EventId {
        const VERSION: u128 = 0xf0 << 72;
        const VARIANT: u128 = 0xc0 << 56;
        let v = self.0.as_u128() ^ u128::from(purpose) ^ (0xa5 << 8);
        let v = (v & !VERSION & !VARIANT) | (0x80 << 72) | (0x80 << 56);
        EventId(uuid::Uuid::from_u128(v))
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::EventId;

    proptest! {
        /// The derived ID is the bytes the format names (journal-format.md), changed one by one.
        #[test]
        fn derived_changes_the_bytes_the_format_names(bytes: [u8; 16], purpose: u8) {
            let mut b = bytes;
            b[15] ^= purpose;
            b[14] ^= 0xa5;
            b[6] = (b[6] & 0x0f) | 0x80;
            b[8] = (b[8] & 0x3f) | 0x80;
            prop_assert_eq!(EventId::from_bytes(bytes).derived(purpose), EventId::from_bytes(b));
        }
    }
}
