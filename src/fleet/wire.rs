//! The fleet's names and message headers, byte for byte as docs/fleet.md specifies them: what a
//! node publishes, and the decoder of what it reads back from the server to know where its
//! stream ends.
//!
//! Invariants: every name a node uses is built from a [`NodeName`], which holds only
//! `[A-Za-z0-9_-]`, 1 to 64 bytes, so that it is one token of a subject and a valid stream name;
//! [`decode_shipped`] is total (a typed error, never a panic) and accepts exactly what
//! [`record_headers`] and [`gap_headers`] write: a journal ID of 32 lowercase hex digits and a
//! seq of 1 to 20 decimal digits in `1..=SEQ_MAX`, without sign, space or leading zero.

use crate::journal::EventId;
use crate::lifecycle::Handle;
use crate::limits::SEQ_MAX;

/// Stream of one node's journal records: `PJ_EV_<node>`.
pub const EVENTS_STREAM_PREFIX: &str = "PJ_EV_";
/// Subject of one node's journal records: `pj.ev.<node>`.
pub const EVENTS_SUBJECT_PREFIX: &str = "pj.ev.";
/// The stream of every node's heartbeat, the last one per node.
pub const HEARTBEAT_STREAM: &str = "PJ_HB";
/// Subject of one node's heartbeats: `pj.hb.<node>`.
pub const HEARTBEAT_SUBJECT_PREFIX: &str = "pj.hb.";

/// Stream of one node's output: `PJ_OUT_<node>`.
pub const OUTPUT_STREAM_PREFIX: &str = "PJ_OUT_";
/// Subject of one process's output: `pj.out.<node>.<handle>`.
pub const OUTPUT_SUBJECT_PREFIX: &str = "pj.out.";

/// The journal the message comes from: 32 lowercase hex digits.
pub const H_JOURNAL: &str = "Pj-Journal";
/// The highest journal seq the message covers (its record's, or a gap's last).
pub const H_SEQ: &str = "Pj-Seq";
/// The record's kind and codec version, decimal.
pub const H_KIND: &str = "Pj-Kind";
pub const H_CODEC: &str = "Pj-Codec";
/// The record's event ID, hyphenated (also its `Nats-Msg-Id`).
pub const H_EVENT_ID: &str = "Pj-Event-Id";
/// A gap's first seq, and why its records were not shipped.
pub const H_GAP_FROM: &str = "Pj-Gap-From";
pub const H_GAP_REASON: &str = "Pj-Gap-Reason";
/// The one reason a node gives today: the records were compacted away before they were read.
pub const GAP_COMPACTED: &str = "compacted";
/// JetStream's own headers the node sets.
pub const H_MSG_ID: &str = "Nats-Msg-Id";
pub const H_EXPECTED_LAST_SEQ: &str = "Nats-Expected-Last-Sequence";
pub const H_EXPECTED_LAST_SUBJECT_SEQ: &str = "Nats-Expected-Last-Subject-Sequence";
/// An output message's process (`p-` and 32 hex digits), the combined cursor of its first byte,
/// and its stream (`stdout`, `stderr`, `terminal`); a gap's end (exclusive).
pub const H_HANDLE: &str = "Pj-Handle";
pub const H_CURSOR: &str = "Pj-Cursor";
pub const H_STREAM: &str = "Pj-Stream";
pub const H_GAP_TO: &str = "Pj-Gap-To";

/// Most bytes of a node name.
pub const NODE_NAME_BYTES_MAX: usize = 64;

/// A node's name, checked: one subject token and a valid stream-name suffix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeName(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("a node name is 1 to 64 of A-Z a-z 0-9 _ -, not {0:?}")]
    NodeName(String),
    #[error("the message has no {0} header")]
    Missing(&'static str),
    #[error("header {name} is not {what}: {value:?}")]
    Malformed {
        name: &'static str,
        what: &'static str,
        value: String,
    },
}

impl NodeName {
    pub fn new(name: &str) -> Result<Self, WireError> {
        let ok = !name.is_empty()
            && name.len() <= NODE_NAME_BYTES_MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(NodeName(name.to_owned()))
        } else {
            Err(WireError::NodeName(name.chars().take(80).collect()))
        }
    }

    /// The name a reader of the fleet goes by (it reads every node; it ships none).
    pub fn reader() -> Self {
        NodeName("reader".to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn events_stream(&self) -> String {
        format!("{EVENTS_STREAM_PREFIX}{}", self.0)
    }

    pub fn events_subject(&self) -> String {
        format!("{EVENTS_SUBJECT_PREFIX}{}", self.0)
    }

    pub fn heartbeat_subject(&self) -> String {
        format!("{HEARTBEAT_SUBJECT_PREFIX}{}", self.0)
    }

    pub fn output_stream(&self) -> String {
        format!("{OUTPUT_STREAM_PREFIX}{}", self.0)
    }

    /// `pj.out.<node>`: the output subjects of the node's processes are below it.
    pub fn output_subject_prefix(&self) -> String {
        format!("{OUTPUT_SUBJECT_PREFIX}{}", self.0)
    }

    pub fn output_subject(&self, handle: &Handle) -> String {
        format!("{OUTPUT_SUBJECT_PREFIX}{}.{handle}", self.0)
    }
}

impl std::fmt::Display for NodeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A journal ID as the headers write it.
pub fn journal_hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a node's stream ends: the journal and the highest seq its last message covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shipped {
    pub journal_id: [u8; 16],
    pub seq: u64,
}

/// The headers of one record's message, beside its payload as the journal holds it.
pub fn record_headers(
    journal_id: &[u8; 16],
    seq: u64,
    event_id: EventId,
    kind: u16,
    codec_version: u8,
) -> Vec<(&'static str, String)> {
    let id = event_id.to_string();
    vec![
        (H_MSG_ID, id.clone()),
        (H_JOURNAL, journal_hex(journal_id)),
        (H_SEQ, seq.to_string()),
        (H_EVENT_ID, id),
        (H_KIND, kind.to_string()),
        (H_CODEC, codec_version.to_string()),
    ]
}

/// The headers of a gap: the records `from..=to` of this journal that were gone before they
/// were shipped, and why. Its message ID names the journal and the range, so that a retry of
/// the same gap is the same message.
pub fn gap_headers(
    journal_id: &[u8; 16],
    from: u64,
    to: u64,
    reason: &str,
) -> Vec<(&'static str, String)> {
    let journal = journal_hex(journal_id);
    vec![
        (H_MSG_ID, format!("gap-{journal}-{from}-{to}")),
        (H_JOURNAL, journal),
        (H_SEQ, to.to_string()),
        (H_GAP_FROM, from.to_string()),
        (H_GAP_REASON, reason.to_owned()),
    ]
}

/// The headers of a chunk of `handle`'s output starting at `cursor`.
pub fn chunk_headers(handle: &Handle, cursor: u64, stream: &str) -> Vec<(&'static str, String)> {
    vec![
        (H_MSG_ID, format!("{handle}-{cursor}")),
        (H_HANDLE, handle.to_string()),
        (H_CURSOR, cursor.to_string()),
        (H_STREAM, stream.to_owned()),
    ]
}

/// The headers of a gap in `handle`'s output: cursors `from..to` were not kept, and why.
pub fn output_gap_headers(
    handle: &Handle,
    from: u64,
    to: u64,
    reason: &str,
) -> Vec<(&'static str, String)> {
    vec![
        (H_MSG_ID, format!("{handle}-{from}-gap")),
        (H_HANDLE, handle.to_string()),
        (H_CURSOR, from.to_string()),
        (H_GAP_TO, to.to_string()),
        (H_GAP_REASON, reason.to_owned()),
    ]
}

/// Where an output message ends (the cursor after it): a gap's `Pj-Gap-To`, which must lie
/// after its `Pj-Cursor`, else its `Pj-Cursor` plus its body's length.
pub fn decode_output_end(
    cursor: Option<&str>,
    gap_to: Option<&str>,
    body_bytes: usize,
) -> Result<u64, WireError> {
    let cursor = decode_cursor(H_CURSOR, cursor.ok_or(WireError::Missing(H_CURSOR))?)?;
    match gap_to {
        Some(to) => {
            let to = decode_cursor(H_GAP_TO, to)?;
            if to <= cursor {
                return Err(WireError::Malformed {
                    name: H_GAP_TO,
                    what: "after the gap's Pj-Cursor",
                    value: to.to_string(),
                });
            }
            Ok(to)
        }
        None => cursor
            .checked_add(body_bytes as u64)
            .ok_or(WireError::Malformed {
                name: H_CURSOR,
                what: "a cursor the body fits after",
                value: cursor.to_string(),
            }),
    }
}

/// A cursor as the headers write it: canonical decimal, 0 allowed.
pub fn decode_cursor(name: &'static str, text: &str) -> Result<u64, WireError> {
    if text == "0" {
        return Ok(0);
    }
    decode_seq(name, text)
}

/// Where a stream ends, from its last message's `Pj-Journal` and `Pj-Seq` headers.
pub fn decode_shipped(journal: Option<&str>, seq: Option<&str>) -> Result<Shipped, WireError> {
    let journal = journal.ok_or(WireError::Missing(H_JOURNAL))?;
    let seq = seq.ok_or(WireError::Missing(H_SEQ))?;
    Ok(Shipped {
        journal_id: decode_journal(journal)?,
        seq: decode_seq(H_SEQ, seq)?,
    })
}

fn decode_journal(text: &str) -> Result<[u8; 16], WireError> {
    let bad = || WireError::Malformed {
        name: H_JOURNAL,
        what: "32 lowercase hex digits",
        value: text.chars().take(80).collect(),
    };
    let bytes = text.as_bytes();
    if bytes.len() != 32 {
        return Err(bad());
    }
    let mut id = [0u8; 16];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = hex_digit(pair[0]).ok_or_else(bad)?;
        let lo = hex_digit(pair[1]).ok_or_else(bad)?;
        id[i] = hi << 4 | lo;
    }
    Ok(id)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// A seq as the headers write it: `1..=SEQ_MAX` in canonical decimal.
pub fn decode_seq(name: &'static str, text: &str) -> Result<u64, WireError> {
    let bad = || WireError::Malformed {
        name,
        what: "a seq in canonical decimal",
        value: text.chars().take(80).collect(),
    };
    let canonical = !text.is_empty()
        && text.len() <= 20
        && text.bytes().all(|b| b.is_ascii_digit())
        && !text.starts_with('0');
    if !canonical {
        return Err(bad());
    }
    match text.parse::<u64>() {
        Ok(seq) if (1..=SEQ_MAX).contains(&seq) => Ok(seq),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header<'a>(h: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
        h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn node_names_are_one_subject_token() {
        for good in ["a", "node-1", "web_02", &"x".repeat(64)] {
            assert!(NodeName::new(good).is_ok(), "{good}");
        }
        for bad in ["", "a.b", "a b", "a*", "a>", "é", &"x".repeat(65)] {
            assert!(NodeName::new(bad).is_err(), "{bad}");
        }
        let n = NodeName::new("n1").unwrap();
        assert_eq!(n.events_stream(), "PJ_EV_n1");
        assert_eq!(n.events_subject(), "pj.ev.n1");
        assert_eq!(n.heartbeat_subject(), "pj.hb.n1");
    }

    #[test]
    fn non_canonical_seqs_are_refused() {
        for bad in [
            "",
            "0",
            "01",
            "+1",
            "-1",
            " 1",
            "1 ",
            "18446744073709551616",
            "1e3",
        ] {
            assert!(decode_seq(H_SEQ, bad).is_err(), "{bad:?}");
        }
        assert_eq!(decode_seq(H_SEQ, "1"), Ok(1));
        assert_eq!(decode_seq(H_SEQ, &SEQ_MAX.to_string()), Ok(SEQ_MAX));
        assert!(decode_seq(H_SEQ, &(SEQ_MAX + 1).to_string()).is_err());
    }

    #[test]
    fn a_missing_or_uppercase_journal_is_refused() {
        let upper = "AB".repeat(16);
        assert!(decode_shipped(Some(&upper), Some("1")).is_err());
        assert_eq!(
            decode_shipped(None, Some("1")),
            Err(WireError::Missing(H_JOURNAL))
        );
        let ok = "ab".repeat(16);
        assert_eq!(
            decode_shipped(Some(&ok), None),
            Err(WireError::Missing(H_SEQ))
        );
    }

    proptest! {
        #[test]
        fn what_a_node_writes_decodes_to_where_it_is(
            journal in proptest::array::uniform16(any::<u8>()),
            seq in 1..=SEQ_MAX,
            from in 1..=SEQ_MAX,
            id in proptest::array::uniform16(any::<u8>()),
        ) {
            let h = record_headers(&journal, seq, EventId::from_bytes(id), 7, 1);
            let got = decode_shipped(header(&h, H_JOURNAL), header(&h, H_SEQ));
            prop_assert_eq!(got, Ok(Shipped { journal_id: journal, seq }));
            let from = from.min(seq);
            let g = gap_headers(&journal, from, seq, "compacted");
            let got = decode_shipped(header(&g, H_JOURNAL), header(&g, H_SEQ));
            prop_assert_eq!(got, Ok(Shipped { journal_id: journal, seq }));
            prop_assert_eq!(decode_seq(H_GAP_FROM, header(&g, H_GAP_FROM).unwrap()), Ok(from));
        }

        #[test]
        fn the_decoder_is_total(journal in ".{0,40}", seq in ".{0,24}") {
            let _ = decode_shipped(Some(&journal), Some(&seq));
        }
    }
}
