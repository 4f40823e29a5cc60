//! Lost and damaged output: cursor ranges no reader will get bytes for, and why.
//!
//! Two kinds, never confused:
//! - a **gap** is output the spool knows it did not keep: dropped by retention, or lost when a
//!   write or a sync failed (the disk was full, an I/O error). The writer records each such
//!   range when it happens (the supervisor journals it), so it is reported with its reason.
//! - **damage** is output the spool should hold and cannot read: a segment file missing, shorter
//!   than its cursors, or holding bytes that fail their checks. Nothing recorded it; a reader
//!   finds it.
//!
//! Invariants: cursors keep counting over both, so bytes after a hole keep the cursors they were
//! written at (a hole is never spliced over); a cursor is in at most one recorded gap; gaps are
//! kept in cursor order.

use serde::{Deserialize, Serialize};

use crate::codec::{Decode, Encode};

/// Why the bytes of a gap were not kept. The numbering is part of the journal's format
/// (the `OutputGap` event); retention is never recorded there (it is a policy, and the spool's
/// `retained_from` already says where kept output starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Encode, Decode)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum LossReason {
    /// Older than the retention window: deleted on purpose.
    Retention,
    /// A write failed with ENOSPC or EDQUOT.
    DiskFull,
    /// A write failed with another error (EIO, EFBIG, ...).
    IoError,
    /// An `fdatasync` (or the directory's `fsync`) failed: the bytes since the last successful
    /// sync may never reach the disk, whatever the page cache shows now, so they are not kept.
    SyncFailed,
}

impl LossReason {
    /// The words a user reads in a gap notice.
    pub fn text(self) -> &'static str {
        match self {
            LossReason::Retention => "retention",
            LossReason::DiskFull => "disk full",
            LossReason::IoError => "io error",
            LossReason::SyncFailed => "fsync failed",
        }
    }

    /// The reason a failed write gives its lost bytes.
    pub fn of_write(error: &std::io::Error) -> LossReason {
        match error.raw_os_error() {
            Some(enospc) if enospc == nix::errno::Errno::ENOSPC as i32 => LossReason::DiskFull,
            Some(edquot) if edquot == nix::errno::Errno::EDQUOT as i32 => LossReason::DiskFull,
            _ => LossReason::IoError,
        }
    }
}

/// A range of cursors `from..to` whose bytes were not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Encode, Decode)]
pub struct Gap {
    pub from: u64,
    pub to: u64,
    pub reason: LossReason,
    /// The error number of the failure (0 when there was none, as for retention).
    pub errno: i32,
}

impl Gap {
    pub fn len(&self) -> u64 {
        self.to - self.from
    }

    pub fn is_empty(&self) -> bool {
        self.to <= self.from
    }

    /// `disk full (ENOSPC)`: the reason with the error's name, when there was one.
    pub fn describe(&self) -> String {
        describe(self.reason, self.errno)
    }
}

/// What `gaps` lost, in one phrase for a capture status: `N bytes of output lost in G gap(s),
/// the first at cursor C: disk full (ENOSPC)`; `None` when nothing was lost. The one wording of
/// a finished process's status and a live one's in `ps`.
pub fn summary(gaps: &[Gap]) -> Option<String> {
    let first = gaps.iter().find(|g| !g.is_empty())?;
    let lost: u64 = gaps.iter().map(Gap::len).sum();
    let count = gaps.iter().filter(|g| !g.is_empty()).count();
    Some(format!(
        "{lost} bytes of output lost in {count} gap(s), the first at cursor {}: {}",
        first.from,
        first.describe()
    ))
}

/// [`Gap::describe`] of a reason and an error number.
pub fn describe(reason: LossReason, errno: i32) -> String {
    if errno == 0 {
        reason.text().to_owned()
    } else {
        format!(
            "{} ({:?})",
            reason.text(),
            nix::errno::Errno::from_raw(errno)
        )
    }
}

/// What is wrong with damaged cursors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum DamageKind {
    /// No segment file holds them (a file between two others is missing, or every file is).
    MissingFile,
    /// The segment file that should hold them ends before them, and another follows it.
    ShortFile,
    /// The last segment file ends before output the journal recorded as written.
    Truncated,
    /// The bytes are there but a chunk fails its checks (checksum, framing, cursor).
    BadChunk,
}

impl DamageKind {
    pub fn text(self) -> &'static str {
        match self {
            DamageKind::MissingFile => "missing segment file",
            DamageKind::ShortFile => "short segment file",
            DamageKind::Truncated => "truncated segment file",
            DamageKind::BadChunk => "bad chunk",
        }
    }
}

/// Whether skipped cursors were lost on purpose or by a recorded failure (a gap), or found
/// unreadable (damage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SkipKind {
    Gap,
    Damage,
}

/// Cursors `from..to` a read stepped over before its bytes, and why. Clients read it back from
/// a page (`logs` through the daemon), so it deserializes too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Skipped {
    pub from: u64,
    pub to: u64,
    pub kind: SkipKind,
    /// For a gap, why the bytes were not kept (`disk full (ENOSPC)`, `retention`); for damage,
    /// what is wrong (`missing segment file`, `bad chunk: payload checksum mismatch`).
    pub reason: String,
    /// The gap's reason, typed (absent for damage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<LossReason>,
    /// The damage's kind, typed (absent for a gap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damage: Option<DamageKind>,
}

impl Skipped {
    pub fn gap(from: u64, to: u64, reason: LossReason, errno: i32) -> Skipped {
        Skipped {
            from,
            to,
            kind: SkipKind::Gap,
            reason: describe(reason, errno),
            loss: Some(reason),
            damage: None,
        }
    }

    pub fn damage(from: u64, to: u64, damage: DamageKind, detail: Option<&str>) -> Skipped {
        Skipped {
            from,
            to,
            kind: SkipKind::Damage,
            reason: match detail {
                Some(d) => format!("{}: {d}", damage.text()),
                None => damage.text().to_owned(),
            },
            loss: None,
            damage: Some(damage),
        }
    }

    pub fn len(&self) -> u64 {
        self.to - self.from
    }

    pub fn is_empty(&self) -> bool {
        self.to <= self.from
    }

    /// The one-line notice the CLI prints: `-- N bytes lost at cursor C: disk full --`.
    pub fn notice(&self) -> String {
        let what = match self.kind {
            SkipKind::Gap => "lost",
            SkipKind::Damage => "damaged",
        };
        format!(
            "-- {} bytes {what} at cursor {}: {} --",
            self.len(),
            self.from,
            self.reason
        )
    }
}
