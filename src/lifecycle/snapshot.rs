//! Snapshots of the lifecycle projection: the bytes of a snapshot file, encoded and decoded
//! (journal-format.md, "Snapshots and compaction"). Pure: no I/O (the files are `snapdir.rs`'s).
//!
//! ```text
//! file    := header payload                    header: 64 bytes, below
//! payload := frame(Meta) frame(Manifest){Meta.manifests}
//!            frame(Vec<RetainedStep>){Meta.retained_frames}
//!            frame(Issue){Meta.issues} frame(Option<GateChanged>)
//!            frame(Option<AdmissionLimitSet>)
//! frame   := length u32 | codec bytes (length bytes, at most SNAPSHOT_FRAME_BYTES_MAX)
//! ```
//!
//! A snapshot at `seq` holds exactly what replaying the records with seq `1..=seq` gives: every
//! manifest (with its registration's event ID, in registration order), the replay report's counts
//! and issues, the pause gate's last change, the admission limit last set, and the **retained IDs**: the event IDs of records that a retry could still name
//! after those records are compacted away, each with its record's seq and kind, stored as which
//! of its manifest's [`candidates`] it is. Those are, for every manifest, the five IDs its
//! registration reserved (its own, running, terminal, lost,
//! completion) and the IDs derived from them for follow-up records (`event::derived`: the
//! publication of running, terminal and lost, the completion notice, the scope, the release),
//! whichever the journal holds. Every other record's ID is a fresh v7 ID that lives only in the
//! memory of the supervisor that appended it (checkpoints, stop requests, closed input, gaps, the
//! gate's changes, admission limits, human-input marks, fired and failed deadlines):
//! nothing persisted names it, so nothing can retry it after a restart; the supervisor retries
//! such an append only within the call that allocated its ID. A writer that compacts hands the
//! journal this snapshot's retained IDs, and its index forgets every other ID of a removed record
//! (`Journal::forget_ids_below`): it keeps what an open resuming from this snapshot would.
//!
//! Invariants: [`decode`] is total (a typed error, never a panic; a count is never trusted for an
//! allocation beyond the bytes that remain), checks the header, both checksums, every frame and
//! every count, and accepts only what a replay could have produced ([`ManifestStore`]'s
//! registration checks and `manifest::consistent`; retained IDs ascending, each once, seqs in
//! `1..=seq`, kinds non-zero);
//! [`encode`] of what [`decode`] returns gives the same bytes back. The manifest and retained-ID
//! frames are read by hand (`read_manifest`, `read_retained`, on `codec::Reader`: bincode's
//! generic decoding was most of a restore); they accept exactly what bincode's derived decoders
//! accept, to equal values, and whatever they refuse goes to bincode, whose error is the one
//! reported ([`decode_reference`] decodes with bincode alone; `tests/it/snapshot_props.rs` and the
//! `snapshot_decode` fuzz target compare the two on every input).
//!
//! Adding a field to a manifest frame: add it to `ManifestOut` and `ManifestIn` in the same
//! place (at the end, as `retired` was), read it in `read_manifest` in that place (only for the
//! versions that have it), convert it in `manifest_in`, and bump [`SNAPSHOT_VERSION`]. Keep
//! reading the old versions (the reference decoder reads an older frame with the encoding of the
//! absent fields' defaults appended, `Frames::next_extended`): a snapshot the decoder refuses is
//! passed over, and when compaction removed the records it held, their projection is reported
//! lost (`lost_below_seq`).

use crate::journal::format::{u16_at, u32_at, u64_at};

use super::event::{AdmissionLimitSet, GateChanged, LifecycleIds, derived};
use super::manifest::{Held, ManifestIn, ManifestStore, manifest_in, manifest_out, read_manifest};
use super::replay::{ReplayIssue, ReplayReport};
use crate::codec::{self, CODEC_VERSION, Decode, Encode, Malformed, Reader};
use crate::journal::format::masked_crc;
use crate::journal::{EventId, RetainedId};
use crate::limits::{
    SEQ_MAX, SNAPSHOT_BYTES_MAX, SNAPSHOT_FRAME_BYTES_MAX, SNAPSHOT_IDS_PER_FRAME,
};
use crate::spill::{Backing, BytesWriter, Spill, SpillError};
use std::sync::Arc;

/// First eight bytes of every snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"PJSNAPS\0";
/// Version of the snapshot layout described here. Older versions are read too: a version 1 file
/// (written before retirement existed) lacks each manifest's trailing `retired`,
/// `awaiting_input`, `deadline`, `deadline_failures` and `env`, a version 2 file (before the
/// pause gate and deadlines) the last four and the gate frame, a version 3 file (before
/// `RegisteredV2`) the `env`, and every version before 5 the admission-limit frame; they read
/// as `None` and empty, which is what their writers, which knew no such records, had.
pub const SNAPSHOT_VERSION: u16 = 5;
/// The oldest version still read.
pub const SNAPSHOT_VERSION_MIN: u16 = 1;
/// What a version 3 manifest frame lacks, encoded: `env` `None` (a zero byte).
const V3_MANIFEST_SUFFIX: [u8; 1] = [0; 1];
/// What a version 2 manifest frame lacks: `awaiting_input` and `deadline` `None` (a zero byte
/// each), `deadline_failures` empty (a zero u64 length), then what version 3 lacks.
const V2_MANIFEST_SUFFIX: [u8; 11] = [0; 11];
/// What a version 1 manifest frame lacks: `retired` `None`, then what version 2 lacks.
const V1_MANIFEST_SUFFIX: [u8; 12] = [0; 12];
/// Bytes of the header.
pub const SNAPSHOT_HEADER_BYTES: usize = 64;

// Header layout, each offset the previous one plus the previous field's width.
const SN_MAGIC_OFFSET: usize = 0;
const SN_VERSION_OFFSET: usize = SN_MAGIC_OFFSET + 8;
const SN_HEADER_BYTES_OFFSET: usize = SN_VERSION_OFFSET + 2;
const SN_CODEC_OFFSET: usize = SN_HEADER_BYTES_OFFSET + 2;
const SN_RESERVED_OFFSET: usize = SN_CODEC_OFFSET + 1;
const SN_JOURNAL_ID_OFFSET: usize = SN_RESERVED_OFFSET + 3;
const SN_SEQ_OFFSET: usize = SN_JOURNAL_ID_OFFSET + 16;
const SN_PAYLOAD_BYTES_OFFSET: usize = SN_SEQ_OFFSET + 8;
const SN_CREATED_MS_OFFSET: usize = SN_PAYLOAD_BYTES_OFFSET + 8;
const SN_PAYLOAD_CRC_OFFSET: usize = SN_CREATED_MS_OFFSET + 8;
const SN_CRC_OFFSET: usize = SN_PAYLOAD_CRC_OFFSET + 4;
const _: () = assert!(SN_CRC_OFFSET + 4 == SNAPSHOT_HEADER_BYTES);

/// Bytes of a frame's length prefix.
const FRAME_PREFIX_BYTES: usize = 4;

/// Bytes of one encoded [`RetainedStep`].
const RETAINED_STEP_BYTES: usize = 4 + 1 + 8 + 2;

/// Why bytes are not a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    #[error("fewer bytes than a snapshot header")]
    Truncated,
    #[error("bad magic")]
    BadMagic,
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("unsupported snapshot version {0}")]
    UnsupportedVersion(u16),
    #[error("header length {0} is not 64")]
    BadHeaderBytes(u16),
    #[error("unsupported codec version {0}")]
    UnsupportedCodec(u8),
    #[error("reserved bytes are not zero")]
    ReservedNonZero,
    #[error("seq out of range")]
    OutOfRange,
    #[error("the header says {declared} payload bytes, the file holds {held}")]
    Length { declared: u64, held: u64 },
    #[error("payload checksum mismatch")]
    PayloadChecksum,
    #[error("frame at payload offset {at}: {reason}")]
    Frame { at: u64, reason: String },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot encode the snapshot: {0}")]
    Encode(String),
}

/// The fixed header of a snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// The journal the snapshot was taken of.
    pub journal_id: [u8; 16],
    /// The projection holds exactly the records with seq `1..=seq`.
    pub seq: u64,
    pub payload_bytes: u64,
    /// When the snapshot was taken (informational).
    pub created_unix_ms: u64,
    /// `masked_crc` of the payload.
    pub payload_crc: u32,
}

impl SnapshotHeader {
    pub fn encode(&self) -> [u8; SNAPSHOT_HEADER_BYTES] {
        let mut b = [0u8; SNAPSHOT_HEADER_BYTES];
        b[SN_MAGIC_OFFSET..SN_MAGIC_OFFSET + 8].copy_from_slice(&SNAPSHOT_MAGIC);
        b[SN_VERSION_OFFSET..SN_VERSION_OFFSET + 2]
            .copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        b[SN_HEADER_BYTES_OFFSET..SN_HEADER_BYTES_OFFSET + 2]
            .copy_from_slice(&(SNAPSHOT_HEADER_BYTES as u16).to_le_bytes());
        b[SN_CODEC_OFFSET] = CODEC_VERSION;
        b[SN_JOURNAL_ID_OFFSET..SN_JOURNAL_ID_OFFSET + 16].copy_from_slice(&self.journal_id);
        b[SN_SEQ_OFFSET..SN_SEQ_OFFSET + 8].copy_from_slice(&self.seq.to_le_bytes());
        b[SN_PAYLOAD_BYTES_OFFSET..SN_PAYLOAD_BYTES_OFFSET + 8]
            .copy_from_slice(&self.payload_bytes.to_le_bytes());
        b[SN_CREATED_MS_OFFSET..SN_CREATED_MS_OFFSET + 8]
            .copy_from_slice(&self.created_unix_ms.to_le_bytes());
        b[SN_PAYLOAD_CRC_OFFSET..SN_PAYLOAD_CRC_OFFSET + 4]
            .copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = masked_crc(&b[..SN_CRC_OFFSET]);
        b[SN_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the header at the start of `bytes`, in the order journal-format.md lists.
    pub fn decode(bytes: &[u8]) -> Result<SnapshotHeader, SnapshotError> {
        let Some(b) = bytes.get(..SNAPSHOT_HEADER_BYTES) else {
            return Err(SnapshotError::Truncated);
        };
        if b[SN_MAGIC_OFFSET..SN_MAGIC_OFFSET + 8] != SNAPSHOT_MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        if u32_at(b, SN_CRC_OFFSET) != masked_crc(&b[..SN_CRC_OFFSET]) {
            return Err(SnapshotError::HeaderChecksum);
        }
        let version = u16_at(b, SN_VERSION_OFFSET);
        if !(SNAPSHOT_VERSION_MIN..=SNAPSHOT_VERSION).contains(&version) {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let header_bytes = u16_at(b, SN_HEADER_BYTES_OFFSET);
        if usize::from(header_bytes) != SNAPSHOT_HEADER_BYTES {
            return Err(SnapshotError::BadHeaderBytes(header_bytes));
        }
        if b[SN_CODEC_OFFSET] != CODEC_VERSION {
            return Err(SnapshotError::UnsupportedCodec(b[SN_CODEC_OFFSET]));
        }
        if b[SN_RESERVED_OFFSET..SN_RESERVED_OFFSET + 3] != [0; 3] {
            return Err(SnapshotError::ReservedNonZero);
        }
        let seq = u64_at(b, SN_SEQ_OFFSET);
        if seq == 0 || seq > SEQ_MAX {
            return Err(SnapshotError::OutOfRange);
        }
        let mut journal_id = [0u8; 16];
        journal_id.copy_from_slice(&b[SN_JOURNAL_ID_OFFSET..SN_JOURNAL_ID_OFFSET + 16]);
        Ok(SnapshotHeader {
            journal_id,
            seq,
            payload_bytes: u64_at(b, SN_PAYLOAD_BYTES_OFFSET),
            created_unix_ms: u64_at(b, SN_CREATED_MS_OFFSET),
            payload_crc: u32_at(b, SN_PAYLOAD_CRC_OFFSET),
        })
    }
}

/// A retained ID as a snapshot stores it: which of its manifest's candidate IDs
/// ([`candidates`]) it is, and its record's seq and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Encode, Decode)]
pub struct RetainedStep {
    /// The manifest's position in registration order.
    pub manifest: u32,
    /// The index in [`candidates`].
    pub which: u8,
    pub seq: u64,
    pub kind: u16,
}

/// Candidate IDs per manifest.
pub const CANDIDATES: usize = 11;

/// The IDs a retry could name after compaction (module doc), of the manifest registered under
/// `registration` with `ids`, in the order [`RetainedStep::which`] counts them.
pub fn candidates(registration: EventId, ids: &LifecycleIds) -> [EventId; CANDIDATES] {
    [
        registration,
        ids.running,
        ids.terminal,
        ids.lost,
        ids.completion,
        ids.running.derived(derived::PUBLISHED),
        ids.terminal.derived(derived::PUBLISHED),
        ids.lost.derived(derived::PUBLISHED),
        ids.completion.derived(derived::NOTIFIED),
        ids.running.derived(derived::SCOPED),
        ids.terminal.derived(derived::RELEASED),
    ]
}

/// What a snapshot holds.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub header: SnapshotHeader,
    pub store: ManifestStore,
    /// Ascending by manifest, then by candidate.
    pub retained: Vec<RetainedStep>,
    /// The replay report of the records `1..=seq` (counts and issues; no snapshot fields).
    pub replay: ReplayReport,
}

impl Snapshot {
    /// The retained IDs, as the journal takes them ([`crate::journal::Resume::ids`]).
    pub fn retained_ids(&self) -> Vec<RetainedId> {
        let mut out = Vec::with_capacity(self.retained.len());
        // The steps are ascending by manifest (as `decode` checks): each manifest's candidates
        // are derived once, for all of its steps.
        let mut entries = self.store.allocations().enumerate();
        let mut current: Option<(usize, [EventId; CANDIDATES])> = None;
        let mut block = 0;
        for r in &self.retained {
            let manifest = r.manifest as usize;
            // By reference: the candidates are 176 bytes, and copying them for each step was a
            // third of this loop.
            if current.as_ref().is_none_or(|(at, _)| *at != manifest) {
                // Each manifest's IDs in ascending order: the journal sorts them all, in one
                // pass when they come in ascending runs (time-ordered IDs of processes in
                // registration order are).
                sort_by_id(&mut out[block..]);
                block = out.len();
                current = entries
                    .by_ref()
                    .find(|(at, _)| *at == manifest)
                    .map(|(at, (registration, ids))| (at, candidates(registration, &ids)));
            }
            let Some(id) = current
                .as_ref()
                .and_then(|(_, c)| c.get(usize::from(r.which)).copied())
            else {
                continue;
            };
            out.push(RetainedId {
                id,
                seq: r.seq,
                kind: r.kind,
            });
        }
        sort_by_id(&mut out[block..]);
        out
    }
}

fn sort_by_id(ids: &mut [RetainedId]) {
    ids.sort_unstable_by_key(|r| (crate::idhash::order_key(r.id.as_bytes()), r.seq));
}

// ---------------------------------------------------------------------------------------------
// Frames. Field order is part of the format (journal-format.md lists each struct).

#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
struct Meta {
    manifests: u64,
    retained_frames: u64,
    issues: u64,
    lifecycle_events: u64,
    other_events: u64,
}

#[derive(Encode, Decode)]
struct Issue {
    /// True for a record that did not decode, false for an event replay rejected.
    undecodable: bool,
    seq: u64,
    handle: Option<String>,
    error: String,
}

/// Reads a frame of [`RetainedStep`]s by hand (as [`read_manifest`], for `Vec<RetainedStep>`).
fn read_retained(r: &mut Reader<'_>) -> Result<Vec<RetainedStep>, Malformed> {
    let n = r.count(RETAINED_STEP_BYTES)?;
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        steps.push(RetainedStep {
            manifest: r.u32()?,
            which: r.u8()?,
            seq: r.u64()?,
            kind: r.u16()?,
        });
    }
    Ok(steps)
}

/// Appends one frame holding `value`.
fn push_frame<T: Encode>(out: &mut Vec<u8>, value: &T) -> Result<(), SnapshotError> {
    let at = out.len();
    out.extend_from_slice(&[0; FRAME_PREFIX_BYTES]);
    let len = codec::encode_into(value, out).map_err(|e| SnapshotError::Encode(e.to_string()))?;
    out[at..at + FRAME_PREFIX_BYTES].copy_from_slice(&frame_prefix(len)?);
    Ok(())
}

/// Appends one frame holding `encoded`, a value encoded already (a settled manifest).
fn push_encoded(out: &mut Vec<u8>, encoded: &[u8]) -> Result<(), SnapshotError> {
    out.extend_from_slice(&frame_prefix(encoded.len())?);
    out.extend_from_slice(encoded);
    Ok(())
}

/// The length prefix of a frame of `len` bytes, within the frame limit.
fn frame_prefix(len: usize) -> Result<[u8; FRAME_PREFIX_BYTES], SnapshotError> {
    if len > SNAPSHOT_FRAME_BYTES_MAX {
        return Err(SnapshotError::Encode(format!(
            "a frame of {len} bytes exceeds the limit of {SNAPSHOT_FRAME_BYTES_MAX}"
        )));
    }
    // `len` fits: the frame limit is far below 4 GiB.
    Ok((len as u32).to_le_bytes())
}

/// The manifests of a store, encoded as frames: the part of a snapshot taken while the store
/// cannot change (under the lifecycle lock); the rest is assembled afterwards.
#[derive(Debug, Clone)]
pub(crate) struct ManifestFrames {
    /// The frames, laid end to end over the spill's chunks: page cache, not heap, where the
    /// spill has a file (for a large root, most of the snapshot).
    pub frames: Spill,
    pub count: u64,
    /// The pause gate, captured with the manifests.
    pub gate: Option<GateChanged>,
    /// The admission limit, captured with the manifests.
    pub admission_limit: Option<AdmissionLimitSet>,
}

/// The store's manifests as frames, written into `spill` (empty).
pub(crate) fn encode_manifests(
    store: &ManifestStore,
    spill: Spill,
) -> Result<ManifestFrames, SnapshotError> {
    let mut out = BytesWriter::new(spill);
    let mut bytes = Vec::new();
    let spilled = |e: SpillError| SnapshotError::Encode(format!("spill: {e}"));
    for entry in store.entries() {
        bytes.clear();
        let (registration, held) = entry.map_err(|position| {
            SnapshotError::Encode(format!("the slot of manifest {position} cannot be read"))
        })?;
        match held {
            Held::Live(m) => push_frame(&mut bytes, &manifest_out(registration, m))?,
            Held::Settled(frame) => push_encoded(&mut bytes, frame)?,
        }
        out.write(&bytes).map_err(spilled)?;
    }
    Ok(ManifestFrames {
        frames: out.finish().map_err(spilled)?,
        count: store.len() as u64,
        gate: store.gate().cloned(),
        admission_limit: store.admission_limit().cloned(),
    })
}

/// [`candidates`] of every manifest, in store order: `CANDIDATES` per manifest.
pub fn candidate_ids(store: &ManifestStore) -> Vec<EventId> {
    let mut out = Vec::with_capacity(store.len() * CANDIDATES);
    for (registration, ids) in store.allocations() {
        out.extend(candidates(registration, &ids));
    }
    out
}

/// A snapshot file as the parts it is written in: the header and meta, the manifests' frames
/// (borrowed from the capture, not copied: for a large root they are most of the file), and the
/// rest. [`SnapshotFile::parts`] laid end to end are the file.
#[derive(Debug)]
pub(crate) struct SnapshotFile<'a> {
    head: Vec<u8>,
    frames: Vec<&'a [u8]>,
    tail: Vec<u8>,
}

impl SnapshotFile<'_> {
    pub(crate) fn parts(&self) -> Vec<&[u8]> {
        let frames = self.frames.iter().copied();
        std::iter::once(self.head.as_slice())
            .chain(frames)
            .chain(std::iter::once(self.tail.as_slice()))
            .collect()
    }

    pub(crate) fn len(&self) -> u64 {
        self.parts().iter().map(|p| p.len() as u64).sum()
    }

    /// The file's bytes in one buffer.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.parts().concat()
    }
}

/// The whole snapshot file: header, meta, the manifests' frames, the retained IDs and the replay
/// report's issues.
pub(crate) fn assemble<'a>(
    journal_id: [u8; 16],
    seq: u64,
    created_unix_ms: u64,
    manifests: &'a ManifestFrames,
    retained: &[RetainedStep],
    replay: &ReplayReport,
) -> Result<SnapshotFile<'a>, SnapshotError> {
    let chunks = retained.chunks(SNAPSHOT_IDS_PER_FRAME);
    let meta = Meta {
        manifests: manifests.count,
        retained_frames: chunks.len() as u64,
        issues: (replay.rejected.len() + replay.undecodable.len()) as u64,
        lifecycle_events: replay.lifecycle_events,
        other_events: replay.other_events,
    };
    let mut head = vec![0u8; SNAPSHOT_HEADER_BYTES];
    push_frame(&mut head, &meta)?;
    let mut tail = Vec::new();
    for chunk in chunks {
        push_frame(&mut tail, &chunk)?;
    }
    let issues = (replay.rejected.iter().map(|i| (false, i)))
        .chain(replay.undecodable.iter().map(|i| (true, i)));
    for (undecodable, issue) in issues {
        push_frame(
            &mut tail,
            &Issue {
                undecodable,
                seq: issue.seq,
                handle: issue.handle.clone(),
                error: issue.error.clone(),
            },
        )?;
    }
    push_frame(&mut tail, &manifests.gate)?;
    push_frame(&mut tail, &manifests.admission_limit)?;
    let mut file = SnapshotFile {
        head,
        frames: manifests.frames.chunks().collect(),
        tail,
    };
    let len = file.len();
    if len > SNAPSHOT_BYTES_MAX {
        return Err(SnapshotError::Encode(format!(
            "{len} bytes exceed the snapshot limit of {SNAPSHOT_BYTES_MAX}"
        )));
    }
    let mut payload = file.parts();
    if let Some(head) = payload.first_mut() {
        *head = &head[SNAPSHOT_HEADER_BYTES..];
    }
    let header = SnapshotHeader {
        journal_id,
        seq,
        payload_bytes: len - SNAPSHOT_HEADER_BYTES as u64,
        created_unix_ms,
        payload_crc: crate::journal::format::masked_crc_of(&payload),
    };
    file.head[..SNAPSHOT_HEADER_BYTES].copy_from_slice(&header.encode());
    Ok(file)
}

/// Encodes a whole snapshot in one call (what `assemble` does in two steps).
#[cfg(any(test, feature = "test-support"))]
pub fn encode(
    journal_id: [u8; 16],
    seq: u64,
    created_unix_ms: u64,
    store: &ManifestStore,
    retained: &[RetainedStep],
    replay: &ReplayReport,
) -> Result<Vec<u8>, SnapshotError> {
    let manifests = encode_manifests(store, Spill::default())?;
    let file = assemble(
        journal_id,
        seq,
        created_unix_ms,
        &manifests,
        retained,
        replay,
    )?;
    Ok(file.to_vec())
}

/// Reads frames off a payload.
struct Frames<'a> {
    payload: &'a [u8],
    at: usize,
    /// The body of the last frame the hand decoder read whole (`next_with`), if the last frame
    /// read was one.
    read_by_hand: Option<&'a [u8]>,
}

impl<'a> Frames<'a> {
    fn error(&self, reason: impl Into<String>) -> SnapshotError {
        SnapshotError::Frame {
            at: self.at as u64,
            reason: reason.into(),
        }
    }

    fn remaining(&self) -> usize {
        self.payload.len() - self.at
    }

    /// The next frame's bytes (not consumed yet: [`Frames::advance`] does that).
    fn body(&self, what: &str) -> Result<&'a [u8], SnapshotError> {
        let rest = &self.payload[self.at..];
        let Some((prefix, body)) = rest.split_first_chunk::<FRAME_PREFIX_BYTES>() else {
            return Err(self.error(format!("{what}: the payload ends inside a frame length")));
        };
        let len = u32::from_le_bytes(*prefix) as usize;
        if len > SNAPSHOT_FRAME_BYTES_MAX || len > body.len() {
            return Err(self.error(format!("{what}: a frame of {len} bytes does not fit")));
        }
        Ok(&body[..len])
    }

    fn advance(&mut self, body: &[u8]) {
        self.at += FRAME_PREFIX_BYTES + body.len();
    }

    /// The next frame, through the reference decoder (bincode).
    fn next<T: Decode<()>>(&mut self, what: &str) -> Result<T, SnapshotError> {
        self.next_extended(what, &[])
    }

    /// The next frame through the reference decoder, decoded as if `suffix` followed its bytes:
    /// how an older version's frame, which lacks trailing fields, reads as the current type (the
    /// suffix is the encoding of their absent values).
    fn next_extended<T: Decode<()>>(
        &mut self,
        what: &str,
        suffix: &[u8],
    ) -> Result<T, SnapshotError> {
        let body = self.body(what)?;
        let decoded = if suffix.is_empty() {
            codec::decode_frame(body)
        } else {
            codec::decode_frame(&[body, suffix].concat())
        };
        let value = decoded.map_err(|e| self.error(format!("{what}: {e}")))?;
        self.advance(body);
        Ok(value)
    }

    /// The next frame, read by `fast` unless `how` asks for the reference decoder. Whatever
    /// `fast` refuses goes to the reference decoder, so the error (and, should the two ever
    /// disagree, the value) is the reference's.
    /// `suffix` is [`Frames::next_extended`]'s, for the reference decoder; `fast` reads the
    /// frame as it is.
    fn next_with<T: Decode<()>>(
        &mut self,
        what: &str,
        how: Decoder,
        suffix: &[u8],
        fast: impl FnOnce(&mut Reader<'_>) -> Result<T, Malformed>,
    ) -> Result<T, SnapshotError> {
        self.read_by_hand = None;
        if how == Decoder::Fast {
            let body = self.body(what)?;
            if let Some(mut r) = Reader::frame(body)
                && let Ok(value) = fast(&mut r)
                && r.finish().is_ok()
            {
                self.advance(body);
                self.read_by_hand = Some(body);
                return Ok(value);
            }
        }
        self.next_extended(what, suffix)
    }
}

/// How many entries to reserve room for: never more than the bytes left could hold.
fn capacity(count: u64, frames: &Frames<'_>, min_bytes: usize) -> usize {
    usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(frames.remaining() / min_bytes)
}

/// Which decoder reads the manifest and retained-ID frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoder {
    /// By hand ([`read_manifest`], [`read_retained`]): what restores use.
    Fast,
    /// bincode's derived decoders: the reference the fast one is held to.
    #[cfg(any(test, feature = "test-support"))]
    Reference,
}

/// Decodes a whole snapshot file. Total (module doc).
pub fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    decode_with(bytes, Decoder::Fast, Spill::default())
}

/// [`decode`] with every frame read by bincode's derived decoders: the reference that
/// [`decode`] must agree with, error for error and value for value (differential tests only).
#[doc(hidden)]
#[cfg(any(test, feature = "test-support"))]
pub fn decode_reference(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    decode_with(bytes, Decoder::Reference, Spill::default())
}

/// [`decode`] of a snapshot file's bytes as `backing` holds them: the settled manifests of the
/// store it gives keep their frames where they are in those bytes (no copy on the heap or in a
/// spill file), and the store holds `backing` for as long as it lives.
pub(crate) fn decode_backed(backing: &Arc<dyn Backing>) -> Result<Snapshot, SnapshotError> {
    let frames = Spill::over(Arc::clone(backing));
    decode_with(backing.bytes(), Decoder::Fast, frames)
}

fn decode_with(bytes: &[u8], how: Decoder, settled: Spill) -> Result<Snapshot, SnapshotError> {
    let (header, payload) = checked_payload(bytes)?;
    let version = u16_at(bytes, SN_VERSION_OFFSET);
    let mut frames = Frames {
        payload,
        at: 0,
        read_by_hand: None,
    };
    let meta: Meta = frames.next("meta")?;
    let mut store = read_manifests(&mut frames, &meta, how, version, settled)?;
    let retained = read_retained_frames(&mut frames, &meta, how, store.len(), header.seq)?;
    let replay = read_issues(&mut frames, &meta)?;
    // Versions before 3 have no gate frame: their writers knew no gate, so it never changed.
    if version >= 3 {
        let gate: Option<GateChanged> = frames.next("gate")?;
        store.restore_gate(gate);
    }
    // Versions before 5 have no admission-limit frame: their writers kept the limit in memory.
    if version >= 5 {
        let limit: Option<AdmissionLimitSet> = frames.next("admission limit")?;
        if limit.as_ref().is_some_and(|l| l.max_concurrent == Some(0)) {
            return Err(SnapshotError::Invalid(
                "an admission limit of 0, which no replay accepts".to_owned(),
            ));
        }
        store.restore_admission_limit(limit);
    }
    if frames.remaining() != 0 {
        return Err(frames.error(format!("{} bytes after the last frame", frames.remaining())));
    }
    Ok(Snapshot {
        header,
        store,
        retained,
        replay,
    })
}

/// The header of a snapshot file and its payload, once the header, the payload's length and its
/// checksum are checked.
fn checked_payload(bytes: &[u8]) -> Result<(SnapshotHeader, &[u8]), SnapshotError> {
    let header = SnapshotHeader::decode(bytes)?;
    let payload = &bytes[SNAPSHOT_HEADER_BYTES..];
    if header.payload_bytes != payload.len() as u64 {
        return Err(SnapshotError::Length {
            declared: header.payload_bytes,
            held: payload.len() as u64,
        });
    }
    if masked_crc(payload) != header.payload_crc {
        return Err(SnapshotError::PayloadChecksum);
    }
    Ok((header, payload))
}

/// The manifest frames, restored into a store in their order.
fn read_manifests(
    frames: &mut Frames<'_>,
    meta: &Meta,
    how: Decoder,
    version: u16,
    settled: Spill,
) -> Result<ManifestStore, SnapshotError> {
    let manifest_suffix: &[u8] = match version {
        1 => &V1_MANIFEST_SUFFIX,
        2 => &V2_MANIFEST_SUFFIX,
        3 => &V3_MANIFEST_SUFFIX,
        _ => &[],
    };
    // Each manifest goes straight into the store (a manifest is large: collecting them first
    // would write every one twice).
    let mut store = ManifestStore::restoring(capacity(meta.manifests, frames, 64), settled);
    for position in 0..meta.manifests {
        let at = frames.at;
        let w: ManifestIn = frames.next_with("manifest", how, manifest_suffix, |r| {
            read_manifest(r, version)
        })?;
        // A current frame the hand decoder read whole is what the store keeps for a settled
        // manifest, as it is: the bytes it was just decoded from, so they decode to it again.
        let frame = frames.read_by_hand.filter(|_| version == SNAPSHOT_VERSION);
        let (registration, manifest) = manifest_in(w).map_err(|reason| SnapshotError::Frame {
            at: at as u64,
            reason,
        })?;
        store
            .restore_one(position as usize, registration, manifest, frame)
            .map_err(|e| SnapshotError::Invalid(e.to_string()))?;
    }
    Ok(store)
}

/// The retained-ID frames, checked against the `manifests` restored and the snapshot's `seq`.
fn read_retained_frames(
    frames: &mut Frames<'_>,
    meta: &Meta,
    how: Decoder,
    manifests: usize,
    seq: u64,
) -> Result<Vec<RetainedStep>, SnapshotError> {
    let mut retained: Vec<RetainedStep> = Vec::with_capacity(capacity(
        meta.retained_frames
            .saturating_mul(SNAPSHOT_IDS_PER_FRAME as u64),
        frames,
        RETAINED_STEP_BYTES,
    ));
    for _ in 0..meta.retained_frames {
        let at = frames.at;
        let chunk: Vec<RetainedStep> = frames.next_with("retained IDs", how, &[], read_retained)?;
        check_retained_chunk(&mut retained, chunk, manifests, seq).map_err(|reason| {
            SnapshotError::Frame {
                at: at as u64,
                reason,
            }
        })?;
    }
    // A frame holds at most SNAPSHOT_IDS_PER_FRAME IDs, all full but the last (as encoded).
    if retained.len() as u64 > meta.retained_frames * SNAPSHOT_IDS_PER_FRAME as u64
        || (meta.retained_frames > 0
            && (retained.len() as u64)
                <= (meta.retained_frames - 1) * SNAPSHOT_IDS_PER_FRAME as u64)
    {
        return Err(SnapshotError::Invalid(
            "retained IDs not packed as the encoder packs them".to_owned(),
        ));
    }
    Ok(retained)
}

/// Appends one frame's retained IDs to `retained`, or says why the frame is invalid.
fn check_retained_chunk(
    retained: &mut Vec<RetainedStep>,
    chunk: Vec<RetainedStep>,
    manifests: usize,
    seq: u64,
) -> Result<(), String> {
    if chunk.is_empty() || chunk.len() > SNAPSHOT_IDS_PER_FRAME {
        return Err(format!("{} retained IDs in one frame", chunk.len()));
    }
    for r in chunk {
        let valid = (r.manifest as usize) < manifests
            && usize::from(r.which) < CANDIDATES
            && (1..=seq).contains(&r.seq)
            && r.kind != 0;
        if !valid {
            return Err(format!("retained ID {r:?} out of range"));
        }
        // Ascending, each at most once: as the encoder writes them.
        if retained
            .last()
            .is_some_and(|l| (l.manifest, l.which) >= (r.manifest, r.which))
        {
            return Err(format!("retained ID {r:?} out of order"));
        }
        retained.push(r);
    }
    Ok(())
}

/// The issue frames, as the replay report they came from (with `meta`'s counts).
fn read_issues(frames: &mut Frames<'_>, meta: &Meta) -> Result<ReplayReport, SnapshotError> {
    let mut replay = ReplayReport {
        lifecycle_events: meta.lifecycle_events,
        other_events: meta.other_events,
        ..ReplayReport::default()
    };
    let mut undecodable_seen = false;
    for _ in 0..meta.issues {
        let at = frames.at;
        let issue: Issue = frames.next("issue")?;
        // Rejected issues first, then undecodable ones, as encoded.
        if !issue.undecodable && undecodable_seen {
            return Err(SnapshotError::Frame {
                at: at as u64,
                reason: "issues out of order".to_owned(),
            });
        }
        undecodable_seen |= issue.undecodable;
        let entry = ReplayIssue {
            seq: issue.seq,
            handle: issue.handle,
            error: issue.error,
        };
        if issue.undecodable {
            replay.undecodable.push(entry);
        } else {
            replay.rejected.push(entry);
        }
    }
    Ok(replay)
}
