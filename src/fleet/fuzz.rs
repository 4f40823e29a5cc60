//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

use super::Heartbeat;
use super::wire::{self, decode_shipped, gap_headers, record_headers};
use crate::journal::EventId;

/// What a node reads back from a fleet's server, which it does not trust: the headers of a
/// stream's last message (`Pj-Journal` and `Pj-Seq`, the input split at its first NUL byte,
/// each side taken as UTF-8 where it is) and a heartbeat's JSON body (the whole input). Never a
/// panic; what decodes is canonical (writing it back gives the same text) and is what a node's
/// own headers for that place decode to.
pub fn fleet_message(data: &[u8]) {
    let _ = serde_json::from_slice::<Heartbeat>(data);
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
