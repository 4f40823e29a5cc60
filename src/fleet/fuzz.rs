//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

use super::Heartbeat;
use super::wire::{self, decode_shipped, gap_headers, record_headers};
use crate::journal::EventId;

/// An output message's end from its `Pj-Cursor` and `Pj-Gap-To` (the input split at its first
/// two NUL bytes) and a body of the rest's length: never a panic; what decodes lies after the
/// cursor (a gap) or at the cursor plus the body, and the cursor is canonical.
fn output_end(data: &[u8]) {
    let mut parts = data.splitn(3, |&b| b == 0);
    let cursor = parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let gap_to = parts
        .next()
        .and_then(|p| std::str::from_utf8(p).ok())
        .filter(|t| !t.is_empty());
    let body = parts.next().map_or(0, <[u8]>::len);
    let Ok(end) = wire::decode_output_end(cursor, gap_to, body) else {
        return;
    };
    let cursor = wire::decode_cursor(wire::H_CURSOR, cursor.unwrap_or(""));
    let Ok(cursor) = cursor else {
        panic!("an end decoded from a cursor that does not");
    };
    assert_eq!(
        cursor.to_string().as_str(),
        data.split(|&b| b == 0)
            .next()
            .map_or("", |c| std::str::from_utf8(c).unwrap_or(""))
    );
    match gap_to {
        Some(_) => assert!(end > cursor),
        None => assert_eq!(end, cursor + body as u64),
    }
}

/// What a node reads back from a fleet's server, which it does not trust: the headers of a
/// stream's last message (`Pj-Journal` and `Pj-Seq`, the input split at its first NUL byte,
/// each side taken as UTF-8 where it is), an output message's end ([`output_end`]), and a
/// heartbeat's or a fleet state entry's JSON body (the whole input). Never a
/// panic; what decodes is canonical (writing it back gives the same text) and is what a node's
/// own headers for that place decode to.
pub fn fleet_message(data: &[u8]) {
    let _ = serde_json::from_slice::<Heartbeat>(data);
    let _ = serde_json::from_slice::<super::state::ProcessEntry>(data);
    output_end(data);
    let (journal, seq) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let journal = std::str::from_utf8(journal).ok();
    let seq = seq.and_then(|s| std::str::from_utf8(s).ok());
    let Ok(shipped) = decode_shipped(journal, seq) else {
        return;
    };
    assert_eq!(
        journal,
        Some(wire::journal_hex(&shipped.journal_id).as_str())
    );
    assert_eq!(seq, Some(shipped.seq.to_string().as_str()));
    let id = EventId::from_bytes(shipped.journal_id);
    let record = record_headers(&shipped.journal_id, shipped.seq, id, 1, 1);
    let gap = gap_headers(&shipped.journal_id, 1, shipped.seq, wire::GAP_COMPACTED);
    for headers in [record, gap] {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            decode_shipped(get(wire::H_JOURNAL), get(wire::H_SEQ)),
            Ok(shipped)
        );
    }
}
