//! Spares: files of segments retention dropped, kept to hold the spool's next segments.
//!
//! A write into a file's pages that are already in the page cache costs the kernel about 40%
//! of a write into new pages (each new page is allocated, charged to the memory cgroup,
//! reserved on disk, and freed again when retention deletes its file: 83 to 114 against 206 to
//! 288 ms per GiB of 64 KiB writes through a ring of eight 8 MiB files), and deleting an 8 MiB
//! segment frees its pages there and then. A supervised spool whose output turns its window
//! over therefore renames a dropped segment's file to a spare name instead of deleting it, and
//! writes its next segment over that file's pages.
//!
//! Invariants:
//! - A spare is named as its last segment with `.tmp` appended (`{cursor:020}.seg.tmp`): a
//!   name no reader takes for a segment and a writable open removes.
//! - A spare is written only after a directory sync that followed its rename succeeded, so a
//!   power loss never shows a file under its old segment name with pages rewritten for another
//!   segment (those would read as damage in output the journal may still count as retained).
//! - A spare becomes a segment by a rename that replaces nothing, as a created segment fails if
//!   its name exists, and its header is written before any chunk, over the old one: a newest
//!   file whose header names a lower first cursor than its name is a rewrite whose header never
//!   reached the disk, so nothing in it was ever synced (recovery removes it, as a newest file
//!   shorter than a header).
//! - The old chunks past the new segment's are of lower cursors than any the new segment
//!   holds: they are never taken for chunks that continue its cursors (recovery's resync asks
//!   for a higher one), they read as a torn tail, and they are cut when the segment is sealed
//!   (before the next segment's file appears), when the spool finishes, and by a writable open.
//! - At most [`SPARES_MAX`] spares kept (a plan is lent the room left; plans that ran side by
//!   side may make more, and the extra go with the next plan), none once the window has stopped
//!   turning over (`Spool::retire_idle_spares`, which a supervisor calls once per checkpoint
//!   interval: a quiet process keeps no more than its window on disk), and none after the spool
//!   finishes: its last sync plan removes them, and so does dropping the handle.

use std::fs::File;

use super::io::SpoolIo;
use crate::root::dir::{Access, Dir, Kind};

pub(crate) use crate::limits::SPOOL_SPARES_MAX as SPARES_MAX;

/// The name of the spare made of segment file `name`.
pub(super) fn spare_name(name: &str) -> String {
    format!("{name}.tmp")
}

/// Whether `name` is a spare's, or a leftover of an interrupted creation under the same kind
/// of name: what readers ignore and a writable open removes.
pub(super) fn is_spare(name: &str) -> bool {
    name.ends_with(".seg.tmp")
}

/// What [`retire`] did with the doomed files it took.
#[derive(Debug, Default)]
pub(super) struct Retired {
    /// Every name taken off the doomed list, oldest first (removed, or renamed to a spare).
    pub taken: Vec<String>,
    /// The spares made, by their new names; not yet durable (see the module docs).
    pub spares: Vec<String>,
}

/// Removes the files of doomed segments, oldest first, turning up to `room` of them into
/// spares instead; stops at the first that can be neither (a file already gone counts as
/// removed). In order, so that what stays on disk is always a run of the oldest files next to
/// the window: older output kept, never a hole. Names on the list that are already spares are
/// removed.
pub(super) fn retire(io: &dyn SpoolIo, held: &Dir, doomed: &[String], room: usize) -> Retired {
    let mut retired = Retired::default();
    for name in doomed {
        // Only a regular file is worth keeping; whatever else stands under the name is
        // removed, or stops the removals, as it would without spares.
        let file = || matches!(held.kind(name), Ok(Some(Kind::File { .. })));
        if !is_spare(name) && retired.spares.len() < room && file() {
            let spare = spare_name(name);
            match io.rename_new(held, name, &spare) {
                Ok(()) => {
                    retired.spares.push(spare);
                    retired.taken.push(name.clone());
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    retired.taken.push(name.clone());
                    continue;
                }
                // A name in the way: the file is removed as it would have been without spares.
                Err(_) => {}
            }
        }
        match io.remove(held, name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, "spool retention could not delete a segment");
                break;
            }
        }
        retired.taken.push(name.clone());
    }
    retired
}

/// Turns spare `spare` into the file of segment `name`: renamed (replacing nothing) and opened
/// for writing. Returns the file and its length (its old bytes, all past the new segment's
/// chunks until they are overwritten). On an error after the rename the file is removed again,
/// so that `name` is free for a created segment.
pub(super) fn recycle(
    io: &dyn SpoolIo,
    held: &Dir,
    spare: &str,
    name: &str,
) -> std::io::Result<(File, u64)> {
    io.rename_new(held, spare, name)?;
    let opened = held
        .file(name, Access::ReadWrite)
        .and_then(|file| file.metadata().map(|meta| (file, meta.len())));
    if opened.is_err() {
        let _ = io.remove(held, name);
    }
    opened
}
