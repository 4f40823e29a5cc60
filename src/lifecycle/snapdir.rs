//! The snapshot directory, `<root>/snapshots/`: writing a snapshot durably, keeping the newest
//! two, and choosing the one a restore starts from (journal-format.md, "Snapshots and
//! compaction"). The bytes of a snapshot are `snapshot.rs`'s; this module is the file I/O.
//!
//! Invariants:
//! - A snapshot is visible under its name (`{seq:020}.snap`) only once it is whole and durable
//!   (tmp, fsync, rename, directory fsync); a leftover `.snap.tmp` never counts and is removed by
//!   the next write.
//! - Only snapshots of this journal that check (header and payload checksums) are counted as
//!   kept; the newest [`SNAPSHOTS_KEPT`] of them stay and older ones of this journal are removed
//!   after a new one is durable. A file that does not check, or that names another journal, is
//!   never removed here: it is reported at every open that reaches it.
//! - The restore's choice: the newest snapshot that decodes completely, names this journal, and
//!   covers everything compaction removed (`seq + 1 >= FLOOR.seq`); every snapshot passed over on
//!   the way is reported.

use std::path::Path;
use std::sync::Arc;

use super::replay::SnapshotProblem;
use super::snapshot::{self, SNAPSHOT_HEADER_BYTES, Snapshot, SnapshotHeader};
use crate::journal::{CrashPoints, Head, MappedPrefix};
use crate::limits::{SNAPSHOT_BYTES_MAX, SNAPSHOTS_KEPT};
use crate::root::dir::{Access, Dir, Kind};
use crate::spill::Backing;

/// The directory under the runtime root.
pub const SNAPSHOT_DIR: &str = "snapshots";

/// `00000000000000001234.snap` for a snapshot at seq 1234.
pub fn file_name(seq: u64) -> String {
    format!("{seq:020}.snap")
}

fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".snap")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The files of a snapshot directory.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Snapshot files (their names) by seq, ascending.
    pub snapshots: Vec<(u64, String)>,
    /// Leftovers of an interrupted write.
    pub tmp: Vec<String>,
    /// Anything else: reported, never read, never removed.
    pub unrecognised: Vec<String>,
}

/// Opens the snapshot directory `path` for reading (a symbolic link refused); `None` when
/// there is none.
fn open_reader(path: &Path) -> std::io::Result<Option<Dir>> {
    match Dir::reader(path) {
        Ok(dir) => Ok(Some(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Lists `dir`.
pub(crate) fn list(dir: &Dir) -> std::io::Result<Listing> {
    let mut listing = Listing::default();
    for name in dir.names()? {
        match name.to_str() {
            Some(n) if n.ends_with(".snap.tmp") => listing.tmp.push(n.to_owned()),
            Some(n) => match parse_name(n) {
                Some(seq) => listing.snapshots.push((seq, n.to_owned())),
                None => listing.unrecognised.push(n.to_owned()),
            },
            None => listing
                .unrecognised
                .push(name.to_string_lossy().into_owned()),
        }
    }
    listing.snapshots.sort();
    listing.tmp.sort();
    listing.unrecognised.sort();
    Ok(listing)
}

/// The size of the file `name` of `dir` (0 when it is none).
fn size(dir: &Dir, name: &str) -> u64 {
    match dir.kind(name) {
        Ok(Some(Kind::File { len })) => len,
        _ => 0,
    }
}

/// A snapshot file's bytes: mapped read-only (no copy, no buffer to fault in: 9 MB at 11 000
/// finished processes), or read where the mapping fails.
enum FileBytes {
    Mapped(MappedPrefix),
    Read(Vec<u8>),
}

impl FileBytes {
    /// The bytes as what a restored store's settled frames are read from in place.
    fn into_backing(self) -> Arc<dyn Backing> {
        match self {
            FileBytes::Mapped(map) => Arc::new(map),
            FileBytes::Read(bytes) => Arc::new(bytes),
        }
    }
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(map) => map.bytes(),
            FileBytes::Read(bytes) => bytes,
        }
    }
}

/// Reads a snapshot file, refusing one larger than any snapshot may be before reading it.
fn read_bounded(dir: &Dir, name: &str) -> std::io::Result<FileBytes> {
    let file = dir.file(name, Access::Read)?;
    let len = file.metadata()?.len();
    if len > SNAPSHOT_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "{len} bytes exceed the snapshot limit of {SNAPSHOT_BYTES_MAX}"
        )));
    }
    let len = usize::try_from(len).unwrap_or(0);
    if len > 0 {
        match MappedPrefix::open(&file, len) {
            Ok(map) => return Ok(FileBytes::Mapped(map)),
            Err(e) => tracing::debug!(error = %e, snapshot = name, "not mapped, read instead"),
        }
    }
    let mut bytes = Vec::with_capacity(len);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, SNAPSHOT_BYTES_MAX),
        &mut bytes,
    )?;
    Ok(FileBytes::Read(bytes))
}

/// Why the snapshot named `seq` is not one a restore of the journal `head` may start from.
fn unusable(seq: u64, header: &SnapshotHeader, head: &Head) -> Option<String> {
    if header.seq != seq {
        return Some(format!(
            "its header says seq {}, its name {seq}",
            header.seq
        ));
    }
    match head.journal_id {
        None => return Some("there is no journal for it to resume".to_owned()),
        Some(id) if id != header.journal_id => {
            return Some("it belongs to another journal".to_owned());
        }
        Some(_) => {}
    }
    if let Some(floor) = head.floor
        && header.seq + 1 < floor.seq
    {
        return Some(format!(
            "it ends at seq {}, but compaction removed the records below seq {}",
            header.seq, floor.seq
        ));
    }
    None
}

/// The newest snapshot of `dir` a restore of the journal `head` may start from, decoded, with its
/// file's size; and every snapshot passed over on the way, with why (module doc).
pub(crate) fn load_best(
    dir: &Path,
    head: &Head,
) -> (Option<(Snapshot, u64)>, Vec<SnapshotProblem>) {
    let mut problems = Vec::new();
    let opened = open_reader(dir).and_then(|dir| match dir {
        Some(dir) => list(&dir).map(|listing| Some((dir, listing))),
        None => Ok(None),
    });
    let (dir, listing) = match opened {
        Ok(None) => return (None, problems),
        Ok(Some(listing)) => listing,
        Err(e) => {
            problems.push(SnapshotProblem {
                file: SNAPSHOT_DIR.to_owned(),
                reason: format!("cannot list: {e}"),
            });
            return (None, problems);
        }
    };
    for name in &listing.unrecognised {
        problems.push(SnapshotProblem {
            file: name.clone(),
            reason: "not a snapshot file name; ignored".to_owned(),
        });
    }
    for (seq, name) in listing.snapshots.iter().rev() {
        let problem = |reason: String| SnapshotProblem {
            file: name.clone(),
            reason,
        };
        let bytes = match read_bounded(&dir, name) {
            Ok(bytes) => bytes,
            Err(e) => {
                problems.push(problem(format!("cannot read: {e}")));
                continue;
            }
        };
        let file_bytes = bytes.len() as u64;
        let bytes = bytes.into_backing();
        let decoded = SnapshotHeader::decode(bytes.bytes()).and_then(|header| {
            match unusable(*seq, &header, head) {
                Some(reason) => Ok(Err(reason)),
                None => snapshot::decode_backed(&bytes).map(Ok),
            }
        });
        match decoded {
            Ok(Ok(snap)) => return (Some((snap, file_bytes)), problems),
            Ok(Err(reason)) => problems.push(problem(reason)),
            Err(e) => problems.push(problem(format!("damaged: {e}"))),
        }
    }
    (None, problems)
}

/// What `journal verify` says of one file of `snapshots/` (journal-format.md, the verify
/// report's `snapshots` field).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotVerdict {
    /// The file's name under `snapshots/`.
    pub file: String,
    /// `snapshot`, `temporary` (a `.snap.tmp` of an interrupted write: never read) or
    /// `unrecognised`.
    pub kind: &'static str,
    pub bytes: u64,
    /// The seq its header names; `None` when the header does not decode.
    pub seq: Option<u64>,
    /// The header's and the payload's checksums hold.
    pub checksums: bool,
    /// The whole snapshot decodes (every frame and every check).
    pub decodes: bool,
    /// A restore of this journal may start from it.
    pub usable: bool,
    /// It is the one a restore starts from: the newest usable one.
    pub chosen: bool,
    /// Why it is not usable; `None` when it is, and for a temporary file.
    pub problem: Option<String>,
}

impl SnapshotVerdict {
    fn new(file: String, kind: &'static str, bytes: u64) -> Self {
        SnapshotVerdict {
            file,
            kind,
            bytes,
            seq: None,
            checksums: false,
            decodes: false,
            usable: false,
            chosen: false,
            problem: None,
        }
    }
}

/// The verdict on every file of `<root>/snapshots/` (a missing directory has none), by name,
/// against the journal of `<root>/journal/` as it is now: read-only, taking no lock.
pub fn verify(root: &Path) -> std::io::Result<Vec<SnapshotVerdict>> {
    let head = crate::journal::compact::peek_head(&root.join("journal"))?;
    let Some(dir) = open_reader(&root.join(SNAPSHOT_DIR))? else {
        return Ok(Vec::new());
    };
    let listing = list(&dir)?;
    let mut verdicts = Vec::new();
    for name in &listing.unrecognised {
        let mut v = SnapshotVerdict::new(name.clone(), "unrecognised", size(&dir, name));
        v.problem = Some("not a snapshot file name; never read".to_owned());
        verdicts.push(v);
    }
    for name in &listing.tmp {
        verdicts.push(SnapshotVerdict::new(
            name.clone(),
            "temporary",
            size(&dir, name),
        ));
    }
    let mut chosen = false;
    for (seq, name) in listing.snapshots.iter().rev() {
        let mut v = SnapshotVerdict::new(name.clone(), "snapshot", size(&dir, name));
        v.problem = match read_bounded(&dir, name) {
            Err(e) => Some(format!("cannot read: {e}")),
            Ok(bytes) => match SnapshotHeader::decode(&bytes) {
                Err(e) => Some(format!("damaged: {e}")),
                Ok(header) => {
                    v.seq = Some(header.seq);
                    let payload = &bytes[SNAPSHOT_HEADER_BYTES..];
                    v.checksums = header.payload_bytes == payload.len() as u64
                        && crate::journal::format::masked_crc(payload) == header.payload_crc;
                    let decoded = snapshot::decode(&bytes);
                    v.decodes = decoded.is_ok();
                    match decoded {
                        Err(e) => Some(format!("damaged: {e}")),
                        Ok(_) => unusable(*seq, &header, &head),
                    }
                }
            },
        };
        v.usable = v.problem.is_none();
        v.chosen = v.usable && !chosen;
        chosen |= v.usable;
        verdicts.push(v);
    }
    verdicts.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(verdicts)
}

/// History no restore can rebuild: compaction removed the records below `below_seq` and no
/// usable snapshot holds what they did (`journal verify` reports it as damage; a restore's
/// `lost_below_seq` is the same finding).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LostHistory {
    /// The floor's seq: every record below it is gone.
    pub below_seq: u64,
    /// How many records that is (seqs 1 to `below_seq - 1`).
    pub records: u64,
    /// Why no snapshot stands in for them.
    pub reason: String,
}

/// The history lost below `floor`, given the verdicts of [`verify`] on the same root: `None`
/// when nothing was compacted or a snapshot a restore would choose covers the floor.
pub fn lost_history(
    floor: Option<&crate::journal::Floor>,
    verdicts: &[SnapshotVerdict],
) -> Option<LostHistory> {
    let below_seq = floor.map(|f| f.seq).filter(|&seq| seq > 1)?;
    if verdicts.iter().any(|v| v.chosen) {
        return None;
    }
    let snapshots = verdicts.iter().filter(|v| v.kind == "snapshot").count();
    let reason = if snapshots == 0 {
        "no snapshot is left to hold them".to_owned()
    } else {
        format!("none of the {snapshots} snapshot file(s) is usable for this journal")
    };
    Some(LostHistory {
        below_seq,
        records: below_seq - 1,
        reason,
    })
}

/// Whether the file at `path` is a whole snapshot of `journal_id`: header and payload checksums
/// hold (a cheaper check than a full decode, for deciding what to keep).
fn checks(dir: &Dir, name: &str, seq: u64, journal_id: [u8; 16]) -> bool {
    let Ok(file) = dir.file(name, Access::Read) else {
        return false;
    };
    let mut file = std::io::BufReader::with_capacity(CHECK_BUFFER_BYTES, file);
    let mut head = [0u8; SNAPSHOT_HEADER_BYTES];
    if std::io::Read::read_exact(&mut file, &mut head).is_err() {
        return false;
    }
    let Ok(header) = SnapshotHeader::decode(&head) else {
        return false;
    };
    // The payload read a buffer at a time, never whole: the snapshots of a large root are tens
    // of megabytes, and this runs at every persist.
    let (mut crc, mut held) = (crc32fast::Hasher::new(), 0u64);
    while held <= SNAPSHOT_BYTES_MAX {
        let read = match std::io::BufRead::fill_buf(&mut file) {
            Ok([]) => break,
            Ok(bytes) => {
                crc.update(bytes);
                bytes.len()
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        };
        held += read as u64;
        std::io::BufRead::consume(&mut file, read);
    }
    header.seq == seq
        && header.journal_id == journal_id
        && header.payload_bytes == held
        && crate::journal::format::mask(crc.finalize()) == header.payload_crc
}

/// The buffer [`checks`] reads a kept snapshot through.
const CHECK_BUFFER_BYTES: usize = 1 << 20;

/// Writes the snapshot `parts` (laid end to end) at `seq` under `dir` durably, then removes this
/// journal's snapshots older than the newest [`SNAPSHOTS_KEPT`]. Returns the seqs of the
/// snapshots kept that check, ascending (the new one last).
pub(crate) fn write(
    dir: &Dir,
    seq: u64,
    journal_id: [u8; 16],
    parts: &[&[u8]],
    crash: &mut dyn CrashPoints,
) -> std::io::Result<Vec<u64>> {
    for tmp in list(dir)?.tmp {
        dir.remove(&tmp)?;
    }
    let steps = crate::journal::compact::DurableSteps {
        write: "snapshot: write tmp",
        fsync: "snapshot: fsync tmp",
        rename: "snapshot: rename",
        fsync_dir: "snapshot: fsync dir",
    };
    crate::journal::compact::write_durably(dir, &file_name(seq), parts, steps, crash)?;
    // What counts as kept: this journal's snapshots at or below the new one that check.
    let mut ours: Vec<(u64, String)> = list(dir)?
        .snapshots
        .into_iter()
        .filter(|(s, name)| *s <= seq && (*s == seq || checks(dir, name, *s, journal_id)))
        .collect();
    let old = ours.len().saturating_sub(SNAPSHOTS_KEPT);
    let mut removed = false;
    for (_, name) in ours.drain(..old) {
        crash.reached("snapshot: delete old")?;
        dir.remove(&name)?;
        removed = true;
    }
    if removed {
        crash.reached("snapshot: fsync dir after delete")?;
        dir.sync()?;
    }
    Ok(ours.into_iter().map(|(s, _)| s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::NoCrash;

    /// A snapshot file of `payload_bytes` bytes of payload, as `assemble` heads one, written in
    /// three parts.
    fn write_one(dir: &Dir, seq: u64, journal_id: [u8; 16], payload_bytes: usize) -> Vec<u8> {
        let payload: Vec<u8> = (0..payload_bytes).map(|i| (i * 31 % 251) as u8).collect();
        let header = SnapshotHeader {
            journal_id,
            seq,
            payload_bytes: payload.len() as u64,
            created_unix_ms: 1,
            payload_crc: crate::journal::format::masked_crc(&payload),
        };
        let (a, b) = payload.split_at(payload_bytes / 3);
        let head = [header.encode().as_slice(), a].concat();
        write(dir, seq, journal_id, &[&head, b, &[]], &mut NoCrash).unwrap();
        [head.as_slice(), b].concat()
    }

    /// A kept snapshot checks exactly when its header and the whole payload, read a buffer at a
    /// time, say so: a flipped byte anywhere, a cut, another seq or journal fail it.
    #[test]
    fn a_snapshot_checks_only_whole_and_for_its_own_journal() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let id = [3; 16];
        // Across several of the check's buffers, and not a multiple of one.
        let bytes = write_one(&dir, 10, id, 3 * CHECK_BUFFER_BYTES + 77);
        let name = file_name(10);
        assert!(checks(&dir, &name, 10, id));
        assert!(!checks(&dir, &name, 11, id), "another seq");
        assert!(!checks(&dir, &name, 10, [4; 16]), "another journal");
        let path = tmp.path().join(&name);
        for at in [
            SNAPSHOT_HEADER_BYTES + 5,
            CHECK_BUFFER_BYTES + 3,
            bytes.len() - 1,
        ] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            std::fs::write(&path, &damaged).unwrap();
            assert!(!checks(&dir, &name, 10, id), "a flipped byte at {at}");
        }
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(!checks(&dir, &name, 10, id), "cut short");
        std::fs::write(&path, [bytes.as_slice(), b"x"].concat()).unwrap();
        assert!(!checks(&dir, &name, 10, id), "a byte more");
        std::fs::write(&path, &bytes[..SNAPSHOT_HEADER_BYTES - 1]).unwrap();
        assert!(!checks(&dir, &name, 10, id), "no whole header");
        std::fs::write(&path, &bytes).unwrap();
        assert!(checks(&dir, &name, 10, id));
    }

    /// A snapshot file is mapped, with the bytes a read gives; an empty one is read, and a
    /// restore reports it, as one cut short anywhere, instead of mapping nothing.
    #[test]
    fn a_snapshot_is_mapped_with_the_bytes_of_a_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let id = [3; 16];
        let bytes = write_one(&dir, 10, id, 2 * CHECK_BUFFER_BYTES + 5);
        let name = file_name(10);
        let mapped = read_bounded(&dir, &name).unwrap();
        assert!(matches!(mapped, FileBytes::Mapped(_)));
        assert_eq!(&*mapped, bytes.as_slice());
        let path = tmp.path().join(&name);
        for cut in [0, 1, SNAPSHOT_HEADER_BYTES - 1, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let read = read_bounded(&dir, &name).unwrap();
            assert_eq!(&*read, &bytes[..cut]);
            assert_eq!(matches!(read, FileBytes::Read(_)), cut == 0, "cut at {cut}");
            let head = Head {
                journal_id: Some(id),
                floor: None,
            };
            let (found, problems) = load_best(tmp.path(), &head);
            assert!(found.is_none(), "cut at {cut}");
            assert_eq!(problems.len(), 1, "cut at {cut}: {problems:?}");
            assert!(problems[0].reason.starts_with("damaged"), "{problems:?}");
        }
    }
}
