//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

use std::path::Path;

use crate::journal::fuzz::TempRoot;
use crate::spool::format::{SpoolHeader, Stream, encode_chunk};
use crate::spool::{Spool, SpoolDamage, SpoolOptions};

// ---------------------------------------------------------------------------------------------
// spool_recovery

/// A spool directory whose segment bytes are arbitrary (some framed validly, some with damage in
/// the middle and valid chunks after it): opening it read-only and writable never panics; reads
/// at any cursor return typed errors or bytes consistent with the bounds; damaged ranges are
/// ordered and disjoint and their cursors never read; a writable open finds the same damage and
/// total as a reader (it cuts nothing with a valid chunk after it); what a reader could read
/// before a writable open is still readable after it and after one more append.
pub fn spool_recovery(data: &[u8]) {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let Some(root) = TempRoot::new() else {
        return;
    };
    let dir = root.path().join("spool");
    if write_segments(&dir, shape, rest).is_none() {
        return;
    }
    let Some((before, before_total, before_damage)) = read_as_reader(&dir) else {
        return;
    };
    let Ok((mut writer, recovery)) = Spool::open_writer(&dir, [7; 16], SpoolOptions::default())
    else {
        return;
    };
    // A writable open cuts nothing that has a valid chunk after it: it finds what a reader found.
    assert_eq!(recovery.damaged, before_damage);
    assert_eq!(writer.total_bytes(), before_total);
    let total = writer.total_bytes();
    if writer.append(Stream::Stdout, b"appended").is_err() || writer.flush().is_err() {
        return;
    }
    drop(writer);
    let Ok((reader, recovery)) = Spool::open_reader(&dir) else {
        panic!("a spool that opened for writing no longer opens for reading");
    };
    assert_eq!(recovery.damaged, before_damage);
    let after = readable(&reader, &recovery.damaged);
    let flat = |v: &[(u64, Vec<u8>)]| v.iter().flat_map(|(_, b)| b.clone()).collect::<Vec<u8>>();
    let (before, after) = (flat(&before), flat(&after));
    assert!(after.starts_with(&before) || after.len() < before.len() && before.is_empty());
    assert_eq!(reader.total_bytes(), total + 8);
}

/// Writes one to three segment files of the input into `dir`, each either a header and chunks
/// (`segment_bytes`) or raw bytes, as `shape` says. With fewer than three files and the third
/// file's raw bit set, the last is shaped as a reused spare can leave it: valid chunks of
/// older cursors after its own, and (for an input of odd length) a name ahead of its header, a
/// rewrite whose header never landed. `None` when the files cannot be written.
fn write_segments(dir: &Path, shape: u8, rest: &[u8]) -> Option<()> {
    std::fs::create_dir_all(dir).ok()?;
    let files = usize::from(shape % 3) + 1;
    let reused = files < 3 && shape & 0x20 != 0;
    let piece = rest.len() / files;
    let mut cursor = 0u64;
    for i in 0..files {
        let chunk = &rest[i * piece..(i + 1) * piece];
        let first_cursor = cursor;
        let mut bytes = if shape & (8 << i) == 0 {
            segment_bytes(shape, i, chunk, &mut cursor)
        } else {
            chunk.to_vec()
        };
        let mut named = first_cursor;
        if reused && i + 1 == files {
            let mut old = 0u64;
            for part in chunk.chunks(29).filter(|p| !p.is_empty()).take(8) {
                encode_chunk(Stream::Stdout, old, part, &mut bytes);
                old += part.len() as u64;
            }
            if rest.len() % 2 == 1 {
                named = first_cursor + 1 + u64::from(shape);
            }
        }
        let name = format!("{named:020}.seg");
        std::fs::write(dir.join(name), &bytes).ok()?;
    }
    Some(())
}

/// The `i`th segment, with a valid header, from `chunk` of the input: valid chunks from
/// `cursor` on (which it advances), then, as `shape` says, garbage, valid chunks after the
/// garbage, and a flipped bit.
fn segment_bytes(shape: u8, i: usize, chunk: &[u8], cursor: &mut u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(
        &SpoolHeader {
            spool_id: [7; 16],
            first_cursor: *cursor,
            segment_index: i as u64,
            created_unix_ms: 0,
        }
        .encode(),
    );
    // Valid chunks built from the input, then the raw remainder as garbage.
    let (framed, garbage) = chunk.split_at(chunk.len() / 2);
    for part in framed.chunks(37).filter(|p| !p.is_empty()) {
        let stream = match part[0] % 3 {
            0 => Stream::Stdout,
            1 => Stream::Stderr,
            _ => Stream::Terminal,
        };
        encode_chunk(stream, *cursor, part, &mut bytes);
        *cursor += part.len() as u64;
    }
    if shape & 0x80 != 0 {
        bytes.extend_from_slice(garbage);
        if shape & 0x40 != 0 && !framed.is_empty() {
            // Valid chunks after the garbage that continue the cursors as damaged
            // chunks there could have: mid-segment damage, which recovery must keep.
            bytes.resize(bytes.len().next_multiple_of(8), 0xEE);
            let room = (bytes.len() as u64).saturating_sub(64 + 24);
            *cursor += room.min(1 + u64::from(framed[0]));
            for part in framed.chunks(53).filter(|p| !p.is_empty()) {
                encode_chunk(Stream::Stdout, *cursor, part, &mut bytes);
                *cursor += part.len() as u64;
            }
        }
    }
    if shape & 0x04 != 0 && bytes.len() > 64 {
        // One flipped bit among the chunks: damage in the middle, or a torn tail.
        let at = 64 + (bytes.len() - 64) / 3;
        bytes[at] ^= 1 << (shape % 8);
    }
    bytes
}

/// What a read-only open of `dir` can read, its total and its damage, after checking that the
/// damaged ranges are ordered, disjoint and inside the output. `None` when it does not open.
fn read_as_reader(dir: &Path) -> Option<Readable> {
    let (spool, recovery) = Spool::open_reader(dir).ok()?;
    assert!(
        spool.read(spool.total_bytes() + 1, 1).is_err(),
        "cursor ahead accepted"
    );
    // Damaged ranges are ordered, disjoint, non-empty, and inside the output.
    let mut last = (spool.retained_from(), 0u64);
    for d in &recovery.damaged {
        assert!(
            d.first_cursor >= last.0 && d.start_offset >= last.1,
            "{recovery:?}"
        );
        assert!(d.first_cursor < d.end_cursor && d.end_cursor < spool.total_bytes());
        assert!(d.start_offset < d.end_offset);
        last = (d.end_cursor, d.end_offset);
    }
    Some((
        readable(&spool, &recovery.damaged),
        spool.total_bytes(),
        recovery.damaged,
    ))
}

/// What a reader found: the bytes it read, by cursor; the total; the damage.
type Readable = (Vec<(u64, Vec<u8>)>, u64, Vec<SpoolDamage>);

/// Everything readable, stepping over the damaged ranges recovery reported.
fn readable(spool: &Spool, damaged: &[SpoolDamage]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = spool.retained_from();
    while at < spool.total_bytes() {
        if let Some(d) = damaged.iter().find(|d| d.first_cursor == at) {
            if let Ok(r) = spool.read(at, 1) {
                assert!(
                    r.skipped
                        .is_some_and(|s| s.kind == crate::spool::SkipKind::Damage),
                    "a damaged cursor was read"
                );
            }
            at = d.end_cursor;
            continue;
        }
        match spool.read(at, 4096) {
            Ok(r) => {
                assert!(r.retained_from <= r.total_bytes);
                let start = r.skipped.as_ref().map_or(at, |s| s.to);
                assert_eq!(r.next_cursor, start + r.bytes.len() as u64);
                if r.bytes.is_empty() {
                    break;
                }
                out.push((at, r.bytes));
                at = r.next_cursor;
            }
            Err(_) => break,
        }
    }
    out
}
