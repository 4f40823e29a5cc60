//! A power-loss simulator for spool tests: a [`SpoolIo`] that does everything for real and also
//! writes down, in order, each event that decides what a power cut could leave on disk, and
//! builds such a leftover from that log.
//!
//! Invariants of the model:
//! - A file's data is durable as it was when an `fdatasync` of it returned (any descriptor of
//!   an inode syncs all of its pages, so files are keyed by inode); writes and cuts after that
//!   may each reach the disk or not, page by page, in any combination, in their order.
//! - Directory entries (creates, renames, removes) reach the disk in the order they were made
//!   (a journaling file system commits them in order): every one before the last directory
//!   sync, and any prefix of those after it.
//! - A file created and never synced may have no data at all.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

use super::io::{FileIo, SpoolIo};
use crate::root::dir::Dir;
use crate::sync::Lock;

const PAGE_BYTES: u64 = 4096;

#[derive(Debug, Clone)]
enum Entry {
    Write { ino: u64, at: u64, bytes: Vec<u8> },
    SetLen { ino: u64, len: u64 },
    Synced { ino: u64, image: Vec<u8> },
    Named(NameOp),
    DirSynced,
}

#[derive(Debug, Clone)]
enum NameOp {
    Created { name: String, ino: u64 },
    Renamed { from: String, to: String },
    Removed { name: String },
}

/// The real file system, with the log of what a power cut depends on.
#[derive(Debug)]
pub(crate) struct PowerLossIo {
    log: Lock<Vec<Entry>>,
}

fn ino(file: &File) -> io::Result<u64> {
    Ok(file.metadata()?.ino())
}

impl PowerLossIo {
    pub(crate) fn new() -> Self {
        PowerLossIo {
            log: Lock::new(Vec::new()),
        }
    }

    fn note(&self, entry: Entry) {
        self.log.lock().push(entry);
    }

    /// What a power cut now could leave, drawn with `pick` (a fair coin per choice: `pick(n)`
    /// returns a number below `n`): every file name with its bytes.
    pub(crate) fn leftover(&self, pick: &mut dyn FnMut(u64) -> u64) -> BTreeMap<String, Vec<u8>> {
        let log = self.log.lock().clone();
        let last_dir_sync = log.iter().rposition(|e| matches!(e, Entry::DirSynced));
        let ops: Vec<&NameOp> = log
            .iter()
            .filter_map(|e| match e {
                Entry::Named(op) => Some(op),
                _ => None,
            })
            .collect();
        let synced_ops = last_dir_sync.map_or(0, |i| {
            log[..i]
                .iter()
                .filter(|e| matches!(e, Entry::Named(_)))
                .count()
        });
        let kept = synced_ops + pick((ops.len() - synced_ops) as u64 + 1) as usize;
        let mut names: BTreeMap<String, u64> = BTreeMap::new();
        for op in &ops[..kept] {
            match op {
                NameOp::Created { name, ino } => {
                    names.insert(name.clone(), *ino);
                }
                NameOp::Renamed { from, to } => {
                    if let Some(ino) = names.remove(from) {
                        names.insert(to.clone(), ino);
                    }
                }
                NameOp::Removed { name } => {
                    names.remove(name);
                }
            }
        }
        names
            .into_iter()
            .map(|(name, ino)| (name, contents(&log, ino, pick)))
            .collect()
    }
}

/// The bytes inode `ino` may hold after the cut: its last synced image, then each later write
/// (page by page) and cut either applied or not.
fn contents(log: &[Entry], ino: u64, pick: &mut dyn FnMut(u64) -> u64) -> Vec<u8> {
    let synced = log
        .iter()
        .rposition(|e| matches!(e, Entry::Synced { ino: i, .. } if *i == ino));
    let mut bytes = match synced.map(|i| &log[i]) {
        Some(Entry::Synced { image, .. }) => image.clone(),
        _ => Vec::new(),
    };
    for entry in &log[synced.map_or(0, |i| i + 1)..] {
        match entry {
            Entry::Write {
                ino: i,
                at,
                bytes: written,
            } if *i == ino => {
                let mut offset = *at;
                for page in written.chunks(PAGE_BYTES as usize) {
                    if pick(2) == 0 {
                        let end = offset as usize + page.len();
                        if bytes.len() < end {
                            bytes.resize(end, 0);
                        }
                        bytes[offset as usize..end].copy_from_slice(page);
                    }
                    offset += page.len() as u64;
                }
            }
            Entry::SetLen { ino: i, len } if *i == ino && pick(2) == 0 => {
                bytes.resize(*len as usize, 0);
            }
            _ => {}
        }
    }
    bytes
}

impl SpoolIo for PowerLossIo {
    fn create(&self, dir: &Dir, name: &str) -> io::Result<File> {
        let file = FileIo.create(dir, name)?;
        let ino = ino(&file)?;
        self.note(Entry::Named(NameOp::Created {
            name: name.to_owned(),
            ino,
        }));
        Ok(file)
    }
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        FileIo.write_at(file, bytes, offset)?;
        self.note(Entry::Write {
            ino: ino(file)?,
            at: offset,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        FileIo.sync_data(file)?;
        let mut image = vec![0; file.metadata()?.len() as usize];
        file.read_exact_at(&mut image, 0)?;
        self.note(Entry::Synced {
            ino: ino(file)?,
            image,
        });
        Ok(())
    }
    fn sync_dir(&self, dir: &Dir) -> io::Result<()> {
        FileIo.sync_dir(dir)?;
        self.note(Entry::DirSynced);
        Ok(())
    }
    fn rename_new(&self, dir: &Dir, from: &str, to: &str) -> io::Result<()> {
        FileIo.rename_new(dir, from, to)?;
        self.note(Entry::Named(NameOp::Renamed {
            from: from.to_owned(),
            to: to.to_owned(),
        }));
        Ok(())
    }
    fn remove(&self, dir: &Dir, name: &str) -> io::Result<()> {
        FileIo.remove(dir, name)?;
        self.note(Entry::Named(NameOp::Removed {
            name: name.to_owned(),
        }));
        Ok(())
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        FileIo.set_len(file, len)?;
        self.note(Entry::SetLen {
            ino: ino(file)?,
            len,
        });
        Ok(())
    }
}
